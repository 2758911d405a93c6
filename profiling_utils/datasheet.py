"""Vendors' datasheet peaks, keyed by the name CUDA or ROCm reports for the GPU.

A rate read from a trace ("this GEMM ran at 610 TFLOP/s") means most next to the ceiling the
vendor prints for the same dtype on the same GPU. :func:`datasheet_peak` looks that ceiling up
by the device's name, as ``torch.cuda.get_device_name()`` returns it and as a trace's
``deviceProperties`` records it (:attr:`profiling_utils.trace.DeviceInfo.name`), e.g.
``"NVIDIA H100 80GB HBM3"`` (the SXM5 part) or ``"AMD Instinct MI300X"``. A name that is not in
the table gives ``None``: no datasheet figure is better than a neighbour's.

What the figures are:

- ``bf16``, ``fp16``, ``tf32``, ``fp8``: *dense* tensor-core (NVIDIA) or matrix-core (AMD)
  throughput, TFLOP/s (10^12 operations per second). NVIDIA's datasheets print these with 2:4
  structured sparsity, marked ``*``; the dense figure is half of it, and that is what a
  ``torch.matmul`` can reach. A dtype the GPU's tensor cores do not take (bf16 on a V100, fp8
  before Hopper and Ada) has no entry.
- ``fp32``: plain fp32 on the CUDA cores (NVIDIA) or the vector units (AMD), not TF32.
- ``fp32_matrix``: fp32 on AMD's matrix cores (CDNA2: MI250X, MI250, MI210), twice the
  vector figure there, which rocBLAS and hipBLASLt reach on fp32 GEMMs; other GPUs have none
  (the MI300X's is its vector figure).
- ``memory``: the DRAM (HBM or GDDR) bandwidth, GB/s (10^9 bytes per second).

Each row names the vendor document it comes from. Left out on purpose, rather than guessed:
the NVIDIA A10G (an AWS part with no NVIDIA datasheet); the B200's memory bandwidth (NVIDIA has
printed both 8 TB/s and 7.7 TB/s), tf32 and fp32; board variants that are not the datasheet's
part (``NVIDIA A100-PG509-200``, ``Tesla V100-DGXS-32GB``); and names that do not say which
GPU it is (ROCm's ``AMD Radeon Graphics``).

Example::

    peak = datasheet_peak("NVIDIA H100 80GB HBM3", "bf16")
    if peak is not None:
        print(f"{610 / peak.value:.0%} of {peak.describe()}")
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["DatasheetPeak", "DeviceSpec", "Figure", "datasheet_peak", "device_spec", "same_device"]

Figure = Literal["bf16", "fp16", "tf32", "fp32", "fp32_matrix", "fp8", "memory"]
"""The figures a :class:`DeviceSpec` may hold."""

_COMPUTE_FIGURES: dict[str, str] = {
    "bf16": "dense bf16 tensor-core",
    "fp16": "dense fp16 tensor-core",
    "tf32": "dense tf32 tensor-core",
    "fp8": "dense fp8 tensor-core",
    "fp32": "fp32 (non-tensor)",
    "fp32_matrix": "fp32 matrix-core",
}


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU's row of the datasheet table."""

    product: str
    """The product as its datasheet names it, e.g. ``"H100 SXM5 80 GB"``."""
    source: str
    """The vendor document the figures come from, with its year."""
    tflops: dict[str, float] = field(default_factory=dict)
    """Peak TFLOP/s per figure (``bf16``, ``fp16``, ``tf32``, ``fp8``, ``fp32``)."""
    memory_gb_s: float | None = None
    """DRAM bandwidth, GB/s (10^9 bytes per second)."""
    memory_kind: str = "HBM"
    """``HBM3``, ``HBM2e``, ``GDDR6``...: what the bandwidth is the bandwidth of."""
    l2_cache_bytes: int | None = None
    """The L2 cache, bytes. Vendors write "50 MB" where CUDA reports 50 MiB
    (``L2_cache_size``); the table holds what CUDA reports. A trace does not record it."""
    note: str = ""
    """What a reader must know to use these figures (e.g. a matrix-core figure per die)."""


