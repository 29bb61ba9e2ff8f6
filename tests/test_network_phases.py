"""Network per phase through the real CLI: an agent phase with an allowlist (by name,
resolved when the trial starts) and a verifier with no network, on the local backend.

sandlot itself runs in a network namespace the test made (`unshare --net --mount`, its
own /etc/hosts naming `allowed.test`), wired to a peer namespace holding the addresses
(netns_peer): nothing reaches the host's network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import REPO
from netns_peer import ALLOWED, OTHER, PEER_PORT, peer_namespace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PROBE = f"""probe() {{ timeout 5 bash -c "exec 3<>/dev/tcp/$1/{PEER_PORT} && head -c 7 <&3" \\
2>&1 | tail -1; }}
"""
TASK_TOML = """\
[agent]
timeout_sec = 60
network_mode = "allowlist"
allowed_hosts = ["allowed.test"]
[verifier]
timeout_sec = 60
network_mode = "no-network"
"""
SOLVE = PROBE + f"""\
{{ echo "allowed: $(probe {ALLOWED})"; echo "other: $(probe {OTHER})"; }} > /app/agent-net.txt
"""
TEST = PROBE + f"""\
seen=$(probe {ALLOWED})
cat /app/agent-net.txt; echo "verifier: $seen"
if grep -qx "allowed: peer-ok" /app/agent-net.txt \\
   && grep -q "^other: .*Connection refused" /app/agent-net.txt \\
   && [ "$seen" != peer-ok ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


@pytest.fixture
def inside_namespace(cache_dir: Path, tmp_path: Path
                     ) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """Run the CLI in a network and mount namespace of the test's own, wired to a peer."""
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{ALLOWED} allowed.test\n")
    holder = subprocess.Popen(["unshare", "--net", "--mount", "--propagation", "private",
                               "sleep", "600"], start_new_session=True)
    try:
        netns, mntns = f"/proc/{holder.pid}/ns/net", f"/proc/{holder.pid}/ns/mnt"
        deadline = time.monotonic() + 10
        while os.readlink(netns) == os.readlink("/proc/self/ns/net"):
            assert time.monotonic() < deadline, "the namespace was not made"
            time.sleep(0.01)
        enter = ["nsenter", f"--net={netns}", f"--mount={mntns}"]
        subprocess.run([*enter, "ip", "link", "set", "lo", "up"], check=True, timeout=20)
        subprocess.run([*enter, "mount", "--bind", str(hosts), "/etc/hosts"], check=True,
                       timeout=20)
        with peer_namespace(netns):
            def run(*args: str) -> subprocess.CompletedProcess[str]:
                env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200",
                       "PYTHONPATH": str(REPO / "tests")}
                return subprocess.run([*enter, sys.executable, "-m", "sandlot.cli", *args],
                                      capture_output=True, text=True, timeout=240, env=env,
                                      cwd=REPO)
            yield run
    finally:
        holder.kill()
        holder.wait(timeout=20)


def network_task(make_task: Callable[..., Path]) -> Path:
    task = make_task("allowlist-probe", task_toml=TASK_TOML, solve_sh=SOLVE, test_sh=TEST)
    (task / "environment" / "Dockerfile").unlink()  # the host's root: nothing to pull
    return task


def test_the_agent_reaches_its_allowlist_alone_and_the_verifier_nothing(
        inside_namespace, make_task, tmp_path):
    task = network_task(make_task)
    proc = inside_namespace("run", str(task), "--agent", "oracle", "--jobs-dir",
                            str(tmp_path / "jobs"), "--job-name", "net")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "net" / "allowlist-probe__1"
    result = json.loads((trial / "result.json").read_text())
    stdout = (trial / "verifier" / "test_stdout.txt").read_text()
    assert result["error"] is None, result["error"]
    assert result["reward"] == 1.0, stdout
    assert "verifier: " in stdout and "unreachable" in stdout.split("verifier: ", 1)[1]
    assert result["network"] == {
        "agent": {"mode": "allowlist", "source": "[agent] network_mode",
                  "allowed_hosts": ["allowed.test"], "resolved": {"allowed.test": [ALLOWED]}},
        "verifier": {"mode": "none", "source": "[verifier] network_mode"}}
    log = (trial / "trial.log").read_text()
    assert f"agent network: allowlist ([agent] network_mode): {ALLOWED}/32" in log


def test_the_gateway_answers_an_agent_whose_phase_has_an_allowlist(
        inside_namespace, make_task, tmp_path):
    task = network_task(make_task)
    proc = inside_namespace("run", str(task), "--agent", "builtin", "--model",
                            "scripted/shell-echo", "--jobs-dir", str(tmp_path / "jobs"),
                            "--job-name", "gw")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "jobs" / "gw" / "allowlist-probe__1" / "result.json")
                        .read_text())
    assert result["error"] is None, result["error"]
    assert result["usage"]["n_requests"] >= 2  # the tool call, then the answer to its result
    assert result["agent_info"]["tool_calls"] >= 1
    assert result["reward"] == 0.0  # the model did not do the task; it was reached
