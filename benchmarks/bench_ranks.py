"""Benchmark the command line on a directory of N per-rank traces: parallel against serial.

``summary``, ``diagnose`` and ``compare`` load each trace of a directory in its own worker
process, as many at once as there are cores. Target (issue 9): N traces take about
N / cores times one trace.

The directory holds N links to one trace (by default the 1x training trace of
:mod:`make_large_trace`, about 89 MB and 265k events, built under ``benchmarks/_data/`` on
first use). Every run is a whole ``python -m profiling_utils summary DIR --json`` process, the
interpreter's start and the output included, timed from outside with ``time.perf_counter()``:

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large_trace import BASE_SCALE, make  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_seconds(*argv: str) -> float:
    """Wall time of one ``python -m profiling_utils ...`` process (stdout discarded)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "profiling_utils", *argv],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


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
    one = [run_seconds("summary", str(trace), "--json") for _ in range(args.repeat)]
    single = statistics.median(one)
    print(f"cores: {cores()}; one trace ({trace.name}): {single:.2f} s (median of {len(one)})")
    print()
    print("| traces | serial (--jobs 1) | parallel | parallel / one trace | N / cores |")
    print("| --: | --: | --: | --: | --: |")
    for count in args.ranks:
        with tempfile.TemporaryDirectory() as directory:
            for rank in range(count):
                link = Path(directory) / f"rank-{rank}{''.join(trace.suffixes)}"
                link.symlink_to(trace.resolve())
            serial = statistics.median(
                run_seconds("summary", directory, "--json", "--jobs", "1")
                for _ in range(args.repeat)
            )
            parallel = statistics.median(
                run_seconds("summary", directory, "--json") for _ in range(args.repeat)
            )
        print(
            f"| {count} | {serial:.2f} s | {parallel:.2f} s | {parallel / single:.2f}x"
            f" | {count / cores():.2f} |"
        )


if __name__ == "__main__":
    main()
