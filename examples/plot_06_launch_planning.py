"""
Launch planning: which kernels ask before they launch?
======================================================

*In the post's A100 trace, the matrix product's launch comes after an occupancy query and the
bias add's launch does not. On this GPU, which kernels are planned before they are launched,
through which launch call, and what do they ask of the hardware?*

A kernel launch names a grid of thread blocks, and each block needs registers and shared
memory on a streaming multiprocessor (SM). An elementwise kernel needs little of either, so
PyTorch launches it with a fixed shape and nothing to work out. A GEMM library has many
kernels for one product and sizes each launch to the GPU, so it may ask the CUDA runtime
first: how many blocks fit on an SM (``cudaOccupancy*``), what a kernel needs
(``cudaFuncGetAttributes``). Those *planning calls* sit in the trace right before the launch.

The `Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ saw
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` before every GEMM launch on its A100. We
look for planning calls on this machine, for two kernels (a GEMM and the bias add), two
dtypes and two sizes, and read each kernel's resource footprint from the trace.
"""

# %%
# The runs
# --------
# The post's ``matmul_add``, warmed up and recorded with its schedule, in bf16 and in fp32,
# at the post's two sizes (at small sizes only on a machine without a GPU, where there are
# no kernels to inspect but the runs still work).

import collections
import subprocess
import sys

import torch

from profiling_utils import capture, diagnose, load_trace, run_name
from profiling_utils.measures import kernel_launches
from profiling_utils.render import (
    Highlight,
    findings_table,
    highlight_span,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
sizes = (64, 4096) if device == "cuda" else (64,)
dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}


def matmul_add(x, w, b):
    return torch.add(torch.matmul(x, w), b)


def profile(size, dtype_name):
    x, w, b = (torch.randn(size, size, device=device, dtype=dtypes[dtype_name]) for _ in range(3))
    return capture(
        lambda: matmul_add(x, w, b),
        name=run_name(size, dtype_name, warm=True),
        label="matmul_add",
        warmup_iters=3,
        out_dir=trace_dir(),
    )


runs = {(size, dtype_name): profile(size, dtype_name) for size in sizes for dtype_name in dtypes}
print(f"{len(runs)} runs on {torch.cuda.get_device_name() if device == 'cuda' else 'the CPU'}")

# %%
# How each kernel was launched
# ----------------------------
# :func:`~profiling_utils.measures.kernel_launches` follows every kernel back to its launch
# call and to the operator that made it. Its *planning calls* are the occupancy and
# attribute queries made inside that operator since its previous launch. The trace also
# records the kernel's footprint: registers per thread, shared memory per block, grid and
# block. One line per kernel of each run's last step:


def short(name, width=46):
    name = name.removeprefix("void ")
    return name if len(name) <= width else name[: width - 1] + "…"


def last_step_launches(run):
    last = run.trace.steps[-1].number
    return [launch for launch in kernel_launches(run.trace) if launch.step == last]


header = f"{'run':22s} {'op':10s} {'kernel':46s} {'launched with':20s} planning calls"
print(header)
print("-" * len(header))
for run in runs.values():
    launches = last_step_launches(run)
    if not launches:
        print(f"{run.name:22s} no kernels: without a GPU the ops compute on the CPU")
    for launch in launches:
        planning = ", ".join(call.name for call in launch.planning_calls) or "none"
        op = launch.op.name if launch.op else "?"
        print(f"{run.name:22s} {op:10s} {short(launch.kernel.name)} {launch.api:20s} {planning}")

# %%
# The footprints of the same kernels:

header = f"{'run':22s} {'op':10s} {'registers':>9s} {'shared memory':>14s} {'grid':>14s} block"
print(header)
print("-" * len(header))
for run in runs.values():
    for launch in last_step_launches(run):
        fp = launch.footprint
        print(
            f"{run.name:22s} {launch.op.name if launch.op else '?':10s} "
            f"{fp.registers_per_thread!s:>9s} {fp.shared_memory_bytes!s:>12s} B "
            f"{fp.grid!s:>14s} {fp.block}"
        )

# %%
# What this run shows, in sentences computed from the tables above:


def gemm_and_add(run):
    launches = last_step_launches(run)
    gemm = next((k for k in launches if k.op and k.op.name in ("aten::mm", "aten::bmm")), None)
    add = next((k for k in launches if k.op and k.op.name == "aten::add"), None)
    return gemm, add


if device == "cpu":
    print("No GPU here: no kernel was launched, so there is no launch call to plan.")
