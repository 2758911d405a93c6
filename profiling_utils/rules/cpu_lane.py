"""Cheatsheet table "CPU lane": the host thread's steps, labels, runtime calls and syncs."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from itertools import accumulate, pairwise
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec

from .. import measures
from ..tables import percent
from ..trace import GraphCapture, Span, Step, input_shapes
from .facts import (
    CUDAGRAPH_TREES_PREFIX,
    DEVICE_SYNC_CALLS,
    DRIVER_LAUNCH_PREFIXES,
    MEMCPY_CALL_PREFIXES,
    PLAIN_LAUNCH_CALLS,
    SLOW_STEP_MIN_EXCESS_LAUNCHES,
    SLOW_STEP_MIN_RATIO,
    Copy,
    Facts,
    Launch,
    gb_s,
    median,
    short_name,
    span_ref,
    step_label,
    us,
)
from .registry import Hit, rule

DATA_LOADER_MIN_SHARE = 0.10
"""``data-loader``: in the median step, the GPU sits idle while the next batch is fetched
for at least this share of the step's CPU time (a fetch while the GPU still runs the queued
work of the step before costs nothing)."""

COLD_START_MIN_RATIO = 3.5
"""``cold-start``: the first step is at least this many times the median of the others..."""

COLD_START_LATER_AS_WIDE = 0.8
"""``cold-start`` stays silent when a later step is at least this share of the first one's
width: the first step's work then comes back, it is no one-time cost."""

COLD_START_MIN_EXCESS_LAUNCHES = 3.0
"""... and longer by at least this many of the trace's launch latencies
(:attr:`~profiling_utils.rules.facts.Facts.launch_latency_us`): less is noise."""

COLD_START_OUTSIDE_OPS_SHARE = 0.25
"""``cold-start`` says how much of the first step runs outside every op and runtime call of
every thread when that time exceeds the other steps' by at least this share of the step's
extra time (on the MI250 and MI300X traces, most of it: host work the profiler does not
record as an op), and names the op, the runtime call or torch.compile's compiling that holds
this share of it."""

PERIODIC_STEP_MIN_RATIO = 1.2
"""``periodic-step``: the median of the steps at one interval is at least this many times the
median of the other steps, and longer by at least
:data:`~profiling_utils.rules.facts.SLOW_STEP_MIN_EXCESS_LAUNCHES` launch latencies; each of
them is wider than any other step..."""

PERIODIC_STEP_MIN_WIDE = 3
"""... at least this many of them, at an interval of two steps or more."""

DEAD_WINDOW_MIN_RATIO = 5.0
"""``dead-window``: a step's gap is at least this many times the shortest gap of the other
steps under the same label (the steady state: right after a cold start the second step is
often still settling, so a median of few steps would understate the contrast)..."""

DEAD_WINDOW_MIN_EXCESS_LAUNCHES = 3.0
"""... and longer by at least this many of the trace's launch latencies: less is noise."""

EXPLICIT_COPY_OPS = frozenset(
    {
        "aten::copy_",
        "aten::to",
        "aten::_to_copy",
        "aten::clone",
        "aten::contiguous",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::index_copy_",
        "aten::_foreach_copy_",
        "aten::item",
        "aten::_local_scalar_dense",
    }
)
"""Ops that are copies by definition (``x.to()``, ``x.clone()``, ``y.copy_(x)``, and
``x.item()``, which copies one value to the host): a copy issued from one of them is one the
code asked for. (What ``.item()`` costs is the wait for the GPU, not the copy: a host sync,
which ``intra-step-gap`` reads.)"""

_GROUPS_REPORTED = 5
_START = attrgetter("start")
_DUR = attrgetter("dur")


def _other_median(values: dict[int, float], skip: int) -> float | None:
    others = [value for key, value in values.items() if key != skip]
    return median(others) if others else None


@rule(
    "cold-start",
    "CPU lane",
    see="The first profiled step is several times wider than the others.",
    means="""One-time work landed in it: lazy loading of kernels and libraries, workspace
    allocation, library heuristics, the capture of a CUDA graph that later steps replay
    (torch.compile's mode="reduce-overhead" captures at a compiled function's second call),
    or the profiler's own start-up (its first buffer request). The overhead row often names
    some of it (Lazy Function Loading, Runtime Triggered Module Loading, Activity Buffer
    Request). Warm up before profiling, or let the schedule's wait and warmup steps absorb
    it, and read steady-state numbers from the later steps.""",
    severity="warning",
    example="auto_examples/part1_matmul_add/plot_02_cold_start",
)
def cold_start(facts: Facts) -> Iterator[Hit]:
    steps = facts.steps
    if len(steps) < 2:
        return
    first = steps[0]
    widths = {step.number: step.span.dur for step in steps}
    typical = _other_median(widths, first.number)
    assert typical is not None
    if typical <= 0:  # steps recorded with no duration give nothing to compare against
        return
    width = first.span.dur
    if width < COLD_START_MIN_RATIO * typical:
        return
    # A later step as wide (a server's periodic prefill, an evaluation every N steps) makes
    # the first one's width the program's, not a one-time cost.
    if any(step.span.dur >= COLD_START_LATER_AS_WIDE * width for step in steps[1:]):
        return
    min_excess = COLD_START_MIN_EXCESS_LAUNCHES * facts.launch_latency_us
    if width - typical < min_excess:
        return
    trace = facts.trace
    overhead = [
        span for span in trace.overhead if span.start < first.end and span.end > first.start
    ]
    overhead_us = sum(min(s.end, first.end) - max(s.start, first.start) for s in overhead)
    slowest = _slowest_call(facts, first.number)
    evidence: dict[str, Any] = {
        "step": first.number,
        "step_start_us": us(first.start),
        "cpu_us": us(width),
        "median_other_cpu_us": us(typical),
        "ratio": round(width / typical, 2),
        "min_excess_us": us(min_excess),
        "other_steps_cpu_us": {str(n): us(w) for n, w in widths.items() if n != first.number},
        "profiler_overhead": [span_ref(span) for span in overhead],
        "profiler_overhead_us": us(overhead_us),
    }
    message = (
        f"{step_label(first.number)} took {width:.1f} µs, {width / typical:.1f}× the median "
        f"of the other steps ({typical:.1f} µs)"
    )
    if overhead:
        names = ", ".join(dict.fromkeys(span.name for span in overhead))
        message += f"; {overhead_us:.1f} µs of it overlaps the overhead row's {names}"
    extra = width - typical
    # Time no CPU thread spent in a recorded op or runtime call: the step's own thread waits
    # in a backward pass that another thread runs.
    work = measures.host_work_in_windows(trace, [(step.start, step.end) for step in steps])
    outside = {step.number: step.span.dur - w for step, w in zip(steps, work, strict=True)}
    usual_outside = _other_median(outside, first.number)
    assert usual_outside is not None
    evidence["outside_ops_us"] = us(outside[first.number])
    evidence["median_other_outside_ops_us"] = us(usual_outside)
    if outside[first.number] - usual_outside >= COLD_START_OUTSIDE_OPS_SHARE * extra:
        message += (
            f"; {outside[first.number]:.1f} µs of it runs outside every op and runtime call "
            f"of every thread ({usual_outside:.1f} µs in the other steps)"
        )
    if slowest is not None:
        evidence["slowest_call"] = slowest
        message += "; " + _slowest_call_words(facts, slowest, extra)
    alone = _calls_only_in_step(facts, first.number)
    if alone is not None and alone["us"] >= COLD_START_OUTSIDE_OPS_SHARE * extra:
        evidence["calls_only_in_step"] = alone
        message += "; " + _calls_only_in_step_words(alone, extra)
    op = _slowest_op(facts, first.number, COLD_START_OUTSIDE_OPS_SHARE * extra)
    if op is not None:
        # Every op of a first step is a first call with its shapes: not a reason of its own.
        evidence["slowest_op"] = {k: v for k, v in op.items() if k != "new_shapes"}
        excess = op["dur_us"] - op["typical_us"]
        share = (
            f"{percent(excess / extra)} of the extra"
            if excess <= extra
            else _of_extra(excess, extra)
        )
        message += (
            f"; {short_name(op['name'], 48)} took {op['dur_us']:.1f} µs against {_usual(op)} "
            f"({share})"
        )
    only = _ops_only_in_step(facts, first.number, COLD_START_OUTSIDE_OPS_SHARE * extra)
    if only is not None:
        evidence["only_in_step"] = only
        message += "; " + _ops_only_in_step_words(only, extra)
    compiling = _compiling_in_step(facts, first.number, extra)
    if compiling is not None:
        evidence["compiling"] = compiling
        message += "; " + _compiling_words(compiling, extra)
    captured = _captures_in_step(facts, first.number)
    if captured is not None:
        evidence["graph_captures"] = captured
        message += "; " + _capture_words(captured, extra)
    yield message + ".", evidence


