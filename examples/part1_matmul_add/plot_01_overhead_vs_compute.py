"""
Overhead-bound or compute-bound?
================================

*Is the GPU busy computing, or is it waiting for the CPU to hand it the next kernel?*

We profile the same two lines, a matrix product followed by a bias add, at a small size and
at a large one, and read the answer off the profiler table and the timeline. Then we go
beyond two sizes: a sweep finds between which sizes the GPU's time per step overtakes the
CPU's on the GPU this page was built on.

The `Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ that this gallery
follows ran the same two sizes on an A100. Its numbers are quoted as the post's; every other
number on this page was measured when the page was built.
"""

# %%
# The workload
# ------------
#
# ``matmul_add`` is a linear layer without the module: ``x @ w + b``, on square bf16
# matrices, on the GPU when there is one (on a CPU the "large" size is smaller, since a CPU
# needs seconds for a 4096 product). ``partial(matmul_add, *operands(n))`` is the step we
# hand to the profiler: a call with no arguments that does one product and one add.

import statistics
import tempfile
from functools import partial

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
from profiling_utils.claims import at_least_times, claim
from profiling_utils.measures import gpu_gaps, kernel_launches, step_times
from profiling_utils.rates import rate_report
from profiling_utils.render import (
    findings_table,
    highlight_between,
    highlight_span,
    plot_size_sweep,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)
from profiling_utils.stats import Distribution, clearly_greater

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
SMALL, LARGE = (64, 4096) if device == "cuda" else (64, 1024)


def matmul_add(x, w, b):
    return torch.add(torch.matmul(x, w), b)


def operands(size):
    return [
        torch.randn(size, size, device=device, dtype=torch.bfloat16) for _ in range(3)
    ]


print(f"Running on {torch.cuda.get_device_name() if device == 'cuda' else 'the CPU'}")

# %%
# Profile the small size
# ----------------------
#
# :func:`~profiling_utils.capture.capture` runs the step under the post's schedule (one
# step skipped, one warm-up step, three recorded steps), wraps each call in a
# ``record_function("matmul_add")`` label, and keeps the trace and the profiler table.

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
# kernels; ``matmul_add`` is our label (with a GPU, a second row marked † is the same label
# as the GPU stream sees it).
#
# A row's **Self** time counts only what was spent in that event, not in the events it
# called; its **Total** counts both. Our label does no work of its own: it calls
# ``aten::matmul`` and ``aten::add``, and its Self time is what the CPU spent inside the
# label between them (Python calling the next operator, the profiler recording it). With a
# GPU, where each operator's total includes launching its kernel, most of the label's total
# is in its children (a claim of this page):

rows = {e.key: e for e in small.key_averages if e.device_type == DeviceType.CPU}
for name in ("matmul_add", "aten::matmul"):
    row = rows[name]
    share = 1 - row.self_cpu_time_total / row.cpu_time_total
    print(
        f"{name:13s} Self CPU {row.self_cpu_time_total:9,.1f} µs, "
        f"CPU total {row.cpu_time_total:9,.1f} µs: {share:.0%} in its children"
    )
label = rows["matmul_add"]
if small.has_gpu:
    claim(
        "most of the label's CPU total is in its children",
        label.self_cpu_time_total < label.cpu_time_total / 2,
        self_us=label.self_cpu_time_total,
        total_us=label.cpu_time_total,
    )

# %%
# Read the Total column to find *where* time goes and the Self column to find *who* spends
# it. Under the table torch prints two sums: *Self CPU time total* adds every row's Self
# CPU; *Self CUDA time total* adds the Self time of the rows that ran *on the GPU* (kernels
# and copies). We compute both from the ``key_averages()`` the table was made from, with
# the part of the CPU total that ``cudaDeviceSynchronize`` spent waiting:


def print_totals(run):
    """The two sums torch prints under its table, and their ratio."""
    averages = run.key_averages
    cpu_us = sum(e.self_cpu_time_total for e in averages)
    gpu_us = sum(
        e.self_device_time_total
        for e in averages
        if e.device_type != DeviceType.CPU and not e.is_user_annotation
    )
    sync_us = sum(
        e.self_cpu_time_total for e in averages if e.key == "cudaDeviceSynchronize"
    )
    print(f"{run.name}\n  Self CPU time total:  {cpu_us:10,.1f} µs")
    if sync_us:
        print(f"    of it in cudaDeviceSynchronize: {sync_us:,.1f} µs")
    if gpu_us:
        print(f"  Self CUDA time total: {gpu_us:10,.1f} µs")
        print(f"  Self CPU time total / Self CUDA time total: {cpu_us / gpu_us:.1f}")


