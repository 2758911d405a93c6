"""The trace model: one structure, built once per trace, that every analysis queries.

:func:`load_trace` reads a Kineto trace (``.json`` or ``.json.gz``) and builds a :class:`Trace`:

- the **spans** (complete ``X`` events) with times in µs relative to the trace's origin, the
  earliest span start, so the first span starts at ``0.0``;
- the **lanes** they lie on: each CPU thread, each GPU device and stream, a GPU's device-wide
  synchronisation row, the profiler's own overhead track (``pid == -1``), and anything else
  (``other``, e.g. an MTIA device's tracks);
- the **CPU call tree** on each lane (nesting by time: :attr:`Span.parent`, :attr:`Span.depth`).
  A parent always contains its children whole: a span that only partly overlaps another (a
  ``with_stack`` Python frame and an op that outlives it) is not nested in it but becomes its
  sibling, the child of the nearest span that does contain it. A Python frame and the op it
  calls, written with the same interval (whole-µs times), nest frame first;
- the **launch links** from each runtime or driver call (CUDA or HIP; Intel XPU's
  ``xpu_runtime`` calls and a ``PrivateUse1`` backend's too, :data:`LAUNCH_CATEGORIES`) to the
  GPU work it started, by ``args.correlation`` on both sides (one ``cudaGraphLaunch`` may
  start several);
  in a trace that records no correlation (some ROCm traces), by an ``External id`` that names
  one call;
- the ``ProfilerStep#N`` **steps** and the GPU work launched from inside each;
- the **communication kernels** (NCCL, RCCL) apart from the compute kernels;
- the **devices** (vendor, architecture, SMs or CUs) from ``deviceProperties``, the CUDA and
  CUPTI versions, and the process's **rank** and world size from ``distributedInfo``.

Every Kineto schema seen in the wild reads into this one vocabulary: torch ~1.8 traces
(categories ``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``, ``Python``; tids such
as ``"stream 7"``; ``computeProperties``) are renamed on load (:data:`LEGACY_CATEGORIES`), and
ROCm traces, whose GPU pids are HSA agent ids counted after the CPU sockets, are mapped onto
the devices listed (agent 9 of a two-socket, eight-GPU host is device 7).

Example::

    trace = load_trace("4096_bf16_warm_eager.json.gz")
    for kernel in trace.kernels:
        launch = trace.launch_of(kernel)
        print(kernel.name, kernel.dur, launch.name if launch else None, trace.step_of(kernel))
"""

from __future__ import annotations

import gc
import math
import os
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property, partial
from itertools import chain, compress, count, islice
from operator import attrgetter, eq, is_, methodcaller, not_
from pathlib import Path
from typing import Any, Literal

import msgspec

from .errors import TraceError
from .loading import Event, MemoryEvent, OtherEvent, RawTrace, load_raw_trace

__all__ = [
    "LaneKind",
    "Lane",
    "Span",
    "Step",
    "GraphCapture",
    "DeviceInfo",
    "Vendor",
    "devices_differ",
    "TraceContent",
    "Trace",
    "load_trace",
    "is_communication",
    "COMMUNICATION_KERNEL_PATTERN",
    "InputShapes",
    "input_shapes",
    "element_bytes",
    "gc_paused",
]

LaneKind = Literal["cpu", "gpu", "overhead", "other"]

TraceContent = Literal[
    "GPU", "accelerator not read", "GPU not recorded", "CPU only", "profiler only", "no events"
]
"""What a trace holds, in a word for reports: GPU work (CUDA or HIP), only the events of an
accelerator the model does not read (see :meth:`Trace.unread_device_lanes`), host events of a
program that launched GPU work which the trace does not hold (its launch or copy calls, or GPU
lanes with no kernel, copy or memset on them), only host events, only the profiler's own (no
op, label, Python frame, launch or GPU work: a profiler stopped outside its active steps), or
nothing at all."""

LEGACY_CATEGORIES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Python": "python_function",
}
"""Category spellings of torch ~1.8-1.9 traces (and the TensorBoard plugin's samples), mapped to
today's. The model renames them on load (:attr:`Trace.renamed_categories` keeps what was
written), so every analysis reads one vocabulary."""
LEGACY_LABEL_PREFIXES = ("enumerate(DataLoader)#", "Optimizer.step#", "Optimizer.zero_grad#")
"""The ``record_function`` labels torch itself writes around a data loader's ``next`` and an
optimizer's ``step`` and ``zero_grad``. Traces of torch before ~1.10 file every label as an
op (category ``Operator``, later ``cpu_op``, ``ProfilerStep#N`` included); the model files
these as ``user_annotation``, as today's torch does, so that they are not counted as work or
listed as operators (``ProfilerStep#N`` is filed so too; a label of your own in such a trace
cannot be told from an op and stays one)."""
GPU_WORK_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
"""Categories of work that occupies a GPU stream."""
COUNTER_RANGE_CATEGORY = "cuda_profiler_range"
"""The category of CUPTI's range profiler's ranges (:attr:`Trace.counter_ranges`)."""
GPU_CATEGORIES = GPU_WORK_CATEGORIES | {"gpu_user_annotation", COUNTER_RANGE_CATEGORY}
"""Categories that only appear on GPU lanes (``cuda_profiler_range``: the per-kernel ranges of
CUPTI's range profiler, which replays kernels, so they are not GPU work)."""
LAUNCH_CATEGORIES = frozenset(
    {
        "cuda_runtime",
        "cuda_driver",
        "xpu_runtime",
        "xpu_driver",
        "privateuse1_runtime",
        "privateuse1_driver",
    }
)
"""Categories of the host calls that can start GPU work: CUDA's runtime and driver calls
(HIP's on ROCm, which Kineto files under the same names), Intel XPU's (``xpu_runtime``:
``urEnqueueKernelLaunch``...), and those of an out-of-tree backend registered as
``PrivateUse1``. Each links to its GPU work by ``correlation``."""
CPU_CATEGORIES = frozenset(
    {
        "cpu_op",
        "user_annotation",
        "python_function",
        "cpu_instant_event",
        *LAUNCH_CATEGORIES,
        "cuda_sync",
        "cuda_event",
        "external_correlation",
    }
)
"""Categories recorded on host threads."""

LABEL_CATEGORIES = frozenset({"user_annotation", "gpu_user_annotation", "python_function", "Trace"})
"""Categories that name a stretch of the program rather than work done in it: a
``record_function`` label or ``ProfilerStep#N`` (and its copy on a GPU lane), a Python frame
of a ``with_stack`` trace, the profiler's own span over the whole trace. They are never busy
time: a thread inside a label may be idle, or running code the profiler does not record."""

HOST_COLLECTIVE_PREFIX = "gloo:"
"""The name prefix of the ranges Gloo, c10d's CPU backend, records for its collectives: labels
by category, but a thread inside one is running the collective itself (busy time)."""

SYNC_CATEGORIES = frozenset({"cuda_sync", "cuda_event"})
"""Categories of synchronisation events; on a GPU's own pid they form its device-wide sync row."""

_READ_CATEGORIES = (
    CPU_CATEGORIES | GPU_CATEGORIES | SYNC_CATEGORIES | LABEL_CATEGORIES | {"overhead", ""}
) | {"mtia_runtime"}
"""Categories whose events the model reads (``""``: a file of another tool, whose events say
no category; ``mtia_runtime``: calls of MTIA's runtime on a host thread). A thread whose events
are all of other categories (an out-of-tree accelerator's own, such as ``aiu`` and
``privateuse1``) is no CPU thread: :meth:`Trace.unread_device_lanes`."""

COMMUNICATION_KERNEL_PATTERN = re.compile(
    r"[np]ccl\w*Kernel|rccl|mscclKernel|nvshmem"
    r"|(?:void )?(?:deep_ep::|(?:(?:\w+|\(anonymous namespace\))::)*"
    r"(?:cross_device_reduce_|(?:multimem_)?(?:one|two)_shot_all_reduce|multimem_all_reduce"
    r"|multimem_all_gather|(?:one|two)[Ss]hotAll[Rr]educe|allreduce_fusion_kernel"
    r"|allreduce_prototype_(?:one|two)shot))"
)
"""The names of collective and point-to-point communication kernels, matched at the start:

- NCCL's (``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_SendRecv``, and before
  NCCL 2.7 ``ncclAllReduceRingLLKernel_sum_f32``), RCCL's on ROCm (NCCL's names, plus its own
  ``rccl`` ones), MSCCL's and NVSHMEM's;
- the custom all-reduce of vLLM and SGLang (``void vllm::cross_device_reduce_1stage<...>``,
  ``void sglang::cross_device_reduce_2stage<...>``, aiter's), on NVIDIA and AMD alike, which
  serving traces run instead of NCCL for small tensors, and their quantized QuickReduce on
  ROCm (``quickreduce::allreduce_prototype_twoshot<...>``);
- PyTorch's symmetric-memory and intra-node collectives (``one_shot_all_reduce_kernel``,
  ``multimem_all_reduce_kernel``, ``oneShotAllReduceKernel``), FlashInfer's TensorRT-LLM
  all-reduce (``allreduce_fusion_kernel_oneshot_lamport``, fused with the residual add and
  norm that follow it, and its multi-node NVLink ``twoshotAllreduceKernel``), DeepEP's
  expert-parallel kernels (``deep_ep::``) and the PCCL library's (``pcclKernel_...``).

The function's own name must match, after ``void`` and its namespaces: a kernel that only
mentions one in its template arguments, or that fuses a GEMM with an all-reduce
(``gemm_one_shot_all_reduce_kernel``), is compute."""

