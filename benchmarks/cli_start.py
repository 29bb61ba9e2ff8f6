"""How long `sandlot --help` and `sandlot run --help` take, against `python -c pass` and,
where they are installed, Harbor's and benchflow's CLIs, all in one run.

A CLI that takes a second to print its help takes a second before every command a user
types and every step a script runs; most of that is importing modules the command does
not use. The figure that matters is the ratio to the other CLIs measured here, on this
machine, now: the target is at most 1/8 of Harbor's time.

    .venv/bin/python benchmarks/cli_start.py [--runs 15] [--harbor BIN] [--benchflow BIN]
                                             [--json]

Harbor and benchflow are looked up on PATH unless given (install each into a scratch venv
outside the repository: `python3.12 -m venv /tmp/hb && /tmp/hb/bin/pip install harbor`,
then `--harbor /tmp/hb/bin/harbor`). Each command runs once uncounted (page cache), then
`--runs` times; the median wall time is reported.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def wall_times(argv: list[str], runs: int) -> list[float] | None:
    """Seconds per run of `argv`, or None when it does not exit 0."""
    times = []
    for i in range(runs + 1):
        started = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=120, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            return None
        if i:  # the first run warms the page cache
            times.append(elapsed)
    return times


def commands(args: argparse.Namespace) -> dict[str, list[str]]:
    python = sys.executable
    sandlot = str(Path(python).with_name("sandlot"))
    out = {"python -c pass": [python, "-c", "pass"],
           "sandlot --help": [sandlot, "--help"],
           "sandlot run --help": [sandlot, "run", "--help"]}
    for name, given in (("harbor", args.harbor), ("benchflow", args.benchflow)):
        binary = given or shutil.which(name)
        if binary:
            out[f"{name} --help"] = [binary, "--help"]
            out[f"{name} run --help"] = [binary, "run", "--help"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--harbor", help="Harbor's CLI (default: `harbor` on PATH)")
    parser.add_argument("--benchflow", help="benchflow's CLI (default: on PATH)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    medians: dict[str, float] = {}
    for label, argv in commands(args).items():
        times = wall_times(argv, args.runs)
        if times is not None:
            medians[label] = statistics.median(times)
    python = medians["python -c pass"]
    rows = []
    for label, median in medians.items():
        tool = label.split()[0]
        same = label.replace(tool, "sandlot", 1)
        versus = None
        if tool not in ("sandlot", "python") and same in medians:
            versus = medians[same] / median  # sandlot's time as a share of this tool's
        rows.append({"command": label, "median_sec": round(median, 4),
                     "x_python": round(median / python, 2),
                     "sandlot_share": None if versus is None else round(versus, 3)})
    if args.json:
        print(json.dumps({"runs": args.runs, "rows": rows}, indent=2))
        return
    print(f"{'command':<24} {'median':>9} {'× python':>9} {'sandlot ÷ it':>13}")
    for row in rows:
        share = "" if row["sandlot_share"] is None else f"{row['sandlot_share']:.3f}"
        print(f"{row['command']:<24} {row['median_sec']:>8.3f}s {row['x_python']:>9.1f} "
              f"{share:>13}")
    print("sandlot ÷ it: sandlot's time for the same command as a share of that tool's "
          "(target ≤ 0.125 for Harbor)")


if __name__ == "__main__":
    main()
