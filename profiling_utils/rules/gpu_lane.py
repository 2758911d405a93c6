"""Cheatsheet table "GPU lane": the profiler's overhead row, gaps, kernel timings, GEMMs and the
copies and memsets around them."""

from __future__ import annotations

import math
import re
import statistics
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cached_property
from itertools import accumulate
from operator import attrgetter
from typing import Any, Literal, NamedTuple

import msgspec

from .. import measures
from ..datasheet import datasheet_peak
from ..kernels import TF32_CAPABLE_KERNEL, fp32_math
from ..roofline import gemm_sizes
from ..tables import percent
from ..trace import LAUNCH_CATEGORIES, DeviceInfo, Span, Step, Trace, element_bytes
from .attention import MATH_BACKEND_OP, SDPA_OP
from .facts import (
    BIAS_MATMUL_OPS,
    MATMUL_OPS,
    Copy,
    Facts,
    Launch,
    gb_s,
    median,
    replayed_without_ops,
    short_name,
    span_ref,
    step_label,
    us,
)
from .registry import Hit, rule

BUFFER_REQUEST = "Activity Buffer Request"
"""The name Kineto gives the profiler's own buffer allocations on the overhead lane."""

GAP_MIN_US = 10.0
"""``intra-step-gap``: the shortest idle stretch worth reporting (µs), whatever the GPU."""

GAP_MIN_LAUNCH_LATENCIES = 5.0
"""``intra-step-gap``: an idle stretch must also last this many of the trace's own launch
latencies (:attr:`~profiling_utils.rules.facts.Facts.launch_latency_us`): about 40 µs on the
H100 recordings, where a launch that finds the GPU idle starts its work 5 to 15 µs later."""

GAP_STANDOUT_RATIO = 2.0
"""``intra-step-gap``: a one-off idle stretch with the next work already queued (held back)
is at least this many times the median of the other steps' longest idle stretch."""

GAP_OTHER_CAUSE_RATIO = 10.0
"""``intra-step-gap``'s host-sync finding also names the GPU's longest idle stretch inside a
step when that one, of another cause, is at least this many times the longest after a sync
(the ResNet traces: 89 µs after a sync, 62 ms waiting for the data loader)."""

GAP_REQUEST_RATIO = 1.5
"""``intra-step-gap``: a one-off idle stretch during which the profiler's buffer request held
the CPU is at least this many times the median of the other steps' longest idle stretch.
Lower than :data:`GAP_STANDOUT_RATIO` because the trace names the cause: in an
overhead-bound loop the usual stretch and a request both last a millisecond or two, and a
request often replaces the step's usual idle time rather than adding to it."""

GAP_SYNC_MIN_SHARE = 0.1
"""``intra-step-gap`` blames an idle stretch on a host sync only when the sync waited for the
GPU for at least this share of the stretch: what the sync took from the host is at most the
time it waited (a sync entered 20 µs before the GPU ran dry, then 4.9 ms of host work before
the next launch, is host time)."""

GAP_REQUEST_MIN_SHARE = 0.5
"""``intra-step-gap`` blames a one-off idle stretch on the profiler's buffer request only when
the request held the CPU thread for at least this share of the time by which the next launch
came late (a cold step's first calls can take 20 ms around a 3 ms request)."""

GAP_MAX_STEP_SHARE = 1 / 3
"""``intra-step-gap``: one-offs show in at most this share of the steps (at least one): an
idle stretch in most steps is a property of the code, not a one-off."""

GAP_BOUNDARY_MIN_SHARE = 0.5
"""``intra-step-gap``: the stretches after a sync that closes a step are read when they show at
more than this share of the step boundaries (the loop's habit, not one step's)."""

GAP_BOUNDARY_MIN_STEP_SHARE = 0.1
"""``intra-step-gap``: ... and when their median is at least this share of the median step (a
sync after which the GPU idles only through the profiler's step bookkeeping costs the step
little)."""

GAP_MIN_STEPS = 2
"""``intra-step-gap``: steps with GPU work needed to call an idle stretch a one-off (there
must be other steps to compare it with), or the stretches after host syncs a habit of the
code."""

_START = attrgetter("start")
_END = attrgetter("end")
_DUR = attrgetter("dur")

HOST_SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaStreamSynchronize_ptsz",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy_ptds",
        "cuStreamSynchronize",
        "cuStreamSynchronize_ptsz",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipStreamSynchronize_spt",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpy_spt",
        "hipMemcpyWithStream",
    }
)
"""Runtime and driver calls that block the calling CPU thread until the GPU has finished
queued work (``tensor.item()``, printing a GPU value, ``nonzero``, a blocking copy; on ROCm,
PyTorch's blocking copies call ``hipMemcpyWithStream``), with the per-thread default-stream
forms (``_ptsz``, ``_ptds``; HIP's ``_spt``) of those that take a stream. A
``cudaMemcpyAsync`` blocks too when its copy is to or from pageable memory
(:func:`is_host_sync`)."""

_ROCM_HOST = "Host"
"""How ROCm's copy names call host memory (``Memcpy DtoH (Device -> Host)``), pageable or
pinned alike; CUDA's say ``Pageable`` or ``Pinned``."""

PAGEABLE = "Pageable"
"""In the name of a copy to or from pageable (not pinned) host memory, as Kineto writes it:
``Memcpy DtoH (Device -> Pageable)``."""


def is_host_sync(trace: Trace, call: Span) -> bool:
    """Whether the runtime or driver call ``call`` can block its CPU thread until the GPU has
    finished the work queued before it: a sync call (:data:`HOST_SYNC_CALLS`), or a call that
    launched a copy to or from pageable memory, whatever its ``Async`` name says: CUDA
    documents that a copy to pageable memory returns only once it is done (after the
    stream's earlier work), and that one from pageable memory may wait for the stream to
    stage it. ``.to("cpu")`` and ``.cuda()`` of an unpinned tensor make them. On ROCm, whose
    copy names say ``Host`` for pinned and pageable memory alike, a copy call that returned
    only once its copy had ended, the copy queued behind work its stream was still running
    when the call began. The rules that use this count a call only where the trace
    shows it waiting while the GPU ran dry."""
    if call.name in HOST_SYNC_CALLS:
        return True
    work = trace.gpu_work_of_id(call.id) if "emcpy" in call.name else None
    for copy in work or ():
        if copy.cat != "gpu_memcpy":
            continue
        if PAGEABLE in copy.name:
            return True
        # ROCm names host memory "Host", pinned or not: a call that returned only once its
        # copy had ended, queued behind work still running on the copy's stream, waited.
        if _ROCM_HOST in copy.name and call.end >= copy.end and _queued_behind(trace, copy, call):
            return True
    return False


def _queued_behind(trace: Trace, copy: Span, call: Span) -> bool:
    """Whether the GPU activity before ``copy`` on its own stream was still running when
    ``call`` (the call that launched the copy) began."""
    on_stream = trace.lane_spans(copy.lane)
    index = bisect_left(on_stream, copy.start, key=_START)
    for earlier in reversed(on_stream[:index]):
        if earlier.is_gpu_work:
            return earlier.end > call.start
    return False


VARIANCE_MIN_RATIO = 1.5
"""``kernel-variance``: a slow instance takes at least this many times its group's median..."""

VARIANCE_MIN_LAUNCH_LATENCIES = 2.0
"""... and is longer than the median by at least this many of the trace's launch latencies
(so that a few microseconds on a tiny kernel do not count)..."""

VARIANCE_MIN_IQRS = 5.0
"""... and by at least this many interquartile ranges of the group (a kernel whose durations
always spread widely is not slow in one step)."""

VARIANCE_MIN_COUNT = 3
"""``kernel-variance``: instances needed to speak of a typical duration."""

VARIANCE_MIN_STEPS = 2
"""``kernel-variance``: steps the instances must come from, so that a slow one can be told
from the others by its step."""

FP32_GEMM_MIN_SHARE = 0.10
"""``fp32-gemm``: the GEMMs computing fp32 on the CUDA cores keep one GPU busy for at least
this share of the steps' GPU time (:attr:`profiling_utils.measures.StepTime.gpu_window_us`;
without steps, of the recording's active time)."""

_REPORTED = 5


def _op_holding(facts: Facts, request: Span, step: Step | None) -> Span | None:
    """The op the profiler's request stalled: the innermost op running when it began, on the
    step's thread, or without a step on the one CPU thread whose op spans the whole request."""
    if step is not None:
        return facts.innermost_cpu_op_at(request.start, step.span.lane)
    found = [
        op
        for lane in facts.trace.lanes
        if lane.kind == "cpu"
        and (op := facts.innermost_cpu_op_at(request.start, lane)) is not None
        and op.end >= request.end
    ]
    return found[0] if len(found) == 1 else None


