"""What a finished trial counts as: the one definition the summary, the end-of-run table
and the viewer all use, so "errored" or "tampered" never means two things.

passed / failed: scored (the verifier's reward decides; an agent's own timeout or crash
is a failure, see `TrialResult.scored`). errored: not scored — the harness, the sandbox,
the task or the provider failed, so the trial says nothing about the agent. cancelled:
not scored because the user stopped the job; counted inside `errored` too (a resume
reruns it). tampered: a failure the agent caused by changing what the verifier relies on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sandlot.errors import ErrorKind
from sandlot.models import TrialResult

Outcome = Literal["passed", "failed", "errored", "cancelled"]


def trial_outcome(result: TrialResult) -> Outcome:
    if result.error is not None and result.error.kind == ErrorKind.CANCELLED:
        return "cancelled"
    if not result.scored:
        return "errored"
    return "passed" if result.passed else "failed"


def is_tampered(result: TrialResult) -> bool:
    """A scored trial failed because what the agent left could not be vouched for."""
    return result.scored and result.tampered


@dataclass(frozen=True)
class OutcomeCounts:
    passed: int
    failed: int
    errored: int  # every trial not scored, the cancelled ones included
    cancelled: int
    tampered: int  # among the failed


def count_outcomes(results: list[TrialResult]) -> OutcomeCounts:
    outcomes = [trial_outcome(r) for r in results]
    return OutcomeCounts(
        passed=outcomes.count("passed"), failed=outcomes.count("failed"),
        errored=outcomes.count("errored") + outcomes.count("cancelled"),
        cancelled=outcomes.count("cancelled"),
        tampered=sum(is_tampered(r) for r in results))
