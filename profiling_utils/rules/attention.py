"""Cheatsheet rows on attention: which backend ``scaled_dot_product_attention`` dispatched to,
and the causal mask a model rebuilds on every call.

``aten::scaled_dot_product_attention`` picks one implementation per call and the choice is
recorded as the op it calls, on CUDA and ROCm alike (:data:`SDPA_BACKENDS`); the rules read
those op names and their recorded input types (and those of the ops inside the backend's),
never a kernel's name.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator

from ..trace import Span, input_shapes
from .facts import MATMUL_OPS, Facts, replayed_without_ops, us
from .registry import Hit, rule

__all__ = [
    "SDPA_OP",
    "SDPA_BACKENDS",
    "MATH_BACKEND_OP",
    "FP32_TYPES",
    "CAUSAL_MASK_OPS",
    "MASK_OPS",
]

SDPA_OP = "aten::scaled_dot_product_attention"
"""The op ``torch.nn.functional.scaled_dot_product_attention`` records."""

MATH_BACKEND_OP = "aten::_scaled_dot_product_attention_math"
"""The math backend: attention written out as matmul, softmax and matmul in ATen."""

SDPA_BACKENDS: dict[str, str] = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_fused_attention_overrideable": "device-specific fused",
    MATH_BACKEND_OP: "math",
}
"""The op ``aten::scaled_dot_product_attention`` calls on a GPU, by backend it names.
(``_scaled_dot_product_flash_attention_for_cpu`` is left out: it runs on the CPU.)"""

FP32_TYPES = frozenset({"float"})
"""How the profiler's ``Input type`` spells a 32-bit float tensor."""


def _gpu_us_under(facts: Facts, ops: Iterable[Span]) -> dict[int, float]:
    """Per op id, the GPU time of the work launched from inside the op, µs (found by scanning
    the op's time range only: the ops are few and short)."""
    trace = facts.trace
    gpu_us: dict[int, float] = {}
    for op in ops:
        total = 0.0
        for inner in trace.within(op):
            total += sum(work.dur for work in trace.gpu_work_of(inner))
        gpu_us[op.id] = total
    return gpu_us


_TYPE_NOT_RECORDED = "(not recorded)"
"""``attention-backend``'s input type for a call recorded without shapes (``record_shapes``
off)."""


def _first_tensor_type(op: Span) -> str | None:
    shapes = input_shapes(op)
    first = shapes.types[0] if shapes is not None and shapes.types else ""
    return first if first not in ("", "Scalar") else None


def _first_dims(op: Span) -> list[int] | None:
    shapes = input_shapes(op)
    sizes = shapes.sizes(0) if shapes is not None else None
    return list(sizes) if sizes is not None else None


def _key_lengths(ops: list[Span]) -> list[int] | None:
    """The shortest and longest key length (the key's second-to-last dimension) over the
    calls, or None where a call recorded no key of three dimensions or more."""
    lengths = []
    for op in ops:
        shapes = input_shapes(op)
        key = shapes.sizes(1) if shapes is not None else None
        if key is None or len(key) < 3:
            return None
        lengths.append(key[-2])
    return [min(lengths), max(lengths)] if lengths else None


def _inline_math_calls(facts: Facts) -> list[Span]:
    """Outermost ``aten::scaled_dot_product_attention`` ops that call no backend op but matrix
    multiplies: the math path written out inline, as PyTorch releases before the math backend
    had an op of its own record it."""
    spans = facts.trace.spans
    found = []
    for sdpa in facts.named(SDPA_OP):
        if sdpa.cat != "cpu_op" or (sdpa.parent is not None and spans[sdpa.parent].name == SDPA_OP):
            continue
        inside = {inner.name for inner in facts.trace.within(sdpa)}
        if not inside & SDPA_BACKENDS.keys() and inside & MATMUL_OPS:
            found.append(sdpa)
    return found