_STEP_NAME = re.compile(r"ProfilerStep#(\d{1,19})")  # a 64-bit number: 19 digits or fewer
_STEP_PREFIX = "ProfilerStep#"
_STREAM_NUMBER = re.compile(r"\s*(?:stream\s*)?(-?\d+)\s*", re.I)
# Tensile GEMM kernels (rocBLAS, hipBLASLt) carry the ISA they were built for: "..._ISA90a_...".
_TENSILE_ISA = re.compile(r"_ISA(\d{2,4}[a-z]?)_")
# The gfx target of AMD Instinct parts, for a trace that names the device but writes no
# gcnArchName (ROCm 6 traces of an MI300X write computeMajor/Minor 9.4, which names none).
_AMD_ARCH_OF_PRODUCT = {
    "MI50": "gfx906",
    "MI60": "gfx906",
    "MI100": "gfx908",
    "MI210": "gfx90a",
    "MI250": "gfx90a",
    "MI250X": "gfx90a",
    "MI300A": "gfx942",
    "MI300X": "gfx942",
    "MI308X": "gfx942",
    "MI325X": "gfx942",
    "MI350X": "gfx950",
    "MI355X": "gfx950",
}
_AMD_PRODUCT = re.compile(r"\b(MI\d{2,3}[AX]?)\b")
_RECORD_WINDOW_END = "Record Window End"
_CAPTURE_BEGIN = "StreamBeginCapture"  # cudaStreamBeginCapture, hipStreamBeginCapture
_CAPTURE_END = "StreamEndCapture"
_GRAPH_INSTANTIATE = "GraphInstantiate"  # cudaGraphInstantiateWithFlags, hipGraphInstantiate
_HOST_OP_CATEGORIES = ("cpu_op", "user_annotation", "python_function")
_ISSUES_GPU_WORK = re.compile(r"Launch|Memcpy|Memset")  # cudaLaunchKernel, hipMemcpyAsync...
# Kernel launches and graph replays; not copies or memsets, some of which CUPTI never records.
_LAUNCHES_KERNELS = re.compile(r"LaunchKernel|LaunchCooperativeKernel|GraphLaunch")
_START = attrgetter("start")
_DUR = attrgetter("dur")
_ID = attrgetter("id")
_NAME = attrgetter("name")
_CAT = attrgetter("cat")
_IS_STEP_NAME = methodcaller("startswith", _STEP_PREFIX)
_IS_COMMUNICATION = COMMUNICATION_KERNEL_PATTERN.match
_OVERLAP_LOOKBACK = 32  # spans before a call that outlived its op: its op's own calls
_OVERLAP_OPS = 4  # ops before such a call whose External id is read
# Kineto writes times in µs with three decimals (whole µs before torch ~1.11): a child that
# ends this little after its parent is rounding, and still nests in it.
_NEST_TOLERANCE_US = 0.002
# Kineto writes times to the ns. Floats near today's epoch in µs (1.7e15) are spaced 0.25 µs
# apart; near the offsets from baseTimeNanoseconds that torch >= 2.4 writes (4e12), 0.001.
_EXACT_TIME_SPACING_US = 0.001
_RECORDING_END_TOLERANCE_US = 1.0


def is_communication(name: str) -> bool:
    """Whether a GPU kernel's name is a collective or point-to-point communication kernel.

    NCCL, RCCL, MSCCL and NVSHMEM kernels, and the custom all-reduce kernels of serving
    engines; see :data:`COMMUNICATION_KERNEL_PATTERN`.
    """
    return COMMUNICATION_KERNEL_PATTERN.match(name) is not None


class Lane(msgspec.Struct, frozen=True, gc=False):
    """One timeline row: a CPU thread, a GPU stream, the profiler's overhead track, or other."""

    pid: int | str
    """The event ``pid`` as written (the process, or the device for GPU work)."""
    tid: int | str
    """The event ``tid`` as written (the thread, or the stream for GPU work)."""
    kind: LaneKind
    """``gpu`` for a lane with kernels, copies, memsets or GPU annotations, and for a GPU's
    device-wide sync row (its pid, tid -1); ``overhead`` for ``pid == -1``; ``cpu`` for host
    threads; ``other`` for the rest (the ``Spans`` row, another accelerator's tracks)."""
    label: str
    """A short name: ``"CPU thread 429"``, ``"GPU 0 stream 7"``, ``"GPU 0 synchronization"``,
    ``"CUPTI overhead"``, ``"device 17 track 3774"``."""
    device: int | None = None
    """The device index (:attr:`DeviceInfo.id`), for GPU lanes and other accelerators' tracks.
    It is the pid, except on ROCm where the pid may be an HSA agent id (see the module docs)."""
    stream: int | None = None
    """The stream, for GPU stream lanes (from tid ``7``, ``"7"`` or ``"stream 7"``)."""
    unread: bool = False
    """Whether every event of the lane is of a category the model does not read (an
    out-of-tree accelerator's own): an ``other`` lane, never a CPU thread."""


_UNASSIGNED_LANE = Lane("", "", "other", "")
# Kineto names a thread "thread <tid> (<name>)".
_KINETO_THREAD_NAME = re.compile(r"thread \S+ \((.+)\)")
# torch ~1.8 traces label a process for each GPU of the machine (``process_labels``).
_GPU_PROCESS_LABEL = re.compile(r"GPU \d+")


class Span(Event, gc=False, eq=False):
    """One complete (``X``) event of the trace.

    Spans are built by :func:`load_trace`, straight from the JSON; do not create or modify
    them. Two spans are equal only if they are the same object, so spans can be dict keys.

    Attributes:
        id: Index of the span in :attr:`Trace.spans`.
        name: The event name (``aten::mm``, ``cudaLaunchKernel``, a kernel's name...).
        cat: The Kineto category (``cpu_op``, ``kernel``, ``cuda_runtime``...).
        lane: The :class:`Lane` the span lies on.
        start: Start, µs from the trace origin.
        dur: Duration in µs (0.0 for an event written without ``dur``).
        depth: Nesting depth on its lane; 0 for a top-level span.
        parent: Id of the enclosing span on the same lane, or ``None``.
        correlation: ``args["correlation"]`` of runtime/driver calls and GPU work, else ``None``
            (in a trace without any, their ``External id`` where it names one call; one
            written as a whole float or a string of digits is read as the integer).
        is_launch: Whether this runtime/driver call started GPU work found in the trace.
        pid, tid: As written in the file (also on :attr:`lane`).
        raw_args: The undecoded ``args`` JSON (:class:`msgspec.Raw`).
    """

    # Fields filled by the model, never by the JSON: their JSON names cannot occur in a trace.
    id: int = msgspec.field(default=-1, name="~id")
    lane: Lane = msgspec.field(default=_UNASSIGNED_LANE, name="~lane")
    depth: int = msgspec.field(default=0, name="~depth")
    parent: int | None = msgspec.field(default=None, name="~parent")
    correlation: int | None = msgspec.field(default=None, name="~correlation")
    is_launch: bool = msgspec.field(default=False, name="~is_launch")
    _args: dict[str, Any] | None = msgspec.field(default=None, name="~args")

    @property
    def end(self) -> float:
        """End time, µs from the trace origin (``start + dur``)."""
        return self.start + self.dur

    @property
    def args(self) -> dict[str, Any]:
        """The event's ``args``, decoded on first access and cached (empty when absent)."""
        args = self._args
        if args is None:
            args = _decode_args(self.raw_args)
            self._args = args
        return args

    @property
    def external_id(self) -> int | None:
        """``args["External id"]``: ties an op, its runtime calls and their GPU work together."""
        value = self.args.get("External id")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def is_gpu_work(self) -> bool:
        """Whether this is a kernel, a memcpy or a memset on a GPU."""
        return self.cat in GPU_WORK_CATEGORIES

    @property
    def is_communication(self) -> bool:
        """Whether this is a communication kernel (:func:`is_communication`)."""
        return self.cat == "kernel" and is_communication(self.name)

    def __repr__(self) -> str:
        return (
            f"Span(id={self.id}, name={self.name!r}, cat={self.cat!r}, "
            f"lane={self.lane.label!r}, start={self.start:.3f}, dur={self.dur:.3f})"
        )


_IS_SPAN_TYPE = partial(is_, Span)
_ARGS_DECODER = msgspec.json.Decoder()


def _decode_args(raw: msgspec.Raw) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = _ARGS_DECODER.decode(raw)
    except msgspec.ValidationError:  # a number no float can hold (1e999): valid JSON, no args
        return {}
    return value if isinstance(value, dict) else {}


class _LinkArgs(msgspec.Struct, gc=False):
    correlation: int | None = None


_LINK_ARGS = msgspec.json.Decoder(_LinkArgs)


_ELEMENT_BYTES = {
    **dict.fromkeys(("double", "float64", "c10::complex<float>", "complex64"), 8),
    **dict.fromkeys(("float", "float32", "int", "int32", "unsigned int", "uint32"), 4),
    **dict.fromkeys(("c10::half", "half", "float16", "c10::bfloat16", "bfloat16"), 2),
    **dict.fromkeys(("long int", "long", "int64", "long long", "unsigned long", "uint64"), 8),
    **dict.fromkeys(("short int", "short", "int16", "unsigned short", "uint16"), 2),
    **dict.fromkeys(("signed char", "char", "int8", "unsigned char", "uint8", "byte"), 1),
    "bool": 1,
    "c10::complex<double>": 16,
    "complex128": 16,
    **{
        f"{prefix}float8_{kind}": 1
        for prefix in ("", "c10::")
        for kind in ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu")
    },
}


def element_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a dtype as a trace spells it, or ``None`` for one of unknown
    size (or none): the C++ names of ``Input type`` (``float``, ``c10::BFloat16``, ``long
    int``), the ScalarType names collectives record (``Float``, ``BFloat16``) and the short
    ones (``float32``, ``int8``), in any case."""
    return None if dtype is None else _ELEMENT_BYTES.get(dtype.strip().lower())


class InputShapes(msgspec.Struct, gc=False, frozen=True):
    """The arguments an op recorded with ``record_shapes=True``: read them with
    :func:`input_shapes`."""

    dims: list[list[int | list[int]]]
    """Per argument, a tensor's sizes (``[]`` for a scalar, a 0-dim tensor or ``None``), or a
    tensor list's, one list of sizes per tensor."""
    types: list[str]
    """Per argument, as the profiler spells it: ``"float"``, ``"c10::BFloat16"``,
    ``"Scalar"``, ``""``... Empty in torch ~1.9 traces, which record sizes only (as
    ``Input dims``); otherwise as long as :attr:`dims`."""

    def sizes(self, index: int) -> tuple[int, ...] | None:
        """The sizes of argument ``index`` when it is one tensor of at least one dimension;
        ``None`` for a scalar, a 0-dim tensor, a tensor list or an index past the end."""
        if index >= len(self.dims):
            return None
        sizes = self.dims[index]
        # Decoding made each size an int or a list of ints: a tensor's hold no list.
        if not sizes or list in map(type, sizes):
            return None
        return tuple(sizes)  # type: ignore[arg-type]


class _RecordedShapes(msgspec.Struct, gc=False):
    dims: list[list[int | list[int]]] | None = msgspec.field(default=None, name="Input Dims")
    legacy_dims: list[list[int | list[int]]] | None = msgspec.field(default=None, name="Input dims")
    types: list[str] | None = msgspec.field(default=None, name="Input type")


