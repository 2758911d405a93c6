"""``python -m profiling_utils summary``: every fixture answers, every bad input exits 2."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    DEVICE_PROPERTIES,
    FIXTURES,
    FOREIGN,
    complete_event,
    gpu_fixture,
    gpu_fixture_names,
    minimal_gpu_events,
    run_cli,
)

from profiling_utils import cli, diagnose, load_trace
from profiling_utils.comm import collectives, comm_overlap
from profiling_utils.measures import kernel_stats, step_times
from profiling_utils.rules.facts import Facts
from profiling_utils.tables import percent

SUMMARY_KEYS = {
    "file",
    "spans",
    "duration_us",
    "has_gpu",
    "gpu_work",
    "host_ops_recorded",
    "devices",
    "gpu_numbers_may_be_agent_ids",
    "cuda_runtime_version",
    "cuda_driver_version",
    "cupti_version",
    "hip_runtime_version",
    "hip_driver_version",
    "base_time_ns",
    "gpus_with_streams",
    "lanes",
    "steps",
    "unlaunched_gpu_work",
    "unrecorded_kernel_launches",
    "negative_durations",
    "gpu_work_before_launch",
    "other_step_lanes",
    "left_out_steps",
    "top_kernels",
    "compiler_kernels",
    "top_cpu_ops",
    "launch_apis",
    "planning_calls",
    "memory",
    "memory_peaks",
    "communication",
    "host_collectives",
    "compile",
    "overhead",
    "roofline",
}


def test_every_documented_key_is_in_the_module_docs() -> None:
    documented = set(re.findall(r"``(\w+)``", cli.__doc__))
    assert SUMMARY_KEYS <= documented


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_json_summary_of_every_fixture(capsys, name: str) -> None:
    path = gpu_fixture(name)
    status, out, err = run_cli(capsys, "summary", str(path), "--json")
    assert (status, err) == (0, "")
    summary = json.loads(out)
    assert set(summary) == SUMMARY_KEYS
    assert summary["memory_peaks"] == []  # recorded without profile_memory
    trace = load_trace(path)
    assert summary["file"] == str(path)
    assert summary["spans"] == len(trace.spans) and summary["has_gpu"]
    assert [s["step"] for s in summary["steps"]] == [s.number for s in trace.steps]
    assert [s["cpu_us"] for s in summary["steps"]] == [t.cpu_us for t in step_times(trace)]
    assert [k["name"] for k in summary["top_kernels"]] == [k.name for k in kernel_stats(trace)[:10]]
    assert sum(summary["launch_apis"].values()) == len(trace.kernels)
    assert [lane["label"] for lane in summary["lanes"]] == [lane.label for lane in trace.lanes]
    assert summary["devices"][0]["compute_capability"] == [9, 0]


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_text_summary_of_every_fixture(capsys, name: str) -> None:
    status, out, err = run_cli(capsys, "summary", str(gpu_fixture(name)))
    assert (status, err) == (0, "")
    assert "GPU 0: NVIDIA H100 80GB HBM3, 132 SMs, compute capability 9.0, 79.2 GiB" in out
    assert "CUDA runtime 13.0" in out
    for heading in ("Lanes", "Steps (µs)", "Top kernels", "Kernels by launch API", "torch.compile"):
        assert heading in out


def test_text_summary_names_what_each_run_shows(capsys) -> None:
    _, fp32, _ = run_cli(capsys, "summary", str(gpu_fixture("4096_fp32_warm_eager")))
    assert "cudaLaunchKernelExC" in fp32 and "planned with: cudaFuncGetAttributes x3" in fp32
    _, graph, _ = run_cli(
        capsys, "summary", str(gpu_fixture("64_bf16_warm_compile-reduce-overhead"))
    )
    assert "CUDA graph launches: 3" in graph and "DtoD" in graph
    _, w0a3, _ = run_cli(capsys, "summary", str(gpu_fixture("64_bf16_warm_eager_w0a3")))
    assert "Activity Buffer Request x1" in w0a3 and "CUPTI overhead" in w0a3


def test_text_lanes_say_what_busy_counts(capsys) -> None:
    # A CPU thread's busy time leaves its labels out: below its steps' sum, said under the
    # table (the JSON help says it; the text had not).
    path = str(gpu_fixture("64_bf16_warm_eager"))
    _, text, _ = run_cli(capsys, "summary", path)
    lanes = text.split("\nLanes\n", 1)[1].split("\n\n", 1)[0]
    assert "labels such as\n  ProfilerStep#N are not counted)" in lanes
    trace = load_trace(path)
    (thread,) = [lane for lane in trace.lanes if lane.kind == "cpu"]
    steps = sum(step.end - step.start for step in trace.steps)
    busy = json.loads(run_cli(capsys, "summary", "--json", path)[1])["lanes"][0]["busy_us"]
    assert busy < steps and f"{busy:,.1f} µs busy" in lanes and thread.label in lanes


def test_text_summary_counts_kernels_by_launch_api_and_names_the_runtime(
    capsys, make_trace
) -> None:
    # An MI250 trace (HIP): its graph launches are HIP's. A kernel whose launch call is not in
    # the trace is counted as such, not under an API called "unknown".
    mi250 = FOREIGN / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    _, out, _ = run_cli(capsys, "summary", str(mi250))
    assert "HIP graph launches: 0" in out and "CUDA graph" not in out
    _, cuda, _ = run_cli(capsys, "summary", str(gpu_fixture("64_bf16_warm_eager")))
    assert "CUDA graph launches: 0" in cuda
    # On another vendor's GPU (Intel's XPU), the line says what it counts.
    xpu = [
        complete_event("urEnqueueKernelLaunch", "xpu_runtime", 0, 10, correlation=1),
        complete_event("gemm_kernel", "kernel", 20, 5, pid=0, tid=0, correlation=1),
    ]
    intel_gpu = {"id": 0, "name": "Intel(R) Data Center GPU Max 1550", "maxComputeUnits": 448}
    _, intel, _ = run_cli(capsys, "summary", str(make_trace(xpu, deviceProperties=[intel_gpu])))
    assert "\n  graph launches (cudaGraphLaunch, hipGraphLaunch): 0\n" in intel
    unlinked = minimal_gpu_events()
    for event in unlinked:
        if event.get("cat") == "kernel":
            event["args"]["correlation"] = 99  # no call carries it
    _, text, _ = run_cli(capsys, "summary", str(make_trace(unlinked)))
    assert "Kernels by launch API: (launch not in the trace) x1" in text


def test_text_summary_steps_fit_the_page_and_memsets_carry_no_rate(capsys) -> None:
    _, out, _ = run_cli(capsys, "summary", str(gpu_fixture("train_tiny_transformer_a3")))
    lines = out.split("\n")
    table = lines[lines.index("Steps (µs)") + 1 : lines.index("Top kernels by total time (µs)")]
    assert len(table) == 1 + 3 + 6 + 1  # header, three steps, the legend, blank line
    assert all(len(line) <= 88 for line in table)
    assert table[4].startswith("  (CPU: the step's window.") and table[9].endswith("work.)")
    header, first = table[0].split(), table[1].split()
    assert header[:2] == ["step", "CPU"] and header[-2:] == ["gap", "max"]
    assert first[:2] == ["2", "24,463.4"] and first[3] == "94%"
    (memset,) = [line for line in lines if line.lstrip().startswith("memset")]
    (dtod,) = [line for line in lines if line.lstrip().startswith("DtoD")]
    assert "GB/s" not in memset and "from aten::sum x51" in memset
    assert "GB/s copied" in dtod


def test_top_limits_the_kernel_list(capsys) -> None:
    path = str(gpu_fixture("train_tiny_transformer_a3"))
    _, out, _ = run_cli(capsys, "summary", path, "--json", "--top", "3")
    assert len(json.loads(out)["top_kernels"]) == 3


def _steps_on_gpus(plan: dict[int, list[tuple[int, float, float]]]) -> list[dict[str, Any]]:
    """Steps of 1000 µs, step ``n`` launching one kernel ``(device, start offset, µs)`` per
    entry of ``plan[n]``; device -1 is the profiler's overhead row."""
    events = []
    for n, kernels in plan.items():
        t = 2000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1000))
        for i, (device, offset, dur) in enumerate(kernels):
            correlation = 100 * n + i
            events += [
                complete_event("aten::mm", "cpu_op", t + 10 + 40 * i, 30),
                complete_event("cudaLaunchKernel", "cuda_runtime", t + 15 + 40 * i, 5,
                               correlation=correlation),
                complete_event(f"k{device}", "kernel", t + offset, dur, pid=device, tid=7,
                               correlation=correlation, device=device),
            ]  # fmt: skip
    return events


