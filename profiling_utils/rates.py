"""A GEMM's TFLOP/s or a copy's GB/s against the datasheet and the measured peaks.

Every page that says "X% of peak" says it through :func:`rate_report`, so every such claim
names its peak and never shows a share above 100% without the sentence that explains it. The
report puts one rate next to:

- the **datasheet** peak of the device for that dtype (:mod:`profiling_utils.datasheet`); for a
  device-to-device copy, the copy rate the datasheet's memory bandwidth allows, which is half
  of it, because memory carries each copied byte twice (read, then written);
- the **burst** and **sustained** peaks :func:`~profiling_utils.peaks.measure_peaks` measured
  on this GPU, each with the conditions it was measured under.

A share above 100% gets an explanation decided from the numbers: a copy above its memory's
ceiling whose bytes fit in the L2 cache likely had its writes absorbed there; a rate within a
peak's interquartile range is within its spread; a short run can beat the sustained peak,
which is held over seconds. When none of these applies, the report says the rate is above the
peak and the peak, or the rate's inputs, are suspect.

Copy rates count the bytes copied, each once (GB = 10^9 bytes), as the profiler, the rest of
this library and copy benchmarks do.

Example::

    peaks = measure_peaks()  # None without a GPU
    report = rate_report(achieved_tflops(gemm_flops(4096, 4096, 4096), 180.0), "bf16",
                         device=trace.devices[0].name, peaks=peaks, subject="4096 GEMM")
    print(report)
    burst = report.share("burst")
    if burst is not None and burst.share > 0.9:
        print("close to what this GPU reaches")
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Literal

from .datasheet import datasheet_peak, device_spec, same_device
from .peaks import Measurement, Peaks
from .tables import byte_size, percent

__all__ = ["PeakShare", "RateKind", "RateReport", "Reason", "rate_report"]

RateKind = Literal["bf16", "fp16", "tf32", "fp32", "fp8", "copy"]
"""A GEMM's dtype (its rate in TFLOP/s), or ``"copy"`` for a device-to-device copy (GB/s)."""

Against = Literal["datasheet", "burst", "sustained"]

Reason = Literal["l2-cache", "within-spread", "short-run", "suspect"]
"""Why a rate is above a peak: its bytes fit in the L2 cache (a copy); it is within the
measurement's interquartile range; it beat the sustained peak as a short run does; or nothing
in the data explains it, so the peak or the rate's inputs are suspect."""


@dataclass(frozen=True)
class PeakShare:
    """A rate as a share of one peak, and why, if it is above it."""

    against: Against
    """Which peak: the vendor's ``"datasheet"``, or the ``"burst"`` or ``"sustained"`` one
    measured on this GPU."""
    peak: float
    """The peak, in the report's unit (for a copy against the datasheet: the copy rate the
    memory bandwidth allows, half of it)."""
    share: float
    """Rate over peak: ``1.0`` is 100%."""
    peak_description: str
    """The peak, what it is and where it comes from, as a noun phrase."""
    reason: Reason | None
    """Why the rate is above the peak, as a key a page can make a claim on; ``None`` when
    :attr:`share` is not above 1."""
    explanation: str | None
    """:attr:`reason` as a sentence for the page; ``None`` when :attr:`share` is not above 1."""

    @property
    def above_peak(self) -> bool:
        """Whether the rate is above this peak."""
        return self.share > 1

    def sentence(self) -> str:
        """``"90% of <peak_description>."`` and, above 100%, the explanation."""
        text = f"{percent(self.share)} of {self.peak_description}."
        return f"{text} {self.explanation}" if self.explanation else text


