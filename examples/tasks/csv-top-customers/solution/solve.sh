#!/bin/bash
set -euo pipefail
cat > /app/top_customers.sh <<'SH'
#!/bin/bash
# Usage: top_customers.sh [CSV_FILE] [N]
set -euo pipefail
export LC_ALL=C
csv="${1:-/app/sales.csv}"
n="${2:-3}"
tail -n +2 "$csv" \
  | awk -F, '$7 == "completed" { rev[$3] += $5 * $6 } END { for (c in rev) printf "%s,%.2f\n", c, rev[c] }' \
  | sort -t, -k2,2nr -k1,1 \
  | head -n "$n"
SH
chmod +x /app/top_customers.sh
/app/top_customers.sh
