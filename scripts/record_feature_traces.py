"""Record the traces of ``tests/fixtures/features/``: profiler settings the gallery's own
recordings do not use, written as ``torch.profiler`` writes them for anyone.

Run on a CUDA machine from the repository root::

    python scripts/record_feature_traces.py --out tests/fixtures/features

Each trace is written by :func:`profiling_utils.capture.export_trace` (``export_chrome_trace``
naming no directory of the machine):

- ``all_options_mlp_train``: a small MLP's training steps with every option on
  (``record_shapes``, ``profile_memory``, ``with_stack``, ``with_flops``, ``with_modules``)
  and ``loss.item()`` at the end of each step;
- ``cuda_only_mlp_train``: the same steps profiled with ``ProfilerActivity.CUDA`` alone (no
  op, label or step on the host, only runtime calls);
- ``cuda_graph_replay_steps``: a ``torch.cuda.CUDAGraph`` of an MLP replayed once per step,
  each step ending in ``.item()``;
- ``empty_after_schedule_cycle``: what ``export_chrome_trace`` writes when called after the
  ``with`` block of a profiler whose schedule's active steps had already ended (the
  profiler's own events only);
- ``dataloader_workers_pinned``: training steps fed by a ``DataLoader`` with two worker
  processes and ``pin_memory=True``, each batch copied with ``non_blocking=True``;
- ``side_stream_prefetch``: each step's next batch copied from pinned memory on a side stream
  while the current batch computes on the default stream (copy and compute overlap);
- ``decode_loop_no_steps``: a small model generating 48 tokens one at a time with a growing
  key/value cache, each token read on the host (``.item()``) to test for the end token,
  profiled as a whole, without a schedule or steps (as serving and inference scripts do).

- ``varying_batch_cudnn_benchmark``: a small convolutional network trained with
  ``torch.backends.cudnn.benchmark = True`` on batches whose size changes from step to step
  (48, 32, 64, 32, 80, 32 after a warm-up at 32): cuDNN times its candidate algorithms on
  the first call with each new size.
- ``two_devices_model_parallel`` (two GPUs): one process training two layers on ``cuda:0``
  and two on ``cuda:1``, the activations copied from one GPU to the other each step (naive
  model parallelism: the GPUs take turns).
- ``data_parallel_two_gpus`` (two GPUs): ``torch.nn.DataParallel`` over both GPUs, in one
  process (replicas in threads, gradients summed with NCCL's broadcast and reduce).
- ``empty_cache_every_step``: a small MLP's forward and backward with
  ``torch.cuda.empty_cache()`` at the end of each step (the allocator's memory given back to
  the driver and taken again every step).
- ``recompile_one_step``: a small compiled MLP warmed up at one batch size; one recorded step
  gets another size, and torch.compile compiles the frame again inside that step.
- ``gradient_accumulation_steps``: a small MLP trained with gradients accumulated over four
  batches, one profiler step per batch: every fourth step also runs AdamW's update and
  zeroes the gradients.
- ``amp_grad_scaler_steps``: a small MLP trained in fp16 under ``torch.autocast`` with a
  ``GradScaler``, whose ``step`` reads on the host whether the gradients hold an inf or NaN
  (a sync in every step).
- ``graph_capture_in_step``: a small MLP served with one CUDA graph per batch size, each
  captured on the first batch of its size: one recorded step captures, the others replay.
- ``compile_reduce_overhead_capture``: a small MLP trained under
  ``torch.compile(mode="reduce-overhead")`` and profiled from its first call: the profiler's
  warm-up step compiles, the first recorded step captures the CUDA graphs, the rest replay.
- ``autotune_in_step``: a pointwise function compiled with Inductor's coordinate descent
  tuning and profiled from its first call, which tunes the kernel: candidate kernels and
  cache flushes launched while torch.compile compiles.

``--only NAME ...`` records some of them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiling_utils.capture import export_trace  # noqa: E402

BOTH = [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).cuda()


def train(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    steps: int,
    prof: profile | None = None,
) -> None:
    for _ in range(steps):
        with record_function("forward"):
            loss = model(x).float().pow(2).mean()
        with record_function("backward"):
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()
        if prof is not None:
            prof.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="+", choices=sorted(RECORDINGS))
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only or RECORDINGS:
        torch.manual_seed(0)
        RECORDINGS[name](out)


def record_options_and_graphs(out: Path) -> None:
    """The first four traces (they share one model)."""
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(512, 1024, device="cuda")
    train(model, optimizer, x, 3)  # warm: cuBLAS handles, the optimizer's state

    every_option = dict(
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
        with_flops=True,
        with_modules=True,
    )
    cycle = schedule(wait=1, warmup=1, active=4)
    ready = export_to(out, "all_options_mlp_train")
    with profile(activities=BOTH, schedule=cycle, on_trace_ready=ready, **every_option) as prof:
        train(model, optimizer, x, 6, prof)

    cuda_only = [ProfilerActivity.CUDA]
    cycle = schedule(wait=0, warmup=1, active=3)
    ready = export_to(out, "cuda_only_mlp_train")
    with profile(activities=cuda_only, schedule=cycle, on_trace_ready=ready) as prof:
        train(model, optimizer, x, 4, prof)

    # Exported after the block: the cycle ended at the fourth step, and the profiler that
    # the schedule had started again for a fifth recorded nothing of the program.
    with profile(activities=cuda_only, schedule=schedule(wait=0, warmup=1, active=3)) as prof:
        train(model, optimizer, x, 4, prof)
    export_to(out, "empty_after_schedule_cycle")(prof)

    static_x = torch.randn(64, 1024, device="cuda")
    graph, static_y = capture_graph(mlp().eval(), static_x)
    cycle = schedule(wait=0, warmup=1, active=5)
    ready = export_to(out, "cuda_graph_replay_steps")
    with profile(activities=BOTH, schedule=cycle, on_trace_ready=ready) as prof:
        for _ in range(6):
            static_x.copy_(torch.randn(64, 1024, device="cuda"))
            graph.replay()
            static_y.sum().item()
            prof.step()


def capture_graph(
    model: torch.nn.Module, static_x: torch.Tensor
) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """``model``'s forward on ``static_x`` captured into a CUDA graph, after three warm-up runs
    on a side stream (as PyTorch's CUDA graph recipe does): the graph and its output."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_y = model(static_x)
    return graph, static_y


def export_to(out: Path, name: str) -> Callable[[profile], None]:
    return lambda prof: print(export_trace(prof, out / f"{name}.json.gz"))


def record_dataloader(out: Path) -> None:
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    data = torch.utils.data.TensorDataset(torch.randn(256 * 8, 1024))
    loader = torch.utils.data.DataLoader(
        data, batch_size=256, num_workers=2, pin_memory=True, persistent_workers=True
    )
    for (x,) in loader:  # warm: the workers, the optimizer's state
        train(model, optimizer, x.cuda(non_blocking=True), 1)
    cycle = schedule(wait=1, warmup=1, active=4, repeat=1)
    ready = export_to(out, "dataloader_workers_pinned")
    with profile(activities=BOTH, schedule=cycle, on_trace_ready=ready) as prof:
        for (x,) in loader:  # 8 batches: 6 steps profiled, 2 after the cycle
            train(model, optimizer, x.cuda(non_blocking=True), 1, prof)


def record_side_stream(out: Path) -> None:
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    batches = [torch.randn(4096, 1024).pin_memory() for _ in range(8)]
    side = torch.cuda.Stream()

    def prefetch(i: int) -> torch.Tensor:
        with torch.cuda.stream(side):
            batch = batches[i % len(batches)].to("cuda", non_blocking=True)
        return batch

    current = prefetch(0)
    torch.cuda.current_stream().wait_stream(side)
    train(model, optimizer, current, 3)
    cycle = schedule(wait=1, warmup=1, active=4, repeat=1)
    ready = export_to(out, "side_stream_prefetch")
    with profile(activities=BOTH, schedule=cycle, on_trace_ready=ready) as prof:
        for i in range(6):
            following = prefetch(i + 1)  # copies while this step computes
            train(model, optimizer, current, 1)
            torch.cuda.current_stream().wait_stream(side)
            current.record_stream(torch.cuda.current_stream())
            current = following
            prof.step()


class _Decoder(torch.nn.Module):
    """A small decoder-only model whose attention reads a growing key/value cache."""

    def __init__(self, vocab: int = 4096, width: int = 512, layers: int = 4) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(width, 3 * width) for _ in range(layers))
        self.out = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        self.head = torch.nn.Linear(width, vocab)
        self.heads = 8

    def forward(self, token: torch.Tensor, cache: list) -> torch.Tensor:
        h = self.embed(token)[:, None]  # (batch, 1, width)
        for i, (qkv, out) in enumerate(zip(self.qkv, self.out, strict=True)):
            q, k, v = qkv(h).chunk(3, dim=-1)
            if len(cache) <= i:
                cache.append((k, v))
            else:
                cache[i] = (torch.cat([cache[i][0], k], 1), torch.cat([cache[i][1], v], 1))
            k, v = cache[i]
            split = [t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v)]
            attended = torch.nn.functional.scaled_dot_product_attention(*split)
            h = h + out(attended.transpose(1, 2).flatten(2))
        return self.head(h[:, -1])


