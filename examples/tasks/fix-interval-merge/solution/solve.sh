#!/bin/bash
set -euo pipefail
# Reference fix: copy the first interval, merge touching intervals (<=),
# keep the larger end for contained intervals, and never emit zero-length gaps.
cat > /app/intervals.py <<'PY'
"""Utilities for closed integer intervals ``[start, end]`` (start <= end)."""


def merge_intervals(intervals):
    """Return a new sorted list of disjoint intervals.

    Intervals that overlap or touch (``[1, 3]`` and ``[3, 5]``) are merged.
    The input is never modified.
    """
    if not intervals:
        return []
    ordered = sorted(intervals)
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return merged


def total_covered(intervals):
    """Total length covered by the union of the intervals."""
    return sum(end - start for start, end in merge_intervals(intervals))


def find_gaps(intervals, lo, hi):
    """Uncovered sub-ranges of ``[lo, hi]`` as ``[start, end]`` with start < end."""
    gaps = []
    cursor = lo
    for start, end in merge_intervals(intervals):
        if end < lo:
            continue
        if start > hi:
            break
        if start > cursor:
            gaps.append([cursor, min(start, hi)])
        cursor = max(cursor, end)
    if cursor < hi:
        gaps.append([cursor, hi])
    return gaps
PY
cd /app && python3 -m pytest -q -p no:cacheprovider tests
