"""What the rules measure on a trace, computed once per trace and shared between rules.

Each rule reads what it needs from a :class:`Facts`; every derived structure is built on first
use in a single pass, so running every rule on a trace of hundreds of thousands of events costs
a few passes in total, never one per rule.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from functools import cached_property
from operator import attrgetter
from typing import Any

import msgspec

from .. import comm, measures
from ..measures import GRAPH_LAUNCH_CALLS, Launch
from ..tables import cut, percent
from ..trace import Lane, Span, Step, Trace

__all__ = [
    "MATMUL_OPS",
    "BIAS_MATMUL_OPS",
    "PLAIN_LAUNCH_CALLS",
    "DRIVER_LAUNCH_PREFIXES",
    "DEVICE_SYNC_CALLS",
    "MEMCPY_CALL_PREFIXES",
    "DEFAULT_LAUNCH_LATENCY_US",
    "CUDAGRAPH_TREES_PREFIX",
    "Launch",
    "Copy",
    "Row",
    "Facts",
    "is_aten_kernel",
    "is_gemm_helper",
    "median",
    "us",
    "span_ref",
    "short_name",
    "step_label",
    "replayed_without_ops",
]

MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::bmm",
        "aten::addmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::_addmm_activation",
        "aten::_scaled_mm",
        "aten::addmv",
        "aten::mv",
        "aten::dot",
    }
)
"""ATen ops whose kernels are matrix multiplies (GEMM/GEMV). A kernel is a GEMM for the rules
when the op that launched it is one of these, whatever the kernel's name on a given GPU."""

BIAS_MATMUL_OPS = frozenset(
    {"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation", "aten::addmv"}
)
"""Matrix multiplies that add a third operand (``beta * C + alpha * A @ B``)."""


PLAIN_LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernel_ptsz",
        "hipLaunchKernel",
        "hipLaunchKernel_spt",
        "hipExtLaunchKernel",
    }
)
"""The runtime's plain kernel launch, CUDA (with its per-thread default-stream form) and HIP
(with its extended form, which takes events to record around the kernel)."""

DRIVER_LAUNCH_PREFIXES = ("cuLaunch", "hipModuleLaunch", "hipExtModuleLaunch", "hipHccModuleLaunch")
"""Launches through the driver-level API with launch attributes (``cuLaunchKernelEx``; on
ROCm ``hipModuleLaunchKernel``, ``hipExtModuleLaunchKernel``, which hipBLASLt and Triton use,
and ``hipHccModuleLaunchKernel``, which older rocBLAS uses)."""

DEVICE_SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "hipDeviceSynchronize"})
"""Calls that wait for every stream of the device."""

MEMCPY_CALL_PREFIXES = (
    "cudaMemcpy",
    "cuMemcpy",
    "hipMemcpy",
    "urEnqueueUSMMemcpy",
    "zeCommandListAppendMemoryCopy",
)
"""Host calls that issue a copy (CUDA's, HIP's, and Intel XPU's: Unified Runtime's, and Level
Zero's where the trace records the driver's calls, ``xpu_driver``)."""

GPU_RECORDS_MISSING_SHARE = 0.1
"""A step more than this share of whose kernel launch calls have no GPU activity in the
trace is no sample of the GPU's work (:attr:`Facts.steps`)."""


QUIET_STRETCH_MIN_US = 10_000.0
"""A stretch of a recording without steps this long, with nothing open on any CPU thread and
no GPU work, is left out of the time the recording is read over (:attr:`Facts.quiet_stretches`):
a program between requests, not one the profiler failed to see into (Python between ops
leaves gaps of µs, and a data loader's fetch is a labelled span)."""

SLOW_STEP_MIN_RATIO = 3.0
"""A step after the first is slow (``slow-step``; :attr:`Facts.slow_steps`) when it takes at
least this many times the median of the other steps..."""

SLOW_STEP_MIN_EXCESS_LAUNCHES = 3.0
"""... and longer by at least this many of the trace's launch latencies..."""

SLOW_STEP_MIN_STEPS = 3
"""... in a trace of at least this many steps (with two, the others' median is one step)."""


def _medians_without_each(values: list[float]) -> list[float]:
    """For each value, the median of the others (two or more values), from one sort: a
    trace may hold thousands of steps."""
    order = sorted(values)
    position = {}
    for index, value in enumerate(order):
        position.setdefault(value, index)  # any copy of an equal value will do
    count = len(order) - 1
    middle = count // 2

    def at(index: int, removed: int) -> float:
        return order[index if index < removed else index + 1]

    medians = []
    for value in values:
        removed = position[value]
        if count % 2:
            medians.append(at(middle, removed))
        else:
            medians.append((at(middle - 1, removed) + at(middle, removed)) / 2)
    return medians


def gpu_records_whole(trace: Trace, step: Step | tuple[float, float]) -> bool:
    """Whether at most :data:`GPU_RECORDS_MISSING_SHARE` of the kernel launch calls made in
    ``step`` (or in a ``(start, end)`` window) have no GPU activity in the trace."""
    missing, launches = trace.kernel_launches_without_gpu_record(step)
    return missing <= GPU_RECORDS_MISSING_SHARE * launches


