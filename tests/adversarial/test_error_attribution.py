"""Who caused an error decides its kind. An agent that breaks what the verifier needs
(its working directory, the shell or interpreter test.sh runs, the logs folders) must
not turn its failure into a `verifier_error` that leaves the pass rate: when test.sh
cannot score what the agent left but scores the pristine environment, the trial is the
agent's failure (reward 0). A task whose test.sh is broken on its own stays an error,
and says it is the task's.

Every attack is a task's instruction (the wrong answer, then the breakage), run by
ShellAgent inside the sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .support import SHELL_AGENT, load, needs_root_sandbox, run_sandlot, write_task

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, needs_root_sandbox,
              pytest.mark.timeout(600)]

#: A Harbor-style test.sh: it scores 0 or 1 whenever it can run at all.
TEST_SH = """
cd /app
if python3 -c "import sys; sys.exit(open('answer.txt').read().strip() != '42')"
then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
WRONG = "mkdir -p /app && echo 41 > /app/answer.txt\n"

#: name -> the agent's script (each leaves the wrong answer, then breaks something).
ATTACKS: dict[str, str] = {
    "workdir-removed": "cd / && rm -rf /app\n",
    "workdir-a-file": "cd / && rm -rf /app && echo 41 > /app\n",
    "no-bash": "rm -f /usr/bin/bash /bin/bash\n",
    "no-python": "rm -f /usr/bin/python3* /usr/local/bin/python3*\n",
    "logs-locked": "chmod 000 /logs /logs/verifier; chattr +i /logs /logs/verifier 2>/dev/null\n",
    "logs-moved": "mv /logs /logs-old 2>/dev/null; mkdir -p /logs; echo x > /logs/verifier\n",
    # One `mkdir -p` (a loop of `mkdir d && cd d` grows quadratic in bash: 30 s here).
    "agent-logs-deep": ("p=/logs/agent/$(printf 'd/%.0s' $(seq 1200)) && mkdir -p \"$p\" && "
                        "echo x > \"${p}leaf\"\n"),
}


@pytest.fixture(scope="module")
def attribution_job(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    base = tmp_path_factory.mktemp("attribution")
    tasks = base / "tasks"
    for name, attack in ATTACKS.items():
        write_task(tasks, name, instruction=WRONG + attack, test_sh=TEST_SH)
    # The task's own fault: its test.sh never writes a reward, whatever the agent does.
    write_task(tasks, "task-broken", instruction="echo 42 > /app/answer.txt\n",
               test_sh="echo 'tests ran, no reward written'\n")
    # And one that passes, to show the check costs an honest agent nothing.
    write_task(tasks, "honest", instruction="echo 42 > /app/answer.txt\n", test_sh=TEST_SH)
    proc = run_sandlot(cache_dir, "run", str(tasks), "--agent", SHELL_AGENT,
                       "--jobs-dir", str(base / "jobs"), "--job-name", "a", "-n", "2",
                       timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return base / "jobs" / "a"


def trial(job: Path, name: str) -> dict[str, Any]:
    return load(job / f"{name}__1" / "result.json")


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_breaking_the_verifier_is_the_agents_failure(attribution_job, name, record):
    result = trial(attribution_job, name)
    record.attempt(name, result["error"] is None and result["reward"] == 0.0)
    assert result["error"] is None, result["error"]
    assert result["reward"] == 0.0 and not result["passed"]


def test_a_task_that_never_writes_a_reward_stays_the_tasks_error(attribution_job):
    result = trial(attribution_job, "task-broken")
    assert result["error"]["kind"] == "reward_missing"
    assert result["error"]["caused_by"] == "task"
    assert result["reward"] is None


def test_the_honest_agent_passes(attribution_job):
    result = trial(attribution_job, "honest")
    assert result["passed"] and result["error"] is None


def test_the_summary_counts_failures_and_errors_by_who_caused_them(attribution_job):
    """Every attack is a failure, those that broke the verifier or the sandbox counted
    apart from honest ones; the one error is the task's."""
    summary = load(attribution_job / "summary.json")
    results = [trial(attribution_job, name) for name in ATTACKS]
    broke = sum(r["verifier_failure"] is not None for r in results)
    tampered = sum(r["integrity"]["status"] == "tampered" for r in results)
    assert (summary["n_passed"], summary["n_failed"], summary["n_errored"]) == (
        1, len(ATTACKS), 1)
    assert (summary["n_verifier_broken"], summary["n_tampered"]) == (broke, tampered)
    assert broke >= 2, [r["verifier_failure"] for r in results]  # workdir gone, no bash...
    assert summary["errors_by_cause"] == {"task": 1}
