"""Faults between the gateway and its upstream, and between an agent and the gateway:
429/5xx bursts retried or surfaced in the format's own error shape, cut streams, stalls,
clients that hang up mid-stream, and one trial's load not starving another."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from aiohttp import web

from sandlot.gateway.formats.base import sse
from sandlot.gateway.server import RetryPolicy

from .gateway_support import BASH_TOOL, ant, oai, records, running_gateway, usage_sum

FAULTS = "scripted/gw-faults"
USER = [{"role": "user", "content": "go"}]
FORMATS = ("chat", "responses", "messages")


async def ask(gw: Any, key: str, fmt: str, stream: bool) -> str:
    """One request in `fmt` through the official SDK; the answer's text."""
    async with oai(gw, key) as oc, ant(gw, key) as ac:
        if fmt == "chat":
            if not stream:
                reply = await oc.chat.completions.create(model="m", messages=USER)
                return reply.choices[0].message.content or ""
            chunks = await oc.chat.completions.create(
                model="m", messages=USER, stream=True, stream_options={"include_usage": True})
            return "".join([c.choices[0].delta.content or "" async for c in chunks
                            if c.choices])
        if fmt == "responses":
            if not stream:
                return (await oc.responses.create(model="m", input="go")).output_text
            events = await oc.responses.create(model="m", input="go", stream=True)
            done = [e async for e in events if e.type == "response.completed"]
            return done[0].response.output_text
        if not stream:
            message = await ac.messages.create(model="m", max_tokens=64, messages=USER)
            return message.content[0].text
        async with ac.messages.stream(model="m", max_tokens=64, messages=USER) as st:
            return (await st.get_final_message()).content[0].text


# -- retries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_429_burst_is_retried_and_the_agent_never_sees_it(runner, tmp_path, fmt, stream):
    async def body() -> None:
        async with running_gateway(FAULTS) as gw:
            session = await gw.open_trial("t", "burst", tmp_path / "traj")
            assert await ask(gw, session.key, fmt, stream) == "Answered after the burst."
            (rec,) = records(session)
            assert rec["status"] == 200 and rec["attempts"] == 3
            assert len(rec["retried_errors"]) == 2
            assert all(e.startswith("HTTP 429") for e in rec["retried_errors"])
            assert rec["usage"]["input_tokens"] == 100 and rec["usage"]["output_tokens"] == 5
            snap = session.usage.snapshot()
            assert snap["n_requests"] == 1 and snap["input_tokens"] == 100
            assert session.usage.totals.n_errors == 0

    runner.run(body())


def test_5xx_burst_is_retried_with_backoff(runner, tmp_path):
    policy = RetryPolicy(max_retries=3, backoff_base_sec=0.05, backoff_max_sec=0.05)

    async def body() -> float:
        async with running_gateway(FAULTS, retry=policy) as gw:
            session = await gw.open_trial("t", "backoff", tmp_path / "traj")
            started = time.monotonic()
            assert await ask(gw, session.key, "chat", False) == (
                "Answered after two server errors.")
            elapsed = time.monotonic() - started
            (rec,) = records(session)
            assert rec["attempts"] == 3 and rec["status"] == 200
            assert [e[:8] for e in rec["retried_errors"]] == ["HTTP 500"] * 2
            return elapsed

    # Two waits of at least half the 0.05 s base each (jitter is 50-100 %).
    assert runner.run(body()) >= 0.05


