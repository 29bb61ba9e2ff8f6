"""Real HTTP upstreams: a scripted model served as a stand-alone provider that demands its
own key. Same-format requests pass through; other formats go through LiteLLM. The provider
key reaches the provider and nothing else: not the agent, not a single file on disk."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import openai
import pytest

from conftest import files_containing
from sandlot.gateway.scripted import find_model
from sandlot.gateway.scripted_server import ScriptedServer, StreamPace

from .gateway_support import (
    BASH_TOOL,
    SCRIPTS,
    ant,
    oai,
    provider,
    records,
    running_gateway,
    usage_sum,
)

# LiteLLM's own deprecation and pydantic serializer chatter is not what these tests judge.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:litellm"),
              pytest.mark.filterwarnings("ignore::UserWarning:pydantic")]

KEY_ENV = "SANDLOT_GW_TEST_PROVIDER_KEY"
USER = [{"role": "user", "content": "Use the tools."}]
ANT_TOOLS = [{"name": "Bash", "input_schema": {"type": "object", "properties": {
    "command": {"type": "string"}}, "required": ["command"]}}]
RESP_TOOLS = [{"type": "function", "name": "bash",
               "parameters": BASH_TOOL["function"]["parameters"]}]


@pytest.fixture
def upstream_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """The provider key, only in this process's environment (as for a real run)."""
    secret = "sk-upstream-secret-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, secret)
    return secret


def assert_usage_matches_trajectory(session: Any) -> None:
    snap, total = session.usage.snapshot(), usage_sum(records(session))
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens",
                "total_tokens", "n_requests"):
        assert snap[key] == total[key], key


def assert_scripted_turn(rec: dict[str, Any]) -> None:
    """gw-tools turn 1 went all the way to the provider and came back with its usage."""
    assert rec["status"] == 200 and "error" not in rec, rec.get("error")
    assert rec["usage"]["input_tokens"] == 1200 and rec["usage"]["output_tokens"] == 80
    assert rec["usage"]["cache_read_tokens"] == 200


# -- same-format pass-through ----------------------------------------------------------------


