"""Several ranks of one distributed run: load each rank's trace in its own process, then line
the ranks up against each other.

A distributed job writes one trace per rank. :func:`trace_files` expands the paths given on a
command line (files, or directories of per-rank traces) into trace files; :func:`analyse_files`
loads them in parallel, one worker process per core, and hands each loaded trace to a function
of the caller's; :func:`cross_rank` compares the ranks' :class:`RankProfile` (small, picklable
facts taken from each trace in its worker) and names what one rank alone cannot show:

- the **straggler**: the rank the others wait for. When a rank is late to a collective, every
  other rank's GPU sits in the collective's kernel until it arrives, so the steps of all ranks
  come out about as long; the late rank is the one that reaches the collectives last, not the
  one with the longest steps;
- for each rank, time in collectives split into **wait** (skew: waiting for the last rank to
  arrive) and **transfer** (the rest of the collective's duration), the way AMD TraceLens
  separates synchronisation skew from communication: for the k-th collective of a process
  group on every rank, the rank that arrives last waits about 0, each other rank waits from its
  own start until the last arrival;
- the spread of step time across ranks (a rank whose steps are longer than another's in
  every step both recorded, by a median of over 5%), and each rank's GPU idle time.

Ranks are aligned by absolute time: ``baseTimeNanoseconds`` plus ``ts`` in traces from
torch >= 2.4, ``ts`` alone in older traces (where it is already absolute). The comparison is
only as good as the agreement of the hosts' clocks: ranks on one host share a clock; across
hosts, NTP or PTP keeps them within tens of µs to a few ms.

Example::

    from profiling_utils.ranks import analyse_files, cross_rank, rank_profile, trace_files

    results = analyse_files(trace_files(["traces/"]), rank_profile)
    report = cross_rank([r.value for r in results if r.error is None])
    print(report.straggler)
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from operator import add, attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, NamedTuple, TypeVar

import msgspec

from . import comm, measures
from .errors import TraceError
from .loading import MAX_TRACE_BYTES_ENV, default_max_bytes
from .rules import Facts, Finding
from .tables import byte_size, percent, without_float_noise
from .trace import HOST_COLLECTIVE_PREFIX, Trace, TraceContent, gc_paused, load_trace

_START = attrgetter("start")
_DURATION = attrgetter("dur")

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

__all__ = [
    "ClockKind",
    "CollectiveCall",
    "RankStep",
    "RankProfile",
    "Outcome",
    "RankTiming",
    "StepSpread",
    "Straggler",
    "CrossRank",
    "CROSS_RANK_RULE_IDS",
    "trace_files",
    "recorded_rank",
    "names_trace_events",
    "pair_by_rank",
    "analyse_files",
    "rank_profile",
    "cross_rank",
]

T = TypeVar("T")

ClockKind = Literal["baseTimeNanoseconds", "absolute ts"]
"""How a trace's times become absolute: ``baseTimeNanoseconds`` + ``ts`` (torch >= 2.4) or
``ts`` alone (older traces write absolute µs)."""

TRACE_SUFFIXES = (".json", ".json.gz")
"""File names a directory of per-rank traces is searched for."""

_DIGITS = re.compile(r"(\d+)")


def _natural_key(path: Path) -> list[Any]:
    """``rank-2`` before ``rank-10``."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(path.name)]


def _holds_traces(directory: Path) -> bool:
    """Whether ``directory`` is a directory with a trace file directly in it."""
    try:
        return directory.is_dir() and any(
            p.is_file() and p.name.endswith(TRACE_SUFFIXES) for p in directory.iterdir()
        )
    except OSError:  # unreadable: not ours to search
        return False


