"""`sandlot tasks init NAME`: the new task passes `tasks check` and its oracle as generated."""

from __future__ import annotations

import json
import tomllib

import pytest

pytestmark = pytest.mark.timeout(300)


def test_a_new_task_passes_check_and_its_oracle_as_generated(run_cli, tmp_path):
    made = run_cli("tasks", "init", "acme/hello-task", "--tasks-dir", str(tmp_path / "tasks"),
                   "--description", 'Says "hello"', "--author", "Ada <ada@example.org>")
    assert made.returncode == 0, made.stdout + made.stderr
    folder = tmp_path / "tasks" / "hello-task"
    config = tomllib.loads((folder / "task.toml").read_text())
    assert config["schema_version"] == "1.4"
    assert config["task"]["name"] == "acme/hello-task"
    assert config["task"]["description"] == 'Says "hello"'
    assert config["task"]["authors"] == [{"name": "Ada", "email": "ada@example.org"}]

    check = run_cli("tasks", "check", str(folder))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "1 ok, 0 with errors, 0 warnings" in check.stdout

    oracle = run_cli("run", str(tmp_path / "tasks"), "-a", "oracle",
                     "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "new")
    assert oracle.returncode == 0, oracle.stdout + oracle.stderr
    result = json.loads((tmp_path / "jobs/new/hello-task__1/result.json").read_text())
    assert result["passed"] is True and result["reward"] == 1.0

    nop = run_cli("run", str(tmp_path / "tasks"), "-a", "nop",
                  "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "untouched")
    assert nop.returncode == 0, nop.stdout + nop.stderr
    untouched = json.loads((tmp_path / "jobs/untouched/hello-task__1/result.json").read_text())
    assert untouched["reward"] == 0.0  # the test really tests: nothing done, nothing passed


@pytest.mark.parametrize(("name", "needle"), [
    ("../escape", "is not a task name"),
    ("a/b/c", "is not a task name"),
    ("exists", "already exists"),
])
def test_a_bad_name_or_an_existing_folder_is_one_line_and_writes_nothing(run_cli, tmp_path,
                                                                         name, needle):
    (tmp_path / "tasks" / "exists").mkdir(parents=True)
    (tmp_path / "tasks" / "exists" / "keep.txt").write_text("mine")
    proc = run_cli("tasks", "init", name, "--tasks-dir", str(tmp_path / "tasks"))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and needle in said, said
    assert sorted(p.name for p in (tmp_path / "tasks").iterdir()) == ["exists"]
    assert (tmp_path / "tasks" / "exists" / "keep.txt").read_text() == "mine"
