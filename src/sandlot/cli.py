"""The `sandlot` command: parses flags, builds a JobConfig, hands it to the job runner."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from sandlot import cli_datasets, cli_report
from sandlot.cli_common import fail
from sandlot.exit_codes import ExitCode, run_epilog
from sandlot.paths import default_cache_dir
from sandlot.terminal import make_console

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Benchmark AI coding agents on Harbor-layout tasks in isolated sandboxes.")
tasks_app = typer.Typer(no_args_is_help=True, help="Inspect and validate task folders.")
sandbox_app = typer.Typer(no_args_is_help=True, help="Manage sandboxes and their leftovers.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")
cli_report.register(app)
cli_datasets.register(app)
agents_app = typer.Typer(no_args_is_help=True, help="The agents sandlot can run.")
app.add_typer(agents_app, name="agents")

JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def _first_os_error(exc: BaseException) -> OSError | None:
    """The OSError inside `exc` (itself, or within an exception group from the job)."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _first_os_error(inner)) is not None:
                return found
    return None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte...
        return False
EXIT_INTERRUPTED = ExitCode.INTERRUPTED


def _print_problems(console: Console, problems: list) -> None:  # type: ignore[type-arg]
    for p in problems:
        color = "red" if p.severity == "error" else "yellow"
        field = " " + escape(f"[{p.field}]") if p.field else ""
        console.print(f"[{color}]{p.severity}[/] {escape(p.task)}/{escape(p.file)}{field}: "
                      f"{escape(p.message)}\n    [dim]fix:[/] {escape(p.fix)}", soft_wrap=True)


def _print_warning_groups(console: Console, warnings: list, limit: int = 10) -> None:  # type: ignore[type-arg]
    """One line per kind of warning, not per task: a dataset's own key in 500 tasks is
    one line saying so, while a typo in one task still stands out."""
    groups: dict[tuple[str, str, str], list] = {}  # type: ignore[type-arg]
    for p in warnings:
        key = re.sub(r" \(line \d+\)$", "", p.field or "")
        groups.setdefault((p.file, key, p.message), []).append(p)
    for n, ((file, _key, message), items) in enumerate(groups.items()):
        if n == limit:
            console.print(f"[yellow]… and {len(groups) - limit} more kinds of warning "
                          "(see `sandlot tasks check`)[/]")
            return
        first = items[0]
        field = f": {first.field}" if first.field else ""
        more = f" (and {len(items) - 1} more tasks)" if len(items) > 1 else ""
        console.print(escape(f"warning: {first.task}/{file}{field}: {message}{more} "
                             f"(fix: {first.fix})"), style="yellow", soft_wrap=True)


@tasks_app.command("check")
def tasks_check(
    tasks_dir: Annotated[Path, typer.Argument(help="A task folder or a folder of tasks.")],
    no_solution: Annotated[bool, typer.Option(
        "--no-solution-ok",
        help="A missing solution/solve.sh is a warning, not an error.")] = False,
    sandbox: Annotated[str, typer.Option(
        help="Backend to check for (docker accepts compose tasks and any Dockerfile).")
    ] = "local",
) -> None:
    """Validate every task and list each problem with its file, field and fix."""
    from sandlot.tasks import check_tasks, discover_tasks

    console = make_console()
    if not _is_dir(tasks_dir):
        raise fail(console, f"{str(tasks_dir)[:300]} is not a folder")
    paths = discover_tasks(tasks_dir)
    if not paths:
        raise fail(console, f"no tasks in {tasks_dir}: a task is a folder holding task.toml")
    problems = check_tasks(paths, need_solution=not no_solution, sandbox=sandbox,
                           trust=True)
    _print_problems(console, problems)
    errors = [p for p in problems if p.severity == "error"]
    bad = len({p.task for p in errors})
    console.print(f"{len(paths)} tasks checked: {len(paths) - bad} ok, {bad} with errors, "
                  f"{len(problems) - len(errors)} warnings")
    if errors:
        raise typer.Exit(1)