def trace_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The trace files named by ``paths``: each file as given, each directory's ``.json`` and
    ``.json.gz`` files (not its subdirectories) in natural order (``rank-2`` before ``rank-10``),
    each file once.

    Raises:
        TraceError: A path does not exist, or a directory holds no trace file.
    """
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(
                (p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)),
                key=_natural_key,
            )
            if not found:
                nested = [sub.name for sub in sorted(path.iterdir()) if _holds_traces(sub)]
                hint = (
                    f"; traces are in its subdirectories ({', '.join(nested[:3])}"
                    f"{', ...' if len(nested) > 3 else ''}), which are not searched: name them"
                    if nested
                    else ""
                )
                raise TraceError(path, f"directory holds no .json or .json.gz trace{hint}")
            files += found
        else:
            files.append(path)
    # A file named twice (or named and in a directory named) is one rank, read once.
    unique = {file.resolve(): file for file in reversed(files)}
    return [file for file in files if unique[file.resolve()] is file]


_HEAD_BYTES = 1 << 18
_DISTRIBUTED_INFO = re.compile(rb'"distributedInfo"\s*:\s*')
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:')


def _decompressed(file: Any) -> Any:
    """``file`` (open in binary mode, at its start) as a stream of its JSON text."""
    magic = file.read(2)
    file.seek(0)
    return gzip.GzipFile(fileobj=file) if magic == b"\x1f\x8b" else file


def names_trace_events(path: str | os.PathLike[str]) -> bool:
    """Whether the head of ``path`` (its first 256 KiB of JSON text) holds the key
    ``"traceEvents"``, as every trace torch.profiler writes does, before its events; ``False``
    for a file that cannot be read. Cheap: a sign of a trace, not a proof
    (:func:`~profiling_utils.trace.load_trace` decides)."""
    try:
        with open(path, "rb") as file:
            return _TRACE_EVENTS_KEY.search(_decompressed(file).read(_HEAD_BYTES)) is not None
    except (OSError, EOFError, gzip.BadGzipFile):
        return False


def recorded_rank(path: str | os.PathLike[str]) -> int | None:
    """``distributedInfo.rank`` as the trace file records it, read from the file's head or,
    where an older Kineto wrote it after the events, its tail, without loading the trace;
    ``None`` when neither holds one or the file cannot be read."""
    try:
        with open(path, "rb") as file:
            stream = _decompressed(file)
            head = stream.read(_HEAD_BYTES)
            rank = _rank_in(head)
            if rank is not None or len(head) < _HEAD_BYTES:
                return rank
            if stream is file:
                file.seek(max(file.seek(0, os.SEEK_END) - _HEAD_BYTES, _HEAD_BYTES))
                return _rank_in(file.read())
            tail = b""
            while chunk := stream.read(_HEAD_BYTES):  # a gzip stream is read to its end
                tail = tail[-_HEAD_BYTES:] + chunk
            return _rank_in(tail[-2 * _HEAD_BYTES :])
    except (OSError, EOFError, gzip.BadGzipFile):
        return None


def _rank_in(text: bytes) -> int | None:
    found = _DISTRIBUTED_INFO.search(text)
    if found is None:
        return None
    try:
        info, _ = json.JSONDecoder().raw_decode(text[found.end() :].decode("utf-8", "replace"))
    except ValueError:  # cut off by the piece's end, or not JSON
        return None
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def pair_by_rank(baselines: list[Path], traces: list[Path]) -> tuple[list[tuple[Path, Path]], bool]:
    """Pair two runs' trace files rank with rank: by the rank each file records
    (:func:`recorded_rank`) when every file of both runs records a rank of its own and the two
    runs hold the same ranks, else in the files' order (Kineto names a file after its host
    and process, not its rank, so the order of the names need not be the ranks'). Returns
    the pairs, and whether they are paired by recorded rank."""
    ranks_a = [recorded_rank(path) for path in baselines]
    ranks_b = [recorded_rank(path) for path in traces]
    if (
        None not in ranks_a
        and None not in ranks_b
        and len(set(ranks_a)) == len(ranks_a)
        and set(ranks_a) == set(ranks_b)
    ):
        by_rank = dict(zip(ranks_b, traces, strict=True))
        pairs = sorted(zip(ranks_a, baselines, strict=True))
        return [(baseline, by_rank[rank]) for rank, baseline in pairs], True
    return list(zip(baselines, traces, strict=True)), False


# -- loading in parallel ------------------------------------------------------------------------


class Outcome(msgspec.Struct, Generic[T], frozen=True):
    """What one worker brings back: a value, or the one-line error of a file it could not read."""

    files: tuple[str, ...]
    """The trace files the worker loaded, as given."""
    value: T | None = None
    """What the caller's function returned, when every file loaded."""
    error: str | None = None
    """``FILE: what is wrong`` for a file that cannot be read (the first such file, where
    several are), else ``None``."""
    not_a_trace: bool = False
    """Whether the file that could not be read is no trace at all
    (:attr:`~profiling_utils.errors.TraceError.not_a_trace`)."""
    unreadable: tuple[str, ...] = ()
    """Every file of :attr:`files` that could not be read, in order."""
    more_errors: tuple[str, ...] = ()
    """The lines of the others after the first (a pair of which neither file reads)."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _run(
    files: tuple[str, ...],
    analyse: Callable[..., T],
    max_bytes: int | None,
    keep: list[Trace] | None = None,
) -> Outcome[T]:
    """The worker: load ``files`` and apply ``analyse`` to the traces (module level, so that a
    spawned worker can unpickle it by name); the traces go into ``keep`` when one is given."""
    with gc_paused():  # the analysis, like the load, creates many objects and no cycles
        traces = []
        failed: list[tuple[str, TraceError]] = []
        for path in files:
            if any(path == known for known, _ in failed):  # a run compared with itself
                continue
            try:
                trace = load_trace(path, max_bytes=max_bytes)
            except TraceError as err:
                failed.append((path, err))
                continue
            if not failed:  # after a failure the others are read only to report them too
                traces.append(trace)
        if failed:
            lines = [_one_line(str(err)) for _, err in failed]
            return Outcome(
                files,
                error=lines[0],
                not_a_trace=failed[0][1].not_a_trace,
                unreadable=tuple(path for path, _ in failed),
                more_errors=tuple(lines[1:]),
            )
        if keep is not None:
            keep += traces
        return Outcome(files, value=analyse(*traces))


def analyse_files(
    tasks: Sequence[str | os.PathLike[str] | Sequence[str | os.PathLike[str]]],
    analyse: Callable[..., T],
    *,
    max_bytes: int | None = None,
    workers: int | None = None,
    context: BaseContext | None = None,
    keep: list[Trace] | None = None,
) -> list[Outcome[T]]:
    """Load each task's trace(s) in a worker process and apply ``analyse`` to them.

    Each trace is loaded and analysed in its own process, as many at once as there are cores,
    so that N traces take about N / cores times one. The traces stay in the workers: ``analyse``
    should return something small (a dict, a :class:`RankProfile`), which is pickled back.

    Args:
        tasks: One trace file per task, or a sequence of files that ``analyse`` takes together
            (``compare`` passes a baseline and a trace).
        analyse: Called with the loaded trace(s) of a task. It must be picklable: a module-level
            function, or a :func:`functools.partial` of one.
        max_bytes: Passed to :func:`~profiling_utils.trace.load_trace`: refuse a file whose
            decompressed size is larger. ``None``: ``PROFILING_UTILS_MAX_TRACE_BYTES`` when
            set, else load_trace's share of the available memory divided among the workers,
            since their traces are in memory at once.
        workers: Processes to use (default: the cores this process may run on).
        context: The :mod:`multiprocessing` context (default: the platform's; the work is
            spawn-safe).
        keep: When the tasks run in this process (one worker), their traces are appended
            here rather than freed: for a caller that exits without tearing down, as
            ``python -m profiling_utils`` does, since freeing a large trace object by object
            costs about 0.07 s per 100 MB. Ignored when the tasks run in worker processes.

    Returns:
        One :class:`Outcome` per task, in the order given. A file that cannot be read gives an
        outcome with its one-line ``error``; the other tasks still run.
    """
    jobs = [
        (str(task),) if isinstance(task, str | os.PathLike) else tuple(map(str, task))
        for task in tasks
    ]
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        workers = workers or os.cpu_count() or 1
    workers = max(1, min(workers, len(jobs)))
    if max_bytes is None and workers > 1 and not os.environ.get(MAX_TRACE_BYTES_ENV):
        # The default limit is a share of the memory available; traces loaded at once share it.
        limit = default_max_bytes()
        max_bytes = None if limit is None else max(1, limit // workers)
    if workers == 1:
        return [_run(files, analyse, max_bytes, keep) for files in jobs]
    # Imported here: a single trace never needs them, and the CLI's start-up stays short.
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(_run, files, analyse, max_bytes) for files in jobs]
        outcomes = []
        for files, future in zip(jobs, futures, strict=True):
            try:
                outcomes.append(future.result())
            except BrokenProcessPool:  # a worker was killed (out of memory?) mid-task
                reason = "the process reading it stopped abruptly (out of memory?)"
                outcomes.append(Outcome(files, error=f"{files[0]}: {reason}", unreadable=files[:1]))
        return outcomes


# -- what each rank brings back -----------------------------------------------------------------


class CollectiveCall(msgspec.Struct, frozen=True):
    """One collective's kernel on one rank, with its time on the rank's absolute clock."""

    group: str
    """The process group (``"default"`` when the trace does not name one)."""
    index: int
    """Position among this rank's collectives of the same group and op, from 0: the k-th
    all_reduce of a group is the same call on every rank. (NCCL needs every rank to issue a
    communicator's collectives in one order, so this pairs as the position in the group does;
    in older traces that do not name the group, collectives of different communicators
    interleave differently on each rank, and the op keeps them apart.)"""
    op: str
    """One of :data:`profiling_utils.comm.OPERATIONS` (``all_reduce``, ``all_to_all``...)."""
    start_us: float
    """Start of the kernel, µs after the rank's :attr:`RankProfile.clock_base_ns`."""
    dur_us: float
    """Duration of the kernel."""
    bytes: int | None = None
    """Its message size (:attr:`profiling_utils.comm.Collective.bytes`), where recorded."""
    peer: int | None = None
    """For a send or a receive whose trace records it, the other rank (global): the k-th send
    from rank A to rank B pairs with the k-th receive on B from A (``index`` then counts the
    calls to or from that peer)."""
    transfers: tuple[tuple[str, int, int, int | None], ...] = ()
    """For a ``send_recv`` batch (``batch_isend_irecv``) on a rank that records its rank: each
    of its sends and receives as ``(op, peer, index, bytes)``, ``index`` counting this rank's
    sends to (or receives from) that peer, batched or not: each pairs as a send or receive of
    its own would, and the batch's kernel waits for the last of its peers."""


class RankStep(msgspec.Struct, frozen=True):
    """One ``ProfilerStep#N`` of one rank."""

    step: int
    start_us: float
    """Start of the CPU window, µs after the rank's :attr:`RankProfile.clock_base_ns`."""
    cpu_us: float
    """Duration of the CPU window."""
    gpu_busy_us: float
    gpu_window_us: float


class RankProfile(msgspec.Struct, frozen=True):
    """The facts of one rank's trace that the cross-rank analysis needs (small and picklable)."""

    file: str
    """The trace file, as given."""
    rank: int | None
    """``distributedInfo.rank``, or ``None`` when the trace does not record it."""
    world_size: int | None
    """``distributedInfo.world_size``, or ``None``."""
    device: str | None
    """The GPU(s) of ``deviceProperties``, as
    :meth:`~profiling_utils.trace.DeviceInfo.describe` puts them."""
    content: TraceContent
    """Whether the trace holds GPU work, only an accelerator's events that are not read, only
    host events, or nothing at all."""
    clock: ClockKind
    """How :attr:`clock_base_ns` was found."""
    clock_base_ns: int
    """Absolute ns that times of this profile count from: ``baseTimeNanoseconds``, or 0."""
    steps: tuple[RankStep, ...]
    """The steps the single-trace rules take as samples
    (:attr:`profiling_utils.rules.Facts.steps`: not a step whose end the profiler did not
    record, nor an empty one beside others)."""
    gpu_busy_us: float
    """Time the GPU ran kernels, copies or memsets (streams' overlaps counted once)."""
    gpu_idle_us: float | None
    """GPU time in those steps' GPU windows (the whole GPU span without steps) in which the
    GPU ran nothing; ``None`` without GPU work."""
    collectives: tuple[CollectiveCall, ...]
    recorded_from_us: float = 0.0
    """Start of the trace's first event, µs after :attr:`clock_base_ns`: when its recording
    began."""
    recorded_to_us: float = 0.0
    """End of the trace's last-ending event, on the same clock: when its recording ended."""
    host_collectives: bool = False
    """Whether :attr:`collectives` are a CPU backend's host ranges (Gloo's ``gloo:<op>``),
    read where the trace holds no collective kernel."""
    host_collectives_in_groups: int = 0
    """Gloo ranges not read as collectives because the trace records several process groups
    (the ranges do not say whose they are)."""

    @property
    def label(self) -> str:
        """``"rank 3"``, or the file name when the trace records no rank."""
        return f"rank {self.rank}" if self.rank is not None else Path(self.file).name

    @property
    def collective_us(self) -> float:
        """Total duration of the collectives' kernels."""
        return sum(c.dur_us for c in self.collectives)


def _gpu_idle_us(trace: Trace, times: list[measures.StepTime], busy: float) -> float | None:
    if not trace.has_gpu:
        return None
    if times:
        return sum(t.gpu_idle_us or 0.0 for t in times)
    work = trace.gpu_work
    return max(w.end for w in work) - min(w.start for w in work) - busy