for (size, dtype_name), run in runs.items():
    gemm, add = gemm_and_add(run)
    if gemm is None:
        continue
    planning = ", ".join(c.name for c in gemm.planning_calls) or "none"
    print(
        f"{size} {dtype_name}: the GEMM {short(gemm.kernel.name, 40)} was launched with "
        f"{gemm.api}; planning calls before it: {planning}. The add was launched with "
        f"{add.api} after {len(add.planning_calls)} planning calls."
    )
occupancy = [call.name for run in runs.values() for call in run.trace.find(prefix="cudaOccupancy")]
if device == "cuda":
    print(f"cudaOccupancy* calls in the recorded (warm) steps of all runs: {len(occupancy)}.")

# %%
# On the H100 this site is built on, the runs above show two launch paths, neither of them
# the post's (see the output above):
#
# - The **bf16 GEMMs** are ``nvjet_sm90_*`` kernels from cuBLASLt, launched through the
#   *driver* API's ``cuLaunchKernelEx`` with no planning call before them. The extended
#   launch call can pass launch attributes that the classic ``cudaLaunchKernel`` cannot,
#   such as the thread-block clusters that Hopper added.
# - The **fp32 GEMMs** are ``sm80_xmma_*`` kernels (built for the A100's architecture, and
#   run here as they are), launched through the runtime's ``cudaLaunchKernelExC``; the
#   large one is preceded by ``cudaFuncGetAttributes`` on every call, a question about the
#   kernel rather than about occupancy.
# - The **add** is launched with plain ``cudaLaunchKernel`` and nothing before it, as on
#   the post's A100.
#
# The post quotes the A100's add kernel at 32 registers per thread and no shared memory.
# The footprints measured here:

for run in runs.values():
    _, add = gemm_and_add(run)
    if add is not None:
        fp = add.footprint
        print(
            f"{run.name:22s} add kernel: {fp.registers_per_thread} registers per thread, "
            f"{fp.shared_memory_bytes} bytes of shared memory, blocks of {fp.block[0]} threads"
        )
if device == "cpu":
    print("No GPU here: no kernel footprints were recorded.")

# %%
# Side by side, the largest footprints of each kind of kernel in these runs:

by_kind = {"GEMM": [], "add": []}
for run in runs.values():
    gemm, add = gemm_and_add(run)
    by_kind["GEMM"] += [gemm.footprint] if gemm else []
    by_kind["add"] += [add.footprint] if add else []
for kind, footprints in by_kind.items():
    if footprints:
        registers = max(fp.registers_per_thread or 0 for fp in footprints)
        shared = max(fp.shared_memory_bytes or 0 for fp in footprints)
        print(
            f"{kind:4s} kernels: up to {registers} registers per thread and "
            f"{shared / 1024:.1f} KiB of shared memory per block"
        )

# %%
# An SM has a fixed register file and a fixed amount of shared memory, so a GEMM block
# that takes a large share of either leaves room for only a few blocks per SM; how many fit
# decides how well a launch fills the GPU. That is what a GEMM library plans for. An add
# block asks for so little that many fit whatever the launch.
#
# The planning call on a timeline
# -------------------------------
# A zoom on the CPU lane, around the GEMM's operator in the last step of each dtype's large
# run: the planning call, where there is one, and the launch.


def launch_picture(run):
    gemm, _ = gemm_and_add(run)
    trace = run.trace
    if gemm is None:
        op = next(s for s in trace.find("aten::mm") if trace.step_of(s) is trace.steps[-1])
        marks = [highlight_span(op, "aten::mm computes on the CPU")]
    else:
        op = gemm.op
        marks = [highlight_span(gemm.launch, gemm.api)]
        if gemm.planning_calls:
            first = gemm.planning_calls[0]
            marks.append(highlight_span(first, f"planning: {first.name}"))
    margin = op.dur * 0.15
    return plot_timeline(
        trace,
        window=(op.start - margin, op.end + margin),
        lanes=[op.lane],
        highlights=marks,
        title=f"{run.name}: {op.name} in ProfilerStep#{trace.steps[-1].number}",
    )


launch_picture(runs[sizes[-1], "fp32"])

# %%

launch_picture(runs[sizes[-1], "bf16"])

# %%
# The profiler table of the large fp32 run. On a GPU, a planning call is a row of its own:
# compare its ``# of Calls`` with the GEMM kernel's.

profiler_table(runs[sizes[-1], "fp32"])

# %%
# Where did the occupancy query go?
# ---------------------------------
# A GEMM library must size a kernel's launch at some point. If it does not ask before every
# launch, it may ask once and remember the answer. To see that, the first call must be in
# the trace: the very first GEMM of a fresh process, profiled with no warm-up at all
# (``wait=0``, ``warmup=0``, no warm-up iterations). This page's own process has run GEMMs
# already, so we profile that first call in a new Python process and load its trace.

