"""A task's name: its folder's name, also when the folder is given as `.` or `..`."""

from __future__ import annotations

from pathlib import Path


def task_name(path: Path) -> str:
    """`sandlot run .` inside a task folder names the task after that folder, not ``."""
    return path.name if path.name not in ("", ".", "..") else path.resolve().name
