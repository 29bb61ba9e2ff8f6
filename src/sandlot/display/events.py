"""`--json-events`: one JSON object per line on stdout, for other tools.

Every object has `event` and `ts` (Unix time, seconds). Events, in the order they can
come: `job_started`, `trial_started`, `phase`, `trial_retrying`, `trial_finished`,
`stalled`, `stall_cleared`, `heartbeat` (every `heartbeat_sec`, the dashboard's footer
figures and every running trial), `job_finished` (the complete summary.json) or
`job_interrupted`. docs/display.md lists the fields. Lines are written whole and flushed
one at a time, from the event loop's thread and the ticker thread under one lock.
"""

from __future__ import annotations

import json
import time
from types import TracebackType
from typing import IO, Any

from sandlot.display.plain import DEFAULT_HEARTBEAT_SEC, TICK_SEC
from sandlot.display.tracker import Frame, RunningTrial, RunTracker, Ticker, TrialRow
from sandlot.live import NodeLive, TrialLive
from sandlot.models import JobSummary, TrialResult


def _row(row: TrialRow) -> dict[str, Any]:
    fig = row.figures
    return {"trial": row.name, "task": row.task, "attempt": row.attempt,
            "try": row.try_number, "phase": row.phase, "activity": row.activity,
            "elapsed_sec": round(row.elapsed_sec, 3), "idle_sec": round(row.idle_sec, 3),
            "stalled": row.stalled, "tool_calls": row.tool_calls, "tokens": fig.tokens,
            "gateway_tokens": fig.gateway_tokens,
            "self_reported_tokens": fig.self_reported_tokens, "cost_usd": fig.cost_usd}


def frame_fields(frame: Frame) -> dict[str, Any]:
    """The heartbeat's figures: the same ones the dashboard's header and footer show."""
    return {
        "n_planned": frame.n_planned, "n_done": frame.n_done, "n_resumed": frame.n_resumed,
        "n_passed": frame.n_passed, "n_failed": frame.n_failed, "n_errored": frame.n_errored,
        "n_failed_by_agent": frame.n_failed_by_agent,
        "n_running": frame.n_running, "n_queued": frame.n_queued,
        "pass_rate": frame.pass_rate, "mean_reward": frame.mean_reward,
        "tokens": frame.tokens,
        "cost_usd": None if frame.cost_usd is None else round(frame.cost_usd, 8),
        "cost_per_passed_usd": frame.cost_per_passed_usd,
        "tokens_per_sec": (None if frame.tokens_per_sec is None
                           else round(frame.tokens_per_sec, 2)),
        "telemetry": (None if frame.telemetry is None
                      else {"with_tokens": frame.telemetry[0], "expected": frame.telemetry[1]}),
        "elapsed_sec": round(frame.elapsed_sec, 3),
        "eta_sec": None if frame.eta_sec is None else round(frame.eta_sec, 1),
        "stalled": frame.stalled,
        "backing_off": frame.n_backing_off, "rate_limited": frame.n_rate_limited,
        **({"nodes": [node._asdict() for node in frame.nodes]} if frame.nodes else {}),
    }


