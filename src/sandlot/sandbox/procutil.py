"""Process helpers: children that die with sandlot, and bounded output capture."""

from __future__ import annotations

import asyncio
import os

#: Runs in the child before the real command: sandlot's pid, the number of cgroup.procs
#: files, the files, then the command. The death signal (if any) is already armed by
#: setpriv; a child whose parent is no longer that sandlot (it died in between) exits
#: instead.
_LAUNCH_SCRIPT = (
    '[ "$PPID" = "$0" ] || exit 1; n=$1; shift; '
    'while [ "$n" -gt 0 ]; do { echo $$ > "$1"; } 2>/dev/null || '
    '{ echo "sandlot: cannot join cgroup $1" >&2; exit 125; }; shift; n=$((n - 1)); done; '
    'exec "$@"'
)
#: The exit code of a launch that could not join its cgroups.
CGROUP_JOIN_FAILED = 125


def die_with_sandlot(argv: list[str], cgroup_procs: list[str] | None = None) -> list[str]:
    """`argv` prefixed so the child arms SIGKILL-on-sandlot's-death, checks sandlot still
    lives, joins the given cgroups, then execs `argv`.

    PR_SET_PDEATHSIG kills the child even when sandlot dies by SIGKILL. The child arms it
    itself (setpriv) and then checks its parent, since a child forked in the instant
    before sandlot died would otherwise miss the signal and live on (a holder would sleep
    forever). Done in the child, so no preexec_fn is needed and Python spawns with vfork:
    a preexec_fn forces a full fork of the sandlot process, which holds the event loop
    ~10 ms per launch (benchmarks/spawn.py).
    """
    return ["setpriv", "--pdeathsig", "SIGKILL", "--", *_checked(argv, cgroup_procs or [])]


def in_cgroups(argv: list[str], cgroup_procs: list[str]) -> list[str]:
    """`argv` prefixed so the child joins the given cgroups (checking first that sandlot
    still lives), then execs it: `die_with_sandlot` without the death signal.

    Enough for what starts in a sandbox's namespaces, which die with the sandbox's holder
    (itself launched with the death signal): one process less per command. Without
    cgroups, `argv` as it is."""
    return _checked(argv, cgroup_procs) if cgroup_procs else argv


def _checked(argv: list[str], cgroup_procs: list[str]) -> list[str]:
    return ["/bin/sh", "-c", _LAUNCH_SCRIPT, str(os.getpid()), str(len(cgroup_procs)),
            *cgroup_procs, *argv]


async def read_capped(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, bool]:
    """Read a stream to EOF, keeping at most `limit` bytes (head), reporting truncation."""
    if stream is None:
        return b"", False
    chunks: list[bytes] = []
    size = 0
    truncated = False
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        if size < limit:
            keep = chunk[: limit - size]
            chunks.append(keep)
            size += len(keep)
            truncated = truncated or len(keep) < len(chunk)
        else:
            truncated = True
    return b"".join(chunks), truncated


class _ExitSignalling(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol, which also says when the process exited."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


class WatchedProcess(asyncio.subprocess.Process):
    """A Process whose exit is known the moment asyncio reaps it (see wait_exited)."""

    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _ExitSignalling,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(transport, protocol, loop)  # type: ignore[arg-type]
        self.exited = protocol.exited


async def spawn(program: str, *args: str, limit: int = 2 ** 16,
                **kwargs: object) -> WatchedProcess:
    """asyncio.create_subprocess_exec, with an exit wait_exited sees without polling."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitSignalling(limit, loop), program, *args, **kwargs)  # type: ignore[arg-type]
    return WatchedProcess(transport, protocol, loop)


async def wait_exited(proc: WatchedProcess) -> int:
    """The exit code of `proc` as soon as it exits, whoever still holds its pipes.

    asyncio's `wait()` (3.11) returns only once stdout and stderr reach EOF; a command's
    background children inherit them, so `wait()` would last as long as they do. A
    process started by `spawn` says when it exited.
    """
    if proc.returncode is None:
        await asyncio.shield(proc.exited)
    assert proc.returncode is not None
    return proc.returncode


class CappedReader:
    """Reads one pipe in the background, keeping at most `limit` bytes (the head).

    `collect` returns what came once the pipe reaches EOF, or after `grace` seconds of a
    pipe still held open by a process the command left running; reading then goes on,
    discarding, so that process never blocks on a full pipe (a server logging requests).
    """

    def __init__(self, stream: asyncio.StreamReader | None, limit: int) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._limit = limit
        self.truncated = False
        self._collected = False
        #: Bytes read so far, kept or not: whether the pipe is still making progress.
        self._received = 0
        self._task = asyncio.ensure_future(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                return
            self._received += len(chunk)
            if self._collected:
                continue
            if self._size < self._limit:
                keep = chunk[: self._limit - self._size]
                self._chunks.append(keep)
                self._size += len(keep)
                self.truncated = self.truncated or len(keep) < len(chunk)
            else:
                self.truncated = True

    async def collect(self, grace: float, most: float = 8.0) -> bytes:
        """What was read by EOF, or once the pipe stayed quiet for `grace` seconds without
        EOF (a process the command left running holds it), or after `most` x `grace`.

        Quiet means no byte read, checked after the reader had its turn: on a loaded
        machine the event loop may wake late, and the timeout then fires before the reader
        takes what already arrived, which must not be cut off."""
        deadline = asyncio.get_running_loop().time() + grace * most
        while not self._task.done():
            before = self._received
            await asyncio.wait([self._task], timeout=grace)
            await asyncio.sleep(0)  # the reader, woken by data that came meanwhile, reads
            if self._received == before or asyncio.get_running_loop().time() > deadline:
                break
        self._collected = True
        data, self._chunks = b"".join(self._chunks), []
        return data

    @property
    def done(self) -> bool:
        return self._task.done()

    def cancel(self) -> None:
        self._task.cancel()
