"""A second process that shares the GPU, to show on a trace what a busy neighbour does.

A GPU shared by two processes runs one process's kernels at a time, switching between them
(time-slicing). A kernel of the profiled process that is on the GPU when the neighbour's work
arrives takes longer, and nothing in the profiled process's trace shows why::

    calls = [0]
    with GpuNeighbour(size=8192, gemms=4) as neighbour:
        def step():
            calls[0] += 1
            if calls[0] == 15:
                neighbour.burst()  # four 8192 GEMMs in the other process, from now
            return a @ b
        run = capture(step, warmup_iters=3, wait=1, warmup=1, active=30)
    print(neighbour.burst_ms)  # how long the neighbour's burst took

The neighbour is a fresh Python interpreter (as in :mod:`profiling_utils.fresh`) that
allocates its matrices and warms its GEMM up before entering the ``with`` block returns, so
that only its burst lands in the profiled window.
"""

from __future__ import annotations

import subprocess
import sys
from types import TracebackType

__all__ = ["GpuNeighbour"]

_PROGRAM = r"""
import sys, time, torch
size, gemms = int(sys.argv[1]), int(sys.argv[2])
a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ a
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()
for _ in range(gemms):
    a @ a
torch.cuda.synchronize()
print(f"{1e3 * (time.perf_counter() - started):.3f}", flush=True)
"""


class GpuNeighbour:
    """Another process on the same GPU that runs a burst of bf16 GEMMs when told to.

    Use it as a context manager: entering starts the process and waits until it is ready;
    :meth:`burst` starts its GEMMs without waiting for them; leaving waits for the burst
    to end (if one was started) and for the process to exit.

    Args:
        size: The GEMMs' matrix size (``size x size`` bf16, multiplied by itself).
        gemms: GEMMs in the burst.
    """

    def __init__(self, size: int = 8192, gemms: int = 4) -> None:
        self.size = size
        self.gemms = gemms
        self.burst_ms: float | None = None
        """How long the burst took in the neighbour (ms), once it has ended."""
        self._process: subprocess.Popen[str] | None = None
        self._started = False

    def __enter__(self) -> GpuNeighbour:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _PROGRAM, str(self.size), str(self.gemms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        line = self._process.stdout.readline().strip()
        if line != "ready":
            self._process.kill()
            self._process.wait()
            raise RuntimeError(f"the GPU neighbour did not start (it said {line!r})")
        return self

    def burst(self) -> None:
        """Start the neighbour's GEMMs now (returns at once)."""
        if self._process is None or self._started:
            raise RuntimeError("burst() runs once, inside the with block")
        assert self._process.stdin is not None
        self._process.stdin.write("go\n")
        self._process.stdin.flush()
        self._started = True

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        process = self._process
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        if self._started:
            self.burst_ms = float(process.stdout.readline().strip())
        else:
            process.stdin.write("go\n")  # let it finish; its burst runs after our window
            process.stdin.flush()
            process.stdout.readline()
        process.stdin.close()
        process.wait(timeout=60)