@tasks_app.command("init")
def tasks_init(
    name: Annotated[str, typer.Argument(help="NAME or ORG/NAME (NAME names the folder; "
                                        "ORG/NAME also becomes [task] name).")],
    tasks_dir: Annotated[Path, typer.Option(
        "--tasks-dir", "-p", help="Where the new task folder goes.")] = Path("."),
    description: Annotated[str, typer.Option(help="[task] description.")] = "",
    author: Annotated[list[str] | None, typer.Option(
        help="'Name <email>' or 'Name' for [task] authors (repeatable).")] = None,
) -> None:
    """A new task folder (schema 1.4) that passes `tasks check` and its oracle as made."""
    from sandlot.tasks.scaffold import ScaffoldError, TaskScaffold, parse_author, write_scaffold

    console = make_console()
    scaffold = TaskScaffold(name, description,
                            tuple(parse_author(a) for a in author or []))
    try:
        folder = write_scaffold(scaffold, tasks_dir)
    except ScaffoldError as exc:
        raise fail(console, str(exc)) from exc
    except OSError as exc:
        raise fail(console, f"cannot write the task under {tasks_dir}: "
                    f"{exc.strerror or exc}") from exc
    console.print(f"made {escape(str(folder))}: edit instruction.md, environment/Dockerfile, "
                  "solution/solve.sh and tests/test.sh; check it with `sandlot tasks check "
                  f"{escape(str(folder))}` and `sandlot run {escape(str(folder))} --agent "
                  "oracle`", soft_wrap=True)


@agents_app.command("list")
def agents_list(
    cache_dir: Annotated[Path | None, typer.Option(help="sandlot's cache folder.")] = None,
    agents_file: Annotated[Path | None, typer.Option(
        help="A TOML file of extra ACP agents, listed too.")] = None,
) -> None:
    """The agents sandlot can run, their pinned versions and whether they are installed."""
    from rich.table import Table

    from sandlot.agents.acp_registry import AgentCatalog, AgentSpecError

    try:
        catalog = AgentCatalog.load(agents_file)
    except AgentSpecError as exc:
        raise fail(make_console(), str(exc)) from exc

    table = Table(title="Agents", title_justify="left")
    for col in ("name", "kind", "version", "installed", "needs", "note"):
        table.add_column(col)
    builtin = [("oracle", "runs solution/solve.sh"), ("nop", "changes nothing"),
               ("builtin", "sandlot's tool-calling loop (needs --model)"),
               ("pi", "Pi coding agent over RPC (npm, needs --model)")]
    for name, note in builtin:
        table.add_row(name, "built-in", "", "", "", note)
    for row in catalog.rows(cache_dir or default_cache_dir()):
        installed = {True: "yes", False: "no", None: "—"}[row["installed"]]  # type: ignore[index]
        needs = row["needs"]
        table.add_row(str(row["name"]), "acp", str(row["version"] or ""), installed,
                      ", ".join(needs) if isinstance(needs, list | tuple) else str(needs or ""),
                      str(row["note"] or ""))
    make_console().print(table)


@sandbox_app.command("cleanup")
def sandbox_cleanup(
    cache_dir: Annotated[Path | None, typer.Option(help="sandlot's cache folder.")] = None,
) -> None:
    """Remove scratch folders and cgroups left by sandlot runs that were killed."""
    from sandlot.sandbox.local_backend import LocalBackend

    removed = asyncio.run(LocalBackend(cache_dir or default_cache_dir()).sweep())
    from sandlot.sandbox.docker_backend import sweep_docker_leftovers

    removed += asyncio.run(sweep_docker_leftovers())
    make_console().print(f"removed {removed} leftovers")