_SHAPES_DECODER = msgspec.json.Decoder(_RecordedShapes)


def input_shapes(span: Span) -> InputShapes | None:
    """The shapes and dtypes ``span`` (an op) recorded, read from its args without decoding
    the rest of them; ``None`` when it recorded none, or recorded them in a form the profiler
    does not write (sizes that are not whole numbers, a dtype list of another length)."""
    if not span.raw_args:
        return None
    try:
        recorded = _SHAPES_DECODER.decode(span.raw_args)
    except msgspec.ValidationError:  # args that are not an object, or shapes of another form
        return None
    dims = recorded.dims if recorded.dims is not None else recorded.legacy_dims
    if dims is None:
        return None
    types = recorded.types or []
    if types and len(types) != len(dims):
        return None
    return InputShapes(dims, types)


def _loose_correlation(span: Span) -> int | None:
    """The correlation of an event whose ``args`` do not hold it as an integer: written as a
    whole float (``12.0``, as tools that pass traces through pandas write it) or a string of
    digits, it is read; anything else (``args`` not an object, a list) links nothing, rather
    than refusing the trace for one field."""
    value = span.args.get("correlation")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return _as_int(value)


class Step(msgspec.Struct, frozen=True, gc=False):
    """One ``ProfilerStep#N`` window: the CPU annotation and the GPU work launched inside it."""

    number: int
    """N in ``ProfilerStep#N``."""
    span: Span
    """The CPU ``user_annotation`` span ``ProfilerStep#N``."""
    start: float
    """Start of the CPU window, µs."""
    end: float
    """End of the CPU window, µs."""
    gpu_work: tuple[Span, ...]
    """GPU work (kernels, copies, memsets) launched from inside the window, by correlation,
    in start order. It may run after the window ends."""

    def __repr__(self) -> str:
        # The GPU work of a training step runs to thousands of spans: counted, not listed.
        return (
            f"Step(number={self.number}, start={self.start!r}, end={self.end!r}, "
            f"gpu_work=<{len(self.gpu_work)} activities>)"
        )


class GraphCapture(msgspec.Struct, frozen=True, gc=False):
    """A graph of GPU work captured on a CPU thread (CUDA's or HIP's stream capture): the work
    its thread launches in between is recorded into the graph, not run; a graph launch
    (``cudaGraphLaunch``) replays it later."""

    begin: Span
    """The ``...StreamBeginCapture`` call that opened it."""
    end: Span | None
    """The ``...StreamEndCapture`` call that closed it; ``None`` for a capture still open
    when the recording ends."""
    instantiations: tuple[Span, ...]
    """The ``...GraphInstantiate...`` calls its thread made after it closed and before the
    thread's next capture, which turn the captured graph into one that can run."""

    @property
    def lane(self) -> Lane:
        """The CPU thread that captured it."""
        return self.begin.lane

    @property
    def stop_us(self) -> float:
        """When the capture closed (the end of its ``...StreamEndCapture``), µs; ``inf`` for
        one still open when the recording ends."""
        return math.inf if self.end is None else self.end.end


Vendor = Literal["nvidia", "amd", "intel", "meta", "unknown"]


class DeviceInfo(msgspec.Struct, frozen=True, gc=False):
    """An accelerator as ``deviceProperties`` describes it (or as the GPU work shows it)."""

    id: int
    """The device index, as the trace's GPU lanes use it (:attr:`Lane.device`)."""
    name: str
    """E.g. ``"NVIDIA H100 80GB HBM3"``; ``"unknown"`` for a device with GPU work but no
    ``deviceProperties`` entry."""
    vendor: Vendor
    """``"nvidia"``, ``"amd"``, ``"intel"`` (an XPU), ``"meta"`` (an MTIA, whose runtime
    calls the trace files as ``mtia_runtime``), or ``"unknown"`` (another accelerator, or no
    clue)."""
    arch: str | None
    """The instruction-set architecture: ``"sm_90"`` on NVIDIA (from the compute capability),
    ``"gfx90a"`` on AMD (from ``gcnArchName`` when written, else from the Instinct product
    the name gives, else from the ``_ISA90a_`` tag of the trace's Tensile GEMM kernels);
    ``None`` when the trace does not say."""
    compute_units: int | None
    """Streaming multiprocessors on NVIDIA, compute units on AMD (``numSms`` in both); on an
    Intel XPU, SYCL's ``max_compute_units`` (``maxComputeUnits``)."""
    total_memory_bytes: int | None
    """Global memory in bytes (``totalGlobalMem``)."""
    compute_capability: tuple[int, int] | None
    """``(computeMajor, computeMinor)``, e.g. ``(9, 0)``. AMD writes its GFX major and minor
    here (``(9, 0)`` for an MI250): use :attr:`arch` there."""
    shared_memory_per_sm_bytes: int | None = None
    """Shared memory of one SM (``sharedMemPerMultiprocessor``; ROCm writes
    ``maxSharedMemoryPerMultiProcessor``, a CU's LDS), which the blocks resident on it share:
    233,472 bytes (228 KiB) on an H100."""
    registers_per_sm: int | None = None
    """32-bit registers of one SM (``regsPerMultiprocessor``): 65,536 on an H100."""
    threads_per_sm: int | None = None
    """Most threads resident on one SM (``maxThreadsPerMultiprocessor``): 2,048 on an H100."""

    @property
    def model(self) -> str:
        """The device's name, with the architecture on AMD, where ROCm gives several models
        one name (``"AMD Radeon Graphics, gfx942"``); for a device without a name,
        :meth:`describe`."""
        if self.name in ("", "unknown"):
            return self.describe()
        if self.vendor == "amd" and self.arch:
            return f"{self.name}, {self.arch}"
        return self.name

    def describe(self) -> str:
        """The device for humans: ``"NVIDIA H100 80GB HBM3, 132 SMs, compute capability 9.0"``,
        ``"AMD Instinct MI250X, 110 CUs, gfx90a"``; without a name, what the trace shows of
        it: ``"unknown AMD GPU, gfx942"``, ``"unknown NVIDIA GPU"``, ``"unknown GPU"``."""
        if self.name in ("", "unknown"):
            if self.vendor == "meta":
                return "unknown MTIA accelerator (Meta)"
            vendor = {"nvidia": "NVIDIA ", "amd": "AMD ", "intel": "Intel "}.get(self.vendor, "")
            return ", ".join([f"unknown {vendor}GPU", *([self.arch] if self.arch else [])])
        facts = [self.name]
        if self.vendor == "nvidia":
            if self.compute_units is not None:
                facts.append(f"{self.compute_units} SMs")
            if self.compute_capability is not None:
                facts.append("compute capability {}.{}".format(*self.compute_capability))
        elif self.vendor == "amd":
            if self.compute_units is not None:
                facts.append(f"{self.compute_units} CUs")
            if self.arch is not None:
                facts.append(self.arch)
        elif self.vendor == "intel":
            if self.compute_units is not None:
                facts.append(f"{self.compute_units} compute units")
        elif self.vendor == "meta":
            facts.append("MTIA accelerator (Meta)")
        else:
            facts.append("accelerator of unknown vendor")
        return ", ".join(facts)


def devices_differ(first: Sequence[DeviceInfo], second: Sequence[DeviceInfo]) -> bool:
    """Whether two traces ran on devices of different kinds, as far as both say: AMD
    architectures that both traces know (from ``deviceProperties`` or their GEMM kernels' ISA
    tag; ROCm gives several models one name, ``"AMD Radeon Graphics"``); where a device has
    no name, vendors both traces know (an AMD GPU is no NVIDIA one); where every device is
    named, their names."""
    both = (*first, *second)
    if not first or not second:
        return False
    archs = [{d.arch for d in side if d.vendor == "amd"} for side in (first, second)]
    if all(archs) and None not in archs[0] | archs[1] and archs[0] != archs[1]:
        return True  # named or not: the architecture an AMD GPU's kernels name differs
    if any(d.name in ("", "unknown") for d in both):
        # Unnamed, a device still has a vendor where its runtime calls or kernels show it.
        vendors = [{d.vendor for d in side} for side in (first, second)]
        return "unknown" not in vendors[0] | vendors[1] and vendors[0] != vendors[1]
    return {d.name for d in first} != {d.name for d in second}


_GPU_BACKEND_LABELS = ("nccl:", "rccl:")
"""Labels of the c10d backends that run collectives on GPUs."""
_AMD_NAMES = ("AMD", "Radeon", "Instinct")
_NVIDIA_NAMES = ("NVIDIA", "Tesla", "Quadro", "GeForce", "TITAN")
_INTEL_NAMES = ("Intel",)  # "Intel(R) Data Center GPU Max 1550", as SYCL names XPUs
# Data-centre GPUs as drivers before R470 named them, without "NVIDIA": "A100-SXM4-40GB".
_AMD_BARE_NAME = re.compile(r"MI\d{2,3}[A-Z]?(?:\s|$)")
_NVIDIA_BARE_NAME = re.compile(r"(?:[ABHLTV]|GH|GB)\d{1,3}[A-Z]?(?:-|\s|$)")


def _vendor_from_name(name: str) -> Vendor:
    if name.startswith(_NVIDIA_NAMES) or _NVIDIA_BARE_NAME.match(name):
        return "nvidia"
    if any(word in name for word in _AMD_NAMES) or _AMD_BARE_NAME.match(name):
        return "amd"
    if name.startswith(_INTEL_NAMES):
        return "intel"
    return "unknown"


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _hip_version(value: Any) -> str | None:
    """``70125424`` -> ``"7.1.25424"`` (HIP's ``10**7 * major + 10**5 * minor + patch``)."""
    number = _as_int(value)
    if number is not None and number > 0:
        return f"{number // 10**7}.{number % 10**7 // 10**5}.{number % 10**5}"
    return value if isinstance(value, str) and value else None


def _cuda_version(value: Any) -> str | None:
    """``13000`` -> ``"13.0"``, ``12040`` -> ``"12.4"`` (CUDA's ``1000 * major + 10 * minor``)."""
    number = _as_int(value)
    if number is not None:
        return f"{number // 1000}.{number % 1000 // 10}"
    return value if isinstance(value, str) and value else None


