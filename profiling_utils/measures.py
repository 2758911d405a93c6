"""Measurements: plain functions over a :class:`~profiling_utils.trace.Trace`.

Each function returns frozen structs (:class:`msgspec.Struct`: a rule makes them by the
thousand, several times faster than frozen dataclasses) whose field names carry their units
(``_us`` for microseconds, ``_bytes``, ``_gb_s`` for GB/s, ``_fraction`` for 0..1) and a
``to_dict()`` that gives plain JSON values (spans become small dicts: id, name, cat, lane,
start_us, dur_us).

- :func:`gpu_busy_us`: how long the GPU (or one GPU lane) ran kernels, copies or memsets.
- :func:`lane_busy_us`: the busy time of any lane (the one definition every report uses).
- :func:`step_times`: per step, CPU duration, GPU busy time and GPU idle fraction.
- :func:`launch_delays`: per GPU activity, launch call start to GPU start.
- :func:`lane_offset`: per step, how far the GPU lane runs behind the CPU lane.
- :func:`dead_windows`: per step, a ``record_function`` label's start to its first ``aten`` op.
- :func:`gpu_gaps`: idle gaps between consecutive GPU activities inside a step.
- :func:`kernel_stats`: per kernel name, count, min, median, mean, max, spread, outlier steps.
- :func:`kernel_launches`: per kernel, its launch API, planning calls, op and footprint.
- :func:`memory_copies`: memcpy and memset activities with bytes and achieved bandwidth.
- :func:`compiled_regions`: ``torch.compile`` regions and CUDA graph launches.
- :func:`graph_launches`: the calls that replay a captured graph (CUDA or HIP).
- :func:`thread_activity`: what a CPU thread ran in a time window: its operators, the time no
  operator ran, the labels open.
"""

from __future__ import annotations

import math
import re
import statistics
import weakref
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import accumulate, compress, count, islice, pairwise
from operator import add, attrgetter, gt, sub
from typing import Any

import msgspec

from .loading import MemoryEvent
from .trace import (
    GPU_WORK_CATEGORIES,
    HOST_COLLECTIVE_PREFIX,
    LABEL_CATEGORIES,
    LAUNCH_CATEGORIES,
    DeviceInfo,
    Lane,
    Span,
    Step,
    Trace,
)

__all__ = [
    "GRAPH_LAUNCH_CALLS",
    "PLANNING_CALL_PREFIXES",
    "NO_OP",
    "NO_LAUNCH",
    "IN_GRAPH_REPLAYS",
    "StepTime",
    "LaunchDelay",
    "LaneOffset",
    "DeadWindow",
    "GpuGap",
    "QueuedIdle",
    "KernelStats",
    "KernelFootprint",
    "Launch",
    "KernelLaunch",
    "MemoryCopy",
    "CompileInfo",
    "OpStats",
    "ThreadActivity",
    "gpu_busy_us",
    "gpu_busy_in_windows",
    "union_us",
    "pieces_within",
    "union_within",
    "gpu_devices",
    "busy_by_device",
    "lane_busy_us",
    "host_work_us",
    "host_work_in_windows",
    "step_times",
    "launch_delays",
    "gpu_work_before_launch",
    "lane_offset",
    "dead_windows",
    "gpu_gaps",
    "gpu_gaps_between_steps",
    "queued_idle",
    "kernel_stats",
    "launches",
    "kernel_launches",
    "kernel_footprint",
    "resident_blocks_per_sm",
    "memory_copies",
    "MemoryPeak",
    "memory_peaks",
    "compiled_regions",
    "graph_launches",
    "compiled_graph_hash",
    "op_stats",
    "host_speed_ratio",
    "HOST_SPEED_ALIKE",
    "speeds_alike",
    "thread_activity",
    "folded_calls",
    "span_dict",
]

NO_OP = "(no op)"
"""Where GPU work came from when its launch call ran outside any ``cpu_op`` (a trace recorded
with ``ProfilerActivity.CUDA`` alone, or a launch from a library's own thread)."""

GRAPH_LAUNCH_CALLS = frozenset(
    {
        "cudaGraphLaunch",
        "cudaGraphLaunch_ptsz",
        "cuGraphLaunch",
        "cuGraphLaunch_ptsz",
        "hipGraphLaunch",
        "hipGraphLaunch_spt",
    }
)
"""Calls that replay a captured graph of GPU work: CUDA's runtime and driver calls (with
their ``_ptsz`` forms, which code built for a per-thread default stream calls) and HIP's."""

NO_LAUNCH = "(launch not in the trace)"
"""Where GPU work came from when the call that launched it is not in the trace."""

IN_GRAPH_REPLAYS = "(replayed by a graph launch)"
"""Where GPU work came from when a graph launch (:data:`GRAPH_LAUNCH_CALLS`) replayed it: no
op launched it on its own."""

PLANNING_CALL_PREFIXES = (
    "cudaOccupancy",
    "cuOccupancy",
    "cudaFuncGetAttributes",
    "cudaFuncSetAttribute",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cudaGetFuncBySymbol",
    "cudaFuncGetName",
    "cuModuleGetFunction",
    "cuLibraryGetKernel",
    "hipOccupancy",
    "hipFuncGetAttribute",
    "hipFuncSetAttribute",
    "hipGetFuncBySymbol",
    "hipModuleGetFunction",
)
"""Runtime/driver calls that work out *how* to launch a kernel (occupancy, attributes, function
lookup), CUDA's and HIP's. Made before a launch, inside the op that launches, they add CPU time
to that launch."""

OUTLIER_MIN_DEVIATION_FRACTION = 0.10
"""An outlier kernel instance must also differ from the median by at least this fraction, so
that nanosecond jitter of a very stable kernel is not reported."""
OUTLIER_MIN_DEVIATION_US = 1.0
"""And by at least this many µs: a training step runs dozens of µs-long elementwise kernels,
whose jitter of a few tenths of a µs (1.6 µs one step, 1.9 µs the next) is over 10% of them
and, over so many instances, would mark nearly every step. In a trace whose kernel times are
whole µs (torch before about 1.11), a duration is the difference of two rounded times and
two durations can differ by up to 2 µs from the rounding alone: there an outlier must differ
by more than 2 µs."""


