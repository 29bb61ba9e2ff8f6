"""One line per trial event: readable in a terminal, a CI log or a nohup file."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from sandlot.models import JobSummary, TrialResult
from sandlot.trial import TrialPlan


def describe(result: TrialResult) -> str:
    reward = "—" if result.reward is None else f"{result.reward:.3g}"
    total = result.timing.get("total", 0.0)
    if result.error is not None:
        return (f"[red]✗ error[/] {escape(result.trial_name)} {result.error.kind}: "
                f"{escape(result.error.message[:200])} ({total:.1f}s)")
    mark = "[green]✓ passed[/]" if result.passed else "[yellow]✗ failed[/]"
    usage = ""
    if result.usage:
        tokens = int(result.usage.get("total_tokens") or 0)  # type: ignore[call-overload]
        cost = result.usage.get("cost_usd")
        usage = f" {tokens:,} tok" + (f" ${float(cost):.4f}" if cost is not None else "")  # type: ignore[arg-type]
    return f"{mark} {escape(result.trial_name)} reward={reward}{usage} ({total:.1f}s)"


class LinePrinter:
    """A JobObserver printing started/retrying/finished lines with running totals."""

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console = console
        self.quiet = quiet

    def trial_started(self, plan: TrialPlan, try_number: int, live: object = None) -> None:
        if not self.quiet:
            again = f" (try {try_number})" if try_number > 1 else ""
            self.console.print(f"[dim]… started {escape(plan.name)}{again}[/]")

    def trial_retrying(self, plan: TrialPlan, result: TrialResult, delay_sec: float) -> None:
        if not self.quiet and result.error is not None:
            self.console.print(f"[magenta]↻ retry[/] {escape(plan.name)} after "
                               f"{result.error.kind} in {delay_sec:.0f}s")

    def trial_finished(self, result: TrialResult, summary: JobSummary) -> None:
        if self.quiet:
            return
        done = summary.n_trials
        self.console.print(f"{describe(result)}  [dim][{done}/{summary.n_trials_planned}][/]")
