"""Shared fixtures: task folders built on the fly, a shared layer cache, the CLI as a process."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from suite_guard import (  # noqa: F401  (hooks: the run's bounds and its end-of-run check)
    pytest_runtest_logfinish,
    pytest_runtest_logreport,
    pytest_runtest_logstart,
    pytest_runtest_teardown,
    pytest_sessionfinish,
    pytest_sessionstart,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "tasks"

#: The tasks written for the tests say `FROM debian:bookworm-slim` and mean the host's root
#: (the local sandbox's own behaviour is what they test). Without this, a machine that
#: reaches Docker Hub would pull that image and run them on it; tests of pulled images say
#: --image-policy (or image_policy=) themselves. The CLIs the tests start inherit it.
os.environ.setdefault("SANDLOT_IMAGE_POLICY", "host")


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One sandlot cache for the session, so Dockerfile layers are built once."""
    return tmp_path_factory.mktemp("sandlot-cache")


TaskFactory = Callable[..., Path]


def files_containing(root: Path, needle: str) -> list[Path]:
    """Every regular file under `root` whose bytes contain `needle` (symlinks not followed)."""
    data = needle.encode()
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with contextlib.suppress(OSError):
                if data in path.read_bytes():
                    hits.append(path)
    return hits


def trial_story(trial: Path) -> str:
    """What a failure message needs to explain a trial: its result and the ends of its logs."""
    parts = [f"--- {trial.parent.name}/{trial.name}"]
    result = trial / "result.json"
    if result.is_file():
        data = json.loads(result.read_text())
        parts.append("result: " + json.dumps({k: data.get(k) for k in (
            "reward", "rewards", "passed", "error", "integrity", "verifier_failure",
            "verifier_exit_code")}))
    for name in ("trial.log", "verifier/test_stdout.txt",
                 "verifier/test_stderr.txt", "agent/builtin_trajectory.jsonl",
                 "trajectory/acp_trajectory.jsonl"):
        path = trial / name
        if path.is_file():
            parts.append(f"{name}: {path.read_text(errors='replace')[-1500:]}")
    return "\n".join(parts)


def write_task(root: Path, name: str, *, test_sh: str | None = None, solve_sh: str = "true",
               instruction: str = "Do the thing.\n", task_toml: str | None = None,
               dockerfile: str | None = None, files: dict[str, str] | None = None,
               agent_timeout: float = 60, verifier_timeout: float = 60) -> Path:
    """A Harbor task folder; `files` maps relative paths to contents (scripts made +x)."""
    task = root / name
    (task / "tests").mkdir(parents=True, exist_ok=True)
    (task / "solution").mkdir(parents=True, exist_ok=True)
    (task / "environment").mkdir(parents=True, exist_ok=True)
    if task_toml is None:
        task_toml = (f'version = "1.0"\n[agent]\ntimeout_sec = {agent_timeout}\n'
                     f"[verifier]\ntimeout_sec = {verifier_timeout}\n")
    (task / "task.toml").write_text(task_toml)
    (task / "instruction.md").write_text(instruction)
    if test_sh is None:
        test_sh = "echo 1 > /logs/verifier/reward.txt"
    all_files = {
        "tests/test.sh": "#!/bin/bash\n" + textwrap.dedent(test_sh),
        "solution/solve.sh": "#!/bin/bash\n" + textwrap.dedent(solve_sh),
        "environment/Dockerfile": dockerfile or "FROM debian:bookworm-slim\nWORKDIR /app\n",
        **(files or {}),
    }
    for rel, content in all_files.items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        if rel.endswith(".sh"):
            path.chmod(0o755)
    return task


@pytest.fixture
def make_task(tmp_path: Path) -> TaskFactory:
    """make_task(name, test_sh=..., solve_sh=..., ...) -> task folder under tmp_path/tasks."""
    root = tmp_path / "tasks"

    def factory(name: str, **kwargs: object) -> Path:
        return write_task(root, name, **kwargs)  # type: ignore[arg-type]

    return factory


def kept_downloads_dir() -> Path:
    """Where the e2e tests keep agents installed from npm between runs: sandlot's own cache
    (what `sandlot clean` empties), or $SANDLOT_TEST_AGENTS_DIR."""
    from sandlot.paths import default_cache_dir

    return Path(os.environ.get("SANDLOT_TEST_AGENTS_DIR") or default_cache_dir())


def sandlot_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sandlot.cli", *args]


@pytest.fixture
def run_cli(cache_dir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real `sandlot` CLI in a subprocess with the shared cache."""

    def run(*args: str, timeout: float = 600, env: dict[str, str] | None = None,
            cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200",
                    "PYTHONPATH": str(REPO / "tests"), **(env or {})}
        return subprocess.run(sandlot_cmd(*args), capture_output=True, text=True,
                              timeout=timeout, env=full_env, cwd=cwd)

    return run


# -- the docker backend's tests (tests/sandbox) ------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def remove_built_test_images() -> Iterator[None]:
    """Most docker tests build throw-away images (a random token in a RUN step): remove
    the ones this session built, except those a test kept (the examples' Debian builds,
    which later runs reuse)."""
    yield
    try:
        import docker_support  # importable once a tests/sandbox module ran
    except ImportError:
        return

    from sandlot.sandbox.docker_engine import _ENGINES, KEY_LABEL, OWNER_LABEL, owner_id

    for engine in list(_ENGINES.values()):
        with contextlib.suppress(Exception):
            images = engine.api.images(filters={"label": f"{OWNER_LABEL}={owner_id()}"})
            for image in images:
                tags = set(image.get("RepoTags") or [])
                key = (image.get("Labels") or {}).get(KEY_LABEL, "")
                if tags & docker_support.KEEP_IMAGES or key in docker_support.KEEP_KEYS:
                    continue
                with contextlib.suppress(Exception):
                    engine.api.remove_image(image["Id"], force=True)
