"""From `-d NAME[@VERSION]` to task folders on this machine, with where each came from.

The task globs (`--task-name`, `--exclude-task-name`) are applied to the registry's
tasks before anything is fetched, so a slice of a large dataset fetches only its slice.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from sandlot.datasets.cache import DatasetCache, FetchProgress, task_folder_name
from sandlot.datasets.registry import Registry, RegistryTask, ResolvedDataset, resolve_dataset
from sandlot.models import TaskSource


@dataclass(frozen=True)
class DatasetTask:
    """One task a dataset named: its folder (None when it could not be had: `problem`
    says why, and its trials end as task_invalid) and its provenance."""

    name: str
    folder: Path | None
    source: TaskSource
    problem: str | None = None


def resolve_all(registries: Sequence[Registry], refs: Sequence[str]) -> list[ResolvedDataset]:
    """Each ref's dataset, in the order given; RegistryError for the first that is not
    there."""
    return [resolve_dataset(registries, ref) for ref in refs]


def selected_tasks(dataset: ResolvedDataset, include: Sequence[str] | None,
                   exclude: Sequence[str] | None) -> list[RegistryTask]:
    """The dataset's tasks whose name (as sandlot names it: the folder's) matches an
    include glob (all when none) and no exclude glob, in the registry's order."""
    out = []
    for task in dataset.dataset.tasks:
        name = task_folder_name(task)
        if include and not any(fnmatch.fnmatch(name, g) for g in include):
            continue
        if exclude and any(fnmatch.fnmatch(name, g) for g in exclude):
            continue
        out.append(task)
    return out


async def fetch_selected(cache: DatasetCache,
                         chosen: Sequence[tuple[ResolvedDataset, RegistryTask]],
                         progress: FetchProgress | None = None) -> list[DatasetTask]:
    """Every chosen task fetched (or found in the cache), with its provenance."""
    fetched = await cache.fetch([task for _, task in chosen], progress)
    out = []
    for (dataset, task), got in zip(chosen, fetched, strict=True):
        source = TaskSource(
            dataset=dataset.dataset.name, version=dataset.dataset.version,
            version_from=dataset.version_from, registry=dataset.source, task=task.name,
            git_url=task.git_url, git_commit_id=got.commit or task.git_commit_id,
            path=task.path)
        out.append(DatasetTask(task_folder_name(task), got.folder, source, got.problem))
    return out


def open_registries(paths: Sequence[Path], urls: Sequence[str], root: Path,
                    console: Console) -> list[Registry]:
    """The registries named (Harbor's when none is), each said when read from its cached
    copy. RegistryError when one cannot be had."""
    from sandlot.datasets.sources import RegistrySources, load_registries

    loaded = load_registries(RegistrySources(tuple(paths), tuple(urls)), root)
    for note in loaded.notes:
        console.print(f"[yellow]{escape(note)}[/]", soft_wrap=True)
    return loaded.registries


def fetch_with_bar(cache: DatasetCache, chosen: Sequence[tuple[ResolvedDataset, RegistryTask]],
                   console: Console) -> list[DatasetTask]:
    """fetch_selected with a progress bar on `console`. GitError when a repository or
    commit cannot be had."""
    import asyncio

    from sandlot.datasets.progress import FetchBar

    bar = FetchBar(console)
    try:
        return asyncio.run(fetch_selected(cache, chosen, bar))
    finally:
        bar.close()