@rule(
    "buffer-request",
    "GPU lane",
    see="Activity Buffer Request on the profiler's overhead row.",
    means="""The profiler allocating its own event buffers, not your code. With no wait or
    warmup in the schedule it lands in the first profiled step and adds to that step's
    offset between the CPU and GPU lanes; a schedule with wait and warmup steps keeps that
    first request out of the recorded ones, but not a request made mid-run, when a buffer
    fills.""",
    severity="warning",
    example="auto_examples/part1_matmul_add/plot_04_buffer_request_and_offset",
)
def buffer_request(facts: Facts) -> Iterator[Hit]:
    requests = [span for span in facts.trace.overhead if span.name == BUFFER_REQUEST]
    if not requests or not facts.trace.has_gpu:
        # With no GPU work (CUPTI asks for buffers as CUDA starts, work or not) there is no
        # lane offset for the request to make.
        return
    steps = facts.steps
    offsets = {offset.step: offset for offset in measures.lane_offset(facts.trace)}
    for request in requests:
        number = facts.step_number_of(request)
        evidence: dict[str, Any] = {
            "request": span_ref(request),
            "step": number,
            "requests": len(requests),
            "steps": len(steps),
        }
        where = ""
        step = next((s for s in steps if s.number == number), None)
        op = _op_holding(facts, request, step)
        if op is not None:
            evidence["during_op"] = span_ref(op)
            where = f" while {op.name} runs"
        if number is not None:
            where += f" in {step_label(number)}"
            offset = offsets.get(number)
            # The step's lane offset is the request's business only where the request began
            # before the step's first launch call returned.
            if offset is not None and request.start < offset.launch.end:
                evidence["first_launch"] = span_ref(offset.launch)
                evidence["lane_offset_us"] = us(offset.offset_us)
                evidence["step_start_to_gpu_us"] = us(offset.step_start_to_gpu_us)
        counts = (
            "no ProfilerStep#N"
            if not steps
            else f"{len(steps)} step{'s' if len(steps) > 1 else ''}"
        )
        message = (
            f"{BUFFER_REQUEST} for {request.dur:.1f} µs at {request.start:.1f} µs{where} "
            f"({len(requests)} in the trace, {counts})"
        )
        own = 0.0 if op is None else facts.self_us(op)
        if op is not None and request.end <= op.end and own > 0:
            share = min(request.dur / own, 1.0)  # the op's self time holds the whole request
            evidence["share_of_op_self"] = round(share, 4)
            message += f"; it is {percent(share)} of {op.name}'s self time"
        if "first_launch" in evidence:
            launch = evidence["first_launch"]
            message += (
                f"; the step's first GPU work starts {evidence['step_start_to_gpu_us']:.1f} µs "
                f"after the step, its launch ({launch['name']}) takes {launch['dur_us']:.1f} µs"
            )
            queued = measures.queued_before_recording(facts.trace)
            if queued is not None and offset is not None and offset.gpu is queued:
                waited = queued.start - offset.launch.end
                evidence["queued_before_recording_us"] = us(waited)
                message += (
                    f", and the work waits {waited:.1f} µs after it behind GPU work launched "
                    "before the recording began, which the request does not explain"
                )
        yield message + ".", evidence


@rule(
    "intra-step-gap",
    "GPU lane",
    see="""Inside one step, the GPU idles between two activities for a stretch that is long
    against the trace's own launch latency: after a host sync in every step (one that
    closes the step too: the GPU then idles until the next step's first launch), or in one
    step (or few) far longer than the other steps' longest idle.""",
    means="""Read the cause from what the trace shows around the idle stretch. After a host
    sync (.item(), printing a loss, nonzero, a copy to or from unpinned host memory) the
    CPU waited for the GPU to
    run dry and the GPU then waits for the CPU's next launch: your code, in every step. A
    one-off whose next work was launched late, while the profiler's Activity Buffer Request
    held the CPU thread: the profiler, not your code (it starves the GPU when the loop is
    overhead-bound, through the CPU; where every step idles as long, the rule cannot single
    that step out). A one-off whose next work was launched before the
    GPU went idle: something outside the trace held the GPU back (another process, the
    driver). Plain CPU time in every step is the overhead-bound row's business.""",
    severity="warning",
    example="auto_examples/part1_matmul_add/plot_10_gaps_inside_a_step",
)
def intra_step_gap(facts: Facts) -> Iterator[Hit]:
    """Idle stretches of the GPU inside a step, with the cause the trace shows for them.

    An idle stretch is a gap of :func:`profiling_utils.measures.gpu_gaps` (no stream of a
    device ran, inside the step's GPU work), lasting at least :data:`GAP_MIN_US` and
    :data:`GAP_MIN_LAUNCH_LATENCIES` times the trace's launch latency. Each one is read by
    when the activity after it was launched and what the launching CPU thread was doing:

    - **host sync**: a sync call (:func:`is_host_sync`: also a copy to or from pageable
      memory) that began while the GPU still ran earlier work, was waiting when the GPU ran
      dry, and returned before the next launch, having waited for at least
      :data:`GAP_SYNC_MIN_SHARE` of the stretch (else the stretch is the host's time). A
      sync that closes a step (``loss.item()`` after the optimizer) counts for that step:
      the stretch after it runs past the step's end to the next step's first activity
      (:func:`profiling_utils.measures.gpu_gaps_between_steps`), and only this cause is read
      there. Reported once for the trace, with every step that shows it: the code syncs, the
      GPU drains and waits for the CPU.
    - **buffer request**: launched after the GPU went idle while the profiler's Activity
      Buffer Request ran (and held the CPU thread for at least :data:`GAP_REQUEST_MIN_SHARE`
      of the time by which the launch came late); **held back**: launched before the GPU
      went idle. Reported per step
      as one-offs, when the step's stretch stands out against the median of the other steps'
      longest idle stretch (:data:`GAP_REQUEST_RATIO` times for a buffer request,
      :data:`GAP_STANDOUT_RATIO` times for a stretch held back), in at
      most :data:`GAP_MAX_STEP_SHARE` of the steps, with at least :data:`GAP_MIN_STEPS` steps
      to compare.
    - Anything else is CPU time between launches, left to the CPU lane's rows.
    """
    trace = facts.trace
    if not trace.has_gpu or not facts.steps:
        return
    latency = facts.launch_latency_us
    floor = max(GAP_MIN_US, GAP_MIN_LAUNCH_LATENCIES * latency)
    idles, longest = _read_idle_stretches(facts, floor)
    kept = {step.number for step in facts.steps}
    idles = [idle for idle in idles if idle.step in kept]  # the steps the rules take
    if not idles:
        return

    # Steps to compare: those that ran two GPU activities or more (a gap needs two). Both
    # reports need two of them: one step shows neither a pattern nor a one-off.
    steps = [step.number for step in facts.steps if len(step.gpu_work) > 1]
    if len(steps) < GAP_MIN_STEPS:
        return
    after_sync = [idle for idle in idles if idle.cause == "host sync"]
    if after_sync:
        yield _host_sync_hit(facts, after_sync, latency, longest)

    standing_out: dict[int, tuple[IdleStretch, float]] = {}
    for idle in idles:
        if idle.cause not in _ONE_OFF_CAUSES:
            continue  # plain CPU time: the CPU lane's rows (cold-start, overhead-bound)
        if idle.cause == "buffer request" and idle.request is not None:
            held = _overlap_us([idle.request], idle.before.end, idle.launch.end)
            if held < GAP_REQUEST_MIN_SHARE * idle.launched_late_us:
                continue  # mostly the host's own time: the CPU lane's rows as well
        others = median(longest.get(number, 0.0) for number in steps if number != idle.step)
        ratio = GAP_REQUEST_RATIO if idle.cause == "buffer request" else GAP_STANDOUT_RATIO
        if idle.gap_us < ratio * others:
            continue
        known = standing_out.get(idle.step)
        if known is None or idle.gap_us > known[0].gap_us:
            standing_out[idle.step] = (idle, others)
    if not standing_out or len(standing_out) > max(1, int(len(steps) * GAP_MAX_STEP_SHARE)):
        return
    by_step = [[number, us(longest.get(number, 0.0))] for number in steps]
    for number in sorted(standing_out):
        idle, others = standing_out[number]
        yield _one_off_hit(facts, idle, others, sorted(standing_out), latency, by_step)


