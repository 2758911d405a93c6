"""Timeline images, checked on the recorded H100 traces through the artists that were drawn."""

from __future__ import annotations

import io

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from conftest import FOREIGN, complete_event, gpu_fixture, gpu_fixture_names
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from profiling_utils.render import (
    Highlight,
    highlight_between,
    highlight_span,
    plot_timeline,
)
from profiling_utils.render.timeline import (
    BEFORE_MARK,
    BELOW_MARK,
    BESIDE_MARK,
    FIGURE_DPI,
    MIN_TEXT_PX,
    PAGE_WIDTH_PX,
)
from profiling_utils.trace import Span, Trace, load_trace

matplotlib.use("Agg")

ELLIPSIS = "\u2026"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def cold() -> Trace:
    return load_trace(gpu_fixture("64_bf16_cold_eager"))


@pytest.fixture(scope="module")
def training() -> Trace:
    return load_trace(gpu_fixture("train_tiny_transformer_a3"))


def _axes(fig: Figure) -> Axes:
    (ax,) = fig.axes
    return ax


def _boxes(ax: Axes) -> PolyCollection:
    (boxes,) = [c for c in ax.collections if c.get_gid() == "timeline-boxes"]
    return boxes


def _texts(ax: Axes, gid: str) -> list[Text]:
    return [t for t in ax.texts if t.get_gid() == gid]


def _lane_titles(fig: Figure) -> list[str]:
    return [label.get_text() for label in _axes(fig).get_yticklabels()]


def _box_spans_x(ax: Axes) -> list[tuple[float, float]]:
    return [(p.vertices[:, 0].min(), p.vertices[:, 0].max()) for p in _boxes(ax).get_paths()]


def _step(trace: Trace, number: int):
    (step,) = [s for s in trace.steps if s.number == number]
    return step


def _inside(trace: Trace, name: str, step_number: int) -> Span:
    step = _step(trace, step_number)
    return next(s for s in trace.find(name) if step.start <= s.start <= step.end)


# --- lanes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_overhead_lane_only_where_the_profiler_left_overhead(name: str) -> None:
    trace = load_trace(gpu_fixture(name))
    titles = _lane_titles(plot_timeline(trace))
    assert ("CUPTI overhead" in titles) == bool(trace.overhead)
    assert titles[0].startswith("CPU thread ")
    assert "GPU 0 · stream 7" in titles


def test_buffer_request_trace_draws_it_on_the_overhead_lane() -> None:
    trace = load_trace(gpu_fixture("64_bf16_warm_eager_w0a3"))
    assert [s.name for s in trace.overhead] == ["Activity Buffer Request"]
    fig = plot_timeline(trace)
    assert _lane_titles(fig) == ["CPU thread 429\npython3", "GPU 0 · stream 7", "CUPTI overhead"]
    names = [t.get_text() for t in _texts(_axes(fig), "span-name")]
    assert "Activity Buffer Request" in names


def test_lanes_without_spans_in_the_window_are_left_out(cold: Trace) -> None:
    first_gpu = min(s.start for s in cold.gpu_work)
    fig = plot_timeline(cold, window=(0.0, first_gpu - 1.0))
    assert _lane_titles(fig) == ["CPU thread 429\npython3"]


def test_lanes_argument_selects_lanes(cold: Trace) -> None:
    gpu_lanes = [lane for lane in cold.lanes if lane.kind == "gpu"]
    fig = plot_timeline(cold, lanes=gpu_lanes)
    assert _lane_titles(fig) == ["GPU 0 · stream 7"]
    assert len(_boxes(_axes(fig)).get_paths()) == sum(
        len(cold.lane_spans(lane)) for lane in gpu_lanes
    )


# --- zoom --------------------------------------------------------------------------------------


def test_step_zoom_covers_the_step_and_its_gpu_work_and_little_else(cold: Trace) -> None:
    step = _step(cold, 3)
    assert step.gpu_work, "the fixture's step 3 launched kernels"
    low = min([step.start, *(w.start for w in step.gpu_work)])
    high = max([step.end, *(w.end for w in step.gpu_work)])
    x0, x1 = _axes(plot_timeline(cold, step=3)).get_xlim()
    assert x0 <= low and high <= x1
    margin = 0.05 * (high - low)
    assert low - x0 <= margin and x1 - high <= margin
    # Neighbouring steps stay out of the picture.
    assert x1 < _step(cold, 4).start + margin and x0 > _step(cold, 2).start


def test_window_is_drawn_exactly_and_only_spans_in_it(cold: Trace) -> None:
    step = _step(cold, 2)
    window = (step.start, step.start + 60.0)
    ax = _axes(plot_timeline(cold, window=window))
    assert ax.get_xlim() == pytest.approx(window)
    expected = [
        s
        for s in cold.spans
        if s.lane.kind != "other" and s.start <= window[1] and s.end >= window[0]
    ]
    assert len(_boxes(ax).get_paths()) == len(expected)
    for start, end in _box_spans_x(ax):
        assert start <= window[1] and end >= window[0]


def test_whole_trace_is_in_µs_and_long_traces_in_ms(cold: Trace, training: Trace) -> None:
    assert _axes(plot_timeline(cold)).get_xlabel().endswith("(µs)")
    ax = _axes(plot_timeline(training))
    assert ax.get_xlabel().endswith("(ms)")
    ticks = [float(t.get_text()) for t in ax.get_xticklabels() if t.get_text()]
    assert max(ticks) < 1000, "ticks are written in ms, not µs"


def test_step_boundaries_and_labels(cold: Trace) -> None:
    ax = _axes(plot_timeline(cold))
    (lines,) = [c for c in ax.collections if c.get_gid() == "step-boundaries"]
    xs = sorted({segment[0][0] for segment in lines.get_segments()})
    expected = sorted({x for s in cold.steps for x in (s.start, s.end)})
    assert xs == pytest.approx(expected)
    labels = [t.get_text() for t in _texts(ax, "step-label")]
    assert len(labels) == len(cold.steps)
    for label, step in zip(labels, cold.steps, strict=True):
        assert label in (f"ProfilerStep#{step.number}", f"#{step.number}")
    widest = max(cold.steps, key=lambda s: s.span.dur)
    assert f"ProfilerStep#{widest.number}" in labels, "a step wide enough is named in full"


