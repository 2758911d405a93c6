"""Loading: every format edge Kineto produces, and every kind of bad input.

Bad input must raise :class:`TraceError` (never a raw msgspec, json, gzip or KeyError) with a
message that names the file and says what is wrong.
"""

from __future__ import annotations

import gzip
import json
import mmap
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import (
    FOREIGN,
    complete_event,
    flow_pair,
    gpu_fixture,
    minimal_gpu_events,
    run_cli,
    trace_document,
    write_trace,
)

from profiling_utils import TraceError, load_trace
from profiling_utils.loading import (
    MAX_TRACE_BYTES_ENV,
    Event,
    OtherEvent,
    decode_trace,
    default_max_bytes,
    load_raw_trace,
    read_trace_bytes,
)
from profiling_utils.rules import diagnose
from profiling_utils.tables import cut

# -- format edges that must load ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz", "trace.gz.json", "trace.bin"])
def test_plain_and_gzip_are_told_apart_by_content(make_trace, name: str) -> None:
    trace = load_trace(make_trace(minimal_gpu_events(), name=name))
    assert len(trace.kernels) == 1
    assert trace.path.name == name


def test_gzip_and_plain_give_the_same_model(tmp_path: Path) -> None:
    fixture = gpu_fixture("64_bf16_warm_eager")
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(fixture.read_bytes()))
    a, b = load_trace(fixture), load_trace(plain)
    assert [(s.name, s.start, s.dur) for s in a.spans] == [
        (s.name, s.start, s.dur) for s in b.spans
    ]


def test_absolute_microsecond_timestamps_of_older_traces(make_trace) -> None:
    # Before torch 2.4: integer µs since the epoch, no baseTimeNanoseconds.
    events = minimal_gpu_events(offset=1683564901548726)
    for event in events:
        if "ts" in event:
            event["ts"] = int(event["ts"])
    trace = load_trace(make_trace(events, baseTimeNanoseconds=None))
    assert trace.base_time_ns is None
    assert trace.origin_us == 1683564901548726
    assert trace.steps[0].start == 0.0
    assert trace.kernels[0].start == 50.0


def test_float_microseconds_keep_nanosecond_precision(make_trace) -> None:
    events = [
        complete_event("a", "cpu_op", 4433858951072.448, 0.001),
        complete_event("b", "cpu_op", 4433858951072.449, 192.426),
    ]
    trace = load_trace(make_trace(events))
    a, b = trace.spans
    assert b.start - a.start == pytest.approx(0.001, abs=2e-4)
    assert b.dur == 192.426


@pytest.mark.parametrize(
    ("pid", "tid"),
    [(429, 429), ("429", "429"), (429, "Spans"), ("Traces", ""), ("", "")],
)
def test_pid_and_tid_may_be_numbers_or_strings(make_trace, pid, tid) -> None:
    trace = load_trace(make_trace([complete_event("op", "cpu_op", 10, 5, pid=pid, tid=tid)]))
    (lane,) = trace.lanes
    assert (lane.pid, lane.tid) == (pid, tid)
    assert lane.kind == "cpu"


def test_gpu_lane_with_string_ids_has_no_device_number(make_trace) -> None:
    trace = load_trace(make_trace([complete_event("k", "kernel", 0, 1, pid="gpu", tid="s")]))
    (lane,) = trace.lanes
    assert lane.kind == "gpu" and lane.device is None and lane.stream is None


def test_events_without_dur_are_zero_length(make_trace) -> None:
    trace = load_trace(make_trace([complete_event("marker", "cpu_op", 3, None)]))
    assert trace.spans[0].dur == 0.0 and trace.spans[0].end == 0.0


def test_record_window_end_does_not_stretch_the_trace(make_trace) -> None:
    events = minimal_gpu_events()
    # Some writers make it a complete event: it must be dropped either way.
    events.append(complete_event("Record Window End", "", 9.9e15, 0, pid="", tid=""))
    trace = load_trace(make_trace(events))
    assert all(span.name != "Record Window End" for span in trace.spans)
    assert max(span.end for span in trace.spans) == 100.0


def test_overhead_events_on_pid_minus_one(make_trace) -> None:
    events = [
        *minimal_gpu_events(),
        complete_event("Activity Buffer Request", "overhead", 1001, 50, pid=-1, tid=0),
    ]
    trace = load_trace(make_trace(events))
    (request,) = trace.overhead
    assert request.lane.kind == "overhead" and request.lane.label == "CUPTI overhead"
    assert request.args == {}


def test_flow_events_are_read_and_links_come_from_correlation(make_trace) -> None:
    events = minimal_gpu_events()
    raw = load_raw_trace(make_trace(events))
    assert sum(1 for e in raw.events if e.ph in ("s", "f")) == 4
    trace = load_trace(make_trace(events))
    assert all(span.ph == "X" for span in trace.spans)
    assert trace.launch_of(trace.kernels[0]).name == "cudaLaunchKernel"


def test_kernel_named_kernel_and_non_ascii_names(make_trace) -> None:
    events = [complete_event("Kernel", "kernel", 0, 1, pid=0, tid=7),
              complete_event("opération ✓", "cpu_op", 0, 1)]  # fmt: skip
    trace = load_trace(make_trace(events))
    assert {s.name for s in trace.spans} == {"Kernel", "opération ✓"}


