"""Benchmark :func:`profiling_utils.load_trace` on large training traces (not a timed test).

Builds (once, under ``benchmarks/_data/``) the 1x, 2x and 4x traces of
:mod:`make_large_trace` — 1x is about 89 MB and 265k events — and loads each ``--repeat``
times, every load in a fresh Python process, recording:

- load time: ``time.perf_counter()`` around ``load_trace`` (the full model build included),
  and the CPU time of the same call (``time.process_time()``), which other work on a shared
  machine disturbs less;
- peak memory: the child's peak resident set (``VmHWM``; the whole process: interpreter,
  imports, file bytes and the model), compared with the uncompressed file size.

Targets (issue 2): 1x in under 1.5 s on a 2-core machine, peak memory under 3x the file size,
linear growth. Run from the repository root::

    python benchmarks/bench_load.py            # markdown table for benchmarks/README.md
    python benchmarks/bench_load.py --json     # the raw measurements
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_large_trace import BASE_SCALE, ROOT, make  # noqa: E402

# Peak RSS comes from VmHWM, the high-water mark of the child's own address space. ru_maxrss
# would not do: Linux carries it across exec, so a child reports at least the RSS its parent
# had when it was spawned (these scripts hold whole traces while they count their events).
CHILD_PREAMBLE = """
import json, sys, time

def peak_rss_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")

"""
CHILD = (
    CHILD_PREAMBLE
    + """
from profiling_utils import load_trace
imported = peak_rss_bytes()
start, cpu_start = time.perf_counter(), time.process_time()
trace = load_trace(sys.argv[1])
seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
peak = peak_rss_bytes()
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss_bytes": peak,
                  "imported_rss_bytes": imported, "spans": len(trace.spans),
                  "steps": len(trace.steps), "gpu_work": len(trace.gpu_work)}))
"""
)


def machine() -> dict[str, str]:
    """The machine the numbers come from."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024**2:.0f} GiB"
    except OSError:
        pass
    return {
        "cpus": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"),
        "cpu": model,
        "memory": memory,
        "python": platform.python_version(),
        "msgspec": msgspec.__version__,
        "os": platform.platform(),
    }


def run_child(code: str, path: Path) -> dict[str, Any]:
    """Run ``code`` on ``path`` in a fresh Python process; the JSON of its last output line."""
    path_entries = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path_entries))}
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(path: Path) -> dict[str, Any]:
    """Load ``path`` once in a fresh process."""
    return run_child(CHILD, path)


def count_events(path: Path) -> int:
    class Top(msgspec.Struct):
        traceEvents: list[msgspec.Raw]  # noqa: N815 (the trace's key)

    return len(msgspec.json.decode(path.read_bytes(), type=Top).traceEvents)


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark load_trace on large traces.")
    parser.add_argument("--multiples", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=5, help="loads per size")
    parser.add_argument("--json", action="store_true", help="print raw measurements as JSON")
    parser.add_argument("--gzip", action="store_true", help="also load the 1x trace as .json.gz")
    args = parser.parse_args()

    cases = [(m, make(round(BASE_SCALE * m, 6))) for m in args.multiples]
    if args.gzip:
        cases.append((1, make(BASE_SCALE, compress=True)))
    rows = []
    for multiple, path in cases:
        raw_path = path.with_name(path.name.removesuffix(".gz"))
        size = raw_path.stat().st_size  # the uncompressed size, for both forms
        measure(path)  # warm the page cache: every timed run reads from memory
        runs = [measure(path) for _ in range(args.repeat)]
        seconds = [r["seconds"] for r in runs]
        cpu = [r["cpu_seconds"] for r in runs]
        peak = max(r["peak_rss_bytes"] for r in runs)
        rows.append(
            {
                "multiple": multiple,
                "file": path.name,
                "size_bytes": size,
                "events": count_events(raw_path),
                "spans": runs[0]["spans"],
                "steps": runs[0]["steps"],
                "seconds_min": min(seconds),
                "seconds_median": statistics.median(seconds),
                "seconds_max": max(seconds),
                "cpu_seconds_median": statistics.median(cpu),
                "peak_rss_bytes": peak,
                "imported_rss_bytes": runs[0]["imported_rss_bytes"],
                "peak_over_size": peak / size,
            }
        )
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
        return
    info = machine()
    print(
        f"Machine: {info['cpus']} CPUs ({info['cpu']}), {info['memory']} RAM; "
        f"Python {info['python']}, msgspec {info['msgspec']}; {info['os']}\n"
    )
    print(
        "| size | file | events | spans | load time, median (min–max) | CPU time, median | "
        "CPU s per 100 MB | peak RSS | peak / file size |"
    )
    print("| --: | :-- | --: | --: | --: | --: | --: | --: | --: |")
    for row in rows:
        mb = row["size_bytes"] / 1e6
        print(
            f"| {row['multiple']}x | {row['file']} ({mb:.1f} MB uncompressed) | {row['events']:,} "
            f"| {row['spans']:,} | {row['seconds_median']:.2f} s "
            f"({row['seconds_min']:.2f}–{row['seconds_max']:.2f}) "
            f"| {row['cpu_seconds_median']:.2f} s | {row['cpu_seconds_median'] / mb * 100:.2f} "
            f"| {row['peak_rss_bytes'] / 1e6:.0f} MB | {row['peak_over_size']:.2f}x |"
        )
    print(
        f"\nPeak RSS is the whole process; the interpreter with profiling_utils imported "
        f"takes {rows[0]['imported_rss_bytes'] / 1e6:.0f} MB of it."
    )


if __name__ == "__main__":
    main()
