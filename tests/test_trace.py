"""The trace model on the recorded H100 fixtures and on small synthetic traces."""

from __future__ import annotations

import re

import pytest
from conftest import complete_event, gpu_fixture, gpu_fixture_names, minimal_gpu_events

from profiling_utils import Lane, Span, Step, Trace, load_trace


@pytest.fixture(scope="module")
def eager() -> Trace:
    return load_trace(gpu_fixture("64_bf16_warm_eager"))


@pytest.fixture(scope="module")
def training() -> Trace:
    return load_trace(gpu_fixture("train_tiny_transformer_a3"))


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_every_fixture_builds_a_consistent_model(name: str) -> None:
    trace = load_trace(gpu_fixture(name))
    assert trace.has_gpu
    assert [span.id for span in trace.spans] == list(range(len(trace.spans)))
    assert trace.spans[0].start == 0.0
    keys = [(span.start, -span.dur) for span in trace.spans]
    assert keys == sorted(keys)
    assert {span.lane for span in trace.spans} == set(trace.lanes)
    kinds = [lane.kind for lane in trace.lanes]
    assert kinds == sorted(kinds, key=["cpu", "gpu", "overhead", "other"].index)
    for span in trace.spans:
        if span.parent is not None:
            parent = trace.spans[span.parent]
            assert parent.lane == span.lane
            assert parent.start <= span.start < parent.end
            assert span.depth == parent.depth + 1
        else:
            assert span.depth == 0
    # Every launch link joins a host call to GPU work with the same correlation.
    for work in trace.gpu_work:
        launch = trace.launch_of(work)
        if launch is not None:
            assert launch.correlation == work.correlation
            assert launch.cat in ("cuda_runtime", "cuda_driver")
            assert launch.is_launch
            assert work in trace.gpu_work_of(launch)
    assert [step.number for step in trace.steps] == sorted(step.number for step in trace.steps)
    assert len(trace.steps) == len(trace.find(prefix="ProfilerStep#", cat="user_annotation"))


def test_top_level_fields(eager: Trace) -> None:
    assert eager.cuda_runtime_version == "13.0"
    assert eager.cuda_driver_version == "13.0"
    assert eager.cupti_version == 130001
    assert eager.base_time_ns == 1790857026000000000
    (device,) = eager.devices
    assert device.name == "NVIDIA H100 80GB HBM3"
    assert (device.vendor, device.arch, device.compute_units) == ("nvidia", "sm_90", 132)
    assert device.describe() == "NVIDIA H100 80GB HBM3, 132 SMs, compute capability 9.0"
    assert device.compute_capability == (9, 0)
    assert device.total_memory_bytes == 85017493504
    assert eager.metadata["schemaVersion"] == 1
    assert "traceEvents" not in eager.metadata
    assert "baseTimeNanoseconds" not in eager.metadata


def test_lanes_of_an_eager_run(eager: Trace) -> None:
    cpu, gpu, other = eager.lanes
    assert cpu == Lane(429, 429, "cpu", "CPU thread 429")
    assert gpu == Lane(0, 7, "gpu", "GPU 0 stream 7", device=0, stream=7)
    assert other.kind == "other" and other.pid == "Spans"
    assert {span.cat for span in eager.lane_spans(gpu)} == {"kernel", "gpu_user_annotation"}


