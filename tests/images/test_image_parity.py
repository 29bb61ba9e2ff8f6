"""One image, two backends: a task FROM an image on a registry on loopback runs on that
image under the local sandbox (pulled by sandlot) and under Podman or Docker (pulled by
the engine), and both results name the same manifest digest."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from registry_support import (
    OTHER_DEBIAN,
    Registry,
    busybox_applets,
    host_bash,
    other_debian_layout,
    push_image,
    push_layout,
    push_other_formats,
    registry_for_local_sandbox,
    runner_user,
)

from conftest import kept_downloads_dir
from sandlot.sandbox.docker_engine import Engine

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

PYTHON_VERSION = "python3 -c 'import platform; print(platform.python_version())'"


def engine_or_skip() -> Engine:
    """tests/sandbox/docker_support's, which is on the path when the whole suite runs."""
    sandbox_tests = str(Path(__file__).resolve().parents[1] / "sandbox")
    if sandbox_tests not in sys.path:
        sys.path.insert(0, sandbox_tests)
    from docker_support import engine_or_skip as connect

    return connect()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from registry_for_local_sandbox(tmp_path_factory.mktemp("registry"))


@pytest.mark.slow
def run_on_both(run_cli: Any, tasks: Path, tmp_path: Path, timeout: float,
                ) -> Iterator[tuple[str, Path]]:
    """The oracle on `tasks` on each backend, images pulled or refused (strict); yields
    each backend's name and its job folder."""
    for sandbox in ("local", "docker"):
        jobs = tmp_path / f"jobs-{sandbox}"
        proc = run_cli("run", str(tasks), "-a", "oracle", "--sandbox", sandbox,
                       "--jobs-dir", str(jobs), "--job-name", sandbox,
                       "--image-policy", "strict", timeout=timeout)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield sandbox, jobs / sandbox


