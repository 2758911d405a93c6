"""Cheatsheet table "Profiler table": what the summary table's totals and rows say.

The profiler table aggregates the same events the trace holds, so each row is checked on the
trace: CPU time is a step's CPU window, GPU time the GPU work launched from it; without a step
the rules can read, the host's whole recording
(:attr:`~profiling_utils.rules.facts.Facts.host_window`) and the busiest GPU's work from its
start on (:meth:`~profiling_utils.rules.facts.Facts.recording_gpu_busy`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import accumulate, islice
from operator import add, attrgetter, lt, sub
from typing import Any, NamedTuple

import msgspec

from .. import measures
from ..measures import GRAPH_LAUNCH_CALLS, IN_GRAPH_REPLAYS, NO_LAUNCH, NO_OP
from ..tables import percent
from ..trace import LAUNCH_CATEGORIES, InputShapes, Span, Step, input_shapes
from .facts import (
    COMPILING_MIN_SHARE,
    Facts,
    gpu_records_whole,
    median,
    short_name,
    span_ref,
    step_label,
    us,
)
from .gpu_lane import is_host_sync, step_idle
from .registry import Hit, rule

_START = attrgetter("start")
_ID = attrgetter("id")
_DUR = attrgetter("dur")
_LANE = attrgetter("lane")
_CAT = attrgetter("cat")
_CALL_CATEGORIES = LAUNCH_CATEGORIES | {"cpu_op"}

OVERHEAD_BOUND_MAX_BUSY_FRACTION = 0.10
"""``overhead-bound``: the GPU is busy for at most this fraction of a median step's CPU time,
or of the whole recording's without steps (CPU time at least ten times the GPU time, "ms
against µs")."""

OVERHEAD_BOUND_RECORDED_SHARE = 0.5
"""``overhead-bound`` says how much of the median step (or of the whole recording) the host
spent in recorded ops and runtime calls (:func:`profiling_utils.measures.host_work_us`), and,
when that is under this share, what holds the rest: the CPU time that sets the pace is then
mostly time the profiler does not see into."""

OVERHEAD_BOUND_LONG_CALL_SHARE = 0.01
"""Over a whole recording (no steps), ``overhead-bound`` also adds up the calls whose self
time is at least this share of it each (a process's start-up is several long calls)..."""

OVERHEAD_BOUND_LONG_CALL_LAUNCHES = 100.0
"""... and at least this many of the trace's launch latencies (under a ms on an H100): a
start-up call lasts milliseconds to seconds."""

OVERHEAD_BOUND_ONE_CALL_SHARE = 0.5
"""``overhead-bound`` names the op or runtime call whose own (self) time holds at least this
share of the median step's CPU time (or of the whole recording's): one long call is more
often a one-time cost (the process's CUDA start-up, a first launch loading its kernel's code,
a first allocation) than the per-op overhead of many."""

GPU_IDLE_MAX_BUSY_FRACTION = 0.5
"""``gpu-idle``: the GPU is busy for more than :data:`OVERHEAD_BOUND_MAX_BUSY_FRACTION` of a
median step's CPU time (of the whole recording's without steps), so ``overhead-bound`` is
silent, and for less than this fraction: idle for most of it."""

COMPUTE_BOUND_MIN_BUSY_FRACTION = 0.75
"""``compute-bound``: the GPU is busy for at least this fraction of a median step's CPU time,
or of the whole recording's without steps (GPU and CPU time of the same size, or the GPU
longer)."""

TURNS_MIN_GAIN = 1.25
"""``gpus-take-turns``: the GPUs one process drives are together busy for at least
:data:`COMPUTE_BOUND_MIN_BUSY_FRACTION` of the median step's CPU time, and for at least this
many times the busiest one alone (two GPUs in strict turns: about 2; all at once: 1)."""

HOTSPOT_MIN_SHARE = 0.5
"""``hotspot``: one kernel (by name) takes at least this share of all GPU time."""

MANY_CALLS_MIN_PER_STEP = 50
"""``many-calls``: an op called at least this many times per step..."""

MANY_CALLS_MIN_CPU_SHARE = 0.05
"""... whose calls, each counted at the length of its median call, take at least this share
of the steps' CPU time (and the median step is not compute-bound: where the GPU sets the
pace, the CPU's calls cost the step nothing). The median rather than the total: a few long
calls (one blocking copy per step among hundreds of small ones) are not the cost of calling
an op often. Where the calls' total is less (most calls shorter than the median one), the
total: the message then says "in all"."""

MANY_CALLS_WITHIN_SHARE = 0.9
"""``many-calls`` lists an op as running inside another op it names (``aten::convolution``
inside ``aten::conv2d``), and does not count it as an op of its own, when at least this share
of its calls sit directly in that op's calls (the nearest enclosing op)."""

MANY_CALLS_SKEWED = 2.0
"""``many-calls`` also gives the share of all the op's calls when it is at least this many
times the share at the median call: a few far longer calls hold the rest."""

COST_IN_CHILDREN_ONE_CALL = 0.9
"""``cost-in-children`` drills into the longest call, not the typical one, when it holds at
least this share of the row's total."""

COST_IN_CHILDREN_MIN_SHARE = 0.2
"""``cost-in-children``: a row whose total time is at least this share of the steps' CPU
time..."""

COST_IN_CHILDREN_MAX_SELF = 0.2
"""... and whose self time is at most this share of its total."""

NEW_SHAPE_RATIO = 10.0
"""``new-shape-cost``: an op's first call with some input shapes (and dtypes) is slow when it
takes at least this many times the median of its later calls with the same shapes (the same
work, without what the first call set up)..."""

NEW_SHAPE_ONCE_RATIO = 100.0
"""... or, for a shape the op was called with once, at least this many times what the op's
calls with shapes seen before take per input element, times its elements (a shape of
more work takes longer without any set-up: hence a wide margin)..."""

NEW_SHAPE_MIN_SLOW = 3
"""... the rule asks for at least this many slow first calls, some of them in the later half
of the op's calls (new shapes still coming after a warm-up)..."""

NEW_SHAPE_MIN_SHARE = 0.05
"""... whose time beyond their shapes' later calls is at least this share of the steps' CPU
time (of the host's active time without steps)."""

NEW_SHAPE_TRIAL_RATIO = 2.0
"""``new-shape-cost`` says the slow first calls tried candidate kernels when they launch at
least this many times the kinds of kernel (distinct names) of the op's calls with shapes
seen before, and time GPU work with events (:data:`TIMING_EVENT_CALLS`) where those calls
do not: an algorithm search, as ``torch.backends.cudnn.benchmark`` makes per new shape."""

TIMING_EVENT_CALLS = frozenset(
    {"cudaEventRecord", "cudaEventSynchronize", "cudaEventElapsedTime"}
    | {"hipEventRecord", "hipEventSynchronize", "hipEventElapsedTime"}
)
"""Runtime calls that time GPU work: an event recorded on each side of it, waited for, and
the time between read."""

_TRIAL_SAMPLE = 50
"""Calls with shapes seen before read for what the op usually launches (the first ones)."""

COST_IN_CHILDREN_LONG_CALL = 2.0
"""``cost-in-children`` drills into the typical one of a few long calls, not into the median
call, when the fewest calls that hold :data:`COST_IN_CHILDREN_ONE_CALL` of the row's time
each last over this many times its median call: nine ``aten::item`` calls per step on the
host's own tensors, one waiting for the GPU, have their time in the one."""

DRILL_MIN_CHILD_SHARE = 0.5
"""``cost-in-children`` drills into a row's longest child while it holds at least this share of
the row's time."""

_ROW_CATEGORIES = ("cpu_op", "user_annotation")
_REPORTED_ROWS = 5
_INNER_NAMED = 3


def _busy_fractions(
    facts: Facts, compute_only: bool = False, lower_bounds: bool = False
) -> tuple[list[dict[str, Any]], list[float]]:
    """Per step, CPU time and GPU busy time (of the busiest GPU, where the step drives
    several: :attr:`Facts.busiest_gpu_busy_us`), and each step's busy time over its CPU time
    (unrounded: the rows round to the ns, and 4 µs of 100,298 is not 0%); with
    ``compute_only``, busy time leaves communication kernels out (a GPU waiting on its peers
    is not computing). A step whose kernels went unrecorded is left out, its busy time too
    low, unless ``lower_bounds`` (a lower bound can still show the GPU busy); so is a slow
    step (:attr:`Facts.slow_steps`), and one in which torch.compile compiled for
    :data:`~profiling_utils.rules.facts.COMPILING_MIN_SHARE` of it or more
    (``compiling-recorded`` reads those), which are no samples of the steady state, unless
    every step is one."""
    if not facts.steps:
        return _recording_fraction(facts, compute_only, lower_bounds)
    busy = facts.busiest_gpu_compute_busy_us if compute_only else facts.busiest_gpu_busy_us
    # A step whose kernels went unrecorded (every step of a cut trace: Facts.steps then keeps
    # them all) shows a GPU busy for less than it was.
    read = {
        step.number for step in facts.steps if lower_bounds or gpu_records_whole(facts.trace, step)
    }
    if len(read - facts.slow_steps) > 0:
        read -= facts.slow_steps
    compiling = {
        step.number
        for step in facts.steps
        if facts.compile_labels
        and facts.compiling_in_step(step) >= COMPILING_MIN_SHARE * step.span.dur
    }
    if len(read - compiling) > 0:
        read -= compiling
    rows = []
    ratios = []
    for t in facts.step_times:
        if t.cpu_us <= 0 or t.step not in busy or t.step not in read:
            continue
        busy_us = busy[t.step]
        ratios.append(busy_us / t.cpu_us)
        rows.append(
            {
                "step": t.step,
                "cpu_us": us(t.cpu_us),
                "gpu_busy_us": us(busy_us),
                "gpu_busy_fraction": round(ratios[-1], 4),
            }
        )
    return rows, ratios


