"""Tables of measured values as HTML (profiling_utils.render.tables)."""

from __future__ import annotations

import re

import pytest

from profiling_utils.render import HtmlFragment, value_table
from profiling_utils.render.tables import format_cell
from profiling_utils.stats import Distribution


def _cells(markup: str) -> list[list[str]]:
    body = markup.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body)
    return [re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in rows]


def test_cells_are_formatted_by_kind():
    samples = Distribution.of([50.0, 51.0, 52.4, 57.1, 60.0], unit="µs")
    assert format_cell(2226.624) == "2,226.6"
    assert format_cell(12345) == "12,345"
    assert format_cell(None) == "—"
    assert format_cell(True) == "yes"
    assert format_cell("aten::mm") == "aten::mm"
    q1, q3 = samples.quartiles
    assert format_cell(samples) == f"52.4 (IQR {q1:,.1f}–{q3:,.1f})"


def test_rows_keep_their_order_and_numbers_are_right_aligned():
    table = value_table(
        ["", "first step", "other steps"],
        [["step width (µs)", 2916.4, Distribution.of([52.0, 53.0, 54.0])], ["requests", 1, 0]],
        caption="200 steps",
    )
    assert isinstance(table, HtmlFragment)
    markup = table._repr_html_()
    assert "<caption>200 steps</caption>" in markup
    assert _cells(markup) == [
        ["step width (µs)", "2,916.4", "53.0 (IQR 52.5–53.5)"],
        ["requests", "1", "0"],
    ]
    assert markup.count('class="pu-num"') == 4
    assert '<th scope="row" class="pu-name">requests</th>' in markup


def test_kernel_names_are_escaped():
    markup = value_table(["kernel", "µs"], [["void gemm<float, 128>(&x)", 3.5]])._repr_html_()
    assert "void gemm&lt;float, 128&gt;(&amp;x)" in markup
    assert "<float" not in markup


def test_a_row_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="row 1 has 1 cells for 2 columns"):
        value_table(["a", "b"], [["x", 1], ["y"]])
    with pytest.raises(ValueError, match="at least one column"):
        value_table([], [])
