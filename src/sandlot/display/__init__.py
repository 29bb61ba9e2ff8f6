"""What the user sees while a job runs and when it ends.

`make_display` picks the view for `sandlot run`: JSON lines (`--json-events`), nothing
but the final tables (`--quiet`), the live dashboard on a terminal, or one line per event
with heartbeats everywhere else. Every view is a job observer and a context manager (its
refresh or ticker thread runs while entered), and all of them read one `RunTracker`.
"""

from __future__ import annotations

import sys
from typing import IO

from rich.console import Console

from sandlot.display.dashboard import Dashboard
from sandlot.display.events import JsonEvents
from sandlot.display.plain import DEFAULT_HEARTBEAT_SEC, LinePrinter
from sandlot.display.tracker import DEFAULT_STALL_AFTER_SEC, RunTracker

__all__ = ["DEFAULT_HEARTBEAT_SEC", "DEFAULT_STALL_AFTER_SEC", "Dashboard", "JsonEvents",
           "LinePrinter", "RunTracker", "make_display"]


def make_display(console: Console, *, job_name: str, agent: str, model: str | None,
                 sandbox: str, n_planned: int, quiet: bool = False, json_events: bool = False,
                 heartbeat_sec: float = DEFAULT_HEARTBEAT_SEC,
                 stall_after_sec: float = DEFAULT_STALL_AFTER_SEC,
                 stdout: IO[str] | None = None) -> Dashboard | JsonEvents | LinePrinter:
    """The view for this run; `console` is where human-readable output goes."""
    tracker = RunTracker(job_name, agent, model, sandbox, n_planned,
                         stall_after_sec=stall_after_sec)
    if json_events:
        return JsonEvents(stdout or sys.stdout, tracker, heartbeat_sec=heartbeat_sec)
    if quiet:
        return LinePrinter(console, quiet=True, tracker=tracker)
    if console.is_terminal and not console.is_dumb_terminal:
        return Dashboard(console, tracker)
    return LinePrinter(console, tracker=tracker, heartbeat_sec=heartbeat_sec)
