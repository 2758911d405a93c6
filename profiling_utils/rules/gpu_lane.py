"""Cheatsheet table "GPU lane": the profiler's overhead row, gaps, kernel timings, GEMMs and the
copies and memsets around them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from .. import measures
from ..trace import Span
from .facts import (
    BIAS_MATMUL_OPS,
    MATMUL_OPS,
    Copy,
    Facts,
    Launch,
    median,
    short_name,
    span_ref,
    step_label,
    us,
)
from .registry import Hit, rule

BUFFER_REQUEST = "Activity Buffer Request"
"""The name Kineto gives the profiler's own buffer allocations on the overhead lane."""

GAP_MIN_US = 10.0
"""``intra-step-gap``: the shortest idle stretch worth reporting (µs)."""

GAP_MAX_STEP_SHARE = 1 / 3
"""``intra-step-gap``: the gap must show in at most this share of the steps (at least one):
a gap in most steps is a property of the code, not a one-off."""

VARIANCE_MIN_RATIO = 1.5
"""``kernel-variance``: an instance at least this many times the median of its kernel..."""

VARIANCE_MIN_EXCESS_US = 10.0
"""... and at least this much longer (µs)."""

VARIANCE_MIN_COUNT = 3
"""``kernel-variance``: instances needed to speak of a typical duration."""

_REPORTED = 5


@rule(
    "buffer-request",
    "GPU lane",
    see="Activity Buffer Request on the profiler's overhead row.",
    means="""The profiler allocating its own event buffers, not your code. With no wait or
    warmup in the schedule it lands in the first profiled step and adds to that step's
    offset between the CPU and GPU lanes; a schedule with wait and warmup steps keeps it out
    of the recorded ones.""",
    severity="warning",
    example="auto_examples/plot_04_buffer_request_and_offset",
)
def buffer_request(facts: Facts) -> Iterator[Hit]:
    requests = [span for span in facts.trace.overhead if span.name == BUFFER_REQUEST]
    if not requests:
        return
    steps = facts.steps
    offsets = {offset.step: offset for offset in measures.lane_offset(facts.trace)}
    for request in requests:
        number = facts.step_number_of(request)
        evidence: dict[str, Any] = {
            "request": span_ref(request),
            "step": number,
            "requests": len(requests),
            "steps": len(steps),
        }
        where = ""
        if number is not None:
            step = next(s for s in steps if s.number == number)
            op = facts.innermost_cpu_op_at(request.start, step.span)
            if op is not None:
                evidence["during_op"] = span_ref(op)
                where = f" while {op.name} runs"
            where += f" in {step_label(number)}"
            offset = offsets.get(number)
            if offset is not None:
                evidence["first_launch"] = span_ref(offset.launch)
                evidence["lane_offset_us"] = us(offset.offset_us)
                evidence["step_start_to_gpu_us"] = us(offset.step_start_to_gpu_us)
        message = (
            f"{BUFFER_REQUEST} for {request.dur:.1f} µs at {request.start:.1f} µs{where} "
            f"({len(requests)} in the trace, {len(steps)} steps)"
        )
        if "first_launch" in evidence:
            launch = evidence["first_launch"]
            message += (
                f"; the step's first GPU work starts {evidence['step_start_to_gpu_us']:.1f} µs "
                f"after the step, its launch ({launch['name']}) takes {launch['dur_us']:.1f} µs"
            )
        yield message + ".", evidence


@rule(
    "intra-step-gap",
    "GPU lane",
    see="""Inside one step, the GPU idles between two activities although the second was
    already launched, and this shows in one step (or few) only.""",
    means="""Something other than your code held the GPU back: most often the profiler
    refilling its buffers mid-run, otherwise driver housekeeping. Profile more steps: if the
    gap appears once, it is the profiler. A gap whose second kernel was launched late is CPU
    time instead (see overhead-bound).""",
    severity="warning",
)
def intra_step_gap(facts: Facts) -> Iterator[Hit]:
    trace = facts.trace
    steps = len(facts.steps)
    queued: dict[int, list[tuple[Span, Span, Span]]] = {}
    # One pass over the GPU work of each device, in start order, checking each long-enough
    # gap's launch as it goes. Not measures.gpu_gaps: a training trace has tens of thousands
    # of gaps over the threshold, nearly all caused by the CPU, and building a GpuGap for
    # each would cost this rule several times its time.
    latest: dict[Any, tuple[Span, float]] = {}  # per device: the activity ending last, its end
    for work in trace.gpu_work:
        device = work.lane.device
        end = work.start + work.dur
        previous = latest.get(device)
        if previous is None or end > previous[1]:
            latest[device] = (work, end)
        if previous is None or work.start - previous[1] < GAP_MIN_US:
            continue
        before, before_end = previous
        launch = trace.launch_of(work)
        if launch is None or launch.start + launch.dur > before_end:
            continue  # launched after the GPU went idle: the CPU was late, not the GPU
        number = facts.step_number_of(work)
        if number is not None and number == facts.step_number_of(before):
            queued.setdefault(number, []).append((before, work, launch))
    if not queued or len(queued) > max(1, int(steps * GAP_MAX_STEP_SHARE)):
        return
    for number, gaps in queued.items():
        before, after, launch = max(gaps, key=lambda gap: gap[1].start - gap[0].end)
        gap_us = after.start - before.end
        overhead = [
            span_ref(span)
            for span in trace.overhead
            if span.start < after.start and span.end > before.end
        ]
        yield (
            f"In {step_label(number)} the GPU idles {gap_us:.1f} µs between "
            f"{short_name(before.name)} and {short_name(after.name)}, although the latter was "
            f"launched {before.end - launch.end:.1f} µs before the GPU went idle; "
            f"{len(queued)} of {steps} steps show such a gap.",
            {
                "step": number,
                "gap_us": us(gap_us),
                "before": span_ref(before),
                "after": span_ref(after),
                "after_launch": span_ref(launch),
                "steps_with_gap": sorted(queued),
                "steps": steps,
                "profiler_overhead": overhead,
            },
        )


