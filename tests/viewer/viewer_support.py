"""Helpers shared by the viewer and report tests: real example jobs (built once per
session), synthetic job folders, the report CLI as a process, and ATIF's schema.

The tests in tests/report import this as `viewer.viewer_support` (tests/ is on sys.path
through tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from conftest import trial_story

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "tasks"
SOLVER = REPO / "examples" / "scripted" / "solver"
REPORT_SCRIPTS = REPO / "tests" / "report" / "scripts"
TASKS = sorted(p.parent.name for p in EXAMPLES.glob("*/task.toml"))

#: Runs the report commands through `register(app)`, whether or not cli.py calls it yet.
CLI_DRIVER = """
import sys, typer
from sandlot.cli_report import register
app = typer.Typer(add_completion=False)
@app.callback()
def main() -> None:
    '''sandlot report commands'''
register(app)
app(prog_name="sandlot")
"""

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def report_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", CLI_DRIVER, *args]


def run_report(*args: str, cwd: Path | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(report_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd or REPO)


# ---------------------------------------------------------------- example jobs

#: name -> (scripted model folder contents: tasks solved by the solver, or "all"/"none";
#:          extra `sandlot run` flags)
EXAMPLE_JOBS: dict[str, tuple[str | list[str], list[str]]] = {
    "solver": ("all", []),
    "giveup": ("none", ["--repair-attempts", "1"]),
    "first5": (TASKS[:5], []),
    "last5": (TASKS[-5:], []),
}


def mixed_model(scripts_root: Path, name: str, solved: list[str]) -> None:
    """scripted/<name>: the solver's scripts for `solved`, giving up on every other task."""
    folder = scripts_root / name
    folder.mkdir(parents=True, exist_ok=True)
    for task in solved:
        shutil.copy(SOLVER / f"{task}.toml", folder / f"{task}.toml")
    # Sorted after the task names, so it only catches the tasks left over.
    shutil.copy(REPORT_SCRIPTS / "giveup.toml", folder / "zz-giveup.toml")


def build_example_jobs(base: Path, cache_dir: Path) -> Path:
    """Four jobs on examples/tasks with the built-in agent, built once under `base`.

    solver solves every task; giveup none (with one repair attempt each); first5 the
    first five tasks by name; last5 the last five. Returns the jobs folder.
    """
    jobs = base / "example-jobs"
    done = jobs / ".built"
    if done.exists():
        return jobs
    scripts = base / "example-scripts"
    for name, (solved, _) in EXAMPLE_JOBS.items():
        if solved == "all":
            shutil.copytree(SOLVER, scripts / name, dirs_exist_ok=True)
        else:
            mixed_model(scripts, name, [] if solved == "none" else list(solved))
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}
    procs = {}
    for name, (_, extra) in EXAMPLE_JOBS.items():  # all four at once
        cmd = [sys.executable, "-m", "sandlot.cli", "run", str(EXAMPLES), "--agent", "builtin",
               "--model", f"scripted/{name}", "--scripts-dir", str(scripts), "-n", "2",
               "--jobs-dir", str(jobs), "--job-name", name, "-q", *extra]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, env=env, cwd=REPO)
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"job {name}: {out}"
    surprises = [trial_story(trial) for name, passing in expected_passing().items()
                 for trial in sorted((jobs / name).glob("*__*"))
                 if _passed(trial) != (trial.name.split("__")[0] in passing)]
    assert not surprises, "trials that did not end as their script intends:\n" + "\n".join(
        surprises)
    done.write_text("ok\n")
    return jobs


def expected_passing() -> dict[str, set[str]]:
    """Each example job's name -> the tasks its scripted model solves."""
    return {name: set(TASKS) if solved == "all" else set() if solved == "none" else set(solved)
            for name, (solved, _) in EXAMPLE_JOBS.items()}


def _passed(trial: Path) -> bool:
    result = trial / "result.json"
    return result.is_file() and bool(json.loads(result.read_text()).get("passed"))


