"""profiling_utils.claims: a page's qualitative claims, checked over the run's values."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from profiling_utils.claims import (
    CLAIMS_FILE_ENV,
    CLAIMS_MODE_ENV,
    Claim,
    ClaimFailed,
    at_least_times,
    claim,
    format_number,
    read_claims,
    which_is_greater,
    who_sets_the_pace,
)
from profiling_utils.stats import Distribution
from profiling_utils.tables import PAGE_WIDTH


@pytest.fixture(autouse=True)
def _outside_a_docs_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLAIMS_FILE_ENV, raising=False)
    monkeypatch.delenv(CLAIMS_MODE_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", ["/home/someone/gallery/plot_07_kernel_variance.py"])


@pytest.fixture
def claims_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "plot_07_kernel_variance.claims.json"
    monkeypatch.setenv(CLAIMS_FILE_ENV, str(path))
    return path


def test_a_claim_that_holds_is_printed_and_returned_with_its_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    made = claim("the first step is the widest", 219.4 > 92.0, first_us=219.4, next_us=92.0)
    assert made == Claim(
        "the first step is the widest",
        True,
        {"first_us": 219.4, "next_us": 92.0},
        example="plot_07_kernel_variance.py",
    )
    printed = "Checked: the first step is the widest (first_us=219.4, next_us=92.0)\n"
    assert capsys.readouterr().out == printed


def test_a_long_claim_is_printed_on_lines_that_fit_the_page(
    capsys: pytest.CaptureFixture[str],
) -> None:
    statement = "the first step's GPU work starts at least 5x later after the step begins"
    at_least_times(statement, 5, first_step_us=2110.4, median_others_us=80.8)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(len(line) <= PAGE_WIDTH for line in lines)
    assert lines[0].startswith("Checked: the first step") and lines[1].startswith("    ")
    assert " ".join(line.strip() for line in lines).endswith(
        "(first_step_us=2110.4, median_others_us=80.8, ratio=26.1)"
    )


def test_a_claim_that_fails_raises_one_line_naming_the_file_the_claim_and_the_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ClaimFailed) as failed:
        claim("the first step is the widest", 80.0 > 92.0, first_us=80.0, next_us=92.0)
    assert capsys.readouterr().out == ""  # the exception says it, not a "Checked" line
    message = str(failed.value)
    assert message == (
        "plot_07_kernel_variance.py: claim did not hold: the first step is the widest "
        "(first_us=80.0, next_us=92.0)"
    )
    assert "\n" not in message and "/home/" not in message
    assert isinstance(failed.value, AssertionError)
    assert not failed.value.claim.holds


def test_report_mode_records_a_failed_claim_and_carries_on(
    claims_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLAIMS_MODE_ENV, "report")
    made = claim("p95 is within 10% of the median", False, p95_us=130.0, median_us=100.0)
    assert not made.holds
    assert str(made) == (
        "Did not hold: p95 is within 10% of the median (p95_us=130.0, median_us=100.0)"
    )
    (recorded,) = read_claims(claims_file)
    assert recorded == Claim(
        "p95 is within 10% of the median",
        False,
        {"p95_us": "130.0", "median_us": "100.0"},
        example="plot_07_kernel_variance.py",
        mode="report",
    )


def test_claims_are_recorded_in_order_in_a_docs_build_and_nowhere_outside(
    claims_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim("one", True, n=1)
    with pytest.raises(ClaimFailed):
        claim("two", False, n=2)
    lines = [json.loads(line) for line in claims_file.read_text().splitlines()]
    assert [(c["statement"], c["holds"], c["mode"]) for c in lines] == [
        ("one", True, "strict"),
        ("two", False, "strict"),
    ]
    monkeypatch.delenv(CLAIMS_FILE_ENV)
    claim("three", True)
    assert len(claims_file.read_text().splitlines()) == 2


@pytest.mark.parametrize(("holds", "shown"), [(True, "a new kernel"), (False, "the same kernel")])
def test_an_outcome_worded_claim_says_what_happened_and_always_holds(
    holds: bool, shown: str
) -> None:
    made = claim("a new kernel", holds, otherwise="the same kernel", eager="gemm_a", compiled="x")
    assert (made.statement, made.holds) == (shown, True)


def test_an_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CLAIMS_MODE_ENV, "lenient")
    with pytest.raises(ValueError, match="strict, report"):
        claim("anything", True)


def test_at_least_times_compares_the_first_number_with_the_second() -> None:
    made = at_least_times("5x the median", 5, first_us=500.0, median_us=90.0)
    assert made.holds and made.numbers == {"first_us": 500.0, "median_us": 90.0, "ratio": 500 / 90}
    with pytest.raises(ClaimFailed, match=r"ratio=4\.00"):
        at_least_times("5x the median", 5, first_us=360.0, median_us=90.0)
    with pytest.raises(TypeError, match="exactly two"):
        at_least_times("5x", 5, first_us=1.0)


@pytest.mark.parametrize(
    ("compiled", "eager", "shown"),
    [
        ([20.0, 21.0, 22.0, 23.0, 24.0], [10.0, 11.0, 12.0, 13.0, 14.0], "more"),
        ([10.0, 11.0, 12.0, 13.0, 14.0], [20.0, 21.0, 22.0, 23.0, 24.0], "less"),
        # Medians 12 and 13, but the middle halves (11-13, 12-14) overlap: noise.
        ([10.0, 11.0, 12.0, 13.0, 14.0], [11.0, 12.0, 13.0, 14.0, 15.0], "alike"),
    ],
)
def test_which_is_greater_words_the_claim_by_the_outcome(
    compiled: list[float], eager: list[float], shown: str
) -> None:
    made = which_is_greater(
        "more",
        "less",
        "alike",
        compiled=Distribution.of(compiled, "µs"),
        eager=Distribution.of(eager, "µs"),
    )
    assert (made.statement, made.holds) == (shown, True)
    assert list(made.numbers) == ["compiled", "eager"]


def test_which_is_greater_takes_two_timings_of_one_unit() -> None:
    timing = Distribution.of([1.0, 2.0, 3.0, 4.0, 5.0], "µs")
    with pytest.raises(TypeError, match="exactly two"):
        which_is_greater("a", "b", "c", only=timing)
    with pytest.raises(ValueError, match="cannot compare"):
        which_is_greater("a", "b", "c", t=timing, n=Distribution.of([1.0] * 5, "ns"))


def test_who_sets_the_pace_reads_the_timed_call() -> None:
    from profiling_utils.capture import CallTimes

    waits = CallTimes(Distribution.of([200, 201, 203, 199, 202]), Distribution.of([40] * 5))
    made = who_sets_the_pace("an eager call", waits)
    assert made.holds and made.statement.endswith("the GPU sets the pace")
    assert made.statement.startswith("without the profiler, an eager call takes clearly longer")
    assert made.numbers == {"end_to_end": waits.end_to_end, "cpu": waits.issue}
    busy = CallTimes(Distribution.of([50, 52, 51, 49, 50]), Distribution.of([49, 51, 50, 48, 50]))
    made = who_sets_the_pace("a compiled call", busy)
    assert made.holds and made.statement.endswith("the CPU's time is most of it")
    # Page 13's eager forward: 1.64x by the medians, but the CPU's spread reaches into the
    # time end to end. Neither side can be said to set the pace.
    overlapping = CallTimes(
        Distribution.of([265, 266, 267, 270, 271, 272, 300, 316, 317, 320]),
        Distribution.of([160, 161, 162, 163, 165, 166, 312, 313, 314, 316]),
    )
    assert not overlapping.gpu_sets_the_pace and not overlapping.cpu_time_is_most
    made = who_sets_the_pace("an eager forward", overlapping)
    assert made.holds and made.statement.endswith(
        "but the two spreads overlap: this run does not say which side sets the pace"
    )
    assert "less than a fifth" not in made.statement


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3912.44, "3912.4"),
        (92.0, "92.0"),
        (5.5555, "5.56"),
        (0.123456, "0.123"),
        (3, "3"),
        (True, "True"),
        ("sm90_xmma_gemm", "sm90_xmma_gemm"),
    ],
)
def test_numbers_are_shown_compactly(value: object, text: str) -> None:
    assert format_number(value) == text


def test_read_claims_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_claims(tmp_path / "never_ran.claims.json") == []


def test_which_is_greater_does_not_compare_cpu_times_of_hosts_at_other_speeds() -> None:
    pinned = Distribution.of([131.0, 130.0, 133.0, 129.0, 132.0], "µs")
    auto = Distribution.of([78.0, 77.0, 79.0, 76.0, 80.0], "µs")
    texts = ("pinned costs more", "pinned costs less", "alike")
    made = which_is_greater(*texts, host_speed=(1.62, 6), pinned=pinned, auto=auto)
    assert made.holds and made.statement.startswith(
        "the pinned and auto recordings ran at different host speeds"
    )
    assert "1.62x as long in the first" in made.statement
    assert made.numbers["host_speed_ratio"] == 1.62
    # At one speed (within a quarter), or with no reading of it, the timings compare.
    assert which_is_greater(*texts, host_speed=(1.1, 6), pinned=pinned, auto=auto).statement == (
        "pinned costs more"
    )
    assert which_is_greater(*texts, pinned=pinned, auto=auto).statement == "pinned costs more"
