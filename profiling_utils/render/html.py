"""HTML tables for a page: the profiler table and the cheatsheet findings of a trace.

Both builders return an :class:`HtmlFragment`. Left as the last expression of a gallery cell
(or a notebook cell) it is shown as HTML, not as text: sphinx-gallery and Jupyter both call
``_repr_html_``. Every string that comes from a trace is escaped, since kernel names hold
``<``, ``>`` and ``&`` (``void gemm<float, 128>(...)``).

Example::

    run = capture(step, name="512_bf16_warm_eager", out_dir=trace_dir())
    profiler_table(run)          # the table torch prints, as an HTML table
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["FindingLike", "HtmlFragment", "findings_table", "profiler_table"]


@dataclass(frozen=True)
class HtmlFragment:
    """A piece of HTML that notebooks and sphinx-gallery display as HTML."""

    markup: str
    """The HTML, safe to insert into a page as it is."""

    def _repr_html_(self) -> str:
        return self.markup

    def __str__(self) -> str:
        return self.markup


class FindingLike(Protocol):
    """What :func:`findings_table` reads from a finding (``profiling_utils.rules.Finding``)."""

    rule: str
    table: str
    severity: str
    message: str


# The profiler's own sort keys say "cuda"; its events say "device" (torch >= 2.4).
_SORT_KEYS = {
    "cpu_time_total": "cpu_time_total",
    "self_cpu_time_total": "self_cpu_time_total",
    "cuda_time_total": "device_time_total",
    "device_time_total": "device_time_total",
    "self_cuda_time_total": "self_device_time_total",
    "self_device_time_total": "self_device_time_total",
    "count": "count",
}

_SELF_HELP = "Time spent in this event itself, excluding the events it called."
_TOTAL_HELP = "Time spent in this event including every event it called."
_CALLS_HELP = "How many times the event happened in the profiled steps."
_GPU_LABEL_HELP = (
    "A record_function label as the profiler projects it onto the GPU stream: its device time "
    "is the stretch of GPU timeline the label covers, idle time included, not GPU work, so its "
    "share can pass 100%. Torch leaves it out of the Self device time total."
)


def _is_gpu_label(event: Any) -> bool:
    """Whether a profiler-table row is a user label's projection onto the GPU stream."""
    from torch.autograd import DeviceType

    return event.device_type != DeviceType.CPU and bool(getattr(event, "is_user_annotation", False))


