"""What the three wire formats share: a model turn, a request view, usage, SSE framing."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FormatName = Literal["chat", "messages", "responses", "gemini"]


@dataclass
class Usage:
    """Token usage of one exchange (or a sum). Input includes cached tokens."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens,
                "reasoning_tokens": self.reasoning_tokens, "total_tokens": self.total_tokens}


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class ModelTurn:
    """One model answer, independent of the wire format it is sent in."""

    text: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    #: stop | tool_calls | length
    finish: str = "stop"


@dataclass
class ToolSpec:
    name: str
    parameters: dict[str, Any]


@dataclass
class RequestView:
    """What a scripted model needs to know about a request, in any format."""

    model: str
    stream: bool
    tools: list[ToolSpec]
    #: Model answers already in the conversation: the index of the turn to produce now.
    n_assistant_turns: int
    last_tool_result: str | None
    include_usage: bool = True
    #: Text of the latest user message (a prompt or repair feedback), tool results aside.
    last_user_text: str | None = None


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def openai_error_body(status: int, message: str) -> dict[str, Any]:
    """OpenAI's error shape, shared by Chat Completions and Responses."""
    kind = {401: "invalid_request_error", 402: "insufficient_quota",
            429: "rate_limit_exceeded"}.get(status, "server_error")
    # OpenAI's own clients stop (not retry) on the code "insufficient_quota".
    code = "insufficient_quota" if status == 402 else str(status)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def pieces(text: str, size: int = 24) -> list[str]:
    """Split text into stream-sized deltas, as a provider's tokens would arrive."""
    return [text[i:i + size] for i in range(0, len(text), size)] if text else []


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def iter_sse(buffer: bytes) -> Iterator[tuple[str | None, str]]:
    """Split complete SSE events out of `buffer` (used on whole bodies)."""
    for block in buffer.replace(b"\r\n", b"\n").split(b"\n\n"):
        event: str | None = None
        data: list[str] = []
        for line in block.decode(errors="replace").split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data:
            yield event, "\n".join(data)


class SSEParser:
    """Incremental SSE parser: feed bytes, get (event, data) pairs as they complete."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        self._buf += chunk.replace(b"\r\n", b"\n")
        out: list[tuple[str | None, str]] = []
        while b"\n\n" in self._buf:
            block, self._buf = self._buf.split(b"\n\n", 1)
            out.extend(iter_sse(block + b"\n\n"))
        return out


def text_of(content: Any, image: str | None = None) -> str:
    """Flatten a message content (string or list of parts) to its text; an image part
    becomes `image` when given (a reader's placeholder), else nothing."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    parts.append(part["text"])
                elif image is not None and "image" in str(part.get("type", "")):
                    parts.append(image)
                elif "content" in part:
                    parts.append(text_of(part["content"], image))
                elif isinstance(part.get("output"), str):
                    parts.append(part["output"])
        return "\n".join(parts)
    if isinstance(content, dict):
        return text_of([content], image)
    return str(content)


class WireFormat(Protocol):
    """One wire format: read requests, write turns, and read responses back for capture."""

    name: FormatName

    def view(self, body: dict[str, Any]) -> RequestView: ...

    def encode(self, turn: ModelTurn, model: str) -> dict[str, Any]: ...

    def encode_stream(self, turn: ModelTurn, model: str, include_usage: bool) -> list[bytes]: ...

    def usage_of(self, response: dict[str, Any]) -> Usage: ...

    def collector(self) -> StreamCollector: ...

    def error_body(self, status: int, message: str) -> dict[str, Any]: ...


class StreamCollector(Protocol):
    """Reassembles a streamed answer from its SSE events, for the trajectory and usage."""

    def add(self, event: str | None, data: str) -> None: ...

    def result(self) -> dict[str, Any]: ...

    def usage(self) -> Usage: ...