class _Window(NamedTuple):
    """The stretch of host time a bound rule reads: a step's CPU window, or with no steps
    the whole recording (``step`` is then ``None``)."""

    start: float
    end: float
    step: Step | None


def _recording_fraction(
    facts: Facts, compute_only: bool, lower_bounds: bool = False
) -> tuple[list[dict[str, Any]], list[float]]:
    """:func:`_busy_fractions` of a trace without steps: one row, the whole recording. Its CPU
    time runs from the first span on a CPU thread to the last one's end; its busy time is
    that of the busiest GPU from the window's start on, past its end too (as a step's busy
    time counts the work it launched wherever it ran: a GPU still busy after the host's last
    event sets the pace)."""
    window = facts.host_window
    if window is None or window[1] <= window[0]:
        return [], []
    if not lower_bounds and not gpu_records_whole(facts.trace, window):
        return [], []
    busiest = facts.recording_gpu_busy(compute_only)
    if busiest is None:
        return [], []
    busy, gpus = busiest
    cpu = facts.host_active_us
    row = {
        "step": None,
        "start_us": us(window[0]),
        "cpu_us": us(cpu),
        "gpu_busy_us": us(busy),
        "gpu_busy_fraction": round(busy / cpu, 4),
        "gpus": gpus,
        "quiet": facts.quiet_stretches,
    }
    return [row], [busy / cpu]