def rank_profile(trace: Trace, file: str | None = None) -> RankProfile:
    """Take from a loaded trace what :func:`cross_rank` needs (run in a worker process)."""
    base = trace.base_time_ns
    origin = trace.origin_us
    # The steps the single-trace rules take as samples: not one whose end was not recorded,
    # nor an empty one beside others (the step the profiler opens as it stops).
    facts = Facts(trace)
    kept = facts.steps
    times = facts.step_times
    busy = measures.gpu_busy_us(trace)
    by_step = {t.step: t for t in times}
    steps = tuple(
        RankStep(
            s.number,
            origin + s.start,
            s.end - s.start,
            by_step[s.number].gpu_busy_us,
            by_step[s.number].gpu_window_us,
        )
        for s in kept
    )
    calls = []
    seen: dict[tuple[str, str, int | None], int] = {}
    for collective in comm.collectives(trace):
        peer = collective.peer
        group = collective.group or "default"
        key = (group, collective.op, peer)
        index = seen[key] = seen.get(key, -1) + 1
        transfers = []
        if trace.rank is not None:
            for transfer in collective.transfers:
                side = (group, transfer.op, transfer.peer)
                seen[side] = seen.get(side, -1) + 1
                transfers.append((transfer.op, transfer.peer, seen[side], transfer.bytes))
        span = collective.span
        calls.append(
            CollectiveCall(
                group,
                index,
                collective.op,
                origin + span.start,
                span.dur,
                collective.bytes,
                peer,
                tuple(transfers),
            )
        )
    host_collectives = not calls
    in_groups = 0
    if host_collectives and (trace.process_groups or 1) > 1:
        # The ranges do not say whose group they are: the k-th call of an op may be another
        # group's on another rank. Counted, not lined up.
        in_groups = sum(
            len(spans)
            for name, spans in trace.by_name.items()
            if name.startswith(HOST_COLLECTIVE_PREFIX)
        )
    elif host_collectives:
        calls = _host_collective_calls(trace, origin)
    devices = list(dict.fromkeys(device.describe() for device in trace.devices))
    return RankProfile(
        file=str(trace.path) if file is None else file,
        rank=trace.rank,
        world_size=trace.world_size,
        device=", ".join(devices) or None,
        content=trace.content,
        clock="absolute ts" if base is None else "baseTimeNanoseconds",
        clock_base_ns=base or 0,
        steps=steps,
        gpu_busy_us=busy,
        gpu_idle_us=_gpu_idle_us(trace, times, busy),
        collectives=tuple(calls),
        recorded_from_us=origin + (trace.spans[0].start if trace.spans else 0.0),
        recorded_to_us=origin
        + max(map(add, map(_START, trace.spans), map(_DURATION, trace.spans)), default=0.0),
        host_collectives=host_collectives and bool(calls),
        host_collectives_in_groups=in_groups,
    )


_HOST_COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
"""The Gloo collectives lined up across ranks: those in which every rank's range lasts until
the last rank's part arrives. In a rooted one (broadcast, reduce, gather, scatter) a rank need
not wait for the last to arrive: its range may end before another's began."""


def _host_collective_calls(trace: Trace, origin: float) -> list[CollectiveCall]:
    """The collectives a CPU backend ran on the host (Gloo's ``gloo:<op>`` ranges on its
    worker threads), for a trace without collective kernels, in the order they began: each
    rank's k-th of an op is the same call. Their time runs from when a worker took the call
    to when every rank's part had arrived and the data had moved, so the wait for a late
    rank is in it, as in a kernel's. Only :data:`_HOST_COLLECTIVE_OPS`, of a trace that
    records one process group (see :func:`rank_profile`)."""
    ranges = sorted(
        (
            span
            for name, spans in trace.by_name.items()
            if name.startswith(HOST_COLLECTIVE_PREFIX)
            and name.removeprefix(HOST_COLLECTIVE_PREFIX) in _HOST_COLLECTIVE_OPS
            for span in spans
        ),
        key=_START,
    )
    calls = []
    seen: dict[str, int] = {}
    for span in ranges:
        op = span.name.removeprefix(HOST_COLLECTIVE_PREFIX)
        index = seen[op] = seen.get(op, -1) + 1
        calls.append(CollectiveCall("default", index, op, origin + span.start, span.dur))
    return calls


# -- across ranks -------------------------------------------------------------------------------


class RankTiming(msgspec.Struct, frozen=True):
    """One row of the per-rank table."""

    label: str
    """``"rank 3"``, or the file name when the trace records no rank."""
    rank: int | None
    file: str
    device: str | None
    content: str
    """A :data:`~profiling_utils.trace.TraceContent`: ``"GPU"``, ``"accelerator not read"``,
    ``"GPU not recorded"``, ``"CPU only"``, ``"profiler only"`` or ``"no events"``."""
    steps: int
    median_step_us: float | None
    """Median CPU duration of the rank's steps."""
    gpu_busy_us: float
    """Time the GPU ran kernels, copies or memsets; a collective's kernel counts while it
    waits."""
    gpu_idle_us: float | None
    """The rest of the steps' GPU windows (of the GPU's whole span without steps); ``None``
    without GPU work."""
    collectives: int | None
    """The rank's collectives; ``None`` where they are not known: its GPU work was not
    recorded, or its Gloo ranges cannot be told by process group."""
    collective_us: float
    """Total duration of the rank's collective kernels (for those matched across ranks,
    wait plus transfer)."""
    wait_us: float | None
    """Time in the collectives matched across ranks spent waiting for the last rank to arrive
    (skew); ``None`` when it took part in no collective matched across ranks."""
    transfer_us: float | None
    """The rest of the matched collectives' duration: moving the data."""
    last_arrivals: int
    """Matched collectives this rank reached last (the others waited for it)."""
    matched_bytes: int | None = None
    """The message sizes of its matched collectives added up, where every one of them
    records its size; ``None`` otherwise. Ranks that move different amounts in the same
    collectives (an uneven all_to_all) show it here."""


class StepSpread(msgspec.Struct, frozen=True):
    """One step number across the ranks that have it."""

    step: int
    ranks: int
    min_us: float
    median_us: float
    max_us: float
    slowest: str
    """Label of the rank with the longest step."""

    @property
    def spread(self) -> float:
        """``(max - min) / median``."""
        return (self.max_us - self.min_us) / self.median_us if self.median_us else 0.0


class Straggler(msgspec.Struct, frozen=True):
    """The rank the others wait for."""

    label: str
    rank: int | None
    basis: Literal["collectives", "steps"]
    """``collectives``: it arrives last at collectives, and the others' wait for it is at
    least twice what any other rank caused; ``steps``: no collective could be matched, and
    it has the longest median step, longer than the other ranks' (their median) in every
    step they share, by a median of over 5%."""
    last_arrivals: int
    """Matched collectives it reached last."""
    matched: int
    """Collectives matched across ranks."""
    caused_wait_us: float
    """Time the other ranks waited in collectives this rank reached last."""
    median_step_us: float | None
    """Its median step, to set beside the others' (about equal when the others wait)."""
    joined: int = 0
    """Of :attr:`matched`, those it took part in (a collective of a group it is not in, a
    send between two other ranks, is not one of them)."""


class CrossRank(msgspec.Struct, frozen=True):
    """What :func:`cross_rank` finds across the ranks of one run."""

    ranks: list[RankTiming]
    steps: list[StepSpread]
    """Step numbers that at least two ranks have, in order."""
    matched_collectives: int
    """Collectives found on at least two ranks under the same group, op and index, whose
    kernels overlap in time; and send/receive pairs (:attr:`paired_sends`)."""
    straggler: Straggler | None
    findings: list[Finding]
    notes: list[str] = msgspec.field(default_factory=list)
    """Caveats on the comparison (clocks, missing or repeated ranks, unmatched collectives)."""
    paired_sends: int = 0
    """Of :attr:`matched_collectives`, sends paired with their receive on the peer rank (the
    k-th send from rank A to rank B with the k-th receive on B from A, by the peer each
    records)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (the ``cross_rank`` key of the CLI's multi-rank ``--json``)."""
        return without_float_noise(
            {
                "ranks": [msgspec.structs.asdict(r) for r in self.ranks],
                "steps": [dict(msgspec.structs.asdict(s), spread=s.spread) for s in self.steps],
                "matched_collectives": self.matched_collectives,
                "paired_sends": self.paired_sends,
                "straggler": None
                if self.straggler is None
                else msgspec.structs.asdict(self.straggler),
                "findings": [f.to_dict() for f in self.findings],
                "notes": list(self.notes),
            }
        )


def _labels(profiles: Sequence[RankProfile]) -> list[str]:
    labels = [p.label for p in profiles]
    repeated = {label for label in labels if labels.count(label) > 1}
    return [
        f"{label} ({Path(p.file).name})" if label in repeated else label
        for label, p in zip(labels, profiles, strict=True)
    ]


def _offsets_us(profiles: Sequence[RankProfile]) -> list[float]:
    """Per profile, what to add to its times to put every rank on one clock (exact in ns)."""
    reference = min(p.clock_base_ns for p in profiles)
    return [(p.clock_base_ns - reference) / 1000 for p in profiles]


