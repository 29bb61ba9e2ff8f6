"""Multi-step tasks (`[[steps]]`) through the real CLI: steps run in order in one sandbox,
each with its own instruction, tests and solution; `min_reward` stops the rest; the
trial's reward follows `multi_step_reward_strategy`; repairs apply per step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, write_task
from multi_step_fixture import three_steps
from sandlot.steps import ScoredStep, min_reward_failure, trial_reward

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

def run_job(run_cli, tasks: Path, jobs: Path, *extra: str) -> dict:
    proc = run_cli("run", str(tasks), "--jobs-dir", str(jobs), "--job-name", "j", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((jobs / "j" / "summary.json").read_text())


def test_three_steps_run_in_order_in_one_sandbox(run_cli, tmp_path):
    three_steps(tmp_path / "tasks", "counter")
    summary = run_job(run_cli, tmp_path / "tasks", tmp_path / "jobs", "--agent", "oracle")
    trial = tmp_path / "jobs" / "j" / "counter__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["error"] is None, result["error"]
    assert [s["name"] for s in result["steps"]] == ["create", "extend", "finish"]
    assert [s["reward"] for s in result["steps"]] == [1.0, 1.0, 1.0]
    assert result["reward"] == 1.0 and result["passed"]
    assert result["multi_step"] == {"strategy": "mean", "n_steps": 3, "n_run": 3,
                                    "stopped_after": None, "stop_reason": None}
    for step in ("create", "extend", "finish"):
        assert (trial / "steps" / step / "verifier" / "test_stdout.txt").is_file()
        assert (trial / "steps" / step / "agent" / "solve.stdout.txt").is_file()
    create = (trial / "steps" / "create" / "verifier" / "test_stdout.txt").read_text()
    extend = (trial / "steps" / "extend" / "verifier" / "test_stdout.txt").read_text()
    assert "only-create.txt" in create and "only-create.txt" not in extend
    assert "lines=2 expect=2" in extend  # the step's env over the task's
    diff = (trial / "steps" / "extend" / "agent" / "workspace.diff").read_text()
    assert "staged for extend" in diff and "set-up.txt" in diff
    assert summary["steps"]["extend"] == {"n_run": 1, "n_scored": 1, "n_passed": 1,
                                          "mean_reward": 1.0, "n_stopped": 0}


@pytest.mark.parametrize(("strategy", "reward"), [("mean", 0.5), ("final", 0.0)])
def test_a_step_below_its_min_reward_stops_the_rest(run_cli, tmp_path, strategy, reward):
    three_steps(tmp_path / "tasks", "gated", strategy=strategy,
                extend_solution="echo wrong > /app/log.txt")
    summary = run_job(run_cli, tmp_path / "tasks", tmp_path / "jobs", "--agent", "oracle")
    trial = tmp_path / "jobs" / "j" / "gated__1"
    result = json.loads((trial / "result.json").read_text())
    assert [s["name"] for s in result["steps"]] == ["create", "extend"]
    assert result["multi_step"]["stopped_after"] == "extend"
    assert "min_reward" in result["multi_step"]["stop_reason"]
    assert result["reward"] == reward and not result["passed"]
    assert result["error"] is None  # a failure, not an error
    assert not (trial / "steps" / "finish").exists()
    assert summary["n_failed"] == 1 and summary["steps"]["extend"]["n_stopped"] == 1
    assert "finish" not in summary["steps"]


def test_repairs_apply_to_each_step(run_cli, tmp_path):
    check = """\
#!/bin/bash
if [ "$(cat /app/answer.txt)" = 42 ]; then echo 1 > /logs/verifier/reward.txt
else echo "not the answer: $(cat /app/answer.txt)"; echo 0 > /logs/verifier/reward.txt; fi
"""
    task = write_task(tmp_path / "tasks", "answers", task_toml=(
        '[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        '[[steps]]\nname = "first"\n[[steps]]\nname = "second"\n'), files={
            "tests/test.sh": check,
            "steps/first/instruction.md": "Write 42 to /app/answer.txt.\n",
            "steps/second/instruction.md": "Write 42 to /app/answer.txt again.\n"})
    (task / "instruction.md").unlink()
    run_job(run_cli, tmp_path / "tasks", tmp_path / "jobs", "--agent", "builtin",
            "--model", "scripted/repairer", "--scripts-dir", str(REPO / "tests" / "scripted"),
            "--repair-attempts", "2")
    trial = tmp_path / "jobs" / "j" / "answers__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["passed"] and result["error"] is None, result
    for step in result["steps"]:
        assert step["passed"] and step["repaired"], step
        assert [a["evaluation"]["reward"] for a in step["attempts"]] == [0.0, 1.0]
        assert (trial / "steps" / step["name"] / "repairs").is_dir()
    assert result["usage"]["n_requests"] == 8  # four per step, through one gateway key


def test_every_step_file_problem_is_named_up_front(run_cli, make_task, tmp_path):
    task = make_task("broken", task_toml='[[steps]]\nname = "a"\n[[steps]]\nname = "b"\n',
                     files={"steps/a/instruction.md": " \n"})
    (task / "tests" / "test.sh").unlink()
    proc = run_cli("tasks", "check", str(task))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "steps/a/instruction.md: empty" in out
    assert "steps/a/tests/test.sh: missing, and the task has no tests/test.sh" in out
    assert "steps/b: missing" in out
    clash = make_task("clash", task_toml='[[steps]]\nname = "a"\n[[steps]]\nname = "A"\n')
    assert "'a' and 'A' would share a folder" in run_cli("tasks", "check", str(clash)).stdout
    slash = make_task("slash", task_toml='[[steps]]\nname = "a"\n[[steps]]\nname = "x/y"\n')
    out = run_cli("tasks", "check", str(slash)).stdout
    assert "steps.1.name" in out and "portable folder name" in out


def test_the_reward_strategies() -> None:
    steps = [ScoredStep("a", 1.0, {"reward": 1.0, "style": 0.5}),
             ScoredStep("b", None, {}),
             ScoredStep("c", 0.0, {"reward": 0.0})]
    assert trial_reward("mean", steps) == (0.5, {"reward": 0.5, "style": 0.25})
    assert trial_reward(None, steps) == trial_reward("mean", steps)
    assert trial_reward("final", steps) == (0.0, {"reward": 0.0})
    assert trial_reward("final", steps[:2]) == (None, {})
    assert trial_reward("mean", []) == (None, {})


def test_min_reward_gates_on_the_keys_it_names() -> None:
    assert min_reward_failure({"reward": 1.0}, 1.0) is None
    assert "reward = 0.5" in (min_reward_failure({"reward": 0.5}, 0.9) or "")
    assert "missing" in (min_reward_failure({"reward": 1.0}, {"style": 0.5}) or "")
    assert min_reward_failure(None, 0.0) is not None  # not scored: -inf
    assert min_reward_failure({"a": 1.0, "b": 0.2}, {"a": 0.5}) is None
