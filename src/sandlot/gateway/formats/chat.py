"""OpenAI Chat Completions: /v1/chat/completions, JSON and SSE chunks."""

from __future__ import annotations

import json
import time
from typing import Any

from sandlot.gateway.formats.base import (
    ModelTurn,
    RequestView,
    ToolSpec,
    Usage,
    new_id,
    openai_error_body,
    sse,
    text_of,
)
from sandlot.gateway.formats.base import (
    pieces as _pieces,
)

FINISH = {"stop": "stop", "tool_calls": "tool_calls", "length": "length"}


def _usage_json(u: Usage) -> dict[str, Any]:
    return {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
            "total_tokens": u.total_tokens,
            "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
            "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens}}


def parse_usage(raw: dict[str, Any] | None) -> Usage:
    if not raw:
        return Usage()
    details = raw.get("prompt_tokens_details") or {}
    out_details = raw.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cache_read_tokens=int(details.get("cached_tokens") or 0),
        cache_write_tokens=int(raw.get("cache_creation_input_tokens") or 0),
        reasoning_tokens=int(out_details.get("reasoning_tokens") or 0),
    )


class ChatFormat:
    name = "chat"

    def view(self, body: dict[str, Any]) -> RequestView:
        messages = body.get("messages") or []
        n_assistant = sum(1 for m in messages
                          if isinstance(m, dict) and m.get("role") == "assistant")
        last_tool = None
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
            # Several tool results may follow one assistant turn: join them in order.
            results = []
            for m in reversed(messages):
                if not isinstance(m, dict) or m.get("role") != "tool":
                    break
                results.append(text_of(m.get("content")))
            last_tool = "\n".join(reversed(results))
        tools = []
        for t in body.get("tools") or []:
            fn = t.get("function") if isinstance(t, dict) else None
            if isinstance(fn, dict) and fn.get("name"):
                tools.append(ToolSpec(fn["name"], fn.get("parameters") or {}))
        opts = body.get("stream_options") or {}
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        return RequestView(model=str(body.get("model", "")), stream=bool(body.get("stream")),
                           tools=tools, n_assistant_turns=n_assistant, last_tool_result=last_tool,
                           include_usage=bool(opts.get("include_usage")),
                           last_user_text=text_of(users[-1].get("content")) if users else None)

    def encode(self, turn: ModelTurn, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.thinking:
            message["reasoning_content"] = turn.thinking
        if turn.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in turn.tool_calls]
        return {"id": new_id("chatcmpl-"), "object": "chat.completion",
                "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": FINISH.get(turn.finish, "stop")}],
                "usage": _usage_json(turn.usage)}

    def encode_stream(self, turn: ModelTurn, model: str, include_usage: bool) -> list[bytes]:
        cid, created = new_id("chatcmpl-"), int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                        "model": model, "choices": [{"index": 0, "delta": delta,
                                                     "logprobs": None,
                                                     "finish_reason": finish}]})

        out = [chunk({"role": "assistant", "content": ""})]
        for piece in _pieces(turn.thinking):
            out.append(chunk({"reasoning_content": piece}))
        for piece in _pieces(turn.text):
            out.append(chunk({"content": piece}))
        for i, call in enumerate(turn.tool_calls):
            # The id and name travel only on a call's first delta; arguments follow in parts.
            out.append(chunk({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                              "function": {"name": call.name,
                                                           "arguments": ""}}]}))
            for piece in _pieces(json.dumps(call.arguments)):
                out.append(chunk({"tool_calls": [{"index": i,
                                                  "function": {"arguments": piece}}]}))
        out.append(chunk({}, FINISH.get(turn.finish, "stop")))
        if include_usage:
            out.append(sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                            "model": model, "choices": [], "usage": _usage_json(turn.usage)}))
        out.append(sse("[DONE]"))
        return out

    def usage_of(self, response: dict[str, Any]) -> Usage:
        return parse_usage(response.get("usage"))

    def collector(self) -> ChatCollector:
        return ChatCollector()

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return openai_error_body(status, message)


class ChatCollector:
    """Rebuilds a chat.completion from chunks (content, reasoning, tool calls by index)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.model = ""
        self.id = ""
        self._usage: dict[str, Any] | None = None

    def add(self, event: str | None, data: str) -> None:
        if data.strip() == "[DONE]":
            return
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            return
        self.id = self.id or obj.get("id", "")
        self.model = self.model or obj.get("model", "")
        if obj.get("usage"):
            self._usage = obj["usage"]
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    self.reasoning.append(delta[key])
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(int(tc.get("index", 0)),
                                             {"id": "", "name": "", "arguments": ""})
                slot["id"] = slot["id"] or tc.get("id") or ""
                fn = tc.get("function") or {}
                slot["name"] = slot["name"] or fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def result(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for _, c in sorted(self.calls.items())]
        return {"id": self.id, "object": "chat.completion", "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
                "usage": self._usage}

    def usage(self) -> Usage:
        return parse_usage(self._usage)
