"""Terminal tables that fit the console without cutting a name.

Every terminal table of latlab is a ``FitTable``: a rich ``Table`` whose columns say
how they give way when the table is wider than the console. At render time, for the
width it is given, the table

1. leaves out the columns marked ``drop`` (rank 1 first, then 2, ...: the columns of a
   rank go together) until it fits with every header on one line and every name whole
   on one line, or nothing is left to drop;
2. then folds the ``fold`` columns (probe names, stream ids, spans, processes), the
   widest first, onto several lines, broken at a space or else after a ``/``, ``:``,
   ``>`` or ``,`` where it can;
3. and says under it, dimmed, which columns it left out and that ``--wide`` shows them.

Nothing is cut with an ellipsis: every column folds in the last resort (a console too
narrow even for the figures). ``emit(console, renderable, wide=True)`` prints at the
renderable's natural width instead, past the console's width if need be: all columns,
names on one line (``--wide``, and output to a file or pipe).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

UNBOUNDED = 10_000  # a width no table reaches: measures a renderable's natural width
FOLD_FLOOR = 8  # a folded column keeps at least this many characters a line
BREAK_AFTER = "/:>,→"  # a folded name breaks at a space, else after one of these
WIDE_HINT = "--wide shows every column"


class FitTable(Table):
    """A rich Table that drops low-priority columns, then folds names, to fit its width.

    ``add_column`` takes three more keywords: ``drop`` (rank at which the column is left
    out when the table is too wide: 1 first; ``None``: never), ``fold`` (an identifying
    column: folded onto several lines when the table is still too wide) and ``called``
    (the column's name in the note on what was left out; default: its header).
    """

    def __init__(self, *headers: Any, **kwargs: Any) -> None:
        self.drop_ranks: dict[int, int] = {}  # column index -> rank
        self.fold_columns: set[int] = set()
        self.called: dict[int, str] = {}
        super().__init__(*headers, **kwargs)

    def add_column(  # type: ignore[override]
        self,
        header: RenderableType = "",
        footer: RenderableType = "",
        *,
        drop: int | None = None,
        fold: bool = False,
        called: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Add a column; ``drop``: its rank in leaving out, ``fold``: a name column."""
        index = len(self.columns)
        super().add_column(header, footer, **kwargs)
        if drop is not None:
            self.drop_ranks[index] = drop
        if fold:
            self.fold_columns.add(index)
        self.called[index] = called or _header_text(header)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        fitted, dropped = fit_table(self, console, options.max_width)
        if fitted.title is not None:  # at the width given, not the table's (--wide, piped)
            yield self._title_text(console)
            fitted.title = None
        yield from Table.__rich_console__(fitted, console, options)
        if dropped:
            yield Text(
                f"left out to fit {options.max_width} columns: {', '.join(dropped)}; {WIDE_HINT}",
                style="dim",
            )

    def _title_text(self, console: Console) -> Text:
        """The title as a line of its own, folded at the width given, never cut."""
        title = self.title
        text = console.render_str(title) if isinstance(title, str) else title
        if isinstance(text, Text):
            text = text.copy()
            text.stylize(self.title_style or "table.title")
            text.justify = "default" if self.title_justify == "left" else self.title_justify
        return text  # type: ignore[return-value]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        measured = Table.__rich_measure__(self, console, options)
        title = self.title
        length = len(title.plain if isinstance(title, Text) else str(title or ""))
        return Measurement(measured.minimum, max(measured.maximum, length))


def natural_width(console: Console, renderable: RenderableType) -> int:
    """The width ``renderable`` takes when nothing limits it (a table: all on one line)."""
    options = console.options.update_width(UNBOUNDED)
    return Measurement.get(console, options, renderable).maximum


def fit_table(table: FitTable, console: Console, width: int) -> tuple[Table, list[str]]:
    """A plain copy of ``table`` that fits ``width``, and the names of the columns left out."""
    kept = list(range(len(table.columns)))
    dropped: list[str] = []
    for rank in sorted(set(table.drop_ranks.values())):
        if natural_width(console, _with_columns(table, kept)) <= width:
            break
        gone = [i for i in kept if table.drop_ranks.get(i) == rank]
        kept = [i for i in kept if i not in gone]
        dropped += [table.called[i] for i in gone]
    fitted = _with_columns(table, kept)
    excess = natural_width(console, fitted) - width
    if excess > 0:
        fold = {new for new, old in enumerate(kept) if old in table.fold_columns}
        _squeeze(fitted, console, fold, excess)
    return fitted, dropped


def _with_columns(table: FitTable, indices: Iterable[int]) -> Table:
    """A plain Table like ``table`` with only the columns at ``indices`` (copies)."""
    fitted = copy.copy(table)
    fitted.__class__ = Table
    fitted.columns = []
    for new, old in enumerate(indices):
        column = copy.copy(table.columns[old])
        column._index = new
        column._cells = list(column._cells)
        fitted.columns.append(column)
    return fitted


def _header_text(header: RenderableType) -> str:
    text = header.plain if isinstance(header, Text) else str(header)
    return " ".join(text.split())


def _squeeze(table: Table, console: Console, fold: set[int], excess: int) -> None:
    """Take ``excess`` characters off the columns, each step only if the one before was not
    enough: wrap the other columns' headers at their words; fold the fold columns, the
    widest first; split those headers' words and fold names to ``FOLD_FLOOR``; in a
    console too narrow even for that, split the figures too (never cut anything)."""
    columns = table.columns
    natural = [_content_width(console, column) for column in columns]
    cells = [_cells_width(console, column) for column in columns]
    words = [_longest_word(column.header) for column in columns]
    steps = [
        {i: max(words[i], cells[i]) for i in range(len(columns)) if i not in fold},
        {i: min(natural[i], max(FOLD_FLOOR, words[i])) for i in fold},
        {i: min(natural[i], FOLD_FLOOR) if i in fold else cells[i] for i in range(len(columns))},
        dict.fromkeys(range(len(columns)), 1),
    ]
    widths = list(natural)
    for floors in steps:
        excess = _narrow(widths, floors, excess)
    for i, column in enumerate(columns):
        column.overflow = "fold"
        if widths[i] < natural[i]:
            column.width = widths[i]
        if i in fold and widths[i] < natural[i]:
            column.justify = "left"  # a folded name's lines start under each other
            column._cells = [_broken(console, cell, widths[i]) for cell in column._cells]


def _narrow(widths: list[int], floors: dict[int, int], excess: int) -> int:
    """Take up to ``excess`` off ``widths`` (in place), one at a time from the widest
    column that is above its floor; return what is left to take."""
    while excess > 0:
        narrowable = [i for i, floor in floors.items() if widths[i] > floor]
        if not narrowable:
            break
        widest = max(narrowable, key=lambda i: (widths[i], -i))
        widths[widest] -= 1
        excess -= 1
    return excess


def _content_width(console: Console, column: Column) -> int:
    """The width of a column's widest cell or header, all on one line."""
    return max(natural_width(console, column.header), _cells_width(console, column))


def _cells_width(console: Console, column: Column) -> int:
    return max((natural_width(console, cell) for cell in column._cells), default=0)


def _longest_word(header: RenderableType) -> int:
    return max((len(word) for word in _header_text(header).split()), default=0)


def _broken(console: Console, cell: RenderableType, width: int) -> RenderableType:
    """A name cell broken into lines (``_break_line``) so that none exceeds ``width``."""
    if isinstance(cell, str):
        cell = console.render_str(cell, highlight=False)
    if not isinstance(cell, Text):
        return cell
    lines = [_break_line(line, width) for line in cell.split("\n")]
    return Text("\n").join(lines)


def _break_line(line: Text, width: int) -> Text:
    """``line`` broken into lines of at most ``width``: at a space where there is one,
    else after the last ``/``, ``:``, ``>``, ``,`` or ``→``, else anywhere."""
    plain = line.plain
    offsets = []
    start = 0
    while len(plain) - start > width:
        start += _break_at(plain[start : start + width + 1], width)
        offsets.append(start)
    if not offsets:
        return line
    parts = line.divide(offsets)
    for part in parts:
        part.rstrip()
    return Text("\n").join(part for part in parts if part.plain.strip())


def _break_at(chunk: str, width: int) -> int:
    """Where to end the first line of ``chunk`` (``width`` + 1 characters)."""
    space = chunk.rfind(" ")
    if space > 0:
        return space + 1
    mark = max(chunk.rfind(c, 0, width) for c in BREAK_AFTER)
    return mark + 1 if mark > 0 else width


class Unbounded:
    """Renders its renderable at its natural width, wider than the console if need be."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        renderable = self.renderable
        if isinstance(renderable, str):
            renderable = console.render_str(renderable)
        width = max(natural_width(console, renderable), options.max_width)
        yield from console.render(renderable, options.update(width=width))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        width = natural_width(console, self.renderable)
        return Measurement(width, width)


def emit(console: Console, renderable: RenderableType, *, wide: bool = False, **kw: Any) -> None:
    """Print ``renderable``; with ``wide``, at its natural width: every column of a table,
    names on one line, lines as long as that takes (past the console's width)."""
    if wide:
        console.print(Unbounded(renderable), crop=False, **kw)
    else:
        console.print(renderable, **kw)
