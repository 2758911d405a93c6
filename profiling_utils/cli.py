"""Command line: ``python -m profiling_utils COMMAND ...`` (also installed as ``profiling-utils``).

Commands:

``summary TRACE [--json] [--top N]``
    What a trace holds and what the measurements say: device and versions, lanes, every step
    (CPU time, GPU busy time and idle fraction, lane offset, dead window, launch delays, GPU
    gaps), the top kernels with their launch API, planning calls, memory copies, torch.compile
    regions and the profiler's own overhead. Readable text by default; with ``--json``, one
    JSON object with these keys:

    - ``file``: the trace path as given.
    - ``spans``: number of complete events; ``duration_us``: end of the last one (µs from the
      first); ``has_gpu``: whether there is any GPU work.
    - ``devices``: ``[{id, name, sm_count, total_memory_bytes, compute_capability}]``;
      ``cuda_runtime_version``, ``cuda_driver_version`` (``"13.0"``), ``cupti_version``,
      ``base_time_ns``.
    - ``lanes``: ``[{label, kind, pid, tid, device, stream, spans, busy_us}]``; ``busy_us`` sums
      the durations of the lane's top-level spans.
    - ``steps``: ``[{step, cpu_us, gpu_busy_us, gpu_window_us, gpu_idle_fraction,
      gpu_activities, lane_offset_us, dead_window_us, launch_delay_median_us,
      launch_delay_max_us, gpu_gap_count, gpu_gap_total_us, gpu_gap_max_us}]``; values that do
      not apply (no GPU work in the step, no label around it) are ``null``.
    - ``top_kernels``: the ``--top`` kernel names by total time, ``[{name, count, total_us,
      min_us, median_us, mean_us, max_us, spread, outlier_steps, apis, planning_calls,
      footprint}]``; ``apis`` and ``planning_calls`` map a call name to a count, ``footprint``
      is the first instance's ``{registers_per_thread, shared_memory_bytes, grid, block,
      blocks_per_sm, warps_per_sm, occupancy_pct}``.
    - ``launch_apis``: kernels per launch API (``"unknown"`` when the launch is not in the
      trace); ``planning_calls``: planning calls per name.
    - ``memory``: per kind (``DtoD``, ``HtoD``, ``memset``...): ``{kind, count, total_bytes,
      median_bandwidth_gb_s, ops}``, ``ops`` mapping the issuing op to a count; the bandwidth
      counts bytes copied (or set) per second, each byte once, GB = 10^9 bytes.
    - ``compile``: ``{regions, region_ids, cache_lookups, cache_lookup_us, aot_wrappers,
      graph_calls, graph_hashes, cuda_graph_launches}`` (counts, ids and hashes).
    - ``overhead``: ``[{name, count, total_us}]`` for the profiler's overhead lane.

A trace that cannot be read prints one line on stderr, ``error: FILE: what is wrong``, and
exits with status 2 (the status argparse uses for bad usage).

``diagnose TRACE [--json] [--select IDS] [--ignore IDS]`` applies the trace reading cheatsheet
(:mod:`profiling_utils.rules`); ``compare BASELINE TRACE [--json]`` puts two traces side by side
(:mod:`profiling_utils.compare`). Their JSON output is described in their ``--help``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import Any

from . import measures
from .compare import compare
from .errors import TraceError
from .rules import diagnose, diagnosis_dict, format_diagnosis, rule_ids, select_rules
from .trace import Trace, load_trace

__all__ = ["main", "build_parser", "summarize", "format_summary", "run_diagnose", "run_compare"]

EXIT_BAD_TRACE = 2


# -- summary ----------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _steps(trace: Trace) -> list[dict[str, Any]]:
    offsets = {o.step: o.offset_us for o in measures.lane_offset(trace)}
    dead = {}
    for window in measures.dead_windows(trace):
        dead.setdefault(window.step, window.gap_us)
    delays: dict[int, list[float]] = {}
    for delay in measures.launch_delays(trace):
        if delay.step is not None:
            delays.setdefault(delay.step, []).append(delay.delay_us)
    gaps: dict[int, list[float]] = {}
    for gap in measures.gpu_gaps(trace):
        gaps.setdefault(gap.step, []).append(gap.gap_us)
    rows = []
    for timing in measures.step_times(trace):
        row = timing.to_dict()
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


def _kernels(trace: Trace, top: int) -> tuple[list[dict[str, Any]], Counter, Counter]:
    launches = measures.kernel_launches(trace)
    by_name: dict[str, list[measures.KernelLaunch]] = {}
    for launch in launches:
        by_name.setdefault(launch.kernel.name, []).append(launch)
    rows = []
    for stats in measures.kernel_stats(trace)[:top]:
        named = by_name[stats.name]
        row = stats.to_dict()
        row["apis"] = dict(Counter(k.api or "unknown" for k in named).most_common())
        row["planning_calls"] = dict(
            Counter(c.name for k in named for c in k.planning_calls).most_common()
        )
        row["footprint"] = named[0].footprint.to_dict()
        rows.append(row)
    apis = Counter(k.api or "unknown" for k in launches)
    planning = Counter(c.name for k in launches for c in k.planning_calls)
    return rows, apis, planning


def _memory(trace: Trace) -> list[dict[str, Any]]:
    by_kind: dict[str, list[measures.MemoryCopy]] = {}
    for copy in measures.memory_copies(trace):
        by_kind.setdefault(copy.kind, []).append(copy)
    return [
        {
            "kind": kind,
            "count": len(copies),
            "total_bytes": sum(c.bytes or 0 for c in copies),
            "median_bandwidth_gb_s": _median(
                [c.bandwidth_gb_s for c in copies if c.bandwidth_gb_s is not None]
            ),
            "ops": dict(Counter(c.op.name if c.op else "unknown" for c in copies).most_common()),
        }
        for kind, copies in sorted(by_kind.items())
    ]


def summarize(trace: Trace, *, file: str | None = None, top: int = 10) -> dict[str, Any]:
    """Everything ``summary`` reports, as one JSON-ready dict (keys in the module docs)."""
    kernels, apis, planning = _kernels(trace, top)
    compiled = measures.compiled_regions(trace)
    overhead: dict[str, list[float]] = {}
    for span in trace.overhead:
        overhead.setdefault(span.name, []).append(span.dur)
    return {
        "file": str(trace.path) if file is None else file,
        "spans": len(trace.spans),
        "duration_us": max((s.end for s in trace.spans), default=0.0),
        "has_gpu": trace.has_gpu,
        "devices": [dataclasses.asdict(device) for device in trace.devices],
        "cuda_runtime_version": trace.cuda_runtime_version,
        "cuda_driver_version": trace.cuda_driver_version,
        "cupti_version": trace.cupti_version,
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
                "busy_us": sum(s.dur for s in trace.lane_spans(lane) if s.depth == 0),
            }
            for lane in trace.lanes
        ],
        "steps": _steps(trace),
        "top_kernels": kernels,
        "launch_apis": dict(apis.most_common()),
        "planning_calls": dict(planning.most_common()),
        "memory": _memory(trace),
        "compile": {
            "regions": len(compiled.regions),
            "region_ids": list(compiled.region_ids),
            "cache_lookups": len(compiled.cache_lookups),
            "cache_lookup_us": compiled.cache_lookup_us,
            "aot_wrappers": len(compiled.aot_wrappers),
            "graph_calls": len(compiled.graph_calls),
            "graph_hashes": list(compiled.graph_hashes),
            "cuda_graph_launches": len(compiled.cuda_graph_launches),
        },
        "overhead": [
            {"name": name, "count": len(durations), "total_us": sum(durations)}
            for name, durations in overhead.items()
        ],
    }


def _us(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{name} x{count}" for name, count in counter.items()) or "none"


def _short(name: str, width: int = 72) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def format_summary(summary: dict[str, Any]) -> str:
    """The readable text of ``summary`` for a dict made by :func:`summarize`."""
    out = [summary["file"]]
    for device in summary["devices"]:
        facts = []
        if device["sm_count"] is not None:
            facts.append(f"{device['sm_count']} SMs")
        if device["total_memory_bytes"] is not None:
            facts.append(_bytes(device["total_memory_bytes"]))
        if device["compute_capability"] is not None:
            facts.append("compute {}.{}".format(*device["compute_capability"]))
        out.append(f"  GPU {device['id']}: {device['name']} ({', '.join(facts)})")
    versions = [
        f"{label} {summary[key]}"
        for label, key in (
            ("CUDA runtime", "cuda_runtime_version"),
            ("driver", "cuda_driver_version"),
            ("CUPTI", "cupti_version"),
        )
        if summary[key] is not None
    ]
    if versions:
        out.append("  " + ", ".join(versions))
    gpu = "GPU work recorded" if summary["has_gpu"] else "no GPU work (CPU-only trace)"
    out.append(f"  {summary['spans']:,} spans over {_us(summary['duration_us'])} µs; {gpu}")

    out += ["", "Lanes"]
    for lane in summary["lanes"]:
        out.append(
            f"  {lane['label']:<28} {lane['kind']:<9} {lane['spans']:>8,} spans"
            f"  {_us(lane['busy_us']):>12} µs busy"
        )

    out += ["", "Steps (µs)"]
    if summary["steps"]:
        out.append(
            f"  {'step':>5} {'CPU':>10} {'GPU busy':>9} {'idle':>4} {'lane off.':>9}"
            f" {'dead win.':>9} {'delay med':>9} {'delay max':>9} {'gaps':>5} {'gap max':>8}"
        )
        for s in summary["steps"]:
            idle = "-" if s["gpu_idle_fraction"] is None else f"{s['gpu_idle_fraction']:.0%}"
            out.append(
                f"  {s['step']:>5} {_us(s['cpu_us']):>10} {_us(s['gpu_busy_us']):>9}"
                f" {idle:>4} {_us(s['lane_offset_us']):>9} {_us(s['dead_window_us']):>9}"
                f" {_us(s['launch_delay_median_us']):>9} {_us(s['launch_delay_max_us']):>9}"
                f" {s['gpu_gap_count']:>5} {_us(s['gpu_gap_max_us']):>8}"
            )
    else:
        out.append("  no ProfilerStep#N annotations")

    out += ["", "Top kernels by total time (µs)"]
    if summary["top_kernels"]:
        out.append(
            f"  {'count':>6} {'total':>10} {'median':>9} {'min':>9} {'max':>9} {'spread':>7}"
            "  launched by / name"
        )
        for k in summary["top_kernels"]:
            out.append(
                f"  {k['count']:>6,} {_us(k['total_us']):>10} {_us(k['median_us'], 2):>9}"
                f" {_us(k['min_us'], 2):>9} {_us(k['max_us'], 2):>9} {k['spread']:>7.1%}"
                f"  {'/'.join(k['apis'])}"
            )
            out.append(f"{'':>8}{_short(k['name'])}")
            if k["planning_calls"]:
                out.append(f"{'':>8}planned with: {_counts(k['planning_calls'])}")
            if k["outlier_steps"]:
                steps = ", ".join(str(n) for n in k["outlier_steps"])
                out.append(f"{'':>8}outlier steps: {steps}")
    else:
        out.append("  none")
    out += [
        "",
        f"Launch APIs: {_counts(summary['launch_apis'])}",
        f"Planning calls: {_counts(summary['planning_calls'])}",
    ]

    out += ["", "Memory copies and sets (GB/s: 10^9 bytes copied per second)"]
    for m in summary["memory"] or []:
        # A memset of a few bytes has no meaningful rate: its size and callers say enough.
        rate = (
            ""
            if m["kind"] == "memset"
            else f" median {_us(m['median_bandwidth_gb_s'], 2)} GB/s copied,"
        )
        out.append(
            f"  {m['kind']:<8} x{m['count']:<5} {_bytes(m['total_bytes']):>12} total,{rate}"
            f" from {_counts(m['ops'])}"
        )
    if not summary["memory"]:
        out.append("  none")

    c = summary["compile"]
    out += ["", "torch.compile"]
    if c["regions"] or c["graph_calls"] or c["cache_lookups"]:
        out.append(
            f"  {c['regions']} compiled-region calls ({', '.join(c['region_ids']) or '-'}),"
            f" {c['cache_lookups']} cache lookups ({_us(c['cache_lookup_us'])} µs),"
            f" {c['aot_wrappers']} AOT wrapper spans"
        )
        out.append(f"  graphs: {', '.join(c['graph_hashes']) or '-'}")
    else:
        out.append("  not compiled")
    out.append(f"  CUDA graph launches: {c['cuda_graph_launches']}")

    out += ["", "Profiler overhead"]
    for o in summary["overhead"]:
        out.append(f"  {o['name']} x{o['count']} ({_us(o['total_us'])} µs)")
    if not summary["overhead"]:
        out.append("  none recorded")
    return "\n".join(out)


def run_summary(args: argparse.Namespace) -> int:
    """``summary``: print the summary of one trace as text or JSON."""
    trace = load_trace(args.trace)
    summary = summarize(trace, file=args.trace, top=args.top)
    if args.json:
        print(json.dumps(summary, indent=2, allow_nan=False))
    else:
        print(format_summary(summary))
    return 0


def _summary_keys_help() -> str:
    """The JSON keys documented in the module docstring, for ``summary --help``."""
    doc = __doc__ or ""
    start, end = doc.find("    - ``file``"), doc.find("\n\nA trace that")
    keys = textwrap.dedent(doc[start:end]) if 0 <= start < end else ""
    return keys.replace("``", "")  # reStructuredText literals read as noise in a terminal


def add_summary_parser(subcommands: Any) -> None:
    """Register ``summary``."""
    parser = subcommands.add_parser(
        "summary",
        help="steps, lanes, top kernels and the measurements of one trace",
        description="Summarize one trace: readable text, or one JSON object with --json.",
        epilog="JSON keys:\n" + _summary_keys_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("trace", help="a trace written by torch.profiler (.json or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="kernel names to list (default 10)"
    )
    parser.set_defaults(handler=run_summary)


# -- diagnose and compare ---------------------------------------------------------------------

DIAGNOSE_JSON_HELP = """\
JSON (--json): one object
  trace     the trace path as given
  device    the GPU name(s) the trace records, or null
  findings  [{rule, table, severity, message, evidence}], grouped by cheatsheet table, the
            most important first; severity is "info" (worth knowing) or "warning" (worth
            acting on); evidence holds the steps, event names, times (µs from the trace's
            first event), durations and measured numbers behind the message.