def test_step_boundaries_closer_than_a_few_points_are_drawn_as_one() -> None:
    trace = load_trace(gpu_fixture("64_bf16_warm_eager_w0a20"))
    fig = plot_timeline(trace)  # a long first step, then nineteen short ones at its right
    ax = _axes(fig)
    (lines,) = [c for c in ax.collections if c.get_gid() == "step-boundaries"]
    drawn = np.array(sorted(segment[0][0] for segment in lines.get_segments()))
    x0, x1 = ax.get_xlim()
    pt_per_us = ax.bbox.width * 72 / fig.dpi / (x1 - x0)
    assert np.diff(drawn).min() * pt_per_us >= 4.0
    every = [x for s in trace.steps for x in (s.start, s.end)]
    nearest_pt = [np.abs(drawn - x).min() * pt_per_us for x in every]
    assert max(nearest_pt) < 4.0, "a boundary left out lies next to one drawn"
    assert len(drawn) < len(set(every)), "this trace's short steps share lines"


# --- highlights --------------------------------------------------------------------------------


def test_dead_window_highlight_is_a_labelled_band_on_the_cpu_lane(cold: Trace) -> None:
    annotation = _inside(cold, "matmul_add", 2)
    first_op = _inside(cold, "aten::matmul", 2)
    dead = highlight_between(annotation, first_op, "dead window")
    assert (dead.start, dead.end) == (annotation.start, first_op.start)
    assert dead.lane == annotation.lane

    ax = _axes(plot_timeline(cold, step=2, highlights=[dead]))
    (band,) = [p for p in ax.patches if p.get_gid() == "highlight"]
    assert isinstance(band, Rectangle)
    assert band.get_x() == pytest.approx(dead.start)
    assert band.get_width() == pytest.approx(dead.duration_us)
    (label,) = _texts(ax, "highlight-label")
    assert label.get_text() == f"dead window {dead.duration_us:.3g} µs"
    assert band.get_label() == label.get_text()
    # The band stays on the CPU lane: it ends above the GPU lane's first row.
    gpu_row = [t.get_position()[1] for t in ax.get_yticklabels()][1] - 0.5
    assert band.get_y() + band.get_height() < gpu_row


def test_offset_highlight_between_lanes_spans_all_lanes(cold: Trace) -> None:
    kernel = _step(cold, 2).gpu_work[0]
    launch = cold.launch_of(kernel)
    assert launch is not None
    offset = highlight_between(launch, kernel, "launch to kernel")
    assert offset.lane is None
    assert offset.start == (launch.start if launch.end > kernel.start else launch.end)
    assert offset.end == kernel.start
    ax = _axes(plot_timeline(cold, step=2, highlights=[offset]))
    (band,) = [p for p in ax.patches if p.get_gid() == "highlight"]
    lane_rows = [t.get_position()[1] for t in ax.get_yticklabels()]
    assert band.get_y() < lane_rows[0] and band.get_y() + band.get_height() > lane_rows[-1]


def test_a_highlights_edges_go_under_boxes_and_names(cold: Trace) -> None:
    # Readers found band edges cutting names in two ("Dt|oH", "4.|94") and hiding a kernel
    # of a few µs at a range's limit.
    step = _step(cold, 2)
    ax = _axes(plot_timeline(cold, step=2, highlights=[Highlight(step.start, step.end, "s")]))
    blue = matplotlib.colors.to_rgba("#0072b2")
    edges = [
        c for c in ax.collections
        if isinstance(c, LineCollection) and tuple(c.get_color()[0]) == pytest.approx(blue)
        and all(seg[0][0] == seg[-1][0] for seg in c.get_segments())  # vertical: the edges
    ]  # fmt: skip
    names = _texts(ax, "span-name") + _texts(ax, "span-name-beside")
    assert edges and names
    assert all(e.get_zorder() < _boxes(ax).get_zorder() for e in edges)
    assert all(e.get_zorder() < n.get_zorder() for e in edges for n in names)


def test_a_highlight_label_near_the_window_edge_stays_inside_the_plot(make_trace) -> None:
    # Page 06: "32 occupancy queries 58 µs" reached the right edge; a bold label measured
    # as regular text is centred where it no longer fits. Slide a range towards the edge.
    trace = load_trace(make_trace([complete_event("aten::op", "cpu_op", 0, 1000)]))
    for end in range(700, 1001, 4):
        band = Highlight(end - 2.0, float(end), "occupancy queries WWWWWWWWWWWW")
        fig = plot_timeline(trace, window=(0.0, 1000.0), highlights=[band])
        fig.canvas.draw()
        ax = _axes(fig)
        (label,) = _texts(ax, "highlight-label")
        assert label.get_window_extent().x1 <= ax.get_window_extent().x1 + 0.5, end
        plt.close(fig)


def test_highlight_labels_never_overlap(cold: Trace) -> None:
    step = _step(cold, 2)
    kernels = step.gpu_work
    highlights = [
        highlight_between(_inside(cold, "matmul_add", 2), _inside(cold, "aten::matmul", 2), "a"),
        highlight_between(kernels[0], kernels[1], "gap between the two kernels of this step"),
        *(highlight_span(k, "kernel") for k in kernels),
        Highlight(step.start, step.end, "the whole step"),
    ]
    fig = plot_timeline(cold, step=2, highlights=highlights)
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in _texts(_axes(fig), "highlight-label")]
    assert len(boxes) == len(highlights)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b)


def test_memcpy_before_gemm_in_a_compiled_step() -> None:
    trace = load_trace(gpu_fixture("4096_bf16_warm_compile"))
    copy = next(w for w in _step(trace, 3).gpu_work if w.cat == "gpu_memcpy")
    ax = _axes(plot_timeline(trace, step=3, highlights=[highlight_span(copy, "DtoD copy")]))
    (band,) = [p for p in ax.patches if p.get_gid() == "highlight"]
    assert (band.get_x(), band.get_width()) == pytest.approx((copy.start, copy.dur))
    gemm = next(w for w in _step(trace, 3).gpu_work if w.cat == "kernel")
    assert copy.end <= gemm.start
    # Zoomed onto the copy and the start of the GEMM, both are named (the GEMM, cut by the
    # window, less the room of its cut mark: its name may be shortened).
    ax = _axes(plot_timeline(trace, window=(copy.start - 1.0, gemm.start + 70.0)))
    names = [t.get_text() for t in _texts(ax, "span-name")]
    assert any(n.startswith(gemm.name[:24]) for n in names), names
    assert any(n.startswith("Memcpy Dto") for n in names)