DEFAULT_LAUNCH_LATENCY_US = 6.5
""":attr:`Facts.launch_latency_us` of a trace with no launch that found the GPU idle (a
CPU-only trace), or whose clock cannot resolve a launch: a typical H100 launch."""


def is_aten_kernel(kernel: Span) -> bool:
    """Whether a kernel is one of PyTorch's own (elementwise, reduction, copy: its name holds
    ``at::native::``, on CUDA and ROCm alike) rather than a library's (GEMM, convolution)."""
    return "at::native::" in kernel.name


GEMM_HELPER_KERNELS = (
    "splitKreduce_kernel",
    "_execute_split_k_kernel",
    "epilogue::impl::",
    "_PostGSU",
)
"""Name parts of the kernels a BLAS library runs beside a GEMM's own, which are no GEMM: the
reduction of a split-K GEMM's partial results (cuBLAS's ``splitKreduce_kernel`` and, after
its ``sm80_xmma_gemm_..._execute_kernel__5x_cublas``, ``..._execute_split_k_kernel__5x_cublas``;
Tensile's and hipBLASLt's ``Cijk_..._PostGSU``), and cuBLASLt's separate epilogue (the bias
added by a kernel of its own)."""


def is_gemm_helper(kernel: Span) -> bool:
    """Whether a kernel launched by a matrix-multiply op is one of cuBLAS's helpers around the
    GEMM (:data:`GEMM_HELPER_KERNELS`) rather than a GEMM."""
    return any(part in kernel.name for part in GEMM_HELPER_KERNELS)


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (which must not be empty)."""
    return statistics.median(values)


def us(value: float) -> float:
    """A time in µs, rounded to the nanosecond the trace records."""
    return round(value, 3)


def gb_s(value: float) -> float:
    """A rate in GB/s, to a tenth, or to two significant digits below 1 (a 4-byte memset's
    0.0052 GB/s, which a tenth would write as 0)."""
    return round(value, 1) if value >= 1 or value == 0 else float(f"{value:.2g}")


def span_ref(span: Span) -> dict[str, Any]:
    """A span as evidence: name, start and duration (µs)."""
    return {"name": span.name, "start_us": us(span.start), "dur_us": us(span.dur)}


def short_name(name: str, width: int = 72) -> str:
    """A name clipped for a message (kernel names can run to hundreds of characters); the
    evidence keeps the full name."""
    return cut(name, width)


def step_label(number: int) -> str:
    """``ProfilerStep#N``."""
    return f"ProfilerStep#{number}"


class Copy(msgspec.Struct, frozen=True, gc=False):
    """A memcpy or memset on the GPU, as measured, and the launch that issued it."""

    measured: measures.MemoryCopy
    """Kind, bytes and bandwidth (:func:`profiling_utils.measures.memory_copies`)."""
    launch: Launch
    """The call that issued it (``cudaMemcpyAsync``, ``cudaMemsetAsync``, ``cudaGraphLaunch``)."""

    @property
    def work(self) -> Span:
        """The ``gpu_memcpy`` or ``gpu_memset`` activity."""
        return self.measured.span

    @property
    def kind(self) -> str:
        """``DtoD``, ``HtoD``, ``DtoH``... for copies, ``memset`` for memsets."""
        return self.measured.kind

    @property
    def bytes(self) -> int | None:
        """Bytes copied or set, as recorded."""
        return self.measured.bytes

    @property
    def bandwidth_gb_s(self) -> float | None:
        """Bytes copied (or set) per second, GB/s (10^9 bytes per second), each byte once."""
        return self.measured.bandwidth_gb_s


class Row(msgspec.Struct, frozen=True, gc=False):
    """One row of the profiler table, rebuilt from the trace: every span of one name."""

    calls: int
    """Spans with this name (a span that is the only child of one of its name not counted,
    as ``key_averages()`` folds it into its parent)."""
    total_us: float
    """Their summed durations, a span nested in one of the same name counted once: the time
    the op's calls held the thread. The profiler table's "CPU total" (``key_averages()``,
    :attr:`profiling_utils.measures.OpStats.total_us`, ``summary``'s top CPU operators)
    counts such a span again, inside its outer call's total, and is larger for an op that
    calls itself (``aten::linear`` around another ``aten::linear``)."""
    self_us: float
    """Their summed durations minus their direct children's ("Self CPU")."""
    is_op: bool
    """Whether the spans are ``cpu_op`` (else ``user_annotation``)."""


_COMPILE_MARKERS = (
    "Torch-Compiled Region",
    "## Call CompiledFxGraph",
    "TorchDynamo Cache Lookup",
    "CompiledFunction",
)
_ROW_CATEGORIES = ("cpu_op", "user_annotation")
_NO_COMPILE = measures.CompileInfo((), (), (), (), (), (), (), ())
_CALL_ID = attrgetter("call.id")
_END = attrgetter("end")
_START = attrgetter("start")


