"""--json-events: one JSON object per line, the heartbeat carrying the dashboard's figures."""

from __future__ import annotations

import io
import json

import pytest

from sandlot.display.events import JsonEvents
from sandlot.display.tracker import RunTracker

from .support import gateway_usage, live_trial, result, summary_of


def events(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def make(clock, heartbeat_sec: float = 10.0) -> tuple[JsonEvents, io.StringIO]:
    out = io.StringIO()
    tracker = RunTracker("demo", "builtin", "scripted/solver", "local", 2,
                         stall_after_sec=60, clock=clock)
    return JsonEvents(out, tracker, heartbeat_sec=heartbeat_sec, wall_clock=lambda: 1.5), out


def test_a_job_as_json_lines(clock):
    ev, out = make(clock)
    with ev:
        ev.job_started(summary_of([], 2), 2)
        live = live_trial(clock, "a", phase="creating sandbox…")
        ev.trial_started(None, 1, live)
        ev.tick()
        live.set_phase("agent")
        live.agent.tool_started("bash")
        live.gateway_usage = gateway_usage(7_000, cost=0.02)
        clock.advance(10)
        ev.tick()
        done = result("a", tokens=7_000, cost=0.02)
        ev.trial_finished(done, summary_of([done], 2))
        final = summary_of([done], 2)
        ev.job_finished(final)
    got = events(out)
    assert [e["event"] for e in got] == ["job_started", "trial_started", "phase", "phase",
                                         "heartbeat", "trial_finished", "job_finished"]
    assert all(e["ts"] == 1.5 for e in got)
    assert got[0] == {"event": "job_started", "ts": 1.5, "job": "demo", "agent": "builtin",
                      "model": "scripted/solver", "sandbox": "local", "n_planned": 2,
                      "n_resumed": 0, "n_pending": 2}
    assert got[1] == {"event": "trial_started", "ts": 1.5, "trial": "a__1", "task": "a",
                      "attempt": 1, "try": 1}
    assert [e["phase"] for e in got[2:4]] == ["creating sandbox…", "agent"]
    beat = got[4]
    assert beat["n_running"] == 1 and beat["n_queued"] == 1 and beat["tokens"] == 7_000
    assert beat["cost_usd"] == pytest.approx(0.02)
    assert beat["telemetry"] == {"with_tokens": 1, "expected": 1}
    assert beat["running"][0] | {"elapsed_sec": 0} == {
        "trial": "a__1", "task": "a", "attempt": 1, "try": 1, "phase": "agent",
        "activity": "1 call · 7.0k tok", "elapsed_sec": 0, "idle_sec": 0.0,
        "stalled": False, "tool_calls": 1, "tokens": 7_000, "gateway_tokens": 7_000,
        "self_reported_tokens": None, "cost_usd": 0.02}
    finished = got[5]
    assert finished["passed"] is True and finished["tokens"] == 7_000
    assert finished["usage_source"]["trusted"] == "gateway"
    assert finished["usage_mismatch"] is False
    assert got[6]["summary"]["n_passed"] == 1


def test_stall_events_and_interruption(clock):
    ev, out = make(clock, heartbeat_sec=0)
    with pytest.raises(KeyboardInterrupt), ev:
        ev.job_started(summary_of([], 2), 2)
        live = live_trial(clock, "a", tools=("bash",))
        ev.trial_started(None, 1, live)
        ev.tick()
        clock.advance(61)
        ev.tick()
        live.agent.tool_started("bash")
        ev.tick()
        raise KeyboardInterrupt
    got = events(out)
    kinds = [e["event"] for e in got]
    assert kinds == ["job_started", "trial_started", "phase", "stalled", "stall_cleared",
                     "job_interrupted"]
    assert got[3]["trial"] == "a__1" and got[3]["idle_sec"] == 61
    assert got[5]["reason"] == "KeyboardInterrupt" and got[5]["n_running"] == 1


def test_nothing_is_written_for_a_job_that_never_started(clock):
    ev, out = make(clock)
    with pytest.raises(RuntimeError), ev:
        raise RuntimeError("config mismatch")
    assert out.getvalue() == ""


def test_heartbeat_fields_name_each_node_of_a_cluster_job(clock):
    from sandlot.display.events import frame_fields
    from sandlot.display.tracker import RunTracker
    from sandlot.live import NodeLive

    tracker = RunTracker("demo", "oracle", None, "local", 4, clock=clock)
    assert "nodes" not in frame_fields(tracker.frame())
    tracker.nodes_started([NodeLive("vm-a", 2, running=1, n_errored=1)])
    assert frame_fields(tracker.frame())["nodes"] == [
        {"name": "vm-a", "slots": 2, "running": 1, "alive": True, "n_errored": 1}]
