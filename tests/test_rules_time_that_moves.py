"""The two rules about time that moves, on H100 recordings where they fire and where they must
stay silent: ``intra-step-gap`` (the GPU idles inside a step) and ``kernel-variance`` (the same
kernel takes far longer in some steps).

The recordings (see provenance.json): ``4096_bf16_item-sync`` calls ``loss.item()`` in every
step; ``train_tiny_transformer_a40_buffer-request`` holds the one step of a 40-step training run in
which the profiler's Activity Buffer Request landed; ``4096_bf16_shared-gpu_a30`` is a GEMM per
step while another process runs GEMMs on the same GPU.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from conftest import complete_event, fixture_document, fixture_events, write_trace

from profiling_utils import Finding, diagnose, load_trace, measures
from profiling_utils.rules import RULES, Facts, get_rule, gpu_lane

ITEM_SYNC = "4096_bf16_item-sync"
TRAIN_BUFFER = "train_tiny_transformer_a40_buffer-request"
SHARED_GPU = "4096_bf16_shared-gpu_a30"
STEADY = "4096_bf16_warm_eager_w0a20"
FOREIGN = Path(__file__).parent / "fixtures" / "foreign"
FEATURES = Path(__file__).parent / "fixtures" / "features"


def findings(path: str | Path, rule_id: str) -> list[Finding]:
    if isinstance(path, str):
        path = Path(__file__).parent / "fixtures" / "gpu" / f"{path}.json.gz"
    return diagnose(path, select=[rule_id])


def altered(tmp_path: Path, name: str, change: Any) -> Path:
    """A copy of a recording with ``change(events)`` applied, written as .json.gz."""
    document = fixture_document(name)
    change(document["traceEvents"])
    return write_trace(tmp_path / f"{name}_altered.json.gz", document)


def _step_window(events: list[dict], step: int) -> dict:
    return next(e for e in events if e.get("ph") == "X" and e["name"] == f"ProfilerStep#{step}")


def _gemm_and_add(events: list[dict], step: int) -> tuple[dict, dict]:
    """The GEMM and add kernels launched in ProfilerStep#step (of a matmul_add recording)."""
    window = _step_window(events, step)
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and window["ts"] <= e["ts"] <= window["ts"] + window["dur"]
        and "correlation" in e.get("args", {})
    }
    kernels = [
        e for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] in launches
    ]
    by_api = {launches[k["args"]["correlation"]]["name"]: k for k in kernels}
    return by_api["cuLaunchKernelEx"], by_api["cudaLaunchKernel"]


def _delay_gpu_work(events: list[dict], after_ts: float, delay: float) -> None:
    for event in events:
        if event.get("pid") == 0 and event.get("ph") == "X" and event["ts"] >= after_ts:
            event["ts"] += delay


# -- intra-step-gap ----------------------------------------------------------------------------


def test_a_host_sync_in_every_step_is_reported_once_with_its_sync() -> None:
    (finding,) = findings(ITEM_SYNC, "intra-step-gap")
    evidence = finding.evidence
    assert evidence["cause"] == "host sync"
    assert evidence["steps_with_gap"] == list(range(2, 22)) and evidence["steps"] == 20
    assert evidence["before"]["name"].startswith("Memcpy DtoH")
    assert evidence["sync"]["name"] == "cudaStreamSynchronize"
    assert evidence["sync_op"]["name"] == "aten::item"
    # The next launch came after the GPU ran dry, and the stretch is long against the
    # trace's own launch latency.
    assert evidence["launched_after_idle_us"] > 0
    latency = Facts(load_trace(Path(__file__).parent / "fixtures/gpu" / f"{ITEM_SYNC}.json.gz"))
    assert evidence["median_gap_us"] >= 5 * latency.launch_latency_us
    assert evidence["launch_latency_us"] == pytest.approx(latency.launch_latency_us, abs=1e-3)
    by_step = dict(evidence["gap_by_step_us"])
    assert sorted(by_step) == evidence["steps_with_gap"]
    assert by_step[evidence["step"]] == evidence["gap_us"] == max(by_step.values())
    assert statistics.median(by_step.values()) == pytest.approx(evidence["median_gap_us"], abs=1e-3)


