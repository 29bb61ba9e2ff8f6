"""The live dashboard on a TTY: header, progress, counts, running trials, stalls, footer.

```
sandlot · job demo · agent builtin · model scripted/solver · sandbox local
━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━  3/9 done (33%) · elapsed 5m01s · ETA 10m02s
passed 3 · failed 0 · errored 0 · running 3 · queued 3
 task                     attempt  elapsed  activity
 fix-interval-merge       1        11m41s   ⚠ idle 5m01s · 4 calls · 6.3k tok · last: write_file
 sqlite-category-revenue  1        5m05s    7 calls · 16.0k tok · last: bash
 text-utils-partial       1        5m02s    installing agent…
⚠ 1 stalled (no progress for 5m00s): fix-interval-merge__1
pass rate 100.0% (excl. errors) · mean reward 1.000 · 68.6k tokens · $0.2292 ($0.0597/pass)
227 tok/s · telemetry 5/5
```

Rich's Live thread refreshes the frame a few times a second; each refresh asks the
tracker for a frame (O(1) counter reads per running trial, rows built only for those on
screen) and hands rich ready-made segments, which is much cheaper than a rich
Table. More running trials than fit: the longest-running first, then "+N more running".
Finished and retried trials are also printed above the live area, so the scrollback
keeps a log.
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markup import escape
from rich.segment import Segment
from rich.style import Style

from sandlot.display.plain import describe
from sandlot.display.text import (
    counts_parts,
    duration_text,
    footer_parts,
    node_parts,
    progress_parts,
)
from sandlot.display.tracker import Frame, RunTracker
from sandlot.live import NodeLive, TrialLive
from sandlot.models import JobSummary, TrialResult

#: Lines around the rows: header, progress, counts, column titles, "+N more", stalls and
#: the footer (up to FOOTER_LINES); with --ray, up to NODE_LINES of nodes as well.
FOOTER_LINES = 2
NODE_LINES = 2
FIXED_LINES = 6 + FOOTER_LINES
MAX_BAR = 40


def _pack(parts: list[str], width: int, max_lines: int) -> list[str]:
    """Join parts with " · " into at most `max_lines` lines of `width` columns; a part that
    no longer fits is left out whole (the summary has it), never cut mid-figure."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        elif len(lines) < max_lines:
            lines.append(part)
    return [_fit(line, width) for line in lines]


def _fit(text: str, width: int) -> str:
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"


