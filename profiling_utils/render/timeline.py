"""Timeline images of a trace: CPU threads and GPU streams stacked on one time axis.

The picture is the one a trace viewer such as Perfetto shows, drawn with matplotlib so that an
executed gallery example can put it on its page: one band ("lane") per CPU thread, GPU stream and
the CUPTI overhead lane, events drawn as boxes nested by depth, ``ProfilerStep#N`` boundaries as
vertical lines, and labelled highlights for what the example is about (a dead window, a CPU to GPU
offset, a memcpy before a GEMM).

The figure has an opaque white background and dark text, so one PNG reads the same in the light
and the dark theme of the site. It is as wide as the site's content column (:data:`PAGE_WIDTH_PX`
CSS pixels at :data:`FIGURE_DPI`), so the page shows it at its natural size and every text is at
least :data:`MIN_TEXT_PX` CSS pixels high there, the size of the site's code; sphinx-gallery's
2x copy keeps it sharp on high-DPI screens. A name too long for its box is written whole just right
of it when the row is free there and the row above holds only its parent (a launch call inside its
operator), else just left of it (not on GPU streams, where the stretch before a kernel is idle
time), else under it when the row below is free there (a lane's last row gets one more row for such
names; not on GPU streams), else shortened inside it, or left out. A kernel's long demangled name is
first tried without what says little in a narrow box: namespaces, template arguments.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import transforms
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, MaxNLocator

from profiling_utils.tables import cut
from profiling_utils.trace import LAUNCH_CATEGORIES, Lane, Span, Trace

__all__ = [
    "BEFORE_MARK",
    "BELOW_MARK",
    "BESIDE_MARK",
    "FIGURE_DPI",
    "MIN_TEXT_PX",
    "PAGE_WIDTH_PX",
    "Highlight",
    "highlight_between",
    "highlight_span",
    "plot_timeline",
]

PAGE_WIDTH_PX = 736
"""Width of the site's content column in CSS pixels (furo's 46em at 16 px), which a wider image
is scaled down to: a 1000 px picture there shows 8 pt text 8 px high."""
FIGURE_DPI = 100
"""Dots per inch of the figure; sphinx-gallery saves the 1x image at the figure's DPI."""
MIN_TEXT_PX = 12.0
"""Smallest text height, in CSS pixels, of a timeline shown at :data:`PAGE_WIDTH_PX`."""
BESIDE_MARK = "\u25c2 "
"""What starts a name written beside its box rather than in it: a small triangle pointing
back at the box."""
BEFORE_MARK = " \u25b8"
"""What ends a name written just left of its box: a small triangle pointing on at the box."""
BELOW_MARK = "\u25b4 "
"""What starts a name written under its box, on the row below: a small triangle pointing up
at the box."""

# Geometry, in inches (figure) and in rows (the y data unit: one row per nesting depth).
_FIGURE_WIDTH_IN = PAGE_WIDTH_PX / FIGURE_DPI
_ROW_IN = 0.35
_RIGHT_MARGIN_IN = 0.25
_STEP_LABEL_STRIP_IN = 0.3
_TITLE_IN = 0.35
_AXIS_LABELS_IN = 0.55
_LEGEND_ROW_IN = 0.22
_BOX_HEIGHT_ROWS = 0.78
_LANE_GAP_ROWS = 0.5
_TIER_ROWS = 1.0

# Text, in points (a point is FIGURE_DPI / 72 pixels: 9 pt is 12.5 px).
_NAME_PT = 9.0
_LANE_LABEL_PT = 9.0
_THREAD_NAME_CHARS = 24  # a thread's name under its lane's title is cut to this
_TITLE_PT = 11.0
_MIN_TITLE_PT = 8.0  # a longer title is shrunk to fit the figure, down to this size
_TEXT_PAD_PT = 2.5
_CUT_MARK_PT = 6.0  # a box cut by the window's edge shows it with a mark this wide there
_MIN_BOUNDARY_GAP_PT = 4.0  # step boundaries closer than this are drawn as one
_MIN_BOX_PT = 0.75  # zero-length events still show as a hairline, a pixel wide at 1x
_EDGE_FROM_PT = 3.0  # boxes narrower than this get no white outline, which would hide them
_CROWD_GAP_PT = 4.0  # a narrow box with a box this close after it is one of a crowd
_ELLIPSIS = "\u2026"
_MIN_KEPT_CHARS = 4  # "cud…" tells a reader nothing; such names are omitted instead
# Nor does a prefix that half the names of a lane share: a shortened name keeps
# _MIN_KEPT_CHARS past it ("cudaLaun…", never "cuda…").
_SHARED_PREFIXES = ("aten::", "cuda", "nccl", "hip", "cu")

_PAD_FRACTION = 0.02  # of the window, on each side, when the window is computed
_MS_FROM_US = 2000.0  # windows at least this long are labelled in ms

# Colours: the Okabe-Ito palette, which stays distinguishable with the common colour-vision
# deficiencies. Black text has at least 5:1 contrast on each fill.
_TEXT = "#1a1a1a"
_MUTED_TEXT = "#444444"
_LANE_SHADE = "#f1f2f4"
_GRID = "#dcdcdc"
_HIGHLIGHT = "#0072b2"


@dataclass(frozen=True)
class _Category:
    legend: str
    colour: str


_ANNOTATION = _Category("annotation", "#cc79a7")
_RUNTIME = _Category("CUDA runtime / driver", "#e69f00")
_OTHER_RUNTIME = _Category("runtime / driver", "#e69f00")  # XPU's, a PrivateUse1 backend's
_OTHER = _Category("other", "#d9d9d9")
_CATEGORIES: dict[str, _Category] = {
    "user_annotation": _ANNOTATION,
    "gpu_user_annotation": _ANNOTATION,
    "cpu_op": _Category("CPU op", "#56b4e9"),
    "cuda_runtime": _RUNTIME,
    "cuda_driver": _RUNTIME,
    **{cat: _OTHER_RUNTIME for cat in LAUNCH_CATEGORIES if not cat.startswith("cuda_")},
    "kernel": _Category("kernel", "#009e73"),
    "gpu_memcpy": _Category("memcpy", "#d55e00"),
    "gpu_memset": _Category("memset", "#f0e442"),
    "overhead": _Category("CUPTI overhead row", "#999999"),
    "python_function": _Category("Python function", "#bbbbbb"),
}
_LEGEND_ORDER = [
    _ANNOTATION,
    _CATEGORIES["cpu_op"],
    _RUNTIME,
    _OTHER_RUNTIME,
    _CATEGORIES["kernel"],
    _CATEGORIES["gpu_memcpy"],
    _CATEGORIES["gpu_memset"],
    _CATEGORIES["overhead"],
    _CATEGORIES["python_function"],
    _OTHER,
]
_STEP_BOUNDARY_LEGEND = "ProfilerStep boundary"
_STEP_BOUNDARY_DASHES = (0, (3, 2))
_LEGEND_HANDLE_EM = 1.2
_LEGEND_HANDLE_PAD_EM = 0.6
_LEGEND_SPACING_EM = 1.4


