"""The executor contract: what every TrialExecutor must do (sandlot.executors.base).

A test class for an implementation subclasses ExecutorContract and provides the fixture
`make_executor(slots) -> TrialExecutor` (or an awaitable of one), an executor whose
trials run the oracle (the task's solution/solve.sh) on a real sandbox. Every test
submits real trials and goes through the four calls of the interface only, so the local
pool and a cluster executor run the very same tests.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import write_task
from sandlot.errors import VERIFIER_FAULT_KINDS, ErrorKind
from sandlot.executors import ExecutorClosed, TrialExecutor, TrialRequest
from sandlot.live import TrialLive
from sandlot.models import TrialResult
from sandlot.tasks.loader import load_task
from sandlot.trial import TrialPlan

MakeExecutor = Callable[[int], TrialExecutor | Awaitable[TrialExecutor]]

#: How long a trial that is to be cancelled runs at most (it never gets there).
LONG_SEC = 300


def run(body: Coroutine[Any, Any, None]) -> None:
    asyncio.run(body)


async def made(make_executor: MakeExecutor, slots: int) -> TrialExecutor:
    """The executor `make_executor` gives, awaited if it starts asynchronously."""
    executor = make_executor(slots)
    return await executor if inspect.isawaitable(executor) else executor


class Starts:
    """on_start hooks that record which tries left the queue, in order."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.lives: dict[str, TrialLive] = {}
        self.started: dict[str, asyncio.Event] = {}

    def hook(self, name: str, *, allow: bool = True) -> Callable[[TrialLive], bool]:
        self.started[name] = asyncio.Event()

        def on_start(live: TrialLive) -> bool:
            self.order.append(name)
            self.lives[name] = live
            self.started[name].set()
            return allow

        return on_start


