"""Helpers shared by the gateway tests (imported by name; conftest.py holds the fixtures)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai

from sandlot.gateway.budget import Budget
from sandlot.gateway.routing import RouteConfig, Router
from sandlot.gateway.scripted import find_model
from sandlot.gateway.scripted_server import ScriptedServer
from sandlot.gateway.server import Gateway, RetryPolicy, TrialSession

SCRIPTS = Path(__file__).resolve().parent / "scripts"
#: A retry policy that never waits long: tests stay fast whatever the fault.
FAST_RETRY = RetryPolicy(max_retries=3, backoff_base_sec=0.01, backoff_max_sec=0.05)
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                "reasoning_tokens", "total_tokens")

BASH_TOOL = {"type": "function", "function": {
    "name": "bash", "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}


@contextlib.asynccontextmanager
async def running_gateway(model: str = "scripted/gw-tools", *, retry: RetryPolicy | None = None,
                          per_trial_concurrency: int = 8, job_budget: Budget | None = None,
                          **route: Any) -> AsyncIterator[Gateway]:
    """A started Gateway routed to `model` (test scripts first), stopped afterwards."""
    route.setdefault("scripts_dirs", (SCRIPTS,))
    gateway = Gateway(Router(RouteConfig(model, **route)), retry=retry or FAST_RETRY,
                      per_trial_concurrency=per_trial_concurrency, job_budget=job_budget)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()


def oai(gw: Gateway, key: str) -> openai.AsyncOpenAI:
    """The official OpenAI client pointed at the gateway (no client-side retries)."""
    return openai.AsyncOpenAI(base_url=gw.host_base_url + "/v1", api_key=key, max_retries=0)


def ant(gw: Gateway, key: str) -> anthropic.AsyncAnthropic:
    """The official Anthropic client pointed at the gateway (no client-side retries)."""
    return anthropic.AsyncAnthropic(base_url=gw.host_base_url, api_key=key, max_retries=0)


def records(session: TrialSession | Path) -> list[dict[str, Any]]:
    """The exchanges recorded in a trial's llm_trajectory.jsonl, in order."""
    path = session if isinstance(session, Path) else session.trajectory_path
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def usage_sum(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """What a trial's usage must be: the trajectory's per-exchange usage summed."""
    out: dict[str, Any] = {k: sum(int(r["usage"][k]) for r in recs) for k in TOKEN_FIELDS}
    costs = [r["cost_usd"] for r in recs if r.get("cost_usd") is not None]
    out["cost_usd"] = round(sum(costs), 8) if costs else None
    out["n_requests"] = len(recs)
    return out


@contextlib.asynccontextmanager
async def provider(required_key: str | None) -> AsyncIterator[ScriptedServer]:
    """gw-tools served as a stand-alone HTTP provider that checks its key like a real one."""
    server = ScriptedServer(find_model("gw-tools", [SCRIPTS]), required_key=required_key)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class ThreadedProvider:
    """A scripted model served as a provider over real HTTP from a thread of this process,
    for tests that run the CLI in a subprocess against it."""

    def __init__(self, script: str, scripts_dir: Path = SCRIPTS, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ScriptedServer(find_model(script, [scripts_dir]), **options)
        self._call(self.server.start())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def close(self) -> None:
        self._call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