def test_cpu_only_trace_is_valid(make_trace) -> None:
    events = [
        complete_event("ProfilerStep#0", "user_annotation", 0, 10),
        complete_event("aten::add", "cpu_op", 1, 2),
    ]
    trace = load_trace(make_trace(events, deviceProperties=None, cuda_runtime_version=None,
                                  cuda_driver_version=None, cupti_version=None))  # fmt: skip
    assert not trace.has_gpu
    assert trace.devices == [] and trace.kernels == [] and trace.gpu_work == []
    assert trace.cuda_runtime_version is None
    assert [step.gpu_work for step in trace.steps] == [()]
    assert [lane.kind for lane in trace.lanes] == ["cpu"]


def test_trace_with_no_events_is_empty_not_an_error(make_trace) -> None:
    trace = load_trace(make_trace({"traceEvents": []}))
    assert trace.spans == [] and trace.steps == [] and not trace.has_gpu


def test_unquoted_na_and_inf_in_args_load_after_repair(make_trace) -> None:
    text = json.dumps(trace_document(minimal_gpu_events()))
    text = text.replace('"memory bandwidth (GB/s)": 2.048', '"memory bandwidth (GB/s)": N/A')
    text = text.replace('"bytes": 4096', '"bytes": 4096, "x": inf, "y": -inf, "z": NaN')
    path = make_trace(text.encode(), name="na.json")
    raw = load_raw_trace(path)
    assert raw.repaired
    copy = load_trace(path).find(cat="gpu_memcpy")[0]
    assert copy.args["memory bandwidth (GB/s)"] == "N/A"
    assert (copy.args["x"], copy.args["y"], copy.args["z"]) == ("inf", "-inf", "NaN")


@pytest.mark.parametrize("bare", ["Infinity", "NaN", "N/A"])
def test_a_bare_value_where_a_time_belongs_is_named_in_the_error(make_trace, bare) -> None:
    text = json.dumps(trace_document([complete_event("aten::mm", "cpu_op", 0, 999)]))
    path = make_trace(text.replace('"dur": 999', f'"dur": {bare}').encode(), name="bare.json")
    with pytest.raises(TraceError) as raised:
        load_trace(path)
    assert raised.value.reason == (
        "unexpected value at traceEvents[0].dur: Expected `float`, got `str` (a bare NaN, "
        "Infinity or N/A in the file, where a number belongs)"
    )


def test_control_characters_in_names_are_blanked(make_trace) -> None:
    text = json.dumps(trace_document([complete_event("bad\u0001name", "cpu_op", 0, 1)]))
    path = make_trace(text.replace("\\u0001", "\x01").encode())
    assert load_trace(path).spans[0].name == "bad name"


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])  # mapped, and read into memory
def test_invalid_utf8_is_replaced_and_the_file_loads(tmp_path: Path, name: str) -> None:
    text = json.dumps(trace_document(minimal_gpu_events())).encode()
    text = text.replace(b'"aten::mm"', b'"aten::mm\xff"', 1)
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    raw = load_raw_trace(path)
    assert raw.repaired
    assert "aten::mm\ufffd" in [event.name for event in raw.events if isinstance(event, Event)]


@pytest.mark.parametrize("repaired", [False, True])
def test_thread_names_are_read_from_metadata_events_on_demand(make_trace, repaired) -> None:
    events = [
        *minimal_gpu_events(),
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": 429, "tid": 880,
         "args": {"name": "thread 880 (pt_autograd_0)"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": 5}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2},
        {"name": "process_name", "ph": "M", "pid": 429, "tid": 0, "args": {"name": "python"}},
        complete_event("aten::mul", "cpu_op", 1010, 5, tid=880),
    ]  # fmt: skip
    text = json.dumps(trace_document(events))
    if repaired:  # the second decoding path: a bare NaN the first pass cannot read
        text = text.replace('"bytes": 4096', '"bytes": NaN', 1)
    raw = load_raw_trace(make_trace(text.encode()))
    assert raw.repaired is repaired
    assert raw.thread_names == {
        (429, 429): "thread 429 (python3)",
        (429, 880): "thread 880 (pt_autograd_0)",
        (0, 7): "stream 7",
    }
    trace = load_trace(make_trace(text.encode(), name="again.json"))
    names = {lane.tid: trace.thread_name(lane) for lane in trace.lanes}
    assert names[429] == "python3" and names[880] == "pt_autograd_0"
    assert names[7] is None, "a GPU stream's lane is not a thread"


def _memory(ts: float, total: object, size: int = 256, device: tuple = (1, 0)) -> dict:
    """A ``[memory]`` instant event as profile_memory=True writes it."""
    args = {"Total Reserved": 2097152, "Total Allocated": total, "Bytes": size}
    args |= {"Device Id": device[1], "Device Type": device[0], "Addr": 1}
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 429,
            "tid": 429, "ts": ts, "args": args}  # fmt: skip