def test_highlight_arguments_are_checked(cold: Trace) -> None:
    annotation = _inside(cold, "matmul_add", 2)
    first_op = _inside(cold, "aten::matmul", 2)
    with pytest.raises(ValueError, match="starts at"):
        highlight_between(first_op, annotation, "backwards")
    with pytest.raises(ValueError, match="before start"):
        Highlight(10.0, 5.0, "reversed")
    far = Highlight(1e9, 1e9 + 1, "far away")
    with pytest.raises(ValueError, match="outside the window"):
        plot_timeline(cold, step=2, highlights=[far])
    gpu_lane = next(lane for lane in cold.lanes if lane.kind == "gpu")
    on_gpu = Highlight(annotation.start, annotation.end, "not drawn", lane=gpu_lane)
    cpu_lanes = [lane for lane in cold.lanes if lane.kind == "cpu"]
    with pytest.raises(ValueError, match="not drawn"):
        plot_timeline(cold, lanes=cpu_lanes, highlights=[on_gpu])


# --- names -------------------------------------------------------------------------------------


def _box_extents(fig: Figure) -> np.ndarray:
    ax = _axes(fig)
    corners = [ax.transData.transform(p.vertices) for p in _boxes(ax).get_paths()]
    return np.array([[c[:, 0].min(), c[:, 1].min(), c[:, 0].max(), c[:, 1].max()] for c in corners])


@pytest.mark.parametrize("step", [None, 2, 3])
def test_names_are_drawn_only_inside_boxes_they_fit(cold: Trace, step: int | None) -> None:
    fig = plot_timeline(cold, step=step)
    fig.canvas.draw()
    extents = _box_extents(fig)
    names = _texts(_axes(fig), "span-name")
    assert names
    for name in names:
        text = name.get_window_extent()
        x, y = (text.x0 + text.x1) / 2, (text.y0 + text.y1) / 2
        holders = extents[
            (extents[:, 0] <= x)
            & (x <= extents[:, 2])
            & (extents[:, 1] <= y)
            & (y <= extents[:, 3])
        ]
        assert len(holders) >= 1, name.get_text()
        x0, _, x1, _ = holders[np.argmin(holders[:, 2] - holders[:, 0])]
        assert x0 <= text.x0 and text.x1 <= x1, f"{name.get_text()!r} spills out of its box"


def test_names_too_long_for_their_box_go_beside_it_on_a_free_row(cold: Trace) -> None:
    fig = plot_timeline(cold, step=2)
    fig.canvas.draw()
    ax = _axes(fig)
    extents = _box_extents(fig)
    beside = _texts(ax, "span-name-beside")
    # The launch calls are a few µs wide: too narrow for their names, which go beside, whole,
    # after a mark that points back at the box, in grey italics: a label, not work on the row.
    runtime_names = {s.name for s in cold.spans if s.cat in ("cuda_runtime", "cuda_driver")}
    before = _texts(ax, "span-name-before")
    assert all(t.get_text().startswith(BESIDE_MARK) for t in beside)
    assert all(t.get_text().endswith(BEFORE_MARK) for t in before)
    whole = [t.get_text().removeprefix(BESIDE_MARK) for t in beside] + [
        t.get_text().removesuffix(BEFORE_MARK) for t in before
    ]
    assert any(name in runtime_names for name in whole)
    assert {(t.get_fontstyle(), t.get_color()) for t in beside} == {("italic", "#444444")}
    assert {t.get_fontstyle() for t in _texts(ax, "span-name")} == {"normal"}
    for name in beside:
        text = name.get_window_extent()
        row = extents[(extents[:, 1] < text.y0) & (text.y1 < extents[:, 3])]
        assert len(row) >= 1, name.get_text()
        left_of = row[row[:, 2] <= text.x0 + 0.5]
        assert len(left_of), f"{name.get_text()!r} has no box just left of it"
        assert text.x0 - left_of[:, 2].max() < 5, f"{name.get_text()!r} is far from its box"
        overlapping = row[(row[:, 0] < text.x1 - 0.5) & (text.x0 + 0.5 < row[:, 2])]
        assert not len(overlapping), f"{name.get_text()!r} covers a box on its row"


def test_long_names_are_shortened_and_tiny_boxes_stay_unnamed(cold: Trace) -> None:
    names = [t.get_text() for t in _texts(_axes(plot_timeline(cold)), "span-name")]
    full = {s.name for s in cold.spans}
    assert "ProfilerStep#2" in names and "aten::mm" in names
    # An op too wide for its box is named without "aten::" first, then cut short.
    without_namespace = [n for n in names if "aten::" + n in full]
    assert "mm" in without_namespace
    shortened = [n for n in names if n not in full and n not in without_namespace]
    assert shortened and all(n.endswith(ELLIPSIS) for n in shortened)
    assert all(any(s.removeprefix("aten::").startswith(n[:-1]) for s in full) for n in shortened)
    # Kernels of a 64x64 matmul last about 2 µs: far too narrow to name in a 1 ms picture.
    assert not any(n.startswith(("nvjet", "at::native")) for n in names)
    # Zoomed onto one kernel, its name appears, without the demangler's "void" and arguments.
    kernel = next(k for k in cold.kernels if k.name.startswith("void "))
    zoomed = plot_timeline(cold, window=(kernel.start - 0.1, kernel.end + 0.1))
    kernel_names = [t.get_text() for t in _texts(_axes(zoomed), "span-name")]
    # Too long for the picture whole, it is written without the namespaces and template
    # arguments that say nothing at this width, keeping the functor that says what it adds.
    assert "vectorized_elementwise_kernel<…CUDAFunctor_add…>" in kernel_names
    assert not any("(" in n or "at::" in n for n in kernel_names if "elementwise" in n)


