"""Where the gateway sends a request: the scripted model, a same-format HTTP provider
(passed through byte for byte), or LiteLLM when the formats differ or the provider is exotic.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from sandlot.gateway.formats import FORMATS, WireFormat
from sandlot.gateway.formats.base import RequestView, sse
from sandlot.gateway.formats.gemini import ROUTE_KEYS as GEMINI_ROUTE_KEYS
from sandlot.gateway.scripted import Fault, ScriptedModel, pick_turn, render_turn

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


@dataclass
class UpstreamReply:
    """A provider's answer before the gateway relays it: a status, and JSON or a stream."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    json_body: dict[str, Any] | None = None
    #: The provider's JSON answer as it came (decompressed), relayed to the agent as is
    #: instead of serialized again from `json_body`. None for answers made here.
    raw_body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    #: Error text from the provider or the transport, for the trajectory.
    error: str | None = None

    async def aclose(self) -> None:
        if self.stream is not None and hasattr(self.stream, "aclose"):
            await self.stream.aclose()


@dataclass(frozen=True)
class CallContext:
    """What an upstream may know about the caller: the trial and its task."""

    trial: str
    task: str | None
    model: str


class Upstream(Protocol):
    """One provider route. `send` never raises for provider errors: it returns them."""

    async def send(self, fmt: WireFormat, path: str, body: dict[str, Any],
                   headers: dict[str, str], ctx: CallContext) -> UpstreamReply: ...

    async def aclose(self) -> None: ...


class StreamCut(Exception):
    """A scripted fault: the stream stops midway, as when a provider drops a connection."""


class ScriptedUpstream:
    """Serves a ScriptedModel in-process in whichever format the request came in."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self._faults_served: dict[tuple[str, int], int] = {}

    async def send(self, fmt: WireFormat, path: str, body: dict[str, Any],
                   headers: dict[str, str], ctx: CallContext) -> UpstreamReply:
        view: RequestView = fmt.view(body)
        script = self.model.script_for(ctx.task)
        turn = pick_turn(script, view, ctx.task)
        fault = turn.fault if turn is not None else None
        if fault is not None:
            key = (ctx.trial, view.n_assistant_turns)
            served = self._faults_served.get(key, 0)
            if served < fault.times:
                self._faults_served[key] = served + 1
                reply = await self._fault(fmt, fault)
                if reply is not None:
                    return reply
            else:
                fault = None
        model_turn = render_turn(turn, script, view, len(json.dumps(body)))
        name = view.model or ctx.model
        if not view.stream:
            return UpstreamReply(200, json_body=fmt.encode(model_turn, name))
        events = fmt.encode_stream(model_turn, name, view.include_usage or True)
        cut = fault is not None and fault.kind == "cut"
        return UpstreamReply(200, {"content-type": "text/event-stream"},
                             stream=_replay(events, cut))

    async def _fault(self, fmt: WireFormat, fault: Fault) -> UpstreamReply | None:
        if fault.kind == "stall":
            await asyncio.sleep(fault.seconds)
            return None
        if fault.kind == "cut":
            return None
        status = int(fault.kind)
        headers = {}
        if fault.retry_after_sec is not None:
            headers["retry-after"] = f"{fault.retry_after_sec:g}"
        message = f"scripted fault: HTTP {status}"
        return UpstreamReply(status, headers, json_body=fmt.error_body(status, message),
                             error=message)

    async def aclose(self) -> None:
        return None


async def _replay(events: list[bytes], cut: bool) -> AsyncIterator[bytes]:
    limit = max(1, len(events) // 2) if cut else len(events)
    for event in events[:limit]:
        yield event
        await asyncio.sleep(0)
    if cut:
        raise StreamCut("scripted fault: the stream was cut")


#: Same-format providers: (default base URL, env var holding the key, native format).
PASSTHROUGH: dict[str, tuple[str | None, str | None, tuple[str, ...]]] = {
    "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY", ("chat", "responses")),
    "anthropic": ("https://api.anthropic.com/v1", "ANTHROPIC_API_KEY", ("messages",)),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", ("chat",)),
    "vllm": (None, "VLLM_API_KEY", ("chat", "responses")),
    "hosted_vllm": (None, "HOSTED_VLLM_API_KEY", ("chat", "responses")),
    "openai_compatible": (None, "OPENAI_API_KEY", ("chat", "responses")),
    "gemini": ("https://generativelanguage.googleapis.com", "GEMINI_API_KEY", ("gemini",)),
}
#: Client headers a provider needs to see (versions, betas); nothing else is forwarded.
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta")


class HttpUpstream:
    """Relays a request to a provider that speaks the agent's format, streaming as it comes."""

    def __init__(self, provider: str, model_id: str, base_url: str, api_key: str | None,
                 timeout_sec: float = 600.0) -> None:
        self.provider = provider
        self.model_id = model_id
        # Request paths carry /v1 already: keep the base without it (both spellings work).
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self._api_key = api_key
        self._timeout = aiohttp.ClientTimeout(total=timeout_sec, connect=15.0)
        # aiohttp, not httpx: httpx's pool scans every connection on each request, which
        # made the relay cost ~4-12 ms CPU per request at 64 streams (benchmarks/gateway.py).
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=256, limit_per_host=256)
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector,
                                                  auto_decompress=True)
        return self._session

    def _headers(self, fmt: WireFormat, client_headers: dict[str, str]) -> dict[str, str]:
        headers = {k: v for k, v in client_headers.items() if k.lower() in FORWARDED_HEADERS}
        headers["content-type"] = "application/json"
        if self._api_key:
            if fmt.name == "messages":
                headers["x-api-key"] = self._api_key
                headers.setdefault("anthropic-version", "2023-06-01")
            elif fmt.name == "gemini":
                headers["x-goog-api-key"] = self._api_key
            else:
                headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    async def send(self, fmt: WireFormat, path: str, body: dict[str, Any],
                   headers: dict[str, str], ctx: CallContext) -> UpstreamReply:
        payload = {**body, "model": self.model_id}
        if fmt.name == "chat" and payload.get("stream"):
            # Ask for the usage chunk so the gateway can count a stream's tokens.
            payload["stream_options"] = {**(payload.get("stream_options") or {}),
                                         "include_usage": True}
        url = self.base_url + path
        if fmt.name == "gemini":
            # Google's route names the model and the method; the body carries neither.
            payload = {k: v for k, v in body.items() if k not in GEMINI_ROUTE_KEYS}
            method = "streamGenerateContent" if body.get("stream") else "generateContent"
            url = (f"{self.base_url.removesuffix('/v1beta')}/v1beta/models/"
                   f"{self.model_id}:{method}" + ("?alt=sse" if body.get("stream") else ""))
        try:
            response = await self._client().post(url, json=payload,
                                                 headers=self._headers(fmt, headers))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            message = f"cannot reach {self.provider}: {type(exc).__name__}: {exc}"
            return UpstreamReply(502, json_body=fmt.error_body(502, message), error=message)
        kept = {k.lower(): v for k, v in response.headers.items()
                if k.lower() in ("retry-after", "content-type")}
        is_stream = "text/event-stream" in response.headers.get("content-type", "")
        if response.status == 200 and is_stream:
            return UpstreamReply(200, kept, stream=_relay(response))
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            message = f"{self.provider} answer broke off: {type(exc).__name__}: {exc}"
            return UpstreamReply(502, json_body=fmt.error_body(502, message), error=message)
        finally:
            response.release()
        try:
            parsed = json.loads(raw) if raw else {}
            relayed = raw or None
        except ValueError:
            parsed = fmt.error_body(response.status, raw.decode(errors="replace")[:2000])
            relayed = None
        error = None if response.status < 400 else json.dumps(parsed)[:2000]
        return UpstreamReply(response.status, kept, json_body=parsed, raw_body=relayed,
                             error=error)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