@rule(
    "kernel-variance",
    "GPU lane",
    see="""The same kernel, with the same launch configuration, taking noticeably different
    times across steps.""",
    means="""GPU clocks ramping, temperature, power management or driver housekeeping: the
    hardware, not your code. Read the distribution in the trace, or the median, rather than
    the mean alone.""",
    severity="info",
)
def kernel_variance(facts: Facts) -> Iterator[Hit]:
    for name, kernels in facts.kernels_by_name.items():
        if len(kernels) < VARIANCE_MIN_COUNT or not _varies(kernels):
            continue
        by_config: dict[str, list[Span]] = {}
        for kernel in kernels:  # the same name can run different shapes
            args = kernel.args
            by_config.setdefault(repr((args.get("grid"), args.get("block"))), []).append(kernel)
        for same in by_config.values():
            if len(same) < VARIANCE_MIN_COUNT or not _varies(same):
                continue
            typical = median(k.dur for k in same)
            slow = [
                k
                for k in same
                if k.dur >= VARIANCE_MIN_RATIO * typical
                and k.dur - typical >= VARIANCE_MIN_EXCESS_US
            ]
            slowest = max(slow, key=lambda k: k.dur)
            mean = sum(k.dur for k in same) / len(same)
            number = facts.step_number_of(slowest)
            where = f" in {step_label(number)}" if number is not None else ""
            yield (
                f"{short_name(name)} runs {len(same)}× with a median of {typical:.1f} µs but takes "
                f"{slowest.dur:.1f} µs{where} ({slowest.dur / typical:.1f}×); the mean, "
                f"{mean:.1f} µs, hides this.",
                {
                    "kernel": name,
                    "grid": slowest.args.get("grid"),
                    "block": slowest.args.get("block"),
                    "count": len(same),
                    "median_us": us(typical),
                    "mean_us": us(mean),
                    "min_us": us(min(k.dur for k in same)),
                    "max_us": us(slowest.dur),
                    "slow": [
                        {**span_ref(k), "step": facts.step_number_of(k)} for k in slow[:_REPORTED]
                    ],
                },
            )


def _varies(kernels: list[Span]) -> bool:
    typical = median(k.dur for k in kernels)
    longest = max(k.dur for k in kernels)
    return longest >= VARIANCE_MIN_RATIO * typical and longest - typical >= VARIANCE_MIN_EXCESS_US


@rule(
    "gemm-kernel",
    "GPU lane",
    see="""The kernel under a matrix-multiply op (aten::mm, aten::addmm, aten::bmm...), whatever
    its name: ampere_bf16_s16816gemm... on an A100; nvjet_sm90_... or sm80_xmma_gemm... on an
    H100.""",
    means="""The actual GEMM work: a cuBLAS/cuBLASLt kernel picked for the shapes, dtype and
    GPU. Its name encodes the architecture and tiling, so compare runs by op and duration,
    not by name: the same shapes can pick another variant when the bias is added differently
    (on an H100 the compiled addmm runs a bias-accumulating variant of the eager kernel).""",
    severity="info",
    example="auto_examples/plot_08_torch_compile",
)
def gemm_kernel(facts: Facts) -> Iterator[Hit]:
    gemms = facts.gemm_launches
    if not gemms:
        return
    by_name: dict[str, list[tuple[Launch, Span]]] = {}
    for launch, kernel in gemms:
        by_name.setdefault(kernel.name, []).append((launch, kernel))
    gpu_total = sum(work.dur for work in facts.trace.gpu_work)
    rows = []
    for name, members in by_name.items():
        total = sum(kernel.dur for _, kernel in members)
        rows.append(
            {
                "kernel": name,
                "count": len(members),
                "ops": dict(Counter(launch.op.name for launch, _ in members if launch.op)),
                "apis": dict(Counter(launch.call.name for launch, _ in members)),
                "median_us": us(median(kernel.dur for _, kernel in members)),
                "total_us": us(total),
                "gpu_share": round(total / gpu_total, 4) if gpu_total > 0 else None,
            }
        )
    rows.sort(key=lambda row: -row["total_us"])
    top = rows[0]
    message = (
        f"{len(rows)} GEMM kernel(s) under matrix-multiply ops; the largest, "
        f"{short_name(top['kernel'])}, runs {top['count']}× from {', '.join(top['ops'])} "
        f"(median {top['median_us']:.1f} µs, {top['gpu_share']:.0%} of GPU time)."
    )
    yield message, {"kernels": rows[:_REPORTED], "gemm_kernels": len(rows)}