def test_call_tree_and_launch_links(eager: Trace) -> None:
    # Step 3 of the 64x64 bf16 run: matmul -> mm -> cuLaunchKernelEx -> an nvjet GEMM.
    step = next(step for step in eager.steps if step.number == 3)
    (mm,) = [s for s in eager.find("aten::mm") if eager.step_of(s) is step]
    assert [a.name for a in eager.ancestors(mm)] == ["aten::matmul", "matmul_add", step.span.name]
    (launch,) = eager.children(mm)
    assert launch.name == "cuLaunchKernelEx" and launch.cat == "cuda_driver"
    assert eager.op_of(launch) is mm
    (kernel,) = eager.gpu_work_of(launch)
    assert kernel.name.startswith("nvjet_sm90_")
    assert eager.launch_of(kernel) is launch
    assert eager.op_of(kernel) is mm
    assert eager.step_of(kernel) is step
    assert kernel.args["registers per thread"] == 168
    assert kernel.external_id == mm.external_id == launch.external_id
    # The elementwise add goes through the runtime API.
    add_launch = next(c for c in eager.children(eager.find("aten::add")[1]))
    assert add_launch.name == "cudaLaunchKernel" and add_launch.is_launch


def test_steps_hold_the_gpu_work_they_launched(eager: Trace) -> None:
    assert [step.number for step in eager.steps] == [2, 3, 4]
    for step in eager.steps:
        assert isinstance(step, Step)
        assert step.span.name == f"ProfilerStep#{step.number}"
        assert (step.start, step.end) == (step.span.start, step.span.end)
        assert [w.cat for w in step.gpu_work] == ["kernel", "kernel"]
        assert all(eager.step_of(w) is step for w in step.gpu_work)


def test_category_lists(eager: Trace) -> None:
    assert len(eager.kernels) == 6
    assert eager.gpu_work == eager.kernels
    assert {s.name for s in eager.runtime_calls} == {
        "cuLaunchKernelEx",
        "cudaLaunchKernel",
        "cudaDeviceSynchronize",
    }
    assert {s.name for s in eager.cpu_ops} == {"aten::matmul", "aten::mm", "aten::add"}
    assert {s.name for s in eager.annotations} == {"matmul_add"}
    assert eager.overhead == []
    sync = eager.find("cudaDeviceSynchronize")[0]
    assert not sync.is_launch and eager.gpu_work_of(sync) == []


def test_cuda_graph_launch_starts_several_activities() -> None:
    trace = load_trace(gpu_fixture("64_bf16_warm_compile-reduce-overhead"))
    graph_launches = trace.find("cudaGraphLaunch")
    assert len(graph_launches) == 3
    for launch in graph_launches:
        work = trace.gpu_work_of(launch)
        assert sorted(w.cat for w in work) == ["gpu_memcpy", "kernel"]
        assert trace.op_of(launch).name.startswith("## Call CompiledFxGraph")


def test_overhead_lane_holds_the_activity_buffer_request() -> None:
    trace = load_trace(gpu_fixture("64_bf16_warm_eager_w0a3"))
    (request,) = trace.overhead
    assert request.name == "Activity Buffer Request"
    assert request.lane == Lane(-1, 0, "overhead", "CUPTI overhead")
    assert trace.lanes[-2] == request.lane  # before the "other" Spans lane
    assert trace.step_of(request).number == 0


def test_kernel_whose_launch_precedes_the_window_has_no_launch() -> None:
    # The fp32 run's first kernel was launched before profiling began.
    trace = load_trace(gpu_fixture("4096_fp32_warm_eager"))
    orphan = trace.kernels[0]
    assert orphan.correlation is not None
    assert trace.launch_of(orphan) is None
    assert trace.step_of(orphan) is None and trace.op_of(orphan) is None
    assert all(orphan not in step.gpu_work for step in trace.steps)


def test_training_trace_has_an_autograd_thread(training: Trace) -> None:
    cpu_lanes = [lane for lane in training.lanes if lane.kind == "cpu"]
    assert [lane.tid for lane in cpu_lanes] == [429, 503]
    backward = training.lane_spans(cpu_lanes[1])
    # The autograd thread's work belongs to the step whose window it falls in, by time.
    assert {training.step_of(s).number for s in backward if s.depth == 0} == {2, 3, 4}
    assert sum(len(step.gpu_work) for step in training.steps) == len(training.gpu_work)


