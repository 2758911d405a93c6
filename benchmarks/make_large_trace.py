"""Build large Kineto traces by replicating the profiled steps of a recorded training trace.

The source is ``tests/fixtures/gpu/train_tiny_transformer_a3.json.gz`` (4.76 MB, 14,213
events, steps 2-4 of a small transformer's training loop on an H100). Every event except the
frame (metadata, the ``PyTorch Profiler (0)`` span, ``Iteration Start`` and ``Record Window
End``) is copied ``scale`` times, each copy shifted later in time by the length of the
original, so copies never overlap. In each copy:

- ``ts`` moves by a whole number of nanoseconds and keeps Kineto's three-decimal format;
- ``ProfilerStep#N`` is renumbered so step numbers keep increasing;
- ``correlation``, ``External id``, ``Ev Idx`` and flow ids are offset so every link stays
  unique (``ac2g`` flow ids follow the correlation ids, as Kineto writes them);
- the text of each event is otherwise byte-for-byte Kineto's.

A fractional scale copies the last block in part: the events in the first part of its time
range, as if the profiling window had closed there.

Run from the repository root::

    python benchmarks/make_large_trace.py --scale 18.7   # ~89 MB, ~265k events
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "fixtures" / "gpu" / "train_tiny_transformer_a3.json.gz"
DATA = Path(__file__).resolve().parent / "_data"
BASE_SCALE = 18.7
"""Copies of the source that make the benchmark's 1x trace (about 89 MB, 265k events)."""

_ARRAY_START = '"traceEvents": ['
_ARRAY_END = '\n  ],\n  "traceName"'
_OPEN, _SEPARATOR, _CLOSE = "\n  {\n", "\n  },\n  {\n", "\n  }"
_TS = re.compile(r'"ts": (\d+)\.(\d{3})')
_STEP = re.compile(r'"name": "ProfilerStep#(\d+)"')
_EXTERNAL_ID = re.compile(r'"External id": (\d+)')
_CORRELATION = re.compile(r'"correlation": (\d+)')
_EVENT_INDEX = re.compile(r'"Ev Idx": (\d+)')
_FLOW_ID = re.compile(r'"id": (\d+)')
_DUR = re.compile(r'"dur": (\d+)\.(\d{3})')


@dataclass
class Event:
    """One event of the source: its text and what replication needs to know about it."""

    text: str
    start_ns: int
    end_ns: int
    replicate: bool
    flow_cat: str | None


def _ns(match: re.Match[str]) -> int:
    return int(match[1]) * 1000 + int(match[2])


