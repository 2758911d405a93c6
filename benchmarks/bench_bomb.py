"""What a small ``.json.gz`` that expands to gigabytes of whitespace costs ``summary``.

Builds (once, under ``benchmarks/_data/``) ``whitespace_3gb.json.gz`` and
``whitespace_12gb.json.gz``: a valid one-kernel trace whose closing brace follows 3 GB (12 GB)
of spaces, 2.9 MB (11.7 MB) on disk, as deflate packs whitespace a thousandfold. Then runs
``python -m profiling_utils summary`` as a whole process under GNU ``time`` on the 3 GB file
with the default limit (a third of the available memory) and with
``PROFILING_UTILS_MAX_TRACE_BYTES`` set to 1 GB, and on the 12 GB file with the default limit;
prints wall time, peak RSS, exit status and message of each. Run from the repository root::

    python benchmarks/bench_bomb.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_diagnose import GNU_TIME  # noqa: E402
from make_large_trace import DATA, ROOT  # noqa: E402

SPACES = 3 * 10**9
_CHUNK = 64 << 20


def make_bomb(path: Path = DATA / "whitespace_3gb.json.gz", spaces: int = SPACES) -> Path:
    """Write the padded trace (once) and return its path."""
    if path.exists():
        return path
    event = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 1}
    head = json.dumps({"traceEvents": [event]})[:-1].encode()  # without the closing brace
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".tmp"), "wb") as out:
        out.write(compressor.compress(head))
        block = b" " * _CHUNK
        for offset in range(0, spaces, _CHUNK):
            out.write(compressor.compress(block[: min(_CHUNK, spaces - offset)]))
        out.write(compressor.compress(b"}") + compressor.flush())
    path.with_suffix(".tmp").rename(path)
    return path


def summary(path: Path, limit: str | None) -> dict[str, object]:
    """``summary`` on ``path`` as a whole process: wall seconds, peak RSS, status, stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PROFILING_UTILS_MAX_TRACE_BYTES", None)
    if limit is not None:
        env["PROFILING_UTILS_MAX_TRACE_BYTES"] = limit
    argv = [sys.executable, "-m", "profiling_utils", "summary", str(path)]
    with tempfile.NamedTemporaryFile("r") as report:
        start = time.perf_counter()
        done = subprocess.run(
            [GNU_TIME, "-f", "%M", "-o", report.name, *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
        )
        seconds = time.perf_counter() - start
        peak_kb = int(report.read().split()[-1])
    return {
        "limit": limit or "default",
        "status": done.returncode,
        "seconds": seconds,
        "peak_rss_mb": peak_kb * 1024 / 1e6,
        "stderr": done.stderr.strip(),
    }


def main() -> None:
    small = make_bomb()
    large = make_bomb(DATA / "whitespace_12gb.json.gz", 4 * SPACES)
    for path, limit in ((small, None), (small, str(10**9)), (large, None)):
        print(path.name, f"{path.stat().st_size / 1e6:.1f} MB", json.dumps(summary(path, limit)))


if __name__ == "__main__":
    main()
