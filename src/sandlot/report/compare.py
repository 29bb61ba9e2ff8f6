"""Compare jobs: per-task outcomes, flips, pass rates with confidence intervals, and a
paired significance test on the tasks the jobs share.

The first job is the baseline; every other job is compared with it. Errored trials are
left out, as in summary.json: they measured the harness, not the agent.

- A task's outcome in a job is the share of its scored trials that passed (`pass_frac`);
  the task *passes* when more than half of them did (with one attempt: it passed).
- A *flip* is a task both jobs scored whose pass/fail outcome differs.
- Pass rates get 95% Wilson score intervals over scored trials.
- The paired test runs on the shared tasks scored in both jobs. With one scored trial per
  task on both sides the outcomes are binary, and the test is the exact McNemar test
  (two-sided binomial on the flips). Otherwise it is a paired bootstrap over tasks of
  the mean difference in `pass_frac`, with a fixed seed so a rerun gives the same p.
  Both are always reported; `test` names the one the verdict uses.
- Tasks that only one job has, or that one job could not score, are listed, never
  silently dropped.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from math import comb, sqrt
from pathlib import Path
from typing import Any

from sandlot.models import JobConfig, TaskSource, TrialResult
from sandlot.viewer.jobs import finished_results, load_config

Z95 = 1.959963984540054
DEFAULT_ALPHA = 0.05
DEFAULT_SEED = 0
DEFAULT_RESAMPLES = 10_000


def wilson_interval(passed: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval for a binomial proportion; None when n is 0."""
    if n <= 0:
        return None
    p = passed / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for b and c discordant pairs (1.0 if none)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_bootstrap(diffs: list[float], *, seed: int = DEFAULT_SEED,
                     n_resamples: int = DEFAULT_RESAMPLES) -> dict[str, Any]:
    """Resample the paired differences (tasks) with replacement.

    Returns the mean difference, its 95% percentile interval and a two-sided p-value for
    "the mean difference is 0": twice the smaller share of resampled means on either side
    of 0, with the +1 correction so it is never exactly 0.
    """
    n = len(diffs)
    if n == 0:
        return {"mean_diff": None, "ci_low": None, "ci_high": None, "p_value": 1.0,
                "n_resamples": n_resamples, "seed": seed}
    rng = random.Random(seed)
    means = []
    for _ in range(n_resamples):
        means.append(sum(rng.choices(diffs, k=n)) / n)
    means.sort()
    at_or_below = sum(1 for m in means if m <= 0)
    at_or_above = sum(1 for m in means if m >= 0)
    p = min(1.0, 2 * (min(at_or_below, at_or_above) + 1) / (n_resamples + 1))
    if all(d == 0 for d in diffs):
        p = 1.0
    lo = means[int(0.025 * (n_resamples - 1))]
    hi = means[round(0.975 * (n_resamples - 1))]
    return {"mean_diff": sum(diffs) / n, "ci_low": lo, "ci_high": hi, "p_value": p,
            "n_resamples": n_resamples, "seed": seed}


@dataclass
class TaskOutcome:
    """One task in one job."""

    n_trials: int
    n_scored: int
    n_passed: int
    mean_reward: float | None
    cost_usd: float | None
    time_sec: float
    tokens: int

    @property
    def pass_frac(self) -> float | None:
        return self.n_passed / self.n_scored if self.n_scored else None

    @property
    def passed(self) -> bool | None:
        return None if not self.n_scored else self.n_passed * 2 > self.n_scored

    @property
    def status(self) -> str:
        if self.n_scored == 0:
            return "errored"
        return "pass" if self.passed else "fail"


