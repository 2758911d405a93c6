"""Command line: ``python -m profiling_utils COMMAND ...`` (also installed as ``profiling-utils``).

Commands:

``summary TRACE [--json] [--top N]``
    What a trace holds and what the measurements say: device and versions, lanes, every step
    (CPU time, GPU busy time and idle fraction, lane offset, dead window, launch delays, GPU
    gaps), the top kernels with their launch API, planning calls, memory copies, the
    collectives (NCCL, RCCL) and how much of them compute hides, torch.compile regions and the
    profiler's own overhead. Readable text by default; with ``--json``, one
    JSON object with these keys:

    - ``file``: the trace path as given.
    - ``spans``: number of complete events; ``duration_us``: end of the last one (µs from the
      first; not a step's whose end was not recorded); ``has_gpu``: whether there is any GPU
      work; ``gpu_work``: the same in words, and why there is none (no GPU, host activities
      only, an accelerator whose own events are not analysed, nothing but the profiler's own
      events); ``host_ops_recorded``: whether the host side holds any op, label or Python
      frame (not so in a recording without ``ProfilerActivity.CPU``, whose host side is the
      runtime calls alone).
    - ``devices``: ``[{id, name, vendor, arch, compute_units, total_memory_bytes,
      compute_capability, shared_memory_per_sm_bytes, registers_per_sm, threads_per_sm,
      description}]``;
      ``gpu_numbers_may_be_agent_ids`` (on ROCm, whether the GPU numbers may be HSA agent
      ids rather than device indices, the CPU sockets numbered first; see
      :attr:`profiling_utils.trace.Trace.gpu_numbers_may_be_agent_ids`);
      ``cuda_runtime_version``, ``cuda_driver_version`` (``"13.0"``), ``cupti_version``,
      ``hip_runtime_version``, ``hip_driver_version`` (ROCm's, ``"7.1.25424"``),
      ``base_time_ns`` (``baseTimeNanoseconds``, which torch writes since 2.4: ``null``
      in older traces, whose times are absolute µs).
    - ``lanes``: ``[{label, kind, pid, tid, device, stream, spans, activities, busy_us}]``;
      ``activities``, on a GPU lane, how many of its ``spans`` are GPU work (kernels, copies,
      memsets: the rest are labels projected onto it, ``gpu_user_annotation``, and the
      synchronisation events of ``cuda_sync``), ``null`` on other lanes; ``busy_us`` is
      :func:`profiling_utils.measures.lane_busy_us` (on a GPU lane, the union of its kernels,
      copies and memsets; on a CPU thread, of its operators, runtime calls and Gloo
      collectives (``gloo:*``); never labels such as ``ProfilerStep#N``).
    - ``gpus_with_streams``: ``[{device, streams, busy_us, streams_busy_us, concurrent_us}]``,
      for each GPU whose work ran on two streams or more: ``busy_us`` the union of its
      streams' work (the time the GPU ran anything), ``streams_busy_us`` the sum of their
      ``busy_us``, ``concurrent_us`` the difference: time counted on two streams at once (a
      copy on its own stream beside a kernel, a collective beside compute).
    - ``steps``: ``[{step, cpu_us, gpu_busy_us, gpu_window_us, gpu_idle_us,
      gpu_idle_fraction, gpu_activities, lane_offset_us, dead_window_us,
      launch_delay_median_us, launch_delay_max_us, gpu_gap_count, gpu_gap_total_us,
      gpu_gap_max_us, end_recorded, kernel_launches_without_gpu_record, kernel_launches,
      read_by_rules, gpu_busy_by_gpu_us}]``
      (:class:`profiling_utils.measures.StepTime` for the
      GPU window and idle time: a step without GPU work of its own has a GPU window of its
      CPU window, in which other steps' work may run); values that need the step's own GPU
      work (the lane offset, launch delays, the longest gap) or a label around it are ``null``
      without them, and so are ``gpu_idle_us`` and ``gpu_idle_fraction`` in a trace
      without GPU work; ``lane_offset_us`` runs from the step's first launch call to that
      work's start on the GPU, ``dead_window_us`` from the first label directly inside the
      step (not a data loader's) to its first ``aten::`` op, or to the data loader's fetch
      that holds it, less the time in labels inside it that closed before then
      (:attr:`profiling_utils.measures.DeadWindow.dead_us`);
      ``gpu_busy_us`` is the union of the step's own work wherever it ran
      (a GPU running behind the CPU runs it past the window, so it may exceed
      ``gpu_window_us``), on all its GPUs together, and ``gpu_busy_by_gpu_us`` the union on
      each, ``{"<device>": µs}`` (0.0 for a GPU without work in the step), in a trace of one
      process driving several GPUs (model parallelism), else ``null``; the gaps
      (:func:`profiling_utils.measures.gpu_gaps`) are the stretches in which no stream of a
      GPU ran between the step's first activity's end and its last one's start on it (each
      GPU's own, where the step's work ran on several), each counted in every step whose
      work lies on both sides of it;
      ``end_recorded`` is false for a step that ends after the profiler's recording window
      (:meth:`profiling_utils.trace.Trace.end_recorded`);
      ``kernel_launches_without_gpu_record`` counts the step's kernel launch calls with no GPU
      activity in the trace (0 in a whole trace; ``kernel_launches``, the step's kernel launch
      calls, is given with it, else ``null``; see
      :meth:`~profiling_utils.trace.Trace.kernel_launches_without_gpu_record`);
      ``read_by_rules`` whether diagnose's rules take the step as a sample
      (:attr:`profiling_utils.rules.facts.Facts.steps`): not a step whose end was not
      recorded, nor one most of whose kernels' GPU records are missing, nor one with no
      span inside it on its thread and no GPU work while others have some.
    - ``top_kernels``: the ``--top`` kernel names by total time, ``[{name, count, total_us,
      min_us, median_us, mean_us, max_us, spread, outlier_steps, communication, apis,
      planning_calls, footprint}]``; ``spread`` is ``(max_us - min_us) / median_us``;
      ``outlier_steps`` the steps holding an instance outside the Tukey fences of the
      instances in its role (the k-th launch of the name in each step), by more than
      rounding (:attr:`profiling_utils.measures.KernelStats.outlier_steps`);
      ``communication`` marks a collective (NCCL, RCCL) kernel,
      whose time includes waiting for the other ranks; ``apis`` and ``planning_calls`` map a
      call name to a count, ``footprint`` is the first instance's ``{registers_per_thread,
      shared_memory_bytes, grid, block, blocks_per_sm, warps_per_sm, occupancy_pct}`` (on
      ROCm, grid and block only, from the launch call, the grid in blocks; from the first
      instance whose launch is in the trace when the first's is not); ``occupancy_pct`` is
      Kineto's ``est. achieved occupancy %``, computed with CUDA's occupancy calculator at
      the default shared-memory limit, not measured: 0 for a kernel using over 48 KiB of
      shared memory per block, however many of its blocks ran at once.
    - ``compiler_kernels``: ``{count, gpu_us}`` of the kernels torch.compile launched while
      compiling (its autotuning's candidates and the cache flushes between them, inside its
      compile labels), which ``top_kernels``, ``launch_apis`` and ``planning_calls`` leave
      out; ``null`` when there are none.
    - ``top_cpu_ops``: the ``--top`` CPU operators by self time, ``[{name, calls, self_us,
      total_us}]``, as ``key_averages()`` counts them: self time is a call's duration less its
      direct children's on the same thread, never negative; a call whose only child is a call
      of the same name counts once.
    - ``launch_apis``: kernels per launch API (``"(launch not in the trace)"`` when the launch
      is not in the trace); ``planning_calls``: planning calls per name.
    - ``memory_peaks``: per device that ``profile_memory=True`` recorded allocations on
      (GPUs, then the CPU), ``{device, events, peak_allocated_bytes, peak_at_us, peak_step,
      peak_reserved_bytes, end_allocated_bytes, from_recording_start}``: the most bytes
      allocated to tensors at once, when and in which step, the most the caching allocator
      reserved (``null`` on the CPU, and wherever ``from_recording_start``), and what was
      still allocated after the last event
      (:func:`profiling_utils.measures.memory_peaks`); empty without memory events. With
      ``from_recording_start`` (torch ~1.8-1.9 wrote each allocation's size, no totals) the
      two byte counts are the sizes added up from the recording's start.
    - ``memory``: per kind (``DtoD``, ``HtoD``, ``memset``...): ``{kind, count, total_bytes,
      bandwidth_gb_s, ops, host_memory}``; ``host_memory`` counts a copy to or from
      the host by the host memory its name gives (``Pinned``, ``Pageable``; ``Host`` on
      ROCm, which does not say which); ``total_bytes`` adds up the sizes the trace records
      on the copies or their calls (``null`` when none records one); ``ops`` maps the
      issuing op (``"(no op)"`` for a call outside any op, ``"(replayed by a graph
      launch)"`` for a copy a CUDA/HIP graph replays, ``"(launch not in the trace)"``) to a
      count; ``bandwidth_gb_s`` is the bytes of the copies that record a size over their
      time together (not a median of each copy's rate: a kind mixes large copies with small
      ones, whose rate their fixed cost sets), bytes copied (or set) per second, each byte
      once, GB = 10^9 bytes; ``null`` when no copy records a size.
    - ``communication``: the collective kernels (NCCL, RCCL), ``null`` when the trace has
      none: ``{kernels, communication_us, compute_us, overlapped_us, exposed_us,
      overlap_fraction, by_op}``. Times are on the GPU, µs: ``communication_us`` while at
      least one collective kernel runs (union), ``overlapped_us`` the part of it with a
      compute kernel running on the same GPU, ``exposed_us`` the rest
      (:func:`profiling_utils.comm.comm_overlap`). ``by_op``: per operation (``all_reduce``,
      ``all_gather``...) and message size, ``[{op, message_bytes, count, total_us,
      total_bytes, median_algbw_gb_s}]`` by total time; ``message_bytes`` is one message's
      size (``null`` where the trace records none), ``total_bytes`` adds up the sizes the
      trace records (``null`` when none does), and the algorithm bandwidth is bytes / kernel
      time, GB = 10^9 bytes: a lower bound, as a collective's kernel also waits for the
      slowest rank.
    - ``host_collectives``: collectives the CPU runs itself (Gloo's ``gloo:all_reduce``...
      labels), ``[{name, count, total_us, threads}]`` by total time (summed over the threads
      that ran them, which may run at once); ``[]`` when there are none.
    - ``compile``: ``{regions, region_ids, cache_lookups, cache_lookup_us, aot_wrappers,
      aot_functions, graph_calls, graph_hashes, cuda_graph_launches}`` (counts, ids and
      hashes; ``aot_functions`` counts AOTAutograd's ``CompiledFunction`` and
      ``CompiledFunctionBackward`` calls).
    - ``left_out_steps``: the names of ``ProfilerStep#N`` annotations that are not steps: a
      number seen before, or one inside another step
      (:attr:`profiling_utils.trace.Trace.left_out_steps`); ``[]`` normally.
    - ``other_step_lanes``: the labels of CPU threads whose ``ProfilerStep#N`` annotations
      are left out (a file that merges several processes: the steps are those of the thread
      holding the most, :attr:`profiling_utils.trace.Trace.steps`); ``[]`` normally.
    - ``unlaunched_gpu_work``: ``{count, busy_us}``, the GPU activities whose launch call is
      not in the trace (no step counts them) and the time they ran (streams' overlaps
      counted once).
    - ``negative_durations``: how many events the file gives a negative ``dur``, read as
      0 µs (Kineto before torch 1.13 wrote one where it recorded no end); 0 normally.
    - ``gpu_work_before_launch``: ``{count, max_us}``, the GPU activities that start before
      the call that launched them, and by how much at most (``null`` when none does): no
      kernel can, so the trace's CPU and GPU clocks disagree by at least that much, and its
      launch delays and lane offsets are off by as much
      (:func:`profiling_utils.measures.gpu_work_before_launch`).
    - ``unrecorded_kernel_launches``: ``{count, kernel_launches, counter_ranges}``, the
      trace's kernel launch calls with no GPU activity in it (a trace cut short, or records
      the profiler dropped: its GPU figures are then lower bounds) and all its kernel launch
      calls (``kernel_launches`` is ``null`` when none lacks its record, ``count`` then 0);
      ``counter_ranges`` counts the ranges CUPTI's range profiler recorded instead of kernel
      activities (:attr:`profiling_utils.trace.Trace.counter_ranges`); the steps' rows count
      theirs.
    - ``overhead``: ``[{name, count, total_us}]`` for the profiler's overhead lane.
    - ``roofline``: ``{reason, gpu_us, counted_gpu_us, entries, groups}``: the GPU time of the
      operator calls with recorded shapes, the part of it with a count (FLOPs or bytes), and
      the ``--top`` calls by GPU time (those with a count first), each
      ``{name, start_us, input_dims, input_types, kind, flops, bytes, intensity, gpu_us,
      gpu_activities, tflops, gb_s, device, ridge, bound, peak, peak_tflops, peak_gb_s,
      peak_share, note}``, from the
      shapes a trace records with ``record_shapes=True`` (:mod:`profiling_utils.roofline`):
      ``kind`` is ``gemm``, ``convolution``, ``attention``, ``elementwise`` or ``other``;
      ``intensity`` and ``ridge`` are FLOP/byte; ``bound`` is ``compute``, ``memory`` or
      ``unknown`` (a device not in the datasheet table), ``peak`` the datasheet figure it is
      held to, in words (its figure and source), ``peak_tflops`` and ``peak_gb_s`` the
      datasheet's compute peak for the op's dtype and its memory bandwidth (``null`` where
      the datasheet has none), and ``peak_share`` the achieved fraction of the one ``bound``
      names; ``groups``: the ``--top``
      operators by GPU time with one set of recorded shapes each, their calls together,
      ``{name, input_dims, input_types, kind, calls, flops, bytes, gpu_us, tflops, gb_s,
      device, bound, peak, peak_tflops, peak_gb_s, peak_share, above_peak, note}``
      (``flops`` and ``bytes`` one
      call's, the rates over all the calls' GPU time; ``above_peak``, for a share above 1,
      ``"l2-cache"`` where a memory-bound op's bytes per call fit in the GPU's L2 cache,
      else ``"suspect"``, and ``null`` within the peak); ``reason`` says why ``entries``
      is empty (no shapes recorded, no GPU work), else ``null``.

A trace that cannot be read prints one line on stderr, ``error: FILE: what is wrong``, and
exits with status 2 (the status argparse uses for bad usage).

``diagnose TRACE [--json] [--select IDS] [--ignore IDS]`` applies the trace reading cheatsheet
(:mod:`profiling_utils.rules`); ``compare BASELINE TRACE [--json]`` puts two traces side by side
(:mod:`profiling_utils.compare`). Their JSON output is described in their ``--help``.

Given several traces, or a directory of per-rank traces, ``summary`` and ``diagnose`` load each
in its own process, as many at once as there are cores, and add the comparison of the ranks
(:mod:`profiling_utils.ranks`); ``compare`` takes two directories and pairs their traces
rank with rank (:func:`profiling_utils.ranks.pair_by_rank`). A file that cannot be read
gives its one line on stderr, the others are still reported, and the exit status is 2. The
JSON of several traces is described in ``MULTI_RANK_JSON_HELP``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from . import comm, measures
from .errors import TraceError
from .loading import default_max_bytes
from .ranks import (
    CROSS_RANK_RULE_IDS,
    CrossRank,
    Outcome,
    RankProfile,
    analyse_files,
    cross_rank,
    names_trace_events,
    pair_by_rank,
    rank_profile,
    trace_files,
)
from .rules import Facts, diagnose, diagnosis_dict, format_diagnosis, rule_ids, select_rules
from .rules.diagnose import NO_HOST_OPS, rule_id_list
from .rules.facts import GPU_RECORDS_MISSING_SHARE
from .tables import byte_size, cut, distinct_cuts, percent, text_table
from .trace import HOST_COLLECTIVE_PREFIX, Lane, Span, Trace

__all__ = ["main", "build_parser", "summarize", "format_summary", "run_diagnose", "run_compare"]

EXIT_BAD_TRACE = 2


# -- several traces --------------------------------------------------------------------------


def _is_multi(paths: Sequence[str]) -> bool:
    """Several files, or a directory: the per-rank output (even for a directory of one)."""
    return len(paths) > 1 or any(Path(path).is_dir() for path in paths)


def _analyse(
    args: argparse.Namespace, paths: Sequence[str], task: Callable[..., Any]
) -> list[Outcome]:
    """Each trace named by ``paths`` loaded and handed to ``task`` in a worker process (one
    trace alone in this process, kept in ``args.keep_traces`` when :func:`main` was given a
    list for them)."""
    files = trace_files(paths)
    keep = args.keep_traces if len(files) == 1 else None
    outcomes = analyse_files(
        files, task, max_bytes=args.max_trace_bytes, workers=args.jobs, keep=keep
    )
    # A directory of a run's traces may hold other JSON beside them (an execution trace, a
    # snapshot): such a file is left out with a note, where the directory holds a trace.
    in_directories = {str(f) for path in paths if Path(path).is_dir() for f in trace_files([path])}
    other = [o for o in outcomes if o.not_a_trace and o.files[0] in in_directories]
    args.skipped = []
    if other and len(other) < len(outcomes):
        left_out = _leave_out(args, other)
        outcomes = [o for o in outcomes if o.files[0] not in left_out]
    return outcomes


def _leave_out(args: argparse.Namespace, other: list[Outcome]) -> set[str]:
    """Note on stderr, and in ``args.skipped``, each file of ``other`` (JSON of a directory
    that is no trace) as left out; their names."""
    for outcome in other:
        print(f"note: {outcome.error} (left out: not a trace)", file=sys.stderr)
        args.skipped.append({"file": outcome.files[0], "reason": outcome.error})
    return {outcome.files[0] for outcome in other}


def _nothing(*traces: Trace) -> None:
    """A task that only loads: whether a file reads as a trace (module level, for spawn)."""


def _run_traces(args: argparse.Namespace, path: str) -> list[Path]:
    """The trace files ``path`` names, for ``compare``, which pairs them before loading: a
    directory's JSON that is no trace (an execution trace beside the Kineto one) is left out
    with a note, where the directory holds a trace. Only a file whose head does not name
    ``traceEvents`` (:func:`~profiling_utils.ranks.names_trace_events`) is loaded to tell."""
    files = trace_files([path])
    if not Path(path).is_dir():
        return files
    suspects = [file for file in files if not names_trace_events(file)]
    if not suspects:
        return files
    outcomes = analyse_files(suspects, _nothing, max_bytes=args.max_trace_bytes, workers=args.jobs)
    other = [outcome for outcome in outcomes if outcome.not_a_trace]
    if not other or len(other) == len(files):  # nothing but them: the errors will say so
        return files
    left_out = _leave_out(args, other)
    return [file for file in files if str(file) not in left_out]


def _report_errors(outcomes: list[Outcome]) -> int:
    """Print each unreadable file's line on stderr; the exit status (2 if there was one)."""
    for outcome in outcomes:
        if outcome.error is not None:
            for line in (outcome.error, *outcome.more_errors):
                print(f"error: {line}", file=sys.stderr)
    return EXIT_BAD_TRACE if any(o.error is not None for o in outcomes) else 0


