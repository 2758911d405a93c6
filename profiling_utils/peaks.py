"""The GPU's measured peaks, timed the way the gallery times its GEMMs and copies.

A number such as "the 4096 GEMM ran at 610 TFLOP/s" means little on its own. Next to what the
same GPU reaches on a large problem, timed the same way, it becomes a fraction a reader can
judge. :func:`measure_peaks` profiles two large operations with
:func:`~profiling_utils.capture.capture` and reads their GPU durations from the trace, exactly
as an example reads its own kernels:

- a large bf16 matrix product (``8192 x 8192 @ 8192 x 8192`` by default), for TFLOP/s;
- a large device-to-device copy (``dst.copy_(src)``, 1 GiB by default), for memory bandwidth.

These are *measured* peaks of this machine, not the datasheet's: what a large cuBLAS GEMM and
a large copy reach here in a short burst, which is what an example's own GEMM or copy can
fairly be compared with.

The arithmetic helpers :func:`gemm_flops`, :func:`achieved_tflops` and :func:`achieved_gb_s`
turn a duration from a trace into those units.

Example::

    peaks = measure_peaks()
    if peaks is not None:
        print(peaks.summary())
        gemm_us = 180.0  # a kernel's duration read from a trace
        print(f"{achieved_tflops(gemm_flops(4096, 4096, 4096), gemm_us):.0f} TFLOP/s "
              f"of {peaks.matmul_tflops:.0f}")
"""

from __future__ import annotations

import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .capture import Capture, capture, run_name
from .measures import memory_copies

if TYPE_CHECKING:  # pragma: no cover
    from .trace import Span, Trace

__all__ = ["Peaks", "achieved_gb_s", "achieved_tflops", "gemm_flops", "measure_peaks"]


def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """Floating-point operations of a matrix product ``(m x k) @ (k x n)``, ``batch`` times.

    Each of the ``m * n`` outputs takes ``k`` multiplications and ``k`` additions, so the count
    is ``2 * m * n * k`` per product (the convention every TFLOP/s figure uses).
    """
    for name, value in (("m", m), ("n", n), ("k", k), ("batch", batch)):
        if value < 0:
            raise ValueError(f"{name} must not be negative, not {value}")
    return 2 * m * n * k * batch


def achieved_tflops(flops: float, dur_us: float) -> float:
    """Throughput in TFLOP/s (10^12 operations per second) of ``flops`` done in ``dur_us`` µs.

    Raises:
        ValueError: ``dur_us`` is not positive (a zero-length activity has no rate).
    """
    if not dur_us > 0:
        raise ValueError(f"dur_us must be positive, not {dur_us}")
    return flops / dur_us / 1e6


def achieved_gb_s(num_bytes: float, dur_us: float) -> float:
    """Bandwidth in GB/s (10^9 bytes per second) of ``num_bytes`` moved in ``dur_us`` µs.

    Pass the bytes that crossed memory: for a copy of ``n`` bytes that is ``2 * n`` (read
    and written); :attr:`MemoryCopy.bandwidth_gb_s
    <profiling_utils.measures.MemoryCopy.bandwidth_gb_s>` counts ``n`` only.

    Raises:
        ValueError: ``dur_us`` is not positive (a zero-length activity has no rate).
    """
    if not dur_us > 0:
        raise ValueError(f"dur_us must be positive, not {dur_us}")
    return num_bytes / dur_us / 1e3


@dataclass(frozen=True)
class Peaks:
    """What :func:`measure_peaks` measured on this GPU."""

    device: str
    """The GPU's name, as CUDA reports it."""
    matmul_tflops: float
    """bf16 matrix-product throughput, TFLOP/s: :func:`gemm_flops` over the median duration
    of the GEMM kernel."""
    matmul_size: int
    """``n`` of the ``n x n @ n x n`` bf16 product."""
    matmul_flops: int
    """Operations of one product, ``2 * n**3``."""
    matmul_kernel: str
    """The kernel that ran it (the kernel with the largest total time in the steps)."""
    matmul_dur_us: float
    """Median duration of that kernel over the profiled steps, µs."""
    matmul_durations_us: tuple[float, ...]
    """Every profiled instance of it, µs, in step order."""
    copy_gb_s: float
    """Device-to-device copy bandwidth, GB/s (10^9 bytes/s), counting the bytes read *and*
    the bytes written (``2 * copy_bytes`` per copy) over the median copy duration. This is the
    figure to compare with a datasheet's memory bandwidth; it is twice the ``bytes / dur`` a
    trace viewer shows for the copy."""
    copy_bytes: int
    """Size of the copied buffer, bytes (each copy reads and writes this many)."""
    copy_name: str
    """The GPU activity that did the copy, e.g. ``Memcpy DtoD (Device -> Device)``."""
    copy_dur_us: float
    """Median duration of the copy over the profiled steps, µs."""
    copy_durations_us: tuple[float, ...]
    """Every profiled copy, µs, in step order."""
    trace_paths: tuple[Path, ...] = ()
    """The two traces, when :func:`measure_peaks` was given an ``out_dir`` (else deleted)."""

    def summary(self) -> str:
        """One sentence per peak, for printing on a page."""
        n = self.matmul_size
        return (
            f"Measured peaks on {self.device}:\n"
            f"  bf16 {n}x{n}x{n} matmul: {self.matmul_tflops:,.0f} TFLOP/s "
            f"(median {self.matmul_dur_us:,.1f} µs over {len(self.matmul_durations_us)} steps)\n"
            f"  {self.copy_bytes / 2**30:g} GiB device-to-device copy: "
            f"{self.copy_gb_s:,.0f} GB/s read + write "
            f"(median {self.copy_dur_us:,.1f} µs over {len(self.copy_durations_us)} steps)"
        )