def _fmt_ts(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _split(text: str) -> tuple[str, list[str], str]:
    start = text.index(_ARRAY_START) + len(_ARRAY_START)
    end = text.index(_ARRAY_END)
    body = text[start:end]
    if not (body.startswith(_OPEN) and body.endswith(_CLOSE)):
        raise ValueError("the source is not formatted as Kineto writes traces")
    return text[:start], body[len(_OPEN) : -len(_CLOSE)].split(_SEPARATOR), text[end:]


def _events(blocks: list[str]) -> list[Event]:
    events = []
    for block in blocks:
        parsed = json.loads("{" + block + "}")
        ts = _TS.search(block)
        start = _ns(ts) if ts else 0
        dur = _DUR.search(block)
        frame = (
            parsed.get("ph") == "M"
            or parsed.get("cat") == "Trace"
            or parsed.get("name") in ("Iteration Start: PyTorch Profiler", "Record Window End")
        )
        flow_cat = parsed.get("cat") if parsed.get("ph") in ("s", "f") else None
        events.append(Event(block, start, start + (_ns(dur) if dur else 0), not frame, flow_cat))
    return events


def _stride(values: list[int]) -> int:
    """A power of ten above every value, so offsets stay readable and never collide."""
    return 10 ** len(str(max(values, default=0)))


def _shift(text: str, shift_ns: int, copy: int, strides: dict[str, int], steps: int) -> str:
    text = _TS.sub(lambda m: f'"ts": {_fmt_ts(_ns(m) + shift_ns)}', text, count=1)
    if copy == 0:
        return text
    text = _STEP.sub(lambda m: f'"name": "ProfilerStep#{int(m[1]) + copy * steps}"', text)
    text = _EXTERNAL_ID.sub(
        lambda m: f'"External id": {int(m[1]) + copy * strides["external"]}', text
    )
    text = _CORRELATION.sub(
        lambda m: f'"correlation": {int(m[1]) + copy * strides["correlation"]}', text
    )
    return _EVENT_INDEX.sub(lambda m: f'"Ev Idx": {int(m[1]) + copy * strides["index"]}', text)


def _shift_flow(text: str, cat: str, copy: int, strides: dict[str, int]) -> str:
    stride = strides["correlation"] if cat == "ac2g" else strides["flow"]
    return _FLOW_ID.sub(lambda m: f'"id": {int(m[1]) + copy * stride}', text, count=1)


def replicate(source_text: str, scale: float) -> tuple[str, int]:
    """The source trace with its steps replicated ``scale`` times; returns (text, events)."""
    if scale < 1:
        raise ValueError("scale must be at least 1")
    head, blocks, tail = _split(source_text)
    events = _events(blocks)
    body = [e for e in events if e.replicate]
    frame = [e for e in events if not e.replicate]
    first = min(e.start_ns for e in body)
    period = max(e.end_ns for e in body) - first + 10_000  # 10 µs between copies
    steps = len({m[1] for e in body for m in [_STEP.search(e.text)] if m})
    strides = {
        "external": _stride([int(v) for e in body for v in _EXTERNAL_ID.findall(e.text)]),
        "correlation": _stride([int(v) for e in body for v in _CORRELATION.findall(e.text)]),
        "index": _stride([int(v) for e in body for v in _EVENT_INDEX.findall(e.text)]),
        "flow": _stride([int(v) for e in body if e.flow_cat for v in _FLOW_ID.findall(e.text)[:1]]),
    }
    strides["correlation"] = max(strides["correlation"], strides["flow"])
    copies = math.ceil(scale)
    out: list[str] = []
    for copy in range(copies):
        cut = first + (scale - copy) * period if copy == copies - 1 else math.inf
        for event in body:
            if event.start_ns >= cut:
                continue
            text = _shift(event.text, copy * period, copy, strides, steps)
            if event.flow_cat and copy:
                text = _shift_flow(text, event.flow_cat, copy, strides)
            out.append(text)
    end_shift = (scale - 1) * period
    for event in frame:
        text = event.text
        if '"cat": "Trace"' in text:
            text = _DUR.sub(lambda m: f'"dur": {_fmt_ts(_ns(m) + round(end_shift))}', text, count=1)
        elif '"Record Window End"' in text:
            text = _shift(text, round(end_shift), 0, strides, steps)
        out.append(text)
    return head + _OPEN + _SEPARATOR.join(out) + _CLOSE + tail, len(out)


def make(scale: float, out_dir: Path = DATA, source: Path = SOURCE, compress: bool = False) -> Path:
    """Write ``train_x{scale}.json`` (``.json.gz`` with ``compress``) under ``out_dir`` unless
    it exists; return its path."""
    path = out_dir / f"train_x{scale:g}.json"
    if not path.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        text, _ = replicate(gzip.decompress(source.read_bytes()).decode(), scale)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(text)
        temporary.replace(path)
    if not compress:
        return path
    gz_path = path.with_name(path.name + ".gz")
    if not gz_path.exists():
        temporary = gz_path.with_suffix(".tmp")
        temporary.write_bytes(gzip.compress(path.read_bytes(), compresslevel=6))
        temporary.replace(gz_path)
    return gz_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=BASE_SCALE, help="copies of the steps")
    parser.add_argument("--out", type=Path, default=DATA, help="output folder")
    parser.add_argument("--gzip", action="store_true", help="also write a .json.gz copy")
    args = parser.parse_args()
    path = make(args.scale, args.out, compress=args.gzip)
    data = path.read_bytes()
    events = json.loads(gzip.decompress(data) if args.gzip else data)["traceEvents"]
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB, {len(events):,} events")


if __name__ == "__main__":
    main()