class IdleStretch(msgspec.Struct, frozen=True, gc=False):
    """A stretch in which no stream of a GPU ran, between two activities of one step (or, after
    a host sync that closes a step, from that step's last activity to the next step's first),
    and the cause the trace shows for it, as ``intra-step-gap`` reads it."""

    step: int
    """N in ``ProfilerStep#N``."""
    before: Span
    """The activity that ended last before the stretch."""
    after: Span
    """The activity that ended it."""
    launch: Span
    """``after``'s launch call."""
    gap_us: float
    """``after.start`` minus the end of ``before``: the GPU's idle time."""
    launched_late_us: float
    """How long after the GPU ran dry ``launch`` returned; negative when it was queued
    before."""
    cause: Literal["host sync", "buffer request", "held back", "CPU time"]
    """``"host sync"``: a sync on the launching thread returned as the GPU ran dry
    (:attr:`sync`); ``"buffer request"``: launched after the GPU ran dry while the profiler's
    Activity Buffer Request ran (:attr:`request`); ``"held back"``: launched before the GPU
    went idle, so something outside the trace held it back; ``"CPU time"``: launched late
    with none of those in the trace, CPU time between launches, which the rule leaves to the
    CPU lane's rows."""
    sync: Span | None
    """The host sync, for ``"host sync"``."""
    request: Span | None
    """The buffer request, for ``"buffer request"``."""


_ONE_OFF_CAUSES = ("buffer request", "held back")


def _read_idle_stretches(
    facts: Facts, floor_us: float
) -> tuple[list[IdleStretch], dict[int, float]]:
    """Every gap (:func:`profiling_utils.measures.gpu_gaps`: no stream of a device ran,
    between two activities launched in the same step) of at least ``floor_us`` whose
    closing activity's launch is in the trace, with its cause; and each step's longest gap,
    of any length."""
    trace = facts.trace
    syncs = _HostSyncs(trace)
    requests = [span for span in trace.overhead if span.name == BUFFER_REQUEST]
    found = []
    longest: dict[int, float] = {}
    launch_of = trace.launch_of_id
    for gap in measures.gpu_gaps(trace):
        number, before, work = gap.step, gap.before, gap.after
        if gap.gap_us > longest.get(number, 0.0):
            longest[number] = gap.gap_us
        launch = launch_of(work.id)
        if gap.gap_us >= floor_us and launch is not None:
            found.append(_read(facts, number, before, before.end, work, launch, syncs, requests))
    if syncs.calls and len(facts.steps) > 1:
        found += _closing_syncs(facts, floor_us, syncs, requests)
    return found, longest


def _closing_syncs(
    facts: Facts, floor_us: float, syncs: _HostSyncs, requests: list[Span]
) -> list[IdleStretch]:
    """The stretches after a host sync that closes a step (``loss.item()`` after the
    optimizer): the GPU idles across the boundary until the next step's first launch, the
    step's own cost when the sync ran in it. Only that cause is read there, and only as a habit
    of the loop that costs its steps something: at more than :data:`GAP_BOUNDARY_MIN_SHARE` of
    the boundaries, with a median of :data:`GAP_BOUNDARY_MIN_STEP_SHARE` of the median
    step or more. A boundary whose next step fetches its data first (a ``DataLoader`` label
    opens in the stretch) is the data loader's, which ``data-loader`` reads."""
    trace = facts.trace
    kept = {step.number for step in facts.steps}
    loaders = [
        span
        for span in trace.find(prefix=measures.DATA_LOADER_PREFIX)
        if span.cat == "user_annotation" and span.lane.kind == "cpu"
    ]
    loader_starts = [span.start for span in loaders]  # find() gives them in start order
    found = []
    for gap in measures.gpu_gaps_between_steps(trace):
        launch = trace.launch_of_id(gap.after.id)
        if gap.step not in kept or gap.gap_us < floor_us or launch is None:
            continue
        idle = _read(
            facts, gap.step, gap.before, gap.before.end, gap.after, launch, syncs, requests
        )
        if idle.cause != "host sync" or idle.sync is None:
            continue
        closing = trace.step_of(idle.sync)
        if closing is None or closing.number != gap.step:
            continue
        first = bisect_left(loader_starts, idle.sync.end)
        if first < len(loaders) and loaders[first].start < launch.start:
            continue  # the next batch is fetched in the stretch
        found.append(idle)
    boundaries = sum(1 for step in facts.steps[1:] if step.number in kept)
    typical_step = median(step.span.dur for step in facts.steps)
    if (
        not found
        or len(found) <= GAP_BOUNDARY_MIN_SHARE * boundaries
        or median(idle.gap_us for idle in found) < GAP_BOUNDARY_MIN_STEP_SHARE * typical_step
    ):
        return []
    return found


class _HostSyncs:
    """The trace's host sync calls (:func:`is_host_sync`), searchable by their end."""

    def __init__(self, trace: Any) -> None:
        # By name (a few hundred) rather than call by call (tens of thousands).
        names = [name for name in trace.by_name if name in HOST_SYNC_CALLS or "emcpy" in name]
        calls = [
            call
            for name in names
            for call in trace.by_name[name]
            if call.cat in LAUNCH_CATEGORIES and is_host_sync(trace, call)
        ]
        self.calls = sorted(calls, key=lambda call: call.end)
        self.ends = [call.end for call in self.calls]
        self._trace = trace

    @cached_property
    def _work(self) -> dict[Any, tuple[list[Span], list[float], list[float]]]:
        """Per device, the activities in start order, their starts, and the latest end so far
        at each (built on the first question: most traces hold no sync worth asking about)."""
        work: dict[Any, list[Span]] = {}
        for activity in self._trace.gpu_work:
            work.setdefault(activity.lane.device, []).append(activity)
        return {
            device: (
                on_device,
                list(map(_START, on_device)),
                list(accumulate(map(_END, on_device), max)),
            )
            for device, on_device in work.items()
        }

    def returning_between(self, start: float, end: float, lane: Any, device: Any) -> Span | None:
        """A sync on ``lane`` that began before ``start``, while ``device`` still had earlier
        work to run (it waited for the GPU, not only for a copy of its own), and returned in
        [start, end]."""
        for index in range(bisect_left(self.ends, start), bisect_right(self.ends, end)):
            call = self.calls[index]
            if call.lane == lane and call.start <= start and self._pending(device, call.start):
                return call
        return None

    def _pending(self, device: Any, time: float) -> bool:
        """Whether ``device`` was running work at ``time``, or had work launched before it
        that had not started yet."""
        on_device, starts, ends_so_far = self._work.get(device, ((), (), ()))
        index = bisect_right(starts, time)
        if index > 0 and ends_so_far[index - 1] > time:
            return True
        if index == len(on_device):
            return False
        launch = self._trace.launch_of_id(on_device[index].id)  # the next to start, queued or not
        return launch is not None and launch.start < time


def _read(
    facts: Facts,
    step: int,
    before: Span,
    idle_from: float,
    after: Span,
    launch: Span,
    syncs: _HostSyncs,
    requests: list[Span],
) -> IdleStretch:
    """The stretch from ``idle_from`` (``before``'s end) to ``after``'s start, with its cause."""
    launched_late = launch.end - idle_from
    sync = request = None
    if launched_late <= 0:
        cause = "held back"
    else:
        start, end = idle_from, launch.start
        # A sync returns once the GPU has run dry, which the CPU learns a little later.
        sync = syncs.returning_between(
            start - facts.launch_latency_us, end, launch.lane, after.lane.device
        )
        if sync is not None and idle_from - sync.start < GAP_SYNC_MIN_SHARE * (
            after.start - idle_from
        ):
            sync = None  # it held the host too briefly to explain the stretch: host time
        if sync is None:
            request = next((r for r in requests if r.start < end and r.end > start), None)
        cause = "host sync" if sync else "buffer request" if request else "CPU time"
    return IdleStretch(
        step, before, after, launch, after.start - idle_from, launched_late, cause, sync, request
    )


def idle_stretches(trace: Trace, min_gap_us: float = 0.0) -> list[IdleStretch]:
    """The GPU's idle stretches inside the steps, each with the cause ``intra-step-gap`` reads
    from the trace.

    A stretch is a gap of :func:`profiling_utils.measures.gpu_gaps` (no stream of a device
    ran, after one of the step's activities ended and before another started) at least
    ``min_gap_us`` long; it is listed when the launch call of the activity that ends it is in
    the trace. They come step by step, each step's in time order, then the stretches after a
    host sync that closes a step (under that step). The rule reports only
    some of them: those after a
    host sync, and one-offs that stand out against the other steps, each at least
    :data:`GAP_MIN_US` and :data:`GAP_MIN_LAUNCH_LATENCIES` launch latencies long; with the
    default ``min_gap_us`` of 0 the shorter ones come too.
    """
    return _read_idle_stretches(Facts(trace), min_gap_us)[0]


class StepIdle(NamedTuple):
    """Where the GPU idles in one step's CPU window, as ``gpu-idle`` reads it
    (:func:`step_idle`), on the GPU that ran most of the step's work."""

    busy_in_window_us: float
    """How long that GPU ran anything (any step's work) inside the step's CPU window."""
    before_us: float
    """From the window's start to the GPU's first activity of the step (0 if it started
    before the window)."""
    between: dict[str, tuple[int, float]]
    """The idle stretches between the step's own activities, cut to the window, by the cause
    :func:`idle_stretches` reads: cause -> (stretches, µs); a stretch whose closing activity's
    launch is not in the trace under ``"launch not recorded"``. Of a ``"buffer request"``
    stretch only the time the request overlaps counts there; the rest of it is the host's
    own time before the launch, added to ``"CPU time"`` (as µs, not as a stretch)."""
    after_us: float
    """From the GPU's last activity of the step to the window's end (0 if it ran past it)."""
    past_end_us: float
    """How long the step's last GPU activity runs past the window's end."""


