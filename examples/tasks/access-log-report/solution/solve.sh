#!/bin/bash
set -euo pipefail
cat > /app/logreport.py <<'PY'
#!/usr/bin/env python3
"""Summarise a combined-format access log into JSON."""
import json
import re
import sys
from collections import Counter

LINE = re.compile(
    r'(?P<ip>\S+) \S+ \S+ '
    r'\[\d{2}/[A-Za-z]{3}/\d{4}:(?P<hour>\d{2}):\d{2}:\d{2} [+-]\d{4}\] '
    r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/\d\.\d" '
    r'(?P<status>\d{3}) (?P<bytes>\d+|-) "[^"]*" "[^"]*"'
)


def summarise(path):
    ips, methods, statuses, paths, hours = set(), Counter(), Counter(), Counter(), Counter()
    total = malformed = nbytes = errors = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.rstrip("\r\n")
            if not line:
                continue
            m = LINE.fullmatch(line)
            if not m:
                malformed += 1
                continue
            total += 1
            ips.add(m["ip"])
            methods[m["method"]] += 1
            statuses[m["status"]] += 1
            paths[m["target"].split("?", 1)[0]] += 1
            hours[m["hour"]] += 1
            nbytes += 0 if m["bytes"] == "-" else int(m["bytes"])
            errors += m["status"].startswith("5")
    top = sorted(paths.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    busiest = min(hours, key=lambda h: (-hours[h], h)) if hours else None
    return {
        "total_requests": total,
        "malformed_lines": malformed,
        "unique_ips": len(ips),
        "methods": dict(methods),
        "status_counts": dict(statuses),
        "top_paths": [{"path": p, "count": c} for p, c in top],
        "server_error_rate": round(errors / total, 4) if total else 0.0,
        "total_bytes": nbytes,
        "busiest_hour": busiest,
    }


if __name__ == "__main__":
    with open(sys.argv[2], "w") as out:
        json.dump(summarise(sys.argv[1]), out, indent=2)
PY
chmod +x /app/logreport.py
python3 /app/logreport.py /app/logs/access.log /app/report.json
cat /app/report.json