class _Waits(msgspec.Struct, frozen=True):
    wait: list[float]
    transfer: list[float]
    last: list[int]
    caused: list[float]
    moved: list[int | None] = msgspec.field(default_factory=list)
    """Per rank, the bytes of its matched collectives (``None`` where one has no size)."""
    joined: list[int] = msgspec.field(default_factory=list)
    """Per rank, the matched calls it took part in."""
    matched: int = 0
    alone: int = 0
    """Collectives found on one rank only."""

    apart: int = 0
    """Collectives whose kernels do not overlap across ranks: not the same call."""
    point_to_point: int = 0
    """Sends and receives not paired: their trace records no peer or rank, or the peer's
    trace was not given (a send pairs with a receive on another rank, not with the other
    ranks' k-th send)."""
    paired: int = 0
    """Send/receive pairs: the k-th send from rank A to rank B with the k-th receive on B
    from A (counted in :attr:`matched` too)."""
    buffered: int = 0
    """Of :attr:`paired`, sends that ended before their receive began (NCCL had room for the
    data at the peer): neither side waited for the other."""
    held: int = 0
    """Of :attr:`buffered`, sends that ran while the peer took an earlier message from the
    same rank, and waited for it: the peer's buffer had no room until then."""
    unexplained: int = 0
    """Kernels left out: a send of theirs ended before its receive began, no receive the peer
    recorded held it, and the peer's recording began after it started (it may have waited
    for room at the peer, freed before the peer's recording began)."""
    realigned: dict[tuple[int, str, str], tuple[int, int]] = msgspec.field(default_factory=dict)
    """The sequences of one group and op lined up calls apart on a rank: (its position, the
    group, the op) to (the shift, the position of the rank it is lined up with), as
    :func:`_index_shifts` found them."""


_SAME_START_US = 0.001
"""Collective kernels that start within a ns of each other (the resolution Kineto writes)
started together: none of them arrived last."""

_MOST_CALLS_APART = 8
"""How many calls apart the sequences of one group and op may be lined up across ranks."""


def _index_shifts(
    profiles: Sequence[RankProfile], offsets: list[float]
) -> dict[tuple[int, str, str], tuple[int, int]]:
    """Per rank position, group and op, the shift to add to a call's index so that it lines
    up with the same call on the first rank that has the sequence: the shift, within
    :data:`_MOST_CALLS_APART` calls, under which the most calls' kernels overlap in time (a
    trace that starts one collective later has every index one short), with the position of
    that first rank. Only shifts that line up strictly more calls than none are kept."""
    sequences: dict[tuple[str, str], dict[int, list[tuple[float, float]]]] = {}
    for position, profile in enumerate(profiles):
        for call in profile.collectives:  # in index order within each group and op
            if call.op in _PAIRED:
                continue
            start = call.start_us + offsets[position]
            per_rank = sequences.setdefault((call.group, call.op), {})
            per_rank.setdefault(position, []).append((start, start + call.dur_us))
    shifts = {}
    for (group, op), per_rank in sequences.items():
        reference_position = min(per_rank)
        reference = per_rank[reference_position]
        for position, mine in per_rank.items():
            if position == reference_position:
                continue
            best, most = 0, _overlapping(reference, mine, 0)
            for shift in range(-_MOST_CALLS_APART, _MOST_CALLS_APART + 1):
                found = _overlapping(reference, mine, shift)
                if found > most:
                    best, most = shift, found
            if best:
                shifts[position, group, op] = (best, reference_position)
    return shifts


def _overlapping(
    reference: list[tuple[float, float]], mine: list[tuple[float, float]], shift: int
) -> int:
    """How many of ``mine`` overlap in time the call ``shift`` places later in
    ``reference`` (``mine[i]`` against ``reference[i + shift]``)."""
    found = 0
    for index, (start, end) in enumerate(mine):
        other = index + shift
        if 0 <= other < len(reference):
            other_start, other_end = reference[other]
            found += start < other_end and other_start < end
    return found


class _Side(NamedTuple):
    """One rank's side of a collective or of a send/receive pair: the rank's position, its
    kernel's start on the common clock and duration, and which kernel it is (a batch's sends
    and receives share one)."""

    position: int
    start: float
    dur: float
    kernel: tuple[int, int]


_HELD_LOOKBACK = 16
"""How many earlier messages back :func:`_held_by` looks for the receive a send waited for."""
_NCCL_BUFFER_BYTES = 4 * 2**20
"""NCCL's default buffer for one peer (``NCCL_BUFFSIZE``): a send is held for room at the
peer only where the messages before it, not yet taken there, fill it."""
_INHERITED_SHARE = 0.1
"""A rank that started its side of a pair within this share of the other side's wait after
its own previous communication kernel ended was held there, not late on its own."""


def _held_by(
    pairs: dict[tuple[str, int, int, int], dict[str, _Side]],
    pair: tuple[str, int, int, int],
    send: _Side,
    sizes: dict[tuple[tuple[str, int, int, int], str], int | None],
) -> _Side | None:
    """For a send that ended before its receive began: the peer's latest earlier receive from
    the same rank, if it began while the send ran and the messages from it to this one, not
    yet taken at the peer when the send began, fill NCCL's buffer there. NCCL buffers a
    message at the peer only where it has room; until then the send's kernel waits."""
    group, sender, receiver, index = pair
    for earlier in range(index - 1, max(index - _HELD_LOOKBACK, 0) - 1, -1):
        recv = pairs.get((group, sender, receiver, earlier), {}).get("recv")
        if recv is None or recv.start >= send.start + send.dur:
            continue
        if recv.start <= send.start:
            return None
        pending = [sizes.get(((group, sender, receiver, k), "send")) for k in range(earlier, index)]
        if None in pending or sum(pending) < _NCCL_BUFFER_BYTES:  # type: ignore[arg-type]
            return None
        return recv
    return None


def _recording_starts(profiles: Sequence[RankProfile], offsets: list[float]) -> list[float]:
    """Per profile, when its recording began on the common clock."""
    return [p.recorded_from_us + offset for p, offset in zip(profiles, offsets, strict=True)]


def _blamed(
    side: _Side,
    latest: _Side,
    kernels: dict[tuple[int, int], tuple[_Side, _Side | None]],
    ends: list[list[tuple[float, int]]],
    unexplained: set[tuple[int, int]],
) -> int | None:
    """The position of the rank that made ``side`` wait for ``latest``: ``latest``'s own,
    unless ``latest`` began just after its rank's previous communication kernel ended
    (within :data:`_INHERITED_SHARE` of the wait) while ``side`` waited, and that kernel
    itself waited for another rank: the blame then passes to that rank, or to none where
    the wait was one the traces do not explain."""
    for _ in range(_HELD_LOOKBACK):
        waited = latest.start - side.start
        before = ends[latest.position]
        index = bisect.bisect_left(before, (latest.start, -1)) - 1
        if index < 0:
            return latest.position
        end, place = before[index]
        if end <= side.start or latest.start - end > _INHERITED_SHARE * waited:
            return latest.position
        if (latest.position, place) in unexplained:
            return None
        entry = kernels.get((latest.position, place))
        if entry is None or entry[1] is None or entry[1].start <= entry[0].start:
            return latest.position  # not matched, or a kernel that waited for no one
        side, latest = entry
    return latest.position