@rule(
    "slow-step",
    "CPU lane",
    see="""One step after the first is several times wider than the others.""",
    means="""Something ran in that step only: a stall on the host (garbage collection, a
    checkpoint save, logging, a batch that took long to load), a recompilation, a wait on
    other ranks or on the GPU, or an input of another size. Slow steps at one interval
    (every fourth, say) are a cost that comes back: an optimizer step after gradient
    accumulation, logging or a checkpoint every few steps. The evidence says whether the
    time went to host work outside every op, to one runtime call, to calls no other step
    makes (freeing pinned memory as a CUDA graph capture empties the caches), to ops no
    other step runs, to the capture of a CUDA graph (the first batch of a new size, where
    the other steps replay graphs captured before), or to more GPU work; steady-state
    numbers should leave the step out.""",
    severity="warning",
    from_post=False,
)
def slow_step(facts: Facts) -> Iterator[Hit]:
    steps = facts.steps
    slow = facts.slow_step_widths
    if not slow:
        return
    min_excess = SLOW_STEP_MIN_EXCESS_LAUNCHES * facts.launch_latency_us
    number = max(slow, key=lambda n: slow[n][0] / slow[n][1])
    width, typical = slow[number]
    step = next(s for s in steps if s.number == number)
    extra = width - typical
    evidence: dict[str, Any] = {
        "step": number,
        "step_start_us": us(step.start),
        "cpu_us": us(width),
        "median_other_cpu_us": us(typical),
        "ratio": round(width / typical, 2),
        "slow_steps_cpu_us": {str(n): us(w) for n, (w, _) in slow.items()},
        "min_excess_us": us(min_excess),
    }
    message = (
        f"{step_label(number)} took {width:.1f} µs, {width / typical:.1f}× the median of the "
        f"other steps ({typical:.1f} µs)"
    )
    cycle = _step_cycle(facts)
    if cycle is not None and {wide.number for wide in cycle.wide} == set(slow):
        evidence["period"] = cycle.period
        message += (
            f" (every {_ordinal(cycle.period)} step took {SLOW_STEP_MIN_RATIO:g}× or more: "
            f"{_step_list(sorted(slow))}, work that comes back every {cycle.period} steps: "
            "see periodic-step)"
        )
    elif len(slow) > 1:
        # Another slow step that captured a CUDA graph has its cause in the trace: named.
        capturing = {facts.step_number_of(capture.begin) for capture in facts.trace.graph_captures}
        captured = sorted(other for other in slow if other != number and other in capturing)
        also = ""
        if captured:
            evidence["other_slow_steps_capturing"] = captured
            also = f"; {_step_list(captured)} captured a CUDA graph"
        message += (
            f" ({len(slow) - 1} other step(s) took {SLOW_STEP_MIN_RATIO:g}× or more too{also})"
        )
    # Time no CPU thread spent in a recorded op or runtime call (labels and Python frames,
    # which with_stack records, cover time without doing any of it): in this step, and in
    # the other steps nearest it.
    trace = facts.trace
    others = sorted((s for s in steps if s.number != number), key=lambda s: abs(s.number - number))
    compared = [step, *others[:_SLOW_STEP_COMPARED]]
    work = measures.host_work_in_windows(trace, [(s.start, s.end) for s in compared])
    own = step.span.dur - work[0]
    usual_outside = median(s.span.dur - w for s, w in zip(compared[1:], work[1:], strict=True))
    evidence["outside_ops_us"] = us(own)
    evidence["median_other_outside_ops_us"] = us(usual_outside)
    reasons = []
    if own - usual_outside >= COLD_START_OUTSIDE_OPS_SHARE * extra:
        reason = (
            f"{own:.1f} µs of it runs outside every op and runtime call "
            f"({usual_outside:.1f} µs in the other steps): host work the profiler does not "
            "record as an op"
        )
        label, unseen = facts.emptiest_label(step.start, step.end, frames=True)
        if label is not None and unseen >= COLD_START_OUTSIDE_OPS_SHARE * extra:
            evidence["label_without_ops"] = {"name": label, "us": us(unseen)}
            reason += f", {unseen:.1f} µs of it under {short_name(label, 48)}"
        reasons.append(reason)
    slowest = _slowest_call(facts, number)
    if slowest is not None and slowest["dur_us"] - slowest["typical_us"] >= (
        COLD_START_OUTSIDE_OPS_SHARE * extra
    ):
        evidence["slowest_call"] = slowest
        reasons.append(_slowest_call_words(facts, slowest, extra))
    alone = _calls_only_in_step(facts, number)
    if alone is not None and alone["us"] >= COLD_START_OUTSIDE_OPS_SHARE * extra:
        evidence["calls_only_in_step"] = alone
        reasons.append(_calls_only_in_step_words(alone, extra))
    compiling = _compiling_in_step(facts, number, extra)
    if compiling is not None:
        evidence["compiling"] = compiling
        reasons.append(_compiling_words(compiling, extra))
    captured = _captures_in_step(facts, number)
    if captured is not None:
        evidence["graph_captures"] = captured
        reasons.append(_capture_words(captured, extra))
    only = _ops_only_in_step(facts, number, COLD_START_OUTSIDE_OPS_SHARE * extra)
    if only is not None:
        evidence["only_in_step"] = only
        reasons.append(_ops_only_in_step_words(only, extra))
    op = _slowest_op(facts, number, COLD_START_OUTSIDE_OPS_SHARE * extra)
    if op is not None:
        evidence["slowest_op"] = op
        share = (op["dur_us"] - op["typical_us"]) / extra
        first = (
            ", its first call with these input shapes (new-shape-cost reads such first "
            "calls, where several shapes have one)"
            if op["new_shapes"]
            else ""
        )
        reasons.append(
            f"{short_name(op['name'], 48)} took {op['dur_us']:.1f} µs against {_usual(op)} "
            f"({percent(share)} of the extra){first}"
        )
    busy = {t.step: t.gpu_busy_us for t in facts.step_times}
    usual_busy = _other_median(busy, number)
    if facts.trace.has_gpu and number in busy and usual_busy is not None:
        evidence["gpu_busy_us"] = us(busy[number])
        evidence["median_other_gpu_busy_us"] = us(usual_busy)
        if busy[number] - usual_busy >= COLD_START_OUTSIDE_OPS_SHARE * extra:
            reasons.append(
                f"its GPU work ran {busy[number]:.1f} µs against {usual_busy:.1f} µs in the "
                "other steps: more or slower work on the GPU"
            )
    if reasons:
        message += "; " + "; ".join(reasons)
    else:
        message += ": no one place holds the extra time (see its ops and calls)"
    yield message + ".", evidence


_SLOW_STEP_COMPARED = 20
"""``slow-step`` compares the slow step's unrecorded host time with this many other steps'
(those nearest it)."""


def _ordinal(number: int) -> str:
    """``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``..."""
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{'th' if 10 <= number % 100 <= 20 else suffix}"


