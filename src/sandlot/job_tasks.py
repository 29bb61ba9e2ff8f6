"""The tasks a `sandlot run` names: folders given on the command line and datasets named
with `-d`, filtered by the task globs and sliced by `--n-tasks` before anything is
fetched, each with where it came from.

Trial folders are named after tasks, so two tasks of one name (the same task in two
versions of a dataset, say) cannot share a job: that is a problem said before the run,
not a silent overwrite.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from sandlot.models import TaskSource
from sandlot.tasks.loader import Task, discover_tasks, invalid_task, load_task_or_invalid
from sandlot.tasks.naming import task_name


@dataclass(frozen=True)
class JobTask:
    """One task to run: its folder (None when a dataset's task could not be had:
    `problem` says why, and its trials end as task_invalid) and its source."""

    name: str
    folder: Path | None
    source: TaskSource | None = None
    problem: str | None = None

    def load(self, *, need_solution: bool, sandbox: str, build_args: dict[str, str]) -> Task:
        """The Task to run, carrying its source; one that could not be fetched is an
        invalid Task naming why."""
        if self.folder is None:
            return invalid_task(self.name, Path("/nonexistent") / self.name,
                                (self.problem or "its folder could not be fetched",),
                                source=self.source)
        task = load_task_or_invalid(self.folder, need_solution=need_solution,
                                    sandbox=sandbox, build_args=build_args)
        return dataclasses.replace(task, source=self.source)


@dataclass
class GatheredTasks:
    tasks: list[JobTask] = field(default_factory=list)
    #: Said before the run, which then does not start (each one line).
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DatasetRequest:
    """`-d` refs and where to look them up."""

    refs: Sequence[str]
    registry_paths: Sequence[Path] = ()
    registry_urls: Sequence[str] = ()


def gather_tasks(folders: Sequence[Path], datasets: DatasetRequest, cache_root: Path,
                 include: Sequence[str] | None, exclude: Sequence[str] | None,
                 n_tasks: int | None, console: Console) -> GatheredTasks:
    """Folders' tasks first (in the order given, each sorted by name), then each
    dataset's in its registry's order; the first `n_tasks` of them."""
    out = GatheredTasks()
    for folder in folders:
        for path in discover_tasks(folder, list(include or []), list(exclude or [])):
            out.tasks.append(JobTask(task_name(path), path))
    if datasets.refs:
        _gather_datasets(out, datasets, cache_root, include, exclude, n_tasks, console)
    if n_tasks is not None:
        out.tasks = out.tasks[:n_tasks]
    _refuse_twins(out)
    return out


def _gather_datasets(out: GatheredTasks, request: DatasetRequest, cache_root: Path,
                     include: Sequence[str] | None, exclude: Sequence[str] | None,
                     n_tasks: int | None, console: Console) -> None:
    from sandlot.datasets.cache import DatasetCache
    from sandlot.datasets.git import GitError
    from sandlot.datasets.registry import RegistryError
    from sandlot.datasets.selection import (
        fetch_with_bar,
        open_registries,
        resolve_all,
        selected_tasks,
    )

    root = cache_root / "datasets"
    try:
        registries = open_registries(request.registry_paths, request.registry_urls, root,
                                     console)
        resolved = resolve_all(registries, request.refs)
    except RegistryError as exc:
        out.problems.append(str(exc))
        return
    chosen = [(d, t) for d in resolved for t in selected_tasks(d, include, exclude)]
    if n_tasks is not None:  # fetch only the slice that will run
        chosen = chosen[:max(0, n_tasks - len(out.tasks))]
    for dataset in resolved:
        picked = sum(1 for d, _ in chosen if d is dataset)
        how = "newest" if dataset.version_from == "newest" else "given"
        console.print(f"dataset [cyan]{escape(dataset.dataset.ref)}[/] ({how} version, from "
                      f"{escape(dataset.source)}): {picked} of "
                      f"{len(dataset.dataset.tasks)} tasks", soft_wrap=True)
    try:
        fetched = fetch_with_bar(DatasetCache(root), chosen, console)
    except GitError as exc:
        out.problems.append(str(exc))
        return
    for task in fetched:
        out.tasks.append(JobTask(task.name, task.folder, task.source, task.problem))


def _refuse_twins(out: GatheredTasks) -> None:
    seen: dict[str, JobTask] = {}
    for task in out.tasks:
        first = seen.setdefault(task.name, task)
        if first is not task:
            out.problems.append(
                f"two tasks are named {task.name} ({_where(first)} and {_where(task)}); "
                "trial folders are named after tasks, so leave one out "
                "(--exclude-task-name) or run them as two jobs")


def _where(task: JobTask) -> str:
    if task.source is not None:
        return f"{task.source.dataset}@{task.source.version}"
    return str(task.folder)
