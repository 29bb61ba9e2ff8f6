"""task.toml's `storage_mb` on a container engine.

Docker and Podman cap a container's writable layer only on some storage drivers (overlay
on XFS with project quotas), so the cap is kept by measuring instead: the engine's own
count of the container's writable layer (`SizeRw`, what `docker ps --size` shows) is
read every few seconds while a command runs, and once more when it ends. Past the cap,
every command still running is killed and the command reports the `disk` limit, which
the trial turns into `disk_limit`, as the local backend's full disk does. The layer can
pass the cap by what a few seconds of writing add before the kill; the host's disk is
what the engine's own storage has.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

#: How often the writable layer is measured while a command runs.
POLL_SEC = 5.0


@dataclass
class StorageWatch:
    """Measures one container's writable layer against `max_bytes`; `hits` counts the
    times it was found past it (a command's limit is `disk` when it grew meanwhile)."""

    measure: Callable[[], Awaitable[int | None]]
    max_bytes: int
    #: Kills every command still running in the container.
    on_full: Callable[[], Awaitable[None]]
    poll_sec: float = POLL_SEC
    hits: int = 0
    #: How many commands run now: the layer is measured only while one does.
    running: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def check(self) -> bool:
        """Measure now; past the cap, count a hit and kill what runs. An engine that does
        not answer is not a hit (the next measure decides)."""
        size = await self.measure()
        if size is None or size <= self.max_bytes:
            return False
        self.hits += 1
        await self.on_full()
        return True

    def started(self) -> int:
        """A command starts: the watch runs while any does. Returns the hits so far."""
        self.running += 1
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._poll())
        return self.hits

    async def ended(self, hits_before: int) -> bool:
        """A command ended: one last measure; True when it filled the layer."""
        self.running = max(0, self.running - 1)
        await self.check()
        return self.hits > hits_before

    async def _poll(self) -> None:
        while self.running:
            await asyncio.sleep(self.poll_sec)
            if self.running:
                await self.check()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None


def writable_layer_bytes(info: dict[str, Any]) -> int | None:
    """`SizeRw` of an inspect answer made with `size=true`; None when the engine gave none."""
    size = info.get("SizeRw")
    return int(size) if isinstance(size, (int, float)) else None