NAME_GIDS = ("span-name", "span-name-beside", "span-name-before", "span-name-below")


def _assert_names_clear(fig: Figure) -> None:
    """No two names overlap, and a name outside its box overlaps no box."""
    fig.canvas.draw()
    ax = _axes(fig)
    boxes = _box_extents(fig)
    names = [(t, t.get_window_extent()) for t in ax.texts if t.get_gid() in NAME_GIDS]
    for index, (text, box) in enumerate(names):
        for other, other_box in names[index + 1 :]:
            assert not box.shrunk(0.98, 0.9).overlaps(other_box.shrunk(0.98, 0.9)), (
                text.get_text(),
                other.get_text(),
            )
        if text.get_gid() != "span-name":
            covered = boxes[
                (boxes[:, 0] < box.x1 - 0.5)
                & (box.x0 + 0.5 < boxes[:, 2])
                & (boxes[:, 1] < box.y1 - 1)
                & (box.y0 + 1 < boxes[:, 3])
            ]
            assert not len(covered), f"{text.get_text()!r} covers a box"


def _kernel(name: str, ts: float, dur: float) -> dict:
    return complete_event(name, "kernel", ts, dur, pid=0, tid=7, device=0, stream=7)


GELU = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const::"
    "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >"
    "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
    "{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)"
)
MUL = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
    "std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
)


def test_narrow_kernels_are_named_by_what_they_apply(make_trace) -> None:
    # The GEMM, GELU, GEMM, multiply of an eager MLP, back to back as on page 13: the two
    # elementwise kernels share a long prefix ("at::native::vectorized_elementwise_kernel<8,
    # at::native::"), so a prefix cut to their boxes would name neither.
    gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 265),
                _kernel(gemm, 3, 57),
                _kernel(GELU, 63, 34),
                _kernel(gemm, 100, 57),
                _kernel(MUL, 158, 50),
                _kernel(gemm, 210, 52),
            ]
        )
    )
    fig = plot_timeline(trace, window=(0.0, 265.0))
    names = [t.get_text() for t in _texts(_axes(fig), "span-name")]
    gelu = [n for n in names if n.startswith("Gelu")]
    assert gelu and len(gelu[0]) >= len("Gelu…"), names
    assert "MulFunctor" in names
    assert not any(n.startswith(("at::", "vectorized")) for n in names)
    _assert_names_clear(fig)


def test_an_add_kernel_cut_short_keeps_the_op_not_the_functor_prefix(make_trace) -> None:
    # Pages 01 and 02 named the add kernel "◂ CUDAFunctor_…", which drops the "add".
    add = (
        "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<"
        "c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<"
        "c10::BFloat16>, std::array<char*, 3ul>)"
    )
    gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 265),
                _kernel(gemm, 3, 120),
                _kernel(add, 124, 3),
                _kernel(gemm, 150, 110),
            ]
        )
    )
    fig = plot_timeline(trace, window=(0.0, 265.0))
    names = [t.get_text() for t in _texts(_axes(fig), "span-name-beside")]
    assert names == [BESIDE_MARK + "add"], names  # not enough room for "◂ CUDAFunctor_add"
    _assert_names_clear(fig)


def test_a_shortened_name_keeps_more_than_a_shared_prefix() -> None:
    # Page 04 read "◂ cuda…" beside a launch: every runtime call on the lane begins so.
    from profiling_utils.render.timeline import _NAME_PT, _fit, _text_width_pt

    def room(text: str) -> float:
        return _text_width_pt(text + ELLIPSIS, _NAME_PT)

    assert _fit("cudaLaunchKernel", room("cudaLa")) is None
    assert _fit("cudaLaunchKernel", room("cudaLaun")) == "cudaLaun" + ELLIPSIS
    assert _fit("aten::_local_scalar_dense", room("aten::_lo")) is None
    assert _fit("nvjet_sm90_tst_256x128", room("nvje")) == "nvje" + ELLIPSIS


def test_name_goes_before_a_box_when_only_the_left_of_it_is_free(make_trace) -> None:
    # A launch at the end of a picture (page 4's first step): no room right of it, but its
    # row is free far to the left.
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
                complete_event("aten::mm", "cpu_op", 5, 990),
                complete_event("cudaLaunchKernel", "cuda_runtime", 950, 40),
            ]
        )
    )
    fig = plot_timeline(trace, window=(0.0, 1000.0))
    ax = _axes(fig)
    (before,) = _texts(ax, "span-name-before")
    assert before.get_text() == "cudaLaunchKernel" + BEFORE_MARK
    assert (before.get_fontstyle(), before.get_color()) == ("italic", "#444444")
    fig.canvas.draw()
    launch = _box_extents(fig)[2]
    text = before.get_window_extent()
    assert text.x1 <= launch[0] and launch[0] - text.x1 < 5, "it ends just left of the box"
    assert launch[1] < (text.y0 + text.y1) / 2 < launch[3], "on the box's row"
    _assert_names_clear(fig)


@pytest.mark.parametrize("crowd", [True, False])
def test_no_name_goes_after_the_last_of_a_crowd_of_hairlines(make_trace, crowd: bool) -> None:
    # Page 02: "◂ cudaMalloc" after a block of runtime calls that were mostly others. Alone,
    # the same hairline is named beside it.
    others = [complete_event("cudaDeviceGetAttribute", "cuda_runtime", 300, 6)] if crowd else []
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
                complete_event("aten::mm", "cpu_op", 5, 990),
                *others,
                complete_event("cudaMalloc", "cuda_runtime", 306.5, 1),
            ]
        )
    )
    ax = _axes(plot_timeline(trace, window=(0.0, 1000.0)))
    named = [t.get_text() for t in ax.texts if "cudaMalloc" in t.get_text()]
    assert named == ([] if crowd else [BESIDE_MARK + "cudaMalloc"])