def test_find(eager: Trace) -> None:
    assert [s.name for s in eager.find(prefix="aten::m")] == ["aten::matmul", "aten::mm"] * 3
    assert eager.find(cat="kernel") == eager.kernels
    assert eager.find("aten::mm", cat="kernel") == []
    assert eager.find() == eager.spans
    assert eager.find("no such span") == []


def test_synthetic_trace_times_are_relative_to_the_earliest_span(make_trace) -> None:
    trace = load_trace(make_trace(minimal_gpu_events(offset=5000.0)))
    assert trace.origin_us == 5000.0
    step = trace.steps[0]
    assert (step.start, step.end) == (0.0, 100.0)
    kernel = trace.kernels[0]
    assert (kernel.start, kernel.dur, kernel.end) == (50.0, 30.0, 80.0)
    # The Record Window End marker, five thousand seconds later, stretches nothing.
    assert max(span.end for span in trace.spans) == 100.0


def test_span_identity_and_repr(eager: Trace) -> None:
    span = eager.spans[1]
    assert isinstance(span, Span)
    assert span == span and span != eager.spans[2]
    assert len({span, eager.spans[1]}) == 1
    assert "ProfilerStep#2" in repr(span) and "CPU thread 429" in repr(span)
    assert "64_bf16_warm_eager.json.gz" in repr(eager)


def test_nesting_of_equal_starts_puts_the_longer_span_outside(make_trace) -> None:
    events = [
        complete_event("inner", "cpu_op", 10, 5),
        complete_event("outer", "cpu_op", 10, 20),
        complete_event("after", "cpu_op", 30, 1),
        complete_event("instant-like", "cpu_op", 30, 0),
    ]
    trace = load_trace(make_trace(events))
    outer, inner, after, zero = trace.spans
    assert (outer.name, inner.name) == ("outer", "inner")
    assert inner.parent == outer.id and inner.depth == 1
    # Touching the end of "outer" is not being inside it.
    assert after.parent is None
    assert zero.parent == after.id  # zero-length at the start of "after" lies within it
    assert trace.children(outer) == [inner]


def test_benchmark_replicator_keeps_steps_and_links_unique(tmp_path) -> None:
    # benchmarks/make_large_trace.py builds the load benchmark's traces; a wrong id offset
    # would silently link kernels to another copy's launches.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from make_large_trace import make

    original = load_trace(gpu_fixture("train_tiny_transformer_a3"))
    path = make(2.5, out_dir=tmp_path)
    assert path.read_text().startswith('\n  {\n    "schemaVersion": 1,')  # Kineto's layout
    trace = load_trace(path)
    # Two whole copies of steps 2-4, then the first half of a third.
    assert [step.number for step in trace.steps] == list(range(2, 10))
    per_step = [len(step.gpu_work) for step in trace.steps]
    assert per_step[:6] == [len(step.gpu_work) for step in original.steps] * 2
    # Every GPU activity links to the launch of its own copy, one launch per correlation.
    for work in trace.gpu_work[: len(original.gpu_work) * 2]:
        launch = trace.launch_of(work)
        assert launch is not None and trace.step_of(work) is trace.step_of(launch)
    correlations = [s.correlation for s in trace.runtime_calls if s.correlation is not None]
    assert len(correlations) == len(set(correlations))
    # The second copy is the first shifted in time: same names, durations and nesting.
    period = trace.steps[3].start - trace.steps[0].start

    def shape(spans, steps_later):
        return [
            (
                re.sub(r"#(\d+)$", lambda m: f"#{int(m[1]) + steps_later}", s.name),
                s.dur,
                s.depth,
                s.lane,
            )
            for s in spans
            if s.cat != "Trace"
        ]

    base = min(s.start for s in trace.spans if s.cat != "Trace")
    first = [s for s in trace.spans if s.start < base + period]
    second = [s for s in trace.spans if base + period <= s.start < base + 2 * period]
    assert shape(first, 3) == shape(second, 0)
