"""Display test helpers: a settable clock, live trials, results and summaries."""

from __future__ import annotations

from sandlot.errors import ErrorKind
from sandlot.gateway.formats.base import Usage
from sandlot.gateway.usage import LiveUsage
from sandlot.live import TrialLive
from sandlot.models import ErrorInfo, JobSummary, TrialResult
from sandlot.report.summary import summarize


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, sec: float) -> None:
        self.t += sec


def gateway_usage(tokens: int = 0, streaming_chars: int = 0, cost: float | None = None,
                  in_flight: int = 0) -> LiveUsage:
    """A real gateway counter holding `tokens` of finished exchanges (all input)."""
    usage = LiveUsage()
    if tokens:
        usage.begin()
        usage.finish(Usage(input_tokens=tokens), cost, 0, ok=True)
    for _ in range(in_flight):
        usage.begin()
    if streaming_chars:
        usage.stream_progress(streaming_chars)
    return usage


class DeadGateway:
    """A gateway counter whose reads fail (torn down, or a bug)."""

    def snapshot(self) -> dict[str, object]:
        raise RuntimeError("gateway counter gone")

    def reading(self) -> object:
        raise RuntimeError("gateway counter gone")


def live_trial(clock: Clock, task: str, attempt: int = 1, *, phase: str = "agent",
               age_sec: float = 0.0, tools: tuple[str, ...] = (), self_reported: int | None = None,
               gateway: object = None, try_number: int = 1) -> TrialLive:
    live = TrialLive(f"{task}__{attempt}", task, attempt, try_number,
                     started=clock() - age_sec, phase_started=clock() - age_sec)
    live.phase = phase
    for tool in tools:
        live.agent.tool_started(tool)
    live.agent.self_reported_tokens = self_reported
    live.gateway_usage = gateway
    return live


def result(task: str, attempt: int = 1, *, passed: bool = True, tokens: int | None = None,
           cost: float | None = None, error: ErrorKind | None = None,
           agent_sec: float = 10.0, self_reported: int | None = None) -> TrialResult:
    usage = None
    if tokens is not None:
        usage = {"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens,
                 "cost_usd": cost, "n_requests": 1, "source": "gateway"}
    info: dict[str, object] = {}
    if self_reported is not None:
        info["self_reported_usage"] = {"input_tokens": self_reported, "output_tokens": 0,
                                       "total_tokens": self_reported, "source": "pi"}
    reward = None if error else (1.0 if passed else 0.0)
    return TrialResult(
        trial_name=f"{task}__{attempt}", task=task, attempt=attempt, agent="builtin",
        model="scripted/solver", reward=reward, passed=passed and error is None,
        error=None if error is None else ErrorInfo(kind=error, message="boom", phase="setup"),
        timing={"agent": agent_sec, "total": agent_sec + 1}, usage=usage, agent_info=info)


def summary_of(results: list[TrialResult], n_planned: int, *, n_resumed: int = 0,
               model: str | None = "scripted/solver") -> JobSummary:
    return summarize("demo", "builtin", model, n_planned, 1, results, n_resumed=n_resumed)
