"""Measurements on the recorded H100 fixtures and on synthetic traces with known answers.

Fixture assertions test what the physics of each run implies (a 64x64 matmul cannot keep an
H100 busy, a 4096x4096 one can; torch.compile adds work before the first ATen op...), with
tolerances where timings vary from run to run; synthetic traces pin exact values.
"""

from __future__ import annotations

import gzip
import json

import msgspec
import pytest
from conftest import (
    FIXTURES,
    FOREIGN,
    complete_event,
    gpu_fixture,
    gpu_fixture_names,
    minimal_gpu_events,
)

from profiling_utils import Trace, cli, diagnose, load_trace, measures
from profiling_utils.measures import (
    compiled_regions,
    dead_windows,
    folded_calls,
    gpu_busy_us,
    gpu_gaps,
    graph_launches,
    host_work_in_windows,
    host_work_us,
    kernel_footprint,
    kernel_launches,
    kernel_stats,
    lane_busy_us,
    lane_offset,
    launch_delays,
    launches,
    memory_copies,
    op_stats,
    queued_idle,
    resident_blocks_per_sm,
    span_dict,
    step_times,
    thread_activity,
)

ALL_MEASURES = [
    step_times,
    launches,
    launch_delays,
    lane_offset,
    dead_windows,
    gpu_gaps,
    queued_idle,
    kernel_stats,
    kernel_launches,
    memory_copies,
]


def fixture(name: str) -> Trace:
    return _cache.setdefault(name, load_trace(gpu_fixture(name)))


_cache: dict[str, Trace] = {}


@pytest.fixture
def minimal(make_trace) -> Trace:
    return load_trace(make_trace(minimal_gpu_events()))


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_every_result_serialises_to_json(name: str) -> None:
    trace = fixture(name)
    for measure in ALL_MEASURES:
        for result in measure(trace):
            json.dumps(result.to_dict(), allow_nan=False)
    info = compiled_regions(trace).to_dict()
    assert json.loads(json.dumps(info)) == info


# -- step_times ---------------------------------------------------------------------------------


def test_work_queued_before_the_recording_is_not_idle_time(make_trace) -> None:
    # A server profiled mid-flight: its first recorded kernel, launched at 10 µs, waits until
    # 50 ms behind GEMMs queued before the recording began. The GPU was busy until then.
    events = []
    for n, (launched, started) in enumerate([(10.0, 50_000.0), (60_010.0, 60_020.0)]):
        t = 60_000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 59_000),
            complete_event("cudaLaunchKernel", "cuda_runtime", launched, 5, correlation=n + 1),
            complete_event("gemm", "kernel", started, 100, pid=0, tid=7, correlation=n + 1),
        ]
    events.append(complete_event("Activity Buffer Request", "overhead", 2, 5, pid=-1, tid=0))
    trace = load_trace(make_trace(events))
    assert measures.queued_before_recording(trace) is trace.gpu_work[0]
    # The profiler's buffer request in that step is not said to explain the wait.
    (request,) = diagnose(trace, select=["buffer-request"])
    assert request.evidence["queued_before_recording_us"] == 50_000 - 15
    assert "behind GPU work launched before the recording began, which the request" in (
        request.message
    )
    first, second = measures.step_times(trace)
    assert first.gpu_window_us == pytest.approx(59_000 - 50_000)  # from the kernel's start
    assert second.gpu_window_us == 59_000
    # A first kernel that starts soon after its launch: the step's window from its start.
    events[2]["ts"] = 30.0
    del events[-1]
    prompt = load_trace(make_trace(events, name="prompt.json"))
    assert measures.queued_before_recording(prompt) is None
    assert measures.step_times(prompt)[0].gpu_window_us == 59_000


def test_step_times_exact_on_a_synthetic_step(minimal: Trace) -> None:
    (step,) = step_times(minimal)
    assert step.step == 1 and step.cpu_us == 100.0
    assert step.gpu_busy_us == pytest.approx(32.0)  # kernel 50-80, copy 85-87
    assert step.gpu_window_us == pytest.approx(100.0)
    assert step.gpu_idle_fraction == pytest.approx(0.68)
    assert step.gpu_activities == 2


