"""One step of several ranks on one clock: where each rank's collectives run.

A collective ends on no rank before the last rank has joined it, so a rank that arrives
early spends the difference inside the collective's kernel. :func:`plot_rank_step` draws one
``ProfilerStep#N`` of every rank on the ranks' shared absolute time (see
:mod:`profiling_utils.ranks`): for each rank its step's CPU window and its collective
kernels, the longest of them labelled with its operation and duration. An early rank shows
a long collective that ends with the late rank's short one. Like the other charts, the
figure is as wide as the site's content column and has an opaque white background.

Example::

    from profiling_utils.ranks import rank_profile, trace_files
    from profiling_utils.trace import load_trace

    profiles = [rank_profile(load_trace(f)) for f in trace_files(["traces/"])]
    plot_rank_step(profiles, step=4)
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..ranks import RankProfile

__all__ = ["plot_rank_step"]

_WIDTH_IN = 7.36  # the site's content column, 736 px at 100 dpi
_RANK_IN = 0.8
_EXTRA_IN = 1.0  # title and the time axis
_TEXT_PT = 10.0
_TITLE_PT = 11.0
_STEP = "#c7d9ea"  # a light Okabe-Ito blue: the CPU window
_COLLECTIVE = "#d55e00"  # Okabe-Ito vermillion, as the timelines' highlights
_LABEL_FITS = 0.25  # a label goes inside a bar at least this share of the axis wide


def plot_rank_step(
    profiles: Sequence[RankProfile], step: int, *, title: str | None = None
) -> Figure:
    """Draw ``ProfilerStep#step`` of each rank on one time axis.

    Each rank has two rows: ``step`` (the step's CPU window) and ``collectives`` (the
    collective kernels that overlap the window spanned by all ranks' steps, which a kernel
    running after its rank's CPU window still falls in when another rank's step lasts
    longer). Times are ms from the earliest rank's step start, on the clock the ranks share
    (``baseTimeNanoseconds``). Each rank's longest collective is labelled with its operation
    and duration.

    Args:
        profiles: The ranks, from :func:`~profiling_utils.ranks.rank_profile`, drawn top to
            bottom in the order given.
        step: The N of ``ProfilerStep#N``; every profile must have it.
        title: Title above the chart.

    Returns:
        The figure.

    Raises:
        ValueError: No profiles, a profile without that step, or profiles whose times are
            not on one clock (some with ``baseTimeNanoseconds``, some without).
    """
    if not profiles:
        raise ValueError("plot_rank_step needs at least one rank's profile")
    if len({p.clock for p in profiles}) > 1:
        raise ValueError("the profiles keep time differently: they cannot share one axis")
    reference_ns = min(p.clock_base_ns for p in profiles)
    windows = []
    for profile in profiles:
        found = [s for s in profile.steps if s.step == step]
        if not found:
            raise ValueError(f"{profile.label} has no ProfilerStep#{step}")
        offset = (profile.clock_base_ns - reference_ns) / 1000
        windows.append((offset + found[0].start_us, found[0].cpu_us, offset))
    start = min(begin for begin, _, _ in windows)
    end = max(begin + length for begin, length, _ in windows)

    fig, ax = plt.subplots(
        figsize=(_WIDTH_IN, _RANK_IN * len(profiles) + _EXTRA_IN),
        facecolor="white",
        layout="constrained",
    )
    ax.set_facecolor("white")
    rows: list[str] = []
    for profile, (begin, length, offset) in zip(profiles, windows, strict=True):
        step_row, comm_row = len(rows), len(rows) + 1
        rows += [f"{profile.label}  step", "collectives"]
        ax.broken_barh([((begin - start) / 1000, length / 1000)], (step_row - 0.35, 0.7),
                       color=_STEP)  # fmt: skip
        calls = [
            c
            for c in profile.collectives
            if offset + c.start_us < end and offset + c.start_us + c.dur_us > start
        ]
        ax.broken_barh(
            [((offset + c.start_us - start) / 1000, c.dur_us / 1000) for c in calls],
            (comm_row - 0.35, 0.7),
            color=_COLLECTIVE,
        )
        if calls:
            longest = max(calls, key=lambda c: c.dur_us)
            left = (offset + longest.start_us - start) / 1000
            width = longest.dur_us / 1000
            label = f"{longest.op} {longest.dur_us / 1000:,.2f} ms"
            inside = width >= _LABEL_FITS * (end - start) / 1000
            ax.text(
                left + width / 2 if inside else left,
                comm_row,
                label if inside else label + "  ",
                ha="center" if inside else "right",
                va="center",
                fontsize=_TEXT_PT,
                color="white" if inside else "black",
            )
    ax.set_yticks(range(len(rows)), rows, fontsize=_TEXT_PT)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    # A little room after the longest step, so that its end reads as an end, not a cut.
    ax.set_xlim(0, (end - start) / 1000 * 1.03)
    ax.set_xlabel(f"ms from the start of ProfilerStep#{step}", fontsize=_TEXT_PT)
    ax.tick_params(labelsize=_TEXT_PT)
    ax.grid(axis="x", color="#dcdcdc", linewidth=0.6)
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title, loc="left", fontsize=_TITLE_PT)
    return fig
