"""Faults inside one trial become the right error kind on that trial only: the other trials
of the same job (running beside it, -n 4) pass.

The agent crashes, hangs, floods its output, forks a bomb, writes a lot to its workspace,
runs out of memory; the verifier hangs, floods, forks, writes garbage; the model (scripted,
through the gateway) answers with 429 and 500 storms, stalls, cut streams and broken tool
calls. Agent-phase faults are the agent's own result: the verifier still scores its work.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from .support import (
    SCRIPTS,
    SHELL_AGENT,
    kind,
    load,
    needs_root_sandbox,
    pgrep,
    results,
    run_sandlot,
    write_task,
)

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, needs_root_sandbox]

SCORE_DONE = "if [ -f /app/done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt"
FORK_PY = """python3 -c '
import os, time
n = 0
while n < 20000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    n += 1
print("forked", n)
'"""
DISK_MB = 256
MARKER = f"adv-faults-{os.getpid()}"

#: name -> (agent's instruction, test.sh, task.toml or None, expected kind, expected reward)
AGENT_FAULTS: dict[str, tuple[str, str, str | None, str | None, float | None]] = {
    "good-1": ("echo ok > /app/done", SCORE_DONE, None, None, 1.0),
    "good-2": ("echo ok > /app/done", SCORE_DONE, None, None, 1.0),
    "good-3": ("echo ok > /app/done", SCORE_DONE, None, None, 1.0),
    "crash-kill": ("echo ok > /app/done; kill -KILL $$", SCORE_DONE, None, None, 1.0),
    "crash-segv": ("echo ok > /app/done; kill -SEGV $$", SCORE_DONE, None, None, 1.0),
    "hang": (f"echo ok > /app/done; sh -c 'sleep 1000; :' {MARKER}", SCORE_DONE,
             "[agent]\ntimeout_sec = 2\n", "agent_timeout", 1.0),
    "flood-stdout": ("echo ok > /app/done; head -c 100000000 /dev/zero | tr '\\0' x",
                     SCORE_DONE, None, None, 1.0),
    "fork-bomb": ("echo ok > /app/done\n" + FORK_PY, SCORE_DONE, None, "pids_limit", 1.0),
    "memory-hog": ("echo ok > /app/done; python3 -c 'x = bytearray(400 * 1024 * 1024)'",
                   SCORE_DONE, "[agent]\ntimeout_sec = 60\n[environment]\nmemory_mb = 64\n",
                   "agent_oom", 1.0),
    "disk-write": (f"dd if=/dev/zero of=/app/big bs=1M count={DISK_MB} status=none "
                   "&& echo ok > /app/done",
                   f"[ $(stat -c %s /app/big) = {DISK_MB * 1024 * 1024} ] && echo 1 "
                   "> /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt",
                   None, None, 1.0),
    # With a quota (storage_mb): filling it is the agent's fault (kind disk_limit, scored);
    # the verifier still runs, even on a disk full to the last byte (its tests and logs
    # are mounted from outside the task's disk). Staying under the quota changes nothing.
    "disk-fill": ("echo ok > /app/done; dd if=/dev/zero of=/app/fill bs=1M count=64 "
                  "status=none; true", SCORE_DONE, "[environment]\nstorage_mb = 32\n",
                  "disk_limit", 1.0),
    "disk-fill-all": ("echo ok > /app/done; dd if=/dev/zero of=/app/fill bs=1M count=64 "
                      "status=none; i=0; while echo x > /app/f$i 2>/dev/null; do "
                      "i=$((i + 1)); done; true", SCORE_DONE,
                      "[environment]\nstorage_mb = 32\n", "disk_limit", 1.0),
    "disk-under-quota": ("dd if=/dev/zero of=/app/some bs=1M count=8 status=none && "
                         "echo ok > /app/done", SCORE_DONE,
                         "[environment]\nstorage_mb = 32\n", None, 1.0),
    "v-hang": ("echo ok > /app/done", f"sh -c 'sleep 1000; :' {MARKER}",
               "[verifier]\ntimeout_sec = 2\n", "verifier_timeout", None),
    "v-flood": ("echo ok > /app/done",
                "head -c 50000000 /dev/zero | tr '\\0' y; " + SCORE_DONE, None, None, 1.0),
    "v-fork-bomb": ("echo ok > /app/done", FORK_PY + "\n" + SCORE_DONE, None,
                    "pids_limit", None),
    "v-binary-reward": ("echo ok > /app/done",
                        "head -c 300 /dev/urandom > /logs/verifier/reward.txt", None,
                        "reward_parse_error", None),
    "v-deep-json": ("echo ok > /app/done",
                    "python3 -c \"print('[' * 100000)\" > /logs/verifier/reward.json", None,
                    "reward_parse_error", None),
    "v-nan": ("echo ok > /app/done", "echo nan > /logs/verifier/reward.txt", None,
              "reward_parse_error", None),
    "v-exit-no-reward": ("echo ok > /app/done", "echo checking; exit 3", None,
                         "reward_missing", None),
}
PHASE = {"agent_timeout": "agent", "pids_limit": None, "agent_oom": "agent",
         "disk_limit": "agent",
         "verifier_timeout": "verify", "reward_parse_error": "verify",
         "reward_missing": "verify"}

ANSWER_SH = ("if [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi "
             "> /logs/verifier/reward.txt")
#: The model's faults: task -> (expected kind, expected reward); scripts in adv-faults/.
MODEL_FAULTS: dict[str, tuple[str | None, float]] = {
    "m-good-1": (None, 1.0),
    "m-good-2": (None, 1.0),
    "m-burst": (None, 1.0),
    "m-cut": (None, 1.0),
    "m-bad-tool": (None, 1.0),
    "m-storm-429": ("agent_error", 0.0),
    "m-storm-500": ("agent_error", 0.0),
    "m-stall": ("agent_timeout", 0.0),
}


