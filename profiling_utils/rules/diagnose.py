"""Apply the rules to a trace: :func:`diagnose`, and the text and JSON forms of its findings."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

from .. import measures
from ..trace import Trace, gc_paused, load_trace
from .facts import Facts
from .registry import RULES, TABLES, Finding, Rule

__all__ = [
    "diagnose",
    "select_rules",
    "order_findings",
    "diagnosis_dict",
    "format_diagnosis",
]


def select_rules(
    select: Iterable[str] | None = None, ignore: Iterable[str] | None = None
) -> list[Rule]:
    """The rules to run: all of them, or only ``select``, minus ``ignore``, in cheatsheet order.

    ``select`` and ``ignore`` are rule ids, or one string of ids separated by commas (as the
    CLI's ``--select`` takes them).

    Raises:
        ValueError: An id names no rule (the message lists the unknown ids), or ``select`` is
            a string that names none.
    """
    known = {r.id for r in RULES}
    if select is not None and not rule_id_list(select) and (isinstance(select, str) or select):
        raise ValueError(f"select names no rule id: {select!r}")
    chosen = set(known if select is None else rule_id_list(select))
    ignored = set(rule_id_list(ignore or ()))
    unknown = sorted((chosen | ignored) - known)
    if unknown:
        from ..ranks import CROSS_RANK_RULE_IDS  # ranks imports this package

        across = [i for i in unknown if i in CROSS_RANK_RULE_IDS]
        where = (
            f" ({', '.join(across)}: cross-rank, run by profiling_utils.ranks.cross_rank over "
            "several ranks' traces, or by the CLI's diagnose given several)"
            if across
            else ""
        )
        raise ValueError(f"unknown rule id(s): {', '.join(unknown)}{where}")
    return [r for r in RULES if r.id in chosen and r.id not in ignored]


def rule_id_list(ids: Iterable[str] | str) -> list[str]:
    """``ids`` as a list of ids, spaces around them stripped: a string is split at its commas
    (``"hotspot, many-calls"``)."""
    if isinstance(ids, str):
        ids = ids.split(",")
    return [part.strip() for part in ids if part.strip()]


def order_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings grouped by cheatsheet table, the most important first.

    Tables holding a warning come before the others, then tables in cheatsheet order; within
    a table, warnings come first, then rules in cheatsheet order.
    """
    findings = list(findings)
    rank = {r.id: i for i, r in enumerate(RULES)}
    warned = {f.table for f in findings if f.severity == "warning"}
    return sorted(
        findings,
        key=lambda f: (
            f.table not in warned,
            TABLES.index(f.table),
            f.severity != "warning",
            rank.get(f.rule, len(rank)),
        ),
    )


def diagnose(
    trace_or_path: Trace | str | os.PathLike[str],
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
) -> list[Finding]:
    """Apply the trace reading cheatsheet to a trace.

    Args:
        trace_or_path: A loaded :class:`~profiling_utils.trace.Trace`, or the path of a trace
            file (``.json`` or ``.json.gz``).
        select: Rule ids to run (default: every rule), or one string of them separated by
            commas (a string naming none is an error; an empty list runs no rule). Rules
            that need a baseline (``compile-cpu-tax``) run in
            :func:`profiling_utils.compare.compare` instead.
        ignore: Rule ids to leave out, the same way.

    Returns:
        The findings, grouped by cheatsheet table with the most important first (see
        :func:`order_findings`).

    Raises:
        TraceError: The file cannot be read as a trace.
        ValueError: ``select`` or ``ignore`` names an unknown rule.

    Example::

        for finding in diagnose("4096_bf16_warm_compile.json.gz"):
            print(finding.severity, finding.rule, finding.message)
    """
    rules = select_rules(select, ignore)
    with gc_paused():
        trace = trace_or_path if isinstance(trace_or_path, Trace) else load_trace(trace_or_path)
        facts = Facts(trace)
        return order_findings(finding for r in rules for finding in r.run(facts))


def _device(trace: Trace) -> str | None:
    names = [device.name for device in trace.devices if device.name not in ("", "unknown")]
    return ", ".join(dict.fromkeys(names)) if names else None


def diagnosis_dict(trace: Trace, findings: list[Finding], file: str | None = None) -> dict:
    """``{"trace", "device", "findings": [...]}``: what ``diagnose --json`` prints.

    Args:
        trace: The diagnosed trace.
        findings: Its findings.
        file: The path to report (default: the trace's own path).
    """
    return {
        "trace": str(trace.path) if file is None else file,
        "device": _device(trace),
        "findings": [finding.to_dict() for finding in findings],
    }


_ITEMS_SHOWN = 5
_LINE_WIDTH = 140


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 4] + " ..."


