"""One trial's lifecycle: setup → agent → verify → cleanup, each phase timed and typed.

Every failure ends here as data (`TrialResult.error`); only cancellation propagates, and
only after the sandbox is torn down and the cancelled result is on disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sandlot.agents.base import Agent, AgentContext, GatewayAccess, is_conversational
from sandlot.artifacts import artifact_entries, collect_artifacts, collected_uploads
from sandlot.errors import (
    AGENT_FAULT_KINDS,
    VERIFIER_FAULT_KINDS,
    ContainerExited,
    ErrorKind,
    SandboxDiskFull,
    SandboxError,
    TrialError,
    Unverifiable,
    default_cause,
)
from sandlot.fsutil import copy_out, write_atomic, write_model
from sandlot.gateway.budget import Budget
from sandlot.healthcheck import wait_healthy
from sandlot.hostguard import remove_tree
from sandlot.integrity import (
    KEPT_TRUSTED,
    LINK_INTO_VERIFIER,
    links_back,
    neutralize_planted_hooks,
)
from sandlot.live import TrialLive
from sandlot.machinery import Machinery, MachineryCache
from sandlot.models import ErrorInfo, Integrity, TrialResult, utc_now
from sandlot.network_plan import TrialNetworks, log_lines, plan_networks
from sandlot.redact import redact_text, redact_tree
from sandlot.repair import (
    RepairFailed,
    RepairSettings,
    feedback_template,
    run_with_repairs,
    whole_trial_counts,
)
from sandlot.sandbox.base import (
    CountsLimitEvents,
    DescribesEnvironment,
    DiffsWorkspace,
    EnvironmentRequest,
    Network,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
)
from sandlot.sandbox.bounded_fs import export_tree
from sandlot.sandbox.users import as_user, ensure_users
from sandlot.separate_verifier import SeparateVerifier, verifier_mode
from sandlot.steps import fold_steps, step_record, stop_reason, timing_since
from sandlot.tasks.config import StepSection
from sandlot.tasks.loader import Task
from sandlot.tasks.steps import step_dir, step_task
from sandlot.verify import TESTS_MOUNT, VERIFIER_LOGS, Verdict, Verifier

#: Agent-phase errors after which the verifier still scores what the agent left behind.
VERIFY_AFTER = AGENT_FAULT_KINDS
#: How long an agent whose model requests are refused for its budget may take to stop on
#: its own (most end their turn at the first refusal) before it is stopped.
BUDGET_GRACE_SEC = 30.0
CLEANUP_TIMEOUT_SEC = 60.0


@dataclass(frozen=True)
class TrialPlan:
    task: Task
    attempt: int
    dir: Path
    #: The trial's key to the gateway, when its caller mints keys (a cluster's driver);
    #: None: the gateway makes one.
    gateway_key: str | None = None

    @property
    def name(self) -> str:
        return f"{self.task.name}__{self.attempt}"


@dataclass(frozen=True)
class TrialSettings:
    """The job-wide knobs a trial needs (a slice of JobConfig)."""

    agent_name: str
    model: str | None
    sandbox_name: str
    timeout_multiplier: float = 1.0
    agent_network: str | None = None
    allow_private_network: bool = False
    masked_paths: tuple[Path, ...] = ()
    pids_max: int = 4096
    #: The job's LLM gateway (sandlot.gateway.server.Gateway), for agents that call a model.
    gateway: Any = None
    max_turns: int | None = None
    repair_attempts: int = 0
    repair_template: str | None = None
    cache_dir: Path | None = None
    agent_version: str | None = None
    #: Secrets the user marked (--redact-env): name -> value, scrubbed from the trial's files.
    redactions: dict[str, str] = field(default_factory=dict)
    #: The most of the agent's files copied into the trial folder, in all (--max-copy-out-mb).
    copy_out_max_bytes: int = 100 * 1024 * 1024
    #: --verifier-mode: "task" (what task.toml says) or "separate" (every task).
    verifier_mode: str = "task"
    #: The trial's spend limit, enforced by the gateway (--max-trial-tokens/-cost-usd).
    budget: Budget | None = None
    #: The job's probes of the verifier's machinery, shared by alike sandboxes; None: each
    #: trial probes its own.
    machinery_cache: MachineryCache | None = None


class _PhaseClock:
    def __init__(self, log_path: Path) -> None:
        self.timing: dict[str, float] = {}
        self._log_path = log_path

    def log(self, message: str) -> None:
        """Append one line: a log, read by people, so no fsync on the event loop."""
        with self._log_path.open("a") as fh:
            fh.write(f"{utc_now()} {message}\n")

    def phase(self, name: str) -> _Phase:
        return _Phase(self, name)


class _Phase:
    def __init__(self, clock: _PhaseClock, name: str) -> None:
        self.clock, self.name = clock, name

    def __enter__(self) -> None:
        self.start = time.monotonic()
        self.clock.log(f"phase {self.name} started")

    def __exit__(self, *exc: object) -> None:
        elapsed = time.monotonic() - self.start
        self.clock.timing[self.name] = round(self.clock.timing.get(self.name, 0.0) + elapsed, 4)
        self.clock.log(f"phase {self.name} ended after {elapsed:.3f}s")


async def _open_gateway(settings: TrialSettings, plan: TrialPlan, sandbox: Sandbox,
                        agent: Agent) -> Any:
    if not getattr(agent, "needs_gateway", False):
        return None
    if settings.gateway is None:
        raise TrialError(ErrorKind.AGENT_ERROR,
                         f"agent {settings.agent_name!r} calls a model: pass --model "
                         "provider/model (e.g. scripted/solver, openai/gpt-4.1)", "setup")
    return await settings.gateway.open_trial(plan.name, plan.task.name,
                                             plan.dir / "trajectory",
                                             sandbox.network_namespace(),
                                             budget=settings.budget, key=plan.gateway_key)


def _generation_record(gateway: Any, session: Any) -> dict[str, object] | None:
    """What the job set and what the agent sent (sandlot.gateway.generation)."""
    if session.seq == 0:  # no model request: nothing was set or sent
        return None
    sent = session.sent_settings
    not_sent = sorted({name for fmt in session.formats
                       for name in gateway.generation.not_sent(fmt)})
    return {"settings": gateway.generation.as_dict(), "agent_sent": sent.values,
            "n_requests_changed": sent.n_changed, "not_sent": not_sent}


def _oom_kills(sandbox: Sandbox | None) -> int | None:
    return sandbox.oom_kills() if isinstance(sandbox, CountsLimitEvents) else None


async def run_trial(plan: TrialPlan, settings: TrialSettings, backend: SandboxBackend,
                    agent: Agent, verifier: Verifier,
                    live: TrialLive | None = None) -> TrialResult:
    """Run one trial to a TrialResult written to `plan.dir/result.json`.

    Raises: asyncio.CancelledError only (after recording the trial as cancelled).
    """
    live = live or TrialLive(plan.name, plan.task.name, plan.attempt)
    return await _Trial(plan, settings, backend, agent, verifier, live).run()


@contextmanager
def _sandbox_failures(phase: str, other: ErrorKind = ErrorKind.INTERNAL_ERROR) -> Iterator[None]:
    """A sandbox fault as the trial's error of its kind: the image's ENTRYPOINT gone is the
    environment's fault; any other is `other` (setup failed, or ours)."""
    try:
        yield
    except ContainerExited as exc:
        raise TrialError(ErrorKind.ENVIRONMENT_ERROR, str(exc), phase) from exc
    except SandboxError as exc:
        message = str(exc) if other is ErrorKind.SANDBOX_SETUP_FAILED else f"sandbox failed: {exc}"
        raise TrialError(other, message, phase) from exc