def test_each_gpus_busy_time_counts_the_steps_it_sits_out(capsys, make_trace) -> None:
    # GPU 1 works in two steps of five: the steps it sat out had been left out of its median
    # (400.0, as busy as GPU 0); the devices are listed in order, whichever worked first.
    props = [dict(DEVICE_PROPERTIES[0], id=i) for i in range(3)]
    plan = {
        1: [(2, 100, 400), (1, 500, 400)],
        2: [(0, 100, 400), (2, 500, 300)],
        3: [(0, 100, 400), (2, 500, 300)],
        4: [(0, 100, 400), (1, 500, 400), (2, 600, 300)],
        5: [(0, 100, 400), (2, 500, 300)],
    }
    path = str(make_trace(_steps_on_gpus(plan), deviceProperties=props))
    _, out, _ = run_cli(capsys, "summary", "--json", path)
    rows = json.loads(out)["steps"]
    assert [row["gpu_busy_by_gpu_us"] for row in rows[:2]] == [
        {"0": 0.0, "1": 400.0, "2": 400.0},
        {"0": 400.0, "1": 0.0, "2": 300.0},
    ]
    _, text, _ = run_cli(capsys, "summary", path)
    assert "the median over the steps: GPU 0 400.0, GPU 1 0.0, GPU 2 300.0." in " ".join(
        text.split()
    )


def test_work_off_the_gpu_lanes_is_no_second_gpu(capsys, make_trace) -> None:
    # A kernel on the profiler's overhead row (pid -1) beside GPU 0's: one GPU, not "GPU None".
    plan = {n: [(0, 100, 400), (-1, 600, 100)] for n in (1, 2, 3)}
    _, out, _ = run_cli(capsys, "summary", "--json", str(make_trace(_steps_on_gpus(plan))))
    assert {row["gpu_busy_by_gpu_us"] is None for row in json.loads(out)["steps"]} == {True}


def test_rocm_versions_are_read_as_hip_writes_them(capsys, make_trace) -> None:
    # rocprofiler-sdk's Kineto (ROCm 7) writes HIP's versions, which summary had left out.
    path = make_trace(
        [complete_event("ProfilerStep#0", "user_annotation", 0, 10)],
        cuda_runtime_version=None,
        cuda_driver_version=None,
        cupti_version=None,
        hip_runtime_version=70125424,
        hip_driver_version=60443483,
    )
    _, out, _ = run_cli(capsys, "summary", str(path), "--json")
    summary = json.loads(out)
    assert (summary["hip_runtime_version"], summary["hip_driver_version"]) == (
        "7.1.25424",
        "6.4.43483",
    )
    assert summary["cuda_runtime_version"] is None
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "  HIP runtime 7.1.25424, driver 6.4.43483\n" in text
    assert "CUDA runtime" not in text


def test_cpu_only_trace(capsys, make_trace) -> None:
    path = make_trace(
        [complete_event("ProfilerStep#0", "user_annotation", 0, 10)],
        deviceProperties=None,
        cuda_runtime_version=None,
        cuda_driver_version=None,
        cupti_version=None,
    )
    status, out, _ = run_cli(capsys, "summary", str(path), "--json")
    summary = json.loads(out)
    assert status == 0 and not summary["has_gpu"] and summary["devices"] == []
    assert summary["steps"][0]["gpu_idle_fraction"] is None
    status, text, _ = run_cli(capsys, "summary", str(path))
    assert status == 0 and "no GPU work (CPU-only trace)" in text
    # The step's row has no GPU busy time, idle share or gap count to show, not 0.0 and 0.
    (row,) = [line.split() for line in text.splitlines() if line.strip().startswith("0 ")]
    assert row == ["0", "10.0", "-", "-", "-", "-", "-", "-", "-", "-"]
    # NCCL collectives on the host say the run used GPUs, whose work was not recorded.
    nccl = complete_event("nccl:all_reduce", "user_annotation", 2, 5)
    path = make_trace([complete_event("ProfilerStep#0", "user_annotation", 0, 10), nccl],
                      name="nccl.json", deviceProperties=None)  # fmt: skip
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "no GPU work recorded, though the host ran NCCL collectives" in text
    assert "CPU-only" not in text


def mtia_like(make_trace):
    """Host ops, and an MTIA accelerator's own events on its device's lanes (categories the
    model does not read), as in HTA's mtia_inference_trace."""
    events = [
        complete_event("aten::add", "cpu_op", 0, 10),
        complete_event("event_wait", "mtia_ccp_events", 2, 5, pid=17, tid=3774),
        complete_event("event_wait", "mtia_ccp_events", 8, 5, pid=17, tid=3774),
        complete_event("runtime_call", "mtia_runtime", 3, 4, pid=17, tid=3536),
    ]
    properties = [{"id": 17, "name": "ARTEMIS", "runtimeMajorVersion": 1}]
    return make_trace(events, deviceProperties=properties)


def test_an_accelerator_whose_events_are_not_read_is_not_called_cpu_only(
    capsys, make_trace
) -> None:
    path = mtia_like(make_trace)
    unread = "no CUDA/HIP work read; the accelerator's own 3 events (2 lanes) are not analysed"
    status, text, _ = run_cli(capsys, "summary", str(path))
    assert status == 0 and "CPU-only" not in text and "GPU 17" not in text
    # Its runtime calls (mtia_runtime) say what it is, where its name (ARTEMIS) does not.
    assert "  device 17: ARTEMIS, MTIA accelerator (Meta)" in text.splitlines()
    assert load_trace(path).devices[0].vendor == "meta"
    # Too long for one line beside the extent: a line of its own.
    lines = text.splitlines()
    extent = lines.index("  4 spans over 13.0 µs")
    assert lines[extent + 1] == f"  {unread}"
    status, out, _ = run_cli(capsys, "summary", str(path), "--json")
    summary = json.loads(out)
    assert status == 0 and not summary["has_gpu"] and summary["gpu_work"] == unread
    status, text, _ = run_cli(capsys, "diagnose", str(path))
    assert status == 0 and text.splitlines()[2] == f"  {unread}"
    status, out, _ = run_cli(capsys, "summary", str(path), str(path), "--json")
    ranks = json.loads(out)["cross_rank"]["ranks"]
    assert status == 0 and [r["content"] for r in ranks] == ["accelerator not read"]  # read once