def _step_list(numbers: list[int]) -> str:
    """``ProfilerStep#4, #8 and #12``."""
    labels = [step_label(numbers[0]), *(f"#{n}" for n in numbers[1:])]
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"


class _StepCycle(NamedTuple):
    """Steps that come back at one interval wider than the others (:func:`_step_cycle`)."""

    period: int
    wide: list[Step]
    rest: list[Step]
    stall: Step | None = None
    """A step outside the cycle wider than its wide steps, left out of it: a one-off stall
    that ``slow-step`` reports (a garbage-collection pause in one step of the loop)."""


def _step_cycle(facts: Facts) -> _StepCycle | None:
    """The steps at one interval of two or more that are each wider than every other step
    (see :data:`PERIODIC_STEP_MIN_RATIO` and :data:`PERIODIC_STEP_MIN_WIDE`), at the shortest
    such interval; the first step is ``cold-start``'s and left out, and so is one other
    step wider than them all that ``slow-step`` reports (a one-off stall must not hide the
    cycle). None without; and where the steps read are not numbered one after the other."""
    steps = facts.steps[1:]
    count = len(steps)
    if count < 2 * PERIODIC_STEP_MIN_WIDE:
        return None
    if [step.number for step in steps] != list(range(steps[0].number, steps[0].number + count)):
        return None
    widths = [step.span.dur for step in steps]
    by_width = sorted(range(count), key=widths.__getitem__, reverse=True)
    # The cycle holds the widest step, or else the next widest with the widest a slow step.
    tries: list[tuple[int, int | None]] = [(by_width[0], None)]
    if steps[by_width[0]].number in facts.slow_step_widths:
        tries.append((by_width[1], by_width[0]))
    min_excess = SLOW_STEP_MIN_EXCESS_LAUNCHES * facts.launch_latency_us
    for anchor, stall in tries:
        for period in range(2, (count - 1) // (PERIODIC_STEP_MIN_WIDE - 1) + 1):
            wide = set(range(anchor % period, count, period))
            if len(wide) < PERIODIC_STEP_MIN_WIDE or stall in wide:
                continue
            rest = [index for index in range(count) if index not in wide and index != stall]
            wide_widths = [widths[index] for index in sorted(wide)]
            rest_widths = [widths[index] for index in rest]
            typical, usual = median(wide_widths), median(rest_widths)
            if (
                min(wide_widths) > max(rest_widths)
                and typical >= PERIODIC_STEP_MIN_RATIO * usual
                and typical - usual >= min_excess
            ):
                return _StepCycle(
                    period,
                    [steps[index] for index in sorted(wide)],
                    [steps[index] for index in rest],
                    None if stall is None else steps[stall],
                )
    return None


def _only_in(
    facts: Facts,
    wide: list[Step],
    rest: list[Step],
    leave_out: Callable[[Span], bool] | None = None,
) -> tuple[str, float] | None:
    """The op or label that every one of ``wide`` runs on its thread and none of ``rest`` does,
    with the most time in each wide step (its median), and that time, µs; else None. Spans
    for which ``leave_out`` is true are not read."""
    trace = facts.trace
    spans = trace.spans

    def held(step: Step) -> dict[str, float]:
        time: dict[str, float] = {}
        for span in trace.within(step.span):
            if span.cat not in ("cpu_op", "user_annotation"):
                continue
            if leave_out is not None and leave_out(span):
                continue
            if span.parent is not None and spans[span.parent].name == span.name:
                continue  # an op calling itself: its time is its caller's
            time[span.name] = time.get(span.name, 0.0) + span.dur
        return time

    wide_time = [held(step) for step in wide]
    seen_elsewhere = {name for step in rest for name in held(step)}
    names = set.intersection(*(set(time) for time in wide_time)) - seen_elsewhere
    if not names:
        return None
    per_step = {name: median(time[name] for time in wide_time) for name in names}
    name = max(sorted(per_step), key=per_step.__getitem__)
    return name, per_step[name]


@rule(
    "periodic-step",
    "CPU lane",
    see="""Every Nth step is wider than the others, step after step (each wider than any
    other step, but for one stall wider still, which slow-step reports).""",
    means="""Work that runs every few steps: the optimizer's update after gradient
    accumulation, logging, an evaluation or a checkpoint every N steps. The steps are not
    alike: a median step leaves that work out, so time a whole cycle of N steps, and read
    the wide steps for what the cycle adds. The evidence names what only the wide steps
    run.""",
    severity="info",
    from_post=False,
)
def periodic_step(facts: Facts) -> Iterator[Hit]:
    cycle = _step_cycle(facts)
    if cycle is None:
        return
    wide = [step.span.dur for step in cycle.wide]
    rest = [step.span.dur for step in cycle.rest]
    typical, usual = median(wide), median(rest)
    numbers = [step.number for step in cycle.wide]
    evidence: dict[str, Any] = {
        "period": cycle.period,
        "wide_steps": numbers,
        "median_wide_cpu_us": us(typical),
        "median_other_cpu_us": us(usual),
        "ratio": round(typical / usual, 2),
    }
    but = ""
    if cycle.stall is not None:
        evidence["left_out_step"] = cycle.stall.number
        but = (
            f" but {step_label(cycle.stall.number)} ({cycle.stall.span.dur:.1f} µs), a one-off "
            "stall that slow-step reports"
        )
    message = (
        f"Every {_ordinal(cycle.period)} step is wider than the others: {_step_list(numbers)} "
        f"take a median of {typical:.1f} µs against {usual:.1f} µs ({typical / usual:.2f}×), "
        f"each wider than any other step{but} (the first step left out: it is cold-start's)"
    )
    only = _only_in(facts, cycle.wide, cycle.rest)
    if only is not None:
        name, time = only
        evidence["only_in_wide_steps"] = {"name": name, "median_us": us(time)}
        message += f"; only they run {short_name(name, 48)} (a median of {time:.1f} µs in each)"
    message += (
        f": work that comes back every {cycle.period} steps. A median step leaves it out: "
        f"time a cycle of {cycle.period} steps."
    )
    yield message, evidence


def _tensor_shapes(span: Span) -> tuple[bytes, tuple[str, ...]] | None:
    """What tells ``span``'s calls apart where shapes were recorded: its input shapes and
    its ``Concrete Inputs`` (the sizes given to ``aten::repeat`` or ``aten::randn``, which
    its dims do not hold); ``None`` where neither tells anything (a factory op's dims are
    empty whatever it makes, and older torch records no concrete inputs)."""
    shapes = input_shapes(span)
    if shapes is None:
        return None
    concrete = span.args.get("Concrete Inputs")
    given = tuple(map(str, concrete)) if isinstance(concrete, list) else ()
    if not any(shapes.dims) and not any(given):
        return None
    return msgspec.json.encode(shapes), given  # hashable: a key to group calls by


_LIKE = "like calls"
_LONGEST = "longest call"


def _in_step_and_elsewhere(
    facts: Facts, spans: list[Span], number: int
) -> list[tuple[Span, list[float], str]]:
    """``spans`` in step ``number``, each with the durations of its like calls in the other
    steps: where every step calls its name as often, the call at the same position among
    them (a layer's first ``aten::addmm`` against the first of the others, not against a
    smaller layer's); else the calls of its name with its input shapes, where recorded (a
    branch taken in one step shifts the positions); else, not knowing which is its like, the
    longest call of its name there (a call beyond that is beyond any of them)."""
    in_step: list[Span] = []
    elsewhere: dict[str, list[Span]] = {}
    by_role: dict[tuple[str, int], list[float]] = {}
    position: dict[tuple[int, str], int] = {}
    roles = []
    for span in spans:
        step = facts.step_number_of(span)
        if step is None:
            continue
        key = (step, span.name)
        index = position[key] = position.get(key, -1) + 1
        if step == number:
            in_step.append(span)
            roles.append(index)
        else:
            elsewhere.setdefault(span.name, []).append(span)
            by_role.setdefault((span.name, index), []).append(span.dur)
    counts: dict[str, set[int]] = {}
    for (_, name), index in position.items():
        counts.setdefault(name, set()).add(index)
    by_shapes: dict[str, dict[Any, list[float]]] = {}  # read once per name, where needed
    like = []
    for span, index in zip(in_step, roles, strict=True):
        others = elsewhere.get(span.name, [])
        if len(counts[span.name]) == 1:  # every step calls it as often
            usual = by_role.get((span.name, index), [])
        else:
            grouped = by_shapes.get(span.name)
            if grouped is None:
                grouped = by_shapes[span.name] = {}
                for other in others:
                    grouped.setdefault(_tensor_shapes(other), []).append(other.dur)
            shapes = _tensor_shapes(span)
            usual = grouped.get(shapes, []) if shapes is not None else []
            if not usual:
                usual = [max(map(_DUR, others))] if others else []
                like.append((span, usual, _LONGEST))
                continue
        like.append((span, usual, _LIKE))
    return like


def _usual(found: dict[str, Any]) -> str:
    """What a slow call was set against, in words: ``"40.0 µs in the other steps"``."""
    if found["compared_with"] == _LONGEST:
        return (
            f"{found['typical_us']:.1f} µs, the longest call of its name in the other steps, "
            "which call it a different number of times"
        )
    return f"{found['typical_us']:.1f} µs in the other steps"


def _slowest_op(facts: Facts, number: int, least_us: float) -> dict[str, Any] | None:
    """The op call of step ``number`` furthest beyond the median of the same op's calls in
    the other steps, or the innermost call inside it that is itself at least ``least_us``
    beyond its own (the outer ops hold their inner calls' excess too), with ``new_shapes``:
    whether no earlier call of the op had its input shapes."""
    in_step = _in_step_and_elsewhere(facts, facts.trace.cpu_ops, number)
    # id -> (excess, call, typical, what it is set against)
    over: dict[int, tuple[float, Span, float, str]] = {}
    for op, usual, against in in_step:
        if not usual or op.dur - least_us < min(usual):
            continue  # cheap: even against its quickest other call, not enough
        if facts.is_compile_work(op):
            continue  # torch.compile's labels (filed as ops) and work: said on their own
        typical = median(usual)
        if op.dur - typical >= least_us:
            over[op.id] = (op.dur - typical, op, typical, against)
    if not over:
        return None
    # The call with the most excess, then down the calls inside it that hold enough of it
    # themselves (the outer ones hold their inner calls' excess too).
    excess, op, typical, against = max(over.values(), key=lambda entry: entry[0])
    inside = [
        entry
        for entry in over.values()
        if entry[1].depth > op.depth
        and any(ancestor.id == op.id for ancestor in facts.trace.ancestors(entry[1]))
    ]
    if inside:
        _, op, typical, against = max(inside, key=lambda entry: (entry[1].depth, entry[0]))
    shapes = input_shapes(op)
    new = shapes is not None and not any(
        earlier.start < op.start and input_shapes(earlier) == shapes
        for earlier in facts.trace.by_name.get(op.name, [])
    )
    return {**span_ref(op), "typical_us": us(typical), "compared_with": against, "new_shapes": new}


def _calls_only_in_step(facts: Facts, number: int) -> dict[str, Any] | None:
    """Of the runtime calls that step ``number`` makes and no other step does (freeing pinned
    memory as a CUDA graph capture empties the caches, a one-time allocation), the name with
    the most time inside the step, its calls on every thread counted once where they overlap:
    ``{"name", "calls", "us"}``. ``_slowest_call`` cannot see them: they have no usual time
    to exceed."""
    mine: dict[str, list[Span]] = {}
    elsewhere: set[str] = set()
    for call in facts.trace.runtime_calls:
        step = facts.step_number_of(call)
        if step == number:
            mine.setdefault(call.name, []).append(call)
        elif step is not None:
            elsewhere.add(call.name)
    step = next(s for s in facts.steps if s.number == number)
    # The part of them inside the step: a call on another thread may start just before its
    # end and run on long after.
    totals = {
        name: measures.union_within(calls, step.start, step.end)
        for name, calls in mine.items()
        if name not in elsewhere
    }
    if not totals:
        return None
    name = max(totals, key=totals.__getitem__)
    return {"name": name, "calls": len(mine[name]), "us": us(totals[name])}


def _calls_only_in_step_words(alone: dict[str, Any], extra: float) -> str:
    calls = "1 call" if alone["calls"] == 1 else f"{alone['calls']} calls"
    return (
        f"{calls} of {alone['name']}, which no other step makes, took {alone['us']:.1f} µs "
        f"({percent(alone['us'] / extra)} of the extra {extra:.1f} µs)"
    )


def _compiling_in_step(facts: Facts, number: int, extra: float) -> dict[str, Any] | None:
    """How long torch.compile compiled in step ``number`` and, at the median, in the other
    steps, ``{"us", "median_other_us"}``: when the difference holds at least
    :data:`COLD_START_OUTSIDE_OPS_SHARE` of the step's ``extra`` time."""
    if not facts.compile_labels:
        return None
    own, others = 0.0, []
    for step in facts.steps:
        compiling = facts.compiling_in_step(step)
        if step.number == number:
            own = compiling
        else:
            others.append(compiling)
    usual = median(others) if others else 0.0
    if own - usual < COLD_START_OUTSIDE_OPS_SHARE * extra:
        return None
    return {"us": us(own), "median_other_us": us(usual)}


def _of_extra(excess: float, extra: float) -> str:
    """``excess`` as a part of a step's ``extra`` time, in words. It can be more than all of
    it: the rest of the step then ran quicker than in the other steps."""
    if excess > extra:
        return f"more than the whole extra {extra:.1f} µs"
    return f"{percent(excess / extra)} of the extra {extra:.1f} µs"


def _compiling_words(compiling: dict[str, Any], extra: float) -> str:
    difference = compiling["us"] - compiling["median_other_us"]
    return (
        f"torch.compile was compiling for {compiling['us']:.1f} µs of it "
        f"(a median of {compiling['median_other_us']:.1f} µs in the other steps; the difference is "
        f"{_of_extra(difference, extra)})"
    )


def _captures_in_step(facts: Facts, number: int) -> dict[str, Any] | None:
    """The graphs of GPU work step ``number`` captures (:attr:`Trace.graph_captures` begun in
    it), when some other step captures none: how many, with which calls, how long the
    captures, the instantiations and torch.compile's CUDA graph trees' labels around them
    took in the step, which other steps capture too, and how many graph launches the other
    steps make."""
    trace = facts.trace
    if not trace.graph_captures:
        return None
    by_step: dict[int, list[GraphCapture]] = {}
    for capture in trace.graph_captures:
        step_number = facts.step_number_of(capture.begin)
        if step_number is not None:
            by_step.setdefault(step_number, []).append(capture)
    mine = by_step.get(number)
    if not mine or all(step.number in by_step for step in facts.steps):
        return None
    step = next(s for s in facts.steps if s.number == number)
    made = [call for capture in mine for call in capture.instantiations]
    trees = sorted(
        (
            span
            for name in trace.by_name
            if name.startswith(CUDAGRAPH_TREES_PREFIX)
            for span in trace.by_name[name]
            if span.lane.kind == "cpu" and span.start < step.end and span.end > step.start
        ),
        key=_START,
    )
    replays = [
        call for call in facts.graph_launches if facts.step_number_of(call) not in (None, number)
    ]
    closed = [capture.end.name for capture in mine if capture.end is not None]
    return {
        "graphs": len(mine),
        "begin": mine[0].begin.name,
        "end": closed[0] if closed else None,
        "capture_us": us(sum(min(c.stop_us, step.end) - c.begin.start for c in mine)),
        "instantiate": made[0].name if made else None,
        "instantiate_us": us(sum(call.dur for call in made)),
        "cudagraph_trees_us": us(measures.union_within(trees, step.start, step.end))
        if trees
        else None,
        "other_steps_capturing": sorted(n for n in by_step if n != number),
        "graph_launches_in_other_steps": len(replays),
    }


def _capture_words(captured: dict[str, Any], extra: float) -> str:
    count = captured["graphs"]
    graphs = "a graph" if count == 1 else f"{count} graphs"
    until = captured["end"] or "the end of the recording"
    words = (
        f"it captures {graphs} of GPU work: {captured['capture_us']:.1f} µs from "
        f"{captured['begin']} to {until}{' in all' if count > 1 else ''}"
    )
    total = captured["capture_us"] + captured["instantiate_us"]
    if captured["instantiate"] is not None:
        words += f" and {captured['instantiate_us']:.1f} µs in {captured['instantiate']}"
    if captured["cudagraph_trees_us"] is not None:
        total = captured["cudagraph_trees_us"]
        words += (
            f", inside torch.compile's CUDA graph trees' {CUDAGRAPH_TREES_PREFIX}record, "
            f"{total:.1f} µs"
        )
    words += f" ({_of_extra(total, extra)})"
    others = captured["other_steps_capturing"]
    replays = captured["graph_launches_in_other_steps"]
    if others:
        words += f"; {_step_list(others)} capture{'s' if len(others) == 1 else ''} too"
    if replays:
        words += (
            f"; the other steps {'' if others else 'capture none and '}make {replays} graph "
            "launches, which replay captured graphs"
        )
    return words


def _ops_only_in_step(facts: Facts, number: int, least_us: float) -> dict[str, Any] | None:
    """The op or label of step ``number`` (on its thread) that no other step runs, with the
    most time there, when that time is at least ``least_us``: ``{"name", "us"}``. What other
    reasons say is left out (:func:`_said_elsewhere`)."""
    step = next(s for s in facts.steps if s.number == number)
    others = [s for s in facts.steps if s.number != number]
    found = _only_in(facts, [step], others, leave_out=partial(_said_elsewhere, facts))
    if found is None or found[1] < least_us:
        return None
    return {"name": found[0], "us": us(found[1])}


def _said_elsewhere(facts: Facts, span: Span) -> bool:
    """Whether another reason of ``cold-start`` and ``slow-step`` accounts for ``span``:
    torch.compile's compiling (:func:`_compiling_in_step`) or its CUDA graph trees' capture
    labels (:func:`_captures_in_step`)."""
    return span.name.startswith(CUDAGRAPH_TREES_PREFIX) or facts.is_compile_work(span)


def _ops_only_in_step_words(alone: dict[str, Any], extra: float) -> str:
    return (
        f"{short_name(alone['name'], 48)}, which no other step runs, took {alone['us']:.1f} µs "
        f"({_of_extra(alone['us'], extra)})"
    )


def _slowest_call_words(facts: Facts, slowest: dict[str, Any], extra: float) -> str:
    """The sentence on :func:`_slowest_call`'s call, of a step ``extra`` µs longer than usual;
    where the call waited while the GPU ran work launched before the recording began (it
    spans the start of the trace's first GPU activity, which waited behind that work:
    :func:`profiling_utils.measures.queued_before_recording`), it says so."""
    share = (slowest["dur_us"] - slowest["typical_us"]) / extra
    words = (
        f"the runtime call furthest above its usual time, {slowest['name']}, took "
        f"{slowest['dur_us']:.1f} µs against {_usual(slowest)} ({percent(share)} of the "
        f"extra {extra:.1f} µs)"
    )
    queued = measures.queued_before_recording(facts.trace)
    if queued is not None and slowest["start_us"] < queued.start <= (
        slowest["start_us"] + slowest["dur_us"]
    ):
        words += (
            ", while the GPU ran work launched before the recording began (the trace's first "
            f"GPU activity waited behind it until {queued.start:.1f} µs)"
        )
    return words


def _slowest_call(facts: Facts, number: int) -> dict[str, Any] | None:
    """The runtime call of step ``number`` that ran longest beyond its usual duration."""
    in_step = _in_step_and_elsewhere(facts, facts.trace.runtime_calls, number)
    best, best_excess = None, 0.0
    for call, usual, against in in_step:
        if usual:
            typical = median(usual)
            if call.dur - typical > best_excess:
                best_excess = call.dur - typical
                best = {**span_ref(call), "typical_us": us(typical), "compared_with": against}
    return best


@rule(
    "dead-window",
    "CPU lane",
    see="""A long gap, in one step only, between the start of a record_function label and the
    first aten:: op inside it.""",
    means="""The same one-time cost seen up close: the label was entered but dispatch had not
    started yet (allocations, library heuristics, lazy loading). Warm-up removes it from the
    profiled steps.""",
    severity="warning",
    example="auto_examples/part1_matmul_add/plot_02_cold_start",
)
def dead_window(facts: Facts) -> Iterator[Hit]:
    by_label: dict[str, dict[int, measures.DeadWindow]] = {}
    for window in measures.dead_windows(facts.trace):
        by_label.setdefault(window.annotation.name, {}).setdefault(window.step, window)
    for label, windows in by_label.items():
        # Time in labels of the program's own, and in runtime calls, that closed before the
        # first op is not dead.
        gaps = {number: window.dead_us for number, window in windows.items()}
        if len(gaps) < 2:
            continue
        # The quickest other step's gap: the quickest, or for the quickest step the next.
        quickest, next_quickest = sorted(gaps.items(), key=lambda item: item[1])[:2]
        gaps_us = {str(n): us(g) for n, g in gaps.items()}  # each finding's evidence
        min_excess = DEAD_WINDOW_MIN_EXCESS_LAUNCHES * facts.launch_latency_us
        standing_out = []
        for number, window in windows.items():
            typical = next_quickest[1] if number == quickest[0] else quickest[1]
            gap = gaps[number]
            if gap <= typical or gap < DEAD_WINDOW_MIN_RATIO * typical:
                continue
            if gap - typical < min_excess:
                continue
            standing_out.append((number, window, typical))
        # A long recording can hold many: the widest few, in step order, each saying so.
        reported = sorted(standing_out, key=lambda hit: -gaps[hit[0]])[:_DEAD_WINDOWS_REPORTED]
        widest = (
            f" (one of the {len(reported)} widest of {len(standing_out)} steps that stand out)"
            if len(standing_out) > len(reported)
            else ""
        )
        for number, window, typical in sorted(reported, key=lambda hit: hit[0]):
            gap = gaps[number]
            times = f" ({gap / typical:.0f}×)" if typical > 0 else ""
            # The cheatsheet reads a first step's gap as warm-up; a later one is not that.
            later = ""
            if number > min(gaps):
                later = ": not the first step, so no warm-up cost"
                later += " but a stall of that step alone" if len(standing_out) == 1 else ""
            held = []
            if window.in_labels_us > 0 and window.longest_label is not None:
                held.append(
                    f"{window.in_labels_us:.1f} µs in labels inside it, "
                    f"{window.longest_label.name!r} the longest"
                )
            if window.in_calls_us > 0 and window.longest_call is not None:
                held.append(
                    f"{window.in_calls_us:.1f} µs in runtime calls, "
                    f"{window.longest_call.name} the longest"
                )
            besides = f" (besides {'; '.join(held)})" if held else ""
            until = (
                window.first_op.name
                if window.data_loader is None
                else f"fetching a batch ({short_name(window.data_loader.name, 48)})"
            )
            yield (
                f"In {step_label(number)}, {gap:.1f} µs pass between entering {label!r} and "
                f"{until}{besides}, against {typical:.1f} µs in the quickest "
                f"other step{times}{later}{widest}.",
                {
                    "step": number,
                    "annotation": span_ref(window.annotation),
                    "first_op": span_ref(window.first_op),
                    "gap_us": us(gap),
                    "in_labels_us": us(window.in_labels_us),
                    "in_calls_us": us(window.in_calls_us),
                    "data_loader": None
                    if window.data_loader is None
                    else span_ref(window.data_loader),
                    "quickest_other_gap_us": us(typical),
                    "ratio": round(gap / typical, 2) if typical > 0 else None,
                    "min_excess_us": us(min_excess),
                    "gaps_us": gaps_us,
                    "steps_standing_out": len(standing_out),
                },
            )


_DEAD_WINDOWS_REPORTED = 5
"""``dead-window`` reports at most this many steps per label, the widest gaps."""


_FOOTPRINT_REPORTED = ("registers_per_thread", "shared_memory_bytes", "grid", "block")


def _footprint(kernel: Span, launch: Span) -> dict[str, Any]:
    footprint = measures.kernel_footprint(kernel, launch).to_dict()
    return {key: footprint[key] for key in _FOOTPRINT_REPORTED}


def _launch_groups(launches: list[tuple[Launch, Span]], with_planning: bool) -> list[dict]:
    """Kernel launches grouped by (op, planning calls, API, kernel), most frequent first: the
    :data:`_GROUPS_REPORTED` first groups (only those are reported)."""
    groups: dict[tuple[str, tuple[str, ...], str, str], list[tuple[Launch, Span]]] = {}
    for launch, kernel in launches:
        key = (
            launch.op.name if launch.op is not None else measures.NO_OP,
            tuple(call.name for call in launch.planning) if with_planning else (),
            launch.call.name,
            kernel.name,
        )
        groups.setdefault(key, []).append((launch, kernel))
    rows = []
    by_count = sorted(groups.items(), key=lambda item: -len(item[1]))
    for (op, planning, api, kernel_name), members in by_count[:_GROUPS_REPORTED]:
        first, kernel = members[0]
        row: dict[str, Any] = {"op": op, "api": api, "kernel": kernel_name, "count": len(members)}
        if with_planning:  # the same calls before each launch of the group
            row["planning_calls_per_launch"] = dict(Counter(planning))
            planning_us = sum(c.dur for launch, _ in members for c in launch.planning)
            row["planning_us_per_launch"] = us(planning_us / len(members))
        row["footprint"] = _footprint(kernel, first.call)
        row["first"] = span_ref(first.call)
        rows.append(row)
    return rows


def _counts(counts: dict[str, int]) -> str:
    return " + ".join(name if n == 1 else f"{name} ×{n}" for name, n in counts.items())


def _describe(row: dict[str, Any]) -> str:
    footprint = row["footprint"]
    registers, shared = footprint["registers_per_thread"], footprint["shared_memory_bytes"]
    size = []
    if registers is not None:
        size.append(f"{registers} registers/thread")
    if shared is not None:
        size.append(f"{shared:,} B shared memory" if shared else "no shared memory")
    where = "outside any op" if row["op"] == measures.NO_OP else f"in {row['op']}"
    return f"{where} → {short_name(row['kernel'])}" + (f" ({', '.join(size)})" if size else "")


@rule(
    "planned-launch",
    "CPU lane",
    see="""A planning call in the op right before its kernel launch: an occupancy query
    (cudaOccupancyMaxActiveBlocksPerMultiprocessor), a function attribute read or set
    (cudaFuncGetAttributes, cudaFuncSetAttribute) or a function lookup
    (cudaGetFuncBySymbol).""",
    means="""A heavyweight kernel whose launch is worked out at run time: usually a GEMM,
    convolution or attention kernel from a library, sized to what fits in an SM's registers
    and shared memory. Which planning call shows, and how often, depends on the library path
    and the GPU: an occupancy query before the GEMM launch in the post's A100 trace; on an
    H100, an attribute query before some fp32 GEMMs (the example page shows which sizes),
    while bf16 GEMMs query occupancy only on their first call in a process and then launch
    from cached choices (see driver-launch).""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_06_launch_planning",
)
def planned_launch(facts: Facts) -> Iterator[Hit]:
    planned = [
        (launch, kernel) for launch, kernel in facts.program_kernel_launches if launch.planning
    ]
    if not planned:
        return
    rows = _launch_groups(planned, with_planning=True)
    top = rows[0]
    yield (
        f"{len(planned)} kernel launch(es) follow a planning call; most often "
        f"{_counts(top['planning_calls_per_launch'])} → {top['api']} {_describe(top)}, "
        f"{top['count']}×.",
        {"launches": len(planned), "groups": rows},
    )


@rule(
    "plain-launch",
    "CPU lane",
    see="cudaLaunchKernel (hipLaunchKernel on ROCm) with no planning call before it.",
    means="""On NVIDIA, most often an elementwise or reduction kernel with a small, fixed
    footprint (few registers, little or no shared memory): there is nothing to plan, PyTorch
    launches it directly. On ROCm, library kernels (MIOpen convolutions, Composable Kernel and
    aiter GEMMs and attention) launch this way too: the kernel's footprint, where the trace
    records it, says which.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_06_launch_planning",
)
def plain_launch(facts: Facts) -> Iterator[Hit]:
    plain = [
        (launch, kernel)
        for launch, kernel in facts.program_kernel_launches
        if not launch.planning and launch.call.name in PLAIN_LAUNCH_CALLS
    ]
    if not plain:
        return
    rows = _launch_groups(plain, with_planning=False)
    apis = Counter(launch.call.name for launch, _ in plain)
    named = " or ".join(f"{api} ({count}×)" for api, count in apis.most_common())
    yield (
        f"{len(plain)} kernel(s) launched with a plain "
        f"{rows[0]['api'] if len(apis) == 1 else named}; most often "
        f"{_describe(rows[0])}, {rows[0]['count']}×.",
        {"launches": len(plain), "apis": dict(apis.most_common()), "groups": rows},
    )


@rule(
    "driver-launch",
    "CPU lane",
    see="""A kernel launched through the driver API (cuLaunchKernelEx or cuLaunchKernel,
    category cuda_driver; hipModuleLaunchKernel or hipExtModuleLaunchKernel on ROCm) with no
    planning call, often with a large register and shared-memory footprint.""",
    means="""A library or generated kernel that calls the driver directly: cuBLASLt GEMMs on
    Hopper and cuDNN with launch attributes (cuLaunchKernelEx), Triton kernels
    (torch.compile's through cuLaunchKernel, some libraries' through cuLaunchKernelEx). The
    kernel was chosen from cached heuristics, so nothing is planned per call; the footprint,
    not a planning call, shows that it is heavyweight. On an H100 this is how bf16 GEMMs
    appear.""",
    severity="info",
    from_post=False,
    example="auto_examples/part1_matmul_add/plot_06_launch_planning",
)
def driver_launch(facts: Facts) -> Iterator[Hit]:
    direct = [
        (launch, kernel)
        for launch, kernel in facts.program_kernel_launches
        if not launch.planning
        and (
            launch.call.cat == "cuda_driver" or launch.call.name.startswith(DRIVER_LAUNCH_PREFIXES)
        )
    ]
    if not direct:
        return
    rows = _launch_groups(direct, with_planning=False)
    top = rows[0]
    yield (
        f"{len(direct)} kernel(s) launched through the driver with no planning call; most "
        f"often {top['api']} {_describe(top)}, {top['count']}×.",
        {"launches": len(direct), "groups": rows},
    )


SYNC_FLUSH_BEHIND_SHARE = 0.5
"""``sync-flush`` reads a sync that covers little GPU work as the GPU held back, not as a
flush, when the first work it waits for started this share of the sync's length or more after
its launch."""


@rule(
    "sync-flush",
    "CPU lane",
    see="A long cudaDeviceSynchronize (hipDeviceSynchronize) after the last profiled step.",
    means="""The profiler waiting for the GPU before it collects the events: it lasts as long
    as the GPU still has queued work, so it is not CPU cost. If the GPU was busy through it,
    the CPU had run ahead of a busy GPU; if it covers little GPU work, the wait is the flush
    itself, a classic overhead-bound sign.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_04_buffer_request_and_offset",
)
def sync_flush(facts: Facts) -> Iterator[Hit]:
    steps = facts.steps
    if not steps or not facts.trace.has_gpu:
        return
    # The last step's end, steps left out included (a later session in the same file).
    last_end = max([step.end for step in steps] + [s.end for s in facts.trace.left_out_steps])
    typical_step = median(step.span.dur for step in steps)
    if typical_step <= 0:  # steps recorded with no duration: no measure of "long"
        return
    syncs = sorted((s for name in DEVICE_SYNC_CALLS for s in facts.named(name)), key=_START)
    for sync in syncs:
        if sync.start < last_end or sync.dur < typical_step:
            continue
        busy = _gpu_busy_within(facts, sync.start, sync.end)
        fraction = busy / sync.dur if sync.dur > 0 else 0.0
        evidence = {
            "sync": span_ref(sync),
            "median_step_cpu_us": us(typical_step),
            "gpu_busy_during_us": us(busy),
            "gpu_busy_fraction": round(fraction, 4),
            "last_step_end_us": us(last_end),
        }
        behind = _behind_before(facts, sync)
        if fraction >= 0.5:
            reading = "the CPU had run ahead and the sync is the GPU finishing queued work"
        elif behind is not None and behind[1] >= SYNC_FLUSH_BEHIND_SHARE * sync.dur:
            first, lag = behind
            evidence["first_work_in_sync"] = span_ref(first)
            evidence["first_work_after_launch_us"] = us(lag)
            reading = (
                f"the first GPU work it waits for ({short_name(first.name, 40)}) started "
                f"{lag:.1f} µs after its launch, so the GPU had been held before that by "
                "something the trace does not hold (work launched before the recording, a "
                "collective waiting for another rank), not a flush"
            )
        else:
            reading = "little GPU work was left: the wait is mostly the flush itself"
        yield (
            f"{sync.name} after the last step takes {sync.dur:.1f} µs, "
            f"{sync.dur / typical_step:.1f}× a median step, and the GPU is busy for "
            f"{percent(fraction)} of it: {reading}.",
            evidence,
        )


def _behind_before(facts: Facts, sync: Span) -> tuple[Span, float] | None:
    """The first GPU activity that started during ``sync`` and was launched before it, and
    how long after its launch call returned it started; None when there is none."""
    trace = facts.trace
    work = trace.gpu_work
    index = bisect_left([w.start for w in work], sync.start)
    for activity in work[index:]:
        if activity.start >= sync.end:
            return None
        launch = trace.launch_of(activity)
        if launch is not None and launch.end <= sync.start:
            return activity, activity.start - launch.end
    return None


def _gpu_busy_within(facts: Facts, start: float, end: float) -> float:
    """Time in [start, end) during which at least one GPU activity ran."""
    work = facts.trace.gpu_work
    # Any activity overlapping the window starts before `end`; activities last far less than
    # a trace, so look back from the window's start only as far as the longest activity.
    longest = max((w.dur for w in work), default=0.0)
    first = bisect_left([w.start for w in work], start - longest)
    busy, covered_to = 0.0, start
    for activity in work[first:]:
        if activity.start >= end:
            break
        lo, hi = max(activity.start, covered_to), min(activity.end, end)
        if hi > lo:
            busy += hi - lo
            covered_to = hi
    return busy


def _caller_of_copy(facts: Facts, op: Span | None) -> Span | None:
    """The op a copy was made for, or ``None`` for a copy the code asked for.

    ``op`` itself when it is not a copy op (``aten::addmm`` seeding its output with the
    bias). When it is one, the first enclosing op that is not: an ATen op that copies on
    your behalf through copy ops (``aten::masked_fill`` → ``aten::clone`` → ``aten::copy_``).
    A copy op called from anything else (your ``forward``, a ``record_function`` range, an
    autograd node, nothing) is a copy that code asked for.
    """
    if op is None or op.name not in EXPLICIT_COPY_OPS:
        return op
    spans = facts.trace.spans
    while op is not None and op.name in EXPLICIT_COPY_OPS:
        parent = spans[op.parent] if op.parent is not None else None
        op = parent if parent is not None and parent.cat == "cpu_op" else None
    return op if op is not None and op.name.startswith("aten::") else None


ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "hipMalloc", "hipFree")
"""The runtime calls that take device memory and give it back, as PyTorch's caching
allocator makes them (its default backend: not ``cudaMallocAsync``'s stream-ordered calls,
nor ``expandable_segments``' driver calls, nor pinned host memory's ``cudaHostAlloc``)."""

ALLOCATOR_CHURN_MIN_SHARE = 0.02
"""``allocator-churn``: in the step after the first with the median share, the calls take
at least this share of its CPU time (steps without any counted at 0)."""


@rule(
    "allocator-churn",
    "CPU lane",
    see="""cudaMalloc or cudaFree (hipMalloc, hipFree) in most steps after the first, not
    only while the first fills PyTorch's memory cache.""",
    means="""PyTorch's caching allocator asks for device memory only when its cache cannot
    serve a request, so in the steady state these calls should not occur. When they do in
    every step, the cache was emptied (torch.cuda.empty_cache() in the loop), is fragmented
    by shapes that keep changing, or is too small: near a full GPU the allocator gives its
    cached blocks back and tries again (torch.cuda.memory_stats() counts
    num_alloc_retries). A cudaMalloc takes tens to hundreds of µs, and a cudaFree also
    synchronizes: it waits for the work this process queued on the GPU, so the host cannot
    run ahead. Keep shapes steady, take empty_cache() out of the loop, or leave the GPU more
    free memory.""",
    severity="warning",
    from_post=False,
)
def allocator_churn(facts: Facts) -> Iterator[Hit]:
    later = facts.steps[1:]
    first_start = later[0].start if later else math.inf
    calls = sorted((call for name in ALLOCATOR_CALLS for call in facts.named(name)), key=_START)
    by_step: dict[int, list[Span]] = {step.number: [] for step in later}
    for call in facts.in_steps([call for call in calls if call.start >= first_start]):
        step = facts.trace.step_of(call)
        if step is not None and step.number in by_step:
            by_step[step.number].append(call)
    with_calls = [step for step in later if by_step[step.number]]
    if len(with_calls) < 2 or 2 * len(with_calls) <= len(later):  # most steps, at least two
        return
    # Each step's time in the calls: their union (threads may call at once) within the step.
    held = {
        step.number: measures.union_within(by_step[step.number], step.start, step.end)
        for step in later
    }
    # The step with the median share (of equal shares, the middle one in step order).
    ranked = sorted(later, key=lambda step: held[step.number] / step.span.dur)
    step = ranked[(len(ranked) - 1) // 2]
    share = held[step.number] / step.span.dur
    if share < ALLOCATOR_CHURN_MIN_SHARE:
        return
    # How much of it the GPU was busy: a cudaFree waiting for queued work to finish.
    waited = sum(
        measures.gpu_busy_in_windows(
            facts.trace, measures.pieces_within(by_step[step.number], step.start, step.end)
        )
    )
    every = [call for step_ in with_calls for call in by_step[step_.number]]
    names = Counter(call.name for call in every)
    places = Counter(
        f"{call.name} {'outside any op' if op is None else f'in {op.name}'}"
        for call in every
        for op in (facts.trace.op_of(call),)
    )
    longest = max(every, key=_DUR)
    longest_op = facts.trace.op_of(longest)
    longest_step = facts.trace.step_of(longest)
    place, place_count = places.most_common(1)[0]
    counted = ", ".join(f"{count} {name}" for name, count in sorted(names.items()))
    busy = (
        f", {waited:.1f} µs of them while the GPU still ran queued work"
        if round(waited, 1) > 0
        else ""
    )
    yield (
        f"In {len(with_calls)} of the {len(later)} steps after the first, device memory was "
        f"taken or given back ({counted} in those steps, most often {place}, "
        f"{place_count}×): in "
        f"{step_label(step.number)}, the step with the median share, these calls take "
        f"{held[step.number]:.1f} µs of its {step.span.dur:.1f} µs ({percent(share)}){busy}; "
        f"the longest, {longest.name} for {longest.dur:.1f} µs in "
        f"{step_label(longest_step.number)}"
        f"{'' if longest_op is None else f' (in {longest_op.name})'}.",
        {
            "steps_after_first": len(later),
            "steps_with_calls": [step_.number for step_ in with_calls],
            "calls": dict(sorted(names.items())),
            "places": dict(places.most_common()),
            "median_step": step.number,
            "median_step_calls": len(by_step[step.number]),
            "median_step_allocator_us": us(held[step.number]),
            "median_step_gpu_busy_during_us": us(waited),
            "median_step_cpu_us": us(step.span.dur),
            "median_step_share": round(share, 4),
            "longest": span_ref(longest),
        },
    )


@rule(
    "hidden-memcpy",
    "CPU lane",
    see="""A cudaMemcpyAsync (hipMemcpyAsync) inside an op that is not a copy you asked for
    (directly, or through copy ops it calls: masked_fill → clone → copy_).""",
    means="""A copy made on your behalf, often Device-to-Device: addmm, for one, first copies
    the bias into its output and then lets the GEMM accumulate onto it; an out-of-place op
    such as masked_fill clones its input before working in place on the clone. It costs
    memory bandwidth and an extra launch.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def hidden_memcpy(facts: Facts) -> Iterator[Hit]:
    groups: dict[tuple[str, str], list[Copy]] = {}
    for copy in facts.program_copies:
        op = _caller_of_copy(facts, copy.launch.op)
        if copy.kind == "memset" or op is None:
            continue
        if copy.launch.call.name.startswith(MEMCPY_CALL_PREFIXES):
            groups.setdefault((op.name, copy.kind), []).append(copy)
    if not groups:
        return
    rows = []
    for (op_name, kind), copies in sorted(groups.items(), key=lambda item: -len(item[1])):
        sizes = Counter(copy.bytes for copy in copies)
        # The copy op that made the call, when the op it was made for called it through one.
        direct = Counter(c.launch.op.name for c in copies if c.launch.op is not None)
        through = direct.most_common(1)[0][0] if direct else op_name
        bandwidths = [c.bandwidth_gb_s for c in copies if c.bandwidth_gb_s is not None]
        rows.append(
            {
                "op": op_name,
                "through": through if through != op_name else None,
                "kind": kind,
                "count": len(copies),
                "bytes": sizes.most_common(1)[0][0],
                "api": copies[0].launch.call.name,
                "median_us": us(median(c.work.dur for c in copies)),
                "median_bandwidth_gb_s": gb_s(median(bandwidths)) if bandwidths else None,
                "steps": sorted(
                    {n for c in copies if (n := facts.step_number_of(c.work)) is not None}
                ),
                "first": span_ref(copies[0].work),
            }
        )
    top = rows[0]
    size = f"{top['bytes']:,} B" if top["bytes"] is not None else "unknown size"
    chain = f"{top['op']} (through {top['through']})" if top["through"] else top["op"]
    yield (
        f"{sum(r['count'] for r in rows)} copy(ies) made on behalf of ops that are not "
        f"copies; most often {chain} → {top['api']} → Memcpy {top['kind']} ({size}, "
        f"{top['median_us']:.1f} µs), {top['count']}×.",
        {"groups": rows[:_GROUPS_REPORTED]},
    )


@rule(
    "data-loader",
    "CPU lane",
    see="""The data loader's label, enumerate(DataLoader)#… (around each next() of the
    loader), takes a large share of the median step on the training thread while the GPU
    lane is empty (the TensorBoard plugin's "DataLoader" time). Without profiler steps, the
    loop's iterations are read from one next() to the next.""",
    means="""The training loop waits for its next batch: data is read, decoded and collated on
    the thread that launches the GPU's work, and once the GPU has run what was queued it has
    nothing to do. Load in worker processes (DataLoader(num_workers=N), with pin_memory=True
    and persistent_workers=True), so that the next batches are ready when the step asks.""",
    severity="warning",
    from_post=False,
)
def data_loader(facts: Facts) -> Iterator[Hit]:
    trace = facts.trace
    loaders = [
        span
        for span in trace.find(prefix=measures.DATA_LOADER_PREFIX)
        if span.cat == "user_annotation" and span.lane.kind == "cpu"
    ]
    if not loaders:
        return
    name = Counter(span.name for span in loaders).most_common(1)[0][0]
    # The windows to read: the steps; without steps, the loop's iterations as the loader
    # marks them, from one next() to the next (after the last, the recording may stop at
    # any point of the iteration: not read).
    windows: list[tuple[float, float, int | None]] = []
    if len(facts.steps) >= 2:
        windows = [(step.start, step.end, step.number) for step in facts.steps]
    elif not facts.steps:
        calls = [span for span in loaders if span.name == name]
        windows = [(a.start, b.start, None) for a, b in pairwise(calls) if b.start > a.start]
    if len(windows) < 2:
        return
    # Each window's loader calls, found by bisection (a scan of them all per window was
    # quadratic in steps): those starting before its end, from the first that reaches past
    # its start.
    starts = [span.start for span in loaders]  # find() gives them in start order
    reach = list(accumulate((span.end for span in loaders), max))
    inside_window = []
    for start, end, _ in windows:
        first, last = bisect_right(reach, start), bisect_left(starts, end)
        inside_window.append(
            [
                (max(span.start, start), min(span.end, end))
                for span in loaders[first:last]
                if span.end > start
            ]
        )
    busy = iter(
        measures.gpu_busy_in_windows(trace, [w for inside in inside_window for w in inside])
    )
    rows = []
    for index, ((start, end, number), inside) in enumerate(
        zip(windows, inside_window, strict=True)
    ):
        loading = sum(last - first for first, last in inside)  # one next() per window, in order
        gpu = sum(next(busy) for _ in inside)
        idle = loading - gpu
        width = end - start
        rows.append((idle / width if width > 0 else 0.0, index, number, width, loading, idle))
    share, index, number, width, loading, idle = sorted(rows, key=lambda row: row[:2])[
        (len(rows) - 1) // 2
    ]
    if share < DATA_LOADER_MIN_SHARE:
        return
    if number is not None:
        where, whole = f"In the step with the median share ({step_label(number)})", "the step's"
        of = "of the step): the step waits for its data."
    else:
        # Steps whose end the recording missed are no steps to read either.
        without = "no profiler step ending in the recording" if trace.steps else "no profiler steps"
        where = (
            f"With {without}, in the loop's iteration with the median share (from the "
            f"loader's call {index + 1} of {len(rows) + 1} to the next)"
        )
        whole, of = "the iteration's", "of the iteration): the loop waits for its data."
    message = (
        f"{where}, fetching the next batch ({short_name(name, 64)}) takes {loading:.1f} µs of "
        f"{whole} {width:.1f} µs, and the GPU sits idle for {idle:.1f} µs of it "
        f"({percent(share)} {of}"
    )
    if "_SingleProcessDataLoaderIter" in name:
        message += (
            " The batches are loaded in the training process (num_workers=0): worker "
            "processes would prepare them while the "
            f"{'steps run' if number is not None else 'loop runs'}."
        )
    per_window = [
        {
            **({"step": n} if n is not None else {"iteration": i + 1}),
            "loading_us": us(load),
            "gpu_idle_while_loading_us": us(gap),
            "idle_share": round(sh, 4),
        }
        for sh, i, n, _, load, gap in rows
    ]
    yield (
        message,
        {
            "label": name,
            **({"median_step": number} if number is not None else {"median_iteration": index + 1}),
            "median_idle_share": round(share, 4),
            "loading_us": us(loading),
            "gpu_idle_while_loading_us": us(idle),
            **(
                {"step_us": us(width), "steps": per_window}
                if number is not None
                else {"iteration_us": us(width), "iterations": per_window}
            ),
        },
    )
