"""Talking to a Docker Engine API (Docker, or Podman's Docker-compatible service).

The `docker` SDK does the plain requests (containers, networks, images, archives), in a
thread pool of its own so a slow engine never blocks the event loop. The two streaming
endpoints, exec and build, go over a raw connection here: an exec's stdio is a hijacked,
multiplexed stream that asyncio reads and writes directly, and a build is a stream of
JSON lines that a timeout can cut.

The backend also needs the engine on this host (as Docker and rootful Podman are on a
Linux server): the gateway listens inside a container's network namespace
(/proc/<pid>/ns/net), and a command's whole process tree is found and killed through /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlparse

from sandlot.errors import SandboxError
from sandlot.sandbox.cgroups import read_int_field

T = TypeVar("T")

#: Labels on everything sandlot creates in the engine.
OWNER_LABEL = "sandlot.owner"
ROLE_LABEL = "sandlot.role"
TRIAL_LABEL = "sandlot.trial"
KEY_LABEL = "sandlot.key"
#: The environment variable that marks every process of one exec (and one build).
EXEC_MARK = "SANDLOT_EXEC_ID"
STREAM_LIMIT = 64 * 1024 * 1024
START_HINT = ("start one: Podman (as root) `podman system service --time=0 "
              "unix:///run/podman/podman.sock &` then `export DOCKER_HOST="
              "unix:///run/podman/podman.sock`; or start the Docker daemon")


def engine_candidates() -> list[str]:
    """Where an engine may listen, in the order tried: DOCKER_HOST, Docker's, Podman's."""
    out: list[str] = []
    if os.environ.get("DOCKER_HOST"):
        out.append(os.environ["DOCKER_HOST"])
    out.append("unix:///var/run/docker.sock")
    out.append("unix:///run/podman/podman.sock")
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    out.append(f"unix://{runtime_dir}/podman/podman.sock")
    return list(dict.fromkeys(out))


# -- the owner: which sandlot process made a resource ----------------------------------------


def _start_ticks(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner_id(pid: int | None = None) -> str:
    """`<host>:<pid>:<start time>` of a sandlot process; outlives pid reuse."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or 0}"