#: Verify-phase errors whose cause a pristine sandbox decides: the verifier's own, and a
#: sandbox fault (a mount or a working directory the agent broke; PID 1 it killed).
_MACHINERY_KINDS = frozenset({ErrorKind.INTERNAL_ERROR, ErrorKind.ENVIRONMENT_ERROR})
_ATTRIBUTED_KINDS = (VERIFIER_FAULT_KINDS | _MACHINERY_KINDS
                     | {ErrorKind.VERIFIER_OOM, ErrorKind.MEMORY_LIMIT, ErrorKind.PIDS_LIMIT})


class _Trial:
    """The state one trial carries from phase to phase; each phase is one method.

    prepare → start services → set up the agent (timed together as "setup") → agent →
    collect → verify, then finish (always: gateway closed, sandbox stopped, result written).
    """

    def __init__(self, plan: TrialPlan, settings: TrialSettings, backend: SandboxBackend,
                 agent: Agent, verifier: Verifier, live: TrialLive) -> None:
        self.plan, self.settings, self.backend = plan, settings, backend
        self.agent, self.verifier, self.live = agent, verifier, live
        self.task = plan.task
        self.mult = settings.timeout_multiplier
        plan.dir.mkdir(parents=True, exist_ok=True)
        self.clock = _PhaseClock(plan.dir / "trial.log")
        self.result = TrialResult(trial_name=plan.name, task=self.task.name,
                                  attempt=plan.attempt, agent=settings.agent_name,
                                  model=settings.model, task_digest=self.task.digest,
                                  task_source=self.task.source,
                                  sandbox=settings.sandbox_name)
        self.sandbox: Sandbox | None = None
        self.session: Any = None
        self.ctx: AgentContext | None = None
        self.started = time.monotonic()
        #: Bytes of the agent's files that may still be copied into the trial folder.
        self.copy_budget = settings.copy_out_max_bytes
        #: Copy-out caps that cut what the trial folder keeps (result.json integrity).
        self.caps_hit: list[str] = []
        if not self.task.problems:
            self.result.verifier_mode = verifier_mode(self.task, settings.verifier_mode)
        self.separate: SeparateVerifier | None = None
        #: The pristine sandbox's machinery (shared mode); unmeasured until probed.
        self.machinery = Machinery()
        #: Each phase's network, decided (and an allowlist's names resolved) at the start.
        self.networks: TrialNetworks | None = None
        #: A multi-step task's networks, by step name.
        self.step_networks: dict[str, TrialNetworks] = {}
        #: Where this phase's files go: the trial folder, or steps/<name>/ in it.
        self.out = plan.dir
        #: The step running is the trial's last (always, for a task without steps).
        self.last_step = True
        if self.result.verifier_mode == "separate":
            self.separate = SeparateVerifier(verifier, self._open_verifier_sandbox,
                                             lambda sandbox: _stop_shielded(sandbox, self.clock))
            self.verifier = self.separate

    async def run(self) -> TrialResult:
        cancelled: asyncio.CancelledError | None = None
        try:
            await self._phases()
        except TrialError as exc:
            self._record(exc)
        except asyncio.CancelledError as exc:
            cancelled = exc
            self._record(self._cancel_reason())
        except Exception as exc:
            write_atomic(self.plan.dir / "exception.txt", traceback.format_exc(), durable=False)
            self._record(TrialError(ErrorKind.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}",
                                    None))
        finally:
            await self._finish()
        if cancelled is not None:
            raise cancelled
        return self.result

    async def _phases(self) -> None:
        if self.task.problems:
            raise TrialError(ErrorKind.TASK_INVALID, "the task cannot run: "
                             + "; ".join(self.task.problems), "setup")
        with self.clock.phase("setup"):
            await self._plan_networks()
            sandbox = await self._prepare()
            with _sandbox_failures("setup"):
                await self._start_services(sandbox)
                if self.separate is None:  # the shared verifier's machinery, pristine
                    await self._probe_machinery(sandbox)
            ctx = await self._set_up_agent(sandbox)
        if self.task.config.steps:
            await self._run_steps(sandbox, ctx)
            return
        with self.clock.phase("agent"):
            await self._run_agent(ctx)
        await self._collect(sandbox)
        with self.clock.phase("verify"):
            await self._verify(sandbox)

    async def _run_steps(self, sandbox: Sandbox, ctx: AgentContext) -> None:
        """A multi-step task: each step in order in this one sandbox, its files in
        steps/<name>/, until one cannot be scored or misses its min_reward; then the
        trial's reward from the steps (sandlot.steps)."""
        steps = self.task.config.steps or []
        task, result = self.task, self.result
        result.steps = []
        stop: tuple[str, str] | None = None
        try:
            for index, step in enumerate(steps, start=1):
                self.task, self.out = step_task(task, step), self.plan.dir / "steps" / step.name
                self.networks, self.last_step = self.step_networks[step.name], index == len(steps)
                self.result = TrialResult(trial_name=result.trial_name, task=result.task,
                                          attempt=result.attempt, agent=result.agent)
                self.clock.log(f"step {index}/{len(steps)} {step.name}: started")
                before = dict(self.clock.timing)
                try:
                    await self._run_step(sandbox, ctx, step, first=index == 1)
                except TrialError as exc:
                    self._record(exc)
                record = step_record(step.name, self.result, self.networks.as_dict(),
                                     timing_since(before, self.clock.timing))
                result.steps.append(record)
                result.script_time_sec += self.result.script_time_sec
                reason = stop_reason(record, step.min_reward)
                self.clock.log(f"step {step.name}: reward {record.reward}"
                               + (f"; the steps after it are stopped: {reason}"
                                  if reason and not self.last_step else ""))
                if reason is not None and not self.last_step:
                    stop = (step.name, reason)
                    break
        finally:
            self.task, self.result, self.out, self.last_step = task, result, self.plan.dir, True
            self.networks = None
            if self.session is not None and self.session.open:
                await self.settings.gateway.close_trial(self.session)
        fold_steps(result, result.steps, len(steps),
                   self.task.config.multi_step_reward_strategy or "mean", stop)

    async def _run_step(self, sandbox: Sandbox, ctx: AgentContext, step: StepSection, *,
                        first: bool) -> None:
        """One step: its files staged (and its setup.sh run), its healthcheck, its agent
        (with its own repairs), what it left collected, then its tests."""
        with self.clock.phase("setup"), _sandbox_failures("setup"):
            await self._stage_step(sandbox, step, first=first)
        task = self.task
        self.ctx = replace(ctx, task=task, sandbox=as_user(sandbox, task.agent_user),
                           user=task.agent_user,
                           timeout_sec=task.config.agent.timeout_sec * self.mult,
                           network=self._network("agent"), logs_dir=self.out / "agent")
        self.ctx.logs_dir.mkdir(parents=True, exist_ok=True)
        with self.clock.phase("agent"):
            await self._run_agent(self.ctx, end_session=self.last_step)
        await self._collect(sandbox)
        with self.clock.phase("verify"):
            await self._verify(sandbox)

    async def _stage_step(self, sandbox: Sandbox, step: StepSection, *, first: bool) -> None:
        """Before a step: /logs/agent emptied (the last step's copy is in its folder),
        steps/<name>/workdir/ copied into the working folder and its setup.sh run there,
        as the step's agent user, then the step's healthcheck."""
        task, folder = self.task, step_dir(self.task.path, step.name) / "workdir"
        if not first:
            await sandbox.exec(["find", "/logs/agent", "-mindepth", "1", "-delete"],
                               timeout_sec=60)
        if folder.is_dir():
            entries = sorted(folder.iterdir())
            for entry in entries:
                await sandbox.upload(entry, f"{task.workdir.rstrip('/')}/{entry.name}")
            if task.agent_user is not None and entries:
                await sandbox.exec(["chown", "-R", task.agent_user, "--",
                                    *(f"{task.workdir.rstrip('/')}/{e.name}" for e in entries)],
                                   timeout_sec=120)
            if (folder / "setup.sh").is_file():
                self.live.set_phase(f"step {step.name}: setup.sh…")
                setup = await sandbox.exec(
                    ["bash", f"{task.workdir.rstrip('/')}/setup.sh"], cwd=task.workdir,
                    user=task.agent_user, network=self._network("agent"),
                    timeout_sec=task.config.agent.timeout_sec * self.mult)
                if not setup.ok:
                    raise TrialError(ErrorKind.ENVIRONMENT_ERROR,
                                     f"step {step.name}: workdir/setup.sh "
                                     + ("timed out" if setup.timed_out else
                                        f"exited {setup.exit_code}")
                                     + f": {(setup.stderr or setup.stdout).strip()[-500:]}",
                                     "setup")
        if step.healthcheck is not None:
            self.live.set_phase(f"step {step.name}: waiting for the healthcheck…")
            await wait_healthy(sandbox, step.healthcheck, timeout_multiplier=self.mult,
                               log=self.clock.log)

    def _cancel_reason(self) -> TrialError:
        """Why the trial was cancelled: the user, or the job stopping on a provider failure."""
        gateway = self.settings.gateway
        failure = gateway.health.fatal if gateway is not None else None
        job_budget = gateway.job_spend.reason if gateway is not None else None
        if failure is None and job_budget is not None:
            return TrialError(ErrorKind.CANCELLED, f"{job_budget}: the job stopped this trial "
                              "(it reruns on resume)", None, caused_by="user")
        if failure is None:
            return TrialError(ErrorKind.CANCELLED, "the run was interrupted", None)
        return TrialError(ErrorKind.PROVIDER_ERROR, f"the job stopped: {failure.message}",
                          self.live.phase if self.live.phase in ("agent",) else None,
                          caused_by="provider")

    def _raise_if_the_provider_failed(self) -> None:
        """A trial whose own request met a refused key or an unknown model: whatever the
        agent did next (gave up, crashed, answered nothing) is the provider's doing."""
        failure = getattr(self.session, "provider_failure", None)
        if failure is None:
            return
        self.result.error = None  # an agent fault recorded a moment ago is replaced
        raise TrialError(ErrorKind.PROVIDER_ERROR, failure.message, "agent",
                         caused_by="provider")

    def _named_oom(self, exc: TrialError, sandbox: Sandbox | None,
                   before: int | None) -> TrialError:
        """An agent that failed after the OOM killer ended one of the sandbox's processes
        (a worker, a tool it ran) failed of that: `agent_oom`, not a bare `agent_error`."""
        if exc.kind is not ErrorKind.AGENT_ERROR or before is None:
            return exc
        now = _oom_kills(sandbox)
        if now is None or now <= before:
            return exc
        memory_mb = self.task.config.environment.memory_mb
        at = f" ({memory_mb} MB)" if memory_mb else ""
        return TrialError(ErrorKind.AGENT_OOM, f"the kernel's OOM killer ended {now - before} "
                          f"process(es) in the sandbox at the task's memory_mb{at}, then the "
                          f"agent failed: {exc.message}", exc.phase or "agent", exc.details)

    def _record(self, exc: TrialError) -> None:
        if self.result.error is None:
            self.result.error = ErrorInfo(kind=exc.kind, message=exc.message, phase=exc.phase,
                                          caused_by=exc.caused_by or default_cause(exc.kind))
        self.clock.log(f"error {exc.kind}: {exc.message}")

    async def _plan_networks(self) -> None:
        """Each phase's network from task.toml and --agent-network; an allowlist's names
        are resolved here, once, and recorded in result.json."""
        config, uses_gateway = self.task.config, getattr(self.agent, "needs_gateway", False)
        steps = config.steps or []
        plans = await asyncio.gather(*(plan_networks(
            config, uses_gateway=uses_gateway, agent_override=self.settings.agent_network,
            step=step) for step in [None, *steps]))
        self.networks = plans[0]
        self.step_networks = {step.name: plan for step, plan in zip(steps, plans[1:],
                                                                     strict=True)}
        self.result.network = self.networks.as_dict()
        for line in log_lines(self.networks):
            self.clock.log(line)
        for name, plan in self.step_networks.items():
            for line in log_lines(plan):
                self.clock.log(f"step {name}: {line}")

    def _network(self, phase: str) -> Network:
        assert self.networks is not None
        return (self.networks.agent if phase == "agent" else self.networks.verifier).network

    async def _prepare(self) -> Sandbox:
        """The task's environment, built (or taken from the cache) and started."""
        self.live.set_phase("creating sandbox…")
        task = self.task
        request = self._environment_request(self.plan.name, self.plan.dir / "setup")
        with _sandbox_failures("setup", ErrorKind.SANDBOX_SETUP_FAILED):
            self.sandbox = await self.backend.create(request)
        if isinstance(self.sandbox, DescribesEnvironment):
            info = self.sandbox.environment
            self.result.environment = info.as_dict()
            if info.workdir and not task.declared_workdir:  # the image's own WORKDIR
                self.task = replace(self.task, image_workdir=info.workdir)
            if info.user:  # the image's USER, its base image's included
                self.task = replace(self.task, image_user=info.user)
            self.clock.log(f"root: {info.base}" + (f" ({info.image})" if info.image else "")
                           + (f": {info.reason}" if info.reason else ""))
        return self.sandbox

    def _environment_request(self, name: str, log_dir: Path) -> EnvironmentRequest:
        """How to make a sandbox of the task's environment (the trial's, or a pristine
        one to check its verifier on)."""
        task, env = self.task, self.task.config.environment
        spec = SandboxSpec(name=name, workdir=task.declared_workdir or "", env=task.env,
                           memory_mb=env.memory_mb, cpus=env.cpus,
                           pids_max=self.settings.pids_max, storage_mb=env.storage_mb,
                           allow_private_network=self.settings.allow_private_network,
                           masked_paths=self.settings.masked_paths,
                           folders=("/logs/agent",), mount_points=(TESTS_MOUNT, VERIFIER_LOGS))
        return EnvironmentRequest(spec=spec, environment_dir=task.environment_dir,
                                  digest=task.digest,
                                  build_timeout_sec=env.build_timeout_sec * self.mult,
                                  log_dir=log_dir, image=task.prebuilt_image)

    async def _open_verifier_sandbox(self, name: str) -> Sandbox:
        """A fresh sandbox of the task's environment for a separate verifier, its users
        and services ready as the agent's were."""
        request = self._environment_request(f"{self.plan.name}-{name}",
                                            self.out / "verifier" / "setup")
        with _sandbox_failures("verify"):
            sandbox = await self.backend.create(request)
        try:
            with _sandbox_failures("verify"):
                await self._start_services(sandbox)
        except BaseException:
            await _stop_shielded(sandbox, self.clock)
            raise
        return sandbox

    async def _stop_agent_sandbox(self, sandbox: Sandbox) -> None:
        """The agent's sandbox, once a separate verifier has its outputs: what the agent
        left running ends before the tests start."""
        if sandbox is self.sandbox:
            self.sandbox = None
        self.clock.log("the agent's outputs are carried: its sandbox stops")
        await _stop_shielded(sandbox, self.clock)

    async def _start_services(self, sandbox: Sandbox) -> None:
        """The task's users exist, and the services its image started answer their
        healthcheck, before the agent sees anything."""
        await _prepare_users(sandbox, self.task, self.clock)
        healthcheck = self.task.config.environment.healthcheck
        if healthcheck is not None:
            self.live.set_phase("waiting for the healthcheck…")
            await wait_healthy(sandbox, healthcheck, timeout_multiplier=self.mult,
                               log=self.clock.log)

    async def _set_up_agent(self, sandbox: Sandbox) -> AgentContext:
        """The agent's key to the gateway (if it calls a model), its context, its install."""
        settings, task = self.settings, self.task
        self.session = await _open_gateway(settings, self.plan, sandbox, self.agent)
        access = None
        if self.session is not None:
            self.live.gateway_usage = self.session.usage
            access = GatewayAccess(
                sandbox_base_url=(f"http://127.0.0.1:{self.session.sandbox_port}"
                                  if self.session.sandbox_port else None),
                host_base_url=settings.gateway.host_base_url, api_key=self.session.key,
                model=settings.model or "", usage=self.session.usage)
        self.ctx = AgentContext(task=task, sandbox=as_user(sandbox, task.agent_user),
                                user=task.agent_user,
                                timeout_sec=task.config.agent.timeout_sec * self.mult,
                                network=self._network("agent"),
                                logs_dir=self.plan.dir / "agent", model=settings.model,
                                gateway=access, max_turns=settings.max_turns,
                                cache_dir=settings.cache_dir,
                                agent_version=settings.agent_version, live=self.live.agent)
        self.ctx.logs_dir.mkdir(parents=True, exist_ok=True)
        self.live.set_phase("installing agent…")
        await self.agent.setup(self.ctx)
        return self.ctx

    async def _run_agent(self, ctx: AgentContext, *, end_session: bool = True) -> None:
        """The agent works (with repair rounds if asked); its own faults are recorded and
        what it left is still verified. Its processes end here, and its key too unless a
        later step's agent still needs it (`end_session`)."""
        self.live.set_phase("agent")
        oom_before = _oom_kills(self.sandbox)  # the sandbox itself, not the agent's user view
        try:
            with _sandbox_failures("agent"):
                await self._turns_within_budget(ctx)
        except TrialError as caught:
            exc = self._named_oom(caught, self.sandbox, oom_before)
            exc.phase = exc.phase or "agent"
            self.result.agent_info.update(exc.details)
            if exc.kind not in VERIFY_AFTER:
                self._raise_if_the_provider_failed()
                raise
            spent = None if exc.kind is ErrorKind.BUDGET_EXCEEDED else self._budget_error()
            self._record(spent or exc)
        else:
            if (spent := self._budget_error()) is not None:
                self._record(spent)
        finally:
            # The agent's processes end here, before anything is scored...
            if is_conversational(self.agent):
                await _close_agent(self.agent, ctx, self.clock)
            # ...and its key dies with them: nothing after may call the model.
            if self.session is not None and end_session:
                await self.settings.gateway.close_trial(self.session)
        self._raise_if_the_provider_failed()

    async def _turns_within_budget(self, ctx: AgentContext) -> None:
        """The agent's turns; once the gateway refused a request for the trial's budget,
        the agent has BUDGET_GRACE_SEC to stop on its own before it is stopped."""
        session = self.session
        if session is None or not session.budget:
            await self._agent_turns(ctx)
            return
        turns = asyncio.ensure_future(self._agent_turns(ctx))
        spent = asyncio.ensure_future(session.budget_spent.wait())
        stopped = False
        try:
            await asyncio.wait({turns, spent}, return_when=asyncio.FIRST_COMPLETED)
            if not turns.done():
                self.clock.log(f"{session.budget_refusal}: the agent has "
                               f"{BUDGET_GRACE_SEC:g} s to stop")
                await asyncio.wait({turns}, timeout=BUDGET_GRACE_SEC)
                stopped = not turns.done()
        finally:
            spent.cancel()
            if not turns.done():
                turns.cancel()
                # However the agent ends when cancelled (some turn it into an error).
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await turns
        if stopped:
            error = self._budget_error()
            assert error is not None
            error.message += f"; the agent did not stop within {BUDGET_GRACE_SEC:g} s and " \
                "was stopped"
            raise error
        turns.result()  # the agent's own error, if it raised one

    def _budget_error(self) -> TrialError | None:
        """budget_exceeded, if the gateway refused one of this trial's requests for its
        budget: whatever the agent did after (gave up, crashed) came of that."""
        session = self.session
        refusal = getattr(session, "budget_refusal", None)
        if refusal is None:
            return None
        n = session.n_budget_refused
        return TrialError(ErrorKind.BUDGET_EXCEEDED,
                          f"{refusal}; the gateway refused {n} request{'s' if n != 1 else ''}",
                          "agent", caused_by="agent")

    async def _agent_turns(self, ctx: AgentContext) -> None:
        settings, result = self.settings, self.result
        first_started = time.monotonic()
        outcome = await self.agent.run(ctx)
        result.agent_exit_code = outcome.exit_code
        result.script_time_sec += outcome.script_time_sec
        result.agent_info = dict(outcome.metadata)
        if not settings.repair_attempts:
            return
        if not is_conversational(self.agent):
            result.agent_info["repair_attempts"] = (
                f"not supported by agent {settings.agent_name!r}")
            return
        repair = RepairSettings(
            max_repairs=settings.repair_attempts,
            template=feedback_template(self.task, settings.repair_template),
            verify_timeout_sec=self.task.config.verifier.timeout_sec * self.mult)
        try:
            result.attempts = await run_with_repairs(
                self.agent, ctx, outcome, time.monotonic() - first_started, self.verifier,
                self.out / "repairs", repair, on_phase=self.live.set_phase)
        except RepairFailed as exc:
            result.attempts = exc.attempts
            raise
        finally:
            result.agent_info.update(whole_trial_counts(result.attempts))

    async def _collect(self, sandbox: Sandbox) -> None:
        """What the agent changed and logged, kept in the trial folder before scoring,
        within the trial's copy-out budget (the verifier's logs get what is left)."""
        self.copy_budget -= await _record_workspace_diff(
            sandbox, self.task.workdir, self.out / "agent", self.clock,
            min(WORKSPACE_DIFF_MAX_BYTES, self.copy_budget), self.caps_hit)
        self.copy_budget -= await _collect_agent_logs(
            sandbox, self.out, self.clock, min(AGENT_LOGS_MAX_BYTES, self.copy_budget),
            self.caps_hit)
        await self._collect_artifacts(sandbox)

    async def _collect_artifacts(self, sandbox: Sandbox) -> None:
        """What task.toml's `artifacts` list (and /logs/artifacts), copied out before
        the tests run (sandlot.artifacts), within what the trial may still copy."""
        entries = artifact_entries(self.task.config.artifacts, self.task.workdir)
        records, used = await collect_artifacts(sandbox, entries, self.out / "artifacts",
                                                max(0, self.copy_budget))
        self.copy_budget -= used
        if not records:
            return
        self.result.artifacts = records
        where = self.out.relative_to(self.plan.dir) / "artifacts"
        cut = [r for r in records if r["status"] == "cut"]
        if cut:
            self.caps_hit.append(f"artifacts: {', '.join(str(r['source']) for r in cut)} "
                                 f"cut at the copy-out cap ({where}/manifest.json)")
        self.clock.log(f"artifacts: {len(records)} collected into {where} ("
                       + ", ".join(f"{r['source']} {r['status']}" for r in records) + ")")
        if self.separate is not None:
            self.separate.extra_uploads = collected_uploads(records, self.out,
                                                            self.task.workdir)

    async def _verify(self, sandbox: Sandbox) -> None:
        """Planted hooks neutralised, then the task's tests score what the agent left."""
        self.live.set_phase("verifying…")
        result = self.result
        result.integrity = Integrity()
        try:
            with _sandbox_failures("verify"):
                try:
                    if self.separate is None:
                        await self._neutralize(sandbox)
                    elif self.last_step:  # nothing outside the outputs reaches it
                        self.separate.stop_source = self._stop_agent_sandbox
                    verdict = await self.verifier.verify(
                        sandbox, self.task, self.out / "verifier",
                        self.task.config.verifier.timeout_sec * self.mult,
                        network=self._network("verifier"),
                        logs_max_bytes=max(0, self.copy_budget))
                    back = await links_back(sandbox, [
                        n["path"] for n in result.integrity.neutralized
                        if n["reason"].startswith(LINK_INTO_VERIFIER)])
                    if back:
                        self._fail_closed("links into the verifier's own folders were "
                                          "made again while the tests ran", back)
                        return
                except Unverifiable as exc:
                    self._fail_closed(exc.reason, [exc.path])
                    return
        except SandboxDiskFull as exc:
            # The agent filled its disk (storage_mb) so full that the tests cannot be
            # copied in: its own failure, scored 0. Errored instead, the trial would
            # leave the pass rate: a way to hide a task the agent cannot solve.
            result.reward, result.rewards, result.passed = 0.0, {"reward": 0.0}, False
            raise TrialError(ErrorKind.DISK_LIMIT, f"the agent left no room to verify: "
                             f"{exc}; scored 0", "agent") from exc
        except TrialError as exc:
            if exc.phase != "verify" or exc.kind not in _ATTRIBUTED_KINDS:
                raise
            await self._attribute_verifier_fault(exc)
            return
        result.reward = verdict.reward
        result.rewards = verdict.rewards
        result.passed = verdict.reward >= 1.0
        result.counted_attempt = len(result.attempts) or 1
        result.repaired = result.passed and len(result.attempts) > 1
        result.verifier_exit_code = verdict.exit_code
        result.script_time_sec += verdict.duration_sec

    async def _probe_machinery(self, sandbox: Sandbox) -> None:
        """Where the verifier's machinery loads code, asked of the sandbox before the agent
        touches it (sandlot.machinery), kept in machinery.json beside result.json."""
        task = self.task
        started = time.monotonic()
        cache = self.settings.machinery_cache or MachineryCache()  # none: this trial's own
        users = sorted({u for u in (task.agent_user, task.verifier_user) if u is not None})
        ran_before = repr((users, task.config.environment.healthcheck))
        self.machinery, shared = await cache.probe(sandbox, dict(task.config.verifier.env),
                                                   task.verifier_user, ran_before)
        how = "as probed in an alike sandbox" if shared else "probed"
        self.clock.log(f"verifier machinery {how} in {time.monotonic() - started:.2f}s: "
                       f"{len(self.machinery.pythons)} Python interpreter(s) on PATH")
        for note in self.machinery.notes:
            self.clock.log(note + "; the static defaults judge the agent's changes")
        write_atomic(self.plan.dir / "machinery.json",
                     json.dumps(self.machinery.as_dict(), indent=1) + "\n", durable=False)

    async def _neutralize(self, sandbox: Sandbox) -> None:
        """What the agent changed that the verifier's machinery would load without being
        asked, put back (shared mode)."""
        found = await neutralize_planted_hooks(
            sandbox, self.task.workdir, self.machinery,
            tuple(self.task.config.verifier.trusted_paths))
        restored = [f for f in found if f["action"] != KEPT_TRUSTED]
        for kept in (f for f in found if f["action"] == KEPT_TRUSTED):
            self.clock.log(f"kept {kept['path']} ({kept['reason']}): the task trusts it")
        if found:
            self.result.integrity = Integrity(
                status="neutralized" if restored else "clean", neutralized=found)
        if restored:
            self.clock.log(f"neutralized {len(restored)} planted hook(s) before "
                           "verification")

    async def _attribute_verifier_fault(self, exc: TrialError) -> None:
        """The verifier could not score what the agent left. Run it once on a pristine
        sandbox of the same environment: if it scores there, the agent's changes broke it
        (its working directory, the tools test.sh runs, the sandbox's own folders), and
        the trial is the agent's failure, scored 0; otherwise the error stands as the
        task's (or, for a sandbox fault, sandlot's: retried)."""
        self.clock.log(f"the verifier could not score ({exc.kind}: {exc.message}); "
                       "checking it on a pristine sandbox")
        self.live.set_phase("checking the verifier on a pristine sandbox…")
        try:
            pristine = await self._pristine_verdict()
        except (TrialError, SandboxError, OSError) as check:
            self.clock.log(f"it does not score on a pristine sandbox either: {check}")
            exc.caused_by = "sandlot" if exc.kind is ErrorKind.INTERNAL_ERROR else "task"
            raise exc from None
        result = self.result
        result.counted_attempt = len(result.attempts) or 1
        if exc.kind not in _MACHINERY_KINDS:
            result.reward, result.rewards, result.passed = 0.0, {"reward": 0.0}, False
            result.verifier_failure = {"kind": str(exc.kind), "message": exc.message,
                                       "caused_by": "agent",
                                       "pristine_reward": pristine.reward}
            self.clock.log(f"it scores {pristine.reward:g} on a pristine sandbox: the "
                           "agent's changes broke it; scored 0")
            return
        # The sandbox's own machinery failed where a pristine one works: tampered.
        self._fail_closed(f"the verifier could not run in what the agent left "
                          f"({exc.kind}: {exc.message}), but runs on a pristine sandbox",
                          [])

    async def _pristine_verdict(self) -> Verdict:
        """The verifier's verdict on a fresh sandbox of the task's environment that no
        agent touched (its files in verifier-pristine/ of the trial folder)."""
        out_dir = self.out / "verifier-pristine"
        request = self._environment_request(f"{self.plan.name}-pristine", out_dir / "setup")
        with _sandbox_failures("verify"):
            sandbox = await self.backend.create(request)
        try:
            with _sandbox_failures("verify"):
                await self._start_services(sandbox)
                return await self.verifier.verify(
                    sandbox, self.task, out_dir,
                    self.task.config.verifier.timeout_sec * self.mult,
                    network=self._network("verifier"))
        finally:
            await _stop_shielded(sandbox, self.clock)

    def _fail_closed(self, reason: str, paths: list[str]) -> None:
        """What the agent left cannot be vouched for: scored 0 as `tampered` (a failure,
        counted in the pass rate, never an error)."""
        result = self.result
        result.reward, result.rewards, result.passed = 0.0, {"reward": 0.0}, False
        result.counted_attempt = len(result.attempts) or 1
        before = result.integrity or Integrity()
        result.integrity = Integrity(status="tampered", reason=reason, paths=paths,
                                     neutralized=before.neutralized)
        self.clock.log(f"tampered: {reason}" + (f" at {', '.join(paths)}" if paths else "")
                       + "; scored 0")

    async def _finish(self) -> None:
        """Always: the key closed, usage taken, the sandbox gone, the result on disk."""
        result, settings = self.result, self.settings
        if self.session is not None:
            if self.session.open:
                await settings.gateway.close_trial(self.session)
            result.usage = self.session.usage.totals.as_dict()
            result.generation = _generation_record(settings.gateway, self.session)
        if self.sandbox is not None:
            self.live.set_phase("cleaning up…")
            with self.clock.phase("cleanup"):
                await _stop_shielded(self.sandbox, self.clock)
        caps = self.caps_hit + [cut for folder in (self.plan.dir, *_step_dirs(self.plan.dir))
                                 for cut in _verifier_logs_cut(folder)]
        if caps:
            result.integrity = (result.integrity or Integrity()).model_copy(
                update={"caps_hit": caps})
        result.timing = {**self.clock.timing,
                         "total": round(time.monotonic() - self.started, 4)}
        result.finished_at = utc_now()
        if not result.scored:
            result.passed = False
        if settings.redactions:
            await asyncio.to_thread(redact_tree, self.plan.dir, settings.redactions)
            result = TrialResult.model_validate_json(
                redact_text(result.model_dump_json(), settings.redactions))
            self.result = result
        write_model(self.plan.dir / "result.json", result, durable=False)  # the job's is


