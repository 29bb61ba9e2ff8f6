"""Guards for the actions that could hurt the machine sandlot runs on.

sandlot runs as root next to the user's own work. Deleting a tree through a mount that is
still live deletes the host's files behind it; a signal to a recycled pid or process group
kills someone else's process; nft or slirp4netns aimed at the wrong network namespace
rewires the host. Each guard here refuses such an action, whatever state it finds, instead
of trusting that the caller's bookkeeping is right.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

from sandlot.trees import remove_tree_iteratively

log = logging.getLogger(__name__)


class HostSafetyError(OSError):
    """An action was refused because it could have reached beyond what sandlot made."""


# -- trees ---------------------------------------------------------------------------------

def _unescape_mountinfo(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040...)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points(mountinfo: Path = Path("/proc/self/mountinfo")) -> list[str]:
    """Every mount point visible in this process's mount namespace."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return []
    return [_unescape_mountinfo(line.split()[4]) for line in lines if len(line.split()) > 4]


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` (its real path), in this mount namespace."""
    root = os.path.realpath(path)
    return sorted(p for p in mount_points() if p == root or p.startswith(root.rstrip("/") + "/"))


def remove_tree(path: Path, *, ignore_errors: bool = False) -> bool:
    """Delete `path` and everything below it, unless something is mounted there.

    A mount at or below `path` (a bind mount, an overlay, a loop disk left by a crashed
    run) is never deleted through: the removal is refused as a whole, since half a tree is
    no better. Returns whether the tree is gone. With `ignore_errors`, a refusal or an
    error is logged and False returned instead of raised.
    """
    if not os.path.lexists(path):
        return True
    mounted = mounts_under(path)
    if mounted:
        error = HostSafetyError(
            f"refusing to delete {path}: {len(mounted)} mount(s) inside "
            f"({', '.join(mounted[:3])}); unmount them first")
        if ignore_errors:
            log.warning("%s", error)
            return False
        raise error
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            os.unlink(path)
        except OSError:
            if not ignore_errors:
                raise
        return not os.path.lexists(path)
    # By directory fd, never following a link out of the tree, at any depth.
    try:
        remove_tree_iteratively(path)
    except OSError as exc:
        if not ignore_errors:
            raise
        log.warning("could not delete all of %s: %s", path, exc)
    return not os.path.lexists(path)


# -- signals -------------------------------------------------------------------------------

def _parent_and_group(pid: int) -> tuple[int, int] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[2])


def signal_child_group(pid: int, sig: int) -> bool:
    """Send `sig` to the process group that sandlot's own child `pid` leads.

    The pid must still be this process's child (alive or a zombie not yet reaped: its pid
    cannot have been reused) and the leader of its group (started with a new session).
    Anything else is refused: after a reap, the number may belong to a stranger. Returns
    whether the signal was sent.
    """
    found = _parent_and_group(pid)
    if found is None or found != (os.getpid(), pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
        return True
    return False


def signal_sessions_below(pid: int, sig: int) -> int:
    """Send `sig` to the process group of each process below sandlot's own child `pid`
    that leads a session of its own (the command a launcher started in a sandbox with
    bwrap --new-session): the command, not the launchers around it. Refused for a pid
    that is not this process's child; returns how many groups were signalled."""
    found = _parent_and_group(pid)
    if found is None or found[0] != os.getpid():
        return 0
    sent = 0
    frontier = child_pids(pid)
    while frontier:
        current = frontier.pop()
        try:
            leads = os.getsid(current) == current
        except OSError:
            continue
        if not leads:
            frontier += child_pids(current)
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(current, sig)
            sent += 1
    return sent


def child_pids(pid: int) -> list[int]:
    """The pids of `pid`'s children (all its threads'), as this process's /proc numbers them."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError):
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return found


def kill_child_tree(pid: int) -> int:
    """SIGKILL sandlot's own child `pid` and every process below it; returns how many.

    Each process found is stopped first (SIGSTOP), so none forks or exits (and so
    reparents its children away) while the tree is walked; then all are killed. A process
    that left the tree before the walk (a daemon that detached) is not in it: its
    sandbox's teardown ends it. Refused, like signal_child_group, for a pid that is not
    this process's child.
    """
    found = _parent_and_group(pid)
    if found is None or found[0] != os.getpid():
        return 0
    seen: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        if current in seen:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(current, signal.SIGSTOP)
        seen.append(current)
        frontier += child_pids(current)
    for member in seen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    return len(seen)


# -- cgroups -------------------------------------------------------------------------------

def check_cgroup_is_ours(group: Path, parents: list[Path]) -> None:
    """Refuse a cgroup outside sandlot's own parent groups (`parents`): only a group that
    sandlot created below one of them may have its processes killed or be removed."""
    real = Path(os.path.realpath(group))
    for parent in parents:
        base = Path(os.path.realpath(parent))
        if real.parent == base and real.name and not real.name.startswith("."):
            return
    raise HostSafetyError(f"refusing to touch cgroup {group}: not one sandlot created "
                          f"(under {', '.join(map(str, parents)) or 'no sandlot group'})")


# -- network namespaces --------------------------------------------------------------------

def _netns_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def check_private_netns(pid: int) -> None:
    """Refuse to configure the network namespace of `pid` unless it is one of its own: not
    sandlot's (the host's) and not init's. nft rules or a tap device meant for a sandbox
    would otherwise land on the host."""
    target = _netns_inode(pid)
    if target is None:
        raise HostSafetyError(f"refusing to configure the network of pid {pid}: it is gone")
    if target in {_netns_inode("self"), _netns_inode(1)}:
        raise HostSafetyError(f"refusing to configure the network of pid {pid}: it shares "
                              "the host's network namespace")
