"""`sandlot run` once its settings are resolved (flags over the job file over the
defaults, see sandlot.run_spec): check them, gather and load the tasks, make the sandbox
backend and the gateway, check the model, write the job's config, run it, and say how it
ended. Every problem found before the run is said at once, and nothing is started then.
"""

from __future__ import annotations

import asyncio
import re
import signal
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from sandlot.cli_common import fail, is_dir, print_problems, print_warning_groups
from sandlot.exit_codes import ExitCode
from sandlot.paths import default_cache_dir
from sandlot.run_spec import ResolvedRun, RunSpec, dump_resolved

JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
BUDGET_KEYS = ("max_trial_tokens", "max_trial_cost_usd", "max_job_tokens", "max_job_cost_usd")
GENERATION_KEYS = ("temperature", "max_output_tokens", "reasoning_effort", "seed", "model_kwarg")


@dataclass
class CheckedRun:
    """Settings checked against this machine, before any task is read."""

    catalog: Any  # sandlot.agents.acp_registry.AgentCatalog
    generation: Any  # sandlot.gateway.generation.GenerationSettings
    build_args: dict[str, str]
    template_text: str | None
    cache: Path
    jobs_root: Path
    route: Any  # sandlot.gateway.routing.RouteConfig | None


def run_resolved(resolved: ResolvedRun, console: Console) -> None:
    """Runs the job `resolved` describes; raises typer.Exit with its exit code."""
    from sandlot.executors.ray_cluster import ClusterError
    from sandlot.job import ConfigMismatchError, JobSetupError, load_finished
    from sandlot.report.table import end_of_run

    spec = resolved.spec
    checked = _check_run(resolved, console)
    tasks, problems = _load_tasks(spec, checked, console)
    backend = _make_backend(spec, checked, problems, console)
    config = _job_config(spec, checked, tasks)
    # On a cluster each node makes its own backend (this one only checked this machine).
    display, coro = _start(spec, checked, config, tasks,
                           None if spec.ray else backend, console)
    job_dir = checked.jobs_root / config.job_name
    try:
        with display:
            summary = _run_cancellable(coro)
    except ConfigMismatchError as exc:
        raise fail(console, str(exc)) from exc
    except (JobSetupError, ClusterError) as exc:
        raise fail_preflight(console, [str(exc)], False) from exc
    except (OSError, BaseExceptionGroup) as exc:
        os_error = _first_os_error(exc)
        if os_error is None:
            raise
        raise fail(console, f"cannot write the job's files ({os_error.filename or job_dir}): "
                   f"{os_error.strerror or os_error}; finished trials are kept, free some "
                   "space and run the same command again to resume") from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: running sandboxes were torn down; the partial "
                      f"summary is in {job_dir / 'summary.json'}; run the same command again "
                      "to resume")
        if spec.json_summary:
            _print_json_result(job_dir, ExitCode.INTERRUPTED, None)
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    results = [r for t in tasks for a in range(1, spec.n_attempts + 1)
               if (r := load_finished(job_dir / f"{t.name}__{a}" / "result.json")) is not None]
    console.print(end_of_run(summary, results))
    code, verdict = _run_verdict(summary, spec.max_error_rate)
    if verdict:
        console.print(verdict, soft_wrap=True)
    if spec.json_summary:
        _print_json_result(job_dir, code, summary)
    if code != ExitCode.OK:
        raise typer.Exit(code)