def record_decode_loop(out: Path) -> None:
    model = _Decoder().cuda().half().eval()
    end_token = -1  # never produced: the loop runs its 48 tokens

    def generate(tokens: int) -> None:
        cache: list = []
        token = torch.zeros(4, dtype=torch.long, device="cuda")
        with torch.no_grad():
            for _ in range(tokens):
                token = model(token, cache).argmax(-1)
                if (token == end_token).any().item():
                    break

    generate(8)  # warm
    with profile(activities=BOTH, record_shapes=True) as prof:
        generate(48)
    export_to(out, "decode_loop_no_steps")(prof)


def record_varying_batch(out: Path) -> None:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    ).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        sizes = [32, 48, 32, 64, 32, 80, 32]  # the first, the schedule's warm-up step
        images = {n: torch.randn(n, 3, 64, 64, device="cuda") for n in sizes}
        train(model, optimizer, images[32], 3)  # warm at 32 only
        cycle = schedule(wait=0, warmup=1, active=6, repeat=1)
        ready = export_to(out, "varying_batch_cudnn_benchmark")
        with profile(
            activities=BOTH, schedule=cycle, on_trace_ready=ready, record_shapes=True
        ) as prof:
            for n in sizes:
                train(model, optimizer, images[n], 1, prof)
    finally:
        torch.backends.cudnn.benchmark = previous