def test_a_recording_of_cuptis_range_profiler_is_said_so(capsys, make_trace) -> None:
    # HTA's cupti_profiler trace: performance counters collected, one cuda_profiler_range per
    # launch instead of its kernel, on a machine of eight GPUs, none of them at work.
    events = [complete_event("aten::add", "cpu_op", 0, 100)]
    for k in range(3):
        events += [
            complete_event("cudaLaunchKernel", "cuda_runtime", 10 + 30 * k, 20, correlation=k),
            complete_event("add_kernel", "cuda_profiler_range", 12 + 30 * k, 50, pid=0, tid=0),
        ]
    devices = [dict(DEVICE_PROPERTIES[0], id=n) for n in range(8)]
    path = make_trace(events, deviceProperties=devices)
    trace = load_trace(path)
    assert [span.name for span in trace.counter_ranges] == ["add_kernel"] * 3
    said = (
        "no kernel, copy or memset recorded: CUPTI's range profiler (performance counters) "
        "recorded 3 kernel ranges instead, and replays each kernel to count, inside its launch "
        "call"
    )
    status, out, _ = run_cli(capsys, "summary", str(path), "--json")
    summary = json.loads(out)
    assert summary["gpu_work"] == said
    assert summary["unrecorded_kernel_launches"] == {
        "count": 3, "kernel_launches": 3, "counter_ranges": 3,
    }  # fmt: skip
    status, text, _ = run_cli(capsys, "summary", str(path))
    assert status == 0 and f"  {said}" in text.splitlines()
    assert "a trace cut short" not in text
    assert "(CUPTI's range profiler recorded 3 kernel ranges instead" in " ".join(text.split())
    status, text, _ = run_cli(capsys, "diagnose", str(path))
    # Eight GPUs listed, none at work: not "8×", which would read as eight at work.
    assert status == 0 and text.splitlines()[1].startswith(f"  8 listed: {trace.devices[0].name}")


def test_an_accelerator_without_runtime_calls_to_say_what_it_is_is_of_unknown_vendor(
    capsys, make_trace
) -> None:
    events = [
        complete_event("aten::add", "cpu_op", 0, 10),
        complete_event("event_wait", "npu_events", 2, 5, pid=17, tid=3774),
    ]
    path = make_trace(events, deviceProperties=[{"id": 17, "name": "ARTEMIS"}])
    status, text, _ = run_cli(capsys, "summary", str(path))
    assert status == 0 and "  device 17: ARTEMIS, accelerator of unknown vendor" in text


def test_a_listed_gpu_with_host_events_only_is_said_so(capsys, make_trace) -> None:
    # Profiled with ProfilerActivity.CPU alone on a GPU machine: deviceProperties, no GPU lane.
    path = make_trace([complete_event("aten::add", "cpu_op", 0, 10)])
    said = "no GPU work recorded: the trace lists a GPU but holds host events only"
    status, text, _ = run_cli(capsys, "summary", str(path))
    lines = text.splitlines()
    assert status == 0 and "CPU-only" not in text
    assert lines[lines.index("  1 spans over 10.0 µs") + 1] == f"  {said}"
    assert lines[1].startswith("  GPU 0: NVIDIA")
    status, text, _ = run_cli(capsys, "diagnose", str(path))
    assert status == 0 and f"  {said}" in text.splitlines()
    status, out, _ = run_cli(capsys, "summary", str(path), str(path), "--json")
    assert {r["content"] for r in json.loads(out)["cross_rank"]["ranks"]} == {"CPU only"}


@pytest.mark.parametrize("labels", [["CPU", "GPU 0", "GPU 1"], ["CPU"]])
def test_a_torch_18_trace_labelling_gpu_processes_lists_a_gpu(
    capsys, make_trace, labels: list[str]
) -> None:
    # torch ~1.8 wrote no deviceProperties, but a process_labels event for each GPU of the
    # machine (a solangii/gpu-practice trace: "GPU 0" to "GPU 7", CPU activities only).
    events = [complete_event("aten::add", "Operator", 0, 10, pid=386, tid="1757620032")]
    for pid, label in enumerate(labels):
        events.append(
            {"name": "process_labels", "ph": "M", "ts": 0, "pid": pid, "args": {"labels": label}}
        )
    path = make_trace({"schemaVersion": 1, "traceEvents": events})
    status, text, _ = run_cli(capsys, "summary", str(path))
    listed = "no GPU work recorded: the trace lists a GPU but holds host events only"
    assert status == 0
    if len(labels) > 1:
        assert f"  {listed}" in text.splitlines() and "CPU-only" not in text
    else:
        assert text.splitlines()[1] == "  1 spans over 10.0 µs; no GPU work (CPU-only trace)"
        assert listed not in text


def test_a_recording_of_the_profilers_own_events_only_is_said_so(capsys, make_trace) -> None:
    # What export_chrome_trace writes after a schedule's active steps ended (recorded so on
    # an H100, torch 2.11): the profiler's span, its stop's synchronisation, a buffer request.
    events = [
        complete_event(
            "PyTorch Profiler (0)", "Trace", 0, 527, pid="Spans", tid="PyTorch Profiler"
        ),
        complete_event("cudaDeviceSynchronize", "cuda_runtime", 169, 13, correlation=3346),
        complete_event("Activity Buffer Request", "overhead", 183, 320, pid=-1, tid=0),
    ]
    path = make_trace(events)
    said = (
        "no op, label or GPU work recorded, only PyTorch Profiler (0), cudaDeviceSynchronize, "
        "Activity Buffer Request (a profiler stopped outside its active steps writes such a "
        "trace; with a schedule, export the trace from on_trace_ready)"
    )
    status, out, _ = run_cli(capsys, "summary", str(path), "--json")
    summary = json.loads(out)
    assert status == 0 and summary["gpu_work"] == said and not summary["host_ops_recorded"]
    status, text, _ = run_cli(capsys, "diagnose", str(path))
    lines = text.splitlines()
    # The one line says it: no word of steps the rules would read.
    assert status == 0 and lines[2] == f"  {said}" and "ProfilerStep" not in text
    # A host op is enough for the trace to be a CPU recording like any other.
    path = make_trace([*events, complete_event("aten::add", "cpu_op", 50, 10)])
    status, out, _ = run_cli(capsys, "summary", str(path), "--json")
    summary = json.loads(out)
    assert summary["host_ops_recorded"] and not summary["gpu_work"].startswith("no op, label")


def test_gpu_work_without_host_ops_names_the_missing_cpu_activity(capsys, make_trace) -> None:
    # ProfilerActivity.CUDA alone: runtime calls and their kernels, no op, label or step.
    events = [
        complete_event("cudaLaunchKernel", "cuda_runtime", 0, 5, correlation=1),
        complete_event("k", "kernel", 10, 20, pid=0, tid=7, correlation=1, device=0, stream=7),
    ]
    said = (
        "no op or label on the host, only runtime calls (as in a recording without "
        "ProfilerActivity.CPU)"
    )
    path = make_trace(events)
    status, text, _ = run_cli(capsys, "summary", str(path))
    lines = text.splitlines()
    assert status == 0 and lines[lines.index("  no ProfilerStep#N annotations") + 1] == f"  {said}"
    status, text, _ = run_cli(capsys, "diagnose", str(path))
    assert status == 0 and f"  {said}: no steps, and no op to name for a launch" in text
    # With an op on the host, neither line.
    path = make_trace([complete_event("aten::mm", "cpu_op", 0, 8), *events])
    for command in ("summary", "diagnose"):
        status, text, _ = run_cli(capsys, command, str(path))
        assert status == 0 and "ProfilerActivity.CPU" not in text


def test_launch_calls_whose_gpu_records_are_missing_are_counted(capsys, make_trace) -> None:
    # The CPU side recorded two launches and a copy; CUPTI delivered none of their activities.
    events = [
        complete_event("aten::mm", "cpu_op", 0, 40),
        complete_event("cudaGetDevice", "cuda_runtime", 1, 1, correlation=1),
        complete_event("cudaLaunchKernel", "cuda_runtime", 5, 5, correlation=2),
        complete_event("cudaMemcpyAsync", "cuda_runtime", 15, 5, correlation=3),
        complete_event("cuLaunchKernel", "cuda_driver", 25, 5, correlation=4),
    ]
    path = make_trace(events)
    said = (
        "no GPU work recorded, though 3 calls launched kernels or copied or set memory: their "
        "GPU activities are missing from the trace"
    )
    for command in ("summary", "diagnose"):
        status, text, _ = run_cli(capsys, command, str(path))
        assert status == 0 and f"  {said}" in text.splitlines() and "host events" not in text


