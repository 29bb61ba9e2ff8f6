"""What running on the task's own image costs the local sandbox, against the host's root.

Serves an image from a registry on loopback (Debian's `docker-registry`): the
debootstrap'd Debian the tests build (kept in sandlot's cache once built), or, with
`--small`, a busybox image with bash made here. Writes N tasks `FROM` that image with one
`RUN` step, then runs the real CLI three times with the oracle, one trial at a time:

1. `--image-policy host`: every task on the host's root (the baseline; the first trial
   builds the RUN step's layer, the others reuse it);
2. `--image-policy strict` on an empty image cache: the first trial pulls the image and
   builds on it (cold), the later trials reuse both (warm);
3. the same again: every trial finds the image and the layer cached (a later job).

A trial's overhead is `timing.total - script_time_sec` (sandlot's own work around
solve.sh and test.sh). The figure to read is the cached image trial's overhead over the
host-root trial's (goal: within 1.2x). Ratios only: absolute seconds depend on the machine.

    .venv/bin/python benchmarks/image_start.py [--n-tasks 8] [--small] [--keep] [--json]

Needs root, bubblewrap, slirp4netns, skopeo, umoci and docker-registry.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "images")]

from registry_support import (  # noqa: E402
    busybox_applets,
    host_bash,
    other_debian_layout,
    push_image,
    push_layout,
    running_registry,
)

from conftest import kept_downloads_dir  # noqa: E402

GOAL_RATIO = 1.2
TASK_TOML = 'version = "1.0"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
SOLVE_SH = "#!/bin/bash\necho ok > /app/out\n"
TEST_SH = ("#!/bin/bash\nif [ -f /app/out ] && [ -f /built ]; then echo 1 > "
           "/logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")


def write_tasks(root: Path, n: int, image: str) -> None:
    for i in range(n):
        task = root / f"on-image-{i:03d}"
        files = {"task.toml": TASK_TOML, "instruction.md": "Write ok to /app/out.\n",
                 "environment/Dockerfile": f"FROM {image}\nWORKDIR /app\nRUN echo > /built\n",
                 "solution/solve.sh": SOLVE_SH, "tests/test.sh": TEST_SH}
        for rel, content in files.items():
            path = task / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            if rel.endswith(".sh"):
                path.chmod(0o755)


@dataclass
class Trial:
    name: str
    setup_sec: float
    overhead_sec: float
    base: str


def run_job(tasks: Path, jobs: Path, cache: Path, name: str, policy: str) -> list[Trial]:
    argv = [sys.executable, "-m", "sandlot.cli", "run", str(tasks), "--agent", "oracle",
            "-n", "1", "--jobs-dir", str(jobs), "--job-name", name, "--quiet",
            "--image-policy", policy]
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache), "COLUMNS": "200"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"job {name} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    trials = []
    for result_file in sorted((jobs / name).glob("*/result.json")):
        result = json.loads(result_file.read_text())
        if result.get("reward") != 1.0:
            raise SystemExit(f"{result_file}: not passed: {result.get('error')}")
        timing = result["timing"]
        trials.append(Trial(result["trial_name"], timing.get("setup", 0.0),
                            timing["total"] - result.get("script_time_sec", 0.0),
                            (result.get("environment") or {}).get("base", "?")))
    # Trials run one at a time, in name order: the first is the one that pulled and built.
    return sorted(trials, key=lambda t: t.name)


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-tasks", type=int, default=8)
    parser.add_argument("--small", action="store_true",
                        help="a busybox image instead of the debootstrap'd Debian")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.n_tasks < 2:
        raise SystemExit("--n-tasks must be at least 2 (a cold trial and warm ones)")
    work = Path(tempfile.mkdtemp(prefix="sandlot-bench-images-", dir="/var/tmp"))
    try:
        with running_registry(work / "registry") as registry:
            name = "bench/base:1"
            if args.small:
                push_image(registry, work / "build", name, [busybox_applets, host_bash])
            else:
                push_layout(registry, other_debian_layout(kept_downloads_dir() / "test-images"),
                            name)
            image = f"{registry.address}/{name}"
            write_tasks(work / "tasks", args.n_tasks, image)
            started = time.perf_counter()
            host = run_job(work / "tasks", work / "jobs", work / "cache", "host", "host")
            cold = run_job(work / "tasks", work / "jobs", work / "cache", "image", "strict")
            warm = run_job(work / "tasks", work / "jobs", work / "cache", "again", "strict")
            wall = time.perf_counter() - started
        host_overhead = mean([t.overhead_sec for t in host[1:]])
        cached = [t.overhead_sec for t in cold[1:]] + [t.overhead_sec for t in warm]
        report = {
            "image": "busybox + bash" if args.small else "debootstrap'd Debian (minbase)",
            "n_tasks": args.n_tasks,
            "bases": sorted({t.base for t in host}) + sorted({t.base for t in cold + warm}),
            "host_root_overhead_sec": host_overhead,
            "first_image_trial_setup_sec": cold[0].setup_sec,
            "first_host_trial_setup_sec": host[0].setup_sec,
            "cached_image_overhead_sec": mean(cached),
            "cached_over_host": mean(cached) / host_overhead if host_overhead else None,
            "goal_ratio": GOAL_RATIO,
            "wall_sec": wall,
            "trials": {"host": [asdict(t) for t in host], "image": [asdict(t) for t in cold],
                       "again": [asdict(t) for t in warm]},
        }
        lines = [
            f"image: {report['image']}; {args.n_tasks} tasks, one trial at a time",
            f"host root, overhead per trial (warm):      {host_overhead * 1000:8.1f} ms",
            f"image, overhead per trial (cached):        {mean(cached) * 1000:8.1f} ms",
            f"  ratio cached image / host root:          {report['cached_over_host']:8.2f}x"
            f"  (goal <= {GOAL_RATIO}x)",
            f"first trial's setup on the image (pull+build): {cold[0].setup_sec:6.2f} s",
            f"first trial's setup on the host root (build):  {host[0].setup_sec:6.2f} s",
        ]
        print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
        if args.json:
            print(json.dumps(report, indent=2))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            from sandlot.hostguard import remove_tree

            remove_tree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