def test_step_windows_of_a_gpu_running_behind_on_two_streams_do_not_overlap(
    make_trace,
) -> None:
    # Step 1 launches a kernel on stream 7 (100-400 µs) and one on stream 8 (600-1000); step 2,
    # from 300 µs, one on stream 7 (450-900) that starts before step 1's last kernel. The GPU
    # ran nothing in 0-100 and 400-450: 150 µs idle in all. Windows that each ran to their
    # step's last kernel would share 400-900 and count 350.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 300),
        complete_event("ProfilerStep#2", "user_annotation", 300, 300),
        complete_event("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1),
        complete_event("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=2),
        complete_event("cudaLaunchKernel", "cuda_runtime", 310, 5, correlation=3),
        complete_event("a", "kernel", 100, 300, pid=0, tid=7, correlation=1),
        complete_event("b", "kernel", 600, 400, pid=0, tid=8, correlation=2),
        complete_event("c", "kernel", 450, 450, pid=0, tid=7, correlation=3),
    ]
    first, second = step_times(load_trace(make_trace(events)))
    assert (first.gpu_busy_us, second.gpu_busy_us) == (700.0, 450.0)  # their own work
    assert first.gpu_window_us == 400.0  # 0 until step 2's window opens, after kernel a
    assert second.gpu_window_us == 500.0  # 400-900
    assert (first.gpu_idle_us, second.gpu_idle_us) == (100.0, 50.0)
    assert first.gpu_idle_fraction == 0.25 and second.gpu_idle_fraction == pytest.approx(0.1)


def test_small_matmul_leaves_the_gpu_idle() -> None:
    for step in step_times(fixture("64_bf16_warm_eager")):
        # One 64x64 GEMM and one add: about 3 µs of work in a step of tens of µs.
        assert 2.5 < step.gpu_busy_us < 4.5
        assert step.gpu_idle_fraction > 0.9
        assert step.gpu_window_us == pytest.approx(step.cpu_us)


def test_large_matmul_keeps_the_gpu_busy_once_the_queue_fills() -> None:
    times = step_times(fixture("4096_bf16_warm_eager_w0a20"))
    assert len(times) == 20
    for step in times[2:]:
        # A 4096^3 bf16 GEMM (~170 µs on an H100) plus an add (~30 µs) per step.
        assert 190 < step.gpu_busy_us < 215
        assert step.gpu_idle_fraction < 0.05
        assert step.cpu_us < step.gpu_busy_us  # the CPU runs ahead
    fp32 = step_times(fixture("4096_fp32_warm_eager"))
    assert all(step.gpu_idle_fraction < 0.01 for step in fp32)
    assert all(2600 < step.gpu_busy_us < 2800 for step in fp32)  # fp32 GEMM ~2.6 ms


def test_step_gpu_windows_do_not_overlap() -> None:
    trace = fixture("4096_fp32_warm_eager")
    times = step_times(trace)
    first_step_start = trace.steps[0].start
    last_gpu_end = max(work.end for step in trace.steps for work in step.gpu_work)
    assert sum(t.gpu_window_us for t in times) <= last_gpu_end - first_step_start + 1e-6


def test_cpu_only_step_has_no_idle_fraction(make_trace) -> None:
    trace = load_trace(make_trace([complete_event("ProfilerStep#0", "user_annotation", 0, 10)]))
    (step,) = step_times(trace)
    assert (step.cpu_us, step.gpu_busy_us, step.gpu_idle_fraction) == (10.0, 0.0, None)


# -- launches and lanes -------------------------------------------------------------------------


def test_launch_delays_exact(minimal: Trace) -> None:
    kernel, copy = launch_delays(minimal)
    assert (kernel.launch.name, kernel.gpu.name, kernel.delay_us) == (
        "cudaLaunchKernel",
        "gemm_kernel",
        20.0,
    )
    assert copy.delay_us == pytest.approx(23.0) and copy.step == 1


def test_launch_delays_grow_when_the_gpu_is_the_bottleneck() -> None:
    small = launch_delays(fixture("64_bf16_warm_eager"))
    large = launch_delays(fixture("4096_bf16_warm_eager"))
    # Small kernels start right after their launch; large ones queue behind earlier GEMMs.
    assert all(d.delay_us < 30 for d in small if d.step != 2)
    by_step = {step: max(d.delay_us for d in large if d.step == step) for step in (2, 3, 4)}
    assert by_step[2] < by_step[3] < by_step[4]
    assert by_step[4] > 300
    # Every GPU activity with a launch in the trace is measured once.
    assert len(large) == len(fixture("4096_bf16_warm_eager").gpu_work)


def test_lane_offset_small_and_stable_for_small_kernels() -> None:
    offsets = lane_offset(fixture("64_bf16_warm_eager_w0a20"))
    assert [o.step for o in offsets] == list(range(20))
    # Step 0 pays for the profiler's first buffer request; later steps launch in ~10 µs.
    assert offsets[0].offset_us > 100
    assert all(o.offset_us < 20 for o in offsets[2:])
    assert all(o.launch.name == "cuLaunchKernelEx" for o in offsets)


def test_lane_offset_grows_by_the_gpu_backlog_each_step() -> None:
    offsets = lane_offset(fixture("4096_fp32_warm_eager"))
    times = step_times(fixture("4096_fp32_warm_eager"))
    # Each step queues ~2.7 ms of GPU work but takes ~0.15 ms of CPU: the GPU lane slides
    # right by roughly the difference every step.
    growth = offsets[2].offset_us - offsets[1].offset_us
    expected = times[1].gpu_busy_us - (offsets[2].launch.start - offsets[1].launch.start)
    assert growth == pytest.approx(expected, rel=0.05)
    assert offsets[0].step_start_to_gpu_us > offsets[0].offset_us


# -- dead windows -------------------------------------------------------------------------------


def test_dead_window_is_label_start_to_first_aten_op(minimal: Trace) -> None:
    (window,) = dead_windows(minimal)
    assert window.annotation.name == "work" and window.first_op.name == "aten::mm"
    assert window.gap_us == pytest.approx(5.0)
    assert dead_windows(minimal, label="nope") == []


def test_compile_widens_the_dead_window() -> None:
    eager = dead_windows(fixture("64_bf16_warm_eager"))
    compiled = dead_windows(fixture("64_bf16_warm_compile"))
    assert [w.step for w in eager] == [w.step for w in compiled] == [2, 3, 4]
    for e, c in zip(eager, compiled, strict=True):
        assert e.first_op.name == "aten::matmul"
        # Dynamo's cache lookup and the AOT wrapper run before the first ATen op.
        assert c.first_op.name == "aten::addmm"
        assert c.gap_us > 5 * e.gap_us
        span = fixture("64_bf16_warm_eager").spans
        assert e.gap_us == span[e.first_op.id].start - span[e.annotation.id].start


def test_dead_windows_for_a_named_label() -> None:
    trace = fixture("train_tiny_transformer_a3")
    windows = dead_windows(trace, label="train_step")
    assert [(w.step, w.first_op.name) for w in windows] == [
        (2, "aten::embedding"),
        (3, "aten::embedding"),
        (4, "aten::embedding"),
    ]
    optimizer = dead_windows(trace, label="Optimizer.step#AdamW.step")
    assert [w.step for w in optimizer] == [2, 3, 4]
    assert all(w.first_op.name.startswith("aten::") for w in optimizer)


# -- gpu gaps ---------------------------------------------------------------------------------


def test_gpu_gaps_exact(minimal: Trace) -> None:
    (gap,) = gpu_gaps(minimal)
    assert (gap.before.name, gap.after.name, gap.gap_us, gap.device) == (
        "gemm_kernel",
        "Memcpy DtoD (Device -> Device)",
        5.0,
        0,
    )
    assert gpu_gaps(minimal, min_gap_us=5.5) == []


def test_back_to_back_kernels_hold_no_gap_and_no_idle_time(make_trace) -> None:
    # Kernels written back to back (the MI300X replay trace: 493011.447 + 132.958 is the next
    # start) whose float times differ by rounding error only: no gap, no idle time, not the
    # "gaps 1, gap max 0.0" and "-0.00%" idle of a comparison with 0.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 1000.0, 20),
        complete_event("cudaLaunchKernel", "cuda_runtime", 1001.0, 5, correlation=1),
        complete_event("cudaLaunchKernel", "cuda_runtime", 1010.0, 5, correlation=2),
        complete_event("a", "kernel", 1000.0, 132.958, pid=0, tid=7, correlation=1),
        complete_event("b", "kernel", 1132.958 + 1e-5, 200.0, pid=0, tid=7, correlation=2),
    ]
    trace = load_trace(make_trace(events))
    assert gpu_gaps(trace) == []
    (step,) = step_times(trace)
    assert step.gpu_idle_fraction == 0.0
    events[-1]["ts"] += 0.01  # 10 ns: a gap the clock did see
    trace = load_trace(make_trace(events))
    (gap,) = gpu_gaps(trace)
    assert gap.gap_us == pytest.approx(0.01001)
    assert step_times(trace)[0].gpu_idle_fraction > 0


