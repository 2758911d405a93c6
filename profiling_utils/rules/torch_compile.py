"""Cheatsheet table "torch.compile": the compiled-code rows on the CPU lane and what they cost."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator
from typing import Any

from .. import measures
from ..tables import percent
from ..trace import Span, devices_differ
from .facts import COMPILING_MIN_SHARE, Facts, median, short_name, span_ref, step_label, us
from .gpu_lane import is_host_sync
from .profiler_table import COMPUTE_BOUND_MIN_BUSY_FRACTION
from .registry import Hit, rule

COMPILE_TAX_MIN_RATIO = 1.2
"""``compile-cpu-tax``: the compiled run's median step takes at least this many times the
eager run's CPU time."""
COMPILE_TAX_SAME_WORK_RATIO = 3.0
"""``compile-cpu-tax`` asks whether the two ran the same work when their median steps' GPU
busy times are more than this many times apart (an eager run and its compiled form keep the
GPU busy within 1.5 times of each other in this project's recordings: fusion saves memory
traffic, not the GEMMs)."""

GRAPH_CALL_PREFIX = "## Call CompiledFxGraph"
INPUT_COPY_OPS = frozenset({"aten::_foreach_copy_", "aten::copy_"})
"""Ops that copy inputs into a CUDA graph's static buffers before a replay."""

AOT_FUNCTIONS = frozenset({"CompiledFunction", "CompiledFunctionBackward"})
"""AOTAutograd's autograd function around a compiled graph's call, forward and backward: the
compiled call where a trace holds no ``## Call CompiledFxGraph`` label (older torch)."""

_REGION_ID = re.compile(r"Torch-Compiled Region: (\d+)/(\d+)")


def _per_step(facts: Facts, spans: tuple[Span, ...] | list[Span]) -> dict[str, int]:
    """How many of ``spans`` each step holds, over the steps of :attr:`Facts.steps`."""
    counts = Counter(facts.step_number_of(span) for span in spans)
    return {str(step.number): counts[step.number] for step in facts.steps if step.number in counts}


def _step_cpu(facts: Facts) -> float | None:
    """The median step's CPU time, over :attr:`~profiling_utils.rules.facts.Facts.host_steps`
    (a step whose GPU records are missing still recorded its CPU window)."""
    steps = facts.host_steps
    return median(step.span.dur for step in steps) if steps else None


