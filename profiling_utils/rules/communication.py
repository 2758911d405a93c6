"""Cheatsheet rows for communication (table "GPU lane"): collectives that no compute hides,
how much compute overlaps them, and the bandwidth they reach.

A collective's kernel (NCCL, RCCL, a serving engine's custom all-reduce: see
:data:`~profiling_utils.trace.COMMUNICATION_KERNEL_PATTERN`) occupies the GPU while it waits
for its peers and moves data, so it is judged on its own terms here and left out of the
compute rules (``hotspot``, ``compute-bound``). The numbers come from
:mod:`profiling_utils.comm`; bandwidths follow nccl-tests' conventions (see that module).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..comm import Collective, bus_factor
from ..tables import byte_size, percent
from .facts import Facts, median, span_ref, step_label, us
from .registry import Hit, rule

EXPOSED_MIN_STEP_SHARE = 0.10
"""``exposed-communication``: exposed communication takes at least this share of the median
step's time."""

OVERLAP_MIN_FRACTION = 0.25
"""``comm-overlap``: compute kernels run beside at least this share of the communication. A
quarter is already a deliberate overlap (collectives launched asynchronously beside compute);
how much stays exposed is ``exposed-communication``'s business, so both can fire on one
trace."""

BANDWIDTH_MIN_BYTES = 1 << 20
"""``collective-bandwidth``: messages of at least this many bytes (1 MiB); a smaller one
takes about the same time whatever its size (NCCL's latency), so its bandwidth says little."""

_REPORTED = 5


def _step_widths(facts: Facts) -> dict[int, float]:
    """Per step, the longer of its CPU window and its GPU window
    (:attr:`~profiling_utils.measures.StepTime.gpu_window_us`, which ends where the next
    step's begins: when a GPU runs behind with two steps' work side by side on several
    streams, windows that each ran to their own last work would count the time they share
    twice, and a share of one would be read against a step 1.7 times too wide, as on HTA's
    negative_queue trace), µs."""
    return {t.step: max(t.cpu_us, t.gpu_window_us) for t in facts.step_times}


def _overlap_row(overlap: Any, width: float | None = None) -> dict[str, Any]:
    row = {
        "step": overlap.step,
        "communication_us": us(overlap.communication_us),
        "overlapped_us": us(overlap.overlapped_us),
        "exposed_us": us(overlap.exposed_us),
        "compute_us": us(overlap.compute_us),
    }
    if width is not None:
        row["step_window_us"] = us(width)
        row["exposed_share"] = round(overlap.exposed_us / width, 4) if width > 0 else None
    return row


def _collective_ref(collective: Collective) -> dict[str, Any]:
    return {
        "op": collective.op,
        "bytes": collective.bytes,
        "step": collective.step,
        "group": collective.group,
        **span_ref(collective.span),
    }