def _backend_calls(facts: Facts) -> tuple[list[tuple[str, Span]], dict[int, float]]:
    """Every backend op that launched GPU work, with its backend, and the GPU time per op."""
    ops = [
        (backend, op)
        for name, backend in SDPA_BACKENDS.items()
        for op in facts.named(name)
        if op.cat == "cpu_op"
    ]
    ops += [("math", sdpa) for sdpa in _inline_math_calls(facts)]
    gpu_us = _gpu_us_under(facts, (op for _, op in ops))
    return [(backend, op) for backend, op in ops if gpu_us[op.id] > 0.0], gpu_us


@rule(
    "attention-backend",
    "dispatch chain",
    see="""aten::scaled_dot_product_attention → aten::_scaled_dot_product_flash_attention,
    _efficient_attention, _cudnn_attention or _attention_math.""",
    means="""The op under scaled_dot_product_attention names the backend that ran: flash,
    memory-efficient and cuDNN are fused kernels that never write the L × L score matrix;
    math writes attention out as matmul, softmax and matmul, with the scores in memory.
    A fused backend is refused (and math runs) for unsupported dtypes, masks or head sizes.""",
    severity="info",
    from_post=False,
    example="auto_examples/part3_attention/plot_15_sdpa_backends",
)
def attention_backend(facts: Facts) -> Iterator[Hit]:
    calls, gpu_us = _backend_calls(facts)
    if not calls:
        return
    per_backend: dict[str, list[Span]] = defaultdict(list)
    for backend, op in calls:
        per_backend[backend].append(op)
    keys = {backend: _key_lengths(ops) for backend, ops in per_backend.items()}
    # Backends chosen call by call: the key length often tells them apart (a first token's
    # key of length 1 against a growing cache's).
    told = len(per_backend) > 1 and all(keys.values())

    texts = {
        backend: ""
        if not told or lengths is None
        else f" (key length {lengths[0]})"
        if lengths[0] == lengths[1]
        else f" (key lengths {lengths[0]} to {lengths[1]})"
        for backend, lengths in keys.items()
    }
    summary = ", ".join(
        f"{backend} {len(ops)}×{texts[backend]}" for backend, ops in per_backend.items()
    )
    message = f"scaled_dot_product_attention's backend: {summary} (forward calls on the GPU)."
    # A decode loop's attention runs in graph replays, with no op to name its backend.
    replayed = replayed_without_ops(facts, sum(gpu_us.values()), "attention", "read")
    if replayed is not None:
        message += replayed[0]
    yield (
        message,
        {
            "backends": {
                backend: {
                    "op": ops[0].name,
                    "calls": len(ops),
                    "input_types": dict(
                        Counter(_first_tensor_type(op) or _TYPE_NOT_RECORDED for op in ops)
                    ),
                    "query_dims": _first_dims(ops[0]),
                    "key_lengths": keys[backend],
                    "gpu_us": us(sum(gpu_us[op.id] for op in ops)),
                    "steps": facts.step_numbers(ops),
                }
                for backend, ops in per_backend.items()
            }
        },
    )


_SHORT_TYPES = {"c10::BFloat16": "bf16", "c10::Half": "fp16"}


def _fp32_matmuls_inside(facts: Facts, op: Span) -> list[Span]:
    """The matrix-multiply ops run inside ``op`` (on its thread, in its time range) whose
    first input is fp32: the math backend's GEMMs after it upcast bf16/fp16 inputs."""
    return [
        inner
        for inner in facts.trace.within(op)
        if inner.cat == "cpu_op"
        and inner.name in MATMUL_OPS
        and _first_tensor_type(inner) in FP32_TYPES
    ]


_FP32_UNITS = {
    "nvidia": "on CUDA cores, not on bf16/fp16 tensor cores.",
    "amd": "at the matrix cores' fp32 rate, not at their bf16/fp16 one.",
    "intel": "rather than at the GPU's bf16/fp16 rate.",
    "meta": "rather than at the accelerator's bf16/fp16 rate.",
    "unknown": "rather than at the GPU's bf16/fp16 rate.",
}
"""Where an fp32 GEMM runs, in each vendor's words."""