def test_a_sync_that_waited_little_of_a_long_stretch_is_not_its_cause(tmp_path: Path) -> None:
    # item-sync with 20 ms of host work after step 5's sync returned: the sync waited a few
    # hundred µs, the host then held the GPU idle a hundred times longer (CUDA-graph trees'
    # bookkeeping after a capture, say). That stretch is host time, not the sync's.
    (plain,) = findings(ITEM_SYNC, "intra-step-gap")
    assert 5 in plain.evidence["steps_with_gap"]

    def host_work_after_the_sync(events: list[dict]) -> None:
        window = _step_window(events, 5)
        end = window["ts"] + window["dur"]
        sync = max(
            (
                e
                for e in events
                if e.get("ph") == "X"
                and e["name"] == "cudaStreamSynchronize"
                and window["ts"] <= e["ts"] < end
            ),
            key=lambda e: e["ts"],
        )
        returned = sync["ts"] + sync["dur"]
        for event in events:
            if event.get("ph") != "X":
                continue
            if event["ts"] >= returned:
                event["ts"] += 20_000.0
            elif event["ts"] + event.get("dur", 0) > returned:
                event["dur"] += 20_000.0

    found = findings(altered(tmp_path, ITEM_SYNC, host_work_after_the_sync), "intra-step-gap")
    (synced,) = [f for f in found if f.evidence["cause"] == "host sync"]
    assert 5 not in synced.evidence["steps_with_gap"]
    assert len(synced.evidence["steps_with_gap"]) == len(plain.evidence["steps_with_gap"]) - 1


def test_a_far_longer_stretch_of_another_cause_is_named_beside_the_host_syncs(
    tmp_path: Path,
) -> None:
    # item-sync with the GPU work of step 5 from its second kernel on held back 5 ms: the
    # host syncs' gaps are tens of µs, that stretch a hundred times longer.
    (plain,) = findings(ITEM_SYNC, "intra-step-gap")
    assert "not one of them" not in plain.message

    def hold_back(events: list[dict]) -> None:
        window = _step_window(events, 5)
        kernels = sorted(
            (e for e in events if e.get("cat") == "kernel" and e["ts"] > window["ts"]),
            key=lambda e: e["ts"],
        )
        _delay_gpu_work(events, kernels[1]["ts"], 5000.0)

    found = findings(altered(tmp_path, ITEM_SYNC, hold_back), "intra-step-gap")
    # The held-back stretch is also reported as a one-off of its own.
    assert found[0].evidence["cause"] == "host sync"
    assert {f.evidence["cause"] for f in found[1:]} == {"held back"}
    finding = found[0]
    assert finding.evidence["longest_idle_step"] == 5
    assert finding.evidence["longest_idle_us"] > 5000
    assert "The GPU's longest idle stretch in a step is not one of them: " in finding.message
    # What the trace shows of it: its next work was queued before the GPU went idle.
    assert re.search(
        r"not one of them: \d+\.\d µs between activities of ProfilerStep#5, with its next "
        r"work queued \d+\.\d µs before the GPU went idle: something outside the trace held "
        r"the GPU back\.$",
        finding.message,
    )

    # Another thread waits in a device-wide sync through the whole stretch: said, not "no
    # host sync" (a 16-rank recording's 64 ms stretch lay inside a 158 ms one).
    def hold_back_under_a_sync(events: list[dict]) -> None:
        hold_back(events)
        window = _step_window(events, 5)
        sync = dict(window, name="cudaDeviceSynchronize", cat="cuda_runtime", tid=999)
        sync["dur"] = window["dur"] + 6000.0
        sync["args"] = {}
        events.append(sync)

    (finding, *_) = findings(altered(tmp_path, ITEM_SYNC, hold_back_under_a_sync), "intra-step-gap")
    assert finding.message.endswith(
        f"held the GPU back; cudaDeviceSynchronize on CPU thread 999 "
        f"({_step_window(fixture_document(ITEM_SYNC)['traceEvents'], 5)['dur'] + 6000.0:.1f} "
        "µs) waited through all of it."
    )


