"""profiling_utils.capture: what it leaves on a page besides its trace and table."""

from __future__ import annotations

import gzip
import json
import tempfile
import time
import warnings
from pathlib import Path

import pytest
import torch

from profiling_utils import capture, time_calls, time_per_call
from profiling_utils.capture import export_trace


def test_torchs_no_warmup_warning_keeps_its_text_and_names_no_file(tmp_path: Path) -> None:
    x = torch.ones(8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture(lambda: x @ x, name="no_warmup", out_dir=tmp_path, wait=0, warmup=0, active=2)
    (warmup,) = [w for w in caught if "won't be using warmup" in str(w.message)]
    assert warmup.category is UserWarning
    assert warmup.filename == "torch.profiler.schedule"
    text = warnings.formatwarning(warmup.message, warmup.category, warmup.filename, warmup.lineno)
    assert "/" not in text.split("UserWarning")[0]


def test_a_schedule_with_a_warmup_step_warns_nothing(tmp_path: Path) -> None:
    x = torch.ones(8, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        capture(lambda: x @ x, name="warmed", out_dir=tmp_path, wait=0, warmup=1, active=2)
    assert not [w for w in caught if "warmup" in str(w.message)]


@pytest.mark.parametrize("trace_format", ["json.gz", "json"])
def test_the_written_trace_names_no_directory_of_this_machine(
    tmp_path: Path, trace_format: str
) -> None:
    x = torch.ones(8, 8)
    run = capture(lambda: x @ x, name="portable", out_dir=tmp_path, trace_format=trace_format)
    data = run.trace_path.read_bytes()
    text = (gzip.decompress(data) if trace_format == "json.gz" else data).decode()
    # torch names the temporary file it wrote first (.json.gz) or the path given (.json).
    assert json.loads(text)["traceName"] == f"portable.{trace_format}"
    assert tempfile.gettempdir() not in text and str(tmp_path) not in text
    assert run.trace.kernels == [] and run.trace.cpu_ops  # still a trace the model reads


class _Exported:
    """Stands for a finished profiler: writes the trace torch would, with machine paths."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events

    def export_chrome_trace(self, path: str) -> None:
        document = {"traceEvents": self.events, "traceName": "/tmp/tmpab12cd.json"}
        text = json.dumps(document, indent=1)
        if path.endswith(".gz"):
            Path(path).write_bytes(gzip.compress(text.encode()))
        else:
            Path(path).write_text(text)


def test_paths_into_the_temporary_directory_start_with_tmpdir(tmp_path: Path) -> None:
    temporary = tempfile.gettempdir()
    kernel_file = f"{temporary}/torchinductor_root/rp/crp6dx.py"
    kernel = {
        "ph": "X", "cat": "kernel", "name": "triton_poi_fused_0", "pid": 0, "tid": 7,
        "ts": 10.0, "dur": 2.0,
        "args": {"kernel_file": kernel_file, "note": f"{temporary}x/not-the-directory"},
    }  # fmt: skip
    path = export_trace(_Exported([kernel]), tmp_path / "compiled.json.gz")
    document = json.loads(gzip.decompress(path.read_bytes()))
    args = document["traceEvents"][0]["args"]
    assert args["kernel_file"] == "$TMPDIR/torchinductor_root/rp/crp6dx.py"
    assert args["note"] == f"{temporary}x/not-the-directory"  # a sibling keeps its path
    assert document["traceName"] == "compiled.json.gz"
    # The same trace gives the same bytes (no timestamp in the gzip header).
    assert export_trace(_Exported([kernel]), tmp_path / "compiled.json.gz").read_bytes() == (
        path.read_bytes()
    )


def test_time_per_call_times_batches_of_calls_after_the_warm_up() -> None:
    calls: list[float] = []

    def step() -> None:
        calls.append(time.perf_counter())
        time.sleep(0.002)

    timed = time_per_call(step, calls=4, repeats=5, warmup_iters=2)
    assert len(calls) == 2 + 4 * 5
    for times in (timed.end_to_end, timed.issue):
        assert times.unit == "µs" and times.n == 5
        # Each sample is one call's share of its batch: about the 2 ms sleep, never the batch.
        assert all(1_900 <= sample < 8_000 for sample in times.samples)
    # Without CUDA, the CPU's time is the time end to end: the CPU sets the pace.
    assert timed.issue.samples == timed.end_to_end.samples
    assert not timed.gpu_sets_the_pace


def test_time_calls_takes_the_variants_batches_in_turn() -> None:
    # A machine that slows down halfway through: timed one after the other, the second
    # variant would take all the slow time; in turn, both take their share.
    order: list[str] = []
    started = time.perf_counter()

    def variant(name: str):
        def step() -> None:
            order.append(name)
            slow = time.perf_counter() - started > 0.014
            time.sleep(0.002 if slow else 0.001)

        return step

    timed = time_calls({"a": variant("a"), "b": variant("b")}, calls=2, repeats=6, warmup_iters=1)
    assert order[:2] == ["a", "b"]  # the warm-up calls, each variant's
    batches = order[2:]
    assert batches == ["a", "a", "b", "b"] * 6  # a batch of each, in turn
    assert {name: t.end_to_end.n for name, t in timed.items()} == {"a": 6, "b": 6}
    medians = [timed[name].end_to_end.median for name in ("a", "b")]
    assert max(medians) < 1.5 * min(medians)  # the slowdown fell on both


def test_the_gpu_sets_the_pace_when_a_call_outlasts_the_cpus_part() -> None:
    from profiling_utils.capture import CallTimes
    from profiling_utils.stats import Distribution

    waits = CallTimes(Distribution.of([200, 201, 203, 199, 202]), Distribution.of([40] * 5))
    assert waits.gpu_sets_the_pace
    busy = CallTimes(Distribution.of([50, 52, 51, 49, 50]), Distribution.of([49, 51, 50, 48, 50]))
    assert not busy.gpu_sets_the_pace
    # Clearly longer, but by 5%: the last call's GPU tail, not a GPU the CPU waits for.
    tail = CallTimes(Distribution.of([44, 44.2, 43.9, 44.1, 44]), Distribution.of([42] * 5))
    assert not tail.gpu_sets_the_pace


def test_time_per_call_refuses_empty_batches() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        time_per_call(lambda: None, calls=0)
