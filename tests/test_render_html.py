"""The profiler table and the findings table as HTML (profiling_utils.render.html)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from profiling_utils.capture import capture
from profiling_utils.render import HtmlFragment, findings_table, profiler_table


def _event(
    key: str,
    *,
    self_cpu: float,
    cpu: float,
    self_dev: float = 0.0,
    dev: float = 0.0,
    count: int = 1,
    device_type: DeviceType = DeviceType.CPU,
    annotation: bool = False,
) -> SimpleNamespace:
    """A stand-in for torch's FunctionEventAvg with the attributes the table reads."""
    return SimpleNamespace(
        key=key, self_cpu_time_total=self_cpu, cpu_time_total=cpu, cpu_time=cpu / count,
        self_device_time_total=self_dev, device_time_total=dev, device_time=dev / count,
        count=count, device_type=device_type, is_async=False, is_legacy=False,
        is_user_annotation=annotation, use_device="cuda",
    )  # fmt: skip


def _body_rows(markup: str) -> list[str]:
    body = markup.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return re.findall(r"<tr>(.*?)</tr>", body)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory):
    x = torch.randn(32, 32)
    return capture(
        lambda: torch.add(torch.matmul(x, x), x),
        name="32_fp32_cold_eager",
        out_dir=tmp_path_factory.mktemp("traces"),
    )


def test_table_from_a_capture_has_torchs_rows_columns_and_totals(cpu_run) -> None:
    table = profiler_table(cpu_run)
    markup = table._repr_html_()
    assert isinstance(table, HtmlFragment) and str(table) == markup
    headers = re.findall(r'<th scope="col"[^>]*>(.*?)</th>', markup)
    assert headers == ["Name", "# of Calls", "Self CPU %", "Self CPU", "CPU total"]
    assert "Self CUDA" not in markup  # a CPU-only run has no device columns, as in torch
    names = [re.search(r"<code>(.*?)</code>", row).group(1) for row in _body_rows(markup)]
    assert {"aten::matmul", "aten::add"} <= set(names)
    # The same numbers as torch's own text table, in the same format.
    torch_total = re.search(r"Self CPU time total: (\S+)", cpu_run.table).group(1)
    assert f"Self CPU time total: <strong>{torch_total}</strong>" in markup
    matmul_line = next(line for line in cpu_run.table.splitlines() if "aten::matmul" in line)
    matmul_row = next(row for row in _body_rows(markup) if "aten::matmul" in row)
    cells = re.findall(r'<td class="pu-num[^"]*">(.*?)</td>', matmul_row)
    self_share, self_cpu, _, cpu_total, _, calls = matmul_line.split()[1:]
    assert cells == [calls, self_share, self_cpu, cpu_total]
    assert "<caption>32_fp32_cold_eager</caption>" in markup


def test_names_are_escaped() -> None:
    name = "void gemm<float, 128>(float const*, a&b)"
    markup = profiler_table([_event(name, self_cpu=5, cpu=5)])._repr_html_()
    assert "void gemm&lt;float, 128&gt;(float const*, a&amp;b)" in markup
    assert "<float" not in markup


def test_device_columns_and_device_total_leave_out_annotations() -> None:
    events = [
        _event("aten::mm", self_cpu=10, cpu=30, dev=40),
        _event("gemm_kernel", self_cpu=0, cpu=0, self_dev=40, dev=40,
               device_type=DeviceType.CUDA),
        _event("step", self_cpu=0, cpu=0, self_dev=55, dev=55, device_type=DeviceType.CUDA,
               annotation=True),
    ]  # fmt: skip
    markup = profiler_table(events)._repr_html_()
    headers = re.findall(r'<th scope="col"[^>]*>(.*?)</th>', markup)
    assert headers[2:] == ["Self CPU %", "Self CPU", "CPU total"] + [
        "Self CUDA %",
        "Self CUDA",
        "CUDA total",
    ]
    assert '<th scope="colgroup" colspan="3" class="pu-group pu-device">CUDA</th>' in markup
    kernel_row = next(row for row in _body_rows(markup) if "gemm_kernel" in row)
    assert re.findall(r'<td class="pu-num[^"]*">(.*?)</td>', kernel_row)[4:7] == [
        "100.00%",  # of the 40us that excludes the annotation's 55us
        "40.000us",
        "40.000us",
    ]
    assert "Self CUDA time total: <strong>40.000us</strong>" in markup
    # Default order with device time: by device total, largest first.
    names = [re.search(r"<code>(.*?)</code>", row).group(1) for row in _body_rows(markup)]
    assert names[0] == "step"
    # The GPU-side label row is marked, and explained once under the table.
    step_row = next(row for row in _body_rows(markup) if "<code>step</code>" in row)
    assert "pu-gpu-label" in step_row and "pu-gpu-label" not in kernel_row
    assert markup.count('class="pu-table-note"') == 1


def test_sort_key_and_row_limit() -> None:
    events = [_event(f"op{i}", self_cpu=i, cpu=10 - i, count=i + 1) for i in range(6)]
    by_self = profiler_table(events, sort_by="self_cpu_time_total", row_limit=2)._repr_html_()
    assert [r.count("<code>op5</code>") for r in _body_rows(by_self)] == [1, 0]
    assert len(_body_rows(by_self)) == 2
    by_total = profiler_table(events, sort_by="cpu_time_total")._repr_html_()
    assert "<code>op0</code>" in _body_rows(by_total)[0]
    with pytest.raises(ValueError, match="unknown sort_by"):
        profiler_table(events, sort_by="flops")


def test_a_capture_without_events_or_a_path_is_refused(cpu_run) -> None:
    from dataclasses import replace

    with pytest.raises(ValueError, match="holds no profiler events"):
        profiler_table(replace(cpu_run, key_averages=None))
    with pytest.raises(ValueError, match="expected a Capture"):
        profiler_table(cpu_run.trace_path)


@dataclass
class _Finding:
    rule: str
    table: str
    severity: str
    message: str


def test_findings_table_escapes_and_keeps_order() -> None:
    findings = [
        _Finding("overhead_bound", "Profiler table", "warning", "CPU 2.3ms >> GPU 23us <here>"),
        _Finding("occupancy_query", "CPU lane", "info", "gemm<128> & friends"),
    ]
    markup = findings_table(findings, caption="64 & cold")._repr_html_()
    assert "<caption>64 &amp; cold</caption>" in markup
    assert markup.index("overhead_bound") < markup.index("occupancy_query")
    assert "CPU 2.3ms &gt;&gt; GPU 23us &lt;here&gt;" in markup
    assert "gemm&lt;128&gt; &amp; friends" in markup
    assert 'class="pu-severity-warning"' in markup
    assert markup.count("<tr class=") == len(findings)


def test_no_findings_says_so() -> None:
    assert "No cheatsheet row matched" in findings_table([])._repr_html_()
    # When only some rules ran, the note names them rather than the whole cheatsheet.
    note = findings_table([], rules=["intra-step-gap", "a<b"])._repr_html_()
    assert "cheatsheet" not in note
    assert "<code>intra-step-gap</code>, <code>a&lt;b</code>" in note