def load_result(path: Path) -> TrialResult | None:
    """Whatever result.json a trial wrote, or None (none, or not a whole result)."""
    try:
        return TrialResult.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def _step_dirs(trial_dir: Path) -> list[Path]:
    """A multi-step trial's step folders (none for a task without steps)."""
    steps = trial_dir / "steps"
    return sorted(p for p in steps.iterdir() if p.is_dir()) if steps.is_dir() else []


async def _prepare_users(sandbox: Sandbox, task: Task, clock: _PhaseClock) -> None:
    """The task's users exist, and /logs/agent is the agent's own (as Harbor makes it)."""
    users = sorted({u for u in (task.agent_user, task.verifier_user) if u is not None})
    for line in await ensure_users(sandbox, users):
        clock.log(line)
    if task.agent_user is not None:
        result = await sandbox.exec(["chown", task.agent_user, "/logs/agent"], timeout_sec=60)
        if result.exit_code != 0:
            raise TrialError(ErrorKind.ENVIRONMENT_ERROR, f"cannot give /logs/agent to user "
                             f"{task.agent_user}: {result.stderr.strip()[-300:]}", "setup")


#: The most of /logs/agent kept in the trial folder (the rest is listed as left out).
AGENT_LOGS_MAX_BYTES = 50 * 1024 * 1024
#: The most of the workspace diff kept (a longer one ends in a note).
WORKSPACE_DIFF_MAX_BYTES = 1_000_000


