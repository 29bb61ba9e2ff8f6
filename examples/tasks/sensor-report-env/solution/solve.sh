#!/bin/bash
set -euo pipefail
mkdir -p /srv/service/bin
cat > /srv/service/bin/report <<'PY'
#!/usr/bin/env python3
"""Summarise $DATA_DIR/readings.csv into $REPORT_DIR/$SERVICE_NAME.json."""
import csv
import json
import math
import os

name = os.environ["SERVICE_NAME"]
data_dir = os.environ["DATA_DIR"]
report_dir = os.environ["REPORT_DIR"]
threshold = float(os.environ["ALERT_THRESHOLD"])

sensors, invalid = {}, 0
with open(os.path.join(data_dir, "readings.csv"), newline="") as fh:
    for row in csv.DictReader(fh):
        try:
            value = float(row["value"])
            if not math.isfinite(value):
                raise ValueError
        except (TypeError, ValueError):
            invalid += 1
            continue
        s = sensors.setdefault(row["sensor"], {"count": 0, "sum": 0.0, "max": value, "alerts": 0})
        s["count"] += 1
        s["sum"] += value
        s["max"] = max(s["max"], value)
        s["alerts"] += value > threshold

out = {
    "service": name,
    "threshold": threshold,
    "invalid_rows": invalid,
    "total_alerts": sum(s["alerts"] for s in sensors.values()),
    "sensors": {
        k: {"count": s["count"], "mean": round(s["sum"] / s["count"], 2), "max": s["max"], "alerts": s["alerts"]}
        for k, s in sorted(sensors.items())
    },
}
os.makedirs(report_dir, exist_ok=True)
with open(os.path.join(report_dir, f"{name}.json"), "w") as fh:
    json.dump(out, fh, indent=2)
PY
chmod +x /srv/service/bin/report
/srv/service/bin/report
echo "wrote $REPORT_DIR/$SERVICE_NAME.json"
