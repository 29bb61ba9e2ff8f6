"""Two hosts on one machine: a Ray head (and the driver) in one network namespace, a worker
node in another, joined by a veth pair with addresses that exist only in those two
namespaces (../shared/docs/machine.md). The worker's sandboxes reach their own node's
gateway, and nothing else: not the head, not their node's own address, even with an
outbound network; with --allow-private-network the head answers (the route is there, so
the refusal is the egress filter's)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from conftest import REPO, sandlot_cmd, write_task

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HEAD, WORKER = "10.77.0.1", "10.77.0.2"
GCS_PORT, RAYLET_PORT = 6379, 6380
RAY = str(Path(sys.executable).with_name("ray"))
TOKEN = secrets.token_hex(32)
PROBES = f"""
probe() {{ if timeout 5 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; then echo "$1:$2 open";
          else echo "$1:$2 closed"; fi; }}
probe {HEAD} {GCS_PORT}
probe {WORKER} {RAYLET_PORT}
echo probed > /app/done
"""


def ray_env() -> dict[str, str]:
    """The environment of the cluster's processes and its driver: a token of the test's
    own (a real cluster has one; `ray start` refuses a joining node without it)."""
    return {**os.environ, "PYTHONPATH": str(REPO / "tests"), "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}


def netns(pid: int) -> str:
    return f"/proc/{pid}/ns/net"


def ip(pid: int, *args: str) -> None:
    subprocess.run(["nsenter", f"--net={netns(pid)}", "ip", *args], check=True, timeout=20,
                   capture_output=True)


@contextmanager
def owned(args: list[str], **kwargs: object) -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session (and group) of its own, killed with its group at the end."""
    proc = subprocess.Popen(args, start_new_session=True, **kwargs)  # type: ignore[call-overload]
    try:
        yield proc
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                break
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                continue


@contextmanager
def two_hosts() -> Iterator[int]:
    """The head's namespace holder pid, once the worker node has joined the head."""
    with ExitStack() as stack:
        head = stack.enter_context(owned(["unshare", "--net", "sleep", "900"]))
        worker = stack.enter_context(owned(["unshare", "--net", "sleep", "900"]))
        time.sleep(0.2)
        own = os.readlink("/proc/self/ns/net")
        assert own not in {os.readlink(netns(head.pid)), os.readlink(netns(worker.pid))}
        ip(head.pid, "link", "add", "sl-head", "type", "veth", "peer", "name", "sl-worker",
           "netns", str(worker.pid))
        for pid, dev, address in ((head.pid, "sl-head", HEAD), (worker.pid, "sl-worker", WORKER)):
            ip(pid, "link", "set", "lo", "up")
            ip(pid, "addr", "add", f"{address}/24", "dev", dev)
            ip(pid, "link", "set", dev, "up")
        env = ray_env()
        stack.enter_context(owned(
            ["nsenter", f"--net={netns(head.pid)}", RAY, "start", "--head", "--block",
             f"--node-ip-address={HEAD}", f"--port={GCS_PORT}", "--num-cpus=0",
             "--include-dashboard=false"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        stack.enter_context(owned(
            ["nsenter", f"--net={netns(worker.pid)}", RAY, "start", "--block",
             f"--address={HEAD}:{GCS_PORT}", f"--node-ip-address={WORKER}", "--num-cpus=2",
             f"--node-manager-port={RAYLET_PORT}"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        count = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
                 "sys.exit(0 if sum(n['Alive'] for n in ray.nodes()) == 2 else 1)")
        deadline = time.monotonic() + 120
        while subprocess.run(["nsenter", f"--net={netns(head.pid)}", sys.executable, "-c",
                              count, f"{HEAD}:{GCS_PORT}"], env=env, capture_output=True,
                             timeout=60).returncode != 0:
            assert time.monotonic() < deadline, "the worker node did not join the head"
            time.sleep(1)
        yield head.pid


@pytest.mark.timeout(600)
def test_a_worker_hosts_sandboxes_reach_their_nodes_gateway_and_nothing_else(cache_dir,
                                                                              tmp_path):
    write_task(tmp_path / "tasks", "probe", instruction=PROBES,
               test_sh="test -f /app/done && echo 1 > /logs/verifier/reward.txt")
    env = {**ray_env(), "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}

    def run(head_pid: int, name: str, *extra: str) -> dict[str, str]:
        proc = subprocess.run(
            ["nsenter", f"--net={netns(head_pid)}",
             *sandlot_cmd("run", str(tmp_path / "tasks"), "--agent",
                          "sandlot_test_agents:ProbeAgent", "--model", "scripted/hello",
                          "--agent-network", "public", "--ray", f"{HEAD}:{GCS_PORT}",
                          "--jobs-dir", str(tmp_path / "jobs"), "--job-name", name, *extra)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        trial = tmp_path / "jobs" / name / "probe__1"
        result = json.loads((trial / "result.json").read_text())
        assert result["passed"] and result["node"], result
        assert result["usage"]["n_requests"] == 1  # counted by the worker node's gateway
        lines = (trial / "agent" / "stdout.txt").read_text().splitlines()
        return dict(line.split(" ", 1) for line in lines if " " in line)

    with two_hosts() as head_pid:
        seen = run(head_pid, "closed")
        assert seen["gateway"] == "200"
        assert seen[f"{HEAD}:{GCS_PORT}"] == "closed"  # the head, a private address
        assert seen[f"{WORKER}:{RAYLET_PORT}"] == "closed"  # its own node's address
        seen = run(head_pid, "private-allowed", "--allow-private-network")
        assert seen["gateway"] == "200"
        assert seen[f"{HEAD}:{GCS_PORT}"] == "open"  # reachable: the block above is the filter's
        assert seen[f"{WORKER}:{RAYLET_PORT}"] == "closed"  # the host itself, always
