"""The local sandbox: bubblewrap namespaces over a per-trial overlay of the host's root.

A long-lived "holder" process owns a private mount namespace (where the overlay is mounted),
a network namespace (where slirp4netns gives NAT when a phase needs outbound access) and a
PID namespace. Inside it runs the container: bwrap's init in a PID namespace of its own,
rooted in the overlay. Every exec enters the holder's mount namespace and starts bwrap in
the container's PID namespace, with a mount namespace of its own (where a verifier's private
folders are mounted). What a command leaves running lives on, as in a container, until the
sandbox stops; a command that times out is killed with every process below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import json
import os
import shlex
import shutil
import signal
import stat
import time
from collections.abc import Callable
from pathlib import Path

from typing_extensions import override

from sandlot.errors import ContainerExited, SandboxDiskFull, SandboxError, Unverifiable
from sandlot.hostguard import (
    check_private_netns,
    child_pids,
    kill_child_tree,
    remove_tree,
    signal_sessions_below,
)
from sandlot.sandbox import egress
from sandlot.sandbox.base import (
    DEFAULT_PATH,
    EnvironmentInfo,
    ExecResult,
    LimitKind,
    Network,
    SandboxSpec,
    WorkspaceDiff,
    allowed_networks,
    check_mount_points,
    goes_outbound,
    mount_point_chain,
)
from sandlot.sandbox.bounded_fs import CapExceeded, exists_inside, read_regular, walk
from sandlot.sandbox.cgroups import CgroupLimits
from sandlot.sandbox.changes import Change, below_any, walk_upper
from sandlot.sandbox.links import resolve_link
from sandlot.sandbox.procutil import (
    CGROUP_JOIN_FAILED,
    CappedReader,
    WatchedProcess,
    die_with_sandlot,
    in_cgroups,
    spawn,
    wait_exited,
)
from sandlot.sandbox.seccomp import write_sandbox_filter

#: Host paths every sandbox sees as empty folders: no host secrets, no host HOME.
DEFAULT_MASKS = ("/root", "/home", "/tmp", "/var/tmp", "/run", "/mnt", "/media", "/srv",
                 "/opt/sandlot")
#: Docker's default capability set minus MKNOD (no device cgroup here to make MKNOD safe)
#: and of course no SYS_ADMIN: no mounting, no escaping the overlay.
CAPS = ("CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "NET_RAW", "SETGID", "SETUID",
        "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE")
SLIRP_DNS = "10.0.2.3"
#: /etc/hosts of an image that has none (as Docker writes it; the hostname is "sandbox").
ETC_HOSTS = ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
             "127.0.1.1\tsandbox\n")
#: The container's PID 1 (bwrap --as-pid-1): idles, as Harbor's `sleep infinity`, and
#: reaps what is reparented to it (the shell waits with waitpid(-1)). As PID 1 it ignores
#: every signal sent from inside, so `kill -9 -1` cannot end the container.
IDLE_COMMAND = ("/bin/sh", "-c", "while :; do sleep 3600; done")
#: How long an image's ENTRYPOINT may take to show it runs (see _settle_entrypoint).
ENTRYPOINT_SETTLE_SEC = 2.0
#: The most layers one overlay mount stacks (the kernel's limit): the image's and one per
#: cached Dockerfile step.
MAX_LAYERS = 500
#: /dev/shm's size, Docker's default.
SHM_SIZE = "64m"
#: How much of the container's PID 1 output (an ENTRYPOINT's services) is kept. It lives on
#: a tmpfs of the holder's, never on the host's disk: any process inside can write to it
#: through /proc/1/fd/1 (and code the verifier runs, through bwrap's descriptors), so a
#: file there would let the agent fill the host's disk past its quota.
CONTAINER_LOG_SIZE = "8m"
#: How long a command's output is still read after it exited while a process it left
#: running holds its stdout or stderr open.
OUTPUT_GRACE_SEC = 0.25
#: The environment of the nsenter/bwrap launcher: nothing of sandlot's own (bwrap's init
#: is PID 1 inside, and /proc/1/environ is readable there). Commands get --setenv only.
LAUNCH_ENV = {"PATH": DEFAULT_PATH}
#: Files of /proc that show the host whatever the namespaces: each reads as empty.
PROC_MASKS = ("/proc/keys", "/proc/key-users", "/proc/kcore", "/proc/timer_list",
              "/proc/sched_debug", "/proc/latency_stats")
REQUIRED_TOOLS = ("bwrap", "unshare", "nsenter", "mount", "setpriv", "bash")
INSTALL_HINT = ("install it with: apt-get install -y bubblewrap slirp4netns util-linux "
                "nftables e2fsprogs libseccomp2")


#: Top-level folders of the host a sandbox keeps: the system an image would have. Every
#: other top-level entry (/work, /home, /root, /srv, /mnt, project folders...) is hidden.
SYSTEM_TOP_LEVEL = frozenset({"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt",
                              "proc", "sbin", "sys", "usr", "var"})
#: Host files that hold secrets even inside the kept system folders: hidden as empty files.
SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                "/etc/ssh/ssh_host_*key", "/etc/ssh/ssh_host_*_key", "/etc/sudoers",
                "/etc/machine-id")
SECRET_DIRS = ("/var/log", "/var/backups", "/var/mail", "/var/spool", "/etc/sudoers.d",
               "/etc/ssl/private")


def host_paths_to_hide() -> tuple[list[Path], list[Path]]:
    """(folders, files) of the host that no sandbox may see."""
    folders = [Path(p) for p in (*DEFAULT_MASKS, *SECRET_DIRS) if Path(p).exists()]
    files: list[Path] = []
    for entry in Path("/").iterdir():
        if entry.name in SYSTEM_TOP_LEVEL or entry.is_symlink():
            continue
        (folders if entry.is_dir() else files).append(entry)
    for pattern in SECRET_FILES:
        files += [p for p in Path("/").glob(pattern.lstrip("/")) if p.is_file()]
    return sorted(set(folders)), sorted(set(files))


def below(path: Path, folders: list[Path]) -> bool:
    """`path` lies inside one of `folders` (not equal to it); absolute paths."""
    text = str(path)
    return any(text.startswith(str(folder).rstrip("/") + "/") for folder in folders)


def outermost(folders: list[Path]) -> list[Path]:
    """The folders not inside another one: a folder hidden hides what it holds, so the
    jobs and cache folders under a hidden /tmp or /root need no mask of their own."""
    kept: list[Path] = []
    for folder in sorted(set(folders), key=lambda f: (len(f.parts), str(f))):
        if not below(folder, kept):
            kept.append(folder)
    return sorted(kept)


#: Folders every user may create files in (sticky), as in any container image.
SHARED_TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def _mask_layer(root: Path, masks: list[Path], files: list[Path] = ()) -> None:  # type: ignore[assignment]
    """Opaque empty dirs and empty files: an overlay layer that hides what is below.

    A folder in the upper layer decides the merged folder's owner and mode, so each one
    made here copies the host folder's (a hidden /root stays 0700); the shared temp
    folders are 1777 whatever the host has, or a non-root user (apt's `_apt`, a task's
    own user) could not write there.
    """
    for host_path in masks:
        target = root / str(host_path).lstrip("/")
        _mirror_folders(root, host_path)
        os.setxattr(target, "trusted.overlay.opaque", b"y")
    for host_file in files:
        target = root / str(host_file).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.touch(mode=0o600)


def _adapt_layer(root: Path, removed: tuple[str, ...], links: dict[str, str]) -> set[str]:
    """Whiteouts for `removed` and symlinks for `links` in an upper layer (see
    SandboxSpec.removed_paths); returns the paths it wrote, which are no trial's changes."""
    written: set[str] = set()
    for path in removed:
        target = root / path.lstrip("/")
        _mirror_folders(root, Path(path).parent)
        if not os.path.lexists(target):
            os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(0, 0))
        written.add(path)
    for path, link_target in links.items():
        target = root / path.lstrip("/")
        _mirror_folders(root, Path(path).parent)
        if not os.path.lexists(target):
            target.symlink_to(link_target)
        written.add(path)
    return written


