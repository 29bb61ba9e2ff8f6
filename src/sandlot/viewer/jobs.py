"""Reading job folders (docs/results.md) for the viewer, `compare` and `export`.

Nothing here needs a web server. Files are read when asked for and cached by
(path, size, mtime), so a page refresh of a 2,000-trial job re-reads only the result
files that changed. Paths from a request are resolved with `safe_child`, which refuses
anything outside the job folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sandlot.models import JobConfig, JobSummary, TrialResult
from sandlot.report.outcome import is_tampered, trial_outcome
from sandlot.viewer.lines import LRU

#: A job is "running" when it is not complete and one of its files changed this recently.
RUNNING_WINDOW_SEC = 300.0

_json_cache = LRU(20_000)


class JobNotFound(LookupError):
    """No such job folder (or it holds no config.json / result files)."""


def _stat_key(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def read_json(path: Path) -> Any:
    """A JSON file's content (cached until the file changes); None if missing or invalid."""
    key = _stat_key(path)
    if key is None:
        return None
    hit = _json_cache.get(("json", path))
    if hit is not None and hit[0] == key:
        return hit[1]
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        value = None
    _json_cache.put(("json", path), (key, value))
    return value


def read_result(path: Path) -> TrialResult | None:
    """A trial's result.json as a model (cached); None if missing or not a valid result."""
    key = _stat_key(path)
    if key is None:
        return None
    hit = _json_cache.get(("result", path))
    if hit is not None and hit[0] == key:
        return hit[1]
    try:
        value: TrialResult | None = TrialResult.model_validate_json(path.read_bytes())
    except (OSError, ValueError, ValidationError):
        value = None
    _json_cache.put(("result", path), (key, value))
    return value


def safe_child(base: Path, rel: str) -> Path:
    """`base / rel`, refusing absolute paths, `..` and symlinks that lead outside `base`."""
    if not rel or rel.startswith(("/", "\\")) or "\x00" in rel:
        raise PermissionError(f"bad path {rel!r}")
    target = (base / rel).resolve()
    root = base.resolve()
    if target != root and root not in target.parents:
        raise PermissionError(f"{rel!r} is outside {base.name}")
    return target


def is_job_dir(path: Path) -> bool:
    return (path / "config.json").is_file() or (path / "summary.json").is_file()


def job_dir(root: Path, name: str) -> Path:
    """The folder of job `name` under `root` (a direct child; no path tricks)."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise JobNotFound(name)
    path = root / name
    if not path.is_dir() or not is_job_dir(path):
        raise JobNotFound(name)
    return path


def resolve_job_arg(arg: str, jobs_dir: Path) -> Path:
    """A job given on the command line: a folder path, or a name under `jobs_dir`."""
    path = Path(arg)
    if path.is_dir() and is_job_dir(path):
        return path.resolve()
    candidate = jobs_dir / arg
    if candidate.is_dir() and is_job_dir(candidate):
        return candidate.resolve()
    raise JobNotFound(f"{arg}: not a job folder (no config.json), and no job {arg!r} "
                      f"in {jobs_dir}")


@dataclass
class TrialSlot:
    """One planned trial: its folder name and whatever state its files show."""

    name: str
    task: str
    attempt: int
    result: TrialResult | None
    started: bool  # the folder exists

    @property
    def status(self) -> str:
        if self.result is None:
            return "running" if self.started else "queued"
        return trial_outcome(self.result)


def split_trial_name(name: str) -> tuple[str, int]:
    task, sep, attempt = name.rpartition("__")
    if sep and attempt.isdigit():
        return task, int(attempt)
    return name, 1


def load_config(path: Path) -> JobConfig | None:
    data = read_json(path / "config.json")
    if not isinstance(data, dict):
        return None
    try:
        return JobConfig.model_validate(data)
    except ValidationError:
        return None


def trial_slots(path: Path, config: JobConfig | None) -> list[TrialSlot]:
    """Every planned trial (each task, each attempt) plus any other trial folder."""
    names: list[str] = []
    if config is not None:
        names = [f"{t}__{a}" for t in config.task_names
                 for a in range(1, config.n_attempts + 1)]
    seen = set(names)
    try:
        entries = sorted(e.name for e in os.scandir(path) if e.is_dir()
                         and not e.name.startswith(".") and "__" in e.name)
    except OSError:
        entries = []
    names += [n for n in entries if n not in seen]
    existing = set(entries)
    out = []
    for name in names:
        task, attempt = split_trial_name(name)
        result = read_result(path / name / "result.json") if name in existing else None
        out.append(TrialSlot(name, task, attempt, result, name in existing))
    return out


def finished_results(path: Path) -> list[TrialResult]:
    """The results of a job's finished trials (cancelled ones left out, as on resume)."""
    return [s.result for s in trial_slots(path, load_config(path))
            if s.result is not None and s.status != "cancelled"]


def job_summary(path: Path, config: JobConfig | None) -> JobSummary | None:
    """summary.json, or one computed from the results when it is missing or unreadable."""
    data = read_json(path / "summary.json")
    if isinstance(data, dict):
        try:
            return JobSummary.model_validate(data)
        except ValidationError:
            pass
    from sandlot.report.summary import summarize

    results = finished_results(path)
    if config is None and not results:
        return None
    agent = config.agent if config else (results[0].agent if results else "?")
    model = config.model if config else (results[0].model if results else None)
    planned = len(config.task_names) * config.n_attempts if config else len(results)
    return summarize(path.name, agent, model, planned, config.n_attempts if config else 1,
                     results)


