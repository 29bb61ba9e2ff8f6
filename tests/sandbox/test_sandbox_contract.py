"""The sandbox contract: what every backend's Sandbox and SandboxBackend must do.

Every test here goes through `backend.create(EnvironmentRequest(...))` and the Sandbox
Protocol only, with real processes, so every backend (local, docker, later remote) runs the
very same tests: it is a name in BACKENDS. The few tests at the end that look at the local
backend's own scratch folders, processes and sweep are marked as such.

The docker backend runs them when a container engine is reachable (DOCKER_HOST, Docker's
socket or Podman's); its tasks' `FROM debian:bookworm-slim` is overridden with a tiny image
built here (tests/sandbox/docker_support.py), as `--base-image-override` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from netns_peer import ALLOWED, OTHER, peer_namespace, probe
from sandlot.errors import ContainerExited, ErrorKind, SandboxDiskFull, SandboxError, TrialError
from sandlot.sandbox.base import (
    Allowlist,
    CountsLimitEvents,
    EnvironmentRequest,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
)
from sandlot.sandbox.files import make_dirs, remove_path, share_folder
from sandlot.sandbox.local import LocalSandbox
from sandlot.sandbox.local_backend import LocalBackend, check_local_backend
from sandlot.sandbox.users import ensure_users
from sandlot.tasks.dockerfile import parse_dockerfile
from sandlot.tasks.loader import hash_tree

pytestmark = [pytest.mark.e2e]

T = TypeVar("T")
Run = Callable[[Awaitable[T]], T]

BACKENDS = ["local", "docker"]

DOCKERFILE = """\
FROM debian:bookworm-slim
WORKDIR /app
ENV GREETING="hello from the dockerfile"
COPY data.txt /app/data.txt
"""
DATA = "copied by the Dockerfile\n"


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def run() -> Iterator[Run[Any]]:
    """One event loop per test, shared by its fixtures, so sandboxes live in one loop."""
    with asyncio.Runner() as runner:
        yield runner.run


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, cache_dir: Path) -> SandboxBackend:
    if request.param == "local":
        try:
            check_local_backend()
        except SandboxError as exc:
            pytest.skip(f"local sandbox cannot run here: {exc}")
        return LocalBackend(cache_dir, image_policy="host")
    if request.param == "docker":
        from docker_support import engine_or_skip, tiny_image

        from sandlot.sandbox.docker_backend import DockerBackend

        base = tiny_image(engine_or_skip())
        return DockerBackend(cache_dir, base_image_overrides={"debian:bookworm-slim": base})
    raise AssertionError(f"no fixture for backend {request.param!r}")


@pytest.fixture(scope="module")
def masked_dir() -> Iterator[Path]:
    """A host folder outside the default masks (/tmp, /root...), hidden through the spec."""
    path = Path(tempfile.mkdtemp(prefix="sandlot-contract-", dir="/var/lib"))
    (path / "secret.txt").write_text("host secret\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_env(root: Path, dockerfile: str = DOCKERFILE,
              files: dict[str, str] | None = None) -> Path:
    """An environment/ folder: a Dockerfile and the files it COPYs."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "Dockerfile").write_text(dockerfile)
    for rel, content in (files if files is not None else {"data.txt": DATA}).items():
        (root / rel).write_text(content)
    return root


def make_request(env_dir: Path, log_dir: Path, *, build_timeout_sec: float = 120,
                 **spec_fields: Any) -> EnvironmentRequest:
    """What a trial asks for: workdir and ENV from the Dockerfile, as the task loader does."""
    plan = parse_dockerfile((env_dir / "Dockerfile").read_text())
    spec_fields.setdefault("name", f"contract-{secrets.token_hex(3)}")
    spec_fields.setdefault("workdir", plan.workdir or "/app")
    spec_fields.setdefault("env", dict(plan.env))
    return EnvironmentRequest(spec=SandboxSpec(**spec_fields), environment_dir=env_dir,
                              digest=hash_tree(env_dir), build_timeout_sec=build_timeout_sec,
                              log_dir=log_dir)


MakeSandbox = Callable[..., Sandbox]


@pytest.fixture
def make_sandbox(backend: SandboxBackend, run: Run[Any], tmp_path: Path,
                 masked_dir: Path) -> Iterator[MakeSandbox]:
    """make_sandbox(env_dir=None, **spec_fields) -> a started sandbox, stopped after the test."""
    made: list[Sandbox] = []
    default_env = write_env(tmp_path / "environment")

    def make(env_dir: Path | None = None, **spec_fields: Any) -> Sandbox:
        spec_fields.setdefault("masked_paths", (masked_dir,))
        request = make_request(env_dir or default_env, tmp_path / "build-logs", **spec_fields)
        sandbox = run(backend.create(request))
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in reversed(made):
        run(sandbox.stop())


@pytest.fixture
def sandbox(make_sandbox: MakeSandbox) -> Sandbox:
    return make_sandbox()


# -- helpers -----------------------------------------------------------------------------


def host_procs(marker: str) -> str:
    """Host processes whose command line contains `marker` ('' when none)."""
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout


def background_sleeper(marker: str) -> str:
    """A shell snippet starting a 300 s sleeper whose argv carries `marker`."""
    return f"sh -c 'sleep 300; :' {marker} >/dev/null 2>&1 &"


def interfaces(proc_net_dev: str) -> set[str]:
    return {line.split(":", 1)[0].strip() for line in proc_net_dev.splitlines() if ":" in line}


def default_gateway(proc_net_route: str) -> str | None:
    for line in proc_net_route.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<I", int(fields[2], 16)))
    return None


