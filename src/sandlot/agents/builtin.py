"""The built-in agent: a small tool-calling loop for benchmarking a raw model.

It speaks OpenAI Chat Completions to the gateway over HTTP, like any external agent, and
executes two tools in the sandbox: `bash` and `write_file` (plus `edit_file` for exact
replacements). It stops on an answer without tool calls, on --max-turns, or at the task's
timeout. Usage is not counted here: the gateway counts it.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
from typing_extensions import override

from sandlot.agents.base import AgentContext, AgentOutcome
from sandlot.agents.oracle import raise_for_limits
from sandlot.errors import ErrorKind, TrialError

DEFAULT_MAX_TURNS = 50
TOOL_OUTPUT_CHARS = 16_000
COMMAND_TIMEOUT_SEC = 600.0

SYSTEM_PROMPT = """You are a careful software engineer working in a Linux sandbox.
Your working directory is {workdir}. Use the tools to inspect files, run commands and
make changes until the task is done, then reply with a short summary and no tool call."""

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run a bash command in the sandbox; returns its "
        "exit code and output.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "The command line to run."}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Create or overwrite a file with content.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "edit_file", "description": "Replace one exact occurrence of old_text "
        "with new_text in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old_text": {"type": "string"},
            "new_text": {"type": "string"}},
            "required": ["path", "old_text", "new_text"]}}},
]


def _tail(text: str, limit: int = TOOL_OUTPUT_CHARS) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    return "[…truncated…]\n" + text[-limit:], True


class BuiltinAgent:
    name = "builtin"
    needs_gateway = True

    def __init__(self, model: str | None = None) -> None:
        self.model = model
        self._messages: list[dict[str, Any]] = []

    @override
    async def setup(self, ctx: AgentContext) -> None:
        return None

    @override
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        self._messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(workdir=ctx.task.workdir)},
            {"role": "user", "content": ctx.task.instruction},
        ]
        return await self._prompt(ctx)

    async def follow_up(self, ctx: AgentContext, message: str) -> AgentOutcome:
        """The next user message in the same conversation (repair feedback)."""
        self._messages.append({"role": "user", "content": message})
        return await self._prompt(ctx)

    async def close(self, ctx: AgentContext) -> None:
        """Nothing runs between prompts: every tool call already finished."""
        return None

    async def _prompt(self, ctx: AgentContext) -> AgentOutcome:
        if ctx.gateway is None:
            raise TrialError(ErrorKind.AGENT_ERROR, "the built-in agent needs --model", "agent")
        trace_path = ctx.logs_dir / "builtin_trajectory.jsonl"
        state = _LoopState(trace_path)
        started = time.monotonic()
        try:
            async with asyncio.timeout(ctx.timeout_sec):
                await self._loop(ctx, state)
        except TimeoutError:
            raise TrialError(ErrorKind.AGENT_TIMEOUT,
                             f"the built-in agent did not finish within {ctx.timeout_sec:g}s "
                             f"({state.turns} turns, {state.tool_calls} tool calls)",
                             "agent") from None
        return AgentOutcome(exit_code=0, duration_sec=time.monotonic() - started,
                            metadata={"turns": state.turns, "tool_calls": state.tool_calls,
                                      "tools_used": sorted(state.tools_used),
                                      "stop_reason": state.stop_reason,
                                      "final_answer": state.final_answer[-2000:]})

    async def _loop(self, ctx: AgentContext, state: _LoopState) -> None:
        assert ctx.gateway is not None
        max_turns = ctx.max_turns or DEFAULT_MAX_TURNS
        messages = self._messages
        headers = {"authorization": f"Bearer {ctx.gateway.api_key}"}
        async with httpx.AsyncClient(base_url=ctx.gateway.host_base_url, headers=headers,
                                     timeout=httpx.Timeout(None, connect=10.0)) as client:
            while True:
                if state.turns >= max_turns:
                    state.stop_reason = "max_turns"
                    return
                state.turns += 1
                response = await client.post("/v1/chat/completions", json={
                    "model": ctx.gateway.model, "messages": messages, "tools": TOOLS})
                if response.status_code != 200:
                    raise TrialError(ErrorKind.AGENT_ERROR,
                                     f"the model call failed with HTTP {response.status_code}: "
                                     f"{response.text[:500]}", "agent")
                choice = (response.json().get("choices") or [{}])[0]
                message = choice.get("message") or {}
                messages.append({k: v for k, v in message.items()
                                 if k in ("role", "content", "tool_calls")})
                state.log({"type": "assistant", "turn": state.turns, "message": message,
                           "finish_reason": choice.get("finish_reason")})
                calls = message.get("tool_calls") or []
                if not calls:
                    state.final_answer = message.get("content") or ""
                    state.stop_reason = ("length" if choice.get("finish_reason") == "length"
                                         else "stop")
                    return
                for call in calls:
                    output = await self._tool(ctx, state, call)
                    messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                                     "content": output})

    async def _tool(self, ctx: AgentContext, state: _LoopState, call: dict[str, Any]) -> str:
        fn = call.get("function") or {}
        name = fn.get("name", "")
        if ctx.live is not None:
            ctx.live.tool_started(name)
        state.tool_calls += 1
        state.tools_used.add(name)
        started = time.monotonic()
        try:
            args = json.loads(fn.get("arguments") or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            output, is_error = f"error: invalid arguments: {exc}", True
        else:
            output, is_error = await self._run_tool(ctx, name, args)
        shown, truncated = _tail(output)
        state.log({"type": "tool", "name": name, "arguments": fn.get("arguments"),
                   "is_error": is_error, "duration_sec": round(time.monotonic() - started, 4),
                   "output": shown, "truncated": truncated})
        return shown

    async def _run_tool(self, ctx: AgentContext, name: str,
                        args: dict[str, Any]) -> tuple[str, bool]:
        sandbox = ctx.sandbox
        if name == "bash":
            command = str(args.get("command", ""))
            result = await sandbox.exec(["bash", "-lc", command],
                                        timeout_sec=COMMAND_TIMEOUT_SEC, network=ctx.network)
            raise_for_limits(result, "agent", f"the bash command {command[:80]!r}",
                             ctx.task.config.environment.memory_mb)
            if result.timed_out:
                return f"error: the command timed out after {COMMAND_TIMEOUT_SEC:g}s", True
            text = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr else "")
            return f"exit code {result.exit_code}\n{text}", result.exit_code != 0
        if name == "write_file":
            path = str(args.get("path", ""))
            result = await sandbox.exec(
                ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path],
                stdin=str(args.get("content", "")).encode(), timeout_sec=60,
                network=ctx.network)
            if result.exit_code != 0:
                return f"error: cannot write {path}: {result.stderr.strip()}", True
            return f"wrote {path}", False
        if name == "edit_file":
            return await self._edit(ctx, args)
        return f"error: unknown tool {name!r}; use bash, write_file or edit_file", True

    async def _edit(self, ctx: AgentContext, args: dict[str, Any]) -> tuple[str, bool]:
        path = str(args.get("path", ""))
        old, new = str(args.get("old_text", "")), str(args.get("new_text", ""))
        read = await ctx.sandbox.exec(["cat", "--", path], timeout_sec=60, network=ctx.network)
        if read.exit_code != 0:
            return f"error: cannot read {path}: {read.stderr.strip()}", True
        count = read.stdout.count(old) if old else 0
        if count != 1:
            return f"error: old_text occurs {count} times in {path}; it must occur once", True
        wrote = await ctx.sandbox.exec(["sh", "-c", 'cat > "$1"', "sh", path],
                                       stdin=read.stdout.replace(old, new, 1).encode(),
                                       timeout_sec=60, network=ctx.network)
        if wrote.exit_code != 0:
            return f"error: cannot write {path}: {wrote.stderr.strip()}", True
        return f"edited {path}", False


class _LoopState:
    def __init__(self, trace_path: Path) -> None:
        self.trace_path = trace_path
        self.turns = 0
        self.tool_calls = 0
        self.tools_used: set[str] = set()
        self.stop_reason = "stop"
        self.final_answer = ""

    def log(self, entry: dict[str, Any]) -> None:
        with self.trace_path.open("a") as fh:
            fh.write(json.dumps({"t": time.time(), **entry}) + "\n")
