"""Plain-text tables whose column widths come from the data, for the command line."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["text_table"]


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    """Lay ``rows`` out under ``headers``, each column as wide as its widest cell.

    The first column is left-aligned (it names the row), the others right-aligned (numbers);
    columns are two spaces apart, so values never run together however large they get.
    """
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return (indent + "  ".join(parts)).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])