@dataclass(frozen=True)
class RateReport:
    """One rate against every peak that applies to it; ``str()`` gives the sentences."""

    rate: float
    """The achieved rate, in :attr:`unit`."""
    unit: str
    """``"TFLOP/s"`` or ``"GB/s"`` (bytes copied per second)."""
    subject: str
    """What achieved it, e.g. ``"bf16 GEMM"`` or ``"32 MiB device-to-device copy"``."""
    shares: tuple[PeakShare, ...]
    """The rate against each peak that applies, datasheet first."""
    missing: tuple[str, ...]
    """Why a peak is not compared with, one sentence each (no datasheet row for the device,
    peaks measured on another GPU or for another dtype, no GPU to measure on)."""

    def share(self, against: Against) -> PeakShare | None:
        """The share against one peak, or ``None`` if that peak does not apply."""
        return next((s for s in self.shares if s.against == against), None)

    @property
    def above_peak(self) -> bool:
        """Whether the rate is above any of the peaks."""
        return any(s.above_peak for s in self.shares)

    def text(self, width: int = 88) -> str:
        """The report as lines of at most ``width`` characters, one item per peak."""
        lines = [f"{_number(self.rate)} {self.unit} ({self.subject}) is"]
        for share in self.shares:
            lines += textwrap.wrap(
                share.sentence(),
                width,
                initial_indent="  - ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
        if not self.shares:
            lines[0] += " compared with no peak:"
        for reason in self.missing:
            lines += textwrap.wrap(
                reason, width, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def rate_report(
    rate: float,
    kind: RateKind,
    *,
    device: str | None = None,
    peaks: Peaks | None = None,
    copy_bytes: int | None = None,
    l2_cache_bytes: int | None = None,
    subject: str | None = None,
) -> RateReport:
    """Put a GEMM's TFLOP/s or a device-to-device copy's GB/s next to every peak that applies.

    Args:
        rate: The achieved rate: TFLOP/s (:func:`~profiling_utils.peaks.achieved_tflops`) for
            a GEMM, GB/s of bytes copied (:func:`~profiling_utils.peaks.achieved_gb_s` of the
            copy's bytes, or :attr:`MemoryCopy.bandwidth_gb_s
            <profiling_utils.measures.MemoryCopy.bandwidth_gb_s>`) for a copy.
        kind: The GEMM's dtype (``"bf16"``, ``"fp16"``, ``"tf32"``, ``"fp32"``, ``"fp8"``),
            or ``"copy"`` for a device-to-device copy. An fp32 matmul run with
            ``torch.backends.cuda.matmul.allow_tf32`` is ``"tf32"``. A host-to-device copy
            has no ceiling here: PCIe and NVLink are not in the datasheet table.
        device: The GPU's name, for the datasheet (a trace's ``trace.devices[0].name``).
            Defaults to ``peaks.device``.
        peaks: The measured peaks (:func:`~profiling_utils.peaks.measure_peaks`). They are
            compared with only if they were measured on ``device`` and, for a GEMM, in the
            same dtype.
        copy_bytes: Bytes copied, for a copy: with the L2 cache's size, it tells whether the
            copy could outrun memory.
        l2_cache_bytes: The GPU's L2 cache, bytes. Defaults to ``peaks.l2_cache_bytes`` when
            the peaks were measured on ``device``, else to the datasheet table's (a trace does
            not record it).
        subject: What achieved the rate, for the first line. Defaults to ``"bf16 GEMM"`` or
            ``"device-to-device copy"`` (with its size when given).

    Returns:
        The :class:`RateReport`: the numbers, for a page to make claims from, and its text.

    Raises:
        ValueError: ``rate`` is not a positive number, or ``kind`` is unknown.
    """
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be a positive number, not {rate}")
    if kind not in ("bf16", "fp16", "tf32", "fp32", "fp8", "copy"):
        raise ValueError(f"kind must be a GEMM dtype or 'copy', not {kind!r}")
    device = device if device is not None else (peaks.device if peaks else None)
    same_gpu = peaks is not None and device is not None and same_device(peaks.device, device)
    if l2_cache_bytes is None and same_gpu and peaks is not None:
        l2_cache_bytes = peaks.l2_cache_bytes
    spec = device_spec(device) if device is not None else None
    if l2_cache_bytes is None and spec is not None:
        l2_cache_bytes = spec.l2_cache_bytes
    if kind == "copy":
        unit = "GB/s"
        default_subject = "device-to-device copy"
        if copy_bytes is not None:
            default_subject = f"{byte_size(copy_bytes)} {default_subject}"
        context = _CopyContext(copy_bytes, l2_cache_bytes)
    else:
        unit = "TFLOP/s"
        default_subject = f"{kind} GEMM"
        context = None

    shares: list[PeakShare] = []
    missing: list[str] = []
    datasheet = _datasheet_share(rate, kind, device, context, missing)
    if datasheet is not None:
        shares.append(datasheet)

    if peaks is None:
        missing.append(
            "Not compared with measured peaks (measure_peaks() was not run for this report)."
        )
    elif not same_gpu:
        missing.append(
            f"The measured peaks are not compared with: they were measured on a "
            f"{peaks.device}, and this rate is from {device or 'an unnamed device'}."
        )
    elif kind != "copy" and kind != peaks.matmul_dtype:
        missing.append(
            f"The measured peaks are not compared with: they are of a "
            f"{peaks.matmul_dtype} matmul, and this is a {kind} GEMM."
        )
    else:
        for sustained in (False, True):
            shares.append(_measured_share(rate, kind, peaks, sustained, context))
    return RateReport(rate, unit, subject or default_subject, tuple(shares), tuple(missing))


@dataclass(frozen=True)
class _CopyContext:
    copy_bytes: int | None
    l2_cache_bytes: int | None

    def fits_in_l2(self) -> tuple[int, int] | None:
        """``(copy_bytes, l2_cache_bytes)`` when the bytes copied fit in the L2 cache."""
        size, l2 = self.copy_bytes, self.l2_cache_bytes
        return (size, l2) if size is not None and l2 is not None and size <= l2 else None


def _datasheet_share(
    rate: float,
    kind: RateKind,
    device: str | None,
    copy: _CopyContext | None,
    missing: list[str],
) -> PeakShare | None:
    peak = datasheet_peak(device, "memory" if kind == "copy" else kind) if device else None
    if peak is None:
        what = "memory bandwidth" if kind == "copy" else f"{kind} peak"
        missing.append(
            f"No datasheet {what} for {device or 'an unnamed device'}: the table in "
            "profiling_utils.datasheet does not have it."
        )
        return None
    if copy is None:
        share = rate / peak.value
        above: tuple[Reason, str] | None = None
        if share > 1:
            above = (
                "suspect",
                "Above the datasheet's peak, which the vendor computes at a stated boost "
                "clock: check the operation count and the kernel's duration before trusting "
                "this rate.",
            )
        description = f"the datasheet's {peak.figure} peak, {_number(peak.value)} {peak.unit}"
        return _share("datasheet", peak.value, share, description, above)

    ceiling = peak.value / 2
    description = (
        f"{_number(ceiling)} GB/s, the copy rate that the datasheet's {peak.value:,.0f} GB/s "
        f"of {peak.figure.split()[0]} allows (a copy reads and writes each byte)"
    )
    share = rate / ceiling
    above: tuple[Reason, str] | None = None
    if share > 1:
        memory = peak.figure.split()[0]
        fits = copy.fits_in_l2()
        if fits is not None:
            above = (
                "l2-cache",
                f"Above that ceiling, which a copy at {memory} speed cannot pass: the "
                f"{byte_size(fits[0])} this copy writes fit in the {byte_size(fits[1])} L2 "
                f"cache, which can take the writes and send them on to {memory} later, the "
                "likely reason (a trace does not show where the bytes went).",
            )
        elif copy.copy_bytes is None or copy.l2_cache_bytes is None:
            above = (
                "suspect",
                "Above that ceiling, and without the copy's size and the L2 cache's there is "
                "no telling why: the copy's duration or size is suspect.",
            )
        else:
            above = (
                "suspect",
                f"Above that ceiling, though this copy's {byte_size(copy.copy_bytes)} does not fit "
                f"in the {byte_size(copy.l2_cache_bytes)} L2 cache: the copy's recorded duration "
                "or size is suspect.",
            )
    return _share("datasheet", ceiling, share, description, above)


def _measured_share(
    rate: float,
    kind: RateKind,
    peaks: Peaks,
    sustained: bool,
    copy: _CopyContext | None,
) -> PeakShare:
    if copy is None:
        burst, measured = peaks.matmul_burst, peaks.matmul_sustained
    else:
        burst, measured = peaks.copy_burst, peaks.copy_sustained
    if not sustained:
        measured = burst
    against: Against = "sustained" if sustained else "burst"
    description = f"the {against} peak measured here, {_number(measured.rate)} {measured.unit}"
    share = rate / measured.rate
    above = _above_measured(rate, peaks, measured, burst, copy) if share > 1 else None
    return _share(against, measured.rate, share, description, above)


def _share(
    against: Against,
    peak: float,
    share: float,
    description: str,
    above: tuple[Reason, str] | None,
) -> PeakShare:
    reason, explanation = above if above is not None else (None, None)
    return PeakShare(against, peak, share, description, reason, explanation)


def _above_measured(
    rate: float,
    peaks: Peaks,
    measured: Measurement,
    burst: Measurement,
    copy: _CopyContext | None,
) -> tuple[Reason, str]:
    fits = copy.fits_in_l2() if copy is not None else None
    if fits is not None and peaks.copy_bytes > fits[1]:
        return (
            "l2-cache",
            f"Above it, likely because the {byte_size(fits[0])} this copy writes fit in the "
            f"{byte_size(fits[1])} L2 cache, and the {byte_size(peaks.copy_bytes)} copy that "
            "set the peak does not: that one is held to memory speed.",
        )
    if rate <= measured.rate_high:
        return (
            "within-spread",
            f"Within that measurement's spread: its interquartile range reaches "
            f"{_number(measured.rate_high)} {measured.unit}.",
        )
    if measured.sustained and burst.rate > measured.rate_high:
        clocks = measured.clock_readings()
        text = (
            f"Above it, as a short run can be: the sustained peak is what the GPU holds over "
            f"{measured.elapsed_s:.3g} s of back-to-back calls, "
            f"{1 - measured.rate / burst.rate:.0%} below the burst peak"
            f"{f' ({clocks})' if clocks else ''}."
        )
        if rate > burst.rate_high:
            text += " This rate is above the burst peak too: see there."
        return "short-run", text
    if copy is None:
        return (
            "suspect",
            f"Above it by more than its spread: this GEMM ran faster per operation than the "
            f"{measured.operation} that set the peak, so that peak is suspect as a ceiling: "
            "it is one product's rate, not the hardware's limit.",
        )
    return (
        "suspect",
        "Above it by more than its spread, and the L2 cache does not explain it: the peak "
        "measurement is suspect, not the GPU faster than itself.",
    )


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"