print_totals(small)

# %%
# Where the CPU total is many times the GPU total, the GPU finishes each kernel quickly and
# then waits for the CPU to get the next one to it: Python, the dispatcher, the launch
# call, the profiler's own bookkeeping. That is an **overhead-bound** step: a faster GPU
# would not make it faster; less CPU work per kernel, or more GPU work per launch, would.
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
# The table is sorted by CUDA total: with a GPU the GEMM kernel's row carries most of the
# GPU time.

print_totals(large)

# %%
# Where the two totals are of the same order, the GPU is kept busy and the CPU's launches
# run ahead of it: a **compute-bound** step, the one you want, since making the GPU's work
# faster (a better kernel, a lower precision, a bigger GPU) now makes the step faster. Part
# of the CPU total is then not work at all: ``cudaDeviceSynchronize`` is the profiler
# waiting, at the end of the recording, for the GPU to finish what the CPU queued. The post
# saw 4.908 ms of Self CPU against 4.495 ms of Self CUDA on its A100. Three steps are too
# few to weigh one run against the other; the sweep at the end of the page measures both
# regimes over twenty steps each.
#
# What the two timelines look like
# --------------------------------
#
# The table sums; the trace shows *when*. Here is the last recorded step of each run. In
# the small run we highlight the longest stretch between two of the step's GPU activities
# in which the GPU had nothing to do (before its first kernel the GPU is idle too, waiting
# for the step's first launch).

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
# CPU lane fills. The idle stretch between them is the time the CPU took to get from
# launching the product to launching the add. In the large run we highlight the GEMM
# kernel of the same step.

last = large.trace.steps[-1]
if large.has_gpu:
    gemm = max(last.gpu_work, key=lambda work: work.dur)
    mark = highlight_span(gemm, "GEMM kernel")
else:
    mm = next(
        op for op in large.trace.find("aten::mm") if large.trace.step_of(op) is last
    )
    mark = highlight_span(mm, "aten::mm, on the CPU")
if large.has_gpu:
    gpu_end = max(work.end for work in last.gpu_work)
    claim(
        f"at n={LARGE} the step's GPU work ends after the step has ended on the CPU",
        gpu_end > last.end,
        after_step_end_us=gpu_end - last.end,
    )
plot_timeline(large.trace, step=last.number, highlights=[mark], title=large.name)

# %%
# Now the GPU lane is full: the CPU queued the kernels and moved on, and the GPU works
# through them after the step has ended on the CPU. The work drawn before the highlighted
# GEMM may be earlier steps', still running when this step began on the CPU:

if large.has_gpu:
    launched_in = {
        work.id: large.trace.step_of(launch)
        for work in large.trace.gpu_work
        if (launch := large.trace.launch_of(work)) is not None
    }
    before = [
        work
        for work in large.trace.gpu_work
        if work.end > last.start
        and work.start < gemm.start
        and launched_in.get(work.id) not in (None, last)
    ]
    claim(
        "the GPU was still running earlier steps' work when this step began",
        bool(before),
        otherwise="the GPU had finished earlier steps' work when this step began",
        earlier_activities=len(before),
        earlier_steps=len({launched_in[work.id].number for work in before}),
    )

# %%
# What the cheatsheet says
# ------------------------
#
# :func:`~profiling_utils.diagnose` applies the post's trace reading cheatsheet to a trace.
# We ask for the rules of its first table, the profiler table. They compare the GPU's busy
# time with the CPU time of the median step rather than the two totals.

TABLE_RULES = ["overhead-bound", "compute-bound", "hotspot", "cost-in-children"]
small_findings = diagnose(small.trace, select=TABLE_RULES)
findings_table(small_findings, caption=small.name, rules=TABLE_RULES)

# %%

large_findings = diagnose(large.trace, select=TABLE_RULES)
findings_table(large_findings, caption=large.name, rules=TABLE_RULES)

# %%
# The small run should be flagged **overhead-bound**, a warning, and the large one
# **compute-bound**, an ``info`` finding, since that is where you want to be. Both rules
# read the median recorded step's GPU busy time over its CPU time. With three recorded
# steps, two steps that the CPU happened to run slowly move that median, so the check
# prints each step's ratio and says what this run found for the large size:

