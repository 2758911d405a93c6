"""Record ``tests/fixtures/nccl``: two ranks, one GPU each, NCCL; a balanced run, one where
rank 1 stalls on the host before its collectives, and one (``overlapped``) where the
gradient's all_reduce is started with ``async_op=True`` before the products and waited for
after them, so that it runs beside them (as DDP overlaps it with the backward pass).

Run on a machine with two GPUs, once per run kind::

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        scripts/record_nccl_fixtures.py tests/fixtures/nccl balanced   # stalled, overlapped

Each rank writes ``OUT/{balanced|stalled|overlapped}/rank{N}.json.gz``, through
:func:`profiling_utils.capture.export_trace` (no path of the recording machine in it).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiling_utils.capture import export_trace  # noqa: E402

out = Path(sys.argv[1])
mode = sys.argv[2]
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
torch.manual_seed(rank)
dev = "cuda"
x = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
w = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)
grad = torch.randn(16 * 2**20, device=dev, dtype=torch.bfloat16)  # 32 MiB
small = torch.randn(1024, device=dev, dtype=torch.float32)
STALL_S = 0.010


def overlapped_step() -> None:
    # The gradient is ready: its all_reduce starts on NCCL's stream, and the products that
    # follow run beside it on the compute stream.
    with record_function("all_reduce_grad"):
        work = dist.all_reduce(grad, async_op=True)
    with record_function("forward_backward"):
        y = x @ w
        for _ in range(4):
            y = y @ w
    work.wait()
    with record_function("all_reduce_loss"):
        dist.all_reduce(small)
    torch.cuda.synchronize()


def step(i: int) -> None:
    if mode == "overlapped":
        overlapped_step()
        return
    with record_function("forward_backward"):
        y = x @ w
        for _ in range(4):
            y = y @ w
    if mode == "stalled" and rank == 1:
        with record_function("host_stall"):
            time.sleep(STALL_S)  # e.g. a slow data loader or logging on this rank only
    with record_function("all_reduce_grad"):
        dist.all_reduce(grad)
    with record_function("all_reduce_loss"):
        dist.all_reduce(small)
    torch.cuda.synchronize()  # like reading the loss every step


for i in range(3):
    step(i)
torch.cuda.synchronize()
dist.barrier()
with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
    schedule=schedule(wait=1, warmup=1, active=5),
    record_shapes=True,
) as prof:
    for i in range(7):
        step(i)
        prof.step()
torch.cuda.synchronize()
target = out / mode
target.mkdir(parents=True, exist_ok=True)
export_trace(prof, target / f"rank{rank}.json.gz")
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print(mode, "done", os.listdir(target))
