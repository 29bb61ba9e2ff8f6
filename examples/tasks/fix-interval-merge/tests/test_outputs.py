"""Hidden tests: compare /app/intervals.py against an independent reference."""
import copy
import importlib.util
import random

import pytest


def load():
    spec = importlib.util.spec_from_file_location("intervals_under_test", "/app/intervals.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def iv():
    return load()


# ---- independent reference (point-coverage based, no shared code) ----------
def ref_merge(intervals):
    out = []
    for s, e in sorted((s, e) for s, e in intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def ref_gaps(intervals, lo, hi):
    gaps, cur = [], lo
    for s, e in ref_merge(intervals):
        s2, e2 = max(s, lo), min(e, hi)
        if s2 > e2:
            continue
        if s2 > cur:
            gaps.append([cur, s2])
        cur = max(cur, e2)
    if cur < hi:
        gaps.append([cur, hi])
    return gaps


def test_basic_cases(iv):
    assert iv.merge_intervals([]) == []
    assert iv.merge_intervals([[1, 3], [3, 5]]) == [[1, 5]]
    assert iv.merge_intervals([[1, 10], [2, 3]]) == [[1, 10]]
    assert iv.merge_intervals([[4, 4], [1, 2], [2, 4]]) == [[1, 4]]
    assert iv.merge_intervals([[0, 1], [2, 3]]) == [[0, 1], [2, 3]]


def test_contained_interval_does_not_shrink(iv):
    assert iv.merge_intervals([[0, 100], [10, 20], [30, 40]]) == [[0, 100]]
    assert iv.total_covered([[0, 100], [10, 20]]) == 100


def test_input_not_mutated(iv):
    data = [[5, 8], [1, 3], [2, 6], [8, 9]]
    snapshot = copy.deepcopy(data)
    result = iv.merge_intervals(data)
    assert data == snapshot
    result[0][1] = 999
    assert data == snapshot


def test_gaps_no_zero_length(iv):
    assert iv.find_gaps([[0, 10]], 0, 10) == []
    assert iv.find_gaps([[2, 4], [4, 6]], 0, 6) == [[0, 2]]
    assert iv.find_gaps([], 3, 7) == [[3, 7]]
    assert iv.find_gaps([[5, 20]], 0, 10) == [[0, 5]]


def test_randomized_against_reference(iv):
    rng = random.Random(2024)
    for _ in range(500):
        n = rng.randint(0, 8)
        data = []
        for _ in range(n):
            s = rng.randint(0, 40)
            data.append([s, s + rng.randint(0, 10)])
        snapshot = copy.deepcopy(data)
        assert iv.merge_intervals(data) == ref_merge(data), data
        assert data == snapshot
        assert iv.total_covered(data) == sum(e - s for s, e in ref_merge(data))
        lo = rng.randint(0, 20)
        hi = lo + rng.randint(0, 30)
        assert iv.find_gaps(data, lo, hi) == ref_gaps(data, lo, hi), (data, lo, hi)
