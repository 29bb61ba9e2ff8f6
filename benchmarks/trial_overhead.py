"""Per-trial harness overhead of `sandlot run` with the oracle, against a bare-bwrap floor.

Generates N trivial Harbor tasks (solve.sh writes one file, test.sh checks it), runs the real
CLI on them once per concurrency (`-n 1` and `-n 8` by default), and reads every trial's
result.json. A trial's overhead is `timing.total - script_time_sec`: everything sandlot did
around the task's own solve.sh and test.sh (overlay, holder process, network, copies, result
files, teardown). The floors are measured in the same run on the same machine: a loop of bare
`bwrap ... true` calls and of `bash -c true` spawns, and the kernel work of one sandbox's
whole lifecycle done by the bare tools (LIFECYCLE_HOLDER), without and with network: what
the local backend's isolation costs before any harness.

Speed is reported as ratios against those baselines, never as timed assertions: absolute
seconds depend on the machine, the ratios say where the time goes.

    .venv/bin/python benchmarks/trial_overhead.py [--n-tasks 24] [--concurrency 1 8]
                                                  [--keep] [--json]

Needs root, bubblewrap and slirp4netns, like the local sandbox itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[1]
PHASES = ("setup", "agent", "verify", "cleanup", "total")
BWRAP_BASE = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
FLOORS: dict[str, list[str]] = {
    "bwrap_pid_net": [*BWRAP_BASE, "--unshare-pid", "--unshare-net", "true"],
    "bwrap_pid": [*BWRAP_BASE, "--unshare-pid", "true"],
    "bash_true": ["bash", "-c", "true"],
}
FLOOR_LABELS = {
    "bwrap_pid_net": "bwrap --unshare-pid --unshare-net true",
    "bwrap_pid": "bwrap --unshare-pid true",
    "bash_true": "bash -c true (process spawn)",
    "lifecycle": "a sandbox's kernel work, bare tools",
    "lifecycle_net": "  the same, with egress filter and slirp",
}
#: What any sandbox with the local backend's isolation costs the kernel, done by the bare
#: tools with nothing around them: a holder (mount, network and PID namespaces, /proc) that
#: mounts an overlay of / and a tmpfs and brings lo up, a container's bwrap (PID, IPC, UTS
#: namespaces, /dev, /proc) on that root, the holder stopped, the scratch removed; with
#: network, also the egress filter (sandlot's own nft ruleset, through nsenter) and
#: slirp4netns started and stopped. The task's two commands are not in it: a trial's
#: script time holds their launches.
LIFECYCLE_HOLDER = (
    'mount -t overlay overlay -o "lowerdir=/,upperdir=$0/upper,workdir=$0/work" "$0/merged" '
    '&& mount -t tmpfs -o mode=1777,size=64m shm "$0/shm" && ip link set lo up '
    '&& bwrap --bind "$0/merged" / --dev /dev --proc /proc --unshare-pid --unshare-ipc '
    '--unshare-uts --as-pid-1 -- true && echo ready && exec cat')
#: The headline floor: the issue's bare `bwrap true` (every floor gets a ratio).
REFERENCE_FLOOR = "bwrap_pid_net"

SOLVE_SH = "#!/bin/bash\necho ok > /app/out\n"
TEST_SH = """#!/bin/bash
if [ -f /app/out ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
"""
TASK_TOML = """version = "1.0"
[metadata]
difficulty = "trivial"
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 60
"""
DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\n"


# -- tasks -------------------------------------------------------------------------------


def write_task(root: Path, name: str) -> Path:
    """One trivial Harbor task (the shape of tests/conftest.py's `write_task`)."""
    task = root / name
    files = {
        "task.toml": TASK_TOML,
        "instruction.md": "Write `ok` to /app/out.\n",
        "environment/Dockerfile": DOCKERFILE,
        "solution/solve.sh": SOLVE_SH,
        "tests/test.sh": TEST_SH,
    }
    for rel, content in files.items():
        path = task / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        if rel.endswith(".sh"):
            path.chmod(0o755)
    return task


def write_tasks(root: Path, n: int) -> Path:
    width = max(3, len(str(n - 1)))
    for i in range(n):
        write_task(root, f"trivial-{i:0{width}d}")
    return root


# -- statistics ----------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Stats:
    """Seconds."""

    mean: float
    median: float
    p90: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        return cls(mean=statistics.fmean(values), median=statistics.median(values),
                   p90=percentile(values, 90), min=min(values), max=max(values))


def ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


# -- the floor -----------------------------------------------------------------------------


@dataclass
class Floor:
    command: str
    runs: int
    per_call_sec: Stats


def time_loop(argv: list[str], runs: int) -> Floor:
    """Per-call seconds of `runs` sequential `subprocess.run(argv)` calls."""
    subprocess.run(argv, check=True)  # warm the page cache; not counted
    durations = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True)
        durations.append(time.perf_counter() - started)
    return Floor(command=shlex.join(argv), runs=runs, per_call_sec=Stats.of(durations))


def lifecycle_once(scratch_base: Path, network: bool) -> float:
    """Seconds of one sandbox lifecycle done by the bare tools (LIFECYCLE_HOLDER)."""
    from sandlot.sandbox import egress  # sandlot's own ruleset, as a sandbox installs it

    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(dir=scratch_base))
    for folder in ("upper", "work", "merged", "shm"):
        (scratch / folder).mkdir()
    holder = subprocess.Popen(
        ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
         "--propagation", "private", "bash", "-c", LIFECYCLE_HOLDER, str(scratch)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdin is not None and holder.stdout is not None
    slirp = None
    try:
        if holder.stdout.readline() != b"ready\n":
            raise SystemExit("the bare sandbox floor did not start (overlay, tmpfs, ip, bwrap)")
        pid = int(Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text().split()[0])
        if network:
            rules = egress.ruleset(egress.policy_for(pid, ["10.0.2.3"]))
            subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "nft", "-f", "-"],
                           input=rules.encode(), check=True)
            ready, ready_w = os.pipe()
            slirp = subprocess.Popen(
                ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
                 f"--ready-fd={ready_w}", str(pid), "tap0"], pass_fds=(ready_w,),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.close(ready_w)
            os.read(ready, 1)
            os.close(ready)
    finally:
        if slirp is not None:
            slirp.kill()
        holder.stdin.close()
        holder.wait()
        if slirp is not None:
            slirp.wait()
    shutil.rmtree(scratch)  # the overlay went with the holder's mount namespace
    return time.perf_counter() - started


