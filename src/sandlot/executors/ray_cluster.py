"""Trials on a Ray cluster (`sandlot run --ray`): the driver's executor and the node actor.

The driver (the `sandlot run` process) keeps the job: the queue, the job folder (its only
writer), resume and the dashboard. One NodeActor per node with CPUs, pinned to it (node
affinity, not soft), runs that node's trials (executors.node.NodeService, with the node's
own sandboxes and gateway). The driver decides which node runs what, from its own count
of each node's slots (the node's CPUs and memory over what the job's largest task asks
for), so the queue order, `on_start` and cancellation are the driver's as with the local
pool, and the executor contract (tests/executor_contract.py) holds unchanged.

Ray's own retries are off (max_restarts=0, max_task_retries=0): a call runs a try at most
once, and what a dead node's tries become is the driver's decision. Ray is an optional
dependency: this module imports it, nothing else in sandlot does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandlot.errors import ErrorKind, default_cause
from sandlot.executors.base import TrialRequest, TrialTicket, TryTasks
from sandlot.executors.cluster_spend import ClusterSpend
from sandlot.executors.live_mirror import apply
from sandlot.executors.node import NodeInfo, NodeReport, NodeService, NodeSpec, TrialCall
from sandlot.executors.shipping import pack_tree, unpack_tree
from sandlot.fsutil import write_model
from sandlot.gateway.server import new_trial_key
from sandlot.gateway.usage import LiveUsage
from sandlot.live import NodeLive, TrialLive
from sandlot.models import ErrorInfo, TrialResult, utc_now
from sandlot.tasks.loader import Task, hash_tree
from sandlot.trial import TrialPlan

#: What `--ray` says when Ray is not installed.
RAY_MISSING = ("--ray needs Ray, an optional dependency: pip install -e '.[ray]' in "
               "sandlot's folder (or pip install 'ray>=2.30' into sandlot's environment)")
#: How often the driver asks each node for its running trials' live state.
POLL_SEC = 0.5
#: A task folder larger than this is not shipped (its trials fail with the reason).
TASK_ARCHIVE_MAX_BYTES = 4 * 1024**3
#: How many times a try is run again because its node left the cluster while it ran.
MAX_REQUEUES = 2
#: How long a node may take to stop its trials and gateway when the job ends.
NODE_CLOSE_SEC = 120.0

log = logging.getLogger(__name__)


class ClusterError(RuntimeError):
    """The cluster cannot run the job: not reachable, no node fits, a node cannot start.
    The message says what to do."""


def load_ray() -> Any:
    """The `ray` module, or ClusterError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ClusterError(RAY_MISSING) from exc
    return ray


@dataclass(frozen=True)
class ClusterNode:
    node_id: str
    host: str
    cpus: float
    memory_bytes: float