@pytest.mark.parametrize(("dur", "shown"), [(30.0, "nvjet"), (12.0, None)])
def test_a_library_kernel_too_narrow_for_a_cut_name_shows_its_family(
    make_trace, dur: float, shown: str | None
) -> None:
    # Page 14: the two GEMMs between other kernels had no name at all; "nvje…" did not fit,
    # "nvjet" does. Narrower still, nothing.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 400),
        _kernel("before_kernel_with_a_long_name", 0, 100),
        _kernel("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", 100, dur),
        _kernel("after_kernel_with_a_long_name", 100 + dur, 300 - dur),
    ]
    ax = _axes(plot_timeline(load_trace(make_trace(events)), window=(0.0, 400.0)))
    texts = [t.get_text() for t in ax.texts]
    assert ("nvjet" in texts) == (shown is not None)
    assert not [t for t in texts if t.startswith("nvje") and t != "nvjet"]


def test_no_name_goes_before_a_kernel_into_the_gpus_idle_time(make_trace) -> None:
    # Page 1: a name left of the add kernel sat in the highlighted "GPU idle" stretch, read
    # as work there. The same layout on a CPU lane (above) gets its name before the box.
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
                _kernel("a_kernel_with_a_long_name_that_fits_nowhere_inside", 950, 40),
            ]
        )
    )
    fig = plot_timeline(trace, window=(0.0, 1000.0))
    ax = _axes(fig)
    assert not _texts(ax, "span-name-before")
    assert not [t for t in ax.texts if "a_kernel" in t.get_text()]


def test_no_name_goes_beside_a_kernel_into_a_highlighted_range(make_trace) -> None:
    # Page 10: a kernel's name ran on the GPU lane across the highlighted buffer request,
    # the stretch in which the page asks what the GPU did (nothing).
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
        _kernel("a_kernel_with_a_long_name_that_fits_nowhere_inside", 100, 2),
        _kernel("next_kernel", 900, 2),
    ]
    trace = load_trace(make_trace(events))
    plain = plot_timeline(trace, window=(0.0, 1000.0))
    assert any("a_kernel" in t.get_text() for t in _texts(_axes(plain), "span-name-beside"))
    band = Highlight(103.0, 700.0, "request")  # from just after the kernel
    marked = plot_timeline(trace, window=(0.0, 1000.0), highlights=[band])
    assert not [t for t in _axes(marked).texts if "a_kernel" in t.get_text()]


def test_no_name_goes_under_one_of_a_row_of_like_boxes(make_trace) -> None:
    # Page 07: "▴ aten::matmul" under one of twenty equal boxes could point at any of them.
    events = [complete_event("ProfilerStep#1", "user_annotation", 0, 400)]
    for i in range(12):
        events.append(complete_event("aten::matmul", "cpu_op", 10 + 30 * i, 8))
    trace = load_trace(make_trace(events))
    fig = plot_timeline(trace, window=(0.0, 400.0))
    assert not _texts(_axes(fig), "span-name-below")


def test_no_name_goes_into_a_range_highlighted_on_another_lane(make_trace) -> None:
    # Page 04: "cuLaunchKernelEx ▸" sat inside the buffer request's band (CUPTI's row),
    # while the page says the CPU thread waits through it.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
        complete_event("aten::mm", "cpu_op", 5, 990),
        complete_event("cudaLaunchKernel", "cuda_runtime", 950, 40),
        complete_event("Activity Buffer Request", "overhead", 700, 240, pid=-1, tid=0),
    ]
    trace = load_trace(make_trace(events))
    (request,) = trace.find("Activity Buffer Request")
    plain = plot_timeline(trace, window=(0.0, 1000.0))
    assert _texts(_axes(plain), "span-name-before")  # the name goes left of the box...
    marked = plot_timeline(
        trace, window=(0.0, 1000.0), highlights=[highlight_span(request, "request")]
    )
    ax = _axes(marked)
    # ...but not into the band: here nowhere else has room for it.
    assert not [t for t in ax.texts if "cudaLaunch" in t.get_text()]


def test_no_name_goes_into_a_range_highlighted_on_its_own_lane(make_trace) -> None:
    # Page 02: "cuLaunchKernelEx ▸" sat in the dead window's band on the CPU lane, next to a
    # claim that nothing is recorded there.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
        complete_event("aten::mm", "cpu_op", 5, 990),
        complete_event("cuLaunchKernelEx", "cuda_runtime", 200, 20),
    ]
    trace = load_trace(make_trace(events))
    (launch,) = trace.find("cuLaunchKernelEx")
    plain = _axes(plot_timeline(trace, window=(0.0, 1000.0)))
    (beside,) = _texts(plain, "span-name-beside")  # just right of the box...
    band = Highlight(225.0, 600.0, "dead window", lane=launch.lane)
    marked = _axes(plot_timeline(trace, window=(0.0, 1000.0), highlights=[band]))
    names = [t for gid in NAME_GIDS[1:] for t in _texts(marked, gid) if "cuLaunch" in t.get_text()]
    marked.figure.canvas.draw()
    to_data = marked.transData.inverted()
    for name in names:  # ...but not into the band, on the box's own lane
        extent = name.get_window_extent()
        (left, _), (right, _) = to_data.transform([(extent.x0, 0), (extent.x1, 0)])
        assert right <= band.start or left >= band.end, name.get_text()
    assert beside.get_text().startswith(BESIDE_MARK)


def test_a_box_inside_a_highlighted_range_is_named_beside_itself_there(make_trace) -> None:
    # Page 02: the Activity Buffer Request during the highlighted first aten::mm went
    # unnamed: the range kept out every name, though this one says what ran in it. A box
    # outside the range still keeps its name out of it.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
        complete_event("aten::mm", "cpu_op", 5, 800),
        complete_event("cudaLaunchKernel", "cuda_runtime", 200, 20),
        complete_event("cudaMemcpyAsync", "cuda_runtime", 810, 20),
        complete_event("aten::copy_", "cpu_op", 900, 95),
    ]
    trace = load_trace(make_trace(events))
    (mm,) = trace.find("aten::mm")
    band = highlight_span(mm, "first aten::mm")
    ax = _axes(plot_timeline(trace, window=(0.0, 1000.0), highlights=[band]))
    beside = [t.get_text() for t in _texts(ax, "span-name-beside")]
    assert BESIDE_MARK + "cudaLaunchKernel" in beside
    # The copy's name fits after it, outside the range; nothing goes before it, into the range.
    assert not _texts(ax, "span-name-before")