@pytest.fixture
def host_server() -> Iterator[socket.socket]:
    """A TCP server on the host's loopback; a completed connection waits in its backlog."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.setblocking(False)
    with socket.create_connection(srv.getsockname(), timeout=5):
        pass
    assert was_reached(srv), "the host server itself does not accept connections"
    yield srv
    srv.close()


def was_reached(srv: socket.socket) -> bool:
    for _ in range(20):
        try:
            conn, _ = srv.accept()
        except BlockingIOError:
            time.sleep(0.01)
            continue
        conn.close()
        return True
    return False


def connect_script(hosts: list[str], port: int) -> str:
    return "".join(f'timeout 3 bash -c "exec 3<>/dev/tcp/{h}/{port}" 2>/dev/null '
                   f"&& echo reached {h}; " for h in hosts) + "true"


@pytest.fixture
def etc_marker() -> Iterator[str]:
    """A unique /etc file name; removed from the host afterwards should a bug leak it there."""
    name = f"sandlot-contract-{secrets.token_hex(4)}"
    yield name
    Path("/etc", name).unlink(missing_ok=True)


# -- exec --------------------------------------------------------------------------------


def test_exec_argv_is_not_interpreted_by_a_shell(sandbox, run):
    r = run(sandbox.exec(["printf", "%s|", "a b", "$GREETING", "*"]))
    assert r.exit_code == 0 and r.ok
    assert r.stdout == "a b|$GREETING|*|"
    assert r.stderr == "" and not r.timed_out and not r.truncated


def test_exec_string_runs_in_bash_with_stdout_stderr_and_exit_code(sandbox, run):
    r = run(sandbox.exec("echo $((40 + 2)); echo oops >&2; [[ -n x ]] && exit 7"))
    assert (r.stdout, r.stderr, r.exit_code) == ("42\n", "oops\n", 7)
    assert not r.ok and not r.timed_out and r.limit_hit is None
    assert r.duration_sec >= 0


def test_exec_sees_dockerfile_env_and_per_call_env(sandbox, run):
    r = run(sandbox.exec('echo "$GREETING|${EXTRA-unset}"'))
    assert r.stdout == "hello from the dockerfile|unset\n"
    r = run(sandbox.exec('echo "$GREETING|$EXTRA"',
                         env={"GREETING": "per call", "EXTRA": "x y"}))
    assert r.stdout == "per call|x y\n"
    r = run(sandbox.exec('echo "$GREETING|${EXTRA-unset}"'))
    assert r.stdout == "hello from the dockerfile|unset\n", "per-call env must not stick"


def test_exec_cwd_defaults_to_workdir_where_copied_files_are(sandbox, run):
    r = run(sandbox.exec("pwd; cat data.txt"))
    assert r.stdout == "/app\n" + DATA
    r = run(sandbox.exec(["pwd"], cwd="/usr/share"))
    assert r.stdout == "/usr/share\n"


def test_exec_runs_as_root_by_default(sandbox, run):
    assert run(sandbox.exec(["id", "-u"])).stdout == "0\n"


def test_exec_as_user_nobody(sandbox, run):
    r = run(sandbox.exec(["id", "-u"], user="nobody"))
    assert r.stdout == "65534\n", r.stderr


def test_a_user_gets_its_uid_gid_groups_and_home_as_docker_exec_gives_them(sandbox, run):
    added = run(ensure_users(sandbox, ["agent", "4321", "nobody:agent"]))
    assert len(added) == 2 and added[1] == "added user user4321 (4321)", added
    assert re.fullmatch(r"added user agent \(\d{4,5}\)", added[0]), added  # from 1000 up
    assert run(ensure_users(sandbox, ["agent", "4321"])) == []  # only once
    r = run(sandbox.exec('echo "$(id -un) $(id -gn) $HOME"; touch "$HOME/x"', user="agent"))
    assert (r.exit_code, r.stdout) == (0, "agent agent /home/agent\n"), r.stderr
    r = run(sandbox.exec(["sh", "-c", 'echo "$(id -u):$(id -g) $HOME"'], user="4321"))
    assert r.stdout == "4321:4321 /home/user4321\n", r.stderr
    r = run(sandbox.exec(["sh", "-c", "id -u; id -gn"], user="nobody:agent"))
    assert r.stdout == "65534\nagent\n", r.stderr
    r = run(sandbox.exec(["sh", "-c", 'echo "$(id -u) $HOME"'], user="777"))
    assert r.stdout == "777 /\n", r.stderr  # a bare uid: no entry, as Docker runs it
    r = run(sandbox.exec(["sh", "-c", "echo $HOME"], user="agent", env={"HOME": "/opt/h"}))
    assert r.stdout == "/opt/h\n"  # a HOME the caller names wins
    r = run(sandbox.exec(["touch", "/etc/agent-was-here"], user="agent"))
    assert r.exit_code != 0  # no root, no capabilities


def test_the_shared_temp_folders_are_writable_by_every_user(sandbox, run):
    # (the tiny test image of the docker backend has no /var/tmp)
    r = run(sandbox.exec('for d in /tmp /var/tmp /dev/shm; do [ ! -d $d ] || '
                         'stat -c "%n %a" $d; done'))
    modes = dict(line.split() for line in r.stdout.splitlines())
    assert set(modes.values()) == {"1777"} and {"/tmp", "/dev/shm"} <= set(modes), modes
    r = run(sandbox.exec(["sh", "-c", 'for d in "$@"; do touch $d/n || exit 1; done', "sh",
                          *modes], user="nobody"))
    assert r.exit_code == 0, r.stderr


def test_exec_passes_stdin(sandbox, run):
    r = run(sandbox.exec(["wc", "-l"], stdin=b"one\ntwo\n"))
    assert r.stdout.strip() == "2"
    r = run(sandbox.exec("read -r line; echo got:$line", stdin=b"hello\n"))
    assert r.stdout == "got:hello\n"


def test_exec_large_stdin_echoed_back_does_not_deadlock(sandbox, run):
    data = os.urandom(1 << 20).hex().encode()  # 2 MB of text

    async def guarded() -> Any:
        # Generous: a deadlock hangs to the timeout however long it is; a busy CI machine
        # needs more than 2 s to push 2 MB through the sandbox and back.
        return await asyncio.wait_for(sandbox.exec(["cat"], stdin=data, timeout_sec=30), 40)

    r = None
    with contextlib.suppress(TimeoutError):
        r = run(guarded())
    if r is None:
        # Kill the stuck command and free its transport while this test's loop is open.
        run(sandbox.stop())
        gc.collect()
        pytest.fail("exec with 2 MB of stdin echoed back hung past its timeout_sec")
    assert r.exit_code == 0 and r.stdout.encode() == data


def test_a_background_process_lives_on_as_in_a_container_until_stop(backend, sandbox, run):
    marker = f"sandlot-bg-{secrets.token_hex(4)}"
    r = run(sandbox.exec(f"{background_sleeper(marker)} echo started", timeout_sec=30))
    assert r.stdout == "started\n" and r.exit_code == 0
    assert r.duration_sec < 5, "exec waited for the background child"
    assert marker in host_procs(marker)
    seen = run(sandbox.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]))
    assert marker in seen.stdout, "a later command sees it, as in one container"
    run(sandbox.stop())
    assert host_procs(marker) == ""


def test_terminate_reaches_the_process_and_kill_ends_one_that_ignores_it(sandbox, run):
    """An agent's process gets SIGTERM itself (it may exit cleanly, as ACP agents do); one
    that ignores it is SIGKILLed by kill(), with what it started. Neither is left running
    in the sandbox, where only the sandbox's end would stop it."""
    async def scenario(marker: str, script: str) -> tuple[int, str]:
        proc = await sandbox.start_process(["sh", "-c", script, marker])
        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"ready\n"
        await proc.terminate()
        try:
            code = await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            await proc.kill()
            code = await asyncio.wait_for(proc.wait(), 10)
        rest = await asyncio.wait_for(proc.stdout.read(), 10)
        return code, rest.decode()

    polite, stubborn = (f"sandlot-term-{secrets.token_hex(4)}" for _ in range(2))
    code, said = run(scenario(polite, "trap 'echo bye; exit 0' TERM; echo ready; "
                                      "while :; do sleep 0.1; done"))
    assert (code, said) == (0, "bye\n")
    code, _ = run(scenario(stubborn, "trap '' TERM; sleep 300 & echo ready; wait"))
    assert code != 0
    seen = run(sandbox.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]))
    assert polite not in seen.stdout and stubborn not in seen.stdout, seen.stdout


