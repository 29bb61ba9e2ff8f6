"""The local sandbox rooted in a pulled image, and its honest fallback to the host's root.

A real registry on loopback serves a busybox image built here; the local backend pulls it
with skopeo, stacks its layers as the sandbox's root, and replays the Dockerfile's steps on
it. Where an image cannot be pulled (a closed port, a pull that fails), the trial runs on
the host's root and says so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import os
import shutil
import zipfile
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
    registry_for_local_sandbox,
)

from conftest import kept_downloads_dir
from sandlot.errors import ErrorKind, SandboxError, TrialError
from sandlot.images import ImageStore
from sandlot.sandbox.base import EnvironmentRequest, SandboxSpec
from sandlot.sandbox.local import LocalSandbox
from sandlot.sandbox.local_backend import LocalBackend, is_python_image
from sandlot.tasks.loader import hash_tree

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def drop_gone(root: Path) -> None:
    (root / "old" / "gone.txt").unlink()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    yield from registry_for_local_sandbox(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="module")
def image(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(reference, manifest digest) of a two-layer busybox image whose ENTRYPOINT leaves a
    mark and runs its arguments, as many images' entrypoint scripts do."""
    entrypoint = 'echo "$IMAGE_ONLY" > /tmp/entrypoint-ran; exec "$@"'
    digest = push_image(registry, tmp_path_factory.mktemp("build"), "test/root:1",
                        [busybox_applets, drop_gone],
                        config=["--config.env", "IMAGE_ONLY=from the image config",
                                "--config.env", "PATH=/usr/local/bin:/bin",
                                "--config.entrypoint", "/bin/sh",
                                "--config.entrypoint", "-c",
                                "--config.entrypoint", entrypoint,
                                "--config.entrypoint", "entrypoint"])
    return f"{registry.address}/test/root:1", digest


