"""A run with real-looking provider keys in its environment: the keys reach the provider and
nothing else (no file under jobs/, no line of the CLI's output, no sandbox environment).
A secret the user marks is redacted wherever a trajectory echoes it.

The provider is sandlot's stand-alone scripted server, demanding the OpenAI key like a real
provider; the built-in agent reaches it through the gateway (`openai/...` pass-through).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.gateway_support import ThreadedProvider

from .support import SCRIPTS, files_containing, load, needs_root_sandbox, run_sandlot, write_task

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, needs_root_sandbox]

OPENAI_KEY = "sk-proj-" + secrets.token_urlsafe(60)
ANTHROPIC_KEY = "sk-ant-api03-" + secrets.token_urlsafe(70)
ENV_SH = "env > /logs/verifier/env.txt; echo 1 > /logs/verifier/reward.txt\n"


@pytest.fixture(scope="module")
def keyed_run(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("secrets")
    write_task(root / "tasks", "env-only", test_sh=ENV_SH,
               instruction="Report what the sandbox holds.\n")
    write_task(root / "tasks", "proc-environ", test_sh=ENV_SH,
               instruction="Report what the sandbox holds: proc-environ.\n")
    provider = ThreadedProvider("adv-secrets", SCRIPTS, required_key=OPENAI_KEY)
    try:
        proc = run_sandlot(cache_dir, "run", str(root / "tasks"), "--agent", "builtin",
                           "--model", "openai/adv-model", "--api-base", provider.server.base_url,
                           "-n", "2", "--jobs-dir", str(root / "jobs"), "--job-name", "keyed",
                           env={"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY})
    finally:
        provider.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield {"job": root / "jobs" / "keyed", "output": proc.stdout + proc.stderr,
           "seen_keys": list(provider.server.seen_keys)}


def test_the_provider_key_reaches_the_provider_only(keyed_run, record):
    # The control: the key was really used, on every request, by sandlot's gateway.
    assert keyed_run["seen_keys"] and set(keyed_run["seen_keys"]) == {OPENAI_KEY}
    trial = keyed_run["job"] / "env-only__1"
    result = load(trial / "result.json")
    assert result["error"] is None and result["usage"]["n_requests"] == 2, result
    trace = (trial / "agent" / "builtin_trajectory.jsonl").read_text()
    assert "PATH=" in trace and "scanned" in trace  # the dump really happened
    for name, key in (("OpenAI", OPENAI_KEY), ("Anthropic", ANTHROPIC_KEY)):
        outcome = record.attempts({
            f"{name} key in the sandbox's environment or files": key not in trace,
            f"{name} key in the verifier's environment": key not in (
                trial / "verifier" / "logs" / "env.txt").read_text(),
            f"{name} key in a file of the trial": not files_containing(trial, key),
            f"{name} key in the CLI's output": key not in keyed_run["output"],
        })
        assert not outcome, outcome
    for path in keyed_run["job"].glob("*.json"):
        assert OPENAI_KEY not in path.read_text()


def test_no_process_in_the_sandbox_holds_a_provider_key(keyed_run, record):
    trial = keyed_run["job"] / "proc-environ__1"
    assert load(trial / "result.json")["error"] is None
    trace = (trial / "agent" / "builtin_trajectory.jsonl").read_text()
    assert "PATH=" in trace  # the dump really happened
    leaked = [name for name, key in (("OpenAI", OPENAI_KEY), ("Anthropic", ANTHROPIC_KEY))
              if files_containing(trial, key)]
    record.attempts({f"{name} key read from /proc/*/environ": name not in leaked
                     for name in ("OpenAI", "Anthropic")})
    assert not leaked, leaked


def test_a_secret_the_user_marks_is_redacted_from_trajectories(cache_dir, tmp_path, record):
    token = "adv-user-token-" + secrets.token_hex(16)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "adv-echo.toml").write_text(
        'task = "*"\n\n[[turns]]\n'
        f'run = "echo the deploy token is {token}"\n\n'
        f'[[turns]]\ntext = "The token is {token}."\n')
    write_task(tmp_path / "tasks", "echo",
               test_sh=f"echo {token}; echo 1 > /logs/verifier/reward.txt")
    proc = run_sandlot(cache_dir, "run", str(tmp_path / "tasks"), "--agent", "builtin",
                       "--model", "scripted/adv-echo", "--scripts-dir", str(scripts),
                       "--redact-env", "ADV_USER_TOKEN", "--jobs-dir", str(tmp_path / "jobs"),
                       "--job-name", "r", env={"ADV_USER_TOKEN": token})
    record.attempt("a marked secret echoed into the trajectory",
                   proc.returncode == 0 and not files_containing(tmp_path / "jobs", token))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not files_containing(tmp_path / "jobs", token)
    assert token not in proc.stdout + proc.stderr
    assert "[REDACTED:ADV_USER_TOKEN]" in (
        tmp_path / "jobs" / "r" / "echo__1" / "trajectory" / "llm_trajectory.jsonl").read_text()
