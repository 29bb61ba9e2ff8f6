"""The docker example tasks (examples/tasks/docker/), end to end on a real Debian image.

Their Dockerfiles say `FROM debian:bookworm-slim` and `apt-get install` packages; no
registry is reachable here, so the base image is a debootstrap'd Debian built once per
machine (docker_support.debian_image) and put in through the base-image override, as
`--base-image-override debian:bookworm-slim=<local image>` does. The first run on a new
machine takes a few minutes (debootstrap, then apt-get in each build); later runs reuse the
cached images.
"""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import Iterator
from pathlib import Path

import docker_support
import pytest
from docker_support import debian_image, engine_or_skip

from sandlot.agents import create_agent
from sandlot.sandbox.docker_backend import DockerBackend
from sandlot.tasks.check import check_task
from sandlot.tasks.config import TaskConfig
from sandlot.tasks.dockerfile import parse_dockerfile
from sandlot.tasks.loader import Task, hash_tree
from sandlot.trial import TrialPlan, TrialSettings, run_trial
from sandlot.verify import ScriptVerifier

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "docker"


def load_for_docker(path: Path) -> Task:
    """load_task for a container backend (compose and every Dockerfile feature allowed)."""
    errors = [p for p in check_task(path, sandbox="docker") if p.severity == "error"]
    assert not errors, errors
    dockerfile = path / "environment" / "Dockerfile"
    return Task(name=path.name, path=path.resolve(),
                config=TaskConfig.model_validate(tomllib.loads((path / "task.toml").read_text())),
                instruction=(path / "instruction.md").read_text(),
                dockerfile=parse_dockerfile(dockerfile.read_text()) if dockerfile.is_file()
                else None, digest=hash_tree(path / "environment"))


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerBackend]:
    engine = engine_or_skip()
    debian = debian_image(engine)
    backend = DockerBackend(tmp_path_factory.mktemp("docker-examples-cache"),
                            base_image_overrides={"debian:bookworm-slim": debian})
    yield backend
    # Their images take minutes to build: later runs reuse them.
    docker_support.KEEP_KEYS.update(backend.builder._built)


def test_the_docker_examples_are_container_tasks():
    names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "task.toml").is_file())
    assert names == ["compose-order-total", "jq-low-stock"]
    for name in names:
        local = [p for p in check_task(EXAMPLES / name) if p.severity == "error"]
        docker = [p for p in check_task(EXAMPLES / name, sandbox="docker")
                  if p.severity == "error"]
        assert docker == []
        if name.startswith("compose"):
            assert any("container" in p.message for p in local), "the local sandbox refuses it"


@pytest.mark.parametrize("name", ["jq-low-stock", "compose-order-total"])
@pytest.mark.parametrize("agent", ["oracle", "nop"])
def test_docker_example_passes_with_the_oracle_and_fails_untouched(backend, tmp_path, name,
                                                                    agent):
    task = load_for_docker(EXAMPLES / name)
    plan = TrialPlan(task=task, attempt=1, dir=tmp_path / f"{name}__1")
    settings = TrialSettings(agent_name=agent, model=None, sandbox_name="docker")
    result = asyncio.run(run_trial(plan, settings, backend, create_agent(agent),
                                   ScriptVerifier()))
    verifier_out = (plan.dir / "verifier" / "test_stdout.txt")
    detail = verifier_out.read_text() if verifier_out.exists() else result.error
    if agent == "oracle":
        assert result.error is None and result.reward == 1.0, detail
    else:
        assert result.error is None and result.reward == 0.0, detail