def measure_peaks(
    out_dir: str | os.PathLike[str] | None = None,
    *,
    matmul_size: int = 8192,
    copy_bytes: int = 2**30,
    active: int = 5,
    warmup_iters: int = 5,
) -> Peaks | None:
    """Measure this GPU's bf16 matmul throughput and device copy bandwidth from traces.

    Each operation is profiled with :func:`~profiling_utils.capture.capture` (``warmup_iters``
    calls first, then a schedule of one warm-up step and ``active`` recorded steps), and its
    GPU durations are read from the trace; the peak is computed from their median. This is how
    the gallery's examples time their own GEMMs and copies, so the numbers compare directly.

    Args:
        out_dir: Where to keep the two traces (``peak_matmul_...`` and ``peak_copy_...``);
            pass :func:`~profiling_utils.render.perfetto.trace_dir` to publish them with a
            page. ``None`` writes them to a temporary folder that is deleted afterwards.
        matmul_size: ``n`` of the bf16 ``n x n @ n x n`` product.
        copy_bytes: Size of the copied buffer, bytes (a multiple of 2).
        active: Profiled steps of each operation.
        warmup_iters: Unprofiled calls before profiling, to bring the clocks up and settle
            cuBLAS's choice of kernel. Keep it small: these are the peaks of a short burst,
            which is what a gallery example's GEMM sees. A long run of large GEMMs can
            settle lower once the GPU reaches its power limit and lowers its clocks.

    Returns:
        The :class:`Peaks`, or ``None`` on a machine without a CUDA GPU (nothing to measure;
        examples then print that they skip the comparison).

    Raises:
        RuntimeError: The trace holds no GEMM kernel or no copy, which would mean the profiler
            recorded no GPU activity.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    if matmul_size < 1 or copy_bytes < 2 or copy_bytes % 2:
        raise ValueError("matmul_size must be positive and copy_bytes a positive even number")

    with tempfile.TemporaryDirectory(prefix="peaks-") as scratch:
        where = Path(scratch) if out_dir is None else Path(out_dir)
        schedule = dict(wait=0, warmup=1, active=active, warmup_iters=warmup_iters)
        # Each helper's operands are freed when it returns, before the next one allocates.
        matmul_run = _profile_matmul(where, matmul_size, schedule)
        matmul_kernel, matmul_durations = _largest_kernel(matmul_run.trace)
        copy_run = _profile_copy(where, copy_bytes, schedule)
        copy_name, copy_durations = _copies(copy_run.trace, copy_bytes)
        paths = () if out_dir is None else (matmul_run.trace_path, copy_run.trace_path)
    torch.cuda.empty_cache()  # give the operands' memory back to the caller's work

    flops = gemm_flops(matmul_size, matmul_size, matmul_size)
    matmul_us = statistics.median(matmul_durations)
    copy_us = statistics.median(copy_durations)
    return Peaks(
        device=torch.cuda.get_device_name(),
        matmul_tflops=achieved_tflops(flops, matmul_us),
        matmul_size=matmul_size,
        matmul_flops=flops,
        matmul_kernel=matmul_kernel,
        matmul_dur_us=matmul_us,
        matmul_durations_us=tuple(matmul_durations),
        copy_gb_s=achieved_gb_s(2 * copy_bytes, copy_us),
        copy_bytes=copy_bytes,
        copy_name=copy_name,
        copy_dur_us=copy_us,
        copy_durations_us=tuple(copy_durations),
        trace_paths=paths,
    )


def _profile_matmul(where: Path, size: int, schedule: dict[str, int]) -> Capture:
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    make = dict(device="cuda", dtype=torch.bfloat16, generator=generator)
    a, b = torch.randn(size, size, **make), torch.randn(size, size, **make)
    return capture(
        lambda: torch.matmul(a, b),
        name="peak_" + run_name(size, "bf16", warm=True),
        out_dir=where,
        label="peak_matmul",
        **schedule,
    )


def _profile_copy(where: Path, copy_bytes: int, schedule: dict[str, int]) -> Capture:
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    src = torch.empty(copy_bytes // 2, device="cuda", dtype=torch.bfloat16)
    src.normal_(generator=generator)
    dst = torch.empty_like(src)
    return capture(
        lambda: dst.copy_(src),
        name=f"peak_copy_{copy_bytes}B_warm",
        out_dir=where,
        label="peak_copy",
        **schedule,
    )


def _in_steps(trace: Trace) -> list[Span]:
    return [work for step in trace.steps for work in step.gpu_work]


def _largest_kernel(trace: Trace) -> tuple[str, list[float]]:
    """The kernel name with the most total time in the steps, and its durations."""
    durations: dict[str, list[float]] = {}
    for work in _in_steps(trace):
        if work.cat == "kernel":
            durations.setdefault(work.name, []).append(work.dur)
    if not durations:
        raise RuntimeError(f"{trace.path}: no kernel was recorded in the profiled steps")
    name = max(durations, key=lambda key: sum(durations[key]))
    return name, durations[name]


def _copies(trace: Trace, copy_bytes: int) -> tuple[str, list[float]]:
    """The device-to-device copies of ``copy_bytes`` in the steps; a copy kernel if none."""
    copies = [
        c
        for c in memory_copies(trace)
        if c.kind == "DtoD" and c.bytes == copy_bytes and c.step is not None and c.span.dur > 0
    ]
    if copies:
        return copies[0].span.name, [c.span.dur for c in copies]
    # A torch that copies with a kernel instead of cudaMemcpyAsync: time that kernel.
    return _largest_kernel(trace)
