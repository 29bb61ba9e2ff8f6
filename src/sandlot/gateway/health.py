"""How the job's provider is doing, as the gateway sees it: the fault that stops the job,
and the rate limits the trials are waiting out.

A rejected key or an unknown model fails every later request the same way; letting each
trial find that out on its own burns the whole job and reports the agent as failing. The
first such answer is kept here, the job is told, and later requests are answered from it
without going to the provider.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from sandlot.gateway.faults import FATAL_FAULTS, ProviderFault, classify, describe


@dataclass(frozen=True)
class ProviderFailure:
    """The answer that stopped the job: its kind, status and one line for the user."""

    fault: ProviderFault
    status: int
    message: str
    #: The provider's own error body, answered to later requests in the same shape.
    error: str = ""


@dataclass
class ProviderHealth:
    """Written by the gateway's handlers (one event loop); read by the display's thread."""

    model: str
    key_env: str | None = None
    fatal: ProviderFailure | None = None
    #: 429 answers seen, and requests now waiting out a backoff before their next try.
    n_rate_limited: int = 0
    backing_off: int = 0
    _stopped: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def observe(self, status: int, error: str | None) -> ProviderFault | None:
        """Classify one provider answer; the first fatal one is kept and wakes the job."""
        fault = classify(status, error or "")
        if fault == "rate_limited":
            with self._lock:
                self.n_rate_limited += 1
        if fault in FATAL_FAULTS and self.fatal is None:
            said = " ".join((error or "").split())[:300]
            message = describe(fault, status, self.model, self.key_env)  # type: ignore[arg-type]
            self.fatal = ProviderFailure(fault, status,  # type: ignore[arg-type]
                                         message + (f" ({said})" if said else ""),
                                         error or "")
            self._stopped.set()
        return fault

    def adopt(self, failure: ProviderFailure) -> None:
        """Keep a fatal answer another gateway saw (a cluster node's), as if seen here."""
        if self.fatal is None:
            self.fatal = failure
            self._stopped.set()

    def waiting(self, delta: int) -> None:
        with self._lock:
            self.backing_off += delta

    async def wait_fatal(self) -> ProviderFailure:
        """Returns when a fatal answer has been seen."""
        await self._stopped.wait()
        assert self.fatal is not None
        return self.fatal

    def snapshot(self) -> tuple[int, int]:
        """(429s seen, requests waiting out a backoff), for the dashboard."""
        with self._lock:
            return self.n_rate_limited, self.backing_off