def _check_run(resolved: ResolvedRun, console: Console) -> CheckedRun:
    """Settings that are wrong whatever the tasks: said before anything is loaded."""
    from sandlot.agents import UnknownAgentError, create_agent
    from sandlot.agents.acp_registry import AgentCatalog
    from sandlot.sandbox import parse_build_args

    spec, where = resolved.spec, resolved.where
    if spec.agent is None:
        raise fail(console, "no agent named: give --agent NAME (see `sandlot agents list`), "
                   "or `agent:` in the --config file")
    if not spec.tasks and not spec.dataset:
        raise fail(console, "no tasks named: give a task folder (or a folder of tasks), "
                   "or a dataset with -d NAME[@VERSION]")
    for folder in spec.tasks:
        if not is_dir(folder):
            raise fail(console, f"{str(folder)[:300]} is not a folder")
    try:
        catalog = AgentCatalog.load(spec.agents_file)
        create_agent(spec.agent, spec.model, catalog)
    except (UnknownAgentError, ValueError) as exc:
        raise fail(console, str(exc)) from exc
    try:
        build_args = parse_build_args(spec.build_arg)
    except ValueError as exc:
        raise fail(console, str(exc)) from exc
    template_text = (_read_template(console, spec.repair_template, where("repair_template"))
                     if spec.repair_template else None)
    _check_choices(resolved, console)
    cache = (spec.cache_dir or default_cache_dir()).resolve()
    jobs_root = spec.jobs_dir.resolve()
    for key, folder in (("jobs_dir", jobs_root), ("cache_dir", cache)):
        if folder.exists() and not folder.is_dir():
            raise fail(console, f"{where(key)} {folder} is a file, not a folder")
    if spec.job_name is not None and not JOB_NAME.fullmatch(spec.job_name):
        raise fail(console, f"{where('job_name')} {spec.job_name[:80]!r}: use letters, "
                   "digits, '.', '_' and '-' (up to 200 characters, not starting with '.' "
                   "or '-'); it names a folder inside --jobs-dir")
    route = None
    if spec.model is not None:
        route = _route_config(console, spec, _scripts_dirs(
            spec.scripts_dir, spec.tasks[0] if spec.tasks else None))
        for key in ("max_trial_cost_usd", "max_job_cost_usd"):
            if getattr(spec, key) is not None and not _has_price(route):
                raise fail(console, f"{where(key)}: the price of {spec.model} is not known "
                           "(not in LiteLLM's price table), so its cost cannot be counted; "
                           "use --max-trial-tokens / --max-job-tokens instead")
    elif getattr(create_agent(spec.agent, None, catalog), "needs_gateway", False):
        raise fail(console, f"agent {spec.agent!r} calls a model: pass --model provider/model "
                   "(e.g. scripted/solver for a dry run, openai/gpt-4.1)")
    return CheckedRun(catalog, _generation(resolved, console), build_args, template_text,
                      cache, jobs_root, route)


def _generation(resolved: ResolvedRun, console: Console) -> Any:
    from sandlot.gateway.generation import (
        REASONING_EFFORTS,
        GenerationError,
        GenerationSettings,
        parse_model_kwargs,
    )

    spec = resolved.spec
    if spec.reasoning_effort is not None and spec.reasoning_effort not in REASONING_EFFORTS:
        raise fail(console, f"{resolved.where('reasoning_effort')} {spec.reasoning_effort!r}: "
                   f"use one of {', '.join(REASONING_EFFORTS)}")
    try:
        kwargs = parse_model_kwargs(spec.model_kwarg)
    except GenerationError as exc:
        raise fail(console, str(exc)) from exc
    return GenerationSettings(spec.temperature, spec.max_output_tokens, spec.reasoning_effort,
                              spec.seed, kwargs)


def _check_choices(resolved: ResolvedRun, console: Console) -> None:
    from sandlot.sandbox import BACKENDS
    from sandlot.sandbox.local_backend import IMAGE_POLICIES
    from sandlot.separate_verifier import VERIFIER_MODE_CHOICES

    spec, where = resolved.spec, resolved.where
    for key, value, choices in (("sandbox", spec.sandbox, BACKENDS),
                                ("image_policy", spec.image_policy, IMAGE_POLICIES),
                                ("verifier_mode", spec.verifier_mode, VERIFIER_MODE_CHOICES)):
        if value not in choices:
            raise fail(console, f"{where(key)} {value!r}: use one of {', '.join(choices)}")
    if spec.model is None:
        for key in ("api_base", "api_key_env", "scripts_dir", "max_turns", *BUDGET_KEYS,
                    *GENERATION_KEYS):
            if getattr(spec, key):
                raise fail(console, f"{where(key)} is for the model: add --model "
                           f"provider/model or drop {where(key)}")
    for folder in spec.scripts_dir:
        if not folder.is_dir():
            raise fail(console, f"{where('scripts_dir')} {folder}: no such folder (give the "
                       "folder that holds the scripted models' .toml files)")
    if spec.repair_template is not None and spec.repair_attempts < 1:
        raise fail(console, f"{where('repair_template')} is used only with "
                   "--repair-attempts N (N ≥ 1): add it or drop the template")


