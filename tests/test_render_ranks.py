"""One step of several ranks on one clock (profiling_utils.render.ranks), on the two-rank
NCCL recordings of tests/fixtures/nccl."""

from __future__ import annotations

import matplotlib.pyplot as plt
import msgspec
import pytest
from conftest import FIXTURES

from profiling_utils.ranks import rank_profile, trace_files
from profiling_utils.render import plot_rank_step
from profiling_utils.trace import load_trace

STALLED = FIXTURES / "nccl" / "stalled"


@pytest.fixture(scope="module")
def stalled():
    return [rank_profile(load_trace(path)) for path in trace_files([STALLED])]


def bars(ax, row):
    """(start, width) in ms of the bars drawn on one row of the chart."""
    found = []
    for collection in ax.collections:
        for path in collection.get_paths():
            (x0, y0), (x1, y1) = path.vertices.min(axis=0), path.vertices.max(axis=0)
            if y0 < row < y1:
                found.append((x0, x1 - x0))
    return sorted(found)


def test_each_rank_has_its_step_and_collectives_on_one_axis(stalled):
    fig = plot_rank_step(stalled, step=4, title="stalled")
    try:
        (ax,) = fig.axes
        labels = [tick.get_text() for tick in ax.get_yticklabels()]
        assert labels == ["rank 0  step", "collectives", "rank 1  step", "collectives"]
        rank0, rank1 = stalled
        starts = {}
        for profile, row in ((rank0, 0), (rank1, 2)):
            (step,) = [s for s in profile.steps if s.step == 4]
            ((_, width),) = bars(ax, row)
            assert width == pytest.approx(step.cpu_us / 1000)
            starts[row] = step.start_us
        # Both ranks share baseTimeNanoseconds: their steps start at their own ts.
        assert rank0.clock_base_ns == rank1.clock_base_ns
        earliest = min(starts.values())
        for row, start in starts.items():
            assert bars(ax, row)[0][0] == pytest.approx((start - earliest) / 1000)
        # Rank 0 waits in a ~10 ms all_reduce; rank 1's kernel is short.
        longest0 = max(width for _, width in bars(ax, 1))
        longest1 = max(width for _, width in bars(ax, 3))
        assert longest0 > 10 * longest1
        texts = [text.get_text().strip() for text in ax.texts]
        assert texts == [f"all_reduce {longest0:,.2f} ms", f"all_reduce {longest1:,.2f} ms"]
        assert ax.get_xlabel() == "ms from the start of ProfilerStep#4"
        assert ax.get_title(loc="left") == "stalled"
        assert fig.get_figwidth() == pytest.approx(7.36)
    finally:
        plt.close(fig)


def test_a_missing_step_or_mixed_clocks_are_refused(stalled):
    with pytest.raises(ValueError, match="rank 0 has no ProfilerStep#99"):
        plot_rank_step(stalled, step=99)
    with pytest.raises(ValueError, match="at least one"):
        plot_rank_step([], step=4)
    mixed = [stalled[0], msgspec.structs.replace(stalled[1], clock="absolute ts")]
    with pytest.raises(ValueError, match="keep time differently"):
        plot_rank_step(mixed, step=4)


def test_the_longest_step_ends_inside_the_plot(stalled):
    fig = plot_rank_step(stalled, step=4)
    try:
        (ax,) = fig.axes
        ends = [x + width for row in (0, 2) for x, width in bars(ax, row)]
        assert max(ends) < 0.99 * ax.get_xlim()[1]  # its end shows, not cut by the frame
    finally:
        plt.close(fig)