def test_killing_every_process_inside_does_not_end_the_sandbox(sandbox, run):
    """`kill -9 -1` (a sloppy cleanup in an agent's command) kills what it can see, as in
    a container, whose PID 1 is out of its reach: the sandbox lives on, so the trial is
    still verified instead of ending as an error."""
    run(sandbox.exec("sleep 300 & kill -9 -1; kill -9 1; kill 1; true", timeout_sec=30))
    r = run(sandbox.exec(["echo", "alive"], timeout_sec=30))
    assert r.ok and r.stdout == "alive\n", r


def test_an_entrypoint_that_exits_later_ends_the_sandbox_with_its_output(
        backend, make_sandbox, run, tmp_path):
    env = tmp_path / "entrypoint-env"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\n"
                                    "ENTRYPOINT sleep 2; echo the service stopped; exit 4\n")
    sandbox = make_sandbox(env)
    assert run(sandbox.exec(["true"], timeout_sec=30)).ok
    time.sleep(3)
    with pytest.raises(ContainerExited, match=r"ENTRYPOINT .*the service stopped"):
        run(sandbox.exec(["true"], timeout_sec=30))


def test_an_entrypoint_that_exits_at_once_fails_the_start_with_its_output(
        make_sandbox, tmp_path):
    env = tmp_path / "entrypoint-env"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\n"
                                    "ENTRYPOINT echo no config found; exit 3\n")
    with pytest.raises(ContainerExited, match=r"ENTRYPOINT .*no config found"):
        make_sandbox(env)


def test_orphans_are_reaped(sandbox, run):
    r = run(sandbox.exec("for i in 1 2 3 4 5; do (sleep 0.1 &); done; "
                         "(sh -c 'sleep 0.1 & sleep 0.2' &); sleep 1; "
                         "cut -d' ' -f3 /proc/[0-9]*/stat | sort | uniq -c", timeout_sec=30))
    assert r.ok and " Z" not in r.stdout, r


def test_a_server_left_running_is_reached_by_later_commands(sandbox, run):
    # Python's server where the sandbox has Python (local), busybox's in the tiny image.
    serve = ("mkdir -p /tmp/www && echo served > /tmp/www/index.html && "
             "if command -v python3 >/dev/null; then "
             "python3 -m http.server 8765 --bind 127.0.0.1 --directory /tmp/www; "
             "else busybox httpd -f -p 127.0.0.1:8765 -h /tmp/www; fi")
    r = run(sandbox.exec(f"({serve}) >/dev/null 2>&1 & echo started", timeout_sec=30))
    assert r.ok and r.duration_sec < 5
    fetch = ("for i in $(seq 100); do if command -v python3 >/dev/null; then "
             "python3 -c \"import urllib.request as u; "
             "print(u.urlopen('http://127.0.0.1:8765/').read().decode())\" 2>/dev/null; "
             "else wget -q -O - http://127.0.0.1:8765/ 2>/dev/null; fi && break; "
             "sleep 0.1; done")
    for network in ("none", "outbound"):
        r = run(sandbox.exec(fetch, network=network, timeout_sec=60))
        assert r.stdout.strip() == "served", (network, r)


def test_output_held_open_by_a_leftover_does_not_hold_the_command(sandbox, run):
    r = run(sandbox.exec("sleep 300 & echo done", timeout_sec=30))
    assert r.ok and r.stdout == "done\n"
    assert r.duration_sec < 5