def _device_info(
    index: int, props: dict[str, Any], runtime_vendor: Vendor, amd_arch: str | None
) -> DeviceInfo:
    major = _as_int(props.get("computeMajor", props.get("major")))
    minor = _as_int(props.get("computeMinor", props.get("minor")))
    device_id = _as_int(props.get("id"))
    name = str(props.get("name", ""))
    vendor = _vendor_from_name(name)
    if vendor == "unknown" and (major is not None or runtime_vendor == "meta"):
        # A GPU whose name says nothing: the launch API (cuda*/hip*) tells; an MTIA's name
        # (``ARTEMIS``) neither, nor does it write a compute capability: its runtime calls do.
        vendor = runtime_vendor
    capability = None if major is None or minor is None else (major, minor)
    arch: str | None = None
    if vendor == "nvidia" and capability is not None:
        arch = f"sm_{major}{minor}"
    elif vendor == "amd":
        written = props.get("gcnArchName") or props.get("arch")
        product = _AMD_PRODUCT.search(name)
        if written:
            arch = str(written).split(":", 1)[0]
        elif product and product[1] in _AMD_ARCH_OF_PRODUCT:
            arch = _AMD_ARCH_OF_PRODUCT[product[1]]
        else:
            arch = amd_arch
    return DeviceInfo(
        id=index if device_id is None else device_id,
        name=name,
        vendor=vendor,
        arch=arch,
        compute_units=_as_int(
            props.get("numSms", props.get("multiProcessorCount", props.get("maxComputeUnits")))
        ),
        total_memory_bytes=_as_int(props.get("totalGlobalMem")),
        compute_capability=capability,
        shared_memory_per_sm_bytes=_as_int(
            props.get("sharedMemPerMultiprocessor", props.get("maxSharedMemoryPerMultiProcessor"))
        ),
        registers_per_sm=_as_int(props.get("regsPerMultiprocessor")),
        threads_per_sm=_as_int(
            # torch ~1.8's computeProperties spell it with a capital P.
            props.get("maxThreadsPerMultiprocessor", props.get("maxThreadsPerMultiProcessor"))
        ),
    )


def _stream_number(tid: int | str) -> int | None:
    """A GPU lane's stream from its tid: ``7``, ``"7"`` or ``"stream 7"`` (torch ~1.8)."""
    if isinstance(tid, int):
        return tid
    match = _STREAM_NUMBER.fullmatch(tid)
    return int(match[1]) if match else None


def _sort_key(value: int | str) -> tuple[int, int, str]:
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _make_lane(
    pid: int | str, tid: int | str, categories: set[str], device: int | None, on_host: bool
) -> Lane:
    """The lane of ``(pid, tid)``; ``device`` is the GPU index when ``pid`` is a GPU's;
    ``on_host``: whether another thread of ``pid`` records host events (ops, runtime calls),
    which makes ``pid`` a host process and any thread of it a CPU thread (an accelerator's
    runtime calls, such as MTIA's ``mtia_runtime``, on a thread of their own)."""
    if pid == -1 or pid == "-1":
        return Lane(pid, tid, "overhead", "CUPTI overhead")
    if categories & GPU_CATEGORIES:
        stream = _stream_number(tid)
        shown = device if device is not None else pid
        return Lane(
            pid,
            tid,
            "gpu",
            f"GPU {shown} stream {tid if stream is None else stream}",
            device,
            stream,
        )
    if device is not None and categories <= SYNC_CATEGORIES:
        # Kineto writes device-wide synchronisation (cudaDeviceSynchronize) on the GPU's own
        # pid, tid -1: a GPU row, not a CPU thread.
        return Lane(pid, tid, "gpu", f"GPU {device} synchronization", device, None)
    if categories & CPU_CATEGORIES:
        return Lane(pid, tid, "cpu", f"CPU thread {tid}")
    if categories == {"overhead"}:
        return Lane(pid, tid, "overhead", "CUPTI overhead")
    if device is None and categories.isdisjoint(_READ_CATEGORIES):  # an accelerator's own
        shown = ", ".join(sorted(categories))
        return Lane(pid, tid, "other", f"{pid} track {tid} ({shown})", None, None, True)
    if on_host and device is None:
        return Lane(pid, tid, "cpu", f"CPU thread {tid}")
    if device is not None:
        return Lane(pid, tid, "other", f"device {device} track {tid}", device, None)
    return Lane(pid, tid, "other", f"{pid} {tid}".strip())


