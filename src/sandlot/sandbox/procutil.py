"""Process helpers: children that die with sandlot, and bounded output capture."""

from __future__ import annotations

import asyncio
import os

#: Runs in the child before the real command: sandlot's pid, the number of cgroup.procs
#: files, the files, then the command. The death signal is already armed by setpriv; a
#: child whose parent is no longer that sandlot (it died in between) exits instead.
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
    files = list(cgroup_procs or [])
    return ["setpriv", "--pdeathsig", "SIGKILL", "--", "/bin/sh", "-c", _LAUNCH_SCRIPT,
            str(os.getpid()), str(len(files)), *files, *argv]


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
