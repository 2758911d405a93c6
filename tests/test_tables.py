"""Sizes in bytes, as every output of the package writes them (:func:`byte_size`), and names
clipped with a mark (:func:`cut`)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import FIXTURES, run_cli

from profiling_utils.tables import byte_size, cut, distinct_cuts, without_float_noise


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (1000, "1,000 B"),  # bytes below 1 KiB stay bytes, with a thousands separator
        (1536, "1.5 KiB"),
        (32 * 2**20, "32 MiB"),  # a round size prints without ".0"
        (50 * 2**20, "50 MiB"),
        (85_045_000_000, "79.2 GiB"),  # an H100's memory as CUDA reports it
        (1000 * 2**10, "1,000 KiB"),  # three digits, never "1e+03 KiB"
        (int(1023.96 * 2**10), "1 MiB"),  # rounds up to the next unit, never "1,024 KiB"
        (3 * 2**50, "3,072 TiB"),  # the largest unit keeps growing
    ],
)
def test_byte_size_uses_binary_units_to_three_digits(count: int, text: str) -> None:
    assert byte_size(count) == text


def test_cut_marks_what_it_leaves_out() -> None:
    assert cut("aten::mm", 8) == "aten::mm"
    assert cut("aten::addmm", 8) == "aten::a…"
    assert len(cut("x" * 200, 88)) == 88
    with pytest.raises(ValueError):
        cut("x", 0)


def test_cut_keeps_a_name_with_line_breaks_on_one_line() -> None:
    # A with_stack frame named after a source line can hold a raw line break or tab.
    assert cut('print("a")\n(3): <module>', 80) == 'print("a")\\n(3): <module>'
    assert cut("a\tb\r\nc", 5) == "a\\tb…"


def test_names_that_differ_past_the_cut_are_told_apart() -> None:
    stem = "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_"
    names = [
        stem + "cta_per_row_1<c10::Half, float>(args)",
        stem + "warp_per_row_1<c10::Half>()",
        "k",
    ]
    cuts = distinct_cuts(names, 72)
    assert len(set(cuts)) == 3 and cuts[2] == "k"
    assert all(len(c) <= 72 for c in cuts)
    assert "cta_per_row" in cuts[0] and "warp_per_row" in cuts[1]
    # Two names alike around where a third differs from them, and apart only far later, are
    # shown around where they differ from each other.
    twins = [stem + "x" * 300 + "a", stem + "x" * 300 + "b", stem + "y" * 301]
    cuts = distinct_cuts(twins, 72)
    assert all(len(c) <= 72 for c in cuts) and len(set(cuts)) == 3
    assert cuts[0].endswith("xa") and cuts[1].endswith("xb") and "yyy" in cuts[2]
    # Template arguments are shown with the template's name (the fused optimizer's kernels).
    apply = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    kernels = [
        apply + f"(anonymous namespace)::TensorListMetadata<{n}>, at::native::(x)" for n in (1, 2)
    ]
    # Names that differ where a word starts show that word, not the template around it.
    impl = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
    elementwise = [
        impl + "at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&)",
        impl + "at::native::(anonymous namespace)::where_kernel_impl(x)",
    ]
    assert [c.split("…")[1] for c in distinct_cuts(elementwise, 72)] == [
        "CUDAFunctor_add<float> >(at::Tensor",
        "::native::(anonymous namespace)::wh",
    ]
    assert [c.split("…")[1] for c in distinct_cuts(kernels, 72)] == [
        "TensorListMetadata<1>, at::native::",
        "TensorListMetadata<2>, at::native::",
    ]


def test_float_noise_is_rounded_away_at_any_depth() -> None:
    noisy = {"us": 51745.369000000006, "rows": [{"share": 0.97425812, "n": 3}], "name": "x"}
    assert without_float_noise(noisy) == {
        "us": 51745.369,
        "rows": [{"share": 0.974258, "n": 3}],
        "name": "x",
    }


def test_the_cross_rank_json_carries_no_float_noise(capsys) -> None:
    _, out, _ = run_cli(capsys, "summary", "--json", str(FIXTURES / "nccl" / "stalled"))
    numbers = re.findall(r"\d+\.(\d+)", json.dumps(json.loads(out)["cross_rank"]))
    assert numbers and max(map(len, numbers)) <= 6
