"""The dataset cache: each registry task's folder at its exact commit, fetched once and
shared by every job on this machine.

Layout under `<cache>/datasets/`:

    git/<repo key>/<commit>/commit            the full id the commit resolved to
    git/<repo key>/<commit>/<path key>/<name>/  one task's folder, complete or absent
    locks/<repo key>-<commit>.lock            held while that commit is being fetched
    staging/<repo key>-<commit>/              the fetch in progress (a clone, copies)

One clone per repository and commit fetches every missing task of that commit at once
(sparse, blobless, shallow). A task's folder is built in staging and renamed into place
whole, so a folder in `git/` is always complete: a fetch killed halfway leaves only
staging, which the next fetch of that commit clears. Two runs fetching the same commit
take turns on its lock; the second finds the folders there and makes no git call, as
does any later run (a machine offline uses what is cached).

Links in a task folder are copied as what they point to when that stays inside the task
(as Harbor does); a link out of the task, or through which the task's path itself goes,
makes that task invalid rather than follow it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sandlot.datasets.git import Git, GitError, MissingCommitError, clone_commit
from sandlot.datasets.registry import RegistryTask
from sandlot.fsutil import write_atomic
from sandlot.locks import file_lock

#: Repositories fetched at once.
PARALLEL_REPOS = 4


class FetchProgress(Protocol):
    """Told as a fetch goes: how much there is, then each commit's tasks as they land."""

    def planned(self, repos: int, tasks: int, clones: int) -> None: ...

    def fetched(self, tasks: int, nbytes: int) -> None: ...

    def cloned(self) -> None: ...


class NoProgress:
    def planned(self, repos: int, tasks: int, clones: int) -> None:
        return None

    def fetched(self, tasks: int, nbytes: int) -> None:
        return None

    def cloned(self) -> None:
        return None


@dataclass(frozen=True)
class FetchedTask:
    """Where one registry task's folder is, and the full commit it came from; or why it
    has none (`problem`: the task is invalid, the others run)."""

    task: RegistryTask
    folder: Path | None
    commit: str | None
    problem: str | None = None


