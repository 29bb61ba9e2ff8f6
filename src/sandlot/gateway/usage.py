"""Per-trial usage: the gateway's trusted counts, readable in O(1) from any thread."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from sandlot.gateway.formats.base import Usage


@dataclass
class UsageTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    n_requests: int = 0
    n_errors: int = 0
    #: Provider answers of 429 (each waited out and retried, or passed to the agent).
    n_rate_limited: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, object]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens,
                "reasoning_tokens": self.reasoning_tokens, "total_tokens": self.total_tokens,
                "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 8),
                "n_requests": self.n_requests, "n_rate_limited": self.n_rate_limited,
                "source": "gateway"}


@dataclass(frozen=True)
class UsageState:
    """A LiveUsage's counters as plain values: what a cluster node sends the driver."""

    totals: UsageTotals
    streaming_chars: int
    in_flight: int
    backing_off: int


class UsageReading(NamedTuple):
    """What a live view needs of a trial's counter, read at one instant."""

    #: The counter's `version` when read: equal versions mean equal readings.
    version: int
    #: Trusted tokens of finished exchanges plus the estimate of output streaming now.
    tokens: int
    cost_usd: float | None
    in_flight: int
    backing_off: int
    n_rate_limited: int


@dataclass
class LiveUsage:
    """Totals of finished exchanges plus output text seen on streams still running.

    Writers hold the lock; `snapshot` copies a handful of ints under it, so a display
    thread reads a consistent view in constant time while requests stream. Every write
    bumps `version`, so a view redrawing thousands of trials a few times a second reads
    a plain int (no lock) and takes a new `reading()` only of the counters that moved.
    """

    totals: UsageTotals = field(default_factory=UsageTotals)
    streaming_chars: int = 0
    in_flight: int = 0
    #: Requests now waiting out a backoff before their next try (a rate limit, an outage).
    backing_off: int = 0
    #: Bumped by every write (see the class docstring).
    version: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def begin(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.version += 1

    def rate_limited(self) -> None:
        with self._lock:
            self.totals.n_rate_limited += 1
            self.version += 1

    def waiting(self, delta: int) -> None:
        with self._lock:
            self.backing_off += delta
            self.version += 1

    def stream_progress(self, n_chars: int) -> None:
        with self._lock:
            self.streaming_chars += n_chars
            self.version += 1

    def finish(self, usage: Usage, cost: float | None, streamed_chars: int, ok: bool) -> None:
        with self._lock:
            t = self.totals
            t.input_tokens += usage.input_tokens
            t.output_tokens += usage.output_tokens
            t.cache_read_tokens += usage.cache_read_tokens
            t.cache_write_tokens += usage.cache_write_tokens
            t.reasoning_tokens += usage.reasoning_tokens
            if cost is not None:
                t.cost_usd = (t.cost_usd or 0.0) + cost
            t.n_requests += 1
            t.n_errors += 0 if ok else 1
            self.streaming_chars = max(0, self.streaming_chars - streamed_chars)
            self.in_flight -= 1
            self.version += 1

    def reading(self) -> UsageReading:
        """The live view's figures, without building `snapshot`'s dict."""
        with self._lock:
            t = self.totals
            return UsageReading(self.version,
                                t.input_tokens + t.output_tokens + self.streaming_chars // 4,
                                t.cost_usd, self.in_flight, self.backing_off,
                                t.n_rate_limited)

    def state(self) -> UsageState:
        with self._lock:
            return UsageState(UsageTotals(**vars(self.totals)), self.streaming_chars,
                              self.in_flight, self.backing_off)

    def set_state(self, state: UsageState) -> None:
        """Become a copy of another counter (the driver's mirror of a node's trial)."""
        with self._lock:
            if state == UsageState(self.totals, self.streaming_chars, self.in_flight,
                                   self.backing_off):
                return
            self.totals = UsageTotals(**vars(state.totals))
            self.streaming_chars, self.in_flight = state.streaming_chars, state.in_flight
            self.backing_off = state.backing_off
            self.version += 1

    def snapshot(self) -> dict[str, object]:
        """Trusted totals, plus a live estimate of tokens still streaming (chars / 4)."""
        with self._lock:
            out = self.totals.as_dict()
            out["streaming_output_tokens_estimate"] = self.streaming_chars // 4
            out["in_flight"] = self.in_flight
            out["backing_off"] = self.backing_off
            return out