class JsonEvents:
    """A JobObserver writing JSON lines to `out` (stdout), with a ticker while entered."""

    def __init__(self, out: IO[str], tracker: RunTracker | None = None,
                 heartbeat_sec: float = DEFAULT_HEARTBEAT_SEC, tick_sec: float = TICK_SEC,
                 wall_clock: Any = time.time) -> None:
        self.out = out
        self.tracker = tracker or RunTracker()
        self.heartbeat_sec = heartbeat_sec
        self.wall_clock = wall_clock
        self._next_heartbeat = self.tracker.clock() + heartbeat_sec
        self._ticker = Ticker(self.tick, tick_sec)
        self._started = self._finished = False

    def __enter__(self) -> JsonEvents:
        self._ticker.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._ticker.stop()
        if self._started and not self._finished:
            self.emit("job_interrupted", reason=kind.__name__ if kind else None,
                      **frame_fields(self.tracker.frame(max_rows=0)))

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "ts": round(self.wall_clock(), 3), **fields},
                          ensure_ascii=False, default=str)
        with self.tracker.lock:
            self.out.write(line + "\n")
            self.out.flush()

    # -- job events -----------------------------------------------------------------------

    def job_started(self, summary: JobSummary, n_pending: int) -> None:
        self.tracker.job_started(summary, n_pending)
        self._started = True
        self._next_heartbeat = self.tracker.clock() + self.heartbeat_sec
        t = self.tracker
        self.emit("job_started", job=t.job_name, agent=t.agent, model=t.model,
                  sandbox=t.sandbox, n_planned=summary.n_trials_planned,
                  n_resumed=summary.n_trials, n_pending=n_pending)

    def nodes_started(self, nodes: list[NodeLive]) -> None:
        self.tracker.nodes_started(nodes)

    def trial_started(self, plan: object, try_number: int, live: TrialLive) -> None:
        with self.tracker.lock:
            self.tracker.trial_started(plan, try_number, live)
            self.emit("trial_started", trial=live.name, task=live.task, attempt=live.attempt,
                      **{"try": try_number})

    def trial_retrying(self, plan: object, result: TrialResult, delay_sec: float) -> None:
        with self.tracker.lock:
            self.tracker.trial_retrying(plan, result, delay_sec)
            self.emit("trial_retrying", trial=result.trial_name,
                      error_kind=str(result.error.kind) if result.error else None,
                      error=result.error.message[:500] if result.error else None,
                      delay_sec=delay_sec, **{"try": result.tries})

    def trial_finished(self, result: TrialResult, summary: JobSummary) -> None:
        usage = result.usage or {}
        with self.tracker.lock:
            for entry, phase in self.tracker.poll_phases(result.trial_name):
                self._emit_phase(entry, phase)
            self.tracker.trial_finished(result, summary)
            self.emit("trial_finished", trial=result.trial_name, task=result.task,
                      attempt=result.attempt, passed=result.passed, reward=result.reward,
                      scored=result.scored,
                      error_kind=str(result.error.kind) if result.error else None,
                      tokens=usage.get("total_tokens"), cost_usd=usage.get("cost_usd"),
                      usage_source=result.usage_source, usage_mismatch=result.usage_mismatch,
                      duration_sec=result.timing.get("total"), tries=result.tries,
                      n_done=summary.n_trials, n_planned=summary.n_trials_planned)

    def job_finished(self, summary: JobSummary) -> None:
        self.tracker.job_finished(summary)
        self._finished = True
        self.emit("job_finished", summary=summary.model_dump(mode="json"))

    def _emit_phase(self, entry: RunningTrial, phase: str) -> None:
        self.emit("phase", trial=entry.name, phase=phase,
                  elapsed_sec=round(self.tracker.clock() - entry.live.started, 3))

    # -- the ticker thread ----------------------------------------------------------------

    def tick(self) -> None:
        with self.tracker.lock:
            for entry, phase in self.tracker.poll_phases():
                self._emit_phase(entry, phase)
            now = self.tracker.clock()
            due = self.heartbeat_sec > 0 and now >= self._next_heartbeat
            frame = self.tracker.frame(max_rows=None if due else 0)
            for row in frame.stall_started:
                self.emit("stalled", trial=row.name, phase=row.phase,
                          idle_sec=round(row.idle_sec, 3), tool_calls=row.tool_calls,
                          tokens=row.figures.tokens, in_flight=row.figures.in_flight)
            for name in frame.stall_cleared:
                self.emit("stall_cleared", trial=name)
            if due:
                self._next_heartbeat = now + self.heartbeat_sec
                self.emit("heartbeat", **frame_fields(frame),
                          running=[_row(r) for r in frame.rows])
