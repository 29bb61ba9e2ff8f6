#!/bin/bash
set -euo pipefail
cat > /app/category_revenue.sql <<'SQL'
-- Revenue per product category for shipped/delivered orders placed in 2024.
WITH lines AS (
  SELECT IFNULL(p.category, 'uncategorized') AS category,
         oi.order_id,
         oi.quantity * oi.unit_price          AS amount
  FROM order_items AS oi
  JOIN orders      AS o ON o.id = oi.order_id
  JOIN products    AS p ON p.id = oi.product_id
  WHERE o.status IN ('shipped', 'delivered')
    AND o.ordered_at >= '2024-01-01 00:00:00'
    AND o.ordered_at <  '2025-01-01 00:00:00'
)
SELECT category,
       ROUND(SUM(amount), 2)    AS revenue,
       COUNT(DISTINCT order_id) AS order_count
FROM lines
GROUP BY category
HAVING SUM(amount) >= 500
ORDER BY revenue DESC, category ASC;
SQL
sqlite3 -header -column /app/shop.db < /app/category_revenue.sql
