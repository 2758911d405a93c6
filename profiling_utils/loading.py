"""Read a Kineto trace file into validated raw events: bytes in, typed events out.

This is the fast, strict layer under :func:`profiling_utils.trace.load_trace`. It accepts what
``torch.profiler`` writes (``.json`` or ``.json.gz``, detected from the bytes, not the name)
and turns every way a file can be unreadable into a :class:`~profiling_utils.errors.TraceError`
that names the file and the problem.

Speed and memory come from decoding with msgspec into typed structs that are not tracked by
the garbage collector, and from keeping each event's ``args`` as undecoded JSON
(:class:`msgspec.Raw`), decoded only for the events that need them. A ``Raw`` value points into
the input buffer, so the file's bytes stay in memory as long as any event does: a plain
``.json`` memory-mapped (the page cache's pages, not a copy), a ``.json.gz`` decompressed into
one buffer. Either is counted in the memory budget of ``benchmarks/README.md``.

**Memory-safe reading.** A trace is held in memory whole: its decompressed bytes, then the
model built over them, about 2.6 times the decompressed size at peak (``benchmarks/README.md``).
So before anything is decoded, the decompressed size is checked against a limit,
:func:`default_max_bytes`: **a third of the memory available** when the file is read
(``MemAvailable`` of ``/proc/meminfo``; the physical memory where that is not known). A plain
``.json`` is checked by its size on disk; a ``.json.gz`` is decompressed as a stream, with the
limit as the cap, so a small file that expands to gigabytes (whitespace compresses a
thousandfold) is refused as soon as its output passes the limit, whatever its gzip trailer
claims. The refusal is one :class:`~profiling_utils.errors.TraceError` line. To load a larger
trace on purpose, pass ``max_bytes`` or set the environment variable
``PROFILING_UTILS_MAX_TRACE_BYTES`` (a number of bytes; ``max_bytes`` wins).

Some Kineto versions write JSON that strict parsers reject: an unquoted ``N/A`` or ``inf`` in
``args``; control characters, line breaks, quotes or Windows backslashes inside names,
written as they are. Such a file is decoded a second time after a byte-level repair that
quotes those values, escapes the names' quotes, tabs and line breaks, and blanks other
control characters; files that decode the first time are never rewritten. The repair is one
pass over the bytes whatever the layout (a file on one line included).
"""

from __future__ import annotations

import codecs
import functools
import json
import math
import mmap
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

import msgspec

from .errors import TraceError
from .tables import byte_size, cut

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from decimal import Decimal

__all__ = [
    "Event",
    "OtherEvent",
    "OTHER_PHASES",
    "RawTrace",
    "MAX_TRACE_BYTES_ENV",
    "default_max_bytes",
    "read_trace_bytes",
    "decode_trace",
    "load_raw_trace",
]

_NO_ARGS = msgspec.Raw(b"")


class Event(msgspec.Struct, gc=False, eq=False, tag_field="ph", tag="X"):
    """A complete (``ph: "X"``) event of ``traceEvents``, as written.

    Field names follow the model (``start``, ``raw_args``); the JSON keys are ``ts`` and
    ``args``. ``start`` is the time as written, in µs (relative to ``baseTimeNanoseconds`` in
    torch >= 2.4 traces, absolute epoch µs in older ones); it is NaN when the event has no
    ``ts``. ``dur`` is 0.0 when the event has none.
    """

    name: str = ""
    cat: str = ""
    pid: int | str = ""
    tid: int | str = ""
    start: float = msgspec.field(default=math.nan, name="ts")
    dur: float = 0.0
    raw_args: msgspec.Raw = msgspec.field(default=_NO_ARGS, name="args")

    @property
    def ph(self) -> str:
        """The phase: always ``"X"``."""
        return "X"


class OtherEvent(msgspec.Struct, gc=False, tag_field="ph"):
    """An event of any other phase (flows, instants, metadata, counters...), kept as a marker.

    Nothing but the phase is decoded: the model reads complete events only, and skipping the
    fields of the rest saves a third of the decoding memory of a training trace.
    """

    @property
    def ph(self) -> str:
        """The phase, e.g. ``"s"``/``"f"`` for flows, ``"i"`` for instants, ``"M"``."""
        return type(self).__struct_config__.tag  # type: ignore[return-value]


# Every phase of the Chrome trace event format but "X". An event of another phase is an error.
OTHER_PHASES = "BEiICbneSTpFstfPNODVvRMc()"
_OTHER_EVENT_TYPES = tuple(
    msgspec.defstruct(f"Phase{i}Event", [], bases=(OtherEvent,), tag=phase)
    for i, phase in enumerate(OTHER_PHASES)
)


class _NameArgs(msgspec.Struct, gc=False):
    name: Any = None
    labels: Any = None


