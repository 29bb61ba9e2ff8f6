"""Driving Pi's RPC mode: JSON lines on stdio, responses matched by id, events normalised.

Pi (`pi --mode rpc`) reads one JSON command per line on stdin and writes responses
(`{"type": "response", "id": ...}`) and events (no id) on stdout. `PiRpc` owns that
conversation for one Pi process; `PromptTrace` turns one prompt's events into the trial's
agent trace (final response, thinking, turns with usage and timing, tool calls).

When is a prompt over? Pi has no "settled" event: after `agent_end` it may auto-retry a
failed model call (rate limit, 5xx) or compact the context and run again. sandlot turns
Pi's auto-retry off (`retry.enabled: false` in settings.json and `set_auto_retry` at
start) and lets the gateway retry instead, because the gateway is the one place that sees
every attempt: it retries with backoff below the agent, records each retried error in
llm_trajectory.jsonl, and its token counts stay the trusted ones; two retry layers would
stack their backoffs inside the agent's time budget and hide the errors in Pi's session.
Compaction stays on (it is how stock Pi survives long tasks), so `agent_end` alone does
not settle a prompt: it is settled when no run, compaction or re-run is pending by the
events seen, and `get_state` confirms Pi is idle (not streaming, not compacting, nothing
queued). Then `get_session_stats` and `get_last_assistant_text` reconcile the trace with
Pi's own accounting.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sandlot.sandbox.base import SandboxProcess

TOOL_OUTPUT_TAIL_CHARS = 4000
STDERR_TAIL_BYTES = 16 * 1024
REQUEST_TIMEOUT_SEC = 15.0
IDLE_POLL_SEC = 0.05
#: Pi's stopReason -> the trace's done reason (timeout and cancelled are sandlot's own).
DONE_REASONS = {"stop": "stop", "toolUse": "stop", "length": "length", "error": "error",
                "aborted": "aborted"}
DIALOG_METHODS = frozenset({"select", "confirm", "input", "editor"})

#: progress(kind, delta): kind is "text" or "thinking"; called as the deltas stream.
ProgressCallback = Callable[[str, str], None]


class PiRpcError(Exception):
    """Pi answered a command with success: false, or did not answer in time."""


class PiExited(PiRpcError):
    """Pi's stdout closed: the process is gone (or about to be)."""


def _blocks(message: Any, kind: str, key: str) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content if kind == "text" else ""
    if not isinstance(content, list):
        return ""
    return "".join(str(b.get(key) or "") for b in content
                   if isinstance(b, dict) and b.get("type") == kind)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _tail(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[-limit:], True)


@dataclass
class Usage:
    """Token counts; input includes cache reads and writes (the gateway's convention)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @classmethod
    def from_pi(cls, raw: Any) -> Usage:
        """Pi's `usage` ({input, output, cacheRead, cacheWrite}; input excludes cache)."""
        raw = raw if isinstance(raw, dict) else {}
        read, write = _int(raw.get("cacheRead")), _int(raw.get("cacheWrite"))
        return cls(_int(raw.get("input")) + read + write, _int(raw.get("output")), read, write)

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.cache_read_tokens + other.cache_read_tokens,
                     self.cache_write_tokens + other.cache_write_tokens)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens - other.input_tokens,
                     self.output_tokens - other.output_tokens,
                     self.cache_read_tokens - other.cache_read_tokens,
                     self.cache_write_tokens - other.cache_write_tokens)

    def negative(self) -> bool:
        return min(self.input_tokens, self.output_tokens, self.cache_read_tokens,
                   self.cache_write_tokens) < 0

    def as_dict(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens,
                "total_tokens": self.input_tokens + self.output_tokens}


@dataclass
class TurnRecord:
    """One assistant message: its usage, why it stopped, and how long it took."""

    index: int
    stop_reason: str
    usage: Usage
    #: From the request (turn start) to the first streamed delta.
    ttft_sec: float | None
    #: From the request to the message's end: model time as the agent waited for it.
    generation_sec: float
    #: From the first delta to the end: the streaming (decode) part only.
    streaming_sec: float
    tool_calls: int
    error_message: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "stop_reason": self.stop_reason,
                               **self.usage.as_dict(), "tool_calls": self.tool_calls,
                               "ttft_sec": None if self.ttft_sec is None
                               else round(self.ttft_sec, 4),
                               "generation_sec": round(self.generation_sec, 4)}
        if self.error_message:
            out["error_message"] = self.error_message
        return out


