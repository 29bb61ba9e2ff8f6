"""How long launching one sandbox command holds sandlot's event loop.

Baseline: the launch sandlot used before, a `preexec_fn` that arms PR_SET_PDEATHSIG and
joins cgroups in the child. A preexec_fn makes Python fork the whole process (no vfork),
and the event loop waits for the child to exec. Measured against it in the same run:
`die_with_sandlot`, the launch sandlot uses now, where the child arms the signal and joins
the cgroups itself after exec (setpriv + sh), so Python can spawn with vfork.

Both launch the same command (`true`) with the same cgroup "procs" files (plain files in
a temp folder, so no root is needed). `--heavy` imports litellm first, so the process has
the size of a real run (fork cost grows with it). Reported: the median time the awaiting
coroutine is blocked in `create_subprocess_exec`, the median time to the child's exit,
and how many gateway-like timer ticks (every 1 ms) the loop managed meanwhile.

    .venv/bin/python benchmarks/spawn.py [--n 200] [--heavy] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sandlot.sandbox.procutil import die_with_sandlot

_libc = ctypes.CDLL(None, use_errno=True)


def preexec_launch(files: list[str]) -> Callable[[], None]:
    """The baseline: what sandlot's children ran between fork and exec before."""
    parent = os.getpid()

    def setup() -> None:
        _libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)
        for path in files:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)

    return setup


async def measure(kind: str, n: int, files: list[str]) -> dict[str, float]:
    spawn_ms: list[float] = []
    exit_ms: list[float] = []
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:  # stands in for the gateway answering other trials
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.001)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    started = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        if kind == "preexec":
            proc = await asyncio.create_subprocess_exec(
                "true", preexec_fn=preexec_launch(files), start_new_session=True)
        else:
            proc = await asyncio.create_subprocess_exec(
                *die_with_sandlot(["true"], files), start_new_session=True)
        t1 = time.perf_counter()
        await proc.wait()
        t2 = time.perf_counter()
        if proc.returncode != 0:
            raise SystemExit(f"{kind}: the launch failed (exit {proc.returncode})")
        spawn_ms.append((t1 - t0) * 1000)
        exit_ms.append((t2 - t0) * 1000)
    elapsed = time.perf_counter() - started
    stop.set()
    await tick_task
    return {"loop_blocked_ms_median": statistics.median(spawn_ms),
            "loop_blocked_ms_p90": sorted(spawn_ms)[int(0.9 * (n - 1))],
            "to_exit_ms_median": statistics.median(exit_ms),
            "ticks_per_sec": ticks / elapsed}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="launches per method")
    parser.add_argument("--heavy", action="store_true", help="import litellm first")
    parser.add_argument("--json", action="store_true", help="JSON on stdout")
    args = parser.parse_args()
    if args.heavy:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline, as sandlot
        import litellm  # noqa: F401

    rss_mb = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf(
        "SC_PAGE_SIZE") / 2**20
    with tempfile.TemporaryDirectory(prefix="sandlot-spawn-") as tmp:
        files = [str(Path(tmp, f"{c}.procs")) for c in ("memory", "pids", "cpu")]
        for f in files:
            Path(f).touch()
        await measure("prefix", 10, files)  # warm-up: page cache, setpriv and sh
        results = {}
        for kind in ("preexec", "prefix", "preexec", "prefix"):  # interleaved, then merged
            r = await measure(kind, args.n // 2, files)
            for key, value in r.items():
                results.setdefault(kind, {}).setdefault(key, []).append(value)
    merged = {k: {m: statistics.mean(v) for m, v in r.items()} for k, r in results.items()}
    base, new = merged["preexec"], merged["prefix"]
    report = {
        "process_rss_mb": round(rss_mb, 1), "n": args.n,
        "baseline_preexec": {k: round(v, 3) for k, v in base.items()},
        "die_with_sandlot": {k: round(v, 3) for k, v in new.items()},
        "loop_blocked_ratio": round(new["loop_blocked_ms_median"]
                                    / base["loop_blocked_ms_median"], 3),
        "to_exit_ratio": round(new["to_exit_ms_median"] / base["to_exit_ms_median"], 3),
        "ticks_ratio": round(new["ticks_per_sec"] / base["ticks_per_sec"], 3),
    }
    lines = [f"process RSS {report['process_rss_mb']} MB, {args.n} launches per method",
             f"{'':28}{'preexec (baseline)':>20}{'die_with_sandlot':>18}{'ratio':>8}"]
    for key, label, ratio in (
            ("loop_blocked_ms_median", "loop blocked, median ms", "loop_blocked_ratio"),
            ("to_exit_ms_median", "launch to exit, median ms", "to_exit_ratio"),
            ("ticks_per_sec", "1 ms timer ticks/s", "ticks_ratio")):
        lines.append(f"{label:28}{base[key]:>20.2f}{new[key]:>18.2f}{report[ratio]:>8.3f}")
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
