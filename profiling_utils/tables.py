"""Plain text for the command line and the findings: tables whose column widths come from the
data, shares written as percentages, and sizes in bytes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = [
    "PAGE_WIDTH",
    "byte_size",
    "cut",
    "distinct_cuts",
    "percent",
    "text_table",
    "without_float_noise",
]

PAGE_WIDTH = 88
"""Characters in a line of a gallery page's code and output boxes."""


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


def cut(text: str, width: int) -> str:
    """``text``, or its first ``width - 1`` characters and ``…`` when it is longer: kernel
    names run to hundreds of characters, and a clipped one must say so. Line breaks and tabs
    show as ``\\n``, ``\\r`` and ``\\t``: a Python frame's name can hold one, and a table's
    row must stay one line."""
    if width < 1:
        raise ValueError(f"width must be positive, not {width}")
    text = text.translate(_ONE_LINE)
    return text if len(text) <= width else text[: width - 1] + "…"


_ONE_LINE = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def distinct_cuts(names: Sequence[str], width: int) -> list[str]:
    """``names`` each :func:`cut` to ``width``, except where two would then read the same
    (kernels whose names differ only in a template argument past the cut): those show their
    start, ``…``, and the stretch around where they first differ from the names they still
    read like (several rounds, for names that differ in more than one place); in full where
    even that would not tell them apart."""
    cuts = [cut(name, width) for name in names]
    half = max(width // 2, 4)
    for _ in range(_DISTINCT_ROUNDS):
        clashes: dict[str, list[int]] = {}
        for index, short in enumerate(cuts):
            clashes.setdefault(short, []).append(index)
        alike_sets = [group for group in clashes.values() if len({names[i] for i in group}) > 1]
        if not alike_sets:
            return cuts
        for group in alike_sets:
            for index in group:
                name = names[index]
                others = [names[i] for i in group if names[i] != name]
                differ = min(_first_difference(name, other) for other in others)
                room = width - half - 1  # head, …, room, …
                start = _stretch_start(name, differ, half - 1, room)
                tail = "…" if start + room < len(name) else ""
                cuts[index] = f"{name[: half - 1]}…{name[start : start + room]}{tail}"
    again = Counter(cuts)
    if len(again) < len(set(names)):  # still alike: in full
        cuts = [
            name if again[short] > 1 else short for name, short in zip(names, cuts, strict=True)
        ]
    return cuts


_DISTINCT_ROUNDS = 4
"""How many times :func:`distinct_cuts` moves the stretch it shows of names that still read
alike before it gives them in full."""


def _stretch_start(name: str, differ: int, earliest: int, room: int) -> int:
    """Where the stretch of ``room`` characters shown around ``differ`` starts: at the word
    that holds it (a long one, snake_case: 10 characters before it); where that word is a
    number or a letter or two (``Metadata<3>``), at the name of the template or call around
    it, as far back as leaves a few characters after ``differ`` in the stretch; where the
    names differ in punctuation, 10 characters before it. Never before ``earliest`` (the
    head shown)."""
    floor = max(differ - (room - 8), earliest)
    fallback = max(differ - 10, earliest)
    if differ >= len(name) or not _in_word(name[differ]):
        return fallback
    start, end = differ, differ
    while start > floor and _in_word(name[start - 1]):
        start -= 1
    if start == floor and start > earliest and _in_word(name[start - 1]):
        return fallback  # a long word: 10 characters of it
    while end < len(name) and _in_word(name[end]):
        end += 1
    if end - start >= 3:
        return start
    depth, opening = 0, start - 1
    while opening >= floor:
        if name[opening] in ">)":
            depth += 1
        elif name[opening] in "<(":
            if depth == 0:
                break
            depth -= 1
        opening -= 1
    if opening < floor:
        return start
    start = opening
    while start > floor and _in_word(name[start - 1]):
        start -= 1
    return start


def _in_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _first_difference(a: str, b: str) -> int:
    pairs = enumerate(zip(a, b, strict=False))  # up to the shorter's end
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def percent(share: float) -> str:
    """A share as a percentage: ``0.72 -> "72%"``. Near 100% one decimal, so that neither a
    share just below 1 nor one just above prints as "100%"; more digits below 10%."""
    if share == 0:
        return "0%"
    if 0 < share < 0.00005:  # would print as 0.00%: some, but less than the digits show
        return "<0.01%"
    if 0.99 <= share < 1.01 and share != 1:
        tenths = round(share * 1000)
        tenths = min(tenths, 999) if share < 1 else max(tenths, 1001)
        return f"{tenths / 10:.1f}%"
    if share < 0.01:
        return f"{share:.2%}"
    if share < 0.1:
        return f"{share:.1%}"
    return f"{share:.0%}"


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def byte_size(count: float) -> str:
    """A number of bytes in binary units, to three significant digits, trailing zeros left
    off: ``32 * 2**20 -> "32 MiB"``, ``85_045_000_000 -> "79.2 GiB"``, ``1000 -> "1,000 B"``.

    Every size the package prints (memory, copies, tensors, files, limits) goes through it,
    so that one quantity never reads in two kinds of unit. Rates stay decimal (GB/s, 10^9
    bytes per second), as the datasheets write them.
    """
    value = float(count)
    unit = _BYTE_UNITS[0]
    for unit in _BYTE_UNITS:
        if round(abs(value)) < 1024 or unit == _BYTE_UNITS[-1]:
            break
        value /= 1024
    if unit == "B":
        return f"{value:,.0f} B"
    magnitude = abs(value)
    text = (
        f"{value:,.0f}"
        if magnitude >= 99.95
        else f"{value:.1f}"
        if magnitude >= 9.995
        else f"{value:.2f}"
    )
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text} {unit}"


def without_float_noise(value: Any, digits: int = 6) -> Any:
    """``value`` (plain JSON: dicts, lists, numbers, text) with every float rounded to
    ``digits`` decimals: sums of µs carry binary noise (``51745.369000000006``) that a JSON
    reader should not see; six decimals keep a ps of a time and any share's precision."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {key: without_float_noise(item, digits) for key, item in value.items()}
    if isinstance(value, list):
        return [without_float_noise(item, digits) for item in value]
    return value
