"""A cluster node's side of a job: runs the trials the driver sends it, in its own sandboxes,
with its own LLM gateway, in a scratch folder of its own.

The driver owns the job (queue, job folder, resume, dashboard); a node owns nothing that
outlives a call. A trial runs here exactly as in a local run (run_trial, the same backend
and gateway code) in `<work>/trials/<call id>/`; what it wrote comes back to the driver
with the call, as a capped archive, and the folder is removed. Tasks arrive once per node,
keyed by the digest of their folder. Plain asyncio, no Ray here: the Ray actor
(executors.ray_cluster) is a thin wrapper, and this is testable without a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandlot.agents import create_agent
from sandlot.agents.acp_registry import AgentCatalog
from sandlot.executors.live_mirror import LiveState, capture
from sandlot.executors.shipping import pack_tree, unpack_tree
from sandlot.gateway.budget import Budget
from sandlot.gateway.generation import GenerationSettings
from sandlot.gateway.health import ProviderFailure
from sandlot.gateway.routing import RouteConfig, Router
from sandlot.gateway.server import Gateway
from sandlot.hostguard import remove_tree
from sandlot.live import TrialLive
from sandlot.machinery import MachineryCache
from sandlot.sandbox.base import SandboxBackend
from sandlot.tasks.loader import Task
from sandlot.trial import TrialPlan, TrialSettings, load_result, run_trial
from sandlot.verify import ScriptVerifier

#: What a trial's folder may bring back beyond the agent's copied-out files (logs,
#: the model trajectory, the verifier's output); the rest is named in a note.
RESULT_ARCHIVE_SLACK_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class BackendSpec:
    """How a node makes its sandbox backend (sandlot.sandbox.create_backend's arguments)."""

    name: str
    options: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelRoute:
    """What a node's gateway needs: the route, the provider's key (sent, never put in the
    node's environment), the job's generation flags."""

    route: RouteConfig
    provider_keys: dict[str, str] = field(default_factory=dict)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    #: The job's budget (--max-job-*), held by the node's gateway against its own spend
    #: plus what the driver says was spent elsewhere.
    job_budget: Budget = field(default_factory=Budget)


@dataclass(frozen=True)
class NodeSpec:
    """Everything a node needs to run the job's trials; made once by the driver."""

    #: The job's trial settings, without the parts a node makes itself (gateway,
    #: machinery cache); cache_dir and masked_paths are the driver's, used where they exist.
    settings: TrialSettings
    backend: BackendSpec
    agent: str
    model: str | None
    catalog: AgentCatalog | None
    model_route: ModelRoute | None
    #: This node's scratch: shipped tasks and running trials' folders.
    work_dir: Path


@dataclass(frozen=True)
class NodeInfo:
    """What a started node says about itself."""

    hostname: str
    pid: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrialCall:
    """One try of one trial, as sent to a node."""

    id: str
    task: Task
    task_digest: str
    attempt: int
    try_number: int
    gateway_key: str | None


@dataclass(frozen=True)
class TrialOutcome:
    #: result.json's text (the model is rebuilt on the driver).
    result_json: str
    #: The trial's folder, result.json excepted (shipping.pack_tree).
    archive: bytes
    omitted: tuple[str, ...] = ()
    #: The node's gateway's spend in all, as the try ended: the driver counts it before
    #: the next try starts anywhere.
    spent_tokens: int = 0
    spent_cost_usd: float = 0.0


@dataclass(frozen=True)
class NodeReport:
    """A node's answer to the driver's poll: its running trials and its gateway's state."""

    trials: dict[str, LiveState]
    spent_tokens: int = 0
    spent_cost_usd: float = 0.0
    provider_failure: ProviderFailure | None = None
    notes: tuple[str, ...] = ()


class NodeService:
    """`start` once, then `run` trials (many at once), `report` as polled, `close` once."""

    def __init__(self, spec: NodeSpec,
                 make_backend: Callable[[BackendSpec, Path, Callable[[str], None]],
                                        SandboxBackend] | None = None) -> None:
        self._spec = spec
        self._make_backend = make_backend or _create_backend
        self._tasks_dir = spec.work_dir / "tasks"
        #: Per node process: a later node on the same machine removes what a killed one left.
        self._trials_dir = spec.work_dir / "trials" / str(os.getpid())
        self._notes: list[str] = []
        self._backend: SandboxBackend | None = None
        self._gateway: Gateway | None = None
        self._settings: TrialSettings | None = None
        self._running: dict[str, asyncio.Task[object]] = {}
        self._live: dict[str, TrialLive] = {}
        self._cancelled: set[str] = set()
        self._stored: set[str] = set()
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> NodeInfo:
        """Make the backend (SandboxError if sandboxes cannot run here), clear what a killed
        earlier node left, prepare the agent, start the gateway."""
        spec = self._spec
        cache_dir = spec.settings.cache_dir or spec.work_dir / "cache"
        self._tasks_dir.mkdir(parents=True, exist_ok=True)
        self._backend = self._make_backend(spec.backend, cache_dir, self._notes.append)
        await self._backend.sweep()  # first: a dead node's sandboxes hold its folders
        await asyncio.to_thread(_remove_dead_nodes_trials, self._trials_dir.parent)
        self._trials_dir.mkdir(parents=True, exist_ok=True)
        agent = create_agent(spec.agent, spec.model, spec.catalog)
        prepare = getattr(agent, "prepare", None)
        if prepare is not None:
            await prepare(cache_dir, spec.settings.agent_version)
        if spec.model_route is not None:
            route = spec.model_route
            self._gateway = Gateway(Router(route.route, env=route.provider_keys),
                                    generation=route.generation, job_budget=route.job_budget)
            await self._gateway.start()
            self._watch = asyncio.create_task(self._stop_when_the_job_must(self._gateway))
        masked = tuple(p for p in (*spec.settings.masked_paths, spec.work_dir, cache_dir))
        self._settings = dataclasses.replace(spec.settings, gateway=self._gateway,
                                             cache_dir=cache_dir, masked_paths=masked,
                                             machinery_cache=MachineryCache())
        return NodeInfo(socket.gethostname(), os.getpid(), tuple(self._notes))

    def missing_tasks(self, digests: list[str]) -> list[str]:
        return [d for d in digests if d not in self._stored
                and not (self._tasks_dir / d).is_dir()]

    async def store_task(self, digest: str, archive: bytes) -> None:
        """Unpack a task folder under its digest; a second store of it changes nothing."""
        final = self._tasks_dir / digest
        if not final.is_dir():
            staging = self._tasks_dir / f".{digest}.{os.getpid()}.tmp"
            remove_tree(staging, ignore_errors=True)
            await asyncio.to_thread(unpack_tree, archive, staging)
            try:
                staging.rename(final)
            except OSError:  # another store of the same digest won
                remove_tree(staging, ignore_errors=True)
        self._stored.add(digest)

    async def run(self, call: TrialCall) -> TrialOutcome | None:
        """Run one try; None if it was cancelled before it started here."""
        assert self._settings is not None and self._backend is not None, "start() first"
        if call.id in self._cancelled or self._job_stopped():
            return None
        folder = self._trials_dir / call.id
        task = relocate(call.task, self._tasks_dir / call.task_digest)
        plan = TrialPlan(task=task, attempt=call.attempt, dir=folder / f"{task.name}__"
                         f"{call.attempt}", gateway_key=call.gateway_key)
        live = TrialLive(plan.name, task.name, call.attempt, call.try_number)
        agent = create_agent(self._spec.agent, self._spec.model, self._spec.catalog)
        trial = asyncio.create_task(run_trial(plan, self._settings, self._backend, agent,
                                              ScriptVerifier(), live),
                                    name=f"trial {plan.name} try {call.try_number}")
        self._running[call.id], self._live[call.id] = trial, live
        try:
            await asyncio.wait({trial})  # a cancelled call leaves the trial to record itself
        finally:
            self._running.pop(call.id, None)
            self._live.pop(call.id, None)
        if trial.cancelled():
            result = load_result(plan.dir / "result.json")
            if result is None:  # not recorded: it runs again on resume
                return None
        else:
            result = trial.result()
        cap = self._settings.copy_out_max_bytes + RESULT_ARCHIVE_SLACK_BYTES
        packed = await asyncio.to_thread(pack_tree, plan.dir, max_bytes=cap,
                                         exclude=frozenset({"result.json"}))
        await asyncio.to_thread(remove_tree, folder, ignore_errors=True)
        spend = self._gateway.job_spend if self._gateway is not None else None
        return TrialOutcome(result.model_dump_json(), packed.data, packed.omitted,
                            spend.tokens if spend else 0, spend.cost_usd if spend else 0.0)

    def _job_stopped(self) -> bool:
        gateway = self._gateway
        return gateway is not None and (gateway.job_spend.reason is not None
                                        or gateway.health.fatal is not None)

    async def _stop_when_the_job_must(self, gateway: Gateway) -> None:
        """As a local job does (job._stop_early): once the job's budget is spent or the
        provider refused the job, the running trials stop (each records why) and no more
        start here. The driver stops the job too, as soon as it hears."""
        waits = {asyncio.ensure_future(gateway.job_spend.wait_reached()),
                 asyncio.ensure_future(gateway.health.wait_fatal())}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        for trial in self._running.values():
            trial.cancel()

    def count_elsewhere(self, tokens: int, cost_usd: float) -> None:
        """What the job spent where this node cannot see (the driver's sum of the others)."""
        if self._gateway is not None:
            self._gateway.job_spend.count_elsewhere(tokens, cost_usd)

    def cancel(self, call_id: str) -> None:
        """Stop a running try (it records itself as cancelled), or refuse it if it has not
        arrived yet."""
        trial = self._running.get(call_id)
        if trial is not None:
            trial.cancel()
        else:
            self._cancelled.add(call_id)

    def refuse_spending(self, reason: str) -> None:
        """The job's budget is spent (the driver counts it across nodes): this node's
        gateway refuses every later request, as a local job's gateway does."""
        if self._gateway is not None:
            self._gateway.job_spend.stop(reason)

    def report(self) -> NodeReport:
        spend = self._gateway.job_spend if self._gateway is not None else None
        notes, self._notes[:] = tuple(self._notes), []
        return NodeReport(
            trials={call_id: capture(live) for call_id, live in self._live.items()},
            spent_tokens=spend.tokens if spend else 0,
            spent_cost_usd=spend.cost_usd if spend else 0.0,
            provider_failure=self._gateway.health.fatal if self._gateway else None,
            notes=notes)

    async def close(self) -> None:
        """Cancel what still runs (each records itself), stop the gateway, remove this
        node's trial folders."""
        running = list(self._running.values())
        for trial in running:
            trial.cancel()
        if running:
            await asyncio.wait(running)
        if self._watch is not None:
            self._watch.cancel()
        if self._gateway is not None:
            with contextlib.suppress(Exception):
                await self._gateway.stop()
            self._gateway = None
        await asyncio.to_thread(remove_tree, self._trials_dir, ignore_errors=True)


def _remove_dead_nodes_trials(trials: Path) -> None:
    """The trial folders of node processes that are gone (killed with their node)."""
    if not trials.is_dir():
        return
    for folder in trials.iterdir():
        if folder.name.isdigit() and not Path(f"/proc/{folder.name}").exists():
            remove_tree(folder, ignore_errors=True)


def relocate(task: Task, folder: Path) -> Task:
    """`task` as read from `folder`, its copy on this node."""
    def moved(path: Path) -> Path:
        return folder / path.relative_to(task.path) if path.is_relative_to(task.path) else path

    return dataclasses.replace(
        task, path=folder,
        tests_sources_override=None if task.tests_sources_override is None else
        tuple(moved(p) for p in task.tests_sources_override),
        solution_override=None if task.solution_override is None else
        moved(task.solution_override))


def _create_backend(spec: BackendSpec, cache_dir: Path,
                    notify: Callable[[str], None]) -> SandboxBackend:
    from sandlot.sandbox import create_backend

    return create_backend(spec.name, cache_dir, notify=notify, **spec.options)  # type: ignore[arg-type]

