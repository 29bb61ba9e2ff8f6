"""End to end through the real CLI, real bubblewrap sandboxes and real task scripts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, sandlot_cmd, write_task

pytestmark = [pytest.mark.e2e]

SHELL_AGENT = "sandlot_test_agents:ShellAgent"


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def results(job: Path) -> dict[str, dict]:
    return {p.parent.name: load(p) for p in job.glob("*/result.json")}


def test_examples_oracle_pass_every_task_with_pass_at_1_and_2(run_cli, examples_dir, tmp_path):
    proc = run_cli("run", str(examples_dir), "--agent", "oracle", "-n", "4", "-k", "2",
                   "--jobs-dir", str(tmp_path), "--job-name", "demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = load(tmp_path / "demo" / "summary.json")
    n_tasks = len(list(examples_dir.glob("*/task.toml")))
    assert n_tasks >= 8
    assert summary["n_trials"] == summary["n_passed"] == 2 * n_tasks
    assert summary["n_errored"] == 0 and summary["pass_rate"] == 1.0
    assert summary["pass_at_k"] == {"1": 1.0, "2": 1.0}
    assert summary["complete"] is True and summary["schema_version"] == 1
    res = results(tmp_path / "demo")
    assert {r["attempt"] for r in res.values()} == {1, 2}
    for r in res.values():
        assert r["reward"] == 1.0 and r["passed"] and r["error"] is None
        assert set(r["timing"]) >= {"setup", "agent", "verify", "cleanup", "total"}
    assert "pass@2" in proc.stdout


def test_examples_builtin_agent_on_scripted_solver_passes_every_task(run_cli, examples_dir,
                                                                   tmp_path):
    """The README demo: the built-in agent, through the gateway, on the scripted model."""
    proc = run_cli("run", str(examples_dir), "--agent", "builtin", "--model", "scripted/solver",
                   "-n", "4", "--jobs-dir", str(tmp_path), "--job-name", "solver")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = load(tmp_path / "solver" / "summary.json")
    assert summary["pass_rate"] == 1.0 and summary["n_errored"] == 0
    usage = summary["usage"]
    assert usage["source"] == "gateway" and usage["n_requests"] > 0
    assert usage["total_tokens"] > 0 and usage["cost_usd"] > 0
    res = results(tmp_path / "solver")
    assert sum(r["usage"]["total_tokens"] for r in res.values()) == usage["total_tokens"]
    for r in res.values():
        assert r["agent_info"]["tool_calls"] > 0
    assert "cost (gateway)" in proc.stdout


def test_examples_tests_fail_on_the_untouched_environment(run_cli, examples_dir, tmp_path):
    proc = run_cli("run", str(examples_dir), "--agent", "nop", "-n", "4",
                   "--jobs-dir", str(tmp_path), "--job-name", "nop")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = results(tmp_path / "nop")
    assert len(res) == len(list(examples_dir.glob("*/task.toml")))
    for name, r in res.items():
        assert r["error"] is None, (name, r["error"])
        assert r["reward"] is not None and r["reward"] < 1.0, name
        assert not r["passed"]


def test_agent_phase_isolation(run_cli, make_task, tmp_path):
    """The agent cannot see tests/solution, host secrets, host files or any network."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    host_marker = tmp_path / "host-only.txt"
    host_marker.write_text("host secret file")
    probe = f"""
        set +e
        out=/app/probe.txt
        check() {{
          if eval "$2" >/dev/null 2>&1; then echo "$1=yes" >> $out; else echo "$1=no" >> $out; fi
        }}
        check tests_dir 'test -n "$(ls -A /tests)"'  # (an empty mount point for them)
        check solution_dir 'ls /solution'
        check task_dir 'ls {tmp_path}/tasks/probe/tests'
        check host_file 'cat {host_marker}'
        check jobs_dir 'test -e {tmp_path}/jobs/iso'
        check secret_env 'env | grep -q SANDLOT_TEST_SECRET'
        check api_key_env 'env | grep -q OPENAI_API_KEY'
        check host_loopback 'timeout 3 bash -c "echo hi > /dev/tcp/127.0.0.1/{port}"'
        check outside_net 'timeout 3 bash -c "echo hi > /dev/tcp/1.1.1.1/53"'
        check write_etc 'echo pwned > /etc/sandlot-isolation-probe'
        check write_host_tmp 'echo pwned > {tmp_path}/written-by-agent'
        echo 1 > /logs/verifier/reward.txt
        echo "home=$HOME" >> $out
    """
    make_task("probe", instruction=probe, test_sh=f"""
        cp /app/probe.txt /logs/verifier/probe.txt
        if timeout 3 bash -c "echo hi > /dev/tcp/127.0.0.1/{port}" 2>/dev/null; then
          echo verify_host_loopback=yes >> /logs/verifier/probe.txt
        else
          echo verify_host_loopback=no >> /logs/verifier/probe.txt
        fi
        echo 0.5 > /logs/verifier/reward.txt
    """)
    try:
        proc = run_cli("run", str(tmp_path / "tasks"), "--agent", SHELL_AGENT,
                       "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "iso",
                       env={"SANDLOT_TEST_SECRET": "s3cr3t", "OPENAI_API_KEY": "sk-test"})
    finally:
        server.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "iso" / "probe__1"
    result = load(trial / "result.json")
    assert result["error"] is None, result["error"]
    # The agent's early reward.txt was discarded: test.sh's 0.5 is what counts.
    assert result["reward"] == 0.5
    probe_lines = (trial / "verifier" / "logs" / "probe.txt").read_text().split()
    seen = dict(line.split("=", 1) for line in probe_lines)
    for key in ("tests_dir", "solution_dir", "task_dir", "host_file", "jobs_dir", "secret_env",
                "api_key_env", "host_loopback", "outside_net", "verify_host_loopback"):
        assert seen[key] == "no", (key, seen)
    # Writes land in the trial's own overlay, never on the host.
    assert seen["write_etc"] == "yes"
    assert not Path("/etc/sandlot-isolation-probe").exists()
    assert not (tmp_path / "written-by-agent").exists()
    assert seen["home"] == "/root"