def latest_mtime(path: Path, slots: list[TrialSlot]) -> float:
    """The newest change among the job's summary and its unfinished trials' files."""
    candidates = [path / "summary.json", path / "config.json"]
    for s in slots:
        if s.status == "running":
            trial = path / s.name
            candidates += [trial / "trial.log", trial / "trajectory" / "llm_trajectory.jsonl",
                           trial]
    stamps = []
    for p in candidates:
        with contextlib.suppress(OSError):
            stamps.append(p.stat().st_mtime)
    return max(stamps, default=0.0)


def job_state(summary: JobSummary | None, slots: list[TrialSlot], path: Path) -> str:
    """complete, running (recent writes), or incomplete (stopped part way)."""
    if summary is not None and summary.complete:
        return "complete"
    if time.time() - latest_mtime(path, slots) < RUNNING_WINDOW_SEC:
        return "running"
    return "incomplete"


def usage_totals(usage: dict[str, object] | None) -> tuple[int | None, float | None]:
    if not usage:
        return None, None
    tokens = usage.get("total_tokens")
    cost = usage.get("cost_usd")
    return (int(tokens) if tokens is not None else None,  # type: ignore[call-overload]
            float(cost) if cost is not None else None)  # type: ignore[arg-type]


def job_row(path: Path) -> dict[str, Any]:
    """One line of the jobs list."""
    config = load_config(path)
    summary = job_summary(path, config)
    if summary is not None and summary.complete:  # no need to open every result file
        state, started = "complete", []
    else:
        slots = trial_slots(path, config)
        state = job_state(summary, slots, path)
        started = [s.result.started_at for s in slots if s.result is not None]
    tokens, cost = usage_totals(summary.usage if summary else None)
    try:
        created = (path / "config.json").stat().st_mtime
    except OSError:
        created = path.stat().st_mtime
    return {
        "name": path.name,
        "created": created,
        "started_at": min(started) if started else None,
        "updated_at": summary.updated_at if summary else None,
        "agent": config.agent if config else (summary.agent if summary else None),
        "model": config.model if config else (summary.model if summary else None),
        "n_tasks": len(config.task_names) if config else None,
        "n_attempts": config.n_attempts if config else None,
        "n_trials": summary.n_trials if summary else 0,
        "n_trials_planned": summary.n_trials_planned if summary else 0,
        "n_passed": summary.n_passed if summary else 0,
        "n_failed": summary.n_failed if summary else 0,
        "n_errored": summary.n_errored if summary else 0,
        "n_tampered": summary.n_tampered if summary else 0,
        "pass_rate": summary.pass_rate if summary else None,
        "mean_reward": summary.mean_reward if summary else None,
        "total_tokens": tokens,
        "cost_usd": cost,
        "state": state,
    }


def list_jobs(root: Path) -> list[dict[str, Any]]:
    """Every job folder directly under `root`, newest first."""
    rows = []
    try:
        entries = [Path(e.path) for e in os.scandir(root) if e.is_dir()]
    except OSError:
        return []
    for path in entries:
        if is_job_dir(path):
            rows.append(job_row(path))
    rows.sort(key=lambda r: r["created"], reverse=True)
    return rows


def trial_row(slot: TrialSlot) -> dict[str, Any]:
    """One line of a job's trial table (flat, small)."""
    r = slot.result
    row: dict[str, Any] = {"trial": slot.name, "task": slot.task, "attempt": slot.attempt,
                           "status": slot.status}
    if r is None:
        return row
    tokens, cost = usage_totals(r.usage)
    usage = r.usage or {}
    row.update({
        "reward": r.reward,
        "passed": r.passed,
        "error_kind": str(r.error.kind) if r.error else None,
        "error_phase": r.error.phase if r.error else None,
        "error_message": r.error.message[:300] if r.error else None,
        "error_cause": r.error.caused_by if r.error else None,
        "integrity": r.integrity.status if r.integrity else None,
        "tampered": is_tampered(r),
        "verifier_broken": r.verifier_failure is not None,
        "timing": r.timing,
        "total_sec": r.timing.get("total"),
        "input_tokens": usage.get("input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "total_tokens": tokens,
        "cost_usd": cost,
        "n_requests": usage.get("n_requests"),
        "turns": r.agent_info.get("turns"),
        "tool_calls": r.agent_info.get("tool_calls"),
        "repaired": r.repaired,
        "n_repairs": max(0, len(r.attempts) - 1),
        "tries": r.tries,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
    })
    return row


def job_signature(path: Path) -> str:
    """Changes whenever a trial starts or finishes or the summary is rewritten."""
    parts = []
    for p in (path / "summary.json", path / "config.json"):
        k = _stat_key(p)
        parts.append(f"{k[0]}:{k[1]}" if k else "-")
    try:
        for e in sorted(os.scandir(path), key=lambda e: e.name):
            if e.is_dir() and "__" in e.name:
                k = _stat_key(Path(e.path) / "result.json")
                parts.append(f"{e.name}={k[1] if k else '-'}")
    except OSError:
        pass
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]
