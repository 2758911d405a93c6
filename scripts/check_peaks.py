"""Check the measured peaks, the datasheet row and rate_report on this machine's GPU.

Run on the GPU machine (about 15 s, well under a minute)::

    python scripts/check_peaks.py

It prints how long :func:`~profiling_utils.peaks.measure_peaks` took and whether a second call
reuses the first; the burst and sustained peaks with their conditions; the datasheet row for
this GPU; a 32 MiB device-to-device copy and a 4096 bf16 GEMM timed here; and
:func:`~profiling_utils.rates.rate_report` for those and for synthetic rates (a 32 MiB copy at
1,777 GB/s, a GEMM at 101% of the burst peak, one between the sustained and burst peaks).
Without a GPU it prints the datasheet rows of ``--device`` and the reports without measured
peaks.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiling_utils.datasheet import datasheet_peak, device_spec  # noqa: E402
from profiling_utils.peaks import (  # noqa: E402
    achieved_gb_s,
    achieved_tflops,
    gemm_flops,
    measure_peaks,
)
from profiling_utils.rates import rate_report  # noqa: E402

MiB = 2**20


def time_with_events(step, calls: int = 50) -> float:  # noqa: ANN001
    """Median µs of ``step`` over ``calls`` back-to-back calls, after five warm-up calls."""
    for _ in range(5):
        step()
    pairs = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in pairs)


def print_datasheet(device: str) -> None:
    spec = device_spec(device)
    print(f"\nDatasheet row for {device!r}:", "none" if spec is None else spec.product)
    if spec is None:
        return
    for what in ("bf16", "fp16", "tf32", "fp8", "fp32", "memory"):
        peak = datasheet_peak(device, what)  # type: ignore[arg-type]
        print(f"  {what:<6}", "-" if peak is None else peak.describe())
    print(f"  L2 cache: {spec.l2_cache_bytes} bytes; {spec.note}".rstrip("; "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA H100 80GB HBM3", help="without a GPU")
    args = parser.parse_args()

    started = time.perf_counter()
    peaks = measure_peaks()
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    again = measure_peaks()
    second_s = time.perf_counter() - started
    if peaks is None:
        print("No CUDA GPU: measure_peaks() returned None.")
        device = args.device
    else:
        device = peaks.device
        print(f"measure_peaks(): {first_s:.1f} s; a second call {second_s:.3f} s, ", end="")
        print("the same result" if again is peaks else "MEASURED AGAIN")
        print(f"torch {torch.__version__}, L2_cache_size {peaks.l2_cache_bytes} bytes")
        print(f"matmul kernel {peaks.matmul_kernel}; copy activity {peaks.copy_name}")
        print(peaks.summary())
        for name in ("matmul_burst", "matmul_sustained", "copy_burst", "copy_sustained"):
            m = getattr(peaks, name)
            print(
                f"  {name}: {len(m.durations_us)} samples, median {m.median_us:.1f} µs, "
                f"min {min(m.durations_us):.1f}, max {max(m.durations_us):.1f}, "
                f"SM clocks {list(m.sm_clock_mhz) or 'not read'}"
            )
    print_datasheet(device)

    print("\nSynthetic rates:")
    print(rate_report(1777.0, "copy", device=device, peaks=peaks, copy_bytes=32 * MiB))
    if peaks is not None:
        burst = peaks.matmul_burst.rate
        print(rate_report(burst * 1.01, "bf16", peaks=peaks, subject="GEMM at 101% of burst"))
        between = (burst + peaks.matmul_sustained.rate) / 2
        print(rate_report(between, "bf16", peaks=peaks, subject="between sustained and burst"))

        print("\nMeasured here with CUDA events (median of 50 after 5 warm-up calls):")
        src = torch.randn(16 * MiB, device="cuda", dtype=torch.bfloat16)  # 32 MiB
        dst = torch.empty_like(src)
        copy_us = time_with_events(lambda: dst.copy_(src))
        rate = achieved_gb_s(32 * MiB, copy_us)
        print(rate_report(rate, "copy", peaks=peaks, copy_bytes=32 * MiB))
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        gemm_us = time_with_events(lambda: a @ a)
        tflops = achieved_tflops(gemm_flops(4096, 4096, 4096), gemm_us)
        print(rate_report(tflops, "bf16", peaks=peaks, subject="4096 bf16 GEMM"))


if __name__ == "__main__":
    main()