def _wide_mlp() -> torch.nn.Sequential:
    """Two 2048-wide layers with GELU, on the CPU (moved by the caller)."""
    return torch.nn.Sequential(
        torch.nn.Linear(2048, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 2048), torch.nn.GELU()
    )


def _record_four_steps(out: Path, name: str, step: Callable[[], None]) -> None:
    """Profile ``step`` with a schedule of one step waited, one warmed up and four recorded."""
    _record_each(out, name, lambda _: step(), range(6))


def _record_each(out: Path, name: str, step: Callable[[Any], object], inputs: Sequence) -> None:
    """Profile one step per input, ``step(input)``, with a schedule of one step waited, one
    warmed up and the rest recorded."""
    ready = export_to(out, name)
    with profile(
        activities=BOTH,
        schedule=schedule(wait=1, warmup=1, active=len(inputs) - 2),
        on_trace_ready=ready,
    ) as prof:
        for value in inputs:
            step(value)
            prof.step()


def _warm_on_two_gpus(step: Callable[[], None]) -> None:
    """Two untimed steps (cuBLAS handles, the optimizer's state), then both GPUs drained."""
    for _ in range(2):
        step()
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)


def record_two_devices(out: Path) -> None:
    """Needs two GPUs: naive model parallelism, one process running its first two layers on
    ``cuda:0`` and the last two on ``cuda:1``, the activations copied across each step."""
    first, second = _wide_mlp().to("cuda:0"), _wide_mlp().to("cuda:1")
    optimizer = torch.optim.AdamW([*first.parameters(), *second.parameters()])
    x = torch.randn(1024, 2048, device="cuda:0")

    def step() -> None:
        second(first(x).to("cuda:1")).float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    _warm_on_two_gpus(step)
    _record_four_steps(out, "two_devices_model_parallel", step)