def test_gpu_lanes_without_kernels_are_named_for_what_they_hold(capsys, make_trace) -> None:
    # Labels projected onto a GPU lane whose kernels were not recorded (CUPTI's range
    # profiler's ranges are said for what they are: the test below).
    ranges = [
        complete_event(f"k{i}", "gpu_user_annotation", i * 10, 5, pid=0, tid=7) for i in range(3)
    ]
    path = make_trace([complete_event("aten::mm", "cpu_op", 0, 40), *ranges])
    said = (
        "no kernel, copy or memset recorded; "
        "the GPU lanes hold 3 other events (gpu_user_annotation)"
    )
    status, text, _ = run_cli(capsys, "summary", str(path))
    assert status == 0 and f"  {said}" in text.splitlines() and "host events only" not in text
    status, text, _ = run_cli(capsys, "diagnose", str(path))
    assert status == 0 and f"  {said}" in text.splitlines()


def test_empty_trace_is_not_called_cpu_only(capsys, make_trace) -> None:
    path = make_trace([], deviceProperties=None)
    status, text, _ = run_cli(capsys, "summary", str(path))
    assert status == 0 and "0 spans over 0.0 µs; no events" in text
    assert "CPU-only" not in text


def test_top_cpu_ops_count_self_time_as_key_averages_does(capsys, make_trace) -> None:
    # outer 0-100 holds inner 10-40 (which holds leaf 15-20) and a runtime call 50-60.
    path = make_trace(
        [
            complete_event("outer", "cpu_op", 0, 100),
            complete_event("inner", "cpu_op", 10, 30),
            complete_event("leaf", "cpu_op", 15, 5),
            complete_event("cudaLaunchKernel", "cuda_runtime", 50, 10),
            complete_event("inner", "cpu_op", 200, 8),
        ]
    )
    status, out, _ = run_cli(capsys, "summary", str(path), "--json")
    ops = {op["name"]: op for op in json.loads(out)["top_cpu_ops"]}
    assert status == 0
    assert ops["outer"] == {"name": "outer", "calls": 1, "self_us": 60.0, "total_us": 100.0}
    assert ops["inner"] == {"name": "inner", "calls": 2, "self_us": 25.0 + 8.0, "total_us": 38.0}
    assert ops["leaf"]["self_us"] == 5.0
    assert [op["name"] for op in json.loads(out)["top_cpu_ops"]] == ["outer", "inner", "leaf"]


@pytest.mark.parametrize("with_stack", [False, True])
def test_top_cpu_ops_match_key_averages_of_the_same_run(tmp_path, with_stack: bool) -> None:
    """Profile a small training loop on the CPU and hold every op's calls, self time and total
    time to what torch's own ``key_averages()`` says about the same run: the summary's table
    and the rows the rules read. With ``with_stack`` the trace holds Python frames inside
    ops too (a custom ``autograd.Function`` runs Python in its forward and backward), which
    are the op's children here as in ``key_averages()`` (torch 2.13; torch 2.11 left them
    out of its tree, so its self times of such ops include their Python)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from profiling_utils.measures import op_stats
    from profiling_utils.rules.facts import Facts

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # noqa: ANN001, ANN205
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):  # noqa: ANN001, ANN205
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    inputs = torch.randn(16, 64)
    with profile(activities=[ProfilerActivity.CPU], with_stack=with_stack) as prof:
        for _ in range(3):
            Square.apply(model(inputs)).sum().backward()
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    expected = {
        e.key: (e.count, e.self_cpu_time_total, e.cpu_time_total)
        for e in prof.key_averages()
        if e.key.startswith(("aten::", "autograd::", "Square"))
    }
    trace = load_trace(path)
    assert any(span.cat == "python_function" for span in trace.spans) == with_stack
    ours = {s.name: (s.calls, s.self_us, s.total_us) for s in op_stats(trace)}
    rows = {name: (r.calls, r.self_us) for name, r in Facts(trace).rows.items()}
    assert "aten::sum" in expected  # calls itself: key_averages folds the inner call
    assert {"Square", "SquareBackward"} <= set(expected)
    assert set(expected) <= set(ours)
    for name, (calls, self_us, total_us) in expected.items():
        assert ours[name][0] == rows[name][0] == calls, name
        assert ours[name][1] == pytest.approx(self_us, abs=0.01), name
        assert rows[name][1] == pytest.approx(self_us, abs=0.01), name
        assert ours[name][2] == pytest.approx(total_us, abs=0.01), name


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_cpu_op_self_times_add_up_to_the_ops_time_outside_other_ops(name: str) -> None:
    """Self times never go negative, and ops' self times sum to no more than the time some
    op is running on a thread."""
    from profiling_utils.measures import op_stats

    trace = load_trace(gpu_fixture(name))
    stats = op_stats(trace)
    assert all(s.self_us >= 0 and s.self_us <= s.total_us + 1e-6 for s in stats)
    assert sum(s.calls for s in stats) <= len(trace.cpu_ops)  # less the folded calls
    top_level = sum(
        op.dur for op in trace.cpu_ops if not any(a.cat == "cpu_op" for a in trace.ancestors(op))
    )
    assert sum(s.self_us for s in stats) <= top_level + 1e-6


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    good = json.dumps({"traceEvents": minimal_gpu_events()}).encode()
    files = {
        "empty": b"",
        "not_json": b"this is not json",
        "truncated_json": good[: len(good) // 2],
        "truncated_gzip": gzip.compress(good)[:40],
        "list": b"[1, 2, 3]",
        "no_trace_events": b'{"schemaVersion": 1}',
        "string_ts": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": "1", "dur": 1}]}',
        "nan_ts": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1}]}',
    }
    paths = {}
    for name, data in files.items():
        path = tmp / f"{name}.json"
        path.write_bytes(data)
        paths[name] = path
    paths["missing"] = tmp / "missing.json"
    return paths


@pytest.mark.parametrize(
    "case",
    [
        "empty",
        "not_json",
        "truncated_json",
        "truncated_gzip",
        "list",
        "no_trace_events",
        "string_ts",
        "nan_ts",
        "missing",
    ],
)
@pytest.mark.parametrize("as_json", [False, True])
def test_bad_input_prints_one_line_and_exits_2(capsys, tmp_path, case: str, as_json) -> None:
    path = _bad_inputs(tmp_path)[case]
    status, out, err = run_cli(capsys, "summary", str(path), *(["--json"] if as_json else []))
    assert status == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1
    assert err.startswith(f"error: {path}: ")


def test_module_entry_point(tmp_path) -> None:
    good = subprocess.run(
        [
            sys.executable,
            "-m",
            "profiling_utils",
            "summary",
            str(gpu_fixture("64_bf16_warm_eager")),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert good.returncode == 0 and "GPU 0 stream 7" in good.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    result = subprocess.run(
        [sys.executable, "-m", "profiling_utils", "summary", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"error: {bad}: JSON is cut short (the file looks truncated)\n"


# A finalizer on each trace that is built: it prints when the trace is freed.
_WATCH_TRACES = """
import runpy, sys, weakref
import profiling_utils.trace as model
build = model.Trace.__init__
def watched(self, raw):
    build(self, raw)
    weakref.finalize(self, print, "trace freed", file=sys.stderr, flush=True)
