#!/bin/bash
set -euo pipefail
cat > /app/semver.py <<'PY'
"""Semantic version utilities. See /app/spec.md."""
import functools
import re

_NUM = r"0|[1-9][0-9]*"
_PRE = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_RE = re.compile(
    rf"^({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-({_PRE}(?:\.{_PRE})*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


def _parse(version):
    m = _RE.fullmatch(version) if isinstance(version, str) else None
    if not m:
        raise ValueError(f"invalid semantic version: {version!r}")
    core = tuple(int(x) for x in m.group(1, 2, 3))
    pre = m.group(4).split(".") if m.group(4) is not None else None
    return core, pre


def is_valid(version: str) -> bool:
    try:
        _parse(version)
        return True
    except ValueError:
        return False


def _cmp(x, y):
    return (x > y) - (x < y)


def _cmp_ident(a, b):
    an, bn = a.isdigit(), b.isdigit()
    if an and bn:
        return _cmp(int(a), int(b))
    if an != bn:
        return -1 if an else 1
    return _cmp(a, b)


def compare(a: str, b: str) -> int:
    (ca, pa), (cb, pb) = _parse(a), _parse(b)
    if ca != cb:
        return _cmp(ca, cb)
    if pa is None or pb is None:
        return _cmp(pa is None, pb is None)
    for x, y in zip(pa, pb):
        c = _cmp_ident(x, y)
        if c:
            return c
    return _cmp(len(pa), len(pb))


def sort_versions(versions: list) -> list:
    for v in versions:
        _parse(v)
    return sorted(versions, key=functools.cmp_to_key(compare))
PY
python3 -c "import sys; sys.path.insert(0, '/app'); import semver; print(semver.compare('1.0.0-rc.1', '1.0.0'))"
