"""What a trace that only decodes after the byte-level repair costs ``summary``, and what
refusing a broken one costs.

A file that strict JSON rejects (a bare ``NaN`` in ``args``, a raw line break or quote in a
name) is decoded a second time after a repair of its bytes (``profiling_utils.loading``).
Builds (once, under ``benchmarks/_data/``) two copies of the 1x training trace with one
bare ``NaN`` in the first event's ``args``: ``train_x18.7_nan.json`` in Kineto's layout, and
``train_x18.7_one_line.json`` on one line, as ``json.dumps`` writes a trace (keys in Kineto's
order). Two broken ones too, which must be refused: ``train_x18.7_nul_tail.json``, whose
second half is NUL bytes (a file preallocated and never finished), and
``train_x18.7_cut.json.gz``, the first half of the gzipped trace (its last four bytes are no
gzip trailer). Then runs ``python -m profiling_utils summary`` as a whole process under GNU
``time`` on the trace as it is and on each copy; prints wall time, peak RSS and exit status.
Run from the repository root::

    python benchmarks/bench_repair.py
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bomb import summary  # noqa: E402
from make_large_trace import DATA, make  # noqa: E402

NAN_ARG = b'"args": {"bench_nan": NaN, '


def with_nan(source: Path) -> Path:
    """Kineto's layout, with a bare NaN in the first ``args``: one insertion in the bytes."""
    path = DATA / f"{source.stem}_nan.json"
    if not path.exists():
        path.write_bytes(source.read_bytes().replace(b'"args": {', NAN_ARG, 1))
    return path


def on_one_line(source: Path) -> Path:
    """The same events written by ``json.dumps`` on one line, a bare NaN in the first ``args``."""
    path = DATA / f"{source.stem}_one_line.json"
    if not path.exists():
        document = json.loads(source.read_bytes())
        first = next(e for e in document["traceEvents"] if isinstance(e.get("args"), dict))
        first["args"]["bench_nan"] = float("nan")
        path.write_text(json.dumps(document))
    return path


def nul_tail(source: Path) -> Path:
    """The trace with its second half overwritten by NUL bytes."""
    path = DATA / f"{source.stem}_nul_tail.json"
    if not path.exists():
        data = source.read_bytes()
        path.write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))
    return path


def cut_gzip(source: Path) -> Path:
    """The first half of the gzipped trace."""
    path = DATA / f"{source.stem}_cut.json.gz"
    if not path.exists():
        data = gzip.compress(source.read_bytes(), compresslevel=6)
        path.write_bytes(data[: len(data) // 2])
    return path


def main() -> None:
    source = make(18.7)
    copies = (with_nan(source), on_one_line(source), nul_tail(source), cut_gzip(source))
    for path in (source, *copies):
        result = summary(path, None)
        result.pop("stderr")
        print(path.name, f"{path.stat().st_size / 1e6:.1f} MB", json.dumps(result))


if __name__ == "__main__":
    main()