@dataclass(frozen=True)
class Highlight:
    """A labelled time range drawn over the timeline: a translucent band and its measured length.

    Build one directly, or with :func:`highlight_span` and :func:`highlight_between`.
    """

    start: float
    """Start of the range, µs, on the trace's time axis (the axis of ``Span.start``)."""
    end: float
    """End of the range, µs; not before ``start``."""
    label: str
    """What the range is, e.g. ``"dead window"``; the picture appends the measured duration."""
    lane: Lane | None = None
    """The lane the band covers, or ``None`` for a band across all lanes."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise ValueError(f"highlight {self.label!r}: start and end must be finite numbers")
        if self.end < self.start:
            raise ValueError(
                f"highlight {self.label!r}: end {self.end:.3f} µs is before start "
                f"{self.start:.3f} µs"
            )

    @property
    def duration_us(self) -> float:
        """Length of the range, µs."""
        return self.end - self.start


def highlight_span(span: Span, label: str) -> Highlight:
    """Highlight one span on its own lane, e.g. a ``Memcpy DtoD`` or an ``Activity Buffer Request``.

    Args:
        span: The span to mark.
        label: What it is; the picture appends its duration.

    Returns:
        A highlight covering the span, on the span's lane.
    """
    return Highlight(span.start, span.end, label, lane=span.lane)


def highlight_between(a: Span, b: Span, label: str) -> Highlight:
    """Highlight the time between two spans: from the end of ``a`` (or its start) to ``b``'s start.

    When ``a`` ends before ``b`` starts, the range is the gap between them (two kernels, or a
    launch and the kernel it started). When ``a`` encloses ``b`` (an annotation and the first op
    inside it), the range runs from ``a``'s start: the dead window before ``b``.

    Args:
        a: The earlier span.
        b: The later span.
        label: What the range is; the picture appends its duration.

    Returns:
        A highlight on the spans' lane when they share one, else a band across all lanes.

    Raises:
        ValueError: If ``b`` starts before ``a`` does.
    """
    start = a.end if a.end <= b.start else a.start
    if b.start < start:
        raise ValueError(
            f"{b.name!r} starts at {b.start:.3f} µs, before {a.name!r} starts at {a.start:.3f} µs"
        )
    return Highlight(start, b.start, label, lane=a.lane if a.lane == b.lane else None)


def plot_timeline(
    trace: Trace,
    *,
    window: tuple[float, float] | None = None,
    step: int | None = None,
    around: str = "step",
    highlights: Sequence[Highlight] = (),
    lanes: Sequence[Lane] | None = None,
    max_depth: int | None = None,
    title: str | None = None,
    ax: Axes | None = None,
    python_functions: bool = False,
) -> Figure:
    """Draw a trace's CPU threads and GPU streams as stacked lanes on one time axis.

    Each span is a box on its lane; nested spans sit one row lower per nesting depth. Names are
    written inside boxes wide enough for them. A box too narrow for its name gets it whole outside
    the box, in grey italics with a triangle that points at the box, so that a name in an idle
    stretch is not read as work there: just right of the box after a ``◂`` where its row is free
    (and the row above holds no box there but the box's parent, whose child the name would otherwise
    seem; not for the last of a crowd of hairlines), else just left of it before a ``▸`` (not on a
    GPU stream, where the stretch before a kernel is the GPU's idle time; not for the first of a
    crowd of hairlines, which it could point at any of), else (not on a GPU stream, and for a box
    wide enough to see, not cut by the window's edge and twice as wide as each box of its row that
    the name runs under) on the row below after a ``▴``, where that row is free; a lane's last row
    gets one more row for such names. No name is written outside its box within a highlighted range,
    and one written outside its box has the lane's colour behind it, so that no line runs through
    it. Otherwise the name is shortened with an ellipsis, or left out. The wider boxes are named
    first. A kernel's name is tried in shorter forms before it is shortened: without the namespaces,
    then as the kernel and the functor it applies (``vectorized_elementwise_kernel<…MulFunctor…>``),
    then as the functor alone, or the kernel without template arguments. A box that the window's
    edge cuts has a white triangle at that edge, pointing the way it goes on. Lanes without spans in
    the window are left out, and ``ProfilerStep#N`` boundaries are drawn as dashed vertical lines
    labelled with the step.

    Args:
        trace: The loaded trace.
        window: ``(start, end)`` in µs on the trace's time axis; drawn exactly.
        step: Zoom to ``ProfilerStep#step``: its CPU window widened to take in the GPU work it
            launched, with a small margin. Not together with ``window``.
        around: With ``step``: ``"step"`` (the default) as above, or ``"gpu"`` for the GPU
            work the step launched only, which is what shows that work when the CPU runs far
            ahead of the GPU (a GPU-bound step's CPU window and its GPU work may be
            milliseconds apart). A step that launched no GPU work falls back to ``"step"``.
        highlights: Ranges to mark, each drawn as a band with its label and measured duration.
        lanes: The lanes to draw, in the trace's lane order; by default every CPU, GPU and
            CUPTI overhead lane.
        max_depth: Draw only spans nested at most this deep (0: top-level spans only). The
            CUDA runtime and driver calls nested deeper (launches, synchronizations,
            allocations), which tie the CPU to the GPU, are kept: drawn on one more row below,
            the outermost only where such calls nest.
        title: Title above the picture.
        ax: Draw into these axes instead of a new figure; the figure's size is left alone.
        python_functions: Also draw ``python_function`` spans (traces taken with
            ``with_stack=True``); hidden by default, since they bury the ops under them.

    Returns:
        The figure drawn into.

    Raises:
        ValueError: For a bad window, an unknown step or lane, both ``window`` and ``step``, an
            unknown ``around``, no
            span in the window, or a highlight outside the picture.
    """
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"max_depth must be 0 or more, not {max_depth}")
    chosen = _chosen_lanes(trace, lanes)
    x0, x1 = _resolve_window(trace, chosen, window, step, around, python_functions)
    layout = _lay_out(trace, chosen, x0, x1, max_depth, python_functions)
    if not layout.lanes:
        raise ValueError(
            f"{_trace_name(trace)}: no spans between {x0:.3f} and {x1:.3f} µs on the chosen "
            f"lanes; the trace runs from 0 to {_trace_end(trace):.3f} µs"
        )
    _check_highlights(highlights, layout, x0, x1)

    lane_titles = [_lane_title(trace, placed.lane) for placed in layout.lanes]
    categories = _categories_drawn(layout)
    if ax is None:
        left_in = (
            max(
                _text_width_pt(line, _LANE_LABEL_PT)
                for title in lane_titles
                for line in title.split("\n")
            )
            / 72
            + 0.3
        )
        width_pt = (_FIGURE_WIDTH_IN - left_in - _RIGHT_MARGIN_IN) * 72
    else:
        width_pt = ax.bbox.width * 72 / ax.figure.dpi
    boundaries_shown = any(x0 <= x <= x1 for step in trace.steps for x in (step.start, step.end))
    legend_labels = [c.legend for c in categories]
    if boundaries_shown:
        legend_labels.append(_STEP_BOUNDARY_LEGEND)
    legend_columns = _legend_columns(legend_labels, width_pt)
    legend_rows = math.ceil(len(legend_labels) / legend_columns)
    pt_per_us = width_pt / (x1 - x0)
    names, label_rows = _place_names(layout, x0, x1, pt_per_us, highlights)
    layout = _with_label_rows(layout, label_rows)
    placed_highlights, tiers = _place_highlight_labels(highlights, x0, x1, pt_per_us)

    # Highlight label tiers sit above the lanes, at negative y (the y axis points down).
    tiers_rows = tiers * _TIER_ROWS
    if ax is None:
        top_in = _STEP_LABEL_STRIP_IN + (_TITLE_IN if title else 0.0)
        bottom_in = _AXIS_LABELS_IN + legend_rows * _LEGEND_ROW_IN + 0.1
        plot_in = (tiers_rows + layout.rows) * _ROW_IN
        height_in = top_in + plot_in + bottom_in
        fig = plt.figure(figsize=(_FIGURE_WIDTH_IN, height_in), dpi=FIGURE_DPI, facecolor="white")
        ax = fig.add_axes(
            (
                left_in / _FIGURE_WIDTH_IN,
                bottom_in / height_in,
                width_pt / 72 / _FIGURE_WIDTH_IN,
                plot_in / height_in,
            )
        )
    fig = ax.figure

    ax.set_facecolor("white")
    ax.set_xlim(x0, x1)
    ax.set_ylim(layout.rows, -tiers_rows)
    _draw_lanes(ax, layout, lane_titles)
    _draw_boxes(ax, layout, pt_per_us)
    _draw_cut_marks(ax, layout, x0, x1, pt_per_us)
    _draw_names(ax, layout, names)
    _draw_steps(ax, trace, layout, x0, x1, pt_per_us)
    _draw_highlights(ax, placed_highlights, layout)
    _format_time_axis(ax, x0, x1)
    _draw_legend(ax, categories, legend_columns, step_boundaries=boundaries_shown)
    if title:
        # A title longer than the axes and the right margin is set smaller, not cut off.
        room_pt = width_pt + _RIGHT_MARGIN_IN * 72 - _TEXT_PAD_PT
        size = min(_TITLE_PT, _TITLE_PT * room_pt / _text_width_pt(title, _TITLE_PT))
        ax.set_title(title, loc="left", fontsize=max(size, _MIN_TITLE_PT), color=_TEXT, pad=18)
    return fig


# --- what to draw -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PlacedLane:
    lane: Lane
    top: float  # y of the lane's first row
    rows: int
    spans: list[Span]
    span_rows: list[int]


@dataclass(frozen=True)
class _Layout:
    lanes: list[_PlacedLane]
    rows: float  # y of the bottom of the last lane


def _chosen_lanes(trace: Trace, lanes: Sequence[Lane] | None) -> list[Lane]:
    if lanes is None:
        return [lane for lane in trace.lanes if lane.kind != "other"]
    unknown = [lane for lane in lanes if lane not in trace.lanes]
    if unknown:
        raise ValueError(
            f"{_trace_name(trace)} has no lane {unknown[0].label!r}; its lanes are: "
            + ", ".join(lane.label for lane in trace.lanes)
        )
    wanted = set(lanes)
    return [lane for lane in trace.lanes if lane in wanted]


def _drawable(span: Span, python_functions: bool) -> bool:
    return python_functions or span.cat != "python_function"


def _resolve_window(
    trace: Trace,
    lanes: list[Lane],
    window: tuple[float, float] | None,
    step: int | None,
    around: str,
    python_functions: bool,
) -> tuple[float, float]:
    if around not in ("step", "gpu"):
        raise ValueError(f'around must be "step" or "gpu", not {around!r}')
    if window is not None and step is not None:
        raise ValueError("pass either window or step, not both")
    if window is not None:
        x0, x1 = (float(v) for v in window)
        if not (math.isfinite(x0) and math.isfinite(x1)) or x1 <= x0:
            raise ValueError(f"window must be (start, end) in µs with end > start, not {window}")
        return x0, x1
    if step is not None:
        found = [s for s in trace.steps if s.number == step]
        if not found:
            have = ", ".join(str(s.number) for s in trace.steps) or "none"
            raise ValueError(f"{_trace_name(trace)} has no ProfilerStep#{step}; its steps: {have}")
        chosen = found[0]
        if around == "gpu" and chosen.gpu_work:
            lo = min(w.start for w in chosen.gpu_work)
            hi = max(w.end for w in chosen.gpu_work)
        else:
            lo = min([chosen.start, *(w.start for w in chosen.gpu_work)])
            hi = max([chosen.end, *(w.end for w in chosen.gpu_work)])
    else:
        spans = [
            s for lane in lanes for s in trace.lane_spans(lane) if _drawable(s, python_functions)
        ]
        if not spans:
            raise ValueError(f"{_trace_name(trace)}: no spans on the chosen lanes")
        lo = min(s.start for s in spans)
        hi = max(s.end for s in spans)
    pad = (hi - lo) * _PAD_FRACTION or 1.0
    return lo - pad, hi + pad


def _lay_out(
    trace: Trace,
    lanes: list[Lane],
    x0: float,
    x1: float,
    max_depth: int | None,
    python_functions: bool,
) -> _Layout:
    hidden_above: dict[int, int] = {}

    def row_of(span: Span) -> int:
        if python_functions:
            return span.depth
        # Hidden python_function ancestors would leave empty rows: count them out.
        chain: list[Span] = []
        node = span
        while node.parent is not None and node.id not in hidden_above:
            chain.append(node)
            node = trace.spans[node.parent]
        hidden = hidden_above.get(node.id, 0)
        for child in reversed(chain):
            parent = trace.spans[child.parent]  # type: ignore[index]
            hidden += parent.cat == "python_function"
            hidden_above[child.id] = hidden
        return span.depth - hidden_above.get(span.id, 0)

    placed: list[_PlacedLane] = []
    top = 0.0
    for lane in lanes:
        spans: list[Span] = []
        rows: list[int] = []
        for span in trace.lane_spans(lane):
            if span.start > x1 or span.end < x0 or not _drawable(span, python_functions):
                continue
            row = row_of(span)
            if max_depth is not None and row > max_depth:
                # The runtime calls under the rows cut away (launches, synchronizations,
                # allocations) tie the CPU to the GPU: they go on one row below the last.
                parent = trace.spans[span.parent] if span.parent is not None else None
                if span.cat not in LAUNCH_CATEGORIES or (
                    parent is not None and parent.cat in LAUNCH_CATEGORIES
                ):
                    continue
                row = max_depth + 1
            spans.append(span)
            rows.append(row)
        if not spans:
            continue
        if placed:
            top += _LANE_GAP_ROWS
        lane_rows = max(rows) + 1
        placed.append(_PlacedLane(lane, top, lane_rows, spans, rows))
        top += lane_rows
    return _Layout(placed, top)


def _with_label_rows(layout: _Layout, lanes: set[int]) -> _Layout:
    """The layout with one more row at the bottom of each of ``lanes``, for names only."""
    if not lanes:
        return layout
    placed: list[_PlacedLane] = []
    top = 0.0
    for index, lane in enumerate(layout.lanes):
        if placed:
            top += _LANE_GAP_ROWS
        rows = lane.rows + (index in lanes)
        placed.append(_PlacedLane(lane.lane, top, rows, lane.spans, lane.span_rows))
        top += rows
    return _Layout(placed, top)


def _check_highlights(
    highlights: Sequence[Highlight], layout: _Layout, x0: float, x1: float
) -> None:
    drawn = {placed.lane for placed in layout.lanes}
    for h in highlights:
        if h.end < x0 or h.start > x1:
            raise ValueError(
                f"highlight {h.label!r} ({h.start:.3f} to {h.end:.3f} µs) lies outside the "
                f"window {x0:.3f} to {x1:.3f} µs"
            )
        if h.lane is not None and h.lane not in drawn:
            raise ValueError(
                f"highlight {h.label!r} is on lane {h.lane.label!r}, which is not drawn "
                "(not chosen, or no spans in the window)"
            )


def _categories_drawn(layout: _Layout) -> list[_Category]:
    present = {_category(s.cat) for placed in layout.lanes for s in placed.spans}
    return [c for c in _LEGEND_ORDER if c in present]


def _category(cat: str) -> _Category:
    return _CATEGORIES.get(cat, _OTHER)


# --- drawing ------------------------------------------------------------------------------------


def _draw_lanes(ax: Axes, layout: _Layout, titles: list[str]) -> None:
    for index, placed in enumerate(layout.lanes):
        if index % 2 == 0:
            ax.axhspan(
                placed.top - _LANE_GAP_ROWS / 2,
                placed.top + placed.rows + _LANE_GAP_ROWS / 2,
                facecolor=_LANE_SHADE,
                edgecolor="none",
                zorder=0,
            )
    ax.set_yticks(
        [placed.top + 0.5 for placed in layout.lanes],
        titles,
        fontsize=_LANE_LABEL_PT,
        color=_TEXT,
    )
    ax.tick_params(axis="y", length=0, pad=6)
    for label in ax.get_yticklabels():
        label.set_parse_math(False)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.spines["bottom"].set_color(_MUTED_TEXT)


def _draw_boxes(ax: Axes, layout: _Layout, pt_per_us: float) -> None:
    starts: list[float] = []
    ends: list[float] = []
    tops: list[float] = []
    colours: list[str] = []
    min_width_us = _MIN_BOX_PT / pt_per_us
    inset = (1.0 - _BOX_HEIGHT_ROWS) / 2
    for placed in layout.lanes:
        for span, row in zip(placed.spans, placed.span_rows, strict=True):
            starts.append(span.start)
            ends.append(max(span.end, span.start + min_width_us))
            tops.append(placed.top + row + inset)
            colours.append(_category(span.cat).colour)

    x_start = np.asarray(starts)
    x_end = np.asarray(ends)
    y_top = np.asarray(tops)
    y_bottom = y_top + _BOX_HEIGHT_ROWS
    corners = np.stack(
        [
            np.column_stack([x_start, y_top]),
            np.column_stack([x_end, y_top]),
            np.column_stack([x_end, y_bottom]),
            np.column_stack([x_start, y_bottom]),
        ],
        axis=1,
    )
    widths_pt = (x_end - x_start) * pt_per_us
    boxes = PolyCollection(
        corners,
        facecolors=colours,
        edgecolors="white",
        linewidths=np.where(widths_pt >= _EDGE_FROM_PT, 0.6, 0.0),
        zorder=2,
        snap=False,  # snapped to whole pixels, a box under a pixel wide can vanish
    )
    boxes.set_gid("timeline-boxes")
    ax.add_collection(boxes)


def _cut_sides(span: Span, x0: float, x1: float, pt_per_us: float) -> tuple[bool, bool]:
    """Whether the window cuts the box at its left and at its right edge, for a box wide
    enough in the window to show a mark there (each mark takes :data:`_CUT_MARK_PT`)."""
    left, right = span.start < x0, span.end > x1
    if (left or right) and (min(span.end, x1) - max(span.start, x0)) * pt_per_us < (
        1 + left + right
    ) * _CUT_MARK_PT:
        return False, False
    return left, right


def _draw_cut_marks(ax: Axes, layout: _Layout, x0: float, x1: float, pt_per_us: float) -> None:
    """A white triangle at each edge where the window cuts a box, pointing the way the box
    goes on: a box cut short by the picture is not read as a short span."""
    inset_us = 0.5 * _CUT_MARK_PT / pt_per_us
    marks: dict[str, tuple[list[float], list[float]]] = {"<": ([], []), ">": ([], [])}
    for placed in layout.lanes:
        for span, row in zip(placed.spans, placed.span_rows, strict=True):
            left, right = _cut_sides(span, x0, x1, pt_per_us)
            y = placed.top + row + 0.5
            if left:
                marks["<"][0].append(x0 + inset_us)
                marks["<"][1].append(y)
            if right:
                marks[">"][0].append(x1 - inset_us)
                marks[">"][1].append(y)
    for marker, (xs, ys) in marks.items():
        if xs:
            drawn = ax.scatter(
                xs, ys, s=(0.85 * _CUT_MARK_PT) ** 2, marker=marker, c="white", linewidths=0,
                zorder=2.5, clip_on=False,
            )  # fmt: skip
            drawn.set_gid("cut-marks")


@dataclass(frozen=True)
class _PlacedName:
    lane: int  # index in the layout's lanes
    row: int
    x: float
    text: str
    where: str  # a key of _NAME_GIDS


_NAME_GIDS = {
    "inside": "span-name",
    "after": "span-name-beside",
    "before": "span-name-before",
    "below": "span-name-below",
}


class _RowSpace:
    """What is taken on each row of each lane, boxes and the names written outside them.

    Each row keeps the union of what is taken as sorted, disjoint intervals (touching ones
    merged), so that a query is a bisection: a trace's whole timeline has tens of thousands
    of boxes on a few rows.
    """

    def __init__(self, x0: float, x1: float) -> None:
        self.x0, self.x1 = x0, x1
        self._taken: dict[tuple[int, int], tuple[list[float], list[float]]] = {}

    def take(self, lane: int, row: int, start: float, end: float) -> None:
        starts, ends = self._taken.setdefault((lane, row), ([], []))
        first = bisect_left(starts, start)
        if first and ends[first - 1] >= start:
            first -= 1
            start = starts[first]
            end = max(end, ends[first])
        last = first
        while last < len(starts) and starts[last] <= end:
            end = max(end, ends[last])
            last += 1
        starts[first:last] = [start]
        ends[first:last] = [end]

    def free_after(self, lane: int, row: int, x: float) -> float:
        """Where the free stretch of the row that starts at ``x`` ends (``x``: none)."""
        starts, ends = self._taken.get((lane, row), ((), ()))
        index = bisect_right(starts, x) - 1
        if index >= 0 and ends[index] > x and starts[index] < self.x1:
            return x
        if index + 1 < len(starts):
            return min(starts[index + 1], self.x1)
        return self.x1

    def free_before(self, lane: int, row: int, x: float) -> float:
        """Where the free stretch of the row that ends at ``x`` starts (``x``: none)."""
        starts, ends = self._taken.get((lane, row), ((), ()))
        index = bisect_left(starts, x) - 1
        if index < 0:
            return self.x0
        if ends[index] >= x:
            return x
        return max(ends[index], self.x0)


@dataclass(frozen=True)
class _Box:
    lane: int
    row: int
    span: Span
    left: float  # the box as drawn, within the window
    right: float
    drawn_end: float  # the box as drawn, however narrow (a hairline at least)
    forms: tuple[str, ...]  # its names, see _name_forms
    text_left: float  # where a name inside it may go: the box less its cut marks
    text_right: float


def _place_names(
    layout: _Layout,
    x0: float,
    x1: float,
    pt_per_us: float,
    highlights: Sequence[Highlight] = (),
) -> tuple[list[_PlacedName], set[int]]:
    """Name each box: inside it, else beside it on its row, else under it, else shortened.

    No name is written outside its box within a highlighted range, on any lane, unless the
    box lies in the range too: the name of a box outside it would read as work in the range
    (page 01's "GPU idle", page 04's buffer request, during which the CPU thread waits, page
    02's dead window), while the name of a box inside says what ran there (page 02's
    ``Activity Buffer Request``, during its first ``aten::mm``).

    Returns the names and the lanes that need one more row for the names written under the
    boxes of their last row.
    """
    min_width_us = _MIN_BOX_PT / pt_per_us
    pad_us = _TEXT_PAD_PT / pt_per_us
    shortest_name_pt = _text_width_pt("a" * _MIN_KEPT_CHARS + _ELLIPSIS, _NAME_PT)
    space = _RowSpace(x0, x1)
    boxes: list[_Box] = []
    mark_us = _CUT_MARK_PT / pt_per_us
    for lane, placed in enumerate(layout.lanes):
        for span, row in zip(placed.spans, placed.span_rows, strict=True):
            drawn_end = max(span.end, span.start + min_width_us)
            left, right = max(span.start, x0), min(drawn_end, x1)
            space.take(lane, row, left, right)
            cut_left, cut_right = _cut_sides(span, x0, x1, pt_per_us)
            boxes.append(
                _Box(
                    lane, row, span, left, right, drawn_end, _name_forms(span),
                    left + cut_left * mark_us, right - cut_right * mark_us,
                )
            )  # fmt: skip
    # Less a name's padding at each end: a name beside a box that ends at a range's edge
    # starts outside the range (page 04's launch, ending as the GPU idle does).
    ranges = [
        (h.start, h.end, start, end)
        for h in highlights
        if (start := max(h.start, x0) + pad_us) < (end := min(h.end, x1) - pad_us)
    ]

    def closed_ranges(box: _Box) -> list[tuple[float, float]]:
        """The highlighted ranges (padded) that ``box``'s names must stay out of."""
        return [
            (start, end)
            for low, high, start, end in ranges
            if not (low <= box.span.start and box.drawn_end <= high)
        ]

    row_boxes: dict[tuple[int, int], tuple[list[float], list[float]]] = {}
    for box in sorted(boxes, key=lambda b: b.left):
        lefts, rights = row_boxes.setdefault((box.lane, box.row), ([], []))
        lefts.append(box.left)
        rights.append(box.right)
    # Wider boxes first: where two names want the same free stretch, the bigger box gets it.
    boxes.sort(key=lambda b: (b.left - b.right, b.span.start))

    names: list[_PlacedName] = []
    label_rows: set[int] = set()

    # A name beside its box runs on the box's row, under the row above, where the box's
    # parent is: passing under another box there, it would read as that box's child.
    def free_after(box: _Box, row: int, x: float) -> float:
        lane = box.lane
        limit = _out_of_ranges_after(space.free_after(lane, row, x), x, closed_ranges(box))
        if row == 0:
            return limit
        lefts = row_boxes.get((lane, row - 1), ((), ()))[0]
        index = bisect_right(lefts, x)  # the next box above; the one over ``x`` is the parent
        if index < len(lefts):
            limit = min(limit, lefts[index])
        return limit

    def free_before(box: _Box, row: int, x: float) -> float:
        lane = box.lane
        limit = space.free_before(lane, row, x)
        for start, end in closed_ranges(box):
            if start < x < end:
                return x
            if end <= x:
                limit = max(limit, end)
        if row == 0:
            return limit
        lefts, rights = row_boxes.get((lane, row - 1), ((), ()))
        index = bisect_left(lefts, x) - 1  # the last box above starting before x
        if index >= 0 and rights[index] >= x:
            index -= 1  # the parent, over x
        if index >= 0:
            limit = max(limit, min(rights[index], x))
        return limit

    def last_of_a_crowd(box: _Box) -> bool:
        # A mark after the last of a crowd of hairlines would point at any of them (page 02:
        # "◂ cudaMalloc" after a block of a dozen runtime calls, few of them cudaMalloc).
        if (box.right - box.left) * pt_per_us >= _EDGE_FROM_PT:
            return False
        lefts, rights = row_boxes[box.lane, box.row]
        index = bisect_left(lefts, box.left) - 1
        return index >= 0 and (box.left - rights[index]) * pt_per_us < _CROWD_GAP_PT

    def put(name: _PlacedName, start: float, width_pt: float = 0.0) -> None:
        names.append(name)
        if name.where != "inside":
            space.take(name.lane, name.row, start, start + width_pt / pt_per_us)

    # Whole names on their box's row first; then, in the room they leave, names under boxes
    # and shortened names, so that those take no room from a whole name on its own row.
    unnamed: list[_Box] = []
    for box in boxes:
        lane, row, span = box.lane, box.row, box.span
        room_pt = (box.text_right - box.text_left) * pt_per_us - 2 * _TEXT_PAD_PT
        text = next((f for f in box.forms if _text_width_pt(f, _NAME_PT) <= room_pt), None)
        if text is not None:
            middle = (box.text_left + box.text_right) / 2
            put(_PlacedName(lane, row, middle, text, "inside"), box.left)
            continue
        # A whole name beside the box reads better than a shortened one inside it.
        after_pt = (free_after(box, row, box.drawn_end) - box.drawn_end) * pt_per_us
        before_pt = (span.start - free_before(box, row, span.start)) * pt_per_us
        # A mark before the first of a crowd of hairlines would point at any of them; and on
        # a GPU stream the stretch before a kernel is the GPU's idle time, which pages study.
        may_go_before = layout.lanes[lane].lane.kind != "gpu" and not (
            (box.right - box.left) * pt_per_us < _EDGE_FROM_PT and after_pt < _CROWD_GAP_PT
        )
        may_go_after = not last_of_a_crowd(box)
        for form in box.forms if _whole(box, x0, x1) else ():
            width_pt = _outside_pt(BESIDE_MARK, form)
            if may_go_after and width_pt <= after_pt:
                text = BESIDE_MARK + form
                name = _PlacedName(lane, row, box.drawn_end + pad_us, text, "after")
                put(name, box.drawn_end, width_pt)
                break
            width_pt = _outside_pt(BEFORE_MARK, form)
            if may_go_before and width_pt <= before_pt:
                text = form + BEFORE_MARK
                start = span.start - width_pt / pt_per_us
                put(_PlacedName(lane, row, span.start - pad_us, text, "before"), start, width_pt)
                break
        else:
            unnamed.append(box)

    for box in unnamed:
        lane, row, left = box.lane, box.row, box.left
        width_pt = (box.right - left) * pt_per_us
        # Under a box cut by the window's edge, the name would point at part of a box.
        if _may_go_below(layout.lanes[lane].lane, width_pt) and _whole(box, x0, x1):
            below_end = _out_of_ranges_after(
                space.free_after(lane, row + 1, left), left, closed_ranges(box)
            )
            form = next(
                (
                    f
                    for f in box.forms
                    if left + _outside_pt(BELOW_MARK, f) / pt_per_us <= below_end
                ),
                None,
            )
            end = left + _outside_pt(BELOW_MARK, form) / pt_per_us if form else left
            if form is not None and _stands_out(box, row_boxes[lane, row], end):
                name = _PlacedName(lane, row + 1, left, BELOW_MARK + form, "below")
                put(name, left, _outside_pt(BELOW_MARK, form))
                if row + 1 == layout.lanes[lane].rows:
                    label_rows.add(lane)
                continue
        room_pt = (box.text_right - box.text_left) * pt_per_us - 2 * _TEXT_PAD_PT
        text = _fit(box.forms[-1], room_pt) if room_pt >= shortest_name_pt else None
        if text is None and box.span.cat == "kernel":
            # Too narrow for a cut name: a library kernel's family, whole (page 14's GEMMs).
            family = _kernel_family(box.forms[-1])
            if family and _text_width_pt(family, _NAME_PT) <= room_pt:
                text = family
        if text is not None:
            middle = (box.text_left + box.text_right) / 2
            put(_PlacedName(lane, row, middle, text, "inside"), left)
            continue
        after_pt = (free_after(box, row, box.drawn_end) - box.drawn_end) * pt_per_us
        free_pt = after_pt - 2 * _TEXT_PAD_PT - _text_width_pt(BESIDE_MARK, _NAME_PT)
        if (
            _whole(box, x0, x1)
            and box.drawn_end < x1
            and free_pt >= shortest_name_pt
            and not last_of_a_crowd(box)
        ):
            text = _fit(box.forms[-1], free_pt)
            if text is not None:
                name = _PlacedName(lane, row, box.drawn_end + pad_us, BESIDE_MARK + text, "after")
                put(name, box.drawn_end, _outside_pt(BESIDE_MARK, text))
    return names, label_rows