@pytest.mark.parametrize("first", ["thread_names", "memory_events"])
def test_memory_events_are_read_with_the_thread_names_in_one_pass(make_trace, first) -> None:
    events = [
        *minimal_gpu_events(),
        {"name": "thread_name", "ph": "M", "pid": 429, "tid": 429,
         "args": {"name": "thread 429 (python3)"}},
        _memory(1012.0, 256), _memory(1020.5, 512), _memory(1030.0, 256, size=-256),
        _memory(1031.0, 8, size=8, device=(0, -1)),
        _memory(1032.0, "N/A"),  # no total, as torch ~1.8 wrote: its size is still read
        {"ph": "i", "name": "[memory]", "pid": 429, "tid": 429, "ts": 1033.0},  # no args
        _memory(1034.0, 256, size="big"),  # a size that is no number: not read
        {"ph": "i", "name": "marker", "pid": 429, "tid": 429, "ts": "odd", "args": [1]},
    ]  # fmt: skip
    raw = load_raw_trace(make_trace(events))
    getattr(raw, first)  # either read first, the other comes from the same pass
    assert raw.thread_names == {(429, 429): "thread 429 (python3)"}
    assert [(e.ts, e.bytes, e.total_allocated, e.device_type, e.device_id)
            for e in raw.memory_events] == [
        (1012.0, 256, 256, 1, 0), (1020.5, 256, 512, 1, 0), (1030.0, -256, 256, 1, 0),
        (1031.0, 8, 8, 0, -1), (1032.0, 256, None, 1, 0),
    ]  # fmt: skip
    assert [e.total_reserved for e in raw.memory_events] == [2097152] * 3 + [None, 2097152]
    # The model shifts their times as it shifts the spans'.
    trace = load_trace(make_trace(events, name="again.json"))
    assert [e.ts for e in trace.memory_events] == [12.0, 20.5, 30.0, 31.0, 32.0]


def test_a_trace_without_memory_events_is_scanned_not_decoded_again(make_trace) -> None:
    raw = load_raw_trace(make_trace(minimal_gpu_events()))
    assert raw.memory_events == []
    assert raw._events_source is not None  # kept for the thread names' pass
    assert raw.thread_names == {(429, 429): "thread 429 (python3)"}


def test_a_trace_without_metadata_events_names_no_thread(make_trace) -> None:
    trace = load_trace(make_trace([complete_event("aten::mm", "cpu_op", 0, 5)]))
    assert [trace.thread_name(lane) for lane in trace.lanes] == [None]


def test_well_formed_files_are_not_repaired(make_trace) -> None:
    assert not load_raw_trace(make_trace(minimal_gpu_events())).repaired


def test_raw_events_keep_every_phase(make_trace) -> None:
    raw = decode_trace(json.dumps(trace_document(minimal_gpu_events())).encode(), "x.json")
    assert {e.ph for e in raw.events} == {"X", "s", "f", "M", "i"}
    assert all(isinstance(e, Event) == (e.ph == "X") for e in raw.events)
    assert all(isinstance(e, OtherEvent) for e in raw.events if e.ph != "X")
    assert raw.cuda_runtime_version == 13000
    assert raw.metadata["traceName"] == "synthetic.json"


def test_real_fixture_bytes(fixture_path) -> None:
    data = read_trace_bytes(fixture_path("64_bf16_warm_eager"))
    assert data.lstrip().startswith(b"{")
    assert json.loads(data)["schemaVersion"] == 1


def test_a_plain_file_is_mapped_and_its_events_read_from_the_mapping(tmp_path: Path) -> None:
    document = trace_document(minimal_gpu_events())
    plain = write_trace(tmp_path / "t.json", document)
    packed = write_trace(tmp_path / "t.json.gz", document)
    assert isinstance(read_trace_bytes(plain), mmap.mmap)
    assert isinstance(read_trace_bytes(packed), bytearray)
    mapped, unpacked = load_trace(plain), load_trace(packed)
    assert [(s.name, s.start, s.args) for s in mapped.spans] == [
        (s.name, s.start, s.args) for s in unpacked.spans
    ]
    assert mapped.launch_of(mapped.kernels[0]) is not None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_trace_from_a_pipe_is_read_rather_than_mapped(tmp_path: Path) -> None:
    pipe = tmp_path / "trace.json"
    os.mkfifo(pipe)
    text = json.dumps(trace_document(minimal_gpu_events())).encode()
    writer = threading.Thread(target=pipe.write_bytes, args=(text,))
    writer.start()
    trace = load_trace(pipe)
    writer.join()
    assert len(trace.kernels) == 1 and trace.launch_of(trace.kernels[0]) is not None


# -- bad input: one TraceError naming the file ----------------------------------------------


def _reason(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        load_trace(path)
    err = info.value
    assert err.path == path
    assert str(err) == f"{path}: {err.reason}"
    assert isinstance(err, ValueError)
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)
    return err.reason


def test_missing_file(tmp_path: Path) -> None:
    assert _reason(tmp_path / "nope.json") == "no such file"


def test_directory(tmp_path: Path) -> None:
    assert "directory" in _reason(tmp_path)


@pytest.mark.parametrize("content", [b"", b"  \n", gzip.compress(b"")])
def test_empty_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "empty.json"
    path.write_bytes(content)
    assert "empty" in _reason(path) or "no data" in _reason(path)


