"""An agent that holds its trial's gateway key *inside* the sandbox, as Pi or any node agent
does: the task's instruction runs as bash with the key and the sandbox-side gateway URL in
its environment (ADV_GATEWAY_KEY, ADV_GATEWAY_URL).

To make the attacks as strong as possible it also hands the instruction what a real agent
never gets: the gateway's host-side URL (ADV_HOST_GATEWAY_URL). And it leaves its key and
URLs in agent/gateway.json (host side, outside the sandbox) so the test can replay a
finished trial's key against the live gateway.

Loaded by the CLI as `--agent adversarial.key_agent:KeyHoldingAgent` (PYTHONPATH=tests).
"""

from __future__ import annotations

import json

from sandlot.agents.base import AgentContext, AgentOutcome
from sandlot.agents.oracle import raise_for_limits
from sandlot.errors import ErrorKind, TrialError
from sandlot.fsutil import write_atomic


class KeyHoldingAgent:
    name = "key-holder"
    needs_gateway = True

    def __init__(self, model: str | None = None) -> None:
        self.model = model

    async def setup(self, ctx: AgentContext) -> None:
        return None

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        gw = ctx.gateway
        assert gw is not None, "the trial opens a gateway session for agents that need one"
        write_atomic(ctx.logs_dir / "gateway.json", json.dumps({
            "key": gw.api_key, "host_base_url": gw.host_base_url,
            "sandbox_base_url": gw.sandbox_base_url}))
        env = {"ADV_GATEWAY_URL": gw.sandbox_base_url or "", "ADV_GATEWAY_KEY": gw.api_key,
               "ADV_HOST_GATEWAY_URL": gw.host_base_url}
        result = await ctx.sandbox.exec(["bash", "-c", ctx.task.instruction],
                                        timeout_sec=ctx.timeout_sec, env=env,
                                        network=ctx.network)
        write_atomic(ctx.logs_dir / "stdout.txt", result.stdout)
        write_atomic(ctx.logs_dir / "stderr.txt", result.stderr)
        if result.timed_out:
            raise TrialError(ErrorKind.AGENT_TIMEOUT, "the script timed out", "agent")
        raise_for_limits(result, "agent", "the script")
        return AgentOutcome(exit_code=result.exit_code, script_time_sec=result.duration_sec)
