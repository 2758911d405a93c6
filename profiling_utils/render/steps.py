"""A chart of per-step timings: which steps stand out from the run's usual step.

Whatever happens once in a recording (the profiler starting, a first call) shows in one step;
whatever the code does every time shows in all of them. :func:`plot_per_step` draws one bar
per ``ProfilerStep#N`` for each quantity, with the median of all steps as a dashed line, so
the one step that stands out is plain to see. The figure is as wide as the site's content
column and has an opaque white background, like the timelines, so it reads the same in the
light and the dark theme.

Example::

    from profiling_utils.measures import step_times

    times = step_times(trace)
    plot_per_step([t.step for t in times], {"step width": [t.cpu_us for t in times]})
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

__all__ = ["plot_per_step"]

_WIDTH_IN = 7.36  # the site's content column, 736 px at 100 dpi
_PANEL_IN = 1.9
_EXTRA_IN = 0.9  # title and the step axis
_TEXT_PT = 10.0
_TITLE_PT = 11.0
_BAR = "#0072b2"  # Okabe-Ito blue, as in the timelines
_MEDIAN = "#d55e00"
_VALUE_MARK_PT = 2.0  # the line at each value of a from-median bar
# On a log axis spanning less than this ratio, the decades alone leave one label or none: the
# minor ticks at 2x and 5x each decade are labelled too; under the second, every minor tick.
_LABEL_MINOR_BELOW_RATIO = 30.0
_LABEL_EVERY_MINOR_BELOW_RATIO = 3.0


def _plain(value: float, _position: object = None) -> str:
    """A tick's value as a reader writes it: ``200``, ``1,000``, ``0.5`` (not ``2x10^2``)."""
    return f"{value:,.0f}" if value >= 1 else f"{value:.2g}"


def _plain_minor(value: float, position: object = None) -> str:
    leading = value / 10 ** math.floor(math.log10(value) + 1e-9)
    return _plain(value) if round(leading) in (2, 5) else ""


def _label_log_axis(ax: Axes) -> None:
    """Label a logarithmic value axis with plain numbers, its 2x and 5x ticks too when it
    spans under a decade and a half, every tick when it spans less than a factor of three."""
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    low, high = ax.get_ylim()
    if high / low < _LABEL_EVERY_MINOR_BELOW_RATIO:
        ax.yaxis.set_minor_formatter(FuncFormatter(_plain))
    elif high / low < _LABEL_MINOR_BELOW_RATIO:
        ax.yaxis.set_minor_formatter(FuncFormatter(_plain_minor))
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())


def plot_per_step(
    steps: Sequence[int],
    series: Mapping[str, Sequence[float]],
    *,
    unit: str = "µs",
    log: bool = True,
    from_median: bool = False,
    title: str | None = None,
) -> Figure:
    """One bar per step for each series, stacked in panels that share the step axis.

    Each panel's dashed line is the median of all its steps (its value is written above the
    panel), so a step many times the median stands out at once. With ``log`` the value axes
    are logarithmic, so a step a hundred times the others does not flatten them to nothing;
    their ticks are written as plain numbers (``200``, ``1,000``).

    Args:
        steps: The step numbers (N of ``ProfilerStep#N``), one per value.
        series: For each panel, its name (the value axis's label) and one value per step.
        unit: Unit of the values, added to the axis labels and the median's label.
        log: Logarithmic value axes (values must then be positive; zeros are left out).
        from_median: Draw each bar from the median line up or down to its value instead of
            from zero, on linear axes: for steps that differ by a few percent, which bars
            from zero would show as equal. The axis keeps the values' own scale, and a line
            marks each value (a step equal to the median has a bar of no height).
        title: Title above the chart.

    Returns:
        The figure.

    Raises:
        ValueError: No steps or no series, a series whose length is not that of ``steps``, or
            ``from_median`` with ``log``.
    """
    if from_median and log:
        raise ValueError("from_median draws bars on linear axes: pass log=False with it")
    if not steps or not series:
        raise ValueError("plot_per_step needs at least one step and one series")
    for name, values in series.items():
        if len(values) != len(steps):
            raise ValueError(f"{name!r} has {len(values)} values for {len(steps)} steps")
    height = _PANEL_IN * len(series) + _EXTRA_IN
    fig, axes = plt.subplots(
        len(series), 1, figsize=(_WIDTH_IN, height), sharex=True, squeeze=False,
        facecolor="white", layout="constrained",
    )  # fmt: skip
    for ax, (name, values) in zip(axes[:, 0], series.items(), strict=True):
        median = statistics.median(values)
        ax.set_facecolor("white")
        if from_median:
            heights = [value - median for value in values]
            ax.bar(steps, heights, bottom=median, color=_BAR, width=0.8)
            # A line at each value: a bar of a step equal to the median has no height.
            marks = ax.hlines(
                values, [s - 0.4 for s in steps], [s + 0.4 for s in steps], color=_BAR,
                linewidth=_VALUE_MARK_PT, zorder=3,
            )  # fmt: skip
            marks.set_gid("step-values")
        else:
            ax.bar(steps, values, color=_BAR, width=0.8)
        ax.axhline(median, color=_MEDIAN, linestyle="--", linewidth=1.2)
        # Above the panel, not on the line, where it would cover the bars.
        ax.set_title(
            f"dashed line: median of all steps, {median:,.1f} {unit}", loc="right",
            fontsize=_TEXT_PT,
            color=_MEDIAN,
        )  # fmt: skip
        if log:
            ax.set_yscale("log")
            _label_log_axis(ax)
        ax.set_ylabel(f"{name} ({unit})", fontsize=_TEXT_PT)
        ax.tick_params(labelsize=_TEXT_PT)
        ax.grid(axis="y", color="#dcdcdc", linewidth=0.6)
        ax.set_axisbelow(True)
    bottom = axes[-1, 0]
    bottom.set_xlabel("ProfilerStep#", fontsize=_TEXT_PT)
    # Whole step numbers, none outside the steps shown: a tick at a step that was not
    # recorded reads as a step without a bar.
    first, last = min(steps), max(steps)
    ticks = MaxNLocator(integer=True, nbins=12).tick_values(first, last)
    bottom.set_xticks([int(tick) for tick in ticks if first <= tick <= last])
    bottom.set_xlim(first - 0.6, last + 0.6)
    if title:  # a row of its own: the panels' titles on the right hold their medians
        fig.suptitle(title, x=0.01, ha="left", fontsize=_TITLE_PT)
    return fig