@dataclass
class JobData:
    name: str
    path: Path
    config: JobConfig | None
    results: list[TrialResult]

    @property
    def task_names(self) -> list[str]:
        names = list(self.config.task_names) if self.config else []
        names += sorted({r.task for r in self.results} - set(names))
        return names

    def source(self, task: str) -> TaskSource | None:
        """Where the job's task came from (a dataset's), from its config or a result."""
        if self.config is not None and task in self.config.task_sources:
            return self.config.task_sources[task]
        return next((r.task_source for r in self.results
                     if r.task == task and r.task_source is not None), None)

    @property
    def datasets(self) -> list[str]:
        found = [self.source(t) for t in self.task_names]
        return sorted({f"{s.dataset}@{s.version}" for s in found if s is not None})

    def outcomes(self) -> dict[str, TaskOutcome]:
        by_task: dict[str, list[TrialResult]] = defaultdict(list)
        for r in self.results:
            by_task[r.task].append(r)
        out = {}
        for task, rs in by_task.items():
            scored = [r for r in rs if r.scored]
            rewards = [r.reward for r in scored if r.reward is not None]
            costs = [float(r.usage["cost_usd"]) for r in rs  # type: ignore[arg-type]
                     if r.usage and r.usage.get("cost_usd") is not None]
            out[task] = TaskOutcome(
                n_trials=len(rs), n_scored=len(scored), n_passed=sum(r.passed for r in scored),
                mean_reward=sum(rewards) / len(rewards) if rewards else None,
                cost_usd=sum(costs) if costs else None,
                time_sec=sum(r.timing.get("total", 0.0) for r in rs),
                tokens=sum(int(r.usage.get("total_tokens") or 0)  # type: ignore[call-overload]
                           for r in rs if r.usage))
        return out


def load_job(path: Path) -> JobData:
    return JobData(path.name, path, load_config(path), finished_results(path))


