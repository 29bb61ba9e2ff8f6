"""The client side of ACP, served inside the sandbox, and the session's live counters.

`SandboxClient` answers what an ACP agent may ask its client: `fs/read_text_file` and
`fs/write_text_file` read and write files inside the trial's sandbox, `terminal/*` runs
commands there (with output limits), and `session/request_permission` is answered by a
policy (allow by default). Every answer is about the sandbox, never the host.

`SessionCounters` folds session/update notifications into a handful of plain attributes
(tool calls by toolCallId, distinct tool titles, the last title, message and thought
chunks, the latest usage) that a display thread reads in O(1) without locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from acp import RequestError
from acp.schema import (
    AllowedOutcome,
    CreateTerminalResponse,
    DeniedOutcome,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from sandlot.errors import SandboxError
from sandlot.sandbox.base import Network, Sandbox, SandboxProcess

#: fs/read_text_file reads at most this much of a file (an error beyond it, not a cut).
MAX_READ_BYTES = 32 * 1024 * 1024
FS_TIMEOUT_SEC = 60.0
#: terminal output kept when the agent gives no outputByteLimit, and the most it may ask.
DEFAULT_TERMINAL_OUTPUT_BYTES = 1024 * 1024
MAX_TERMINAL_OUTPUT_BYTES = 16 * 1024 * 1024
MAX_TERMINALS = 32
TERMINAL_STOP_SEC = 3.0
FINAL_TEXT_CHARS = 100_000
TITLE_CHARS = 120

#: Permission policy -> the option kinds it picks, in order of preference.
ALLOW_KINDS = {"allow": ("allow_always", "allow_once"),
               "allow_once": ("allow_once", "allow_always"),
               "reject": ("reject_once", "reject_always")}


# -- counters -------------------------------------------------------------------------------


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def usage_dict(usage: Any) -> dict[str, int] | None:
    """ACP's PromptResponse.usage (camelCase, from the wire or a model) as sandlot's keys."""
    if usage is None:
        return None
    raw = usage.model_dump(by_alias=True) if hasattr(usage, "model_dump") else usage
    if not isinstance(raw, dict):
        return None
    read, write = _int(raw.get("cachedReadTokens")), _int(raw.get("cachedWriteTokens"))
    inp, out, total = (_int(raw.get("inputTokens")), _int(raw.get("outputTokens")),
                       _int(raw.get("totalTokens")))
    # sandlot counts cached tokens inside input (the gateway's convention). An agent whose
    # total adds the cache counts on top of input (claude-agent-acp) reports input without
    # them: add them back, so the self-report compares with the gateway's count.
    if (read or write) and total == inp + out + read + write:
        inp += read + write
    return {"input_tokens": inp, "output_tokens": out, "cache_read_tokens": read,
            "cache_write_tokens": write, "reasoning_tokens": _int(raw.get("thoughtTokens")),
            "total_tokens": total or inp + out}


@dataclass
class PromptStats:
    """One session/prompt: the task, or one repair feedback."""

    index: int
    message: str
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    stop_reason: str | None = None
    #: Session totals when the prompt began (its own counts are the differences).
    tool_calls_before: int = 0
    message_chunks_before: int = 0
    thought_chunks_before: int = 0
    tool_ids: list[str] = field(default_factory=list)
    tool_titles: list[str] = field(default_factory=list)
    tool_kinds: set[str] = field(default_factory=set)
    #: The agent's message text, one segment per run of chunks between tool calls.
    text: list[list[str]] = field(default_factory=list)
    text_chars: int = 0
    _new_segment: bool = True
    usage: dict[str, int] | None = None


class SessionCounters:
    """Counters of one ACP session, fed from session/update as the updates arrive.

    Written on the event loop only; every public attribute is an int, a str or None, so
    another thread reads any of them in O(1) (at worst one update old, never torn).
    `live` (sandlot.live.AgentLive) is fed too.
    """

    def __init__(self, live: Any = None) -> None:
        self.live = live
        self.tool_calls = 0
        self.distinct_tool_titles = 0
        self.last_tool_title: str | None = None
        self.message_chunks = 0
        self.thought_chunks = 0
        self.updates = 0
        self.permission_requests = 0
        self.permissions_denied = 0
        #: The latest usage_update: tokens in context, window size, cumulative cost.
        self.context_used: int | None = None
        self.context_size: int | None = None
        self.cost_amount: float | None = None
        self.cost_currency: str | None = None
        #: Sum of PromptResponse.usage over the prompts that reported one (None: none did).
        self.reported_tokens: int | None = None
        self.reported_usage: dict[str, int] | None = None
        self.update_kinds: dict[str, int] = {}
        self.client_calls: dict[str, int] = {}
        self.prompts: list[PromptStats] = []
        self._tool_ids: set[str] = set()
        self._titles: set[str] = set()

    @property
    def current(self) -> PromptStats | None:
        return self.prompts[-1] if self.prompts else None

    def begin_prompt(self, message: str) -> PromptStats:
        stats = PromptStats(index=len(self.prompts) + 1, message=message,
                            tool_calls_before=self.tool_calls,
                            message_chunks_before=self.message_chunks,
                            thought_chunks_before=self.thought_chunks)
        self.prompts.append(stats)
        return stats

    def client_call(self, method: str) -> None:
        self.client_calls[method] = self.client_calls.get(method, 0) + 1

    def observe(self, update: dict[str, Any]) -> None:
        """Fold one raw session/update `update` object in (camelCase keys, as on the wire)."""
        kind = str(update.get("sessionUpdate") or "unknown")
        self.updates += 1
        self.update_kinds[kind] = self.update_kinds.get(kind, 0) + 1
        prompt = self.current
        if kind in ("tool_call", "tool_call_update"):
            self._tool(update, prompt)
        elif kind == "agent_message_chunk":
            self.message_chunks += 1
            text = _text_of(update.get("content"))
            if prompt is not None and text:
                if prompt._new_segment or not prompt.text:
                    prompt.text.append([])
                    prompt._new_segment = False
                    prompt.text_chars = 0
                if prompt.text_chars < FINAL_TEXT_CHARS:
                    prompt.text[-1].append(text)
                    prompt.text_chars += len(text)
            if self.live is not None:
                self.live.chunk()
        elif kind == "agent_thought_chunk":
            self.thought_chunks += 1
            if self.live is not None:
                self.live.chunk()
        elif kind == "usage_update":
            self.context_used = _int(update.get("used"))
            self.context_size = _int(update.get("size"))
            cost = update.get("cost")
            if isinstance(cost, dict) and cost.get("amount") is not None:
                with contextlib.suppress(TypeError, ValueError):
                    self.cost_amount = float(cost["amount"])
                    self.cost_currency = str(cost.get("currency") or "USD")

    def _tool(self, update: dict[str, Any], prompt: PromptStats | None) -> None:
        call_id = str(update.get("toolCallId") or "")
        title = str(update.get("title") or "").strip()[:TITLE_CHARS]
        kind = update.get("kind")
        if prompt is not None:
            prompt._new_segment = True  # text after this call is a new message
            if kind:
                prompt.tool_kinds.add(str(kind))
        if title:
            if title not in self._titles:
                self._titles.add(title)
                self.distinct_tool_titles = len(self._titles)
                if prompt is not None and len(prompt.tool_titles) < 200:
                    prompt.tool_titles.append(title)
            self.last_tool_title = title
        if call_id and call_id not in self._tool_ids:
            self._tool_ids.add(call_id)
            self.tool_calls += 1
            if prompt is not None:
                prompt.tool_ids.append(call_id)
            if self.live is not None:
                self.live.tool_started(title or str(kind or "tool"))

    def prompt_finished(self, prompt: PromptStats, stop_reason: str | None,
                        usage: Any = None) -> None:
        prompt.stop_reason = stop_reason
        prompt.ended = time.monotonic()
        prompt.usage = usage_dict(usage)
        if prompt.usage is not None:
            total = dict(self.reported_usage or {})
            for key, value in prompt.usage.items():
                total[key] = total.get(key, 0) + value
            self.reported_usage = total
            self.reported_tokens = total["total_tokens"] or (
                total["input_tokens"] + total["output_tokens"])
            if self.live is not None:
                self.live.tokens_reported(self.reported_tokens)

    def snapshot(self) -> dict[str, Any]:
        """The session totals, for result.json and displays."""
        out: dict[str, Any] = {
            "tool_calls": self.tool_calls, "distinct_tool_titles": self.distinct_tool_titles,
            "last_tool_title": self.last_tool_title, "message_chunks": self.message_chunks,
            "thought_chunks": self.thought_chunks, "updates": self.updates,
            "update_kinds": dict(self.update_kinds),
            "permission_requests": self.permission_requests,
            "permissions_denied": self.permissions_denied,
            "client_calls": dict(self.client_calls)}
        if self.context_used is not None:
            out["context"] = {"used": self.context_used, "size": self.context_size}
        if self.cost_amount is not None:
            out["cost"] = {"amount": self.cost_amount, "currency": self.cost_currency}
        return out

    def prompt_metadata(self, prompt: PromptStats, final_chars: int = 2000) -> dict[str, Any]:
        """One prompt's summary: what goes into result.json agent_info and attempts."""
        end = prompt.ended if prompt.ended is not None else time.monotonic()
        text = "".join(prompt.text[-1]) if prompt.text else ""
        out: dict[str, Any] = {
            "done_reason": prompt.stop_reason, "prompt": prompt.index,
            "tool_calls": len(prompt.tool_ids), "tools_used": sorted(prompt.tool_kinds),
            "tool_titles": prompt.tool_titles[:50],
            "message_chunks": self.message_chunks - prompt.message_chunks_before,
            "thought_chunks": self.thought_chunks - prompt.thought_chunks_before,
            "final_response": text[-final_chars:],
            "generation_sec": round(end - prompt.started, 4),
            "self_reported_usage": (None if prompt.usage is None
                                    else {**prompt.usage, "source": "acp"}),
            "session": self.snapshot()}
        return out


