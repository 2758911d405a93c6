"""Communication in a trace: the collectives a rank ran and how much compute hid them.

- :func:`collectives`: every communication kernel (NCCL's, RCCL's, a custom all-reduce's), with
  its operation, message size, dtype, process group and position, so that the k-th collective
  of a group can be paired across ranks.
- :func:`comm_overlap`: per step and in total, how long communication ran, how much of it
  compute kernels overlapped, and how much was exposed (ran with no compute beside it).

What a trace records about a collective depends on the torch version. Since about torch 2.2 the
collective's kernel and its ``record_param_comms`` op carry ``Collective name``, ``In msg
nelems``, ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name``... Older traces
only have the ``nccl:<op>`` label and the ``c10d::<op>`` op around the launch, with the tensors'
``Input Dims`` and ``Input type`` when shapes were recorded; the kernel's own name is the last
resort for the operation.

Bandwidths follow the conventions of NCCL's `nccl-tests
<https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md>`_: the message size is
the larger of the input and output buffers, the *algorithm bandwidth* is that size over the
kernel's duration, and the *bus bandwidth* scales it by how much each rank really sends, so that
it compares with the link's peak whatever the number of ranks ``n``: ``2(n-1)/n`` for all_reduce,
``(n-1)/n`` for all_gather, reduce_scatter and all_to_all, 1 for broadcast, reduce, send and
recv. That factor for all_to_all assumes even splits; where the trace records uneven ones
(``In split size``, ``Out split size``) and the rank's place in its group, the bus bandwidth
is the bytes the rank sends to or receives from the other ranks, whichever is larger, over
the duration.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from operator import attrgetter, itemgetter
from typing import Any

import msgspec

from .measures import pieces_within
from .trace import Span, Trace, _as_int, element_bytes, input_shapes

__all__ = [
    "OPERATIONS",
    "Collective",
    "Transfer",
    "Overlap",
    "CommOverlap",
    "collectives",
    "comm_overlap",
    "bus_factor",
]

OPERATIONS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send",
    "recv",
    "send_recv",
    "barrier",
    "unknown",
)
"""The values of :attr:`Collective.op`."""

_BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}

_LABEL_PREFIXES = ("nccl:", "rccl:", "gloo:")
_C10D_PREFIX = "c10d::"
_PARAM_COMMS = "record_param_comms"
_START = attrgetter("start")


def _operation(text: str) -> str:
    """``"allreduce"``, ``"_allgather_base"``, ``"nccl:all_reduce"``, ``"AllReduce"``,
    ``"reduce_scatter_tensor_coalesced"``... as one of :data:`OPERATIONS`."""
    key = re.sub(r"[^a-z]", "", text.lower())
    for needle, operation in (
        ("allreduce", "all_reduce"),
        ("allgather", "all_gather"),
        ("reducescatter", "reduce_scatter"),
        ("alltoall", "all_to_all"),
        ("broadcast", "broadcast"),
        ("barrier", "barrier"),
    ):
        if needle in key:
            return operation
    if "reduce" in key:  # what is left: NCCL's rooted Reduce (dist.reduce, DataParallel's)
        return "reduce"
    if "sendrecv" in key:
        return "unknown"  # NCCL's SendRecv kernel runs sends, receives and all_to_all alike
    if "send" in key:
        return "send"
    if "recv" in key:
        return "recv"
    return "unknown"


def _kernel_operation(name: str) -> str:
    """The operation a kernel's name spells: for NCCL's and its kin's
    (``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_RING_LL``) the first
    ``_``-separated word after the prefix, or the prefix itself before NCCL 2.7
    (``ncclAllReduceRingLLKernel_sum_f32``); for the others, the function's name
    (``void vllm::cross_device_reduce_1stage<...>`` is an all_reduce, DeepEP's dispatch and
    combine an all_to_all)."""
    head = name.split("(", 1)[0]
    if head.startswith(("nccl", "rccl", "msccl")):
        words = head.split("_")
        spelled = _operation(words[0])
        if spelled != "unknown":
            return spelled
        return _operation(words[1]) if len(words) > 1 else "unknown"
    function = head.removeprefix("void ").split("<", 1)[0]
    if "cross_device_reduce" in function:
        return "all_reduce"
    if function.startswith("deep_ep::") and function.endswith(("dispatch", "combine")):
        return "all_to_all"
    return _operation(function)


_KERNEL_DTYPE = re.compile(r"_(f16|bf16|f32|f64|i8|u8|i32|u32|i64|u64)\b")
"""The element type at the end of a collective kernel's name before NCCL 2.7
(``ncclAllReduceRingLLKernel_sum_f32``): the dtype where an old trace records sizes only."""

_KERNEL_DTYPES = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "f64": "float64",
    "i8": "int8",
    "u8": "uint8",
    "i32": "int32",
    "u32": "int32",
    "i64": "int64",
    "u64": "int64",
}


def _tensor_bytes(op: Span, kernel: Span | None = None) -> tuple[int | None, str | None]:
    """The largest tensor among an op's recorded inputs (``Input Dims`` with ``Input type``),
    in bytes, and its dtype: for a collective, the larger of its input and output buffers.
    Where the op records sizes without dtypes (torch ~1.9), the dtype ``kernel``'s name
    spells, if any."""
    shapes = input_shapes(op)
    best: tuple[int | None, str | None] = (None, None)
    if shapes is None:
        return best
    types = shapes.types
    if not types and kernel is not None:
        spelled = _KERNEL_DTYPE.search(kernel.name.split("(", 1)[0])
        if spelled is not None:
            types = [_KERNEL_DTYPES[spelled[1]]] * len(shapes.dims)
    for index, dtype in enumerate(types):
        size, sizes = element_bytes(dtype), shapes.sizes(index)
        if sizes is None or size is None:
            continue
        total = math.prod(sizes) * size
        if best[0] is None or total > best[0]:
            best = (total, dtype)
    return best


class Transfer(msgspec.Struct, frozen=True, gc=False):
    """One send or receive of a batch that runs as one kernel (``send_recv``)."""

    op: str
    """``"send"`` or ``"recv"``."""
    peer: int
    """The rank it goes to or comes from (global: ``Dst Rank``, ``Src Rank``)."""
    bytes: int | None
    """Its size, where recorded."""


class Collective(msgspec.Struct, frozen=True, gc=False):
    """One collective or point-to-point transfer, as its GPU kernel ran on this rank.

    The bandwidths follow nccl-tests (see the module's docstring).
    """

    span: Span
    """The GPU kernel doing the collective (``ncclDevKernel_*``, ``ncclKernel_*``...)."""
    op: str
    """One of :data:`OPERATIONS`: ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``,
    ``"broadcast"``, ``"reduce"`` (rooted), ``"all_to_all"``, ``"send"``, ``"recv"``,
    ``"send_recv"`` (a batch of sends and receives run as one kernel, as
    ``batch_isend_irecv`` does), ``"barrier"``, or ``"unknown"`` when the trace does not say
    (an older trace's ``SendRecv`` kernel outside any label)."""
    bytes: int | None
    """Message size in bytes, the larger of the input and output buffers (elements × dtype
    size), where the trace records it; else ``None``."""
    dtype: str | None
    """The element type as the trace spells it (``"Float"``, ``"BFloat16"``, ``"float"``...)."""
    group: str | None
    """The process group's name (``Process Group Name``, e.g. ``"0"``), where recorded."""
    group_size: int | None
    """Ranks in the process group (``Group size``), where recorded; for an all_gather or a
    reduce_scatter that records its input's and output's elements but no group size, their
    ratio (one holds every rank's share of the other)."""
    step: int | None
    """The ``ProfilerStep#N`` its launch lies in, if any."""
    peer: int | None
    """For a send or a receive, the other rank (global), where the trace records it: ``Dst
    Rank`` of a send, ``Src Rank`` of a receive, which the profiler writes as global ranks
    (``Rank`` beside them is the peer's rank inside the group); ``None`` where it records
    none, or one that is not in the group's ``Process Group Ranks``."""
    index: int
    """Its position among this trace's collectives of the same :attr:`group`, from 0 in start
    order: the k-th collective of a group on one rank pairs with the k-th on every other."""
    transfers: tuple[Transfer, ...] = ()
    """For a ``send_recv`` batch, its sends and receives in the order they were issued."""
    peer_bytes: int | None = None
    """For an all_to_all whose splits the trace records (``In split size``, ``Out split
    size``) on a rank whose place in the group is known: the larger of the bytes this rank
    sends to the other ranks and receives from them (its own share stays on the GPU). With
    even splits it is ``(n-1)/n`` of :attr:`bytes`; else ``None``."""

    @property
    def duration_us(self) -> float:
        """The kernel's duration, µs (it includes waiting for the slowest peer)."""
        return self.span.dur

    @property
    def algbw_gb_s(self) -> float | None:
        """Algorithm bandwidth, ``bytes / duration``, in GB/s (10^9 bytes per second)."""
        if self.bytes is None or self.span.dur <= 0:
            return None
        return self.bytes / (self.span.dur * 1e3)

    @property
    def busbw_gb_s(self) -> float | None:
        """Bus bandwidth, GB/s: :attr:`algbw_gb_s` × ``2(n-1)/n`` for all_reduce, ``(n-1)/n``
        for all_gather, reduce_scatter and all_to_all, 1 for broadcast, reduce, send and recv
        (``n`` = :attr:`group_size`); for an all_to_all with :attr:`peer_bytes`, those bytes
        over the duration (what ``(n-1)/n`` stands for with even splits); ``None`` when the
        size, the group size or the operation is unknown."""
        if self.peer_bytes is not None and self.span.dur > 0:
            return self.peer_bytes / (self.span.dur * 1e3)
        algbw = self.algbw_gb_s
        if algbw is None:
            return None
        factor = bus_factor(self.op, self.group_size)
        return None if factor is None else algbw * factor


def bus_factor(op: str, group_size: int | None) -> float | None:
    """What turns a collective's algorithm bandwidth into its bus bandwidth (NCCL's tests'
    convention): ``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for all_gather, reduce_scatter and
    all_to_all, 1 for broadcast, reduce, send and recv; ``None`` for another operation, or an
    unknown group size where it matters."""
    factor = _BUS_FACTORS.get(op)
    if factor is None:
        return None
    if op in ("broadcast", "reduce", "send", "recv", "send_recv"):
        return 1.0
    if group_size is None or group_size < 1:
        return None
    return factor(group_size)


def _describe(trace: Trace, kernel: Span, used: set[int]) -> dict[str, Any]:
    """:class:`Collective`'s fields but its step and index from the kernel's args, else from
    the ``record_param_comms`` op, ``nccl:<op>`` label and ``c10d::<op>`` op around its launch,
    with ``"label"``, the label if any. Adds the ``record_param_comms`` ops it read to
    ``used``."""
    sources = [kernel.args]
    label_op = c10d_op = None
    launch = trace.launch_of(kernel)
    if launch is not None:
        for enclosing in trace.ancestors(launch):
            name = enclosing.name
            if name == _PARAM_COMMS:
                sources.append(enclosing.args)
                used.add(enclosing.id)
            elif label_op is None and name.startswith(_LABEL_PREFIXES):
                label_op = enclosing
            elif c10d_op is None and name.startswith(_C10D_PREFIX):
                c10d_op = enclosing
                break  # the outermost of the three
    recorded = next((args for args in sources if "Collective name" in args), {})
    if recorded:
        op = _operation(str(recorded["Collective name"]))
    else:
        # A label or c10d op that names no operation (``nccl:coalesced``) leaves it to the
        # next source: the kernel's own name last.
        op = "unknown"
        if label_op is not None:
            op = _operation(label_op.name.split(":", 1)[1])
        if op == "unknown" and c10d_op is not None:
            op = _operation(c10d_op.name[len(_C10D_PREFIX) :])
        if op == "unknown":
            op = _kernel_operation(kernel.name)
    dtype = recorded.get("dtype")
    dtype = dtype if isinstance(dtype, str) else None
    elements = [
        n for n in map(_as_int, (recorded.get("In msg nelems"), recorded.get("Out msg nelems")))
    ]
    size = element_bytes(dtype)
    if size is not None and any(n is not None for n in elements):
        message_bytes: int | None = max(n for n in elements if n is not None) * size
    else:
        # Older traces: the largest tensor the label or the c10d op recorded.
        message_bytes = None
        for span in (label_op, c10d_op):
            if span is not None:
                found, found_dtype = _tensor_bytes(span, kernel)
                if found is not None and (message_bytes is None or found > message_bytes):
                    message_bytes, dtype = found, dtype or found_dtype
    group = recorded.get("Process Group Name")
    group_size = _as_int(recorded.get("Group size"))
    if group_size is None and None not in elements:
        # An all_gather's output holds every rank's input; a reduce_scatter's input, every
        # rank's output: the ratio is the group's size.
        smaller, larger = sorted(elements)  # type: ignore[type-var]
        if op in ("all_gather", "reduce_scatter") and smaller > 0 and larger % smaller == 0:
            ratio = larger // smaller
            group_size = ratio if ratio > 1 else None
    return {
        "op": op,
        "bytes": message_bytes,
        "dtype": dtype,
        "group": None if group is None else str(group),
        "group_size": group_size,
        "peer": _peer(recorded, op),
        "peer_bytes": _peer_bytes(trace, recorded, op, elements, size, group_size),
        "label": None if recorded else label_op,
    }


def _recorded_list(recorded: dict[str, Any], key: str) -> list | None:
    """A list the profiler writes as a string (``"[0, 1]"``), decoded; ``None`` if absent or
    not a list."""
    value = recorded.get(key)
    if isinstance(value, str):
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            return None
    return value if isinstance(value, list) else None


def _peer(recorded: dict[str, Any], op: str) -> int | None:
    """The global rank a send goes to or a receive comes from (:attr:`Collective.peer`)."""
    if op not in ("send", "recv"):
        return None
    peer = _as_int(recorded.get("Dst Rank" if op == "send" else "Src Rank"))
    if peer is None or peer < 0:
        return None
    ranks = _recorded_list(recorded, "Process Group Ranks")
    if ranks and peer not in ranks:
        return None  # not a rank of the call's group: not a peer to pair with
    return peer


def _peer_bytes(
    trace: Trace,
    recorded: dict[str, Any],
    op: str,
    elements: list[int | None],
    element_bytes: int | None,
    group_size: int | None,
) -> int | None:
    """:attr:`Collective.peer_bytes`: an all_to_all's bytes to and from the other ranks, from
    its recorded splits (rows of the first dimension, one per rank of the group)."""
    if op != "all_to_all" or element_bytes is None or trace.rank is None:
        return None
    splits = [_recorded_list(recorded, key) for key in ("In split size", "Out split size")]
    ranks = _recorded_list(recorded, "Process Group Ranks")
    if ranks:
        place = ranks.index(trace.rank) if trace.rank in ranks else None
    else:  # no member list: only the run's whole world is a group we can place it in
        place = trace.rank if group_size is not None and group_size == trace.world_size else None
    moved = []
    for split, nelems in zip(splits, elements, strict=True):
        if not split or nelems is None or place is None or place >= len(split):
            return None  # even splits (an empty list), or nothing to place this rank in
        rows = [_as_int(n) for n in split]
        if None in rows or sum(rows) <= 0 or nelems % sum(rows):  # type: ignore[arg-type]
            return None
        row_elements = nelems // sum(rows)  # type: ignore[arg-type]
        moved.append((sum(rows) - rows[place]) * row_elements * element_bytes)  # type: ignore[operator]
    return max(moved)


def collectives(trace: Trace) -> list[Collective]:
    """Every collective and point-to-point kernel of the trace, in start order.

    Args:
        trace: A loaded trace (one rank).

    Returns:
        One :class:`Collective` per communication kernel; empty for a trace without any.
    """
    used: set[int] = set()
    described = [(kernel, _describe(trace, kernel, used)) for kernel in trace.communication]
    launched: dict[Any, list[float]] = {}  # per thread, when its communication launches ended
    for kernel in trace.communication:
        launch = trace.launch_of(kernel)
        if launch is not None:
            launched.setdefault(launch.lane, []).append(launch.end)
    for ends in launched.values():
        ends.sort()
    found = []
    seen_in_group: dict[str | None, int] = {}
    for kernel, fields in described:
        label = fields.pop("label")
        if label is not None and label.name.endswith(":coalesced"):
            ends = launched.get(label.lane, [])
            before = bisect_right(ends, label.start)
            after = ends[before - 1] if before else -math.inf
            # A batch whose kernel went unrecorded ends where its label does.
            labels = trace.by_name.get(label.name, [])
            for index in range(bisect_left(labels, label.start, key=_START) - 1, -1, -1):
                if labels[index].lane is label.lane:
                    if after < labels[index].end <= label.start:
                        after = labels[index].end
                    break
            fields.update(_batch(trace, label, used, after))
        index = seen_in_group.get(fields["group"], 0)
        seen_in_group[fields["group"]] = index + 1
        step = trace.step_of(kernel)
        found.append(
            Collective(
                span=kernel,
                step=None if step is None else step.number,
                index=index,
                **fields,
            )
        )
    return found


def _batch(trace: Trace, label: Span, used: set[int], after: float) -> dict[str, Any]:
    """What a ``nccl:coalesced`` kernel runs, from the sends and receives recorded just before
    its label on its thread (after ``after``, the end of the thread's last communication
    launch before it) that launched no kernel of their own (``batch_isend_irecv`` issues each
    one, then one kernel for all): op ``"send_recv"``, their group if they share one, each of
    them (:attr:`Collective.transfers`), and the bytes sent or received, whichever is more.
    Nothing where no such send or receive is recorded."""
    recorded = trace.by_name.get(_PARAM_COMMS, [])
    members = []
    for index in range(bisect_right(recorded, label.start, key=_START) - 1, -1, -1):
        span = recorded[index]
        if span.start < after:
            break
        if span.lane is not label.lane or span.end > label.start:
            continue
        args = span.args
        op = _operation(str(args.get("Collective name", "")))
        if span.id in used or op not in ("send", "recv"):
            break  # an earlier kernel's op, or a wait: the batch starts after it
        members.append((op, args))
    transfers = []
    for op, args in reversed(members):
        peer = _peer(args, op)
        if peer is None:
            return {}
        dtype = args.get("dtype")
        size = element_bytes(dtype if isinstance(dtype, str) else None)
        elements = _as_int(args.get("In msg nelems"))
        moved = None if size is None or elements is None else elements * size
        transfers.append(Transfer(op, peer, moved))
    if not transfers:
        return {}
    groups = {args.get("Process Group Name") for _, args in members}
    (group,) = groups if len(groups) == 1 else (None,)
    group_sizes = {_as_int(args.get("Group size")) for _, args in members}
    (group_size,) = group_sizes if len(group_sizes) == 1 else (None,)
    sizes = [t.bytes for t in transfers]
    return {
        "op": "send_recv",
        "group": None if group is None else str(group),
        "group_size": group_size,
        "bytes": None
        if None in sizes
        else max(sum(t.bytes for t in transfers if t.op == op) for op in ("send", "recv")),  # type: ignore[misc]
        "transfers": tuple(transfers),
    }


class Overlap(msgspec.Struct, frozen=True, gc=False):
    """Communication and compute time on the GPU(s), and how much of one the other hid."""

    step: int | None
    """The ``ProfilerStep#N`` (kernels launched in it), or ``None`` for the whole trace."""
    communication_us: float
    """Time during which at least one communication kernel ran (union over kernels), µs."""
    compute_us: float
    """Time during which at least one compute kernel ran, µs."""
    overlapped_us: float
    """Communication time during which a compute kernel also ran on the same GPU, µs (for a
    step, its communication beside any compute kernel, the next step's included)."""

    @property
    def exposed_us(self) -> float:
        """Communication time with no compute kernel running beside it on the same GPU, µs:
        the time communication adds to the step unless it is hidden."""
        return self.communication_us - self.overlapped_us

    @property
    def overlap_fraction(self) -> float | None:
        """:attr:`overlapped_us` / :attr:`communication_us` (``None`` with no communication)."""
        if self.communication_us <= 0:
            return None
        return self.overlapped_us / self.communication_us


class CommOverlap(msgspec.Struct, frozen=True, gc=False):
    """:func:`comm_overlap`'s answer: the whole trace and each step."""

    total: Overlap
    """Over every kernel of the trace (those outside any step included)."""
    steps: tuple[Overlap, ...]
    """One per ``ProfilerStep#N`` that launched any kernel, by step number."""


def _merged(spans: list[Span]) -> list[tuple[float, float]]:
    """The union of the spans' intervals as sorted, disjoint (start, end) pairs."""
    return pieces_within(sorted(spans, key=_START), -math.inf, math.inf)


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


_END_OF_INTERVAL = itemgetter(1)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of the intersection of two unions of sorted, disjoint intervals: ``b`` from the
    first of its intervals that ends after ``a`` begins (``a`` is a step's, ``b`` the whole
    trace's: walking ``b`` from its start for each step was quadratic in steps)."""
    if not a or not b:
        return 0.0
    first = bisect_right(b, a[0][0], key=_END_OF_INTERVAL)
    total, i, j, len_a, len_b = 0.0, 0, first, len(a), len(b)
    while i < len_a and j < len_b:
        a_start, a_end = a[i]
        b_start, b_end = b[j]
        low = a_start if a_start > b_start else b_start
        high = a_end if a_end < b_end else b_end
        if high > low:
            total += high - low
        if a_end < b_end:
            i += 1
        else:
            j += 1
    return total


def _by_device(comm: list[Span], compute: list[Span]) -> dict[Any, tuple[list, list]]:
    by_device: dict[Any, tuple[list[Span], list[Span]]] = {}
    for span in comm:
        by_device.setdefault(span.lane.device, ([], []))[0].append(span)
    for span in compute:
        by_device.setdefault(span.lane.device, ([], []))[1].append(span)
    return by_device


def _overlap(
    step: int | None,
    comm: list[Span],
    compute: list[Span],
    all_compute: dict[Any, list[tuple[float, float]]],
) -> Overlap:
    """The overlap of ``comm`` with the compute kernels of its GPU: ``compute`` is the work
    counted as the step's, ``all_compute`` every compute kernel's intervals, per device."""
    comm_us = compute_us = overlapped = 0.0
    for device, (device_comm, device_compute) in _by_device(comm, compute).items():
        comm_intervals = _merged(device_comm)
        comm_us += _length(comm_intervals)
        compute_us += _length(_merged(device_compute))
        overlapped += _intersection(comm_intervals, all_compute.get(device, []))
    return Overlap(step, comm_us, compute_us, overlapped)


def comm_overlap(trace: Trace) -> CommOverlap:
    """How much of the communication compute kernels hid, per step and in total.

    Communication is the time at least one collective kernel runs on a GPU; it is *overlapped*
    where a compute kernel runs on the same GPU at the same time (on another stream), and
    *exposed* elsewhere. A kernel counts in the step its launch lies in (it may run after the
    step's CPU window); a step's communication is overlapped by any compute kernel, the
    next step's too where the GPU runs them side by side. Memcpys and memsets are neither
    communication nor compute here.

    Args:
        trace: A loaded trace (one rank).

    Returns:
        A :class:`CommOverlap`; its numbers are 0 for a trace without communication.
    """
    comm = trace.communication
    compute = trace.compute_kernels
    per_step: dict[int, tuple[list[Span], list[Span]]] = {}
    for kernels, slot in ((comm, 0), (compute, 1)):
        for kernel in kernels:
            step = trace.step_of(kernel)
            if step is not None:
                per_step.setdefault(step.number, ([], []))[slot].append(kernel)
    all_compute = {
        device: _merged(kernels) for device, (_, kernels) in _by_device([], compute).items()
    }
    return CommOverlap(
        total=_overlap(None, comm, compute, all_compute),
        steps=tuple(
            _overlap(number, *per_step[number], all_compute) for number in sorted(per_step)
        ),
    )
