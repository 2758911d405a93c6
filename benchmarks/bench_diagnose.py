"""Benchmark ``diagnose`` (load plus every rule) against HolisticTraceAnalysis's trace load.

Builds (once, under ``benchmarks/_data/``) the 1x, 2x and 4x training traces of
:mod:`make_large_trace` (1x is about 89 MB and 265k events) and times two whole processes,
alternating between them, as a user would run them:

- ``diagnose``: ``python -m profiling_utils diagnose --json FILE`` (interpreter start-up,
  imports, the trace's load, every rule, the JSON written);
- ``HTA load``: ``python -c "...; parse_trace_file(FILE)"``, HolisticTraceAnalysis's default
  (JSON) parser, the first step of any HTA analysis, its imports included;
- and, apart, in one process, diagnose's split: ``load_trace`` and then all the rules.

Each process runs under GNU ``time`` (``/usr/bin/time``): wall time is measured around the
process by this script; CPU time (user + system, steadier on a shared machine) and the peak
resident set (``%M``, the whole process) come from ``time``, a small process, so the peak is
the child's own (``ru_maxrss`` of a child forked straight from this script would start at
this script's size). The package's bytecode is compiled first (``compileall``), as ``pip
install`` does for HTA's: otherwise, with ``PYTHONDONTWRITEBYTECODE`` set, every diagnose
process would compile ``profiling_utils`` from source (about 0.15 s). Targets (issue 9):
diagnose at least 15x faster than HTA's load at 1x and 20x at 4x, both as whole processes,
with a lower peak.

HTA is the PyPI package ``traceinsight`` (import name ``hta``); install it without its
notebook dependencies::

    pip install --no-deps traceinsight
    pip install pandas numpy networkx plotly pydot pyyaml psutil

Run from the repository root::

    python benchmarks/bench_diagnose.py             # markdown table for benchmarks/README.md
    python benchmarks/bench_diagnose.py --json      # the raw measurements
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import CHILD_PREAMBLE, count_events, machine, run_child  # noqa: E402
from make_large_trace import BASE_SCALE, ROOT, make  # noqa: E402

SPLIT = (
    CHILD_PREAMBLE
    + """
from profiling_utils.rules import diagnose
from profiling_utils.trace import gc_paused
from profiling_utils.trace import load_trace
start = time.perf_counter()
trace = load_trace(sys.argv[1])
loaded = time.perf_counter()
with gc_paused():
    findings = diagnose(trace)
