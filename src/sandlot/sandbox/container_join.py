"""Join a running container from the host: pin its mount points, or run one command there
with host folders that only that command sees (the verifier's /tests and /logs/verifier).

Run by the host's Python as root, as a script of the standard library alone
(`python -I -S container_join.py '<json>'`), because joining a container's namespaces
changes the whole process: a Docker exec cannot give one command mounts of its own.

How the command is kept apart from what the agent left running in the container:
- Its folders are mounted in a mount namespace of its own (a copy of the container's),
  from detached copies of the host folders (open_tree + move_mount).
- Processes of the container reach another process's mounts only through
  /proc/<pid>/root, which the kernel guards with a ptrace check: a caller whose
  capabilities are not a superset of the target's is refused. The command keeps one
  capability no container process has (CAP_WAKE_ALARM, harmless), as root and as any
  other user (ambient), so every process of the container is refused.
- The mount points were pinned (bound onto themselves) before the agent ran: a process
  without CAP_SYS_ADMIN can neither remove nor move them, so the command's folders are
  mounted where it expects them.

The container's seccomp and AppArmor profiles are not applied to the command (test.sh
is the task author's); its capabilities are the container's, plus the one above. sandlot's
own syscall filter (seccomp.py, compiled on the host by libseccomp and passed in as
`seccomp`, hex) is: the verifier runs the agent's code, which must not make the calls the
filter denies there either. It is loaded while this process still holds CAP_SYS_ADMIN, so
no `no_new_privs` is needed and setuid programs (sudo) keep working in the command.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import warnings  # noqa: F401  (os.execvpe imports it: it must be loaded before joining)

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOVE_MOUNT_T_EMPTY_PATH = 0x40
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
CAP_WAKE_ALARM = 35
LINUX_CAPABILITY_VERSION_3 = 0x20080522
#: The namespaces a command joins, mount last (after it, host paths are gone).
NAMESPACES = ("ipc", "uts", "net", "pid", "mnt")
EXIT_SETUP = 125
#: How mountinfo escapes a space, tab, newline or backslash in a path (\040).
#: Everything is imported and compiled up front: once in the container's mount namespace,
#: the host's Python library is out of sight.
OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")

libc = ctypes.CDLL(None, use_errno=True)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class SetupError(Exception):
    """A step of joining failed: reported on stderr, exit EXIT_SETUP."""


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")
    return result


def caps_of(mask_hex: str) -> set[int]:
    """Capability numbers of a /proc/<pid>/status mask (CapBnd: 000001ffffffffff)."""
    mask = int(mask_hex, 16)
    return {bit for bit in range(64) if mask >> bit & 1}


def bounding_caps(pid: int) -> set[int]:
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("CapBnd:"):
            return caps_of(line.split()[1])
    raise SetupError(f"no CapBnd in /proc/{pid}/status")


def set_caps(caps: set[int]) -> None:
    """Effective, permitted and inheritable sets of this thread, all `caps`."""
    words = [0, 0]
    for cap in caps:
        words[cap // 32] |= 1 << (cap % 32)
    header = CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (CapData * 2)(*(CapData(w, w, w) for w in words))
    _check(libc.capset(ctypes.byref(header), data), "capset")


def parse_ids(spec: str | None, passwd: str, group: str) -> tuple[int, int, list[int], str]:
    """(uid, gid, supplementary gids, home) for a Docker user spec, read from the
    container's /etc/passwd and /etc/group: `name`, `uid`, `name:group`, `uid:gid`."""
    spec = spec or "0"
    user, _, grp = spec.partition(":")
    users = [line.split(":") for line in passwd.splitlines() if line.count(":") >= 6]
    groups = [line.split(":") for line in group.splitlines() if line.count(":") >= 3]
    entry = next((u for u in users if u[0] == user), None)
    if entry is None and user.isdigit():
        entry = next((u for u in users if u[2] == user), None)
    if entry is None and not user.isdigit():
        raise SetupError(f"unable to find user {user}: no matching entries in passwd file")
    uid = int(entry[2]) if entry else int(user)
    gid = int(entry[3]) if entry else 0
    home = entry[5] if entry else "/"
    if grp:
        found = next((g for g in groups if g[0] == grp), None)
        if found is None and not grp.isdigit():
            raise SetupError(f"unable to find group {grp}: no matching entries in group file")
        gid = int(found[2]) if found else int(grp)
    name = entry[0] if entry else None
    extra = sorted({int(g[2]) for g in groups if name and name in g[3].split(",")} - {gid})
    return uid, gid, extra, home


def mount_points() -> set[str]:
    points = set()
    for line in _read("/proc/self/mountinfo").splitlines():
        point = line.split()[4]
        points.add(OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), point))
    return points


