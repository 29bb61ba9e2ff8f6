"""`sandlot run --ray local` end to end: the real CLI, a private Ray, one node actor
running real sandboxes, the node's own gateway, results back in the driver's job folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_support import results, same_as_a_local_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def files(trial: Path) -> set[Path]:
    """The trial's files, but the build log: only the first run that builds a layer has one."""
    return {p.relative_to(trial) for p in trial.rglob("*")
            if p.is_file() and p.relative_to(trial) != Path("setup/build.log")}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("agent", [["--agent", "oracle"],
                                   ["--agent", "builtin", "--model", "scripted/solver"]],
                         ids=["oracle", "builtin-scripted"])
def test_examples_on_ray_equal_a_local_run(run_cli, examples_dir, tmp_path, agent):
    ray = run_cli("run", str(examples_dir), *agent, "--ray", "local", "-n", "2",
                  "--jobs-dir", str(tmp_path), "--job-name", "on-ray")
    assert ray.returncode == 0, ray.stdout + ray.stderr
    assert "on Ray (local)" in ray.stdout
    assert "WARNING" not in ray.stderr, ray.stderr  # Ray's own chatter stays out
    on_ray, _ = same_as_a_local_run(run_cli, examples_dir, tmp_path, agent, "on-ray")
    n_tasks = len(on_ray)
    for name, result in on_ray.items():
        trial = tmp_path / "on-ray" / name
        assert result["trial_name"] == name and result["passed"]
        # the node's files came back with the result: logs, the verifier's output
        assert (trial / "trial.log").is_file() and (trial / "verifier").is_dir()
        assert files(trial) == files(tmp_path / "here" / name)
    summary = load(tmp_path / "on-ray" / "summary.json")
    assert summary["n_trials"] == summary["n_passed"] == n_tasks
    assert load(tmp_path / "on-ray" / "config.json")["ray"] == "local"
    if "--model" in agent:
        assert summary["usage"] == load(tmp_path / "here" / "summary.json")["usage"]
        assert all((tmp_path / "on-ray" / name / "trajectory" / "llm_trajectory.jsonl")
                   .stat().st_size > 0 for name in on_ray)


@pytest.mark.timeout(120)
def test_without_ray_installed_one_line_says_how_to_install_it(run_cli, examples_dir,
                                                              tmp_path):
    blocker = tmp_path / "no-ray"
    (blocker / "ray").mkdir(parents=True)
    (blocker / "ray" / "__init__.py").write_text("raise ImportError('no ray here')\n")
    proc = run_cli("run", str(examples_dir / "semver-compare"), "--agent", "oracle",
                   "--ray", "local", "--jobs-dir", str(tmp_path / "jobs"),
                   env={"PYTHONPATH": f"{blocker}:{Path(__file__).parent}"})
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "pip install -e '.[ray]'" in said, said
    assert "Traceback" not in said


@pytest.mark.timeout(300)
def test_the_jobs_budget_holds_over_the_nodes_gateways(run_cli, make_task, tmp_path):
    """The driver sums what the nodes' gateways spent: at the job's budget the running
    trial is cut and nothing more starts, as in a local run (test_budgets.py)."""
    for name in ("a", "b", "c"):
        make_task(name)
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "builtin", "--model",
                   "scripted/runaway", "--max-trial-tokens", "5000", "--max-job-tokens",
                   "7500", "--ray", "local", "-n", "1", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "j", "--json")
    assert proc.returncode == 6, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)["summary"]
    assert summary["stopped_by"] == "job_budget"
    found = results(tmp_path / "jobs" / "j")
    assert found["a__1"]["error"]["kind"] == "budget_exceeded"
    assert found["b__1"]["error"]["kind"] == "cancelled"
    assert "c__1" not in found
