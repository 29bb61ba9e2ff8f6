"""OpenAI Responses: /v1/responses, JSON and the typed SSE event sequence (codex uses it)."""

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

MODEL_ITEMS = {"function_call", "reasoning", "custom_tool_call", "local_shell_call"}


def parse_usage(raw: dict[str, Any] | None) -> Usage:
    if not raw:
        return Usage()
    inp = raw.get("input_tokens_details") or {}
    out = raw.get("output_tokens_details") or {}
    return Usage(input_tokens=int(raw.get("input_tokens") or 0),
                 output_tokens=int(raw.get("output_tokens") or 0),
                 cache_read_tokens=int(inp.get("cached_tokens") or 0),
                 reasoning_tokens=int(out.get("reasoning_tokens") or 0))


def _usage_json(u: Usage) -> dict[str, Any]:
    return {"input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.total_tokens}


def _is_model_item(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message")
    return kind in MODEL_ITEMS or (kind == "message" and item.get("role") == "assistant")


def _items(turn: ModelTurn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.thinking:
        items.append({"type": "reasoning", "id": new_id("rs_"),
                      "summary": [{"type": "summary_text", "text": turn.thinking}]})
    if turn.text:
        items.append({"type": "message", "id": new_id("msg_"), "status": "completed",
                      "role": "assistant",
                      "content": [{"type": "output_text", "text": turn.text,
                                   "annotations": []}]})
    items += [{"type": "function_call", "id": new_id("fc_"), "call_id": c.id, "name": c.name,
               "arguments": json.dumps(c.arguments), "status": "completed"}
              for c in turn.tool_calls]
    return items


class ResponsesFormat:
    name = "responses"

    def view(self, body: dict[str, Any]) -> RequestView:
        items = body.get("input")
        if not isinstance(items, list):
            items = []
        # A model turn is a run of consecutive model-produced items (reasoning, message,
        # function calls) between inputs; count the runs.
        n_turns, in_run = 0, False
        for item in items:
            if _is_model_item(item):
                if not in_run:
                    n_turns += 1
                in_run = True
            else:
                in_run = False
        last_tool = None
        outputs = []
        for item in reversed(items):
            if isinstance(item, dict) and item.get("type") in ("function_call_output",
                                                               "custom_tool_call_output"):
                outputs.append(text_of(item.get("output")))
            else:
                break
        if outputs:
            last_tool = "\n".join(reversed(outputs))
        tools = [ToolSpec(t["name"], t.get("parameters") or {})
                 for t in body.get("tools") or []
                 if isinstance(t, dict) and t.get("type", "function") == "function"
                 and t.get("name")]
        raw_input = body.get("input")
        last_user = raw_input if isinstance(raw_input, str) else None
        for item in reversed(items):
            if isinstance(item, dict) and item.get("role") == "user":
                last_user = text_of(item.get("content"))
                break
        return RequestView(model=str(body.get("model", "")), stream=bool(body.get("stream")),
                           tools=tools, n_assistant_turns=n_turns, last_tool_result=last_tool,
                           last_user_text=last_user)

    def _response(self, turn: ModelTurn, model: str, rid: str, created: int,
                  status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": rid, "object": "response", "created_at": created, "status": status,
                "model": model, "output": output, "error": None, "incomplete_details":
                    {"reason": "max_output_tokens"} if turn.finish == "length" else None,
                "usage": _usage_json(turn.usage) if status == "completed" else None}

    def encode(self, turn: ModelTurn, model: str) -> dict[str, Any]:
        status = "incomplete" if turn.finish == "length" else "completed"
        body = self._response(turn, model, new_id("resp_"), int(time.time()), "completed",
                              _items(turn))
        body["status"] = status
        return body

    def encode_stream(self, turn: ModelTurn, model: str, include_usage: bool) -> list[bytes]:
        rid, created = new_id("resp_"), int(time.time())
        seq = iter(range(1_000_000))
        out: list[bytes] = []

        def emit(kind: str, **fields: Any) -> None:
            out.append(sse({"type": kind, "sequence_number": next(seq), **fields}, kind))

        emit("response.created", response=self._response(turn, model, rid, created,
                                                         "in_progress", []))
        emit("response.in_progress", response=self._response(turn, model, rid, created,
                                                             "in_progress", []))
        items = _items(turn)
        for index, item in enumerate(items):
            kind = item["type"]
            if kind == "message":
                emit("response.output_item.added", output_index=index,
                     item={**item, "status": "in_progress", "content": []})
                part = {"type": "output_text", "text": "", "annotations": []}
                emit("response.content_part.added", item_id=item["id"], output_index=index,
                     content_index=0, part=part)
                text = item["content"][0]["text"]
                for piece in _pieces(text):
                    emit("response.output_text.delta", item_id=item["id"], output_index=index,
                         content_index=0, delta=piece)
                emit("response.output_text.done", item_id=item["id"], output_index=index,
                     content_index=0, text=text)
                emit("response.content_part.done", item_id=item["id"], output_index=index,
                     content_index=0, part={**part, "text": text})
            elif kind == "function_call":
                emit("response.output_item.added", output_index=index,
                     item={**item, "arguments": "", "status": "in_progress"})
                for piece in _pieces(item["arguments"]):
                    emit("response.function_call_arguments.delta", item_id=item["id"],
                         output_index=index, delta=piece)
                emit("response.function_call_arguments.done", item_id=item["id"],
                     output_index=index, arguments=item["arguments"])
            else:
                emit("response.output_item.added", output_index=index,
                     item={**item, "summary": []})
                summary = item["summary"][0]["text"]
                emit("response.reasoning_summary_part.added", item_id=item["id"],
                     output_index=index, summary_index=0,
                     part={"type": "summary_text", "text": ""})
                for piece in _pieces(summary):
                    emit("response.reasoning_summary_text.delta", item_id=item["id"],
                         output_index=index, summary_index=0, delta=piece)
                emit("response.reasoning_summary_text.done", item_id=item["id"],
                     output_index=index, summary_index=0, text=summary)
            emit("response.output_item.done", output_index=index, item=item)
        final = self._response(turn, model, rid, created, "completed", items)
        if turn.finish == "length":
            final["status"] = "incomplete"
            emit("response.incomplete", response=final)
        else:
            emit("response.completed", response=final)
        return out

    def usage_of(self, response: dict[str, Any]) -> Usage:
        return parse_usage(response.get("usage"))

    def collector(self) -> ResponsesCollector:
        return ResponsesCollector()

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return openai_error_body(status, message)


class ResponsesCollector:
    """The final response.completed event carries the whole response; keep items otherwise."""

    def __init__(self) -> None:
        self.final: dict[str, Any] | None = None
        self.items: dict[int, dict[str, Any]] = {}

    def add(self, event: str | None, data: str) -> None:
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            return
        kind = obj.get("type") or event
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = obj.get("response") or {}
        elif kind == "response.output_item.done":
            self.items[int(obj.get("output_index", len(self.items)))] = obj.get("item") or {}

    def result(self) -> dict[str, Any]:
        if self.final is not None:
            return self.final
        return {"object": "response", "status": "interrupted",
                "output": [i for _, i in sorted(self.items.items())]}

    def usage(self) -> Usage:
        return parse_usage((self.final or {}).get("usage"))
