"""The docker backend beyond the sandbox contract: its build cache, compose services, the
gateway's namespace, RPC processes, changes, cleanup after a killed sandlot, limits.

Needs a container engine (DOCKER_HOST, Docker's socket or Podman's); skipped without one.
Tasks build FROM a tiny image made here (docker_support.py), so no registry is needed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_support import engine_or_skip, tiny_image

from sandlot.errors import ErrorKind, SandboxError, TrialError
from sandlot.sandbox.base import EnvironmentRequest, SandboxSpec
from sandlot.sandbox.docker_backend import DockerBackend, sweep_docker_leftovers
from sandlot.sandbox.docker_engine import OWNER_LABEL, TRIAL_LABEL, Engine, connect_engine
from sandlot.sandbox.files import make_dirs
from sandlot.tasks.loader import hash_tree

pytestmark = [pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return engine_or_skip()


@pytest.fixture(scope="module")
def tiny(engine: Engine) -> str:
    return tiny_image(engine)


@pytest.fixture
def run() -> Iterator[Any]:
    with asyncio.Runner() as runner:
        yield runner.run


def make_backend(cache_dir: Path, tiny: str, **kwargs: Any) -> DockerBackend:
    return DockerBackend(cache_dir, base_image_overrides={"debian:bookworm-slim": tiny},
                         **kwargs)


def write_env(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def request(env: Path, logs: Path, **spec: Any) -> EnvironmentRequest:
    spec.setdefault("name", f"docker-{secrets.token_hex(3)}")
    spec.setdefault("workdir", "/app")
    return EnvironmentRequest(spec=SandboxSpec(**spec), environment_dir=env,
                              digest=hash_tree(env), build_timeout_sec=120, log_dir=logs)


def owned_by(engine: Engine, key: str, value: str) -> list[dict[str, Any]]:
    return [c for c in engine.api.containers(all=True, filters={"label": f"{key}={value}"})]


RANDOM = ("FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo {token} > token "
          "&& head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > rand\n")


# -- the build cache ---------------------------------------------------------------------


def test_image_is_cached_across_jobs_and_force_build_rebuilds_it(run, tmp_path, cache_dir, tiny):
    env = write_env(tmp_path / "env", {"Dockerfile": RANDOM.format(token=secrets.token_hex(8))})

    def rand(backend: DockerBackend, logs: str) -> str:
        sandbox = run(backend.create(request(env, tmp_path / logs)))
        try:
            return run(sandbox.exec(["cat", "/app/rand"])).stdout
        finally:
            run(sandbox.stop())

    first = rand(make_backend(cache_dir, tiny), "a")
    again = rand(make_backend(cache_dir, tiny), "b")  # a later job: a new backend
    assert len(first) == 32 and again == first
    assert "using the cached image" in (tmp_path / "b" / "build.log").read_text()
    forced_backend = make_backend(cache_dir, tiny, force_build=True)
    forced = rand(forced_backend, "c")
    assert forced != first, "--force-build ran the RUN step again"
    assert rand(forced_backend, "d") == forced, "a forced build happens once per job"
    assert rand(make_backend(cache_dir, tiny), "e") == forced, "the rebuilt image is cached"


def test_concurrent_trials_of_one_task_build_its_image_once(run, tmp_path, cache_dir, tiny):
    env = write_env(tmp_path / "env", {"Dockerfile": RANDOM.format(token=secrets.token_hex(8))})
    backend = make_backend(cache_dir, tiny)

    async def three() -> list[str]:
        sandboxes = await asyncio.gather(*(backend.create(request(env, tmp_path / f"l{i}"))
                                           for i in range(3)))
        try:
            return [(await s.exec(["cat", "/app/rand"])).stdout for s in sandboxes]
        finally:
            await asyncio.gather(*(s.stop() for s in sandboxes))

    values = run(three())
    assert len(set(values)) == 1 and len(values[0]) == 32
    logs = [(tmp_path / f"l{i}" / "build.log").read_text() for i in range(3)]
    assert sum("using the cached image" in log for log in logs) == 2


def test_multi_stage_dockerfile_builds_and_a_failure_names_the_line(run, tmp_path, cache_dir,
                                                                    tiny):
    backend = make_backend(cache_dir, tiny)
    env = write_env(tmp_path / "env", {"Dockerfile": (
        "FROM debian:bookworm-slim AS builder\nRUN echo built-in-stage-one > /artifact\n"
        "FROM debian:bookworm-slim\nCOPY --from=builder /artifact /app/artifact\n"
        f"RUN echo {secrets.token_hex(4)}\n")})
    sandbox = run(backend.create(request(env, tmp_path / "logs")))
    try:
        assert run(sandbox.exec(["cat", "/app/artifact"])).stdout == "built-in-stage-one\n"
    finally:
        run(sandbox.stop())
    bad = write_env(tmp_path / "bad", {"Dockerfile": (
        "FROM debian:bookworm-slim AS one\nRUN true\n\nFROM debian:bookworm-slim\n"
        f"RUN echo {secrets.token_hex(4)}\nRUN echo stage-two-broke >&2; exit 4\n")})
    with pytest.raises(TrialError) as info:
        run(backend.create(request(bad, tmp_path / "bad-logs")))
    assert info.value.kind == ErrorKind.BUILD_FAILED
    assert "line 6" in info.value.message and "stage-two-broke" in info.value.message


def test_missing_base_image_is_build_failed_with_the_override_hint(run, tmp_path, cache_dir,
                                                                   tiny):
    env = write_env(tmp_path / "env", {"Dockerfile": "FROM localhost/sandlot-no-such:1\n"})
    with pytest.raises(TrialError) as info:
        run(make_backend(cache_dir, tiny).create(request(env, tmp_path / "logs")))
    assert info.value.kind == ErrorKind.BUILD_FAILED
    assert "--base-image-override" in info.value.message


# -- compose -------------------------------------------------------------------------------

COMPOSE = """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    environment:
      - API_URL=http://api:8080
    depends_on:
      api:
        condition: service_healthy
  api:
    build: ./api
    environment:
      GREETING: ${GREETING:-hello from api}
    healthcheck:
      test: ["CMD", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"]
      interval: 1s
      retries: 30
"""
API_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN mkdir -p /srv && echo "inventory: 42 widgets" > /srv/index.html
CMD ["sh", "-c", "sleep 1; echo $GREETING > /srv/greeting.txt; exec httpd -f -p 8080 -h /srv"]
"""
FETCH = ('exec 3<>/dev/tcp/api/8080 && printf "GET /{path} HTTP/1.0\\r\\n\\r\\n" >&3 '
         "&& cat <&3")


def has_default_route(proc_net_route: str) -> bool:
    return any(line.split()[1] == "00000000" for line in proc_net_route.splitlines()[1:]
               if len(line.split()) > 1)


def test_compose_service_runs_beside_the_sandbox_on_a_private_network(run, tmp_path, engine,
                                                                      cache_dir, tiny):
    env = write_env(tmp_path / "env", {
        "docker-compose.yaml": COMPOSE, "Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
        "api/Dockerfile": API_DOCKERFILE})
    backend = make_backend(cache_dir, tiny)
    req = request(env, tmp_path / "logs")
    sandbox = run(backend.create(req))
    try:
        assert len(owned_by(engine, TRIAL_LABEL, req.spec.name)) == 2, "main and api"
        r = run(sandbox.exec(FETCH.format(path="index.html"), timeout_sec=20))
        assert "inventory: 42 widgets" in r.stdout, r.stderr
        r = run(sandbox.exec(FETCH.format(path="greeting.txt"), timeout_sec=20))
        assert "hello from api" in r.stdout, "compose variables default as compose does"
        assert run(sandbox.exec('echo "$API_URL"')).stdout == "http://api:8080\n"
        # The agent's phase: the service, but no way out (an internal network).
        route = run(sandbox.exec(["cat", "/proc/net/route"])).stdout
        assert not has_default_route(route), route
        out = run(sandbox.exec(["cat", "/proc/net/route"], network="outbound")).stdout
        assert has_default_route(out), out
    finally:
        run(sandbox.stop())
    assert owned_by(engine, TRIAL_LABEL, req.spec.name) == []
    nets = engine.api.networks(filters={"label": f"{TRIAL_LABEL}={req.spec.name}"})
    assert nets == []


def test_compose_without_a_main_service_is_build_failed(run, tmp_path, cache_dir, tiny):
    env = write_env(tmp_path / "env", {"docker-compose.yaml": "services:\n  web:\n    image: x\n"})
    with pytest.raises(TrialError) as info:
        run(make_backend(cache_dir, tiny).create(request(env, tmp_path / "logs")))
    assert info.value.kind == ErrorKind.BUILD_FAILED and "main" in info.value.message


# -- the gateway, RPC processes, changes -----------------------------------------------------


def test_gateway_socket_in_the_network_namespace_is_reachable_on_loopback(run, tmp_path,
                                                                         cache_dir, tiny):
    from sandlot.gateway.netns import listen_in_netns

    env = write_env(tmp_path / "env", {"Dockerfile": "FROM debian:bookworm-slim\n"})
    sandbox = run(make_backend(cache_dir, tiny).create(request(env, tmp_path / "logs")))
    try:
        netns = sandbox.network_namespace()
        assert netns is not None and netns.endswith("/ns/net")
        listener = listen_in_netns(netns)
        port = listener.getsockname()[1]
        listener.settimeout(10)
        r = run(sandbox.exec(f'exec 3<>/dev/tcp/127.0.0.1/{port} && echo ping >&3',
                             network="loopback", timeout_sec=20))
        assert r.ok, r.stderr
        conn, _ = listener.accept()
        assert conn.recv(100) == b"ping\n"
        conn.close()
        listener.close()
        # Loopback is all the agent phase has: no interface to the outside.
        dev = run(sandbox.exec(["cat", "/proc/net/dev"], network="loopback")).stdout
        assert {ln.split(":")[0].strip() for ln in dev.splitlines() if ":" in ln} == {"lo"}
    finally:
        run(sandbox.stop())
    assert sandbox.network_namespace() is None


def host_procs(marker: str) -> str:
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout


def test_start_process_talks_over_stdio_and_kill_ends_its_tree(run, tmp_path, cache_dir, tiny):
    """What a process leaves running when it exits lives on, as in the local sandbox;
    killing it kills everything it started."""
    env = write_env(tmp_path / "env", {"Dockerfile": "FROM debian:bookworm-slim\n"})
    sandbox = run(make_backend(cache_dir, tiny).create(request(env, tmp_path / "logs")))
    marker = f"sandlot-rpc-{secrets.token_hex(4)}"

    async def talk() -> tuple[bytes, int]:
        proc = await sandbox.start_process(
            ["bash", "-c", f"sh -c 'sleep 300; :' {marker} & "
             'while read -r line; do echo "got:$line"; done'])
        proc.stdin.write(b"one\n")
        await proc.stdin.drain()
        line = await asyncio.wait_for(proc.stdout.readline(), 10)
        proc.stdin.close()  # EOF: the loop ends, and the process with it
        code = await asyncio.wait_for(proc.wait(), 10)
        return line, code

    async def killed() -> int | None:
        proc = await sandbox.start_process(["sh", "-c", f"sh -c 'sleep 300; :' {marker}x; :"])
        await asyncio.sleep(0.5)
        assert host_procs(marker + "x") != ""
        await proc.kill()
        return proc.returncode

    try:
        line, code = run(talk())
        assert line == b"got:one\n" and code == 0
        assert host_procs(marker) != "", "what it left running lives on"
        assert run(killed()) is not None
        assert host_procs(marker + "x") == ""
    finally:
        run(sandbox.stop())


def test_a_process_that_clears_its_mark_still_ends_with_the_sandbox(run, tmp_path, cache_dir,
                                                                    tiny):
    env = write_env(tmp_path / "env", {"Dockerfile": "FROM debian:bookworm-slim\n"})
    sandbox = run(make_backend(cache_dir, tiny).create(request(env, tmp_path / "logs")))
    marker = f"sandlot-escape-{secrets.token_hex(4)}"
    try:
        r = run(sandbox.exec(f"env -i setsid sh -c 'sleep 300; :' {marker} >/dev/null 2>&1 & "
                             "echo started", timeout_sec=30))
        assert r.stdout == "started\n"
        assert host_procs(marker) != ""
        assert run(sandbox.exec(["true"])).ok, "the container itself is still up"
    finally:
        run(sandbox.stop())
    assert host_procs(marker) == ""


def test_changes_lists_what_the_trial_did_and_restore_puts_the_image_back(run, tmp_path,
                                                                          cache_dir, tiny):
    env = write_env(tmp_path / "env", {"Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n"})
    sandbox = run(make_backend(cache_dir, tiny).create(request(env, tmp_path / "logs")))
    try:
        original = run(sandbox.exec(["cat", "/etc/debian_version"])).stdout
        run(make_dirs(sandbox, "/logs/verifier"))
        r = run(sandbox.exec("echo hacked > /etc/debian_version && mkdir -p /usr/lib/py "
                             "&& echo 'import os' > /usr/lib/py/hook.pth && rm /etc/group"))
        assert r.ok, r.stderr
        changes = {c.path: c.kind for c in run(sandbox.changes())}
        assert changes["/etc/debian_version"] == "modified"
        assert changes["/usr/lib/py/hook.pth"] == "added"
        assert changes["/etc/group"] == "deleted"
        assert not any(p.startswith("/logs") for p in changes), "sandlot's own setup"
        run(sandbox.restore("/etc/debian_version"))
        run(sandbox.restore("/usr/lib/py/hook.pth"))
        run(sandbox.restore("/etc/group"))
        assert run(sandbox.exec(["cat", "/etc/debian_version"])).stdout == original
        assert run(sandbox.exec(["test", "-e", "/usr/lib/py/hook.pth"])).exit_code == 1
        assert run(sandbox.exec(["grep", "-c", "root", "/etc/group"])).stdout == "1\n"
        assert sandbox.host_path("/etc/debian_version").read_text() == original
    finally:
        run(sandbox.stop())


# -- cleanup and limits, through the real CLI -----------------------------------------------


def write_task(root: Path, name: str, tiny: str, solve: str, *, memory_mb: int | None = None,
               storage_mb: int | None = None) -> Path:
    task = root / name
    limits = "[environment]\n" if memory_mb or storage_mb else ""
    limits += f"memory_mb = {memory_mb}\n" if memory_mb else ""
    limits += f"storage_mb = {storage_mb}\n" if storage_mb else ""
    files = {
        "task.toml": f'version = "1.0"\n[agent]\ntimeout_sec = 120\n[verifier]\n'
                     f"timeout_sec = 60\n{limits}",
        "instruction.md": "Do it.\n",
        "environment/Dockerfile": f"FROM {tiny}\nWORKDIR /app\n",
        "solution/solve.sh": f"#!/bin/bash\n{solve}\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    }
    write_env(task, files)
    for script in ("solution/solve.sh", "tests/test.sh"):
        (task / script).chmod(0o755)
    return task


def sandlot(*args: str, cache_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "sandlot.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_sweep_removes_what_a_killed_sandlot_left(tmp_path, engine, cache_dir, tiny):
    marker = f"sandlot-left-{secrets.token_hex(4)}"
    write_task(tmp_path / "tasks", "hang", tiny, f"sh -c 'sleep 300; :' {marker}")
    proc = sandlot("run", str(tmp_path / "tasks"), "--agent", "oracle", "--sandbox", "docker",
                   "--jobs-dir", str(tmp_path / "jobs"), "--quiet", cache_dir=cache_dir)
    owner = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and owner is None:
            if proc.poll() is not None:
                pytest.fail(f"sandlot exited early: {proc.stdout.read() if proc.stdout else ''}")
            if host_procs(marker):
                for c in engine.api.containers(filters={"label": OWNER_LABEL}):
                    if f":{proc.pid}:" in c["Labels"][OWNER_LABEL]:
                        owner = c["Labels"][OWNER_LABEL]
            time.sleep(0.2)
        assert owner is not None, "the trial's container never appeared"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    left = owned_by(engine, OWNER_LABEL, owner)
    assert left, "a SIGKILLed sandlot cannot remove its containers itself"
    removed = asyncio.run(sweep_docker_leftovers())
    assert removed >= 2, "the container and its network"
    assert owned_by(engine, OWNER_LABEL, owner) == []
    assert engine.api.networks(filters={"label": f"{OWNER_LABEL}={owner}"}) == []
    assert host_procs(marker) == ""


def test_ctrl_c_tears_down_the_running_trials_containers(tmp_path, engine, cache_dir, tiny):
    marker = f"sandlot-int-{secrets.token_hex(4)}"
    write_task(tmp_path / "tasks", "hang", tiny, f"sh -c 'sleep 300; :' {marker}")
    proc = sandlot("run", str(tmp_path / "tasks"), "--agent", "oracle", "--sandbox", "docker",
                   "--jobs-dir", str(tmp_path / "jobs"), "--quiet", cache_dir=cache_dir)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not host_procs(marker):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.2)
        owners = {c["Labels"][OWNER_LABEL] for c in engine.api.containers(
            filters={"label": OWNER_LABEL}) if f":{proc.pid}:" in c["Labels"][OWNER_LABEL]}
        assert len(owners) == 1
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "interrupted" in out
    owner = owners.pop()
    assert owned_by(engine, OWNER_LABEL, owner) == []
    assert engine.api.networks(filters={"label": f"{OWNER_LABEL}={owner}"}) == []
    assert host_procs(marker) == ""


def test_sweep_keeps_what_a_running_sandlot_owns(run, tmp_path, engine, cache_dir, tiny):
    env = write_env(tmp_path / "env", {"Dockerfile": "FROM debian:bookworm-slim\n"})
    req = request(env, tmp_path / "logs")
    sandbox = run(make_backend(cache_dir, tiny).create(req))
    try:
        run(sweep_docker_leftovers())
        assert len(owned_by(engine, TRIAL_LABEL, req.spec.name)) == 1
    finally:
        run(sandbox.stop())


def test_memory_limit_hit_by_the_oracle_is_recorded_as_agent_oom(tmp_path, cache_dir, tiny):
    write_task(tmp_path / "tasks", "hog", tiny, "head -c 300M /dev/zero | tail > /dev/null",
               memory_mb=64)
    proc = sandlot("run", str(tmp_path / "tasks"), "--agent", "oracle", "--sandbox", "docker",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "oom", "--quiet",
                   cache_dir=cache_dir)
    out, _ = proc.communicate(timeout=300)
    result = json.loads((tmp_path / "jobs" / "oom" / "hog__1" / "result.json").read_text())
    assert result["error"] is not None, out
    assert result["error"]["kind"] == "agent_oom", result["error"]
    assert "64 MB" in result["error"]["message"]
    assert result["sandbox"] == "docker"


def test_a_container_past_its_storage_mb_ends_the_phase_as_disk_limit(tmp_path, cache_dir,
                                                                      tiny):
    # Still writing and then idle: the measure while it runs kills it (the agent's
    # timeout, 120 s, would end it otherwise: agent_timeout, not disk_limit).
    write_task(tmp_path / "tasks", "filler", tiny,
               "head -c 40000000 /dev/zero > /app/fill; sleep 300", storage_mb=16)
    write_task(tmp_path / "tasks", "small", tiny, "head -c 1000000 /dev/zero > /app/fill",
               storage_mb=16)
    proc = sandlot("run", str(tmp_path / "tasks"), "--agent", "oracle", "--sandbox", "docker",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "disk", "--quiet",
                   cache_dir=cache_dir)
    out, _ = proc.communicate(timeout=300)
    jobs = tmp_path / "jobs" / "disk"
    result = json.loads((jobs / "filler__1" / "result.json").read_text())
    assert result["error"] is not None, out
    assert result["error"]["kind"] == "disk_limit", result["error"]
    assert result["error"]["phase"] == "agent"
    small = json.loads((jobs / "small__1" / "result.json").read_text())
    assert small["error"] is None and small["reward"] == 1.0, small["error"]


def test_each_phase_gets_the_network_the_task_asks_for(tmp_path, cache_dir, tiny):
    """Oracle on the engine: the agent phase has an allowlist (its filter in the
    container's namespace; which addresses it lets through is the contract test's, with
    addresses the test owns), test.sh has no network: loopback alone."""
    task = tmp_path / "tasks" / "phases"
    write_env(task, {
        "task.toml": '[agent]\ntimeout_sec = 120\nnetwork_mode = "allowlist"\n'
                     'allowed_hosts = ["192.0.2.99"]\n[verifier]\ntimeout_sec = 60\n'
                     'network_mode = "no-network"\n',
        "instruction.md": "Do it.\n",
        "environment/Dockerfile": f"FROM {tiny}\nWORKDIR /app\n",
        "solution/solve.sh": "#!/bin/bash\ncat /proc/net/dev > /app/agent-dev.txt\n",
        "tests/test.sh": "#!/bin/bash\ncut -d: -f1 -s /app/agent-dev.txt; echo ---\n"
                         "cut -d: -f1 -s /proc/net/dev\necho 1 > /logs/verifier/reward.txt\n",
    })
    proc = sandlot("run", str(tmp_path / "tasks"), "--agent", "oracle", "--sandbox", "docker",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "net", "--quiet",
                   cache_dir=cache_dir)
    out, _ = proc.communicate(timeout=300)
    trial = tmp_path / "jobs" / "net" / "phases__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["error"] is None and result["reward"] == 1.0, (out, result["error"])
    agent, verifier = (trial / "verifier" / "test_stdout.txt").read_text().split("---\n")
    assert set(agent.split()) - {"lo"}, "the allowlist phase has a route out"
    assert set(verifier.split()) == {"lo"}, "no-network: loopback alone"
    assert result["network"]["agent"]["mode"] == "allowlist"
    assert result["network"]["verifier"] == {"mode": "none",
                                             "source": "[verifier] network_mode"}


def test_a_multi_step_task_runs_its_steps_in_one_container(tmp_path, cache_dir, tiny):
    """The three-step fixture with the oracle on the engine: every step in order, each
    scored by its own tests, one container throughout."""
    from multi_step_fixture import three_steps

    three_steps(tmp_path / "tasks", "counter", dockerfile=f"FROM {tiny}\nWORKDIR /app\n")
    proc = sandlot("run", str(tmp_path / "tasks"), "--agent", "oracle", "--sandbox", "docker",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "steps", "--quiet",
                   cache_dir=cache_dir)
    out, _ = proc.communicate(timeout=300)
    trial = tmp_path / "jobs" / "steps" / "counter__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["error"] is None and result["reward"] == 1.0, (out, result["error"])
    assert [(s["name"], s["reward"]) for s in result["steps"]] == [
        ("create", 1.0), ("extend", 1.0), ("finish", 1.0)]
    extend = (trial / "steps" / "extend" / "verifier" / "test_stdout.txt").read_text()
    assert "lines=2 expect=2" in extend and "only-create.txt" not in extend


def test_listed_artifacts_are_collected_from_the_container(tmp_path, cache_dir, tiny):
    from test_artifacts import artifact_task, check_collected

    artifact_task(tmp_path / "tasks", dockerfile=f"FROM {tiny}\nWORKDIR /app\n")
    proc = sandlot("run", str(tmp_path / "tasks"), "--agent", "oracle", "--sandbox", "docker",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "art", "--quiet",
                   "--max-copy-out-mb", "2", cache_dir=cache_dir)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    check_collected(tmp_path / "jobs" / "art" / "collect__1")


# -- no engine -------------------------------------------------------------------------------


def test_unreachable_engine_error_names_what_was_tried(monkeypatch):
    from sandlot.sandbox.docker_engine import engine_candidates

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/sandlot.sock")
    tried = engine_candidates()
    assert tried[0] == "unix:///nonexistent/sandlot.sock"
    assert "unix:///var/run/docker.sock" in tried and "unix:///run/podman/podman.sock" in tried
    with pytest.raises(SandboxError) as info:
        connect_engine("unix:///nonexistent/sandlot.sock")
    assert "unix:///nonexistent/sandlot.sock (no such socket)" in str(info.value)
    assert "podman system service" in str(info.value)