def _out_of_ranges_after(limit: float, x: float, ranges: list[tuple[float, float]]) -> float:
    """``limit``, the end of the free stretch from ``x``, brought back to the first of
    ``ranges`` it would enter (``x`` itself when ``x`` is inside one)."""
    for start, end in ranges:
        if start < x < end:
            return x
        if x <= start < limit:
            limit = start
    return limit


def _stands_out(box: _Box, row: tuple[list[float], list[float]], until: float) -> bool:
    """Whether ``box`` is at least twice as wide as each other box of its row that starts
    before ``until``: a name written under it that far then points at it, not at a
    neighbour of its size (page 07's row of equal ``aten::matmul`` boxes)."""
    lefts, rights = row
    width = box.right - box.left
    first, last = bisect_right(lefts, box.left), bisect_left(lefts, until)
    return all(2 * (rights[k] - lefts[k]) <= width for k in range(first, last))


def _whole(box: _Box, x0: float, x1: float) -> bool:
    """Whether the whole box is in the window, as a box named beside it must be."""
    return box.span.start >= x0 and box.drawn_end <= x1


def _outside_pt(mark: str, name: str) -> float:
    """Width taken by a name written outside its box with its mark, and the gaps on either
    side (the two measured apart: a trace's long names are measured once, not once per mark;
    kerning between a mark's space and a letter is nil)."""
    return _text_width_pt(mark, _NAME_PT) + _text_width_pt(name, _NAME_PT) + 2 * _TEXT_PAD_PT