def test_a_far_longer_stretch_before_a_steps_first_gpu_work_is_named_beside_the_host_syncs(
    tmp_path: Path,
) -> None:
    # item-sync with 20 ms of host work (a data loader's fetch) at the start of step 5, before
    # anything is launched: the GPU's longest idle stretch lies before the step's first
    # activity, not between two of them (the ResNet traces of torch 1.8: 89 µs after a sync,
    # 57 ms waiting for the next batch).
    def fetch_first(events: list[dict]) -> None:
        window = _step_window(events, 5)
        start = window["ts"]
        for event in events:
            if event.get("ts", 0) > start:  # the rest of the recording, its end included
                event["ts"] += 20_000.0
            elif (
                event.get("cat") in ("user_annotation", "Trace")
                and event["ts"] + event["dur"] > start
            ):
                event["dur"] += 20_000.0  # the step, and the span of the whole recording
        events.append(dict(window, name="enumerate(DataLoader)#_DataLoaderIter.__next__",
                           ts=start + 1.0, dur=19_990.0, args={}))  # fmt: skip

    (finding, *_) = findings(altered(tmp_path, ITEM_SYNC, fetch_first), "intra-step-gap")
    evidence = finding.evidence
    assert evidence["cause"] == "host sync" and evidence["longest_idle_before_first_step"] == 5
    assert evidence["longest_idle_before_first_us"] > 20_000 > 100 * evidence["gap_us"]
    assert evidence["longest_idle_us"] < 1_000  # between activities: nothing as long
    assert finding.message.endswith(
        f"The GPU's longest idle stretch in a step is not one of them: "
        f"{evidence['longest_idle_before_first_us']:.1f} µs in ProfilerStep#5 before the "
        "step's first GPU activity, while the host prepared it (data-loader and dead-window "
        "read that time)."
    )


def copy_then_launch_steps(
    call: str, copy: str, returns_after_copy: bool, gemm_us: float = 100.0
) -> list[dict]:
    """Three steps: a kernel of ``gemm_us`` from 12 µs, a copy whose call ``call`` (from 20 µs)
    launches ``copy`` (returning after the copy ends, or at once), and 200 µs after the copy
    a second kernel."""
    events = []
    for n in range(3):
        t, c = 10_000.0 * n, 10 * n
        copy_end = t + 130
        call_end = copy_end + 3 if returns_after_copy else t + 25
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 400),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 5, 5, correlation=c + 1),
            complete_event("gemm", "kernel", t + 12, gemm_us, pid=0, tid=7, correlation=c + 1),
            complete_event(call, "cuda_runtime", t + 20, call_end - t - 20, correlation=c + 2),
            complete_event(copy, "gpu_memcpy", t + 120, 10, pid=0, tid=7, correlation=c + 2),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 320, 5, correlation=c + 3),
            complete_event("add", "kernel", t + 330, 5, pid=0, tid=7, correlation=c + 3),
        ]
    return events


@pytest.mark.parametrize(
    ("call", "copy", "wording"),
    [
        ("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", "a copy to pageable memory"),
        ("cudaMemcpyAsync", "Memcpy HtoD (Pageable -> Device)", "a copy from pageable memory"),
        ("hipMemcpyWithStream", "Memcpy HtoD (Host -> Device)", "hipMemcpyWithStream until"),
    ],
)
def test_a_blocking_copy_is_a_host_sync(
    make_trace: Any, call: str, copy: str, wording: str
) -> None:
    # The copy to or from pageable memory (and ROCm's hipMemcpyWithStream, PyTorch's blocking
    # copy there) returns once the GPU has run dry: the CPU waited, as in a sync call.
    path = make_trace(copy_then_launch_steps(call, copy, returns_after_copy=True))
    (finding,) = findings(path, "intra-step-gap")
    assert finding.evidence["cause"] == "host sync"
    assert finding.evidence["sync"]["name"] == call
    assert finding.evidence["steps_with_gap"] == [0, 1, 2]
    assert finding.evidence["gap_us"] == pytest.approx(200.0)
    assert wording in finding.message