def span_dict(span: Span | None) -> dict[str, Any] | None:
    """A span as a small JSON-ready dict (what ``to_dict()`` writes for a span)."""
    if span is None:
        return None
    return {
        "id": span.id,
        "name": span.name,
        "cat": span.cat,
        "lane": span.lane.label,
        "start_us": span.start,
        "dur_us": span.dur,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, Span):
        return span_dict(value)
    if isinstance(value, Step):
        return value.number
    if isinstance(value, msgspec.Struct):
        return {name: _jsonable(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


class _Result:
    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """This result as plain JSON values (spans as :func:`span_dict` dicts)."""
        return _jsonable(self)


# -- steps ------------------------------------------------------------------------------------

_SAME_TIME_US = 0.001
"""Times closer than this (1 ns, the resolution Kineto writes) are one time: two kernels
written back to back can differ by a float's rounding error (10⁻⁵ µs) and hold no gap,
and a GPU busy for all of a step's window but such an error is not idle."""


class StepTime(_Result, msgspec.Struct, frozen=True, gc=False):
    """Timing of one ``ProfilerStep#N``."""

    step: int
    """N in ``ProfilerStep#N``."""
    cpu_us: float
    """Duration of the CPU window (the ``ProfilerStep#N`` annotation)."""
    gpu_busy_us: float
    """Time at least one stream ran this step's work (overlaps counted once): the work
    launched from the step, on any GPU (with several GPUs, one idle beside a busy one does
    not show)."""
    gpu_window_us: float
    """The GPU's share of wall time for this step: from the later of the step's start and the
    end of the GPU work queued before it, to the later of the step's end and its last GPU work's
    end, or to the start of the next window of a step with GPU work if that comes earlier (a
    GPU running behind on several streams runs two steps' work side by side), so that the
    windows of steps with GPU work do not overlap. Work queued before the recording began
    counts as such where the trace's first activity waited behind it
    (:data:`QUEUED_BEFORE_RECORDING_US`)."""
    gpu_idle_us: float | None
    """The time in the window in which no stream ran anything, of this step or another (0 when
    that is less than 1 ns: float rounding); ``None`` for a trace without GPU work. Where no
    other step's work runs in the window, as on one stream, ``gpu_window_us - gpu_busy_us``."""
    gpu_idle_fraction: float | None
    """``gpu_idle_us / gpu_window_us`` (0 for an empty window); ``None`` for a trace without
    GPU work."""
    gpu_activities: int
    """Kernels, copies and memsets launched in the step."""


def union_us(spans: list[Span] | tuple[Span, ...], *, in_start_order: bool = False) -> float:
    """Length of the union of the spans' intervals (sorted first unless already in order)."""
    total = 0.0
    current_start = current_end = None
    for span in spans if in_start_order else sorted(spans, key=_START):
        start = span.start
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, start + span.dur
        else:
            end = start + span.dur
            if end > current_end:
                current_end = end
    if current_end is not None:
        total += current_end - current_start
    return total


def gpu_devices(trace: Trace) -> list[int]:
    """The device numbers of the GPUs whose lanes hold GPU work, in order: more than one
    where one process drives several GPUs (model parallelism by hand, ``device_map="auto"``)."""
    return sorted(
        {
            lane.device
            for lane in trace.lanes
            if lane.kind == "gpu"
            and lane.device is not None
            and any(span.is_gpu_work for span in trace.lane_spans(lane))
        }
    )


def busy_by_device(work: Sequence[Span], devices: Sequence[int]) -> dict[int, float]:
    """Each of ``devices``' own busy time in ``work``: the union of the activities on its
    GPU lanes, 0.0 where it has none (work off the GPU lanes, as on the profiler's overhead
    row, is left out)."""
    by_device: dict[int, list[Span]] = {device: [] for device in devices}
    for activity in work:
        lane = activity.lane
        on_device = by_device.get(lane.device) if lane.kind == "gpu" else None
        if on_device is not None:
            on_device.append(activity)
    return {device: union_us(spans) for device, spans in by_device.items()}


def gpu_busy_in_windows(trace: Trace, windows: Sequence[tuple[float, float]]) -> list[float]:
    """:func:`gpu_busy_us` of the whole trace inside each of ``windows`` (``(start, end)``
    in µs), from one union of the GPU work: a pass over the work whatever the number of
    windows, where a call per window reads the work from the trace's start each time."""
    pieces = [(span.start, span.start + span.dur) for span in trace.gpu_work]  # start order
    return _covered_in_windows(pieces, windows)


def _covered_in_windows(
    pieces: list[tuple[float, float]], windows: Sequence[tuple[float, float]]
) -> list[float]:
    """How long the union of ``pieces`` (``(start, end)``, in start order) covers each of
    ``windows``: the pieces merged once, each window answered by two bisections."""
    merged_starts: list[float] = []
    merged_ends: list[float] = []
    for start, end in pieces:
        if merged_ends and start <= merged_ends[-1]:
            if end > merged_ends[-1]:
                merged_ends[-1] = end
        else:
            merged_starts.append(start)
            merged_ends.append(end)
    before = [0.0, *accumulate(e - s for s, e in zip(merged_starts, merged_ends, strict=True))]

    def covered_until(time: float) -> float:
        """Time covered from the first piece's start up to ``time``."""
        index = bisect_right(merged_starts, time)
        if index == 0:
            return 0.0
        return before[index - 1] + min(merged_ends[index - 1], time) - merged_starts[index - 1]

    return [max(0.0, covered_until(end) - covered_until(start)) for start, end in windows]


def gpu_busy_us(
    trace: Trace, lane: Lane | None = None, *, window: tuple[float, float] | None = None
) -> float:
    """How long GPU work ran: the union of kernels, memcpys and memsets, overlaps counted once.

    ``gpu_user_annotation`` spans (``record_function`` labels drawn on GPU lanes) and sync
    events are never busy time: they mark a range, the GPU may sit idle inside it.

    Args:
        trace: The loaded trace.
        lane: One GPU lane (a stream); ``None`` for every GPU lane of the trace together.
        window: ``(start, end)`` in µs from the trace origin: count only the busy time
            inside it (``end - start`` less this is how long the GPU idled in it).
    """
    if lane is None:
        work = trace.gpu_work
    else:
        work = [span for span in trace.lane_spans(lane) if span.cat in GPU_WORK_CATEGORIES]
    if window is None:
        return union_us(work, in_start_order=True)
    return union_within(work, *window)


def pieces_within(spans: Iterable[Span], start: float, end: float) -> list[tuple[float, float]]:
    """The time ``spans`` cover inside [start, end], as disjoint ``(start, end)`` pieces in
    order (``spans`` in start order; those on several threads may overlap)."""
    pieces: list[tuple[float, float]] = []
    for span in spans:
        lo, hi = max(span.start, start), min(span.start + span.dur, end)
        if hi <= lo:
            continue
        if pieces and lo <= pieces[-1][1]:
            if hi > pieces[-1][1]:
                pieces[-1] = (pieces[-1][0], hi)
        else:
            pieces.append((lo, hi))
    return pieces


def union_within(spans: list[Span], start: float, end: float) -> float:
    """Length of the union of the spans' intervals inside [start, end]; ``spans`` in start
    order."""
    total, reached = 0.0, start
    for span in spans:
        if span.start >= end:
            break
        span_end = min(span.start + span.dur, end)
        if span_end > reached:
            total += span_end - max(span.start, reached)
            reached = span_end
    return total


def lane_busy_us(trace: Trace, lane: Lane) -> float:
    """The busy time of one lane: :func:`gpu_busy_us` for a GPU lane; for any other (a CPU
    thread, the profiler's overhead track), the union of its spans that are work: operators,
    runtime and driver calls, syncs, and the collectives Gloo runs on the CPU
    (:data:`~profiling_utils.trace.HOST_COLLECTIVE_PREFIX`). Other labels (``ProfilerStep#N``
    and other ``record_function`` ranges, the Python frames of a ``with_stack`` trace, the
    profiler's span over the whole trace) are left out: they cover a main thread nearly end
    to end, whatever it does inside them."""
    if lane.kind == "gpu":
        return gpu_busy_us(trace, lane)
    work = [span for span in trace.lane_spans(lane) if _is_host_work(span)]
    return union_us(work, in_start_order=True)


def _is_host_work(span: Span) -> bool:
    """Whether a host span is work: not a label, or a collective Gloo runs on the CPU."""
    return span.cat not in LABEL_CATEGORIES or span.name.startswith(HOST_COLLECTIVE_PREFIX)


def host_work_us(trace: Trace, window: tuple[float, float]) -> float:
    """How long, inside ``window`` (``(start, end)``, µs), some CPU thread was in a recorded
    operator or runtime call: the union over every CPU lane of its spans that are work, as
    in :func:`lane_busy_us` (labels such as ``ProfilerStep#N`` left out). The rest of the
    window is host time the profiler does not record (Python between ops, data loading) or
    no work at all."""
    return host_work_in_windows(trace, [window])[0]


def host_work_in_windows(trace: Trace, windows: Sequence[tuple[float, float]]) -> list[float]:
    """:func:`host_work_us` of each of ``windows``, from one union of the threads' work (a
    pass over the spans whatever the number of windows)."""
    if not windows:
        return []
    first = min(start for start, _ in windows)
    last = max(end for _, end in windows)
    pieces = []
    for lane in trace.lanes:
        if lane.kind != "cpu":
            continue
        on_lane = trace.lane_spans(lane)
        for span in on_lane[: bisect_left(on_lane, last, key=_START)]:
            span_end = span.start + span.dur
            if span_end > first and _is_host_work(span):
                pieces.append((span.start, span_end))
    pieces.sort()
    return _covered_in_windows(pieces, windows)


def step_times(trace: Trace) -> list[StepTime]:
    """CPU duration, GPU busy time and GPU idle fraction of every step.

    The idle fraction answers "while this step was the GPU's business, how much of the time
    did the GPU sit idle?": near 1 when the CPU cannot feed the GPU (small kernels, launch
    bound), near 0 when the GPU is the bottleneck.
    """
    work = trace.gpu_work
    work_starts = list(map(_START, work))
    # ends_so_far[i]: latest end among work[:i + 1]
    ends_so_far = list(accumulate(map(add, work_starts, map(_DUR, work)), max))
    busy_time = _BusyTime(work_starts, ends_so_far)
    windows = []
    for step in trace.steps:
        own = step.gpu_work
        if own:
            first = min(w.start for w in own)
            before = bisect_left(work_starts, first)
            queued_until = ends_so_far[before - 1] if before else _queued_until(trace)
            windows.append([max(step.start, queued_until), max(step.end, max(w.end for w in own))])
        else:
            windows.append([step.start, step.end])
    # A GPU that runs behind on several streams runs two steps' work side by side: a window
    # ends where the next step's with GPU work begins, so that no time is counted for two
    # steps (a step without GPU work keeps its CPU window).
    with_work = [window for window, step in zip(windows, trace.steps, strict=True) if step.gpu_work]
    for window, following in zip(with_work, with_work[1:], strict=False):
        if window[0] < following[0] < window[1]:
            window[1] = following[0]
    results = []
    for step, (window_start, window_end) in zip(trace.steps, windows, strict=True):
        own = step.gpu_work
        window = window_end - window_start
        busy = union_us(own)
        idle_us = fraction = None
        if trace.has_gpu:
            # Idle: no stream ran anything, of this step or another, in the window.
            ran = busy_time.between(window_start, window_end)
            if abs(ran - busy) <= _SAME_TIME_US:  # its own work only: the same, unrounded
                ran = busy
            idle_us = window - ran if window - ran > _SAME_TIME_US else 0.0
            fraction = 1.0 - ran / window if idle_us else 0.0
        results.append(
            StepTime(step.number, step.span.dur, busy, window, idle_us, fraction, len(own))
        )
    return results


def queued_before_recording(trace: Trace) -> Span | None:
    """The trace's first GPU activity, where it waited behind work the recording does not
    hold: it started over :data:`QUEUED_BEFORE_RECORDING_US` after its launch call returned,
    with no earlier activity recorded (a server profiled while its GPU was busy). Until its
    start the GPU was busy, not idle. ``None`` otherwise."""
    if not trace.gpu_work:
        return None
    first = trace.gpu_work[0]
    launch = trace.launch_of_id(first.id)
    if launch is not None and first.start - launch.end > QUEUED_BEFORE_RECORDING_US:
        return first
    return None


def _queued_until(trace: Trace) -> float:
    """The end of the GPU work queued before the trace's first activity: its start where it
    waited behind unrecorded work (:func:`queued_before_recording`), else minus infinity."""
    first = queued_before_recording(trace)
    return float("-inf") if first is None else first.start


QUEUED_BEFORE_RECORDING_US = 1000.0
"""A trace's first GPU activity that starts this long after its launch call returned ran
behind work launched before the recording began: the GPU was busy, not idle, until then."""


class _BusyTime:
    """When any GPU activity ran, from the activities' starts in order and the latest end so
    far at each (C-level passes: the GPU's idle gaps are where a start passes every earlier
    end)."""

    def __init__(self, starts: list[float], ends_so_far: list[float]) -> None:
        after = list(compress(count(), map(gt, islice(starts, 1, None), ends_so_far)))
        self.first = starts[0] if starts else 0.0
        self.last = ends_so_far[-1] if ends_so_far else 0.0
        self.gap_starts = list(map(ends_so_far.__getitem__, after))
        self.gap_ends = list(map(starts.__getitem__, map((1).__add__, after)))
        self.idle_before = list(accumulate(map(sub, self.gap_ends, self.gap_starts), initial=0.0))

    def until(self, time: float) -> float:
        """Busy time before ``time``."""
        span = min(max(time, self.first), self.last) - self.first
        index = bisect_right(self.gap_starts, time) - 1  # the last gap begun by ``time``
        if index < 0:
            return span
        idle = self.idle_before[index] + min(time, self.gap_ends[index]) - self.gap_starts[index]
        return span - idle

    def between(self, start: float, end: float) -> float:
        """Busy time in [start, end]."""
        return self.until(end) - self.until(start) if end > start else 0.0


# -- launches ---------------------------------------------------------------------------------


class LaunchDelay(_Result, msgspec.Struct, frozen=True, gc=False):
    """How long one GPU activity waited between its launch call and its start on the GPU."""

    launch: Span
    """The runtime or driver call (``cudaLaunchKernel``, ``cuLaunchKernelEx``...)."""
    gpu: Span
    """The kernel, copy or memset it started."""
    delay_us: float
    """``gpu.start - launch.start``: launch overhead plus time queued behind earlier work."""
    step: int | None
    """The step of the launch, if any."""


def launch_delays(trace: Trace) -> list[LaunchDelay]:
    """The queueing delay of every GPU activity whose launch call is in the trace; of a
    graph's replay (:data:`GRAPH_LAUNCH_CALLS`), of its first activity only: the others wait
    for the graph's own earlier work, not for the launch."""
    results = []
    replayed: set[int] = set()
    for work in trace.gpu_work:  # in start order: a replay's first activity comes first
        launch = trace.launch_of(work)
        if launch is not None and launch.name in GRAPH_LAUNCH_CALLS:
            if launch.id in replayed:
                continue
            replayed.add(launch.id)
        if launch is not None:
            step = trace.step_of(launch)
            number = None if step is None else step.number
            results.append(LaunchDelay(launch, work, work.start - launch.start, number))
    return results


CLOCK_TOLERANCE_US = 1.0
"""How far a GPU activity may start before its launch call before the clocks are said to
disagree: times written in whole µs round both ways."""


def gpu_work_before_launch(trace: Trace) -> tuple[int, float]:
    """How many GPU activities start before the call that launched them (by more than
    :data:`CLOCK_TOLERANCE_US`), and by how much at most, µs. No kernel runs before its
    launch: a trace that shows it has CPU and GPU clocks that disagree (Kineto documents it
    on ROCm), by at least that much, and its launch delays and lane offsets are off by as
    much. ``(0, 0.0)`` when none does."""
    count, most = 0, 0.0
    launch_of = trace.launch_of_id
    for work in trace.gpu_work:
        launch = launch_of(work.id)
        if launch is not None and launch.start - work.start > CLOCK_TOLERANCE_US:
            count += 1
            most = max(most, launch.start - work.start)
    return count, most


class LaneOffset(_Result, msgspec.Struct, frozen=True, gc=False):
    """How far behind the CPU lane the GPU lane runs in one step."""

    step: int
    """N in ``ProfilerStep#N``."""
    launch: Span
    """The step's first launch call that started GPU work."""
    gpu: Span
    """The first GPU activity that launch started."""
    offset_us: float
    """``gpu.start - launch.start``: the shift between the two lanes at the step's start."""
    step_start_to_gpu_us: float
    """From the step's CPU start to the start of its first GPU activity."""


def lane_offset(trace: Trace) -> list[LaneOffset]:
    """Per step, the offset from the first launch to the GPU work it started (steps with GPU
    work only)."""
    results = []
    for step in trace.steps:
        launches = {trace.launch_of(w).id: trace.launch_of(w) for w in step.gpu_work}
        if not launches:
            continue
        first_launch = min(launches.values(), key=lambda s: s.id)
        first_gpu = min(trace.gpu_work_of(first_launch), key=lambda s: s.id)
        earliest_gpu = min(step.gpu_work, key=lambda s: s.id)
        results.append(
            LaneOffset(
                step.number,
                first_launch,
                first_gpu,
                first_gpu.start - first_launch.start,
                earliest_gpu.start - step.start,
            )
        )
    return results


DATA_LOADER_PREFIX = "enumerate(DataLoader)#"
"""The label torch writes around each ``next()`` of a ``DataLoader`` iterator."""


class DeadWindow(_Result, msgspec.Struct, frozen=True, gc=False):
    """The gap between a ``record_function`` label's start and the first ATen op inside it."""

    step: int
    """N in ``ProfilerStep#N``."""
    annotation: Span
    """The ``user_annotation`` span (the label)."""
    first_op: Span
    """The first ``aten::`` op nested in it."""
    gap_us: float
    """``first_op.start - annotation.start``: CPU time in the label before any ATen work."""
    in_labels_us: float = 0.0
    """Of the time before dispatch could begin (up to :attr:`first_op`, or to
    :attr:`data_loader`), the time inside ``record_function`` labels nested in the label that
    closed before it (the program's own labelled code ran then, not dispatch)."""
    longest_label: Span | None = None
    """The longest of those labels, if any."""
    in_calls_us: float = 0.0
    """Of the same time, outside those labels, the time in runtime and driver calls nested
    in the label that returned before it (a ``cudaEventSynchronize``: the host waited for the
    GPU, which warm-up does not remove)."""
    longest_call: Span | None = None
    """The longest of those calls, if any."""
    data_loader: Span | None = None
    """The data loader's label (``next()`` on a ``DataLoader``) that holds :attr:`first_op`,
    nested in the label: fetching the batch is the loader's time, so the window ends where
    it begins."""

    @property
    def dead_us(self) -> float:
        """From the label's start to its first op (or to the data loader's fetch that holds
        it), less :attr:`in_labels_us` and :attr:`in_calls_us`: the time before dispatch
        began in which the trace shows nothing."""
        end = self.first_op.start if self.data_loader is None else self.data_loader.start
        return end - self.annotation.start - self.in_labels_us - self.in_calls_us


def _first_op_and_labels(trace: Trace, outer: Span) -> tuple[Span | None, list[Span], list[Span]]:
    """The earliest ``aten::`` op nested in ``outer`` on its lane, and the labels and the
    runtime or driver calls nested in ``outer`` that began before it, in start order."""
    labels = []
    calls = []
    for span in trace.within(outer):
        if span.cat == "cpu_op" and span.name.startswith("aten::"):
            return span, labels, calls
        if span.cat == "user_annotation":
            labels.append(span)
        elif span.cat in LAUNCH_CATEGORIES:
            calls.append(span)
    return None, [], []


def dead_windows(trace: Trace, label: str | None = None) -> list[DeadWindow]:
    """The post's "dead window" in every step. A data loader's own label (the loop's
    ``next()`` directly in the step) is no such window: its wait is the fetch.

    Args:
        trace: The trace.
        label: Name of the ``record_function`` label to measure. ``None`` measures the labels
            directly inside each ``ProfilerStep#N`` (the label ``capture`` puts around a step).
    """
    # The labels of each step, found in one pass (a pass per step was quadratic in steps).
    by_step: dict[int, list[Span]] = {}
    if label is None:
        step_ids = {step.span.id: id(step) for step in trace.steps}
        for annotation in trace.annotations:
            key = step_ids.get(annotation.parent) if annotation.parent is not None else None
            if key is not None and not annotation.name.startswith(DATA_LOADER_PREFIX):
                by_step.setdefault(key, []).append(annotation)
    else:
        for annotation in trace.by_name.get(label, ()):
            step = trace.step_of(annotation) if annotation.cat == "user_annotation" else None
            if step is not None:
                by_step.setdefault(id(step), []).append(annotation)
    results = []
    for step in trace.steps:
        for annotation in by_step.get(id(step), ()):
            first, labels, calls = _first_op_and_labels(trace, annotation)
            if first is None:
                continue
            # A data loader's label around the first op: the window ends where it begins.
            loader = next(
                (
                    held
                    for held in labels
                    if held.name.startswith(DATA_LOADER_PREFIX) and held.end >= first.end
                ),
                None,
            )
            end = first.start if loader is None else loader.start
            closed = [held for held in labels if held.end <= end]
            returned = [call for call in calls if call.end <= end]
            in_labels = union_us(closed)
            results.append(
                DeadWindow(
                    step.number,
                    annotation,
                    first,
                    first.start - annotation.start,
                    in_labels,
                    max(closed, key=_DUR, default=None),
                    union_us(closed + returned) - in_labels if returned else 0.0,
                    max(returned, key=_DUR, default=None),
                    loader,
                )
            )
    return results


class GpuGap(_Result, msgspec.Struct, frozen=True, gc=False):
    """A stretch in which a GPU ran nothing, between two activities of one step."""

    step: int
    """N in ``ProfilerStep#N``."""
    device: int | None
    """The GPU."""
    before: Span
    """The activity, on any stream of the device and of any step, that ended last before
    the gap."""
    after: Span
    """The activity that starts at the gap's end (of any step)."""
    gap_us: float
    """``after.start - before.end``: no stream of the device ran in it."""


_SPAN_ID = attrgetter("id")
_DUR = attrgetter("dur")
_START = attrgetter("start")
_CAT = attrgetter("cat")
_PARENT = attrgetter("parent")


def gpu_gaps(trace: Trace, min_gap_us: float = 0.0) -> list[GpuGap]:
    """Stretches in which a GPU ran nothing, on any stream, inside a step: after one of the
    step's activities ended and before another of them started; longer than ``min_gap_us``
    (and than 1 ns: back-to-back activities whose times differ by a float's rounding hold
    no gap).

    Work of a neighbouring step that runs in between (a GPU that runs behind the CPU, or
    several streams) is not idle time: it splits the time between two of the step's
    activities into the stretches around it. Where the GPU work of two steps interleaves,
    a stretch inside both is listed for each.

    Returns:
        The gaps, step by step, each step's in time order.
    """
    idle = _idle_stretches_of(trace)
    results = []
    for step in trace.steps:
        for device, work in _work_by_device(step.gpu_work).items():
            stretches = idle.get(device)
            if not stretches:
                continue
            starts, found = stretches
            first_end = min(span.start + span.dur for span in work)
            last_start = max(span.start for span in work)
            for index in range(bisect_left(starts, first_end), len(starts)):
                before, after = found[index]
                if after.start > last_start:
                    break
                gap = after.start - starts[index]
                if gap >= min_gap_us:
                    results.append(GpuGap(step.number, device, before, after, gap))
    return results


def gpu_gaps_between_steps(trace: Trace) -> list[GpuGap]:
    """Stretches in which a GPU ran nothing from the end of a step's work to the start of the
    next step's (the steps in :attr:`Trace.steps` order): a sync at the end of a step
    (``loss.item()`` after the optimizer) leaves the GPU idle there, across the boundary,
    while the CPU finishes the step and launches the next one's work. Each is listed under the
    earlier step (``step``); where other work ran in between, there is none.

    Returns:
        The gaps, in step order.
    """
    idle = _idle_stretches_of(trace)
    results = []
    by_step = [_work_by_device(step.gpu_work) for step in trace.steps]
    for (step, _), (mine, later) in zip(pairwise(trace.steps), pairwise(by_step), strict=True):
        for device, work in mine.items():
            stretches = idle.get(device)
            if not stretches or device not in later:
                continue
            starts, found = stretches
            last_end = max(span.start + span.dur for span in work)
            first = min(later[device], key=_START)
            index = bisect_left(starts, last_end)  # a stretch starts where an activity ends
            if index < len(starts) and starts[index] == last_end and found[index][1] is first:
                before = found[index][0]
                results.append(GpuGap(step.number, device, before, first, first.start - last_end))
    return results


# A trace's idle stretches, kept while the trace lives: gpu_gaps and gpu_gaps_between_steps
# both read them, and on a large trace the pass over every activity is their main cost.
_IDLE_STRETCHES: weakref.WeakKeyDictionary[
    Trace, dict[int | None, tuple[list[float], list[tuple[Span, Span]]]]
] = weakref.WeakKeyDictionary()


def _idle_stretches_of(
    trace: Trace,
) -> dict[int | None, tuple[list[float], list[tuple[Span, Span]]]]:
    """:func:`_idle_stretches` of the trace's GPU work, computed once per trace."""
    found = _IDLE_STRETCHES.get(trace)
    if found is None:
        found = _IDLE_STRETCHES[trace] = _idle_stretches(trace.gpu_work)
    return found


def _idle_stretches(
    work: list[Span],
) -> dict[int | None, tuple[list[float], list[tuple[Span, Span]]]]:
    """Per device, every stretch of over 1 ns in which none of its streams ran: the stretches'
    starts, and the activity ending last before each and the one starting at its end. One
    pass over the work in start order, keeping the activity that ends last."""
    latest: dict[int | None, tuple[Span, float]] = {}
    idle: dict[int | None, tuple[list[float], list[tuple[Span, Span]]]] = {}
    for activity in work:  # in start order
        device = activity.lane.device
        end = activity.start + activity.dur
        previous = latest.get(device)
        if previous is None or end > previous[1]:
            latest[device] = (activity, end)
        if previous is not None and activity.start - previous[1] > _SAME_TIME_US:
            starts, found = idle.setdefault(device, ([], []))
            starts.append(previous[1])
            found.append((previous[0], activity))
    return idle


class QueuedIdle(_Result, msgspec.Struct, frozen=True, gc=False):
    """A stretch in which a GPU ran nothing of the trace although work was waiting for it."""

    device: int | None
    """The GPU."""
    work: Span
    """The activity that waited."""
    launch: Span
    """The call that launched it; it had returned when the stretch began."""
    start_us: float
    """When the stretch began: the later of the launch call's end and the end of the
    device's previous activity (on any stream)."""
    idle_us: float
    """``work.start - start_us``."""
    step: int | None
    """The step of the launch call, if any."""


def queued_idle(trace: Trace, min_idle_us: float = 0.0) -> list[QueuedIdle]:
    """Stretches in which a GPU sat idle, as far as the trace shows, with launched work
    waiting: each activity whose launch call had returned and whose device had finished
    everything before it, but which started more than ``min_idle_us`` later.

    An idle GPU starts launched work within a few microseconds (under 10 µs in every H100
    recording of this project). A much longer wait means the GPU was busy with something the
    trace does not hold, most often another process's kernels: a GPU shared by processes
    runs one at a time, so your lane shows nothing while your next kernel waits in its
    queue. Activities without their launch call in the trace are left out.

    Returns:
        The stretches, in the order the waiting activities start.
    """
    results = []
    for device, work in _work_by_device(trace.gpu_work).items():
        busy_until = float("-inf")
        for activity in work:  # in start order
            launch = trace.launch_of(activity)
            if launch is not None:
                since = max(busy_until, launch.start + launch.dur)
                idle = activity.start - since
                if idle > max(min_idle_us, _SAME_TIME_US):
                    step = trace.step_of(launch)
                    number = None if step is None else step.number
                    results.append(QueuedIdle(device, activity, launch, since, idle, number))
            busy_until = max(busy_until, activity.start + activity.dur)
    results.sort(key=lambda q: q.work.start)
    return results


def _work_by_device(work: list[Span] | tuple[Span, ...]) -> dict[int | None, list[Span]]:
    by_device: dict[int | None, list[Span]] = {}
    for span in work:
        by_device.setdefault(span.lane.device, []).append(span)
    for spans in by_device.values():
        spans.sort(key=_SPAN_ID)  # ids follow start order (Trace.spans is sorted)
    return by_device


# -- kernels ----------------------------------------------------------------------------------


class KernelStats(_Result, msgspec.Struct, frozen=True, gc=False):
    """Duration statistics of every instance of one kernel name."""

    name: str
    """The kernel's name."""
    count: int
    """Instances in the trace."""
    total_us: float
    """Sum of their durations."""
    min_us: float
    """Shortest instance."""
    median_us: float
    """Median duration."""
    mean_us: float
    """Mean duration."""
    max_us: float
    """Longest instance."""
    spread: float
    """``(max_us - min_us) / median_us``: 0 for a perfectly steady kernel."""
    outlier_steps: tuple[int, ...]
    """Steps holding an instance that stands out from its **role**: the same kernel at the
    same place in the other steps (the k-th instance of the name among the work launched in
    each step, in start order), over at least four steps. It stands out when it lies outside
    the role's Tukey fences (1.5 IQR beyond the quartiles) and differs from the role's median
    by at least :data:`OUTLIER_MIN_DEVIATION_FRACTION` and :data:`OUTLIER_MIN_DEVIATION_US`.
    By role, not by name: one name run at several sizes in every step (a reduction over each
    layer) would otherwise put every step outside the fences of its mixed durations."""
    communication: bool
    """Whether it is a collective or point-to-point communication kernel
    (:func:`~profiling_utils.trace.is_communication`): its time includes waiting for the other
    ranks, so its spread is not the GPU's."""


def kernel_stats(trace: Trace, kernels: Sequence[Span] | None = None) -> list[KernelStats]:
    """Per kernel name: count and duration statistics, sorted by total time, largest first.

    Args:
        trace: The loaded trace.
        kernels: The kernels to count (default: all of the trace's).
    """
    by_name: dict[str, list[Span]] = {}
    for kernel in trace.kernels if kernels is None else kernels:
        by_name.setdefault(kernel.name, []).append(kernel)
    communication = {kernel.name for kernel in trace.communication}
    outliers = _outlier_steps(trace)
    results = []
    for name, kernels in by_name.items():
        durations = sorted(k.dur for k in kernels)
        median = statistics.median(durations)
        results.append(
            KernelStats(
                name=name,
                count=len(durations),
                total_us=sum(durations),
                min_us=durations[0],
                median_us=median,
                mean_us=statistics.fmean(durations),
                max_us=durations[-1],
                spread=(durations[-1] - durations[0]) / median if median > 0 else 0.0,
                outlier_steps=tuple(sorted(outliers.get(name, ()))),
                communication=name in communication,
            )
        )
    results.sort(key=lambda s: (-s.total_us, s.name))
    return results


def _outlier_steps(trace: Trace) -> dict[str, set[int]]:
    """Per kernel name, the steps holding an instance that stands out from its role (see
    :attr:`KernelStats.outlier_steps`)."""
    step_of = trace.gpu_work_steps.get
    roles: dict[tuple[str, int], list[tuple[int, float]]] = {}
    rank_in_step: dict[tuple[str, int], int] = {}
    for kernel in trace.kernels:
        step = step_of(kernel.id)
        if step is None:
            continue
        name = kernel.name
        rank = rank_in_step.get((name, step), 0)
        rank_in_step[name, step] = rank + 1
        roles.setdefault((name, rank), []).append((step, kernel.dur))
    # Whole-µs times: durations 2 µs apart may be equal ones rounded apart.
    rounding = 2.0 if all(map(float.is_integer, map(_DUR, trace.kernels))) else 0.0
    outliers: dict[str, set[int]] = {}
    for (name, _), instances in roles.items():
        if len(instances) < 4:
            continue
        durations = [dur for _, dur in instances]
        median = statistics.median(durations)
        q1, _, q3 = statistics.quantiles(durations, n=4, method="inclusive")
        low, high = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
        for step, dur in instances:
            deviation = abs(dur - median)
            far = (
                deviation >= OUTLIER_MIN_DEVIATION_US
                and deviation > rounding
                and deviation >= OUTLIER_MIN_DEVIATION_FRACTION * median
            )
            if far and not low <= dur <= high:
                outliers.setdefault(name, set()).add(step)
    return outliers


class KernelFootprint(_Result, msgspec.Struct, frozen=True, gc=False):
    """What the trace recorded about how a kernel was launched (``None`` where not recorded)."""

    registers_per_thread: int | None
    shared_memory_bytes: int | None
    """Static plus dynamic shared memory per block."""
    grid: tuple[int, ...] | None
    block: tuple[int, ...] | None
    blocks_per_sm: float | None
    warps_per_sm: float | None
    occupancy_pct: float | None
    """``est. achieved occupancy %``."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dims(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(_whole(v) is not None for v in value):
        return tuple(value)
    return None


_GRID_IN_WORK_ITEMS = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})
"""HIP launches whose grid is the global work size (work-items, i.e. threads), not blocks."""


def kernel_footprint(kernel: Span, launch: Span | None = None) -> KernelFootprint:
    """Registers, shared memory, grid, block and occupancy as recorded in a kernel's args.

    On ROCm the kernel records none of them; its ``launch`` call (when given) records the grid
    and the block (``grid`` and ``block``, or ``grid dim`` and ``block dim`` in later ROCm
    releases), which are used then, the grid in blocks as CUDA counts it: the work-item
    count of ``hipExtModuleLaunchKernel`` and ``hipHccModuleLaunchKernel`` is divided by the
    block, rounded up. Their ``shared memory`` is left out: it is the dynamic part only, and
    a kernel's static LDS is not recorded.
    """
    args = kernel.args
    grid, block = _dims(args.get("grid")), _dims(args.get("block"))
    if grid is None and block is None and launch is not None and launch.raw_args:
        called = launch.args  # "grid"/"block" up to ROCm 6.2; "grid dim"/"block dim" later
        grid = _dims(called.get("grid", called.get("grid dim")))
        block = _dims(called.get("block", called.get("block dim")))
        if launch.name in _GRID_IN_WORK_ITEMS and grid is not None and block is not None:
            if len(grid) == len(block) and all(block):
                grid = tuple(-(-items // size) for items, size in zip(grid, block, strict=True))
            else:
                grid = None
    return KernelFootprint(
        registers_per_thread=_whole(args.get("registers per thread")),
        shared_memory_bytes=_whole(args.get("shared memory")),
        grid=grid,
        block=block,
        blocks_per_sm=_number(args.get("blocks per SM")),
        warps_per_sm=_number(args.get("warps per SM")),
        occupancy_pct=_number(args.get("est. achieved occupancy %")),
    )


def resident_blocks_per_sm(footprint: KernelFootprint, device: DeviceInfo) -> int | None:
    """The most blocks of a kernel one SM can hold at once: what each block takes of the SM's
    shared memory, registers and threads (:attr:`KernelFootprint.shared_memory_bytes`,
    :attr:`~KernelFootprint.registers_per_thread` and the block's size) against what the SM
    has (:class:`~profiling_utils.trace.DeviceInfo`'s per-SM figures). ``None`` where the
    trace records none of the pairs.

    Not CUPTI's ``blocks per SM`` (:attr:`KernelFootprint.blocks_per_sm`), which is the
    grid's blocks over the SMs. An upper bound: CUDA's occupancy calculator also rounds
    registers and shared memory up to their allocation units and caps the blocks per SM,
    which the trace does not record, so the true number can be lower, never higher. A grid
    of more blocks than the SMs it gets times this number runs in more than one wave.
    """
    threads = math.prod(footprint.block) if footprint.block else None
    limits = []
    if footprint.shared_memory_bytes and device.shared_memory_per_sm_bytes:
        limits.append(device.shared_memory_per_sm_bytes // footprint.shared_memory_bytes)
    if footprint.registers_per_thread and threads and device.registers_per_sm:
        limits.append(device.registers_per_sm // (footprint.registers_per_thread * threads))
    if threads and device.threads_per_sm:
        limits.append(device.threads_per_sm // threads)
    return min(limits) if limits else None


class KernelLaunch(_Result, msgspec.Struct, frozen=True, gc=False):
    """How one kernel came to run."""

    kernel: Span
    """The kernel."""
    launch: Span | None
    """Its launch call, when in the trace."""
    api: str | None
    """The launch API: ``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cuLaunchKernelEx``,
    ``cudaGraphLaunch``..."""
    op: Span | None
    """The ``cpu_op`` the launch was made from."""
    planning_calls: tuple[Span, ...]
    """The planning calls before its launch (:attr:`Launch.planning`)."""
    footprint: KernelFootprint
    """Registers, shared memory, grid and block as recorded."""
    step: int | None
    """The step the kernel belongs to."""


class Launch(_Result, msgspec.Struct, frozen=True, gc=False):
    """A runtime or driver call that started GPU work, with what led to it."""

    call: Span
    """The call: ``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaMemcpyAsync``,
    ``cudaGraphLaunch``..."""
    op: Span | None
    """The ``cpu_op`` it was made from."""
    planning: tuple[Span, ...]
    """Calls named in :data:`PLANNING_CALL_PREFIXES` made in the same enclosing span after
    its previous kernel launch (for kernel launches only: a copy or memset launched in
    between leaves them to the kernel that follows)."""
    work: tuple[Span, ...]
    """The GPU work it started, in start order."""

    @property
    def kernel(self) -> Span | None:
        """The first kernel among :attr:`work`, if it started one."""
        for activity in self.work:
            if activity.cat == "kernel":
                return activity
        return None


def launches(trace: Trace) -> list[Launch]:
    """Every call that started GPU work, with its op and planning calls, in start order.

    One pass over the runtime and driver calls: a planning call is remembered under the
    span it was made in until the next kernel launch from that span takes it.
    """
    spans = trace.spans
    work_of = trace.gpu_work_of_id
    pending: dict[int | None, list[Span]] = {}
    found: list[Launch] = []
    append = found.append
    # On ROCm a call may outlive its op and nest in the op around it: Trace.op_of each time.
    direct = trace.vendor != "amd"
    for call in trace.runtime_calls:
        parent = call.parent
        if not call.is_launch:
            if call.name.startswith(PLANNING_CALL_PREFIXES):
                pending.setdefault(parent, []).append(call)
            continue
        op = spans[parent] if parent is not None and direct else None
        if op is None or op.cat != "cpu_op":  # usually the op is the direct parent
            op = trace.op_of(call)
        work = tuple(work_of(call.id))  # a launch call started some
        if pending and parent in pending and "kernel" in map(_CAT, work):
            planning = tuple(pending.pop(parent))
        else:
            planning = ()
        append(Launch(call, op, planning, work))
    return found


def kernel_launches(trace: Trace) -> list[KernelLaunch]:
    """For every kernel: launch API, op, the planning calls before the launch, footprint."""
    by_call = {launch.call.id: launch for launch in launches(trace)}
    results = []
    for kernel in trace.kernels:
        call = trace.launch_of(kernel)
        launch = None if call is None else by_call.get(call.id)
        step = trace.step_of(kernel)
        results.append(
            KernelLaunch(
                kernel=kernel,
                launch=call,
                api=None if call is None else call.name,
                op=launch.op if launch is not None else trace.op_of(kernel),
                planning_calls=launch.planning if launch is not None else (),
                footprint=kernel_footprint(kernel, call),
                step=None if step is None else step.number,
            )
        )
    return results


# -- memory -----------------------------------------------------------------------------------

_COPY_KIND = re.compile(r"Memcpy (\w+)")


class MemoryCopy(_Result, msgspec.Struct, frozen=True, gc=False):
    """A memcpy or memset on the GPU."""

    span: Span
    """The ``gpu_memcpy`` or ``gpu_memset`` activity."""
    kind: str
    """``DtoD``, ``HtoD``, ``DtoH``, ``PtoP``... for copies; ``memset`` for memsets."""
    bytes: int | None
    """Bytes moved or set, as the activity records them, else as its copy or memset call does
    (ROCm's ``hipMemcpyWithStream`` records ``size`` on the call only)."""
    bandwidth_gb_s: float | None
    """Bytes copied (or set) per second, ``bytes / dur`` in GB/s (10^9 bytes per second),
    each byte counted once: the profiler's ``memory bandwidth (GB/s)`` and copy benchmarks'
    convention, used everywhere in this library. A device-to-device copy moves twice this
    through memory (read, then written). ``None`` for a zero-length activity or unknown
    size."""
    op: Span | None
    """The ``cpu_op`` that issued it (through its launch call)."""
    api: str | None
    """The call that issued it: ``cudaMemcpyAsync``, ``cudaMemsetAsync``, ``cudaGraphLaunch``..."""
    step: int | None
    """The step it belongs to."""


class MemoryPeak(_Result, msgspec.Struct, frozen=True, gc=False):
    """The most memory one device's allocator held for tensors while the trace recorded
    (``profile_memory=True``)."""

    device: str
    """``"GPU 0"`` (``cuda:0``), or ``"CPU"``."""
    events: int
    """Allocations and frees recorded on it."""
    peak_allocated_bytes: int
    """The most bytes allocated to tensors at once (the allocator's ``Total Allocated``); with
    :attr:`from_recording_start`, the most beyond what was allocated when the recording
    began (below 0 where it never rose above that)."""
    peak_at_us: float
    """When that peak was first reached, µs from the trace's origin."""
    peak_step: int | None
    """The step whose CPU window holds that time, or ``None``."""
    peak_reserved_bytes: int | None
    """The most bytes the caching allocator held from the device (``Total Reserved``;
    ``None`` on the CPU)."""
    end_allocated_bytes: int
    """Bytes allocated after its last recorded allocation or free (with
    :attr:`from_recording_start`, beyond what was allocated when the recording began: less
    than 0 where it freed more than it allocated)."""
    from_recording_start: bool = False
    """Whether the trace writes no allocator totals (torch ~1.8-1.9 wrote each allocation's
    size only): the figures then add up the sizes from the recording's start, taken as 0."""


def memory_peaks(trace: Trace) -> list[MemoryPeak]:
    """Per device, the peak of the memory allocated to tensors that ``profile_memory=True``
    recorded, and when it came; GPUs first, by index, then the CPU. Empty for a trace
    recorded without memory events."""
    by_device: dict[tuple[int, int], list[MemoryEvent]] = {}
    for event in trace.memory_events:
        by_device.setdefault((event.device_type, event.device_id), []).append(event)
    peaks = []
    for (device_type, device_id), events in sorted(
        by_device.items(), key=lambda item: (item[0][0] == 0, item[0])
    ):
        events.sort(key=attrgetter("ts"))
        from_start = any(event.total_allocated is None for event in events)
        if from_start:  # each event's size only: added up from the recording's start
            totals = list(accumulate(event.bytes for event in events))
        else:
            totals = [event.total_allocated for event in events]
        top = max(range(len(events)), key=totals.__getitem__)  # the first of equal peaks
        reserved = [e.total_reserved for e in events if e.total_reserved is not None]
        peaks.append(
            MemoryPeak(
                device="CPU" if device_type == 0 else f"GPU {device_id}",
                events=len(events),
                peak_allocated_bytes=totals[top],
                peak_at_us=round(events[top].ts, 3),
                peak_step=trace.step_number_at(events[top].ts),
                peak_reserved_bytes=max(reserved) if reserved else None,
                end_allocated_bytes=totals[-1],
                from_recording_start=from_start,
            )
        )
    return peaks


def memory_copies(trace: Trace) -> list[MemoryCopy]:
    """Every memcpy and memset, with size, achieved bandwidth and the op that issued it."""
    results = []
    copies = trace.find(cat="gpu_memcpy") + trace.find(cat="gpu_memset")
    copies.sort(key=_SPAN_ID)  # the order of trace.gpu_work
    for span in copies:
        if span.cat == "gpu_memcpy":
            match = _COPY_KIND.match(span.name)
            kind = match[1] if match else "copy"
        else:
            kind = "memset"
        size = _whole(span.args.get("bytes"))
        launch = trace.launch_of(span)
        if size is None and launch is not None:
            size = _size_on_launch(trace, launch, span)
        bandwidth = size / span.dur / 1e3 if size is not None and span.dur > 0 else None
        step = trace.step_of(span)
        results.append(
            MemoryCopy(
                span=span,
                kind=kind,
                bytes=size,
                bandwidth_gb_s=bandwidth,
                op=trace.op_of(span),
                api=None if launch is None else launch.name,
                step=None if step is None else step.number,
            )
        )
    return results


def _size_on_launch(trace: Trace, launch: Span, activity: Span) -> int | None:
    """The size a copy or memset call records (``args.size``; ROCm's ``hipMemcpyWithStream``
    writes it as a string of digits), when the call started this activity alone."""
    if "emcpy" not in launch.name and "emset" not in launch.name:
        return None
    if trace.gpu_work_of(launch) != [activity]:
        return None
    size = launch.args.get("size")
    if isinstance(size, str) and size.isdigit():
        return int(size)
    return _whole(size)


# -- torch.compile ----------------------------------------------------------------------------

_GRAPH_CALL = re.compile(r"## Call CompiledFxGraph (\S+)")
_REGION = re.compile(r"Torch-Compiled Region: (\S+)")
_NO_CACHE_KEY = "None"


def compiled_graph_hash(call: Span) -> str | None:
    """The hash in a ``## Call CompiledFxGraph <hash> ##`` span's name: the key of the
    compiled graph in Inductor's FX graph cache. ``None`` for another span, and for a graph
    compiled with no key (Inductor writes ``None`` there when its FX graph cache is off or
    bypassed: such calls name no graph)."""
    match = _GRAPH_CALL.match(call.name)
    if match is None or match[1] == _NO_CACHE_KEY:
        return None
    return match[1]


class CompileInfo(_Result, msgspec.Struct, frozen=True, gc=False):
    """What ``torch.compile`` left in the trace."""

    regions: tuple[Span, ...]
    """``Torch-Compiled Region: F/C`` spans (one per call of a compiled frame)."""
    region_ids: tuple[str, ...]
    """The distinct ``F/C`` ids (frame / compile id) of those regions."""
    cache_lookups: tuple[Span, ...]
    """``TorchDynamo Cache Lookup`` spans (guard checks before each compiled call)."""
    aot_wrappers: tuple[Span, ...]
    """``AOTDispatcher ...`` spans (runtime wrapper prologue/epilogue)."""
    aot_functions: tuple[Span, ...]
    """``CompiledFunction`` and ``CompiledFunctionBackward`` calls: AOTAutograd's autograd
    function around a compiled training graph, the only marker that traces of torch before
    the ``Torch-Compiled Region`` labels (about 2.1) hold."""
    graph_calls: tuple[Span, ...]
    """``## Call CompiledFxGraph <hash>`` spans."""
    graph_hashes: tuple[str, ...]
    """The distinct compiled-graph hashes (:func:`compiled_graph_hash`), in first-call
    order."""
    cuda_graph_launches: tuple[Span, ...]
    """``cudaGraphLaunch`` calls (``mode="reduce-overhead"`` replays)."""

    @property
    def is_compiled(self) -> bool:
        """Whether the trace shows any ``torch.compile`` activity."""
        return bool(self.regions or self.graph_calls or self.cache_lookups or self.aot_functions)

    @property
    def cache_lookup_us(self) -> float:
        """Total time spent in ``TorchDynamo Cache Lookup``."""
        return sum(span.dur for span in self.cache_lookups)


def compiled_regions(trace: Trace) -> CompileInfo:
    """The ``torch.compile`` regions, cache lookups, AOT wrappers, graph hashes and CUDA graph
    launches of a trace (all empty for an eager run). The markers are the CPU's: the copy of
    a ``record_function`` range that the GPU lane shows (``gpu_user_annotation``) is not a
    second call."""

    def on_cpu(spans: list[Span]) -> tuple[Span, ...]:
        return tuple(span for span in spans if span.lane.kind == "cpu")

    regions = on_cpu(trace.find(prefix="Torch-Compiled Region"))
    graph_calls = on_cpu(trace.find(prefix="## Call CompiledFxGraph"))
    region_ids = dict.fromkeys(
        m[1] for m in (_REGION.match(s.name) for s in regions) if m is not None
    )
    hashes = dict.fromkeys(
        graph_hash for graph_hash in map(compiled_graph_hash, graph_calls) if graph_hash
    )
    return CompileInfo(
        regions=regions,
        region_ids=tuple(region_ids),
        cache_lookups=on_cpu(trace.find("TorchDynamo Cache Lookup")),
        aot_wrappers=on_cpu(trace.find(prefix="AOTDispatcher")),
        aot_functions=on_cpu(
            sorted(
                [*trace.find("CompiledFunction"), *trace.find("CompiledFunctionBackward")],
                key=_SPAN_ID,
            )
        ),
        graph_calls=graph_calls,
        graph_hashes=tuple(hashes),
        cuda_graph_launches=tuple(graph_launches(trace)),
    )


def graph_launches(trace: Trace) -> list[Span]:
    """The runtime and driver calls that replay a captured graph (:data:`GRAPH_LAUNCH_CALLS`),
    in start order."""
    calls = [
        call
        for name in GRAPH_LAUNCH_CALLS
        for call in trace.by_name.get(name, ())
        if call.cat in LAUNCH_CATEGORIES
    ]
    calls.sort(key=_SPAN_ID)
    return calls


# -- CPU operators ----------------------------------------------------------------------------


class OpStats(_Result, msgspec.Struct, frozen=True, gc=False):
    """All calls of one CPU operator (``cpu_op`` name), as ``key_averages()`` groups them."""

    name: str
    calls: int
    """Calls, a call whose only child is a call of the same name counted once (as
    ``key_averages()`` folds ``aten::sum`` calling ``aten::sum``)."""
    self_us: float
    """Time in the op itself: each call's duration less its direct children's on the same
    thread (ops, runtime calls, annotations), never below 0."""
    total_us: float
    """Sum of the calls' durations (a call nested in a call of the same op counts twice, as in
    ``key_averages()``)."""


class ThreadActivity(_Result, msgspec.Struct, frozen=True, gc=False):
    """What one CPU thread recorded in a time window (:func:`thread_activity`)."""

    lane: Lane
    """The thread."""
    start_us: float
    """Start of the window."""
    end_us: float
    """End of the window."""
    ops: tuple[tuple[Span, float], ...]
    """The outermost ``cpu_op`` spans that overlap the window (those not inside another one
    that does), each with its time inside the window, µs, the longest first."""
    op_us: float
    """How long at least one operator ran in the window: the union of :attr:`ops`' times."""
    labels: tuple[Span, ...]
    """The ``user_annotation`` spans (``record_function`` labels, ``ProfilerStep#N``) open
    during the window, in start order."""

    @property
    def no_op_us(self) -> float:
        """How long no operator ran in the window: Python between operators, or anything else
        the profiler does not record as an operator."""
        return self.end_us - self.start_us - self.op_us


def thread_activity(trace: Trace, lane: Lane, start_us: float, end_us: float) -> ThreadActivity:
    """What the CPU thread ``lane`` ran from ``start_us`` to ``end_us``: its outermost
    operators and their time in the window, the time no operator ran, the labels open.

    For a window of interest, such as a stretch in which the GPU sat idle (the page on gaps
    inside a step reads the longest one with it). The thread's spans that start before the
    window's end are scanned once.
    """
    on_lane = trace.lane_spans(lane)
    during = [
        span
        for span in on_lane[: bisect_left(on_lane, end_us, key=_START)]
        if span.start + span.dur > start_us
    ]
    ops = [span for span in during if span.cat == "cpu_op"]
    ids = {op.id for op in ops}
    spans = trace.spans

    def within_another(op: Span) -> bool:  # a label or a Python frame may lie between
        parent = op.parent
        while parent is not None:
            if parent in ids:
                return True
            parent = spans[parent].parent
        return False

    outermost = [op for op in ops if not within_another(op)]  # in start order
    inside = [(op, min(op.start + op.dur, end_us) - max(op.start, start_us)) for op in outermost]
    covered, reached = 0.0, start_us  # their union: siblings may overlap a little
    for op in outermost:
        op_end = min(op.start + op.dur, end_us)
        if op_end > reached:
            covered += op_end - max(op.start, reached)
            reached = op_end
    return ThreadActivity(
        lane=lane,
        start_us=start_us,
        end_us=end_us,
        ops=tuple(sorted(inside, key=lambda pair: -pair[1])),
        op_us=covered,
        labels=tuple(span for span in during if span.cat == "user_annotation"),
    )


def folded_calls(trace: Trace, nested_in_own_name: Iterable[Span] | None = None) -> dict[int, int]:
    """The calls that ``key_averages()`` folds into their parent: a call whose only child is a
    call of the same name (``aten::sum`` calling ``aten::sum``) counts once, as the parent.

    Args:
        trace: The loaded trace.
        nested_in_own_name: The spans whose parent has their name, when the caller has found
            them already (they are looked for in every span otherwise).

    Returns:
        ``{id of a folded span: id of the call it is folded into}``, the outermost call of a
        chain of such only children.
    """
    spans = trace.spans
    if nested_in_own_name is None:
        nested_in_own_name = [
            span
            for span in spans
            if span.parent is not None and spans[span.parent].name == span.name
        ]
    nested = sorted(nested_in_own_name, key=attrgetter("id"))  # outer calls first
    if not nested:
        return {}
    # Their parents' direct children, counted in one pass over the trace: scanning each
    # parent's time range instead is quadratic in a deep chain of same-name calls.
    parents = {span.parent for span in nested}
    children = Counter(filter(parents.__contains__, map(_PARENT, spans)))  # at C speed
    folded: dict[int, int] = {}
    for span in nested:
        parent = span.parent
        if children[parent] == 1:
            folded[span.id] = folded.get(parent, parent)  # type: ignore[arg-type]
    return folded


def op_stats(trace: Trace) -> list[OpStats]:
    """Calls, self time and total time of every CPU operator, largest self time first.

    As ``key_averages()`` does, a call whose only child is a call of the same name counts
    once, its child's children as its own. A ``with_stack`` trace's Python frames are
    children like any other span, as in torch 2.13's ``key_averages()``; torch 2.11's left
    them out of its tree, so its self time of an op that runs Python (a custom
    ``autograd.Function``, a compiled region's wrappers) includes that Python.
    """
    spans = trace.spans
    # Per span, in one pass: its direct children's durations, added in start order (as
    # key_averages adds them).
    children_us = [0.0] * len(spans)
    for span in spans:
        parent = span.parent
        if parent is not None:
            children_us[parent] += span.dur
    folded = folded_calls(trace)
    innermost: dict[int, int] = {}  # a folding call: the innermost call folded into it
    for inner, outer in folded.items():  # in span order: the deepest comes last
        innermost[outer] = inner
    calls: dict[str, list[float]] = {}
    for op in trace.cpu_ops:
        if op.id in folded:
            continue
        name = op.name
        inner = innermost.get(op.id, op.id)  # a folded call's children are the call's own
        entry = calls.setdefault(name, [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += max(0.0, op.dur - children_us[inner])
        entry[2] += op.dur
    stats = [OpStats(name, int(n), self_us, total) for name, (n, self_us, total) in calls.items()]
    stats.sort(key=lambda s: (-s.self_us, s.name))
    return stats


HOST_SPEED_MIN_NAMES = 2
""":func:`host_speed_ratio` reads the host's speed from this many kinds of call at least."""
HOST_SPEED_ALIKE = 1.25
"""Two recordings whose :func:`host_speed_ratio` is within this factor of 1 ran at about one
host speed: their CPU times compare."""


def _leaf_call_medians(trace: Trace) -> dict[str, float]:
    """By name, the median duration of the ops and runtime calls of ``trace``'s steps that
    hold no recorded call of their own (a leaf's time is its own work)."""
    covered = trace.children_cover_us
    durations: dict[str, list[float]] = {}
    for span in (*trace.cpu_ops, *trace.runtime_calls):
        if covered[span.id] == 0 and trace.step_of(span) is not None:
            durations.setdefault(span.name, []).append(span.dur)
    return {name: statistics.median(values) for name, values in durations.items()}


def host_speed_ratio(a: Trace, b: Trace) -> tuple[float, int] | None:
    """How much slower the host ran while ``a`` was recorded than while ``b`` was: over the
    kinds of leaf call both recordings' steps make (ops and runtime calls holding no recorded
    call: ``aten::empty``, ``cudaLaunchKernel``...), the median of ``a``'s median duration
    over ``b``'s, with how many kinds it read.

    Two recordings made one after the other on a shared machine can run at different host
    speeds (clocks, other processes): every call of one then takes longer. A CPU cost set
    against another recording's counts only where this is about 1. ``None`` where fewer than
    :data:`HOST_SPEED_MIN_NAMES` kinds of call are in both.
    """
    mine, theirs = _leaf_call_medians(a), _leaf_call_medians(b)
    ratios = [mine[name] / theirs[name] for name in mine.keys() & theirs.keys() if theirs[name] > 0]
    if len(ratios) < HOST_SPEED_MIN_NAMES:
        return None
    return statistics.median(ratios), len(ratios)


def speeds_alike(ratio: float | None) -> bool:
    """Whether a :func:`host_speed_ratio` is within :data:`HOST_SPEED_ALIKE` of 1 (``None``,
    no reading, is not)."""
    return ratio is not None and 1 / HOST_SPEED_ALIKE <= ratio <= HOST_SPEED_ALIKE