# ---------------------------------------------------------------- synthetic jobs


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_config(job: Path, tasks: list[str], *, agent: str = "builtin",
                 model: str | None = "scripted/x", n_attempts: int = 1) -> None:
    write_json(job / "config.json", {
        "schema_version": 1, "job_name": job.name, "tasks_dir": str(job / "no-tasks"),
        "task_names": tasks, "agent": agent, "model": model, "n_attempts": n_attempts,
        "n_concurrent": 1, "jobs_dir": str(job.parent)})


def write_result(job: Path, task: str, attempt: int = 1, *, reward: float | None = 1.0,
                 error: dict[str, Any] | None = None, cost: float | None = 0.01,
                 tokens: int = 1000, total_sec: float = 2.0, agent: str = "builtin",
                 attempts: list[dict[str, Any]] | None = None, repaired: bool = False,
                 ) -> dict[str, Any]:
    passed = reward is not None and reward >= 1.0 and error is None
    data = {
        "schema_version": 1, "trial_name": f"{task}__{attempt}", "task": task,
        "attempt": attempt, "agent": agent, "model": "scripted/x", "reward": reward,
        "rewards": {} if reward is None else {"reward": reward}, "passed": passed,
        "error": error,
        "timing": {"setup": 0.1, "agent": total_sec / 2, "verify": total_sec / 2 - 0.2,
                   "cleanup": 0.1, "total": total_sec},
        "started_at": _now(), "finished_at": _now(),
        "usage": {"input_tokens": tokens - 100, "output_tokens": 100, "cache_read_tokens": 0,
                  "cache_write_tokens": 0, "reasoning_tokens": 0, "total_tokens": tokens,
                  "cost_usd": cost, "n_requests": 2, "source": "gateway"},
        "agent_info": {"turns": 2, "tool_calls": 1},
        "attempts": attempts or [], "repaired": repaired,
    }
    write_json(job / f"{task}__{attempt}" / "result.json", data)
    return data


def chat_exchange(seq: int, messages: list[dict[str, Any]], answer: dict[str, Any],
                  **usage: int) -> dict[str, Any]:
    u = {"input_tokens": 100 * seq, "output_tokens": 10, "cache_read_tokens": 0,
         "cache_write_tokens": 0, "reasoning_tokens": 0, "total_tokens": 100 * seq + 10}
    u.update(usage)
    return {"seq": seq, "trial": "t", "format": "chat", "endpoint": "/v1/chat/completions",
            "requested_model": "scripted/x", "model": "scripted/x", "stream": False,
            "started_at": time.time(), "request": {"model": "scripted/x",
                                                   "messages": messages},
            "attempts": 1, "status": 200, "latency_sec": 0.01,
            "response": {"choices": [{"message": answer, "finish_reason": "stop"}]},
            "usage": u, "cost_usd": 0.001 * seq}


def write_builtin_trial(trial: Path, n_turns: int, *, output_bytes: int = 200,
                        instruction: str = "Fix the bug in /app/x.py.") -> None:
    """A built-in agent trial: `n_turns` turns of (bash call, output), then an answer, with
    the matching gateway log. Written line by line, never held whole."""
    (trial / "agent").mkdir(parents=True, exist_ok=True)
    (trial / "trajectory").mkdir(parents=True, exist_ok=True)
    pad = "x" * output_bytes
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are careful."},
                                     {"role": "user", "content": instruction}]
    with open(trial / "agent" / "builtin_trajectory.jsonl", "w") as agent_log, \
            open(trial / "trajectory" / "llm_trajectory.jsonl", "w") as gw_log:
        for turn in range(1, n_turns + 2):
            final = turn == n_turns + 1
            if final:
                message: dict[str, Any] = {"role": "assistant", "content": "All done."}
            else:
                call = {"id": f"call_{turn}", "type": "function", "function": {
                    "name": "write_file" if turn == 1 else "bash",
                    "arguments": json.dumps({"path": "/app/x.py", "content": "print(1)\n"}
                                            if turn == 1 else {"command": f"echo {turn}"})}}
                message = {"role": "assistant", "content": f"turn {turn}",
                           "reasoning_content": f"thinking {turn}", "tool_calls": [call]}
            # Only the last two messages of history go in the request: enough for the
            # viewer (it reads what is new since the last assistant turn), and it keeps a
            # 10k-turn log linear in size.
            gw_log.write(json.dumps(chat_exchange(turn, history[-2:], message)) + "\n")
            agent_log.write(json.dumps({"t": time.time(), "type": "assistant", "turn": turn,
                                        "message": message, "finish_reason": "stop"}) + "\n")
            if final:
                break
            out = f"exit code 0\n{turn} {pad}"
            agent_log.write(json.dumps({"t": time.time(), "type": "tool",
                                        "name": call["function"]["name"],
                                        "arguments": call["function"]["arguments"],
                                        "is_error": turn % 7 == 0, "duration_sec": 0.01,
                                        "output": out, "truncated": False}) + "\n")
            history = [{k: v for k, v in message.items() if k != "reasoning_content"},
                       {"role": "tool", "tool_call_id": call["id"], "content": out}]