@rule(
    "exposed-communication",
    "GPU lane",
    see="""Collective kernels (NCCL's ncclDevKernel_*, ncclKernel_*, or before NCCL 2.7
    ncclAllReduceRingLLKernel_*-style names; the same from RCCL on AMD; MSCCL, NVSHMEM, DeepEP,
    vLLM's and SGLang's custom all-reduce) running while no compute kernel runs on the GPU,
    for a sizeable part of the median step.""",
    means="""Exposed communication: the step waits for the network (or for the slowest rank)
    instead of computing. Overlap it with compute (DDP's bucketed gradient all-reduce during
    the backward pass, FSDP's prefetch), send less (larger buckets, lower-precision
    gradients), or find the straggler: a collective also lasts as long as its slowest peer
    takes to join.""",
    severity="warning",
    from_post=False,
    example="auto_examples/part1_matmul_add/plot_11_several_ranks",
)
def exposed_communication(facts: Facts) -> Iterator[Hit]:
    if not facts.collectives:
        return
    widths = _step_widths(facts)
    rows = [
        _overlap_row(overlap, widths[overlap.step])
        for overlap in facts.comm_overlap.steps
        if overlap.step in widths and overlap.communication_us > 0
    ]
    if not rows:
        if not facts.steps:
            yield from _exposed_over_the_recording(facts)
        return
    # The lower median is a real step, so the message can name it.
    median_row = sorted(rows, key=lambda row: row["exposed_share"] or 0.0)[(len(rows) - 1) // 2]
    typical = median_row["exposed_share"]
    if typical is None or typical < EXPOSED_MIN_STEP_SHARE:
        return
    total = facts.comm_overlap.total
    yield (
        f"In the step with the median exposed share ({step_label(median_row['step'])}), "
        f"communication runs with no compute beside it for {percent(typical)} of the step "
        f"({median_row['exposed_us']:.1f} of {median_row['step_window_us']:.1f} µs, the longer "
        "of its CPU and GPU windows); over the "
        f"trace, {_EXPOSED_TOTAL.format(total=total)}",
        {"median_exposed_share": typical, **_exposed_evidence(facts, rows)},
    )


_EXPOSED_TOTAL = (
    "{total.exposed_us:.1f} of {total.communication_us:.1f} µs of communication is exposed. A "
    "collective's kernel also waits for the last rank to join it: only the ranks' traces read "
    "together (diagnose given all of them, in its part across ranks) tell that wait from the "
    "transfer."
)
"""The end of ``exposed-communication``'s message, over the trace, with or without steps."""


def _exposed_evidence(facts: Facts, rows: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The evidence ``exposed-communication`` gives with or without steps (``rows``)."""
    longest = sorted(facts.collectives, key=lambda c: -c.span.dur)[:_REPORTED]
    return {
        "total": _overlap_row(facts.comm_overlap.total),
        **({"steps": rows} if rows is not None else {}),
        "collectives": len(facts.collectives),
        "longest_collectives": [_collective_ref(c) for c in longest],
    }


def _exposed_over_the_recording(facts: Facts) -> Iterator[Hit]:
    """``exposed-communication`` for a trace without steps (a serving loop's): the share of
    the GPU's recorded span in which communication ran with no compute beside it."""
    total = facts.comm_overlap.total
    work = facts.trace.gpu_work
    first, last = (min(w.start for w in work), max(w.end for w in work)) if work else (0, 0)
    # Less the stretches with nothing running anywhere (a server between requests).
    quiet = sum(
        max(0.0, min(end, last) - max(start, first)) for start, end in facts.quiet_stretches
    )
    span = last - first - quiet
    if span <= 0 or total.exposed_us < EXPOSED_MIN_STEP_SHARE * span:
        return
    yield (
        f"Over the recording (no ProfilerStep#N to take steps from), communication runs with "
        f"no compute beside it for {percent(total.exposed_us / span)} of the GPU's recorded "
        f"span ({total.exposed_us:.1f} of {span:.1f} µs): {_EXPOSED_TOTAL.format(total=total)}",
        {
            "recording_exposed_share": round(total.exposed_us / span, 4),
            "gpu_span_us": us(span),
            **_exposed_evidence(facts, None),
        },
    )


@rule(
    "comm-overlap",
    "GPU lane",
    see="""Collective kernels on one stream while compute kernels run on another, at the same
    time, for a quarter of the collectives' duration or more.""",
    means="""Communication hidden behind compute, which is what data-parallel training aims
    for (DDP all-reduces gradient buckets during the backward pass). The two still share the
    GPU's memory bandwidth and SMs, so overlapped kernels run slower than they would alone.""",
    severity="info",
    from_post=False,
    example="auto_examples/part1_matmul_add/plot_11_several_ranks",
)
def comm_overlap(facts: Facts) -> Iterator[Hit]:
    if not facts.collectives:
        return
    total = facts.comm_overlap.total
    fraction = total.overlap_fraction
    if fraction is None or fraction < OVERLAP_MIN_FRACTION:
        return
    yield (
        f"Compute kernels run beside {percent(fraction)} of the communication "
        f"({total.overlapped_us:.1f} of {total.communication_us:.1f} µs, "
        f"{len(facts.collectives)} collective kernels).",
        {
            "overlap_fraction": round(fraction, 4),
            "total": _overlap_row(total),
            "steps": [
                _overlap_row(overlap)
                for overlap in facts.comm_overlap.steps
                if overlap.communication_us > 0
            ],
        },
    )


def _uneven_peer_bytes(members: list[Collective]) -> int | None:
    """The median bytes an all_to_all's calls move to or from the other ranks, where their
    recorded splits are uneven (not ``(n-1)/n`` of the message); else ``None``."""
    recorded = [c for c in members if c.peer_bytes is not None and c.group_size]
    if not recorded or all(
        c.peer_bytes * c.group_size == (c.group_size - 1) * (c.bytes or 0)  # type: ignore[operator]
        for c in recorded
    ):
        return None
    return int(median(c.peer_bytes for c in recorded))  # type: ignore[misc]


@rule(
    "collective-bandwidth",
    "GPU lane",
    see="""Collectives whose message size the trace records (In msg nelems and dtype on the
    kernel or on record_param_comms; Input Dims on the nccl:* label in older traces).""",
    means="""The bandwidth each collective reached, as nccl-tests reports it: algorithm
    bandwidth (bytes / time) and bus bandwidth (scaled by 2(n-1)/n for all_reduce, (n-1)/n
    for all_gather, reduce_scatter and all_to_all, 1 for broadcast, send and recv; for an
    all_to_all with uneven recorded splits, the bytes the rank sends to or receives from the
    others over the time), which compares with the links' peak (NVLink, InfiniBand). It is a
    lower bound: the kernel's time includes waiting for the slowest rank. Far below the
    links' peak for large messages, look for stragglers or a slow path between nodes.""",
    severity="info",
    from_post=False,
    example="auto_examples/part1_matmul_add/plot_11_several_ranks",
)
def collective_bandwidth(facts: Facts) -> Iterator[Hit]:
    sized = [
        c
        for c in facts.collectives
        if c.bytes is not None and c.bytes >= BANDWIDTH_MIN_BYTES and c.algbw_gb_s is not None
    ]
    if not sized:
        return
    # One row per operation, group and message size: bandwidth depends on the size.
    by_kind: dict[tuple[str, str | None, int | None, int], list[Collective]] = {}
    for collective in sized:
        key = (collective.op, collective.group, collective.group_size, collective.bytes or 0)
        by_kind.setdefault(key, []).append(collective)
    rows = []
    for (op, group, group_size, size), members in by_kind.items():
        busbw = [c.busbw_gb_s for c in members if c.busbw_gb_s is not None]
        rows.append(
            {
                "op": op,
                "group": group,
                "group_size": group_size,
                "bytes": size,
                "dtype": members[0].dtype,
                "count": len(members),
                "total_us": us(sum(c.span.dur for c in members)),
                "median_us": us(median(c.span.dur for c in members)),
                "median_algbw_gb_s": round(median(c.algbw_gb_s or 0.0 for c in members), 2),
                "median_busbw_gb_s": round(median(busbw), 2) if busbw else None,
                "uneven_peer_bytes": _uneven_peer_bytes(members),
                "first": _collective_ref(members[0]),
            }
        )
    rows.sort(key=lambda row: -row["total_us"])
    top = rows[0]
    world = facts.trace.world_size
    factor = bus_factor(top["op"], world)
    evidence_world: dict[str, Any] = {}
    if top["median_busbw_gb_s"] is not None:
        over = f" over {top['group_size']} ranks" if top["group_size"] else ""
        bus = f", bus bandwidth {top['median_busbw_gb_s']:.1f} GB/s{over}"
        if top["uneven_peer_bytes"] is not None:
            bus += (
                f" (splits uneven: {byte_size(top['uneven_peer_bytes'])} of each call crosses "
                "to or from the other ranks in the busier direction, the bytes the bus "
                "bandwidth counts)"
            )
    elif factor is not None and world is not None and world > 1:
        # The group is not named; the run's world is: the default group spans all of it.
        if_world = top["median_algbw_gb_s"] * factor
        evidence_world = {"world_size": world, "median_busbw_if_world_gb_s": round(if_world, 2)}
        bus = (
            f" (group size not recorded; if the group is all {world} ranks of the run, the "
            f"default group, the bus bandwidth is {if_world:.1f} GB/s)"
        )
    else:
        bus = " (group size not recorded: no bus bandwidth)"
    yield (
        f"{len(sized)} collective(s) of 1 MiB or more with a recorded size; the most time goes "
        f"to {top['op']} of {byte_size(top['bytes'])} ({top['count']}×, median "
        f"{top['median_us']:.1f} µs), at a median algorithm bandwidth of "
        f"{top['median_algbw_gb_s']:.1f} GB/s{bus}: a lower bound, as a collective's kernel "
        "also waits for the last rank to join it.",
        {
            "kinds": rows[:_REPORTED],
            "sized_collectives": len(sized),
            "collectives": len(facts.collectives),
            **evidence_world,
        },
    )