def marker_processes(marker: str) -> list[int]:
    """PIDs of live processes whose command line holds `marker` (a sandbox's leftovers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def span(result: TrialResult) -> tuple[float, float]:
    assert result.finished_at is not None
    return (datetime.fromisoformat(result.started_at).timestamp(),
            datetime.fromisoformat(result.finished_at).timestamp())


class ExecutorContract:
    """Subclass with a `make_executor` fixture; every test here then runs on it."""

    @pytest.fixture
    def plan(self, tmp_path: Path) -> Callable[..., TrialPlan]:
        """plan(name, solve_sh=..., test_sh=...) -> a TrialPlan of a fresh trivial task."""

        def make(name: str, **task: Any) -> TrialPlan:
            folder = write_task(tmp_path / "tasks", name, **task)
            return TrialPlan(task=load_task(folder), attempt=1,
                             dir=tmp_path / "jobs" / f"{name}__1")

        return make

    @pytest.mark.timeout(180)
    def test_a_submitted_trial_runs_to_its_recorded_result(self, make_executor: MakeExecutor,
                                                           plan: Callable[..., TrialPlan]
                                                           ) -> None:
        trial = plan("solved", solve_sh="echo ok > /app/out\n",
                     test_sh="[ -f /app/out ] && echo 1 > /logs/verifier/reward.txt "
                             "|| echo 0 > /logs/verifier/reward.txt\n")
        starts = Starts()

        async def body() -> None:
            executor = await made(make_executor, 1)
            try:
                ticket = executor.submit(TrialRequest(trial, 1, starts.hook("solved")))
                result = await executor.result(ticket)
            finally:
                await executor.aclose()
            assert result is not None
            assert result.error is None and result.passed and result.reward == 1.0
            assert result.trial_name == trial.name
            recorded = TrialResult.model_validate_json((trial.dir / "result.json").read_text())
            assert recorded.passed and recorded.trial_name == trial.name
            assert starts.order == ["solved"]
            assert starts.lives["solved"].try_number == 1

        run(body())

    @pytest.mark.timeout(180)
    def test_a_failing_trial_is_a_result_with_its_error(self, make_executor: MakeExecutor,
                                                        plan: Callable[..., TrialPlan]) -> None:
        trial = plan("no-reward", test_sh="exit 3\n")

        async def body() -> None:
            executor = await made(make_executor, 1)
            try:
                result = await executor.result(executor.submit(TrialRequest(trial)))
            finally:
                await executor.aclose()
            assert result is not None and result.error is not None
            assert result.error.kind in VERIFIER_FAULT_KINDS
            assert not result.passed

        run(body())

    @pytest.mark.timeout(240)
    def test_at_most_slots_run_at_once_and_each_once(self, make_executor: MakeExecutor,
                                                     plan: Callable[..., TrialPlan]) -> None:
        trials = [plan(f"nap-{i}", solve_sh="sleep 1\n") for i in range(5)]
        starts = Starts()

        async def body() -> None:
            executor = await made(make_executor, 2)
            try:
                assert executor.slots == 2
                tickets = [executor.submit(TrialRequest(t, 1, starts.hook(t.name)))
                           for t in trials]
                results = await asyncio.gather(*(executor.result(t) for t in tickets))
            finally:
                await executor.aclose()
            assert [r.trial_name for r in results if r is not None] == [t.name for t in trials]
            assert all(r is not None and r.passed for r in results)
            assert sorted(starts.order) == sorted(t.name for t in trials)  # once each
            spans = [span(r) for r in results if r is not None]
            overlap = max(sum(1 for s, e in spans if s <= moment < e)
                          for moment, _ in spans)
            assert overlap == 2, spans  # both slots used, never a third trial

        run(body())

    @pytest.mark.timeout(180)
    def test_tries_leave_the_queue_in_the_order_submitted(self, make_executor: MakeExecutor,
                                                          plan: Callable[..., TrialPlan]
                                                          ) -> None:
        trials = [plan(f"queued-{i}") for i in range(3)]
        starts = Starts()

        async def body() -> None:
            executor = await made(make_executor, 1)
            try:
                tickets = [executor.submit(TrialRequest(t, 1, starts.hook(t.name)))
                           for t in trials]
                for ticket in tickets:
                    await executor.result(ticket)
            finally:
                await executor.aclose()
            assert starts.order == [t.name for t in trials]

        run(body())

    @pytest.mark.timeout(180)
    def test_a_try_declined_at_start_never_runs(self, make_executor: MakeExecutor,
                                                plan: Callable[..., TrialPlan]) -> None:
        trial = plan("declined")
        starts = Starts()

        async def body() -> None:
            executor = await made(make_executor, 1)
            try:
                ticket = executor.submit(TrialRequest(trial, 1,
                                                      starts.hook("declined", allow=False)))
                assert await executor.result(ticket) is None
            finally:
                await executor.aclose()
            assert starts.order == ["declined"]
            assert not trial.dir.exists()

        run(body())

    @pytest.mark.timeout(240)
    def test_cancel_stops_a_queued_try_and_a_running_one(self, make_executor: MakeExecutor,
                                                         plan: Callable[..., TrialPlan]) -> None:
        marker = f"sandlot-contract-{secrets.token_hex(6)}"
        running = plan("running", solve_sh=f"exec -a {marker} sleep {LONG_SEC}\n")
        queued = plan("queued")
        starts = Starts()

        async def body() -> None:
            executor = await made(make_executor, 1)
            try:
                first = executor.submit(TrialRequest(running, 1, starts.hook("running")))
                second = executor.submit(TrialRequest(queued, 1, starts.hook("queued")))
                await wait_for_process(marker)
                executor.cancel(second)
                assert await executor.result(second) is None
                executor.cancel(first)
                result = await executor.result(first)
            finally:
                await executor.aclose()
            assert result is not None and result.error is not None
            assert result.error.kind is ErrorKind.CANCELLED
            recorded = TrialResult.model_validate_json((running.dir / "result.json").read_text())
            assert recorded.error is not None and recorded.error.kind is ErrorKind.CANCELLED
            assert starts.order == ["running"]
            assert not queued.dir.exists()
            assert marker_processes(marker) == []  # its sandbox is gone

        run(body())

    @pytest.mark.timeout(180)
    def test_cancelling_the_wait_leaves_the_try_running(self, make_executor: MakeExecutor,
                                                        plan: Callable[..., TrialPlan]) -> None:
        trial = plan("patient", solve_sh="sleep 2\n")

        async def body() -> None:
            executor = await made(make_executor, 1)
            try:
                ticket = executor.submit(TrialRequest(trial))
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(executor.result(ticket), 0.5)
                result = await executor.result(ticket)
            finally:
                await executor.aclose()
            assert result is not None and result.passed

        run(body())

    @pytest.mark.timeout(180)
    def test_cancelling_a_finished_try_changes_nothing(self, make_executor: MakeExecutor,
                                                       plan: Callable[..., TrialPlan]) -> None:
        trial = plan("finished")

        async def body() -> None:
            executor = await made(make_executor, 1)
            try:
                ticket = executor.submit(TrialRequest(trial))
                while not (trial.dir / "result.json").exists():
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)
                executor.cancel(ticket)
                result = await executor.result(ticket)
            finally:
                await executor.aclose()
            assert result is not None and result.passed

        run(body())

    @pytest.mark.timeout(240)
    def test_aclose_cancels_every_try_and_waits_for_their_records(
            self, make_executor: MakeExecutor, plan: Callable[..., TrialPlan]) -> None:
        marker = f"sandlot-contract-{secrets.token_hex(6)}"
        trials = [plan(f"long-{i}", solve_sh=f"exec -a {marker} sleep {LONG_SEC}\n")
                  for i in range(3)]
        starts = Starts()

        async def body() -> None:
            executor = await made(make_executor, 2)
            for trial in trials:
                executor.submit(TrialRequest(trial, 1, starts.hook(trial.name)))
            await wait_for_process(marker, count=2)
            await executor.aclose()
            assert marker_processes(marker) == []
            for trial in trials[:2]:
                recorded = TrialResult.model_validate_json(
                    (trial.dir / "result.json").read_text())
                assert recorded.error is not None
                assert recorded.error.kind is ErrorKind.CANCELLED
            assert not trials[2].dir.exists()  # it was still queued
            assert sorted(starts.order) == [t.name for t in trials[:2]]
            with pytest.raises(ExecutorClosed):
                executor.submit(TrialRequest(trials[2]))

        run(body())


async def wait_for_process(marker: str, count: int = 1, within_sec: float = 120) -> None:
    """Until `count` processes carry `marker`: the trials are in their agent phase."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_sec
    while len(marker_processes(marker)) < count:
        if loop.time() > deadline:
            raise AssertionError(f"no process {marker} started within {within_sec} s "
                                 f"(pid {os.getpid()})")
        await asyncio.sleep(0.1)
