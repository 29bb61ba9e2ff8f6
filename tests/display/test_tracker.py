"""RunTracker's figures: token reconciliation, the trusted swap, coverage, ETA, threads."""

from __future__ import annotations

import threading

import pytest

from sandlot.display.text import footer_parts
from sandlot.display.tracker import LiveFigures, RunTracker, activity_text, read_figures
from sandlot.gateway.formats.base import Usage

from .support import DeadGateway, gateway_usage, live_trial, result, summary_of


@pytest.mark.parametrize(("self_reported", "gateway", "expected"), [
    (None, gateway_usage(412_000), LiveFigures(412_000, 412_000, None, None, 0)),
    (1_500, gateway_usage(900), LiveFigures(1_500, 900, 1_500, None, 0)),
    (1_500, gateway_usage(2_000), LiveFigures(2_000, 2_000, 1_500, None, 0)),
    (1_500, None, LiveFigures(1_500, None, 1_500, None, 0)),
    (1_500, DeadGateway(), LiveFigures(1_500, None, 1_500, None, 0)),
    (None, DeadGateway(), LiveFigures(None, None, None, None, 0)),
    (None, None, LiveFigures()),
])
def test_live_tokens_reconcile_as_max_and_survive_a_dead_gateway(clock, self_reported,
                                                                  gateway, expected):
    live = live_trial(clock, "t", self_reported=self_reported, gateway=gateway)
    assert read_figures(live) == expected


def test_gateway_figure_counts_the_streaming_estimate_cost_and_requests_in_flight(clock):
    live = live_trial(clock, "t", gateway=gateway_usage(1_000, streaming_chars=400, cost=0.5,
                                                        in_flight=1))
    assert read_figures(live) == LiveFigures(1_100, 1_100, None, 0.5, 1)


def test_rate_limits_of_running_trials_show_in_the_footer(clock):
    tracker = RunTracker(model="m", n_planned=3, clock=clock)
    throttled = gateway_usage(1_000, in_flight=1)
    throttled.rate_limited()
    throttled.rate_limited()
    throttled.waiting(+1)  # its request is sleeping before its next try
    tracker.trial_started(None, 1, live_trial(clock, "a", gateway=throttled))
    tracker.trial_started(None, 1, live_trial(clock, "b", gateway=gateway_usage(500)))
    frame = tracker.frame()
    assert (frame.n_backing_off, frame.n_rate_limited) == (1, 2)
    assert "rate limited: 1 waiting, 2 × 429" in footer_parts(frame)
    throttled.waiting(-1)
    assert tracker.frame().n_backing_off == 0
    quiet = RunTracker(model="m", n_planned=1, clock=clock)
    quiet.trial_started(None, 1, live_trial(clock, "c", gateway=gateway_usage(500)))
    assert not any("rate limited" in part for part in footer_parts(quiet.frame()))


def test_a_frame_rereads_only_what_moved_and_never_shows_a_stale_figure(clock):
    """Frames reuse a trial's figures while its counter's version and self-report stand
    still; any write, a new self-report or a new gateway session shows in the next frame."""
    tracker = RunTracker(model="m", n_planned=1, clock=clock)
    usage = gateway_usage(1_000)
    live = live_trial(clock, "a", gateway=usage)
    tracker.trial_started(None, 1, live)
    assert tracker.frame().rows[0].figures.tokens == 1_000
    usage.begin()
    assert tracker.frame().rows[0].figures.in_flight == 1
    usage.stream_progress(400)
    assert tracker.frame().rows[0].figures.tokens == 1_100
    usage.finish(Usage(input_tokens=200, output_tokens=300), 0.25, 400, ok=True)
    row = tracker.frame().rows[0]
    assert (row.figures.tokens, row.figures.cost_usd, row.figures.in_flight) == (1_500, 0.25, 0)
    usage.rate_limited()
    usage.waiting(+1)
    frame = tracker.frame()
    assert (frame.n_rate_limited, frame.n_backing_off) == (1, 1)
    live.agent.self_reported_tokens = 9_000
    assert tracker.frame().rows[0].figures.tokens == 9_000
    live.agent.self_reported_tokens = None
    live.gateway_usage = gateway_usage(7)  # a new session: version 1 again, other counter
    assert tracker.frame().rows[0].figures.tokens == 7
    live.gateway_usage = DeadGateway()
    assert tracker.frame().rows[0].figures == LiveFigures()


def test_activity_text_shapes():
    assert activity_text("agent", 38, 1, "bash", 412_000) == "38 calls · 412.0k tok"
    assert activity_text("agent", 38, 3, "bash", 412_000) == "38 calls · 412.0k tok · last: bash"
    assert activity_text("agent", 1, 1, "bash", None) == "1 call"
    assert activity_text("agent", 0, 0, None, 2_500_000) == "0 calls · 2.50M tok"
    assert activity_text("agent", 0, 0, None, None) == "agent running…"
    assert activity_text("repair 2/3…", 0, 0, None, None) == "repair 2/3 · waiting for the model…"
    assert activity_text("verifying…", 38, 3, "bash", 1) == "verifying…"


