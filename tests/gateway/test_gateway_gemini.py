"""Google's generateContent format through the gateway: scripted, passed through to a
Gemini-format provider, and translated by LiteLLM for a chat provider, over real HTTP."""

from __future__ import annotations

import json
import secrets
from typing import Any

import aiohttp
import pytest

from sandlot.gateway.formats.base import SSEParser

from .gateway_support import provider, records, running_gateway

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning:pydantic")]

KEY_ENV = "SANDLOT_GW_TEST_GEMINI_KEY"
TOOLS = [{"functionDeclarations": [
    {"name": "run_shell_command", "description": "Run a shell command.",
     "parametersJsonSchema": {"type": "object", "properties": {
         "command": {"type": "string"}}, "required": ["command"]}},
    {"name": "write_file", "description": "Write a file.",
     "parametersJsonSchema": {"type": "object", "properties": {
         "file_path": {"type": "string"}, "content": {"type": "string"}},
         "required": ["file_path", "content"]}}]}]
REQUEST = {"contents": [{"role": "user", "parts": [{"text": "Use the tools."}]}],
           "systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
           "tools": TOOLS, "generationConfig": {"temperature": 0}}


async def call(base: str, key: str, model: str, method: str, body: dict[str, Any],
               *, header: bool = True) -> tuple[int, Any]:
    """POST like the google-genai SDK: key in x-goog-api-key (or ?key=), SSE for streams."""
    url = f"{base}/v1beta/models/{model}:{method}"
    params = {"alt": "sse"} if method == "streamGenerateContent" else {}
    headers = {"x-goog-api-key": key} if header else {}
    if not header:
        params["key"] = key
    async with aiohttp.ClientSession() as client, client.post(
            url, json=body, params=params, headers=headers) as response:
        if method == "streamGenerateContent" and response.status == 200:
            parser, events = SSEParser(), []
            async for chunk in response.content.iter_any():
                events += [json.loads(data) for _, data in parser.feed(chunk)]
            return response.status, events
        return response.status, await response.json()


def parts_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    return response["candidates"][0]["content"]["parts"]


def merged_parts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for e in events for c in e.get("candidates", []) for p in c["content"]["parts"]]


def test_scripted_generate_content_and_stream_with_usage(runner, tmp_path):
    async def body() -> None:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            base = gw.host_base_url
            status, reply = await call(base, session.key, "gemini-2.5-pro", "generateContent",
                                       REQUEST)
            assert status == 200, reply
            parts = parts_of(reply)
            assert parts[0] == {"text": "I should look around first.", "thought": True}
            assert parts[1]["text"] == "Running a command and writing a file."
            calls = [p["functionCall"] for p in parts if "functionCall" in p]
            assert [c["name"] for c in calls] == ["run_shell_command", "write_file"]
            assert calls[0]["args"] == {"command": "echo sandlot-gw-ok"}
            assert reply["candidates"][0]["finishReason"] == "STOP"
            meta = reply["usageMetadata"]
            assert (meta["promptTokenCount"], meta["thoughtsTokenCount"]) == (1200, 30)
            assert meta["candidatesTokenCount"] + meta["thoughtsTokenCount"] == 80
            # The tool result goes back as a functionResponse: the script's case matches it.
            follow = {**REQUEST, "contents": REQUEST["contents"] + [
                {"role": "model", "parts": parts},
                {"role": "user", "parts": [{"functionResponse": {
                    "id": calls[0].get("id"), "name": "run_shell_command",
                    "response": {"output": "sandlot-gw-ok\n"}}}]}]}
            status, events = await call(base, session.key, "gemini-2.5-pro",
                                        "streamGenerateContent", follow, header=False)
            assert status == 200, events
            text = "".join(p.get("text", "") for p in merged_parts(events))
            assert text == "Saw the marker: sandlot-gw-ok."
            assert events[-1]["candidates"][0]["finishReason"] == "STOP"
            assert events[-1]["usageMetadata"]["promptTokenCount"] == 1500
            # countTokens is answered by the gateway: no model call, nothing counted.
            status, counted = await call(base, session.key, "gemini-2.5-pro", "countTokens",
                                         {"contents": REQUEST["contents"]})
            assert status == 200 and counted["totalTokens"] > 0
            recs = records(session)
            assert [r["format"] for r in recs] == ["gemini", "gemini"]
            assert [r["stream"] for r in recs] == [False, True]
            assert [r["usage"]["input_tokens"] for r in recs] == [1200, 1500]
            assert recs[1]["response"]["candidates"][0]["content"]["parts"][0]["text"] == text
            snap = session.usage.snapshot()
            assert snap["n_requests"] == 2 and snap["output_tokens"] == 80 + 9
            assert snap["reasoning_tokens"] == 30
            # A wrong key is refused in Google's error shape.
            status, error = await call(base, "sk-sandlot-" + "0" * 48, "m", "generateContent",
                                       REQUEST)
            assert status == 401 and error["error"]["status"] == "UNAUTHENTICATED"
            status, error = await call(base, session.key, "m", "embedContent", REQUEST)
            assert status == 404 and "generateContent" in error["error"]["message"]

    runner.run(body())


@pytest.fixture
def provider_key(monkeypatch: pytest.MonkeyPatch) -> str:
    secret = "upstream-secret-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, secret)
    return secret


@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent"])
def test_a_gemini_provider_gets_the_request_passed_through(runner, tmp_path, provider_key,
                                                           method):
    async def body() -> None:
        async with provider(provider_key) as server, running_gateway(
                "gemini/gemini-test", api_base=f"http://127.0.0.1:{server.port}",
                api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            status, reply = await call(gw.host_base_url, session.key, "gemini-2.5-flash",
                                       method, REQUEST)
            assert status == 200, reply
            parts = merged_parts(reply) if isinstance(reply, list) else parts_of(reply)
            assert [p["functionCall"]["name"] for p in parts if "functionCall" in p] == [
                "run_shell_command", "write_file"]
            assert server.seen_keys == [provider_key]  # the real key, as x-goog-api-key
            (rec,) = records(session)
            assert rec["usage"]["input_tokens"] == 1200 and rec["usage"]["output_tokens"] == 80

    runner.run(body())


@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent"])
def test_litellm_translates_generate_content_for_a_chat_provider(runner, tmp_path,
                                                                 provider_key, method):
    async def body() -> None:
        async with provider(provider_key) as server, running_gateway(
                "deepseek/m1", api_base=server.base_url, api_key_env=KEY_ENV) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            status, reply = await call(gw.host_base_url, session.key, "gemini-2.5-pro",
                                       method, REQUEST)
            assert status == 200, reply
            parts = merged_parts(reply) if isinstance(reply, list) else parts_of(reply)
            calls = [p["functionCall"] for p in parts if "functionCall" in p]
            assert [c["name"] for c in calls] == ["run_shell_command", "write_file"]
            assert calls[0]["args"] == {"command": "echo sandlot-gw-ok"}
            assert server.seen_keys == [provider_key]
            (rec,) = records(session)
            assert rec["status"] == 200 and rec["usage"]["input_tokens"] == 1200

    runner.run(body())
