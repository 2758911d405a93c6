"""Compare two traces side by side: the post's eager-versus-compiled comparison for any pair.

:func:`compare` puts a baseline and a second trace next to each other: CPU and GPU time step
by step (over the whole recording, for traces without steps), kernel and launch counts, the
ops and kernels that only one of them has, and the findings of the rules that need a baseline
(``compile-cpu-tax``).

Example::

    from profiling_utils import compare

    comparison = compare("64_bf16_warm_eager.json.gz", "64_bf16_warm_compile.json.gz")
    print(comparison.to_text())
    for finding in comparison.findings:
        print(finding.message)
"""

from __future__ import annotations

import os
import re
import statistics
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .kernels import fp32_math
from .measures import StepTime
from .rules import RULES, Facts, Finding, order_findings
from .stats import MIN_SAMPLES_TO_COMPARE, Distribution
from .tables import distinct_cuts, text_table, without_float_noise
from .trace import Span, Trace, TraceContent, devices_differ, gc_paused, load_trace

__all__ = ["RunSummary", "StepPair", "NameCount", "Comparison", "compare"]

_LISTED_NAMES = 20
"""How many names of each "only in" list the text shows (the JSON lists them all)."""
_NOT_RECORDED: TraceContent = "GPU not recorded"
_NAME_WIDTH = 120
"""Characters of a name the text shows (a kernel's runs to thousands)."""


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The numbers of one side of a comparison."""

    trace: str
    """The trace's path."""
    device: str | None
    """The GPU name(s) recorded, with the architecture on AMD
    (:attr:`~profiling_utils.trace.DeviceInfo.model`; a device with GPU work but no name as
    :meth:`~profiling_utils.trace.DeviceInfo.describe` gives it: ``"unknown AMD GPU, gfx942"``),
    or ``None`` without a device."""
    device_named: bool
    """Whether every device of :attr:`device` is named in the trace (a torch 1.8 trace often
    lists none: its GPU is then known only by its vendor)."""
    content: TraceContent
    """Whether the trace holds GPU work, only an accelerator's events that are not read, only
    host events, only the profiler's own, or no event at all."""
    host_ops_recorded: bool
    """:attr:`profiling_utils.trace.Trace.records_host_ops`: false for a recording without
    ``ProfilerActivity.CPU``, whose ops and steps are missing rather than absent."""
    steps: int
    """The ``ProfilerStep#N`` windows read for CPU time
    (:attr:`profiling_utils.rules.facts.Facts.host_steps`): a step that ends after the
    recording window, or one that recorded nothing while others did, is left out."""
    steps_without_gpu_records: int
    """Of :attr:`steps`, those more than a tenth of whose kernel launches lack their GPU
    records (a trace cut short, records the profiler dropped): their CPU time counts, their
    GPU figures do not. The GPU medians and per-step counts are over the others
    (:attr:`profiling_utils.rules.facts.Facts.steps_with_gpu_records`), ``None`` where every
    step is one."""
    median_step_cpu_us: float | None
    """Median CPU duration of a step (its window on the host, waits included)."""
    median_step_gpu_busy_us: float | None
    """Median GPU busy time of a step's work."""
    recording_cpu_us: float | None
    """From the first span on a CPU thread to the last one's end, within the profiler's
    recording window (:attr:`profiling_utils.rules.facts.Facts.host_window`), less the
    stretches with nothing on any thread or GPU (a server between requests:
    :attr:`~profiling_utils.rules.facts.Facts.quiet_stretches`), µs: the time to compare for
    traces without steps."""
    recording_gpu_busy_us: float | None
    """The busiest GPU's busy time from the host's first event on, µs, as ``overhead-bound``
    reads a recording without steps (:meth:`~profiling_utils.rules.facts.Facts.recording_gpu_busy`;
    ``None`` without GPU work)."""
    kernels: int | None
    """Kernels in the whole trace (``None`` where its GPU work was not recorded, content
    ``"GPU not recorded"``: not known, as the next two)."""
    compiler_kernels: int | None
    """Of :attr:`kernels`, those torch.compile launched while compiling (its autotuning's
    candidates and cache flushes: :attr:`~profiling_utils.rules.facts.Facts.compiler_kernels`),
    which the kernel names only one side has leave out (``None`` as :attr:`kernels`)."""
    launches: int | None
    """Runtime or driver calls that started GPU work found in the trace."""
    gpu_activities: int | None
    """Kernels, memcpys and memsets in the whole trace."""
    kernels_per_step: float | None
    """Kernels launched from inside a step, the median over the steps."""
    launches_per_step: float | None
    """Launch calls made inside a step, the median over the steps."""
    launch_apis: dict[str, int] | None
    """Launch calls by name (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaGraphLaunch``...);
    ``None`` where the GPU work was not recorded."""
    compiled: bool
    """Whether the trace shows ``torch.compile`` activity."""
    cuda_graph_launches: int
    """``cudaGraphLaunch`` calls."""
    collectives: int | None
    """Communication kernels (NCCL, RCCL collectives) in the whole trace; ``None`` where the
    GPU work was not recorded."""
    median_step_communication_us: float | None
    """Median over the steps of the time at least one collective kernel runs (union), µs;
    ``None`` without collectives or steps. Part of the step's GPU busy time: a rank waiting in
    a collective for a late peer is busy by this measure."""
    median_step_exposed_communication_us: float | None
    """The same for communication with no compute kernel beside it on the same GPU
    (:func:`profiling_utils.comm.comm_overlap`)."""
    communication_us: float | None
    """Over the whole trace, the time at least one collective kernel runs, µs; ``None``
    without collectives. The figure to compare for traces without steps (a serving loop's)."""
    exposed_communication_us: float | None
    """The same for communication with no compute kernel beside it."""
    gemm_fp32_math: dict[str, int] | None = None
    """The GEMM kernels under matrix-multiply ops whose names say how they computed on fp32
    data (:func:`profiling_utils.kernels.fp32_math`), counted by that: ``{"fp32": n}`` on
    the CUDA cores, ``{"tf32": n}`` in TF32 on the tensor cores; ``None`` where no GPU work
    was recorded."""
    step_cpu_iqr_us: list[float] | None = None
    """The middle half of the steps' CPU times, ``[lower quartile, upper quartile]``, µs
    (``None`` without steps; :class:`profiling_utils.stats.Distribution`): where the two
    runs' middle halves overlap, the ratio of their medians may be noise or warm-up
    (:func:`profiling_utils.stats.clearly_greater` holds them to the same test)."""
    step_gpu_busy_iqr_us: list[float] | None = None
    """The same for the steps' GPU busy time, over the steps the GPU medians read."""

    @property
    def gpu_steps(self) -> int:
        """The steps the GPU medians read: :attr:`steps` less those whose GPU records are
        missing."""
        return self.steps - self.steps_without_gpu_records

    median_step_gpu_window_us: float | None = None
    """Median GPU window of a step (:attr:`profiling_utils.measures.StepTime.gpu_window_us`:
    from the end of the earlier steps' GPU work, or the step's start, to the end of its own
    GPU work, or the step's end): where the GPU sets the pace, the step's length as the GPU
    runs it, which its CPU time understates."""
    rank: int | None = None
    """The process's rank in a distributed job (``distributedInfo.rank``), or ``None``."""


