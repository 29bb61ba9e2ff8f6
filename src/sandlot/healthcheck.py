"""[environment.healthcheck]: wait until the task's environment says it is ready.

Docker's HEALTHCHECK semantics, as Harbor runs them before the agent starts: the command is
run every `interval_sec`; during `start_period_sec` a failure does not count (and the next
try comes after `start_interval_sec`); after it, `retries` failures in a row mean the
environment never came up. That is the task's fault (`environment_error`), reported with the
command and its last output, never a silent start of an agent on a half-ready environment.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sandlot.errors import ErrorKind, SandboxError, TrialError
from sandlot.sandbox.base import Sandbox
from sandlot.tasks.config import HealthcheckSection

OUTPUT_TAIL = 500


async def wait_healthy(sandbox: Sandbox, check: HealthcheckSection, *,
                       timeout_multiplier: float = 1.0,
                       log: Callable[[str], None] = lambda _: None) -> int:
    """Poll until `check.command` exits 0; returns how many tries it took.

    Raises: TrialError ENVIRONMENT_ERROR after `retries` failures past the start period.
    """
    start_period_end = time.monotonic() + check.start_period_sec * timeout_multiplier
    failures, tries = 0, 0
    while True:
        tries += 1
        try:
            result = await sandbox.exec(check.command, network="loopback",
                                        timeout_sec=check.timeout_sec * timeout_multiplier)
        except SandboxError as exc:
            raise TrialError(ErrorKind.INTERNAL_ERROR, f"cannot run the healthcheck: {exc}",
                             "setup") from exc
        if result.exit_code == 0 and not result.timed_out:
            log(f"healthcheck passed after {tries} tries")
            return tries
        last = ("timed out after " f"{check.timeout_sec * timeout_multiplier:g}s"
                if result.timed_out else f"exit {result.exit_code}")
        output = (result.stdout + result.stderr).strip()[-OUTPUT_TAIL:]
        if time.monotonic() < start_period_end:
            await asyncio.sleep(check.start_interval_sec)
            continue
        failures += 1
        if failures >= check.retries:
            raise TrialError(
                ErrorKind.ENVIRONMENT_ERROR,
                f"the environment's healthcheck `{check.command}` failed {failures} times in "
                f"a row ({tries} tries in all); the last one: {last}"
                + (f", output: {output}" if output else ", no output"), "setup")
        await asyncio.sleep(check.interval_sec)