def _may_go_below(lane: Lane, width_pt: float) -> bool:
    # Only boxes wide enough to see, so that no row is added for the name of a hairline; and
    # not on GPU streams, whose kernels follow one another closely (a row of names under them
    # would fill up) and have short forms of their names instead (see _name_forms).
    return lane.kind != "gpu" and width_pt >= _EDGE_FROM_PT


def _draw_names(ax: Axes, layout: _Layout, names: list[_PlacedName]) -> None:
    for placed in names:
        y = layout.lanes[placed.lane].top + placed.row + 0.5
        if placed.where == "inside":
            _name(ax, placed.x, y, placed.text, "center", _NAME_GIDS["inside"])
            continue
        align = "right" if placed.where == "before" else "left"
        # A name outside its box is marked as a label pointing back at it (not work on the row).
        name = _name(ax, placed.x, y, placed.text, align, _NAME_GIDS[placed.where])
        name.set_color(_MUTED_TEXT)
        name.set_fontstyle("italic")
        # On the lane's own colour, so that a step line or grid line does not cross it (it
        # lies in free space, never in a highlighted range: nothing else is hidden).
        shade = _LANE_SHADE if placed.lane % 2 == 0 else "white"
        name.set_bbox({"facecolor": shade, "edgecolor": "none", "pad": 0.5})