@pytest.mark.parametrize("content", [b"hello world", b"<html></html>", b"\x00\x01\x02"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_not_json(tmp_path: Path, content: bytes, suffix: str) -> None:
    path = tmp_path / f"x{suffix}"
    path.write_bytes(gzip.compress(content) if suffix == ".json.gz" else content)
    # The bytes it starts with, as bytes whatever buffer held them (not bytearray(b'...')).
    assert _reason(path) == f"not JSON (it starts with {content.lstrip()[:16]!r})"


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X",, }]}')
    # Where, and the bytes around it: enough to see what broke the file.
    assert _reason(path) == (
        "not valid JSON (JSON is malformed: expected '\"' (byte 28); the bytes around "
        """it: b'{"traceEvents": [{"ph": "X",, }]}')"""
    )


def test_json_nested_deeper_than_the_decoder_goes_is_refused(tmp_path: Path) -> None:
    # One op's args nested 2,000 arrays deep: the decoder recurses, and gives up at a depth
    # Python allows. Refused with one line, not a RecursionError.
    events = minimal_gpu_events()
    text = json.dumps(trace_document(events)).replace(
        '"args": {', '"args": {"deep": ' + "[" * 2000 + "]" * 2000 + ", ", 1
    )
    path = write_trace(tmp_path / "deep.json", text.encode())
    assert _reason(path).startswith("JSON is nested too deeply to read")


@pytest.mark.parametrize("name", ["cut.json", "cut.json.gz"])
def test_truncated_json(tmp_path: Path, name: str) -> None:
    data = json.dumps(trace_document(minimal_gpu_events())).encode()
    path = write_trace(tmp_path / name, data[: len(data) // 2])
    assert "cut short" in _reason(path)


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(trace_document(minimal_gpu_events())).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    assert _reason(path) == "gzip data is cut short (the file looks truncated)"


def test_truncated_real_fixture(tmp_path: Path) -> None:
    data = gpu_fixture("train_tiny_transformer_a3").read_bytes()
    path = tmp_path / "train.json.gz"
    path.write_bytes(data[:-100])
    assert "cut short" in _reason(path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    header = gzip.compress(b"")[:10]
    path = tmp_path / "bad.json.gz"
    path.write_bytes(header + b"\xff" * 64)  # not a deflate stream
    assert _reason(path).startswith("not valid gzip data")


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([1, 2, 3], "the top level is 'array'"),
        (b'[{"ph": "X", "name": "a", "ts": 1}]', "not an object (a bare array of events is"),
        (  # key_averages() rows saved as JSON: not events
            b'[{"name": "aten::mm", "calls": 3, "self_us": 1.5}]',
            "not an object (an array of objects without a 'ph', such as the rows of a table: "
            "its first has name, calls, self_us;",
        ),
        ("trace", "the top level is 'str'"),
        (42, "the top level is 'int'"),
        ({"events": []}, "no 'traceEvents' key (top-level keys: events)"),
        ({}, "no 'traceEvents' key"),
        ({"traceEvents": {"a": 1}}, "traceEvents: Expected `array`, got `object`"),
        ({"traceEvents": [1, 2]}, "traceEvents[0]: Expected `object`, got `int`"),
    ],
)
def test_json_that_is_not_a_trace(make_trace, document, expected: str) -> None:
    assert expected in _reason(make_trace(document))


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("ts", "123.5", "traceEvents[0].ts: Expected `float`, got `str`"),
        ("dur", "1.0", "traceEvents[0].dur: Expected `float`, got `str`"),
        ("ts", None, "traceEvents[0].ts: Expected `float`, got `null`"),
        ("pid", 1.5, "traceEvents[0].pid: Expected `int | str`, got `float`"),
        ("name", 7, "traceEvents[0].name: Expected `str`, got `int`"),
    ],
)
def test_values_of_the_wrong_type(make_trace, field: str, value, expected: str) -> None:
    event = complete_event("op", "cpu_op", 10, 5)
    event[field] = value
    assert expected in _reason(make_trace([event]))


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("NaN", "Expected `float`, got `str`"),
        ("Infinity", "Expected `float`, got `str`"),
        ("-inf", "Expected `float`, got `str`"),
        ("N/A", "Expected `float`, got `str`"),
    ],
)
def test_nan_inf_and_na_in_times(make_trace, token: str, expected: str) -> None:
    text = json.dumps(trace_document([complete_event("op", "cpu_op", 10, 5)]))
    path = make_trace(text.replace('"dur": 5', f'"dur": {token}').encode())
    assert f"traceEvents[0].dur: {expected}" in _reason(path)


def test_number_too_large_for_a_float(make_trace) -> None:
    text = json.dumps(trace_document([complete_event("op", "cpu_op", 10, 5)]))
    path = make_trace(text.replace('"ts": 10', '"ts": 1e999').encode())
    assert "traceEvents[0].ts: Number out of range" in _reason(path)


@pytest.mark.parametrize("key", ["distributedInfo", "deviceProperties", "someTool"])
def test_number_too_large_for_a_float_outside_the_events(make_trace, key: str) -> None:
    # Found by corrupting real traces byte by byte: this escaped as a msgspec error.
    document = trace_document([complete_event("op", "cpu_op", 10, 5)])
    document[key] = [{"rank": 0}] if key == "deviceProperties" else {"rank": 0}
    path = make_trace(json.dumps(document).replace('"rank": 0', '"rank": 1e999').encode())
    if key == "someTool":  # not read by the model: refused when the metadata is asked for
        trace = load_trace(path)
        with pytest.raises(TraceError, match="top-level key 'someTool' cannot be read"):
            _ = trace.metadata
        return
    assert f"top-level key {key!r} cannot be read (Number out of range)" in _reason(path)


def test_args_holding_a_number_too_large_for_a_float_read_as_none(make_trace, capsys) -> None:
    events = [complete_event("aten::mm", "cpu_op", 10, 5, Sequence_number=7)]
    text = json.dumps(trace_document(events)).replace('"Sequence_number": 7', '"seq": 1e999')
    path = make_trace(text.encode())
    assert load_trace(path).spans[0].args == {}
    for command in ("summary", "diagnose"):
        assert run_cli(capsys, command, str(path), "--json")[0] == 0


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"name": "a", "ts": 1}, "traceEvents[0]: Object missing required field `ph`"),
        ({"ph": "Z", "name": "a"}, "traceEvents[0].ph: Invalid value 'Z'"),
        ({"ph": 1, "name": "a"}, "traceEvents[0].ph: Expected `str`"),
    ],
)
def test_events_need_a_known_phase(make_trace, event, expected: str) -> None:
    assert expected in _reason(make_trace({"traceEvents": [event]}))


