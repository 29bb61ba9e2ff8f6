"""Atomic file writes: a crash leaves either the old file or the new one, never half."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel


def write_atomic(path: Path, data: str | bytes, *, durable: bool = True) -> None:
    """Write to a temp file in the same directory, then rename over `path`.

    `durable` fsyncs first, so the new file survives a crash of the machine too (a
    trial's final result.json, what resume trusts). Logs and files recomputed on resume
    skip it: the rename alone is atomic against a crash of sandlot, and an fsync costs
    ~2 ms of the event loop on a virtual disk, several times per trial.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_model(path: Path, model: BaseModel, *, durable: bool = True) -> None:
    write_atomic(path, model.model_dump_json(indent=2) + "\n", durable=durable)


def write_json(path: Path, obj: object) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def copy_out(src: Path, dst: Path) -> None:
    """Copy what a sandbox wrote (`src`, on the host) to `dst` as plain data: regular
    files and folders only, every symlink replaced by a note of its target, no setuid,
    setgid or sticky bit, nothing that is not a file (a FIFO, a socket) kept. Written
    inside a sandbox by its root, such things would act on the host. Iterative: a tree
    of any depth is copied without recursion."""
    dst.mkdir(parents=True, exist_ok=True)
    if not src.is_dir() or src.is_symlink():
        return
    todo = [(src, dst)]
    while todo:
        here, there = todo.pop()
        for entry in os.scandir(here):
            target = there / entry.name
            if entry.is_symlink():
                target.write_text(f"[a symlink in the sandbox, to {os.readlink(entry.path)}]\n")
            elif entry.is_dir(follow_symlinks=False):
                target.mkdir()
                todo.append((Path(entry.path), target))
            elif entry.is_file(follow_symlinks=False):
                shutil.copyfile(entry.path, target, follow_symlinks=False)
                target.chmod(entry.stat(follow_symlinks=False).st_mode & 0o777)