def _name(ax: Axes, x: float, y: float, text: str, align: str, gid: str) -> Text:
    name = ax.text(
        x,
        y,
        text,
        ha=align,
        va="center",
        fontsize=_NAME_PT,
        color=_TEXT,
        clip_on=True,
        parse_math=False,
        zorder=3,
    )
    name.set_gid(gid)
    return name


def _draw_steps(
    ax: Axes, trace: Trace, layout: _Layout, x0: float, x1: float, pt_per_us: float
) -> None:
    lanes_top = -_LANE_GAP_ROWS / 2
    lanes_bottom = layout.rows + _LANE_GAP_ROWS / 2
    boundaries: set[float] = set()
    for step in trace.steps:
        if step.end < x0 or step.start > x1:
            continue
        boundaries.update(x for x in (step.start, step.end) if x0 <= x <= x1)
        left, right = max(step.start, x0), min(step.end, x1)
        room_pt = (right - left) * pt_per_us - _TEXT_PAD_PT
        for text in (f"ProfilerStep#{step.number}", f"#{step.number}"):
            if _text_width_pt(text, _NAME_PT) <= room_pt:
                label = ax.annotate(
                    text,
                    xy=(left, 1.0),
                    xycoords=("data", "axes fraction"),
                    xytext=(_TEXT_PAD_PT, 3),
                    textcoords="offset points",
                    fontsize=_NAME_PT,
                    color=_MUTED_TEXT,
                    va="bottom",
                    ha="left",
                    annotation_clip=False,
                )
                label.set_gid("step-label")
                break
    # Where steps are only points wide (the short steps after a long first one, in a picture
    # of the whole trace), their lines would merge into a hatched band: keep them apart.
    kept: list[float] = []
    for x in sorted(boundaries):
        if not kept or (x - kept[-1]) * pt_per_us >= _MIN_BOUNDARY_GAP_PT:
            kept.append(x)
    if kept:
        lines = ax.vlines(
            kept,
            lanes_top,
            lanes_bottom,
            colors=_MUTED_TEXT,
            linewidths=0.8,
            linestyles=_STEP_BOUNDARY_DASHES,
            zorder=2.5,  # over the boxes, under their names
        )
        lines.set_gid("step-boundaries")


