"""The dashboard rendered to a string (rich Console with record) in the states the issue
names: no trials yet, gateway-only tokens mid-prompt, both signals, a dead gateway signal,
a finished trial's trusted swap, 1,000 queued tasks; plus stalls, retries, repairs."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from sandlot.display.dashboard import Dashboard
from sandlot.display.tracker import RunTracker
from sandlot.errors import ErrorKind

from .support import DeadGateway, gateway_usage, live_trial, result, summary_of


def make(clock, n_planned: int = 9, *, model: str | None = "scripted/solver",
         stall_after_sec: float = 300.0) -> tuple[Dashboard, RunTracker]:
    tracker = RunTracker("demo", "builtin", model, "local", n_planned,
                         stall_after_sec=stall_after_sec, clock=clock)
    # The dashboard's own console only receives the finished/retry log lines.
    return Dashboard(Console(file=io.StringIO()), tracker), tracker


def render(dash: Dashboard, width: int = 120, height: int = 40) -> str:
    console = Console(record=True, width=width, height=height, file=io.StringIO())
    console.print(dash)
    text = console.export_text()
    for line in text.splitlines():
        assert len(line) <= width, line
    return text


def footer(text: str) -> str:
    """The footer (it may wrap onto a second line), as one line."""
    return text[text.rindex("pass rate"):].strip().replace("\n", " · ")


def test_no_trials_yet(clock):
    dash, tracker = make(clock)
    text = render(dash)
    assert "sandlot · job demo · agent builtin · model scripted/solver · sandbox local" in text
    assert "0/9 done (0%)" in text and "ETA —" in text
    assert "passed 0 · failed 0 · errored 0 · running 0 · queued 9" in text
    assert "no trial running yet" in text
    assert footer(text).startswith("pass rate — (excl. errors) · mean reward — · — tokens")
    assert "telemetry —" in footer(text)
    # job_started (nothing resumed) does not change the picture
    tracker.job_started(summary_of([], 9), 9)
    assert "queued 9" in render(dash) and "resumed" not in render(dash)


def test_mid_prompt_trial_whose_only_token_signal_is_the_gateway(clock):
    dash, tracker = make(clock)
    # 410k tokens in finished requests + ~2k estimated from 8,000 chars streaming now;
    # the agent has reported nothing itself (its prompt has not completed).
    live = live_trial(clock, "dialogue-parser", age_sec=95, tools=("bash",) * 38,
                      gateway=gateway_usage(410_000, streaming_chars=8_000))
    tracker.trial_started(None, 1, live)
    text = render(dash)
    assert "dialogue-parser" in text and "1m35s" in text
    assert "38 calls · 412.0k tok" in text
    assert "last:" not in text  # one tool only
    assert "412.0k tokens" in footer(text)
    assert "telemetry 1/1" in footer(text)
    assert "running 1 · queued 8" in text


@pytest.mark.parametrize(("self_reported", "gateway", "shown"), [
    (500_000, 412_000, "500.0k"),  # the agent's count leads (the gateway lags a record)
    (300_000, 412_000, "412.0k"),  # the gateway leads (the prompt has not completed)
])
def test_both_signals_show_their_max(clock, self_reported, gateway, shown):
    dash, tracker = make(clock)
    live = live_trial(clock, "pi-task", tools=("bash", "read", "bash"),
                      self_reported=self_reported, gateway=gateway_usage(gateway))
    tracker.trial_started(None, 1, live)
    text = render(dash)
    assert f"3 calls · {shown} tok · last: bash" in text
    assert f"{shown} tokens" in footer(text)


def test_dead_gateway_signal_falls_back_to_the_self_report(clock):
    dash, tracker = make(clock)
    tracker.trial_started(None, 1, live_trial(clock, "a", tools=("bash",) * 2,
                                              self_reported=150_000, gateway=DeadGateway()))
    tracker.trial_started(None, 1, live_trial(clock, "b", tools=("bash",), gateway=None))
    text = render(dash)
    assert "2 calls · 150.0k tok" in text  # the broken counter did not break the frame
    assert "1 call" in text and "1 call ·" not in text  # no signal at all: no tok part
    assert "150.0k tokens" in footer(text)
    assert "telemetry 1/2" in footer(text)  # b is in the agent phase without a figure


def test_finished_trial_swaps_its_live_figure_for_the_trusted_count(clock):
    """The one intended non-monotonic step: at finish the live figure (here including a
    streaming estimate) is replaced by the gateway's trusted count, which is lower."""
    dash, tracker = make(clock)
    tracker.job_started(summary_of([], 9), 9)
    live = live_trial(clock, "dialogue-parser", tools=("bash",),
                      gateway=gateway_usage(410_000, streaming_chars=8_000))
    other = live_trial(clock, "other", tools=("bash",), gateway=gateway_usage(10_000))
    tracker.trial_started(None, 1, live)
    tracker.trial_started(None, 1, other)
    before = tracker.frame().tokens
    assert "422.0k tokens" in footer(render(dash))
    done = result("dialogue-parser", tokens=405_000, cost=1.25)
    tracker.trial_finished(done, summary_of([done], 9))
    after = tracker.frame().tokens
    text = render(dash)
    assert before == 422_000 and after == 415_000  # the dip is intended, not clamped
    assert "415.0k tokens" in footer(text)
    assert "dialogue-parser" not in text.split("activity")[1]  # the row left
    assert "1/9 done" in text and "passed 1" in text and "running 1 · queued 7" in text
    assert "$1.2500 ($1.2500/pass)" in footer(text)
    assert "pass rate 100.0%" in footer(text) and "mean reward 1.000" in footer(text)


