"""compare's statistics (Wilson, exact McNemar, paired bootstrap) and its handling of
task sets that do not match, on synthetic job folders."""

from __future__ import annotations

from fractions import Fraction
from itertools import product
from pathlib import Path

import pytest

from sandlot.report.compare import (
    compare_jobs,
    mcnemar_exact,
    paired_bootstrap,
    render_markdown,
    wilson_interval,
)
from viewer.viewer_support import write_config, write_result


@pytest.mark.parametrize(("passed", "n", "low", "high"), [
    (0, 9, 0.0, 0.29915),      # z²/(n+z²)
    (9, 9, 0.70085, 1.0),
    (5, 10, 0.23659, 0.76341),
    (1, 20, 0.00888, 0.23613),
])
def test_wilson_interval_matches_reference_values(passed, n, low, high) -> None:
    lo, hi = wilson_interval(passed, n)  # type: ignore[misc]
    assert lo == pytest.approx(low, abs=5e-5) and hi == pytest.approx(high, abs=5e-5)


def test_wilson_interval_of_nothing_is_none() -> None:
    assert wilson_interval(0, 0) is None


def brute_mcnemar(b: int, c: int) -> float:
    """Two-sided exact binomial test by enumerating every sign pattern of the flips."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    as_extreme = sum(1 for signs in product((0, 1), repeat=n)
                     if min(sum(signs), n - sum(signs)) <= k)
    return float(min(Fraction(1), Fraction(as_extreme, 2 ** n)))


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 0), (4, 0), (9, 0), (4, 4), (1, 5),
                                      (2, 7), (6, 3), (0, 12)])
def test_mcnemar_exact_matches_enumeration(b: int, c: int) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(brute_mcnemar(b, c))


def test_mcnemar_hand_counts() -> None:
    assert mcnemar_exact(9, 0) == pytest.approx(2 / 512)   # 9 tasks all lost
    assert mcnemar_exact(0, 4) == pytest.approx(0.125)
    assert mcnemar_exact(4, 4) == 1.0


def test_paired_bootstrap_is_reproducible_with_a_seed() -> None:
    diffs = [1.0, 0.0, 0.5, -0.5, 1.0, 0.0, 1.0]
    a = paired_bootstrap(diffs, seed=7, n_resamples=2000)
    assert a == paired_bootstrap(diffs, seed=7, n_resamples=2000)
    assert a != paired_bootstrap(diffs, seed=8, n_resamples=2000)
    assert a["mean_diff"] == pytest.approx(3 / 7)
    assert a["ci_low"] <= a["mean_diff"] <= a["ci_high"]


def test_paired_bootstrap_extremes() -> None:
    same = paired_bootstrap([0.0] * 9, n_resamples=1000)
    assert same["p_value"] == 1.0 and same["ci_low"] == same["ci_high"] == 0.0
    all_better = paired_bootstrap([1.0] * 9, n_resamples=1000)
    assert all_better["p_value"] == pytest.approx(2 / 1001)
    assert paired_bootstrap([], n_resamples=1000)["p_value"] == 1.0


def job(root: Path, name: str, outcomes: dict[str, list[float | None]]) -> Path:
    """A job whose task t has one trial per listed reward (None: an errored trial)."""
    path = root / name
    k = max(len(v) for v in outcomes.values())
    write_config(path, list(outcomes), n_attempts=k)
    for task, rewards in outcomes.items():
        for attempt, reward in enumerate(rewards, 1):
            if reward is None:
                write_result(path, task, attempt, reward=None, error={
                    "kind": "verifier_timeout", "message": "slow", "phase": "verify"})
            else:
                write_result(path, task, attempt, reward=reward, cost=0.02 if name == "b"
                             else 0.01, total_sec=3.0)
    return path


def test_mismatched_task_sets_are_reported_not_dropped(tmp_path: Path) -> None:
    a = job(tmp_path, "a", {"t1": [1.0], "t2": [0.0], "t3": [1.0], "only-a": [1.0],
                            "err": [None]})
    b = job(tmp_path, "b", {"t1": [1.0], "t2": [1.0], "t3": [0.0], "only-b": [0.0],
                            "err": [1.0]})
    data = compare_jobs([a, b])
    c = data["comparisons"][0]
    assert c["only_a"] == ["only-a"] and c["only_b"] == ["only-b"]
    assert c["unscored"] == {"err": ["a"]}
    assert c["n_shared"] == 4 and c["n_paired"] == 3
    assert c["gained"] == ["t2"] and c["lost"] == ["t3"]
    assert c["test"] == "mcnemar" and c["p_value"] == 1.0 and not c["significant"]
    rows = {r["task"]: r for r in data["tasks"]}
    assert rows["only-b"]["cells"][0]["status"] == "missing"
    assert rows["err"]["cells"][0]["status"] == "errored"
    assert c["delta_cost_per_trial"] == pytest.approx(0.01)
    md = render_markdown(data)
    assert "only in a: only-a" in md and "not scored in both: err" in md


def test_several_attempts_per_task_use_the_paired_bootstrap(tmp_path: Path) -> None:
    tasks = [f"t{i}" for i in range(12)]
    a = job(tmp_path, "a", {t: [0.0, 0.0] for t in tasks})
    b = job(tmp_path, "b", {t: [1.0, 1.0 if i % 3 else 0.0] for i, t in enumerate(tasks)})
    c = compare_jobs([a, b], seed=3)["comparisons"][0]
    assert c["test"] == "bootstrap" and not c["mcnemar"]["applicable"]
    # a task passes on a strict majority: 1 of 2 is not a pass
    assert c["gained"] == sorted(t for i, t in enumerate(tasks) if i % 3)
    assert c["bootstrap"]["mean_diff"] == pytest.approx((8 * 1.0 + 4 * 0.5) / 12)
    assert c["significant"] and c["verdict"].startswith("b is better than a")
    assert c["verdict"] == compare_jobs([a, b], seed=3)["comparisons"][0]["verdict"]


def test_three_jobs_compare_each_with_the_first(tmp_path: Path) -> None:
    base = job(tmp_path, "a", {"t1": [1.0], "t2": [1.0]})
    b = job(tmp_path, "b", {"t1": [0.0], "t2": [1.0]})
    c = job(tmp_path, "c", {"t1": [1.0], "t2": [0.0]})
    data = compare_jobs([base, b, c])
    assert [(x["a"], x["b"], x["lost"]) for x in data["comparisons"]] == [
        ("a", "b", ["t1"]), ("a", "c", ["t2"])]
    assert data["tasks"][0]["flips"] == ["lost", None]


def test_compare_needs_two_jobs(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        compare_jobs([job(tmp_path, "a", {"t": [1.0]})])


def test_tasks_from_other_dataset_versions_are_named_and_still_compared(tmp_path: Path) -> None:
    import json

    def source(version: str, commit: str) -> dict[str, str]:
        return {"dataset": "demo", "version": version, "version_from": "given",
                "registry": "r.json", "task": "t1", "git_url": "file:///repo",
                "git_commit_id": commit, "path": "tasks/t1"}

    a = job(tmp_path, "a", {"t1": [1.0], "t2": [1.0]})
    b = job(tmp_path, "b", {"t1": [0.0], "t2": [1.0]})
    for folder, version, commit in ((a, "1.0", "a" * 40), (b, "2.0", "b" * 40)):
        config = json.loads((folder / "config.json").read_text())
        config["task_sources"] = {"t1": source(version, commit), "t2": source(version, "c" * 40)}
        (folder / "config.json").write_text(json.dumps(config))
    data = compare_jobs([a, b])
    assert [j["datasets"] for j in data["jobs"]] == [["demo@1.0"], ["demo@2.0"]]
    c = data["comparisons"][0]
    assert c["source_changed"] == {"t1": ["demo@1.0 aaaaaaaaaaaa:tasks/t1",
                                          "demo@2.0 bbbbbbbbbbbb:tasks/t1"]}
    assert c["lost"] == ["t1"]  # compared all the same, and said so
    assert "other task files in the two jobs: t1 (demo@1.0" in render_markdown(data)
    assert "(tasks from demo@1.0)" in render_markdown(data)