@dataclass(frozen=True)
class _PlacedHighlight:
    highlight: Highlight
    text: str
    text_x: float
    text_align: str
    tier: int


def _place_highlight_labels(
    highlights: Sequence[Highlight], x0: float, x1: float, pt_per_us: float
) -> tuple[list[_PlacedHighlight], int]:
    """Give each label a tier above the lanes so that no two labels or ranges overlap."""
    tiers: list[list[tuple[float, float]]] = []
    placed: list[_PlacedHighlight] = []
    gap_us = 6.0 / pt_per_us
    for h in sorted(highlights, key=lambda h: (h.start, h.end)):
        text = f"{h.label} {_format_duration(h.duration_us)}"
        half_us = _text_width_pt(text, _NAME_PT, "bold") / 2 / pt_per_us  # drawn in bold
        left, right = max(h.start, x0), min(h.end, x1)
        centre = (left + right) / 2
        if centre - half_us < x0:
            text_x, align, extent = x0, "left", (x0, x0 + 2 * half_us)
        elif centre + half_us > x1:
            text_x, align, extent = x1, "right", (x1 - 2 * half_us, x1)
        else:
            text_x, align, extent = centre, "center", (centre - half_us, centre + half_us)
        occupied = (min(extent[0], left) - gap_us, max(extent[1], right) + gap_us)
        tier = next(
            (
                index
                for index, taken in enumerate(tiers)
                if all(occupied[1] <= a or occupied[0] >= b for a, b in taken)
            ),
            len(tiers),
        )
        if tier == len(tiers):
            tiers.append([])
        tiers[tier].append(occupied)
        placed.append(_PlacedHighlight(h, text, text_x, align, tier))
    return placed, len(tiers)


