"""Typed trial errors.

A trial never fails with a bare traceback: every failure is one of these kinds, recorded in
result.json, so a reader can tell "the agent failed the task" from "the harness broke".
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class ErrorKind(StrEnum):
    """What went wrong in a trial. Infra kinds are retried; the rest are the agent's result."""

    #: The task folder cannot run (a missing file, a bad task.toml, a COPY of nothing): the
    #: task's own fault, found before any sandbox starts; other tasks of the job still run.
    TASK_INVALID = "task_invalid"
    SANDBOX_SETUP_FAILED = "sandbox_setup_failed"
    #: The task's environment does not come up as the task says it should (its users
    #: cannot be made, its healthcheck never passes): the task's fault, not retried.
    ENVIRONMENT_ERROR = "environment_error"
    BUILD_FAILED = "build_failed"
    BUILD_TIMEOUT = "build_timeout"
    AGENT_TIMEOUT = "agent_timeout"
    AGENT_ERROR = "agent_error"
    #: The agent never completed its start-up handshake (ACP initialize / session/new):
    #: it never saw the task, so there is nothing of its work to score.
    AGENT_HANDSHAKE_TIMEOUT = "agent_handshake_timeout"
    VERIFIER_TIMEOUT = "verifier_timeout"
    VERIFIER_ERROR = "verifier_error"
    REWARD_MISSING = "reward_missing"
    REWARD_PARSE_ERROR = "reward_parse_error"
    #: The kernel's OOM killer ended a process of the agent (its command, its tools) at
    #: the task's memory limit: the agent's own result, still verified.
    AGENT_OOM = "agent_oom"
    #: ... of tests/test.sh at the task's memory limit: whose fault is decided on a
    #: pristine sandbox, as for any verifier error.
    VERIFIER_OOM = "verifier_oom"
    #: The name both of the above had in results written before them; still read.
    MEMORY_LIMIT = "memory_limit"
    PIDS_LIMIT = "pids_limit"
    #: The sandbox's disk quota (task.toml storage_mb) was used up by the command.
    DISK_LIMIT = "disk_limit"
    #: The trial's budget (--max-trial-tokens / --max-trial-cost-usd) was spent and the
    #: gateway refused the agent's next request: the agent's own result, still verified.
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"
    #: The model provider refused the job's key or does not serve its model: the job
    #: stopped, and this trial's outcome is the provider's, not the agent's (rerun on
    #: resume, once the key or the model name is fixed).
    PROVIDER_ERROR = "provider_error"
    INTERNAL_ERROR = "internal_error"


#: Kinds caused by the machine, not by the agent or the task: worth another try.
RETRYABLE_KINDS: frozenset[ErrorKind] = frozenset(
    {ErrorKind.SANDBOX_SETUP_FAILED, ErrorKind.INTERNAL_ERROR}
)


#: Agent-phase failures that are the agent's own result: the verifier still scores what the
#: agent left, and the trial counts as passed or failed by that reward (not as errored).
AGENT_FAULT_KINDS: frozenset[ErrorKind] = frozenset(
    {ErrorKind.AGENT_TIMEOUT, ErrorKind.AGENT_ERROR, ErrorKind.AGENT_OOM, ErrorKind.MEMORY_LIMIT,
     ErrorKind.PIDS_LIMIT, ErrorKind.DISK_LIMIT, ErrorKind.BUDGET_EXCEEDED}
)


#: Who an error is the fault of: the agent (its own result), the task (its files or
#: environment), sandlot (the harness or the machine: retried), the user (a cancel), or
#: the provider (the model's API refused the key or the model).
Cause = Literal["agent", "task", "sandlot", "user", "provider"]

#: Kinds that say the verifier could not score: whose fault is decided by running it
#: once more on a pristine sandbox (trial._attribute_verifier_fault).
VERIFIER_FAULT_KINDS: frozenset[ErrorKind] = frozenset(
    {ErrorKind.VERIFIER_TIMEOUT, ErrorKind.VERIFIER_ERROR, ErrorKind.REWARD_MISSING,
     ErrorKind.REWARD_PARSE_ERROR}
)


def default_cause(kind: ErrorKind) -> Cause:
    """Whose fault an error of `kind` is when nothing more is known."""
    if kind in AGENT_FAULT_KINDS or kind is ErrorKind.AGENT_HANDSHAKE_TIMEOUT:
        return "agent"
    if kind in RETRYABLE_KINDS:
        return "sandlot"
    if kind is ErrorKind.CANCELLED:
        return "user"
    if kind is ErrorKind.PROVIDER_ERROR:
        return "provider"
    return "task"


#: Kinds that are not a trial's result: a resumed job runs these trials again.
RERUN_ON_RESUME: frozenset[ErrorKind] = frozenset({ErrorKind.CANCELLED, ErrorKind.PROVIDER_ERROR})


class TrialError(Exception):
    """Raised inside a trial phase; the trial turns it into result.json's `error`."""

    def __init__(self, kind: ErrorKind, message: str, phase: str | None = None,
                 details: dict[str, object] | None = None,
                 caused_by: Cause | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.phase = phase
        #: What the agent had done when it failed (turns, tool calls, usage it reported).
        self.details = details or {}
        #: Whose fault it is, when the raiser knows better than `default_cause`.
        self.caused_by = caused_by


class SandboxError(Exception):
    """The sandbox backend could not do what was asked (not a command's own failure)."""


class SandboxDiskFull(SandboxError):
    """A copy into the sandbox found its disk quota (storage_mb) used up."""


class ContainerExited(SandboxError):
    """The sandbox's PID 1 exited (the image's ENTRYPOINT ended or crashed): the task's
    environment is gone, as a container whose main process exits."""


class Unverifiable(Exception):
    """sandlot cannot vouch for what the agent left in its sandbox: a scan of its files
    went past a cap (entries, depth, bytes, time) or the backend would not say what
    changed. What was not seen cannot be proved harmless, so the trial fails closed
    (reward 0, integrity `tampered`), never scored on what was seen."""

    def __init__(self, reason: str, path: str) -> None:
        super().__init__(f"{reason} at {path}")
        self.reason = reason
        self.path = path


class TaskLoadError(Exception):
    """A task folder cannot be run; carries every problem found, not just the first."""

    def __init__(self, problems: list[object]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def limit_error(limit: str | None, what: str, phase: str,
                details: dict[str, object] | None = None,
                memory_mb: int | None = None) -> TrialError | None:
    """The typed error for a sandbox limit (`ExecResult.limit_hit`) that `what` ran into;
    an OOM kill names the phase's kind, the process and the limit it hit."""
    if limit == "memory":
        kind = ErrorKind.VERIFIER_OOM if phase == "verify" else ErrorKind.AGENT_OOM
        at = f"{memory_mb} MB" if memory_mb else "its limit"
        return TrialError(kind, f"{what} was killed by the kernel's OOM killer: the sandbox's "
                          f"memory reached the task's memory_mb ({at}); raise [environment] "
                          "memory_mb or --override-memory-mb", phase, details)
    if limit == "pids":
        return TrialError(ErrorKind.PIDS_LIMIT, f"{what} hit the sandbox's process-count "
                          "limit (pids)", phase, details)
    if limit == "disk":
        return TrialError(ErrorKind.DISK_LIMIT, f"{what} filled the task's disk "
                          "(storage_mb)", phase, details)
    return None
