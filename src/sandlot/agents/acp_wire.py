"""The ACP wire across the sandbox boundary: JSON-RPC lines on an agent process's stdio.

`ProcessTransport` is an `acp` SDK Transport (message level): the SDK's connection does
the JSON-RPC (ids, routing, typed requests) while this class owns what is sandlot's: the
bytes go over a `SandboxProcess`'s stdin/stdout (the agent runs inside the sandbox, the
client side runs here), every message in both directions is appended to the trial's
`trajectory/acp_trajectory.jsonl` as it passes, session/update notifications feed the
session counters before the SDK sees them, and the agent's stderr is kept (a tail in
memory for error messages, the whole of it, capped, in agent/acp_stderr.log).

A line the SDK could not parse, or a session/update its schema does not know (a newer
agent), is recorded and counted here instead of reaching the SDK, which would only log
it to the root logger (and so to the user's terminal).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from acp.schema import SessionNotification
from pydantic import ValidationError

from sandlot.sandbox.base import SandboxProcess

TRAJECTORY_SCHEMA_VERSION = 1
STDERR_TAIL_BYTES = 16 * 1024
STDERR_LOG_MAX_BYTES = 8 * 1024 * 1024
#: A write the agent does not read within this long means it stopped reading its stdin.
WRITE_TIMEOUT_SEC = 30.0
#: One line (one JSON-RPC message) from the agent may be this big; asyncio's 64 KiB default
#: is too small for agents that put whole files or diffs in one message.
STREAM_LIMIT_BYTES = 64 * 1024 * 1024


class Trajectory:
    """trajectory/acp_trajectory.jsonl: a header line, then one line per message or event.

    Lines: {"type": "header", "schema_version", ...}, {"type": "message", "seq",
    "time", "elapsed_sec", "direction": "agent_to_client" | "client_to_agent", "prompt",
    "message": <the JSON-RPC message as sent>} and {"type": "event", "event", ...} for
    what sandlot did (cancel sent, process exited...). Written line by line and flushed,
    so a killed run keeps everything up to its end.
    """

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fh: IO[str] | None = path.open("a")
        self._t0 = time.monotonic()
        self.seq = 0
        #: Which prompt the traffic belongs to (0: the handshake).
        self.prompt = 0
        self._write({"type": "header", "schema_version": TRAJECTORY_SCHEMA_VERSION,
                     "time": time.time(), **header})

    def _write(self, record: dict[str, Any]) -> None:
        if self._fh is None:
            return
        with contextlib.suppress(OSError, ValueError, TypeError):
            self._fh.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
            self._fh.flush()

    def message(self, direction: str, message: Any) -> None:
        self.seq += 1
        self._write({"type": "message", "seq": self.seq, "time": time.time(),
                     "elapsed_sec": round(time.monotonic() - self._t0, 4),
                     "direction": direction, "prompt": self.prompt, "message": message})

    def event(self, event: str, **fields: Any) -> None:
        self._write({"type": "event", "event": event, "time": time.time(),
                     "elapsed_sec": round(time.monotonic() - self._t0, 4),
                     "prompt": self.prompt, **fields})

    def close(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None


class ProcessTransport:
    """The SDK's Transport over a SandboxProcess's stdio (newline-delimited JSON).

    Contract: `receive` returns the next JSON-RPC message from the agent, or None once
    its stdout closed (the SDK then fails every pending request with ConnectionError);
    it never raises. `send` writes one message; it raises ConnectionError if the agent is
    gone or stopped reading. `close` closes the agent's stdin (most agents exit on EOF).
    """

    def __init__(self, process: SandboxProcess, trajectory: Trajectory,
                 on_update: Callable[[dict[str, Any]], None],
                 stderr_log: Path | None = None) -> None:
        self.process = process
        self.trajectory = trajectory
        self.on_update = on_update
        self.eof = False
        self.unparsed_lines = 0
        self.unknown_updates = 0
        self._stderr = bytearray()
        self._stderr_log: IO[bytes] | None = stderr_log.open("ab") if stderr_log else None
        self._stderr_logged = 0
        self._stderr_task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        self._stderr_task = asyncio.ensure_future(self._read_stderr())

    @property
    def stderr_tail(self) -> str:
        return bytes(self._stderr).decode(errors="replace")

    async def _read_stderr(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, ValueError):
            while chunk := await self.process.stderr.read(65536):
                self._stderr += chunk
                if len(self._stderr) > STDERR_TAIL_BYTES:
                    del self._stderr[:-STDERR_TAIL_BYTES]
                if self._stderr_log is not None and self._stderr_logged < STDERR_LOG_MAX_BYTES:
                    part = chunk[:STDERR_LOG_MAX_BYTES - self._stderr_logged]
                    self._stderr_logged += len(part)
                    self._stderr_log.write(part)
                    self._stderr_log.flush()

    # -- the Transport protocol ----------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        stdin = self.process.stdin
        if self._closed or self.eof or stdin is None or stdin.is_closing():
            raise ConnectionError("the agent's stdin is closed")
        self.trajectory.message("client_to_agent", message)
        try:
            stdin.write((json.dumps(message, separators=(",", ":")) + "\n").encode())
            async with asyncio.timeout(WRITE_TIMEOUT_SEC):
                await stdin.drain()
        except TimeoutError:
            raise ConnectionError(f"the agent did not read its stdin for "
                                  f"{WRITE_TIMEOUT_SEC:g}s") from None
        except (OSError, RuntimeError) as exc:
            raise ConnectionError(f"cannot write to the agent: {exc}") from exc

    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                line = await self.process.stdout.readline()  # splits on b"\n" only
            except ValueError:  # one line over the stream limit (it was dropped)
                self.unparsed_lines += 1
                self.trajectory.event("line_over_limit", limit_bytes=STREAM_LIMIT_BYTES)
                continue
            except (ConnectionError, OSError):
                line = b""
            if not line:
                self.eof = True
                self.trajectory.event("agent_stdout_closed")
                return None
            text = line.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                message = json.loads(text)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                self.unparsed_lines += 1
                self.trajectory.event("not_json_rpc", line=text[:2000])
                continue
            self.trajectory.message("agent_to_client", message)
            if message.get("method") == "session/update" and "id" not in message:
                params = message.get("params")
                update = params.get("update") if isinstance(params, dict) else None
                if isinstance(update, dict):
                    with contextlib.suppress(Exception):
                        self.on_update(update)
                try:
                    SessionNotification.model_validate(params)
                except ValidationError:
                    self.unknown_updates += 1
                    continue  # recorded and counted; the SDK would only log an error
            return message

    async def close(self) -> None:
        """Close the agent's stdin: the end of the conversation for agents that exit on EOF."""
        if self._closed:
            return
        self._closed = True
        stdin = self.process.stdin
        with contextlib.suppress(Exception):
            if stdin is not None and not stdin.is_closing():
                stdin.close()

    async def finish(self, wait_sec: float) -> None:
        """After the process is gone: let the stderr reader drain, close the logs."""
        if self._stderr_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._stderr_task, wait_sec)
        if self._stderr_log is not None:
            with contextlib.suppress(OSError):
                self._stderr_log.close()
            self._stderr_log = None
