"""The local executor: trials run as coroutines of this process, `slots` at a time, each
in a sandbox of the backend given (local namespaces, or a container engine)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sandlot.agents.base import Agent
from sandlot.executors.base import TrialRequest, TrialTicket, TryTasks
from sandlot.live import TrialLive
from sandlot.models import TrialResult
from sandlot.sandbox.base import SandboxBackend
from sandlot.trial import TrialSettings, load_result, run_trial
from sandlot.verify import Verifier


class LocalExecutor:
    """A pool of `slots` trials on this machine (TrialExecutor).

    `make_agent` gives a fresh agent for each try: an agent keeps per-trial state.
    """

    def __init__(self, settings: TrialSettings, backend: SandboxBackend,
                 make_agent: Callable[[], Agent], verifier: Verifier, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"an executor needs at least one slot, not {slots}")
        self._settings, self._backend = settings, backend
        self._make_agent, self._verifier = make_agent, verifier
        self._slots = slots
        self._free = asyncio.Semaphore(slots)
        self._tries = TryTasks()

    @property
    def slots(self) -> int:
        return self._slots

    def submit(self, request: TrialRequest) -> TrialTicket:
        return self._tries.start(request, lambda ticket: self._run(request))

    async def result(self, ticket: TrialTicket) -> TrialResult | None:
        return await self._tries.result(ticket)

    def cancel(self, ticket: TrialTicket) -> None:
        task = self._tries.tasks.get(ticket.id)
        if task is not None:
            task.cancel()

    async def aclose(self) -> None:
        self._tries.closed = True
        for task in self._tries.tasks.values():
            task.cancel()
        await self._tries.settle()

    async def _run(self, request: TrialRequest) -> TrialResult | None:
        plan = request.plan
        async with self._free:
            live = TrialLive(plan.name, plan.task.name, plan.attempt, request.try_number)
            if not request.on_start(live):
                return None
            agent = self._make_agent()
            try:
                return await run_trial(plan, self._settings, self._backend, agent,
                                       self._verifier, live)
            except asyncio.CancelledError:
                # run_trial recorded itself as it stopped: that record is the result.
                recorded = load_result(plan.dir / "result.json")
                if recorded is None:
                    raise
                return recorded
