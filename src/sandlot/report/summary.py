"""Aggregate trial results into summary.json figures (pass rate, pass@k, errors, timing)."""

from __future__ import annotations

from collections import Counter, defaultdict
from math import comb

from sandlot.errors import AGENT_FAULT_KINDS, ErrorKind
from sandlot.models import JobSummary, NodeFigures, PhaseTiming, StepSummary, TrialResult
from sandlot.report.outcome import count_outcomes


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), for n trials, c passed."""
    if k > n:
        raise ValueError(f"k={k} exceeds the n={n} trials")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def task_pass_at_k(results: list[TrialResult], max_k: int) -> dict[str, float]:
    """Mean over tasks of pass@k, for each k up to `max_k`.

    Errored trials are left out (they measure the harness, not the agent; an agent's own
    timeout or crash is a scored failure, see `TrialResult.scored`); a task counts
    for a given k only if it has at least k scored trials.
    """
    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        if r.scored:
            by_task[r.task].append(r)
    out: dict[str, float] = {}
    for k in range(1, max_k + 1):
        values = [pass_at_k(len(rs), sum(r.passed for r in rs), k)
                  for rs in by_task.values() if len(rs) >= k]
        if values:
            out[str(k)] = round(sum(values) / len(values), 6)
    return out


USAGE_INT_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                    "reasoning_tokens", "total_tokens", "n_requests", "n_rate_limited")


def sum_usage(usages: list[dict[str, object]]) -> dict[str, object] | None:
    """The trials' gateway usage summed; cost is null only if no trial had a known price."""
    if not usages:
        return None
    out: dict[str, object] = {k: sum(int(u.get(k) or 0) for u in usages)  # type: ignore[call-overload]
                              for k in USAGE_INT_FIELDS}
    costs = [float(u["cost_usd"]) for u in usages if u.get("cost_usd") is not None]  # type: ignore[arg-type]
    out["cost_usd"] = round(sum(costs), 8) if costs else None
    out["source"] = "gateway"
    return out


def usage_rates(results: list[TrialResult], usage: dict[str, object] | None, n_passed: int,
                has_model: bool) -> dict[str, object]:
    """summary.json's spend figures: cost per passed trial, tokens/s, telemetry coverage."""
    with_usage = [r for r in results if r.usage is not None]
    cost = usage.get("cost_usd") if usage else None
    agent_sec = sum(r.timing.get("agent", 0.0) for r in with_usage)
    tokens = int(usage.get("total_tokens") or 0) if usage else 0  # type: ignore[call-overload]
    return {
        "cost_per_passed_usd": (round(float(cost) / n_passed, 8)  # type: ignore[arg-type]
                                if cost is not None and n_passed else None),
        "tokens_per_sec": round(tokens / agent_sec, 2) if tokens and agent_sec > 0 else None,
        "telemetry_coverage": (round(len(with_usage) / len(results), 6)
                               if has_model and results else None),
        "n_trials_with_usage": len(with_usage),
        "n_usage_mismatch": sum(r.usage_mismatch for r in results),
    }


def integrity_counts(scored: list[TrialResult]) -> dict[str, int]:
    """Trials scored after their planted hooks were undone, and failures the agent caused
    by breaking the verifier (tampering is counted with the outcomes)."""
    status = Counter(r.integrity.status for r in scored if r.integrity is not None)
    return {"n_neutralized": status["neutralized"],
            "n_verifier_broken": sum(r.verifier_failure is not None for r in scored)}


def step_figures(results: list[TrialResult]) -> dict[str, StepSummary]:
    """Each step name's runs, scores and passes over the multi-step trials, in the order
    the steps first appear."""
    figures: dict[str, StepSummary] = {}
    rewards: dict[str, list[float]] = defaultdict(list)
    for r in results:
        for step in r.steps or []:
            f = figures.setdefault(step.name, StepSummary())
            f.n_run += 1
            if step.reward is not None and (step.error is None
                                            or step.error.kind in AGENT_FAULT_KINDS):
                f.n_scored += 1
                rewards[step.name].append(step.reward)
            f.n_passed += step.passed
        stopped = r.multi_step.stopped_after if r.multi_step else None
        if stopped in figures:
            figures[stopped].n_stopped += 1  # type: ignore[index]
    for name, values in rewards.items():
        figures[name].mean_reward = round(sum(values) / len(values), 6)
    return figures