def _waits(profiles: Sequence[RankProfile]) -> _Waits:
    """Wait and transfer per rank, collectives reached last and wait caused per rank."""
    count = len(profiles)
    result = _Waits([0.0] * count, [0.0] * count, [0] * count, [0.0] * count, joined=[0] * count)
    if not profiles or len({p.clock for p in profiles}) > 1:  # none: every trace was refused
        return result
    offsets = _offsets_us(profiles)
    shifts = _index_shifts(profiles, offsets)
    by_key: dict[tuple[str, int, str], list[_Side]] = {}
    # (group, sender, receiver, k) -> per side ("send"/"recv"): (position, start, duration,
    # its kernel: (position, the call's place in the rank's list), shared by a batch's sends
    # and receives)
    pairs: dict[tuple[str, int, int, int], dict[str, _Side]] = {}
    sizes: dict[tuple[tuple[str, int, str], int], int | None] = {}
    pair_sizes: dict[tuple[tuple[str, int, int, int], str], int | None] = {}
    moved: list[int | None] = [0] * count
    point_to_point = 0
    for position, profile in enumerate(profiles):
        for place, call in enumerate(profile.collectives):
            start = call.start_us + offsets[position]
            if call.op in _POINT_TO_POINT or call.op == "send_recv":
                sides = (
                    [(call.op, call.peer, call.index, call.bytes)]
                    if call.op in _POINT_TO_POINT
                    else call.transfers
                )
                if not sides or profile.rank is None:
                    point_to_point += 1  # whom it exchanges with is not recorded
                    continue
                for op, peer, index, size in sides:
                    if peer is None:
                        point_to_point += 1
                        continue
                    rank = profile.rank
                    sender, receiver = (rank, peer) if op == "send" else (peer, rank)
                    pair = (call.group, sender, receiver, index)
                    pairs.setdefault(pair, {})[op] = _Side(
                        position, start, call.dur_us, (position, place)
                    )
                    pair_sizes[pair, op] = size
                continue
            index = call.index + shifts.get((position, call.group, call.op), (0, 0))[0]
            key = (call.group, index, call.op)
            by_key.setdefault(key, []).append(
                _Side(position, start, call.dur_us, (position, place))
            )
            sizes[key, position] = call.bytes
    # Per kernel matched across ranks: itself, and the latest-starting of the other ranks'
    # kernels of its call, which it waited for (None for a send that ended before its
    # receive began: neither waited).
    kernels: dict[tuple[int, int], tuple[_Side, _Side | None]] = {}
    unexplained: set[tuple[int, int]] = set()
    begun = _recording_starts(profiles, offsets)
    matched = alone = apart = 0
    for key, arrivals in by_key.items():
        if len({side.position for side in arrivals}) < 2:
            alone += 1
            continue
        # Every rank's kernel of one call runs until the last has arrived: kernels that do
        # not overlap are different calls (or the clocks disagree).
        if max(side.start for side in arrivals) > min(side.start + side.dur for side in arrivals):
            apart += 1
            continue
        # The latest to arrive, and the latest of the others for that one itself.
        first, second = sorted(arrivals, key=_START, reverse=True)[:2]
        if begun[first.position] > min(side.start for side in arrivals):
            # The others were in the call before the last one's recording began: what that
            # rank did until then is not in its trace, so the call is not judged (their wait
            # is neither its lateness nor transfer that the traces show).
            unexplained.update(side.kernel for side in arrivals)
            continue
        matched += 1
        for side in arrivals:
            kernels[side.kernel] = (side, second if side is first else first)
            size, so_far = sizes[key, side.position], moved[side.position]
            moved[side.position] = None if size is None or so_far is None else so_far + size
    paired = buffered = held = 0
    for pair, sides in pairs.items():
        if len(sides) < 2:
            point_to_point += 1  # its peer's trace was not given, or was cut before it
            continue
        send, recv = sides["send"], sides["recv"]
        if send.start + send.dur <= recv.start:
            # The send ended before the receive began: NCCL held the data at the peer, and
            # neither side waited for the other.
            earlier = _held_by(pairs, pair, send, pair_sizes)
            if earlier is None and begun[recv.position] > send.start:
                # It may have waited for room at the peer, taken before the peer's recording
                # began: its kernel's time is neither wait nor transfer that the traces show.
                unexplained.add(send.kernel)
                continue
            buffered += 1
            kernels.setdefault(recv.kernel, (recv, None))
            if earlier is None:
                kernels.setdefault(send.kernel, (send, None))
            else:
                held += 1
                latest = kernels.get(send.kernel, (send, None))[1]
                if latest is None or earlier.start > latest.start:
                    latest = earlier
                kernels[send.kernel] = (send, latest)
        elif recv.start + recv.dur < send.start:
            apart += 1  # a receive that ended before its send began: the clocks disagree
            continue
        else:
            for side, other in ((send, recv), (recv, send)):
                latest = kernels.get(side.kernel, (side, None))[1]
                if latest is None or other.start > latest.start:
                    latest = other
                kernels[side.kernel] = (side, latest)
        paired += 1
        for op, side in sides.items():
            size, so_far = pair_sizes[pair, op], moved[side.position]
            moved[side.position] = None if size is None or so_far is None else so_far + size
    for kernel in unexplained:
        kernels.pop(kernel, None)
    # Each rank's communication kernels by end, to tell a rank late on its own from one held
    # in its previous kernel.
    ends: list[list[tuple[float, int]]] = [
        sorted((c.start_us + offsets[i] + c.dur_us, place) for place, c in enumerate(p.collectives))
        for i, p in enumerate(profiles)
    ]
    # A kernel of several sends and receives (a batch) waits for the last of its peers.
    for side, latest in kernels.values():
        position = side.position
        result.joined[position] += 1
        waited = 0.0 if latest is None else max(latest.start - side.start, 0.0)
        result.wait[position] += waited
        result.transfer[position] += side.dur - waited
        if latest is not None:
            blamed = _blamed(side, latest, kernels, ends, unexplained)
            if blamed is not None:
                result.caused[blamed] += waited
            if side.start - latest.start > _SAME_START_US:
                result.last[position] += 1
    return msgspec.structs.replace(
        result,
        matched=matched + paired,
        alone=alone,
        apart=apart,
        point_to_point=point_to_point,
        paired=paired,
        buffered=buffered,
        held=held,
        unexplained=len(unexplained),
        realigned=shifts,
        moved=moved,
    )


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


class _Longer(NamedTuple):
    """How one rank's steps compare with others' of the same numbers: longer in each."""

    steps: int
    """The step numbers compared."""
    median_us: float
    """The rank's median step over them."""
    others_median_us: float
    """The others' median step over them."""
    difference_us: float
    """The median of the per-step differences."""


def _longer_in_every_step(
    rank: RankProfile, others: Sequence[RankProfile], fewest: int = 1
) -> _Longer | None:
    """Whether ``rank``'s steps are longer than the others' (their median, step by step) in
    every step number it shares with them, ``fewest`` of them at least, by a median of more
    than 5% of theirs; ``None`` where not. Step by step, not median against median: the
    step boundaries of ranks that meet in collectives jitter against each other (one step
    long on one rank, the next on the other), and a warm-up step among two or three would
    swing a median of each rank's own."""
    theirs: dict[int, list[float]] = {}
    for other in others:
        for step in other.steps:
            theirs.setdefault(step.step, []).append(step.cpu_us)
    pairs = [
        (step.cpu_us, statistics.median(theirs[step.step]))
        for step in rank.steps
        if step.step in theirs
    ]
    if len(pairs) < max(fewest, 1):
        return None
    differences = [own - other for own, other in pairs]
    others_median = statistics.median(other for _, other in pairs)
    difference = statistics.median(differences)
    if min(differences) <= 0 or difference <= _STEP_SPREAD_THRESHOLD * others_median:
        return None
    own_median = statistics.median(own for own, _ in pairs)
    return _Longer(len(pairs), own_median, others_median, difference)


def _step_spreads(profiles: Sequence[RankProfile], labels: list[str]) -> list[StepSpread]:
    by_step: dict[int, list[tuple[float, str]]] = {}
    for profile, label in zip(profiles, labels, strict=True):
        for step in profile.steps:
            by_step.setdefault(step.step, []).append((step.cpu_us, label))
    spreads = []
    for number, durations in sorted(by_step.items()):
        if len(durations) < 2:
            continue
        values = [d for d, _ in durations]
        spreads.append(
            StepSpread(
                step=number,
                ranks=len(durations),
                min_us=min(values),
                median_us=statistics.median(values),
                max_us=max(values),
                slowest=max(durations)[1],
            )
        )
    return spreads


_TABLE = "Across ranks"
CROSS_RANK_RULE_IDS = (
    "rank-straggler",
    "collective-skew",
    "rank-gpu-idle",
    "rank-step-spread",
    "rank-late-start",
)
"""The ids of :func:`cross_rank`'s findings, which ``diagnose --select``/``--ignore`` take as
they take the single-trace rules' ids."""
_POINT_TO_POINT = frozenset({"send", "recv"})
_PAIRED = _POINT_TO_POINT | {"send_recv"}
"""Calls that pair send by receive (a batch's sends and receives each), not by position."""
_STEP_SPREAD_THRESHOLD = 0.05
"""Steps within 5% of each other across ranks count as even."""
_STANDS_OUT = 2.0
"""A straggler has caused at least twice the wait any other rank has caused."""
_UNEVEN_BYTES = 1.25
"""A straggler whose matched collectives move this many times the others' median bytes is
said to move more."""
_WAIT_WARNING_SHARE = 0.05
"""A straggler whose wait costs the others 5% of their step time or more is worth acting on."""