def test_chrome_json_of_another_tool_is_named_as_not_a_kineto_trace(make_trace) -> None:
    # rocprof's JSON: an empty first event, times written as strings, no schemaVersion.
    rocprof = {
        "traceEvents": [
            {},
            {"ph": "X", "name": "CopyHostToDevice", "pid": "1", "tid": "1", "ts": "7739"},
        ]
    }
    reason = _reason(make_trace(rocprof))
    assert reason.startswith("JSON is not a Kineto trace (no 'schemaVersion' key")
    assert reason.endswith("traceEvents[0]: Object missing required field `ph`")
    # A Kineto trace with a bad event is not called something else: only the event is named.
    event = complete_event("op", "cpu_op", 10, 5)
    event["ts"] = "10"
    reason = _reason(make_trace([event]))
    assert reason == "unexpected value at traceEvents[0].ts: Expected `float`, got `str`"


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_a_byte_order_mark_before_the_json_is_skipped(tmp_path: Path, suffix: str) -> None:
    original = gpu_fixture("64_bf16_warm_eager")
    text = gzip.decompress(original.read_bytes())
    path = tmp_path / f"saved_on_windows{suffix}"
    marked = b"\xef\xbb\xbf" + text
    path.write_bytes(gzip.compress(marked) if suffix.endswith(".gz") else marked)
    trace, expected = load_trace(path), load_trace(original)
    assert [(s.name, s.start, s.dur) for s in trace.spans] == [
        (s.name, s.start, s.dur) for s in expected.spans
    ]
    assert trace.devices == expected.devices