def _errors(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """One entry per file that could not be read, with the files of its task."""
    return [
        {"files": list(o.files), "error": line}
        for o in outcomes
        if o.error is not None
        for line in (o.error, *o.more_errors)
    ]


def format_cross_rank(
    report: CrossRank, title: str = "Across ranks", *, rules_ran: bool = True
) -> str:
    """The readable text of the cross-rank analysis: the per-rank table, notes and findings
    (``rules_ran`` false where ``--select`` or ``--ignore`` left no cross-rank rule to run)."""
    count = len(report.ranks)
    out = [f"{title} ({count} trace{'' if count == 1 else 's'})"]
    rows = [
        [
            r.label,
            r.content,
            str(r.steps),
            _us(r.median_step_us, 0),
            _us(r.gpu_busy_us if r.content == "GPU" else None, 0),
            _us(r.gpu_idle_us, 0),
            "-" if r.collectives is None else str(r.collectives),
            _us(r.collective_us if r.collectives else None, 0),
            _us(r.wait_us, 0),
            _us(r.transfer_us, 0),
            str(r.last_arrivals) if r.wait_us is not None else "-",
        ]
        for r in report.ranks
    ]
    headers = [
        "trace", "content", "steps", "median step", "GPU busy", "GPU idle",
        "collectives", "in collectives", "wait", "transfer", "last",
    ]  # fmt: skip
    out += [
        "  (µs; median step: of its CPU step times; GPU busy: over the whole trace; GPU idle:",
        "  in its steps' GPU windows, or without steps from its first GPU activity to its last;",
        "  wait: for a late rank to arrive, and transfer: the rest, both of the matched",
        "  collectives (and send/receive pairs) only; last: those it reached last)",
    ]
    out.append(text_table(headers, rows))
    if report.steps:
        out += ["", "  Steps across ranks (µs)"]
        out.append(
            text_table(
                ["step", "ranks", "min", "median", "max", "spread", "longest on"],
                [
                    [
                        str(s.step),
                        str(s.ranks),
                        _us(s.min_us, 0),
                        _us(s.median_us, 0),
                        _us(s.max_us, 0),
                        f"{s.spread:.1%}",
                        s.slowest if s.max_us > s.min_us else "-",
                    ]  # fmt: skip
                    for s in report.steps
                ],
                indent="    ",
            )
        )
    for note in report.notes:
        out.append(f"  note: {note}")
    out.append("")
    for finding in report.findings:
        out.append(f"  [{finding.severity}] {finding.rule}: {finding.message}")
    if not rules_ran:
        out.append("  No cross-rank rule ran: --select and --ignore left none.")
    elif not report.findings:
        out.append("  No cross-rank finding.")
    return "\n".join(out)


_LINE_WIDTH = 88
"""The header's sentences go on lines of their own beyond this width."""

_CROSS_RANK_KEYS = """\
  {ranks, steps, matched_collectives, paired_sends, straggler, findings, notes}
    ranks        [{label, rank, file, device, content, steps, median_step_us, gpu_busy_us,
                 gpu_idle_us, collectives, collective_us, wait_us, transfer_us,
                 last_arrivals, matched_bytes}] in rank order. label is "rank N", or the
                 file name when the trace records no distributedInfo.rank ("rank N (file)"
                 where two traces record one rank); device describes its GPU (name, SMs or
                 CUs, compute capability or gfx architecture); content is
                 "GPU", "accelerator not read" (an accelerator whose own events are not
                 analysed), "GPU not recorded" (launch or copy calls, or GPU lanes, but no
                 kernel, copy or memset in the trace), "CPU only", "profiler only" (the
                 profiler's own events alone) or "no events";
                 gpu_busy_us is the time the GPU ran kernels, copies or
                 memsets (a collective's kernel counts while it waits), gpu_idle_us the rest
                 of the steps' GPU windows (in a trace without steps, of the stretch from
                 its first GPU activity to its last); collectives counts the rank's collectives
                 (null where not known: its GPU work was not recorded, or its Gloo ranges
                 cannot be told by process group); collective_us is their kernel time
                 (where a trace holds no collective kernel, the Gloo backend's host
                 ranges, gloo:<op>, and a note says so),
                 the matched collectives' part of it split into wait_us (waiting for the
                 last rank to arrive: skew) and transfer_us (the rest), both null when the
                 rank took part in no matched collective (their sum is less than
                 collective_us when some collectives are left out, see notes);
                 last_arrivals counts the matched collectives this rank reached last;
                 matched_bytes adds up their message sizes (null where one is not
                 recorded): ranks of an uneven all_to_all move different amounts.
    steps        [{step, ranks, min_us, median_us, max_us, slowest, spread}], CPU step time
                 of each step number that two traces or more have; spread = (max - min) /
                 median; slowest is the label of the longest.
    matched_collectives  how many collectives were found on two ranks or more with the
                 same process group, position in that group and op, whose kernels overlap
                 in time; with the send/receive pairs of paired_sends.
    paired_sends how many sends were paired with their receive on the peer rank, by the
                 peer each records (Dst Rank, Src Rank): the k-th send from rank A to rank
                 B with the k-th receive on B from A. A send that ended before its receive
                 began (the data waited at the peer) counts no wait on either side.
    straggler    {label, rank, basis, last_arrivals, matched, caused_wait_us,
                 median_step_us, joined}, the rank the others wait for, or null;
                 matched counts the calls matched across the ranks (matched_collectives),
                 joined those it took part in. basis
                 "collectives": it reaches collectives last and caused_wait_us is the
                 others' wait for it; "steps": nothing matched, and its steps are longer
                 than the others' in every step they share, by a median of over 5%.
    findings     [{rule, table, severity, message, evidence}]: rank-straggler,
                 collective-skew, rank-gpu-idle, rank-step-spread, rank-late-start
                 (table "Across ranks").
    notes        caveats: clocks, ranks missing or repeated, collectives left out, sends
                 and receives paired, or not (no peer recorded, or its trace not given).
  Ranks are lined up on absolute time (baseTimeNanoseconds + ts; ts alone in traces older
  than torch 2.4), so the numbers hold as far as the hosts' clocks agree."""

MULTI_RANK_JSON_HELP = f"""\
Several traces (several files, or a directory of per-rank traces): each loads in its own
process, as many at once as there are cores (--jobs). JSON (--json): one object
  traces      the single-trace object above, for each trace that could be read, in file order
  errors      [{{files, error}}] for each file that could not be read; error is "FILE: what is
              wrong", the line printed on stderr
  skipped     [{{file, reason}}] for each file of a directory that is JSON but no trace (an
              execution trace, another tool's file), left out beside the directory's traces
              with a note on stderr; a file named as such is read, and an error if no trace
  cross_rank{_CROSS_RANK_KEYS}
A file named twice, or named and in a directory named, is read once.
Exit status: 0 when every trace was read; 2 when one could not be (the others are still
reported), with one line on stderr per unreadable file."""

COMPARE_MULTI_RANK_JSON_HELP = f"""\
Two directories of per-rank traces: their traces are paired by the rank each records
(distributedInfo.rank), or in file-name order where a trace records none (rank-0 with
rank-0), each pair compared in its own process. JSON (--json): one object
  paired_by   "recorded rank" or "file-name order"
  pairs       the object above for each pair whose traces could both be read
  errors      [{{files, error}}] for each file that could not be read, files naming its pair
  skipped     [{{file, reason}}] for each file of a directory that is JSON but no trace, left
              out (before the pairing) with a note on stderr
  baseline_cross_rank  the comparison of BASELINE's ranks, with the keys below
  trace_cross_rank{_CROSS_RANK_KEYS}
Exit status: 2 as well when the directories hold different numbers of traces."""


# -- summary ----------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _steps(trace: Trace) -> list[dict[str, Any]]:
    offsets = {o.step: o.offset_us for o in measures.lane_offset(trace)}
    dead = {}
    for window in measures.dead_windows(trace):
        dead.setdefault(window.step, window.dead_us)
    delays: dict[int, list[float]] = {}
    for delay in measures.launch_delays(trace):
        if delay.step is not None:
            delays.setdefault(delay.step, []).append(delay.delay_us)
    gaps: dict[int, list[float]] = {}
    for gap in measures.gpu_gaps(trace):
        gaps.setdefault(gap.step, []).append(gap.gap_us)
    recorded = {step.number: trace.end_recorded(step) for step in trace.steps}
    unrecorded = {
        step.number: trace.kernel_launches_without_gpu_record(step) for step in trace.steps
    }
    read = {step.number for step in Facts(trace).steps}
    devices = measures.gpu_devices(trace)
    by_gpu = {
        step.number: {
            str(device): busy
            for device, busy in measures.busy_by_device(step.gpu_work, devices).items()
        }
        for step in (trace.steps if len(devices) > 1 else ())
    }
    rows = []
    for timing in measures.step_times(trace):
        row = timing.to_dict()
        row["gpu_busy_by_gpu_us"] = by_gpu.get(timing.step)
        row["end_recorded"] = recorded[timing.step]
        missing, launches = unrecorded[timing.step]
        row["kernel_launches"] = launches if missing else None
        row["kernel_launches_without_gpu_record"] = missing
        row["read_by_rules"] = timing.step in read
        step_delays, step_gaps = delays.get(timing.step, []), gaps.get(timing.step, [])
        row.update(
            lane_offset_us=offsets.get(timing.step),
            dead_window_us=dead.get(timing.step),
            launch_delay_median_us=_median(step_delays),
            launch_delay_max_us=max(step_delays, default=None),
            gpu_gap_count=len(step_gaps),
            gpu_gap_total_us=sum(step_gaps),
            gpu_gap_max_us=max(step_gaps, default=None),
        )
        rows.append(row)
    return rows


def _kernels(
    trace: Trace, kernels: list[Span], top: int
) -> tuple[list[dict[str, Any]], Counter, Counter]:
    # What measures.kernel_launches gives each kernel, less what the table does not report:
    # the op, the step, and the footprint (decoded from all of a kernel's args) of every
    # kernel but the first of each reported name.
    launch_of_call = {launch.call.id: launch for launch in measures.launches(trace)}
    by_name: dict[str, list[tuple[Span, Span | None, tuple[Span, ...]]]] = {}
    apis: Counter = Counter()
    planning: Counter = Counter()
    for kernel in kernels:
        call = trace.launch_of(kernel)
        launch = None if call is None else launch_of_call.get(call.id)
        planning_calls = launch.planning if launch is not None else ()
        by_name.setdefault(kernel.name, []).append((kernel, call, planning_calls))
        apis[measures.NO_LAUNCH if call is None else call.name] += 1
        planning.update(c.name for c in planning_calls)
    rows = []
    for stats in measures.kernel_stats(trace, kernels)[:top]:
        named = by_name[stats.name]
        row = stats.to_dict()
        row["apis"] = dict(
            Counter(measures.NO_LAUNCH if c is None else c.name for _, c, _ in named).most_common()
        )
        row["planning_calls"] = dict(
            Counter(c.name for _, _, calls in named for c in calls).most_common()
        )
        row["footprint"] = _footprint(named).to_dict()
        rows.append(row)
    return rows, apis, planning


def _footprint(instances: list[tuple[Span, Span | None, Any]]) -> measures.KernelFootprint:
    """The first instance's footprint; where it lacks grid and block (ROCm writes them on the
    launch call only) and its launch is not in the trace, as in a trace that starts mid-run,
    the first instance's whose launch is."""
    kernel, call, _ = instances[0]
    footprint = measures.kernel_footprint(kernel, call)
    if footprint.grid is None and footprint.block is None and call is None:
        launched = next(((k, c) for k, c, _ in instances if c is not None), None)
        if launched is not None:
            return measures.kernel_footprint(*launched)
    return footprint


def _issuer(copy: measures.MemoryCopy) -> str:
    if copy.op is not None:
        return copy.op.name
    if copy.api in measures.GRAPH_LAUNCH_CALLS:
        return measures.IN_GRAPH_REPLAYS
    return measures.NO_OP if copy.api is not None else measures.NO_LAUNCH


def _total_bytes(items: Sequence[measures.MemoryCopy | comm.Collective]) -> int | None:
    """The bytes of the copies (or collectives) that record theirs; ``None`` when none does:
    an unknown size is not 0 B."""
    sizes = [item.bytes for item in items if item.bytes is not None]
    return sum(sizes) if sizes else None


def _bandwidth(copies: list[measures.MemoryCopy]) -> float | None:
    """GB/s over the copies together: the bytes of those that record a size and a duration,
    over their time. Not a median of their rates: a kind mixes sizes (a batch of images and
    its labels), and the small copies' rates, set by their fixed cost, would stand for all."""
    timed = [c for c in copies if c.bandwidth_gb_s is not None]
    seconds = sum(c.span.dur for c in timed) / 1e6
    return sum(c.bytes or 0 for c in timed) / seconds / 1e9 if seconds > 0 else None


def _memory(trace: Trace) -> list[dict[str, Any]]:
    by_kind: dict[str, list[measures.MemoryCopy]] = {}
    for copy in measures.memory_copies(trace):
        by_kind.setdefault(copy.kind, []).append(copy)
    return [
        {
            "kind": kind,
            "count": len(copies),
            "total_bytes": _total_bytes(copies),
            "bandwidth_gb_s": _bandwidth(copies),
            "ops": dict(Counter(map(_issuer, copies)).most_common()),
            "host_memory": dict(
                Counter(m for m in map(_host_memory, copies) if m is not None).most_common()
            ),
        }
        for kind, copies in sorted(by_kind.items())
    ]


_COPY_ENDS = re.compile(r"\((\w+) -> (\w+)\)")


def _host_memory(copy: measures.MemoryCopy) -> str | None:
    """The host side of a copy to or from the host as its name says it (``Pinned`` in
    ``Memcpy HtoD (Pinned -> Device)``, ``Pageable``; ``Host`` on ROCm, either), or None."""
    found = _COPY_ENDS.search(copy.span.name)
    if found is None or copy.kind not in ("HtoD", "DtoH"):
        return None
    return found.group(1 if copy.kind == "HtoD" else 2)


def _communication(trace: Trace) -> dict[str, Any] | None:
    if not trace.communication:
        return None
    overlap = comm.comm_overlap(trace).total
    # By operation and message size: a median bandwidth over 4 KiB and 4 MiB messages
    # together (a loss's all_reduce beside the gradients') says nothing of either.
    by_op: dict[tuple[str, int | None], list[comm.Collective]] = {}
    for collective in comm.collectives(trace):
        by_op.setdefault((collective.op, collective.bytes), []).append(collective)
    rows = [
        {
            "op": op,
            "message_bytes": size,
            "count": len(group),
            "total_us": sum(c.duration_us for c in group),
            "total_bytes": _total_bytes(group),
            "median_algbw_gb_s": _median([c.algbw_gb_s for c in group if c.algbw_gb_s is not None]),
        }
        for (op, size), group in by_op.items()
    ]
    rows.sort(key=lambda row: (-row["total_us"], row["op"], row["message_bytes"] or 0))
    return {
        "kernels": len(trace.communication),
        "communication_us": overlap.communication_us,
        "compute_us": overlap.compute_us,
        "overlapped_us": overlap.overlapped_us,
        "exposed_us": overlap.exposed_us,
        "overlap_fraction": overlap.overlap_fraction,
        "by_op": rows,
    }


_COMMUNICATION_ROWS = 8
"""summary's text shows the communication rows that take the most time, this many."""


def _host_collectives(trace: Trace) -> list[dict[str, Any]]:
    """Collectives run on the CPU: the ``gloo:<op>`` ranges the Gloo backend records."""
    rows = [
        {
            "name": name,
            "count": len(spans),
            "total_us": sum(span.dur for span in spans),
            "threads": len({span.lane for span in spans}),
        }
        for name, spans in trace.by_name.items()
        if name.startswith(HOST_COLLECTIVE_PREFIX)
    ]
    return sorted(rows, key=lambda row: (-row["total_us"], row["name"]))


def _unlaunched_gpu_work(trace: Trace) -> dict[str, Any]:
    launch_of = trace.launch_of_id
    work = [w for w in trace.gpu_work if launch_of(w.id) is None]
    return {"count": len(work), "busy_us": measures.union_us(work)}


def _gpu_work_before_launch(trace: Trace) -> dict[str, Any]:
    count, most = measures.gpu_work_before_launch(trace)
    return {"count": count, "max_us": most if count else None}


def _unrecorded_kernel_launches(trace: Trace) -> dict[str, Any]:
    missing, launches = trace.kernel_launches_without_gpu_record((-math.inf, math.inf))
    return {
        "count": missing,
        "kernel_launches": launches if missing else None,
        "counter_ranges": len(trace.counter_ranges),
    }


def _why_unrecorded(summary: dict[str, Any]) -> str:
    """Why kernel launches lack their GPU records, as the trace shows it."""
    ranges = summary["unrecorded_kernel_launches"]["counter_ranges"]
    if ranges:
        return (
            f"CUPTI's range profiler recorded {ranges:,} kernel ranges instead, replaying each "
            "kernel to count performance counters, inside its launch call"
        )
    return "a trace cut short, or records the profiler dropped"


def _extent_us(trace: Trace) -> float:
    """The end of the trace's last span, µs from its first, leaving out a step annotation
    whose end was not recorded (Kineto writes such a step's end where the step would have
    ended, seconds after the recording stopped)."""
    unrecorded = {step.span.id for step in trace.steps if not trace.end_recorded(step)}
    return max((s.end for s in trace.spans if s.id not in unrecorded), default=0.0)


def summarize(trace: Trace, *, file: str | None = None, top: int = 10) -> dict[str, Any]:
    """Everything ``summary`` reports, as one JSON-ready dict (keys in the module docs)."""
    from .roofline import roofline  # here: diagnose never needs it (nor its import time)

    facts = Facts(trace)
    compiler = facts.compiler_kernels
    kernels, apis, planning = _kernels(trace, facts.program_kernels, top)
    view = roofline(trace)
    compiled = measures.compiled_regions(trace)
    overhead: dict[str, list[float]] = {}
    for span in trace.overhead:
        overhead.setdefault(span.name, []).append(span.dur)
    return {
        "file": str(trace.path) if file is None else file,
        "spans": len(trace.spans),
        "duration_us": _extent_us(trace),
        "has_gpu": trace.has_gpu,
        "gpu_work": trace.describe_gpu_work(),
        "host_ops_recorded": trace.records_host_ops,
        "devices": [
            {**msgspec.structs.asdict(device), "description": device.describe()}
            for device in trace.devices
        ],
        "gpu_numbers_may_be_agent_ids": trace.gpu_numbers_may_be_agent_ids,
        "cuda_runtime_version": trace.cuda_runtime_version,
        "cuda_driver_version": trace.cuda_driver_version,
        "cupti_version": trace.cupti_version,
        "hip_runtime_version": trace.hip_runtime_version,
        "hip_driver_version": trace.hip_driver_version,
        "base_time_ns": trace.base_time_ns,
        "lanes": [
            {
                "label": lane.label,
                "kind": lane.kind,
                "pid": lane.pid,
                "tid": lane.tid,
                "device": lane.device,
                "stream": lane.stream,
                "spans": len(trace.lane_spans(lane)),
                "activities": (
                    sum(span.is_gpu_work for span in trace.lane_spans(lane))
                    if lane.kind == "gpu"
                    else None
                ),
                "busy_us": measures.lane_busy_us(trace, lane),
            }
            for lane in trace.lanes
        ],
        "gpus_with_streams": _gpus_with_streams(trace),
        "steps": _steps(trace),
        "unlaunched_gpu_work": _unlaunched_gpu_work(trace),
        "negative_durations": trace.negative_durations,
        "gpu_work_before_launch": _gpu_work_before_launch(trace),
        "unrecorded_kernel_launches": _unrecorded_kernel_launches(trace),
        "other_step_lanes": [lane.label for lane in trace.other_step_lanes],
        "left_out_steps": [span.name for span in trace.left_out_steps],
        "top_kernels": kernels,
        "compiler_kernels": {
            "count": len(compiler),
            "gpu_us": sum(kernel.dur for kernel in compiler),
        }
        if compiler
        else None,
        "top_cpu_ops": [stats.to_dict() for stats in measures.op_stats(trace)[:top]],
        "launch_apis": dict(apis.most_common()),
        "planning_calls": dict(planning.most_common()),
        "memory": _memory(trace),
        "memory_peaks": [peak.to_dict() for peak in measures.memory_peaks(trace)],
        "communication": _communication(trace),
        "host_collectives": _host_collectives(trace),
        "compile": {
            "regions": len(compiled.regions),
            "region_ids": list(compiled.region_ids),
            "cache_lookups": len(compiled.cache_lookups),
            "cache_lookup_us": compiled.cache_lookup_us,
            "aot_wrappers": len(compiled.aot_wrappers),
            "aot_functions": len(compiled.aot_functions),
            "graph_calls": len(compiled.graph_calls),
            "graph_hashes": list(compiled.graph_hashes),
            "cuda_graph_launches": len(compiled.cuda_graph_launches),
        },
        "overhead": [
            {"name": name, "count": len(durations), "total_us": sum(durations)}
            for name, durations in overhead.items()
        ],
        "roofline": {
            "reason": view.reason,
            "gpu_us": view.gpu_us,
            "counted_gpu_us": view.counted_gpu_us,
            "entries": [entry.to_dict() for entry in view.top(top)],
            "groups": [group.to_dict() for group in view.groups(top)],
        },
    }


def _roofline_lines(roof: dict[str, Any]) -> list[str]:
    """The summary's achieved rates: the roofline's groups of calls (an op with one set of
    shapes) with a count, most GPU time first, each held to the datasheet peak its ``bound``
    names, listed below the table."""
    out = ["", "Achieved rates of the ops with recorded shapes (roofline)"]
    if roof["reason"] is not None:
        return [*out, f"  none: {roof['reason']}"]
    counted = [e for e in roof["groups"] if e["tflops"] is not None or e["gb_s"] is not None]
    if not counted:
        return [*out, "  none: no call's FLOPs or bytes could be counted from its shapes"]
    peaks = list(dict.fromkeys(e["peak"] for e in counted if e["peak"] is not None))
    rows = [
        [
            cut(e["name"], 40),
            e["kind"],
            f"{e['calls']:,}",
            _us(e["gpu_us"]),
            "-" if e["tflops"] is None else f"{e['tflops']:,.1f}",
            "-" if e["gb_s"] is None else f"{e['gb_s']:,.1f}",
            e["bound"],
            "-"
            if e["peak_share"] is None
            else f"{percent(e['peak_share'])} of [{peaks.index(e['peak']) + 1}]"
            + _ABOVE_PEAK_MARKS.get(e["above_peak"], ""),
        ]
        for e in counted
    ]
    out += [
        f"  {_us(roof['counted_gpu_us'])} of their {_us(roof['gpu_us'])} µs on the GPU counted; "
        "the ops with the most, by shapes",
        "  (--json: each one's shapes, FLOPs and bytes; rates over their calls' GPU time):",
        text_table(["op", "kind", "calls", "GPU µs", "TFLOP/s", "GB/s", "bound", "of peak"], rows),
    ]
    for number, peak in enumerate(peaks, start=1):
        out += textwrap.wrap(
            f"[{number}] {peak}", width=_LINE_WIDTH, initial_indent="  ", subsequent_indent="    "
        )
    if not peaks:
        out.append("  (no datasheet peak for this device: rates only, and no bound)")
    reasons = {e["above_peak"] for e in counted} - {None}
    for reason in sorted(reasons):
        out += textwrap.wrap(
            f"{_ABOVE_PEAK_MARKS[reason].strip()} {_ABOVE_PEAK_WORDS[reason]}",
            width=_LINE_WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    return out


_ABOVE_PEAK_MARKS = {"l2-cache": " *", "suspect": " !"}
_ABOVE_PEAK_WORDS = {
    "l2-cache": "above its memory peak: the op's bytes per call fit in the GPU's L2 cache, which "
    "serves them faster than its memory (the count is of the bytes an ideal kernel moves, "
    "not of where they come from)",
    "suspect": "above its peak, and its bytes do not fit in the L2 cache: the count, or the "
    "peak, is in doubt (--json has the shapes it was counted from)",
}


def _signed_size(size: int) -> str:
    """``+12 MiB``, ``-4 KiB``: a change of memory, from some start."""
    return f"{'-' if size < 0 else '+'}{byte_size(abs(size))}"


def _us(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _gpus_with_streams(trace: Trace) -> list[dict[str, Any]]:
    """Per GPU whose work ran on two streams or more, its busy time over all of them and
    how much of the streams' own busy time ran at once (``gpus_with_streams`` in the JSON)."""
    lanes: dict[Any, list[Lane]] = {}
    for lane in trace.lanes:
        if lane.kind == "gpu" and measures.gpu_busy_us(trace, lane) > 0:
            lanes.setdefault(lane.device, []).append(lane)
    found = []
    for device, streams in lanes.items():
        if len(streams) < 2:
            continue
        work = [span for span in trace.gpu_work if span.lane.device == device]
        busy = measures.union_us(work, in_start_order=True)
        each = sum(measures.gpu_busy_us(trace, lane) for lane in streams)
        found.append(
            {
                "device": device,
                "streams": len(streams),
                "busy_us": busy,
                "streams_busy_us": each,
                "concurrent_us": max(each - busy, 0.0),
            }
        )
    return found


def _rate(gb_s: float | None) -> str:
    """A bandwidth to two decimals; one under them (a 4-byte copy's) as ``<0.01``, not 0.00."""
    return "<0.01" if gb_s is not None and 0 < gb_s < 0.005 else _us(gb_s, 2)


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{name} x{count}" for name, count in counter.items()) or "none"


_STEPS_LEGEND = [
    "  (CPU: the step's window. GPU busy: its launched work's time on the GPU. idle: the",
    "  share of its GPU window (its CPU window, moved past earlier GPU work and stretched to",
    "  its own last work) in which no stream ran. lane off.: from its first launch call to",
    "  that work's start on the GPU. dead win.: from a label's start to its first ATen op (or",
    "  to fetching a batch), less labels inside it that closed before then. delay: launch",
    "  call to GPU start, median and longest. gaps: the GPU's idle stretches in its work.)",
]


def _busy_by_gpu_lines(steps: list[dict[str, Any]]) -> list[str]:
    """Under the step table, in a trace of one process driving several GPUs: each GPU's busy
    time, the median over the steps, since the table's busy and idle take them together."""
    by_gpu: dict[str, list[float]] = {}
    for row in steps:
        for device, busy in (row["gpu_busy_by_gpu_us"] or {}).items():
            by_gpu.setdefault(device, []).append(busy)
    if not by_gpu:
        return []
    each = ", ".join(f"GPU {device} {_us(_median(busy))}" for device, busy in by_gpu.items())
    text = (
        f"(Each GPU's own busy time, µs, the median over the steps: {each}. The table's GPU "
        f"busy and idle take the {len(by_gpu)} GPUs together, so a GPU idling while another "
        "works does not show there, while the gaps columns count each GPU's own idle "
        "stretches, GPU by GPU. diagnose's overhead-bound, gpu-idle and compute-bound read "
        "the busiest GPU; gpus-take-turns compares them.)"
    )
    return textwrap.wrap(
        text, width=_LINE_WIDTH, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )


_STEPS_SHOWN_ALL = 60
"""The text summary's step table shows every step of a trace of up to this many; of a longer
one, the first :data:`_STEPS_SHOWN`..."""
_STEPS_SHOWN = 20
"""... the first this many steps..."""
_STEPS_SHOWN_LAST = 5
"""... and the last this many."""


def format_summary(summary: dict[str, Any]) -> str:
    """The readable text of ``summary`` for a dict made by :func:`summarize`."""
    out = [summary["file"]]
    for device in summary["devices"]:
        memory = device["total_memory_bytes"]
        size = "" if memory is None else f", {byte_size(memory)}"
        # An MTIA, or an accelerator of unknown vendor, is no GPU the analysis reads.
        other = device["vendor"] == "meta" or (
            device["vendor"] == "unknown" and device["name"] != "unknown"
        )
        kind = "device" if other else "GPU"
        out.append(f"  {kind} {device['id']}: {device['description']}{size}")
    if summary["gpu_numbers_may_be_agent_ids"]:
        out.append(
            "  (ROCm numbers GPUs by HSA agent, CPU sockets first: a lane's GPU number may be "
            "the agent's, GPU 2 the host's first GPU)"
        )
    versions = [
        f"{label} {summary[key]}"
        for label, key in (
            ("CUDA runtime", "cuda_runtime_version"),
            ("driver", "cuda_driver_version"),
            ("CUPTI", "cupti_version"),
            ("HIP runtime", "hip_runtime_version"),
            ("driver", "hip_driver_version"),
        )
        if summary[key] is not None
    ]
    if versions:
        out.append("  " + ", ".join(versions))
    extent = f"  {summary['spans']:,} spans over {_us(summary['duration_us'])} µs"
    line = f"{extent}; {summary['gpu_work']}"
    out += [line] if len(line) <= _LINE_WIDTH else [extent, f"  {summary['gpu_work']}"]
    if summary["negative_durations"]:
        count = summary["negative_durations"]
        out += [
            f"  {count:,} event{'s' if count > 1 else ''} with a negative dur (an end the "
            "profiler did not record, as torch",
            "  before 1.13 could write) read as 0 µs",
        ]
    early = summary["gpu_work_before_launch"]
    if early["count"]:
        out += [
            f"  {early['count']:,} GPU activities start before the call that launched them, by "
            f"up to {_us(early['max_us'])} µs: the trace's CPU and GPU clocks disagree by at",
            "  least that much, and its launch delays and lane offsets are off by as much",
        ]

    out += ["", "Lanes"]
    for lane in summary["lanes"]:
        out.append(
            f"  {lane['label']:<28} {lane['kind']:<9} {lane['spans']:>8,} spans"
            f"  {_us(lane['busy_us']):>12} µs busy"
        )
        activities = lane.get("activities")
        if activities is not None and activities != lane["spans"]:
            # Under the spans: the rest are labels projected onto the lane and sync events.
            out.append(f"{'':<41}{activities:>8,} of them kernels, copies or memsets")
    if summary["lanes"]:
        out += [
            "  (busy: the time covered by a CPU thread's operators, runtime calls and Gloo",
            "  collectives, or by a GPU lane's kernels, copies and memsets; labels such as",
            "  ProfilerStep#N are not counted)",
        ]
    for gpu in summary["gpus_with_streams"]:
        name = "GPU" if gpu["device"] is None else f"GPU {gpu['device']}"
        out += [
            f"  {name}, its {gpu['streams']} streams together: {_us(gpu['busy_us'])} µs busy",
            f"    (their own busy times add up to {_us(gpu['streams_busy_us'])} µs: "
            f"{_us(gpu['concurrent_us'])} µs more, when two of them or more ran at once)",
        ]

    out += ["", "Steps (µs)"]
    if summary["steps"]:
        out.append(
            f"  {'step':>5} {'CPU':>10} {'GPU busy':>9} {'idle':>4} {'lane off.':>9}"
            f" {'dead win.':>9} {'delay med':>9} {'delay max':>9} {'gaps':>5} {'gap max':>8}"
        )
        steps = summary["steps"]
        # A long recording's table would bury the rest: its first and last steps, the count
        # of those between (--json has every one).
        if len(steps) > _STEPS_SHOWN_ALL:
            hidden = len(steps) - _STEPS_SHOWN - _STEPS_SHOWN_LAST
            steps = [*steps[:_STEPS_SHOWN], None, *steps[-_STEPS_SHOWN_LAST:]]
        for s in steps:
            if s is None:
                out.append(f"  {'...':>5} {hidden:,} more steps (--json lists every step)")
                continue
            on_gpu = s["gpu_idle_fraction"] is not None  # else a trace without GPU work
            idle = percent(s["gpu_idle_fraction"]) if on_gpu else "-"
            busy = _us(s["gpu_busy_us"]) if on_gpu else "-"
            gaps = s["gpu_gap_count"] if on_gpu else "-"
            out.append(
                f"  {s['step']:>5} {_us(s['cpu_us']):>10} {busy:>9}"
                f" {idle:>4} {_us(s['lane_offset_us']):>9} {_us(s['dead_window_us']):>9}"
                f" {_us(s['launch_delay_median_us']):>9} {_us(s['launch_delay_max_us']):>9}"
                f" {gaps:>5} {_us(s['gpu_gap_max_us']):>8}"
            )
        out += _STEPS_LEGEND
        out += _busy_by_gpu_lines(summary["steps"])
        if summary["left_out_steps"]:
            names = summary["left_out_steps"]
            listed = ", ".join(names[:5]) + (
                f" and {len(names) - 5} more" if len(names) > 5 else ""
            )
            out.append(
                f"  {len(names)} ProfilerStep annotation(s) left out, a number seen before or "
                f"inside another step: {listed}"
            )
        if summary["other_step_lanes"]:
            out.append(
                "  steps of one thread only; those on "
                f"{', '.join(summary['other_step_lanes'])} are left out (several processes "
                "in one file?)"
            )
        unlaunched = summary["unlaunched_gpu_work"]
        if unlaunched["count"]:
            one = unlaunched["count"] == 1
            out.append(
                f"  {unlaunched['count']:,} GPU {'activity' if one else 'activities'} "
                f"({_us(unlaunched['busy_us'])} µs) {'has' if one else 'have'} no launch call in "
                f"the trace: no step counts {'it' if one else 'them'}"
            )
        for s in summary["steps"]:
            if s["kernel_launches_without_gpu_record"]:
                out.append(
                    f"  step {s['step']}: {s['kernel_launches_without_gpu_record']:,} of its "
                    f"{s['kernel_launches']:,} kernel launches have no GPU record "
                    f"({_why_unrecorded(summary)}): its GPU figures are a lower bound"
                )
                missing = s["kernel_launches_without_gpu_record"] / s["kernel_launches"]
                if not s["read_by_rules"]:
                    out.append("  and diagnose's rules leave it out while other steps are whole")
                elif missing > GPU_RECORDS_MISSING_SHARE:  # every step is missing as many
                    out.append(
                        "  and diagnose's bound rules (overhead-bound, gpu-idle, compute-bound) "
                        "leave it out"
                    )
            if not s["end_recorded"]:
                out += [
                    f"  step {s['step']} ends after the profiler's recording window: its end was",
                    "  not recorded, and diagnose's rules leave it out",
                ]
            elif not s["read_by_rules"] and not s["kernel_launches_without_gpu_record"]:
                out += [
                    f"  step {s['step']} holds no span on its thread and launched no GPU work, "
                    "while other steps did:",
                    "  diagnose's rules leave it out",
                ]
    else:
        out.append("  no ProfilerStep#N annotations")
        if summary["has_gpu"] and not summary["host_ops_recorded"]:
            out.append(f"  {NO_HOST_OPS}")
        unrecorded = summary["unrecorded_kernel_launches"]
        if unrecorded["count"]:
            out += textwrap.wrap(
                f"{unrecorded['count']:,} of the trace's {unrecorded['kernel_launches']:,} "
                f"kernel launches have no GPU record ({_why_unrecorded(summary)}): its GPU "
                "figures are a lower bound, and diagnose gives no verdict on whether the CPU or "
                "the GPU sets the pace",
                width=_LINE_WIDTH,
                initial_indent="  ",
                subsequent_indent="  ",
            )

    out += ["", "Top kernels by total time (µs)"]
    if summary["top_kernels"]:
        out.append(
            f"  {'count':>6} {'total':>10} {'median':>9} {'min':>9} {'max':>9} {'spread':>7}"
            "  launched by / name"
        )
        names = distinct_cuts([k["name"] for k in summary["top_kernels"]], 72)
        for k, name in zip(summary["top_kernels"], names, strict=True):
            out.append(
                f"  {k['count']:>6,} {_us(k['total_us']):>10} {_us(k['median_us'], 2):>9}"
                f" {_us(k['min_us'], 2):>9} {_us(k['max_us'], 2):>9} {k['spread']:>7.1%}"
                f"  {'/'.join(k['apis'])}"
            )
            out.append(f"{'':>8}{name}")
            if k["communication"]:
                out.append(f"{'':>8}a collective: its time includes waiting for the other ranks")
            if k["planning_calls"]:
                out.append(f"{'':>8}planned with: {_counts(k['planning_calls'])}")
            if k["outlier_steps"]:
                steps = ", ".join(str(n) for n in k["outlier_steps"])
                out.append(f"{'':>8}outlier steps: {steps}")
        out += [
            "  (spread: (max - min) / median of all the name's calls, which may run on several",
            "  sizes. outlier steps: those holding a call far from the like calls of the other",
            "  steps, the k-th call of the name in each)",
        ]
    else:
        out.append("  none")
    compiler = summary["compiler_kernels"]
    if compiler is not None:
        out += [
            f"  (left out here and from the launch APIs below: {compiler['count']:,} kernels, "
            f"{_us(compiler['gpu_us'])} µs on the GPU,",
            "  that torch.compile launched while compiling: its autotuning's candidate kernels "
            "and cache flushes)",
        ]

    out += ["", "Top CPU operators by self time (µs)"]
    if summary["top_cpu_ops"]:
        rows = [
            [cut(op["name"], 60), f"{op['calls']:,}", _us(op["self_us"]), _us(op["total_us"])]
            for op in summary["top_cpu_ops"]
        ]
        out.append(text_table(["operator", "calls", "self", "total"], rows))
    else:
        out.append("  none")
    out += _roofline_lines(summary["roofline"])
    out += [
        "",
        # Kernels, not calls: a trace whose GPU records are missing has launch calls and none.
        f"Kernels by launch API: {_counts(summary['launch_apis'])}",
        f"Planning calls: {_counts(summary['planning_calls'])}",
    ]

    out += [
        "",
        "Memory copies and sets (GB/s: 10^9 bytes per second over the copies' time)",
    ]
    for m in summary["memory"] or []:
        # A memset of a few bytes has no meaningful rate: its size and callers say enough.
        rate = "" if m["kind"] == "memset" else f" {_rate(m['bandwidth_gb_s'])} GB/s copied,"
        size = (
            "size not recorded,"
            if m["total_bytes"] is None
            else f"{byte_size(m['total_bytes']):>12} total,{rate}"
        )
        # ROCm's "Host" says nothing of pinned or pageable: left to the JSON.
        host = ", ".join(
            f"{memory.lower()} x{n}" for memory, n in m["host_memory"].items() if memory != "Host"
        )
        host = f" host memory {host}," if host else ""
        out.append(f"  {m['kind']:<8} x{m['count']:<5} {size}{host} from {_counts(m['ops'])}")
    if not summary["memory"]:
        out.append("  none")
    if summary["memory_peaks"]:
        out += ["", "Memory allocated to tensors (recorded with profile_memory=True)"]
        for peak in summary["memory_peaks"]:
            step = "" if peak["peak_step"] is None else f" in ProfilerStep#{peak['peak_step']}"
            reserved = (
                ""
                if peak["peak_reserved_bytes"] is None
                else f", {byte_size(peak['peak_reserved_bytes'])} reserved at most"
            )
            if peak["from_recording_start"]:  # sizes only: counted from the recording's start
                top, end = (peak["peak_allocated_bytes"], peak["end_allocated_bytes"])
                out.append(
                    f"  {peak['device']:<6} peak {_signed_size(top)} over the recording's start "
                    f"at {_us(peak['peak_at_us'])} µs{step}; {_signed_size(end)} at the end "
                    f"({peak['events']} allocations and frees; the trace writes no allocator "
                    "totals)"
                )
                continue
            out.append(
                f"  {peak['device']:<6} peak {byte_size(peak['peak_allocated_bytes'])} at "
                f"{_us(peak['peak_at_us'])} µs{step}{reserved}; "
                f"{byte_size(peak['end_allocated_bytes'])} at the end "
                f"({peak['events']} allocations and frees)"
            )

    out += ["", "Communication (collective kernels, µs on the GPU; GB/s: 10^9 bytes per second)"]
    communication = summary["communication"]
    if communication is None:
        out.append("  no collective kernels" if summary["host_collectives"] else "  none")
    else:
        hidden = communication["overlap_fraction"]
        out.append(
            f"  {communication['kernels']} kernel(s) over {_us(communication['communication_us'])}"
            f" µs; compute kernels run beside {percent(hidden)} of it, "
            f"{_us(communication['exposed_us'])} µs exposed"
            if hidden is not None
            else f"  {communication['kernels']} kernel(s) of no measurable length"
        )
        shown = communication["by_op"][:_COMMUNICATION_ROWS]
        sizes = {
            (row["op"], row["message_bytes"]): "-"
            if row["message_bytes"] is None
            else byte_size(row["message_bytes"])
            for row in shown
        }
        alike = Counter((op, label) for (op, _), label in sizes.items())
        for (op, size), label in sizes.items():
            if alike[op, label] > 1 and size is not None:  # 4,198,400 B and 4,194,304 B
                sizes[op, size] = f"{size:,} B"
        rows = [
            [
                row["op"],
                sizes[row["op"], row["message_bytes"]],
                f"{row['count']:,}",
                _us(row["total_us"]),
                "-" if row["total_bytes"] is None else byte_size(row["total_bytes"]),
                _us(row["median_algbw_gb_s"], 2),
            ]
            for row in shown
        ]
        headers = ["operation", "message", "count", "total", "bytes", "median algbw"]
        out.append(text_table(headers, rows))
        more = len(communication["by_op"]) - len(shown)
        if more:
            out.append(f"  ... {more} more operation and size row(s) (--json lists every one)")
    if summary["host_collectives"]:
        listed = ", ".join(
            f"{row['name']} x{row['count']} ({_us(row['total_us'])} µs"
            + (f" summed over {row['threads']} threads)" if row["threads"] > 1 else ")")
            for row in summary["host_collectives"]
        )
        out.append(f"  on the CPU (Gloo): {listed}")

    c = summary["compile"]
    out += ["", "torch.compile"]
    if c["regions"] or c["graph_calls"] or c["cache_lookups"] or c["aot_functions"]:
        out.append(
            f"  {c['regions']} compiled-region calls ({', '.join(c['region_ids']) or '-'}),"
            f" {c['cache_lookups']} cache lookups ({_us(c['cache_lookup_us'])} µs),"
            f" {c['aot_wrappers']} AOT wrapper spans"
            + (
                f", {c['aot_functions']} CompiledFunction(Backward) calls"
                if c["aot_functions"]
                else ""
            )
        )
        graphs = ", ".join(c["graph_hashes"]) or "-"
        if c["graph_calls"] and not c["graph_hashes"]:
            graphs = (
                f"{c['graph_calls']} calls of compiled graphs without a cache key (Inductor's "
                "FX graph cache off or bypassed)"
            )
        out.append(f"  graphs: {graphs}")
    else:
        out.append("  not compiled")
    vendors = {d["vendor"] for d in summary["devices"]}
    if vendors == {"amd"}:
        graphs = "HIP graph launches"
    elif vendors <= {"nvidia"}:
        graphs = "CUDA graph launches"
    else:  # what is counted, on a GPU of another kind or GPUs of two
        graphs = "graph launches (cudaGraphLaunch, hipGraphLaunch)"
    out.append(f"  {graphs}: {c['cuda_graph_launches']}")

    out += ["", "Profiler overhead"]
    for o in summary["overhead"]:
        out.append(f"  {o['name']} x{o['count']} ({_us(o['total_us'])} µs)")
    if not summary["overhead"]:
        out.append("  none recorded")
    return "\n".join(out)


def _summary_task(trace: Trace, top: int, ranks: bool) -> tuple[RankProfile | None, dict[str, Any]]:
    """Worker: one trace's summary, and its profile for the cross-rank table if ``ranks``."""
    return rank_profile(trace) if ranks else None, summarize(trace, top=top)


def run_summary(args: argparse.Namespace) -> int:
    """``summary``: one trace's summary, or the per-rank table of several, as text or JSON."""
    multi = _is_multi(args.traces)
    outcomes = _analyse(args, args.traces, partial(_summary_task, top=args.top, ranks=multi))
    status = _report_errors(outcomes)
    done = [o.value for o in outcomes if o.value is not None]
    if not multi:
        for _, summary in done:
            print(
                json.dumps(summary, indent=2, allow_nan=False)
                if args.json
                else format_summary(summary)
            )
        return status
    if not done and not args.json:  # every trace refused: the error lines say it all
        return status
    report = cross_rank([profile for profile, _ in done if profile is not None])
    if args.json:
        document = {
            "traces": [summary for _, summary in done],
            "errors": _errors(outcomes),
            "skipped": args.skipped,
            "cross_rank": report.to_dict(),
        }
        print(json.dumps(document, indent=2, allow_nan=False))
    elif len(done) == 1:  # a directory of one trace (a tensorboard_trace_handler folder)
        print(format_summary(done[0][1]))
        print(f"\n{format_cross_rank(report)}")
    else:
        print(format_cross_rank(report))
        print("\n(summary FILE shows one trace in full; --json holds every trace's summary.)")
    return status


def _summary_keys_help() -> str:
    """The JSON keys documented in the module docstring, for ``summary --help``."""
    doc = __doc__ or ""
    start, end = doc.find("    - ``file``"), doc.find("\n\nA trace that")
    keys = textwrap.dedent(doc[start:end]) if 0 <= start < end else ""
    # reStructuredText reads as noise in a terminal: literals plain, cross-references as the
    # name they point at.
    keys = _SPHINX_ROLE.sub(lambda m: m[1].lstrip("~"), keys)
    return keys.replace("``", "")


_SPHINX_ROLE = re.compile(r":(?:func|class|meth|attr|data|mod):`([^`]+)`")


def add_summary_parser(subcommands: Any) -> None:
    """Register ``summary``."""
    parser = subcommands.add_parser(
        "summary",
        help="steps, lanes, top kernels and the measurements of a trace, or of a run's ranks",
        description=(
            "Summarize one trace, or compare the ranks of a distributed run (several traces, "
            "or a directory of them): readable text, or one JSON object with --json."
        ),
        epilog=f"JSON keys (--json):\n{_summary_keys_help()}\n{MULTI_RANK_JSON_HELP}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_traces_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _add_loading_options(parser)
    parser.add_argument(
        "--top",
        type=_at_least_one,
        default=10,
        metavar="N",
        help="kernel names, CPU ops and roofline entries to list (default 10)",
    )
    parser.set_defaults(handler=run_summary, command_parser=parser)


# -- diagnose and compare ---------------------------------------------------------------------

DIAGNOSE_JSON_HELP = """\
JSON (--json): one object
  trace     the trace path as given
  device    the GPU name(s) the trace records, or null
  findings  [{rule, table, severity, message, evidence}], grouped by cheatsheet table, the
            most important first; severity is "info" (worth knowing) or "warning" (worth
            acting on); evidence holds the steps, event names, times (µs from the trace's
            first event), durations and measured numbers behind the message. Its keys
            name their unit (_us µs, _bytes or bytes, _gb_s); a _share or _fraction is a
            part of a whole (0 to 1), except a GPU busy "fraction" per step (GPU busy
            time over the step's CPU window), which exceeds 1 where the GPU runs behind
            the CPU; an _over_ key is a ratio (rank-straggler's caused wait over the
            others' step time, above 1 where collectives outside the steps kept them
            waiting); median_step is the step with the median share in the bound rules
            (overhead-bound, gpu-idle, compute-bound, gpus-take-turns) and in
            allocator-churn, compiling-recorded and data-loader, and the median_* keys
            beside it are that step's values, so that the message's numbers are one
            step's.
Exit status: 0 when it ran, with or without findings; 2 for an unreadable trace, an unknown
rule id, a --select/--ignore naming none or leaving no rule to run (a cross-rank rule alone
on one trace or a directory holding one), with one line on stderr. A rule selected by name
that cannot run beside the others is named in a "note: not run:" line on stderr."""

COMPARE_JSON_HELP = """\
JSON (--json): one object
  baseline, trace  {trace, device, device_named, content, host_ops_recorded, steps,
                   steps_without_gpu_records, median_step_cpu_us,
                   median_step_gpu_busy_us, recording_cpu_us, recording_gpu_busy_us, kernels,
                   compiler_kernels, launches,
                   gpu_activities, kernels_per_step, launches_per_step, launch_apis,
                   compiled, cuda_graph_launches, collectives, median_step_communication_us,
                   median_step_exposed_communication_us, communication_us,
                   exposed_communication_us, gemm_fp32_math, step_cpu_iqr_us,
                   step_gpu_busy_iqr_us, median_step_gpu_window_us, rank};
                   rank is distributedInfo.rank, null where the trace records none;
                   the iqr keys are the middle half of the steps, [lower quartile, upper
                   quartile] (the text says "overlap" where the two runs' middle halves
                   overlap, and "few steps" where a side has fewer than 5: a ratio of
                   medians then may be noise);
                   median_step_gpu_window_us is the step as the GPU runs it, from the end
                   of earlier steps' work to the end of its own (where the GPU sets the
                   pace, longer than the CPU time);
                   content is "GPU", "accelerator not read", "GPU not recorded" (launch
                   or copy calls, or GPU lanes, but no kernel, copy or memset in the
                   trace: its kernels, launches, gpu_activities, collectives and
                   launch_apis are then null, and
                   no kernel name is listed as only in one trace), "CPU only", "profiler
                   only" (the profiler's own events alone) or "no events";
                   host_ops_recorded is false for a trace whose host side holds no op or
                   label (recorded without ProfilerActivity.CPU);
                   launch_apis counts by name the launch calls whose GPU work is in the
                   trace, those of copies and memsets included, a graph launch once
                   (summary's launch_apis counts kernels per launch API);
                   device names the GPUs, with the architecture on AMD (ROCm gives several
                   models one name); device_named is false where a GPU has no name;
                   steps counts the steps whose CPU time is read (summary lists every
                   ProfilerStep: a step ending after the recording, or one that recorded
                   nothing while others did, is left out), and
                   steps_without_gpu_records those of them more than a tenth of whose
                   kernel launches went unrecorded: their GPU figures are left out (the
                   GPU medians and per-step counts are over the others, and null where
                   every step is one);
                   recording_cpu_us runs from the first CPU-thread event to the last (within
                   the recording window; stretches of 10 ms or more with nothing on any
                   thread or GPU left out), recording_gpu_busy_us is the busiest GPU's busy
                   time from then on, as overhead-bound reads a recording without steps:
                   the times to compare without steps (the text shows them then);
                   collectives counts the NCCL/RCCL kernels, the medians are per step,
                   communication_us and exposed_communication_us over the whole trace
                   (null without collectives); gemm_fp32_math counts the GEMM kernels of
                   matrix-multiply ops whose names say how they computed fp32: {"fp32": n}
                   on the CUDA cores, {"tf32": n} in TF32 (null without GPU records);
                   compiler_kernels counts the kernels torch.compile launched while
                   compiling (an autotuner's candidates and cache flushes), which the
                   kernels_only_in lists leave out
  cpu_ratio        median step CPU time of TRACE over BASELINE (null when either has no
                   step: compare recording_cpu_us then)
  devices_differ   whether the two ran on devices of different kinds, as far as both
                   traces say: AMD architectures both know, else vendors where a device
                   has no name, else names
  fp32_math_differs
                   whether the GEMM kernels' names say the two ran fp32 matmuls
                   differently (one on the CUDA cores, one in TF32: another
                   torch.set_float32_matmul_precision)
  versions_differ  whether torch (or library) versions that name things differently
                   wrote them (one
                   with torch ~1.8's categories, Operator, Kernel..., one without;
                   autograd nodes with and without the version suffix, AddmmBackward and
                   AddmmBackward0; or a kernel function with other argument types on each
                   side): the only-in lists then hold renamed work
  steps            [{index, baseline_step, trace_step, baseline_cpu_us, trace_cpu_us,
                   baseline_gpu_busy_us, trace_gpu_busy_us}], steps paired by number
                   where the two share every number of the run with fewer steps, else
                   by position
  ops_only_in_baseline, ops_only_in_trace, kernels_only_in_baseline,
  kernels_only_in_trace, labels_only_in_baseline, labels_only_in_trace
                   [{name, count, total_us}] (the labels: record_function ranges and data
                   loaders on the host, ProfilerStep#N left out, longest in all first)
  findings         [{rule, table, severity, message, evidence}] of the rules that need a
                   baseline (compile-cpu-tax)
Exit status: 0 when it ran; 2 for an unreadable trace, with one line on stderr."""


def _at_least_one(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {number}")
    return number


def _rule_id_list(text: str) -> list[str]:
    ids = rule_id_list(text)
    if not ids:
        raise argparse.ArgumentTypeError(f"no rule id in {text!r}")
    return ids


def _diagnose_task(
    trace: Trace, select: list[str] | None, ignore: list[str] | None, ranks: bool, as_json: bool
) -> tuple[RankProfile | None, dict[str, Any] | None, str | None]:
    """Worker: one trace's findings, as JSON or as text (the form printed, the other
    ``None``), and its profile for the cross-rank table if ``ranks``."""
    findings = diagnose(trace, select=select, ignore=ignore)
    profile = rank_profile(trace) if ranks else None
    if as_json:
        return profile, diagnosis_dict(trace, findings), None
    return profile, None, format_diagnosis(trace, findings)


def run_diagnose(args: argparse.Namespace) -> int:
    """``diagnose``: the cheatsheet's findings for each trace, and across ranks, as text or JSON."""
    across = set(CROSS_RANK_RULE_IDS)
    select = None if args.select is None else [i for i in args.select if i not in across]
    ignore = None if args.ignore is None else [i for i in args.ignore if i not in across]
    try:
        rules = select_rules(select, ignore)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_TRACE
    chosen_across = across if args.select is None else across & set(args.select)
    chosen_across -= set(args.ignore or ())
    multi = _is_multi(args.traces)
    several = multi and len(trace_files(args.traces)) > 1  # a directory may hold one trace
    against = [rule.id for rule in rules if rule.needs_baseline]  # compare runs those
    rules = [rule for rule in rules if not rule.needs_baseline]
    across_reason = (
        f"{', '.join(sorted(chosen_across))} compare{'s' if len(chosen_across) == 1 else ''} "
        "ranks and one trace is given: give several traces, or a directory of a run's "
        "per-rank traces"
    )
    against_reason = (
        f"{', '.join(against)} compare{'s' if len(against) == 1 else ''} a run with a "
        "baseline: compare BASELINE TRACE runs it"
    )
    if not rules and not (several and chosen_across):
        # Nothing would run: "no pattern found" would read as a clean trace.
        reasons = [across_reason] if chosen_across else []
        reasons += [against_reason] if against else []
        reason = "; ".join(reasons) or "--select and --ignore leave no rule to run"
        print(f"error: {reason}", file=sys.stderr)
        return EXIT_BAD_TRACE
    if args.select is not None:
        # Rules asked for by name that cannot run here are said to be left out, not dropped.
        if against:
            print(f"note: not run: {against_reason}", file=sys.stderr)
        if chosen_across and not several:
            print(f"note: not run: {across_reason}", file=sys.stderr)
    task = partial(_diagnose_task, select=select, ignore=ignore, ranks=multi, as_json=args.json)
    outcomes = _analyse(args, args.traces, task)
    status = _report_errors(outcomes)
    done = [o.value for o in outcomes if o.value is not None]
    if not multi:
        for _, document, text in done:
            print(json.dumps(document, indent=2) if args.json else text)
        return status
    if not done and not args.json:  # every trace refused: the error lines say it all
        return status
    report = cross_rank([profile for profile, _, _ in done if profile is not None])
    report = msgspec.structs.replace(
        report, findings=[f for f in report.findings if f.rule in chosen_across]
    )
    if args.json:
        document = {
            "traces": [document for _, document, _ in done],
            "errors": _errors(outcomes),
            "skipped": args.skipped,
            "cross_rank": report.to_dict(),
        }
        print(json.dumps(document, indent=2, allow_nan=False))
    else:
        # Each trace's own text only where a rule of a single trace ran on it.
        texts = [text for _, _, text in done] if rules else []
        print("\n\n".join([*texts, format_cross_rank(report, rules_ran=bool(chosen_across))]))
    return status


def add_diagnose_parser(subcommands: Any) -> None:
    """Register ``diagnose``."""
    parser = subcommands.add_parser(
        "diagnose",
        help="apply the trace reading cheatsheet to a trace, or to each rank of a run",
        description=(
            "Find the cheatsheet's patterns in one trace and show the evidence for each, "
            "grouped by cheatsheet table, the most important first. (compile-cpu-tax needs "
            "an eager baseline: compare reports it.) Given several traces, or a directory of "
            "a run's per-rank traces, it diagnoses each and then compares the ranks."
        ),
        epilog=(
            f"{DIAGNOSE_JSON_HELP}\n\n{MULTI_RANK_JSON_HELP}\n\nRule ids: {', '.join(rule_ids())}"
            f"\n\nCross-rank rule ids (several traces): {', '.join(CROSS_RANK_RULE_IDS)}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_traces_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _add_loading_options(parser)
    parser.add_argument(
        "--select",
        type=_rule_id_list,
        action="extend",
        metavar="IDS",
        help="run only these rules (comma-separated ids; may be repeated)",
    )
    parser.add_argument(
        "--ignore",
        type=_rule_id_list,
        action="extend",
        metavar="IDS",
        help="leave these rules out (comma-separated ids; may be repeated)",
    )
    parser.set_defaults(handler=run_diagnose, command_parser=parser)


def _compare_task(
    baseline: Trace, trace: Trace, ranks: bool, as_json: bool
) -> tuple[RankProfile | None, RankProfile | None, dict[str, Any] | None, str | None]:
    """Worker: the comparison of two traces, as JSON or as text (the form printed, the other
    ``None``), and their profiles for the cross-rank tables if ``ranks``."""
    from .compare import compare  # here: diagnose never needs it (nor its import time)

    comparison = compare(baseline, trace)
    profiles = (rank_profile(baseline), rank_profile(trace)) if ranks else (None, None)
    if as_json:
        return *profiles, comparison.to_dict(), None
    return *profiles, None, comparison.to_text()


def run_compare(args: argparse.Namespace) -> int:
    """``compare``: two traces side by side, or two runs rank by rank, as text or JSON."""
    args.skipped = []
    baselines, traces = _run_traces(args, args.baseline), _run_traces(args, args.trace)
    if len(baselines) != len(traces):
        print(
            f"error: {args.baseline} holds {len(baselines)} trace(s) and {args.trace} "
            f"{len(traces)}: compare pairs them rank by rank",
            file=sys.stderr,
        )
        return EXIT_BAD_TRACE
    multi = _is_multi([args.baseline]) or _is_multi([args.trace])
    pairs, by_rank = pair_by_rank(baselines, traces)
    paired_by = "recorded rank" if by_rank else "file-name order"
    task = partial(_compare_task, ranks=multi, as_json=args.json)
    outcomes = analyse_files(
        pairs,
        task,
        max_bytes=args.max_trace_bytes,
        workers=args.jobs,
        keep=args.keep_traces if len(pairs) == 1 else None,
    )
    status = _report_errors(outcomes)
    done = [o.value for o in outcomes if o.value is not None]
    if not multi:
        for _, _, document, text in done:
            print(json.dumps(document, indent=2) if args.json else text)
        return status
    if not done and not args.json:  # every pair refused: the error lines say it all
        return status
    profiles: tuple[list[RankProfile], list[RankProfile]] = (
        [a for a, _, _, _ in done if a is not None],
        [b for _, b, _, _ in done if b is not None],
    )
    # A pair refused for one file still has a side that reads: its rank belongs in its own
    # run's analysis (its error line is already printed, once).
    alone = [
        (side, path)
        for outcome in outcomes
        if outcome.value is None
        for side, path in enumerate(outcome.files)
        if path not in outcome.unreadable
    ]
    if alone:
        read = analyse_files(
            [path for _, path in alone],
            rank_profile,
            max_bytes=args.max_trace_bytes,
            workers=args.jobs,
        )
        for (side, _), outcome in zip(alone, read, strict=True):
            if outcome.value is not None:
                profiles[side].append(outcome.value)
    baseline_report = cross_rank(profiles[0])
    trace_report = cross_rank(profiles[1])
    if args.json:
        document = {
            "paired_by": paired_by,
            "pairs": [document for _, _, document, _ in done],
            "errors": _errors(outcomes),
            "skipped": args.skipped,
            "baseline_cross_rank": baseline_report.to_dict(),
            "trace_cross_rank": trace_report.to_dict(),
        }
        print(json.dumps(document, indent=2, allow_nan=False))
    else:
        how = (
            "Traces paired by the rank each records"
            if by_rank
            else "Traces paired in file-name order (not every trace records a rank of its own, "
            "or one could not be read, or the two runs hold different ranks)"
        )
        texts = [how, *(text for _, _, _, text in done)]
        texts.append(format_cross_rank(baseline_report, "Baseline across ranks"))
        texts.append(format_cross_rank(trace_report, "Trace across ranks"))
        print("\n\n".join(texts))
    return status


def add_compare_parser(subcommands: Any) -> None:
    """Register ``compare``."""
    parser = subcommands.add_parser(
        "compare",
        help="two traces side by side (e.g. eager against torch.compile), or two runs rank by rank",
        description=(
            "Compare TRACE with BASELINE: per-step CPU and GPU time (the whole recording's, "
            "for traces without steps), kernel and launch counts, ops and kernels only in one "
            "of them, and compile-cpu-tax."
        ),
        epilog=f"{COMPARE_JSON_HELP}\n\n{COMPARE_MULTI_RANK_JSON_HELP}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "baseline", help="the reference trace (e.g. the eager run), or a directory of its ranks"
    )
    parser.add_argument(
        "trace",
        help="the trace to compare with it (e.g. the compiled run), or a directory of its ranks",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    _add_loading_options(parser)
    parser.set_defaults(handler=run_compare, command_parser=parser)


def _add_traces_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="a trace written by torch.profiler (.json or .json.gz); several files or a "
        "directory of per-rank traces give the per-rank table and the cross-rank findings",
    )


def _add_loading_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-trace-bytes",
        type=_at_least_one,
        metavar="N",
        help="refuse a trace whose decompressed size is over N bytes (default: "
        "PROFILING_UTILS_MAX_TRACE_BYTES, else a third of the available memory, shared among "
        "the traces loaded at once)",
    )
    parser.add_argument(
        "--jobs",
        type=_at_least_one,
        metavar="N",
        help="traces to load at once, each in its own process (default: one per core)",
    )


# -- entry point ------------------------------------------------------------------------------


def _program_name() -> str:
    """``python -m profiling_utils`` when started that way, else the console script's name."""
    started_as = getattr(sys.modules.get("__main__"), "__spec__", None)
    if started_as is not None and started_as.name == "profiling_utils.__main__":
        return "python -m profiling_utils"
    return "profiling-utils"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one subparser per command, each with its ``handler``."""
    parser = argparse.ArgumentParser(
        prog=_program_name(),
        description="Read PyTorch profiler traces: summarize, diagnose, compare.",
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_summary_parser(subcommands)
    add_diagnose_parser(subcommands)
    add_compare_parser(subcommands)
    parser.set_defaults(commands=subcommands.choices)  # for the usage errors' hints
    return parser


def _unrecognized(args: argparse.Namespace, unknown: list[str]) -> str:
    """The usage error for arguments the command does not take, with what each was probably
    meant to be."""
    options = {
        name: {option for action in sub._actions for option in action.option_strings}
        for name, sub in args.commands.items()
    }
    command = args.command
    hints = []
    for given in unknown:
        option = given.split("=", 1)[0]
        if option in options[command]:
            hints.append(f"{option} goes after the command's name: {command} {option} ...")
        elif option.startswith("-"):
            takers = [name for name, known in options.items() if option in known]
            if takers:
                hints.append(f"{option} is an option of {' and '.join(takers)}, not of {command}")
        elif command == "compare":
            hints.append("compare takes two paths, BASELINE and TRACE, files or directories")
    return "; ".join([f"unrecognized arguments: {' '.join(unknown)}", *dict.fromkeys(hints)])


def main(argv: Sequence[str] | None = None, *, keep_traces: list[Trace] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a trace that cannot be read).

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
        keep_traces: A list that a trace analysed in this process is appended to rather than
            freed, for a caller that exits without tearing down the interpreter (see
            :func:`profiling_utils.ranks.analyse_files`).
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        args.command_parser.error(_unrecognized(args, unknown))
    args.keep_traces = keep_traces
    if getattr(args, "max_trace_bytes", 0) is None:
        try:  # a setting that no trace can be read under: a usage error, said once
            default_max_bytes()
        except ValueError as err:
            parser.error(str(err))
    try:
        return args.handler(args)
    except TraceError as err:
        message = " ".join(str(err).split())  # one line, whatever the reason held
        print(f"error: {message}", file=sys.stderr)
        return EXIT_BAD_TRACE
    except BrokenPipeError:
        # The reader closed the pipe (``... | head``): not an error. Point stdout at devnull
        # so that the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
