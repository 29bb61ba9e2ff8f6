"""`sandlot run --ray ADDRESS` on a cluster of a head and two worker nodes (all on this
machine, each worker node with its own raylet and node actor): every trial runs exactly
once, spread over both nodes, with the results, files and token counts of a local run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ray_support import same_as_a_local_run, two_node_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with two_node_cluster() as started:
        yield started


def load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.timeout(600)
@pytest.mark.parametrize("agent", [["--agent", "oracle"],
                                   ["--agent", "builtin", "--model", "scripted/solver"]],
                         ids=["oracle", "builtin-scripted"])
def test_examples_on_two_nodes_run_once_each_and_equal_a_local_run(run_cli, examples_dir,
                                                                   tmp_path, cluster, agent):
    proc = run_cli("run", str(examples_dir), *agent, "--ray", cluster.address,
                   "--jobs-dir", str(tmp_path), "--job-name", "spread")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spread, _ = same_as_a_local_run(run_cli, examples_dir, tmp_path, agent, "spread")
    n_tasks = len(spread)
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
