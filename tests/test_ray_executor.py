"""The executor contract on a Ray cluster (sandlot.executors.ray_cluster): a private Ray
on this machine, one node, local sandboxes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor_contract import ExecutorContract, MakeExecutor
from sandlot.errors import SandboxError
from sandlot.executors.node import BackendSpec, NodeSpec
from sandlot.executors.ray_cluster import RayCluster, TrialNeeds, start_ray_executor
from sandlot.sandbox.local_backend import check_local_backend
from sandlot.trial import TrialSettings

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A private Ray for the module's tests; each executor joins it, none stops it."""
    try:
        check_local_backend()
    except SandboxError as exc:
        pytest.skip(f"local sandbox cannot run here: {exc}")
    owner = RayCluster.connect("local")
    try:
        yield RayCluster(owner.ray, owned=False)
    finally:
        owner.close()


class TestRayExecutor(ExecutorContract):
    @pytest.fixture
    def make_executor(self, ray_cluster: RayCluster, cache_dir: Path,
                      tmp_path: Path) -> MakeExecutor:
        settings = TrialSettings(agent_name="oracle", model=None, sandbox_name="local",
                                 cache_dir=cache_dir)
        spec = NodeSpec(settings=settings, backend=BackendSpec("local", {"image_policy": "host"}),
                        agent="oracle", model=None, catalog=None, model_route=None,
                        work_dir=tmp_path / "node")

        async def make(slots: int) -> Any:
            return await start_ray_executor(
                ray_cluster, spec, cap=slots, needs=TrialNeeds(cpus=1), spend=None,
                notify=print, trial_identity={"agent": "oracle", "sandbox": "local"})

        return make