def step_idle(facts: Facts, step: Step) -> StepIdle | None:
    """Where the GPU that ran most of ``step``'s work idles inside the step's CPU window:
    before its first activity of the step, between them (by cause), after its last; None
    for a step without GPU work."""
    work: dict[Any, list[Span]] = {}
    for activity in step.gpu_work:
        work.setdefault(activity.lane.device, []).append(activity)
    if not work:
        return None
    device = max(work, key=lambda device: sum(map(_DUR, work[device])))
    first = min(map(_START, work[device]))
    last = max(map(_END, work[device]))
    trace = facts.trace
    on_device = [span for span in trace.gpu_work if span.lane.device == device]
    busy = measures.union_within(on_device, step.start, step.end)
    syncs = _HostSyncs(trace)
    requests = [span for span in trace.overhead if span.name == BUFFER_REQUEST]
    between: dict[str, tuple[int, float]] = {}
    for gap in measures.gpu_gaps(trace):
        if gap.step != step.number or gap.device != device:
            continue
        inside = min(gap.after.start, step.end) - max(gap.before.end, step.start)
        if inside <= 0:
            continue  # after the window: the GPU behind the CPU, not waiting in the step
        launch = trace.launch_of_id(gap.after.id)
        if launch is None:
            cause = "launch not recorded"
        else:
            before = gap.before
            cause = _read(
                facts, gap.step, before, before.end, gap.after, launch, syncs, requests
            ).cause
        if cause == "buffer request":
            # The request holds the thread for part of the stretch: the rest is the host's
            # own time before the launch, counted as such (the stretch is counted once).
            held = _overlap_us(
                requests, max(gap.before.end, step.start), min(gap.after.start, step.end)
            )
            if held <= 0:  # the request held it before the window only
                cause = "CPU time"
            else:
                count, total = between.get("CPU time", (0, 0.0))
                if inside - held > 0:
                    between["CPU time"] = (count, total + inside - held)
                inside = held
        count, total = between.get(cause, (0, 0.0))
        between[cause] = (count + 1, total + inside)
    return StepIdle(
        busy,
        max(0.0, first - step.start),
        between,
        max(0.0, step.end - last),
        max(0.0, last - step.end),
    )


def _overlap_us(spans: list[Span], start: float, end: float) -> float:
    """How long ``spans`` (any order, possibly overlapping each other) cover of
    [``start``, ``end``], counted once."""
    pieces = sorted(
        (max(s.start, start), min(s.end, end)) for s in spans if s.start < end and s.end > start
    )
    covered, reached = 0.0, start
    for lo, hi in pieces:
        if hi > reached:
            covered += hi - max(lo, reached)
            reached = hi
    return covered


def _idle_evidence(idle: IdleStretch) -> dict[str, Any]:
    return {
        "step": idle.step,
        "gap_us": us(idle.gap_us),
        "before": span_ref(idle.before),
        "after": span_ref(idle.after),
        "after_launch": span_ref(idle.launch),
        "launched_after_idle_us": us(idle.launched_late_us),
    }


def _host_sync_hit(
    facts: Facts, after_sync: list[IdleStretch], latency: float, longest: dict[int, float]
) -> Hit:
    """The host-sync finding; ``longest`` is each step's longest idle stretch, of any cause,
    so that a far longer stretch of another cause is not passed over in silence."""
    trace = facts.trace
    by_step: dict[int, IdleStretch] = {}
    for idle in after_sync:
        if idle.step not in by_step or idle.gap_us > by_step[idle.step].gap_us:
            by_step[idle.step] = idle
    gaps = [idle.gap_us for idle in by_step.values()]
    idle = max(by_step.values(), key=lambda idle: idle.gap_us)
    sync = idle.sync
    assert sync is not None
    ops = [span for span in trace.ancestors(sync) if span.cat == "cpu_op"]
    outermost = ops[-1] if ops else None  # aten::item rather than _local_scalar_dense
    under = f" under {outermost.name}" if outermost is not None else ""
    if sync.name not in HOST_SYNC_CALLS:  # it launched a copy it waited for
        copies = [w for w in trace.gpu_work_of(sync) or () if w.cat == "gpu_memcpy"]
        pageable = next((w for w in copies if PAGEABLE in w.name), None)
        if pageable is not None:
            direction = "to" if f"-> {PAGEABLE}" in pageable.name else "from"
            waits = "waits" if direction == "to" else "can wait"
            under += f", a copy {direction} pageable memory (which {waits} for the GPU),"
        else:  # ROCm: the copy's name does not say which memory; the call outlasted it
            direction = "to" if copies and f"-> {_ROCM_HOST}" in copies[0].name else "from"
            under += f", a copy {direction} host memory that returned only once it was done,"
    steps = len(facts.steps)
    # The same sync where the GPU had already run dry when it began: no idle of its making.
    outer_name = outermost.name if outermost is not None else None
    syncing: dict[int, Span] = {}
    for call in facts.named(sync.name):
        if call.lane != sync.lane or not is_host_sync(trace, call):
            continue
        calling = [span for span in trace.ancestors(call) if span.cat == "cpu_op"]
        if (calling[-1].name if calling else None) != outer_name:
            continue
        step = trace.step_of(call)
        if step is not None:
            syncing.setdefault(step.number, call)
    kept = {step.number for step in facts.steps}
    syncing = {number: call for number, call in syncing.items() if number in kept}
    message = (
        f"In {len(by_step)} of {steps} steps the GPU idles after a host sync, a median of "
        f"{median(gaps):.1f} µs ({median(gaps) / latency:.1f} launch latencies of "
        f"{latency:.1f} µs); the longest of these, {idle.gap_us:.1f} µs in "
        f"{step_label(idle.step)}, follows {short_name(idle.before.name, 40)}: the CPU thread "
        f"waited in {sync.name}{under} until the GPU ran dry, and the call launching "
        f"{short_name(idle.after.name, 40)} returned {idle.launched_late_us:.1f} µs after that."
    )
    # A sync that closes the last step has no next step's launch to be read against.
    closing = any(trace.step_of(idle.launch) is not trace.step_of(idle.sync) for idle in after_sync)
    last = facts.steps[-1].number
    others = [
        call
        for number, call in syncing.items()
        if number not in by_step and not (closing and number == last)
    ]
    if others:
        pending = _HostSyncs(trace)._pending
        device = idle.after.lane.device
        # As the rule reads a stretch: a sync that began less than a launch latency before
        # the GPU ran dry waited for nothing it had to do.
        dry = sum(not pending(device, call.start + latency) for call in others)
        why = (
            "the GPU had run dry, or had less than a launch latency of work left, when it began"
            if dry == len(others)
            else "the GPU had run dry when it began, or idled after it for less than the rule reads"
        )
        message += (
            f" The thread makes this sync in {len(syncing | by_step.keys())} of the {steps} "
            f"steps; in {len(others)} of the others {why}."
        )
    widest_step, widest = max(
        ((number, gap) for number, gap in longest.items() if number in kept),
        key=lambda item: item[1],
        default=(idle.step, idle.gap_us),
    )
    first_step, first_us = max(
        _idle_before_first(facts).items(), key=lambda item: item[1], default=(None, 0.0)
    )
    if first_us > widest and first_us >= GAP_OTHER_CAUSE_RATIO * idle.gap_us:
        message += (
            f" The GPU's longest idle stretch in a step is not one of them: {first_us:.1f} µs "
            f"in {step_label(first_step)} before the step's first GPU activity, while the host "
            "prepared it (data-loader and dead-window read that time)."
        )
    elif widest >= GAP_OTHER_CAUSE_RATIO * idle.gap_us:
        message += (
            f" The GPU's longest idle stretch in a step is not one of them: "
            f"{widest:.1f} µs between activities of {step_label(widest_step)}, "
        )
        message += _widest_stretch_words(facts, widest_step, widest)
    return (
        message,
        {
            **_idle_evidence(idle),
            "cause": "host sync",
            "sync": span_ref(sync),
            "sync_op": span_ref(outermost) if outermost is not None else None,
            "steps_with_gap": sorted(by_step),
            "steps_with_sync": sorted(syncing.keys() | by_step.keys()),
            "steps": steps,
            "median_gap_us": us(median(gaps)),
            "gap_by_step_us": [[number, us(by_step[number].gap_us)] for number in sorted(by_step)],
            "launch_latency_us": us(latency),
            "longest_idle_us": us(widest),
            "longest_idle_step": widest_step,
            "longest_idle_before_first_us": us(first_us),
            "longest_idle_before_first_step": first_step,
        },
    )


