"""Plain-text listings that fit a gallery page's output box (88 characters).

A page prints some things as text because text is what they are: a step's spans as an
indented tree, the GPU work of one step, an excerpt of code that ``torch.compile``
generated, the output of a command. Each function here returns that text with no line
longer than ``width``, so the page's output box never scrolls or wraps it::

    from profiling_utils.render.listings import gpu_work_listing, span_tree

    step = run.trace.steps[-1]
    print(span_tree(run.trace, step.span))
    print(gpu_work_listing(step))
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from ..tables import PAGE_WIDTH, byte_size, cut

if TYPE_CHECKING:  # pragma: no cover
    from ..trace import Span, Step, Trace

__all__ = ["PAGE_WIDTH", "fold_lines", "gpu_work_listing", "source_excerpt", "span_tree"]


def span_tree(
    trace: Trace, span: Span, *, width: int = PAGE_WIDTH, max_depth: int | None = None
) -> str:
    """``span`` and the spans nested in it, one per line, indented by depth, with durations.

    Each line is the span's name (cut to fit) and its duration in µs, right-aligned, so
    the durations form a column. Children are the same lane's nested spans, in start
    order (:meth:`~profiling_utils.trace.Trace.children`).

    Args:
        trace: The trace that holds ``span``.
        span: The root, e.g. a step's ``ProfilerStep#N`` span.
        width: Longest line.
        max_depth: Levels below ``span`` to show (``None``: all).
    """
    duration_width = 13  # " 12,345.6 µs"
    # The subtree's spans by parent, from one scan of it; a stack rather than recursion, so
    # that a chain nested thousands deep prints like any other.
    children_of: dict[int, list[Span]] = {}
    for inner in trace.within(span):
        if inner.parent is not None:
            children_of.setdefault(inner.parent, []).append(inner)
    lines: list[str] = []
    pending = [(span, 0)]
    while pending:
        node, depth = pending.pop()
        indent = "    " * depth
        room = max(width - duration_width - len(indent), 8)
        name = cut(node.name, room)
        lines.append(f"{indent}{name:<{room}} {node.dur:9,.1f} µs")
        if max_depth is None or depth < max_depth:
            children = children_of.get(node.id, [])
            pending.extend((child, depth + 1) for child in reversed(children))
    return "\n".join(lines)


def gpu_work_listing(step: Step, *, width: int = PAGE_WIDTH) -> str:
    """The GPU work of one profiler step, one line per kernel, copy or memset, in order.

    Each line gives the kind (``kernel``, ``memcpy``, ``memset``), the duration, the bytes
    of a copy or memset, and the name, cut to fit. A step with no GPU work (a CPU-only
    trace) gives one line saying so.
    """
    if not step.gpu_work:
        return "no GPU work in this step: without a GPU the work runs inside the CPU ops"
    lines = []
    for work in step.gpu_work:
        kind = work.cat.removeprefix("gpu_")
        size = work.args.get("bytes")
        size_text = "" if size is None else byte_size(int(size))
        head = f"{kind:<7} {work.dur:8,.1f} µs {size_text:>8}  "
        lines.append(head + cut(work.name, max(width - len(head), 8)))
    return "\n".join(lines)


def source_excerpt(source: str, start: str, end: str, *, width: int = PAGE_WIDTH) -> str:
    """The lines of ``source`` from the first that starts with ``start`` to the next that
    starts with ``end`` (both included, leading spaces ignored), dedented and cut to fit.

    For example the ``call`` function of the code Inductor generated for a compiled
    function: ``source_excerpt(code, "def call(", "return ")``.

    Raises:
        ValueError: When no line starts with ``start``, or none after it with ``end``.
    """
    lines = source.splitlines()
    first = next((i for i, line in enumerate(lines) if line.lstrip().startswith(start)), None)
    if first is None:
        raise ValueError(f"no line of the source starts with {start!r}")
    last = next(
        (i for i in range(first + 1, len(lines)) if lines[i].lstrip().startswith(end)), None
    )
    if last is None:
        raise ValueError(f"no line after {start!r} starts with {end!r}")
    body = textwrap.dedent("\n".join(lines[first + 1 : last + 1]))
    head = lines[first].strip()
    return "\n".join(
        cut(line, width) for line in [head, *textwrap.indent(body, "    ").split("\n")]
    )


_NAME_BREAKS = ("_", ",", "::", "<")
"""Where a name too long for a line is broken: after one of these, so that its words (a
kernel's ``cga1x1x1``, a template argument) stay whole."""


class _NameWrapper(textwrap.TextWrapper):
    def _handle_long_word(
        self, reversed_chunks: list[str], cur_line: list[str], cur_len: int, width: int
    ) -> None:
        room = max(width - cur_len, 1)
        chunk = reversed_chunks[-1]
        ends = (chunk.rfind(sep, 0, room) + len(sep) for sep in _NAME_BREAKS if sep in chunk)
        at = max((end for end in ends if end < len(chunk)), default=0)
        if at > room // 2:  # a break past the middle of the room: else cut at the edge
            cur_line.append(chunk[:at])
            reversed_chunks[-1] = chunk[at:]
        else:
            super()._handle_long_word(reversed_chunks, cur_line, cur_len, width)


def fold_lines(text: str, *, width: int = PAGE_WIDTH, max_lines: int = 3) -> str:
    """``text`` with every line wider than ``width`` folded at spaces under a deeper indent.

    A folded line keeps its indent and continues four spaces further in; one that would
    take more than ``max_lines`` lines ends with ``…``. A word longer than the room left
    (a kernel's name) is broken after an ``_``, ``,``, ``::`` or ``<`` where one falls in
    the second half of the room, else at its edge. Lines that fit are left as they are, so
    tables that fit keep their columns.
    """
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        wrapper = _NameWrapper(
            width,
            subsequent_indent=indent + "    ",
            max_lines=max_lines,
            placeholder=" …",
            break_on_hyphens=False,
        )
        out.append(wrapper.fill(line))
    return "\n".join(out)