COMPILING_MIN_SHARE = 0.25
"""torch.compile compiling for at least this share of a step's CPU time (of the recording, in
a trace without steps): ``compiling-recorded`` fires, and ``overhead-bound`` says how long it
compiled (``cold-start`` and ``slow-step`` say so when it holds a quarter of the step's extra
time)."""

# torch.compile's own time is labelled: "dynamo", "aot_trace_joint_graph" and their
# "... (dynamo_timed)" twins (and Inductor's steps, "mm_template_autotuning (dynamo_timed)"...).
_COMPILE_LABELS = ("aot_trace_joint_graph", "dynamo")
_COMPILE_LABEL_SUFFIX = " (dynamo_timed)"

CUDAGRAPH_TREES_PREFIX = "CUDAGraphNode."
"""The prefix of the labels of torch.compile's CUDA graph trees (``mode="reduce-overhead"``):
``CUDAGraphNode.record`` around the capture of a compiled graph (and its ``(dynamo_timed)``
twin), ``CUDAGraphNode.record_data: ...``. They are timed as compile steps are, but they
capture the compiled code's work into a CUDA graph, which its later calls replay: a capture,
not a compilation."""


def is_compile_label(name: str) -> bool:
    """Whether a span's name is one of torch.compile's labelled compile steps: ``dynamo``,
    ``aot_trace_joint_graph``, or a name ending `` (dynamo_timed)`` (``compile_fx_inner
    (dynamo_timed)``, ``CachingAutotuner.benchmark_all_configs (dynamo_timed)``...), but not
    the CUDA graph trees' capture (:data:`CUDAGRAPH_TREES_PREFIX`)."""
    if name in _COMPILE_LABELS:
        return True
    return name.endswith(_COMPILE_LABEL_SUFFIX) and not name.startswith(CUDAGRAPH_TREES_PREFIX)


