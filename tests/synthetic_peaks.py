"""Measured peaks like the H100's, built from durations, for tests that run without a GPU."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from profiling_utils.peaks import Peaks, _measurement, achieved_gb_s, achieved_tflops, gemm_flops

H100 = "NVIDIA H100 80GB HBM3"
MATMUL = "8192x8192x8192 bf16 matmul"
COPY = "1 GiB device-to-device copy"


def _tflops(us: float) -> float:
    return achieved_tflops(gemm_flops(8192, 8192, 8192), us)


def _gb_s(us: float) -> float:
    return achieved_gb_s(2**30, us)


def h100_like_peaks(sustained_clocks: tuple[int, ...] = (1980, 1755), **fields: Any) -> Peaks:
    """Peaks shaped like those measured on the H100: 8192 GEMM bursts at ~794 TFLOP/s and
    holds ~712 over seconds; the 1 GiB copy runs at ~1.5 TB/s copied. ``fields`` override."""
    burst_method = "in a short burst after 6 warm-up calls, timed from a profiler trace"
    held_method = "back to back over 2.01 s, timed with CUDA events"
    peaks = Peaks(
        device=H100,
        l2_cache_bytes=50 * 2**20,
        matmul_size=8192,
        matmul_dtype="bf16",
        matmul_kernel="nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopB_NNT",
        matmul_burst=_measurement(
            MATMUL,
            "TFLOP/s",
            _tflops,
            sustained=False,
            method=burst_method,
            samples=[1380.0, 1383.0, 1385.0, 1390.0, 1395.0],
            calls=5,
            elapsed_s=0.02,
        ),
        matmul_sustained=_measurement(
            MATMUL,
            "TFLOP/s",
            _tflops,
            sustained=True,
            method=held_method,
            samples=[1540.0, 1543.0, 1545.0, 1550.0, 1555.0] * 130,
            calls=1300,
            elapsed_s=2.01,
            clocks=sustained_clocks,
        ),
        copy_bytes=2**30,
        copy_name="Memcpy DtoD (Device -> Device)",
        copy_burst=_measurement(
            COPY,
            "GB/s",
            _gb_s,
            sustained=False,
            method=burst_method,
            samples=[713.0, 715.0, 716.0, 717.0, 720.0],
            calls=5,
            elapsed_s=0.01,
        ),
        copy_sustained=_measurement(
            COPY,
            "GB/s",
            _gb_s,
            sustained=True,
            method=held_method,
            samples=[720.0, 722.0, 725.0, 726.0, 730.0] * 280,
            calls=2800,
            elapsed_s=2.01,
            clocks=(1980, 1980),
        ),
    )
    return replace(peaks, **fields)