def test_a_thousand_queued_tasks_longest_running_first_and_more(clock):
    dash, tracker = make(clock, n_planned=1000)
    tracker.job_started(summary_of([], 1000), 1000)
    for i in range(40):  # trial i has run for i seconds
        tracker.trial_started(None, 1, live_trial(clock, f"task-{i:03d}", age_sec=i,
                                                  phase="creating sandbox…"))
    text = render(dash, height=30)
    assert len(text.splitlines()) <= 30
    assert "0/1000 done (0%)" in text and "running 40 · queued 960" in text
    shown = re.findall(r"task-(\d{3})", text)
    assert shown == sorted(shown, reverse=True)  # longest-running first
    assert shown[0] == "039"
    assert f"+{40 - len(shown)} more running" in text
    rows = [line for line in text.splitlines() if "task-" in line]
    assert all(line.rstrip().endswith("creating sandbox…") for line in rows)


@pytest.mark.parametrize(("phase", "cell"), [
    ("queued", "queued"),
    ("creating sandbox…", "creating sandbox…"),
    ("installing agent…", "installing agent…"),
    ("agent", "agent running…"),
    ("checking 1/3…", "checking 1/3…"),
    ("repair 2/3…", "repair 2/3 · 4 calls · 1.2k tok · last: edit"),
    ("verifying…", "verifying…"),
    ("cleaning up…", "cleaning up…"),
    ("", "starting…"),
])
def test_activity_cell_is_never_blank(clock, phase, cell):
    dash, tracker = make(clock)
    tools = ("bash", "edit", "bash", "edit") if phase.startswith("repair") else ()
    gateway = gateway_usage(1_200) if phase.startswith("repair") else None
    tracker.trial_started(None, 1, live_trial(clock, "t", phase=phase, tools=tools,
                                              gateway=gateway))
    row = next(line for line in render(dash).splitlines() if line.startswith(" t "))
    assert row.rstrip().endswith(cell)


def test_stall_warning_after_the_counters_stop_moving(clock):
    dash, tracker = make(clock, stall_after_sec=60)
    live = live_trial(clock, "slow", tools=("bash",), gateway=gateway_usage(1_000))
    tracker.trial_started(None, 1, live)
    assert "stalled" not in render(dash)
    clock.advance(59)
    assert "stalled" not in render(dash)
    clock.advance(2)
    text = render(dash)
    assert "⚠ 1 stalled (no progress for 1m00s): slow__1" in text
    assert "⚠ idle 1m01s · 1 call · 1.0k tok" in text
    live.agent.tool_started("bash")  # it moves again
    assert "stalled" not in render(dash)


def test_retrying_trial_shows_the_wait_and_drops_its_live_figure(clock):
    dash, tracker = make(clock)
    live = live_trial(clock, "flaky", tools=("bash",), gateway=gateway_usage(5_000))
    tracker.trial_started(None, 1, live)
    failed = result("flaky", error=ErrorKind.SANDBOX_SETUP_FAILED, tokens=5_000)
    tracker.trial_retrying(None, failed, 4.0)
    text = render(dash)
    assert "retrying after sandbox_setup_failed (in 4s)" in text
    assert "— tokens" in footer(text)
    again = live_trial(clock, "flaky", try_number=2, phase="creating sandbox…")
    tracker.trial_started(None, 2, again)
    text = render(dash)
    assert "1·t2" in text and "creating sandbox…" in text


def test_without_a_model_there_is_no_telemetry_figure(clock):
    dash, tracker = make(clock, model=None)
    done = result("x", tokens=None)
    tracker.trial_finished(done, summary_of([done], 9, model=None))
    assert "telemetry" not in footer(render(dash))


def test_narrow_terminal_still_fits(clock):
    dash, tracker = make(clock)
    tracker.trial_started(None, 1, live_trial(
        clock, "a-very-long-task-name-that-goes-on-and-on", tools=("bash", "write_file"),
        gateway=gateway_usage(12_345)))
    text = render(dash, width=60, height=12)
    assert "a-very-long" in text and "…" in text


def test_a_footer_too_long_for_its_lines_leaves_parts_out_whole() -> None:
    from sandlot.display.dashboard import _pack

    parts = ["pass rate 55.6% (excl. errors)", "mean reward 0.556", "68.6k tokens",
             "$12.2292 ($0.0597/pass)", "227 tok/s", "telemetry 5/5"]
    lines = _pack(parts, 60, 2)
    assert len(lines) == 2 and all(len(line) <= 60 for line in lines)
    shown = " · ".join(lines).split(" · ")
    assert all(part in parts for part in shown)  # each part whole, or not there
    assert shown[:3] == parts[:3]


def test_a_cluster_job_shows_each_nodes_slots_running_trials_and_errors(clock):
    from sandlot.display.plain import heartbeat_text
    from sandlot.live import NodeLive

    dash, tracker = make(clock)
    assert "nodes" not in render(dash)  # a local job has no node line
    nodes = [NodeLive("vm-a", 4, running=3), NodeLive("vm-b", 2, running=2, n_errored=1),
             NodeLive("vm-c", 4, running=0, alive=False)]
    tracker.nodes_started(nodes)
    text = render(dash)
    line = next(ln for ln in text.splitlines() if ln.startswith("nodes"))
    assert "vm-a 3/4 running" in line and "vm-b 2/2 running, 1 errored" in line
    assert "vm-c left" in line
    nodes[0].running = 1  # the executor writes them as trials come and go
    assert "vm-a 1/4 running" in render(dash)
    assert "node vm-c left" in heartbeat_text(tracker.frame())
    many = [NodeLive(f"node-{i:03d}", 8, running=8) for i in range(200)]
    tracker.nodes_started(many)
    lines = [ln for ln in render(dash, height=30).splitlines() if ln.startswith("nodes")]
    assert 1 <= len(lines) <= 2  # never more than NODE_LINES, however many nodes
