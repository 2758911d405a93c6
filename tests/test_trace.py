"""The trace model on the recorded H100 fixtures and on small synthetic traces."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from conftest import (
    DEVICE_PROPERTIES,
    FIXTURES,
    FOREIGN,
    complete_event,
    fixture_document,
    gpu_fixture,
    gpu_fixture_names,
    minimal_gpu_events,
    trace_document,
    write_trace,
)

from profiling_utils import Lane, Span, Step, Trace, load_trace
from profiling_utils.measures import lane_busy_us, launches, op_stats
from profiling_utils.trace import input_shapes, is_communication


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
    assert (device.shared_memory_per_sm_bytes, device.registers_per_sm) == (233472, 65536)
    assert device.threads_per_sm == 2048
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


def test_by_name_groups_every_span_in_start_order(eager: Trace) -> None:
    by_name = eager.by_name
    names = list(dict.fromkeys(s.name for s in eager.spans))  # in the order they first occur
    assert list(by_name) == names
    assert [s for group in by_name.values() for s in group] == sorted(
        eager.spans, key=lambda s: (names.index(s.name), s.id)
    )


def test_synthetic_trace_times_are_relative_to_the_earliest_span(make_trace) -> None:
    trace = load_trace(make_trace(minimal_gpu_events(offset=5000.0)))
    assert trace.origin_us == 5000.0
    step = trace.steps[0]
    assert (step.start, step.end) == (0.0, 100.0)
    kernel = trace.kernels[0]
    assert (kernel.start, kernel.dur, kernel.end) == (50.0, 30.0, 80.0)
    # The Record Window End marker, five thousand seconds later, stretches nothing.
    assert max(span.end for span in trace.spans) == 100.0


def test_epoch_times_with_ns_decimals_are_read_exactly(make_trace) -> None:
    # Absolute epoch µs with ns decimals, as some torch 2.x versions write them (HTA's
    # ns_resolution trace): a float this large is spaced 0.25 µs apart.
    written = [
        ("narrow", "1712195495505881.623", 1.296),  # ends at .919
        ("slice", "1712195495505881.938", 0.878),  # ends at .816: inside narrow
        ("result_type", "1712195495505890.132", 0.040),
        ("result_type", "1712195495505890.374", 0.037),  # after the first: a sibling
    ]
    events = [
        complete_event(name, "cpu_op", f"TS{i}", dur)  # type: ignore[arg-type]
        for i, (name, _, dur) in enumerate(written)
    ]
    text = json.dumps(trace_document(events))
    for i, (_, ts, _) in enumerate(written):
        text = text.replace(f'"TS{i}"', ts)
    trace = load_trace(make_trace(text.encode()))
    narrow, slice_, first, second = trace.spans
    assert slice_.parent == narrow.id
    assert slice_.start == pytest.approx(0.315, abs=1e-9)
    assert (first.parent, second.parent) == (None, None)
    assert second.start - first.start == pytest.approx(0.242, abs=1e-9)
    assert trace.origin_us == 1712195495505881.623
    assert trace.self_us(narrow) == pytest.approx(1.296 - 0.878, abs=1e-9)


def test_a_thread_of_a_host_process_is_a_cpu_thread_whatever_it_records(make_trace) -> None:
    # MTIA's inference trace: thread 1568 of the host process records only mtia_runtime
    # calls; the accelerator's own events lie on its device pid.
    events = [
        complete_event("aten::linear", "cpu_op", 0, 50, pid=865, tid=865),
        complete_event("gif_merge", "mtia_runtime", 10, 30, pid=865, tid=1568),
        complete_event("kernel_track", "mtia_ccp_events", 20, 5, pid=17, tid=3),
    ]
    trace = load_trace(make_trace(events, deviceProperties=[]))
    kinds = {(lane.pid, lane.tid): (lane.kind, lane.label) for lane in trace.lanes}
    assert kinds[865, 1568] == ("cpu", "CPU thread 1568")
    assert kinds[17, 3][0] == "other"


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


# -- traces from other machines and other torch versions ---------------------------------------


def _foreign_events(name: str) -> list[dict]:
    return json.loads(gzip.decompress((FOREIGN / name).read_bytes()))["traceEvents"]


LEGACY = "kineto__tb_plugin_test_gpu_metrics_input.790be85.json.gz"
AMD = "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
TRACELENS_GEMM = "tracelens__gemm_01_compute_few_tiles.json.gz"
EVENT_SYNC = "hta__critical_path_cuda_event_sync_event_sync_trace.json.gz"
CPU_ONLY_RANK = "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


def test_torch_1_8_trace_reads_its_legacy_categories_and_string_tids() -> None:
    written = [e for e in _foreign_events(LEGACY) if e["ph"] == "X"]
    trace = load_trace(FOREIGN / LEGACY)
    assert trace.renamed_categories == {
        "Operator": "cpu_op",
        "Runtime": "cuda_runtime",
        "Kernel": "kernel",
        "Memcpy": "gpu_memcpy",
    }
    assert len(trace.kernels) == sum(e["cat"] == "Kernel" for e in written)
    assert trace.has_gpu
    steps = [e for e in written if e["name"].startswith("ProfilerStep#")]
    assert {e["cat"] for e in steps} == {"Operator"}  # a cpu_op then, a user_annotation now
    assert [s.number for s in trace.steps] == [int(e["name"][13:]) for e in steps]
    assert not any(op.name.startswith("ProfilerStep#") for op in trace.cpu_ops)
    (gpu,) = [lane for lane in trace.lanes if lane.kind == "gpu"]
    assert (gpu.tid, gpu.device, gpu.stream, gpu.label) == ("stream 7", 0, 7, "GPU 0 stream 7")
    cpu_tids = {e["tid"] for e in written if e["cat"] == "Operator"}
    assert {lane.tid for lane in trace.lanes if lane.kind == "cpu"} == cpu_tids
    # Every kernel is linked to its launch, and launched in the step.
    for kernel in trace.kernels:
        assert trace.launch_of(kernel).name == "cudaLaunchKernel"
        assert trace.step_of(kernel) is trace.steps[0]
    # computeProperties, with keys of their own ("major", "maxThreadsPerMultiProcessor").
    device = trace.devices[0]
    assert (device.compute_units, device.compute_capability) == (80, (7, 0))
    assert (device.threads_per_sm, device.registers_per_sm) == (2048, 65536)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, current = 0.0, None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            total += 0.0 if current is None else current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    return total + (0.0 if current is None else current[1] - current[0])


def test_torch_1_8_labels_of_the_loader_and_optimizer_are_labels_not_ops() -> None:
    # torch 1.8 writes every record_function label as an "Operator": those torch writes
    # itself are filed as today's torch files them, so they are neither work nor operators.
    written = [e for e in _foreign_events(LEGACY) if e["ph"] == "X"]
    prefixes = ("enumerate(DataLoader)#", "Optimizer.step#", "Optimizer.zero_grad#")
    labels = [e for e in written if e["name"].startswith(prefixes)]
    assert {e["cat"] for e in labels} == {"Operator"} and len(labels) == 3
    trace = load_trace(FOREIGN / LEGACY)
    assert not any(op.name.startswith(prefixes) for op in trace.cpu_ops)
    assert sorted(s.name for s in trace.annotations) == sorted(e["name"] for e in labels)
    assert not any(row.name.startswith(prefixes) for row in op_stats(trace))
    # A thread is busy for its ops and runtime calls, not for the labels around them.
    for lane in (lane for lane in trace.lanes if lane.kind == "cpu"):
        work = [
            (e["ts"], e["ts"] + e["dur"])
            for e in written
            if str(e["tid"]) == str(lane.tid)
            and e["cat"] in ("Operator", "Runtime")
            and not e["name"].startswith((*prefixes, "ProfilerStep#"))
        ]
        assert lane_busy_us(trace, lane) == pytest.approx(_union(work))


def test_current_traces_rename_nothing(eager: Trace) -> None:
    assert eager.renamed_categories == {}


def test_string_pids_and_stream_tids_in_a_synthetic_legacy_trace(make_trace) -> None:
    events = [
        complete_event("ProfilerStep#3", "Operator", 0, 100, pid=11, tid="11"),
        complete_event("aten::mm", "Operator", 10, 40, pid=11, tid="11"),
        complete_event("cudaLaunchKernel", "Runtime", 20, 5, pid=11, tid="11", correlation=5),
        complete_event("gemm", "Kernel", 30, 10, pid="0", tid="stream 7", correlation=5),
        complete_event("Memset (Device)", "Memset", 45, 1, pid="0", tid="stream 7"),
    ]
    trace = load_trace(make_trace(events, deviceProperties=None))
    (step,) = trace.steps
    assert (step.number, [w.name for w in step.gpu_work]) == (3, ["gemm"])
    gpu = trace.kernels[0].lane
    assert (gpu.kind, gpu.device, gpu.stream) == ("gpu", 0, 7)
    assert [w.cat for w in trace.gpu_work] == ["kernel", "gpu_memset"]
    assert trace.op_of(trace.kernels[0]).name == "aten::mm"
    (device,) = trace.devices  # not described, but the GPU is there
    assert (device.id, device.name, device.describe()) == (0, "unknown", "unknown NVIDIA GPU")


@pytest.mark.parametrize(
    ("launch", "kernel", "linked"),
    [
        (7.0, 7.0, True),  # a whole float, as a trace passed through pandas writes it
        ("7", 7, True),  # a string of digits
        ([7], 7, False),  # not a number: links nothing, refuses nothing
        (7.5, 7.5, False),
    ],
)
def test_correlations_not_written_as_integers(make_trace, launch, kernel, linked) -> None:
    events = minimal_gpu_events()
    for event in events:
        if event["name"] == "cudaLaunchKernel":
            event["args"]["correlation"] = launch
        if event["name"] == "gemm_kernel":
            event["args"]["correlation"] = kernel
    trace = load_trace(make_trace(events))
    gemm = next(k for k in trace.kernels if k.name == "gemm_kernel")
    launch_call = trace.launch_of(gemm)
    assert (launch_call is not None) == linked
    if linked:
        assert launch_call.name == "cudaLaunchKernel" and gemm.correlation == 7
    copy = trace.gpu_work[-1]
    assert trace.launch_of(copy).name == "cudaMemcpyAsync"  # the others are untouched


def test_amd_trace_is_described_in_compute_units_and_gfx_arch() -> None:
    trace = load_trace(FOREIGN / AMD)
    assert trace.vendor == "amd"
    for device in trace.devices:
        assert (device.vendor, device.arch, device.compute_units) == ("amd", "gfx90a", 104)
        assert device.describe() == "AMD Radeon Graphics, 104 CUs, gfx90a"
        # ROCm's own key for a CU's LDS; no register count per CU is written.
        assert (device.shared_memory_per_sm_bytes, device.registers_per_sm) == (65536, None)
    gpu_lanes = [lane for lane in trace.lanes if lane.kind == "gpu"]
    assert {lane.device for lane in gpu_lanes} <= {device.id for device in trace.devices}
    assert all(lane.label.startswith(f"GPU {lane.device} ") for lane in gpu_lanes)


def test_rocm_trace_linked_by_external_id_alone() -> None:
    # TraceLens's MI300-class GEMM trace: no deviceProperties, no args.correlation; each HIP
    # call and its kernel share an "External id" (which the ac2g flows also use), and the
    # Python frames that call aten::mm often have its exact interval (whole-µs times).
    trace = load_trace(FOREIGN / TRACELENS_GEMM)
    assert trace.vendor == "amd" and len(trace.kernels) == 20
    for kernel in trace.kernels:
        launch = trace.launch_of(kernel)
        assert launch is not None and launch.name == "hipExtModuleLaunchKernel"
        assert launch.external_id == kernel.external_id
        assert trace.op_of(kernel).name == "aten::mm"
    (device,) = trace.devices  # pid 2, not described: its ISA comes from the Tensile names
    assert (device.id, device.vendor, device.arch) == (2, "amd", "gfx942")
    assert device.describe() == "unknown AMD GPU, gfx942"
    ops = [span for span in trace.cpu_ops if span.name == "aten::mm"]
    assert all(trace.spans[op.parent].cat == "python_function" for op in ops)
    assert sum(map(trace.self_us, ops)) == 66.0  # 124 µs less the 58 µs of HIP calls


def test_an_external_id_shared_by_several_calls_links_nothing(make_trace) -> None:
    # NVIDIA-style ids name the op: both launches of one op carry it, and so do its two
    # kernels. Without a correlation id the kernels cannot be told apart: none is linked.
    # A call whose id is its own is linked to the kernel that carries it.
    events = [
        complete_event("aten::foo", "cpu_op", 0, 50, External_id=7),
        complete_event("cudaLaunchKernel", "cuda_runtime", 5, 5, External_id=7),
        complete_event("cudaLaunchKernel", "cuda_runtime", 20, 5, External_id=7),
        complete_event("aten::bar", "cpu_op", 60, 20, External_id=8),
        complete_event("cudaLaunchKernel", "cuda_runtime", 65, 5, External_id=8),
        complete_event("k1", "kernel", 30, 5, pid=0, tid=7, External_id=7),
        complete_event("k2", "kernel", 40, 5, pid=0, tid=7, External_id=7),
        complete_event("k3", "kernel", 75, 5, pid=0, tid=7, External_id=8),
    ]
    trace = load_trace(make_trace(events))
    links = {k.name: trace.launch_of(k) for k in trace.kernels}
    assert (links["k1"], links["k2"]) == (None, None)
    assert links["k3"] is not None and trace.op_of(trace.kernels[2]).name == "aten::bar"


@pytest.mark.parametrize(
    ("document", "linked"),
    [
        (lambda: fixture_document("train_tiny_transformer_a3"), 786),  # of 1,068
        (lambda: json.loads(gzip.decompress((FOREIGN / AMD).read_bytes())), 13),  # of 16
    ],
    ids=["h100-training", "mi250"],
)
def test_external_id_links_never_contradict_the_correlation_ids(tmp_path, document, linked) -> None:
    # The same real traces with every correlation id taken out: what the External ids link
    # must be what the correlation ids linked (calls whose id is shared stay unlinked).
    original = document()
    stripped = document()
    for event in stripped["traceEvents"]:
        event.get("args", {}).pop("correlation", None)

    def links(trace: Trace) -> dict[tuple[str, float], tuple[str, float] | None]:
        pairs = ((work, trace.launch_of(work)) for work in trace.gpu_work)
        return {(w.name, w.start): c and (c.name, c.start) for w, c in pairs}

    truth = links(load_trace(write_trace(tmp_path / "a.json", original)))
    found = links(load_trace(write_trace(tmp_path / "b.json", stripped)))
    found = {work: call for work, call in found.items() if call is not None}
    assert len(found) == linked
    assert all(truth[work] == call for work, call in found.items())


def test_external_ids_are_not_used_when_the_trace_records_correlation(make_trace) -> None:
    events = [
        complete_event("cudaLaunchKernel", "cuda_runtime", 5, 5, External_id=1, correlation=2),
        complete_event("cudaLaunchKernel", "cuda_runtime", 15, 5, External_id=2, correlation=1),
        complete_event("k1", "kernel", 30, 5, pid=0, tid=7, External_id=1, correlation=1),
    ]
    trace = load_trace(make_trace(events))
    first, second = trace.runtime_calls
    assert trace.launch_of(trace.kernels[0]) is second  # by correlation 1, not by id 1


def test_amd_launch_calls_link_to_their_gpu_work_like_cuda() -> None:
    written = _foreign_events(AMD)
    trace = load_trace(FOREIGN / AMD)
    launches = {
        e["args"]["correlation"]: e["name"] for e in written if e.get("cat") == "cuda_runtime"
    }
    for work in trace.gpu_work:
        launch = trace.launch_of(work)
        assert launch is not None and launch.name == launches[work.correlation]
    assert {trace.launch_of(k).name for k in trace.kernels} == {
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
    }


def _amd_properties(count: int) -> list[dict]:
    return [
        {
            "id": i,
            "name": "AMD Instinct MI300X",
            "numSms": 304,
            "gcnArchName": "gfx942:sramecc+:xnack-",
        }
        for i in range(count)
    ]


def _work_on_pid(pid: int, launch: str) -> list[dict]:
    return [
        complete_event(launch, "cuda_runtime", 0, 5, correlation=1),
        complete_event("k", "kernel", 10, 5, pid=pid, tid=0, correlation=1),
    ]


def test_rocm_hsa_agent_ids_map_onto_the_devices_listed(make_trace) -> None:
    # Eight GPUs behind two CPU sockets: HSA agents 2-9; the last GPU's work is on pid 9.
    trace = load_trace(
        make_trace(_work_on_pid(9, "hipLaunchKernel"), deviceProperties=_amd_properties(8))
    )
    (lane,) = [lane for lane in trace.lanes if lane.kind == "gpu"]
    assert (lane.pid, lane.device, lane.label) == (9, 7, "GPU 7 stream 0")
    assert [d.id for d in trace.devices] == list(range(8))  # no stray "GPU 9"
    assert trace.devices[7].describe() == "AMD Instinct MI300X, 304 CUs, gfx942"


@pytest.mark.parametrize(("pid", "device"), [(2**70 + 7, 2**70 + 7), (2**40 + 3, 2**40 + 3)])
def test_a_huge_amd_gpu_pid_is_kept_as_written_without_searching_every_offset(
    make_trace, pid: int, device: int
) -> None:
    # No offset maps both pids onto the eight listed ids: each keeps its own number. (The
    # search once tried every offset up to the pid: 2**40 of them.)
    events = _work_on_pid(9, "hipLaunchKernel") + [
        complete_event("k2", "kernel", 30, 5, pid=pid, tid=0, correlation=2),
        complete_event("hipLaunchKernel", "cuda_runtime", 20, 5, correlation=2),
    ]
    trace = load_trace(make_trace(events, deviceProperties=_amd_properties(8)))
    devices = sorted(lane.device for lane in trace.lanes if lane.kind == "gpu")
    assert devices == [9, device]


@pytest.mark.parametrize(
    ("name", "written", "arch"),
    [
        # ROCm 6 writes an MI300X as computeMajor/Minor 9.4 without gcnArchName (the
        # HPCTrainingExamples replay trace): the product names its target.
        ("AMD Instinct MI300X", None, "gfx942"),
        ("AMD Instinct MI250X / MI250", None, "gfx90a"),
        ("AMD Instinct MI100", None, "gfx908"),
        ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", "gfx942"),
        ("AMD Instinct MI999", None, None),  # a product not in the table: not guessed
        ("AMD Radeon Graphics", None, None),
    ],
)
def test_amd_arch_from_what_the_trace_writes_or_the_product(
    make_trace, name: str, written: str | None, arch: str | None
) -> None:
    properties = {"id": 0, "name": name, "numSms": 304, "computeMajor": 9, "computeMinor": 4}
    if written:
        properties["gcnArchName"] = written
    trace = load_trace(
        make_trace(_work_on_pid(0, "hipLaunchKernel"), deviceProperties=[properties])
    )
    assert trace.devices[0].arch == arch


def test_cuda_device_ids_are_never_shifted(make_trace) -> None:
    properties = [dict(DEVICE_PROPERTIES[0], id=i) for i in range(8)]
    trace = load_trace(make_trace(_work_on_pid(9, "cudaLaunchKernel"), deviceProperties=properties))
    (lane,) = [lane for lane in trace.lanes if lane.kind == "gpu"]
    assert lane.device == 9
    assert [(d.id, d.name) for d in trace.devices][-1] == (9, "unknown")


def test_unknown_accelerator_is_reported_as_such(make_trace) -> None:
    events = [
        complete_event("aten::add", "cpu_op", 0, 10),
        complete_event("event_wait", "mtia_ccp_events", 2, 5, pid=17, tid=3774),
    ]
    properties = [{"id": 17, "name": "ARTEMIS", "runtimeMajorVersion": 1}]
    trace = load_trace(make_trace(events, deviceProperties=properties))
    (device,) = trace.devices
    assert (device.id, device.vendor, device.arch, device.compute_units) == (
        17,
        "unknown",
        None,
        None,
    )
    assert device.describe() == "ARTEMIS, accelerator of unknown vendor"
    assert not trace.has_gpu
    track = next(lane for lane in trace.lanes if lane.pid == 17)
    assert (track.kind, track.device, track.label) == ("other", 17, "device 17 track 3774")
    assert trace.unread_device_lanes() == [track]
    assert trace.content == "accelerator not read"


def test_gpu_sync_row_is_labelled_as_the_gpus() -> None:
    written = _foreign_events(EVENT_SYNC)
    device_rows = {(e["pid"], e["tid"]) for e in written if e.get("cat") == "cuda_sync"}
    assert (0, -1) in device_rows
    trace = load_trace(FOREIGN / EVENT_SYNC)
    row = next(lane for lane in trace.lanes if (lane.pid, lane.tid) == (0, -1))
    assert (row.kind, row.device, row.stream, row.label) == (
        "gpu",
        0,
        None,
        "GPU 0 synchronization",
    )
    assert not any(lane.label == "CPU thread -1" for lane in trace.lanes)
    # A CPU thread with sync events stays a CPU thread.
    assert all(lane.kind == "cpu" for lane in trace.lanes if lane.label.startswith("CPU"))


def test_rank_and_world_size_come_from_distributed_info() -> None:
    trace = load_trace(FOREIGN / CPU_ONLY_RANK)
    assert (trace.rank, trace.world_size) == (34, 300)
    assert not trace.has_gpu and trace.devices == []
    rank_only = load_trace(FOREIGN / EVENT_SYNC)
    assert (rank_only.rank, rank_only.world_size) == (0, None)


def test_rank_is_none_without_distributed_info(eager: Trace) -> None:
    assert "distributedInfo" not in eager.metadata
    assert (eager.rank, eager.world_size) == (None, None)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", True),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", True),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", True),
        ("rcclGenericKernel", True),
        # Before NCCL 2.7 (torch 1.8's tensorboard-plugin traces, V100-era profiles).
        ("ncclAllReduceRingLLKernel_sum_f32(ncclColl)", True),
        ("ncclBroadcastRingLLKernel_copy_i8(ncclColl)", True),
        # Serving engines' custom all-reduce (vLLM's, SGLang's), on CUDA and HIP alike.
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, int)", True),
        ("void vllm::cross_device_reduce_2stage<__hip_bfloat16, 8>(vllm::RankData*)", True),
        ("void sglang::cross_device_reduce_2stage<__half, 8>(sglang::RankData*, int)", True),
        # PyTorch's symmetric memory and intra-node collectives, FlashInfer's, DeepEP's.
        ("void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 16>(float*)", True),
        ("void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16>(x)", True),
        ("void c10d::intra_node_comm::oneShotAllReduceKernel<8>(x)", True),
        (
            "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<"
            "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8>(x)",
            True,
        ),
        ("void deep_ep::intranode::dispatch<(int)2, (int)768, (int)8192>(int4 *, float *)", True),
        # QuickReduce (vLLM and SGLang on ROCm), FlashInfer's multi-node NVLink all-reduce,
        # and PCCL's kernels: names from public profiles of serving runs.
        (
            "quickreduce::allreduce_prototype_twoshot<AllReduceTwoshot<__half, CodecQ4<__half, "
            "4>, true>, __half>",
            True,
        ),
        (
            "void flashinfer::trtllm_mnnvl_allreduce::twoshotAllreduceKernel<(unsigned char)2, "
            "__nv_bfloat16, true>(flashinfer::trtllm_mnnvl_allreduce::AllReduceFusionParams)",
            True,
        ),
        ("pcclKernel_twoShotAllReduceKernel", True),
        # Compute that only mentions communication: a fused GEMM, a template argument.
        ("gemm_one_shot_all_reduce_kernel", False),
        (
            "void at::native::vectorized_elementwise_kernel<4, vllm::cross_device_reduce_1stage>",
            False,
        ),
        ("triton_poi_fused_all_reduce_0", False),
        ("nccl:all_reduce", False),  # the CPU-side record_function label
        ("void at::native::vectorized_elementwise_kernel<4>", False),
        ("sm90_xmma_gemm_bf16bf16_bf16f32", False),
    ],
)
def test_is_communication(name: str, expected: bool) -> None:
    assert is_communication(name) is expected


def test_communication_and_compute_kernels_split_the_kernels(make_trace) -> None:
    events = [
        complete_event("cudaLaunchKernel", "cuda_runtime", 0, 2, correlation=1),
        complete_event("gemm", "kernel", 5, 10, pid=0, tid=7, correlation=1),
        complete_event("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 6, 30, pid=0, tid=20),
        complete_event("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "gpu_user_annotation", 6, 30,
                       pid=0, tid=20),
        complete_event("elementwise", "kernel", 16, 3, pid=0, tid=7),
    ]  # fmt: skip
    trace = load_trace(make_trace(events))
    assert [k.name for k in trace.communication] == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert [k.name for k in trace.compute_kernels] == ["gemm", "elementwise"]
    assert [k.is_communication for k in trace.kernels] == [False, True, False]
    assert trace.find(cat="gpu_user_annotation")[0].is_communication is False


def test_a_partly_overlapping_span_is_never_nested(make_trace) -> None:
    # with_stack: a Python frame [0, 100) and an op [50, 150) that outlives it; a runtime
    # call [60, 70) inside both; a frame [120, 130) inside the op.
    events = [
        complete_event("train.py(10): step", "python_function", 0, 100),
        complete_event("aten::mm", "cpu_op", 50, 100),
        complete_event("cudaLaunchKernel", "cuda_runtime", 60, 10),
        complete_event("torch/nn/functional.py(5): linear", "python_function", 120, 10),
    ]
    trace = load_trace(make_trace(events))
    frame, op, launch, inner = trace.spans
    assert (frame.parent, frame.depth) == (None, 0)
    assert (op.parent, op.depth) == (None, 0)  # a sibling of the frame it overlaps
    assert (launch.parent, launch.depth) == (op.id, 1)  # the deepest span that contains it
    assert (inner.parent, inner.depth) == (op.id, 1)
    for span in trace.spans:
        children = trace.children(span)
        assert all(span.start <= c.start and c.end <= span.end for c in children)
        assert trace.self_us(span) >= 0


@pytest.mark.parametrize("frame_first", [True, False])
def test_an_op_as_long_as_its_python_frame_nests_in_the_frame(make_trace, frame_first) -> None:
    # with_stack, times in whole µs: the frame that calls an op often has its exact interval.
    # The op must be the frame's child (and keep its self time), whatever the file order.
    frame = complete_event("<built-in method mm of type object>", "python_function", 0, 10)
    op = complete_event("aten::mm", "cpu_op", 0, 10)
    launch = complete_event("hipLaunchKernel", "cuda_runtime", 2, 3)
    trace = load_trace(make_trace([frame, op, launch] if frame_first else [op, frame, launch]))
    by_name = {span.name: span for span in trace.spans}
    outer, inner = by_name[frame["name"]], by_name["aten::mm"]
    assert (outer.parent, inner.parent, by_name["hipLaunchKernel"].parent) == (
        None,
        outer.id,
        inner.id,
    )
    assert (trace.self_us(inner), trace.self_us(outer)) == (7.0, 0.0)


def test_spans_of_equal_interval_other_than_python_frames_keep_their_file_order(
    make_trace,
) -> None:
    events = [
        complete_event("outer_label", "user_annotation", 0, 10),
        complete_event("aten::mm", "cpu_op", 0, 10),
    ]
    label, op = load_trace(make_trace(events)).spans
    assert (label.name, op.parent) == ("outer_label", label.id)


def test_contained_spans_still_nest_despite_rounding(make_trace) -> None:
    # A child written to end a nanosecond after its parent (three-decimal µs) still nests.
    events = [
        complete_event("aten::linear", "cpu_op", 0, 50.0),
        complete_event("aten::mm", "cpu_op", 10, 40.001),
    ]
    outer, inner = load_trace(make_trace(events)).spans
    assert inner.parent == outer.id


def test_self_time_counts_overlapping_children_once(make_trace) -> None:
    # Two ops inside a step overlap each other (times rounded differently): siblings whose
    # durations add up to more than their parent.
    events = [
        complete_event("step", "user_annotation", 0, 100),
        complete_event("aten::a", "cpu_op", 0, 80),
        complete_event("aten::b", "cpu_op", 20, 80),
        complete_event("aten::c", "cpu_op", 30, 10),  # inside both a and b: b's child
    ]
    trace = load_trace(make_trace(events))
    step, a, b, c = trace.spans
    assert (a.parent, b.parent, c.parent) == (step.id, step.id, b.id)
    assert trace.children_cover_us[step.id] == 100.0  # not 160
    assert (trace.self_us(step), trace.self_us(a), trace.self_us(b)) == (0.0, 80.0, 70.0)


def test_reused_correlation_ids_link_each_activity_to_the_call_before_it(make_trace) -> None:
    # A file that merges two profiling sessions: the second reuses the first's correlation
    # ids. Each GPU activity must link to its own session's launch, never to a later call.
    document = json.loads(gzip.decompress(gpu_fixture("64_bf16_warm_eager").read_bytes()))
    events = [e for e in document["traceEvents"] if "ts" in e]
    length = max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events)
    later = json.loads(json.dumps(events))
    for event in later:
        event["ts"] += length + 1000
        step = re.fullmatch(r"ProfilerStep#(\d+)", event.get("name", ""))
        if step:
            event["name"] = f"ProfilerStep#{int(step[1]) + 100}"
    document["traceEvents"] = events + later
    merged = load_trace(make_trace(document))
    alone = load_trace(gpu_fixture("64_bf16_warm_eager"))
    delays = [
        work.start - launch.start
        for work in merged.gpu_work
        if (launch := merged.launch_of(work)) is not None
    ]
    expected = [
        work.start - launch.start
        for work in alone.gpu_work
        if (launch := alone.launch_of(work)) is not None
    ]
    assert len(delays) == 2 * len(expected) > 0
    assert delays == pytest.approx(expected + expected)


def test_within_gives_what_a_span_holds_on_its_lane_in_start_order() -> None:
    trace = load_trace(gpu_fixture("64_bf16_warm_eager"))
    step = trace.steps[0].span
    inside = list(trace.within(step))
    expected = [
        s
        for s in trace.spans
        if s.lane == step.lane and s.id > step.id and step.start <= s.start < step.end
    ]
    assert inside == expected and inside
    assert all(step.id in {a.id for a in trace.ancestors(s)} for s in inside)
    assert [s for s in inside if s.parent == step.id] == trace.children(step)


def test_within_passes_the_lanes_ties_and_ignores_other_threads(make_trace) -> None:
    # Three spans share a start on thread 1; thread 2 runs many spans in the same range.
    events = [
        complete_event("outer", "cpu_op", 0, 100),
        complete_event("a", "cpu_op", 0, 50),
        complete_event("b", "cpu_op", 0, 20),
        complete_event("c", "cpu_op", 30, 10),
        complete_event("d", "cpu_op", 60, 10),
        *(complete_event("other", "cpu_op", i, 1, tid=2) for i in range(0, 100, 2)),
    ]
    trace = load_trace(make_trace(events))
    for span in trace.spans:
        expected = [
            s for s in trace.spans if s.lane is span.lane and s.id > span.id and s.start < span.end
        ]
        assert list(trace.within(span)) == expected, span.name
    a = trace.find("a")[0]
    assert [s.name for s in trace.within(a)] == ["b", "c"]


@pytest.mark.parametrize(
    ("args", "dims", "types", "sizes"),
    [
        # Today's spelling: a tensor, a scalar, a tensor list.
        (
            {"Input Dims": [[64, 32], [], [[2, 3], [4]]], "Input type": ["float", "Scalar", ""]},
            [[64, 32], [], [[2, 3], [4]]],
            ["float", "Scalar", ""],
            [(64, 32), None, None],
        ),
        # torch ~1.9: "Input dims", no dtypes.
        ({"Input dims": [[8], []], "Input type": []}, [[8], []], [], [(8,), None]),
    ],
)  # fmt: skip
def test_input_shapes_reads_both_spellings(make_trace, args, dims, types, sizes) -> None:
    (op,) = load_trace(make_trace([complete_event("aten::add", "cpu_op", 0, 10, **args)])).spans
    shapes = input_shapes(op)
    assert shapes is not None and (shapes.dims, shapes.types) == (dims, types)
    assert [shapes.sizes(i) for i in range(len(dims) + 1)] == [*sizes, None]


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"Input type": ["float"]},
        {"Input Dims": 5, "Input type": ["float"]},
        {"Input Dims": [[1, "a"]], "Input type": ["float"]},
        {"Input Dims": [[True]], "Input type": ["float"]},
        {"Input Dims": [[1.5]], "Input type": ["float"]},
        {"Input Dims": [[1]], "Input type": [5]},
        {"Input Dims": [[1]], "Input type": ["float", "float"]},
    ],
)
def test_input_shapes_of_no_form_the_profiler_writes_are_none(make_trace, args) -> None:
    (op,) = load_trace(make_trace([complete_event("aten::add", "cpu_op", 0, 10, **args)])).spans
    assert input_shapes(op) is None


@pytest.mark.parametrize(
    ("name", "vendor"),
    [
        ("A100-SXM4-40GB", "nvidia"),  # drivers before R470 wrote no "NVIDIA"
        ("NVIDIA H100 80GB HBM3", "nvidia"),
        ("Tesla V100-SXM2-16GB", "nvidia"),
        ("MI300X", "amd"),
        ("AMD Instinct MI250X", "amd"),
        ("Ascend910B", "unknown"),
    ],
)
def test_the_vendor_is_read_from_the_device_name(make_trace, name: str, vendor: str) -> None:
    # No runtime call tells the vendor: the name alone does.
    events = [complete_event("aten::mm", "cpu_op", 0, 10)]
    properties = [{"id": 0, "name": name, "computeMajor": 8, "computeMinor": 0}]
    (device,) = load_trace(make_trace(events, deviceProperties=properties)).devices
    assert device.vendor == vendor


def test_labels_filed_as_cpu_ops_beside_the_steps_are_labels(make_trace) -> None:
    # Between the "Operator" spelling and user_annotation, torch wrote cpu_op for its labels,
    # ProfilerStep#N included.
    events = [
        complete_event("ProfilerStep#1", "cpu_op", 0, 1_000),
        complete_event(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "cpu_op", 5, 400
        ),
        complete_event("aten::empty", "cpu_op", 10, 50),
        complete_event("Optimizer.step#SGD.step", "cpu_op", 500, 300),
        complete_event("aten::add_", "cpu_op", 510, 100),
    ]
    trace = load_trace(make_trace(events))
    assert [op.name for op in trace.cpu_ops] == ["aten::empty", "aten::add_"]
    assert [s.number for s in trace.steps] == [1]
    assert {s.name for s in trace.annotations} == {events[1]["name"], events[3]["name"]}
    # A trace of today's torch files labels as labels: an op of such a name stays an op.
    today = [complete_event("ProfilerStep#1", "user_annotation", 0, 1_000), events[3]]
    assert [op.name for op in load_trace(make_trace(today, name="t2.json")).cpu_ops] == [
        "Optimizer.step#SGD.step"
    ]


def test_a_step_number_seen_before_or_a_step_inside_another_is_left_out(make_trace) -> None:
    # Two sessions written into one file number their steps from 1 again; an inner profiler
    # writes a step inside one of ours. One window per step, the first; the others are named.
    events = []
    for k, n in enumerate((1, 2, 1)):
        t = 1_000.0 * k
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 900),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 10, 5, correlation=k + 1),
            complete_event("k", "kernel", t + 20, 5, pid=0, tid=7, correlation=k + 1),
        ]
    events.append(complete_event("ProfilerStep#0", "user_annotation", 1_100, 100))
    trace = load_trace(make_trace(events))
    assert [(s.number, s.start) for s in trace.steps] == [(1, 0.0), (2, 1_000.0)]
    assert [len(s.gpu_work) for s in trace.steps] == [1, 1]
    assert [(s.name, s.start) for s in trace.left_out_steps] == [
        ("ProfilerStep#0", 1_100.0),
        ("ProfilerStep#1", 2_000.0),
    ]


def test_launches_captured_into_a_graph_are_due_no_gpu_record(make_trace) -> None:
    # A step that captures a graph: its launches between BeginCapture and EndCapture run
    # nothing; the replay (cudaGraphLaunch) runs their kernels. A launch outside any capture
    # without its record is one the trace lost.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 1_000),
        complete_event("cudaStreamBeginCapture", "cuda_runtime", 10, 2),
        complete_event("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=1),
        complete_event("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=2),
        complete_event("cudaStreamEndCapture", "cuda_runtime", 40, 2),
        complete_event("cudaGraphLaunch", "cuda_runtime", 50, 10, correlation=3),
        complete_event("k", "kernel", 70, 5, pid=0, tid=7, correlation=3),
        complete_event("k", "kernel", 76, 5, pid=0, tid=7, correlation=3),
    ]
    trace = load_trace(make_trace(events))
    assert trace.kernel_launches_without_gpu_record(trace.steps[0]) == (0, 0)
    lost = [*events, complete_event("cudaLaunchKernel", "cuda_runtime", 100, 5, correlation=9)]
    trace = load_trace(make_trace(lost, name="lost.json"))
    assert trace.kernel_launches_without_gpu_record(trace.steps[0]) == (1, 4)


def test_a_steps_repr_counts_its_gpu_work(eager: Trace) -> None:
    # A ResNet step launches 1,462 activities: its repr would run to 400,000 characters.
    step = eager.steps[0]
    assert repr(step) == (
        f"Step(number={step.number}, start={step.start!r}, end={step.end!r}, "
        f"gpu_work=<{len(step.gpu_work)} activities>)"
    )


def test_a_rocm_call_that_outlives_its_op_keeps_its_op(make_trace) -> None:
    # ROCm's known inversion: hipExtModuleLaunchKernel starts inside aten::mm but ends 3 µs
    # after it, so it nests in aten::matmul; the External id both carry ties it to aten::mm.
    # A call with another op's External id is left where it nests.
    events = [
        complete_event("aten::matmul", "cpu_op", 0, 100, External_id=1),
        complete_event("aten::mm", "cpu_op", 10, 30, External_id=2),
        complete_event("hipExtModuleLaunchKernel", "cuda_runtime", 30, 13, External_id=2,
                       correlation=1),
        complete_event("gemm", "kernel", 50, 20, pid=2, tid=0, correlation=1),
        complete_event("aten::mm", "cpu_op", 50, 30, External_id=3),
        complete_event("hipExtModuleLaunchKernel", "cuda_runtime", 70, 13, External_id=9,
                       correlation=2),
        complete_event("gemm", "kernel", 90, 20, pid=2, tid=0, correlation=2),
    ]  # fmt: skip
    trace = load_trace(make_trace(events, deviceProperties=None))
    assert trace.vendor == "amd"
    first, second = trace.kernels
    assert trace.op_of(first).name == "aten::mm" and trace.op_of(first).external_id == 2
    assert trace.op_of(second).name == "aten::matmul"
    assert [launch.op.name for launch in launches(trace)] == ["aten::mm", "aten::matmul"]


def test_a_step_number_beyond_64_bits_is_no_step(make_trace) -> None:
    # Python refuses to read an int of over 4,300 digits: such a label is not a step (no
    # profiler numbers steps past 64 bits), and the trace reads.
    huge = "ProfilerStep#" + "9" * 5000
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 100),
        complete_event(huge, "user_annotation", 200, 100),
        complete_event("aten::add", "cpu_op", 210, 10),
    ]
    trace = load_trace(make_trace(events))
    assert [step.number for step in trace.steps] == [1]
    assert [span.name for span in trace.annotations] == [huge]
    # The largest 64-bit number is a step number like any other.
    events[1]["name"] = f"ProfilerStep#{2**63 - 1}"
    trace = load_trace(make_trace(events, name="largest.json"))
    assert [step.number for step in trace.steps] == [1, 2**63 - 1]


def test_ops_that_coincide_nest_in_the_order_they_were_entered(make_trace) -> None:
    # aten::empty_like calls aten::empty_strided; written in whole µs both start at 100 and
    # last 5 µs. Whatever the file's order, the op entered first (the lower External id)
    # holds the other, which takes the self time.
    like = complete_event("aten::empty_like", "cpu_op", 100, 5, **{"External id": 1})
    strided = complete_event("aten::empty_strided", "cpu_op", 100, 5, **{"External id": 2})
    for order, name in (([like, strided], "a.json"), ([strided, like], "b.json")):
        trace = load_trace(make_trace([dict(e) for e in order], name=name))
        by_name = {span.name: span for span in trace.spans}
        inner = by_name["aten::empty_strided"]
        assert next(trace.ancestors(inner)).name == "aten::empty_like", name
        assert trace.self_us(inner) == 5.0 and trace.self_us(by_name["aten::empty_like"]) == 0.0
    # A label and the op it encloses, of one start and duration: the label was entered first.
    label = complete_event("## forward ##", "user_annotation", 100, 20, **{"External id": 7})
    relu = complete_event("aten::relu", "cpu_op", 100, 20, **{"External id": 8})
    for order, name in (([label, relu], "c.json"), ([relu, label], "d.json")):
        trace = load_trace(make_trace([dict(e) for e in order], name=name))
        op = next(span for span in trace.spans if span.name == "aten::relu")
        assert next(trace.ancestors(op)).name == "## forward ##", name


def test_graph_captures_pair_each_threads_begin_and_end(tmp_path) -> None:
    # Thread 1: a capture with a second begin inside it (one capture), closed, then two
    # instantiations; a later instantiation after a new begin belongs to no closed capture.
    # Thread 2: a capture still open when the recording ends.
    def call(name: str, ts: float, tid: int = 1) -> dict:
        return complete_event(name, "cuda_runtime", ts, 5, tid=tid)

    events = [
        call("cudaStreamBeginCapture", 100),
        call("cudaStreamBeginCapture", 120),
        call("cudaStreamEndCapture", 200),
        call("cudaGraphInstantiate", 210),
        call("cudaGraphInstantiateWithFlags", 230),
        call("cudaStreamBeginCapture", 300, tid=2),
        call("hipStreamBeginCapture", 400),
        call("cudaGraphInstantiate", 410),
    ]
    trace = load_trace(write_trace(tmp_path / "t.json", trace_document(events)))
    first, open_on_two, open_on_one = trace.graph_captures
    assert (first.begin.start, first.end.start, first.lane.tid) == (0.0, 100.0, 1)
    assert [c.name for c in first.instantiations] == [
        "cudaGraphInstantiate",
        "cudaGraphInstantiateWithFlags",
    ]
    assert first.stop_us == 105.0
    assert open_on_two.lane.tid == 2 and open_on_two.end is None
    assert open_on_two.stop_us == float("inf") and open_on_two.instantiations == ()
    assert open_on_one.begin.name == "hipStreamBeginCapture" and open_on_one.end is None


def test_launches_inside_a_graph_capture_owe_no_gpu_record(tmp_path) -> None:
    # Captured launches run nothing until a replay: no kernel record is missing.
    path = FIXTURES / "features" / "graph_capture_in_step.json.gz"
    trace = load_trace(path)
    (capture,) = trace.graph_captures
    inside = [
        call
        for call in trace.runtime_calls
        if "LaunchKernel" in call.name and capture.begin.start < call.start < capture.stop_us
    ]
    assert inside and all(trace.gpu_work_of(call) == [] for call in inside)
    step = trace.step_of(capture.begin)
    assert trace.kernel_launches_without_gpu_record(step) == (0, 0)
    # Without the capture's begin, the same launches lack their records.
    document = json.loads(gzip.decompress(path.read_bytes()))
    for event in document["traceEvents"]:
        if event.get("name") == "cudaStreamBeginCapture":
            event["name"] = "cudaStreamQuery"
    uncaptured = load_trace(write_trace(tmp_path / "uncaptured.json", document))
    missing, launched = uncaptured.kernel_launches_without_gpu_record(uncaptured.steps[1])
    assert uncaptured.steps[1].number == step.number and missing == len(inside) <= launched


def test_an_intel_xpu_is_described_from_what_its_trace_writes(tmp_path) -> None:
    # Kineto's XPU plugin writes SYCL's device info: a name, maxComputeUnits, a vendor.
    events = [
        complete_event("urEnqueueKernelLaunch", "xpu_runtime", 0, 10, correlation=1),
        complete_event("gemm_kernel", "kernel", 20, 5, pid=0, tid=0, correlation=1),
    ]
    props = {
        "id": 0,
        "name": "Intel(R) Data Center GPU Max 1550",
        "totalGlobalMem": 68_719_476_736,
        "maxComputeUnits": 448,
        "maxWorkGroupSize": 1024,
        "vendor": "Intel(R) Corporation",
    }
    document = trace_document(events, deviceProperties=[props])
    trace = load_trace(write_trace(tmp_path / "xpu.json", document))
    (device,) = trace.devices
    assert (trace.vendor, device.vendor, device.compute_units) == ("intel", "intel", 448)
    assert device.describe() == "Intel(R) Data Center GPU Max 1550, 448 compute units"
    without = trace_document(events, deviceProperties=[])
    bare = load_trace(write_trace(tmp_path / "bare.json", without))
    assert bare.devices[0].describe() == "unknown Intel GPU"


def test_an_accelerators_own_events_on_a_host_thread_are_not_cpu_work(tmp_path) -> None:
    # IBM's Spyre (a PrivateUse1 backend) writes its kernels under categories of its own on a
    # thread of the host process: an accelerator the model does not read, not a CPU-only run.
    events = [
        complete_event("aten::randn", "cpu_op", 0, 50, tid=1),
        complete_event("aten::matmul", "cpu_op", 60, 50, tid=1),
        complete_event("aiu_randn_kernel", "aiu", 10, 40, tid=2),
        complete_event("aiu_matmul_kernel", "privateuse1", 70, 30, tid=2),
    ]
    trace = load_trace(
        write_trace(tmp_path / "spyre.json", trace_document(events, deviceProperties=[]))
    )
    assert trace.content == "accelerator not read"
    (unread,) = trace.unread_device_lanes()
    assert (unread.kind, unread.unread, unread.label) == (
        "other",
        True,
        "429 track 2 (aiu, privateuse1)",
    )
    assert [lane.label for lane in trace.lanes if lane.kind == "cpu"] == ["CPU thread 1"]
    assert trace.describe_gpu_work() == (
        "no CUDA/HIP work read; the accelerator's own 2 events (1 lane) are not analysed"
    )
    # Categories the model reads, or none at all (another tool's file), stay as they were.
    read = load_trace(write_trace(tmp_path / "cpu.json", trace_document(events[:2])))
    assert read.content == "CPU only" and not any(lane.unread for lane in read.lanes)


@pytest.mark.parametrize(
    ("category", "call"),
    [("xpu_runtime", "urEnqueueKernelLaunch"), ("privateuse1_runtime", "launchKernel")],
)
def test_another_backends_runtime_calls_launch_their_kernels(tmp_path, category, call) -> None:
    # Intel XPU (Kineto's PTI plugin) and PrivateUse1 backends write their launch calls under
    # categories of their own, linked to the kernels by correlation as CUDA's are.
    events = []
    for n in range(3):
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", 1_000 * n, 500),
            complete_event("aten::addmm", "cpu_op", 1_000 * n + 10, 100),
            complete_event(call, category, 1_000 * n + 20, 30, correlation=n + 1),
            complete_event(
                "gemm_kernel", "kernel", 1_000 * n + 60, 80, pid=0, tid=0, correlation=n + 1
            ),  # fmt: skip
        ]
    trace = load_trace(write_trace(tmp_path / "t.json", trace_document(events)))
    assert [c.name for c in trace.runtime_calls] == [call] * 3
    assert all(trace.launch_of(kernel).name == call for kernel in trace.kernels)
    assert [len(step.gpu_work) for step in trace.steps] == [1, 1, 1]
    assert trace.launch_of(trace.kernels[0]).parent == trace.find(name="aten::addmm")[0].id
    assert trace.vendor == ("intel" if category == "xpu_runtime" else "unknown")
    (cpu,) = [lane for lane in trace.lanes if lane.kind == "cpu"]
    assert cpu.pid == 429