@dataclass(frozen=True, slots=True)
class StepPair:
    """A step of each trace side by side: of one number, or the i-th of each where their
    schedules number steps differently (:attr:`Comparison.steps`)."""

    index: int
    """Position of the pair in :attr:`Comparison.steps`, from 0."""
    baseline_step: int | None
    """N of the baseline's ``ProfilerStep#N``, ``None`` where it has no step here."""
    trace_step: int | None
    """N of the other trace's step."""
    baseline_cpu_us: float | None
    trace_cpu_us: float | None
    baseline_gpu_busy_us: float | None
    trace_gpu_busy_us: float | None


@dataclass(frozen=True, slots=True)
class NameCount:
    """An op, label or kernel name with how often it occurs and how long it took in all."""

    name: str
    count: int
    total_us: float = 0.0
    """The spans' durations added up, µs (nested spans of one name counted each)."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """What :func:`compare` returns."""

    baseline: RunSummary
    """The baseline (e.g. the eager run)."""
    trace: RunSummary
    """The trace compared with it (e.g. the compiled run)."""
    steps: list[StepPair]
    """CPU and GPU time step by step: paired by step number where the two runs share the
    numbers of the one with fewer steps, else by position."""
    ops_only_in_baseline: list[NameCount]
    """CPU ops (``cpu_op`` names) the other trace does not have, most frequent first."""
    ops_only_in_trace: list[NameCount]
    """CPU ops the baseline does not have."""
    kernels_only_in_baseline: list[NameCount]
    """Kernel names the other trace does not have (none where either trace's GPU work was
    not recorded, content ``"GPU not recorded"``: its kernels' names are not known), the
    kernels torch.compile launched while compiling left out."""
    kernels_only_in_trace: list[NameCount]
    """Kernel names the baseline does not have (none, as above, where either's GPU work was
    not recorded)."""
    findings: list[Finding]
    """Findings of the rules that need a baseline (``compile-cpu-tax``)."""
    devices_differ: bool = False
    """Whether the two ran on devices of different kinds, as far as both traces say
    (:func:`profiling_utils.trace.devices_differ`: names, and on AMD architectures): their
    times and kernel names then differ with the hardware as well as with the code."""
    fp32_math_differs: bool = False
    """Whether the GEMM kernels' names say the two computed fp32 matmuls differently (one on
    the CUDA cores, the other in TF32: ``torch.set_float32_matmul_precision`` differs), both
    saying something (:attr:`RunSummary.gemm_fp32_math`): their GEMM kernels then differ
    with the precision, not only with the code."""
    versions_differ: bool = False
    """Whether the two were written by torch (or library) versions that name things
    differently: one
    with the profiler categories of torch before ~1.10 (``Operator``, ``Kernel``) and one
    without, autograd nodes named with and without the version suffix later torch adds
    (``AddmmBackward`` against ``AddmmBackward0``), or one kernel function with other
    argument types on each side. Their "only in" lists then hold the same work under two
    names."""
    labels_only_in_baseline: list[NameCount] = field(default_factory=list)
    """Labels on the host (``record_function``, a data loader's ``enumerate(DataLoader)...``,
    ``user_annotation``; not ``ProfilerStep#N``) the other trace does not have, the longest
    in all first: a stall or a loader one run has and the other has not shows here."""
    labels_only_in_trace: list[NameCount] = field(default_factory=list)
    """Host labels the baseline does not have."""

    @property
    def cpu_ratio(self) -> float | None:
        """Median step CPU time of the trace over the baseline's; ``None`` when either has no
        step (:attr:`RunSummary.recording_cpu_us` compares their recordings then)."""
        a, b = self.baseline.median_step_cpu_us, self.trace.median_step_cpu_us
        return b / a if a and b is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The comparison as plain JSON values (what ``compare --json`` prints)."""
        return without_float_noise(
            {
                "baseline": asdict(self.baseline),
                "trace": asdict(self.trace),
                "cpu_ratio": self.cpu_ratio,
                "devices_differ": self.devices_differ,
                "fp32_math_differs": self.fp32_math_differs,
                "versions_differ": self.versions_differ,
                "steps": [asdict(pair) for pair in self.steps],
                "ops_only_in_baseline": [asdict(n) for n in self.ops_only_in_baseline],
                "ops_only_in_trace": [asdict(n) for n in self.ops_only_in_trace],
                "kernels_only_in_baseline": [asdict(n) for n in self.kernels_only_in_baseline],
                "kernels_only_in_trace": [asdict(n) for n in self.kernels_only_in_trace],
                "labels_only_in_baseline": [asdict(n) for n in self.labels_only_in_baseline],
                "labels_only_in_trace": [asdict(n) for n in self.labels_only_in_trace],
                "findings": [finding.to_dict() for finding in self.findings],
            }
        )

    def to_text(self) -> str:
        """The comparison as readable text (what ``compare`` prints)."""
        a, b = self.baseline, self.trace
        out = [f"baseline: {a.trace}", f"trace:    {b.trace}"]
        if a.device or b.device:
            devices = a.device if a.device == b.device else f"{a.device or '-'} | {b.device or '-'}"
            out.append(f"device:   {devices}")
            if self.devices_differ:
                out.append(
                    "          (different devices: times and kernels differ with the "
                    "hardware too, not only with the code)"
                )
        if a.rank is not None or b.rank is not None:
            ranks = a.rank if a.rank == b.rank else f"{_dash(a.rank)} | {_dash(b.rank)}"
            out.append(f"rank:     {ranks}")
            if a.rank is not None and b.rank is not None and a.rank != b.rank:
                out += [
                    "          (two ranks: they differ with their share of the work and",
                    "          their waits for each other, not only with the code)",
                ]
        contents = a.content if a.content == b.content else f"{a.content} | {b.content}"
        out.append(f"content:  {contents}")
        if self.fp32_math_differs:
            why = (
                "the GPUs differ (not every GPU has TF32), or their matmul precisions"
                if self.devices_differ
                else "they ran at different matmul precisions"
            )
            out += textwrap.wrap(
                f"(fp32 GEMMs by their kernels' names: the baseline's {_fp32_math_words(a)}, "
                f"the trace's {_fp32_math_words(b)}: {why})",
                width=90,
                initial_indent=" " * 10,
                subsequent_indent=" " * 10,
            )
        if self.versions_differ:
            out += [
                "          (written by torch or library versions that name ops, kernels or",
                "          autograd nodes differently: some only in one trace are the other's "
                "renamed)",
            ]
        without = [
            name
            for name, side in (("baseline", a), ("trace", b))
            if side.content == "GPU" and not side.host_ops_recorded
        ]
        if without:
            out.append(
                f"          (the {' and the '.join(without)} "
                f"record{'' if len(without) > 1 else 's'} no op or label on the host, as without "
                "ProfilerActivity.CPU: ops and steps missing there were not recorded)"
            )
        unrecorded = [
            name for name, side in (("baseline", a), ("trace", b)) if side.content == _NOT_RECORDED
        ]
        if unrecorded:
            out.append(
                f"          (the {' and the '.join(unrecorded)} launched GPU work that "
                f"{'they do' if len(unrecorded) > 1 else 'it does'} not hold: no kernel, copy "
                "or memset was recorded, so GPU figures and kernel names are not known there)"
            )

        out.append("")
        rows: list[tuple[Any, ...]] = [
            ("steps", a.steps, b.steps),
            ("median step CPU (µs)", a.median_step_cpu_us, b.median_step_cpu_us),
            (_RANGE, a.step_cpu_iqr_us, b.step_cpu_iqr_us, (a.steps, b.steps)),
            ("median step GPU busy (µs)", a.median_step_gpu_busy_us, b.median_step_gpu_busy_us),
            (_RANGE, a.step_gpu_busy_iqr_us, b.step_gpu_busy_iqr_us, (a.gpu_steps, b.gpu_steps)),
            (
                "median step GPU window (µs)",
                a.median_step_gpu_window_us,
                b.median_step_gpu_window_us,
            ),
            ("median kernels per step", a.kernels_per_step, b.kernels_per_step),
            ("median launches per step", a.launches_per_step, b.launches_per_step),
            ("kernels (whole trace)", a.kernels, b.kernels),
            *(
                [("of them while compiling", a.compiler_kernels, b.compiler_kernels)]
                if a.compiler_kernels or b.compiler_kernels
                else []
            ),
            ("launches (whole trace)", a.launches, b.launches),
            ("GPU activities (whole trace)", a.gpu_activities, b.gpu_activities),
            ("CUDA/HIP graph launches (whole trace)", a.cuda_graph_launches, b.cuda_graph_launches),
        ]
        if not (a.steps and b.steps):  # step medians are missing: the whole recordings
            rows += [
                ("host, whole recording (µs)", a.recording_cpu_us, b.recording_cpu_us),
                ("GPU busy, whole trace (µs)", a.recording_gpu_busy_us, b.recording_gpu_busy_us),
            ]
        if a.collectives or b.collectives:

            def none_is_zero(side: RunSummary, value: float | None, per_step: bool) -> Any:
                # A GPU trace without collective kernels spends no time in them (if it has
                # steps, for the per-step rows), beside a side that does; a CPU-only one (a
                # Gloo rank's) is not read for them.
                if (
                    value is None
                    and not side.collectives
                    and side.content == "GPU"
                    and (side.steps or not per_step)
                ):
                    return 0.0
                return value

            def both(name: str, per_step: bool) -> tuple[Any, Any]:
                return tuple(none_is_zero(side, getattr(side, name), per_step) for side in (a, b))

            if not (a.steps and b.steps):
                rows += [
                    ("in collectives, whole trace (µs)", *both("communication_us", False)),
                    ("  of it exposed (µs)", *both("exposed_communication_us", False)),
                ]
            rows += [
                ("collective kernels (whole trace)", a.collectives, b.collectives),
                (
                    "median step in collectives (µs)",
                    *both("median_step_communication_us", True),
                ),
                (
                    "  of it exposed (µs)",
                    *both("median_step_exposed_communication_us", True),
                ),
            ]
        # Whole-trace counts of recordings of different numbers of steps differ by that
        # number: no ratio then.
        uneven = bool(a.steps and b.steps and a.steps != b.steps)
        rows = [row for row in rows if row[0] != _RANGE or row[1] or row[2]]
        cells = [
            [label, _span(left), _span(right), _noise(left, right, row[3])]
            if label == _RANGE
            else [
                label,
                _num(left),
                _num(right),
                _ratio(right / left)
                if left
                and right is not None
                and label != "steps"
                and not (uneven and "whole trace" in label)
                else "",
            ]
            for row in rows
            for label, left, right in [row[:3]]
        ]
        out.append(text_table(["", "baseline", "trace", "trace/baseline"], cells, indent=""))
        if a.collectives or b.collectives:
            out += [
                "in collectives: a collective's time includes waiting for the other ranks (give "
                "the run's",
                "directories of per-rank traces to see who waits for whom)",
            ]
        if any(cell[3] == "overlap" for cell in cells):
            out += [
                "overlap: the middle halves of the two runs' steps overlap: their medians' "
                "ratio may be",
                "noise or warm-up as much as a change (the steps below show which)",
            ]
        if any(cell[3] == "few steps" for cell in cells):
            out.append(
                f"few steps: fewer than {MIN_SAMPLES_TO_COMPARE} steps on a side, too few to "
                "tell a change from noise"
            )
        if uneven:
            out.append(
                f"whole-trace rows: recordings of {a.steps} and {b.steps} steps, whose counts "
                "differ by that too (no ratio given)"
            )
        for name, side in (("baseline", a), ("trace", b)):
            if side.steps_without_gpu_records:
                count = side.steps_without_gpu_records
                its = "their" if count > 1 else "its"
                out.append(
                    f"{name}: {count} step{'s' if count > 1 else ''} whose kernels' GPU records "
                    f"are missing: {its} CPU time counts, {its} GPU figures do not"
                )
        out.append("launches: runtime and driver calls whose GPU work is in the trace")
        out.append(f"launch APIs, baseline: {_launch_apis(a)}")
        out.append(f"             trace:    {_launch_apis(b)}")
        if self.steps:
            headers = ["step", "baseline CPU", "trace CPU", "baseline GPU busy", "trace GPU busy"]
            rows = [
                [
                    f"{_step_label(pair.baseline_step)} | {_step_label(pair.trace_step)}",
                    _num(pair.baseline_cpu_us),
                    _num(pair.trace_cpu_us),
                    _num(pair.baseline_gpu_busy_us),
                    _num(pair.trace_gpu_busy_us),
                ]
                for pair in self.steps
            ]
            out += ["", "Steps (µs)", text_table(headers, rows)]
        for title, names in (
            ("Labels only in the baseline", self.labels_only_in_baseline),
            ("Labels only in the trace", self.labels_only_in_trace),
            ("Ops only in the baseline", self.ops_only_in_baseline),
            ("Ops only in the trace", self.ops_only_in_trace),
            ("Kernels only in the baseline", self.kernels_only_in_baseline),
            ("Kernels only in the trace", self.kernels_only_in_trace),
        ):
            if title.startswith("Labels") and not (
                self.labels_only_in_baseline or self.labels_only_in_trace
            ):
                continue  # most pairs have the same labels: said by their absence
            out += ["", f"{title} (count, µs in all, name):"]
            shown = names[:_LISTED_NAMES]
            cuts = distinct_cuts([n.name for n in shown], _NAME_WIDTH)
            out += [
                f"  {n.count:>6}×  {_num(n.total_us):>12}  {name}"
                for n, name in zip(shown, cuts, strict=True)
            ]
            if len(names) > len(shown):
                out.append(f"  ... and {len(names) - len(shown)} more (--json lists them all)")
            elif unrecorded and title.startswith("Kernels"):
                out.append(f"  not compared (no kernel recorded in the {unrecorded[0]})")
            elif not names:
                out.append("  none")
        out += ["", "Findings of the rules that compare two traces (diagnose gives each's own):"]
        for finding in self.findings:
            out.append(f"  [{finding.severity}] {finding.rule}: {finding.message}")
        if not self.findings:
            out.append("  none")
        return "\n".join(out)


_RANGE = "  middle half of the steps"


def _span(value: list[float] | None) -> str:
    """``"11,998-16,850"``: whole µs from 100 µs up, so that the range fits its column."""
    if value is None:
        return "-"
    return "-".join(f"{v:,.0f}" if abs(v) >= 100 else _num(v) for v in value)


def _step_label(number: int | None) -> str:
    """``#1009``: a step number is a name, written without a thousands separator."""
    return "-" if number is None else f"#{number}"


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def _ratio(value: float) -> str:
    """``1.25×``; two significant digits below 0.01 (``0.0012×``), which two decimals would
    print as 0."""
    return f"{value:.2f}×" if value >= 0.01 or value == 0 else f"{value:.2g}×"


def _fp32_math_words(side: RunSummary) -> str:
    """``"on the CUDA cores"``, ``"in TF32"`` or ``"partly on the CUDA cores, partly in
    TF32"``."""
    said = set(side.gemm_fp32_math or ())
    if said == {"fp32"}:
        return "on the CUDA cores"
    return "in TF32" if said == {"tf32"} else "partly on the CUDA cores, partly in TF32"


def _gemm_fp32_math(facts: Facts) -> dict[str, int]:
    """:attr:`RunSummary.gemm_fp32_math` of a trace with GPU work."""
    said = Counter(fp32_math(kernel.name) for _, kernel in facts.gemm_launches)
    return {math: said[math] for math in ("fp32", "tf32") if said[math]}


def _launch_apis(side: RunSummary) -> str:
    if side.launch_apis is None:
        return "not known (no GPU record to tell a launch by)"
    return ", ".join(f"{name} ×{count}" for name, count in side.launch_apis.items()) or "none"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _summary(facts: Facts) -> RunSummary:
    trace = facts.trace
    gpu_steps = facts.steps_with_gpu_records  # what the GPU figures are over
    steps = len(gpu_steps)
    host_times = facts.host_step_times
    kept = {step.number for step in gpu_steps}
    times = [t for t in host_times if t.step in kept]
    # Per step, then the median: a step that compiled (its autotuner's candidates) or
    # captured a CUDA graph would move a mean over the steps far from the others.
    launches_in: Counter[int] = Counter()
    kernels_in: Counter[int] = Counter()
    for launch in facts.launches:
        number = facts.step_number_of(launch.call)
        if number in kept:
            launches_in[number] += 1
            kernels_in[number] += sum(w.cat == "kernel" for w in launch.work)
    devices = list(dict.fromkeys(d.model for d in trace.devices))
    info = facts.compile_info
    window = facts.host_window
    busiest = facts.recording_gpu_busy()
    communication = exposed = None
    total = facts.comm_overlap.total if trace.communication else None
    if trace.communication and steps:
        by_step = {overlap.step: overlap for overlap in facts.comm_overlap.steps}
        per_step = [by_step.get(step.number) for step in gpu_steps]
        communication = _median([o.communication_us if o else 0.0 for o in per_step])
        exposed = _median([o.exposed_us if o else 0.0 for o in per_step])
    unrecorded = trace.content == _NOT_RECORDED
    return RunSummary(
        trace=str(trace.path),
        device=", ".join(devices) or None,
        device_named=all(d.name not in ("", "unknown") for d in trace.devices),
        content=trace.content,
        host_ops_recorded=trace.records_host_ops,
        steps=len(host_times),
        steps_without_gpu_records=len(host_times) - len(times),
        median_step_cpu_us=_median([t.cpu_us for t in host_times]),
        median_step_gpu_busy_us=_median([t.gpu_busy_us for t in times]) if trace.has_gpu else None,
        recording_cpu_us=None if window is None else facts.host_active_us,
        recording_gpu_busy_us=None if busiest is None else busiest[0],
        kernels=None if unrecorded else len(trace.kernels),
        compiler_kernels=None if unrecorded else len(facts.compiler_kernels),
        launches=None if unrecorded else len(facts.launches),
        gpu_activities=None if unrecorded else len(trace.gpu_work),
        kernels_per_step=_median([float(kernels_in[n]) for n in kept]) if steps else None,
        launches_per_step=_median([float(launches_in[n]) for n in kept]) if steps else None,
        launch_apis=None
        if unrecorded
        else dict(Counter(launch.call.name for launch in facts.launches).most_common()),
        compiled=info.is_compiled,
        cuda_graph_launches=len(info.cuda_graph_launches),
        collectives=None if unrecorded else len(trace.communication),
        median_step_communication_us=communication,
        median_step_exposed_communication_us=exposed,
        communication_us=None if total is None else total.communication_us,
        exposed_communication_us=None if total is None else total.exposed_us,
        gemm_fp32_math=None if unrecorded or not trace.has_gpu else _gemm_fp32_math(facts),
        step_cpu_iqr_us=_middle_half([t.cpu_us for t in host_times]),
        step_gpu_busy_iqr_us=_middle_half([t.gpu_busy_us for t in times])
        if trace.has_gpu
        else None,
        median_step_gpu_window_us=_median([t.gpu_window_us for t in times])
        if trace.has_gpu
        else None,
        rank=trace.rank,
    )


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _middle_half(values: list[float]) -> list[float] | None:
    """``[lower quartile, upper quartile]``, or ``None`` without values."""
    return list(Distribution.of(values).quartiles) if values else None


def _noise(first: list[float] | None, second: list[float] | None, counts: tuple[int, int]) -> str:
    """``"few steps"`` where a side has fewer than
    :data:`~profiling_utils.stats.MIN_SAMPLES_TO_COMPARE` steps, ``"overlap"`` where the two
    middle halves overlap, else ``""``: what a medians' ratio is worth."""
    if not (first and second):
        return ""
    if min(counts) < MIN_SAMPLES_TO_COMPARE:
        return "few steps"
    return "overlap" if first[0] <= second[1] and second[0] <= first[1] else ""


def _tally(spans: Iterable[Span]) -> dict[str, list[float]]:
    """Per name, ``[count, total µs]``, in the order the names first occur."""
    tally: dict[str, list[float]] = {}
    for span in spans:
        entry = tally.get(span.name)
        if entry is None:
            tally[span.name] = [1, span.dur]
        else:
            entry[0] += 1
            entry[1] += span.dur
    return tally


def _only_in(
    mine: dict[str, list[float]], theirs: dict[str, list[float]], *, by_time: bool = False
) -> list[NameCount]:
    """The names of ``mine`` that ``theirs`` lacks, most frequent first (longest in all first
    ``by_time``)."""
    found = [
        NameCount(name, int(count), total)
        for name, (count, total) in mine.items()
        if name not in theirs
    ]
    found.sort(key=(lambda n: -n.total_us) if by_time else (lambda n: -n.count))
    return found


def _host_labels(trace: Trace) -> list[Span]:
    """The labels on CPU threads, the steps' own left out."""
    return [
        span
        for span in trace.find(cat="user_annotation")
        if span.lane.kind == "cpu" and not span.name.startswith("ProfilerStep#")
    ]


def compare(
    baseline: Trace | str | os.PathLike[str], trace: Trace | str | os.PathLike[str]
) -> Comparison:
    """Compare ``trace`` with ``baseline``, for example a compiled run with the eager one.

    Args:
        baseline: The reference run: a loaded trace or a trace file.
        trace: The run to compare with it.

    Returns:
        The :class:`Comparison`: per-step CPU and GPU time side by side (and the whole
        recordings', for traces without steps), kernel and launch counts, ops and kernels
        only in one of the two, and the findings of the rules that need a baseline
        (``compile-cpu-tax``).

    Raises:
        TraceError: A file cannot be read as a trace.
    """
    with gc_paused():
        a = Facts(baseline if isinstance(baseline, Trace) else load_trace(baseline))
        b = Facts(trace if isinstance(trace, Trace) else load_trace(trace))
        return _compare(a, b)


def _host_step_times(facts: Facts) -> list[tuple[StepTime, bool]]:
    """The step times of :attr:`~profiling_utils.rules.facts.Facts.host_steps`, each with
    whether its GPU figures count (its kernels' GPU records are there)."""
    whole = {step.number for step in facts.steps_with_gpu_records}
    has_gpu = facts.trace.has_gpu
    return [(times, has_gpu and times.step in whole) for times in facts.host_step_times]


def _paired_steps(
    times_a: list[tuple[StepTime, bool]], times_b: list[tuple[StepTime, bool]]
) -> list[tuple[tuple[StepTime | None, bool], tuple[StepTime | None, bool]]]:
    """The two runs' steps side by side: by number where the two share every number of the
    run with fewer steps (two recordings of one schedule: step #2 against step #2, though one
    run recorded more), else by position (schedules that number their steps differently)."""
    numbers_a = {times.step: (times, gpu) for times, gpu in times_a}
    numbers_b = {times.step: (times, gpu) for times, gpu in times_b}
    fewer = min(numbers_a, numbers_b, key=len)
    missing: tuple[StepTime | None, bool] = (None, False)
    if fewer and all(n in numbers_a and n in numbers_b for n in fewer):
        return [
            (numbers_a.get(n, missing), numbers_b.get(n, missing))
            for n in sorted(numbers_a.keys() | numbers_b.keys())
        ]
    return [
        (
            times_a[index] if index < len(times_a) else missing,
            times_b[index] if index < len(times_b) else missing,
        )
        for index in range(max(len(times_a), len(times_b)))
    ]


def _compare(a: Facts, b: Facts) -> Comparison:
    times_a, times_b = _host_step_times(a), _host_step_times(b)
    pairs = []
    for index, ((left, left_gpu), (right, right_gpu)) in enumerate(_paired_steps(times_a, times_b)):
        pairs.append(
            StepPair(
                index=index,
                baseline_step=left.step if left else None,
                trace_step=right.step if right else None,
                baseline_cpu_us=left.cpu_us if left else None,
                trace_cpu_us=right.cpu_us if right else None,
                baseline_gpu_busy_us=left.gpu_busy_us if left and left_gpu else None,
                trace_gpu_busy_us=right.gpu_busy_us if right and right_gpu else None,
            )
        )
    ops_a, ops_b = _tally(a.trace.cpu_ops), _tally(b.trace.cpu_ops)
    labels_a, labels_b = _tally(_host_labels(a.trace)), _tally(_host_labels(b.trace))
    # An autotuner's candidates and cache flushes are no kernels of the program.
    kernels_a, kernels_b = _tally(a.program_kernels), _tally(b.program_kernels)
    names_known = _NOT_RECORDED not in (a.trace.content, b.trace.content)
    findings = order_findings(
        finding for rule in RULES if rule.needs_baseline for finding in rule.run_against(a, b)
    )
    baseline_summary, trace_summary = _summary(a), _summary(b)
    return Comparison(
        baseline=baseline_summary,
        trace=trace_summary,
        steps=pairs,
        ops_only_in_baseline=_only_in(ops_a, ops_b),
        ops_only_in_trace=_only_in(ops_b, ops_a),
        kernels_only_in_baseline=_only_in(kernels_a, kernels_b) if names_known else [],
        kernels_only_in_trace=_only_in(kernels_b, kernels_a) if names_known else [],
        labels_only_in_baseline=_only_in(labels_a, labels_b, by_time=True),
        labels_only_in_trace=_only_in(labels_b, labels_a, by_time=True),
        findings=findings,
        devices_differ=devices_differ(a.trace.devices, b.trace.devices),
        fp32_math_differs=bool(
            baseline_summary.gemm_fp32_math
            and trace_summary.gemm_fp32_math
            and baseline_summary.gemm_fp32_math.keys() != trace_summary.gemm_fp32_math.keys()
        ),
        versions_differ=_versions_differ(a.trace, b.trace, ops_a, ops_b, kernels_a, kernels_b),
    )


def _without_arguments(name: str) -> str | None:
    """A kernel's name with every argument list emptied, at any depth (``void
    f<g<float>(at::X&)::{lambda()#1}>(int)`` gives ``void f<g<float>()::{lambda()#1}>()``:
    the enclosing function of a lambda a kernel template runs has its arguments inside the
    template's); a name's ``(anonymous namespace)`` stays. ``None`` for a name without an
    argument list."""
    emptied = name
    while True:
        inner = _INNERMOST_PARENTHESES.sub(_empty_arguments, emptied)
        if inner == emptied:
            break
        emptied = inner
    emptied = emptied.replace(_EMPTIED, "()").replace(_ANONYMOUS_MARK, "(anonymous namespace)")
    return emptied if emptied != name or "()" in name else None


_INNERMOST_PARENTHESES = re.compile(r"\(([^()]*)\)")
_EMPTIED, _ANONYMOUS_MARK = "\x00", "\x01"


def _empty_arguments(match: re.Match[str]) -> str:
    return _ANONYMOUS_MARK if match[1] == "anonymous namespace" else _EMPTIED


_AUTOGRAD_NODE = re.compile(r"(\w+)Backward(\d*)")
"""An autograd node's name: ``AddmmBackward0`` (torch 1.11 and later add the version
suffix), ``AddmmBackward`` (earlier torch, and custom autograd Functions always)."""


def _versions_differ(
    a: Trace,
    b: Trace,
    ops_a: Mapping[str, Any],
    ops_b: Mapping[str, Any],
    kernels_a: Mapping[str, Any],
    kernels_b: Mapping[str, Any],
) -> bool:
    """:attr:`Comparison.versions_differ`."""
    if bool(a.renamed_categories) != bool(b.renamed_categories):
        return True

    def renamed_functions(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> set[str]:
        # A kernel function only one side has, under its name before its argument list.
        return {
            function
            for name in mine
            if name not in theirs and (function := _without_arguments(name)) is not None
        }

    # One kernel function with other argument types on each side (torch 1.8's
    # threshold_kernel_impl<float>(at::TensorIterator&...) and 1.9's (at::TensorIteratorBase&...)).
    if renamed_functions(kernels_a, kernels_b) & renamed_functions(kernels_b, kernels_a):
        return True

    def suffixed(ops: Mapping[str, Any]) -> dict[str, bool]:
        nodes = {}
        for name in ops:
            match = _AUTOGRAD_NODE.fullmatch(name)
            if match:
                nodes[match[1]] = nodes.get(match[1], False) or bool(match[2])
        return nodes

    nodes_a, nodes_b = suffixed(ops_a), suffixed(ops_b)
    return any(nodes_a[base] != nodes_b[base] for base in nodes_a.keys() & nodes_b.keys())
