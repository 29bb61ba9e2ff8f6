"""A lock on a file shared by every sandlot process on this machine (jobs running at once
share caches: agent installs, fetched datasets)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

#: How often a waiter tries again; flock has no awaitable form.
LOCK_POLL_SEC = 0.2


@contextlib.asynccontextmanager
async def file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive flock, waited for without blocking the event loop (and cancellable).
    The kernel drops it when the holder dies, so a killed run never leaves it held."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL_SEC)
        yield
    finally:
        os.close(fd)  # closing drops the lock
