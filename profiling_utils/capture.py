"""Profile a step function the way the reference post does, in one call.

:func:`capture` wraps the boilerplate every example repeats: optional warm-up iterations
before profiling, a ``torch.profiler.schedule``, a ``record_function`` label around each step,
activities chosen by what the machine has, and the two artifacts the post writes, the Chrome
trace and the profiler table, named ``{size}_{dtype}_{cold|warm}_{eager|compile}``.

Example::

    x = w = b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    run = capture(lambda: torch.add(torch.matmul(x, w), b),
                  name=run_name(64, "bf16", warm=False, compiled=False),
                  label="matmul_add", out_dir="traces")
    print(run.table)
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .stats import Distribution, clearly_greater

if TYPE_CHECKING:  # pragma: no cover
    from .trace import Trace


def run_name(
    size: int | Sequence[int], dtype: str, *, warm: bool, compiled: bool | str = False
) -> str:
    """The post's file name for a run: ``{size}_{dtype}_{cold|warm}_{eager|compile}``.

    ``size`` may be a shape (``(8, 64, 64)`` gives ``8x64x64``). ``compiled`` may be a
    ``torch.compile`` mode name, which is appended (``compile-reduce-overhead``).
    """
    size_part = "x".join(str(s) for s in size) if isinstance(size, Sequence) else str(size)
    if compiled is True:
        how = "compile"
    elif compiled:
        how = f"compile-{compiled}"
    else:
        how = "eager"
    return f"{size_part}_{dtype}_{'warm' if warm else 'cold'}_{how}"


@dataclass
class Capture:
    """What :func:`capture` returns: the artifacts of one profiled run."""

    name: str
    """The run's name, also the stem of both files."""
    trace_path: Path
    """The Chrome trace (``.json.gz`` or ``.json``), written by :func:`export_trace`."""
    table_path: Path
    """The profiler table as text (``key_averages().table(...)``)."""
    table: str
    """The same table, as a string."""
    device: str
    """``"cuda"`` when GPU activity was recorded, ``"cpu"`` otherwise."""
    activities: list[str]
    """The profiler activities that were recorded, e.g. ``["CPU", "CUDA"]``."""
    params: dict[str, Any] = field(default_factory=dict)
    """The run's parameters: schedule, warm-up iterations, label, sort key."""
    key_averages: Any = field(default=None, repr=False)
    """The profiler's ``key_averages()`` event list, for rendering the table as HTML."""

    @property
    def has_gpu(self) -> bool:
        """Whether GPU activity was profiled."""
        return self.device == "cuda"

    @cached_property
    def trace(self) -> Trace:
        """The trace, loaded once into the model every analysis queries."""
        from .trace import load_trace

        return load_trace(self.trace_path)