@dataclass(frozen=True)
class TrialNeeds:
    """What the job's largest task asks for: a node's slots are how many fit at once."""

    cpus: float = 1.0
    memory_mb: int = 0

    def slots_on(self, node: ClusterNode) -> int:
        by_cpu = int(node.cpus // self.cpus) if self.cpus > 0 else int(node.cpus)
        if self.memory_mb <= 0:
            return by_cpu
        return min(by_cpu, int(node.memory_bytes // (self.memory_mb * 1024 * 1024)))


class RayCluster:
    """The driver's connection to Ray: a private cluster (`local`), or one it joins."""

    def __init__(self, ray: Any, owned: bool) -> None:
        self.ray, self.owned = ray, owned

    @classmethod
    def connect(cls, address: str) -> RayCluster:
        """`local` starts a private Ray for this job (stopped by `close`); `auto` joins the
        cluster RAY_ADDRESS names (or the one running on this machine); anything else is
        an address to join. A process already connected (a test's cluster) stays so."""
        ray = load_ray()
        if ray.is_initialized():
            return cls(ray, owned=False)
        quiet: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False,
                                 "namespace": "sandlot"}
        try:
            if address == "local":
                ray.init(address="local", include_dashboard=False,
                         num_cpus=os.cpu_count() or 1, **quiet)
                return cls(ray, owned=True)
            ray.init(address=address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = "RAY_ADDRESS or a cluster on this machine" if address == "auto" else address
            raise ClusterError(f"--ray {address}: cannot join the Ray cluster at {where}: "
                               f"{exc}; start one with `ray start --head` or use --ray local"
                               ) from exc
        return cls(ray, owned=False)

    def nodes(self) -> list[ClusterNode]:
        """The live nodes that offer CPUs."""
        found = []
        for node in self.ray.nodes():
            resources = node.get("Resources", {})
            if node.get("Alive") and resources.get("CPU", 0) > 0:
                found.append(ClusterNode(node["NodeID"], node.get("NodeManagerHostname")
                                         or node.get("NodeManagerAddress", "?"),
                                         float(resources["CPU"]),
                                         float(resources.get("memory", 0))))
        return found

    def close(self) -> None:
        """Disconnect; a private cluster stops with it."""
        if self.owned:
            self.ray.shutdown()


class NodeActor:
    """The Ray actor on each node: NodeService's calls, awaited on the actor's loop."""

    def __init__(self, spec: NodeSpec) -> None:
        self._service = NodeService(spec)

    async def start(self) -> NodeInfo:
        return await self._service.start()

    async def missing_tasks(self, digests: list[str]) -> list[str]:
        return self._service.missing_tasks(digests)

    async def store_task(self, digest: str, archive: bytes) -> None:
        await self._service.store_task(digest, archive)

    async def run(self, call: TrialCall) -> Any:
        return await self._service.run(call)

    async def cancel(self, call_id: str) -> None:
        self._service.cancel(call_id)

    async def refuse_spending(self, reason: str) -> None:
        self._service.refuse_spending(reason)

    async def count_elsewhere(self, tokens: int, cost_usd: float) -> None:
        self._service.count_elsewhere(tokens, cost_usd)

    async def report(self) -> NodeReport:
        return self._service.report()

    async def close(self) -> None:
        await self._service.close()


@dataclass(eq=False)
class _Node:
    """The driver's view of one node: its actor, its slots, what it has been sent. Its
    counts live in `live`, which the dashboard reads."""

    where: ClusterNode
    actor: Any
    live: NodeLive
    tasks: dict[str, asyncio.Future[None]] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return self.live.name

    @property
    def slots(self) -> int:
        return self.live.slots

    @property
    def alive(self) -> bool:
        return self.live.alive

    @property
    def free(self) -> int:
        return self.live.slots - self.live.running if self.live.alive else 0


class _NodeLost(Exception):
    """The node running a try left the cluster (its actor died with it)."""

    def __init__(self, node: str, why: str) -> None:
        super().__init__(f"node {node} left the cluster while the trial ran: {why}")
        self.node, self.why = node, why

    def record(self, live: TrialLive | None) -> dict[str, object]:
        """What result.json's `requeued` keeps of the lost run: where, why, how far it got,
        and what its model requests had cost by the node's last report."""
        usage = live.gateway_usage if live is not None else None
        return {"node": self.node, "reason": self.why, "at": utc_now(),
                "phase": live.phase if live is not None else None,
                "usage": usage.snapshot() if isinstance(usage, LiveUsage) else None}


class NoNodeLeft(ClusterError):
    """Every node of the job left the cluster: no try can start."""


class _SlotPool:
    """First come, first served across nodes: a try takes a slot on the node with the
    most free ones, at most `cap` at once in all."""

    def __init__(self, nodes: list[_Node], cap: int) -> None:
        self._nodes, self._cap, self._busy = nodes, cap, 0
        self._waiters: deque[asyncio.Future[_Node]] = deque()

    def _pick(self) -> _Node | None:
        if self._busy >= self._cap:
            return None
        node = max(self._nodes, key=lambda n: n.free)
        return node if node.free > 0 else None

    def _take(self, node: _Node) -> _Node:
        node.live.running += 1
        self._busy += 1
        return node

    async def acquire(self, first: bool = False) -> _Node:
        """A slot's node; NoNodeLeft once no node is alive. `first`: ahead of every try
        waiting (a try whose node left had already left the queue once)."""
        if not any(node.alive for node in self._nodes):
            raise NoNodeLeft("every node of the job left the cluster")
        if (first or not self._waiters) and (node := self._pick()) is not None:
            return self._take(node)
        waiter = asyncio.get_running_loop().create_future()
        if first:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # given a slot as it was cancelled
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def lost(self, node: _Node) -> None:
        """`node` left the cluster: it gets no more tries; with none left, nor does anyone."""
        node.live.alive = False
        if not any(n.alive for n in self._nodes):
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(NoNodeLeft("every node of the job left the cluster"))

    def release(self, node: _Node) -> None:
        node.live.running -= 1
        self._busy -= 1
        while self._waiters and (free := self._pick()) is not None:
            waiter = self._waiters.popleft()
            if not waiter.cancelled():
                waiter.set_result(self._take(free))


class RayExecutor:
    """Tries on the nodes of a Ray cluster (TrialExecutor). Made by `start_ray_executor`."""

    def __init__(self, cluster: RayCluster, nodes: list[_Node], cap: int,
                 spend: ClusterSpend | None, notify: Callable[[str], None],
                 trial_identity: dict[str, Any]) -> None:
        self._cluster, self._ray, self._nodes = cluster, cluster.ray, nodes
        self._pool = _SlotPool(nodes, cap)
        self._slots = min(cap, sum(n.slots for n in nodes))
        #: Each node's slots, running tries and errors, for the dashboard.
        self.nodes = [node.live for node in nodes]
        #: The job's spend and provider state, summed from the nodes (job.py reads it).
        self.spend = spend
        self._notify = notify
        self._identity = trial_identity
        self._tries = TryTasks()
        #: ticket id -> (node, call id) once a try was sent to its node.
        self._sent: dict[int, tuple[_Node, str]] = {}
        #: call id -> the driver's live view of it.
        self._live: dict[str, TrialLive] = {}
        self._digests: dict[Path, asyncio.Future[str]] = {}
        self._archives: dict[str, Any] = {}
        self._refused = False
        self._said_no_node = False
        self._cancelled: set[int] = set()
        #: Tickets whose try has left the queue (on_start said yes).
        self._started: set[int] = set()
        self._closed = False
        self._poller = asyncio.create_task(self._poll(), name="ray node poller")

    @property
    def slots(self) -> int:
        return self._slots

    def submit(self, request: TrialRequest) -> TrialTicket:
        return self._tries.start(request, lambda ticket: self._run(ticket, request))

    async def result(self, ticket: TrialTicket) -> TrialResult | None:
        return await self._tries.result(ticket)

    def cancel(self, ticket: TrialTicket) -> None:
        self._cancel(ticket.id)

    def _cancel(self, ticket_id: int) -> None:
        """Queued: the try never starts. Running on a node: it records itself as cancelled
        and returns. Between (its result arriving, its node just lost): it stops there."""
        self._cancelled.add(ticket_id)
        sent = self._sent.get(ticket_id)
        if sent is not None:
            node, call_id = sent
            node.actor.cancel.remote(call_id)
        elif ticket_id not in self._started and (task := self._tries.tasks.get(ticket_id)):
            task.cancel()

    async def aclose(self) -> None:
        self._closed = self._tries.closed = True
        for ticket_id in list(self._tries.tasks):
            self._cancel(ticket_id)
        await self._tries.settle()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None  # type: ignore[assignment]
            await self._close_nodes()

    async def _close_nodes(self) -> None:
        closing = [node.actor.close.remote() for node in self._nodes if node.alive]
        if closing:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True),
                                       NODE_CLOSE_SEC)
        for node in self._nodes:
            with contextlib.suppress(Exception):
                self._ray.kill(node.actor, no_restart=True)
        await asyncio.to_thread(self._cluster.close)

    # -- one try ----------------------------------------------------------------------

    async def _run(self, ticket: TrialTicket, request: TrialRequest) -> TrialResult | None:
        """One try, on whichever node has a slot; run again from the start on another
        node if its node leaves the cluster while it runs (up to MAX_REQUEUES times)."""
        plan = request.plan
        live: TrialLive | None = None
        requeued: list[dict[str, object]] = []
        while True:
            try:
                node = await self._pool.acquire(first=bool(requeued))
                if requeued and (ticket.id in self._cancelled or self._closed):
                    self._pool.release(node)
                    return None  # cancelled while it waited to run again: it runs on resume
            except NoNodeLeft:
                self._say_no_node()
                if ticket.id not in self._started:
                    return None  # never started: it runs on resume
                return self._failed(plan, None, "every node of the job left the cluster",
                                    requeued)
            try:
                if ticket.id not in self._started:
                    live = TrialLive(plan.name, plan.task.name, plan.attempt,
                                     request.try_number, node=node.host)
                    try:
                        digest = await self._ship(node, plan.task)
                    except _NodeLost:
                        raise
                    except Exception:
                        if not request.on_start(live):
                            return None
                        raise
                    if not request.on_start(live):
                        return None
                    self._started.add(ticket.id)
                else:
                    assert live is not None
                    live.node = node.host
                    live.set_phase("queued")
                    digest = await self._ship(node, plan.task)
                done = await self._call(ticket, request, node, live, digest)
            except _NodeLost as lost:
                if ticket.id not in self._started:
                    continue  # lost while its task was sent: it had not started, so no record
                requeued.append(lost.record(live))
                if ticket.id in self._cancelled or self._closed:
                    return None  # cancelled as its node left: it runs on resume
                if len(requeued) > MAX_REQUEUES:
                    return self._failed(plan, node, f"{lost}; run on {len(requeued)} nodes "
                                        "that each left the cluster, not again", requeued)
                continue
            except Exception as exc:  # a task that cannot be read or sent; a node's fault
                return self._failed(plan, node, f"node {node.host}: {type(exc).__name__}: "
                                    f"{_first_line(exc)}", requeued)
            finally:
                self._pool.release(node)
            if done is None:
                return None
            result, archive = done
            result.requeued = requeued
            _count_error(node, result)
            await asyncio.to_thread(_materialize, plan.dir, archive, result)
            return result

    async def _call(self, ticket: TrialTicket, request: TrialRequest, node: _Node,
                    live: TrialLive, digest: str) -> tuple[TrialResult, bytes] | None:
        """Run the try on `node`: its result and the archive of its folder, or None if it
        was cancelled before it started there. Raises _NodeLost if the node left the
        cluster meanwhile: that call's result can never arrive, so none is counted twice."""
        plan = request.plan
        call = TrialCall(id=f"{ticket.id}-{secrets.token_hex(6)}", task=plan.task,
                         task_digest=digest, attempt=plan.attempt,
                         try_number=request.try_number, gateway_key=new_trial_key())
        self._live[call.id] = live
        self._sent[ticket.id] = (node, call.id)
        self._tell_elsewhere(node)  # (Ray runs one caller's calls to an actor in order)
        try:
            outcome = await node.actor.run.remote(call)
        except self._ray.exceptions.RayActorError as exc:
            # Dead, or unreachable (which may pass): either way its result is lost, and a
            # node that drops calls gets no more. An unreachable one is told to stop the try,
            # so it does not spend on beside the rerun.
            if isinstance(exc, self._ray.exceptions.ActorUnavailableError):
                with contextlib.suppress(Exception):
                    node.actor.cancel.remote(call.id)
            self._pool.lost(node)
            raise _NodeLost(node.host, _first_line(exc)) from exc
        finally:
            self._sent.pop(ticket.id, None)
            self._live.pop(call.id, None)
        if outcome is None:
            return None
        if self.spend is not None:
            self.spend.absorb(node.where.node_id, outcome.spent_tokens, outcome.spent_cost_usd)
        result = TrialResult.model_validate_json(outcome.result_json)
        result.node = node.host
        return result, outcome.archive

    def _tell_elsewhere(self, node: _Node) -> None:
        """Send `node` the job's spend its gateway did not count (a job with a budget)."""
        if self.spend is not None and self.spend.job_spend.budget:
            node.actor.count_elsewhere.remote(*self.spend.elsewhere(node.where.node_id))

    def _say_no_node(self) -> None:
        if not self._said_no_node:
            self._said_no_node = True
            self._notify("every node of the job left the Ray cluster: the trials not "
                         "started run on resume")

    async def _ship(self, node: _Node, task: Task) -> str:
        """The task's digest, once its folder is on `node` (sent at most once per node)."""
        if task.path not in self._digests:
            self._digests[task.path] = asyncio.ensure_future(
                asyncio.to_thread(hash_tree, task.path))
        digest = await asyncio.shield(self._digests[task.path])
        if digest not in node.tasks:
            node.tasks[digest] = asyncio.ensure_future(self._send(node, task, digest))
        sending = node.tasks[digest]
        try:
            await asyncio.shield(sending)
        except self._ray.exceptions.RayActorError as exc:
            self._pool.lost(node)
            raise _NodeLost(node.host, _first_line(exc)) from exc
        finally:
            if sending.done() and not sending.cancelled() and sending.exception() is not None:
                node.tasks.pop(digest, None)  # a later try sends it again
        return digest

    async def _send(self, node: _Node, task: Task, digest: str) -> None:
        if not await node.actor.missing_tasks.remote([digest]):
            return
        if digest not in self._archives:
            packed = await asyncio.to_thread(pack_tree, task.path,
                                             max_bytes=TASK_ARCHIVE_MAX_BYTES)
            if packed.omitted:
                raise ValueError(f"task {task.name} is larger than "
                                 f"{TASK_ARCHIVE_MAX_BYTES:,} bytes")
            self._archives[digest] = self._ray.put(packed.data)
        await node.actor.store_task.remote(digest, self._archives[digest])

    def _failed(self, plan: TrialPlan, node: _Node | None, message: str,
                requeued: list[dict[str, object]]) -> TrialResult:
        """A try the cluster lost: sandlot's fault, retried as any infrastructure error."""
        result = TrialResult(trial_name=plan.name, task=plan.task.name, attempt=plan.attempt,
                             finished_at=utc_now(), node=node.host if node else None,
                             requeued=requeued,
                             error=ErrorInfo(kind=ErrorKind.INTERNAL_ERROR, message=message,
                                             caused_by=default_cause(ErrorKind.INTERNAL_ERROR)),
                             **self._identity)
        write_model(plan.dir / "result.json", result)
        if node is not None:
            _count_error(node, result)
        return result

    # -- the nodes' live state ----------------------------------------------------------

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_SEC)
            nodes = [node for node in self._nodes if node.alive]
            reports = await asyncio.gather(*(node.actor.report.remote() for node in nodes),
                                           return_exceptions=True)
            for node, report in zip(nodes, reports, strict=True):
                if isinstance(report, self._ray.exceptions.ActorDiedError):
                    self._pool.lost(node)  # (an unreachable one may come back)
                if isinstance(report, BaseException):
                    log.debug("node %s did not report: %s", node.host, report)
                    continue
                try:
                    self._absorb(node, report)
                except Exception:  # a bad report must not end the polling of the others
                    log.exception("node %s: its report could not be read", node.host)
            for node in nodes:
                if node.alive:
                    self._tell_elsewhere(node)

    def _absorb(self, node: _Node, report: NodeReport) -> None:
        for call_id, state in report.trials.items():
            if (live := self._live.get(call_id)) is not None:
                apply(state, live)
        for note in report.notes:
            self._notify(f"node {node.host}: {note}")
        if self.spend is None:
            return
        self.spend.absorb_report(node.where.node_id, report)
        if self.spend.job_spend.reason is not None and not self._refused:
            self._refused = True
            for other in self._nodes:
                if other.alive:
                    other.actor.refuse_spending.remote(self.spend.job_spend.reason)


