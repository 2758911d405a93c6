"""Every command on real traces made odd: an answer (status 0) or one error line (status 2).

Each case changes a recorded trace the way other writers, other clocks or a damaged file
would: times floored to the millisecond, durations left out, ids written as strings, a
file merged from two sessions, legacy category names, a trace cut to a tenth of its events.
The commands must answer or refuse with one line: never a traceback. The cases that found a
bug when this was written (a division by a zero median, a threshold of 0 µs, a format of
``None``, a correlation id reused) have their own tests beside the rules they touch; this
file keeps the whole range of odd inputs running through every command.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import fixture_document, run_cli, write_trace

from profiling_utils import TraceError, load_trace

Events = list[dict[str, Any]]


def _times(events: Events, change: Callable[[float], float]) -> None:
    for event in events:
        for key in ("ts", "dur"):
            if isinstance(event.get(key), int | float):
                event[key] = change(event[key])


def _every(events: Events, share: float, change: Callable[[dict[str, Any]], None]) -> None:
    chosen = random.Random(len(events))
    for event in events:
        if chosen.random() < share:
            change(event)


ODD: dict[str, Callable[[Events], Events | None]] = {
    "durations 0": lambda events: [{**e, "dur": 0} if "dur" in e else e for e in events],
    "one timestamp": lambda events: [{**e, "ts": 1000} if "ts" in e else e for e in events],
    "times floored to the ms": lambda events: _times(events, lambda t: t // 1000 * 1000),
    "times in whole µs": lambda events: _times(events, int),
    "a tenth of the durations left out": lambda events: _every(
        events, 0.1, lambda e: e.pop("dur", None)
    ),
    "args left out": lambda events: [{k: v for k, v in e.items() if k != "args"} for e in events],
    "a fifth of the categories left out": lambda events: _every(
        events, 0.2, lambda e: e.pop("cat", None)
    ),
    "ids as strings": lambda events: [
        {**e, "pid": str(e["pid"]), "tid": f"stream {e['tid']}"} if "pid" in e and "tid" in e else e
        for e in events
    ],
    "legacy categories": lambda events: [
        {**e, "cat": _LEGACY.get(e.get("cat"), e.get("cat"))} for e in events
    ],
    "events shuffled": lambda events: random.Random(7).sample(events, len(events)),
    "a tenth of the events": lambda events: random.Random(3).sample(events, len(events) // 10),
    "launches dropped": lambda events: [
        e for e in events if e.get("cat") not in ("cuda_runtime", "cuda_driver")
    ],
    "correlation ids reused": lambda events: _every(
        events,
        1.0,
        lambda e: (
            isinstance(e.get("args"), dict)
            and "correlation" in e["args"]
            and e["args"].update(correlation=e["args"]["correlation"] % 5)
        ),
    ),
    "odd args": lambda events: _every(
        events,
        0.3,
        lambda e: e.update(
            args=random.Random(e.get("ts", 0)).choice(
                [
                    None,
                    [],
                    "x",
                    5,
                    {"correlation": None},
                    {"grid": "a", "block": None},
                    {"Input Dims": "x", "Input type": 3},
                ]  # fmt: skip
            )
        ),
    ),
    "shapes of other forms": lambda events: [
        {**e, "args": {**e["args"], **_ODD_SHAPES[i % len(_ODD_SHAPES)]}}
        if isinstance(e.get("args"), dict) and "Input Dims" in e["args"]
        else e
        for i, e in enumerate(events)
    ],
    "steps overlapping": lambda events: _every(
        events,
        1.0,
        lambda e: (
            str(e.get("name", "")).startswith("ProfilerStep#")
            and "dur" in e
            and e.update(dur=e["dur"] * 2.5)
        ),
    ),
}

_ODD_SHAPES = [
    {"Input Dims": 5},
    {"Input Dims": [5]},
    {"Input Dims": [[1, "a"]]},
    {"Input Dims": [[True]]},
    {"Input Dims": [[1.5, 2]]},
    {"Input Dims": [None]},
    {"Input type": 5},
    {"Input type": [5]},
    {"Input type": [["float"]]},
    {"Input type": ["float"]},
    {"Concrete Inputs": [5]},
]
"""Shape records no profiler writes: a number for a list, sizes that are not whole numbers, a
dtype list of another length, a scalar argument that is not text."""

_LEGACY = {
    "cpu_op": "Operator",
    "cuda_runtime": "Runtime",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
}

FIXTURES = [
    "4096_bf16_item-sync",
    "64_bf16_warm_compile",
    "attention_8x16x1024x64_bf16_naive",
    "attention_8x16x1024x64_bf16_sdpa-math",
    "mlp_64x128x768x3072_bf16_eager",
]


@pytest.fixture(scope="module")
def odd_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    folder = tmp_path_factory.mktemp("odd")
    written = {}
    for fixture in FIXTURES:
        for case, make_odd in ODD.items():
            document = fixture_document(fixture)
            changed = make_odd(document["traceEvents"])
            if changed is not None:
                document["traceEvents"] = changed
            path = folder / f"{fixture}-{case.replace(' ', '_')}.json"
            written[fixture, case] = write_trace(path, document)
    return written


@pytest.mark.parametrize("case", list(ODD))
@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_command_answers_or_refuses_in_one_line(
    odd_traces: dict[tuple[str, str], Path], fixture: str, case: str, capsys
) -> None:
    path = str(odd_traces[fixture, case])
    for argv in (
        ("summary", path, "--json"),
        ("diagnose", path, "--json"),
        ("summary", path),
        ("diagnose", path),
        ("compare", str(odd_traces[fixture, "events shuffled"]), path, "--json"),
    ):
        status, out, err = run_cli(capsys, *argv)
        assert status in (0, 2), argv
        if status == 2:
            assert len(err.splitlines()) == 1 and err.startswith("error: "), err
        elif "--json" in argv:
            json.loads(out, parse_constant=_refuse)  # one document, no NaN or infinity in it


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} in the JSON output")


def test_chrome_begin_end_pairs_are_refused_in_one_line(make_trace) -> None:
    # Other tools write durations as B/E pairs; torch.profiler never does. Read as a trace
    # without complete events, the file would report an empty run.
    events = [
        {"ph": "B", "name": "forward", "pid": 1, "tid": 1, "ts": 0, "cat": "cpu_op"},
        {"ph": "E", "name": "forward", "pid": 1, "tid": 1, "ts": 10, "cat": "cpu_op"},
    ]
    path = make_trace(events)
    with pytest.raises(TraceError, match=r"begin/end pairs \(ph 'B'/'E'\)"):
        load_trace(path)
    # Metadata alone (an empty recording) is no such file: it loads, with no events.
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p"}}]
    assert load_trace(make_trace(meta, name="meta.json")).spans == []
