"""Repair attempts: verify, send the feedback into the same agent session, try again.

The loop belongs to the trial, not to an agent: any ConversationalAgent (Pi, ACP agents,
the built-in agent) gets it unchanged. Feedback runs only decide whether to go on; the
trial's scoring verification still runs afterwards, with every agent process gone.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandlot.agents.base import AgentContext, AgentOutcome, ConversationalAgent
from sandlot.errors import ErrorKind, SandboxDiskFull, TrialError
from sandlot.feedback import DEFAULT_TEMPLATE, render_feedback
from sandlot.sandbox.users import as_root
from sandlot.tasks.loader import Task
from sandlot.verify import Verifier


def feedback_template(task: Task, run_template: str | None) -> str:
    """The task's own template ([agent] repair_feedback_template) wins, then the run's."""
    own = task.config.agent.repair_feedback_template
    return own if own else (run_template or DEFAULT_TEMPLATE)


@dataclass
class RepairSettings:
    max_repairs: int
    template: str
    verify_timeout_sec: float


def _generation(outcome: AgentOutcome, seconds: float) -> dict[str, object]:
    return {"exit_code": outcome.exit_code, "duration_sec": round(seconds, 4),
            **outcome.metadata}


async def run_with_repairs(agent: ConversationalAgent, ctx: AgentContext, first: AgentOutcome,
                           first_sec: float, verifier: Verifier, out_dir: Path,
                           settings: RepairSettings,
                           on_phase: Callable[[str], None] | None = None,
                           ) -> list[dict[str, object]]:
    """Run feedback rounds after the first generation; returns one record per attempt.

    The agent's time budget (ctx.timeout_sec) covers all its generations together.
    Raises: TrialError AGENT_TIMEOUT when the budget runs out during a follow-up.
    """
    attempts: list[dict[str, object]] = [{"attempt": 1, "generation": _generation(
        first, first_sec), "evaluation": None, "feedback": None}]
    spent = first_sec
    secret = [*ctx.task.tests_sources, ctx.task.solution_dir]
    total = settings.max_repairs + 1
    for number in range(2, settings.max_repairs + 2):
        record = attempts[-1]
        if on_phase:
            on_phase(f"checking {number - 1}/{total}…")
        try:
            verdict = await verifier.verify(as_root(ctx.sandbox), ctx.task,
                                            out_dir / f"attempt-{number - 1}",
                                            settings.verify_timeout_sec,
                                            network=ctx.network, feedback=True)
        except TrialError as exc:
            # An unreadable feedback run ends the repairs; the scoring run will tell.
            record["evaluation"] = {"error": {"kind": str(exc.kind), "message": exc.message}}
            break
        except SandboxDiskFull as exc:  # the agent filled its disk: the scoring run tells
            record["evaluation"] = {"error": {"kind": str(ErrorKind.DISK_LIMIT),
                                              "message": str(exc)}}
            break
        record["evaluation"] = {"reward": verdict.reward, "rewards": verdict.rewards}
        if verdict.reward >= 1.0:
            break
        remaining = ctx.timeout_sec - spent
        if remaining <= 0:
            break
        message = render_feedback(settings.template, verdict, number, settings.max_repairs + 1,
                                  secret)
        attempts.append({"attempt": number, "generation": None, "evaluation": None,
                         "feedback": message})
        started = time.monotonic()
        if on_phase:
            on_phase(f"repair {number}/{total}…")
        try:
            outcome = await agent.follow_up(dataclasses.replace(ctx, timeout_sec=remaining),
                                            message)
        except TrialError as exc:
            attempts[-1]["generation"] = {"error": {"kind": str(exc.kind),
                                                    "message": exc.message},
                                          "duration_sec": round(time.monotonic() - started, 4)}
            if exc.kind is ErrorKind.AGENT_TIMEOUT:
                raise RepairTimeout(exc, attempts) from exc
            raise RepairFailed(exc, attempts) from exc
        spent += time.monotonic() - started
        attempts[-1]["generation"] = _generation(outcome, time.monotonic() - started)
    return attempts


COUNTED_OVER_ATTEMPTS = ("turns", "tool_calls")


def whole_trial_counts(attempts: list[dict[str, object]]) -> dict[str, int]:
    """The agent's turns and tool calls over every generation of a repaired trial, so the
    trial's figures cover the session as its gateway usage does; each attempt's own stay
    in `attempts`."""
    gens = [a.get("generation") for a in attempts]
    out: dict[str, int] = {}
    for key in COUNTED_OVER_ATTEMPTS:
        values = [g[key] for g in gens if isinstance(g, dict) and isinstance(g.get(key), int)]
        if values:
            out[key] = sum(values)  # type: ignore[arg-type]
    return out


class RepairFailed(TrialError):
    """A follow-up failed; carries the attempts so far so the trial can record them."""

    def __init__(self, cause: TrialError, attempts: list[dict[str, object]]) -> None:
        super().__init__(cause.kind, cause.message, cause.phase or "agent", cause.details)
        self.attempts = attempts


class RepairTimeout(RepairFailed):
    pass