def _count_error(node: _Node, result: TrialResult) -> None:
    if result.error is not None and result.error.kind is not ErrorKind.CANCELLED:
        node.live.n_errored += 1


def _materialize(trial_dir: Path, archive: bytes, result: TrialResult) -> None:
    """The trial's folder in the job folder: the node's files, then result.json last."""
    unpack_tree(archive, trial_dir)
    write_model(trial_dir / "result.json", result)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


async def start_ray_executor(cluster: RayCluster, spec: NodeSpec, *, cap: int,
                             needs: TrialNeeds, spend: ClusterSpend | None,
                             notify: Callable[[str], None],
                             trial_identity: dict[str, Any]) -> RayExecutor:
    """One started NodeActor on each node that fits a trial; ClusterError if none does or
    a node cannot run sandboxes (what it said, and which node)."""
    ray = cluster.ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    fitting = [(node, needs.slots_on(node)) for node in cluster.nodes()]
    fitting = [(node, slots) for node, slots in fitting if slots > 0]
    if not fitting:
        raise ClusterError(f"no node of the Ray cluster has the {needs.cpus:g} CPUs and "
                           f"{needs.memory_mb} MB of memory the job's largest task asks for "
                           "(see `ray status`; --override-cpus/--override-memory-mb lower it)")
    actor_class = ray.remote(max_restarts=0, max_task_retries=0)(NodeActor)
    nodes = [_Node(where, actor_class.options(
        num_cpus=0, max_concurrency=100_000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(where.node_id, soft=False),
    ).remote(spec), NodeLive(where.host, slots)) for where, slots in fitting]
    started = await asyncio.gather(*(node.actor.start.remote() for node in nodes),
                                   return_exceptions=True)
    problems = []
    for node, info in zip(nodes, started, strict=True):
        if isinstance(info, BaseException):
            cause = getattr(info, "cause", None) or info
            problems.append(f"node {node.host}: {_first_line(cause)}")
        else:
            node.live.name = info.hostname if len(nodes) == 1 else \
                f"{info.hostname} ({node.where.node_id[:8]})"
            for note in info.notes:
                notify(f"node {node.host}: {note}")
    if problems:
        for node in nodes:
            with contextlib.suppress(Exception):
                ray.kill(node.actor, no_restart=True)
        raise ClusterError("the cluster cannot run the job's sandboxes: " + "; ".join(problems))
    return RayExecutor(cluster, nodes, cap, spend, notify, trial_identity)


def ray_executor_factory(address: str, *, node: Callable[[Any], NodeSpec], cap: int,
                         needs: TrialNeeds, spend: ClusterSpend | None,
                         notify: Callable[[str], None], trial_identity: dict[str, Any]
                         ) -> Callable[[Any], Any]:
    """job.run_job's `make_executor` for `--ray ADDRESS`: joins (or starts) the cluster and
    starts its nodes once the job knows its trial settings (`node(settings)` is the spec
    the nodes get). ClusterError when it cannot."""

    async def make(settings: Any) -> RayExecutor:
        cluster = await asyncio.to_thread(RayCluster.connect, address)
        try:
            return await start_ray_executor(cluster, node(settings), cap=cap, needs=needs,
                                            spend=spend, notify=notify,
                                            trial_identity=trial_identity)
        except BaseException:
            await asyncio.to_thread(cluster.close)
            raise

    return make
