"""The cheatsheet rules on the recorded H100 traces (and, where no recording shows a pattern,
on recordings altered to show it), the registry, diagnose() and the cheatsheet page.

Every rule has a test where it fires and one where it stays silent. The expectations are the
patterns each recording holds (see provenance.json): a 64x64 matmul is launch-bound, a
4096x4096 one keeps the GPU busy, a schedule without wait or warmup records the profiler's
buffer request in its first step, a compiled run shows Dynamo's rows, and so on.
"""

from __future__ import annotations

import dataclasses
import gzip
import inspect
import json
import re
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    FIXTURES,
    complete_event,
    fixture_document,
    fixture_events,
    fixture_steps,
    gpu_fixture,
    gpu_fixture_names,
    op_steps_events,
    write_trace,
)

from profiling_utils import Finding, TraceError, cli, diagnose, load_trace, measures
from profiling_utils.comm import collectives
from profiling_utils.rules import (
    RULES,
    TABLES,
    Facts,
    cheatsheet_markdown,
    format_diagnosis,
    get_rule,
    order_findings,
    rule_ids,
)
from profiling_utils.rules import registry as registry_module
from profiling_utils.rules.gpu_lane import is_host_sync
from profiling_utils.tables import percent

# -- the recordings, grouped by what they show ---------------------------------------------------

EAGER_64 = {
    "64_bf16_cold_eager",
    "64_bf16_cold_eager_w0a3",
    "64_bf16_warm_eager",
    "64_bf16_warm_eager_w0a3",
    "64_bf16_warm_eager_w0a20",
    "8x64x64_bf16_warm_eager",
    "8x64x64_bf16_warm_eager_bmm",
}
# The recordings of time that moves (tests/test_rules_time_that_moves.py): the GEMM on a GPU
# shared with another process, loss.item() in every step, the training run's buffer request.
SHARED_GPU = {"4096_bf16_shared-gpu_a30"}
ITEM_SYNC = {"4096_bf16_item-sync"}
TRAIN_BUFFER = {"train_tiny_transformer_a40_buffer-request"}
EAGER_4096 = {
    "4096_bf16_cold_eager",
    "4096_bf16_warm_eager",
    "4096_bf16_warm_eager_w0a20",
    *SHARED_GPU,
    *ITEM_SYNC,
}
FP32 = {"4096_fp32_warm_eager"}
TF32 = {"4096_tf32_warm_eager"}
"""The fp32 GEMM with torch.set_float32_matmul_precision("high"): TF32 on the tensor cores."""
COMPILE_64 = {"64_bf16_cold_compile", "64_bf16_warm_compile"}
COMPILE_4096 = {"4096_bf16_cold_compile", "4096_bf16_warm_compile"}
COMPILE = COMPILE_64 | COMPILE_4096
GRAPHS = {"64_bf16_warm_compile-reduce-overhead", "4096_bf16_warm_compile-reduce-overhead"}
TRAIN = {"train_tiny_transformer_a3", *TRAIN_BUFFER}
TRULY_COLD = {"64_bf16_cold_eager_w0a3"}
"""The first recording of a fresh process, with nothing hidden by the schedule."""
BMM = {"8x64x64_bf16_warm_eager_bmm"}
NO_WAIT = TRULY_COLD | {
    "64_bf16_warm_eager_w0a3",
    "64_bf16_warm_eager_w0a20",
    "4096_bf16_warm_eager_w0a20",
}
MATMUL = EAGER_64 | EAGER_4096 | FP32 | TF32 | COMPILE | GRAPHS
# Part 3 of the series: causal attention, batch 8, 16 heads, 1024 tokens, head size 64, bf16.
NAIVE = {"attention_8x16x1024x64_bf16_naive"}
"""Scores masked out of place (masked_fill: a clone, then a device-to-device copy)."""
INPLACE = {"attention_8x16x1024x64_bf16_inplace"}
SDPA_MATH = {"attention_8x16x1024x64_bf16_sdpa-math"}
"""SDPA pinned to the math backend: bf16 upcast to fp32, the causal mask built every call."""
SDPA_EFFICIENT = {"attention_8x16x1024x64_bf16_sdpa-efficient"}
SDPA_FLASH = {"attention_8x16x1024x64_bf16_sdpa-flash"}
SDPA_CUDNN = {"attention_8x16x1024x64_bf16_sdpa-cudnn", "attention_8x16x1024x64_bf16_sdpa-auto"}
"""cuDNN pinned, and no backend pinned (torch picks cuDNN first on the H100)."""
SDPA_FUSED = SDPA_EFFICIENT | SDPA_FLASH | SDPA_CUDNN
SDPA = SDPA_MATH | SDPA_FUSED
HAND_WRITTEN = NAIVE | INPLACE
ATTENTION = HAND_WRITTEN | SDPA
# Part 2 of the series: one nn.Linear(32, 64) on [1024, 32], and the GeGLU MLP.
LINEAR_EAGER = {"linear_1024x32x64_bf16_eager"}
LINEAR = LINEAR_EAGER | {"linear_1024x32x64_bf16_compile"}
MLP_EAGER = {"mlp_64x128x768x3072_bf16_eager"}
MLP_COMPILE = {"mlp_64x128x768x3072_bf16_compile"}
MLP = MLP_EAGER | MLP_COMPILE | {"mlp_64x128x768x3072_bf16_liger"}
PART2 = LINEAR | MLP
PART2_COMPILE = {"linear_1024x32x64_bf16_compile", *MLP_COMPILE}
ALL = MATMUL | TRAIN | ATTENTION | PART2

FIRES: dict[str, set[str]] = {
    # Launch-bound: 64x64 work (2 µs kernels) and the small transformer.
    "overhead-bound": EAGER_64
    | COMPILE_64
    | {"64_bf16_warm_compile-reduce-overhead"}
    | TRAIN
    | LINEAR,
    # The GPU is the bottleneck for a 4096x4096 GEMM (reduce-overhead's input copies and CPU
    # wrapper leave it in between: neither rule).
    "compute-bound": EAGER_4096
    | FP32
    | TF32
    | COMPILE_4096
    | HAND_WRITTEN
    | SDPA_MATH
    | SDPA_EFFICIENT,
    # In between, the GPU idle for most of the step: one fused attention call a step, whose
    # dispatch takes longer than its kernel, and the eager MLP's host time between launches.
    "gpu-idle": SDPA_FLASH | SDPA_CUDNN | MLP_EAGER,
    # One GEMM (or the add) dominates a two-op trace; the transformer spreads its GPU time.
    "hotspot": MATMUL | SDPA_FUSED | LINEAR | MLP - MLP_EAGER,
    # Autocast re-casts the weights every step: ~100 aten::copy_/to calls per step.
    "many-calls": TRAIN,
    # matmul_add / aten::matmul hold their time in children; the transformer's train_step
    # spends its own time waiting for the backward thread.
    "cost-in-children": MATMUL | NAIVE | SDPA | LINEAR_EAGER | MLP,
    # Only a schedule without wait/warmup records the profiler's start-up in a step (16-42x);
    # the default schedule's first recorded step is 1.4-3x wider, cold or warm alike.
    "cold-start": NO_WAIT | LINEAR_EAGER,
    # Only a truly cold process shows it on the H100 (80 µs against 9 µs); under the default
    # schedule the first dead window is ~25 µs, 3-4x the later steps, cold or warm alike.
    "dead-window": TRULY_COLD | NAIVE | LINEAR_EAGER,
    # fp32 and TF32 GEMMs: cudaFuncGetAttributes; cuDNN attention: cudaGetFuncBySymbol; a
    # process's first bf16 GEMM: occupancy queries.
    "planned-launch": FP32 | TF32 | TRAIN | TRULY_COLD | SDPA_FLASH,
    "plain-launch": MATMUL - COMPILE
    | TRAIN
    | HAND_WRITTEN
    | SDPA_MATH
    | SDPA_EFFICIENT
    | MLP_EAGER,
    # bf16 GEMMs through cuLaunchKernelEx (no fp32 GEMM, no graph replay).
    "driver-launch": EAGER_64 | EAGER_4096 | COMPILE | TRAIN | HAND_WRITTEN | SDPA_CUDNN | PART2,
    # The GPU is still busy with queued GEMMs when the profiler syncs.
    "sync-flush": EAGER_4096 - ITEM_SYNC | FP32 | TF32 | HAND_WRITTEN | SDPA_MATH,
    # The transformer's longest runs of elementwise kernels over one shape are two long (a
    # cast then a copy; add_ then a cast): see tests/test_rules_fusion.py. The math
    # backend's scores go through add_ (the mask), isneginf and where, one shape; the
    # hand-written attention divides the scores then masks them. The GeGLU MLP's gelu and
    # mul over [64, 128, 3072], with the up projection's GEMM in between; compiled and
    # Liger runs fuse them into one kernel.
    "elementwise-chain": SDPA_MATH | HAND_WRITTEN | MLP_EAGER,
    # addmm seeds its output with the bias (the copy of a graph replay is no cudaMemcpyAsync);
    # the naive attention's masked_fill clones the scores (masked_fill → clone → copy_);
    # the transformer's select_backward copies a gradient into a zeroed tensor.
    "hidden-memcpy": COMPILE | NAIVE | TRAIN,
    "buffer-request": NO_WAIT | TRAIN_BUFFER,
    # A host sync in every step; the profiler's buffer request holding the CPU once.
    "intra-step-gap": ITEM_SYNC | TRAIN_BUFFER,
    # Another process on the GPU: the GEMM takes several times its median in a few steps.
    "kernel-variance": SHARED_GPU,
    # Every run with a matmul op on the CPU lane (a graph replay hides the op).
    "gemm-kernel": MATMUL - GRAPHS | TRAIN | HAND_WRITTEN | SDPA_MATH | PART2,
    # The fp32 GEMM runs on the H100's CUDA cores (ffma), TF32 being off (with it allowed,
    # a TF32 kernel); the math backend's fp32 GEMMs are attention-math-fp32's, and every
    # other GEMM is bf16.
    "fp32-gemm": FP32,
    # Every recording's GEMM sizes are multiples of 8 (see the synthetic vocabulary below).
    "gemm-alignment": set(),
    "bias-copy": COMPILE,
    # The 4096 bf16 GEMM kernel, and the TF32 one, need a zeroed 4-byte workspace.
    "memset-before-gemm": EAGER_4096 | TF32 | COMPILE_4096 | HAND_WRITTEN | MLP,
    "call-chain": ALL,
    # The 8x64x64 recording multiplies by a 2-D weight: matmul folds it into one mm.
    "mm-dispatch": EAGER_64 - BMM | EAGER_4096 | FP32 | TF32 | TRAIN | MLP - MLP_COMPILE,
    # A 3-D weight too: aten::bmm.
    "bmm-dispatch": BMM | HAND_WRITTEN | SDPA_MATH,
    "addmm-fusion": COMPILE | TRAIN | LINEAR,
    # The transformer's attention dispatches to cuDNN (bf16 under autocast on the H100), and
    # each SDPA recording to its backend (no hand-written attention calls SDPA).
    "attention-backend": TRAIN | SDPA,
    # The math backend upcasts bf16 to fp32 GEMMs, and builds the causal mask every call (the
    # hand-written attention builds it once; is_causal fused backends build none).
    "attention-math-fp32": SDPA_MATH,
    "mask-rebuilt": SDPA_MATH,
    # No gallery recording compiles inside its window (tests/fixtures/features/ has one).
    "compiling-recorded": set(),
    "compiled-region": COMPILE | GRAPHS | PART2_COMPILE,
    "dynamo-cache-lookup": COMPILE | GRAPHS | PART2_COMPILE,
    "aot-wrapper": COMPILE | GRAPHS | PART2_COMPILE,
    "compiled-graph-cache-hit": COMPILE | GRAPHS | PART2_COMPILE,
    "cuda-graph": GRAPHS,
    # Our recordings load no data (see the synthetic loader traces below).
    "data-loader": set(),
    # Every recording reuses its memory after the first step; the cold ones allocate in it
    # only (see tests/test_feature_traces.py for the cuDNN benchmark's churn).
    "allocator-churn": set(),
    # No recording has a later step 3x the others (the widest: 2.3x, the step after a cold
    # start); see the synthetic stalls below.
    "slow-step": set(),
    # Every recording's steps are alike (see the gradient-accumulation recording in
    # tests/test_feature_traces.py and the synthetic steps below).
    "periodic-step": set(),
    # Every recording's shapes repeat from step to step (see the synthetic steps below and
    # the decode loop of tests/fixtures/features).
    "new-shape-cost": set(),
    # Single-GPU recordings (see the two-GPU one in tests/test_feature_traces.py).
    "gpus-take-turns": set(),
    # Single-GPU recordings: no collective (see the synthetic NCCL traces below).
    "exposed-communication": set(),
    "comm-overlap": set(),
    "collective-bandwidth": set(),
}
"""Rule id -> the recordings it fires on. Every other recording must leave it silent."""

ISSUE_IDS = {
    "overhead-bound",
    "compute-bound",
    "hotspot",
    "many-calls",
    "cost-in-children",
    "cold-start",
    "dead-window",
    "planned-launch",
    "plain-launch",
    "sync-flush",
    "hidden-memcpy",
    "buffer-request",
    "intra-step-gap",
    "kernel-variance",
    "gemm-kernel",
    "bias-copy",
    "mm-dispatch",
    "bmm-dispatch",
    "addmm-fusion",
    "compiled-region",
    "dynamo-cache-lookup",
    "aot-wrapper",
    "compiled-graph-cache-hit",
    "compile-cpu-tax",
    "cuda-graph",
}


@cache
def findings_of(name: str) -> tuple[Finding, ...]:
    return tuple(diagnose(gpu_fixture(name)))


def fired(name: str) -> set[str]:
    return {finding.rule for finding in findings_of(name)}


def only(name: str, rule_id: str) -> Finding:
    found = [f for f in findings_of(name) if f.rule == rule_id]
    assert len(found) == 1, found
    return found[0]


def raw_spans(recording: str, **match: str) -> list[dict[str, Any]]:
    """Complete events of a recording whose keys equal ``match``, in time order."""
    spans = [e for e in fixture_events(recording) if e.get("ph") == "X"]
    spans = [e for e in spans if all(e.get(k) == v for k, v in match.items())]
    return sorted(spans, key=lambda e: e["ts"])


# -- the registry ------------------------------------------------------------------------------


def test_every_id_the_issue_asks_for_is_registered_once() -> None:
    ids = rule_ids()
    assert len(ids) == len(set(ids))
    assert ISSUE_IDS <= set(ids)


def test_rules_are_complete_and_in_cheatsheet_order() -> None:
    assert [r.table for r in RULES] == sorted((r.table for r in RULES), key=TABLES.index)
    for rule in RULES:
        assert rule.table in TABLES
        assert rule.severity in ("info", "warning")
        assert rule.what_you_see and rule.what_it_means
        assert (rule.detect is None) != (rule.detect_against is None), rule.id
    assert {r.id for r in RULES if r.needs_baseline} == {"compile-cpu-tax"}
    assert {r.id for r in RULES if not r.from_post} == {
        "data-loader",
        "driver-launch",
        "memset-before-gemm",
        "cuda-graph",
        "exposed-communication",
        "comm-overlap",
        "collective-bandwidth",
        "attention-backend",
        "attention-math-fp32",
        "elementwise-chain",
        "mask-rebuilt",
        "slow-step",
        "new-shape-cost",
        "gpu-idle",
        "gpus-take-turns",
        "allocator-churn",
        "compiling-recorded",
        "fp32-gemm",
        "gemm-alignment",
        "periodic-step",
    }


def test_no_detection_keys_on_a_gpu_specific_kernel_name() -> None:
    for rule in RULES:
        source = inspect.getsource(rule.detect or rule.detect_against)
        body = source[source.index("\ndef ") :]  # the decorator holds the row's texts
        for prefix in (
            *("ampere", "nvjet", "sm80", "sm90", "hopper", "xmma", "cutlass"),
            *("nccl", "rccl", "cijk", "tensile", "gfx"),  # communication kernels, ROCm GEMMs
        ):
            assert prefix not in body.lower(), (rule.id, prefix)


def test_select_takes_a_string_of_ids_and_names_where_cross_rank_ids_run() -> None:
    path = gpu_fixture("train_tiny_transformer_a3")
    assert [f.rule for f in diagnose(path, select="hotspot, many-calls")] == ["many-calls"]
    assert diagnose(path, select="many-calls", ignore="many-calls") == []
    with pytest.raises(ValueError, match=r"^unknown rule id\(s\): rank-straggler \(rank-straggler: "
                       r"cross-rank, run by profiling_utils\.ranks\.cross_rank"):  # fmt: skip
        diagnose(path, select=["rank-straggler"])


def test_registering_twice_or_in_an_unknown_table_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        registry_module.rule("hotspot", "GPU lane", see="s", means="m", severity="info")
    with pytest.raises(ValueError, match="table"):
        registry_module.rule("new-rule", "kernel lane", see="s", means="m", severity="info")


def test_get_rule() -> None:
    assert get_rule("cold-start").table == "CPU lane"
    with pytest.raises(KeyError):
        get_rule("no-such-rule")


def test_every_rule_has_a_recording_or_an_altered_recording_where_it_fires() -> None:
    assert set(FIRES) | {"compile-cpu-tax"} == set(rule_ids())
    without_recording = {rule for rule, names in FIRES.items() if not names}
    assert without_recording == {
        "data-loader",
        "exposed-communication",
        "comm-overlap",
        "collective-bandwidth",
        "slow-step",
        "new-shape-cost",
        "gpus-take-turns",
        "allocator-churn",
        "compiling-recorded",
        "periodic-step",
        "gemm-alignment",
    }


# -- every recording fires what its pattern calls for, and nothing else -------------------------


@pytest.mark.parametrize("name", gpu_fixture_names())
def test_recording_fires_exactly_its_patterns(name: str) -> None:
    expected = {rule for rule, names in FIRES.items() if name in names}
    assert fired(name) == expected


@pytest.mark.parametrize("rule_id", sorted(FIRES))
def test_rule_is_silent_somewhere(rule_id: str) -> None:
    if rule_id == "call-chain":  # every recording launches a kernel: see the CPU-only test
        assert FIRES[rule_id] == ALL
        return
    assert ALL - FIRES[rule_id], f"{rule_id} fires on every recording"
    for name in sorted(ALL - FIRES[rule_id]):
        assert rule_id not in fired(name)


def test_findings_are_plain_json() -> None:
    for name in ALL:
        for finding in findings_of(name):
            data = finding.to_dict()
            assert set(data) == {"rule", "table", "severity", "message", "evidence"}
            assert json.loads(json.dumps(data, allow_nan=False)) == data
            assert finding.message.endswith(".")


# -- profiler table ----------------------------------------------------------------------------


def kernel_steps(kernels: int, steps: int = 2) -> list[dict[str, Any]]:
    """Steps of 1000 µs, each running ``kernels`` 30 µs ops 40 µs apart, each launching a
    20 µs kernel 10 µs after it starts (the launch returns 5 µs later, after the GPU ran dry)."""
    return op_steps_events([(f"aten::op{i}", {}, True) for i in range(kernels)], steps)


def test_gpu_idle_reads_where_the_gpu_waits_in_the_median_step(make_trace) -> None:
    # 15 kernels of 20 µs: busy 300 µs of each 1000 µs step, neither bound.
    findings = diagnose(make_trace(kernel_steps(15)), select=["gpu-idle", "overhead-bound"])
    (finding,) = findings
    assert finding.rule == "gpu-idle"
    assert finding.message == (
        "In the step with the median share (ProfilerStep#1) the GPU is busy 300.0 µs for "
        "1000.0 µs of CPU time (30%): it waits for most of the step. In the step's CPU window "
        "it idles 30.0 µs before the step's first GPU activity starts, 280.0 µs between its "
        "activities (14 stretches: 280.0 µs until a launch call that returned after the GPU "
        "had run dry) and 390.0 µs after its last ends."
    )
    assert finding.evidence["median_step_idle_by_cause"] == {
        "CPU time": {"stretches": 14, "us": 280.0}
    }
    # Packed into the first half of the step, the host's launches set the pace.
    (finding,) = diagnose(make_trace(kernel_steps(24)), select=["gpu-idle"])
    assert finding.message.endswith(": the host's work before and between launches sets the pace.")


def test_gpu_idle_gives_a_buffer_request_only_the_idle_time_it_overlaps(make_trace) -> None:
    # The ops from the ninth on start 200 µs later in each step: kernel_7 ends at +330 µs,
    # kernel_8 starts at +550 µs, and the profiler's buffer request holds the thread for
    # 100 µs of those 220: the other 120 are the host's own time before the launch.
    events = kernel_steps(15)
    for event in events:
        if not event["name"].startswith("ProfilerStep#") and event["ts"] % 2000.0 >= 330.0:
            event["ts"] += 200.0
    for step in (1, 2):
        events.append(complete_event("Activity Buffer Request", "overhead", 2000.0 * step + 400,
                                     100, pid=-1, tid=0))  # fmt: skip
    (finding,) = diagnose(make_trace(events), select=["gpu-idle"])
    assert finding.evidence["median_step_idle_by_cause"] == {
        "CPU time": {"stretches": 13, "us": 380.0},
        "buffer request": {"stretches": 1, "us": 100.0},
    }
    assert "(14 stretches: 380.0 µs until a launch call that returned after the GPU had run " \
        "dry; 100.0 µs while the profiler's Activity Buffer Request held the launching " \
        "thread)" in finding.message  # fmt: skip


def test_gpu_idle_reads_a_recording_without_steps_besides_its_start_up(make_trace) -> None:
    # No steps: 1,300 µs of one-time calls (cudaFree, cudaMalloc, each as long as 100 launch
    # latencies or more), then ten 10 µs ops 100 µs apart, each launching a 60 µs kernel. The
    # recording (2,210 µs) is 27% busy; the rest, 600 of 910 µs: the start-up waits.
    events = [
        complete_event("cudaFree", "cuda_runtime", 0, 600),
        complete_event("cudaMalloc", "cuda_runtime", 600, 700),
    ]
    for i in range(10):
        t = 1300.0 + 100 * i
        events += [
            complete_event("aten::op", "cpu_op", t, 10),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 2, 5, correlation=i + 1),
            complete_event("k", "kernel", t + 8, 60, pid=0, tid=7, correlation=i + 1),
        ]
    (finding,) = diagnose(make_trace(events), select=["gpu-idle"])
    assert finding.evidence["recording_long_calls"] == {
        "count": 2,
        "self_us": 1300.0,
        "wall_us": 1300.0,
        "share": round(1300 / 2210, 4),
        "gpu_busy_fraction_besides": round(600 / 910, 4),
    }
    assert "(27%): it waits for most of the recording; 2 calls, each with 1.0% or more" in (
        finding.message
    )
    assert finding.message.endswith(
        "Besides them, the GPU is busy for 66% of the rest: the waiting is the start-up's more "
        "than the running program's."
    )


def _two_gpus(at_once: bool) -> list[dict[str, Any]]:
    """No steps: ten 10 µs ops 100 µs apart, each launching a 90 µs kernel on GPU 0 and GPU 1
    in turn, or (``at_once``) one on each."""
    events = []
    for i in range(10):
        t = 100.0 * i
        events.append(complete_event("aten::op", "cpu_op", t, 10))
        for device in (0, 1) if at_once else (i % 2,):
            correlation = 2 * i + device + 1
            events += [
                complete_event("cudaLaunchKernel", "cuda_runtime", t + 1 + device, 1,
                               correlation=correlation),
                complete_event("k", "kernel", t + 5, 90, pid=device, tid=7,
                               correlation=correlation),
            ]  # fmt: skip
    return events


def test_gpus_take_turns_over_a_recording_without_steps(make_trace) -> None:
    (finding,) = diagnose(make_trace(_two_gpus(at_once=False)), select=["gpus-take-turns"])
    assert finding.evidence["window"] == "recording"
    assert finding.evidence["recording_gpu_busy_by_gpu_us"] == {"0": 450.0, "1": 450.0}
    assert finding.evidence["recording_gpus_busy_together_us"] == 900.0
    assert finding.message.startswith(
        "Over the whole recording (no profiler steps to compare) the 2 GPUs this process "
        "drives are together busy 900.0 µs for 910.0 µs of CPU time (99%), but each alone for "
        "less: GPU 0 450.0 µs (49%), GPU 1 450.0 µs (49%); both ran at once for 0.0 µs"
    )
    # The same GPUs running at once: not turns (compute-bound's reading).
    assert diagnose(make_trace(_two_gpus(at_once=True)), select=["gpus-take-turns"]) == []
    # A kernel that began before the host's first event counts from there, on both sides:
    # 4 of its 14 µs, for GPU 0 alone as for the two together (no negative overlap).
    events = _two_gpus(at_once=False)
    events.append(complete_event("early", "kernel", -10, 14, pid=0, tid=7))
    (finding,) = diagnose(make_trace(events, name="early.json"), select=["gpus-take-turns"])
    assert finding.evidence["recording_gpu_busy_by_gpu_us"] == {"0": 454.0, "1": 450.0}
    assert finding.evidence["recording_gpus_busy_together_us"] == 904.0
    assert "both ran at once for 0.0 µs" in finding.message
    # Two processes' launches in one file (a merged trace): not one process's turns.
    merged = _two_gpus(at_once=False)
    for event in merged:
        if event["name"] == "cudaLaunchKernel" and event["args"]["correlation"] % 2 == 0:
            event["pid"] = 2
    assert diagnose(make_trace(merged, name="merged.json"), select=["gpus-take-turns"]) == []