def test_hanging_solution_is_killed_at_its_timeout(run_cli, make_task, tmp_path):
    make_task("hang", agent_timeout=2, solve_sh="sh -c 'sleep 1000; :' sandlot-hang-marker\n",
              test_sh="echo 0 > /logs/verifier/reward.txt")
    started = time.monotonic()
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "hang")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - started < 60
    result = load(tmp_path / "jobs" / "hang" / "hang__1" / "result.json")
    assert result["error"]["kind"] == "agent_timeout"
    assert result["error"]["phase"] == "agent"
    assert 2 <= result["timing"]["agent"] < 10
    # The verifier still scored what was left: an agent's timeout is its failure, not an
    # infrastructure error, so it counts against the pass rate.
    assert result["reward"] == 0.0 and result["passed"] is False
    summary = load(tmp_path / "jobs" / "hang" / "summary.json")
    assert summary["n_failed"] == 1 and summary["n_errored"] == 0
    assert summary["errors_by_kind"] == {"agent_timeout": 1}
    assert summary["pass_rate"] == 0.0
    leftover = subprocess.run(["pgrep", "-f", "sandlot-hang-marker"], capture_output=True)
    assert leftover.returncode == 1, leftover.stdout


@pytest.mark.parametrize(("test_sh", "kind"), [
    ("echo banana > /logs/verifier/reward.txt", "reward_parse_error"),
    ("echo '{\"reward\": \"high\"}' > /logs/verifier/reward.json", "reward_parse_error"),
    ("echo tests ran but wrote nothing", "reward_missing"),
    ("sleep 600", "verifier_timeout"),
])
def test_verifier_failures_are_typed_errors(run_cli, make_task, tmp_path, test_sh, kind):
    make_task("verify-bad", test_sh=test_sh, verifier_timeout=2)
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "v")
    # The only trial errored: the job ran, and exit code 4 says it is not a result.
    assert proc.returncode == 4, proc.stdout + proc.stderr
    result = load(tmp_path / "jobs" / "v" / "verify-bad__1" / "result.json")
    assert result["error"]["kind"] == kind
    assert result["error"]["phase"] == "verify"
    assert result["reward"] is None and not result["passed"]
    assert kind in proc.stdout


