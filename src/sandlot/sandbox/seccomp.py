"""The local sandbox's syscall filter: a classic BPF program bwrap loads (`--seccomp FD`)
before it runs any process of a sandbox.

What it denies, and why: the kernel's key-management calls (`add_key`, `request_key`,
`keyctl`). Keyrings are not namespaced by a mount, PID or IPC namespace: without a user
namespace, root in every sandbox shares one user keyring with root on the host, so a key
one trial stored is read by the next (and by the host). Docker's default profile denies
the same calls. Each denied call fails with EPERM, as it does under Docker.

The program checks the calling convention first: on x86-64 a process may also call in
as i386 (`int 0x80`) or x32 (numbers with bit 30 set), each with its own numbers; on
arm64, as 32-bit arm. A convention the filter does not know is refused as a whole.
"""

from __future__ import annotations

import errno
import platform
import struct

# <linux/audit.h>
_AUDIT_ARCH_X86_64 = 0xC000003E
_AUDIT_ARCH_I386 = 0x40000003
_AUDIT_ARCH_AARCH64 = 0xC00000B7
_AUDIT_ARCH_ARM = 0x40000028
_X32_SYSCALL_BIT = 0x40000000

# <linux/bpf_common.h>, <linux/seccomp.h>
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_AND_K = 0x54
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_OFFSET_NR, _OFFSET_ARCH = 0, 4

#: (add_key, request_key, keyctl) per calling convention.
_KEY_CALLS: dict[int, tuple[int, ...]] = {
    _AUDIT_ARCH_X86_64: (248, 249, 250),  # x32 too, once bit 30 is masked off
    _AUDIT_ARCH_I386: (286, 287, 288),
    _AUDIT_ARCH_AARCH64: (217, 218, 219),
    _AUDIT_ARCH_ARM: (309, 310, 311),
}
#: The conventions a process of each machine can call in with.
_MACHINES: dict[str, tuple[int, ...]] = {
    "x86_64": (_AUDIT_ARCH_X86_64, _AUDIT_ARCH_I386),
    "aarch64": (_AUDIT_ARCH_AARCH64, _AUDIT_ARCH_ARM),
}


class NoFilterForMachine(RuntimeError):
    """This machine's calling conventions are not known to the filter."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def key_management_filter(machine: str | None = None) -> bytes:
    """The filter program for `machine` (this one by default), as bwrap reads it: an
    array of `struct sock_filter`."""
    machine = machine or platform.machine()
    arches = _MACHINES.get(machine)
    if arches is None:
        raise NoFilterForMachine(f"the local sandbox has no syscall filter for {machine!r} "
                                 f"(known: {', '.join(_MACHINES)})")
    # Per convention, a block: load the number (x86-64: bit 30 off), deny each call.
    blocks: list[list[tuple[int, int, str | None]]] = []
    for arch in arches:
        block: list[tuple[int, int, str | None]] = [(_LD_W_ABS, _OFFSET_NR, None)]
        if arch == _AUDIT_ARCH_X86_64:
            block.append((_AND_K, ~_X32_SYSCALL_BIT & 0xFFFFFFFF, None))
        block += [(_JEQ_K, nr, "deny") for nr in _KEY_CALLS[arch]]
        block.append((_RET_K, _RET_ALLOW, None))
        blocks.append(block)
    # Layout: load arch; one test per convention jumping to its block; kill otherwise;
    # the blocks; the shared deny.
    head = 1 + len(arches) + 1
    starts, at = [], head
    for block in blocks:
        starts.append(at)
        at += len(block)
    deny = at
    program = [_insn(_LD_W_ABS, _OFFSET_ARCH)]
    for i, arch in enumerate(arches):
        here = 1 + i
        program.append(_insn(_JEQ_K, arch, jt=starts[i] - here - 1, jf=0))
    program.append(_insn(_RET_K, _RET_KILL_PROCESS))
    for start, block in zip(starts, blocks, strict=True):
        for offset, (code, k, target) in enumerate(block):
            here = start + offset
            jump = deny - here - 1 if target == "deny" else 0
            if jump > 255:
                raise AssertionError("seccomp program too long for a short jump")
            program.append(_insn(code, k, jt=jump))
    program.append(_insn(_RET_K, _RET_ERRNO | errno.EPERM))
    return b"".join(program)