def _bound_evidence(
    facts: Facts, rows: list[dict[str, Any]], ratios: list[float]
) -> tuple[dict[str, Any], tuple[float, float, float], _Window]:
    """The median step by GPU busy fraction (the lower middle one for an even count), so
    that the message's busy and CPU times are one step's and give its ratio, and the totals;
    with the median, lowest and highest ratios, and the step's window. Two medians taken
    apart would not do: in a trace whose steps fall into two groups, the median busy time
    over the median CPU time is neither group's ratio. Without steps, the whole recording's
    one row (:func:`_recording_fraction`)."""
    if rows[0]["step"] is None:
        (row,) = rows
        evidence = {
            "window": "recording",
            "recording_cpu_us": row["cpu_us"],
            "recording_gpu_busy_us": row["gpu_busy_us"],
            "recording_gpu_busy_fraction": row["gpu_busy_fraction"],
        }
        if row["gpus"] > 1:
            evidence["gpus_driven"] = row["gpus"]
        if facts.trace.steps:  # none ends inside the recording window (Facts.steps)
            evidence["steps_without_recorded_end"] = len(facts.trace.steps)
        if row["quiet"]:
            evidence["quiet_stretches"] = len(row["quiet"])
            evidence["quiet_us"] = us(sum(end - start for start, end in row["quiet"]))
        window = facts.host_window
        assert window is not None
        return evidence, (ratios[0],) * 3, _Window(window[0], window[1], None)
    order = sorted(range(len(rows)), key=lambda i: (ratios[i], rows[i]["step"]))
    typical = rows[order[(len(order) - 1) // 2]]
    evidence = {
        "median_step": typical["step"],
        "median_cpu_us": typical["cpu_us"],
        "median_gpu_busy_us": typical["gpu_busy_us"],
        "median_gpu_busy_fraction": typical["gpu_busy_fraction"],
        "lowest_gpu_busy_fraction": rows[order[0]]["gpu_busy_fraction"],
        "highest_gpu_busy_fraction": rows[order[-1]]["gpu_busy_fraction"],
        "cpu_total_us": us(sum(row["cpu_us"] for row in rows)),
        "gpu_busy_total_us": us(sum(row["gpu_busy_us"] for row in rows)),
        "steps": rows,
    }
    step = next(s for s in facts.steps if s.number == typical["step"])
    gpus = len({work.lane.device for work in step.gpu_work})
    if gpus > 1:  # the busy time is the busiest GPU's
        evidence["gpus_driven"] = gpus
    shown = (ratios[order[(len(order) - 1) // 2]], ratios[order[0]], ratios[order[-1]])
    return evidence, shown, _Window(step.start, step.end, step)


def _times(fraction: float) -> str:
    return f"{fraction:.2g}×"


def _note_collectives(facts: Facts, evidence: dict[str, Any]) -> None:
    """Add to ``evidence`` (of :func:`_bound_evidence`, busy times that count collectives)
    how much of its GPU busy time is collective kernels, ``gpu_busy_in_collectives_us``,
    where any is (:data:`_SHOWN_US` or more): a GPU in a collective may be waiting for
    another rank, busy without computing."""
    if not facts.trace.communication:
        return
    if "window" in evidence:
        whole, compute = facts.recording_gpu_busy(False), facts.recording_gpu_busy(True)
        if whole is None or compute is None:
            return
        in_collectives = whole[0] - compute[0]
    else:
        step = evidence["median_step"]
        in_collectives = facts.busiest_gpu_busy_us.get(step, 0.0) - (
            facts.busiest_gpu_compute_busy_us.get(step, 0.0)
        )
    if in_collectives >= _SHOWN_US:
        evidence["gpu_busy_in_collectives_us"] = us(in_collectives)


def _bound_message(
    evidence: dict[str, Any],
    ratios: tuple[float, float, float],
    ratio: Callable[[float], str],
    unit: str,
    pace: str,
    busy: str = "busy",
) -> str:
    """``In the step with the median share (ProfilerStep#3) the GPU is busy 3.2 µs for
    122.4 µs of CPU time (2.6%; 1.0% to 3.8% over 3 steps): ...``; the busy time's part in
    collectives after it, where the evidence gives one (:func:`_note_collectives`)."""
    typical, lowest, highest = ratios
    in_collectives = evidence.get("gpu_busy_in_collectives_us")
    note = (
        ""
        if in_collectives is None
        else f" ({in_collectives:.1f} µs of it with only collectives running)"
    )
    gpus = evidence.get("gpus_driven", 1)
    which = f"busiest of the {gpus} GPUs it drives" if gpus > 1 else "GPU"
    if "window" in evidence:
        unread = evidence.get("steps_without_recorded_end", 0)
        why = (
            f"its {unread} step{'s' if unread > 1 else ''} end{'' if unread > 1 else 's'} "
            "after the recording"
            if unread
            else "no profiler steps to compare"
        )
        if "quiet_stretches" in evidence:
            why += (
                f"; {evidence['quiet_stretches']} stretch(es) with nothing on any thread or GPU, "
                f"{evidence['quiet_us']:.1f} µs, left out"
            )
        return (
            f"Over the whole recording ({why}) the {which} is {busy} "
            f"{evidence['recording_gpu_busy_us']:.1f} µs{note} for "
            f"{evidence['recording_cpu_us']:.1f} µs of CPU time, from the first host event to "
            f"the last{' less those' if 'quiet_stretches' in evidence else ''} "
            f"({ratio(typical)}{unit}): {pace}."
        )
    low, high = ratio(lowest), ratio(highest)
    spread = f"; {low} to {high} over {len(evidence['steps'])} steps" if low != high else ""
    return (
        f"In the step with the median share ({step_label(evidence['median_step'])}) the {which} "
        f"is {busy} "
        f"{evidence['median_gpu_busy_us']:.1f} µs{note} for {evidence['median_cpu_us']:.1f} µs "
        f"of CPU time ({ratio(typical)}{unit}{spread}): {pace}."
    )


@rule(
    "overhead-bound",
    "profiler table",
    see="""Self CPU time total far above Self CUDA time total (the CPU in ms, the GPU in µs).
    In the trace: the GPU is busy for a small fraction of the median step (of the whole
    recording, from the host's first event to its last, in a trace without steps); a step
    whose kernels went unrecorded is not read.""",
    means="""Overhead-bound: dispatching and launching the work costs the CPU more time than
    the GPU needs to run it, so the GPU mostly waits. Give each launch more work (larger or
    batched operands), launch fewer kernels (fusion, torch.compile), or replay them as a CUDA
    graph. Communication kernels count as busy here: a GPU waiting for its peers is not
    waiting for the CPU.""",
    severity="warning",
    example="auto_examples/part1_matmul_add/plot_01_overhead_vs_compute",
)
def overhead_bound(facts: Facts) -> Iterator[Hit]:
    rows, ratios = _busy_fractions(facts)
    if not facts.trace.has_gpu or not rows:
        return
    evidence, shown, window = _bound_evidence(facts, rows, ratios)
    whole = window.step is None  # no steps: the whole recording
    key = "recording" if whole else "median_step"
    cpu_us = evidence["recording_cpu_us" if whole else "median_cpu_us"]
    fraction = evidence["recording_gpu_busy_fraction" if whole else "median_gpu_busy_fraction"]
    if fraction <= OVERHEAD_BOUND_MAX_BUSY_FRACTION:
        _note_collectives(facts, evidence)
        message = _bound_message(evidence, shown, percent, "", "the CPU side sets the pace")
        # The recording's busy time counts all GPU work; a step's, the work it launched.
        unlaunched = 0.0 if whole else _unlaunched_gpu_us(facts, window)
        if unlaunched > 0:
            evidence["median_step_unlaunched_gpu_us"] = us(unlaunched)
            message = (
                f"{message[:-1]}; another {unlaunched:.1f} µs of GPU work ran inside the step "
                "whose launch call is not in the trace, which no step counts."
            )
        recorded = measures.host_work_us(facts.trace, (window.start, window.end))
        evidence[f"{key}_host_work_us"] = us(recorded)
        # A whole recording may hold a process's start-up: several long calls, none half.
        one_time = _one_time_calls(facts, window, cpu_us) if whole else None
        if one_time is not None:
            longest, own = one_time.calls[0]
        else:
            calls = (
                _long_calls(facts, window, cpu_us) if whole else _calls_by_self_time(facts, window)
            )
            longest, own = next(iter(calls), (None, 0.0))
        if longest is not None and (
            own >= OVERHEAD_BOUND_ONE_CALL_SHARE * cpu_us or one_time is not None
        ):
            ops = [span for span in facts.trace.ancestors(longest) if span.cat == "cpu_op"]
            under = f" under {short_name(ops[0].name, 40)}" if ops else ""
            evidence[f"{key}_longest_call"] = {
                **span_ref(longest),
                "self_us": us(own),
                "share": round(own / cpu_us, 4),
            }
            alone = " (the one step the rules read: nothing to compare it with)"
            if one_time is None:
                held_by = (
                    f"one call, {short_name(longest.name, 40)}{under}, takes {own:.1f} µs of "
                    f"it ({percent(own / cpu_us)}) by itself: a one-time cost (the process's "
                    f"{_runtime(facts)} start-up, a first launch loading its kernel, a first "
                    "allocation) looks like this"
                )
            else:
                evidence["recording_long_calls"] = _one_time_evidence(one_time, cpu_us)
                held_by = _long_calls_words(facts, one_time, cpu_us)
            message = (
                f"{message[:-1]}; {held_by}, not only the overhead of many small ops"
                f"{alone if len(facts.steps) == 1 else ''}."
            )
        message = (
            f"{message[:-1]}; its CPU threads are in recorded ops and runtime calls for "
            f"{recorded:.1f} of the {cpu_us:.1f} µs ({percent(recorded / cpu_us)})"
        )
        if recorded >= OVERHEAD_BOUND_RECORDED_SHARE * cpu_us:
            message += "."
        else:
            label, unseen = facts.emptiest_label(window.start, window.end)
            if label is not None and unseen >= 0.5 * (cpu_us - recorded):
                evidence[f"{key}_label_without_ops"] = {"name": label, "us": us(unseen)}
                message += (
                    f", and {unseen:.1f} µs lies under the label {short_name(label, 48)} with no "
                    "op inside: time the profiler names but does not see into."
                )
            else:
                message += (
                    ": the rest is host time outside every op and call the profiler records "
                    "(Python between ops, data loading) or no work at all."
                )
        pid = window.step.span.lane.pid if window.step is not None else None
        compiling = facts.compiling_us(window.start, window.end, pid)
        if compiling >= COMPILING_MIN_SHARE * cpu_us:
            evidence[f"{key}_compiling_us"] = us(compiling)
            message = (
                f"{message[:-1]}; torch.compile was compiling for {compiling:.1f} µs of the "
                f"{'recording' if whole else 'step'} ({percent(compiling / cpu_us)}: see "
                "compiling-recorded)."
            )
        yield message, evidence


_SHOWN_US = 0.05
"""Idle time below this (µs: it prints as 0.0) is not listed."""


def _and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


_IDLE_CAUSES = {
    "CPU time": "until a launch call that returned after the GPU had run dry",
    "host sync": "after a host sync",
    "buffer request": "while the profiler's Activity Buffer Request held the launching thread",
    "held back": "with the next work already queued",
    "launch not recorded": "before work whose launch call is not in the trace",
}


@rule(
    "gpu-idle",
    "profiler table",
    see="""Self CUDA time total well under Self CPU time total, though not ten times under. In
    the trace: the GPU is busy for under half of the median step's CPU time (of the whole
    recording, without steps), and for more than overhead-bound's tenth.""",
    means="""The GPU waits for most of the step. Where it idles until launch calls that came
    after it had run dry, the host's work between launches sets the pace (Python, dispatch,
    an optimizer's many small ops): the remedies are overhead-bound's (larger or fewer
    kernels, torch.compile, CUDA graphs). Idle after host syncs is intra-step-gap's, idle
    before the step's first GPU work often data loading (data-loader). A recording without
    steps that holds its process's start-up (a few long one-time calls) is also read
    without them: the GPU may be busy for most of the rest.""",
    severity="warning",
    from_post=False,
)
def gpu_idle(facts: Facts) -> Iterator[Hit]:
    rows, ratios = _busy_fractions(facts)
    if not facts.trace.has_gpu or not rows:
        return
    evidence, shown, window = _bound_evidence(facts, rows, ratios)
    fraction = shown[0]
    if not OVERHEAD_BOUND_MAX_BUSY_FRACTION < round(fraction, 4) < GPU_IDLE_MAX_BUSY_FRACTION:
        return
    where = "the recording" if window.step is None else "the step"
    _note_collectives(facts, evidence)
    message = _bound_message(evidence, shown, percent, "", f"it waits for most of {where}")
    if window.step is None:
        # A recording without steps may hold a process's start-up, as overhead-bound reads
        # it: the GPU's share of the rest says whether the running program waits too.
        cpu_us = evidence["recording_cpu_us"]
        one_time = _one_time_calls(facts, window, cpu_us)
        if one_time is not None:
            evidence["recording_long_calls"] = _one_time_evidence(one_time, cpu_us)
            message = f"{message[:-1]}; {_long_calls_words(facts, one_time, cpu_us)}"
            rest = cpu_us - one_time.wall_us
            if rest > 0:
                besides = _busiest_gpu_besides(facts, window, one_time.pieces) / rest
                evidence["recording_long_calls"]["gpu_busy_fraction_besides"] = round(besides, 4)
                message += f". Besides them, the GPU is busy for {percent(besides)} of the rest" + (
                    ": the waiting is the start-up's more than the running program's."
                    if besides >= GPU_IDLE_MAX_BUSY_FRACTION
                    else "."
                )
            else:
                message += "."
    else:
        idle = step_idle(facts, window.step)
        if idle is None:
            return
        cpu_us = evidence["median_cpu_us"]
        # The step's own work runs behind, while the GPU is busy with earlier steps' work
        # inside the window: not a GPU waiting for this step's host.
        if idle.busy_in_window_us >= GPU_IDLE_MAX_BUSY_FRACTION * cpu_us:
            return
        between = idle.between
        evidence["median_step_busy_in_window_us"] = us(idle.busy_in_window_us)
        evidence["median_step_idle_by_cause"] = {
            cause: {"stretches": count, "us": us(total)}
            for cause, (count, total) in between.items()
        }
        evidence["median_step_before_first_gpu_us"] = us(idle.before_us)
        evidence["median_step_after_last_gpu_us"] = us(idle.after_us)
        evidence["median_step_gpu_past_end_us"] = us(idle.past_end_us)
        inside = sum(total for _, total in between.values())
        pieces = []
        if idle.before_us >= _SHOWN_US:
            pieces.append(f"{idle.before_us:.1f} µs before the step's first GPU activity starts")
        if between:
            count = sum(n for n, _ in between.values())
            causes = "; ".join(
                f"{total:.1f} µs {_IDLE_CAUSES[cause]}"
                for cause, (_, total) in sorted(between.items(), key=lambda item: -item[1][1])
            )
            pieces.append(
                f"{inside:.1f} µs between its activities ({count} "
                f"stretch{'es' if count > 1 else ''}: {causes})"
            )
        if idle.after_us >= _SHOWN_US:
            pieces.append(f"{idle.after_us:.1f} µs after its last ends")
        if pieces:
            message = f"{message[:-1]}. In the step's CPU window it idles {_and_list(pieces)}"
            if idle.past_end_us >= _SHOWN_US:
                message += (
                    f"; its last GPU activity ends {idle.past_end_us:.1f} µs after the window"
                )
            late = between.get("CPU time", (0, 0.0))[1]
            if idle.before_us + late >= GPU_IDLE_MAX_BUSY_FRACTION * (
                idle.before_us + inside + idle.after_us
            ):
                message += ": the host's work before and between launches sets the pace"
            message += "."
    yield message, evidence


def _long_calls_words(facts: Facts, one_time: _OneTime, cpu_us: float) -> str:
    """``overhead-bound``'s and ``gpu-idle``'s words for a whole recording's one-time calls,
    which take the share of ``cpu_us`` they say."""
    longest, own = one_time.calls[0]
    ops = [span for span in facts.trace.ancestors(longest) if span.cat == "cpu_op"]
    under = f" under {short_name(ops[0].name, 40)}" if ops else ""
    return (
        f"{len(one_time.calls)} calls, each with {percent(OVERHEAD_BOUND_LONG_CALL_SHARE)} "
        f"or more of it as its own time, take {one_time.wall_us:.1f} µs of it "
        f"({percent(one_time.wall_us / cpu_us)}), the longest "
        f"{short_name(longest.name, 40)}{under} ({own:.1f} µs): one-time costs (the process's "
        f"{_runtime(facts)} start-up, first launches loading their kernels, first allocations) "
        "look like this"
    )


def _runtime(facts: Facts) -> str:
    """The GPU runtime whose start-up a process pays: HIP on AMD, CUDA elsewhere."""
    return "HIP" if facts.trace.vendor == "amd" else "CUDA"


def _one_time_evidence(one_time: _OneTime, cpu_us: float) -> dict[str, Any]:
    return {
        "count": len(one_time.calls),
        "self_us": us(sum(own for _, own in one_time.calls)),
        "wall_us": us(one_time.wall_us),
        "share": round(one_time.wall_us / cpu_us, 4),
    }


def _busiest_gpu_besides(facts: Facts, window: _Window, pieces: list[tuple[float, float]]) -> float:
    """The busy time, in ``window`` (from its start on, as a recording's busy time is read),
    of the GPU busiest there, less its busy time inside ``pieces``: what it ran while none of
    the one-time calls did, µs."""
    by_device: dict[Any, list[Span]] = {}
    for work in facts.trace.gpu_work:
        by_device.setdefault(work.lane.device, []).append(work)
    best = 0.0
    for work in by_device.values():
        busy = measures.union_within(work, window.start, math.inf)
        inside = sum(measures.union_within(work, start, end) for start, end in pieces)
        best = max(best, busy - inside)
    return best


def _unlaunched_gpu_us(facts: Facts, step: _Window) -> float:
    """How long GPU work whose launch call is not in the trace ran inside ``step``'s CPU
    window (streams' overlaps counted once), µs: work no step's busy time counts."""
    trace = facts.trace
    launch_of = trace.launch_of_id
    work = trace.gpu_work
    # Work that runs in the window starts before its end, and at most the longest activity
    # before its start.
    longest = max(map(_DUR, work), default=0.0)
    first = bisect_left(work, step.start - longest, key=_START)
    last = bisect_left(work, step.end, key=_START)
    unlaunched = [a for a in work[first:last] if launch_of(a.id) is None]
    return measures.union_within(unlaunched, step.start, step.end)


def _long_calls(facts: Facts, window: _Window, cpu_us: float) -> list[tuple[Span, float]]:
    """The longest call of ``window`` by self time, and after it those of at least
    :data:`OVERHEAD_BOUND_LONG_CALL_SHARE` of ``cpu_us`` (and as long as
    :data:`OVERHEAD_BOUND_LONG_CALL_LAUNCHES` launches), with their self times: in a whole
    recording, its one-time costs (start-up, first launches, per-shape set-up)."""
    calls = _calls_by_self_time(facts, window)
    first = next(calls, None)
    if first is None:
        return []
    found = [first]
    shortest = max(
        OVERHEAD_BOUND_LONG_CALL_SHARE * cpu_us,
        OVERHEAD_BOUND_LONG_CALL_LAUNCHES * facts.launch_latency_us,
    )
    for call, own in calls:
        if own < shortest:
            break
        found.append((call, own))
    return found


class _OneTime(NamedTuple):
    """A whole recording's long calls (:func:`_long_calls`), two or more, that hold at least
    :data:`OVERHEAD_BOUND_ONE_CALL_SHARE` of it: a process's start-up, read apart."""

    calls: list[tuple[Span, float]]
    """The calls with their self times, longest first."""
    pieces: list[tuple[float, float]]
    """The stretches they run in, cut to the recording, merged (calls on several threads
    may run at once)."""
    wall_us: float
    """How long at least one of them runs: the pieces' total, never more than the
    recording."""


def _one_time_calls(facts: Facts, window: _Window, cpu_us: float) -> _OneTime | None:
    """The recording's one-time calls (:class:`_OneTime`), or None where there are fewer than
    two or they hold less than :data:`OVERHEAD_BOUND_ONE_CALL_SHARE` of ``cpu_us``."""
    calls = _long_calls(facts, window, cpu_us)
    if len(calls) < 2:
        return None
    in_order = sorted((call for call, _ in calls), key=_START)
    pieces = measures.pieces_within(in_order, window.start, window.end)
    wall = sum(end - start for start, end in pieces)
    if wall < OVERHEAD_BOUND_ONE_CALL_SHARE * cpu_us:
        return None
    return _OneTime(calls, pieces, wall)


def _calls_by_self_time(facts: Facts, step: _Window) -> Iterator[tuple[Span, float]]:
    """The ops and runtime calls inside ``step``'s window, on any CPU thread, with their self
    time, longest first (those with some); not torch.compile's labels or the calls made
    while it compiles."""
    trace = facts.trace
    spans, covered = trace.spans, trace.children_cover_us
    window = spans[
        bisect_left(spans, step.start, key=_START) : bisect_left(spans, step.end, key=_START)
    ]
    # Self times in C-level passes (a step holds tens of thousands of spans), then the calls
    # on a CPU thread, ending inside the step, longest first.
    own = list(map(sub, map(_DUR, window), map(covered.__getitem__, map(_ID, window))))
    for index in sorted(range(len(window)), key=own.__getitem__, reverse=True):
        span = window[index]
        if own[index] <= 0:
            return
        if span.cat in _CALL_CATEGORIES and span.lane.kind == "cpu" and span.end <= step.end:
            # torch.compile's labels, filed as ops by torch 2.11, and its work are the
            # compiler's: the rules say how long it compiled on their own.
            if facts.is_compile_work(span):
                continue
            yield span, own[index]


@rule(
    "compute-bound",
    "profiler table",
    see="""Self CPU time total close to Self CUDA time total, both in ms. In the trace: the GPU
    is busy for most of the median step's CPU time, or longer (of the whole recording, in a
    trace without steps).""",
    means="""Compute-bound: the GPU is the bottleneck, which is usually the goal. Further gains
    come from the kernels themselves (precision, algorithm, memory traffic), not from the
    launch path. Busy is not fast: summary's achieved rates (the roofline) say how near its
    datasheet peak each op runs, and a GPU kept busy by a GEMM too small to fill it is
    "compute-bound" here. Communication kernels do not count as GPU work here (see
    exposed-communication).""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_01_overhead_vs_compute",
)
def compute_bound(facts: Facts) -> Iterator[Hit]:
    rows, ratios = _busy_fractions(facts, compute_only=True)
    if not facts.trace.has_gpu or not rows:
        return
    evidence, shown, window = _bound_evidence(facts, rows, ratios)
    if round(shown[0], 4) >= COMPUTE_BOUND_MIN_BUSY_FRACTION:
        # Busy longer than the CPU works: the GPU sets the pace. Busy most of it: the GPU
        # is the larger cost, though a CPU that slowed down could still hold it back.
        pace = (
            "the GPU sets the pace"
            if shown[0] >= 1
            else "the GPU is busy for most of the CPU's time"
        )
        # Its busy time leaves the collectives out: said, as it differs from summary's GPU busy.
        busy = "busy with compute (collectives left out)" if facts.communication_ids else "busy"
        message = _bound_message(evidence, shown, _times, " as long", pace, busy)
        yield message, evidence


@rule(
    "gpus-take-turns",
    "profiler table",
    see="""Self CUDA time total counts every GPU the process drives. In the trace: several
    GPUs, together busy for most of the median step's CPU time (of the whole recording,
    without steps), but each alone for much less: little of their work runs at the same
    time.""",
    means="""The GPUs run their parts one after the other (a model split across GPUs by hand,
    or with device_map="auto"): each waits while the others work, however busy they look
    together, and the bound rules, which read the busiest GPU, may say nothing. Split the
    batch into micro-batches so that the parts overlap (pipeline parallelism: GPipe, 1F1B), or
    use data or tensor parallelism, which keep every GPU busy at once.""",
    severity="warning",
    from_post=False,
)
def gpus_take_turns(facts: Facts) -> Iterator[Hit]:
    devices = measures.gpu_devices(facts.trace)
    if len(devices) < 2:
        return
    rows, _ = _busy_fractions(facts)
    if not rows:
        return
    if rows[0]["step"] is None:  # the whole recording
        window = facts.host_window
        assert window is not None
        label = "Over the whole recording (no profiler steps to compare)"
        cpu_us = rows[0]["cpu_us"]
        trace = facts.trace
        work = [w for w in trace.gpu_work if w.end > window[0]]
        launchers = {launch.pid for w in work if (launch := trace.launch_of_id(w.id))}
        if len(launchers) > 1:
            return  # a file that merges processes: whose turns would they be?
        together = measures.union_within(work, window[0], math.inf)
        alone = {
            device: measures.union_within(
                [w for w in work if w.lane.kind == "gpu" and w.lane.device == device],
                window[0],
                math.inf,
            )
            for device in devices
        }
        step = None
    else:
        union = {t.step: t.gpu_busy_us for t in facts.step_times}
        read = sorted(rows, key=lambda row: (union[row["step"]] / row["cpu_us"], row["step"]))
        row = read[(len(read) - 1) // 2]
        step = next(s for s in facts.steps if s.number == row["step"])
        label = f"In the step with the median share ({step_label(step.number)})"
        cpu_us = row["cpu_us"]
        together = union[step.number]
        alone = measures.busy_by_device(step.gpu_work, devices)
    busiest = max(alone.values())
    running = {device: busy for device, busy in alone.items() if busy > 0}
    if (
        len(running) < 2
        or together < COMPUTE_BOUND_MIN_BUSY_FRACTION * cpu_us
        or together < TURNS_MIN_GAIN * busiest
    ):
        return
    each = ", ".join(
        f"GPU {device} {busy:.1f} µs ({percent(busy / cpu_us)})" for device, busy in running.items()
    )
    added = sum(running.values())
    overlap = (
        f"both ran at once for {added - together:.1f} µs"
        if len(running) == 2
        else f"their busy times add up to {added:.1f} µs, {added - together:.1f} µs more"
    )
    message = (
        f"{label} the {len(running)} GPUs this process drives are together busy "
        f"{together:.1f} µs for {cpu_us:.1f} µs of CPU time ({percent(together / cpu_us)}), "
        f"but each alone for less: {each}; {overlap}: they take turns, each waiting while "
        "another works."
    )
    key = "recording" if step is None else "median"
    evidence: dict[str, Any] = (
        {"window": "recording"} if step is None else {"median_step": step.number}
    )
    evidence |= {
        f"{key}_cpu_us": us(cpu_us),
        f"{key}_gpus_busy_together_us": us(together),
        f"{key}_gpu_busy_by_gpu_us": {str(device): us(busy) for device, busy in alone.items()},
        "together_busy_fraction": round(together / cpu_us, 4),
        "busiest_gpu_busy_fraction": round(busiest / cpu_us, 4),
    }
    yield message, evidence


@rule(
    "hotspot",
    "profiler table",
    see="One row takes most of the CUDA time total.",
    means="""That is the hotspot: start optimizing there, since it bounds what any other
    change can gain. Communication kernels (NCCL, RCCL) are left out: their time is judged
    by exposed-communication and collective-bandwidth. In a trace of torch.compile compiling,
    the finding says how many of the kernel's calls were launched while it compiled:
    Inductor's autotuning runs candidate kernels and flushes the cache between them, work
    of the compiler that may be the hotspot of such a trace.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_01_overhead_vs_compute",
)
def hotspot(facts: Facts) -> Iterator[Hit]:
    trace = facts.trace
    communication = facts.communication_ids
    compute_work = [work for work in trace.gpu_work if work.id not in communication]
    total = sum(work.dur for work in compute_work)
    # The profiler table's CUDA total: overlapping streams each count their own time.
    streams = len({work.lane for work in compute_work})
    if total <= 0 or not facts.compute_kernels_by_name:
        return
    name, kernels = max(facts.compute_kernels_by_name.items(), key=lambda item: _total(item[1]))
    kernel_total = _total(kernels)
    share = kernel_total / total
    if share < HOTSPOT_MIN_SHARE:
        return
    # A graph launch replays many kernels, and the launch index pairs it with its first only:
    # the kernels a replay runs are counted apart, all of them.
    launched: Counter[str] = Counter()
    # Inductor's autotuning runs candidate kernels and flushes the cache between them: work
    # of the compiler, which a hotspot in a cold compile's trace may be, not of the program.
    compiling = 0
    for launch, kernel in facts.kernel_launches:
        if kernel.name == name and launch.call.name not in GRAPH_LAUNCH_CALLS:
            launched[launch.op.name if launch.op is not None else NO_OP] += 1
            compiling += facts.while_compiling(launch.call)
    replays: Counter[str] = Counter()
    for launch in facts.graph_launches:
        runs = sum(work.name == name for work in trace.gpu_work_of(launch))
        if runs:
            op = trace.op_of(launch)
            replays[launch.name if op is None else f"{launch.name} in {op.name}"] += runs
    replayed = sum(replays.values())
    unlinked = len(kernels) - sum(launched.values()) - replayed
    ops = launched + Counter({IN_GRAPH_REPLAYS: replayed, NO_LAUNCH: unlinked})
    of_what = "GPU time besides communication" if communication else "all GPU time"
    summed = f" summed over the GPU's {streams} streams" if streams > 1 else ""
    places = ["outside any op" if op == NO_OP else op for op in launched]
    sources = [f"launched from {', '.join(places)}"] if places else []
    if replayed:
        sources.append(f"{replayed} replayed by {', '.join(replays)}")
    if unlinked:
        sources.append(f"{unlinked} with no launch call in the trace")
    if compiling:
        sources.append(
            f"{'all' if compiling == len(kernels) else compiling} of them while torch.compile "
            "was compiling (its benchmarks of candidate kernels, or other work of the "
            "compiler), not in the compiled program"
        )
    sources_text = "; ".join(sources)
    yield (
        f"{short_name(name)} takes {percent(share)} of {of_what} ({kernel_total:.1f} of "
        f"{total:.1f} µs{summed}, {len(kernels)} call{'s' if len(kernels) > 1 else ''}), "
        f"{sources_text}.",
        {
            "kernel": name,
            "calls": len(kernels),
            "total_us": us(kernel_total),
            "gpu_total_us": us(total),
            "share": round(share, 4),
            "median_us": us(median(k.dur for k in kernels)),
            "ops": dict(ops.most_common()),
            **({"graph_replays": dict(replays.most_common())} if replays else {}),
            **({"launched_while_compiling": compiling} if compiling else {}),
            "communication_kernels_left_out": len(communication),
        },
    )


def _total(spans: list[Any]) -> float:
    return sum(span.dur for span in spans)


def _steps_cpu_us(facts: Facts) -> float:
    return sum(step.span.dur for step in facts.steps)


def _compiling_in_windows(
    facts: Facts, whole: bool, besides: list[tuple[float, float]]
) -> tuple[float, float]:
    """How long torch.compile compiled in the steps (on their processes' threads), or in the
    recording's host window where ``whole``, µs; and that time less the part inside
    ``besides`` (disjoint pieces in order: one-time calls already taken out of the same
    time)."""
    if not facts.compile_labels:
        return 0.0, 0.0
    if not whole:
        total = sum(map(facts.compiling_in_step, facts.steps))
        return total, total
    window = facts.host_window
    if window is None:
        return 0.0, 0.0
    start, end = window
    total = facts.compiling_us(start, end)
    clipped = [(max(lo, start), min(hi, end)) for lo, hi in besides]
    inside = sum(facts.compiling_us(lo, hi) for lo, hi in clipped if lo < hi)
    return total, total - inside


@rule(
    "many-calls",
    "profiler table",
    see="""One row with a very large # of Calls (per step; over the whole recording in a
    trace without steps).""",
    means="""Each call may be cheap, but together they cost dispatch and launch time; see
    whether they can be fused or batched (foreach ops, torch.compile, larger operands). Calls
    made while torch.compile was compiling (its tracing, its autotuning) are the compiler's:
    neither they nor the time it compiled are counted (compiling-recorded reports it).""",
    severity="warning",
    example="auto_examples/part1_matmul_add/plot_09_diagnose_your_own_trace",
)
def many_calls(facts: Facts) -> Iterator[Hit]:
    # Without steps, the whole recording is one: calls in it, a share of the host's time.
    whole = not facts.steps
    steps = len(facts.steps) or 1
    steps_cpu = facts.host_active_us if whole else _steps_cpu_us(facts)
    if steps_cpu <= 0:
        return
    # Where the GPU sets the pace, the calls' CPU time costs the step nothing, and a long
    # call is often the CPU blocked in a launch behind a full queue: no finding.
    # Busy times that miss unrecorded work are lower bounds: enough to show the GPU busy.
    rows, ratios = _busy_fractions(facts, lower_bounds=True)
    bound = _bound_evidence(facts, rows, ratios) if rows else None
    if bound is not None and bound[1][0] >= COMPUTE_BOUND_MIN_BUSY_FRACTION:
        return
    # A recording that holds long one-time calls for most of its host time (a process's
    # start-up, per-shape set-up) is read besides them: what the calls cost once it runs.
    one_time: list[tuple[Span, float]] = []
    one_time_us = 0.0
    if whole and bound is not None:
        found_once = _one_time_calls(facts, bound[2], steps_cpu)
        if found_once is not None:
            one_time, one_time_us = found_once.calls, found_once.wall_us
            rest = steps_cpu - one_time_us
            if (
                rest <= 0
                or _busiest_gpu_besides(facts, bound[2], found_once.pieces)
                >= COMPUTE_BOUND_MIN_BUSY_FRACTION * rest
            ):
                return  # nothing but them, or besides them the GPU sets the pace
    steps_cpu -= one_time_us  # what the shares below are of
    # torch.compile's compiling is the compiler's time, and the calls made in it (on any
    # thread) its calls: both left out, the time once where one-time calls hold it too.
    compiling_us, compiling_besides = _compiling_in_windows(
        facts, whole, found_once.pieces if one_time else []
    )
    steps_cpu -= compiling_besides
    if steps_cpu <= 0:
        return
    # ... so an op's calls that hold a one-time call (its first, loading a kernel) are left
    # out of its own count and time as well.
    holding = {
        enclosing.id for call, _ in one_time for enclosing in (call, *facts.trace.ancestors(call))
    }
    found = []
    calls_of: dict[str, list[Any]] = {}
    for name, row in facts.rows.items():
        # The row counts the whole trace; these prefilters pass every op that could qualify.
        if not row.is_op or row.calls < MANY_CALLS_MIN_PER_STEP * steps:
            continue
        if row.total_us < MANY_CALLS_MIN_CPU_SHARE * steps_cpu:
            continue  # counted at the median call, it could only take less
        # The calls in the steps the rules keep: warm-up before the first step, or a step
        # left out (cut short), would otherwise add calls to a count divided by fewer steps.
        calls = _op_calls(facts, name, row.calls)
        calls = calls if whole else facts.in_steps(calls)
        if holding:
            calls = [call for call in calls if call.id not in holding]
        if compiling_us:
            calls = [
                call
                for call in calls
                if not facts.while_compiling(call)
                and not facts.compiling_us(
                    call.start, call.start + call.dur, None if whole else call.lane.pid
                )
            ]
        if len(calls) < MANY_CALLS_MIN_PER_STEP * steps:
            continue
        typical, long_calls = _median_and_long(calls)
        total = sum(map(_DUR, calls))
        # Calls on several threads at once (an inference server's workers) hold the host's
        # time once: their sum over its wall time would count it once per thread.
        threads = len(set(map(_LANE, calls)))
        covered = _covered_us(calls, total) if threads > 1 else total
        concurrency = covered / total if total > 0 else 1.0
        share = min(total, len(calls) * typical) * concurrency / steps_cpu
        if share >= MANY_CALLS_MIN_CPU_SHARE:
            calls_of[name] = calls
            found.append(
                {
                    "op": name,
                    "calls": len(calls),
                    "calls_per_step": None if whole else round(len(calls) / steps, 1),
                    "median_us": us(typical),
                    "mean_us": us(total / len(calls)),
                    "cpu_share": round(share, 4),
                    "total_us": us(total),
                    "total_cpu_share": round(covered / steps_cpu, 4),
                    "calls_over_twice_median": long_calls,
                    "within": None,
                    "threads": threads,
                    "concurrent_us": us(total - covered),
                }
            )
    if not found:
        return
    if len(found) > 1:  # one op can run only inside another the rule names
        for entry in found:
            entry["within"] = _called_within(facts, calls_of[entry["op"]], set(calls_of))
        _break_cycles(found)
    # An op whose calls run inside another's named here (aten::conv2d → aten::convolution)
    # is the same calls again: listed after the ops called on their own, not counted twice.
    found.sort(key=lambda r: (r["within"] is not None, -r["calls"]))
    outer = [entry for entry in found if entry["within"] is None]
    inner = [entry["op"] for entry in found if entry["within"] is not None]
    top = outer[0]
    # The share counts the calls at their median's length, or their total where that is
    # less (calls mostly shorter than the median one): the message says which.
    at_length = "at that length" if top["total_cpu_share"] > top["cpu_share"] else "in all"
    skewed = ""
    if top["total_cpu_share"] >= MANY_CALLS_SKEWED * top["cpu_share"]:
        skewed = (
            f" (all of its calls: {percent(top['total_cpu_share'])}, a mean of "
            f"{top['mean_us']:.1f} µs: {top['calls_over_twice_median']:,} of its "
            f"{top['calls']:,} calls take over twice the median)"
        )
    if top["concurrent_us"] > 0:
        skewed += (
            f" (its calls ran on {top['threads']} threads, {top['concurrent_us']:.1f} µs of "
            "them at once, counted once)"
        )
    compiler = ""
    if compiling_us:
        compiler = (
            f" (torch.compile's compiling, {compiling_us:.1f} µs, and the calls made in it "
            "left out)"
        )
    also = ""
    if inner:
        named = ", ".join(inner[:_INNER_NAMED])
        if len(inner) > _INNER_NAMED:
            named += f" and {len(inner) - _INNER_NAMED} more"
        also = (
            f" ({len(inner)} more run{'s' if len(inner) == 1 else ''} almost only inside "
            f"{'it' if len(outer) == 1 else 'them'}: {named})"
        )
    most = "the most called, " if len(outer) > 1 else ""
    if whole:
        left_out = (
            " (stretches with nothing on any thread or GPU left out)"
            if facts.quiet_stretches
            else ""
        )
        besides = ""
        if one_time:
            longest, own = one_time[0]
            besides = (
                f", besides {len(one_time)} one-time calls of "
                f"{percent(OVERHEAD_BOUND_LONG_CALL_SHARE)} or more of it each "
                f"({one_time_us:.1f} µs, the longest {short_name(longest.name, 40)}: "
                f"{own:.1f} µs),"
            )
        message = (
            f"{len(outer)} op(s) are called {MANY_CALLS_MIN_PER_STEP}+ times in the recording "
            f"(no steps to count per step), for {percent(MANY_CALLS_MIN_CPU_SHARE)} or more "
            f"of the host's time from its first event to its last"
            f"{left_out}{besides}"
            f" each at the length of "
            f"their median call{also}; {most}{top['op']}: {top['calls']:,} calls, "
            f"{top['median_us']:.1f} µs for the median call, {percent(top['cpu_share'])} of "
            f"that time {at_length}{skewed}{compiler}."
        )
    else:
        message = (
            f"{len(outer)} op(s) are called {MANY_CALLS_MIN_PER_STEP}+ times per step, for "
            f"{percent(MANY_CALLS_MIN_CPU_SHARE)} or more of the steps' CPU time each at the "
            f"length of their median call{also}; {most}{top['op']}: "
            f"{top['calls_per_step']:g} calls "
            f"per step, {top['median_us']:.1f} µs for the median call, "
            f"{percent(top['cpu_share'])} of the steps' CPU time {at_length}{skewed}{compiler}."
        )
    if len(outer) > 1:  # the others called on their own, each by its count and share
        others = [
            f"{entry['op']} ({entry['calls']:,} calls, {percent(entry['cpu_share'])})"
            if whole
            else f"{entry['op']} ({entry['calls_per_step']:g} per step, "
            f"{percent(entry['cpu_share'])})"
            for entry in outer[1 : 1 + _INNER_NAMED]
        ]
        more = len(outer) - 1 - len(others)
        message += f" The other{'s' if len(outer) > 2 else ''}: {', '.join(others)}"
        message += f" and {more} more." if more else "."
    yield (
        message,
        {
            **(
                {
                    "window": "recording",
                    "recording_cpu_us": us(steps_cpu + one_time_us + compiling_besides),
                    **(
                        {
                            "one_time_calls": len(one_time),
                            "one_time_us": us(one_time_us),
                            "besides_one_time_us": us(steps_cpu + compiling_besides),
                        }
                        if one_time
                        else {}
                    ),
                }
                if whole
                else {"steps": steps, "steps_cpu_us": us(steps_cpu + compiling_besides)}
            ),
            **({"compiling_us": us(compiling_us)} if compiling_us else {}),
            # The ops counted, then those running inside them: the first few of each.
            "ops": outer[:_REPORTED_ROWS] + found[len(outer) :][:_REPORTED_ROWS],
        },
    )


def _covered_us(calls: list[Span], total: float) -> float:
    """The time ``calls`` (in start order, on several threads) cover, their overlaps once:
    ``total`` (their durations added up) where none starts before an earlier one ends, as
    on threads that take turns (a training step's forward and backward), found in C-level
    passes; their union otherwise."""
    starts = list(map(_START, calls))
    ends = accumulate(map(add, starts, map(_DUR, calls)), max)
    if not any(map(lt, islice(starts, 1, None), ends)):
        return total
    return measures.union_us(calls, in_start_order=True)


class _ShapeCost(NamedTuple):
    """The calls of one op that ``new-shape-cost`` reads."""

    name: str
    slow: list[Span]
    """First calls with their input shapes, slow against what the op's other calls take."""
    expected_us: list[float]
    """For each of :attr:`slow`, what the op's calls with shapes seen before say it should
    take: the median of its shape's later calls, or for a shape called once, the op's median
    time per input element times its elements."""
    repeated: int
    """How many of :attr:`slow`'s shapes were called again."""
    seen: list[Span]
    """The op's calls with shapes seen before (every call of a shape but its first)."""
    late: int
    """How many of :attr:`slow` lie in the later half of the op's calls."""
    shapes: int
    """How many distinct input shapes (with dtypes) the op was called with."""
    excess_us: float
    """:attr:`slow`'s time beyond :attr:`expected_us`."""


def _elements(shapes: InputShapes) -> int:
    """The elements of the tensors among an op's recorded inputs (a tensor list's included)."""
    total = 0
    for sizes in shapes.dims:
        for tensor in sizes if sizes and isinstance(sizes[0], list) else [sizes]:
            if tensor and all(isinstance(n, int) for n in tensor):
                total += math.prod(tensor)
    return total


def _waits_for_the_gpu(facts: Facts, call: Span) -> bool:
    """Whether a host sync inside ``call`` (:func:`is_host_sync`: a copy to the host, a
    synchronize) holds half of it or more: a call that waits for the GPU takes as long as
    the work queued before it, whatever its shape."""
    trace = facts.trace
    long_enough = 0.5 * call.dur
    return any(
        inner.cat in LAUNCH_CATEGORIES and inner.dur >= long_enough and is_host_sync(trace, inner)
        for inner in trace.within(call)
    )


def _shape_cost(facts: Facts, name: str, floor_us: float) -> _ShapeCost | None:
    """``name``'s calls read by input shape, when its first calls with a shape cost at least
    ``floor_us`` beyond what its other calls say they should take, and new shapes keep
    coming; else None."""
    # Cheap first (C-level passes over a row of thousands of calls): without a few calls far
    # above the usual one, no first call can be slow.
    durations = sorted(map(_DUR, facts.trace.by_name.get(name, ())))
    if len(durations) < 2 * NEW_SHAPE_MIN_SLOW:
        return None
    far_above = NEW_SHAPE_RATIO * durations[len(durations) // 4]
    if durations[-NEW_SHAPE_MIN_SLOW] < far_above:
        return None
    # Nor, where the calls that far above the usual one add up to less than the floor.
    if sum(durations[bisect_left(durations, far_above) :]) < floor_us:
        return None
    calls = [span for span in facts.named(name) if span.cat == "cpu_op"]
    by_shape: dict[bytes, list[int]] = {}
    elements: list[int] = []
    for index, call in enumerate(calls):
        shapes = input_shapes(call)
        if shapes is None:
            return None  # recorded without shapes
        by_shape.setdefault(msgspec.json.encode((shapes.dims, shapes.types)), []).append(index)
        elements.append(_elements(shapes))
    seen = [i for indices in by_shape.values() for i in indices[1:]]
    if len(seen) < 2:
        return None
    per_element = [calls[i].dur / elements[i] for i in seen if elements[i]]
    typical_per_element = median(per_element) if per_element else None
    # No call is expected to take less than the op's quickest: a small shape against large
    # ones scales to nothing.
    quickest = min(calls[i].dur for i in seen)
    slow: list[tuple[int, float]] = []  # (index, what it should take)
    for indices in by_shape.values():
        first = indices[0]
        if len(indices) > 1:  # the same shape's later calls: the same work, set up
            expected, ratio = median(calls[i].dur for i in indices[1:]), NEW_SHAPE_RATIO
        elif typical_per_element and elements[first]:
            # Called once: against the op's time per input element, with a wider margin (a
            # larger shape can do more work per element than the smaller ones seen).
            expected = max(typical_per_element * elements[first], quickest)
            ratio = NEW_SHAPE_ONCE_RATIO
        else:
            continue
        if calls[first].dur >= ratio * expected and not _waits_for_the_gpu(facts, calls[first]):
            slow.append((first, expected))
    late = sum(index >= len(calls) // 2 for index, _ in slow)
    if len(slow) < NEW_SHAPE_MIN_SLOW or not late:
        return None
    slow.sort()
    spans = [calls[index] for index, _ in slow]
    if facts.steps:  # in two steps or more: one warm-up step's first calls are cold-start's
        starts = [step.start for step in facts.steps]
        inside = set()
        for call in spans:
            at = bisect_left(starts, call.start + 1e-9) - 1
            if at >= 0 and call.start < facts.steps[at].end:
                inside.add(at)
        if len(inside) < 2:
            return None
    excess = sum(calls[index].dur - expected for index, expected in slow)
    if excess < floor_us:
        return None
    slow_indices = {index for index, _ in slow}
    repeated = sum(len(indices) > 1 for indices in by_shape.values() if indices[0] in slow_indices)
    return _ShapeCost(
        name, spans, [expected for _, expected in slow], repeated,
        [calls[index] for index in sorted(seen)], late, len(by_shape), excess,
    )  # fmt: skip


class _Trials(NamedTuple):
    """What the slow first calls launched against the op's calls with shapes seen before
    (medians per call)."""

    kernels: float
    kinds: float
    timing_calls: float
    timing_names: list[str]
    seen_kernels: float
    seen_kinds: float


def _launched(facts: Facts, call: Span) -> tuple[int, int, Counter[str]]:
    """The kernels launched inside ``call``, their kinds (distinct names), and its calls that
    time GPU work (:data:`TIMING_EVENT_CALLS`) by name."""
    trace = facts.trace
    kernels: list[Span] = []
    timing: Counter[str] = Counter()
    for inner in trace.within(call):
        if inner.cat not in LAUNCH_CATEGORIES:
            continue
        if inner.name in TIMING_EVENT_CALLS:
            timing[inner.name] += 1
        elif inner.is_launch:
            kernels += [work for work in trace.gpu_work_of(inner) or () if work.cat == "kernel"]
    return len(kernels), len({kernel.name for kernel in kernels}), timing


def _candidate_trials(facts: Facts, cost: _ShapeCost) -> _Trials | None:
    """The slow first calls' launches, when they tried candidate kernels and timed them (see
    :data:`NEW_SHAPE_TRIAL_RATIO`); else None."""
    slow = [_launched(facts, call) for call in cost.slow]
    seen = [_launched(facts, call) for call in cost.seen[:_TRIAL_SAMPLE]]
    kinds = median(launched[1] for launched in slow)
    seen_kinds = median(launched[1] for launched in seen)
    timing = median(launched[2].total() for launched in slow)
    if (
        not timing
        or any(launched[2] for launched in seen)
        or kinds < NEW_SHAPE_TRIAL_RATIO * max(seen_kinds, 1)
    ):
        return None
    names: Counter[str] = Counter()
    for launched in slow:
        names.update(launched[2])
    return _Trials(
        median(launched[0] for launched in slow), kinds, timing,
        [name for name, _ in names.most_common()],
        median(launched[0] for launched in seen), seen_kinds,
    )  # fmt: skip


@rule(
    "new-shape-cost",
    "profiler table",
    see="""Grouped by input shape (key_averages(group_by_input_shape=True)), an op's rows
    called once are far slower than its rows called many times. In the trace: the op's
    calls with input shapes not seen earlier in the trace take many times its calls with
    shapes seen before, in two steps or more (over the whole recording, without steps).""",
    means="""A cost paid on the first call with each new shape, and paid again for every new
    shape: libraries that pick or build a kernel per shape (cuDNN's attention builds an
    execution plan per shape, cudnn.benchmark times candidates per shape, cuBLAS chooses
    per shape) and torch.compile (a recompile) do this. A length that grows each step (a
    key/value cache), or batches of many sizes, keep paying it. Pad or bucket the shapes
    to a few sizes, warm up every size before the timed run, or choose a path without
    per-shape set-up (leave cudnn.benchmark off where shapes keep changing).""",
    severity="warning",
    from_post=False,
)
def new_shape_cost(facts: Facts) -> Iterator[Hit]:
    cpu_us = _steps_cpu_us(facts) if facts.steps else facts.host_active_us
    if cpu_us <= 0:
        return
    floor = NEW_SHAPE_MIN_SHARE * cpu_us
    costs = [
        cost
        for name, row in facts.rows.items()
        if row.is_op
        and row.total_us >= floor
        and (cost := _shape_cost(facts, name, floor)) is not None
    ]
    if not costs:
        return
    # Nested ops share their slow calls (scaled_dot_product_attention around the backend's
    # op): report the innermost, which holds the time itself, under the outermost.
    slow_ids = {call.id: cost.name for cost in costs for call in cost.slow}
    trace = facts.trace
    outer_of: dict[str, str] = {}
    for cost in costs:
        longest = max(cost.slow, key=_DUR)
        for ancestor in trace.ancestors(longest):
            if ancestor.id in slow_ids and slow_ids[ancestor.id] != cost.name:
                outer_of[cost.name] = slow_ids[ancestor.id]  # the nearest
                break
    innermost = [cost for cost in costs if cost.name not in set(outer_of.values())]
    cost = max(innermost, key=lambda cost: cost.excess_us)
    outermost = cost.name
    while outermost in outer_of:
        outermost = outer_of[outermost]
    under = f" (under {short_name(outermost, 48)})" if outermost != cost.name else ""
    slow_median = median(map(_DUR, cost.slow))
    expected = median(cost.expected_us)
    times = median(call.dur / due for call, due in zip(cost.slow, cost.expected_us, strict=True))
    where = "the steps'" if facts.steps else "the recording's"
    if cost.repeated == len(cost.slow):
        basis = f"the same shapes' later calls take a median of {expected:.1f} µs"
    elif cost.repeated == 0:
        basis = (
            f"its calls with shapes seen before, scaled by input elements, suggest a median "
            f"of {expected:.1f} µs"
        )
    else:
        basis = (
            "the same shapes' later calls, or for a shape called once its calls with shapes "
            f"seen before scaled by input elements, suggest a median of {expected:.1f} µs"
        )
    evidence: dict[str, Any] = {
        "op": cost.name,
        "outer_op": outermost if outermost != cost.name else None,
        "slow_first_calls": len(cost.slow),
        "slow_median_us": us(slow_median),
        "expected_median_us": us(expected),
        "shapes_called_again": cost.repeated,
        "in_later_half": cost.late,
        "seen_shape_calls": len(cost.seen),
        "shapes": cost.shapes,
        "excess_us": us(cost.excess_us),
        ("steps_cpu_us" if facts.steps else "recording_cpu_us"): us(cpu_us),
        "share": round(cost.excess_us / cpu_us, 4),
        "slowest": [
            {**span_ref(call), "input_dims": getattr(input_shapes(call), "dims", None)}
            for call in sorted(cost.slow, key=_DUR, reverse=True)[:3]
        ],
    }
    trials = _candidate_trials(facts, cost)
    tried = ""
    if trials is not None:
        evidence["tried_candidates"] = {
            "kernels_median": trials.kernels,
            "kernel_kinds_median": trials.kinds,
            "timing_calls_median": trials.timing_calls,
            "timing_calls": trials.timing_names,
            "seen_shape_kernels_median": trials.seen_kernels,
            "seen_shape_kernel_kinds_median": trials.seen_kinds,
        }
        tried = (
            f" Each of those first calls launched a median of {trials.kernels:g} kernels of "
            f"{trials.kinds:g} kinds and made {trials.timing_calls:g} calls timing them "
            f"({', '.join(trials.timing_names)}), against {trials.seen_kernels:g} kernels of "
            f"{trials.seen_kinds:g} kinds and none in its calls with shapes seen before: it "
            "tried candidate kernels and timed them, as cuDNN does for each new shape under "
            "torch.backends.cudnn.benchmark = True."
        )
    yield (
        f"{short_name(cost.name, 48)}{under}: the first call with each of {len(cost.slow)} "
        f"input shapes takes a median of {slow_median:.1f} µs, {times:.0f}× as long as "
        f"expected ({basis}); {cost.excess_us:.1f} µs more in all, "
        f"{percent(cost.excess_us / cpu_us)} of {where} CPU time, {cost.late} of them in the "
        "later half of its calls: a cost paid once per new shape, and again as new shapes "
        f"keep coming.{tried}",
        evidence,
    )


def _break_cycles(found: list[dict[str, Any]]) -> None:
    """Ops that run inside each other by turns (x in y in x) all have a ``within``: the op of
    such a cycle with the most calls is counted as its own."""
    by_op = {entry["op"]: entry for entry in found}
    for entry in found:
        seen = []
        current = entry
        while current["within"] is not None and current["op"] not in seen:
            seen.append(current["op"])
            current = by_op[current["within"]]
        if current["within"] is not None:  # came back to an op of the path: a cycle
            cycle = seen[seen.index(current["op"]) :]
            most = max(cycle, key=lambda op: by_op[op]["calls"])
            by_op[most]["within"] = None


def _called_within(facts: Facts, calls: list[Any], named: set[str]) -> str | None:
    """The other op of ``named`` whose calls hold at least :data:`MANY_CALLS_WITHIN_SHARE` of
    ``calls`` (each call's nearest enclosing op, labels and Python frames skipped), or None."""
    spans = facts.trace.spans
    enclosing: Counter[str] = Counter()
    for call in calls:
        parent = call.parent
        while parent is not None and spans[parent].cat != "cpu_op":
            parent = spans[parent].parent
        if parent is not None:
            enclosing[spans[parent].name] += 1
    own = calls[0].name if calls else None
    for name, count in enclosing.most_common():
        if name != own and name in named:
            return name if count >= MANY_CALLS_WITHIN_SHARE * len(calls) else None
    return None


def _op_calls(facts: Facts, name: str, calls: int) -> list[Any]:
    """The op's calls: ``cpu_op`` spans of the name, a call nested in a call of its own name
    left out as the profiler table folds it. ``calls``: the op's row's count."""
    same = facts.trace.by_name.get(name, [])
    # Unless some call nests in one of its name, the row counts every cpu_op span of the
    # name: when that is every span of it, there is none of another category to leave out.
    if name in facts.names_nested_in_themselves or calls != len(same):
        nested = facts.nested_in_own_name
        same = [span for span in same if span.cat == "cpu_op" and span.id not in nested]
    return same


def _median_and_long(calls: list[Any]) -> tuple[float, int]:
    """The median duration of ``calls``, µs, and how many take over twice that."""
    if not calls:
        return 0.0, 0
    # C-level passes where they do: an op's calls run to tens of thousands.
    durations = list(map(_DUR, calls))
    typical = median(durations)
    return typical, sum(map((2 * typical).__lt__, durations))


@rule(
    "cost-in-children",
    "profiler table",
    see="CPU total far above Self CPU for a row.",
    means="""The row's own code is cheap; its time is spent in the calls nested under it.
    Follow the nesting down to the row that holds the time itself.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_01_overhead_vs_compute",
)
def cost_in_children(facts: Facts) -> Iterator[Hit]:
    # Without steps, the host's whole recording is the time a row is a share of.
    steps_cpu = _steps_cpu_us(facts) if facts.steps else facts.host_active_us
    if steps_cpu <= 0:
        return
    found = []
    for name, row in sorted(facts.rows.items(), key=lambda item: -item[1].total_us):
        if row.total_us < COST_IN_CHILDREN_MIN_SHARE * steps_cpu:
            break
        if not facts.steps and not row.is_op:
            continue  # a label around a whole run without steps holds everything: no news
        self_us = max(row.self_us, 0.0)
        if self_us <= COST_IN_CHILDREN_MAX_SELF * row.total_us:
            found.append((name, row.total_us, self_us))
    if not found:
        return
    name, name_total, self_us = found[0]
    # The calls the row counts: as key_averages() does, a call that is the only child of one
    # of its name (aten::sum calling aten::sum) is folded into it, not one more.
    trace = facts.trace
    named = [span for span in facts.named(name) if span.cat in _ROW_CATEGORIES]
    nested = [
        span for span in named if span.parent is not None and trace.spans[span.parent].name == name
    ]
    folded = measures.folded_calls(trace, nested) if nested else {}
    occurrences = sorted((span for span in named if span.id not in folded), key=_DUR)
    middle = occurrences[len(occurrences) // 2]
    # One call, or a few, of many hold nearly all of the total (CUDA's start-up inside a
    # first call, a sync in one call per step): follow the typical one of them, not the
    # median call, which holds none of it.
    held = _calls_holding(occurrences, COST_IN_CHILDREN_ONE_CALL * name_total)
    lower_middle = occurrences[(len(occurrences) - 1) // 2]
    if len(held) == len(occurrences) or (
        held[0].dur <= COST_IN_CHILDREN_LONG_CALL * lower_middle.dur
    ):
        held = []
    typical = _middle_by_time(held) if held else middle
    path, leaf = _drill(facts, typical)
    # The children of that one call, by name (three matmuls are one entry, not three).
    by_name: dict[str, list[float]] = {}
    for child in facts.trace.children(typical):
        by_name.setdefault(child.name, []).append(child.dur)
    children = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:3]
    if len(path) > 1:
        where = "the time is below it: " + " → ".join(link["name"] for link in path)
        waited = _waits_for_another_thread(facts, leaf)
        if waited is not None:
            thread, busy = waited
            where += (
                f", which waits there while {thread} runs ops for {busy:.1f} of its "
                f"{leaf.dur:.1f} µs"
            )
        elif leaf.cat in _CALL_CATEGORIES and is_host_sync(facts.trace, leaf):
            where += ", a host sync: it waits for the GPU to finish the work queued before it"
    elif children:
        where = "the time is spread over its children: " + ", ".join(
            f"{name} ({durs[0]:.1f} µs)"
            if len(durs) == 1
            else f"{len(durs)}× {name} ({sum(durs):.1f} µs)"
            for name, durs in children
        )
    else:
        where = "its typical call has no child: a few long calls hold the time"
    if len(held) == 1:
        share = percent(typical.dur / name_total)
        where = f"one call holds {share} of it ({typical.dur:.1f} µs); {where}"
    elif held:
        # A call nested in another of them holds no time of its own: counted once.
        holding = measures.union_us(sorted(held, key=_START), in_start_order=True)
        where = (
            f"{len(held)} of its {len(occurrences)} calls hold "
            f"{percent(holding / name_total)} of it ({held[0].dur:.1f} to "
            f"{held[-1].dur:.1f} µs each, its median call {middle.dur:.1f} µs); in the one at "
            f"the middle of their time ({typical.dur:.1f} µs) {where}"
        )
    elif len(occurrences) > 1 and (len(path) > 1 or children):
        # Of two calls, the one followed is a real call, the longer: not their mean.
        which = "the longer of its two calls" if len(occurrences) == 2 else "its median call"
        where = f"in {which} ({typical.dur:.1f} µs) {where}"
    yield (
        f"{name}: {name_total:.1f} µs total, {self_us:.1f} µs self "
        f"({percent(self_us / name_total)}); {where}.",
        {
            "rows": [
                {"name": n, "total_us": us(t), "self_us": us(s), "self_share": round(s / t, 4)}
                for n, t, s in found[:_REPORTED_ROWS]
            ],
            "drill_down": path,
            "children": [
                {"name": name, "calls": len(durs), "total_us": us(sum(durs))}
                for name, durs in children
            ],
            ("steps_cpu_us" if facts.steps else "recording_cpu_us"): us(steps_cpu),
        },
    )


def _middle_by_time(calls: list[Span]) -> Span:
    """The call at the middle of ``calls``' time (sorted by duration): the one that takes the
    summed durations past half. Of a few long calls of like length, the median one; where
    one holds most of the time, that one."""
    half, so_far = 0.5 * sum(map(_DUR, calls)), 0.0
    for call in calls:
        so_far += call.dur
        if so_far >= half:
            return call
    return calls[-1]


def _calls_holding(calls: list[Span], share_us: float) -> list[Span]:
    """The fewest of ``calls`` (sorted by duration) whose durations add up to ``share_us``:
    the longest ones, in the same order; all of them when they add up to less."""
    total = 0.0
    for index in range(len(calls) - 1, -1, -1):
        total += calls[index].dur
        if total >= share_us:
            return calls[index:]
    return calls


def _drill(facts: Facts, span: Span) -> tuple[list[dict[str, Any]], Span]:
    """From ``span`` (a typical occurrence), follow the longest child down as long as it holds
    most of its parent's time: the path, and the span it ends on."""
    # The subtree's spans by parent, from one scan of it: Trace.children at every level scans
    # every descendant again (a deep with_stack chain made that depth × subtree).
    children_of: dict[int, list[Span]] = {}
    for inner in facts.trace.within(span):
        if inner.parent is not None:
            children_of.setdefault(inner.parent, []).append(inner)
    path = []
    while True:
        self_us = facts.self_us(span)
        path.append({"name": span.name, "total_us": us(span.dur), "self_us": us(self_us)})
        children = children_of.get(span.id, [])
        longest = max(children, key=lambda child: child.dur, default=None)
        if longest is None or longest.dur < DRILL_MIN_CHILD_SHARE * span.dur:
            return path, span
        span = longest


def _waits_for_another_thread(facts: Facts, span: Span) -> tuple[str, float] | None:
    """The thread (by name) of the same process that runs ops for at least half of ``span``'s
    own time while ``span``, a Python frame, holds its thread with no child, and how long: a
    frame that only waits (autograd's ``run_backward`` while the engine's thread runs the
    backward ops), or None. A runtime call or an op waits for the GPU, not for a thread."""
    own = facts.self_us(span)
    if span.cat != "python_function" or own < DRILL_MIN_CHILD_SHARE * span.dur:
        return None
    trace = facts.trace
    busiest = max(
        (
            measures.thread_activity(trace, lane, span.start, span.end)
            for lane in trace.lanes
            if lane.kind == "cpu" and lane != span.lane and lane.pid == span.lane.pid
        ),
        key=lambda activity: activity.op_us,
        default=None,
    )
    if busiest is None or busiest.op_us < 0.5 * own:
        return None
    name = trace.thread_name(busiest.lane)
    thread = f"thread {busiest.lane.tid}" + (f" ({name})" if name else "")
    return thread, busiest.op_us
