"""How a multi-step trial's steps add up (Harbor 0.26's rules): when a step stops the
ones after it, and what the trial's reward is.

- A step that could not be scored (its setup, sandbox or verifier failed) stops the
  trial; so does one whose rewards miss its `min_reward` (a number gates the `reward`
  key; a table gates each key it names; a missing key counts as -inf).
- `multi_step_reward_strategy = "mean"` (the default): each reward key's mean over the
  steps that were scored (a key a step lacks counts 0 for it), and the headline reward
  the mean of their headline rewards; steps that never ran or were not scored are left
  out. `"final"`: the last step that ran, as it scored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sandlot.models import Integrity, MultiStep, StepResult, TrialResult, is_scored


@dataclass(frozen=True)
class ScoredStep:
    """What the aggregation needs of one step that ran."""

    name: str
    reward: float | None
    rewards: dict[str, float]


def min_reward_failure(rewards: dict[str, float] | None,
                       min_reward: float | dict[str, float]) -> str | None:
    """Why `rewards` miss `min_reward`, or None when they meet it."""
    thresholds = min_reward if isinstance(min_reward, dict) else {"reward": min_reward}
    for key, threshold in thresholds.items():
        actual = (rewards or {}).get(key, -math.inf)
        if actual < threshold:
            shown = "missing" if actual == -math.inf else f"{actual:g}"
            return f"{key} = {shown}, below its min_reward {threshold:g}"
    return None


def trial_reward(strategy: str | None, steps: Sequence[ScoredStep]
                 ) -> tuple[float | None, dict[str, float]]:
    """The trial's headline reward and rewards from the steps that ran, in order."""
    if not steps:
        return None, {}
    if strategy == "final":
        last = steps[-1]
        return last.reward, dict(last.rewards)
    scored = [s for s in steps if s.reward is not None]
    if not scored:
        return None, {}
    keys = sorted({key for s in scored for key in s.rewards})
    means = {key: sum(s.rewards.get(key, 0.0) for s in scored) / len(scored) for key in keys}
    headline = sum(s.reward for s in scored if s.reward is not None) / len(scored)
    return headline, means


def timing_since(before: dict[str, float], now: dict[str, float]) -> dict[str, float]:
    """Seconds each phase took since `before` (the trial clock's totals then)."""
    return {phase: round(total - before.get(phase, 0.0), 4) for phase, total in now.items()
            if total - before.get(phase, 0.0) > 0}


def step_scored(step: StepResult) -> bool:
    """The step has a reward its own agent earned (an agent fault still scores)."""
    return is_scored(step.error.kind if step.error else None,
                     step.error.phase if step.error else None, step.reward)


def step_record(name: str, result: TrialResult, network: dict[str, object] | None,
                timing: dict[str, float]) -> StepResult:
    """What one step's run (recorded as a trial's would be) leaves in result.json."""
    record = StepResult(
        name=name, reward=result.reward, rewards=dict(result.rewards), passed=result.passed,
        error=result.error, timing=timing, agent_exit_code=result.agent_exit_code,
        verifier_exit_code=result.verifier_exit_code, agent_info=dict(result.agent_info),
        attempts=list(result.attempts), repaired=result.repaired,
        integrity=result.integrity, verifier_failure=result.verifier_failure,
        network=network, artifacts=result.artifacts)
    if not step_scored(record):
        record.passed = False
    return record


def stop_reason(step: StepResult, min_reward: float | dict[str, float] | None) -> str | None:
    """Why the steps after `step` do not run, or None."""
    if not step_scored(step):
        kind = step.error.kind if step.error else "no reward"
        return f"it could not be scored ({kind})"
    if min_reward is None:
        return None
    failure = min_reward_failure(step.rewards, min_reward)
    return f"min_reward: {failure}" if failure else None


def _merged_counts(steps: Sequence[StepResult]) -> dict[str, object]:
    """The agent's figures over all steps: numbers summed, anything else the last's."""
    out: dict[str, object] = {}
    for step in steps:
        for key, value in step.agent_info.items():
            before = out.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) \
                    and isinstance(before, int | float) and not isinstance(before, bool):
                out[key] = before + value
            else:
                out[key] = value
    return out


def _integrity(steps: Sequence[StepResult]) -> Integrity | None:
    """Tampered if any step was (the trial is scored 0); else what was put back."""
    checked = [s for s in steps if s.integrity is not None]
    if not checked:
        return None
    neutralized = [n for s in checked for n in s.integrity.neutralized]  # type: ignore[union-attr]
    tampered = next((s for s in checked if s.integrity.status == "tampered"), None)  # type: ignore[union-attr]
    if tampered is not None:
        assert tampered.integrity is not None
        return Integrity(status="tampered", reason=f"step {tampered.name}: "
                         f"{tampered.integrity.reason}", paths=tampered.integrity.paths,
                         neutralized=neutralized)
    status = "neutralized" if any(s.integrity.status == "neutralized"  # type: ignore[union-attr]
                                  for s in checked) else "clean"
    return Integrity(status=status, neutralized=neutralized)


def fold_steps(result: TrialResult, steps: list[StepResult], n_steps: int, strategy: str,
               stop: tuple[str, str] | None) -> None:
    """The trial's outcome from its steps': reward by `strategy`, the error of a step
    that could not be scored (else the first agent fault), integrity over all steps."""
    result.multi_step = MultiStep(strategy=strategy, n_steps=n_steps,  # type: ignore[arg-type]
                                  n_run=len(steps), stopped_after=stop[0] if stop else None,
                                  stop_reason=stop[1] if stop else None)
    if not steps:
        return
    result.reward, result.rewards = trial_reward(strategy, [
        ScoredStep(s.name, s.reward if step_scored(s) else None, s.rewards) for s in steps])
    result.passed = result.reward is not None and result.reward >= 1.0
    result.integrity = _integrity(steps)
    if result.integrity is not None and result.integrity.status == "tampered":
        result.reward, result.rewards, result.passed = 0.0, {"reward": 0.0}, False
    failed = next((s for s in steps if not step_scored(s)), None)
    faulty = failed or next((s for s in steps if s.error is not None), None)
    if faulty is not None and faulty.error is not None and result.error is None:
        result.error = faulty.error.model_copy(
            update={"message": f"step {faulty.name}: {faulty.error.message}"})
    result.agent_exit_code = steps[-1].agent_exit_code
    result.verifier_exit_code = steps[-1].verifier_exit_code
    result.agent_info = _merged_counts(steps)
    result.repaired = result.passed and any(s.repaired for s in steps)
    result.verifier_failure = next((s.verifier_failure for s in steps
                                    if s.verifier_failure is not None), None)