def record_empty_cache(out: Path) -> None:
    """``torch.cuda.empty_cache()`` at the end of every step: the caching allocator gives its
    memory back to the driver, and takes it again from ``cudaMalloc`` in the next step."""
    model = _wide_mlp().cuda()
    x = torch.randn(4096, 2048, device="cuda")

    def step() -> None:
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()

    step()
    _record_four_steps(out, "empty_cache_every_step", step)


def record_data_parallel(out: Path) -> None:
    """Needs two GPUs: ``torch.nn.DataParallel`` over both, in one process: each step scatters
    the batch, runs a replica on each GPU in threads of its own, and sums the gradients on
    GPU 0 with NCCL's broadcast and reduce."""
    model = _wide_mlp().cuda()
    replicated = torch.nn.DataParallel(model, device_ids=[0, 1])
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(2048, 2048, device="cuda")

    def step() -> None:
        replicated(x).float().pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    _warm_on_two_gpus(step)
    _record_four_steps(out, "data_parallel_two_gpus", step)


def record_recompile_one_step(out: Path) -> None:
    """A small MLP compiled with ``torch.compile`` and warmed up at a batch of 64; one recorded
    step (``ProfilerStep#4``) gets a batch of 96, so Dynamo compiles the frame again (region
    ``0/1``, with dynamic shapes) inside that step. Inductor's autotuning of pointwise kernels
    is off to keep the trace small."""
    import torch._inductor.config as inductor_config

    inductor_config.triton.autotune_pointwise = False
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU()
    ).cuda()
    compiled = torch.compile(model)
    sizes = [64, 64, 64, 64, 96, 64, 64, 64]

    def step(size: int) -> None:
        x = torch.randn(size, 256, device="cuda")
        compiled(x).float().pow(2).mean().backward()

    for _ in range(3):
        step(64)
    _record_each(out, "recompile_one_step", step, sizes)


def record_gradient_accumulation(out: Path) -> None:
    """One profiler step per batch, the gradients of four batches accumulated before each
    AdamW update: the update and ``zero_grad`` run in every fourth step (``ProfilerStep#3``,
    ``#7`` and ``#11`` of the twelve recorded, ``#2`` to ``#13``)."""
    model = _wide_mlp().cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(256, 2048, device="cuda")
    accumulated = 4

    def step(index: int) -> None:
        with record_function("forward_backward"):
            (model(x).float().pow(2).mean() / accumulated).backward()
        if (index + 1) % accumulated == 0:
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

    for index in range(2 * accumulated):  # warm: cuBLAS handles, the optimizer's state
        step(index)
    torch.cuda.synchronize()
    _record_each(out, "gradient_accumulation_steps", step, range(14))


def record_amp_grad_scaler(out: Path) -> None:
    """fp16 autocast with ``torch.amp.GradScaler``: ``scaler.step`` checks the unscaled
    gradients for inf or NaN and reads the answer on the host before AdamW's update, every
    step; four steps recorded."""
    model = torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(16384, 4096, device="cuda")  # enough work that the GPU sets the pace

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):  # warm: cuBLAS handles, the optimizer's state, the scale settled
        step()
    torch.cuda.synchronize()
    _record_four_steps(out, "amp_grad_scaler_steps", step)


