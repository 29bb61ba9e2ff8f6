"""Agents for tests, loaded through the `module:Class` escape hatch (PYTHONPATH=tests).

ShellAgent runs the task's instruction.md as a bash script in the agent phase: a scripted
stand-in for an agent that tries things (probes isolation, hangs, plants files).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from sandlot.agents.base import AgentContext, AgentOutcome
from sandlot.agents.oracle import raise_for_limits
from sandlot.errors import ErrorKind, TrialError
from sandlot.fsutil import write_atomic


class ShellAgent:
    name = "shell"
    needs_gateway = False

    def __init__(self, model: str | None = None) -> None:
        self.model = model

    async def setup(self, ctx: AgentContext) -> None:
        return None

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        result = await ctx.sandbox.exec(["bash", "-c", ctx.task.instruction],
                                        timeout_sec=ctx.timeout_sec, network=ctx.network)
        write_atomic(ctx.logs_dir / "stdout.txt", result.stdout)
        write_atomic(ctx.logs_dir / "stderr.txt", result.stderr)
        if result.timed_out:
            raise TrialError(ErrorKind.AGENT_TIMEOUT, "the script timed out", "agent")
        raise_for_limits(result, "agent", "the script")
        return AgentOutcome(exit_code=result.exit_code, script_time_sec=result.duration_sec)


class FlakyAgent(ShellAgent):
    """Crashes (a harness-side exception) on its first try per trial, then behaves."""

    name = "flaky"

    async def setup(self, ctx: AgentContext) -> None:
        marker = Path(os.environ["FLAKY_MARKER_DIR"]) / ctx.logs_dir.parent.name
        if not marker.exists():
            marker.write_text("crashed once")
            raise RuntimeError("simulated harness crash")


class FlakyModelAgent(ShellAgent):
    """Asks the model once per try through the gateway; the first try then crashes (a
    harness-side exception), so its spend belongs to a retried try."""

    name = "flaky-model"
    needs_gateway = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        import httpx

        assert ctx.gateway is not None
        async with httpx.AsyncClient(base_url=ctx.gateway.host_base_url, timeout=30) as client:
            reply = await client.post(
                "/v1/chat/completions",
                headers={"authorization": f"Bearer {ctx.gateway.api_key}"},
                json={"model": ctx.gateway.model,
                      "messages": [{"role": "user", "content": "hello"}]})
            reply.raise_for_status()
        marker = Path(os.environ["FLAKY_MARKER_DIR"]) / ctx.logs_dir.parent.name
        if not marker.exists():
            marker.write_text("crashed once")
            raise RuntimeError("simulated harness crash after a model call")
        return await super().run(ctx)


class CrashOnFailureAgent(ShellAgent):
    """Runs the script and, like many real agents, reports only that it failed (exit code
    and no more) when the script does: it never asks the sandbox why."""

    name = "crash-on-failure"

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        result = await ctx.sandbox.exec(["bash", "-c", ctx.task.instruction],
                                        timeout_sec=ctx.timeout_sec, network=ctx.network)
        if result.exit_code != 0:
            raise TrialError(ErrorKind.AGENT_ERROR,
                             f"the agent gave up (exit {result.exit_code})", "agent")
        return AgentOutcome(exit_code=result.exit_code, script_time_sec=result.duration_sec)


class StubbornModelAgent(ShellAgent):
    """Asks the model again and again, whatever it answers (a refusal included): an agent
    that does not stop on its own when its budget is spent."""

    name = "stubborn-model"
    needs_gateway = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        import asyncio

        import httpx

        assert ctx.gateway is not None
        async with httpx.AsyncClient(base_url=ctx.gateway.host_base_url, timeout=30) as client:
            while True:
                await client.post(
                    "/v1/chat/completions",
                    headers={"authorization": f"Bearer {ctx.gateway.api_key}"},
                    json={"model": ctx.gateway.model,
                          "messages": [{"role": "user", "content": "more"}]})
                await asyncio.sleep(0.2)


class ProbeAgent(ShellAgent):
    """From inside its sandbox: one model call to the gateway URL and key it was given,
    then the task's instruction (probes of other addresses). stdout.txt has both."""

    name = "probe"
    needs_gateway = True

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        assert ctx.gateway is not None and ctx.gateway.sandbox_base_url is not None
        url = ctx.gateway.sandbox_base_url + "/v1/chat/completions"
        call = (
            "import json, urllib.request\n"
            f"req = urllib.request.Request({url!r},"
            f" data=json.dumps({{'model': {ctx.gateway.model!r}, 'messages': "
            "[{'role': 'user', 'content': 'hello'}]}).encode(), headers={"
            f"'authorization': 'Bearer {ctx.gateway.api_key}', "
            "'content-type': 'application/json'})\n"
            "print('gateway', urllib.request.urlopen(req, timeout=30).status)\n")
        script = f"python3 -c {shlex.quote(call)}\n{ctx.task.instruction}"
        result = await ctx.sandbox.exec(["bash", "-c", script], timeout_sec=ctx.timeout_sec,
                                        network=ctx.network)
        write_atomic(ctx.logs_dir / "stdout.txt", result.stdout)
        write_atomic(ctx.logs_dir / "stderr.txt", result.stderr)
        return AgentOutcome(exit_code=result.exit_code, script_time_sec=result.duration_sec)
