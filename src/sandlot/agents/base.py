"""The agent plane: what every agent (oracle, Pi, ACP, built-in) implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sandlot.errors import ErrorKind, TrialError
from sandlot.sandbox.base import Network, Sandbox
from sandlot.tasks.loader import Task


@dataclass(frozen=True)
class GatewayAccess:
    """How an agent reaches the model: only through the gateway, with its trial's key."""

    #: Base URL inside the sandbox (http://127.0.0.1:PORT, no /v1).
    sandbox_base_url: str | None
    #: Base URL from sandlot's own process, for agents that run on the host side.
    host_base_url: str
    api_key: str
    #: The job's provider/model; what the agent sends as its model name.
    model: str
    #: The live usage counter of this trial (gateway.usage.LiveUsage).
    usage: Any = None


@dataclass(frozen=True)
class AgentContext:
    """Everything an agent may use for one trial; nothing else reaches it."""

    task: Task
    sandbox: Sandbox
    timeout_sec: float
    network: Network
    #: Host folder for the agent's own logs (jobs/<job>/<trial>/agent).
    logs_dir: Path
    model: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    gateway: GatewayAccess | None = None
    max_turns: int | None = None
    #: sandlot's cache folder: agents install themselves under <cache>/agents/<name>/.
    cache_dir: Path | None = None
    #: --agent-version, for agents that install a pinned version.
    agent_version: str | None = None
    #: Live counters the agent updates as it works (sandlot.live.AgentLive), for displays.
    live: Any = None
    #: The user the agent's processes run as ([agent] user or the image's USER; None:
    #: root). Its setup runs as root and hands what it makes over (`hand_over`).
    user: str | None = None


async def hand_over(ctx: AgentContext, *paths: str) -> None:
    """Give folders the agent's setup made (its home, its config) to the agent's user."""
    if ctx.user is None or not paths:
        return
    result = await ctx.sandbox.exec(["chown", "-R", ctx.user, "--", *paths], timeout_sec=120,
                                    user="0")  # ctx.sandbox runs as ctx.user by default
    if result.exit_code != 0:
        raise TrialError(ErrorKind.AGENT_ERROR, f"cannot give {', '.join(paths)} to user "
                         f"{ctx.user}: {result.stderr.strip()[-300:]}", "setup")


@dataclass
class AgentOutcome:
    """What the agent phase produced, beyond the files it changed in the sandbox."""

    exit_code: int | None = None
    duration_sec: float = 0.0
    #: Seconds spent in the task's own scripts (for harness-overhead accounting).
    script_time_sec: float = 0.0
    metadata: dict[str, object] = field(default_factory=dict)


class Agent(Protocol):
    """One agent family.

    Contract: `setup` installs what the agent needs inside the sandbox (setup phase,
    not timed against the agent); `run` works on the task until done or until
    `ctx.timeout_sec`, leaving no process behind.
    Raises: TrialError with kind AGENT_TIMEOUT, AGENT_ERROR, AGENT_OOM or PIDS_LIMIT.
    """

    name: str
    #: True if the agent calls a model: the trial then opens a gateway session for it.
    needs_gateway: bool

    async def setup(self, ctx: AgentContext) -> None: ...

    async def run(self, ctx: AgentContext) -> AgentOutcome: ...


class PreparedAgent(Agent, Protocol):
    """An agent with host-side work to do once per job (an install), before any trial."""

    async def prepare(self, cache_dir: Path, version: str | None) -> None: ...


class ConversationalAgent(Agent, Protocol):
    """An agent whose session can take another prompt: what repair attempts need.

    Contract: after `run` (or a `follow_up`) returns, the agent is idle with its session
    kept; `follow_up` sends the next user message into that same session; `close` ends
    the session and leaves no agent process behind (safe to call twice).
    """

    async def follow_up(self, ctx: AgentContext, message: str) -> AgentOutcome: ...

    async def close(self, ctx: AgentContext) -> None: ...


def is_conversational(agent: Agent) -> bool:
    return callable(getattr(agent, "follow_up", None)) and callable(getattr(agent, "close", None))
