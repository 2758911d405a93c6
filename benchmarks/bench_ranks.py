"""Benchmark the command line on a directory of N per-rank traces: parallel against serial.

``summary``, ``diagnose`` and ``compare`` load each trace of a directory in its own worker
process, as many at once as there are cores. Target (issue 9): N traces take about
N / cores times one trace.

The directory holds N links to one trace (by default the 1x training trace of
:mod:`make_large_trace`, about 89 MB and 265k events, built under ``benchmarks/_data/`` on
first use). Every run is a whole ``python -m profiling_utils summary DIR --json`` process, the
interpreter's start and the output included, timed from outside with ``time.perf_counter()``
(wall) and ``getrusage(RUSAGE_CHILDREN)`` (CPU time, the workers' included: on a busy machine
wall time says little, and CPU time shows what the parallel path costs in all):

- ``parallel``: the default, one worker per core;
- ``serial``: ``--jobs 1``, every trace in the main process, one after the other;
- ``one trace``: ``summary FILE --json`` on the trace alone.

Run from the repository root::

    python benchmarks/bench_ranks.py                 # markdown rows for benchmarks/README.md
    python benchmarks/bench_ranks.py --ranks 2 4 8 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large_trace import BASE_SCALE, make  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_seconds(*argv: str) -> tuple[float, float]:
    """Wall time and CPU time (user + system, the workers included) of one
    ``python -m profiling_utils ...`` process, stdout discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "profiling_utils", *argv],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def median_run(repeat: int, *argv: str) -> tuple[float, float]:
    """Median wall time and median CPU time of ``repeat`` runs."""
    runs = [run_seconds(*argv) for _ in range(repeat)]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def cores() -> int:
    """The cores this process may run on (what the CLI's pool uses)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, help="the trace to replicate (default: the 1x)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    trace = args.trace or make(BASE_SCALE, compress=True)
    single, single_cpu = median_run(args.repeat, "summary", str(trace), "--json")
    print(
        f"cores: {cores()}; one trace ({trace.name}): {single:.2f} s wall, "
        f"{single_cpu:.2f} s CPU (median of {args.repeat}); load average before: "
        f"{os.getloadavg()[0]:.1f}"
    )
    print()
    print(
        "| traces | serial wall (--jobs 1) | parallel wall | parallel CPU "
        "| parallel wall / one trace | N / cores |"
    )
    print("| --: | --: | --: | --: | --: | --: |")
    for count in args.ranks:
        with tempfile.TemporaryDirectory() as directory:
            for rank in range(count):
                link = Path(directory) / f"rank-{rank}{''.join(trace.suffixes)}"
                link.symlink_to(trace.resolve())
            serial, _ = median_run(args.repeat, "summary", directory, "--json", "--jobs", "1")
            parallel, parallel_cpu = median_run(args.repeat, "summary", directory, "--json")
        print(
            f"| {count} | {serial:.2f} s | {parallel:.2f} s | {parallel_cpu:.2f} s"
            f" | {parallel / single:.2f}x | {count / cores():.2f} |"
        )


if __name__ == "__main__":
    main()
