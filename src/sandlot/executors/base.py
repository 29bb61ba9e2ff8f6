"""The executor interface: the seam between a job and the machines its trials run on.

A job owns the queue of trials, their retries, the job folder and the summary; an executor
owns slots on some machines and runs one try of one trial in a slot. The job submits a
request, awaits its result, and may cancel it. The local pool (executors.local) is the
first implementation; a cluster executor implements the same four calls, and
tests/executor_contract.py is what any implementation must pass.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from sandlot.live import TrialLive
from sandlot.models import TrialResult
from sandlot.trial import TrialPlan


class ExecutorClosed(RuntimeError):
    """A request was submitted to an executor that was closed."""


def always_start(live: TrialLive) -> bool:
    return True


@dataclass(frozen=True)
class TrialRequest:
    """One try of one trial.

    `on_start` is called once, as the try leaves the queue for a slot, with the live view
    displays read. It returns whether the try may still start: the job answers False when
    its budget was spent, or it stopped, while the try waited. A try declined there never
    ran, and its result is None.
    """

    plan: TrialPlan
    try_number: int = 1
    on_start: Callable[[TrialLive], bool] = always_start


@dataclass(frozen=True)
class TrialTicket:
    """The handle `submit` returns; opaque outside the executor that issued it."""

    id: int
    trial_name: str
    try_number: int


class TrialExecutor(Protocol):
    """Runs trial tries in its slots, at most `slots` at once, in the order submitted.

    The contract (tests/executor_contract.py):
    - `submit` returns at once; the try runs when a slot is free.
    - `result` waits for the try's TrialResult, with result.json written in `plan.dir`.
      A try that fails in any way is a result with its error, never an exception; only
      what stops the job raises (the trial folder cannot be written: a full disk). A try
      cancelled before it started, or declined by `on_start`, gives None. Cancelling the
      caller of `result` stops the wait, not the try.
    - `cancel` stops a queued try (its result is None) or a running one (its result is the
      one it recorded as it stopped: `cancelled`, or `provider_error` when the provider
      failed the job). Cancelling a finished try changes nothing.
    - `aclose` cancels every try still queued or running and returns once each has
      recorded itself and its sandbox is gone. `submit` then raises ExecutorClosed.
    """

    @property
    def slots(self) -> int: ...

    def submit(self, request: TrialRequest) -> TrialTicket: ...

    async def result(self, ticket: TrialTicket) -> TrialResult | None: ...

    def cancel(self, ticket: TrialTicket) -> None: ...

    async def aclose(self) -> None: ...


class TryTasks:
    """An executor's tries, one asyncio task each, by ticket: the bookkeeping of `submit`,
    `result` and `aclose` that every executor shares."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.tasks: dict[int, asyncio.Task[TrialResult | None]] = {}
        self.closed = False

    def start(self, request: TrialRequest,
              run: Callable[[TrialTicket], Coroutine[Any, Any, TrialResult | None]]
              ) -> TrialTicket:
        if self.closed:
            raise ExecutorClosed("this executor was closed; no trial can be submitted")
        ticket = TrialTicket(next(self._ids), request.plan.name, request.try_number)
        self.tasks[ticket.id] = asyncio.create_task(
            run(ticket), name=f"trial {ticket.trial_name} try {ticket.try_number}")
        return ticket

    async def result(self, ticket: TrialTicket) -> TrialResult | None:
        task = self.tasks[ticket.id]
        await asyncio.wait({task})  # unlike `await task`, a cancelled wait leaves it running
        del self.tasks[ticket.id]
        return None if task.cancelled() else task.result()

    async def settle(self) -> None:
        """Wait for every try still running (once each was told to stop)."""
        running = [task for task in self.tasks.values() if not task.done()]
        if running:
            # Not gather: a second cancellation of this wait must not cut their cleanup.
            await asyncio.wait(running)
        for task in self.tasks.values():
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a result nobody awaits is dropped quietly
