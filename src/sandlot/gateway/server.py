"""The LLM gateway: one aiohttp server per job, one key (and socket) per trial.

Every model request of every agent comes through here: it is authenticated by the
trial's key, relayed to the job's upstream (retrying 429/5xx with backoff), streamed
back as it arrives, and recorded with its usage in the trial's llm_trajectory.jsonl.
The provider key stays in this process; agents only ever hold their trial's key.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from sandlot.gateway.budget import BUDGET_STATUS, Budget, JobSpend
from sandlot.gateway.faults import FATAL_FAULTS
from sandlot.gateway.formats import FORMATS, SSEParser, WireFormat
from sandlot.gateway.formats.base import Usage
from sandlot.gateway.generation import (
    GenerationSettings,
    SentSettings,
    agent_values,
    apply_generation,
)
from sandlot.gateway.health import ProviderFailure, ProviderHealth
from sandlot.gateway.netns import listen_in_netns, netns_cookie
from sandlot.gateway.prices import PriceTable
from sandlot.gateway.routing import Router, key_env
from sandlot.gateway.trajectory import TrajectoryLog
from sandlot.gateway.upstream import RETRYABLE_STATUS, CallContext, UpstreamReply
from sandlot.gateway.usage import LiveUsage

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/messages": "messages",
             "/v1/responses": "responses"}
GEMINI_PREFIXES = ("/v1beta", "/v1")
GEMINI_METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def new_trial_key() -> str:
    """A trial's key to the gateway: unguessable, and nothing like a provider's key."""
    return "sk-sandlot-" + secrets.token_hex(24)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    backoff_base_sec: float = 0.5
    backoff_max_sec: float = 20.0
    #: A Retry-After longer than this is not waited for: the error goes to the agent.
    retry_after_max_sec: float = 60.0

    def delay(self, attempt: int, retry_after: str | None) -> float | None:
        """Seconds to wait before retry `attempt` (1-based), or None to give up now."""
        if retry_after is not None:
            try:
                wanted = float(retry_after)
            except ValueError:
                wanted = None
            if wanted is not None:
                return wanted if wanted <= self.retry_after_max_sec else None
        base = min(self.backoff_max_sec, self.backoff_base_sec * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)


@dataclass
class TrialSession:
    """A trial's access to the gateway: its key, its counters, its trajectory file."""

    trial: str
    task: str | None
    key: str
    trajectory: TrajectoryLog
    usage: LiveUsage = field(default_factory=LiveUsage)
    limit: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))
    sites: list[web.SockSite] = field(default_factory=list)
    open: bool = True
    seq: int = 0
    #: Port the sandbox reaches the gateway on (127.0.0.1 inside its network namespace).
    sandbox_port: int | None = None
    #: The network namespace of that listener: requests arriving from it must carry this
    #: trial's key, not another live trial's.
    netns_cookie: int | None = None
    #: Set when one of this trial's requests met the answer that stops the job (a refused
    #: key, an unknown model): the trial's outcome is the provider's, not the agent's.
    provider_failure: ProviderFailure | None = None
    #: The trial's spend limit, and why its first refused request was refused (set once).
    budget: Budget = field(default_factory=Budget)
    budget_refusal: str | None = None
    #: Set with `budget_refusal`: the trial gives its agent a moment to stop, then ends it.
    budget_spent: asyncio.Event = field(default_factory=asyncio.Event)
    n_budget_refused: int = 0
    #: The generation settings the trial's agent sent (before the job's flags were applied).
    sent_settings: SentSettings = field(default_factory=SentSettings)
    #: The wire formats the trial's agent spoke.
    formats: set[str] = field(default_factory=set)

    @property
    def trajectory_path(self) -> Path:
        return self.trajectory.path


