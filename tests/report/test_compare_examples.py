"""compare and export on real jobs: the example tasks run by the built-in agent with four
scripted models whose outcomes are known in advance, checked against a hand count.

The models (see viewer_support.EXAMPLE_JOBS): `solver` solves all 9 tasks; `giveup`
solves none; `first5` solves the first five tasks by name; `last5` the last five.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from sandlot.report.compare import compare_jobs
from sandlot.report.export import export_atif
from viewer.viewer_support import TASKS, AtifTrajectory, build_example_jobs, run_report

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    return build_example_jobs(tmp_path_factory.getbasetemp(), cache_dir)


def test_the_example_jobs_score_as_their_scripts_intend(jobs: Path) -> None:
    expected = {"solver": set(TASKS), "giveup": set(), "first5": set(TASKS[:5]),
                "last5": set(TASKS[-5:])}
    for name, passing in expected.items():
        results = [json.loads(p.read_text()) for p in (jobs / name).glob("*/result.json")]
        assert len(results) == len(TASKS) == 9
        assert {r["task"] for r in results if r["passed"]} == passing, name
        assert all(r["error"] is None for r in results)


def test_first5_vs_last5_flips_both_ways_and_is_not_significant(jobs: Path) -> None:
    # Hand count: both pass TASKS[4]; first5 alone passes TASKS[0:4] (4 lost), last5
    # alone passes TASKS[5:9] (4 gained). McNemar: b = c = 4, p = 1.
    c = compare_jobs([jobs / "first5", jobs / "last5"])["comparisons"][0]
    assert c["lost"] == TASKS[:4] and c["gained"] == TASKS[5:]
    assert c["n_paired"] == 9 and c["only_a"] == c["only_b"] == [] and c["unscored"] == {}
    assert (c["mcnemar"]["b"], c["mcnemar"]["c"]) == (4, 4)
    assert c["test"] == "mcnemar" and c["p_value"] == 1.0 and c["significant"] is False
    assert c["delta_pass_rate"] == 0.0


def test_solver_vs_first5_gains_four_tasks_but_nine_are_too_few(jobs: Path) -> None:
    # 4 gained, 0 lost: p = 2 * (1/2)^4 = 0.125, not below 0.05.
    c = compare_jobs([jobs / "first5", jobs / "solver"])["comparisons"][0]
    assert c["gained"] == TASKS[5:] and c["lost"] == []
    assert c["p_value"] == pytest.approx(0.125) and not c["significant"]
    assert c["verdict"].startswith("no significant difference")


def test_solver_vs_giveup_is_significant(jobs: Path) -> None:
    # 9 lost, 0 gained: p = 2 * (1/2)^9 = 0.0039 < 0.05.
    data = compare_jobs([jobs / "solver", jobs / "giveup"])
    c = data["comparisons"][0]
    assert c["lost"] == TASKS and c["gained"] == []
    assert c["p_value"] == pytest.approx(2 / 512) and c["significant"]
    assert c["verdict"].startswith("solver is better than giveup")
    solver, giveup = data["jobs"]
    assert solver["pass_rate"] == 1.0 and solver["ci_low"] == pytest.approx(0.70085, abs=1e-4)
    assert giveup["pass_rate"] == 0.0 and giveup["ci_high"] == pytest.approx(0.29915, abs=1e-4)
    # giving up is cheaper per trial
    assert c["delta_cost_per_trial"] < 0 and c["delta_tokens_per_trial"] < 0


def test_compare_command_prints_the_table_flips_and_verdict(jobs: Path) -> None:
    out = run_report("compare", "first5", "last5", "--jobs-dir", str(jobs))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "pass rate [95% CI]" in text and "55.6% [26.7%, 81.1%]" in text
    for task in TASKS[:4]:
        assert task in text
    assert "4 gained" in text and "4 lost" in text
    assert "verdict: no significant difference" in text
    as_json = run_report("compare", str(jobs / "solver"), str(jobs / "giveup"), "-f", "json")
    data = json.loads(as_json.stdout)
    assert data["comparisons"][0]["significant"] is True
    md = run_report("compare", str(jobs / "solver"), str(jobs / "giveup"), "-f", "markdown")
    assert "**solver is better than giveup" in md.stdout
    one = run_report("compare", str(jobs / "solver"))
    assert one.returncode == 2


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_compare_tables_fit_the_width_and_cut_no_figure(jobs: Path, width: int) -> None:
    from rich.console import Console

    from sandlot.report.compare import render_rich

    data = compare_jobs([jobs / "first5", jobs / "last5", jobs / "solver"])
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(render_rich(data))
    text = console.export_text(styles=False)
    tables = text.split("vs first5")[0]  # the comparison lines below wrap as prose
    assert max(len(line.rstrip()) for line in tables.splitlines()) <= width, tables
    # A pass rate with its interval is one figure: never wrapped, never cut.
    assert "55.6% [26.7%, 81.1%]" in tables and "100.0% [70.1%, 100.0%]" in tables
    for task in TASKS:
        assert task in tables
    assert ("not shown at" in tables) == (width < 120)


def test_real_trials_export_as_valid_atif(jobs: Path, tmp_path: Path) -> None:
    for name in ("solver", "giveup"):
        paths = export_atif(jobs / name, tmp_path / name)
        assert len(paths) == 9
        for p in paths:
            data = json.loads(p.read_text())
            AtifTrajectory.model_validate(data)
            agent_steps = [s for s in data["steps"] if s["source"] == "agent"]
            assert agent_steps and all("metrics" in s for s in agent_steps)
            total = sum(s["metrics"]["prompt_tokens"] for s in agent_steps)
            assert total == data["final_metrics"]["total_prompt_tokens"]
    giveup = json.loads((tmp_path / "giveup" / f"{TASKS[0]}__1.json").read_text())
    users = [s["message"] for s in giveup["steps"] if s["source"] == "user"]
    assert len(users) == 2 and "not complete yet" in users[1]  # the repair feedback
