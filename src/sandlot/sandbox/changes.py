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

ChangeKind = Literal["added", "modified", "deleted"]


@dataclass(frozen=True)
class Change:
    path: str
    kind: ChangeKind


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def walk_upper(upper: Path, bases: list[Path], ignore: set[str],
               limit: int = 200_000) -> list[Change]:
    """Files (not folders) in `upper`, classified against the lower `bases` (first wins)."""
    out: list[Change] = []
    for dirpath, dirnames, filenames in os.walk(upper):
        rel_dir = "/" + os.path.relpath(dirpath, upper).lstrip(".").lstrip("/")
        # Folders sandlot masked are walked too (a hook in /root counts); only the mask
        # entries themselves are not changes.
        for name in filenames + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            path = _join(rel_dir, name)
            if path in ignore:
                continue
            try:
                st = os.lstat(Path(dirpath) / name)
            except OSError:
                continue
            if _is_whiteout(st):
                out.append(Change(path, "deleted"))
            else:
                existed = any(os.path.lexists(base / path.lstrip("/")) for base in bases)
                out.append(Change(path, "modified" if existed else "added"))
            if len(out) >= limit:
                return out
    return out


def _join(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{name}"
