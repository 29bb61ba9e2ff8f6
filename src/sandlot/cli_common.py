"""What every sandlot command does the same way: say a bad input in one red line and exit
with the code that tells a script what kind of failure it was."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from sandlot.exit_codes import ExitCode


def fail(console: Console, message: str, code: ExitCode = ExitCode.USAGE) -> typer.Exit:
    """Prints `message` as one error line and returns the Exit to raise (so a caller
    writes `raise fail(...)` and a type checker sees the function end there)."""
    console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    return typer.Exit(code)
