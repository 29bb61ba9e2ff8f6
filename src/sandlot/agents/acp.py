"""Any ACP agent (Agent Client Protocol): Claude, Codex, Gemini, OpenCode, Goose, users' own.

The agent runs inside the trial's sandbox, started with `Sandbox.start_process`; the
`acp` SDK's client connection runs in sandlot's process and talks to it over that
process's stdin/stdout (`acp_wire.ProcessTransport`), so no SDK spawn is involved and the
sandbox boundary sits exactly on the agent's stdio. What the agent asks of its client
(files, terminals, permissions) is served inside the same sandbox (`acp_client`).

One agent process and one ACP session serve a whole trial:

- `run`: start the agent, handshake (`initialize`, `authenticate` when the agent asks,
  `session/new` in the task's workdir, the model through session config options when
  the agent offers it), then `session/prompt` with the task's instruction;
- `follow_up`: repair feedback as the next `session/prompt` in the same session;
- `close`: `session/cancel` if a prompt still runs, then stdin closed, SIGTERM, SIGKILL,
  each wait bounded.

The handshake has its own bound (not the task's budget); an agent that never answers it
ends the trial with AGENT_HANDSHAKE_TIMEOUT. How each known agent is installed, launched
and pointed at the gateway is data, in `acp_registry`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import acp
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation
from typing_extensions import override

from sandlot import __version__
from sandlot.agents.acp_client import PromptStats, SandboxClient, SessionCounters
from sandlot.agents.acp_registry import (
    PERMISSION_POLICIES,
    AcpAgentSpec,
    AgentSpecError,
    fill,
    get_spec,
    with_version,
)
from sandlot.agents.acp_wire import STREAM_LIMIT_BYTES, ProcessTransport, Trajectory
from sandlot.agents.base import AgentContext, AgentOutcome, hand_over
from sandlot.agents.install import (
    AgentInstallError,
    install_npm_package,
    installed_version,
    require_node,
)
from sandlot.errors import ErrorKind, TrialError, limit_error
from sandlot.paths import default_cache_dir
from sandlot.sandbox.base import SandboxProcess
from sandlot.sandbox.files import make_dirs, share_folder

INSTALL_ROOT = "/opt/sandlot/agents"
#: Per-agent fresh folders for config and state ({home}); not under /tmp, where codex
#: refuses to put its helpers.
HOME_ROOT = "/opt/sandlot/home"
#: After session/cancel, how long the prompt may take to come back with `cancelled`.
CANCEL_WAIT_SEC = 5.0
#: Each step of stopping the process: stdin closed, then SIGTERM, then SIGKILL.
STOP_STEP_SEC = 3.0
STDERR_SHOWN_CHARS = 4000
#: The key in a task's [agent] table that sets the permission policy for that task.
TASK_PERMISSION_KEY = "acp_permission"
AUTH_REQUIRED = -32000


class AcpAgent:
    """An ACP agent inside the sandbox; a ConversationalAgent (repair attempts work).

    Args:
        model: the job's model (`provider/model`); the gateway routes the agent to it.
        agent: a registry name (`claude`, `codex`...) or `acp:<command>`.
        spec: an explicit spec instead of `agent`.
        permission: the run's answer to permission requests (allow, allow_once, reject);
            a task's `[agent] acp_permission` wins over it, the spec's default loses.
    """

    needs_gateway = True

    def __init__(self, model: str | None = None, *, agent: str = "claude",
                 spec: AcpAgentSpec | None = None, permission: str | None = None) -> None:
        try:
            self.spec = spec or get_spec(agent)
        except AgentSpecError as exc:
            raise ValueError(str(exc)) from None
        if permission is not None and permission not in PERMISSION_POLICIES:
            raise ValueError(f"permission must be one of {', '.join(PERMISSION_POLICIES)}")
        self.name = self.spec.name
        self.model = model
        self.permission = permission
        self.installed_version: str | None = None
        self.counters: SessionCounters | None = None
        self.session_id: str | None = None
        self.handshake: dict[str, Any] = {}
        self._process: SandboxProcess | None = None
        self._wire: ProcessTransport | None = None
        self._conn: Any = None
        self._client: SandboxClient | None = None
        self._trajectory: Trajectory | None = None
        self._prompt_task: asyncio.Task[Any] | None = None
        self._stopped = True

    # -- setup -----------------------------------------------------------------------------

    def _spec(self, version: str | None) -> AcpAgentSpec:
        return with_version(self.spec, version)

    async def prepare(self, cache_dir: Path, version: str | None) -> None:
        """Once per job: install the agent's npm package so a failure shows once, early.

        Raises: AgentInstallError (what to install, or what npm said), ValueError when the
            agent cannot work through the gateway at all.
        """
        spec = self._spec(version)
        if reason := spec.unsupported_reason():
            raise ValueError(reason)
        if spec.npm and spec.version:
            await install_npm_package(cache_dir, spec.name, spec.npm, spec.version)

    @override
    async def setup(self, ctx: AgentContext) -> None:
        spec = self._spec(ctx.agent_version)
        self.spec = spec
        gateway = ctx.gateway
        if gateway is None or not gateway.sandbox_base_url:
            raise TrialError(ErrorKind.AGENT_ERROR, f"the {spec.name} agent needs --model and "
                             "a gateway reachable inside the sandbox", "setup")
        if reason := spec.unsupported_reason():
            raise TrialError(ErrorKind.AGENT_ERROR, reason, "setup")
        if spec.npm and spec.version:
            try:
                folder = await install_npm_package(ctx.cache_dir or default_cache_dir(),
                                                   spec.name, spec.npm, spec.version)
            except AgentInstallError as exc:
                raise TrialError(ErrorKind.AGENT_ERROR, f"cannot install the {spec.name} "
                                 f"agent: {exc}", "setup") from exc
            self.installed_version = installed_version(folder, spec.version)
            await share_folder(ctx.sandbox, folder, self._install_dir())
        if spec.needs_node:
            await require_node(ctx.sandbox, spec.needs_node, f"the {spec.name} agent")
        values = self._values(ctx)
        made = [fill(folder_template, values) for folder_template in spec.dirs]
        await make_dirs(ctx.sandbox, *made)
        if spec.files:
            with tempfile.TemporaryDirectory(prefix="sandlot-acp-") as tmp:
                for i, (path_template, content) in enumerate(spec.files.items()):
                    local = Path(tmp) / f"file-{i}"
                    local.write_text(fill(content, values))
                    made.append(fill(path_template, values))
                    await ctx.sandbox.upload(local, made[-1])
        await hand_over(ctx, *made)

    def _install_dir(self) -> str:
        return f"{INSTALL_ROOT}/{self.spec.name}"

    def _values(self, ctx: AgentContext) -> dict[str, str]:
        assert ctx.gateway is not None and ctx.gateway.sandbox_base_url
        model = ctx.gateway.model
        return {"install": self._install_dir(), "gateway": ctx.gateway.sandbox_base_url,
                "api_key": ctx.gateway.api_key, "model": model,
                "model_id": model.partition("/")[2] or model,
                "home": f"{HOME_ROOT}/{self.spec.name}", "workdir": ctx.task.workdir}

    def _permission(self, ctx: AgentContext) -> str:
        task_policy = ctx.task.config.agent.acp_permission
        if task_policy is not None:
            if task_policy not in PERMISSION_POLICIES:
                raise TrialError(ErrorKind.AGENT_ERROR, f"task.toml [agent] "
                                 f"{TASK_PERMISSION_KEY} = {task_policy!r}: use one of "
                                 f"{', '.join(PERMISSION_POLICIES)}", "setup")
            return str(task_policy)
        return self.permission or self.spec.permission

    # -- the conversation --------------------------------------------------------------------

    @override
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        await self._start(ctx)
        return await self._prompt(ctx, ctx.task.instruction)

    async def follow_up(self, ctx: AgentContext, message: str) -> AgentOutcome:
        """Repair feedback: the next session/prompt in the same ACP session."""
        if self._conn is None or self._stopped or self.session_id is None:
            raise TrialError(ErrorKind.AGENT_ERROR, f"the {self.name} agent is not running: "
                             "no session to send the feedback to", "agent")
        return await self._prompt(ctx, message)

    async def close(self, ctx: AgentContext) -> None:
        """Cancel a prompt still running, then stop the agent; safe to call twice."""
        await self._stop(cancel=True)

    async def _start(self, ctx: AgentContext) -> None:
        if not self._stopped:  # run() again: never two agent processes for one agent
            await self._stop(cancel=True)
        spec = self.spec
        values = self._values(ctx)
        argv = [fill(part, values) for part in spec.command]
        env = {**ctx.env, **{k: fill(v, values) for k, v in spec.env.items()}}
        ctx.logs_dir.mkdir(parents=True, exist_ok=True)
        self.counters = SessionCounters(ctx.live)
        self._trajectory = Trajectory(
            ctx.logs_dir.parent / "trajectory" / "acp_trajectory.jsonl",
            {"agent": spec.name, "agent_version": self.installed_version or spec.version,
             "command": [a.replace(values["api_key"], "<key>") for a in argv],
             "cwd": ctx.task.workdir})
        self._process = await ctx.sandbox.start_process(
            argv, env=env, cwd=ctx.task.workdir, network=ctx.network,
            stream_limit=STREAM_LIMIT_BYTES)
        self._stopped = False
        self._wire = ProcessTransport(self._process, self._trajectory, self.counters.observe,
                                      stderr_log=ctx.logs_dir / "acp_stderr.log")
        self._wire.start()
        self._client = SandboxClient(ctx.sandbox, ctx.task.workdir, ctx.network, self.counters,
                                     permission=self._permission(ctx))
        self._conn = acp.connect_to_agent(self._client, self._wire)
        started = time.monotonic()
        try:
            async with asyncio.timeout(spec.handshake_timeout_sec):
                await self._handshake(ctx)
        except TimeoutError:
            if self._wire.eof:  # it died as the bound ran out: report the death
                raise await self._died(ctx, "during the handshake") from None
            tail = self._stderr_tail()
            await self._stop(cancel=False)
            raise TrialError(
                ErrorKind.AGENT_HANDSHAKE_TIMEOUT,
                f"the {spec.name} agent did not complete the ACP handshake (initialize, "
                f"session/new) within {spec.handshake_timeout_sec:g}s"
                + (f"; its stderr ends with:\n{tail}" if tail else " (no stderr)"),
                "agent", details=self._metadata(None)) from None
        except (ConnectionError, acp.RequestError) as exc:
            if isinstance(exc, acp.RequestError) and not self._wire.eof:
                await self._stop(cancel=False)
                raise TrialError(ErrorKind.AGENT_ERROR, f"the {spec.name} agent refused the "
                                 f"ACP handshake: {_describe(exc)}", "agent",
                                 details=self._metadata(None)) from None
            raise await self._died(ctx, "during the handshake") from None
        except asyncio.CancelledError:
            await _shielded(self._stop(cancel=False))
            raise
        self.handshake["handshake_sec"] = round(time.monotonic() - started, 4)
        self._trajectory.event("handshake_done", **self.handshake)

    async def _handshake(self, ctx: AgentContext) -> None:
        conn = self._conn
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=self.spec.client_fs,
                                          write_text_file=self.spec.client_fs),
                terminal=True),
            client_info=Implementation(name="sandlot", title="sandlot", version=__version__))
        info = init.agent_info
        self.handshake = {"protocol_version": init.protocol_version,
                          "agent_name": info.name if info else None,
                          "agent_reported_version": info.version if info else None}
        methods = [m.id for m in (init.auth_methods or []) if getattr(m, "id", None)]
        if self.spec.auth_method:
            await self._authenticate(self.spec.auth_method)
        try:
            session = await conn.new_session(cwd=ctx.task.workdir, mcp_servers=[])
        except acp.RequestError as exc:
            if exc.code != AUTH_REQUIRED or not methods or "auth_method" in self.handshake:
                raise
            await self._authenticate(_pick_auth_method(methods))
            session = await conn.new_session(cwd=ctx.task.workdir, mcp_servers=[])
        self.session_id = session.session_id
        self.handshake["session_id"] = session.session_id
        await self._select_model(ctx, session.config_options or [])

    async def _authenticate(self, method_id: str) -> None:
        self.handshake["auth_method"] = method_id
        await self._conn.authenticate(method_id=method_id)

    async def _select_model(self, ctx: AgentContext, options: list[Any]) -> None:
        """Pick the job's model through a `model` config option when the agent offers it.

        The gateway sends every request to the job's model whatever name the agent uses,
        so this only matters to agents that adapt to their model; when the value is not
        among the agent's choices, its own setting (env, flags) stays.
        """
        assert ctx.gateway is not None
        wanted = fill(self.spec.model_option, self._values(ctx))
        option = next((o for o in options if getattr(o, "type", None) == "select" and (
            getattr(o, "category", None) == "model" or o.id == "model")), None)
        if option is None:
            self.handshake["model_selection"] = "no model option offered"
            return
        values = []
        for item in option.options:
            values += [o.value for o in item.options] if hasattr(item, "group") else [item.value]
        self.handshake["agent_model"] = option.current_value
        if option.current_value == wanted:
            self.handshake["model_selection"] = "already selected"
        elif wanted in values:
            try:
                await self._conn.set_config_option(config_id=option.id,
                                                   session_id=self.session_id, value=wanted)
                self.handshake["model_selection"] = f"set config option {option.id!r}"
                self.handshake["agent_model"] = wanted
            except acp.RequestError as exc:
                self.handshake["model_selection"] = f"set_config_option failed: {exc}"
        else:
            self.handshake["model_selection"] = ("not among the agent's choices; its own "
                                                 "setting stays")

    async def _prompt(self, ctx: AgentContext, message: str) -> AgentOutcome:
        assert self.counters is not None and self._trajectory is not None
        conn, counters = self._conn, self.counters
        stats = counters.begin_prompt(message)
        self._trajectory.prompt = stats.index
        task = asyncio.ensure_future(conn.prompt(session_id=self.session_id,
                                                 prompt=[acp.text_block(message)]))
        self._prompt_task = task
        try:
            response = await asyncio.wait_for(asyncio.shield(task), ctx.timeout_sec)
        except TimeoutError:
            self._trajectory.event("timeout", timeout_sec=ctx.timeout_sec)
            await self._stop(cancel=True)
            counters.prompt_finished(stats, "timeout")
            raise TrialError(
                ErrorKind.AGENT_TIMEOUT,
                f"the {self.name} agent did not finish within {ctx.timeout_sec:g}s "
                f"({len(stats.tool_ids)} tool calls, {counters.message_chunks} message "
                "chunks; see trajectory/acp_trajectory.jsonl)",
                "agent", details=self._metadata(stats)) from None
        except asyncio.CancelledError:
            counters.prompt_finished(stats, "cancelled")
            await _shielded(self._stop(cancel=True))
            raise
        except ConnectionError:
            counters.prompt_finished(stats, "error")
            raise await self._died(ctx, "while working", stats) from None
        except acp.RequestError as exc:
            counters.prompt_finished(stats, "error")
            raise TrialError(ErrorKind.AGENT_ERROR, f"the {self.name} agent failed the "
                             f"prompt: {_describe(exc)}", "agent",
                             details=self._metadata(stats)) from None
        finally:
            self._prompt_task = None
        counters.prompt_finished(stats, str(response.stop_reason), response.usage)
        meta = self._metadata(stats)
        return AgentOutcome(exit_code=0, duration_sec=(stats.ended or time.monotonic())
                            - stats.started, metadata=meta)

    def _metadata(self, stats: PromptStats | None) -> dict[str, object]:
        counters = self.counters
        out: dict[str, Any] = {"agent": self.name,
                               "agent_version": self.installed_version or self.spec.version,
                               "acp": dict(self.handshake)}
        if counters is not None:
            out.update(counters.prompt_metadata(stats) if stats is not None
                       else {"session": counters.snapshot()})
        if self._wire is not None and (self._wire.unparsed_lines or self._wire.unknown_updates):
            out["wire_problems"] = {"unparsed_lines": self._wire.unparsed_lines,
                                    "unknown_updates": self._wire.unknown_updates}
        return out

    # -- stopping ----------------------------------------------------------------------------

    def _stderr_tail(self) -> str:
        tail = self._wire.stderr_tail if self._wire is not None else ""
        return tail.strip()[-STDERR_SHOWN_CHARS:]

    async def _died(self, ctx: AgentContext, when: str,
                    stats: PromptStats | None = None) -> TrialError:
        """The error for an agent whose stdout closed (it exited or crashed)."""
        process = self._process
        code = None
        if process is not None:
            with contextlib.suppress(TimeoutError):
                code = await asyncio.wait_for(process.wait(), STOP_STEP_SEC)
        limit = process.limit_hit() if process is not None else None
        await self._stop(cancel=False)
        tail = self._stderr_tail()
        details = self._metadata(stats)
        limited = limit_error(limit, f"the {self.name} agent", "agent", details,
                              ctx.task.config.environment.memory_mb)
        if limited is not None:
            return limited
        what = (f"the {self.name} agent exited (code {code}) {when}" if code is not None
                else f"the {self.name} agent stopped talking {when} (its stdio broke)")
        return TrialError(ErrorKind.AGENT_ERROR,
                          f"{what}; its stderr ends with:\n{tail}" if tail
                          else f"{what} (no stderr)", "agent", details)

    async def _stop(self, cancel: bool) -> None:
        """session/cancel (bounded) if asked and a prompt runs; then end the process:
        stdin closed, SIGTERM, SIGKILL, each wait bounded. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        trajectory, process, wire = self._trajectory, self._process, self._wire
        try:
            task = self._prompt_task
            if cancel and task is not None and not task.done() and wire is not None \
                    and not wire.eof:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._conn.cancel(session_id=self.session_id),
                                           STOP_STEP_SEC)
                    if trajectory is not None:
                        trajectory.event("cancel_sent")
                with contextlib.suppress(TimeoutError, Exception):
                    await asyncio.wait_for(asyncio.shield(task), CANCEL_WAIT_SEC)
            if task is not None and not task.done():
                task.cancel()
            if self._client is not None:
                await self._client.close()
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._conn.close(), STOP_STEP_SEC)
            if process is not None and process.returncode is None and not (
                    self.spec.exits_on_stdin_close and await _exited(process)):
                await process.terminate()
                if not await _exited(process):
                    await process.kill()
                    await _exited(process)
        finally:
            if wire is not None:
                await wire.finish(STOP_STEP_SEC)
            if trajectory is not None:
                code = process.returncode if process is not None else None
                trajectory.event("agent_stopped", exit_code=code)
                trajectory.close()


async def _exited(process: SandboxProcess, seconds: float = STOP_STEP_SEC) -> bool:
    try:
        await asyncio.wait_for(process.wait(), seconds)
        return True
    except TimeoutError:
        return False


async def _shielded(coro: Any) -> None:
    """Finish a cleanup even if cancelled again meanwhile (a second Ctrl-C)."""
    task = asyncio.ensure_future(coro)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


def _pick_auth_method(methods: list[str]) -> str:
    """Prefer a method that takes a key from the environment (we pass the gateway's)."""
    for method in methods:
        if "key" in method.lower():
            return method
    return methods[0]


def _describe(exc: acp.RequestError) -> str:
    data = exc.data
    text = f"{exc} (code {exc.code})"
    if data:
        text += f": {json.dumps(data, default=str)[:1000]}"
    return text
