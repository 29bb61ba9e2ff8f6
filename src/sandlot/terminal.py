"""The consoles sandlot's commands print to.

On a terminal, rich wraps long lines to its width. Into a file or a pipe it would wrap
them at 80 columns too, splitting a path or a `fix: chmod +x PATH` across lines so it can
no longer be pasted or grepped; there, lines are written whole (tables still fit 80
columns, or $COLUMNS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def make_console(*, stderr: bool = False) -> Console:
    from rich.console import Console  # here: `sandlot --help` needs no rich

    console = Console(highlight=False, stderr=stderr)
    console.soft_wrap = not console.is_terminal
    return console
