"""What a GEMM or convolution kernel's name says about the math it runs on fp32 data.

A trace records no setting of ``torch.backends.cuda.matmul.allow_tf32`` or
``torch.set_float32_matmul_precision``, but NVIDIA's libraries name their kernels after the
math they do, and PyTorch's settings only decide which of them run:

- **fp32 on the CUDA cores**: cuBLAS's ``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`` (a
  fused fp32 multiply-add per element, its choice on an A100 or H100 while TF32 is off, at
  every size), its older ``ampere_sgemm_*`` and ``volta_sgemm_*``, CUTLASS's
  ``cutlass_80_simt_sgemm_*``, cuDNN's ``implicit_convolve_sgemm``;
- **TF32 on the tensor cores**: ``sm90_xmma_gemm_f32f32_tf32f32_f32_...`` and cuDNN's
  ``..._implicit_gemm_tf32f32_tf32f32_f32_...`` (``tf32`` in the name), CUTLASS's
  ``cutlass_80_tensorop_s1688gemm_*``, cuBLAS's picks on an H100 once TF32 is allowed.

A name that says neither (cuBLAS's ``nvjet_*``, a Triton kernel, AMD's Tensile
``Cijk_...`` kernels, a GEMV) says nothing here: :func:`fp32_math` gives ``None``.

Example::

    fp32_math("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_"
              "warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas")  # "fp32"
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["Fp32Math", "fp32_math", "fp32_math_word", "TF32_CAPABLE_KERNEL"]

Fp32Math = Literal["tf32", "fp32"]
"""``"tf32"``: TF32 on tensor cores; ``"fp32"``: plain fp32 on the CUDA cores."""

_TF32 = re.compile(r"tf32|s1688gemm|s16816gemm")
_CUDA_CORE_FP32 = re.compile(r"sgemm|_ffma_")
# CUTLASS writes s16816gemm for a bf16 or fp16 GEMM that accumulates in fp32 too
# (ampere_bf16_s16816gemm_bf16_...): a 16-bit or 8-bit type in the name is not fp32 data.
_NARROW_TYPES = re.compile(r"f16|fp16|fp8|e4m3|e5m2|i8|h1688|h884|h16816")

TF32_CAPABLE_KERNEL = re.compile(
    r"(?<![A-Za-z0-9])(?:ampere|sm_?(?:8|9|1\d)\d|cutlass_(?:8|9|1\d)\d)_"
)
"""A kernel name built for compute capability 8.0 or newer (``ampere_...``, ``sm80_...``,
``sm90_...``, ``cutlass_80_...``): a GPU that runs it has TF32 tensor cores, whatever
``deviceProperties`` says or leaves out."""


def fp32_math(name: str) -> Fp32Math | None:
    """How a GEMM or convolution kernel computes on fp32 data, by its name: ``"tf32"`` on
    tensor cores, ``"fp32"`` on the CUDA cores, ``None`` when the name does not say (or names
    a 16- or 8-bit type)."""
    said = _fp32_math_match(name)
    return said[0] if said else None


def fp32_math_word(name: str) -> str | None:
    """The part of a kernel's name that :func:`fp32_math` reads its answer from (``"tf32"``,
    ``"_ffma_"``, ``"sgemm"``, ``"s1688gemm"``...), ``None`` where it gives ``None``.
    cuBLAS writes ``_ffma_`` 76 characters into a name of over a hundred: show this beside
    a name cut short."""
    said = _fp32_math_match(name)
    return said[1] if said else None


def _fp32_math_match(name: str) -> tuple[Fp32Math, str] | None:
    if _NARROW_TYPES.search(name):
        return None
    if found := _TF32.search(name):
        return "tf32", found.group()
    if found := _CUDA_CORE_FP32.search(name):
        return "fp32", found.group()
    return None