def _lane_order(lane: Lane) -> tuple[Any, ...]:
    rank = {"cpu": 0, "gpu": 1, "overhead": 2, "other": 3}[lane.kind]
    if lane.kind == "gpu":
        return (
            rank,
            _sort_key(lane.device if lane.device is not None else str(lane.pid)),
            _sort_key(lane.stream if lane.stream is not None else str(lane.tid)),
        )
    return (rank, _sort_key(lane.pid), _sort_key(lane.tid))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building or analysing a trace: that creates
    many small objects and no cycles, and on a large trace a collection would walk every one
    of them again and again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Trace:
    """A loaded trace and the structure built from it. Create one with :func:`load_trace`.

    All times are µs from the trace origin, the earliest span start (:attr:`origin_us` in the
    file's own time base), so the first span starts at 0.0.
    The lists are built once and shared: do not modify them.
    """

    path: Path
    """The file the trace was read from."""
    spans: list[Span]
    """Every complete event, sorted by (start, -dur); ``spans[i].id == i``."""
    lanes: list[Lane]
    """CPU lanes first, then GPU lanes by (device, stream), the overhead lane, then others."""
    steps: list[Step]
    """The ``ProfilerStep#N`` windows, ordered by N: those of the CPU thread that holds the
    most of them (one process's steps, where a file merges several processes' events), with
    the GPU work launched from that thread's process."""
    left_out_steps: list[Span]
    """``ProfilerStep#N`` annotations of the steps' thread that are not steps: a number seen
    before (a file holding several sessions) or one that starts inside another step."""
    other_step_lanes: list[Lane]
    """Other CPU threads that hold ``ProfilerStep#N`` annotations, whose steps are left out
    (empty for a trace of one process, as ``torch.profiler`` writes)."""
    devices: list[DeviceInfo]
    """The accelerators in ``deviceProperties``, by id, plus any device that has GPU lanes but
    no entry there (named ``"unknown"``). Empty for a CPU-only trace without properties."""
    vendor: Vendor
    """The GPU vendor the launch calls show (``hip*`` on AMD, ``cuda*`` on NVIDIA, calls of
    category ``xpu_runtime`` on an Intel XPU), or ``"unknown"`` when the trace has none."""
    rank: int | None
    """``distributedInfo.rank``: this process's rank in a distributed job, else ``None``."""
    world_size: int | None
    """``distributedInfo.world_size``, else ``None``."""
    process_groups: int | None
    """The process groups the trace records (the default one included): the larger of
    ``distributedInfo.pg_count`` and the groups ``pg_config`` lists (torch counts in
    ``pg_count`` only the groups it names itself, not those made with
    ``use_local_synchronization`` or ``split_group``); ``None`` where it records neither."""
    renamed_categories: dict[str, str]
    """Legacy categories this file used, ``{written: current}`` (empty for today's traces),
    e.g. ``{"Kernel": "kernel"}`` for torch ~1.8; see :data:`LEGACY_CATEGORIES`."""
    cuda_runtime_version: str | None
    """E.g. ``"13.0"`` from ``cuda_runtime_version: 13000``."""
    cuda_driver_version: str | None
    """E.g. ``"13.0"`` from ``cuda_driver_version: 13000``."""
    cupti_version: int | None
    """``cupti_version`` as written, e.g. ``130001``."""
    hip_runtime_version: str | None
    """On ROCm, e.g. ``"7.1.25424"`` from ``hip_runtime_version: 70125424``."""
    hip_driver_version: str | None
    """On ROCm, ``hip_driver_version`` read the same way."""
    base_time_ns: int | None
    """``baseTimeNanoseconds`` when written (torch >= 2.4): absolute ns of the trace's ``ts`` 0."""
    origin_us: float
    """The written ``ts`` of the earliest span: add it to a span's start to get the file's ts."""
    has_gpu: bool
    """Whether the trace holds any GPU work. A CPU-only trace is valid."""
    kernels: list[Span]
    """Spans of category ``kernel``, in start order."""
    communication: list[Span]
    """The communication kernels (:func:`is_communication`), in start order."""
    compute_kernels: list[Span]
    """The kernels that are not communication, in start order."""
    gpu_work: list[Span]
    """Kernels, memcpys and memsets, in start order."""
    cpu_ops: list[Span]
    """Spans of category ``cpu_op`` (ATen ops and compiled-region markers)."""
    runtime_calls: list[Span]
    """CUDA runtime and driver calls (``cuda_runtime`` and ``cuda_driver``)."""
    annotations: list[Span]
    """CPU ``user_annotation`` spans (``record_function`` labels) other than ``ProfilerStep#N``."""
    overhead: list[Span]
    """Spans on the overhead lane, such as ``Activity Buffer Request``."""
    launch_of_id: Callable[[int], Span | None]
    """:meth:`launch_of` by the GPU work's span id: one dict lookup, for loops over many
    spans."""
    gpu_work_of_id: Callable[[int], list[Span] | None]
    """:meth:`gpu_work_of` by the launch call's span id, ``None`` for a call that launched
    nothing: one dict lookup, for loops over many spans."""
    gpu_work_steps: dict[int, int]
    """The step number of each GPU activity launched inside a step, by span id (the step
    whose :attr:`Step.gpu_work` lists it)."""
    gpu_numbers_may_be_agent_ids: bool
    """On ROCm: whether the GPU numbers (:attr:`Lane.device`) may be HSA agent ids rather
    than device indices. Kineto on ROCm writes the agent id, and HSA numbers the CPU sockets
    first (the first GPU of a two-socket host is agent 2); when every number fits the device
    list and none is 0, the trace cannot tell the two apart. False on NVIDIA."""
    negative_durations: int
    """How many complete events the file gives a negative ``dur``, read as 0 µs: Kineto
    before torch 1.13 wrote one for an activity whose end it did not record (its end as 0)."""
    children_cover_us: list[float]
    """Per span id, the time its direct children cover (the union of their intervals; children
    may overlap one another, never their parent's edges). See :meth:`self_us`."""

    def __init__(self, raw: RawTrace[Span]) -> None:
        """Build the model from decoded events; use :func:`load_trace` rather than this.

        The trace takes the events out of ``raw`` (``raw.events`` is left empty) so that the
        events it does not keep (flows, metadata, instants) are freed before it builds.
        """
        self.path = raw.path
        self._device_properties = raw.device_properties
        self.cuda_runtime_version = _cuda_version(raw.cuda_runtime_version)
        self.cuda_driver_version = _cuda_version(raw.cuda_driver_version)
        self.cupti_version = _as_int(raw.cupti_version)
        self.hip_runtime_version = _hip_version(raw.hip_runtime_version)
        self.hip_driver_version = _hip_version(raw.hip_driver_version)
        self.base_time_ns = _as_int(raw.base_time_ns)
        self._raw = raw
        distributed = raw.distributed_info
        distributed = distributed if isinstance(distributed, dict) else {}
        self.rank = _as_int(distributed.get("rank"))
        self.world_size = _as_int(distributed.get("world_size"))
        listed = distributed.get("pg_config")
        counts = [
            count
            for count in (
                _as_int(distributed.get("pg_count")),
                len(listed) if isinstance(listed, list) else None,
            )
            if count is not None
        ]
        self.process_groups = max(counts) if counts else None
        events, raw.events = raw.events, []
        self._build_spans(events)

    @property
    def metadata(self) -> dict[str, Any]:
        """Every other top-level key of the file (``schemaVersion``, ``traceName``...), read
        on first use."""
        return self._raw.metadata

    def thread_name(self, lane: Lane) -> str | None:
        """What the trace calls ``lane``'s thread, from its ``thread_name`` metadata event
        (read on first use): ``"pt_autograd_0"`` for Kineto's ``"thread 879
        (pt_autograd_0)"``, autograd's backward thread. ``None`` for a lane that is not a CPU
        thread, or a thread without a name."""
        if lane.kind != "cpu":
            return None
        name = self._raw.thread_names.get((lane.pid, lane.tid))
        if name is None:
            return None
        match = _KINETO_THREAD_NAME.fullmatch(name)
        return match[1] if match else name

    @property
    def memory_events(self) -> list[MemoryEvent]:
        """The allocations and frees ``profile_memory=True`` recorded (``[memory]`` events),
        in file order, each ``ts`` shifted as the spans' times are (µs from the trace's
        origin); read on first use, empty for a trace recorded without them."""
        origin = self.origin_us
        return [
            msgspec.structs.replace(event, ts=event.ts - origin)
            for event in self._raw.memory_events
        ]

    # -- building ---------------------------------------------------------------------------

    def _build_spans(self, events: list[Span | OtherEvent]) -> None:
        # A C-level pass keeps the complete events.
        spans = list(compress(events, map(_IS_SPAN_TYPE, map(type, events))))
        if not spans and events:
            self._refuse_duration_pairs(events)
        starts = list(map(_START, spans))
        self._check_times(spans, starts, list(map(_DUR, spans)))
        self.origin_us = 0.0
        if _rounded_on_decoding(starts):
            self._use_exact_times(events, spans)
        del starts
        events.clear()  # the last reference: free the other events before building
        # Sorted by the times as written: shifting them all by the origin keeps their order.
        # In place, by the spans' own start (stable): sorting indices by a list of the starts
        # and gathering the spans and their starts after took twice as long.
        spans.sort(key=_START)
        _longest_first_at_equal_starts(spans, list(map(_START, spans)))
        by_lane, by_cat, by_name = self._number_and_group(spans)
        if _RECORD_WINDOW_END in by_name:
            # An instant event that some writers make a complete one, far in the future.
            spans = [span for span in spans if span.name != _RECORD_WINDOW_END]
            by_lane, by_cat, by_name = self._number_and_group(spans)
        self.spans = spans
        self._by_name = by_name
        self.renamed_categories = _normalise_categories(by_cat)

        lane_categories = {key: set(map(_CAT, on_lane)) for key, on_lane in by_lane.items()}
        self.vendor = self._runtime_vendor(by_cat)
        gpu_pids = {pid for (pid, _), cats in lane_categories.items() if cats & GPU_CATEGORIES}
        all_pids = {pid for pid, _ in by_lane}
        host_pids = {pid for (pid, _), cats in lane_categories.items() if cats & CPU_CATEGORIES}
        device_of_pid = self._device_of_pid(gpu_pids, all_pids, by_cat)
        self._lane_spans: dict[Lane, list[Span]] = {}
        self.children_cover_us = [0.0] * len(spans)
        for key, on_lane in by_lane.items():
            pid, tid = key
            lane = _make_lane(
                pid, tid, lane_categories[key], device_of_pid.get(pid), pid in host_pids
            )
            self._lane_spans[lane] = on_lane
            _nest(lane, on_lane, self.children_cover_us)
        self.lanes = sorted(self._lane_spans, key=_lane_order)
        self._by_cat = by_cat

        self.kernels = by_cat.get("kernel", [])
        # The pattern is matched once per distinct name (a trace repeats a few hundred names
        # across all its kernels), then each kernel is a set lookup.
        communication_names = set(filter(_IS_COMMUNICATION, set(map(_NAME, self.kernels))))
        if communication_names:
            is_communication_kernel = list(
                map(communication_names.__contains__, map(_NAME, self.kernels))
            )
            self.communication = list(compress(self.kernels, is_communication_kernel))
            self.compute_kernels = list(compress(self.kernels, map(not_, is_communication_kernel)))
        else:
            self.communication = []
            self.compute_kernels = self.kernels
        self.gpu_work = _merge(by_cat, GPU_WORK_CATEGORIES)
        self.cpu_ops = by_cat.get("cpu_op", [])
        self.runtime_calls = _merge(by_cat, LAUNCH_CATEGORIES)
        self.overhead = [
            span
            for lane in self.lanes
            if lane.kind == "overhead"
            for span in self._lane_spans[lane]
        ]
        self.overhead.sort(key=_ID)
        self.has_gpu = bool(self.gpu_work)
        self._add_unlisted_devices()
        self._link_launches()
        self._build_steps(by_cat.get("user_annotation", []))

    def _refuse_duration_pairs(self, events: list[Span | OtherEvent]) -> None:
        """Refuse a file whose durations are Chrome's begin/end pairs (phases ``B`` and ``E``)
        and which holds no complete event: other tools write that form, torch.profiler never
        does, and reading it as a trace without events would report an empty run."""
        phases = {type(event).__struct_config__.tag for event in events}
        if phases & {"B", "E"}:
            raise TraceError(
                self.path,
                "JSON is not a Kineto trace: its durations are begin/end pairs (ph 'B'/'E'), "
                "which torch.profiler does not write, and it holds no complete ('X') event",
                not_a_trace=True,
            )

    def _use_exact_times(self, events: list[Span | OtherEvent], spans: list[Span]) -> None:
        """Give ``spans`` (the complete events among ``events``, in file order) their times
        read exactly from the file, less the earliest (:attr:`origin_us`, as a float)."""
        exact = self._raw.exact_times()
        if len(exact) != len(events):
            return
        times = list(compress(exact, map(_IS_SPAN_TYPE, map(type, events))))
        if None in times:  # refused by _check_times before: no complete event lacks a ts
            return
        origin = min(times)
        self.origin_us = float(origin)
        for span, written in zip(spans, times, strict=True):
            span.start = float(written - origin)

    def _number_and_group(
        self, spans: list[Span]
    ) -> tuple[
        dict[tuple[int | str, int | str], list[Span]], dict[str, list[Span]], dict[str, list[Span]]
    ]:
        """Shift the sorted ``spans`` so that the first starts at 0.0 (adding the shift to
        :attr:`origin_us`), number them, and group them by lane (``(pid, tid)``), by category
        and by name, each group in start order, in one Python pass (the numbering, the shift
        and the by-name index each took a pass of their own before)."""
        origin = spans[0].start if spans else 0.0
        self.origin_us += origin
        by_lane: dict[tuple[int | str, int | str], list[Span]] = {}
        by_cat: dict[str, list[Span]] = {}
        by_name: dict[str, list[Span]] = {}
        for index, span in enumerate(spans):  # a few lanes, categories, names: a miss is rare
            span.id = index
            span.start -= origin
            try:
                by_lane[span.pid, span.tid].append(span)
            except KeyError:
                by_lane[span.pid, span.tid] = [span]
            try:
                by_cat[span.cat].append(span)
            except KeyError:
                by_cat[span.cat] = [span]
            try:
                by_name[span.name].append(span)
            except KeyError:
                by_name[span.name] = [span]
        return by_lane, by_cat, by_name

    def _runtime_vendor(self, by_cat: dict[str, list[Span]]) -> Vendor:
        """The GPU vendor its launch API shows: HIP calls on AMD, CUDA calls on NVIDIA, XPU
        runtime calls on Intel, MTIA runtime calls on Meta's accelerator."""
        for span in by_cat.get("cuda_runtime", ()):
            if span.name.startswith("hip"):
                return "amd"
            if span.name.startswith("cuda"):
                return "nvidia"
        if by_cat.get("cuda_driver"):
            return "nvidia"
        if by_cat.get("xpu_runtime") or by_cat.get("xpu_driver"):
            return "intel"
        return "meta" if by_cat.get("mtia_runtime") else "unknown"

    def _device_of_pid(
        self, gpu_pids: set[int | str], all_pids: set[int | str], by_cat: dict[str, list[Span]]
    ) -> dict[int | str, int]:
        """Map each GPU pid to its device index and build :attr:`devices`.

        On NVIDIA the pid of GPU work is the CUDA device index. Kineto on ROCm (roctracer)
        writes the HSA agent id instead, and HSA numbers the CPU sockets before the GPUs
        (agents 2-9 for GPUs 0-7 on a two-socket host). When some AMD GPU pid is not a
        ``deviceProperties`` id, the model subtracts the smallest offset that maps every GPU
        pid onto one (``GPU 9`` becomes device 7 of 8); when they all are ids, it keeps them.
        """
        amd_arch = None
        if self.vendor == "amd" or any(
            _vendor_from_name(str(p.get("name", ""))) == "amd" for p in self._device_properties
        ):
            for kernel in by_cat.get("kernel", ()):
                match = _TENSILE_ISA.search(kernel.name)
                if match:
                    amd_arch = f"gfx{match[1]}"
                    break
        self._amd_arch = amd_arch
        self.devices = [
            _device_info(i, props, self.vendor, amd_arch)
            for i, props in enumerate(self._device_properties)
        ]
        numbers = {pid: number for pid in gpu_pids if (number := _as_int(pid)) is not None}
        known = {device.id for device in self.devices}
        offset = 0
        is_amd = self.vendor == "amd" or any(d.vendor == "amd" for d in self.devices)
        if is_amd and known and numbers and not set(numbers.values()) <= known:
            # The offset maps any one pid onto some listed id: try those, smallest first.
            first = next(iter(numbers.values()))
            for candidate in sorted(first - device for device in known if device < first):
                if all(number - candidate in known for number in numbers.values()):
                    offset = candidate
                    break
        device_of_pid: dict[int | str, int] = {
            pid: number - offset for pid, number in numbers.items()
        }
        # HSA numbers the CPU agents first, so agent ids of GPUs start at 1 or 2: numbers that
        # all fit the device list without a 0 among them may be agent ids as well as indices.
        self.gpu_numbers_may_be_agent_ids = bool(
            is_amd and offset == 0 and numbers and min(numbers.values()) >= 1
        )
        # Other accelerators (MTIA) write their device's work under its id as pid too.
        for pid in all_pids - gpu_pids:
            number = _as_int(pid)
            if number is not None and number in known:
                device_of_pid[pid] = number
        return device_of_pid

    def _add_unlisted_devices(self) -> None:
        """Give every device with GPU lanes an entry, ``"unknown"`` when not described."""
        known = {device.id for device in self.devices}
        for lane in self.lanes:
            if lane.kind == "gpu" and lane.device is not None and lane.device not in known:
                known.add(lane.device)
                self.devices.append(
                    DeviceInfo(
                        lane.device,
                        "unknown",
                        self.vendor,
                        self._amd_arch if self.vendor == "amd" else None,
                        None,
                        None,
                        None,
                    )
                )
        self.devices.sort(key=attrgetter("id"))

    def _check_times(self, spans: list[Span], starts: list[float], durations: list[float]) -> None:
        """Refuse a span without a start, or one that ends past the largest float; read a
        negative duration as 0 (:attr:`negative_durations`). ``starts`` and ``durations`` are
        the spans', in their order."""
        self.negative_durations = 0
        if not spans:
            return
        if math.isfinite(sum(starts) + sum(durations)) and min(durations) >= 0:
            return
        for index, span in enumerate(spans):
            where = f"complete event {span.name!r} (#{index})"
            if math.isnan(span.start):
                raise TraceError(self.path, f"{where} has no ts or a NaN ts")
            if not math.isfinite(span.start):
                raise TraceError(self.path, f"{where} has an infinite ts")
            if not math.isfinite(span.dur):
                raise TraceError(self.path, f"{where} has a NaN or infinite dur")
            if span.dur < 0:
                # Kineto before torch 1.13 wrote one where it recorded no end (an end of 0):
                # the event happened, for an unknown time.
                span.dur = 0.0
                self.negative_durations += 1
            if not math.isfinite(span.start + span.dur):
                raise TraceError(self.path, f"{where} ends past the largest time a float can hold")
        # Every time is finite and every span ends: only the sums above overflowed.

    def _link_launches(self) -> None:
        for cat in (*LAUNCH_CATEGORIES, *GPU_WORK_CATEGORIES):
            for span in self._by_cat.get(cat, ()):
                raw = span.raw_args
                if not raw:
                    continue
                try:
                    span.correlation = _LINK_ARGS.decode(raw).correlation
                except msgspec.ValidationError:
                    span.correlation = _loose_correlation(span)
        if self.gpu_work and all(work.correlation is None for work in self.gpu_work):
            self._correlate_by_external_id()
        calls = [span for span in self.runtime_calls if span.correlation is not None]
        launch_by_correlation = {span.correlation: span for span in calls}
        # Correlation ids are unique within one profiling session; a file that merges several
        # reuses them. Then each GPU activity takes the last call of its id that started
        # before it (the first one, if none did): never a call made after the work began.
        reused = _calls_of_reused_ids(calls) if len(launch_by_correlation) < len(calls) else {}
        self._launch_of: dict[int, Span] = {}
        self._gpu_work_of: dict[int, list[Span]] = {}
        self.launch_of_id = self._launch_of.get
        self.gpu_work_of_id = self._gpu_work_of.get
        for work in self.gpu_work:
            same_id = reused.get(work.correlation) if reused else None
            if same_id is None:
                launch = launch_by_correlation.get(work.correlation)
            else:
                starts, spans = same_id
                launch = spans[max(bisect_right(starts, work.start) - 1, 0)]
            if launch is None:
                continue
            self._launch_of[work.id] = launch
            launched = self._gpu_work_of.get(launch.id)
            if launched is None:
                launched = self._gpu_work_of[launch.id] = []
                launch.is_launch = True
            launched.append(work)

    def _correlate_by_external_id(self) -> None:
        """Link GPU work to its calls by ``External id`` in a trace that records no
        ``correlation`` (some ROCm traces: each HIP call and its kernels carry one id, which
        their ``ac2g`` flow arrows also use). An id is used only where it names one runtime
        or driver call: an op's id, shared by all the calls the op makes, links nothing."""
        calls_by_id: dict[int, Span | None] = {}
        for call in self.runtime_calls:
            external = call.external_id
            if external is not None:
                calls_by_id[external] = None if external in calls_by_id else call
        linked = 0
        for work in self.gpu_work:
            external = work.external_id
            if external is not None and calls_by_id.get(external) is not None:
                work.correlation = external
                linked += 1
        if linked:
            for external, call in calls_by_id.items():
                if call is not None:
                    call.correlation = external

    def _build_steps(self, user_annotations: list[Span]) -> None:
        by_lane: dict[Lane, list[tuple[int, Span]]] = {}
        annotations = []
        for span in user_annotations:
            match = _STEP_NAME.fullmatch(span.name)
            if match is None:
                annotations.append(span)
            elif span.lane.kind == "cpu":
                by_lane.setdefault(span.lane, []).append((int(match[1]), span))
        self.annotations = annotations
        step_spans: dict[int, Span] = {}
        self.other_step_lanes = []
        step_pid = None
        self.left_out_steps = []
        if by_lane:
            chosen = max(by_lane, key=lambda lane: (len(by_lane[lane]), -by_lane[lane][0][1].start))
            kept_until = -math.inf
            for number, span in by_lane[chosen]:  # in start order
                if number in step_spans or span.start < kept_until:
                    # A number seen before (sessions written into one file) or a step inside
                    # another: one window per step, the first.
                    self.left_out_steps.append(span)
                    continue
                step_spans[number] = span
                kept_until = span.end
            self.other_step_lanes = [lane for lane in by_lane if lane != chosen]
            if any(lane.pid != chosen.pid for lane in self.other_step_lanes):
                step_pid = chosen.pid  # several processes: only this one's spans count
        self._step_pid = step_pid
        by_time = sorted(step_spans.items(), key=lambda item: item[1].start)
        self._step_starts = [span.start for _, span in by_time]
        self._step_ends = [span.end for _, span in by_time]
        self._step_numbers = [number for number, _ in by_time]
        work_by_step: dict[int, list[Span]] = {number: [] for number in step_spans}
        # _step_number_at, inlined: one call per GPU activity.
        launch_of, starts, ends = self._launch_of, self._step_starts, self._step_ends
        numbers = self._step_numbers
        step_of_work: dict[int, int] = {}
        self.gpu_work_steps = step_of_work
        for work in self.gpu_work:
            launch = launch_of.get(work.id)
            if launch is not None and (step_pid is None or launch.pid == step_pid):
                time = launch.start
                index = bisect_right(starts, time) - 1
                if index >= 0 and time < ends[index]:
                    number = numbers[index]
                    work_by_step[number].append(work)
                    step_of_work[work.id] = number
        self.steps = [
            Step(number, span, span.start, span.end, tuple(work_by_step[number]))
            for number, span in sorted(step_spans.items())
        ]
        self._step_by_number = {step.number: step for step in self.steps}

    def step_number_at(self, time: float) -> int | None:
        """The number of the step whose CPU window holds ``time`` (µs), or ``None``."""
        return self._step_number_at(time)

    def _step_number_at(self, time: float) -> int | None:
        index = bisect_right(self._step_starts, time) - 1
        if index >= 0 and time < self._step_ends[index]:
            return self._step_numbers[index]
        return None

    # -- queries ----------------------------------------------------------------------------

    def lane_spans(self, lane: Lane) -> list[Span]:
        """The spans on ``lane``, in start order."""
        return self._lane_spans.get(lane, [])

    def unread_device_lanes(self) -> list[Lane]:
        """Lanes that hold an accelerator's own events, which the model does not read: lanes of
        a device that hold events but no GPU work (MTIA's ``mtia_ccp_events``), and threads
        whose events are all of categories the model does not know (an out-of-tree backend's
        kernels, ``aiu`` and ``privateuse1`` on IBM's Spyre)."""
        return [
            lane
            for lane in self.lanes
            if lane.kind == "other"
            and (lane.unread or lane.device is not None)
            and self.lane_spans(lane)
        ]

    @property
    def content(self) -> TraceContent:
        """What the trace holds, in a word (:data:`TraceContent`)."""
        if not self.spans:
            return "no events"
        if self.has_gpu:
            return "GPU"
        if self.unread_device_lanes():
            return "accelerator not read"
        if any(lane.kind == "gpu" for lane in self.lanes) or any(
            _ISSUES_GPU_WORK.search(call.name) for call in self.runtime_calls
        ):
            return "GPU not recorded"
        return "CPU only" if self.records_host_ops else "profiler only"

    @property
    def records_host_ops(self) -> bool:
        """Whether the host side holds any op, label or Python frame (``cpu_op``,
        ``user_annotation``, ``python_function``): not so in a trace recorded without
        ``ProfilerActivity.CPU``, whose host side is the runtime calls alone, nor in one that
        holds only the profiler's own events."""
        return any(self._by_cat.get(category) for category in _HOST_OP_CATEGORIES)

    @property
    def counter_ranges(self) -> list[Span]:
        """The ranges CUPTI's range profiler recorded (``cuda_profiler_range``), one per
        kernel, in start order: a recording that collects performance counters
        (``experimental_config`` with ``profiler_metrics``) writes these instead of the
        kernels' activities, and replays each kernel to count, inside its launch call."""
        return self._by_cat.get(COUNTER_RANGE_CATEGORY, [])

    def describe_gpu_work(self) -> str:
        """What GPU work the trace gives the analysis, in words, for a report's header.

        ``"GPU work recorded"``; ``"no events"``; for a trace without CUDA or HIP work, why:
        an accelerator the model does not read (MTIA writes its own categories on its device's
        lanes), GPU lanes without kernels, copies or memsets (CUPTI's range profiler), launch
        and copy calls whose GPU activities were not recorded, a GPU listed in
        ``deviceProperties`` while only host activities were recorded, NCCL or RCCL
        collectives on the host without GPU work, or no GPU at all (``"no GPU work (CPU-only
        trace)"``).
        """
        content = self.content
        if content == "no events":
            return "no events"
        if content == "GPU":
            return "GPU work recorded"
        if content == "accelerator not read":
            unread = self.unread_device_lanes()
            count = sum(len(self.lane_spans(lane)) for lane in unread)
            lanes = f"{len(unread)} lane{'s' if len(unread) > 1 else ''}"
            return (
                f"no CUDA/HIP work read; the accelerator's own {count:,} events ({lanes}) "
                "are not analysed"
            )
        on_gpu_lanes = [
            span for lane in self.lanes if lane.kind == "gpu" for span in self.lane_spans(lane)
        ]
        if on_gpu_lanes:
            if {span.cat for span in on_gpu_lanes} == {COUNTER_RANGE_CATEGORY}:
                return (
                    "no kernel, copy or memset recorded: CUPTI's range profiler (performance "
                    f"counters) recorded {len(on_gpu_lanes):,} kernel ranges instead, and "
                    "replays each kernel to count, inside its launch call"
                )
            # A device-wide synchronisation, say.
            categories = ", ".join(sorted({span.cat for span in on_gpu_lanes}))
            return (
                f"no kernel, copy or memset recorded; the GPU lanes hold {len(on_gpu_lanes):,} "
                f"other events ({categories})"
            )
        issued = sum(1 for call in self.runtime_calls if _ISSUES_GPU_WORK.search(call.name))
        if issued:
            return (
                f"no GPU work recorded, though {issued:,} calls launched kernels or copied or "
                "set memory: their GPU activities are missing from the trace"
            )
        if content == "profiler only":
            # A profiler stopped outside its active steps still writes a few events: the
            # synchronisation at its stop, a buffer request, its "PyTorch Profiler" span.
            names = list(dict.fromkeys(span.name for span in self.spans))
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            return (
                f"no op, label or GPU work recorded, only {shown} (a profiler stopped outside "
                "its active steps writes such a trace; with a schedule, export the trace from "
                "on_trace_ready)"
            )
        if self.devices or any(
            _GPU_PROCESS_LABEL.fullmatch(label) for label in self._raw.process_labels.values()
        ):
            return "no GPU work recorded: the trace lists a GPU but holds host events only"
        backends = sorted(
            {
                name.split(":", 1)[0].upper()
                for name in self.by_name
                if name.startswith(_GPU_BACKEND_LABELS)
            }
        )
        if backends:
            return (
                f"no GPU work recorded, though the host ran {' and '.join(backends)} "
                "collectives (a GPU backend): host events only"
            )
        return "no GPU work (CPU-only trace)"

    def children(self, span: Span) -> list[Span]:
        """The spans directly nested in ``span`` on its lane, in start order, found by
        scanning its time range only (:meth:`within`): no index over the whole trace."""
        return [inner for inner in self.within(span) if inner.parent == span.id]

    def within(self, span: Span) -> Iterator[Span]:
        """The spans on ``span``'s lane that start inside it, in start order: what it holds
        (its descendants, and any span that only partly overlaps its end), found by scanning
        its lane from it (placed by bisection) to its end only."""
        # The lane's own spans only: other threads' spans in the same time range can be many
        # (a long op beside a busy thread) and none of them is inside ``span``.
        on_lane = self._lane_spans[span.lane]
        position = bisect_left(on_lane, span.start, key=_START)
        while on_lane[position] is not span:  # past the lane's other spans of the same start
            position += 1
        end = span.end
        for index in range(position + 1, len(on_lane)):  # islice would walk from the start
            candidate = on_lane[index]
            if candidate.start >= end:
                return
            yield candidate

    def self_us(self, span: Span) -> float:
        """``span``'s self time: its duration minus the time its direct children cover (their
        union, so overlapping children are not counted twice). Never negative."""
        return max(span.dur - self.children_cover_us[span.id], 0.0)

    def ancestors(self, span: Span) -> Iterator[Span]:
        """The spans enclosing ``span`` on its lane, nearest first."""
        parent = span.parent
        while parent is not None:
            enclosing = self.spans[parent]
            yield enclosing
            parent = enclosing.parent

    def launch_of(self, gpu: Span) -> Span | None:
        """The runtime or driver call that launched this GPU work, if it is in the trace."""
        return self._launch_of.get(gpu.id)

    def gpu_work_of(self, launch: Span) -> list[Span]:
        """The GPU work a runtime or driver call started (several for ``cudaGraphLaunch``)."""
        return self._gpu_work_of.get(launch.id, [])

    def op_of(self, span: Span) -> Span | None:
        """The nearest enclosing ``cpu_op``; for GPU work, the nearest one around its launch.

        A call that outlives its op (ROCm traces show calls ending a few µs after the op
        that made them) does not nest in it; it is given the op it overlaps on its thread
        when both carry the same ``External id``, as the profiler writes on an op's calls."""
        if span.is_gpu_work:
            launch = self.launch_of(span)
            if launch is None:
                return None
            span = launch
        found = next((e for e in self.ancestors(span) if e.cat == "cpu_op"), None)
        if found is None or self.vendor == "amd":  # where calls are known to outlive ops
            overlapped = self._overlapped_op(span, found)
            if overlapped is not None:
                return overlapped
        return found

    def _overlapped_op(self, call: Span, enclosing: Span | None) -> Span | None:
        """The ``cpu_op`` just before ``call`` on its thread (inside ``enclosing`` when given)
        that the call does not nest in, though it carries the same ``External id``: the op
        the call outlived, or that ended just before the call's shifted start. ``None``
        otherwise (the usual case)."""
        if call.cat not in LAUNCH_CATEGORIES:
            return None
        external = call.external_id
        if external is None:
            return None
        on_lane = self.lane_spans(call.lane)
        index = bisect_left(on_lane, call.start, key=_START)
        ops_seen = 0
        for earlier in reversed(on_lane[max(0, index - _OVERLAP_LOOKBACK) : index]):
            if enclosing is not None and earlier.start < enclosing.start:
                return None
            if earlier.cat != "cpu_op" or earlier.start + earlier.dur >= call.start + call.dur:
                continue
            if earlier.external_id == external:
                return earlier
            ops_seen += 1
            if ops_seen == _OVERLAP_OPS:
                return None
        return None

    def step_of(self, span: Span) -> Step | None:
        """The step a span belongs to.

        GPU work belongs to the step its launch call lies in (it may run later): the step
        whose :attr:`Step.gpu_work` lists it; other spans on a GPU lane (labels, syncs) to
        none. Any other span (on a CPU thread, the profiler's overhead lane) belongs to the
        step whose CPU window contains its start; in a file that merges several processes,
        a CPU thread's only if it is of the steps' process (see :attr:`other_step_lanes`).
        ``None`` outside every step, or for GPU work whose launch is not in the trace.
        """
        kind = span.lane.kind
        if kind == "gpu":  # the step whose gpu_work lists it
            number = self.gpu_work_steps.get(span.id)
        elif kind == "cpu" and self._step_pid is not None and span.pid != self._step_pid:
            return None  # another process's thread, in a file that merges several
        else:
            number = self._step_number_at(span.start)
        return None if number is None else self._step_by_number[number]

    @property
    def by_name(self) -> dict[str, list[Span]]:
        """Every span grouped by name, each list in start order, the names in the order they
        first occur (do not modify)."""
        return self._by_name

    @property
    def recording_end_us(self) -> float | None:
        """When the profiler's own span over its recording window (category ``Trace``,
        ``"PyTorch Profiler (0)"``) ends, µs; ``None`` in a trace without one, or whose span
        has no duration written (then it says nothing of where the window ends). GPU work
        launched inside the window may run after it; a step annotation ending after it did
        not have its end recorded."""
        return max((span.end for span in self.find(cat="Trace") if span.dur > 0), default=None)

    def end_recorded(self, step: Step) -> bool:
        """Whether ``step`` ends inside the profiler's recording window
        (:attr:`recording_end_us`, within a µs; always, for a trace without one). A step
        that ends after it did not have its end recorded: its duration is no measurement."""
        window_end = self.recording_end_us
        return window_end is None or step.end <= window_end + _RECORDING_END_TOLERANCE_US

    def kernel_launches_without_gpu_record(
        self, step: Step | tuple[float, float]
    ) -> tuple[int, int]:
        """How many of the kernel launch calls made in ``step`` (on any thread, graph
        launches included) have no GPU activity in the trace, and how many there are; or in a
        window, ``(start, end)`` in µs. Every launch of a whole trace has its record; a trace
        cut short, or whose GPU records the profiler dropped (its buffers full), lacks some,
        and the step's GPU figures are then a lower bound. ``(0, 0)`` when no launch lacks
        its record."""
        missing, launches = self._unrecorded_launches
        if not missing:
            return 0, 0
        window = (step.start, step.end) if isinstance(step, Step) else step
        count = bisect_left(missing, window[1]) - bisect_left(missing, window[0])
        return count, bisect_left(launches, window[1]) - bisect_left(launches, window[0])

    @cached_property
    def _unrecorded_launches(self) -> tuple[list[float], list[float]]:
        """The starts of the kernel launch calls without a GPU activity (a launch captured into
        a graph is none), and (only when there are some) of all kernel launch calls, each
        sorted."""
        names = [name for name in self._by_name if _LAUNCHES_KERNELS.search(name)]
        calls = [
            call for name in names for call in self._by_name[name] if call.cat in LAUNCH_CATEGORIES
        ]
        gpu_work_of = self._gpu_work_of
        missing = [call for call in calls if call.id not in gpu_work_of]
        if missing:
            # A launch made while its thread captures a graph runs nothing until the graph's
            # replay (which launches its work again): no record is due.
            captures = self._captures()
            missing = [call for call in missing if not _inside(captures.get(call.lane), call)]
        return sorted(map(_START, missing)), sorted(map(_START, calls)) if missing else []

    def _captures(self) -> dict[Lane, list[tuple[float, float]]]:
        """Per thread, the stretches of its :attr:`graph_captures`, ``(start, stop)``."""
        captures: dict[Lane, list[tuple[float, float]]] = {}
        for capture in self.graph_captures:
            captures.setdefault(capture.lane, []).append((capture.begin.start, capture.stop_us))
        return captures

    @cached_property
    def graph_captures(self) -> list[GraphCapture]:
        """The graphs of GPU work captured on the host's threads (:class:`GraphCapture`), in
        start order: each from a ``cudaStreamBeginCapture`` (or HIP's) to the next
        ``...EndCapture`` on its thread (a second begin before that end is part of the same
        capture), with the ``...GraphInstantiate...`` calls that follow it there."""
        marks = [
            span
            for name in self._by_name
            if name.endswith((_CAPTURE_BEGIN, _CAPTURE_END)) or _GRAPH_INSTANTIATE in name
            for span in self._by_name[name]
            if span.cat in LAUNCH_CATEGORIES
        ]
        found: list[tuple[Span, Span | None, list[Span]]] = []
        open_on: dict[Lane, Span] = {}
        last_on: dict[Lane, list[Span]] = {}  # the instantiations of the thread's last capture
        for mark in sorted(marks, key=_ID):
            lane = mark.lane
            if mark.name.endswith(_CAPTURE_BEGIN):
                open_on.setdefault(lane, mark)
                last_on.pop(lane, None)
            elif mark.name.endswith(_CAPTURE_END):
                if lane in open_on:
                    found.append((open_on.pop(lane), mark, []))
                    last_on[lane] = found[-1][2]
            elif lane in last_on:
                last_on[lane].append(mark)
        found += [(begin, None, []) for begin in open_on.values()]  # open at the trace's end
        found.sort(key=lambda capture: capture[0].id)
        return [GraphCapture(begin, end, tuple(made)) for begin, end, made in found]

    def find(
        self, name: str | None = None, *, cat: str | None = None, prefix: str | None = None
    ) -> list[Span]:
        """Spans matching every criterion given, in start order.

        Args:
            name: Exact name.
            cat: Exact category.
            prefix: Start of the name (``"aten::"``, ``"cudaOccupancy"``...).
        """
        by_name = self.by_name
        if name is not None:
            found = by_name.get(name, [])
        elif prefix is not None:
            found = _merge(by_name, [key for key in by_name if key.startswith(prefix)])
        elif cat is not None:
            found = self._by_cat.get(cat, [])
        else:
            found = self.spans
        return [
            span
            for span in found
            if (cat is None or span.cat == cat) and (prefix is None or span.name.startswith(prefix))
        ]

    def __repr__(self) -> str:
        return (
            f"<Trace {self.path.name}: {len(self.spans)} spans, {len(self.lanes)} lanes, "
            f"{len(self.steps)} steps, {len(self.gpu_work)} GPU activities>"
        )


