"""Benchmark the command line on trace shapes that once made it quadratic or never finish.

Each trace is small (at most 200,000 events) but has one extreme shape: a long recursion of
calls of one name, long ops beside busy threads, tens of thousands of steps (bare, each with a
label, each with a data loader's label) or threads, launches captured into thousands of
graphs, a GPU pid in the trillions. A command that grows linearly reads each in about a
second; the code before the fixes named in ``benchmarks/README.md`` took 8 s, 50 s, or never
returned.

Every run is a whole ``python -m profiling_utils COMMAND FILE --json`` process, timed from
outside (wall time, ``time.perf_counter()``), with a time limit, so a command that does not
finish shows as a limit, not as a hang. The traces are written to a temporary folder.

Run from the repository root::

    python benchmarks/bench_shapes.py                # markdown rows for benchmarks/README.md
    python benchmarks/bench_shapes.py --limit 120
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _span(name: str, cat: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1, **args: Any):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid,
            "args": args}  # fmt: skip


def _launched(i: int, ts: float, pid: Any = 0) -> list[dict[str, Any]]:
    """An op, its launch and the kernel it launched, ``i`` their correlation id."""
    return [
        _span("aten::mm", "cpu_op", ts, 5),
        _span("cudaLaunchKernel", "cuda_runtime", ts + 1, 2, correlation=i),
        _span("gemm", "kernel", ts + 4, 3, pid=pid, tid=7, correlation=i),
    ]


_LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def shapes() -> dict[str, tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """Name: (what is extreme about it, events, other top-level keys)."""
    chain = [_span("aten::to", "cpu_op", i, 100_000 - 2 * i) for i in range(20_000)]
    beside: list[dict[str, Any]] = []
    for thread in range(50):
        for i in range(400):
            beside.append(_span("aten::matmul", "cpu_op", i * 10, 100_000, tid=thread))
            beside.append(_span("aten::mm", "cpu_op", i * 10 + 1, 5, tid=thread))
    steps: list[dict[str, Any]] = []
    for i in range(50_000):
        steps.append(_span(f"ProfilerStep#{i}", "user_annotation", i * 10, 9))
        steps += _launched(i + 1, i * 10 + 0.5)
    labelled: list[dict[str, Any]] = []  # a label inside each step, as capture() writes
    loading: list[dict[str, Any]] = []  # the data loader's label at each step's start
    for i in range(20_000):
        t = i * 20
        for events, label in ((labelled, "train_step"), (loading, _LOADER)):
            events.append(_span(f"ProfilerStep#{i}", "user_annotation", t, 19))
            events.append(_span(label, "user_annotation", t + 0.5, 6))
            events += _launched(i + 1, t + 8 if label == _LOADER else t + 1)
    captured: list[dict[str, Any]] = []  # graphs captured for many shapes, as servers start
    for c in range(2_000):
        t = c * 200
        captured.append(_span("cudaStreamBeginCapture", "cuda_runtime", t, 1))
        for k in range(10):  # launches with no GPU record: captured, they run at replay
            captured.append(_span("aten::mm", "cpu_op", t + 2 + k * 15, 10))
            captured.append(_span("cudaLaunchKernel", "cuda_runtime", t + 3 + k * 15, 5,
                                  correlation=c * 10 + k + 1))  # fmt: skip
        captured.append(_span("cudaStreamEndCapture", "cuda_runtime", t + 160, 1))
    threads = [_span("aten::add", "cpu_op", i, 1, tid=i) for i in range(30_000)]
    amd = [_span("hipLaunchKernel", "cuda_runtime", 0, 1, correlation=1)]
    amd.append(_span("k", "kernel", 5, 1, pid=9, tid=0, correlation=1))
    amd.append(_span("hipLaunchKernel", "cuda_runtime", 10, 1, correlation=2))
    amd.append(_span("k", "kernel", 15, 1, pid=2**40 + 3, tid=0, correlation=2))
    mi300x = {"name": "AMD Instinct MI300X", "numSms": 304, "computeMajor": 9, "computeMinor": 4}
    devices = {"deviceProperties": [dict(mi300x, id=i) for i in range(8)]}
    return {
        "same-name chain": ("20,000 nested calls of one name", chain, {}),
        "long ops beside threads": ("20,000 overlapping 100 ms matmuls on 50 threads", beside, {}),
        "many steps": ("50,000 steps, a kernel each", steps, {}),
        "labelled steps": ("20,000 steps, each a label around its op", labelled, {}),
        "data loader steps": ("20,000 steps, each a data loader's next()", loading, {}),
        "graph captures": ("20,000 launches captured in 2,000 graphs", captured, {}),
        "many threads": ("30,000 threads", threads, {}),
        "huge AMD GPU pid": ("a ROCm GPU pid of 2**40 + 3", amd, devices),
    }


def run_seconds(limit: float, *argv: str) -> float | None:
    """Wall time of one ``python -m profiling_utils ...`` process; ``None`` past ``limit``."""
    start = time.perf_counter()
    try:
        subprocess.run(
            [sys.executable, "-m", "profiling_utils", *argv],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell (median shown)")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds before a run stops")
    args = parser.parse_args()
    print("| trace | what is extreme | events | `summary`, wall | `diagnose`, wall |")
    print("| :-- | :-- | --: | --: | --: |")
    with tempfile.TemporaryDirectory() as folder:
        for name, (what, events, top) in shapes().items():
            path = Path(folder) / f"{name.replace(' ', '_')}.json"
            path.write_text(json.dumps({"schemaVersion": 1, **top, "traceEvents": events}))
            cells = []
            for command in ("summary", "diagnose"):
                times = [run_seconds(args.limit, command, "--json", str(path))]
                if times[0] is not None:
                    times += [run_seconds(args.limit, command, "--json", str(path))
                              for _ in range(args.repeat - 1)]  # fmt: skip
                finished = [t for t in times if t is not None]
                cells.append(
                    f"{statistics.median(finished):.2f} s"
                    if len(finished) == len(times)
                    else f"over {args.limit:.0f} s"
                )
            print(f"| {name} | {what} | {len(events):,} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
