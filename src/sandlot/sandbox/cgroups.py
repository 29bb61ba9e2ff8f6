"""Per-sandbox resource limits through cgroup v1 (memory, pids, cpu), where writable.

Each sandbox gets `<our cgroup>/sandlot/<owner pid>-<name>` in every controller we use, so
limits nest under whatever limits sandlot itself runs in, and groups left behind by a killed
sandlot (owner pid gone) are swept on the next start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from sandlot.hostguard import check_cgroup_is_ours

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000


def _own_path(controller: str) -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return CGROUP_ROOT / controller / path.lstrip("/")
    return None


def sandlot_parent(controller: str) -> Path | None:
    """`<this process's group>/sandlot`: the one parent of every group sandlot makes."""
    own = _own_path(controller)
    if own is None or not (own / "cgroup.procs").exists():
        return None
    return own / "sandlot"


def read_int_field(path: Path, key: str) -> int:
    """The value of `key` in a cgroup "key value" file (0 when absent or unreadable)."""
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return 0


def _parents() -> list[Path]:
    return [p for p in map(sandlot_parent, CONTROLLERS) if p is not None]


def kill_and_remove(group: Path) -> None:
    """SIGKILL what is in `group` until it can be removed; only a group sandlot made.

    Raises: HostSafetyError for any other path (the user's own groups, a parent).
    """
    check_cgroup_is_ours(group, _parents())
    for _ in range(50):
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def sweep_stale() -> int:
    """Remove groups whose owning sandlot process is gone; returns how many."""
    removed = 0
    for controller in CONTROLLERS:
        base = sandlot_parent(controller)
        if base is None or not base.is_dir():
            continue
        for group in base.iterdir():
            owner = group.name.split("-", 1)[0]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                kill_and_remove(group)
                removed += 1
    return removed


@dataclass
class CgroupLimits:
    """One sandbox's groups; `procs_files` is where a new process writes its pid."""

    name: str
    groups: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def create(cls, name: str, memory_mb: int | None, cpus: float | None,
               pids_max: int | None) -> CgroupLimits:
        limits = cls(name=f"{os.getpid()}-{name}")
        wanted = {"memory": memory_mb, "pids": pids_max, "cpu": cpus}
        for controller, value in wanted.items():
            if value is None:
                continue
            base = sandlot_parent(controller)
            if base is None:
                continue
            group = base / limits.name
            try:
                group.mkdir(parents=True, exist_ok=True)
                if controller == "memory":
                    (group / "memory.limit_in_bytes").write_text(str(int(value) * 1024 * 1024))
                    with contextlib.suppress(OSError):
                        (group / "memory.memsw.limit_in_bytes").write_text(
                            str(int(value) * 1024 * 1024))
                elif controller == "pids":
                    (group / "pids.max").write_text(str(int(value)))
                elif controller == "cpu":
                    (group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                    (group / "cpu.cfs_quota_us").write_text(str(int(float(value) * CPU_PERIOD_US)))
            except OSError:
                with contextlib.suppress(OSError):
                    group.rmdir()
                continue
            limits.groups[controller] = group
        return limits

    @property
    def procs_files(self) -> list[str]:
        return [str(g / "cgroup.procs") for g in self.groups.values()]

    def counters(self) -> tuple[int, int]:
        """(OOM kills, fork refusals) so far; compare before/after a command."""
        oom = pids = 0
        if "memory" in self.groups:
            oom = read_int_field(self.groups["memory"] / "memory.oom_control", "oom_kill")
        if "pids" in self.groups:
            pids = read_int_field(self.groups["pids"] / "pids.events", "max")
        return oom, pids

    def kill_all(self) -> None:
        """SIGKILL every process in the groups (they stay, empty, for their counters)."""
        parents = _parents()
        for group in self.groups.values():
            check_cgroup_is_ours(group, parents)
            for _ in range(50):
                try:
                    pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
                except OSError:
                    pids = []
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.01)

    def destroy(self) -> None:
        for group in self.groups.values():
            kill_and_remove(group)
        self.groups.clear()