@dataclass(frozen=True)
class DatasheetPeak:
    """One figure of a :class:`DeviceSpec`, ready to print next to a measured rate."""

    value: float
    """The peak, in :attr:`unit`."""
    unit: str
    """``"TFLOP/s"`` or ``"GB/s"``."""
    figure: str
    """Which figure it is, e.g. ``"dense bf16 tensor-core"`` or ``"HBM3 bandwidth"``."""
    product: str
    """The product, e.g. ``"H100 SXM5 80 GB"``."""
    source: str
    """The vendor document, e.g. ``"NVIDIA H100 Tensor Core GPU datasheet, 2023"``."""

    def describe(self) -> str:
        """``"989.4 TFLOP/s, the H100 SXM5 80 GB's dense bf16 tensor-core peak (source)"``."""
        return (
            f"{self.value:,.6g} {self.unit}, the {self.product}'s {self.figure} peak "
            f"({self.source})"
        )


def _nvidia_sparse_halved(sparse: dict[str, float]) -> dict[str, float]:
    """Dense tensor-core figures from a datasheet that prints them with sparsity."""
    return {dtype: value / 2 for dtype, value in sparse.items()}


_H100_SXM5_SOURCES = (
    "NVIDIA H100 Tensor Core GPU datasheet, 2023; dense figures from the H100 architecture "
    "whitepaper, 2022"
)
_H100_DATASHEET = "NVIDIA H100 Tensor Core GPU datasheet, 2023"
_H200_DATASHEET = "NVIDIA H200 Tensor Core GPU datasheet, 2024"
_A100_DATASHEET = "NVIDIA A100 Tensor Core GPU datasheet, 2021"
_V100_DATASHEET = "NVIDIA Tesla V100 GPU datasheet, 2018"
_AMD_PER_GCD = (
    "An MI250X or MI250 is two dies (GCDs), and PyTorch sees each die as one device: these "
    "figures are half the package's."
)