class Dashboard:
    """A JobObserver rendering the job live (rich `Live`) while entered."""

    def __init__(self, console: Console, tracker: RunTracker | None = None,
                 refresh_per_second: float = 4, max_rows: int | None = None) -> None:
        self.console = console
        self.tracker = tracker or RunTracker()
        self.refresh_per_second = refresh_per_second
        self.max_rows = max_rows
        self._live: Live | None = None

    def __enter__(self) -> Dashboard:
        # Transient: the end-of-run tables take its place; stray prints go above it.
        self._live = Live(self, console=self.console, refresh_per_second=self.refresh_per_second,
                          transient=True)
        self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- job events -----------------------------------------------------------------------

    def job_started(self, summary: JobSummary, n_pending: int) -> None:
        self.tracker.job_started(summary, n_pending)

    def nodes_started(self, nodes: list[NodeLive]) -> None:
        self.tracker.nodes_started(nodes)

    def trial_started(self, plan: object, try_number: int, live: TrialLive) -> None:
        self.tracker.trial_started(plan, try_number, live)

    def trial_retrying(self, plan: object, result: TrialResult, delay_sec: float) -> None:
        self.tracker.trial_retrying(plan, result, delay_sec)
        if result.error is not None:
            self.console.print(f"[magenta]↻ retry[/] {escape(result.trial_name)} after "
                               f"{result.error.kind} in {delay_sec:.0f}s")

    def trial_finished(self, result: TrialResult, summary: JobSummary) -> None:
        self.tracker.trial_finished(result, summary)
        self.console.print(f"{describe(result)}  "
                           f"[dim][{summary.n_trials}/{summary.n_trials_planned}][/]")

    def job_finished(self, summary: JobSummary) -> None:
        self.tracker.job_finished(summary)

    # -- rendering (rich's refresh thread) ------------------------------------------------

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.render(options.max_width, options.max_height).segments()

    def render(self, width: int, height: int) -> _Canvas:
        """One frame: at most `height` lines of at most `width` columns."""
        node_room = NODE_LINES if self.tracker.nodes else 0
        rows_room = max(1, height - FIXED_LINES - node_room)
        if self.max_rows is not None:
            rows_room = min(rows_room, self.max_rows)
        frame = self.tracker.frame(max_rows=rows_room)
        out = _Canvas()
        self._header(out, frame, width)
        for line in _pack(node_parts(frame), width - 7, node_room):
            out.add("nodes  ", "dim")
            out.line(line, "cyan")
        self._rows(out, frame, width)
        if frame.stalled:
            names = ", ".join(frame.stalled[:3])
            more = f" (+{len(frame.stalled) - 3})" if len(frame.stalled) > 3 else ""
            line = (f"⚠ {len(frame.stalled)} stalled (no progress for "
                    f"{duration_text(frame.stall_after_sec)}): {names}{more}")
            out.line(_fit(line, width), "bold yellow")
        for line in _pack(footer_parts(frame), width, FOOTER_LINES):
            out.line(line, "bold")
        return out

    def _header(self, out: _Canvas, frame: Frame, width: int) -> None:
        head = [f"job {frame.job_name}", f"agent {frame.agent}"]
        if frame.model:
            head.append(f"model {frame.model}")
        if frame.sandbox:
            head.append(f"sandbox {frame.sandbox}")
        out.add("sandlot", "bold")
        out.line(_fit(" · " + " · ".join(head), width - 7), "cyan")
        bar = max(10, min(MAX_BAR, width // 3))
        filled = round(bar * frame.n_done / frame.n_planned) if frame.n_planned else 0
        out.add("━" * filled, "green")
        out.add("━" * (bar - filled), "grey37")
        out.line(_fit("  " + " · ".join(progress_parts(frame)), width - bar))
        counts = counts_parts(frame)
        styles = ("green", "yellow", "red", "cyan", "dim")
        for i, (part, style) in enumerate(zip(counts, styles, strict=True)):
            if i:
                out.add(" · ", "dim")
            out.add(part, style)
        out.line()

    def _rows(self, out: _Canvas, frame: Frame, width: int) -> None:
        if not frame.rows:
            waiting = "no trial running yet" if frame.n_done < frame.n_planned or \
                not frame.n_planned else "no trial running"
            out.line(f" {waiting}", "dim")
            return
        task_w = min(max(4, *(len(r.task) for r in frame.rows)), max(12, width // 3))
        try_w = max(7, *(len(self._attempt(r.attempt, r.try_number)) for r in frame.rows))
        out.line(f" {'task':<{task_w}}  {'attempt':<{try_w}}  {'elapsed':<7}  activity", "dim")
        activity_w = width - task_w - try_w - 16
        for row in frame.rows:
            out.add(f" {_fit(row.task, task_w):<{task_w}}  ", "cyan")
            out.add(f"{self._attempt(row.attempt, row.try_number):<{try_w}}  ")
            if row.stalled:
                out.add(f"{duration_text(row.elapsed_sec):<7}  ", "bold yellow")
                activity = f"⚠ idle {duration_text(row.idle_sec)} · {row.activity}"
                out.line(_fit(activity, activity_w), "yellow")
            else:
                out.add(f"{duration_text(row.elapsed_sec):<7}  ")
                out.line(_fit(row.activity, activity_w))
        if frame.n_more:
            out.line(f" +{frame.n_more} more running", "dim")

    @staticmethod
    def _attempt(attempt: int, try_number: int) -> str:
        return str(attempt) if try_number == 1 else f"{attempt}·t{try_number}"


class _Canvas:
    """Styled pieces laid out line by line, handed to rich as ready segments.

    Cheaper than a rich Table or Text (no measuring, wrapping or span splitting): the
    dashboard has already cut every piece to the width.
    """

    def __init__(self) -> None:
        self._segments: list[Segment] = []
        self.n_lines = 0

    def add(self, text: str, style: str = "") -> None:
        self._segments.append(Segment(text, Style.parse(style) if style else None))

    def line(self, text: str = "", style: str = "") -> None:
        if text:
            self.add(text, style)
        self._segments.append(_NEWLINE)
        self.n_lines += 1

    def segments(self) -> list[Segment]:
        return self._segments[:-1] if self._segments[-1:] == [_NEWLINE] else self._segments

    def plain(self) -> str:
        return "".join(seg.text for seg in self.segments())


_NEWLINE = Segment.line()
