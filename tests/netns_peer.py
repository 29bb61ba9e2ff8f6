"""A peer network namespace the test makes, wired to a sandbox's own, so that network
tests reach real addresses without any traffic reaching the host's network (see
../shared/docs/machine.md: addresses only inside namespaces the test made).

    sandbox netns  192.0.2.1 --veth-- 192.0.2.2  peer netns (198.51.100.10 and .11 on lo)
                   198.51.100.0/24 via 192.0.2.2

The peer answers `peer-ok` on PEER_PORT at both addresses. The sandbox's route to
198.51.100.0/24 goes through a gateway, so the egress filter does not count it as the
sandbox's own subnet: whether .10 or .11 is reached is the filter's decision alone.
Everything dies with the peer's processes (the veth with its namespace).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

PEER_PORT = 8123
ALLOWED, OTHER = "198.51.100.10", "198.51.100.11"

SERVER = f"""
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PEER_PORT}))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"peer-ok\\n")
    c.close()
"""


@dataclass(frozen=True)
class Peer:
    pid: int


def _netns(path: str) -> str:
    try:
        return os.readlink(path)
    except PermissionError:  # init's, in a container: not ours to wire either way
        return "unreadable"


def _ip(netns: str, *args: str) -> None:
    subprocess.run(["nsenter", f"--net={netns}", "ip", *args], check=True, timeout=20,
                   capture_output=True)


@contextmanager
def peer_namespace(sandbox_netns: str) -> Iterator[Peer]:
    """Wire a new peer namespace to `sandbox_netns` (a sandbox's, never the host's)."""
    if _netns(sandbox_netns) in {_netns("/proc/self/ns/net"), _netns("/proc/1/ns/net")}:
        raise AssertionError(f"{sandbox_netns} is the host's network namespace")
    holder = subprocess.Popen(["unshare", "--net", "sleep", "600"], start_new_session=True)
    server: subprocess.Popen[str] | None = None
    try:
        peer = f"/proc/{holder.pid}/ns/net"
        deadline = time.monotonic() + 10
        while _netns(peer) == _netns("/proc/self/ns/net"):
            if time.monotonic() > deadline:
                raise AssertionError("the peer namespace was not made")
            time.sleep(0.01)
        inside, outside = f"sl{secrets.token_hex(3)}", f"sp{secrets.token_hex(3)}"
        _ip(sandbox_netns, "link", "add", inside, "type", "veth", "peer", "name", outside,
            "netns", str(holder.pid))
        _ip(sandbox_netns, "addr", "add", "192.0.2.1/32", "dev", inside)
        _ip(sandbox_netns, "link", "set", inside, "up")
        _ip(sandbox_netns, "route", "add", "192.0.2.2/32", "dev", inside)
        _ip(sandbox_netns, "route", "add", "198.51.100.0/24", "via", "192.0.2.2")
        _ip(peer, "link", "set", "lo", "up")
        for address in (ALLOWED, OTHER):
            _ip(peer, "addr", "add", f"{address}/32", "dev", "lo")
        _ip(peer, "addr", "add", "192.0.2.2/32", "dev", outside)
        _ip(peer, "link", "set", outside, "up")
        _ip(peer, "route", "add", "192.0.2.1/32", "dev", outside)
        server = subprocess.Popen(["nsenter", f"--net={peer}", sys.executable, "-c", SERVER],
                                  stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield Peer(holder.pid)
    finally:
        for proc in (server, holder):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=20)


def probe(address: str) -> str:
    """A shell line printing `<address> peer-ok`, or why it was not reached."""
    return (f'echo "{address} $(timeout 5 bash -c \'exec 3<>/dev/tcp/{address}/{PEER_PORT} '
            f'&& head -c 7 <&3\' 2>&1 | tail -1)"; ')
