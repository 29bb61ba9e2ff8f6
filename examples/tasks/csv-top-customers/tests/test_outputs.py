"""Run /app/top_customers.sh and compare with values computed here."""
import os
import random
import subprocess
import tempfile
from decimal import Decimal

SCRIPT = "/app/top_customers.sh"
PRISTINE = "/tests/sales.csv"  # verifier's own copy of the original data


def expected(csv_path, n):
    totals = {}
    with open(csv_path) as fh:
        next(fh)
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                continue
            f = line.split(",")
            if f[6] != "completed":
                continue
            cents = int(f[4]) * int(Decimal(f[5]) * 100)
            totals[f[2]] = totals.get(f[2], 0) + cents
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0].encode()))
    return [f"{c},{v // 100}.{v % 100:02d}" for c, v in ranked[:n]]


def run(*args):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    r = subprocess.run([SCRIPT, *args], capture_output=True, text=True, timeout=20, env=env)
    assert r.returncode == 0, r.stderr
    return [l for l in r.stdout.splitlines()]


def write_csv(rows):
    fd, path = tempfile.mkstemp(suffix=".csv")
    with os.fdopen(fd, "w") as fh:
        fh.write("order_id,date,customer,region,quantity,unit_price,status\n")
        for r in rows:
            fh.write(",".join(map(str, r)) + "\n")
    return path


def test_script_is_executable():
    assert os.path.isfile(SCRIPT) and os.access(SCRIPT, os.X_OK)


def test_defaults_on_original_data():
    with open("/app/sales.csv") as a, open(PRISTINE) as b:
        assert a.read() == b.read(), "/app/sales.csv must not be modified"
    assert run() == expected(PRISTINE, 3)


def test_explicit_file_and_n():
    assert run(PRISTINE, "7") == expected(PRISTINE, 7)


def test_random_data_with_ties():
    rng = random.Random(99)
    names = ["Zed Co", "alpha", "Beta Labs", "Gamma", "delta inc", "Epsilon", "Omega Group"]
    rows = []
    for i in range(300):
        rows.append([i, "2024-01-01", rng.choice(names), "x", rng.randint(1, 9),
                     f"{rng.randint(100, 9999) / 100:.2f}",
                     rng.choice(["completed", "completed", "cancelled", "refunded"])])
    # two customers with identical revenue -> tie broken by byte order
    rows.append([900, "2024-01-01", "Tie B", "x", 1, "100000.00", "completed"])
    rows.append([901, "2024-01-01", "Tie A", "x", 2, "50000.00", "completed"])
    rows.append([902, "2024-01-01", "Tie A", "x", 5, "99999.99", "cancelled"])
    path = write_csv(rows)
    try:
        exp = expected(path, 5)
        assert exp[0].startswith("Tie A,") and exp[1].startswith("Tie B,")
        assert run(path, "5") == exp
        assert run(path, "50") == expected(path, 50)  # N larger than #customers
    finally:
        os.unlink(path)
