"""Timings as distributions, so that a page calls nothing a cost that is smaller than the noise.

One step of a profiled run is a sample, not a measurement: the next step differs by some
microseconds for no reason the page could name. A timing that a page compares is therefore
the median over many steps, printed with its spread, and a difference counts only when it is
larger than that spread (:func:`clearly_greater`)::

    eager = Distribution.of([t.cpu_us for t in step_times(eager_trace)], unit="µs")
    compiled = Distribution.of([t.cpu_us for t in step_times(compiled_trace)], unit="µs")
    print(f"eager: {eager}\\ncompiled: {compiled}")  # median 101.2 µs (IQR 97.0–106.3, n=20)
    claim("compiled steps are quicker than eager ones", clearly_greater(eager, compiled),
          eager=eager, compiled=compiled)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MIN_SAMPLES_TO_COMPARE", "Distribution", "clearly_greater"]

MIN_SAMPLES_TO_COMPARE = 5
"""Fewest samples on each side for :func:`clearly_greater`: with fewer, quartiles say little."""


@dataclass(frozen=True)
class Distribution:
    """Samples of one timing (or any quantity): their median and how far they spread.

    Build it with :meth:`of`. The spread is the interquartile range (IQR), the middle half of
    the samples, which one outlying step does not move.
    """

    samples: tuple[float, ...]
    """The samples, in the order they were taken."""
    unit: str = ""
    """Unit shown after the numbers (``"µs"``)."""

    @classmethod
    def of(cls, samples: Iterable[float], unit: str = "") -> Distribution:
        """The distribution of ``samples`` (at least one)."""
        values = tuple(float(s) for s in samples)
        if not values:
            raise ValueError("a Distribution needs at least one sample")
        return cls(values, unit)

    @property
    def n(self) -> int:
        """Number of samples."""
        return len(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def quartiles(self) -> tuple[float, float]:
        """Lower and upper quartile (inclusive method; both the sample for one sample)."""
        if self.n == 1:
            return self.samples[0], self.samples[0]
        q1, _, q3 = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q1, q3

    @property
    def iqr(self) -> float:
        """Interquartile range: upper quartile minus lower quartile."""
        q1, q3 = self.quartiles
        return q3 - q1

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def __str__(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        q1, q3 = self.quartiles
        return f"median {self.median:.1f}{unit} (IQR {q1:.1f}–{q3:.1f}, n={self.n})"


def clearly_greater(a: Distribution, b: Distribution) -> bool:
    """Whether ``a`` is larger than ``b`` by more than their spread.

    True when the middle halves of the two do not overlap: ``a``'s lower quartile is above
    ``b``'s upper quartile. For symmetric samples that is a difference of medians larger
    than half of each IQR added together. A difference smaller than that is noise of the
    run, not a cost.

    Raises:
        ValueError: When either side has fewer than :data:`MIN_SAMPLES_TO_COMPARE` samples
            (three steps cannot tell a cost from noise), or the units differ.
    """
    for side in (a, b):
        if side.n < MIN_SAMPLES_TO_COMPARE:
            raise ValueError(
                f"comparing timings needs at least {MIN_SAMPLES_TO_COMPARE} samples on each "
                f"side, got {side.n}: record more steps"
            )
    if a.unit != b.unit:
        raise ValueError(f"cannot compare {a.unit!r} with {b.unit!r}")
    return a.quartiles[0] > b.quartiles[1]