Exit status: 0 when it ran, with or without findings; 2 for an unreadable trace or an unknown
rule id, with one line on stderr."""

COMPARE_JSON_HELP = """\
JSON (--json): one object
  baseline, trace  {trace, device, steps, median_step_cpu_us, median_step_gpu_busy_us,
                   kernels, launches, gpu_activities, kernels_per_step, launches_per_step,
                   launch_apis, compiled, cuda_graph_launches}
  cpu_ratio        median step CPU time of TRACE over BASELINE
  steps            [{index, baseline_step, trace_step, baseline_cpu_us, trace_cpu_us,
                   baseline_gpu_busy_us, trace_gpu_busy_us}], steps paired by position
  ops_only_in_baseline, ops_only_in_trace, kernels_only_in_baseline,
  kernels_only_in_trace  [{name, count}]
  findings         [{rule, table, severity, message, evidence}] of the rules that need a
                   baseline (compile-cpu-tax)
Exit status: 0 when it ran; 2 for an unreadable trace, with one line on stderr."""


def _rule_id_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def run_diagnose(args: argparse.Namespace) -> int:
    """``diagnose``: print the cheatsheet's findings for one trace as text or JSON."""
    try:
        select_rules(args.select, args.ignore)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_TRACE
    trace = load_trace(args.trace)
    findings = diagnose(trace, select=args.select, ignore=args.ignore)
    if args.json:
        print(json.dumps(diagnosis_dict(trace, findings, file=args.trace), indent=2))
    else:
        print(format_diagnosis(trace, findings, file=args.trace))
    return 0


