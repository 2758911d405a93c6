"""Shared test helpers: the recorded GPU fixtures and a writer for small synthetic traces.

Other test modules use these through pytest fixtures (``fixture_path``, ``make_trace``) or
import the plain functions (``from conftest import complete_event, minimal_gpu_events``).
A recorded trace's own JSON (``fixture_document``, ``fixture_events``, ``fixture_steps``) is read
with ``json`` alone, so tests can hold ``profiling_utils`` to what the file says.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
GPU_FIXTURES = FIXTURES / "gpu"
FOREIGN = FIXTURES / "foreign"
"""Small real traces from other machines (AMD, torch ~1.8...): see its README for sources."""

# Base time written by torch >= 2.4; ts values below are relative to it, like Kineto's.
BASE_TIME_NS = 1790857026000000000
DEVICE_PROPERTIES = [
    {
        "id": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 85017493504,
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 132,
    }
]


def gpu_fixture(name: str) -> Path:
    """Path of a recorded H100 trace in ``tests/fixtures/gpu`` (``.json.gz`` may be omitted)."""
    path = GPU_FIXTURES / name
    if not path.name.endswith((".json", ".json.gz")):
        path = path.with_name(path.name + ".json.gz")
    if not path.exists():
        raise FileNotFoundError(f"no fixture {path}")
    return path


def gpu_fixture_names() -> list[str]:
    """Names (without ``.json.gz``) of every recorded GPU trace."""
    return sorted(p.name.removesuffix(".json.gz") for p in GPU_FIXTURES.glob("*.json.gz"))


def provenance() -> dict[str, Any]:
    """``tests/fixtures/gpu/provenance.json``: the machine and each run's parameters."""
    return json.loads((GPU_FIXTURES / "provenance.json").read_text())


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``python -m profiling_utils *argv`` in this process: (exit status, stdout, stderr)."""
    from profiling_utils.cli import main

    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def fixture_document(name: str) -> dict[str, Any]:
    """A recorded trace's JSON document, parsed afresh on each call (callers may change it)."""
    return json.loads(gzip.decompress(gpu_fixture(name).read_bytes()))


@cache
def fixture_events(name: str) -> tuple[dict[str, Any], ...]:
    """A recorded trace's ``traceEvents``, parsed once and shared: read them, do not change them."""
    return tuple(fixture_document(name)["traceEvents"])


def fixture_steps(name: str) -> list[dict[str, Any]]:
    """A recorded trace's ``ProfilerStep#N`` complete events, in time order."""
    steps = [
        e
        for e in fixture_events(name)
        if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")
    ]
    return sorted(steps, key=lambda e: e["ts"])


def complete_event(
    name: str,
    cat: str,
    ts: float,
    dur: float | None,
    pid: int | str = 429,
    tid: int | str = 429,
    **args: Any,
) -> dict[str, Any]:
    """A Kineto complete (``X``) event; keyword arguments become ``args``.

    ``External_id`` is written as ``"External id"``. ``dur=None`` leaves ``dur`` out.
    """
    event: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}
    event["ts"] = ts
    if dur is not None:
        event["dur"] = dur
    if args:
        event["args"] = {key.replace("External_id", "External id"): v for key, v in args.items()}
    return event


def flow_pair(correlation: int, launch_ts: float, gpu_ts: float) -> list[dict[str, Any]]:
    """The ``ac2g`` flow start and end Kineto writes for one launch."""
    return [
        {"ph": "s", "id": correlation, "pid": 429, "tid": 429, "ts": launch_ts,
         "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": correlation, "pid": 0, "tid": 7, "ts": gpu_ts,
         "cat": "ac2g", "name": "ac2g", "bp": "e"},
    ]  # fmt: skip