def test_a_blocking_copy_on_an_idle_gpu_is_no_host_sync(make_trace: Any) -> None:
    # The kernel before ends at 17 µs, before the copy's call begins: the call waits for its
    # own copy only, the GPU had already run dry, and the 200 µs after is CPU time (the kineto
    # ResNet traces' copies of each input batch).
    events = copy_then_launch_steps(
        "cudaMemcpyAsync", "Memcpy HtoD (Pageable -> Device)", True, gemm_us=5.0
    )
    path = make_trace(events)
    assert findings(path, "intra-step-gap") == []
    stretches = gpu_lane.idle_stretches(load_trace(path), 150.0)  # the 200 µs after the copy
    assert [idle.cause for idle in stretches] == ["CPU time"] * 3


def test_a_pinned_copy_that_returns_at_once_is_no_host_sync(make_trace: Any) -> None:
    # The same steps with a copy to pinned memory whose call returns at once: the 200 µs is
    # CPU time between launches, which the rule leaves to the CPU lane's rows.
    copy = "Memcpy DtoH (Device -> Pinned)"
    path = make_trace(copy_then_launch_steps("cudaMemcpyAsync", copy, returns_after_copy=False))
    assert findings(path, "intra-step-gap") == []
    stretches = gpu_lane.idle_stretches(load_trace(path), 100.0)
    assert [idle.cause for idle in stretches] == ["CPU time"] * 3


def test_a_sync_closing_each_step_leaves_the_gpu_idle_across_the_boundary() -> None:
    # A CUDA graph replayed per step, then .item(): the GPU runs dry while the CPU waits, and
    # idles until the next step's first launch, past the step's end. No step holds that
    # stretch between two of its own activities.
    path = FEATURES / "cuda_graph_replay_steps.json.gz"
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]]
    steps = sorted(
        (e for e in events if e.get("cat") == "user_annotation" and "ProfilerStep#" in e["name"]),
        key=lambda e: e["ts"],
    )
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    work: dict[int, list[dict]] = {}
    for event in events:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            call = launches[event["args"]["correlation"]]
            step = next(s for s in steps if s["ts"] <= call["ts"] < s["ts"] + s["dur"])
            work.setdefault(int(step["name"].split("#")[1]), []).append(event)
    numbers = sorted(work)
    idle = {
        n: min(e["ts"] for e in work[following]) - max(e["ts"] + e["dur"] for e in work[n])
        for n, following in pairwise(numbers)
    }
    (hit,) = diagnose(path, select=["intra-step-gap"])
    assert hit.evidence["cause"] == "host sync"
    assert hit.evidence["steps_with_gap"] == numbers[:-1]  # the last step has no next one
    assert hit.evidence["median_gap_us"] == pytest.approx(
        statistics.median(idle.values()), abs=1e-3
    )
    assert hit.evidence["sync"]["name"] == "cudaStreamSynchronize"
    assert hit.message.startswith(f"In {len(idle)} of {len(numbers)} steps the GPU idles after")
    # Its measure: one stretch per step boundary, given to the earlier step.
    gaps = measures.gpu_gaps_between_steps(load_trace(path))
    assert {gap.step: gap.gap_us for gap in gaps} == pytest.approx(idle, abs=1e-3)


def _graph_steps() -> dict:
    return json.loads(gzip.decompress((FEATURES / "cuda_graph_replay_steps.json.gz").read_bytes()))


def test_a_closing_sync_before_the_next_batch_is_fetched_is_left_to_data_loader(
    tmp_path: Path,
) -> None:
    # The same recording, with the next batch's fetch opening right after each sync
    # returns: the GPU's idle time there is the loader's, which data-loader reads.
    document = _graph_steps()
    events = document["traceEvents"]
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    for sync in [e for e in events if e.get("name") == "cudaStreamSynchronize"]:
        fetch = {"name": loader, "cat": "user_annotation", "dur": 5, "args": {}}
        events.append({**sync, **fetch, "ts": sync["ts"] + sync["dur"] + 1})
    path = write_trace(tmp_path / "loading.json.gz", document)
    assert diagnose(path, select=["intra-step-gap"]) == []


