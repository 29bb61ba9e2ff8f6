"""The Pi coding agent (npm `@mariozechner/pi-coding-agent`), stock, over its RPC mode.

sandlot installs a pinned Pi once per version into its cache (host side), shows that
folder read-only inside the trial's sandbox and runs `node .../cli.js --mode rpc` there,
in the task's workdir, with Pi's native tools (read, bash, edit, write). Pi's config dir
is a fresh folder inside the sandbox whose models.json points one provider, `sandlot`, at
the gateway with the trial's key; nothing of the host's or the user's Pi setup is read
(no sessions, extensions, skills, prompt templates, themes or context files; offline).

One Pi process serves a whole trial: `run` starts it and sends the task, `follow_up`
sends repair feedback into the same session, `close` ends it. The RPC conversation and
the trace are in `pi_rpc`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from typing_extensions import override

from sandlot.agents.base import AgentContext, AgentOutcome, hand_over
from sandlot.agents.install import (
    AgentInstallError,
    install_npm_package,
    installed_version,
    require_node,
)
from sandlot.agents.pi_rpc import PiExited, PiRpc, PiRpcError, ProgressCallback, PromptTrace
from sandlot.errors import ErrorKind, TrialError, limit_error
from sandlot.paths import default_cache_dir
from sandlot.sandbox.base import SandboxProcess
from sandlot.sandbox.files import share_folder

PACKAGE = "@mariozechner/pi-coding-agent"
DEFAULT_VERSION = "0.73.1"
MIN_NODE = (20, 6)
INSTALL_MOUNT = "/opt/sandlot/agents/pi"
CLI = f"{INSTALL_MOUNT}/node_modules/{PACKAGE}/dist/cli.js"
CONFIG_DIR = "/tmp/sandlot-pi-agent"
PROVIDER = "sandlot"
TOOLS = "read,bash,edit,write"
#: Pi's start (node loading its bundle) until it answers the first command.
STARTUP_TIMEOUT_SEC = 60.0
#: Bounded waits when stopping Pi: for an abort to settle, then per stop step.
ABORT_WAIT_SEC = 5.0
STOP_STEP_SEC = 3.0
TRACE_WRITE_EVERY_SEC = 0.5
STDERR_SHOWN_CHARS = 4000

#: Off: everything that could reach the network or load code and prompts from outside.
SETTINGS: dict[str, Any] = {
    "quietStartup": True,
    "enableInstallTelemetry": False,
    "collapseChangelog": True,
    "enableSkillCommands": False,
    "packages": [], "extensions": [], "skills": [], "prompts": [], "themes": [],
    # The gateway retries model calls (see pi_rpc); Pi and its SDKs do not.
    "retry": {"enabled": False, "provider": {"maxRetries": 0}},
    # Stock behaviour: Pi compacts a long context itself; settling waits for it.
    "compaction": {"enabled": True},
}


def pi_command(model_id: str) -> list[str]:
    return ["node", CLI, "--mode", "rpc", "--no-session", "--provider", PROVIDER,
            "--model", model_id, "--offline", "--no-extensions", "--no-skills",
            "--no-prompt-templates", "--no-themes", "--no-context-files", "--tools", TOOLS]


def models_config(sandbox_base_url: str, api_key: str, model: str) -> dict[str, Any]:
    """models.json: provider `sandlot` = the gateway, in the wire format the model speaks.

    Anthropic models get Anthropic Messages (Pi's client adds /v1/messages to the base
    URL); every other model gets OpenAI Chat Completions at <base>/v1.
    """
    anthropic = model.partition("/")[0] == "anthropic"
    return {"providers": {PROVIDER: {
        "baseUrl": sandbox_base_url if anthropic else f"{sandbox_base_url}/v1",
        "api": "anthropic-messages" if anthropic else "openai-completions",
        "apiKey": api_key,
        "models": [{"id": model, "name": model, "reasoning": False, "input": ["text"]}],
    }}}


class PiAgent:
    """Pi in RPC mode inside the sandbox; a ConversationalAgent (repair attempts work)."""

    name = "pi"
    needs_gateway = True

    def __init__(self, model: str | None = None,
                 on_progress: ProgressCallback | None = None) -> None:
        self.model = model
        self.on_progress = on_progress
        self.version = DEFAULT_VERSION
        self.installed_version: str | None = None
        self._process: SandboxProcess | None = None
        self._rpc: PiRpc | None = None
        #: The last RPC driver, kept after it stopped for its stderr tail.
        self._last_rpc: PiRpc | None = None
        self._traces: list[PromptTrace] = []
        self._trace_written = 0.0

    # -- setup -----------------------------------------------------------------------------

    async def prepare(self, cache_dir: Path, version: str | None) -> None:
        """Once per job, before any trial: install now so a missing npm fails once, fast.

        Raises: AgentInstallError saying what to install or what npm said.
        """
        await install_npm_package(cache_dir, "pi", PACKAGE, version or DEFAULT_VERSION)

    @override
    async def setup(self, ctx: AgentContext) -> None:
        gateway = ctx.gateway
        if gateway is None or not gateway.sandbox_base_url:
            raise TrialError(ErrorKind.AGENT_ERROR, "the pi agent needs --model and a gateway "
                             "reachable inside the sandbox", "setup")
        self.version = ctx.agent_version or DEFAULT_VERSION
        try:
            folder = await install_npm_package(ctx.cache_dir or default_cache_dir(), "pi",
                                               PACKAGE, self.version)
        except AgentInstallError as exc:
            raise TrialError(ErrorKind.AGENT_ERROR, f"cannot install Pi: {exc}", "setup") from exc
        self.installed_version = installed_version(folder, self.version)
        await require_node(ctx.sandbox, MIN_NODE, "Pi")
        await share_folder(ctx.sandbox, folder, INSTALL_MOUNT)
        with tempfile.TemporaryDirectory(prefix="sandlot-pi-") as tmp:
            config = Path(tmp) / "agent"
            config.mkdir()
            (config / "models.json").write_text(json.dumps(models_config(
                gateway.sandbox_base_url, gateway.api_key, gateway.model), indent=2))
            (config / "settings.json").write_text(json.dumps(SETTINGS, indent=2))
            await ctx.sandbox.upload(config, CONFIG_DIR)
        await hand_over(ctx, CONFIG_DIR)

    # -- the conversation --------------------------------------------------------------------

    @override
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        await self._start(ctx)
        return await self._prompt(ctx, ctx.task.instruction)

    async def follow_up(self, ctx: AgentContext, message: str) -> AgentOutcome:
        """Repair feedback: the next user message in the same Pi session."""
        if self._rpc is None or self._rpc.exited:
            raise TrialError(ErrorKind.AGENT_ERROR, "Pi is not running: no session to "
                             "send the feedback to", "agent")
        return await self._prompt(ctx, message)

    async def close(self, ctx: AgentContext) -> None:
        """Abort a run still going, then stop Pi (stdin closed, terminate, kill)."""
        rpc, self._rpc = self._rpc, None
        if rpc is None:
            return
        try:
            if self._traces and not self._traces[-1].looks_idle:
                await rpc.abort(self._traces[-1], ABORT_WAIT_SEC)
        finally:
            await rpc.stop(STOP_STEP_SEC)
            self._write_trace(ctx, force=True)

    async def _start(self, ctx: AgentContext) -> None:
        assert ctx.gateway is not None
        if self._rpc is not None:  # run() again: never two Pi processes for one agent
            await self.close(ctx)
        ctx.logs_dir.mkdir(parents=True, exist_ok=True)
        env = {**ctx.env, "PI_CODING_AGENT_DIR": CONFIG_DIR, "PI_OFFLINE": "1",
               "PI_TELEMETRY": "0", "PI_SKIP_VERSION_CHECK": "1"}
        self._process = await ctx.sandbox.start_process(
            pi_command(ctx.gateway.model), env=env, cwd=ctx.task.workdir, network=ctx.network)
        self._rpc = PiRpc(self._process, events_path=ctx.logs_dir / "pi_events.jsonl",
                          on_progress=self.on_progress,
                          on_change=lambda: self._write_trace(ctx),
                          on_event=lambda event, trace: self._live(ctx, event, trace))
        self._last_rpc = self._rpc
        self._rpc.start()
        try:
            await self._rpc.configure(STARTUP_TIMEOUT_SEC)
        except PiRpcError as exc:
            raise await self._died(ctx, exc) from None

    async def _prompt(self, ctx: AgentContext, message: str) -> AgentOutcome:
        rpc = self._rpc
        assert rpc is not None
        trace = PromptTrace(index=len(self._traces) + 1, message=message)
        self._traces.append(trace)
        try:
            async with asyncio.timeout(ctx.timeout_sec):
                await rpc.prompt(trace, ctx.max_turns)
        except TimeoutError:
            trace.finish("timeout")
            await self._stop_now(ctx, trace)
            raise TrialError(
                ErrorKind.AGENT_TIMEOUT,
                f"Pi did not finish within {ctx.timeout_sec:g}s ({len(trace.turns)} model "
                f"turns, {trace.tool_calls_started} tool calls; see agent/pi_trace.json)",
                "agent", details=self._metadata(trace)) from None
        except asyncio.CancelledError:
            trace.finish("cancelled")
            stopping = asyncio.ensure_future(self._stop_now(ctx, trace))
            try:
                await asyncio.shield(stopping)
            except asyncio.CancelledError:
                await stopping  # cancelled again: still leave no process behind
            raise
        except PiRpcError as exc:
            trace.finish("error")
            raise await self._died(ctx, exc) from None
        await rpc.reconcile(trace)
        trace.finish()
        self._write_trace(ctx, force=True)
        if trace.done_reason == "error":
            raise TrialError(ErrorKind.AGENT_ERROR,
                             f"Pi stopped on an error: {trace.error_message or 'unknown'}",
                             "agent", details=self._metadata(trace))
        return AgentOutcome(exit_code=0, duration_sec=(trace.ended or time.monotonic())
                            - trace.started, metadata=self._metadata(trace))

    def _live(self, ctx: AgentContext, event: dict[str, Any], trace: PromptTrace) -> None:
        """Feed the display's counters (O(1) reads) from Pi's events as they come."""
        live = ctx.live
        if live is None:
            return
        kind = event.get("type")
        if kind == "tool_execution_start":
            live.tool_started(str(event.get("toolName") or "tool"))
        elif kind == "message_update":
            live.chunk()
        elif kind == "message_end":
            earlier = sum(t.self_reported_usage.as_dict()["total_tokens"]
                          for t in self._traces if t is not trace)
            live.tokens_reported(earlier + trace.self_reported_usage.as_dict()["total_tokens"])

    def _metadata(self, trace: PromptTrace) -> dict[str, object]:
        return {**trace.metadata(), "agent_version": self.installed_version or self.version}

    async def _stop_now(self, ctx: AgentContext, trace: PromptTrace) -> None:
        """Timeout or cancel: abort (bounded), then stop the process; keep the trace."""
        rpc, self._rpc = self._rpc, None
        try:
            if rpc is not None:
                await rpc.abort(trace, ABORT_WAIT_SEC)
                await rpc.stop(STOP_STEP_SEC)
        finally:
            self._write_trace(ctx, force=True)

    async def _died(self, ctx: AgentContext, exc: PiRpcError) -> TrialError:
        """The error for a Pi that exited or broke the protocol; stops what is left."""
        rpc, self._rpc = self._rpc, None
        process = self._process
        if rpc is not None:
            await rpc.stop(STOP_STEP_SEC)
        self._write_trace(ctx, force=True)
        limited = limit_error(process.limit_hit() if process is not None else None, "Pi",
                              "agent", memory_mb=ctx.task.config.environment.memory_mb)
        if limited is not None:
            return limited
        code = process.returncode if process is not None else None
        stderr = (rpc.stderr_tail if rpc else "").strip()[-STDERR_SHOWN_CHARS:]
        what = (f"Pi exited (code {code}) before it finished" if isinstance(exc, PiExited)
                else f"Pi failed: {exc}")
        return TrialError(ErrorKind.AGENT_ERROR,
                          f"{what}; its stderr ends with:\n{stderr}" if stderr
                          else f"{what} (no stderr)", "agent")

    def _write_trace(self, ctx: AgentContext, force: bool = False) -> None:
        """agent/pi_trace.json, rewritten as the run goes (so a killed run keeps it)."""
        now = time.monotonic()
        if not force and now - self._trace_written < TRACE_WRITE_EVERY_SEC:
            return
        self._trace_written = now
        stderr = self._last_rpc.stderr_tail if self._last_rpc is not None else ""
        data: dict[str, Any] = {"agent": "pi", "version": self.installed_version or self.version,
                                "prompts": [t.as_dict() for t in self._traces]}
        if stderr:
            data["stderr_tail"] = stderr
        path = ctx.logs_dir / "pi_trace.json"
        tmp = path.with_name(".pi_trace.json.tmp")
        try:
            tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
            tmp.replace(path)
        except OSError:
            pass