class Gateway:
    """Start once per job (`start`), then `open_trial` / `close_trial` around each agent."""

    def __init__(self, router: Router, prices: PriceTable | None = None,
                 retry: RetryPolicy | None = None, per_trial_concurrency: int = 8,
                 job_budget: Budget | None = None,
                 generation: GenerationSettings | None = None) -> None:
        self.router = router
        #: Set on every request (the flag wins over the agent's value; see generation.py).
        self.generation = generation or GenerationSettings()
        #: Every trial's spend (and, on resume, the earlier run's) against the job's budget.
        self.job_spend = JobSpend(job_budget or Budget())
        self.prices = prices or PriceTable(extra=router.extra_prices())
        self.retry = retry or RetryPolicy()
        self.per_trial_concurrency = per_trial_concurrency
        #: The provider's state across trials: the fault that stops the job, rate limits.
        self.health = ProviderHealth(model=router.config.model, key_env=key_env(router.config))
        self._sessions: dict[str, TrialSession] = {}
        #: A sandbox's network namespace (its cookie) -> the key of the trial it belongs to.
        self._netns_keys: dict[int, str] = {}
        self._runner: web.AppRunner | None = None
        self.host_port: int | None = None

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for path in ENDPOINTS:
            app.router.add_post(path, self._handle)
        app.router.add_get("/v1/models", self._models)
        # Google's generateContent family: the model and the method are in the path.
        for prefix in GEMINI_PREFIXES:
            app.router.add_post(prefix + "/models/{target:.+}", self._handle_gemini)
        app.router.add_get("/v1beta/models", self._models)
        app.router.add_get("/", self._ping)
        # handler_cancellation: an agent that hangs up cancels its request at once, so a
        # silent (reasoning) upstream call is cancelled too instead of running on.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     handler_cancellation=True)
        await self._runner.setup()
        # A host-side listener on loopback, for agents that run in sandlot's own process
        # (the built-in agent) and for benchmarks; keys still guard it.
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(512)
        sock.setblocking(False)
        self.host_port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        for session in list(self._sessions.values()):
            await self.close_trial(session)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.router.aclose()

    @property
    def host_base_url(self) -> str:
        return f"http://127.0.0.1:{self.host_port}"

    async def open_trial(self, trial: str, task: str | None, trajectory_dir: Path,
                         netns_path: str | None = None,
                         budget: Budget | None = None, key: str | None = None) -> TrialSession:
        """A fresh key for `trial` (or `key`, minted by the caller: a cluster's driver);
        with `netns_path`, also a listener inside that netns."""
        key = key or new_trial_key()
        if key in self._sessions:
            raise ValueError(f"the key of trial {trial!r} is already in use")
        trajectory_dir.mkdir(parents=True, exist_ok=True)
        session = TrialSession(trial=trial, task=task, key=key,
                               trajectory=TrajectoryLog(trajectory_dir / "llm_trajectory.jsonl"),
                               limit=asyncio.Semaphore(self.per_trial_concurrency),
                               budget=budget or Budget())
        self._sessions[session.key] = session
        if netns_path is not None:
            assert self._runner is not None, "start() the gateway first"
            sock = await asyncio.to_thread(listen_in_netns, netns_path)
            site = web.SockSite(self._runner, sock)
            await site.start()
            session.sites.append(site)
            session.sandbox_port = sock.getsockname()[1]
            session.netns_cookie = netns_cookie(sock)
            if session.netns_cookie is not None:
                self._netns_keys[session.netns_cookie] = session.key
        return session

    async def close_trial(self, session: TrialSession) -> None:
        """Revoke the key and stop the trial's listeners; later requests get 401."""
        session.open = False
        self._sessions.pop(session.key, None)
        session.trajectory.close()
        if session.netns_cookie is not None and \
                self._netns_keys.get(session.netns_cookie) == session.key:
            del self._netns_keys[session.netns_cookie]
        for site in session.sites:
            with contextlib.suppress(Exception):
                await site.stop()
        session.sites.clear()

    # -- handlers ---------------------------------------------------------------------

    async def _ping(self, request: web.Request) -> web.Response:
        return web.Response(text="sandlot gateway")

    def _session_for(self, request: web.Request) -> TrialSession | None:
        key = (request.headers.get("x-api-key") or request.headers.get("api-key")
               or request.headers.get("x-goog-api-key") or request.query.get("key"))
        auth = request.headers.get("authorization", "")
        if not key and auth.lower().startswith("bearer "):
            key = auth[7:].strip()
        session = self._sessions.get(key or "")
        if session is None or not session.open:
            return None
        if self._netns_keys and request.transport is not None:
            # A key is good only from its own sandbox: a request arriving through another
            # trial's listener (a leaked key, say) is refused like a wrong key.
            owner = self._netns_keys.get(netns_cookie(  # type: ignore[arg-type]
                request.transport.get_extra_info("socket")) or -1)
            if owner is not None and owner != session.key:
                return None
        return session

    async def _models(self, request: web.Request) -> web.Response:
        if self._session_for(request) is None:
            return web.json_response(FORMATS["chat"].error_body(401, "invalid sandlot key"),
                                     status=401)
        model = self.router.config.model
        return web.json_response({"object": "list", "data": [
            {"id": model, "object": "model", "created": 0, "owned_by": "sandlot"},
            {"id": self.router.model_id, "object": "model", "created": 0,
             "owned_by": "sandlot"}]})

    async def _admit(self, request: web.Request, fmt: WireFormat,
                     ) -> tuple[TrialSession, dict[str, Any]] | web.Response:
        """The request's trial and JSON body, or the 401/400 answer in `fmt`'s shape."""
        session = self._session_for(request)
        if session is None:
            return web.json_response(
                fmt.error_body(401, "invalid or expired sandlot key for this gateway"),
                status=401)
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as exc:
            return web.json_response(fmt.error_body(400, f"invalid JSON body: {exc}"),
                                     status=400)
        return session, body

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        fmt = FORMATS[ENDPOINTS[request.path]]
        admitted = await self._admit(request, fmt)
        if isinstance(admitted, web.Response):
            return admitted
        session, body = admitted
        async with session.limit:
            return await self._exchange(request, session, fmt, body)

    async def _handle_gemini(self, request: web.Request) -> web.StreamResponse:
        """POST {prefix}/models/{model}:{method}: generateContent, streamGenerateContent
        (SSE), or countTokens (answered here with an estimate; not a model call)."""
        fmt = FORMATS["gemini"]
        model, _, method = request.match_info["target"].rpartition(":")
        if method not in GEMINI_METHODS or not model:
            return web.json_response(fmt.error_body(
                404, f"unknown method {method!r}: use generateContent, streamGenerateContent "
                "or countTokens"), status=404)
        admitted = await self._admit(request, fmt)
        if isinstance(admitted, web.Response):
            return admitted
        session, body = admitted
        if method == "countTokens":
            request_body = body.get("generateContentRequest") or body
            return web.json_response(
                {"totalTokens": max(1, len(json.dumps(request_body)) // 4)})
        body = {**body, "model": model, "stream": method == "streamGenerateContent"}
        async with session.limit:
            return await self._exchange(request, session, fmt, body)

    async def _exchange(self, request: web.Request, session: TrialSession, fmt: WireFormat,
                        body: dict[str, Any]) -> web.StreamResponse:
        started = time.monotonic()
        started_at = time.time()
        session.seq += 1
        found = agent_values(fmt.name, body)
        body, changed = apply_generation(self.generation, fmt.name, body)
        session.sent_settings.add(found, bool(changed))
        session.formats.add(fmt.name)
        record: dict[str, Any] = {
            "seq": session.seq, "trial": session.trial, "format": fmt.name,
            "endpoint": request.path, "requested_model": body.get("model"),
            "model": self.router.config.model, "stream": bool(body.get("stream")),
            "started_at": started_at, "request": body,
        }
        if changed:
            record["generation"] = changed
        ctx = CallContext(session.trial, session.task, self.router.config.model)
        headers = {k.lower(): v for k, v in request.headers.items()}
        session.usage.begin()
        usage, ok = Usage(), False
        progress = [0]  # live-estimate chars added so far, taken back when the call ends
        try:
            if (failure := self.health.fatal) is not None:
                # The provider already refused the key or the model: do not ask it again.
                session.provider_failure = failure
                record["status"] = failure.status
                record["upstream_error"] = f"not sent: {failure.message}"
                return web.json_response(fmt.error_body(failure.status, failure.message),
                                         status=failure.status)
            if (refusal := self._over_budget(session)) is not None:
                record["status"] = BUDGET_STATUS
                record["upstream_error"] = f"not sent: {refusal}"
                return web.json_response(fmt.error_body(BUDGET_STATUS, refusal),
                                         status=BUDGET_STATUS)
            upstream = self.router.upstream(fmt.name)
            reply, attempts, errors = await self._send_with_retries(
                upstream, fmt, request.path, body, headers, ctx, session)
            record["attempts"] = attempts
            if errors:
                record["retried_errors"] = errors
            record["status"] = reply.status
            if reply.stream is None:
                response_body = reply.json_body or {}
                record["latency_sec"] = round(time.monotonic() - started, 6)
                record["response"] = response_body
                if reply.status < 400:
                    usage = fmt.usage_of(response_body)
                    ok = True
                else:
                    record["upstream_error"] = reply.error
                out_headers = {k: v for k, v in reply.headers.items()
                               if k.lower() == "retry-after"}
                if reply.raw_body is not None:
                    return web.Response(body=reply.raw_body, status=reply.status,
                                        headers=out_headers, content_type="application/json")
                return web.json_response(response_body, status=reply.status,
                                         headers=out_headers)
            response, usage, ok = await self._relay_stream(
                request, session, fmt, reply, record, started, progress)
            return response
        finally:
            cost = self.prices.cost(self.router.config.model, usage) if ok else None
            record["usage"] = usage.as_dict()
            record["cost_usd"] = cost
            record.setdefault("latency_sec", round(time.monotonic() - started, 6))
            session.usage.finish(usage, cost, progress[0], ok)
            self.job_spend.add(usage.total_tokens, cost)
            session.trajectory.append(record)

    def _over_budget(self, session: TrialSession) -> str | None:
        """Why a request may not go out now (the job's or the trial's budget is spent),
        said to the agent; the trial learns of it through its session."""
        reason = self.job_spend.reason
        if reason is None:
            totals = session.usage.totals
            how = session.budget.reached(totals.total_tokens, totals.cost_usd)
            if how is None:
                return None
            reason = (f"this trial's budget ({session.budget.describe()}) was reached: "
                      f"{how} spent")
            if session.budget_refusal is None:
                session.budget_refusal = reason
                session.budget_spent.set()
        session.n_budget_refused += 1
        return (f"sandlot: {reason}; no more model requests are answered in this trial. "
                "Stop now: your work is scored as it is.")

    async def _send_with_retries(self, upstream: Any, fmt: WireFormat, path: str,
                                 body: dict[str, Any], headers: dict[str, str],
                                 ctx: CallContext, session: TrialSession,
                                 ) -> tuple[UpstreamReply, int, list[str]]:
        """Retries 429/5xx with jittered backoff; every answer is classified on the way, so
        a refused key or an unknown model stops the job (see ProviderHealth)."""
        errors: list[str] = []
        attempt = 0
        while True:
            attempt += 1
            reply = await upstream.send(fmt, path, body, headers, ctx)
            fault = self.health.observe(reply.status, reply.error)
            if fault == "rate_limited":
                session.usage.rate_limited()
            if fault in FATAL_FAULTS:
                session.provider_failure = self.health.fatal
            if reply.status not in RETRYABLE_STATUS or attempt > self.retry.max_retries:
                return reply, attempt, errors
            delay = self.retry.delay(attempt, reply.headers.get("retry-after"))
            if delay is None:
                return reply, attempt, errors
            errors.append(f"HTTP {reply.status}: {(reply.error or '')[:300]}")
            await reply.aclose()
            session.usage.waiting(+1)
            self.health.waiting(+1)
            try:
                await asyncio.sleep(delay)
            finally:
                session.usage.waiting(-1)
                self.health.waiting(-1)

    async def _relay_stream(self, request: web.Request, session: TrialSession,
                            fmt: WireFormat, reply: UpstreamReply,
                            record: dict[str, Any], started: float, progress: list[int],
                            ) -> tuple[web.StreamResponse, Usage, bool]:
        assert reply.stream is not None
        response = web.StreamResponse(status=200, headers={
            "content-type": "text/event-stream", "cache-control": "no-cache"})
        await response.prepare(request)
        parser, collector = SSEParser(), fmt.collector()
        ok = False
        finished = False
        try:
            async for chunk in reply.stream:
                if "ttft_sec" not in record:
                    record["ttft_sec"] = round(time.monotonic() - started, 6)
                payload = 0
                for event, data in parser.feed(chunk):
                    collector.add(event, data)
                    payload += len(data)
                    finished = finished or _is_terminal(event, data)
                # A live estimate only (JSON framing included); the final usage replaces it.
                progress[0] += payload // 3
                session.usage.stream_progress(payload // 3)
                await response.write(chunk)
            ok = True
        except (ConnectionResetError, asyncio.CancelledError) as exc:
            # The agent went away: stop the upstream call too (closing its stream).
            record["error"] = f"client disconnected: {type(exc).__name__}"
            await reply.aclose()
            if isinstance(exc, asyncio.CancelledError):
                raise
        except Exception as exc:  # a cut or failed upstream stream
            await reply.aclose()
            if finished:
                # The answer was complete (its terminal event went out): a failure after
                # it, e.g. in a translation layer's cleanup, does not cut the stream.
                record["warning"] = f"after the stream ended: {type(exc).__name__}: {exc}"
                ok = True
            else:
                record["error"] = f"upstream stream failed: {type(exc).__name__}: {exc}"
                # Close without the terminating chunk, as a dropped provider connection would.
                if request.transport is not None:
                    request.transport.close()
        finally:
            record["latency_sec"] = round(time.monotonic() - started, 6)
            record["response"] = collector.result()
        usage = collector.usage()
        if ok:
            with contextlib.suppress(ConnectionResetError):
                await response.write_eof()
        return response, usage, ok


TERMINAL_EVENTS = frozenset({"message_stop", "response.completed", "response.incomplete",
                             "response.failed"})


def _is_terminal(event: str | None, data: str) -> bool:
    """The last event of an answer in any of the four formats."""
    if data.strip() == "[DONE]" or event in TERMINAL_EVENTS or '"finishReason"' in data:
        return True
    return '"type":"message_stop"' in data.replace(" ", "") if event is None else False
