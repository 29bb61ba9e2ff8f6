"""Folder chores every sandbox gets through its six methods, so no backend implements them.

They run as root ("0", also through an agent user's view) inside the sandbox: a symlink the
agent planted resolves in the sandbox's own filesystem, never in the host's.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from sandlot.errors import SandboxError
from sandlot.sandbox.base import ExecResult, Sandbox, SharesFolders

_TIMEOUT_SEC = 120.0


async def make_dirs(sandbox: Sandbox, *paths: str) -> None:
    """Create folders and their parents; existing ones are fine.

    Raises: SandboxError if one cannot be made (a file in the way, a read-only or full disk).
    """
    if not paths:
        return
    result = await sandbox.exec(["mkdir", "-p", "--", *paths], user="0",
                                timeout_sec=_TIMEOUT_SEC)
    if not result.ok:
        raise SandboxError(f"cannot create {', '.join(paths)}: {_why(result)}")


async def remove_path(sandbox: Sandbox, path: str) -> None:
    """Delete a file or folder (with what is inside); a missing one is fine.

    Raises: SandboxError for the root folder or if it cannot be removed.
    """
    # Lexically normalised (not PurePosixPath: POSIX keeps a leading "//"), so "//", "/."
    # or "/app/.." cannot reach rm, and a trailing slash never follows a link to a folder.
    target = posixpath.normpath("/" + path.lstrip("/"))
    if target == "/":
        raise SandboxError(f"refusing to remove {path!r}: the sandbox's root folder")
    result = await sandbox.exec(["rm", "-rf", "--", target], user="0",
                                timeout_sec=_TIMEOUT_SEC)
    if not result.ok:
        raise SandboxError(f"cannot remove {path}: {_why(result)}")


def _why(result: ExecResult) -> str:
    """The command's own words, or at least how it ended (an empty stderr says nothing)."""
    said = (result.stderr or result.stdout).strip()[-300:]
    how = ("timed out" if result.timed_out else f"limit {result.limit_hit}" if result.limit_hit
           else f"exit {result.exit_code}")
    return f"{said} ({how})" if said else how


async def share_folder(sandbox: Sandbox, local: Path, remote: str) -> None:
    """Show a host folder at `remote`: bound read-only where the backend can (no copy per
    trial), copied in where it cannot.

    Raises: SandboxError if `local` is not a folder or the backend fails.
    """
    if not local.is_dir():
        raise SandboxError(f"cannot share {local}: not a folder")
    if isinstance(sandbox, SharesFolders):
        await sandbox.expose(local, remote)
    else:
        await sandbox.upload(local, remote)


def needs_environment_upload(environment_dir: Path, image: str | None) -> bool:
    """Harbor's rule for a prebuilt image (docker_image): with no Dockerfile or compose
    file to build, the files of environment/ are copied into the working folder."""
    if image is None or not environment_dir.is_dir():
        return False
    if any((environment_dir / name).exists() for name in (
            "Dockerfile", "docker-compose.yaml", "docker-compose.yml")):
        return False
    return any(environment_dir.iterdir())


async def upload_environment(sandbox: Sandbox, environment_dir: Path, workdir: str) -> None:
    """Copy each entry of environment/ into `workdir` (an entry of the same name there is
    replaced, as `docker cp` of the folder would)."""
    await make_dirs(sandbox, workdir)
    for entry in sorted(environment_dir.iterdir()):
        await sandbox.upload(entry, posixpath.join(workdir, entry.name))