def test_a_closing_sync_in_one_step_of_five_is_no_habit(tmp_path: Path) -> None:
    # Only the first step's .item() kept its sync call: one boundary of four.
    document = _graph_steps()
    syncs = sorted(
        (e for e in document["traceEvents"] if e.get("name") == "cudaStreamSynchronize"),
        key=lambda e: e["ts"],
    )
    document["traceEvents"] = [e for e in document["traceEvents"] if e not in syncs[1:]]
    path = write_trace(tmp_path / "one_sync.json.gz", document)
    assert diagnose(path, select=["intra-step-gap"]) == []


def test_a_short_wait_at_the_end_of_each_step_is_no_finding() -> None:
    # loss.item() closes each training step too, but the GPU had finished: 15-25 µs of
    # return and launch, under the trace's floor.
    path = FEATURES / "all_options_mlp_train.json.gz"
    assert diagnose(path, select=["intra-step-gap"]) == []
    assert measures.gpu_gaps_between_steps(load_trace(path))  # the stretches are there


def test_a_host_sync_in_a_single_step_is_no_habit(make_trace: Any) -> None:
    # One step shows neither a habit of the code nor a one-off.
    events = copy_then_launch_steps("cudaMemcpy", "Memcpy DtoH (Device -> Pageable)", True)
    path = make_trace([e for e in events if e["ts"] < 10_000])
    assert findings(path, "intra-step-gap") == []
    (idle,) = gpu_lane.idle_stretches(load_trace(path), 100.0)
    assert idle.cause == "host sync"


def test_the_threshold_follows_the_traces_launch_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    # item-sync's gaps are tens of µs against a launch latency of about 5 µs. The floor is a
    # number of the trace's own launch latencies: raised just past the longest gap, as an AMD
    # trace's 18-21 µs launches would raise it, none of them counts.
    (finding,) = findings(ITEM_SYNC, "intra-step-gap")
    longest = max(gap for _, gap in finding.evidence["gap_by_step_us"])
    latencies = longest / finding.evidence["launch_latency_us"] + 0.5
    assert latencies > gpu_lane.GAP_MIN_LAUNCH_LATENCIES
    monkeypatch.setattr(gpu_lane, "GAP_MIN_LAUNCH_LATENCIES", latencies)
    assert findings(ITEM_SYNC, "intra-step-gap") == []


def _request_step(name: str) -> tuple[int, list[int]]:
    """The step holding the recording's Activity Buffer Request, and every step."""
    trace = load_trace(Path(__file__).parent / "fixtures/gpu" / f"{name}.json.gz")
    (request,) = [s for s in trace.overhead if s.name == "Activity Buffer Request"]
    return trace.step_of(request).number, [step.number for step in trace.steps]


def test_the_profilers_buffer_request_is_a_one_off_that_starves_the_gpu() -> None:
    (finding,) = findings(TRAIN_BUFFER, "intra-step-gap")
    evidence = finding.evidence
    step, steps = _request_step(TRAIN_BUFFER)
    assert len(steps) == 3
    assert (evidence["cause"], evidence["step"], evidence["steps_with_gap"]) == (
        "buffer request",
        step,
        [step],
    )
    request = evidence["request"]
    assert request["name"] == "Activity Buffer Request" and request["dur_us"] > 1000
    # The request held the CPU: the next work was launched after the GPU went idle, the idle
    # stretch covers the request, and it stands out against the other steps' longest idle.
    assert evidence["launched_after_idle_us"] > request["dur_us"]
    assert evidence["gap_us"] > request["dur_us"]
    assert (
        evidence["gap_us"] >= gpu_lane.GAP_REQUEST_RATIO * evidence["others_longest_median_us"] > 0
    )
    longest = dict(evidence["longest_idle_by_step_us"])
    assert sorted(longest) == steps and longest[step] == evidence["gap_us"]
    others = [longest[number] for number in steps if number != step]
    assert statistics.median(others) == pytest.approx(
        evidence["others_longest_median_us"], abs=1e-3
    )