async def _collect_agent_logs(sandbox: Sandbox, trial_dir: Path, clock: _PhaseClock,
                              max_bytes: int, caps_hit: list[str]) -> int:
    """What the agent wrote to /logs/agent (Harbor's place for an agent's own logs), as
    plain files in agent/logs/ of the trial folder, at most `max_bytes`; what was left
    out is listed in agent/logs-left-out.txt (and named in `caps_hit`). Returns the
    bytes copied."""
    dest = trial_dir / "agent" / "logs"
    try:
        try:
            source = Path(sandbox.host_path("/logs/agent"))  # type: ignore[attr-defined]
        except (AttributeError, SandboxError):
            # No host view of this sandbox (an engine on another machine): its download.
            return await _download_agent_logs(sandbox, trial_dir, clock, max_bytes,
                                              caps_hit)
        export = await asyncio.to_thread(export_tree, source, dest, max_bytes)
    except (SandboxError, OSError) as exc:
        clock.log(f"collecting /logs/agent failed: {exc}")
        return 0
    if export.notes:
        write_atomic(trial_dir / "agent" / "logs-left-out.txt", export.summary(), durable=False)
        clock.log(f"/logs/agent: {export.left_out} entries left out (agent/logs-left-out.txt)")
        caps_hit.append(f"agent logs: {export.left_out} entries left out "
                        "(agent/logs-left-out.txt)")
    with contextlib.suppress(OSError):
        dest.rmdir()  # only if nothing was there
    return export.bytes


