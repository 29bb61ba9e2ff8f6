"""Google's generateContent: /v1beta/models/{model}:generateContent and
:streamGenerateContent (SSE with `alt=sse`), as gemini-cli and the google-genai SDKs send.

The model and whether to stream are in the URL, not the body: the gateway's route copies
them into the body as `model` and `stream` before the format sees it (and the upstreams
drop them again). A streamed answer is a series of partial GenerateContentResponse
objects; `usageMetadata` in them is cumulative, so the last one counts.
"""

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
)
from sandlot.gateway.formats.base import (
    pieces as _pieces,
)

FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}
#: Google's error `status` names by HTTP status.
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 402: "FAILED_PRECONDITION",
                403: "PERMISSION_DENIED",
                404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
#: Keys the gateway adds to the body (from the URL); never sent to a provider.
ROUTE_KEYS = ("model", "stream")


def _usage_json(u: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {"promptTokenCount": u.input_tokens,
                           "candidatesTokenCount": u.output_tokens - u.reasoning_tokens,
                           "totalTokenCount": u.total_tokens}
    if u.reasoning_tokens:
        out["thoughtsTokenCount"] = u.reasoning_tokens
    if u.cache_read_tokens:
        out["cachedContentTokenCount"] = u.cache_read_tokens
    return out


def parse_usage(raw: dict[str, Any] | None) -> Usage:
    """Output counts the thoughts too (they are billed as output), as OpenAI's does."""
    if not raw:
        return Usage()
    thoughts = int(raw.get("thoughtsTokenCount") or 0)
    return Usage(
        input_tokens=int(raw.get("promptTokenCount") or 0)
        + int(raw.get("toolUsePromptTokenCount") or 0),
        output_tokens=int(raw.get("candidatesTokenCount") or 0) + thoughts,
        cache_read_tokens=int(raw.get("cachedContentTokenCount") or 0),
        reasoning_tokens=thoughts,
    )


def _parts_text(parts: list[Any]) -> str:
    return "\n".join(p["text"] for p in parts
                     if isinstance(p, dict) and isinstance(p.get("text"), str)
                     and not p.get("thought"))


def response_text(response: Any) -> str:
    """A functionResponse's payload as the text a tool printed."""
    if isinstance(response, dict):
        for key in ("output", "content", "result"):
            if isinstance(response.get(key), str):
                return response[key]
        if "error" in response:
            return str(response["error"])
    return json.dumps(response)


def _contents(body: dict[str, Any]) -> list[dict[str, Any]]:
    contents = body.get("contents") or []
    if isinstance(contents, dict):  # one Content instead of a list
        contents = [contents]
    return [c for c in contents if isinstance(c, dict)]


class GeminiFormat:
    name = "gemini"

    def view(self, body: dict[str, Any]) -> RequestView:
        contents = _contents(body)
        n_model = sum(1 for c in contents if c.get("role") == "model")

        def responses(content: dict[str, Any]) -> list[dict[str, Any]]:
            return [p["functionResponse"] for p in content.get("parts") or []
                    if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]

        last_tool = None
        if contents and contents[-1].get("role", "user") == "user" and responses(contents[-1]):
            last_tool = "\n".join(response_text(r.get("response"))
                                  for r in responses(contents[-1]))
        prompts = [c for c in contents if c.get("role", "user") == "user"
                   and not responses(c) and _parts_text(c.get("parts") or [])]
        last_user = _parts_text(prompts[-1].get("parts") or []) if prompts else None
        tools = []
        for tool in body.get("tools") or []:
            for decl in (tool or {}).get("functionDeclarations") or []:
                if isinstance(decl, dict) and decl.get("name"):
                    params = decl.get("parametersJsonSchema") or decl.get("parameters") or {}
                    tools.append(ToolSpec(decl["name"], params))
        return RequestView(model=str(body.get("model", "")), stream=bool(body.get("stream")),
                           tools=tools, n_assistant_turns=n_model, last_tool_result=last_tool,
                           include_usage=True, last_user_text=last_user)

    @staticmethod
    def _parts(turn: ModelTurn) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        if turn.thinking:
            parts.append({"text": turn.thinking, "thought": True})
        if turn.text:
            parts.append({"text": turn.text})
        for call in turn.tool_calls:
            parts.append({"functionCall": {"id": call.id, "name": call.name,
                                           "args": call.arguments}})
        return parts

    def encode(self, turn: ModelTurn, model: str) -> dict[str, Any]:
        return {"candidates": [{"content": {"role": "model", "parts": self._parts(turn)},
                                "finishReason": FINISH.get(turn.finish, "STOP"),
                                "index": 0}],
                "usageMetadata": _usage_json(turn.usage), "modelVersion": model,
                "responseId": new_id("resp-")}

    def encode_stream(self, turn: ModelTurn, model: str, include_usage: bool) -> list[bytes]:
        rid = new_id("resp-")

        def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts},
                                         "index": 0}
            body: dict[str, Any] = {"candidates": [candidate], "modelVersion": model,
                                    "responseId": rid}
            if finish is not None:
                candidate["finishReason"] = finish
                body["usageMetadata"] = _usage_json(turn.usage)
            return sse(body)

        out = [chunk([{"text": piece, "thought": True}]) for piece in _pieces(turn.thinking)]
        out += [chunk([{"text": piece}]) for piece in _pieces(turn.text)]
        calls = [{"functionCall": {"id": c.id, "name": c.name, "args": c.arguments}}
                 for c in turn.tool_calls]
        # Google sends a call whole, never in pieces; the last chunk carries the finish.
        out.append(chunk(calls, FINISH.get(turn.finish, "STOP")))
        return out

    def usage_of(self, response: dict[str, Any]) -> Usage:
        return parse_usage(response.get("usageMetadata"))

    def collector(self) -> GeminiCollector:
        return GeminiCollector()

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"code": status, "message": message,
                          "status": STATUS_NAMES.get(status, "UNKNOWN")}}


class GeminiCollector:
    """Rebuilds one GenerateContentResponse from the streamed partial ones."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.finish: str | None = None
        self.model = ""
        self._usage: dict[str, Any] | None = None

    def add(self, event: str | None, data: str) -> None:
        try:
            obj = json.loads(data)
        except json.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        self.model = self.model or str(obj.get("modelVersion") or "")
        if obj.get("usageMetadata"):
            self._usage = obj["usageMetadata"]
        for candidate in obj.get("candidates") or []:
            for part in (candidate.get("content") or {}).get("parts") or []:
                if not isinstance(part, dict):
                    continue
                if isinstance(part.get("text"), str):
                    (self.thoughts if part.get("thought") else self.text).append(part["text"])
                if isinstance(part.get("functionCall"), dict):
                    self.calls.append(part["functionCall"])
            if candidate.get("finishReason"):
                self.finish = candidate["finishReason"]

    def result(self) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if self.thoughts:
            parts.append({"text": "".join(self.thoughts), "thought": True})
        if self.text:
            parts.append({"text": "".join(self.text)})
        parts += [{"functionCall": c} for c in self.calls]
        return {"candidates": [{"content": {"role": "model", "parts": parts},
                                "finishReason": self.finish, "index": 0}],
                "usageMetadata": self._usage, "modelVersion": self.model}

    def usage(self) -> Usage:
        return parse_usage(self._usage)