model.Trace.__init__ = watched
"""
_RUN_THE_COMMAND = """
sys.argv = ["profiling_utils", *sys.argv[1:]]
runpy.run_module("profiling_utils", run_name="__main__", alter_sys=True)
print("not reached: the command ends the process", file=sys.stderr)
"""


@pytest.mark.parametrize(
    "command", [["diagnose", "--json"], ["diagnose"], ["summary"], ["compare", "--json"]]
)
def test_the_command_exits_without_freeing_its_trace(command: list[str]) -> None:
    """Freeing a large trace object by object costs about 0.07 s per 100 MB of trace:
    ``python -m profiling_utils`` keeps its traces and ends the process without tearing the
    interpreter down."""
    trace = str(gpu_fixture("64_bf16_warm_eager"))
    traces = [str(gpu_fixture("64_bf16_warm_compile")), trace] if "compare" in command else [trace]
    result = subprocess.run(
        [sys.executable, "-c", _WATCH_TRACES + _RUN_THE_COMMAND, *command, *traces],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.strip()
    # The watch itself: a trace let go is reported.
    let_go = subprocess.run(
        [sys.executable, "-c", _WATCH_TRACES + "model.load_trace(sys.argv[1])", trace],
        capture_output=True,
        text=True,
        check=False,
    )
    assert let_go.stderr == "trace freed\n"


def test_usage_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main([])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        cli.main(["summary", "--help"])
    assert info.value.code == 0
    assert "top_kernels" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--json", "summary", "t.json"],
            "summary: error: unrecognized arguments: --json; "
            "--json goes after the command's name: summary --json ...",
        ),
        (
            ["diagnose", "--top", "3", "t.json"],
            "diagnose: error: unrecognized arguments: "
            "--top; --top is an option of summary, not of diagnose",
        ),
        (
            ["compare", "a.json", "b.json", "c.json"],
            "compare: error: unrecognized arguments: "
            "c.json; compare takes two paths, BASELINE and TRACE, files or directories",
        ),
        (["summary", "t.json", "--bogus"], "summary: error: unrecognized arguments: --bogus\n"),
    ],
)
def test_arguments_a_command_does_not_take_are_named_under_its_usage(
    capsys, argv: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith(f"usage: {cli._program_name()} {argv[argv[0] == '--json']} ")
    assert said in err


def test_summarize_matches_the_model(make_trace) -> None:
    trace = load_trace(make_trace(minimal_gpu_events()))
    summary = cli.summarize(trace)
    (step,) = summary["steps"]
    assert step["dead_window_us"] == pytest.approx(5.0)
    assert step["lane_offset_us"] == pytest.approx(20.0)
    assert (step["gpu_gap_count"], step["gpu_gap_max_us"]) == (1, pytest.approx(5.0))
    assert summary["planning_calls"] == {"cudaFuncGetAttributes": 1}
    assert summary["memory"] == [
        {
            "kind": "DtoD",
            "count": 1,
            "total_bytes": 4096,
            "bandwidth_gb_s": pytest.approx(2.048),
            "ops": {"aten::copy_": 1},
            "host_memory": {},
        }
    ]


def test_a_long_recordings_step_table_shows_its_first_and_last_steps(capsys, make_trace) -> None:
    events = []
    for k in range(100):
        events.append(complete_event(f"ProfilerStep#{k}", "user_annotation", 100.0 * k, 90))
        events.append(complete_event("aten::add", "cpu_op", 100.0 * k + 5, 10))
    path = str(make_trace(events))
    status, text, _ = run_cli(capsys, "summary", path)
    lines = text.splitlines()
    head = lines.index("Steps (µs)") + 2
    shown = [line.split()[0] for line in lines[head : head + 26]]
    assert status == 0 and shown == [*map(str, range(20)), "...", *map(str, range(95, 100))]
    assert lines[head + 20] == "    ... 75 more steps (--json lists every step)"
    status, out, _ = run_cli(capsys, "summary", path, "--json")
    assert [step["step"] for step in json.loads(out)["steps"]] == list(range(100))
    # Sixty steps or fewer: every one.
    path = str(make_trace(events[: 2 * 60], name="sixty.json"))
    status, text, _ = run_cli(capsys, "summary", path)
    assert "more steps" not in text and "\n     59 " in text


def test_copies_a_graph_replays_are_said_to_come_from_the_replay(make_trace) -> None:
    # A captured graph's memset runs at each cudaGraphLaunch: no op issued it on its own.
    events = [complete_event("aten::copy_", "cpu_op", 0, 10)]
    events += [
        complete_event("cudaMemcpyAsync", "cuda_runtime", 2, 5, correlation=1),
        complete_event(
            "Memcpy DtoD (Device -> Device)",
            "gpu_memcpy",
            10,
            2,
            pid=0,
            tid=7,
            correlation=1,
            bytes=4096,
        ),
        complete_event("cudaGraphLaunch", "cuda_runtime", 20, 5, correlation=2),
        complete_event(
            "Memset (Device)", "gpu_memset", 30, 1, pid=0, tid=7, correlation=2, bytes=512
        ),
        complete_event(
            "Memset (Device)", "gpu_memset", 40, 1, pid=0, tid=7, correlation=3, bytes=512
        ),
    ]
    memory = cli.summarize(load_trace(make_trace(events)))["memory"]
    assert [(m["kind"], m["ops"]) for m in memory] == [
        ("DtoD", {"aten::copy_": 1}),
        ("memset", {"(replayed by a graph launch)": 1, "(launch not in the trace)": 1}),
    ]


def test_the_text_summary_gives_the_achieved_rates_and_the_peak_they_are_held_to(capsys) -> None:
    path = str(gpu_fixture("train_tiny_transformer_a3"))
    _, out, _ = run_cli(capsys, "summary", path, "--json")
    (first, *_) = [g for g in json.loads(out)["roofline"]["groups"] if g["flops"] is not None]
    _, text, _ = run_cli(capsys, "summary", path)
    section = text.split("Achieved rates of the ops with recorded shapes (roofline)\n", 1)[1]
    section = section.split("\n\n", 1)[0]
    row = next(line for line in section.splitlines() if line.lstrip().startswith(first["name"]))
    assert f"{first['calls']:,}" in row.split() and f"{first['gb_s']:,.1f}" in row
    assert f"{percent(first['peak_share'])} of [1]" in row
    assert "  [1] 3,350 GB/s, the H100 SXM5 80 GB's HBM3 bandwidth peak" in section
    # The JSON gives the peaks as numbers too, the share held to the one the bound names.
    assert (first["bound"], first["peak_gb_s"]) == ("memory", 3350.0)
    assert first["peak_tflops"] > 0
    assert first["peak_share"] == pytest.approx(first["gb_s"] / first["peak_gb_s"])
    # Without shapes recorded, it says so.
    _, text, _ = run_cli(capsys, "summary", str(gpu_fixture("64_bf16_warm_eager")))
    assert "(roofline)\n  none: the operators record no input shapes" in text


def test_the_kernel_table_says_what_its_spread_is_of(capsys) -> None:
    _, text, _ = run_cli(capsys, "summary", str(gpu_fixture("64_bf16_warm_eager")))
    table = text.split("Top kernels by total time (µs)\n", 1)[1].split("\n\n", 1)[0]
    assert "(spread: (max - min) / median of all the name's calls, which may run on several" in (
        table
    )
    assert max(map(len, table.splitlines())) <= 100


def test_a_kinds_copy_rate_weighs_each_copy_by_its_bytes(capsys, make_trace) -> None:
    # A data loader's batch: one large image copy and two label copies of a few bytes, whose
    # rate their fixed cost sets. A median of the three rates would be a label's.
    events = minimal_gpu_events()
    (copy,) = [e for e in events if e.get("cat") == "gpu_memcpy"]
    (call,) = [e for e in events if e.get("name") == "cudaMemcpyAsync"]
    for n, (size, start) in enumerate([(256, 88.0), (256, 91.0)], start=1):
        correlation = 100 + n
        events += [
            {**call, "ts": call["ts"] + 2 * n, "dur": 1, "args": {"correlation": correlation}},
            {**copy, "ts": 1000.0 + start, "dur": 1,
             "args": {**copy["args"], "correlation": correlation, "bytes": size}},
        ]  # fmt: skip
    copy["args"]["bytes"] = 40_960  # 20.48 GB/s over its 2 µs
    path = make_trace(events)
    (memory,) = cli.summarize(load_trace(path))["memory"]
    assert memory["count"] == 3
    assert memory["bandwidth_gb_s"] == pytest.approx((40_960 + 512) / 4e-6 / 1e9)
    assert cli.main(["summary", str(path)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "DtoD" in line]
    assert f"{memory['bandwidth_gb_s']:,.2f} GB/s copied" in line


def test_copies_without_a_recorded_size_are_not_called_0_bytes(capsys, make_trace) -> None:
    # ROCm traces write no "bytes" on their copies: the size is unknown, not zero.
    events = minimal_gpu_events()
    for event in events:
        if event.get("cat") == "gpu_memcpy":
            del event["args"]["bytes"], event["args"]["memory bandwidth (GB/s)"]
    path = make_trace(events)
    (memory,) = cli.summarize(load_trace(path))["memory"]
    assert memory["count"] == 1
    assert memory["total_bytes"] is None and memory["bandwidth_gb_s"] is None
    assert cli.main(["summary", str(path)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "DtoD" in line]
    assert line.split() == "DtoD x1 size not recorded, from aten::copy_ x1".split()


def test_footprint_comes_from_an_instance_whose_launch_is_in_the_trace(capsys, make_trace) -> None:
    # A ROCm trace that starts mid-run: the first instance's launch call was not recorded,
    # the second's was. ROCm writes grid and block on the launch call only.
    events = [
        complete_event("gemm", "kernel", 2, 5, pid=2, tid=0, correlation=1),
        complete_event("aten::mm", "cpu_op", 10, 20),
        complete_event(
            "hipLaunchKernel", "cuda_runtime", 12, 3, correlation=2,
            grid=[3, 1, 1], block=[128, 1, 1],
        ),
        complete_event("gemm", "kernel", 20, 5, pid=2, tid=0, correlation=2),
    ]  # fmt: skip
    status, out, _ = run_cli(capsys, "summary", str(make_trace(events)), "--json")
    (gemm,) = json.loads(out)["top_kernels"]
    assert status == 0 and gemm["count"] == 2
    assert (gemm["footprint"]["grid"], gemm["footprint"]["block"]) == ([3, 1, 1], [128, 1, 1])


def test_summary_reports_communication_apart(capsys) -> None:
    # Rank 0 of a 2-GPU all-reduce run recorded on H200s: ten all-reduces, part of each
    # hidden behind compute kernels on another stream.
    path = FIXTURES / "nccl" / "overlapped" / "rank0.json.gz"
    trace = load_trace(path)
    communication = cli.summarize(trace)["communication"]
    found = collectives(trace)
    total = comm_overlap(trace).total
    assert communication["kernels"] == len(trace.communication) == len(found) == 10
    # By operation and message size: the 32 MiB gradient's all_reduce and the 4 KiB loss's.
    rows = communication["by_op"]
    assert {(row["op"], row["message_bytes"], row["count"]) for row in rows} == {
        ("all_reduce", 32 * 2**20, 5),
        ("all_reduce", 4 * 2**10, 5),
    }
    for row in rows:
        same = [c for c in found if c.bytes == row["message_bytes"]]
        assert row["total_bytes"] == sum(c.bytes for c in same)
        assert row["total_us"] == pytest.approx(sum(c.duration_us for c in same))
    assert rows[0]["total_us"] >= rows[1]["total_us"]
    assert communication["communication_us"] == pytest.approx(total.communication_us)
    assert communication["exposed_us"] + communication["overlapped_us"] == pytest.approx(
        communication["communication_us"]
    )
    assert 0 < communication["overlap_fraction"] < 1
    assert cli.main(["summary", str(path)]) == 0
    text = capsys.readouterr().out
    section = text.split("\nCommunication (", 1)[1].split("\n\n", 1)[0].splitlines()
    share = f"{100 * communication['overlap_fraction']:.0f}%"
    assert section[1].startswith(f"  10 kernel(s) over {communication['communication_us']:,.1f} µs")
    assert f"compute kernels run beside {share} of it" in section[1]
    assert section[2].split()[:3] == ["operation", "message", "count"]
    assert section[3].split()[:4] == ["all_reduce", "32", "MiB", "5"]
    assert section[4].split()[:4] == ["all_reduce", "4", "KiB", "5"]


def test_summary_without_collectives_says_none(capsys, make_trace) -> None:
    path = make_trace(minimal_gpu_events())
    assert cli.summarize(load_trace(path))["communication"] is None
    assert cli.main(["summary", str(path)]) == 0
    assert "\nCommunication (collective kernels" in (out := capsys.readouterr().out)
    assert out.split("\nCommunication (", 1)[1].splitlines()[1] == "  none"


def test_a_step_ending_after_the_recording_window_is_marked(capsys, make_trace) -> None:
    # The HTA Triton example's shape: the profiler's window (category Trace) ends at 1,000
    # µs; step 2's annotation ends 13 s later, its end never recorded.
    events = [
        complete_event("PyTorch Profiler (0)", "Trace", 0, 1000, pid="Spans", tid="Profiler"),
        complete_event("ProfilerStep#1", "user_annotation", 10, 400),
        complete_event("aten::add", "cpu_op", 20, 50),
        complete_event("ProfilerStep#2", "user_annotation", 410, 13_000_000),
        complete_event("aten::add", "cpu_op", 420, 50),
    ]
    path = make_trace(events)
    status, out, _ = run_cli(capsys, "summary", "--json", str(path))
    assert status == 0
    summary = json.loads(out)
    assert [(s["step"], s["end_recorded"]) for s in summary["steps"]] == [(1, True), (2, False)]
    # The trace's extent ends with the recording, not 13 s later with step 2's written end.
    assert summary["duration_us"] == 1000.0
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "step 2 ends after the profiler's recording window" in text
    assert "5 spans over 1,000.0 µs" in text
    assert [step.number for step in Facts(load_trace(path)).steps] == [1]


def test_a_recording_span_without_a_duration_says_nothing_of_where_the_window_ends(
    make_trace,
) -> None:
    # The profiler's span written without its dur: read as 0 µs, it would end the window at
    # its start, before every step, and every step's end would read as not recorded.
    events = [
        complete_event("PyTorch Profiler (0)", "Trace", 0, 1000, pid="Spans", tid="Profiler"),
        complete_event("ProfilerStep#1", "user_annotation", 10, 400),
        complete_event("ProfilerStep#2", "user_annotation", 410, 400),
    ]
    del events[0]["dur"]
    trace = load_trace(make_trace(events))
    assert trace.recording_end_us is None
    assert all(map(trace.end_recorded, trace.steps)) and len(trace.steps) == 2
    assert [step.number for step in Facts(trace).steps] == [1, 2]


def test_collectives_on_the_cpu_are_listed(capsys) -> None:
    # HTA's CPU-only rank: two threads each run five gloo:all_reduce ranges.
    path = FOREIGN / "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    _, out, _ = run_cli(capsys, "summary", "--json", str(path))
    data = json.loads(out)
    assert data["communication"] is None
    (row,) = data["host_collectives"]
    assert (row["name"], row["count"], row["threads"]) == ("gloo:all_reduce", 10, 2)
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "  no collective kernels\n  on the CPU (Gloo): gloo:all_reduce x10 (" in text
    assert " µs summed over 2 threads)" in text
    # A thread running a Gloo collective is busy: each runs its five, one after another.
    trace = load_trace(path)
    for lane in data["lanes"]:
        ranges = [s for s in trace.find("gloo:all_reduce") if s.lane.tid == lane["tid"]]
        if ranges:
            assert lane["busy_us"] == pytest.approx(sum(s.dur for s in ranges))
    _, out, _ = run_cli(capsys, "summary", "--json", str(gpu_fixture("64_bf16_warm_eager")))
    assert json.loads(out)["host_collectives"] == []


def test_gpu_work_without_its_launch_is_reported_apart(make_trace, capsys) -> None:
    # Three 1,000 µs steps, each launching a 5 µs kernel; a 300 µs kernel in step 1 has no
    # launch call in the trace (its launch was dropped, or another process's).
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1_000),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 10, 5, correlation=n + 1),
            complete_event("k", "kernel", t + 20, 5, pid=0, tid=7, correlation=n + 1),
        ]
    events.append(complete_event("orphan", "kernel", 10_100, 300, pid=0, tid=7, correlation=99))
    path = make_trace(events)
    _, out, _ = run_cli(capsys, "summary", "--json", str(path))
    data = json.loads(out)
    assert data["unlaunched_gpu_work"] == {"count": 1, "busy_us": 300.0}
    assert [s["gpu_busy_us"] for s in data["steps"]] == [5.0, 5.0, 5.0]
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "1 GPU activity (300.0 µs) has no launch call in the trace: no step counts it" in text
    (finding,) = diagnose(path, select=["overhead-bound"])
    assert finding.evidence["median_step"] == 1
    assert finding.evidence["median_step_unlaunched_gpu_us"] == 300.0
    assert "another 300.0 µs of GPU work ran inside the step" in finding.message


def test_a_trace_without_steps_says_when_kernel_launches_lack_their_records(
    make_trace, capsys
) -> None:
    # Three launches, one kernel recorded (the profiler's buffer was full): GPU busy 10 µs of
    # the 100 µs the script ran reads as overhead-bound, but two thirds of the work is missing.
    events = [complete_event("aten::add", "cpu_op", 0, 100)]
    for n in range(3):
        events.append(complete_event("cudaLaunchKernel", "cuda_runtime", 10 + 20 * n, 5,
                                     correlation=n + 1))  # fmt: skip
    events.append(complete_event("add_kernel", "kernel", 20, 10, pid=0, tid=7, correlation=1))
    path = make_trace(events)
    status, out, _ = run_cli(capsys, "summary", "--json", str(path))
    assert json.loads(out)["unrecorded_kernel_launches"] == {
        "count": 2, "kernel_launches": 3, "counter_ranges": 0,
    }  # fmt: skip
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "2 of the trace's 3 kernel launches have no GPU record" in text
    assert diagnose(path, select=["overhead-bound", "compute-bound"]) == []
    events.append(complete_event("add_kernel", "kernel", 40, 10, pid=0, tid=7, correlation=2))
    events.append(complete_event("add_kernel", "kernel", 60, 10, pid=0, tid=7, correlation=3))
    whole = make_trace(events, name="whole.json")
    assert json.loads(run_cli(capsys, "summary", "--json", str(whole))[1])[
        "unrecorded_kernel_launches"
    ] == {"count": 0, "kernel_launches": None, "counter_ranges": 0}


def test_gpu_work_before_its_launch_says_the_clocks_disagree(make_trace, capsys) -> None:
    # A kernel 12 µs before the call that launched it (ROCm's clock inversion): impossible,
    # so the clocks disagree. The H100 recording has none.
    events = [
        complete_event("aten::add", "cpu_op", 0, 100),
        complete_event("hipLaunchKernel", "cuda_runtime", 30, 5, correlation=1),
        complete_event("add_kernel", "kernel", 18, 10, pid=2, tid=0, correlation=1),
    ]
    path = make_trace(events, deviceProperties=None)
    status, out, _ = run_cli(capsys, "summary", "--json", str(path))
    assert json.loads(out)["gpu_work_before_launch"] == {"count": 1, "max_us": 12.0}
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "1 GPU activities start before the call that launched them, by up to 12.0 µs" in text
    _, text, _ = run_cli(capsys, "diagnose", str(path))
    assert "1 GPU activities start before their launch call (by up to 12.0 µs)" in text
    recorded = cli.summarize(load_trace(gpu_fixture("4096_bf16_item-sync")))
    assert recorded["gpu_work_before_launch"] == {"count": 0, "max_us": None}


def test_negative_durations_are_counted_and_said(make_trace, capsys) -> None:
    # An old Kineto's event without a recorded end: read, and said, in both commands.
    events = [
        complete_event("aten::add", "cpu_op", 0, 100),
        complete_event("cudaLaunchKernel", "cuda_runtime", 30, -4433858951.0, correlation=1),
        complete_event("add_kernel", "kernel", 40, 10, pid=0, tid=7, correlation=1),
    ]
    path = str(make_trace(events))
    status, out, _ = run_cli(capsys, "summary", "--json", path)
    assert status == 0 and json.loads(out)["negative_durations"] == 1
    _, text, _ = run_cli(capsys, "summary", path)
    assert "1 event with a negative dur (an end the profiler did not record" in text
    _, text, _ = run_cli(capsys, "diagnose", path)
    assert "1 event(s) with a negative dur (an end the profiler did not record) read as 0" in text
    recorded = cli.summarize(load_trace(gpu_fixture("4096_bf16_item-sync")))
    assert recorded["negative_durations"] == 0


def test_a_file_of_two_processes_reads_one_processs_steps(make_trace, capsys) -> None:
    # Two processes, each with two steps launching a kernel on its own GPU: the steps are one
    # process's, with its own GPU work only, and the other process's are named as left out.
    events = []
    for pid, device, dur in ((100, 0, 500.0), (200, 1, 100.0)):
        for n in (1, 2):
            t = 1_000.0 * n + pid / 10
            c = pid + n
            events += [
                complete_event(f"ProfilerStep#{n}", "user_annotation", t, 900, pid=pid, tid=pid),
                complete_event("cudaLaunchKernel", "cuda_runtime", t + 50, 5, pid=pid, tid=pid,
                               correlation=c),
                complete_event("k", "kernel", t + 60, dur, pid=device, tid=7, correlation=c),
            ]  # fmt: skip
    path = make_trace(events)
    trace = load_trace(path)
    assert [step.number for step in trace.steps] == [1, 2]
    assert {step.span.pid for step in trace.steps} == {100}
    assert [len(step.gpu_work) for step in trace.steps] == [1, 1]
    assert [lane.pid for lane in trace.other_step_lanes] == [200]
    # step_of agrees: the other process's spans and kernels belong to no step.
    assert {trace.step_of(k) is not None for k in trace.kernels if k.lane.device == 1} == {False}
    assert [trace.step_of(k).number for k in trace.kernels if k.lane.device == 0] == [1, 2]
    launches = trace.find("cudaLaunchKernel")
    assert [None if (s := trace.step_of(c)) is None else s.number for c in launches] == [
        1,
        None,
        2,
        None,
    ]
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "steps of one thread only; those on CPU thread 200 are left out" in text


def test_top_takes_one_or_more(capsys) -> None:
    path = str(gpu_fixture("64_bf16_warm_eager"))
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, "summary", "--top", "0", path)
    assert exit_.value.code == 2
    assert "argument --top: must be 1 or more, not 0" in capsys.readouterr().err
    status, out, _ = run_cli(capsys, "summary", "--json", "--top", "1", path)
    assert status == 0 and len(json.loads(out)["top_kernels"]) == 1


def launches_with_records_lost(launches: int, last_step_kept: int) -> list[dict[str, Any]]:
    """Three steps of ``launches`` kernel launches each; of the last step's, only the first
    ``last_step_kept`` have their kernel's GPU record (a trace cut short)."""
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 50 * launches))
        for k in range(launches):
            c = 100 * n + k
            start = t + 10 + 50 * k
            events.append(
                complete_event("cudaLaunchKernel", "cuda_runtime", start, 5, correlation=c)
            )
            if n < 2 or k < last_step_kept:
                events.append(
                    complete_event("k", "kernel", start + 10, 30, pid=0, tid=7, correlation=c)
                )
    return events


