"""The Harbor task corpus (tests/harbor_tasks/): one small task per thing a published task
expects of its Linux, each run with the oracle, on the local backend and on a container
engine. Each task says in `[metadata] expect` what it must end as: `pass`, `fail` (scored 0,
no error), or an error kind (with `expect_message`, a part of the error's message); with
`require_in_test_stdout` / `forbid_in_test_stdout`, a text test.sh must (not) print.
"""

from __future__ import annotations

import asyncio
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandlot.agents import create_agent
from sandlot.tasks.loader import load_task_or_invalid
from sandlot.trial import TrialPlan, TrialSettings, run_trial
from sandlot.verify import ScriptVerifier

pytestmark = [pytest.mark.e2e]

CORPUS = Path(__file__).resolve().parents[1] / "harbor_tasks"
NAMES = sorted(p.name for p in CORPUS.iterdir() if (p / "task.toml").is_file())


def expectation(name: str) -> tuple[str, str]:
    meta = tomllib.loads((CORPUS / name / "task.toml").read_text())["metadata"]
    return meta["expect"], meta.get("expect_message", "")


def check_result(name: str, result: dict[str, object], verifier_dir: Path) -> None:
    expect, message = expectation(name)
    meta = tomllib.loads((CORPUS / name / "task.toml").read_text())["metadata"]
    if "expect_trial_file" in meta:  # a file the trial folder must hold, and its text
        kept = verifier_dir.parent / meta["expect_trial_file"]
        assert kept.is_file() and meta["expect_trial_text"] in kept.read_text(), kept
    error = result.get("error")
    out = verifier_dir / "test_stdout.txt"
    said = out.read_text() if out.is_file() else ""
    if expect == "pass":
        assert error is None and result["passed"] is True, (result, said)
    elif expect == "fail":
        assert error is None and result["passed"] is False and result["reward"] == 0, (
            result, said)
    else:
        assert isinstance(error, dict) and error["kind"] == expect, result
        assert message in error["message"], error
    if "require_in_test_stdout" in meta:
        assert meta["require_in_test_stdout"] in said, said
    if "forbid_in_test_stdout" in meta:
        assert meta["forbid_in_test_stdout"] not in said, said


def test_every_fixture_says_what_it_must_end_as() -> None:
    assert len(NAMES) >= 5
    for name in NAMES:
        expect, _ = expectation(name)
        assert expect in ("pass", "fail", "task_invalid", "environment_error"), name


@pytest.mark.timeout(600)
def test_the_corpus_runs_with_the_oracle_on_the_local_backend(run_cli, tmp_path: Path) -> None:
    """One job: the bad task ends alone as task_invalid, every other one passes."""
    proc = run_cli("run", str(CORPUS), "--agent", "oracle", "-n", "2", "--jobs-dir",
                   str(tmp_path), "--job-name", "corpus", timeout=540)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in NAMES:
        trial = tmp_path / "corpus" / f"{name}__1"
        check_result(name, json.loads((trial / "result.json").read_text()),
                     trial / "verifier")


@pytest.fixture(scope="module")
def docker_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    import docker_support
    from docker_support import debian_image, engine_or_skip

    from sandlot.sandbox.docker_backend import DockerBackend

    debian = debian_image(engine_or_skip())
    backend = DockerBackend(tmp_path_factory.mktemp("harbor-corpus-cache"),
                            base_image_overrides={"debian:bookworm-slim": debian})
    yield backend
    docker_support.KEEP_KEYS.update(backend.builder._built)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", NAMES)
def test_the_corpus_runs_with_the_oracle_on_a_container_engine(docker_backend, tmp_path: Path,
                                                               name: str) -> None:
    task = load_task_or_invalid(CORPUS / name, sandbox="docker")
    plan = TrialPlan(task=task, attempt=1, dir=tmp_path / f"{name}__1")
    settings = TrialSettings(agent_name="oracle", model=None, sandbox_name="docker")
    result = asyncio.run(run_trial(plan, settings, docker_backend, create_agent("oracle"),
                                   ScriptVerifier()))
    check_result(name, json.loads(result.model_dump_json()), plan.dir / "verifier")