def _job_facts(job: JobData) -> dict[str, Any]:
    scored = [r for r in job.results if r.scored]
    passed = sum(r.passed for r in scored)
    ci = wilson_interval(passed, len(scored))
    rewards = [r.reward for r in scored if r.reward is not None]
    costs = [float(r.usage["cost_usd"]) for r in job.results  # type: ignore[arg-type]
             if r.usage and r.usage.get("cost_usd") is not None]
    tokens = [int(r.usage.get("total_tokens") or 0) for r in job.results  # type: ignore[call-overload]
              if r.usage]
    times = [r.timing["total"] for r in job.results if "total" in r.timing]
    n = len(job.results)
    return {
        "name": job.name, "path": str(job.path),
        "agent": job.config.agent if job.config else (job.results[0].agent
                                                      if job.results else None),
        "model": job.config.model if job.config else (job.results[0].model
                                                      if job.results else None),
        "n_tasks": len(job.task_names), "datasets": job.datasets,
        "n_trials": n, "n_scored": len(scored),
        "n_passed": passed, "n_errored": n - len(scored),
        "pass_rate": passed / len(scored) if scored else None,
        "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "total_tokens": sum(tokens) if tokens else None,
        "cost_usd": sum(costs) if costs else None,
        "cost_per_trial": sum(costs) / n if costs and n else None,
        "tokens_per_trial": sum(tokens) / n if tokens and n else None,
        "time_per_trial_sec": sum(times) / len(times) if times else None,
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _pair(a: JobData, b: JobData, oa: dict[str, TaskOutcome], ob: dict[str, TaskOutcome],
          alpha: float, seed: int, n_resamples: int) -> dict[str, Any]:
    tasks_a, tasks_b = set(a.task_names), set(b.task_names)
    shared = sorted(tasks_a & tasks_b)
    scored = [t for t in shared if t in oa and t in ob and oa[t].n_scored and ob[t].n_scored]
    unscored = {t: [name for name, o in ((a.name, oa), (b.name, ob))
                    if t not in o or not o[t].n_scored]
                for t in shared if t not in scored}
    moved = {t: [_source_text(a.source(t)), _source_text(b.source(t))] for t in shared
             if _source_key(a.source(t)) != _source_key(b.source(t))}
    lost = [t for t in scored if oa[t].passed and not ob[t].passed]
    gained = [t for t in scored if ob[t].passed and not oa[t].passed]
    diffs = [ob[t].pass_frac - oa[t].pass_frac for t in scored]  # type: ignore[operator]
    binary = all(oa[t].n_scored == 1 and ob[t].n_scored == 1 for t in scored)
    p_mcnemar = mcnemar_exact(len(lost), len(gained))
    boot = paired_bootstrap(diffs, seed=seed, n_resamples=n_resamples)
    test = "mcnemar" if binary else "bootstrap"
    p = p_mcnemar if binary else boot["p_value"]
    significant = bool(scored) and p < alpha
    rate_a = _mean([oa[t].pass_frac for t in scored])  # type: ignore[misc]
    rate_b = _mean([ob[t].pass_frac for t in scored])  # type: ignore[misc]
    delta = (rate_b - rate_a) if rate_a is not None and rate_b is not None else None

    def per_trial(o: dict[str, TaskOutcome], attr: str) -> float | None:
        n = sum(o[t].n_trials for t in scored)
        values = [getattr(o[t], attr) for t in scored if getattr(o[t], attr) is not None]
        return sum(values) / n if values and n else None

    cost_a, cost_b = per_trial(oa, "cost_usd"), per_trial(ob, "cost_usd")
    time_a, time_b = per_trial(oa, "time_sec"), per_trial(ob, "time_sec")
    tok_a, tok_b = per_trial(oa, "tokens"), per_trial(ob, "tokens")
    return {
        "a": a.name, "b": b.name,
        "n_shared": len(shared), "n_paired": len(scored),
        "only_a": sorted(tasks_a - tasks_b), "only_b": sorted(tasks_b - tasks_a),
        "unscored": unscored, "source_changed": moved,
        "gained": gained, "lost": lost,
        "pass_rate_a": rate_a, "pass_rate_b": rate_b, "delta_pass_rate": delta,
        "mcnemar": {"b": len(lost), "c": len(gained), "p_value": p_mcnemar,
                    "applicable": binary},
        "bootstrap": boot,
        "test": test, "p_value": p, "alpha": alpha, "significant": significant,
        "verdict": _verdict(a.name, b.name, len(scored), rate_a, rate_b, test, p, alpha,
                            significant, len(lost), len(gained)),
        "cost_per_trial_a": cost_a, "cost_per_trial_b": cost_b,
        "delta_cost_per_trial": (cost_b - cost_a) if cost_a is not None and cost_b is not None
        else None,
        "time_per_trial_a": time_a, "time_per_trial_b": time_b,
        "delta_time_per_trial": (time_b - time_a) if time_a is not None and time_b is not None
        else None,
        "tokens_per_trial_a": tok_a, "tokens_per_trial_b": tok_b,
        "delta_tokens_per_trial": (tok_b - tok_a) if tok_a is not None and tok_b is not None
        else None,
    }


def _source_key(source: TaskSource | None) -> tuple[str | None, ...] | None:
    """What makes two tasks of one name the same files: repository, commit and path."""
    if source is None:
        return None
    return (source.git_url, source.git_commit_id, source.path)


def _source_text(source: TaskSource | None) -> str:
    if source is None:
        return "a folder"
    commit = (source.git_commit_id or "tip")[:12]
    return f"{source.dataset}@{source.version} {commit}:{source.path}"


def _verdict(a: str, b: str, n: int, rate_a: float | None, rate_b: float | None, test: str,
             p: float, alpha: float, significant: bool, n_lost: int, n_gained: int) -> str:
    if n == 0 or rate_a is None or rate_b is None:
        return "no shared task was scored in both jobs: nothing to test"
    how = (f"exact McNemar on {n} paired tasks: {n_lost} lost, {n_gained} gained"
           if test == "mcnemar" else f"paired bootstrap over {n} tasks")
    rates = (f"pass rate {rate_a * 100:.1f}% → {rate_b * 100:.1f}% "
             f"({(rate_b - rate_a) * 100:+.1f} pp)")
    if significant:
        better, worse = (b, a) if rate_b > rate_a else (a, b)
        return (f"{better} is better than {worse}: {rates}, p = {p:.3g} < {alpha:g} ({how}): "
                "significant")
    return f"no significant difference: {rates}, p = {p:.3g} ≥ {alpha:g} ({how})"


def compare_jobs(paths: list[Path], *, alpha: float = DEFAULT_ALPHA, seed: int = DEFAULT_SEED,
                 n_resamples: int = DEFAULT_RESAMPLES) -> dict[str, Any]:
    """The comparison of `paths[0]` (baseline) with each other job, as plain JSON data."""
    if len(paths) < 2:
        raise ValueError("compare needs at least two jobs")
    jobs = [load_job(p) for p in paths]
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):  # same folder name in two jobs dirs
        for j in jobs:
            j.name = f"{j.path.parent.name}/{j.path.name}"
    outcomes = [j.outcomes() for j in jobs]
    all_tasks: list[str] = []
    for j in jobs:
        all_tasks += [t for t in j.task_names if t not in all_tasks]
    all_tasks.sort()
    base = jobs[0]
    comparisons = [_pair(base, j, outcomes[0], o, alpha, seed, n_resamples)
                   for j, o in zip(jobs[1:], outcomes[1:], strict=True)]
    rows = []
    for task in all_tasks:
        cells = []
        for j, o in zip(jobs, outcomes, strict=True):
            if task not in j.task_names:
                cells.append({"status": "missing"})
            elif task not in o:
                cells.append({"status": "no result"})
            else:
                t = o[task]
                cells.append({"status": t.status, "pass_frac": t.pass_frac,
                              "mean_reward": t.mean_reward, "n_scored": t.n_scored,
                              "n_trials": t.n_trials, "cost_usd": t.cost_usd,
                              "time_sec": t.time_sec, "tokens": t.tokens})
        flips = []
        for c in comparisons:
            flips.append("gained" if task in c["gained"] else "lost" if task in c["lost"]
                         else None)
        rows.append({"task": task, "cells": cells, "flips": flips})
    return {"alpha": alpha, "seed": seed, "n_resamples": n_resamples,
            "jobs": [_job_facts(j) for j in jobs], "tasks": rows, "comparisons": comparisons}


