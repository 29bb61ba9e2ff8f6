"""Where sandlot keeps its cache (layers, scratch space, agent installs)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """$SANDLOT_CACHE_DIR, else $XDG_CACHE_HOME/sandlot, else ~/.cache/sandlot."""
    if env := os.environ.get("SANDLOT_CACHE_DIR"):
        return Path(env).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(base) / "sandlot").resolve()