def test_429_longer_than_the_retry_budget_reaches_the_agent_as_a_429(runner, tmp_path):
    policy = RetryPolicy(max_retries=2, backoff_base_sec=0.01, backoff_max_sec=0.01)

    async def body() -> None:
        async with running_gateway(FAULTS, retry=policy) as gw:
            trials = {fmt: await gw.open_trial(fmt, "flood", tmp_path / fmt) for fmt in FORMATS}
            async with oai(gw, trials["chat"].key) as client:
                with pytest.raises(openai.RateLimitError) as chat_err:
                    await client.chat.completions.create(model="m", messages=USER)
                with pytest.raises(openai.RateLimitError):
                    await client.chat.completions.create(model="m", messages=USER, stream=True)
            assert chat_err.value.status_code == 429
            assert chat_err.value.body["type"] == "rate_limit_exceeded"  # openai's error shape
            assert chat_err.value.response.headers.get("retry-after") == "0"
            async with oai(gw, trials["responses"].key) as client:
                with pytest.raises(openai.RateLimitError) as resp_err:
                    await client.responses.create(model="m", input="go")
            assert resp_err.value.response.json()["error"]["code"] == "429"
            async with ant(gw, trials["messages"].key) as client:
                with pytest.raises(anthropic.RateLimitError) as ant_err:
                    await client.messages.create(model="m", max_tokens=9, messages=USER)
            err_body = ant_err.value.body
            assert err_body["type"] == "error"
            assert err_body["error"]["type"] == "rate_limit_error"
            for fmt, session in trials.items():
                recs = records(session)
                assert recs, fmt
                for rec in recs:
                    assert rec["status"] == 429 and rec["attempts"] == 3, fmt
                    assert len(rec["retried_errors"]) == 2, fmt
                    assert "scripted fault: HTTP 429" in rec["upstream_error"]
                    assert rec["cost_usd"] is None and rec["usage"]["total_tokens"] == 0
                assert session.usage.totals.n_errors == len(recs)
                assert session.usage.snapshot()["n_requests"] == len(recs)

    runner.run(body())


def test_retry_after_beyond_the_bound_is_not_waited_for(runner, tmp_path):
    async def body() -> float:
        async with running_gateway(FAULTS, retry=RetryPolicy(retry_after_max_sec=60)) as gw:
            session = await gw.open_trial("t", "slowdown", tmp_path / "traj")
            started = time.monotonic()
            async with oai(gw, session.key) as client:
                with pytest.raises(openai.RateLimitError) as err:
                    await client.chat.completions.create(model="m", messages=USER)
            assert err.value.response.headers.get("retry-after") == "120"
            (rec,) = records(session)
            assert rec["attempts"] == 1 and "retried_errors" not in rec
            return time.monotonic() - started

    assert runner.run(body()) < 5


# -- broken streams and stalls ---------------------------------------------------------------