def _load_tasks(spec: RunSpec, checked: CheckedRun, console: Console
                ) -> tuple[list[Any], list[str]]:
    """The tasks to run (invalid ones kept: their trials end as task_invalid) and the
    problems that stop the run before it starts."""
    from sandlot.job_tasks import DatasetRequest, gather_tasks
    from sandlot.tasks import check_tasks
    from sandlot.tasks.overrides import ResourceOverrides

    gathered = gather_tasks(spec.tasks, DatasetRequest(spec.dataset, spec.registry_path,
                                                       spec.registry_url),
                            checked.cache, spec.include, spec.exclude, spec.n_tasks, console)
    problems: list[str] = list(gathered.problems)  # preflight: all said at once
    if not gathered.tasks and not problems:
        where = ", ".join([*(str(f) for f in spec.tasks), *spec.dataset])
        problems.append(f"no tasks selected in {where}: a task is a folder holding "
                        "task.toml (check --include/--exclude)")
    need_solution = spec.agent == "oracle"
    paths = [t.folder for t in gathered.tasks if t.folder is not None]
    found = check_tasks(paths, need_solution=need_solution, sandbox=spec.sandbox)
    print_warning_groups(console, [p for p in found if p.severity == "warning"])
    overrides = ResourceOverrides(spec.override_cpus, spec.override_memory_mb,
                                  spec.override_storage_mb)
    tasks = [overrides.apply(t.load(need_solution=need_solution, sandbox=spec.sandbox,
                                    build_args=checked.build_args))
             for t in gathered.tasks]
    invalid = [t for t in tasks if not t.is_valid]
    if invalid:
        print_problems(console, [p for p in found if p.severity == "error"])
        for lost in gathered.tasks:
            if lost.problem is not None:
                console.print(f"[red]error[/] {escape(lost.name)}: {escape(lost.problem)}",
                              soft_wrap=True)
        console.print(f"[yellow]{len(invalid)} of {len(tasks)} tasks cannot run: their "
                      "trials end as task_invalid, the others run (see `sandlot tasks "
                      "check`)[/]")
    return tasks, problems


def _make_backend(spec: RunSpec, checked: CheckedRun, problems: list[str],
                  console: Console) -> Any:
    """The sandbox backend, after the model check; with any problem found so far, every
    one is said and the run does not start."""
    from sandlot.errors import SandboxError
    from sandlot.sandbox import create_backend

    backend = None
    try:
        options = _backend_options(spec, checked)
        if spec.ray in (None, "local"):  # where this machine runs the sandboxes: check it
            backend = create_backend(
                spec.sandbox, checked.cache, **options,  # type: ignore[arg-type]
                notify=lambda line: console.print(f"[yellow]{escape(line)}[/]"))
    except ValueError as exc:
        raise fail(console, str(exc)) from exc
    except SandboxError as exc:
        problems.append(f"sandbox {spec.sandbox}: {exc}")
    notes: list[str] = []
    model_checked = checked.route is not None and not spec.no_preflight
    if model_checked:
        from sandlot.preflight import check_model

        found = asyncio.run(check_model(checked.route))
        problems += found.problems
        notes += found.notes
    if problems or (backend is None and spec.ray in (None, "local")):
        raise fail_preflight(console, problems, model_checked)
    for note in notes:
        console.print(f"[dim]{escape(note)}[/]", soft_wrap=True)
    return backend


def _backend_options(spec: RunSpec, checked: CheckedRun) -> dict[str, object]:
    """create_backend's settings (a cluster's nodes get them too). Raises ValueError."""
    from sandlot.sandbox import parse_image_overrides

    return {"force_build": spec.force_build,
            "base_image_overrides": parse_image_overrides(spec.base_image_override),
            "image_policy": spec.image_policy, "insecure_registries": spec.insecure_registry,
            "image_cache_max_bytes": int(spec.image_cache_max_gb * 1e9) or None,
            "build_args": checked.build_args}