def test_gpu_gaps_leave_out_other_steps_work_on_other_streams(make_trace) -> None:
    # Step 1's a (0-10) and b (100-110) on stream 7; step 2's c (30-60) runs between them
    # on stream 8, the GPU behind the CPU. Step 1's GPU idles 10-30 and 60-100, not 10-100.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 20),
        complete_event("cudaLaunchKernel", "cuda_runtime", 1, 2, correlation=1),
        complete_event("cudaLaunchKernel", "cuda_runtime", 5, 2, correlation=2),
        complete_event("ProfilerStep#2", "user_annotation", 20, 20),
        complete_event("cudaLaunchKernel", "cuda_runtime", 21, 2, correlation=3),
        _gpu_kernel("a", 0, 10, 1),
        _gpu_kernel("b", 100, 10, 2),
        _gpu_kernel("c", 30, 30, 3, stream=8),
    ]
    gaps = gpu_gaps(load_trace(make_trace(events)))
    assert [(g.step, g.before.name, g.after.name, g.gap_us) for g in gaps] == [
        (1, "a", "c", 20.0),
        (1, "c", "b", 40.0),
    ]


def test_queued_idle_is_the_wait_of_launched_work_on_an_idle_gpu(make_trace) -> None:
    # a runs 10-100; b, launched at 20-25, starts only at 400: 300 µs with b waiting and
    # nothing running, as when another process holds the GPU. c, on a second stream of the
    # same GPU, runs 150-250 in the other variant: the device is not idle then.
    def events(other_stream: bool) -> list[dict]:
        out = [
            complete_event("ProfilerStep#1", "user_annotation", 0, 500),
            complete_event("cudaLaunchKernel", "cuda_runtime", 0, 5, correlation=1),
            complete_event("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=2),
            _gpu_kernel("a", 10, 90, 1),
            _gpu_kernel("b", 400, 50, 2),
        ]
        if other_stream:
            out += [
                complete_event("cudaLaunchKernel", "cuda_runtime", 140, 5, correlation=3),
                _gpu_kernel("c", 150, 100, 3, stream=8),
            ]
        return out

    (alone,) = queued_idle(load_trace(make_trace(events(False))), min_idle_us=10)
    assert (alone.work.name, alone.launch.start, alone.step) == ("b", 20.0, 1)
    assert (alone.start_us, alone.idle_us) == (100.0, 300.0)
    shared = queued_idle(load_trace(make_trace(events(True))), min_idle_us=10)
    assert [(q.work.name, q.start_us, q.idle_us) for q in shared] == [("b", 250.0, 150.0)]


def _gpu_kernel(name: str, ts: float, dur: float, correlation: int, stream: int = 7) -> dict:
    return complete_event(
        name, "kernel", ts, dur, pid=0, tid=stream, correlation=correlation, device=0,
        stream=stream,
    )  # fmt: skip


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_recorded_h100_runs_start_launched_work_within_microseconds(name: str) -> None:
    # Including the GEMM beside a neighbour process whose burst missed our idle moments.
    assert all(q.idle_us < 10 for q in queued_idle(fixture(name)))


def test_gpu_gaps_between_launch_bound_kernels() -> None:
    trace = fixture("64_bf16_warm_eager")
    gaps = gpu_gaps(trace)
    # GEMM, then the add launched ~10 µs later from the CPU: one gap per step.
    assert [g.step for g in gaps] == [2, 3, 4]
    for gap in gaps:
        assert gap.before.name.startswith("nvjet_sm90_") and "add" in gap.after.name
        assert gap.gap_us > 10
    assert len(gpu_gaps(trace, min_gap_us=30)) < len(gaps)


def test_gpu_gaps_tiny_when_the_queue_is_full() -> None:
    gaps = gpu_gaps(fixture("4096_bf16_warm_eager_w0a20"))
    assert all(g.gap_us < 5 for g in gaps if g.step >= 2)


def test_gpu_gaps_are_time_no_stream_ran(make_trace) -> None:
    """A stretch between two kernels of step 2 that a kernel launched in step 1 fills (the
    CPU ran ahead) is not idle; the same stretch left empty is."""

    def events(fill: bool) -> list[dict]:
        out = [
            complete_event("ProfilerStep#1", "user_annotation", 0, 50),
            complete_event("ProfilerStep#2", "user_annotation", 50, 50),
        ]
        launches = [(1, 10, 0.0, 7, 300.0), (2, 60, 400.0, 7, 100.0), (3, 70, 600.0, 7, 100.0)]
        if not fill:
            launches = [launch for launch in launches if launch[0] != 1]
        for correlation, launch_at, start, stream, dur in launches:
            out += [
                complete_event(
                    "cudaLaunchKernel", "cuda_runtime", launch_at, 5, correlation=correlation
                ),
                complete_event(
                    f"k{correlation}",
                    "kernel",
                    start,
                    dur,
                    pid=0,
                    tid=stream,
                    correlation=correlation,
                ),
            ]
        if fill:  # step 1's second kernel, on another stream, runs from 450 to 650
            out += [
                complete_event("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=4),
                complete_event("k4", "kernel", 450.0, 200.0, pid=0, tid=20, correlation=4),
            ]
        return out  # fmt: skip

    empty = load_trace(make_trace(events(fill=False), name="empty.json"))
    assert [(g.step, g.before.name, g.after.name, g.gap_us) for g in gpu_gaps(empty)] == [
        (2, "k2", "k3", 100.0)
    ]
    filled = load_trace(make_trace(events(fill=True), name="filled.json"))
    assert [g for g in gpu_gaps(filled) if g.step == 2] == []


# -- kernels ----------------------------------------------------------------------------------


def test_kernel_stats_of_twenty_identical_gemms() -> None:
    stats = kernel_stats(fixture("4096_bf16_warm_eager_w0a20"))
    gemm = stats[0]  # sorted by total time: the GEMM dominates
    assert gemm.name.startswith("nvjet_sm90_") and gemm.count == 20
    assert 160 < gemm.min_us <= gemm.median_us <= gemm.max_us < 190
    assert gemm.min_us <= gemm.mean_us <= gemm.max_us
    assert gemm.spread < 0.1
    assert gemm.total_us == pytest.approx(gemm.mean_us * 20)
    totals = [s.total_us for s in stats]
    assert totals == sorted(totals, reverse=True)


def test_kernel_stats_counts_every_kernel_once() -> None:
    trace = fixture("train_tiny_transformer_a3")
    assert sum(s.count for s in kernel_stats(trace)) == len(trace.kernels)


def test_kernel_stats_outlier_steps(make_trace) -> None:
    events = []
    for step in range(6):
        t = 1000.0 * step
        slow = step == 3
        events += [
            complete_event(f"ProfilerStep#{step}", "user_annotation", t, 500),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 10, 5, correlation=step),
            complete_event("k", "kernel", t + 20, 20.0 if slow else 10.0 + 0.01 * step,
                           pid=0, tid=7, correlation=step),
        ]  # fmt: skip
    (stats,) = kernel_stats(load_trace(make_trace(events)))
    assert stats.count == 6 and stats.max_us == 20.0
    assert stats.outlier_steps == (3,)
    assert stats.spread == pytest.approx((20.0 - 10.0) / stats.median_us)


def _steps_of_kernels(durations_per_step: list[list[float]]) -> list[dict]:
    """One step per list, each kernel ``k`` launched in it, with the durations given."""
    events = []
    for step, durations in enumerate(durations_per_step):
        t = 1000.0 * step
        events.append(complete_event(f"ProfilerStep#{step}", "user_annotation", t, 900))
        for index, dur in enumerate(durations):
            correlation = 100 * step + index
            start = t + 10 + 60 * index
            events += [
                complete_event("cudaLaunchKernel", "cuda_runtime", start, 5,
                               correlation=correlation),
                complete_event("k", "kernel", start + 10, dur, pid=0, tid=7,
                               correlation=correlation),
            ]  # fmt: skip
    return events


def test_kernel_stats_outliers_are_judged_by_role(make_trace) -> None:
    # One name at two sizes in every step (a reduction over a small and a large layer): the
    # mixed durations put every step outside the name's fences; each role alone is steady,
    # and the one slow small instance (step 4) is the outlier.
    sizes = [[5.0 + 0.01 * step, 40.0 + 0.01 * step] for step in range(8)]
    sizes[4][0] = 9.0
    (stats,) = kernel_stats(load_trace(make_trace(_steps_of_kernels(sizes))))
    assert stats.count == 16
    assert stats.outlier_steps == (4,)


def test_kernel_stats_find_an_outlier_among_five_steps(make_trace) -> None:
    # HTA's five-step recording: one instance of a permute kernel takes 208 µs against 9-11
    # µs in the other steps. The exclusive quartiles of five values put the upper fence at
    # 259.5 µs, above any one of them; the inclusive ones (as kernel-variance reads them) do
    # not.
    durations = [[10.0], [11.0], [10.0], [208.0], [9.0]]
    (stats,) = kernel_stats(load_trace(make_trace(_steps_of_kernels(durations))))
    assert stats.outlier_steps == (3,)


def test_kernel_stats_whole_microsecond_rounding_is_no_outlier(make_trace) -> None:
    # Times in whole µs (torch before ~1.11): a 1 µs kernel written as 2 µs, or 3, may be
    # the same kernel rounded apart (the kineto ResNet traces flagged every step so).
    durations = [[1.0], [1.0], [2.0], [1.0], [1.0], [3.0], [1.0], [1.0]]
    (stats,) = kernel_stats(load_trace(make_trace(_steps_of_kernels(durations))))
    assert stats.outlier_steps == ()
    durations[5] = [4.0]  # 3 µs more than the others: beyond the rounding
    (stats,) = kernel_stats(load_trace(make_trace(_steps_of_kernels(durations), name="t2.json")))
    assert stats.outlier_steps == (5,)


def test_kernel_stats_sub_microsecond_jitter_is_no_outlier(make_trace) -> None:
    # A 1.6 µs kernel at 1.9 µs is 19% off, outside tight fences, and still jitter.
    short = [[1.6 + 0.001 * step] for step in range(8)]
    short[2][0] = 1.9
    (stats,) = kernel_stats(load_trace(make_trace(_steps_of_kernels(short))))
    assert stats.outlier_steps == ()
    short[2][0] = 2.7  # over a µs slower: an outlier
    (stats,) = kernel_stats(load_trace(make_trace(_steps_of_kernels(short), name="t2.json")))
    assert stats.outlier_steps == (2,)


def test_kernel_stats_mark_the_collectives(capsys, make_trace) -> None:
    events = [
        complete_event("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                       "kernel", 0, 50, pid=0, tid=17),
        complete_event("gemm", "kernel", 10, 20, pid=0, tid=7),
    ]  # fmt: skip
    path = make_trace(events)
    stats = {s.name[:4]: s.communication for s in kernel_stats(load_trace(path))}
    assert stats == {"nccl": True, "gemm": False}
    assert cli.main(["summary", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    marks = [i for i, line in enumerate(lines) if "a collective:" in line]
    assert len(marks) == 1 and lines[marks[0] - 1].strip().startswith("ncclDevKernel")


def test_kernel_launch_apis_of_the_recorded_runs() -> None:
    def apis(name: str) -> dict[str, str | None]:
        return {
            launch.kernel.name.split("<")[0][:24]: launch.api
            for launch in kernel_launches(fixture(name))
        }

    # bf16 GEMMs go through the driver API, elementwise kernels through the runtime.
    assert apis("64_bf16_warm_eager") == {
        "nvjet_sm90_tst_64x8_64x1": "cuLaunchKernelEx",
        "void at::native::vectori": "cudaLaunchKernel",
    }
    fp32 = kernel_launches(fixture("4096_fp32_warm_eager"))
    assert {kl.api for kl in fp32} == {
        "cudaLaunchKernelExC",
        "cudaLaunchKernel",
        None,  # the first add was launched before the profiling window
    }
    graph = apis("64_bf16_warm_compile-reduce-overhead")
    assert graph["nvjet_sm90_tst_64x8_64x1"] == "cudaGraphLaunch"


def test_fp32_gemm_is_planned_with_cuda_func_get_attributes() -> None:
    launches = [
        kl for kl in kernel_launches(fixture("4096_fp32_warm_eager")) if "gemm" in kl.kernel.name
    ]
    assert len(launches) == 3
    for kl in launches:
        assert kl.op.name == "aten::mm"
        assert [call.name for call in kl.planning_calls] == ["cudaFuncGetAttributes"]
        (call,) = kl.planning_calls
        assert call.end <= kl.launch.start
        assert kl.footprint.registers_per_thread == 254
        assert kl.footprint.grid == (16, 32, 1) and kl.footprint.block == (256, 1, 1)
        assert kl.footprint.shared_memory_bytes == 67584


def test_bf16_gemm_needs_no_planning_call() -> None:
    for kl in kernel_launches(fixture("4096_bf16_warm_eager")):
        assert kl.planning_calls == ()
        assert kl.step in (2, 3, 4)


def test_cudnn_attention_kernels_look_up_their_function_first() -> None:
    launches = kernel_launches(fixture("train_tiny_transformer_a3"))
    planned = [kl for kl in launches if kl.planning_calls]
    assert planned and all(kl.op.name == "aten::_cudnn_attention_backward" for kl in planned)
    assert {c.name for kl in planned for c in kl.planning_calls} == {"cudaGetFuncBySymbol"}


def test_planning_calls_belong_to_the_next_launch_only(make_trace) -> None:
    events = [
        complete_event("aten::op", "cpu_op", 0, 100),
        complete_event("cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cuda_runtime", 1, 2),
        complete_event("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1),
        complete_event("cudaFuncSetAttribute", "cuda_runtime", 20, 2),
        complete_event("cudaGetErrorString", "cuda_runtime", 23, 1),
        complete_event("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=2),
        complete_event("k1", "kernel", 40, 5, pid=0, tid=7, correlation=1),
        complete_event("k2", "kernel", 50, 5, pid=0, tid=7, correlation=2),
    ]
    first, second = kernel_launches(load_trace(make_trace(events)))
    assert [c.name for c in first.planning_calls] == [
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor"
    ]
    assert [c.name for c in second.planning_calls] == ["cudaFuncSetAttribute"]
    assert first.op.name == second.op.name == "aten::op"
    assert first.footprint.grid is None and first.step is None


def test_a_memset_launched_in_between_leaves_the_planning_to_the_kernel(make_trace) -> None:
    # As before the H100's bf16 GEMMs: plan, zero a workspace, then launch the GEMM.
    events = [
        complete_event("aten::mm", "cpu_op", 0, 100),
        complete_event("cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cuda_runtime", 1, 2),
        complete_event("cudaMemsetAsync", "cuda_runtime", 10, 5, correlation=1),
        complete_event("cuLaunchKernelEx", "cuda_driver", 20, 5, correlation=2),
        complete_event("Memset (Device)", "gpu_memset", 30, 1, pid=0, tid=7, correlation=1),
        complete_event("gemm", "kernel", 40, 5, pid=0, tid=7, correlation=2),
    ]
    trace = load_trace(make_trace(events))
    memset, gemm = launches(trace)
    assert memset.call.name == "cudaMemsetAsync" and memset.planning == ()
    assert memset.kernel is None and [w.name for w in memset.work] == ["Memset (Device)"]
    assert gemm.kernel.name == "gemm" and gemm.op.name == "aten::mm"
    assert [c.name for c in gemm.planning] == ["cudaOccupancyMaxActiveBlocksPerMultiprocessor"]
    (kernel_launch,) = kernel_launches(trace)
    assert kernel_launch.planning_calls == gemm.planning
    assert kernel_launch.api == "cuLaunchKernelEx"
    assert gemm.to_dict()["call"]["name"] == "cuLaunchKernelEx"


# -- memory -----------------------------------------------------------------------------------


def test_compiled_run_copies_the_bias_before_the_gemm() -> None:
    for size in (64, 4096):
        copies = [
            m for m in memory_copies(fixture(f"{size}_bf16_warm_compile")) if m.kind == "DtoD"
        ]
        assert len(copies) == 3
        for copy in copies:
            assert copy.bytes == size * size * 2  # one bf16 matrix: the addmm bias
            assert copy.op.name == "aten::addmm" and copy.api == "cudaMemcpyAsync"
            assert copy.bandwidth_gb_s == pytest.approx(copy.bytes / copy.span.dur / 1e3)
    big = memory_copies(fixture("4096_bf16_warm_compile"))
    assert min(m.bandwidth_gb_s for m in big if m.kind == "DtoD") > 1000  # H100 HBM3


def test_graph_replay_issues_its_copy_through_cuda_graph_launch() -> None:
    copies = memory_copies(fixture("64_bf16_warm_compile-reduce-overhead"))
    assert {(m.kind, m.api) for m in copies} == {("DtoD", "cudaGraphLaunch")}
    assert all(m.op.name.startswith("## Call CompiledFxGraph") for m in copies)


def test_memsets_and_synthetic_copy(minimal: Trace) -> None:
    (copy,) = memory_copies(minimal)
    assert (copy.kind, copy.bytes, copy.api, copy.step) == ("DtoD", 4096, "cudaMemcpyAsync", 1)
    assert copy.bandwidth_gb_s == pytest.approx(2.048)
    assert copy.op.name == "aten::copy_"
    memsets = memory_copies(fixture("4096_bf16_warm_eager"))
    assert {(m.kind, m.op.name, m.api) for m in memsets} == {
        ("memset", "aten::mm", "cudaMemsetAsync")
    }


# -- torch.compile ----------------------------------------------------------------------------


def test_eager_run_has_no_compiled_regions() -> None:
    info = compiled_regions(fixture("64_bf16_warm_eager"))
    assert not info.is_compiled
    assert info.regions == info.graph_calls == info.cuda_graph_launches == ()


def test_compiled_regions_of_a_compiled_run() -> None:
    cold = compiled_regions(fixture("64_bf16_cold_compile"))
    warm = compiled_regions(fixture("64_bf16_warm_compile"))
    for info in (cold, warm):
        assert info.is_compiled
        assert len(info.regions) == len(info.cache_lookups) == len(info.graph_calls) == 3
        assert len(info.aot_wrappers) == 3
        assert len(info.graph_hashes) == 1 and info.cuda_graph_launches == ()
        assert info.cache_lookup_us == pytest.approx(sum(s.dur for s in info.cache_lookups))
    # The same function compiles to the same FX graph, cold or warm.
    assert cold.graph_hashes == warm.graph_hashes
    assert cold.region_ids == ("0/0",)


def test_the_gpu_lanes_copy_of_a_compiled_graph_call_is_not_a_second_call(make_trace) -> None:
    # In a compiled training step the graph call's record_function range is mirrored on the
    # GPU lane (gpu_user_annotation) over the work it launched: one call, not two.
    call = "## Call CompiledFxGraph fnb746rx ##"
    events = []
    for step in range(2):
        t = step * 100
        events += [
            complete_event(f"ProfilerStep#{step}", "user_annotation", t, 90),
            complete_event(call, "user_annotation", t + 10, 50),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=step),
            complete_event(call, "gpu_user_annotation", t + 30, 20, pid=0, tid=7),
            complete_event("triton_poi_fused_0", "kernel", t + 30, 20, pid=0, tid=7,
                           correlation=step),
        ]  # fmt: skip
    trace = load_trace(make_trace(events))
    info = compiled_regions(trace)
    assert [s.lane.kind for s in info.graph_calls] == ["cpu", "cpu"]
    (hit,) = diagnose(trace, select=["compiled-graph-cache-hit"])
    assert hit.evidence["calls"] == 2 and hit.evidence["median_us"] == 50.0


def test_reduce_overhead_replays_a_cuda_graph() -> None:
    info = compiled_regions(fixture("64_bf16_warm_compile-reduce-overhead"))
    assert len(info.cuda_graph_launches) == 3
    assert all(s.name == "cudaGraphLaunch" for s in info.cuda_graph_launches)


def test_span_dict() -> None:
    span = fixture("64_bf16_warm_eager").kernels[0]
    assert span_dict(span) == {
        "id": span.id,
        "name": span.name,
        "cat": "kernel",
        "lane": "GPU 0 stream 7",
        "start_us": span.start,
        "dur_us": span.dur,
    }
    assert span_dict(None) is None


# -- busy time ----------------------------------------------------------------------------------


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def test_gpu_busy_is_the_union_of_gpu_work_never_annotations() -> None:
    # An MI250 trace whose GPU lane also holds two gpu_user_annotation spans (ProfilerStep#1
    # among them, 1,031 µs) around 149 µs of kernels and copies.
    name = "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    written = json.loads(gzip.decompress((FOREIGN / name).read_bytes()))["traceEvents"]
    work = [
        (e["ts"], e["ts"] + e["dur"])
        for e in written
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    annotated = sum(e["dur"] for e in written if e.get("cat") == "gpu_user_annotation")
    trace = load_trace(FOREIGN / name)
    (lane,) = [lane for lane in trace.lanes if lane.kind == "gpu"]
    # Absolute µs near 4.2e12 hold about 0.5 ns of float precision.
    assert gpu_busy_us(trace) == pytest.approx(_union(work), abs=1e-2)
    assert gpu_busy_us(trace, lane) == gpu_busy_us(trace)
    assert lane_busy_us(trace, lane) == gpu_busy_us(trace)
    assert annotated > 5 * gpu_busy_us(trace)  # what summing the lane's top spans gave


def test_gpu_busy_counts_overlapping_streams_once(make_trace) -> None:
    events = [
        complete_event("a", "kernel", 0, 10, pid=0, tid=7),
        complete_event("b", "kernel", 5, 10, pid=0, tid=20),  # overlaps a by 5
        complete_event("copy", "gpu_memcpy", 30, 2, pid=0, tid=7),
        complete_event("label", "gpu_user_annotation", 0, 100, pid=0, tid=7),
        complete_event("sync", "cuda_sync", 40, 50, pid=0, tid=7),
    ]
    trace = load_trace(make_trace(events))
    assert gpu_busy_us(trace) == 17.0
    by_label = {lane.label: lane for lane in trace.lanes}
    assert gpu_busy_us(trace, by_label["GPU 0 stream 7"]) == 12.0
    assert gpu_busy_us(trace, by_label["GPU 0 stream 20"]) == 10.0
    # Inside a window: a from 8 (2 µs), b past a's end (5), the copy up to 31 (1).
    assert gpu_busy_us(trace, window=(8.0, 31.0)) == 8.0
    assert gpu_busy_us(trace, by_label["GPU 0 stream 7"], window=(8.0, 31.0)) == 3.0
    assert gpu_busy_us(trace, window=(15.0, 30.0)) == 0.0  # the GPU idle all through it


def test_cpu_lane_busy_is_the_union_of_its_work_not_its_labels(make_trace) -> None:
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 1000),
        complete_event("frame", "python_function", 0, 100),
        complete_event("aten::mm", "cpu_op", 50, 100),  # outlives the frame: not nested
        complete_event("cudaLaunchKernel", "cuda_runtime", 120, 20),  # inside aten::mm
        complete_event("aten::add", "cpu_op", 200, 10),
        complete_event("cudaDeviceSynchronize", "cuda_runtime", 300, 40),
    ]
    trace = load_trace(make_trace(events))
    (lane,) = trace.lanes
    # aten::mm (50-150) with its launch, aten::add, the sync: not the step or the frame.
    assert lane_busy_us(trace, lane) == 150.0


def test_busy_of_a_cpu_only_trace_is_zero(make_trace) -> None:
    trace = load_trace(make_trace([complete_event("op", "cpu_op", 0, 5)]))
    assert gpu_busy_us(trace) == 0.0


def test_hip_launches_graphs_and_planning_calls_read_like_cuda(make_trace) -> None:
    events = [
        complete_event("aten::mm", "cpu_op", 0, 50),
        complete_event("hipFuncGetAttributes", "cuda_runtime", 2, 1, correlation=1),
        complete_event("hipModuleLaunchKernel", "cuda_runtime", 5, 3, correlation=2),
        complete_event("Cijk_gemm", "kernel", 10, 5, pid=2, tid=0, correlation=2),
        complete_event("hipGraphLaunch", "cuda_runtime", 60, 4, correlation=3),
        complete_event("k1", "kernel", 70, 2, pid=2, tid=0, correlation=3),
        complete_event("k2", "kernel", 73, 2, pid=2, tid=0, correlation=3),
    ]
    trace = load_trace(make_trace(events, deviceProperties=None))
    kernel_launch, graph_launch = launches(trace)
    assert kernel_launch.call.name == "hipModuleLaunchKernel"
    assert [c.name for c in kernel_launch.planning] == ["hipFuncGetAttributes"]
    assert kernel_launch.op.name == "aten::mm"
    assert [w.name for w in graph_launch.work] == ["k1", "k2"]
    graphs = compiled_regions(trace).cuda_graph_launches
    assert [g.name for g in graphs] == ["hipGraphLaunch"]


def test_rocm_footprints_come_from_the_launch_call_in_blocks(make_trace) -> None:
    # ROCm records grid and block on the launch call only. hipExtModuleLaunchKernel's grid
    # is the global work size in work-items (MIOpen's 155,648 = 304 blocks of 512, one per
    # MI300X CU); hipLaunchKernel's counts blocks, as CUDA does.
    events = [
        complete_event("aten::convolution", "cpu_op", 0, 50),
        complete_event(
            "hipExtModuleLaunchKernel", "cuda_runtime", 5, 3, correlation=1,
            grid=[155648, 1, 1], block=[512, 1, 1], **{"shared memory": 0},
        ),
        complete_event("miopenSp3AsmConv", "kernel", 10, 5, pid=2, tid=0, correlation=1),
        complete_event(
            "hipLaunchKernel", "cuda_runtime", 20, 3, correlation=2,
            grid=[3, 1, 1], block=[128, 1, 1], **{"shared memory": 0},
        ),
        complete_event("elementwise_kernel", "kernel", 30, 5, pid=2, tid=0, correlation=2),
        # An NVIDIA kernel records its own, which stand.
        complete_event("cudaLaunchKernel", "cuda_runtime", 40, 3, correlation=3),
        complete_event(
            "gemm", "kernel", 50, 5, pid=2, tid=0, correlation=3,
            grid=[132, 1, 1], block=[384, 1, 1], **{"shared memory": 232448},
        ),
    ]  # fmt: skip
    trace = load_trace(make_trace(events, deviceProperties=None))
    conv, elementwise, gemm = (k.footprint for k in kernel_launches(trace))
    assert (conv.grid, conv.block) == ((304, 1, 1), (512, 1, 1))
    assert (elementwise.grid, elementwise.block) == ((3, 1, 1), (128, 1, 1))
    # The launch's shared memory is the dynamic part only: the kernel's use is not known.
    assert conv.shared_memory_bytes is None and elementwise.shared_memory_bytes is None
    assert (gemm.grid, gemm.shared_memory_bytes) == ((132, 1, 1), 232448)
    assert kernel_footprint(trace.kernels[0]).grid is None  # without its launch: not known


def test_later_rocm_launch_dims_are_read_too() -> None:
    # TraceLens's MI300-class GEMM: hipExtModuleLaunchKernel writes "grid dim" in work-items
    # and "block dim": [512, 4, 1] over [256, 1, 1] for the GEMM, blocks (2, 4, 1); [131072,
    # 1, 1] for the split-K reduction after it, 512 blocks.
    trace = load_trace(FIXTURES / "foreign" / "tracelens__gemm_01_compute_few_tiles.json.gz")
    footprints = {(k.footprint.grid, k.footprint.block) for k in kernel_launches(trace)}
    assert footprints == {((2, 4, 1), (256, 1, 1)), ((512, 1, 1), (256, 1, 1))}


def test_folded_calls_follow_key_averages(make_trace) -> None:
    # aten::sum [0, 100) holds only aten::sum [10, 90), which holds only aten::sum [20, 80):
    # both inner calls fold into the outer one. aten::add [200, 300) holds two aten::add
    # calls: neither is an only child, so none folds.
    events = [
        complete_event("aten::sum", "cpu_op", 0, 100),
        complete_event("aten::sum", "cpu_op", 10, 80),
        complete_event("aten::sum", "cpu_op", 20, 60),
        complete_event("aten::add", "cpu_op", 200, 100),
        complete_event("aten::add", "cpu_op", 210, 30),
        complete_event("aten::add", "cpu_op", 250, 30),
    ]
    trace = load_trace(make_trace(events))
    outer, middle, inner = trace.spans[:3]
    assert folded_calls(trace) == {middle.id: outer.id, inner.id: outer.id}
    # A caller that found the spans nested in their own name gets the same answer.
    assert folded_calls(trace, [inner, middle]) == folded_calls(trace)


def test_a_deep_chain_of_only_children_folds_into_its_outermost_call(make_trace) -> None:
    # Recursion 2,000 deep, each call holding only the next: every inner call folds into the
    # first, and the innermost call's two children (another name) fold nothing.
    depth = 2000
    events = [complete_event("f", "cpu_op", i, 10_000 - 2 * i) for i in range(depth)]
    events += [
        complete_event("g", "cpu_op", depth + 1, 1),
        complete_event("g", "cpu_op", depth + 3, 1),
    ]
    trace = load_trace(make_trace(events))
    chain = [span for span in trace.spans if span.name == "f"]
    assert [span.depth for span in chain] == list(range(depth))
    assert folded_calls(trace) == {span.id: chain[0].id for span in chain[1:]}
    (stats,) = [s for s in op_stats(trace) if s.name == "f"]
    # One call, the outermost, whose children are the innermost call's (the two g calls).
    assert (stats.calls, stats.total_us, stats.self_us) == (1, chain[0].dur, chain[0].dur - 2)


def test_thread_activity_lists_the_outermost_operators_and_the_time_none_ran(make_trace) -> None:
    # A label around two ops, one of which holds a child; another thread's op in the window.
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 100),
        complete_event("outer", "cpu_op", 10, 30),
        complete_event("inner", "cpu_op", 12, 5),
        # A label between two ops (a compiled region's "## Call CompiledFxGraph ##").
        complete_event("## call ##", "user_annotation", 22, 10),
        complete_event("deep", "cpu_op", 23, 8),
        complete_event("late", "cpu_op", 50, 40),
        complete_event("cudaLaunchKernel", "cuda_runtime", 55, 3),
        complete_event("elsewhere", "cpu_op", 20, 60, tid=7),
    ]
    trace = load_trace(make_trace(events))
    lane = next(span.lane for span in trace.spans if span.name == "outer")
    activity = thread_activity(trace, lane, 20.0, 70.0)
    # outer runs 20-40 (20 us of the window), late 50-70 (20 us): inner and deep are inside
    # outer (deep through a label), and the other thread's op and the runtime call are not
    # operators of this thread.
    assert [(op.name, inside) for op, inside in activity.ops] == [("outer", 20.0), ("late", 20.0)]
    assert activity.op_us == 40.0 and activity.no_op_us == 10.0
    assert [label.name for label in activity.labels] == ["ProfilerStep#1", "## call ##"]
    # A window before every op: nothing ran, the label was open.
    before = thread_activity(trace, lane, 1.0, 5.0)
    assert (before.ops, before.op_us, before.no_op_us) == ((), 0.0, 4.0)
    assert activity.to_dict()["ops"][0][0]["name"] == "outer"


def test_thread_activity_counts_overlapping_siblings_once(make_trace) -> None:
    # Two top-level ops that overlap (rounded times): their union, not their sum.
    events = [complete_event("a", "cpu_op", 0, 30), complete_event("b", "cpu_op", 20, 30)]
    trace = load_trace(make_trace(events))
    lane = trace.spans[0].lane
    activity = thread_activity(trace, lane, 0.0, 60.0)
    assert sorted(op.name for op, _ in activity.ops) == ["a", "b"]
    assert activity.op_us == 50.0 and activity.no_op_us == 10.0


def test_resident_blocks_per_sm_of_a_gemm_and_an_all_reduce_on_an_h200() -> None:
    # The overlapped NCCL recording: the GEMM's blocks take 213,188 bytes of the SM's
    # 233,472 of shared memory, the all_reduce's 544 threads x 96 registers 52,224 of its
    # 65,536 registers: one block of either per SM, and no GEMM block beside an NCCL one.
    trace = load_trace(FIXTURES / "nccl" / "overlapped" / "rank0.json.gz")
    (device,) = [d for d in trace.devices if d.id == 0]
    assert (device.shared_memory_per_sm_bytes, device.registers_per_sm) == (233_472, 65_536)
    assert device.threads_per_sm == 2048
    gemm = next(k for k in trace.kernels if k.name.startswith("nvjet"))
    nccl = next(k for k in trace.kernels if k.name.startswith("ncclDevKernel_AllReduce_Sum_bf16"))
    gemm_fp, nccl_fp = kernel_footprint(gemm), kernel_footprint(nccl)
    assert resident_blocks_per_sm(gemm_fp, device) == 1  # by shared memory (and registers)
    assert resident_blocks_per_sm(nccl_fp, device) == 1  # by registers: 2 x 52,224 > 65,536
    unknown = msgspec.structs.replace(device, shared_memory_per_sm_bytes=None)
    assert resident_blocks_per_sm(nccl_fp, unknown) == 1  # registers still tell
    bare = msgspec.structs.replace(
        device, shared_memory_per_sm_bytes=None, registers_per_sm=None, threads_per_sm=None
    )
    assert resident_blocks_per_sm(gemm_fp, bare) is None


def test_a_rocm_copy_takes_its_size_from_its_call() -> None:
    # hipMemcpyWithStream records "size": "2560" on the call; the copy records no bytes.
    trace = load_trace(FOREIGN / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    copies = memory_copies(trace)
    assert [(c.kind, c.api, c.bytes) for c in copies] == [("HtoD", "hipMemcpyWithStream", 2560)] * 2
    assert all("bytes" not in c.span.args for c in copies)
    for copy in copies:
        assert copy.bandwidth_gb_s == pytest.approx(2560 / copy.span.dur / 1e3)


def test_a_graph_replay_has_one_launch_delay_its_first_activitys() -> None:
    trace = load_trace(gpu_fixture("4096_bf16_warm_compile-reduce-overhead"))
    graphs = graph_launches(trace)
    delays = [d for d in launch_delays(trace) if d.launch.name == "cudaGraphLaunch"]
    assert graphs and len(delays) == len(graphs)
    for delay in delays:
        first = min(trace.gpu_work_of(delay.launch), key=lambda w: w.start)
        assert delay.gpu is first


def test_host_work_in_windows_is_host_work_us_of_each() -> None:
    trace = load_trace(gpu_fixture("train_tiny_transformer_a3"))
    windows = [(step.start, step.end) for step in trace.steps] + [(0.0, 5_000.0), (10.0, 10.0)]
    each = [host_work_us(trace, window) for window in windows]
    assert host_work_in_windows(trace, windows) == pytest.approx(each, abs=1e-6)
    assert each[-1] == 0.0 and 0 < each[0] <= windows[0][1] - windows[0][0]


@pytest.mark.parametrize("name", ["64_bf16_warm_eager", "train_tiny_transformer_a3"])
def test_gpu_busy_in_windows_is_gpu_busy_in_each_window(name: str) -> None:
    trace = load_trace(gpu_fixture(name))
    end = max(span.end for span in trace.gpu_work)
    windows = [(0.0, end), (end / 3, end / 2), (end / 2, end / 2), (end * 0.9, end * 2)]
    windows += [(step.start, step.end) for step in trace.steps]
    expected = [measures.gpu_busy_us(trace, window=window) for window in windows]
    assert measures.gpu_busy_in_windows(trace, windows) == pytest.approx(expected, abs=1e-6)


def _steps_of_leaf_calls(scale: float, extra: float = 0.0) -> list[dict]:
    """Four steps, each an aten::add (holding a cudaLaunchKernel) and an aten::empty; every
    call ``scale`` times its usual length, the add's own part ``extra`` longer still."""
    events = []
    for n in range(4):
        t = 1_000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 900),
            complete_event("aten::empty", "cpu_op", t + 10, 4 * scale),
            complete_event("aten::add", "cpu_op", t + 100, 20 * scale + extra),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 105, 6 * scale),
            complete_event("cudaStreamIsCapturing", "cuda_runtime", t + 200, 1 * scale),
        ]
    return events


