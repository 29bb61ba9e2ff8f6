"""A real `sandlot run` on the examples, watched the way a user would: the dashboard in a
tmux pane read with capture-pane, and the --json-events stream read by another tool.

The scripted solver answers instantly; these tests copy its scripts with `stall` faults
(one second on every turn for the dashboard, three on the first turn for the stall
warning), so each trial's agent phase lasts a few seconds and can be seen changing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, sandlot_cmd

pytestmark = [
    pytest.mark.e2e, pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None,
                       reason="the local sandbox needs root and bubblewrap"),
]

SOLVER = REPO / "examples" / "scripted" / "solver"
TASKS = ("csv-top-customers", "semver-compare", "sqlite-category-revenue")
TOKENS_RE = re.compile(r"(—|[\d.]+[kM]?) tokens")
CELL_RE = re.compile(r"(\d+) calls? · ([\d.]+[kM]?) tok")


def slow_solver(root: Path, seconds: float, only_turn: int | None = None) -> Path:
    """A copy of the solver scripts where every model turn (or turn `only_turn`, from 1)
    stalls first."""
    out = root / "scripts" / "solver"
    out.mkdir(parents=True)
    stall = f'[[turns]]\nfault = {{kind = "stall", seconds = {seconds}}}\n'
    for script in SOLVER.glob("*.toml"):
        parts = script.read_text().split("[[turns]]\n")
        text = parts[0]
        for number, part in enumerate(parts[1:], 1):
            text += (stall if only_turn in (None, number) else "[[turns]]\n") + part
        (out / script.name).write_text(text)
    return out.parent


def run_args(tmp_path: Path, job: str, scripts: Path,
             tasks: tuple[str, ...] = TASKS) -> list[str]:
    args = ["run", str(EXAMPLES), "--agent", "builtin", "--model", "scripted/solver",
            "--scripts-dir", str(scripts), "--jobs-dir", str(tmp_path / "jobs"),
            "--job-name", job]
    for task in tasks:
        args += ["-i", task]
    return args


def as_number(text: str) -> float:
    if text == "—":
        return 0.0
    scale = {"k": 1e3, "M": 1e6}.get(text[-1], 1)
    return float(text.rstrip("kM")) * scale


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_dashboard_in_tmux_updates_activity_and_tokens_while_trials_run(tmp_path, cache_dir):
    scripts = slow_solver(tmp_path, 1)
    socket = f"sandlot-test-{os.getpid()}"
    done_marker = tmp_path / "exit-code"
    env = {"SANDLOT_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(REPO / "tests"),
           "TERM": "xterm-256color"}
    command = (" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " "
               + shlex.join([*sandlot_cmd(*run_args(tmp_path, "tmux", scripts)), "-n", "2"])
               + f"; echo $? > {shlex.quote(str(done_marker))}; sleep 600")
    tmux = ["tmux", "-L", socket]
    subprocess.run([*tmux, "new-session", "-d", "-s", "dash", "-x", "150", "-y", "40",
                    "-c", str(REPO), command], check=True)
    screens: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while not done_marker.exists() and time.monotonic() < deadline:
            screens.append(subprocess.run([*tmux, "capture-pane", "-p", "-t", "dash"],
                                          capture_output=True, text=True, check=True).stdout)
            # Setup and verify last ~0.2 s each: sample often enough to see their
            # labels even when a loaded machine delays a refresh (seen missed once).
            time.sleep(0.05)
        final = subprocess.run([*tmux, "capture-pane", "-p", "-t", "dash", "-S", "-200"],
                               capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    assert done_marker.exists(), "the run did not finish:\n" + (screens[-1] if screens else "")
    assert done_marker.read_text().strip() == "0", final

    frames = [s for s in screens if "sandlot · job tmux" in s]
    assert frames, "no dashboard frame was seen:\n" + "\n---\n".join(screens[-3:])
    # Footer tokens move while trials run, before any trial has finished.
    footer_tokens = []
    early_tokens = set()
    for screen in frames:
        match = TOKENS_RE.search(screen)
        assert match, screen
        value = as_number(match.group(1))
        footer_tokens.append(value)
        if "0/3 done" in screen:
            early_tokens.add(value)
    assert len(set(footer_tokens)) >= 3, footer_tokens
    assert len(early_tokens - {0.0}) >= 2, sorted(early_tokens)
    # Activity cells move too: calls and tokens grow for a running trial.
    cells: dict[str, set[tuple[int, float]]] = {task: set() for task in TASKS}
    for screen in frames:
        for line in screen.splitlines():
            for task in TASKS:
                if line.startswith(f" {task} ") and (m := CELL_RE.search(line)):
                    cells[task].add((int(m.group(1)), as_number(m.group(2))))
    moving = [task for task, seen in cells.items() if len(seen) >= 2]
    assert moving, cells
    for task in moving:
        calls = sorted(cells[task])
        assert calls[-1][0] > calls[0][0] and calls[-1][1] > calls[0][1], calls
    # Phase labels were shown outside the agent phase, and the end is the usual tables.
    assert any("verifying…" in s or "creating sandbox…" in s for s in frames)
    assert "✓ passed semver-compare__1" in final and "pass rate (excl. errors)" in final


def test_json_events_stream_with_heartbeats_and_a_stall(run_cli, tmp_path):
    # The second turn stalls: the first one's tokens are counted by then, so heartbeats
    # during the stall show them (a stalled first turn would leave them all at 0).
    scripts = slow_solver(tmp_path, 3, only_turn=2)
    proc = run_cli(*run_args(tmp_path, "events", scripts, ("semver-compare",)),
                   "--json-events", "--heartbeat-sec", "1", "--stall-after-sec", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # nothing but JSON
    kinds = [e["event"] for e in events]
    assert kinds[0] == "job_started" and kinds[-1] == "job_finished"
    assert {"trial_started", "phase", "heartbeat", "stalled", "stall_cleared",
            "trial_finished"} <= set(kinds)
    phases = [e["phase"] for e in events if e["event"] == "phase"]
    # Every phase, however short (they are logged, then polled every 0.25 s).
    wanted = ["creating sandbox…", "agent", "verifying…"]
    assert [p for p in phases if p in wanted] == wanted, phases
    beats = [e for e in events if e["event"] == "heartbeat" and e["n_running"]]
    assert beats and all(b["running"][0]["trial"] == "semver-compare__1" for b in beats)
    assert max(b["tokens"] or 0 for b in beats) > 0
    stalled = next(e for e in events if e["event"] == "stalled")
    assert stalled["phase"] == "agent" and stalled["in_flight"] == 1
    finished = next(e for e in events if e["event"] == "trial_finished")
    assert finished["passed"] and finished["usage_source"]["trusted"] == "gateway"
    summary = events[-1]["summary"]
    assert summary["n_passed"] == 1 and summary["telemetry_coverage"] == 1.0
    assert summary["cost_per_passed_usd"] > 0 and summary["tokens_per_sec"] > 0
    assert "pass rate (excl. errors)" in proc.stderr  # the tables went to stderr