def cross_rank(profiles: Sequence[RankProfile]) -> CrossRank:
    """Compare the ranks of one run: per-rank table, step spread, straggler, skew and idle.

    Args:
        profiles: One :class:`RankProfile` per rank (from :func:`rank_profile`), in any order.

    Returns:
        The :class:`CrossRank` report, ranks in rank order (traces without one last). Its
        findings: ``rank-straggler`` (the rank the others wait for), ``collective-skew`` (time
        in collectives spent waiting, not transferring), ``rank-gpu-idle`` (the rank whose GPU
        idles most, when it idles over 1.25 times the median of the others),
        ``rank-step-spread`` (one rank's steps longer than another's in every step both
        recorded, by a median of over 5%), ``rank-late-start`` (one
        rank's first recorded step began more than two of the longest median step after
        another rank's, on their common clock). None of them when no trace
        records a rank (``distributedInfo.rank``) and no collective is matched across them
        (nothing then says the traces are one run's ranks), nor when two traces claim the same
        rank or the traces record worlds of different sizes (they then say they are not):
        the traces are only tabled.
    """
    profiles = sorted(profiles, key=lambda p: (p.rank is None, p.rank or 0, p.file))
    labels = _labels(profiles)
    notes = []
    if len(profiles) == 1:
        notes.append("one trace: there is no other rank to compare it with")
    clocks = {p.clock for p in profiles}
    if len(clocks) > 1:
        notes.append(
            "the traces keep time differently (some with baseTimeNanoseconds, some without): "
            "collectives cannot be lined up, so wait and transfer are left out (a straggler "
            "can still be told by step times)"
        )
    missing = [label for label, p in zip(labels, profiles, strict=True) if p.rank is None]
    if missing:
        notes.append(f"no rank recorded (distributedInfo.rank) in: {', '.join(missing)}")
    ranks = [p.rank for p in profiles if p.rank is not None]
    if len(set(ranks)) < len(ranks):
        notes.append(_same_rank_note(profiles))
    worlds = sorted({p.world_size for p in profiles if p.world_size})
    if len(worlds) > 1:
        notes.append(
            f"the traces record worlds of different sizes ({', '.join(map(str, worlds))} "
            "ranks): are they from one run?"
        )
    world = worlds[0] if len(worlds) == 1 else 0  # worlds that disagree are noted above
    if world > len(profiles):
        notes.append(
            f"the traces record a world of {world} ranks and {len(profiles)} are given: a "
            "wait counted here may be for a rank not given, and a straggler named is the "
            "latest of the ranks given"
        )
    if any(p.host_collectives_in_groups for p in profiles):
        # One rank's Gloo ranges cannot be told by group: none lines up with its others'
        # either (a rank outside the sub-group records the world's calls alone).
        profiles = [
            msgspec.structs.replace(
                p,
                collectives=(),
                host_collectives=False,
                host_collectives_in_groups=p.host_collectives_in_groups or len(p.collectives),
            )
            if p.host_collectives or p.host_collectives_in_groups
            else p
            for p in profiles
        ]
    on_host = [label for label, p in zip(labels, profiles, strict=True) if p.host_collectives]
    if on_host:
        whose = "the ranks'" if len(on_host) == len(profiles) else f"{', '.join(on_host)}'s"
        notes.append(
            f"{whose} collectives are the Gloo backend's host ranges "
            "(gloo:<op>, from when a worker thread took the call to its end), read where a trace "
            "holds no collective kernel: its all_reduce, all_gather, reduce_scatter, all_to_all "
            "and barrier calls (not the rooted ones, broadcast or gather, in which a rank need "
            "not wait for the last to arrive, nor sends and receives, which do not name their "
            "peer)"
        )
    apart = _recorded_apart(profiles, labels) if len(clocks) == 1 else None
    if apart and len(set(ranks)) == len(ranks):  # else the note on the same rank says it
        notes.append(apart)
    grouped = [
        label for label, p in zip(labels, profiles, strict=True) if p.host_collectives_in_groups
    ]
    if grouped:
        notes.append(
            f"the Gloo collectives of {', '.join(grouped)} are not lined up: the traces "
            "record several process groups, and a Gloo range does not say whose it is (a "
            "rank's k-th all_reduce may be another group's on another rank)"
        )
    waits = _waits(profiles)
    late = _late_start(profiles, waits.unexplained) if len(clocks) == 1 and not apart else None
    matched = waits.matched
    if waits.alone:
        notes.append(
            f"{waits.alone} collective(s) found on one rank only (a trace cut at another point, "
            "or a group whose other ranks were not given)"
        )
    if waits.apart:
        notes.append(
            f"{waits.apart} collective(s) left out: they do not overlap in time across ranks, "
            "so they are not one call (the traces start at different collectives, were "
            "recorded at different times, or the hosts' clocks disagree)"
        )
    for (position, _, op), (shift, reference) in waits.realigned.items():
        calls = f"{abs(shift)} {op} call{'s' if abs(shift) > 1 else ''}"
        notes.append(
            f"{labels[position]}'s trace starts {calls} {'after' if shift > 0 else 'before'} "
            f"{labels[reference]}'s: its {op} calls are lined up that many apart"
        )
    if waits.paired:
        buffered = (
            f"; in {waits.buffered} the send ended before its receive began (the data waited "
            "at the peer, neither rank did)"
            if waits.buffered
            else ""
        )
        if waits.held:
            buffered += (
                f"; {waits.held} of these sends waited instead for the peer to take an "
                "earlier message from it (no room in its buffer until then), counted as "
                "waiting for that peer"
            )
        notes.append(
            f"{waits.paired} send/receive pair(s) lined up by the peer each call records (the "
            f"k-th send from one rank to another with the k-th receive there){buffered}"
        )
    if waits.unexplained:
        notes.append(
            f"{waits.unexplained} kernel(s) left out of wait and transfer: they began before a "
            "peer's recording did (a collective the others entered before the last rank's "
            "recording began, or a send that ended before its receive began and may have "
            "waited for room at the peer then), and what the peer did until then is not in "
            "its trace"
        )
    if waits.point_to_point:
        notes.append(
            f"{waits.point_to_point} send(s) and receive(s) not paired: each pairs with "
            "another rank's opposite call, which the trace does not name, or whose trace was "
            "not given"
        )
    if matched:
        notes.append(
            "wait and transfer compare absolute start times across ranks: they hold as far as "
            "the hosts' clocks agree"
        )

    rows = []
    for position, (profile, label) in enumerate(zip(profiles, labels, strict=True)):
        rows.append(
            RankTiming(
                label=label,
                rank=profile.rank,
                file=profile.file,
                device=profile.device,
                content=profile.content,
                steps=len(profile.steps),
                median_step_us=_median([s.cpu_us for s in profile.steps]),
                gpu_busy_us=profile.gpu_busy_us,
                gpu_idle_us=profile.gpu_idle_us,
                collectives=None
                if profile.content == "GPU not recorded" or profile.host_collectives_in_groups
                else len(profile.collectives),
                collective_us=profile.collective_us,
                wait_us=waits.wait[position] if waits.joined[position] else None,
                transfer_us=waits.transfer[position] if waits.joined[position] else None,
                last_arrivals=waits.last[position],
                matched_bytes=waits.moved[position] if matched and waits.moved else None,
            )
        )
    spreads = _step_spreads(profiles, labels)
    if not spreads and sum(bool(p.steps) for p in profiles) >= 2:
        notes.append(
            "no step number is in two traces: their steps are not compared (are they from one run?)"
        )
    if len(profiles) >= 2 and not ranks and not matched:
        # Nothing says these are one run's ranks: several unrelated traces given together
        # (``summary *.json.gz``) would name one of them the straggler for being another
        # program with longer steps.
        notes.append(
            "no trace records a rank and no collective lines them up: they are shown side by "
            "side, not judged as the ranks of one run (no straggler, idle or spread finding)"
        )
        return CrossRank(rows, spreads, matched, None, [], notes, waits.paired)
    if len(set(ranks)) < len(ranks) or len(worlds) > 1:
        # The traces say they are not one run's ranks (the same trace given twice lines up
        # with itself, and one copy would be "last" at every collective).
        notes.append(
            "the traces are shown side by side, not judged as the ranks of one run (no "
            "straggler, idle or spread finding)"
        )
        return CrossRank(rows, spreads, matched, None, [], notes, waits.paired)
    straggler = _straggler(rows, profiles, waits.caused, matched, spreads, waits.joined)
    calls = (
        "collectives"
        if not waits.paired
        else "sends and receives"
        if waits.paired == matched
        else "collectives, sends and receives"
    )
    # Message sizes compare only where every rank took part in every matched call.
    same_calls = all(joined == matched for joined in waits.joined)
    findings = _findings(rows, profiles, spreads, straggler, calls, same_calls, sum(waits.caused))
    if late is not None:
        findings.append(_late_start_finding(late, labels, waits.unexplained))
    return CrossRank(rows, spreads, matched, straggler, findings, notes, waits.paired)


def _recording_windows(profiles: Sequence[RankProfile]) -> list[tuple[float, float]]:
    """Per profile, when its recording began and ended, µs on the profiles' common clock."""
    return [
        (p.recorded_from_us + offset, p.recorded_to_us + offset)
        for p, offset in zip(profiles, _offsets_us(profiles), strict=True)
    ]