@app.command()
def clean(
    cache_dir: Annotated[Path | None, typer.Option(help="sandlot's cache folder.")] = None,
    keep_images: Annotated[bool, typer.Option(
        "--keep-images", help="Keep the task images: those pulled for the local sandbox and "
        "those sandlot built in the container engine."
    )] = False,
    images: Annotated[bool, typer.Option(
        "--images", help="Remove only the images pulled for the local sandbox "
        "(<cache>/images); keep everything else."
    )] = False,
) -> None:
    """Empty sandlot's cache: installed agents, pulled images, cached layers, scratch left
    by killed runs, and (unless --keep-images) the task images sandlot built. Refused while
    a run uses it."""
    from sandlot.cache_clean import CacheInUseError, clean_cache

    console = make_console()
    if images and keep_images:
        raise fail(console, "--images and --keep-images contradict each other: choose one")
    folder = cache_dir or default_cache_dir()
    try:
        report = asyncio.run(clean_cache(folder, images=not keep_images, only_images=images))
    except CacheInUseError as exc:
        raise fail(console, str(exc)) from exc
    console.print(f"removed {report.removed_entries} entries "
                  f"({report.removed_bytes / 2**20:.0f} MB) from {folder}"
                  + (f" and {report.engine_items} from the container engine"
                     if report.engine_items else ""))
    if report.left:
        for path in report.left:
            console.print(f"[red]left:[/] {escape(path)} (something is mounted inside; "
                          "unmount it, then run `sandlot clean` again)")
        raise typer.Exit(1)


def _fail_preflight(console: Console, problems: list[str], model_checked: bool) -> typer.Exit:
    """Every problem found before the run, one line each; nothing was started or written."""
    for problem in problems:
        console.print(f"[red]error:[/] {escape(problem)}", soft_wrap=True)
    skip = "; --no-preflight skips the model check" if model_checked else ""
    console.print(f"[red]preflight failed[/] ({len(problems)} "
                  f"problem{'s' if len(problems) != 1 else ''}): nothing was started{skip}",
                  soft_wrap=True)
    return typer.Exit(ExitCode.PREFLIGHT)


