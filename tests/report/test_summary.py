"""summary.json figures: pass@k (unbiased estimator), pass rates, errors kept apart, timing."""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations
from math import comb

import pytest

from sandlot.errors import ErrorKind
from sandlot.models import ErrorInfo, Integrity, TrialResult
from sandlot.report.summary import pass_at_k, summarize, task_pass_at_k
from sandlot.report.table import failed_text


def brute_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Share of the k-subsets of n trials (the first c passed) holding at least one pass."""
    subsets = list(combinations(range(n), k))
    hits = sum(1 for s in subsets if any(i < c for i in s))
    return Fraction(hits, len(subsets))


def trial(task: str, attempt: int, *, passed: bool = False, reward: float | None = None,
          error: ErrorKind | None = None, timing: dict[str, float] | None = None,
          ) -> TrialResult:
    if reward is None and error is None:
        reward = 1.0 if passed else 0.0
    return TrialResult(
        trial_name=f"{task}__{attempt}", task=task, attempt=attempt, agent="oracle",
        reward=reward, rewards={} if reward is None else {"reward": reward}, passed=passed,
        error=None if error is None else ErrorInfo(kind=error, message="boom", phase="agent"),
        timing=timing or {},
    )


# ---------------------------------------------------------------- pass_at_k


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_matches_brute_force_enumeration(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            expected = brute_pass_at_k(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12), (n, c, k)


@pytest.mark.parametrize(("n", "c", "k"), [(10, 3, 1), (10, 3, 5), (20, 1, 10), (50, 7, 3),
                                           (100, 0, 5), (100, 100, 5), (200, 1, 1)])
def test_pass_at_k_matches_the_closed_form(n: int, c: int, k: int) -> None:
    expected = 1 - Fraction(comb(n - c, k), comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12)


def test_pass_at_1_is_the_pass_rate() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def test_pass_at_k_edges() -> None:
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 5) == 1.0
    assert pass_at_k(5, 1, 5) == 1.0  # every 5-subset of 5 holds the one pass
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k


def test_pass_at_k_grows_with_k() -> None:
    values = [pass_at_k(10, 2, k) for k in range(1, 11)]
    assert values == sorted(values)


def test_pass_at_k_with_k_above_n_is_refused() -> None:
    with pytest.raises(ValueError, match="k=3"):
        pass_at_k(2, 1, 3)


# ---------------------------------------------------------------- task_pass_at_k


def test_task_pass_at_k_is_the_mean_over_tasks() -> None:
    results = [
        trial("a", 1, passed=True), trial("a", 2, passed=False), trial("a", 3, passed=False),
        trial("b", 1, passed=False), trial("b", 2, passed=False), trial("b", 3, passed=False),
    ]
    out = task_pass_at_k(results, 3)
    assert set(out) == {"1", "2", "3"}
    assert out["1"] == pytest.approx((1 / 3 + 0) / 2, abs=1e-6)
    assert out["2"] == pytest.approx((2 / 3 + 0) / 2, abs=1e-6)
    assert out["3"] == pytest.approx((1 + 0) / 2, abs=1e-6)


def test_task_pass_at_k_excludes_errored_trials() -> None:
    results = [
        trial("a", 1, passed=True),
        trial("a", 2, error=ErrorKind.SANDBOX_SETUP_FAILED),
        trial("b", 1, passed=False),
        trial("b", 2, passed=True),
    ]
    out = task_pass_at_k(results, 2)
    # task a: 1 scored trial, passed -> pass@1 = 1; b: 1 of 2 -> 0.5.
    assert out["1"] == pytest.approx(0.75)
    # only b has 2 scored trials, so only b counts for pass@2.
    assert out["2"] == pytest.approx(1.0)


def test_task_pass_at_k_an_errored_trial_is_not_a_failure() -> None:
    with_error = task_pass_at_k([trial("a", 1, passed=True),
                                 trial("a", 2, error=ErrorKind.AGENT_TIMEOUT)], 1)
    assert with_error == {"1": 1.0}


def test_task_pass_at_k_leaves_out_k_nobody_reached() -> None:
    results = [trial("a", 1, passed=True), trial("a", 2, error=ErrorKind.INTERNAL_ERROR)]
    assert task_pass_at_k(results, 2) == {"1": 1.0}
    assert task_pass_at_k([trial("a", 1, error=ErrorKind.CANCELLED)], 2) == {}
    assert task_pass_at_k([], 3) == {}


# ---------------------------------------------------------------- summarize


@pytest.fixture
def mixed() -> list[TrialResult]:
    return [
        trial("a", 1, passed=True, timing={"setup": 1.0, "agent": 2.0, "verify": 1.0}),
        trial("a", 2, passed=False, reward=0.5, timing={"setup": 3.0, "agent": 4.0,
                                                        "verify": 1.0}),
        trial("b", 1, passed=True, timing={"setup": 2.0, "agent": 3.0, "verify": 1.0}),
        trial("b", 2, error=ErrorKind.AGENT_TIMEOUT, timing={"setup": 2.0, "agent": 10.0}),
        trial("c", 1, error=ErrorKind.REWARD_PARSE_ERROR, timing={"setup": 1.0}),
        trial("c", 2, error=ErrorKind.AGENT_TIMEOUT, timing={"setup": 1.0}),
    ]


def test_summarize_counts_passed_failed_errored_apart(mixed: list[TrialResult]) -> None:
    s = summarize("job", "oracle", None, 8, 2, mixed)
    assert (s.n_trials, s.n_passed, s.n_failed, s.n_errored) == (6, 2, 1, 3)
    assert s.n_passed + s.n_failed + s.n_errored == s.n_trials
    assert s.n_trials_planned == 8


def test_summarize_pass_rate_excludes_errors_pass_rate_all_counts_them(
        mixed: list[TrialResult]) -> None:
    s = summarize("job", "oracle", None, 6, 2, mixed)
    assert s.pass_rate == pytest.approx(2 / 3, abs=1e-6)
    assert s.pass_rate_all == pytest.approx(2 / 6, abs=1e-6)


def test_summarize_mean_reward_is_over_scored_trials(mixed: list[TrialResult]) -> None:
    s = summarize("job", "oracle", None, 6, 2, mixed)
    assert s.mean_reward == pytest.approx((1.0 + 0.5 + 1.0) / 3, abs=1e-6)


def test_summarize_errors_by_kind(mixed: list[TrialResult]) -> None:
    s = summarize("job", "oracle", None, 6, 2, mixed)
    assert s.errors_by_kind == {"agent_timeout": 2, "reward_parse_error": 1}
    assert list(s.errors_by_kind) == sorted(s.errors_by_kind)
    assert s.n_cancelled == 0


def test_summarize_timing_per_phase_over_every_trial(mixed: list[TrialResult]) -> None:
    s = summarize("job", "oracle", None, 6, 2, mixed)
    assert set(s.timing) == {"setup", "agent", "verify"}
    assert s.timing["setup"].total_sec == pytest.approx(10.0)
    assert s.timing["setup"].mean_sec == pytest.approx(10.0 / 6, abs=1e-4)
    assert s.timing["agent"].total_sec == pytest.approx(19.0)
    assert s.timing["agent"].mean_sec == pytest.approx(19.0 / 4, abs=1e-4)
    assert s.timing["verify"].mean_sec == pytest.approx(1.0)


def test_summarize_pass_at_k_leaves_errors_out(mixed: list[TrialResult]) -> None:
    s = summarize("job", "oracle", None, 6, 2, mixed)
    assert s.pass_at_k == task_pass_at_k(mixed, 2)
    # a: 1 of 2; b: 1 of 1 scored; c: no scored trial.
    assert s.pass_at_k["1"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-6)
    assert s.pass_at_k["2"] == pytest.approx(1.0)


def test_summarize_counts_cancelled_trials() -> None:
    results = [trial("a", 1, passed=True), trial("a", 2, error=ErrorKind.CANCELLED)]
    s = summarize("job", "oracle", "m", 2, 2, results, n_resumed=1, complete=True)
    assert s.n_cancelled == 1
    assert s.errors_by_kind == {"cancelled": 1}
    assert (s.n_resumed, s.complete, s.model) == (1, True, "m")


def test_summarize_all_errored_has_no_pass_rate_but_a_zero_pass_rate_all() -> None:
    results = [trial("a", 1, error=ErrorKind.SANDBOX_SETUP_FAILED)]
    s = summarize("job", "oracle", None, 1, 1, results)
    assert (s.n_passed, s.n_failed, s.n_errored) == (0, 0, 1)
    assert s.pass_rate is None
    assert s.pass_rate_all == 0.0
    assert s.mean_reward is None
    assert s.pass_at_k == {}


def test_summarize_with_no_results() -> None:
    s = summarize("job", "oracle", None, 4, 1, [])
    assert (s.n_trials, s.n_passed, s.n_failed, s.n_errored) == (0, 0, 0, 0)
    assert s.pass_rate is None and s.pass_rate_all is None and s.mean_reward is None
    assert s.pass_at_k == {} and s.errors_by_kind == {} and s.timing == {}
    assert s.complete is False


def test_summarize_partial_credit_is_a_failure_with_its_reward() -> None:
    results = [trial("p", 1, passed=False, reward=0.6), trial("p", 2, passed=True)]
    s = summarize("job", "oracle", None, 2, 2, results)
    assert (s.n_passed, s.n_failed) == (1, 1)
    assert s.mean_reward == pytest.approx(0.8)
    assert s.pass_rate == pytest.approx(0.5)


def test_summary_json_has_the_contract_fields(mixed: list[TrialResult]) -> None:
    data = summarize("job", "oracle", None, 6, 2, mixed).model_dump(mode="json")
    for key in ["schema_version", "n_trials", "n_passed", "n_failed", "n_errored", "pass_rate",
                "mean_reward", "pass_at_k", "errors_by_kind"]:
        assert key in data
    assert set(data["pass_at_k"]) == {"1", "2"}


# ---------------------------------------------------------------- who caused it


def test_tampered_and_broken_verifier_failures_are_counted_apart_from_honest_ones() -> None:
    tampered = trial("a", 1, reward=0.0)
    tampered.integrity = Integrity(status="tampered", reason="a tree deeper than 256",
                                   paths=["/app/d"])
    broke = trial("a", 2, reward=0.0)
    broke.integrity = Integrity()
    broke.verifier_failure = {"kind": "reward_missing", "message": "no reward",
                              "caused_by": "agent", "pristine_reward": 1.0}
    neutralized = trial("b", 1, passed=True)
    neutralized.integrity = Integrity(status="neutralized", neutralized=[
        {"path": "/usr/local/bin/pytest", "reason": "replaced", "action": "restored"}])
    honest = trial("b", 2, reward=0.0)
    s = summarize("job", "oracle", None, 4, 2, [tampered, broke, neutralized, honest])
    assert (s.n_passed, s.n_failed, s.n_errored) == (1, 3, 0)
    assert (s.n_tampered, s.n_verifier_broken, s.n_neutralized) == (1, 1, 1)
    assert s.pass_rate == pytest.approx(0.25)
    text = failed_text(s)
    assert text.startswith("3 (1 honest, ") and "1 tampered" in text
    assert "1 broke the verifier" in text


def test_errors_are_counted_by_who_caused_them() -> None:
    results = [trial("a", 1, error=ErrorKind.VERIFIER_ERROR),
               trial("a", 2, error=ErrorKind.SANDBOX_SETUP_FAILED),
               trial("b", 1, error=ErrorKind.VERIFIER_ERROR), trial("b", 2, passed=True)]
    assert results[0].error is not None and results[1].error is not None
    results[0].error.caused_by = "task"
    results[1].error.caused_by = "sandlot"
    s = summarize("job", "oracle", None, 4, 2, results)
    assert s.errors_by_cause == {"sandlot": 1, "task": 1, "unknown": 1}
    assert s.n_tampered == 0 and failed_text(s) == "0"


def test_results_written_before_the_integrity_status_still_load() -> None:
    old = trial("a", 1, passed=True).model_dump(mode="json")
    old["integrity"] = {"neutralized": [{"path": "/x", "reason": "r", "action": "a"}]}
    assert TrialResult.model_validate(old).integrity == Integrity(
        status="neutralized", neutralized=[{"path": "/x", "reason": "r", "action": "a"}])
    old["integrity"] = {"status": "tampered", "reason": "why", "paths": ["/p"]}
    loaded = TrialResult.model_validate(old).integrity
    assert loaded is not None and (loaded.status, loaded.caps_hit) == ("tampered", [])