def _draw_highlights(ax: Axes, placed: list[_PlacedHighlight], layout: _Layout) -> None:
    lane_top = {p.lane: p.top for p in layout.lanes}
    lane_rows = {p.lane: p.rows for p in layout.lanes}
    for item in placed:
        h = item.highlight
        line_y = -(item.tier * _TIER_ROWS) - 0.3
        if h.lane is None:
            band_top, band_bottom = line_y, layout.rows + _LANE_GAP_ROWS / 2
        else:
            band_top = lane_top[h.lane] - 0.1
            band_bottom = lane_top[h.lane] + lane_rows[h.lane] + 0.1
        band = Rectangle(
            (h.start, band_top),
            h.end - h.start,
            band_bottom - band_top,
            facecolor=_HIGHLIGHT,
            alpha=0.22,
            edgecolor="none",
            zorder=1,  # behind the boxes: it shows in the empty space, its edges show over boxes
            label=item.text,
        )
        band.set_gid("highlight")
        ax.add_patch(band)
        edges = [h.start, h.end]
        # The edges go under the boxes, as the band does: a box at a range's limit (a kernel
        # of a few µs) would hide under an edge drawn over it, and names would be cut by it.
        ax.vlines(edges, band_top, band_bottom, colors=_HIGHLIGHT, linewidths=1.2, zorder=1.5)
        # Up to the label: dotted where it crosses lanes the highlight is not about.
        ax.vlines(
            edges,
            line_y,
            band_top,
            colors=_HIGHLIGHT,
            linewidths=1.2 if h.lane is None else 0.8,
            linestyles="solid" if h.lane is None else (0, (1, 2)),
            zorder=1.5,
        )
        ax.hlines(line_y, h.start, h.end, colors=_HIGHLIGHT, linewidths=1.6, zorder=5)
        label = ax.text(
            item.text_x,
            line_y - 0.12,
            item.text,
            ha=item.text_align,
            va="bottom",
            fontsize=_NAME_PT,
            fontweight="bold",
            color=_HIGHLIGHT,
            parse_math=False,
            zorder=6,
            # Another range's edge, rising to its own label, must not run through this one.
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
        )
        label.set_gid("highlight-label")


def _format_time_axis(ax: Axes, x0: float, x1: float) -> None:
    in_ms = x1 - x0 >= _MS_FROM_US
    scale = 1000.0 if in_ms else 1.0
    locator = MaxNLocator(nbins=10, steps=[1, 2, 2.5, 5, 10])
    ticks = locator.tick_values(x0, x1)
    spacing = (ticks[1] - ticks[0]) / scale if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(spacing))) if spacing > 0 else 0
    if round(spacing * 10**decimals, 6) % 1:  # steps like 2.5 need one more digit
        decimals += 1
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v / scale:.{decimals}f}"))
    ax.tick_params(axis="x", labelsize=_NAME_PT, colors=_MUTED_TEXT, labelcolor=_TEXT)
    ax.set_xlabel(
        f"time since trace start ({'ms' if in_ms else 'µs'})", fontsize=_NAME_PT, color=_TEXT
    )
    ax.grid(axis="x", color=_GRID, linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)


def _legend_columns(labels: list[str], width_pt: float) -> int:
    """The most legend entries per row that fit in ``width_pt``."""
    handle_pt = (_LEGEND_HANDLE_EM + _LEGEND_HANDLE_PAD_EM + _LEGEND_SPACING_EM) * _NAME_PT
    entries_pt = [_text_width_pt(label, _NAME_PT) + handle_pt for label in labels]
    for columns in range(len(labels), 1, -1):
        # Matplotlib fills the columns in order, the first ``extra`` of them one entry longer
        # (``numpy.array_split``); a column is as wide as its widest entry.
        rows, extra = divmod(len(entries_pt), columns)
        widths, first = [], 0
        for column in range(columns):
            length = rows + (column < extra)
            widths.append(max(entries_pt[first : first + length]))
            first += length
        if sum(widths) <= width_pt:
            return columns
    return 1