class Facts:
    """A trace and the measurements the rules share, each computed on first use.

    Args:
        trace: The loaded trace.
    """

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._lane_starts: dict[Any, list[float]] = {}
        self._compiling: dict[int, bool] = {}
        self._pieces_by_pid: dict[Any, tuple[list[float], list[float]]] = {}

    @cached_property
    def _compile_labels(self) -> bool:
        return any(map(is_compile_label, self.trace.by_name))

    @cached_property
    def _untimed_twins(self) -> frozenset[str]:
        """The names of the spans that wrap a compile label of the same name: torch.compile
        times some of its steps twice, ``X`` around ``X (dynamo_timed)``
        (``CachingAutotuner.coordinate_descent_tuning``, which tunes a kernel at the compiled
        code's first call, outside any other compile label)."""
        names = self.trace.by_name
        suffix = len(_COMPILE_LABEL_SUFFIX)
        return frozenset(
            base
            for name in names
            if name.endswith(_COMPILE_LABEL_SUFFIX) and is_compile_label(name)
            if (base := name[:-suffix]) in names
        )

    def _is_compile_step(self, name: str) -> bool:
        return is_compile_label(name) or name in self._untimed_twins

    def while_compiling(self, span: Span) -> bool:
        """Whether ``span`` ran inside torch.compile's compilation: a labelled compile step
        (``dynamo``, ``aot_trace_joint_graph``, or a ``... (dynamo_timed)`` label, or the span
        of the same name around one) encloses it. AOTAutograd runs autograd nodes there when
        it traces the backward graph, and Inductor's autotuning launches candidate kernels
        and cache flushes: neither is the compiled program's own work."""
        if not self._compile_labels:
            return False
        known = self._compiling
        spans = self.trace.spans
        walked = []
        found = False
        parent = span.parent
        while parent is not None:
            seen = known.get(parent)
            if seen is not None:
                found = seen
                break
            walked.append(parent)
            enclosing = spans[parent]
            if self._is_compile_step(enclosing.name):
                found = True
                break
            parent = enclosing.parent
        for ancestor in walked:  # each is, or lies inside, a compile label exactly if found
            known[ancestor] = found
        return found

    def is_compile_work(self, span: Span) -> bool:
        """Whether ``span`` is torch.compile's: one of its compile labels (torch 2.11 files
        them as ops), the span of the same name around one, or a span inside either
        (:meth:`while_compiling`)."""
        if not self._compile_labels:
            return False
        return self._is_compile_step(span.name) or self.while_compiling(span)

    @cached_property
    def compile_labels(self) -> list[Span]:
        """torch.compile's labelled compile steps (those :meth:`while_compiling` looks for) on
        every CPU thread, in start order: Dynamo's frame compiles, and the backward graph's
        and the autotuner's compiles, which run lazily at the compiled code's first calls."""
        if not self._compile_labels:
            return []
        by_name = self.trace.by_name
        labels = [
            span
            for name in filter(is_compile_label, by_name)
            for span in by_name[name]
            if span.lane.kind == "cpu"
        ]
        labels.sort(key=_START)
        return labels

    def _compiling_pieces(self, pid: int | str | None) -> tuple[list[float], list[float]]:
        """:attr:`compile_labels` (of process ``pid``, or of every process for ``None``)
        merged into disjoint stretches: their starts, their ends."""
        found = self._pieces_by_pid.get(pid)
        if found is None:
            labels = self.compile_labels
            if pid is not None:
                labels = [label for label in labels if label.lane.pid == pid]
            pieces = measures.pieces_within(labels, -math.inf, math.inf)
            found = self._pieces_by_pid[pid] = ([lo for lo, _ in pieces], [hi for _, hi in pieces])
        return found

    def compiling_us(self, start: float, end: float, pid: int | str | None = None) -> float:
        """The time inside ``[start, end]`` in which torch.compile was compiling on at least
        one CPU thread (the union of :attr:`compile_labels` there), µs; of process ``pid``
        only where given (a step's: a file may merge several processes)."""
        if not self.compile_labels:
            return 0.0
        starts, ends = self._compiling_pieces(pid)
        total = 0.0
        for index in range(bisect_right(ends, start), len(starts)):  # the first ending after
            lo = starts[index]
            if lo >= end:
                break
            total += min(ends[index], end) - max(lo, start)
        return total

    def compiling_in_step(self, step: Step) -> float:
        """:meth:`compiling_us` inside ``step``'s CPU window, on its process's threads."""
        return self.compiling_us(step.start, step.end, step.span.lane.pid)

    @cached_property
    def steps(self) -> list[Step]:
        """The steps the rules and comparisons over steps take as samples of the program, by
        number. Left out: a step that ends after the profiler's own span over its recording
        window (category ``Trace``) ended, as no complete step does (its end was not
        recorded: the HTA Triton example's step runs 13 s past every event); a step with
        no span inside it on its thread and no GPU work launched from it, while others have
        some (as the step that opens when the profiler stops often is); and a step more than
        :data:`GPU_RECORDS_MISSING_SHARE` of whose kernel launches have no GPU record, while
        others have theirs (a trace cut short, or records the profiler dropped:
        :meth:`~profiling_utils.trace.Trace.kernel_launches_without_gpu_record`)."""
        host = self.host_steps
        whole = [step for step in host if gpu_records_whole(self.trace, step)]
        return whole or host

    @cached_property
    def steps_with_gpu_records(self) -> list[Step]:
        """Of :attr:`host_steps`, those whose kernels' GPU records are whole
        (:func:`gpu_records_whole`): :attr:`steps` keeps every step where none is, this
        does not. What a comparison of GPU time reads."""
        return [step for step in self.host_steps if gpu_records_whole(self.trace, step)]

    @cached_property
    def host_steps(self) -> list[Step]:
        """The steps whose host windows are samples of the program: :attr:`steps`, and those
        it leaves out only because their kernels' GPU records are missing (the host recorded
        their windows in full). What a comparison of CPU time reads."""
        trace = self.trace
        covered = trace.children_cover_us
        ended = [step for step in trace.steps if trace.end_recorded(step)]
        recorded = [step for step in ended if step.gpu_work or covered[step.span.id]]
        return recorded or ended

    @cached_property
    def host_window(self) -> tuple[float, float] | None:
        """From the first span on a CPU thread to the last one's end, µs, at most to the end of
        the profiler's recording window (a step whose end was not recorded runs far past
        it); ``None`` in a trace without CPU threads. The stretch a trace without steps is
        read over as a whole."""
        trace = self.trace
        on_host = [
            spans for lane in trace.lanes if lane.kind == "cpu" if (spans := trace.lane_spans(lane))
        ]
        if not on_host:
            return None
        start = min(spans[0].start for spans in on_host)
        end = max(max(map(_END, spans)) for spans in on_host)
        recording_end = trace.recording_end_us
        if recording_end is not None and start < recording_end < end:
            end = recording_end
        return start, end

    @cached_property
    def quiet_stretches(self) -> list[tuple[float, float]]:
        """Inside :attr:`host_window`, the stretches of at least :data:`QUIET_STRETCH_MIN_US`
        in which no CPU thread has any span open and no GPU work runs, ``(start, end)`` in
        µs: a server waiting for requests, a script sleeping. A trace without steps is read
        over the rest (:attr:`host_active_us`)."""
        window = self.host_window
        if window is None:
            return []
        trace = self.trace
        pieces = [
            (span.start, span.start + span.dur)
            for lane in trace.lanes
            if lane.kind == "cpu"
            for span in trace.lane_spans(lane)
        ]
        pieces += [(work.start, work.start + work.dur) for work in trace.gpu_work]
        pieces.sort()
        quiet = []
        reached = window[0]
        for start, end in pieces:
            if start >= window[1]:
                break
            if start - reached >= QUIET_STRETCH_MIN_US:
                quiet.append((reached, start))
            reached = max(reached, end)
        return quiet

    @property
    def host_active_us(self) -> float:
        """:attr:`host_window`'s length less its :attr:`quiet_stretches`, µs (0 without)."""
        window = self.host_window
        if window is None:
            return 0.0
        return window[1] - window[0] - sum(end - start for start, end in self.quiet_stretches)

    def emptiest_label(
        self, start: float, end: float, frames: bool = False
    ) -> tuple[str | None, float]:
        """The ``record_function`` label (with ``frames``, or Python frame) inside ``[start,
        end]``, not a step, whose occurrences there hold the most time that no op or call
        nested in them covers (their self time), and that time, µs; ``(None, 0.0)``
        without."""
        categories = ("user_annotation", "python_function") if frames else ("user_annotation",)
        spans = self.trace.spans
        inside = spans[bisect_left(spans, start, key=_START) : bisect_left(spans, end, key=_START)]
        unseen: Counter[str] = Counter()
        for span in inside:
            if span.cat not in categories or span.end > end:
                continue
            if span.name.startswith("ProfilerStep#"):
                continue
            unseen[span.name] += self.self_us(span)
        if not unseen:
            return None, 0.0
        name, total = unseen.most_common(1)[0]
        return (name, total) if total > 0 else (None, 0.0)

    def recording_gpu_busy(self, compute_only: bool = False) -> tuple[float, int] | None:
        """Over a whole recording: the busy time of the busiest GPU from
        :attr:`host_window`'s start on (past its end too: a GPU still busy after the host's
        last event sets the pace), µs, and how many GPUs ran work; with ``compute_only``,
        communication kernels left out. ``None`` without a host window or GPU work."""
        window = self.host_window
        if window is None:
            return None
        left_out = self.communication_ids if compute_only else frozenset()
        by_device: dict[Any, list[Span]] = {}
        for work in self.trace.gpu_work:
            if work.id not in left_out:
                by_device.setdefault(work.lane.device, []).append(work)
        if not by_device:
            return None
        starts_at = window[0]
        busy = max(measures.union_within(work, starts_at, math.inf) for work in by_device.values())
        return busy, len(by_device)

    @cached_property
    def slow_step_widths(self) -> dict[int, tuple[float, float]]:
        """The slow steps of :attr:`steps` (see :data:`SLOW_STEP_MIN_RATIO`; the first step is
        ``cold-start``'s business), by number: each one's CPU time and the median of the
        other steps', µs."""
        steps = self.steps
        if len(steps) < SLOW_STEP_MIN_STEPS:
            return {}
        widths = [step.span.dur for step in steps]
        others = _medians_without_each(widths)
        min_excess = SLOW_STEP_MIN_EXCESS_LAUNCHES * self.launch_latency_us
        slow = {}
        for step, width, typical in zip(steps[1:], widths[1:], others[1:], strict=True):
            if (
                typical > 0
                and width >= SLOW_STEP_MIN_RATIO * typical
                and width - typical >= min_excess
            ):
                slow[step.number] = (width, typical)
        return slow

    @property
    def slow_steps(self) -> frozenset[int]:
        """The numbers of :attr:`slow_step_widths`: steps no steady-state figure should read."""
        return frozenset(self.slow_step_widths)

    @cached_property
    def step_times(self) -> list[measures.StepTime]:
        """:func:`profiling_utils.measures.step_times` of :attr:`steps`."""
        kept = {step.number for step in self.steps}
        return [times for times in self.host_step_times if times.step in kept]

    @cached_property
    def host_step_times(self) -> list[measures.StepTime]:
        """:func:`profiling_utils.measures.step_times` of :attr:`host_steps`."""
        kept = {step.number for step in self.host_steps}
        return [times for times in measures.step_times(self.trace) if times.step in kept]

    @cached_property
    def _launch_index(
        self,
    ) -> tuple[list[Launch], list[tuple[Launch, Span]], dict[int, list[Launch]]]:
        """:func:`profiling_utils.measures.launches`, with its kernel launches and by op."""
        every = measures.launches(self.trace)
        with_kernel: list[tuple[Launch, Span]] = []
        by_op: dict[int, list[Launch]] = {}
        for launch in every:
            for kernel in launch.work:  # Launch.kernel, inline: the first kernel
                if kernel.cat == "kernel":
                    with_kernel.append((launch, kernel))
                    break
            op = launch.op
            if op is not None:
                group = by_op.get(op.id)
                if group is None:
                    by_op[op.id] = [launch]
                else:
                    group.append(launch)
        return every, with_kernel, by_op

    @property
    def launches(self) -> list[Launch]:
        """Every call that started GPU work, with its op and planning calls, in start order."""
        return self._launch_index[0]

    @property
    def kernel_launches(self) -> list[tuple[Launch, Span]]:
        """Launches that started a kernel, each with its (first) kernel, in start order."""
        return self._launch_index[1]

    @property
    def launches_by_op(self) -> dict[int, list[Launch]]:
        """The launches made from each op, by op id, in start order."""
        return self._launch_index[2]

    @cached_property
    def program_kernel_launches(self) -> list[tuple[Launch, Span]]:
        """:attr:`kernel_launches` less those torch.compile made while compiling
        (:meth:`while_compiling`: its autotuner's candidate kernels, the cache flushes between
        them), which are the compiler's, not the program's."""
        if not self.compile_labels:
            return self.kernel_launches
        compiling = self.while_compiling
        return [pair for pair in self.kernel_launches if not compiling(pair[0].call)]

    @cached_property
    def compiler_kernels(self) -> list[Span]:
        """The kernels torch.compile launched while compiling (:meth:`while_compiling` holds
        for their launch call): its autotuning's candidate kernels and the cache flushes
        between them, in start order; empty in a trace without its compile labels."""
        if not self.compile_labels:
            return []
        launch_of = self.trace.launch_of_id
        return [
            kernel
            for kernel in self.trace.kernels
            if (call := launch_of(kernel.id)) is not None and self.while_compiling(call)
        ]

    @cached_property
    def program_kernels(self) -> list[Span]:
        """The trace's kernels less :attr:`compiler_kernels`, in start order."""
        if not self.compiler_kernels:
            return self.trace.kernels
        left_out = {kernel.id for kernel in self.compiler_kernels}
        return [kernel for kernel in self.trace.kernels if kernel.id not in left_out]

    @cached_property
    def program_copies(self) -> list[Copy]:
        """:attr:`copies` less those torch.compile made while compiling."""
        if not self.compile_labels:
            return self.copies
        return [copy for copy in self.copies if not self.while_compiling(copy.launch.call)]

    @cached_property
    def copies(self) -> list[Copy]:
        """Memcpys and memsets whose launch is in the trace, in start order."""
        launches = self.launches  # in the order of their calls' ids
        call_ids = list(map(_CALL_ID, launches))
        found = []
        for measured in measures.memory_copies(self.trace):
            call = self.trace.launch_of(measured.span)
            if call is not None:
                index = bisect_left(call_ids, call.id)
                if index < len(call_ids) and call_ids[index] == call.id:
                    found.append(Copy(measured, launches[index]))
        return found

    @cached_property
    def kernels_by_name(self) -> dict[str, list[Span]]:
        """Kernels grouped by name, each list in start order."""
        by_name: dict[str, list[Span]] = {}
        for kernel in self.trace.kernels:
            by_name.setdefault(kernel.name, []).append(kernel)
        return by_name

    @cached_property
    def gemm_launches(self) -> list[tuple[Launch, Span]]:
        """Kernel launches from a matrix-multiply op (:data:`MATMUL_OPS`), with the kernel, of
        :attr:`program_kernel_launches` (the compiler's autotuning left out), leaving out
        PyTorch's own kernels (:func:`is_aten_kernel`: on ROCm, addmm copies the
        bias into its output with an elementwise copy kernel, not a memcpy) and cuBLAS's
        helpers (:func:`is_gemm_helper`)."""
        return [
            (launch, kernel)
            for launch, kernel in self.program_kernel_launches
            if launch.op is not None
            and launch.op.name in MATMUL_OPS
            and not is_aten_kernel(kernel)
            and not is_gemm_helper(kernel)
        ]

    def self_us(self, span: Span) -> float:
        """``span``'s "Self" time, µs: :meth:`profiling_utils.trace.Trace.self_us`."""
        return self.trace.self_us(span)

    def named(self, name: str) -> list[Span]:
        """Every span with exactly this name, in start order."""
        return list(self.trace.by_name.get(name, ()))

    def has_prefix(self, prefix: str) -> bool:
        """Whether any span's name starts with ``prefix``."""
        return any(name.startswith(prefix) for name in self.trace.by_name)

    @property
    def rows(self) -> dict[str, Row]:
        """The profiler table's rows rebuilt from the trace: per ``cpu_op`` and
        ``user_annotation`` name (``ProfilerStep#N`` left out), calls, total and self time.
        As in ``key_averages()``, a call whose only child is a call of its name counts once."""
        return self._rows_and_nesting[0]

    @property
    def nested_in_own_name(self) -> frozenset[int]:
        """Ids of the row spans nested in a span of their own name (an op calling itself),
        found while summing :attr:`rows`."""
        return self._rows_and_nesting[1]

    @property
    def names_nested_in_themselves(self) -> frozenset[str]:
        """The names of the spans of :attr:`nested_in_own_name`."""
        return self._rows_and_nesting[2]

    @cached_property
    def _rows_and_nesting(self) -> tuple[dict[str, Row], frozenset[int], frozenset[str]]:
        trace = self.trace
        spans = trace.spans
        # The time each span's children cover (their union, from the model): overlapping
        # children must not be counted twice, or self time goes negative.
        covered = trace.children_cover_us
        # Per name, [calls, total, self]: the names in the order they first occur, each with
        # the category of its first span, which stands for the name's. Spans of another
        # category under a row's name (the GPU lane's copy of a record_function label, the
        # kernel of a compiled region) are not the row's.
        sums: dict[str, dict[str, list[Any]]] = {category: {} for category in _ROW_CATEGORIES}
        order: dict[str, list[Any]] = {}
        for name, same in trace.by_name.items():
            category = same[0].cat
            if category in sums and not name.startswith("ProfilerStep#"):
                order[name] = sums[category][name] = [0, 0.0, 0.0, category]
        nested_in_own_name: list[Span] = []
        # One pass per category, each in span order (by name, the spans would be visited in
        # scattered memory), over the spans of that category only.
        for category, rows in sums.items():
            for span in trace.find(cat=category) if category != "cpu_op" else trace.cpu_ops:
                name = span.name
                row = rows.get(name)
                if row is None:
                    continue
                dur = span.dur
                parent = span.parent
                if parent is None or spans[parent].name != name:
                    row[1] += dur
                else:  # nested in itself: its total counted once
                    nested_in_own_name.append(span)
                row[2] += dur - covered[span.id]
                row[0] += 1
        for folded in measures.folded_calls(trace, nested_in_own_name):
            order[spans[folded].name][0] -= 1
        rows = {
            name: Row(row[0], row[1], row[2], row[3] == "cpu_op") for name, row in order.items()
        }
        return (
            rows,
            frozenset(span.id for span in nested_in_own_name),
            frozenset(span.name for span in nested_in_own_name),
        )

    @cached_property
    def compile_info(self) -> measures.CompileInfo:
        """:func:`profiling_utils.measures.compiled_regions` (skipped, empty, for a trace
        without any compiled-code marker or CUDA graph launch)."""
        if (
            not any(self.has_prefix(marker) for marker in _COMPILE_MARKERS)
            and not self.graph_launches
        ):
            return _NO_COMPILE
        return measures.compiled_regions(self.trace)

    @cached_property
    def graph_launches(self) -> list[Span]:
        """:func:`profiling_utils.measures.graph_launches`."""
        return measures.graph_launches(self.trace)

    @cached_property
    def launch_latency_us(self) -> float:
        """The trace's typical launch latency, µs: the median delay from a launch call's start
        to its GPU work's start, over the launches that found their GPU idle (nothing queued
        ahead of them): the launch call itself plus the GPU's start-up. It differs by GPU and
        driver (about 10 µs on the H100 recordings, 13 µs on an MI250 trace); thresholds that
        compare against launch cost use it, so that they hold on any GPU.
        :data:`DEFAULT_LAUNCH_LATENCY_US` when no launch found its GPU idle, or when the
        median delay is 0 µs (a clock too coarse to see a launch: times rounded to the
        millisecond), since a threshold of some multiple of 0 would let anything through."""
        trace = self.trace
        busy_until: dict[Any, float] = {}
        delays = []
        launch_of = trace.launch_of_id
        never = -math.inf
        for work in trace.gpu_work:
            device = work.lane.device
            until = busy_until.get(device, never)
            start = work.start
            launch = launch_of(work.id)
            if launch is not None and launch.start >= until:
                delays.append(start - launch.start)
            end = start + work.dur
            if end > until:
                busy_until[device] = end
        typical = median(delays) if delays else 0.0
        return typical if typical > 0 else DEFAULT_LAUNCH_LATENCY_US

    @cached_property
    def collectives(self) -> list[comm.Collective]:
        """:func:`profiling_utils.comm.collectives` (empty without communication kernels)."""
        return comm.collectives(self.trace)

    @cached_property
    def comm_overlap(self) -> comm.CommOverlap:
        """:func:`profiling_utils.comm.comm_overlap`."""
        return comm.comm_overlap(self.trace)

    @cached_property
    def compute_gpu_us(self) -> float:
        """The summed duration of every GPU activity but the communication kernels, µs (the
        time a GEMM's or a backend's share is of: a collective's kernel spins while it
        waits)."""
        trace = self.trace
        return sum(work.dur for work in trace.gpu_work) - sum(
            kernel.dur for kernel in trace.communication
        )

    @cached_property
    def replay_only_kernels(self) -> list[Span]:
        """Kernels that graph replays run (:attr:`graph_launches`) under a name no kernel an
        op launched has, communication left out: a serving engine's decode GEMMs and
        attention, captured before the recording, whose ops the trace does not hold."""
        by_ops = {
            kernel.name
            for launch, kernel in self.kernel_launches
            if launch.op is not None and launch.call.name not in GRAPH_LAUNCH_CALLS
        }
        communication = self.communication_ids
        return [
            work
            for launch in self.graph_launches
            for work in self.trace.gpu_work_of(launch) or ()
            if work.cat == "kernel" and work.name not in by_ops and work.id not in communication
        ]

    @cached_property
    def communication_ids(self) -> frozenset[int]:
        """Ids of the communication kernels (:attr:`Trace.communication`)."""
        return frozenset(kernel.id for kernel in self.trace.communication)

    @cached_property
    def compute_kernels_by_name(self) -> dict[str, list[Span]]:
        """:attr:`kernels_by_name` without the communication kernels."""
        ids = self.communication_ids
        if not ids:
            return self.kernels_by_name
        return {
            name: kernels
            for name, kernels in self.kernels_by_name.items()
            if kernels[0].id not in ids
        }

    @cached_property
    def compute_busy_us(self) -> dict[int, float]:
        """Per step number, the time at least one GPU activity other than communication ran
        (kernels, copies and memsets launched in the step), µs; the same as
        :attr:`step_times`' busy time for a trace without communication."""
        ids = self.communication_ids
        if not ids:
            return {t.step: t.gpu_busy_us for t in self.step_times}
        return {
            step.number: measures.union_us([w for w in step.gpu_work if w.id not in ids])
            for step in self.steps
        }

    @cached_property
    def busiest_gpu_busy_us(self) -> dict[int, float]:
        """Per step number, the busy time of the GPU its launched work kept busiest, µs: a
        GPU that sets the pace is one GPU, and the union over several (model parallel, one
        process driving two GPUs) would read two half-idle GPUs as one busy one. With the
        work on one GPU, :attr:`step_times`' busy time."""
        return self._busiest(frozenset())

    @cached_property
    def busiest_gpu_compute_busy_us(self) -> dict[int, float]:
        """:attr:`busiest_gpu_busy_us` without communication kernels; with the work on one
        GPU, :attr:`compute_busy_us`."""
        return self._busiest(self.communication_ids)

    def _busiest(self, left_out: frozenset[int]) -> dict[int, float]:
        one = self.compute_busy_us if left_out else {t.step: t.gpu_busy_us for t in self.step_times}
        devices = measures.gpu_devices(self.trace)
        if len(devices) < 2:  # one GPU: its busy time (no pass over the work)
            return one
        busiest = {}
        for step in self.steps:
            work = [w for w in step.gpu_work if w.id not in left_out]
            busiest[step.number] = max(measures.busy_by_device(work, devices).values())
        return busiest

    @cached_property
    def _step_of_gpu_work(self) -> dict[int, int]:
        """Step number by span id, for the GPU work launched in a step (rules ask for most)."""
        return self.trace.gpu_work_steps

    @cached_property
    def step_of_gpu_work(self) -> Callable[[int], int | None]:
        """The step number of a GPU activity, by its span id (``None`` outside every step):
        :meth:`step_number_of` for GPU work, one dict lookup in loops."""
        trace = self.trace
        if any(span.is_gpu_work for span in trace.overhead):  # GPU work off a GPU lane (pid -1)
            spans, step_number_of = trace.spans, self.step_number_of
            return lambda span_id: step_number_of(spans[span_id])
        return self._step_of_gpu_work.get

    def step_number_of(self, span: Span) -> int | None:
        """The number of the step ``span`` belongs to (see :meth:`Trace.step_of`)."""
        if span.lane.kind == "gpu":  # by its launch: the step that lists it as its GPU work
            return self._step_of_gpu_work.get(span.id)
        step = self.trace.step_of(span)
        return None if step is None else step.number

    def in_steps(self, spans: list[Span]) -> list[Span]:
        """Those of ``spans`` (on CPU threads, in start order) that belong to one of
        :attr:`steps` (:meth:`Trace.step_of`), in order: bisected by the steps' windows, not
        looked up one by one."""
        trace = self.trace
        starts = list(map(_START, spans))
        kept = []
        for step in self.steps:
            kept += spans[bisect_left(starts, step.start) : bisect_left(starts, step.end)]
        pid = trace.steps[0].span.pid if trace.steps else None
        if any(lane.pid != pid for lane in trace.other_step_lanes):
            kept = [span for span in kept if span.pid == pid]  # the steps' process only
        return kept

    def step_numbers(self, spans: Iterable[Span]) -> list[int]:
        """The distinct steps ``spans`` belong to, in order."""
        return sorted({n for n in map(self.step_number_of, spans) if n is not None})

    def innermost_cpu_op_at(self, time: float, lane: Lane) -> Span | None:
        """The deepest ``cpu_op`` on ``lane`` that is running at ``time``."""
        spans = self.trace.lane_spans(lane)
        starts = self._lane_starts.get(lane)
        if starts is None:
            starts = self._lane_starts[lane] = [span.start for span in spans]
        index = bisect_right(starts, time) - 1
        if index < 0:
            return None
        # The deepest span running at `time` encloses the last span started before it (or is
        # that span), so it is found among that span's ancestors.
        candidate: Span | None = spans[index]
        while candidate is not None and not (candidate.end > time and candidate.cat == "cpu_op"):
            parent = candidate.parent
            candidate = None if parent is None else self.trace.spans[parent]
        return candidate


def replayed_without_ops(
    facts: Facts, read_us: float, what: str, done: str
) -> tuple[str, int, float] | None:
    """Where graph replays run kernels no op of the trace launches
    (:attr:`~profiling_utils.rules.facts.Facts.replay_only_kernels`) for longer than the
    ``read_us`` a rule read from ops, the sentence that says ``what`` among them is not
    ``done`` (``"a GEMM"``, ``"ranked"``), with their count and time; else ``None``."""
    kernels = facts.replay_only_kernels
    replayed_us = sum(kernel.dur for kernel in kernels)
    gpu_total = facts.compute_gpu_us
    if replayed_us <= read_us or gpu_total <= 0:
        return None
    besides = " besides communication" if facts.trace.communication else ""
    words = (
        f" Graph replays also run {len(kernels):,} kernel(s) that no op of the trace "
        f"launches, {percent(replayed_us / gpu_total)} of GPU time{besides}: {what} among "
        f"them is not {done} here, as the trace does not say which op it serves."
    )
    return words, len(kernels), us(replayed_us)
