"""Agent registry: a name maps to a lazy import path; `module:Class` loads users' own.

ACP agents (`claude`, `codex`, `gemini`, `opencode`, `goose`, names from an agents file,
and `acp:<command>` for any other) all load `sandlot.agents.acp:AcpAgent`; their specs
live in `sandlot.agents.acp_registry`. `acp:` is checked before `module:Class`.
"""

from __future__ import annotations

import importlib

from sandlot.agents import acp_registry
from sandlot.agents.base import Agent, AgentContext, AgentOutcome

#: Built-in agents, imported only when chosen.
AGENTS: dict[str, str] = {
    "oracle": "sandlot.agents.oracle:OracleAgent",
    "nop": "sandlot.agents.nop:NopAgent",
    "builtin": "sandlot.agents.builtin:BuiltinAgent",
    "pi": "sandlot.agents.pi:PiAgent",
}
ACP_AGENT_PATH = "sandlot.agents.acp:AcpAgent"


class UnknownAgentError(ValueError):
    pass


def resolve_agent_path(name: str, catalog: acp_registry.AgentCatalog | None = None) -> str:
    if name in AGENTS:
        return AGENTS[name]
    try:
        catalog = catalog or acp_registry.AgentCatalog.load()
        if catalog.is_acp_agent(name):
            catalog.get_spec(name)  # a bad `acp:` command fails here, clearly
            return ACP_AGENT_PATH
    except acp_registry.AgentSpecError as exc:
        raise UnknownAgentError(str(exc)) from None
    if ":" in name:
        return name
    known = ", ".join(sorted([*AGENTS, *catalog.specs()]))
    raise UnknownAgentError(f"unknown agent {name!r}; choose one of {known}, "
                            'acp:"<command>" for any ACP agent, or module:Class')


def create_agent(name: str, model: str | None = None,
                 catalog: acp_registry.AgentCatalog | None = None) -> Agent:
    """Instantiate an agent by registry name, ACP agent name, `acp:<command>` or
    `module:Class`. `catalog` is the run's ACP agents (default: built-ins and
    $SANDLOT_AGENTS_FILE)."""
    if catalog is None and name not in AGENTS:
        try:
            catalog = acp_registry.AgentCatalog.load()
        except acp_registry.AgentSpecError as exc:
            raise UnknownAgentError(str(exc)) from None
    path = resolve_agent_path(name, catalog)
    module_name, _, class_name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except Exception as exc:  # any import-time failure of a user's module is a bad name
        raise UnknownAgentError(f"cannot load agent {name!r}: {type(exc).__name__}: {exc}"
                                ) from exc
    if not isinstance(cls, type):
        raise UnknownAgentError(f"cannot load agent {name!r}: {path} is not a class")
    try:
        if path == ACP_AGENT_PATH:
            assert catalog is not None
            return cls(model=model, agent=name, spec=catalog.get_spec(name))
        return cls(model=model)
    except UnknownAgentError:
        raise
    except Exception as exc:
        raise UnknownAgentError(f"cannot create agent {name!r}: {type(exc).__name__}: {exc}"
                                ) from exc


__all__ = ["AGENTS", "Agent", "AgentContext", "AgentOutcome", "UnknownAgentError",
           "create_agent", "resolve_agent_path"]
