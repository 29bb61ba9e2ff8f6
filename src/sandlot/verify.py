"""The verifier plane: run the task's tests in the sandbox and read the reward they wrote."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from typing_extensions import override

from sandlot.errors import ErrorKind, TrialError, limit_error
from sandlot.fsutil import write_atomic
from sandlot.hostguard import remove_tree
from sandlot.sandbox.base import Network, Sandbox
from sandlot.sandbox.bounded_fs import CapExceeded, export_tree, read_regular
from sandlot.sandbox.users import user_ids
from sandlot.tasks.loader import Task

TESTS_MOUNT = "/tests"
VERIFIER_LOGS = "/logs/verifier"
TAIL_CHARS = 2000
#: The most of a reward file read: a number, or a JSON object of a few numbers.
REWARD_MAX_BYTES = 1_000_000
#: The most of /logs/verifier kept in the trial folder (the rest is listed as left out).
VERIFIER_LOGS_MAX_BYTES = 50 * 1024 * 1024


@dataclass
class Verdict:
    reward: float
    rewards: dict[str, float]
    duration_sec: float
    exit_code: int | None
    metadata: dict[str, object] = field(default_factory=dict)
    #: test.sh's stdout then stderr, for repair feedback (filtered before an agent sees it).
    output: str = ""


class Verifier(Protocol):
    """Scores the sandbox's current state.

    Contract: what the agent left running may still run, but cannot see the tests or
    touch the reward; returns a Verdict or raises TrialError (VERIFIER_TIMEOUT,
    VERIFIER_ERROR, REWARD_MISSING, REWARD_PARSE_ERROR). A feedback run (`feedback=True`,
    between repair attempts) runs on the `network` given and leaves nothing of the tests
    in the sandbox.
    """

    async def verify(self, sandbox: Sandbox, task: Task, out_dir: Path,
                     timeout_sec: float, *, network: Network | None = None,
                     feedback: bool = False,
                     logs_max_bytes: int = VERIFIER_LOGS_MAX_BYTES) -> Verdict: ...


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= TAIL_CHARS else "…" + text[-TAIL_CHARS:]


def parse_reward_json(text: str) -> dict[str, float]:
    """reward.json: an object of finite numbers. Raises ValueError saying what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, or an integer past Python's digit limit
        raise ValueError(f"reward.json is not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise ValueError("reward.json is nested too deeply to parse; it must be a flat "
                         'JSON object of numbers, e.g. {"reward": 1.0}') from exc
    if not isinstance(data, dict) or not data:
        raise ValueError("reward.json must be a non-empty JSON object of numbers, "
                         'e.g. {"reward": 1.0}')
    rewards: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            shown = ("an array" if isinstance(value, list) else "an object"
                     if isinstance(value, dict) else repr(value)[:80])
            raise ValueError(f"reward.json key {key!r} is {shown}, not a number")
        try:
            number = float(value)  # a huge JSON int overflows a float
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            shown = repr(value) if isinstance(value, float) else "an integer too large"
            raise ValueError(f"reward.json key {key!r} is {shown}, not a finite number")
        rewards[str(key)] = number
    return rewards


def headline(rewards: dict[str, float]) -> float:
    """The `reward` key, or the only key; otherwise ambiguous."""
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    raise ValueError(f"reward.json has several keys ({', '.join(sorted(rewards))}) "
                     "and no 'reward' key to use as the headline")


def parse_reward_txt(text: str) -> float:
    stripped = text.strip()
    try:
        value = float(stripped)
    except ValueError as exc:
        shown = stripped[:80] + ("…" if len(stripped) > 80 else "")
        raise ValueError(f"reward.txt must hold one number, got {shown!r}") from exc
    if not math.isfinite(value):
        raise ValueError(f"reward.txt must hold a finite number, got {stripped!r}")
    return value


