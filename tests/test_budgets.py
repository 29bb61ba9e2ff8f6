"""Spend limits through the real CLI: the built-in agent on a model that never stops
(scripted/runaway: 2,500 tokens a turn at $3 / $15 per Mtok), cut at the trial's budget
or the job's; a job stopped by its budget resumes with a larger one and counts what it
had spent; a cost budget on a model without a price is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]

RUNAWAY = ("--agent", "builtin", "--model", "scripted/runaway")


def _results(job: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in job.glob("*/result.json")}


def _exchanges(trial: Path) -> list[dict]:
    lines = (trial / "trajectory" / "llm_trajectory.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_trial_budget_ends_each_trial_as_budget_exceeded_scored_on_its_work(
        run_cli, make_task, tmp_path):
    make_task("one")
    make_task("two", test_sh="echo 0 > /logs/verifier/reward.txt")
    proc = run_cli("run", str(tmp_path / "tasks"), *RUNAWAY, "--max-trial-tokens", "6000",
                   "-n", "2", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(tmp_path / "jobs" / "j")
    for name, result in results.items():
        assert result["error"]["kind"] == "budget_exceeded", result["error"]
        assert result["error"]["caused_by"] == "agent"
        # Three turns answered (7,500 tokens: the third crosses the limit), then refused.
        assert result["usage"]["total_tokens"] == 7500
        statuses = [e["status"] for e in _exchanges(tmp_path / "jobs" / "j" / name)]
        assert statuses == [200, 200, 200, 402], statuses
    assert results["one__1"]["passed"] and not results["two__1"]["passed"]
    summary = json.loads((tmp_path / "jobs" / "j" / "summary.json").read_text())
    assert (summary["n_passed"], summary["n_failed"], summary["n_errored"]) == (1, 1, 0)
    assert summary["n_budget_exceeded"] == 2
    assert summary["errors_by_kind"] == {"budget_exceeded": 2}
    assert "budget_exceeded" in proc.stdout
    config = json.loads((tmp_path / "jobs" / "j" / "config.json").read_text())
    assert config["max_trial_tokens"] == 6000


def test_a_cost_budget_counts_dollars(run_cli, make_task, tmp_path):
    make_task("one")
    proc = run_cli("run", str(tmp_path / "tasks"), *RUNAWAY, "--max-trial-cost-usd", "0.02",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = _results(tmp_path / "jobs" / "j").values()
    assert result["error"]["kind"] == "budget_exceeded"
    assert "$0.0270 of $0.0200" in result["error"]["message"]  # two turns of $0.0135
    assert result["usage"]["cost_usd"] == pytest.approx(0.027)


def test_the_job_budget_stops_the_job_and_a_resume_counts_what_was_spent(
        run_cli, make_task, tmp_path):
    for name in ("a", "b", "c"):
        make_task(name)
    args = ("run", str(tmp_path / "tasks"), *RUNAWAY, "--max-trial-tokens", "5000",
            "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j", "--json")
    proc = run_cli(*args, "--max-job-tokens", "7500")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["exit_reason"] == "budget_reached"
    summary = out["summary"]
    assert summary["stopped_by"] == "job_budget"
    assert "the job's budget (7,500 tokens) was reached" in summary["stopped"]
    # a: its own budget (5,000); b: cut by the job's (cancelled); c: never started.
    results = _results(tmp_path / "jobs" / "j")
    assert results["a__1"]["error"]["kind"] == "budget_exceeded"
    assert results["b__1"]["error"]["kind"] == "cancelled"
    assert results["b__1"]["error"]["caused_by"] == "user"
    assert "c__1" not in results
    assert "Raise --max-job-tokens" in proc.stderr

    # The same budget again: what was spent (b's cut trial too) counts, nothing starts.
    again = run_cli(*args, "--max-job-tokens", "7500")
    assert again.returncode == 6, again.stdout + again.stderr
    assert set(_results(tmp_path / "jobs" / "j")) == {"a__1"}

    # A larger budget finishes the job; a was kept.
    done = run_cli(*args, "--max-job-tokens", "100000")
    assert done.returncode == 0, done.stdout + done.stderr
    results = _results(tmp_path / "jobs" / "j")
    assert {r["error"]["kind"] for r in results.values()} == {"budget_exceeded"}
    assert json.loads(done.stdout)["summary"]["n_resumed"] == 1


@pytest.mark.slow
def test_an_agent_that_ignores_the_refusals_is_stopped_after_the_grace(run_cli, make_task,
                                                                       tmp_path):
    make_task("one", agent_timeout=300)
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent",
                   "sandlot_test_agents:StubbornModelAgent", "--model", "scripted/runaway",
                   "--max-trial-tokens", "5000", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = _results(tmp_path / "jobs" / "j").values()
    assert result["error"]["kind"] == "budget_exceeded"
    assert "did not stop within 30 s and was stopped" in result["error"]["message"]
    assert 30 <= result["timing"]["agent"] < 60
    assert result["usage"]["total_tokens"] == 5000
    assert result["passed"]  # scored: the task's test passes on the untouched workspace


def test_budgets_are_refused_where_they_cannot_hold(run_cli, make_task, tmp_path):
    task = make_task("one")
    no_price = run_cli("run", str(task), "--agent", "builtin", "--model", "scripted/shell-echo",
                       "--max-job-cost-usd", "1")
    assert no_price.returncode == 2
    assert "--max-job-cost-usd: the price of scripted/shell-echo is not known" in (
        no_price.stdout + no_price.stderr)
    no_model = run_cli("run", str(task), "--agent", "oracle", "--max-trial-tokens", "10")
    assert no_model.returncode == 2
    assert "--max-trial-tokens is for the model" in no_model.stdout + no_model.stderr