def _idle_before_first(facts: Facts) -> dict[int, float]:
    """For each step the rules read, how long the GPU that runs its first activity idles in
    the step's CPU window before that activity starts (no work of any step on it then)."""
    trace = facts.trace
    by_device: dict[Any, list[Span]] = {}
    for work in trace.gpu_work:
        by_device.setdefault(work.lane.device, []).append(work)
    ends = {device: list(accumulate(map(_END, work), max)) for device, work in by_device.items()}
    ids = {device: [w.id for w in work] for device, work in by_device.items()}
    idle = {}
    for step in facts.steps:
        if not step.gpu_work:
            continue
        first = min(step.gpu_work, key=_START)
        device = first.lane.device
        index = bisect_left(ids[device], first.id)
        earlier = ends[device][index - 1] if index > 0 else -math.inf
        idle[step.number] = max(0.0, first.start - max(step.start, earlier))
    return idle


def _widest_stretch_words(facts: Facts, step: int, gap_us: float) -> str:
    """What the trace shows of step ``step``'s idle stretch of ``gap_us`` (one of
    :func:`profiling_utils.measures.gpu_gaps`) that is not a host sync's: its next work
    queued before it (held back), or launched late; and a host sync that waited through all
    of it, on any thread."""
    trace = facts.trace
    gap = next((g for g in measures.gpu_gaps(trace) if g.step == step and g.gap_us == gap_us), None)
    launch = None if gap is None else trace.launch_of_id(gap.after.id)
    if gap is None or launch is None:
        return "with no host sync before it."
    syncs = _HostSyncs(trace)
    requests = [span for span in trace.overhead if span.name == BUFFER_REQUEST]
    idle = _read(facts, step, gap.before, gap.before.end, gap.after, launch, syncs, requests)
    if idle.cause == "held back":
        words = (
            f"with its next work queued {-idle.launched_late_us:.1f} µs before the GPU went "
            "idle: something outside the trace held the GPU back"
        )
    elif idle.cause == "buffer request":
        words = "while the profiler's Activity Buffer Request held the launching thread"
    else:
        words = "with no host sync before it"
    start, end = gap.before.end, gap.after.start
    waiting = max(
        (call for call in syncs.calls if call.start <= start and call.end >= end),
        key=_DUR,
        default=None,
    )
    if waiting is not None:
        words += (
            f"; {waiting.name} on {waiting.lane.label} ({waiting.dur:.1f} µs) waited through "
            "all of it"
        )
    return words + "."


def _one_off_hit(
    facts: Facts,
    idle: IdleStretch,
    others_us: float,
    standing_out: list[int],
    latency: float,
    longest_by_step: list[list[float]],
) -> Hit:
    steps = len(facts.steps)
    evidence = {
        **_idle_evidence(idle),
        "others_longest_median_us": us(others_us),
        "longest_idle_by_step_us": longest_by_step,
        "steps_with_gap": standing_out,
        "steps": steps,
        "launch_latency_us": us(latency),
    }
    head = (
        f"In {step_label(idle.step)} the GPU idles {idle.gap_us:.1f} µs between "
        f"{short_name(idle.before.name, 40)} and {short_name(idle.after.name, 40)}, against a "
        f"median of {others_us:.1f} µs for the other steps' longest idle"
    )
    if idle.cause == "held back":
        evidence["cause"] = "held back"
        tail = (
            f"; the latter's launch call returned {-idle.launched_late_us:.1f} µs before the "
            "GPU went idle and nothing of this trace ran meanwhile: something outside it held "
            "the GPU back (another process, the driver)"
        )
    else:
        request = idle.request
        assert request is not None
        evidence["cause"] = "buffer request"
        evidence["request"] = span_ref(request)
        op = facts.innermost_cpu_op_at(request.start, idle.launch.lane)
        during = f" during {op.name}" if op is not None else ""
        tail = (
            f"; the latter's launch call returned {idle.launched_late_us:.1f} µs after the GPU "
            f"ran dry, while the profiler's {BUFFER_REQUEST} ({request.dur:.1f} µs{during}) "
            "held the CPU thread: the profiler, not your code"
        )
    return head + tail + f" ({len(standing_out)} of {steps} steps stand out).", evidence


