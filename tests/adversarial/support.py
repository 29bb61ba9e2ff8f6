"""Helpers shared by the adversarial tests: the CLI as a process, result files, host-side
listeners that count who reached them, process and secret scans.

Attack code never runs here: it lives in task instructions (run by ShellAgent inside the
sandbox) and in scripted models' `run` steps. This module only watches from the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, files_containing, sandlot_cmd, write_task

__all__ = ["REPO", "files_containing", "write_task"]

SHELL_AGENT = "sandlot_test_agents:ShellAgent"
KEY_AGENT = "adversarial.key_agent:KeyHoldingAgent"
SCRIPTS = Path(__file__).resolve().parent / "scripts"

needs_root_sandbox = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None,
    reason="the local sandbox needs root and bubblewrap")


def backend_dockerfile(sandbox: str) -> str | None:
    """A task's Dockerfile for a test run on each backend: the local backend's default
    (this machine's root), or a minimal Debian image built locally for the docker
    backend. Skips the test where the backend cannot run."""
    if sandbox == "local":
        if os.geteuid() != 0 or shutil.which("bwrap") is None:
            pytest.skip("the local sandbox needs root and bubblewrap")
        return None
    sandbox_tests = str(Path(__file__).resolve().parents[1] / "sandbox")
    if sandbox_tests not in sys.path:
        sys.path.insert(0, sandbox_tests)
    from docker_support import debian_image, engine_or_skip

    return f"FROM {debian_image(engine_or_skip())}\nWORKDIR /app\n"


def cli_env(cache_dir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200",
           "PYTHONPATH": str(REPO / "tests")}
    env.update(extra or {})
    return env


def run_sandlot(cache_dir: Path, *args: str, env: dict[str, str] | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess (sandlot is killed with the test if it times out)."""
    return subprocess.run(sandlot_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env=cli_env(cache_dir, env), cwd=REPO)


def popen_sandlot(cache_dir: Path, *args: str, env: dict[str, str] | None = None,
                  ) -> subprocess.Popen[bytes]:
    return subprocess.Popen(sandlot_cmd(*args), env=cli_env(cache_dir, env), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def results(job: Path) -> dict[str, dict[str, Any]]:
    return {p.parent.name: load(p) for p in job.glob("*/result.json")}


def kind(result: dict[str, Any]) -> str | None:
    return result["error"]["kind"] if result["error"] else None


def probe(path: Path) -> dict[str, str]:
    """`name=value` lines a probe wrote (later lines win)."""
    out: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            name, sep, value = line.partition("=")
            if sep:
                out[name.strip()] = value.strip()
    return out


def pgrep(pattern: str) -> list[int]:
    """Pids whose command line contains `pattern` (this process and pgrep left out)."""
    proc = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
    return [int(p) for p in proc.stdout.split() if int(p) != os.getpid()]


_PR_SET_CHILD_SUBREAPER = 36


@contextlib.contextmanager
def adopting_orphans() -> Iterator[set[int]]:
    """Make this process the subreaper of everything it starts, for the block's duration.

    When sandlot is SIGKILLed, whatever it started and that outlived it is reparented to us
    instead of init, so `orphans()` finds it whatever its command line has become (a holder
    that exec'ed `sleep infinity` no longer names any path). Yields the children we already
    had, which are not orphans.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    before = set(_children())
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        yield before
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        orphans(before)  # reap what died in the meantime


def _children() -> dict[int, str]:
    """This process's children and their state letter."""
    me = os.getpid()
    out: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == me:
            out[int(stat.parent.name)] = fields[0]
    return out


def orphans(ours: set[int]) -> list[str]:
    """Living adopted processes ("pid state command line"); dead ones are reaped."""
    living = []
    for pid, state in _children().items():
        if pid in ours:
            continue
        if state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        living.append(f"{pid} {state} {cmd.decode(errors='replace').strip()}")
    return living


def describe(pid: int) -> str:
    """pid, state, kernel wait channel, pending signals and command line, for a report."""
    base = Path(f"/proc/{pid}")
    try:
        status = dict(line.split(":\t", 1) for line in (base / "status").read_text()
                      .splitlines() if ":\t" in line)
        wchan = (base / "wchan").read_text()
        cmd = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"{pid} gone"
    return (f"{pid} {status.get('State', '?').strip()} wchan={wchan} "
            f"pending={status.get('ShdPnd', '?').strip()}/{status.get('SigPnd', '?').strip()} "
            f"{cmd[:200]}")


def dying(pid: int) -> bool:
    """Gone, a zombie, or SIGKILLed and not yet out of the kernel (a process blocked in an
    uninterruptible call, such as creating a network namespace while the kernel tears
    others down, dies when that call returns: killed, just not finished)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    if fields.get("State", "").startswith(("Z", "X")):
        return True
    pending = int(fields.get("ShdPnd", "0"), 16) | int(fields.get("SigPnd", "0"), 16)
    return bool(pending & (1 << (9 - 1)))  # SIGKILL is signal 9


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0,
               interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def host_ipv4() -> str | None:
    """The host's own non-loopback address (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


class HostListener:
    """A TCP (or unix) listener on the host that counts every connection it accepts."""

    def __init__(self, family: int = socket.AF_INET, address: Any = ("127.0.0.1", 0)) -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        if family != socket.AF_UNIX:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address)
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.address = self.sock.getsockname()
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self.address[1])

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.hits += 1
            with contextlib.suppress(OSError):
                conn.sendall(b"host-listener\n")
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@contextlib.contextmanager
def opt_dir() -> Iterator[Path]:
    """A folder under /opt: a system folder the sandbox does *not* hide by itself, so a
    tasks or jobs folder placed there is hidden only by sandlot's explicit masks."""
    path = Path(tempfile.mkdtemp(prefix=f"sandlot-adversarial-{os.getpid()}-", dir="/opt"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


#: A fast TCP connect scan (python3 of the sandbox's own system), used *inside* sandboxes
#: only: `python3 /app/scan.py HOST [first last]` prints `open=<ports>`. A self-connect
#: (source port == destination port, a TCP quirk on loopback) is not an open port.
SCAN_PY = r'''
import errno, selectors, socket, sys, time
host = sys.argv[1]
first, last = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (1, 65535)
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
found = []
ports = list(range(first, last + 1))
for i in range(0, len(ports), 3000):
    sel = selectors.DefaultSelector()
    for p in ports[i:i + 3000]:
        s = socket.socket(fam)
        s.setblocking(False)
        err = s.connect_ex((host, p))
        if err in (errno.EINPROGRESS, errno.EAGAIN, 0):
            sel.register(s, selectors.EVENT_WRITE, p)
        else:
            s.close()
    deadline = time.monotonic() + 2
    while sel.get_map() and (left := deadline - time.monotonic()) > 0:
        for key, _ in sel.select(left):
            s = key.fileobj
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                try:
                    if s.getsockname()[1] != s.getpeername()[1]:
                        found.append(key.data)
                except OSError:
                    pass
            sel.unregister(s)
            s.close()
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()
print("open=" + ",".join(map(str, sorted(found))))
'''


def heredoc(path: str, content: str, marker: str = "SANDLOT_ADV_EOF") -> str:
    """Shell text (for an instruction run inside the sandbox) that writes `content`."""
    assert marker not in content
    return f"cat > {path} <<'{marker}'\n{content.strip()}\n{marker}\n"