def test_the_bound_rules_say_how_much_of_the_busy_time_only_collectives_ran() -> None:
    # nccl/stalled, rank 1: its all_reduces count as busy (waiting for peers is not waiting
    # for the CPU), and the message says how much of the busy time they alone ran.
    trace = load_trace(FIXTURES / "nccl" / "stalled" / "rank1.json.gz")
    (finding,) = diagnose(trace, select=["overhead-bound"])
    step = next(s for s in trace.steps if s.number == finding.evidence["median_step"])
    compute = [w for w in step.gpu_work if not w.is_communication]
    alone = measures.union_us(step.gpu_work) - measures.union_us(compute)
    assert alone > 1.0 and any(w.is_communication for w in step.gpu_work)
    assert finding.evidence["gpu_busy_in_collectives_us"] == pytest.approx(alone, abs=1e-3)
    assert f"µs ({alone:.1f} µs of it with only collectives running) for " in finding.message
    # No collective, no note.
    (plain,) = diagnose(gpu_fixture("64_bf16_warm_eager"), select=["overhead-bound"])
    assert "gpu_busy_in_collectives_us" not in plain.evidence
    assert "collectives" not in plain.message


def test_gpu_idle_is_silent_where_a_bound_rule_speaks_or_the_gpu_is_busy(make_trace) -> None:
    def rules(kernels: int) -> set[str]:
        path = make_trace(kernel_steps(kernels))
        return {f.rule for f in diagnose(path, select=["gpu-idle", "overhead-bound"])}

    assert rules(4) == {"overhead-bound"}  # 80 µs busy of 1000: 8%
    assert rules(6) == {"gpu-idle"}  # 12%
    assert rules(24) == {"gpu-idle"}  # 48%
    assert rules(0) == set()  # no GPU work
    # Over half the step busy: 26 kernels, 52%.
    assert rules(26) == set()


def test_gpu_idle_is_silent_where_the_gpu_runs_other_work_in_the_step(make_trace) -> None:
    # The same 30% of its own, and a 600 µs kernel whose launch the trace does not hold in
    # each step's window: the GPU is busy for most of the step, with work it did not launch.
    events = kernel_steps(15)
    for step in (1, 2):
        events.append(complete_event("other_kernel", "kernel", 2000.0 * step + 650, 300,
                                     pid=0, tid=7, correlation=9000 + step))  # fmt: skip
    assert [f.rule for f in diagnose(make_trace(kernel_steps(15)), select=["gpu-idle"])] == [
        "gpu-idle"
    ]
    assert diagnose(make_trace(events), select=["gpu-idle"]) == []


def test_overhead_bound_reports_each_steps_cpu_and_gpu_time() -> None:
    name = "64_bf16_cold_eager"
    evidence = only(name, "overhead-bound").evidence
    steps = fixture_steps(name)
    assert [s["cpu_us"] for s in evidence["steps"]] == [round(s["dur"], 3) for s in steps]
    gpu = sum(e["dur"] for e in fixture_events(name) if e.get("cat") in ("kernel",))
    assert evidence["gpu_busy_total_us"] == pytest.approx(gpu, abs=1e-2)
    assert evidence["median_gpu_busy_fraction"] <= 0.1


def launch_steps(steps: int, first_launch_us: float) -> list[dict[str, Any]]:
    """Steps of 1,000 µs, each with ten ops launching a 5 µs kernel; the first launch of each
    step lasts ``first_launch_us``, the others 5 µs."""
    events = []
    for n in range(steps):
        t = 10_000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1_000))
        at = t + 10
        for k in range(10):
            c = 100 * n + k
            launch_us = first_launch_us if k == 0 else 5.0
            events += [
                complete_event("aten::add", "cpu_op", at, launch_us + 10),
                complete_event(
                    "cudaLaunchKernel", "cuda_runtime", at + 5, launch_us, correlation=c
                ),
                complete_event("add", "kernel", at + launch_us + 8, 5, pid=0, tid=7, correlation=c),
            ]
            at += launch_us + 20
    return events


@pytest.mark.parametrize("steps", [1, 3])
def test_overhead_bound_names_one_call_that_holds_most_of_the_step(make_trace, steps) -> None:
    # A 700 µs launch (a first launch loading its kernel) in a 1,000 µs step.
    (finding,) = diagnose(make_trace(launch_steps(steps, 700.0)), select=["overhead-bound"])
    longest = finding.evidence["median_step_longest_call"]
    assert (longest["name"], longest["self_us"], longest["share"]) == (
        "cudaLaunchKernel",
        700.0,
        0.7,
    )
    assert (
        "one call, cudaLaunchKernel under aten::add, takes 700.0 µs of it (70%) by itself: a "
        "one-time cost (the process's CUDA start-up, a first launch" in finding.message
    )
    assert ("the one step the rules read" in finding.message) is (steps == 1)


def test_overhead_bound_names_no_call_when_none_holds_half_the_step(make_trace) -> None:
    (finding,) = diagnose(make_trace(launch_steps(3, 5.0)), select=["overhead-bound"])
    assert "median_step_longest_call" not in finding.evidence
    assert "one call" not in finding.message


def test_compute_bound_when_gpu_time_exceeds_cpu_time() -> None:
    evidence = only("4096_bf16_warm_eager", "compute-bound").evidence
    assert evidence["median_gpu_busy_us"] > evidence["median_cpu_us"]


def launching(
    op: str, t: float, op_us: float, kernel: str, kernel_us: float, correlation: int
) -> list[dict[str, Any]]:
    """An op at ``t`` whose launch call, 5 µs in, starts ``kernel`` on GPU 0's stream 7 20 µs
    after the op's start."""
    return [
        complete_event(op, "cpu_op", t, op_us),
        complete_event("cudaLaunchKernel", "cuda_runtime", t + 5, 5, correlation=correlation),
        complete_event(kernel, "kernel", t + 20, kernel_us, pid=0, tid=7, correlation=correlation),
    ]


def matmuls_without_steps(kernel_us: float, sync: bool = True) -> list[dict[str, Any]]:
    """A script without a profiler schedule: five aten::mm, each launching one kernel of
    ``kernel_us``, back to back on the GPU, then (``sync``) a device sync until they end."""
    events = []
    for n in range(5):
        t = 100.0 + 30 * n
        events += [
            complete_event("aten::mm", "cpu_op", t, 25),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 5, 10, correlation=n + 1),
            complete_event(
                "gemm", "kernel", 120 + kernel_us * n, kernel_us, pid=0, tid=7, correlation=n + 1
            ),
        ]
    if sync:
        end = 120 + 5 * kernel_us
        events.append(complete_event("cudaDeviceSynchronize", "cuda_runtime", 260, end - 260))
    return events


def test_compute_bound_reads_the_whole_recording_without_steps(make_trace) -> None:
    # The GPU runs 5 × 15,700 µs from 120 µs; the host's events run from 100 µs to the sync's
    # end at 78,620 µs: busy 78,500 µs of 78,520.
    (finding,) = diagnose(make_trace(matmuls_without_steps(15_700.0)), select=["compute-bound"])
    assert finding.evidence["window"] == "recording"
    assert finding.evidence["recording_cpu_us"] == pytest.approx(78_520.0)
    assert finding.evidence["recording_gpu_busy_us"] == pytest.approx(78_500.0)
    assert finding.message.startswith(
        "Over the whole recording (no profiler steps to compare) the GPU is busy 78500.0 µs "
        "for 78520.0 µs of CPU time, from the first host event to the last (1× as long)"
    )
    assert diagnose(make_trace(matmuls_without_steps(15_700.0)), select=["overhead-bound"]) == []


def test_compute_bound_without_steps_counts_work_past_the_hosts_last_event(make_trace) -> None:
    # No sync: the host is done at 245 µs and the GPU runs to 78,620 µs. The GPU sets the pace.
    events = matmuls_without_steps(15_700.0, sync=False)
    (finding,) = diagnose(make_trace(events), select=["compute-bound"])
    assert finding.evidence["recording_cpu_us"] == pytest.approx(145.0)
    assert "the GPU sets the pace" in finding.message


def test_overhead_bound_reads_the_whole_recording_without_steps(make_trace) -> None:
    # Kernels of 2 µs: 10 µs busy over the host's 145 µs (100 to 245 µs, no sync), 6.9%.
    events = matmuls_without_steps(2.0, sync=False)
    (finding,) = diagnose(make_trace(events), select=["overhead-bound"])
    assert finding.evidence["recording_gpu_busy_fraction"] == pytest.approx(10 / 145, abs=1e-4)
    assert finding.evidence["recording_host_work_us"] == pytest.approx(125.0)
    assert "the CPU side sets the pace" in finding.message
    assert diagnose(make_trace(events), select=["compute-bound"]) == []


def test_overhead_bound_without_steps_adds_up_a_start_ups_long_calls(make_trace) -> None:
    # A script's recording of 10,000 µs: four start-up calls of 2,000 µs each (none half of
    # it), then one op launching one 5 µs kernel.
    events = [
        complete_event(name, "cuda_runtime", 2_000.0 * n, 2_000)
        for n, name in enumerate(["cudaGetDeviceCount", "cudaSetDevice", "cudaMalloc", "cudaFree"])
    ]
    events += [
        complete_event("aten::add", "cpu_op", 8_000, 2_000),
        complete_event("cudaLaunchKernel", "cuda_runtime", 8_010, 5, correlation=1),
        complete_event("add_kernel", "kernel", 8_020, 5, pid=0, tid=7, correlation=1),
    ]
    (finding,) = diagnose(make_trace(events), select=["overhead-bound"])
    assert finding.evidence["recording_long_calls"] == {
        "count": 5,  # the four, and aten::add's own 1,995 µs
        "self_us": 9_995.0,
        "wall_us": 10_000.0,  # aten::add's launch inside it too
        "share": 1.0,
    }
    assert (
        "5 calls, each with 1.0% or more of it as its own time, take 10000.0 µs of it (100%), "
        "the longest cudaGetDeviceCount (2000.0 µs): one-time costs (the process's CUDA start-up"
    ) in finding.message


def test_a_recording_made_only_of_long_calls_on_two_threads(make_trace) -> None:
    # Two threads, each in two 5,000 µs calls for the whole 10,000 µs recording; a third
    # launches five 500 µs kernels. The long calls run at once: they take the recording's
    # 10,000 µs (100%, not 200%), and nothing is left to read besides them (no division).
    events = []
    for tid in (1, 3):
        events += [
            complete_event(f"op{tid}a", "cpu_op", 0, 5000, tid=tid),
            complete_event(f"op{tid}b", "cpu_op", 5000, 5000, tid=tid),
        ]
    for i in range(5):
        events += [
            complete_event("cudaLaunchKernel", "cuda_runtime", 100 + 2000 * i, 5, tid=2,
                           correlation=i + 1),
            complete_event("k", "kernel", 110 + 2000 * i, 500, pid=0, tid=7, correlation=i + 1),
        ]  # fmt: skip
    findings = diagnose(make_trace(events), select=["gpu-idle", "overhead-bound", "many-calls"])
    (finding,) = findings
    assert finding.rule == "gpu-idle"
    assert finding.evidence["recording_long_calls"]["wall_us"] == 10_000.0
    assert finding.evidence["recording_long_calls"]["share"] == 1.0
    assert "take 10000.0 µs of it (100%)" in finding.message and "Besides" not in finding.message


def test_bound_rules_without_steps_stay_silent_between_the_bounds(make_trace) -> None:
    # Kernels of 10 µs: 50 µs busy over 145 µs of host time, a third. Neither rule fires.
    events = matmuls_without_steps(10.0, sync=False)
    assert diagnose(make_trace(events), select=["compute-bound", "overhead-bound"]) == []


def test_bound_rules_read_the_recording_when_no_step_ends_inside_it(make_trace) -> None:
    # The HTA Triton example's shape: the one step's annotation ends 13 s after the profiler's
    # window (0 to 1,000 µs), its end never recorded. The rules read the host's events up to
    # the window's end: 1,000 µs, not 13 s, with 2 µs of GPU work.
    events = [
        complete_event("PyTorch Profiler (0)", "Trace", 0, 1000, pid="Spans", tid="Profiler"),
        complete_event("ProfilerStep#1", "user_annotation", 0, 13_000_000, tid=430),
        complete_event("aten::add", "cpu_op", 20, 900),
        complete_event("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=1),
        complete_event("add_kernel", "kernel", 40, 2, pid=0, tid=7, correlation=1),
    ]
    path = make_trace(events)
    (finding,) = diagnose(path, select=["overhead-bound"])
    assert finding.evidence["recording_cpu_us"] == 1000.0
    assert finding.evidence["steps_without_recorded_end"] == 1
    assert finding.message.startswith(
        "Over the whole recording (its 1 step ends after the recording) the GPU is busy 2.0 µs "
        "for 1000.0 µs of CPU time"
    )
    header = format_diagnosis(load_trace(path), [finding]).splitlines()[2]
    assert header.startswith("  no step ends inside the recording (the profiler stopped in it)")


def test_bound_rules_skip_steps_whose_kernels_went_unrecorded(make_trace) -> None:
    # Three steps, each launching three 10 µs kernels in 1,000 µs, only the first of which
    # was recorded (every step is cut the same way, so the rules keep them all): 1% busy would
    # read as overhead-bound; with two thirds of the kernels missing, no verdict is honest.
    events = []
    for n in range(3):
        t = 2_000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1_000))
        for k in range(3):
            c = 10 * n + k + 1
            events.append(complete_event("cudaLaunchKernel", "cuda_runtime", t + 10 + 20 * k, 5,
                                         correlation=c))  # fmt: skip
        events.append(
            complete_event("k", "kernel", t + 20, 10, pid=0, tid=7, correlation=10 * n + 1)
        )
    assert diagnose(make_trace(events), select=["overhead-bound", "compute-bound"]) == []


def test_overhead_bound_share_comes_from_the_times_not_the_rounded_evidence(make_trace) -> None:
    # 4 µs of GPU work in 100,298 µs steps (HTA's trace_compare traces): the evidence's
    # fraction, rounded to 4 decimals, is 0.0; the message must not say 0%.
    events = []
    for n in range(3):
        t = 200_000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 100_298),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=n + 1),
            complete_event("k", "kernel", t + 30, 4, pid=0, tid=7, correlation=n + 1),
        ]
    (finding,) = diagnose(make_trace(events), select=["overhead-bound"])
    assert finding.evidence["median_gpu_busy_fraction"] == 0.0
    assert "of CPU time (<0.01%): the CPU side sets the pace" in finding.message


def test_bound_rules_on_steps_shorter_than_the_evidence_rounds_to(make_trace) -> None:
    # Steps of 0.4 ns (a trace whose times were scaled down): the evidence rounds them to
    # 0.0 µs; the ratios come from the times themselves, with no division by zero.
    events = []
    for n in range(3):
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", n * 0.001, 0.0004),
            complete_event("cudaLaunchKernel", "cuda_runtime", n * 0.001, 0.0001, correlation=n),
            complete_event("k", "kernel", n * 0.001 + 0.0001, 0.0008, pid=0, tid=7, correlation=n),
        ]
    (finding,) = diagnose(make_trace(events), select=["overhead-bound", "compute-bound"])
    assert finding.rule == "compute-bound" and finding.evidence["median_cpu_us"] == 0.0
    assert "(2× as long)" in finding.message


def cold_steps(first_op_us: float, first_gap_us: float) -> list[dict[str, Any]]:
    """Four steps, each an op launching a kernel; the first step's op lasts ``first_op_us``
    (others 50 µs) and starts ``first_gap_us`` into the step (others 10 µs)."""
    events = []
    for n in range(4):
        t = 10_000.0 * n
        gap, op_us = (first_gap_us, first_op_us) if n == 0 else (10.0, 50.0)
        launch_us = 9.0 if n == 0 else 5.0
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, gap + op_us + 10),
            complete_event("aten::mm", "cpu_op", t + gap, op_us),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + gap + 5, launch_us,
                           correlation=n + 1),
            complete_event("gemm", "kernel", t + gap + 20, 10, pid=0, tid=7, correlation=n + 1),
        ]  # fmt: skip
    return events


def test_cold_start_says_how_much_runs_outside_every_op(make_trace) -> None:
    # The first step: 500 µs before its op starts (host work the profiler records no op
    # for, as on the MI250 and MI300X traces), and a launch 4 µs slower than usual.
    (finding,) = diagnose(make_trace(cold_steps(50.0, 500.0)), select=["cold-start"])
    assert finding.evidence["outside_ops_us"] == 510.0
    assert finding.evidence["median_other_outside_ops_us"] == 20.0
    assert (
        "; 510.0 µs of it runs outside every op and runtime call of every thread (20.0 µs in "
        "the other steps);"
    ) in finding.message
    assert finding.message.endswith(
        "cudaLaunchKernel, took 9.0 µs against 5.0 µs in the other steps (0.82% of the extra "
        "490.0 µs)."
    )
    assert "slowest_op" not in finding.evidence
    # The same extra time inside the op: nothing to say about time outside the ops, and the
    # op is named.
    (finding,) = diagnose(make_trace(cold_steps(540.0, 10.0)), select=["cold-start"])
    assert "outside every op" not in finding.message
    assert finding.evidence["slowest_op"]["name"] == "aten::mm"
    assert finding.message.endswith(
        "; aten::mm took 540.0 µs against 50.0 µs in the other steps (100% of the extra)."
    )
    # The step's thread waits while another thread works (a backward pass on autograd's
    # thread): no time outside every op.
    busy_elsewhere = complete_event("autograd::engine::evaluate_function: MmBackward0",
                                    "cpu_op", 0.0, 515.0, tid=430)  # fmt: skip
    (finding,) = diagnose(
        make_trace([*cold_steps(50.0, 500.0), busy_elsewhere]), select=["cold-start"]
    )
    assert finding.evidence["outside_ops_us"] < 20.0
    assert "outside every op" not in finding.message


def test_cold_start_names_calls_that_no_later_step_makes(make_trace) -> None:
    # The first step's 500 µs before its op: 400 µs in a cudaHostAlloc the later steps do not
    # make, which no usual time could show as slow.
    events = cold_steps(50.0, 500.0)
    events.append(complete_event("cudaHostAlloc", "cuda_runtime", 50, 400))
    (finding,) = diagnose(make_trace(events), select=["cold-start"])
    assert finding.evidence["calls_only_in_step"] == {
        "name": "cudaHostAlloc",
        "calls": 1,
        "us": 400.0,
    }
    assert finding.message.endswith(
        "; 1 call of cudaHostAlloc, which no other step makes, took 400.0 µs (82% of the extra "
        "490.0 µs)."
    )


@pytest.mark.parametrize(("op_us", "said"), [(900.0, False), (100.0, True)])
def test_overhead_bound_says_when_the_step_is_mostly_unrecorded_host_time(
    make_trace, op_us: float, said: bool
) -> None:
    # 1,000 µs steps whose GPU runs 10 µs: the CPU sets the pace. With 900 µs of ops the
    # step is recorded work; with 100 µs (a sleep, Python, a data loader) it mostly is not.
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1000),
            complete_event("aten::mm", "cpu_op", t + 10, op_us),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=n + 1),
            complete_event("gemm", "kernel", t + 30, 10, pid=0, tid=7, correlation=n + 1),
        ]
    (finding,) = diagnose(make_trace(events), select=["overhead-bound"])
    assert finding.evidence["median_step_host_work_us"] == op_us
    recorded = (
        f"in recorded ops and runtime calls for {op_us:.1f} of the 1000.0 µs ({op_us / 1000:.0%})"
    )
    assert recorded in finding.message
    assert finding.message.endswith(f"{recorded}.") != said
    assert ("the rest is host time outside every op and call" in finding.message) == said


def test_overhead_bound_names_a_label_that_holds_the_unrecorded_time(make_trace) -> None:
    # The stalled NCCL rank's shape: a record_function label around a host sleep holds
    # most of each step, with no op inside it.
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1000),
            complete_event("host_stall", "user_annotation", t + 5, 800),
            complete_event("aten::mm", "cpu_op", t + 850, 50),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 860, 5, correlation=n + 1),
            complete_event("gemm", "kernel", t + 870, 10, pid=0, tid=7, correlation=n + 1),
        ]
    (finding,) = diagnose(make_trace(events), select=["overhead-bound"])
    assert "and 800.0 µs lies under the label host_stall with no op inside" in finding.message
    assert finding.evidence["median_step_label_without_ops"] == {"name": "host_stall", "us": 800.0}


def test_bound_messages_quote_one_step_whose_times_give_the_ratio(make_trace) -> None:
    # (CPU µs, GPU busy µs) per step: ratios 20, 3, 5, 4 and 20. The median busy time over
    # the median CPU time, taken apart, would be 1000 / 100 = 10x, no step's ratio; the
    # message names the median step, whose own times give the ratio it prints.
    steps = {1: (100.0, 2000.0), 2: (280.0, 840.0), 3: (100.0, 500.0), 4: (290.0, 1160.0)}
    steps[5] = (50.0, 1000.0)
    events = []
    for n, (cpu_us, busy_us) in steps.items():
        t = 10_000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, cpu_us),
            complete_event("aten::mm", "cpu_op", t + 10, 30),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=n),
            complete_event("gemm", "kernel", t + 30, busy_us, pid=0, tid=7, correlation=n),
        ]
    (finding,) = diagnose(make_trace(events), select=["compute-bound"])
    evidence = finding.evidence
    assert evidence["median_step"] == 3
    assert (evidence["median_gpu_busy_us"], evidence["median_cpu_us"]) == (500.0, 100.0)
    assert evidence["median_gpu_busy_fraction"] == 5.0
    assert (evidence["lowest_gpu_busy_fraction"], evidence["highest_gpu_busy_fraction"]) == (
        3.0,
        20.0,
    )
    assert finding.message == (
        "In the step with the median share (ProfilerStep#3) the GPU is busy 500.0 µs for "
        "100.0 µs of CPU "
        "time (5× as long; 3× to 20× over 5 steps): the GPU sets the pace."
    )
    # Ratios that print alike (2.01x, 2x, 1.99x) make no range.
    even = [event for event in events if event["ts"] < 40_000]
    kernels = [event for event in even if event["cat"] == "kernel"]
    for event, busy_us in zip(kernels, (201.0, 200.0, 199.0), strict=True):
        event["dur"] = busy_us
    for event in even:
        if event["name"].startswith("ProfilerStep#"):
            event["dur"] = 100.0
    (finding,) = diagnose(make_trace(even), select=["compute-bound"])
    assert finding.message.endswith("CPU time (2× as long): the GPU sets the pace.")
    # Busy for most of the CPU's time but not longer: not said to set the pace.
    for event in kernels:
        event["dur"] = 88.0
    (finding,) = diagnose(make_trace(even), select=["compute-bound"])
    assert finding.message.endswith(
        "CPU time (0.88× as long): the GPU is busy for most of the CPU's time."
    )


