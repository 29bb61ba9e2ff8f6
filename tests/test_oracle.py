"""The oracle runs solve.sh and takes the solution away before the tests, whoever the
agent runs as; what solve.sh printed is kept as it printed it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_task

pytestmark = [pytest.mark.e2e]

SOLUTION_GONE = """
if [ -e /solution ]; then echo 0; else echo 1; fi > /logs/verifier/reward.txt
"""


@pytest.mark.timeout(300)
def test_the_solution_is_gone_before_the_tests_as_root_and_as_a_user(
        run_cli, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    solve = "echo to stdout\necho to stderr >&2\nexit 3\n"
    write_task(tasks, "as-root", solve_sh=solve, test_sh=SOLUTION_GONE)
    write_task(tasks, "as-user", solve_sh=solve, test_sh=SOLUTION_GONE,
               task_toml='[agent]\ntimeout_sec = 60\nuser = "builder"\n'
                         '[verifier]\ntimeout_sec = 60\n')
    proc = run_cli("run", str(tasks), "--agent", "oracle", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "oracle")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("as-root", "as-user"):
        trial = tmp_path / "jobs" / "oracle" / f"{name}__1"
        result = json.loads((trial / "result.json").read_text())
        assert result["error"] is None and result["reward"] == 1.0, (name, result)
        assert (trial / "agent" / "solve.stdout.txt").read_text() == "to stdout\n"
        assert (trial / "agent" / "solve.stderr.txt").read_text() == "to stderr\n"
