"""The per-step chart (profiling_utils.render.steps)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from conftest import gpu_fixture

from profiling_utils import load_trace
from profiling_utils.measures import step_times
from profiling_utils.render import plot_per_step


def test_one_bar_per_step_and_the_median_labelled():
    times = step_times(load_trace(gpu_fixture("64_bf16_warm_eager_w0a20.json.gz")))
    steps = [t.step for t in times]
    widths = [t.cpu_us for t in times]
    fig = plot_per_step(steps, {"step width": widths, "GPU busy": [t.gpu_busy_us for t in times]})
    try:
        top, bottom = fig.axes
        assert len(top.patches) == len(steps) == 20
        assert [round(bar.get_height(), 3) for bar in top.patches] == [round(w, 3) for w in widths]
        assert top.get_yscale() == "log"
        ordered = sorted(widths)
        median = (ordered[9] + ordered[10]) / 2
        assert top.get_title(loc="right") == f"dashed line: median of all steps, {median:,.1f} µs"
        assert not top.texts  # nothing drawn over the bars
        assert top.lines[0].get_ydata()[0] == pytest.approx(median)
        assert bottom.get_xlabel() == "ProfilerStep#"
        assert fig.get_figwidth() == pytest.approx(7.36)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("steps", [list(range(20)), list(range(11, 33)), [5], [3, 4]])
def test_the_step_axis_ticks_whole_steps_that_were_recorded(steps: list[int]) -> None:
    fig = plot_per_step(steps, {"step width": [1.0 + step for step in steps]})
    try:
        (ax,) = fig.axes
        ticks = list(ax.get_xticks())
        assert ticks and all(tick == int(tick) for tick in ticks)
        # No tick past the first or the last step: it would read as a step without a bar.
        assert min(steps) <= min(ticks) and max(ticks) <= max(steps)
        low, high = ax.get_xlim()
        assert low < min(steps) - 0.4 and max(steps) + 0.4 < high
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    ("values", "labels"),
    [
        # Two decades and more: the decades only, written out.
        ([3000.0, 180.0, 65.0, 60.0], {"100", "1,000"}),
        # Under a decade and a half: the 2x and 5x ticks too, never "2x10^1".
        ([180.0, 27.0, 15.0, 13.0], {"20", "50", "100", "200"}),
        # Under a factor of three: every tick.
        ([55.0, 60.0, 62.0, 70.0], {"60", "70"}),
    ],
)
def test_log_axes_are_labelled_with_plain_numbers(values: list[float], labels: set[str]):
    fig = plot_per_step(list(range(len(values))), {"gap": values})
    try:
        (ax,) = fig.axes
        fig.canvas.draw()
        low, high = ax.get_ylim()
        shown = {
            tick.label1.get_text()
            for tick in [*ax.yaxis.get_major_ticks(), *ax.yaxis.get_minor_ticks()]
            if low <= tick.get_loc() <= high and tick.label1.get_text()
        }
        assert shown == labels
    finally:
        plt.close(fig)


def test_linear_axes_on_request():
    fig = plot_per_step([0, 1, 2], {"gap": [0.0, 3.0, 4.0]}, log=False, unit="ms", title="t")
    try:
        (ax,) = fig.axes
        assert ax.get_yscale() == "linear"
        assert ax.get_ylabel() == "gap (ms)"
        assert fig.get_suptitle() == "t"
    finally:
        plt.close(fig)


def test_bars_from_the_median_keep_the_values_on_the_axis():
    values = [174.9, 174.7, 169.5, 169.8, 170.0]
    fig = plot_per_step([1, 2, 3, 4, 5], {"GEMM": values}, log=False, from_median=True)
    try:
        (ax,) = fig.axes
        bars = ax.patches
        # Each bar spans the median and its own value, so its top or its bottom is the value.
        assert [b.get_y() for b in bars] == pytest.approx([170.0] * 5)
        assert [b.get_y() + b.get_height() for b in bars] == pytest.approx(values)
        assert ax.get_title(loc="right") == "dashed line: median of all steps, 170.0 µs"
        low, high = ax.get_ylim()
        assert low > 100  # not from zero: a 3% difference stays visible
        # A step equal to the median (170.0) has a bar of no height: a line marks each value.
        (marks,) = [c for c in ax.collections if c.get_gid() == "step-values"]
        segments = marks.get_segments()
        assert [segment[0][1] for segment in segments] == pytest.approx(values)
        assert [x for segment in segments for x in (segment[0][0], segment[1][0])] == (
            pytest.approx([x for b in bars for x in (b.get_x(), b.get_x() + b.get_width())])
        )
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="log=False"):
        plot_per_step([1, 2], {"GEMM": [1.0, 2.0]}, from_median=True)


def test_series_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="'gap' has 2 values for 3 steps"):
        plot_per_step([0, 1, 2], {"gap": [1.0, 2.0]})
    with pytest.raises(ValueError, match="at least one step"):
        plot_per_step([], {})
