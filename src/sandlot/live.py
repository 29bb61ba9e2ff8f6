"""Live state of running trials: plain attributes written by the trial's coroutines and
read by displays from any thread in constant time (no locks needed for single ints and
strings; a reader may see a value one update old, never a torn one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AgentLive:
    """What an agent reports as it works: tool calls, the last tool, its own token count."""

    tool_calls: int = 0
    tools_seen: set[str] = field(default_factory=set)
    last_tool: str | None = None
    #: The agent's self-reported tokens so far (input + output), if it reports any.
    self_reported_tokens: int | None = None
    message_chunks: int = 0
    last_activity: float = field(default_factory=time.monotonic)

    def tool_started(self, name: str) -> None:
        self.tool_calls += 1
        self.tools_seen.add(name)
        self.last_tool = name
        self.last_activity = time.monotonic()

    def tokens_reported(self, total: int) -> None:
        self.self_reported_tokens = total
        self.last_activity = time.monotonic()

    def chunk(self) -> None:
        self.message_chunks += 1
        self.last_activity = time.monotonic()


@dataclass
class NodeLive:
    """One cluster node as a display sees it (`--ray`): written by the executor."""

    name: str
    slots: int
    running: int = 0
    alive: bool = True
    #: Tries on this node that ended in an error (cancels aside), retried ones included.
    n_errored: int = 0


@dataclass
class TrialLive:
    """One running trial as a display sees it."""

    name: str
    task: str
    attempt: int
    try_number: int = 1
    phase: str = "queued"
    started: float = field(default_factory=time.monotonic)
    phase_started: float = field(default_factory=time.monotonic)
    agent: AgentLive = field(default_factory=AgentLive)
    #: The gateway's live counter for this trial (gateway.usage.LiveUsage) once it exists.
    gateway_usage: Any = None
    #: Every phase set, in order: a view polling every 0.25 s must not miss a short one.
    phase_log: list[str] = field(default_factory=list)
    #: The cluster node running it (`--ray`); None on this machine's own pool.
    node: str | None = None

    def set_phase(self, label: str) -> None:
        self.phase = label
        self.phase_started = time.monotonic()
        self.phase_log.append(label)

    def gateway_tokens(self) -> int | None:
        """Trusted tokens so far plus the estimate of what is streaming now; None if no
        gateway session (or it is gone)."""
        if self.gateway_usage is None:
            return None
        snap = self.gateway_usage.snapshot()
        return int(snap["total_tokens"]) + int(snap["streaming_output_tokens_estimate"])

    def live_tokens(self) -> int | None:
        """max(agent self-report, gateway live count): each can lag the other."""
        values = [v for v in (self.agent.self_reported_tokens, self.gateway_tokens())
                  if v is not None]
        return max(values) if values else None