def test_a_buffer_request_is_blamed_only_for_a_stretch_it_mostly_held(monkeypatch) -> None:
    # The request held the CPU thread for most of the time by which the next launch came
    # late; a cold step whose first calls take 20 ms around a 3 ms request is not the
    # profiler's (the CPU lane's rows read it).
    (finding,) = findings(TRAIN_BUFFER, "intra-step-gap")
    evidence = finding.evidence
    request, launch = evidence["request"], evidence["after_launch"]
    idle_from = evidence["before"]["start_us"] + evidence["before"]["dur_us"]
    held = min(request["start_us"] + request["dur_us"], launch["start_us"] + launch["dur_us"])
    held -= max(request["start_us"], idle_from)
    share = held / evidence["launched_after_idle_us"]
    assert share >= gpu_lane.GAP_REQUEST_MIN_SHARE
    monkeypatch.setattr(gpu_lane, "GAP_REQUEST_MIN_SHARE", share + 0.01)
    assert findings(TRAIN_BUFFER, "intra-step-gap") == []


def test_a_one_off_needs_other_steps_to_compare_with(tmp_path: Path) -> None:
    step, steps = _request_step(TRAIN_BUFFER)
    others = {f"ProfilerStep#{number}" for number in steps if number != step}

    def only_the_requests_step(events: list[dict]) -> None:
        events[:] = [e for e in events if e.get("name") not in others]

    path = altered(tmp_path, TRAIN_BUFFER, only_the_requests_step)
    assert [s.number for s in load_trace(path).steps] == [step]
    assert findings(path, "intra-step-gap") == []


def test_a_queued_kernel_that_waits_once_is_held_back(tmp_path: Path) -> None:
    def stall_step_7(events: list[dict]) -> None:
        _, add = _gemm_and_add(events, 7)
        _delay_gpu_work(events, add["ts"], 400.0)

    (finding,) = findings(altered(tmp_path, STEADY, stall_step_7), "intra-step-gap")
    evidence = finding.evidence
    assert (evidence["cause"], evidence["step"], evidence["steps_with_gap"]) == (
        "held back",
        7,
        [7],
    )
    assert evidence["gap_us"] > 400.0 and evidence["launched_after_idle_us"] < 0
    assert evidence["after_launch"]["name"] == "cudaLaunchKernel"


def test_a_stall_in_every_step_is_no_one_off(tmp_path: Path) -> None:
    def stall_every_step(events: list[dict]) -> None:
        adds = [_gemm_and_add(events, step)[1]["ts"] for step in range(20)]
        for ts in sorted(adds, reverse=True):
            _delay_gpu_work(events, ts, 400.0)

    assert findings(altered(tmp_path, STEADY, stall_every_step), "intra-step-gap") == []


def test_cpu_launch_time_in_every_step_is_left_to_overhead_bound() -> None:
    # 64x64: every idle stretch inside a step is the CPU getting to the next launch.
    name = "64_bf16_warm_eager"
    trace = load_trace(Path(__file__).parent / "fixtures/gpu" / f"{name}.json.gz")
    pairs = [
        (before, after)
        for step in trace.steps
        for before, after in pairwise(step.gpu_work)
        if after.start > before.end
    ]
    assert pairs and max(after.start - before.end for before, after in pairs) > 10
    assert all(trace.launch_of(after).end > before.end for before, after in pairs)
    assert findings(name, "intra-step-gap") == []
    assert diagnose(trace, select=["overhead-bound"])


def test_the_first_steps_cpu_time_is_left_to_cold_start() -> None:
    # Step 0 of the w0a3 run has an 83 µs gap, launched late: CPU time after the profiler's
    # start-up, which cold-start reports.
    name = "64_bf16_warm_eager_w0a3"
    gemm, add = _gemm_and_add(list(fixture_events(name)), 0)
    assert add["ts"] - (gemm["ts"] + gemm["dur"]) > 50
    assert findings(name, "intra-step-gap") == []
    assert findings(name, "cold-start")


