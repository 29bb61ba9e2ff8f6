"""The run checks what it can before any sandbox starts, and its exit code says what
happened: the real CLI in a subprocess, the provider a real HTTP server on loopback."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.gateway_support import ThreadedProvider
from sandlot.exit_codes import ExitCode
from sandlot.gateway.faults import classify

pytestmark = [pytest.mark.e2e]

KEY = "sk-test-preflight-key"
NO_KEYS = {"OPENAI_API_KEY": "", "GROQ_API_KEY": "", "ANTHROPIC_API_KEY": ""}


@pytest.fixture
def provider() -> Iterator[ThreadedProvider]:
    served = ThreadedProvider("gw-tools", required_key=KEY, served_models=frozenset({"m"}))
    try:
        yield served
    finally:
        served.close()


@pytest.fixture
def tasks(make_task, tmp_path: Path) -> Path:
    make_task("one")
    return tmp_path / "tasks"


def _output(proc: Any) -> str:
    return proc.stdout + proc.stderr


def _lines(proc: Any) -> list[str]:
    return [line for line in _output(proc).splitlines() if line.strip()]


def test_an_unset_key_is_named_and_nothing_starts(run_cli, tasks, tmp_path):
    proc = run_cli("run", str(tasks), "-a", "builtin", "-m", "openai/gpt-4.1",
                   "--jobs-dir", str(tmp_path / "jobs"), env=NO_KEYS, timeout=120)
    assert proc.returncode == ExitCode.PREFLIGHT, _output(proc)
    assert "error: OPENAI_API_KEY is not set (needed by openai/gpt-4.1)" in _lines(proc)
    assert "preflight failed (1 problem)" in _output(proc)
    assert not (tmp_path / "jobs").exists()


def test_every_problem_is_one_line_at_once(run_cli, tasks, tmp_path):
    # A LiteLLM-only provider's variable comes from LiteLLM; no task matches the glob.
    proc = run_cli("run", str(tasks), "-a", "builtin", "-m", "groq/llama-3.1-8b-instant",
                   "-i", "no-such-task", "--jobs-dir", str(tmp_path / "jobs"), env=NO_KEYS,
                   timeout=120)
    assert proc.returncode == ExitCode.PREFLIGHT, _output(proc)
    errors = [line for line in _lines(proc) if line.startswith("error:")]
    assert len(errors) == 2, errors
    assert any("GROQ_API_KEY is not set (needed by groq/llama-3.1-8b-instant)" in e
               for e in errors)
    assert any("no tasks selected" in e for e in errors)
    assert "preflight failed (2 problems)" in _output(proc)
    assert not (tmp_path / "jobs").exists()


def test_a_key_the_provider_refuses_stops_the_run(run_cli, tasks, tmp_path, provider):
    proc = run_cli("run", str(tasks), "-a", "builtin", "-m", "openai/m",
                   "--api-base", provider.server.base_url, "--jobs-dir", str(tmp_path / "jobs"),
                   env={"OPENAI_API_KEY": "sk-wrong"}, timeout=120)
    assert proc.returncode == ExitCode.PREFLIGHT, _output(proc)
    out = _output(proc)
    assert "refused the key for openai/m (HTTP 401)" in out and "OPENAI_API_KEY" in out
    assert provider.server.seen_keys == ["sk-wrong"]  # one request, the real key
    assert not (tmp_path / "jobs").exists()


def test_a_model_the_provider_does_not_serve_stops_the_run(run_cli, tasks, tmp_path, provider):
    proc = run_cli("run", str(tasks), "-a", "builtin", "-m", "openai/gpt-4.l",
                   "--api-base", provider.server.base_url, "--jobs-dir", str(tmp_path / "jobs"),
                   env={"OPENAI_API_KEY": KEY}, timeout=120)
    assert proc.returncode == ExitCode.PREFLIGHT, _output(proc)
    assert "does not serve openai/gpt-4.l (HTTP 404)" in _output(proc)
    assert "`gpt-4.l` does not exist" in _output(proc)  # the provider's own words
    assert not (tmp_path / "jobs").exists()


def test_a_provider_that_cannot_be_reached_stops_the_run(run_cli, tasks, tmp_path):
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = run_cli("run", str(tasks), "-a", "builtin", "-m", "openai/m",
                   "--api-base", f"http://127.0.0.1:{port}/v1",
                   "--jobs-dir", str(tmp_path / "jobs"), env={"OPENAI_API_KEY": KEY},
                   timeout=120)
    assert proc.returncode == ExitCode.PREFLIGHT, _output(proc)
    assert f"cannot reach the provider for openai/m at http://127.0.0.1:{port}/v1" in \
        _output(proc)
    assert not (tmp_path / "jobs").exists()


def test_a_provider_that_answers_lets_the_run_go_ahead(run_cli, tasks, tmp_path, provider):
    proc = run_cli("run", str(tasks), "-a", "nop", "-m", "openai/m",
                   "--api-base", provider.server.base_url, "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "j", env={"OPENAI_API_KEY": KEY}, timeout=300)
    assert proc.returncode == ExitCode.OK, _output(proc)
    assert "preflight: openai/m answered in" in _output(proc)
    assert provider.server.seen_keys == [KEY]  # nop sends nothing: that was the preflight
    assert (tmp_path / "jobs" / "j" / "one__1" / "result.json").is_file()


def test_no_preflight_skips_the_model_check(run_cli, tasks, tmp_path):
    proc = run_cli("run", str(tasks), "-a", "nop", "-m", "openai/gpt-4.1", "--no-preflight",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j", env=NO_KEYS,
                   timeout=300)
    assert proc.returncode == ExitCode.OK, _output(proc)
    assert "OPENAI_API_KEY" not in _output(proc)
    assert (tmp_path / "jobs" / "j" / "one__1" / "result.json").is_file()


def test_a_job_where_too_many_trials_errored_exits_4(run_cli, make_task, tmp_path):
    make_task("good")
    broken = make_task("broken")
    (broken / "tests" / "test.sh").unlink()  # its trials end as task_invalid errors
    base = ("run", str(tmp_path / "tasks"), "-a", "nop", "--jobs-dir", str(tmp_path / "jobs"))
    half = run_cli(*base, "--job-name", "half", timeout=300)
    assert half.returncode == ExitCode.OK, _output(half)  # 1 of 2 is not more than 0.5
    strict = run_cli(*base, "--job-name", "strict", "--max-error-rate", "0.25", timeout=300)
    assert strict.returncode == ExitCode.TOO_MANY_ERRORS, _output(strict)
    assert "1 of 2 trials errored (50% > --max-error-rate 0.25)" in _output(strict)
    summary = json.loads((tmp_path / "jobs" / "strict" / "summary.json").read_text())
    assert summary["complete"] and summary["n_errored"] == 1  # the results are all kept


def test_run_help_lists_the_exit_codes(run_cli):
    proc = run_cli("run", "--help", timeout=60)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    for code in (ExitCode.OK, ExitCode.USAGE, ExitCode.PREFLIGHT, ExitCode.TOO_MANY_ERRORS,
                 ExitCode.INTERRUPTED):
        assert f"{int(code)}: " in text, code
    assert "--max-error-rate" in text and "--no-preflight" in text


@pytest.mark.parametrize(("status", "text", "fault"), [
    (200, "", None),
    (401, "", "auth"), (403, "", "auth"),
    (404, "", "unknown_model"),
    (400, '{"error": {"message": "The model `gpt-4.l` does not exist"}}', "unknown_model"),
    (400, "litellm.NotFoundError: model not found", "unknown_model"),
    (400, "invalid model ID", "unknown_model"),
    (400, "AuthenticationError: Incorrect API key provided", "auth"),
    (400, "max_tokens is too large", "bad_request"),
    (422, "", "bad_request"),
    (429, "", "rate_limited"),
    (500, "", "unavailable"), (502, "cannot reach openai", "unavailable"), (529, "", "unavailable"),
])
def test_provider_answers_are_classified(status, text, fault):
    assert classify(status, text) == fault