async def _relay(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    done = False
    try:
        async for chunk in response.content.iter_any():
            yield chunk
        done = True
    finally:
        # A whole stream goes back to the pool; one cut short (the agent left) is closed,
        # which is how the provider learns to stop generating.
        response.release() if done else response.close()


class LiteLLMUpstream:
    """Any provider LiteLLM knows, translating the agent's format to the provider's."""

    def __init__(self, model: str, api_base: str | None, api_key: str | None) -> None:
        self.model = model
        # LiteLLM's Anthropic client appends /v1/messages itself; others expect .../v1.
        if api_base and model.startswith("anthropic/"):
            api_base = api_base.rstrip("/").removesuffix("/v1")
        self.api_base = api_base
        self._api_key = api_key

    @staticmethod
    def _litellm() -> Any:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        litellm.suppress_debug_info = True
        return litellm

    def _kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model}
        if self.api_base:
            out["api_base"] = self.api_base
        if self._api_key:
            out["api_key"] = self._api_key
        return out

    async def send(self, fmt: WireFormat, path: str, body: dict[str, Any],
                   headers: dict[str, str], ctx: CallContext) -> UpstreamReply:
        litellm = await asyncio.to_thread(self._litellm)
        params = {k: v for k, v in body.items() if k not in ("model", "stream_options")}
        stream = bool(params.pop("stream", False))
        try:
            if fmt.name == "chat":
                result = await litellm.acompletion(**params, **self._kwargs(), stream=stream,
                                                   stream_options={"include_usage": True}
                                                   if stream else None)
            elif fmt.name == "messages":
                result = await litellm.anthropic_messages(**params, **self._kwargs(),
                                                          stream=stream)
            elif fmt.name == "gemini":
                result = await self._generate_content(params, stream)
            else:
                result = await litellm.aresponses(**params, **self._kwargs(), stream=stream)
        except Exception as exc:  # litellm maps provider errors to exceptions with a status
            status = int(getattr(exc, "status_code", 0) or 502)
            message = f"{type(exc).__name__}: {exc}"
            return UpstreamReply(status, json_body=fmt.error_body(status, message),
                                 error=message)
        if not stream:
            data = result.model_dump() if hasattr(result, "model_dump") else dict(result)
            return UpstreamReply(200, json_body=data)
        return UpstreamReply(200, {"content-type": "text/event-stream"},
                             stream=_litellm_stream(fmt, result))

    async def _generate_content(self, params: dict[str, Any], stream: bool) -> Any:
        """Google's format to any provider, through LiteLLM's google_genai adapter."""
        from litellm.google_genai import agenerate_content, agenerate_content_stream

        extra = {key: params[key] for key in ("systemInstruction", "toolConfig")
                 if params.get(key)}
        call = agenerate_content_stream if stream else agenerate_content
        return await call(contents=params.get("contents") or [],
                          config=params.get("generationConfig") or None,
                          tools=params.get("tools") or None, **extra, **self._kwargs())

    async def aclose(self) -> None:
        return None


async def _litellm_stream(fmt: WireFormat, result: Any) -> AsyncIterator[bytes]:
    async for item in result:
        if isinstance(item, bytes | bytearray):
            yield bytes(item)
        elif isinstance(item, str):
            yield item.encode()
        else:
            data = item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else item
            event = data.get("type") if fmt.name == "responses" else None
            yield sse(data, event)
    if fmt.name == "chat":
        yield sse("[DONE]")


def format_for_path(path: str) -> WireFormat:
    name = {"/v1/chat/completions": "chat", "/v1/messages": "messages",
            "/v1/responses": "responses"}[path]
    return FORMATS[name]