def test_footer_tokens_are_trusted_finished_plus_live_running(clock):
    tracker = RunTracker(model="m", n_planned=4, clock=clock)
    old = result("old", tokens=50_000, cost=0.5)
    tracker.job_started(summary_of([old], 4, n_resumed=1), 3)  # resumed trials count too
    tracker.trial_started(None, 1, live_trial(clock, "a", gateway=gateway_usage(1_000, cost=0.01)))
    tracker.trial_started(None, 1, live_trial(clock, "b", self_reported=2_000))
    frame = tracker.frame()
    assert frame.tokens == 53_000
    assert frame.cost_usd == pytest.approx(0.51)
    assert frame.telemetry == (3, 3)
    assert (frame.n_done, frame.n_resumed, frame.n_running, frame.n_queued) == (1, 1, 2, 1)


def test_swap_is_atomic_with_the_summary(clock):
    """At no frame is a finished trial counted twice or not at all."""
    tracker = RunTracker(model="m", n_planned=2, clock=clock)
    live = live_trial(clock, "a", gateway=gateway_usage(1_000, streaming_chars=4_000))
    tracker.trial_started(None, 1, live)
    assert tracker.frame().tokens == 2_000
    done = result("a", tokens=1_200)
    tracker.trial_finished(done, summary_of([done], 2))
    frame = tracker.frame()
    assert frame.tokens == 1_200 and frame.n_running == 0 and frame.n_done == 1


def test_finished_trial_without_trusted_usage_drops_its_live_figure(clock):
    tracker = RunTracker(model="m", n_planned=2, clock=clock)
    tracker.trial_started(None, 1, live_trial(clock, "a", self_reported=9_000))
    assert tracker.frame().tokens == 9_000
    done = result("a", tokens=None)
    tracker.trial_finished(done, summary_of([done], 2))
    frame = tracker.frame()
    assert frame.tokens is None  # "— tokens", not 0: no trusted figure exists
    assert frame.telemetry == (0, 1)


def test_eta_uses_only_this_runs_rate(clock):
    tracker = RunTracker(model="m", n_planned=10, clock=clock)
    resumed = [result(f"r{i}") for i in range(5)]
    tracker.job_started(summary_of(resumed, 10, n_resumed=5), 5)
    assert tracker.frame().eta_sec is None
    clock.advance(60)
    new = result("n")
    tracker.trial_finished(new, summary_of([*resumed, new], 10, n_resumed=5))
    assert tracker.frame().eta_sec == pytest.approx(4 * 60)


def test_tokens_per_sec_counts_this_run_only(clock):
    tracker = RunTracker(model="m", n_planned=3, clock=clock)
    old = result("old", tokens=100_000)
    tracker.job_started(summary_of([old], 3, n_resumed=1), 2)
    tracker.trial_started(None, 1, live_trial(clock, "a", gateway=gateway_usage(5_000)))
    clock.advance(10)
    assert tracker.frame().tokens_per_sec == pytest.approx(500)


def test_stall_is_reported_once_and_cleared_when_it_moves(clock):
    tracker = RunTracker(model="m", n_planned=1, stall_after_sec=30, clock=clock)
    usage = gateway_usage(100)
    live = live_trial(clock, "a", gateway=usage)
    tracker.trial_started(None, 1, live)
    tracker.frame()
    clock.advance(31)
    first = tracker.frame()
    assert [r.name for r in first.stall_started] == ["a__1"] and first.stalled == ["a__1"]
    clock.advance(5)
    again = tracker.frame()
    assert again.stall_started == [] and again.stalled == ["a__1"]
    usage.stream_progress(40)  # output streaming is progress too
    moved = tracker.frame()
    assert moved.stall_cleared == ["a__1"] and moved.stalled == []


def test_poll_phases_reports_each_change_once(clock):
    tracker = RunTracker(clock=clock)
    live = live_trial(clock, "a", phase="creating sandbox…")
    tracker.trial_started(None, 1, live)
    assert [p for _, p in tracker.poll_phases()] == ["creating sandbox…"]
    assert tracker.poll_phases() == []
    live.set_phase("agent")
    assert [p for _, p in tracker.poll_phases()] == ["agent"]


def test_a_phase_shorter_than_a_poll_is_reported_and_flushed_at_the_end(clock):
    tracker = RunTracker(clock=clock)
    live = live_trial(clock, "a", phase="queued")
    tracker.trial_started(None, 1, live)
    live.set_phase("creating sandbox…")
    live.set_phase("agent")
    assert [p for _, p in tracker.poll_phases()] == ["creating sandbox…", "agent"]
    live.set_phase("verifying…")  # and the trial finishes before the next poll
    assert [p for _, p in tracker.poll_phases(live.name)] == ["verifying…"]
    assert tracker.poll_phases(live.name) == [] and tracker.poll_phases("other") == []


def test_events_and_frames_from_two_threads(clock):
    """Events on one thread, frames on another: no exception, consistent counts."""
    tracker = RunTracker(model="m", n_planned=400, clock=clock)
    stop = threading.Event()
    errors: list[BaseException] = []

    def render() -> None:
        while not stop.is_set():
            try:
                frame = tracker.frame(max_rows=10)
                assert frame.n_done + frame.n_running <= 400
            except BaseException as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=render)
    thread.start()
    done = []
    for i in range(400):
        tracker.trial_started(None, 1, live_trial(clock, f"t{i}", gateway=gateway_usage(10)))
        if i % 2:
            r = result(f"t{i - 1}", tokens=10)
            done.append(r)
            tracker.trial_finished(r, summary_of(done, 400))
    stop.set()
    thread.join()
    assert errors == []
    assert tracker.frame().tokens == 4_000