if small.has_gpu:
    # Each step's GPU busy time over its CPU time: what the two rules read.
    small_ratios, large_ratios = (
        ", ".join(f"{t.gpu_busy_us / t.cpu_us:.3g}" for t in step_times(run.trace))
        for run in (small, large)
    )
    claim(
        f"the cheatsheet flags n={SMALL} overhead-bound",
        any(f.rule == "overhead-bound" for f in small_findings),
        busy_over_cpu=small_ratios,
    )
    claim(
        f"the cheatsheet flags n={LARGE} compute-bound",
        any(f.rule == "compute-bound" for f in large_findings),
        otherwise=f"the cheatsheet does not flag n={LARGE} compute-bound on this run",
        busy_over_cpu=large_ratios,
    )

# %%
# Which kernel did the product, and how fast was it?
# --------------------------------------------------
#
# The GEMM kernel is the one launched from ``aten::mm``. Its name says which routine cuBLAS
# chose for the shape and the GPU (the post's A100 ran ``ampere_bf16_s16816gemm_...``
# kernels). A product of two n by n matrices does 2n³ floating-point operations, so its
# duration gives the achieved rate, which :func:`~profiling_utils.rates.rate_report` sets
# beside the datasheet's peak and the peaks :func:`~profiling_utils.measure_peaks` measures
# on this GPU, each with how it was measured.

peaks = measure_peaks()
rates = {}
if peaks is not None:
    for run, size in ((small, SMALL), (large, LARGE)):
        gemms = [
            k for k in kernel_launches(run.trace) if k.op and k.op.name == "aten::mm"
        ]
        gemm_us = statistics.median(k.kernel.dur for k in gemms)
        rates[size] = achieved_tflops(gemm_flops(size, size, size), gemm_us)
        name = gemms[0].kernel.name
        print(f"{size}x{size}x{size}: {name if len(name) <= 70 else name[:69] + '…'}")
        print(
            f"  launched with {gemms[0].api}; median {gemm_us:,.1f} µs of {len(gemms)}"
        )
        subject = f"bf16 {size}³ GEMM"
        print(
            rate_report(
                rates[size], "bf16", device=peaks.device, peaks=peaks, subject=subject
            )
        )
    at_least_times(
        f"the n={LARGE} product runs at least 100x the rate of the n={SMALL} one",
        100,
        large_tflops=rates[LARGE],
        small_tflops=rates[SMALL],
    )
else:
    print(
        "No GPU here: there is no GEMM kernel to time and no GPU peak to compare with."
    )

# %%
# A 64 by 64 product cannot fill the GPU: the kernel's fixed start-up is most of its
# duration, so its rate is a small fraction of the large product's. Where the large
# product's share of a peak is above 100%, the report above says why.
#
# Beyond the post: where do the two costs cross?
# ----------------------------------------------
#
# Two sizes show that both regimes exist, not where one turns into the other. We profile a
# range of sizes (fewer on a CPU), warmed up, twenty recorded steps each, and take two
# numbers per step from :func:`~profiling_utils.measures.step_times`:
#
# - **CPU time per step**: how long the ``ProfilerStep`` lasted on the CPU;
# - **GPU time per step**: how long the GPU was busy with that step's work.
#
# Each size's twenty values make a :class:`~profiling_utils.stats.Distribution`: its
# median and its interquartile range (IQR), the middle half of the steps. The sweep's
# traces go to a temporary folder: they are not published.

sizes = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
if device == "cpu":
    sizes = sizes[:4]
cpu, gpu = [], []
with tempfile.TemporaryDirectory() as sweep_dir:
    for size in sizes:
        run = capture(
            partial(matmul_add, *operands(size)),
            name=run_name(size, "bf16", warm=True),
            label="matmul_add",
            out_dir=sweep_dir,
            wait=0,
            warmup=1,
            active=20,
            warmup_iters=3,
        )
        times = step_times(run.trace)
        cpu.append(Distribution.of([t.cpu_us for t in times], unit="µs"))
        gpu.append(Distribution.of([t.gpu_busy_us for t in times], unit="µs"))
        q1, q3 = cpu[-1].quartiles
        line = f"n={size:5d}  CPU {cpu[-1].median:7.1f} µs (IQR {q1:.1f}–{q3:.1f})"
        if device == "cuda":
            q1, q3 = gpu[-1].quartiles
            line += f"  GPU {gpu[-1].median:8.1f} µs (IQR {q1:.1f}–{q3:.1f})"
        print(line)