def test_names_outside_boxes_sit_on_their_lanes_colour(cold: Trace) -> None:
    # A step line or a band's edge crossing "◂ aten::add" made it hard to read (page 01).
    ax = _axes(plot_timeline(cold, step=cold.steps[-1].number))
    outside = [t for gid in NAME_GIDS[1:] for t in _texts(ax, gid)]
    assert outside
    for text in outside:
        patch = text.get_bbox_patch()
        assert patch is not None and patch.get_edgecolor()[3] == 0
    lane_colours = {matplotlib.colors.to_hex(t.get_bbox_patch().get_facecolor()) for t in outside}
    assert lane_colours <= {"#f1f2f4", "#ffffff"}


def test_a_name_beside_its_box_stays_out_from_under_other_boxes_above(make_trace) -> None:
    # Page 05: "◂ aten::view", after a view inside aten::matmul, ran under aten::bmm on the
    # row above and read as bmm's child. Here the launch's name would run under aten::add.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
        complete_event("aten::mm", "cpu_op", 10, 290),
        complete_event("cudaLaunchKernel", "cuda_runtime", 280, 10),
        complete_event("aten::add", "cpu_op", 310, 90),
    ]
    trace = load_trace(make_trace(events))
    fig = plot_timeline(trace, window=(0.0, 1000.0))
    fig.canvas.draw()
    ax = _axes(fig)
    (name,) = [t for t in ax.texts if "cudaLaunchKernel" in t.get_text()]
    assert name.get_gid() == "span-name-before"  # left of the box, under aten::mm, its parent
    add_left = ax.transData.transform((310.0, 0.0))[0]
    assert name.get_window_extent().x1 <= add_left


def test_a_kernel_narrower_than_a_pixel_still_shows(make_trace) -> None:
    # Page 04: a 2 µs GEMM in a 2.5 ms picture was snapped to no pixel at all in the 1x PNG.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 2500),
        # Hairlines at every fraction of a pixel: 13.37 µs is about 3.05 pixels here.
        *(_kernel(f"k{i}", 1000 + 13.37 * i, 0.5) for i in range(60)),
    ]
    trace = load_trace(make_trace(events))
    fig = plot_timeline(trace, window=(0.0, 2500.0))
    fig.set_dpi(FIGURE_DPI)
    fig.canvas.draw()
    ax = _axes(fig)
    pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    kernels = [p for p in _boxes(ax).get_paths() if p.vertices[:, 1].min() > 0.5]
    assert len(kernels) == 60
    for path in kernels:
        (x0, y0), (x1, y1) = ax.transData.transform(path.vertices[[0, 2]])
        column = round((x0 + x1) / 2)
        rows = slice(int(min(y0, y1)) + 2, int(max(y0, y1)) - 2)
        height = pixels.shape[0]
        strip = pixels[height - rows.stop : height - rows.start, column - 1 : column + 2]
        # Some pixel of the column is clearly not the white background.
        assert (strip.sum(axis=2) < 3 * 235).any(), (x0, x1)


def test_no_name_goes_under_a_box_cut_by_the_window(make_trace) -> None:
    # The name would point at the part of the box that shows, and run under its neighbours.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 200),
        complete_event("aten::op", "cpu_op", 0, 150),
        complete_event("cudaDeviceGetAttribute", "cuda_runtime", 40, 12),
        complete_event("cudaGetErrorString", "cuda_runtime", 52.5, 0.2),
    ]
    trace = load_trace(make_trace(events))
    whole = plot_timeline(trace, window=(30.0, 200.0))
    assert [t.get_text() for t in _texts(_axes(whole), "span-name-below")] == [
        BELOW_MARK + "cudaDeviceGetAttribute"
    ]
    cut = plot_timeline(trace, window=(45.0, 200.0))
    assert not _texts(_axes(cut), "span-name-below")


@pytest.mark.parametrize("lane", ["overhead", "cpu"])
def test_name_goes_under_a_box_when_its_row_has_no_room(make_trace, lane: str) -> None:
    # Page 2's buffer request, between module loads that leave no room on CUPTI's one row;
    # page 15's cuLaunchKernelEx, between two cudaGetErrorString calls, where a prefix of its
    # name would not tell it from cudaLaunchKernel.
    if lane == "overhead":
        name, cat, pid, start, width = "Activity Buffer Request", "overhead", -1, 30, 30
    else:
        name, cat, pid, start, width = "cuLaunchKernelEx", "cuda_driver", 429, 48, 20
    neighbour = "Lazy Function Loading" if lane == "overhead" else "cudaGetErrorString"
    neighbour_cat = "overhead" if lane == "overhead" else "cuda_runtime"
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 200),
                complete_event("aten::op", "cpu_op", 10, 150),
                complete_event(neighbour, neighbour_cat, start - 2, 0.2, pid=pid, tid=pid),
                complete_event(name, cat, start, width, pid=pid, tid=pid),
                complete_event(neighbour, neighbour_cat, start + width + 1, 0.2, pid=pid, tid=pid),
            ]
        )
    )
    window = (0.0, 200.0) if lane == "cpu" else (0.0, 500.0)
    fig = plot_timeline(trace, window=window)
    ax = _axes(fig)
    below = [t for t in _texts(ax, "span-name-below") if t.get_text() == BELOW_MARK + name]
    assert len(below) == 1, [t.get_text() for t in ax.texts]
    assert not any(t.get_text().startswith(name[:4]) for t in _texts(ax, "span-name"))
    fig.canvas.draw()
    extents = _box_extents(fig)
    (box,) = [
        e for e, p in zip(extents, _boxes(ax).get_paths(), strict=True)
        if p.vertices[:, 0].min() == pytest.approx(start)
    ]  # fmt: skip
    text = below[0].get_window_extent()
    assert text.y1 <= box[1] + 1, "under the box (the y axis of the display points up)"
    assert box[0] - 1 <= text.x0 <= box[2], "starting under the box"
    _assert_names_clear(fig)


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_names_never_overlap_names_or_boxes(name: str) -> None:
    trace = load_trace(gpu_fixture(name))
    for kwargs in ({}, {"step": trace.steps[0].number}, {"step": trace.steps[-1].number}):
        _assert_names_clear(plot_timeline(trace, **kwargs))
        plt.close("all")


