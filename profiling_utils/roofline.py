"""A roofline view of a trace: each operator's FLOPs and bytes, from the shapes it recorded.

A trace profiled with ``record_shapes=True`` writes, on every ``cpu_op`` event, the input
tensors' sizes (``Input Dims``), their dtypes (``Input type``) and the scalar arguments as text
(``Concrete Inputs``). From these, :func:`roofline` counts what each operator that launched GPU
work had to do, divides by the time its kernels ran, and sets the rate against the datasheet
(:mod:`profiling_utils.datasheet`):

- GEMMs (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``): ``2·m·n·k``
  FLOPs per product, times the batch. A bias or ``beta·C`` term is not counted.
- Convolutions (``aten::convolution``, ``_convolution``, ``cudnn_convolution``): ``2 · N ·
  C_out · H_out · W_out · C_in/groups · kH · kW`` (any number of spatial dimensions), the
  output size derived from the recorded stride, padding and dilation; a transposed
  convolution counts ``2 · N · C_in · H_in · W_in · C_out/groups · kH · kW``.
  ``aten::convolution_backward`` counts one forward's FLOPs per gradient it computes (input,
  weight; the bias gradient is a sum, not counted).
- Scaled-dot-product attention (``aten::scaled_dot_product_attention`` and its flash,
  efficient and cuDNN kernels' ops): ``2 · B · H · Lq · Lk · (D + Dv)`` for ``Q·Kᵀ`` and
  ``P·V`` (``4 · B · H · Lq · Lk · D`` when ``D = Dv``), the softmax not counted; halved when
  the recorded ``is_causal`` is true (a causal mask skips about half the products). The
  backward ops count twice the forward (the four products ``dV``, ``dP``, ``dQ``, ``dK``);
  the ``Q·Kᵀ`` that flash-style kernels recompute in the backward is not counted
  (``aten::_efficient_attention_backward`` has no count).
- Elementwise and copy ops (``aten::add``, ``mul``, ``copy_``, ``fill_``, activations and
  their backward...): bytes only. They do a few FLOPs per element, far below the ridge of
  every GPU in the table, so they are memory-bound by construction.

Bytes are the tensors read (every tensor input, at its recorded size and dtype) plus the output
written (its size derived as above, in the dtype of the first input): the traffic an ideal
kernel needs, not what the GPU's counters would measure (caches, re-reads and padding are
invisible to a trace). Other operators (reductions, norms, softmax, embedding, ``_foreach_*``
with tensor lists that record no sizes, fp8 ``aten::_scaled_mm``, collectives) are listed with
their GPU time but no FLOPs or bytes. GPU work launched outside any ``cpu_op``, or from an op
that recorded no shapes (``torch.compile``'s Triton kernels run under region markers), has no
entry.

**Fused kernels.** A kernel that fuses elementwise work is recorded under an op of its own
name: Inductor's Triton kernels under ``triton_poi_fused_...`` with their pointer arguments'
sizes, an autograd Function (Liger's ``LigerGELUMulFunction``) under its class name with its
inputs. A trace does not say which of those arguments are read and which written, so they get
no count by default. Name them in ``roofline(trace, elementwise=...)`` and each is counted as
an out-of-place elementwise op: every recorded tensor argument read once, one tensor as large
as the largest written. That is right for a kernel whose recorded arguments are its inputs
(Inductor's ``in_out_ptr0``, an input whose buffer takes the result, is read and then
written); it counts one read too many for each output buffer recorded as an argument
(Inductor's ``out_ptr``): check the kernel's code before naming it.

**Which operator counts.** Each GPU activity belongs to the *innermost* ``cpu_op`` around its
launch (:meth:`~profiling_utils.trace.Trace.op_of`): ``aten::linear`` reaches the GPU through
``aten::addmm`` or ``aten::mm``, and only that inner op has an entry, so nothing is counted
twice. The outer ops' formulas apply when they launch kernels themselves.

**Which peak applies.** The compute peak is the datasheet's for the op's first input dtype:
``bf16``, ``fp16``, ``fp8``, and for ``float`` the plain ``fp32`` figure; the ``tf32`` one for
a GEMM or convolution whose kernels' names say they ran TF32 on the tensor cores
(:func:`profiling_utils.kernels.fp32_math`: cuDNN allows TF32 for convolutions by default,
cuBLAS for matmuls once ``torch.set_float32_matmul_precision("high")`` is set; a trace
records neither setting); or for a GEMM on AMD's CDNA2 parts, which run fp32 GEMMs on their
matrix cores, the ``fp32_matrix`` one. The
ridge point is that peak over the memory bandwidth, in FLOP/byte: an op whose intensity (FLOPs
per byte) is below it is memory-bound, and its share of peak is its GB/s over the bandwidth;
above, it is compute-bound and its share is its TFLOP/s over the compute peak.

Example::

    view = roofline(load_trace("trace.json.gz"))
    if view.reason:
        print(view.reason)
    for entry in view.top(5):  # the five counted calls with the most GPU time
        print(entry.name, entry.input_dims, entry.bound, entry.peak_share)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from functools import cache, cached_property
from typing import Any, Literal

import msgspec

from .datasheet import DatasheetPeak, Figure, datasheet_peak, device_spec
from .kernels import fp32_math
from .trace import Span, Trace, element_bytes, gc_paused, input_shapes

__all__ = ["Roofline", "RooflineEntry", "gemm_sizes", "roofline"]

OpKind = Literal["gemm", "convolution", "attention", "elementwise", "other"]
Bound = Literal["compute", "memory", "unknown"]

_HOST_COPY = re.compile(r"\b(?:HtoD|DtoH)\b")
"""A copy between host and device memory, as Kineto names it (``Memcpy HtoD (Pageable ->
Device)``, ROCm's ``Memcpy DtoH (Device -> Host)``)."""

_COMPUTE_FIGURE: dict[str, Figure] = {
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "float": "fp32",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
}


@dataclass(frozen=True)
class RooflineEntry:
    """One operator call that launched GPU work, with what its shapes say it had to do."""

    op: Span
    """The ``cpu_op`` span."""
    kind: OpKind
    """Which formula applied: ``gemm``, ``convolution``, ``attention``, ``elementwise``, or
    ``other`` (no formula: GPU time only)."""
    flops: int | None
    """Floating-point operations (``None`` for elementwise and other ops)."""
    bytes: int | None
    """Bytes read and written, from the shapes (``None`` where they do not say)."""
    gpu_us: float
    """Total duration of the GPU activities the op launched, µs."""
    gpu_activities: int
    """How many kernels, copies and memsets the op launched."""
    device: str | None
    """The GPU's name, from ``deviceProperties``; ``None`` when the trace does not name it."""
    compute_peak: DatasheetPeak | None
    """The datasheet's compute peak for the op's dtype, when the device and dtype are known."""
    memory_peak: DatasheetPeak | None
    """The datasheet's memory bandwidth, when the device is known."""
    note: str = ""
    """What the count assumed, or why there is none (``"causal: halved"``...)."""
    gpu_records_whole: bool = True
    """False when a kernel launch made during the op has no GPU record in the trace (a trace
    cut short, or records the profiler dropped): :attr:`gpu_us` is then a lower bound, and no
    rate is given (a GEMM timed on its memset alone would run at many times its peak)."""

    @property
    def name(self) -> str:
        """The operator's name, e.g. ``"aten::mm"``."""
        return self.op.name

    # Read from the op's args when asked, not kept: an op's argument lists can run to
    # thousands of entries (a compiled graph's parameters), and a trace holds many such ops.
    @property
    def input_dims(self) -> list[Any]:
        """``Input Dims`` as recorded: one list of sizes per argument (``[]`` for a scalar)."""
        shapes = input_shapes(self.op)
        return shapes.dims if shapes is not None else []

    @property
    def input_types(self) -> list[str]:
        """``Input type`` as recorded: ``"c10::BFloat16"``, ``"float"``, ``"Scalar"``..."""
        shapes = input_shapes(self.op)
        return shapes.types if shapes is not None else []

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOPs per byte."""
        if self.flops is None or not self.bytes:
            return None
        return self.flops / self.bytes

    @property
    def tflops(self) -> float | None:
        """Achieved TFLOP/s (10^12 FLOPs per second) over the op's GPU time."""
        if self.flops is None or not self.gpu_us > 0 or not self.gpu_records_whole:
            return None
        return self.flops / self.gpu_us / 1e6

    @property
    def gb_s(self) -> float | None:
        """Achieved GB/s (10^9 bytes per second) over the op's GPU time."""
        if self.bytes is None or not self.gpu_us > 0 or not self.gpu_records_whole:
            return None
        return self.bytes / self.gpu_us / 1e3

    @property
    def ridge(self) -> float | None:
        """The ridge point, FLOP/byte: the compute peak over the memory bandwidth."""
        if self.compute_peak is None or self.memory_peak is None:
            return None
        return self.compute_peak.value * 1e12 / (self.memory_peak.value * 1e9)

    @property
    def bound(self) -> Bound:
        """``compute`` or ``memory`` by intensity against the ridge (elementwise ops are
        ``memory``); ``unknown`` without a count or a datasheet entry for the device."""
        if self.memory_peak is None:
            return "unknown"
        if self.kind == "elementwise" and self.bytes is not None:
            return "memory"
        intensity, ridge = self.intensity, self.ridge
        if intensity is None or ridge is None:
            return "unknown"
        return "compute" if intensity >= ridge else "memory"

    @property
    def peak(self) -> DatasheetPeak | None:
        """The datasheet peak that bounds this op: compute or memory, by :attr:`bound`."""
        return {"compute": self.compute_peak, "memory": self.memory_peak}.get(self.bound)

    @property
    def peak_share(self) -> float | None:
        """The achieved rate as a fraction of :attr:`peak` (TFLOP/s or GB/s)."""
        peak, bound = self.peak, self.bound
        achieved = self.tflops if bound == "compute" else self.gb_s
        if peak is None or achieved is None:
            return None
        return achieved / peak.value

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON-ready values (the peak as its one-line description)."""
        peak = self.peak
        return {
            "name": self.name,
            "start_us": self.op.start,
            "input_dims": self.input_dims,
            "input_types": self.input_types,
            "kind": self.kind,
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity": self.intensity,
            "gpu_us": self.gpu_us,
            "gpu_activities": self.gpu_activities,
            "tflops": self.tflops,
            "gb_s": self.gb_s,
            "device": self.device,
            "ridge": self.ridge,
            "bound": self.bound,
            "peak": None if peak is None else peak.describe(),
            "peak_tflops": None if self.compute_peak is None else self.compute_peak.value,
            "peak_gb_s": None if self.memory_peak is None else self.memory_peak.value,
            "peak_share": self.peak_share,
            "note": self.note,
        }


_SHAPES_KEY = msgspec.json.Encoder()
"""Encodes an op's recorded shapes and dtypes into the bytes that group its calls."""


@dataclass(frozen=True)
class RooflineGroup:
    """The calls of one operator with one set of recorded shapes (and dtypes), together: a
    training step's forward GEMM of one layer, called once per step."""

    entries: list[RooflineEntry]
    """The calls, in start order."""

    @property
    def first(self) -> RooflineEntry:
        """The first call: its name, kind, shapes, device and peaks are the group's."""
        return self.entries[0]

    @property
    def gpu_us(self) -> float:
        """The GPU time of all the calls, µs."""
        return sum(entry.gpu_us for entry in self.entries)

    @cached_property
    def together(self) -> RooflineEntry:
        """The calls as one entry: their FLOPs, bytes and GPU time added up, whose rates,
        bound and share of peak are the group's."""
        calls = len(self.entries)
        first = self.first
        return replace(
            first,
            flops=None if first.flops is None else first.flops * calls,
            bytes=None if first.bytes is None else first.bytes * calls,
            gpu_us=self.gpu_us,
            gpu_activities=sum(entry.gpu_activities for entry in self.entries),
            gpu_records_whole=all(entry.gpu_records_whole for entry in self.entries),
        )

    @property
    def above_peak(self) -> Literal["l2-cache", "suspect"] | None:
        """Why the group runs above its peak, where it does (``None`` where not, or without
        a peak): ``"l2-cache"`` for a memory-bound op whose bytes per call fit in the GPU's L2
        cache, which serves them faster than the memory bandwidth the peak is (the count is
        of the bytes an ideal kernel moves, not of where they come from); ``"suspect"``
        otherwise (the count, or the peak, is then in doubt)."""
        share = self.together.peak_share
        if share is None or share <= 1:
            return None
        spec = device_spec(self.first.device) if self.first.device else None
        l2 = spec.l2_cache_bytes if spec is not None else None
        num_bytes = self.first.bytes
        if self.together.bound == "memory" and l2 and num_bytes is not None and num_bytes <= l2:
            return "l2-cache"
        return "suspect"

    def to_dict(self) -> dict[str, Any]:
        """The group as JSON-ready values (the peak as its one-line description)."""
        first, peak = self.first, self.first.peak
        return {
            "name": first.name,
            "input_dims": first.input_dims,
            "input_types": first.input_types,
            "kind": first.kind,
            "calls": len(self.entries),
            "flops": first.flops,
            "bytes": first.bytes,
            "gpu_us": self.gpu_us,
            "tflops": self.together.tflops,
            "gb_s": self.together.gb_s,
            "device": first.device,
            "bound": first.bound,
            "peak": None if peak is None else peak.describe(),
            "peak_tflops": None if first.compute_peak is None else first.compute_peak.value,
            "peak_gb_s": None if first.memory_peak is None else first.memory_peak.value,
            "peak_share": self.together.peak_share,
            "above_peak": self.above_peak,
            "note": first.note,
        }


@dataclass(frozen=True)
class Roofline:
    """What :func:`roofline` found."""

    entries: list[RooflineEntry]
    """One per operator call with recorded shapes that launched GPU work, in start order."""
    reason: str | None
    """Why :attr:`entries` is empty (no GPU work, no shapes recorded); ``None`` otherwise."""

    @property
    def gpu_us(self) -> float:
        """The GPU time of every entry, µs."""
        return sum(entry.gpu_us for entry in self.entries)

    @property
    def counted_gpu_us(self) -> float:
        """The GPU time of the entries with a count (FLOPs or bytes), µs."""
        return sum(
            entry.gpu_us
            for entry in self.entries
            if entry.flops is not None or entry.bytes is not None
        )

    def top(self, count: int) -> list[RooflineEntry]:
        """The ``count`` entries with the most GPU time, most first, those with a count (FLOPs
        or bytes) before those without: a roofline is read for what it can place."""

        def order(entry: RooflineEntry) -> tuple[bool, float]:
            return (entry.flops is None and entry.bytes is None, -entry.gpu_us)

        return sorted(self.entries, key=order)[:count]

    def groups(self, count: int) -> list[RooflineGroup]:
        """The ``count`` groups of calls of one operator with one set of shapes
        (:class:`RooflineGroup`) with the most GPU time, most first, those with a count
        before those without."""
        by_call: dict[tuple[Any, ...], list[RooflineEntry]] = {}
        for entry in self.entries:
            shapes = input_shapes(entry.op)
            key = (
                entry.name,
                entry.kind,
                entry.device,
                entry.note,
                entry.flops,
                entry.bytes,
                entry.compute_peak,
                entry.memory_peak,
                None if shapes is None else _SHAPES_KEY.encode((shapes.dims, shapes.types)),
            )
            by_call.setdefault(key, []).append(entry)
        groups = [RooflineGroup(entries) for entries in by_call.values()]

        def order(group: RooflineGroup) -> tuple[bool, float]:
            return (group.first.flops is None and group.first.bytes is None, -group.gpu_us)

        return sorted(groups, key=order)[:count]


def roofline(trace: Trace, *, elementwise: Collection[str] = ()) -> Roofline:
    """Each operator's FLOPs, bytes and achieved rates against the device's datasheet.

    Args:
        trace: A loaded trace; the counts need one profiled with ``record_shapes=True``.
        elementwise: Names of ops to count as out-of-place elementwise ops (every tensor
            argument read, one output written): fused kernels whose arguments are their
            inputs (see "Fused kernels" in the module docs).

    Returns:
        The entries, one per innermost ``cpu_op`` that launched GPU work and recorded its
        input shapes (see the module docs for the formulas and what they leave out), and, when
        there are none, the reason.
    """
    with gc_paused():  # many small objects, no cycles
        return _roofline(trace, frozenset(elementwise))


class _RecordedConcrete(msgspec.Struct, gc=False):
    values: Any = msgspec.field(default=None, name="Concrete Inputs")


_CONCRETE_DECODER = msgspec.json.Decoder(_RecordedConcrete)


def _concrete_inputs(op: Span) -> list[Any]:
    """The op's ``Concrete Inputs`` (the values of its scalar arguments), read without
    decoding the rest of its args; ``[]`` when it recorded none."""
    if not op.raw_args:
        return []
    try:
        values = _CONCRETE_DECODER.decode(op.raw_args).values
    except msgspec.ValidationError:  # args that are not an object
        return []
    return values if isinstance(values, list) else []


def _roofline(trace: Trace, elementwise: frozenset[str]) -> Roofline:
    if not trace.gpu_work:
        return Roofline([], trace.describe_gpu_work())
    launched: dict[int, list[Span]] = {}
    for work in trace.gpu_work:
        op = trace.op_of(work)
        if op is not None:
            launched.setdefault(op.id, []).append(work)
    if not launched:
        return Roofline([], "no GPU work is launched from inside a CPU operator in this trace")
    names = {device.id: device.name for device in trace.devices if device.name != "unknown"}

    @cache
    def peak(device: str | None, figure: Figure | None) -> DatasheetPeak | None:
        """A datasheet figure, looked up once per device and figure."""
        return datasheet_peak(device, figure) if device and figure else None

    entries = []
    sizes_only = False  # an op recorded its sizes without their dtypes
    for op_id, work in sorted(launched.items()):
        op = trace.spans[op_id]
        shapes = input_shapes(op)
        if shapes is None or not shapes.types:
            sizes_only = sizes_only or shapes is not None
            continue
        dims, types = shapes.dims, shapes.types
        inputs = _Inputs(dims, types, _concrete_inputs(op))
        if op.name in elementwise:
            kind, flops, num_bytes, note = _count_fused(inputs)
        else:
            kind, flops, num_bytes, note = _count(op.name, inputs)
        if kind == "other" and all(w.is_communication for w in work):
            note = "communication kernels: GPU time only"
        # A copy between host and device runs at the host link's rate, which no datasheet
        # row holds: holding it to the GPU's memory bandwidth would misread it.
        over_host_link = all(w.cat == "gpu_memcpy" and _HOST_COPY.search(w.name) for w in work)
        if over_host_link:
            # What crosses the link: the largest tensor once, not a read and a write on the GPU.
            num_bytes = max((inputs.tensor_bytes(i) for i in inputs.tensors), default=num_bytes)
            note = "host-device copy: the bytes it moves at the host link's rate"
        whole = trace.kernel_launches_without_gpu_record((op.start, op.end))[0] == 0
        if not whole:
            missing = "a kernel launch in its time has no GPU record: GPU time a lower bound"
            note = f"{note}; {missing}" if note else missing
        device = names.get(work[0].lane.device) if work[0].lane.device is not None else None
        figure = next((_COMPUTE_FIGURE.get(types[i]) for i in inputs.tensors), None)
        if figure == "fp32" and kind in ("gemm", "convolution") and _ran_tf32(work):
            figure = "tf32"
        compute_peak = None
        if figure == "fp32" and kind == "gemm":  # on AMD's matrix cores where they take fp32
            compute_peak = peak(device, "fp32_matrix")
        compute_peak = compute_peak or peak(device, figure)
        entries.append(
            RooflineEntry(
                op=op,
                kind=kind,
                flops=flops,
                bytes=num_bytes,
                gpu_us=sum(w.dur for w in work),
                gpu_activities=len(work),
                device=device,
                compute_peak=compute_peak,
                memory_peak=None if over_host_link else peak(device, "memory"),
                note=note,
                gpu_records_whole=whole,
            )
        )
    if not entries and sizes_only:
        return Roofline(
            [],
            "the operators record their input sizes but not their dtypes (as torch ~1.9 "
            "wrote Input dims): nothing can be counted",
        )
    if not entries:
        return Roofline(
            [], "the operators record no input shapes (profile with record_shapes=True)"
        )
    return Roofline(entries, None)


def _ran_tf32(work: list[Span]) -> bool:
    """Whether the kernels of an op's GPU work that name their fp32 math all name TF32."""
    said = {fp32_math(activity.name) for activity in work if activity.cat == "kernel"}
    return said - {None} == {"tf32"}


# -- the recorded arguments ------------------------------------------------------------------


class _Inputs:
    """An op's recorded arguments: tensor sizes and dtypes, and scalars as text."""

    def __init__(self, dims: list[Any], types: list[Any], concrete: list[Any]) -> None:
        self.dims = dims
        self.types = types
        self.concrete = concrete
        self.tensors = [
            index
            for index, (sizes, dtype) in enumerate(zip(dims, types, strict=True))
            if isinstance(dtype, str)
            and element_bytes(dtype) is not None
            and isinstance(sizes, list)
            and all(isinstance(size, int) for size in sizes)
        ]
        """Indices of the tensor arguments whose sizes and dtype are recorded."""

    def is_tensor(self, index: int) -> bool:
        return index in self.tensors

    def shape(self, index: int) -> list[int] | None:
        """The sizes of tensor argument ``index``; ``None`` where none are recorded.

        Raises:
            _CannotCount: Its sizes are recorded but its dtype is not one whose size is known
                (:func:`~profiling_utils.trace.element_bytes`), so that the reason given is the
                dtype, not the sizes.
        """
        if self.is_tensor(index):
            return self.dims[index]
        if index < len(self.types) and isinstance(self.dims[index], list) and self.dims[index]:
            dtype = self.types[index]
            if isinstance(dtype, str) and dtype and element_bytes(dtype) is None:
                raise _CannotCount(f"the size of its dtype {dtype!r} is not known")
        return None

    def tensor_bytes(self, index: int) -> int:
        return math.prod(self.dims[index]) * self.element_bytes(index)

    def read_bytes(self) -> int:
        """Every tensor input, at its size."""
        return sum(self.tensor_bytes(i) for i in self.tensors)

    def element_bytes(self, index: int) -> int:
        size = element_bytes(self.types[index])
        assert size is not None  # a tensor argument's (self.tensors): its size is known
        return size

    def value(self, index: int) -> Any:
        """A scalar argument parsed from its text (``"True"``, ``"[1, 1]"``, ``"3"``), or
        ``None`` when it is not recorded."""
        if index >= len(self.concrete) or not isinstance(self.concrete[index], str):
            return None
        text = self.concrete[index].strip()
        if text in ("True", "False"):
            return text == "True"
        try:  # Python's spelling of lists of booleans: "[True, False]"
            return json.loads(text.replace("True", "true").replace("False", "false"))
        except ValueError:
            return None


_Count = tuple[int | None, int | None, str]
"""FLOPs, bytes, and a note on what the count assumed."""


def _count(name: str, inputs: _Inputs) -> tuple[OpKind, int | None, int | None, str]:
    """The op's kind, FLOPs, bytes and a note on what was assumed or why there is no count."""
    formula = _FORMULAS.get(name)
    if formula is None:
        return "other", None, None, "no formula for this operator: GPU time only"
    kind, count = formula
    try:
        flops, num_bytes, note = count(name, inputs)
    except _CannotCount as reason:
        return kind, None, None, str(reason)
    return kind, flops, num_bytes, note


def _count_fused(inputs: _Inputs) -> tuple[OpKind, int | None, int | None, str]:
    """A fused elementwise kernel named by the caller: out of place (see the module docs)."""
    if not inputs.tensors:
        return "elementwise", None, None, "no tensor sizes are recorded"
    # The arguments may be views of one size with different shapes (Inductor passes
    # [64, 128, 3072] and [8192, 3072]): the output is as large as the largest argument.
    largest = max(inputs.tensors, key=lambda i: math.prod(inputs.dims[i]))
    written = inputs.tensor_bytes(largest)
    note = "fused: each tensor argument read, one output written"
    return "elementwise", None, inputs.read_bytes() + written, note


class _CannotCount(Exception):
    """The recorded arguments do not give what a formula needs (the message says what)."""


# -- GEMMs -----------------------------------------------------------------------------------

_GEMM_OPERANDS: dict[str, tuple[int, int]] = {
    "aten::mm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::_addmm_activation": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
    "aten::matmul": (0, 1),
    "aten::linear": (0, 1),
}
"""The argument indices of the two matrices of each GEMM op."""


def _gemm(name: str, inputs: _Inputs) -> _Count:
    first, second = _GEMM_OPERANDS[name]
    a, b = inputs.shape(first), inputs.shape(second)
    if a is None or b is None or not a or not b:
        raise _CannotCount("the matrices' sizes are not recorded")
    if name == "aten::linear":  # input @ weightᵀ: weight is (n, k)
        if len(b) != 2 or a[-1] != b[1]:
            raise _CannotCount(f"weight {b} does not match input {a}")
        batch, m, n, k = math.prod(a[:-1]), 1, b[0], b[1]
    else:
        batch, m, n, k = _matmul_sizes(a, b)
    output = batch * m * n * inputs.element_bytes(first)
    return 2 * m * n * k * batch, inputs.read_bytes() + output, ""


def gemm_sizes(op: Span) -> tuple[tuple[int, int, int, int], str] | None:
    """``((batch, m, n, k), dtype)`` of a GEMM op (``aten::mm``, ``aten::addmm``,
    ``aten::linear``...) from the shapes it recorded (``record_shapes=True``): ``C[m, n] =
    A[m, k] @ B[k, n]``, ``batch`` times, ``dtype`` its first matrix's ``Input type``.
    ``None`` for another op, or one whose matrices' sizes are not recorded or do not match."""
    operands = _GEMM_OPERANDS.get(op.name)
    shapes = input_shapes(op) if operands is not None else None
    if shapes is None or operands is None:
        return None
    first, second = operands
    a, b = shapes.sizes(first), shapes.sizes(second)
    if not a or not b or first >= len(shapes.types):
        return None
    if op.name == "aten::linear":  # input @ weightᵀ: weight is (n, k)
        if len(b) != 2 or a[-1] != b[1]:
            return None
        return (math.prod(a[:-1]), 1, b[0], b[1]), shapes.types[first]
    try:
        return _matmul_sizes(list(a), list(b)), shapes.types[first]
    except _CannotCount:
        return None


def _matmul_sizes(a: list[int], b: list[int]) -> tuple[int, int, int, int]:
    """(batch, m, n, k) of ``a @ b`` with ``torch.matmul``'s rules (1-D operands, broadcast
    batch dimensions)."""
    m, k = (1, a[0]) if len(a) == 1 else (a[-2], a[-1])
    k_b, n = (b[0], 1) if len(b) == 1 else (b[-2], b[-1])
    if k != k_b:
        raise _CannotCount(f"inner sizes differ: {a} @ {b}")
    batch_a, batch_b = a[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    return math.prod(max(x, y) for x, y in zip(batch_a, batch_b, strict=True)), m, n, k


# -- convolutions ----------------------------------------------------------------------------

_CONVOLUTION_ARGS: dict[str, tuple[int, int, int, int | None, int | None, int]] = {
    # name: (stride, padding, dilation, transposed, output_padding, groups) argument indices
    "aten::convolution": (3, 4, 5, 6, 7, 8),
    "aten::_convolution": (3, 4, 5, 6, 7, 8),
    "aten::cudnn_convolution": (3, 2, 4, None, None, 5),
}


def _int_list(value: Any, length: int, what: str) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * length
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        if len(value) == 1:
            return value * length
        if len(value) == length:
            return value
    raise _CannotCount(f"{what} is not recorded (Concrete Inputs), so the output size is not known")


def _convolution(name: str, inputs: _Inputs) -> _Count:
    stride_at, padding_at, dilation_at, transposed_at, output_padding_at, groups_at = (
        _CONVOLUTION_ARGS[name]
    )
    x, w = inputs.shape(0), inputs.shape(1)
    if x is None or w is None or len(x) < 3 or len(x) != len(w):
        raise _CannotCount("the input and weight sizes are not recorded")
    spatial = len(x) - 2
    stride = _int_list(inputs.value(stride_at), spatial, "the stride")
    if min(stride) < 1:
        raise _CannotCount(f"the recorded stride {stride} is not positive")
    padding = _int_list(inputs.value(padding_at), spatial, "the padding")
    dilation = _int_list(inputs.value(dilation_at), spatial, "the dilation")
    transposed = inputs.value(transposed_at) is True if transposed_at is not None else False
    groups = inputs.value(groups_at)
    if not isinstance(groups, int) or groups < 1:
        raise _CannotCount("groups is not recorded")
    kernel = w[2:]
    if transposed:
        out_padding = [0] * spatial
        if output_padding_at is not None:
            out_padding = _int_list(inputs.value(output_padding_at), spatial, "output_padding")
        out = [
            (size - 1) * s - 2 * p + d * (k - 1) + op + 1
            for size, s, p, d, k, op in zip(
                x[2:], stride, padding, dilation, kernel, out_padding, strict=True
            )
        ]
        out_channels = w[1] * groups  # weight is (C_in, C_out/groups, k...)
        flops = 2 * x[0] * math.prod(x[2:]) * math.prod(w)
    else:
        out = [
            (size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, s, p, d, k in zip(x[2:], stride, padding, dilation, kernel, strict=True)
        ]
        out_channels = w[0]  # weight is (C_out, C_in/groups, k...)
        flops = 2 * x[0] * math.prod(out) * math.prod(w)
    output = x[0] * out_channels * math.prod(out) * inputs.element_bytes(0)
    return flops, inputs.read_bytes() + output, ""


def _convolution_backward(name: str, inputs: _Inputs) -> _Count:
    # (grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #  output_padding, groups, output_mask)
    grad, x, w = inputs.shape(0), inputs.shape(1), inputs.shape(2)
    if grad is None or x is None or w is None or len(x) < 3:
        raise _CannotCount("the gradient, input and weight sizes are not recorded")
    mask = inputs.value(10)
    if not (isinstance(mask, list) and len(mask) == 3 and all(isinstance(m, bool) for m in mask)):
        raise _CannotCount("output_mask is not recorded: which gradients ran is not known")
    transposed = inputs.value(7) is True
    forward = 2 * x[0] * math.prod((x if transposed else grad)[2:]) * math.prod(w)
    written = (
        mask[0] * inputs.tensor_bytes(1)
        + mask[1] * inputs.tensor_bytes(2)
        + mask[2] * grad[1] * inputs.element_bytes(0)
    )
    note = "one forward's FLOPs per gradient (input, weight)"
    return forward * (mask[0] + mask[1]), inputs.read_bytes() + written, note


# -- attention -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _AttentionArgs:
    query: int
    """Index of the query; key and value follow it."""
    seq_axis: int
    """The sequence axis of query and key: 2 for (B, H, L, D), 1 for (B, L, H, D)."""
    causal: int
    """Index of ``is_causal`` (or, for ``_efficient_attention_forward``, of
    ``custom_mask_type``, causal when not 0)."""
    backward: bool = False


_ATTENTION: dict[str, _AttentionArgs] = {
    "aten::scaled_dot_product_attention": _AttentionArgs(0, 2, 5),
    "aten::_scaled_dot_product_flash_attention": _AttentionArgs(0, 2, 4),
    "aten::_scaled_dot_product_efficient_attention": _AttentionArgs(0, 2, 6),
    "aten::_scaled_dot_product_cudnn_attention": _AttentionArgs(0, 2, 6),
    "aten::_cudnn_attention_forward": _AttentionArgs(0, 2, 10),
    "aten::_flash_attention_forward": _AttentionArgs(0, 1, 8),
    "aten::_efficient_attention_forward": _AttentionArgs(0, 1, 9),
    "aten::_scaled_dot_product_flash_attention_backward": _AttentionArgs(1, 2, 11, True),
    "aten::_scaled_dot_product_efficient_attention_backward": _AttentionArgs(1, 2, 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _AttentionArgs(1, 2, 14, True),
    "aten::_cudnn_attention_backward": _AttentionArgs(1, 2, 14, True),
    "aten::_flash_attention_backward": _AttentionArgs(1, 1, 11, True),
}
"""Where each attention op's arguments are, from its ATen schema."""


def _attention(name: str, inputs: _Inputs) -> _Count:
    spec = _ATTENTION[name]
    q, k, v = (inputs.shape(spec.query + i) for i in range(3))
    if q is None or k is None or v is None or not len(q) == len(k) == len(v) == 4:
        raise _CannotCount("the query, key and value sizes are not recorded")
    seq_q, seq_k = q[spec.seq_axis], k[spec.seq_axis]
    head_dim, value_dim = q[3], v[3]
    rows = math.prod(q[:3])  # batch × heads × query length, in either layout
    flops = 2 * rows * seq_k * (head_dim + value_dim)
    output_elements = rows * value_dim
    causal = inputs.value(spec.causal)
    if isinstance(causal, int) and not isinstance(causal, bool):  # custom_mask_type
        causal = causal != 0
    notes = []
    if causal is True:
        flops //= 2
        notes.append("causal: halved")
    elif causal is None:
        notes.append("is_causal not recorded: counted without a mask")
    element = inputs.element_bytes(spec.query)
    if spec.backward:
        flops *= 2
        notes.append("backward: twice the forward, the recomputed Q·Kᵀ not counted")
        written = inputs.tensor_bytes(spec.query) + inputs.tensor_bytes(spec.query + 1)
        written += inputs.tensor_bytes(spec.query + 2)
    else:
        written = output_elements * element
    if seq_q != seq_k:
        notes.append(f"Lq {seq_q}, Lk {seq_k}")
    return flops, inputs.read_bytes() + written, "; ".join(notes)


# -- elementwise -----------------------------------------------------------------------------

_ELEMENTWISE_ARGS = {
    **dict.fromkeys(("neg", "exp", "log", "sqrt", "rsqrt", "abs", "relu", "silu"), 1),
    **dict.fromkeys(("sigmoid", "tanh"), 1),
    **dict.fromkeys(("mul", "div", "pow", "clamp_min", "clamp_max", "maximum", "minimum"), 2),
    **dict.fromkeys(("gelu", "silu_backward", "sigmoid_backward", "tanh_backward"), 2),
    **dict.fromkeys(("add", "sub", "where", "clamp", "threshold_backward"), 3),
    **dict.fromkeys(("gelu_backward", "native_dropout_backward", "masked_fill", "lerp"), 3),
    **dict.fromkeys(("addcmul", "addcdiv"), 4),
}
"""The elementwise ops counted out of place, each with the arguments of its functional form
(``mul(self, other)``, ``add(self, other, *, alpha)``): a profiler records every argument,
so an ``out=`` overload records one more, the tensor it writes, last."""
_ELEMENTWISE_OUT_OF_PLACE = set(_ELEMENTWISE_ARGS)
_ELEMENTWISE = {
    *(f"aten::{name}" for name in _ELEMENTWISE_OUT_OF_PLACE),
    *(f"aten::{name}_" for name in _ELEMENTWISE_OUT_OF_PLACE),
    "aten::copy_",
    "aten::fill_",
    "aten::zero_",
}
_WRITE_ONLY = {"aten::copy_", "aten::fill_", "aten::zero_"}
"""In-place ops that overwrite ``self`` without reading it."""


def _elementwise(name: str, inputs: _Inputs) -> _Count:
    tensors = inputs.tensors
    if not tensors:
        raise _CannotCount("no tensor sizes are recorded")
    first = tensors[0]
    if name.endswith("_"):  # in place: the output is self
        written = inputs.tensor_bytes(first)
        read = inputs.read_bytes() - (written if name in _WRITE_ONLY else 0)
        return None, read + written, ""
    read = inputs.read_bytes()
    last = len(inputs.dims) - 1
    if last >= _ELEMENTWISE_ARGS.get(name.removeprefix("aten::"), last + 1) and last in tensors:
        # An out= overload (mul.out): its last argument is the tensor it writes, not a read.
        read -= inputs.tensor_bytes(last)
        tensors = [index for index in tensors if index != last]
        if not tensors:
            raise _CannotCount("no tensor sizes are recorded but its output's")
        first = tensors[0]
    if name == "aten::where" and len(tensors) > 1:
        first = tensors[1]  # where(condition, self, other) writes self's dtype, not a bool
    shape = _broadcast([inputs.dims[i] for i in tensors])
    written = math.prod(shape) * inputs.element_bytes(first)
    return None, read + written, ""


def _broadcast(shapes: list[list[int]]) -> list[int]:
    width = max(len(shape) for shape in shapes)
    padded = [[1] * (width - len(shape)) + shape for shape in shapes]
    return [max(sizes) for sizes in zip(*padded, strict=True)]


_FORMULAS: dict[str, tuple[OpKind, Callable[[str, _Inputs], _Count]]] = {
    **{name: ("gemm", _gemm) for name in _GEMM_OPERANDS},
    **{name: ("convolution", _convolution) for name in _CONVOLUTION_ARGS},
    "aten::convolution_backward": ("convolution", _convolution_backward),
    **{name: ("attention", _attention) for name in _ATTENTION},
    **{name: ("elementwise", _elementwise) for name in _ELEMENTWISE},
}
"""Each operator with a formula: its kind and the function that counts it."""
