"""A running trial's live view, copied from the node that runs it to the driver's display.

On a node, the trial writes its TrialLive as it does locally. The node answers the
driver's poll with a LiveState per trial (plain values, ages instead of monotonic clock
readings, which differ between machines), and the driver applies it to its own TrialLive,
the one its display reads: the display cannot tell a remote trial from a local one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sandlot.gateway.usage import LiveUsage, UsageState
from sandlot.live import TrialLive


@dataclass(frozen=True)
class LiveState:
    phase: str
    phase_log: tuple[str, ...]
    phase_age_sec: float
    tool_calls: int
    tools_seen: frozenset[str]
    last_tool: str | None
    self_reported_tokens: int | None
    message_chunks: int
    activity_age_sec: float
    usage: UsageState | None = field(default=None)


def capture(live: TrialLive) -> LiveState:
    """`live` as it is now, on the node."""
    now, agent = time.monotonic(), live.agent
    usage = live.gateway_usage.state() if isinstance(live.gateway_usage, LiveUsage) else None
    return LiveState(live.phase, tuple(live.phase_log), now - live.phase_started,
                     agent.tool_calls, frozenset(agent.tools_seen), agent.last_tool,
                     agent.self_reported_tokens, agent.message_chunks,
                     now - agent.last_activity, usage)


def apply(state: LiveState, live: TrialLive) -> None:
    """Bring the driver's `live` to `state`. Phases the driver has not seen yet are set in
    order, so a view that follows `phase_log` misses none."""
    now = time.monotonic()
    for label in state.phase_log[len(live.phase_log):]:
        live.set_phase(label)
    live.phase = state.phase
    live.phase_started = now - state.phase_age_sec
    agent = live.agent
    agent.tool_calls, agent.last_tool = state.tool_calls, state.last_tool
    agent.tools_seen = set(state.tools_seen)
    agent.self_reported_tokens = state.self_reported_tokens
    agent.message_chunks = state.message_chunks
    agent.last_activity = now - state.activity_age_sec
    if state.usage is None:
        return
    if not isinstance(live.gateway_usage, LiveUsage):
        live.gateway_usage = LiveUsage()
    live.gateway_usage.set_state(state.usage)
