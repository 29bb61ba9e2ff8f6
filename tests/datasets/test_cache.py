"""The dataset cache against real git repositories (file:// URLs): one clone per repository
and commit, exact commits, reuse without git, concurrent and interrupted fetches, and a
task's bad folder made that task's problem."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from git_support import commit, new_repo, refusing_git, task_files

from sandlot.datasets.cache import DatasetCache
from sandlot.datasets.git import Git, GitError
from sandlot.datasets.registry import RegistryTask

pytestmark = pytest.mark.timeout(120)


class CountingGit(Git):
    """The real git, counting clones (to show one per repository and commit)."""

    def __init__(self, binary: str) -> None:
        object.__setattr__(self, "binary", binary)
        object.__setattr__(self, "calls", [])

    async def run(self, args, **kwargs):  # type: ignore[no-untyped-def, override]
        self.calls.append(args[0])  # type: ignore[attr-defined]
        return await super().run(args, **kwargs)


@pytest.fixture
def repo(tmp_path: Path) -> tuple[str, list[str]]:
    """Two commits: the first has tasks a and b; the second changes a's marker and
    moves b to moved/b."""
    path = new_repo(tmp_path / "origin")
    first = commit(path, {**task_files("tasks/a", marker="one"),
                          **task_files("tasks/b", marker="bee")})
    second = commit(path, {**task_files("tasks/a", marker="two"),
                           **{k: None for k in task_files("tasks/b")},
                           **task_files("moved/b", marker="bee")})
    return f"file://{path}", [first, second]


def _task(url: str, commit_id: str | None, path: str, name: str | None = None) -> RegistryTask:
    return RegistryTask(name=name or path.rsplit("/", 1)[-1], git_url=url,
                        git_commit_id=commit_id, path=path)


def test_each_task_is_fetched_at_its_exact_commit_with_one_clone_per_commit(tmp_path, repo):
    url, (first, second) = repo
    git = CountingGit(Git.find().binary)
    cache = DatasetCache(tmp_path / "cache", git)
    got = asyncio.run(cache.fetch([_task(url, first, "tasks/a"), _task(url, first, "tasks/b"),
                                   _task(url, second, "tasks/a")]))
    assert [g.problem for g in got] == [None, None, None]
    assert (got[0].folder / "solution/solve.sh").read_text().endswith("echo one > /app/out.txt\n")
    assert (got[2].folder / "solution/solve.sh").read_text().endswith("echo two > /app/out.txt\n")
    assert got[0].folder.name == "a" and got[1].folder.name == "b"
    assert [g.commit for g in got] == [first, first, second]
    assert git.calls.count("clone") == 2  # one per commit, not per task
    assert os.access(got[0].folder / "tests/test.sh", os.X_OK)
    assert not (got[0].folder / ".git").exists()
    assert not any((tmp_path / "cache" / "staging").iterdir())


def test_a_second_fetch_makes_no_git_call(tmp_path, repo, monkeypatch):
    url, (first, _) = repo
    cache = DatasetCache(tmp_path / "cache")
    tasks = [_task(url, first, "tasks/a"), _task(url, first, "tasks/b")]
    before = asyncio.run(cache.fetch(tasks))
    forbidden = refusing_git(tmp_path / "no-git")
    monkeypatch.setenv("PATH", f"{forbidden}{os.pathsep}{os.environ['PATH']}")
    again = asyncio.run(DatasetCache(tmp_path / "cache").fetch(tasks))
    assert [(g.folder, g.commit) for g in again] == [(g.folder, g.commit) for g in before]
    assert not (forbidden / "called").exists()


def test_a_moved_task_path_is_that_tasks_problem_and_the_rest_are_fetched(tmp_path, repo,
                                                                          monkeypatch):
    url, (_, second) = repo
    cache = DatasetCache(tmp_path / "cache")
    got = asyncio.run(cache.fetch([_task(url, second, "tasks/b"),
                                   _task(url, second, "moved/b", name="b2")]))
    assert got[0].folder is None and "no folder tasks/b" in got[0].problem
    assert got[1].folder is not None and got[1].problem is None
    forbidden = refusing_git(tmp_path / "no-git")  # the answer is kept: no refetch
    monkeypatch.setenv("PATH", f"{forbidden}{os.pathsep}{os.environ['PATH']}")
    again = asyncio.run(DatasetCache(tmp_path / "cache").fetch([_task(url, second, "tasks/b")]))
    assert again[0].problem == got[0].problem and not (forbidden / "called").exists()


def test_an_abbreviated_commit_and_the_default_branch_resolve_to_full_ids(tmp_path, repo):
    url, (first, second) = repo
    got = asyncio.run(DatasetCache(tmp_path / "cache").fetch(
        [_task(url, first[:10], "tasks/a"), _task(url, None, "tasks/a")]))
    assert [g.commit for g in got] == [first, second]
    assert "one" in (got[0].folder / "instruction.md").read_text()
    assert "two" in (got[1].folder / "instruction.md").read_text()


def test_a_commit_that_does_not_exist_names_it_and_the_repository(tmp_path, repo):
    url, _ = repo
    with pytest.raises(GitError) as caught:
        asyncio.run(DatasetCache(tmp_path / "cache").fetch(
            [_task(url, "0123456789abcdef0123456789abcdef01234567", "tasks/a")]))
    assert "0123456789abcdef0123456789abcdef01234567" in str(caught.value)
    assert url in str(caught.value) and "\n" not in str(caught.value)


def test_an_unreachable_repository_is_one_line_naming_it(tmp_path):
    url = f"file://{tmp_path}/nowhere"
    with pytest.raises(GitError) as caught:
        asyncio.run(DatasetCache(tmp_path / "cache").fetch([_task(url, "abc1234", "t")]))
    assert url in str(caught.value) and "\n" not in str(caught.value)


def test_two_fetches_of_one_dataset_at_once_clone_once_and_agree(tmp_path, repo):
    url, (first, _) = repo
    tasks = [_task(url, first, "tasks/a"), _task(url, first, "tasks/b")]
    git = CountingGit(Git.find().binary)

    async def both():  # type: ignore[no-untyped-def]
        return await asyncio.gather(DatasetCache(tmp_path / "cache", git).fetch(tasks),
                                    DatasetCache(tmp_path / "cache", git).fetch(tasks))

    one, two = asyncio.run(both())
    assert [g.folder for g in one] == [g.folder for g in two]
    assert all(g.folder.is_dir() for g in one)
    assert git.calls.count("clone") == 1  # the second waited on the lock, then found them


def test_an_interrupted_fetch_leaves_nothing_used_and_the_next_one_completes(tmp_path, repo):
    url, (first, _) = repo
    tasks = [_task(url, first, "tasks/a")]

    class DyingGit(CountingGit):
        async def run(self, args, **kwargs):  # type: ignore[no-untyped-def, override]
            if args[0] == "checkout":
                raise KeyboardInterrupt  # the user's ^C in the middle of the fetch
            return await super().run(args, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(DatasetCache(tmp_path / "cache", DyingGit(Git.find().binary)).fetch(tasks))
    cache = DatasetCache(tmp_path / "cache")
    assert not cache.task_folder(tasks[0], first).exists()
    got = asyncio.run(cache.fetch(tasks))
    assert got[0].folder is not None and (got[0].folder / "task.toml").is_file()


def test_links_inside_a_task_are_copied_and_links_out_make_it_invalid(tmp_path):
    path = new_repo(tmp_path / "origin")
    (path / "secret.txt").parent.mkdir(parents=True, exist_ok=True)
    files = {**task_files("ok"), **task_files("bad"), "secret.txt": "not for tasks\n"}
    commit(path, files)
    os.symlink("test.sh", path / "ok/tests/again.sh")
    os.symlink("../../secret.txt", path / "bad/tests/leak.txt")
    head = commit(path, {})
    url = f"file://{path}"
    got = asyncio.run(DatasetCache(tmp_path / "cache").fetch(
        [_task(url, head, "ok"), _task(url, head, "bad")]))
    copied = got[0].folder / "tests/again.sh"
    assert not copied.is_symlink() and "reward.txt" in copied.read_text()
    assert got[1].folder is None and "links out of the task" in got[1].problem