# %%
# On a GPU, launching the step's few kernels costs the CPU the same order of time at every
# size (the medians above move by a small factor from one run to the next), while the
# product's work grows eightfold each time n doubles. The GPU column does not
# follow the work at once: while the kernels are too small to fill the GPU, their fixed
# start-up sets their duration. Only at the large sizes does it grow nearly as fast as the
# work:

if device == "cuda":
    by_size = dict(zip(sizes, zip(cpu, gpu, strict=True), strict=True))
    medians = [d.median for d in cpu]
    claim(
        "the CPU time per step stays within 10x across the sweep, "
        f"while the product's work grows {(sizes[-1] // sizes[0]) ** 3:,}x",
        max(medians) < 10 * min(medians),
        slowest_us=max(medians),
        quickest_us=min(medians),
    )
    claim(
        "from n=32 to n=512 (4,096x the work) the GPU time per step grows less than 10x",
        by_size[512][1].median < 10 * by_size[32][1].median,
        at_32_us=by_size[32][1].median,
        at_512_us=by_size[512][1].median,
    )
    at_least_times(
        "from n=4096 to n=8192 (8x the work) the GPU time per step grows at least 5x",
        5,
        at_8192_us=by_size[8192][1].median,
        at_4096_us=by_size[4096][1].median,
    )

# %%
# Where the GPU column overtakes the CPU column, the step stops being overhead-bound. A
# size counts on one side only where the two middle halves do not overlap
# (:func:`~profiling_utils.stats.clearly_greater`). The crossing lies after the last size
# whose CPU time is clearly the larger and at or before the first size whose GPU time is:

crossing = None
if device == "cuda":
    first_gpu = next(
        (i for i in range(len(sizes)) if clearly_greater(gpu[i], cpu[i])), None
    )
    last_cpu = max(
        (i for i in range(first_gpu or 0) if clearly_greater(cpu[i], gpu[i])),
        default=None,
    )
    found = first_gpu is not None and last_cpu is not None
    if found:
        crossing = (sizes[last_cpu], sizes[first_gpu])
        cpu_low, gpu_low = cpu[last_cpu].median, gpu[last_cpu].median
        cpu_high, gpu_high = cpu[first_gpu].median, gpu[first_gpu].median
        print(
            f"n={crossing[0]}: CPU {cpu_low:.1f} µs per step, clearly above GPU {gpu_low:.1f}"
        )
        print(
            f"n={crossing[1]}: GPU {gpu_high:.1f} µs per step, clearly above CPU {cpu_high:.1f}"
        )
        if first_gpu > last_cpu + 1:
            print("The sizes between them are within each other's spread.")
    claim(
        f"the GPU time per step overtakes the CPU's between n={crossing[0]} "
        f"and n={crossing[1]} on this GPU"
        if found
        else "the GPU time per step overtakes the CPU's within the sweep",
        found,
    )
    claim(
        f"n={sizes[0]} is clearly overhead-bound and n={sizes[-1]} clearly compute-bound",
        clearly_greater(cpu[0], gpu[0]) and clearly_greater(gpu[-1], cpu[-1]),
    )
else:
    print("No GPU here: the products ran inside the CPU operators, so there is no GPU")
    print("time per step to compare with and no crossing to find.")

# %%
# The same numbers as a picture, each point a median with its IQR as an error bar:

series = {"CPU time per step": cpu}
if device == "cuda":
    series["GPU busy time per step"] = gpu
plot_size_sweep(
    sizes,
    series,
    between=crossing,
    between_label="GPU overtakes CPU",
    xlabel="n (bf16 n×n @ n×n, then an n×n add)",
    ylabel="µs per step (20 steps)",
    title="CPU and GPU time per step against the size",
)

# %%
# Left of the crossing a bigger matrix is almost free: the step costs what the CPU costs.
# Right of it, the GPU sets the pace. In an overhead-bound region, give each launch more
# work (batch requests, fuse operations) or cut the CPU's cost per launch
# (``torch.compile``, CUDA graphs; see the later tutorials). The crossing belongs to the
# machine: a faster GPU moves it to larger sizes, a faster CPU to smaller ones. And the
# CPU times were measured under the profiler, which adds work to every event it records:
# they are upper bounds of what the same steps cost without it.
#
# The traces
# ----------
#
# Download either trace, or open it in Perfetto to look around the steps yourself.

trace_links(small)

# %%

trace_links(large)
