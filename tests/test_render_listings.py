"""render.listings: text that fits the page's output box, from recorded H100 traces."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import complete_event, gpu_fixture

from profiling_utils import load_trace
from profiling_utils.render.listings import (
    fold_lines,
    gpu_work_listing,
    source_excerpt,
    span_tree,
)

# The call() of the code Inductor generated for x @ w + b (torch 2.13, CPU), as it came.
GENERATED = """
class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        arg0_1, arg1_1, arg2_1 = args
        args.clear()
        assert_size_stride(arg2_1, (256, 256), (256, 1), 'input')
        buf0 = empty_strided_cpu((256, 256), (256, 1), torch.bfloat16)
        # Topologically Sorted Source Nodes: [add], Original ATen: [aten.add]
        extern_kernels.addmm(arg2_1, arg0_1, arg1_1, alpha=1, beta=1, out=buf0)
        del arg0_1
        return (buf0, )

runner = Runner(partitions=[])
"""


def test_span_tree_of_a_compiled_step_shows_every_layer_within_the_width() -> None:
    trace = load_trace(gpu_fixture("4096_bf16_warm_compile"))
    step = trace.steps[-1]
    text = span_tree(trace, step.span)
    lines = text.split("\n")
    assert max(map(len, lines)) <= 88
    assert lines[0].startswith("ProfilerStep#4 ")
    assert lines[0].endswith(f"{step.span.dur:,.1f} µs")
    names = [line.strip().rsplit(maxsplit=2)[0] for line in lines]
    for layer in ("TorchDynamo Cache Lookup", "aten::addmm", "cudaMemcpyAsync"):
        assert layer in names
    # depth shows as indentation: aten::addmm sits inside the compiled graph's call
    graph = next(line for line in lines if "## Call CompiledFxGraph" in line)
    addmm = next(line for line in lines if line.strip().startswith("aten::addmm"))
    indent = len(addmm) - len(addmm.lstrip())
    assert indent == len(graph) - len(graph.lstrip()) + 4
    assert len(span_tree(trace, step.span, max_depth=1).split("\n")) == 2  # step, label
    assert max(map(len, span_tree(trace, step.span, width=60).split("\n"))) <= 60


def test_gpu_work_listing_names_the_bias_copy_and_its_size() -> None:
    trace = load_trace(gpu_fixture("4096_bf16_warm_compile"))
    lines = gpu_work_listing(trace.steps[-1]).split("\n")
    assert len(lines) == len(trace.steps[-1].gpu_work) == 3
    assert lines[0].startswith("memcpy") and "32 MiB" in lines[0] and "DtoD" in lines[0]
    assert lines[1].startswith("memset") and "4 B" in lines[1]
    assert lines[2].startswith("kernel") and "_badd_" in lines[2]
    assert all(len(line) <= 88 for line in lines)
    eager = load_trace(gpu_fixture("4096_bf16_warm_eager"))
    narrow = gpu_work_listing(eager.steps[-1], width=50).split("\n")
    assert all(len(line) <= 50 for line in narrow) and narrow[-1].endswith("…")


def test_gpu_work_listing_of_a_cpu_only_step_says_there_is_none(
    make_trace: Callable[..., Path],
) -> None:
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0.0, 100.0),
        complete_event("aten::mm", "cpu_op", 10.0, 50.0),
    ]
    trace = load_trace(make_trace(events, deviceProperties=None))
    assert gpu_work_listing(trace.steps[0]).startswith("no GPU work in this step")


def test_source_excerpt_is_the_call_function_dedented() -> None:
    text = source_excerpt(GENERATED, "def call(", "return ")
    lines = text.split("\n")
    assert lines[0] == "def call(self, args):"
    assert lines[1] == "    arg0_1, arg1_1, arg2_1 = args"
    assert lines[-1] == "    return (buf0, )"
    assert any("extern_kernels.addmm" in line for line in lines)
    assert all(len(line) <= 88 for line in lines)
    narrow = source_excerpt(GENERATED, "def call(", "return ", width=40)
    assert max(map(len, narrow.split("\n"))) <= 40
    with pytest.raises(ValueError, match="def nothing"):
        source_excerpt(GENERATED, "def nothing(", "return ")
    with pytest.raises(ValueError, match="yield"):
        source_excerpt(GENERATED, "def call(", "yield ")


def test_fold_lines_keeps_lines_that_fit_and_folds_the_others_under_their_indent() -> None:
    table = "  step        CPU\n     2   24,463.4"
    sentence = "  [warning] many-calls: " + "an op called many times " * 8
    text = fold_lines(table + "\n" + sentence)
    lines = text.split("\n")
    assert lines[:2] == table.split("\n")
    assert all(len(line) <= 88 for line in lines)
    assert len(lines) > 3 and all(line.startswith("      ") for line in lines[3:])
    long = fold_lines("x " * 400, max_lines=2).split("\n")
    assert len(long) == 2 and long[-1].endswith("…")


def test_fold_lines_breaks_a_long_name_after_an_underscore_not_inside_a_word() -> None:
    name = (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_"
        "cga1x1x1_kernel0_0"
    )
    first, second = fold_lines("    " + name).split("\n")
    assert first.endswith("_4x1x1_") and second == "        cga1x1x1_kernel0_0"
    # No break point in the second half of the room: cut at the edge, as before.
    assert fold_lines("y" * 100).split("\n")[0] == "y" * 88


def test_span_tree_prints_a_chain_deeper_than_pythons_recursion_limit(make_trace) -> None:
    depth = 3_000
    events = [complete_event("aten::to", "cpu_op", i, 2 * depth - 2 * i) for i in range(depth)]
    trace = load_trace(make_trace(events))
    lines = span_tree(trace, trace.spans[0]).splitlines()
    assert len(lines) == depth
    assert lines[-1].startswith("    " * (depth - 1) + "aten::to")