def capture(
    step: Callable[[], Any],
    *,
    name: str,
    out_dir: str | os.PathLike[str] = "traces",
    label: str = "step",
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    repeat: int = 1,
    warmup_iters: int = 0,
    trace_format: str = "json.gz",
    row_limit: int = 20,
    record_shapes: bool = False,
    with_stack: bool = False,
) -> Capture:
    """Profile ``step`` under a schedule and write the trace and the profiler table.

    Args:
        step: The code to profile, called once per step with no arguments.
        name: The run's name; see :func:`run_name`.
        out_dir: Folder for ``{name}.json.gz`` (or ``.json``) and ``{name}.txt``.
        label: The ``record_function`` label put around every call of ``step``.
        wait, warmup, active, repeat: The ``torch.profiler.schedule``. Steps in ``wait`` are
            run unprofiled; steps in ``warmup`` run with the profiler on but are discarded;
            ``active`` steps are recorded; the cycle is done ``repeat`` times. As in torch's
            default, the trace and the table hold the last cycle only.
        warmup_iters: Calls of ``step`` before the profiler starts (the post's ``--warmup``
            runs three), followed by a device synchronisation.
        trace_format: ``"json.gz"`` (default) or ``"json"``.
        row_limit: Rows in the profiler table.
        record_shapes, with_stack: Passed to ``torch.profiler.profile``; both add CPU overhead.

    Returns:
        A :class:`Capture`. On a machine without a GPU only CPU activity is recorded and
        ``Capture.device`` says ``"cpu"``; that is not an error.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    if trace_format not in ("json.gz", "json"):
        raise ValueError(f"trace_format must be 'json.gz' or 'json', not {trace_format!r}")
    if repeat < 1 or active < 1:
        raise ValueError("active and repeat must be at least 1")
    has_gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if has_gpu else [])

    def labelled_step() -> Any:
        with record_function(label):
            return step()

    for _ in range(warmup_iters):
        labelled_step()
    if has_gpu:
        # Warm-up work must have finished before profiling starts, or it leaks into step one.
        torch.cuda.synchronize()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trace_path = out / f"{name}.{trace_format}"
    table_path = out / f"{name}.txt"
    steps = (wait + warmup + active) * repeat
    plan = _schedule_without_paths(schedule, wait=wait, warmup=warmup, active=active, repeat=repeat)
    with warnings.catch_warnings():
        # Keeping only the last cycle when repeat > 1 is torch's default, kept here and said in
        # the docstring; torch's warning about it would otherwise print on every gallery page.
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
        with profile(
            activities=activities,
            schedule=plan,
            record_shapes=record_shapes,
            with_stack=with_stack,
        ) as prof:
            for _ in range(steps):
                labelled_step()
                prof.step()
    if has_gpu:
        torch.cuda.synchronize()
    export_trace(prof, trace_path)
    sort_by = "cuda_time_total" if has_gpu else "cpu_time_total"
    averages = prof.key_averages()
    table = averages.table(sort_by=sort_by, row_limit=row_limit)
    table_path.write_text(table + "\n")
    return Capture(
        name=name,
        trace_path=trace_path,
        table_path=table_path,
        table=table,
        device="cuda" if has_gpu else "cpu",
        activities=[a.name for a in activities],
        params={
            "wait": wait,
            "warmup": warmup,
            "active": active,
            "repeat": repeat,
            "warmup_iters": warmup_iters,
            "label": label,
            "sort_by": sort_by,
            "record_shapes": record_shapes,
            "with_stack": with_stack,
        },
        key_averages=averages,
    )


PACE_MARGIN = 0.2
"""How much longer than the CPU's part a call must take end to end for the GPU to be said to
set the pace (:attr:`CallTimes.gpu_sets_the_pace`): a fifth."""


@dataclass(frozen=True)
class CallTimes:
    """What :func:`time_per_call` measured: a call's time end to end, and the CPU's part."""

    end_to_end: Distribution
    """Per call, µs: the wall time from the batch's start to the end of its GPU work."""
    issue: Distribution
    """Per call, µs: the CPU's time to make the call, until it returns (with CUDA, before
    the GPU has finished the work it queued). Clearly under :attr:`end_to_end`, the GPU
    sets the pace and the CPU's time hides behind it; about equal, the GPU waits for the
    CPU."""

    @property
    def gpu_sets_the_pace(self) -> bool:
        """Whether a call takes clearly longer end to end than the CPU takes to make it
        (:func:`~profiling_utils.stats.clearly_greater`), and by at least
        :data:`PACE_MARGIN`: the CPU then waits for the GPU, and CPU time saved or added
        does not change the time per call. Under the margin, the CPU's time is most of a
        call's, and CPU time saved or added shows in it (a batch always ends a little after
        the CPU's last call returns, that call's GPU work shared among the batch's calls,
        so the two are never equal)."""
        return clearly_greater(self.end_to_end, self.issue) and not self.cpu_time_is_most

    @property
    def cpu_time_is_most(self) -> bool:
        """Whether a call's median time end to end is under :data:`PACE_MARGIN` above the
        CPU's median part of it: the CPU's time is most of the call. Neither this nor
        :attr:`gpu_sets_the_pace` holds where the medians are further apart but the two
        spreads overlap."""
        return self.end_to_end.median < (1 + PACE_MARGIN) * self.issue.median


def time_per_call(
    step: Callable[[], Any], *, calls: int = 20, repeats: int = 30, warmup_iters: int = 3
) -> CallTimes:
    """Time ``step`` without the profiler: what a call costs end to end, as a user's loop
    would see it, and the CPU's part of it.

    ``repeats`` batches of ``calls`` back-to-back calls, after ``warmup_iters`` calls and a
    device synchronisation. With CUDA, each batch runs between two CUDA events recorded on
    an idle GPU, so a batch's time is the wall time the GPU took to finish the calls: its
    kernels, and the gaps in which it waited for the CPU to launch them (a CPU-bound step
    is timed at the CPU's pace); the CPU's own time to make the calls is read with
    :func:`time.perf_counter` before it waits for the GPU. Without CUDA, both are the
    :func:`time.perf_counter` time of the batch.

    A profiled step's CPU time includes the profiler's own overhead (more with
    ``record_shapes``); these are the times to compare variants of a step by, with
    :func:`time_calls`, which takes their batches in turn.

    Args:
        step: The code to time, called with no arguments.
        calls: Calls per batch: enough that the batch is long against the events' resolution
            and the launch of the first call, and few enough that the CPU never waits for
            room in the GPU's launch queue.
        repeats: Batches: the samples of each distribution.
        warmup_iters: Calls before the first batch (compilation, cuBLAS's choice of kernel
            and the caching allocator settle in them).

    Returns:
        The time per call of each batch, end to end and the CPU's (:class:`CallTimes`).
    """
    (timed,) = time_calls(
        {"step": step}, calls=calls, repeats=repeats, warmup_iters=warmup_iters
    ).values()
    return timed