def record_graph_capture_in_step(out: Path) -> None:
    """A small MLP served with one CUDA graph per batch size, each captured on the first batch
    of its size (warmed up on a side stream, then ``torch.cuda.graph``) and replayed after:
    the recorded steps get batches of 32, 64, 32, 64, 64 and 32 after two untimed steps at
    32, so only ``ProfilerStep#3`` (the first batch of 64) captures."""
    model = mlp().eval()
    graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}

    def serve(size: int) -> float:
        if size not in graphs:
            static_x = torch.randn(size, 1024, device="cuda")
            graphs[size] = (*capture_graph(model, static_x), static_x)
        graph, static_y, static_x = graphs[size]
        static_x.copy_(torch.randn(size, 1024, device="cuda"))
        graph.replay()
        return static_y.sum().item()

    _record_each(out, "graph_capture_in_step", serve, [32, 32, 32, 64, 32, 64, 64, 32])


def record_compile_reduce_overhead_capture(out: Path) -> None:
    """A small MLP trained under ``torch.compile(mode="reduce-overhead")``, profiled from its
    first call with the usual schedule (no step waited, one warmed up, four recorded): the
    warm-up step compiles the forward and backward graphs and runs them once (CUDA graph
    trees' warm-up run), the first recorded step (``ProfilerStep#1``) captures them, and the
    three after it replay them."""
    import torch._inductor.config as inductor_config

    inductor_config.triton.autotune_pointwise = False
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU()
    ).cuda()
    compiled = torch.compile(model, mode="reduce-overhead")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device="cuda")
    ready = export_to(out, "compile_reduce_overhead_capture")
    with profile(
        activities=BOTH, schedule=schedule(wait=0, warmup=1, active=4), on_trace_ready=ready
    ) as prof:
        for _ in range(5):
            torch.compiler.cudagraph_mark_step_begin()
            compiled(x).float().pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            prof.step()


def record_autotune_in_step(out: Path) -> None:
    """A ReLU and scale over 4M floats compiled with Inductor's coordinate descent tuning on
    (and its caches off, so that every run compiles and tunes), profiled from its first call
    (four steps recorded, no schedule step waited or warmed up): at that call the compiled
    kernel is tuned, its candidate launch configurations benchmarked on the GPU with a cache
    flush before each run."""
    import torch._inductor.config as inductor_config

    inductor_config.force_disable_caches = True
    inductor_config.coordinate_descent_tuning = True
    x = torch.randn(4 * 1024 * 1024, device="cuda")
    compiled = torch.compile(lambda t: torch.relu(t) * 2.0)
    ready = export_to(out, "autotune_in_step")
    with profile(
        activities=BOTH,
        schedule=schedule(wait=0, warmup=0, active=4, repeat=1),
        on_trace_ready=ready,
    ) as prof:
        for _ in range(4):
            compiled(x)
            torch.cuda.synchronize()
            prof.step()


RECORDINGS: dict[str, Callable[[Path], None]] = {
    "options_and_graphs": record_options_and_graphs,
    "dataloader_workers_pinned": record_dataloader,
    "side_stream_prefetch": record_side_stream,
    "decode_loop_no_steps": record_decode_loop,
    "varying_batch_cudnn_benchmark": record_varying_batch,
    "two_devices_model_parallel": record_two_devices,
    "empty_cache_every_step": record_empty_cache,
    "data_parallel_two_gpus": record_data_parallel,
    "recompile_one_step": record_recompile_one_step,
    "gradient_accumulation_steps": record_gradient_accumulation,
    "amp_grad_scaler_steps": record_amp_grad_scaler,
    "graph_capture_in_step": record_graph_capture_in_step,
    "compile_reduce_overhead_capture": record_compile_reduce_overhead_capture,
    "autotune_in_step": record_autotune_in_step,
}


if __name__ == "__main__":
    main()