def test_hotspot_share_is_the_gemm_share_of_gpu_time() -> None:
    name = "4096_fp32_warm_eager"
    evidence = only(name, "hotspot").evidence
    work = [
        e for e in fixture_events(name) if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    mm_ids = {e["args"]["External id"] for e in raw_spans(name, name="aten::mm")}
    gemm = [e for e in work if e["args"].get("External id") in mm_ids]
    assert evidence["kernel"] == gemm[0]["name"]
    share = sum(e["dur"] for e in gemm) / sum(e["dur"] for e in work)
    assert evidence["share"] == pytest.approx(share, abs=1e-3)
    assert evidence["ops"] == {"aten::mm": 3}


def test_hotspot_just_short_of_all_gpu_time_is_not_rounded_to_100_percent() -> None:
    # 10,843 of 10,890 µs: 99.57%. "100%" would say no other kernel ran.
    findings = diagnose(FIXTURES / "foreign" / "tracelens__gemm_01_compute_few_tiles.json.gz")
    (hit,) = [finding for finding in findings if finding.rule == "hotspot"]
    assert "takes 99.6% of all GPU time" in hit.message
    assert hit.evidence["ops"] == {"aten::mm": 10}  # linked by External id, not "unknown"


def test_hotspot_tells_a_launch_outside_any_op_from_one_not_in_the_trace(make_trace) -> None:
    # Three kernels: one launched inside aten::mm, one from a call outside any op (a trace
    # recorded with ProfilerActivity.CUDA alone has no ops), one whose launch is missing.
    events = [
        complete_event("aten::mm", "cpu_op", 0, 20),
        complete_event("cudaLaunchKernel", "cuda_runtime", 5, 5, correlation=1),
        complete_event("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=2),
    ]
    events += [
        complete_event("gemm", "kernel", 40 + 100 * n, 90, pid=0, tid=7, correlation=n + 1)
        for n in range(3)
    ]
    (hit,) = diagnose(make_trace(events), select=["hotspot"])
    assert hit.message.endswith(
        "launched from aten::mm, outside any op; 1 with no launch call in the trace."
    )
    assert hit.evidence["ops"] == {"aten::mm": 1, "(no op)": 1, "(launch not in the trace)": 1}


def test_hotspot_says_its_total_sums_overlapping_streams(make_trace) -> None:
    # A copy stream beside the compute stream: the profiler table's CUDA total (and the
    # share) counts each stream's time, more than the GPU was busy.
    events = [complete_event("aten::mm", "cpu_op", 0, 10)]
    events.append(complete_event("cudaLaunchKernel", "cuda_runtime", 2, 5, correlation=1))
    events.append(complete_event("gemm", "kernel", 10, 100, pid=0, tid=7, correlation=1))
    events.append(complete_event("Memcpy HtoD", "gpu_memcpy", 20, 60, pid=0, tid=9))
    (hit,) = diagnose(make_trace(events), select=["hotspot"])
    assert (
        "takes 62% of all GPU time (100.0 of 160.0 µs summed over the GPU's 2 streams"
        in hit.message
    )
    (hit,) = diagnose(make_trace(events[:3], name="one.json"), select=["hotspot"])
    assert "takes 100% of all GPU time (100.0 of 100.0 µs" in hit.message


def test_hotspot_says_which_of_its_kernels_ran_while_torch_compile_compiled(make_trace) -> None:
    # A cold max-autotune compile: Inductor's autotuning zeroes a buffer between candidate
    # kernels (cache flushes), 72% of the GPU time of the recording audited: the hotspot is
    # the compiler's work, which it had not said.
    events = [
        complete_event("Torch-Compiled Region: 0/0", "user_annotation", 0, 1000),
        complete_event("dynamo", "user_annotation", 1, 900),
        complete_event("mm_template_autotuning (dynamo_timed)", "user_annotation", 10, 800),
    ]
    for n in range(3):
        events += [
            complete_event("aten::fill_", "cpu_op", 20 + 100 * n, 20),
            complete_event("cudaLaunchKernel", "cuda_runtime", 25 + 100 * n, 5, correlation=n),
            complete_event("FillFunctor", "kernel", 40 + 100 * n, 50, pid=0, tid=7, correlation=n),
        ]
    # The compiled program's own call of it, after compiling, and its GEMM.
    events += [
        complete_event("aten::fill_", "cpu_op", 950, 20),
        complete_event("cudaLaunchKernel", "cuda_runtime", 952, 5, correlation=10),
        complete_event("FillFunctor", "kernel", 960, 50, pid=0, tid=7, correlation=10),
        complete_event("aten::mm", "cpu_op", 975, 20),
        complete_event("cudaLaunchKernel", "cuda_runtime", 980, 5, correlation=11),
        complete_event("gemm", "kernel", 1010, 30, pid=0, tid=7, correlation=11),
    ]
    (hit,) = diagnose(make_trace(events), select=["hotspot"])
    assert hit.message.endswith(
        "launched from aten::fill_; 3 of them while torch.compile was compiling (its "
        "benchmarks of candidate kernels, or other work of the compiler), not in the "
        "compiled program."
    )
    assert hit.evidence["launched_while_compiling"] == 3
    # Outside compilation, nothing to say.
    program = [e for e in events if e["ts"] >= 950]
    (hit,) = diagnose(make_trace(program, name="program.json"), select=["hotspot"])
    assert hit.message.endswith("launched from aten::fill_.")
    assert "launched_while_compiling" not in hit.evidence


def test_hotspot_counts_every_kernel_a_graph_replays(make_trace) -> None:
    # One cudaGraphLaunch per step replays a copy, then the GEMM: the GEMM is not the replay's
    # first activity, and no op launches it. It was "with no launch call in the trace".
    events = [complete_event("aten::mm", "cpu_op", 0, 10)]
    events.append(complete_event("cudaLaunchKernel", "cuda_runtime", 2, 5, correlation=1))
    events.append(complete_event("small", "kernel", 10, 5, pid=0, tid=7, correlation=1))
    for n in range(3):
        start = 100 + 200 * n
        events += [
            complete_event("cudaGraphLaunch", "cuda_runtime", start, 10, correlation=10 + n),
            complete_event(
                "Memcpy DtoD", "gpu_memcpy", start + 20, 2, pid=0, tid=7, correlation=10 + n
            ),
            complete_event("gemm", "kernel", start + 25, 90, pid=0, tid=7, correlation=10 + n),
        ]
    (hit,) = diagnose(make_trace(events), select=["hotspot"])
    assert hit.message.endswith("(270.0 of 281.0 µs, 3 calls), 3 replayed by cudaGraphLaunch.")
    assert hit.evidence["ops"] == {"(replayed by a graph launch)": 3}
    assert hit.evidence["graph_replays"] == {"cudaGraphLaunch": 3}
    # torch.compile's reduce-overhead mode: the replay runs in the compiled graph's op.
    (hit,) = [
        f
        for f in diagnose(gpu_fixture("4096_bf16_warm_compile-reduce-overhead"))
        if f.rule == "hotspot"
    ]
    assert "3 calls), 3 replayed by cudaGraphLaunch in ## Call CompiledFxGraph" in hit.message
    assert hit.evidence["ops"] == {"(replayed by a graph launch)": 3}


def test_many_calls_counts_calls_per_step() -> None:
    name = "train_tiny_transformer_a3"
    evidence = only(name, "many-calls").evidence
    top = evidence["ops"][0]
    calls = len(raw_spans(name, name=top["op"], cat="cpu_op"))
    assert top["calls"] == calls
    assert top["calls_per_step"] == pytest.approx(calls / len(fixture_steps(name)), abs=0.1)
    assert top["calls_per_step"] >= 50


def copy_steps(blocking_us: float, cheap_us: float = 4.0) -> list[dict[str, Any]]:
    """Three 2 ms steps, each with 60 calls of aten::copy_ of ``cheap_us`` and one of
    ``blocking_us`` (a blocking copy to pageable memory, HTA's negative_queue trace)."""
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events.append(
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 2_000 + blocking_us)
        )
        for k in range(60):
            events.append(complete_event("aten::copy_", "cpu_op", t + 10 + 20 * k, cheap_us))
        events.append(complete_event("aten::copy_", "cpu_op", t + 1_500, blocking_us))
    return events


def test_many_calls_counts_each_call_at_the_median_length(make_trace) -> None:
    # 61 calls of 4 µs per step make 244 µs of a 2,000 µs step: 12%.
    (finding,) = diagnose(make_trace(copy_steps(4.0)), select=["many-calls"])
    (entry,) = finding.evidence["ops"]
    assert entry["median_us"] == 4.0 and entry["calls_per_step"] == 61
    assert entry["cpu_share"] == pytest.approx(61 * 4.0 / 2_004.0, abs=1e-4)
    assert "4.0 µs for the median call, 12% of the steps' CPU time" in finding.message
    assert "over twice the median" not in finding.message


def test_many_calls_counts_calls_shorter_than_the_median_one_at_their_total(make_trace) -> None:
    # 31 calls of 20 µs and 29 of 1 µs per 2,000 µs step: 60 median calls would be 1,200 µs,
    # the calls take 649 µs (32%), which the share counts, "in all".
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 2_000))
        for k in range(60):
            dur = 20.0 if k < 31 else 1.0
            events.append(complete_event("aten::copy_", "cpu_op", t + 10 + 30 * k, dur))
    (finding,) = diagnose(make_trace(events), select=["many-calls"])
    (entry,) = finding.evidence["ops"]
    assert entry["median_us"] == 20.0
    assert entry["cpu_share"] == entry["total_cpu_share"] == pytest.approx(649 / 2_000, abs=1e-4)
    assert "20.0 µs for the median call, 32% of the steps' CPU time in all." in finding.message


@pytest.mark.parametrize("threads", [1, 2])
def test_many_calls_counts_calls_on_several_threads_at_once_once(make_trace, threads) -> None:
    # An inference server's workers (HTA's MTIA trace: 6 threads): 60 calls of 10 µs, one
    # every 20 µs over 1,200 µs, on one thread or on two at the same times.
    events = [
        complete_event("fbgemm::permute", "cpu_op", 20.0 * (k // threads), 10, tid=1 + k % threads)
        for k in range(60 * threads)
    ]
    events.append(complete_event("aten::empty", "cpu_op", 0, 1_200, tid=99))
    (finding,) = diagnose(make_trace(events), select=["many-calls"])
    (entry,) = [e for e in finding.evidence["ops"] if e["op"] == "fbgemm::permute"]
    covered = 60 * 10.0  # on the host's 1,200 µs, whatever the threads
    assert entry["cpu_share"] == pytest.approx(covered / 1_200, abs=1e-4)
    assert entry["threads"] == threads
    assert entry["concurrent_us"] == pytest.approx(covered * (threads - 1))
    assert ("counted once" in finding.message) is (threads > 1)


def test_many_calls_silent_when_one_long_call_per_step_holds_the_time(make_trace) -> None:
    # One 140 ms copy per step beside 60 cheap ones: 99% of the op's time, but 61 calls of
    # the median 4 µs are 0.2% of the 142 ms step; the op is not costly for being called often.
    assert diagnose(make_trace(copy_steps(140_000.0)), select=["many-calls"]) == []


def test_many_calls_says_when_a_few_long_calls_hold_most_of_the_time(make_trace) -> None:
    # 61 calls of the median 4 µs are 244 µs of a 3,000 µs step (8.1%); with the one 1,000 µs
    # call, the op's calls take 1,240 µs (41%).
    (finding,) = diagnose(make_trace(copy_steps(1_000.0)), select=["many-calls"])
    (entry,) = finding.evidence["ops"]
    assert entry["cpu_share"] == pytest.approx(244 / 3_000, abs=1e-4)
    assert entry["total_cpu_share"] == pytest.approx(1_240 / 3_000, abs=1e-4)
    assert "8.1% of the steps' CPU time at that length (all of its calls: 41%" in finding.message
    assert "3 of its 183 calls take over twice the median)" in finding.message
    assert (entry["calls_over_twice_median"], entry["calls"]) == (3, 183)


def test_many_calls_counts_only_the_calls_in_the_steps(make_trace) -> None:
    # 40 calls per step, and 300 more in a warm-up before the first step: 440 calls in the
    # trace, 147 per step if the warm-up counted; 40 per step, under the 50 asked, in fact.
    events = [complete_event("aten::copy_", "cpu_op", 10.0 * k, 4) for k in range(300)]
    for n in range(3):
        t = 10_000.0 * (n + 1)
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 2_000))
        events += [complete_event("aten::copy_", "cpu_op", t + 10 + 20 * k, 4) for k in range(40)]
    assert diagnose(make_trace(events), select=["many-calls"]) == []


def test_many_calls_counts_an_op_running_inside_another_it_names_once(make_trace) -> None:
    # 60 calls per step of aten::conv2d → aten::convolution → aten::_convolution (the same
    # calls three times over), and 60 of aten::copy_, 20 of them inside aten::_convolution.
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 2_000))
        for k in range(60):
            at = t + 10 + 30 * k
            events += [
                complete_event("aten::conv2d", "cpu_op", at, 12),
                complete_event("aten::convolution", "cpu_op", at + 1, 10),
                complete_event("aten::_convolution", "cpu_op", at + 2, 8),
                complete_event("aten::copy_", "cpu_op", at + 3 if k < 20 else at + 14, 2),
            ]
    (finding,) = diagnose(make_trace(events), select=["many-calls"])
    within = {entry["op"]: entry["within"] for entry in finding.evidence["ops"]}
    assert within == {
        "aten::conv2d": None,
        "aten::copy_": None,  # a third of its calls only: an op of its own
        "aten::convolution": "aten::conv2d",
        "aten::_convolution": "aten::convolution",
    }
    assert finding.message.startswith("2 op(s) are called 50+ times per step")
    assert "(2 more run almost only inside them: aten::convolution, aten::_convolution)" in (
        finding.message
    )
    # Both ops called on their own are named: the most called first, then the other.
    top, other = (e for e in finding.evidence["ops"] if e["within"] is None)
    assert f"; the most called, {top['op']}: " in finding.message
    assert finding.message.endswith(
        f" The other: {other['op']} ({other['calls_per_step']:g} per step, "
        f"{percent(other['cpu_share'])})."
    )


def stalled_steps(stall: dict[int, tuple[str, float]], steps: int = 5) -> list[dict[str, Any]]:
    """Five (``steps``) 1,000 µs steps, each an op launching one 50 µs kernel and a 10 µs sync;
    ``stall``
    gives a step ``("host", µs)`` of host time outside every op, ``("sync", µs)`` more in
    its cudaStreamSynchronize, or ``("op", µs)`` more in its op (``("new shape", µs)``: and
    its op called with an input shape the others were not)."""
    events = []
    for n in range(steps):
        t = 10_000.0 * n
        kind, extra = stall.get(n, ("", 0.0))
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1_000 + extra),
            complete_event(
                "aten::mul",
                "cpu_op",
                t + 100,
                50 + (extra if kind in ("op", "new shape") else 0),
                **{
                    "Input Dims": [[64, 64] if kind == "new shape" else [32, 32], []],
                    "Input type": ["float", "Scalar"],
                },
            ),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 110, 10, correlation=n + 1),
            complete_event("mul_kernel", "kernel", t + 130, 50, pid=0, tid=7, correlation=n + 1),
            complete_event(
                "cudaStreamSynchronize",
                "cuda_runtime",
                t + (900 + extra if kind in ("host", "op", "new shape") else 900),
                10 + (extra if kind == "sync" else 0),
            ),
        ]
    return events


def test_slow_step_names_another_slow_step_that_captured_a_cuda_graph(make_trace) -> None:
    # Step 3 stalls 4 ms on the host; step 4, 3 ms longer too, captures a CUDA graph (a new
    # batch size under reduce-overhead): its cause is in the trace, and named.
    events = stalled_steps({3: ("host", 4_000.0), 4: ("host", 3_000.0)}, steps=7)
    events += [
        complete_event("cudaStreamBeginCapture", "cuda_runtime", 40_200.0, 10),
        complete_event("cudaStreamEndCapture", "cuda_runtime", 42_000.0, 10),
    ]
    (finding,) = diagnose(make_trace(events), select=["slow-step"])
    assert finding.evidence["step"] == 3
    assert finding.evidence["other_slow_steps_capturing"] == [4]
    assert "(1 other step(s) took 3× or more too; ProfilerStep#4 captured a CUDA graph)" in (
        finding.message
    )
    # Without the capture, the other slow step is only counted.
    (plain,) = diagnose(make_trace(events[:-2], name="plain.json"), select=["slow-step"])
    assert "(1 other step(s) took 3× or more too)" in plain.message


def test_slow_step_says_a_sync_waited_for_work_launched_before_the_recording(
    make_trace,
) -> None:
    # A server profiled mid-flight: step 0's kernel waits behind unrecorded work until 50 ms,
    # and step 1's sync waits for it all that time.
    events = []
    starts = {0: 0.0, 1: 1_000.0, 2: 51_000.0, 3: 52_000.0}
    ends = {0: 1_000.0, 1: 51_000.0, 2: 52_000.0, 3: 53_000.0}
    for n, t in starts.items():
        kernel_at = {0: 50_000.0, 1: 50_100.0}.get(n, t + 20)  # one stream: in order
        sync = (1_100.0, 49_000.0) if n == 1 else (t + 500, 5.0)
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, ends[n] - t - 1),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 10, 5, correlation=n + 1),
            complete_event("k", "kernel", kernel_at, 100, pid=0, tid=7, correlation=n + 1),
            complete_event("cudaStreamSynchronize", "cuda_runtime", *sync),
        ]
    (finding,) = diagnose(make_trace(events), select=["slow-step"])
    assert finding.evidence["step"] == 1
    assert finding.message.endswith(
        "cudaStreamSynchronize, took 49000.0 µs against 5.0 µs in the other steps (99.9% of "
        "the extra 49000.0 µs), while the GPU ran work launched before the recording began (the "
        "trace's first GPU activity waited behind it until 50000.0 µs)."
    )


def test_slow_step_names_host_time_outside_every_op(make_trace) -> None:
    # Step 3 takes 5,000 µs: 4,000 µs more, spent between ops (a garbage-collection pause).
    (finding,) = diagnose(make_trace(stalled_steps({3: ("host", 4_000.0)})), select=["slow-step"])
    assert finding.evidence["step"] == 3 and finding.evidence["ratio"] == 5.0
    assert finding.message.startswith(
        "ProfilerStep#3 took 5000.0 µs, 5.0× the median of the other steps (1000.0 µs); "
        "4940.0 µs of it runs outside every op and runtime call (940.0 µs in the other steps)"
    )
    assert "slowest_call" not in finding.evidence
    assert finding.evidence["slow_steps_cpu_us"] == {"3": 5000.0}


def test_slow_steps_at_one_interval_are_periodic(make_trace) -> None:
    # Gradient accumulation over four batches: steps 3, 7 and 11 run the optimizer.
    stalls = {n: ("host", 4_000.0 + 10 * n) for n in (3, 7, 11)}
    found = diagnose(make_trace(stalled_steps(stalls, steps=13)), select=["slow-step",
                     "periodic-step"])  # fmt: skip
    slow, cycle = (next(f for f in found if f.rule == rule) for rule in ("slow-step",
                   "periodic-step"))  # fmt: skip
    assert slow.evidence["period"] == 4 and slow.evidence["step"] == 11  # the widest
    assert slow.message.startswith(
        "ProfilerStep#11 took 5110.0 µs, 5.1× the median of the other steps (1000.0 µs) (every "
        "4th step took 3× or more: ProfilerStep#3, #7 and #11, work that comes back every 4 "
        "steps: see periodic-step); "
    )
    assert cycle.evidence["period"] == 4 and cycle.evidence["wide_steps"] == [3, 7, 11]
    assert cycle.evidence["median_wide_cpu_us"] == 5070.0
    assert cycle.message.startswith(
        "Every 4th step is wider than the others: ProfilerStep#3, #7 and #11 take a median of "
        "5070.0 µs against 1000.0 µs"
    )
    # Two wide steps are too few to call a period; a step at the interval that is not wide
    # (step 15), or wide steps at uneven intervals, make none.
    for stalled, steps in (((3, 7), 13), ((3, 7, 11), 16), ((2, 7, 11), 13)):
        stalls = {n: ("host", 4_000.0) for n in stalled}
        found = diagnose(
            make_trace(stalled_steps(stalls, steps=steps), name=f"s{steps}{stalled}.json"),
            select=["slow-step", "periodic-step"],
        )
        assert [f.rule for f in found] == ["slow-step"], stalled
        assert "period" not in found[0].evidence
        assert f"({len(stalled) - 1} other step(s) took 3× or more too)" in found[0].message


def test_periodic_step_needs_each_wide_step_wider_than_every_other_and_by_a_margin(
    make_trace,
) -> None:
    from profiling_utils.rules.cpu_lane import PERIODIC_STEP_MIN_RATIO

    def cycle(extra: dict[int, float], name: str) -> list[Finding]:
        stalls = {n: ("host", us) for n, us in extra.items()}
        return diagnose(make_trace(stalled_steps(stalls, steps=13), name=name),
                        select=["periodic-step"])  # fmt: skip

    wide = {3: 500.0, 7: 520.0, 11: 510.0}  # 1.5x, every fourth step
    assert cycle(wide, "a.json")[0].evidence["ratio"] == 1.51
    # One of the others as wide as a wide step; too little wider.
    assert cycle({**wide, 5: 500.0}, "b.json") == []
    narrow = 1000.0 * (PERIODIC_STEP_MIN_RATIO - 1) * 0.9
    assert cycle({3: narrow, 7: narrow, 11: narrow}, "c.json") == []


def test_a_one_off_stall_does_not_hide_a_cycle(make_trace) -> None:
    # Every fourth step runs the optimizer (+500 µs); step 5 alone stalls for 5,000 µs (a
    # garbage-collection pause), wider than them all: slow-step reports it, and the cycle
    # is read without it.
    cycle = {3: 500.0, 7: 520.0, 11: 510.0}
    events = stalled_steps({n: ("host", us) for n, us in {**cycle, 5: 5_000.0}.items()}, 13)
    found = diagnose(make_trace(events), select=["slow-step", "periodic-step"])
    slow, periodic = (next(f for f in found if f.rule == rule) for rule in ("slow-step",
                      "periodic-step"))  # fmt: skip
    assert slow.evidence["step"] == 5 and "period" not in slow.evidence
    assert periodic.evidence["wide_steps"] == [3, 7, 11]
    assert periodic.evidence["left_out_step"] == 5
    assert (
        "each wider than any other step but ProfilerStep#5 (6000.0 µs), a one-off stall that "
        "slow-step reports (the first step left out"
    ) in periodic.message
    # A stall too small to be a slow step (2x) is one of the others: it breaks the cycle.
    events = stalled_steps({n: ("host", us) for n, us in {**cycle, 5: 1_000.0}.items()}, 13)
    found = diagnose(make_trace(events, name="small.json"), select=["periodic-step"])
    assert found == []
    # Without the stall, no step is left out.
    events = stalled_steps({n: ("host", us) for n, us in cycle.items()}, 13)
    (plain,) = diagnose(make_trace(events, name="plain.json"), select=["periodic-step"])
    assert "left_out_step" not in plain.evidence and " but " not in plain.message


def test_slow_step_names_the_python_frame_that_holds_a_stall(make_trace) -> None:
    # Recorded with with_stack: a logging frame covers step 3's 4,000 µs stall. The frame is
    # no op: the time is still outside every op, and the frame names it.
    events = stalled_steps({3: ("host", 4_000.0)})
    events.append(
        complete_event("logging/__init__.py(1489): info", "python_function", 30_880, 4_000)
    )
    (finding,) = diagnose(make_trace(events), select=["slow-step"])
    assert finding.evidence["label_without_ops"] == {
        "name": "logging/__init__.py(1489): info",
        "us": 4_000.0,
    }
    assert "4940.0 µs of it runs outside every op and runtime call" in finding.message
    assert "4000.0 µs of it under logging/__init__.py(1489): info" in finding.message


def test_slow_step_names_the_runtime_call_that_waited(make_trace) -> None:
    (finding,) = diagnose(make_trace(stalled_steps({2: ("sync", 4_000.0)})), select=["slow-step"])
    assert finding.evidence["slowest_call"]["name"] == "cudaStreamSynchronize"
    assert (
        "the runtime call furthest above its usual time, cudaStreamSynchronize, took 4010.0 µs "
        "against 10.0 µs in the other steps (100% of the extra 4000.0 µs)"
    ) in finding.message


def test_slow_step_names_calls_that_no_other_step_makes(make_trace) -> None:
    # Step 3 frees pinned memory as a CUDA graph capture empties the caches: six calls of
    # cudaFreeHost, 600 µs each, which no other step makes (no usual time to exceed), on
    # two threads, two of them at once. The same step with one short call says nothing.
    def freeing(each: float) -> list:
        events = stalled_steps({3: ("host", 4_000.0)})
        for k in range(6):
            tid = 431 if k == 5 else 430
            start = 30_200 + 600 * min(k, 4)  # the sixth, on another thread, overlaps the fifth
            events.append(complete_event("cudaFreeHost", "cuda_runtime", start, each, tid=tid))
        return events

    (finding,) = diagnose(make_trace(freeing(600.0)), select=["slow-step"])
    assert finding.evidence["calls_only_in_step"] == {
        "name": "cudaFreeHost",
        "calls": 6,
        "us": 3000.0,
    }
    assert (
        "6 calls of cudaFreeHost, which no other step makes, took 3000.0 µs (75% of the extra "
        "4000.0 µs)"
    ) in finding.message
    (finding,) = diagnose(make_trace(freeing(10.0)), select=["slow-step"])
    assert "calls_only_in_step" not in finding.evidence and "no other step" not in finding.message
    # A call on another thread that starts 100 µs before the step ends and runs on for 10 ms:
    # only its 100 µs in the step count, too few to name.
    events = freeing(10.0)
    events.append(complete_event("cudaHostAlloc", "cuda_runtime", 34_900, 10_000, tid=432))
    (finding,) = diagnose(make_trace(events, name="past.json"), select=["slow-step"])
    assert "calls_only_in_step" not in finding.evidence


def _capture(start: float, closed: bool = True) -> list[dict[str, Any]]:
    """A stream capture at ``start``: begin, end 200 µs later, a 100 µs instantiation."""
    events = [complete_event("cudaStreamBeginCapture", "cuda_runtime", start, 5)]
    if closed:
        events += [
            complete_event("cudaStreamEndCapture", "cuda_runtime", start + 195, 5),
            complete_event("cudaGraphInstantiateWithFlags", "cuda_runtime", start + 210, 100),
        ]
    return events


def test_slow_step_names_the_graph_it_captures(make_trace) -> None:
    events = stalled_steps({3: ("host", 4_000.0)}) + _capture(30_300)
    (finding,) = diagnose(make_trace(events), select=["slow-step"])
    assert finding.evidence["graph_captures"] == {
        "graphs": 1,
        "begin": "cudaStreamBeginCapture",
        "end": "cudaStreamEndCapture",
        "capture_us": 200.0,
        "instantiate": "cudaGraphInstantiateWithFlags",
        "instantiate_us": 100.0,
        "cudagraph_trees_us": None,
        "other_steps_capturing": [],
        "graph_launches_in_other_steps": 0,
    }
    assert (
        "; it captures a graph of GPU work: 200.0 µs from cudaStreamBeginCapture to "
        "cudaStreamEndCapture and 100.0 µs in cudaGraphInstantiateWithFlags (7.5% of the extra "
        "4000.0 µs)"
    ) in finding.message
    # Still open when the recording ends: up to the step's end.
    events = stalled_steps({3: ("host", 4_000.0)}) + _capture(30_300, closed=False)
    (finding,) = diagnose(make_trace(events, name="open.json"), select=["slow-step"])
    assert finding.evidence["graph_captures"]["capture_us"] == 35_000 - 30_300
    assert "from cudaStreamBeginCapture to the end of the recording" in finding.message
    # Another step captures too (a smaller one, not slow): named.
    events = stalled_steps({3: ("host", 4_000.0)}) + _capture(30_300) + _capture(10_300)
    (finding,) = diagnose(make_trace(events, name="two.json"), select=["slow-step"])
    assert finding.evidence["graph_captures"]["other_steps_capturing"] == [1]
    assert "(7.5% of the extra 4000.0 µs); ProfilerStep#1 captures too." in finding.message
    # Every step captures: the capture is not what sets this step apart.
    events = stalled_steps({3: ("host", 4_000.0)})
    for n in range(5):
        events += _capture(10_000 * n + 300)
    (finding,) = diagnose(make_trace(events, name="every.json"), select=["slow-step"])
    assert "graph_captures" not in finding.evidence and "captures" not in finding.message


def test_slow_step_names_an_op_no_other_step_runs(make_trace) -> None:
    def saving(us: float) -> list[dict[str, Any]]:
        events = stalled_steps({3: ("host", 4_000.0)})
        return events + [complete_event("aten::save", "cpu_op", 30_300, us)]

    (finding,) = diagnose(make_trace(saving(3_000.0)), select=["slow-step"])
    assert finding.evidence["only_in_step"] == {"name": "aten::save", "us": 3000.0}
    assert (
        "aten::save, which no other step runs, took 3000.0 µs (75% of the extra 4000.0 µs)"
    ) in finding.message
    (finding,) = diagnose(make_trace(saving(500.0), name="short.json"), select=["slow-step"])
    assert "only_in_step" not in finding.evidence and "no other step runs" not in finding.message


@pytest.mark.parametrize("kind", ["op", "new shape"])
def test_slow_step_names_the_op_call_furthest_above_its_usual_time(make_trace, kind) -> None:
    (finding,) = diagnose(make_trace(stalled_steps({2: (kind, 4_000.0)})), select=["slow-step"])
    assert finding.evidence["slowest_op"]["name"] == "aten::mul"
    assert finding.evidence["slowest_op"]["new_shapes"] is (kind == "new shape")
    said = "aten::mul took 4050.0 µs against 50.0 µs in the other steps (100% of the extra)"
    assert said in finding.message
    assert (
        "(new-shape-cost reads such first calls, where several shapes have one)" in finding.message
    ) is (kind == "new shape")
    assert "outside every op" not in finding.message