# ---------------------------------------------------------------- rendering


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.1f}%"


def _money(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "—"
    return f"{'+' if signed and v >= 0 else '-' if v < 0 else ''}${abs(v):.4f}"


def _secs(v: float | None, signed: bool = False) -> str:
    return "—" if v is None else (f"{v:+.1f}s" if signed else f"{v:.1f}s")


def _tokens(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "—"
    sign = ("+" if v >= 0 else "-") if signed else ("-" if v < 0 else "")
    a = abs(v)
    text = f"{a / 1e6:.2f}M" if a >= 1e6 else f"{a / 1e3:.1f}k" if a >= 1e3 else f"{a:.0f}"
    return sign + text


def _cell_text(cell: dict[str, Any]) -> str:
    status = cell["status"]
    if status in ("missing", "no result"):
        return "—" if status == "missing" else "…"
    if status == "errored":
        return "errored"
    mark = "✓" if status == "pass" else "✗"
    if cell["n_scored"] > 1:
        return f"{mark} {cell['pass_frac']:.2f} ({cell['n_scored']})"
    reward = cell["mean_reward"]
    return f"{mark} {reward:.2f}" if reward is not None else mark


def _ci(job: dict[str, Any]) -> str:
    if job["pass_rate"] is None:
        return "—"
    return f"{_pct(job['pass_rate'])} [{_pct(job['ci_low'])}, {_pct(job['ci_high'])}]"


def render_rich(data: dict[str, Any]) -> Any:
    """Rich renderables for the terminal: jobs, tasks, then one block per comparison."""
    from rich.console import Group
    from rich.text import Text

    from sandlot.report.fit import Column, FittedTable

    # Narrow terminals drop the per-trial spend first, then the mean reward and the agent.
    job_columns = [Column("job", "text"), Column("agent · model", "text", drop_rank=5),
                   Column("tasks"), Column("pass rate [95% CI]"),
                   Column("mean reward", drop_rank=4), Column("errored"),
                   Column("tokens/trial", drop_rank=2), Column("cost/trial", drop_rank=3),
                   Column("time/trial", drop_rank=1)]
    job_rows = [[_escape(j["name"]),
                 _escape(f"{j['agent']}" + (f" · {j['model']}" if j["model"] else "")),
                 str(j["n_tasks"]), _ci(j),
                 "—" if j["mean_reward"] is None else f"{j['mean_reward']:.3f}",
                 str(j["n_errored"]), _tokens(j["tokens_per_trial"]),
                 _money(j["cost_per_trial"]), _secs(j["time_per_trial_sec"])]
                for j in data["jobs"]]
    jobs = FittedTable(job_columns, job_rows, title="Jobs")
    sources = [Text(f"  {j['name']}: tasks from {', '.join(j['datasets'])}")
               for j in data["jobs"] if j.get("datasets")]
    task_columns = [Column("task", "text")] + [Column(j["name"], "words") for j in data["jobs"]]
    if len(data["jobs"]) == 2:
        task_columns.append(Column("flip", "words"))
    task_rows = []
    for row in data["tasks"]:
        cells = [_cell_text(c) for c in row["cells"]]
        extra = []
        if len(data["jobs"]) == 2:
            flip = row["flips"][0]
            extra = ["[green]↑ gained[/]" if flip == "gained" else
                     "[red]↓ lost[/]" if flip == "lost" else ""]
        elif any(row["flips"]):
            cells = [cells[0]] + [
                c + (" ↑" if f == "gained" else " ↓" if f == "lost" else "")
                for c, f in zip(cells[1:], row["flips"], strict=True)]
        task_rows.append([_escape(row["task"]), *cells, *extra])
    tasks = FittedTable(task_columns, task_rows, title="Tasks")
    parts: list[Any] = [jobs, *sources, tasks]
    for c in data["comparisons"]:
        lines = [Text.from_markup(f"[bold]{c['b']}[/] vs [bold]{c['a']}[/] (baseline)")]
        delta = c["delta_pass_rate"]
        lines.append(Text(f"  paired tasks: {c['n_paired']} of {c['n_shared']} shared; "
                          f"pass rate {_pct(c['pass_rate_a'])} → {_pct(c['pass_rate_b'])} "
                          f"({'—' if delta is None else f'{delta * 100:+.1f} pp'})"))
        lines.append(Text(f"  flips: {len(c['gained'])} gained"
                          + (f" ({', '.join(c['gained'])})" if c["gained"] else "")
                          + f", {len(c['lost'])} lost"
                          + (f" ({', '.join(c['lost'])})" if c["lost"] else "")))
        m, bt = c["mcnemar"], c["bootstrap"]
        lines.append(Text(f"  exact McNemar: b={m['b']} c={m['c']} p={m['p_value']:.4g}"
                          + ("" if m["applicable"] else " (not used: several trials per task)")))
        if bt["mean_diff"] is not None:
            lines.append(Text(f"  paired bootstrap: Δ {bt['mean_diff'] * 100:+.1f} pp "
                              f"[{bt['ci_low'] * 100:+.1f}, {bt['ci_high'] * 100:+.1f}] "
                              f"p={bt['p_value']:.4g} ({bt['n_resamples']} resamples, "
                              f"seed {bt['seed']})"))
        color = "green" if c["significant"] else "yellow"
        lines.append(Text.from_markup(f"  [{color}]verdict: {_escape(c['verdict'])}[/]"))
        lines.append(Text(
            f"  per trial: cost {_money(c['cost_per_trial_a'])} → "
            f"{_money(c['cost_per_trial_b'])} ({_money(c['delta_cost_per_trial'], True)}), "
            f"time {_secs(c['time_per_trial_a'])} → {_secs(c['time_per_trial_b'])} "
            f"({_secs(c['delta_time_per_trial'], True)}), tokens "
            f"{_tokens(c['tokens_per_trial_a'])} → {_tokens(c['tokens_per_trial_b'])} "
            f"({_tokens(c['delta_tokens_per_trial'], True)})"))
        for label, names in (("only in " + c["a"], c["only_a"]),
                             ("only in " + c["b"], c["only_b"])):
            if names:
                lines.append(Text.from_markup(
                    f"  [yellow]{_escape(label)}: {len(names)} task(s) not compared:[/] "
                    + _escape(", ".join(names))))
        if c["source_changed"]:
            lines.append(Text.from_markup(
                f"  [yellow]other task files in the two jobs: {len(c['source_changed'])} "
                "task(s), compared all the same:[/] " + _escape("; ".join(
                    f"{t} ({was} → {now})" for t, (was, now) in c["source_changed"].items()))))
        if c["unscored"]:
            lines.append(Text.from_markup(
                f"  [yellow]not scored in both: {len(c['unscored'])} task(s) left out:[/] "
                + _escape(", ".join(f"{t} ({'/'.join(j)})"
                                    for t, j in c["unscored"].items()))))
        parts.append(Group(*lines))
    return Group(*parts)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def render_markdown(data: dict[str, Any]) -> str:
    """The comparison as Markdown, for a paper or a pull request."""
    out = ["## Jobs", "", "| job | agent · model | tasks | pass rate [95% CI] | mean reward "
           "| errored | tokens/trial | cost/trial | time/trial |",
           "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for j in data["jobs"]:
        model = f" · {j['model']}" if j["model"] else ""
        if j.get("datasets"):
            model += f" (tasks from {', '.join(j['datasets'])})"
        reward = "—" if j["mean_reward"] is None else f"{j['mean_reward']:.3f}"
        out.append(f"| {j['name']} | {j['agent']}{model} | {j['n_tasks']} | {_ci(j)} | "
                   f"{reward} | {j['n_errored']} | {_tokens(j['tokens_per_trial'])} | "
                   f"{_money(j['cost_per_trial'])} | {_secs(j['time_per_trial_sec'])} |")
    out += ["", "## Tasks", "", "| task | " + " | ".join(j["name"] for j in data["jobs"])
            + (" | flip |" if len(data["jobs"]) == 2 else " |"),
            "|---|" + "--:|" * len(data["jobs"]) + ("---|" if len(data["jobs"]) == 2 else "")]
    for row in data["tasks"]:
        texts = [_cell_text(c) for c in row["cells"]]
        if len(data["jobs"]) > 2:
            texts = [texts[0]] + [t + (" ↑" if f == "gained" else " ↓" if f == "lost" else "")
                                  for t, f in zip(texts[1:], row["flips"], strict=True)]
        cells = " | ".join(texts)
        flip = ""
        if len(data["jobs"]) == 2:
            f = row["flips"][0]
            flip = " ↑ gained |" if f == "gained" else " ↓ lost |" if f == "lost" else "  |"
        out.append(f"| {row['task']} | {cells} |{flip}")
    for c in data["comparisons"]:
        out += ["", f"## {c['b']} vs {c['a']}", "", f"**{c['verdict']}**", "",
                f"- paired tasks: {c['n_paired']} of {c['n_shared']} shared",
                f"- gained: {', '.join(c['gained']) or 'none'}",
                f"- lost: {', '.join(c['lost']) or 'none'}",
                f"- exact McNemar: b={c['mcnemar']['b']}, c={c['mcnemar']['c']}, "
                f"p={c['mcnemar']['p_value']:.4g}"]
        bt = c["bootstrap"]
        if bt["mean_diff"] is not None:
            out.append(f"- paired bootstrap: Δ {bt['mean_diff'] * 100:+.1f} pp "
                       f"[{bt['ci_low'] * 100:+.1f}, {bt['ci_high'] * 100:+.1f}], "
                       f"p={bt['p_value']:.4g} ({bt['n_resamples']} resamples, seed "
                       f"{bt['seed']})")
        out.append(f"- cost per trial: {_money(c['cost_per_trial_a'])} → "
                   f"{_money(c['cost_per_trial_b'])}; time per trial: "
                   f"{_secs(c['time_per_trial_a'])} → {_secs(c['time_per_trial_b'])}")
        if c["source_changed"]:
            out.append("- other task files in the two jobs: " + "; ".join(
                f"{t} ({was} → {now})" for t, (was, now) in c["source_changed"].items()))
        if c["only_a"] or c["only_b"] or c["unscored"]:
            out.append(f"- not compared: only in {c['a']}: {', '.join(c['only_a']) or 'none'}; "
                       f"only in {c['b']}: {', '.join(c['only_b']) or 'none'}; not scored in "
                       f"both: {', '.join(c['unscored']) or 'none'}")
    return "\n".join(out) + "\n"