@rule(
    "compiled-region",
    "torch.compile",
    see="A Torch-Compiled Region: K/M row on the CPU lane.",
    means="""You are inside a function torch.compile compiled. K numbers the Python frame
    Dynamo captured, M counts the compilations of that frame before this one: M above 0 means
    it was recompiled (new shapes, dtypes or failed guards; TORCH_LOGS=recompiles says
    why).""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def compiled_region(facts: Facts) -> Iterator[Hit]:
    regions = facts.compile_info.regions
    if not regions:
        return
    by_name: dict[str, list[Span]] = {}
    for region in regions:
        by_name.setdefault(region.name, []).append(region)
    recompiled = []
    rows = []
    for name, spans in by_name.items():
        match = _REGION_ID.match(name)
        if match is not None and int(match[2]) > 0:
            recompiled.append(name)
        rows.append(
            {
                "region": name,
                "count": len(spans),
                "median_us": us(median(s.dur for s in spans)),
                "per_step": _per_step(facts, spans),
            }
        )
    top = rows[0]
    message = f"{top['region']} entered {top['count']}× (median {top['median_us']:.1f} µs)"
    if len(rows) > 1:
        message += f", and {len(rows) - 1} other compiled region(s)"
    if recompiled:
        ids = ", ".join(name.split(": ", 1)[1] for name in recompiled)
        message += f"; {ids}: a compile number above 0, so Dynamo had compiled that frame before"
    yield message + ".", {"regions": rows, "recompiled": recompiled}


def _recompiled_in(facts: Facts, windows: list[tuple[float, float, Any]]) -> list[str]:
    """The ids (``K/M``, ``M`` above 0) of the compiled regions entered inside ``windows``
    (``(start, end, pid)``: on that process's threads, or any for a ``None`` pid) whose frame
    Dynamo had compiled before."""
    ids = []
    for region in facts.compile_info.regions:
        match = _REGION_ID.match(region.name)
        if match is None or int(match[2]) == 0:
            continue
        pid = region.lane.pid
        if any(
            start <= region.start < end and where in (None, pid) for start, end, where in windows
        ):
            ids.append(f"{match[1]}/{match[2]}")
    return list(dict.fromkeys(ids))


@rule(
    "compiling-recorded",
    "torch.compile",
    see="""Labels such as dynamo, compile_fx_inner (dynamo_timed) or
    CachingAutotuner.benchmark_all_configs (dynamo_timed) cover much of a step (of the
    recording, in a trace without steps).""",
    means="""torch.compile compiled while the profiler recorded: Dynamo tracing a frame,
    AOTAutograd and Inductor building its kernels, the autotuner timing candidates (the
    backward graph compiles at the first backward). That time is the compiler's, paid once
    per compiled frame and shape: those steps say nothing about the program's speed. Profile
    steps after the first compiled calls; a compile in every step is a recompilation (a
    compile number above 0 in Torch-Compiled Region K/M; TORCH_LOGS=recompiles says why:
    new shapes, which dynamic=True or torch._dynamo.mark_dynamic avoid, or guards that keep
    failing). The rules that describe the program's launches, GEMMs, copies and call chain
    leave out what the compiler launched while compiling (its autotuner's candidates).""",
    severity="warning",
    from_post=False,
)
def compiling_recorded(facts: Facts) -> Iterator[Hit]:
    if not facts.compile_labels:
        return
    steps = facts.host_steps
    least = percent(COMPILING_MIN_SHARE)
    if not steps:
        window = facts.host_window
        if window is None:
            return
        # The host's active time, as the bound rules read a recording: a quiet stretch holds
        # no open span, so no compiling either.
        active = facts.host_active_us
        compiling = facts.compiling_us(*window)
        if active <= 0 or compiling < COMPILING_MIN_SHARE * active:
            return
        recompiled = _recompiled_in(facts, [(*window, None)])
        left_out = (
            ", less the stretches with nothing on any thread or GPU"
            if facts.quiet_stretches
            else ""
        )
        message = (
            f"Over the whole recording (no profiler steps to compare) torch.compile was "
            f"compiling for {compiling:.1f} of the {active:.1f} µs from the host's first event "
            f"to its last{left_out} ({percent(compiling / active)})"
        )
        evidence: dict[str, Any] = {
            "window": "recording",
            "recording_cpu_us": us(active),
            "recording_compiling_us": us(compiling),
            "recording_compiling_share": round(compiling / active, 4),
            "recompiled": recompiled,
        }
    else:
        rows = []
        for step in steps:
            compiling = facts.compiling_in_step(step)
            width = step.span.dur
            share = compiling / width if width > 0 else 0.0
            rows.append((step, compiling, share))
        heavy = [row for row in rows if row[2] >= COMPILING_MIN_SHARE]
        if not heavy:
            return
        heavy.sort(key=lambda row: row[2])
        step, compiling, share = heavy[(len(heavy) - 1) // 2]
        recompiled = _recompiled_in(
            facts, [(row[0].start, row[0].end, row[0].span.lane.pid) for row in heavy]
        )
        message = (
            f"torch.compile was compiling for {least} or more of the CPU time of {len(heavy)} "
            f"of {len(steps)} steps"
        )
        if len(heavy) > 1:
            low, high = percent(heavy[0][2]), percent(heavy[-1][2])
            message += (
                f" ({low if low == high else f'{low} to {high}'}); in the median of them, "
                f"{step_label(step.number)}, for {compiling:.1f} of its {step.span.dur:.1f} µs "
                f"({percent(share)})"
            )
        else:
            message += (
                f": {step_label(step.number)}, for {compiling:.1f} of its "
                f"{step.span.dur:.1f} µs ({percent(share)})"
            )
        evidence = {
            "median_step": step.number,
            "median_step_cpu_us": us(step.span.dur),
            "median_step_compiling_us": us(compiling),
            "steps": [
                {
                    "step": row[0].number,
                    "cpu_us": us(row[0].span.dur),
                    "compiling_us": us(row[1]),
                    "compiling_share": round(row[2], 4),
                }
                for row in rows
            ],
            "compiling_steps": [row[0].number for row in sorted(heavy, key=lambda r: r[0].number)],
            "recompiled": recompiled,
        }
        calm = [row[0].span.dur for row in rows if row[2] < COMPILING_MIN_SHARE]
        if calm:
            evidence["median_other_cpu_us"] = us(median(calm))
            message += f"; the other {len(calm)} step(s) take a median of {median(calm):.1f} µs"
    if recompiled:
        regions = (
            f"regions {', '.join(recompiled)} are recompiles"
            if len(recompiled) > 1
            else f"region {recompiled[0]} is a recompile"
        )
        message += f"; {regions} (a compile number above 0: Dynamo had compiled the frame before)"
    yield message + ": that time is the compiler's, not the program's.", evidence


@rule(
    "dynamo-cache-lookup",
    "torch.compile",
    see="TorchDynamo Cache Lookup in every step.",
    means="""Dynamo checking that the call still matches what was compiled (shapes, dtypes,
    devices, other guards) before running the compiled code. It is paid on every call, long
    after compilation.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def dynamo_cache_lookup(facts: Facts) -> Iterator[Hit]:
    lookups = facts.compile_info.cache_lookups
    if not lookups:
        return
    per_step = _per_step(facts, lookups)
    typical = median(s.dur for s in lookups)
    step_cpu = _step_cpu(facts)
    message = f"TorchDynamo Cache Lookup {len(lookups)}× (median {typical:.1f} µs"
    if step_cpu:
        message += f", {percent(typical / step_cpu)} of a median step's CPU time"
    message += ")"
    if facts.steps:
        message += f", in {len(per_step)} of {len(facts.steps)} steps"
    message += "."
    yield (
        message,
        {
            "count": len(lookups),
            "median_us": us(typical),
            "total_us": us(sum(s.dur for s in lookups)),
            "per_step": per_step,
            "median_step_cpu_us": us(step_cpu) if step_cpu else None,
        },
    )


_BACKWARD_NODE_PREFIX = "autograd::engine::evaluate_function"


@rule(
    "aot-wrapper",
    "torch.compile",
    see="AOTDispatcher Runtime Wrapper Prologue, even when nothing needs gradients.",
    means="""AOTAutograd's runtime wrapper is always on the path of a compiled call: it
    handles tensor metadata and views, and would set up the backward pass if inputs required
    gradients.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def aot_wrapper(facts: Facts) -> Iterator[Hit]:
    wrappers = facts.compile_info.aot_wrappers
    if not wrappers:
        return
    names = Counter(span.name for span in wrappers)
    backward = any(
        not facts.while_compiling(span) for span in facts.trace.find(prefix=_BACKWARD_NODE_PREFIX)
    )
    name, count = names.most_common(1)[0]
    yield (
        f"{name} {count}× (median {median(s.dur for s in wrappers):.1f} µs); "
        + ("the trace also runs a backward pass." if backward else "no backward pass runs."),
        {
            "names": dict(names),
            "median_us": us(median(s.dur for s in wrappers)),
            "per_step": _per_step(facts, wrappers),
            "backward_in_trace": backward,
        },
    )


@rule(
    "compiled-graph-cache-hit",
    "torch.compile",
    see="## Call CompiledFxGraph <hash> with the same hash in every step.",
    means="""The same generated code ran each time: a cache hit, nothing was recompiled (in a
    trace that recorded the compile, after the first call, which follows it). The
    hash keys Inductor's FX graph cache (its fxgraph folder, by default in a
    torchinductor_<user> folder of the system's temporary directory), where the generated code
    can be read.""",
    severity="info",
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def compiled_graph_cache_hit(facts: Facts) -> Iterator[Hit]:
    by_hash: dict[str, list[Span]] = {}
    for call in facts.compile_info.graph_calls:
        graph_hash = measures.compiled_graph_hash(call)
        if graph_hash is not None:  # a call without a key names no one graph
            by_hash.setdefault(graph_hash, []).append(call)
    for graph_hash, calls in by_hash.items():
        steps = sorted({n for n in map(facts.step_number_of, calls) if n is not None})
        if len(steps) < 2:
            continue
        # A graph torch.compile compiled in the recording: its first call, after the compile
        # in the same step, is no hit.
        first = calls[0]
        step = facts.trace.step_of(first)
        compiled_first = step is not None and (
            facts.compiling_us(step.start, first.start, first.lane.pid) > 0
        )
        hits = (
            f"the first after torch.compile compiled in {step_label(step.number)}, the "
            f"other {len(calls) - 1} cache hits"
            if compiled_first and step is not None
            else "cache hits"
        )
        yield (
            f"Compiled graph {graph_hash} ran in {len(steps)} steps "
            f"({', '.join(step_label(n) for n in steps[:4])}"
            + (", ..." if len(steps) > 4 else "")
            + f"), {len(calls)} calls with the same hash: {hits}.",
            {
                "hash": graph_hash,
                "calls": len(calls),
                "steps": steps,
                "median_us": us(median(c.dur for c in calls)),
                "first": span_ref(first),
                "compiled_in_recording": compiled_first,
            },
        )


@rule(
    "compile-cpu-tax",
    "torch.compile",
    see="""Per-step CPU time higher under torch.compile than in eager mode for a small op
    (compare a compiled trace against an eager baseline); where the steps wait for the GPU
    (a sync, a blocking copy), their CPU time outside those waits.""",
    means="""Expected: every call walks Dynamo's guards, AOTAutograd's wrapper and the
    generated code's entry, on top of the same ATen dispatch. That tax only pays off when the
    compiled graph replaces many ops; CUDA graphs (mode="reduce-overhead") remove launch cost,
    not this.""",
    severity="warning",
    against_baseline=True,
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def compile_cpu_tax(baseline: Facts, facts: Facts) -> Iterator[Hit]:
    baseline_compiled = baseline.compile_info.is_compiled
    if baseline_compiled == facts.compile_info.is_compiled:
        return
    eager, compiled = (facts, baseline) if baseline_compiled else (baseline, facts)
    eager_cpu, compiled_cpu = _step_cpu(eager), _step_cpu(compiled)
    if not eager_cpu or not compiled_cpu:
        return
    ratio = compiled_cpu / eager_cpu
    message = (
        f"The compiled run's median step costs {compiled_cpu:.1f} µs of CPU time against "
        f"{eager_cpu:.1f} µs eager ({ratio:.1f}×)."
    )
    # A step's CPU time includes its waits for the GPU (a sync, a copy to pageable memory),
    # which a slower GPU lengthens and a faster one shortens: where the steps wait, the CPU
    # time outside the waits decides.
    eager_own, compiled_own = _step_cpu_outside_syncs(eager), _step_cpu_outside_syncs(compiled)
    waits = (eager_own, compiled_own) != (eager_cpu, compiled_cpu)
    if not waits and ratio < COMPILE_TAX_MIN_RATIO:
        return
    own_ratio = ratio
    if waits:
        if not eager_own or not compiled_own:
            return
        own_ratio = compiled_own / eager_own
        if own_ratio < COMPILE_TAX_MIN_RATIO:
            return
        message = (
            f"{message[:-1]}; outside its waits for the GPU (host syncs), {compiled_own:.1f} µs "
            f"against {eager_own:.1f} µs ({own_ratio:.1f}×)."
        )
    eager_busy, compiled_busy = _step_gpu_busy(eager), _step_gpu_busy(compiled)
    # Where the GPU sets the compiled run's pace, the extra CPU time runs while the GPU
    # works: it costs no step time there, only where the CPU sets the pace.
    hidden = bool(compiled_busy) and compiled_busy >= COMPUTE_BOUND_MIN_BUSY_FRACTION * (
        compiled_own if waits and compiled_own else compiled_cpu
    )
    if hidden:
        message += (
            f" Its GPU is busy {compiled_busy:.1f} µs in a median step, about as long or "
            "longer: there the tax hides behind the GPU's work, and costs step time only "
            "where the CPU sets the pace (smaller ops, fewer of them per step)."
        )
    if eager_busy and compiled_busy:
        work_ratio = max(eager_busy, compiled_busy) / min(eager_busy, compiled_busy)
        if work_ratio > COMPILE_TAX_SAME_WORK_RATIO:
            message += (
                f" Their GPUs are busy {compiled_busy:.1f} µs (compiled) and {eager_busy:.1f} µs "
                f"(eager) in a median step, {work_ratio:.0f}× apart: compiling rarely changes "
                "the GPU's work that much, so check that the two ran the same model on the "
                "same inputs."
            )
    eager_gpus, compiled_gpus = _gpu_names(eager), _gpu_names(compiled)
    differ = devices_differ(eager.trace.devices, compiled.trace.devices)
    if differ:
        message += (
            f" The two ran on different GPUs ({eager_gpus} eager, {compiled_gpus} compiled), "
            "most likely on different hosts: part of the difference may be the machines'."
        )
    # Two recordings made one after the other can find the host at different speeds: the
    # calls both make (leaf ops, runtime calls) then all take longer in one of them.
    speed = measures.host_speed_ratio(compiled.trace, eager.trace)
    if speed is not None and not measures.speeds_alike(speed[0]):
        message += (
            f" The host ran at another speed in each: the calls both runs make took "
            f"{speed[0]:.2f}× as long in the compiled run, so part of the difference is the "
            f"host's (at one speed, about {own_ratio / speed[0]:.1f}×)."
        )
    evidence = {
        "eager": _run(eager),
        "compiled": _run(compiled),
        "ratio": round(ratio, 3),
        "devices_differ": differ,
        "hidden_behind_gpu": hidden,
        "host_speed_ratio": None if speed is None else round(speed[0], 3),
    }
    if waits:
        evidence["eager"]["median_step_cpu_outside_syncs_us"] = us(eager_own)
        evidence["compiled"]["median_step_cpu_outside_syncs_us"] = us(compiled_own)
        evidence["ratio_outside_syncs"] = round(compiled_own / eager_own, 3)
    yield message, evidence


def _step_cpu_outside_syncs(facts: Facts) -> float | None:
    """The median step's CPU time less the time a thread spent in host syncs inside it
    (:func:`~profiling_utils.rules.gpu_lane.is_host_sync`, their union), µs."""
    trace = facts.trace
    syncs = [call for call in trace.runtime_calls if is_host_sync(trace, call)]
    steps = facts.host_steps
    if not steps:
        return None
    if not syncs:
        return _step_cpu(facts)
    starts = [call.start for call in syncs]  # runtime_calls are in start order
    own = []
    for step in steps:
        inside = syncs[bisect_left(starts, step.start) : bisect_left(starts, step.end)]
        own.append(step.span.dur - measures.union_within(inside, step.start, step.end))
    return median(own)


def _step_gpu_busy(facts: Facts) -> float | None:
    """The median step's GPU busy time (over the steps whose GPU records are whole)."""
    whole = {step.number for step in facts.steps_with_gpu_records}
    busy = [times.gpu_busy_us for times in facts.host_step_times if times.step in whole]
    return median(busy) if busy and facts.trace.has_gpu else None


def _gpu_names(facts: Facts) -> str:
    """The devices' :attr:`~profiling_utils.trace.DeviceInfo.model`, sorted."""
    return ", ".join(sorted({d.model for d in facts.trace.devices}))


def _run(facts: Facts) -> dict[str, Any]:
    return {
        "trace": str(facts.trace.path),
        "median_step_cpu_us": us(median(step.span.dur for step in facts.host_steps)),
        "step_cpu_us": {str(step.number): us(step.span.dur) for step in facts.host_steps},
        "cuda_graph_launches": len(facts.graph_launches),
    }


def _graph_call(trace: Any, launch: Span) -> int | None:
    """The id of the compiled call that replays ``launch``'s graph: Inductor's
    ``## Call CompiledFxGraph`` label, or, in traces of torch versions that did not write it,
    the AOTAutograd function around the launch (``CompiledFunction``,
    ``CompiledFunctionBackward``)."""
    ancestors = list(trace.ancestors(launch))
    for ancestor in ancestors:
        if ancestor.name.startswith(GRAPH_CALL_PREFIX):
            return ancestor.id
    for ancestor in ancestors:
        if ancestor.cat == "cpu_op":
            return ancestor.id if ancestor.name in AOT_FUNCTIONS else None
    return None


def _copy_way(trace: Any, op: Span, graph_calls: dict[int, list[float]]) -> str | None:
    """For a copy ``op`` inside one of ``graph_calls`` (by id, with when its replays were
    launched, in order): ``"in"``, an input copied into the graph's static buffers before a
    replay, or ``"out"``, inside an ``aten::clone`` after one, an output cloned out of them
    (as torch's first CUDA-graph wrapper did); ``None`` for any other copy."""
    cloned = False
    for ancestor in trace.ancestors(op):
        replays = graph_calls.get(ancestor.id)
        if replays is not None:
            if cloned:
                return "out" if replays[0] <= op.start else None
            return "in" if op.start < replays[-1] else None
        if ancestor.name == "aten::clone":
            cloned = True
    return None


@rule(
    "cuda-graph",
    "torch.compile",
    see="""cudaGraphLaunch (hipGraphLaunch on ROCm) inside the compiled call (torch.compile
    with mode="reduce-overhead"), with GPU work but no aten op launching it.""",
    means="""The kernels are replayed from a captured CUDA graph: one CPU call launches them
    all, and the ops inside no longer show on the CPU lane. Inputs are first copied into the
    graph's static buffers. It removes per-kernel launch cost, not Dynamo's and AOTAutograd's
    per-call cost, so for one small op the CPU time per step can still go up (compare with an
    eager run).""",
    severity="info",
    from_post=False,
    example="auto_examples/part1_matmul_add/plot_08_torch_compile",
)
def cuda_graph(facts: Facts) -> Iterator[Hit]:
    graph_launches = facts.graph_launches
    if not graph_launches:
        return
    trace = facts.trace
    replayed = [trace.gpu_work_of(launch) for launch in graph_launches]
    activities = Counter(
        " + ".join(short_name(w.name, 60) for w in sorted(work, key=lambda w: w.start))
        for work in replayed
    )
    # Each compiled call that replays a graph, with when its replays were launched.
    graph_calls: dict[int, list[float]] = {}
    for launch in graph_launches:  # in start order
        call = _graph_call(trace, launch)
        if call is not None:
            graph_calls.setdefault(call, []).append(launch.start)
    copies: list[Any] = []
    clones: list[Any] = []
    for launch in facts.launches:
        if launch.op is not None and launch.op.name in INPUT_COPY_OPS:
            way = _copy_way(trace, launch.op, graph_calls)
            if way is not None:
                (copies if way == "in" else clones).append(launch)
    copy_gpu_us = sum(work.dur for launch in copies for work in launch.work)
    clone_gpu_us = sum(work.dur for launch in clones for work in launch.work)
    per_step = _per_step(facts, graph_launches)
    steps = max(len(per_step), 1)  # copies counted over the recording where no step has one
    every = "per step" if per_step else "in the recording"
    launch_us = median(s.dur for s in graph_launches)
    counts = [len(work) for work in replayed]
    fewest, most = min(counts), max(counts)
    replays = (
        f"each replaying {fewest} GPU activities"
        if fewest == most
        else f"replaying {fewest} to {most} GPU activities (median {median(counts):g})"
    )
    message = (
        f"{graph_launches[0].name} {len(graph_launches)}× (median {launch_us:.1f} µs of CPU), "
        f"{replays}"
    )
    if copies:
        message += (
            f"; before each replay, inputs are copied into the graph's buffers "
            f"({len(copies) / steps:g} copy launch(es) and {copy_gpu_us / steps:.1f} µs of "
            f"GPU time {every})"
        )
    if clones:
        buffers = "them" if copies else "the graph's buffers"
        message += (
            f"; after each replay, outputs are cloned out of {buffers} "
            f"({len(clones) / steps:g} copy launch(es) and {clone_gpu_us / steps:.1f} µs of "
            f"GPU time {every})"
        )
    yield (
        message + ".",
        {
            "launches": len(graph_launches),
            "per_step": per_step,
            "median_launch_us": us(launch_us),
            "replayed": dict(activities.most_common(3)),
            "input_copy_launches": len(copies),
            "input_copy_gpu_us": us(copy_gpu_us),
            "output_clone_launches": len(clones),
            "output_clone_gpu_us": us(clone_gpu_us),
            "steps_with_replays": len(per_step),
            "first": span_ref(graph_launches[0]),
        },
    )