def add_diagnose_parser(subcommands: Any) -> None:
    """Register ``diagnose``."""
    parser = subcommands.add_parser(
        "diagnose",
        help="apply the trace reading cheatsheet to one trace",
        description=(
            "Find the cheatsheet's patterns in one trace and show the evidence for each, "
            "grouped by cheatsheet table, the most important first. (compile-cpu-tax needs "
            "an eager baseline: compare reports it.)"
        ),
        epilog=f"{DIAGNOSE_JSON_HELP}\n\nRule ids: {', '.join(rule_ids())}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("trace", help="a trace written by torch.profiler (.json or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
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
    parser.set_defaults(handler=run_diagnose)


def run_compare(args: argparse.Namespace) -> int:
    """``compare``: print two traces side by side as text or JSON."""
    comparison = compare(load_trace(args.baseline), load_trace(args.trace))
    if args.json:
        print(json.dumps(comparison.to_dict(), indent=2))
    else:
        print(comparison.to_text())
    return 0


def add_compare_parser(subcommands: Any) -> None:
    """Register ``compare``."""
    parser = subcommands.add_parser(
        "compare",
        help="two traces side by side (e.g. eager against torch.compile)",
        description=(
            "Compare TRACE with BASELINE: per-step CPU and GPU time, kernel and launch "
            "counts, ops and kernels only in one of them, and compile-cpu-tax."
        ),
        epilog=COMPARE_JSON_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("baseline", help="the reference trace (e.g. the eager run)")
    parser.add_argument("trace", help="the trace to compare with it (e.g. the compiled run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run_compare)


# -- entry point ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: one subparser per command, each with its ``handler``."""
    parser = argparse.ArgumentParser(
        prog="python -m profiling_utils",
        description="Read PyTorch profiler traces: summarize, diagnose, compare.",
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_summary_parser(subcommands)
    add_diagnose_parser(subcommands)
    add_compare_parser(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a trace that cannot be read)."""
    args = build_parser().parse_args(argv)
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