def test_slow_step_sets_a_call_against_the_like_call_of_the_other_steps(make_trace) -> None:
    # Two layers' aten::addmm per step: a large one (300 µs) then a small one (35 µs). In
    # step 3 the large one takes 4,200 µs: against the large calls of the other steps, not
    # the median of both layers' (which had halved its usual time).
    events = []
    for n in range(5):
        t = 10_000.0 * n
        large = 4_200.0 if n == 3 else 300.0 + n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 500 + large),
            complete_event("aten::addmm", "cpu_op", t + 10, large),
            complete_event("aten::addmm", "cpu_op", t + 20 + large, 35.0),
        ]
    (finding,) = diagnose(make_trace(events), select=["slow-step"])
    usual = statistics.median([300.0, 301.0, 302.0, 304.0])
    assert finding.evidence["slowest_op"]["typical_us"] == usual
    assert f"aten::addmm took 4200.0 µs against {usual:.1f} µs in the other steps" in (
        finding.message
    )


def test_slow_step_without_like_calls_sets_a_call_against_its_name_s_longest(make_trace) -> None:
    # Step 3 takes a branch: an extra small addmm first, which shifts the positions, then
    # the large layer's at its usual time, and 4,000 µs of host time outside every op. Set
    # against the small layer's calls (its position's), the large one had been named.
    def steps(large_in_3: float) -> list[dict[str, Any]]:
        events = []
        for n in range(5):
            t = 10_000.0 * n
            extra = 4_000.0 if n == 3 else 0.0
            calls = ([20.0] if n == 3 else []) + [large_in_3 if n == 3 else 300.0 + n, 35.0]
            events.append(
                complete_event(f"ProfilerStep#{n}", "user_annotation", t, 500 + extra + sum(calls))
            )
            at = t + 10
            for dur in calls:
                events.append(complete_event("aten::addmm", "cpu_op", at, dur))
                at += dur + 5
        return events

    (finding,) = diagnose(make_trace(steps(310.0)), select=["slow-step"])
    assert "slowest_op" not in finding.evidence
    assert "runs outside every op" in finding.message
    # Where the large call itself is slow, it is told against the longest of its name.
    (finding,) = diagnose(make_trace(steps(4_300.0), name="slow.json"), select=["slow-step"])
    assert finding.evidence["slowest_op"]["compared_with"] == "longest call"
    assert (
        "aten::addmm took 4300.0 µs against 304.0 µs, the longest call of its name in the "
        "other steps, which call it a different number of times"
    ) in finding.message


def test_slow_step_does_not_take_a_factory_op_s_empty_shapes_for_like_calls(make_trace) -> None:
    # record_shapes on aten::randn: every call records empty dims, large or small. Step 3
    # makes one more small tensor and spins 25 ms outside every op; its large randn runs at
    # its usual time, and is not to be set against the small ones.
    events = []
    for n in range(5):
        t = 100_000.0 * n
        sizes = ([40.0] if n == 3 else []) + [40.0, 7_000.0 + 10 * n, 40.0]
        spin = 25_000.0 if n == 3 else 0.0
        events.append(
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 500 + spin + sum(sizes))
        )
        at = t + 10
        for dur in sizes:
            events.append(
                complete_event(
                    "aten::randn",
                    "cpu_op",
                    at,
                    dur,
                    **{"Input Dims": [[], [], [], [], []], "Input type": ["", "", "", "", ""]},
                )
            )
            at += dur + 5
    (finding,) = diagnose(make_trace(events), select=["slow-step"])
    assert "slowest_op" not in finding.evidence
    assert "runs outside every op" in finding.message


def test_slow_step_tells_calls_apart_by_their_concrete_inputs(make_trace) -> None:
    # aten::repeat records the same dims for x.repeat(1, 1) and x.repeat(512, 512): the
    # sizes are in its Concrete Inputs. Step 3 adds a small repeat and spins 25 ms outside
    # every op; its large repeat runs at its usual time.
    events = []
    for n in range(5):
        t = 100_000.0 * n
        calls = ([(40.0, "[1, 1]")] if n == 3 else []) + [
            (40.0, "[1, 1]"),
            (7_000.0 + 10 * n, "[512, 512]"),
            (40.0, "[1, 1]"),
        ]
        spin = 25_000.0 if n == 3 else 0.0
        total = 500 + spin + sum(dur for dur, _ in calls)
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, total))
        at = t + 10
        for dur, given in calls:
            events.append(
                complete_event(
                    "aten::repeat",
                    "cpu_op",
                    at,
                    dur,
                    **{
                        "Input Dims": [[8, 8], []],
                        "Input type": ["float", "ScalarList"],
                        "Concrete Inputs": ["", given],
                    },
                )
            )
            at += dur + 5
    (finding,) = diagnose(make_trace(events), select=["slow-step"])
    assert "slowest_op" not in finding.evidence


def test_slow_step_names_the_op_with_the_most_extra_not_the_deepest(make_trace) -> None:
    # Step 3: aten::index runs 3,000 µs more than usual; a nested convolution, 1,500 µs more.
    events = []
    for n in range(5):
        t = 10_000.0 * n
        index_us, conv_us = (3_100.0, 1_600.0) if n == 3 else (100.0, 100.0)
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 500 + index_us + conv_us),
            complete_event("aten::index", "cpu_op", t + 10, index_us),
            complete_event("aten::conv2d", "cpu_op", t + 20 + index_us, conv_us + 20),
            complete_event("aten::convolution", "cpu_op", t + 25 + index_us, conv_us + 10),
            complete_event("aten::cudnn_convolution", "cpu_op", t + 30 + index_us, conv_us),
        ]
    (finding,) = diagnose(make_trace(events), select=["slow-step"])
    assert finding.evidence["slowest_op"]["name"] == "aten::index"
    assert "aten::index took 3100.0 µs against 100.0 µs" in finding.message


def test_slow_step_on_a_recording_with_a_host_stall_added(tmp_path) -> None:
    # The H100 recording of 20 steps with 20 ms of host time added at the end of step 10
    # (a garbage-collection pause, a checkpoint): everything after moves 20 ms later.
    document = fixture_document("64_bf16_warm_eager_w0a20")
    events = document["traceEvents"]
    step = next(e for e in events if e.get("name") == "ProfilerStep#10")
    end, stall = step["ts"] + step["dur"], 20_000.0
    for event in events:
        if "ts" not in event:
            continue
        if event["ts"] >= end:
            event["ts"] += stall
        elif event.get("ph") == "X" and event["ts"] + event.get("dur", 0) >= end:
            event["dur"] += stall  # the step itself, and what encloses it
    (finding,) = diagnose(write_trace(tmp_path / "stalled.json", document), select=["slow-step"])
    assert finding.evidence["step"] == 10
    assert finding.evidence["outside_ops_us"] >= stall
    assert "runs outside every op and runtime call" in finding.message


def test_slow_step_is_silent_on_a_slow_first_step_and_under_three_times(make_trace) -> None:
    # The first step is cold-start's; a later one 2.5x the others is within what settling
    # steps show.
    events = stalled_steps({0: ("host", 9_000.0), 3: ("host", 1_500.0)})
    assert diagnose(make_trace(events), select=["slow-step"]) == []
    assert [f.rule for f in diagnose(make_trace(events), select=["cold-start"])] == ["cold-start"]


def shape_steps(
    shapes_by_step: list[list[int]], first_us: float = 400.0, step_us: float = 1000.0
) -> list[dict[str, Any]]:
    """Steps of ``step_us``, each calling ``aten::conv`` three times per shape it lists (the
    shape ``[n, 64]``): a call with a shape not called before takes ``first_us``, every
    other call 20 µs."""
    events, seen = [], set()
    for step, shapes in enumerate(shapes_by_step, start=1):
        t = 2 * step_us * step
        events.append(complete_event(f"ProfilerStep#{step}", "user_annotation", t, step_us))
        t += 10
        for n in shapes:
            for _ in range(3):
                dur = 20.0 if n in seen else first_us
                seen.add(n)
                args = {"Input Dims": [[n, 64]], "Input type": ["float"]}
                events.append(complete_event("aten::conv", "cpu_op", t, dur, **args))
                t += dur + 5
    return events


def test_new_shape_cost_names_shapes_that_keep_coming(make_trace) -> None:
    # Every step brings a new shape (a growing sequence): its first call takes 400 µs, the
    # two after it 20 µs.
    (finding,) = diagnose(make_trace(shape_steps([[1], [2], [3], [4]])), select=["new-shape-cost"])
    evidence = finding.evidence
    assert (evidence["op"], evidence["outer_op"]) == ("aten::conv", None)
    assert evidence["slow_first_calls"] == 4 and evidence["shapes_called_again"] == 4
    assert evidence["seen_shape_calls"] == 8 and evidence["expected_median_us"] == 20.0
    assert evidence["in_later_half"] == 2 and evidence["excess_us"] == 4 * 380.0
    assert finding.message == (
        "aten::conv: the first call with each of 4 input shapes takes a median of 400.0 µs, "
        "20× as long as expected (the same shapes' later calls take a median of 20.0 µs); "
        "1520.0 µs more in all, 38% of the steps' CPU time, 2 of them in the later half of "
        "its calls: a cost paid once per new shape, and again as new shapes keep coming."
    )


def test_new_shape_cost_reads_a_shape_called_once_by_its_elements(make_trace) -> None:
    # Steps of shape [1, 64] (three calls, 20 µs each) and, in steps 2 to 4, one call of a new
    # shape [n, 64]: 20 µs per 64 elements would make it 20n µs.
    def steps(first_us: dict[int, float]) -> list[dict[str, Any]]:
        events = shape_steps([[1], [1], [1], [1]], first_us=20.0, step_us=10_000.0)
        for step, (n, dur) in enumerate(first_us.items(), start=2):
            t = 20_000.0 * step + 500
            args = {"Input Dims": [[n, 64]], "Input type": ["float"]}
            events.append(complete_event("aten::conv", "cpu_op", t, dur, **args))
        return events

    # 100 times what the elements say or more: the set-up of a new shape.
    (finding,) = diagnose(
        make_trace(steps({2: 4_000.0, 3: 6_000.0, 4: 8_000.0})), select=["new-shape-cost"]
    )
    assert finding.evidence["shapes_called_again"] == 0
    assert finding.evidence["expected_median_us"] == 60.0  # 3 × 20 µs
    assert "scaled by input elements, suggest a median of 60.0 µs" in finding.message
    # Ten times: a shape of more work per element, no set-up to tell.
    assert (
        diagnose(make_trace(steps({2: 400.0, 3: 600.0, 4: 800.0})), select=["new-shape-cost"]) == []
    )


def test_new_shape_cost_is_silent_on_a_warm_up_and_on_shapes_of_more_work(make_trace) -> None:
    def fires(events: list[dict[str, Any]]) -> bool:
        return bool(diagnose(make_trace(events), select=["new-shape-cost"]))

    assert fires(shape_steps([[1], [2], [3], [4]]))
    # The first step calls every shape first (a warm-up): cold-start's business.
    assert not fires(shape_steps([[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3]]))
    # One new shape per step, but its later calls as slow: a shape of more work, no set-up.
    slow_alike = shape_steps([[1], [2], [3], [4]])
    for event in slow_alike:
        if event["name"] == "aten::conv":
            event["dur"] = 400.0
    assert not fires(slow_alike)
    # No shapes recorded: nothing to group calls by.
    unshaped = shape_steps([[1], [2], [3], [4]])
    for event in unshaped:
        event.pop("args", None)
    assert not fires(unshaped)
    # Each new shape's first call waits in a host sync (a copy back to the host of a tensor
    # that grows every step): as long as the GPU's queued work, whatever the shape.
    syncing = shape_steps([[1], [2], [3], [4]])
    for event in list(syncing):
        if event["name"] == "aten::conv" and event["dur"] == 400.0:
            syncing.append(
                complete_event("cudaStreamSynchronize", "cuda_runtime", event["ts"] + 5, 390)
            )
    assert not fires(syncing)
    # Under 10x the later calls, or under 5% of the steps' CPU time.
    assert not fires(shape_steps([[1], [2], [3], [4]], first_us=190.0))
    assert not fires(shape_steps([[1], [2], [3], [4]], step_us=10_000.0))


def test_many_calls_counts_one_of_two_ops_that_run_inside_each_other(make_trace) -> None:
    # Per step: aten::x holding 60 aten::y, then aten::y around aten::y holding 60 aten::x.
    # 60 of x's 61 calls sit in a y, and 60 of y's 61 (the inner y folded) in an x: each runs
    # nearly only inside the other. The one with more calls stays counted.
    events = []
    for n in range(2):
        t = 100 + 1_200.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1_000),
            complete_event("aten::x", "cpu_op", t + 10, 200),
            *[complete_event("aten::y", "cpu_op", t + 12 + 3 * k, 2.5) for k in range(60)],
            complete_event("aten::y", "cpu_op", t + 250, 700),
            complete_event("aten::y", "cpu_op", t + 260, 600),
            *[complete_event("aten::x", "cpu_op", t + 265 + 9.5 * k, 9) for k in range(60)],
        ]
    (finding,) = diagnose(make_trace(events), select=["many-calls"])
    within = {entry["op"]: entry["within"] for entry in finding.evidence["ops"]}
    assert within == {"aten::x": None, "aten::y": "aten::x"}  # 122 calls each: the first
    assert finding.message.startswith("1 op(s) are called 50+ times per step")
    assert "the most called" not in finding.message and "The other" not in finding.message


def test_cost_in_children_counts_a_call_inside_one_of_its_name_as_part_of_it(make_trace) -> None:
    # Five 10 µs aten::matmul calls, and two of 600 µs that each wrap a 598 µs aten::matmul
    # (an op calling itself, as aten::div does): 7 calls, as the table counts them, not 9,
    # and the two long ones hold 1,200 of the 1,250 µs, not more than all of it.
    events = [complete_event("ProfilerStep#1", "user_annotation", 0, 2000)]
    for i in range(5):
        events += [
            complete_event("aten::matmul", "cpu_op", 10 + 20 * i, 10),
            complete_event("aten::mm", "cpu_op", 11 + 20 * i, 8),
        ]
    for start in (200.0, 900.0):
        events += [
            complete_event("aten::matmul", "cpu_op", start, 600),
            complete_event("aten::matmul", "cpu_op", start + 1, 598),
            complete_event("aten::mm", "cpu_op", start + 2, 596),
        ]
    (finding,) = diagnose(make_trace(events), select=["cost-in-children"])
    assert finding.message.startswith("aten::matmul: 1250.0 µs total")
    assert "2 of its 7 calls hold 96% of it (600.0 to 600.0 µs each" in finding.message
    # With a second child beside the inner call, key_averages() no longer folds it: 9 calls,
    # as the table counts them, of which the two outer ones hold the same 96% (not 192%).
    for start in (200.0, 900.0):
        events.append(complete_event("aten::mul", "cpu_op", start + 599, 1))
    (finding,) = diagnose(make_trace(events, name="two.json"), select=["cost-in-children"])
    assert "of its 9 calls hold 96% of it" in finding.message


def test_cost_in_children_drills_down_to_the_op_holding_the_time() -> None:
    finding = only("4096_bf16_warm_eager", "cost-in-children")
    path = [link["name"] for link in finding.evidence["drill_down"]]
    assert path[-1] == "aten::mm"
    row = finding.evidence["rows"][0]
    assert row["self_us"] <= 0.2 * row["total_us"]


# -- CPU lane ----------------------------------------------------------------------------------


def test_cold_start_names_the_profilers_buffer_request() -> None:
    name = "64_bf16_warm_eager_w0a3"
    evidence = only(name, "cold-start").evidence
    durations = [s["dur"] for s in fixture_steps(name)]
    assert evidence["step"] == 0
    assert evidence["ratio"] == pytest.approx(durations[0] / statistics.median(durations[1:]), 0.01)
    (request,) = raw_spans(name, cat="overhead")
    assert evidence["profiler_overhead"][0]["dur_us"] == pytest.approx(request["dur"], abs=1e-3)
    assert evidence["slowest_call"]["name"] == "cuLaunchKernelEx"


def test_cold_start_is_silent_when_the_first_step_is_only_a_few_times_wider() -> None:
    durations = [s["dur"] for s in fixture_steps("64_bf16_cold_eager")]
    assert 2 < durations[0] / statistics.median(durations[1:]) < 3.5
    assert "cold-start" not in fired("64_bf16_cold_eager")


def altered(tmp_path: Path, name: str, change: Any) -> Path:
    """A copy of a recording with ``change(events)`` applied, written as .json.gz."""
    document = fixture_document(name)
    change(document["traceEvents"])
    return write_trace(tmp_path / f"{name}_altered.json.gz", document)


def _span(events: list[dict], name: str, nth: int = 0, **match: Any) -> dict:
    found = [e for e in events if e.get("ph") == "X" and e["name"] == name]
    found = [e for e in found if all(e.get(k) == v for k, v in match.items())]
    return sorted(found, key=lambda e: e["ts"])[nth]


def a100_like_dead_window(events: list[dict]) -> None:
    """Open step #2 and its label 200 µs earlier: a ~225 µs wait before aten::matmul."""
    for label in ("ProfilerStep#2", "matmul_add"):
        span = _span(events, label, cat="user_annotation")
        span["ts"] -= 200.0
        span["dur"] += 200.0


def test_dead_window_fires_on_a_long_wait_before_the_first_op(tmp_path: Path) -> None:
    path = altered(tmp_path, "64_bf16_cold_eager", a100_like_dead_window)
    findings = diagnose(path)
    (finding,) = [f for f in findings if f.rule == "dead-window"]
    assert finding.evidence["step"] == 2
    assert finding.evidence["first_op"]["name"] == "aten::matmul"
    assert finding.evidence["gap_us"] == pytest.approx(224.7, abs=0.1)
    assert "cold-start" in {f.rule for f in findings}  # the step is 5x wider too
    assert "not the first step" not in finding.message  # the warm-up the rule means


def test_dead_window_in_a_later_step_is_not_called_warm_up(tmp_path: Path) -> None:
    def late(events: list[dict]) -> None:
        """200 µs of nothing right after step #3's label opens: everything later moves."""
        opened = _span(events, "matmul_add", 1, cat="user_annotation")["ts"]
        for event in events:
            if event.get("ph") != "X":
                continue
            if event["ts"] > opened:
                event["ts"] += 200.0
            elif event["ts"] + event.get("dur", 0) > opened:
                event["dur"] += 200.0  # the step and the label around the pause

    (finding,) = diagnose(altered(tmp_path, "64_bf16_cold_eager", late), select=["dead-window"])
    assert finding.evidence["step"] == 3
    assert finding.message.endswith(
        ": not the first step, so no warm-up cost but a stall of that step alone."
    )


def test_dead_window_reports_the_widest_few_of_many_steps(make_trace) -> None:
    # 40 steps, each a label then its first op; in 8 of them the op comes 200 µs late. Each
    # of those stands out, but a finding per step would bury the rest: the 5 widest.
    events = []
    for k in range(40):
        t = 1_000.0 * k
        wait = 200.0 + k if k % 5 == 2 else 2.0
        events += [
            complete_event(f"ProfilerStep#{k}", "user_annotation", t, 600),
            complete_event("forward", "user_annotation", t + 1, 400),
            complete_event("aten::linear", "cpu_op", t + 1 + wait, 50),
        ]
    found = diagnose(make_trace(events), select=["dead-window"])
    late = [k for k in range(40) if k % 5 == 2]
    assert [f.evidence["step"] for f in found] == late[-5:]  # the widest, in step order
    assert all(f.evidence["steps_standing_out"] == len(late) for f in found)
    assert all(f.message.endswith(
        "not the first step, so no warm-up cost (one of the 5 widest of 8 steps that stand out)."
    ) for f in found)  # fmt: skip


def test_dead_window_leaves_out_the_time_in_labels_that_close_before_the_first_op(
    make_trace,
) -> None:
    # Four steps of a label that first fetches a batch (a label of its own), then runs its
    # first op. In step 2 the fetch takes 10 ms: the program's own labelled code, not time
    # before dispatch (it had been "a stall of that step alone" in the dead window). In
    # step 3 the op comes 300 µs late with nothing labelled in between: that is told.
    events = []
    for k in range(4):
        t = 20_000.0 * k
        fetch = 10_000.0 if k == 2 else 50.0
        wait = 300.0 if k == 3 else 5.0
        events += [
            complete_event(f"ProfilerStep#{k}", "user_annotation", t, 15_000),
            complete_event("train_step", "user_annotation", t + 1, 14_000),
            complete_event("fetch_batch", "user_annotation", t + 2, fetch),
            complete_event("aten::linear", "cpu_op", t + 2 + fetch + wait, 50),
        ]
    (finding,) = diagnose(make_trace(events), select=["dead-window"])
    assert finding.evidence["step"] == 3
    assert finding.evidence["gap_us"] == pytest.approx(301.0)  # 1 µs before the fetch
    assert finding.evidence["in_labels_us"] == pytest.approx(50.0)
    assert (
        "301.0 µs pass between entering 'train_step' and aten::linear (besides 50.0 µs in "
        "labels inside it, 'fetch_batch' the longest), against 6.0 µs" in finding.message
    )
    (window,) = [w for w in measures.dead_windows(load_trace(make_trace(events))) if w.step == 2]
    assert window.gap_us == pytest.approx(10_006.0)  # the measure itself is unchanged
    assert (window.in_labels_us, window.longest_label.name) == (10_000.0, "fetch_batch")
    # summary's column reads the same time as the rule.
    steps = cli.summarize(load_trace(make_trace(events)))["steps"]
    assert [s["dead_window_us"] for s in steps] == pytest.approx([6.0, 6.0, 6.0, 301.0])


def test_dead_window_leaves_the_data_loader_s_wait_to_its_own_rule(make_trace) -> None:
    events = []
    for k in range(4):
        t = 20_000.0 * k
        wait = 5_000.0 if k == 2 else 5.0  # waiting for a worker's batch
        label = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
        events += [
            complete_event(f"ProfilerStep#{k}", "user_annotation", t, 15_000),
            complete_event(label, "user_annotation", t + 1, wait + 60),
            complete_event("aten::empty", "cpu_op", t + 1 + wait, 50),
        ]
    assert diagnose(make_trace(events), select=["dead-window"]) == []
    # The same fetch inside the step's own label (next() in the loop's body): the label's
    # first op is the loader's, and its wait is still not a dead window.
    nested = []
    for k in range(4):
        t = 20_000.0 * k
        wait = 5_000.0 if k == 2 else 5.0
        nested += [
            complete_event(f"ProfilerStep#{k}", "user_annotation", t, 15_000),
            complete_event("body", "user_annotation", t + 1, 14_000),
            complete_event(label, "user_annotation", t + 2, wait + 60),
            complete_event("aten::empty", "cpu_op", t + 2 + wait, 50),
            complete_event("aten::linear", "cpu_op", t + 200 + wait, 50),
        ]
    path = make_trace(nested, name="nested.json")
    assert diagnose(path, select=["dead-window"]) == []
    windows = measures.dead_windows(load_trace(path))
    assert [w.first_op.name for w in windows] == ["aten::empty"] * 4  # measured all the same
    assert [w.dead_us for w in windows] == [1.0] * 4  # up to the fetch, not through it
    # Host time before the fetch begins is the label's own, and is told.
    before = []
    for k in range(4):
        t = 20_000.0 * k
        spin = 4_000.0 if k == 2 else 10.0
        before += [
            complete_event(f"ProfilerStep#{k}", "user_annotation", t, 15_000),
            complete_event("body", "user_annotation", t + 1, 14_000),
            complete_event(label, "user_annotation", t + 1 + spin, 65),
            complete_event("aten::empty", "cpu_op", t + 6 + spin, 50),
        ]
    (finding,) = diagnose(make_trace(before, name="before.json"), select=["dead-window"])
    assert finding.evidence["step"] == 2 and finding.evidence["gap_us"] == 4_000.0
    assert "4000.0 µs pass between entering 'body' and fetching a batch (enumerate(" in (
        finding.message
    )


def test_dead_window_reports_the_widest_windows_not_the_slowest_fetches(make_trace) -> None:
    # Eight of ten steps stand out. Steps 2 and 3 wait 5 ms in a data loader's fetch but
    # only 250 µs before it; steps 4-9 wait 300 µs and more before their first op. The five
    # widest windows are those of steps 5-9, whatever the fetches took.
    label = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = []
    for k in range(10):
        t = 20_000.0 * k
        before = 250.0 if k in (2, 3) else (300.0 + 10 * k if k >= 4 else 2.0)
        fetch = 5_000.0 if k in (2, 3) else 20.0
        events += [
            complete_event(f"ProfilerStep#{k}", "user_annotation", t, 15_000),
            complete_event("body", "user_annotation", t + 1, 14_000),
            complete_event(label, "user_annotation", t + 1 + before, fetch + 30),
            complete_event("aten::empty", "cpu_op", t + 1 + before + fetch, 10),
        ]
    found = diagnose(make_trace(events), select=["dead-window"])
    assert [f.evidence["step"] for f in found] == [5, 6, 7, 8, 9]
    assert all(f.evidence["data_loader"]["name"] == label for f in found)


