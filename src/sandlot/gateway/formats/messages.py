"""Anthropic Messages: /v1/messages, JSON and the named SSE event sequence."""

from __future__ import annotations

import json
from typing import Any

from sandlot.gateway.formats.base import (
    ModelTurn,
    RequestView,
    ToolSpec,
    Usage,
    new_id,
    sse,
    text_of,
)
from sandlot.gateway.formats.base import (
    pieces as _pieces,
)

STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def parse_usage(raw: dict[str, Any] | None) -> Usage:
    """Anthropic's input_tokens exclude cache reads/writes; ours include them."""
    if not raw:
        return Usage()
    cache_read = int(raw.get("cache_read_input_tokens") or 0)
    cache_write = int(raw.get("cache_creation_input_tokens") or 0)
    return Usage(input_tokens=int(raw.get("input_tokens") or 0) + cache_read + cache_write,
                 output_tokens=int(raw.get("output_tokens") or 0),
                 cache_read_tokens=cache_read, cache_write_tokens=cache_write)


def _usage_json(u: Usage) -> dict[str, Any]:
    return {"input_tokens": u.input_tokens - u.cache_read_tokens - u.cache_write_tokens,
            "cache_creation_input_tokens": u.cache_write_tokens,
            "cache_read_input_tokens": u.cache_read_tokens, "output_tokens": u.output_tokens}


def _blocks(turn: ModelTurn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.thinking:
        blocks.append({"type": "thinking", "thinking": turn.thinking,
                       "signature": "sandlot-scripted"})
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
               for c in turn.tool_calls]
    return blocks


class MessagesFormat:
    name = "messages"

    def view(self, body: dict[str, Any]) -> RequestView:
        messages = body.get("messages") or []
        n_assistant = sum(1 for m in messages
                          if isinstance(m, dict) and m.get("role") == "assistant")
        last_tool = None
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "user":
            content = messages[-1].get("content")
            if isinstance(content, list):
                results = [text_of(b.get("content")) for b in content
                           if isinstance(b, dict) and b.get("type") == "tool_result"]
                if results:
                    last_tool = "\n".join(results)
        tools = [ToolSpec(t["name"], t.get("input_schema") or {})
                 for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name")]
        last_user = None
        for m in reversed(messages):
            if not isinstance(m, dict) or m.get("role") != "user":
                continue
            content = m.get("content")
            if isinstance(content, list):
                content = [b for b in content
                           if not (isinstance(b, dict) and b.get("type") == "tool_result")]
            if text := text_of(content):
                last_user = text
                break
        return RequestView(model=str(body.get("model", "")), stream=bool(body.get("stream")),
                           tools=tools, n_assistant_turns=n_assistant, last_tool_result=last_tool,
                           last_user_text=last_user)

    def encode(self, turn: ModelTurn, model: str) -> dict[str, Any]:
        return {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": model,
                "content": _blocks(turn), "stop_reason": STOP.get(turn.finish, "end_turn"),
                "stop_sequence": None, "usage": _usage_json(turn.usage)}

    def encode_stream(self, turn: ModelTurn, model: str, include_usage: bool) -> list[bytes]:
        start_usage = {**_usage_json(turn.usage), "output_tokens": 1}
        out = [sse({"type": "message_start", "message": {
            "id": new_id("msg_"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}},
            "message_start")]
        for index, block in enumerate(_blocks(turn)):
            kind = block["type"]
            if kind == "thinking":
                opening: dict[str, Any] = {"type": "thinking", "thinking": ""}
                deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(
                    block["thinking"])] + [{"type": "signature_delta",
                                            "signature": block["signature"]}]
            elif kind == "text":
                opening = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
            else:
                opening = {"type": "tool_use", "id": block["id"], "name": block["name"],
                           "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": p}
                          for p in _pieces(json.dumps(block["input"]))]
            out.append(sse({"type": "content_block_start", "index": index,
                            "content_block": opening}, "content_block_start"))
            out += [sse({"type": "content_block_delta", "index": index, "delta": d},
                        "content_block_delta") for d in deltas]
            out.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        out.append(sse({"type": "message_delta",
                        "delta": {"stop_reason": STOP.get(turn.finish, "end_turn"),
                                  "stop_sequence": None},
                        "usage": {"output_tokens": turn.usage.output_tokens}}, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return out

    def usage_of(self, response: dict[str, Any]) -> Usage:
        return parse_usage(response.get("usage"))

    def collector(self) -> MessagesCollector:
        return MessagesCollector()

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {400: "invalid_request_error", 401: "authentication_error",
                402: "billing_error", 429: "rate_limit_error",
                529: "overloaded_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}


class MessagesCollector:
    """Rebuilds a message from message_start / content_block_* / message_delta events."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial_json: dict[int, str] = {}
        self._usage: dict[str, Any] = {}

    def add(self, event: str | None, data: str) -> None:
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            return
        kind = obj.get("type")
        if kind == "message_start":
            self.message = dict(obj.get("message") or {})
            self._usage.update(self.message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks[int(obj.get("index", 0))] = dict(obj.get("content_block") or {})
        elif kind == "content_block_delta":
            i = int(obj.get("index", 0))
            block = self.blocks.setdefault(i, {})
            delta = obj.get("delta") or {}
            dk = delta.get("type")
            if dk == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif dk == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif dk == "signature_delta":
                block["signature"] = delta.get("signature", "")
            elif dk == "input_json_delta":
                self.partial_json[i] = self.partial_json.get(i, "") + delta.get(
                    "partial_json", "")
        elif kind == "message_delta":
            self.message.update(obj.get("delta") or {})
            # message_delta usage is cumulative: later figures replace earlier ones.
            self._usage.update({k: v for k, v in (obj.get("usage") or {}).items()
                                if v is not None})

    def result(self) -> dict[str, Any]:
        content = []
        for i, block in sorted(self.blocks.items()):
            if block.get("type") == "tool_use" and i in self.partial_json:
                try:
                    block["input"] = json.loads(self.partial_json[i] or "{}")
                except json.JSONDecodeError:
                    block["input"] = {"_unparsed": self.partial_json[i]}
            content.append(block)
        return {**self.message, "content": content, "usage": self._usage}

    def usage(self) -> Usage:
        return parse_usage(self._usage)
