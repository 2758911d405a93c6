"""Small HTML tables of what a page measured: one row per thing, one column per quantity.

A page that compares a few measured values (the first step against the others, one run
against another) shows them with :func:`value_table` instead of printing aligned text, which
wraps or runs off the page's output box. The table has the site's table style (the
``pu-table`` class of the profiler table); every cell is escaped, since kernel names hold
``<``, ``>`` and ``&``.

Example::

    from profiling_utils.stats import Distribution

    others = Distribution.of(widths[1:], unit="µs")
    value_table(
        ["", "first step", "other steps"],
        [["step width (µs)", widths[0], others]],
        caption="50 recorded steps",
    )
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from profiling_utils.stats import Distribution

from .html import HtmlFragment

__all__ = ["Cell", "format_cell", "value_table"]

Cell = str | int | float | Distribution | None
"""What a table cell may hold: text, a number, a distribution, or nothing (shown as ``—``)."""


def format_cell(value: Cell) -> str:
    """A cell's text: floats with one decimal and thousands separators (``2,226.6``), ints
    with separators, a :class:`~profiling_utils.stats.Distribution` as its median and
    interquartile range (``52.4 (IQR 51.0–57.1)``), ``None`` as ``—``, text as it is."""
    if value is None:
        return "—"
    if isinstance(value, Distribution):
        q1, q3 = value.quartiles
        return f"{value.median:,.1f} (IQR {q1:,.1f}–{q3:,.1f})"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}" if math.isfinite(value) else str(value)
    return str(value)


def value_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    *,
    caption: str | None = None,
) -> HtmlFragment:
    """An HTML table of measured values, with the first column naming each row.

    Numbers and distributions are right-aligned; text (names) is left-aligned and may wrap.

    Args:
        columns: The column headings, the first one over the row names (may be ``""``).
        rows: One sequence of cells per row, as many as ``columns``; see :func:`format_cell`.
        caption: A caption above the table.

    Returns:
        An :class:`~profiling_utils.render.html.HtmlFragment` holding a
        ``<table class="pu-table pu-value-table">``.

    Raises:
        ValueError: No columns, or a row whose length is not the number of columns.
    """
    if not columns:
        raise ValueError("value_table needs at least one column")
    for index, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(
                f"row {index} has {len(row)} cells for {len(columns)} columns: {list(row)!r}"
            )
    head = "".join(f'<th scope="col">{html.escape(name)}</th>' for name in columns)
    body = []
    for name, *values in rows:
        cells = [f'<th scope="row" class="pu-name">{html.escape(format_cell(name))}</th>']
        for value in values:
            css = "pu-num" if isinstance(value, int | float | Distribution) else "pu-text"
            cells.append(f'<td class="{css}">{html.escape(format_cell(value))}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    caption_html = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return HtmlFragment(
        '<div class="pu-table-scroll"><table class="pu-table pu-value-table">'
        f"{caption_html}<thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
