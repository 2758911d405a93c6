"""The roofline view: FLOP and byte formulas on synthetic ops, and the recorded H100 traces."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    DEVICE_PROPERTIES,
    FIXTURES,
    complete_event,
    fixture_document,
    flow_pair,
    gpu_fixture,
    run_cli,
    write_trace,
)

from profiling_utils import load_trace, roofline
from profiling_utils.datasheet import datasheet_peak
from profiling_utils.kernels import fp32_math
from profiling_utils.roofline import RooflineEntry

BF16, FP32 = "c10::BFloat16", "float"
H100 = "NVIDIA H100 80GB HBM3"


def op_events(
    name: str,
    dims: list[Any],
    types: list[str],
    concrete: list[str] | None = None,
    *,
    kernel_us: float = 10.0,
    wrappers: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """One CPU op recording ``dims``/``types`` (inside ``wrappers``, outermost first) that
    launches one kernel of ``kernel_us`` µs on GPU 0."""
    shapes: dict[str, Any] = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        shapes["Concrete Inputs"] = concrete
    events = [
        complete_event(outer, "cpu_op", 100 + i, 100 - 2 * i, External_id=10 + i, **shapes)
        for i, outer in enumerate(wrappers)
    ]
    events += [
        complete_event(name, "cpu_op", 120, 40, External_id=3, **shapes),
        complete_event("cudaLaunchKernel", "cuda_runtime", 130, 5, External_id=3, correlation=7),
        complete_event("kernel", "kernel", 140, kernel_us, pid=0, tid=7, correlation=7,
                       device=0, stream=7),
        *flow_pair(7, 130, 140),
    ]  # fmt: skip
    return events


def only_entry(path: Path) -> RooflineEntry:
    view = roofline(load_trace(path))
    assert view.reason is None
    (entry,) = view.entries
    return entry


@pytest.fixture
def entry_of(make_trace: Callable[..., Path]) -> Callable[..., RooflineEntry]:
    """``entry_of(name, dims, types, concrete)``: the one roofline entry of that op."""

    def make(*args: Any, **kwargs: Any) -> RooflineEntry:
        return only_entry(make_trace(op_events(*args, **kwargs)))

    return make


def test_mm_counts_2mnk_and_reads_both_matrices_writes_the_product(entry_of) -> None:
    entry = entry_of("aten::mm", [[64, 32], [32, 16]], [BF16, BF16], kernel_us=2.0)
    assert entry.kind == "gemm"
    assert entry.flops == 2 * 64 * 16 * 32
    assert entry.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 2
    assert entry.gpu_us == 2.0 and entry.gpu_activities == 1
    assert entry.tflops == pytest.approx(entry.flops / 2e-6 / 1e12)
    assert entry.gb_s == pytest.approx(entry.bytes / 2e-6 / 1e9)
    assert entry.intensity == pytest.approx(entry.flops / entry.bytes)


@pytest.mark.parametrize(
    ("name", "dims", "flops"),
    [
        ("aten::addmm", [[16], [64, 32], [32, 16], [], []], 2 * 64 * 16 * 32),
        ("aten::bmm", [[8, 64, 32], [8, 32, 16]], 2 * 8 * 64 * 16 * 32),
        ("aten::baddbmm", [[8, 64, 16], [8, 64, 32], [8, 32, 16], [], []], 2 * 8 * 64 * 16 * 32),
        ("aten::matmul", [[4, 1, 64, 32], [3, 32, 16]], 2 * 12 * 64 * 16 * 32),
        ("aten::matmul", [[32], [32, 16]], 2 * 16 * 32),
        ("aten::linear", [[8, 64, 32], [16, 32], [16]], 2 * 8 * 64 * 16 * 32),
    ],
)
def test_gemm_flops_include_the_batch(entry_of, name: str, dims: list[Any], flops: int) -> None:
    types = [BF16 if d else "Scalar" for d in dims]
    entry = entry_of(name, dims, types)
    assert (entry.kind, entry.flops) == ("gemm", flops)


def test_linear_writes_input_rows_by_weight_rows(entry_of) -> None:
    entry = entry_of("aten::linear", [[8, 64, 32], [16, 32], [16]], [FP32] * 3)
    assert entry.bytes == (8 * 64 * 32 + 16 * 32 + 16 + 8 * 64 * 16) * 4


def conv_args(
    stride: int, padding: int, groups: int, transposed: bool = False, output_padding: int = 0
) -> list[str]:
    """``Concrete Inputs`` of ``aten::convolution`` with these settings, 2-D."""
    return ["", "", "", f"[{stride}, {stride}]", f"[{padding}, {padding}]", "[1, 1]",
            str(transposed), f"[{output_padding}, {output_padding}]", str(groups)]  # fmt: skip


CONV_TYPES = [BF16, BF16, BF16, *["ScalarList"] * 3, "Scalar", "ScalarList", "Scalar"]


@pytest.mark.parametrize(
    ("stride", "padding", "groups", "x", "w", "out"),
    [
        (1, 1, 1, [2, 3, 32, 32], [8, 3, 3, 3], [2, 8, 32, 32]),
        (2, 1, 1, [2, 3, 32, 32], [8, 3, 3, 3], [2, 8, 16, 16]),
        (1, 0, 4, [2, 8, 16, 16], [8, 2, 3, 3], [2, 8, 14, 14]),
    ],
)
def test_convolution_derives_its_output_from_stride_padding_and_groups(
    entry_of, stride: int, padding: int, groups: int, x: list[int], w: list[int], out: list[int]
) -> None:
    dims = [x, w, [8], [], [], [], [], [], []]
    entry = entry_of("aten::convolution", dims, CONV_TYPES, conv_args(stride, padding, groups))
    n, c_out, h_out, w_out = out
    c_in, kh, kw = x[1], w[2], w[3]
    assert entry.kind == "convolution"
    assert entry.flops == 2 * n * c_out * h_out * w_out * (c_in // groups) * kh * kw
    assert entry.bytes == (math.prod(x) + math.prod(w) + 8 + math.prod(out)) * 2


def test_transposed_convolution_counts_per_input_element(entry_of) -> None:
    # weight (C_in, C_out/groups, kH, kW); output (16 - 1) * 2 - 2 * 1 + (3 - 1) + 1 + 1 = 32
    x, w = [2, 8, 16, 16], [8, 4, 3, 3]
    dims = [x, w, [4], [], [], [], [], [], []]
    concrete = conv_args(2, 1, 1, transposed=True, output_padding=1)
    entry = entry_of("aten::convolution", dims, CONV_TYPES, concrete)
    assert entry.flops == 2 * 2 * 8 * 16 * 16 * 4 * 3 * 3
    assert entry.bytes == (math.prod(x) + math.prod(w) + 4 + 2 * 4 * 32 * 32) * 2


@pytest.mark.parametrize(
    ("mask", "gradients"), [("[True, True, True]", 2), ("[False, True, True]", 1)]
)
def test_convolution_backward_counts_a_forward_per_gradient(
    entry_of, mask: str, gradients: int
) -> None:
    grad, x, w = [2, 8, 16, 16], [2, 3, 32, 32], [8, 3, 3, 3]
    dims = [grad, x, w, [], [], [], [], [], [], [], []]
    types = [BF16] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    concrete = ["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", mask]
    entry = entry_of("aten::convolution_backward", dims, types, concrete)
    forward = 2 * 2 * 8 * 16 * 16 * 3 * 3 * 3
    assert entry.flops == forward * gradients
    written = (gradients == 2) * math.prod(x) + math.prod(w) + 8
    assert entry.bytes == (math.prod(grad) + math.prod(x) + math.prod(w) + written) * 2


def test_cudnn_convolution_reads_its_own_argument_order(entry_of) -> None:
    # (self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    dims = [[2, 3, 32, 32], [8, 3, 3, 3], [], [], [], [], [], [], []]
    types = [BF16, BF16, "ScalarList", "ScalarList", "ScalarList", *["Scalar"] * 4]
    concrete = ["", "", "[0, 0]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"]
    entry = entry_of("aten::cudnn_convolution", dims, types, concrete)
    assert entry.flops == 2 * 2 * 8 * 15 * 15 * 3 * 3 * 3


def test_convolution_without_its_settings_says_it_cannot_count(entry_of) -> None:
    dims = [[2, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], [], [], []]
    entry = entry_of("aten::convolution", dims, CONV_TYPES)  # no Concrete Inputs
    assert (entry.kind, entry.flops, entry.bytes) == ("convolution", None, None)
    assert "stride is not recorded" in entry.note
    assert entry.bound == "unknown" and entry.peak_share is None


def test_a_stride_of_zero_says_it_cannot_count(entry_of) -> None:
    dims = [[2, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], [], [], []]
    entry = entry_of("aten::convolution", dims, CONV_TYPES, conv_args(0, 1, 1))
    assert (entry.kind, entry.flops, entry.bytes) == ("convolution", None, None)
    assert entry.note == "the recorded stride [0, 0] is not positive"


def attention_args(name: str, causal: str) -> tuple[list[Any], list[str], list[str]]:
    """Dims, types and concrete inputs of a cuDNN attention forward with (B, H, L, D) =
    (2, 4, 128, 64) and ``is_causal`` as given."""
    qkv = [[2, 4, 128, 64]] * 3
    dims = [*qkv, *[[]] * 10]
    types = [BF16] * 3 + [""] * 3 + ["Scalar"] * 6 + [""]
    concrete = ["", "", "", "", "", "", "128", "128", "True", "0.0", causal, "False", ""]
    return dims, types, concrete


def test_attention_counts_4_b_h_lq_lk_d_and_halves_when_causal(entry_of) -> None:
    full = entry_of("aten::_cudnn_attention_forward", *attention_args("f", "False"))
    causal = entry_of("aten::_cudnn_attention_forward", *attention_args("f", "True"))
    assert full.kind == "attention"
    assert full.flops == 4 * 2 * 4 * 128 * 128 * 64
    assert full.bytes == 4 * (2 * 4 * 128 * 64) * 2  # q, k, v read; the output written
    assert causal.flops == full.flops // 2 and causal.note == "causal: halved"


def test_attention_without_is_causal_says_what_it_assumed(entry_of) -> None:
    dims, types, _ = attention_args("f", "False")
    entry = entry_of("aten::_cudnn_attention_forward", dims, types)
    assert entry.flops == 4 * 2 * 4 * 128 * 128 * 64
    assert "is_causal not recorded" in entry.note


def test_flash_attention_reads_batch_length_heads_layout(entry_of) -> None:
    # _flash_attention_forward takes (B, L, H, D); Lq = 128, Lk = 256
    dims = [[2, 128, 4, 64], [2, 256, 4, 64], [2, 256, 4, 64], [], [], [], [], [], [], []]
    types = [BF16] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]
    concrete = ["", "", "", "", "", "128", "256", "0.0", "False", "False"]
    entry = entry_of("aten::_flash_attention_forward", dims, types, concrete)
    assert entry.flops == 4 * 2 * 4 * 128 * 256 * 64


def test_attention_of_empty_heads_counts_zero(entry_of) -> None:
    # A head dimension of 0 (an empty tensor) is nothing to compute, not a division by zero.
    dims, types, concrete = attention_args("f", "False")
    dims = [[2, 4, 128, 0]] * 3 + dims[3:]
    entry = entry_of("aten::_cudnn_attention_forward", dims, types, concrete)
    assert (entry.flops, entry.bytes, entry.intensity) == (0, 0, None)


def test_attention_backward_counts_twice_the_forward(entry_of) -> None:
    qkv = [[2, 4, 128, 64]] * 5
    dims = [*qkv, [2, 4, 128, 1], *[[]] * 10]
    types = [BF16] * 5 + [FP32, "long int", "long int"] + [""] * 3 + ["Scalar"] * 4 + [""]
    concrete = [""] * 11 + ["128", "128", "0.0", "False", ""]
    entry = entry_of("aten::_cudnn_attention_backward", dims, types, concrete)
    assert entry.flops == 2 * 4 * 2 * 4 * 128 * 128 * 64


def test_elementwise_ops_move_bytes_and_are_memory_bound(entry_of) -> None:
    add = entry_of("aten::add", [[16, 1024], [1024], []], [FP32, FP32, "Scalar"], kernel_us=1.0)
    assert (add.kind, add.flops) == ("elementwise", None)
    assert add.bytes == (16 * 1024 + 1024 + 16 * 1024) * 4
    assert add.bound == "memory"
    assert add.peak == datasheet_peak(H100, "memory")
    assert add.peak_share == pytest.approx(add.bytes / 1e-6 / 1e9 / 3350.0)
    # copy_ overwrites self (bf16) from src (fp32): self is written, not read
    copy = entry_of("aten::copy_", [[768], [768], []], [BF16, FP32, "Scalar"])
    assert copy.bytes == 768 * 2 + 768 * 4
    # add_ reads self and other, and writes self
    add_ = entry_of("aten::add_", [[16, 768], [768], []], [BF16, BF16, "Scalar"])
    assert add_.bytes == (16 * 768 + 768 + 16 * 768) * 2


def test_an_out_overload_writes_its_last_argument_rather_than_reading_it(entry_of) -> None:
    # HTA's negative_queue trace: aten::mul(self, 2.0, out) on [8192, 11192] fp32, which read
    # as three tensors of traffic put it at 128% of the A100's bandwidth.
    size = 8192 * 11192 * 4
    mul_out = entry_of("aten::mul", [[8192, 11192], [], [8192, 11192]], [FP32, "double", FP32])
    assert mul_out.bytes == 2 * size + 8  # self read (and the 0-dim double), out written
    three = entry_of("aten::mul", [[64], [64], [64]], [FP32] * 3)  # mul.out(self, other, out)
    assert three.bytes == 3 * 64 * 4
    # Functional forms keep every tensor as a read: add's third argument is alpha, where's
    # three tensors are all operands, and div's third a rounding mode.
    add = entry_of("aten::add", [[64], [64], []], [FP32, FP32, "Scalar"])
    assert add.bytes == 3 * 64 * 4
    where = entry_of("aten::where", [[64], [64], [64]], ["bool", FP32, FP32])
    assert where.bytes == 64 + 3 * 64 * 4
    div = entry_of("aten::div", [[64], [64], []], [FP32, FP32, "str"])
    assert div.bytes == 3 * 64 * 4
    add_out = entry_of("aten::add", [[64], [64], [], [64]], [FP32, FP32, "Scalar", FP32])
    assert add_out.bytes == 3 * 64 * 4


def test_bound_is_decided_against_the_datasheet_ridge(entry_of) -> None:
    ridge = 989.4e12 / 3350e9  # H100 SXM5, dense bf16 over HBM3
    small = entry_of("aten::mm", [[64, 64], [64, 64]], [BF16, BF16])
    large = entry_of("aten::mm", [[8192, 8192], [8192, 8192]], [BF16, BF16], kernel_us=2000.0)
    assert small.ridge == pytest.approx(ridge) == large.ridge
    assert small.intensity < ridge and small.bound == "memory"
    assert small.peak_share == pytest.approx(small.gb_s / 3350.0)
    assert large.intensity > ridge and large.bound == "compute"
    assert large.peak_share == pytest.approx(large.tflops / 989.4)
    assert large.compute_peak == datasheet_peak(H100, "bf16")


def test_fp32_is_held_to_the_plain_fp32_peak(entry_of) -> None:
    entry = entry_of("aten::mm", [[64, 64], [64, 64]], [FP32, FP32])
    assert entry.compute_peak == datasheet_peak(H100, "fp32")


def test_an_fp32_gemm_on_cdna2_is_held_to_its_matrix_core_peak(make_trace) -> None:
    # rocBLAS runs an MI250X's fp32 GEMMs on its matrix cores (95.7 TFLOP/s a card, 47.9 on
    # the vector units); an fp32 elementwise op keeps the vector figure.
    properties = [{**DEVICE_PROPERTIES[0], "name": "AMD Instinct MI250X"}]
    mm = only_entry(
        make_trace(op_events("aten::mm", [[64, 64], [64, 64]], [FP32, FP32]),
                   name="mm.json", deviceProperties=properties)
    )  # fmt: skip
    add = only_entry(
        make_trace(op_events("aten::add", [[64, 64], [64, 64], []], [FP32, FP32, "Scalar"]),
                   name="add.json", deviceProperties=properties)
    )  # fmt: skip
    assert mm.compute_peak == datasheet_peak("AMD Instinct MI250X", "fp32_matrix")
    assert add.compute_peak == datasheet_peak("AMD Instinct MI250X", "fp32")


def test_a_device_not_in_the_table_has_no_bound_and_no_share(make_trace) -> None:
    properties = [{**DEVICE_PROPERTIES[0], "name": "Mystery Accelerator 9000"}]
    path = make_trace(
        op_events("aten::mm", [[64, 32], [32, 16]], [BF16, BF16]), deviceProperties=properties
    )
    entry = only_entry(path)
    assert entry.device == "Mystery Accelerator 9000"
    assert entry.flops == 2 * 64 * 16 * 32 and entry.tflops is not None
    assert (entry.ridge, entry.bound, entry.peak, entry.peak_share) == (None, "unknown", None, None)


def test_only_the_innermost_op_counts(make_trace) -> None:
    dims, types = [[16], [64, 32], [32, 16], [], []], [BF16] * 3 + ["Scalar"] * 2
    path = make_trace(op_events("aten::addmm", dims, types, wrappers=("aten::linear",)))
    view = roofline(load_trace(path))
    assert [entry.name for entry in view.entries] == ["aten::addmm"]


def test_no_shapes_recorded_gives_no_entries_and_says_why(make_trace) -> None:
    events = op_events("aten::mm", [[64, 32], [32, 16]], [BF16, BF16])
    for event in events:
        event.get("args", {}).pop("Input Dims", None)
    view = roofline(load_trace(make_trace(events)))
    assert view.entries == []
    assert "record_shapes=True" in view.reason


def test_sizes_without_dtypes_are_named_as_such(make_trace) -> None:
    # torch ~1.9 wrote "Input dims" and an empty "Input type": shapes were recorded, so the
    # reason must not ask for record_shapes=True.
    events = op_events("aten::mm", [[64, 32], [32, 16]], [])
    for event in events:
        args = event.get("args", {})
        if "Input Dims" in args:
            args["Input dims"] = args.pop("Input Dims")
    view = roofline(load_trace(make_trace(events)))
    assert view.entries == []
    assert "sizes but not their dtypes" in view.reason and "record_shapes" not in view.reason


def test_a_dtype_of_unknown_size_is_named_not_the_sizes(entry_of) -> None:
    # The sizes are recorded, and the note had said they were not (asking, in effect, for
    # record_shapes=True).
    entry = entry_of("aten::mm", [[64, 32], [32, 16]], ["c10::Float4_e2m1fn_x2"] * 2)
    assert (entry.bound, entry.flops) == ("unknown", None)
    assert entry.note == "the size of its dtype 'c10::Float4_e2m1fn_x2' is not known"


@pytest.mark.parametrize("spelled", ["BFloat16", "c10::bfloat16", "bfloat16", "c10::BFloat16"])
def test_a_dtype_is_read_however_a_writer_spells_it(entry_of, spelled: str) -> None:
    # TraceLens's example traces write the ScalarType's name ("BFloat16", "Float"), as
    # collectives' dtype fields do; torch's Input type, the C++ name ("c10::BFloat16").
    entry = entry_of("aten::mm", [[64, 32], [32, 16]], [spelled, spelled])
    assert entry.flops == 2 * 64 * 32 * 16
    assert entry.bytes == 2 * (64 * 32 + 32 * 16 + 64 * 16)
    entry = entry_of("aten::mm", [[64, 32], []], [BF16, ""])
    assert entry.note == "the matrices' sizes are not recorded"


def test_a_cpu_only_trace_says_there_is_no_gpu_work(make_trace) -> None:
    path = make_trace([complete_event("aten::mm", "cpu_op", 0, 10)], deviceProperties=None)
    view = roofline(load_trace(path))
    assert view.entries == [] and "no GPU work" in view.reason


# -- the recorded H100 trace: a tiny transformer's training step, autocast bf16 ----------------

TRANSFORMER = "train_tiny_transformer_a3"


@pytest.fixture(scope="module")
def transformer_view():
    trace = load_trace(gpu_fixture(TRANSFORMER))
    return trace, roofline(trace)


def test_fixture_gemms_count_2mnk_from_their_recorded_dims(transformer_view) -> None:
    _, view = transformer_view
    gemms = [entry for entry in view.entries if entry.kind == "gemm"]
    assert {entry.name for entry in gemms} == {"aten::mm", "aten::addmm"}
    for entry in gemms:
        a, b = entry.input_dims[:2] if entry.name == "aten::mm" else entry.input_dims[1:3]
        (m, k), (k_b, n) = a, b
        assert k == k_b
        assert entry.flops == 2 * m * n * k
        assert entry.input_types[0] == BF16 and entry.compute_peak == datasheet_peak(H100, "bf16")


def test_fixture_bound_is_intensity_against_the_h100_ridge(transformer_view) -> None:
    _, view = transformer_view
    ridge = 989.4e12 / 3350e9
    counted = [e for e in view.entries if e.flops is not None]
    assert counted
    for entry in counted:
        assert entry.device == H100
        assert entry.bound == ("compute" if entry.intensity >= ridge else "memory")
        assert 0 < entry.peak_share < 1


def test_groups_hold_the_calls_of_one_op_with_one_set_of_shapes(transformer_view) -> None:
    _, view = transformer_view
    groups = view.groups(len(view.entries))
    assert sum(len(group.entries) for group in groups) == len(view.entries)
    for group in groups:
        assert len({json.dumps(e.input_dims) for e in group.entries}) == 1
        assert {e.name for e in group.entries} == {group.first.name}
    # aten::mm is called with several shapes: a group for each.
    mm = [group for group in groups if group.first.name == "aten::mm"]
    assert len({json.dumps(group.first.input_dims) for group in mm}) == len(mm) > 1
    counted = [group for group in groups if group.first.flops is not None]
    for group in counted:
        time = sum(entry.gpu_us for entry in group.entries)
        together = group.together
        assert together.tflops == pytest.approx(group.first.flops * len(group.entries) / time / 1e6)
        assert together.bound == group.first.bound
        rate = together.tflops if together.bound == "compute" else together.gb_s
        assert together.peak_share == pytest.approx(rate / group.first.peak.value)
    # Most GPU time first, those with a count before those without.
    top = view.groups(5)
    assert [g.gpu_us for g in top] == sorted((g.gpu_us for g in top), reverse=True)
    assert top[0].gpu_us == max(g.gpu_us for g in groups if g.first.flops or g.first.bytes)


def test_fixture_attention_is_counted_from_its_cudnn_ops(transformer_view) -> None:
    trace, view = transformer_view
    attention = [e for e in view.entries if e.kind == "attention"]
    ops = trace.find("aten::_cudnn_attention_forward") + trace.find(
        "aten::_cudnn_attention_backward"
    )
    assert sorted(e.op.id for e in attention) == sorted(op.id for op in ops)
    forward = next(e for e in attention if e.name == "aten::_cudnn_attention_forward")
    batch, heads, length, head_dim = forward.input_dims[0]
    assert forward.flops == 4 * batch * heads * length * length * head_dim


def test_fixture_gpu_work_is_counted_once(transformer_view) -> None:
    trace, view = transformer_view
    assert len({entry.op.id for entry in view.entries}) == len(view.entries)
    counted = sum(entry.gpu_activities for entry in view.entries)
    assert counted == sum(1 for work in trace.gpu_work if trace.op_of(work) is not None)


def test_summary_json_lists_the_top_entries_by_gpu_time(capsys, transformer_view) -> None:
    status, out, err = run_cli(
        capsys, "summary", str(gpu_fixture(TRANSFORMER)), "--json", "--top", "4"
    )
    assert (status, err) == (0, "")
    section = json.loads(out)["roofline"]
    assert section["reason"] is None and len(section["entries"]) == 4
    _, view = transformer_view
    assert section["gpu_us"] == pytest.approx(sum(entry.gpu_us for entry in view.entries))
    uncounted = sum(entry.gpu_us for entry in view.entries if entry.kind == "other")
    assert section["counted_gpu_us"] == pytest.approx(section["gpu_us"] - uncounted)
    times = [entry["gpu_us"] for entry in section["entries"]]
    assert times == sorted(times, reverse=True)
    assert times == [entry.gpu_us for entry in view.top(4)]
    # Counted calls first: the fixture's busiest calls (the optimizer's _foreach_ ops) have
    # no formula and come after every call with FLOPs or bytes.
    busiest = max(view.entries, key=lambda entry: entry.gpu_us)
    assert busiest.flops is None and busiest.bytes is None
    assert all(entry.flops is not None or entry.bytes is not None for entry in view.top(4))


def test_summary_json_says_why_a_trace_has_no_roofline(capsys, make_trace) -> None:
    events = op_events("aten::mm", [[64, 32], [32, 16]], [BF16, BF16])
    for event in events:
        event.get("args", {}).pop("Input Dims", None)
    status, out, _ = run_cli(capsys, "summary", str(make_trace(events)), "--json")
    section = json.loads(out)["roofline"]
    assert status == 0 and section["entries"] == []
    assert "record_shapes=True" in section["reason"]


def test_h200_fixture_large_gemms_are_compute_bound() -> None:
    # rank 0 of a 2-GPU NCCL run on H200s: 2048³ bf16 GEMMs between the collectives
    trace = load_trace(Path(__file__).parent / "fixtures" / "nccl" / "balanced" / "rank0.json.gz")
    view = roofline(trace)
    gemms = [entry for entry in view.entries if entry.kind == "gemm"]
    assert gemms and all(entry.device == "NVIDIA H200" for entry in gemms)
    ridge = (
        datasheet_peak("NVIDIA H200", "bf16").value / datasheet_peak("NVIDIA H200", "memory").value
    )
    for entry in gemms:
        (m, k), (_, n) = entry.input_dims[:2]
        assert entry.flops == 2 * m * n * k
        assert entry.ridge == pytest.approx(ridge * 1e3)  # TFLOP/s over GB/s, in FLOP/byte
        assert entry.intensity > entry.ridge and entry.bound == "compute"
        assert 0 < entry.peak_share < 1
    communication = [e for e in view.entries if e.note.startswith("communication")]
    assert communication and all(e.flops is None for e in communication)


# -- fused elementwise kernels named by the caller (Part 2's GeGLU MLP on the H100) ------------

MLP = "mlp_64x128x768x3072_bf16_{}"
INTERMEDIATE = 8192 * 3072 * 2  # one [8192, 3072] bf16 tensor: 50.3 MB
FUSED = {"compile": "triton_poi_fused__unsafe_view_gelu_mul_0", "liger": "LigerGELUMulFunction"}


def elementwise_bytes_per_step(variant: str, names: tuple[str, ...] = ()) -> float:
    trace = load_trace(gpu_fixture(MLP.format(variant)))
    view = roofline(trace, elementwise=names)
    moved = sum(e.bytes or 0 for e in view.entries if e.kind == "elementwise")
    return moved / len(trace.steps)


def test_eager_gelu_and_mul_move_five_intermediates() -> None:
    # gelu reads the gate and writes its output; mul reads that and up, writes the product.
    assert elementwise_bytes_per_step("eager") == 5 * INTERMEDIATE


@pytest.mark.parametrize("variant", sorted(FUSED))
def test_a_named_fused_kernel_moves_three(variant: str) -> None:
    # Without its name the fused kernel has no count; named, it reads gate and up and writes
    # the product: the two intermediate transfers fewer that the elementwise-chain rule saves.
    assert elementwise_bytes_per_step(variant) == 0
    assert elementwise_bytes_per_step(variant, (FUSED[variant],)) == 3 * INTERMEDIATE
    trace = load_trace(gpu_fixture(MLP.format(variant)))
    [entry, *_] = [e for e in roofline(trace, elementwise=[FUSED[variant]]).entries
                   if e.name == FUSED[variant]]  # fmt: skip
    assert entry.kind == "elementwise" and entry.bound == "memory"
    assert entry.peak is not None and entry.peak.value == 3350  # H100 SXM HBM3, GB/s
    assert 0.3 < entry.peak_share < 1.0
    assert entry.note.startswith("fused")


def test_the_mlp_gemms_each_do_38_7_gflop() -> None:
    for variant in ("eager", "compile", "liger"):
        trace = load_trace(gpu_fixture(MLP.format(variant)))
        gemms = [e for e in roofline(trace).entries if e.kind == "gemm"]
        assert len(gemms) == 3 * len(trace.steps)
        assert {e.flops for e in gemms} == {2 * 8192 * 768 * 3072}
        assert all(e.bound == "compute" and 0.3 < e.peak_share < 1.0 for e in gemms)


def test_a_gemm_whose_kernel_record_is_missing_gets_no_rate(tmp_path: Path) -> None:
    # The profiler dropped two GEMM kernels' records (their launches kept): each op is left
    # with its 0.8 µs memset, which would "run" 38.7 GFLOP at 50 PFLOP/s.
    document = fixture_document(MLP.format("eager"))
    gemms = [
        e
        for e in document["traceEvents"]
        if e.get("cat") == "kernel" and e["name"].startswith("nvjet")
    ]
    dropped = {id(e) for e in gemms[:2]}
    document["traceEvents"] = [e for e in document["traceEvents"] if id(e) not in dropped]
    trace = load_trace(write_trace(tmp_path / "dropped.json.gz", document))
    entries = [e for e in roofline(trace).entries if e.kind == "gemm"]
    short = [e for e in entries if not e.gpu_records_whole]
    assert len(short) == 2 and len(entries) == 3 * len(trace.steps)
    assert all(e.tflops is None and e.gb_s is None and e.peak_share is None for e in short)
    assert all(e.note.endswith("no GPU record: GPU time a lower bound") for e in short)
    # Every other GEMM keeps its rate, within the peak.
    assert all(0.3 < e.peak_share < 1.0 for e in entries if e.gpu_records_whole)


def test_a_named_op_without_tensor_sizes_has_no_count(make_trace: Callable[..., Path]) -> None:
    path = make_trace(op_events("triton_poi_fused_0", [[]], ["Scalar"]))
    [entry] = roofline(load_trace(path), elementwise=["triton_poi_fused_0"]).entries
    assert entry.kind == "elementwise" and entry.bytes is None


def test_a_host_device_copy_is_not_held_to_the_gpu_memory_bandwidth(make_trace) -> None:
    shapes = {"Input Dims": [[1024, 1024], [1024, 1024], []], "Input type": [BF16, BF16, "Scalar"]}
    events = [
        complete_event("aten::copy_", "cpu_op", 100, 60, External_id=3, **shapes),
        complete_event("cudaMemcpyAsync", "cuda_runtime", 110, 40, External_id=3, correlation=7),
        complete_event("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 120, 30, pid=0, tid=7,
                       correlation=7, device=0, stream=7),
    ]  # fmt: skip
    entry = only_entry(make_trace(events))
    assert entry.memory_peak is None and entry.peak_share is None
    assert entry.note == "host-device copy: the bytes it moves at the host link's rate"
    # 2 MiB crossed the link once in 30 µs: the copy's own rate, not a read and a write.
    assert entry.bytes == 1024 * 1024 * 2
    assert entry.gb_s == pytest.approx(1024 * 1024 * 2 / 30e-6 / 1e9)


def test_an_fp32_convolution_that_ran_tf32_is_held_to_the_tf32_peak() -> None:
    # cuDNN allows TF32 by default: on the H100, the training run's larger convolutions ran
    # tf32 kernels at up to 87 TFLOP/s, 130% of the plain fp32 peak; its first layer's, with
    # three input channels, ran ffma kernels on the CUDA cores.
    trace = load_trace(FIXTURES / "features" / "varying_batch_cudnn_benchmark.json.gz")
    kernels: dict[int, set[str | None]] = {}
    for work in trace.kernels:
        op = trace.op_of(work)
        if op is not None:
            kernels.setdefault(op.id, set()).add(fp32_math(work.name))
    convolutions = [entry for entry in roofline(trace).entries if entry.kind == "convolution"]
    figures = set()
    for entry in convolutions:
        said = kernels[entry.op.id] - {None}
        figure = "tf32" if said == {"tf32"} else "fp32"
        assert entry.input_types[0] == FP32
        assert entry.compute_peak == datasheet_peak(H100, figure), said
        assert 0 < entry.peak_share < 1
        figures.add(figure)
    assert figures == {"tf32", "fp32"}
    tf32 = [e for e in convolutions if e.compute_peak == datasheet_peak(H100, "tf32")]
    assert max(entry.tflops for entry in tf32) > datasheet_peak(H100, "fp32").value