def test_openai_pass_through_uses_the_provider_key_and_never_writes_it(
        runner, tmp_path, upstream_secret):
    job_dir = tmp_path / "jobs" / "job"

    async def body() -> None:
        async with provider(upstream_secret) as server, running_gateway(
                "openai/m1", api_base=server.base_url, api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t__1", "task", job_dir / "t__1" / "trajectory")
            assert session.key.startswith("sk-sandlot-") and upstream_secret not in session.key
            async with oai(gw, session.key) as client:
                reply = await client.chat.completions.create(model="gpt-x", messages=USER,
                                                             tools=[BASH_TOOL])
                call = (reply.choices[0].message.tool_calls or [])[0]
                assert json.loads(call.function.arguments) == {"command": "echo sandlot-gw-ok"}
                assert reply.model == "m1", "the provider gets the routed model id"
                # No stream_options from the agent: the gateway asks the provider for usage.
                chunks = await client.chat.completions.create(
                    model="gpt-x", messages=USER, tools=[BASH_TOOL], stream=True)
                streamed = [c async for c in chunks]
                assert any(ch.finish_reason == "tool_calls"
                           for c in streamed for ch in c.choices)
                response = await client.responses.create(model="gpt-x", input="go",
                                                         tools=RESP_TOOLS)
                assert response.output_text == "Running a command and writing a file."
                events = await client.responses.create(model="gpt-x", input="go",
                                                       tools=RESP_TOOLS, stream=True)
                kinds = [e.type async for e in events]
                assert kinds[-1] == "response.completed"
            assert server.seen_keys == [upstream_secret] * 4
            recs = records(session)
            assert [(r["format"], r["stream"]) for r in recs] == [
                ("chat", False), ("chat", True), ("responses", False), ("responses", True)]
            for rec in recs:
                assert_scripted_turn(rec)
            # The streamed chat was reassembled from the provider's chunks, usage included.
            message = recs[1]["response"]["choices"][0]["message"]
            assert [c["function"]["name"] for c in message["tool_calls"]] == ["bash", "bash"]
            assert_usage_matches_trajectory(session)
            await gw.close_trial(session)
        assert files_containing(tmp_path, upstream_secret) == []
        assert (job_dir / "t__1" / "trajectory" / "llm_trajectory.jsonl").stat().st_size > 0

    runner.run(body())


def test_anthropic_pass_through_sends_the_key_as_x_api_key(runner, tmp_path, upstream_secret):
    async def body() -> None:
        async with provider(upstream_secret) as server, running_gateway(
                "anthropic/m1", api_base=server.base_url, api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with ant(gw, session.key) as client:
                message = await client.messages.create(model="claude-x", max_tokens=256,
                                                       messages=USER, tools=ANT_TOOLS)
                async with client.messages.stream(model="claude-x", max_tokens=256,
                                                  messages=USER, tools=ANT_TOOLS) as stream:
                    final = await stream.get_final_message()
            for m in (message, final):
                assert [b.type for b in m.content] == ["thinking", "text", "tool_use",
                                                       "tool_use"]
                assert m.usage.input_tokens == 1000 and m.usage.cache_read_input_tokens == 200
            assert server.seen_keys == [upstream_secret] * 2
            for rec in records(session):
                assert_scripted_turn(rec)
            assert_usage_matches_trajectory(session)
        assert files_containing(tmp_path, upstream_secret) == []

    runner.run(body())


def test_provider_rejecting_the_key_is_relayed_not_retried(runner, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)

    async def body() -> None:
        async with provider("sk-upstream-secret-the-gateway-lacks") as server, running_gateway(
                "openai/m1", api_base=server.base_url, api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                with pytest.raises(openai.AuthenticationError) as err:
                    await client.chat.completions.create(model="m", messages=USER)
            assert err.value.body["message"] == "bad provider key"
            assert server.seen_keys == [""], "no key at all, and no sandlot key either"
            (rec,) = records(session)
            assert rec["status"] == 401 and rec["attempts"] == 1
            assert "bad provider key" in rec["upstream_error"]
            # The job is told once; every later request, of any trial, is answered here
            # without asking the provider again.
            failure = gw.health.fatal
            assert failure is not None and failure.fault == "auth" and failure.status == 401
            assert session.provider_failure == failure
            other = await gw.open_trial("t2", "task", tmp_path / "traj2")
            async with oai(gw, other.key) as client:
                with pytest.raises(openai.AuthenticationError) as again:
                    await client.chat.completions.create(model="m", messages=USER)
            assert "refused the key for openai/m1 (HTTP 401)" in again.value.body["message"]
            assert KEY_ENV in again.value.body["message"]
            assert server.seen_keys == [""], "the provider was not asked a second time"
            assert other.provider_failure == failure
            (rec2,) = records(other)
            assert rec2["status"] == 401 and rec2["upstream_error"].startswith("not sent:")

    runner.run(body())


def test_unreachable_provider_is_a_502_after_retries(runner, tmp_path):
    async def body() -> None:
        import socket

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()  # nothing listens there now
        async with running_gateway("openai/m1", api_base=f"http://127.0.0.1:{port}/v1",
                                   api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                with pytest.raises(openai.APIStatusError) as err:
                    await client.chat.completions.create(model="m", messages=USER)
            assert err.value.status_code == 502
            (rec,) = records(session)
            assert rec["status"] == 502 and rec["attempts"] == 4  # FAST_RETRY: 3 retries
            assert "cannot reach openai" in rec["upstream_error"]

    runner.run(body())


# -- LiteLLM translation ---------------------------------------------------------------------


def test_litellm_translates_anthropic_messages_for_an_openai_provider(
        runner, tmp_path, upstream_secret):
    """openai serves chat and responses natively, so a Messages request goes via LiteLLM."""

    async def body() -> None:
        async with provider(upstream_secret) as server, running_gateway(
                "openai/m1", api_base=server.base_url, api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with ant(gw, session.key) as client:
                message = await client.messages.create(model="claude-x", max_tokens=256,
                                                       messages=USER, tools=ANT_TOOLS)
            assert [b.type for b in message.content] == ["thinking", "text", "tool_use",
                                                         "tool_use"]
            assert message.content[1].text == "Running a command and writing a file."
            tool_use = message.content[2]
            assert (tool_use.name, tool_use.input) == ("Bash", {"command": "echo sandlot-gw-ok"})
            assert message.stop_reason == "tool_use"
            assert (message.usage.input_tokens, message.usage.output_tokens) == (1000, 80)
            assert message.usage.cache_read_input_tokens == 200
            assert server.seen_keys and set(server.seen_keys) == {upstream_secret}
            (rec,) = records(session)
            assert_scripted_turn(rec)
            assert_usage_matches_trajectory(session)
        assert files_containing(tmp_path, upstream_secret) == []

    runner.run(body())


def test_litellm_translates_a_streamed_messages_request(runner, tmp_path, upstream_secret):
    async def body() -> None:
        async with provider(upstream_secret) as server, running_gateway(
                "openai/m1", api_base=server.base_url, api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            try:
                async with ant(gw, session.key) as client, client.messages.stream(
                        model="claude-x", max_tokens=256, messages=USER, tools=ANT_TOOLS) as st:
                    final = await st.get_final_message()
            finally:
                recs = records(session)
            assert [b.type for b in final.content] == ["thinking", "text", "tool_use",
                                                       "tool_use"]
            assert final.stop_reason == "tool_use"
            (rec,) = recs
            assert_scripted_turn(rec)
            assert_usage_matches_trajectory(session)

    runner.run(body())


def test_litellm_serves_chat_and_responses_for_a_provider_without_pass_through(
        runner, tmp_path, upstream_secret):
    """deepseek has no pass-through route: chat goes through litellm.acompletion and
    responses through litellm.aresponses, both to the provider's chat endpoint."""

    async def body() -> None:
        async with provider(upstream_secret) as server, running_gateway(
                "deepseek/m1", api_base=server.base_url, api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                reply = await client.chat.completions.create(model="m", messages=USER,
                                                             tools=[BASH_TOOL])
                assert reply.choices[0].finish_reason == "tool_calls"
                call = (reply.choices[0].message.tool_calls or [])[0]
                assert json.loads(call.function.arguments) == {"command": "echo sandlot-gw-ok"}
                chunks = await client.chat.completions.create(
                    model="m", messages=USER, tools=[BASH_TOOL], stream=True)
                streamed = [c async for c in chunks]
                assert streamed[-1].usage is not None
                assert streamed[-1].usage.prompt_tokens == 1200
                response = await client.responses.create(model="m", input="go",
                                                         tools=RESP_TOOLS)
                assert response.output_text == "Running a command and writing a file."
                assert response.usage and response.usage.input_tokens == 1200
                events = await client.responses.create(model="m", input="go",
                                                       tools=RESP_TOOLS, stream=True)
                kinds = [e.type async for e in events]
                assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
            assert set(server.seen_keys) == {upstream_secret}
            recs = records(session)
            assert len(recs) == 4
            for rec in recs:
                assert_scripted_turn(rec)
            assert_usage_matches_trajectory(session)
        assert files_containing(tmp_path, upstream_secret) == []

    runner.run(body())


def test_one_api_base_serves_an_anthropic_provider_in_every_format(
        runner, tmp_path, upstream_secret):
    async def body() -> None:
        async with provider(upstream_secret) as server, running_gateway(
                "anthropic/m1", api_base=server.base_url, api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with ant(gw, session.key) as client:  # native: passed through
                await client.messages.create(model="m", max_tokens=64, messages=USER)
            async with oai(gw, session.key) as client:  # chat: translated by LiteLLM
                reply = await client.chat.completions.create(model="m", messages=USER)
            assert reply.choices[0].message.content.startswith(
                "Running a command and writing a file.")

    runner.run(body())


def test_secret_scan_finds_a_planted_secret(tmp_path):
    """The scan the secret tests rely on does see a key written anywhere under a folder."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.jsonl").write_bytes(b'{"h": "Bearer sk-upstream-secret-1"}\n')
    assert files_containing(tmp_path, "sk-upstream-secret-1") == [
        tmp_path / "a" / "b" / "x.jsonl"]
    assert files_containing(tmp_path, "sk-upstream-secret-2") == []


def test_a_paced_stream_is_relayed_chunk_by_chunk_as_it_arrives(runner, tmp_path):
    """A provider that generates slowly (the benchmark's paced upstream): the agent gets
    each chunk when the provider sends it, not the whole answer at the end."""
    between = 0.15

    async def body() -> None:
        server = ScriptedServer(find_model("gw-tools", [SCRIPTS]),
                                pace=StreamPace(first_chunk_sec=0.0, between_chunks_sec=between))
        await server.start()
        try:
            async with running_gateway("openai/m1", api_base=server.base_url) as gw:
                session = await gw.open_trial("t__1", "task", tmp_path / "t__1")
                async with oai(gw, session.key) as client:
                    arrived = []
                    chunks = await client.chat.completions.create(
                        model="m", messages=USER, tools=[BASH_TOOL], stream=True)
                    async for _ in chunks:
                        arrived.append(time.monotonic())
                assert len(arrived) >= 3
                # Chunks came spread over the provider's pacing, not in one burst at the end.
                assert arrived[-1] - arrived[0] >= between * (len(arrived) - 2)
                assert_scripted_turn(records(session)[0])
        finally:
            await server.stop()

    runner.run(body())