def _same_rank_note(profiles: Sequence[RankProfile]) -> str:
    """The note for traces that claim the same rank: where each such rank's traces were
    recorded one after another (a profiler's cycles, ``schedule(repeat=N)``, each written to
    a file of its own), it says so and how to compare the ranks."""
    by_rank: dict[int, list[tuple[float, float]]] = {}
    for profile, window in zip(profiles, _recording_windows(profiles), strict=True):
        if profile.rank is not None:
            by_rank.setdefault(profile.rank, []).append(window)
    repeated = {rank: same for rank, same in by_rank.items() if len(same) > 1}
    counts = ", ".join(f"rank {rank} ×{len(same)}" for rank, same in sorted(repeated.items()))
    one_after_another = all(
        later[0] > earlier[1]
        for same in repeated.values()
        for earlier, later in pairwise(sorted(same))
    )
    if one_after_another:
        return (
            f"several traces claim the same rank ({counts}), each rank's recorded one "
            "after another: the cycles of a profiler's schedule (repeat), or several runs; "
            "give one cycle's traces at a time to compare its ranks"
        )
    return f"several traces claim the same rank ({counts}): are they from one run?"


def _recorded_apart(profiles: Sequence[RankProfile], labels: list[str]) -> str | None:
    """A note where the ranks' recordings fall into stretches of time that no recording
    spans on their common clock (some ended before the others began, and no rank recorded
    across the gap): not one profiling window of one run (traces of two runs, or of two
    profiler cycles), or hosts whose clocks disagree by more than a recording. No rank is
    then judged to have started late (its lateness would be the time between them). Ranks
    recorded one after another with another rank's recording across them (a pipeline's first
    stage done before its last begins) are one window. ``None`` where there is no such gap."""
    windows = sorted(
        (start, end, label)
        for (start, end), label in zip(_recording_windows(profiles), labels, strict=True)
        if end > start
    )
    if len(windows) < 2:
        return None
    reach, last = windows[0][1], windows[0][2]
    for start, end, label in windows[1:]:
        if start > reach:
            return (
                f"{last}'s recording ended {_us(start - reach)} before {label}'s began, and no "
                "rank recorded in between: they are not one profiling window of one run "
                "(traces of two runs, or of two profiler cycles, or hosts whose clocks "
                "disagree), so no rank is judged to start late, and no collective lines up "
                "across them"
            )
        if end > reach:
            reach, last = end, label
    return None


_LATE_START_STEPS = 2.0
"""A rank whose first recorded step starts more than this many of the longest median step
after another rank's same step did not enter the profiler's window with it."""
_LATE_START_MIN_US = 1000.0


class _LateStart(NamedTuple):
    """Where one rank began its recorded steps far later than another."""

    starts: dict[int, tuple[float, int | None]]
    """Per position (of the ranks with steps), its first recorded step's start on the common
    clock, and that step's number; without steps, per rank, its recording's start, and
    ``None``."""
    early: int
    late: int
    longest: float | None
    """The longest of the ranks' median steps (``None`` without steps)."""

    @property
    def skew(self) -> float:
        return self.starts[self.late][0] - self.starts[self.early][0]


def _late_start(profiles: Sequence[RankProfile], unexplained: int) -> _LateStart | None:
    """The ranks' first recorded steps (whatever their numbers: a profiler started on demand
    numbers each rank's from where it began), if one began more than
    :data:`_LATE_START_STEPS` of the longest median step after another (and at least
    :data:`_LATE_START_MIN_US`); the profiles keep time alike. Without steps (a server's
    recording), the recordings' starts, if one began at least :data:`_LATE_START_MIN_US`
    after another while calls with it waited across that start (``unexplained`` kernels of
    :func:`_waits`)."""
    stepped = [i for i, p in enumerate(profiles) if p.steps]
    if len(stepped) < 2:
        if stepped or not unexplained:
            return None
        begun = _recording_starts(profiles, _offsets_us(profiles))
        first = _LateStart(
            {i: (start, None) for i, start in enumerate(begun)},
            min(range(len(begun)), key=begun.__getitem__),
            max(range(len(begun)), key=begun.__getitem__),
            None,
        )
        return first if first.skew >= _LATE_START_MIN_US else None
    longest = max(statistics.median(s.cpu_us for s in profiles[i].steps) for i in stepped)
    if longest <= 0:
        return None
    offsets = _offsets_us(profiles)
    starts = {}
    for i in stepped:
        first = min(profiles[i].steps, key=lambda s: s.start_us)
        starts[i] = (first.start_us + offsets[i], first.step)
    early = min(starts, key=lambda i: starts[i][0])
    late = max(starts, key=lambda i: starts[i][0])
    found = _LateStart(starts, early, late, longest)
    if found.skew < max(_LATE_START_STEPS * longest, _LATE_START_MIN_US):
        return None
    return found


def _late_start_finding(late: _LateStart, labels: list[str], unexplained: int) -> Finding:
    """``rank-late-start``."""
    name = labels[late.late]
    (_, early_step), (_, late_step) = late.starts[late.early], late.starts[late.late]
    left_out = (
        f" {unexplained} kernel(s) that began before a peer's recording did are left out of "
        "wait and transfer."
        if unexplained
        else ""
    )
    if late.longest is None:
        began = (
            f"{name} began its recording {_us(late.skew)} after {labels[late.early]} (the "
            "traces record no steps)"
        )
    else:
        steps = (
            f"ProfilerStep#{late_step}"
            if early_step == late_step
            else f"its ProfilerStep#{late_step}, {labels[late.early]}'s #{early_step}"
        )
        began = (
            f"{name} began its recorded steps {_us(late.skew)} after {labels[late.early]} "
            f"({steps}), {late.skew / late.longest:,.0f} times the longest median step "
            f"({_us(late.longest)})"
        )
    message = (
        f"{began}: the ranks did not enter the profiler's window together (the "
        "profiler starting slowly on one rank, or one rank behind the others), as far as the "
        f"hosts' clocks agree. Calls with {name} wait until it arrives: waits in the calls "
        f"around its start measure this, not the program.{left_out}"
    )
    return Finding(
        "rank-late-start",
        _TABLE,
        "warning",
        message,
        {
            "first_step": {labels[i]: step for i, (_, step) in late.starts.items()},
            "start_after_earliest_us": {
                labels[i]: round(start - late.starts[late.early][0], 3)
                for i, (start, _) in late.starts.items()
            },
            "longest_median_step_us": late.longest,
            "unexplained_kernels": unexplained,
        },
    )


def _straggler(
    rows: list[RankTiming],
    profiles: Sequence[RankProfile],
    caused: list[float],
    matched: int,
    spreads: list[StepSpread],
    joined: list[int] | None = None,
) -> Straggler | None:
    if len(rows) < 2:
        return None
    if matched:
        position = max(range(len(rows)), key=lambda i: caused[i])
        runner_up = max((c for i, c in enumerate(caused) if i != position), default=0.0)
        if caused[position] <= 0 or caused[position] < _STANDS_OUT * runner_up:
            return None  # every rank is late now and then: jitter, not one late rank
        row = rows[position]
        return Straggler(
            row.label, row.rank, "collectives", row.last_arrivals, matched, caused[position],
            row.median_step_us, joined[position] if joined else matched,
        )  # fmt: skip
    timed = [i for i, row in enumerate(rows) if row.median_step_us is not None]
    if len(timed) < 2 or not spreads:
        return None  # no step that two ranks both recorded: their steps are not one loop's
    # Each rank against the others, step by step: the one longer in every step by the most.
    longer = {
        i: found
        for i in timed
        if (found := _longer_in_every_step(profiles[i], [profiles[j] for j in timed if j != i]))
    }
    if not longer:
        return None
    slowest = rows[max(longer, key=lambda i: longer[i].difference_us)]
    return Straggler(slowest.label, slowest.rank, "steps", 0, 0, 0.0, slowest.median_step_us)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} µs"


def _took_part(straggler: Straggler, calls: str) -> str:
    """``"10 collectives"``, or where other ranks also met without it (a sub-group's calls),
    ``"the 8 sends and receives it took part in"``."""
    if 0 < straggler.joined < straggler.matched:
        return f"the {straggler.joined} {calls} it took part in"
    return f"{straggler.matched} {calls}"


_PIPELINE_WAIT = (
    " A receive waits for its data by design: in a pipeline, each stage waits for the one "
    "before it to compute what it sends, so this wait is the stages' imbalance (the "
    "pipeline's bubble) as much as a rank that came late."
)