class DatasetCache:
    """Registry tasks -> folders on this machine, fetching only what is not cached."""

    def __init__(self, root: Path, git: Git | None = None) -> None:
        self.root = root
        self._git = git

    def task_folder(self, task: RegistryTask, commit: str) -> Path:
        name = task_folder_name(task)
        return self._commit_dir(task.git_url or "", commit) / _key(task.path) / name

    def is_cached(self, task: RegistryTask) -> bool:
        """Whether a pinned git task's folder is in the cache (no git call)."""
        commit = task.git_commit_id
        if task.git_url is None or commit is None:
            return False
        return self.task_folder(task, commit).is_dir()

    async def fetch(self, tasks: Sequence[RegistryTask],
                    progress: FetchProgress | None = None) -> list[FetchedTask]:
        """Each task's folder, in the order given. Tasks without `git_url` are folders on
        this machine, taken where they are. A repository that cannot be reached, or a
        commit it no longer has, raises GitError (one line naming it); the cache is used
        without any git call when it already holds everything."""
        progress = progress or NoProgress()
        answers: dict[int, FetchedTask] = {}
        groups: dict[tuple[str, str | None], list[int]] = {}
        for i, task in enumerate(tasks):
            if task.git_url is None:
                answers[i] = _local_task(task)
            else:
                groups.setdefault((task.git_url, task.git_commit_id), []).append(i)
        todo = {}
        for (url, commit), idx in groups.items():
            full = self._cached_commit(url, commit) if commit is not None else None
            if commit is None or full is None or self._unsettled(
                    url, commit, [tasks[i] for i in idx]):
                todo[url, commit] = idx
                continue
            for i in idx:
                answers[i] = self._answer(tasks[i], commit, full, url)
        progress.planned(len({url for url, _ in todo}), sum(len(idx) for idx in todo.values()),
                         len(todo))
        if todo:
            git = self._git or Git.find()
            limit = asyncio.Semaphore(PARALLEL_REPOS)

            failed: list[str] = []

            async def one(key: tuple[str, str | None], idx: list[int]) -> None:
                try:
                    async with limit:
                        found = await self._fetch_commit(git, key[0], key[1],
                                                         [tasks[i] for i in idx], progress)
                except GitError as exc:  # the other repositories still land in the cache
                    failed.append(str(exc))
                    return
                progress.cloned()
                for i, answer in zip(idx, found, strict=True):
                    answers[i] = answer

            async with asyncio.TaskGroup() as group:
                for key, idx in todo.items():
                    group.create_task(one(key, idx))
            if failed:
                more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
                raise GitError(failed[0] + more)
        return [answers[i] for i in range(len(tasks))]

    async def _fetch_commit(self, git: Git, url: str, commit: str | None,
                            tasks: list[RegistryTask], progress: FetchProgress
                            ) -> list[FetchedTask]:
        if commit is None:  # the default branch's tip, as Harbor takes it: ask which it is
            commit = await _tip(git, url)
        key = f"{_repo_key(url)}-{_key(commit)}"
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        async with file_lock(self.root / "locks" / f"{key}.lock"):
            missing = self._unsettled(url, commit, tasks)
            full = self._cached_commit(url, commit)
            if missing or full is None:
                try:
                    full = await self._clone_into_cache(git, url, commit, missing, key,
                                                        progress)
                except MissingCommitError as exc:
                    names = ", ".join(t.name for t in tasks[:5])
                    more = f" and {len(tasks) - 5} more" if len(tasks) > 5 else ""
                    who = f"tasks {names}{more} need" if len(tasks) > 1 else f"task {names} needs"
                    raise MissingCommitError(f"{exc}; {who} it") from None
        return [self._answer(t, commit, full, url) for t in tasks]

    async def _clone_into_cache(self, git: Git, url: str, commit: str,
                                missing: list[RegistryTask], key: str,
                                progress: FetchProgress) -> str:
        staging = self.root / "staging" / key
        if staging.exists():  # a fetch that was killed: we hold its lock now
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        try:
            checkout = staging / "repo"
            full = await clone_commit(git, url, commit, [t.path for t in missing], checkout)
            commit_dir = self._commit_dir(url, commit)
            commit_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(commit_dir / "commit", full + "\n")
            for task in missing:
                out = staging / "out" / _key(task.path) / task_folder_name(task)
                try:
                    nbytes = await asyncio.to_thread(_materialize, checkout, task.path, out)
                except TaskFolderError as exc:
                    write_atomic(self._problem_file(url, commit, task),
                                 f"{exc} ({url} at commit {full[:12]})\n")
                    progress.fetched(1, 0)
                    continue
                final = self.task_folder(task, commit)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.rename(out, final)
                self._problem_file(url, commit, task).unlink(missing_ok=True)
                progress.fetched(1, nbytes)
            return full
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _unsettled(self, url: str, commit: str, tasks: list[RegistryTask]
                   ) -> list[RegistryTask]:
        """The tasks of this commit neither fetched nor known to be missing from it."""
        return [t for t in tasks if not self.task_folder(t, commit).is_dir()
                and not self._problem_file(url, commit, t).is_file()]

    def _answer(self, task: RegistryTask, commit: str, full: str | None, url: str
                ) -> FetchedTask:
        folder = self.task_folder(task, commit)
        if folder.is_dir():
            return FetchedTask(task, folder, full)
        try:
            why = self._problem_file(url, commit, task).read_text().strip()
        except OSError:
            why = f"task {task.name}: its folder was not fetched"
        return FetchedTask(task, None, full, why)

    def _problem_file(self, url: str, commit: str, task: RegistryTask) -> Path:
        return self._commit_dir(url, commit) / f"{_key(task.path)}.problem"

    def _commit_dir(self, url: str, commit: str) -> Path:
        return self.root / "git" / _repo_key(url) / _key(commit)

    def _cached_commit(self, url: str, commit: str) -> str | None:
        try:
            return (self._commit_dir(url, commit) / "commit").read_text().strip() or None
        except OSError:
            return None


