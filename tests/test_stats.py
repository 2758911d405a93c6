"""profiling_utils.stats: medians with their spread, and differences larger than the noise."""

from __future__ import annotations

import pytest

from profiling_utils.stats import Distribution, clearly_greater


def test_a_distribution_has_its_median_quartiles_and_range() -> None:
    d = Distribution.of([5, 1, 4, 2, 3, 100], unit="µs")
    assert d.n == 6 and d.median == 3.5 and (d.min, d.max) == (1, 100)
    assert d.quartiles == (2.25, 4.75)  # one outlier does not move the spread
    assert d.iqr == 2.5
    assert str(d) == "median 3.5 µs (IQR 2.2–4.8, n=6)"


def test_one_sample_is_its_own_median_and_quartiles() -> None:
    d = Distribution.of([7.0])
    assert (d.median, d.quartiles, d.iqr) == (7.0, (7.0, 7.0), 0.0)
    with pytest.raises(ValueError, match="at least one"):
        Distribution.of([])


def test_clearly_greater_needs_the_middle_halves_apart() -> None:
    base = Distribution.of([100, 101, 102, 103, 104, 105], unit="µs")
    apart = Distribution.of([107, 108, 109, 110, 111, 112], unit="µs")
    overlapping = Distribution.of([102, 103, 104, 105, 106, 107], unit="µs")
    assert clearly_greater(apart, base)
    assert not clearly_greater(base, apart)
    assert not clearly_greater(overlapping, base)  # medians 2 µs apart, IQRs 2.5 µs


def test_three_steps_are_too_few_to_compare() -> None:
    many = Distribution.of(range(10), unit="µs")
    with pytest.raises(ValueError, match="at least 5 samples"):
        clearly_greater(Distribution.of([900, 901, 902], unit="µs"), many)


def test_distributions_in_different_units_are_not_compared() -> None:
    with pytest.raises(ValueError, match="cannot compare"):
        clearly_greater(Distribution.of(range(5), unit="ms"), Distribution.of(range(5), unit="µs"))