@rule(
    "attention-math-fp32",
    "dispatch chain",
    see="""aten::_scaled_dot_product_attention_math whose GEMMs (aten::bmm / aten::matmul
    inside it) take float (fp32) inputs: either its own inputs are fp32, or they are bf16/fp16
    and it upcast them first (aten::to → aten::copy_ into float, then the GEMMs in fp32).
    Without that op, aten::scaled_dot_product_attention calling fp32 aten::bmm itself.""",
    means="""Attention fell back to the math backend and computes in fp32: its matrix
    multiplies run on CUDA cores (tensor cores only with TF32 allowed; on AMD, at the matrix
    cores' fp32 rate rather than their bf16/fp16 one) and the L × L scores
    make a round trip through memory. With bf16/fp16 inputs the math backend upcasts them
    unless torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True) is set. Check why
    the fused backends refused (dtype, mask, head size), or run attention in bf16/fp16.""",
    severity="warning",
    from_post=False,
    example="auto_examples/part3_attention/plot_15_sdpa_backends",
)
def attention_math_fp32(facts: Facts) -> Iterator[Hit]:
    calls, gpu_us = _backend_calls(facts)
    math: list[Span] = []
    gemms: list[Span] = []
    for backend, op in calls:
        if backend != "math":
            continue
        inner = _fp32_matmuls_inside(facts, op)
        if inner or _first_tensor_type(op) in FP32_TYPES:
            math.append(op)
            gemms += inner
    if not math:
        return
    steps = facts.step_numbers(math)
    total_us = sum(gpu_us[op.id] for op in math)
    per_step_us = total_us / len(steps) if steps else total_us
    input_type = _first_tensor_type(math[0])
    upcast = input_type not in FP32_TYPES and bool(gemms)
    short = _SHORT_TYPES.get(str(input_type), str(input_type))
    how = f"with its {short} inputs upcast to fp32" if upcast else "in fp32"
    yield (
        f"The math attention backend ran {len(math)}× {how} "
        f"(query {_first_dims(math[0])}), {per_step_us:.1f} µs of GPU time per step: "
        f"its GEMMs run in fp32 {_FP32_UNITS[facts.trace.vendor]}",
        {
            "op": math[0].name,
            "calls": len(math),
            "query_dims": _first_dims(math[0]),
            "input_type": input_type,
            "upcast": upcast,
            "fp32_gemm_ops": dict(Counter(op.name for op in gemms)),
            "gpu_us": us(total_us),
            "gpu_us_per_step": us(per_step_us),
            "steps": steps,
        },
    )


CAUSAL_MASK_OPS = frozenset({"aten::triu", "aten::tril"})
"""Ops that cut a square tensor into a causal (triangular) mask."""

MASK_OPS = CAUSAL_MASK_OPS | frozenset(
    {
        *("aten::ones", "aten::zeros", "aten::full", "aten::masked_fill", "aten::masked_fill_"),
        *("aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge"),
        *("aten::logical_not", "aten::where"),
    }
)
"""Ops a mask is built with: the triangle, the tensor it is cut from, the ``-inf`` filling or
the comparison that turns it into a bool or additive mask."""


def _result_dims(op: Span) -> tuple[int, ...] | None:
    """The shape an op produces: its first tensor input's, or for a factory (``aten::ones``,
    ``aten::full``) the size it was given, from the recorded shapes."""
    shapes = input_shapes(op)
    sizes = shapes.sizes(0) if shapes is not None else None
    if sizes is not None:
        return sizes
    concrete = op.args.get("Concrete Inputs")
    text = concrete[0] if isinstance(concrete, list) and concrete else ""
    if isinstance(text, str) and text.startswith("[") and text.endswith("]"):
        try:
            return tuple(int(size) for size in text[1:-1].split(","))
        except ValueError:
            return None
    return None


def _is_mask_shape(dims: tuple[int, ...]) -> bool:
    """``[L, L]`` or ``[B, 1, L, L]``, the shapes of a mask shared by every head (``L > 1``)."""
    square = len(dims) >= 2 and dims[-1] == dims[-2] > 1
    return square and (len(dims) == 2 or (len(dims) == 4 and dims[1] == 1))