HOG = "python3 -c 'x = bytearray(400 * 1024 * 1024)'\n"
SMALL = '[agent]\ntimeout_sec = 60\n[environment]\nmemory_mb = 64\n'


def test_an_oom_kill_is_named_by_phase_with_the_process_and_the_limit(run_cli, make_task,
                                                                       tmp_path):
    make_task("agent-hog", task_toml=SMALL, solve_sh=HOG,
              test_sh="echo 0 > /logs/verifier/reward.txt")
    make_task("verifier-hog", task_toml=SMALL, test_sh=HOG)
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "m")
    assert proc.returncode in (0, 4), proc.stdout + proc.stderr
    agent = load(tmp_path / "jobs" / "m" / "agent-hog__1" / "result.json")
    assert agent["error"]["kind"] == "agent_oom" and agent["error"]["phase"] == "agent"
    assert "solve.sh was killed by the kernel's OOM killer" in agent["error"]["message"]
    assert "(64 MB)" in agent["error"]["message"]
    assert agent["reward"] == 0  # the agent's own result: still scored
    verifier = load(tmp_path / "jobs" / "m" / "verifier-hog__1" / "result.json")
    assert verifier["error"]["kind"] == "verifier_oom", verifier["error"]
    assert "tests/test.sh was killed" in verifier["error"]["message"]
    assert "(64 MB)" in verifier["error"]["message"]
    assert verifier["error"]["caused_by"] == "task"  # a pristine sandbox hits it too


def test_an_agent_that_fails_after_an_oom_kill_of_its_worker_is_agent_oom(run_cli, make_task,
                                                                          tmp_path):
    # The agent survives the kill of a process it started, then fails with no word of why.
    make_task("worker-hog", task_toml=SMALL, instruction=HOG + "exit 1\n",
              test_sh="echo 0 > /logs/verifier/reward.txt")
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent",
                   "sandlot_test_agents:CrashOnFailureAgent",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "w")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    error = load(tmp_path / "jobs" / "w" / "worker-hog__1" / "result.json")["error"]
    assert error["kind"] == "agent_oom", error
    assert "OOM killer ended 1 process(es)" in error["message"] and "(64 MB)" in error["message"]
    assert "the agent gave up (exit 1)" in error["message"]


def test_override_memory_mb_lifts_the_limit_is_recorded_and_pinned_on_resume(
        run_cli, make_task, tmp_path):
    make_task("agent-hog", task_toml=SMALL, solve_sh=HOG,
              test_sh="echo 1 > /logs/verifier/reward.txt")
    base = ("run", str(tmp_path / "tasks"), "--agent", "oracle", "--jobs-dir",
            str(tmp_path / "jobs"), "--job-name", "o")
    proc = run_cli(*base, "--override-memory-mb", "1024", "--override-cpus", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = load(tmp_path / "jobs" / "o" / "agent-hog__1" / "result.json")
    assert result["error"] is None and result["passed"], result
    config = load(tmp_path / "jobs" / "o" / "config.json")
    assert config["override_memory_mb"] == 1024 and config["override_cpus"] == 1.0
    changed = run_cli(*base, "--override-memory-mb", "2048", "--override-cpus", "1")
    assert changed.returncode == 2, changed.stdout + changed.stderr
    assert "override_memory_mb" in changed.stdout


def test_dockerfile_layer_is_built_once_and_reused(run_cli, tmp_path):
    counter = tmp_path / "builds"
    # The RUN step cannot write to the host (tmp_path is hidden), so count builds through
    # the layer's own content: every trial sees the same build id.
    write_task(tmp_path / "tasks", "layered", dockerfile=(
        "FROM debian:bookworm-slim\nWORKDIR /srv/app\nENV GREETING=hello\n"
        "COPY data.txt ./data.txt\nRUN head -c 8 /dev/urandom | od -An -tx1 > build-id\n"),
        files={"environment/data.txt": "payload\n"},
        solve_sh="cat build-id > /srv/app/seen && echo $GREETING >> /srv/app/seen\n",
        test_sh="cp /srv/app/seen /logs/verifier/seen; "
                "cat /srv/app/data.txt >> /logs/verifier/seen; echo 1 > /logs/verifier/reward.txt")
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle", "-k", "3", "-n", "3",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "l")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = {(tmp_path / "jobs" / "l" / f"layered__{a}" / "verifier" / "logs" / "seen")
            .read_text() for a in (1, 2, 3)}
    assert len(seen) == 1
    build_id, greeting, data = seen.pop().strip().split("\n")
    assert greeting == "hello" and data == "payload" and build_id.strip()
    assert not counter.exists()


