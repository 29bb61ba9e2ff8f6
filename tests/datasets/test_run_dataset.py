"""`sandlot run -d NAME[@VERSION]` end to end: a registry served over real HTTP on
loopback, tasks in real git repositories (file:// URLs), the oracle in real sandboxes."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from git_support import commit, new_repo, refusing_git, registry_entry, task_files, write_registry

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on 127.0.0.1; the base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def world(tmp_path: Path) -> dict[str, object]:
    """Two repositories; dataset `demo` at 1.0 (first commits) and 2.0 (later ones, where
    task b moved), and `other` 0.1 with a task whose path is not in its commit."""
    one = new_repo(tmp_path / "repos" / "one")
    c1 = commit(one, {**task_files("tasks/a", marker="one"),
                      **task_files("tasks/b", marker="bee")})
    c2 = commit(one, {**task_files("tasks/a", marker="two"),
                      **{k: None for k in task_files("tasks/b")},
                      **task_files("moved/b", marker="bee")})
    two = new_repo(tmp_path / "repos" / "two")
    d1 = commit(two, task_files("c", marker="sea"))
    u1, u2 = f"file://{one}", f"file://{two}"
    served = tmp_path / "www"
    served.mkdir()
    write_registry(served / "registry.json", [
        registry_entry("demo", "1.0", [("a", u1, c1, "tasks/a"), ("b", u1, c1, "tasks/b"),
                                       ("c", u2, d1, "c")], "the demo, first cut"),
        registry_entry("demo", "2.0", [("a", u1, c2, "tasks/a"), ("b", u1, c2, "moved/b"),
                                       ("c", u2, d1, "c")], "the demo, second cut"),
        registry_entry("other", "0.1", [("b", u1, c2, "tasks/b"), ("c", u2, d1, "c")]),
    ])
    return {"served": served, "commits": (c1, c2, d1), "urls": (u1, u2)}


def _run(run_cli, tmp_path: Path, job: str, *args: str, env: dict[str, str] | None = None):
    return run_cli("run", "--agent", "oracle", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", job, "--cache-dir", str(tmp_path / "cache"), *args, env=env)


def _results(job: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in job.glob("*/result.json")}


def test_a_dataset_by_name_runs_at_its_commits_and_records_where_each_task_came_from(
        run_cli, tmp_path, world):
    _, c2, d1 = world["commits"]
    u1, _ = world["urls"]
    with serve(world["served"]) as base:
        url = f"{base}/registry.json"
        proc = _run(run_cli, tmp_path, "newest", "-d", "demo", "--registry-url", url, "-n", "2")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = proc.stdout + proc.stderr
        assert "demo@2.0 (newest version" in out and "3 of 3 tasks" in out
        results = _results(tmp_path / "jobs" / "newest")
        assert sorted(results) == ["a__1", "b__1", "c__1"]
        assert all(r["passed"] for r in results.values()), results
        a = results["a__1"]["task_source"]
        assert a == {"dataset": "demo", "version": "2.0", "version_from": "newest",
                     "registry": url, "task": "a", "git_url": u1, "git_commit_id": c2,
                     "path": "tasks/a"}
        assert results["b__1"]["task_source"]["path"] == "moved/b"
        assert results["c__1"]["task_source"]["git_commit_id"] == d1
        config = json.loads((tmp_path / "jobs" / "newest" / "config.json").read_text())
        assert config["task_sources"]["a"]["git_commit_id"] == c2
        assert config["tasks_dir"] is None
        assert Path(config["task_paths"]["a"]).is_dir()

        # The registry goes away and git may not run: the cache answers for a version
        # already fetched, and says it used its copy of the registry.
    forbidden = refusing_git(tmp_path / "no-git")
    no_git = {"PATH": f"{forbidden}{os.pathsep}{os.environ['PATH']}"}
    proc = _run(run_cli, tmp_path, "offline", "-d", "demo@2.0", "--registry-url", url,
                "--task-name", "a", env=no_git)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "using the copy fetched" in proc.stdout + proc.stderr
    assert not (forbidden / "called").exists()
    assert sorted(_results(tmp_path / "jobs" / "offline")) == ["a__1"]


def test_a_version_given_runs_that_version_and_resume_refuses_another(run_cli, tmp_path,
                                                                       world):
    c1, _, _ = world["commits"]
    registry = str(world["served"] / "registry.json")
    proc = _run(run_cli, tmp_path, "pinned", "-d", "demo@1.0", "--registry-path", registry,
                "--exclude-task-name", "c")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(tmp_path / "jobs" / "pinned")
    assert sorted(results) == ["a__1", "b__1"]
    assert results["a__1"]["task_source"]["version_from"] == "given"
    assert results["a__1"]["task_source"]["git_commit_id"] == c1
    assert results["a__1"]["passed"]

    again = _run(run_cli, tmp_path, "pinned", "-d", "demo@2.0", "--registry-path", registry,
                 "--exclude-task-name", "c")
    assert again.returncode == 2, again.stdout + again.stderr
    said = again.stdout + again.stderr
    assert "tasks come from elsewhere" in said and "demo@1.0" in said and "demo@2.0" in said


def test_a_task_missing_from_its_commit_is_task_invalid_and_the_rest_run(run_cli, tmp_path,
                                                                         world):
    registry = str(world["served"] / "registry.json")
    proc = _run(run_cli, tmp_path, "holes", "-d", "other", "--registry-path", registry,
                "--max-error-rate", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(tmp_path / "jobs" / "holes")
    assert results["b__1"]["error"]["kind"] == "task_invalid"
    assert "no folder tasks/b" in results["b__1"]["error"]["message"]
    assert results["c__1"]["passed"]


def test_folders_and_datasets_mix_and_twin_names_are_refused(run_cli, tmp_path, world,
                                                              make_task):
    registry = str(world["served"] / "registry.json")
    make_task("solo")
    proc = _run(run_cli, tmp_path, "mixed", str(tmp_path / "tasks"), "-d", "demo@1.0",
                "--registry-path", registry, "--task-name", "solo", "--task-name", "c")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(tmp_path / "jobs" / "mixed")
    assert sorted(results) == ["c__1", "solo__1"]
    assert results["solo__1"]["task_source"] is None
    assert results["c__1"]["task_source"]["dataset"] == "demo"

    make_task("c")
    twin = _run(run_cli, tmp_path, "twins", str(tmp_path / "tasks"), "-d", "demo@1.0",
                "--registry-path", registry)
    assert twin.returncode == 3, twin.stdout + twin.stderr
    assert "two tasks are named c" in twin.stdout + twin.stderr
    assert not (tmp_path / "jobs" / "twins").exists()


@pytest.mark.parametrize(("ref", "needle"), [
    ("dmeo", "no dataset named dmeo in "),
    ("demo@9.9", "dataset demo has no version 9.9"),
])
def test_an_unknown_dataset_or_version_is_one_line_and_nothing_runs(run_cli, tmp_path, world,
                                                                    ref, needle):
    registry = str(world["served"] / "registry.json")
    proc = _run(run_cli, tmp_path, "bad", "-d", ref, "--registry-path", registry)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said
    assert needle in said and "Traceback" not in said
    assert ("did you mean demo" in said) if ref == "dmeo" else ("versions: 1.0, 2.0" in said)
    assert not (tmp_path / "jobs" / "bad").exists()


def test_an_unreachable_registry_or_repository_is_one_line_naming_it(run_cli, tmp_path,
                                                                     world):
    proc = _run(run_cli, tmp_path, "noreg", "-d", "demo",
                "--registry-url", "http://127.0.0.1:9/registry.json")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said
    assert "registry http://127.0.0.1:9/registry.json: cannot fetch it" in said

    gone = tmp_path / "gone.json"
    write_registry(gone, [registry_entry("lost", "1", [
        ("a", f"file://{tmp_path}/no-such-repo", "abc1234", "a")])])
    proc = _run(run_cli, tmp_path, "norepo", "-d", "lost", "--registry-path", str(gone))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said
    assert f"file://{tmp_path}/no-such-repo" in said and "Traceback" not in said
