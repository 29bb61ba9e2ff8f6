"""The network each phase of one trial runs with: the task's policy (tasks.network), the
run's override, and an allowlist's names resolved to addresses once, when the trial
starts (the egress filter matches addresses; sandlot.sandbox.egress).

A name that does not resolve allows nothing: the phase is as closed as its allowlist
says, never more open.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from sandlot.sandbox.base import Allowlist, Network
from sandlot.tasks.config import StepSection, TaskConfig
from sandlot.tasks.network import Phase, PhasePolicy, phase_policy

#: How long one name may take to resolve before it counts as not resolving.
RESOLVE_TIMEOUT_SEC = 10.0

Resolver = Callable[[str], Awaitable[list[str]]]


async def system_resolver(name: str) -> list[str]:
    """The host's own lookup (getaddrinfo: /etc/hosts, then DNS), IPv4 and IPv6."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, None,
                                                         type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]).split("%")[0] for info in infos})


@dataclass(frozen=True)
class PhaseNetwork:
    """One phase's network: what the task asks, and what the sandbox is given."""

    policy: PhasePolicy
    network: Network
    #: An allowlist's names and the addresses each had when the trial started.
    resolved: dict[str, list[str]] = field(default_factory=dict)
    #: The run overrode the task (--agent-network).
    overridden_by: str | None = None

    def as_dict(self) -> dict[str, object]:
        out = self.policy.as_dict()
        if self.overridden_by:
            out["mode"] = "public" if self.network == "outbound" else "none"
            out["source"] = self.overridden_by
            out.pop("allowed_hosts", None)
        elif isinstance(self.network, Allowlist):
            out["resolved"] = self.resolved
        return out


@dataclass(frozen=True)
class TrialNetworks:
    agent: PhaseNetwork
    verifier: PhaseNetwork

    def as_dict(self) -> dict[str, object]:
        return {"agent": self.agent.as_dict(), "verifier": self.verifier.as_dict()}


def _literal(entry: str) -> str | None:
    """An IP address or CIDR entry as a range; None for a name."""
    try:
        return ipaddress.ip_network(entry, strict=False).compressed
    except ValueError:
        return None


async def resolve_names(names: Iterable[str], resolver: Resolver = system_resolver,
                        timeout_sec: float = RESOLVE_TIMEOUT_SEC) -> dict[str, list[str]]:
    """Each name's addresses (an empty list: it did not resolve in time), looked up at once."""
    unique = sorted(set(names))

    async def one(name: str) -> list[str]:
        try:
            return await asyncio.wait_for(resolver(name), timeout_sec)
        except (OSError, TimeoutError, UnicodeError):
            return []

    found = await asyncio.gather(*(one(name) for name in unique))
    return dict(zip(unique, found, strict=True))


def allowlist_of(hosts: Iterable[str], resolved: dict[str, list[str]]) -> Allowlist:
    """The ranges `hosts` stand for: literals as they are, names as they resolved."""
    ranges: list[str] = []
    for entry in hosts:
        literal = _literal(entry)
        if literal is not None:
            ranges.append(literal)
            continue
        for address in resolved.get(entry, []):
            ranges.append(ipaddress.ip_network(address).compressed)
    return Allowlist(tuple(sorted(set(ranges))))


def _names(policy: PhasePolicy) -> list[str]:
    if policy.mode != "allowlist":
        return []
    return [h for h in policy.allowed_hosts if _literal(h) is None and not h.startswith("*.")]


async def plan_networks(config: TaskConfig, *, uses_gateway: bool,
                        agent_override: str | None = None, step: StepSection | None = None,
                        resolver: Resolver = system_resolver) -> TrialNetworks:
    """Both phases' networks. `uses_gateway`: the agent calls a model through the
    sandbox's loopback; `agent_override`: --agent-network (none or public)."""
    policies: dict[Phase, PhasePolicy] = {
        "agent": phase_policy(config, "agent", step),
        "verifier": phase_policy(config, "verifier", step)}
    names = [] if agent_override else _names(policies["agent"])
    resolved = await resolve_names(names + _names(policies["verifier"]), resolver)

    def phase(which: Phase, override: str | None) -> PhaseNetwork:
        policy = policies[which]
        mode = override or policy.mode
        network: Network
        if mode == "public":
            network = "outbound"
        elif mode == "allowlist":
            network = allowlist_of(policy.allowed_hosts, resolved)
        else:
            network = "loopback" if which == "agent" and uses_gateway else "none"
        return PhaseNetwork(policy, network,
                            {n: resolved[n] for n in _names(policy) if n in resolved},
                            f"--agent-network {override}" if override else None)

    return TrialNetworks(agent=phase("agent", agent_override),
                         verifier=phase("verifier", None))


def log_lines(networks: TrialNetworks) -> list[str]:
    """What trial.log says of the networks (a name that allows nothing included)."""
    lines = []
    for which, net in (("agent", networks.agent), ("verifier", networks.verifier)):
        info = net.as_dict()
        text = f"{which} network: {info['mode']} ({info['source']})"
        if isinstance(net.network, Allowlist):
            text += ": " + (", ".join(net.network.networks) or "no address")
        lines.append(text)
        lines += [f"{which} allowlist: {name} did not resolve; it allows nothing"
                  for name, addresses in net.resolved.items() if not addresses]
    return lines
