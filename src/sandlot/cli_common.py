"""What sandlot's commands do the same way: say a bad input in one red line and exit with
the code that tells a script what kind of failure it was; list a task's problems with
their file, field and fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from sandlot.exit_codes import ExitCode

if TYPE_CHECKING:
    from rich.console import Console


def escape(text: str) -> str:
    """rich's markup escape, imported when first needed (`--help` needs no rich)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def fail(console: Console, message: str, code: ExitCode = ExitCode.USAGE) -> typer.Exit:
    """Prints `message` as one error line and returns the Exit to raise (so a caller
    writes `raise fail(...)` and a type checker sees the function end there)."""
    console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte...
        return False


def print_problems(console: Console, problems: list) -> None:  # type: ignore[type-arg]
    for p in problems:
        color = "red" if p.severity == "error" else "yellow"
        field = " " + escape(f"[{p.field}]") if p.field else ""
        console.print(f"[{color}]{p.severity}[/] {escape(p.task)}/{escape(p.file)}{field}: "
                      f"{escape(p.message)}\n    [dim]fix:[/] {escape(p.fix)}", soft_wrap=True)


def print_warning_groups(console: Console, warnings: list, limit: int = 10) -> None:  # type: ignore[type-arg]
    """One line per kind of warning, not per task: a dataset's own key in 500 tasks is
    one line saying so, while a typo in one task still stands out."""
    groups: dict[tuple[str, str, str], list] = {}  # type: ignore[type-arg]
    for p in warnings:
        key = re.sub(r" \(line \d+\)$", "", p.field or "")
        groups.setdefault((p.file, key, p.message), []).append(p)
    for n, ((file, _key, message), items) in enumerate(groups.items()):
        if n == limit:
            console.print(f"[yellow]… and {len(groups) - limit} more kinds of warning "
                          "(see `sandlot tasks check`)[/]")
            return
        first = items[0]
        field = f": {first.field}" if first.field else ""
        more = f" (and {len(items) - 1} more tasks)" if len(items) > 1 else ""
        console.print(escape(f"warning: {first.task}/{file}{field}: {message}{more} "
                             f"(fix: {first.fix})"), style="yellow", soft_wrap=True)