def owner_dead(owner: str) -> bool:
    """True when `owner` ran on this host and that process is gone (never for other hosts)."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid, ticks = parts
    if host != socket.gethostname():
        return False
    return _start_ticks(int(pid)) != ticks


# -- /proc: finding and killing a command's processes ---------------------------------------


def _environ_has(pid: int, mark: bytes) -> bool:
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def marked_pids(mark: str, pidns: str | None = None) -> set[int]:
    """Host pids whose environment holds the entry `mark` (KEY=VALUE), and all their
    descendants (a child that cleared its environment is still found through its parent).
    With `pidns` (a /proc/<pid>/ns/pid link), only processes in that PID namespace."""
    want = mark.encode()
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        if pidns is not None:
            try:
                if os.readlink(f"/proc/{entry.name}/ns/pid") != pidns:
                    continue
            except OSError:
                continue
        if _environ_has(int(entry.name), want):
            found.add(int(entry.name))
    if found:
        children = _children_map()
        stack = list(found)
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in found:
                    found.add(child)
                    stack.append(child)
    return found


def kill_marked(mark: str, pidns: str | None = None, rounds: int = 50) -> int:
    """SIGKILL every process of one exec until none is left; returns how many were hit."""
    hit = 0
    for _ in range(rounds):
        pids = marked_pids(mark, pidns)
        pids.discard(os.getpid())
        if not pids:
            return hit
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                hit += 1
        time.sleep(0.01)
    return hit


# -- cgroup counters: was a limit hit? ------------------------------------------------------


@dataclass
class CgroupCounters:
    """A container's OOM-kill and fork-refusal counters (cgroup v1 or v2), read on the host."""

    files: list[tuple[Path, str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, pid: int) -> CgroupCounters:
        counters = cls()
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            return counters
        root = Path("/sys/fs/cgroup")
        for line in lines:
            _, names, path = line.split(":", 2)
            rel = path.lstrip("/")
            if "memory" in names.split(","):
                counters.files.append((root / "memory" / rel / "memory.oom_control",
                                       "oom_kill", "memory"))
            if "pids" in names.split(","):
                counters.files.append((root / "pids" / rel / "pids.events", "max", "pids"))
            if names == "" and (root / rel / "cgroup.controllers").exists():
                counters.files.append((root / rel / "memory.events", "oom_kill", "memory"))
                counters.files.append((root / rel / "pids.events", "max", "pids"))
        counters.files = [f for f in counters.files if f[0].exists()]
        return counters

    def read(self) -> tuple[int, int]:
        oom = sum(read_int_field(p, k) for p, k, kind in self.files if kind == "memory")
        pids = sum(read_int_field(p, k) for p, k, kind in self.files if kind == "pids")
        return oom, pids


def limit_between(before: tuple[int, int], after: tuple[int, int]) -> str | None:
    if after[0] > before[0]:
        return "memory"
    if after[1] > before[1]:
        return "pids"
    return None


# -- the engine ------------------------------------------------------------------------------


class _Demux:
    """Splits a hijacked exec stream (8-byte frame headers) into stdout and stderr readers."""

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self.stdout = asyncio.StreamReader(limit=limit)
        self.stderr = asyncio.StreamReader(limit=limit)
        self._reader = reader
        self.task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        try:
            while True:
                header = await self._reader.readexactly(8)
                kind, size = struct.unpack(">BxxxL", header)
                data = await self._reader.readexactly(size) if size else b""
                (self.stderr if kind == 2 else self.stdout).feed_data(data)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.stdout.feed_eof()
            self.stderr.feed_eof()


class StdinWriter:
    """A process's stdin over the hijacked stream: `close` half-closes (EOF), nothing more."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._closed = False

    def write(self, data: bytes) -> None:
        if self._closed:
            raise ConnectionResetError("stdin is closed")
        self._writer.write(data)

    async def drain(self) -> None:
        await self._writer.drain()

    def is_closing(self) -> bool:
        return self._closed or self._writer.is_closing()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError, RuntimeError):
                if self._writer.can_write_eof():
                    self._writer.write_eof()

    async def wait_closed(self) -> None:
        return None


@dataclass
class ExecStream:
    exec_id: str
    stdin: StdinWriter
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader
    pump: asyncio.Future[None]
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


class Engine:
    """One connection to an engine: the SDK client and the raw streaming endpoints."""

    def __init__(self, client: Any, base_url: str) -> None:
        self.client = client
        self.api = client.api
        self.base_url = base_url
        self.version = str(self.api.api_version)
        info = self.api.version()
        components = " ".join(str(c.get("Name", "")) for c in info.get("Components") or [])
        self.is_podman = "podman" in components.lower()
        self.name = "Podman" if self.is_podman else "Docker"
        #: `SecurityOptions` of /info: the seccomp profile containers get by default.
        self.security_options = [str(o) for o in
                                 self.api.info().get("SecurityOptions") or []]
        self._pool = ThreadPoolExecutor(max_workers=48, thread_name_prefix="sandlot-docker")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one blocking SDK call in the engine's own thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    # -- raw connections -----------------------------------------------------------------

    async def _open(self, limit: int = STREAM_LIMIT) -> tuple[asyncio.StreamReader,
                                                               asyncio.StreamWriter]:
        url = urlparse(self.base_url)
        if url.scheme in ("unix", "http+unix"):
            return await asyncio.open_unix_connection(url.path, limit=limit)
        if url.scheme in ("tcp", "http"):
            return await asyncio.open_connection(url.hostname, url.port or 2375, limit=limit)
        raise SandboxError(f"the docker backend cannot stream over {self.base_url}: use a "
                           "unix socket or plain tcp:// engine")

    def _path(self, path: str, params: dict[str, Any] | None = None) -> str:
        query = f"?{urlencode(params, doseq=True)}" if params else ""
        return f"/v{self.version}{path}{query}"

    async def exec_stream(self, exec_id: str, limit: int = STREAM_LIMIT) -> ExecStream:
        """Start a created exec and return its stdio (the connection is hijacked)."""
        reader, writer = await self._open(limit)
        body = b'{"Detach":false,"Tty":false}'
        writer.write((f"POST {self._path(f'/exec/{quote(exec_id)}/start')} HTTP/1.1\r\n"
                      "Host: docker\r\nContent-Type: application/json\r\n"
                      "Connection: Upgrade\r\nUpgrade: tcp\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        await writer.drain()
        status = await reader.readline()
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        code = status.split(b" ")[1] if status.count(b" ") else b"?"
        if code not in (b"101", b"200"):
            text = b""
            with contextlib.suppress(Exception):
                text = await asyncio.wait_for(reader.read(4096), 2)
            writer.close()
            raise SandboxError(f"exec start failed: {status.decode(errors='replace').strip()} "
                               f"{text.decode(errors='replace').strip()}")
        if headers.get("transfer-encoding") == "chunked":  # not hijacked: undo the framing
            reader = _dechunk(reader, limit)
        demux = _Demux(reader, limit)
        return ExecStream(exec_id, StdinWriter(writer), demux.stdout, demux.stderr,
                          demux.task, writer)

    async def stream_json(self, method: str, path: str, params: dict[str, Any],
                          body: Any = None, headers: dict[str, str] | None = None,
                          ) -> AsyncIterator[dict[str, Any]]:
        """One streaming request (a build): yields each JSON object of the response."""
        reader, writer = await self._open()
        try:
            head = {"Host": "docker", "Transfer-Encoding": "chunked", **(headers or {})}
            writer.write((f"{method} {self._path(path, params)} HTTP/1.1\r\n" + "".join(
                f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n").encode())
            while chunk := await self.call(body.read, 1 << 20):
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            status = await reader.readline()
            chunked = False
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                    chunked = True
            stream = _dechunk(reader, STREAM_LIMIT) if chunked else reader
            if b" 200 " not in status + b" ":
                text = (await stream.read(8192)).decode(errors="replace")
                raise SandboxError(f"{path}: {status.decode(errors='replace').strip()}: "
                                   f"{_message(text)}")
            decoder = json.JSONDecoder()
            buf = ""
            while True:
                data = await stream.read(65536)
                if not data:
                    break
                buf += data.decode(errors="replace")
                while True:
                    buf = buf.lstrip()
                    if not buf:
                        break
                    try:
                        obj, end = decoder.raw_decode(buf)
                    except json.JSONDecodeError:
                        break
                    buf = buf[end:]
                    if isinstance(obj, dict):
                        yield obj
        finally:
            writer.close()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(Exception):
            self.client.close()


def _message(text: str) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(text).get("message", text)).strip()
    return text.strip()


def _dechunk(reader: asyncio.StreamReader, limit: int) -> asyncio.StreamReader:
    """A reader of the body of a chunked HTTP response."""
    out = asyncio.StreamReader(limit=limit)

    async def pump() -> None:
        try:
            while True:
                size_line = await reader.readline()
                if not size_line:
                    break
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                out.feed_data(await reader.readexactly(size))
                await reader.readline()
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError):
            pass
        finally:
            out.feed_eof()

    out._sandlot_pump = asyncio.ensure_future(pump())  # type: ignore[attr-defined]
    return out


_ENGINES: dict[str, Engine] = {}


def connect_engine(base_url: str | None = None) -> Engine:
    """The engine at `base_url`, else the first reachable candidate (DOCKER_HOST, Docker's
    socket, Podman's sockets). Raises: SandboxError naming everything tried."""
    import docker

    candidates = [base_url] if base_url else engine_candidates()
    tried: list[str] = []
    for url in candidates:
        if url in _ENGINES:
            return _ENGINES[url]
        parsed = urlparse(url)
        if parsed.scheme == "unix" and not Path(parsed.path).exists():
            tried.append(f"{url} (no such socket)")
            continue
        try:
            client = docker.DockerClient(base_url=url, version="auto", timeout=600,
                                         max_pool_size=64)
            client.ping()
            engine = Engine(client, url)
        except Exception as exc:
            tried.append(f"{url} ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        _ENGINES[url] = engine
        return engine
    source = " (from DOCKER_HOST)" if os.environ.get("DOCKER_HOST") else ""
    raise SandboxError(f"no container engine is reachable{source}; tried: "
                       + "; ".join(tried) + f". {START_HINT}")


def proc_visible(pid: int) -> bool:
    """Is a container's init process visible in this host's /proc (engine on this host)?"""
    return pid > 0 and Path(f"/proc/{pid}/ns/net").exists()


def wait_pid_exit(pid: int) -> asyncio.Future[None]:
    """A future done when host process `pid` exits (pidfd), already done if it is gone."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        done.set_result(None)
        return done

    def ready() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, ready)

    def cancelled(fut: asyncio.Future[None]) -> None:
        if fut.cancelled():
            with contextlib.suppress(Exception):
                loop.remove_reader(fd)
                os.close(fd)

    done.add_done_callback(cancelled)
    return done
