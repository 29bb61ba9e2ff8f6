"""Many trials: the queue, concurrency, retries of infra errors, resume, and the summary.

A job folder is the unit of resume: `config.json` says what it measures, each finished
trial owns `<task>__<attempt>/result.json` (written last, atomically), and `summary.json`
is recomputed from those after every trial. Anything else in the folder can be rebuilt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from sandlot.agents import create_agent
from sandlot.agents.acp_registry import AgentCatalog
from sandlot.errors import RERUN_ON_RESUME, RETRYABLE_KINDS
from sandlot.executors import LocalExecutor, TrialExecutor, TrialRequest, TrialTicket
from sandlot.fsutil import write_atomic, write_model
from sandlot.gateway.budget import Budget
from sandlot.hostguard import remove_tree
from sandlot.live import TrialLive
from sandlot.machinery import MachineryCache
from sandlot.models import RESUMABLE_SETTINGS, JobConfig, JobSummary, TrialResult
from sandlot.redact import redact_text, secrets_from_env
from sandlot.report.summary import sum_usage, summarize
from sandlot.sandbox.base import SandboxBackend
from sandlot.tasks.loader import Task
from sandlot.trial import TrialPlan, TrialSettings, load_result
from sandlot.verify import ScriptVerifier

MAX_BACKOFF_SEC = 30.0

#: Makes the job's executor from its trial settings; None: the local pool. It may return
#: an executor with a `spend` (the job's spend and provider state, as a gateway has them:
#: a cluster's nodes run the gateways) and `nodes` (their live state, for the observer).
#: What it raises when it cannot start goes to run_job's caller (ClusterError for Ray).
ExecutorFactory = Callable[["TrialSettings"], Awaitable[TrialExecutor]]


class ConfigMismatchError(Exception):
    """A resumed job was asked to measure something else than it did before."""


class JobSetupError(Exception):
    """Something every trial needs could not be prepared (e.g. the agent's install)."""


class JobObserver(Protocol):
    """Receives job events (the CLI prints them; the dashboard issue renders them).

    Two optional hooks are called when an observer has them: `job_started(summary,
    n_pending)` once the resumed trials are known, before any trial starts, and
    `job_finished(summary)` with the complete summary.
    """

    def trial_started(self, plan: TrialPlan, try_number: int, live: TrialLive) -> None: ...

    def trial_retrying(self, plan: TrialPlan, result: TrialResult, delay_sec: float) -> None: ...

    def trial_finished(self, result: TrialResult, summary: JobSummary) -> None: ...


class SilentObserver:
    def trial_started(self, plan: TrialPlan, try_number: int, live: TrialLive) -> None:
        pass

    def trial_retrying(self, plan: TrialPlan, result: TrialResult, delay_sec: float) -> None:
        pass

    def trial_finished(self, result: TrialResult, summary: JobSummary) -> None:
        pass


@dataclass
class JobRun:
    """The state of one job run, owned by `run_job` (no module-level state)."""

    config: JobConfig
    root: Path
    plans: list[TrialPlan]
    results: dict[str, TrialResult] = field(default_factory=dict)
    n_resumed: int = 0
    #: Why the job stopped before its end (the provider refused the key or the model, or
    #: the job's budget was reached), and which of the two.
    stopped: str | None = None
    stopped_by: str | None = None
    #: Results of trials that rerun on resume (cancelled, provider_error): what they spent.
    discarded: list[TrialResult] = field(default_factory=list)

    def summary(self, complete: bool = False) -> JobSummary:
        ordered = [self.results[p.name] for p in self.plans if p.name in self.results]
        return summarize(self.config.job_name, self.config.agent, self.config.model,
                         len(self.plans), self.config.n_attempts, ordered,
                         n_resumed=self.n_resumed, complete=complete and not self.stopped,
                         stopped=self.stopped, stopped_by=self.stopped_by)

    def write_summary(self, complete: bool = False) -> JobSummary:
        summary = self.summary(complete)
        write_model(self.root / "summary.json", summary, durable=False)  # recomputed
        return summary


def config_differences(old: JobConfig, new: JobConfig) -> list[str]:
    """Human-readable settings that differ, ignoring those a resume may change."""
    a, b = old.model_dump(), new.model_dump()
    out = []
    for key in sorted(set(a) | set(b)):
        if key in RESUMABLE_SETTINGS or a.get(key) == b.get(key):
            continue
        if key == "task_sources":
            changed = sorted(t for t in set(a[key]) | set(b[key])
                             if a[key].get(t) != b[key].get(t))
            if changed:
                out.append("tasks come from elsewhere than when the job started (dataset, "
                           "registry, repository, commit or path): " + ", ".join(
                               f"{t} ({_source_line(a[key].get(t))} -> "
                               f"{_source_line(b[key].get(t))})" for t in changed[:5])
                           + (f" and {len(changed) - 5} more" if len(changed) > 5 else ""))
            continue
        if key == "task_digests":
            changed = sorted(t for t in set(a[key]) & set(b[key]) if a[key][t] != b[key][t])
            if changed:
                out.append(f"task files changed since the job started: {', '.join(changed)}")
            continue
        out.append(f"{key}: was {a.get(key)!r}, now {b.get(key)!r}")
    return out


def _source_line(source: dict[str, object] | None) -> str:
    if source is None:
        return "a folder"
    commit = str(source.get("git_commit_id") or "")[:12]
    return (f"{source['dataset']}@{source['version']} {source.get('git_url') or ''}"
            f"{'@' + commit if commit else ''}:{source['path']}")


def prepare_job_dir(config: JobConfig) -> Path:
    """Create the job folder or check a resumed one. Raises ConfigMismatchError."""
    root = Path(config.jobs_dir) / config.job_name
    config_path = root / "config.json"
    if config_path.is_file():
        try:
            old = JobConfig.model_validate_json(config_path.read_text())
        except ValidationError as exc:
            raise ConfigMismatchError(
                f"{config_path} is not a sandlot job config ({exc.error_count()} problems); "
                "choose another --job-name") from exc
        diffs = config_differences(old, config)
        if diffs:
            raise ConfigMismatchError(
                f"job {config.job_name!r} was started with other settings; resume it with the "
                "same ones or choose another --job-name:\n  " + "\n  ".join(diffs))
    root.mkdir(parents=True, exist_ok=True)
    write_model(config_path, config)
    return root


def load_finished(path: Path) -> TrialResult | None:
    """A trial's result if it finished (cancelled trials, and those a provider failure
    stopped, are rerun on resume)."""
    result = load_result(path)
    if result is None or (result.error is not None and result.error.kind in RERUN_ON_RESUME):
        return None
    return result


def _archive_try(trial_dir: Path, try_number: int) -> None:
    """Keep a failed try beside the next one: <trial>/retries/try-<n>/."""
    staging = trial_dir.with_name(f".{trial_dir.name}.try{try_number}.tmp")
    remove_tree(staging, ignore_errors=True)
    retries = trial_dir / "retries"
    kept = retries.rename(trial_dir.with_name(f".{trial_dir.name}.retries.tmp")) \
        if retries.is_dir() else None
    trial_dir.rename(staging)
    (trial_dir / "retries").mkdir(parents=True)
    if kept is not None:
        for old in kept.iterdir():
            old.rename(trial_dir / "retries" / old.name)
        kept.rmdir()
    staging.rename(trial_dir / "retries" / f"try-{try_number}")


def plan_trials(tasks: list[Task], n_attempts: int, root: Path) -> list[TrialPlan]:
    """Attempt-major order, so a partial run covers every task before repeating one."""
    return [TrialPlan(task=t, attempt=a, dir=root / f"{t.name}__{a}")
            for a in range(1, n_attempts + 1) for t in tasks]


async def run_job(config: JobConfig, tasks: list[Task], backend: SandboxBackend | None,
                  masked_paths: tuple[Path, ...], observer: JobObserver | None = None,
                  backoff_base_sec: float = 1.0,
                  sleep: Callable[[float], object] = asyncio.sleep,
                  gateway: Any = None, cache_dir: Path | None = None,
                  agents: AgentCatalog | None = None,
                  run_file: str | None = None,
                  make_executor: ExecutorFactory | None = None) -> JobSummary:
    """Run (or resume) a job. On cancellation the partial summary is written, then re-raised.
    `run_file`, the resolved `sandlot run` settings, is kept as job.yaml (redacted).

    Raises: ConfigMismatchError before anything starts if a resumed job's settings differ.
    """
    observer = observer or SilentObserver()
    # Before the job folder exists: a failed install leaves nothing to resume or refuse.
    await _prepare_agent(config, cache_dir, agents)
    root = prepare_job_dir(config)
    if run_file is not None:
        write_atomic(root / "job.yaml", redact_text(run_file, secrets_from_env(config.redact_env)))
    for leftover in root.rglob(".*.tmp"):  # a write or a retry archive a kill cut short
        remove_tree(leftover, ignore_errors=True)
    if backend is not None:
        await backend.sweep()
    run = JobRun(config=config, root=root, plans=plan_trials(tasks, config.n_attempts, root))
    pending: list[TrialPlan] = []
    for plan in run.plans:
        finished = load_finished(plan.dir / "result.json")
        if finished is not None:
            run.results[plan.name] = finished
            run.n_resumed += 1
        else:
            if plan.dir.exists():
                if (cut := load_result(plan.dir / "result.json")) is not None:
                    run.discarded.append(cut)  # its spend still counts against the budget
                remove_tree(plan.dir)
            pending.append(plan)
    _notify(observer, "job_started", run.write_summary(), len(pending))
    settings = TrialSettings(agent_name=config.agent, model=config.model,
                             sandbox_name=config.sandbox,
                             timeout_multiplier=config.timeout_multiplier,
                             agent_network=config.agent_network, masked_paths=masked_paths,
                             allow_private_network=config.allow_private_network,
                             gateway=gateway, max_turns=config.max_turns,
                             repair_attempts=config.repair_attempts,
                             repair_template=config.repair_template,
                             cache_dir=cache_dir, agent_version=config.agent_version,
                             redactions=secrets_from_env(config.redact_env),
                             copy_out_max_bytes=config.max_copy_out_mb * 1024 * 1024,
                             verifier_mode=config.verifier_mode,
                             budget=Budget(config.max_trial_cost_usd, config.max_trial_tokens),
                             machinery_cache=MachineryCache())
    executor: TrialExecutor
    if make_executor is None or not pending:
        executor = LocalExecutor(settings, backend,  # type: ignore[arg-type]
                                 lambda: create_agent(config.agent, config.model, agents),
                                 ScriptVerifier(), slots=config.n_concurrent)
    else:
        executor = await make_executor(settings)
        if gateway is None:  # the nodes' gateways, summed by the executor
            gateway = getattr(executor, "spend", None)
        if (nodes := getattr(executor, "nodes", None)) is not None:
            _notify(observer, "nodes_started", nodes)
    if gateway is not None:
        _count_earlier_spend(gateway, run)
    tickets: dict[str, TrialTicket] = {}  # the try each trial is at, by trial name

    def may_start(plan: TrialPlan, try_number: int, live: TrialLive) -> bool:
        if run.stopped is not None or (gateway is not None
                                       and gateway.job_spend.reason is not None):
            return False  # not started: it runs on resume
        observer.trial_started(plan, try_number, live)
        return True

    async def one_trial(plan: TrialPlan) -> None:
        earlier_usage: list[dict[str, object]] = []  # spent by tries that were retried
        for try_number in range(1, config.max_retries + 2):
            ticket = executor.submit(TrialRequest(
                plan, try_number, functools.partial(may_start, plan, try_number)))
            tickets[plan.name] = ticket
            try:
                result = await executor.result(ticket)
            except asyncio.CancelledError:
                executor.cancel(ticket)  # the job is stopping: so does the trial
                raise
            if result is None:
                return
            result.tries = try_number
            retry = (result.error is not None and result.error.kind in RETRYABLE_KINDS
                     and try_number <= config.max_retries and run.stopped is None)
            if not retry:
                result.retried_usage = sum_usage(earlier_usage)
                write_model(plan.dir / "result.json", result)
                run.results[plan.name] = result
                observer.trial_finished(result, run.write_summary())
                return
            if result.usage is not None:
                earlier_usage.append(result.usage)
            delay = min(MAX_BACKOFF_SEC, backoff_base_sec * 2 ** (try_number - 1))
            observer.trial_retrying(plan, result, delay)
            await asyncio.to_thread(_archive_try, plan.dir, try_number)
            if not await backoff(delay):
                return  # the job stopped meanwhile: the trial runs on resume

    backing_off: set[asyncio.Task[object]] = set()

    async def backoff(delay: float) -> bool:
        """Wait before the next try; False when the job stopped during the wait."""
        current = asyncio.current_task()
        assert current is not None
        backing_off.add(current)
        try:
            await sleep(delay)  # type: ignore[misc]
        except asyncio.CancelledError:
            if run.stopped is None:
                raise
            current.uncancel()
        finally:
            backing_off.discard(current)
        return run.stopped is None

    def stop_trials() -> None:
        for ticket in tickets.values():
            executor.cancel(ticket)
        for waiting in backing_off:
            waiting.cancel()

    if gateway is not None and pending:
        await gateway.start()
    watcher: asyncio.Task[None] | None = None
    try:
        if gateway is not None and pending:
            watcher = asyncio.create_task(_stop_early(gateway, run, stop_trials))
        async with asyncio.TaskGroup() as group:
            for plan in pending:
                group.create_task(one_trial(plan))
    except asyncio.CancelledError:
        await executor.aclose()  # each running trial records itself as cancelled
        _record_cancelled(run)
        with contextlib.suppress(Exception):
            run.write_summary()
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
        await executor.aclose()
        if gateway is not None and pending:
            await asyncio.shield(gateway.stop())
    if gateway is not None and run.stopped is None and len(run.results) < len(run.plans):
        _note_stop(gateway, run)  # trials that did not start, before the watcher woke
    summary = run.write_summary(complete=True)
    _notify(observer, "job_finished", summary)
    return summary


async def _stop_early(gateway: Any, run: JobRun, stop_trials: Callable[[], None]) -> None:
    """When the provider refuses the key or the model, no trial can do better; when the
    job's budget is spent, none may spend more. Either way: stop launching, and end the
    running ones (provider_error, or cancelled for the budget; both rerun on resume)."""
    provider = asyncio.ensure_future(gateway.health.wait_fatal())
    budget = asyncio.ensure_future(gateway.job_spend.wait_reached())
    try:
        await asyncio.wait({provider, budget}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        provider.cancel()
        budget.cancel()
    _note_stop(gateway, run)
    stop_trials()


def _note_stop(gateway: Any, run: JobRun) -> None:
    """Record what stopped the job early, if anything did."""
    if gateway.health.fatal is not None:
        run.stopped, run.stopped_by = gateway.health.fatal.message, "provider"
    elif gateway.job_spend.reason is not None:
        run.stopped, run.stopped_by = gateway.job_spend.reason, "job_budget"


def _count_earlier_spend(gateway: Any, run: JobRun) -> None:
    """A resumed job's budget counts what its trials spent in earlier runs: the finished
    ones, their retried tries, and the ones cut short that run again now."""
    spent = sum_usage([usage for result in [*run.results.values(), *run.discarded]
                       for usage in (result.usage, result.retried_usage) if usage])
    if spent is not None:
        gateway.job_spend.add(int(spent["total_tokens"]), spent["cost_usd"])  # type: ignore[call-overload, arg-type]


def _notify(observer: object, hook: str, *args: object) -> None:
    """Call an optional observer hook if the observer has it."""
    method = getattr(observer, hook, None)
    if method is not None:
        method(*args)


async def _prepare_agent(config: JobConfig, cache_dir: Path | None,
                         agents: AgentCatalog | None) -> None:
    """Run the agent's once-per-job preparation; one clear error instead of N failed trials."""
    agent = create_agent(config.agent, config.model, agents)
    prepare = getattr(agent, "prepare", None)
    if prepare is None or cache_dir is None:
        return
    try:
        await prepare(cache_dir, config.agent_version)
    except Exception as exc:  # an install failure of any kind stops the job up front
        raise JobSetupError(f"cannot prepare agent {config.agent!r}: {exc}") from exc


def _record_cancelled(run: JobRun) -> None:
    """Cancelled trials wrote result.json themselves; fold them into the partial summary."""
    for plan in run.plans:
        if plan.name in run.results:
            continue
        if (recorded := load_result(plan.dir / "result.json")) is not None:
            run.results[plan.name] = recorded