def test_the_same_image_runs_on_the_local_sandbox_and_in_the_engine(
        registry, make_task, run_cli, tmp_path):
    engine = engine_or_skip()
    layout = other_debian_layout(kept_downloads_dir() / "test-images")
    reference = f"{registry.address}/test/parity:1"
    digest = push_layout(registry, layout, "test/parity:1")
    host_python = subprocess.run(["/usr/bin/python3", "-c",
                                  "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
    task = make_task(
        "parity", dockerfile=f"FROM {reference}\nWORKDIR /app\n",
        test_sh=f"""\
        {PYTHON_VERSION} > /logs/verifier/py.txt
        cp /etc/marker /logs/verifier/marker
        echo 1 > /logs/verifier/reward.txt
        """)
    seen: dict[str, tuple[str, str]] = {}
    try:
        for sandbox, job in run_on_both(run_cli, task.parent, tmp_path, timeout=900):
            trial = job / "parity__1"
            result = json.loads((trial / "result.json").read_text())
            assert result["reward"] == 1.0, (sandbox, result["error"])
            assert result["environment"] == {"base": "image", "image": reference,
                                             "digest": digest}, sandbox
            logs = trial / "verifier" / "logs"
            seen[sandbox] = ((logs / "marker").read_text(), (logs / "py.txt").read_text())
    finally:
        with contextlib.suppress(Exception):
            engine.api.remove_image(reference, force=True)
    assert seen["local"] == seen["docker"]
    marker, python = seen["local"]
    assert marker == f"debian {OTHER_DEBIAN} test image\n"
    assert python.strip() != host_python


def test_a_prebuilt_image_runs_as_it_is_in_its_own_workdir_on_both_backends(
        registry, make_task, run_cli, tmp_path):
    """task.toml's docker_image: no build, the image's WORKDIR, environment/ copied in."""
    engine = engine_or_skip()

    def workdir(root: Path) -> None:
        (root / "srv" / "work").mkdir(parents=True)
        (root / "srv" / "work" / "ready.txt").write_text("from the image\n")

    digest = push_image(registry, tmp_path / "build", "test/prebuilt:1",
                        [busybox_applets, host_bash, workdir],
                        config=["--config.workingdir", "/srv/work"])
    reference = f"{registry.address}/test/prebuilt:1"
    task = make_task(
        "prebuilt", task_toml=f'version = "1.0"\n[environment]\ndocker_image = "{reference}"\n',
        solve_sh="cat ready.txt extra.txt > answer.txt\n",
        test_sh="""\
        if [ "$(pwd)" = /srv/work ] && [ "$(cat /srv/work/answer.txt)" = "$(printf \
            'from the image\\nfrom environment/')" ]
        then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
        """)
    (task / "environment" / "Dockerfile").unlink()
    (task / "environment" / "extra.txt").write_text("from environment/\n")
    try:
        for sandbox, job in run_on_both(run_cli, task.parent, tmp_path, timeout=600):
            result = json.loads((job / "prebuilt__1" / "result.json").read_text())
            assert result["reward"] == 1.0, (sandbox, result["error"],
                                             (job / "prebuilt__1" / "verifier"
                                              / "test_stderr.txt").read_text())
            assert result["environment"] == {"base": "image", "image": reference,
                                             "digest": digest, "workdir": "/srv/work"}
    finally:
        with contextlib.suppress(Exception):
            engine.api.remove_image(reference, force=True)


def test_the_base_images_user_and_workdir_hold_where_the_dockerfile_sets_none(
        registry, make_task, run_cli, tmp_path):
    """FROM an image with USER runner and WORKDIR /home/runner/work, a Dockerfile without
    either: its RUN steps, the agent and the verifier run as runner in that folder, on
    both backends, as Docker would run them."""
    engine = engine_or_skip()
    digest = push_image(registry, tmp_path / "build", "test/runner:1",
                        [busybox_applets, host_bash, runner_user],
                        config=["--config.user", "runner",
                                "--config.workingdir", "/home/runner/work"])
    reference = f"{registry.address}/test/runner:1"
    task = make_task(
        "runner",
        dockerfile=f"FROM {reference}\nRUN id -un > built-as.txt && pwd >> built-as.txt\n",
        solve_sh="{ id -un; pwd; } > by-agent.txt\n",
        test_sh="""\
        { cat built-as.txt by-agent.txt; id -un; pwd; } > /logs/verifier/got.txt
        echo 1 > /logs/verifier/reward.txt
        """)
    try:
        for sandbox, job in run_on_both(run_cli, task.parent, tmp_path, timeout=600):
            trial = job / "runner__1"
            result = json.loads((trial / "result.json").read_text())
            assert result["reward"] == 1.0, (sandbox, result["error"])
            got = (trial / "verifier" / "logs" / "got.txt").read_text().split()
            assert got == ["runner", "/home/runner/work"] * 3, sandbox  # build, agent, verifier
            assert result["environment"] == {"base": "image", "image": reference,
                                             "digest": digest, "workdir": "/home/runner/work",
                                             "user": "runner"}, sandbox
    finally:
        with contextlib.suppress(Exception):
            engine.api.remove_image(reference, force=True)


def test_a_multi_stage_build_gives_the_same_files_on_both_backends(
        registry, make_task, run_cli, tmp_path):
    engine = engine_or_skip()
    digest = push_image(registry, tmp_path / "build", "test/stages:1",
                        [busybox_applets, host_bash])
    reference = f"{registry.address}/test/stages:1"
    task = make_task(
        "stages",
        dockerfile=(f"FROM {reference} AS build\nWORKDIR /src\nRUN echo built > artifact && "
                    "mkdir -p out && echo x > out/f && chown 1000:1000 out/f && "
                    "ln -s ../artifact out/link\n"
                    f"FROM {reference}\nWORKDIR /app\nCOPY --from=build /src/artifact .\n"
                    "COPY --from=build /src/out ./out\n"
                    f"COPY --from={reference} /etc/marker ./marker\n"),
        test_sh="""\
        { cat artifact marker out/f; stat -c '%u %a' out/f; readlink out/link; } \\
            > /logs/verifier/got.txt
        echo 1 > /logs/verifier/reward.txt
        """)
    seen = {}
    try:
        for sandbox, job in run_on_both(run_cli, task.parent, tmp_path, timeout=600):
            trial = job / "stages__1"
            result = json.loads((trial / "result.json").read_text())
            assert result["reward"] == 1.0, (sandbox, result["error"])
            assert result["environment"]["digest"] == digest
            seen[sandbox] = (trial / "verifier" / "logs" / "got.txt").read_text()
    finally:
        with contextlib.suppress(Exception):
            engine.api.remove_image(reference, force=True)
    assert seen["local"] == seen["docker"] == (
        "built\nfrom the test image\nx\n1000 644\n../artifact\n")


def test_both_backends_name_an_image_by_the_registrys_digest_whatever_its_format(
        registry, make_task, run_cli, tmp_path):
    """A Docker-format image and a multi-platform index: the local sandbox (whose pull
    converts to OCI, for this platform) and the engine name each by the same digest."""
    engine = engine_or_skip()
    digests = []
    for name in ("docker", "multi"):  # two images: an engine merges equal ones
        build = tmp_path / f"build-{name}"
        push_image(registry, build, f"test/{name}:1", [busybox_applets, host_bash])
        layout = next(build.glob("layout-*"))
        digests.append(push_other_formats(registry, layout, f"test/{name}"))
    references = {f"{registry.address}/test/docker-docker:1": digests[0][0],
                  f"{registry.address}/test/multi-multi:1": digests[1][1]}
    for number, reference in enumerate(references):
        make_task(f"format{number}", dockerfile=f"FROM {reference}\nWORKDIR /app\n")
    tasks = tmp_path / "tasks"
    try:
        for sandbox, job in run_on_both(run_cli, tasks, tmp_path, timeout=600):
            for number, (reference, digest) in enumerate(references.items()):
                result = json.loads((job / f"format{number}__1" / "result.json")
                                    .read_text())
                assert result["reward"] == 1.0, (sandbox, result["error"])
                assert result["environment"]["digest"] == digest, (sandbox, reference)
    finally:
        for reference in references:
            with contextlib.suppress(Exception):
                engine.api.remove_image(reference, force=True)