@dataclass
class ToolRecord:
    call_id: str
    name: str
    arguments: Any
    started_sec: float
    duration_sec: float | None = None
    is_error: bool | None = None
    output: str = ""
    output_chars: int = 0
    truncated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments,
                "started_sec": round(self.started_sec, 4),
                "duration_sec": None if self.duration_sec is None
                else round(self.duration_sec, 4),
                "finished": self.duration_sec is not None, "is_error": self.is_error,
                "output": self.output, "output_chars": self.output_chars,
                "truncated": self.truncated}


@dataclass
class PromptTrace:
    """Everything one prompt (the task, or one repair feedback) made Pi do."""

    index: int
    message: str
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    final_response: str = ""
    thinking: list[str] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    tools: list[ToolRecord] = field(default_factory=list)
    tool_calls_started: int = 0
    error_message: str | None = None
    #: "timeout", "cancelled" or "max_turns" when sandlot stopped the prompt; else the
    #: last turn's reason.
    forced_reason: str | None = None
    agent_runs: int = 0
    compactions: int = 0
    auto_retries: int = 0
    notes: list[str] = field(default_factory=list)
    #: Pi's own totals (get_session_stats) for this prompt, when it answered.
    session_usage: Usage | None = None
    session_stats: dict[str, Any] | None = None
    # Settling state, from the events seen so far.
    running: bool = False
    compacting: bool = False
    rerun_expected: bool = False
    ended_once: bool = False
    _turn_started: float | None = None
    _first_delta: float | None = None
    _streamed_text: list[str] = field(default_factory=list)
    _streamed_thinking: list[str] = field(default_factory=list)
    _active: dict[str, ToolRecord] = field(default_factory=dict)

    # -- events -------------------------------------------------------------------------

    def handle(self, event: dict[str, Any], now: float | None = None) -> tuple[str, str] | None:
        """Fold one event in; returns a ("text" | "thinking", delta) to stream, if any."""
        now = time.monotonic() if now is None else now
        kind = event.get("type")
        if kind == "agent_start":
            self.agent_runs += 1
            self.running, self.rerun_expected = True, False
        elif kind == "agent_end":
            self.running, self.ended_once = False, True
        elif kind == "turn_start":
            self._turn_started, self._first_delta = now, None
        elif kind == "message_start":
            message = event.get("message") or {}
            if message.get("role") == "assistant":
                if self._turn_started is None:
                    self._turn_started = now
                self._streamed_text.clear()
                self._streamed_thinking.clear()
        elif kind == "message_update":
            return self._delta(event.get("assistantMessageEvent") or {}, now)
        elif kind == "message_end":
            message = event.get("message") or {}
            if message.get("role") == "assistant":
                self._assistant_end(message, now)
        elif kind == "tool_execution_start":
            self._tool_start(event, now)
        elif kind == "tool_execution_end":
            self._tool_end(event, now)
        elif kind == "compaction_start":
            self.compactions += 1
            self.compacting = True
        elif kind == "compaction_end":
            self.compacting = False
            self.rerun_expected = bool(event.get("willRetry"))
            if event.get("errorMessage"):
                self.notes.append(f"compaction: {event['errorMessage']}")
        elif kind == "auto_retry_start":
            self.auto_retries += 1
            self.rerun_expected = True
        elif kind == "auto_retry_end":
            if not event.get("success"):
                self.rerun_expected = False
        elif kind == "extension_error":
            self.notes.append(f"extension error: {event.get('error')}")
        return None

    def _delta(self, update: dict[str, Any], now: float) -> tuple[str, str] | None:
        kind = update.get("type")
        if kind in ("text_delta", "thinking_delta", "toolcall_delta") and self._first_delta is None:
            self._first_delta = now
        delta = str(update.get("delta") or "")
        if kind == "text_delta" and delta:
            self._streamed_text.append(delta)
            return "text", delta
        if kind == "thinking_delta" and delta:
            self._streamed_thinking.append(delta)
            return "thinking", delta
        return None

    def _assistant_end(self, message: dict[str, Any], now: float) -> None:
        started = self._turn_started if self._turn_started is not None else now
        first = self._first_delta
        stop = str(message.get("stopReason") or "stop")
        content = message.get("content")
        n_calls = sum(1 for b in content if isinstance(b, dict) and b.get("type") == "toolCall"
                      ) if isinstance(content, list) else 0
        error = message.get("errorMessage")
        self.turns.append(TurnRecord(
            index=len(self.turns) + 1, stop_reason=stop, usage=Usage.from_pi(message.get("usage")),
            ttft_sec=None if first is None else first - started,
            generation_sec=max(0.0, now - started),
            streaming_sec=0.0 if first is None else max(0.0, now - first),
            tool_calls=n_calls, error_message=str(error) if error else None))
        if error:
            self.error_message = str(error)
        text = _blocks(message, "text", "text") or "".join(self._streamed_text)
        if text:
            self.final_response = text
        thinking = _blocks(message, "thinking", "thinking") or "".join(self._streamed_thinking)
        if thinking:
            self.thinking.append(thinking)
        self._streamed_text.clear()
        self._streamed_thinking.clear()
        self._turn_started = self._first_delta = None

    def _tool_start(self, event: dict[str, Any], now: float) -> None:
        self.tool_calls_started += 1
        call_id = str(event.get("toolCallId") or f"unnamed-{self.tool_calls_started}")
        record = ToolRecord(call_id, str(event.get("toolName") or ""), event.get("args"),
                            started_sec=now - self.started)
        self._active[call_id] = record
        self.tools.append(record)

    def _tool_end(self, event: dict[str, Any], now: float) -> None:
        call_id = str(event.get("toolCallId") or "")
        record = self._active.pop(call_id, None)
        if record is None:  # an end without a start: keep what it says
            record = ToolRecord(call_id, str(event.get("toolName") or ""), None,
                                started_sec=now - self.started)
            self.tools.append(record)
        else:
            record.duration_sec = now - self.started - record.started_sec
        record.is_error = bool(event.get("isError"))
        output = _blocks(event.get("result"), "text", "text")
        record.output_chars = len(output)
        record.output, record.truncated = _tail(output, TOOL_OUTPUT_TAIL_CHARS)

    # -- settling and reconciling ---------------------------------------------------------

    @property
    def looks_idle(self) -> bool:
        """By the events alone: a run ended and nothing (compaction, re-run) is pending."""
        return (self.ended_once and not self.running and not self.compacting
                and not self.rerun_expected)

    def reconcile(self, stats: dict[str, Any] | None, before: Usage | None,
                  last_text: str | None) -> None:
        """Fold in get_session_stats (cumulative, so minus `before`) and the last text."""
        if last_text:
            self.final_response = last_text
        if stats is None:
            return
        self.session_stats = stats
        tokens = stats.get("tokens")
        if isinstance(tokens, dict) and before is not None:
            delta = Usage.from_pi(tokens) - before
            if delta.negative():  # compaction can drop counted messages: keep the events'
                self.notes.append("session stats went down (compaction?); usage from events")
            else:
                self.session_usage = delta
                if delta != self.event_usage:
                    self.notes.append(f"events counted {self.event_usage.as_dict()}, "
                                      f"session stats {delta.as_dict()}")

    def finish(self, forced_reason: str | None = None) -> None:
        if forced_reason is not None and self.forced_reason is None:
            self.forced_reason = forced_reason
        if self.ended is None:
            self.ended = time.monotonic()

    # -- what it adds up to ---------------------------------------------------------------

    @property
    def event_usage(self) -> Usage:
        total = Usage()
        for turn in self.turns:
            total = total + turn.usage
        return total

    @property
    def self_reported_usage(self) -> Usage:
        """Pi's own count: its session stats when it answered, else the messages' usage."""
        return self.session_usage if self.session_usage is not None else self.event_usage

    @property
    def done_reason(self) -> str:
        if self.forced_reason is not None:
            return self.forced_reason
        if not self.turns:
            return "error" if self.ended_once else "stop"
        return DONE_REASONS.get(self.turns[-1].stop_reason, self.turns[-1].stop_reason)

    @property
    def generation_sec(self) -> float:
        return sum(t.generation_sec for t in self.turns)

    @property
    def output_tokens_per_sec(self) -> float | None:
        """Output tokens over the time they streamed (first delta to end, summed)."""
        streaming = sum(t.streaming_sec for t in self.turns)
        output = sum(t.usage.output_tokens for t in self.turns)
        return round(output / streaming, 2) if streaming > 0 and output else None

    @property
    def ttft_sec(self) -> float | None:
        """Time to first token of the prompt's first model answer."""
        for turn in self.turns:
            if turn.ttft_sec is not None:
                return round(turn.ttft_sec, 4)
        return None

    @property
    def tools_used(self) -> list[str]:
        return sorted({t.name for t in self.tools if t.name})

    def metadata(self, final_chars: int = 2000) -> dict[str, Any]:
        """The compact summary that goes into result.json (agent_info / attempts)."""
        return {"turns": len(self.turns), "tool_calls": self.tool_calls_started,
                "tools_used": self.tools_used, "done_reason": self.done_reason,
                "generation_sec": round(self.generation_sec, 4),
                "output_tokens_per_sec": self.output_tokens_per_sec,
                "ttft_sec": self.ttft_sec,
                "final_response": self.final_response[-final_chars:],
                "self_reported_usage": {**self.self_reported_usage.as_dict(), "source": "pi"},
                **({"error_message": self.error_message} if self.error_message else {})}

    def as_dict(self) -> dict[str, Any]:
        end = self.ended if self.ended is not None else time.monotonic()
        return {"index": self.index, "message": self.message,
                **self.metadata(final_chars=1_000_000),
                "duration_sec": round(end - self.started, 4),
                "thinking": self.thinking, "turn_log": [t.as_dict() for t in self.turns],
                "tool_trace": [t.as_dict() for t in self.tools],
                "event_usage": self.event_usage.as_dict(),
                "session_stats": self.session_stats, "agent_runs": self.agent_runs,
                "compactions": self.compactions, "auto_retries": self.auto_retries,
                "notes": self.notes}