@app.command(epilog=run_epilog())
def run(
    agent: Annotated[str, typer.Option(
        "--agent", "-a", help="Agent name (see `sandlot agents list`), acp:\"<command>\" or "
        "module:Class.")],
    tasks_dirs: Annotated[list[Path] | None, typer.Argument(
        metavar="TASKS", help="Task folders or folders of tasks (and/or -d).")] = None,
    redact_env: Annotated[list[str] | None, typer.Option(
        help="Env var whose value is a secret: replaced by [REDACTED:NAME] in everything "
        "under jobs/ (repeatable; also $SANDLOT_REDACT_ENV=A,B).")] = None,
    agents_file: Annotated[Path | None, typer.Option(
        help="A TOML file of extra ACP agents (name -> command, install, env).")] = None,
    agent_version: Annotated[str | None, typer.Option(
        help="Version of an agent sandlot installs itself (e.g. pi).")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="provider/model, e.g. openai/gpt-4.1, anthropic/claude-sonnet-4-5,"
        " scripted/solver.")] = None,
    api_base: Annotated[str | None, typer.Option(
        help="Provider base URL (vllm/..., a proxy, a self-hosted endpoint).")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        help="Env var holding the provider key (default: the provider's usual one).")] = None,
    scripts_dir: Annotated[list[Path] | None, typer.Option(
        help="Where scripted models live; also searched: $SANDLOT_SCRIPTS_DIR, "
        "<tasks>/scripted, <tasks>/../scripted, the built-ins.")] = None,
    max_turns: Annotated[int | None, typer.Option(
        min=1, help="Model turns per prompt for agents that honour it (builtin).")] = None,
    repair_attempts: Annotated[int, typer.Option(
        min=0, help="After the agent finishes, verify and send failing feedback back into "
        "its session up to N times.")] = 0,
    repair_template: Annotated[Path | None, typer.Option(
        help="File with the repair feedback message ({feedback}, {reward}, {attempt}, "
        "{max_attempts}); a task's [agent] repair_feedback_template wins.")] = None,
    n_concurrent: Annotated[int, typer.Option("-n", "--n-concurrent", min=1,
                                              help="Trials running at once.")] = 1,
    n_attempts: Annotated[int, typer.Option("-k", "--n-attempts", min=1,
                                            help="Trials per task (pass@k).")] = 1,
    jobs_dir: Annotated[Path, typer.Option(help="Where job folders go.")] = Path("jobs"),
    job_name: Annotated[str | None, typer.Option(
        help="Job folder name; reuse it to resume. Default: a timestamp.")] = None,
    max_retries: Annotated[int, typer.Option(min=0,
                                             help="Extra tries for infrastructure errors.")] = 0,
    dataset: Annotated[list[str] | None, typer.Option(
        "--dataset", "-d", help="NAME or NAME@VERSION of a dataset in a registry: its "
        "tasks are fetched into the cache at their recorded commits and run (repeatable; "
        "no version: the newest). See `sandlot datasets list`.")] = None,
    registry_path: Annotated[list[Path] | None, typer.Option(
        help="A registry file (Harbor's registry.json format) to look datasets up in; "
        "consulted before any --registry-url (repeatable; the first that has a name "
        "answers).")] = None,
    registry_url: Annotated[list[str] | None, typer.Option(
        help="A registry's URL (repeatable). Default, when neither this nor "
        "--registry-path is given: Harbor's public registry.")] = None,
    include: Annotated[list[str] | None, typer.Option(
        "--include", "-i", "--task-name", help="Glob on task names (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude", "-x", "--exclude-task-name",
        help="Glob on task names to skip (repeatable).")] = None,
    n_tasks: Annotated[int | None, typer.Option(
        "--n-tasks", "-l", min=1, help="Run only the first N tasks (folders' first, then "
        "datasets'; only those are fetched).")] = None,
    timeout_multiplier: Annotated[float, typer.Option(
        "--timeout-multiplier", "--override-timeout-multiplier",
        min=0.001, help="Scales every timeout of every task (recorded; a resume with "
        "another value is refused).")] = 1.0,
    override_cpus: Annotated[float | None, typer.Option(
        min=0.01, help="CPUs for every task's sandbox, instead of [environment] cpus.")] = None,
    override_memory_mb: Annotated[int | None, typer.Option(
        min=16, help="Memory limit in MB for every task, instead of [environment] "
        "memory_mb.")] = None,
    override_storage_mb: Annotated[int | None, typer.Option(
        min=16, help="Disk quota in MB for every task, instead of [environment] "
        "storage_mb.")] = None,
    agent_network: Annotated[str | None, typer.Option(
        help="Override the agent phase network: none or public.")] = None,
    allow_private_network: Annotated[bool, typer.Option(
        "--allow-private-network",
        help="Let tasks with network reach private ranges (10/8, 172.16/12, 192.168/16: a "
        "mirror on the LAN). The host itself and 169.254.169.254 stay unreachable.")] = False,
    sandbox: Annotated[str, typer.Option(help="Sandbox backend: local or docker.")] = "local",
    max_copy_out_mb: Annotated[int, typer.Option(
        min=1, help="The most MB of what the agent left (workspace diff, /logs/agent, "
        "/logs/verifier) copied into each trial's folder; the rest is listed as left "
        "out.")] = 100,
    verifier_mode: Annotated[str, typer.Option(
        help="Where each task's tests run: task (as its task.toml says: in the agent's "
        "sandbox, or environment_mode = \"separate\") or separate (every task: a fresh "
        "sandbox of its environment holding only the agent's working directory and "
        "/logs/artifacts).")] = "task",
    force_build: Annotated[bool, typer.Option(
        "--force-build",
        help="Rebuild task images instead of reusing cached ones (docker backend).")] = False,
    base_image_override: Annotated[list[str] | None, typer.Option(
        "--base-image-override",
        help="OLD=NEW: build FROM NEW wherever a Dockerfile or compose file names OLD "
        "(repeatable).")] = None,
    build_arg: Annotated[list[str] | None, typer.Option(
        "--build-arg", help="NAME=VALUE for the Dockerfiles' ARG NAME (repeatable; a bare "
        "NAME takes its value from this environment), as docker build's.")] = None,
    image_policy: Annotated[str, typer.Option(
        envvar="SANDLOT_IMAGE_POLICY",
        help="Local sandbox: auto (pull the task's image; if it cannot be pulled, run on "
        "this host's root and label the result host-fallback), strict (such a task fails "
        "instead), host (never pull: every task on this host's root).")] = "auto",
    image_cache_max_gb: Annotated[float, typer.Option(
        min=0, envvar="SANDLOT_IMAGE_CACHE_MAX_GB",
        help="Local sandbox: the size cap of the pulled-image cache, in GB; over it, the "
        "images used longest ago that no running job uses are evicted. 0: no cap.")] = 20.0,
    insecure_registry: Annotated[list[str] | None, typer.Option(
        "--insecure-registry",
        help="HOST[:PORT] of a registry spoken to over plain HTTP (one on 127.0.0.0/8 "
        "always is; repeatable).")] = None,
    cache_dir: Annotated[Path | None, typer.Option(
        help="Cache for build layers and scratch space. Default: ~/.cache/sandlot.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the final tables.")] = False,
    json_events: Annotated[bool, typer.Option(
        "--json-events", help="One JSON object per event on stdout, for other tools; the "
        "human output goes to stderr.")] = False,
    json_summary: Annotated[bool, typer.Option(
        "--json", help="At the end, one JSON object on stdout: the job's summary "
        "(summary.json) with job_dir, exit_code and exit_reason; the human output goes to "
        "stderr.")] = False,
    heartbeat_sec: Annotated[float, typer.Option(
        min=0, help="Without a terminal (and with --json-events): a heartbeat line with "
        "the running totals every N seconds; 0: none.")] = 30.0,
    stall_after_sec: Annotated[float, typer.Option(
        min=1, help="Warn when a running trial's counters (phase, tool calls, tokens) have "
        "not moved for this long.")] = 300.0,
    no_preflight: Annotated[bool, typer.Option(
        "--no-preflight", help="Skip the model check before the run (the credential and "
        "one small real request to the provider).")] = False,
    max_error_rate: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Exit with code 4 when more than this share of the trials "
        "ended in errors (not failures): such a job's figures are not a benchmark "
        "result.")] = 0.5,
) -> None:
    """Run every task with an agent; resume a job by running it again with its --job-name."""
    from sandlot.agents import UnknownAgentError, create_agent
    from sandlot.errors import SandboxError
    from sandlot.job import ConfigMismatchError, JobSetupError, run_job
    from sandlot.models import JobConfig
    from sandlot.report.table import end_of_run
    from sandlot.sandbox import create_backend, parse_build_args, parse_image_overrides
    from sandlot.tasks import check_tasks
    from sandlot.tasks.loader import hash_tree
    from sandlot.tasks.overrides import ResourceOverrides

    console = make_console(stderr=json_events or json_summary)  # stdout is for the JSON
    folders = list(tasks_dirs or [])
    if not folders and not dataset:
        raise fail(console, "no tasks named: give a task folder (or a folder of tasks), "
                    "or a dataset with -d NAME[@VERSION]")
    for folder in folders:
        if not _is_dir(folder):
            raise fail(console, f"{str(folder)[:300]} is not a folder")
    if agent_network not in (None, "none", "public"):
        raise fail(console, f"--agent-network must be none or public, not {agent_network!r}")
    from sandlot.agents.acp_registry import AgentCatalog

    try:
        catalog = AgentCatalog.load(agents_file)
        create_agent(agent, model, catalog)
    except (UnknownAgentError, ValueError) as exc:
        raise fail(console, str(exc)) from exc
    try:
        build_args = parse_build_args(build_arg)
    except ValueError as exc:
        raise fail(console, str(exc)) from exc
    template_text = _read_template(console, repair_template) if repair_template else None
    _check_flags(console, sandbox=sandbox, image_policy=image_policy,
                 verifier_mode=verifier_mode, model=model,
                 needs_model={"--api-base": api_base, "--api-key-env": api_key_env,
                              "--scripts-dir": scripts_dir, "--max-turns": max_turns},
                 scripts_dir=scripts_dir,
                 repair_template=repair_template, repair_attempts=repair_attempts)
    cache = (cache_dir or default_cache_dir()).resolve()
    jobs_root = jobs_dir.resolve()
    for label, folder in (("--jobs-dir", jobs_root), ("--cache-dir", cache)):
        if folder.exists() and not folder.is_dir():
            raise fail(console, f"{label} {folder} is a file, not a folder")
    if job_name is not None and not JOB_NAME.fullmatch(job_name):
        raise fail(console, f"--job-name {job_name[:80]!r}: use letters, digits, '.', '_' "
                    "and '-' (up to 200 characters, not starting with '.' or '-'); it names "
                    "a folder inside --jobs-dir")
    route = None
    if model is not None:
        route = _route_config(console, model, api_base, api_key_env,
                              _scripts_dirs(scripts_dir, folders[0] if folders else None))
    elif getattr(create_agent(agent, None, catalog), "needs_gateway", False):
        raise fail(console, f"agent {agent!r} calls a model: pass --model provider/model "
                    "(e.g. scripted/solver for a dry run, openai/gpt-4.1)")

    from sandlot.job_tasks import DatasetRequest, gather_tasks

    gathered = gather_tasks(folders, DatasetRequest(dataset or [], registry_path or [],
                                                    registry_url or []),
                            cache, include, exclude, n_tasks, console)
    problems: list[str] = list(gathered.problems)  # preflight: all said at once
    if not gathered.tasks and not problems:
        where = ", ".join(str(f) for f in folders) + (", " if folders and dataset else "") + \
            ", ".join(dataset or [])
        problems.append(f"no tasks selected in {where}: a task is a folder holding "
                        "task.toml (check --include/--exclude)")
    paths = [t.folder for t in gathered.tasks if t.folder is not None]
    problems_in_tasks = check_tasks(paths, need_solution=agent == "oracle", sandbox=sandbox)
    _print_warning_groups(console, [p for p in problems_in_tasks if p.severity == "warning"])
    overrides = ResourceOverrides(override_cpus, override_memory_mb, override_storage_mb)
    tasks = [overrides.apply(t.load(need_solution=agent == "oracle", sandbox=sandbox,
                                    build_args=build_args))
             for t in gathered.tasks]
    invalid = [t for t in tasks if not t.is_valid]
    if invalid:
        _print_problems(console, [p for p in problems_in_tasks if p.severity == "error"])
        for lost in gathered.tasks:
            if lost.problem is not None:
                console.print(f"[red]error[/] {escape(lost.name)}: {escape(lost.problem)}",
                              soft_wrap=True)
        console.print(f"[yellow]{len(invalid)} of {len(tasks)} tasks cannot run: their "
                      "trials end as task_invalid, the others run (see `sandlot tasks "
                      "check`)[/]")
    backend = None
    try:
        backend = create_backend(
            sandbox, cache, force_build=force_build,
            base_image_overrides=parse_image_overrides(base_image_override),
            image_policy=image_policy, insecure_registries=insecure_registry or (),
            image_cache_max_bytes=int(image_cache_max_gb * 1e9) or None,
            build_args=build_args,
            notify=lambda line: console.print(f"[yellow]{escape(line)}[/]"))
    except ValueError as exc:
        raise fail(console, str(exc)) from exc
    except SandboxError as exc:
        problems.append(f"sandbox {sandbox}: {exc}")
    notes: list[str] = []
    if route is not None and not no_preflight:
        from sandlot.preflight import check_model

        found = asyncio.run(check_model(route))
        problems += found.problems
        notes += found.notes
    if problems or backend is None:
        raise _fail_preflight(console, problems, route is not None and not no_preflight)
    for note in notes:
        console.print(f"[dim]{escape(note)}[/]", soft_wrap=True)
    config = JobConfig(
        job_name=job_name or datetime.now().strftime("%Y-%m-%d__%H-%M-%S"),
        agent_version=agent_version,
        tasks_dir=str(folders[0].resolve()) if folders else None,
        task_names=[t.name for t in tasks], agent=agent,
        task_paths={t.name: str(t.path) for t in tasks},
        task_sources={t.name: t.source for t in tasks if t.source is not None},
        model=model, n_attempts=n_attempts, n_concurrent=n_concurrent, max_retries=max_retries,
        timeout_multiplier=timeout_multiplier, agent_network=agent_network,  # type: ignore[arg-type]
        override_cpus=override_cpus, override_memory_mb=override_memory_mb,
        override_storage_mb=override_storage_mb,
        allow_private_network=allow_private_network,
        api_base=api_base, max_turns=max_turns, repair_attempts=repair_attempts,
        repair_template=template_text, redact_env=_redact_names(redact_env),
        sandbox=sandbox, max_copy_out_mb=max_copy_out_mb, jobs_dir=str(jobs_root),
        verifier_mode=verifier_mode,
        task_digests={t.name: hash_tree(t.path) for t in tasks if t.path.is_dir()},
    )
    gateway = None
    if route is not None:
        from sandlot.gateway.routing import Router
        from sandlot.gateway.server import Gateway

        gateway = Gateway(Router(route))
    from sandlot.display import make_display

    masked = (*(f.resolve() for f in folders), jobs_root, cache)
    console.print(f"[bold]sandlot[/] job [cyan]{escape(config.job_name)}[/]: {len(tasks)} tasks "
                  f"× {n_attempts} attempts, agent {escape(agent)}, sandbox {sandbox}, "
                  f"-n {n_concurrent} → {jobs_root / config.job_name}")
    display = make_display(console, job_name=config.job_name, agent=agent, model=model,
                           sandbox=sandbox, n_planned=len(tasks) * n_attempts, quiet=quiet,
                           json_events=json_events, heartbeat_sec=heartbeat_sec,
                           stall_after_sec=stall_after_sec)
    coro = run_job(config, tasks, backend, masked, display, gateway=gateway, cache_dir=cache,
                   agents=catalog)
    try:
        with display:
            summary = _run_cancellable(coro)
    except ConfigMismatchError as exc:
        raise fail(console, str(exc)) from exc
    except JobSetupError as exc:
        raise _fail_preflight(console, [str(exc)], False) from exc
    except (OSError, BaseExceptionGroup) as exc:
        os_error = _first_os_error(exc)
        if os_error is None:
            raise
        where = os_error.filename or jobs_root / config.job_name
        raise fail(console, f"cannot write the job's files ({where}): "
                    f"{os_error.strerror or os_error}; finished trials are kept, free some "
                    "space and run the same command again to resume") from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: running sandboxes were torn down; the partial "
                      f"summary is in {jobs_root / config.job_name / 'summary.json'}; run the "
                      "same command again to resume")
        if json_summary:
            _print_json_result(jobs_root / config.job_name, ExitCode.INTERRUPTED, None)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    from sandlot.job import load_finished

    results = [r for t in tasks for a in range(1, n_attempts + 1)
               if (r := load_finished(jobs_root / config.job_name / f"{t.name}__{a}" /
                                      "result.json")) is not None]
    console.print(end_of_run(summary, results))
    code, verdict = _run_verdict(summary, max_error_rate)
    if verdict:
        console.print(verdict, soft_wrap=True)
    if json_summary:
        _print_json_result(jobs_root / config.job_name, code, summary)
    if code != ExitCode.OK:
        raise typer.Exit(code)


