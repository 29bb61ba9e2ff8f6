"""Exports of a finished (or partial) job: ATIF trajectories, one row per trial, Markdown.

- `atif`: one ATIF-v1.4 trajectory JSON per trial (Harbor's Agent Trajectory Interchange
  Format): the system prompt and each user message (instruction, repair feedback) as
  steps, each model turn as an agent step with its reasoning, tool calls, the tool
  results as its observation, and the gateway's token counts and cost as its metrics;
  `final_metrics` totals the trial. Built from the same logs as the viewer, a page at a
  time.
- `jsonl` / `csv`: one row per trial with the columns in `ROW_COLUMNS` (jsonl adds the
  `rewards` object).
- `markdown`: the job's headline figures with a 95% Wilson interval, per-task results and
  errors, for a paper or a pull request.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandlot.models import TrialResult
from sandlot.report.compare import wilson_interval
from sandlot.viewer.jobs import finished_results, job_summary, load_config
from sandlot.viewer.lines import IndexCache
from sandlot.viewer.trajectory import MAX_PAGE, TrialTrajectory

ATIF_VERSION = "ATIF-v1.4"
FORMATS = ("atif", "jsonl", "csv", "markdown")

ROW_COLUMNS = (
    "job", "trial", "task", "attempt", "agent", "model", "reward", "passed", "scored",
    "error_kind", "error_phase", "error_message", "setup_sec", "agent_sec", "verify_sec",
    "total_sec", "script_time_sec", "input_tokens", "output_tokens", "cache_read_tokens",
    "reasoning_tokens", "total_tokens", "cost_usd", "n_requests", "turns", "tool_calls",
    "repaired", "repair_attempts", "tries", "started_at", "finished_at",
)


def trial_row(job: str, r: TrialResult) -> dict[str, Any]:
    usage = r.usage or {}
    return {
        "job": job, "trial": r.trial_name, "task": r.task, "attempt": r.attempt,
        "agent": r.agent, "model": r.model, "reward": r.reward, "passed": r.passed,
        "scored": r.scored,
        "error_kind": str(r.error.kind) if r.error else None,
        "error_phase": r.error.phase if r.error else None,
        "error_message": r.error.message if r.error else None,
        "setup_sec": r.timing.get("setup"), "agent_sec": r.timing.get("agent"),
        "verify_sec": r.timing.get("verify"), "total_sec": r.timing.get("total"),
        "script_time_sec": round(r.script_time_sec, 4),
        "input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
        "cache_read_tokens": usage.get("cache_read_tokens"),
        "reasoning_tokens": usage.get("reasoning_tokens"),
        "total_tokens": usage.get("total_tokens"), "cost_usd": usage.get("cost_usd"),
        "n_requests": usage.get("n_requests"),
        "turns": r.agent_info.get("turns"), "tool_calls": r.agent_info.get("tool_calls"),
        "repaired": r.repaired, "repair_attempts": max(0, len(r.attempts) - 1),
        "tries": r.tries, "started_at": r.started_at, "finished_at": r.finished_at,
    }


def _results(job_dir: Path) -> list[TrialResult]:
    return sorted(finished_results(job_dir), key=lambda r: (r.task, r.attempt))


def export_jsonl(job_dir: Path) -> str:
    lines = []
    for r in _results(job_dir):
        row = trial_row(job_dir.name, r)
        row["rewards"] = r.rewards
        lines.append(json.dumps(row, ensure_ascii=False))
    return "".join(line + "\n" for line in lines)


def export_csv(job_dir: Path) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(ROW_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for r in _results(job_dir):
        writer.writerow({k: ("" if v is None else v)
                         for k, v in trial_row(job_dir.name, r).items()})
    return buf.getvalue()


# ---------------------------------------------------------------- markdown


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:.1f}%"


def export_markdown(job_dir: Path) -> str:
    config = load_config(job_dir)
    summary = job_summary(job_dir, config)
    results = _results(job_dir)
    scored = [r for r in results if r.scored]
    n_passed = sum(r.passed for r in scored)
    ci = wilson_interval(n_passed, len(scored))
    agent = config.agent if config else (summary.agent if summary else "?")
    model = config.model if config else (summary.model if summary else None)
    out = [f"# {job_dir.name}", "",
           f"Agent **{agent}**" + (f", model **{model}**" if model else "")
           + (f", {len(config.task_names)} tasks × {config.n_attempts} attempt(s)"
              if config else "") + (", repair attempts "
                                    f"{config.repair_attempts}" if config and
                                    config.repair_attempts else "") + ".", ""]
    rows = [("trials", f"{len(results)}" + (f" of {summary.n_trials_planned}"
                                            if summary else "")),
            ("passed / failed / errored", f"{n_passed} / {len(scored) - n_passed} / "
                                          f"{len(results) - len(scored)}"),
            ("pass rate (errors excluded) [95% Wilson CI]",
             f"{_pct(n_passed / len(scored) if scored else None)}"
             + (f" [{_pct(ci[0])}, {_pct(ci[1])}]" if ci else ""))]
    if summary is not None:
        if summary.mean_reward is not None:
            rows.append(("mean reward", f"{summary.mean_reward:.3f}"))
        rows += [(f"pass@{k}", _pct(v)) for k, v in summary.pass_at_k.items()]
        rows += [(f"step {name}: passed / run", f"{s.n_passed} / {s.n_run}")
                 for name, s in summary.steps.items()]
        if summary.usage:
            u = summary.usage
            rows.append(("tokens (in / out)", f"{u.get('input_tokens')} / "
                                              f"{u.get('output_tokens')}"))
            if u.get("cost_usd") is not None:
                rows.append(("cost (gateway)", f"${float(u['cost_usd']):.4f}"))  # type: ignore[arg-type]
        if "total" in summary.timing:
            t = summary.timing["total"]
            rows.append(("time per trial (mean)", f"{t.mean_sec:.1f}s"))
    out += ["| metric | value |", "|---|--:|"] + [f"| {k} | {v} |" for k, v in rows]
    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_task[r.task].append(r)
    out += ["", "## Tasks", "", "| task | passed | failed | errored | mean reward | errors |",
            "|---|--:|--:|--:|--:|---|"]
    for task in sorted(by_task):
        rs = by_task[task]
        sc = [r for r in rs if r.scored]
        rewards = [r.reward for r in sc if r.reward is not None]
        kinds = ", ".join(sorted({str(r.error.kind) for r in rs if r.error}))
        mean = f"{sum(rewards) / len(rewards):.3f}" if rewards else "—"
        out.append(f"| {task} | {sum(r.passed for r in sc)} | "
                   f"{sum(not r.passed for r in sc)} | {len(rs) - len(sc)} | {mean} | {kinds} |")
    kinds = Counter(str(r.error.kind) for r in results if r.error)
    if kinds:
        out += ["", "## Errors", "", "| kind | trials |", "|---|--:|"]
        out += [f"| {k} | {n} |" for k, n in sorted(kinds.items())]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- ATIF


def _iso(t: Any) -> str | None:
    if not isinstance(t, int | float):
        return None
    return datetime.fromtimestamp(float(t), UTC).isoformat(timespec="milliseconds")


def _arguments_obj(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments or "{}")
        except ValueError:
            return {"_raw": arguments}
        return value if isinstance(value, dict) else {"_value": value}
    return {} if arguments is None else {"_value": arguments}


def _metrics(llm: dict[str, Any] | None) -> dict[str, Any] | None:
    if not llm:
        return None
    m: dict[str, Any] = {}
    for src, dst in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens"),
                     ("cache_read_tokens", "cached_tokens"), ("cost_usd", "cost_usd")):
        if llm.get(src) is not None:
            m[dst] = llm[src]
    extra = {k: llm[k] for k in ("reasoning_tokens", "cache_write_tokens", "latency_sec",
                                 "ttft_sec", "status", "attempts", "seq")
             if llm.get(k) is not None}
    if extra:
        m["extra"] = extra
    return m or None


def atif_trajectory(job_dir: Path, result: TrialResult,
                    cache: IndexCache | None = None) -> dict[str, Any]:
    """One trial as an ATIF trajectory (a JSON-ready dict)."""
    config = load_config(job_dir)
    traj = TrialTrajectory(job_dir / result.trial_name, cache or IndexCache(),
                           full_text=True)
    steps: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None  # the agent step tool results attach to
    n_results = 0

    def add(step: dict[str, Any]) -> dict[str, Any]:
        step = {"step_id": len(steps) + 1, **step}
        steps.append(step)
        return step

    offset: int | None = 0
    while offset is not None and traj.source is not None:
        page = traj.steps(offset, MAX_PAGE)
        for s in page["steps"]:
            kind, ts = s["kind"], _iso(s.get("t"))
            if kind in ("system", "user"):
                current = None
                add({"timestamp": ts, "source": kind, "message": s.get("text") or ""})
            elif kind == "assistant":
                step: dict[str, Any] = {"timestamp": ts, "source": "agent",
                                        "message": s.get("text") or ""}
                llm = s.get("llm") or {}
                if llm.get("model"):
                    step["model_name"] = llm["model"]
                if s.get("thinking"):
                    step["reasoning_content"] = s["thinking"]
                calls = [{"tool_call_id": str(c.get("id") or f"call_{len(steps) + 1}_{k}"),
                          "function_name": str(c.get("name") or "unknown"),
                          "arguments": _arguments_obj(c.get("arguments"))}
                         for k, c in enumerate(s.get("tool_calls") or [])]
                if calls:
                    step["tool_calls"] = calls
                if (metrics := _metrics(llm)) is not None:
                    step["metrics"] = metrics
                current, n_results = add(step), 0
            elif kind == "tool":
                tool = s.get("tool") or {}
                if current is None:  # a tool result with no model turn before it on record
                    current, n_results = add({"timestamp": ts, "source": "agent",
                                              "message": ""}), 0
                ids = [c["tool_call_id"] for c in current.get("tool_calls") or []]
                cid = tool.get("call_id")
                if cid not in ids:
                    cid = ids[n_results] if n_results < len(ids) else None
                n_results += 1
                res: dict[str, Any] = {"content": str(tool.get("output") or "")}
                if cid is not None:
                    res["source_call_id"] = cid
                current.setdefault("observation", {"results": []})["results"].append(res)
                facts = {k: tool[k] for k in ("is_error", "duration_sec") if tool.get(k)
                         is not None}
                if facts:
                    current.setdefault("extra", {}).setdefault("tool_results", []).append(
                        {"source_call_id": cid, **facts})
        offset = page["next_offset"]
    if not steps:  # an agent that called no model (the oracle): say what it did
        final = result.agent_info.get("final_answer") or result.agent_info.get(
            "final_response") or f"{result.agent} ran without model calls"
        add({"source": "agent", "message": str(final), "timestamp": result.started_at})
    for s in steps:
        if s.get("timestamp") is None:
            s.pop("timestamp", None)
    usage = result.usage or {}
    totals = {"prompt": 0, "completion": 0, "cached": 0}
    for s in steps:
        m = s.get("metrics") or {}
        totals["prompt"] += int(m.get("prompt_tokens") or 0)
        totals["completion"] += int(m.get("completion_tokens") or 0)
        totals["cached"] += int(m.get("cached_tokens") or 0)
    final_metrics: dict[str, Any] = {
        "total_prompt_tokens": int(usage.get("input_tokens") or totals["prompt"]),  # type: ignore[call-overload]
        "total_completion_tokens": int(usage.get("output_tokens")  # type: ignore[call-overload]
                                       or totals["completion"]),
        "total_cached_tokens": int(usage.get("cache_read_tokens") or totals["cached"]),  # type: ignore[call-overload]
        "total_steps": len(steps),
        "extra": {"n_requests": usage.get("n_requests"),
                  "reasoning_tokens": usage.get("reasoning_tokens"),
                  "usage_source": usage.get("source")},
    }
    if usage.get("cost_usd") is not None:
        final_metrics["total_cost_usd"] = float(usage["cost_usd"])  # type: ignore[arg-type]
    version = (config.agent_version if config and config.agent_version else
               str(result.agent_info.get("agent_version") or "unknown"))
    agent: dict[str, Any] = {"name": result.agent, "version": version}
    if result.model:
        agent["model_name"] = result.model
    return {
        "schema_version": ATIF_VERSION,
        "session_id": f"{job_dir.name}/{result.trial_name}",
        "agent": agent,
        "steps": steps,
        "notes": f"Exported by sandlot from {traj.source or 'result.json'} "
                 f"(job {job_dir.name}, trial {result.trial_name}).",
        "final_metrics": final_metrics,
        "extra": {"sandlot": {
            "job": job_dir.name, "trial": result.trial_name, "task": result.task,
            "attempt": result.attempt, "reward": result.reward, "rewards": result.rewards,
            "passed": result.passed, "scored": result.scored,
            "error": result.error.model_dump() if result.error else None,
            "timing": result.timing, "repaired": result.repaired}},
    }


def export_atif(job_dir: Path, out_dir: Path) -> list[Path]:
    """Write `<out_dir>/<trial>.json` for every finished trial; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = IndexCache()
    written = []
    for r in _results(job_dir):
        path = out_dir / f"{r.trial_name}.json"
        data = atif_trajectory(job_dir, r, cache)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        tmp.replace(path)
        written.append(path)
    return written


def export_text(job_dir: Path, fmt: str) -> str:
    """jsonl, csv or markdown as one string."""
    if fmt == "jsonl":
        return export_jsonl(job_dir)
    if fmt == "csv":
        return export_csv(job_dir)
    if fmt == "markdown":
        return export_markdown(job_dir)
    raise ValueError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
