"""Replaying a task's Dockerfile on the local sandbox, cached as overlay layers.

The first trial of a task runs its COPY/ADD and RUN steps in throw-away sandboxes whose
overlay upper directories become read-only layers; later trials (and later jobs) stack
their own upper on them, so they do not pay for `apt-get install` again. On a pulled
image each step is a layer of its own, keyed by its parent and its inputs (`step_key`):
tasks that start with the same steps share them. On the host's root the whole build is
one layer (`layer_key`), as overlay stacks only one layer over the host's root.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import json
import os
import posixpath
import tarfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from sandlot.errors import ErrorKind, TrialError
from sandlot.hostguard import remove_tree
from sandlot.locks import file_lock
from sandlot.sandbox.base import SandboxSpec
from sandlot.sandbox.tree_copy import RootOf, copy_into_root, folder_inside
from sandlot.tasks.dockerfile import CopyStep, DockerfilePlan, RunStep, Step

#: Bump when the replay's semantics change, so old cached layers are not reused.
REPLAY_VERSION = "2"
#: The same for the per-step layers of a build on an image (step_key).
STEP_VERSION = "1"
LOG_TAIL = 3000

StartSandbox = Callable[[SandboxSpec, Path, Path], Coroutine[Any, Any, Any]]


def layer_key(digest: str, plan: DockerfilePlan, base: str) -> str:
    """The cached build of environment/ (`digest`) on `base`: the manifest digest of the
    image it was replayed on, or "host" / "host-fallback" for the host's root."""
    h = hashlib.sha256(f"{REPLAY_VERSION}\0{digest}\0{plan.base_image}\0{base}".encode())
    # The steps as parsed: another --build-arg makes other commands and environments.
    h.update(json.dumps([[s.argv, sorted(s.env.items())] for s in plan.steps
                         if isinstance(s, RunStep)]).encode())
    return h.hexdigest()[:24]


def step_key(parent: str, step: Step, env_dir: Path, source: str | None = None) -> str:
    """The cached layer of one Dockerfile step on `parent` (the image's manifest digest,
    or the previous step's key): the instruction as parsed (command, environment, folder,
    user) and, for COPY/ADD, the bytes, modes and names of the files it copies, or for
    `COPY --from` the key of what it copies from (`source`: the stage's last layer, or the
    image's digest). Tasks whose Dockerfiles share their first steps share those layers."""
    h = hashlib.sha256(f"{STEP_VERSION}\0{parent}\0".encode())
    if isinstance(step, RunStep):
        h.update(json.dumps(["RUN", step.argv, sorted(step.env.items()), step.workdir,
                             step.user, step.network, step.stdin]).encode())
    else:
        h.update(json.dumps(["COPY", step.sources, step.dest, step.workdir, step.extract,
                             step.chown, step.chmod, step.inline, source]).encode())
        if step.from_context:
            for path in copy_sources(env_dir, step):
                _hash_path(h, path, env_dir)
    return h.hexdigest()[:32]


def _hash_path(h: Any, path: Path, env_dir: Path) -> None:
    """Names, modes, link targets and bytes below `path` (what a COPY of it would write)."""
    paths = [path] + (sorted(path.rglob("*")) if path.is_dir() and not path.is_symlink()
                      else [])
    for entry in paths:
        try:
            rel = entry.relative_to(env_dir).as_posix()
        except ValueError:
            rel = str(entry)
        h.update(rel.encode() + b"\0")
        if entry.is_symlink():
            h.update(b"L" + os.readlink(entry).encode())
        elif entry.is_file():
            h.update(oct(entry.stat().st_mode & 0o7777).encode())
            with entry.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        elif entry.is_dir():
            h.update(b"D" + oct(entry.stat().st_mode & 0o7777).encode())
        h.update(b"\0")


def copy_sources(env_dir: Path, step: CopyStep) -> list[Path]:
    """The paths a COPY/ADD names in environment/, its globs expanded (sorted)."""
    sources: list[Path] = []
    for src in step.sources:
        if any(ch in src for ch in "*?["):
            sources += sorted(Path(p) for p in glob.glob(str(env_dir / src)))
        else:
            sources.append(env_dir / src)
    return sources


def _context_sources(env_dir: Path, step: CopyStep) -> list[Path]:
    """A COPY's sources in environment/, links followed; none may lead out of it."""
    env_root = env_dir.resolve()
    sources = []
    for src in copy_sources(env_dir, step):
        if not src.resolve().is_relative_to(env_root):
            raise TrialError(ErrorKind.BUILD_FAILED,
                             f"COPY source {src} is outside environment/", "setup")
        sources.append(src.resolve())
    return sources


def _stage_sources(source_of: RootOf, step: CopyStep, where: str) -> list[Path]:
    """A `COPY --from`'s sources in the stage or image (`source_of` resolves inside its
    root), globs expanded and links followed as that root would follow them."""
    root = source_of("/")
    sources: list[Path] = []
    for pattern in step.sources:
        paths = ["/" + m for m in sorted(glob.glob(pattern.lstrip("/"), root_dir=root))] \
            if any(ch in pattern for ch in "*?[") else [pattern]
        if not paths:
            raise TrialError(ErrorKind.BUILD_FAILED, f"Dockerfile line {step.line}: COPY "
                             f"--from: nothing in {where} matches {pattern}", "setup")
        for path in paths:
            found = _follow_inside(source_of, root, path)
            if not os.path.lexists(found):
                raise TrialError(ErrorKind.BUILD_FAILED, f"Dockerfile line {step.line}: "
                                 f"COPY --from: {path} does not exist in {where}", "setup")
            sources.append(found)
    return sources


