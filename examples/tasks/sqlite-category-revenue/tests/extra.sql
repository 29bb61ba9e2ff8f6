-- Extra rows applied by the verifier to a second copy of the database, so that
-- a hard-coded answer cannot pass.
INSERT INTO products VALUES (50, 'Camp Stove', 'gear', 79.00);
INSERT INTO orders VALUES (100, 1, '2024-06-15 12:00:00', 'delivered');
INSERT INTO order_items VALUES (100, 8, 100, 2.25);
INSERT INTO order_items VALUES (100, 9, 30, 6.80);
INSERT INTO orders VALUES (101, 2, '2024-01-01 00:00:00', 'shipped');
INSERT INTO order_items VALUES (101, 50, 3, 75.00);
INSERT INTO order_items VALUES (101, 10, 4, 25.00);
INSERT INTO orders VALUES (102, 3, '2025-01-01 00:00:00', 'delivered');
INSERT INTO order_items VALUES (102, 4, 40, 149.00);
INSERT INTO orders VALUES (103, 4, '2024-03-03 10:00:00', 'cancelled');
INSERT INTO order_items VALUES (103, 6, 10, 299.00);
INSERT INTO orders VALUES (104, 5, '2024-09-09 09:09:09', 'returned');
INSERT INTO order_items VALUES (104, 2, 10, 119.00);
INSERT INTO orders VALUES (105, 6, '2024-11-30 18:00:00', 'pending');
INSERT INTO order_items VALUES (105, 1, 10, 89.90);