def test_host_speed_ratio_reads_the_leaf_calls_both_recordings_make(make_trace) -> None:
    fast = load_trace(make_trace(_steps_of_leaf_calls(1.0), name="fast.json"))
    slow = load_trace(make_trace(_steps_of_leaf_calls(1.6, extra=50), name="slow.json"))
    # aten::add holds a launch call: not a leaf, so its own extra time does not count.
    ratio, kinds = measures.host_speed_ratio(slow, fast)
    assert kinds == 3 and ratio == pytest.approx(1.6)
    assert measures.host_speed_ratio(fast, slow)[0] == pytest.approx(1 / 1.6)
    same = load_trace(make_trace(_steps_of_leaf_calls(1.0, extra=50), name="same.json"))
    assert measures.host_speed_ratio(same, fast)[0] == pytest.approx(1.0)
    # One kind of leaf call in common: no reading.
    few = [e for e in _steps_of_leaf_calls(1.0) if e["name"] in ("aten::empty", "ProfilerStep#0")]
    few_trace = load_trace(make_trace(few, name="few.json"))
    assert measures.host_speed_ratio(few_trace, fast) is None


def test_pieces_within_merges_overlapping_calls_and_cuts_them_to_the_window(make_trace) -> None:
    # Two threads' calls overlap ([0, 50) and [30, 80)); a third lies apart; the window
    # [10, 200) cuts the first, and a call wholly after it is left out.
    events = [
        complete_event("cudaFree", "cuda_runtime", 0, 50, tid=1),
        complete_event("cudaFree", "cuda_runtime", 30, 50, tid=2),
        complete_event("cudaFree", "cuda_runtime", 100, 20, tid=1),
        complete_event("cudaFree", "cuda_runtime", 300, 20, tid=1),
    ]
    trace = load_trace(make_trace(events))
    assert measures.pieces_within(trace.runtime_calls, 10, 200) == [(10.0, 80.0), (100.0, 120.0)]
    assert measures.pieces_within(trace.runtime_calls, 500, 600) == []