def test_dead_window_leaves_out_the_runtime_calls_made_in_it(make_trace) -> None:
    # DDP's forward waits on an event (cudaEventSynchronize) before its first op in steps 2
    # and 3: the host waited for the GPU, no warm-up cost. Step 3 also waits 1 ms unrecorded.
    def steps(waits: dict[int, tuple[float, float]]) -> list[dict]:
        events = []
        for k in (1, 2, 3):
            t = 10_000.0 * k
            gap, sync = waits.get(k, (200.0, 0.0))
            events += [
                complete_event(f"ProfilerStep#{k}", "user_annotation", t, 5_000),
                complete_event("forward", "user_annotation", t + 1, 4_000),
                complete_event("aten::linear", "cpu_op", t + 1 + gap, 10),
            ]
            if sync:
                events.append(complete_event("cudaEventSynchronize", "cuda_runtime", t + 50, sync))
        return events

    waited = steps({2: (1_500.0, 1_350.0), 3: (1_500.0, 1_350.0)})
    assert diagnose(make_trace(waited), select=["dead-window"]) == []
    (window,) = [w for w in measures.dead_windows(load_trace(make_trace(waited))) if w.step == 2]
    assert window.in_calls_us == 1_350.0 and window.dead_us == 150.0
    assert window.longest_call.name == "cudaEventSynchronize"
    longer = steps({3: (2_500.0, 1_350.0)})
    (finding,) = diagnose(make_trace(longer, name="longer.json"), select=["dead-window"])
    assert finding.evidence["step"] == 3 and finding.evidence["in_calls_us"] == 1_350.0
    assert finding.message.startswith(
        "In ProfilerStep#3, 1150.0 µs pass between entering 'forward' and aten::linear "
        "(besides 1350.0 µs in runtime calls, cudaEventSynchronize the longest), against "
        "200.0 µs in the quickest other step (6×)"
    )


def test_dead_window_is_silent_on_the_h100_cold_run() -> None:
    # The window exists (~25 µs in step #2 against ~7 µs later), but no longer than in the
    # warm run: not the one-time cost the rule is about.
    assert "dead-window" not in fired("64_bf16_cold_eager")


def test_planned_launch_on_the_fp32_gemm() -> None:
    group = only("4096_fp32_warm_eager", "planned-launch").evidence["groups"][0]
    assert group["planning_calls_per_launch"] == {"cudaFuncGetAttributes": 1}
    assert group["api"] == "cudaLaunchKernelExC"
    assert group["op"] == "aten::mm"
    assert group["count"] == 3


def test_driver_and_plain_launches_show_their_footprints() -> None:
    name = "64_bf16_warm_eager"
    driver = only(name, "driver-launch").evidence["groups"][0]
    plain = only(name, "plain-launch").evidence["groups"][0]
    assert (driver["op"], driver["api"]) == ("aten::mm", "cuLaunchKernelEx")
    assert (plain["op"], plain["api"]) == ("aten::add", "cudaLaunchKernel")
    assert driver["footprint"]["shared_memory_bytes"] > 0
    assert plain["footprint"]["shared_memory_bytes"] == 0
    assert plain["footprint"]["registers_per_thread"] < driver["footprint"]["registers_per_thread"]


def test_a_launch_outside_any_op_reads_as_such(make_trace: Any) -> None:
    # A trace recorded without CPU ops: the launch has no op around it.
    events = [
        complete_event("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1),
        complete_event("add_kernel", "kernel", 20, 10, pid=0, tid=7, correlation=1),
    ]
    (hit,) = diagnose(make_trace(events), select=["plain-launch"])
    assert hit.evidence["groups"][0]["op"] == "(no op)"
    assert "most often outside any op → add_kernel" in hit.message


PER_THREAD_STREAM = {
    "cudaLaunchKernel": "cudaLaunchKernel_ptsz",
    "cuLaunchKernelEx": "cuLaunchKernelEx_ptsz",
    "cudaGraphLaunch": "cudaGraphLaunch_ptsz",
    "cudaMemcpyAsync": "cudaMemcpyAsync_ptsz",
    "cudaMemsetAsync": "cudaMemsetAsync_ptsz",
    "cudaStreamSynchronize": "cudaStreamSynchronize_ptsz",
}
"""The runtime calls of a program built with ``--default-stream per-thread``, as CUPTI names
them."""


def _per_thread_stream(events: list[dict]) -> None:
    for event in events:
        if event.get("cat") in ("cuda_runtime", "cuda_driver"):
            event["name"] = PER_THREAD_STREAM.get(event["name"], event["name"])


def _without_call_names(finding: Finding) -> tuple[str, str]:
    text = json.dumps([finding.message, finding.evidence], sort_keys=True)
    for plain, per_thread in PER_THREAD_STREAM.items():
        text = text.replace(per_thread, plain)
    return finding.rule, text


@pytest.mark.parametrize("name", ["4096_bf16_item-sync", "4096_bf16_warm_compile-reduce-overhead"])
def test_per_thread_default_stream_calls_read_like_the_plain_ones(
    tmp_path: Path, name: str
) -> None:
    # Launches, graph replays, copies and host syncs: the same findings, under the _ptsz names.
    per_thread = diagnose(altered(tmp_path, name, _per_thread_stream))
    assert {f.rule for f in per_thread} >= {"plain-launch"} | (
        {"intra-step-gap"} if name in ITEM_SYNC else {"cuda-graph"}
    )
    assert "cudaLaunchKernel_ptsz" in json.dumps([f.evidence for f in per_thread])
    assert sorted(map(_without_call_names, per_thread)) == sorted(
        map(_without_call_names, findings_of(name))
    )


def test_sync_flush_reads_a_busy_gpu_as_queued_work() -> None:
    finding = only("4096_bf16_warm_eager", "sync-flush")
    (sync,) = raw_spans("4096_bf16_warm_eager", name="cudaDeviceSynchronize")
    assert finding.evidence["sync"]["dur_us"] == pytest.approx(sync["dur"], abs=1e-3)
    assert finding.evidence["gpu_busy_fraction"] > 0.5
    assert "queued work" in finding.message


def test_sync_flush_reads_an_idle_gpu_as_the_flush_itself(tmp_path: Path) -> None:
    def long_sync(events: list[dict]) -> None:  # the post's A100: 1.78 ms over 26 µs of work
        _span(events, "cudaDeviceSynchronize")["dur"] = 1780.0

    findings = diagnose(altered(tmp_path, "64_bf16_cold_eager", long_sync))
    (finding,) = [f for f in findings if f.rule == "sync-flush"]
    assert finding.evidence["gpu_busy_fraction"] < 0.05
    assert "flush itself" in finding.message


def test_hidden_memcpy_is_the_addmm_bias_copy() -> None:
    group = only("4096_bf16_warm_compile", "hidden-memcpy").evidence["groups"][0]
    assert (group["op"], group["kind"], group["api"]) == ("aten::addmm", "DtoD", "cudaMemcpyAsync")
    assert group["bytes"] == 4096 * 4096 * 2  # the bf16 bias, whole
    assert group["through"] is None  # addmm calls cudaMemcpyAsync itself


def test_hidden_memcpy_follows_copy_ops_up_to_the_aten_op_that_made_them(tmp_path: Path) -> None:
    naive = "attention_8x16x1024x64_bf16_naive"
    group = only(naive, "hidden-memcpy").evidence["groups"][0]
    # masked_fill → clone → copy_ → cudaMemcpyAsync: the copy is masked_fill's.
    assert (group["op"], group["kind"], group["count"]) == ("aten::masked_fill", "DtoD", 3)
    assert group["bytes"] == 8 * 16 * 1024 * 1024 * 2
    # The message names the copy op that made the call, as the summary's copy table does.
    assert group["through"] == "aten::copy_"
    message = only(naive, "hidden-memcpy").message
    assert "aten::masked_fill (through aten::copy_) → cudaMemcpyAsync" in message

    def called_from_user_code(events: list[dict]) -> None:
        # The same clone, as if code (a function recorded as an op) had asked for it.
        for event in events:
            if event.get("name") == "aten::masked_fill":
                event["name"] = "forward"

    found = diagnose(altered(tmp_path, naive, called_from_user_code))
    assert "hidden-memcpy" not in {f.rule for f in found}


@pytest.mark.parametrize(
    ("category", "copy_call"),
    [("xpu_runtime", "urEnqueueUSMMemcpy"), ("xpu_driver", "zeCommandListAppendMemoryCopy")],
)
def test_hidden_memcpy_reads_an_intel_xpus_copy_calls(
    tmp_path: Path, category: str, copy_call: str
) -> None:
    # The same clone on an Intel XPU: Unified Runtime's urEnqueueUSMMemcpy issues the copy,
    # or, where the trace records the driver's calls, Level Zero's.
    naive = "attention_8x16x1024x64_bf16_naive"

    def on_an_xpu(events: list[dict]) -> None:
        for event in events:
            if event.get("cat") == "cuda_runtime":
                event["cat"] = category
                if event["name"] == "cudaMemcpyAsync":
                    event["name"] = copy_call
                elif event["name"] == "cudaLaunchKernel":
                    event["name"] = "urEnqueueKernelLaunch"

    path = altered(tmp_path, naive, on_an_xpu)
    (finding,) = [f for f in diagnose(path) if f.rule == "hidden-memcpy"]
    group = finding.evidence["groups"][0]
    assert (group["op"], group["kind"], group["count"]) == ("aten::masked_fill", "DtoD", 3)
    assert group["api"] == copy_call


def test_the_copy_of_item_is_not_hidden() -> None:
    # loss.item() in every step: aten::item -> aten::_local_scalar_dense -> a 4 B DtoH copy.
    # The copy is the value the code asked for; what it costs is the sync.
    name = "4096_bf16_item-sync"
    facts = Facts(load_trace(gpu_fixture(name)))
    item_copies = [c for c in facts.copies if c.launch.op.name == "aten::_local_scalar_dense"]
    assert len(item_copies) == 20 and {c.kind for c in item_copies} == {"DtoH"}
    assert "hidden-memcpy" not in {f.rule for f in diagnose(gpu_fixture(name))}


# -- GPU lane ----------------------------------------------------------------------------------


def test_buffer_request_lands_inside_the_first_mm() -> None:
    name = "64_bf16_warm_eager_w0a20"
    evidence = only(name, "buffer-request").evidence
    assert (evidence["step"], evidence["requests"], evidence["steps"]) == (0, 1, 20)
    assert evidence["during_op"]["name"] == "aten::mm"
    assert evidence["first_launch"]["name"] == "cuLaunchKernelEx"


def test_buffer_request_names_the_lane_offset_only_when_it_came_first(tmp_path) -> None:
    # The same recording with the request moved after the step's first launch call returned:
    # it cannot have delayed that launch, and the step's lane offset is not its business.
    document = fixture_document("64_bf16_warm_eager_w0a20")
    events = document["traceEvents"]
    step = next(e for e in events if e.get("name") == "ProfilerStep#0")
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    first_launch = min(
        (launches[e["args"]["correlation"]] for e in events if e.get("cat") == "kernel"),
        key=lambda launch: (
            not step["ts"] <= launch["ts"] < step["ts"] + step["dur"],
            launch["ts"],
        ),
    )
    request = next(e for e in events if e.get("name") == "Activity Buffer Request")
    assert request["ts"] < first_launch["ts"] + first_launch["dur"]
    (hit,) = diagnose(write_trace(tmp_path / "before.json", document), select=["buffer-request"])
    assert "first_launch" in hit.evidence and "first GPU work starts" in hit.message
    request["ts"] = first_launch["ts"] + first_launch["dur"] + 1.0
    (hit,) = diagnose(write_trace(tmp_path / "after.json", document), select=["buffer-request"])
    assert hit.evidence["step"] == 0
    assert "first_launch" not in hit.evidence and "first GPU work" not in hit.message


def _request_in_an_op(make_trace, *, second_thread: bool) -> list:
    # No steps: the profiler's buffer request [10, 90) stalls the one op running then, whose
    # self time it becomes (80 of the op's 95 µs of self time).
    events = [
        complete_event("aten::mm", "cpu_op", 0, 100),
        complete_event("cudaLaunchKernel", "cuda_runtime", 92, 5, correlation=1),
        complete_event("gemm", "kernel", 98, 10, pid=0, tid=7, correlation=1),
        complete_event("Activity Buffer Request", "overhead", 10, 80, pid=-1, tid=0),
    ]
    if second_thread:  # another thread's op spans the request too: which one it held is unknown
        events.append(complete_event("aten::add", "cpu_op", 5, 90, tid=430))
    return diagnose(make_trace(events), select=["buffer-request"])


def test_buffer_request_outside_steps_names_the_op_it_stalled(make_trace) -> None:
    (hit,) = _request_in_an_op(make_trace, second_thread=False)
    assert hit.evidence["step"] is None and hit.evidence["during_op"]["name"] == "aten::mm"
    assert hit.evidence["share_of_op_self"] == pytest.approx(80 / 95, abs=1e-4)
    assert "while aten::mm runs" in hit.message and "84% of aten::mm's self time" in hit.message
    assert "(1 in the trace, no ProfilerStep#N)" in hit.message  # not "0 steps"
    (hit,) = _request_in_an_op(make_trace, second_thread=True)
    assert "during_op" not in hit.evidence and "self time" not in hit.message


def test_gemm_kernel_is_found_by_its_op_not_its_name() -> None:
    for name, op in (("4096_fp32_warm_eager", "aten::mm"), ("64_bf16_warm_compile", "aten::addmm")):
        rows = only(name, "gemm-kernel").evidence["kernels"]
        assert [row["ops"] for row in rows] == [{op: 3}]


def test_gemm_kernel_says_when_graph_replays_run_more_than_it_ranks(make_trace) -> None:
    # A decode loop: one eager aten::mm (prefill), then graph replays of kernels captured
    # before the recording, which no op of the trace launches and which outweigh it.
    events = [complete_event("aten::mm", "cpu_op", 0, 10)]
    events.append(complete_event("cudaLaunchKernel", "cuda_runtime", 2, 5, correlation=1))
    events.append(complete_event("prefill_gemm", "kernel", 10, 20, pid=0, tid=7, correlation=1))
    for n in range(3):
        start = 100 + 200 * n
        events += [
            complete_event("cudaGraphLaunch", "cuda_runtime", start, 10, correlation=10 + n),
            complete_event("decode_gemm", "kernel", start + 25, 90, pid=0, tid=7,
                           correlation=10 + n),
        ]  # fmt: skip
    (hit,) = diagnose(make_trace(events), select=["gemm-kernel"])
    assert (hit.evidence["only_replayed_kernels"], hit.evidence["only_replayed_us"]) == (3, 270.0)
    assert hit.message.endswith(
        "Graph replays also run 3 kernel(s) that no op of the trace launches, 93% of GPU time: "
        "a GEMM among them is not ranked here, as the trace does not say which op it serves."
    )
    # Replays lighter than the largest GEMM ranked: nothing to add.
    for event in events:
        if event["name"] == "decode_gemm":
            event["dur"] = 5.0
    (hit,) = diagnose(make_trace(events, name="light.json"), select=["gemm-kernel"])
    assert "only_replayed_kernels" not in hit.evidence and "Graph replays" not in hit.message


def gemm_events(
    n: int, *, dtype: str = "c10::BFloat16", kernel: str = "gemm_kernel_align1", k: int = 512
) -> list[dict]:
    """Three steps of a language-model head, aten::mm of [4096, k] @ [k, n], 1 ms each, with
    a 100 µs elementwise kernel beside it."""
    events = []
    for step in range(3):
        t = 2000.0 * step
        shapes = {"Input Dims": [[4096, k], [k, n]], "Input type": [dtype, dtype]}
        events += [
            complete_event(f"ProfilerStep#{step}", "user_annotation", t, 1900),
            complete_event("aten::mm", "cpu_op", t + 10, 50, **shapes),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=step + 1),
            complete_event(kernel, "kernel", t + 30, 1000, pid=0, tid=7, correlation=step + 1),
            complete_event("aten::add", "cpu_op", t + 100, 20),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 105, 5, correlation=step + 50),
            complete_event("add_kernel", "kernel", t + 1040, 100, pid=0, tid=7,
                           correlation=step + 50),
        ]  # fmt: skip
    return events


def test_gemm_alignment_names_a_vocabulary_that_leaves_rows_unaligned(make_trace) -> None:
    # GPT-2's head: 50,257 bf16 columns, 100,514 bytes a row, no multiple of 16.
    (hit,) = diagnose(make_trace(gemm_events(50_257)), select=["gemm-alignment"])
    assert hit.evidence["gpu_share"] == pytest.approx(1000 / 1100, abs=1e-4)
    (shape,) = hit.evidence["shapes"]
    assert shape["unaligned"] == ["n=50257"] and shape["calls"] == 3
    assert shape["tflops"] == pytest.approx(2 * 4096 * 50_257 * 512 / 1e-3 / 1e12, rel=1e-3)
    assert hit.message == (
        "GEMMs whose rows are not 16-byte aligned take 91% of GPU time (1 shape(s)); the "
        "largest, aten::mm of [4096, 512] @ [512, 50257] (c10::BFloat16), n=50257 not a "
        "multiple of 8, runs 3× for 3,000.0 µs at 210.8 TFLOP/s in gemm_kernel_align1, whose "
        "name says it is built for data aligned to 1 element(s)."
    )
    # Silent: a padded vocabulary; a kernel for aligned data; an inner size k whose row the
    # trace cannot tell (layout unrecorded) under a kernel that does not say; fp32 on the
    # CUDA cores; a size too small for padding to matter.
    for events in (
        gemm_events(50_304),
        gemm_events(50_257, kernel="gemm_kernel_align8"),
        gemm_events(512, k=50_257, kernel="gemm_kernel"),
        gemm_events(50_257, dtype="float", kernel="sgemm_kernel_align1"),
        gemm_events(10),
    ):
        assert diagnose(make_trace(events, name="silent.json"), select=["gemm-alignment"]) == []
    # TF32 GEMMs read fp32 in the tensor cores: 4-element rows.
    tf32 = gemm_events(50_257, dtype="float", kernel="tf32gemm_kernel_align1")
    (hit,) = diagnose(make_trace(tf32, name="tf32.json"), select=["gemm-alignment"])
    assert "[512, 50257] (float in TF32), n=50257 not a multiple of 4," in hit.message


def test_bias_copy_and_memset_precede_the_compiled_gemm() -> None:
    name = "4096_bf16_warm_compile"
    copy = only(name, "bias-copy").evidence
    memset = only(name, "memset-before-gemm").evidence
    (addmm_kernel,) = {e["name"] for e in raw_spans(name, cat="kernel")}
    assert copy["gemm_kernel"] == memset["gemm_kernel"] == addmm_kernel
    assert copy["bytes"] == 4096 * 4096 * 2
    assert memset["bytes"] == 4
    assert copy["count"] == memset["count"] == 3
    assert copy["first"]["gap_us"] >= 0
    # 4 bytes in under a µs: a few MB/s, given to two significant digits, not rounded to 0.
    memsets = [e for e in raw_spans(name, cat="gpu_memset")]
    rate = statistics.median(4 / (e["dur"] * 1000) for e in memsets)
    assert 0 < rate < 0.05
    assert memset["median_bandwidth_gb_s"] == pytest.approx(rate, rel=0.05)


# -- dispatch chain ----------------------------------------------------------------------------


def test_call_chain_runs_from_the_step_to_the_kernel() -> None:
    chain = only("64_bf16_warm_eager", "call-chain").evidence["chain"]
    names = [link["name"] for link in chain]
    assert names[0].startswith("ProfilerStep#")
    assert names[1:5] == ["matmul_add", "aten::matmul", "aten::mm", "cuLaunchKernelEx"]
    assert chain[-1]["cat"] == "kernel"


def test_call_chain_is_silent_without_gpu_work(make_trace: Any) -> None:
    path = make_trace(
        [
            complete_event("ProfilerStep#1", "user_annotation", 0, 100),
            complete_event("aten::add", "cpu_op", 10, 20),
        ]
    )
    assert "call-chain" not in {f.rule for f in diagnose(path)}


def test_mm_dispatch_sees_the_folded_batch() -> None:
    assert only("8x64x64_bf16_warm_eager", "mm-dispatch").evidence["folded"] == 3
    assert only("64_bf16_warm_eager", "mm-dispatch").evidence["folded"] == 0


def test_bmm_dispatch_fires_on_a_batched_matmul(tmp_path: Path) -> None:
    def batched(events: list[dict]) -> None:
        for event in events:
            if event.get("cat") == "cpu_op" and event["name"] == "aten::mm":
                event["name"] = "aten::bmm"

    findings = diagnose(altered(tmp_path, "8x64x64_bf16_warm_eager", batched))
    (finding,) = [f for f in findings if f.rule == "bmm-dispatch"]
    assert finding.evidence["count"] == 3
    assert finding.evidence["parents"] == {"aten::matmul": 3}
    assert "mm-dispatch" not in {f.rule for f in findings}


def test_addmm_fusion_with_and_without_a_bias_copy() -> None:
    compiled = only("64_bf16_warm_compile", "addmm-fusion").evidence
    linear = only("train_tiny_transformer_a3", "addmm-fusion").evidence
    assert compiled["with_bias_copy"] == compiled["count"] == 3
    assert linear["with_bias_copy"] == 0
    assert linear["parents"] == {"aten::linear": linear["count"]}


def test_addmm_nested_in_itself_is_called_by_its_callers_caller(make_trace) -> None:
    # torch ~1.9 records aten::addmm re-entered by its dispatch inside aten::addmm; called
    # from a step directly, each step names itself.
    events = []
    for n in range(3):
        t = 1000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 500),
            complete_event("aten::addmm", "cpu_op", t + 10, 100),
            complete_event("aten::addmm", "cpu_op", t + 20, 80),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 30, 5, correlation=n + 1),
            complete_event("gemm", "kernel", t + 50, 40, pid=0, tid=7, correlation=n + 1),
        ]
    (finding,) = diagnose(make_trace(events), select=["addmm-fusion"])
    assert finding.evidence["parents"] == {"ProfilerStep#N": 3}
    assert "(under ProfilerStep#N)" in finding.message


@pytest.mark.parametrize(
    ("gemm", "reduction"),
    [
        ("volta_sgemm_64x32_sliced1x4_nn", "void splitKreduce_kernel<float, float, float>(...)"),
        # fp32 on an H100 (torch 2.11, cuBLAS 13): the xmma GEMM, then its split-K reduction.
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize2x4x1_ffma_"
            "aligna4_alignc4_execute_kernel__5x_cublas",
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize2x4x1_ffma_"
            "aligna4_alignc4_execute_split_k_kernel__5x_cublas",
        ),
    ],
)
def test_cublas_helper_kernels_are_no_gemms(make_trace, gemm: str, reduction: str) -> None:
    # A split-K GEMM: cuBLAS launches the GEMM, then a kernel that adds up its partial sums.
    events = []
    for n in range(3):
        t = 1000.0 * n
        c = 10 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 500),
            complete_event("aten::linear", "cpu_op", t + 5, 200),
            complete_event("aten::addmm", "cpu_op", t + 10, 100),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=c + 1),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 30, 5, correlation=c + 2),
            complete_event(gemm, "kernel", t + 40, 50, pid=0, tid=7, correlation=c + 1),
            complete_event(reduction, "kernel", t + 95, 3, pid=0, tid=7, correlation=c + 2),
        ]
    found = {
        f.rule: f for f in diagnose(make_trace(events), select=["addmm-fusion", "gemm-kernel"])
    }
    assert "on the GPU: GEMM kernel + cuBLAS helper kernel" in found["addmm-fusion"].message
    assert found["addmm-fusion"].evidence["kernels"] == {gemm: 3}
    assert found["gemm-kernel"].evidence["gemm_kernels"] == 1


# -- torch.compile -----------------------------------------------------------------------------


def test_compiling_recorded_reads_the_compile_labels_in_each_step(make_trace) -> None:
    # Step 0 compiles (Dynamo's label over 450 of its 560 µs, Inductor's inside it), and a
    # recompiled frame is entered in step 2; the other steps run their 70 µs.
    events = cold_steps(50.0, 500.0)
    events += [
        complete_event("dynamo", "user_annotation", 5.0, 450.0),
        complete_event("compile_fx_inner (dynamo_timed)", "user_annotation", 100.0, 300.0),
        complete_event("Torch-Compiled Region: 0/1", "user_annotation", 20_010.0, 50.0),
    ]
    findings = diagnose(make_trace(events), select=["compiling-recorded", "cold-start"])
    hit = next(f for f in findings if f.rule == "compiling-recorded")
    assert hit.severity == "warning"
    assert hit.evidence["compiling_steps"] == [0]
    assert hit.evidence["median_step_compiling_us"] == 450.0
    assert [row["compiling_us"] for row in hit.evidence["steps"]] == [450.0, 0.0, 0.0, 0.0]
    assert hit.evidence["median_other_cpu_us"] == 70.0
    assert hit.evidence["recompiled"] == []  # 0/1 is entered in a step that does not compile
    assert hit.message.startswith(
        "torch.compile was compiling for 25% or more of the CPU time of 1 of 4 steps: "
        "ProfilerStep#0, for 450.0 of its 560.0 µs (80%); the other 3 step(s) take a median "
        "of 70.0 µs:"
    )
    cold = next(f for f in findings if f.rule == "cold-start")
    assert cold.evidence["compiling"] == {"us": 450.0, "median_other_us": 0.0}
    assert (
        "; torch.compile was compiling for 450.0 µs of it (a median of 0.0 µs in the other "
        "steps; the difference is 92% of the extra 490.0 µs)"
    ) in cold.message
    # The same label of the program's own: no compiler, nothing said.
    events[-3]["name"] = "my_label"
    events[-2]["name"] = "my_inner_label"
    findings = diagnose(make_trace(events), select=["compiling-recorded", "cold-start"])
    assert [f.rule for f in findings] == ["cold-start"]
    assert "compiling" not in findings[0].evidence


def test_compiling_recorded_names_the_recompiles_and_stays_under_a_quarter_silent(
    make_trace,
) -> None:
    # Every step compiles a frame again for 60 of its 70 µs (Region 0/N entered after it).
    events = cold_steps(50.0, 10.0)
    for n in range(4):
        t = 10_000.0 * n
        events += [
            complete_event("dynamo", "user_annotation", t + 1.0, 60.0),
            complete_event(f"Torch-Compiled Region: 0/{n + 1}", "user_annotation", t + 62, 5.0),
        ]
    (hit,) = diagnose(make_trace(events), select=["compiling-recorded"])
    assert hit.evidence["compiling_steps"] == [0, 1, 2, 3]
    assert hit.evidence["recompiled"] == ["0/1", "0/2", "0/3", "0/4"]
    assert "of 4 of 4 steps (86%); in the median of them" in hit.message
    assert "regions 0/1, 0/2, 0/3, 0/4 are recompiles" in hit.message
    assert "median_other_cpu_us" not in hit.evidence
    # 15 µs of each 70 µs step (21%): under a quarter, silent.
    for event in events:
        if event["name"] == "dynamo":
            event["dur"] = 15.0
    assert diagnose(make_trace(events), select=["compiling-recorded"]) == []