@pytest.fixture(scope="module")
def bash_image(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A busybox image with bash: enough for a Harbor task's scripts."""
    digest = push_image(registry, tmp_path_factory.mktemp("build"), "test/bash:1",
                        [busybox_applets, host_bash])
    return f"{registry.address}/test/bash:1", digest


def request_for(tmp_path: Path, dockerfile: str, name: str = "img") -> EnvironmentRequest:
    env_dir = tmp_path / f"env-{name}"
    env_dir.mkdir(exist_ok=True)
    (env_dir / "Dockerfile").write_text(dockerfile)
    log_dir = tmp_path / f"logs-{name}"
    log_dir.mkdir(exist_ok=True)
    spec = SandboxSpec(name=f"img-{name}-{os.getpid()}", workdir="/app")
    return EnvironmentRequest(spec=spec, environment_dir=env_dir, digest=hash_tree(env_dir),
                              build_timeout_sec=120, log_dir=log_dir)


async def with_sandbox(backend: LocalBackend, request: EnvironmentRequest,
                       body: Any) -> Any:
    sandbox = await backend.create(request)
    try:
        return await body(sandbox)
    finally:
        await sandbox.stop()


async def sh(sandbox: Any, script: str) -> str:
    result = await sandbox.exec(["sh", "-c", script], timeout_sec=60)
    assert result.exit_code == 0, result.stderr
    return str(result.stdout)


def test_a_task_from_an_image_runs_on_that_image_not_on_the_host(image, tmp_path):
    reference, digest = image
    backend = LocalBackend(tmp_path / "cache", images=ImageStore(tmp_path / "images"))

    async def body(sandbox: Any) -> None:
        assert sandbox.environment.base == "image"
        assert sandbox.environment.digest == digest
        assert await sh(sandbox, "cat /etc/marker") == "from the test image\n"
        # The host's own files are not there: no Python, no host /usr.
        missing = await sandbox.exec(["sh", "-c", "ls /usr/bin/python3"], timeout_sec=30)
        assert missing.exit_code != 0
        # The second layer's whiteout hides the first layer's file.
        assert await sh(sandbox, "ls /old") == "kept.txt\n"
        # The image's environment, its ENTRYPOINT run by PID 1, a localhost.
        assert await sh(sandbox, 'echo "$IMAGE_ONLY|$PATH"') == (
            "from the image config|/usr/local/bin:/bin\n")
        assert await sh(sandbox, "cat /tmp/entrypoint-ran") == "from the image config\n"
        assert "localhost" in await sh(sandbox, "cat /etc/hosts")
        # What the trial changes is measured against the image, whiteouts and all.
        await sh(sandbox, "echo new > /app/new.txt; rm /etc/marker; echo x >> /old/kept.txt")
        changes = {c.path: c.kind for c in await sandbox.changes()}
        assert changes.get("/app/new.txt") == "added"
        assert changes.get("/etc/marker") == "deleted"
        assert changes.get("/old/kept.txt") == "modified"
        assert "/old/gone.txt" not in changes and "/etc/hosts" not in changes
        await sandbox.restore("/etc/marker")
        assert await sh(sandbox, "cat /etc/marker") == "from the test image\n"

    asyncio.run(with_sandbox(backend, request_for(tmp_path, f"FROM {reference}\n"), body))


def test_dockerfile_steps_run_on_the_image_and_the_second_trial_rebuilds_nothing(
        image, tmp_path):
    reference, _ = image
    store = ImageStore(tmp_path / "images")
    backend = LocalBackend(tmp_path / "cache", images=store)
    dockerfile = (f"FROM {reference}\nRUN cat /etc/marker > /built.txt && "
                  "test ! -e /usr/bin/python3\nWORKDIR /app\n")

    async def body(sandbox: Any) -> str:
        return await sh(sandbox, "cat /built.txt; cat /tmp/entrypoint-ran")

    first = asyncio.run(with_sandbox(backend, request_for(tmp_path, dockerfile), body))
    assert first == "from the test image\nfrom the image config\n"
    layers = sorted(p.name for p in (tmp_path / "cache" / "layers").iterdir() if p.is_dir())
    build_log = tmp_path / "logs-img" / "build.log"
    assert build_log.is_file()
    build_log.unlink()
    # A second job on the same cache: the image and the build come from it.
    again = LocalBackend(tmp_path / "cache", images=store)
    second = asyncio.run(with_sandbox(again, request_for(tmp_path, dockerfile), body))
    assert second == first
    assert not build_log.exists()  # nothing was replayed
    assert sorted(p.name for p in (tmp_path / "cache" / "layers").iterdir()
                  if p.is_dir()) == layers
    assert len(list((store.root / "pulled").glob("*.json"))) == 1


def test_tasks_that_start_with_the_same_steps_share_their_layers(image, tmp_path):
    reference, _ = image
    backend = LocalBackend(tmp_path / "cache", images=ImageStore(tmp_path / "images"))
    common = f"FROM {reference}\nRUN echo shared > /shared.txt\nCOPY data.txt /app/\n"

    async def body(sandbox: Any) -> str:
        return await sh(sandbox, "cat /shared.txt /app/data.txt /own.txt")

    def run_task(name: str, data: str, own: str) -> str:
        request = request_for(tmp_path, common + f"RUN echo {own} > /own.txt\n", name)
        (request.environment_dir / "data.txt").write_text(data)
        request = EnvironmentRequest(spec=request.spec, environment_dir=request.environment_dir,
                                     digest=hash_tree(request.environment_dir),
                                     build_timeout_sec=120, log_dir=request.log_dir)
        return asyncio.run(with_sandbox(backend, request, body))

    def layers() -> set[str]:
        return {p.name for p in (tmp_path / "cache" / "layers").iterdir() if p.is_dir()}

    assert run_task("one", "data\n", "one") == "shared\ndata\none\n"
    first = layers()
    assert len(first) == 3  # one per step
    # Same first two steps, another last one: only the last is built.
    assert run_task("two", "data\n", "two") == "shared\ndata\ntwo\n"
    assert len(layers() - first) == 1
    log = (tmp_path / "logs-two" / "build.log").read_text()
    assert "step 1: cached" in log and "step 2: cached" in log and "RUN" in log
    # Another file copied: that step and the ones after it are built again, not the first.
    seen = layers()
    assert run_task("three", "other data\n", "one") == "shared\nother data\none\n"
    assert len(layers() - seen) == 2
    assert "step 1: cached" in (tmp_path / "logs-three" / "build.log").read_text()


def test_heredocs_shell_and_run_flags_build_on_the_image(image, tmp_path):
    reference, _ = image
    backend = LocalBackend(tmp_path / "cache", images=ImageStore(tmp_path / "images"))
    dockerfile = (f"FROM {reference}\n"
                  'SHELL ["/bin/sh", "-e", "-c"]\n'
                  "RUN <<EOF\necho one > /one.txt\necho two >> /one.txt\nEOF\n"
                  "RUN --mount=type=cache,target=/var/cache/x cat <<'END' > /two.txt\n"
                  "literal $HOME\nEND\n"
                  "RUN --network=none <<EOF\n#!/bin/sh\necho \"$0\" > /three.txt\nEOF\n"
                  "ARG WHO=heredoc\nCOPY <<EOF /etc/four.txt\nfrom a $WHO\nEOF\n")

    async def body(sandbox: Any) -> str:
        return await sh(sandbox, "cat /one.txt /two.txt /three.txt /etc/four.txt")

    out = asyncio.run(with_sandbox(backend, request_for(tmp_path, dockerfile), body))
    assert out == "one\ntwo\nliteral $HOME\n/dev/stdin\nfrom a heredoc\n"


def test_an_image_that_cannot_be_pulled_falls_back_to_the_host_root_and_says_so(tmp_path):
    told: list[str] = []
    closed = f"127.0.0.1:{_closed_port()}/test/absent:1"
    backend = LocalBackend(tmp_path / "cache", images=ImageStore(tmp_path / "images"),
                           notify=told.append)

    async def body(sandbox: Any) -> tuple[str, Any]:
        return await sh(sandbox, "test -x /bin/sh && echo host"), sandbox.environment

    for name in ("one", "two"):
        out, info = asyncio.run(with_sandbox(
            backend, request_for(tmp_path, f"FROM {closed}\n", name), body))
        assert out == "host\n"
        assert info.base == "host-fallback" and info.image == closed
        assert closed in (info.reason or "") and info.digest is None
    # One line for the job, naming the image and its registry; not one per trial.
    assert len(told) == 1 and closed in told[0] and "host-fallback" in told[0]


def test_strict_refuses_an_image_it_cannot_pull_and_host_never_pulls(tmp_path):
    closed = f"127.0.0.1:{_closed_port()}/test/absent:1"
    strict = LocalBackend(tmp_path / "cache", image_policy="strict",
                          images=ImageStore(tmp_path / "images"))
    with pytest.raises(TrialError) as caught:
        asyncio.run(strict.create(request_for(tmp_path, f"FROM {closed}\n")))
    assert caught.value.kind == ErrorKind.BUILD_FAILED
    assert closed in caught.value.message and "strict" in caught.value.message
    # --image-policy host: no pull at all (skopeo that always fails is never asked).
    host = LocalBackend(tmp_path / "cache", image_policy="host",
                        images=ImageStore(tmp_path / "images2", skopeo="false"))

    async def body(sandbox: Any) -> Any:
        return sandbox.environment

    info = asyncio.run(with_sandbox(host, request_for(tmp_path, f"FROM {closed}\n"), body))
    assert info.base == "host" and info.image == closed and info.reason is None
    assert not (tmp_path / "images2" / "pulled").exists()


def test_a_python_image_on_the_fallback_lets_pip_install_and_records_the_python(tmp_path):
    if not Path("/usr/bin/python3").exists():
        pytest.skip("the host has no /usr/bin/python3")
    # A skopeo that fails stands for a registry out of reach, on any machine.
    backend = LocalBackend(tmp_path / "cache",
                           images=ImageStore(tmp_path / "images", skopeo="false"))
    wheel = tmp_path / "sandlot_probe-1.0-py3-none-any.whl"
    wheel.write_bytes(_probe_wheel())

    async def body(sandbox: Any) -> tuple[str, Any, list[str]]:
        await sandbox.upload(wheel, f"/tmp/{wheel.name}")
        result = await sandbox.exec(
            ["sh", "-c", f"python -m pip install --no-index --no-deps /tmp/{wheel.name} "
             "&& python -c 'import sandlot_probe; print(sandlot_probe.VALUE)'"],
            timeout_sec=120)
        assert result.exit_code == 0, result.stdout + result.stderr
        changed = [c.path for c in await sandbox.changes()]
        return result.stdout.strip().splitlines()[-1], sandbox.environment, changed

    value, info, changed = asyncio.run(with_sandbox(
        backend, request_for(tmp_path, "FROM python:3.12-slim\n"), body))
    assert value == "probe installed"
    assert info.base == "host-fallback" and info.image == "python:3.12-slim"
    assert info.python and info.python.startswith("3.")
    # What sandlot did to look like the image is not the trial's change.
    assert not any("EXTERNALLY-MANAGED" in p for p in changed)
    assert "/usr/local/bin/python" not in changed


def test_python_images_are_known_by_any_spelling():
    for name in ("python:3.12-slim", "docker.io/library/python:3.11", "library/python:3",
                 "python@sha256:" + "a" * 64):
        assert is_python_image(name), name
    for name in ("pypy:3", "ghcr.io/x/python:3", "127.0.0.1:5000/python:3", "nonsense:::"):
        assert not is_python_image(name), name


def test_an_image_without_a_shell_is_refused_in_one_line(registry, tmp_path):
    def only_marker(root: Path) -> None:
        (root / "etc").mkdir()
        (root / "etc" / "marker").write_text("no shell here\n")

    push_image(registry, tmp_path / "build", "test/noshell:1", [only_marker])
    backend = LocalBackend(tmp_path / "cache", images=ImageStore(tmp_path / "images"))
    with pytest.raises(SandboxError, match="no /bin/sh"):
        asyncio.run(backend.create(request_for(
            tmp_path, f"FROM {registry.address}/test/noshell:1\n")))
    assert not any((tmp_path / "cache" / "scratch").iterdir())


def test_a_sandbox_stacks_many_layers(tmp_path):
    """Layers are named by short links, so a deep image fits one mount call."""
    layers = []
    for index in range(120):
        layer = tmp_path / "layers" / hashlib.sha256(str(index).encode()).hexdigest()
        (layer / "etc").mkdir(parents=True)
        (layer / "etc" / f"layer-{index}").write_text(f"{index}\n")
        layers.append(layer)
    shutil.copytree(_shell_root(tmp_path), layers[0], dirs_exist_ok=True, symlinks=True)
    spec = SandboxSpec(name=f"deep-{os.getpid()}", workdir="/", root_layers=tuple(layers),
                       base_env={})
    sandbox = LocalSandbox(spec, tmp_path / "scratch")

    async def go() -> str:
        await sandbox.start()
        try:
            return await sh(sandbox, "ls /etc | grep -c layer-")
        finally:
            await sandbox.stop()

    assert asyncio.run(go()) == "120\n"


def _shell_root(tmp_path: Path) -> Path:
    root = tmp_path / "shell-root"
    root.mkdir()
    busybox_applets(root)
    return root


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _probe_wheel() -> bytes:
    """A minimal pure-Python wheel, made here (no build tools, no index)."""
    files = {
        "sandlot_probe/__init__.py": b'VALUE = "probe installed"\n',
        "sandlot_probe-1.0.dist-info/METADATA":
            b"Metadata-Version: 2.1\nName: sandlot-probe\nVersion: 1.0\n",
        "sandlot_probe-1.0.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: sandlot-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(data)}")
    record.append("sandlot_probe-1.0.dist-info/RECORD,,")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("sandlot_probe-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return buf.getvalue()


def test_a_job_reports_the_image_each_trial_ran_on_and_the_fallbacks(
        bash_image, make_task, run_cli, tmp_path):
    """`sandlot run` end to end: one task on its image, one whose image is out of reach."""
    reference, digest = bash_image
    on_image = make_task(
        "on-image", dockerfile=f"FROM {reference}\nWORKDIR /app\n",
        solve_sh="cat /etc/marker > /app/answer.txt\n",
        test_sh="""\
        if [ "$(cat /app/answer.txt)" = "from the test image" ] && [ ! -e /usr/bin/python3 ]
        then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
        """)
    closed = f"127.0.0.1:{_closed_port()}/test/absent:1"
    make_task("fallback", dockerfile=f"FROM {closed}\nWORKDIR /app\n")
    jobs = tmp_path / "jobs"
    proc = run_cli("run", str(on_image.parent), "-a", "oracle", "--jobs-dir", str(jobs),
                   "--job-name", "images", "--image-policy", "auto", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = " ".join((proc.stdout + proc.stderr).split())
    assert f"cannot pull {closed}" in out and "host-fallback" in out
    assert out.count(f"cannot pull {closed}") == 1
    import json

    first = json.loads((jobs / "images" / "on-image__1" / "result.json").read_text())
    assert first["reward"] == 1.0, first["error"]
    assert first["environment"] == {"base": "image", "image": reference, "digest": digest}
    second = json.loads((jobs / "images" / "fallback__1" / "result.json").read_text())
    assert second["reward"] == 1.0, second["error"]
    assert second["environment"]["base"] == "host-fallback"
    assert closed in second["environment"]["reason"]
    summary = json.loads((jobs / "images" / "summary.json").read_text())
    assert summary["roots"] == {"host-fallback": 1, "image": 1}
    assert "host-fallback" in out and "not their image" in out


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_task_from_a_debian_image_sees_its_marker_and_its_own_python(
        registry, make_task, run_cli, tmp_path):
    """A real distribution image (debootstrap'd Debian trixie, built once per machine):
    the task's Dockerfile step, its solution and its tests all run on the image's Python,
    not on the host's."""
    import json
    import subprocess

    layout = other_debian_layout(kept_downloads_dir() / "test-images")
    reference = f"{registry.address}/test/base:1"
    digest = push_layout(registry, layout, "test/base:1")
    host_python = subprocess.run(
        ["/usr/bin/python3", "-c", "import platform; print(platform.python_version())"],
        capture_output=True, text=True, timeout=30).stdout.strip()
    task = make_task(
        "other-python",
        dockerfile=(f"FROM {reference}\nWORKDIR /app\n"
                    "RUN python3 -c 'import platform; print(platform.python_version())' "
                    "> /app/built-with.txt\n"),
        solve_sh="python3 -c 'import platform; print(platform.python_version())' "
                 "> /app/solved-with.txt\n",
        test_sh="""\
        python3 -c 'import platform; print(platform.python_version())' > /logs/verifier/py.txt
        cp /etc/marker /app/built-with.txt /app/solved-with.txt /logs/verifier/
        echo 1 > /logs/verifier/reward.txt
        """)
    jobs = tmp_path / "jobs"
    proc = run_cli("run", str(task.parent), "-a", "oracle", "--jobs-dir", str(jobs),
                   "--job-name", "debian", "--image-policy", "strict", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = jobs / "debian" / "other-python__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["reward"] == 1.0, result["error"]
    assert result["environment"] == {"base": "image", "image": reference, "digest": digest}
    verifier = trial / "verifier" / "logs"
    assert (verifier / "marker").read_text() == f"debian {OTHER_DEBIAN} test image\n"
    versions = {(verifier / name).read_text().strip()
                for name in ("py.txt", "built-with.txt", "solved-with.txt")}
    assert len(versions) == 1 and versions != {host_python}, (versions, host_python)


def test_links_in_an_image_never_point_a_write_at_the_host(registry, tmp_path):
    """An image whose /etc and /app are absolute links to host folders: sandlot's own
    writes at start (resolv.conf, hosts, the workdir) land inside the sandbox."""
    host_etc, host_app = tmp_path / "host-etc", tmp_path / "host-app"
    host_etc.mkdir()
    host_app.mkdir()

    def trap(root: Path) -> None:
        busybox_applets(root)
        shutil.rmtree(root / "etc")
        (root / "etc").symlink_to(host_etc)
        (root / "app").symlink_to(host_app)

    push_image(registry, tmp_path / "build", "test/trap:1", [trap])
    backend = LocalBackend(tmp_path / "cache", images=ImageStore(tmp_path / "images"))
    request = request_for(tmp_path, f"FROM {registry.address}/test/trap:1\n")
    request = EnvironmentRequest(
        spec=SandboxSpec(name=f"trap-{os.getpid()}", workdir="/app/sub"),
        environment_dir=request.environment_dir, digest=request.digest,
        build_timeout_sec=120, log_dir=request.log_dir)

    async def body(sandbox: Any) -> str:
        return await sh(sandbox, "cat /etc/resolv.conf; ls -d /app/sub")

    with contextlib.suppress(SandboxError):
        asyncio.run(with_sandbox(backend, request, body))
    assert list(host_etc.iterdir()) == [] and list(host_app.iterdir()) == []


def test_a_multi_stage_build_copies_from_its_stages_and_from_an_image(
        image, bash_image, tmp_path):
    """COPY --from a stage (by name, and one FROM another stage), and from an image: the
    files land in the last stage's image with their owners and links; a link in a stage
    is followed inside that stage's root, a link in the last stage inside its own root;
    the second build runs nothing."""
    reference, _ = image
    bash_ref, _ = bash_image
    dockerfile = (
        f"FROM {bash_ref} AS build\nWORKDIR /src\n"
        "RUN echo built > artifact && mkdir -p out/sub && echo deep > out/sub/f && "
        "chown 1000:1000 out/sub/f && ln -s ../artifact out/link && "
        "ln -s /etc/marker from-root && ln -s /etc/passwd host-passwd\n"
        "FROM build AS more\nRUN echo more > /src/more\n"
        f"FROM {reference}\nRUN mkdir /app && ln -s /etc /app/etc-link\n"
        "COPY --from=build /src/artifact /app/\n"
        "COPY --from=build /src/out /app/out\n"
        "COPY --from=more /src/more /app/more\n"
        "COPY --from=0 /src/from-root /app/marker-of-build\n"
        "COPY --from=build /src/artifact /app/etc-link/\n"
        f"COPY --from={bash_ref} /bin/bash /opt/bash\n")
    store = ImageStore(tmp_path / "images")

    async def body(sandbox: Any) -> str:
        assert sandbox.environment.image == reference
        return await sh(sandbox, "cat /app/artifact /app/more /app/out/link; "
                                 "stat -c %u /app/out/sub/f; readlink /app/out/link; "
                                 "cat /app/marker-of-build /etc/artifact /tmp/entrypoint-ran; "
                                 "test -x /opt/bash && echo bash")

    want = ("built\nmore\nbuilt\n1000\n../artifact\nfrom the test image\nbuilt\n"
            "from the image config\nbash\n")
    request = request_for(tmp_path, dockerfile)
    backend = LocalBackend(tmp_path / "cache", images=store)
    assert asyncio.run(with_sandbox(backend, request, body)) == want
    assert not Path("/etc/artifact").exists()  # the link in the image, not the host's /etc
    log = tmp_path / "logs-img" / "build.log"
    assert "stage build:" in log.read_text() and "COPY --from=build" in log.read_text()
    log.unlink()
    again = LocalBackend(tmp_path / "cache", images=store)
    assert asyncio.run(with_sandbox(again, request, body)) == want
    assert not log.exists()  # every stage from the cache

    # A link a stage holds is followed inside that stage: the host's file never comes.
    leak = request_for(tmp_path, dockerfile.replace("/src/from-root /app/marker-of-build",
                                                    "/src/host-passwd /app/passwd"), "leak")
    with pytest.raises(TrialError) as failed:
        asyncio.run(with_sandbox(LocalBackend(tmp_path / "cache", images=store), leak, body))
    assert failed.value.kind == ErrorKind.BUILD_FAILED
    assert "/src/host-passwd does not exist in build" in failed.value.message


def test_a_multi_stage_build_on_the_hosts_root_is_refused_in_one_line(tmp_path):
    backend = LocalBackend(tmp_path / "cache", image_policy="host",
                           images=ImageStore(tmp_path / "images"))
    request = request_for(tmp_path, "FROM debian:12 AS build\nRUN true\nFROM debian:12\n"
                                    "COPY --from=build /etc/hostname /x\n")
    with pytest.raises(TrialError) as failed:
        asyncio.run(with_sandbox(backend, request, sh))
    assert failed.value.kind == ErrorKind.BUILD_FAILED
    assert "runs on pulled images only" in failed.value.message
    assert "--sandbox docker" in failed.value.message