def _mirror_folders(root: Path, host_path: Path) -> None:
    """Make `host_path` and its missing parents under `root` with the host's owner/mode."""
    current = Path("/")
    for part in host_path.parts[1:]:
        current = current / part
        target = root / str(current).lstrip("/")
        if target.exists():
            continue
        target.mkdir()
        st = current.stat()
        mode = 0o1777 if str(current) in SHARED_TEMP_DIRS else st.st_mode & 0o7777
        os.chown(target, st.st_uid, st.st_gid)
        target.chmod(mode)


#: The ways to name root: commands run as root anyway, so they need no user switch.
ROOT_USERS = frozenset({"0", "root", "0:0", "root:root", "0:root", "root:0"})
#: Run "$@" as the user `$0` names (`name`, `uid`, `name:group`, `uid:gid`), as `docker exec
#: -u` does: uid, gid and HOME from the sandbox's /etc/passwd (a uid without an entry gets
#: its own number as gid and / as HOME), the supplementary groups of a named user, and no
#: capabilities (setpriv drops them with the uid). 126 and a message for an unknown name.
#: setpriv is found by path: a busybox shell runs its own, lesser setpriv applet for the
#: bare name even where util-linux's is installed.
_AS_USER = r"""
u=${0%%:*}; g=; case $0 in *:*) g=${0#*:};; esac
entry=$(awk -F: -v u="$u" '$1 == u { print $1 ":" $3 ":" $4 ":" $6; exit }' /etc/passwd)
case $u in *[!0-9]*) ;; *) [ -n "$entry" ] || entry=$(awk -F: -v u="$u" \
    '$3 == u { print $1 ":" $3 ":" $4 ":" $6; exit }' /etc/passwd);; esac
if [ -n "$entry" ]; then
    IFS=: read -r name uid gid home <<EOF
$entry
EOF
    groups=--init-groups
else
    case $u in *[!0-9]*) echo "sandlot: no user '$u' in /etc/passwd" >&2; exit 126;; esac
    uid=$u; gid=$u; home=/; groups=--clear-groups
fi
if [ -n "$g" ]; then
    case $g in
    *[!0-9]*) gid=$(awk -F: -v g="$g" '$1 == g { print $3; exit }' /etc/group)
              [ -n "$gid" ] || { echo "sandlot: no group '$g' in /etc/group" >&2; exit 126; };;
    *) gid=$g;;
    esac
fi
[ -n "${HOME+set}" ] || export HOME="$home"
setpriv=
for d in /usr/bin /bin /usr/sbin /sbin /usr/local/bin /usr/local/sbin; do
    case $("$d/setpriv" --version 2>/dev/null) in *util-linux*) setpriv=$d/setpriv; break;; esac
done
[ -n "$setpriv" ] || {
    echo "sandlot: cannot run as '$0': the image has no setpriv of util-linux" >&2; exit 126; }
exec "$setpriv" --reuid="$uid" --regid="$gid" $groups -- "$@"
"""


#: What the holder's PID 1 becomes once the sandbox is up: PID 1 of the sandbox's PID
#: namespace. bwrap's own child arms its death signal only after the sandbox's setup, so
#: a sandlot (or an exec's launcher) killed in between left it running with nothing tied
#: to it. Every exec's bwrap therefore starts inside this namespace: when its PID 1 exits,
#: the kernel kills everything in it, in any state. It exits when its stdin closes: a pipe
#: only sandlot holds, which the kernel closes when sandlot dies by any means (and unshare
#: --kill-child SIGKILLs it too). It must reap what is reparented to it (an exec's sandbox
#: outliving its launcher for a moment), or the zombies would count against the trial's
#: pids limit: it runs with SIGCHLD ignored, which exec keeps, so the kernel reaps every
#: child it adopts the moment that child exits. bash sets that up (dash's `trap '' CHLD`
#: does not ignore the signal); the reaper itself is `cat`, ~1 ms of CPU where a Python
#: interpreter took ~10.
_HOLDER_REAPER = "trap '' CHLD; exec cat >/dev/null"

#: PID 1 of the namespace the container's is nested in (bash -c, its arguments bwrap's):
#: starts the container, then reaps what a verifier leaves behind, as _HOLDER_REAPER does;
#: it ends when the holder's namespace does. `set -m` around the `&`: a shell without job
#: control starts a background command with SIGINT and SIGQUIT ignored, which the
#: container's processes would inherit. bwrap's files (its arguments on fd 3, the syscall
#: filter on 4, its status on 5) are closed before it idles.
_OUTER_PID_ONE = ('set -m; "$@" & set +m; trap \'\' CHLD; '
                  "exec sleep infinity >/dev/null 2>&1 3<&- 4<&- 5>&-")


def _pid_one_below(parent: int, depth: int, around: int,
                   running_child: bool = False) -> int | None:
    """The host pid of a process `depth` generations below `parent` whose PID namespace is
    not `around` (the first PID 1 of a namespace nested there), with `running_child` only
    once it runs a child; None if there is none yet."""
    found = [parent]
    for _ in range(depth):
        found = [child for pid in found for child in child_pids(pid)]
    for pid in found:
        if os.stat(f"/proc/{pid}/ns/pid").st_ino != around and (
                not running_child or child_pids(pid)):
            return pid
    return None


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _text_lines(data: bytes | None) -> list[str] | None:
    """A file's lines for a diff: none for no (regular) file, None for binary bytes."""
    if data is None:
        return []
    if b"\0" in data:
        return None
    try:
        return data.decode().splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _regular_files_below(root: Path, folder: str, limit: int) -> tuple[list[str], str]:
    """Up to `limit` regular files below `folder` inside `root` (sorted), walked by
    bounded_fs; and a note when the walk stopped at a cap or could not start."""
    start = folder.rstrip("/")
    try:
        found = []
        for entry in walk(root / start.lstrip("/")):
            if stat.S_ISREG(entry.stat.st_mode):
                found.append(start + entry.path)
                if len(found) >= limit:
                    break
        return sorted(found), ""
    except CapExceeded as exc:
        return sorted(found), f"[listing of {folder} stopped: {exc.reason}]\n"
    except OSError:
        return [], ""


def _defuse_links(root: Path) -> None:
    """Replace symlinks that came out of a sandbox with a note: on the host they would
    point at host files (a reward.txt linked to /sys/... must not read as a reward)."""
    paths = [root] if root.is_symlink() else (list(root.rglob("*")) if root.is_dir() else [])
    for path in paths:
        if path.is_symlink():
            target = os.readlink(path)
            path.unlink()
            path.write_text(f"[a symlink in the sandbox, to {target}]\n")


async def _feed(pipe: asyncio.StreamWriter | None, data: bytes | None) -> None:
    if pipe is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            pipe.write(data)
            await pipe.drain()
    pipe.close()


def resolve_inside(root: Path, path: str, max_links: int = 40) -> Path:
    """`root/path` with every symlink but the last component resolved as if `root` were /."""

    def readlink(inside: str) -> str | None:
        candidate = root / inside.lstrip("/")
        return os.readlink(candidate) if candidate.is_symlink() else None

    resolved = resolve_link(path, readlink, follow_last=False, max_links=max_links)
    if resolved is None:
        raise SandboxError(f"too many symlinks resolving {path} inside the sandbox")
    return root.joinpath(*[part for part in resolved.split("/") if part])


