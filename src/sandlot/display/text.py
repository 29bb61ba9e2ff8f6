"""Short texts shared by the views: durations, percentages and the footer figures."""

from __future__ import annotations

from sandlot.display.tracker import Frame, tokens_text


def duration_text(sec: float | None) -> str:
    """42s, 3m05s, 1h02m; — for unknown."""
    if sec is None:
        return "—"
    sec = int(sec)
    if sec < 60:
        return f"{sec}s"
    if sec < 3600:
        return f"{sec // 60}m{sec % 60:02d}s"
    return f"{sec // 3600}h{sec % 3600 // 60:02d}m"


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def cost_text(cost: float | None) -> str:
    return "—" if cost is None else f"${cost:.4f}"


def footer_parts(frame: Frame) -> list[str]:
    """Pass rate, mean reward, tokens, cost, spend rate, telemetry: the dashboard's footer
    and the heartbeat line say the same thing."""
    reward = "—" if frame.mean_reward is None else f"{frame.mean_reward:.3f}"
    parts = [f"pass rate {pct(frame.pass_rate)} (excl. errors)", f"mean reward {reward}",
             f"{'—' if frame.tokens is None else tokens_text(frame.tokens)} tokens"]
    if frame.cost_usd is not None:
        cost = cost_text(frame.cost_usd)
        if frame.cost_per_passed_usd is not None:
            cost += f" ({cost_text(frame.cost_per_passed_usd)}/pass)"
        parts.append(cost)
    if frame.tokens_per_sec is not None:
        parts.append(f"{tokens_text(int(frame.tokens_per_sec))} tok/s")
    if frame.telemetry is not None:
        have, want = frame.telemetry
        parts.append(f"telemetry {have}/{want}" if want else "telemetry —")
    if frame.n_backing_off or frame.n_rate_limited:
        parts.append(f"rate limited: {frame.n_backing_off} waiting, "
                     f"{frame.n_rate_limited} × 429")
    return parts


def progress_parts(frame: Frame) -> list[str]:
    done = f"{frame.n_done}/{frame.n_planned} done"
    if frame.n_planned:
        done += f" ({frame.n_done / frame.n_planned:.0%})"
    parts = [done, f"elapsed {duration_text(frame.elapsed_sec)}",
             f"ETA {duration_text(frame.eta_sec)}"]
    if frame.n_resumed:
        parts.append(f"{frame.n_resumed} resumed")
    return parts


def counts_parts(frame: Frame) -> list[str]:
    failed = f"failed {frame.n_failed}"
    if frame.n_failed_by_agent:
        failed += f" ({frame.n_failed_by_agent} tampered or broke the verifier)"
    return [f"passed {frame.n_passed}", failed,
            f"errored {frame.n_errored}", f"running {frame.n_running}",
            f"queued {frame.n_queued}"]


def node_parts(frame: Frame) -> list[str]:
    """`--ray`: "vm-a 2/4 running", "vm-b left", "vm-c 1/4 running, 3 errored"."""
    parts = []
    for node in frame.nodes:
        state = f"{node.running}/{node.slots} running" if node.alive else "left"
        if node.n_errored:
            state += f", {node.n_errored} errored"
        parts.append(f"{node.name} {state}")
    return parts