def _memory_event(ts: float, size: int, total: int | None = None, device_type: int = 1) -> dict:
    """A ``[memory]`` instant event; torch ~1.8-1.9 wrote no ``Total Allocated``."""
    args = {"Device Type": device_type, "Device Id": 0 if device_type else -1, "Bytes": size}
    if total is not None:
        args |= {"Total Allocated": total, "Total Reserved": 4 * 2**20}
    return {"ph": "i", "s": "t", "name": "[memory]", "pid": 429, "tid": 429, "ts": ts,
            "args": args}  # fmt: skip


def test_memory_peaks_read_the_allocators_totals_or_add_up_the_sizes(make_trace) -> None:
    steps = [
        complete_event("ProfilerStep#1", "user_annotation", 1000, 100),
        complete_event("ProfilerStep#2", "user_annotation", 1100, 100),
    ]
    written = [  # totals as torch >= 1.10 writes them: 1 MiB held before the recording
        _memory_event(1010, 2**20, 2 * 2**20), _memory_event(1120, 2**20, 3 * 2**20),
        _memory_event(1150, -2**20, 2 * 2**20), _memory_event(1160, 2**20, 3 * 2**20),
    ]  # fmt: skip
    (gpu,) = measures.memory_peaks(load_trace(make_trace([*steps, *written])))
    assert (gpu.device, gpu.events, gpu.from_recording_start) == ("GPU 0", 4, False)
    assert (gpu.peak_allocated_bytes, gpu.peak_at_us, gpu.peak_step) == (3 * 2**20, 120.0, 2)
    assert (gpu.peak_reserved_bytes, gpu.end_allocated_bytes) == (4 * 2**20, 3 * 2**20)
    sizes = [  # sizes only, as torch ~1.8 wrote them: added up from the recording's start
        _memory_event(1010, 2**20), _memory_event(1120, 2**20), _memory_event(1150, -2**20),
        _memory_event(1005, 64, device_type=0), _memory_event(1190, -128, device_type=0),
    ]  # fmt: skip
    gpu, cpu = measures.memory_peaks(load_trace(make_trace([*steps, *sizes], name="old.json")))
    assert gpu.from_recording_start and cpu.from_recording_start
    assert (gpu.peak_allocated_bytes, gpu.peak_at_us, gpu.end_allocated_bytes) == (
        2 * 2**20, 120.0, 2**20,
    )  # fmt: skip
    assert (cpu.device, cpu.peak_allocated_bytes, cpu.end_allocated_bytes) == ("CPU", 64, -64)
    assert cpu.peak_reserved_bytes is None and (cpu.peak_at_us, cpu.peak_step) == (5.0, 1)
