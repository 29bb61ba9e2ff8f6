"""Plain lines without a TTY: events, phase changes, stalls, heartbeats; --quiet."""

from __future__ import annotations

import io
import time

from rich.console import Console

from sandlot.display.plain import LinePrinter
from sandlot.display.tracker import RunTracker
from sandlot.errors import ErrorKind
from sandlot.models import Integrity

from .support import gateway_usage, live_trial, result, summary_of


def printer(clock, *, quiet: bool = False, heartbeat_sec: float = 30.0,
            stall_after_sec: float = 300.0) -> tuple[LinePrinter, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, width=80, highlight=False)  # not a terminal: no colour
    tracker = RunTracker("demo", "builtin", "scripted/solver", "local", 3,
                         stall_after_sec=stall_after_sec, clock=clock)
    return LinePrinter(console, quiet=quiet, tracker=tracker,
                       heartbeat_sec=heartbeat_sec), out


def test_one_line_per_event_phase_changes_and_heartbeat(clock):
    lines, out = printer(clock, heartbeat_sec=10)
    lines.job_started(summary_of([], 3), 3)
    live = live_trial(clock, "semver-compare", phase="creating sandbox…")
    lines.trial_started(None, 1, live)
    lines.tick()
    live.set_phase("agent")
    live.gateway_usage = gateway_usage(12_000, cost=0.05)
    lines.tick()
    live.set_phase("verifying…")
    clock.advance(10)
    lines.tick()  # phase line, then the heartbeat that came due
    done = result("semver-compare", tokens=12_000, cost=0.05)
    lines.trial_finished(done, summary_of([done], 3))
    assert out.getvalue().splitlines() == [
        "… started semver-compare__1",
        "· semver-compare__1: creating sandbox…",
        "· semver-compare__1: agent running",
        "· semver-compare__1: verifying…",
        "♥ 0/3 done (0%) · elapsed 10s · ETA — · passed 0 · failed 0 · errored 0 · "
        "running 1 · queued 2 · pass rate — (excl. errors) · mean reward — · 12.0k tokens · "
        "$0.0500 · 1.2k tok/s · telemetry 1/1",
        "✓ passed semver-compare__1 reward=1 12,000 tok $0.0500 (11.0s)  [1/3]",
    ]


def test_heartbeat_lines_are_never_wrapped(clock):
    lines, out = printer(clock, heartbeat_sec=1)
    clock.advance(1)
    lines.tick()
    (beat,) = out.getvalue().splitlines()
    assert beat.startswith("♥ 0/3 done") and beat.endswith("telemetry —") and len(beat) > 80


def test_stall_line_once_then_moving_again(clock):
    lines, out = printer(clock, heartbeat_sec=0, stall_after_sec=60)
    live = live_trial(clock, "slow", tools=("bash", "bash"), gateway=gateway_usage(3_000,
                                                                                   in_flight=1))
    lines.trial_started(None, 1, live)
    lines.tick()
    for _ in range(3):
        clock.advance(30)
        lines.tick()
    live.agent.tool_started("bash")
    lines.tick()
    assert out.getvalue().splitlines()[2:] == [
        "⚠ stalled slow__1: no progress for 1m00s (agent, 2 calls, 3.0k tok, waiting on "
        "the model)",
        "· slow__1 is moving again",
    ]


def test_retry_and_error_and_mismatch_lines(clock):
    lines, out = printer(clock)
    lines.trial_started(None, 1, live_trial(clock, "flaky"))
    failed = result("flaky", error=ErrorKind.SANDBOX_SETUP_FAILED)
    lines.trial_retrying(None, failed, 2.0)
    lines.trial_finished(failed, summary_of([failed], 3))
    pi = result("pi-task", tokens=10_000, self_reported=12_000)
    lines.trial_finished(pi, summary_of([failed, pi], 3))
    text = out.getvalue().splitlines()
    assert text[1] == "↻ retry flaky__1 after sandbox_setup_failed in 2s"
    assert text[2] == "✗ error flaky__1 sandbox_setup_failed: boom (11.0s)  [1/3]"
    assert text[3] == ("✓ passed pi-task__1 reward=1 10,000 tok ⚠ agent reported 12,000 tok "
                       "(11.0s)  [2/3]")


def test_a_tampered_failure_says_so_and_the_heartbeat_counts_it(clock):
    lines, out = printer(clock, heartbeat_sec=10)
    cheat = result("deep", passed=False)
    cheat.integrity = Integrity(status="tampered", reason="a folder deeper than 256 levels")
    lines.trial_finished(cheat, summary_of([cheat], 3))
    clock.advance(10)
    lines.tick()  # the heartbeat comes due
    text = out.getvalue().splitlines()
    assert text[0] == ("✗ failed (tampered: a folder deeper than 256 levels) deep__1 reward=0 "
                       "(11.0s)  [1/3]")
    assert "failed 1 (1 tampered or broke the verifier)" in out.getvalue()


def test_quiet_prints_nothing(clock):
    lines, out = printer(clock, quiet=True, heartbeat_sec=1)
    live = live_trial(clock, "a")
    lines.trial_started(None, 1, live)
    clock.advance(5)
    lines.tick()
    done = result("a")
    lines.trial_finished(done, summary_of([done], 3))
    assert out.getvalue() == ""


def test_ticker_thread_runs_while_entered():
    out = io.StringIO()
    tracker = RunTracker("demo", "builtin", None, "local", 1)
    lines = LinePrinter(Console(file=out, width=80), tracker=tracker, heartbeat_sec=0.05,
                        tick_sec=0.01)
    with lines:
        deadline = time.monotonic() + 5
        while "♥" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "♥ 0/1 done" in out.getvalue()
    assert lines._ticker.last_error is None