# --- depth, hidden spans, big traces -----------------------------------------------------------


def test_boxes_cut_by_the_window_are_marked_at_the_cut(make_trace) -> None:
    # Page 15: a step cut by the window read as 27 µs long, against 71 µs.
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
                complete_event("aten::scaled_dot_product_attention", "cpu_op", 100, 800),
                complete_event("aten::empty", "cpu_op", 150, 50),
                complete_event("cudaLaunchKernel", "cuda_runtime", 390, 12),
            ]
        )
    )
    fig = plot_timeline(trace, window=(400.0, 600.0))
    ax = _axes(fig)
    marks = {
        str(c.get_paths()[0].vertices.round(2).tolist()): c.get_offsets().tolist()
        for c in ax.collections
        if c.get_gid() == "cut-marks"
    }
    offsets = sorted(xy for xys in marks.values() for xy in xys)
    assert len(marks) == 2, "one kind of mark for each side"
    # The step and the op, cut on both sides; not the launch, whose 2 µs in the window have
    # no room for a mark.
    assert len(offsets) == 4
    assert sorted(400 < x < 401.5 or 598.5 < x < 600 for x, _ in offsets) == [True] * 4
    assert sum(x < 500 for x, _ in offsets) == 2, "two at the left edge, two at the right"
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for text in _texts(ax, "span-name"):
        box = text.get_window_extent(renderer)
        for collection in (c for c in ax.collections if c.get_gid() == "cut-marks"):
            for x, y in ax.transData.transform(collection.get_offsets()):
                assert not (box.x0 - 2 < x < box.x1 + 2 and box.y0 < y < box.y1), text
    uncut = _axes(plot_timeline(trace, window=(0.0, 1000.0)))
    assert not [c for c in uncut.collections if c.get_gid() == "cut-marks"]


def test_max_depth_keeps_only_shallow_spans_and_the_runtime_calls(cold: Trace) -> None:
    ax = _axes(plot_timeline(cold, max_depth=0))
    top_level = [s for s in cold.spans if s.lane.kind != "other" and s.depth == 0]
    runtime = {"cuda_runtime", "cuda_driver"}
    deeper_calls = [
        s
        for s in cold.spans
        if s.depth > 0 and s.cat in runtime and cold.spans[s.parent].cat not in runtime
    ]
    assert deeper_calls, "the fixture has launches under its ops"
    assert len(_boxes(ax).get_paths()) == len(top_level) + len(deeper_calls)


def test_runtime_calls_below_max_depth_go_on_one_row_under_the_last(make_trace) -> None:
    # Page 10: the launch after a synchronization sits five ops deep on the backward thread.
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 100),
                complete_event("aten::linear", "cpu_op", 5, 90),
                complete_event("aten::addmm", "cpu_op", 10, 80),
                complete_event("cudaLaunchKernel", "cuda_runtime", 20, 10),
                complete_event("cuLaunchKernel", "cuda_driver", 22, 6),
                complete_event("cudaStreamSynchronize", "cuda_runtime", 40, 30),
            ]
        )
    )
    boxes = _boxes(_axes(plot_timeline(trace, max_depth=1)))
    tops = [p.vertices[:, 1].min() for p in boxes.get_paths()]
    rows = sorted(set(tops))
    assert len(tops) == 4, "the step, linear, and the two outermost runtime calls"
    assert len(rows) == 3, "addmm's row left out: the runtime calls take the one after linear's"
    assert tops.count(rows[2]) == 2


def test_python_functions_are_hidden_unless_asked(make_trace) -> None:
    trace = load_trace(
        make_trace(
            [
                complete_event("ProfilerStep#1", "user_annotation", 0, 100),
                complete_event("train.py(12): step", "python_function", 5, 90),
                complete_event("nn.Module: Linear", "python_function", 10, 80),
                complete_event("aten::linear", "cpu_op", 20, 50),
                complete_event("aten::addmm", "cpu_op", 25, 40),
            ]
        )
    )
    ax = _axes(plot_timeline(trace))
    rows = sorted({p.vertices[:, 1].min() for p in _boxes(ax).get_paths()})
    assert len(_boxes(ax).get_paths()) == 3
    assert len(rows) == 3, "aten::linear moves up into the rows the hidden frames leave free"
    shown = _axes(plot_timeline(trace, python_functions=True))
    assert len(_boxes(shown).get_paths()) == 5


def test_training_trace_draws_every_span_in_one_collection(training: Trace) -> None:
    drawn = [s for s in training.spans if s.lane.kind != "other" and s.cat != "python_function"]
    assert len(drawn) > 10_000
    fig = plot_timeline(training, title="a training step")
    ax = _axes(fig)
    assert len(_boxes(ax).get_paths()) == len(drawn)
    assert len(ax.patches) < 5, "spans are not added one Rectangle at a time"
    assert len(_texts(ax, "span-name")) < 200, "only the few wide boxes get a name"
    # Each CPU lane says which thread it is: the backward pass runs on autograd's own.
    assert _lane_titles(fig) == [
        "CPU thread 429\npython3",
        "CPU thread 503\npt_autograd_0",
        "GPU 0 · stream 7",
    ]
    fig.canvas.draw()


# --- the figure --------------------------------------------------------------------------------


def test_figure_is_opaque_with_readable_text(cold: Trace) -> None:
    fig = plot_timeline(cold, step=2, title="ProfilerStep#2", highlights=[_dead(cold)])
    assert fig.get_facecolor() == (1.0, 1.0, 1.0, 1.0)
    # Every pixel of the saved image is opaque, so it reads the same on a dark page.
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=50)
    buffer.seek(0)
    assert plt.imread(buffer)[:, :, 3].min() == 1.0