def test_a_step_whose_gpu_records_are_missing_is_marked_and_left_out(make_trace, capsys) -> None:
    # The GPU records of the last step's ten launches stop after two: its GPU figures are a
    # lower bound, and the rules leave it out.
    path = make_trace(launches_with_records_lost(10, 2))
    _, out, _ = run_cli(capsys, "summary", "--json", str(path))
    steps = json.loads(out)["steps"]
    assert [s["kernel_launches_without_gpu_record"] for s in steps] == [0, 0, 8]
    assert [s["kernel_launches"] for s in steps] == [None, None, 10]
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "step 2: 8 of its 10 kernel launches have no GPU record" in text
    assert "and diagnose's rules leave it out while other steps are whole" in text
    assert [step.number for step in Facts(load_trace(path)).steps] == [0, 1]
    assert [s["read_by_rules"] for s in steps] == [True, True, False]


def test_a_step_missing_one_gpu_record_in_twenty_is_still_read(make_trace, capsys) -> None:
    # One launch of twenty lost its record: the step's GPU figures are a lower bound, but by
    # at most a twentieth, and every rule reads it.
    path = make_trace(launches_with_records_lost(20, 19))
    _, out, _ = run_cli(capsys, "summary", "--json", str(path))
    steps = json.loads(out)["steps"]
    assert [(s["kernel_launches_without_gpu_record"], s["read_by_rules"]) for s in steps] == [
        (0, True),
        (0, True),
        (1, True),
    ]
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "step 2: 1 of its 20 kernel launches have no GPU record" in text
    assert "leave it out" not in text