def read_rewards(logs_dir: Path) -> tuple[float, dict[str, float]]:
    """Reward from /logs/verifier (a host folder test.sh wrote in): reward.json first,
    then reward.txt; each a regular file of at most REWARD_MAX_BYTES, read without
    following a link or opening a FIFO.

    Raises: TrialError REWARD_MISSING or REWARD_PARSE_ERROR.
    """
    for name in ("reward.json", "reward.txt"):
        if (logs_dir / name).is_symlink():
            raise TrialError(ErrorKind.REWARD_PARSE_ERROR,
                             f"{name} is a symlink; a reward must be a regular file",
                             "verify")
    try:
        data = read_regular(logs_dir, "/reward.json", REWARD_MAX_BYTES)
        if data is not None:
            rewards = parse_reward_json(data.decode(errors="replace"))
            return headline(rewards), rewards
        data = read_regular(logs_dir, "/reward.txt", REWARD_MAX_BYTES)
        if data is not None:
            value = parse_reward_txt(data.decode(errors="replace"))
            return value, {"reward": value}
    except CapExceeded as exc:
        raise TrialError(ErrorKind.REWARD_PARSE_ERROR, f"{exc.path.lstrip('/')} holds "
                         f"more than {REWARD_MAX_BYTES} bytes; a reward is a number or a "
                         "small JSON object", "verify") from exc
    except ValueError as exc:
        raise TrialError(ErrorKind.REWARD_PARSE_ERROR, str(exc), "verify") from exc
    raise TrialError(ErrorKind.REWARD_MISSING,
                     "tests/test.sh wrote neither /logs/verifier/reward.json nor reward.txt",
                     "verify")


class ScriptVerifier:
    """Harbor's verifier: tests/ at /tests, `bash /tests/test.sh`, reward file read.

    /tests and /logs/verifier are host folders mounted for test.sh alone (exec `mounts`):
    what the agent left running in the sandbox (a server the tests talk to, or a process
    waiting to forge a reward) never sees the tests, and cannot write the reward.
    """

    def __init__(self, network: Network = "outbound") -> None:
        self.network = network

    @override
    async def verify(self, sandbox: Sandbox, task: Task, out_dir: Path,
                     timeout_sec: float, *, network: Network | None = None,
                     feedback: bool = False,
                     logs_max_bytes: int = VERIFIER_LOGS_MAX_BYTES) -> Verdict:
        staging = Path(tempfile.mkdtemp(prefix="sandlot-verify-"))
        try:
            return await self._verify(sandbox, task, out_dir, timeout_sec,
                                      network or self.network, staging,
                                      min(logs_max_bytes, VERIFIER_LOGS_MAX_BYTES))
        finally:
            await asyncio.to_thread(remove_tree, staging, ignore_errors=True)

    async def _verify(self, sandbox: Sandbox, task: Task, out_dir: Path,
                      timeout_sec: float, network: Network, staging: Path,
                      logs_max_bytes: int) -> Verdict:
        tests, logs = staging / "tests", staging / "logs"
        for source in task.tests_sources:  # a step's tests over the task's
            await asyncio.to_thread(shutil.copytree, source, tests, symlinks=True,
                                    dirs_exist_ok=True)
        tests.mkdir(exist_ok=True)
        logs.mkdir()
        user = task.verifier_user
        if user is not None:  # test.sh runs as that user and must write its reward
            uid, gid = await user_ids(sandbox, user)
            os.chown(logs, uid, gid)
        result = await sandbox.exec(
            ["bash", f"{TESTS_MOUNT}/test.sh"], timeout_sec=timeout_sec,
            env={**task.config.verifier.env}, network=network, user=user,
            mounts={TESTS_MOUNT: tests, VERIFIER_LOGS: logs},
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(out_dir / "test_stdout.txt", result.stdout, durable=False)
        write_atomic(out_dir / "test_stderr.txt", result.stderr, durable=False)
        remove_tree(out_dir / "logs", ignore_errors=True)
        export = await asyncio.to_thread(export_tree, logs, out_dir / "logs", logs_max_bytes)
        if export.notes:
            write_atomic(out_dir / "logs-left-out.txt", export.summary(), durable=False)
        if result.timed_out:
            raise TrialError(ErrorKind.VERIFIER_TIMEOUT,
                             f"tests/test.sh did not finish within {timeout_sec:g}s", "verify")
        error = limit_error(result.limit_hit, "tests/test.sh", "verify",
                            memory_mb=task.config.environment.memory_mb)
        if error is not None:
            raise error
        try:
            reward, rewards = read_rewards(logs)
        except TrialError as exc:
            if exc.kind is ErrorKind.REWARD_MISSING:
                detail = _tail(result.stderr) or _tail(result.stdout)
                exc.message += f" (test.sh exited {result.exit_code}"
                exc.message += f"; its output ends: {detail})" if detail else ")"
            raise
        return Verdict(reward=reward, rewards=rewards, duration_sec=result.duration_sec,
                       exit_code=result.exit_code, output=result.stdout + result.stderr)
