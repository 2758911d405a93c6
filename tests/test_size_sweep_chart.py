"""The size-sweep chart: medians, their IQRs and a marked interval, read back from the artists."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.text import Text

from profiling_utils.render import plot_size_sweep
from profiling_utils.render.timeline import FIGURE_DPI, MIN_TEXT_PX, PAGE_WIDTH_PX
from profiling_utils.stats import Distribution

matplotlib.use("Agg")

SIZES = [64, 512, 4096]
CPU = [
    Distribution.of(v, unit="µs")
    for v in ([80, 90, 100, 85, 95], [82, 88, 120, 90, 86], [70, 75, 80, 85, 300])
]
GPU = [
    Distribution.of(v, unit="µs")
    for v in ([4, 4, 5, 4, 4], [9, 10, 9, 11, 10], [200, 201, 199, 205, 202])
]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _line(fig, index: int):
    (line,) = [ln for ln in fig.axes[0].lines if ln.get_gid() == f"series-{index}"]
    return line


def test_medians_are_joined_and_the_iqr_is_the_error_bar() -> None:
    fig = plot_size_sweep(SIZES, {"CPU": CPU, "GPU": GPU})
    for index, values in enumerate((CPU, GPU)):
        line = _line(fig, index)
        assert list(line.get_xdata()) == SIZES
        assert list(line.get_ydata()) == [d.median for d in values]
    # The 300 µs outlier of the last CPU size moves neither the point nor its bar's top much.
    ax = fig.axes[0]
    bars = [c for c in ax.collections if c.get_segments() and len(c.get_segments()) == 3]
    tops = sorted(max(seg[:, 1]) for seg in bars[0].get_segments())
    q3 = sorted(d.quartiles[1] for d in CPU)
    assert tops == pytest.approx(q3)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(s) for s in SIZES]


def test_the_interval_is_shaded_between_two_sizes_and_named_in_the_legend() -> None:
    fig = plot_size_sweep(
        SIZES, {"CPU": CPU, "GPU": GPU}, between=(512, 4096), between_label="GPU overtakes CPU"
    )
    ax = fig.axes[0]
    (band,) = [p for p in ax.patches if p.get_gid() == "between"]
    assert (band.get_x(), band.get_x() + band.get_width()) == (512, 4096)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == "GPU overtakes CPU: between n=512 and n=4096"
    assert legend[0] == "CPU (median, IQR)"


def test_every_text_is_inside_the_figure_and_readable_at_page_width() -> None:
    fig = plot_size_sweep(
        SIZES, {"CPU": CPU, "GPU": GPU}, between=(512, 4096), between_label="x", title="t"
    )
    fig.canvas.draw()
    assert fig.get_figwidth() * fig.dpi <= PAGE_WIDTH_PX and fig.dpi == FIGURE_DPI
    figure_box = fig.bbox
    texts = [t for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    for text in texts:
        box = text.get_window_extent()
        assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1 + 0.5, text.get_text()
        assert text.get_fontsize() * fig.dpi / 72 >= MIN_TEXT_PX, text.get_text()


def test_one_series_alone_and_bad_arguments() -> None:
    fig = plot_size_sweep(SIZES, {"CPU": CPU})
    assert np.allclose(_line(fig, 0).get_ydata(), [d.median for d in CPU])
    with pytest.raises(ValueError, match="3 sizes"):
        plot_size_sweep(SIZES, {"CPU": CPU[:2]})
    with pytest.raises(ValueError, match="increasing"):
        plot_size_sweep([64, 64, 128], {"CPU": CPU})
    with pytest.raises(ValueError, match="between"):
        plot_size_sweep(SIZES, {"CPU": CPU}, between=(512, 1024))
    with pytest.raises(ValueError, match="at least one"):
        plot_size_sweep(SIZES, {})
