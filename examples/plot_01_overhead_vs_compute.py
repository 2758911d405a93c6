"""
Overhead-bound or compute-bound?
================================

*Is the GPU busy computing, or is it waiting for the CPU to hand it the next kernel?*

We profile the same two lines, a matrix product followed by a bias add, at a small size and
at a large one, and read the answer off the profiler table and the timeline. Then we go
beyond two sizes: a sweep finds where the CPU's cost per step and the GPU's cost per step
cross on the GPU this page was built on.

The `Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ that this gallery
follows ran the same two sizes on an A100. Its numbers are quoted as the post's; every other
number on this page was measured when the page was built.
"""

# %%
# The workload
# ------------
#
# ``matmul_add`` is a linear layer without the module: ``x @ w + b``. The operands are
# square bf16 matrices, on the GPU when there is one. On a CPU the "large" size is smaller,
# since a CPU needs seconds for a 4096 product. ``partial(matmul_add, *operands(n))`` is the
# step we hand to the profiler: a call with no arguments that does one product and one add.

import math
import statistics
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch.autograd import DeviceType

from profiling_utils import (
    achieved_tflops,
    capture,
    diagnose,
    gemm_flops,
    measure_peaks,
    run_name,
)
from profiling_utils.measures import gpu_gaps, kernel_launches, step_times
from profiling_utils.render import (
    findings_table,
    highlight_between,
    highlight_span,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
SMALL, LARGE = (64, 4096) if device == "cuda" else (64, 1024)


def matmul_add(x, w, b):
    return torch.add(torch.matmul(x, w), b)


def operands(size):
    return [
        torch.randn(size, size, device=device, dtype=torch.bfloat16) for _ in range(3)
    ]


def as_time(us):
    """A duration the way the profiler table prints it."""
    return f"{us / 1000:.3f} ms" if us >= 1000 else f"{us:.3f} µs"


print(f"Running on {torch.cuda.get_device_name() if device == 'cuda' else 'the CPU'}")

# %%
# Profile the small size
# ----------------------
#
# :func:`~profiling_utils.capture.capture` runs the step under the post's schedule (one
# step skipped, one warm-up step, three recorded steps), wraps each call in a
# ``record_function("matmul_add")`` label, and keeps the trace and the profiler table. No
# warm-up iterations run before the profiler starts: this is the post's "cold" run.

small = capture(
    partial(matmul_add, *operands(SMALL)),
    name=run_name(SMALL, "bf16", warm=False),
    label="matmul_add",
    out_dir=trace_dir(),
)
profiler_table(small)

# %%
# Each row is one kind of event, summed over the three recorded steps. Rows named
# ``aten::...`` are PyTorch operators; ``cudaLaunchKernel``, ``cuLaunchKernelEx`` and their
# kin are calls into the CUDA runtime or driver; the long names full of tile sizes are GPU
# kernels; ``matmul_add`` is our label.
#
# Self and Total
# --------------
#
# A row's **Self** time counts only what was spent in that event, not in the events it
# called; its **Total** counts both. Our label does no work of its own: it calls
# ``aten::matmul`` and ``aten::add``. So its Self CPU should be small and its CPU total
# large, and the difference is what its children took. (With a GPU the table has a second
# ``matmul_add`` row, marked †: the same label as the GPU stream sees it, with no CPU time.
# We read the CPU one.)

rows = {e.key: e for e in small.key_averages if e.device_type == DeviceType.CPU}
for name in ("matmul_add", "aten::matmul"):
    row = rows[name]
    children = row.cpu_time_total - row.self_cpu_time_total
    print(
        f"{name:13s} Self CPU {as_time(row.self_cpu_time_total):>10s}, CPU total "
        f"{as_time(row.cpu_time_total):>10s}: {children / row.cpu_time_total:.0%} in its children"
    )

# %%
# Read the Total column to find *where* time goes and the Self column to find *who* spends
# it: a row with a large Total and a small Self is only a parent, and the cost sits in one
# of its children.
#
# The two totals under the table
# ------------------------------
#
# Under the table torch prints two sums. *Self CPU time total* adds every row's Self CPU:
# the host time spent inside recorded events, each microsecond counted once. *Self CUDA time
# total* adds the Self time of the rows that ran *on the GPU*, kernels and copies. The CPU
# operators are left out, since their Self CUDA column repeats the time of the kernels they
# launched, and so is the GPU's copy of our label. We compute both from the
# ``key_averages()`` the table was made from, along with the part of the CPU total spent in
# ``cudaDeviceSynchronize``, which will matter at the large size:


def self_totals(averages):
    """The two sums torch prints under its table, in µs."""
    cpu = sum(event.self_cpu_time_total for event in averages)
    on_gpu = [
        event
        for event in averages
        if event.device_type != DeviceType.CPU and not event.is_user_annotation
    ]
    return cpu, sum(event.self_device_time_total for event in on_gpu)


def print_totals(run):
    cpu_us, device_us = self_totals(run.key_averages)
    print(f"{run.name}\n  Self CPU time total:  {as_time(cpu_us)}")
    sync_us = sum(
        e.self_cpu_time_total
        for e in run.key_averages
        if e.key == "cudaDeviceSynchronize"
    )
    if sync_us > 0:
        print(f"    of it in cudaDeviceSynchronize: {as_time(sync_us)}")
    if device_us > 0:
        print(f"  Self CUDA time total: {as_time(device_us)}")
        print(f"  CPU total / CUDA total: {cpu_us / device_us:.1f}")
    else:
        print("  no GPU work was recorded, so there is no device total")


print_totals(small)

# %%
# With a GPU, the CPU total is many times the GPU total at this size. The GPU finishes a
# 64 by 64 product in microseconds, while the CPU needs far longer to get each kernel to it:
# Python, the dispatcher, the launch call, and the profiler's own bookkeeping. In between,
# the GPU waits. That is an **overhead-bound** step: a faster GPU would not make it faster;
# less CPU work per kernel, or more GPU work per launch, would.
#
# `The post <https://huggingface.co/blog/torch-profiler>`_ measured 2.314 ms of Self CPU
# against 23.104 µs of Self CUDA for this run on its A100, a ratio of about a hundred.
#
# Profile the large size
# ----------------------
#
# Same code, same schedule; only the operands grow.

large = capture(
    partial(matmul_add, *operands(LARGE)),
    name=run_name(LARGE, "bf16", warm=False),
    label="matmul_add",
    out_dir=trace_dir(),
)
profiler_table(large)

# %%
# The table is sorted by CUDA total. At this size the GEMM kernel's row carries most of the
# GPU time, while the CPU rows stay of the same order as before: launching a kernel costs
# the CPU about the same whatever the kernel does once it runs.

print_totals(large)

# %%
# With a GPU, the two totals are now of the same order: the GPU is kept busy, and the CPU's
# launches run ahead of it. That is a **compute-bound** step, the one you want: making the
# GPU's work faster (a better kernel, a lower precision, a bigger GPU) now makes the step
# faster. Part of the CPU total is not work at all: ``cudaDeviceSynchronize`` is the
# profiler waiting, when the recording ends, for the GPU to finish what the CPU queued, so
# it grows with the GPU's backlog (the
# :ref:`footprint tutorial <sphx_glr_auto_examples_plot_04_buffer_request_and_offset.py>`
# measures it). `The post <https://huggingface.co/blog/torch-profiler>`_ saw 4.908 ms of
# Self CPU against 4.495 ms of Self CUDA on its A100.
#
# What the two timelines look like
# --------------------------------
#
# The table sums; the trace shows *when*. Here is the last recorded step of each run
# (the first step carries one-time costs of its own: see the next tutorial). In the small
# run we highlight the longest stretch of the step in which the GPU had nothing to do.

last = small.trace.steps[-1]
if small.has_gpu:
    gap = max(
        (g for g in gpu_gaps(small.trace) if g.step == last.number),
        key=lambda g: g.gap_us,
    )
    mark = highlight_between(gap.before, gap.after, "GPU idle")
else:
    mm = next(
        op for op in small.trace.find("aten::mm") if small.trace.step_of(op) is last
    )
    mark = highlight_span(mm, "aten::mm, on the CPU")
plot_timeline(small.trace, step=last.number, highlights=[mark], title=small.name)

# %%
# On a GPU the small run's GPU lane is nearly empty: two thin kernels in a step that the
# CPU lane fills from end to end. The idle stretch between them is the time the CPU took to
# get from launching the product to launching the add.
#
# In the large run we highlight the GEMM kernel of the same step.

last = large.trace.steps[-1]
if large.has_gpu:
    gemm = max(last.gpu_work, key=lambda work: work.dur)
    mark = highlight_span(gemm, "GEMM kernel")
else:
    mm = next(
        op for op in large.trace.find("aten::mm") if large.trace.step_of(op) is last
    )
    mark = highlight_span(mm, "aten::mm, on the CPU")
plot_timeline(large.trace, step=last.number, highlights=[mark], title=large.name)

# %%
# Now the GPU lane is full, and the CPU's part of the step ends long before the GPU's: the
# CPU queued the kernels and moved on. The zoom also shows the previous step's kernels
# still running on the GPU when this step starts on the CPU, and, after the last step, the
# CPU waiting in ``cudaDeviceSynchronize`` until the GPU has caught up.
#
# What the cheatsheet says
# ------------------------
#
# :func:`~profiling_utils.diagnose` applies the post's trace reading cheatsheet to a trace.
# We ask for the rules of its first table, the profiler table. They read the trace rather
# than the table, so they compare the GPU's busy time with the CPU time of the median step
# instead of the two totals; the verdict is the same kind.

TABLE_RULES = [
    "overhead-bound",
    "compute-bound",
    "hotspot",
    "many-calls",
    "cost-in-children",
]
findings_table(diagnose(small.trace, select=TABLE_RULES), caption=small.name)

# %%
# With a GPU, the small run is flagged **overhead-bound**, a warning: the GPU is busy for
# a small fraction of each step. The other rows name the hotspot kernel and the rows whose
# cost is in their children, as read above.

findings_table(diagnose(large.trace, select=TABLE_RULES), caption=large.name)

# %%
# The large run is **compute-bound** instead: an ``info`` finding, since that is where you
# want to be.
#
# Which kernel did the product, and how fast was it?
# --------------------------------------------------
#
# The GEMM kernel is the one launched from ``aten::mm``. Its name says which routine cuBLAS
# chose, and that depends on the shape and the GPU: the post's A100 ran
# ``ampere_bf16_s16816gemm_...`` kernels. Its duration gives the achieved throughput, since
# a product of two n by n matrices does 2n³ floating-point operations. To judge it we set it
# beside what this GPU reaches on a larger product timed the same way, measured on this
# run by :func:`~profiling_utils.measure_peaks` (``None`` without a GPU).

peaks = measure_peaks()
if peaks is not None:
    print(peaks.summary())
    for run, size in ((small, SMALL), (large, LARGE)):
        gemms = [
            k for k in kernel_launches(run.trace) if k.op and k.op.name == "aten::mm"
        ]
        gemm_us = statistics.median(k.kernel.dur for k in gemms)
        tflops = achieved_tflops(gemm_flops(size, size, size), gemm_us)
        print(f"{size}x{size}x{size}: {gemms[0].kernel.name},")
        print(f"    launched with {gemms[0].api}")
        print(
            f"    median {gemm_us:.1f} µs over {len(gemms)} steps: {tflops:.1f} TFLOP/s,"
        )
        print(f"    {tflops / peaks.matmul_tflops:.2%} of the measured peak")
else:
    print(
        "No GPU here: there is no GEMM kernel to time and no GPU peak to compare with."
    )

# %%
# With a GPU, the large product runs at a large share of the measured peak. The peak is
# not a ceiling of the hardware: it is the median rate of one reference product (the bf16
# matmul in the summary above), so a share near or even above 100% only says that this
# product ran about as fast per operation as that one; the
# :ref:`kernel-variance tutorial <sphx_glr_auto_examples_plot_07_kernel_variance.py>`
# looks at a share above 100% more closely. The small product reaches a tiny share: a 64
# by 64 product cannot fill the GPU, and the kernel's fixed start-up is most of its
# duration. The kernel names differ too: cuBLAS picks a routine per shape, from a family
# per GPU generation.
#
# Beyond the post: where do the two costs cross?
# ----------------------------------------------
#
# Two sizes show that both regimes exist, not where one turns into the other. We profile a
# range of sizes (fewer on a CPU), warmed up this time, and take from each trace the median
# over ten recorded steps of two numbers from :func:`~profiling_utils.measures.step_times`:
#
# - **CPU time per step**: how long the ``ProfilerStep`` lasted on the CPU;
# - **GPU time per step**: how long the GPU was busy with that step's work.
#
# The sweep's traces are published too, in a ``sweep`` folder beside this page's traces.

sizes = (
    [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    if device == "cuda"
    else [32, 64, 128, 256]
)
cpu_per_step, gpu_per_step = [], []
for size in sizes:
    run = capture(
        partial(matmul_add, *operands(size)),
        name=run_name(size, "bf16", warm=True),
        label="matmul_add",
        out_dir=trace_dir() / "sweep",
        wait=0,
        warmup=1,
        active=10,
        warmup_iters=3,
    )
    times = step_times(run.trace)
    cpu_per_step.append(statistics.median(t.cpu_us for t in times))
    gpu_per_step.append(statistics.median(t.gpu_busy_us for t in times))
    gpu_column = f"   GPU {gpu_per_step[-1]:9.1f} µs/step" if run.has_gpu else ""
    print(f"n={size:5d}   CPU {cpu_per_step[-1]:9.1f} µs/step{gpu_column}")

# %%
# On a GPU the CPU column hardly moves with the size: launching the same two kernels costs
# about the same. The work grows eightfold each time n doubles, but the GPU column does not
# follow it at once: while the kernels are too small to fill the GPU, their fixed start-up
# sets their duration. Only at the large sizes does the GPU time grow nearly as fast as the
# work:

if device == "cuda":
    print(
        f"GPU time per step from n={sizes[-2]} to n={sizes[-1]}: "
        f"{gpu_per_step[-1] / gpu_per_step[-2]:.1f}x, for 8x the product's work"
    )

# %%
# Where the GPU column overtakes the CPU column, the step stops being overhead-bound. We
# look for the first pair of neighbouring sizes where that happens and interpolate between
# them on the log-log scale:

crossing = None
for i in range(len(sizes) - 1):
    if gpu_per_step[i] <= 0:
        continue
    before = math.log(gpu_per_step[i] / cpu_per_step[i])
    after = math.log(gpu_per_step[i + 1] / cpu_per_step[i + 1])
    if before < 0 <= after:
        crossing = sizes[i] * (sizes[i + 1] / sizes[i]) ** (before / (before - after))
        print(
            f"The GPU time per step overtakes the CPU time per step between n={sizes[i]}"
        )
        print(f"and n={sizes[i + 1]}, at about n={crossing:.0f} on this GPU.")
        break
if device == "cpu":
    print(
        "No GPU here: the products ran inside the CPU operators, so there is no GPU time"
    )
    print("per step to compare with and no crossing to find.")
elif crossing is None:
    print("In this sweep the GPU time per step never overtook the CPU time per step.")

# %%
# The same numbers as a picture:

fig, ax = plt.subplots(figsize=(7, 4.2))
ax.plot(sizes, cpu_per_step, "o-", label="CPU time per step (ProfilerStep)")
if device == "cuda":
    ax.plot(sizes, gpu_per_step, "s-", label="GPU busy time per step")
if crossing is not None:
    ax.axvline(crossing, color="0.4", linestyle="--", linewidth=1)
    ax.annotate(
        f"cross at n ≈ {crossing:.0f}",
        xy=(crossing, 0.0),
        xycoords=("data", "axes fraction"),
        xytext=(4, 6),
        textcoords="offset points",
        color="0.25",
    )
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xticks(sizes, [str(s) for s in sizes])
ax.set_xlabel("n (bf16 n×n @ n×n, then an n×n add)")
ax.set_ylabel("µs per step (median of 10)")
ax.set_title("CPU and GPU time per step against the size", loc="left")
ax.grid(True, color="0.9")
ax.legend(frameon=False)
fig.tight_layout()

# %%
# Left of the crossing a bigger matrix is almost free: the step costs what the CPU costs.
# Right of it, the GPU sets the pace. Two practical readings follow. In an overhead-bound
# region, give each launch more work (batch requests, fuse operations) or cut the CPU's
# cost per launch (``torch.compile``, CUDA graphs; see the later tutorials). And the
# crossing belongs to the machine: a faster GPU moves it to larger sizes, a faster CPU to
# smaller ones. The CPU times were measured under the profiler, which adds a little to every
# event it records, so without it the crossing likely sits at a somewhat smaller size.
#
# The traces
# ----------
#
# Download either trace, or open it in Perfetto to look around the steps yourself.

trace_links(small)

# %%

trace_links(large)
