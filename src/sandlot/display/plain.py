"""One line per trial event, for CI logs, nohup files and any output that is not a TTY.

Lines: a trial started, changed phase, was retried, finished (reward, tokens, cost); a
trial stalled or moved again; and every `heartbeat_sec` a heartbeat with the dashboard's
footer figures. Phase changes, stalls and heartbeats come from a ticker thread polling
the trials' live counters; every phase is printed however short (each trial logs its
phases, and a trial's last ones are flushed before its result). `quiet` prints nothing.
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.markup import escape

from sandlot.display.text import (
    counts_parts,
    duration_text,
    footer_parts,
    node_parts,
    progress_parts,
)
from sandlot.display.tracker import (
    Frame,
    RunningTrial,
    RunTracker,
    Ticker,
    TrialRow,
    tokens_text,
)
from sandlot.live import NodeLive, TrialLive
from sandlot.models import JobSummary, TrialResult

DEFAULT_HEARTBEAT_SEC = 30.0
TICK_SEC = 0.25


def describe(result: TrialResult) -> str:
    reward = "—" if result.reward is None else f"{result.reward:.3g}"
    total = result.timing.get("total", 0.0)
    if result.error is not None and not result.scored:
        return (f"[red]✗ error[/] {escape(result.trial_name)} {result.error.kind}: "
                f"{escape(result.error.message[:200])} ({total:.1f}s)")
    mark = "[green]✓ passed[/]" if result.passed else "[yellow]✗ failed[/]"
    if result.integrity is not None and result.tampered:
        mark += f" [red](tampered: {escape((result.integrity.reason or '')[:120])})[/]"
    elif result.verifier_failure is not None:
        mark += " [red](broke the verifier)[/]"
    if result.error is not None:
        mark += f" ({result.error.kind})"
    usage = ""
    if result.usage:
        tokens = int(result.usage.get("total_tokens") or 0)  # type: ignore[call-overload]
        cost = result.usage.get("cost_usd")
        usage = f" {tokens:,} tok" + (f" ${float(cost):.4f}" if cost is not None else "")  # type: ignore[arg-type]
    if result.usage_mismatch:
        source = result.usage_source or {}
        reported = source.get("self_reported") or {}
        usage += (f" [yellow]⚠ agent reported "
                  f"{int(reported.get('total_tokens') or 0):,} tok[/]")  # type: ignore[attr-defined]
    return f"{mark} {escape(result.trial_name)} reward={reward}{usage} ({total:.1f}s)"


def heartbeat_text(frame: Frame) -> str:
    parts = progress_parts(frame) + counts_parts(frame) + footer_parts(frame)
    parts += [f"node {part}" for part in node_parts(frame)]
    if frame.stalled:
        parts.append(f"{len(frame.stalled)} stalled")
    return "♥ " + " · ".join(parts)


def stall_text(row: TrialRow, stall_after_sec: float) -> str:
    what = [row.phase]
    if row.tool_calls:
        what.append(f"{row.tool_calls} calls")
    if row.figures.tokens is not None:
        what.append(f"{tokens_text(row.figures.tokens)} tok")
    if row.figures.backing_off:
        what.append("waiting out a rate limit")
    elif row.figures.in_flight:
        what.append("waiting on the model")
    return (f"[yellow]⚠ stalled[/] {escape(row.name)}: no progress for "
            f"{duration_text(max(row.idle_sec, stall_after_sec))} ({escape(', '.join(what))})")


class LinePrinter:
    """A JobObserver printing one line per event, plus heartbeats while entered."""

    def __init__(self, console: Console, quiet: bool = False,
                 tracker: RunTracker | None = None,
                 heartbeat_sec: float = DEFAULT_HEARTBEAT_SEC,
                 tick_sec: float = TICK_SEC) -> None:
        self.console = console
        self.quiet = quiet
        self.tracker = tracker or RunTracker()
        self.heartbeat_sec = heartbeat_sec
        self._next_heartbeat = self.tracker.clock() + heartbeat_sec
        self._ticker = Ticker(self.tick, tick_sec)

    def __enter__(self) -> LinePrinter:
        if not self.quiet:
            self._ticker.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._ticker.stop()

    def _print(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, soft_wrap=True)

    # -- job events -----------------------------------------------------------------------

    def job_started(self, summary: JobSummary, n_pending: int) -> None:
        self.tracker.job_started(summary, n_pending)
        self._next_heartbeat = self.tracker.clock() + self.heartbeat_sec

    def nodes_started(self, nodes: list[NodeLive]) -> None:
        self.tracker.nodes_started(nodes)

    def trial_started(self, plan: object, try_number: int, live: TrialLive) -> None:
        with self.tracker.lock:
            self.tracker.trial_started(plan, try_number, live)
            again = f" (try {try_number})" if try_number > 1 else ""
            self._print(f"[dim]… started {escape(live.name)}{again}[/]")

    def trial_retrying(self, plan: object, result: TrialResult, delay_sec: float) -> None:
        with self.tracker.lock:
            self.tracker.trial_retrying(plan, result, delay_sec)
            if result.error is not None:
                self._print(f"[magenta]↻ retry[/] {escape(result.trial_name)} after "
                            f"{result.error.kind} in {delay_sec:.0f}s")

    def trial_finished(self, result: TrialResult, summary: JobSummary) -> None:
        with self.tracker.lock:
            if not self.quiet:
                for entry, phase in self.tracker.poll_phases(result.trial_name):
                    self._print_phase(entry, phase)
            self.tracker.trial_finished(result, summary)
            self._print(f"{describe(result)}  "
                        f"[dim][{summary.n_trials}/{summary.n_trials_planned}][/]")

    def job_finished(self, summary: JobSummary) -> None:
        self.tracker.job_finished(summary)

    def _print_phase(self, entry: RunningTrial, phase: str) -> None:
        label = "agent running" if phase == "agent" else phase
        self._print(f"[dim]· {escape(entry.name)}: {escape(label)}[/]")

    # -- the ticker thread ----------------------------------------------------------------

    def tick(self) -> None:
        """Print phase changes, stall changes and, when due, a heartbeat."""
        if self.quiet:
            return
        with self.tracker.lock:  # keeps these lines in order with the event lines
            for entry, phase in self.tracker.poll_phases():
                self._print_phase(entry, phase)
            frame = self.tracker.frame(max_rows=0)
            for row in frame.stall_started:
                self._print(stall_text(row, frame.stall_after_sec))
            for name in frame.stall_cleared:
                self._print(f"[dim]· {escape(name)} is moving again[/]")
            now = self.tracker.clock()
            if self.heartbeat_sec > 0 and now >= self._next_heartbeat:
                self._next_heartbeat = now + self.heartbeat_sec
                self._print(escape(heartbeat_text(frame)))
