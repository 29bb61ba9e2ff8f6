"""Copy files into a sandbox's root from the host side, as a Dockerfile's COPY does.

Every destination path is resolved inside the sandbox's root (`root_of`, e.g.
LocalSandbox.host_path): an image's own symlink (`/lib -> usr/lib`, or `/opt/x -> /etc/x`)
is followed as the sandbox would follow it, never to the host's files, and a link in the
way of a file is replaced, never written through. Walks are iterative: a deep tree cannot
exhaust the stack.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from sandlot.errors import ErrorKind, TrialError

#: Where a path of the sandbox is on the host, its symlinks but the last resolved inside.
RootOf = Callable[[str], Path]


def folder_inside(root_of: RootOf, path: str) -> Path:
    """`path` as a folder: every symlink on the way resolved inside, the last one too."""
    return root_of(path.rstrip("/") + "/_").parent


def copy_into_root(source: Path, root_of: RootOf, dest: str, *, keep_owner: bool) -> None:
    """Copy `source` (a file, a link, or a folder whose contents go into `dest`) to the
    sandbox path `dest`. `keep_owner` keeps each entry's owner (COPY --from); otherwise
    what is copied is root's (COPY from the build context). Modes and times are kept."""
    todo: list[tuple[Path, str]] = [(source, dest)]
    while todo:
        src, target_path = todo.pop()
        info = os.lstat(src)
        if stat.S_ISDIR(info.st_mode):
            folder = folder_inside(root_of, target_path)
            if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                _remove(folder, target_path)
            if not folder.exists():
                folder.mkdir(parents=True)
                _metadata(folder, info, keep_owner)
            for child in sorted(os.listdir(src), reverse=True):
                todo.append((src / child, target_path.rstrip("/") + "/" + child))
            continue
        target = root_of(target_path)
        if target.is_symlink() or target.exists():
            _remove(target, target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(src), target)
        elif stat.S_ISREG(info.st_mode):
            shutil.copyfile(src, target, follow_symlinks=False)
        elif stat.S_ISFIFO(info.st_mode):
            os.mkfifo(target)
        elif stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            os.mknod(target, info.st_mode, info.st_rdev)
        else:
            continue  # a socket: nothing to copy
        _metadata(target, info, keep_owner)


def _remove(path: Path, shown: str) -> None:
    """Clear the way for a copy: a link or a file goes; a folder where a file should be
    is the Dockerfile's mistake."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    raise TrialError(ErrorKind.BUILD_FAILED,
                     f"COPY cannot put a file where the folder {shown} is", "setup")


def _metadata(target: Path, info: os.stat_result, keep_owner: bool) -> None:
    """The source's owner (then its mode: a chown clears setuid bits) and times."""
    if keep_owner:
        os.lchown(target, info.st_uid, info.st_gid)
    if not stat.S_ISLNK(info.st_mode):
        os.chmod(target, stat.S_IMODE(info.st_mode))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)
