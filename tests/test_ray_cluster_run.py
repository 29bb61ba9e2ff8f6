"""`sandlot run --ray ADDRESS` on a cluster of a head and two worker nodes (all on this
machine, each worker node with its own raylet and node actor): every trial runs exactly
once, spread over both nodes, with the results, files and token counts of a local run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ray_support import two_node_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with two_node_cluster() as started:
        yield started


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def results(job: Path) -> dict[str, dict]:
    return {p.parent.name: load(p) for p in sorted(job.glob("*/result.json"))}


def outcome(result: dict) -> tuple:
    usage = result["usage"] or {}
    return (result["reward"], result["passed"], result["error"], result["tries"],
            usage.get("total_tokens"), usage.get("n_requests"))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("agent", [["--agent", "oracle"],
                                   ["--agent", "builtin", "--model", "scripted/solver"]],
                         ids=["oracle", "builtin-scripted"])
def test_examples_on_two_nodes_run_once_each_and_equal_a_local_run(run_cli, examples_dir,
                                                                   tmp_path, cluster, agent):
    proc = run_cli("run", str(examples_dir), *agent, "--ray", cluster.address,
                   "--jobs-dir", str(tmp_path), "--job-name", "spread")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    local = run_cli("run", str(examples_dir), *agent, "-n", "2",
                    "--jobs-dir", str(tmp_path), "--job-name", "here")
    assert local.returncode == 0, local.stdout + local.stderr

    spread, here = results(tmp_path / "spread"), results(tmp_path / "here")
    n_tasks = len(list(examples_dir.glob("*/task.toml")))
    assert len(spread) == n_tasks and set(spread) == set(here)
    assert {n: outcome(r) for n, r in spread.items()} == {n: outcome(r) for n, r in here.items()}
    # every trial once: one start line each, and no retries
    for name in spread:
        assert proc.stdout.count(f"started {name}") == 1, proc.stdout
    nodes = {r["node"] for r in spread.values()}
    assert len(nodes) == 2, nodes  # both worker nodes ran trials; the head has no CPUs
    summary = load(tmp_path / "spread" / "summary.json")
    assert set(summary["nodes"]) == nodes
    assert sum(f["n_trials"] for f in summary["nodes"].values()) == n_tasks
    assert summary["n_passed"] == n_tasks
    assert load(tmp_path / "here" / "summary.json")["nodes"] == {}
    if "--model" in agent:
        assert summary["usage"] == load(tmp_path / "here" / "summary.json")["usage"]
    for node in nodes:
        assert f"node {node}" in proc.stdout  # the end-of-run table names the nodes