@pytest.mark.parametrize("user", [None, "65534"], ids=["root", "same-user"])
def test_a_commands_own_mounts_are_out_of_every_other_process_reach(make_sandbox, run,
                                                                     tmp_path, user):
    """The verifier's way of running: what the agent left running can neither see its
    tests (not even through /proc/<pid>/root) nor write its reward, while it sees them;
    also when the agent and the verifier are the same user."""
    sandbox = make_sandbox(mount_points=("/tests", "/logs/verifier"))
    run(sandbox.exec("chmod 1777 /tmp"))  # the tiny test image's /tmp is root's
    forger = ("while :; do echo 1 > /logs/verifier/reward.txt; ls -A /tests > /tmp/seen; "
              "for p in /proc/[0-9]*; do ls -A $p/root/tests >> /tmp/seen; done; "
              "sleep 0.05; done")
    run(sandbox.exec(f"sh -c '{forger}' sandlot-forger >/dev/null 2>&1 &",
                     timeout_sec=30, user=user))
    tests, logs = tmp_path / "tests", tmp_path / "logs"
    tests.mkdir()
    logs.mkdir()
    (tests / "test.sh").write_text(
        "echo 0 > /logs/verifier/reward.txt; sleep 1; cat /logs/verifier/reward.txt; "
        "ls /tests; grep -qs sandlot-forger /proc/[0-9]*/cmdline && echo seen; true\n")
    if user is not None:
        os.chown(logs, int(user), 0)
    r = run(sandbox.exec(["bash", "/tests/test.sh"], timeout_sec=60, user=user,
                         mounts={"/tests": tests, "/logs/verifier": logs}))
    assert r.ok and r.stdout == "0\ntest.sh\nseen\n", r
    assert (logs / "reward.txt").read_text() == "0\n"
    seen = run(sandbox.exec("cat /tmp/seen 2>/dev/null; ls -A /tests"))
    assert "test.sh" not in seen.stdout, "the tests were seen outside their command"
    # The mount points stay: they cannot be removed or swapped for a link elsewhere.
    r = run(sandbox.exec("rm -rf /logs /tests; ln -sfn /etc /logs/verifier 2>&1; "
                         "test -d /logs/verifier -a ! -L /logs/verifier && echo kept"))
    assert "kept" in r.stdout
    r = run(sandbox.exec(["cat", "/logs/verifier/reward.txt"],
                         mounts={"/tests": tests, "/logs/verifier": logs}))
    assert r.stdout == "0\n"
    with pytest.raises(SandboxError, match="mount point"):
        run(sandbox.exec(["true"], mounts={"/etc": tests}))


def test_exec_timeout_kills_the_whole_tree_quickly(sandbox, run):
    marker = f"sandlot-to-{secrets.token_hex(4)}"
    t0 = time.monotonic()
    r = run(sandbox.exec(f"{background_sleeper(marker)} echo partial; sleep 300",
                         timeout_sec=1))
    elapsed = time.monotonic() - t0
    assert r.timed_out and not r.ok
    assert 0.9 <= elapsed < 6
    assert r.stdout == "partial\n", "output before the timeout is kept"
    assert host_procs(marker) == ""
    assert run(sandbox.exec(["true"])).ok, "the sandbox still works after a timeout"


def test_exec_output_over_the_cap_is_truncated(sandbox, run):
    r = run(sandbox.exec("head -c 300000 /dev/zero | tr '\\0' x; "
                         "head -c 300000 /dev/zero | tr '\\0' y >&2; echo done >&2",
                         max_output_bytes=1000, timeout_sec=30))
    assert r.truncated
    assert r.exit_code == 0, "the command is not blocked by the cap"
    assert 0 < len(r.stdout) <= 1000 and set(r.stdout) == {"x"}
    assert 0 < len(r.stderr) <= 1000 and set(r.stderr) == {"y"}
    small = run(sandbox.exec("echo small", max_output_bytes=1000))
    assert small.stdout == "small\n" and not small.truncated


def test_concurrent_execs_in_one_sandbox(sandbox, run):
    async def both() -> list[Any]:
        return list(await asyncio.gather(
            sandbox.exec("sleep 1; echo a"), sandbox.exec("sleep 1; echo b")))

    t0 = time.monotonic()
    a, b = run(both())
    assert (a.stdout, b.stdout) == ("a\n", "b\n")
    assert time.monotonic() - t0 < 1.9, "execs of one sandbox run in parallel"


# -- network -----------------------------------------------------------------------------


def test_network_none_has_only_loopback_and_cannot_reach_host_loopback(sandbox, run,
                                                                       host_server):
    port = host_server.getsockname()[1]
    r = run(sandbox.exec(["cat", "/proc/net/dev"]))
    assert interfaces(r.stdout) == {"lo"}
    r = run(sandbox.exec(connect_script(["127.0.0.1"], port), timeout_sec=20))
    assert "reached" not in r.stdout
    assert not was_reached(host_server)


def test_network_outbound_cannot_reach_host_loopback(sandbox, run, host_server):
    port = host_server.getsockname()[1]
    r = run(sandbox.exec("cat /proc/net/dev; echo ---; cat /proc/net/route",
                         network="outbound", timeout_sec=30))
    dev, route = r.stdout.split("---\n")
    assert interfaces(dev) - {"lo"}, "outbound has a network interface besides loopback"
    hosts = ["127.0.0.1"]
    gateway = default_gateway(route)
    assert gateway is not None, "outbound has a default route"
    hosts.append(gateway)
    r = run(sandbox.exec(connect_script(hosts, port), network="outbound", timeout_sec=30))
    assert "reached" not in r.stdout, r.stdout
    assert not was_reached(host_server)
    r = run(sandbox.exec(["cat", "/proc/net/dev"]))
    assert interfaces(r.stdout) == {"lo"}, "network='none' again after an outbound exec"