def _run_verdict(summary, limit: float) -> tuple[ExitCode, str | None]:  # type: ignore[no-untyped-def]
    """The exit code of a job that ran, and the line that says why when it is not 0:
    the provider stopped it (5), or errors, not the agent's failures, decided most of it (4)."""
    from sandlot.report.summary import error_rate

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


def _check_flags(console: Console, *, sandbox: str, image_policy: str, verifier_mode: str,
                 model: str | None,
                 needs_model: dict[str, object], scripts_dir: list[Path] | None,
                 repair_template: Path | None, repair_attempts: int) -> None:
    """Flags that are wrong whatever the tasks: said before anything is loaded."""
    from sandlot.sandbox import BACKENDS
    from sandlot.sandbox.local_backend import IMAGE_POLICIES
    from sandlot.separate_verifier import VERIFIER_MODE_CHOICES

    if sandbox not in BACKENDS:
        raise fail(console, f"--sandbox {sandbox!r} is not a backend: use one of "
                    f"{', '.join(BACKENDS)}")
    if image_policy not in IMAGE_POLICIES:
        raise fail(console, f"--image-policy {image_policy!r}: use one of "
                    f"{', '.join(IMAGE_POLICIES)}")
    if verifier_mode not in VERIFIER_MODE_CHOICES:
        raise fail(console, f"--verifier-mode {verifier_mode!r}: use one of "
                    f"{', '.join(VERIFIER_MODE_CHOICES)}")
    if model is None:
        for flag, value in needs_model.items():
            if value:
                raise fail(console, f"{flag} is for the model: add --model provider/model "
                            f"or drop {flag}")
    for folder in scripts_dir or []:
        if not folder.is_dir():
            raise fail(console, f"--scripts-dir {folder}: no such folder (give the folder "
                        "that holds the scripted models' .toml files)")
    if repair_template is not None and repair_attempts < 1:
        raise fail(console, "--repair-template is used only with --repair-attempts N "
                    "(N ≥ 1): add it or drop the template")


