"""What sandlot cannot honour in a valid task.toml yet: each is refused up front with the
reason and the fix, never silently ignored (a task run without its GPU, its second step or
its MCP server would be scored as if it had them)."""

from __future__ import annotations

from dataclasses import dataclass

from sandlot.tasks.config import TaskConfig


@dataclass(frozen=True)
class Unsupported:
    field: str
    reason: str
    fix: str


def unsupported(config: TaskConfig, *, oracle: bool) -> list[Unsupported]:
    """Every field of `config` sandlot would have to ignore. `oracle`: the reference
    solution runs, which needs no agent-facing feature (MCP servers, skills)."""
    env = config.environment
    out: list[Unsupported] = []
    if env.gpus:
        out.append(Unsupported("environment.gpus", f"the task needs {env.gpus} GPU(s); "
                               "sandlot's sandboxes have none",
                               "run it on a GPU-capable harness, or drop it from the run "
                               "(--exclude)"))
    if env.tpu is not None:
        out.append(Unsupported("environment.tpu", "the task needs a TPU slice; sandlot's "
                               "sandboxes have none", "drop it from the run (--exclude)"))
    if env.os != "linux":
        out.append(Unsupported("environment.os", f"the task targets {env.os} containers; "
                               "sandlot runs Linux only", "drop it from the run (--exclude)"))
    if config.steps:
        out.append(Unsupported("steps", f"a multi-step task ({len(config.steps)} steps) is "
                               "not supported yet", "drop it from the run (--exclude)"))
    for section in ("environment", "agent", "verifier"):
        if getattr(config, section).network_mode == "allowlist":
            out.append(Unsupported(f"{section}.network_mode", "an allowlist network is not "
                                   "supported yet", 'use "public" or "no-network"'))
    verifier = config.verifier
    if verifier.environment_mode == "separate" or verifier.environment is not None:
        out.append(Unsupported("verifier.environment", "a separate verifier environment is "
                               "not supported yet", "verify in the agent's environment "
                               '(environment_mode = "shared")'))
    if verifier.collect:
        out.append(Unsupported("verifier.collect", "collect hooks are not supported yet",
                               "drop it from the run (--exclude)"))
    if not oracle and env.mcp_servers:
        out.append(Unsupported("environment.mcp_servers", "MCP servers are not passed to "
                               "agents yet", "drop it from the run (--exclude), or run the "
                               "oracle"))
    if not oracle and env.skills_dir:
        out.append(Unsupported("environment.skills_dir", "skills are not passed to agents "
                               "yet", "drop it from the run (--exclude), or run the oracle"))
    return out
