#!/bin/bash
set -euo pipefail
curl -fsS http://prices:8080/prices.csv > /tmp/prices.csv
curl -fsS http://prices:8080/orders.csv > /tmp/orders.csv
awk -F, 'FNR == 1 { next }
         FILENAME == "/tmp/prices.csv" { price[$1] = $2; next }
         { total += $3 * price[$2] }
         END { printf "%.2f\n", total }' /tmp/prices.csv /tmp/orders.csv > /app/total.txt
cat /app/total.txt