def _text_of(content: Any) -> str:
    if isinstance(content, dict) and content.get("type") == "text":
        return str(content.get("text") or "")
    return ""


# -- terminals ------------------------------------------------------------------------------


class _Terminal:
    """One command started by terminal/create; stdout and stderr merged, tail kept."""

    def __init__(self, terminal_id: str, process: SandboxProcess, limit: int) -> None:
        self.id = terminal_id
        self.process = process
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.readers = [asyncio.ensure_future(self._read(process.stdout)),
                        asyncio.ensure_future(self._read(process.stderr))]

    async def _read(self, stream: Any) -> None:
        with contextlib.suppress(ConnectionError, OSError, ValueError):
            while chunk := await stream.read(65536):
                self.output += chunk
                if len(self.output) > self.limit:
                    cut = len(self.output) - self.limit
                    # Never start inside a UTF-8 character (continuation bytes 10xxxxxx).
                    while cut < len(self.output) and (self.output[cut] & 0xC0) == 0x80:
                        cut += 1
                    del self.output[:cut]
                    self.truncated = True

    def exit_status(self) -> TerminalExitStatus | None:
        code = self.process.returncode
        if code is None:
            return None
        if code < 0:
            with contextlib.suppress(ValueError):
                return TerminalExitStatus(exit_code=None, signal=signal.Signals(-code).name)
            return TerminalExitStatus(exit_code=None, signal=str(-code))
        return TerminalExitStatus(exit_code=code, signal=None)

    async def wait(self) -> TerminalExitStatus:
        await self.process.wait()
        await self.drain(5.0)
        status = self.exit_status()
        assert status is not None
        return status

    async def drain(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.gather(*self.readers), seconds)

    async def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(Exception):
                await self.process.kill()
            with contextlib.suppress(TimeoutError, Exception):
                await asyncio.wait_for(self.process.wait(), TERMINAL_STOP_SEC)
        await self.drain(1.0)
        for reader in self.readers:
            reader.cancel()


