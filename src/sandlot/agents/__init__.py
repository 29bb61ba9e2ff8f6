"""Agent registry: a name maps to a lazy import path; `module:Class` loads users' own."""

from __future__ import annotations

import importlib

from sandlot.agents.base import Agent, AgentContext, AgentOutcome

#: Built-in agents, imported only when chosen.
AGENTS: dict[str, str] = {
    "oracle": "sandlot.agents.oracle:OracleAgent",
    "nop": "sandlot.agents.nop:NopAgent",
    "builtin": "sandlot.agents.builtin:BuiltinAgent",
    "pi": "sandlot.agents.pi:PiAgent",
}


class UnknownAgentError(ValueError):
    pass


def resolve_agent_path(name: str) -> str:
    if name in AGENTS:
        return AGENTS[name]
    if ":" in name:
        return name
    known = ", ".join(sorted(AGENTS))
    raise UnknownAgentError(f"unknown agent {name!r}; choose one of {known}, or module:Class")


def create_agent(name: str, model: str | None = None) -> Agent:
    """Instantiate an agent by registry name or `module:Class`."""
    module_name, _, class_name = resolve_agent_path(name).partition(":")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError) as exc:
        raise UnknownAgentError(f"cannot load agent {name!r}: {exc}") from exc
    return cls(model=model)


__all__ = ["AGENTS", "Agent", "AgentContext", "AgentOutcome", "UnknownAgentError",
           "create_agent", "resolve_agent_path"]