def time_lifecycle(scratch_base: Path, runs: int, network: bool) -> Floor:
    lifecycle_once(scratch_base, network)  # warm the page cache; not counted
    durations = [lifecycle_once(scratch_base, network) for _ in range(runs)]
    label = "sandbox lifecycle, bare tools" + (", with network" if network else "")
    return Floor(command=label, runs=runs, per_call_sec=Stats.of(durations))


def parallel_rate(argv: list[str], loops: int, runs: int) -> float:
    """Calls per second of `loops` loops of `argv` run side by side, `runs` calls in all:
    how far the floor itself scales with concurrency on this machine (a network namespace
    made and torn down per call is partly serialized by the kernel)."""
    per_loop = max(1, runs // loops)

    def loop() -> None:
        for _ in range(per_loop):
            subprocess.run(argv, check=True)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=loops) as pool:
        for future in [pool.submit(loop) for _ in range(loops)]:
            future.result()
    return per_loop * loops / (time.perf_counter() - started)


def measure_floors(runs: int, scratch_base: Path) -> dict[str, Floor]:
    missing = [tool for tool in ("bwrap", "bash", "slirp4netns", "nft")
               if shutil.which(tool) is None]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: see the README's requirements")
    floors = {name: time_loop(argv, runs) for name, argv in FLOORS.items()}
    floors["lifecycle"] = time_lifecycle(scratch_base, runs, network=False)
    floors["lifecycle_net"] = time_lifecycle(scratch_base, runs, network=True)
    return floors


# -- the jobs ------------------------------------------------------------------------------


@dataclass
class JobFigures:
    concurrency: int
    n_trials: int
    n_passed: int
    n_errored: int
    errors: list[str]
    wall_sec: float
    cpu_sec: float
    trials_span_sec: float
    trials_per_sec: float
    trials_per_sec_span: float | None
    overhead_sec: Stats
    script_time_sec: Stats
    phase_mean_sec: dict[str, float]
    ratios: dict[str, float | None] = field(default_factory=dict)
    #: Calls/s of the reference floor run as `concurrency` loops side by side.
    floor_calls_per_sec: float | None = None


