"""The attention rules: which backend scaled_dot_product_attention ran, the math backend in
fp32, and a mask rebuilt on every call, on the recorded transformer and on synthetic traces
where no recording shows the pattern."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import complete_event, fixture_document, gpu_fixture, op_steps_events, write_trace
from conftest import trace_document as document

from profiling_utils import Finding, diagnose

QUERY = [2, 4, 128, 64]


def rules_on(path: Path) -> dict[str, Finding]:
    return {f.rule: f for f in diagnose(path)}


def sdpa_trace(tmp_path: Path, backend_op: str | None, dtype: str, *, on_gpu: bool = True) -> Path:
    """Two 1000 µs steps, each one attention call: ``aten::scaled_dot_product_attention`` →
    ``backend_op`` (query, key, value of ``QUERY`` shape in ``dtype``; left out when ``None``)
    → ``aten::bmm``, softmax, ``aten::bmm``, each launching a kernel (none with
    ``on_gpu=False``)."""
    shapes = {"Input Dims": [QUERY, QUERY, QUERY], "Input type": [dtype, dtype, dtype]}
    events: list[dict[str, Any]] = []
    for n, t in ((1, 1000.0), (2, 3000.0)):
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 1000),
            complete_event("aten::scaled_dot_product_attention", "cpu_op", t + 10, 300, **shapes),
        ]
        if backend_op is not None:
            events.append(complete_event(backend_op, "cpu_op", t + 20, 280, **shapes))
        for i, op in enumerate(("aten::bmm", "aten::_softmax", "aten::bmm")):
            start, correlation = t + 30 + 80 * i, 10 * n + i
            events.append(complete_event(op, "cpu_op", start, 60))
            if on_gpu:
                events += [
                    complete_event("cudaLaunchKernel", "cuda_runtime", start + 10, 5,
                                   correlation=correlation),
                    complete_event(f"kernel_{i}", "kernel", start + 400, 50, pid=0, tid=7,
                                   correlation=correlation),
                ]  # fmt: skip
    properties = None if not on_gpu else document([])["deviceProperties"]
    return write_trace(tmp_path / "sdpa.json", document(events, deviceProperties=properties))


def test_attention_backend_without_shapes_says_the_type_was_not_recorded(tmp_path: Path) -> None:
    # record_shapes off: no "Input type" to read. The count is kept under a plain label, not
    # a Python None written as the string "None".
    trace = fixture_document("train_tiny_transformer_a3")
    for event in trace["traceEvents"]:
        for key in ("Input type", "Input Dims", "Input Strides", "Concrete Inputs"):
            event.get("args", {}).pop(key, None)
    found = rules_on(write_trace(tmp_path / "no_shapes.json", trace))
    cudnn = found["attention-backend"].evidence["backends"]["cuDNN"]
    assert (cudnn["calls"], cudnn["input_types"]) == (12, {"(not recorded)": 12})
    assert cudnn["query_dims"] is None


def test_attention_backend_names_cudnn_on_the_recorded_transformer() -> None:
    found = rules_on(gpu_fixture("train_tiny_transformer_a3"))
    backends = found["attention-backend"].evidence["backends"]
    assert list(backends) == ["cuDNN"]
    cudnn = backends["cuDNN"]
    # 4 layers x 3 steps, bf16 under autocast, batch 16, 4 heads, 128 tokens, head size 64.
    assert (cudnn["calls"], cudnn["input_types"]) == (12, {"c10::BFloat16": 12})
    assert cudnn["query_dims"] == [16, 4, 128, 64]
    assert cudnn["steps"] == [2, 3, 4] and cudnn["gpu_us"] > 0
    assert "attention-math-fp32" not in found


def test_math_backend_in_fp32_is_a_warning(tmp_path: Path) -> None:
    found = rules_on(sdpa_trace(tmp_path, "aten::_scaled_dot_product_attention_math", "float"))
    assert found["attention-backend"].evidence["backends"]["math"]["calls"] == 2
    warning = found["attention-math-fp32"]
    assert warning.severity == "warning"
    # Three 50 µs kernels per call, one call per step.
    assert warning.evidence["gpu_us_per_step"] == 150.0
    assert (warning.evidence["calls"], warning.evidence["steps"]) == (2, [1, 2])
    assert warning.evidence["query_dims"] == QUERY


def test_attention_written_out_under_sdpa_is_the_math_backend(tmp_path: Path) -> None:
    found = rules_on(sdpa_trace(tmp_path, None, "float"))
    assert found["attention-backend"].evidence["backends"]["math"]["calls"] == 2
    warning = found["attention-math-fp32"].evidence
    assert (warning["op"], warning["gpu_us_per_step"]) == (
        "aten::scaled_dot_product_attention",
        150.0,
    )


def test_math_backend_in_bf16_and_fused_backends_are_not_warned(tmp_path: Path) -> None:
    math_bf16 = rules_on(
        sdpa_trace(tmp_path, "aten::_scaled_dot_product_attention_math", "c10::BFloat16")
    )
    assert "math" in math_bf16["attention-backend"].evidence["backends"]
    assert "attention-math-fp32" not in math_bf16
    efficient = rules_on(
        sdpa_trace(tmp_path, "aten::_scaled_dot_product_efficient_attention", "float")
    )
    assert list(efficient["attention-backend"].evidence["backends"]) == ["memory-efficient"]
    assert "attention-math-fp32" not in efficient


def test_attention_rules_are_silent_without_gpu_work(tmp_path: Path) -> None:
    found = rules_on(
        sdpa_trace(tmp_path, "aten::_scaled_dot_product_attention_math", "float", on_gpu=False)
    )
    assert not {"attention-backend", "attention-math-fp32"} & set(found)


L = 128


def mask_ops(length: int = L) -> list[tuple[str, dict[str, Any], bool]]:
    """``torch.full((L, L), -inf).triu(1)`` as record_shapes writes it, on the GPU."""
    full = {"Input Dims": [[], [], [], [], [], []],
            "Input type": ["ScalarList", "Scalar", "", "", "", "Scalar"],
            "Concrete Inputs": [f"[{length}, {length}]", "-inf", "", "", "", "False"]}  # fmt: skip
    triu = {"Input Dims": [[length, length], []], "Input type": ["float", "Scalar"]}
    return [("aten::full", full, True), ("aten::triu", triu, True)]


def test_a_mask_built_in_every_step_is_reported(tmp_path: Path) -> None:
    events = op_steps_events([*mask_ops(), ("aten::mm", {}, True)], steps=3)
    finding = rules_on(write_trace(tmp_path / "mask.json", document(events)))["mask-rebuilt"]
    evidence = finding.evidence
    assert evidence["ops_per_step"] == {"aten::full": 1.0, "aten::triu": 1.0}
    assert evidence["dims"] == [[L, L]]
    assert evidence["steps"] == [1, 2, 3]
    # Two 30 µs ops and their two 20 µs kernels per step; the mm is no part of the mask.
    assert (evidence["cpu_us_per_step"], evidence["gpu_us_per_step"]) == (60.0, 40.0)
    assert finding.severity == "warning"
    # Built by the caller: the message does not send the reader to the math backend.
    assert evidence["inside"] is None and "math backend" not in finding.message


def test_the_mask_ops_of_the_triangles_length_count_and_the_scores_do_not(
    tmp_path: Path,
) -> None:
    def masked_fill(dims: list[int]) -> tuple[str, dict[str, Any], bool]:
        args = {"Input Dims": [dims, [L, L], []], "Input type": ["float", "bool", "Scalar"]}
        return ("aten::masked_fill", args, True)

    # An additive mask for every sequence of the batch, then the scores of 8 heads masked.
    ops = [*mask_ops(), masked_fill([4, 1, L, L]), masked_fill([4, 8, L, L])]
    events = op_steps_events(ops, steps=2)
    found = rules_on(write_trace(tmp_path / "mask.json", document(events)))["mask-rebuilt"]
    assert found.evidence["ops_per_step"]["aten::masked_fill"] == 1.0
    assert found.evidence["dims"] == [[4, 1, L, L], [L, L]]


def test_a_mask_built_once_or_of_another_shape_is_not(tmp_path: Path) -> None:
    once = op_steps_events([*mask_ops(), ("aten::mm", {}, True)], steps=3)
    once = [e for e in once if not (e["name"] == "aten::triu" and e["ts"] > 3000)]
    assert "mask-rebuilt" not in rules_on(write_trace(tmp_path / "once.json", document(once)))
    # A triangle of a non-square tensor is no attention mask.
    wide = [(name, {**args, "Input Dims": [[L, 2 * L], []]}, gpu) for name, args, gpu in mask_ops()]
    events = op_steps_events(wide, steps=3)
    assert "mask-rebuilt" not in rules_on(write_trace(tmp_path / "wide.json", document(events)))


def test_mask_rebuilt_is_silent_without_gpu_work(tmp_path: Path) -> None:
    on_cpu = [(name, args, False) for name, args, _ in mask_ops()]
    events = op_steps_events(on_cpu, steps=3)
    path = write_trace(tmp_path / "cpu.json", document(events, deviceProperties=None))
    assert "mask-rebuilt" not in rules_on(path)


# -- the H100 recordings of Part 3 of the series -----------------------------------------------

SERIES = "attention_8x16x1024x64_bf16_{}"
BACKEND_OF = {
    "sdpa-math": "math",
    "sdpa-efficient": "memory-efficient",
    "sdpa-flash": "flash",
    "sdpa-cudnn": "cuDNN",
    "sdpa-auto": "cuDNN",  # torch's priority on the H100: cuDNN, flash, efficient, math
}


def test_attention_backend_names_each_recorded_backend() -> None:
    for variant, backend in BACKEND_OF.items():
        found = rules_on(gpu_fixture(SERIES.format(variant)))
        backends = found["attention-backend"].evidence["backends"]
        assert list(backends) == [backend], variant
        calls = backends[backend]
        # One call per step, three steps; the query as recorded, in bf16.
        assert calls["calls"] == 3 and calls["steps"] == [2, 3, 4], variant
        assert calls["query_dims"] == [8, 16, 1024, 64], variant
        assert calls["input_types"] == {"c10::BFloat16": 3}, variant
    for variant in ("naive", "inplace"):  # attention written by hand calls no SDPA
        assert "attention-backend" not in rules_on(gpu_fixture(SERIES.format(variant)))


def test_math_backend_upcasting_bf16_is_the_fp32_warning() -> None:
    found = rules_on(gpu_fixture(SERIES.format("sdpa-math")))
    warning = found["attention-math-fp32"]
    evidence = warning.evidence
    # The op's own inputs are bf16; its two GEMMs per call (scores, then P·V) are fp32.
    assert (evidence["input_type"], evidence["upcast"]) == ("c10::BFloat16", True)
    assert evidence["fp32_gemm_ops"] == {"aten::bmm": 6}
    assert evidence["calls"] == 3 and evidence["steps"] == [2, 3, 4]
    assert evidence["gpu_us_per_step"] > 1000  # the whole math path: ~3 ms on the H100
    assert "upcast to fp32" in warning.message
    for variant in ("naive", "inplace", "sdpa-efficient", "sdpa-flash", "sdpa-cudnn", "sdpa-auto"):
        assert "attention-math-fp32" not in rules_on(gpu_fixture(SERIES.format(variant)))


def test_mask_rebuilt_by_the_math_backend_and_not_by_a_mask_built_once() -> None:
    finding = rules_on(gpu_fixture(SERIES.format("sdpa-math")))["mask-rebuilt"]
    evidence = finding.evidence
    # is_causal=True: the math backend builds the [L, L] triangle itself on every call, and
    # the finding says so rather than send the reader looking for a mask in their code.
    assert evidence["inside"] == "aten::_scaled_dot_product_attention_math"
    assert "the causal mask the math backend makes for is_causal=True" in finding.message
    assert evidence["dims"] == [[1024, 1024]]
    assert {"aten::ones", "aten::tril"} <= set(evidence["ops_per_step"])
    assert evidence["steps"] == [2, 3, 4]
    # The hand-written attention built its mask once, outside the step; the fused backends
    # take is_causal and build none.
    for variant in ("naive", "inplace", "sdpa-efficient", "sdpa-flash", "sdpa-cudnn", "sdpa-auto"):
        assert "mask-rebuilt" not in rules_on(gpu_fixture(SERIES.format(variant)))


def test_attention_backend_says_when_graph_replays_run_what_it_cannot_read(
    tmp_path: Path,
) -> None:
    # A decode loop: the prefill's attention runs eagerly (flash, two calls); the decode
    # steps replay a CUDA graph whose attention kernel no op of the trace launches.
    path = sdpa_trace(tmp_path, "aten::_scaled_dot_product_flash_attention", "c10::BFloat16")
    written = json.loads(path.read_text())
    for n in range(3):
        start = 6000.0 + 200 * n
        written["traceEvents"] += [
            complete_event("cudaGraphLaunch", "cuda_runtime", start, 10, correlation=100 + n),
            complete_event("decode_attention_kernel", "kernel", start + 20, 150, pid=0, tid=7,
                           correlation=100 + n),
        ]  # fmt: skip
    replayed = write_trace(tmp_path / "replayed.json", written)
    message = rules_on(replayed)["attention-backend"].message
    assert message.startswith("scaled_dot_product_attention's backend: flash 2×")
    assert message.endswith(
        "Graph replays also run 3 kernel(s) that no op of the trace launches, 60% of GPU time: "
        "attention among them is not read here, as the trace does not say which op it serves."
    )
    # Without the replays, nothing is said of them.
    assert "Graph replays" not in rules_on(path)["attention-backend"].message
