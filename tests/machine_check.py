"""The suite leaves the machine as it found it: what it started, mounted, made or wrote.

A snapshot is taken when the session starts and after every test (cheap parts only), and
compared at the end. Anything the suite left behind fails the run with a list of what and,
where it can be told, which test made it. The machine is shared with the developer's own
work and later CI runs: a leaked holder, mount or cgroup there is a broken machine later.

Processes count as the suite's when they started after the session did and are pytest's
descendants, orphans (reparented to init), children of the container engine the run started
($SANDLOT_TEST_ENGINE_PID), or name the run's folder: a developer's own shell commands during
a run are none of those.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sandlot import hostguard

#: Folders where stray temp files would pile up between runs.
TEMP_FOLDERS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
#: Caches allowed to grow between runs (downloads worth keeping): images and npm agents.
KEPT_CACHES = (Path("/var/lib/containers"), Path.home() / ".cache" / "sandlot",
               Path.home() / ".npm", Path.home() / ".cache" / "pip")
DISK_SLACK_BYTES = 200 * 1024 * 1024
#: A tree deeper than this in the repository folder would defeat a plain `rm -rf`.
MAX_REPO_DEPTH = 400
FS_IOC_GETFLAGS = 0x80086601
FS_IMMUTABLE_FL = 0x10
FS_APPEND_FL = 0x20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    started: int  # clock ticks since boot
    cmdline: str


def processes() -> dict[int, Proc]:
    found: dict[int, Proc] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
            fields = raw.rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                continue
            cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").strip()
        except (OSError, IndexError):
            continue
        name = raw[raw.index("(") + 1: raw.rindex(")")]
        found[int(entry.name)] = Proc(int(entry.name), int(fields[1]), int(fields[19]),
                                      cmd.decode(errors="replace") or f"[{name}]")
    return found


def mount_points() -> set[str]:
    return set(hostguard.mount_points())


def cgroups() -> set[str]:
    """Every group of the cgroup v1 controllers sandlot uses (and the v2 root's, if any)."""
    found: set[str] = set()
    for controller in ("memory", "pids", "cpu", "unified"):
        root = Path("/sys/fs/cgroup") / controller
        if not root.is_dir():
            continue
        stack = [root]
        while stack:
            folder = stack.pop()
            with contextlib.suppress(OSError), os.scandir(folder) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        found.add(entry.path)
                        stack.append(Path(entry.path))
    return found


def temp_entries() -> set[str]:
    found: set[str] = set()
    for folder in TEMP_FOLDERS:
        with contextlib.suppress(OSError):
            found |= {str(folder / name) for name in os.listdir(folder)}
    return found


def net_links() -> set[str]:
    """The host's network devices and named network namespaces."""
    found: set[str] = set()
    with contextlib.suppress(OSError):
        found |= set(os.listdir("/sys/class/net"))
    with contextlib.suppress(OSError):
        found |= {f"netns {name}" for name in os.listdir("/run/netns")}
    return found


def nft_tables() -> set[str]:
    if shutil.which("nft") is None:
        return set()
    try:
        out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {line.strip() for line in out.splitlines() if line.strip()}


#: Base chains a firewall table hooks into; in an engine's table they only jump onward.
BASE_CHAINS = frozenset({"PREROUTING", "POSTROUTING", "INPUT", "OUTPUT", "FORWARD"})


def is_engine_table(listing: str, prefix: str = "NETAVARK") -> bool:
    """Whether an nft table (`nft list table ...` output) holds only the container engine's
    own rules: netavark's chains, and base chains that only jump to them. Podman keeps
    these between runs by design (its firewall state, like its image store); any other
    chain or rule is not the engine's and fails the check."""
    chain = None
    seen_engine = False
    for raw in listing.splitlines():
        line = raw.strip()
        if line.startswith("chain "):
            chain = line.split()[1]
            if not (chain.startswith(prefix) or chain in BASE_CHAINS):
                return False
            seen_engine = seen_engine or chain.startswith(prefix)
        elif (not line or line.startswith(("table ", "type ", "}", "#"))
              or chain is None or chain.startswith(prefix)):
            continue
        elif f"jump {prefix}" not in line and f"goto {prefix}" not in line:
            return False
    return seen_engine


def engine_table(table: str) -> bool:
    """`table` as `nft list tables` prints it ("table ip nat")."""
    try:
        out = subprocess.run(["nft", "list", *table.split()], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return is_engine_table(out)


def repo_entries(repo: Path) -> set[str]:
    """The repository's top-level entries (cheap enough to take after every test: a stray
    file written to the working directory lands here)."""
    with contextlib.suppress(OSError):
        return {str(repo / name) for name in os.listdir(repo)}
    return set()


def git_ignored(repo: Path, paths: set[str]) -> set[str]:
    """Which of `paths` git ignores (caches such as .pytest_cache: not left behind)."""
    if not paths:
        return set()
    try:
        out = subprocess.run(["git", "-C", str(repo), "check-ignore", "--stdin"],
                             input="\n".join(sorted(paths)) + "\n", capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {line.strip() for line in out.splitlines() if line.strip()}


def repo_changes(repo: Path) -> set[str]:
    """`git status` lines (untracked files included, ignored ones not)."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                              "--untracked-files=all"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return {line for line in out.splitlines() if line.strip()}


def disk_used() -> int:
    st = os.statvfs("/")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def tree_bytes(paths: Iterable[Path]) -> int:
    existing = [str(p) for p in paths if p.exists()]
    if not existing:
        return 0
    try:
        out = subprocess.run(["du", "-sxbc", *existing], capture_output=True, text=True,
                             timeout=300).stdout
        return int(out.strip().splitlines()[-1].split()[0])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return 0


def unremovable(root: Path) -> list[str]:
    """What under `root` a plain `rm -rf` could not remove: mount points, immutable or
    append-only files, trees deeper than MAX_REPO_DEPTH."""
    problems = [f"mount point in the repository folder: {p}" for p in sorted(mount_points())
                if p == str(root) or p.startswith(str(root) + "/")]
    stack: list[tuple[str, int]] = [(str(root), 0)]
    while stack:
        folder, depth = stack.pop()
        if depth > MAX_REPO_DEPTH:
            problems.append(f"a tree deeper than {MAX_REPO_DEPTH} levels: {folder[:200]}...")
            continue
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                stack.append((entry.path, depth + 1))
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                flags = _inode_flags(entry.path)
                if flags & (FS_IMMUTABLE_FL | FS_APPEND_FL):
                    problems.append(f"immutable or append-only: {entry.path}")
    return problems


def _inode_flags(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        buf = fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8)
        return int.from_bytes(buf[:4], "little")
    except OSError:
        return 0
    finally:
        os.close(fd)


#: Programs the suite runs that may end up orphaned: a leftover one is the suite's.
SUITE_PROGRAMS = frozenset({"bwrap", "conmon", "slirp4netns", "unshare", "nsenter",
                            "setpriv", "podman", "catatonit", "docker-registry", "node",
                            "npm", "python", "python3", "sleep", "sh", "bash", "cat"})


def _suite_kind_of_orphan(proc: Proc) -> bool:
    """An orphan started during the run is the suite's when it lives in the run's cgroup
    (scripts/test.sh), in the engine's container groups, or is one of the programs the
    suite runs; another job's daemon on a shared machine is not."""
    with contextlib.suppress(OSError):
        groups = Path(f"/proc/{proc.pid}/cgroup").read_text()
        if "sandlot-tests-" in groups or "libpod" in groups:
            return True
    name = proc.cmdline.split(" ", 1)[0].rsplit("/", 1)[-1]
    return name in SUITE_PROGRAMS or name.startswith("python")


@dataclass
class MachineState:
    started_ticks: int
    processes: dict[int, Proc]
    mounts: set[str]
    cgroups: set[str]
    links: set[str]
    nft: set[str]
    temp: set[str]
    disk: int
    kept: int
    repo_top: set[str] = field(default_factory=set)
    repo_status: set[str] = field(default_factory=set)


def boot_ticks_now() -> int:
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLOCK_TICKS)


def snapshot(repo: Path) -> MachineState:
    return MachineState(started_ticks=boot_ticks_now(), processes=processes(),
                        mounts=mount_points(), cgroups=cgroups(), links=net_links(),
                        nft=nft_tables(), temp=temp_entries(), disk=disk_used(),
                        kept=tree_bytes(KEPT_CACHES), repo_top=repo_entries(repo),
                        repo_status=repo_changes(repo))


@dataclass
class MachineWatch:
    """The session's start state, and which test first showed each new thing."""

    before: MachineState
    own_pid: int
    run_dir: Path | None
    repo: Path
    engine_pid: int | None = None
    made_by: dict[str, str] = field(default_factory=dict)

    def suite_processes(self) -> dict[int, Proc]:
        procs = processes()
        ancestors = set()
        pid = self.own_pid
        while pid > 1 and pid in procs:
            ancestors.add(pid)
            pid = procs[pid].ppid

        def ours(proc: Proc) -> bool:
            p: Proc | None = proc
            for _ in range(200):
                if p is None:
                    break
                if p.pid in (self.own_pid, self.engine_pid):
                    return True
                if p.ppid in (0, 1):  # orphaned (or daemonized) during the run
                    return (p.started >= self.before.started_ticks
                            and _suite_kind_of_orphan(p))
                p = procs.get(p.ppid)
            return bool(self.run_dir and str(self.run_dir) in proc.cmdline)

        return {pid: p for pid, p in procs.items()
                if p.started >= self.before.started_ticks and pid not in ancestors
                and pid != self.own_pid and p.ppid != 2 and pid != 2
                and pid not in self.before.processes and ours(p)}

    def note_after(self, nodeid: str) -> None:
        """Remember which test first showed each new process, mount, group or temp entry."""
        for key in self._new_keys():
            self.made_by.setdefault(key, nodeid)

    def _new_keys(self) -> set[str]:
        keys = {f"process {p.pid} {p.cmdline[:300]}" for p in self.suite_processes().values()}
        keys |= {f"mount {m}" for m in mount_points() - self.before.mounts}
        # The run's own group (scripts/test.sh removes it) and sandlot's parent group in
        # it are made on purpose; the trials' groups below them must be gone.
        keys |= {f"cgroup {g}" for g in cgroups() - self.before.cgroups
                 if not g.rsplit("/", 1)[-1].startswith("sandlot-tests-")
                 and g.rsplit("/", 1)[-1] != "sandlot"}
        keys |= {f"temp {t}" for t in temp_entries() - self.before.temp}
        new_entries = repo_entries(self.repo) - self.before.repo_top
        new_entries -= git_ignored(self.repo, new_entries)
        keys |= {f"in the repository: {e}" for e in new_entries}
        return keys

    def leftovers(self, grace_sec: float = 30) -> list[str]:
        """What the suite left behind; things that go away within `grace_sec` are not."""
        deadline = time.monotonic() + grace_sec
        while True:
            keys = self._new_keys()
            keys |= {f"network {n}" for n in net_links() - self.before.links}
            if not keys or time.monotonic() > deadline:
                break
            time.sleep(1)
        if self.run_dir is not None:
            keys = {k for k in keys if k != f"temp {self.run_dir}"}
        found = [f"{k}  (first seen after {self.made_by[k]})" if k in self.made_by else k
                 for k in sorted(keys)]
        found += [f"nftables {t} (host's network namespace)"
                  for t in sorted(nft_tables() - self.before.nft) if not engine_table(t)]
        grown = disk_used() - self.before.disk
        kept = tree_bytes(KEPT_CACHES) - self.before.kept
        scratch = tree_bytes([self.run_dir]) if self.run_dir else 0
        left = grown - kept - scratch
        if left > DISK_SLACK_BYTES:
            found.append(f"disk: {left / 2**20:.0f} MB more in use than at the start (kept "
                         f"caches grew {kept / 2**20:.0f} MB and the run's folder holds "
                         f"{scratch / 2**20:.0f} MB, both not counted)")
        found += [f"repository change: {line}" for line in
                  sorted(repo_changes(self.repo) - self.before.repo_status)
                  if f"in the repository: {self.repo / line[3:].split('/')[0]}" not in keys]
        found += unremovable(self.repo)
        return found