@pytest.mark.parametrize("step", [None, 2])
def test_text_is_readable_where_the_page_shows_the_figure(cold: Trace, step: int | None) -> None:
    fig = plot_timeline(cold, step=step, title="t", highlights=[_dead(cold)])
    width_px = fig.get_figwidth() * fig.dpi
    assert fig.dpi == FIGURE_DPI
    # The page shows the 1x image at its natural width, scaled down only if it is wider.
    shown = min(1.0, PAGE_WIDTH_PX / width_px)
    texts = [t for t in fig.findobj(Text) if t.get_text()]
    smallest_px = min(t.get_fontsize() for t in texts) * fig.dpi / 72 * shown
    assert smallest_px >= MIN_TEXT_PX >= 12


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_the_legend_lies_within_the_figure(name: str) -> None:
    # Matplotlib gives the first columns the extra entries (six in five columns: 2+1+1+1+1),
    # so the legend's width depends on which entries share a column.
    trace = load_trace(gpu_fixture(name))
    for step in (None, *(step.number for step in trace.steps[:2])):
        fig = plot_timeline(trace, step=step)
        fig.canvas.draw()
        (legend,) = [c for c in _axes(fig).get_children() if c.get_gid() == "category-legend"]
        box = legend.get_window_extent()
        assert 0 <= box.x0 and box.x1 <= fig.bbox.x1, (step, box.x1 - fig.bbox.x1)
        plt.close(fig)


def test_the_legend_names_the_dashed_step_boundaries_where_there_are_any(
    cold: Trace, make_trace
) -> None:
    # Readers of pages 08 and 13 took the dashed lines for events: the legend names them.
    def labels(fig) -> list[str]:
        (legend,) = [c for c in _axes(fig).get_children() if c.get_gid() == "category-legend"]
        return [t.get_text() for t in legend.get_texts()]

    assert labels(plot_timeline(cold, step=cold.steps[-1].number))[-1] == "ProfilerStep boundary"
    no_steps = load_trace(make_trace([complete_event("aten::mm", "cpu_op", 0, 10)]))
    assert "ProfilerStep boundary" not in labels(plot_timeline(no_steps))


def test_another_backends_runtime_calls_are_drawn_and_named_as_runtime_calls(make_trace) -> None:
    events = [
        complete_event("aten::mm", "cpu_op", 0, 100),
        complete_event("urEnqueueKernelLaunch", "xpu_runtime", 10, 30, correlation=1),
        complete_event("gemm_kernel", "kernel", 50, 40, pid=0, tid=0, correlation=1),
    ]
    fig = plot_timeline(load_trace(make_trace(events)))
    (legend,) = [c for c in _axes(fig).get_children() if c.get_gid() == "category-legend"]
    names = [t.get_text() for t in legend.get_texts()]
    assert names == ["CPU op", "runtime / driver", "kernel"]
    plt.close(fig)


def _dead(trace: Trace) -> Highlight:
    return highlight_between(
        _inside(trace, "matmul_add", 2), _inside(trace, "aten::matmul", 2), "d"
    )


def test_a_long_title_is_set_smaller_to_stay_in_the_figure(cold: Trace) -> None:
    # Page 07's title ran past the figure's right edge and was cut off.
    title = "4096_bf16_warm_eager_shared-gpu, ProfilerStep#23: our work waits while the GPU runs"
    fig = plot_timeline(cold, title=title)
    fig.canvas.draw()
    drawn = _axes(fig)._left_title
    assert drawn.get_text() == title
    assert drawn.get_window_extent().x1 <= fig.bbox.x1 - 2
    assert drawn.get_fontsize() < 11
    short = _axes(plot_timeline(cold, title="Fresh process"))._left_title
    assert short.get_fontsize() == 11


def test_draws_into_given_axes(cold: Trace) -> None:
    fig, (top, bottom) = plt.subplots(2, figsize=(8, 6))
    returned = plot_timeline(cold, step=3, ax=bottom)
    assert returned is fig
    assert tuple(fig.get_size_inches()) == (8, 6)
    assert not top.collections and _boxes(bottom).get_paths()


# --- errors ------------------------------------------------------------------------------------


def test_empty_window_is_a_clear_error(cold: Trace) -> None:
    end = max(s.end for s in cold.spans)
    with pytest.raises(ValueError, match="no spans between"):
        plot_timeline(cold, window=(end + 100.0, end + 200.0))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"window": (50.0, 10.0)}, "end > start"),
        ({"window": (0.0, 10.0), "step": 2}, "either window or step"),
        ({"step": 99}, r"no ProfilerStep#99; its steps: 2, 3, 4"),
        ({"max_depth": -1}, "max_depth"),
    ],
)
def test_bad_arguments_are_clear_errors(cold: Trace, arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plot_timeline(cold, **arguments)


def test_gpu_zoom_shows_a_gpu_bound_steps_own_work() -> None:
    # 20 steps of naive attention: the CPU runs ~18 ms ahead, so the last step's CPU window
    # and its GPU work are far apart; around="gpu" frames the work alone.
    trace = load_trace(gpu_fixture("attention_8x16x1024x64_bf16_naive"))
    last = trace.steps[-1]
    lo = min(w.start for w in last.gpu_work)
    hi = max(w.end for w in last.gpu_work)
    x0, x1 = _axes(plot_timeline(trace, step=last.number, around="gpu")).get_xlim()
    assert x0 < lo and hi < x1
    assert (x1 - x0) < 1.2 * (hi - lo)
    wide0, wide1 = _axes(plot_timeline(trace, step=last.number)).get_xlim()
    assert wide0 <= min(last.start, lo) and (wide1 - wide0) >= (x1 - x0)
    plt.close("all")


def test_around_is_checked(cold: Trace) -> None:
    with pytest.raises(ValueError, match="around"):
        plot_timeline(cold, step=cold.steps[0].number, around="cpu")
    # A step without GPU work (a CPU-only trace) falls back to the step's own window.
    cpu_only = load_trace(FOREIGN / "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    step = cpu_only.steps[0]
    assert not step.gpu_work
    same = [
        _axes(plot_timeline(cpu_only, step=step.number, around=around)).get_xlim()
        for around in ("step", "gpu")
    ]
    assert same[0] == same[1]
    plt.close("all")