@rule(
    "kernel-variance",
    "GPU lane",
    see="""The same kernel, with the same launch configuration, far slower in some steps
    than its median: by more than its usual spread and than a few launch latencies.""",
    means="""Something competed with it for the GPU. The evidence names the slow steps and
    what of the trace ran on the GPU at the same time (another stream's kernels or copies);
    when nothing did, the cause is outside the trace: another process sharing the GPU
    (time-slicing), or clocks lowered by power or temperature. Communication kernels are left
    out (their time is mostly waiting for other ranks). Report the median, not the mean.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_07_kernel_variance",
)
def kernel_variance(facts: Facts) -> Iterator[Hit]:
    """Kernels far slower in some steps than in the others, with what overlapped them.

    Kernels are compared by role: the same name, grid and block (as the launch call records
    them on ROCm), and the same rank among such kernels in their step, over at least
    :data:`VARIANCE_MIN_COUNT` steps (and :data:`VARIANCE_MIN_STEPS`). An instance is slow
    when it takes at least :data:`VARIANCE_MIN_RATIO` times the role's median and exceeds it
    by at least :data:`VARIANCE_MIN_LAUNCH_LATENCIES` launch latencies and
    :data:`VARIANCE_MIN_IQRS` interquartile ranges. Communication kernels are left out. One
    finding per kernel and configuration (its most deviant role), for the five most deviant
    kernels; each slow instance lists the trace's other GPU work that overlapped it.
    """
    latency = facts.launch_latency_us
    communication = facts.communication_ids
    in_steps = [
        [work for work in step.gpu_work if work.cat == "kernel" and work.id not in communication]
        for step in facts.steps
    ]
    # A name whose slowest instance is under VARIANCE_MIN_RATIO times its fastest, or within
    # VARIANCE_MIN_LAUNCH_LATENCIES launch latencies of it, has no slow instance in any role
    # (a role's median is at least the fastest): its launch configurations are not read.
    fastest: dict[str, float] = {}
    slowest: dict[str, float] = {}
    for kernels in in_steps:
        for kernel in kernels:
            name, dur = kernel.name, kernel.dur
            if dur < fastest.get(name, math.inf):
                fastest[name] = dur
            if dur > slowest.get(name, -math.inf):
                slowest[name] = dur
    least_spread = VARIANCE_MIN_LAUNCH_LATENCIES * latency
    candidates = {
        name
        for name, low in fastest.items()
        if slowest[name] >= VARIANCE_MIN_RATIO * low and slowest[name] - low >= least_spread
    }
    # A role: the same kernel, launch configuration and rank among its like in the step (the
    # third bf16 GEMM of grid g), so that one name reused by layers of different sizes is
    # compared with itself step by step, not with the other layers.
    roles: dict[tuple[str, str, int], list[Span]] = {}
    configs: dict[tuple[bytes, bytes], str] = {}  # _launch_config by the raw grid and block
    launch_of = facts.trace.launch_of
    for kernels in in_steps if candidates else ():
        seen: dict[tuple[str, str], int] = {}
        for work in kernels:
            if work.name not in candidates:
                continue
            name, config = kind = (work.name, _launch_config(work, configs, launch_of))
            rank = seen.get(kind, 0)
            roles.setdefault((name, config, rank), []).append(work)
            seen[kind] = rank + 1
    found: dict[tuple[str, str], tuple[float, list[Span], list[Span], float, float, float]] = {}
    for (name, config, _), same in roles.items():
        if len(same) < max(VARIANCE_MIN_COUNT, VARIANCE_MIN_STEPS):
            continue
        durations = [k.dur for k in same]
        typical = median(durations)
        if typical <= 0:  # recorded as 0 µs (times rounded to the µs): no scale to compare
            continue
        q1, _, q3 = statistics.quantiles(durations, n=4, method="inclusive")
        least_excess = max(VARIANCE_MIN_LAUNCH_LATENCIES * latency, VARIANCE_MIN_IQRS * (q3 - q1))
        slow = [
            k
            for k in same
            if k.dur >= VARIANCE_MIN_RATIO * typical and k.dur - typical >= least_excess
        ]
        if not slow:
            continue
        ratio = max(k.dur for k in slow) / typical
        known = found.get((name, config))
        if known is None or ratio > known[0]:
            found[(name, config)] = (ratio, same, slow, typical, q3 - q1, least_excess)
    worst = sorted(found.items(), key=lambda item: -item[1][0])
    for (name, _), (_, same, slow, typical, iqr, least_excess) in worst[:_REPORTED]:
        yield _variance_hit(facts, name, same, slow, typical, iqr, least_excess, len(worst))


class _LaunchConfig(msgspec.Struct, gc=False):
    grid: msgspec.Raw = msgspec.Raw()
    block: msgspec.Raw = msgspec.Raw()


_LAUNCH_CONFIG = msgspec.json.Decoder(_LaunchConfig)
_NO_CONFIG = (b"", b"")
_VALUE = msgspec.json.Decoder()


def _raw_launch_config(span: Span | None) -> tuple[bytes, bytes]:
    if span is None or not span.raw_args:
        return _NO_CONFIG
    try:
        config = _LAUNCH_CONFIG.decode(span.raw_args)
    except msgspec.ValidationError:  # args that are not an object: none recorded
        return _NO_CONFIG
    return bytes(config.grid), bytes(config.block)


def _launch_config(
    kernel: Span,
    known: dict[tuple[bytes, bytes], str],
    launch_of: Callable[[Span], Span | None],
) -> str:
    """``repr((grid, block))`` of a kernel's args (``None`` for one not recorded), or of its
    launch call's where the kernel records none (ROCm's), read without decoding the rest of
    the args (half the time of :attr:`Span.args` over every kernel of a large trace), and each
    distinct pair turned into text once (``known``, by raw JSON)."""
    key = _raw_launch_config(kernel)
    if key == _NO_CONFIG:
        key = _raw_launch_config(launch_of(kernel))
    text = known.get(key)
    if text is None:
        grid, block = (_VALUE.decode(raw) if raw else None for raw in key)
        text = known[key] = repr((grid, block))
    return text


def _variance_hit(
    facts: Facts,
    name: str,
    same: list[Span],
    slow: list[Span],
    typical: float,
    iqr: float,
    least_excess: float,
    kernels_found: int,
) -> Hit:
    slowest = max(slow, key=lambda k: k.dur)
    mean = sum(k.dur for k in same) / len(same)
    reported = sorted(slow, key=lambda k: -k.dur)[:_REPORTED]
    slow_rows = []
    for kernel in reported:
        overlapping = _overlapping_work(facts, kernel)
        slow_rows.append(
            {
                **span_ref(kernel),
                "step": facts.step_number_of(kernel),
                "overlapping": overlapping[:_REPORTED],
                "overlap_us": us(sum(row["overlap_us"] for row in overlapping)),
            }
        )
    number = facts.step_number_of(slowest)
    where = f" in {step_label(number)}" if number is not None else ""
    overlapped = slow_rows[0]["overlapping"]
    if overlapped:
        names = ", ".join(
            f"{short_name(row['name'], 40)} (stream {row['stream']})" for row in overlapped[:2]
        )
        cause = f"other work of this trace ran on the GPU at the same time: {names}"
    else:
        cause = (
            "nothing else of this trace ran on the GPU meanwhile: the cause is outside the "
            "trace (another process sharing the GPU, or its clocks)"
        )
    steps = facts.step_numbers(slow)
    return (
        f"{short_name(name)} runs in {len(same)} steps with a median of {typical:.1f} µs (IQR "
        f"{iqr:.1f} µs) but takes {slowest.dur:.1f} µs{where} ({slowest.dur / typical:.1f}×); "
        f"{len(slow)} slow instance(s) in step(s) {steps[:_REPORTED]}; {cause}.",
        {
            "kernel": name,
            "grid": slowest.args.get("grid"),
            "block": slowest.args.get("block"),
            "count": len(same),
            "median_us": us(typical),
            "iqr_us": us(iqr),
            "mean_us": us(mean),
            "min_us": us(min(k.dur for k in same)),
            "max_us": us(slowest.dur),
            "least_excess_us": us(least_excess),
            "slow_steps": steps,
            "slow": slow_rows,
            "kernels_found": kernels_found,
        },
    )


def _overlapping_work(facts: Facts, kernel: Span) -> list[dict[str, Any]]:
    """The trace's other GPU work on ``kernel``'s device that overlapped it, longest overlap
    first."""
    work = facts.trace.gpu_work  # in start order
    longest = max(w.dur for w in work)
    rows = []
    index = bisect_left(work, kernel.end, key=attrgetter("start"))
    while index > 0:
        index -= 1
        other = work[index]
        if other.start + longest <= kernel.start:
            break  # nothing earlier can reach into the kernel
        if other is kernel or other.lane.device != kernel.lane.device or other.end <= kernel.start:
            continue
        overlap = min(other.end, kernel.end) - max(other.start, kernel.start)
        rows.append({**span_ref(other), "stream": other.lane.stream, "overlap_us": us(overlap)})
    rows.sort(key=lambda row: -row["overlap_us"])
    return rows


@rule(
    "gemm-kernel",
    "GPU lane",
    see="""The kernel under a matrix-multiply op (aten::mm, aten::addmm, aten::bmm...), whatever
    its name: ampere_bf16_s16816gemm... on an A100; nvjet_sm90_... or sm80_xmma_gemm... on an
    H100.""",
    means="""The actual GEMM work: a cuBLAS/cuBLASLt kernel picked for the shapes, dtype and
    GPU. Its name encodes the architecture and tiling, so compare runs by op and duration,
    not by name: the same shapes can pick another variant when the bias is added differently
    (on an H100, compiling the post's mm + add into an addmm with a full-matrix bias runs a
    bias-accumulating variant of the eager kernel). Its share of GPU time leaves the
    collectives' kernels out, as hotspot's does.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def gemm_kernel(facts: Facts) -> Iterator[Hit]:
    gemms = facts.gemm_launches
    if not gemms:
        return
    by_name: dict[str, list[tuple[Launch, Span]]] = {}
    for launch, kernel in gemms:
        by_name.setdefault(kernel.name, []).append((launch, kernel))
    # As hotspot: a collective's kernel spins while it waits for its peers, no compute.
    communication = facts.communication_ids
    gpu_total = facts.compute_gpu_us
    # A CUDA graph's replay runs the GEMMs it captured with no op around them (a serving
    # engine's decode steps): counted beside the op's own runs, in their time too.
    replayed: dict[str, list[Span]] = {}
    for launch in facts.graph_launches:
        for work in facts.trace.gpu_work_of(launch) or ():
            if work.name in by_name:
                replayed.setdefault(work.name, []).append(work)
    rows = []
    for name, members in by_name.items():
        runs = [kernel for _, kernel in members] + replayed.get(name, [])
        total = sum(kernel.dur for kernel in runs)
        row = {
            "kernel": name,
            "count": len(members),
            "ops": dict(Counter(launch.op.name for launch, _ in members if launch.op)),
            "apis": dict(Counter(launch.call.name for launch, _ in members)),
            "median_us": us(median(kernel.dur for kernel in runs)),
            "total_us": us(total),
            "gpu_share": round(total / gpu_total, 4) if gpu_total > 0 else None,
        }
        if name in replayed:
            row["replayed_in_graphs"] = len(replayed[name])
        rows.append(row)
    rows.sort(key=lambda row: -row["total_us"])
    top = rows[0]
    share = top["gpu_share"]  # None when every GPU activity was recorded as 0 µs
    besides = " besides communication" if communication else ""
    of_gpu_time = f", {percent(share)} of GPU time{besides}" if share is not None else ""
    message = (
        f"{len(rows)} GEMM kernel(s) under matrix-multiply ops; the largest, "
        f"{short_name(top['kernel'])}, runs {top['count']}× from {', '.join(top['ops'])} "
        f"(median {top['median_us']:.1f} µs{of_gpu_time})."
    )
    if "replayed_in_graphs" in top:
        message = (
            f"{message[:-1]}; it also runs {top['replayed_in_graphs']:,}× in CUDA/HIP graph "
            "replays, where no op launches it (its median and share count those runs too)."
        )
    evidence: dict[str, Any] = {"kernels": rows[:_REPORTED], "gemm_kernels": len(rows)}
    # Kernels that only graph replays run have no op in the trace to say what they compute:
    # a decode step's GEMMs, captured before the recording, may outweigh every GEMM ranked.
    only_replayed = replayed_without_ops(facts, top["total_us"], "a GEMM", "ranked")
    if only_replayed is not None:
        words, evidence["only_replayed_kernels"], evidence["only_replayed_us"] = only_replayed
        message += words
    yield message, evidence


GEMM_ALIGNMENT_BYTES = 16
"""The alignment, in bytes, of a GEMM's rows that the fast kernels need (the tensor cores'
wide loads, Hopper's TMA): a row of ``k`` or ``n`` elements whose length in bytes is not a
multiple of it leaves the next row unaligned."""

GEMM_ALIGNMENT_MIN_SHARE = 0.05
"""``gemm-alignment`` fires when GEMMs with unaligned rows take at least this share of the
GPU's time (besides communication)."""

_ALIGN_IN_NAME = re.compile(r"_align(\d+)\b")