class _MetadataEvent(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    name: str = ""
    pid: int | str = ""
    tid: int | str = ""
    args: _NameArgs | None = None


class _AnyCompleteEvent(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    pass


# Any: a field of another shape in some other instant event must not fail the pass that reads
# the thread names too (each is checked where a memory event is read).
class _MemoryArgs(msgspec.Struct, gc=False):
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    bytes: Any = msgspec.field(default=None, name="Bytes")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")


class _InstantEvent(msgspec.Struct, gc=False, tag_field="ph", tag="i"):
    name: Any = None
    ts: Any = None
    args: Any = None


class MemoryEvent(msgspec.Struct, frozen=True, gc=False):
    """One allocation or free that ``profile_memory=True`` recorded (a ``[memory]`` instant
    event), as written: ``ts`` in the trace's own time (the model shifts it)."""

    ts: float
    """When, µs, as written (as the complete events' ``ts``)."""
    bytes: int
    """Bytes allocated (positive) or freed (negative)."""
    total_allocated: int | None
    """Bytes the allocator held for tensors on that device just after it (``None`` where the
    trace does not write it, as torch ~1.8-1.9 did not)."""
    total_reserved: int | None
    """Bytes the caching allocator had reserved from the device (``None`` on the CPU, which
    writes 0)."""
    device_type: int
    """``0`` for the CPU, ``1`` for CUDA (PyTorch's ``DeviceType``), as written."""
    device_id: int
    """The device index (``-1`` on the CPU)."""


# The second pass (RawTrace.thread_names, RawTrace.memory_events): metadata and instant
# events decoded, every other event a marker.
_SECOND_PASS_TYPES = (
    _MetadataEvent,
    _InstantEvent,
    _AnyCompleteEvent,
    *(marker for marker in _OTHER_EVENT_TYPES if marker.__struct_config__.tag not in "Mi"),
)
_SECOND_PASS = msgspec.json.Decoder(list[Union[_SECOND_PASS_TYPES]])  # noqa: UP007

E = TypeVar("E", bound=Event)


@dataclass
class RawTrace(Generic[E]):
    """The decoded top level of a trace file, events still raw."""

    path: Path
    """The file the trace was read from."""
    events: list[E | OtherEvent]
    """Every entry of ``traceEvents``, in file order: complete events decoded, the others
    as :class:`OtherEvent` markers."""
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    """``deviceProperties`` (``computeProperties`` in torch ~1.8 traces): one dict per GPU
    (empty for a CPU-only trace)."""
    cuda_runtime_version: Any = None
    """``cuda_runtime_version`` as written, e.g. ``13000``."""
    cuda_driver_version: Any = None
    """``cuda_driver_version`` as written."""
    cupti_version: Any = None
    """``cupti_version`` as written."""
    hip_runtime_version: Any = None
    """``hip_runtime_version`` as written on ROCm, e.g. ``70125424`` (HIP 7.1.25424)."""
    hip_driver_version: Any = None
    """``hip_driver_version`` as written on ROCm."""
    base_time_ns: Any = None
    """``baseTimeNanoseconds`` as written, when present."""
    repaired: bool = False
    """Whether the file only decoded after the byte-level repair (see the module docs)."""
    distributed_info: Any = None
    """``distributedInfo`` as written (also in :attr:`metadata`), when present."""
    _metadata: dict[str, Any] | None = field(default=None, repr=False)
    _source: Buffer | None = field(default=None, repr=False)
    _events_source: Buffer | msgspec.Raw | None = field(default=None, repr=False)
    _thread_names: dict[tuple[int | str, int | str], str] | None = field(default=None, repr=False)
    _process_labels: dict[int | str, str] | None = field(default=None, repr=False)
    _memory_events: list[MemoryEvent] | None = field(default=None, repr=False)

    @property
    def metadata(self) -> dict[str, Any]:
        """Every other top-level key (``schemaVersion``, ``traceName``, ``distributedInfo``...).

        Read on first use: the commands never need it, and finding the keys around
        ``traceEvents`` costs a pass over the whole file."""
        if self._metadata is None:
            self._metadata = _metadata_of(_TOP_LEVEL.decode(self._source or b"{}"), self.path)
            self._source = None
        return self._metadata

    @property
    def thread_names(self) -> dict[tuple[int | str, int | str], str]:
        """The names Kineto gives threads and streams in ``thread_name`` metadata events, by
        ``(pid, tid)``: ``"thread 879 (pt_autograd_0)"``. Read on first use, in a second pass
        over the events: loading decodes complete events only, and a picture needs these."""
        if self._thread_names is None:
            self._second_pass()
        return self._thread_names  # type: ignore[return-value]

    @property
    def process_labels(self) -> dict[int | str, str]:
        """The labels Kineto gives processes in ``process_labels`` metadata events, by
        ``pid``: ``"CPU"``, ``"GPU 0"``. torch ~1.8 traces label a process for every GPU of
        the machine, whatever was recorded. Read in the same second pass as
        :attr:`thread_names`."""
        if self._process_labels is None:
            self._second_pass()
        return self._process_labels  # type: ignore[return-value]

    @property
    def memory_events(self) -> list[MemoryEvent]:
        """The allocations and frees ``profile_memory=True`` recorded (``[memory]`` instant
        events), in file order; read in the same second pass as :attr:`thread_names`."""
        if self._memory_events is None:
            source = self._events_source
            view = memoryview(source) if isinstance(source, msgspec.Raw) else source
            if view is not None and _MEMORY_EVENT_NAME.search(view) is None:
                self._memory_events = []  # a scan of the bytes, not a pass: none is written
            else:
                self._second_pass()
        return self._memory_events  # type: ignore[return-value]

    def _second_pass(self) -> None:
        """Read :attr:`thread_names`, :attr:`process_labels` and :attr:`memory_events` in one
        pass over the events, then let the source go."""
        source, self._events_source = self._events_source, None
        names: dict[tuple[int | str, int | str], str] = {}
        labels: dict[int | str, str] = {}
        memory: list[MemoryEvent] = []
        try:
            if source is not None and not isinstance(source, msgspec.Raw):
                source = _TOP_LEVEL.decode(source).get("traceEvents")  # the whole file
            events = _SECOND_PASS.decode(source) if source is not None else []
        except (msgspec.DecodeError, msgspec.ValidationError):
            events = []  # the events decoded once; a field of an odd shape is not read
        for event in events:
            kind = type(event)
            if kind is _MetadataEvent and event.name == "thread_name":
                name = event.args.name if event.args is not None else None
                if isinstance(name, str) and name.strip():
                    names[event.pid, event.tid] = name.strip()
            elif kind is _MetadataEvent and event.name == "process_labels":
                label = event.args.labels if event.args is not None else None
                if isinstance(label, str) and label.strip():
                    labels[event.pid] = label.strip()
            elif kind is _InstantEvent and event.name == "[memory]":
                found = _memory_event(event)
                if found is not None:
                    memory.append(found)
        self._thread_names, self._process_labels, self._memory_events = names, labels, memory

    def exact_times(self) -> list[Decimal | None]:
        """Every event's ``ts`` exactly as written, in file order (``None`` where an event has
        none), read in a second pass over the events; ``[]`` once :attr:`thread_names` or
        :attr:`memory_events` has been read (the source is then freed).

        A float holds about 16 significant digits: a time written as absolute epoch µs with
        nanosecond decimals (``1712195495505881.623``, as some torch 2.x versions write them)
        is rounded to a quarter of a µs on decoding, and spans a few ns long lose their order.
        The model reads these times here for such traces, and subtracts the origin exactly.
        """
        source = self._events_source
        if source is None:
            return []
        events_decoder, document_decoder = _exact_time_decoders()
        try:
            if isinstance(source, msgspec.Raw):
                return [event.ts for event in events_decoder.decode(source)]
            return [event.ts for event in document_decoder.decode(source).traceEvents]
        except (msgspec.DecodeError, msgspec.ValidationError):
            return []  # the events decoded once; a time of another shape is not read twice


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


_MEMORY_EVENT_NAME = re.compile(rb'"\[memory\]"')


def _memory_event(event: _InstantEvent) -> MemoryEvent | None:
    """A ``[memory]`` event with the sizes and device that make it one; else None."""
    if not isinstance(event.args, dict) or not _is_number(event.ts):
        return None
    try:
        args = msgspec.convert(event.args, _MemoryArgs)
    except msgspec.ValidationError:
        return None
    if not _is_number(args.bytes) or not isinstance(args.device_type, int):
        return None
    total = args.total_allocated
    reserved = args.total_reserved if args.device_type != 0 else None
    device = args.device_id if isinstance(args.device_id, int) else -1
    return MemoryEvent(
        float(event.ts),
        int(args.bytes),
        int(total) if _is_number(total) else None,
        int(reserved) if _is_number(reserved) else None,
        args.device_type,
        device,
    )


@functools.cache
def _exact_time_decoders() -> tuple[msgspec.json.Decoder, msgspec.json.Decoder]:
    """Decoders of the events' ``ts`` as :class:`~decimal.Decimal`, built on first use (few
    traces need them, and ``decimal`` is not imported otherwise)."""
    from decimal import Decimal

    event = msgspec.defstruct("_ExactTime", [("ts", Decimal | None, None)], gc=False)
    document = msgspec.defstruct("_ExactTimes", [("traceEvents", list[event], [])], gc=False)
    return msgspec.json.Decoder(list[event]), msgspec.json.Decoder(document)


_KNOWN_KEYS = {
    "traceEvents": "events",
    "deviceProperties": "device_properties",
    "cuda_runtime_version": "cuda_runtime_version",
    "cuda_driver_version": "cuda_driver_version",
    "cupti_version": "cupti_version",
    "hip_runtime_version": "hip_runtime_version",
    "hip_driver_version": "hip_driver_version",
    "baseTimeNanoseconds": "base_time_ns",
}

# torch ~1.8 wrote the GPUs as "computeProperties" (with "major", "minor",
# "multiProcessorCount"); later versions as "deviceProperties".
_LEGACY_DEVICE_PROPERTIES = "computeProperties"
_DISTRIBUTED_INFO = "distributedInfo"
# Every Kineto trace has it, torch 1.8's included; JSON from other tools does not.
_KINETO_MARK = "schemaVersion"
_ALSO_READ = (_LEGACY_DEVICE_PROPERTIES, _DISTRIBUTED_INFO)
_DOCUMENT_DECODERS: dict[type, msgspec.json.Decoder] = {}
_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()
_EVENT_DECODERS: dict[type, msgspec.json.Decoder] = {}

_GZIP_MAGIC = b"\x1f\x8b"
_NOT_SPACE = re.compile(rb"\S")

Buffer = Union[bytes, bytearray, mmap.mmap]  # noqa: UP007 (a runtime alias)
"""A trace's bytes: a plain file mapped read-only (:class:`mmap.mmap`), or read or
decompressed into memory."""
# A value some Kineto versions write unquoted, in a value position: before ',' ']' or '}'
# (after ':' '[' or ',', as JSON allows nothing else there outside a string).
_BARE_VALUE = rb"-?(?:N/A|NaN|nan|Infinity|inf)(?=\s*[,\]}])"
# The repair's last pass: (1) a run of JSON that needs nothing, strings that hold no raw tab
# or line break included, so the pass yields a few long runs rather than one match per string
# (a trace holds millions of strings); (2) a string that holds raw tabs or line breaks;
# (3) a bare value. Possessive throughout: a run never gives back what it took.
_REPAIR_TOKEN = re.compile(
    rb'((?:[^"NIni\-]++|"[^"\\\t\n\r]*+(?:\\.[^"\\\t\n\r]*+)*+"|(?!'
    + _BARE_VALUE
    + rb")[NIni\-])++)"
    rb'|("[^"\\]*+(?:\\.[^"\\]*+)*+")'
    rb"|(" + _BARE_VALUE + rb")",
    re.S,
)
# Everything up to a backslash that starts no escape JSON has (a match only if there is one).
_UP_TO_AN_INVALID_ESCAPE = re.compile(rb'(?:[^\\]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+\\')
# A complete event's name in Kineto's layout, a line that ends ``"name": "...", "pid": 1,
# "tid": 2,`` after ``"cat": "...",`` (on the line before in torch ~1.8 traces): Kineto writes
# names unescaped, and a Python frame's name may hold quotes (the file name of code
# torch.compile generates, ``{"device": "cpu"}(12): run``) or a newline (a frame named after
# its source line), which end the string early or break it. Only that layout: in a file
# written on one line (or pretty-printed, ``"pid"`` on a line of its own), the name's end
# could not be told from the next event's, and the pass does not run (:func:`_kineto_layout`).
# The name runs to the first ``", "pid": `` and does not cross the line that closes an event;
# possessive (``*+``): an event that does not end as the layout does costs one scan of
# itself.
_COMPLETE_EVENT_NAME = re.compile(
    rb'(?m)("cat": "[^"\n]*",[ \t]*\r?\n?[ \t]*"name": ")'
    # Only a name that needs escaping: past its plain characters and escape pairs (a writer
    # that escapes leaves nothing else), a raw quote before its end, tab or line break.
    rb'(?=(?:[^"\\\t\n\r]|\\[^\t\n\r])*+(?:"(?!, "pid": )|[\t\r\\]|\n(?![ \t]*[{}\]])))'
    rb'((?:[^"\n]|"(?!, "pid": )|\n(?![ \t]*[{}\]]))*+)'
    rb'(", "pid": (?:-?\d+|"[^"\n]*"), "tid": (?:-?\d+|"[^"\n]*"),[ \t]*\r?$)'
)
# A quote after an even number of backslashes (none included): one that ends a string.
_RAW_QUOTE = re.compile(rb'(?<!\\)((?:\\\\)*)"')
# Control bytes other than tab, newline and carriage return are never valid JSON outside a
# string and invalid inside one: blank them.
_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")
_CONTROL_BYTE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_CONTROL_TO_SPACE = bytes.maketrans(bytes(range(9)) + b"\x0b\x0c" + bytes(range(14, 32)), b" " * 29)
_UTF8_CHUNK = 1 << 16  # a piece that stays in cache and in the heap (1 MB ones are mapped)
_VALIDATION_PATH = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<where>[^`]*)`)?$", re.S)


MAX_TRACE_BYTES_ENV = "PROFILING_UTILS_MAX_TRACE_BYTES"
"""Environment variable that sets the largest decompressed trace, in bytes (see the module docs)."""
_MEMORY_PER_TRACE_BYTE = 3  # peak RSS is ~2.6x the decompressed trace: keep a margin
_GZIP_INPUT_CHUNK = 1 << 16
_GZIP_OUTPUT_CHUNK = 1 << 20
# The gzip trailer sizes the output buffer up to this many times the compressed size; past
# it the buffer grows as output comes. Traces compress 10-30 times; the last four bytes of a
# truncated file are no trailer, and zero-filling the buffer they claim (up to deflate's
# largest expansion, 1032 times) cost gigabytes before the file was found cut short.
_GZIP_TRUSTED_RATIO = 64


def _available_memory_bytes() -> int | None:
    """``MemAvailable`` (Linux), else the physical memory, else ``None``."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def default_max_bytes() -> int | None:
    """The largest decompressed trace read by default, in bytes.

    ``PROFILING_UTILS_MAX_TRACE_BYTES`` when set, else a third of the memory available now
    (the model peaks at about 2.6x the decompressed size); ``None`` (no limit) when the
    machine's memory cannot be read.

    Raises:
        ValueError: The environment variable is set but is not a positive whole number.
    """
    written = os.environ.get(MAX_TRACE_BYTES_ENV, "").strip()
    if written:
        if not (written.isascii() and written.isdigit()) or int(written) <= 0:
            raise ValueError(
                f"{MAX_TRACE_BYTES_ENV} must be a whole number of bytes above 0, not {written!r}"
            )
        return int(written)
    available = _available_memory_bytes()
    return None if available is None else available // _MEMORY_PER_TRACE_BYTE


def _too_large(path: str | os.PathLike[str], what: str, limit: int, source: str) -> TraceError:
    return TraceError(
        path,
        f"{what} more than the {byte_size(limit)} ({limit:,} bytes) allowed ({source}); to load "
        "it anyway, raise the limit: --max-trace-bytes on the command line, max_bytes in "
        f"Python, or the environment variable {MAX_TRACE_BYTES_ENV}",
    )


def read_trace_bytes(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Buffer:
    """Read a trace file, decompressing it when it is gzip (detected from its first bytes).

    A plain file is memory-mapped read-only rather than copied: the decoded events' ``args``
    point into it, and the page cache's own pages serve them (at 4x the benchmark trace this
    saves 0.2 s of copying and page faults). Where a file cannot be mapped (a pipe, a special
    file), it is read. As with any memory-mapped file, truncating it while a trace built from
    it is in use ends the process (``SIGBUS``): do not analyse a trace while the profiler is
    rewriting it in place.

    Args:
        path: The file.
        max_bytes: The largest decompressed size accepted; ``None`` for
            :func:`default_max_bytes`.

    Raises:
        TraceError: The file is missing, unreadable, empty, larger (decompressed) than
            ``max_bytes``, or gzip that is cut short or corrupt.
    """
    if max_bytes is not None:
        limit, source = max_bytes, "the limit given"
    elif os.environ.get(MAX_TRACE_BYTES_ENV, "").strip():
        limit, source = default_max_bytes(), MAX_TRACE_BYTES_ENV
    else:
        limit, source = default_max_bytes(), "a third of the available memory"
    try:
        with open(path, "rb") as file:
            on_disk = os.fstat(file.fileno()).st_size
            if limit is not None and on_disk > limit:
                raise _too_large(path, f"the file holds {byte_size(on_disk)},", limit, source)
            data = _map_or_read(file, on_disk)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except OSError as err:
        raise TraceError(path, f"cannot be read ({err.strerror or err})") from None
    if not _NOT_SPACE.search(data):  # not data.strip(): that would copy the whole file
        raise TraceError(path, "file is empty")
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, path, limit, source)
        if not _NOT_SPACE.search(data):
            raise TraceError(path, "gzip file holds no data")
    return data


def _map_or_read(file: Any, size: int) -> Buffer:
    if size > 0:
        try:
            return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # not a regular file, or one that cannot be mapped
            pass
    return file.read()


def _gunzip(
    data: Buffer, path: str | os.PathLike[str], limit: int | None, source: str = "the limit given"
) -> bytearray:
    """Decompress gzip as a stream into one buffer, refusing output past ``limit``.

    The buffer is sized from the gzip trailer (the uncompressed size mod 2**32), but only as a
    hint, capped by the limit and by 64 times the compressed size (it grows past that as
    output comes): the output is counted as it comes, in 1 MB pieces, and the file is
    refused as soon as it passes the limit, whatever the trailer says. Small pieces stay in
    cache, so this is as fast as one-shot ``zlib.decompress``; one ``bytearray`` (no copy at
    the end, where ``gzip.decompress`` peaks at twice the output) is what msgspec then
    decodes from. Several gzip members are read in turn.
    """
    hint = min(int.from_bytes(data[-4:], "little"), _GZIP_TRUSTED_RATIO * len(data))
    if limit is not None:
        hint = min(hint, limit + 1)
    out = bytearray(hint)
    size = 0
    view = memoryview(data)
    position = 0
    decompressor = zlib.decompressobj(wbits=31)
    try:
        while True:
            if position < len(data):
                piece: bytes | memoryview = view[position : position + _GZIP_INPUT_CHUNK]
                position += len(piece)
            else:
                piece = b""
            while True:
                chunk = decompressor.decompress(piece, _GZIP_OUTPUT_CHUNK)
                out[size : size + len(chunk)] = chunk
                size += len(chunk)
                if limit is not None and size > limit:
                    raise _too_large(path, "the gzip data expands to", limit, source)
                # A member that ends inside the piece leaves the rest in unused_data (and
                # again in unconsumed_tail, which must not be fed back: that never ends).
                if decompressor.eof:
                    break
                piece = decompressor.unconsumed_tail
                # A full piece may leave output pending inside zlib: drain it too.
                if not piece and len(chunk) < _GZIP_OUTPUT_CHUNK:
                    break
            if decompressor.eof:
                rest = decompressor.unused_data + bytes(view[position:])
                if not rest.strip(b"\0"):
                    break
                data, view, position = rest, memoryview(rest), 0
                decompressor = zlib.decompressobj(wbits=31)
            elif position >= len(data):
                raise TraceError(path, "gzip data is cut short (the file looks truncated)")
    except zlib.error as err:
        raise TraceError(path, f"not valid gzip data ({err})") from None
    del view
    del out[size:]
    return out


def _event_decoder(event_type: type[E]) -> msgspec.json.Decoder:
    decoder = _EVENT_DECODERS.get(event_type)
    if decoder is None:
        any_event = Union[(event_type, *_OTHER_EVENT_TYPES)]  # noqa: UP007 (built at runtime)
        decoder = _EVENT_DECODERS[event_type] = msgspec.json.Decoder(list[any_event])
    return decoder


_UNSET: Any = msgspec.UNSET


def _document_decoder(event_type: type[E]) -> msgspec.json.Decoder:
    """One pass over the whole file: ``traceEvents`` decoded into events, the keys the model
    reads kept raw, every other key skipped (read later, on demand: :attr:`RawTrace.metadata`).
    """
    decoder = _DOCUMENT_DECODERS.get(event_type)
    if decoder is None:
        any_event = Union[(event_type, *_OTHER_EVENT_TYPES)]  # noqa: UP007 (built at runtime)
        fields = [
            ("traceEvents", list[any_event], _UNSET),
            *(
                (key, msgspec.Raw, _UNSET)
                for key in (*_KNOWN_KEYS, *_ALSO_READ)
                if key != "traceEvents"
            ),
        ]
        document = msgspec.defstruct("_Document", fields, gc=False)
        decoder = _DOCUMENT_DECODERS[event_type] = msgspec.json.Decoder(document)
    return decoder


def _fast_decode(
    data: Buffer, path: str | os.PathLike[str], event_type: type[E]
) -> RawTrace[E] | None:
    """The common case in one pass: a well-formed trace. ``None`` for anything else (not JSON,
    no ``traceEvents``, an event of the wrong shape...), which the full path then reads and
    reports exactly as before."""
    try:
        document = _document_decoder(event_type).decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    events = document.traceEvents
    if events is _UNSET:
        return None
    trace = RawTrace(path=Path(path), events=events, _source=data, _events_source=data)
    written = {
        key: raw
        for key in (*_KNOWN_KEYS, *_ALSO_READ)
        if key != "traceEvents" and (raw := getattr(document, key)) is not _UNSET
    }
    _set_known(trace, written)
    return trace


def _top_value(raw: msgspec.Raw, key: str, path: str | os.PathLike[str]) -> Any:
    """A top-level key's value, decoded; a value JSON allows but Python cannot hold (a number
    out of range, such as ``1e999``) is a :class:`~profiling_utils.errors.TraceError`."""
    try:
        return _ANY.decode(raw)
    except msgspec.ValidationError as err:
        problem = str(err).split(" - at ", 1)[0]
        raise TraceError(path, f"top-level key {key!r} cannot be read ({problem})") from None


def _set_known(trace: RawTrace[Any], top: dict[str, msgspec.Raw]) -> None:
    """Set the attributes of the known top-level keys (and ``distributedInfo``)."""
    for key, raw in top.items():
        attribute = _KNOWN_KEYS.get(key)
        if key == _LEGACY_DEVICE_PROPERTIES and "deviceProperties" not in top:
            attribute = "device_properties"
        if key == _DISTRIBUTED_INFO:
            trace.distributed_info = _top_value(raw, key, trace.path)
        if attribute is None or attribute == "events":
            continue
        value = _top_value(raw, key, trace.path)
        if attribute == "device_properties":
            trace.device_properties = (
                [d for d in value if isinstance(d, dict)] if isinstance(value, list) else []
            )
        else:
            setattr(trace, attribute, value)


def _metadata_of(top: dict[str, msgspec.Raw], path: str | os.PathLike[str]) -> dict[str, Any]:
    """The top-level keys that are not read into attributes, decoded."""
    metadata = {}
    for key, raw in top.items():
        if key == "traceEvents":
            continue
        attribute = _KNOWN_KEYS.get(key)
        if key == _LEGACY_DEVICE_PROPERTIES and "deviceProperties" not in top:
            attribute = "device_properties"
        if attribute is None:
            metadata[key] = _top_value(raw, key, path)
    return metadata


def _is_utf8(data: Buffer) -> bool:
    """Whether ``data`` is valid UTF-8, checked in chunks so no large string is built."""
    chunks = range(0, len(data), _UTF8_CHUNK)
    if all(data[offset : offset + _UTF8_CHUNK].isascii() for offset in chunks):
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    with memoryview(data) as view:
        try:
            for offset in chunks:
                decoder.decode(view[offset : offset + _UTF8_CHUNK])
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
    return True


def _escape_breaks(text: bytes) -> bytes:
    """Raw tabs, line feeds and carriage returns as JSON escapes."""
    return text.replace(b"\t", b"\\t").replace(b"\n", b"\\n").replace(b"\r", b"\\r")


def _repair_token(match: re.Match[bytes]) -> bytes | None:
    if match.lastindex == 1:
        return None
    if match.lastindex == 2:
        return _escape_breaks(match[0])
    return b'"' + match[0] + b'"'


def _escape_raw_name(match: re.Match[bytes], literal_backslashes: bool) -> bytes:
    name = match[2]
    if literal_backslashes:
        # A writer that left quotes or line breaks raw escaped nothing: a backslash in the
        # name is one (``print("done\n")``), unless every backslash was doubled already.
        name = name.replace(b"\\", b"\\\\")
    # A newline written on Windows is CR LF on disk (a text-mode stream): the name held LF.
    name = _RAW_QUOTE.sub(rb'\1\\"', name).replace(b"\r\n", b"\n")
    name = _escape_breaks(name)
    return match[1] + name + match[3]


def _kineto_layout(data: bytes) -> bool:
    """Whether the file is laid out as Kineto writes it, a few lines per event and a complete
    event's ``"pid"`` on its name's line: the only layout whose names the repair can read."""
    return data.count(b"\n") >= data.count(b'"ph":') > 0 and b'", "pid": ' in data


def _substitute(
    pattern: re.Pattern[bytes], data: bytes, replace: Callable[[re.Match[bytes]], bytes | None]
) -> bytes:
    """``pattern.sub(replace, data)`` where ``replace`` gives ``None`` for a match to keep,
    with the unchanged stretches joined from views of ``data``: one copy of the file, where
    ``re.sub`` holds a second one in pieces while it joins them."""
    view, pieces, done = memoryview(data), [], 0
    for match in pattern.finditer(data):
        replacement = replace(match)
        if replacement is not None:
            pieces += (view[done : match.start()], replacement)
            done = match.end()
    if not pieces:
        return data
    pieces.append(view[done:])
    return b"".join(pieces)


def _repair(data: Buffer) -> bytes:
    """Blank control bytes, replace invalid UTF-8, read backslashes as written where the writer
    escaped none, escape the quotes, tabs and line breaks inside complete events' names and
    the tabs and line breaks inside other strings, and quote bare ``N/A``/``NaN``/``inf``
    values."""
    # bytes, from the mapped file too (a new one only where something changes below)
    data = data if isinstance(data, bytes) else bytes(data)
    if _CONTROL_BYTE.search(data):
        # One pass in C (a sub makes an object per byte: a file padded with NULs had millions).
        data = data.translate(_CONTROL_TO_SPACE)
    if not _is_utf8(data):
        data = data.decode("utf-8", "replace").encode("utf-8")
    doubled = _UP_TO_AN_INVALID_ESCAPE.match(data) is not None
    if doubled:
        # An escape JSON does not have (``\U`` in ``C:\Users``): the writer escaped no
        # backslash (Kineto on Windows wrote paths in ``with_stack`` names and call stacks
        # as they are), so every one is the character itself.
        data = data.replace(b"\\", b"\\\\")
    if _kineto_layout(data):
        escape = functools.partial(_escape_raw_name, literal_backslashes=not doubled)
        data = _substitute(_COMPLETE_EVENT_NAME, data, escape)
    return _substitute(_REPAIR_TOKEN, data, _repair_token)


_UTF8_BOM = b"\xef\xbb\xbf"


_FIRST_ITEM_BYTES = 1 << 16


def _what_the_array_holds(data: Buffer) -> str:
    """For a file whose top level is an array: whether its items are trace events (the bare
    Chrome format of other tools), or not (a table's rows, as a ``key_averages()`` dump)."""
    # Its first item only, read from the start of the file (it may be large).
    text = bytes(data[:_FIRST_ITEM_BYTES]).decode("utf-8", "replace")
    start = text.find("[") + 1
    while start < len(text) and text[start].isspace():
        start += 1
    try:
        first = [json.JSONDecoder().raw_decode(text, start)[0]]
    except ValueError:  # an empty array, or an item longer than the piece read
        first = []
    if first and isinstance(first[0], dict) and "ph" in first[0]:
        return (
            " (a bare array of events is the Chrome trace format that torch's legacy "
            "autograd profiler and other tools write; torch.profiler writes an object "
            "with 'traceEvents')"
        )
    if first and isinstance(first[0], dict):
        keys = ", ".join(cut(str(key), 40) for key in list(first[0])[:4])
        return (
            f" (an array of objects without a 'ph', such as the rows of a table: its first "
            f"has {keys}; torch.profiler writes an object with 'traceEvents')"
        )
    return " (torch.profiler writes an object with 'traceEvents')"


def _wide_encoding(head: bytes) -> str | None:
    """``"UTF-32"`` or ``"UTF-16"`` where a file's first bytes are text in it (by its byte-order
    mark, or without one by the NUL bytes that ASCII characters hold in it), else ``None``."""
    if head[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        return "UTF-32"
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16"
    sample = head[:64]
    nul_share = sample.count(0) / len(sample) if len(sample) >= 8 else 0.0
    if 0.4 <= nul_share <= 0.6:  # ASCII in UTF-16: one NUL in two bytes
        return "UTF-16"
    if 0.7 <= nul_share <= 0.8:  # in UTF-32: three in four (a file of NULs is neither)
        return "UTF-32"
    return None


def _json_problem(data: bytes, err: msgspec.DecodeError) -> str:
    message = str(err)
    if "truncated" in message:
        return "JSON is cut short (the file looks truncated)"
    head = bytes(data[:4096])
    start = head.lstrip()
    if encoding := _wide_encoding(head):
        return (
            f"{encoding} text, not the UTF-8 JSON torch.profiler writes (saved again by a "
            "Windows tool?): convert it back to UTF-8"
        )
    if start[:1] not in (b"{", b"["):
        return f"not JSON (it starts with {bytes(start[:16])!r})"
    if at := _ERROR_BYTE.search(message):
        where = int(at[1])
        near = bytes(data[max(0, where - 40) : where + 20])
        return f"not valid JSON ({message}; the bytes around it: {near!r})"
    return f"not valid JSON ({message})"


def _shape_problem(err: msgspec.ValidationError, where_prefix: str) -> str:
    match = _VALIDATION_PATH.match(str(err))
    assert match is not None  # the pattern matches any string
    message, where = match["message"], match["where"]
    if where is None:
        return f"{where_prefix}: {message}"
    return f"unexpected value at {where_prefix}{where}: {message}"


def decode_trace(
    data: Buffer, path: str | os.PathLike[str], event_type: type[E] = Event
) -> RawTrace[E]:
    """Decode the bytes of a Kineto trace (already decompressed) into a :class:`RawTrace`.

    A UTF-8 byte-order mark before the JSON (a trace saved again by some Windows tools) is
    skipped.

    Args:
        data: The JSON text: bytes, or a memory-mapped file.
        path: The file it came from, for error messages.
        event_type: The struct each event is decoded into: :class:`Event` or a subclass
            (the model's :class:`~profiling_utils.trace.Span` decodes straight from JSON).

    Raises:
        TraceError: The bytes are not JSON, are JSON cut short, are not a trace object with a
            ``traceEvents`` list, or an event has a value of the wrong type (a string where a
            number belongs, for example), or nest values deeper than the decoder goes
            (hundreds of levels of arrays or objects, which no profiler writes).
    """
    try:
        return _decode_trace(data, path, event_type)
    except RecursionError:
        raise TraceError(
            path, "JSON is nested too deeply to read (hundreds of levels of arrays or objects)"
        ) from None


def _decode_trace(data: Buffer, path: str | os.PathLike[str], event_type: type[E]) -> RawTrace[E]:
    if data[:3] == _UTF8_BOM:  # written by some Windows editors and shells; JSON has none
        data = bytes(memoryview(data)[3:])
    # msgspec does not check UTF-8 inside strings it skips (``args``): check it up front.
    utf8 = _is_utf8(data)
    if utf8 and (trace := _fast_decode(data, path, event_type)) is not None:
        return trace
    first_error: msgspec.DecodeError | None = None
    if not utf8:
        first_error = msgspec.DecodeError("invalid UTF-8")
    else:
        try:
            top = _TOP_LEVEL.decode(data)
        except msgspec.ValidationError as err:
            kind = str(err).rsplit("got `", 1)[-1].rstrip("`")
            problem = f"JSON is not a trace: the top level is {kind!r}, not an object"
            if kind == "array":
                problem += _what_the_array_holds(data)
            raise TraceError(path, problem, not_a_trace=True) from None
        except msgspec.DecodeError as err:
            first_error = err
    repaired = first_error is not None
    if first_error is not None:
        if _wide_encoding(bytes(data[:64])):  # its NUL bytes would repair into spaced text
            raise TraceError(path, _json_problem(data, first_error))
        fixed = _repair(data)
        if memoryview(fixed) == memoryview(data):
            raise TraceError(path, _json_problem(data, first_error))
        try:
            top = _TOP_LEVEL.decode(fixed)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise TraceError(path, _json_problem(data, first_error)) from None
        if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            # Nothing reads the mapped file again: let its pages go (the caller holds it).
            data.madvise(mmap.MADV_DONTNEED)
        data = fixed

    raw_events = top.get("traceEvents")
    if raw_events is None:
        keys = ", ".join(sorted(top)[:8]) or "none"
        raise TraceError(
            path,
            f"JSON is not a trace: no 'traceEvents' key (top-level keys: {keys})",
            not_a_trace=True,
        )
    try:
        events = _event_decoder(event_type).decode(raw_events)
    except msgspec.ValidationError as err:
        problem = _shape_problem(err, "traceEvents")
        if repaired and "Expected `float`, got `str`" in problem:
            # The repair quoted a bare NaN, Infinity or N/A, which JSON does not allow, and
            # which can stand for no time.
            problem += " (a bare NaN, Infinity or N/A in the file, where a number belongs)"
        other_tool = _KINETO_MARK not in top
        if other_tool:
            # Other tools write Chrome-format JSON too (rocprof: times as strings, an empty
            # first event): say what the file is not before what does not fit.
            problem = (
                f"JSON is not a Kineto trace (no {_KINETO_MARK!r} key, which torch.profiler "
                f"always writes): {problem}"
            )
        raise TraceError(path, problem, not_a_trace=other_tool) from None

    trace = RawTrace(path=Path(path), events=events, repaired=repaired)
    trace._events_source = raw_events
    _set_known(trace, top)
    trace._metadata = _metadata_of(top, path)
    return trace


def load_raw_trace(
    path: str | os.PathLike[str],
    event_type: type[E] = Event,
    *,
    max_bytes: int | None = None,
) -> RawTrace[E]:
    """Read and decode a trace file: :func:`read_trace_bytes` then :func:`decode_trace`."""
    return decode_trace(read_trace_bytes(path, max_bytes=max_bytes), path, event_type)