def _job_config(spec: RunSpec, checked: CheckedRun, tasks: list[Any]) -> Any:
    from sandlot.models import JobConfig
    from sandlot.tasks.loader import hash_tree

    return JobConfig(
        job_name=spec.job_name or datetime.now().strftime("%Y-%m-%d__%H-%M-%S"),
        agent_version=spec.agent_version,
        tasks_dir=str(spec.tasks[0].resolve()) if spec.tasks else None,
        task_names=[t.name for t in tasks], agent=spec.agent,
        task_paths={t.name: str(t.path) for t in tasks},
        task_sources={t.name: t.source for t in tasks if t.source is not None},
        model=spec.model, n_attempts=spec.n_attempts, n_concurrent=spec.n_concurrent,
        max_retries=spec.max_retries, timeout_multiplier=spec.timeout_multiplier,
        agent_network=spec.agent_network, override_cpus=spec.override_cpus,
        override_memory_mb=spec.override_memory_mb,
        override_storage_mb=spec.override_storage_mb,
        allow_private_network=spec.allow_private_network,
        api_base=spec.api_base, max_turns=spec.max_turns,
        repair_attempts=spec.repair_attempts, repair_template=checked.template_text,
        redact_env=_redact_names(spec.redact_env), sandbox=spec.sandbox, ray=spec.ray,
        max_copy_out_mb=spec.max_copy_out_mb, jobs_dir=str(checked.jobs_root),
        verifier_mode=spec.verifier_mode,
        max_trial_tokens=spec.max_trial_tokens, max_trial_cost_usd=spec.max_trial_cost_usd,
        max_job_tokens=spec.max_job_tokens, max_job_cost_usd=spec.max_job_cost_usd,
        generation=checked.generation.as_dict(),
        task_digests={t.name: hash_tree(t.path) for t in tasks if t.path.is_dir()},
    )


def _start(spec: RunSpec, checked: CheckedRun, config: Any, tasks: list[Any],
           backend: Any, console: Console) -> tuple[Any, Any]:
    """The live display and the job's coroutine (not yet awaited)."""
    from sandlot.display import make_display
    from sandlot.job import run_job

    gateway = None
    make_executor = None
    if spec.ray is not None:
        make_executor = _ray_executor(spec, checked, tasks, console)
    elif checked.route is not None:
        from sandlot.gateway.budget import Budget
        from sandlot.gateway.routing import Router
        from sandlot.gateway.server import Gateway

        gateway = Gateway(Router(checked.route),
                          job_budget=Budget(spec.max_job_cost_usd, spec.max_job_tokens),
                          generation=checked.generation)
    masked = (*(f.resolve() for f in spec.tasks), checked.jobs_root, checked.cache)
    n_planned = len(tasks) * spec.n_attempts
    n_label = spec.n_concurrent if spec.ray is None or "n_concurrent" in \
        spec.model_fields_set else "every node's slots"
    console.print(f"[bold]sandlot[/] job [cyan]{escape(config.job_name)}[/]: {len(tasks)} "
                  f"tasks × {spec.n_attempts} attempts, agent {escape(str(spec.agent))}, "
                  f"sandbox {spec.sandbox}{_on_ray(spec)}, -n {n_label} → "
                  f"{checked.jobs_root / config.job_name}")
    display = make_display(console, job_name=config.job_name, agent=spec.agent,
                           model=spec.model, sandbox=spec.sandbox, n_planned=n_planned,
                           quiet=spec.quiet, json_events=spec.json_events,
                           heartbeat_sec=spec.heartbeat_sec,
                           stall_after_sec=spec.stall_after_sec)
    kept = _resolved_for_job(spec, config, checked, tasks)
    coro = run_job(config, tasks, backend, masked, display, gateway=gateway,
                   cache_dir=checked.cache, agents=checked.catalog, run_file=kept,
                   make_executor=make_executor)
    return display, coro


def _on_ray(spec: RunSpec) -> str:
    return "" if spec.ray is None else f" on Ray ({spec.ray})"


