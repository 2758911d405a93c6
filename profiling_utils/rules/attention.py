"""Cheatsheet rows on attention: which backend ``scaled_dot_product_attention`` dispatched to,
and the causal mask a model rebuilds on every call.

``aten::scaled_dot_product_attention`` picks one implementation per call and the choice is
recorded as the op it calls, on CUDA and ROCm alike (:data:`SDPA_BACKENDS`); the rules read
those op names and their recorded input types, never a kernel's name.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

from ..trace import Span
from .facts import Facts, us
from .registry import Hit, rule

__all__ = ["SDPA_BACKENDS", "MATH_BACKEND_OP", "FP32_TYPES"]

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


def _gpu_us_under(facts: Facts, names: frozenset[str] | set[str]) -> dict[int, float]:
    """Per span id of an op named in ``names``, the GPU time of the kernels launched from
    inside it, µs (each kernel counted for its nearest such op)."""
    if not any(name in facts.trace.by_name for name in names):
        return {}
    gpu_us: dict[int, float] = defaultdict(float)
    for launch in facts.launches:
        for enclosing in facts.trace.ancestors(launch.call):
            if enclosing.name in names:
                gpu_us[enclosing.id] += sum(work.dur for work in launch.work)
                break
    return gpu_us


def _first_tensor_type(op: Span) -> str | None:
    types = op.args.get("Input type") or []
    return types[0] if types and types[0] not in ("", "Scalar") else None


def _first_dims(op: Span) -> list[int] | None:
    dims = op.args.get("Input Dims") or []
    return list(dims[0]) if dims and dims[0] else None


def _backend_calls(facts: Facts) -> tuple[list[tuple[str, Span]], dict[int, float]]:
    """Every backend op that launched GPU work, with its backend, and the GPU time per op."""
    gpu_us = _gpu_us_under(facts, set(SDPA_BACKENDS))
    calls = [
        (backend, op)
        for name, backend in SDPA_BACKENDS.items()
        for op in facts.named(name)
        if op.cat == "cpu_op" and gpu_us.get(op.id, 0.0) > 0.0
    ]
    return calls, gpu_us


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
)
def attention_backend(facts: Facts) -> Iterator[Hit]:
    calls, gpu_us = _backend_calls(facts)
    if not calls:
        return
    per_backend: dict[str, list[Span]] = defaultdict(list)
    for backend, op in calls:
        per_backend[backend].append(op)
    summary = ", ".join(f"{backend} {len(ops)}×" for backend, ops in per_backend.items())
    yield (
        f"scaled_dot_product_attention ran its backends: {summary} (forward calls on the GPU).",
        {
            "backends": {
                backend: {
                    "op": ops[0].name,
                    "calls": len(ops),
                    "input_types": dict(Counter(str(_first_tensor_type(op)) for op in ops)),
                    "query_dims": _first_dims(ops[0]),
                    "gpu_us": us(sum(gpu_us[op.id] for op in ops)),
                    "steps": facts.step_numbers(ops),
                }
                for backend, ops in per_backend.items()
            }
        },
    )


@rule(
    "attention-math-fp32",
    "dispatch chain",
    see="""aten::_scaled_dot_product_attention_math with float (fp32) inputs, launching
    aten::bmm / aten::baddbmm GEMMs and a softmax.""",
    means="""Attention fell back to the math backend in fp32: its matrix multiplies run on CUDA
    cores (tensor cores only with TF32 allowed) and the L × L scores make a round trip through
    memory. Run attention in bf16/fp16 (autocast), or check why the fused backends refused.""",
    severity="warning",
    from_post=False,
)
def attention_math_fp32(facts: Facts) -> Iterator[Hit]:
    calls, gpu_us = _backend_calls(facts)
    math = [
        op for backend, op in calls if backend == "math" and _first_tensor_type(op) in FP32_TYPES
    ]
    if not math:
        return
    steps = facts.step_numbers(math)
    total_us = sum(gpu_us[op.id] for op in math)
    per_step_us = total_us / len(steps) if steps else total_us
    yield (
        f"The math attention backend ran {len(math)}× in fp32 "
        f"(query {_first_dims(math[0])}), {per_step_us:.1f} µs of GPU time per step: "
        "its GEMMs run on CUDA cores, not tensor cores.",
        {
            "op": MATH_BACKEND_OP,
            "calls": len(math),
            "query_dims": _first_dims(math[0]),
            "input_type": _first_tensor_type(math[0]),
            "gpu_us": us(total_us),
            "gpu_us_per_step": us(per_step_us),
            "steps": steps,
        },
    )
