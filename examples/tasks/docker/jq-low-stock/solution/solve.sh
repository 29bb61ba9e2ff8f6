#!/bin/bash
set -euo pipefail
cat > /app/low_stock.sh <<'SH'
#!/bin/bash
# Usage: low_stock.sh [JSON_FILE]
set -euo pipefail
jq -r '.warehouses[] | .name as $w | .items[]
       | select(.quantity < .reorder_level)
       | "\(.sku),\($w),\(.reorder_level - .quantity)"' "${1:-/app/inventory.json}" \
  | LC_ALL=C sort -t, -k1,1 -k2,2
SH
chmod +x /app/low_stock.sh
/app/low_stock.sh