@pytest.mark.parametrize(
    ("encoding", "said"),
    [("utf-16", "UTF-16"), ("utf-16-le", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32")],
)
def test_utf16_and_utf32_text_is_named_as_such(tmp_path: Path, encoding: str, said: str) -> None:
    # With a byte-order mark (utf-16, utf-32) or without one (utf-16-le, utf-16-be).
    path = tmp_path / "wide.json"
    path.write_bytes('  {"traceEvents": []}'.encode(encoding))
    with pytest.raises(TraceError, match=f"^.*: {said} text, not the UTF-8 JSON torch.profiler"):
        load_trace(path)


def test_every_chrome_phase_loads(make_trace) -> None:
    events = [{"ph": ph, "name": f"e{ph}", "ts": 1, "pid": 1, "tid": 1} for ph in "BEiIsftCMnbe"]
    trace = load_trace(make_trace([*events, complete_event("op", "cpu_op", 0, 1)]))
    assert [s.name for s in trace.spans] == ["op"]


def test_complete_event_without_ts(make_trace) -> None:
    event = complete_event("op", "cpu_op", 10, 5)
    del event["ts"]
    assert _reason(make_trace([event])) == "complete event 'op' (#0) has no ts or a NaN ts"


def test_negative_duration_is_read_as_zero_and_counted(make_trace) -> None:
    # Kineto before torch 1.13 wrote a negative dur where it recorded no end (pytorch/kineto
    # PR 646): the event is kept, at its start, for no time; the trace is not refused.
    events = [
        complete_event("aten::mm", "cpu_op", 0, 100),
        complete_event("cudaLaunchKernel", "cuda_runtime", 10, -1020),
        complete_event("aten::add", "cpu_op", 200, 10),
    ]
    trace = load_trace(make_trace(events))
    assert [(s.name, s.dur) for s in trace.spans] == [
        ("aten::mm", 100.0),
        ("cudaLaunchKernel", 0.0),
        ("aten::add", 10.0),
    ]
    assert trace.negative_durations == 1
    assert next(trace.ancestors(trace.spans[1])).name == "aten::mm"
    assert load_trace(make_trace(events[:1], name="fine.json")).negative_durations == 0


def test_huge_times_load_unless_a_span_ends_past_the_largest_float(make_trace) -> None:
    # Each time is finite, but their sum is not: that alone refuses nothing.
    huge = [complete_event("a", "cpu_op", 1e308, 1), complete_event("b", "cpu_op", 1.5e308, 1)]
    assert [s.name for s in load_trace(make_trace(huge)).spans] == ["a", "b"]
    past = [complete_event("op", "cpu_op", 1.5e308, 1e308)]
    assert _reason(make_trace(past)) == (
        "complete event 'op' (#0) ends past the largest time a float can hold"
    )


def test_correlation_of_the_wrong_type_links_nothing_and_refuses_nothing(make_trace) -> None:
    event = complete_event("cudaLaunchKernel", "cuda_runtime", 0, 1, correlation="seven")
    (call,) = load_trace(make_trace([event])).runtime_calls
    assert call.correlation is None and not call.is_launch


def test_trace_error_pickles() -> None:
    err = pickle.loads(pickle.dumps(TraceError("a.json", "file is empty")))
    assert (err.path, err.reason, str(err)) == (
        Path("a.json"),
        "file is empty",
        "a.json: file is empty",
    )
    assert not err.not_a_trace
    other = pickle.loads(pickle.dumps(TraceError("b.json", "no traceEvents", not_a_trace=True)))
    assert (other.path, other.reason, other.not_a_trace) == (Path("b.json"), "no traceEvents", True)


@pytest.mark.parametrize(
    ("document", "not_a_trace"),
    [
        ({"schema": "1.1.1-chakra.0.0.4", "nodes": []}, True),  # an execution trace
        (b'[{"ph": "X", "name": "a", "ts": 0, "dur": 1}]', True),  # a Chrome array
        ({"traceEvents": [{"ph": "X", "ts": "1"}]}, True),  # another tool's Chrome JSON
        ({"schemaVersion": 1, "traceEvents": [{"ph": "X", "ts": "1"}]}, False),  # a damaged one
        (b'{"traceEvents": [', False),  # cut short
    ],
)
def test_a_trace_error_says_whether_the_file_is_no_trace_at_all(
    make_trace, document, not_a_trace
) -> None:
    with pytest.raises(TraceError) as raised:
        load_trace(make_trace(document, name="x.json"))
    assert raised.value.not_a_trace is not_a_trace


def test_flow_pair_helper_matches_kineto_shape() -> None:
    start, end = flow_pair(3, 1.0, 2.0)
    assert (start["ph"], end["ph"], end["bp"]) == ("s", "f", "e")


# -- metadata of unexpected shape is tolerated, not fatal -----------------------------------


@pytest.mark.parametrize(
    ("properties", "name", "compute_units"),
    [
        ("GPU", "unknown", None),
        ([1, "x"], "unknown", None),
        ([{"id": "0", "name": "G", "numSms": "132", "computeMajor": None}], "G", 132),
    ],
)
def test_device_properties_of_unexpected_shape(make_trace, properties, name, compute_units) -> None:
    trace = load_trace(make_trace(minimal_gpu_events(), deviceProperties=properties))
    assert trace.has_gpu
    (device,) = trace.devices  # the GPU of the work, described or not
    assert (device.id, device.name, device.compute_units) == (0, name, compute_units)
    assert device.compute_capability is None and device.total_memory_bytes is None


@pytest.mark.parametrize(
    ("written", "expected"),
    [(12040, "12.4"), (12080, "12.8"), ("12.4", "12.4"), ("", None), (1.5, None)],
)
def test_cuda_versions(make_trace, written, expected) -> None:
    trace = load_trace(make_trace(minimal_gpu_events(), cuda_runtime_version=written))
    assert trace.cuda_runtime_version == expected


def test_args_that_are_not_an_object_read_as_empty(make_trace) -> None:
    event = complete_event("op", "cpu_op", 0, 1)
    event["args"] = [1, 2]
    span = load_trace(make_trace([event])).spans[0]
    assert span.args == {} and span.external_id is None


def test_nan_written_by_python_json_in_args(make_trace) -> None:
    events = minimal_gpu_events()
    events[8]["args"]["memory bandwidth (GB/s)"] = float("nan")  # json.dumps writes NaN
    copy = load_trace(make_trace(events)).find(cat="gpu_memcpy")[0]
    assert copy.args["memory bandwidth (GB/s)"] == "NaN"


def test_invalid_utf8_in_a_name_is_replaced(make_trace) -> None:
    text = json.dumps(trace_document([complete_event("caf-", "cpu_op", 0, 1)])).encode()
    path = make_trace(text.replace(b"caf-", b"caf\xe9"))
    assert load_trace(path).spans[0].name == "caf\ufffd"


def test_na_inside_a_string_is_left_alone(make_trace) -> None:
    events = [complete_event("ratio: N/A, maybe", "cpu_op", 0, 1, note="N/A")]
    text = json.dumps(trace_document(events)).replace('"note": "N/A"', '"note": "N/A", "x": N/A')
    trace = load_trace(make_trace(text.encode()))
    assert trace.spans[0].args == {"note": "N/A", "x": "N/A"}
    assert trace.spans[0].name == "ratio: N/A, maybe"


def test_invalid_utf8_inside_args_is_caught_at_load(make_trace) -> None:
    # args stay undecoded at load time; their bytes must still be valid by the time they are.
    events = [complete_event("op", "cpu_op", 0, 1, note="caf-")]
    text = json.dumps(trace_document(events)).encode().replace(b"caf-", b"caf\xe9")
    span = load_trace(make_trace(text)).spans[0]
    assert span.args == {"note": "caf\ufffd"}


def test_gzip_with_several_members(tmp_path: Path) -> None:
    text = json.dumps(trace_document(minimal_gpu_events())).encode()
    path = tmp_path / "multi.json.gz"
    path.write_bytes(gzip.compress(text[:100]) + gzip.compress(text[100:]))
    assert len(load_trace(path).kernels) == 1


def test_gzip_with_several_highly_compressed_members(tmp_path: Path) -> None:
    # Two members of a trace that compresses over 16:1: the first ends inside a 64 KB piece
    # of input whose output passed 1 MB, where the reader once looped for ever. In a child
    # process, so that the old loop fails on its time limit instead of hanging the tests.
    events = [complete_event("aten::add", "cpu_op", 10.0 * i, 5) for i in range(30_000)]
    text = json.dumps(trace_document(events)).encode()
    half = len(text) // 2
    path = tmp_path / "two_members.json.gz"
    path.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    assert len(text) > 16 * path.stat().st_size  # the ratio that made zlib hold input back
    code = f"from profiling_utils import load_trace; print(len(load_trace({str(path)!r}).spans))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "30000"


def test_gzip_with_a_corrupt_size_trailer(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(json.dumps(trace_document(minimal_gpu_events())).encode()))
    data[-4:] = (2**32 - 1).to_bytes(4, "little")  # ISIZE no longer matches
    path = tmp_path / "odd.json.gz"
    path.write_bytes(bytes(data))
    assert "gzip" in _reason(path)


# -- memory-safe reading ----------------------------------------------------------------------


def _padded_trace(padding: int) -> bytes:
    """A valid trace followed by ``padding`` bytes of whitespace (what a bomb is made of)."""
    return json.dumps(trace_document(minimal_gpu_events())).encode() + b" " * padding


def test_gzip_expanding_past_the_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "bomb.json.gz", _padded_trace(4_000_000))
    assert path.stat().st_size < 20_000  # small on disk, 3.8 MiB once expanded
    with pytest.raises(TraceError) as info:
        load_trace(path, max_bytes=1_000_000)
    reason = info.value.reason
    assert "\n" not in reason
    assert reason.startswith(
        "the gzip data expands to more than the 977 KiB (1,000,000 bytes) allowed (the limit given)"
    )
    assert MAX_TRACE_BYTES_ENV in reason
    # The same file loads when the limit allows it.
    assert len(load_trace(path, max_bytes=5_000_000).kernels) == 1


def test_gzip_trailer_that_understates_the_size_does_not_get_past_the_limit(
    tmp_path: Path,
) -> None:
    data = bytearray(gzip.compress(_padded_trace(4_000_000)))
    data[-4:] = (1000).to_bytes(4, "little")  # claims 1000 bytes
    path = tmp_path / "liar.json.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="expands to more than"):
        read_trace_bytes(path, max_bytes=1_000_000)


def test_plain_json_larger_than_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "big.json", _padded_trace(2_000_000))
    with pytest.raises(
        TraceError,
        match=r"the file holds 1\.9\d MiB, more than the 977 KiB \(1,000,000 bytes\) allowed",
    ):
        read_trace_bytes(path, max_bytes=1_000_000)
    assert len(read_trace_bytes(path, max_bytes=3_000_000)) == path.stat().st_size


