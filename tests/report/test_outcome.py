"""One definition of passed / failed / errored / cancelled / tampered, for the summary, the
end-of-run table and the viewer alike."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from sandlot.errors import ErrorKind
from sandlot.models import ErrorInfo, Integrity, TrialResult
from sandlot.report.outcome import count_outcomes, trial_outcome
from sandlot.report.summary import summarize
from sandlot.viewer.jobs import trial_row, trial_slots

pytestmark = pytest.mark.timeout(60)


def result(task: str, attempt: int, reward: float | None, kind: ErrorKind | None = None,
           phase: str = "agent") -> TrialResult:
    return TrialResult(
        trial_name=f"{task}__{attempt}", task=task, attempt=attempt, agent="pi",
        reward=reward, rewards={} if reward is None else {"reward": reward},
        passed=reward == 1.0,
        error=None if kind is None else ErrorInfo(kind=kind, message="x", phase=phase))


def mixed() -> list[TrialResult]:
    tampered = result("t", 1, 0.0)
    tampered.integrity = Integrity(status="tampered", reason="x")
    return [
        result("a", 1, 1.0),
        result("a", 2, 0.0),
        # The agent's own timeout is scored: a failure that carries an error kind.
        result("b", 1, 0.0, ErrorKind.AGENT_TIMEOUT),
        result("b", 2, None, ErrorKind.BUILD_FAILED, phase="setup"),
        result("c", 1, None, ErrorKind.CANCELLED),
        result("c", 2, None, ErrorKind.PROVIDER_ERROR),
        tampered,
    ]


def test_each_trial_has_one_outcome_and_the_counts_add_up() -> None:
    results = mixed()
    assert [trial_outcome(r) for r in results] == [
        "passed", "failed", "failed", "errored", "cancelled", "errored", "failed"]
    counts = count_outcomes(results)
    assert (counts.passed, counts.failed, counts.errored, counts.cancelled,
            counts.tampered) == (1, 3, 3, 1, 1)
    assert counts.passed + counts.failed + counts.errored == len(results)


def test_the_viewer_and_the_summary_count_alike(tmp_path: Path) -> None:
    job = tmp_path / "job"
    results = mixed()
    for r in results:
        (job / r.trial_name).mkdir(parents=True)
        (job / r.trial_name / "result.json").write_text(r.model_dump_json())
    rows = [trial_row(s) for s in trial_slots(job, None)]
    summary = summarize("job", "pi", None, len(results), 1, results)
    status = Counter(row["status"] for row in rows)
    # The viewer's filters: "errored" is status errored or cancelled, "tampered" the flag.
    assert status["passed"] == summary.n_passed == 1
    assert status["failed"] == summary.n_failed == 3
    assert status["errored"] + status["cancelled"] == summary.n_errored == 3
    assert sum(row["tampered"] for row in rows) == summary.n_tampered == 1
    assert summary.n_cancelled == status["cancelled"] == 1