TERMINAL = {"chat": "finish", "responses": "response.completed", "messages": "message_stop"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_cut_stream_is_truncated_for_the_agent_and_recorded(runner, tmp_path, fmt):
    async def read_stream(gw: Any, key: str) -> tuple[list[str], BaseException | None]:
        seen: list[str] = []
        try:
            async with oai(gw, key) as oc, ant(gw, key) as ac:
                if fmt == "chat":
                    chunks = await oc.chat.completions.create(
                        model="m", messages=USER, tools=[BASH_TOOL], stream=True,
                        stream_options={"include_usage": True})
                    async for c in chunks:
                        seen += ["finish" if ch.finish_reason else "delta" for ch in c.choices]
                elif fmt == "responses":
                    events = await oc.responses.create(model="m", input="go", stream=True)
                    async for e in events:
                        seen.append(e.type)
                else:
                    async with ac.messages.stream(model="m", max_tokens=64,
                                                  messages=USER) as st:
                        async for event in st:
                            seen.append(event.type)
        except Exception as exc:  # any transport error is a truncation
            return seen, exc
        return seen, None

    async def body() -> None:
        async with running_gateway(FAULTS) as gw:
            session = await gw.open_trial("t", "cut", tmp_path / "traj")
            seen, error = await read_stream(gw, session.key)
            assert TERMINAL[fmt] not in seen, "a cut stream must not look complete"
            assert error is not None, "the agent must see the stream fail"
            assert seen, "the cut comes midway, after some events"
            cut, = records(session)
            assert cut["status"] == 200 and cut["stream"] is True
            assert "upstream stream failed" in cut["error"] and "StreamCut" in cut["error"]
            assert cut["cost_usd"] is None
            assert session.usage.totals.n_errors == 1
            # The fault fires once: the agent's retry gets the whole answer.
            seen, error = await read_stream(gw, session.key)
            assert error is None and TERMINAL[fmt] in seen
            recs = records(session)
            assert len(recs) == 2 and "error" not in recs[1]
            assert recs[1]["usage"]["input_tokens"] == 300
            snap = session.usage.snapshot()
            total = usage_sum(recs)
            assert all(snap[k] == total[k] for k in ("input_tokens", "output_tokens",
                                                     "n_requests"))

    runner.run(body())


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_stall_fault_delays_the_answer(runner, tmp_path, stream):
    async def body() -> float:
        async with running_gateway(FAULTS) as gw:
            session = await gw.open_trial("t", "stall", tmp_path / "traj")
            started = time.monotonic()
            assert await ask(gw, session.key, "chat", stream) == "Sorry for the wait."
            elapsed = time.monotonic() - started
            (rec,) = records(session)
            assert rec["latency_sec"] >= 1.0 and rec["attempts"] == 1
            if stream:
                assert rec["ttft_sec"] >= 1.0
            return elapsed

    assert runner.run(body()) >= 1.0


def test_one_trials_stalled_requests_do_not_block_another_trial(runner, tmp_path):
    """Per-trial concurrency: trial A's second request queues behind its stalled first;
    trial B is served at once."""

    async def timed(gw: Any, key: str, started: float) -> float:
        await ask(gw, key, "chat", False)
        return time.monotonic() - started

    async def body() -> tuple[float, float, bool]:
        async with running_gateway(FAULTS, per_trial_concurrency=1) as gw:
            a = await gw.open_trial("a", "stall", tmp_path / "a")
            b = await gw.open_trial("b", "other", tmp_path / "b")
            started = time.monotonic()
            a1 = asyncio.create_task(timed(gw, a.key, started))
            await asyncio.sleep(0.2)  # a1 now holds trial A's only slot, stalling
            a2 = asyncio.create_task(timed(gw, a.key, started))
            await timed(gw, b.key, started)
            # Order, not wall time: B is answered while A's stalled request still waits.
            b_first = not a1.done() and not a2.done()
            return await a1, await a2, b_first

    a1, a2, b_first = runner.run(body())
    assert b_first, "trial B waited for trial A's stall"
    assert a1 >= 1.0 and a2 >= 1.0, "A's second request must wait for A's first"


# -- agents that hang up ---------------------------------------------------------------------


def long_script(folder: Path) -> Path:
    """A scripted model whose answer streams as thousands of events."""
    folder.mkdir(parents=True, exist_ok=True)
    text = " ".join(f"word{i}" for i in range(60_000))
    (folder / "gw-long.toml").write_text(
        f'task = "*"\n[[turns]]\ntext = "{text}"\ninput_tokens = 7\noutput_tokens = 70000\n')
    return folder


def test_client_hanging_up_mid_stream_leaves_the_gateway_serving(runner, tmp_path):
    async def body() -> None:
        scripts = long_script(tmp_path / "scripts")
        async with running_gateway("scripted/gw-long", scripts_dirs=(scripts,)) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            headers = {"authorization": f"Bearer {session.key}"}
            request = {"model": "m", "messages": USER, "stream": True}
            async with httpx.AsyncClient(base_url=gw.host_base_url, headers=headers) as raw, \
                    raw.stream("POST", "/v1/chat/completions", json=request) as resp:
                assert resp.status_code == 200
                async for _ in resp.aiter_raw():
                    break  # hang up after the first bytes
            # Give the gateway a moment to notice, then it must serve the next request whole.
            for _ in range(50):
                if records(session):
                    break
                await asyncio.sleep(0.05)
            async with oai(gw, session.key) as client:
                reply = await client.chat.completions.create(model="m", messages=USER)
            assert reply.choices[0].message.content.startswith("word0 word1")
            first, second = records(session)
            assert "client disconnected" in first.get("error", ""), first.get("error")
            assert "error" not in second and second["status"] == 200
            assert session.usage.snapshot()["in_flight"] == 0
            assert session.usage.snapshot()["streaming_output_tokens_estimate"] == 0

    runner.run(body())


class SlowProvider:
    """An OpenAI-compatible upstream whose stream trickles: one chunk every 50 ms, or (with
    `pause`) one chunk, then silence until `release` is set, as a model thinking quietly."""

    def __init__(self, pause: bool = False) -> None:
        self.pause = pause
        self.release = asyncio.Event()
        self.finished = asyncio.Event()
        self.outcome = ""
        self.chunks_sent = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0,
                                     handler_cancellation=True)  # sees hang-ups at once
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.json()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            for i in range(400):  # 20 s if nobody hangs up
                await response.write(sse({"id": "c", "object": "chat.completion.chunk",
                                          "created": 0, "model": "slow", "choices": [{
                                              "index": 0, "delta": {"content": f"{i} "},
                                              "finish_reason": None}]}))
                self.chunks_sent += 1
                if self.pause and i == 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.release.wait(), 20)
                await asyncio.sleep(0.05)
            self.outcome = "completed"
        except (ConnectionResetError, asyncio.CancelledError) as exc:
            self.outcome = f"cut: {type(exc).__name__}"
            raise
        finally:
            self.finished.set()
        return response