def _calls_of_reused_ids(calls: list[Span]) -> dict[int, tuple[list[float], list[Span]]]:
    """For each correlation id written on several calls: their starts and the calls, in start
    order (``calls`` are in id order, which is start order)."""
    by_id: dict[int, list[Span]] = {}
    for call in calls:
        by_id.setdefault(call.correlation, []).append(call)
    return {
        correlation: (list(map(_START, same)), same)
        for correlation, same in by_id.items()
        if len(same) > 1
    }


def _inside(stretches: list[tuple[float, float]] | None, span: Span) -> bool:
    """Whether ``span`` starts in one of ``stretches`` (disjoint, in start order)."""
    if not stretches:
        return False
    index = bisect_right(stretches, (span.start, math.inf)) - 1  # the last one begun by then
    return index >= 0 and span.start < stretches[index][1]


def _rounded_on_decoding(starts: list[float]) -> bool:
    """Whether the times as decoded may have lost digits the file wrote: floats this large
    are spaced wider than a ns (:data:`_EXACT_TIME_SPACING_US`), and not all are whole µs."""
    if not starts:
        return False
    largest = max(max(starts), -min(starts))
    return math.ulp(largest) > _EXACT_TIME_SPACING_US and not all(map(float.is_integer, starts))


def _merge(groups: dict[str, list[Span]], keys: Any) -> list[Span]:
    merged = [span for key in keys for span in groups.get(key, ())]
    merged.sort(key=_ID)
    return merged


