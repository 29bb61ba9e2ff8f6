"""Tables that fit the terminal without cutting a number.

Rich squeezes a table that is too wide by shortening every column, numbers included, and
ellipsises what no longer fits ("0.…", "$1.…"). A figure cut like that is worse than no
figure. So sandlot's tables size their columns here instead: a number column is exactly as
wide as its widest cell; a text column wraps (at spaces, then within a word); and when even
that does not fit, whole columns are dropped in the order the caller states, so what is
shown is always whole. The widths are handed to rich as fixed ones, so rich never shrinks.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

# The least width a wrapping text column is squeezed to before columns are dropped.
TEXT_MIN_WIDTH = 12


@dataclass(frozen=True)
class Column:
    """How one column behaves when space runs out.

    kind: "number" cells are never wrapped or cut; "words" cells wrap between words but
    never within one (values like "12.3k / 4.5k"); "text" cells wrap anywhere (names).
    drop_rank: columns are dropped lowest rank first when the table does not fit; None
    means the column is always shown.
    """

    header: str
    kind: Literal["number", "words", "text"] = "number"
    drop_rank: int | None = None

    @property
    def justify(self) -> Literal["left", "right"]:
        return "right" if self.kind == "number" else "left"


def _plain(cell: str) -> Text:
    return Text.from_markup(cell)


def _widest_word(text: Text) -> int:
    return max((len(word) for line in text.plain.splitlines() for word in line.split()),
               default=0)


def _natural(column: Column, cells: list[Text]) -> int:
    """The width the column takes when there is room: its widest line, header included."""
    lines = [len(line) for c in cells for line in c.plain.splitlines()] or [0]
    return max(max(lines), len(column.header))


def _least(column: Column, cells: list[Text]) -> int:
    """The width below which the column would cut something it must not."""
    header = _widest_word(Text(column.header))
    if column.kind == "number":
        return max([header] + [len(line) for c in cells for line in c.plain.splitlines()])
    if column.kind == "words":
        return max([header] + [_widest_word(c) for c in cells])
    return min(_natural(column, cells), max(TEXT_MIN_WIDTH, header))


def _overhead(n_columns: int, style: dict[str, object]) -> int:
    """The borders and padding rich draws around `n_columns` columns: measured, not assumed."""
    probe = Table(**style)  # type: ignore[arg-type]
    for _ in range(n_columns):
        probe.add_column(width=1)
    probe.add_row(*["x"] * n_columns)
    console = Console(width=10_000, file=io.StringIO())
    lines = console.render_lines(probe, console.options, pad=False)
    return max(sum(len(seg.text) for seg in line) for line in lines) - n_columns


def fit_table(columns: list[Column], rows: list[list[str]], width: int,
              title: str | None = None, show_header: bool = True) -> tuple[Table, list[str]]:
    """A table of `rows` (rich markup cells) at most `width` wide; also the headers left out.

    Columns are dropped by `drop_rank` until the rest fits at their least widths; spare
    room then goes to the wrapping columns, narrowest need first.
    """
    style: dict[str, object] = {"box": box.SIMPLE_HEAD, "show_header": show_header,
                                "pad_edge": False, "show_edge": False, "padding": (0, 1, 0, 0)}
    texts = [[_plain(cell) for cell in row] for row in rows]
    cells = {i: [row[i] for row in texts] for i in range(len(columns))}
    kept = list(range(len(columns)))
    least = {i: _least(columns[i], cells[i]) for i in kept}

    def need(idx: list[int]) -> int:
        return _overhead(len(idx), style) + sum(least[i] for i in idx)

    droppable = sorted((c.drop_rank, i) for i, c in enumerate(columns) if c.drop_rank is not None)
    for _, i in droppable:
        if need(kept) <= width:
            break
        kept.remove(i)
    widths = {i: least[i] for i in kept}
    spare = width - need(kept)
    growing = [i for i in kept if columns[i].kind != "number"]
    # Room first goes to whole words (no name split mid-word), then to whole lines.
    for target in (lambda i: max(_widest_word(c) for c in cells[i]) if cells[i] else 0,
                   lambda i: _natural(columns[i], cells[i])):
        spare = _grow(widths, {i: target(i) for i in growing}, spare)
    table = Table(title=title, title_justify="left", **style)  # type: ignore[arg-type]
    for i in kept:
        col = columns[i]
        # A number column is as wide as its widest cell, so only its header ever wraps.
        table.add_column(col.header, justify=col.justify, width=widths[i], overflow="fold")
    for row in rows:
        table.add_row(*[row[i] for i in kept])
    return table, [columns[i].header for i in range(len(columns)) if i not in kept]


def _grow(widths: dict[int, int], targets: dict[int, int], spare: int) -> int:
    """Widen columns toward their targets, the smallest need first and met whole while
    `spare` lasts (a whole word beats two half ones); returns what is left."""
    for i in sorted(targets, key=lambda i: targets[i] - widths[i]):
        grow = max(0, min(spare, targets[i] - widths[i]))
        widths[i] += grow
        spare -= grow
    return spare


@dataclass
class FittedTable:
    """A table sized when it is printed, to whatever width the console has; a dim line
    under it names the columns left out, so a narrow terminal never hides them silently."""

    columns: list[Column]
    rows: list[list[str]]
    title: str | None = None
    show_header: bool = True

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table, dropped = fit_table(self.columns, self.rows, options.max_width,
                                   title=self.title, show_header=self.show_header)
        yield table
        if dropped:
            yield Text(f"(not shown at {options.max_width} columns: {', '.join(dropped)})",
                       style="dim")