def _findings(
    rows: list[RankTiming],
    profiles: Sequence[RankProfile],
    spreads: list[StepSpread],
    straggler: Straggler | None,
    calls: str = "collectives",
    same_calls: bool = True,
    caused_total: float = 0.0,
) -> list[Finding]:
    """The cross-rank findings; ``calls`` names what was matched across ranks
    (``"collectives"``, ``"sends and receives"``...), ``same_calls`` whether every rank took
    part in every one of them (their sizes then compare)."""
    findings = []
    others = [
        r for r in rows if r.collectives and straggler is not None and r.label != straggler.label
    ]
    if straggler is not None and straggler.basis == "collectives":
        other_steps = _median([r.median_step_us for r in others if r.median_step_us is not None])
        others_time = sum((r.median_step_us or 0.0) * r.steps for r in others)
        own_steps = straggler.median_step_us
        own_position = next(i for i, r in enumerate(rows) if r.label == straggler.label)
        other_labels = {r.label for r in others}
        longer = _longer_in_every_step(
            profiles[own_position],
            [profiles[i] for i, r in enumerate(rows) if r.label in other_labels],
        )
        if own_steps is None or not other_steps:
            steps_compared = f"The others wait in their {calls}:"
        elif longer is not None:
            # Against the others' median step by step: with three ranks or more, some other
            # rank may have a longer step than it (one held in a send that waits for a third).
            theirs = "the other rank's" if len(other_labels) == 1 else "the others' median"
            steps_compared = (
                f"Its steps are longer than {theirs} in each of the {longer.steps} steps they "
                f"share (median {_us(longer.median_us)} against {_us(longer.others_median_us)});"
            )
        else:
            if abs(own_steps - other_steps) <= _STEP_SPREAD_THRESHOLD * other_steps:
                compared = f"is about the others' ({_us(other_steps)})"
            elif own_steps > other_steps:
                compared = (
                    f"is longer than the others' ({_us(other_steps)}), but not in every step "
                    "they share"
                )
            else:
                compared = f"is shorter than the others' ({_us(other_steps)})"
            steps_compared = (
                f"Its median step ({_us(own_steps)}) {compared}: the time it loses shows up "
                "as the others' wait, so"
            )
        share = straggler.caused_wait_us / others_time if others_time else None
        own_row = rows[own_position]
        others_bytes = [r.matched_bytes for r in others]
        uneven = ""
        if same_calls and own_row.matched_bytes and others_bytes and all(others_bytes):
            typical_bytes = statistics.median(others_bytes)
            if own_row.matched_bytes >= _UNEVEN_BYTES * typical_bytes:
                uneven = (
                    f" In them it moves {byte_size(own_row.matched_bytes)}, the others "
                    f"{byte_size(int(typical_bytes))}: more work of its own (an uneven split "
                    "of tokens among experts, of data among ranks) can make it late."
                )
        findings.append(
            Finding(
                "rank-straggler",
                _TABLE,
                "warning" if share is None or share >= _WAIT_WARNING_SHARE else "info",
                f"{straggler.label} is the straggler: it reached {straggler.last_arrivals} of "
                f"{_took_part(straggler, calls)} last, and the other ranks waited "
                f"{_us(straggler.caused_wait_us)} in their {calls} for it. {steps_compared} "
                f"look at what it does before its {calls} (host work, data loading, a "
                f"slower GPU).{uneven}{_PIPELINE_WAIT if calls == 'sends and receives' else ''}",
                {
                    "rank": straggler.rank,
                    "last_arrivals": straggler.last_arrivals,
                    "joined": straggler.joined,
                    "matched_collectives": straggler.matched,
                    "caused_wait_us": straggler.caused_wait_us,
                    "median_step_us": straggler.median_step_us,
                    "others_median_step_us": other_steps,
                    "caused_wait_over_others_step_time": share,
                },
            )
        )
    elif straggler is not None:
        findings.append(
            Finding(
                "rank-straggler",
                _TABLE,
                "warning",
                f"{straggler.label} has the longest steps (median "
                f"{_us(straggler.median_step_us)}); no collective could be matched across "
                "ranks to show who waits for whom.",
                {"rank": straggler.rank, "median_step_us": straggler.median_step_us},
            )
        )
    waited = [r for r in rows if r.wait_us]
    if waited:
        total_wait = sum(r.wait_us or 0.0 for r in rows)
        total = total_wait + sum(r.transfer_us or 0.0 for r in rows)
        worst = max(waited, key=lambda r: r.wait_us or 0.0)
        share = total_wait / total if total else 0.0
        if straggler is None or straggler.basis != "collectives":
            late = (
                "spread across the ranks (no rank's lateness costs the others twice the wait "
                "another's does)"
            )
        elif straggler.caused_wait_us >= 0.5 * total_wait:
            late = f"mostly for {straggler.label}"
        else:
            late = f"{_us(straggler.caused_wait_us)} of it for {straggler.label}"
            unattributed = total_wait - caused_total
            if unattributed >= 0.5 * total_wait:
                late += (
                    f", {_us(unattributed)} for ranks that were themselves held in earlier "
                    "communication the traces do not explain"
                )
        findings.append(
            Finding(
                "collective-skew",
                _TABLE,
                "warning" if straggler is not None and share >= 0.25 else "info",
                f"{percent(share)} of the time in matched {calls} is waiting for a late rank, "
                f"not transfer ({_us(total_wait)} of {_us(total)}), {late}; "
                f"{worst.label} waits most ({_us(worst.wait_us)}).",
                {
                    "wait_us": {r.label: r.wait_us for r in rows},
                    "transfer_us": {r.label: r.transfer_us for r in rows},
                    "wait_share": share,
                    "unattributed_wait_us": max(total_wait - caused_total, 0.0),
                },
            )
        )
    idle = [r for r in rows if r.gpu_idle_us is not None]
    # Without steps a rank's idle runs over its own recording, whose length is the
    # profiler's, not the rank's: compared only where every rank measured it over steps.
    if len(idle) >= 2 and all(r.steps for r in idle):
        most = max(idle, key=lambda r: r.gpu_idle_us or 0.0)
        # Against the other ranks only: with two ranks, a median over all would be the mean
        # of this rank and the other, half made of the very idle it is compared with.
        others = [r.gpu_idle_us or 0.0 for r in idle if r is not most]
        median = statistics.median(others)
        if (most.gpu_idle_us or 0.0) > 1.25 * median and (most.gpu_idle_us or 0.0) > 0:
            against = (
                f"{_us(median)} on the other rank"
                if len(others) == 1
                else f"a median of {_us(median)} on the other {len(others)} ranks"
            )
            message = f"{most.label}'s GPU idles {_us(most.gpu_idle_us)}, against {against}"
            # A rank waiting in a collective keeps its GPU "busy" in the collective's kernel:
            # the others' low idle may be their wait for this very rank.
            others_wait = sum(r.wait_us or 0.0 for r in idle if r is not most)
            if others_wait >= 0.5 * ((most.gpu_idle_us or 0.0) - median):
                whose = "the other rank's" if len(others) == 1 else "the other ranks'"
                message += (
                    f"; {_us(others_wait)} of {whose} GPU busy time is waiting in {calls} "
                    "for a late rank (busy, not working)"
                )
            findings.append(
                Finding(
                    "rank-gpu-idle",
                    _TABLE,
                    "info",
                    message + ".",
                    {
                        "gpu_idle_us": {r.label: r.gpu_idle_us for r in idle},
                        "others_wait_us": others_wait,
                    },
                )
            )
    # Step by step, not one step's spread: the step boundaries of ranks that meet in
    # collectives jitter against each other, one step long on one rank, the next on another.
    timed = [i for i, row in enumerate(rows) if row.median_step_us is not None]
    if spreads and len(timed) >= 2 and (straggler is None or straggler.basis == "collectives"):
        # Against the rank with the shortest median step, the rank longer in every step by
        # the most (not only the longest median: one short step would hide another rank's
        # steps, longer in each). Ranks that meet in collectives are read over two steps at
        # least: one is where their boundaries fell.
        fewest = 2 if straggler is not None or any(r.wait_us is not None for r in rows) else 1
        fast = min(timed, key=lambda i: rows[i].median_step_us or 0.0)
        pairs = {
            i: found
            for i in timed
            if i != fast and (found := _longer_in_every_step(profiles[i], [profiles[fast]], fewest))
        }
        if pairs:
            slow = max(pairs, key=lambda i: pairs[i].difference_us)
            longer = pairs[slow]
            steps = (
                "the one step both recorded"
                if longer.steps == 1
                else f"each of the {longer.steps} steps both recorded"
            )
            findings.append(
                Finding(
                    "rank-step-spread",
                    _TABLE,
                    "info",
                    f"step time differs across ranks: {rows[slow].label}'s steps are longer "
                    f"than {rows[fast].label}'s in {steps}, by a median of "
                    f"{_us(longer.difference_us)} "
                    f"({percent(longer.difference_us / longer.others_median_us)}; their median "
                    f"steps over them {_us(longer.median_us)} and "
                    f"{_us(longer.others_median_us)}).",
                    {
                        "longer": rows[slow].label,
                        "shorter": rows[fast].label,
                        "steps_compared": longer.steps,
                        "median_difference_us": longer.difference_us,
                        "median_step_us": {rows[i].label: rows[i].median_step_us for i in timed},
                        "steps": [
                            dict(msgspec.structs.asdict(s), spread=s.spread) for s in spreads
                        ],
                    },
                )
            )
    return findings
