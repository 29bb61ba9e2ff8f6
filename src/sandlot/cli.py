"""The `sandlot` command: parses flags, builds a JobConfig, hands it to the job runner."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from sandlot import cli_datasets, cli_report
from sandlot.cli_common import escape, fail, is_dir, print_problems
from sandlot.exit_codes import ExitCode, run_epilog
from sandlot.paths import default_cache_dir
from sandlot.terminal import make_console

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Benchmark AI coding agents on Harbor-layout tasks in isolated sandboxes.")
tasks_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Inspect and validate task folders.")
sandbox_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="Manage sandboxes and their leftovers.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(sandbox_app, name="sandbox")
cli_report.register(app)
cli_datasets.register(app)
agents_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="The agents sandlot can run.")
app.add_typer(agents_app, name="agents")

JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


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
    if not is_dir(tasks_dir):
        raise fail(console, f"{str(tasks_dir)[:300]} is not a folder")
    paths = discover_tasks(tasks_dir)
    if not paths:
        raise fail(console, f"no tasks in {tasks_dir}: a task is a folder holding task.toml")
    problems = check_tasks(paths, need_solution=not no_solution, sandbox=sandbox,
                           trust=True)
    print_problems(console, problems)
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
    import asyncio

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
    import asyncio

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


@app.command(epilog=run_epilog())
def run(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option(
        "--agent", "-a", help="oracle (runs each task's solution/solve.sh), nop (changes "
        "nothing: the tests should fail), builtin (sandlot's tool-calling agent; needs "
        "--model), pi (the Pi coding agent over RPC; needs --model), an ACP agent by name "
        "(see `sandlot agents list`), acp:\"COMMAND\" for any ACP agent, or module:Class "
        "for your own Agent class. Required, here or in --config.")] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="A job file (YAML, TOML or JSON) with one key per flag "
        "(the flag's name with '_' for '-'; TASKS is `tasks`); a flag given here wins over "
        "its key. Relative paths are relative to the file.")] = None,
    tasks_dirs: Annotated[list[Path] | None, typer.Argument(
        metavar="TASKS", help="Task folders or folders of tasks (and/or -d).")] = None,
    redact_env: Annotated[list[str] | None, typer.Option(
        help="Env var whose value is a secret: replaced by [REDACTED:NAME] in everything "
        "under jobs/ (repeatable; also $SANDLOT_REDACT_ENV=A,B).")] = None,
    agents_file: Annotated[Path | None, typer.Option(
        help="A TOML file of extra ACP agents (name -> command, install, env; see "
        "docs/agents.md); wins over $SANDLOT_AGENTS_FILE for a shared name.")] = None,
    agent_version: Annotated[str | None, typer.Option(
        help="Version of an agent sandlot installs itself (e.g. pi).")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="provider/model, routed by sandlot's LLM gateway: any LiteLLM "
        "provider (openai/gpt-4.1, anthropic/claude-sonnet-4-5, openrouter/..., vllm/...) or "
        "scripted/NAME (a deterministic model for dry runs; see docs/scripted.md). Checked "
        "before any trial starts.")] = None,
    api_base: Annotated[str | None, typer.Option(
        help="Provider base URL: a proxy, a self-hosted endpoint (required for vllm/..., "
        "hosted_vllm/..., openai_compatible/...).")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        help="Env var holding the provider key (default: the provider's usual one, e.g. "
        "OPENAI_API_KEY); read in sandlot's process only, never given to an agent.")] = None,
    scripts_dir: Annotated[list[Path] | None, typer.Option(
        help="Where scripted models live; also searched: $SANDLOT_SCRIPTS_DIR, "
        "<tasks>/scripted, <tasks>/../scripted, the built-ins.")] = None,
    max_turns: Annotated[int | None, typer.Option(
        min=1, help="Model turns per prompt for agents that honour it (builtin).")] = None,
    temperature: Annotated[float | None, typer.Option(
        min=0.0, max=2.0, help="Sampling temperature for every model request of every agent "
        "(set by the gateway; wins over the agent's own value; not given: the agent's).")
    ] = None,
    max_output_tokens: Annotated[int | None, typer.Option(
        min=1, help="The most output tokens per model request (max_tokens, "
        "max_completion_tokens, max_output_tokens or maxOutputTokens, as the request's "
        "format says); wins over the agent's value.")] = None,
    reasoning_effort: Annotated[str | None, typer.Option(
        help="none, minimal, low, medium, high or xhigh: reasoning_effort (OpenAI), a "
        "thinking budget (Anthropic, Google: 0/1024/1024/2048/4096/8192 tokens); wins over "
        "the agent's value.")] = None,
    seed: Annotated[int | None, typer.Option(
        help="Sampling seed, where the request's format has one (Chat Completions, Google); "
        "wins over the agent's value.")] = None,
    model_kwarg: Annotated[list[str] | None, typer.Option(
        "--model-kwarg", help="KEY=VALUE set at the top of every request body (VALUE read as "
        "JSON when it is: top_p=0.9; repeatable); wins over the agent's value.")] = None,
    repair_attempts: Annotated[int, typer.Option(
        min=0, help="After the agent finishes, run the tests as feedback and send failures "
        "back into the same session, up to N times (see docs/results.md); agents without a "
        "session ignore it (noted in agent_info).")] = 0,
    repair_template: Annotated[Path | None, typer.Option(
        help="File with the repair feedback message ({feedback}, {reward}, {attempt}, "
        "{max_attempts}); a task's [agent] repair_feedback_template wins.")] = None,
    n_concurrent: Annotated[int, typer.Option("-n", "--n-concurrent", min=1,
                                              help="Trials running at once.")] = 1,
    n_attempts: Annotated[int, typer.Option("-k", "--n-attempts", min=1,
                                            help="Trials per task: pass@1 ... pass@k are "
                                            "reported.")] = 1,
    jobs_dir: Annotated[Path, typer.Option(
        help="Where job folders go (relative to the current folder).")] = Path("jobs"),
    job_name: Annotated[str | None, typer.Option(
        help="Job folder name; reuse it to resume. Default: a timestamp.")] = None,
    max_retries: Annotated[int, typer.Option(
        min=0, help="Extra tries for a trial that ended in an infrastructure error "
        "(sandbox_setup_failed, internal_error), after 1, 2, 4 ... s (at most 30 s).")] = 0,
    max_trial_tokens: Annotated[int | None, typer.Option(
        min=1, help="Each trial's token budget (input + output, as the gateway counts): "
        "once spent, the gateway refuses the agent's requests and the trial ends as "
        "budget_exceeded, scored on what the agent left.")] = None,
    max_trial_cost_usd: Annotated[float | None, typer.Option(
        min=0.000001, help="Each trial's budget in USD, at LiteLLM's prices (a model "
        "without a known price is refused).")] = None,
    max_job_tokens: Annotated[int | None, typer.Option(
        min=1, help="The job's token budget: once spent, no trial starts and the running "
        "ones stop (cancelled; they rerun on resume, which may raise it); exit code 6.")
    ] = None,
    max_job_cost_usd: Annotated[float | None, typer.Option(
        min=0.000001, help="The job's budget in USD, as --max-job-tokens.")] = None,
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
        help="Glob on task names to skip (repeatable; applied after --include).")] = None,
    n_tasks: Annotated[int | None, typer.Option(
        "--n-tasks", "-l", min=1, help="Run only the first N tasks (folders' first, then "
        "datasets'; only those are fetched).")] = None,
    timeout_multiplier: Annotated[float, typer.Option(
        "--timeout-multiplier", "--override-timeout-multiplier",
        min=0.001, help="Scales every task's agent, verifier and build timeouts (recorded; "
        "a resume with another value is refused).")] = 1.0,
    override_cpus: Annotated[float | None, typer.Option(
        min=0.01, help="CPUs for every task's sandbox, instead of [environment] cpus.")] = None,
    override_memory_mb: Annotated[int | None, typer.Option(
        min=16, help="Memory limit in MB for every task, instead of [environment] "
        "memory_mb.")] = None,
    override_storage_mb: Annotated[int | None, typer.Option(
        min=16, help="Disk quota in MB for every task, instead of [environment] "
        "storage_mb.")] = None,
    agent_network: Annotated[str | None, typer.Option(
        help="The agent phase's network for every task: none, or public (outbound NAT; "
        "never this host's loopback). Default: each task's own network_mode.")] = None,
    allow_private_network: Annotated[bool, typer.Option(
        "--allow-private-network",
        help="Let tasks with network reach private ranges (10/8, 172.16/12, 192.168/16: a "
        "mirror on the LAN). The host itself and 169.254.169.254 stay unreachable.")] = False,
    sandbox: Annotated[str, typer.Option(
        help="Sandbox backend: local (Linux namespaces, no engine needed) or docker (Docker "
        "or Podman through the Docker API; builds each task's Dockerfile or compose file as "
        "it is).")] = "local",
    ray: Annotated[str | None, typer.Option(
        metavar="ADDRESS|auto|local",
        help="Run the trials on a Ray cluster (needs pip install -e '.[ray]'): local starts "
        "a private Ray on this machine for the job; auto joins RAY_ADDRESS's cluster; else "
        "the cluster at ADDRESS. Each node runs its share in its own sandboxes with its own "
        "LLM gateway; -n caps the trials at once (default: every node's slots). See "
        "docs/scale-out.md.")] = None,
    max_copy_out_mb: Annotated[int, typer.Option(
        min=1, help="The most MB of what the agent left copied into each trial's folder: "
        "the workspace diff (1 MB at most), /logs/agent (50 MB at most), then /logs/verifier "
        "(50 MB at most) from what is left; the rest is listed as left out "
        "(agent/logs-left-out.txt).")] = 100,
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
        help="sandlot's cache: build layers, scratch space, installed agents, pulled "
        "images, fetched datasets. Default: $SANDLOT_CACHE_DIR, else "
        "$XDG_CACHE_HOME/sandlot, else ~/.cache/sandlot.")] = None,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No per-trial lines: the job's header and the final tables "
        "only.")] = False,
    json_events: Annotated[bool, typer.Option(
        "--json-events", help="One JSON object per event on stdout, for other tools; the "
        "human output goes to stderr.")] = False,
    json_summary: Annotated[bool, typer.Option(
        "--json", help="At the end, one JSON object on stdout: job_dir, exit_code, "
        "exit_reason (ok, too_many_errors, provider_failed, budget_reached, interrupted), "
        "error_rate and summary (summary.json); the human output goes to stderr.")] = False,
    heartbeat_sec: Annotated[float, typer.Option(
        min=0, help="Without a terminal (and with --json-events): a heartbeat line with "
        "the running totals every N seconds; 0: none.")] = 30.0,
    stall_after_sec: Annotated[float, typer.Option(
        min=1, help="Warn when a running trial's counters (phase, tool calls, tokens) have "
        "not moved for this long.")] = 300.0,
    no_preflight: Annotated[bool, typer.Option(
        "--no-preflight", help="Skip the model check before the run (the credential and "
        "one small real request to the provider): for a provider that finds its "
        "credentials another way (an instance role, a credentials file).")] = False,
    max_error_rate: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Exit with code 4 when more than this share of the trials "
        "ended in errors (not failures): such a job's figures are not a benchmark "
        "result.")] = 0.5,
) -> None:
    """Run every task with an agent; resume a job by running it again with its --job-name
    (or with --config on the job.yaml its folder keeps)."""
    from sandlot.cli_run import run_resolved
    from sandlot.run_spec import PARAMETER_KEYS, RunSpecError, resolve_run

    given: dict[str, object] = {}
    environment: dict[str, object] = {}
    for name, value in ctx.params.items():
        source = ctx.get_parameter_source(name)
        key = PARAMETER_KEYS.get(name, name)
        if name == "config" or source is None:
            continue
        if source.name == "COMMANDLINE":
            given[key] = value
        elif source.name == "ENVIRONMENT":
            environment[key] = value
    try:
        resolved = resolve_run(given, environment, config)
    except RunSpecError as exc:
        raise fail(make_console(stderr=json_events or json_summary), str(exc)) from exc
    spec = resolved.spec
    run_resolved(resolved, make_console(stderr=spec.json_events or spec.json_summary))


def main() -> None:
    """The `sandlot` command. A bad command line is one `error:` line naming the flag and
    exit code 2, never click's boxed panel: it must read well in a CI log too."""
    from sandlot.cli_help import asks_for_help, help_text, tidy_metavars

    argv = sys.argv[1:]
    command = typer.main.get_command(app)
    tidy_metavars(command)
    if asks_for_help(argv):
        text = help_text(command, argv, "sandlot")
        if text is not None:
            print(text)
            sys.exit(0)
    try:
        code = command.main(args=argv, prog_name="sandlot", standalone_mode=False)
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