def _enclosing_first(span: Span) -> tuple[float, bool]:
    return -span.dur, span.cat != "python_function"


def _longest_first_at_equal_starts(spans: list[Span], starts: list[float]) -> None:
    """Order spans that share a start longest first (an enclosing span before what it holds).

    Of spans with the same start and duration, a ``python_function`` comes first: the Python
    frame calls the op (``<built-in method mm>`` around ``aten::mm``), and with times written
    in whole µs the two often coincide; the op then nests in the frame, not the frame in the
    op (which would leave the op no self time). Ops and labels that coincide come in the order
    they were entered, by ``External id`` (``aten::empty_like`` around the
    ``aten::empty_strided`` it calls), whatever the file's order; others keep their file
    order.

    ``spans`` is sorted by start (``starts``, their starts); equal starts are rare, so they
    are found with one C-level comparison pass and only those runs are re-sorted, instead of a
    second full sort.
    """
    ties = list(compress(count(), map(eq, starts, islice(starts, 1, None))))
    index = 0
    while index < len(ties):
        first = last = ties[index]
        index += 1
        while index < len(ties) and ties[index] == last + 1:
            last = ties[index]
            index += 1
        run = spans[first : last + 2]
        run.sort(key=_enclosing_first)  # stable: other equal spans keep their file order
        if len({span.dur for span in run}) < len(run):  # the args read only where both tie
            _in_the_order_entered(run)
        spans[first : last + 2] = run