def _follow_inside(source_of: RootOf, root: Path, path: str, max_links: int = 40) -> Path:
    """`path` inside the root, its last component followed too if it is a link."""
    found = source_of(path)
    for _ in range(max_links):
        if not found.is_symlink():
            return found
        inside = "/" + str(found.relative_to(root))
        found = source_of(posixpath.join(posixpath.dirname(inside), os.readlink(found)))
    raise TrialError(ErrorKind.BUILD_FAILED, f"COPY --from: too many links at {path}", "setup")


def _copy_into(root_of: RootOf, env_dir: Path, step: CopyStep,
               source_of: RootOf | None = None, where: str = "") -> list[str]:
    """Docker's COPY rules: a folder's contents, files into a folder or onto a path. The
    sources are environment/'s, or with `source_of` a stage's or an image's (`where`
    names it), whose owners are kept as COPY --from keeps them."""
    sources = (_context_sources(env_dir, step) if source_of is None
               else _stage_sources(source_of, step, where))
    into_dir = step.dest.endswith("/") or len(sources) + len(step.inline) > 1
    written: list[str] = []
    for name, content in step.inline:  # heredoc files: `COPY <<EOF /etc/x`
        dest_rel = step.dest.rstrip("/") + "/" + name if (
            into_dir or folder_inside(root_of, step.dest).is_dir()) else step.dest
        target = root_of(dest_rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_text(content)
        target.chmod(0o644)
        written.append(dest_rel)
    for src in sources:
        if step.extract and source_of is None and tarfile.is_tarfile(src):
            dest = folder_inside(root_of, step.dest)
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(src) as archive:
                archive.extractall(dest, filter="data")
            written.append(step.dest)
            continue
        dest_rel = step.dest.rstrip("/") or "/"
        if not src.is_dir() and (into_dir or folder_inside(root_of, step.dest).is_dir()):
            dest_rel = step.dest.rstrip("/") + "/" + src.name
        copy_into_root(src, root_of, dest_rel, keep_owner=source_of is not None)
        written.append(dest_rel)
    return written


async def replay_dockerfile(sandbox: Any, plan: DockerfilePlan, env_dir: Path,
                            timeout_sec: float, log: list[str],
                            source: Any | None = None, where: str = "") -> None:
    """Run the plan's steps in a started LocalSandbox; a `COPY --from` step copies from
    `source` (a started LocalSandbox of that stage or image, which `where` names). Raises
    TrialError BUILD_*."""
    deadline = time.monotonic() + timeout_sec
    for step in plan.steps:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TrialError(ErrorKind.BUILD_TIMEOUT,
                             f"the Dockerfile's steps took longer than {timeout_sec:g}s "
                             "(build_timeout_sec)", "setup")
        if isinstance(step, CopyStep):
            await sandbox.exec(["mkdir", "-p", step.workdir], timeout_sec=30)
            if not step.from_context and source is None:
                raise TrialError(ErrorKind.BUILD_FAILED, f"Dockerfile line {step.line}: "
                                 "COPY --from without its stage", "setup")
            written = await asyncio.to_thread(
                _copy_into, sandbox.host_path, env_dir, step,
                None if step.from_context else source.host_path, where)
            log.append(f"COPY {'--from=' + where + ' ' if where else ''}"
                       f"{' '.join(step.sources)} -> {step.dest}")
            if step.chmod:
                await sandbox.exec(["chmod", "-R", step.chmod, *written], timeout_sec=60)
            if step.chown:
                await sandbox.exec(["chown", "-R", step.chown, *written], timeout_sec=60)
            continue
        assert isinstance(step, RunStep)
        await sandbox.exec(["mkdir", "-p", step.workdir], timeout_sec=30)
        result = await sandbox.exec(step.argv, timeout_sec=remaining, env=step.env,
                                    cwd=step.workdir, network=step.network, user=step.user,
                                    stdin=None if step.stdin is None else step.stdin.encode())
        log.append(f"RUN (line {step.line}) {' '.join(step.argv)}\n{result.stdout}{result.stderr}")
        if result.timed_out:
            raise TrialError(ErrorKind.BUILD_TIMEOUT,
                             f"Dockerfile line {step.line} did not finish within the build "
                             f"timeout ({timeout_sec:g}s)", "setup")
        if result.exit_code != 0:
            tail = (result.stdout + result.stderr).strip()[-LOG_TAIL:]
            raise TrialError(ErrorKind.BUILD_FAILED,
                             f"Dockerfile line {step.line} exited {result.exit_code}: {tail}",
                             "setup")


class LayerCache:
    """Cached Dockerfile layers under `root`, built once per key (in-process and cross-process)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, asyncio.Lock] = {}

    def path(self, key: str) -> Path:
        return self.root / key / "upper"

    async def get(self, key: str, build: Callable[[Path], Coroutine[Any, Any, None]]) -> Path:
        """The layer for `key`, calling `build(upper_dir)` first if it is not cached."""
        final = self.path(key)
        if final.is_dir():
            return final
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if final.is_dir():
                return final
            self.root.mkdir(parents=True, exist_ok=True)
            async with file_lock(self.root / f"{key}.lock"):
                if final.is_dir():
                    return final
                staging = self.root / f".build-{os.getpid()}-{key}"
                remove_tree(staging, ignore_errors=True)
                staging.mkdir(parents=True)
                try:
                    await build(staging / "upper")
                    final.parent.mkdir(parents=True, exist_ok=True)
                    os.rename(staging / "upper", final)
                finally:
                    await asyncio.to_thread(remove_tree, staging, ignore_errors=True)
        return final
