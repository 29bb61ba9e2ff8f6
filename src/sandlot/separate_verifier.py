"""Harbor's separate verifier: the task's tests run in a fresh sandbox of its environment
that only the agent's outputs reach.

The agent's working directory and /logs/artifacts (Harbor's folder for what a task
collects) are carried from the agent's sandbox into a sandbox started from the task's
image, which no agent touched; everything else the agent changed (the interpreter, the
loader's configuration, PATH, packages it installed, processes it left running) is simply
not there. Nothing the agent did outside its outputs can run inside the verifier: the
strongest guarantee sandlot gives. The price: a test that needs what the agent installed
system-wide fails, as it would under Harbor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from typing_extensions import override

from sandlot.errors import ErrorKind, SandboxError, TrialError
from sandlot.fsutil import write_atomic
from sandlot.sandbox.base import Network, Sandbox
from sandlot.sandbox.bounded_fs import Export
from sandlot.sandbox.carry import DEFAULT_CARRY_LIMITS, CarryLimits, carry_folder
from sandlot.tasks.loader import Task
from sandlot.verify import VERIFIER_LOGS_MAX_BYTES, Verdict, Verifier

VerifierMode = Literal["shared", "separate"]
#: `--verifier-mode`: what task.toml says, or separate for every task.
VERIFIER_MODE_CHOICES = ("task", "separate")
#: Harbor's folder for the files a task collects from the agent's environment.
ARTIFACTS_DIR = "/logs/artifacts"


def verifier_mode(task: Task, forced: str = "task") -> VerifierMode:
    """Harbor's resolution: an explicit `[verifier] environment_mode`, else "separate"
    when `[verifier.environment]` is set, else "shared"; `--verifier-mode separate`
    over all of it."""
    if forced == "separate":
        return "separate"
    verifier = task.config.verifier
    if verifier.environment_mode is not None:
        return verifier.environment_mode
    return "separate" if verifier.environment is not None else "shared"


def output_paths(task: Task) -> tuple[str, ...]:
    """What is carried into the separate verifier: the agent's working directory and
    /logs/artifacts. Raises TrialError (task_invalid) for a working directory of "/",
    which would carry the whole system."""
    workdir = task.workdir.rstrip("/") or "/"
    if workdir == "/":
        raise TrialError(ErrorKind.TASK_INVALID, "a separate verifier carries the agent's "
                         "working directory, and this task's is /: set [environment] "
                         "workdir or a WORKDIR in the Dockerfile", "verify")
    return (workdir, ARTIFACTS_DIR)


class SeparateVerifier:
    """A Verifier that runs `inner` in a fresh sandbox holding only the agent's outputs.

    `open_sandbox(name)` makes and starts that sandbox (its users and services ready),
    `close_sandbox` stops it. With `stop_source` set (the trial's final scoring), the
    agent's sandbox is stopped once the outputs are carried: nothing the agent left
    running outlives its work into the verification."""

    def __init__(self, inner: Verifier, open_sandbox: Callable[[str], Awaitable[Sandbox]],
                 close_sandbox: Callable[[Sandbox], Awaitable[None]],
                 limits: CarryLimits = DEFAULT_CARRY_LIMITS) -> None:
        self.inner = inner
        self.open_sandbox, self.close_sandbox = open_sandbox, close_sandbox
        self.limits = limits
        self.stop_source: Callable[[Sandbox], Awaitable[None]] | None = None
        #: Collected artifacts put back at their paths in the verifier's sandbox (copy in
        #: the trial folder, path inside), as Harbor does (sandlot.artifacts).
        self.extra_uploads: list[tuple[Path, str]] = []
        self.runs = 0

    @override
    async def verify(self, sandbox: Sandbox, task: Task, out_dir: Path,
                     timeout_sec: float, *, network: Network | None = None,
                     feedback: bool = False,
                     logs_max_bytes: int = VERIFIER_LOGS_MAX_BYTES) -> Verdict:
        stop, self.stop_source = self.stop_source, None  # this verification's alone
        paths = output_paths(task)
        self.runs += 1
        fresh = await self.open_sandbox(f"verifier{self.runs}")
        try:
            report = await asyncio.to_thread(self._carry, sandbox, fresh, paths)
            out_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(out_dir / "outputs.txt",
                         f"carried into the verifier's sandbox: {', '.join(paths)} "
                         f"({report.files} files, {report.bytes} bytes)\n"
                         + ("left out:\n" + report.summary() if report.left_out else ""))
            for copy, path in self.extra_uploads:
                await fresh.upload(copy, path)
            if stop is not None:
                await stop(sandbox)
            return await self.inner.verify(fresh, task, out_dir, timeout_sec,
                                           network=network, feedback=feedback,
                                           logs_max_bytes=logs_max_bytes)
        finally:
            await self.close_sandbox(fresh)

    def _carry(self, source: Sandbox, fresh: Sandbox, paths: tuple[str, ...]) -> Export:
        report = Export()
        for path in paths:
            try:
                src = source.host_path(path)  # type: ignore[attr-defined]
                dest = fresh.host_path(path)  # type: ignore[attr-defined]
            except AttributeError as exc:
                raise SandboxError("this sandbox backend has no host view of its sandboxes: "
                                   "it cannot run a separate verifier") from exc
            carry_folder(src, dest, path, report, self.limits)
        return report
