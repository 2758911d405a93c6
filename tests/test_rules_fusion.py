"""The elementwise-chain rule: runs of elementwise kernels over one tensor shape, on a foreign
training trace that has them (an optimizer written as separate ops), on synthetic steps, and on
the H100 recordings: it fires on the GeGLU MLP's gelu and mul (eager) and stays silent where
they are fused (compiled, Liger) and on the tiny transformer (a cast then a copy, add_ then a
cast: one computing kernel each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import FOREIGN, complete_event, gpu_fixture, op_steps_events

from profiling_utils import Finding, diagnose

SHAPE = [64, 1024]
BF16_BYTES = 64 * 1024 * 2


def elementwise(name: str, *, shape: list[int] = SHAPE, dtype: str = "c10::BFloat16") -> Any:
    """An op reading two tensors of ``shape`` (or one and a scalar), as record_shapes writes."""
    args = {"Input Dims": [shape, shape, []], "Input type": [dtype, dtype, "Scalar"]}
    return (name, args, True)


MATMUL = (
    "aten::mm",
    {"Input Dims": [SHAPE, [1024, 1024]], "Input type": ["c10::BFloat16"] * 2},
    True,
)


def rules_on(path: Path) -> dict[str, Finding]:
    return {f.rule: f for f in diagnose(path)}


def test_a_chain_of_three_reports_the_bytes_fusing_saves(make_trace: Any) -> None:
    ops = [MATMUL, elementwise("aten::add"), elementwise("aten::mul"), elementwise("aten::gelu")]
    finding = rules_on(make_trace(op_steps_events(ops)))["elementwise-chain"]
    evidence = finding.evidence
    # Two intermediates (add's and mul's outputs), each written then read back: 2 x 2 x 128 KiB.
    assert evidence["saved_bytes_per_step"] == 2 * 2 * BF16_BYTES
    assert evidence["chains_per_step"] == 1 and evidence["steps"] == [1, 2]
    assert evidence["gpu_us_per_step"] == 60.0  # three 20 µs kernels
    [chain] = evidence["chains"]
    assert chain["ops"] == ["aten::add", "aten::mul", "aten::gelu"]
    assert chain["dims"] == SHAPE
    assert chain["input_types"] == ["c10::BFloat16"] * 3
    assert chain["saved_bytes_per_chain"] == 2 * 2 * BF16_BYTES
    assert "aten::add → aten::mul → aten::gelu" in finding.message
    assert evidence["saved_launches_per_step"] == 2
    assert "of memory traffic and 2 kernel launch(es) per step (their kernels take 60.0 µs" in (
        finding.message
    )


def test_a_long_chain_is_named_by_its_ends(make_trace: Any) -> None:
    # x = x * a + b, ten times: one chain of 20 ops, named by a few of them.
    ops = [MATMUL] + [elementwise(name) for _ in range(10) for name in ("aten::mul", "aten::add")]
    finding = rules_on(make_trace(op_steps_events(ops)))["elementwise-chain"]
    assert len(finding.evidence["chains"][0]["ops"]) == 20  # the evidence has them all
    assert finding.evidence["saved_launches_per_step"] == 19
    assert (
        "biggest: aten::mul → aten::add → aten::mul → … 15 more … → aten::mul → aten::add, "
        "20 ops on [64, 1024])."
    ) in finding.message


def test_the_written_tensor_sets_the_bytes(make_trace: Any) -> None:
    # copy_ into bf16 from fp32 writes bf16; add of an fp32 and a bf16 tensor writes fp32.
    cast = ("aten::copy_", {"Input Dims": [SHAPE, SHAPE, []],
                            "Input type": ["c10::BFloat16", "float", "Scalar"]}, True)  # fmt: skip
    mixed = ("aten::add", {"Input Dims": [SHAPE, SHAPE, []],
                           "Input type": ["c10::BFloat16", "float", "Scalar"]}, True)  # fmt: skip
    ops = [cast, mixed, elementwise("aten::relu")]
    evidence = rules_on(make_trace(op_steps_events(ops)))["elementwise-chain"].evidence
    assert evidence["saved_bytes_per_step"] == 2 * (BF16_BYTES + 2 * BF16_BYTES)


def test_a_reduction_a_new_shape_or_a_lone_computing_kernel_break_the_chain(
    make_trace: Any,
) -> None:
    softmax = (
        "aten::_softmax",
        {"Input Dims": [SHAPE, []], "Input type": ["float", "Scalar"]},
        True,
    )
    for ops in (
        [elementwise("aten::add"), softmax, elementwise("aten::gelu")],
        [elementwise("aten::add"), elementwise("aten::gelu", shape=[64, 4096])],
        # Two kernels of which only one computes: a cast, then an add.
        [MATMUL, elementwise("aten::copy_"), elementwise("aten::add")],
    ):
        assert "elementwise-chain" not in rules_on(make_trace(op_steps_events(ops)))


def test_silent_without_recorded_shapes_or_gpu_work(make_trace: Any) -> None:
    bare = [("aten::add", {}, True), ("aten::mul", {}, True), ("aten::gelu", {}, True)]
    assert "elementwise-chain" not in rules_on(make_trace(op_steps_events(bare)))
    on_cpu = [(name, args, False) for name, args, _ in [elementwise("aten::add")] * 3]
    assert "elementwise-chain" not in rules_on(make_trace(op_steps_events(on_cpu)))


def test_two_computing_kernels_with_a_gemm_between_are_a_chain(make_trace: Any) -> None:
    # A GeGLU MLP: gelu(x @ gate), then x @ up, then the product of the two; x is [64, 256],
    # the projections [64, 1024].
    up = ("aten::mm", {"Input Dims": [[64, 256], [256, 1024]], "Input type": ["c10::BFloat16"] * 2},
          True)  # fmt: skip
    ops = [MATMUL, elementwise("aten::gelu"), up, elementwise("aten::mul"), MATMUL]
    evidence = rules_on(make_trace(op_steps_events(ops)))["elementwise-chain"].evidence
    [chain] = evidence["chains"]
    assert chain["ops"] == ["aten::gelu", "aten::mul"]
    assert chain["saved_bytes_per_chain"] == 2 * BF16_BYTES  # gelu's output, written then read
    # A GEMM with an input of the chain's shape may read its tensor (the next layer's GEMM
    # on the gelu's output): the kernels after it are no part of the chain.
    ops = [MATMUL, elementwise("aten::gelu"), MATMUL, elementwise("aten::mul"), MATMUL]
    assert "elementwise-chain" not in rules_on(make_trace(op_steps_events(ops)))
    softmax = (
        "aten::_softmax",
        {"Input Dims": [SHAPE, []], "Input type": ["float", "Scalar"]},
        True,
    )
    broken = [elementwise("aten::gelu"), softmax, elementwise("aten::mul")]
    assert "elementwise-chain" not in rules_on(make_trace(op_steps_events(broken)))


MLP = "mlp_64x128x768x3072_bf16_{}"


def test_fires_on_the_recorded_geglu_mlp_eager() -> None:
    finding = rules_on(gpu_fixture(MLP.format("eager")))["elementwise-chain"]
    evidence = finding.evidence
    [chain] = evidence["chains"]
    assert chain["ops"] == ["aten::gelu", "aten::mul"] and chain["dims"] == [64, 128, 3072]
    # gelu's [8192, 3072] bf16 output (48 MiB), written by gelu and read back by mul.
    assert chain["saved_bytes_per_chain"] == 2 * 8192 * 3072 * 2
    assert evidence["chains_per_step"] == 1 and len(evidence["steps"]) == 3
    assert evidence["saved_bytes_per_step"] == 2 * 8192 * 3072 * 2
    assert "save 96 MiB of memory traffic" in finding.message


@pytest.mark.parametrize("variant", ["compile", "liger"])
def test_silent_where_the_mlp_is_fused(variant: str) -> None:
    assert "elementwise-chain" not in rules_on(gpu_fixture(MLP.format(variant)))


def test_silent_on_the_recorded_transformer() -> None:
    # Its elementwise kernels come two at a time, one of them a copy (a cast then a copy,
    # add_ then a cast).
    assert "elementwise-chain" not in rules_on(gpu_fixture("train_tiny_transformer_a3"))


def test_fires_on_an_optimizer_written_as_separate_ops() -> None:
    found = rules_on(FOREIGN / "hta__timeline_analysis_sampled_rank-0.json.gz")
    evidence = found["elementwise-chain"].evidence
    assert evidence["steps"] == [551, 552]
    # Chains found in the whole trace, then per step: 42 in 2 steps is 21.0 per step. (A
    # backward pass's threshold_backward of three layers, with the GEMMs that read each
    # gradient between them, is no chain: 43 before GEMMs reading the chain's shape broke it.)
    assert evidence["chains_per_step"] == 21.0
    assert found["elementwise-chain"].message.startswith(
        "42 chain(s) of elementwise kernels over one shape in 2 step(s), 21 per step;"
    )
    # Adam's denominator and step: sqrt(v) / c, + eps, m / denominator, on one fp32 weight.
    adam = ["aten::div", "aten::sqrt", "aten::add_", "aten::div"]
    [biggest] = [chain for chain in evidence["chains"] if chain["ops"] == adam]
    assert biggest["dims"] == [512, 8192] and biggest["input_types"][0] == "float"
    # Three fp32 intermediates of 512 x 8192, each written then read back.
    assert biggest["saved_bytes_per_chain"] == 3 * 2 * 512 * 8192 * 4
    assert evidence["saved_bytes_per_step"] >= biggest["saved_bytes_per_chain"]


def test_chains_count_in_the_steps_the_rules_read(make_trace: Any) -> None:
    # The profiler's window ends inside step 2: its end was not recorded, the rules leave it
    # out, and its chain with it. Ending before step 1 ends too, no step is left: the rules
    # read the whole recording, and both chains are in it (they were once divided by zero
    # steps).
    ops = [MATMUL, elementwise("aten::add"), elementwise("aten::mul"), elementwise("aten::gelu")]
    events = op_steps_events(ops)

    def window(end: float) -> dict[str, Any]:
        return complete_event("PyTorch Profiler (0)", "Trace", 0, end, pid="Spans", tid="Trace")

    one = rules_on(make_trace([window(4_500.0), *events], name="one.json"))["elementwise-chain"]
    assert one.evidence["steps"] == [1] and one.evidence["chains_per_step"] == 1
    none = rules_on(make_trace([window(2_500.0), *events]))["elementwise-chain"]
    assert none.evidence["window"] == "recording" and none.evidence["chain_count"] == 2


def test_a_recording_without_steps_reads_its_chains_over_the_whole_of_it(make_trace: Any) -> None:
    # An inference loop records no ProfilerStep: the same chain three times in the recording.
    ops = [MATMUL, elementwise("aten::add"), elementwise("aten::mul"), elementwise("aten::gelu")]
    events = [e for e in op_steps_events(ops, steps=3) if not e["name"].startswith("ProfilerStep")]
    finding = rules_on(make_trace(events))["elementwise-chain"]
    evidence = finding.evidence
    assert evidence["window"] == "recording" and evidence["chain_count"] == 3
    assert evidence["saved_bytes"] == 3 * 2 * 2 * BF16_BYTES
    assert evidence["gpu_us"] == 3 * 60.0
    [chain] = evidence["chains"]
    assert (chain["ops"], chain["count"]) == (["aten::add", "aten::mul", "aten::gelu"], 3)
    assert evidence["saved_launches"] == 3 * 2  # three kernels each, one once fused
    assert finding.message.startswith(
        "3 chain(s) of elementwise kernels over one shape in the recording (no steps to count "
        "per step); fusing them would save 1.5 MiB of memory traffic and 6 kernel launch(es) "
        "in it (their kernels take 180.0 µs of GPU time; biggest: aten::add → aten::mul → "
        "aten::gelu on [64, 1024])."
    )
    # A lone elementwise kernel between others is still no chain.
    bare = [MATMUL, elementwise("aten::add"), MATMUL]
    events = [e for e in op_steps_events(bare) if not e["name"].startswith("ProfilerStep")]
    assert "elementwise-chain" not in rules_on(make_trace(events, name="bare.json"))