def test_environment_variable_sets_the_limit(tmp_path: Path, monkeypatch) -> None:
    path = write_trace(tmp_path / "bomb.json.gz", _padded_trace(2_000_000))
    monkeypatch.setenv(MAX_TRACE_BYTES_ENV, "1000000")
    assert default_max_bytes() == 1_000_000
    with pytest.raises(
        TraceError, match=rf"than the 977 KiB \(1,000,000 bytes\) allowed \({MAX_TRACE_BYTES_ENV}\)"
    ):
        load_trace(path)
    assert load_trace(path, max_bytes=3_000_000).has_gpu  # the argument wins
    monkeypatch.setenv(MAX_TRACE_BYTES_ENV, "3000000")
    assert load_trace(path).has_gpu


@pytest.mark.parametrize("written", ["lots", "-5", "0", "1e9", "²"])
def test_environment_variable_must_be_a_byte_count(monkeypatch, written: str) -> None:
    monkeypatch.setenv(MAX_TRACE_BYTES_ENV, written)
    with pytest.raises(ValueError, match=MAX_TRACE_BYTES_ENV):
        default_max_bytes()


def test_default_limit_is_a_third_of_the_available_memory(monkeypatch) -> None:
    monkeypatch.delenv(MAX_TRACE_BYTES_ENV, raising=False)
    available = None
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    if available is None:
        pytest.skip("no MemAvailable on this system")
    # Memory moves between the two reads: allow a few percent.
    assert default_max_bytes() == pytest.approx(available / 3, rel=0.05)


# -- files that are not Kineto traces ---------------------------------------------------------


def test_execution_trace_is_refused_as_not_a_trace() -> None:
    path = FOREIGN / "hta__execution_trace_benchmark_simple_add_et.json.gz"
    reason = _reason(path)
    assert reason.startswith("JSON is not a trace: no 'traceEvents' key")
    assert "nodes" in reason  # names what the file holds instead


# -- torch ~1.8 top level ---------------------------------------------------------------------


def test_legacy_compute_properties_describe_the_gpus() -> None:
    path = FOREIGN / "kineto__tb_plugin_test_gpu_metrics_input.790be85.json.gz"
    written = json.loads(gzip.decompress(path.read_bytes()))["computeProperties"]
    trace = load_trace(path)
    assert [d.id for d in trace.devices] == [p["id"] for p in written]
    device = trace.devices[0]
    assert device.name == written[0]["name"]
    assert device.compute_units == written[0]["multiProcessorCount"]
    assert device.compute_capability == (written[0]["major"], written[0]["minor"])
    assert (device.vendor, device.arch) == ("nvidia", f"sm_{written[0]['major']}0")


def test_device_properties_win_over_compute_properties(make_trace) -> None:
    legacy = [{"id": 0, "name": "old", "major": 7, "minor": 0, "multiProcessorCount": 80}]
    trace = load_trace(make_trace(minimal_gpu_events(), computeProperties=legacy))
    assert [d.name for d in trace.devices] == ["NVIDIA H100 80GB HBM3"]


