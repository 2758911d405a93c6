"""rate_report: a rate against the datasheet and the measured peaks, every share above 100%
explained; and the one copy convention (bytes copied, each once) from the trace to the page."""

from __future__ import annotations

import json
import math
import re
import statistics

import pytest
from conftest import gpu_fixture, run_cli
from synthetic_peaks import H100, h100_like_peaks

from profiling_utils import load_trace
from profiling_utils.measures import memory_copies
from profiling_utils.rates import RateReport, rate_report
from profiling_utils.rules import diagnose
from profiling_utils.tables import percent

MiB = 2**20


def flat(text: str) -> str:
    return " ".join(text.split())


def assert_every_share_above_100_is_explained(report: RateReport) -> None:
    text = flat(report.text())
    for share in report.shares:
        assert (share.explanation is not None) == (share.share > 1)
        assert (share.reason is not None) == (share.share > 1)
        assert share.sentence() in text  # the percentage is printed with its explanation
        if share.share > 1:
            assert percent(share.share) != "100%"


def compiled_bias_copies() -> tuple[str, list]:
    trace = load_trace(gpu_fixture("4096_bf16_warm_compile"))  # a 32 MiB bias copy per step
    copies = [c for c in memory_copies(trace) if c.kind == "DtoD" and c.step is not None]
    return trace.devices[0].name, copies