def time_calls(
    steps: Mapping[str, Callable[[], Any]],
    *,
    calls: int = 20,
    repeats: int = 30,
    warmup_iters: int = 3,
) -> dict[str, CallTimes]:
    """:func:`time_per_call` for several variants of a step, their batches taken in turn
    (the first variant's, the second's..., then the first's again), so that a change of the
    host's or the GPU's speed while they are timed (other work on a shared machine, clocks)
    falls on every variant alike, not on whichever ran then.

    Args:
        steps: The variants to time, by name, each called with no arguments.
        calls: Calls per batch, as :func:`time_per_call` takes them.
        repeats: Batches per variant.
        warmup_iters: Calls of each variant before the first batch.

    Returns:
        By name, the time per call of each batch, end to end and the CPU's.
    """
    import time

    import torch

    if calls < 1 or repeats < 1 or warmup_iters < 0:
        raise ValueError("calls and repeats must be at least 1, warmup_iters at least 0")
    cuda = torch.cuda.is_available()
    for step in steps.values():
        for _ in range(warmup_iters):
            step()
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            end_to_end, issue = samples[name]
            if cuda:
                torch.cuda.synchronize()
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                began = time.perf_counter()
                for _ in range(calls):
                    step()
                issued = time.perf_counter()
                end.record()
                end.synchronize()
                end_to_end.append(start.elapsed_time(end) * 1e3 / calls)  # ms to µs
            else:
                began = time.perf_counter()
                for _ in range(calls):
                    step()
                issued = time.perf_counter()
                end_to_end.append((issued - began) * 1e6 / calls)
            issue.append((issued - began) * 1e6 / calls)
    return {
        name: CallTimes(Distribution.of(e2e, unit="µs"), Distribution.of(made, unit="µs"))
        for name, (e2e, made) in samples.items()
    }


def export_trace(prof: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``prof``'s Chrome trace to ``path`` (``.json.gz`` or ``.json``), naming no
    directory of this machine.

    The file is what ``prof.export_chrome_trace(path)`` writes, with two changes, so that a
    trace can be published or shared as it is:

    - ``traceName`` is the file's own name. torch writes there the file it wrote first: for a
      ``.json.gz``, a temporary file that it has deleted by the time the trace is read;
    - a path into the temporary directory (``tempfile.gettempdir()``, where Inductor keeps its
      generated kernels: ``kernel_file`` in a compiled kernel's args) starts with
      ``$TMPDIR`` instead of that directory.

    Args:
        prof: A finished ``torch.profiler.profile``.
        path: Where to write the trace; a name ending in ``.gz`` is gzip-compressed.

    Returns:
        The path written, as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    prof.export_chrome_trace(str(path))
    _rewrite_machine_paths(path)
    return path


def _rewrite_machine_paths(path: Path) -> None:
    """Rewrite the trace at ``path`` in place as :func:`export_trace` describes."""
    compressed = path.name.endswith(".gz")
    data = path.read_bytes()
    text = (gzip.decompress(data) if compressed else data).decode("utf-8")
    text = _TRACE_NAME.sub(lambda _: f'"traceName": {json.dumps(path.name)}', text, count=1)
    # A JSON string that starts with the directory, then a separator (``/``, or ``\\`` as
    # JSON escapes a Windows one): not a sibling such as ``/tmpfoo``.
    temporary = json.dumps(tempfile.gettempdir().rstrip("/\\"))[:-1]
    text = re.sub(re.escape(temporary) + r"(?=/|\\\\)", '"$TMPDIR', text)
    data = text.encode("utf-8")
    # Level 9, as torch compresses; no timestamp, so the same trace gives the same bytes.
    path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0) if compressed else data)


_TRACE_NAME = re.compile(r'"traceName"\s*:\s*"(?:[^"\\]|\\.)*"')


def _schedule_without_paths(schedule: Callable[..., Any], **plan: int) -> Any:
    """``torch.profiler.schedule(**plan)``, its warnings re-issued as coming from torch.

    torch's warnings here (``warmup=0``: "Profiler won't be using warmup") are attributed to
    the line that called ``schedule``, whose full path would print on every page that shows
    the warning. Re-issued under the name of the function that warns, they keep their text.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = schedule(**plan)
    for warning in caught:
        warnings.warn_explicit(
            warning.message, warning.category, filename="torch.profiler.schedule", lineno=0
        )
    return made