# ---------------------------------------------------------------- the viewer process


@contextlib.contextmanager
def viewer_process(jobs_dir: Path, *extra: str) -> Iterator[str]:
    """`sandlot view JOBS_DIR --no-browser --port 0` in a subprocess; yields its URL."""
    env = {**os.environ, "COLUMNS": "300"}
    proc = subprocess.Popen(report_cmd("view", str(jobs_dir), "--no-browser", "--port", "0",
                                       *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=REPO)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    url = None
    deadline = time.monotonic() + 30
    seen = []
    while url is None and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if "http://127.0.0.1:" in line:
            url = line[line.index("http://"):].split()[0]
    try:
        assert url is not None, "sandlot view printed no address:\n" + "".join(seen)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- ATIF schema (v1.4)
# The fields of Harbor's ATIF RFC 0001 (docs/rfcs/0001-trajectory-format.md), as strict
# pydantic models: unknown fields are refused, agent-only fields are checked, step ids run
# 1..n, and every observation result points at a tool call of its own step.


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AtifToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]


class AtifObservationResult(_Strict):
    source_call_id: str | None = None
    content: str | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | None = None


class AtifObservation(_Strict):
    results: list[AtifObservationResult]


class AtifMetrics(_Strict):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class AtifStep(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_only(self) -> AtifStep:
        if self.timestamp is not None:
            datetime.fromisoformat(self.timestamp.replace("Z", "+00:00"))
        if self.source != "agent":
            for name in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls",
                         "metrics"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is only for agent steps (step {self.step_id})")
        return self


class AtifAgent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class AtifTrajectory(_Strict):
    schema_version: Literal["ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4"]
    session_id: str
    agent: AtifAgent
    steps: list[AtifStep] = Field(min_length=1)
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _ids_and_references(self) -> AtifTrajectory:
        for i, step in enumerate(self.steps, 1):
            if step.step_id != i:
                raise ValueError(f"step_id {step.step_id} at position {i}")
            ids = {c.tool_call_id for c in step.tool_calls or []}
            for r in (step.observation.results if step.observation else []):
                if r.source_call_id is not None and r.source_call_id not in ids:
                    raise ValueError(f"step {i}: result for unknown call {r.source_call_id}")
        return self


@contextlib.contextmanager
def served(jobs_dir: Path) -> Iterator[str]:
    """The viewer's server in a thread of this process (fast API tests); yields its URL."""
    import asyncio

    from sandlot.viewer.server import start

    ready: queue.Queue[Any] = queue.Queue()
    stop: dict[str, Any] = {}

    async def main() -> None:
        runner, port = await start(jobs_dir, 0)
        done = asyncio.Event()
        stop["loop"], stop["event"] = asyncio.get_running_loop(), done
        ready.put(port)
        await done.wait()
        await runner.cleanup()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # surface start-up failures to the test
            ready.put(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    port = ready.get(timeout=30)
    if isinstance(port, BaseException):
        raise port
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop["loop"].call_soon_threadsafe(stop["event"].set)
        thread.join(timeout=10)
