"""A provider that fails mid-run: a refused key or an unknown model stops the job early
with its own exit code and error kind; a rate limit is waited out and shown; an outage is
the agent's to handle. The real CLI, real sandboxes, the provider over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.gateway_support import ThreadedProvider
from sandlot.exit_codes import ExitCode

pytestmark = [pytest.mark.e2e]

KEY = "sk-test-provider-key"


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[ThreadedProvider] = []

    def start(script: str) -> ThreadedProvider:
        started.append(ThreadedProvider(script, required_key=KEY))
        return started[-1]

    yield start
    for provider in started:
        provider.close()


def _output(proc: Any) -> str:
    return proc.stdout + proc.stderr


def _results(job: Path) -> dict[str, dict[str, Any]]:
    return {p.parent.name: json.loads(p.read_text()) for p in job.glob("*/result.json")}


def _run(run_cli: Any, tmp_path: Path, provider: ThreadedProvider, *extra: str) -> Any:
    return run_cli("run", str(tmp_path / "tasks"), "-a", "builtin", "-m", "openai/m",
                   "--api-base", provider.server.base_url, "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "j", *extra, env={"OPENAI_API_KEY": KEY}, timeout=300)


@pytest.mark.parametrize(("script", "said"), [
    ("gw-stop-401", "refused the key for openai/m (HTTP 401)"),
    ("gw-stop-404", "does not serve openai/m (HTTP 404)"),
])
def test_a_refused_key_or_model_stops_the_job_and_a_resume_finishes_it(
        run_cli, make_task, tmp_path, serve, script, said):
    for name in ("a", "b", "c"):
        make_task(name)
    provider = serve(script)
    proc = _run(run_cli, tmp_path, provider)
    assert proc.returncode == ExitCode.PROVIDER_FAILED, _output(proc)
    assert said in _output(proc) and "stopped:" in _output(proc)
    job = tmp_path / "jobs" / "j"
    results = _results(job)
    # -n 1: the first trial met the failure; the other two were never started.
    assert list(results) == ["a__1"], results
    error = results["a__1"]["error"]
    assert error["kind"] == "provider_error" and error["caused_by"] == "provider", error
    assert said in error["message"]
    assert results["a__1"]["reward"] is None  # not scored: it is not the agent's result
    summary = json.loads((job / "summary.json").read_text())
    assert said in summary["stopped"] and not summary["complete"]
    assert summary["errors_by_cause"] == {"provider": 1}
    # The failure was answered once by the provider; nothing else was sent after it.
    n_seen = len(provider.server.seen_keys)

    resumed = _run(run_cli, tmp_path, provider)  # the fault is used up: the provider is back
    assert resumed.returncode == ExitCode.OK, _output(resumed)
    results = _results(job)
    assert sorted(results) == ["a__1", "b__1", "c__1"]
    assert all(r["passed"] and r["error"] is None for r in results.values()), results
    summary = json.loads((job / "summary.json").read_text())
    assert summary["complete"] and summary["stopped"] is None
    assert len(provider.server.seen_keys) > n_seen


def test_running_trials_are_ended_as_provider_error_and_no_more_start(
        run_cli, make_task, tmp_path, serve):
    for name in ("a", "b", "c", "d"):
        make_task(name)
    provider = serve("gw-stop-401")
    proc = _run(run_cli, tmp_path, provider, "-n", "2")
    assert proc.returncode == ExitCode.PROVIDER_FAILED, _output(proc)
    results = _results(tmp_path / "jobs" / "j")
    # Two ran at once; whichever met the 401, neither is scored, and c and d never started.
    assert 1 <= len(results) <= 2 and not {"c__1", "d__1"} & set(results), results
    for result in results.values():
        assert result["error"]["kind"] == "provider_error", result


def test_a_rate_limit_is_waited_out_counted_and_shown(run_cli, make_task, tmp_path, serve):
    make_task("a")
    provider = serve("gw-throttled")
    proc = _run(run_cli, tmp_path, provider, "--json-events", "--heartbeat-sec", "0.5")
    assert proc.returncode == ExitCode.OK, _output(proc)
    result = _results(tmp_path / "jobs" / "j")["a__1"]
    assert result["passed"] and result["usage"]["n_rate_limited"] == 2, result
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    beats = [e for e in events if e.get("event") == "heartbeat"]
    assert any(b["backing_off"] >= 1 and b["rate_limited"] >= 1 for b in beats), beats
    summary = json.loads((tmp_path / "jobs" / "j" / "summary.json").read_text())
    assert summary["usage"]["n_rate_limited"] == 2


def test_an_outage_is_retried_then_left_to_the_agent(run_cli, make_task, tmp_path, serve):
    make_task("a")
    provider = serve("gw-outage")
    proc = _run(run_cli, tmp_path, provider)
    assert proc.returncode == ExitCode.OK, _output(proc)  # a 5xx does not stop the job
    result = _results(tmp_path / "jobs" / "j")["a__1"]
    assert result["error"]["kind"] != "provider_error", result
    trajectory = tmp_path / "jobs" / "j" / "a__1" / "trajectory" / "llm_trajectory.jsonl"
    failed = [json.loads(line) for line in trajectory.read_text().splitlines()][-1]
    assert failed["status"] == 500 and failed["attempts"] == 5, failed
