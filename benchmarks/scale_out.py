"""Trials per second of one fixed trivial workload on 1, 2 and 3 simulated Ray nodes.

Each simulated node is a worker node of a `ray.cluster_utils.Cluster` on this machine whose
processes (raylet, its workers, the node actor and the sandboxes it starts, which sandlot
nests in its own cgroup) run in a cgroup of their own, held to the same CPU share
(`--node-cpu`, a CFS quota). The head has no CPUs, so every trial runs on a worker node;
the driver (`sandlot run --ray ADDRESS`) runs outside the quotas, as a head machine would.
The workload is the same for every node count: `--n-tasks` Harbor tasks whose solve.sh
sleeps `--sleep-sec` and writes a file, run with the oracle.

A run's trials per second is n ÷ (last finish - first start) over its result.json files
(the cluster's start and the driver's own start are not in it). Reported as each count's
ratio to the 1-node run of the same round, and that ratio ÷ nodes (1.0: linear); rounds
alternate the order of the counts, since this VM's speed drifts.

    .venv/bin/python benchmarks/scale_out.py [--nodes 1 2 3] [--n-tasks 36] [--rounds 2]
                                             [--node-cpu 0.5] [--slots 2] [--json]

Needs root (cgroup v1 cpu controller, the local sandbox), Ray (`pip install -e '.[ray]'`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPU_ROOT = Path("/sys/fs/cgroup/cpu")


def own_cpu_cgroup() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CPU_ROOT / path.lstrip("/")
    raise SystemExit("no cgroup v1 cpu controller here: the nodes cannot be held to a share")


@contextlib.contextmanager
def node_groups(count: int, cpu: float) -> Iterator[list[Path]]:
    """`count` cpu cgroups under this process's own, each with a quota of `cpu` cores."""
    parent = own_cpu_cgroup()
    groups = []
    try:
        for i in range(count):
            group = parent / f"sandlot-bench-{os.getpid()}-node{i}"
            group.mkdir()
            groups.append(group)
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text(str(int(cpu * 100000)))
        yield groups
    finally:
        for group in reversed(groups):
            for _ in range(100):  # the nodes' processes are gone once the cluster stopped
                # deepest first: sandlot's own groups (sandlot/...) were made inside it
                for below, _dirs, _files in os.walk(group, topdown=False):
                    with contextlib.suppress(OSError):
                        os.rmdir(below)
                if not group.exists():
                    break
                time.sleep(0.1)


@contextlib.contextmanager
def cluster_of(n_nodes: int, groups: list[Path], slots: int) -> Iterator[str]:
    """A head without CPUs and `n_nodes` worker nodes, node i started from inside group i
    (its processes stay there). Yields the address `--ray` joins."""
    import ray
    from ray.cluster_utils import Cluster

    home = own_cpu_cgroup()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for group in groups[:n_nodes]:
            (group / "cgroup.procs").write_text(str(os.getpid()))
            try:
                cluster.add_node(num_cpus=slots)
            finally:
                (home / "cgroup.procs").write_text(str(os.getpid()))
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        try:
            cluster.wait_for_nodes()
        finally:
            ray.shutdown()
        yield cluster.address
    finally:
        cluster.shutdown()


def write_tasks(root: Path, n: int, sleep_sec: float) -> None:
    for i in range(n):
        task = root / f"t{i:03d}"
        for sub in ("tests", "solution", "environment"):
            (task / sub).mkdir(parents=True, exist_ok=True)
        (task / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 60\n'
                                        "[verifier]\ntimeout_sec = 60\n")
        (task / "instruction.md").write_text("Write /app/done.\n")
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n"
                                                         "WORKDIR /app\n")
        for rel, text in (("solution/solve.sh", f"sleep {sleep_sec}\necho ok > /app/done\n"),
                          ("tests/test.sh", "test -f /app/done && echo 1 > "
                           "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")):
            (task / rel).write_text("#!/bin/bash\n" + text)
            (task / rel).chmod(0o755)


def run_job(address: str, tasks: Path, jobs: Path, name: str, cache: Path) -> float:
    """Trials per second of one `sandlot run --ray address` over the tasks."""
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache), "SANDLOT_IMAGE_POLICY": "host"}
    proc = subprocess.run([sys.executable, "-m", "sandlot.cli", "run", str(tasks), "--agent",
                           "oracle", "--ray", address, "--jobs-dir", str(jobs), "--job-name",
                           name, "-q"], env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"the job failed:\n{proc.stdout}\n{proc.stderr}")
    results = [json.loads(p.read_text()) for p in (jobs / name).glob("*/result.json")]
    if not all(r["passed"] for r in results):
        raise SystemExit(f"a trial did not pass in {jobs / name}")
    starts = [datetime.fromisoformat(r["started_at"]).timestamp() for r in results]
    ends = [datetime.fromisoformat(r["finished_at"]).timestamp() for r in results]
    return len(results) / (max(ends) - min(starts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--n-tasks", type=int, default=36)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--node-cpu", type=float, default=0.5)
    parser.add_argument("--slots", type=int, default=2, help="each node's CPUs for Ray")
    parser.add_argument("--sleep-sec", type=float, default=0.5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    counts = sorted(set(args.nodes))
    if 1 not in counts:
        raise SystemExit("--nodes needs 1: the other counts are ratios to it")
    rates: dict[int, list[float]] = {n: [] for n in counts}
    ratios: dict[int, list[float]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory(prefix="sandlot-scale-out-") as scratch:
        root = Path(scratch)
        # Ray keeps each cluster's session logs in its temp folder: this run's go with it.
        (root / "tmp").mkdir()
        os.environ["TMPDIR"] = tempfile.tempdir = str(root / "tmp")
        write_tasks(root / "tasks", args.n_tasks, args.sleep_sec)
        with node_groups(max(counts), args.node_cpu) as groups:
            for round_no in range(args.rounds):
                order = counts if round_no % 2 == 0 else list(reversed(counts))
                this_round: dict[int, float] = {}
                for n in order:
                    with cluster_of(n, groups, args.slots) as address:
                        this_round[n] = run_job(address, root / "tasks", root / "jobs",
                                                f"r{round_no}-n{n}", root / "cache")
                    print(f"round {round_no + 1}: {n} node(s): {this_round[n]:.2f} trials/s",
                          file=sys.stderr)
                for n in counts:
                    rates[n].append(this_round[n])
                    ratios[n].append(this_round[n] / this_round[1])
    report = {
        "n_tasks": args.n_tasks, "node_cpu": args.node_cpu, "slots": args.slots,
        "sleep_sec": args.sleep_sec, "rounds": args.rounds,
        "nodes": {n: {"trials_per_sec": [round(r, 3) for r in rates[n]],
                      "ratio_to_1": [round(r, 3) for r in ratios[n]],
                      "of_linear": round(statistics.median(ratios[n]) / n, 3)}
                  for n in counts},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.n_tasks} trivial trials (oracle, solve.sh sleeps {args.sleep_sec}s); each "
          f"node held to {args.node_cpu} CPU with {args.slots} slots; {args.rounds} rounds")
    print(f"{'nodes':>5}  {'trials/s (each round)':<24}  {'÷ 1 node':<16}  of linear (median)")
    for n in counts:
        each = " ".join(f"{r:.2f}" for r in rates[n])
        ratio = " ".join(f"{r:.2f}" for r in ratios[n])
        print(f"{n:>5}  {each:<24}  {ratio:<16}  {report['nodes'][n]['of_linear']:.2f}")


if __name__ == "__main__":
    main()
