"""`sandlot datasets list | show | pull` through the real CLI, on real git repositories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from git_support import commit, new_repo, refusing_git, registry_entry, task_files, write_registry

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def registry(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = new_repo(tmp_path / "repo")
    c1 = commit(repo, {**task_files("t/alpha"), **task_files("t/beta")})
    c2 = commit(repo, task_files("t/alpha", marker="again"))
    url = f"file://{repo}"
    long = "A benchmark whose description goes on " + "and on " * 30
    path = write_registry(tmp_path / "registry.json", [
        registry_entry("demo-bench", "1.9", [("alpha", url, c1, "t/alpha"),
                                             ("beta", url, c1, "t/beta")], long),
        registry_entry("demo-bench", "1.10", [("alpha", url, c2, "t/alpha")], "newer"),
        registry_entry("zeta", "head", [("beta", url, c1, "t/beta")], "moving tip"),
        registry_entry("broken", "1", [("gone", url, c2, "t/gone"),
                                       ("alpha", url, c2, "t/alpha")]),
    ])
    return path, [c1, c2]


def _cli(run_cli, tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    return run_cli("datasets", *args, "--cache-dir", str(tmp_path / "cache"),
                   env={"COLUMNS": "80", **(env or {})})


def test_list_shows_every_dataset_version_newest_first_within_80_columns(run_cli, tmp_path,
                                                                          registry):
    path, _ = registry
    proc = _cli(run_cli, tmp_path, "list", "--registry-path", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    table = lines[:-1]  # the last line names the registry: a path is never cut
    assert len(table) == 5 and all(len(line) <= 80 for line in table), table
    assert lines[-1] == f"4 dataset versions in 1 registry: {path}"
    rows = [line.split()[:3] for line in lines if line.startswith(("demo", "zeta", "broken"))]
    assert rows == [["broken", "1", "2"], ["demo-bench", "1.10", "1"],
                    ["demo-bench", "1.9", "2"], ["zeta", "head", "1"]]
    assert "…" in next(line for line in lines if "1.9" in line)  # long text cut, not wrapped


def test_show_lists_tasks_with_commits_and_what_is_cached(run_cli, tmp_path, registry):
    path, (c1, _) = registry
    proc = _cli(run_cli, tmp_path, "show", "demo-bench@1.9", "--registry-path", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "demo-bench@1.9" in out and "versions: 1.9, 1.10" in out
    assert c1[:12] in out and "t/beta" in out and "0 of 2 tasks in the cache" in out

    newest = _cli(run_cli, tmp_path, "show", "demo-bench", "--registry-path", str(path))
    assert "demo-bench@1.10 (the newest" in newest.stdout


def test_pull_fetches_ahead_so_a_later_run_needs_no_git(run_cli, tmp_path, registry):
    path, _ = registry
    proc = _cli(run_cli, tmp_path, "pull", "demo-bench@1.9", "--registry-path", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 of 2 tasks in the cache" in proc.stdout
    shown = _cli(run_cli, tmp_path, "show", "demo-bench@1.9", "--registry-path", str(path))
    assert "2 of 2 tasks in the cache" in shown.stdout

    forbidden = refusing_git(tmp_path / "no-git")
    run = run_cli("run", "-d", "demo-bench@1.9", "--registry-path", str(path), "-a", "oracle",
                  "--cache-dir", str(tmp_path / "cache"), "--jobs-dir", str(tmp_path / "jobs"),
                  "--job-name", "later",
                  env={"PATH": f"{forbidden}{os.pathsep}{os.environ['PATH']}"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert not (forbidden / "called").exists()


def test_pull_says_which_tasks_cannot_be_had(run_cli, tmp_path, registry):
    path, _ = registry
    proc = _cli(run_cli, tmp_path, "pull", "broken", "--registry-path", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gone: no folder t/gone" in proc.stdout
    assert "1 of 2 tasks in the cache" in proc.stdout and "1 cannot be had" in proc.stdout


@pytest.mark.parametrize("command", ["show", "pull"])
def test_an_unknown_dataset_names_the_closest(run_cli, tmp_path, registry, command):
    path, _ = registry
    proc = _cli(run_cli, tmp_path, command, "demo-bnech", "--registry-path", str(path))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said
    assert "did you mean demo-bench" in said and "Traceback" not in said


def test_a_registry_that_is_not_json_is_one_line(run_cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    proc = _cli(run_cli, tmp_path, "list", "--registry-path", str(bad))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3 and f"registry {bad}: not JSON" in said, said


def test_two_pulls_at_once_clone_once_and_both_succeed(run_cli, tmp_path, registry):
    """Two processes, one dataset: they take turns on the commit's lock; the second finds
    the folders and makes no clone of its own."""
    import subprocess

    from conftest import REPO, sandlot_cmd

    path, _ = registry
    counter = _counting_git(tmp_path / "git-log")
    env = {**os.environ, "PATH": f"{counter}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO / "tests")}
    cmd = sandlot_cmd("datasets", "pull", "demo-bench@1.9", "--registry-path", str(path),
                      "--cache-dir", str(tmp_path / "cache"))
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all("2 of 2 tasks in the cache" in out for out in outs), outs
    clones = (counter / "calls").read_text().splitlines()
    assert sum(1 for line in clones if " clone " in f" {line} ") == 1, clones


def test_a_pull_killed_mid_fetch_leaves_nothing_used_and_the_next_completes(run_cli, tmp_path,
                                                                            registry):
    import signal
    import subprocess
    import time

    from conftest import REPO, sandlot_cmd

    path, _ = registry
    slow = _counting_git(tmp_path / "slow-git", sleep_on="checkout")
    env = {**os.environ, "PATH": f"{slow}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(REPO / "tests")}
    cmd = sandlot_cmd("datasets", "pull", "demo-bench@1.9", "--registry-path", str(path),
                      "--cache-dir", str(tmp_path / "cache"))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (slow / "sleeping").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "never reached checkout"
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)  # the process group this test started
    finally:
        proc.wait(timeout=30)
    cache = tmp_path / "cache" / "datasets"
    assert not list((cache / "git").glob("*/*/*/alpha")), "a half fetch was put in place"
    proc = _cli(run_cli, tmp_path, "pull", "demo-bench@1.9", "--registry-path", str(path))
    assert proc.returncode == 0 and "2 of 2 tasks in the cache" in proc.stdout, proc.stdout
    assert len(list((cache / "git").glob("*/*/*/alpha"))) == 1
    assert not any((cache / "staging").iterdir())


def _counting_git(folder: Path, sleep_on: str | None = None) -> Path:
    """A `git` that logs each call and runs the real one (sleeping first on `sleep_on`)."""
    import shutil

    real = shutil.which("git")
    folder.mkdir(parents=True)
    pause = (f'case " $* " in *" {sleep_on} "*) touch {folder}/sleeping; sleep 120;; esac\n'
             if sleep_on else "")
    script = folder / "git"
    script.write_text(f'#!/bin/sh\necho "$*" >> {folder}/calls\n{pause}exec {real} "$@"\n')
    script.chmod(0o755)
    return folder
