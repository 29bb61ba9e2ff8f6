"""The figures every view of a running job shows, kept in one place.

`RunTracker` receives the job's events and answers `frame()`: the counts, the footer
figures (pass rate, mean reward, tokens, cost, telemetry coverage, ETA) and the running
trials, longest-running first. The dashboard, the plain heartbeat and the JSON heartbeat
all read the same frame, so they never disagree.

Tokens. The footer's figure is the trusted gateway total of the finished trials (from the
summary the job hands over with each finished trial, so resumed trials count too) plus,
for each running trial, its live figure: max(agent self-report, gateway live count).
Both live signals are cumulative counters and either can lag the other, so max() never
steps down while a trial runs, and a missing or broken gateway counter falls back to
the self-report alone. When a trial finishes its live figure is replaced by its trusted
count in one step (both under the same lock): the trusted count can be lower (the live
gateway figure includes an estimate of output still streaming; a self-report can
over-count), so the total may dip at that moment. That dip is intended: clamping would
falsify the trusted sum. A try that ends in a retried infrastructure error drops its
live figure the same way; its usage stays in its archived result and the final
result's `retried_usage` (summary.json's `spend_usd` includes it), not in these totals.

Threads. Job events arrive on the event loop's thread; views call `frame()` from a
render or ticker thread. Events change state under `lock`; `frame()` copies the running
list under it, then reads each trial's counters without it (TrialLive's fields are single
ints and strings; the gateway counter has its own lock). Reading a trial is O(1); nothing
here touches a file.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from sandlot.live import NodeLive, TrialLive
from sandlot.models import JobSummary, TrialResult

#: Phases before the agent has a gateway session: no token signal is expected yet.
SETUP_PHASES = frozenset({"queued", "creating sandbox…", "installing agent…"})
DEFAULT_STALL_AFTER_SEC = 300.0
_BY_START = operator.attrgetter("live.started")


class LiveFigures(NamedTuple):
    """One running trial's token signals, read at one instant."""

    #: max(self-report, gateway); None while neither signal exists.
    tokens: int | None = None
    #: Gateway total of finished requests plus the estimate of output streaming now.
    gateway_tokens: int | None = None
    self_reported_tokens: int | None = None
    cost_usd: float | None = None
    #: Model requests in flight at the gateway (0 when unknown).
    in_flight: int = 0
    #: Of those, requests waiting out a backoff after a 429 or 5xx before their next try.
    backing_off: int = 0
    #: 429 answers this trial's requests got so far.
    rate_limited: int = 0


NO_FIGURES = LiveFigures()


def read_figures(live: TrialLive) -> LiveFigures:
    """Reconcile a running trial's two token signals; never raises. O(1)."""
    return _figures(live.agent.self_reported_tokens, live.gateway_usage)


def _figures(reported: object, usage: object) -> LiveFigures:
    if reported.__class__ is not int:  # None, or garbage from an agent
        reported = None
    if usage is None:
        return NO_FIGURES if reported is None else LiveFigures(reported, None, reported)
    try:
        got = usage.reading()  # type: ignore[attr-defined]
        gateway = int(got.tokens)
        cost = None if got.cost_usd is None else float(got.cost_usd)
        in_flight, backing_off = int(got.in_flight), int(got.backing_off)
        rate_limited = int(got.n_rate_limited)
    except Exception:  # a dead or torn-down counter: fall back to the self-report
        return NO_FIGURES if reported is None else LiveFigures(reported, None, reported)
    tokens = gateway if reported is None or gateway >= reported else reported
    return LiveFigures(tokens, gateway, reported,  # type: ignore[arg-type]
                       cost, in_flight, backing_off, rate_limited)


@dataclass(slots=True)
class RunningTrial:
    """A trial the job has started and not finished (it may be waiting to retry)."""

    name: str
    task: str
    attempt: int
    try_number: int
    live: TrialLive
    #: While waiting to retry: the error kind of the failed try and when the next starts.
    retry_kind: str | None = None
    retry_at: float = 0.0
    #: Progress counters at the last look, and when they last changed (stall detection).
    fingerprint: tuple[object, ...] = ()
    moved_at: float = 0.0
    stalled: bool = False
    #: The phase a poller last reported (phase-change lines), and how much of the trial's
    #: phase log it has seen.
    reported_phase: str | None = None
    reported_count: int = 0
    #: The figures at the last look and what they were read from: the gateway counter,
    #: its version, the self-report. A frame rereads only the trials whose inputs moved.
    figures: LiveFigures = NO_FIGURES
    figures_from: tuple[object, object, object] = (None, None, None)

    def current_figures(self) -> LiveFigures:
        """`read_figures(self.live)`, reusing the last answer while its inputs are unchanged.

        A counter without a `version` is reread every time.
        """
        live = self.live
        usage = live.gateway_usage
        version = getattr(usage, "version", None)
        reported = live.agent.self_reported_tokens
        was_usage, was_version, was_reported = self.figures_from
        if (usage is was_usage and version is not None and version == was_version
                and reported == was_reported):
            return self.figures
        self.figures = _figures(reported, usage)
        self.figures_from = (usage, version, reported)
        return self.figures


