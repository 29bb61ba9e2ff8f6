"""What a trial changed in its sandbox's root, read from its overlay upper directory.

The upper directory of an overlay holds exactly the files a trial created or modified
(and whiteouts for what it deleted), so the verifier can be shielded from planted hooks
without diffing the whole filesystem.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sandlot.sandbox.bounded_fs import (
    DEFAULT_WALK_LIMITS,
    WalkLimits,
    exists_inside,
    walk,
)

ChangeKind = Literal["added", "modified", "deleted"]


@dataclass(frozen=True, slots=True)
class Change:
    """One path the trial changed (slots: a change list may hold 200,000 of them)."""

    path: str
    kind: ChangeKind


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def walk_upper(upper: Path, bases: list[Path], ignore: set[str],
               limits: WalkLimits = DEFAULT_WALK_LIMITS,
               hidden: set[str] | frozenset[str] = frozenset()) -> list[Change]:
    """Files (not folders) in `upper`, classified against the lower `bases` (first wins),
    sorted. The upper folder is the agent's: it is walked by bounded_fs (no link
    followed, no recursion), and past its limits CapExceeded says the change set is not
    known, which the caller must not take for "nothing more changed"."""
    out: list[Change] = []
    # Folders sandlot masked are walked too (a hook in /root counts); only the mask
    # entries themselves are not changes.
    for entry in walk(upper, limits):
        if entry.is_dir or entry.path in ignore:
            continue
        if _is_whiteout(entry.stat):
            out.append(Change(entry.path, "deleted"))
        else:
            # Inside a folder the sandbox hides, the bases' (the host's) files were never
            # there: all of it is the trial's own.
            existed = not below_any(entry.path, hidden) and any(
                exists_inside(base, entry.path) for base in bases)
            out.append(Change(entry.path, "modified" if existed else "added"))
    return sorted(out, key=lambda c: c.path)


def below_any(path: str, folders: set[str] | frozenset[str]) -> bool:
    """Is `path` one of `folders` or inside one?"""
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)
