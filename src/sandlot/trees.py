"""Measuring and deleting a tree an agent made, whatever shape it left it in.

A sandbox's scratch folder holds what the agent wrote: folders nested thousands deep
(shutil.rmtree recurses, and raises RecursionError past ~1000 levels on Python 3.11),
files marked immutable or append-only, folders without write or search permission,
FIFOs and sockets. `remove_tree_iteratively` walks down by directory file descriptor and
back up by "..", checked against the inode it came from, so its memory and its open
descriptors stay constant at any depth; it never follows a link and never leaves the
file system it started on. hostguard.remove_tree calls it after its mount check.
`disk_usage` measures such a tree without recursion (os.walk recurses on Python 3.11).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# <linux/fs.h>: _IOR('f', 1, long) and _IOW('f', 2, long) on 64-bit Linux.
_FS_IOC_GETFLAGS = 0x80086601
_FS_IOC_SETFLAGS = 0x40086602
_FS_IMMUTABLE_FL = 0x00000010
_FS_APPEND_FL = 0x00000020


class TreeChanged(OSError):
    """The tree moved or crossed onto another file system while it was being removed."""


def remove_tree_iteratively(path: Path) -> None:
    """Delete the folder `path` and everything below it (see the module's docstring).
    Raises OSError (TreeChanged among them) for what it could not remove."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        top = os.fstat(fd)
        ids = [(top.st_dev, top.st_ino)]
        names: list[str] = []
        while True:
            child = _clear_files(fd)
            if child is not None:
                new = _open_dir(child, fd)
                st = os.fstat(new)
                if st.st_dev != top.st_dev:
                    os.close(new)
                    raise TreeChanged(errno.EXDEV, f"a mount inside {path} at {child}")
                os.close(fd)
                fd = new
                names.append(child)
                ids.append((st.st_dev, st.st_ino))
                continue
            if not names:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            st = os.fstat(parent)
            os.close(fd)
            fd = parent
            ids.pop()
            if (st.st_dev, st.st_ino) != ids[-1]:
                raise TreeChanged(errno.ESTALE, f"{path} changed while it was removed")
            name = names.pop()
            _retry_unfrozen(os.rmdir, fd, name)
    finally:
        os.close(fd)
    _unfreeze_path(path)
    os.rmdir(path)


def _clear_files(fd: int) -> str | None:
    """Unlink every entry of the folder `fd` but folders; returns one folder's name (to
    descend into) or None once the folder is empty."""
    with os.scandir(fd) as listing:
        for entry in listing:
            if entry.is_dir(follow_symlinks=False):
                return entry.name
            _retry_unfrozen(os.unlink, fd, entry.name)
    return None


def _open_dir(name: str, parent: int) -> int:
    """The folder `name` below `parent`, made searchable first if its mode forbids it."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
        return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _retry_unfrozen(remove: Callable[..., None], parent: int, name: str) -> None:
    """`remove(name, dir_fd=parent)`; on EPERM (an immutable or append-only entry or
    folder) clear those flags on the folder and the entry, and try once more."""
    try:
        remove(name, dir_fd=parent)
        return
    except FileNotFoundError:
        return
    except PermissionError:
        pass
    _unfreeze_fd(parent)
    with contextlib.suppress(OSError):
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
            entry = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                            dir_fd=parent)
            try:
                _unfreeze_fd(entry)
            finally:
                os.close(entry)
    if not os.access(f"/proc/self/fd/{parent}", os.W_OK | os.X_OK):
        with contextlib.suppress(OSError):
            os.fchmod(parent, 0o700)
    remove(name, dir_fd=parent)


def _unfreeze_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        flags = struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("l", 0)))[0]
        if flags & (_FS_IMMUTABLE_FL | _FS_APPEND_FL):
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS,
                        struct.pack("l", flags & ~(_FS_IMMUTABLE_FL | _FS_APPEND_FL)))


def _unfreeze_path(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, _DIR_FLAGS)
        try:
            _unfreeze_fd(fd)
        finally:
            os.close(fd)
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, _DIR_FLAGS)
        try:
            _unfreeze_fd(fd)
        finally:
            os.close(fd)


def disk_usage(path: Path) -> int:
    """Bytes `path` takes on disk (a file, or a folder's whole tree; links not followed,
    at any depth); 0 when it is gone."""
    try:
        st = path.lstat()
    except OSError:
        return 0
    total = st.st_blocks * 512
    folders = [str(path)] if stat.S_ISDIR(st.st_mode) else []
    while folders:
        try:
            listing = os.scandir(folders.pop())
        except OSError:
            continue
        with listing:
            for entry in listing:
                with contextlib.suppress(OSError):
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
    return total
