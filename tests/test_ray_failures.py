"""A cluster job survives what clusters do: a worker node that dies mid-job, a driver
killed with SIGKILL then resumed against the same cluster. Every trial ends with exactly
one result, none is lost or run twice, and no sandbox outlives its node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, sandlot_cmd, write_task
from ray_support import results, two_node_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def cluster() -> Iterator[Any]:
    """A cluster of its own per test: these tests take nodes away."""
    with two_node_cluster() as started:
        yield started


def slow_tasks(root: Path, n: int, marker: str, sleep_sec: float) -> None:
    for i in range(n):
        write_task(root, f"slow-{i:02d}",
                   solve_sh=f"sh -c 'sleep {sleep_sec}; :' {marker}\necho ok > done\n",
                   test_sh="test -f /app/done && echo 1 > /logs/verifier/reward.txt"
                           " || echo 0 > /logs/verifier/reward.txt")


def running(marker: str) -> int:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return len(found.stdout.split())


def wait_for(predicate: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def cli(cache_dir: Path, tasks: Path, jobs: Path, address: str) -> tuple[list[str], dict]:
    args = sandlot_cmd("run", str(tasks), "--agent", "oracle", "--ray", address,
                       "--jobs-dir", str(jobs), "--job-name", "j")
    return args, {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}


@pytest.mark.timeout(600)
def test_a_node_that_dies_mid_job_loses_and_duplicates_nothing(cache_dir, tmp_path, cluster):
    marker = f"sandlot-node-dies-{os.getpid()}"
    slow_tasks(tmp_path / "tasks", 6, marker, sleep_sec=6)
    args, env = cli(cache_dir, tmp_path / "tasks", tmp_path / "jobs", cluster.address)
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: running(marker) >= 2)  # a trial on each node
        doomed = cluster.workers[0]
        cluster.remove_node(doomed)
        out, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    found = results(tmp_path / "jobs" / "j")
    assert len(found) == 6 and all(r["passed"] and r["error"] is None for r in found.values())
    requeued = {name: r["requeued"] for name, r in found.items() if r["requeued"]}
    assert len(requeued) == 1, requeued  # the one trial the dead node was running
    ((name, (lost,)),) = requeued.items()
    dead = lost["node"]
    assert doomed.node_id[:8] in dead and lost["phase"]
    assert found[name]["node"] != dead and found[name]["tries"] == 1
    for other in found.values():  # once each: no start line repeats, no retry
        assert out.count(f"started {other['trial_name']}") == 1, out
    summary = json.loads((tmp_path / "jobs" / "j" / "summary.json").read_text())
    assert summary["complete"] and summary["n_passed"] == 6
    wait_for(lambda: running(marker) == 0, 60)  # the dead node's sandboxes died with it


@pytest.mark.timeout(600)
def test_driver_sigkill_then_resume_against_the_same_cluster(cache_dir, tmp_path, cluster):
    marker = f"sandlot-driver-dies-{os.getpid()}"
    slow_tasks(tmp_path / "tasks", 6, marker, sleep_sec=3)
    job = tmp_path / "jobs" / "j"
    args, env = cli(cache_dir, tmp_path / "tasks", tmp_path / "jobs", cluster.address)
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: len(list(job.glob("*/result.json"))) >= 2)
        wait_for(lambda: running(marker) >= 1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = {p.parent.name: p.read_bytes() for p in job.glob("*/result.json")}
    assert 2 <= len(before) < 6
    # the driver's node actors die with it (Ray ends a dead driver's actors), and their
    # sandboxes with them
    wait_for(lambda: running(marker) == 0, 60)
    second = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    after = {p.parent.name: p.read_bytes() for p in job.glob("*/result.json")}
    assert len(after) == 6
    for name, raw in before.items():
        assert after[name] == raw, f"{name} was rerun"
    summary = json.loads((job / "summary.json").read_text())
    assert summary["complete"] and summary["n_passed"] == 6
    assert summary["n_resumed"] == len(before)
    assert len(summary["nodes"]) == 2
    leftovers = cache_dir / "cluster" / "trials"
    assert not leftovers.exists() or not list(leftovers.iterdir())  # no node kept a trial