class LocalProcess:
    """A bwrap'd command with piped stdio; killing its group ends its whole PID namespace."""

    def __init__(self, proc: WatchedProcess, cgroups: CgroupLimits | None,
                 disk_full: Callable[[], bool] | None = None) -> None:
        self._proc = proc
        self._cgroups = cgroups
        self._before = cgroups.counters() if cgroups else (0, 0)
        self._disk_full = disk_full
        self._disk_full_before = disk_full() if disk_full else False
        self.stdin = proc.stdin
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.pid = proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def wait(self) -> int:
        return await wait_exited(self._proc)

    async def terminate(self) -> None:
        """SIGTERM to the command inside (its own session: bwrap --new-session), not to
        the launchers around it: bwrap's monitor, killed first, would leave the command
        running out of reach of kill()'s walk of the launcher's tree."""
        if self._proc.returncode is None:
            signal_sessions_below(self._proc.pid, signal.SIGTERM)

    async def kill(self) -> None:
        if self._proc.returncode is None:
            kill_child_tree(self._proc.pid)
        with contextlib.suppress(Exception):
            await wait_exited(self._proc)

    def limit_hit(self) -> LimitKind | None:
        if self._cgroups is not None:
            oom, pids = self._cgroups.counters()
            if oom > self._before[0]:
                return "memory"
            if pids > self._before[1]:
                return "pids"
        if self._disk_full and not self._disk_full_before and self._disk_full():
            return "disk"
        return None