def summarize(job_name: str, agent: str, model: str | None, n_planned: int, max_k: int,
              results: list[TrialResult], *, n_resumed: int = 0,
              complete: bool = False, stopped: str | None = None,
              stopped_by: str | None = None) -> JobSummary:
    counts = count_outcomes(results)
    scored = [r for r in results if r.scored]
    errored = [r for r in results if not r.scored]
    n_passed = counts.passed
    rewards = [r.reward for r in scored if r.reward is not None]
    phases: dict[str, list[float]] = defaultdict(list)
    for r in results:
        for phase, sec in r.timing.items():
            phases[phase].append(sec)
    kinds = Counter(str(r.error.kind) for r in results if r.error is not None)
    usage = sum_usage([r.usage for r in results if r.usage is not None])
    retried = sum_usage([r.retried_usage for r in results if r.retried_usage is not None])
    costs = [u["cost_usd"] for u in (usage, retried) if u and u.get("cost_usd") is not None]
    return JobSummary(
        job_name=job_name, agent=agent, model=model, n_trials_planned=n_planned,
        n_trials=len(results), n_passed=n_passed, n_failed=counts.failed,
        n_errored=counts.errored, n_tampered=counts.tampered,
        pass_rate=round(n_passed / len(scored), 6) if scored else None,
        pass_rate_all=round(n_passed / len(results), 6) if results else None,
        mean_reward=round(sum(rewards) / len(rewards), 6) if rewards else None,
        pass_at_k=task_pass_at_k(results, max_k),
        errors_by_kind=dict(sorted(kinds.items())),
        errors_by_cause=dict(sorted(Counter(
            (r.error.caused_by if r.error else None) or "unknown" for r in errored).items())),
        **integrity_counts(scored),
        roots=dict(sorted(Counter(str(r.environment.get("base"))
                                  for r in results if r.environment).items())),
        timing={p: PhaseTiming(mean_sec=round(sum(v) / len(v), 4), total_sec=round(sum(v), 4))
                for p, v in phases.items()},
        nodes=node_figures(results),
        steps=step_figures(results),
        usage=usage, retried_usage=retried,
        spend_usd=round(sum(float(c) for c in costs), 8) if costs else None,  # type: ignore[arg-type]
        **usage_rates(results, usage, n_passed, model is not None),  # type: ignore[arg-type]
        n_resumed=n_resumed, n_cancelled=counts.cancelled,
        complete=complete, stopped=stopped, stopped_by=stopped_by,  # type: ignore[arg-type]
        n_budget_exceeded=kinds.get(str(ErrorKind.BUDGET_EXCEEDED), 0),
    )


def node_figures(results: list[TrialResult]) -> dict[str, NodeFigures]:
    """Finished trials by the cluster node that ran them (none for a local job)."""
    by_node: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        if r.node is not None:
            by_node[r.node].append(r)
    figures = {}
    for node, ran in sorted(by_node.items()):
        counts = count_outcomes(ran)
        figures[node] = NodeFigures(n_trials=len(ran), n_passed=counts.passed,
                                    n_errored=counts.errored)
    return figures


def error_rate(summary: JobSummary) -> float | None:
    """The share of finished trials that ended in an error (not cancelled ones: a cancel is
    the user's); None before any trial finished. `--max-error-rate` is compared to it."""
    n_trials = summary.n_trials - summary.n_cancelled
    if n_trials <= 0:
        return None
    return (summary.n_errored - summary.n_cancelled) / n_trials
