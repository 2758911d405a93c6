"""The trace reading cheatsheet, executable: one rule per row, applied to a saved trace.

Every row of the cheatsheet at the end of the post `Profiling in PyTorch (Part 1)
<https://huggingface.co/blog/torch-profiler#trace-reading-cheatsheet>`_ (five tables: profiler
table, CPU lane, GPU lane, dispatch chain, torch.compile), plus rows the recorded H100 traces
taught, is a :class:`Rule` in :data:`RULES`. A rule detects its pattern from what the trace
records (launch APIs, planning calls, kernel footprints, copy kinds, op names), never from a
GPU-specific kernel name, and returns :class:`Finding` objects with the evidence.

Example::

    from profiling_utils import diagnose

    for finding in diagnose("64_bf16_warm_eager_w0a3.json.gz"):
        print(f"[{finding.severity}] {finding.rule}: {finding.message}")

The thresholds each rule uses are module constants of its table's module
(:mod:`~profiling_utils.rules.profiler_table`, :mod:`~profiling_utils.rules.cpu_lane`,
:mod:`~profiling_utils.rules.gpu_lane`, :mod:`~profiling_utils.rules.communication`,
:mod:`~profiling_utils.rules.fusion`, :mod:`~profiling_utils.rules.dispatch_chain`,
:mod:`~profiling_utils.rules.attention`, :mod:`~profiling_utils.rules.torch_compile`).
"""

# Importing a table's module registers its rules.
from . import (  # noqa: F401
    attention,
    communication,
    cpu_lane,
    dispatch_chain,
    fusion,
    gpu_lane,
    profiler_table,
    torch_compile,
)
from .cheatsheet import cheatsheet_markdown
from .diagnose import diagnose, diagnosis_dict, format_diagnosis, order_findings, select_rules
from .facts import Facts
from .registry import RULES, TABLES, Finding, Rule, Severity, get_rule, rule_ids

__all__ = [
    "RULES",
    "TABLES",
    "Facts",
    "Finding",
    "Rule",
    "Severity",
    "cheatsheet_markdown",
    "diagnose",
    "diagnosis_dict",
    "format_diagnosis",
    "get_rule",
    "order_findings",
    "rule_ids",
    "select_rules",
]