@pytest.mark.parametrize(
    "path",
    [
        "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    ],
    ids=str,
)
def test_silent_on_the_amd_trace_and_a_cpu_only_one(path: str) -> None:
    assert findings(FOREIGN / path, "intra-step-gap") == []
    assert findings(FOREIGN / path, "kernel-variance") == []


def test_silent_without_gpu_work(make_trace: Any) -> None:
    events = [
        complete_event(f"ProfilerStep#{n}", "user_annotation", 1000.0 * n, 500) for n in (1, 2, 3)
    ] + [complete_event("aten::item", "cpu_op", 1000.0 * n + 10, 100) for n in (1, 2, 3)]
    path = make_trace(events, deviceProperties=None)
    assert diagnose(path, select=["intra-step-gap", "kernel-variance"]) == []


def _recording(name: str) -> Any:
    return load_trace(Path(__file__).parent / "fixtures/gpu" / f"{name}.json.gz")


def test_idle_stretches_read_as_the_rule_reads_them() -> None:
    trace = _recording(ITEM_SYNC)
    (finding,) = diagnose(trace, select=["intra-step-gap"])
    facts = Facts(trace)
    floor = max(gpu_lane.GAP_MIN_US, gpu_lane.GAP_MIN_LAUNCH_LATENCIES * facts.launch_latency_us)
    stretches = gpu_lane.idle_stretches(trace, floor)
    synced = [idle for idle in stretches if idle.cause == "host sync"]
    # The steps the rule reports are those of the stretches read as a host sync, and the
    # longest of them is the one its evidence names.
    assert sorted({idle.step for idle in synced}) == finding.evidence["steps_with_gap"]
    longest = max(synced, key=lambda idle: idle.gap_us)
    assert longest.gap_us == pytest.approx(finding.evidence["gap_us"], abs=1e-3)
    assert longest.sync is not None and longest.sync.name == "cudaStreamSynchronize"
    # Every stretch is time the GPU ran nothing, ended by a launch the trace holds; only a
    # host sync names a sync, and a stretch is held back exactly when its launch came before.
    for idle in gpu_lane.idle_stretches(trace):
        assert idle.gap_us > 0 and trace.launch_of(idle.after) is idle.launch
        assert (idle.sync is not None) == (idle.cause == "host sync")
        assert (idle.cause == "held back") == (idle.launched_late_us <= 0)
        assert idle.request is None  # no buffer request landed in this recording


def test_idle_stretches_name_the_buffer_request_and_plain_cpu_time() -> None:
    (finding,) = findings(TRAIN_BUFFER, "intra-step-gap")
    stretches = gpu_lane.idle_stretches(_recording(TRAIN_BUFFER))
    (during,) = [idle for idle in stretches if idle.cause == "buffer request"]
    assert during.request is not None and during.request.name == "Activity Buffer Request"
    assert (during.step, during.gap_us) == (
        finding.evidence["step"],
        pytest.approx(finding.evidence["gap_us"], abs=1e-3),
    )
    # An overhead-bound loop idles the GPU between launches in every step: CPU time, which
    # the rule leaves to the CPU lane's rows, and it reports nothing.
    overhead_bound = _recording("64_bf16_warm_eager")
    assert {idle.cause for idle in gpu_lane.idle_stretches(overhead_bound)} == {"CPU time"}
    assert diagnose(overhead_bound, select=["intra-step-gap"]) == []


def test_idle_stretches_of_a_cpu_only_trace_are_none() -> None:
    trace = load_trace(FOREIGN / "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert not trace.has_gpu and gpu_lane.idle_stretches(trace) == []


# -- kernel-variance ---------------------------------------------------------------------------


def test_a_process_sharing_the_gpu_slows_one_step_from_outside_the_trace() -> None:
    (finding,) = findings(SHARED_GPU, "kernel-variance")
    evidence = finding.evidence
    assert evidence["count"] == 30
    assert 0 < len(evidence["slow_steps"]) <= 30 / 3  # a few steps, while the other ran
    assert evidence["max_us"] > 3 * evidence["median_us"]
    assert evidence["max_us"] - evidence["median_us"] >= evidence["least_excess_us"]
    slowest = evidence["slow"][0]
    assert slowest["dur_us"] == evidence["max_us"] and slowest["step"] in evidence["slow_steps"]
    assert slowest["overlapping"] == []
    assert "outside the trace" in finding.message


def test_other_work_of_the_trace_is_named_when_it_overlapped(tmp_path: Path) -> None:
    def copy_on_a_side_stream(events: list[dict]) -> None:
        slow = max((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["dur"])
        events.append(
            complete_event(
                "Memcpy DtoD (Device -> Device)", "gpu_memcpy", slow["ts"] + 10, 500,
                pid=0, tid=13, correlation=999999, device=0, stream=13,
            )
        )  # fmt: skip

    (finding,) = findings(altered(tmp_path, SHARED_GPU, copy_on_a_side_stream), "kernel-variance")
    overlapping = finding.evidence["slow"][0]["overlapping"]
    assert [(row["name"], row["stream"]) for row in overlapping] == [
        ("Memcpy DtoD (Device -> Device)", 13)
    ]
    assert overlapping[0]["overlap_us"] == pytest.approx(500.0)
    assert "other work of this trace" in finding.message


def test_a_communication_kernels_spread_is_not_blamed_on_the_gpu(tmp_path: Path) -> None:
    def as_all_reduce(events: list[dict]) -> None:
        for event in events:
            if event.get("cat") == "kernel" and event["name"].startswith("nvjet"):
                event["name"] = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, ...)"

    path = altered(tmp_path, SHARED_GPU, as_all_reduce)
    assert load_trace(path).communication
    assert findings(path, "kernel-variance") == []


def test_one_slow_gemm_in_twenty(tmp_path: Path) -> None:
    def slow_step_5(events: list[dict]) -> None:
        gemm, _ = _gemm_and_add(events, 5)
        extra = 4 * gemm["dur"]
        _delay_gpu_work(events, gemm["ts"] + gemm["dur"], extra)
        gemm["dur"] += extra

    (finding,) = findings(altered(tmp_path, STEADY, slow_step_5), "kernel-variance")
    assert finding.evidence["slow_steps"] == [5]
    assert finding.evidence["max_us"] == pytest.approx(5 * finding.evidence["median_us"], 0.05)
    assert finding.evidence["count"] == 20


def test_silent_on_twenty_steady_h100_gemms() -> None:
    events = list(fixture_events(STEADY))
    durations = [_gemm_and_add(events, step)[0]["dur"] for step in range(20)]
    assert max(durations) / statistics.median(durations) < 1.1
    assert findings(STEADY, "kernel-variance") == []


def test_instances_from_one_step_only_are_not_compared(tmp_path: Path) -> None:
    def one_step(events: list[dict]) -> None:
        windows = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        first = min(windows, key=lambda e: e["ts"])
        last = max(windows, key=lambda e: e["ts"] + e["dur"])
        first["dur"] = last["ts"] + last["dur"] - first["ts"]
        events[:] = [e for e in events if e not in windows or e is first]

    path = altered(tmp_path, SHARED_GPU, one_step)
    assert len(load_trace(path).steps) == 1
    assert findings(path, "kernel-variance") == []


# -- the cheatsheet's links ----------------------------------------------------------------------


def test_every_rules_example_is_a_page_of_the_gallery() -> None:
    examples = Path(__file__).parents[1] / "examples"
    for rule in RULES:
        if rule.example is not None:
            page = examples / (rule.example.removeprefix("auto_examples/") + ".py")
            assert page.exists(), (rule.id, rule.example)
    assert (
        get_rule("intra-step-gap").example
        == "auto_examples/part1_matmul_add/plot_10_gaps_inside_a_step"
    )
    assert (
        get_rule("kernel-variance").example
        == "auto_examples/part1_matmul_add/plot_07_kernel_variance"
    )


def test_a_step_the_rules_leave_out_is_not_counted_among_the_host_sync_steps(
    make_trace: Any,
) -> None:
    # Four steps with a blocking copy each, the last step's end past the profiler's window:
    # the rules take three steps, and the finding counts the stretches of those three only.
    events = copy_then_launch_steps("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", True)
    fourth = [dict(e, ts=e["ts"] + 30_000.0) for e in events if e["ts"] < 10_000]
    fourth[0]["dur"] = 900_000  # ProfilerStep#0, renamed below: ends after the window
    fourth[0]["name"] = "ProfilerStep#3"
    for event in fourth[1:]:
        if "args" in event:
            event["args"] = {"correlation": event["args"]["correlation"] + 100}
    window = complete_event("PyTorch Profiler (0)", "Trace", 0, 40_500)
    (finding,) = findings(make_trace([window, *events, *fourth]), "intra-step-gap")
    assert finding.evidence["steps_with_gap"] == [0, 1, 2]
    assert finding.message.startswith("In 3 of 3 steps")
