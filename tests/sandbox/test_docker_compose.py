"""Reading docker-compose.yaml for the docker backend (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandlot.errors import ErrorKind, TrialError
from sandlot.sandbox.docker_compose import MAIN_IMAGE, interpolate, load_compose


def compose(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> Path:
    env = tmp_path / "environment"
    env.mkdir(parents=True, exist_ok=True)
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    for rel, content in (files or {}).items():
        (env / rel).parent.mkdir(parents=True, exist_ok=True)
        (env / rel).write_text(content)
    (env / "docker-compose.yaml").write_text(text)
    return env / "docker-compose.yaml"


def test_interpolation_follows_compose_and_never_reads_the_host(monkeypatch):
    monkeypatch.setenv("HOST_SECRET", "leaked")
    values = {"SET": "x", "EMPTY": ""}
    assert interpolate("${SET}-$SET-${UNSET:-d}-${EMPTY:-e}-${EMPTY-f}-$$SET", values) == \
        "x-x-d-e--$SET"
    assert interpolate("${SET:+alt}|${UNSET:+alt}|${HOST_SECRET}", values) == "alt||"
    assert interpolate({"a": ["${SET}", 3]}, values) == {"a": ["x", 3]}
    with pytest.raises(TrialError, match="NEEDED is required: set it"):
        interpolate("${NEEDED:?set it}", values)


def test_harbor_layout_main_builds_from_the_context_and_services_start_in_order(tmp_path):
    path = compose(tmp_path, """
services:
  main:
    build: {context: "${CONTEXT_DIR}"}
    image: ${MAIN_IMAGE_NAME}
    volumes: ["${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}", "shared:/shared"]
    depends_on: {api: {condition: service_healthy}}
  api:
    build: ./api
    depends_on: [db]
    environment: {MODE: "${MODE:-test}"}
    healthcheck: {test: "curl -f localhost", interval: 1m30s, retries: 4}
    deploy: {resources: {limits: {cpus: "0.5", memory: 256M}}}
    volumes: ["shared:/data", "./seed:/seed"]
  db:
    image: postgres:16
""", {"api/Dockerfile": "FROM x\n", ".env": "MODE=from-dotenv\n"})
    env_dir = path.parent
    plan = load_compose(path, {"CONTEXT_DIR": str(env_dir), "MAIN_IMAGE_NAME": MAIN_IMAGE,
                               "ENV_VERIFIER_LOGS_PATH": "/logs/verifier"})
    assert plan.main.name == "main" and plan.main.image is None
    assert plan.main.context == env_dir.resolve()
    assert plan.main.binds == [("shared", "/shared", False)], "host log mounts are dropped"
    assert [s.name for s in plan.start_order()] == ["db", "api"]
    api = next(s for s in plan.others if s.name == "api")
    assert api.context == (env_dir / "api").resolve() and api.environment == {"MODE": "from-dotenv"}
    assert api.healthcheck is not None and api.healthcheck.interval_sec == 90
    assert api.healthcheck.test == ["sh", "-c", "curl -f localhost"]
    assert (api.cpus, api.memory_mb) == (0.5, 256)
    assert (str((env_dir / "seed").resolve()), "/seed", True) in api.binds, "read-only"
    assert plan.volumes == ["shared"]
    assert api.depends_on == {"db": "service_started"}


def test_terminal_bench_client_service_is_the_main_one(tmp_path):
    path = compose(tmp_path, "services:\n  client:\n    build: .\n    image: "
                   "${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n")
    plan = load_compose(path, {"T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME": MAIN_IMAGE})
    assert plan.main.name == "client" and plan.others == []


@pytest.mark.parametrize(("text", "message"), [
    ("services:\n  web:\n    image: nginx\n", "no main service"),
    ("services:\n  main: {}\n  a: {image: x, depends_on: [b]}\n  b: {image: x, depends_on: [a]}\n",
     "cycle"),
    ("services:\n  main: {}\n  a: {image: x, volumes: ['/etc:/host-etc']}\n",
     "only folders inside environment/"),
    ("services:\n  main: {}\n  a: {build: ../..}\n", "outside environment/"),
    ("services:\n  main: {}\n  a: {image: x, privileged: true}\n", "privileged"),
    ("services:\n  main: {}\n  a: {image: x, depends_on: [ghost]}\n", "unknown service"),
    ("services: [1, 2]\n", "no `services:` mapping"),
    ("services:\n  main: {\n", "cannot be read"),
])
def test_problems_are_build_failed_with_a_reason(tmp_path, text, message):
    with pytest.raises(TrialError) as info:
        load_compose(compose(tmp_path, text), {})
    assert info.value.kind == ErrorKind.BUILD_FAILED
    assert message in info.value.message and "docker-compose.yaml" in info.value.message
