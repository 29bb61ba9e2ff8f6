"""Installing an agent's npm package into sandlot's cache, once per version.

`<cache>/agents/<name>/<version>/` holds `node_modules/` and a marker file written last.
The install runs in sandlot's own process (host side) with the user's npm and its
configuration; sandboxes only ever see the finished folder, read-only. Concurrent jobs
share one install through a file lock; a killed install leaves only a temp folder, which
the next install removes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from sandlot.hostguard import remove_tree, signal_child_group
from sandlot.locks import file_lock
from sandlot.sandbox.procutil import die_with_sandlot

MARKER = ".sandlot-installed.json"
INSTALL_TIMEOUT_SEC = 900.0
STDERR_TAIL_CHARS = 3000
#: An exact version or a dist-tag (also a folder name): never a path, a flag or a range.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_\-]*$")


class AgentInstallError(Exception):
    """An agent could not be installed; the message says what to install or change."""


def installed_dir(cache_dir: Path, name: str, version: str) -> Path:
    return cache_dir / "agents" / name / version


def is_installed(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def installed_version(folder: Path, fallback: str) -> str:
    """The version the install marker records (a dist-tag resolves to one), else `fallback`."""
    try:
        marker = json.loads((folder / MARKER).read_text())
        return str(marker.get("version") or fallback)
    except (OSError, ValueError):
        return fallback


async def install_npm_package(cache_dir: Path, name: str, package: str, version: str,
                              *, timeout_sec: float = INSTALL_TIMEOUT_SEC) -> Path:
    """Install `package@version` under `<cache_dir>/agents/<name>/<version>` unless it is there.

    Args:
        cache_dir: sandlot's cache folder.
        name: the agent's folder name (e.g. "pi").
        package: the npm package name (e.g. "@mariozechner/pi-coding-agent").
        version: an exact version (e.g. "0.73.1"), or a dist-tag such as "latest", which
            is installed once and then reused as it was (delete the folder to refresh).
    Returns: the folder holding `node_modules/`.
    Raises: AgentInstallError when node/npm are missing, the version is malformed or npm
        fails (with the tail of npm's stderr).
    """
    if not _NAME.match(name) or not _NAME.match(version):
        raise AgentInstallError(f"cannot install {package}@{version!r}: give an exact "
                                "version such as 0.73.1 (or a dist-tag such as latest)")
    target = installed_dir(cache_dir, name, version)
    if is_installed(target):
        return target
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise AgentInstallError(
                f"`{tool}` was not found on PATH, and the {name} agent needs it to install "
                f"{package}: install Node.js 20+ and npm (e.g. `apt-get install nodejs npm`), "
                "then run again")
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    async with file_lock(parent / f".{version}.lock"):
        if is_installed(target):  # another process finished it while we waited
            return target
        await asyncio.to_thread(_remove_stale, parent, version, target)
        tmp = parent / f".tmp-{version}-{os.getpid()}-{time.monotonic_ns()}"
        tmp.mkdir()
        try:
            resolved = await _npm_install(tmp, package, version, timeout_sec)
            marker = {"package": package, "requested": version, "version": resolved,
                      "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            os.rename(tmp, target)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(remove_tree, tmp, ignore_errors=True))
            raise
    return target


def _remove_stale(parent: Path, version: str, target: Path) -> None:
    """Under the lock: earlier killed installs' temp folders and unfinished targets."""
    for leftover in parent.glob(f".tmp-{version}-*"):
        remove_tree(leftover, ignore_errors=True)
    if target.exists() and not is_installed(target):
        remove_tree(target, ignore_errors=True)


async def _npm_install(prefix: Path, package: str, version: str, timeout_sec: float) -> str:
    argv = ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
            "--omit=dev", "--no-progress", "--no-update-notifier", f"{package}@{version}"]
    env = {**os.environ, "npm_config_update_notifier": "false"}
    proc = await asyncio.create_subprocess_exec(
        *die_with_sandlot(argv), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
    try:
        async with asyncio.timeout(timeout_sec):
            _, err = await proc.communicate()
    except BaseException as exc:
        signal_child_group(proc.pid, signal.SIGKILL)
        await asyncio.shield(proc.wait())
        if isinstance(exc, TimeoutError):
            raise AgentInstallError(f"`npm install {package}@{version}` did not finish within "
                                    f"{timeout_sec:g}s; check npm's network access (npm "
                                    "config get registry) and try again") from None
        raise
    stderr = err.decode(errors="replace").strip()
    if proc.returncode != 0:
        raise AgentInstallError(
            f"`npm install {package}@{version}` failed (exit {proc.returncode}); is the "
            f"version published and npm's registry reachable (npm config get registry)? "
            f"npm said:\n{stderr[-STDERR_TAIL_CHARS:]}")
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError) as exc:
        raise AgentInstallError(f"npm installed {package}@{version} but {manifest} is "
                                f"missing or unreadable ({exc}); npm said:\n"
                                f"{stderr[-STDERR_TAIL_CHARS:]}") from None


async def require_node(sandbox: Any, need: tuple[int, int], who: str) -> None:
    """Check that `node` inside the sandbox is at least `need` (major, minor).

    Raises: TrialError AGENT_ERROR saying what was found and where to install it.
    """
    from sandlot.errors import ErrorKind, TrialError

    result = await sandbox.exec(
        ["node", "-e", "process.stdout.write(process.versions.node)"], timeout_sec=60)
    found = result.stdout.strip() if result.exit_code == 0 else ""
    try:
        have = tuple(int(p) for p in found.split(".")[:2])
    except ValueError:
        have = ()
    if len(have) < 2 or have < need:
        what = f"node {found}" if found else "no `node` on PATH"
        raise TrialError(ErrorKind.AGENT_ERROR,
                         f"{who} needs Node.js {need[0]}.{need[1]}+ inside the sandbox, "
                         f"found {what}; install it on the host (the local sandbox's base) "
                         "or in the task's Dockerfile", "setup")