def _in_the_order_entered(run: list[Span]) -> None:
    """Within ``run`` (spans of one start, in :func:`_enclosing_first` order), order each
    group that also shares a duration by ``External id``, the order the profiler entered
    them (an op's runtime calls share its id and keep their order), where every span of the
    group has one; a group with a span that has none keeps its order."""
    index = 0
    while index < len(run):
        key = _enclosing_first(run[index])
        end = index + 1
        while end < len(run) and _enclosing_first(run[end]) == key:
            end += 1
        if end - index > 1:
            group = run[index:end]
            entered = [span.external_id for span in group]
            if None not in entered:
                order = sorted(range(len(group)), key=entered.__getitem__)  # stable
                run[index:end] = [group[i] for i in order]
        index = end


def _normalise_categories(by_cat: dict[str, list[Span]]) -> dict[str, str]:
    """Rename legacy categories in place (see :data:`LEGACY_CATEGORIES`); return what was
    renamed, ``{written: current}``.

    ``ProfilerStep#N`` was a ``cpu_op`` ("Operator") before torch ~1.10 and is a
    ``user_annotation`` since: it is filed as one either way, and so are the labels of
    :data:`LEGACY_LABEL_PREFIXES` in a trace that files its labels as ops.
    """
    renamed = {}
    for written, current in LEGACY_CATEGORIES.items():
        group = by_cat.pop(written, None)
        if group is None:
            continue
        renamed[written] = current
        for span in group:
            span.cat = current
        if current in by_cat:
            group = by_cat[current] + group
            group.sort(key=_ID)
        by_cat[current] = group
    ops = by_cat.get("cpu_op")
    annotations = by_cat.get("user_annotation", ())
    prefixes: tuple[str, ...] = ()
    if (
        ops
        and not any(map(_IS_STEP_NAME, map(_NAME, annotations)))
        and any(map(_IS_STEP_NAME, map(_NAME, ops)))
    ):
        prefixes = (_STEP_PREFIX,)
    if ops and ("Operator" in renamed or prefixes):
        # A trace that files its labels as ops: "Operator" (torch ~1.8), or ``cpu_op`` with
        # ``ProfilerStep#N`` among them (up to ~1.10).
        prefixes += LEGACY_LABEL_PREFIXES
    if prefixes:
        labels = [op for op in ops if op.name.startswith(prefixes)]
        if labels:
            by_cat["cpu_op"] = [op for op in ops if not op.name.startswith(prefixes)]
            for label in labels:
                label.cat = "user_annotation"
            annotations = by_cat.get("user_annotation", []) + labels
            annotations.sort(key=_ID)
            by_cat["user_annotation"] = annotations
    return renamed


def _nest(lane: Lane, on_lane: list[Span], covered: list[float]) -> None:
    """Set lane, parent and depth for the spans of ``lane``, given in (start, -dur) order, and
    add up in ``covered[parent.id]`` the time each parent's children cover (their union).

    A span's parent is the innermost earlier span that contains it entirely. A span that
    starts inside an open span but ends after it (a partial overlap, seen between
    ``python_function`` events and ops in ``with_stack`` traces, and between ops written with
    rounded times) is never nested in it: it becomes a sibling, the child of the nearest span
    that does contain it, and the span it overlaps takes no further children (any later span
    that would fit in it also fits in the overlapping one, which is deeper). Every child
    therefore lies within its parent; siblings may overlap, so a parent's self time is its
    duration minus the union of its children, never their sum, and never negative.
    """
    # The open spans, innermost last: [end, id, how far its children's union reaches].
    stack: list[list[Any]] = []
    tolerance = _NEST_TOLERANCE_US
    next_starts = chain(map(_START, islice(on_lane, 1, None)), (math.inf,))
    for span, next_start in zip(on_lane, next_starts, strict=False):  # equally long
        span.lane = lane
        start = span.start
        end = start + span.dur
        must_reach = end - tolerance
        while stack:
            top = stack[-1]
            top_end = top[0]
            if top_end > start and top_end >= must_reach:
                parent = top[1]
                span.parent = parent
                span.depth = len(stack)
                reached = top[2]
                inside = end if end < top_end else top_end  # within the parent despite rounding
                if inside > reached:
                    covered[parent] += inside - (start if start > reached else reached)
                    top[2] = inside
                break
            stack.pop()
        # A span that ends before the next one starts can hold no later span: left off the
        # stack (most spans are leaves), as it would be popped at the next span anyway.
        if next_start < end:
            stack.append([end, span.id, start])


def load_trace(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Trace:
    """Load a trace written by ``torch.profiler`` (``.json`` or ``.json.gz``).

    Args:
        path: The trace file.
        max_bytes: The largest decompressed size to read. ``None``: the environment variable
            ``PROFILING_UTILS_MAX_TRACE_BYTES`` when set, else a third of the available memory
            (:func:`profiling_utils.loading.default_max_bytes`). A larger file is refused with
            a :class:`~profiling_utils.errors.TraceError` before it can exhaust memory.

    Returns:
        The :class:`Trace`, with every structure built.

    Raises:
        TraceError: The file cannot be read as a trace; the message names the file and the
            problem. No other exception escapes for bad input.
    """
    with gc_paused():
        raw = load_raw_trace(path, Span, max_bytes=max_bytes)
        return Trace(raw)