async def hang_up_mid_stream(provider: SlowProvider, tmp_path: Path) -> tuple[float, Any]:
    """Stream through the gateway, hang up after the first chunk; seconds until the
    provider's stream ended, and the trial session."""
    async with running_gateway("openai/slow", api_base=f"http://127.0.0.1:{provider.port}/v1",
                               api_key_env="SANDLOT_GW_TEST_NO_SUCH_VAR") as gw:
        session = await gw.open_trial("t", "task", tmp_path / "traj")
        async with oai(gw, session.key) as client:
            stream = await client.chat.completions.create(model="m", messages=USER,
                                                          stream=True)
            async for _ in stream:
                break
            await stream.close()
        hung_up = time.monotonic()
        try:
            await asyncio.wait_for(provider.finished.wait(), 2.5)
        except TimeoutError:
            return float("inf"), session
        finally:
            provider.release.set()
            for _ in range(40):
                if records(session):
                    break
                await asyncio.sleep(0.05)
        return time.monotonic() - hung_up, session


def test_client_hanging_up_cancels_the_upstream_stream(runner, tmp_path):
    async def body() -> None:
        provider = SlowProvider()
        await provider.start()
        try:
            waited, session = await hang_up_mid_stream(provider, tmp_path)
            assert waited < 2, "the provider kept streaming to nobody"
            assert provider.outcome.startswith("cut"), provider.outcome
            assert provider.chunks_sent < 100
            (rec,) = records(session)
            assert "client disconnected" in rec["error"]
        finally:
            await provider.stop()

    runner.run(body())


def test_client_hanging_up_cancels_a_silent_upstream_stream(runner, tmp_path):
    async def body() -> None:
        provider = SlowProvider(pause=True)
        await provider.start()
        try:
            waited, _ = await hang_up_mid_stream(provider, tmp_path)
            assert waited < 2, "the provider's call outlived the agent's connection"
        finally:
            await provider.stop()

    runner.run(body())


def test_live_usage_shows_a_stream_in_flight_then_settles(runner, tmp_path):
    """The live counter is consistent while a stream runs and after it ends."""

    async def body() -> None:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "traj")
            async with oai(gw, session.key) as client:
                stream = await client.chat.completions.create(
                    model="m", messages=USER, stream=True, tools=[BASH_TOOL])
                snaps = []
                async for _ in stream:
                    snaps.append(session.usage.snapshot())
            assert any(s["in_flight"] == 1 for s in snaps)
            final = session.usage.snapshot()
            assert final["in_flight"] == 0 and final["n_requests"] == 1
            assert final["streaming_output_tokens_estimate"] == 0

    runner.run(body())
