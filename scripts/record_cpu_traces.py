"""Record ``tests/fixtures/cpu``: torch.compile on the CPU (Inductor; a C++ compiler needed, no
GPU), from its first call, so that the rules are checked on what compilation itself leaves in
a trace.

Run once per recipe::

    python scripts/record_cpu_traces.py tests/fixtures/cpu compile_forward
    python scripts/record_cpu_traces.py tests/fixtures/cpu compile_train

Each writes ``OUT/RECIPE.json.gz`` through :func:`profiling_utils.capture.export_trace`. Both
compile a ``Linear(64, 64), GELU, Linear(64, 64)`` model and profile four steps from its first
call (a batch of 32 twice, then of 16 twice: a recompilation for the new size), with
gradients enabled:

- ``compile_forward``: forward calls only. AOTAutograd still traces the backward graph while
  compiling (autograd nodes run under ``aot_trace_joint_graph``), but no backward pass runs;
- ``compile_train``: each step also runs ``loss.backward()``: the compiled backward runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiling_utils.capture import export_trace  # noqa: E402

out, recipe = Path(sys.argv[1]), sys.argv[2]
out.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
torch.set_num_threads(2)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 64))
compiled = torch.compile(model)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for step in range(4):
        output = compiled(torch.randn(32 if step < 2 else 16, 64))
        if recipe == "compile_train":
            output.sum().backward()
        prof.step()
export_trace(prof, out / f"{recipe}.json.gz")
