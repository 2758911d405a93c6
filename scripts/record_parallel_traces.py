"""Record ``tests/fixtures/parallel``: two ranks, one GPU each, training as the common
parallel recipes do, so that the library's answers are checked on the collectives they use
(not only the all_reduce of ``tests/fixtures/nccl``).

Run on a machine with two GPUs, once per recipe::

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        scripts/record_parallel_traces.py tests/fixtures/parallel fsdp  # or pipeline...

Each rank writes ``OUT/RECIPE/rank{N}.json.gz`` through
:func:`profiling_utils.capture.export_trace`. The recipes:

- ``fsdp``: FSDP2 (``fully_shard``) of a four-layer MLP, AdamW: parameters all-gathered
  before each layer's forward and backward, gradients reduce-scattered after it, on NCCL's
  own streams (audited, not kept as a fixture: 280 KB for two ranks);
- ``pipeline``: two pipeline stages (rank 0 the first, rank 1 the second), four
  micro-batches sent forward and their gradients sent back with ``dist.send``/``dist.recv``
  (GPipe's order: every forward, then every backward): each rank waits in its receives while
  the other computes;
- ``alltoall``: a mixture-of-experts layer's exchange: tokens sent to their expert's rank
  with ``all_to_all_single``, an expert's MLP, and the results sent back; both ranks route
  three quarters of their tokens to rank 1, whose expert does three times rank 0's work, so
  rank 0 waits in the exchange that brings the results back;
- ``ddp_amp``: ``DistributedDataParallel`` with float16 autocast and ``GradScaler`` (whose
  ``step`` reads the inf check on the host: a sync every step);
- ``subgroups`` (four ranks, ``--nproc_per_node=4``): sends and receives inside process
  groups that are not the default one: rank 1 sends to rank 2 in the group [1, 2, 3] (after
  sleeping 2 ms on the host), rank 2 to rank 3 in [2, 3], ranks 2 and 3 exchange with
  ``batch_isend_irecv``, then an all_reduce over all four. Its schedule is wait=0, warmup=1,
  active=4 (``ProfilerStep#1`` to ``#4``);
- ``pipeline_batched`` (four ranks): four pipeline stages that pass four micro-batches
  forward as Megatron-LM does, with ``batch_isend_irecv``: at each tick a stage receives
  the next micro-batch from the stage before and sends its last output to the next in one
  batch (one kernel), then computes; stage 1 sleeps 1 ms on the host before each batch;
- ``tp_graph``: tensor parallelism as an inference server runs it: each rank holds half of
  four MLP layers' hidden units (column-parallel up, row-parallel down, then an all_reduce),
  a decode step's forward captured once in a CUDA graph and replayed eight times a step;
  rank 1 sleeps 0.5 ms on the host before each replay.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiling_utils.capture import export_trace  # noqa: E402

out = Path(sys.argv[1])
recipe = sys.argv[2]
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
torch.manual_seed(0)
DEV = "cuda"
WIDTH = 1024


def mlp(layers: int = 4) -> torch.nn.Sequential:
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*blocks).to(DEV)


def fsdp_steps():
    from torch.distributed.fsdp import fully_shard

    model = mlp()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(2048, WIDTH, device=DEV)

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def pipeline_steps():
    stage = mlp(2)
    optimizer = torch.optim.SGD(stage.parameters(), lr=1e-3)
    micro = [torch.randn(512, WIDTH, device=DEV) for _ in range(4)]

    def step() -> None:
        outputs, inputs = [], []
        with record_function("pipeline_forward"):
            for x in micro:
                if rank == 0:
                    y = stage(x)
                    dist.send(y.detach(), dst=1)
                    outputs.append(y)
                else:
                    received = torch.empty(512, WIDTH, device=DEV)
                    dist.recv(received, src=0)
                    received.requires_grad_(True)
                    inputs.append(received)
                    outputs.append(stage(received).pow(2).mean())
        with record_function("pipeline_backward"):
            for i, y in enumerate(outputs):
                if rank == 0:
                    grad = torch.empty_like(y)
                    dist.recv(grad, src=1)
                    y.backward(grad)
                else:
                    y.backward()
                    dist.send(inputs[i].grad, dst=0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def alltoall_steps():
    tokens = 4096
    expert = mlp(1)
    # Row r: how many of rank r's tokens go to rank 0 and to rank 1. Both ranks send three
    # quarters to rank 1, whose expert then does three times rank 0's work.
    splits = [[tokens // 4, 3 * tokens // 4], [tokens // 4, 3 * tokens // 4]]
    send = splits[rank]
    receive = [splits[source][rank] for source in range(world)]
    x = torch.randn(tokens, WIDTH, device=DEV)

    def step() -> None:
        with torch.no_grad():
            with record_function("dispatch"):
                routed = torch.empty(sum(receive), WIDTH, device=DEV)
                dist.all_to_all_single(routed, x, receive, send)
            with record_function("expert"):
                computed = expert(routed)
            with record_function("combine"):
                back = torch.empty(tokens, WIDTH, device=DEV)
                dist.all_to_all_single(back, computed, send, receive)
            back.sum()

    return step


def subgroups_steps():
    # Every rank creates every group, in the same order, as new_group requires.
    first_group, second_group = dist.new_group([1, 2, 3]), dist.new_group([2, 3])
    x = torch.ones(1 << 20, device=DEV)
    w = torch.randn(2048, 2048, device=DEV)

    def step() -> None:
        y = w @ w
        if rank == 1:
            time.sleep(0.002)
            dist.send(x, 2, group=first_group)
        elif rank == 2:
            dist.recv(x, 1, group=first_group)
            dist.send(x, 3, group=second_group)
        elif rank == 3:
            dist.recv(x, 2, group=second_group)
        if rank in (2, 3):
            peer = 3 if rank == 2 else 2
            ops = [
                dist.P2POp(dist.isend, x, peer, group=second_group),
                dist.P2POp(dist.irecv, torch.empty_like(x), peer, group=second_group),
            ]
            for request in dist.batch_isend_irecv(ops):
                request.wait()
        dist.all_reduce(y)
        torch.cuda.synchronize()

    return step


def pipeline_batched_steps():
    stage = mlp(2)
    micro = 4
    inputs = [torch.randn(512, WIDTH, device=DEV) for _ in range(micro)]

    def step() -> None:
        with torch.no_grad():
            output = None
            # At tick t, stage r computes micro-batch t - r: it receives it from stage r - 1
            # and sends micro-batch t - 1 - r (computed at the tick before) to stage r + 1.
            for tick in range(micro + world - 1):
                ops, received = [], None
                if rank > 0 and 0 <= tick - rank < micro:
                    received = torch.empty(512, WIDTH, device=DEV)
                    ops.append(dist.P2POp(dist.irecv, received, rank - 1))
                if rank < world - 1 and output is not None:
                    ops.append(dist.P2POp(dist.isend, output, rank + 1))
                if ops:
                    if rank == 1:
                        time.sleep(0.001)
                    for request in dist.batch_isend_irecv(ops):
                        request.wait()
                output = None
                if 0 <= tick - rank < micro:
                    output = stage(inputs[tick - rank] if rank == 0 else received)
        torch.cuda.synchronize()

    return step


def tp_graph_steps():
    hidden = 4 * WIDTH // world
    layers = [
        (
            torch.randn(WIDTH, hidden, device=DEV, dtype=torch.bfloat16) / WIDTH**0.5,
            torch.randn(hidden, WIDTH, device=DEV, dtype=torch.bfloat16) / hidden**0.5,
        )
        for _ in range(4)
    ]
    x = torch.randn(8, WIDTH, device=DEV, dtype=torch.bfloat16)

    def forward() -> torch.Tensor:
        y = x
        for up, down in layers:
            y = torch.nn.functional.gelu(y @ up) @ down
            dist.all_reduce(y)
        return y

    side = torch.cuda.Stream()  # capture wants its warm-up off the default stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        forward()

    def step() -> None:
        for _ in range(8):
            if rank == 1:
                time.sleep(0.0005)
            graph.replay()
        torch.cuda.synchronize()

    return step


def ddp_amp_steps():
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(mlp(), device_ids=[rank], bucket_cap_mb=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(2048, WIDTH, device=DEV)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


step = {
    "fsdp": fsdp_steps,
    "pipeline": pipeline_steps,
    "alltoall": alltoall_steps,
    "ddp_amp": ddp_amp_steps,
    "subgroups": subgroups_steps,
    "pipeline_batched": pipeline_batched_steps,
    "tp_graph": tp_graph_steps,
}[recipe]()
for _ in range(3):
    step()
torch.cuda.synchronize()
dist.barrier()
with profile(
    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
    schedule=schedule(wait=0 if recipe == "subgroups" else 1, warmup=1, active=4, repeat=1),
    record_shapes=True,
) as prof:
    for _ in range(5 if recipe == "subgroups" else 6):
        step()
        prof.step()
torch.cuda.synchronize()
target = out / recipe
target.mkdir(parents=True, exist_ok=True)
export_trace(prof, target / f"rank{rank}.json.gz")
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print(recipe, "done", sorted(p.name for p in target.iterdir()))
