"""What the rules measure on a trace, computed once per trace and shared between rules.

Each rule reads what it needs from a :class:`Facts`; every derived structure is built on first
use in a single pass, so running every rule on a trace of hundreds of thousands of events costs
a few passes in total, never one per rule.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .. import measures
from ..trace import Span, Step, Trace

__all__ = [
    "MATMUL_OPS",
    "BIAS_MATMUL_OPS",
    "Launch",
    "Facts",
    "median",
    "us",
    "span_ref",
    "short_name",
    "step_label",
]

MATMUL_OPS = frozenset(
    {
        "aten::mm",
        "aten::bmm",
        "aten::addmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::_addmm_activation",
        "aten::_scaled_mm",
        "aten::addmv",
        "aten::mv",
        "aten::dot",
    }
)
"""ATen ops whose kernels are matrix multiplies (GEMM/GEMV). A kernel is a GEMM for the rules
when the op that launched it is one of these, whatever the kernel's name on a given GPU."""

BIAS_MATMUL_OPS = frozenset(
    {"aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation", "aten::addmv"}
)
"""Matrix multiplies that add a third operand (``beta * C + alpha * A @ B``)."""


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (which must not be empty)."""
    return statistics.median(values)


def us(value: float) -> float:
    """A time in µs, rounded to the nanosecond the trace records."""
    return round(value, 3)


def span_ref(span: Span) -> dict[str, Any]:
    """A span as evidence: name, start and duration (µs)."""
    return {"name": span.name, "start_us": us(span.start), "dur_us": us(span.dur)}


def short_name(name: str, width: int = 72) -> str:
    """A name clipped for a message (kernel names can run to hundreds of characters); the
    evidence keeps the full name."""
    return name if len(name) <= width else name[: width - 1] + "…"


def step_label(number: int) -> str:
    """``ProfilerStep#N``."""
    return f"ProfilerStep#{number}"


@dataclass(frozen=True, slots=True)
class Launch:
    """A runtime or driver call that started GPU work, with what led to it."""

    call: Span
    """The call (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaMemcpyAsync``...)."""
    op: Span | None
    """The ``cpu_op`` it was made from."""
    planning: tuple[Span, ...]
    """Planning calls (:data:`profiling_utils.measures.PLANNING_CALL_PREFIXES`) made in the
    same enclosing span after its previous launch."""
    work: tuple[Span, ...]
    """The GPU work it started, in start order."""


class Facts:
    """A trace and the measurements the rules share, each computed on first use.

    Args:
        trace: The loaded trace.
    """

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._lane_starts: dict[Any, list[float]] = {}

    @cached_property
    def steps(self) -> list[Step]:
        """The steps, ordered by number."""
        return self.trace.steps

    @cached_property
    def step_times(self) -> list[measures.StepTime]:
        """:func:`profiling_utils.measures.step_times`."""
        return measures.step_times(self.trace)

    @cached_property
    def launches(self) -> list[Launch]:
        """Every call that started GPU work, with its op and planning calls, in start order.

        One pass over the runtime and driver calls: a planning call is remembered under the
        span it was made in until the next launch from that span takes it.
        """
        trace = self.trace
        prefixes = measures.PLANNING_CALL_PREFIXES
        pending: dict[int | None, list[Span]] = {}
        launches = []
        for call in trace.runtime_calls:
            if call.is_launch:
                planning = pending.pop(call.parent, ())
                work = tuple(trace.gpu_work_of(call))
                launches.append(Launch(call, trace.op_of(call), tuple(planning), work))
            elif call.name.startswith(prefixes):
                pending.setdefault(call.parent, []).append(call)
        return launches

    @cached_property
    def launches_by_op(self) -> dict[int, list[Launch]]:
        """The launches made from each op, by op id, in start order."""
        by_op: dict[int, list[Launch]] = {}
        for launch in self.launches:
            if launch.op is not None:
                by_op.setdefault(launch.op.id, []).append(launch)
        return by_op

    @cached_property
    def launch_by_work(self) -> dict[int, Launch]:
        """The :class:`Launch` of each GPU activity, by the activity's span id."""
        return {work.id: launch for launch in self.launches for work in launch.work}

    @cached_property
    def kernels_by_name(self) -> dict[str, list[Span]]:
        """Kernels grouped by name, each list in start order."""
        by_name: dict[str, list[Span]] = {}
        for kernel in self.trace.kernels:
            by_name.setdefault(kernel.name, []).append(kernel)
        return by_name

    @cached_property
    def gemm_kernels(self) -> list[Span]:
        """Kernels launched from a matrix-multiply op (:data:`MATMUL_OPS`), in start order."""
        return [
            kernel
            for launch in self.launches
            if launch.op is not None and launch.op.name in MATMUL_OPS
            for kernel in launch.work
            if kernel.cat == "kernel"
        ]

    @cached_property
    def child_time(self) -> dict[int, float]:
        """Per span id, the summed duration of the spans directly nested in it."""
        totals: dict[int, float] = {}
        get = totals.get
        for span in self.trace.spans:
            parent = span.parent
            if parent is not None:
                totals[parent] = get(parent, 0.0) + span.dur
        return totals

    @cached_property
    def compile_info(self) -> measures.CompileInfo:
        """:func:`profiling_utils.measures.compiled_regions`."""
        return measures.compiled_regions(self.trace)

    @cached_property
    def memory_copies(self) -> list[measures.MemoryCopy]:
        """:func:`profiling_utils.measures.memory_copies`."""
        return measures.memory_copies(self.trace)

    def children_of(self, span: Span) -> list[Span]:
        """The spans directly nested in ``span``, found by scanning its time range only."""
        spans = self.trace.spans
        children = []
        for index in range(span.id + 1, len(spans)):
            candidate = spans[index]
            if candidate.start >= span.end:
                break
            if candidate.parent == span.id:
                children.append(candidate)
        return children

    def step_number_of(self, span: Span) -> int | None:
        """The number of the step ``span`` belongs to (see :meth:`Trace.step_of`)."""
        step = self.trace.step_of(span)
        return None if step is None else step.number

    def innermost_cpu_op_at(self, time: float, lane_of: Span) -> Span | None:
        """The deepest ``cpu_op`` on ``lane_of``'s lane that is running at ``time``."""
        spans = self.trace.lane_spans(lane_of.lane)
        starts = self._lane_starts.get(lane_of.lane)
        if starts is None:
            starts = self._lane_starts[lane_of.lane] = [span.start for span in spans]
        index = bisect_right(starts, time) - 1
        if index < 0:
            return None
        # The deepest span running at `time` encloses the last span started before it (or is
        # that span), so it is found among that span's ancestors.
        candidate: Span | None = spans[index]
        while candidate is not None and not (candidate.end > time and candidate.cat == "cpu_op"):
            parent = candidate.parent
            candidate = None if parent is None else self.trace.spans[parent]
        return candidate
