"""The local backend's pieces that need no sandbox: the layer cache, COPY rules, path resolution."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from sandlot.errors import ErrorKind, SandboxError, TrialError
from sandlot.sandbox.layers import LayerCache, _copy_into, layer_key
from sandlot.sandbox.local import resolve_inside
from sandlot.tasks.dockerfile import CopyStep, parse_dockerfile

# -- resolve_inside: symlinks resolved as if the sandbox root were / ----------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "etc").mkdir(parents=True)
    (r / "app").mkdir()
    return r


def test_plain_path_maps_under_the_root(root):
    assert resolve_inside(root, "/app/x/y.txt") == root / "app/x/y.txt"
    assert resolve_inside(root, "app//./x") == root / "app/x"
    assert resolve_inside(root, "/") == root


def test_absolute_link_is_resolved_inside_the_root(root, tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (root / "app" / "etc-link").symlink_to("/etc")
    (root / "app" / "host-link").symlink_to(host)
    assert resolve_inside(root, "/app/etc-link/passwd") == root / "etc/passwd"
    assert resolve_inside(root, "/app/host-link/f") == root / str(host).lstrip("/") / "f"


def test_relative_link_and_dotdot_never_climb_above_the_root(root):
    (root / "app" / "up").symlink_to("../../../../../etc")
    assert resolve_inside(root, "/app/up/shadow") == root / "etc/shadow"
    assert resolve_inside(root, "/../../../etc/shadow") == root / "etc/shadow"
    assert resolve_inside(root, "/app/../../etc") == root / "etc"


def test_last_component_link_is_left_alone(root):
    (root / "app" / "link").symlink_to("/etc")
    assert resolve_inside(root, "/app/link") == root / "app/link"


def test_link_loop_is_an_error(root):
    (root / "app" / "a").symlink_to("/app/b")
    (root / "app" / "b").symlink_to("/app/a")
    with pytest.raises(SandboxError, match="too many symlinks"):
        resolve_inside(root, "/app/a/x")


# -- layer_key -----------------------------------------------------------------------------


def test_layer_key_follows_digest_base_image_and_the_root_it_was_built_on():
    plan = parse_dockerfile("FROM debian:bookworm-slim\nRUN true\n")
    other_base = parse_dockerfile("FROM python:3.12-slim\nRUN true\n")
    assert layer_key("d1", plan, "host") == layer_key("d1", plan, "host")
    assert layer_key("d1", plan, "host") != layer_key("d2", plan, "host")
    assert layer_key("d1", plan, "host") != layer_key("d1", other_base, "host")
    # The same tag pulled again at another digest is another build.
    one, other = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    assert layer_key("d1", plan, one) != layer_key("d1", plan, other)
    assert layer_key("d1", plan, "host") != layer_key("d1", plan, "host-fallback")
    with_arg = "FROM debian:bookworm-slim\nARG V=1\nRUN echo $V\n"
    assert (layer_key("d1", parse_dockerfile(with_arg), "host")
            != layer_key("d1", parse_dockerfile(with_arg, {"V": "2"}), "host"))


# -- LayerCache ----------------------------------------------------------------------------


def test_layer_is_built_once_then_reused(tmp_path):
    cache = LayerCache(tmp_path / "layers")
    calls: list[Path] = []

    async def build(upper: Path) -> None:
        calls.append(upper)
        upper.mkdir(parents=True)
        (upper / "built").write_text("x")

    async def twice() -> tuple[Path, Path]:
        return await cache.get("k", build), await cache.get("k", build)

    first, second = asyncio.run(twice())
    assert first == second == cache.path("k")
    assert (first / "built").read_text() == "x"
    assert len(calls) == 1
    assert [p.name for p in cache.root.iterdir() if p.name.startswith(".build-")] == []


def test_concurrent_gets_in_one_process_build_once(tmp_path):
    cache = LayerCache(tmp_path / "layers")
    calls = 0

    async def build(upper: Path) -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.2)
        upper.mkdir(parents=True)

    async def many() -> list[Path]:
        return list(await asyncio.gather(*(cache.get("k", build) for _ in range(5))))

    assert len(set(asyncio.run(many()))) == 1
    assert calls == 1


def test_separate_caches_on_one_folder_build_once_through_the_file_lock(tmp_path):
    """Two LayerCache objects (as two sandlot processes would have) share only the flock."""
    calls = 0
    started = threading.Event()

    async def build(upper: Path) -> None:
        nonlocal calls
        calls += 1
        started.set()
        await asyncio.sleep(0.3)
        upper.mkdir(parents=True)

    results: list[Path] = []

    def worker(wait: bool) -> None:
        if wait:
            started.wait(5)
        results.append(asyncio.run(LayerCache(tmp_path / "layers").get("k", build)))

    threads = [threading.Thread(target=worker, args=(w,)) for w in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 2 and results[0] == results[1]
    assert calls == 1


def test_failed_build_leaves_nothing_and_the_next_get_retries(tmp_path):
    cache = LayerCache(tmp_path / "layers")

    async def failing(upper: Path) -> None:
        upper.mkdir(parents=True)
        (upper / "half").write_text("half-built")
        raise TrialError(ErrorKind.BUILD_FAILED, "boom", "setup")

    async def working(upper: Path) -> None:
        upper.mkdir(parents=True)

    with pytest.raises(TrialError):
        asyncio.run(cache.get("k", failing))
    assert not cache.path("k").exists()
    assert [p for p in cache.root.iterdir() if p.name.startswith(".build-")] == []
    assert asyncio.run(cache.get("k", working)) == cache.path("k")


# -- COPY / ADD rules ----------------------------------------------------------------------


@pytest.fixture
def env_dir(tmp_path: Path) -> Path:
    env = tmp_path / "environment"
    (env / "src" / "pkg").mkdir(parents=True)
    (env / "src" / "main.py").write_text("main\n")
    (env / "src" / "pkg" / "mod.py").write_text("mod\n")
    (env / "a.txt").write_text("a\n")
    (env / "b.txt").write_text("b\n")
    return env


def copy(root: Path, env: Path, instruction: str) -> list[str]:
    """Apply one COPY/ADD line, parsed as the backend parses it, with `root` as /."""
    plan = parse_dockerfile(f"FROM debian:bookworm-slim\nWORKDIR /app\n{instruction}\n")
    assert not plan.issues and len(plan.steps) == 1
    step = plan.steps[0]
    assert isinstance(step, CopyStep)
    return _copy_into(lambda p: root / p.lstrip("/"), env, step)


def test_copy_folder_copies_its_contents(root, env_dir):
    copy(root, env_dir, "COPY src /app")
    assert (root / "app/main.py").read_text() == "main\n"
    assert (root / "app/pkg/mod.py").read_text() == "mod\n"
    assert not (root / "app/src").exists()


def test_copy_file_onto_a_path_or_into_a_folder(root, env_dir):
    copy(root, env_dir, "COPY a.txt renamed.txt")
    assert (root / "app/renamed.txt").read_text() == "a\n"
    copy(root, env_dir, "COPY a.txt /opt/new/")
    assert (root / "opt/new/a.txt").read_text() == "a\n"
    copy(root, env_dir, "COPY b.txt .")  # an existing folder, no trailing slash
    assert (root / "app/b.txt").read_text() == "b\n"


def test_copy_several_sources_and_globs_go_into_the_folder(root, env_dir):
    written = copy(root, env_dir, "COPY *.txt /data")
    assert sorted(written) == ["/data/a.txt", "/data/b.txt"]
    assert (root / "data/a.txt").read_text() == "a\n"


def test_copy_source_outside_the_environment_is_refused(root, env_dir, tmp_path):
    (tmp_path / "outside.txt").write_text("host\n")
    with pytest.raises(TrialError) as info:
        copy(root, env_dir, "COPY ../outside.txt /app/")
    assert info.value.kind == ErrorKind.BUILD_FAILED
    (env_dir / "sneaky").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(TrialError):
        copy(root, env_dir, "COPY sneaky /app/")
    assert not (root / "app/outside.txt").exists() and not (root / "app/sneaky").exists()


def test_add_extracts_a_local_archive(root, env_dir):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as archive:
        data = b"from the tar\n"
        info = tarfile.TarInfo("inner/file.txt")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    (env_dir / "bundle.tar.gz").write_bytes(buf.getvalue())
    copy(root, env_dir, "ADD bundle.tar.gz /srv")
    assert (root / "srv/inner/file.txt").read_text() == "from the tar\n"
    assert os.listdir(root / "srv") == ["inner"]
