"""End to end through the CLI: the built-in agent on a scripted model solves a task in a
local sandbox; result.json / summary.json usage is the gateway's own count, and the host's
provider keys appear nowhere (not in the sandbox's env, not in any file of the job)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import files_containing

from .gateway_support import SCRIPTS, TOKEN_FIELDS, records, usage_sum

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None,
                       reason="the local sandbox needs root and bubblewrap"),
]

TEST_SH = """
env > /logs/verifier/verifier_env.txt
cp /app/agent_env.txt /logs/verifier/agent_env.txt
if [ "$(cat /app/answer.txt)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
#: gw-solve's three turns at $2 / $8 per Mtok.
TRIAL_COST = (500 * 2 + 40 * 8 + 600 * 2 + 30 * 8 + 700 * 2 + 10 * 8) / 1e6


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_builtin_agent_on_a_scripted_model_counts_usage_and_leaks_no_key(
        run_cli, make_task, tmp_path):
    host_secret = "sk-host-secret-" + secrets.token_hex(16)
    anthropic_secret = "sk-ant-host-secret-" + secrets.token_hex(16)
    task = make_task("gw-answer", test_sh=TEST_SH, instruction="Write 42 to /app/answer.txt.\n")
    jobs = tmp_path / "jobs"
    proc = run_cli("run", str(task), "--agent", "builtin", "--model", "scripted/gw-solve",
                   "--scripts-dir", str(SCRIPTS), "-k", "2", "-n", "2",
                   "--jobs-dir", str(jobs), "--job-name", "gw", timeout=120,
                   env={"OPENAI_API_KEY": host_secret, "ANTHROPIC_API_KEY": anthropic_secret})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = jobs / "gw"
    trial_dirs = sorted(p.parent for p in job.glob("*/result.json"))
    assert [d.name for d in trial_dirs] == ["gw-answer__1", "gw-answer__2"]

    usages = []
    for trial in trial_dirs:
        result = load(trial / "result.json")
        assert result["error"] is None and result["passed"] is True, result
        usage = result["usage"]
        assert usage["source"] == "gateway"
        recs = records(trial / "trajectory" / "llm_trajectory.jsonl")
        assert len(recs) == 3 and all(r["status"] == 200 for r in recs)
        assert all(r["trial"] == trial.name for r in recs)
        expected = usage_sum(recs)
        for key in (*TOKEN_FIELDS, "n_requests"):
            assert usage[key] == expected[key], (trial.name, key)
        assert usage["cost_usd"] == pytest.approx(expected["cost_usd"])
        assert usage["cost_usd"] == pytest.approx(TRIAL_COST)
        assert (usage["input_tokens"], usage["output_tokens"], usage["cache_read_tokens"]) == (
            1800, 80, 100)
        # The agent used both tools the script asked for, mapped onto its own tool names.
        assert result["agent_info"]["tool_calls"] == 2
        assert result["agent_info"]["tools_used"] == ["bash", "write_file"]
        usages.append(usage)

    summary = load(job / "summary.json")
    assert summary["n_trials"] == summary["n_passed"] == 2
    total = summary["usage"]
    assert total["source"] == "gateway"
    for key in (*TOKEN_FIELDS, "n_requests"):
        assert total[key] == sum(u[key] for u in usages), key
    assert total["cost_usd"] == pytest.approx(2 * TRIAL_COST)

    # The sandbox never saw the host's keys: both phases' env dumps are here, and clean.
    for trial in trial_dirs:
        dumps = [p for p in trial.rglob("*_env.txt")]
        assert {p.name for p in dumps} == {"agent_env.txt", "verifier_env.txt"}, dumps
        for dump in dumps:
            env = dump.read_text()
            assert "PATH=" in env
            assert "OPENAI_API_KEY" not in env and "ANTHROPIC_API_KEY" not in env
    # ...and no file of the job (nor anything else the test made) holds them.
    for secret in (host_secret, anthropic_secret):
        assert files_containing(tmp_path, secret) == []
        assert secret not in proc.stdout + proc.stderr