class TaskFolderError(Exception):
    """A task's folder is missing from its commit or cannot be copied safely."""


async def _tip(git: Git, url: str) -> str:
    said = await git.run(["ls-remote", "--", url, "HEAD"], url=url)
    first = said.split()
    if not first:
        raise GitError(f"{url} has no default branch to take tasks from")
    return first[0]


def _local_task(task: RegistryTask) -> FetchedTask:
    folder = Path(task.path).expanduser().resolve()
    if not (folder / "task.toml").is_file():
        return FetchedTask(task, None, None,
                           f"task {task.name}: {folder} is not a task folder (no task.toml)")
    return FetchedTask(task, folder, None)


def _materialize(checkout: Path, path: str, out: Path) -> int:
    """Copy the task folder `path` of `checkout` to `out` as plain files and folders;
    its size in bytes."""
    source = checkout
    for part in ([] if path == "." else path.split("/")):
        source = source / part
        if source.is_symlink():
            raise TaskFolderError(f"task path {path}: {part} is a link (a task's path must "
                                  "be a real folder in its repository)")
    if not source.is_dir():
        raise TaskFolderError(f"no folder {path} in the repository (moved or deleted?)")
    root = source.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    total = 0
    todo: list[tuple[Path, Path, frozenset[Path]]] = [(root, out, frozenset())]
    while todo:
        here, there, above = todo.pop()
        there.mkdir()
        for entry in sorted(here.iterdir()):
            if here == root and path == "." and entry.name == ".git":
                continue
            real = _inside(entry, root, path)
            target = there / entry.name
            mode = real.stat().st_mode
            if stat.S_ISDIR(mode):
                if real in above or real == here:
                    raise TaskFolderError(f"task path {path}: {_rel(entry, root)} links back "
                                          "to a folder holding it")
                todo.append((real, target, above | {here}))
            elif stat.S_ISREG(mode):
                shutil.copyfile(real, target)
                target.chmod(mode & 0o755)
                total += real.stat().st_size
            else:
                raise TaskFolderError(f"task path {path}: {_rel(entry, root)} is neither a "
                                      "file nor a folder")
    return total


def _inside(entry: Path, root: Path, path: str) -> Path:
    """What `entry` is, followed through links that stay inside the task folder."""
    if not entry.is_symlink():
        return entry
    pointed = os.readlink(entry)
    if pointed.startswith("/"):
        raise TaskFolderError(f"task path {path}: {_rel(entry, root)} is an absolute link "
                              "(links in a task must be relative)")
    if not Path(os.path.normpath(entry.parent / pointed)).is_relative_to(root):
        raise TaskFolderError(f"task path {path}: {_rel(entry, root)} links out of the task")
    try:
        real = entry.resolve(strict=True)
    except (OSError, RuntimeError):
        raise TaskFolderError(f"task path {path}: {_rel(entry, root)} is a broken link"
                              ) from None
    if not real.is_relative_to(root):
        raise TaskFolderError(f"task path {path}: {_rel(entry, root)} links out of the task")
    return real


def _rel(entry: Path, root: Path) -> str:
    try:
        return str(entry.relative_to(root))
    except ValueError:
        return entry.name


def task_folder_name(task: RegistryTask) -> str:
    """The task's folder name, which names it in results (Harbor: the path's last part)."""
    name = Path(task.path).name if task.path != "." else task.name
    return name if name and name not in (".", "..") else "task"


def _repo_key(url: str) -> str:
    """Readable (the repository's name) and unique (a hash of the whole URL)."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])[:40]
    return f"{tail.removesuffix('.git') or 'repo'}-{_key(url)}"


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12] if not re.fullmatch(
        r"[0-9a-f]{7,64}", text) else text
