#!/bin/bash
got=$(python3 - <<'PY'
import time, urllib.request
for _ in range(100):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8080/answer.txt").read().decode().strip())
        break
    except OSError:
        time.sleep(0.1)
PY
)
echo "the server answered: $got"
[ "$got" = served ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
