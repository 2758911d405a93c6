"""Claims: the qualitative statements a page makes about its run, checked by that run.

A tutorial's prose says things such as "the first step is the widest" or "the compiled GEMM
is a different kernel from the eager one". Numbers move from run to run and from GPU to GPU;
prose does not. So every such statement is made in code, as a :func:`claim` over the values
the run measured, and is checked each time the example runs::

    from profiling_utils.claims import claim

    first, others = widths[0], statistics.median(widths[1:])
    claim("the first recorded step is wider than the median of the others",
          first > others, first_us=first, median_others_us=others)

A claim that holds is recorded and printed where it is made (``Checked: the first
recorded step is wider ... (first_us=219.4, ...)``), so a page shows it under the cell
that makes it, and a script run in a terminal lists what it checked. One that does not
raises :class:`ClaimFailed`,
whose message is one line naming the example, the statement and the numbers, like any
exception of an example that fails. A statement that is true on one GPU and not on another
is worded by the outcome instead, with ``otherwise``: it always holds, and says what this
run found::

    claim("the compiled GEMM is a different kernel from the eager one", eager != compiled,
          otherwise="the compiled GEMM is the same kernel as the eager one",
          eager=eager, compiled=compiled)

A claim about GPU work is made under ``if run.has_gpu:``: a build without a GPU does not
make it, and its pages say that their GPU claims were not checked.

While the documentation builds, each example's claims are also written to a file
(:data:`CLAIMS_FILE_ENV`) from which its page shows a "Checked on this run" box, and
:data:`CLAIMS_MODE_ENV` set to ``report`` records a failed claim and carries on instead of
raising, so that a build on another machine finishes and marks what did not hold there.
"""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .stats import Distribution, clearly_greater
from .tables import PAGE_WIDTH

if TYPE_CHECKING:  # capture imports torch; a claim only reads the result
    from .capture import CallTimes

__all__ = [
    "CLAIMS_FILE_ENV",
    "CLAIMS_MODE_ENV",
    "Claim",
    "ClaimFailed",
    "at_least_times",
    "claim",
    "format_number",
    "mode",
    "read_claims",
    "which_is_greater",
    "who_sets_the_pace",
]

CLAIMS_MODE_ENV = "PROFILING_UTILS_CLAIMS"
"""Environment variable: ``strict`` (default) raises on a failed claim, ``report`` records it."""
CLAIMS_FILE_ENV = "PROFILING_UTILS_CLAIMS_FILE"
"""Environment variable naming the file (JSON lines) that every claim is appended to."""

STRICT = "strict"
REPORT = "report"
MODES = (STRICT, REPORT)


class ClaimFailed(AssertionError):
    """A claim that did not hold on this run (strict mode).

    Its message is one line: ``<example>: claim did not hold: <statement> (name=value, ...)``.

    Attributes:
        claim: The claim that failed.
    """

    def __init__(self, failed: Claim) -> None:
        self.claim = failed
        super().__init__(failed.failure_line())

    def __reduce__(self) -> tuple[type[ClaimFailed], tuple[Claim]]:
        return (type(self), (self.claim,))


