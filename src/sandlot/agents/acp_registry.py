"""Which ACP agents sandlot knows: how to install each, launch it and point it at the gateway.

An entry (`AcpAgentSpec`) is data only: the npm package and pinned version sandlot installs
into its cache (or none, for an agent that must already be on PATH inside the sandbox),
the command line, the environment and config files that aim the agent at the trial's
gateway, and the wire format the agent speaks to its model. Strings may use these
placeholders, filled in per trial:

    {install}     where the agent's install folder is shown inside the sandbox
    {gateway}     the gateway's URL inside the sandbox (http://127.0.0.1:PORT, no /v1)
    {api_key}     the trial's gateway key
    {model}       the job's model as `provider/model` (the gateway routes any name to it)
    {model_id}    the part after `provider/`
    {home}        a fresh folder inside the sandbox for the agent's own config and state
    {workdir}     the task's workdir

`--agent acp:"<command>"` runs any other ACP agent (see `command_spec`), and an agents
file (TOML, `load_agents_file`) registers more by name. This module imports nothing heavy:
the CLI lists agents from it without loading the ACP SDK.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sandlot.agents.install import installed_dir, is_installed

#: The gateway's wire formats, by the name a spec uses, with what people call them.
WIRE_APIS: dict[str, str] = {
    "messages": "Anthropic Messages (/v1/messages)",
    "responses": "OpenAI Responses (/v1/responses)",
    "chat": "OpenAI Chat Completions (/v1/chat/completions)",
    "gemini": "Google generateContent (/v1beta/models/...:generateContent)",
}
#: Wire formats some agents need that the gateway does not serve (none at the moment;
#: an agents file may still name one it does not know).
UNSERVED_WIRE_APIS: dict[str, str] = {}
PERMISSION_POLICIES = ("allow", "allow_once", "reject")
ACP_PREFIX = "acp:"
AGENTS_FILE_ENV = "SANDLOT_AGENTS_FILE"
_PLACEHOLDER = re.compile(r"\{(install|gateway|api_key|model_id|model|home|workdir)\}")


class AgentSpecError(ValueError):
    """An agent name, `acp:` command or agents file cannot be used; says what to change."""


@dataclass(frozen=True)
class AcpAgentSpec:
    """How to install, launch and configure one ACP agent."""

    name: str
    #: argv, with placeholders; the first item is looked up on the sandbox's PATH.
    command: tuple[str, ...]
    description: str = ""
    #: Environment for the agent (placeholders allowed), on top of the task's.
    env: Mapping[str, str] = field(default_factory=dict)
    #: npm package installed into <cache>/agents/<name>/<version> and shown at {install}.
    npm: str | None = None
    #: Pinned version of `npm` (`--agent-version` overrides it).
    version: str | None = None
    #: Minimum Node.js (major, minor) inside the sandbox, checked before launch.
    needs_node: tuple[int, int] | None = None
    #: The wire format the agent's model client speaks (a WIRE_APIS key); None: unknown.
    wire_api: str | None = None
    #: Folders created inside the sandbox before launch (placeholders allowed).
    dirs: tuple[str, ...] = ()
    #: Files written inside the sandbox before launch: path -> content (placeholders).
    files: Mapping[str, str] = field(default_factory=dict)
    #: Authenticate with this method id up front; by default only when the agent asks.
    auth_method: str | None = None
    #: Answer to session/request_permission: allow, allow_once or reject.
    permission: str = "allow"
    #: Model value to select through session config options, if the agent offers it.
    model_option: str = "{model}"
    #: False for agents that keep running after stdin closes: terminate them at once.
    exits_on_stdin_close: bool = True
    #: Bound on start-up: initialize, authenticate and session/new together.
    handshake_timeout_sec: float = 60.0
    #: Offer the client's fs/read_text_file and fs/write_text_file. Off for an agent that
    #: mishandles their errors (gemini-cli takes a missing file for a failure, so it could
    #: not create files); it then uses the files in the sandbox directly, which is the same.
    client_fs: bool = True
    #: For agents sandlot cannot install: what the user should do.
    install_hint: str = ""
    #: "builtin", "file" (an agents file) or "command" (`acp:<command>`).
    source: str = "builtin"

    def needs(self) -> str:
        """What the agent needs, for `sandlot agents list`."""
        parts = []
        if self.needs_node:
            parts.append(f"node >= {self.needs_node[0]}.{self.needs_node[1]}")
        elif self.npm is None and self.source == "builtin":
            parts.append(f"`{self.command[0]}` on PATH in the sandbox")
        if self.wire_api in WIRE_APIS:
            parts.append(f"model served as {WIRE_APIS[self.wire_api]}")
        elif self.wire_api in UNSERVED_WIRE_APIS:
            parts.append(f"{UNSERVED_WIRE_APIS[self.wire_api]}: not served by the gateway")
        return "; ".join(parts)

    def unsupported_reason(self) -> str | None:
        """Why this agent cannot run through the gateway at all, or None."""
        if self.wire_api in UNSERVED_WIRE_APIS:
            served = ", ".join(WIRE_APIS.values())
            return (f"the {self.name} agent talks to its model in "
                    f"{UNSERVED_WIRE_APIS[self.wire_api]}, which sandlot's gateway does not "
                    f"serve (it serves {served})")
        return None


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace the known {placeholders} only; other braces (TOML, JSON) stay as they are."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


_NODE = (20, 6)
_CLAUDE_PKG = "@agentclientprotocol/claude-agent-acp"
_CODEX_PKG = "@zed-industries/codex-acp"
_GEMINI_PKG = "@google/gemini-cli"
_OPENCODE_PKG = "opencode-ai"

#: OpenCode's config: one OpenAI-compatible provider, `sandlot`, that is the gateway.
_OPENCODE_CONFIG = """{
  "$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "sandlot/{model}",
  "provider": {
    "sandlot": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "sandlot gateway",
      "options": {"baseURL": "{gateway}/v1", "apiKey": "{api_key}"},
      "models": {"{model}": {"name": "{model}"}}
    }
  }
}
"""

BUILTIN_SPECS: dict[str, AcpAgentSpec] = {
    "claude": AcpAgentSpec(
        name="claude",
        description="Claude Code through its ACP adapter (claude-agent-acp)",
        npm=_CLAUDE_PKG,
        # 0.50+ needs Node 22; 0.49 runs on Node 20 and was checked against the gateway.
        version="0.49.0",
        needs_node=_NODE,
        wire_api="messages",
        command=("node", f"{{install}}/node_modules/{_CLAUDE_PKG}/dist/index.js"),
        env={
            "ANTHROPIC_BASE_URL": "{gateway}",
            "ANTHROPIC_API_KEY": "{api_key}",
            "ANTHROPIC_MODEL": "{model}",
            "ANTHROPIC_SMALL_FAST_MODEL": "{model}",
            # A fresh HOME and config dir: nothing of the user's Claude setup is read.
            "HOME": "{home}",
            "CLAUDE_CONFIG_DIR": "{home}/.claude",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "IS_SANDBOX": "1",
        },
        dirs=("{home}/.claude",),
    ),
    "codex": AcpAgentSpec(
        name="codex",
        description="OpenAI Codex through its ACP adapter (codex-acp)",
        npm=_CODEX_PKG,
        version="0.16.0",
        needs_node=(18, 0),
        wire_api="responses",
        command=(
            "node", f"{{install}}/node_modules/{_CODEX_PKG}/bin/codex-acp.js",
            "-c", 'model_provider="sandlot"',
            "-c", 'model_providers.sandlot={name="sandlot",base_url="{gateway}/v1",'
                  'env_key="SANDLOT_GATEWAY_KEY",wire_api="responses"}',
            "-c", 'model="{model}"',
            # sandlot's sandbox is the isolation; codex's own sandbox helper cannot run here.
            "-c", 'sandbox_mode="danger-full-access"',
            "-c", 'approval_policy="never"',
        ),
        env={"CODEX_HOME": "{home}/.codex", "SANDLOT_GATEWAY_KEY": "{api_key}"},
        dirs=("{home}/.codex",),
        exits_on_stdin_close=False,
    ),
    "gemini": AcpAgentSpec(
        name="gemini",
        description="Google Gemini CLI in ACP mode",
        npm=_GEMINI_PKG,
        version="0.61.0",
        needs_node=(20, 0),
        wire_api="gemini",
        command=("node", f"{{install}}/node_modules/{_GEMINI_PKG}/bundle/gemini.js",
                 "--experimental-acp", "--model", "{model}"),
        env={"GEMINI_API_KEY": "{api_key}", "GOOGLE_GEMINI_BASE_URL": "{gateway}",
             "HOME": "{home}", "GEMINI_CLI_NO_RELAUNCH": "true",
             # The sandbox is the trust boundary: without this, gemini-cli refuses its
             # file tools in an "untrusted folder" when permissions are auto-approved.
             "GEMINI_CLI_TRUST_WORKSPACE": "true"},
        client_fs=False,
        dirs=("{home}",),
    ),
    "opencode": AcpAgentSpec(
        name="opencode",
        description="OpenCode in ACP mode",
        npm=_OPENCODE_PKG,
        version="1.18.33",
        wire_api="chat",
        command=("{install}/node_modules/.bin/opencode", "acp"),
        env={"OPENCODE_CONFIG": "{home}/opencode.json", "HOME": "{home}",
             "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
             "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1"},
        files={"{home}/opencode.json": _OPENCODE_CONFIG},
        needs_node=(20, 0),
        model_option="sandlot/{model}",
    ),
    "goose": AcpAgentSpec(
        name="goose",
        description="Block's Goose in ACP mode (a native binary, not on npm)",
        wire_api="chat",
        command=("goose", "acp"),
        env={"GOOSE_PROVIDER": "openai", "OPENAI_HOST": "{gateway}",
             "OPENAI_BASE_PATH": "v1/chat/completions", "OPENAI_API_KEY": "{api_key}",
             "GOOSE_MODEL": "{model}", "GOOSE_MODE": "auto", "GOOSE_DISABLE_KEYRING": "1",
             "HOME": "{home}"},
        dirs=("{home}",),
        install_hint="goose is not on npm: install its binary on the host (the local "
                     "sandbox's base) or in the task's Dockerfile so that `goose` is on PATH",
    ),
}

#: What `acp:<command>` agents get: the gateway under the names most clients read.
_GENERIC_ENV = {
    "SANDLOT_GATEWAY_URL": "{gateway}", "SANDLOT_GATEWAY_KEY": "{api_key}",
    "SANDLOT_MODEL": "{model}",
    "OPENAI_BASE_URL": "{gateway}/v1", "OPENAI_API_KEY": "{api_key}",
    "ANTHROPIC_BASE_URL": "{gateway}", "ANTHROPIC_API_KEY": "{api_key}",
}


def command_spec(command: str) -> AcpAgentSpec:
    """The spec for `acp:<command>`: the command runs inside the sandbox as given.

    Raises: AgentSpecError for an empty or unparsable command.
    """
    text = command.removeprefix(ACP_PREFIX).strip()
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise AgentSpecError(f"cannot parse the ACP command {text!r}: {exc}") from None
    if not argv:
        raise AgentSpecError('`--agent acp:` needs a command, e.g. --agent acp:"my-agent --acp"')
    return AcpAgentSpec(name="acp", command=argv, description="an ACP agent run by command",
                        env=dict(_GENERIC_ENV), source="command")


def _spec_from_table(name: str, raw: Any, where: str) -> AcpAgentSpec:
    if not isinstance(raw, dict):
        raise AgentSpecError(f"{where}: [agents.{name}] must be a table")
    known = {"command", "description", "env", "npm", "version", "needs_node", "wire_api",
             "dirs", "files", "auth_method", "permission", "model_option",
             "exits_on_stdin_close", "handshake_timeout_sec", "client_fs"}
    unknown = set(raw) - known
    if unknown:
        raise AgentSpecError(f"{where}: agent {name!r}: unknown key(s) "
                             f"{', '.join(sorted(unknown))}; use {', '.join(sorted(known))}")
    command = raw.get("command")
    if isinstance(command, str):
        command = shlex.split(command)
    if not (isinstance(command, list) and command and all(isinstance(c, str) for c in command)):
        raise AgentSpecError(f"{where}: agent {name!r} needs command = [\"prog\", \"arg\"...]")
    wire = raw.get("wire_api")
    if wire is not None and wire not in WIRE_APIS and wire not in UNSERVED_WIRE_APIS:
        raise AgentSpecError(f"{where}: agent {name!r}: wire_api must be one of "
                             f"{', '.join(WIRE_APIS)}")
    permission = raw.get("permission", "allow")
    if permission not in PERMISSION_POLICIES:
        raise AgentSpecError(f"{where}: agent {name!r}: permission must be one of "
                             f"{', '.join(PERMISSION_POLICIES)}")
    if raw.get("npm") and not raw.get("version"):
        raise AgentSpecError(f"{where}: agent {name!r}: npm needs a pinned version = \"x.y.z\"")
    node = raw.get("needs_node")
    needs_node = None
    if node is not None:
        try:
            parts = [int(p) for p in str(node).split(".")[:2]]
            needs_node = (parts[0], parts[1] if len(parts) > 1 else 0)
        except ValueError:
            raise AgentSpecError(f"{where}: agent {name!r}: needs_node must look like "
                                 '"20" or "20.6"') from None
    for key in ("env", "files"):
        value = raw.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise AgentSpecError(f"{where}: agent {name!r}: {key} must be a table of strings")
    try:
        return AcpAgentSpec(
            name=name, command=tuple(command), description=str(raw.get("description", "")),
            env=dict(raw.get("env", {})), npm=raw.get("npm"), version=raw.get("version"),
            needs_node=needs_node, wire_api=wire, dirs=tuple(raw.get("dirs", ())),
            files=dict(raw.get("files", {})), auth_method=raw.get("auth_method"),
            permission=permission, model_option=str(raw.get("model_option", "{model}")),
            exits_on_stdin_close=bool(raw.get("exits_on_stdin_close", True)),
            handshake_timeout_sec=float(raw.get("handshake_timeout_sec", 60.0)),
            client_fs=bool(raw.get("client_fs", True)),
            source="file")
    except (TypeError, ValueError) as exc:
        raise AgentSpecError(f"{where}: agent {name!r}: {exc}") from None


def load_agents_file(path: Path) -> dict[str, AcpAgentSpec]:
    """Read an agents file: one `[agents.<name>]` table per agent.

    Raises: AgentSpecError naming the file and the problem.
    """
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AgentSpecError(f"cannot read agents file {path}: {exc}") from None
    agents = data.get("agents")
    if not isinstance(agents, dict) or not agents:
        raise AgentSpecError(f"{path}: no agents; write one [agents.<name>] table per agent")
    specs = {}
    for name, raw in agents.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._\-]*", name):
            raise AgentSpecError(f"{path}: agent name {name!r}: use letters, digits, . _ -")
        specs[name] = _spec_from_table(name, raw, str(path))
    return specs


@dataclass(frozen=True)
class AgentCatalog:
    """The ACP agents one run knows: the built-in entries plus those from agents files.

    A value passed down from the CLI to the job (never a module-level table), so two runs
    in one process, or a test, cannot see each other's agents.
    """

    user: Mapping[str, AcpAgentSpec] = field(default_factory=dict)

    @classmethod
    def load(cls, agents_file: Path | None = None,
             environ: Mapping[str, str] | None = None) -> AgentCatalog:
        """Built-ins, then $SANDLOT_AGENTS_FILE, then `agents_file` (`--agents-file`): a
        later source wins for a name they share.

        Raises: AgentSpecError naming the file and the problem.
        """
        env = os.environ if environ is None else environ
        user: dict[str, AcpAgentSpec] = {}
        if env.get(AGENTS_FILE_ENV):
            user.update(load_agents_file(Path(env[AGENTS_FILE_ENV])))
        if agents_file is not None:
            user.update(load_agents_file(agents_file))
        return cls(user=user)

    def specs(self) -> dict[str, AcpAgentSpec]:
        return {**BUILTIN_SPECS, **self.user}

    def is_acp_agent(self, name: str) -> bool:
        return name.startswith(ACP_PREFIX) or name in self.specs()

    def get_spec(self, name: str) -> AcpAgentSpec:
        """The spec for a known name or `acp:<command>`.

        Raises: AgentSpecError for anything else.
        """
        if name.startswith(ACP_PREFIX):
            return command_spec(name)
        specs = self.specs()
        if name in specs:
            return specs[name]
        raise AgentSpecError(f"unknown ACP agent {name!r}; known: {', '.join(sorted(specs))}, "
                             'or acp:"<command>"')

    def rows(self, cache_dir: Path) -> list[dict[str, object]]:
        """One row per ACP agent for `sandlot agents list`: name, version, installed..."""
        rows: list[dict[str, object]] = []
        for name, spec in sorted(self.specs().items()):
            if spec.npm and spec.version:
                installed: object = is_installed(installed_dir(cache_dir, name, spec.version))
            else:
                installed = None  # not sandlot's to install
            rows.append({"name": name, "kind": "acp", "package": spec.npm or spec.command[0],
                         "version": spec.version, "installed": installed,
                         "needs": spec.needs(), "source": spec.source,
                         "description": spec.description,
                         "runnable": spec.unsupported_reason() is None,
                         "note": spec.unsupported_reason() or spec.install_hint})
        return rows


def known_specs() -> dict[str, AcpAgentSpec]:
    """Built-ins and $SANDLOT_AGENTS_FILE's agents (read now, not cached)."""
    return AgentCatalog.load().specs()


def get_spec(name: str) -> AcpAgentSpec:
    """`AgentCatalog.load().get_spec(name)`: built-ins, $SANDLOT_AGENTS_FILE, `acp:`."""
    return AgentCatalog.load().get_spec(name)


def with_version(spec: AcpAgentSpec, version: str | None) -> AcpAgentSpec:
    return replace(spec, version=version) if version and spec.npm else spec