def _before_gemm(facts: Facts, kind: str, ops: frozenset[str]) -> list[tuple[Copy, Span]]:
    """Copies (or memsets) of ``kind`` issued by one of ``ops`` and followed, on the GPU, by a
    kernel of the same op (with at most other copies or memsets in between)."""
    pairs = []
    for copy in facts.copies:
        op = copy.launch.op
        if copy.kind != kind or op is None or op.name not in ops:
            continue
        sequence = sorted(
            (work for launch in facts.launches_by_op[op.id] for work in launch.work),
            key=lambda work: work.start,
        )
        after = sequence[sequence.index(copy.work) + 1 :]
        kernel = next((work for work in after if work.cat == "kernel"), None)
        if kernel is not None:  # the first kernel after it: only copies or memsets between
            pairs.append((copy, kernel))
    return pairs


def _pair_rows(facts: Facts, pairs: list[tuple[Copy, Span]]) -> dict[str, Any]:
    copy, kernel = pairs[0]
    bandwidths = [c.bandwidth_gb_s for c, _ in pairs if c.bandwidth_gb_s is not None]
    return {
        "count": len(pairs),
        "op": copy.launch.op.name if copy.launch.op else None,
        "bytes": copy.bytes,
        "median_us": us(median(c.work.dur for c, _ in pairs)),
        "median_bandwidth_gb_s": round(median(bandwidths), 1) if bandwidths else None,
        "gemm_kernel": kernel.name,
        "gemm_median_us": us(median(k.dur for _, k in pairs)),
        "steps": facts.step_numbers(c.work for c, _ in pairs),
        "first": {
            "copy": span_ref(copy.work),
            "gemm": span_ref(kernel),
            "gap_us": us(kernel.start - copy.work.end),
        },
    }


@rule(
    "bias-copy",
    "GPU lane",
    see="A Memcpy DtoD right before a GEMM, both issued by the same addmm-like op.",
    means="""addmm seeding its output with the bias (out = bias, then out = A·B + out): the add
    is folded into the GEMM's epilogue, the "fusion" happens at the dispatcher, and the copy
    still moves the whole bias once. A bias that is a vector can go into a bias epilogue
    with no copy, as nn.Linear's addmm does.""",
    severity="info",
    example="auto_examples/plot_08_torch_compile",
)
def bias_copy(facts: Facts) -> Iterator[Hit]:
    pairs = _before_gemm(facts, "DtoD", BIAS_MATMUL_OPS)
    if not pairs:
        return
    row = _pair_rows(facts, pairs)
    size = f"{row['bytes']:,} B" if row["bytes"] is not None else "bytes unknown"
    bandwidth = row["median_bandwidth_gb_s"]
    yield (
        f"{row['count']} Memcpy DtoD ({size}, {row['median_us']:.1f} µs"
        + (f", {bandwidth:,.0f} GB/s copied" if bandwidth is not None else "")
        + f") right before {short_name(row['gemm_kernel'])}, both from {row['op']}.",
        row,
    )


@rule(
    "memset-before-gemm",
    "GPU lane",
    see="""A tiny Memset (Device), a few bytes, right before a GEMM kernel, both issued by the
    matrix-multiply op (cudaMemsetAsync then the launch).""",
    means="""The GEMM library clearing a small piece of workspace the kernel expects zeroed,
    such as a counter its thread blocks coordinate through. Seen on an H100 for large bf16
    GEMMs; one more launch and well under a microsecond of GPU time, but it means one op is
    not one GPU activity.""",
    severity="info",
    from_post=False,
    example="auto_examples/plot_08_torch_compile",
)
def memset_before_gemm(facts: Facts) -> Iterator[Hit]:
    pairs = _before_gemm(facts, "memset", MATMUL_OPS)
    if not pairs:
        return
    row = _pair_rows(facts, pairs)
    size = f"{row['bytes']:,} B" if row["bytes"] is not None else "bytes unknown"
    yield (
        f"{row['count']} Memset ({size}, {row['median_us']:.2f} µs) right before "
        f"{short_name(row['gemm_kernel'])}, both from {row['op']}.",
        row,
    )
