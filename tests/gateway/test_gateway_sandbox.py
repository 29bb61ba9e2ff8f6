"""From inside a real local sandbox: the trial's gateway port is the only thing reachable."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
from typing import Any

import pytest

from sandlot.sandbox.base import SandboxSpec
from sandlot.sandbox.local import LocalSandbox

from .gateway_support import records, running_gateway

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bwrap") is None,
                       reason="the local sandbox needs root and bubblewrap"),
]

#: Runs inside the sandbox with the system python (no sandlot, no venv).
PROBE = r"""
import json, socket, sys, urllib.error, urllib.request
port, key, others = int(sys.argv[1]), sys.argv[2], [int(p) for p in sys.argv[3].split(",")]

def call(path, key, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return [r.status, json.load(r)]
    except urllib.error.HTTPError as e:
        return [e.code, None]
    except OSError as e:
        return [f"{type(e).__name__}: {e}", None]

def connect(host, p):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, p))
        return "connected"
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        s.close()

out = {"others": {str(p): connect("127.0.0.1", p) for p in others},
       "internet": connect("1.1.1.1", 53)}
if key:
    out["models"] = call("/v1/models", key)
    out["bad_key"] = call("/v1/models", "sk-sandlot-" + "0" * 48)[0]
    out["chat"] = call("/v1/chat/completions", key, {
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {
            "type": "object", "properties": {"command": {"type": "string"}}}}}]})
print(json.dumps(out))
"""


async def probe(sandbox: LocalSandbox, port: int, key: str, others: list[int]) -> dict[str, Any]:
    result = await sandbox.exec(
        ["python3", "-c", PROBE, str(port), key, ",".join(map(str, others))],
        timeout_sec=60, network="loopback")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def nobody_connected(server: socket.socket) -> bool:
    server.setblocking(False)
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def test_sandbox_reaches_only_its_gateway_port(runner, tmp_path):
    host_server = socket.socket()
    host_server.bind(("127.0.0.1", 0))
    host_server.listen(8)
    host_port = host_server.getsockname()[1]

    async def body() -> None:
        spec = SandboxSpec(name=f"gw-net-{secrets.token_hex(4)}", workdir="/app")
        sandbox = LocalSandbox(spec, tmp_path / "scratch")
        await sandbox.start()
        try:
            async with running_gateway() as gw:
                session = await gw.open_trial("t", "task", tmp_path / "traj",
                                              netns_path=sandbox.network_namespace())
                assert session.sandbox_port
                assert gw.host_port is not None
                seen = await probe(sandbox, session.sandbox_port, session.key,
                                   [gw.host_port, host_port])
                status, models = seen["models"]
                assert status == 200, seen
                assert "scripted/gw-tools" in {m["id"] for m in models["data"]}
                assert seen["bad_key"] == 401
                status, chat = seen["chat"]
                assert status == 200 and chat["choices"][0]["finish_reason"] == "tool_calls"
                assert chat["usage"]["prompt_tokens"] == 1200
                (rec,) = records(session)
                assert rec["trial"] == "t" and rec["status"] == 200
                # Nothing else: not the gateway's host listener, not a host service, no internet.
                assert seen["others"][str(gw.host_port)].startswith("ConnectionRefusedError")
                assert seen["others"][str(host_port)].startswith("ConnectionRefusedError")
                assert seen["internet"] != "connected"
                assert "unreachable" in seen["internet"].lower(), seen["internet"]
                # Closing the trial closes its port inside the sandbox.
                port = session.sandbox_port
                await gw.close_trial(session)
                after = await probe(sandbox, port, "", [port])
                assert after["others"][str(port)].startswith("ConnectionRefusedError"), after
        finally:
            await sandbox.stop()

    try:
        runner.run(body())
        assert nobody_connected(host_server)
    finally:
        host_server.close()
    assert not (tmp_path / "scratch").exists(), "the sandbox left its scratch behind"


def test_each_sandbox_reaches_its_own_trial_port_only(runner, tmp_path):
    async def body() -> None:
        boxes = [LocalSandbox(SandboxSpec(name=f"gw-two-{i}-{secrets.token_hex(4)}",
                                          workdir="/app"), tmp_path / f"scratch{i}")
                 for i in range(2)]
        try:
            for box in boxes:
                await box.start()
            async with running_gateway() as gw:
                a, b = [await gw.open_trial(f"t{i}", "task", tmp_path / f"traj{i}",
                                            netns_path=box.network_namespace())
                        for i, box in enumerate(boxes)]
                for box, mine, other in ((boxes[0], a, b), (boxes[1], b, a)):
                    seen = await probe(box, mine.sandbox_port, mine.key, [other.sandbox_port])
                    assert seen["models"][0] == seen["chat"][0] == 200
                    if other.sandbox_port != mine.sandbox_port:
                        assert seen["others"][str(other.sandbox_port)].startswith(
                            "ConnectionRefusedError"), seen
                # Each probe's chat call landed in its own trial's trajectory.
                assert [r["trial"] for r in records(a)] == ["t0"]
                assert [r["trial"] for r in records(b)] == ["t1"]
                # A live key of another trial is refused on this sandbox's own port.
                stolen = await probe(boxes[0], a.sandbox_port, b.key, [a.sandbox_port])
                assert stolen["models"][0] == stolen["chat"][0] == 401, stolen
                assert [r["trial"] for r in records(b)] == ["t1"]  # nothing spent on b
        finally:
            for box in boxes:
                await box.stop()

    runner.run(body())
