"""Charts of what a gallery page measured: one quantity against a size, with its spread.

A page that sweeps a size (the matrix order ``n``) and measures timings at each one shows them
with :func:`plot_size_sweep`: each series is a line through the medians, with the interquartile
range of every point as an error bar, so a reader sees where two series differ by more than
their noise. The figure has the width and text sizes of the timelines
(:mod:`~profiling_utils.render.timeline`), so it reads at the page's width.

Example::

    from profiling_utils.stats import Distribution

    cpu = [Distribution.of(cpu_samples[n], unit="µs") for n in sizes]
    gpu = [Distribution.of(gpu_samples[n], unit="µs") for n in sizes]
    plot_size_sweep(sizes, {"CPU time per step": cpu, "GPU busy time per step": gpu},
                    between=(2048, 4096), between_label="GPU overtakes CPU")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from profiling_utils.stats import Distribution

from .timeline import FIGURE_DPI, PAGE_WIDTH_PX

__all__ = ["plot_size_sweep"]

_WIDTH_IN = PAGE_WIDTH_PX / FIGURE_DPI
_HEIGHT_IN = 4.4
_TEXT_PT = 10.0
_TITLE_PT = 11.0
_MARKERS = ("o", "s", "^", "D")
# Okabe-Ito, as in the timelines.
_COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7")
_BETWEEN_COLOUR = "#999999"


def plot_size_sweep(
    sizes: Sequence[int],
    series: Mapping[str, Sequence[Distribution]],
    *,
    between: tuple[int, int] | None = None,
    between_label: str = "",
    xlabel: str = "n",
    ylabel: str = "µs per step",
    title: str | None = None,
) -> Figure:
    """Plot timings measured at several sizes: medians joined by lines, IQRs as error bars.

    Both axes are logarithmic (sizes in powers of two are evenly spaced, each tick labelled
    with its size).

    Args:
        sizes: The sizes measured, increasing.
        series: For each series, its legend text and one distribution per size.
        between: Two measured sizes to mark as a shaded interval, e.g. where one series
            overtakes another; the legend names it ``"<between_label>: between n=a and n=b"``.
        between_label: What the interval is.
        xlabel: The size axis's label.
        ylabel: The value axis's label; the legend says the points are medians.
        title: Title above the chart.

    Returns:
        The figure.

    Raises:
        ValueError: No series or no sizes, a series whose length is not that of ``sizes``,
            sizes not increasing, or ``between`` not two increasing measured sizes.
    """
    if not sizes or not series:
        raise ValueError("plot_size_sweep needs at least one size and one series")
    if any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
        raise ValueError(f"sizes must be increasing, not {list(sizes)}")
    for name, values in series.items():
        if len(values) != len(sizes):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(sizes)} sizes")
    if between is not None:
        low, high = between
        if low not in sizes or high not in sizes or high <= low:
            raise ValueError(
                f"between must be two increasing sizes of {list(sizes)}, not {between}"
            )

    fig, ax = plt.subplots(figsize=(_WIDTH_IN, _HEIGHT_IN), dpi=FIGURE_DPI, facecolor="white")
    handles = []
    for index, (name, values) in enumerate(series.items()):
        medians = [d.median for d in values]
        below = [d.median - d.quartiles[0] for d in values]
        above = [d.quartiles[1] - d.median for d in values]
        drawn = ax.errorbar(
            sizes,
            medians,
            yerr=[below, above],
            marker=_MARKERS[index % len(_MARKERS)],
            color=_COLOURS[index % len(_COLOURS)],
            capsize=3,
            linewidth=1.6,
            label=f"{name} (median, IQR)",
        )
        drawn.lines[0].set_gid(f"series-{index}")
        handles.append(drawn)
    if between is not None:
        band = ax.axvspan(*between, color=_BETWEEN_COLOUR, alpha=0.25, linewidth=0)
        band.set_gid("between")
        text = f"between n={between[0]} and n={between[1]}"
        handles.append(
            Patch(
                color=_BETWEEN_COLOUR,
                alpha=0.25,
                label=f"{between_label}: {text}" if between_label else text,
            )
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(sizes), [str(s) for s in sizes])
    ax.minorticks_off()
    ax.tick_params(labelsize=_TEXT_PT)
    ax.set_xlabel(xlabel, fontsize=_TEXT_PT)
    ax.set_ylabel(ylabel, fontsize=_TEXT_PT)
    if title:
        ax.set_title(title, loc="left", fontsize=_TITLE_PT)
    ax.grid(True, color="0.9")
    ax.set_axisbelow(True)
    ax.legend(handles=handles, frameon=False, fontsize=_TEXT_PT, loc="best")
    fig.tight_layout()
    return fig
