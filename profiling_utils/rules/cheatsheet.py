"""The cheatsheet page, rendered from the registry (the docs include it; one source of truth)."""

from __future__ import annotations

from .registry import RULES, TABLES, Rule

__all__ = ["cheatsheet_markdown"]

POST = "https://huggingface.co/blog/torch-profiler"
_POST_ANCHORS = {
    "profiler table": "profiler-table",
    "CPU lane": "cpu-lane",
    "GPU lane": "gpu-lane",
    "dispatch chain": "dispatch-chain",
    "torch.compile": "torchcompile",
}
_TITLES = {
    "profiler table": "Profiler table",
    "CPU lane": "CPU lane",
    "GPU lane": "GPU lane",
    "dispatch chain": "Dispatch chain",
    "torch.compile": "torch.compile",
}


def _cell(text: str) -> str:
    # A table cell is Markdown: "|" would end the cell, "<hash>" would be read as HTML, and
    # "__next__" or "ncclDevKernel_*, ncclKernel_*" as emphasis.
    for special in ("|", "<", "_", "*"):
        text = text.replace(special, "\\" + special)
    return text


def _example(rule: Rule) -> str:
    if rule.example is None:
        return ""
    return f"{{doc}}`example </{rule.example}>`"


def _table(rules: list[Rule], with_table: bool) -> list[str]:
    head = ["What you see", "What it usually means", "Rule", "Severity", "Example"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rule in rules:
        # A sixth column for the table would leave "What you see" a few letters wide: the
        # table goes under the rule's id instead.
        table = f" ({_TITLES[rule.table]})" if with_table else ""
        cells = [
            _cell(rule.what_you_see),
            _cell(rule.what_it_means),
            f"`{rule.id}`{table}",
            rule.severity,
            _example(rule),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def cheatsheet_markdown() -> str:
    """The cheatsheet as MyST Markdown: the post's five tables, then the rows beyond it.

    Each row gives what you see, what it usually means, the rule id (for ``diagnose
    --select``), its severity (``info``: worth knowing, ``warning``: worth acting on) and,
    where the gallery has one, a link to the example that shows the rule firing.
    """
    out = [
        "Severity: `info` is worth knowing, `warning` is worth acting on. "
        "`compile-cpu-tax` compares two traces, so `compare` reports it, not `diagnose`.",
    ]
    for table in TABLES:
        rows = [r for r in RULES if r.table == table and r.from_post]
        out += [
            "",
            f"## {_TITLES[table]}",
            "",
            f"In the post: [{_TITLES[table]}]({POST}#{_POST_ANCHORS[table]}).",
            "",
            *_table(rows, with_table=False),
        ]
    beyond = [r for r in RULES if not r.from_post]
    if beyond:
        out += [
            "",
            "## Beyond the post",
            "",
            "Rows the post (measured on an A100) does not have: what the recorded H100 traces, "
            "and traces that other projects recorded, taught.",
            "",
            *_table(beyond, with_table=True),
        ]
    return "\n".join(out) + "\n"
