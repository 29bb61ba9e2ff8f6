"""sandlot's syscall filter, compiled by libseccomp (through its Python bindings): bwrap
loads it (`--seccomp FD`) before it runs any process of a local sandbox, container_join
before it runs a verifier's command in a container.

Every process of a sandbox is real root without a user namespace (docs/security.md), with
Docker's default capabilities. The capabilities already refuse most of what follows; the
filter refuses it again, by the call, so that no capability granted later and no kernel
quirk reopens it. Each denied call fails with EPERM, as under Docker:

- new namespaces of any kind (`unshare`, `clone` with a CLONE_NEW* flag, `setns`): in a
  user namespace of its own a process holds every capability and can mount over what
  the verifier reads in its view, which is how `unshare -Urm` escaped the rules before.
  `clone3` passes its flags in memory a filter cannot read, so it fails with ENOSYS and
  the C library falls back to `clone`, whose flags the filter reads (as Docker does);
- mounting (`mount`, `umount2`, the new mount API, `pivot_root`);
- the kernel's key-management calls (`add_key`, `request_key`, `keyctl`): keyrings are
  not namespaced, so without a user namespace a key one trial stored is read by the next;
- kernel modules, kexec, `bpf`, `perf_event_open`, `open_by_handle_at`, `userfaultfd`,
  swap, reboot, the host's clock, accounting, quotas, `syslog`, port I/O.

`ptrace` stays allowed: the PID namespace leaves a sandbox's processes only each other to
trace, and debuggers and `strace` are tools tasks use.

The filter covers every calling convention of the machine (x86-64 with i386 and x32;
arm64 with 32-bit arm); a process calling in by any other is killed (libseccomp's
default for an unknown architecture).
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import tempfile
from pathlib import Path

from sandlot.errors import SandboxError

#: Denied outright, on every calling convention that has them.
DENIED_CALLS = (
    # namespaces (unshare and clone: only with a CLONE_NEW* flag, below)
    "setns",
    # mounts
    "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    # keyrings
    "add_key", "request_key", "keyctl",
    # the kernel itself
    "init_module", "finit_module", "delete_module", "create_module", "kexec_load",
    "kexec_file_load", "bpf", "perf_event_open", "lookup_dcookie", "userfaultfd",
    "open_by_handle_at", "swapon", "swapoff", "reboot", "syslog", "acct", "quotactl",
    "iopl", "ioperm", "settimeofday", "clock_settime", "stime", "vhangup", "nfsservctl",
    "uselib", "_sysctl", "get_kernel_syms", "query_module",
)

#: CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
#: CLONE_NEWNET (<linux/sched.h>); CLONE_NEWTIME (0x80) only for unshare: in clone's
#: flags that bit is part of the exit signal.
CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000,
                   0x20000000, 0x40000000)
CLONE_NEWTIME = 0x00000080

#: The extra calling conventions a process of each machine can use (libseccomp names).
_COMPAT_ARCHES = {"x86_64": ("X86", "X32"), "aarch64": ("ARM",)}


class NoSyscallFilter(SandboxError):
    """The filter cannot be built here (no libseccomp, or an unknown machine)."""


def _bindings():  # type: ignore[no-untyped-def]
    """pyseccomp: libseccomp's Python API over the system's libseccomp through ctypes
    (libseccomp's own bindings are not on the package index)."""
    try:
        import pyseccomp  # type: ignore[import-untyped]
    except (ImportError, OSError, RuntimeError) as exc:  # RuntimeError: no libseccomp.so
        raise NoSyscallFilter(
            f"sandlot's syscall filter needs libseccomp ({exc}): install the "
            "system package libseccomp2 (Debian/Ubuntu) or libseccomp (Fedora)") from exc
    return pyseccomp


def check_syscall_filter() -> None:
    """Raise NoSyscallFilter if the filter cannot be built on this machine: said before
    any sandbox starts (preflight), not by the first trial."""
    if platform.machine() not in _COMPAT_ARCHES:
        raise NoSyscallFilter(f"the local sandbox has no syscall filter for "
                              f"{platform.machine()!r} (known: {', '.join(_COMPAT_ARCHES)})")
    _bindings()


@functools.cache
def sandbox_filter_program() -> bytes:
    """The filter program for this machine, as the kernel and bwrap read it (an array of
    `struct sock_filter`), compiled by libseccomp; once per process, as it never changes
    (a failure is not kept: the next call raises again)."""
    check_syscall_filter()
    sc = _bindings()
    deny = sc.ERRNO(errno.EPERM)
    program = sc.SyscallFilter(sc.ALLOW)
    for arch in _COMPAT_ARCHES[platform.machine()]:
        program.add_arch(getattr(sc.Arch, arch))
    for name in DENIED_CALLS:
        try:
            program.add_rule(deny, name)
        except (OSError, ValueError) as exc:  # fail closed: no filter with a hole in it
            raise NoSyscallFilter(f"libseccomp cannot filter {name}() ({exc}): the local "
                                  "sandbox needs libseccomp 2.5 or later") from exc
    for flag in CLONE_NEW_FLAGS:
        program.add_rule(deny, "unshare", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        program.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    program.add_rule(deny, "unshare", sc.Arg(0, sc.MASKED_EQ, CLONE_NEWTIME, CLONE_NEWTIME))
    program.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        program.export_bpf(out)
        out.seek(0)
        return out.read()


def write_sandbox_filter(path: Path) -> None:
    """Write the filter program to `path`, for bwrap's `--seccomp FD`; atomically, since
    sandboxes started at once may share it."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_bytes(sandbox_filter_program())
    os.replace(partial, path)
