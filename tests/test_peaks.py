"""The measured-peaks module: its arithmetic, its read-out of traces, and the CPU path."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import gpu_fixture
from synthetic_peaks import h100_like_peaks

from profiling_utils import load_trace
from profiling_utils.peaks import (
    _copies,
    _largest_kernel,
    _measurement,
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
    # A 32 MiB copy in 18.88 µs, bytes copied counted once: the 1,777 GB/s Kineto recorded.
    assert achieved_gb_s(32 * 2**20, 18.88) == pytest.approx(1777.25, 1e-4)


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


def test_a_measurement_is_the_median_with_its_interquartile_range() -> None:
    flops = gemm_flops(8192, 8192, 8192)
    durations = [1400.0, 1380.0, 1390.0, 1385.0, 1500.0]  # one slow outlier
    burst = _measurement(
        "8192x8192x8192 bf16 matmul",
        "TFLOP/s",
        lambda us: achieved_tflops(flops, us),
        sustained=False,
        method="in a short burst",
        samples=durations,
        calls=5,
        elapsed_s=0.01,
    )
    assert burst.median_us == 1390.0
    assert burst.rate == pytest.approx(achieved_tflops(flops, 1390.0))
    # The quartiles of the durations, 1385 and 1400 µs: the slower one is the low rate.
    assert burst.rate_low == pytest.approx(achieved_tflops(flops, 1400.0))
    assert burst.rate_high == pytest.approx(achieved_tflops(flops, 1385.0))
    assert burst.rate_low < burst.rate < burst.rate_high
    assert "median of 5 calls in a short burst" in burst.conditions()
    assert "SM clock" not in burst.conditions()  # none was read


def _sustained_copy(calls: int, clocks: tuple[int, ...]):
    """A sustained 1 GiB copy peak over 2.01 s, every call 720 µs, half of them kept."""
    return _measurement(
        "1 GiB device-to-device copy",
        "GB/s",
        lambda us: achieved_gb_s(2**30, us),
        sustained=True,
        method="back to back over 2.01 s, timed with CUDA events",
        samples=[720.0] * (calls // 2),
        calls=calls,
        elapsed_s=2.01,
        clocks=clocks,
    )


def test_sustained_conditions_name_the_samples_and_the_clock() -> None:
    text = _sustained_copy(2800, (1980, 1890, 1755)).conditions()
    assert text.startswith("median of the last 1,400 of 2,800 calls back to back over 2.01 s")
    assert "interquartile range 1,491-1,491 GB/s" in text
    assert "SM clock read at a median of 1890 MHz (1755-1980 MHz, 3 readings)" in text
    steady = _sustained_copy(8, (1980, 1980))
    assert steady.conditions().endswith("; SM clock 1980 MHz at each of 2 readings")


def test_summary_states_every_peak_with_the_copy_convention() -> None:
    peaks = h100_like_peaks()
    text = " ".join(peaks.summary().split())
    assert "GB = 10^9 bytes" in text and "bytes copied, each once" in text
    # 2 * 8192^3 operations in the median 1385 µs; 2^30 bytes copied in the median 725 µs.
    assert "burst 8192x8192x8192 bf16 matmul: 794 TFLOP/s" in text
    assert "sustained 1 GiB device-to-device copy: 1,481 GB/s" in text
    assert "read + write" not in text
    assert all(len(line) <= 88 for line in peaks.summary().splitlines())
    assert peaks.copy_burst.rate == pytest.approx(2**30 / 716e-6 / 1e9)
    with pytest.raises(AttributeError):
        peaks.matmul_burst = peaks.matmul_sustained  # type: ignore[misc]


def test_summary_of_one_operation_leaves_the_other_out() -> None:
    peaks = h100_like_peaks()
    copy = " ".join(peaks.summary(only="copy").split())
    assert "device-to-device copy" in copy and "matmul" not in copy
    matmul = " ".join(peaks.summary(only="matmul").split())
    assert "matmul" in matmul and "device-to-device copy" not in matmul
    with pytest.raises(ValueError, match="only must be"):
        peaks.summary(only="gemm")  # type: ignore[arg-type]
