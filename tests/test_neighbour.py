"""GpuNeighbour's protocol with its process, on a stand-in program that needs no GPU: the
real one only swaps the sleep for GEMMs on the GPU."""

from __future__ import annotations

import pytest

from profiling_utils import neighbour
from profiling_utils.neighbour import GpuNeighbour

STAND_IN = r"""
import sys, time
size, gemms = int(sys.argv[1]), int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()
time.sleep(0.001 * gemms)
print(f"{1e3 * (time.perf_counter() - started):.3f}", flush=True)
"""


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(neighbour, "_PROGRAM", STAND_IN)


@pytest.mark.usefixtures("stand_in")
def test_a_burst_is_timed_by_the_neighbour() -> None:
    with GpuNeighbour(size=64, gemms=20) as other:
        assert other.burst_ms is None
        other.burst()
    assert other.burst_ms is not None and other.burst_ms >= 20.0


@pytest.mark.usefixtures("stand_in")
def test_burst_runs_once_and_only_inside_the_block() -> None:
    other = GpuNeighbour(gemms=1)
    with pytest.raises(RuntimeError, match="once"):
        other.burst()
    with other:
        other.burst()
        with pytest.raises(RuntimeError, match="once"):
            other.burst()


@pytest.mark.usefixtures("stand_in")
def test_leaving_without_a_burst_ends_the_process() -> None:
    with GpuNeighbour(gemms=1) as other:
        pass
    assert other.burst_ms is None
    assert other._process is not None and other._process.returncode == 0


def test_a_neighbour_that_cannot_start_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(neighbour, "_PROGRAM", "print('no GPU here', flush=True)")
    with pytest.raises(RuntimeError, match="no GPU here"), GpuNeighbour():
        pass