def format_number(value: Any) -> str:
    """A value as the claims box shows it: compact, without float noise.

    Integers as they are, floats with one decimal from 100 up and three significant digits
    below (``92.0``, ``5.56``, ``0.123``), anything else (a
    :class:`~profiling_utils.stats.Distribution`, a kernel name) as its ``str``.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or not math.isfinite(value):
        return str(value)
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:#.3g}"


@dataclass(frozen=True)
class Claim:
    """One statement about a run and whether it held.

    :func:`claim` prints it where it is made, as one line with its numbers (``str``).
    """

    statement: str
    """The text shown: for an outcome-worded claim, the wording that matched the outcome."""
    holds: bool
    """Whether the statement held on this run."""
    numbers: dict[str, Any] = field(default_factory=dict)
    """The measured values that decided it, by name (names carry their unit: ``_us``)."""
    example: str = ""
    """The file that made the claim (its name only), for the failure message."""
    mode: str = STRICT
    """How it was checked: ``"strict"`` (a failure raised) or ``"report"`` (recorded only)."""

    def numbers_text(self) -> str:
        """``name=value, ...`` in the order given, or ``""`` when there are none."""
        return ", ".join(f"{name}={format_number(v)}" for name, v in self.numbers.items())

    def failure_line(self) -> str:
        """The one-line message of a claim that did not hold."""
        numbers = self.numbers_text()
        where = f"{self.example}: " if self.example else ""
        return f"{where}claim did not hold: {self.statement}" + (f" ({numbers})" if numbers else "")

    def as_dict(self) -> dict[str, Any]:
        """The claim as one JSON object, its numbers formatted as the box shows them."""
        return {
            "statement": self.statement,
            "holds": self.holds,
            "numbers": {name: format_number(v) for name, v in self.numbers.items()},
            "example": self.example,
            "mode": self.mode,
        }

    def __str__(self) -> str:
        """The line :func:`claim` prints: ``Checked: <statement> (<numbers>)``, or ``Did
        not hold: ...`` for a failed claim recorded in report mode, wrapped at
        :data:`~profiling_utils.tables.PAGE_WIDTH` characters."""
        verdict = "Checked" if self.holds else "Did not hold"
        numbers = self.numbers_text()
        text = f"{verdict}: {self.statement}" + (f" ({numbers})" if numbers else "")
        return textwrap.fill(text, PAGE_WIDTH, subsequent_indent="    ", break_on_hyphens=False)


def claim(statement: str, holds: bool, *, otherwise: str | None = None, **numbers: Any) -> Claim:
    """State a qualitative claim of the page as a check over the run's measured values.

    Args:
        statement: What the prose says, as a sentence fragment ("the first step is the
            widest"). Shown in the page's "Checked on this run" box.
        holds: Whether it held on this run, computed from the measured values.
        otherwise: For a fact that depends on the hardware: the wording that is true when
            ``holds`` is false. The claim then always holds and shows whichever wording
            matches the outcome.
        **numbers: The values that decided it, named with their unit
            (``first_us=219.4``); shown beside the statement.

    Returns:
        The :class:`Claim`, printed (its ``str``) and, when the documentation builds,
        recorded for the page.

    Raises:
        ClaimFailed: When the claim does not hold and the mode (:data:`CLAIMS_MODE_ENV`) is
            ``strict``, the default.
    """
    holds = bool(holds)
    if otherwise is not None:
        statement, holds = (statement if holds else otherwise), True
    made = Claim(statement, holds, dict(numbers), example=_example(), mode=mode())
    _record(made)
    if not made.holds and made.mode == STRICT:
        raise ClaimFailed(made)
    print(made)
    return made


def at_least_times(statement: str, factor: float, **two_numbers: float) -> Claim:
    """Claim that one measured value is at least ``factor`` times another.

    Sugar for the commonest claim of the tutorials: the first named number is compared with
    the second, and the box shows both and their ratio::

        at_least_times("the first step's offset is at least 5x the median of the others",
                       5, first_offset_us=first, median_others_us=median_others)

    Args:
        statement: What the prose says.
        factor: The least ratio for the claim to hold.
        **two_numbers: Exactly two values, named with their unit: the value, then its
            baseline. Checked as ``value >= factor * baseline``.
    """
    if len(two_numbers) != 2:
        raise TypeError(f"at_least_times() takes exactly two named numbers, not {len(two_numbers)}")
    value, baseline = two_numbers.values()
    ratio = value / baseline if baseline else math.inf
    return claim(statement, value >= factor * baseline, **two_numbers, ratio=ratio)


def which_is_greater(
    greater: str,
    less: str,
    alike: str,
    *,
    host_speed: tuple[float, int] | None = None,
    **two: Distribution,
) -> Claim:
    """Say which of two measured timings is the greater, worded by this run's outcome.

    The first named distribution is compared with the second by
    :func:`~profiling_utils.stats.clearly_greater`, both ways: the claim reads ``greater``
    when the first is clearly the greater, ``less`` when the second is, and ``alike`` when
    the middle halves of the two overlap (a difference the run cannot tell from its noise).
    Like a claim with ``otherwise``, it always holds, and shows both distributions::

        which_is_greater(
            "a compiled step costs the CPU more than an eager one",
            "a compiled step costs the CPU less than an eager one",
            "compiled and eager steps cost the CPU alike, within the spread",
            compiled=cpu["compiled"],
            eager=cpu["eager"],
        )

    ``host_speed``, for CPU times taken from two recordings, is
    :func:`~profiling_utils.measures.host_speed_ratio` of the first's recording over the
    second's: where the host ran at different speeds
    (:func:`~profiling_utils.measures.speeds_alike` false), the claim says so instead of
    comparing the two.

    Raises:
        TypeError: When not given exactly two named distributions.
        ValueError: As :func:`~profiling_utils.stats.clearly_greater` does (too few samples
            on a side, or units that differ).
    """
    from .measures import speeds_alike  # the model's modules, only where a page asks

    if len(two) != 2:
        raise TypeError(f"which_is_greater() takes exactly two named timings, not {len(two)}")
    first, second = two.values()
    if host_speed is not None and not speeds_alike(host_speed[0]):
        names = " and ".join(two)
        statement = (
            f"the {names} recordings ran at different host speeds (the calls both make that "
            f"hold no call of their own took {host_speed[0]:.2f}x as long in the first): "
            "their CPU times do not compare"
        )
        return claim(statement, True, **two, host_speed_ratio=host_speed[0])
    if clearly_greater(first, second):
        statement = greater
    elif clearly_greater(second, first):
        statement = less
    else:
        statement = alike
    return claim(statement, True, **two)


def who_sets_the_pace(what: str, times: CallTimes) -> Claim:
    """Say whether the GPU or the CPU sets the pace of a call timed without the profiler.

    ``what`` names the call (``"an eager call"``, ``"a pinned cuDNN call"``) and ``times`` is
    what :func:`~profiling_utils.capture.time_per_call` measured of it. The claim reads by
    :attr:`~profiling_utils.capture.CallTimes.gpu_sets_the_pace`, then
    :attr:`~profiling_utils.capture.CallTimes.cpu_time_is_most`; where neither holds (the
    medians a fifth apart or more, the spreads overlapping) it says the run does not tell.
    It always holds, and shows the call's end-to-end time and the CPU's part of it.
    """
    if times.gpu_sets_the_pace:
        statement = (
            f"without the profiler, {what} takes clearly longer, by a fifth at least, than "
            "the CPU takes to make it: the GPU sets the pace"
        )
    elif times.cpu_time_is_most:
        statement = (
            f"without the profiler, {what} takes less than a fifth longer than the CPU "
            "takes to make it: the CPU's time is most of it"
        )
    else:
        statement = (
            f"without the profiler, {what} takes a fifth longer or more than the CPU takes "
            "to make it by their medians, but the two spreads overlap: this run does not "
            "say which side sets the pace"
        )
    return claim(statement, True, end_to_end=times.end_to_end, cpu=times.issue)


def read_claims(path: str | os.PathLike[str]) -> list[Claim]:
    """The claims recorded in a claims file, in the order they were made (``[]`` if none).

    Their numbers are the formatted strings that were recorded.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [Claim(**json.loads(line)) for line in text.splitlines() if line.strip()]


def mode() -> str:
    """How failed claims are handled now: ``"strict"`` or ``"report"`` (:data:`CLAIMS_MODE_ENV`)."""
    mode = os.environ.get(CLAIMS_MODE_ENV, STRICT).strip().lower() or STRICT
    if mode not in MODES:
        raise ValueError(f"{CLAIMS_MODE_ENV} must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def _example() -> str:
    """The running program's file name: the gallery example, or the script a user runs."""
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return script if script.endswith(".py") else ""


def _record(made: Claim) -> None:
    target = os.environ.get(CLAIMS_FILE_ENV)
    if not target:
        return
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps(made.as_dict(), ensure_ascii=False) + "\n")