@pytest.fixture
def host_wide_server() -> Iterator[socket.socket]:
    """A TCP server on every host address (0.0.0.0), as host services often listen."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("0.0.0.0", 0))
    srv.listen(16)
    srv.setblocking(False)
    yield srv
    srv.close()


def host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True,
                         check=True).stdout
    return [a["local"] for link in json.loads(out) for a in link.get("addr_info", [])
            if not a["local"].startswith("127.")]


@pytest.mark.parametrize("allow_private", [False, True])
def test_network_outbound_reaches_neither_the_host_nor_metadata(make_sandbox, run,
                                                                 host_wide_server,
                                                                 allow_private):
    """`public` means the internet: not a service the host runs on its own addresses (a
    bridge's gateway included), not the cloud metadata address, not private ranges."""
    sandbox = make_sandbox(allow_private_network=allow_private)
    port = host_wide_server.getsockname()[1]
    route = run(sandbox.exec(["cat", "/proc/net/route"], network="outbound")).stdout
    targets = [*host_addresses(), default_gateway(route) or "192.0.2.1"]
    assert targets, "the host has a non-loopback address"
    r = run(sandbox.exec(connect_script(targets, port), network="outbound", timeout_sec=60))
    assert "reached" not in r.stdout, r.stdout
    assert not was_reached(host_wide_server)
    # Refused at once, not left to time out.
    refused = ["169.254.169.254"] + ([] if allow_private else ["10.11.12.13"])
    for address in refused:
        t0 = time.monotonic()
        out = run(sandbox.exec(f'timeout 10 bash -c "exec 3<>/dev/tcp/{address}/80" 2>&1',
                               network="outbound", timeout_sec=30)).stdout
        assert "Connection refused" in out, (address, out)
        assert time.monotonic() - t0 < 5


def test_an_allowlist_reaches_its_addresses_alone(sandbox, run):
    """An allowlist network reaches the addresses it lists and is refused the rest at
    once; the same route with the internet's filter reaches both (so the refusal is the
    allowlist's), and a new allowlist replaces the old one. The addresses live in a
    namespace the test wired to the sandbox's (netns_peer)."""
    netns = sandbox.network_namespace()
    if netns is None:
        pytest.skip("the engine's network namespaces are not visible here")
    both = probe(ALLOWED) + probe(OTHER)
    with peer_namespace(netns):
        out = run(sandbox.exec(both, network=Allowlist((f"{ALLOWED}/32",)),
                               timeout_sec=60)).stdout
        assert f"{ALLOWED} peer-ok" in out, out
        assert f"{OTHER} " in out and "Connection refused" in out.split(OTHER, 1)[1], out
        out = run(sandbox.exec(both, network="outbound", timeout_sec=60)).stdout
        assert f"{ALLOWED} peer-ok" in out and f"{OTHER} peer-ok" in out, out
        out = run(sandbox.exec(both, network=Allowlist((f"{OTHER}/32",)),
                               timeout_sec=60)).stdout
        assert f"{OTHER} peer-ok" in out and f"{ALLOWED} peer-ok" not in out, out


def test_network_none_sysfs_lists_only_loopback(sandbox, run):
    if set(os.listdir("/sys/class/net")) <= {"lo"}:
        pytest.skip("the host has no interface besides lo")
    r = run(sandbox.exec("ls /sys/class/net"))
    # The host's interfaces are hidden (the folder may be empty or list lo alone).
    assert set(r.stdout.split()) <= {"lo"}


# -- files -------------------------------------------------------------------------------


def test_upload_file_and_folder(sandbox, run, tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("one\n")
    run(sandbox.upload(f, "/app/new/dir/one.txt"))
    folder = tmp_path / "tree"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("a\n")
    (folder / "sub" / "b.txt").write_text("b\n")
    run(sandbox.upload(folder, "/srv/tree"))
    r = run(sandbox.exec("cat /app/new/dir/one.txt /srv/tree/a.txt /srv/tree/sub/b.txt"))
    assert r.stdout == "one\na\nb\n", r.stderr


def test_upload_replaces_what_is_there(sandbox, run, tmp_path):
    run(sandbox.exec("mkdir -p /app/dir && echo stale > /app/dir/stale.txt "
                     "&& echo old > /app/file.txt"))
    folder = tmp_path / "dir"
    folder.mkdir()
    (folder / "fresh.txt").write_text("fresh\n")
    run(sandbox.upload(folder, "/app/dir"))
    f = tmp_path / "file.txt"
    f.write_text("new\n")
    run(sandbox.upload(f, "/app/file.txt"))
    r = run(sandbox.exec("ls /app/dir; cat /app/file.txt"))
    assert r.stdout == "fresh.txt\nnew\n"


def test_download_file_and_folder(sandbox, run, tmp_path):
    run(sandbox.exec("mkdir -p /out/sub && echo top > /out/top.txt "
                     "&& echo deep > /out/sub/deep.txt"))
    run(sandbox.download("/out/top.txt", tmp_path / "got" / "top.txt"))
    assert (tmp_path / "got" / "top.txt").read_text() == "top\n"
    run(sandbox.download("/out", tmp_path / "tree"))
    assert (tmp_path / "tree" / "top.txt").read_text() == "top\n"
    assert (tmp_path / "tree" / "sub" / "deep.txt").read_text() == "deep\n"
    run(sandbox.download("/app/data.txt", tmp_path / "data.txt"))
    assert (tmp_path / "data.txt").read_text() == DATA


def test_remove_file_folder_and_missing(sandbox, run):
    run(sandbox.exec("mkdir -p /app/d/e && touch /app/d/e/f /app/g"))
    run(remove_path(sandbox, "/app/d"))
    run(remove_path(sandbox, "/app/g"))
    run(remove_path(sandbox, "/app/never-there"))
    r = run(sandbox.exec("ls -A /app"))
    assert r.stdout == "data.txt\n"


def test_remove_through_a_planted_link_never_touches_host_files(sandbox, run, tmp_path):
    host_dir = tmp_path / "hostdir"
    host_dir.mkdir()
    precious = host_dir / "precious.txt"
    precious.write_text("host data\n")
    run(sandbox.exec(f"ln -s {host_dir} /app/link && rm -rf /logs && ln -s {host_dir} /logs"))
    run(remove_path(sandbox, "/app/link/precious.txt"))
    run(remove_path(sandbox, "/logs/precious.txt"))
    assert precious.read_text() == "host data\n"
    run(remove_path(sandbox, "/app/link"))
    assert precious.exists() and host_dir.is_dir()


def test_mkdir_makes_parents_is_idempotent_and_stays_inside(sandbox, run, tmp_path):
    run(make_dirs(sandbox, "/work/a/b"))
    run(make_dirs(sandbox, "/work/a/b"))
    host_dir = tmp_path / "hostdir"
    host_dir.mkdir()
    run(sandbox.exec(f"ln -s {host_dir} /app/link"))
    try:
        run(make_dirs(sandbox, "/app/link/new"))
    except SandboxError as exc:  # the link points at nothing inside: mkdir -p refuses
        assert "cannot create /app/link/new" in str(exc)
    else:  # the host folder's path exists inside too: made there, in the sandbox's copy
        assert run(sandbox.exec(f"test -d {host_dir}/new")).ok
    assert not (host_dir / "new").exists()
    assert run(sandbox.exec("test -d /work/a/b")).ok


def test_share_folder_shows_a_host_folder_that_the_sandbox_cannot_change(sandbox, run,
                                                                         tmp_path):
    folder = tmp_path / "install"
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "tool").write_text("v1\n")
    run(share_folder(sandbox, folder, "/opt/shared/tool"))
    assert run(sandbox.exec("cat /opt/shared/tool/bin/tool")).stdout == "v1\n"
    run(sandbox.exec("echo planted > /opt/shared/tool/bin/tool; rm -rf /opt/shared/tool/bin"))
    assert (folder / "bin" / "tool").read_text() == "v1\n"
    with pytest.raises(SandboxError, match="not a folder"):
        run(share_folder(sandbox, folder / "bin" / "tool", "/opt/shared/file"))


def test_remove_path_refuses_the_root_folder(sandbox, run):
    for root in ("/", "//", "/.", "/app/..", "///"):
        with pytest.raises(SandboxError, match="root folder"):
            run(remove_path(sandbox, root))
    assert run(sandbox.exec("test -f /app/data.txt")).ok
    run(sandbox.exec("ln -s /app /applink"))
    run(remove_path(sandbox, "/applink/"))  # the link goes, never what it points at
    assert run(sandbox.exec("test -f /app/data.txt && ! test -e /applink")).ok


def test_upload_and_download_through_a_planted_link_stay_inside(sandbox, run, tmp_path,
                                                                etc_marker):
    host_dir = tmp_path / "hostdir"
    host_dir.mkdir()
    (host_dir / "precious.txt").write_text("host data\n")
    marker = etc_marker
    run(sandbox.exec(f"ln -s /etc /app/etc-link && ln -s {host_dir} /app/host-link "
                     "&& echo inside > /etc/motd"))
    src = tmp_path / "upload.txt"
    src.write_text("uploaded\n")
    run(sandbox.upload(src, f"/app/etc-link/{marker}"))
    run(sandbox.upload(src, "/app/host-link/precious.txt"))
    assert not Path("/etc", marker).exists()
    assert (host_dir / "precious.txt").read_text() == "host data\n"
    assert run(sandbox.exec(["cat", f"/etc/{marker}"])).stdout == "uploaded\n"
    run(sandbox.download("/app/etc-link/motd", tmp_path / "motd"))
    assert (tmp_path / "motd").read_text() == "inside\n"
    # The link's target inside the sandbox got the upload; the host's file did not.
    run(sandbox.download("/app/host-link/precious.txt", tmp_path / "via-link.txt"))
    assert (tmp_path / "via-link.txt").read_text() == "uploaded\n"


# -- isolation ---------------------------------------------------------------------------


def test_writes_to_etc_do_not_reach_the_host_or_other_sandboxes(make_sandbox, run,
                                                                etc_marker):
    marker = etc_marker
    before = Path("/etc/debian_version").read_text()
    had_nsswitch = Path("/etc/nsswitch.conf").exists()
    first = make_sandbox()
    # The sandbox's own /etc/debian_version (the host's on the local backend, the image's
    # on a container backend) is what a second sandbox must see unchanged.
    inside = run(first.exec(["cat", "/etc/debian_version"])).stdout
    r = run(first.exec(f"echo inside > /etc/{marker} && echo changed >> /etc/debian_version"
                       " && rm -f /etc/nsswitch.conf && cat /etc/debian_version"))
    assert r.ok and r.stdout.endswith("changed\n"), r.stderr
    assert not Path("/etc", marker).exists()
    assert Path("/etc/debian_version").read_text() == before
    assert Path("/etc/nsswitch.conf").exists() == had_nsswitch
    second = make_sandbox()
    r = run(second.exec(f"test ! -e /etc/{marker} && cat /etc/debian_version"))
    assert r.ok and r.stdout == inside


@pytest.fixture
def host_secrets() -> Iterator[list[Path]]:
    """Files planted in the host's HOME and /tmp, removed afterwards."""
    name = f".sandlot-contract-{secrets.token_hex(4)}"
    paths = [Path.home() / name, Path("/tmp") / name]
    for path in paths:
        path.write_text("host secret\n")
    yield paths
    for path in paths:
        path.unlink(missing_ok=True)


def test_host_home_tmp_and_masked_paths_are_invisible(sandbox, run, masked_dir,
                                                      host_secrets):
    for path in (*host_secrets, masked_dir / "secret.txt"):
        r = run(sandbox.exec(["test", "-e", str(path)]))
        assert r.exit_code == 1, f"{path} is visible inside"
    r = run(sandbox.exec(["ls", "-A", "/tmp", str(Path.home())]))
    assert host_secrets[0].name not in r.stdout
    r = run(sandbox.exec(f"ls -A {masked_dir} 2>/dev/null; true"))
    assert r.stdout == ""


def test_exec_environment_has_nothing_from_the_host(backend, run, tmp_path, monkeypatch):
    secret = secrets.token_hex(8)
    monkeypatch.setenv("SANDLOT_CONTRACT_SECRET", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    sandbox = run(backend.create(make_request(write_env(tmp_path / "env"), tmp_path / "logs")))
    try:
        r = run(sandbox.exec(["env"]))
        r_sh = run(sandbox.exec("env", network="outbound"))
    finally:
        run(sandbox.stop())
    for out in (r.stdout, r_sh.stdout):
        assert secret not in out
        assert "SANDLOT_CONTRACT_SECRET" not in out and "OPENAI_API_KEY" not in out
        assert "GREETING=hello from the dockerfile" in out


# -- limits ------------------------------------------------------------------------------


def test_memory_limit_is_hit_and_named(make_sandbox, run):
    sandbox = make_sandbox(memory_mb=64)
    ok = run(sandbox.exec("head -c 8M /dev/zero | tail > /dev/null", timeout_sec=30))
    assert ok.limit_hit is None and ok.exit_code == 0
    assert isinstance(sandbox, CountsLimitEvents)
    before = sandbox.oom_kills()
    r = run(sandbox.exec("head -c 300M /dev/zero | tail > /dev/null", timeout_sec=30))
    assert r.limit_hit == "memory"
    assert not r.timed_out
    # The whole sandbox's count grows too: a kill the command's own result misses (a
    # worker of a long-lived agent) is still seen by the trial.
    assert before is not None and sandbox.oom_kills() > before


def test_pids_limit_is_hit_and_named(make_sandbox, run):
    sandbox = make_sandbox(pids_max=50)
    # The forks run in a subshell (a shell that cannot fork exits); the outer shell then
    # ends the sleepers, which would otherwise live on, as in a container.
    r = run(sandbox.exec(["sh", "-c", "(i=0; while [ $i -lt 200 ]; do sleep 300 & "
                          "i=$((i+1)); done); trap '' TERM; kill 0; wait"], timeout_sec=30))
    assert r.limit_hit == "pids"
    assert r.duration_sec < 10
    assert run(sandbox.exec(["true"])).limit_hit is None, "the limit is reported once"


# -- lifecycle ---------------------------------------------------------------------------


def test_stop_twice_is_fine_and_exec_after_stop_raises(sandbox, run, tmp_path):
    assert run(sandbox.exec(["true"])).ok
    run(sandbox.stop())
    run(sandbox.stop())
    with pytest.raises(SandboxError):
        run(sandbox.exec(["true"]))
    f = tmp_path / "f.txt"
    f.write_text("x")
    with pytest.raises(SandboxError):
        run(sandbox.upload(f, "/app/f.txt"))


# -- backend -----------------------------------------------------------------------------

RANDOM_DOCKERFILE = """\
FROM debian:bookworm-slim
WORKDIR /app
RUN echo {token} > /app/token && head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > rand
"""


def test_dockerfile_layer_is_built_once_per_digest(make_sandbox, run, tmp_path):
    env = write_env(tmp_path / "env-a", RANDOM_DOCKERFILE.format(token=secrets.token_hex(8)),
                    files={})
    first = make_sandbox(env)
    second = make_sandbox(env)
    a = run(first.exec(["cat", "/app/rand"])).stdout
    b = run(second.exec(["cat", "/app/rand"])).stdout
    assert len(a) == 32 and a == b, "the RUN step ran again for the same digest"
    other = write_env(tmp_path / "env-b", RANDOM_DOCKERFILE.format(token=secrets.token_hex(8)),
                      files={})
    c = run(make_sandbox(other).exec(["cat", "/app/rand"])).stdout
    assert len(c) == 32 and c != a, "a different environment gets its own build"


def test_failing_run_step_is_build_failed_naming_the_line(backend, run, tmp_path):
    env = write_env(tmp_path / "env", "FROM debian:bookworm-slim\nWORKDIR /app\n"
                    f"RUN echo {secrets.token_hex(4)}\nRUN echo boom-output >&2; exit 3\n",
                    files={})
    request = make_request(env, tmp_path / "logs")
    with pytest.raises(TrialError) as info:
        run(backend.create(request))
    assert info.value.kind == ErrorKind.BUILD_FAILED
    assert "line 4" in info.value.message
    logs = "".join(p.read_text(errors="replace") for p in request.log_dir.rglob("*")
                   if p.is_file())
    assert "boom-output" in logs, "the build log keeps the failing step's output"


def test_slow_run_step_is_build_timeout(backend, run, tmp_path):
    marker = f"sandlot-build-{secrets.token_hex(4)}"
    env = write_env(tmp_path / "env", "FROM debian:bookworm-slim\n"
                    f"RUN sh -c 'sleep 300; :' {marker}\n", files={})
    t0 = time.monotonic()
    with pytest.raises(TrialError) as info:
        run(backend.create(make_request(env, tmp_path / "logs", build_timeout_sec=1.5)))
    assert info.value.kind == ErrorKind.BUILD_TIMEOUT
    assert time.monotonic() - t0 < 15
    assert host_procs(marker) == ""


# -- local backend specifics -------------------------------------------------------------


def local_only(backend: SandboxBackend) -> LocalBackend:
    if not isinstance(backend, LocalBackend):
        pytest.skip("checks the local backend's own scratch folders")
    return backend


def procs_mounting(path: Path) -> list[int]:
    """Host processes whose mount namespace has a mount under `path`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if str(path) in (proc / "mountinfo").read_text():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_local_stop_removes_scratch_and_holder(backend, sandbox, run):
    local_only(backend)
    assert isinstance(sandbox, LocalSandbox)
    scratch = sandbox.scratch
    assert scratch.is_dir() and scratch.is_relative_to(backend.scratch_root)
    # The holder ends in `sleep infinity`, so it is found by the mount it keeps, not by argv.
    assert procs_mounting(scratch), "the holder runs while the sandbox is up"
    run(sandbox.stop())
    assert not scratch.exists()
    assert procs_mounting(scratch) == []
    assert host_procs(str(scratch)) == ""


def test_local_stop_after_never_or_failed_start_is_fine(backend, run, tmp_path):
    local_only(backend)
    never = LocalSandbox(SandboxSpec(name="never", workdir="/app"), tmp_path / "never")
    run(never.stop())
    run(never.stop())
    spec = SandboxSpec(name="failed", workdir="/app",
                       layers=(tmp_path / "layer1", tmp_path / "layer2"))
    failed = LocalSandbox(spec, tmp_path / "failed")
    with pytest.raises(SandboxError):
        run(failed.start())
    run(failed.stop())
    run(failed.stop())
    assert not (tmp_path / "failed").exists()
    with pytest.raises(SandboxError):
        run(failed.exec(["true"]))


def test_local_sweep_removes_scratch_of_dead_owners_only(backend, run):
    local = local_only(backend)
    dead_pid = 999_999
    while Path(f"/proc/{dead_pid}").exists():
        dead_pid += 1
    dead = local.scratch_root / f"{dead_pid}-x-abc"
    (dead / "upper" / "etc").mkdir(parents=True)
    (dead / "upper" / "etc" / "f").write_text("left behind")
    alive = local.scratch_root / f"{os.getpid()}-alive-{secrets.token_hex(3)}"
    alive.mkdir(parents=True)
    try:
        assert run(local.sweep()) >= 1
        assert not dead.exists()
        assert alive.is_dir()
    finally:
        shutil.rmtree(alive, ignore_errors=True)


def test_local_storage_mb_is_a_disk_quota(backend, make_sandbox, run, tmp_path, masked_dir):
    local_only(backend)
    box = make_sandbox(storage_mb=32)
    assert isinstance(box, LocalSandbox)
    # The Dockerfile's layer and the masks are there as without a quota.
    assert run(box.exec(["cat", "/app/data.txt"])).stdout == DATA
    assert run(box.exec(["test", "-e", str(masked_dir / "secret.txt")])).exit_code != 0
    fill = run(box.exec("dd if=/dev/zero of=/app/fill bs=1M count=64 status=none",
                        timeout_sec=60))
    assert fill.exit_code != 0 and "No space left" in fill.stderr
    assert fill.limit_hit == "disk"
    size = int(run(box.exec(["stat", "-c", "%s", "/app/fill"])).stdout)
    assert 16 * 2**20 < size <= 32 * 2**20
    # Already full before it started: a later command is not blamed for it.
    assert run(box.exec(["true"])).limit_hit is None
    assert "/app/fill" in {c.path for c in run(box.changes()) or []}
    # sandlot's own copies find the disk full: a typed error, not a raw OSError.
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_bytes(b"x" * 2**20)
    with pytest.raises(SandboxDiskFull, match="storage_mb"):
        run(box.upload(tests, "/tests"))
    image = box.scratch / "disk.img"
    assert image.stat().st_blocks * 512 < 64 * 2**20  # sparse: what was written, no more
    run(box.stop())
    assert not box.scratch.exists()
    attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(image) not in attached, attached


#: Writes 24 MB through every descriptor of another process that names a file (not a
#: pipe, a device or a socket), as an agent, or code the verifier runs, could.
WRITE_THROUGH_OTHERS_FDS = r"""
for fd in /proc/[0-9]*/fd/[0-9]*; do
    case "$fd" in /proc/$$/*|/proc/self/*) continue;; esac
    target=$(readlink "$fd" 2>/dev/null) || continue
    case "$target" in /dev/*|pipe:*|socket:*|anon_inode:*|pid:*|"") continue;; esac
    echo "$fd -> $target"
    dd if=/dev/zero of="$fd" bs=1M count=24 conv=notrunc oflag=append status=none || true
done
"""


def test_local_what_other_processes_hold_open_cannot_grow_the_hosts_disk(
        backend, make_sandbox, run, tmp_path):
    """The container's PID 1 and bwrap keep descriptors of files (their output, bwrap's
    status): neither the agent nor the verifier writes past the sandbox's disk through
    them (they are on a small tmpfs of the holder's, never on the host's disk)."""
    local_only(backend)
    box = make_sandbox(storage_mb=32, mount_points=("/tests",))
    assert isinstance(box, LocalSandbox)
    tests = tmp_path / "tests"
    tests.mkdir()
    for mounts in (None, {"/tests": tests}):
        run(box.exec(WRITE_THROUGH_OTHERS_FDS, mounts=mounts, timeout_sec=120))
    used = subprocess.run(["du", "-s", "--block-size=1M", "--one-file-system",
                           str(box.scratch)], capture_output=True, text=True)
    assert int(used.stdout.split()[0]) < 16, used.stdout


def test_orphans_of_a_command_with_mounts_are_reaped(make_sandbox, run, tmp_path):
    """A verifier's command runs apart from the container (see `exec`'s mounts); what it
    leaves behind is adopted there and must be reaped too, or the zombies would count
    against the trial's pids limit."""
    sandbox = make_sandbox(mount_points=("/tests",))
    tests = tmp_path / "tests"
    tests.mkdir()
    left = run(sandbox.exec("for i in 1 2 3 4 5; do (sleep 0.1 &); done; "
                            "(sh -c 'sleep 0.1 & sleep 0.2' &); echo left",
                            mounts={"/tests": tests}, timeout_sec=30))
    assert left.ok and left.stdout == "left\n", left
    time.sleep(1)
    r = run(sandbox.exec("cut -d' ' -f3 /proc/[0-9]*/stat | sort | uniq -c",
                         mounts={"/tests": tests}, timeout_sec=30))
    assert r.ok and " Z" not in r.stdout, r