@dataclass(frozen=True, slots=True)
class TrialRow:
    """What a view shows for one running trial."""

    name: str
    task: str
    attempt: int
    try_number: int
    phase: str
    activity: str
    elapsed_sec: float
    idle_sec: float
    stalled: bool
    tool_calls: int
    figures: LiveFigures


class NodeRow(NamedTuple):
    """One cluster node (`--ray`) as a frame shows it."""

    name: str
    slots: int
    running: int
    alive: bool
    n_errored: int


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything a view renders, computed once per frame."""

    job_name: str
    agent: str
    model: str | None
    sandbox: str | None
    n_planned: int
    n_done: int
    n_resumed: int
    n_passed: int
    n_failed: int
    #: Failures the agent caused by tampering or by breaking the verifier (in n_failed).
    n_failed_by_agent: int
    n_errored: int
    n_running: int
    n_queued: int
    pass_rate: float | None
    mean_reward: float | None
    #: Trusted tokens of finished trials + live figures of running ones; None: no signal.
    tokens: int | None
    cost_usd: float | None
    cost_per_passed_usd: float | None
    #: (trials with a token figure, trials that should have one); None without a model.
    telemetry: tuple[int, int] | None
    tokens_per_sec: float | None
    elapsed_sec: float
    eta_sec: float | None
    stall_after_sec: float
    rows: list[TrialRow]
    #: Running trials not in `rows`.
    n_more: int
    #: Names of every stalled running trial (shown or not).
    stalled: list[str]
    #: Running trials' model requests waiting out a backoff (429/5xx), and the 429s those
    #: trials got so far: a provider throttling the job shows here before it shows as time.
    n_backing_off: int = 0
    n_rate_limited: int = 0
    #: Trials that became stalled / moved again since the previous frame.
    stall_started: list[TrialRow] = field(default_factory=list)
    stall_cleared: list[str] = field(default_factory=list)
    #: `--ray`: each node's slots, running trials and errors; empty on one machine.
    nodes: list[NodeRow] = field(default_factory=list)


def tokens_text(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.2f}M"
    return f"{n / 1e3:.1f}k" if n >= 1000 else str(n)


def activity_text(phase: str, tool_calls: int, n_tools: int, last_tool: str | None,
                  tokens: int | None) -> str:
    """The activity cell: the phase label outside the agent's session, its counters inside.

    Never blank. While the agent works (phase "agent", or a repair generation) it reads
    `38 calls · 412.0k tok · last: bash`; `last:` is left out when the agent has used a
    single tool, tokens when neither signal exists yet.
    """
    repairing = phase.startswith("repair ")
    if phase != "agent" and not repairing:
        return phase or "starting…"
    parts = [phase.rstrip("…")] if repairing else []
    if tool_calls or tokens is not None:
        parts.append(f"{tool_calls} call" + ("" if tool_calls == 1 else "s"))
        if tokens is not None:
            parts.append(f"{tokens_text(tokens)} tok")
        if last_tool and n_tools > 1:
            parts.append(f"last: {last_tool[:24]}")
    else:
        parts.append("agent running…" if not repairing else "waiting for the model…")
    return " · ".join(parts)


class RunTracker:
    """The job observer behind every view; see the module docstring for the contract."""

    def __init__(self, job_name: str = "", agent: str = "", model: str | None = None,
                 sandbox: str | None = None, n_planned: int = 0,
                 stall_after_sec: float = DEFAULT_STALL_AFTER_SEC,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.RLock()
        self.clock = clock
        self.job_name, self.agent, self.model, self.sandbox = job_name, agent, model, sandbox
        self.n_planned = n_planned
        self.stall_after_sec = stall_after_sec
        self.summary: JobSummary | None = None
        self.started = clock()
        self.n_resumed = 0
        self.tokens_at_start = 0
        self.running: dict[str, RunningTrial] = {}
        self.nodes: list[NodeLive] = []

    # -- job events (the event loop's thread) ---------------------------------------------

    def job_started(self, summary: JobSummary, n_pending: int) -> None:
        with self.lock:
            self.summary = summary
            self.job_name, self.agent = summary.job_name, summary.agent
            self.model = summary.model
            self.n_planned = summary.n_trials_planned
            self.n_resumed = summary.n_trials
            self.tokens_at_start = _usage_int(summary, "total_tokens") or 0
            self.started = self.clock()

    def nodes_started(self, nodes: list[NodeLive]) -> None:
        """The cluster's nodes (`--ray`), kept current by the executor."""
        with self.lock:
            self.nodes = list(nodes)

    def trial_started(self, plan: object, try_number: int, live: TrialLive) -> None:
        with self.lock:
            self.running[live.name] = RunningTrial(live.name, live.task, live.attempt,
                                                   try_number, live, moved_at=self.clock())

    def trial_retrying(self, plan: object, result: TrialResult, delay_sec: float) -> None:
        with self.lock:
            entry = self.running.get(result.trial_name)
            if entry is not None:
                entry.retry_kind = str(result.error.kind) if result.error else "error"
                entry.retry_at = self.clock() + delay_sec
                entry.stalled = False

    def trial_finished(self, result: TrialResult, summary: JobSummary) -> None:
        # One step under the lock: the live figure leaves as the trusted count arrives.
        with self.lock:
            self.running.pop(result.trial_name, None)
            self.summary = summary

    def job_finished(self, summary: JobSummary) -> None:
        with self.lock:
            self.summary = summary

    # -- reading (any thread) -------------------------------------------------------------

    def poll_phases(self, trial: str | None = None) -> list[tuple[RunningTrial, str]]:
        """Every phase the running trials (or the one named `trial`) entered since the last
        poll, in order, however short (line-oriented views; a view flushes a trial's last
        phases before it reports the trial finished).
        """
        with self.lock:
            if trial is None:
                entries = list(self.running.values())
            else:
                entries = [e for e in (self.running.get(trial),) if e is not None]
        changes = []
        for entry in entries:
            log = entry.live.phase_log
            new = log[entry.reported_count:]
            entry.reported_count = len(log)
            if not new and entry.reported_phase is None:
                new = [entry.live.phase]  # never reported: where it is now
            if entry.retry_kind is not None:
                continue
            for phase in new:
                if phase != entry.reported_phase:
                    entry.reported_phase = phase
                    changes.append((entry, phase))
        return changes

    def frame(self, max_rows: int | None = None) -> Frame:
        """Counts, footer figures and up to `max_rows` running trials (all if None).

        O(running trials): one counter read per trial, rows built only for those shown.
        Also advances stall detection (a trial is stalled when none of its counters
        (phase, tool calls, message chunks, self-reported or gateway tokens) has moved
        for `stall_after_sec`).
        """
        now = self.clock()
        with self.lock:
            summary = self.summary
            entries = list(self.running.values())
            nodes = [NodeRow(n.name, n.slots, n.running, n.alive, n.n_errored)
                     for n in self.nodes]
        live_tokens: int | None = None
        live_cost: float | None = None
        covered = expected = 0
        stalled_names: list[str] = []
        started: list[RunningTrial] = []
        cleared: list[str] = []
        figures: dict[str, LiveFigures] = {}
        backing_off = rate_limited = 0
        for entry in entries:
            if entry.retry_kind is not None:
                continue  # the failed try's live figure is gone; the next try is not here yet
            live = entry.live
            fig = entry.current_figures()
            figures[entry.name] = fig
            if fig.tokens is not None:
                live_tokens = (live_tokens or 0) + fig.tokens
                covered += 1
                expected += 1
            elif live.phase not in SETUP_PHASES:
                expected += 1
            if fig.cost_usd is not None:
                live_cost = (live_cost or 0.0) + fig.cost_usd
            backing_off += fig.backing_off
            rate_limited += fig.rate_limited
            agent = live.agent
            mark = (live.phase, agent.tool_calls, agent.message_chunks,
                    fig.self_reported_tokens, fig.gateway_tokens)
            if mark != entry.fingerprint:
                entry.fingerprint = mark
                entry.moved_at = now
                if entry.stalled:
                    entry.stalled = False
                    cleared.append(entry.name)
            elif now - entry.moved_at >= self.stall_after_sec and not entry.stalled:
                entry.stalled = True
                started.append(entry)
            if entry.stalled:
                stalled_names.append(entry.name)

        # Entries arrive in start order, so this sort is linear in practice (timsort).
        shown = sorted(entries, key=_BY_START)
        if max_rows is not None:
            shown = shown[:max_rows]
        rows = [self._row(e, figures.get(e.name), now) for e in shown]
        by_name = {r.name: r for r in rows}

        n_done = summary.n_trials if summary else 0
        finished_tokens = _usage_int(summary, "total_tokens")
        tokens = (None if finished_tokens is None and live_tokens is None
                  else (finished_tokens or 0) + (live_tokens or 0))
        finished_cost = _usage_float(summary, "cost_usd")
        cost = (None if finished_cost is None and live_cost is None
                else (finished_cost or 0.0) + (live_cost or 0.0))
        telemetry = None
        if self.model is not None:
            with_usage = summary.n_trials_with_usage if summary else 0
            telemetry = (with_usage + covered, n_done + expected)
        elapsed = max(0.0, now - self.started)
        finished_here = n_done - self.n_resumed
        eta = None
        if finished_here > 0 and elapsed > 0:
            eta = max(0, self.n_planned - n_done) * elapsed / finished_here
        spent = max(0, (tokens or 0) - self.tokens_at_start)
        return Frame(
            job_name=self.job_name, agent=self.agent, model=self.model, sandbox=self.sandbox,
            n_planned=self.n_planned, n_done=n_done, n_resumed=self.n_resumed,
            n_passed=summary.n_passed if summary else 0,
            n_failed=summary.n_failed if summary else 0,
            n_failed_by_agent=(summary.n_tampered + summary.n_verifier_broken
                               if summary else 0),
            n_errored=summary.n_errored if summary else 0,
            n_running=len(entries),
            n_queued=max(0, self.n_planned - n_done - len(entries)),
            pass_rate=summary.pass_rate if summary else None,
            mean_reward=summary.mean_reward if summary else None,
            tokens=tokens, cost_usd=cost,
            cost_per_passed_usd=summary.cost_per_passed_usd if summary else None,
            telemetry=telemetry,
            tokens_per_sec=spent / elapsed if tokens is not None and elapsed >= 1 else None,
            elapsed_sec=elapsed, eta_sec=eta, stall_after_sec=self.stall_after_sec,
            rows=rows, n_more=len(entries) - len(rows), stalled=stalled_names,
            n_backing_off=backing_off, n_rate_limited=rate_limited,
            stall_started=[by_name.get(e.name) or self._row(e, figures.get(e.name), now)
                           for e in started],
            stall_cleared=cleared, nodes=nodes,
        )

    def _row(self, entry: RunningTrial, fig: LiveFigures | None, now: float) -> TrialRow:
        live = entry.live
        agent = live.agent
        fig = fig or NO_FIGURES
        phase = live.phase
        if entry.retry_kind is not None:
            wait = max(0.0, entry.retry_at - now)
            activity = f"retrying after {entry.retry_kind} (in {wait:.0f}s)"
        else:
            activity = activity_text(phase, agent.tool_calls, len(agent.tools_seen),
                                     agent.last_tool, fig.tokens)
        return TrialRow(name=entry.name, task=entry.task, attempt=entry.attempt,
                        try_number=entry.try_number, phase=phase, activity=activity,
                        elapsed_sec=max(0.0, now - live.started),
                        idle_sec=max(0.0, now - entry.moved_at), stalled=entry.stalled,
                        tool_calls=agent.tool_calls, figures=fig)


def _usage_int(summary: JobSummary | None, key: str) -> int | None:
    if summary is None or not summary.usage or summary.usage.get(key) is None:
        return None
    return int(summary.usage[key])  # type: ignore[call-overload]


def _usage_float(summary: JobSummary | None, key: str) -> float | None:
    if summary is None or not summary.usage or summary.usage.get(key) is None:
        return None
    return float(summary.usage[key])  # type: ignore[arg-type]


class Ticker:
    """Calls `tick()` every `interval_sec` on a daemon thread between `start` and `stop`.

    A tick that raises is skipped (the display must not end the job); the exception is
    kept in `last_error`.
    """

    def __init__(self, tick: Callable[[], None], interval_sec: float) -> None:
        self._tick = tick
        self.interval_sec = interval_sec
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sandlot-display", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_sec):
            try:
                self._tick()
            except Exception as exc:
                self.last_error = exc
