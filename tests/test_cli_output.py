"""What the CLI writes into a file or a pipe: whole lines, and `run --json` for scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

# No COLUMNS: the width rich picks for a pipe (80), as in a CI log or `> file`.
PIPE = {"COLUMNS": ""}


def deep(tmp_path: Path) -> Path:
    return tmp_path / ("a-folder-with-a-long-name-" * 3) / ("and-another-one-" * 4)


def test_a_long_path_is_written_on_one_line_into_a_pipe(run_cli, tmp_path):
    missing = deep(tmp_path) / "tasks"
    proc = run_cli("tasks", "check", str(missing), env=PIPE)
    assert proc.returncode == 2
    assert len(str(missing)) > 150
    assert any(str(missing) in line for line in (proc.stdout + proc.stderr).splitlines()), (
        proc.stdout + proc.stderr)


def test_run_json_prints_one_object_with_the_summary_and_the_exit_code(run_cli, make_task,
                                                                        tmp_path):
    make_task("fine")
    make_task("broken", test_sh="exit 0\n")  # writes no reward: an error, not a failure
    jobs = deep(tmp_path) / "jobs"
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle", "--jobs-dir",
                   str(jobs), "--job-name", "j", "--json", env=PIPE)
    # Half the trials errored: not above the default --max-error-rate of 0.5.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout  # stdout holds the JSON alone
    out = json.loads(lines[0])
    assert out["exit_code"] == 0 and out["exit_reason"] == "ok"
    assert out["job_dir"] == str(jobs / "j") and out["error_rate"] == 0.5
    summary = json.loads((jobs / "j" / "summary.json").read_text())
    assert out["summary"] == summary
    assert summary["n_passed"] == 1 and summary["n_errored"] == 1
    # The human output went to stderr, its job line whole although longer than 80.
    assert "pass rate (excl. errors)" in proc.stderr
    assert any(str(jobs / "j") in line for line in proc.stderr.splitlines()), proc.stderr

    again = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle", "--jobs-dir",
                    str(jobs), "--job-name", "k", "--json", "--max-error-rate", "0.25",
                    env=PIPE)
    assert again.returncode == 4, again.stdout + again.stderr
    out = json.loads(again.stdout)
    assert out["exit_code"] == 4 and out["exit_reason"] == "too_many_errors"
    assert "too many errors" in again.stderr