@pytest.mark.parametrize(
    ("name", "may_be"),
    [
        ("hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", True),  # pid 2, 4 GPUs
        ("tracelens__gemm_01_compute_few_tiles.json.gz", True),  # pid 2, no device list
        ("hta__timeline_analysis_sampled_rank-0.json.gz", False),  # NVIDIA
    ],
)
def test_rocm_gpu_numbers_are_said_to_be_perhaps_agent_ids(capsys, name: str, may_be: bool) -> None:
    path = FIXTURES / "foreign" / name
    assert cli.summarize(load_trace(path))["gpu_numbers_may_be_agent_ids"] is may_be
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert ("(ROCm numbers GPUs by HSA agent, CPU sockets first" in text) is may_be


def test_a_copy_of_a_few_bytes_prints_its_rate_as_under_the_digits(capsys) -> None:
    trace = Path(__file__).parent / "fixtures" / "features" / "side_stream_prefetch.json.gz"
    status, out, _ = run_cli(capsys, "summary", str(trace))
    (line,) = [line for line in out.splitlines() if line.lstrip().startswith("DtoH")]
    assert status == 0 and "16 B total, <0.01 GB/s copied" in line
    assert "0.00 GB/s" not in out


def test_a_gpu_with_a_copy_stream_says_how_long_its_streams_ran_at_once(capsys) -> None:
    # The next batch is copied on a side stream while the current one computes.
    trace = Path(__file__).parent / "fixtures" / "features" / "side_stream_prefetch.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    work = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    union, reached = 0.0, float("-inf")
    for start, end in work:
        if end > reached:
            union += end - max(start, reached)
            reached = end
    status, out, _ = run_cli(capsys, "summary", str(trace), "--json")
    (gpu,) = json.loads(out)["gpus_with_streams"]
    assert (gpu["device"], gpu["streams"]) == (0, 2)
    assert gpu["busy_us"] == pytest.approx(union, abs=0.01)
    assert gpu["concurrent_us"] == pytest.approx(gpu["streams_busy_us"] - union, abs=0.01)
    assert gpu["concurrent_us"] > 100  # the copies ran beside the compute
    status, out, _ = run_cli(capsys, "summary", str(trace))
    assert f"GPU 0, its 2 streams together: {union:,.1f} µs busy" in out