def _children_cpu() -> float:
    """User+system seconds of every reaped descendant (the CLI and what it waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def parse_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def run_job(tasks_dir: Path, jobs_dir: Path, cache_dir: Path, concurrency: int,
            job_name: str) -> JobFigures:
    """Run the real CLI once; return its wall time and the figures from each result.json."""
    argv = [sys.executable, "-m", "sandlot.cli", "run", str(tasks_dir), "--agent", "oracle",
            "-n", str(concurrency), "--jobs-dir", str(jobs_dir), "--job-name", job_name,
            "--quiet"]
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200"}
    cpu_before = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - started
    cpu = _children_cpu() - cpu_before
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"sandlot run -n {concurrency} exited {proc.returncode}")
    n_tasks = sum(1 for _ in tasks_dir.glob("*/task.toml"))
    paths = sorted((jobs_dir / job_name).glob("*/result.json"))
    if len(paths) != n_tasks:
        raise SystemExit(f"-n {concurrency}: expected {n_tasks} result.json files, "
                         f"found {len(paths)} in {jobs_dir / job_name}")
    results = [json.loads(p.read_text()) for p in paths]
    errored = [r for r in results if r.get("error")]
    span = (max(parse_time(r["finished_at"]) for r in results)
            - min(parse_time(r["started_at"]) for r in results))
    return JobFigures(
        concurrency=concurrency,
        n_trials=len(results),
        n_passed=sum(1 for r in results if r.get("passed")),
        n_errored=len(errored),
        errors=sorted({r["error"]["kind"] for r in errored}),
        wall_sec=wall,
        cpu_sec=cpu,
        trials_span_sec=span,
        trials_per_sec=len(results) / wall,
        trials_per_sec_span=len(results) / span if span > 0 else None,
        overhead_sec=Stats.of([r["timing"]["total"] - r["script_time_sec"] for r in results]),
        script_time_sec=Stats.of([r["script_time_sec"] for r in results]),
        phase_mean_sec={ph: statistics.fmean(r["timing"].get(ph, 0.0) for r in results)
                        for ph in PHASES},
    )


def add_ratios(jobs: list[JobFigures], floors: dict[str, Floor]) -> None:
    """Overhead against the floor per call; trials/s against the first concurrency."""
    base = jobs[0]
    for job in jobs:
        job.ratios = {
            f"overhead_over_{name}": ratio(job.overhead_sec.mean, floor.per_call_sec.mean)
            for name, floor in floors.items()
        }
        job.ratios[f"trials_per_sec_over_n{base.concurrency}"] = ratio(
            job.trials_per_sec, base.trials_per_sec)
        job.ratios[f"trials_per_sec_span_over_n{base.concurrency}"] = ratio(
            job.trials_per_sec_span or 0.0, base.trials_per_sec_span or 0.0)
        job.ratios[f"floor_calls_per_sec_over_n{base.concurrency}"] = ratio(
            job.floor_calls_per_sec or 0.0, base.floor_calls_per_sec or 0.0)


# -- report --------------------------------------------------------------------------------


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def print_table(meta: dict[str, object], floors: dict[str, Floor], jobs: list[JobFigures],
                out: TextIO) -> None:
    def p(line: str = "") -> None:
        print(line, file=out)

    def row(label: str, cells: list[str]) -> None:
        p(f"{label:<40}" + "".join(f"{c:>11}" for c in cells))

    base_c = jobs[0].concurrency
    p(f"sandlot trial overhead: {meta['n_tasks']} trivial tasks, oracle agent, "
      f"{meta['cpus']} CPUs, kernel {meta['kernel']}")
    p()
    row(f"floor, per call ({floors[REFERENCE_FLOOR].runs} sequential calls)",
        ["mean ms", "median ms"])
    for name, floor in floors.items():
        row(f"  {FLOOR_LABELS[name]}",
            [ms(floor.per_call_sec.mean), ms(floor.per_call_sec.median)])
    p()
    row("", [f"-n {j.concurrency}" for j in jobs])
    row("trials passed", [f"{j.n_passed}/{j.n_trials}" for j in jobs])
    row("job wall time (s)", [f"{j.wall_sec:.2f}" for j in jobs])
    row("  first trial start → last end (s)", [f"{j.trials_span_sec:.2f}" for j in jobs])
    row("CPU time / trial, sandlot + children (ms)",
        [ms(j.cpu_sec / j.n_trials) for j in jobs])
    row("CPUs busy (CPU time ÷ wall time)", [f"{j.cpu_sec / j.wall_sec:.2f}" for j in jobs])
    row("trials/s (job wall time)", [f"{j.trials_per_sec:.2f}" for j in jobs])
    row("trials/s (trial span)",
        [f"{j.trials_per_sec_span:.2f}" if j.trials_per_sec_span else "-" for j in jobs])
    row("script time / trial, mean (ms)", [ms(j.script_time_sec.mean) for j in jobs])
    row("overhead / trial, mean (ms)", [ms(j.overhead_sec.mean) for j in jobs])
    row("overhead / trial, median (ms)", [ms(j.overhead_sec.median) for j in jobs])
    row("overhead / trial, p90 (ms)", [ms(j.overhead_sec.p90) for j in jobs])
    for phase in PHASES:
        row(f"  phase {phase}, mean (ms)", [ms(j.phase_mean_sec[phase]) for j in jobs])
    p()
    p("ratios (against baselines measured in this run)")
    for name in floors:
        row(f"overhead / trial ÷ {name} call",
            [times(j.ratios[f"overhead_over_{name}"]) for j in jobs])
    row(f"trials/s ÷ trials/s at -n {base_c} (wall)",
        [times(j.ratios[f"trials_per_sec_over_n{base_c}"]) for j in jobs])
    row(f"trials/s ÷ trials/s at -n {base_c} (span)",
        [times(j.ratios[f"trials_per_sec_span_over_n{base_c}"]) for j in jobs])
    row(f"floor: {REFERENCE_FLOOR} calls/s, C loops side by side",
        [f"{j.floor_calls_per_sec:.0f}" if j.floor_calls_per_sec else "-" for j in jobs])
    row(f"floor calls/s ÷ at -n {base_c}",
        [times(j.ratios[f"floor_calls_per_sec_over_n{base_c}"]) for j in jobs])
    bad = [j for j in jobs if j.n_errored or j.n_passed < j.n_trials]
    if bad:
        p()
        p("WARNING: not every trial passed, so these figures are not a clean measurement: "
          + "; ".join(f"-n {j.concurrency}: {j.n_passed}/{j.n_trials} passed, errors "
                      f"{', '.join(j.errors) or 'none'}" for j in bad))
    p()
    p("overhead = timing.total - script_time_sec. script_time_sec is how long sandlot timed\n"
      "the solve.sh and test.sh execs, launch of their nsenter+bwrap included, so the\n"
      "overhead is a lower bound on what the harness adds around the task's scripts.\n"
      "lifecycle: the same namespaces, mounts, container, egress filter and slirp4netns a\n"
      "sandbox needs, done once by the bare tools (no harness): the isolation's own cost.")


# -- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-tasks", type=int, default=24, help="trivial tasks per job")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8],
                        help="-n values to run; the first is the trials/s baseline")
    parser.add_argument("--floor-runs", type=int, default=None,
                        help="calls per floor loop (default: --n-tasks)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="skip the uncounted 2-task warm-up job (cold imports, page cache)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="parent of the temp folder (tasks, jobs, cache); default: $TMPDIR")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    parser.add_argument("--json", action="store_true",
                        help="write the figures as JSON to stdout (the table goes to stderr)")
    args = parser.parse_args(argv)
    if args.n_tasks < 1 or any(c < 1 for c in args.concurrency):
        parser.error("--n-tasks and --concurrency must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("the local sandbox needs root (overlay mounts); run as root")
    log = sys.stderr
    tmp = Path(tempfile.mkdtemp(prefix="sandlot-bench-", dir=args.work_dir))
    try:
        tasks_dir = write_tasks(tmp / "tasks", args.n_tasks)
        jobs_dir, cache_dir = tmp / "jobs", tmp / "cache"
        if not args.no_warmup:
            print("warm-up job (not counted)...", file=log)
            warm = write_tasks(tmp / "warmup-tasks", min(2, args.n_tasks))
            run_job(warm, jobs_dir, cache_dir, 1, "warmup")
        floor_runs = args.floor_runs or args.n_tasks
        print(f"floor: {floor_runs} calls each of {', '.join(FLOOR_LABELS)}...", file=log)
        (tmp / "floor").mkdir()
        floors = measure_floors(floor_runs, tmp / "floor")
        jobs = []
        for c in args.concurrency:
            print(f"sandlot run -n {c} on {args.n_tasks} tasks...", file=log)
            jobs.append(run_job(tasks_dir, jobs_dir, cache_dir, c, f"bench-n{c}"))
            jobs[-1].floor_calls_per_sec = parallel_rate(FLOORS[REFERENCE_FLOOR], c,
                                                         max(floor_runs, 4 * c))
        add_ratios(jobs, floors)
        meta: dict[str, object] = {
            "n_tasks": args.n_tasks, "cpus": os.cpu_count(), "kernel": os.uname().release,
            "python": sys.version.split()[0], "reference_floor": REFERENCE_FLOOR,
        }
        print_table(meta, floors, jobs, sys.stderr if args.json else sys.stdout)
        if args.json:
            report = {**meta, "floor": {k: asdict(v) for k, v in floors.items()},
                      "jobs": [asdict(j) for j in jobs],
                      "kept_dir": str(tmp) if args.keep else None}
            json.dump(report, sys.stdout, indent=2)
            print()
    finally:
        if args.keep:
            print(f"kept {tmp}", file=log)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
