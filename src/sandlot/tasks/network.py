"""Which network each phase of a task gets, from task.toml alone (Harbor 0.26's rules).

A phase's own setting wins: a step's `[steps.agent]`/`[steps.verifier]`, else the task's
`[agent]`/`[verifier]`; without one, the phase has the environment's network
(`[environment] network_mode`, else `allow_internet`). Where the file says nothing at all,
the agent has no network (sandlot's default: a task asks for what it needs; the model
gateway is reachable regardless) and test.sh has the internet (Harbor's default, which
test.sh scripts that fetch their runner rely on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sandlot.tasks.config import NetworkPolicySection, StepSection, TaskConfig

Mode = Literal["none", "public", "allowlist"]
Phase = Literal["agent", "verifier"]

#: What a phase gets when neither it nor the environment says.
UNSET_DEFAULT: dict[Phase, Mode] = {"agent": "none", "verifier": "public"}


@dataclass(frozen=True)
class PhasePolicy:
    """One phase's network as the task asks for it (names not yet resolved)."""

    mode: Mode
    allowed_hosts: tuple[str, ...] = ()
    #: Where it was decided, for the trial's log ("[agent] network_mode", "default").
    source: str = "default"

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"mode": self.mode, "source": self.source}
        if self.mode == "allowlist":
            out["allowed_hosts"] = list(self.allowed_hosts)
        return out


def _explicit(section: NetworkPolicySection, where: str) -> PhasePolicy | None:
    if section.network_mode is None:
        return None
    return PhasePolicy(section.network_mode, tuple(section.allowed_hosts or ()),
                       f"{where} network_mode")


def environment_policy(config: TaskConfig) -> PhasePolicy | None:
    """The environment's own network, or None when task.toml does not say."""
    env = config.environment
    explicit = _explicit(env, "[environment]")
    if explicit is not None:
        return explicit
    if env.allow_internet is not None:
        return PhasePolicy("public" if env.allow_internet else "none", (),
                           "[environment] allow_internet")
    return None


def phase_policy(config: TaskConfig, phase: Phase,
                 step: StepSection | None = None) -> PhasePolicy:
    """The network `phase` (of `step`, in a multi-step task) runs with."""
    if step is not None:
        own = _explicit(getattr(step, phase), f"[steps.{phase}] ({step.name})")
        if own is not None:
            return own
    own = _explicit(getattr(config, phase), f"[{phase}]")
    if own is not None:
        return own
    return environment_policy(config) or PhasePolicy(UNSET_DEFAULT[phase])


def every_policy(config: TaskConfig) -> list[tuple[str, PhasePolicy]]:
    """(where, policy) of every phase of every step, for checks that need them all."""
    steps: list[StepSection | None] = list(config.steps or []) or [None]
    out = []
    for step in steps:
        for phase in ("agent", "verifier"):
            policy = phase_policy(config, phase, step)  # type: ignore[arg-type]
            out.append((policy.source, policy))
    return out
