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
  profiler's own events only).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

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
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)

    def export_to(name: str) -> Callable[[profile], None]:
        return lambda prof: print(export_trace(prof, out / f"{name}.json.gz"))

    torch.manual_seed(0)
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
    ready = export_to("all_options_mlp_train")
    with profile(activities=BOTH, schedule=cycle, on_trace_ready=ready, **every_option) as prof:
        train(model, optimizer, x, 6, prof)

    cuda_only = [ProfilerActivity.CUDA]
    cycle = schedule(wait=0, warmup=1, active=3)
    ready = export_to("cuda_only_mlp_train")
    with profile(activities=cuda_only, schedule=cycle, on_trace_ready=ready) as prof:
        train(model, optimizer, x, 4, prof)

    # Exported after the block: the cycle ended at the fourth step, and the profiler that
    # the schedule had started again for a fifth recorded nothing of the program.
    with profile(activities=cuda_only, schedule=schedule(wait=0, warmup=1, active=3)) as prof:
        train(model, optimizer, x, 4, prof)
    export_to("empty_after_schedule_cycle")(prof)

    graphed = mlp().eval()
    static_x = torch.randn(64, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            graphed(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_y = graphed(static_x)
    cycle = schedule(wait=0, warmup=1, active=5)
    ready = export_to("cuda_graph_replay_steps")
    with profile(activities=BOTH, schedule=cycle, on_trace_ready=ready) as prof:
        for _ in range(6):
            static_x.copy_(torch.randn(64, 1024, device="cuda"))
            graph.replay()
            static_y.sum().item()
            prof.step()


if __name__ == "__main__":
    main()
