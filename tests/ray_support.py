"""A Ray cluster of this machine's own for the tests: a head without CPUs and two worker
nodes of one CPU each, so every trial runs on a worker node's actor. Started and stopped
by the tests (never `ray stop`, which would stop every Ray on the machine)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def two_node_cluster() -> Iterator[Any]:
    """A started ray.cluster_utils.Cluster; its `address` is what `--ray` joins."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        try:
            cluster.wait_for_nodes()
            cluster.workers = workers
            yield cluster
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()


def results(job: Path) -> dict[str, dict]:
    """A job folder's result.json files, by trial."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(job.glob("*/result.json"))}


def outcome(result: dict) -> tuple:
    """What must equal between a cluster run's trial and a local run's."""
    usage = result["usage"] or {}
    return (result["reward"], result["passed"], result["error"], result["tries"],
            usage.get("total_tokens"), usage.get("n_requests"))


def same_as_a_local_run(run_cli: Callable[..., Any], tasks: Path, jobs: Path,
                        agent: list[str], cluster_job: str) -> tuple[dict, dict]:
    """Runs the tasks locally (`-n 2`, job "here") beside the cluster job already in
    `jobs`; checks that every trial has the same outcome; returns both jobs' results."""
    local = run_cli("run", str(tasks), *agent, "-n", "2", "--jobs-dir", str(jobs),
                    "--job-name", "here")
    assert local.returncode == 0, local.stdout + local.stderr
    on_cluster, here = results(jobs / cluster_job), results(jobs / "here")
    assert len(on_cluster) == len(list(tasks.glob("*/task.toml"))) and \
        set(on_cluster) == set(here)
    assert {name: outcome(r) for name, r in on_cluster.items()} == \
        {name: outcome(r) for name, r in here.items()}
    return on_cluster, here
