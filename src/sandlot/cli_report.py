"""`sandlot view`, `sandlot compare` and `sandlot export`: looking at results.

The commands are registered on the main typer app by `register(app)`, called from
cli.py; their work lives in sandlot.viewer and sandlot.report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from sandlot.cli_common import escape, fail
from sandlot.terminal import make_console


def view(
    jobs_dir: Annotated[Path, typer.Argument(
        help="A folder of jobs (default: ./jobs), or one job folder.")] = Path("jobs"),
    port: Annotated[int, typer.Option(
        min=0, max=65535, help="Port on 127.0.0.1; 0 picks a free one.")] = 0,
    no_browser: Annotated[bool, typer.Option(
        "--no-browser", help="Print the address without opening a browser.")] = False,
) -> None:
    """Browse jobs, trials and trajectories in a local web app (127.0.0.1 only)."""
    from sandlot.viewer.jobs import is_job_dir
    from sandlot.viewer.server import serve

    console = make_console()
    if not jobs_dir.is_dir():
        raise fail(console, f"{jobs_dir} is not a folder (run some jobs first, or pass the "
                    "folder given to `sandlot run --jobs-dir`)")
    page = ""
    if is_job_dir(jobs_dir):  # one job: serve its parent, open the job
        from urllib.parse import quote

        page = f"#/job/{quote(jobs_dir.resolve().name)}"
        jobs_dir = jobs_dir.resolve().parent

    def ready(url: str) -> None:
        console.print(f"[bold]sandlot view[/]: {escape(str(jobs_dir.resolve()))} at "
                      f"[cyan]{escape(url)}[/]  (Ctrl-C to stop)")

    try:
        serve(jobs_dir, port=port, open_browser=not no_browser, path=page, on_ready=ready)
    except OSError as exc:
        raise fail(console, f"cannot listen on 127.0.0.1:{port}: {exc}") from exc


def compare(
    jobs: Annotated[list[str], typer.Argument(
        help="Two or more job folders (or names under --jobs-dir); the first is the "
        "baseline.")],
    jobs_dir: Annotated[Path, typer.Option(help="Where job names are looked up.")] = Path(
        "jobs"),
    output_format: Annotated[str, typer.Option(
        "--format", "-f", help="table, json or markdown.")] = "table",
    alpha: Annotated[float, typer.Option(
        min=0.0001, max=0.5, help="Significance level of the paired test.")] = 0.05,
    seed: Annotated[int, typer.Option(help="Seed of the paired bootstrap.")] = 0,
    resamples: Annotated[int, typer.Option(
        min=100, help="Paired bootstrap resamples.")] = 10_000,
) -> None:
    """Compare jobs task by task: flips, pass rates with 95% CIs, a paired test."""
    from sandlot.report.compare import compare_jobs, render_markdown, render_rich
    from sandlot.viewer.jobs import JobNotFound, resolve_job_arg

    console = make_console()
    if len(jobs) < 2:
        raise fail(console, "compare needs at least two jobs")
    if output_format not in ("table", "json", "markdown"):
        raise fail(console, f"--format must be table, json or markdown, not {output_format!r}")
    try:
        paths = [resolve_job_arg(j, jobs_dir) for j in jobs]
    except JobNotFound as exc:
        raise fail(console, str(exc)) from exc
    data = compare_jobs(paths, alpha=alpha, seed=seed, n_resamples=resamples)
    if output_format == "json":
        typer.echo(json.dumps(data, indent=2))
    elif output_format == "markdown":
        typer.echo(render_markdown(data), nl=False)
    else:
        console.print(render_rich(data))
        if len({p.parent for p in paths}) == 1:
            names = ",".join(p.name for p in paths)
            console.print(f"[dim]In the browser: sandlot view {escape(str(paths[0].parent))}"
                          f"  →  #/compare?jobs={escape(names)}[/]")


def export(
    job: Annotated[str, typer.Argument(help="A job folder (or a name under --jobs-dir).")],
    output_format: Annotated[str, typer.Option(
        "--format", "-f", help="atif, jsonl, csv or markdown.")],
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="atif: a folder (default ./<job>-atif); others: a file "
        "(default: standard output).")] = None,
    jobs_dir: Annotated[Path, typer.Option(help="Where job names are looked up.")] = Path(
        "jobs"),
) -> None:
    """Export a job: ATIF trajectories, one row per trial (jsonl/csv), or Markdown."""
    from sandlot.report.export import FORMATS, export_atif, export_text
    from sandlot.viewer.jobs import JobNotFound, resolve_job_arg

    console = make_console(stderr=True)
    if output_format not in FORMATS:
        raise fail(console, f"--format must be one of {', '.join(FORMATS)}, "
                    f"not {output_format!r}")
    try:
        path = resolve_job_arg(job, jobs_dir)
    except JobNotFound as exc:
        raise fail(console, str(exc)) from exc
    if output_format == "atif":
        out_dir = output or Path(f"{path.name}-atif")
        written = export_atif(path, out_dir)
        console.print(f"wrote {len(written)} ATIF trajectories to {escape(str(out_dir))}")
        return
    text = export_text(path, output_format)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        console.print(f"wrote {escape(str(output))}")


def register(app: typer.Typer) -> None:
    """Add `view`, `compare` and `export` to the `sandlot` command."""
    app.command("view")(view)
    app.command("compare")(compare)
    app.command("export")(export)
