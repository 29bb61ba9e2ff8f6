"""Render time per dashboard frame with 16, 256 and 2,048 running trials.

Each running trial is a real `TrialLive` with a real gateway counter (`LiveUsage`), in a
mix of phases (a third still setting up or verifying, the rest in the agent phase with
tool calls and tokens). Between frames a tenth of the trials move (a tool call, tokens),
as they would during a run. A frame is what rich's Live does on each refresh: ask the
dashboard for its renderable and write it to a 160x50 truecolor terminal (here a
throw-away buffer). Also timed: the tracker's frame alone (the counter reads behind
every view) and the --json-events heartbeat's frame with every running trial as a row.

    .venv/bin/python benchmarks/dashboard.py [--frames 200] [--sizes 16 256 2048] [--json]

The goal is at most 5 ms per dashboard frame at 2,048 running trials (issue 31).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable

from rich.console import Console

from sandlot.display.dashboard import Dashboard
from sandlot.display.tracker import RunTracker
from sandlot.gateway.formats.base import Usage
from sandlot.gateway.usage import LiveUsage
from sandlot.live import TrialLive
from sandlot.models import JobSummary

GOAL_MS = 5.0
GOAL_AT_RUNNING = 2048
PHASES = ("creating sandbox…", "agent", "agent", "agent", "verifying…", "repair 2/3…")
TOOLS = ("bash", "write_file", "edit_file")


def build(n_running: int) -> tuple[Dashboard, list[TrialLive]]:
    tracker = RunTracker("bench", "builtin", "openai/gpt-4.1", "local", n_running * 4)
    tracker.job_started(JobSummary(job_name="bench", agent="builtin", model="openai/gpt-4.1",
                                   n_trials_planned=n_running * 4, n_trials=0, n_passed=0,
                                   n_failed=0, n_errored=0, pass_rate=None,
                                   mean_reward=None), n_running * 4)
    now = time.monotonic()
    lives = []
    for i in range(n_running):
        live = TrialLive(f"task-{i:05d}__1", f"task-{i:05d}", 1, started=now - i)
        live.set_phase(PHASES[i % len(PHASES)])
        usage = LiveUsage()
        usage.begin()
        usage.finish(Usage(input_tokens=1_000 * i, output_tokens=50 * i), 0.001 * i, 0, True)
        live.gateway_usage = usage
        for j in range(i % 40):
            live.agent.tool_started(TOOLS[j % (1 + i % 3)])
        lives.append(live)
        tracker.trial_started(None, 1, live)
    return Dashboard(Console(file=io.StringIO()), tracker), lives


def move(lives: list[TrialLive], frame_no: int) -> None:
    for live in lives[frame_no % 10::10]:
        live.agent.tool_started("bash")
        usage = live.gateway_usage
        usage.begin()
        usage.finish(Usage(input_tokens=500, output_tokens=20), 0.0005, 0, True)


def time_frames(n_frames: int, lives: list[TrialLive], one: Callable[[], object]) -> list[float]:
    for i in range(10):  # warm-up
        move(lives, i)
        one()
    out = []
    for i in range(n_frames):
        move(lives, i)  # not timed
        t0 = time.perf_counter()
        one()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def stats(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"p50_ms": round(statistics.median(ordered), 3),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
            "mean_ms": round(statistics.fmean(ordered), 3)}


def measure(n_running: int, n_frames: int) -> dict[str, object]:
    dash, lives = build(n_running)
    term = Console(file=io.StringIO(), width=160, height=50, force_terminal=True,
                   color_system="truecolor")

    def dashboard_frame() -> None:
        term.file = io.StringIO()
        term.print(dash)

    result: dict[str, object] = {"running": n_running}
    result["dashboard"] = stats(time_frames(n_frames, lives, dashboard_frame))
    result["tracker_frame"] = stats(time_frames(n_frames, lives,
                                                lambda: dash.tracker.frame(max_rows=42)))
    result["all_rows_frame"] = stats(time_frames(max(10, n_frames // 4), lives,
                                                 lambda: dash.tracker.frame(max_rows=None)))
    text = term.export_text() if term.record else term.file.getvalue()  # type: ignore[attr-defined]
    result["lines_per_frame"] = text.count("\n") + 1
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 256, 2048])
    parser.add_argument("--json", action="store_true", help="JSON on stdout")
    args = parser.parse_args()
    rows = [measure(n, args.frames) for n in args.sizes]
    if args.json:
        json.dump({"python": platform.python_version(), "results": rows}, sys.stdout, indent=2)
        print()
        return 0
    print(f"dashboard frame time, Python {platform.python_version()}, {args.frames} frames each")
    print(f"{'running':>8}  {'dashboard p50':>14}  {'p95':>8}  {'tracker p50':>12}  "
          f"{'all rows p50':>13}  lines")
    for r in rows:
        d, t, a = r["dashboard"], r["tracker_frame"], r["all_rows_frame"]  # type: ignore[index]
        print(f"{r['running']:>8}  {d['p50_ms']:>11.2f} ms  {d['p95_ms']:>5.2f} ms  "
              f"{t['p50_ms']:>9.2f} ms  {a['p50_ms']:>10.2f} ms  {r['lines_per_frame']:>5}")
    at_goal = next((r for r in rows if r["running"] == GOAL_AT_RUNNING), None)
    if at_goal is not None:
        p50 = at_goal["dashboard"]["p50_ms"]  # type: ignore[index]
        verdict = "met" if p50 <= GOAL_MS else "NOT met"
        print(f"goal (<= {GOAL_MS:.0f} ms per frame at {GOAL_AT_RUNNING:,} running): {verdict} "
              f"({p50:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
