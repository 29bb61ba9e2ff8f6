"""A Ray cluster of this machine's own for the tests: a head without CPUs and two worker
nodes of one CPU each, so every trial runs on a worker node's actor. Started and stopped
by the tests (never `ray stop`, which would stop every Ray on the machine)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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