GEMM_ALIGNMENT_MIN_SIZE = 64
"""A size below this many elements (a classifier's ten classes) is left to the GEMM's small
size, not its alignment: padding it would gain little."""


def _unaligned(sizes: tuple[int, int, int, int], size: int, kernel: str) -> list[str]:
    """``["n=50257"]``: of a GEMM's ``sizes`` (``(batch, m, n, k)``, elements of ``size``
    bytes), those of :data:`GEMM_ALIGNMENT_MIN_SIZE` elements or more that leave rows
    unaligned to :data:`GEMM_ALIGNMENT_BYTES`: the output width n (the output is a new
    row-major tensor), and the inner size k where the kernel's name says it reads unaligned
    data (``align1``: whether k sets a row's length depends on a layout the trace does not
    record). None where the kernel's name says it reads aligned data."""
    said = _ALIGN_IN_NAME.search(kernel)
    built_for = None if said is None else int(said[1]) * size
    if built_for is not None and built_for >= GEMM_ALIGNMENT_BYTES:
        return []
    _, _, n, k = sizes
    return [
        f"{label}={value}"
        for label, value in (("k", k), ("n", n))
        if value >= GEMM_ALIGNMENT_MIN_SIZE
        and (value * size) % GEMM_ALIGNMENT_BYTES
        and (label == "n" or built_for is not None)
    ]


@rule(
    "gemm-alignment",
    "GPU lane",
    see="""A matrix multiply (aten::mm, aten::addmm, aten::linear...) whose recorded shapes
    give an inner size k or an output width n (of 64 elements or more) that is not a multiple
    of 16 bytes of its dtype (8 elements in fp16 or bf16, 4 in TF32) takes a good part of the
    GPU's time; its kernel's name often says so (align1, align2).""",
    means="""The matrices' rows do not start on 16-byte boundaries, which the fast GEMM kernels
    need (the tensor cores' wide loads, Hopper's TMA): the library falls back to kernels for
    unaligned data, often several times slower. Pad the size to a multiple of 8 elements, or
    of 64 (a vocabulary of 50,257 to 50,304); the language-model head and odd hidden sizes
    are the usual places.""",
    severity="warning",
    from_post=False,
)
def gemm_alignment(facts: Facts) -> Iterator[Hit]:
    gpu_total = facts.compute_gpu_us
    if gpu_total <= 0:
        return
    groups: dict[tuple[str, tuple[int, int, int, int], str], list[tuple[Span, Span]]] = {}
    for launch, kernel in facts.gemm_launches:
        if launch.op is None:
            continue
        sized = gemm_sizes(launch.op)
        if sized is None:
            continue
        sizes, dtype = sized
        size = element_bytes(dtype)
        # Tensor-core math only: fp16, bf16, fp8, int8, and fp32 where its kernel is TF32's.
        if size is None or size > 4 or (size == 4 and fp32_math(kernel.name) != "tf32"):
            continue
        if _unaligned(sizes, size, kernel.name):
            groups.setdefault((launch.op.name, sizes, dtype), []).append((launch.op, kernel))
    if not groups:
        return
    unaligned_us = sum(kernel.dur for members in groups.values() for _, kernel in members)
    if unaligned_us < GEMM_ALIGNMENT_MIN_SHARE * gpu_total:
        return
    rows = []
    for (name, (batch, m, n, k), dtype), members in groups.items():
        size = element_bytes(dtype) or 1
        total = sum(kernel.dur for _, kernel in members)
        calls = len({op.id for op, _ in members})
        kernels = Counter(kernel.name for _, kernel in members)
        rows.append(
            {
                "op": name,
                "batch_m_n_k": [batch, m, n, k],
                "dtype": dtype,
                "unaligned": _unaligned((batch, m, n, k), size, members[0][1].name),
                "calls": calls,
                "gpu_us": us(total),
                "gpu_share": round(total / gpu_total, 4),
                "tflops": round(2 * batch * m * n * k * calls / total / 1e6, 2)
                if total > 0
                else None,
                "kernels": dict(kernels.most_common()),
            }
        )
    rows.sort(key=lambda row: -row["gpu_us"])
    top = rows[0]
    kernel = next(iter(top["kernels"]))
    aligned_for = _ALIGN_IN_NAME.search(kernel)
    says = (
        f", whose name says it is built for data aligned to {aligned_for[1]} element(s)"
        if aligned_for
        and int(aligned_for[1]) * (element_bytes(top["dtype"]) or 1) < GEMM_ALIGNMENT_BYTES
        else ""
    )
    batch, m, n, k = top["batch_m_n_k"]
    shape = f"{'' if batch == 1 else f'{batch} × '}[{m}, {k}] @ [{k}, {n}]"
    rate = f" at {top['tflops']:,.1f} TFLOP/s" if top["tflops"] is not None else ""
    elements = GEMM_ALIGNMENT_BYTES // (element_bytes(top["dtype"]) or 1)
    yield (
        f"GEMMs whose rows are not 16-byte aligned take {percent(unaligned_us / gpu_total)} "
        f"of GPU time{' besides communication' if facts.trace.communication else ''} "
        f"({len(rows)} shape(s)); the largest, {top['op']} of {shape} ({top['dtype']}"
        f"{' in TF32' if element_bytes(top['dtype']) == 4 else ''}), "
        f"{' and '.join(top['unaligned'])} not a multiple of {elements}, runs "
        f"{top['calls']}× for {top['gpu_us']:,.1f} µs{rate} in "
        f"{short_name(kernel)}{says}.",
        {
            "unaligned_gpu_us": us(unaligned_us),
            "gpu_share": round(unaligned_us / gpu_total, 4),
            "shapes": rows[:_REPORTED],
        },
    )


_ATTENTION_OPS = frozenset({SDPA_OP, MATH_BACKEND_OP})


def _in_attention(spans: list[Span], op: Span) -> bool:
    """Whether ``op`` runs inside scaled_dot_product_attention (its math backend's GEMMs)."""
    parent = op.parent
    while parent is not None:
        above = spans[parent]
        if above.name in _ATTENTION_OPS:
            return True
        parent = above.parent
    return False


def _has_tf32(trace: Trace, kernel: Span) -> DeviceInfo | None | Literal[False]:
    """The device that ran ``kernel`` if it has TF32 tensor cores (``None`` for one the trace
    does not describe), ``False`` if it has none: NVIDIA with compute capability 8.0 or newer,
    from ``deviceProperties``, else from a kernel name built for such a GPU."""
    device = next((d for d in trace.devices if d.id == kernel.lane.device), None)
    if device is not None and device.vendor == "amd":
        return False
    if device is not None and device.vendor == "nvidia" and device.compute_capability:
        return device if device.compute_capability >= (8, 0) else False
    return device if TF32_CAPABLE_KERNEL.search(kernel.name) else False


def _fp32_gemm_share(facts: Facts, kernels: list[Span]) -> tuple[float, float, str]:
    """The time ``kernels`` (of one device) keep it busy, the time that is a share of, and
    which time that is: the steps' GPU windows, or without steps the recording's active time
    (the device's first to last activity where no CPU thread was recorded)."""
    if facts.steps:
        kept = {step.number for step in facts.steps}
        step_of = facts.step_of_gpu_work
        inside = [kernel for kernel in kernels if step_of(kernel.id) in kept]
        window = sum(times.gpu_window_us for times in facts.step_times)
        return measures.union_us(inside), window, "the steps' time"
    window = facts.host_active_us
    if window <= 0:
        device = kernels[0].lane.device
        on_device = [work for work in facts.trace.gpu_work if work.lane.device == device]
        window = max(map(_END, on_device)) - on_device[0].start
    return measures.union_us(kernels), window, "the host's active time (no steps to read)"