_H100_SXM5 = DeviceSpec(
    product="H100 SXM5 80 GB",
    source=_H100_SXM5_SOURCES,
    tflops={"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp8": 1978.9, "fp32": 66.9},
    memory_gb_s=3350.0,
    memory_kind="HBM3",
    l2_cache_bytes=50 * 2**20,
)
_H100_PCIE = DeviceSpec(
    product="H100 PCIe 80 GB",
    source=_H100_DATASHEET,
    tflops={
        **_nvidia_sparse_halved({"bf16": 1513, "fp16": 1513, "tf32": 756, "fp8": 3026}),
        "fp32": 51.0,
    },
    memory_gb_s=2000.0,
    memory_kind="HBM2e",
    l2_cache_bytes=50 * 2**20,
)
_H100_NVL = DeviceSpec(
    product="H100 NVL 94 GB",
    source=_H100_DATASHEET,
    tflops={
        **_nvidia_sparse_halved({"bf16": 1671, "fp16": 1671, "tf32": 835, "fp8": 3341}),
        "fp32": 60.0,
    },
    memory_gb_s=3900.0,
    memory_kind="HBM3",
    l2_cache_bytes=50 * 2**20,
)
_H200_SXM = DeviceSpec(
    product="H200 SXM 141 GB",
    source=_H200_DATASHEET,
    tflops={
        **_nvidia_sparse_halved({"bf16": 1979, "fp16": 1979, "tf32": 989, "fp8": 3958}),
        "fp32": 67.0,
    },
    memory_gb_s=4800.0,
    memory_kind="HBM3e",
    l2_cache_bytes=50 * 2**20,
)
_H200_NVL = DeviceSpec(
    product="H200 NVL 141 GB",
    source=_H200_DATASHEET,
    tflops={
        **_nvidia_sparse_halved({"bf16": 1671, "fp16": 1671, "tf32": 835, "fp8": 3341}),
        "fp32": 60.0,
    },
    memory_gb_s=4800.0,
    memory_kind="HBM3e",
    l2_cache_bytes=50 * 2**20,
)
_A100_TFLOPS = {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}  # dense, printed
_A100_L2 = 40 * 2**20
_A100_SXM_40 = DeviceSpec(
    "A100 SXM4 40 GB", _A100_DATASHEET, _A100_TFLOPS, 1555.0, "HBM2", _A100_L2
)
_A100_SXM_80 = DeviceSpec(
    "A100 SXM4 80 GB", _A100_DATASHEET, _A100_TFLOPS, 2039.0, "HBM2e", _A100_L2
)
_A100_PCIE_40 = DeviceSpec(
    "A100 PCIe 40 GB", _A100_DATASHEET, _A100_TFLOPS, 1555.0, "HBM2", _A100_L2
)
_A100_PCIE_80 = DeviceSpec(
    "A100 PCIe 80 GB", _A100_DATASHEET, _A100_TFLOPS, 1935.0, "HBM2e", _A100_L2
)
_B200 = DeviceSpec(
    product="B200 (HGX)",
    source="NVIDIA HGX B200 datasheet, 2024",
    tflops=_nvidia_sparse_halved({"bf16": 4500, "fp16": 4500, "fp8": 9000}),
    note="No memory bandwidth: NVIDIA's documents print both 8 TB/s and 7.7 TB/s.",
)
_V100_SXM2 = DeviceSpec(
    product="V100 SXM2",
    source=_V100_DATASHEET,
    tflops={"fp16": 125.0, "fp32": 15.7},  # Volta's tensor cores take fp16 only
    memory_gb_s=900.0,
    memory_kind="HBM2",
    l2_cache_bytes=6 * 2**20,
)
_V100_PCIE = DeviceSpec(
    product="V100 PCIe",
    source=_V100_DATASHEET,
    tflops={"fp16": 112.0, "fp32": 14.0},
    memory_gb_s=900.0,
    memory_kind="HBM2",
    l2_cache_bytes=6 * 2**20,
)
_L4 = DeviceSpec(
    product="L4",
    source="NVIDIA L4 Tensor Core GPU datasheet, 2023",
    tflops={
        **_nvidia_sparse_halved({"bf16": 242, "fp16": 242, "tf32": 120, "fp8": 485}),
        "fp32": 30.3,
    },
    memory_gb_s=300.0,
    memory_kind="GDDR6",
    l2_cache_bytes=48 * 2**20,
)
_L40S = DeviceSpec(
    product="L40S",
    source="NVIDIA L40S GPU datasheet, 2023",
    tflops={"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp8": 733.0, "fp32": 91.6},
    memory_gb_s=864.0,
    memory_kind="GDDR6",
    l2_cache_bytes=96 * 2**20,
)
_RTX_4090 = DeviceSpec(
    product="GeForce RTX 4090",
    source="NVIDIA Ada GPU Architecture whitepaper, 2023",
    # With fp32 accumulation, what a PyTorch matmul uses; GeForce parts run fp16
    # accumulation at twice these rates.
    tflops={"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp8": 330.3, "fp32": 82.6},
    memory_gb_s=1008.0,
    memory_kind="GDDR6X",
    l2_cache_bytes=72 * 2**20,
    note="Tensor-core figures with fp32 accumulation (half the fp16-accumulation ones).",
)
_MI300X = DeviceSpec(
    product="Instinct MI300X",
    source="AMD Instinct MI300X data sheet, 2023",
    tflops={"bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7, "fp8": 2614.9, "fp32": 163.4},
    memory_gb_s=5300.0,
    memory_kind="HBM3",
)
_MI250X_GCD = DeviceSpec(
    product="Instinct MI250X (one of its two dies)",
    source="AMD Instinct MI250X data sheet, 2021",
    tflops={"bf16": 383.0 / 2, "fp16": 383.0 / 2, "fp32": 47.9 / 2, "fp32_matrix": 95.7 / 2},
    memory_gb_s=3276.8 / 2,
    memory_kind="HBM2e",
    note=_AMD_PER_GCD,
)
_MI250_GCD = DeviceSpec(
    product="Instinct MI250 (one of its two dies)",
    source="AMD Instinct MI250 data sheet, 2021",
    tflops={"bf16": 362.1 / 2, "fp16": 362.1 / 2, "fp32": 45.3 / 2, "fp32_matrix": 90.5 / 2},
    memory_gb_s=3276.8 / 2,
    memory_kind="HBM2e",
    note=_AMD_PER_GCD,
)
_MI250X_OR_MI250_GCD = DeviceSpec(
    product="Instinct MI250X or MI250 (one of its two dies)",
    source="AMD Instinct MI250X and MI250 data sheets, 2021",
    memory_gb_s=3276.8 / 2,  # the same on both; their compute differs, so it is left out
    memory_kind="HBM2e",
    note=_AMD_PER_GCD + " ROCm names both parts alike, so only the memory figure is known.",
)
_MI210 = DeviceSpec(
    product="Instinct MI210",
    source="AMD Instinct MI210 data sheet, 2022",
    tflops={"bf16": 181.0, "fp16": 181.0, "fp32": 22.6, "fp32_matrix": 45.3},
    memory_gb_s=1638.4,
    memory_kind="HBM2e",
)

_TABLE: dict[str, DeviceSpec] = {
    "NVIDIA H100 80GB HBM3": _H100_SXM5,
    "NVIDIA H100 PCIe": _H100_PCIE,
    "NVIDIA H100 NVL": _H100_NVL,
    "NVIDIA H200": _H200_SXM,
    "NVIDIA H200 NVL": _H200_NVL,
    "NVIDIA A100-SXM4-40GB": _A100_SXM_40,
    "NVIDIA A100-SXM4-80GB": _A100_SXM_80,
    "NVIDIA A100-PCIE-40GB": _A100_PCIE_40,
    "NVIDIA A100 80GB PCIe": _A100_PCIE_80,
    "NVIDIA B200": _B200,
    "Tesla V100-SXM2-16GB": _V100_SXM2,
    "Tesla V100-SXM2-32GB": _V100_SXM2,
    "Tesla V100-PCIE-16GB": _V100_PCIE,
    "Tesla V100-PCIE-32GB": _V100_PCIE,
    "NVIDIA L4": _L4,
    "NVIDIA L40S": _L40S,
    "NVIDIA GeForce RTX 4090": _RTX_4090,
    "AMD Instinct MI300X": _MI300X,
    "AMD Instinct MI250X": _MI250X_GCD,
    "AMD Instinct MI250": _MI250_GCD,
    "AMD Instinct MI250X / MI250": _MI250X_OR_MI250_GCD,
    "AMD Instinct MI210": _MI210,
}


def _normalise(name: str) -> str:
    """Case, spacing, ``-``/``_`` and a trailing ``\\x00`` do not tell GPUs apart."""
    return re.sub(r"[\s_-]+", " ", name.replace("\x00", "")).strip().casefold()


_BY_NORMALISED_NAME = {_normalise(name): spec for name, spec in _TABLE.items()}


def same_device(a: str, b: str) -> bool:
    """Whether two device names are the same GPU, as :func:`device_spec` matches names."""
    return _normalise(a) == _normalise(b)


def device_spec(device_name: str) -> DeviceSpec | None:
    """The datasheet row for a GPU, by the name CUDA or ROCm reports, or ``None``.

    The name is matched whole, ignoring case, spacing, ``-`` and ``_``: ``"NVIDIA H100 80GB
    HBM3"`` is the H100 SXM5, ``"NVIDIA H100 PCIe"`` the PCIe card. A name the table does not
    hold exactly (a board variant, ``"AMD Radeon Graphics"``) gives ``None`` rather than a
    guess.
    """
    return _BY_NORMALISED_NAME.get(_normalise(device_name))


def datasheet_peak(device_name: str, what: Figure) -> DatasheetPeak | None:
    """One datasheet figure of a GPU, or ``None`` when the table does not have it.

    Args:
        device_name: The GPU's name, as ``torch.cuda.get_device_name()`` returns it or a
            trace's ``deviceProperties`` records it.
        what: ``"bf16"``, ``"fp16"``, ``"tf32"``, ``"fp8"`` (dense tensor-core TFLOP/s),
            ``"fp32"`` (non-tensor TFLOP/s), ``"fp32_matrix"`` (AMD's fp32 matrix-core
            TFLOP/s) or ``"memory"`` (DRAM GB/s).

    Returns:
        The figure with its unit, what it is, the product and the source; ``None`` for a GPU
        not in the table or a figure its datasheet does not give (bf16 on a V100).

    Raises:
        ValueError: ``what`` is not one of the figures above.
    """
    if what != "memory" and what not in _COMPUTE_FIGURES:
        raise ValueError(f"what must be one of {[*_COMPUTE_FIGURES, 'memory']}, not {what!r}")
    spec = device_spec(device_name)
    if spec is None:
        return None
    if what == "memory":
        if spec.memory_gb_s is None:
            return None
        return DatasheetPeak(
            spec.memory_gb_s, "GB/s", f"{spec.memory_kind} bandwidth", spec.product, spec.source
        )
    value = spec.tflops.get(what)
    if value is None:
        return None
    figure = _COMPUTE_FIGURES[what]
    if spec.product.startswith("Instinct"):  # AMD's words for the same units
        figure = figure.replace("tensor-core", "matrix-core").replace("non-tensor", "vector")
    return DatasheetPeak(value, "TFLOP/s", figure, spec.product, spec.source)
