"""The end-of-run tables: per task, then the job's totals."""

from __future__ import annotations

from collections import defaultdict

from rich.console import Group
from rich.markup import escape

from sandlot.models import JobSummary, TrialResult
from sandlot.report.fit import Column, FittedTable
from sandlot.report.outcome import count_outcomes


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def tokens_text(n: object) -> str:
    value = int(n or 0)  # type: ignore[call-overload]
    if value >= 1_000_000:
        return f"{value / 1e6:.2f}M"
    return f"{value / 1e3:.1f}k" if value >= 1000 else str(value)


def cost_text(cost: object) -> str:
    return "—" if cost is None else f"${float(cost):.4f}"  # type: ignore[arg-type]


# Dropped first to last when the terminal is narrow: per-task tokens and cost (the job's
# totals stay in the summary), then the mean reward (the pass counts stay).
TASK_COLUMNS = [Column("task", "text"), Column("passed"), Column("failed"), Column("errored"),
                Column("mean reward", drop_rank=3), Column("tokens", drop_rank=1),
                Column("cost", drop_rank=2), Column("errors", "text")]


def tasks_table(results: list[TrialResult]) -> FittedTable:
    with_usage = any(r.usage for r in results)
    columns = [c for c in TASK_COLUMNS if with_usage or c.header not in ("tokens", "cost")]
    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_task[r.task].append(r)
    rows: list[list[str]] = []
    for task in sorted(by_task):
        rs = by_task[task]
        counts = count_outcomes(rs)
        rewards = [r.reward for r in rs if r.scored and r.reward is not None]
        kinds = sorted({str(r.error.kind) for r in rs if r.error is not None})
        row = [escape(task), str(counts.passed), str(counts.failed), str(counts.errored),
               f"{sum(rewards) / len(rewards):.3f}" if rewards else "—"]
        if with_usage:
            usages = [r.usage for r in rs if r.usage]
            costs = [u.get("cost_usd") for u in usages if u.get("cost_usd") is not None]
            row += [tokens_text(sum(int(u.get("total_tokens") or 0) for u in usages)),  # type: ignore[call-overload]
                    cost_text(sum(costs) if costs else None)]  # type: ignore[arg-type]
        notes = kinds + ([f"[red]tampered ×{counts.tampered}[/]"] if counts.tampered else [])
        rows.append([*row, ", ".join(notes)])
    return FittedTable(columns, rows, title="Tasks")


def summary_table(summary: JobSummary) -> FittedTable:
    rows = [
        ("trials", f"{summary.n_trials}/{summary.n_trials_planned}"
         + (f" ({summary.n_resumed} resumed)" if summary.n_resumed else "")),
        ("passed", str(summary.n_passed)),
        ("failed", failed_text(summary)),
        ("errored", str(summary.n_errored) + (
            " (" + ", ".join(f"{n} {cause}" for cause, n in summary.errors_by_cause.items())
            + ")" if summary.errors_by_cause else "")),
        ("pass rate (excl. errors)", _pct(summary.pass_rate)),
        ("mean reward", "—" if summary.mean_reward is None else f"{summary.mean_reward:.3f}"),
    ]
    rows += [(f"pass@{k}", _pct(v)) for k, v in summary.pass_at_k.items()]
    rows += [(f"step {escape(name)} (passed / run)",
              f"{s.n_passed}/{s.n_run}" + ("" if s.mean_reward is None
                                           else f", mean reward {s.mean_reward:.3f}")
              + (f", stopped the rest {s.n_stopped}×" if s.n_stopped else ""))
             for name, s in summary.steps.items()]
    if summary.usage:
        u = summary.usage
        rows += [("tokens (in / out)", f"{tokens_text(u.get('input_tokens'))} / "
                                       f"{tokens_text(u.get('output_tokens'))}"),
                 ("model requests", str(u.get("n_requests"))),
                 ("cost (gateway)", cost_text(u.get("cost_usd")))]
        if summary.retried_usage:
            r = summary.retried_usage
            rows.append(("retried tries (tokens / cost)",
                         f"{tokens_text(r.get('total_tokens'))} / {cost_text(r.get('cost_usd'))}"))
            rows.append(("total spend", cost_text(summary.spend_usd)))
        n = summary.n_trials or 1
        if u.get("cost_usd") is not None:
            rows.append(("cost per trial", cost_text(float(u["cost_usd"]) / n)))  # type: ignore[arg-type]
        if summary.cost_per_passed_usd is not None:
            rows.append(("cost per passed trial", cost_text(summary.cost_per_passed_usd)))
        if summary.tokens_per_sec is not None:
            rows.append(("tokens/s", f"{summary.tokens_per_sec:,.0f}"))
        if summary.telemetry_coverage is not None:
            rows.append(("telemetry coverage", _pct(summary.telemetry_coverage)))
    rows += [(f"errors: {kind}", str(n)) for kind, n in summary.errors_by_kind.items()]
    if summary.roots.get("host-fallback"):
        rows.append(("ran on the host's root, not their image (host-fallback)",
                     f"[yellow]{summary.roots['host-fallback']}[/]"))
    rows += [(f"node {escape(node)} (trials / passed / errored)",
              f"{f.n_trials} / {f.n_passed} / {f.n_errored}")
             for node, f in summary.nodes.items()]
    rows += [(f"time {phase} (mean / total)", f"{t.mean_sec:.2f}s / {t.total_sec:.1f}s")
             for phase, t in summary.timing.items()]
    # Values wrap between words only, so a figure is never split. The agent and model
    # go in the title, which wraps anywhere: a long model name squeezes no figure.
    columns = [Column("metric", "text"), Column("value", "words")]
    agent = summary.agent + (f" · {summary.model}" if summary.model else "")
    return FittedTable(columns, [[name, value] for name, value in rows],
                       title=escape(f"Job {summary.job_name}: {agent}"), show_header=False)


def failed_text(summary: JobSummary) -> str:
    """Failures, with those the agent caused by tampering or by breaking the verifier
    named apart from honest ones."""
    parts = [(summary.n_tampered, "tampered"), (summary.n_verifier_broken, "broke the verifier")]
    named = [f"[red]{n} {what}[/]" for n, what in parts if n]
    if not named:
        return str(summary.n_failed)
    honest = summary.n_failed - summary.n_tampered - summary.n_verifier_broken
    return f"{summary.n_failed} ({honest} honest, {', '.join(named)})"


def end_of_run(summary: JobSummary, results: list[TrialResult]) -> Group:
    return Group(tasks_table(results), summary_table(summary))
