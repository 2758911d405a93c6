"""The datasheet table: lookups by the names CUDA and ROCm report, and its figures' shape."""

from __future__ import annotations

import pytest
from conftest import gpu_fixture, gpu_fixture_names

from profiling_utils import load_trace
from profiling_utils.datasheet import _TABLE, datasheet_peak, device_spec, same_device


def test_every_recorded_trace_names_a_gpu_in_the_table() -> None:
    names = {load_trace(gpu_fixture(name)).devices[0].name for name in gpu_fixture_names()}
    assert "NVIDIA H100 80GB HBM3" in names
    assert all(device_spec(name) is not None for name in names), names


def test_the_h100_sxm5_row() -> None:
    bf16 = datasheet_peak("NVIDIA H100 80GB HBM3", "bf16")
    assert bf16 is not None
    assert (bf16.value, bf16.unit, bf16.figure) == (989.4, "TFLOP/s", "dense bf16 tensor-core")
    assert bf16.product == "H100 SXM5 80 GB"
    assert "H100 architecture whitepaper, 2022" in bf16.describe()
    memory = datasheet_peak("NVIDIA H100 80GB HBM3", "memory")
    assert memory is not None
    assert (memory.value, memory.unit, memory.figure) == (3350.0, "GB/s", "HBM3 bandwidth")
    assert device_spec("NVIDIA H100 80GB HBM3").l2_cache_bytes == 50 * 2**20  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "product"),
    [
        ("NVIDIA H100 PCIe", "H100 PCIe 80 GB"),
        ("NVIDIA H100 NVL", "H100 NVL 94 GB"),
        # HTA's negative_queue_length trace, from a DGX A100 80 GB
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80 GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80 GB"),
        # HTA's trace_diff/test trace
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        # HTA's ns_resolution trace
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("AMD Instinct MI300X", "Instinct MI300X"),
    ],
)
def test_names_as_cuda_and_rocm_report_them(name: str, product: str) -> None:
    assert device_spec(name).product == product  # type: ignore[union-attr]


def test_case_spacing_dashes_and_a_trailing_nul_do_not_matter() -> None:
    sxm = device_spec("NVIDIA A100-SXM4-80GB")
    assert device_spec("nvidia a100 sxm4 80gb") is sxm
    assert device_spec("  NVIDIA  A100_SXM4-80GB\x00") is sxm
    assert device_spec("NVIDIA A100-SXM4-40GB") is not sxm  # the size is part of the name
    assert same_device("NVIDIA A100-SXM4-80GB", "nvidia a100 sxm4 80gb")
    assert not same_device("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB")


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA A100-PG509-200",  # HTA's critical-path traces: a board the table does not hold
        "Tesla V100-DGXS-32GB",  # Kineto's resnet50 samples: a DGX Station part
        "AMD Radeon Graphics",  # HTA's MI250 trace: ROCm's generic name
        "ARTEMIS",  # HTA's MTIA inference trace
        "NVIDIA H100",  # too short to tell SXM5 from PCIe
        "",
    ],
)
def test_a_device_not_in_the_table_has_no_datasheet_figure(name: str) -> None:
    assert device_spec(name) is None
    assert datasheet_peak(name, "bf16") is None
    assert datasheet_peak(name, "memory") is None


def test_a_figure_the_datasheet_does_not_give_is_none() -> None:
    assert datasheet_peak("Tesla V100-SXM2-32GB", "bf16") is None  # Volta: fp16 tensor cores
    assert datasheet_peak("Tesla V100-SXM2-32GB", "fp16").value == 125.0  # type: ignore[union-attr]
    assert datasheet_peak("NVIDIA A100-SXM4-80GB", "fp8") is None
    assert datasheet_peak("NVIDIA B200", "memory") is None  # two figures published; none kept
    # ROCm names the MI250X and the MI250 alike: the memory is the same, the compute is not.
    shared = "AMD Instinct MI250X / MI250"
    assert datasheet_peak(shared, "bf16") is None
    assert datasheet_peak(shared, "memory").value == pytest.approx(1638.4)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="what must be one of"):
        datasheet_peak("NVIDIA H100 80GB HBM3", "int8")  # type: ignore[arg-type]


def test_dense_figures_keep_the_tensor_cores_ratios() -> None:
    # Per generation, a tensor core does fp16 and bf16 at one rate, tf32 at half of it and fp8
    # (where it exists) at twice it: a row that breaks this has a sparse or mistyped figure.
    # (2% slack: the L40S datasheet prints 183 TF32 beside 362.05 bf16, as NVIDIA wrote them.)
    for name, spec in _TABLE.items():
        rates = spec.tflops
        if "bf16" in rates:
            assert rates["fp16"] == rates["bf16"], name
        if "tf32" in rates:
            assert rates["tf32"] == pytest.approx(rates["fp16"] / 2, rel=0.02), name
        if "fp8" in rates:
            assert rates["fp8"] == pytest.approx(rates["fp16"] * 2, rel=0.02), name
        if "fp32" in rates and "fp16" in rates:
            assert rates["fp32"] <= rates["fp16"] / 2, name  # CUDA cores, not tensor cores


def test_amd_figures_are_named_as_amd_names_its_units_and_cdna2_has_an_fp32_matrix_figure() -> None:
    bf16 = datasheet_peak("AMD Instinct MI300X", "bf16")
    assert bf16 is not None and bf16.figure == "dense bf16 matrix-core"
    vector = datasheet_peak("AMD Instinct MI250X", "fp32")
    matrix = datasheet_peak("AMD Instinct MI250X", "fp32_matrix")
    assert vector is not None and matrix is not None
    assert (vector.figure, matrix.figure) == ("fp32 (vector)", "fp32 matrix-core")
    # The data sheet's per-card figures, per die: FP32 matrix 95.7, FP32 vector 47.9 TFLOP/s.
    assert (matrix.value, vector.value) == (pytest.approx(95.7 / 2), pytest.approx(47.9 / 2))
    assert datasheet_peak("NVIDIA H100 80GB HBM3", "fp32_matrix") is None