def profiler_table(
    source: Any,
    *,
    sort_by: str | None = None,
    row_limit: int = 20,
    caption: str | None = None,
) -> HtmlFragment:
    """The profiler table (``key_averages().table()``) as an escaped HTML table.

    The columns are the ones the table is read by, grouped under CPU and the device:
    ``Self CPU %``, ``Self CPU``, ``CPU total``, then ``Self CUDA %``, ``Self CUDA``,
    ``CUDA total``, and ``# of Calls``, with torch's numbers and time format (``12.345us``).
    Below it come the two lines torch prints under its table, ``Self CPU time total`` and
    ``Self CUDA time total``. Device columns appear only when the run recorded device time, as
    in torch's text table. The averages and ``CPU total %`` are left out to keep the table
    narrow enough for a page; torch's full text table is in ``Capture.table``.

    Args:
        source: A :class:`~profiling_utils.capture.Capture` (its ``key_averages``) or the
            ``EventList`` returned by ``prof.key_averages()``.
        sort_by: A profiler sort key (``"cuda_time_total"``, ``"self_cpu_time_total"``,
            ``"count"``, ...). Defaults to the capture's own sort key, else the device total
            when there is device time and the CPU total otherwise.
        row_limit: Rows shown, like ``table(row_limit=...)``.
        caption: A caption above the table; defaults to the run's name for a capture.

    Returns:
        An :class:`HtmlFragment` holding a ``<table class="pu-profiler-table">``.

    Raises:
        ValueError: ``source`` holds no profiler events (for example a
            :class:`~profiling_utils.capture.Capture` built by hand), or ``sort_by`` is unknown.
    """
    events, default_sort, default_caption = _events_of(source)
    if caption is None:
        caption = default_caption
    events = list(events)
    has_device_time = any(e.self_device_time_total > 0 for e in events)
    device = _device_name(events)
    key = sort_by or default_sort or ("device_time_total" if has_device_time else "cpu_time_total")
    if key not in _SORT_KEYS:
        known = ", ".join(sorted(_SORT_KEYS))
        raise ValueError(f"unknown sort_by {key!r}; use one of {known}")
    attribute = _SORT_KEYS[key]
    rows = sorted(events, key=lambda e: getattr(e, attribute), reverse=True)[:row_limit]
    self_cpu_sum = sum(e.self_cpu_time_total for e in events)
    self_device_sum = _self_device_sum(events)

    cpu_columns = [
        _Column("Self CPU %", "pu-self", _SELF_HELP,
                lambda e: _share(e.self_cpu_time_total, self_cpu_sum)),
        _Column("Self CPU", "pu-self", _SELF_HELP, lambda e: _format_time(e.self_cpu_time_total)),
        _Column("CPU total", "pu-total", _TOTAL_HELP, lambda e: _format_time(e.cpu_time_total)),
    ]  # fmt: skip
    device_columns = [
        _Column(f"Self {device} %", "pu-self pu-device", _SELF_HELP,
                lambda e: _share(e.self_device_time_total, self_device_sum)),
        _Column(f"Self {device}", "pu-self pu-device", _SELF_HELP,
                lambda e: _format_time(e.self_device_time_total)),
        _Column(f"{device} total", "pu-total pu-device", _TOTAL_HELP,
                lambda e: _format_time(e.device_time_total)),
    ]  # fmt: skip
    groups = [("CPU", "", cpu_columns)]
    if has_device_time:
        groups.append((device, " pu-device", device_columns))
    columns = [column for _, _, group in groups for column in group]

    parts = ['<div class="pu-table-scroll"><table class="pu-table pu-profiler-table">']
    if caption:
        parts.append(f"<caption>{html.escape(caption)}</caption>")
    calls = f'<th scope="col" rowspan="2" class="pu-calls" title="{html.escape(_CALLS_HELP)}">'
    parts.append('<thead><tr><th scope="col" rowspan="2" class="pu-name">Name</th>')
    # The call count sits next to the name: it is read with it, and on a narrow page the
    # last column of a wide table would scroll out of sight.
    parts.append(f"{calls}# of Calls</th>")
    for name, css, group in groups:
        parts.append(
            f'<th scope="colgroup" colspan="{len(group)}" class="pu-group{css}">'
            f"{html.escape(name)}</th>"
        )
    parts.append("</tr><tr>")
    for column in columns:
        parts.append(
            f'<th scope="col" class="{column.css}" title="{html.escape(column.help)}">'
            f"{html.escape(column.header)}</th>"
        )
    parts.append("</tr></thead><tbody>")
    gpu_labels = 0
    for event in rows:
        name = f"<code>{html.escape(event.key)}</code>"
        if _is_gpu_label(event):
            gpu_labels += 1
            name += f' <span class="pu-gpu-label" title="{html.escape(_GPU_LABEL_HELP)}">†</span>'
        cells = [f'<th scope="row" class="pu-name">{name}</th>']
        cells.append(_number(str(event.count), "pu-calls"))
        cells += [_number(column.value(event), column.css) for column in columns]
        parts.append(f"<tr>{''.join(cells)}</tr>")
    parts.append("</tbody></table></div>")
    if gpu_labels:
        parts.append(f'<p class="pu-table-note">† {html.escape(_GPU_LABEL_HELP)}</p>')
    totals = [f"Self CPU time total: <strong>{_format_time(self_cpu_sum)}</strong>"]
    if has_device_time:
        totals.append(
            f"Self {html.escape(device)} time total: "
            f"<strong>{_format_time(self_device_sum)}</strong>"
        )
    else:
        totals.append("No device time was recorded (a CPU-only run).")
    parts.append('<p class="pu-table-totals">' + "<br>".join(totals) + "</p>")
    return HtmlFragment("".join(parts))


@dataclass(frozen=True)
class _Column:
    header: str
    css: str
    help: str
    value: Callable[[Any], str]


