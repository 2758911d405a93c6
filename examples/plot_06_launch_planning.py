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
first: how many of a kernel's blocks one SM can hold (``cudaOccupancy*``), what a kernel needs
(``cudaFuncGetAttributes``). Those *planning calls* sit in the trace right before the launch.

In its 64×64 trace on an A100, the
`Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ found
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` before the GEMM's launch. We look for
planning calls on this machine, for two kernels (a GEMM and the bias add), two dtypes and
two sizes, and read each kernel's resource footprint from the trace.
"""

# %%
# The runs
# --------
# The post's ``matmul_add``, warmed up and recorded with its schedule, in bf16 and in fp32,
# at the post's two sizes (at small sizes only on a machine without a GPU, where there are
# no kernels to inspect but the runs still work).

import collections

import torch

from profiling_utils import capture, diagnose, load_trace, run_name
from profiling_utils.fresh import run_in_fresh_process
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
    x, w, b = (
        torch.randn(size, size, device=device, dtype=dtypes[dtype_name])
        for _ in range(3)
    )
    return capture(
        lambda: matmul_add(x, w, b),
        name=run_name(size, dtype_name, warm=True),
        label="matmul_add",
        warmup_iters=3,
        out_dir=trace_dir(),
    )


runs = {
    (size, dtype_name): profile(size, dtype_name)
    for size in sizes
    for dtype_name in dtypes
}
print(
    f"{len(runs)} runs on {torch.cuda.get_device_name() if device == 'cuda' else 'the CPU'}"
)

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


header = f"{'run':22s} {'op':10s} {'launched with':20s} planning calls"
print(header)
print("-" * len(header))
for run in runs.values():
    launches = last_step_launches(run)
    if not launches:
        print(f"{run.name:22s} no kernels: without a GPU the ops compute on the CPU")
    for launch in launches:
        planning = ", ".join(call.name for call in launch.planning_calls) or "none"
        op = launch.op.name if launch.op else "?"
        print(f"{run.name:22s} {op:10s} {launch.api:20s} {planning}")
        print(f"    kernel: {short(launch.kernel.name, 76)}")

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
    gemm = next(
        (k for k in launches if k.op and k.op.name in ("aten::mm", "aten::bmm")), None
    )
    add = next((k for k in launches if k.op and k.op.name == "aten::add"), None)
    return gemm, add


if device == "cpu":
    print("No GPU here: no kernel was launched, so there is no launch call to plan.")
for (size, dtype_name), run in runs.items():
    gemm, add = gemm_and_add(run)
    if gemm is None:
        continue
    planning = ", ".join(c.name for c in gemm.planning_calls) or "none"
    print(f"{size} {dtype_name}: the GEMM {short(gemm.kernel.name, 60)}")
    print(f"  was launched with {gemm.api}; planning calls before it: {planning}.")
    print(
        f"  The add was launched with {add.api} after "
        f"{len(add.planning_calls)} planning calls."
    )
occupancy = [
    call.name
    for run in runs.values()
    for call in run.trace.find(prefix="cudaOccupancy")
]
if device == "cuda":
    print(
        f"cudaOccupancy* calls in the recorded (warm) steps of all runs: {len(occupancy)}."
    )

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
# The `post <https://huggingface.co/blog/torch-profiler>`__ gives the A100's add kernel 32
# registers per thread and no shared memory. The footprints recorded here:

for run in runs.values():
    _, add = gemm_and_add(run)
    if add is not None:
        fp = add.footprint
        print(
            f"{run.name:22s} add kernel: {fp.registers_per_thread} registers per thread, "
            f"{fp.shared_memory_bytes} bytes of shared memory,"
        )
        print(f"{'':22s} blocks of {fp.block[0]} threads")
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
        op = next(
            s for s in trace.find("aten::mm") if trace.step_of(s) is trace.steps[-1]
        )
        marks = [highlight_span(op, "aten::mm computes on the CPU")]
    else:
        op = gemm.op
        marks = [highlight_span(gemm.launch, gemm.api)]
        if gemm.planning_calls:
            first = gemm.planning_calls[0]
            marks.append(highlight_span(first, f"planning: {first.name}"))
        calls = " → ".join(call.name for call in trace.children(op))
        print(f"{run.name}: the calls inside {op.name}:")
        print(f"  {calls}")
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
# Not every call before a launch is a planning call. Where a ``cudaMemsetAsync`` comes first
# (see the line printed with the bf16 picture, on the H100), it queues GPU work of its own,
# a Memset of a few bytes that runs right before the GEMM, so it is not counted as planning.
#
# The profiler table of the large fp32 run. On a GPU, a planning call is a row of its own:
# compare its ``# of Calls`` with the GEMM kernel's.

profiler_table(runs[sizes[-1], "fp32"])

# %%
# A kernel's ``# of Calls`` can also exceed its operator's by one. GPU work in the trace
# whose launch is not:

large_trace = runs[sizes[-1], "fp32"].trace
unlaunched = collections.Counter(
    short(work.name, 60)
    for work in large_trace.gpu_work
    if large_trace.launch_of(work) is None
)
print("GPU work without its launch:" + ("" if unlaunched else " none"))
for name, count in unlaunched.items():
    print(f"  {name} x{count}")

# %%
# Work listed here (on the H100, see the output above) was launched before recording
# began, in the last step that was not recorded, and ran after it began: behind a GEMM this
# long, the GPU was still working through its queue when the CPU reached the first
# recorded step. Its kernel is counted; its launch is not.

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
    run_in_fresh_process(FIRST_CALL, trace_dir(), first_name)
    first_call = load_trace(trace_dir() / f"{first_name}.json.gz")
    for launch in kernel_launches(first_call):
        if launch.op is not None and launch.op.name == "aten::mm":
            counts = collections.Counter(call.name for call in launch.planning_calls)
            listed = "" if counts else " none"
            print(f"ProfilerStep#{launch.step}: {launch.api}; planning calls:{listed}")
            for name, count in counts.items():
                print(f"  {name} x{count}")
else:
    print("No GPU here: there is no first kernel launch to profile.")

# %%
# On the H100 (see the output above), the first step's GEMM launch comes after a burst of
# planning calls: occupancy queries, including ``cudaOccupancyMaxActiveClusters`` for
# Hopper's clusters, and attribute settings. The later steps launch the same kernel with
# none. The planning is still there; it moved from every launch to the first one, and its
# answer is reused. A trace of warm steps cannot show it.
#
# What else the first call does
# -----------------------------
# How long the first ``aten::mm`` took against the later ones, and what the trace recorded
# inside it: the CUDA calls nested in it, the profiler's overhead lane over the same time,
# and the longest stretch in which no CUDA call was recorded.

if first_call is not None:
    first_mm = {}
    for op in first_call.find("aten::mm"):
        if first_call.step_of(op) is not None:
            first_mm.setdefault(first_call.step_of(op).number, op)
    for k, op in first_mm.items():
        print(f"ProfilerStep#{k}: aten::mm {op.dur:,.1f} µs")
    mm = first_mm[first_call.steps[0].number]
    calls = first_call.children(mm)
    by_name = collections.Counter()
    for call in calls:
        by_name[call.name] += call.dur
    overhead = [
        s for s in first_call.overhead if mm.start <= s.start and s.end <= mm.end
    ]
    edges = [mm.start, *(t for c in calls for t in (c.start, c.end)), mm.end]
    silent = max(edges[i + 1] - edges[i] for i in range(0, len(edges) - 1, 2))
    print(
        f"Calls inside the first aten::mm: {sum(by_name.values()):,.0f} µs in all, most:"
    )
    for name, us in by_name.most_common(4):
        print(f"  {name} {us:,.0f} µs")
    print("On the overhead lane meanwhile:" + ("" if overhead else " none"))
    for s in overhead:
        print(f"  {s.name} {s.dur:,.0f} µs")
    print(
        f"Longest stretch with no CUDA call recorded: {silent:,.0f} µs, {silent / mm.dur:.0%} of it"
    )

# %%
# On the H100 (see the output above) the planning calls are a small part of that first
# ``aten::mm``, and so are the other recorded calls: device queries
# (``cudaDeviceGetAttribute``), memory allocations (``cudaMalloc``) and, on the overhead
# lane, the driver loading the kernel's code (*Runtime Triggered Module Loading*, *Lazy
# Function Loading*) besides the profiler's own buffer request. Most of the time is one
# stretch with no CUDA call recorded: the CPU is busy inside the libraries without calling
# CUDA, most likely setting them up on first use. The trace tells when that time passes,
# not what it is spent on. The
# :ref:`cold-start tutorial <sphx_glr_auto_examples_plot_02_cold_start.py>` measures what
# such first-use work costs a step.
#
# A zoom on the planning calls, with the overhead lane below the CPU lane:

if first_call is not None:
    launch = next(
        k
        for k in kernel_launches(first_call)
        if k.step == first_call.steps[0].number and k.op and k.op.name == "aten::mm"
    )
    if launch.planning_calls:
        first, last = launch.planning_calls[0], launch.planning_calls[-1]
        occupancy_us = sum(
            c.dur for c in launch.planning_calls if "Occupancy" in c.name
        )
        loading = [s for s in first_call.overhead if first.start <= s.start <= last.end]
        print(
            f"The {len(launch.planning_calls)} planning calls span "
            f"{last.end - first.start:.1f} µs;"
        )
        print(f"the occupancy queries among them take {occupancy_us:.1f} µs in all.")
        print("Overhead lane meanwhile:" + ("" if loading else " none"))
        for s in loading:
            print(f"  {s.name} {s.dur:.1f} µs")
        lanes = [
            launch.op.lane,
            *(lane for lane in first_call.lanes if lane.kind == "overhead"),
        ]
        pad = (last.end - first.start) * 0.4
        plot_timeline(
            first_call,
            window=(first.start - pad, last.end + pad),
            lanes=lanes,
            highlights=[
                Highlight(first.start, last.end, "planning calls", lane=launch.op.lane)
            ],
            title=f"First GEMM of a process: planning inside aten::mm, ProfilerStep#{launch.step}",
        )

# %%
# Where the overhead lane shows module loading under the first ``cudaFuncSetAttribute``, as
# in the output above, that call is long because the driver loads the kernel's code while it
# runs; the occupancy queries themselves are the thin slivers after it.
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

trace_links(first_call.path) if first_call is not None else print(
    "No first-call trace here."
)