def _ray_executor(spec: RunSpec, checked: CheckedRun, tasks: list[Any],
                  console: Console) -> Any:
    """run_job's `make_executor` for --ray: the nodes get the job's settings, the
    backend's, the agent's and the model's route with the provider's key."""
    import dataclasses
    import os

    from sandlot.executors.cluster_spend import ClusterSpend
    from sandlot.executors.node import BackendSpec, ModelRoute, NodeSpec
    from sandlot.executors.ray_cluster import TrialNeeds, ray_executor_factory
    from sandlot.gateway.budget import Budget
    from sandlot.gateway.routing import key_env

    route, spend = None, None
    if checked.route is not None:
        name = key_env(checked.route)
        keys = {name: os.environ[name]} if name and name in os.environ else {}
        budget = Budget(spec.max_job_cost_usd, spec.max_job_tokens)
        route = ModelRoute(checked.route, keys, checked.generation, budget)
        spend = ClusterSpend(budget, checked.route.model, name)
    backend = BackendSpec(spec.sandbox, _backend_options(spec, checked))

    def node(settings: Any) -> NodeSpec:
        return NodeSpec(settings=dataclasses.replace(settings, gateway=None,
                                                     machinery_cache=None),
                        backend=backend, agent=str(spec.agent), model=spec.model,
                        catalog=checked.catalog, model_route=route,
                        work_dir=checked.cache / "cluster")

    environments = [t.config.environment for t in tasks]
    needs = TrialNeeds(cpus=max((e.cpus or 1.0 for e in environments), default=1.0),
                       memory_mb=max((e.memory_mb or 0 for e in environments), default=0))
    cap = spec.n_concurrent if "n_concurrent" in spec.model_fields_set else 1_000_000
    return ray_executor_factory(
        str(spec.ray), node=node, cap=cap, needs=needs, spend=spend,
        notify=lambda line: console.print(f"[yellow]{escape(line)}[/]"),
        trial_identity={"agent": str(spec.agent), "model": spec.model,
                        "sandbox": spec.sandbox})


def _resolved_for_job(spec: RunSpec, config: Any, checked: CheckedRun,
                      tasks: list[Any]) -> str:
    """job.yaml: the settings that reproduce this job, with its name, absolute folders and
    each dataset's version pinned, so `--config` on it resumes this very job."""
    versions = {t.source.dataset: t.source.version for t in tasks if t.source is not None}
    pinned = [ref if "@" in ref or ref not in versions else f"{ref}@{versions[ref]}"
              for ref in spec.dataset]
    kept = spec.model_copy(update={
        "job_name": config.job_name, "jobs_dir": checked.jobs_root, "cache_dir": checked.cache,
        "tasks": [f.resolve() for f in spec.tasks], "dataset": pinned})
    return dump_resolved(kept)


def fail_preflight(console: Console, problems: list[str], model_checked: bool) -> typer.Exit:
    """Every problem found before the run, one line each; nothing was started or written."""
    for problem in problems:
        console.print(f"[red]error:[/] {escape(problem)}", soft_wrap=True)
    skip = "; --no-preflight skips the model check" if model_checked else ""
    console.print(f"[red]preflight failed[/] ({len(problems)} "
                  f"problem{'s' if len(problems) != 1 else ''}): nothing was started{skip}",
                  soft_wrap=True)
    return typer.Exit(ExitCode.PREFLIGHT)


