"""Reading files an agent made, from the host side, without trusting them.

Whatever sandlot reads of a sandbox (its overlay's upper folder, a diff's files) is the
agent's: a link may point at the host's files, a folder may be a million levels deep, a
file may be sparse (terabytes that take no disk) or a FIFO that blocks its reader. So
every walk here is iterative and descends through folder file descriptors opened with
O_NOFOLLOW (a link never leads out, even one swapped in mid-walk), every read opens with
O_NOFOLLOW | O_NONBLOCK and reads only regular files, a file's length is checked before a
byte is read (a sparse file's holes read as zeros), and counts, depth, bytes and time are
capped. Hitting a cap raises CapExceeded: the caller cannot trust what it did not see, so
the trial fails closed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sandlot.errors import Unverifiable

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class CapExceeded(Unverifiable):
    """A walk or read went past a limit; `path` is where (inside the walked root)."""


@dataclass(frozen=True)
class WalkLimits:
    """How much of an agent's tree sandlot reads before it stops trusting it."""

    max_entries: int = 200_000
    max_depth: int = 256
    #: Seconds a walk may take; a tree that takes longer is not one an honest task makes.
    max_seconds: float = 60.0


DEFAULT_WALK_LIMITS = WalkLimits()


@dataclass(frozen=True)
class Entry:
    """One entry of a walk: its path inside the root ("/a/b"), its lstat, and its
    folder's descriptor (valid only until the walk goes on: open or readlink the entry
    by `name` relative to it, never by path)."""

    path: str
    stat: os.stat_result
    dir_fd: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.stat.st_mode)


def walk(root: Path, limits: WalkLimits = DEFAULT_WALK_LIMITS) -> Iterator[Entry]:
    """Every entry below `root` (not `root` itself), parents before children, in no
    set order; links are entries, never followed. Holds one open folder per level (at
    most max_depth) and at most max_entries names. Raises CapExceeded past a limit,
    OSError if `root` cannot be opened as a folder."""
    deadline = time.monotonic() + limits.max_seconds
    count = 0
    top = os.open(root, _DIR_FLAGS)
    # The open folders of the current branch: (fd, its path, its entries left). Each fd
    # is closed exactly once: a second close could hit another thread's file.
    stack: list[tuple[int, str, Iterator[tuple[str, os.stat_result]]]] = []
    try:
        stack.append((top, "", _listing(top, limits.max_entries)))
    except OSError:
        os.close(top)
        raise
    try:
        while stack:
            fd, folder, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(stack.pop()[0])
                continue
            name, st = entry
            path = f"{folder}/{name}"
            count += 1
            if count > limits.max_entries:
                raise CapExceeded(f"more than {limits.max_entries} entries", path)
            if count % 1024 == 0 and time.monotonic() > deadline:
                raise CapExceeded(f"a walk longer than {limits.max_seconds:g}s", path)
            yield Entry(path, st, fd)
            if not stat.S_ISDIR(st.st_mode):
                continue
            if len(stack) >= limits.max_depth:
                raise CapExceeded(f"folders nested deeper than {limits.max_depth}", path)
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    continue  # swapped for a link or a file meanwhile: not followed
                raise
            try:
                stack.append((child, path, _listing(child, limits.max_entries - count)))
            except OSError:
                os.close(child)
                raise
    finally:
        for fd, _, _ in stack:
            with contextlib.suppress(OSError):
                os.close(fd)


def open_entry(entry: Entry) -> int:
    """A read-only descriptor of the walk's `entry`, opened by name in its folder without
    following a link or blocking on a FIFO (check with fstat that it is a regular file)."""
    return os.open(entry.name, _FILE_FLAGS, dir_fd=entry.dir_fd)