def test_memory_rows_say_which_host_memory_a_copy_used(capsys) -> None:
    # The side-stream batches come from pinned memory, as pin_memory() made them.
    trace = Path(__file__).parent / "fixtures" / "features" / "side_stream_prefetch.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    uploads = [e["name"] for e in events if e.get("name", "").startswith("Memcpy HtoD")]
    assert uploads and set(uploads) == {"Memcpy HtoD (Pinned -> Device)"}
    status, out, _ = run_cli(capsys, "summary", str(trace), "--json")
    rows = {row["kind"]: row for row in json.loads(out)["memory"]}
    assert rows["HtoD"]["host_memory"] == {"Pinned": len(uploads)}
    assert rows["DtoD"]["host_memory"] == {} and rows["memset"]["host_memory"] == {}
    status, out, _ = run_cli(capsys, "summary", str(trace))
    (line,) = [line for line in out.splitlines() if line.lstrip().startswith("HtoD")]
    assert f"host memory pinned x{len(uploads)}, from aten::copy_" in line


def test_a_gpu_lane_says_how_many_of_its_spans_are_gpu_work(capsys) -> None:
    # The CUDA event sync recording: stream 7 holds four kernels, a copy and a Stream Wait
    # Event (cuda_sync); its sync row three cuda_sync events. The tiny transformer's stream
    # holds its steps' labels (gpu_user_annotation) beside its work.
    def lanes(path: Path) -> tuple[dict[tuple[Any, Any], Counter[str]], list[dict[str, Any]]]:
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        by_lane: dict[tuple[Any, Any], Counter[str]] = {}
        for e in events:
            if e.get("ph") == "X":
                by_lane.setdefault((e["pid"], e["tid"]), Counter())[e.get("cat")] += 1
        _, out, _ = run_cli(capsys, "summary", "--json", str(path))
        return by_lane, json.loads(out)["lanes"]

    def work(counts: Counter[str]) -> int:
        return counts["kernel"] + counts["gpu_memcpy"] + counts["gpu_memset"]

    sync = FOREIGN / "hta__critical_path_cuda_event_sync_event_sync_trace.json.gz"
    by_lane, rows = lanes(sync)
    stream, sync_row = [row for row in rows if row["kind"] == "gpu"]
    counts = by_lane[stream["pid"], stream["tid"]]
    assert counts["cuda_sync"] == 1
    assert (stream["spans"], stream["activities"]) == (sum(counts.values()), work(counts)) == (6, 5)
    assert (sync_row["tid"], sync_row["spans"], sync_row["activities"]) == (-1, 3, 0)
    assert all(row["activities"] is None for row in rows if row["kind"] != "gpu")
    _, text, _ = run_cli(capsys, "summary", str(sync))
    assert (
        "6 spans          51.0 µs busy\n"
        "                                                5 of them kernels, copies or memsets"
    ) in text
    labelled = gpu_fixture("train_tiny_transformer_a3")
    by_lane, rows = lanes(labelled)
    (stream,) = [row for row in rows if row["kind"] == "gpu"]
    counts = by_lane[stream["pid"], stream["tid"]]
    assert counts["gpu_user_annotation"] > 0
    assert (stream["spans"], stream["activities"]) == (sum(counts.values()), work(counts))
    _, text, _ = run_cli(capsys, "summary", str(labelled))
    assert f"{work(counts):,} of them kernels, copies or memsets" in text
    # A lane of GPU work alone says nothing more (the TraceLens trace records no GPU label).
    _, text, _ = run_cli(
        capsys, "summary", str(FOREIGN / "tracelens__gemm_01_compute_few_tiles.json.gz")
    )
    assert "of them kernels" not in text


def test_a_step_the_rules_do_not_read_is_said_so_in_both_commands(capsys) -> None:
    # HTA's MI250 recording: ProfilerStep#2, the step that opens as the profiler stops,
    # lasts 49 µs with nothing inside it on its thread and no GPU work; step 1 holds the
    # training step.
    path = FOREIGN / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    (second,) = [e for e in events if e.get("name") == "ProfilerStep#2"]
    inside = [
        e
        for e in events
        if e.get("ph") == "X"
        and e is not second
        and e.get("tid") == second["tid"]
        and second["ts"] <= e["ts"] < second["ts"] + second["dur"]
    ]
    assert inside == []
    _, out, _ = run_cli(capsys, "summary", "--json", str(path))
    assert [(s["step"], s["read_by_rules"]) for s in json.loads(out)["steps"]] == [
        (1, True),
        (2, False),
    ]
    _, text, _ = run_cli(capsys, "summary", str(path))
    assert "step 2 holds no span on its thread and launched no GPU work, while other" in text
    _, text, _ = run_cli(capsys, "diagnose", str(path))
    assert "; 2 profiler steps (1 read by the rules: summary says why the other is not);" in text
    _, text, _ = run_cli(capsys, "diagnose", str(gpu_fixture("64_bf16_warm_eager")))
    assert "; 3 profiler steps; " in text
