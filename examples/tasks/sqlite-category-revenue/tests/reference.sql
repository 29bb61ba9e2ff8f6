SELECT COALESCE(p.category, 'uncategorized')       AS category,
       ROUND(SUM(oi.quantity * oi.unit_price), 2)  AS revenue,
       COUNT(DISTINCT o.id)                        AS order_count
FROM orders o
JOIN order_items oi ON oi.order_id = o.id
JOIN products p     ON p.id = oi.product_id
WHERE o.status IN ('shipped', 'delivered')
  AND o.ordered_at >= '2024-01-01' AND o.ordered_at < '2025-01-01'
GROUP BY COALESCE(p.category, 'uncategorized')
HAVING SUM(oi.quantity * oi.unit_price) >= 500
ORDER BY revenue DESC, category ASC