def _listing(fd: int, budget: int) -> Iterator[tuple[str, os.stat_result]]:
    """The folder's names and lstats, read at once (its listing's own descriptor closed
    before the walk goes on), at most budget + 1 of them: one more than the walk can
    take is enough for it to raise CapExceeded."""
    out: list[tuple[str, os.stat_result]] = []
    with os.scandir(fd) as listing:
        for entry in listing:
            try:
                out.append((entry.name, entry.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue  # gone meanwhile
            if len(out) > budget:
                break
    return iter(out)


def read_regular(root: Path, path: str, max_bytes: int) -> bytes | None:
    """The bytes of the regular file at `path` inside `root`, every component opened
    without following links; None when it is not a regular file (a link, a FIFO, a
    device, a socket, a folder) or is gone. Raises CapExceeded when it holds more than
    `max_bytes` (by length, or by the blocks a sparse file claims)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    fds: list[int] = []
    try:
        try:
            # `root` is the caller's and may itself be a link (/proc/<pid>/root):
            # followed; nothing below it is.
            fds.append(os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW))
            for part in parts[:-1]:
                fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
            fds.append(os.open(parts[-1], _FILE_FLAGS, dir_fd=fds[-1]))
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO,
                             errno.EACCES, errno.EISDIR):
                return None
            raise
        return _read_capped(fds[-1], path, max_bytes)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _read_capped(fd: int, path: str, max_bytes: int) -> bytes | None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return None
    # Its length, not its blocks: a sparse file reads as its whole length of zeros.
    if st.st_size > max_bytes:
        raise CapExceeded(f"a file of {st.st_size} bytes (more than {max_bytes})", path)
    data = b"".join(_chunks(fd, max_bytes + 1))
    if len(data) > max_bytes:  # it grew meanwhile
        raise CapExceeded(f"a file of more than {max_bytes} bytes", path)
    return data


def _chunks(fd: int, limit: int) -> Iterator[bytes]:
    """At most `limit` bytes of `fd`, a MiB at a time (a file that grows while it is
    read yields no more than `limit`)."""
    while limit > 0:
        chunk = os.read(fd, min(limit, 1 << 20))
        if not chunk:
            return
        limit -= len(chunk)
        yield chunk


def exists_inside(root: Path, path: str) -> bool:
    """Is there an entry (of any kind, a link included) at `path` inside `root`, found
    without following a link on the way?"""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        return False
    fds: list[int] = []
    try:
        fds.append(os.open(root, _DIR_FLAGS))
        for part in parts[:-1]:
            fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
        if parts:
            os.stat(parts[-1], dir_fd=fds[-1], follow_symlinks=False)
        return True
    except OSError:
        return False
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


#: At most this many notes of what an export left out (then a count of the rest).
_MAX_NOTES = 50


@dataclass
class Export:
    """What export_tree copied, and what it left out and why."""

    files: int = 0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)
    left_out: int = 0

    def note(self, text: str) -> None:
        self.left_out += 1
        if len(self.notes) < _MAX_NOTES:
            self.notes.append(text)

    def summary(self) -> str:
        """The notes as lines, for a file beside the copy."""
        more = self.left_out - len(self.notes)
        return "".join(f"{n}\n" for n in self.notes) + (f"... and {more} more\n" if more else "")


def export_tree(src: Path, dest: Path, max_bytes: int,
                limits: WalkLimits = DEFAULT_WALK_LIMITS,
                exclude: Callable[[str], bool] | None = None) -> Export:
    """Copy the agent's folder `src` (its last component not followed) to `dest` as
    plain data, at most `max_bytes` of file contents: folders and regular files (mode
    bits 0o755 at most, no setuid), every link a note of its target, FIFOs, sockets and
    devices left out, a file past the budget left out whole. What was left out is in the
    returned Export's notes; a walk cap stops the copy there (what was copied stays).
    `exclude(path)` true skips an entry ("/a/b"), a folder with all below it."""
    report = Export()
    dest.mkdir(parents=True, exist_ok=True)
    skipped: list[str] = []
    try:
        for entry in walk(src, limits):
            if exclude is not None:
                if any(entry.path.startswith(f"{s}/") for s in skipped):
                    continue
                if exclude(entry.path):
                    if entry.is_dir:
                        skipped.append(entry.path)
                    continue
            target = dest / entry.path.lstrip("/")
            try:
                _export_entry(entry, target, max_bytes, report)
            except OSError as exc:
                report.note(f"{entry.path}: {exc.strerror or exc}; not copied")
    except CapExceeded as exc:
        report.note(f"stopped: {exc}")
    except OSError as exc:
        report.note(f"{src.name}: {exc.strerror or exc}; nothing copied")
    return report


def _export_entry(entry: Entry, target: Path, max_bytes: int, report: Export) -> None:
    mode = entry.stat.st_mode
    if stat.S_ISDIR(mode):
        target.mkdir(exist_ok=True)
    elif stat.S_ISLNK(mode):
        link = os.readlink(entry.name, dir_fd=entry.dir_fd)
        target.write_text(f"[a symlink in the sandbox, to {link}]\n")
    elif not stat.S_ISREG(mode):
        report.note(f"{entry.path}: not a regular file; not copied")
    elif report.bytes + entry.stat.st_size > max_bytes:
        report.note(f"{entry.path}: {entry.stat.st_size} bytes, past the {max_bytes}-byte "
                    "cap; not copied")
    else:
        fd = open_entry(entry)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return  # swapped meanwhile
            with open(target, "wb") as out:
                for chunk in _chunks(fd, max_bytes - report.bytes):
                    out.write(chunk)
                    report.bytes += len(chunk)
            target.chmod(entry.stat.st_mode & 0o755)
            report.files += 1
        finally:
            os.close(fd)
