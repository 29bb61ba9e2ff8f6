"""Harbor's separate verifier (`[verifier] environment_mode = "separate"`, or
`--verifier-mode separate` for any task), on both backends: the tests run in a fresh
sandbox of the task's environment holding only the agent's working directory and
/logs/artifacts.

An honest agent's outputs are scored there; an agent that gives a wrong answer and plants
code where the verifier's machinery would load it without being asked (a command on PATH,
Python's start-up hooks, the loader's preload list, a process left running, a link to the
tests' own expected answer) scores 0, because none of it reaches the verifier's sandbox.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .support import backend_dockerfile, load, run_sandlot, write_task

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, pytest.mark.timeout(900)]

SEPARATE_TOML = ('version = "1.0"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
                 'environment_mode = "separate"\n')

#: 42 in /app/answer.txt is the right answer. What the verifier's sandbox shows is kept
#: in seen.txt (a process left running is looked for by its `sleep 31337`).
TEST_SH = """\
got=$(head -c 100 /app/answer.txt 2>/dev/null)
if [ "$got" = 42 ]; then r=1; else r=0; fi
echo $r > /logs/verifier/reward.txt
{ ls -la /app/sub; cat /logs/artifacts/note.txt; ls /usr/local/lib/left-behind.txt
  grep -l '3133[7]' /proc/[0-9]*/cmdline; } > /logs/verifier/seen.txt 2>&1
"""

WRONG = "mkdir -p /app && echo 41 > /app/answer.txt\n"
#: Each gives a wrong answer and plants what would make it score 1 if it reached the
#: verifier: a `head` and a `bash` on PATH that write the reward, a link to the tests'
#: own answer, a process left running.
ATTACKS = {
    "path-shadow": WRONG + (
        "for tool in head bash; do printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n"
        "echo 42\\n' > /usr/local/bin/$tool; chmod +x /usr/local/bin/$tool; done\n"),
    "link-out": "mkdir -p /app && ln -s /tests/answer.txt /app/answer.txt\n",
    "left-running": WRONG + "nohup sleep 31337 > /dev/null 2>&1 &\n",
}


def run_job(cache_dir: Path, tmp_path: Path, sandbox: str, *extra: str) -> Path:
    proc = run_sandlot(cache_dir, "run", str(tmp_path / "tasks"), "--agent", "oracle",
                       "--sandbox", sandbox, "--jobs-dir", str(tmp_path / "jobs"),
                       "--job-name", "sep", "-n", "2", *extra, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp_path / "jobs" / "sep"


@pytest.mark.parametrize("sandbox", ["local", "docker"])
def test_an_honest_agents_outputs_are_scored_in_a_fresh_sandbox(cache_dir, tmp_path, sandbox):
    dockerfile = backend_dockerfile(sandbox)
    write_task(tmp_path / "tasks", "honest", task_toml=SEPARATE_TOML, test_sh=TEST_SH,
               dockerfile=dockerfile,
               solve_sh=("echo 42 > /app/answer.txt; mkdir -p /app/sub /logs/artifacts\n"
                         "ln -s ../answer.txt /app/sub/link; echo kept > /logs/artifacts/note.txt\n"
                         "echo 'x' > /usr/local/lib/left-behind.txt\n"))
    job = run_job(cache_dir, tmp_path, sandbox)
    trial = job / "honest__1"
    result = load(trial / "result.json")
    assert result["error"] is None, result["error"]
    assert result["reward"] == 1.0
    assert result["verifier_mode"] == "separate"
    seen = (trial / "verifier" / "logs" / "seen.txt").read_text()
    assert "link -> ../answer.txt" in seen  # a link inside the outputs is kept
    assert "kept" in seen  # /logs/artifacts came along
    assert "No such file" in seen  # what the agent left outside them did not
    carried = (trial / "verifier" / "outputs.txt").read_text()
    assert "/app" in carried and "/logs/artifacts" in carried
    assert "left out" not in carried


@pytest.mark.parametrize("sandbox", ["local", "docker"])
def test_nothing_the_agent_planted_outside_its_outputs_reaches_the_verifier(
        cache_dir, tmp_path, record, sandbox):
    dockerfile = backend_dockerfile(sandbox)
    for name, attack in ATTACKS.items():
        write_task(tmp_path / "tasks", name, test_sh=TEST_SH, dockerfile=dockerfile,
                   solve_sh=attack, files={"tests/answer.txt": "42"})
    job = run_job(cache_dir, tmp_path, sandbox, "--verifier-mode", "separate")
    outcomes = {}
    for name in ATTACKS:
        result = load(job / f"{name}__1" / "result.json")
        assert result["verifier_mode"] == "separate", name
        assert result["error"] is None, (name, result["error"])
        outcomes[f"{name} ({sandbox})"] = result["reward"] == 0.0
    reached = record.attempts(outcomes)
    assert not reached, reached
    carried = (job / "link-out__1" / "verifier" / "outputs.txt").read_text()
    assert "/app/answer.txt: a link to /tests/answer.txt" in carried
    seen = (job / "left-running__1" / "verifier" / "logs" / "seen.txt").read_text()
    assert "/proc/" not in seen, seen