def open_trees(mounts: dict[str, str]) -> dict[str, int]:
    """Detached copies of the host folders, made while host paths are still visible."""
    libc.syscall.restype = ctypes.c_long
    trees = {}
    for inside, host in mounts.items():
        fd = libc.syscall(SYS_OPEN_TREE, AT_FDCWD, host.encode(),
                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)
        trees[inside] = _check(fd, f"open_tree {host}")
    return trees


def attach_trees(trees: dict[str, int]) -> None:
    """Mount each tree at its pinned mount point, in this process's own mount namespace."""
    _check(libc.unshare(CLONE_NEWNS), "unshare the mount namespace")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    points = mount_points()
    for inside, fd in trees.items():
        if inside not in points:
            raise SetupError(f"{inside} is no longer a mount point of the container")
        target = os.open(inside, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
        _check(libc.syscall(SYS_MOVE_MOUNT, fd, b"", target, b"",
                            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
               f"mount at {inside}")
        os.close(target)
        os.close(fd)


def join_cgroups(pid: int) -> None:
    """The container's cgroups (its memory and pids limits count this command too)."""
    for line in _read(f"/proc/{pid}/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        folder = controllers.replace("name=", "") if controllers else ""
        procs = os.path.join("/sys/fs/cgroup", folder, path.lstrip("/"), "cgroup.procs")
        try:
            with open(procs, "w") as handle:
                handle.write(str(os.getpid()))
        except OSError:
            continue


def drop_to(user: str | None, keep: set[int]) -> str:
    """Become `user` with the container's capabilities (root) or none (others), plus
    CAP_WAKE_ALARM; returns the user's home."""
    uid, gid, extra, home = parse_ids(user, _read("/etc/passwd"), _read("/etc/group"))
    last = int(_read("/proc/sys/kernel/cap_last_cap").strip() or "40")
    kept = (keep | {CAP_WAKE_ALARM}) if uid == 0 else {CAP_WAKE_ALARM}
    for cap in range(last + 1):
        if cap not in keep | {CAP_WAKE_ALARM}:
            _check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _check(libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keep capabilities")
    os.setgroups(extra)
    os.setgid(gid)
    os.setuid(uid)
    set_caps(kept)
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_WAKE_ALARM, 0, 0),
           "raise the ambient capability")
    return home


class SockFprog(ctypes.Structure):
    """<linux/filter.h> struct sock_fprog: a filter program the kernel loads."""
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_filter(program_hex: str) -> None:
    """Load a compiled filter (an array of 8-byte `struct sock_filter`) on this process;
    everything it execs keeps it."""
    program = bytes.fromhex(program_hex)
    if not program or len(program) % 8:
        raise SetupError("the syscall filter is not a filter program")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
           "load the syscall filter")


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def pin(request: dict) -> None:
    """Make each path a folder bound onto itself in the container's mount namespace."""
    fd = os.open(f"/proc/{request['pid']}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    _check(libc.setns(fd, 0), "join the container's mount namespace")
    for path in request["paths"]:
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            os.unlink(path)
        os.makedirs(path, exist_ok=True)
        _check(libc.mount(path.encode(), path.encode(), None, MS_BIND | MS_REC, None),
               f"pin {path}")


def run(request: dict) -> int:
    pid = int(request["pid"])
    keep = bounding_caps(pid)
    namespaces = {ns: os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
                  for ns in NAMESPACES}
    trees = open_trees(request["mounts"])
    join_cgroups(pid)
    for ns in NAMESPACES[:-1]:
        _check(libc.setns(namespaces[ns], 0), f"join the container's {ns} namespace")
    child = os.fork()  # the child is in the container's PID namespace
    if child == 0:
        try:
            _check(libc.setns(namespaces["mnt"], 0), "join the container's mount namespace")
            attach_trees(trees)
            if request.get("seccomp"):
                load_filter(request["seccomp"])
            home = drop_to(request.get("user"), keep)
            _check(libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "set the parent-death signal")
            env = dict(request["env"])
            env.setdefault("HOME", home)
            cwd = request.get("cwd") or "/"
            try:
                os.chdir(cwd)
            except OSError as exc:
                raise SetupError(f"cannot enter {cwd}: {exc.strerror}") from exc
            os.execvpe(request["argv"][0], request["argv"], env)
        except FileNotFoundError as exc:  # as a shell: command not found
            os.write(2, f"{request['argv'][0]}: {exc.strerror}\n".encode())
            os._exit(127)
        except (SetupError, OSError) as exc:
            os.write(2, f"sandlot: cannot run the command in the container: {exc}\n".encode())
        os._exit(EXIT_SETUP)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else \
        128 + os.WTERMSIG(status)


def main(argv: list[str]) -> int:
    request = json.loads(argv[1])
    try:
        if request["mode"] == "pin":
            pin(request)
            return 0
        return run(request)
    except (SetupError, OSError) as exc:
        os.write(2, f"sandlot: cannot join the container: {exc}\n".encode())
        return EXIT_SETUP


if __name__ == "__main__":
    sys.exit(main(sys.argv))
