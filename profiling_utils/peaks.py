"""The GPU's measured peaks, in a short burst and sustained, with how each was measured.

A number such as "the 4096 GEMM ran at 610 TFLOP/s" means little on its own. Next to what the
same GPU reaches on a large problem it becomes a fraction a reader can judge; next to the
vendor's datasheet (:mod:`profiling_utils.datasheet`) it says how far the hardware's ceiling
is. :func:`measure_peaks` measures a large bf16 matrix product (``8192 x 8192 @ 8192 x 8192``
by default) and a large device-to-device copy (``dst.copy_(src)``, 1 GiB by default) twice:

- a **burst**: a few calls profiled with :func:`~profiling_utils.capture.capture` and read
  from the trace, exactly as a gallery example times its own GEMM. A short burst runs at the
  clock a GPU reaches when it has just woken up, the same clock an example's few steps see.
- **sustained**: back-to-back calls for a stated time (2 s by default), timed with CUDA
  events, the median of the second half. Over seconds a GPU reaches its power limit and
  lowers its clock, so this rate can be well below the burst's.

Each :class:`Measurement` records its conditions: how many samples, their spread, how long,
and the SM clock where NVML can read it. :func:`profiling_utils.rates.rate_report` puts a
rate next to all of these and the datasheet in one place.

Units: TFLOP/s is 10^12 operations per second, with ``2 * m * n * k`` operations per product
(:func:`gemm_flops`). GB/s is 10^9 bytes per second, and a copy's rate counts the **bytes
copied** (each byte once), as the profiler's ``memory bandwidth (GB/s)`` does, as
:attr:`MemoryCopy.bandwidth_gb_s <profiling_utils.measures.MemoryCopy.bandwidth_gb_s>` does,
and as copy benchmarks (nvbandwidth, ``cudaMemcpy`` tests) report. A device-to-device copy
moves twice that through DRAM: it reads each byte and writes it again.

Example::

    peaks = measure_peaks()
    if peaks is not None:
        print(peaks.summary())
        gemm_us = 180.0  # a kernel's duration read from a trace
        tflops = achieved_tflops(gemm_flops(4096, 4096, 4096), gemm_us)
        print(f"{tflops / peaks.matmul_burst.rate:.0%} of the burst peak")
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .capture import Capture, capture, run_name
from .measures import memory_copies
from .tables import byte_size

if TYPE_CHECKING:  # pragma: no cover
    from .trace import Span, Trace

__all__ = [
    "Measurement",
    "Peaks",
    "achieved_gb_s",
    "achieved_tflops",
    "gemm_flops",
    "measure_peaks",
]


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
    """Rate in GB/s (10^9 bytes per second) of ``num_bytes`` in ``dur_us`` µs.

    For a copy, pass the bytes copied (``MemoryCopy.bytes``), each byte once: that is the
    convention of this library, of the profiler and of copy benchmarks. DRAM carries a
    device-to-device copy's bytes twice (read, then written);
    :func:`profiling_utils.rates.rate_report` accounts for that against the datasheet.

    Raises:
        ValueError: ``dur_us`` is not positive (a zero-length activity has no rate).
    """
    if not dur_us > 0:
        raise ValueError(f"dur_us must be positive, not {dur_us}")
    return num_bytes / dur_us / 1e3


@dataclass(frozen=True)
class Measurement:
    """One measured peak: the rate, the samples it is the median of, and the conditions."""

    rate: float
    """The peak: the work of one call over the median duration, in :attr:`unit`."""
    unit: str
    """``"TFLOP/s"`` for the matmul; ``"GB/s"`` (bytes copied) for the copy."""
    sustained: bool
    """``False`` for the short burst read from a trace, ``True`` for the long run."""
    operation: str
    """What was run, e.g. ``"8192x8192x8192 bf16 matmul"``."""
    method: str
    """How it was run and timed, e.g. ``"back to back over 2.01 s, timed with CUDA events"``."""
    durations_us: tuple[float, ...]
    """The durations the median is taken over, µs, in the order they ran."""
    calls: int
    """Calls run and timed in all, including those before the samples (burst: the profiled
    steps; sustained: the whole run, of which the second half are the samples)."""
    elapsed_s: float
    """GPU time from the first timed call's start to the last one's end, seconds."""
    rate_low: float
    """The rate at the slower quartile of :attr:`durations_us` (the interquartile range's
    low end)."""
    rate_high: float
    """The rate at the faster quartile (the interquartile range's high end)."""
    sm_clock_mhz: tuple[int, ...] = ()
    """SM clock readings under the sustained load, MHz, about every quarter second, as NVML
    reports them (:func:`torch.cuda.clock_rate`). Empty for a burst (too short to read the
    clock during it) and where NVML cannot be read (no ``nvidia-ml-py``)."""

    @property
    def median_us(self) -> float:
        """Median of :attr:`durations_us`, µs."""
        return statistics.median(self.durations_us)

    def conditions(self) -> str:
        """How this peak was measured, as a clause for a sentence."""
        which = f"the last {len(self.durations_us):,} of " if self.sustained else ""
        text = (
            f"median of {which}{self.calls:,} calls {self.method}; interquartile range "
            f"{self.rate_low:,.0f}-{self.rate_high:,.0f} {self.unit}"
        )
        clocks = self.clock_readings()
        if clocks:
            text += f"; {clocks}"
        return text

    def clock_readings(self) -> str:
        """The SM clock readings, as a clause: their median and range (``""`` when none was
        read). Under a power cap the clock moves by a hundred MHz or more from one reading to
        the next, so no single reading stands for the run."""
        clocks = self.sm_clock_mhz
        if not clocks:
            return ""
        low, high = min(clocks), max(clocks)
        if low == high:
            return f"SM clock {low} MHz at each of {len(clocks)} readings"
        return (
            f"SM clock read at a median of {statistics.median(clocks):.0f} MHz "
            f"({low}-{high} MHz, {len(clocks)} readings)"
        )


@dataclass(frozen=True)
class Peaks:
    """What :func:`measure_peaks` measured on this GPU."""

    device: str
    """The GPU's name, as CUDA reports it."""
    l2_cache_bytes: int | None
    """The GPU's L2 cache, bytes, as CUDA reports it (``L2_cache_size``)."""
    matmul_size: int
    """``n`` of the ``n x n @ n x n`` product."""
    matmul_dtype: str
    """The product's dtype, ``"bf16"``: only a GEMM of this dtype compares with these peaks."""
    matmul_kernel: str
    """The kernel that ran it in the burst (the largest total time in the profiled steps)."""
    matmul_burst: Measurement
    """TFLOP/s of a short burst, read from a profiler trace."""
    matmul_sustained: Measurement
    """TFLOP/s held over :attr:`Measurement.elapsed_s` of back-to-back products."""
    copy_bytes: int
    """Bytes copied by one device-to-device copy (it reads and writes this many)."""
    copy_name: str
    """The GPU activity that did the copy, e.g. ``Memcpy DtoD (Device -> Device)``."""
    copy_burst: Measurement
    """GB/s, bytes copied per second, of a short burst read from a profiler trace."""
    copy_sustained: Measurement
    """GB/s, bytes copied per second, held over back-to-back copies."""
    trace_paths: tuple[Path, ...] = ()
    """The two burst traces, when :func:`measure_peaks` was given an ``out_dir``."""

    def summary(self, width: int = 88, *, only: Literal["matmul", "copy"] | None = None) -> str:
        """Each peak with its conditions, in lines of at most ``width`` characters; with
        ``only``, the matmul's or the copy's alone (a page that rates a copy need not print
        a matmul peak that a product of another size may pass)."""
        if only not in (None, "matmul", "copy"):
            raise ValueError(f"only must be 'matmul', 'copy' or None, not {only!r}")
        lines = textwrap.wrap(
            f"Measured peaks of {self.device} (GB = 10^9 bytes; a copy's GB/s counts the "
            "bytes copied, each once):",
            width,
            break_on_hyphens=False,
        )
        measurements = {
            "matmul": (self.matmul_burst, self.matmul_sustained),
            "copy": (self.copy_burst, self.copy_sustained),
        }
        for measurement in (
            m for kind, pair in measurements.items() if only in (None, kind) for m in pair
        ):
            kind = "sustained" if measurement.sustained else "burst"
            lines += textwrap.wrap(
                f"{kind} {measurement.operation}: {measurement.rate:,.0f} {measurement.unit} "
                f"({measurement.conditions()})",
                width,
                initial_indent="  - ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
        return "\n".join(lines)


_CACHE: dict[tuple[Any, ...], Peaks] = {}
_MAX_SUSTAINED_CALLS = 100_000  # bounds the events a tiny operation would need


def measure_peaks(
    out_dir: str | os.PathLike[str] | None = None,
    *,
    matmul_size: int = 8192,
    copy_bytes: int = 2**30,
    active: int = 5,
    warmup_iters: int = 5,
    sustained_s: float = 2.0,
) -> Peaks | None:
    """Measure this GPU's bf16 matmul and device copy peaks, in a burst and sustained.

    The burst: each operation is profiled with :func:`~profiling_utils.capture.capture`
    (``warmup_iters`` calls, then one warm-up step and ``active`` recorded steps) and its GPU
    durations are read from the trace, the way the gallery's examples time their own work.

    Sustained: each operation then runs back to back for ``sustained_s`` seconds, each call
    timed with CUDA events; the peak is the median of the second half, once the clock has
    settled under the load.

    With ``out_dir=None`` the result is measured once per process and reused: several
    gallery pages ask for it, and it costs about ``2 * sustained_s + 2`` seconds of GPU time.

    Args:
        out_dir: Where to keep the two burst traces (``peak_matmul_...``, ``peak_copy_...``);
            pass :func:`~profiling_utils.render.perfetto.trace_dir` to publish them with a
            page. It always measures again. ``None`` uses a temporary folder.
        matmul_size: ``n`` of the bf16 ``n x n @ n x n`` product.
        copy_bytes: Bytes of the copied buffer (a positive even number).
        active: Profiled steps of each operation in the burst.
        warmup_iters: Unprofiled calls before the burst, to bring the clock up and settle
            cuBLAS's choice of kernel.
        sustained_s: Seconds of back-to-back calls for each sustained peak.

    Returns:
        The :class:`Peaks`, or ``None`` on a machine without a CUDA GPU (nothing to measure).

    Raises:
        ValueError: A size or duration is not positive.
        RuntimeError: The burst's trace holds no kernel, which would mean the profiler
            recorded no GPU activity.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    if matmul_size < 1 or copy_bytes < 2 or copy_bytes % 2:
        raise ValueError("matmul_size must be positive and copy_bytes a positive even number")
    if not sustained_s > 0 or active < 1:
        raise ValueError("sustained_s and active must be positive")
    key = (torch.cuda.current_device(), matmul_size, copy_bytes, active, warmup_iters)
    key += (sustained_s,)
    if out_dir is None and key in _CACHE:
        return _CACHE[key]

    with tempfile.TemporaryDirectory(prefix="peaks-") as scratch:
        where = Path(scratch) if out_dir is None else Path(out_dir)
        schedule = dict(wait=0, warmup=1, active=active, warmup_iters=warmup_iters)
        # Each helper's operands are freed when it returns, before the next one allocates.
        matmul_kernel, matmul_burst, matmul_sustained, matmul_path = _measure_matmul(
            where, matmul_size, schedule, sustained_s
        )
        copy_name, copy_burst, copy_sustained, copy_path = _measure_copy(
            where, copy_bytes, schedule, sustained_s
        )
    torch.cuda.empty_cache()  # give the operands' memory back to the caller's work

    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    peaks = Peaks(
        device=torch.cuda.get_device_name(),
        l2_cache_bytes=getattr(properties, "L2_cache_size", None) or None,
        matmul_size=matmul_size,
        matmul_dtype="bf16",
        matmul_kernel=matmul_kernel,
        matmul_burst=matmul_burst,
        matmul_sustained=matmul_sustained,
        copy_bytes=copy_bytes,
        copy_name=copy_name,
        copy_burst=copy_burst,
        copy_sustained=copy_sustained,
        trace_paths=() if out_dir is None else (matmul_path, copy_path),
    )
    if out_dir is None:
        _CACHE[key] = peaks
    return peaks


def _measure_matmul(
    where: Path, size: int, schedule: dict[str, int], sustained_s: float
) -> tuple[str, Measurement, Measurement, Path]:
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    make = dict(device="cuda", dtype=torch.bfloat16, generator=generator)
    a, b = torch.randn(size, size, **make), torch.randn(size, size, **make)
    out = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        torch.matmul(a, b, out=out)

    operation = f"{size}x{size}x{size} bf16 matmul"
    flops = gemm_flops(size, size, size)
    run = capture(
        step,
        name="peak_" + run_name(size, "bf16", warm=True),
        out_dir=where,
        label="peak_matmul",
        **schedule,
    )
    kernel, durations = _largest_kernel(run.trace)
    burst = _burst(operation, "TFLOP/s", lambda us: achieved_tflops(flops, us), run, durations)
    sustained = _sustained(
        step, operation, "TFLOP/s", lambda us: achieved_tflops(flops, us), sustained_s
    )
    return kernel, burst, sustained, run.trace_path


def _measure_copy(
    where: Path, copy_bytes: int, schedule: dict[str, int], sustained_s: float
) -> tuple[str, Measurement, Measurement, Path]:
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    src = torch.empty(copy_bytes // 2, device="cuda", dtype=torch.bfloat16)
    src.normal_(generator=generator)
    dst = torch.empty_like(src)

    def step() -> None:
        dst.copy_(src)

    operation = f"{byte_size(copy_bytes)} device-to-device copy"
    run = capture(
        step,
        name=f"peak_copy_{copy_bytes}B_warm",
        out_dir=where,
        label="peak_copy",
        **schedule,
    )
    name, durations = _copies(run.trace, copy_bytes)
    burst = _burst(operation, "GB/s", lambda us: achieved_gb_s(copy_bytes, us), run, durations)
    sustained = _sustained(
        step, operation, "GB/s", lambda us: achieved_gb_s(copy_bytes, us), sustained_s
    )
    return name, burst, sustained, run.trace_path


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def _measurement(
    operation: str,
    unit: str,
    rate_of: Callable[[float], float],
    *,
    sustained: bool,
    method: str,
    samples: list[float],
    calls: int,
    elapsed_s: float,
    clocks: tuple[int, ...] = (),
) -> Measurement:
    slow_us, fast_us = _quartiles(samples)[::-1]
    return Measurement(
        rate=rate_of(statistics.median(samples)),
        unit=unit,
        sustained=sustained,
        operation=operation,
        method=method,
        durations_us=tuple(samples),
        calls=calls,
        elapsed_s=elapsed_s,
        rate_low=rate_of(slow_us),
        rate_high=rate_of(fast_us),
        sm_clock_mhz=clocks,
    )


def _burst(
    operation: str,
    unit: str,
    rate_of: Callable[[float], float],
    run: Capture,
    durations: list[float],
) -> Measurement:
    params = run.params
    warmup_calls = params["warmup_iters"] + params["wait"] + params["warmup"]
    return _measurement(
        operation,
        unit,
        rate_of,
        sustained=False,
        method=f"in a short burst after {warmup_calls} warm-up calls, timed from a profiler trace",
        samples=durations,
        calls=len(durations),
        elapsed_s=_span_s(run.trace),
    )


def _span_s(trace: Trace) -> float:
    """Seconds from the first profiled step's GPU work to the last one's end."""
    work = _in_steps(trace)
    if not work:
        return 0.0
    return (max(w.end for w in work) - min(w.start for w in work)) / 1e6


def _sustained(
    step: Callable[[], None],
    operation: str,
    unit: str,
    rate_of: Callable[[float], float],
    seconds: float,
) -> Measurement:
    """Run ``step`` back to back for ``seconds``, each call between two CUDA events."""
    import torch

    def timed(count: int) -> list[tuple[Any, Any]]:
        pairs = []
        for _ in range(count):
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            step()
            end.record()
            pairs.append((start, end))
        return pairs

    probe = timed(3)  # also the warm-up: cuBLAS's choice and the allocator settle here
    torch.cuda.synchronize()
    call_s = max(min(s.elapsed_time(e) for s, e in probe) / 1e3, 1e-6)
    calls = min(max(8, math.ceil(seconds / call_s)), _MAX_SUSTAINED_CALLS)
    chunk = max(1, math.ceil(0.25 / call_s))  # the CPU stays at most one chunk ahead
    pairs: list[tuple[Any, Any]] = []
    clocks: list[int] = []
    while len(pairs) < calls:
        waiting_on = pairs[-1][1] if pairs else None
        pairs += timed(min(chunk, calls - len(pairs)))
        if waiting_on is not None:
            waiting_on.synchronize()  # the chunk just queued keeps the GPU busy meanwhile
            clock = _sm_clock_mhz()
            if clock is not None:
                clocks.append(clock)
    torch.cuda.synchronize()
    durations = [start.elapsed_time(end) * 1e3 for start, end in pairs]
    elapsed_s = pairs[0][0].elapsed_time(pairs[-1][1]) / 1e3
    return _measurement(
        operation,
        unit,
        rate_of,
        sustained=True,
        method=f"back to back over {elapsed_s:.3g} s, timed with CUDA events",
        samples=durations[len(durations) // 2 :],
        calls=len(durations),
        elapsed_s=elapsed_s,
        clocks=tuple(clocks),
    )


def _sm_clock_mhz() -> int | None:
    """The current GPU's SM clock in MHz through NVML, or ``None`` where it cannot be read."""
    import torch

    try:
        return int(torch.cuda.clock_rate())
    except Exception:  # no nvidia-ml-py (pynvml), or NVML cannot reach the device
        return None


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
