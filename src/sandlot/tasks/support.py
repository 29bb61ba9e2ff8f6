"""What sandlot cannot honour in a valid task.toml yet: each is refused up front with the
reason and the fix, never silently ignored (a task run without its GPU, its second step or
its MCP server would be scored as if it had them)."""

from __future__ import annotations

from dataclasses import dataclass

from sandlot.tasks.config import NetworkPolicySection, TaskConfig


@dataclass(frozen=True)
class Unsupported:
    field: str
    reason: str
    fix: str


def unsupported(config: TaskConfig, *, oracle: bool,
                tests_dockerfile: bool = False) -> list[Unsupported]:
    """Every field of `config` sandlot would have to ignore. `oracle`: the reference
    solution runs, which needs no agent-facing feature (MCP servers, skills);
    `tests_dockerfile`: the task has tests/Dockerfile (Harbor builds a separate verifier's
    image from it)."""
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
    for i, step in enumerate(config.steps or []):
        if step.verifier.environment is not None:
            out.append(Unsupported(f"steps[{i}].verifier.environment", "a verifier "
                                   "environment of its own (an image for a step's tests) is "
                                   "not supported yet", "drop [steps.verifier.environment]"))
        mode = step.verifier.environment_mode
        if mode is not None and mode != (config.verifier.environment_mode or "shared"):
            out.append(Unsupported(f"steps[{i}].verifier.environment_mode", "a step whose "
                                   "verifier mode differs from the task's is not supported "
                                   "yet", "set environment_mode in [verifier] for every "
                                   "step, or drop the step's"))
        if step.verifier.collect:
            out.append(Unsupported(f"steps[{i}].verifier.collect", "collect hooks are not "
                                   "supported yet", "drop it from the run (--exclude)"))
    out += _wildcards(config)
    listed = [("artifacts", i, a) for i, a in enumerate(config.artifacts)]
    listed += [(f"steps[{s}].artifacts", i, a) for s, step in enumerate(config.steps or [])
               for i, a in enumerate(step.artifacts)]
    for where, i, item in listed:
        service = getattr(item, "service", None)
        if service not in (None, "main"):
            out.append(Unsupported(f"{where}[{i}].service", f"artifacts from the compose "
                                   f"service {service!r} are not collected yet (only the "
                                   "main sandbox's)", "collect them into the main sandbox "
                                   "(a shared volume), or drop the entry"))
    verifier = config.verifier
    if verifier.environment is not None:
        out.append(Unsupported("verifier.environment", "a verifier environment of its own "
                               "(an image for the tests) is not supported yet",
                               "drop [verifier.environment]: environment_mode = \"separate\" "
                               "alone runs the tests in a fresh copy of the task's "
                               "environment"))
    elif tests_dockerfile and verifier.environment_mode == "separate":
        out.append(Unsupported("verifier.environment_mode", "a separate verifier built from "
                               "tests/Dockerfile is not supported yet", "remove "
                               "tests/Dockerfile to verify in a fresh copy of the task's "
                               "environment"))
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


def _wildcards(config: TaskConfig) -> list[Unsupported]:
    """`*.example.com` in an allowlist: sandlot's egress filter matches addresses, which
    a wildcard does not name (Harbor's proxy matches the names a connection asks for)."""
    sections: list[tuple[str, NetworkPolicySection]] = [
        ("environment", config.environment), ("agent", config.agent),
        ("verifier", config.verifier)]
    for i, step in enumerate(config.steps or []):
        sections += [(f"steps[{i}].agent", step.agent), (f"steps[{i}].verifier", step.verifier)]
    out = []
    for where, section in sections:
        wild = [h for h in section.allowed_hosts or [] if h.startswith("*.")]
        if wild:
            out.append(Unsupported(
                f"{where}.allowed_hosts", f"wildcard hosts ({', '.join(wild)}) are not "
                "supported: sandlot's egress filter allows addresses, resolved from names "
                "when the trial starts, and a wildcard names no address",
                "list each host the task needs (files.example.com, not *.example.com), "
                "or its CIDR range"))
    return out
