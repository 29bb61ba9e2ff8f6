"""Run /app/category_revenue.sql on fresh databases and compare with the reference query."""
import os
import random
import sqlite3

import pytest

QUERY = "/app/category_revenue.sql"
SHIPPED_DB = "/app/shop.db"
SCHEMA = "/tests/schema.sql"        # verifier's pristine copy of /app/schema.sql
EXTRA = "/tests/extra.sql"          # extra rows the agent never saw
REFERENCE = "/tests/reference.sql"  # the reference query
COLUMNS = ["category", "revenue", "order_count"]


def read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def build(*scripts):
    """A fresh in-memory database from the pristine schema plus extra SQL text."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(read(SCHEMA))
    for script in scripts:
        conn.executescript(script)
    return conn


def run(conn, sql):
    cur = conn.execute(sql)
    names = [d[0] for d in cur.description] if cur.description else []
    return names, cur.fetchall()


def reference(conn):
    return run(conn, read(REFERENCE))[1]


def random_data(seed):
    """Orders around the 2024 boundaries, every status, a new and a NULL category."""
    rng = random.Random(seed)
    sql = ["INSERT INTO products VALUES (60, 'Bike Light', 'cycling', 19.99);",
           "INSERT INTO products VALUES (61, 'Saddle Bag', 'cycling', 39.00);",
           "INSERT INTO products VALUES (62, 'Sticker Pack', NULL, 3.00);"]
    products = list(range(1, 12)) + [60, 61, 62]
    stamps = ["2023-12-31 23:59:59", "2024-01-01 00:00:00", "2024-12-31 23:59:59",
              "2025-01-01 00:00:00", "2024-02-29 12:00:00", "2025-06-01 08:00:00"]
    statuses = ["pending", "shipped", "delivered", "cancelled", "returned"]
    for oid in range(200, 320):
        stamp = rng.choice(stamps) if rng.random() < 0.3 else (
            f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00")
        sql.append(f"INSERT INTO orders VALUES ({oid}, {rng.randint(1, 8)}, '{stamp}', "
                   f"'{rng.choice(statuses)}');")
        for pid in rng.sample(products, rng.randint(1, 4)):
            sql.append(f"INSERT INTO order_items VALUES ({oid}, {pid}, {rng.randint(1, 6)}, "
                       f"{rng.randint(100, 30000) / 100:.2f});")
    return "\n".join(sql)


@pytest.fixture(scope="module")
def query():
    assert os.path.isfile(QUERY), f"{QUERY} not found"
    sql = read(QUERY)
    assert sql.strip(), f"{QUERY} is empty"
    assert not any(l.lstrip().startswith(".") for l in sql.splitlines()), \
        "sqlite3 dot-commands are not allowed in the query file"
    return sql


def check(conn, sql, want):
    names, got = run(conn, sql)
    assert names == COLUMNS, f"columns are {names}, want {COLUMNS}"
    assert len(got) == len(want), f"got {len(got)} rows, want {len(want)}:\n{got}\nvs\n{want}"
    for g, w in zip(got, want):
        assert g[0] == w[0], f"row order/category differs: got {got}, want {want}"
        assert isinstance(g[1], (int, float)), f"revenue must be a number, got {g[1]!r}"
        assert abs(g[1] - w[1]) < 1e-6, f"{w[0]}: revenue {g[1]!r}, want {w[1]!r}"
        assert isinstance(g[2], int) and g[2] == w[2], f"{w[0]}: order_count {g[2]!r}, want {w[2]!r}"


def test_shipped_database(query):
    """On /app/shop.db itself (opened read-only): must match the pristine data's answer."""
    want = reference(build())
    assert len(want) >= 3
    conn = sqlite3.connect(f"file:{SHIPPED_DB}?mode=ro", uri=True)
    try:
        check(conn, query, want)
    finally:
        conn.close()


def test_fresh_copy(query):
    conn = build()
    check(conn, query, reference(conn))


def test_extra_data(query):
    conn = build(read(EXTRA))
    want = reference(conn)
    assert want != reference(build()), "fixture: extra data must change the answer"
    check(conn, query, want)


def test_random_data(query):
    conn = build(random_data(7))
    want = reference(conn)
    assert len(want) >= 4 and any(r[0] == "cycling" for r in want)
    check(conn, query, want)


def test_no_matching_orders(query):
    conn = build("UPDATE orders SET status = 'pending';")
    check(conn, query, [])