@rule(
    "fp32-gemm",
    "GPU lane",
    see="""GEMM kernels under matrix-multiply ops whose names say fp32 math on the CUDA cores
    (sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_..., ampere_sgemm_..., cutlass_80_simt_sgemm_...)
    keep an A100, H100 or newer GPU busy for a good part of the steps, and no GEMM of the
    trace runs a TF32 kernel (tf32 or s1688gemm in its name).""",
    means="""The fp32 matrix multiplies run at the plain fp32 rate, a small part of what the
    tensor cores reach in TF32 (an H100 SXM's datasheet: 495 TFLOP/s dense in TF32, 67 in fp32).
    PyTorch leaves TF32 off for matmuls unless asked (cuDNN's convolutions have it on by
    default). If TF32's 10-bit mantissa suits the model,
    torch.set_float32_matmul_precision("high") lets cuBLAS use the tensor cores; autocast to
    bf16 goes further. The GEMMs of attention's math backend are attention-math-fp32's.""",
    severity="warning",
    from_post=False,
    example="auto_examples/part1_matmul_add/plot_06_launch_planning",
)
def fp32_gemm(facts: Facts) -> Iterator[Hit]:
    trace = facts.trace
    by_device: dict[Any, list[tuple[Launch, Span]]] = {}
    described: dict[Any, DeviceInfo | None] = {}
    for launch, kernel in facts.gemm_launches:
        math = fp32_math(kernel.name)
        if math == "tf32":
            return  # TF32 is allowed: cuBLAS chose CUDA cores for the others' shapes
        if math != "fp32" or _in_attention(trace.spans, launch.op):
            continue
        device = _has_tf32(trace, kernel)
        if device is not False:
            by_device.setdefault(kernel.lane.device, []).append((launch, kernel))
            described[kernel.lane.device] = device
    shares = []
    for device_id, pairs in by_device.items():
        busy, window, basis = _fp32_gemm_share(facts, [kernel for _, kernel in pairs])
        if window > 0:
            shares.append((busy / window, busy, window, basis, device_id))
    if not shares:
        return
    share, busy, window, basis, device_id = max(shares, key=lambda entry: entry[0])
    if share < FP32_GEMM_MIN_SHARE:
        return
    pairs = by_device[device_id]
    by_name: dict[str, list[tuple[Launch, Span]]] = {}
    for launch, kernel in pairs:
        by_name.setdefault(kernel.name, []).append((launch, kernel))
    rows = [
        {
            "kernel": name,
            "count": len(members),
            "ops": dict(Counter(launch.op.name for launch, _ in members if launch.op)),
            "median_us": us(median(kernel.dur for _, kernel in members)),
            "total_us": us(sum(kernel.dur for _, kernel in members)),
        }
        for name, members in by_name.items()
    ]
    rows.sort(key=lambda row: -row["total_us"])
    top = rows[0]
    device = described[device_id]
    where = f"GPU {device_id}" if len(by_device) > 1 else "the GPU"
    if device is not None and device.compute_capability:
        major, minor = device.compute_capability
        gpu = f"The {device.model} (compute capability {major}.{minor})"
    else:
        gpu = "This GPU (its kernels are built for compute capability 8.0 or newer)"
    fp32 = datasheet_peak(device.name, "fp32") if device is not None else None
    tf32 = datasheet_peak(device.name, "tf32") if device is not None else None
    rates = (
        f" ({tf32.value:,.6g} dense TFLOP/s in TF32 against {fp32.value:,.6g} in fp32, per "
        "its datasheet)"
        if fp32 is not None and tf32 is not None
        else ""
    )
    yield (
        f"On {where}, fp32 GEMMs ran on the CUDA cores for {percent(share)} of {basis} "
        f"({len(pairs)} kernel runs; the one with the most time, {short_name(top['kernel'])}, ran "
        f"{top['count']}× from {', '.join(top['ops'])}, median {top['median_us']:.1f} µs), "
        f"and no GEMM ran a TF32 kernel. {gpu} has TF32 tensor cores{rates}: if TF32's "
        'precision suits the model, torch.set_float32_matmul_precision("high") lets cuBLAS '
        "use them.",
        {
            "device": device_id,
            "share": round(share, 4),
            "of": "steps" if facts.steps else "recording",
            "fp32_gemm_us": us(busy),
            "window_us": us(window),
            "kernels": rows[:_REPORTED],
            "fp32_gemm_kernels": len(rows),
            "datasheet_tflops": (
                {"fp32": fp32.value, "tf32": tf32.value, "source": tf32.source}
                if fp32 is not None and tf32 is not None
                else None
            ),
        },
    )


def _before_gemm(facts: Facts, kind: str, ops: frozenset[str]) -> list[tuple[Copy, Span]]:
    """Copies (or memsets) of ``kind`` issued by one of ``ops`` and followed, on the GPU, by a
    kernel of the same op (with at most other copies or memsets in between)."""
    pairs = []
    for copy in facts.program_copies:
        op = copy.launch.op
        if copy.kind != kind or op is None or op.name not in ops:
            continue
        sequence = sorted(
            (work for launch in facts.launches_by_op[op.id] for work in launch.work),
            key=lambda work: work.start,
        )
        after = sequence[sequence.index(copy.work) + 1 :]
        kernel = next((work for work in after if work.cat == "kernel"), None)
        if kernel is not None:  # the first kernel after it: only copies or memsets between
            pairs.append((copy, kernel))
    return pairs


def _pair_rows(facts: Facts, pairs: list[tuple[Copy, Span]]) -> dict[str, Any]:
    """The pairs' numbers; ``op``, ``bytes`` and ``gemm_kernel`` are the most frequent (with
    ``ops``, ``sizes`` and ``gemm_kernels`` counting each), ``first`` the first pair."""
    copy, kernel = pairs[0]
    bandwidths = [c.bandwidth_gb_s for c, _ in pairs if c.bandwidth_gb_s is not None]
    ops = Counter(c.launch.op.name if c.launch.op else None for c, _ in pairs)
    sizes = Counter(c.bytes for c, _ in pairs)
    kernels = Counter(k.name for _, k in pairs)
    return {
        "count": len(pairs),
        "op": ops.most_common(1)[0][0],
        "ops": dict(ops.most_common()),
        "bytes": sizes.most_common(1)[0][0],
        "sizes": len(sizes),
        "gemm_kernels": len(kernels),
        "median_us": us(median(c.work.dur for c, _ in pairs)),
        "median_bandwidth_gb_s": gb_s(median(bandwidths)) if bandwidths else None,
        "gemm_kernel": kernels.most_common(1)[0][0],
        "gemm_median_us": us(median(k.dur for _, k in pairs)),
        "steps": facts.step_numbers(c.work for c, _ in pairs),
        "first": {
            "copy": span_ref(copy.work),
            "gemm": span_ref(kernel),
            "gap_us": us(kernel.start - copy.work.end),
        },
    }


@rule(
    "bias-copy",
    "GPU lane",
    see="A Memcpy DtoD right before a GEMM, both issued by the same addmm-like op.",
    means="""addmm seeding its output with the bias (out = bias, then out = A·B + out): the add
    is folded into the GEMM's epilogue, the "fusion" happens at the dispatcher, and the copy
    still moves the whole bias once. A bias that is a vector can go into a bias epilogue
    with no copy, as nn.Linear's addmm does.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def bias_copy(facts: Facts) -> Iterator[Hit]:
    pairs = _before_gemm(facts, "DtoD", BIAS_MATMUL_OPS)
    if not pairs:
        return
    row = _pair_rows(facts, pairs)
    size = f"{row['bytes']:,} B" if row["bytes"] is not None else "bytes unknown"
    bandwidth = row["median_bandwidth_gb_s"]
    yield (
        f"{row['count']} Memcpy DtoD ({_most_often(row)}{size}, {row['median_us']:.1f} µs"
        + (
            f", {bandwidth:,.0f} GB/s copied"
            if bandwidth is not None and bandwidth >= 10
            else f", {bandwidth:.2g} GB/s copied"
            if bandwidth is not None
            else ""
        )
        + f") right before {_pair_where(row)}.",
        row,
    )


def _most_often(row: dict[str, Any]) -> str:
    return "most often " if row["sizes"] > 1 else ""


def _pair_where(row: dict[str, Any]) -> str:
    """``<kernel>, both from <op>`` (``each pair from`` for several), or, for pairs of
    several ops or kernels, the count of each op and the most frequent kernel."""
    kernel = short_name(row["gemm_kernel"])
    if len(row["ops"]) == 1 and row["gemm_kernels"] == 1:
        return f"{kernel}, {'both' if row['count'] == 1 else 'each pair'} from {row['op']}"
    ops = ", ".join(f"{op} {count}×" for op, count in row["ops"].items())
    return (
        f"a GEMM kernel of the same op ({ops}); most often {kernel}, one of "
        f"{row['gemm_kernels']} GEMM kernels"
    )


@rule(
    "memset-before-gemm",
    "GPU lane",
    see="""A tiny Memset (Device), a few bytes, right before a GEMM kernel, both issued by the
    matrix-multiply op (cudaMemsetAsync then the launch).""",
    means="""The GEMM library clearing a small piece of workspace the kernel expects zeroed,
    such as a counter its thread blocks coordinate through. Seen on an H100 for some large
    bf16 GEMMs; one more launch and about a microsecond of GPU time, but it means one op is not
    one GPU activity.""",
    severity="info",
    from_post=False,
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def memset_before_gemm(facts: Facts) -> Iterator[Hit]:
    pairs = _before_gemm(facts, "memset", MATMUL_OPS)
    if not pairs:
        return
    row = _pair_rows(facts, pairs)
    size = f"{row['bytes']:,} B" if row["bytes"] is not None else "bytes unknown"
    yield (
        f"{row['count']} Memset ({_most_often(row)}{size}, {row['median_us']:.2f} µs) right "
        f"before {_pair_where(row)}.",
        row,
    )