done = time.perf_counter()
print(json.dumps({"load_seconds": loaded - start, "rules_seconds": done - loaded}))
"""
)
HTA = (
    "import logging, sys; logging.disable(logging.CRITICAL); "
    "from hta.common.trace import parse_trace_file; parse_trace_file(sys.argv[1])"
)
COMMANDS = {
    "diagnose": [sys.executable, "-m", "profiling_utils", "diagnose", "--json"],
    "hta": [sys.executable, "-c", HTA],
}
GNU_TIME = shutil.which("time", path="/usr/bin:/bin") or "time"


def run_process(argv: list[str]) -> dict[str, float]:
    """Run ``argv`` as a whole process under GNU ``time``: wall and CPU seconds, peak RSS."""
    path_entries = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path_entries))}
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        subprocess.run(
            [GNU_TIME, "-f", "%U %S %M", "-o", report.name, *argv],
            stdout=subprocess.DEVNULL,
            check=True,
            env=env,
            cwd=ROOT,
        )
        seconds = time.perf_counter() - start
        user, system, peak_kb = report.read().split()[-3:]
    return {
        "seconds": seconds,
        "cpu_seconds": float(user) + float(system),
        "peak_rss_bytes": int(peak_kb) * 1024,
    }


def measure(tool: str, path: Path) -> dict[str, float]:
    """Run ``tool`` on ``path`` once, as a whole process."""
    return run_process([*COMMANDS[tool], str(path)])


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark diagnose against HTA's load.")
    parser.add_argument("--multiples", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool and size")
    parser.add_argument("--json", action="store_true", help="print raw measurements as JSON")
    parser.add_argument(
        "--save", type=Path, help="also write the raw measurements there, after each size"
    )
    args = parser.parse_args()
    info = machine()
    info["traceinsight"] = _version("traceinsight")
    info["pandas"] = _version("pandas")
    info["numpy"] = _version("numpy")

    # Installed packages (HTA's) come with their bytecode: give profiling_utils its own.
    compileall.compile_dir(ROOT / "profiling_utils", quiet=1)
    rows = []
    for multiple in args.multiples:
        path = make(round(BASE_SCALE * multiple, 6))
        measure("diagnose", path)  # warm the page cache: every timed run reads from memory
        runs: dict[str, list[dict[str, float]]] = {"diagnose": [], "hta": []}
        for _ in range(args.repeat):
            for tool in runs:  # alternate, so that a slow spell of the machine hits both
                runs[tool].append(measure(tool, path))
        row = {
            "multiple": multiple,
            "file": path.name,
            "size_bytes": path.stat().st_size,
            "events": count_events(path),
        }
        for tool, results in runs.items():
            seconds = [r["seconds"] for r in results]
            cpu_seconds = [r["cpu_seconds"] for r in results]
            row[f"{tool}_seconds"] = seconds
            row[f"{tool}_seconds_median"] = statistics.median(seconds)
            row[f"{tool}_cpu_seconds_median"] = statistics.median(cpu_seconds)
            row[f"{tool}_peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in results)
        row["speedup"] = row["hta_seconds_median"] / row["diagnose_seconds_median"]
        row["cpu_speedup"] = row["hta_cpu_seconds_median"] / row["diagnose_cpu_seconds_median"]
        splits = [run_child(SPLIT, path) for _ in range(args.repeat)]
        row["load_seconds_median"] = statistics.median(s["load_seconds"] for s in splits)
        row["rules_seconds_median"] = statistics.median(s["rules_seconds"] for s in splits)
        row["peak_ratio"] = row["hta_peak_rss_bytes"] / row["diagnose_peak_rss_bytes"]
        rows.append(row)
        if args.save:
            raw = {"machine": info, "repeat": args.repeat, "rows": rows}
            args.save.write_text(json.dumps(raw, indent=2) + "\n")

    if args.json:
        print(json.dumps({"machine": info, "repeat": args.repeat, "rows": rows}, indent=2))
        return
    print(
        f"Machine: {info['cpus']} CPUs ({info['cpu']}), {info['memory']} RAM; "
        f"Python {info['python']}, msgspec {info['msgspec']}, numpy {info['numpy']}; "
        f"traceinsight {info['traceinsight']}, pandas {info['pandas']}; {info['os']}. "
        f"Median of {args.repeat} runs per cell.\n"
    )
    print(
        "| size | events | `diagnose --json`, whole process | HTA load, whole process "
        "| diagnose faster by | CPU time: diagnose / HTA | diagnose peak RSS | HTA peak RSS |"
    )
    print("| --: | --: | --: | --: | --: | --: | --: | --: |")
    for row in rows:
        print(
            f"| {row['multiple']}x ({row['size_bytes'] / 1e6:.0f} MB) | {row['events']:,} "
            f"| {row['diagnose_seconds_median']:.2f} s | {row['hta_seconds_median']:.2f} s "
            f"| **{row['speedup']:.1f}x** | {row['diagnose_cpu_seconds_median']:.2f} s / "
            f"{row['hta_cpu_seconds_median']:.2f} s ({row['cpu_speedup']:.1f}x) "
            f"| {row['diagnose_peak_rss_bytes'] / 1e6:.0f} MB "
            f"| {row['hta_peak_rss_bytes'] / 1e6:.0f} MB |"
        )
    print("\nWhere diagnose's time goes (separate runs, medians):\n")
    print("| size | load_trace | all rules on the loaded trace |")
    print("| --: | --: | --: |")
    for row in rows:
        print(
            f"| {row['multiple']}x | {row['load_seconds_median']:.2f} s "
            f"| {row['rules_seconds_median']:.2f} s |"
        )


if __name__ == "__main__":
    main()