class PiRpc:
    """One Pi process in RPC mode: commands out, responses and events in.

    Contract: `start` before anything; `prompt` sends a user message and returns when Pi
    is settled (the caller bounds it with a timeout); `abort` asks Pi to stop and waits
    a bounded time for it to settle; `stop` ends the process (stdin closed, then
    terminate, then kill, each bounded) and is safe to call twice.
    Raises: PiExited when Pi's stdout closes mid-conversation, PiRpcError when a command
    fails or gets no answer.
    """

    def __init__(self, process: SandboxProcess, *, events_path: Path | None = None,
                 on_progress: ProgressCallback | None = None,
                 on_change: Callable[[], None] | None = None,
                 on_event: Callable[[dict[str, Any], PromptTrace], None] | None = None,
                 ) -> None:
        self.process = process
        self.on_progress = on_progress
        self.on_change = on_change
        self.on_event = on_event
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._ids = itertools.count(1)
        self._stderr = bytearray()
        self._readers: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self._eof = False
        self._t0 = time.monotonic()
        self._log: IO[str] | None = events_path.open("a") if events_path else None
        self._session_before = Usage()
        self._stopped = False

    # -- plumbing ------------------------------------------------------------------------

    def start(self) -> None:
        self._readers = [asyncio.ensure_future(self._read_stdout()),
                         asyncio.ensure_future(self._read_stderr())]

    @property
    def stderr_tail(self) -> str:
        return bytes(self._stderr).decode(errors="replace")

    @property
    def exited(self) -> bool:
        return self._eof

    def _record(self, entry: dict[str, Any]) -> None:
        if self._log is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._log.write(json.dumps(entry, separators=(",", ":")) + "\n")
            self._log.flush()

    async def _read_stdout(self) -> None:
        stream = self.process.stdout
        try:
            while True:
                try:
                    line = await stream.readline()  # splits on b"\n" only
                except ValueError:  # one line over the stream limit: dropped
                    self._record({"sandlot": "line over the stream limit dropped"})
                    continue
                if not line:
                    break
                self._dispatch(line)
        except (ConnectionError, OSError):
            pass
        finally:
            self._eof = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(PiExited("Pi exited"))
            self._events.put_nowait(None)

    async def _read_stderr(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await self.process.stderr.read(4096):
                self._stderr += chunk
                if len(self._stderr) > STDERR_TAIL_BYTES:
                    del self._stderr[:-STDERR_TAIL_BYTES]

    def _dispatch(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
        if not text.strip():
            return
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        received = round(time.monotonic() - self._t0, 4)
        if not isinstance(message, dict):
            self._record({"received_sec": received, "sandlot": "not a JSON object",
                          "line": text[:2000]})
            return
        self._record({"received_sec": received, **_slim(message)})
        if message.get("type") == "response":
            future = self._pending.pop(str(message.get("id")), None)
            if future is not None and not future.done():
                future.set_result(message)
            return
        if message.get("type") == "extension_ui_request":
            if message.get("method") in DIALOG_METHODS:  # nobody to ask: dismiss it
                task = asyncio.ensure_future(self._send_quietly(
                    {"type": "extension_ui_response", "id": message.get("id"),
                     "cancelled": True}))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return
        self._events.put_nowait(message)

    async def _send_quietly(self, command: dict[str, Any]) -> None:
        with contextlib.suppress(PiRpcError):
            await self.send(command)

    async def send(self, command: dict[str, Any]) -> None:
        stdin = self.process.stdin
        if self._eof or stdin is None or stdin.is_closing():
            raise PiExited("Pi's stdin is closed")
        self._record({"sent_sec": round(time.monotonic() - self._t0, 4), "command": command})
        try:
            stdin.write((json.dumps(command) + "\n").encode())
            async with asyncio.timeout(REQUEST_TIMEOUT_SEC):
                await stdin.drain()
        except (ConnectionError, OSError) as exc:
            raise PiExited(f"cannot write to Pi: {exc}") from exc
        except TimeoutError:
            raise PiRpcError("Pi stopped reading its stdin") from None

    async def request(self, kind: str, *, timeout_sec: float = REQUEST_TIMEOUT_SEC,
                      **fields: Any) -> dict[str, Any]:
        """Send a command with an id and return its response's `data`."""
        command_id = f"sandlot-{next(self._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[command_id] = future
        try:
            await self.send({"id": command_id, "type": kind, **fields})
            async with asyncio.timeout(timeout_sec):
                response = await future
        except TimeoutError:
            raise PiRpcError(f"Pi did not answer {kind!r} within {timeout_sec:g}s") from None
        finally:
            self._pending.pop(command_id, None)
        if not response.get("success"):
            raise PiRpcError(f"{kind} failed: {response.get('error') or 'no reason given'}")
        data = response.get("data")
        return data if isinstance(data, dict) else {}

    # -- conversation ----------------------------------------------------------------------

    async def configure(self, startup_sec: float = 60.0) -> None:
        """Once after start: no auto-retry (see the module docstring); a first stats base.
        The first answer may take `startup_sec` (node loading Pi)."""
        await self.request("set_auto_retry", enabled=False, timeout_sec=startup_sec)
        stats = await self.request("get_session_stats")
        self._session_before = Usage.from_pi(stats.get("tokens"))

    async def prompt(self, trace: PromptTrace, max_turns: int | None = None) -> None:
        """Send `trace.message` as a user prompt; return once Pi is settled.

        With `max_turns`, the run is aborted once that many model answers asked for
        tools (done reason "max_turns"); Pi has no such limit of its own.
        """
        await self.request("prompt", message=trace.message)
        await self._until_settled(trace, max_turns)

    async def reconcile(self, trace: PromptTrace) -> None:
        """Fold Pi's session stats and last text into the trace (bounded, best effort)."""
        stats: dict[str, Any] | None = None
        last: str | None = None
        try:
            stats = await self.request("get_session_stats", timeout_sec=5)
            answer = await self.request("get_last_assistant_text", timeout_sec=5)
            last = answer.get("text") if isinstance(answer.get("text"), str) else None
        except PiRpcError as exc:
            trace.notes.append(f"reconcile: {exc}")
        trace.reconcile(stats, self._session_before, last)
        if stats is not None and isinstance(stats.get("tokens"), dict):
            self._session_before = Usage.from_pi(stats["tokens"])

    async def abort(self, trace: PromptTrace, wait_sec: float) -> bool:
        """Ask Pi to stop whatever runs and wait up to `wait_sec` until it is idle."""
        if self._eof:
            return False
        try:
            async with asyncio.timeout(wait_sec):
                await self.request("abort", timeout_sec=wait_sec)
                while True:
                    state = await self.request("get_state", timeout_sec=wait_sec)
                    self._drain(trace)
                    if not (state.get("isStreaming") or state.get("isCompacting")):
                        return True
                    await asyncio.sleep(IDLE_POLL_SEC * 2)
        except (TimeoutError, PiRpcError):
            return False

    async def _next_event(self) -> dict[str, Any]:
        event = await self._events.get()
        if event is None:
            self._events.put_nowait(None)  # stay at EOF for later readers
            raise PiExited("Pi exited")
        return event

    def _handle(self, trace: PromptTrace, event: dict[str, Any]) -> None:
        streamed = trace.handle(event)
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(event, trace)
        if streamed is not None and self.on_progress is not None:
            with contextlib.suppress(Exception):
                self.on_progress(*streamed)
        if self.on_change is not None and event.get("type") in (
                "message_end", "tool_execution_end", "agent_end"):
            with contextlib.suppress(Exception):
                self.on_change()

    def _drain(self, trace: PromptTrace) -> None:
        """Handle the events already received (all that came before a response)."""
        while not self._events.empty():
            event = self._events.get_nowait()
            if event is None:
                self._events.put_nowait(None)
                return
            self._handle(trace, event)

    async def _until_settled(self, trace: PromptTrace, max_turns: int | None = None) -> None:
        while True:
            event = await self._next_event()
            self._handle(trace, event)
            if (max_turns is not None and trace.forced_reason is None
                    and event.get("type") == "message_end" and len(trace.turns) >= max_turns
                    and trace.turns[-1].stop_reason == "toolUse"):
                trace.forced_reason = "max_turns"
                await self.send({"type": "abort"})
            if trace.looks_idle and await self._confirm_idle(trace):
                return

    async def _confirm_idle(self, trace: PromptTrace) -> bool:
        """get_state, then the events that came before its answer, until both agree."""
        while True:
            state = await self.request("get_state")
            self._drain(trace)
            if not trace.looks_idle:
                return False
            if not (state.get("isStreaming") or state.get("isCompacting")
                    or state.get("pendingMessageCount")):
                return True
            await asyncio.sleep(IDLE_POLL_SEC)

    # -- shutdown --------------------------------------------------------------------------

    async def stop(self, grace_sec: float = 3.0) -> None:
        """Close stdin (Pi exits on EOF), then terminate, then kill; each wait bounded."""
        if self._stopped:
            return
        self._stopped = True
        proc = self.process
        try:
            if proc.returncode is None:
                with contextlib.suppress(Exception):
                    proc.stdin.close()
                if not await _exited_within(proc, grace_sec):
                    await proc.terminate()
                    if not await _exited_within(proc, grace_sec):
                        await proc.kill()
                        await _exited_within(proc, grace_sec)
        finally:
            for reader in self._readers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(reader, grace_sec)
            if self._log is not None:
                self._log.close()
                self._log = None


async def _exited_within(proc: SandboxProcess, seconds: float) -> bool:
    try:
        await asyncio.wait_for(proc.wait(), seconds)
        return True
    except TimeoutError:
        return False


def _slim(message: dict[str, Any]) -> dict[str, Any]:
    """An event as logged: message_update without its growing partial-message snapshots
    (they repeat the whole message on every delta, which would make the log quadratic)."""
    if message.get("type") != "message_update":
        return message
    update = dict(message.get("assistantMessageEvent") or {})
    update.pop("partial", None)
    return {"type": "message_update", "assistantMessageEvent": update}