FIRST_CALL = """
import sys, torch
from profiling_utils import capture
x, w, b = (torch.randn(64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
capture(lambda: torch.add(torch.matmul(x, w), b), name=sys.argv[2], out_dir=sys.argv[1],
        label="matmul_add", wait=0, warmup=0, active=3)
"""

first_call = None
if device == "cuda":
    first_name = "64_bf16_first-call_eager"
    subprocess.run([sys.executable, "-c", FIRST_CALL, str(trace_dir()), first_name], check=True)
    first_call = load_trace(trace_dir() / f"{first_name}.json.gz")
    for launch in kernel_launches(first_call):
        if launch.op is not None and launch.op.name == "aten::mm":
            counts = collections.Counter(call.name for call in launch.planning_calls)
            listed = ", ".join(f"{name} x{count}" for name, count in counts.items()) or "none"
            print(f"ProfilerStep#{launch.step}: {launch.api}; planning calls: {listed}")
else:
    print("No GPU here: there is no first kernel launch to profile.")

# %%
# On the H100 (see the output above), the first step's GEMM launch comes after a burst of
# planning calls: occupancy queries, including ``cudaOccupancyMaxActiveClusters`` for
# Hopper's clusters, and attribute settings. The later steps launch the same kernel with
# none. The planning is still there; it moved from every launch to the first one, and its
# answer is reused. A trace of warm steps cannot show it.
#
# How long the first ``aten::mm`` took against the later ones, and a zoom on its planning
# calls:

if first_call is not None:
    mm_by_step = {
        first_call.step_of(op).number: op
        for op in first_call.find("aten::mm")
        if first_call.step_of(op) is not None
    }
    print(", ".join(f"ProfilerStep#{k}: aten::mm {op.dur:,.1f} µs" for k, op in mm_by_step.items()))
    launch = next(
        k
        for k in kernel_launches(first_call)
        if k.step == first_call.steps[0].number and k.op and k.op.name == "aten::mm"
    )
    if launch.planning_calls:
        first, last = launch.planning_calls[0], launch.planning_calls[-1]
        pad = (last.end - first.start) * 0.4
        span_us = last.end - first.start
        print(
            f"The {len(launch.planning_calls)} planning calls span {span_us:.1f} µs; the "
            f"launch follows {(launch.launch.start - last.end) / 1000:.1f} ms after the last."
        )
        plot_timeline(
            first_call,
            window=(first.start - pad, last.end + pad),
            lanes=[launch.op.lane],
            highlights=[Highlight(first.start, last.end, "planning calls", lane=launch.op.lane)],
            title=f"First GEMM of a process: planning inside aten::mm, ProfilerStep#{launch.step}",
        )

# %%
# The planning calls are a small part of that first ``aten::mm``. The rest is first-use
# work too: creating the cuBLAS handle, device queries (``cudaDeviceGetAttribute``), the
# workspace's ``cudaMalloc``, and loading the kernel's code, which the profiler shows on
# its overhead lane. The second tutorial measures what such first-use work costs a step.
#
# What the cheatsheet finds
# -------------------------
# :func:`~profiling_utils.rules.diagnose` applies the cheatsheet's rules to a trace. Its
# launch rules, on the large fp32 run, the large bf16 run and the first-call trace:

launch_rules = ["planned-launch", "plain-launch", "driver-launch", "gemm-kernel"]
large_fp32, large_bf16 = runs[sizes[-1], "fp32"], runs[sizes[-1], "bf16"]
findings_table(diagnose(large_fp32.trace, select=launch_rules), caption=large_fp32.name)

# %%

findings_table(diagnose(large_bf16.trace, select=launch_rules), caption=large_bf16.name)

# %%

if first_call is not None:
    first_findings = diagnose(first_call, select=launch_rules)
else:
    first_findings = []
    print("No GPU here, so there is no first-call trace to diagnose.")
findings_table(first_findings, caption="first GEMM of a process")

# %%
# What to take from this
# ----------------------
# - A planning call before a launch marks a kernel whose launch is worked out at run time,
#   usually a GEMM or a convolution. Its absence does not mean the kernel is simple: on
#   this GPU the GEMM's planning happens on its first use, and warm steps show none.
# - Read the launch API too: ``cudaLaunchKernel`` for PyTorch's own elementwise kernels, the
#   extended ``cudaLaunchKernelExC`` and ``cuLaunchKernelEx`` for library kernels that pass
#   launch attributes.
# - The footprint (registers, shared memory, grid and block) is in each kernel's ``args``
#   in the trace; Perfetto shows it when you click a kernel.
#
# The traces
# ----------

trace_links(large_fp32)

# %%

trace_links(large_bf16)

# %%

trace_links(first_call.path) if first_call is not None else print("No first-call trace here.")