def minimal_gpu_events(offset: float = 1000.0) -> list[dict[str, Any]]:
    """One profiler step: annotation, op, a launch with a planning call, its kernel, flows.

    Times (µs, relative to ``offset``): step 0-100, ``work`` 5-95, ``aten::mm`` 10-60 holding
    ``cudaFuncGetAttributes`` 20-22 and ``cudaLaunchKernel`` 30-40 (correlation 7), whose
    kernel runs 50-80 on GPU 0 stream 7; then a ``cudaMemcpyAsync`` 62-70 (correlation 8)
    whose 4096-byte copy runs 85-87.
    """
    t = offset
    return [
        complete_event("ProfilerStep#1", "user_annotation", t + 0, 100, External_id=1),
        complete_event("work", "user_annotation", t + 5, 90, External_id=2),
        complete_event("aten::mm", "cpu_op", t + 10, 50, External_id=3),
        complete_event("cudaFuncGetAttributes", "cuda_runtime", t + 20, 2, External_id=3,
                       correlation=6),
        complete_event("cudaLaunchKernel", "cuda_runtime", t + 30, 10, External_id=3,
                       correlation=7, cbid=211),
        complete_event("gemm_kernel", "kernel", t + 50, 30, pid=0, tid=7, External_id=3,
                       correlation=7, device=0, stream=7, grid=[4, 2, 1], block=[128, 1, 1],
                       **{"registers per thread": 32, "shared memory": 1024}),
        complete_event("aten::copy_", "cpu_op", t + 61, 10, External_id=4),
        complete_event("cudaMemcpyAsync", "cuda_runtime", t + 62, 8, External_id=4,
                       correlation=8),
        complete_event("Memcpy DtoD (Device -> Device)", "gpu_memcpy", t + 85, 2, pid=0, tid=7,
                       External_id=4, correlation=8, bytes=4096,
                       **{"memory bandwidth (GB/s)": 2.048}),
        *flow_pair(7, t + 30, t + 50),
        *flow_pair(8, t + 62, t + 85),
        {"name": "thread_name", "ph": "M", "ts": t, "pid": 429, "tid": 429,
         "args": {"name": "thread 429 (python3)"}},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
         "ts": t + 5.0e9},
    ]  # fmt: skip


def op_steps_events(
    ops: list[tuple[str, dict[str, Any], bool]], steps: int = 2
) -> list[dict[str, Any]]:
    """``steps`` steps of 1000 µs, each running ``ops`` in order: ``(name, args, on_gpu)``, a
    30 µs ``cpu_op`` with ``args`` that, when ``on_gpu``, launches a 20 µs kernel (stream 7)."""
    events = []
    for n in range(1, steps + 1):
        t = 2000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1000))
        for i, (name, args, on_gpu) in enumerate(ops):
            start, correlation = t + 10 + 40 * i, 100 * n + i
            events.append(complete_event(name, "cpu_op", start, 30, **args))
            if on_gpu:
                events += [
                    complete_event("cudaLaunchKernel", "cuda_runtime", start + 10, 5,
                                   correlation=correlation),
                    complete_event(f"kernel_{i}", "kernel", start + 20, 20, pid=0, tid=7,
                                   correlation=correlation),
                ]  # fmt: skip
    return events


def trace_document(events: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """A top-level trace object like Kineto's, with ``top`` keys added or overridden."""
    document: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": DEVICE_PROPERTIES,
        "cuda_driver_version": 13000,
        "cuda_runtime_version": 13000,
        "cupti_version": 130001,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_TIME_NS,
        "traceEvents": events,
        "traceName": "synthetic.json",
    }
    document.update(top)
    return {key: value for key, value in document.items() if value is not None}


def write_trace(path: Path, document: Any) -> Path:
    """Write ``document`` as JSON (gzipped when ``path`` ends in ``.gz``); bytes as they are."""
    data = document if isinstance(document, bytes) else json.dumps(document).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


@pytest.fixture
def fixture_path() -> Callable[[str], Path]:
    """``fixture_path("64_bf16_warm_eager")`` -> the recorded trace's path."""
    return gpu_fixture


@pytest.fixture
def make_trace(tmp_path: Path) -> Callable[..., Path]:
    """Write a synthetic trace: ``make_trace(events, name="t.json", **top_level_keys)``.

    ``events`` may also be a whole document (any JSON value) or raw ``bytes``.
    """

    def make(events: Any, name: str = "trace.json", **top: Any) -> Path:
        if isinstance(events, list) and all(isinstance(e, dict) for e in events):
            document: Any = trace_document(events, **top)
        else:
            document = events
        return write_trace(tmp_path / name, document)

    return make
