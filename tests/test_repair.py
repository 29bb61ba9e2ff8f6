"""Repair attempts through the real stack: built-in agent, gateway, scripted model, sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO
from sandlot.feedback import HIDDEN, filter_output

pytestmark = [pytest.mark.e2e]

CHECK_PY = '''import sys
answer = open("/app/answer.txt").read().strip()
assert answer == "42", "the answer file holds the wrong number"
'''


def _task(make_task) -> Path:
    return make_task("answer", files={"tests/check.py": CHECK_PY}, test_sh="""
        if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt
        else echo 0 > /logs/verifier/reward.txt; fi
    """)


def _run(run_cli, tmp_path, *extra):
    return run_cli("run", str(tmp_path / "tasks"), "--agent", "builtin",
                   "--model", "scripted/repairer",
                   "--scripts-dir", str(REPO / "tests" / "scripted"),
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "r", *extra)


def test_failed_first_attempt_is_repaired_through_feedback(run_cli, make_task, tmp_path):
    _task(make_task)
    proc = _run(run_cli, tmp_path, "--repair-attempts", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "r" / "answer__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["passed"] and result["repaired"] and result["counted_attempt"] == 2
    first, second = result["attempts"]
    assert first["evaluation"]["reward"] == 0.0 and first["feedback"] is None
    assert second["evaluation"]["reward"] == 1.0  # a feedback run saw the fix: stop there
    feedback = second["feedback"]
    assert "not complete yet" in feedback and "AssertionError" in feedback
    assert "the answer file holds the wrong number" in feedback
    # The failing line of the test's source is never shown to the agent.
    assert 'assert answer == "42"' not in feedback and HIDDEN in feedback
    # The feedback reached the model through the gateway, as the next user message.
    exchanges = [json.loads(line) for line in
                 (trial / "trajectory" / "llm_trajectory.jsonl").read_text().splitlines()]
    sent = [m["content"] for e in exchanges for m in e["request"]["messages"]
            if m["role"] == "user"]
    assert feedback in sent
    usage = result["usage"]
    assert usage["n_requests"] == len(exchanges) == 4
    assert usage["input_tokens"] == sum(e["usage"]["input_tokens"] for e in exchanges)
    # Turns and tool calls cover every generation, as the gateway's usage does.
    per_attempt = [a["generation"]["turns"] for a in result["attempts"]]
    assert len(per_attempt) == 2 and all(n >= 1 for n in per_attempt)
    assert result["agent_info"]["turns"] == sum(per_attempt)
    assert result["agent_info"]["tool_calls"] == sum(
        a["generation"]["tool_calls"] for a in result["attempts"])
    assert not (trial / "verifier" / "logs" / "reward.json").exists()


def test_without_repair_attempts_the_first_answer_counts(run_cli, make_task, tmp_path):
    _task(make_task)
    proc = _run(run_cli, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "jobs" / "r" / "answer__1" / "result.json").read_text())
    assert result["reward"] == 0.0 and not result["repaired"] and result["attempts"] == []


def test_a_task_template_overrides_the_run_template(run_cli, make_task, tmp_path):
    task = _task(make_task)
    toml = (task / "task.toml").read_text().replace(
        "[agent]\n", '[agent]\nrepair_feedback_template = "Try again ({attempt}/{max_attempts}):'
        ' not complete yet. {feedback}"\n')
    (task / "task.toml").write_text(toml)
    run_template = tmp_path / "tpl.txt"
    run_template.write_text("RUN TEMPLATE {feedback}")
    proc = _run(run_cli, tmp_path, "--repair-attempts", "1", "--repair-template",
                str(run_template))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "jobs" / "r" / "answer__1" / "result.json").read_text())
    assert result["attempts"][1]["feedback"].startswith("Try again (2/2): not complete yet.")
    assert result["repaired"]


def test_a_broken_run_template_is_refused_up_front(run_cli, make_task, tmp_path):
    _task(make_task)
    bad = tmp_path / "bad.txt"
    bad.write_text("{nonsense}")
    proc = _run(run_cli, tmp_path, "--repair-attempts", "1", "--repair-template", str(bad))
    assert proc.returncode == 2
    assert "repair-template" in proc.stdout and "{feedback}" in proc.stdout
    assert not (tmp_path / "jobs" / "r").exists()


def test_filter_output_hides_test_and_solution_lines(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text("def test_x():\n    assert compute(2) == 4, 'math'\n")
    output = ("FAILED test_x.py::test_x - AssertionError: math\n"
              ">       assert compute(2) == 4, 'math'\n"
              "E       AssertionError: math\n")
    shown = filter_output(output, [tests])
    assert "compute(2) == 4" not in shown and HIDDEN in shown
    assert "FAILED test_x.py::test_x" in shown and "E       AssertionError: math" in shown
    long = filter_output("x\n" * 10_000, [tests], limit=100)
    assert long.startswith("[…earlier output trimmed…]") and len(long) < 200


def test_repairs_run_the_agent_and_the_verifier_as_the_users_the_task_names(run_cli,
                                                                             make_task,
                                                                             tmp_path):
    """The feedback run between attempts is the verifier's: it runs as [verifier] user
    (here root), not as the agent's user, and the agent's files stay the agent's."""
    make_task("answer", files={"tests/check.py": CHECK_PY},
              task_toml='[agent]\ntimeout_sec = 60\nuser = "agent"\n',
              dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nRUN chmod 1777 /app\n",
              test_sh="""
        [ "$(id -u)" = 0 ] || { echo "verifier is $(id -un)"; exit 1; }
        [ "$(stat -c %U /app/answer.txt)" = agent ] || { echo "not the agent's"; exit 1; }
        if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt
        else echo 0 > /logs/verifier/reward.txt; fi
    """)
    proc = _run(run_cli, tmp_path, "--repair-attempts", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "jobs" / "r" / "answer__1" / "result.json").read_text())
    assert result["passed"] and result["repaired"], result
    assert result["attempts"][0]["evaluation"]["reward"] == 0.0


def test_repairs_with_a_separate_verifier(run_cli, make_task, tmp_path):
    """Each feedback run and the final run score a fresh sandbox holding the agent's
    outputs: what one run of the tests leaves never reaches the agent or the next run."""
    make_task("answer", files={"tests/check.py": CHECK_PY}, test_sh="""
        if [ -e /app/.tests-were-here ]; then touch /logs/verifier/leaked; fi
        touch /app/.tests-were-here
        if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt
        else echo 0 > /logs/verifier/reward.txt; fi
    """)
    proc = _run(run_cli, tmp_path, "--repair-attempts", "2", *SEPARATE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "r" / "answer__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["verifier_mode"] == "separate" and result["error"] is None, result["error"]
    assert result["passed"] and result["repaired"] and result["counted_attempt"] == 2
    assert "AssertionError" in result["attempts"][1]["feedback"]
    assert (trial / "verifier" / "logs" / "reward.txt").is_file()
    assert not (trial / "verifier" / "logs" / "leaked").exists()
    assert ".tests-were-here" not in (trial / "agent" / "workspace.diff").read_text()


#: The flag the separate-verifier repair test runs with.
SEPARATE = ("--verifier-mode", "separate")
