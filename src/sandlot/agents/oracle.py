"""The oracle agent: runs the task's reference solution, to validate tasks and the harness."""

from __future__ import annotations

import secrets
from dataclasses import replace

from typing_extensions import override

from sandlot.agents.base import AgentContext, AgentOutcome
from sandlot.errors import ErrorKind, TrialError, limit_error
from sandlot.fsutil import write_atomic
from sandlot.sandbox.base import ExecResult
from sandlot.sandbox.files import remove_path

SOLUTION_MOUNT = "/solution"
#: solve.sh, then the solution folder removed, which the last line of stderr confirms
#: (`$2`); solve.sh's exit code is the command's. Where the agent's user may not remove
#: it (or solve.sh ended the shell), the oracle removes it as root afterwards.
_SOLVE_THEN_REMOVE = (
    'bash "$1/solve.sh"; status=$?; '
    'rm -rf -- "$1" 2>/dev/null && [ ! -e "$1" ] && printf "%s\\n" "$2" >&2; '
    'exit $status')


def raise_for_limits(result: ExecResult, phase: str, what: str,
                     memory_mb: int | None = None) -> None:
    """Turn a kernel limit hit during `what` into the right typed error."""
    error = limit_error(result.limit_hit, what, phase, memory_mb=memory_mb)
    if error is not None:
        raise error


class OracleAgent:
    """Copies solution/ to /solution only now (the agent phase) and runs solve.sh."""

    name = "oracle"
    needs_gateway = False

    def __init__(self, model: str | None = None) -> None:
        self.model = model

    @override
    async def setup(self, ctx: AgentContext) -> None:
        return None

    @override
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        sandbox = ctx.sandbox
        await sandbox.upload(ctx.task.solution_dir, SOLUTION_MOUNT)
        removed = f"sandlot: {SOLUTION_MOUNT} removed {secrets.token_hex(8)}"
        result = None
        try:
            # The solution goes in the same command when it can: one sandbox command less.
            result = await sandbox.exec(
                ["bash", "-c", _SOLVE_THEN_REMOVE, "solve", SOLUTION_MOUNT, removed],
                timeout_sec=ctx.timeout_sec,
                env={**ctx.task.config.solution.env, **ctx.env},
                network=ctx.network,
            )
        finally:
            if result is None or removed not in result.stderr:
                await remove_path(sandbox, SOLUTION_MOUNT)
        result = replace(result, stderr=result.stderr.replace(removed + "\n", ""))
        write_atomic(ctx.logs_dir / "solve.stdout.txt", result.stdout, durable=False)
        write_atomic(ctx.logs_dir / "solve.stderr.txt", result.stderr, durable=False)
        if result.timed_out:
            raise TrialError(ErrorKind.AGENT_TIMEOUT,
                             f"solve.sh did not finish within {ctx.timeout_sec:g}s", "agent")
        raise_for_limits(result, "agent", "solve.sh", ctx.task.config.environment.memory_mb)
        return AgentOutcome(exit_code=result.exit_code, duration_sec=result.duration_sec,
                            script_time_sec=result.duration_sec)
