#!/usr/bin/env python3
"""Generate a deterministic sensor-readings CSV (used at image build time)."""
import argparse
import datetime
import random

SENSORS = ["temp-a", "temp-b", "humidity-1", "pressure-x", "vibration-7"]


def generate(seed, rows, out):
    rng = random.Random(seed)
    t0 = datetime.datetime(2024, 5, 1, 0, 0, 0)
    with open(out, "w") as fh:
        fh.write("timestamp,sensor,value\n")
        for i in range(rows):
            ts = (t0 + datetime.timedelta(seconds=37 * i)).strftime("%Y-%m-%dT%H:%M:%S")
            sensor = rng.choice(SENSORS)
            roll = rng.random()
            if roll < 0.03:
                value = ""
            elif roll < 0.05:
                value = rng.choice(["NaN", "n/a", "ERR", "--"])
            else:
                value = f"{rng.uniform(0, 100):.1f}"
            fh.write(f"{ts},{sensor},{value}\n")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--seed", default="")
    p.add_argument("--rows", type=int, default=500)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    generate(int(a.seed) if a.seed else 1337, a.rows, a.out)
