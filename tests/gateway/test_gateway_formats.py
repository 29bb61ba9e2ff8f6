"""The three wire formats, streaming and not, through the gateway to the scripted model,
parsed by the official openai and anthropic SDKs; auth, bad bodies, /v1/models; usage."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from sandlot.gateway.scripted import find_model

from .gateway_support import BASH_TOOL, SCRIPTS, ant, oai, records, running_gateway, usage_sum

WRITE_PATH, WRITE_CONTENT = find_model("gw-tools", [SCRIPTS]).scripts[0].turns[0].write[0]
#: gw-tools turn 1: 1200 input tokens (200 cached), 80 output at $3 / $15 per Mtok.
TURN1_COST = (1200 * 3.0 + 80 * 15.0) / 1e6
CHAT_FINISH = {"stop", "length", "tool_calls", "content_filter"}


def run_heredoc(command: str, cwd: Path) -> str:
    """Run a scripted `write` that came as a shell heredoc; return the file it wrote."""
    subprocess.run(["bash", "-c", command], cwd=cwd, check=True)
    return (cwd / WRITE_PATH).read_text()


USER = [{"role": "user", "content": "Say hello, then use the tools."}]
ANT_TOOLS = [
    {"name": "Bash", "description": "Run a command",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"},
                                                       "description": {"type": "string"}},
                      "required": ["command"]}},
    {"name": "Write", "description": "Write a file",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"},
                                                       "content": {"type": "string"}},
                      "required": ["file_path", "content"]}},
]
CODEX_TOOLS = [{"type": "function", "name": "exec_command", "description": "Run a command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"},
                                                                "workdir": {"type": "string"}},
                               "required": ["cmd"]}}]


# -- Chat Completions ----------------------------------------------------------------------


def test_chat_completion_with_tools_parsed_by_openai_sdk(runner, tmp_path):
    async def body() -> None:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                reply = await client.chat.completions.create(
                    model="anything", messages=USER, tools=[BASH_TOOL])
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Running a command and writing a file."
        assert (choice.message.model_extra or {}).get("reasoning_content") == (
            "I should look around first.")
        run, write = choice.message.tool_calls or []
        assert run.function.name == write.function.name == "bash"
        assert json.loads(run.function.arguments) == {"command": "echo sandlot-gw-ok"}
        assert run.id != write.id and run.id.startswith("call_")
        # `write` with no file tool offered becomes a quoted heredoc that writes it exactly.
        heredoc = json.loads(write.function.arguments)["command"]
        assert run_heredoc(heredoc, tmp_path) == WRITE_CONTENT
        usage = reply.usage
        assert usage is not None
        assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
            1200, 80, 1280)
        assert usage.prompt_tokens_details and usage.prompt_tokens_details.cached_tokens == 200
        assert usage.completion_tokens_details
        assert usage.completion_tokens_details.reasoning_tokens == 30

    runner.run(body())


def test_chat_stream_ids_once_finish_reason_valid_usage_last(runner, tmp_path):
    async def body() -> None:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                stream = await client.chat.completions.create(
                    model="m", messages=USER, tools=[BASH_TOOL], stream=True,
                    stream_options={"include_usage": True})
                chunks = [c async for c in stream]
            recorded = records(session)
        finishes = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
        assert finishes == ["tool_calls"] and set(finishes) <= CHAT_FINISH
        # Usage only on the last chunk, which has no choices.
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert all(c.usage is None for c in chunks[:-1])
        assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (1200, 80)
        deltas: dict[int, list[Any]] = {}
        text = ""
        for c in chunks:
            for ch in c.choices:
                text += ch.delta.content or ""
                for tc in ch.delta.tool_calls or []:
                    deltas.setdefault(tc.index, []).append(tc)
        assert text == "Running a command and writing a file."
        assert sorted(deltas) == [0, 1]
        ids = []
        for parts in deltas.values():
            first, rest = parts[0], parts[1:]
            assert first.id and first.function and first.function.name == "bash"
            assert rest and all(p.id is None for p in rest), "the id goes on the first delta only"
            assert all(p.function is None or p.function.name is None for p in rest)
            ids.append(first.id)
        args = ["".join((p.function.arguments or "") for p in deltas[i] if p.function)
                for i in (0, 1)]
        assert json.loads(args[0]) == {"command": "echo sandlot-gw-ok"}
        assert run_heredoc(json.loads(args[1])["command"], tmp_path) == WRITE_CONTENT
        # The trajectory holds the stream reassembled, with its usage.
        (rec,) = recorded
        assert rec["stream"] is True and rec["status"] == 200 and "error" not in rec
        message = rec["response"]["choices"][0]["message"]
        assert [c["id"] for c in message["tool_calls"]] == ids
        assert message["content"] == text
        assert rec["usage"]["input_tokens"] == 1200 and rec["usage"]["output_tokens"] == 80
        assert rec["ttft_sec"] <= rec["latency_sec"]

    runner.run(body())


@pytest.mark.parametrize(("tools", "expected"), [
    pytest.param(  # the built-in agent's own tools
        [BASH_TOOL, {"type": "function", "function": {
            "name": "write_file", "parameters": {"type": "object", "properties": {
                "path": {"type": "string"}, "content": {"type": "string"}}}}}],
        [("bash", {"command": "echo sandlot-gw-ok"}),
         ("write_file", {"path": WRITE_PATH, "content": WRITE_CONTENT})], id="builtin"),
    pytest.param(  # an editor tool with a sub-command and file_text
        [BASH_TOOL, {"type": "function", "function": {
            "name": "str_replace_based_edit_tool", "parameters": {"type": "object", "properties": {
                "command": {"type": "string"}, "path": {"type": "string"},
                "file_text": {"type": "string"}}}}}],
        [("bash", {"command": "echo sandlot-gw-ok"}),
         ("str_replace_based_edit_tool",
          {"command": "create", "path": WRITE_PATH, "file_text": WRITE_CONTENT})],
        id="str-replace-editor"),
    pytest.param(  # a shell tool taking argv (codex's `shell`) and no file tool
        [{"type": "function", "function": {
            "name": "shell", "parameters": {"type": "object", "properties": {
                "command": {"type": "array", "items": {"type": "string"}}}}}}],
        [("shell", {"command": ["bash", "-lc", "echo sandlot-gw-ok"]}), ("shell", None)],
        id="argv-shell"),
])
def test_scripted_run_and_write_map_onto_the_offered_tools(runner, tmp_path, tools, expected):
    async def body() -> list[Any]:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                reply = await client.chat.completions.create(model="m", messages=USER,
                                                             tools=tools)
        return reply.choices[0].message.tool_calls or []

    calls = runner.run(body())
    assert [c.function.name for c in calls] == [name for name, _ in expected]
    for call, (_, args) in zip(calls, expected, strict=True):
        if args is not None:
            assert json.loads(call.function.arguments) == args
    if expected[-1][1] is None:  # the heredoc through an argv shell still writes the file
        argv = json.loads(calls[-1].function.arguments)["command"]
        assert argv[:2] == ["bash", "-lc"]
        assert run_heredoc(argv[2], tmp_path) == WRITE_CONTENT


def test_scripted_turn_says_so_when_no_tool_is_offered(runner, tmp_path):
    async def body() -> Any:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                return await client.chat.completions.create(model="m", messages=USER)

    reply = runner.run(body())
    assert not reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "stop"
    assert "scripted model: no shell tool offered" in reply.choices[0].message.content


# -- Responses -----------------------------------------------------------------------------


def test_responses_create_parsed_by_openai_sdk(runner, tmp_path):
    async def body() -> Any:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                return await client.responses.create(model="m", input="Use the tools.",
                                                     tools=CODEX_TOOLS)

    response = runner.run(body())
    assert response.status == "completed"
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "message", "function_call", "function_call"]
    assert response.output_text == "Running a command and writing a file."
    calls = [item for item in response.output if item.type == "function_call"]
    assert all(c.name == "exec_command" and c.call_id for c in calls)
    assert json.loads(calls[0].arguments) == {"cmd": "echo sandlot-gw-ok"}
    assert run_heredoc(json.loads(calls[1].arguments)["cmd"], tmp_path) == WRITE_CONTENT
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.total_tokens) == (1200, 80, 1280)
    assert response.usage.input_tokens_details.cached_tokens == 200
    assert response.usage.output_tokens_details.reasoning_tokens == 30


def test_responses_stream_ends_in_completed_with_usage(runner, tmp_path):
    async def body() -> tuple[list[Any], list[dict[str, Any]]]:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                stream = await client.responses.create(model="m", input="Use the tools.",
                                                       tools=CODEX_TOOLS, stream=True)
                events = [e async for e in stream]
            return events, records(session)

    events, recorded = runner.run(body())
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.completed") == 1
    assert types.count("response.output_item.added") == types.count("response.output_item.done")
    seqs = [e.sequence_number for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    final = events[-1].response
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (
        1200, 80)
    # Arguments streamed as deltas add up to the final item's arguments.
    done = {e.output_index: e.item for e in events if e.type == "response.output_item.done"}
    for index, item in done.items():
        if item.type == "function_call":
            streamed = "".join(e.delta for e in events
                               if e.type == "response.function_call_arguments.delta"
                               and e.output_index == index)
            assert streamed == item.arguments and json.loads(streamed)["cmd"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Running a command and writing a file."
    (rec,) = recorded
    assert rec["response"]["status"] == "completed"
    assert rec["usage"]["input_tokens"] == 1200 and rec["usage"]["reasoning_tokens"] == 30


# -- Anthropic Messages --------------------------------------------------------------------


def assert_claude_answer(message: Any) -> None:
    kinds = [b.type for b in message.content]
    assert kinds == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, bash, write = message.content
    assert thinking.thinking == "I should look around first."
    assert text.text == "Running a command and writing a file."
    assert (bash.name, bash.input) == ("Bash", {"command": "echo sandlot-gw-ok"})
    assert (write.name, write.input) == ("Write", {"file_path": WRITE_PATH,
                                                   "content": WRITE_CONTENT})
    assert bash.id != write.id
    assert message.stop_reason == "tool_use"
    # Anthropic counts input without cache reads: 1200 in total, 200 of them cached.
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens,
            message.usage.output_tokens) == (1000, 200, 80)


def test_messages_create_parsed_by_anthropic_sdk(runner, tmp_path):
    async def body() -> Any:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with ant(gw, session.key) as client:
                return await client.messages.create(model="claude-x", max_tokens=1024,
                                                    messages=USER, tools=ANT_TOOLS)

    assert_claude_answer(runner.run(body()))


def test_messages_stream_final_message_parsed_by_anthropic_sdk(runner, tmp_path):
    async def body() -> tuple[Any, list[str], list[dict[str, Any]]]:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with ant(gw, session.key) as client, client.messages.stream(
                    model="claude-x", max_tokens=1024, messages=USER, tools=ANT_TOOLS) as stream:
                kinds = [event.type async for event in stream]
                final = await stream.get_final_message()
            return final, kinds, records(session)

    final, kinds, recorded = runner.run(body())
    assert_claude_answer(final)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "message_delta" in kinds
    (rec,) = recorded
    assert rec["format"] == "messages" and rec["stream"] is True
    assert rec["response"]["stop_reason"] == "tool_use"
    assert rec["usage"]["input_tokens"] == 1200 and rec["usage"]["cache_read_tokens"] == 200


# -- turn selection across formats -----------------------------------------------------------


def test_second_turn_follows_the_tool_result_in_every_format(runner, tmp_path):
    """The scripted model counts assistant turns and reads the latest tool result, in each
    format's own shape; a case matching the tool output wins over the plain turn."""

    def chat(result: str) -> dict[str, Any]:
        return {"model": "m", "tools": [BASH_TOOL], "messages": [*USER, {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "echo"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": result}]}

    def messages(result: str) -> dict[str, Any]:
        return {"model": "m", "max_tokens": 100, "tools": ANT_TOOLS, "messages": [*USER, {
            "role": "assistant", "content": [
                {"type": "tool_use", "id": "tu_1", "name": "Bash", "input": {"command": "x"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": result}]}]}

    def responses(result: str) -> dict[str, Any]:
        return {"model": "m", "tools": CODEX_TOOLS, "input": [
            {"role": "user", "content": "go"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "exec_command",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": result}]}

    async def body() -> dict[tuple[str, str], str]:
        out = {}
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as oc, ant(gw, session.key) as ac:
                for result in ("sandlot-gw-ok\n", "nothing here"):
                    r1 = await oc.chat.completions.create(**chat(result))
                    out["chat", result] = r1.choices[0].message.content
                    r2 = await ac.messages.create(**messages(result))
                    out["messages", result] = r2.content[0].text
                    r3 = await oc.responses.create(**responses(result))
                    out["responses", result] = r3.output_text
        return out

    texts = runner.run(body())
    for fmt in ("chat", "messages", "responses"):
        assert texts[fmt, "sandlot-gw-ok\n"] == "Saw the marker: sandlot-gw-ok.", fmt
        assert texts[fmt, "nothing here"] == "The command printed the marker.", fmt


# -- auth, bad bodies, models ----------------------------------------------------------------


def test_bad_missing_and_revoked_keys_get_401_in_each_format(runner, tmp_path):
    async def body() -> None:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, "sk-sandlot-" + "0" * 48) as bad:
                with pytest.raises(openai.AuthenticationError) as chat_err:
                    await bad.chat.completions.create(model="m", messages=USER)
                with pytest.raises(openai.AuthenticationError):
                    await bad.responses.create(model="m", input="hi")
                with pytest.raises(openai.AuthenticationError):
                    await bad.models.list()
            assert chat_err.value.status_code == 401
            async with ant(gw, "not-a-key") as bad_ant:
                with pytest.raises(anthropic.AuthenticationError) as ant_err:
                    await bad_ant.messages.create(model="m", max_tokens=10, messages=USER)
            assert ant_err.value.body["error"]["type"] == "authentication_error"
            async with httpx.AsyncClient(base_url=gw.host_base_url) as raw:
                for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
                    no_key = await raw.post(path, json={"model": "m", "messages": USER})
                    assert no_key.status_code == 401, path
                assert (await raw.get("/v1/models")).status_code == 401
                other = await raw.post("/v1/messages", json={"messages": USER},
                                       headers={"x-api-key": "", "authorization": "Basic x"})
                assert other.status_code == 401
            # The trial's own key works until the trial is closed, then never again.
            async with oai(gw, session.key) as good:
                await good.chat.completions.create(model="m", messages=USER)
                await gw.close_trial(session)
                with pytest.raises(openai.AuthenticationError):
                    await good.chat.completions.create(model="m", messages=USER)
            async with ant(gw, session.key) as closed_ant:
                with pytest.raises(anthropic.AuthenticationError):
                    await closed_ant.messages.create(model="m", max_tokens=10, messages=USER)
            assert len(records(session)) == 1, "rejected requests reach no model"

    runner.run(body())


def test_keys_are_per_trial(runner, tmp_path):
    async def body() -> None:
        async with running_gateway() as gw:
            a = await gw.open_trial("a", "task", tmp_path / "a")
            b = await gw.open_trial("b", "task", tmp_path / "b")
            assert a.key != b.key and a.key.startswith("sk-sandlot-")
            await gw.close_trial(a)
            async with oai(gw, b.key) as client:
                await client.chat.completions.create(model="m", messages=USER)
            assert len(records(b)) == 1 and records(a) == []

    runner.run(body())


@pytest.mark.parametrize(("path", "shape"), [("/v1/chat/completions", "openai"),
                                             ("/v1/responses", "openai"),
                                             ("/v1/messages", "anthropic")])
def test_malformed_json_body_gets_400_in_the_formats_error_shape(runner, tmp_path, path, shape):
    async def body() -> list[httpx.Response]:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            headers = {"authorization": f"Bearer {session.key}",
                       "content-type": "application/json"}
            async with httpx.AsyncClient(base_url=gw.host_base_url, headers=headers) as raw:
                return [await raw.post(path, content=content)
                        for content in (b'{"model": "m", "messages": [', b"[1, 2]", b"")]

    for response in runner.run(body()):
        assert response.status_code == 400, response.text
        err = response.json()
        if shape == "openai":
            assert "invalid JSON body" in err["error"]["message"]
        else:
            assert err["type"] == "error"
            assert err["error"]["type"] == "invalid_request_error"
            assert "invalid JSON body" in err["error"]["message"]


def test_models_endpoint_lists_the_routed_model(runner, tmp_path):
    async def body() -> list[str]:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                return [m.id async for m in client.models.list()]

    assert set(runner.run(body())) == {"scripted/gw-tools", "gw-tools"}


# -- usage and cost --------------------------------------------------------------------------


def test_live_usage_equals_the_trajectory_sum_per_trial(runner, tmp_path):
    async def body() -> None:
        async with running_gateway() as gw:
            a = await gw.open_trial("a", "task", tmp_path / "a" / "trajectory")
            b = await gw.open_trial("b", "task", tmp_path / "b" / "trajectory")
            async with oai(gw, a.key) as oc, ant(gw, a.key) as ac, oai(gw, b.key) as ob:
                await oc.chat.completions.create(model="m", messages=USER, tools=[BASH_TOOL])
                stream = await oc.chat.completions.create(
                    model="m", messages=USER, tools=[BASH_TOOL], stream=True,
                    stream_options={"include_usage": True})
                _ = [c async for c in stream]
                await oc.responses.create(model="m", input="hi", tools=CODEX_TOOLS)
                stream = await oc.responses.create(model="m", input="hi", stream=True)
                _ = [e async for e in stream]
                await ac.messages.create(model="m", max_tokens=99, messages=USER, tools=ANT_TOOLS)
                async with ac.messages.stream(model="m", max_tokens=99, messages=USER) as st:
                    await st.get_final_message()
                await ob.chat.completions.create(model="m", messages=USER)
            for session, n in ((a, 6), (b, 1)):
                recs = records(session)
                assert len(recs) == n
                snap = session.usage.snapshot()
                expected = usage_sum(recs)
                for key in ("input_tokens", "output_tokens", "cache_read_tokens",
                            "cache_write_tokens", "reasoning_tokens", "total_tokens",
                            "n_requests"):
                    assert snap[key] == expected[key], key
                assert snap["cost_usd"] == pytest.approx(expected["cost_usd"])
                assert snap["cost_usd"] == pytest.approx(n * TURN1_COST)
                assert snap["input_tokens"] == n * 1200 and snap["cache_read_tokens"] == n * 200
                assert snap["source"] == "gateway" and snap["in_flight"] == 0
                for rec in recs:
                    assert rec["cost_usd"] == pytest.approx(TURN1_COST)
                    assert rec["trial"] == session.trial and rec["status"] == 200
            assert [r["seq"] for r in records(a)] == [1, 2, 3, 4, 5, 6]
            assert {(r["format"], r["stream"]) for r in records(a)} == {
                (f, s) for f in ("chat", "responses", "messages") for s in (False, True)}

    runner.run(body())


def test_cost_is_none_for_a_model_without_a_price(runner, tmp_path):
    async def body() -> None:
        async with running_gateway("scripted/gw-noprice") as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                await client.chat.completions.create(model="m", messages=USER)
            (rec,) = records(session)
            assert rec["cost_usd"] is None
            snap = session.usage.snapshot()
            assert snap["cost_usd"] is None
            assert (snap["input_tokens"], snap["output_tokens"], snap["n_requests"]) == (10, 4, 1)

    runner.run(body())
