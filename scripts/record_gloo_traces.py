"""Record ``tests/fixtures/gloo``: two ranks on the CPU, their collectives on the Gloo backend,
so that the cross-rank analysis is checked on collectives that run on the host (``gloo:<op>``
ranges on Gloo's worker threads; no kernel).

Run on any machine (no GPU needed), once per recipe (``slow`` is kept as a fixture)::

    python scripts/record_gloo_traces.py tests/fixtures/gloo even
    python scripts/record_gloo_traces.py tests/fixtures/gloo slow

Each rank writes ``OUT/RECIPE/rank{N}.json.gz`` through
:func:`profiling_utils.capture.export_trace`. Each of six steps (wait=1, warmup=1, active=4)
runs five 128x128 matmuls and an all_reduce of 1 MiB (float32), with a barrier in step 3. In
``slow``, rank 1 sleeps 20 ms on the host before the all_reduce of steps 2, 3 and 4: rank 0
then waits for it in the all_reduce, and both ranks' steps are about as long.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiling_utils.capture import export_trace  # noqa: E402

SLOW_STEPS = {"even": (), "slow": (2, 3, 4)}
STEPS = 6


def record(rank: int, world: int, out: Path, slow_steps: tuple[int, ...]) -> None:
    dist.init_process_group(
        "gloo", init_method="tcp://127.0.0.1:29534", rank=rank, world_size=world
    )
    torch.set_num_threads(1)
    torch.manual_seed(0)
    gradients = torch.randn(256 * 1024)
    weights = torch.randn(128, 128)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=STEPS - 2, repeat=1),
        on_trace_ready=lambda prof: export_trace(prof, out / f"rank{rank}.json.gz"),
    ) as prof:
        for step in range(STEPS):
            for _ in range(5):
                weights @ weights
            if rank == 1 and step in slow_steps:
                time.sleep(0.02)
            dist.all_reduce(gradients)
            if step == 3:
                dist.barrier()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, recipe = Path(sys.argv[1]), sys.argv[2]
    (out / recipe).mkdir(parents=True, exist_ok=True)
    mp.spawn(record, args=(2, out / recipe, SLOW_STEPS[recipe]), nprocs=2)