def findings_table(
    findings: Iterable[FindingLike],
    *,
    caption: str | None = None,
    rules: Iterable[str] | None = None,
) -> HtmlFragment:
    """The cheatsheet findings of a trace as a compact HTML table, one row per finding.

    Args:
        findings: Objects with ``rule``, ``table``, ``severity`` and ``message`` attributes, such
            as the ``Finding`` objects ``profiling_utils.rules.diagnose`` returns.
        caption: A caption above the table.
        rules: The ids of the rules that were run, when not all of them were (``diagnose``'s
            ``select``): the note for no finding then names them rather than the cheatsheet.

    Returns:
        An :class:`HtmlFragment` holding a ``<table class="pu-findings-table">``; with no
        findings, a one-line note saying so.
    """
    findings = list(findings)
    if not findings:
        if rules is None:
            note = "No cheatsheet row matched this trace."
        else:
            ran = ", ".join(f"<code>{html.escape(rule)}</code>" for rule in rules)
            note = f"No finding on this trace from the rules run here: {ran}."
        return HtmlFragment(f'<p class="pu-findings-empty">{note}</p>')
    parts = ['<div class="pu-table-scroll"><table class="pu-table pu-findings-table">']
    if caption:
        parts.append(f"<caption>{html.escape(caption)}</caption>")
    parts.append(
        '<thead><tr><th scope="col">Severity</th><th scope="col">Cheatsheet table</th>'
        '<th scope="col">Rule</th><th scope="col">What the trace shows</th></tr></thead><tbody>'
    )
    for finding in findings:
        severity = str(finding.severity)
        parts.append(
            f'<tr class="pu-severity-{_css_token(severity)}">'
            f'<td class="pu-severity">{html.escape(severity)}</td>'
            f"<td>{html.escape(str(finding.table))}</td>"
            f"<td><code>{html.escape(str(finding.rule))}</code></td>"
            f"<td>{html.escape(str(finding.message))}</td></tr>"
        )
    parts.append("</tbody></table></div>")
    return HtmlFragment("".join(parts))


def _events_of(source: Any) -> tuple[Sequence[Any], str | None, str | None]:
    """The averaged events, the default sort key and the default caption of ``source``."""
    if hasattr(source, "trace_path") and hasattr(source, "key_averages"):
        if source.key_averages is None:
            raise ValueError(
                f"capture {source.name!r} holds no profiler events (key_averages is None); "
                "render the table from the Capture that capture() returned"
            )
        return source.key_averages, source.params.get("sort_by"), source.name
    if isinstance(source, Sequence) and all(hasattr(e, "self_cpu_time_total") for e in source):
        return source, None, None
    raise ValueError(
        f"expected a Capture or prof.key_averages(), not {type(source).__name__}; "
        "a saved trace has no profiler table, use profiling_utils.rules or the trace model"
    )


def _device_name(events: Sequence[Any]) -> str:
    use_device = next((e.use_device for e in events if getattr(e, "use_device", None)), None)
    return str(use_device).upper() if use_device else "CUDA"


def _self_device_sum(events: Sequence[Any]) -> float:
    """Torch's "Self CUDA time total": device-side events, user annotations left out."""
    from torch.autograd import DeviceType

    total = 0.0
    for event in events:
        if event.device_type == DeviceType.CPU:
            if getattr(event, "is_legacy", False):
                total += event.self_device_time_total
        elif not getattr(event, "is_user_annotation", False):
            total += event.self_device_time_total
    return total


def _number(text: str, css: str) -> str:
    return f'<td class="pu-num {css}">{html.escape(text)}</td>'


def _format_time(time_us: float) -> str:
    """Torch's format for profiler times: ``12.345us``, ``1.234ms``, ``2.000s``."""
    if time_us >= 1_000_000:
        return f"{time_us / 1_000_000:.3f}s"
    if time_us >= 1_000:
        return f"{time_us / 1_000:.3f}ms"
    return f"{time_us:.3f}us"


def _share(time_us: float, total_us: float) -> str:
    if total_us == 0:
        return "NaN" if time_us == 0 else "inf"
    return f"{time_us * 100.0 / total_us:.2f}%"


def _css_token(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()) or "unknown"
