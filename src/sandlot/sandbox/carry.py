"""Carrying an agent's outputs into another sandbox: what a separate verifier sees of the
agent's work, and nothing else.

Both sandboxes are reached from the host (`host_path`: the local sandbox's merged root,
a container's /proc/<pid>/root). The agent's side is read as bounded_fs reads it (never
following a link, capped in entries, depth, time and bytes); the fresh side is written
by sandlot alone, so what lands there is exactly what was read:
- folders and regular files, with their owners and permission bits, minus setuid and
  setgid (a planted setuid file must not become a way up for the verifier's user);
- symbolic links whose target stays inside the carried folder (as Harbor's separate
  verifier keeps them); a link that leads out of it (`/app/out -> /tests/expected`)
  is left out and named;
- no devices, FIFOs or sockets.
Each carried folder replaces the fresh sandbox's own folder at that path whole: what the
agent deleted is gone for the verifier too. Past a cap the carry fails (CapExceeded):
a verifier shown part of the work could pass what it never saw.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from dataclasses import dataclass
from pathlib import Path

from sandlot.errors import SandboxDiskFull, SandboxError
from sandlot.hostguard import remove_tree
from sandlot.sandbox.bounded_fs import (
    DEFAULT_WALK_LIMITS,
    CapExceeded,
    Entry,
    Export,
    WalkLimits,
    open_entry,
    walk,
)

#: The most bytes of file content carried into a separate verifier, in all.
CARRY_MAX_BYTES = 2 * 1024 * 1024 * 1024
_CHUNK = 1 << 20


@dataclass(frozen=True)
class CarryLimits:
    max_bytes: int = CARRY_MAX_BYTES
    walk: WalkLimits = DEFAULT_WALK_LIMITS


DEFAULT_CARRY_LIMITS = CarryLimits()


def carry_folder(src: Path, dest: Path, sandbox_path: str, report: Export,
                 limits: CarryLimits = DEFAULT_CARRY_LIMITS) -> None:
    """Copy the agent's folder at `src` (the host's view of `sandbox_path` in its
    sandbox) to `dest` (the host's view of the same path in the fresh one), replacing
    what is there. Counts into `report` (bytes, files; what was left out, why).

    Raises: CapExceeded past a limit; SandboxDiskFull when the fresh sandbox's disk is
    full; SandboxError when a write fails otherwise."""
    try:
        top = os.lstat(src)
    except FileNotFoundError:
        return  # nothing there: nothing to carry
    if not stat.S_ISDIR(top.st_mode):
        report.note(f"{sandbox_path}: not a folder in the agent's sandbox; not carried")
        return
    try:
        if os.path.lexists(dest):
            remove_tree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.mkdir()
        _finish(dest, top)
        for entry in walk(src, limits.walk):
            _carry_entry(entry, dest / entry.path.lstrip("/"), sandbox_path, report,
                         limits.max_bytes)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise SandboxDiskFull(f"the agent's outputs in {sandbox_path} do not fit on "
                                  "the verifier's disk") from exc
        raise SandboxError(f"cannot carry {sandbox_path} into the verifier's sandbox: "
                           f"{exc}") from exc


def _carry_entry(entry: Entry, target: Path, root: str, report: Export,
                 max_bytes: int) -> None:
    mode = entry.stat.st_mode
    where = posixpath.join(root, entry.path.lstrip("/"))
    if stat.S_ISDIR(mode):
        target.mkdir()
    elif stat.S_ISLNK(mode):
        link = os.readlink(entry.name, dir_fd=entry.dir_fd)
        if not link_stays_inside(where, link, root):
            report.note(f"{where}: a link to {link}, outside {root}; not carried")
            return
        os.symlink(link, target)
    elif stat.S_ISREG(mode):
        if report.bytes + entry.stat.st_size > max_bytes:
            raise CapExceeded(f"outputs of more than {max_bytes} bytes", where)
        if not _copy_file(entry, target, report, max_bytes):
            return
    else:
        report.note(f"{where}: not a regular file, folder or link; not carried")
        return
    _finish(target, entry.stat)


def _copy_file(entry: Entry, target: Path, report: Export, max_bytes: int) -> bool:
    """The file's bytes, read through its folder's descriptor without following a link;
    False when it turned into something else meanwhile."""
    fd = open_entry(entry)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                      | os.O_CLOEXEC, 0o600)
        try:
            while True:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                report.bytes += len(chunk)
                if report.bytes > max_bytes:  # it grew meanwhile
                    raise CapExceeded(f"outputs of more than {max_bytes} bytes", entry.path)
                os.write(out, chunk)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    report.files += 1
    return True


def _finish(target: Path, st: os.stat_result) -> None:
    """The source's owner, permission bits (no setuid/setgid) and times on `target`."""
    os.chown(target, st.st_uid, st.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(target, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def link_stays_inside(link_path: str, target: str, folder: str) -> bool:
    """Does the link at `link_path` (a path in the sandbox) pointing at `target` lead to
    `folder` or below, read as written (a link is judged by its own text alone: every
    other link inside the folder is judged the same way)?"""
    resolved = posixpath.normpath(target if target.startswith("/") else
                                  posixpath.join(posixpath.dirname(link_path), target))
    folder = posixpath.normpath(folder)
    return resolved == folder or resolved.startswith(folder.rstrip("/") + "/")
