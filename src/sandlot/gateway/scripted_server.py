"""A scripted model served as a stand-alone HTTP provider (no sandlot keys).

It plays the upstream in tests and benchmarks: the gateway relays to it exactly as to a
real provider (`--model openai/<id> --api-base http://127.0.0.1:PORT/v1`), so the relay,
retries and LiteLLM translation are exercised over real HTTP. `required_key`, when set,
is checked like a provider would, to prove the real key reaches the provider and only it;
`served_models`, when set, answers any other model name with 404 as a provider does.
`pace`, when set, spaces a streamed answer's chunks like a model generating it, so a
benchmark sees the gateway under many slow streams rather than a flood of instant ones.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sandlot.gateway.formats import FORMATS
from sandlot.gateway.scripted import ScriptedModel
from sandlot.gateway.upstream import CallContext, ScriptedUpstream, StreamCut

PATHS = {"/v1/chat/completions": "chat", "/v1/messages": "messages", "/v1/responses": "responses"}


@dataclass(frozen=True)
class StreamPace:
    """Seconds before a streamed answer's first chunk, and between the chunks after it."""

    first_chunk_sec: float
    between_chunks_sec: float


class ScriptedServer:
    def __init__(self, model: ScriptedModel, required_key: str | None = None,
                 served_models: frozenset[str] | None = None,
                 pace: StreamPace | None = None) -> None:
        self.upstream = ScriptedUpstream(model)
        self.pace = pace
        self.required_key = required_key
        self.served_models = served_models
        self.seen_keys: list[str] = []
        #: Every request body received, in order: what reached the provider.
        self.seen_bodies: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for path in PATHS:
            app.router.add_post(path, self._handle)
        app.router.add_post("/v1beta/models/{target:.+}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(512)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        fmt = FORMATS[PATHS.get(request.path, "gemini")]
        key = (request.headers.get("x-api-key") or request.headers.get("x-goog-api-key")
               or request.headers.get("authorization", "").removeprefix("Bearer ").strip())
        self.seen_keys.append(key)
        if self.required_key is not None and key != self.required_key:
            return web.json_response(fmt.error_body(401, "bad provider key"), status=401)
        body: dict[str, Any] = await request.json()
        self.seen_bodies.append(body)
        if fmt.name == "gemini":  # Google's: the model and the method are in the path
            model, _, method = request.match_info["target"].rpartition(":")
            body = {**body, "model": model, "stream": method == "streamGenerateContent"}
        if self.served_models is not None and body.get("model") not in self.served_models:
            message = f"The model `{body.get('model')}` does not exist"
            return web.json_response(fmt.error_body(404, message), status=404)
        task = request.headers.get("x-sandlot-task")
        reply = await self.upstream.send(fmt, request.path, body, {},
                                         CallContext("upstream", task, str(body.get("model"))))
        if reply.stream is None:
            return web.json_response(reply.json_body, status=reply.status, headers=reply.headers)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            pace, first = self.pace, True
            async for chunk in reply.stream:
                if pace is not None:
                    await asyncio.sleep(pace.first_chunk_sec if first
                                        else pace.between_chunks_sec)
                    first = False
                await response.write(chunk)
        except StreamCut:
            if request.transport is not None:
                request.transport.close()
            return response
        await response.write_eof()
        return response