class LocalSandbox:
    """Linux namespaces + overlayfs; needs root, bubblewrap and (for network) slirp4netns."""

    def oom_kills(self) -> int | None:
        """OOM kills in the sandbox's memory cgroup so far (CountsLimitEvents)."""
        return self._cgroups.counters()[0] if self._cgroups is not None else None

    def __init__(self, spec: SandboxSpec, scratch_dir: Path, upper_dir: Path | None = None):
        self.spec = spec
        self.scratch = scratch_dir
        self._upper = upper_dir or scratch_dir / "upper"
        self._keep_upper = upper_dir is not None
        self._merged = scratch_dir / "merged"
        #: bwrap's arguments for the container, and the sandbox's syscall filter.
        self._container_args = scratch_dir / "container.args"
        self._syscall_filter = scratch_dir / "seccomp.bpf"
        #: Mounted as a small tmpfs in the holder's namespace (CONTAINER_LOG_SIZE): the
        #: container's PID 1 output (container.log) and bwrap's exit status (status).
        self._logs = scratch_dir / "logs"
        self._holder: WatchedProcess | None = None
        self._slirp: WatchedProcess | None = None
        self._net_lock = asyncio.Lock()
        self._cgroups: CgroupLimits | None = None
        self._layer_work: Path | None = None
        #: With a disk quota: where the sandbox's own filesystem is mounted (inside the
        #: holder's mount namespace only).
        self._disk: Path | None = None
        #: The egress filter being installed (started with the sandbox: the internet).
        self._egress: asyncio.Future[object] | None = None
        #: The allowlist the filter has now (None: the internet), once _egress is done.
        self._allowed: tuple[str, ...] | None = None
        #: The host pid of the container's init (PID 1 inside).
        self._init_pid: int | None = None
        #: Host pid of PID 1 of the namespace the container's is nested in (see
        #: _start_container): where a command with mounts of its own runs.
        self._outer_pid: int | None = None
        #: Pipes of finished commands still held open by processes they left running.
        self._drains: dict[WatchedProcess, tuple[CappedReader, ...]] = {}
        self._private_ids = itertools.count(1)
        #: With an image root: the environment before the trial (its lower layers merged),
        #: and whether it is a mount in the holder's namespace (see _image_lower).
        self._base_view: Path | None = None
        self._base_view_in_holder = False
        #: What the root is made of, for result.json (the backend says which image).
        self.environment = EnvironmentInfo(base="image" if spec.root_layers else "host")
        #: Equal for sandboxes made alike (KnowsItsPristineState); the backend sets it.
        self.pristine_key: str | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @override
    async def start(self) -> None:
        if os.geteuid() != 0:
            raise SandboxError("the local sandbox needs root (overlay mounts); run as root")
        for tool in REQUIRED_TOOLS:
            if shutil.which(tool) is None:
                raise SandboxError(f"{tool} not found; {INSTALL_HINT}")
        work = self.scratch / "work"
        for d in (self._upper, work, self._merged):
            d.mkdir(parents=True, exist_ok=True)
        image_root = bool(self.spec.root_layers)
        if len(self.spec.layers) > 1 and not image_root:
            raise SandboxError("on the host's root, the local sandbox stacks at most one "
                               "cached layer")
        layer = self.spec.layers[0] if self.spec.layers and not image_root else None
        # An image's root holds nothing of the host's: only the host's root needs hiding.
        hide, hide_files = ([], []) if image_root else host_paths_to_hide()
        if not image_root:
            hide += [p.resolve() for p in self.spec.masked_paths if p.exists()]
        # Masks apply even above the workdir (e.g. WORKDIR /tmp/work): the workdir is
        # created afterwards inside the opaque, empty folder.
        def in_layer(path: Path) -> bool:
            return layer is not None and (layer / str(path).lstrip("/")).exists()

        hide = outermost([p for p in hide if p != Path("/") and not in_layer(p)])
        hide_files = [p for p in hide_files if not in_layer(p) and not below(p, hide)]
        self._setup_paths = {str(p) for p in hide} | {str(p) for p in hide_files}
        #: Where the environment holds nothing a trial could restore from the bases:
        #: host paths this sandbox hides, and paths its image removed.
        self._hidden_paths = set(self._setup_paths) | set(self.spec.removed_paths)
        self._layer = layer
        script = ""
        if self.spec.storage_mb and not self._keep_upper:
            # A disk quota: the upper layer lives on an ext4 image of storage_mb, mounted
            # in the holder's namespace only (it goes when the holder goes, even on
            # SIGKILL). The holder waits on stdin until the masks are written into it.
            image = await self._make_disk(self.spec.storage_mb)
            self._disk = self.scratch / "disk"
            self._disk.mkdir(exist_ok=True)
            script += (f'mount -o loop,nosuid "{image}" "{self._disk}" || exit 95; '
                       f'mkdir -p "{self._disk}/upper" "{self._disk}/work" || exit 95; '
                       "echo disk; read go || exit 94; ")
            upper, work = self._disk / "upper", self._disk / "work"
        else:
            upper = self._upper
            try:
                _mask_layer(self._upper, hide, hide_files)
                self._setup_paths |= _adapt_layer(self._upper, self.spec.removed_paths,
                                                  self.spec.added_links)
            except OSError as exc:
                raise SandboxError(f"cannot hide host paths in {self._upper}: {exc}") from exc
        lower = "/"
        if image_root:
            script, lower = self._image_lower(script)
        elif layer is not None:
            # Overlayfs refuses two lower layers on the same filesystem as "/", so the cached
            # layer is the upper of a read-only overlay that becomes this sandbox's lower.
            layer_view = self.scratch / "layer"
            layer_view.mkdir(exist_ok=True)
            self._layer_work = layer.parent / f"work-{os.getpid()}-{self.spec.name}"
            self._layer_work.mkdir(parents=True, exist_ok=True)
            script += (f'mount -t overlay overlay -o "ro,lowerdir=/,upperdir={layer},'
                       f'workdir={self._layer_work}" "{layer_view}" || exit 96; ')
            lower = str(layer_view)
        opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
        depth = len(self.spec.root_layers) + len(self.spec.layers)
        if depth > MAX_LAYERS:
            raise SandboxError(f"the image and the Dockerfile's steps make {depth} layers; "
                               f"overlay stacks at most {MAX_LAYERS} (flatten the image, "
                               "or join RUN steps)")
        shm = self.scratch / "shm"
        shm.mkdir(exist_ok=True)
        self._logs.mkdir(exist_ok=True)
        script += (
            f'mount -t overlay overlay -o "{opts}" "{self._merged}" || exit 97; '
            # One /dev/shm for the whole sandbox, as a container has (Docker's 64 MB).
            f'mount -t tmpfs -o mode=1777,nosuid,nodev,size={SHM_SIZE} shm "{shm}" '
            "|| exit 98; "
            f"mount -t tmpfs -o mode=0700,nosuid,nodev,noexec,size={CONTAINER_LOG_SIZE} "
            f"logs {shlex.quote(str(self._logs))} || exit 98; "
            "ip link set lo up 2>/dev/null; echo ready; "
            # On sandlot's word, once it has made the mount points and the container's
            # arguments: pin them, start the container, become the reaper.
            + self._container_script()
        )
        self._cgroups = CgroupLimits.create(
            self.spec.name, self.spec.memory_mb, self.spec.cpus, self.spec.pids_max
        )
        self._holder = await spawn(
            # --mount-proc: in the holder's mount namespace /proc shows its PID namespace,
            # where the execs' bwrap runs (bwrap reads /proc/<its child's pid>).
            *die_with_sandlot(["unshare", "--mount", "--net", "--pid", "--mount-proc",
                               "--kill-child", "--propagation", "private", "--",
                               "bash", "-c", script]),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=LAUNCH_ENV,
        )
        assert self._holder.stdout is not None
        try:
            line = await asyncio.wait_for(self._holder.stdout.readline(), 30)
            if self._disk is not None and line.strip() == b"disk":
                try:
                    await self._mask_disk(hide, hide_files)
                except SandboxError:
                    await self.stop()
                    raise
                line = await asyncio.wait_for(self._holder.stdout.readline(), 30)
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            err = await self._holder_stderr()
            await self.stop()
            raise SandboxError(f"overlay mount failed: {err}")
        try:
            await asyncio.to_thread(self._prepare_root)
            await self._prepare_mount_points()
            await self._start_container()
        except ContainerExited:
            await self.stop()
            raise
        except (SandboxError, OSError) as exc:
            await self.stop()
            raise SandboxError(str(exc)) from exc
        if not self._keep_upper:
            # Off the critical path: nearly every trial goes outbound (its verifier), and
            # nft takes ~20 ms; the first outbound command waits for it (_ensure_network).
            self._egress_filter()

    def _image_lower(self, script: str) -> tuple[str, str]:
        """The overlay's lower directories for an image root (the cached Dockerfile steps
        over the image's layers, newest first) and a read-only view of them (`_bases`):
        the environment a trial's changes are measured against. Each is named by a short
        link in the sandbox's scratch folder, so a deep image fits one mount call and a
        cache path may hold the ':' and ',' that overlay options cannot."""
        layers = self.spec.root_layers
        links = self.scratch / "lower"
        links.mkdir(exist_ok=True)
        stack = list(self.spec.layers) + list(reversed(layers))
        for index, path in enumerate(stack):
            (links / str(index)).symlink_to(path)
        lower = ":".join(str(index) for index in range(len(stack)))
        script += f'cd "{links}" || exit 96; '
        if len(stack) == 1:
            self._base_view = layers[0]
            return script, lower
        view = self.scratch / "base"
        view.mkdir(exist_ok=True)
        script += f'mount -t overlay overlay -o "ro,lowerdir={lower}" "{view}" || exit 96; '
        self._base_view = view
        self._base_view_in_holder = True
        return script, lower

    def _egress_filter(self) -> asyncio.Future[object]:
        """The egress filter's installation, started on first need (sandlot.sandbox.egress)."""
        if self._egress is None:
            assert self._holder is not None
            self._egress = asyncio.ensure_future(egress.install(
                self._holder.pid, [SLIRP_DNS], self.spec.allow_private_network))
        return self._egress

    async def _make_disk(self, storage_mb: int) -> Path:
        """A sparse ext4 image of `storage_mb` for the upper layer (~20 ms; no journal: the
        sandbox is thrown away, so a crash-consistent disk buys nothing). No space is kept
        back for sandlot: reserved blocks need CAP_SYS_RESOURCE, which a container host may
        lack, and overlayfs writes with the mounter's rights, so the agent would share it."""
        if shutil.which("mkfs.ext4") is None:
            raise SandboxError("the task sets storage_mb, and the local sandbox needs "
                               "mkfs.ext4 for it; install it with: apt-get install -y "
                               "e2fsprogs")
        image = self.scratch / "disk.img"
        try:
            with image.open("wb") as f:
                f.truncate(storage_mb * 1024 * 1024)
        except OSError as exc:
            raise SandboxError(f"cannot create the task's disk ({image}): {exc}") from exc
        proc = await spawn(
            "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E",
            "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", str(image),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=LAUNCH_ENV)
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise SandboxError(f"cannot make the task's {storage_mb} MB disk (storage_mb): "
                               f"{out.decode(errors='replace').strip()[-500:]}")
        return image

    async def _mask_disk(self, hide: list[Path], hide_files: list[Path]) -> None:
        """Write the masks into the upper on the holder's disk, then let it go on."""
        assert self._holder is not None and self._holder.stdin is not None
        assert self._disk is not None
        self._upper = self._in_holder(self._disk / "upper")
        try:
            await asyncio.to_thread(_mask_layer, self._upper, hide, hide_files)
            self._setup_paths |= await asyncio.to_thread(
                _adapt_layer, self._upper, self.spec.removed_paths, self.spec.added_links)
        except OSError as exc:
            raise SandboxError(f"cannot hide host paths in the task's disk: {exc}") from exc
        await self._holder_go()

    async def _holder_go(self) -> None:
        """Let the holder's script on past its `read go` (a holder gone: it reads nothing)."""
        assert self._holder is not None and self._holder.stdin is not None
        with contextlib.suppress(ConnectionError):
            self._holder.stdin.write(b"go\n")
            await self._holder.stdin.drain()

    async def _holder_stderr(self) -> str:
        """What the holder's script said on its way out (why a step failed)."""
        err = b""
        if self._holder is not None and self._holder.stderr is not None:
            with contextlib.suppress(TimeoutError):
                err = await asyncio.wait_for(self._holder.stderr.read(4096), 2)
        return err.decode(errors="replace").strip()

    def disk_full(self) -> bool:
        """Whether the task's disk quota (storage_mb) is used up."""
        if self._disk is None or self._holder is None or self._holder.returncode is not None:
            return False
        try:
            st = os.statvfs(self._in_holder(self._disk))
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < 1024 * 1024 or st.f_favail == 0

    def _prepare_root(self) -> None:
        """Folders and files every sandbox starts with. Each path is resolved inside the
        root (host_path): an image's `/etc -> /` link must not point a write at the host."""
        if self.spec.root_layers:
            self._prepare_image_root()
        for sandbox_path in (self.spec.workdir, *self.spec.binds.values(), *self.spec.folders):
            self.host_path(sandbox_path).mkdir(parents=True, exist_ok=True)
        resolv = self.host_path("/etc/resolv.conf")
        with contextlib.suppress(OSError):
            if resolv.is_symlink() or resolv.exists():
                resolv.unlink()
            resolv.write_text(f"nameserver {SLIRP_DNS}\n")

    def _prepare_image_root(self) -> None:
        """What a container runtime gives every image: a shell for PID 1, a sticky /tmp,
        /etc/hosts naming localhost and the sandbox (as Docker writes them)."""
        if not os.path.lexists(self.host_path("/bin/sh")):
            raise SandboxError("the image has no /bin/sh, which the sandbox's PID 1 and "
                               "the task's scripts need")
        tmp = self.host_path("/tmp")
        if not os.path.lexists(tmp):
            tmp.mkdir()
            tmp.chmod(0o1777)
        hosts = self.host_path("/etc/hosts")
        with contextlib.suppress(OSError):
            if not hosts.is_symlink() and (not hosts.exists() or hosts.stat().st_size == 0):
                hosts.parent.mkdir(parents=True, exist_ok=True)
                hosts.write_text(ETC_HOSTS)
                self._setup_paths.add("/etc/hosts")

    def _pin_chain(self) -> list[str]:
        return mount_point_chain((*self.spec.mount_points, *self.spec.binds.values()))

    async def _prepare_mount_points(self) -> None:
        """Make each mount point (and its parents) a real folder, which the holder then
        binds onto itself (_container_script) before any command runs: no command can
        move, remove or replace a mount point with a symlink, and bwrap mounts a
        verifier's folders exactly there (a symlink on the way would have it mount, or
        even create folders, elsewhere)."""
        chain = self._pin_chain()
        root = self.host_path("/")
        for path in chain:
            target = root / path.lstrip("/")
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                await asyncio.to_thread(remove_tree, target)
            target.mkdir(exist_ok=True)
        self._setup_paths |= set(chain)

    def host_path(self, sandbox_path: str) -> Path:
        """Where `sandbox_path` is reachable from the host: through the holder's mounts.

        Symlinks on the way are resolved inside the sandbox's root, never the host's, so
        a link planted by an agent (`/logs -> /home`) cannot point a copy at host files.
        """
        if self._holder is None:
            raise SandboxError("sandbox not started")
        return resolve_inside(self._in_holder(self._merged), sandbox_path)

    @override
    async def stop(self) -> None:
        for proc, readers in self._drains.items():
            for reader in readers:
                reader.cancel()
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()
        self._drains.clear()
        if self._egress is not None and not self._egress.done():
            self._egress.cancel()
        if self._egress is not None:
            await asyncio.gather(self._egress, return_exceptions=True)
            self._egress = None
        slirp, self._slirp = self._slirp, None
        if slirp is not None and slirp.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                slirp.kill()
        # slirp4netns's exit (the kernel tearing down its tap) takes ~20 ms: the rest of
        # the stop, which needs only the holder gone, runs meanwhile.
        slirp_exited = asyncio.ensure_future(
            wait_exited(slirp) if slirp is not None else asyncio.sleep(0))
        try:
            await asyncio.gather(self._stop_holder(), return_exceptions=True)
            self._holder = None
            self._init_pid = self._outer_pid = None
            if self._cgroups is not None:
                await asyncio.to_thread(self._cgroups.destroy)
                self._cgroups = None
            await asyncio.to_thread(self._remove_scratch)
        finally:
            await asyncio.gather(slirp_exited, return_exceptions=True)

    async def _stop_holder(self) -> None:
        """Close the holder's stdin: its PID 1 exits, the kernel kills the namespace, and
        unshare exits once all of it is gone (so the mounts and the loop disk are
        released). SIGKILL only if that does not happen in time."""
        holder = self._holder
        if holder is None:
            return
        if holder.stdin is not None:
            holder.stdin.close()
        if holder.returncode is None:
            try:
                await asyncio.wait_for(wait_exited(holder), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    holder.kill()
                await wait_exited(holder)

    def _remove_scratch(self) -> None:
        if self._layer_work is not None:
            remove_tree(self._layer_work, ignore_errors=True)
        if self._keep_upper:
            for name in ("work", "merged", "layer"):
                remove_tree(self.scratch / name, ignore_errors=True)
        else:
            remove_tree(self.scratch, ignore_errors=True)

    # -- network ---------------------------------------------------------------------------

    async def _ensure_network(self, allowed: tuple[str, ...] | None) -> None:
        """NAT out of the sandbox, filtered (sandlot.sandbox.egress) to the internet or to
        `allowed`. The filter for `allowed` is in place before slirp4netns gives the
        namespace a route, or (when it is up already) before the command starts: there is
        no moment with more network than the command asked for."""
        async with self._net_lock:
            if shutil.which("slirp4netns") is None:
                raise SandboxError(f"slirp4netns not found; {INSTALL_HINT}")
            assert self._holder is not None
            up = self._slirp is not None and self._slirp.returncode is None
            try:
                if allowed != self._allowed:
                    await asyncio.shield(self._egress_filter())
                    await egress.install(self._holder.pid, [SLIRP_DNS],
                                         self.spec.allow_private_network, allowed)
                    self._allowed = allowed
                if up:
                    return
                # The internet's filter and slirp4netns start side by side (nothing in the
                # sandbox runs until both are done, so there is no unfiltered moment); in
                # sequence they cost their sum on every trial's first outbound command.
                results = await asyncio.gather(self._start_slirp(self._holder.pid),
                                               asyncio.shield(self._egress_filter()),
                                               return_exceptions=True)
                errors = [r for r in results if isinstance(r, BaseException)]
                if errors:
                    raise errors[0]
            except BaseException:
                # Fail closed: whatever the filter is now, no route out.
                if self._slirp is not None and self._slirp.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        self._slirp.kill()
                    await wait_exited(self._slirp)
                self._slirp = None
                raise

    async def _start_slirp(self, holder_pid: int) -> None:
        check_private_netns(holder_pid)
        read_fd, write_fd = os.pipe()
        try:
            self._slirp = await spawn(
                *die_with_sandlot([
                    "slirp4netns", "--configure", "--mtu=65520",
                    "--disable-host-loopback", f"--ready-fd={write_fd}",
                    str(holder_pid), "tap0"]),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, pass_fds=(write_fd,), env=LAUNCH_ENV,
            )
        finally:
            os.close(write_fd)
        try:
            ready = await asyncio.wait_for(asyncio.to_thread(os.read, read_fd, 1), 15)
        except TimeoutError:
            ready = b""
        finally:
            os.close(read_fd)
        if ready != b"1":
            raise SandboxError("slirp4netns did not configure the sandbox network")

    async def _drop_network(self) -> None:
        """Back to loopback only: stopping slirp4netns removes the sandbox's tap device."""
        async with self._net_lock:
            if self._slirp is not None and self._slirp.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self._slirp.kill()
                await wait_exited(self._slirp)
            self._slirp = None

    @override
    def network_namespace(self) -> str | None:
        if self._holder is None or self._holder.returncode is not None:
            return None
        return f"/proc/{self._holder.pid}/ns/net"

    # -- the container ----------------------------------------------------------------------

    def _mount_args(self, binds: dict[str, str]) -> list[str]:
        """bwrap's view of the sandbox: its root, a fresh /dev and /proc (of the sandbox's
        PID namespace), the shared /dev/shm, and `binds` (host folder -> sandbox path)."""
        # /sys/class/net would list the host's interfaces (names, MACs): hide it.
        argv = ["--bind", str(self._merged), "/", "--dev", "/dev",
                "--bind", str(self.scratch / "shm"), "/dev/shm", "--proc", "/proc",
                # Kernel-wide settings (core_pattern...) must not be writable from inside.
                "--ro-bind", "/proc/sys", "/proc/sys",
                "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
                "--ro-bind", "/sys", "/sys", "--tmpfs", "/sys/class/net"]
        # Host-wide state /proc shows whatever the namespaces (Docker masks the same):
        # the names of the host's keys, kernel memory, timers and scheduler internals.
        for path in PROC_MASKS:
            if os.path.exists(path):  # the same kernel: bwrap cannot create one there
                argv += ["--ro-bind", "/dev/null", path]
        for host, inside in binds.items():
            argv += ["--bind", host, inside]
        return argv

    def _process_args(self, env: dict[str, str], cwd: str) -> list[str]:
        """Capabilities (Docker's default set), environment and folder of a process.

        No --die-with-parent: with --pidns, bwrap arms it in a process whose parent is a
        throw-away intermediate that exits by itself. When that exit comes late (a busy
        machine) the signal kills the command, or the container's PID 1 and with it the
        whole container. What the flag would give is had anyway: every sandbox process
        lives in the holder's PID namespace, which dies with sandlot."""
        argv = ["--new-session", "--cap-drop", "ALL"]
        for cap in CAPS:
            argv += ["--cap-add", f"CAP_{cap}"]
        argv.append("--clearenv")
        for key, value in env.items():
            argv += ["--setenv", key, value]
        return [*argv, "--chdir", cwd]

    def _binds(self, mounts: dict[str, Path] | None = None) -> dict[str, str]:
        binds = {str(host): inside for host, inside in self.spec.binds.items()}
        binds.update({str(host): inside for inside, host in (mounts or {}).items()})
        return binds

    def _container_script(self) -> str:
        """The holder's part of _start_container: wait for sandlot's `go`, bind each
        mount point onto itself (see _prepare_mount_points), start the outer namespace
        whose PID 1 starts the container, say `started`, become the reaper.

        No launcher of sandlot's own: the chain starts where it runs, in the holder's
        namespaces (nsenter, a shell and setpriv per step, and their wait, saved)."""
        merged = str(self._merged)
        binds = "".join(f"mount --bind {shlex.quote(merged + p)} {shlex.quote(merged + p)} "
                        "|| exit 93; " for p in self._pin_chain())
        # --mount-proc: bwrap reads /proc/<its child's pid>, so the outer namespace needs
        # a /proc of its own (in a mount namespace of its own, a copy of the holder's).
        outer = shlex.join([
            "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
            "bash", "-c", _OUTER_PID_ONE, "sandlot-outer",
            "bwrap", "--args", "3", "--seccomp", "4", "--json-status-fd", "5",
            "--as-pid-1", "--",
            *self._pid_one_command()])
        files = (f"3<{shlex.quote(str(self._container_args))} "
                 f"4<{shlex.quote(str(self._syscall_filter))} "
                 f"5>{shlex.quote(str(self._logs / 'status'))} </dev/null "
                 f">{shlex.quote(str(self._logs / 'container.log'))} 2>&1")
        return (f"read go || exit 94; {binds}set -m; {outer} {files} & set +m; "
                f"echo started; {_HOLDER_REAPER}")

    async def _start_container(self) -> None:
        """The sandbox's own PID namespace, its PID 1 IDLE_COMMAND, rooted in the sandbox.

        Every command joins this namespace, so what one leaves running (a server started in
        the background) goes on, adopted by that init, as in a container. It is nested in
        an outer one (PID 1 a reaper with every capability), itself nested in the
        holder's, so it all dies with the holder. A command with mounts of its own (the
        verifier) runs in the outer namespace: it sees every process of the container, and
        none of them sees it (nor, through /proc/<pid>/root, its mounts). bwrap's
        arguments come from a file (--args): no host path shows in /proc/<pid>/cmdline.
        Neither namespace's PID 1 is in the trial's cgroups: the agent filling its memory
        must not get them OOM-killed (that would end the container, or kill the verifier
        with them).
        """
        assert self._holder is not None and self._holder.stdout is not None
        args = [*self._mount_args(self._binds()), "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox",
                *self._process_args(self._env(None), self.spec.workdir)]
        self._container_args.write_bytes(b"".join(a.encode() + b"\0" for a in args))
        self._write_syscall_filter()
        await self._holder_go()
        line = b""
        with contextlib.suppress(TimeoutError):
            line = await asyncio.wait_for(self._holder.stdout.readline(), 30)
        if line.strip() != b"started":
            raise SandboxError("cannot pin the sandbox's mount points or start its "
                               f"container: {await self._holder_stderr() or 'no output'}")
        await self._find_container()
        if self.spec.entrypoint:
            await self._settle_entrypoint()

    def _pid_one_command(self) -> list[str]:
        """IDLE_COMMAND, or the image's ENTRYPOINT (which, given IDLE_COMMAND as its
        arguments, mostly starts its services and execs them), as the image's USER."""
        if not self.spec.entrypoint:
            return list(IDLE_COMMAND)
        command = [*self.spec.entrypoint]
        if self.spec.entrypoint_takes_args:
            command += IDLE_COMMAND
        if self.spec.entrypoint_user is not None:
            command = ["/bin/sh", "-c", _AS_USER, self.spec.entrypoint_user, *command]
        return command

    async def _settle_entrypoint(self) -> None:
        """Give the ENTRYPOINT a moment: one that fails at once (a missing script, a bad
        argument) ends the sandbox here, with its output, not at the agent's first command.
        It is settled once PID 1 runs a child (IDLE_COMMAND's sleep, or a service)."""
        assert self._init_pid is not None
        deadline = time.monotonic() + ENTRYPOINT_SETTLE_SEC
        while time.monotonic() < deadline and self._container_alive():
            if child_pids(self._init_pid):
                return
            await asyncio.sleep(0.02)
        if not self._container_alive():
            raise ContainerExited(self._gone_message())

    def _in_holder(self, path: Path) -> Path:
        """`path` as the holder's mount namespace has it (nothing once it is gone)."""
        holder = self._holder.pid if self._holder is not None else 0
        return Path(f"/proc/{holder}/root") / str(path).lstrip("/")

    def _container_log(self) -> str:
        """The end of what the container's PID 1 wrote (its stdout and stderr), read
        through the holder while it lives."""
        try:
            with self._in_holder(self._logs / "container.log").open("rb") as file:
                file.seek(max(0, file.seek(0, os.SEEK_END) - 2000))
                return file.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def _gone_message(self) -> str:
        what = ("its PID 1, the image's ENTRYPOINT " + shlex.join(self.spec.entrypoint)
                if self.spec.entrypoint else "its PID 1")
        log = self._container_log()
        return (f"the sandbox's container is gone: {what} exited"
                + (f"; its output ends: {log}" if log else " without output")
                + f" ({self._gone_detail()})")

    def _gone_detail(self) -> str:
        """Which of the container's processes ended, and how PID 1 did (bwrap's status
        file): what tells a PID 1 that exited from one that was killed (128 + 9)."""
        def alive(pid: int | None) -> str:
            return "none" if pid is None else "running" if _running(pid) else "gone"
        holder = ("none" if self._holder is None else "running"
                  if self._holder.returncode is None else f"exited {self._holder.returncode}")
        init = alive(self._init_pid)
        with contextlib.suppress(OSError, ValueError, KeyError):
            for line in self._in_holder(self._logs / "status").read_text().splitlines():
                if "exit-code" in line:
                    init = f"exited {json.loads(line)['exit-code']}"
        return f"holder {holder}, outer reaper {alive(self._outer_pid)}, PID 1 {init}"

    async def _find_container(self) -> None:
        """Host pids of the two PID 1s the holder started: the outer namespace's (holder
        -> its PID 1 -> unshare -> it), then the container's (-> bwrap -> it) once it runs
        a child (IDLE_COMMAND's sleep: the sandbox's mounts are in place) or, with an
        ENTRYPOINT, once it is there. bwrap exits with the container's PID 1, so an outer
        PID 1 that idles with no child means the container is gone."""
        assert self._holder is not None
        holder = self._holder
        around = os.stat(f"/proc/{holder.pid}/ns/pid_for_children").st_ino
        deadline = time.monotonic() + 30
        # A PID 1 shows within a few ms: look every ms until then (a look reads two or
        # three /proc files), every 5 ms after.
        look_often_until = time.monotonic() + 0.05
        while time.monotonic() < deadline and holder.returncode is None:
            with contextlib.suppress(OSError):
                if self._outer_pid is None:
                    self._outer_pid = _pid_one_below(holder.pid, 3, around)
                if self._outer_pid is not None:
                    outer_ns = os.stat(f"/proc/{self._outer_pid}/ns/pid").st_ino
                    init = _pid_one_below(self._outer_pid, 2, outer_ns,
                                          running_child=not self.spec.entrypoint)
                    if init is not None:
                        self._init_pid = init
                        return
                    if (Path(f"/proc/{self._outer_pid}/comm").read_text().strip() == "sleep"
                            and not child_pids(self._outer_pid)):
                        break  # bwrap has come and gone
            await asyncio.sleep(0.001 if time.monotonic() < look_often_until else 0.005)
        if self.spec.entrypoint and self._outer_pid is not None:
            raise ContainerExited(self._gone_message())
        raise SandboxError(f"the sandbox's container did not start: "
                           f"{self._container_log() or 'no output'}")

    def _container_alive(self) -> bool:
        return (self._holder is not None and self._holder.returncode is None
                and self._outer_pid is not None and _running(self._outer_pid)
                and self._init_pid is not None and _running(self._init_pid))

    # -- exec ------------------------------------------------------------------------------

    def _exec_argv(self, command: list[str], env: dict[str, str], cwd: str, user: str | None,
                   mounts: dict[str, Path] | None, pidns_fd: int,
                   filter_fd: int) -> list[str]:
        """A command in the container: its PID, IPC, UTS and network namespaces; its own
        mount namespace (the same root, plus `mounts` only it sees)."""
        assert self._holder is not None and self._init_pid is not None
        holder, init = self._holder.pid, self._init_pid
        # bwrap itself runs in the holder's PID namespace, whose numbers the holder's /proc
        # (the one it reads) shows, and puts the command in the container's, nested in it.
        argv = ["nsenter", f"--pid=/proc/{holder}/ns/pid_for_children",
                f"--mount=/proc/{holder}/ns/mnt", f"--net=/proc/{holder}/ns/net",
                f"--ipc=/proc/{init}/ns/ipc", f"--uts=/proc/{init}/ns/uts",
                "bwrap", "--pidns", str(pidns_fd), "--seccomp", str(filter_fd),
                *self._mount_args(self._binds(mounts)),
                "--unshare-cgroup-try", *self._process_args(env, cwd), "--"]
        if user is not None:
            # Looked up inside: the Dockerfile (or sandlot.sandbox.users) may add users.
            argv += ["sh", "-c", _AS_USER, user]
        return argv + command

    def _env(self, extra: dict[str, str] | None, user: str | None = None) -> dict[str, str]:
        """PATH, HOME, LANG as a container has them, then the task's env, then `extra`.
        A command run as a user gets that user's HOME (set inside, from /etc/passwd),
        unless the task or the caller names one."""
        if self.spec.base_env is None:
            env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
        else:  # the image's own, and a PATH if it sets none (as Docker does)
            env = {"PATH": DEFAULT_PATH, **self.spec.base_env}
        if user is None:
            env.setdefault("HOME", "/root")
        env.update(self.spec.env)
        env.update(extra or {})
        return env

    @override
    async def start_process(
        self,
        command: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        network: Network = "none",
        stream_limit: int = 64 * 1024 * 1024,
    ) -> LocalProcess:
        proc = await self._launch(command, env, cwd, user, network, None, self._cgroups,
                                  stdin_pipe=True, stream_limit=stream_limit)
        return LocalProcess(proc, self._cgroups, self.disk_full if self._disk else None)

    async def _launch(self, command: list[str], env: dict[str, str] | None, cwd: str | None,
                      user: str | None, network: Network, mounts: dict[str, Path] | None,
                      cgroups: CgroupLimits | None, *, stdin_pipe: bool,
                      stream_limit: int = 2 ** 16) -> WatchedProcess:
        """Start `command` in the container, in `cgroups`, with the network the call asks
        for (what exec and start_process share)."""
        if self._holder is None or self._holder.returncode is not None:
            raise SandboxError("sandbox is not running")
        if not self._container_alive():
            raise ContainerExited(self._gone_message())
        if goes_outbound(network):
            await self._ensure_network(allowed_networks(network))
        else:
            await self._drop_network()
        check_mount_points(self.spec, mounts or ())
        if user in ROOT_USERS:  # already root: no switch (and no setpriv needed)
            user = None
        pid_one = self._outer_pid if mounts else self._init_pid
        try:
            pidns_fd = os.open(f"/proc/{pid_one}/ns/pid", os.O_RDONLY)
        except OSError as exc:
            raise SandboxError(f"the sandbox's container is gone: {exc}") from exc
        try:
            filter_fd = self._open_syscall_filter()
        except BaseException:
            os.close(pidns_fd)
            raise
        full = self._exec_argv(command, self._env(env, user), cwd or self.spec.workdir, user,
                               mounts, pidns_fd, filter_fd)
        try:
            return await spawn(
                *in_cgroups(full, cgroups.procs_files if cgroups else []),
                stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                limit=stream_limit, env=LAUNCH_ENV, start_new_session=True,
                pass_fds=(pidns_fd, filter_fd),
            )
        except OSError as exc:
            raise SandboxError(f"cannot start bwrap: {exc}") from exc
        finally:
            os.close(pidns_fd)
            os.close(filter_fd)

    def _write_syscall_filter(self) -> None:
        """The sandbox's syscall filter (seccomp.py), written on first use."""
        if not self._syscall_filter.exists():
            write_sandbox_filter(self._syscall_filter)  # NoSyscallFilter is a SandboxError

    def _open_syscall_filter(self) -> int:
        """A fresh descriptor of the sandbox's syscall filter for one bwrap, which reads it
        from the start."""
        self._write_syscall_filter()
        return os.open(self._syscall_filter, os.O_RDONLY | os.O_CLOEXEC)

    @override
    async def exec(
        self,
        command: list[str] | str,
        *,
        timeout_sec: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        network: Network = "none",
        stdin: bytes | None = None,
        max_output_bytes: int = 8 * 1024 * 1024,
        mounts: dict[str, Path] | None = None,
    ) -> ExecResult:
        argv = command if isinstance(command, list) else ["bash", "-c", command]
        # A command with mounts of its own (the verifier) is apart from the rest: out of
        # their sight (see _start_container), its own resource groups, so what the agent
        # left running cannot starve it, and nothing it starts outlives it.
        cg = (CgroupLimits.create(f"{self.spec.name}-x{next(self._private_ids)}",
                                  self.spec.memory_mb, self.spec.cpus, self.spec.pids_max)
              if mounts else self._cgroups)
        try:
            return await self._exec_in(argv, cg, timeout_sec, env, cwd, user, network, stdin,
                                       max_output_bytes, mounts)
        finally:
            if mounts and cg is not None:
                await asyncio.to_thread(cg.destroy)

    async def _exec_in(self, argv: list[str], cg: CgroupLimits | None,
                       timeout_sec: float | None, env: dict[str, str] | None, cwd: str | None,
                       user: str | None, network: Network, stdin: bytes | None,
                       max_output_bytes: int, mounts: dict[str, Path] | None) -> ExecResult:
        before = cg.counters() if cg else (0, 0)
        disk_full_before = self.disk_full()
        started = time.monotonic()
        proc = await self._launch(argv, env, cwd, user, network, mounts, cg,
                                  stdin_pipe=stdin is not None)
        # stdin is fed beside the readers, under the timeout: a command echoing a large
        # input back must not block on a full stdout pipe while we still write.
        feeder = asyncio.ensure_future(_feed(proc.stdin, stdin))
        readers = (CappedReader(proc.stdout, max_output_bytes),
                   CappedReader(proc.stderr, max_output_bytes))
        timed_out = False
        try:
            async with asyncio.timeout(timeout_sec):
                await wait_exited(proc)
        except TimeoutError:
            timed_out = True
        finally:
            feeder.cancel()
            if proc.returncode is None:
                kill_child_tree(proc.pid)
                await wait_exited(proc)
        if mounts and cg is not None:
            await asyncio.to_thread(cg.kill_all)
        out, err = await asyncio.gather(*(r.collect(OUTPUT_GRACE_SEC) for r in readers))
        # A process the command left running may hold its pipes: read on, discarding.
        if not all(r.done for r in readers):
            self._drains = {p: rs for p, rs in self._drains.items()
                            if not all(r.done for r in rs)}
            self._drains[proc] = readers
        after = cg.counters() if cg else (0, 0)
        limit = None
        if after[0] > before[0]:
            limit = "memory"
        elif after[1] > before[1]:
            limit = "pids"
        elif not disk_full_before and self.disk_full():
            limit = "disk"
        if proc.returncode == CGROUP_JOIN_FAILED and err.startswith(b"sandlot: cannot join"):
            raise SandboxError(err.decode(errors="replace").strip())
        return ExecResult(
            stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"),
            exit_code=None if timed_out else proc.returncode,
            duration_sec=time.monotonic() - started, timed_out=timed_out, limit_hit=limit,
            truncated=readers[0].truncated or readers[1].truncated,
        )

    # -- files -----------------------------------------------------------------------------

    @override
    async def upload(self, local: Path, remote: str) -> None:
        try:
            await asyncio.to_thread(self._copy, local, self.host_path(remote))
        except OSError as exc:  # shutil.Error too
            if self._disk is not None and (exc.errno == errno.ENOSPC or self.disk_full()):
                raise SandboxDiskFull(f"cannot copy {local.name} to {remote}: the "
                                      f"sandbox's disk ({self.spec.storage_mb} MB, "
                                      "storage_mb) is full") from exc
            raise

    @override
    async def download(self, remote: str, local: Path) -> None:
        await asyncio.to_thread(self._copy, self.host_path(remote), local)
        await asyncio.to_thread(_defuse_links, local)

    async def _remove(self, remote: str) -> None:
        await asyncio.to_thread(remove_tree, self.host_path(remote))

    def _bases(self) -> list[Path]:
        """The environment before the trial, top first: what changes are measured against."""
        if self._base_view is not None:
            if not self._base_view_in_holder:
                return [self._base_view]
            if self._holder is None:
                raise SandboxError("sandbox not started")
            return [self._in_holder(self._base_view)]
        layer = getattr(self, "_layer", None)
        return [layer, Path("/")] if layer is not None else [Path("/")]

    def _bases_of(self, path: str) -> list[Path]:
        """The environment trees that may hold `path` before the trial: none inside a
        host folder this sandbox hides (its pristine state there is the empty mask, and
        the host's files must never be copied or diffed in)."""
        if below_any(path, getattr(self, "_hidden_paths", set())):
            return []
        return self._bases()

    @override
    async def changes(self) -> list[Change]:
        ignore = set(getattr(self, "_setup_paths", set())) | {"/etc/resolv.conf"}
        return await asyncio.to_thread(walk_upper, self._upper, self._bases(), ignore,
                                       hidden=set(getattr(self, "_hidden_paths", set())))

    async def diff(self, folder: str, max_files: int = 500,
                   max_bytes: int = 1_000_000) -> WorkspaceDiff:
        """A unified diff of what the trial changed under `folder` against the environment
        (its build layer, else the host's root): the workspace diff a reviewer reads."""
        try:
            changes = await self.changes()
        except Unverifiable as exc:
            note = f"the changes could not be listed: {exc}"
            return WorkspaceDiff(f"[{note}]\n", [note])
        prefix = folder.rstrip("/") + "/"
        paths = sorted(c.path for c in changes if c.path.startswith(prefix))
        # Files created inside masked folders (e.g. a workdir under /tmp) are not listed by
        # changes(); walk the folder itself when it lies in one.
        return await asyncio.to_thread(self._diff_paths, folder, paths, max_files, max_bytes)

    def _diff_paths(self, folder: str, paths: list[str], max_files: int,
                    max_bytes: int) -> WorkspaceDiff:
        """The diff. Every file is the agent's: read by bounded_fs from the sandbox's root
        (no link followed, nothing but regular files, at most `max_bytes` each), so a link
        to a host file, a FIFO or a sparse giant shows as a note, never as the host's
        bytes or a stall."""
        import difflib

        merged = self.host_path("/")
        out: list[str] = []
        cut: list[str] = []
        if not paths:
            paths, note = _regular_files_below(merged, folder, max_files + 1)
            if note:
                out.append(note)
        size = 0
        for path in paths[:max_files]:
            base = next((b for b in self._bases_of(path) if exists_inside(b, path)), None)
            try:
                old_bytes = read_regular(base, path, max_bytes) if base is not None else None
                new_bytes = read_regular(merged, path, max_bytes)
            except CapExceeded as exc:
                out.append(f"[{path}: {exc.reason}; not shown]\n")
                cut.append(f"{path}: {exc.reason}")
                continue
            old, new = _text_lines(old_bytes), _text_lines(new_bytes)
            if old is None or new is None:
                out.append(f"Binary files a{path} and b{path} differ\n")
                continue
            out.extend(difflib.unified_diff(
                old, new, f"a{path}" if old_bytes is not None else "/dev/null",
                f"b{path}" if new_bytes is not None else "/dev/null"))
            size = sum(len(x) for x in out)
            if size > max_bytes:
                out.append(f"[diff truncated at {max_bytes} bytes]\n")
                cut.append(f"truncated at {max_bytes} bytes")
                break
        if len(paths) > max_files:
            out.append(f"[{len(paths) - max_files} more changed files not shown]\n")
            cut.append(f"{len(paths) - max_files} changed files past the first {max_files}")
        return WorkspaceDiff("".join(out), cut)

    @override
    async def restore(self, remote: str) -> None:
        """Copy the base's version over the trial's (through the merged view), or delete."""
        target = self.host_path(remote)
        for base in self._bases_of(remote):
            original = base / remote.lstrip("/")
            if os.path.lexists(original):
                await asyncio.to_thread(self._copy, original, target)
                return
        await self._remove(remote)

    @override
    async def expose(self, local: Path, remote: str) -> None:
        """A read-only bind mount in the holder's mount namespace (no copy, shared pages)."""
        if self._holder is None or self._holder.returncode is not None:
            raise SandboxError("sandbox is not running")
        if not local.is_dir():
            raise SandboxError(f"cannot expose {local}: not a folder")
        await self._mkdir(remote)
        target = str(self._merged) + "/" + remote.strip("/")
        proc = await spawn(
            "nsenter", f"--mount=/proc/{self._holder.pid}/ns/mnt", "mount", "--bind", "-o",
            "ro", str(local.resolve()), target, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise SandboxError(f"cannot mount {local} at {remote}: {err.decode().strip()}")

    async def _mkdir(self, remote: str) -> None:
        self.host_path(remote).mkdir(parents=True, exist_ok=True)

    @classmethod
    def _copy(cls, src: Path, dst: Path) -> None:
        if not src.exists() and not src.is_symlink():
            raise SandboxError(f"cannot copy {src}: it does not exist")
        remove_tree(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