def _mask_ops(facts: Facts, names: frozenset[str]) -> list[tuple[int, tuple[int, ...], Span]]:
    """The outermost ops named in ``names`` (``aten::ones``' own ``aten::fill_`` is part of
    it) that ran in a step with a mask's shape, each with its step and shape."""
    spans = facts.trace.spans
    found = []
    for name in sorted(names):  # a set's order varies between processes
        for op in facts.named(name):
            if op.cat != "cpu_op" or (op.parent is not None and spans[op.parent].name in names):
                continue
            step = facts.step_number_of(op)
            dims = _result_dims(op) if step is not None else None
            if dims is not None and _is_mask_shape(dims):
                found.append((step, dims, op))
    return found


@rule(
    "mask-rebuilt",
    "dispatch chain",
    see="""aten::triu / aten::tril on an [L, L] (or [B, 1, L, L]) tensor in every step, with the
    aten::ones / aten::full / aten::masked_fill / comparison ops that build the mask.""",
    means="""A constant attention mask rebuilt on every call: the same ops, the same shape, each
    step. Build it once and keep it (a registered buffer sliced to the length), or pass
    is_causal=True to scaled_dot_product_attention, whose fused backends build none. Under
    aten::_scaled_dot_product_attention_math the triangle is the math backend's own, built
    on every call even with is_causal=True: there the fix is a fused backend.""",
    severity="warning",
    from_post=False,
    example="auto_examples/part3_attention/plot_15_sdpa_backends",
)
def mask_rebuilt(facts: Facts) -> Iterator[Hit]:
    if not facts.trace.kernels or len(facts.steps) < 2:
        return
    every_step = {step.number for step in facts.steps}
    causal_steps: dict[tuple[str, tuple[int, ...]], set[int]] = defaultdict(set)
    for step, dims, op in _mask_ops(facts, CAUSAL_MASK_OPS):
        causal_steps[op.name, dims].add(step)
    # The mask lengths a triangle was cut at in every step, with the same shape each time.
    lengths = {dims[-1] for (_, dims), steps in causal_steps.items() if steps == every_step}
    if not lengths:
        return
    rebuilt = [entry for entry in _mask_ops(facts, MASK_OPS) if entry[1][-1] in lengths]
    gpu_us = _gpu_us_under(facts, (op for _, _, op in rebuilt))
    per_step = len(every_step)
    ops = Counter(op.name for _, _, op in rebuilt)
    shapes = sorted({dims for _, dims, _ in rebuilt})
    cpu_us = sum(op.dur for _, _, op in rebuilt) / per_step
    gpu_total_us = sum(gpu_us[op.id] for _, _, op in rebuilt) / per_step
    # Built inside the math backend's call, the mask is the backend's own, not the caller's.
    inside = {
        any(a.name == MATH_BACKEND_OP for a in facts.trace.ancestors(op)) for _, _, op in rebuilt
    }
    by_math = inside == {True}
    message = (
        f"A mask of shape {list(shapes[0])} is rebuilt in every step: "
        + ", ".join(f"{name} {count / per_step:.0f}×" for name, count in ops.most_common())
        + f" per step, {cpu_us:.1f} µs of CPU and {gpu_total_us:.1f} µs of GPU time per step."
    )
    if by_math:
        message += (
            f" It is built inside {MATH_BACKEND_OP}: the causal mask the math backend makes "
            "for is_causal=True, on every call; a fused backend makes none."
        )
    yield (
        message,
        {
            "ops_per_step": {name: round(count / per_step, 2) for name, count in ops.most_common()},
            "dims": [list(dims) for dims in shapes],
            "cpu_us_per_step": us(cpu_us),
            "gpu_us_per_step": us(gpu_total_us),
            "steps": sorted(every_step),
            "inside": MATH_BACKEND_OP if by_math else None,
        },
    )