async def _download_agent_logs(sandbox: Sandbox, trial_dir: Path, clock: _PhaseClock,
                               max_bytes: int, caps_hit: list[str]) -> int:
    size = await sandbox.exec(["du", "-sb", "/logs/agent"], timeout_sec=60)
    try:
        total = int(size.stdout.split()[0]) if size.exit_code == 0 else 0
    except (ValueError, IndexError):
        total = 0
    if total > max_bytes:
        clock.log(f"/logs/agent holds {total} bytes, over {max_bytes}: not collected")
        caps_hit.append(f"agent logs: {total} bytes, over the {max_bytes} left to copy; "
                        "not collected")
        return 0
    staging = trial_dir / ".agent-logs.tmp"
    remove_tree(staging, ignore_errors=True)
    try:
        await sandbox.download("/logs/agent", staging)
        if staging.is_dir() and any(staging.iterdir()):
            await asyncio.to_thread(copy_out, staging, trial_dir / "agent" / "logs")
    finally:
        remove_tree(staging, ignore_errors=True)
    return total


async def _record_workspace_diff(sandbox: Sandbox, workdir: str, out_dir: Path,
                                 clock: _PhaseClock, max_bytes: int,
                                 caps_hit: list[str]) -> int:
    """agent/workspace.diff: what the agent changed in its workdir (backends that can),
    about `max_bytes` at most; what it cut is named in `caps_hit`. Returns the bytes
    written."""
    if not isinstance(sandbox, DiffsWorkspace):
        return 0
    try:
        diff = await sandbox.diff(workdir, max_bytes=max_bytes)
    except Exception as exc:
        clock.log(f"workspace diff failed: {exc}")
        return 0
    out_dir.mkdir(parents=True, exist_ok=True)
    data = diff.text.encode(errors="replace")
    write_atomic(out_dir / "workspace.diff", data, durable=False)
    if diff.cut:
        shown = "; ".join(diff.cut[:3]) + (f"; {len(diff.cut) - 3} more" if len(diff.cut) > 3
                                           else "")
        caps_hit.append(f"workspace diff: {shown} (agent/workspace.diff)")
    return len(data)


def _verifier_logs_cut(trial_dir: Path) -> list[str]:
    """The verifier's logs past the copy-out cap: its export lists them beside the copy."""
    if not (trial_dir / "verifier" / "logs-left-out.txt").is_file():
        return []
    return ["verifier logs: entries left out (verifier/logs-left-out.txt)"]


async def _close_agent(agent: Any, ctx: AgentContext, clock: _PhaseClock) -> None:
    close = asyncio.ensure_future(agent.close(ctx))
    try:
        await asyncio.wait_for(asyncio.shield(close), CLEANUP_TIMEOUT_SEC)
    except asyncio.CancelledError:
        await close
        raise
    except Exception as exc:
        clock.log(f"closing the agent failed: {exc}")


async def _stop_shielded(sandbox: Sandbox, clock: _PhaseClock) -> None:
    """Tear down even while being cancelled: a leaked sandbox outlives the job otherwise."""
    stop = asyncio.ensure_future(sandbox.stop())
    try:
        await asyncio.wait_for(asyncio.shield(stop), CLEANUP_TIMEOUT_SEC)
    except asyncio.CancelledError:
        await stop  # cancelled again (a second Ctrl-C): still finish the teardown
    except Exception as exc:
        clock.log(f"cleanup failed: {exc}")
