"""Pi's RPC driver without Pi: recorded event lines replayed through a fake process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandlot.agents.pi import models_config, pi_command
from sandlot.agents.pi_rpc import (
    STDERR_TAIL_BYTES,
    TOOL_OUTPUT_TAIL_CHARS,
    PiExited,
    PiRpc,
    PromptTrace,
    Usage,
)

RECORDING = Path(__file__).parent / "data" / "pi_shell_echo_events.jsonl"


def _recording() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RECORDING.read_text().splitlines()]


def _assistant(stop: str = "stop", text: str = "", usage: dict | None = None,
               error: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "stopReason": stop,
                               "content": [{"type": "text", "text": text}] if text else [],
                               "usage": usage or {"input": 10, "output": 5}}
    if error:
        message["errorMessage"] = error
    return message


def _run_events(trace: PromptTrace, events: list[dict[str, Any]]) -> None:
    for i, event in enumerate(events):
        trace.handle(event, now=trace.started + i * 0.1)


class FakeStdin:
    def __init__(self, pi: FakePi) -> None:
        self.pi = pi
        self.closed = False
        self._buffer = b""

    def write(self, data: bytes) -> None:
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            command = json.loads(line)
            self.pi.commands.append(command)
            self.pi.on_command(self.pi, command)

    async def drain(self) -> None:
        await asyncio.sleep(0)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True
        if self.pi.exits_on_eof:
            self.pi.exit(0)


class FakePi:
    """A SandboxProcess whose stdout is written by `on_command(pi, command)`."""

    def __init__(self, on_command: Callable[[FakePi, dict[str, Any]], None],
                 exits_on_eof: bool = True) -> None:
        self.stdout = asyncio.StreamReader()
        self.stderr = asyncio.StreamReader()
        self.stdin = FakeStdin(self)
        self.on_command = on_command
        self.exits_on_eof = exits_on_eof
        self.commands: list[dict[str, Any]] = []
        self.signals: list[str] = []
        self.returncode: int | None = None
        self._done = asyncio.Event()

    def emit(self, message: dict[str, Any] | bytes) -> None:
        raw = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.stdout.feed_data(raw)

    def respond(self, command: dict[str, Any], data: Any = None, success: bool = True,
                error: str | None = None) -> None:
        reply: dict[str, Any] = {"id": command.get("id"), "type": "response",
                                 "command": command["type"], "success": success}
        if data is not None:
            reply["data"] = data
        if error:
            reply["error"] = error
        self.emit(reply)

    def exit(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self.stdout.feed_eof()
            self.stderr.feed_eof()
            self._done.set()

    async def wait(self) -> int:
        await self._done.wait()
        assert self.returncode is not None
        return self.returncode

    async def terminate(self) -> None:
        self.signals.append("terminate")

    async def kill(self) -> None:
        self.signals.append("kill")
        self.exit(-9)

    def limit_hit(self) -> None:
        return None


def _replay_pi(recording: list[dict[str, Any]]) -> Callable[[FakePi, dict[str, Any]], None]:
    """Answers the n-th command with what Pi printed between it and the next command."""
    chunks: list[list[dict[str, Any]]] = []
    for entry in recording:
        if "sent_sec" in entry:
            chunks.append([])
        elif chunks:
            chunks[-1].append({k: v for k, v in entry.items() if k != "received_sec"})

    def on_command(pi: FakePi, command: dict[str, Any]) -> None:
        for message in chunks[len(pi.commands) - 1]:
            pi.emit(message)

    return on_command


def test_a_recorded_pi_run_replays_into_the_same_conversation_and_trace(tmp_path):
    recording = _recording()
    sent = [e["command"] for e in recording if "sent_sec" in e]

    async def main() -> tuple[FakePi, PromptTrace, list[tuple[str, str]]]:
        streamed: list[tuple[str, str]] = []
        pi = FakePi(_replay_pi(recording))
        rpc = PiRpc(pi, events_path=tmp_path / "events.jsonl",
                    on_progress=lambda kind, delta: streamed.append((kind, delta)))
        rpc.start()
        await rpc.configure()
        trace = PromptTrace(index=1, message=sent[2]["message"])
        await asyncio.wait_for(rpc.prompt(trace), 5)
        await rpc.reconcile(trace)
        await rpc.stop(grace_sec=1)
        return pi, trace, streamed

    pi, trace, streamed = asyncio.run(main())
    # Same commands, same ids, same order as the real run: set_auto_retry, stats,
    # prompt, then get_state (settling), then stats and last text (reconciling).
    assert pi.commands == sent
    assert [c["type"] for c in sent] == ["set_auto_retry", "get_session_stats", "prompt",
                                         "get_state", "get_session_stats",
                                         "get_last_assistant_text"]
    assert trace.final_response == "The command printed the marker."
    assert trace.thinking == ["Check where we are."]
    assert [t.stop_reason for t in trace.turns] == ["toolUse", "stop"]
    assert trace.turns[1].usage == Usage(1663, 7, 0, 0)
    assert trace.done_reason == "stop" and trace.agent_runs == 1
    (tool,) = trace.tools
    assert tool.name == "bash" and tool.arguments == {"command": "pwd && echo sandlot-scripted-ok"}
    assert tool.output == "/app\nsandlot-scripted-ok\n" and tool.is_error is False
    assert tool.duration_sec is not None and not tool.truncated
    # Pi's session stats agree with the messages' usage: the self-report is that count.
    assert trace.session_usage == trace.event_usage == Usage(3235, 23, 0, 0)
    assert trace.notes == []
    assert ("thinking", "Check where we are.") in streamed
    assert "".join(d for k, d in streamed if k == "text") == "The command printed the marker."
    logged = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert sum("sent_sec" in e for e in logged) == len(sent)
    assert any(e.get("type") == "agent_end" for e in logged)
    assert all("partial" not in e.get("assistantMessageEvent", {}) for e in logged)


def test_timings_and_speed_come_from_the_turns():
    trace = PromptTrace(index=1, message="m", started=100.0)
    trace.handle({"type": "agent_start"}, now=100.0)
    trace.handle({"type": "turn_start"}, now=100.0)
    trace.handle({"type": "message_start", "message": {"role": "assistant"}}, now=100.5)
    trace.handle({"type": "message_update",
                  "assistantMessageEvent": {"type": "text_delta", "delta": "Hi"}}, now=101.0)
    trace.handle({"type": "message_end", "message": _assistant(
        text="Hi", usage={"input": 100, "output": 40, "cacheRead": 60, "cacheWrite": 5})},
        now=103.0)
    trace.handle({"type": "agent_end"}, now=103.0)
    assert trace.ttft_sec == 1.0
    assert trace.generation_sec == 3.0
    assert trace.output_tokens_per_sec == 20.0  # 40 tokens over the 2 s they streamed
    # Input counts cache reads and writes too, as the gateway counts it.
    assert trace.event_usage == Usage(165, 40, 60, 5)
    meta = trace.metadata()
    assert meta["self_reported_usage"]["input_tokens"] == 165
    assert meta["self_reported_usage"]["source"] == "pi"


def test_done_reasons_follow_the_last_turn_unless_sandlot_stopped_it():
    for stop, reason in [("stop", "stop"), ("length", "length"), ("error", "error"),
                         ("aborted", "aborted")]:
        trace = PromptTrace(index=1, message="m")
        _run_events(trace, [{"type": "agent_start"},
                            {"type": "message_end", "message": _assistant(
                                stop, error="boom" if stop == "error" else None)},
                            {"type": "agent_end"}])
        assert trace.done_reason == reason
    assert trace.error_message is None
    failed = PromptTrace(index=1, message="m")
    _run_events(failed, [{"type": "message_end",
                          "message": _assistant("error", error="500 upstream")}])
    assert failed.error_message == "500 upstream"
    failed.finish("timeout")
    failed.finish("cancelled")  # the first reason sticks
    assert failed.done_reason == "timeout"


def test_tool_output_keeps_a_capped_tail_and_unfinished_tools_show():
    trace = PromptTrace(index=1, message="m")
    long_output = "x" * 10 + "y" * (TOOL_OUTPUT_TAIL_CHARS + 100)
    _run_events(trace, [
        {"type": "tool_execution_start", "toolCallId": "a", "toolName": "bash",
         "args": {"command": "yes"}},
        {"type": "tool_execution_start", "toolCallId": "b", "toolName": "read",
         "args": {"path": "/x"}},
        {"type": "tool_execution_end", "toolCallId": "a", "toolName": "bash", "isError": True,
         "result": {"content": [{"type": "text", "text": long_output}]}},
    ])
    first, second = (t.as_dict() for t in trace.tools)
    assert first["truncated"] and first["output"] == "y" * TOOL_OUTPUT_TAIL_CHARS
    assert first["output_chars"] == len(long_output) and first["is_error"]
    assert first["duration_sec"] == pytest.approx(0.2)
    assert not second["finished"] and second["duration_sec"] is None
    assert trace.tool_calls_started == 2 and trace.tools_used == ["bash", "read"]


def test_a_run_is_not_settled_while_compaction_or_a_retry_is_pending():
    trace = PromptTrace(index=1, message="m")
    _run_events(trace, [{"type": "agent_start"}, {"type": "agent_end"}])
    assert trace.looks_idle
    trace.handle({"type": "compaction_start", "reason": "overflow"})
    assert not trace.looks_idle
    trace.handle({"type": "compaction_end", "reason": "overflow", "willRetry": True})
    assert not trace.looks_idle  # Pi will run the prompt again
    _run_events(trace, [{"type": "agent_start"}, {"type": "agent_end"}])
    assert trace.looks_idle and trace.agent_runs == 2 and trace.compactions == 1
    trace.handle({"type": "auto_retry_start", "attempt": 1})
    assert not trace.looks_idle
    trace.handle({"type": "auto_retry_end", "success": False})
    assert trace.looks_idle


def test_reconcile_prefers_pi_session_stats_and_its_last_text():
    trace = PromptTrace(index=2, message="m")
    _run_events(trace, [{"type": "message_end", "message": _assistant(text="partial")}])
    stats = {"tokens": {"input": 110, "output": 55, "cacheRead": 0, "cacheWrite": 0}}
    trace.reconcile(stats, Usage(90, 45, 0, 0), "The real last text")
    assert trace.final_response == "The real last text"
    assert trace.self_reported_usage == Usage(20, 10, 0, 0)
    assert trace.notes and "session stats" in trace.notes[0]  # 10/5 from events differs
    dropped = PromptTrace(index=3, message="m")
    _run_events(dropped, [{"type": "message_end", "message": _assistant()}])
    dropped.reconcile({"tokens": {"input": 5, "output": 1}}, Usage(90, 45, 0, 0), None)
    assert dropped.self_reported_usage == Usage(10, 5, 0, 0)  # compaction shrank the stats


def _scripted_pi(states: list[dict[str, Any]]) -> Callable[[FakePi, dict[str, Any]], None]:
    """A Pi that runs one turn per prompt and reports `states` to get_state in turn."""

    def on_command(pi: FakePi, command: dict[str, Any]) -> None:
        kind = command["type"]
        if kind == "prompt":
            pi.respond(command)
            pi.emit({"type": "agent_start"})
            pi.emit({"type": "message_end", "message": _assistant(text="done \u2028 here")})
            pi.emit({"type": "agent_end", "messages": []})
        elif kind == "get_state":
            state = states.pop(0) if states else {"isStreaming": False}
            if state.pop("then_compact", False):  # compacting now, done a moment later
                pi.emit({"type": "compaction_start", "reason": "threshold"})
                pi.respond(command, {**state, "isCompacting": True})
                asyncio.get_running_loop().call_later(0.05, pi.emit, {
                    "type": "compaction_end", "reason": "threshold", "willRetry": False})
                return
            pi.respond(command, state)
        else:
            pi.respond(command, {})

    return on_command


def test_prompt_waits_until_get_state_confirms_idle():
    async def main() -> tuple[FakePi, PromptTrace]:
        pi = FakePi(_scripted_pi([{"isStreaming": True}, {"isStreaming": False,
                                                           "then_compact": True},
                                  {"isStreaming": False}]))
        rpc = PiRpc(pi)
        rpc.start()
        trace = PromptTrace(index=1, message="go")
        await asyncio.wait_for(rpc.prompt(trace), 5)
        await rpc.stop(grace_sec=1)
        return pi, trace

    pi, trace = asyncio.run(main())
    assert [c["type"] for c in pi.commands].count("get_state") == 3
    assert trace.compactions == 1
    # U+2028 inside a JSON string is not a line break: the message arrived whole.
    assert trace.final_response == "done \u2028 here"


def test_lines_split_on_newline_only_and_junk_is_logged_not_fatal(tmp_path):
    async def main() -> tuple[PromptTrace, str]:
        def on_command(pi: FakePi, command: dict[str, Any]) -> None:
            if command["type"] != "prompt":
                pi.respond(command, {"isStreaming": False})
                return
            pi.emit(b"not json at all\n")
            pi.emit(b"\n")
            pi.emit(json.dumps({"id": command["id"], "type": "response", "command": "prompt",
                                "success": True}).encode() + b"\r\n")
            pi.emit(b'{"type":"agent_start"}\n{"type":"message_end","message":'
                    + json.dumps(_assistant(text="a\u2029b"), ensure_ascii=False).encode()
                    + b'}\n{"type":"agent_end"}\n')
        pi = FakePi(on_command)
        rpc = PiRpc(pi, events_path=tmp_path / "e.jsonl")
        rpc.start()
        trace = PromptTrace(index=1, message="go")
        await asyncio.wait_for(rpc.prompt(trace), 5)
        await rpc.stop(grace_sec=1)
        return trace, (tmp_path / "e.jsonl").read_text()

    trace, log = asyncio.run(main())
    assert trace.final_response == "a\u2029b"
    assert "not json at all" in log


def test_pi_exiting_mid_prompt_raises_and_keeps_a_bounded_stderr():
    async def main() -> PiRpc:
        def on_command(pi: FakePi, command: dict[str, Any]) -> None:
            pi.respond(command)
            pi.emit({"type": "agent_start"})
            pi.stderr.feed_data(b"e" * (STDERR_TAIL_BYTES * 2) + b"\nFATAL: out of luck\n")
            pi.exit(1)
        pi = FakePi(on_command)
        rpc = PiRpc(pi)
        rpc.start()
        with pytest.raises(PiExited):
            await asyncio.wait_for(rpc.prompt(PromptTrace(index=1, message="go")), 5)
        await rpc.stop(grace_sec=1)
        return rpc

    rpc = asyncio.run(main())
    assert len(rpc.stderr_tail) == STDERR_TAIL_BYTES
    assert rpc.stderr_tail.endswith("FATAL: out of luck\n")


def test_abort_then_stop_escalates_to_kill_with_bounded_waits():
    async def main() -> tuple[FakePi, bool]:
        def on_command(pi: FakePi, command: dict[str, Any]) -> None:
            if command["type"] == "prompt":
                pi.respond(command)
                pi.emit({"type": "agent_start"})  # ...and then nothing: a stuck run
            elif command["type"] == "get_state":
                pi.respond(command, {"isStreaming": True})
            # abort is never answered
        pi = FakePi(on_command, exits_on_eof=False)
        rpc = PiRpc(pi)
        rpc.start()
        trace = PromptTrace(index=1, message="go")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await rpc.prompt(trace)
        aborted = await rpc.abort(trace, wait_sec=0.3)
        await rpc.stop(grace_sec=0.2)
        await rpc.stop(grace_sec=0.2)  # twice is fine
        return pi, aborted

    pi, aborted = asyncio.run(main())
    assert not aborted
    assert [c["type"] for c in pi.commands] == ["prompt", "abort"]
    assert pi.stdin.closed and pi.signals == ["terminate", "kill"]


def test_extension_dialogs_are_dismissed():
    async def main() -> FakePi:
        def on_command(pi: FakePi, command: dict[str, Any]) -> None:
            if command["type"] == "get_state":
                pi.emit({"type": "extension_ui_request", "id": "ui-1", "method": "confirm",
                         "title": "Allow?"})
                pi.emit({"type": "extension_ui_request", "id": "ui-2", "method": "notify",
                         "message": "fyi"})
                pi.respond(command, {})
        pi = FakePi(on_command)
        rpc = PiRpc(pi)
        rpc.start()
        await rpc.request("get_state")
        await asyncio.sleep(0.05)
        await rpc.stop(grace_sec=0.2)
        return pi

    pi = asyncio.run(main())
    assert {"type": "extension_ui_response", "id": "ui-1", "cancelled": True} in pi.commands
    assert not any(c.get("id") == "ui-2" for c in pi.commands)


def test_the_launch_is_isolated_and_the_wire_format_follows_the_model():
    argv = pi_command("openai/gpt-4.1")
    for flag in ("--no-session", "--offline", "--no-extensions", "--no-skills",
                 "--no-prompt-templates", "--no-themes", "--no-context-files"):
        assert flag in argv
    assert argv[argv.index("--tools") + 1] == "read,bash,edit,write"
    assert argv[argv.index("--provider") + 1] == "sandlot"
    openai = models_config("http://127.0.0.1:4000", "sk-trial", "openai/gpt-4.1")
    provider = openai["providers"]["sandlot"]
    assert provider["baseUrl"] == "http://127.0.0.1:4000/v1"
    assert provider["api"] == "openai-completions" and provider["apiKey"] == "sk-trial"
    assert provider["models"][0]["id"] == "openai/gpt-4.1"
    claude = models_config("http://127.0.0.1:4000", "k", "anthropic/claude-sonnet-4-5")
    assert claude["providers"]["sandlot"]["api"] == "anthropic-messages"
    assert claude["providers"]["sandlot"]["baseUrl"] == "http://127.0.0.1:4000"


def test_max_turns_aborts_the_run_after_that_many_tool_turns():
    async def main() -> tuple[FakePi, PromptTrace]:
        def on_command(pi: FakePi, command: dict[str, Any]) -> None:
            if command["type"] == "prompt":
                pi.respond(command)
                pi.emit({"type": "agent_start"})
                for _ in range(2):
                    pi.emit({"type": "message_end", "message": _assistant("toolUse")})
            elif command["type"] == "abort":
                pi.emit({"type": "message_end", "message": _assistant("aborted")})
                pi.emit({"type": "agent_end"})
            else:
                pi.respond(command, {"isStreaming": False})
        pi = FakePi(on_command)
        rpc = PiRpc(pi)
        rpc.start()
        trace = PromptTrace(index=1, message="go")
        await asyncio.wait_for(rpc.prompt(trace, max_turns=2), 5)
        await rpc.stop(grace_sec=0.2)
        return pi, trace

    pi, trace = asyncio.run(main())
    assert [c["type"] for c in pi.commands] == ["prompt", "abort", "get_state"]
    assert trace.done_reason == "max_turns" and len(trace.turns) == 3