def _first_os_error(exc: BaseException) -> OSError | None:
    """The OSError inside `exc` (itself, or within an exception group from the job)."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _first_os_error(inner)) is not None:
                return found
    return None


def _run_verdict(summary, limit: float) -> tuple[ExitCode, str | None]:  # type: ignore[no-untyped-def]
    """The exit code of a job that ran, and the line that says why when it is not 0:
    the provider stopped it (5), its budget did (6), or errors, not the agent's failures,
    decided most of it (4)."""
    from sandlot.report.summary import error_rate

    if summary.stopped and summary.stopped_by == "job_budget":
        not_started = summary.n_trials_planned - summary.n_trials
        return ExitCode.BUDGET_REACHED, (
            f"[yellow]stopped:[/] {escape(summary.stopped)}; {summary.n_cancelled} running "
            f"trials were stopped and {not_started} were not started. Raise "
            "--max-job-tokens / --max-job-cost-usd and run the same command to resume")
    if summary.stopped:
        not_started = summary.n_trials_planned - summary.n_trials
        return ExitCode.PROVIDER_FAILED, (
            f"[red]stopped:[/] {escape(summary.stopped)}; "
            f"{summary.errors_by_kind.get('provider_error', 0)} trials ended as "
            f"provider_error and {not_started} were not started. Fix it, then run "
            "the same command to resume")
    rate = error_rate(summary)
    if rate is not None and rate > limit:
        return ExitCode.TOO_MANY_ERRORS, (
            f"[red]too many errors:[/] {summary.n_errored} of {summary.n_trials} "
            f"trials errored ({rate:.0%} > --max-error-rate {limit:g}): these "
            "figures are not a benchmark result; see errors by kind above")
    return ExitCode.OK, None


def _print_json_result(job_dir: Path, code: ExitCode, summary) -> None:  # type: ignore[no-untyped-def]
    """`run --json`: the end of the run as one object, for scripts; an interrupted job's
    summary is read back from its summary.json."""
    import json

    from sandlot.models import JobSummary

    if summary is None:
        try:
            summary = JobSummary.model_validate_json((job_dir / "summary.json").read_text())
        except (OSError, ValueError):
            summary = None
    from sandlot.report.summary import error_rate

    typer.echo(json.dumps({
        "job_dir": str(job_dir), "exit_code": int(code), "exit_reason": code.name.lower(),
        "error_rate": None if summary is None else error_rate(summary),
        "summary": None if summary is None else summary.model_dump(mode="json"),
    }))


def _redact_names(names: list[str] | None) -> list[str]:
    """The marked names; the usual provider key variables are always marked too."""
    from sandlot.redact import marked_names

    defaults = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY"]
    return marked_names([*(names or []), *defaults])


def _read_template(console: Console, path: Path, where: str) -> str:
    """Read and try a repair template now, so a typo fails before any trial runs."""
    from sandlot.feedback import render_feedback
    from sandlot.verify import Verdict

    try:
        text = path.read_text()
        render_feedback(text, Verdict(0.0, {}, 0.0, 1, output="x"), 2, 3, [])
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise fail(console, f"{where} {path}: {exc}") from exc
    return text


def _scripts_dirs(given: list[Path], tasks_dir: Path | None) -> list[Path]:
    import os

    dirs = list(given)
    if env := os.environ.get("SANDLOT_SCRIPTS_DIR"):
        dirs += [Path(p) for p in env.split(os.pathsep) if p]
    if tasks_dir is not None:
        dirs += [tasks_dir / "scripted", tasks_dir.parent / "scripted"]
        if (tasks_dir / "task.toml").is_file():  # one task: beside its folder of tasks too
            dirs.append(tasks_dir.parent.parent / "scripted")
    return [d.resolve() for d in dirs]


def _route_config(console: Console, spec: RunSpec, scripts_dirs: list[Path]):  # type: ignore[no-untyped-def]
    """The job's model route, checked now so a bad --model fails before anything else."""
    from sandlot.gateway.routing import RouteConfig, Router, RoutingError
    from sandlot.gateway.scripted import ScriptError

    assert spec.model is not None
    route = RouteConfig(model=spec.model, api_base=spec.api_base, api_key_env=spec.api_key_env,
                        scripts_dirs=tuple(scripts_dirs))
    try:
        Router(route)
    except (RoutingError, ScriptError) as exc:
        raise fail(console, str(exc)) from exc
    return route


def _has_price(route: Any) -> bool:
    """Whether the gateway can count the model's cost (LiteLLM's price table, or the
    scripted model's own price)."""
    from sandlot.gateway.prices import PriceTable
    from sandlot.gateway.routing import Router

    return PriceTable(extra=Router(route).extra_prices()).entry(route.model) is not None


def _run_cancellable(coro):  # type: ignore[no-untyped-def]
    """asyncio.run, with SIGTERM treated like Ctrl-C (cancel, clean up, then exit)."""

    async def main():  # type: ignore[no-untyped-def]
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await coro
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None

    return asyncio.run(main())