# -- the client -----------------------------------------------------------------------------


class SandboxClient:
    """What an ACP agent's client must serve, served inside the trial's sandbox.

    Methods follow the SDK's `acp.Client` protocol (snake_case, keyword arguments) and
    answer with its response models. Failures are JSON-RPC errors to the agent
    (RequestError), never exceptions into sandlot: a bad path is the agent's problem.
    """

    def __init__(self, sandbox: Sandbox, workdir: str, network: Network,
                 counters: SessionCounters, permission: str = "allow",
                 env: dict[str, str] | None = None) -> None:
        if permission not in ALLOW_KINDS:
            raise ValueError(f"permission policy must be one of {', '.join(ALLOW_KINDS)}")
        self.sandbox = sandbox
        self.workdir = workdir
        self.network = network
        self.counters = counters
        self.permission = permission
        self.env = dict(env or {})
        self.terminals: dict[str, _Terminal] = {}
        self._ids = itertools.count(1)
        self._closed = False

    def _path(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise RequestError.invalid_params({"path": "a file path is required"})
        # The protocol wants absolute paths; a relative one is taken from the workdir.
        return path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"

    # -- session --------------------------------------------------------------------------

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        """Counted in the transport, as the update arrived (see acp_wire)."""
        return None

    async def request_permission(self, session_id: str, tool_call: ToolCallUpdate,
                                 options: list[PermissionOption],
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.counters.client_call("session/request_permission")
        self.counters.permission_requests += 1
        by_kind: dict[str, PermissionOption] = {}
        for option in options:
            by_kind.setdefault(str(option.kind), option)
        for kind in ALLOW_KINDS[self.permission]:
            if kind in by_kind:
                if kind.startswith("reject"):
                    self.counters.permissions_denied += 1
                return RequestPermissionResponse(
                    outcome=AllowedOutcome(outcome="selected", option_id=by_kind[kind].option_id))
        if self.permission != "reject" and options:  # no kind we know: take the first
            return RequestPermissionResponse(
                outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id))
        self.counters.permissions_denied += 1
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    # -- fs -------------------------------------------------------------------------------

    async def read_text_file(self, session_id: str, path: str, line: int | None = None,
                             limit: int | None = None, **kwargs: Any) -> ReadTextFileResponse:
        self.counters.client_call("fs/read_text_file")
        target = self._path(path)
        try:
            result = await self.sandbox.exec(["cat", "--", target], timeout_sec=FS_TIMEOUT_SEC,
                                             max_output_bytes=MAX_READ_BYTES)
        except SandboxError as exc:
            raise RequestError.internal_error({"details": f"sandbox: {exc}"}) from None
        if result.exit_code != 0:
            err = result.stderr.strip()
            if "No such file" in err:
                raise RequestError.resource_not_found(target)
            raise RequestError.internal_error({"path": target, "details": err[-500:]
                                               or f"cat exited {result.exit_code}"})
        if result.truncated:
            raise RequestError.internal_error({"path": target, "details": (
                f"the file is larger than {MAX_READ_BYTES} bytes; read it with line/limit "
                "or a command")})
        content = result.stdout
        if line is not None or limit is not None:
            lines = content.splitlines(keepends=True)
            start = max(0, (line or 1) - 1)
            end = None if limit is None else start + max(0, limit)
            content = "".join(lines[start:end])
        return ReadTextFileResponse(content=content)

    async def write_text_file(self, session_id: str, path: str, content: str,
                              **kwargs: Any) -> WriteTextFileResponse:
        self.counters.client_call("fs/write_text_file")
        target = self._path(path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        try:
            result = await self.sandbox.exec(["sh", "-c", script, "sh", target],
                                             stdin=content.encode(), timeout_sec=FS_TIMEOUT_SEC)
        except SandboxError as exc:
            raise RequestError.internal_error({"details": f"sandbox: {exc}"}) from None
        if result.exit_code != 0:
            raise RequestError.internal_error({"path": target, "details": result.stderr.strip()
                                               [-500:] or f"exit {result.exit_code}"})
        return WriteTextFileResponse()

    # -- terminals ------------------------------------------------------------------------

    def _terminal(self, terminal_id: str) -> _Terminal:
        terminal = self.terminals.get(terminal_id)
        if terminal is None:
            raise RequestError.invalid_params({"terminalId": f"unknown terminal {terminal_id!r}"})
        return terminal

    async def create_terminal(self, session_id: str, command: str,
                              args: list[str] | None = None,
                              env: list[EnvVariable] | None = None, cwd: str | None = None,
                              output_byte_limit: int | None = None,
                              **kwargs: Any) -> CreateTerminalResponse:
        """Start `command` in the sandbox: argv [command, *args], or with no args a shell
        command line (`bash -c command`), as editors run it."""
        self.counters.client_call("terminal/create")
        if self._closed:
            raise RequestError.internal_error({"details": "the session is closing"})
        if len(self.terminals) >= MAX_TERMINALS:
            raise RequestError.internal_error({"details": f"at most {MAX_TERMINALS} terminals "
                                               "at once: release some first"})
        argv = [command, *args] if args else ["bash", "-c", command]
        extra = {**self.env, **{v.name: v.value for v in env or []}}
        limit = DEFAULT_TERMINAL_OUTPUT_BYTES if output_byte_limit is None else min(
            max(0, output_byte_limit), MAX_TERMINAL_OUTPUT_BYTES)
        try:
            process = await self.sandbox.start_process(
                argv, env=extra, cwd=self._path(cwd) if cwd else self.workdir,
                network=self.network)
        except SandboxError as exc:
            raise RequestError.internal_error({"details": f"cannot start {command!r}: {exc}"}
                                              ) from None
        with contextlib.suppress(Exception):
            process.stdin.close()  # nobody types into it
        terminal = _Terminal(f"term-{next(self._ids)}", process, limit)
        self.terminals[terminal.id] = terminal
        return CreateTerminalResponse(terminal_id=terminal.id)

    async def terminal_output(self, session_id: str, terminal_id: str,
                              **kwargs: Any) -> TerminalOutputResponse:
        self.counters.client_call("terminal/output")
        terminal = self._terminal(terminal_id)
        status = terminal.exit_status()
        if status is not None:  # exited: include everything it wrote before
            await terminal.drain(2.0)
        return TerminalOutputResponse(output=terminal.output.decode(errors="replace"),
                                      truncated=terminal.truncated, exit_status=status)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str,
                                     **kwargs: Any) -> WaitForTerminalExitResponse:
        self.counters.client_call("terminal/wait_for_exit")
        status = await self._terminal(terminal_id).wait()
        return WaitForTerminalExitResponse(exit_code=status.exit_code, signal=status.signal)

    async def kill_terminal(self, session_id: str, terminal_id: str,
                            **kwargs: Any) -> KillTerminalResponse:
        self.counters.client_call("terminal/kill")
        await self._terminal(terminal_id).kill()
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str,
                               **kwargs: Any) -> ReleaseTerminalResponse:
        self.counters.client_call("terminal/release")
        terminal = self._terminal(terminal_id)
        del self.terminals[terminal_id]
        await terminal.kill()
        return ReleaseTerminalResponse()

    # -- extensions -----------------------------------------------------------------------

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.counters.client_call(f"_{method}")
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.counters.client_call(f"_{method}")

    async def close(self) -> None:
        """Kill every terminal still there (bounded); later terminal/create calls fail."""
        self._closed = True
        terminals, self.terminals = list(self.terminals.values()), {}
        if terminals:
            await asyncio.gather(*(t.kill() for t in terminals), return_exceptions=True)
