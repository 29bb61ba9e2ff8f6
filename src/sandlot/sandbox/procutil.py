"""Process helpers: children that die with sandlot, and bounded output capture."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def child_setup(cgroup_procs: list[str] | None = None) -> Callable[[], None]:
    """A preexec_fn: join cgroups and get SIGKILLed if sandlot dies (even by SIGKILL).

    The death signal is armed only after fork: if sandlot died in between, the child is
    already an orphan and the signal would never come, so it exits instead of living on
    (a holder would otherwise sleep forever).
    """
    files = list(cgroup_procs or [])
    parent = os.getpid()

    def setup() -> None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
        pid = str(os.getpid()).encode()
        for path in files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    return setup


async def read_capped(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, bool]:
    """Read a stream to EOF, keeping at most `limit` bytes (head), reporting truncation."""
    if stream is None:
        return b"", False
    chunks: list[bytes] = []
    size = 0
    truncated = False
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        if size < limit:
            keep = chunk[: limit - size]
            chunks.append(keep)
            size += len(keep)
            truncated = truncated or len(keep) < len(chunk)
        else:
            truncated = True
    return b"".join(chunks), truncated
