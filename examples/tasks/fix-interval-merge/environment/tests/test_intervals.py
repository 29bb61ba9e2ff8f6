from intervals import find_gaps, merge_intervals, total_covered


def test_empty():
    assert merge_intervals([]) == []


def test_disjoint_sorted():
    assert merge_intervals([[5, 6], [1, 2]]) == [[1, 2], [5, 6]]


def test_overlapping():
    assert merge_intervals([[1, 4], [2, 6]]) == [[1, 6]]


def test_touching_intervals_merge():
    assert merge_intervals([[1, 3], [3, 5]]) == [[1, 5]]


def test_total_covered():
    assert total_covered([[0, 10], [20, 25]]) == 15


def test_gaps_simple():
    assert find_gaps([[2, 4], [6, 8]], 0, 10) == [[0, 2], [4, 6], [8, 10]]