def test_compiling_recorded_reads_a_recording_without_steps(make_trace) -> None:
    events = [
        complete_event("dynamo", "user_annotation", 0.0, 800.0),
        complete_event("aten::mm", "cpu_op", 850.0, 50.0),
    ]
    (hit,) = diagnose(make_trace(events), select=["compiling-recorded"])
    assert hit.evidence == {
        "window": "recording",
        "recording_cpu_us": 900.0,
        "recording_compiling_us": 800.0,
        "recording_compiling_share": 0.8889,
        "recompiled": [],
    }
    assert hit.message.startswith(
        "Over the whole recording (no profiler steps to compare) torch.compile was compiling "
        "for 800.0 of the 900.0 µs from the host's first event to its last (89%):"
    )
    # Compiling on the GPU's lane (a label copied there) is no compiling on the host.
    events[0].update(pid=0, tid=7, cat="gpu_user_annotation")
    assert diagnose(make_trace(events), select=["compiling-recorded"]) == []


def test_compiling_recorded_reads_the_steps_process_and_the_active_time(make_trace) -> None:
    # Two processes merged in one file, each with steps 0-3: only the other one compiles.
    events = []
    for pid, offset in ((429, 0.0), (500, 3.0)):
        for n in range(4):
            t = 1000.0 * n + offset
            events += [
                complete_event(f"ProfilerStep#{n}", "user_annotation", t, 900, pid=pid, tid=pid),
                complete_event("aten::mm", "cpu_op", t + 10, 100, pid=pid, tid=pid),
            ]
    events.append(complete_event("dynamo", "cpu_op", 1200.0, 600.0, pid=500, tid=500))
    assert diagnose(make_trace(events), select=["compiling-recorded"]) == []
    # No steps, and a long quiet stretch: the share is of the host's active time, as the
    # bound rules read it, and overhead-bound points to the finding that says so.
    events = [
        complete_event("dynamo", "user_annotation", 0.0, 1500.0),
        *launching("aten::mm", 1600.0, 2400.0, "k", 10.0, correlation=1),
        *launching("aten::mm", 40_000.0, 2000.0, "k", 10.0, correlation=2),
    ]
    findings = diagnose(make_trace(events), select=["compiling-recorded", "overhead-bound"])
    bound, hit = findings
    assert (bound.rule, hit.rule) == ("overhead-bound", "compiling-recorded")
    assert hit.evidence["recording_cpu_us"] == bound.evidence["recording_cpu_us"] == 6000.0
    assert hit.evidence["recording_compiling_share"] == 0.25
    assert "less the stretches with nothing on any thread or GPU (25%)" in hit.message
    assert bound.message.endswith("1500.0 µs of the recording (25%: see compiling-recorded).")


def test_a_compile_label_filed_as_an_op_is_no_slow_op_or_call(make_trace) -> None:
    # torch 2.11 files the compile labels as cpu_op: every step recompiles, the first longest.
    events = cold_steps(50.0, 10.0)
    for n, dur in enumerate((4500.0, 800.0, 800.0, 800.0)):
        events[4 * n]["dur"] = dur + 100  # the step holds its compile
        events.append(complete_event("dynamo", "cpu_op", 10_000.0 * n + 80, dur))
    findings = diagnose(make_trace(events), select=["cold-start", "overhead-bound"])
    cold = next(f for f in findings if f.rule == "cold-start")
    assert "slowest_op" not in cold.evidence and "dynamo took" not in cold.message
    assert cold.evidence["compiling"] == {"us": 4500.0, "median_other_us": 800.0}
    bound = next(f for f in findings if f.rule == "overhead-bound")
    assert "one call" not in bound.message and "longest_call" not in str(bound.evidence)
    assert "torch.compile was compiling for 800.0 µs of the step" in bound.message


def test_the_bound_rules_leave_a_step_that_compiled_out_of_their_sample(make_trace) -> None:
    events = cold_steps(50.0, 10.0)
    events[0]["dur"] = 4600.0
    for n in (1, 2, 3):
        events[4 * n]["dur"] = 200.0  # a 10 µs kernel each: 5% busy
    events.append(complete_event("dynamo", "cpu_op", 80.0, 4500.0))
    (bound,) = diagnose(make_trace(events), select=["overhead-bound"])
    assert [row["step"] for row in bound.evidence["steps"]] == [1, 2, 3]
    # Every step compiling: they are all there is to read.
    for n in (1, 2, 3):
        events[4 * n]["dur"] = 4600.0
        events.append(complete_event("dynamo", "cpu_op", 10_000.0 * n + 80, 4500.0))
    (bound,) = diagnose(make_trace(events), select=["overhead-bound"])
    assert [row["step"] for row in bound.evidence["steps"]] == [0, 1, 2, 3]
    assert "torch.compile was compiling for 4500.0 µs of the step" in bound.message


def test_cold_start_says_a_compile_longer_than_the_extra_in_words(make_trace) -> None:
    events = cold_steps(20.0, 10.0)
    events[0]["dur"] = 1000.0
    for n in (1, 2, 3):
        events[4 * n]["dur"] = 200.0
    events.append(complete_event("dynamo", "user_annotation", 60.0, 930.0))
    (hit,) = diagnose(make_trace(events), select=["cold-start"])
    assert hit.message.endswith(
        "torch.compile was compiling for 930.0 µs of it (a median of 0.0 µs in the other "
        "steps; the difference is more than the whole extra 800.0 µs)."
    )


def test_compiled_region_flags_a_recompiled_frame() -> None:
    assert only("4096_bf16_warm_compile", "compiled-region").evidence["recompiled"] == [
        "Torch-Compiled Region: 0/1"
    ]
    assert only("64_bf16_warm_compile", "compiled-region").evidence["recompiled"] == []


def test_cache_lookup_and_graph_hash_in_every_step() -> None:
    name = "64_bf16_warm_compile"
    lookup = only(name, "dynamo-cache-lookup").evidence
    assert lookup["per_step"] == {"2": 1, "3": 1, "4": 1}
    hit = only(name, "compiled-graph-cache-hit").evidence
    (call,) = {e["name"] for e in raw_spans(name, cat="cpu_op") if e["name"].startswith("## ")}
    assert hit["hash"] in call
    assert hit["steps"] == [2, 3, 4]
    assert only(name, "aot-wrapper").evidence["backward_in_trace"] is False


def test_autograd_nodes_run_while_compiling_are_no_backward_pass() -> None:
    # Forward calls only, gradients enabled: AOTAutograd runs autograd nodes as it traces the
    # backward graph, inside its compile labels (it had said "also runs a backward pass").
    def backward_nodes(name: str) -> tuple[int, int]:
        """(autograd nodes, those with a compile label around them), from the raw JSON."""
        path = FIXTURES / "cpu" / f"{name}.json.gz"
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
        labels = [e for e in spans if e["name"] in ("aot_trace_joint_graph", "dynamo")]
        nodes = [e for e in spans if e["name"].startswith("autograd::engine::evaluate_function")]
        inside = [
            n
            for n in nodes
            if any(
                label["ts"] <= n["ts"]
                and n["ts"] + n["dur"] <= label["ts"] + label["dur"]
                and label["tid"] == n["tid"]
                for label in labels
            )
        ]
        return len(nodes), len(inside)

    nodes, inside = backward_nodes("compile_forward")
    assert nodes == inside > 0
    forward = [
        f for f in diagnose(FIXTURES / "cpu" / "compile_forward.json.gz") if f.rule == "aot-wrapper"
    ]
    (finding,) = forward
    assert finding.evidence["backward_in_trace"] is False
    assert finding.message.endswith("no backward pass runs.")
    nodes, inside = backward_nodes("compile_train")
    assert nodes > inside  # loss.backward() each step, outside compilation
    (finding,) = [
        f for f in diagnose(FIXTURES / "cpu" / "compile_train.json.gz") if f.rule == "aot-wrapper"
    ]
    assert finding.evidence["backward_in_trace"] is True
    assert finding.message.endswith("the trace also runs a backward pass.")


def test_cuda_graph_counts_replays_and_input_copies() -> None:
    evidence = only("4096_bf16_warm_compile-reduce-overhead", "cuda-graph").evidence
    assert evidence["launches"] == 3
    assert evidence["per_step"] == {"2": 1, "3": 1, "4": 1}
    assert evidence["input_copy_launches"] == 9  # x, w and b, three kernels per step
    assert evidence["input_copy_gpu_us"] > 0
    message = only("4096_bf16_warm_compile-reduce-overhead", "cuda-graph").message
    assert "each replaying 3 GPU activities" in message
    # The message's per-step figures are the evidence's totals over its steps.
    steps = evidence["steps_with_replays"]
    assert steps == 3
    per_step = evidence["input_copy_gpu_us"] / steps
    assert f"(3 copy launch(es) and {per_step:.1f} µs of GPU time per step)" in message


def test_cuda_graph_reads_the_copies_of_an_older_torch_s_compiled_function(make_trace) -> None:
    # Older torch wrote no "## Call CompiledFxGraph" label: the graph launch sits in AOTAutograd's
    # CompiledFunction, with two inputs copied in before it (10 µs each on the GPU) and one
    # output cloned out after it (30 µs); a copy outside the compiled call is not the graph's.
    def copy(start: float, correlation: int, gpu_us: float, clone: bool = False) -> list:
        events = [
            complete_event("aten::copy_", "cpu_op", start + 1, 8),
            complete_event("cudaMemcpyAsync", "cuda_runtime", start + 2, 5,
                           correlation=correlation),
            complete_event("Memcpy DtoD (Device -> Device)", "gpu_memcpy", start + 200, gpu_us,
                           pid=0, tid=7, correlation=correlation),
        ]  # fmt: skip
        if clone:
            events.append(complete_event("aten::clone", "cpu_op", start, 10))
        return events

    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 500),
        complete_event("CompiledFunction", "cpu_op", 10, 200),
        *copy(20, 1, 10.0),
        *copy(40, 2, 10.0),
        complete_event("cudaGraphLaunch", "cuda_runtime", 60, 20, correlation=3),
        complete_event("graph_kernel", "kernel", 300, 50, pid=0, tid=7, correlation=3),
        *copy(100, 4, 30.0, clone=True),
        *copy(300, 5, 99.0),  # after the compiled call
    ]
    [finding] = diagnose(make_trace(events), select=["cuda-graph"])
    assert finding.evidence["input_copy_launches"] == 2
    assert finding.evidence["input_copy_gpu_us"] == 20.0
    assert finding.evidence["output_clone_launches"] == 1
    assert finding.evidence["output_clone_gpu_us"] == 30.0
    assert finding.message.endswith(
        "; before each replay, inputs are copied into the graph's buffers (2 copy launch(es) and "
        "20.0 µs of GPU time per step); after each replay, outputs are cloned out of them (1 "
        "copy launch(es) and 30.0 µs of GPU time per step)."
    )
    assert finding.evidence["steps_with_replays"] == 1
    # Without steps (a server's recording), the copies are counted over the recording.
    stepless = make_trace(events[1:], name="stepless.json")
    [finding] = diagnose(stepless, select=["cuda-graph"])
    assert (finding.evidence["steps_with_replays"], finding.evidence["per_step"]) == (0, {})
    assert "20.0 µs of GPU time in the recording); after each replay" in finding.message
    # A clone in the compiled call before its replay is neither: no output comes out yet.
    before = [*events[:2], *copy(20, 1, 10.0, clone=True), *events[8:10]]
    [finding] = diagnose(make_trace(before, name="before.json"), select=["cuda-graph"])
    assert finding.evidence["input_copy_launches"] == 0
    assert finding.evidence["output_clone_launches"] == 0
    assert "cloned" not in finding.message and "copied" not in finding.message
    # A call that replays twice: the copy between the two replays feeds the second.
    twice = [
        *events[:2],
        complete_event("cudaGraphLaunch", "cuda_runtime", 20, 10, correlation=7),
        complete_event("graph_kernel", "kernel", 300, 50, pid=0, tid=7, correlation=7),
        *copy(40, 8, 10.0),
        complete_event("cudaGraphLaunch", "cuda_runtime", 60, 10, correlation=9),
        complete_event("graph_kernel", "kernel", 400, 50, pid=0, tid=7, correlation=9),
    ]
    [finding] = diagnose(make_trace(twice, name="twice.json"), select=["cuda-graph"])
    assert finding.evidence["input_copy_launches"] == 1


def test_cuda_graph_gives_the_range_when_replays_differ(make_trace) -> None:
    # Two graphs of a different size: not "each replaying 2" (the median of 1 and 3).
    events = []
    for index, kernels in enumerate((1, 3)):
        t = 100.0 * index
        events.append(
            complete_event("cudaGraphLaunch", "cuda_runtime", t, 10, correlation=index + 1)
        )
        events += [
            complete_event(f"k{i}", "kernel", t + 20 + 5 * i, 4, pid=0, tid=7,
                           correlation=index + 1)
            for i in range(kernels)
        ]  # fmt: skip
    [finding] = diagnose(make_trace(events), select=["cuda-graph"])
    assert "replaying 1 to 3 GPU activities (median 2)" in finding.message


# -- diagnose() --------------------------------------------------------------------------------


def test_diagnose_takes_a_trace_or_a_path() -> None:
    path = gpu_fixture("64_bf16_warm_compile")
    assert diagnose(load_trace(path)) == diagnose(str(path)) == list(findings_of(path.name[:-8]))


def test_select_and_ignore() -> None:
    path = gpu_fixture("64_bf16_warm_eager_w0a3")
    selected = diagnose(path, select=["cold-start", "buffer-request"])
    assert {f.rule for f in selected} == {"cold-start", "buffer-request"}
    ignored = diagnose(path, ignore=["cold-start"])
    assert {f.rule for f in ignored} == fired("64_bf16_warm_eager_w0a3") - {"cold-start"}
    assert diagnose(path, select=["compile-cpu-tax"]) == []  # needs a baseline: compare
    with pytest.raises(ValueError, match="no-such-rule"):
        diagnose(path, select=["no-such-rule"])
    with pytest.raises(ValueError, match="other-bad"):
        diagnose(path, ignore=["other-bad"])


def test_diagnose_raises_trace_error_for_a_bad_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError):
        diagnose(tmp_path / "missing.json")


def test_findings_come_grouped_by_table_warnings_first() -> None:
    findings = list(findings_of("64_bf16_warm_eager_w0a3"))
    tables = [f.table for f in findings]
    assert tables == sorted(tables, key=tables.index)  # each table's findings together
    warned = [f.table for f in findings if f.severity == "warning"]
    first_quiet = next(i for i, f in enumerate(findings) if f.table not in warned)
    assert all(f.table not in warned for f in findings[first_quiet:])
    for table in set(tables):
        severities = [f.severity for f in findings if f.table == table]
        assert severities == sorted(severities, key=("warning", "info").index)


def test_order_findings_puts_a_table_with_a_warning_first() -> None:
    info = Finding("compiled-region", "torch.compile", "info", "i.")
    warning = Finding("cold-start", "CPU lane", "warning", "w.")
    table_info = Finding("hotspot", "profiler table", "info", "h.")
    assert order_findings([table_info, info, warning]) == [warning, table_info, info]


def test_facts_self_time_matches_the_profiler_definition() -> None:
    trace = load_trace(gpu_fixture("64_bf16_warm_eager"))
    facts = Facts(trace)
    matmul = next(s for s in trace.spans if s.name == "aten::matmul")
    (mm,) = [s for s in trace.spans if s.parent == matmul.id]
    assert facts.self_us(matmul) == pytest.approx(matmul.dur - mm.dur)
    row = facts.rows["aten::matmul"]
    assert row.calls == 3 and row.is_op
    assert row.total_us == pytest.approx(sum(s.dur for s in facts.named("aten::matmul")))


def test_rows_leave_out_gpu_kernels_named_like_an_op(make_trace) -> None:
    # torch.compile names a Triton kernel's launching op after the kernel: the row is the
    # op's CPU time, not the kernel's GPU time added to it.
    name = "triton_poi_fused_gelu_0"
    events = [
        complete_event(name, "cpu_op", 0, 10),
        complete_event("cudaLaunchKernel", "cuda_runtime", 2, 2, correlation=1),
        complete_event(name, "kernel", 20, 30, pid=0, tid=7, correlation=1),
    ]
    row = Facts(load_trace(make_trace(events))).rows[name]
    assert (row.calls, row.total_us, row.self_us, row.is_op) == (1, 10.0, 8.0, True)


# -- the cheatsheet page -----------------------------------------------------------------------


def test_cheatsheet_has_the_five_tables_and_every_rule_once() -> None:
    page = cheatsheet_markdown()
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Profiler table",
        "## CPU lane",
        "## GPU lane",
        "## Dispatch chain",
        "## torch.compile",
        "## Beyond the post",
    ]
    for rule in RULES:
        assert page.count(f"| `{rule.id}`") == 1, rule.id
        if not rule.from_post:  # the rule's table follows its id, in its cell
            row = page.split(f"| `{rule.id}`", 1)[1].split("|", 1)[0]
            assert row.strip().lower() == f"({rule.table})".lower(), rule.id
        # Cells are Markdown: "<" is escaped so that "<hash>" is not read as an HTML tag,
        # "_" and "*" so that "__next__" or "ncclKernel_*" are not read as emphasis.
        escaped = rule.what_it_means
        for special in ("|", "<", "_", "*"):
            escaped = escaped.replace(special, "\\" + special)
        assert escaped in page
        assert re.search(r"(?<!\\)<(hash|user)>", page) is None


def test_cheatsheet_links_the_example_that_shows_a_rule() -> None:
    index = rule_ids().index("cold-start")
    original = RULES[index]
    RULES[index] = dataclasses.replace(
        original, example="auto_examples/part1_matmul_add/plot_02_cold_start"
    )
    try:
        page = cheatsheet_markdown()
    finally:
        RULES[index] = original
    row = next(line for line in page.splitlines() if "`cold-start`" in line)
    assert row.endswith("| {doc}`example </auto_examples/part1_matmul_add/plot_02_cold_start>` |")


# -- traces recorded elsewhere: AMD, CPU only, multi-rank -------------------------------------

FOREIGN = FIXTURES / "foreign"


def foreign_findings(name: str) -> dict[str, Finding]:
    findings = diagnose(FOREIGN / name)
    assert len({f.rule for f in findings}) == len(findings)
    return {f.rule: f for f in findings}


def test_every_rule_is_silent_on_a_cpu_only_rank() -> None:
    assert diagnose(FOREIGN / "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz") == []


def test_gpu_rules_are_silent_on_cpu_ops_alone(make_trace: Any) -> None:
    events = [
        complete_event(f"ProfilerStep#{n}", "user_annotation", 1000.0 * n, 500) for n in (1, 2)
    ] + [complete_event("aten::addmm", "cpu_op", 1000.0 * n + 10, 100) for n in (1, 2)]
    assert diagnose(make_trace(events, deviceProperties=None)) == []
    # A GPU listed and CUPTI's buffer request recorded, but no GPU work: still nothing to say.
    events.append(complete_event("Activity Buffer Request", "overhead", 1020, 50, pid=-1, tid=0))
    assert diagnose(make_trace(events)) == []


def test_amd_launches_are_read_like_cuda_ones() -> None:
    found = foreign_findings("hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    plain = found["plain-launch"].evidence
    assert {group["api"] for group in plain["groups"]} == {"hipLaunchKernel"}
    driver = found["driver-launch"].evidence
    assert {group["api"] for group in driver["groups"]} == {"hipExtModuleLaunchKernel"}
    assert {group["op"] for group in driver["groups"]} == {"aten::addmm", "aten::mm"}
    # Grid and block come from the launch calls, the grid in blocks; shared memory is unknown.
    footprints = [group["footprint"] for group in plain["groups"] + driver["groups"]]
    assert all(f["grid"] and f["block"] and f["shared_memory_bytes"] is None for f in footprints)
    addmm = next(group for group in driver["groups"] if group["op"] == "aten::addmm")
    assert (addmm["footprint"]["grid"], addmm["footprint"]["block"]) == ([2, 1, 1], [256, 1, 1])
    # Its first hipLaunchKernel holds most of the step: a one-time cost of HIP, not CUDA.
    assert "a one-time cost (the process's HIP start-up" in found["overhead-bound"].message


def test_kernel_variance_tells_rocm_launches_apart_by_their_grid(tmp_path: Path) -> None:
    # One elementwise kernel over two sizes per step, 10 µs and 100 µs, the large one first
    # in one step: by rank in the step alone, that step's first call would be 10× slower.
    events = []
    for n in range(1, 7):
        t, correlation = 1000.0 * n, 10 * n
        sizes = [(4096, 100.0), (1, 10.0)] if n == 3 else [(1, 10.0), (4096, 100.0)]
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 500))
        for i, (blocks, dur) in enumerate(sizes):
            launch_at = t + 10 + 200 * i
            events += [
                complete_event(
                    "hipLaunchKernel", "cuda_runtime", launch_at, 5,
                    correlation=correlation + i, grid=[blocks, 1, 1], block=[256, 1, 1],
                ),
                complete_event(
                    "elementwise_kernel", "kernel", launch_at + 10, dur, pid=2, tid=0,
                    correlation=correlation + i,
                ),
            ]  # fmt: skip
    path = write_trace(tmp_path / "rocm_two_sizes.json", {"traceEvents": events})
    assert "kernel-variance" not in rules_on(path)
    # The same trace without grids: one role per rank in the step, and a false slow call.
    for event in events:
        event.get("args", {}).pop("grid", None)
    path = write_trace(tmp_path / "rocm_no_grid.json", {"traceEvents": events})
    assert rules_on(path)["kernel-variance"].evidence["kernel"] == "elementwise_kernel"


def test_amd_bias_copy_kernel_is_not_a_gemm() -> None:
    found = foreign_findings("hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    gemms = [row["kernel"] for row in found["gemm-kernel"].evidence["kernels"]]
    assert gemms and not any("at::native::" in name for name in gemms)
    fusion = found["addmm-fusion"]
    assert fusion.evidence["with_bias_copy"] == 1
    assert "ATen kernel + GEMM kernel" in fusion.message


def test_cold_start_threshold_follows_the_traces_launch_latency(make_trace) -> None:
    mi250 = load_trace(FOREIGN / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    h100 = Facts(load_trace(gpu_fixture("4096_fp32_warm_eager"))).launch_latency_us
    assert Facts(mi250).launch_latency_us > h100 > 0
    for kernel_delay in (20.0, 200.0):  # from the launch's start: the latency
        events = cold_steps(50.0, 500.0)
        for event in events:
            if event["cat"] == "kernel":
                event["ts"] += kernel_delay - 20.0
        path = make_trace(events)
        latency = Facts(load_trace(path)).launch_latency_us
        assert latency == pytest.approx(kernel_delay - 5.0)
        found = diagnose(path, select=["cold-start"])
        # The first step is 490 µs wider than the others: more than three latencies of
        # 15 µs, fewer than three of 195.
        if latency < 490 / 3:
            assert found[0].evidence["min_excess_us"] == pytest.approx(3 * latency)
        else:
            assert found == []


def test_steps_that_recorded_nothing_are_no_sample(make_trace) -> None:
    # The MI250 trace's second step holds no op and launched nothing: the step the profiler
    # opens as it stops. The first is no cold start against it, nor the median step.
    mi250 = load_trace(FOREIGN / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert [step.number for step in mi250.steps] == [1, 2]
    assert [step.number for step in Facts(mi250).steps] == [1]
    fired = {f.rule: f for f in diagnose(mi250)}
    assert "cold-start" not in fired
    assert fired["overhead-bound"].evidence["median_step"] == 1
    # The synthetic steps plus an empty fifth: the same finding as without it.
    events = cold_steps(50.0, 500.0)
    with_empty = [*events, complete_event("ProfilerStep#4", "user_annotation", 40_000.0, 49.0)]
    (finding,) = diagnose(make_trace(with_empty), select=["cold-start"])
    assert finding.evidence["other_steps_cpu_us"] == {"1": 70.0, "2": 70.0, "3": 70.0}


HIP_NAMES = {
    "cudaLaunchKernel": "hipLaunchKernel",
    "cuLaunchKernelEx": "hipExtModuleLaunchKernel",
    "cudaGraphLaunch": "hipGraphLaunch",
    "cudaDeviceSynchronize": "hipDeviceSynchronize",
    "cudaMemcpyAsync": "hipMemcpyAsync",
    "cudaMemsetAsync": "hipMemsetAsync",
}
"""CUDA calls and the HIP calls ROCm's PyTorch makes in their place (all ``cuda_runtime``)."""


@pytest.mark.parametrize(
    "name",
    ["4096_bf16_warm_eager", "64_bf16_warm_compile", "64_bf16_warm_compile-reduce-overhead"],
)
def test_hip_calls_fire_what_cuda_calls_do(tmp_path: Path, name: str) -> None:
    document = fixture_document(name)
    for event in document["traceEvents"]:
        hip = HIP_NAMES.get(event.get("name"))
        if hip is not None:
            event["name"], event["cat"] = hip, "cuda_runtime"
    renamed = diagnose(write_trace(tmp_path / f"{name}_hip.json", document))
    assert {f.rule for f in renamed} == fired(name)
    text = json.dumps([f.to_dict() for f in renamed], ensure_ascii=False)
    assert "hip" in text
    assert not any(cuda in text for cuda in HIP_NAMES)


def test_kernels_without_device_properties_are_not_called_no_gpu(tmp_path: Path) -> None:
    from profiling_utils.rules import format_diagnosis

    document = fixture_document("64_bf16_warm_eager")
    del document["deviceProperties"]
    trace = load_trace(write_trace(tmp_path / "anonymous.json", document))
    text = format_diagnosis(trace, diagnose(trace))
    assert "no GPU recorded" not in text and "unknown NVIDIA GPU" in text
    assert "overhead-bound" in {f.rule for f in diagnose(trace)}


def nccl_trace(
    tmp_path: Path,
    comm_start: float,
    comm_us: float = 500.0,
    *,
    sized: bool = True,
    kernel: str = "ncclDevKernel_Generic",
) -> Path:
    """Two steps of 1000 µs, each a 300 µs compute kernel (stream 7, 100-400 µs into the step)
    and an all_reduce of 64 MiB over 8 ranks (stream 20) from ``comm_start`` µs into it, run
    by ``kernel``."""
    params = {
        "Collective name": "allreduce",
        "In msg nelems": 16 << 20,
        "Out msg nelems": 16 << 20,
        "dtype": "Float",
        "Group size": 8,
        "Process Group Name": "0",
    }
    events = []
    for n, t in ((1, 1000.0), (2, 3000.0)):
        c = 10 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1000),
            complete_event("aten::mm", "cpu_op", t + 10, 30),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=c),
            complete_event("gemm", "kernel", t + 100, 300, pid=0, tid=7, correlation=c),
            complete_event("c10d::allreduce_", "cpu_op", t + 50, 60),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 70, 5, correlation=c + 1),
            complete_event(
                kernel, "kernel", t + comm_start, comm_us, pid=0, tid=20,
                correlation=c + 1, **(params if sized else {}),
            ),
        ]  # fmt: skip
    name = f"nccl_{comm_start:g}_{comm_us:g}_{sized}_{kernel.split('<')[0].split()[-1]}.json"
    return write_trace(tmp_path / name, {"traceEvents": events})


