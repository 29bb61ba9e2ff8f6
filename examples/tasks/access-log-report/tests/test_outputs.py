"""Check report.json and logreport.py against the verifier's own parser."""
import json
import os
import re
import subprocess
import tempfile

PRISTINE = "/tests/access.log"   # verifier's copy of /app/logs/access.log
ALT = "/tests/access_alt.log"    # a log the agent never saw

RX = re.compile(
    r'^(\S+) (\S+) (\S+) \[(\d{2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-]\d{4})\] '
    r'"([A-Z]+) (\S+) (HTTP/\d\.\d)" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"$'
)


def expected(path):
    rows, malformed = [], 0
    for line in open(path, encoding="utf-8").read().split("\n"):
        if line == "":
            continue
        m = RX.match(line)
        if m and "\n" not in line:
            rows.append(m.groups())
        else:
            malformed += 1
    n = len(rows)
    count = lambda keyf: {k: sum(1 for r in rows if keyf(r) == k) for k in {keyf(r) for r in rows}}
    paths = count(lambda r: r[11].partition("?")[0])
    hours = count(lambda r: r[6])
    fives = sum(1 for r in rows if r[13][0] == "5")
    return {
        "total_requests": n,
        "malformed_lines": malformed,
        "unique_ips": len({r[0] for r in rows}),
        "methods": count(lambda r: r[10]),
        "status_counts": count(lambda r: r[13]),
        "top_paths": [{"path": p, "count": c} for p, c in sorted(paths.items(), key=lambda kv: (-kv[1], kv[0]))[:5]],
        "server_error_rate": round(fives / n, 4) if n else 0.0,
        "total_bytes": sum(0 if r[14] == "-" else int(r[14]) for r in rows),
        "busiest_hour": sorted(hours, key=lambda h: (-hours[h], h))[0] if hours else None,
    }


def check(got, want):
    assert set(got) == set(want), f"keys differ: {sorted(got)} vs {sorted(want)}"
    for k in want:
        if k == "server_error_rate":
            assert abs(float(got[k]) - want[k]) < 1e-9, (k, got[k], want[k])
        else:
            assert got[k] == want[k], (k, got[k], want[k])


def test_log_untouched():
    with open("/app/logs/access.log", "rb") as a, open(PRISTINE, "rb") as b:
        assert a.read() == b.read()


def test_sanity_of_fixture():
    want = expected(PRISTINE)
    assert want["malformed_lines"] > 0 and want["total_requests"] > 300


def test_report_json():
    with open("/app/report.json") as fh:
        got = json.load(fh)
    check(got, expected(PRISTINE))


def test_script_on_unseen_log():
    out = os.path.join(tempfile.mkdtemp(), "alt.json")
    r = subprocess.run(["python3", "/app/logreport.py", ALT, out], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    with open(out) as fh:
        check(json.load(fh), expected(ALT))
