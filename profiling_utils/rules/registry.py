"""What a rule is, what it finds, and the registry that holds every rule in cheatsheet order.

A :class:`Rule` is one row of the trace reading cheatsheet: what you see in the profiler table
or the trace, what it usually means, and a detection that looks for that pattern in a loaded
trace. What a detection finds is a :class:`Finding`: the rule, a one-line message with the
measured numbers, and the evidence behind it (steps, event names, times, durations).

Rules register themselves with the :func:`rule` decorator when their module is imported;
:data:`RULES` keeps them in the order of the cheatsheet's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pragma: no cover
    from .facts import Facts

__all__ = [
    "Severity",
    "TABLES",
    "Finding",
    "Rule",
    "RULES",
    "rule",
    "get_rule",
    "rule_ids",
]

Severity = Literal["info", "warning"]
"""``info``: worth knowing. ``warning``: worth acting on."""

TABLES: tuple[str, ...] = (
    "profiler table",
    "CPU lane",
    "GPU lane",
    "dispatch chain",
    "torch.compile",
)
"""The cheatsheet's five tables, in the post's order."""

Hit = tuple[str, dict[str, Any]]
"""What a detection yields: the finding's message and its evidence."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One match of a rule in a trace, with the evidence behind it.

    Attributes:
        rule: The rule's id, e.g. ``"cold-start"``.
        table: The cheatsheet table the rule belongs to, e.g. ``"CPU lane"``.
        severity: ``"info"`` (worth knowing) or ``"warning"`` (worth acting on).
        message: One line that states what was found, with the measured numbers.
        evidence: The steps, event names, times (µs from the trace's origin), durations and
            measured values behind the message; keys carry units (``_us``, ``_bytes``...).
            Plain JSON values only.
    """

    rule: str
    table: str
    severity: Severity
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """``{"rule", "table", "severity", "message", "evidence"}`` as plain JSON values."""
        return {
            "rule": self.rule,
            "table": self.table,
            "severity": self.severity,
            "message": self.message,
            "evidence": self.evidence,
        }


@dataclass(frozen=True, slots=True)
class Rule:
    """One cheatsheet row and its detection.

    Exactly one of ``detect`` (looks at one trace) and ``detect_against`` (compares a trace
    with a baseline; run by :func:`profiling_utils.compare.compare`) is set.

    Attributes:
        id: Stable identifier, used by ``--select`` and ``--ignore``.
        table: The cheatsheet table (one of :data:`TABLES`).
        what_you_see: The pattern, as it shows in the profiler table or the trace.
        what_it_means: What the pattern usually means, and what to do about it.
        severity: ``"info"`` or ``"warning"``.
        detect: ``facts -> [(message, evidence), ...]`` for single-trace rules.
        detect_against: ``(baseline_facts, facts) -> [(message, evidence), ...]`` for rules
            that need a baseline.
        from_post: Whether the row is in the post's cheatsheet (``False`` for rows the
            recorded traces taught beyond it).
        example: The gallery example that shows the rule firing, as a path of the built site
            without suffix (``"auto_examples/part1_matmul_add/plot_02_cold_start"``), or ``None``.
    """

    id: str
    table: str
    what_you_see: str
    what_it_means: str
    severity: Severity
    detect: Callable[[Facts], Iterable[Hit]] | None = None
    detect_against: Callable[[Facts, Facts], Iterable[Hit]] | None = None
    from_post: bool = True
    example: str | None = None

    @property
    def needs_baseline(self) -> bool:
        """Whether the rule compares two traces (it then runs in ``compare``, not ``diagnose``)."""
        return self.detect_against is not None

    def run(self, facts: Facts) -> list[Finding]:
        """The rule's findings in one trace (none for a rule that needs a baseline)."""
        if self.detect is None:
            return []
        return [self._finding(message, evidence) for message, evidence in self.detect(facts)]

    def run_against(self, baseline: Facts, facts: Facts) -> list[Finding]:
        """The rule's findings for ``facts`` against ``baseline`` (baseline rules only)."""
        if self.detect_against is None:
            return []
        hits = self.detect_against(baseline, facts)
        return [self._finding(message, evidence) for message, evidence in hits]

    def _finding(self, message: str, evidence: dict[str, Any]) -> Finding:
        return Finding(self.id, self.table, self.severity, message, evidence)


RULES: list[Rule] = []
"""Every rule, in cheatsheet order (tables in :data:`TABLES` order, rows as in the post)."""


def rule(
    id: str,
    table: str,
    *,
    see: str,
    means: str,
    severity: Severity,
    from_post: bool = True,
    example: str | None = None,
    against_baseline: bool = False,
) -> Callable[[Callable[..., Iterable[Hit]]], Callable[..., Iterable[Hit]]]:
    """Register the decorated detection as a rule (see :class:`Rule` for the arguments).

    ``see`` and ``means`` are the cheatsheet's two columns; ``against_baseline`` marks a
    detection that takes ``(baseline_facts, facts)``.
    """
    if table not in TABLES:
        raise ValueError(f"unknown cheatsheet table {table!r}")
    if any(existing.id == id for existing in RULES):
        raise ValueError(f"rule id {id!r} registered twice")

    def register(detect: Callable[..., Iterable[Hit]]) -> Callable[..., Iterable[Hit]]:
        # Keep the tables in cheatsheet order whatever order their modules are imported in;
        # within a table, rows keep the order they are defined in.
        position = sum(TABLES.index(r.table) <= TABLES.index(table) for r in RULES)
        RULES.insert(
            position,
            Rule(
                id=id,
                table=table,
                what_you_see=" ".join(see.split()),
                what_it_means=" ".join(means.split()),
                severity=severity,
                detect=None if against_baseline else detect,
                detect_against=detect if against_baseline else None,
                from_post=from_post,
                example=example,
            ),
        )
        return detect

    return register


def get_rule(rule_id: str) -> Rule:
    """The rule with this id.

    Raises:
        KeyError: No rule has this id.
    """
    for candidate in RULES:
        if candidate.id == rule_id:
            return candidate
    raise KeyError(rule_id)


def rule_ids() -> list[str]:
    """Every rule id, in cheatsheet order."""
    return [candidate.id for candidate in RULES]
