"""The measured-peaks module: its arithmetic, its read-out of traces, and the CPU path."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import gpu_fixture

from profiling_utils import load_trace
from profiling_utils.peaks import (
    Peaks,
    _copies,
    _largest_kernel,
    achieved_gb_s,
    achieved_tflops,
    gemm_flops,
    measure_peaks,
)


def test_gemm_flops_counts_a_multiply_and_an_add_per_inner_product_term() -> None:
    assert gemm_flops(2, 3, 4) == 2 * 2 * 3 * 4
    assert gemm_flops(2, 3, 4, batch=8) == 8 * gemm_flops(2, 3, 4)
    assert gemm_flops(4096, 4096, 4096) == 137_438_953_472
    with pytest.raises(ValueError, match="k must not be negative"):
        gemm_flops(1, 1, -1)


def test_achieved_tflops_and_gb_s_convert_from_microseconds() -> None:
    # 10^12 operations in one second is 1 TFLOP/s; 10^9 bytes in one second is 1 GB/s.
    assert achieved_tflops(1e12, 1e6) == pytest.approx(1.0)
    assert achieved_gb_s(1e9, 1e6) == pytest.approx(1.0)
    # The post's 4096 GEMM, ~580 µs on an A100: about 237 TFLOP/s.
    assert achieved_tflops(gemm_flops(4096, 4096, 4096), 580.0) == pytest.approx(236.96, 1e-3)
    # A 32 MiB copy read and written in 33 µs: about 2 TB/s.
    assert achieved_gb_s(2 * 32 * 2**20, 33.0) == pytest.approx(2033.6, 1e-3)


@pytest.mark.parametrize("dur_us", [0.0, -1.0, math.nan])
def test_a_rate_needs_a_positive_duration(dur_us: float) -> None:
    with pytest.raises(ValueError, match="dur_us must be positive"):
        achieved_tflops(1.0, dur_us)
    with pytest.raises(ValueError, match="dur_us must be positive"):
        achieved_gb_s(1.0, dur_us)


def test_without_a_gpu_there_is_nothing_to_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert measure_peaks() is None


def test_the_gemm_is_the_kernel_with_the_most_time_in_the_steps() -> None:
    trace = load_trace(gpu_fixture("4096_bf16_warm_eager"))
    name, durations = _largest_kernel(trace)
    assert name.startswith("nvjet_sm90")  # the GEMM, not the elementwise add after it
    in_steps = [w for s in trace.steps for w in s.gpu_work if w.name == name]
    assert durations == [w.dur for w in in_steps]
    assert len(durations) == len(trace.steps)


def test_the_copy_is_read_from_the_memcpy_of_the_requested_size() -> None:
    trace = load_trace(gpu_fixture("4096_bf16_warm_compile"))  # a 32 MiB bias copy per step
    name, durations = _copies(trace, 4096 * 4096 * 2)
    assert name == "Memcpy DtoD (Device -> Device)"
    assert len(durations) == len(trace.steps)
    assert all(d > 0 for d in durations)


def test_a_trace_without_kernels_is_an_error(make_trace) -> None:  # noqa: ANN001
    path = make_trace([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                        "ts": 0, "dur": 5}])  # fmt: skip
    with pytest.raises(RuntimeError, match="no kernel"):
        _largest_kernel(load_trace(path))


def test_summary_states_both_peaks_with_their_units() -> None:
    peaks = Peaks(
        device="GPU",
        matmul_tflops=790.4,
        matmul_size=8192,
        matmul_flops=gemm_flops(8192, 8192, 8192),
        matmul_kernel="gemm",
        matmul_dur_us=1391.0,
        matmul_durations_us=(1390.0, 1391.0, 1392.0),
        copy_gb_s=3012.0,
        copy_bytes=2**30,
        copy_name="Memcpy DtoD (Device -> Device)",
        copy_dur_us=713.0,
        copy_durations_us=(713.0,),
    )
    text = peaks.summary()
    assert "790 TFLOP/s" in text and "8192x8192x8192" in text
    assert "1 GiB" in text and "3,012 GB/s read + write" in text
    with pytest.raises(AttributeError):
        peaks.matmul_tflops = 1.0  # type: ignore[misc]