# Kineto writes names as they are: a Windows path's backslashes (with_stack's Python frames,
# torch 2.0 on Windows), quotes in the file name of code torch.compile generates, a tab in a
# record_function label, a frame named after a source line with quotes and a line break in it
# (pytorch/pytorch#113001, torch 2.0.1). Each makes the JSON invalid; the file loads with the
# names as written.
UNESCAPED_NAMES = [
    "C:\\Users\\me\\torch\\nn\\modules\\module.py(1501): _call_impl",
    '{"device": "cpu", "dtype": "float32"}(12): run',
    'C:\\Users\\"quoted"\\',
    "label\twith a tab",
    'lib = Library("test", "IMPL")\n(1): <module>',
    "two\nlines",
    # Backslashes in a name whose quotes are raw are themselves: nothing was escaped.
    'print("done\\n")(3): <module>',
    's = "a\\"b"(3): <module>',
    "x = a + \\",  # a line continuation: its backslash met the closing quote
    "a\rb",  # a lone CR, not a Windows line break
    'f({"a": 1}, {"b": 2})(3): run',
]


@pytest.mark.parametrize("written", UNESCAPED_NAMES)
def test_names_kineto_wrote_unescaped_load_as_written(tmp_path: Path, written: str) -> None:
    original = gpu_fixture("64_bf16_warm_eager")
    text = gzip.decompress(original.read_bytes())
    label = b'"name": "matmul_add", "pid": '
    assert text.count(label) > 1  # a label of every step, on the host and the GPU: all renamed
    broken = text.replace(label, label.replace(b"matmul_add", written.encode()))
    with pytest.raises(ValueError):
        json.loads(broken)
    path = tmp_path / "unescaped.json"
    path.write_bytes(broken)
    trace, before = load_trace(path), load_trace(original)
    renamed = [span for span in trace.spans if span.name == written]
    assert len(renamed) == text.count(label)
    assert [(s.name, s.start, s.dur) for s in trace.spans if s.name != written] == [
        (s.name, s.start, s.dur) for s in before.spans if s.name != "matmul_add"
    ]

    # Messages show a line break or tab as \n or \t where they cut a name to fit.
    def shown(message: str) -> str:
        return cut(message, len(message) + 10)

    assert [shown(f.message) for f in diagnose(trace)] == [
        shown(f.message.replace("matmul_add", written)) for f in diagnose(before)
    ]


def test_a_valid_escape_in_a_file_repaired_for_another_reason_is_kept(make_trace) -> None:
    # A writer that escapes (json.dumps): its escapes stay what they mean when a bare N/A
    # elsewhere sends the file through the repair.
    events = minimal_gpu_events()
    events[2]["name"] = 'aten::mm "x"\\y\tz'
    text = json.dumps(trace_document(events)).replace('"bytes": 4096', '"bytes": N/A')
    raw = load_raw_trace(make_trace(text.encode(), name="escaped.json"))
    assert raw.repaired
    assert 'aten::mm "x"\\y\tz' in [e.name for e in raw.events if isinstance(e, Event)]


def test_a_line_break_in_a_name_written_on_windows_loads_as_the_name_held(tmp_path: Path) -> None:
    # A text-mode stream on Windows writes every newline as CR LF, the name's included.
    text = gzip.decompress(gpu_fixture("64_bf16_warm_eager").read_bytes())
    label = b'"name": "matmul_add", "pid": '
    broken = text.replace(label, label.replace(b"matmul_add", b"two\nlines"))
    path = tmp_path / "windows.json"
    path.write_bytes(broken.replace(b"\n", b"\r\n"))
    trace = load_trace(path)
    assert sum(span.name == "two\nlines" for span in trace.spans) == text.count(label)


def test_a_file_on_one_line_with_raw_line_breaks_in_names_loads(make_trace) -> None:
    events = minimal_gpu_events()
    events[2]["name"] = "aten::mm\tfrom\r\na frame"
    text = json.dumps(trace_document(events))
    assert "\n" not in text  # json.dumps escapes them: write them raw, as a careless writer does
    broken = text.replace("\\t", "\t").replace("\\r", "\r").replace("\\n", "\n")
    raw = load_raw_trace(make_trace(broken.encode(), name="one_line.json"))
    assert raw.repaired
    assert "aten::mm\tfrom\r\na frame" in [e.name for e in raw.events if isinstance(e, Event)]


def test_a_file_on_one_line_is_repaired_without_reading_names_kineto_style(make_trace) -> None:
    # One line, a bare NaN sends it through the repair, and the keys come in Kineto's order
    # ("cat", "name", "pid", "tid"): names are left as they are, and every span is read.
    events = [complete_event(f"op{i}", "cpu_op", i, 1) for i in range(2000)]
    text = json.dumps(trace_document(events)).replace('"args": {}', '"args": {"x": NaN}', 1)
    assert text.count("\n") == 0 and '"cat": "cpu_op", "name": "op0", "pid"' in text
    trace = load_trace(make_trace(text.encode(), name="one_line.json"))
    assert [span.name for span in trace.spans] == [f"op{i}" for i in range(2000)]


def test_a_name_a_newer_kineto_escaped_is_kept_in_a_file_repaired_for_another_reason(
    tmp_path: Path,
) -> None:
    # kineto#1459 escapes the quotes in names: such a name has no raw quote, and stays as
    # escaped when a bare NaN elsewhere sends the file through the repair.
    text = gzip.decompress(gpu_fixture("64_bf16_warm_eager").read_bytes())
    label = b'"name": "matmul_add", "pid": '
    broken = text.replace(label, label.replace(b"matmul_add", b'f(\\"x\\", \\\\)'))
    broken = broken.replace(b'"args": {', b'"args": {"odd": NaN, ', 1)
    path = tmp_path / "escaped.json"
    path.write_bytes(broken)
    raw = load_raw_trace(path)
    assert raw.repaired
    names = [e.name for e in raw.events if isinstance(e, Event)]
    assert names.count('f("x", \\)') == text.count(label)