def _evidence_lines(key: str, value: Any, indent: str) -> list[str]:
    """One evidence entry as text: scalars inline, lists one item per line, long dicts
    one key per line."""
    if isinstance(value, list) and value and isinstance(value[0], (dict, list)):
        lines = [f"{indent}{key}:"]
        for item in value[:_ITEMS_SHOWN]:
            text = json.dumps(item, ensure_ascii=False)
            lines.append(_clip(f"{indent}  - {text}", _LINE_WIDTH))
        if len(value) > _ITEMS_SHOWN:
            lines.append(f"{indent}  (+{len(value) - _ITEMS_SHOWN} more)")
        return lines
    if isinstance(value, (list, dict)):
        text = f"{indent}{key}: {json.dumps(value, ensure_ascii=False)}"
        if len(text) <= _LINE_WIDTH or not isinstance(value, dict):
            return [_clip(text, _LINE_WIDTH)]
        lines = [f"{indent}{key}:"]
        for inner_key, inner in value.items():
            lines += _evidence_lines(str(inner_key), inner, indent + "  ")
        return lines
    return [_clip(f"{indent}{key}: {value}", _LINE_WIDTH)]


_WITHOUT_STEPS = (
    "the rules that read steps stay silent; overhead-bound, gpu-idle, compute-bound, "
    "gpus-take-turns, many-calls, call-chain, exposed-communication, cost-in-children, "
    "new-shape-cost, elementwise-chain and compiling-recorded read the whole recording, "
    "data-loader the loop's iterations by its own calls"
)
"""What the header says of a trace whose rules have no step to read."""


NO_HOST_OPS = (
    "no op or label on the host, only runtime calls (as in a recording without "
    "ProfilerActivity.CPU)"
)
"""What the header says of a trace with GPU work and no host op, label or Python frame."""


def format_diagnosis(trace: Trace, findings: list[Finding], file: str | None = None) -> str:
    """The readable text of ``diagnose``: a header, then the findings under their table, each
    with its evidence (long lists and lines shortened; ``--json`` has everything)."""
    steps = trace.steps
    # deviceProperties lists every GPU the process could see; the header names those that ran
    # the trace's work (one rank of eight lists all eight).
    working = {work.lane.device for work in trace.gpu_work}
    used = [device for device in trace.devices if device.id in working] or trace.devices
    described = Counter(device.describe() for device in used)
    # "8× A100" would read as eight GPUs at work: with none at work, the devices are listed.
    times = "×" if working else " listed:"
    device = (
        ", ".join(
            f"{count}{times} {text}" if count > 1 else text for text, count in described.items()
        )
        if described
        else "an accelerator the trace does not describe"
        if trace.content == "accelerator not read"
        else "no GPU recorded"
    )
    if len(used) < len(trace.devices):
        ids = ", ".join(str(device.id) for device in used)
        device += f" (GPU {ids} of the {len(trace.devices)} listed)"
    warnings = sum(f.severity == "warning" for f in findings)
    read = len(Facts(trace).steps) if steps else 0
    samples = (
        f" ({read} read by the rules: summary says why "
        f"{'the other is' if len(steps) - read == 1 else 'the others are'} not)"
        if read < len(steps) and any(map(trace.end_recorded, steps))
        else ""
    )
    header = [
        str(trace.path) if file is None else file,
        f"  {device}; {len(steps)} profiler step{'' if len(steps) == 1 else 's'}{samples}; "
        f"{len(findings)} finding(s), {warnings} warning(s)",
    ]
    unread = trace.content == "accelerator not read"
    if (described or unread or not trace.records_host_ops) and trace.spans and not trace.has_gpu:
        # The devices named above did no work the rules read: say so, and why.
        header.append(f"  {trace.describe_gpu_work()}")
    if trace.negative_durations:
        header.append(
            f"  {trace.negative_durations:,} event(s) with a negative dur (an end the profiler "
            "did not record) read as 0 µs: the rules see them take no time"
        )
    early, most = measures.gpu_work_before_launch(trace)
    if early:
        header.append(
            f"  {early:,} GPU activities start before their launch call (by up to {most:.1f} µs): "
            "the CPU and GPU clocks disagree, and the rules that time launches read that much off"
        )
    if trace.has_gpu and not trace.records_host_ops:
        header.append(f"  {NO_HOST_OPS}: no steps, and no op to name for a launch")
    if not steps:
        if trace.records_host_ops or trace.has_gpu:  # else the line above says it all
            header.append(f"  no ProfilerStep#N annotations: {_WITHOUT_STEPS}")
    elif not any(map(trace.end_recorded, steps)):
        header.append(
            f"  no step ends inside the recording (the profiler stopped in "
            f"{'it' if len(steps) == 1 else 'them'}): {_WITHOUT_STEPS}"
        )
    out = header
    table = None
    for finding in findings:
        if finding.table != table:
            table = finding.table
            out += ["", table]
        out.append(f"  [{finding.severity}] {finding.rule}: {finding.message}")
        for key, value in finding.evidence.items():
            out += _evidence_lines(key, value, "      ")
    if not findings:
        out += ["", "No cheatsheet pattern found."]
    return "\n".join(out)