def rules_on(path: Path) -> dict[str, Finding]:
    return {f.rule: f for f in diagnose(path)}


def test_collectives_are_not_a_compute_hotspot(tmp_path: Path) -> None:
    found = rules_on(nccl_trace(tmp_path, 450.0))
    assert found["hotspot"].evidence["kernel"] == "gemm"
    assert found["hotspot"].evidence["communication_kernels_left_out"] == 2
    # The GPU computes 300 µs of each 1000 µs step: not compute-bound, whatever NCCL does.
    assert "compute-bound" not in found


def test_a_serving_engines_custom_all_reduce_is_communication(tmp_path: Path) -> None:
    # vLLM's all-reduce for small tensors: its own kernel, not NCCL's, 500 of 800 µs of GPU
    # time per step. It is no compute hotspot, and nothing hides it.
    kernel = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, int)"
    path = nccl_trace(tmp_path, 450.0, sized=False, kernel=kernel)
    found = rules_on(path)
    assert found["hotspot"].evidence["kernel"] == "gemm"
    assert found["exposed-communication"].evidence["total"]["exposed_us"] == pytest.approx(1000)
    assert "kernel-variance" not in found
    assert [c.op for c in collectives(load_trace(path))] == ["all_reduce", "all_reduce"]


def test_exposed_communication_fires_when_nothing_hides_it(tmp_path: Path) -> None:
    found = rules_on(nccl_trace(tmp_path, 450.0))
    evidence = found["exposed-communication"].evidence
    assert evidence["total"]["exposed_us"] == pytest.approx(1000.0)
    assert [row["exposed_us"] for row in evidence["steps"]] == [500.0, 500.0]
    assert "comm-overlap" not in found


def test_comm_overlap_fires_when_compute_hides_most_of_it(tmp_path: Path) -> None:
    # From 100 µs, 500 µs long: beside the GEMM for 300 µs, 200 µs (20% of a step) exposed.
    found = rules_on(nccl_trace(tmp_path, 100.0))
    assert found["comm-overlap"].evidence["overlap_fraction"] == pytest.approx(0.6)
    assert found["exposed-communication"].evidence["median_exposed_share"] == pytest.approx(0.2)
    # 350 µs long: 50 µs (5% of a step) exposed, under the threshold.
    hidden = rules_on(nccl_trace(tmp_path, 100.0, 350.0))
    assert hidden["comm-overlap"].evidence["overlap_fraction"] == pytest.approx(300 / 350, abs=1e-4)
    assert "exposed-communication" not in hidden


def test_comm_overlap_needs_a_quarter_of_the_communication_beside_compute(
    tmp_path: Path,
) -> None:
    # The GEMM runs from 100 to 400 µs into each step. From 250 µs, 500 µs long: 30% beside it.
    found = rules_on(nccl_trace(tmp_path, 250.0, 500.0))
    assert found["comm-overlap"].evidence["overlap_fraction"] == pytest.approx(0.3)
    # From 340 µs: 60 of 500 µs, 12%, stays silent.
    assert "comm-overlap" not in rules_on(nccl_trace(tmp_path, 340.0, 500.0))


def test_collective_bandwidth_follows_nccl_tests(tmp_path: Path) -> None:
    found = rules_on(nccl_trace(tmp_path, 450.0))
    row = found["collective-bandwidth"].evidence["kinds"][0]
    algbw = (64 << 20) / 500e-6 / 1e9
    assert (row["op"], row["group_size"], row["count"]) == ("all_reduce", 8, 2)
    assert row["median_algbw_gb_s"] == pytest.approx(algbw, abs=0.01)
    assert row["median_busbw_gb_s"] == pytest.approx(algbw * 2 * 7 / 8, abs=0.01)
    # One rank's kernel also waits for the others: the message says what the figure is.
    message = found["collective-bandwidth"].message
    assert f"algorithm bandwidth of {algbw:.1f} GB/s" in message
    assert message.endswith(
        ": a lower bound, as a collective's kernel also waits for the last rank to join it."
    )


def test_collective_bandwidth_is_silent_without_recorded_sizes(tmp_path: Path) -> None:
    found = rules_on(nccl_trace(tmp_path, 450.0, sized=False))
    assert "collective-bandwidth" not in found
    assert "exposed-communication" in found


# Rules that compare a step, a gap or a kernel against a typical one need times with a scale.
_RELATIVE_TO_A_TYPICAL_TIME = {"cold-start", "dead-window", "sync-flush", "kernel-variance"}


@pytest.mark.parametrize(
    "fixture", ["4096_bf16_item-sync", "64_bf16_warm_compile", "attention_8x16x1024x64_bf16_naive"]
)
@pytest.mark.parametrize("times", ["every dur 0", "every ts equal"])
def test_rules_that_compare_times_are_silent_when_the_times_have_no_scale(
    fixture: str, times: str, make_trace: Any
) -> None:
    # A degenerate recording (durations written as 0, or one timestamp for every event) has
    # steps of no length and gaps of none: a ratio against them divided by zero before.
    document = fixture_document(fixture)
    for event in document["traceEvents"]:
        if times == "every dur 0" and "dur" in event:
            event["dur"] = 0
        if times == "every ts equal" and "ts" in event:
            event["ts"] = 1000
    findings = diagnose(make_trace(document))
    assert not {f.rule for f in findings} & _RELATIVE_TO_A_TYPICAL_TIME
    json.dumps([f.to_dict() for f in findings], allow_nan=False)


def test_gemm_kernel_leaves_the_gpu_share_out_when_gpu_work_has_no_duration(
    make_trace: Any,
) -> None:
    document = fixture_document("4096_bf16_warm_eager")
    for event in document["traceEvents"]:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in event:
            event["dur"] = 0
    found = {f.rule: f for f in diagnose(make_trace(document))}
    gemm = found["gemm-kernel"]
    assert gemm.evidence["kernels"][0]["gpu_share"] is None
    assert "of GPU time" not in gemm.message and gemm.message.endswith("(median 0.0 µs).")


def test_launch_latency_falls_back_when_the_clock_cannot_see_a_launch(make_trace: Any) -> None:
    # Times floored to the millisecond: a launch and its kernel share a timestamp, the median
    # launch delay is 0 µs, and thresholds of a few launch latencies would be 0 µs too.
    from profiling_utils.rules.facts import DEFAULT_LAUNCH_LATENCY_US

    document = fixture_document("4096_bf16_item-sync")
    for event in document["traceEvents"]:
        for key in ("ts", "dur"):
            if isinstance(event.get(key), int | float):
                event[key] = event[key] // 1000 * 1000
    trace = load_trace(make_trace(document))
    assert Facts(trace).launch_latency_us == DEFAULT_LAUNCH_LATENCY_US
    findings = diagnose(trace)
    json.dumps([f.to_dict() for f in findings], allow_nan=False)


@pytest.mark.parametrize("world", [None, 8])
def test_collective_bandwidth_without_a_group_size_offers_the_worlds(tmp_path: Path, world) -> None:
    # The kernel records its size but not its group; distributedInfo may record the world.
    document = json.loads(nccl_trace(tmp_path, 450.0).read_text())
    for event in document["traceEvents"]:
        event.get("args", {}).pop("Group size", None)
    if world is not None:
        document["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": world}
    finding = rules_on(write_trace(tmp_path / "t.json", document))["collective-bandwidth"]
    algbw = finding.evidence["kinds"][0]["median_algbw_gb_s"]
    assert finding.evidence["kinds"][0]["median_busbw_gb_s"] is None
    if world is None:
        assert "(group size not recorded: no bus bandwidth)" in finding.message
        assert "world_size" not in finding.evidence
    else:
        assert finding.evidence["median_busbw_if_world_gb_s"] == pytest.approx(
            algbw * 2 * 7 / 8, abs=0.01
        )
        assert "if the group is all 8 ranks of the run, the default group" in finding.message


def loader_steps(
    steps: int, kernel_us: float, loader: str = "_SingleProcessDataLoaderIter"
) -> list:
    """Steps of 1,000 µs on the training thread: the data loader's next() for the first
    400 µs, then a launch whose kernel runs ``kernel_us`` (into the next step's loading when
    it is long: a GPU still busy with the step before while the next batch is fetched)."""
    events = []
    for n in range(steps):
        t = 1_000.0 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1_000),
            complete_event(f"enumerate(DataLoader)#{loader}.__next__", "user_annotation", t, 400),
            complete_event("aten::mm", "cpu_op", t + 450, 40),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 460, 10, correlation=n + 1),
            complete_event("gemm", "kernel", t + 480, kernel_us, pid=0, tid=7, correlation=n + 1),
        ]
    return events


def test_data_loader_fires_when_the_gpu_waits_for_the_next_batch(make_trace) -> None:
    (finding,) = diagnose(make_trace(loader_steps(3, 100.0)), select=["data-loader"])
    evidence = finding.evidence
    assert evidence["loading_us"] == 400.0 and evidence["gpu_idle_while_loading_us"] == 400.0
    assert evidence["median_idle_share"] == 0.4
    assert "the GPU sits idle for 400.0 µs of it (40% of the step)" in finding.message
    assert "num_workers=0" in finding.message
    assert finding.message.endswith("worker processes would prepare them while the steps run.")
    # With worker processes the label names another iterator, and the hint goes.
    events = loader_steps(3, 100.0, loader="_MultiProcessingDataLoaderIter")
    (finding,) = diagnose(make_trace(events, name="workers.json"), select=["data-loader"])
    assert "num_workers=0" not in finding.message


def test_data_loader_reads_the_loaders_iterations_without_steps(make_trace) -> None:
    # The same loop recorded without a schedule: no ProfilerStep, the loader's calls mark the
    # iterations (three calls, two whole iterations; the recording may stop inside the last).
    def without_steps(kernel_us: float) -> list:
        events = loader_steps(3, kernel_us)
        return [e for e in events if not e["name"].startswith("ProfilerStep#")]

    (finding,) = diagnose(make_trace(without_steps(100.0)), select=["data-loader"])
    evidence = finding.evidence
    assert evidence["median_iteration"] == 1 and evidence["iteration_us"] == 1000.0
    assert [row["iteration"] for row in evidence["iterations"]] == [1, 2]
    assert evidence["gpu_idle_while_loading_us"] == 400.0
    assert finding.message.startswith(
        "With no profiler steps, in the loop's iteration with the median share (from the "
        "loader's call 1 of 3 to the next), fetching the next batch"
    )
    assert "(40% of the iteration): the loop waits for its data." in finding.message
    assert (
        diagnose(make_trace(without_steps(880.0), name="busy.json"), select=["data-loader"]) == []
    )
    # A step whose end the recording missed is no step to read: said so, not "no steps".
    unended = without_steps(100.0) + [
        complete_event("PyTorch Profiler (0)", "Trace", 0, 3_000),
        complete_event("ProfilerStep#7", "user_annotation", 0, 99_000),
    ]
    (finding,) = diagnose(make_trace(unended, name="unended.json"), select=["data-loader"])
    assert finding.message.startswith("With no profiler step ending in the recording, ")
    assert finding.message.endswith("worker processes would prepare them while the loop runs.")


def test_data_loader_is_silent_while_the_gpu_still_runs_the_step_before(make_trace) -> None:
    # Each kernel runs 880 µs, into the next step's loading: the GPU idles 0-40 µs of it.
    assert diagnose(make_trace(loader_steps(3, 880.0)), select=["data-loader"]) == []
    # One step is no habit of the loop.
    assert (
        diagnose(make_trace(loader_steps(1, 100.0), name="one.json"), select=["data-loader"]) == []
    )


def two_gpu_steps(busy_each_us: float) -> list[dict[str, Any]]:
    """Three 1,000 µs steps; one thread launches a kernel of ``busy_each_us`` on GPU 0, then
    one on GPU 1 that starts as the first ends (model parallel, one process)."""
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1_000))
        for device in (0, 1):
            c = 10 * n + device
            start = t + 20 + device * busy_each_us
            events += [
                complete_event(
                    "cudaLaunchKernel", "cuda_runtime", t + 5 + device, 1, correlation=c
                ),
                complete_event(
                    "k", "kernel", start, busy_each_us, pid=device, tid=7, correlation=c
                ),
            ]
    return events


def test_bound_rules_read_the_busiest_gpu_not_the_union_of_several(make_trace) -> None:
    # Each GPU busy 480 µs of a 1,000 µs step, one after the other: their union, 960 µs, would
    # read as a GPU busy nearly all of the step.
    path = make_trace(two_gpu_steps(480.0), deviceProperties=None)
    assert diagnose(path, select=["compute-bound", "overhead-bound"]) == []
    # 50 µs each: overhead-bound, on the busiest of the two.
    path = make_trace(two_gpu_steps(50.0), name="small.json", deviceProperties=None)
    (finding,) = diagnose(path, select=["compute-bound", "overhead-bound"])
    assert finding.rule == "overhead-bound" and finding.evidence["median_gpu_busy_us"] == 50.0
    assert finding.evidence["gpus_driven"] == 2
    assert "the busiest of the 2 GPUs it drives is busy 50.0 µs" in finding.message


def test_without_steps_the_trace_wide_rules_read_the_whole_recording(tmp_path: Path) -> None:
    # A serving loop's trace has no ProfilerStep#N: exposed communication and a row whose
    # time is its children's are still there to see, over the recording.
    document = json.loads(nccl_trace(tmp_path, 450.0).read_text())
    document["traceEvents"] = [
        e for e in document["traceEvents"] if not e["name"].startswith("ProfilerStep#")
    ]
    found = rules_on(write_trace(tmp_path / "no_steps.json", document))
    exposed = found["exposed-communication"]
    # 500 µs exposed per 1,000 µs step, over a GPU span from the first kernel (1,100 µs) to
    # the last collective's end (3,950 µs).
    assert exposed.evidence["total"]["exposed_us"] == pytest.approx(1000.0)
    assert exposed.evidence["gpu_span_us"] == pytest.approx(2850.0)
    assert exposed.message.startswith("Over the recording (no ProfilerStep#N to take steps from)")
    assert "overhead-bound" not in found and "compute-bound" not in found  # these compare steps


def test_cost_in_children_without_steps_reads_the_hosts_recording(make_trace) -> None:
    events = [
        complete_event("forward", "user_annotation", 0, 1_000),
        complete_event("aten::linear", "cpu_op", 10, 500),
        complete_event("aten::addmm", "cpu_op", 12, 490),
    ]
    (finding,) = diagnose(make_trace(events), select=["cost-in-children"])
    assert finding.evidence["recording_cpu_us"] == 1_000.0
    assert "steps_cpu_us" not in finding.evidence
    assert finding.message.startswith("aten::linear: 500.0 µs total, 10.0 µs self")
    # A label around the run holds all of it, its time in its children: without steps to say
    # what the run repeats, that is no finding.
    label_only = [events[0], complete_event("aten::add", "cpu_op", 5, 990)]
    assert diagnose(make_trace(label_only, name="label.json"), select=["cost-in-children"]) == []


def test_memset_before_gemm_counts_each_op_it_found_them_under(make_trace) -> None:
    # Two mm and one addmm, each a 128 B memset then its GEMM: the count is of all three,
    # and the message names both ops with theirs rather than the first pair's alone.
    events = []
    for k, op in enumerate(["aten::mm", "aten::addmm", "aten::mm"]):
        t, c = 1_000.0 * k, 10 * k
        events += [
            complete_event(op, "cpu_op", t, 100),
            complete_event("cudaMemsetAsync", "cuda_runtime", t + 5, 5, correlation=c + 1),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=c + 2),
            complete_event("Memset (Device)", "gpu_memset", t + 30, 1, pid=0, tid=7,
                           correlation=c + 1, bytes=128),
            complete_event(f"gemm_{k % 2}", "kernel", t + 35, 50, pid=0, tid=7, correlation=c + 2),
        ]  # fmt: skip
    (finding,) = diagnose(make_trace(events), select=["memset-before-gemm"])
    assert finding.evidence["count"] == 3
    assert finding.evidence["ops"] == {"aten::mm": 2, "aten::addmm": 1}
    assert "right before a GEMM kernel of the same op (aten::mm 2×, aten::addmm 1×)" in (
        finding.message
    )
    assert "most often gemm_0, one of 2 GEMM kernels" in finding.message
    # One op and one kernel: the pairs are "each" from it ("both" is one memset and its GEMM).
    (one_op,) = diagnose(make_trace(events[:5] + events[10:], name="mm.json"),
                         select=["memset-before-gemm"])  # fmt: skip
    assert one_op.message.endswith("right before gemm_0, each pair from aten::mm.")
    (single,) = diagnose(make_trace(events[:5], name="one.json"), select=["memset-before-gemm"])
    assert single.message.endswith("right before gemm_0, both from aten::mm.")


def test_cost_in_children_follows_the_one_call_that_holds_the_total(make_trace) -> None:
    # Three calls of aten::to; the first lasts 10 s, nearly all of it CUDA's start-up in a
    # runtime call under it; the typical call has no child at all.
    events = [complete_event("ProfilerStep#1", "user_annotation", 0, 20_000_000)]
    for k, dur in enumerate([10_000_000, 300, 300]):
        t = 11_000_000.0 * k / 2 + 10
        events.append(complete_event("aten::to", "cpu_op", t, dur))
        if k == 0:
            events.append(complete_event("aten::_to_copy", "cpu_op", t + 1, dur - 2))
            events.append(complete_event("cudaGetDeviceCount", "cuda_runtime", t + 2, dur - 5))
    (finding,) = diagnose(make_trace(events), select=["cost-in-children"])
    assert finding.message.startswith("aten::to: 10000600.0 µs total")
    assert finding.message.endswith(
        "one call holds 99.9% of it (10000000.0 µs); the time is below it: aten::to → "
        "aten::_to_copy → cudaGetDeviceCount."
    )
    assert "spread over its children: ." not in finding.message


def test_cost_in_children_names_one_calls_children_by_name_with_that_calls_time(
    make_trace,
) -> None:
    # Five steps, each one forward_backward label holding three matmuls of 40, 30, 20 µs and
    # 10 µs of its own: the children are those of one call, summed by name.
    events = []
    for k in range(5):
        t = 1_000.0 * k
        events.append(complete_event(f"ProfilerStep#{k}", "user_annotation", t, 500))
        events.append(complete_event("forward_backward", "user_annotation", t + 10, 100))
        for start, dur in ((t + 15, 40), (t + 60, 30), (t + 92, 18)):
            events.append(complete_event("aten::matmul", "cpu_op", start, dur))
    (finding,) = diagnose(make_trace(events), select=["cost-in-children"])
    assert finding.message == (
        "forward_backward: 500.0 µs total, 60.0 µs self (12%); in its median call (100.0 µs) "
        "the time is spread over its children: 3× aten::matmul (88.0 µs)."
    )
    assert finding.evidence["children"] == [{"name": "aten::matmul", "calls": 3, "total_us": 88.0}]


def test_cost_in_children_of_two_calls_says_it_follows_the_longer(make_trace) -> None:
    # Two steps: the label's calls take 100 and 80 µs. The one followed is a real call, the
    # longer, not their mean, and the message says which.
    events = []
    for k, dur in enumerate((100.0, 80.0)):
        t = 1_000.0 * k
        events.append(complete_event(f"ProfilerStep#{k}", "user_annotation", t, dur + 20))
        events.append(complete_event("forward_backward", "user_annotation", t + 10, dur))
        events.append(complete_event("aten::matmul", "cpu_op", t + 12, dur - 5))
    (finding,) = diagnose(make_trace(events), select=["cost-in-children"])
    said = "; in the longer of its two calls (100.0 µs) the time is below it: "
    assert said in finding.message


def test_cost_in_children_says_when_the_call_it_ends_on_waits_for_another_thread(
    make_trace,
) -> None:
    # with_stack: the backward label's Python frames end in run_backward, which holds the
    # main thread while autograd's own thread runs the backward ops.
    events = []
    for k in range(3):
        t = 10_000.0 * k
        events += [
            complete_event(f"ProfilerStep#{k}", "user_annotation", t, 5_000),
            complete_event("backward", "user_annotation", t + 100, 1_000),
            complete_event("torch/_tensor.py(576): backward", "python_function", t + 105, 990),
            complete_event("<built-in method run_backward>", "python_function", t + 110, 980),
            complete_event("autograd::engine::evaluate_function: MmBackward0", "cpu_op",
                           t + 120, 700, tid=653),
            complete_event("aten::mm", "cpu_op", t + 130, 680, tid=653),
        ]  # fmt: skip
    metadata = [{"ph": "M", "name": "thread_name", "pid": 429, "tid": 653,
                 "args": {"name": "thread 653 (pt_autograd_0)"}}]  # fmt: skip
    (finding,) = diagnose(make_trace(events + metadata), select=["cost-in-children"])
    assert finding.message.endswith(
        "the time is below it: backward → torch/_tensor.py(576): backward → <built-in method "
        "run_backward>, which waits there while thread 653 (pt_autograd_0) runs "
        "ops for 700.0 of its 980.0 µs."
    )
    # Without the other thread's ops, the same chain ends on a call of its own.
    alone = [e for e in events if e.get("tid") != 653]
    (finding,) = diagnose(make_trace(alone, name="alone.json"), select=["cost-in-children"])
    assert finding.message.endswith("<built-in method run_backward>.")


def test_call_chain_leaves_the_python_stack_out(make_trace) -> None:
    # with_stack: Python frames nest between the step and the op; the chain names the ops.
    events = [complete_event("ProfilerStep#1", "user_annotation", 0, 1_000)]
    for depth in range(50):
        events.append(
            complete_event(f"model.py({depth}): f", "python_function", 1 + depth, 900 - 2 * depth)
        )
    events += [
        complete_event("aten::mm", "cpu_op", 60, 100),
        complete_event("cudaLaunchKernel", "cuda_runtime", 70, 10, correlation=1),
        complete_event("gemm", "kernel", 90, 50, pid=0, tid=7, correlation=1),
    ]
    (finding,) = diagnose(make_trace(events), select=["call-chain"])
    assert finding.message == (
        "ProfilerStep#1 → aten::mm → cudaLaunchKernel → gemm (50.0 µs on the GPU; 50 Python "
        "frames of the stack left out)."
    )
    assert finding.evidence["python_frames_left_out"] == 50


def test_hips_extended_launch_is_a_plain_launch(make_trace) -> None:
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 1_000),
        complete_event("aten::add", "cpu_op", 10, 100),
        complete_event("hipExtLaunchKernel", "cuda_runtime", 20, 10, correlation=1),
        complete_event("add", "kernel", 40, 5, pid=0, tid=7, correlation=1),
    ]
    (finding,) = diagnose(make_trace(events), select=["plain-launch"])
    assert "hipExtLaunchKernel" in finding.message


def test_many_calls_is_silent_where_the_gpu_sets_the_pace(make_trace) -> None:
    # The cheap calls of copy_steps, and a 1,900 µs kernel launched at each step's start: the
    # GPU is busy for 95% of the step, so the calls' CPU time costs it nothing.
    events = copy_steps(4.0)
    for n in range(3):
        t = 10_000.0 * n
        events += [
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 1, 5, correlation=n + 1),
            complete_event("gemm", "kernel", t + 8, 1_900, pid=0, tid=7, correlation=n + 1),
        ]
    assert diagnose(make_trace(events), select=["many-calls"]) == []
    assert diagnose(make_trace(events, name="t.json"), select=["compute-bound"])


def test_select_as_a_string_naming_no_rule_is_an_error() -> None:
    with pytest.raises(ValueError, match="select names no rule id: ' , '"):
        diagnose(gpu_fixture("64_bf16_warm_eager"), select=" , ")
    with pytest.raises(ValueError, match=r"select names no rule id: \[' '\]"):
        diagnose(gpu_fixture("64_bf16_warm_eager"), select=[" "])
    assert diagnose(gpu_fixture("64_bf16_warm_eager"), select=[]) == []


# -- AMD: what ROCm's traces write differently -------------------------------------------------


def rocm_variant(tmp_path: Path, name: str, renames: dict[str, str]) -> Path:
    """A foreign fixture with each event name's ``renames`` substrings replaced."""
    document = json.loads(gzip.decompress((FIXTURES / "foreign" / name).read_bytes()))
    for event in document["traceEvents"]:
        for old, new in renames.items():
            if isinstance(event.get("name"), str) and old in event["name"]:
                event["name"] = event["name"].replace(old, new)
    return write_trace(tmp_path / name.replace(".json.gz", "_rocm.json"), document)