def _redact_names(names: list[str] | None) -> list[str]:
    """The marked names; the usual provider key variables are always marked too."""
    from sandlot.redact import marked_names

    defaults = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY"]
    return marked_names([*(names or []), *defaults])


def _read_template(console: Console, path: Path) -> str:
    """Read and try a repair template now, so a typo fails before any trial runs."""
    from sandlot.feedback import render_feedback
    from sandlot.verify import Verdict

    try:
        text = path.read_text()
        render_feedback(text, Verdict(0.0, {}, 0.0, 1, output="x"), 2, 3, [])
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise fail(console, f"--repair-template {path}: {exc}") from exc
    return text


def _scripts_dirs(given: list[Path] | None, tasks_dir: Path | None) -> list[Path]:
    import os

    dirs = list(given or [])
    if env := os.environ.get("SANDLOT_SCRIPTS_DIR"):
        dirs += [Path(p) for p in env.split(os.pathsep) if p]
    if tasks_dir is not None:
        dirs += [tasks_dir / "scripted", tasks_dir.parent / "scripted"]
        if (tasks_dir / "task.toml").is_file():  # one task: beside its folder of tasks too
            dirs.append(tasks_dir.parent.parent / "scripted")
    return [d.resolve() for d in dirs]


def _route_config(console: Console, model: str, api_base: str | None,
                  api_key_env: str | None, scripts_dirs: list[Path]):  # type: ignore[no-untyped-def]
    """The job's model route, checked now so a bad --model fails before anything else."""
    from sandlot.gateway.routing import RouteConfig, Router, RoutingError
    from sandlot.gateway.scripted import ScriptError

    route = RouteConfig(model=model, api_base=api_base, api_key_env=api_key_env,
                        scripts_dirs=tuple(scripts_dirs))
    try:
        Router(route)
    except (RoutingError, ScriptError) as exc:
        raise fail(console, str(exc)) from exc
    return route


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


def main() -> None:
    """The `sandlot` command. A bad command line is one `error:` line naming the flag and
    exit code 2, never click's boxed panel: it must read well in a CI log too."""
    try:
        code = app(prog_name="sandlot", standalone_mode=False)
    except typer.TyperException as exc:  # typer's own click: its UsageError and kin
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `sandlot` or `sandlot tasks`
            exc.show()  # type: ignore[attr-defined]
            sys.exit(ExitCode.USAGE)
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "sandlot"
        message = " ".join(exc.format_message().split())
        make_console(stderr=True).print(
            f"[red]error:[/] {escape(message)} (see `{escape(where)} --help`)", soft_wrap=True)
        sys.exit(ExitCode.USAGE)
    except typer.Abort:
        sys.exit(ExitCode.INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    sys.exit(main())