def _wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def _slow_tasks(root: Path, n: int, marker: str) -> None:
    for i in range(n):
        write_task(root, f"slow-{i:02d}",
                   solve_sh=f"sh -c 'sleep 1.5; :' {marker}\necho ok > done\n",
                   test_sh="test -f /app/done && echo 1 > /logs/verifier/reward.txt"
                           " || echo 0 > /logs/verifier/reward.txt")


@pytest.mark.slow
def test_sigkill_then_resume_loses_and_reruns_nothing(cache_dir, tmp_path):
    marker = f"sandlot-resume-{os.getpid()}"
    _slow_tasks(tmp_path / "tasks", 6, marker)
    job = tmp_path / "jobs" / "r"
    args = sandlot_cmd("run", str(tmp_path / "tasks"), "--agent", "oracle", "-n", "2",
                       "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "r")
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir)}
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _wait_for(lambda: len(list(job.glob("*/result.json"))) >= 2)
    _wait_for(lambda: subprocess.run(["pgrep", "-f", marker]).returncode == 0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {p.parent.name: p.read_bytes() for p in job.glob("*/result.json")}
    assert 2 <= len(before) < 6
    # Every child died with sandlot: no sleeping solve.sh, no sandbox holder.
    _wait_for(lambda: subprocess.run(["pgrep", "-f", marker]).returncode == 1, 10)
    holders = subprocess.run(["pgrep", "-f", str(cache_dir / "scratch")], capture_output=True)
    assert holders.returncode == 1, holders.stdout
    second = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    after = {p.parent.name: p.read_bytes() for p in job.glob("*/result.json")}
    assert len(after) == 6
    for name, raw in before.items():
        assert after[name] == raw, f"{name} was rerun"
    summary = load(job / "summary.json")
    assert summary["complete"] and summary["n_passed"] == 6
    assert summary["n_resumed"] == len(before)
    scratch = cache_dir / "scratch"
    assert not scratch.exists() or not list(scratch.iterdir())


@pytest.mark.slow
def test_ctrl_c_tears_down_and_writes_partial_summary(cache_dir, tmp_path):
    marker = f"sandlot-sigint-{os.getpid()}"
    _slow_tasks(tmp_path / "tasks", 4, marker)
    job = tmp_path / "jobs" / "c"
    args = sandlot_cmd("run", str(tmp_path / "tasks"), "--agent", "oracle", "-n", "2",
                       "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "c")
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir)}
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    _wait_for(lambda: subprocess.run(["pgrep", "-f", marker],
                                     capture_output=True).returncode == 0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "interrupted" in out
    assert subprocess.run(["pgrep", "-f", marker]).returncode == 1
    summary = load(job / "summary.json")
    assert summary["complete"] is False
    assert summary["errors_by_kind"].get("cancelled", 0) >= 1
    resumed = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    summary = load(job / "summary.json")
    assert summary["complete"] and summary["n_passed"] == 4 and summary["n_errored"] == 0


def test_resume_refuses_a_changed_setting(run_cli, make_task, tmp_path):
    make_task("quick")
    base = ("run", str(tmp_path / "tasks"), "--agent", "oracle",
            "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "same")
    assert run_cli(*base).returncode == 0
    again = run_cli(*base, "-n", "3")  # concurrency may change on resume
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 resumed" in again.stdout
    changed = run_cli(*base, "-k", "2")
    assert changed.returncode == 2
    assert "n_attempts: was 1, now 2" in changed.stdout


def test_infra_errors_are_retried_and_earlier_tries_kept(run_cli, make_task, tmp_path):
    make_task("flaky", instruction="echo fine > /app/out\n")
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "sandlot_test_agents:FlakyAgent",
                   "--max-retries", "2", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "f", env={"FLAKY_MARKER_DIR": str(markers)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "f" / "flaky__1"
    result = load(trial / "result.json")
    assert result["error"] is None and result["passed"] and result["tries"] == 2
    first = load(trial / "retries" / "try-1" / "result.json")
    assert first["error"]["kind"] == "internal_error"
    assert "simulated harness crash" in first["error"]["message"]
    summary = load(tmp_path / "jobs" / "f" / "summary.json")
    assert summary["n_trials"] == 1 and summary["n_passed"] == 1


def test_the_spend_of_a_retried_try_is_counted_apart(run_cli, make_task, tmp_path):
    make_task("flaky", instruction="echo fine > /app/out\n")
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent",
                   "sandlot_test_agents:FlakyModelAgent", "--model", "scripted/hello",
                   "--max-retries", "1", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "m", env={"FLAKY_MARKER_DIR": str(markers)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "m" / "flaky__1"
    result = load(trial / "result.json")
    first = load(trial / "retries" / "try-1" / "result.json")
    assert result["tries"] == 2 and result["passed"]
    assert first["usage"]["n_requests"] == 1 and result["usage"]["n_requests"] == 1
    # The retried try's spend is its own figure: kept, and not folded into `usage`.
    assert result["retried_usage"]["n_requests"] == 1
    assert result["retried_usage"]["total_tokens"] == first["usage"]["total_tokens"] > 0
    summary = load(tmp_path / "jobs" / "m" / "summary.json")
    assert summary["usage"]["n_requests"] == 1
    assert summary["retried_usage"]["n_requests"] == 1
    costs = [summary["usage"]["cost_usd"], summary["retried_usage"]["cost_usd"]]
    known = [c for c in costs if c is not None]
    assert summary["spend_usd"] == (round(sum(known), 8) if known else None)
    assert "retried tries" in proc.stdout


def test_build_args_override_the_dockerfile_s_arg_defaults(run_cli, make_task, tmp_path):
    task = make_task(
        "build-args",
        dockerfile=("ARG SUITE=bookworm\nFROM debian:${SUITE}-slim\nWORKDIR /app\n"
                    "ARG GREETING=hello\nARG WHO\nENV SAID=${GREETING}\n"
                    'RUN echo "$GREETING $WHO" > /app/built.txt\n'),
        test_sh="""\
        if [ "$(cat /app/built.txt)" = "bonjour world" ] && [ "$SAID" = bonjour ]
        then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
        """)
    proc = run_cli("run", str(task.parent), "-a", "oracle", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "args", "--build-arg", "GREETING=bonjour", "--build-arg", "WHO",
                   env={"WHO": "world"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert load(tmp_path / "jobs" / "args" / "build-args__1" / "result.json")["reward"] == 1.0
    bad = run_cli("run", str(task.parent), "-a", "oracle", "--jobs-dir", str(tmp_path / "jobs"),
                  "--build-arg", "NOT_SET_ANYWHERE_X")
    assert bad.returncode != 0 and "NOT_SET_ANYWHERE_X" in bad.stdout + bad.stderr