@pytest.fixture(scope="module")
def agent_faults(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if shutil.disk_usage(cache_dir).free < 4 * DISK_MB * 1024 * 1024:
        pytest.skip("not enough free disk for the bounded workspace write")
    root = tmp_path_factory.mktemp("agent-faults")
    for name, (instruction, test_sh, toml, _, _) in AGENT_FAULTS.items():
        write_task(root / "tasks", name, instruction=instruction, test_sh=test_sh,
                   task_toml=toml)
    proc = run_sandlot(cache_dir, "run", str(root / "tasks"), "--agent", SHELL_AGENT,
                       "-n", "4", "--jobs-dir", str(root / "jobs"), "--job-name", "f")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"job": root / "jobs" / "f", "stdout": proc.stdout}


@pytest.mark.parametrize("name", list(AGENT_FAULTS))
def test_an_agent_or_verifier_fault_is_typed_on_its_trial_only(agent_faults, name, record):
    _, _, _, expected_kind, expected_reward = AGENT_FAULTS[name]
    trial = agent_faults["job"] / f"{name}__1"
    result = load(trial / "result.json")
    if not name.startswith("good"):
        record.fault(name)
    assert kind(result) == expected_kind, result["error"]
    assert result["reward"] == expected_reward, result
    if expected_kind is not None:
        phase = PHASE[expected_kind] or ("verify" if name.startswith("v-") else "agent")
        assert result["error"]["phase"] == phase
        assert "Traceback" not in result["error"]["message"]
    assert not (trial / "exception.txt").exists()


def test_exit_codes_and_capped_logs(agent_faults):
    job = agent_faults["job"]
    assert load(job / "crash-kill__1" / "result.json")["agent_exit_code"] == 137
    assert load(job / "crash-segv__1" / "result.json")["agent_exit_code"] == 139
    cap = 8 * 1024 * 1024
    assert (job / "flood-stdout__1" / "agent" / "stdout.txt").stat().st_size == cap
    assert (job / "v-flood__1" / "verifier" / "test_stdout.txt").stat().st_size == cap
    missing = load(job / "v-exit-no-reward__1" / "result.json")["error"]["message"]
    assert "exited 3" in missing and "checking" in missing


def test_the_job_around_the_faults_is_whole(agent_faults, cache_dir, record):
    job = agent_faults["job"]
    found = results(job)
    record.results(len(AGENT_FAULTS), len(found))
    assert set(found) == {f"{n}__1" for n in AGENT_FAULTS}
    summary = load(job / "summary.json")
    expected_kinds: dict[str, int] = {}
    for _, _, _, k, _ in AGENT_FAULTS.values():
        if k is not None:
            expected_kinds[k] = expected_kinds.get(k, 0) + 1
    assert summary["errors_by_kind"] == expected_kinds
    assert summary["n_errored"] == sum(1 for v in AGENT_FAULTS.values() if v[4] is None)
    assert summary["complete"] is True
    # Nothing of the hang survives, and the 256 MB workspace (a task without storage_mb has
    # no quota) and the quota'd disks are gone with their sandboxes.
    assert not pgrep(MARKER)
    scratch = cache_dir / "scratch"
    assert not scratch.exists() or not list(scratch.iterdir())


@pytest.fixture(scope="module")
def model_faults(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("model-faults")
    for name in MODEL_FAULTS:
        write_task(root / "tasks", name, test_sh=ANSWER_SH, agent_timeout=3 if name == "m-stall"
                   else 60, instruction="Write 42 to /app/answer.txt.\n")
    proc = run_sandlot(cache_dir, "run", str(root / "tasks"), "--agent", "builtin",
                       "--model", "scripted/adv-faults", "--scripts-dir", str(SCRIPTS),
                       "-n", "4", "--jobs-dir", str(root / "jobs"), "--job-name", "m")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"job": root / "jobs" / "m"}


@pytest.mark.parametrize("name", list(MODEL_FAULTS))
def test_a_model_fault_is_typed_on_its_trial_only(model_faults, name, record):
    expected_kind, expected_reward = MODEL_FAULTS[name]
    if not name.startswith("m-good"):
        record.fault(name)
    result = load(model_faults["job"] / f"{name}__1" / "result.json")
    assert kind(result) == expected_kind, result["error"]
    assert result["reward"] == expected_reward
    if expected_kind is not None:
        assert result["error"]["phase"] == "agent"
        assert "Traceback" not in result["error"]["message"]
        # An agent's own failure is scored, not errored.
        assert result["passed"] is False


def test_model_faults_are_recorded_in_the_trajectory(model_faults):
    job = model_faults["job"]

    def first_record(task: str) -> dict[str, Any]:
        import json

        lines = (job / f"{task}__1" / "trajectory" / "llm_trajectory.jsonl").read_text()
        return json.loads(lines.splitlines()[0])

    burst = first_record("m-burst")
    assert burst["status"] == 200 and burst["attempts"] == 3
    assert len(burst["retried_errors"]) == 2
    for storm, status in (("m-storm-429", 429), ("m-storm-500", 500)):
        rec = first_record(storm)
        assert rec["status"] == status and rec["attempts"] == 5, rec
    summary = load(job / "summary.json")
    assert summary["errors_by_kind"] == {"agent_error": 2, "agent_timeout": 1}
    assert summary["n_passed"] == 5 and summary["n_errored"] == 0
