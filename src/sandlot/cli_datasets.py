"""`sandlot datasets list | show | pull`: what the registries offer, and fetching ahead.

Registered on the main typer app by `register(app)`, called from cli.py; the work lives
in sandlot.datasets.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sandlot.cli_common import escape, fail
from sandlot.exit_codes import ExitCode
from sandlot.paths import default_cache_dir
from sandlot.terminal import make_console

if TYPE_CHECKING:
    from rich.console import Console

    from sandlot.datasets.registry import ResolvedDataset

datasets_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                           help="Datasets in registries: list, show, pull (fetch ahead).")

RegistryPaths = Annotated[list[Path] | None, typer.Option(
    "--registry-path", help="A registry file (repeatable; consulted before URLs).")]
RegistryUrls = Annotated[list[str] | None, typer.Option(
    "--registry-url", help="A registry URL (repeatable). Default, when neither is given: "
    "Harbor's public registry.")]
CacheDir = Annotated[Path | None, typer.Option(
    help="sandlot's cache (datasets/ inside). Default: $SANDLOT_CACHE_DIR, else "
    "~/.cache/sandlot.")]


def register(app: typer.Typer) -> None:
    app.add_typer(datasets_app, name="datasets")


def _registries(console: Console, paths: list[Path] | None, urls: list[str] | None,
                cache_dir: Path | None) -> list:  # type: ignore[type-arg]
    from sandlot.datasets.registry import RegistryError
    from sandlot.datasets.selection import open_registries

    try:
        return open_registries(paths or [], urls or [], _root(cache_dir), console)
    except RegistryError as exc:
        raise fail(console, str(exc), ExitCode.PREFLIGHT) from exc


def _dataset(console: Console, ref: str, paths: list[Path] | None, urls: list[str] | None,
             cache_dir: Path | None) -> tuple[list, ResolvedDataset]:  # type: ignore[type-arg]
    """The registries and the dataset `ref` names in them; one line and exit 3 if none."""
    from sandlot.datasets.registry import RegistryError, resolve_dataset

    registries = _registries(console, paths, urls, cache_dir)
    try:
        return registries, resolve_dataset(registries, ref)
    except RegistryError as exc:
        raise fail(console, str(exc), ExitCode.PREFLIGHT) from exc


def _root(cache_dir: Path | None) -> Path:
    return (cache_dir or default_cache_dir()).resolve() / "datasets"


@datasets_app.command("list")
def datasets_list(registry_path: RegistryPaths = None, registry_url: RegistryUrls = None,
                  cache_dir: CacheDir = None) -> None:
    """Every dataset the registries offer: name, version, task count, description."""
    console = make_console()
    registries = _registries(console, registry_path, registry_url, cache_dir)
    rows = _listed(registries)
    name_w = min(30, max([7, *(len(r[0]) for r in rows)]))
    version_w = min(12, max([7, *(len(r[1]) for r in rows)]))
    desc_w = max(10, console.width - name_w - version_w - 5 - 6)
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("dataset", no_wrap=True, width=name_w, overflow="ellipsis")
    table.add_column("version", no_wrap=True, width=version_w, overflow="ellipsis")
    table.add_column("tasks", justify="right", no_wrap=True, width=5)
    table.add_column("description", no_wrap=True, width=desc_w, overflow="ellipsis")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    console.print(table)
    n = sum(len(r.datasets) for r in registries)
    console.print(f"[dim]{n} dataset versions in {len(registries)} "
                  f"registr{'ies' if len(registries) != 1 else 'y'}: "
                  f"{escape(', '.join(r.source for r in registries))}[/]")


def _listed(registries: list) -> list[tuple[str, str, str, str]]:  # type: ignore[type-arg]
    """One row per dataset version: by name, newest version first; a name an earlier
    registry has is left to it."""
    from sandlot.datasets.registry import version_order

    rows = []
    shown: set[str] = set()
    for registry in registries:
        for name in registry.names():
            if name in shown:
                continue  # an earlier registry answers for this name
            versions = sorted((d for d in registry.datasets if d.name == name),
                              key=lambda d: version_order(d.version), reverse=True)
            rows += [(d.name, d.version, str(len(d.tasks)), " ".join(d.description.split()))
                     for d in versions]
        shown |= set(registry.names())
    return rows


@datasets_app.command("show")
def datasets_show(ref: Annotated[str, typer.Argument(help="NAME or NAME@VERSION.")],
                  registry_path: RegistryPaths = None, registry_url: RegistryUrls = None,
                  cache_dir: CacheDir = None) -> None:
    """One dataset version: where it comes from and each task (commit, path, cached)."""
    from sandlot.datasets.cache import DatasetCache, task_folder_name

    console = make_console()
    registries, found = _dataset(console, ref, registry_path, registry_url, cache_dir)
    dataset = found.dataset
    how = "the newest" if found.version_from == "newest" else "as given"
    console.print(f"[bold]{escape(dataset.ref)}[/] ({how}; versions: "
                  f"{escape(', '.join(_versions(registries, dataset.name)))})")
    console.print(f"registry: {escape(found.source)}", soft_wrap=True)
    if dataset.description:
        console.print(escape(dataset.description), soft_wrap=True)
    repos = sorted({t.git_url or "(folders on this machine)" for t in dataset.tasks})
    console.print(f"{len(dataset.tasks)} tasks from {len(repos)} "
                  f"repositor{'ies' if len(repos) != 1 else 'y'}:", soft_wrap=True)
    for repo in repos:
        console.print(f"  {escape(repo)}", soft_wrap=True)
    cache = DatasetCache(_root(cache_dir))
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("task", no_wrap=True, max_width=32, overflow="ellipsis")
    table.add_column("commit", no_wrap=True)
    table.add_column("path", overflow="fold", ratio=1)
    table.add_column("cached", no_wrap=True)
    n_cached = 0
    for task in dataset.tasks:
        cached = task.git_commit_id is not None and cache.is_cached(task)
        n_cached += cached
        table.add_row(escape(task_folder_name(task)), (task.git_commit_id or "tip")[:12],
                      escape(task.path), "yes" if cached else "—")
    console.print(table)
    console.print(f"[dim]{n_cached} of {len(dataset.tasks)} tasks in the cache "
                  f"({escape(str(cache.root))}); `sandlot datasets pull {escape(ref)}` "
                  "fetches the rest[/]", soft_wrap=True)


@datasets_app.command("pull")
def datasets_pull(
    ref: Annotated[str, typer.Argument(help="NAME or NAME@VERSION.")],
    registry_path: RegistryPaths = None, registry_url: RegistryUrls = None,
    cache_dir: CacheDir = None,
    include: Annotated[list[str] | None, typer.Option(
        "--task-name", "-i", help="Only tasks whose name matches (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude-task-name", "-x", help="Leave out tasks whose name matches "
        "(repeatable).")] = None,
) -> None:
    """Fetch a dataset's tasks into the cache only, so a run later needs no network."""
    from sandlot.datasets.cache import DatasetCache
    from sandlot.datasets.git import GitError
    from sandlot.datasets.selection import fetch_with_bar, selected_tasks

    console = make_console()
    _, found = _dataset(console, ref, registry_path, registry_url, cache_dir)
    chosen = [(found, t) for t in selected_tasks(found, include, exclude)]
    console.print(f"dataset [cyan]{escape(found.dataset.ref)}[/] (from "
                  f"{escape(found.source)}): {len(chosen)} of "
                  f"{len(found.dataset.tasks)} tasks", soft_wrap=True)
    cache = DatasetCache(_root(cache_dir))
    try:
        fetched = fetch_with_bar(cache, chosen, console)
    except GitError as exc:
        raise fail(console, str(exc), ExitCode.PREFLIGHT) from exc
    lost = [t for t in fetched if t.folder is None]
    for task in lost:
        console.print(f"[red]error[/] {escape(task.name)}: {escape(task.problem or '')}",
                      soft_wrap=True)
    console.print(f"{len(fetched) - len(lost)} of {len(fetched)} tasks in the cache "
                  f"({escape(str(cache.root))})" + (f"; {len(lost)} cannot be had"
                                                    if lost else ""), soft_wrap=True)
    if lost:
        raise typer.Exit(ExitCode.CHECK_FAILED)


def _versions(registries: list, name: str) -> list[str]:  # type: ignore[type-arg]
    from sandlot.datasets.registry import version_order

    for registry in registries:
        versions = registry.versions(name)
        if versions:
            return sorted(versions, key=version_order)
    return []