def test_a_rocm_copy_that_returned_after_it_ended_is_a_host_sync(tmp_path: Path) -> None:
    # HTA's trace with ROCm's names: hipMemcpyAsync, "Memcpy DtoH (Device -> Host)" (ROCm
    # never says Pageable); each DtoH call ends after its copy, as a pageable copy's does.
    path = rocm_variant(
        tmp_path,
        "hta__timeline_analysis_sampled_rank-0.json.gz",
        {"cuda": "hip", "Pageable": "Host", "Pinned": "Host"},
    )
    (finding,) = diagnose(path, select=["intra-step-gap"])
    assert "waited in hipMemcpyAsync under forward, a copy to host memory that returned only " in (
        finding.message
    )


def test_hipblaslt_split_k_reduction_is_no_gemm() -> None:
    path = FIXTURES / "foreign" / "tracelens__gemm_01_compute_few_tiles.json.gz"
    (finding,) = [f for f in diagnose(path) if f.rule == "gemm-kernel"]
    assert finding.evidence["gemm_kernels"] == 1  # Cijk_B_PostGSU2 is its split-K reduction


def test_older_rocblas_module_launches_are_driver_launches(tmp_path: Path) -> None:
    # The MI250 trace's two hipExtModuleLaunchKernel, as older rocBLAS calls them.
    path = rocm_variant(
        tmp_path,
        "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        {"hipExtModuleLaunchKernel": "hipHccModuleLaunchKernel"},
    )
    (finding,) = diagnose(path, select=["driver-launch"])
    assert finding.evidence["launches"] == 2
    assert finding.evidence["groups"][0]["api"] == "hipHccModuleLaunchKernel"


def test_plain_launch_names_each_plain_api(tmp_path: Path) -> None:
    path = rocm_variant(
        tmp_path,
        "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        {"hipExtModuleLaunchKernel": "hipExtLaunchKernel"},
    )
    (finding,) = diagnose(path, select=["plain-launch"])
    assert finding.evidence["apis"] == {"hipLaunchKernel": 12, "hipExtLaunchKernel": 2}
    assert finding.message.startswith(
        "14 kernel(s) launched with a plain hipLaunchKernel (12×) or hipExtLaunchKernel (2×);"
    )


def test_a_rocm_copy_is_a_host_sync_only_queued_behind_its_own_streams_work(make_trace) -> None:
    # hipMemcpyAsync calls that return after their 5 µs DtoH copy: the first copy waited for a
    # 100 µs kernel on its own stream (blocking, as a pageable copy does); the second ran on an
    # idle stream while another stream's kernel ran (a pinned copy that merely overlapped).
    events = [
        complete_event("hipLaunchKernel", "cuda_runtime", 0, 5, correlation=1),
        complete_event("k", "kernel", 10, 100, pid=2, tid=7, correlation=1),
        complete_event("hipMemcpyAsync", "cuda_runtime", 20, 100, correlation=2),
        complete_event("Memcpy DtoH (Device -> Host)", "gpu_memcpy", 110, 5, pid=2, tid=7,
                       correlation=2),
        complete_event("hipLaunchKernel", "cuda_runtime", 200, 5, correlation=3),
        complete_event("k", "kernel", 210, 100, pid=2, tid=8, correlation=3),
        complete_event("hipMemcpyAsync", "cuda_runtime", 220, 20, correlation=4),
        complete_event("Memcpy DtoH (Device -> Host)", "gpu_memcpy", 225, 5, pid=2, tid=9,
                       correlation=4),
    ]  # fmt: skip
    trace = load_trace(make_trace(events, deviceProperties=None))
    first, second = trace.find("hipMemcpyAsync")
    assert is_host_sync(trace, first) and not is_host_sync(trace, second)


def test_overhead_bound_over_a_recording_adds_up_a_labels_occurrences(tmp_path: Path) -> None:
    # The stalled NCCL rank without its ProfilerStep annotations: five 10 ms host_stall
    # labels, none of which alone holds half of the recording's unrecorded time.
    document = json.loads(
        gzip.decompress((FIXTURES / "nccl" / "stalled" / "rank1.json.gz").read_bytes())
    )
    document["traceEvents"] = [
        e for e in document["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    (finding,) = diagnose(write_trace(tmp_path / "r1.json", document), select=["overhead-bound"])
    label = finding.evidence["recording_label_without_ops"]
    assert label["name"] == "host_stall" and label["us"] > 50_000
    assert "lies under the label host_stall with no op inside" in finding.message


def test_many_calls_reads_the_whole_recording_without_steps(tmp_path: Path) -> None:
    # The tiny transformer's recording without its ProfilerStep annotations: aten::copy_'s
    # 384 calls at a 16.5 µs median hold 8.6% of the host's time.
    document = fixture_document("train_tiny_transformer_a3")
    document["traceEvents"] = [
        e for e in document["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    (finding,) = diagnose(write_trace(tmp_path / "t.json", document), select=["many-calls"])
    assert finding.evidence["window"] == "recording"
    top = finding.evidence["ops"][0]
    assert (top["op"], top["calls"], top["calls_per_step"]) == ("aten::copy_", 384, None)
    assert "called 50+ times in the recording (no steps to count per step)" in finding.message


@pytest.mark.parametrize(("kernel_us", "fires"), [(10.0, True), (90.0, False)])
def test_many_calls_reads_a_recording_besides_its_one_time_calls(
    make_trace, kernel_us: float, fires: bool
) -> None:
    # No steps: two 100 ms cudaFree calls (start-up), then 200 aten::add calls of 100 µs,
    # each launching a kernel. Besides the start-up, the calls are the host's time: the rule
    # reads them against it, unless their kernels keep the GPU busy (90 µs of each 100).
    events = [
        complete_event("cudaFree", "cuda_runtime", 0, 100_000),
        complete_event("cudaFree", "cuda_runtime", 100_000, 100_000),
    ]
    for n in range(200):
        t = 200_000.0 + 100 * n
        events += [
            complete_event("aten::add", "cpu_op", t, 99),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 50, 5, correlation=n + 1),
            complete_event("add_kernel", "kernel", t + 60, kernel_us, pid=0, tid=7,
                           correlation=n + 1),
        ]  # fmt: skip
    found = diagnose(make_trace(events), select=["many-calls"])
    assert bool(found) is fires
    if fires:
        (finding,) = found
        assert finding.evidence["one_time_calls"] == 2
        assert finding.evidence["besides_one_time_us"] == pytest.approx(20_000 - 1, abs=1)
        assert "besides 2 one-time calls" in finding.message
        assert "the longest cudaFree: 100000.0 µs" in finding.message


def test_a_recording_without_steps_is_read_over_its_active_time(make_trace) -> None:
    # A server's four requests, 1 s apart: each an op launching a 900 µs kernel in a 1,000 µs
    # burst. Over first-to-last (3,001,000 µs) the GPU would look idle; over the bursts it is
    # busy 90% of the time: compute-bound, with the three quiet seconds named.
    events = []
    for n in range(4):
        t = 1_000_000.0 * n
        events += [
            complete_event("execute_model", "user_annotation", t, 1_000),
            complete_event("aten::mm", "cpu_op", t + 10, 980),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=n + 1),
            complete_event("gemm", "kernel", t + 50, 900, pid=0, tid=7, correlation=n + 1),
        ]
    path = make_trace(events)
    assert diagnose(path, select=["overhead-bound"]) == []
    (finding,) = diagnose(path, select=["compute-bound"])
    assert finding.evidence["quiet_stretches"] == 3
    assert finding.evidence["quiet_us"] == pytest.approx(3 * 999_000.0)
    assert finding.evidence["recording_cpu_us"] == pytest.approx(4_000.0)
    assert "3 stretch(es) with nothing on any thread or GPU, 2997000.0 µs, left out" in (
        finding.message
    )


def test_cold_start_is_silent_when_a_later_step_is_as_wide(make_trace) -> None:
    # A server's iterations: a 4,000 µs prefill every fifth step, 1,000 µs decodes between.
    # The first step's width comes back: no one-time cost. Without the later prefills, it is.
    def steps(widths: list[float]) -> list[dict[str, Any]]:
        events = []
        for n, width in enumerate(widths):
            t = 10_000.0 * n
            events += [
                complete_event(f"ProfilerStep#{n}", "user_annotation", t, width),
                complete_event("aten::mm", "cpu_op", t + 10, width - 20),
            ]
        return events

    periodic = [4_000.0] + [1_000.0] * 4 + [4_000.0] + [1_000.0] * 4
    assert diagnose(make_trace(steps(periodic), name="p.json"), select=["cold-start"]) == []
    once = [4_000.0] + [1_000.0] * 9
    assert [
        f.rule for f in diagnose(make_trace(steps(once), name="o.json"), select=["cold-start"])
    ] == ["cold-start"]


def test_the_median_of_the_other_steps_matches_statistics_for_each_step() -> None:
    from profiling_utils.rules.facts import _medians_without_each

    rows = [[5.0, 1.0], [3.0, 3.0, 1.0], [4.0, 1.0, 4.0, 2.0, 9.0], [2.0, 2.0, 2.0, 7.0]]
    for values in rows:
        expected = [statistics.median(values[:i] + values[i + 1 :]) for i in range(len(values))]
        assert _medians_without_each(values) == expected


def test_call_chain_reads_the_whole_recording_without_steps(make_trace) -> None:
    events = matmuls_without_steps(15_700.0)
    (finding,) = diagnose(make_trace(events), select=["call-chain"])
    assert finding.evidence["step"] is None
    assert finding.message.startswith("aten::mm → cudaLaunchKernel → gemm (15700.0 µs on the GPU")


def test_call_chain_runs_through_the_program_not_torch_compiles_autotuning(make_trace) -> None:
    # The autotuner times a candidate GEMM (200 µs) inside its label; the program's own
    # launch runs 20 µs: the chain is the program's.
    events = [
        complete_event("addmm_template_autotuning (dynamo_timed)", "cpu_op", 0, 500),
        *launching("aten::addmm", 10, 50, "candidate", 200, correlation=1),
        *launching("aten::mm", 600, 50, "gemm", 20, correlation=2),
    ]
    (finding,) = diagnose(make_trace(events), select=["call-chain"])
    assert finding.message.startswith("aten::mm → cudaLaunchKernel → gemm (20.0 µs")
    # Only the compiler's launch: its chain is the one there is.
    (finding,) = diagnose(make_trace(events[:4]), select=["call-chain"])
    assert "candidate (200.0 µs" in finding.message


def test_the_launch_and_gemm_rules_leave_torch_compiles_autotuning_out(make_trace) -> None:
    # max-autotune's benchmarks: inside its label, aten::addmm runs a candidate GEMM and
    # aten::zero_ flushes the cache 20 times; the program then runs its own GEMM through
    # aten::mm three times.
    events = [complete_event("addmm_template_autotuning (dynamo_timed)", "cpu_op", 0, 5000)]
    for n in range(20):
        t = 10.0 + 200 * n
        events += launching("aten::zero_", t, 40, "flush", 10, correlation=100 + n)
        events += launching("aten::addmm", t + 50, 40, "nvjet_candidate", 50, correlation=200 + n)
    for n in range(3):
        events += launching("aten::mm", 6000.0 + 100 * n, 30, "gemm", 20, correlation=n + 1)
    rules = ["plain-launch", "gemm-kernel", "addmm-fusion"]
    found = {f.rule: f for f in diagnose(make_trace(events), select=rules)}
    assert set(found) == {"plain-launch", "gemm-kernel"}
    assert found["plain-launch"].evidence["launches"] == 3
    assert [row["kernel"] for row in found["gemm-kernel"].evidence["kernels"]] == ["gemm"]
    # The same calls under a label of the program's own: all of them are the program's.
    events[0]["name"] = "my_label"
    found = {f.rule: f for f in diagnose(make_trace(events), select=rules)}
    assert set(found) == set(rules)
    assert found["plain-launch"].evidence["launches"] == 43


def test_gemm_kernel_counts_the_runs_a_graph_replays(make_trace) -> None:
    # A serving engine's prefill runs its GEMM from aten::mm; its decode steps replay it in a
    # CUDA graph, twice per replay, with no op around the replay's kernels.
    events = [
        complete_event("aten::mm", "cpu_op", 0, 30),
        complete_event("cudaLaunchKernel", "cuda_runtime", 5, 5, correlation=1),
        complete_event("gemm", "kernel", 20, 50, pid=0, tid=7, correlation=1),
    ]
    for n in range(3):
        t = 1_000.0 * (n + 1)
        events += [
            complete_event("cudaGraphLaunch", "cuda_runtime", t, 10, correlation=10 + n),
            complete_event("gemm", "kernel", t + 20, 50, pid=0, tid=7, correlation=10 + n),
            complete_event("gemm", "kernel", t + 80, 50, pid=0, tid=7, correlation=10 + n),
        ]
    (finding,) = diagnose(make_trace(events), select=["gemm-kernel"])
    (row,) = finding.evidence["kernels"]
    assert row["replayed_in_graphs"] == 6
    assert (row["count"], row["total_us"], row["gpu_share"]) == (1, 7 * 50.0, 1.0)  # all runs
    assert finding.message.endswith(
        "; it also runs 6× in CUDA/HIP graph replays, where no op launches it (its median "
        "and share count those runs too)."
    )
    # A GEMM replayed more than another runs eagerly is the largest.
    events += [
        complete_event("aten::mm", "cpu_op", 5_000, 30),
        complete_event("cudaLaunchKernel", "cuda_runtime", 5_005, 5, correlation=99),
        complete_event("other_gemm", "kernel", 5_020, 200, pid=0, tid=7, correlation=99),
    ]
    (finding,) = diagnose(make_trace(events, name="two.json"), select=["gemm-kernel"])
    assert [row["kernel"] for row in finding.evidence["kernels"]] == ["gemm", "other_gemm"]


def test_cost_in_children_follows_the_call_that_holds_most_of_the_few_long_ones(
    make_trace,
) -> None:
    # 300 calls of 10 µs, 8 of 300 µs and one of 30,000 µs, each with one child holding 90%:
    # the few long calls hold 90% of the row, and one of them most of that.
    events, t = [], 0.0
    for dur in [10.0] * 150 + [300.0] * 8 + [30_000.0] + [10.0] * 150:
        events += [
            complete_event("outer", "cpu_op", t, dur),
            complete_event("inner", "cpu_op", t + 0.05 * dur, 0.9 * dur),
        ]
        t += dur + 5
    (hit,) = diagnose(make_trace(events), select=["cost-in-children"])
    assert hit.evidence["drill_down"][0]["total_us"] == 30_000.0
    assert "the one at the middle of their time (30000.0 µs)" in hit.message


# -- allocator-churn ---------------------------------------------------------------------------


def _allocator_steps(
    make_trace, calls_per_step: dict[int, list[tuple[str, float]]], steps: int = 4
) -> Path:
    """``steps`` steps of 1000 µs, each launching a kernel from aten::mm; ``calls_per_step``
    adds allocator calls ``(name, µs)`` inside aten::empty in the given steps."""
    events = op_steps_events([("aten::mm", {}, True)], steps=steps)
    for number, calls in calls_per_step.items():
        t = 2000.0 * number + 500
        for name, dur in calls:
            events.append(complete_event("aten::empty", "cpu_op", t, dur + 2))
            events.append(complete_event(name, "cuda_runtime", t + 1, dur))
            t += dur + 10
    return make_trace(events)


def test_allocator_churn_reads_the_steps_after_the_first(make_trace) -> None:
    both = [("cudaMalloc", 40.0), ("cudaFree", 20.0)]
    path = _allocator_steps(make_trace, {2: both, 3: both, 4: both})
    (hit,) = diagnose(path, select=["allocator-churn"])
    assert hit.evidence["steps_with_calls"] == [2, 3, 4]
    assert hit.evidence["calls"] == {"cudaFree": 3, "cudaMalloc": 3}
    assert hit.evidence["median_step_share"] == 0.06  # 60 of 1000 µs
    assert hit.message == (
        "In 3 of the 3 steps after the first, device memory was taken or given back (3 "
        "cudaFree, 3 cudaMalloc in those steps, most often cudaMalloc in aten::empty, 3×): in "
        "ProfilerStep#3, the step with the median share, these calls take 60.0 µs of its "
        "1000.0 µs (6.0%); the longest, cudaMalloc for 40.0 µs in ProfilerStep#2 (in "
        "aten::empty)."
    )
    # Two of three later steps are most of them: still churn; two of four are not.
    (hit,) = diagnose(_allocator_steps(make_trace, {2: both, 4: both}), select=["allocator-churn"])
    assert hit.evidence["steps_with_calls"] == [2, 4]
    path = _allocator_steps(make_trace, {2: both, 4: both}, steps=5)
    assert diagnose(path, select=["allocator-churn"]) == []


def test_allocator_churn_counts_time_in_the_step_once(make_trace) -> None:
    # Two threads' cudaFree at once, and one that runs past its step's end: the share had
    # summed whole calls (160% of a step).
    events = op_steps_events([("aten::mm", {}, True)], steps=4)
    for number in (2, 3, 4):
        t = 2000.0 * number + 100
        events += [
            complete_event("cudaFree", "cuda_runtime", t, 800, tid=1),
            complete_event("cudaFree", "cuda_runtime", t, 800, tid=2),
            complete_event("cudaMalloc", "cuda_runtime", t + 850, 400),  # 50 µs in the step
        ]
    (hit,) = diagnose(make_trace(events), select=["allocator-churn"])
    assert hit.evidence["median_step_allocator_us"] == 850.0
    assert hit.evidence["median_step_share"] == 0.85


@pytest.mark.parametrize(
    "calls_per_step",
    [
        # The first step fills the cache: the usual cold start, not churn.
        {1: [("cudaMalloc", 400.0), ("cudaMalloc", 300.0)]},
        # One later step only: a new shape once, not every step.
        {1: [("cudaMalloc", 400.0)], 3: [("cudaMalloc", 400.0)]},
        # In every later step, but under 2% of it (15 µs of 1000).
        {2: [("cudaMalloc", 15.0)], 3: [("cudaMalloc", 15.0)], 4: [("cudaMalloc", 15.0)]},
        # cudaHostAlloc is pinned host memory, not the device allocator.
        {n: [("cudaHostAlloc", 100.0)] for n in (2, 3, 4)},
        # No allocator call.
        {},
    ],
)
def test_allocator_churn_is_silent_without_it_in_most_warm_steps(
    make_trace, calls_per_step
) -> None:
    assert diagnose(_allocator_steps(make_trace, calls_per_step), select=["allocator-churn"]) == []


def test_allocator_churn_needs_two_steps_after_the_first(make_trace) -> None:
    both = [("cudaMalloc", 400.0), ("cudaFree", 200.0)]
    events = op_steps_events([("aten::mm", {}, True)], steps=2)
    for number in (1, 2):
        t = 2000.0 * number + 500
        for name, dur in both:
            events.append(complete_event(name, "cuda_runtime", t, dur))
            t += dur + 10
    assert diagnose(make_trace(events), select=["allocator-churn"]) == []


def test_many_calls_leaves_out_the_calls_torch_compile_made_while_compiling(make_trace) -> None:
    # A cold compile's trace: the autotuner zeroes a buffer before each candidate it times
    # (9,292 aten::zero_ calls in the recording audited), the compiler's calls, not the
    # program's; the program then calls aten::zero_ 100 times itself.
    label = complete_event("mm_template_autotuning (dynamo_timed)", "user_annotation", 0, 6000)
    compiler = [complete_event("aten::zero_", "cpu_op", 10 + 50 * n, 40) for n in range(100)]
    program = [complete_event("aten::zero_", "cpu_op", 6100 + 50 * n, 40) for n in range(100)]
    (hit,) = diagnose(
        make_trace([label, *compiler, *program], deviceProperties=None), select=["many-calls"]
    )
    assert hit.evidence["ops"][0]["calls"] == 100
    assert hit.evidence["compiling_us"] == 6000.0
    assert hit.evidence["recording_cpu_us"] == 11090.0  # from the label's start to the last end
    assert hit.message.endswith(
        "(torch.compile's compiling, 6000.0 µs, and the calls made in it left out)."
    )
    # The compiler's calls alone: nothing to say.
    assert diagnose(make_trace([label, *compiler]), select=["many-calls"]) == []
    # The calls on another thread while one compiles: left out with the time they ran in.
    other_thread = [{**call, "tid": 430} for call in compiler]
    assert diagnose(make_trace([label, *other_thread]), select=["many-calls"]) == []
    (hit,) = diagnose(make_trace([label, *other_thread, *program]), select=["many-calls"])
    assert hit.evidence["ops"][0]["calls"] == 100 and hit.evidence["ops"][0]["cpu_share"] <= 1
    # The same calls under a label of the program's own: all counted, nothing left out.
    label["name"] = "my_label"
    (hit,) = diagnose(make_trace([label, *compiler, *program]), select=["many-calls"])
    assert hit.evidence["ops"][0]["calls"] == 200
    assert "torch.compile" not in hit.message and "compiling_us" not in hit.evidence


# -- fp32-gemm: fp32 GEMMs on the CUDA cores of a GPU with TF32 tensor cores ----------------

_TF32_KERNEL = (
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_"
    "segment_k_off_kernel__5x_cublas"
)


def _fp32_gemm(document: dict[str, Any], make_trace: Any) -> Finding | None:
    found = diagnose(make_trace(document), select=["fp32-gemm"])
    return found[0] if found else None


def test_fp32_gemm_reads_the_cuda_core_kernel_and_quotes_both_datasheet_rates() -> None:
    (hit,) = [f for f in diagnose(gpu_fixture("4096_fp32_warm_eager")) if f.rule == "fp32-gemm"]
    evidence = hit.evidence
    assert evidence["of"] == "steps" and evidence["share"] > 0.9
    assert evidence["share"] == round(evidence["fp32_gemm_us"] / evidence["window_us"], 4)
    assert [row["ops"] for row in evidence["kernels"]] == [{"aten::mm": 3}]
    assert "_ffma_" in evidence["kernels"][0]["kernel"]
    rates = evidence["datasheet_tflops"]
    assert (rates["fp32"], rates["tf32"]) == (66.9, 494.7)
    assert "The NVIDIA H100 80GB HBM3 (compute capability 9.0) has TF32 tensor cores" in (
        hit.message
    )
    assert hit.message.endswith('torch.set_float32_matmul_precision("high") lets cuBLAS use them.')
    assert hit.message.startswith("On the GPU, fp32 GEMMs ran on the CUDA cores for ")
    assert f"{percent(evidence['share'])} of the steps' time (" in hit.message


def test_fp32_gemm_without_steps_says_its_share_is_of_the_hosts_active_time(
    make_trace: Any,
) -> None:
    # Without steps the share is of the host's active time, not of the GPU's busy time.
    document = fixture_document("4096_fp32_warm_eager")
    document["traceEvents"] = [
        e for e in document["traceEvents"] if not e.get("name", "").startswith("ProfilerStep#")
    ]
    hit = _fp32_gemm(document, make_trace)
    assert hit is not None and hit.evidence["of"] == "recording"
    assert f"{percent(hit.evidence['share'])} of the host's active time (no steps to read)" in (
        hit.message
    )


def test_fp32_gemm_is_silent_once_any_gemm_runs_in_tf32(make_trace: Any) -> None:
    # TF32 allowed: cuBLAS picked the CUDA cores for the other GEMMs' shapes, not the user.
    document = fixture_document("4096_fp32_warm_eager")
    gemms = [e for e in document["traceEvents"] if "_ffma_" in e.get("name", "")]
    assert len(gemms) == 3 and _fp32_gemm(document, make_trace) is not None
    gemms[0]["name"] = _TF32_KERNEL
    assert _fp32_gemm(document, make_trace) is None


def test_fp32_gemm_is_silent_on_a_gpu_without_tf32_and_reads_the_kernels_without_one(
    make_trace: Any,
) -> None:
    document = fixture_document("4096_fp32_warm_eager")
    document["deviceProperties"][0].update(computeMajor=7, computeMinor=0)  # a V100
    assert _fp32_gemm(document, make_trace) is None
    del document["deviceProperties"]  # the sm80 kernel still says compute capability 8+
    hit = _fp32_gemm(document, make_trace)
    assert hit is not None and hit.evidence["datasheet_tflops"] is None
    assert "This GPU (its kernels are built for compute capability 8.0 or newer)" in hit.message
    for event in document["traceEvents"]:  # a Volta kernel says nothing of the kind
        if event.get("cat") == "kernel":
            event["name"] = "volta_sgemm_128x64_nn"
    assert _fp32_gemm(document, make_trace) is None


def test_fp32_gemm_is_silent_when_the_gemms_take_little_of_the_steps(make_trace: Any) -> None:
    from profiling_utils.rules.gpu_lane import FP32_GEMM_MIN_SHARE

    document = fixture_document("4096_fp32_warm_eager")
    share = _fp32_gemm(document, make_trace).evidence["share"]
    for event in document["traceEvents"]:
        if event.get("cat") == "kernel":
            event["dur"] *= FP32_GEMM_MIN_SHARE / share * 0.9
    assert _fp32_gemm(document, make_trace) is None


def test_fp32_gemm_leaves_out_attention_and_cpu_only_traces(make_trace: Any) -> None:
    # The math backend's upcast GEMMs run on the CUDA cores too: attention-math-fp32's.
    math = {f.rule for f in diagnose(gpu_fixture("attention_8x16x1024x64_bf16_sdpa-math"))}
    assert "attention-math-fp32" in math and "fp32-gemm" not in math
    document = fixture_document("4096_fp32_warm_eager")
    document["traceEvents"] = [
        e for e in document["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memset")
    ]
    assert _fp32_gemm(document, make_trace) is None


def test_the_cuda_graph_trees_capture_label_is_no_compile_step() -> None:
    from profiling_utils.rules.facts import is_compile_label

    assert is_compile_label("dynamo") and is_compile_label("compile_fx_inner (dynamo_timed)")
    assert is_compile_label("CachingAutotuner.benchmark_all_configs (dynamo_timed)")
    assert not is_compile_label("CUDAGraphNode.record (dynamo_timed)")
    assert not is_compile_label("CUDAGraphNode.record")
