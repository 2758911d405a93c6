"""Cheatsheet table "Dispatch chain": how a Python call nests down to the kernel it launches."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from ..trace import Span
from .facts import Facts, is_aten_kernel, is_gemm_helper, median, short_name, span_ref, us
from .registry import Hit, rule

FOLDING_OPS = frozenset({"aten::reshape", "aten::view", "aten::_unsafe_view", "aten::flatten"})
"""Ops ``aten::matmul`` calls around ``aten::mm`` when it folds leading dimensions into rows."""

_REPORTED = 5


@rule(
    "call-chain",
    "dispatch chain",
    see="""ProfilerStep#N → your record_function label → aten::* → aten::mm / aten::bmm /
    aten::add → the launch call → the kernel.""",
    means="""The canonical nesting of a step: each row encloses the ones it calls. Self time
    leaves the rows below out, total time includes them; the launch call links the CPU side to
    the kernel on the GPU lane.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_05_dispatch_chain",
)
def call_chain(facts: Facts) -> Iterator[Hit]:
    trace = facts.trace
    step_lanes = {id(step.span.lane) for step in facts.steps}  # few lanes: compare identity
    whole = not facts.steps  # no steps: a launch anywhere in the recording
    communication = facts.communication_ids
    # The launch with the most GPU time, made inside a step, collectives left out: their
    # chain runs through c10d, not through the compute the step is built of. One that
    # torch.compile made while compiling (a candidate kernel its autotuner times) only where
    # the program made none: its chain runs through the compiler.
    best: dict[bool, tuple[Any, float]] = {}
    compiler = bool(facts.compile_labels)
    for candidate in facts.launches:
        if candidate.op is None or not (whole or id(candidate.call.lane) in step_lanes):
            continue
        if communication and any(work.id in communication for work in candidate.work):
            continue
        gpu_us = sum(work.dur for work in candidate.work)
        compiling = compiler and facts.while_compiling(candidate.call)
        if gpu_us > best.get(compiling, (None, -1.0))[1] and (
            whole or facts.step_number_of(candidate.call) is not None
        ):
            best[compiling] = (candidate, gpu_us)
    if not best:
        return
    launch = (best[False] if False in best else best[True])[0]
    ancestors = list(trace.ancestors(launch.call))[::-1]
    # A with_stack trace nests the Python stack's frames among the ops: hundreds of them.
    frames = sum(span.cat == "python_function" for span in ancestors)
    ancestors = [span for span in ancestors if span.cat != "python_function"]
    work = max(launch.work, key=lambda w: w.dur)
    chain = [*ancestors, launch.call, work]
    left_out = f"; {frames} Python frames of the stack left out" if frames else ""
    evidence: dict[str, Any] = {
        "step": facts.step_number_of(launch.call),
        "chain": [
            {**span_ref(span), "cat": span.cat, "self_us": us(facts.self_us(span))}
            for span in chain
        ],
    }
    if frames:
        evidence["python_frames_left_out"] = frames
    yield (
        " → ".join(short_name(span.name) for span in chain)
        + f" ({work.dur:.1f} µs on the GPU{left_out}).",
        evidence,
    )


def _under(facts: Facts, op_name: str, parent_name: str) -> list[tuple[Span, Span]]:
    """(parent, op) pairs where ``op_name`` is directly nested in ``parent_name``."""
    spans = facts.trace.spans
    pairs = []
    for op in facts.named(op_name):
        if op.cat == "cpu_op" and op.parent is not None:
            parent = spans[op.parent]
            if parent.name == parent_name:
                pairs.append((parent, op))
    return pairs


def _kernels_of(facts: Facts, op: Span) -> list[Span]:
    return [
        work
        for launch in facts.launches_by_op.get(op.id, [])
        for work in launch.work
        if work.cat == "kernel"
    ]