def test_the_copy_convention_is_bytes_copied_from_trace_to_summary_and_rules(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, copies = compiled_bias_copies()
    for copy in copies:
        # What Kineto writes in the copy's args is bytes over duration, each byte once.
        recorded = copy.span.args["memory bandwidth (GB/s)"]
        assert copy.bandwidth_gb_s == pytest.approx(recorded)
        assert copy.bandwidth_gb_s == pytest.approx(copy.bytes / copy.span.dur / 1e3)
    median = statistics.median(c.bandwidth_gb_s for c in copies)
    path = str(gpu_fixture("4096_bf16_warm_compile"))
    every = [c for c in memory_copies(load_trace(path)) if c.kind == "DtoD"]
    together = sum(c.bytes for c in every) / sum(c.span.dur for c in every) / 1e3
    _, out, _ = run_cli(capsys, "summary", path, "--json")
    (dtod,) = [m for m in json.loads(out)["memory"] if m["kind"] == "DtoD"]
    assert dtod["bandwidth_gb_s"] == pytest.approx(together)
    _, text, _ = run_cli(capsys, "summary", path)
    assert "10^9 bytes per second over the copies' time" in text
    assert re.search(r"DtoD .* GB/s copied", text)
    (finding,) = diagnose(load_trace(path), select=["bias-copy"])
    assert finding.evidence["median_bandwidth_gb_s"] == pytest.approx(median, abs=0.05)
    assert f"{median:,.0f} GB/s copied" in finding.message


def test_a_32_mib_copy_above_the_hbm_ceiling_fits_in_the_l2_cache() -> None:
    device, copies = compiled_bias_copies()
    copy = copies[0]
    report = rate_report(copy.bandwidth_gb_s, "copy", device=device, copy_bytes=copy.bytes)
    datasheet = report.share("datasheet")
    assert datasheet is not None
    # HBM carries each copied byte twice: the copy's ceiling is half of 3,350 GB/s.
    assert datasheet.peak == pytest.approx(3350 / 2)
    assert datasheet.share == pytest.approx(copy.bandwidth_gb_s / 1675) and datasheet.share > 1
    assert datasheet.reason == "l2-cache"
    assert "fit in the 50 MiB L2 cache" in datasheet.explanation  # type: ignore[operator]
    assert "a copy at HBM3 speed cannot pass" in datasheet.explanation  # type: ignore[operator]
    assert "likely reason" in datasheet.explanation  # type: ignore[operator]
    assert report.share("burst") is None and report.missing  # no GPU here, no measured peaks
    assert_every_share_above_100_is_explained(report)


def test_the_measured_copy_peaks_are_beaten_by_a_copy_that_fits_in_l2() -> None:
    report = rate_report(1777.0, "copy", peaks=h100_like_peaks(), copy_bytes=32 * MiB)
    assert [s.against for s in report.shares] == ["datasheet", "burst", "sustained"]
    for against in ("burst", "sustained"):
        share = report.share(against)
        assert share is not None and share.share > 1 and share.reason == "l2-cache"
        assert "1 GiB copy that set the peak does not" in share.explanation  # type: ignore[operator]
    # Short descriptions: the conditions are printed once, by Peaks.summary().
    assert report.share("burst").peak_description == "the burst peak measured here, 1,500 GB/s"  # type: ignore[union-attr]
    assert_every_share_above_100_is_explained(report)


def test_a_copy_above_the_ceiling_that_does_not_fit_in_l2_is_suspect() -> None:
    report = rate_report(2000.0, "copy", peaks=h100_like_peaks(), copy_bytes=2**30)
    datasheet = report.share("datasheet")
    assert "does not fit in the 50 MiB L2 cache" in datasheet.explanation  # type: ignore[operator,union-attr]
    assert "suspect" in datasheet.explanation  # type: ignore[operator,union-attr]
    assert "peak measurement is suspect" in report.share("burst").explanation  # type: ignore[operator,union-attr]
    assert_every_share_above_100_is_explained(report)
    unknown_l2 = rate_report(6000.0, "copy", device="AMD Instinct MI300X", copy_bytes=MiB)
    assert "no telling why" in unknown_l2.share("datasheet").explanation  # type: ignore[operator,union-attr]


def test_a_gemm_above_the_burst_peak_by_more_than_its_spread() -> None:
    peaks = h100_like_peaks()
    rate = peaks.matmul_burst.rate * 1.0129  # page 07's 101.29%
    assert rate > peaks.matmul_burst.rate_high
    report = rate_report(rate, "bf16", peaks=peaks, subject="4096 GEMM")
    burst = report.share("burst")
    assert burst is not None and percent(burst.share) == "101%"
    assert burst.reason == "suspect"
    assert "suspect as a ceiling" in burst.explanation  # type: ignore[operator]
    sustained = report.share("sustained")
    assert "above the burst peak too" in sustained.explanation  # type: ignore[operator,union-attr]
    assert report.share("datasheet").share < 1  # type: ignore[union-attr]
    assert report.text().startswith(f"{rate:,.0f} TFLOP/s (4096 GEMM) is")
    assert_every_share_above_100_is_explained(report)


def test_a_gemm_within_the_burst_spread() -> None:
    peaks = h100_like_peaks()
    rate = (peaks.matmul_burst.rate + peaks.matmul_burst.rate_high) / 2
    report = rate_report(rate, "bf16", peaks=peaks)
    burst = report.share("burst")
    assert burst is not None and burst.reason == "within-spread"
    assert "Within that measurement's spread" in burst.explanation  # type: ignore[operator]
    assert_every_share_above_100_is_explained(report)


def test_a_short_gemm_above_the_sustained_peak_is_explained_by_the_sustained_run() -> None:
    # The clock under a power cap swings between readings (1245-1410 MHz within seconds on
    # the H100): the explanation gives their median and range, never a first-to-last story.
    peaks = h100_like_peaks(sustained_clocks=(1440, 1365, 1410, 1275))
    with_clock = rate_report(740.0, "bf16", peaks=peaks)
    assert with_clock.share("burst").share < 1  # type: ignore[union-attr]
    assert with_clock.share("sustained").reason == "short-run"  # type: ignore[union-attr]
    explanation = with_clock.share("sustained").explanation
    assert "10% below the burst peak" in explanation  # type: ignore[operator]
    assert "median of 1388 MHz (1275-1440 MHz, 4 readings)" in explanation  # type: ignore[operator]
    assert "fallen" not in explanation  # type: ignore[operator]
    without_clock = rate_report(740.0, "bf16", peaks=h100_like_peaks(sustained_clocks=()))
    explanation = without_clock.share("sustained").explanation
    assert "10% below the burst peak" in explanation  # type: ignore[operator]
    assert "MHz" not in explanation  # type: ignore[operator]


@pytest.mark.parametrize("kind", ["bf16", "copy"])
def test_no_share_above_100_is_printed_without_its_explanation(kind: str) -> None:
    peaks = h100_like_peaks()
    for rate in [1.0, 500, 700, 712, 713, 740, 794, 795, 796, 803, 990, 1500, 1777, 2000, 4000]:
        for copy_bytes in (None, 32 * MiB, 2**30) if kind == "copy" else (None,):
            report = rate_report(rate, kind, peaks=peaks, copy_bytes=copy_bytes)  # type: ignore[arg-type]
            assert_every_share_above_100_is_explained(report)


def test_a_share_just_above_100_is_not_rounded_down_to_it() -> None:
    assert percent(1.004) == "100.4%"
    assert percent(0.996) == "99.6%"
    assert percent(1.0) == "100%"
    assert percent(0.72) == "72%"
    assert percent(0.0042) == "0.42%"


def test_a_tiny_share_is_not_printed_as_none() -> None:
    # 4 µs of GPU busy time in a 100,298 µs step (HTA's trace_compare traces).
    assert percent(4 / 100_298) == "<0.01%"
    assert percent(0.00005) == "0.01%"
    assert percent(0.0) == "0%"


def test_peaks_apply_only_to_their_device_and_dtype() -> None:
    peaks = h100_like_peaks()
    other = rate_report(200.0, "bf16", device="NVIDIA A100-SXM4-80GB", peaks=peaks)
    assert [s.against for s in other.shares] == ["datasheet"]
    assert other.share("datasheet").peak == 312.0  # type: ignore[union-attr]
    assert "measured on a NVIDIA H100 80GB HBM3" in other.missing[0]
    fp32 = rate_report(40.0, "fp32", peaks=peaks)
    assert [s.against for s in fp32.shares] == ["datasheet"]
    assert "this is a fp32 GEMM" in fp32.missing[0]
    nothing = rate_report(40.0, "bf16", device="AMD Radeon Graphics")
    assert nothing.shares == ()
    assert "compared with no peak" in nothing.text()
    assert "No datasheet bf16 peak for AMD Radeon Graphics" in nothing.text()
    assert rate_report(40.0, "bf16", peaks=peaks).share("burst") is not None  # device defaults
    assert peaks.device == H100


@pytest.mark.parametrize("rate", [0.0, -1.0, math.nan, math.inf])
def test_a_rate_must_be_a_positive_number(rate: float) -> None:
    with pytest.raises(ValueError, match="rate must be a positive number"):
        rate_report(rate, "bf16", device=H100)


def test_an_unknown_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="kind must be"):
        rate_report(1.0, "int8", device=H100)  # type: ignore[arg-type]
