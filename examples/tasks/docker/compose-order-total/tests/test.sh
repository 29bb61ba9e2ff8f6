#!/bin/bash
# Verifier for compose-order-total: recomputes the total from the live service.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
set -o pipefail
prices=$(curl -fsS --max-time 10 http://prices:8080/prices.csv) || { echo "service unreachable"; exit 0; }
orders=$(curl -fsS --max-time 10 http://prices:8080/orders.csv) || { echo "service unreachable"; exit 0; }
# Sum in cents with integers only, so rounding cannot differ from the agent's.
expected=$(awk -F, 'FNR == 1 { next }
  NR == FNR { split($2, p, "."); cents[$1] = p[1] * 100 + substr(p[2] "00", 1, 2); next }
  { total += $3 * cents[$2] }
  END { printf "%d.%02d\n", total / 100, total % 100 }' <(echo "$prices") <(echo "$orders"))
actual=$(cat /app/total.txt 2>/dev/null)
echo "expected $expected, got ${actual:-nothing}"
if [[ "$actual" == "$expected" && $(tail -c1 /app/total.txt | od -An -c | tr -d ' ') == '\n' ]]; then
  echo 1 > /logs/verifier/reward.txt
fi