def _draw_legend(
    ax: Axes, categories: list[_Category], columns: int, *, step_boundaries: bool
) -> None:
    handles: list[Patch | Line2D] = [
        Patch(facecolor=c.colour, edgecolor="none", label=c.legend) for c in categories
    ]
    if step_boundaries:  # the dashed lines: without an entry, readers took them for events
        handles.append(
            Line2D(
                [], [], color=_MUTED_TEXT, linewidth=0.8, linestyle=_STEP_BOUNDARY_DASHES,
                label=_STEP_BOUNDARY_LEGEND,
            )
        )  # fmt: skip
    below_axis_labels = transforms.offset_copy(
        ax.transAxes, fig=ax.figure, y=-_AXIS_LABELS_IN * 72 + 6, units="points"
    )
    legend = ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(0.0, 0.0),
        bbox_transform=below_axis_labels,
        ncols=columns,
        frameon=False,
        fontsize=_NAME_PT,
        handlelength=_LEGEND_HANDLE_EM,
        handletextpad=_LEGEND_HANDLE_PAD_EM,
        handleheight=0.9,
        borderaxespad=0.0,
        borderpad=0.0,
        columnspacing=_LEGEND_SPACING_EM,
        labelcolor=_TEXT,
    )
    legend.set_gid("category-legend")


# --- text ---------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _measuring_renderer() -> RendererAgg:
    return RendererAgg(1, 1, FIGURE_DPI)


@lru_cache(maxsize=8192)
def _text_width_pt(text: str, size_pt: float, weight: str = "normal") -> float:
    # Measured as Agg draws it at the figure's DPI (hinting makes small text a few percent
    # wider than its outline, which ``TextPath`` measures).
    width_px, _height, _descent = _measuring_renderer().get_text_width_height_descent(
        text, FontProperties(size=size_pt, weight=weight), ismath=False
    )
    return width_px * 72 / FIGURE_DPI


def _fit(name: str, room_pt: float) -> str | None:
    """The name, or its longest prefix plus an ellipsis, that fits in ``room_pt``; else None."""
    if _text_width_pt(name, _NAME_PT) <= room_pt:
        return name
    shared = next((p for p in _SHARED_PREFIXES if name.startswith(p)), "")
    low, high = len(shared) + _MIN_KEPT_CHARS, len(name) - 1
    if high < low or _text_width_pt(name[:low] + _ELLIPSIS, _NAME_PT) > room_pt:
        return None
    while low < high:  # the longest prefix that fits
        middle = (low + high + 1) // 2
        if _text_width_pt(name[:middle] + _ELLIPSIS, _NAME_PT) <= room_pt:
            low = middle
        else:
            high = middle - 1
    return name[:low].rstrip() + _ELLIPSIS


_ANONYMOUS = "(anonymous namespace)::"
# A function's parameters and the lambdas inside it: ``f(at::Tensor&)::{lambda()#1}::operator()()
# const::{lambda(float)#1}`` is a lambda defined in ``f``, which is what names it.
_LAMBDA_IN = re.compile(r"\([^()]*\)(?:::(?:\{lambda\([^()]*\)#\d+\}|operator\(\)\(\) const))+")
_QUALIFIER = re.compile(r"\b[A-Za-z_]\w*::")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# What an elementwise, reduction or multi-tensor kernel applies: a functor, or the function
# that defines the lambda it runs. The kernel's own name says only how it loops.
_FUNCTOR = re.compile(r"Functor|functor|(?:Ops?|Impl|_impl|_kernel|_cuda)$")
# PyTorch's binary functors are named after their op (``CUDAFunctor_add``,
# ``CUDAFunctorOnSelf_add``): cut short, the op is the part that would go.
_OP_FUNCTOR = re.compile(r"CUDAFunctor\w*?_(\w+)")


def _name_forms(span: Span) -> tuple[str, ...]:
    """A span's names to write, from the most complete to the shortest.

    An ATen op has two: ``aten::matmul``, then ``matmul`` (cut short, "aten::…" would say
    nothing). Other spans have one. A kernel's demangled name has others for narrower boxes:
    without the namespaces and the lambdas' insides, then the kernel and what it applies
    (``vectorized_elementwise_kernel<…GeluCUDAKernelImpl…>``), then what it applies alone
    (``MulFunctor``) or, for a kernel that applies nothing named, its name without template
    arguments.
    """
    if span.cat == "kernel":
        return _kernel_name_forms(span.name)
    op = span.name.removeprefix("aten::")
    return (span.name, op) if op and op != span.name else (span.name,)


@lru_cache(maxsize=4096)  # a trace repeats a few hundred kernel names across its kernels
def _kernel_name_forms(name: str) -> tuple[str, ...]:
    full = _without_signature(name)
    bare = full.replace(_ANONYMOUS, "")
    while (shorter := _LAMBDA_IN.sub("", bare)) != bare:
        bare = shorter
    bare = _QUALIFIER.sub("", bare)
    forms = [full, bare]
    base, _, arguments = bare.partition("<")
    if arguments:
        applied = [n for n in _IDENTIFIER.findall(arguments) if _FUNCTOR.search(n)]
        if applied:
            forms += [f"{base}<{_ELLIPSIS}{applied[-1]}{_ELLIPSIS}>", applied[-1]]
            if op := _OP_FUNCTOR.fullmatch(applied[-1]):
                forms.append(op.group(1))
        else:
            forms.append(base)
    return tuple(dict.fromkeys(forms))


def _kernel_family(name: str) -> str | None:
    """The first word of a kernel name made of words joined by ``_``, such as a GEMM
    library's (``nvjet`` of ``nvjet_sm90_tst_256x128_…``, ``cutlass``, ``ncclDevKernel``,
    ``triton``): a name for a box too narrow for four letters and an ellipsis. ``None`` for
    a name without one of at least :data:`_MIN_KEPT_CHARS` letters."""
    if "<" in name or "::" in name:
        return None
    family = name.split("_", 1)[0]
    return family if len(family) >= _MIN_KEPT_CHARS and family != name else None


def _without_signature(name: str) -> str:
    """A kernel's name without the ``void`` and the argument list that the demangler adds."""
    name = name.removeprefix("void ")
    if name.endswith(")"):
        depth = 0
        for index in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[index], 0)
            if depth == 0:
                if index > 0:
                    name = name[:index]
                break
    return name


def _format_duration(duration_us: float) -> str:
    if duration_us >= 1000.0:
        return f"{duration_us / 1000:.3g} ms"
    return f"{duration_us:.3g} µs"


def _lane_title(trace: Trace, lane: Lane) -> str:
    if lane.kind == "cpu" and (name := trace.thread_name(lane)) is not None:
        # Which thread it is (pt_autograd_0: the backward pass), not only its number.
        return f"{lane.label}\n{cut(name, _THREAD_NAME_CHARS)}"
    if lane.kind == "gpu":
        return f"GPU {lane.device} · stream {lane.stream}"
    if lane.kind == "overhead":
        return "CUPTI overhead"
    return lane.label


def _trace_name(trace: Trace) -> str:
    return trace.path.name


def _trace_end(trace: Trace) -> float:
    return max((s.end for s in trace.spans), default=0.0)