@rule(
    "mm-dispatch",
    "dispatch chain",
    see="aten::matmul resolving to aten::mm.",
    means="""A 2-D × 2-D matrix multiply. When aten::reshape or aten::view come before the mm,
    matmul folded the leading (batch) dimensions of a 3-D input into rows because the other
    operand is 2-D: still one plain mm, not a batched one.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_09_diagnose_your_own_trace",
)
def mm_dispatch(facts: Facts) -> Iterator[Hit]:
    pairs = _under(facts, "aten::mm", "aten::matmul")
    if not pairs:
        return
    folded = {
        matmul.id
        for matmul, _ in pairs
        if any(child.name in FOLDING_OPS for child in facts.trace.children(matmul))
    }
    kernels = Counter(k.name for _, mm in pairs for k in _kernels_of(facts, mm))
    message = f"aten::matmul → aten::mm {len(pairs)}×"
    if folded:
        message += f", {len(folded)} of them folding a batch dimension into rows (reshape/view)"
    if kernels:
        message += f"; kernel: {short_name(kernels.most_common(1)[0][0])}"
    yield (
        message + ".",
        {
            "count": len(pairs),
            "folded": len(folded),
            "steps": facts.step_numbers([mm for _, mm in pairs]),
            "median_mm_us": us(median(mm.dur for _, mm in pairs)),
            "kernels": dict(kernels.most_common(_REPORTED)),
        },
    )


@rule(
    "bmm-dispatch",
    "dispatch chain",
    see="""aten::matmul resolving to aten::bmm, with extra CUDA runtime calls on the post's
    A100.""",
    means="""A batched matrix multiply on 3-D (or higher) tensors on both sides. On the A100
    cuBLAS did more work to choose and set up the batched kernel, which showed as extra calls
    under the op; on an H100 the batched product launches the same kind of kernel as mm,
    with no extra call, so the op name is what tells them apart.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_05_dispatch_chain",
)
def bmm_dispatch(facts: Facts) -> Iterator[Hit]:
    bmms = [span for span in facts.named("aten::bmm") if span.cat == "cpu_op"]
    if not bmms:
        return
    spans = facts.trace.spans
    parents = Counter(_caller(spans, bmm) for bmm in bmms)
    bmm_ids = {bmm.id for bmm in bmms}
    calls = Counter(
        call.name
        for call in facts.trace.runtime_calls
        if call.parent in bmm_ids and not call.is_launch
    )
    kernels = Counter(k.name for bmm in bmms for k in _kernels_of(facts, bmm))
    message = f"aten::bmm {len(bmms)}× (under {', '.join(parents)})"
    if calls:
        message += "; runtime calls besides the launch: " + ", ".join(
            f"{name} ×{count}" for name, count in calls.most_common(_REPORTED)
        )
    yield (
        message + ".",
        {
            "count": len(bmms),
            "parents": dict(parents),
            "steps": facts.step_numbers(bmms),
            "median_bmm_us": us(median(bmm.dur for bmm in bmms)),
            "extra_runtime_calls": dict(calls.most_common(_REPORTED)),
            "kernels": dict(kernels.most_common(_REPORTED)),
        },
    )


@rule(
    "addmm-fusion",
    "dispatch chain",
    see="aten::addmm(b, x, w) where the eager code had a separate aten::mm and aten::add.",
    means="""Operator fusion at the dispatcher: one op and one GEMM kernel whose epilogue adds
    the bias. No new kernel was generated; a full-matrix bias is first copied into the output
    (see bias-copy), a vector bias (nn.Linear) goes straight into the epilogue.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def addmm_fusion(facts: Facts) -> Iterator[Hit]:
    # Only addmms that launched GPU work: the rule reads the fusion off the GPU lane, and a
    # CPU-only trace has nothing there to read.
    addmms = [
        span
        for span in facts.named("aten::addmm")
        if span.cat == "cpu_op"
        and any(launch.work for launch in facts.launches_by_op.get(span.id, []))
        and not facts.while_compiling(span)  # the autotuner timing a candidate
    ]
    if not addmms:
        return
    spans = facts.trace.spans
    parents = Counter(_caller(spans, op) for op in addmms)
    activities: Counter[str] = Counter()
    kernels: Counter[str] = Counter()
    with_copy = 0
    for op in addmms:
        work = [w for launch in facts.launches_by_op.get(op.id, []) for w in launch.work]
        activities[" + ".join(_activity(w) for w in sorted(work, key=lambda w: w.start))] += 1
        kernels.update(
            w.name
            for w in work
            if w.cat == "kernel" and not is_aten_kernel(w) and not is_gemm_helper(w)
        )
        with_copy += any(_is_bias_copy(w) for w in work)
    pattern, _ = activities.most_common(1)[0]
    parent_names = ", ".join(short_name(name, 48) for name in parents)
    yield (
        f"aten::addmm {len(addmms)}× (under {parent_names}); on the GPU: {pattern}"
        + (f"; {with_copy} with a bias copy first" if with_copy else "; no bias copy")
        + ".",
        {
            "count": len(addmms),
            "parents": dict(parents.most_common(_REPORTED)),
            "gpu_activities": dict(activities.most_common(_REPORTED)),
            "kernels": dict(kernels.most_common(_REPORTED)),
            "with_bias_copy": with_copy,
            "steps": facts.step_numbers(addmms),
        },
    )


def _caller(spans: list[Span], op: Span) -> str:
    """The name of the span ``op`` is nested in, past any of its own name (older torch
    records an op re-entered by its dispatch, ``aten::addmm`` in ``aten::addmm``):
    ``"ProfilerStep#N"`` for any step, ``"(top level)"`` for none."""
    parent = op.parent
    while parent is not None and spans[parent].name == op.name:
        parent = spans[parent].parent
    if parent is None:
        return "(top level)"
    name = spans[parent].name
    return "ProfilerStep#N" if name.startswith("ProfilerStep#") else name


def _activity(work: Span) -> str:
    if work.cat == "kernel":
        if is_aten_kernel(work):
            return "ATen kernel"
        if is_gemm_helper(work):
            return "hipBLASLt helper kernel" if "_PostGSU" in work.name else "cuBLAS helper kernel"
        return "GEMM kernel"
    return work.name.split(" (")[0]


def _is_bias_copy(work: Span) -> bool:
    """A memcpy, or PyTorch's own copy kernel (how addmm seeds its output on ROCm)."""
    return work.cat == "gpu_memcpy" or (is_aten_kernel(work) and "copy" in work.name)
