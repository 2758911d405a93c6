"""
Kernel variance: one GEMM, twenty timings
=========================================

*The same kernel, on the same data, twenty times in a row: does it take the same time every
time? And which of the twenty numbers should you report?*

A kernel's duration is not a constant of the code. The GPU changes its clock with load,
power draw and temperature, the driver does housekeeping, and on a shared machine other
work competes. A single timing, or the mean of a handful, can be far from what the kernel
usually takes. The
`Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ met this on its A100:
a typical 4096 GEMM took about 580 µs, but the mean of five was 1084 µs, pulled up by
instances that ran far longer than the rest.

We record twenty steps of the same GEMM, look at the whole distribution, and then go
beyond the post twice: a long run of large GEMMs straight after an idle pause, to watch
what a sustained load does to the same kernel's speed, and a second process that shares
the GPU for a moment, to see what the ``kernel-variance`` rule makes of a step that is
slow for a reason the trace cannot show.
"""

# %%
# Twenty steps of the same GEMM
# -----------------------------
# The post's ``matmul_add`` at 4096 in bf16 (128 on a machine without a GPU, where a 4096
# product would take seconds). Three calls warm it up; then every one of twenty steps is
# recorded (``wait=0``, ``warmup=0``, ``active=20``).

import statistics
import time

import matplotlib.pyplot as plt
import torch

from profiling_utils import (
    achieved_tflops,
    capture,
    diagnose,
    gemm_flops,
    measure_peaks,
    run_name,
)
from profiling_utils.claims import claim
from profiling_utils.measures import kernel_launches, kernel_stats
from profiling_utils.neighbour import GpuNeighbour
from profiling_utils.render import (
    findings_table,
    highlight_span,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)
from profiling_utils.rules.gpu_lane import VARIANCE_MIN_RATIO

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
n = 4096 if device == "cuda" else 128
x, w, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(3))

run = capture(
    lambda: torch.add(torch.matmul(x, w), b),
    name=run_name(n, "bf16", warm=True) + "_w0a20",
    label="matmul_add",
    wait=0,
    warmup=0,
    active=20,
    warmup_iters=3,
    out_dir=trace_dir(),
)
trace = run.trace
print(f"{len(trace.steps)} steps recorded on {'the GPU' if run.has_gpu else 'the CPU'}")

# %%
# torch warns that a schedule without a warm-up step can skew the results: the first
# recorded step also carries the profiler's own start-up. That is the post's setup, and we
# keep it; keep an eye on step 0.

# %%
# The GEMM of each step
# ---------------------
# On a GPU the GEMM is the kernel launched from ``aten::mm``
# (:func:`~profiling_utils.measures.kernel_launches` links each kernel to its operator).
# Without a GPU the product runs inside ``aten::mm`` on the CPU, so we time that operator
# instead; everything below works the same on either.

if run.has_gpu:
    gemms = [
        k.kernel for k in kernel_launches(trace) if k.op and k.op.name == "aten::mm"
    ]
else:
    gemms = [op for op in trace.find("aten::mm") if trace.step_of(op) is not None]
steps = [trace.step_of(gemm).number for gemm in gemms]
durations = [gemm.dur for gemm in gemms]
print(f"{gemms[0].name[:70]}")
print("µs per step:", ", ".join(f"{d:.1f}" for d in durations))

# %%
# Twenty numbers are easier to read as a picture. Each point is one step; the lines mark
# the mean, the median and the minimum.

mean_us = statistics.fmean(durations)
median_us = statistics.median(durations)
min_us = min(durations)

fig, ax = plt.subplots(figsize=(8, 3.8))
ax.plot(steps, durations, "o-", color="#009e73", label="GEMM duration")
for value, name, style in (
    (mean_us, "mean", "-"),
    (median_us, "median", "--"),
    (min_us, "min", ":"),
):
    ax.axhline(value, color="0.3", linestyle=style, linewidth=1)
    ax.annotate(
        f"{name} {value:.1f} µs",
        xy=(1.0, value),
        xycoords=("axes fraction", "data"),
        xytext=(4, 0),
        textcoords="offset points",
        va="center",
        fontsize=8,
    )
ax.set_xlabel("ProfilerStep")
ax.set_ylabel("µs")
ax.set_xticks(steps)
ax.set_title(f"The same {n}x{n} bf16 GEMM in {len(steps)} steps", loc="left")
ax.grid(True, color="0.92")
fig.subplots_adjust(right=0.8)

# %%
# :func:`~profiling_utils.measures.kernel_stats` gives the same statistics for every kernel
# of a trace, and flags *outlier steps*: steps holding an instance outside Tukey's fences
# (1.5 interquartile ranges beyond the quartiles) that is also at least 10% away from the
# median, so that nanosecond jitter is not reported.

if run.has_gpu:
    for stats in kernel_stats(trace):
        print(
            f"{stats.name[:50]:50s} n={stats.count:2d}  min {stats.min_us:7.1f}  median "
            f"{stats.median_us:7.1f}  mean {stats.mean_us:7.1f}  max {stats.max_us:7.1f} µs  "
            f"spread {stats.spread:.1%}  outlier steps: {list(stats.outlier_steps) or 'none'}"
        )
    gemm_stats = next(s for s in kernel_stats(trace) if s.name == gemms[0].name)
    outliers = list(gemm_stats.outlier_steps)
else:
    print(
        "kernel_stats reads GPU kernels, and there are none here; the same numbers for"
    )
    print(f"aten::mm: min {min_us:.1f}, median {median_us:.1f}, mean {mean_us:.1f} µs")
    q1, _, q3 = statistics.quantiles(durations, n=4)
    outliers = [
        step
        for step, d in zip(steps, durations, strict=True)
        if not q1 - 1.5 * (q3 - q1) <= d <= q3 + 1.5 * (q3 - q1)
        and abs(d - median_us) >= 0.1 * median_us
    ]

# %%
# What this run says, computed from the numbers above:

slowest = max(range(len(durations)), key=durations.__getitem__)
print(
    f"The mean is {mean_us / median_us - 1:+.1%} off the median; the slowest step "
    f"(#{steps[slowest]}, {durations[slowest]:.1f} µs) took {durations[slowest] / min_us:.2f}x "
    f"the fastest. Outlier steps: {outliers or 'none'}."
)
first_five = durations[:5]
print(
    f"A reader who timed only the first five steps would report a mean of "
    f"{statistics.fmean(first_five):.1f} µs; the median of all twenty is {median_us:.1f} µs."
)
rest = statistics.median(durations[2:])
print(
    f"The first two steps averaged {statistics.fmean(durations[:2]):.1f} µs, "
    f"{statistics.fmean(durations[:2]) / rest - 1:+.1%} against the median of the other steps."
)
print(
    f"The post, on its A100: mean of five 1084 µs against a typical ~580 µs, {1084 / 580:.2f}x."
)
if run.has_gpu:
    claim(
        "the twenty GEMMs stay within 10% of their median",
        max(durations) <= 1.1 * median_us and min_us >= 0.9 * median_us,
        otherwise="a GEMM of the twenty ran more than 10% away from the median",
        slowest_us=max(durations),
        median_us=median_us,
    )

# %%
# The post's mean was pulled up by slow instances. On the H100 this site is built on, the
# twenty GEMMs of our recorded runs stayed close together, with the first steps a little
# slower than the rest; the output above says how close, and how much slower, in this one.
# The trace records no clock speed, so it cannot say why the first steps were slower: the
# profiler starting up around the first step and the GPU bringing its clock up after an
# idle moment are both candidates. Twenty 4096 products are a short load; the burst below shows how
# long a heavier one runs before the GPU slows down.
#
# How fast is that?
# -----------------
# A product of two n×n matrices is 2n³ floating-point operations. From each statistic we
# get a throughput, and put it next to the GPU's measured peak: a large bf16 GEMM timed the
# same way by :func:`~profiling_utils.peaks.measure_peaks`.

peaks = measure_peaks()
if run.has_gpu and peaks is not None:
    print(peaks.summary())
    flops = gemm_flops(n, n, n)
    for name, value in (("median", median_us), ("min", min_us), ("mean", mean_us)):
        tflops = achieved_tflops(flops, value)
        print(
            f"at the {name:6s} {value:7.1f} µs: {tflops:6.1f} TFLOP/s, "
            f"{tflops / peaks.matmul_tflops:.0%} of the measured peak"
        )
    share = achieved_tflops(flops, median_us) / peaks.matmul_tflops
    if share > 1:
        print(
            f"Above 100%: the peak is not a ceiling of the hardware but the median rate of one "
            f"reference GEMM ({peaks.matmul_size}³ over {len(peaks.matmul_durations_us)} steps),"
            f" and the {n} product ran {share - 1:.1%} faster per operation than it did."
        )
    elif share >= 0.97:
        print(
            f"At {share:.0%} of the peak, the {n} product runs about as fast per operation as "
            f"the {peaks.matmul_size} one that set it: at this size the GEMM already fills the GPU."
        )
else:
    print("No GPU here: there is no GEMM kernel and no GPU peak to compare it with.")

# %%
# The slowest and the fastest GEMM on the timeline of the whole run:

marks = [highlight_span(gemms[slowest], "slowest")]
fastest = min(range(len(durations)), key=durations.__getitem__)
if fastest != slowest:
    marks.append(highlight_span(gemms[fastest], "fastest"))
plot_timeline(
    trace, highlights=marks, max_depth=2, title=f"{run.name}: all twenty steps"
)

# %%
# The profiler table sums the twenty steps. Its average column is the mean: the statistic
# the post warns about.

profiler_table(run)

# %%
# Beyond the post: a long burst after an idle pause
# -------------------------------------------------
# The likely causes of variance (clocks, power, heat) need a longer load to show. We let
# the GPU idle for two seconds, then run 400 back-to-back bf16 8192 GEMMs (40 recorded
# steps of ten), a load that lasts a fraction of a second on a current GPU (the output
# gives its length), and plot every kernel's duration against its start time.

burst = None
if device == "cuda":
    a, c = (
        torch.randn(8192, 8192, device=device, dtype=torch.bfloat16) for _ in range(2)
    )
    torch.cuda.synchronize()
    time.sleep(2.0)
    burst = capture(
        lambda: [torch.matmul(a, c) for _ in range(10)],
        name="8192_bf16_burst-after-idle_eager",
        label="ten_gemms",
        wait=0,
        warmup=0,
        active=40,
        out_dir=trace_dir(),
    )
    kernels = [k for k in burst.trace.kernels if burst.trace.step_of(k) is not None]
    starts_ms = [(k.start - kernels[0].start) / 1000 for k in kernels]
    burst_us = [k.dur for k in kernels]
    early, late = statistics.median(burst_us[:20]), statistics.median(burst_us[-100:])
    print(
        f"{len(kernels)} GEMMs in {starts_ms[-1] + burst_us[-1] / 1000:.0f} ms. Median of the "
        f"first 20: {early:.0f} µs; of the last 100: {late:.0f} µs ({late / early - 1:+.1%}); "
        f"slowest {max(burst_us):.0f} µs, fastest {min(burst_us):.0f} µs."
    )
    if late > 1.03 * early:
        print(
            f"The same GEMM ran {late / early - 1:.0%} slower by the end of the burst."
        )
    else:
        print("The GEMM kept its speed through the burst (within 3%).")
    claim(
        "the burst's last 100 GEMMs ran slower than its first 20",
        late > 1.03 * early,
        otherwise="the burst's last 100 GEMMs ran within 3% of its first 20",
        first_20_us=early,
        last_100_us=late,
    )
    if peaks is not None:
        print(
            f"The peak measurement timed the same {peaks.matmul_size} GEMM at a median of "
            f"{peaks.matmul_dur_us:.0f} µs: the burst's first 20 ran at "
            f"{early / peaks.matmul_dur_us - 1:+.1%} against it."
        )
    del a, c
else:
    print("No GPU here: the burst needs one, so this part is skipped.")

# %%
# Every kernel of the burst:

if burst is not None:
    fig, ax = plt.subplots(figsize=(8, 3.8))
    ax.plot(starts_ms, burst_us, ".", markersize=3, color="#009e73")
    ax.axhline(early, color="0.3", linestyle="--", linewidth=1)
    ax.annotate(
        f"median of the first 20: {early:.0f} µs",
        xy=(0.0, early),
        xycoords=("axes fraction", "data"),
        xytext=(4, 4),
        textcoords="offset points",
        fontsize=8,
    )
    ax.set_xlabel("ms since the first GEMM of the burst")
    ax.set_ylabel("GEMM duration (µs)")
    ax.set_title("400 back-to-back bf16 8192 GEMMs after 2 s idle", loc="left")
    ax.grid(True, color="0.92")
    fig.tight_layout()

# %%
# How long did the burst keep its first speed, against how long the twenty-step run above
# kept the GPU busy?

if burst is not None:
    held_ms = next(
        (t for t, d in zip(starts_ms, burst_us, strict=True) if d > 1.03 * early), None
    )
    short_ms = sum(work.dur for work in trace.gpu_work if trace.step_of(work)) / 1000
    if held_ms is None:
        print("The burst never ran 3% slower than its first 20 GEMMs.")
    else:
        print(
            f"The burst first ran more than 3% slower {held_ms:.0f} ms after it began."
        )
    print(f"The twenty-step run kept the GPU busy for {short_ms:.1f} ms in all.")

# %%
# On the H100 this site is built on, our bursts started at the speed the peak measurement
# saw for the same GEMM, kept it for a while, then slowed and moved between plateaus, all
# slower than the start (the output and the plot above show this run). The kernel, its
# inputs and its launch are the same throughout, so the change is in the GPU. The likeliest
# cause is its clock, which power and thermal management lower under a sustained load. The
# trace does not record clocks; to confirm, log them while the load runs, e.g. with
# ``nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv -lms 100``.
# A short benchmark sees the first part only; a long training run lives in the second.
#
# What the cheatsheet finds
# -------------------------
# :func:`~profiling_utils.rules.diagnose` on the twenty-step run, with every rule: whether
# the variance rule fires, and the other marks that a ``wait=0, warmup=0`` schedule leaves.

all_findings = diagnose(trace)
fired = any(finding.rule == "kernel-variance" for finding in all_findings)
print(f"kernel-variance {'fired' if fired else 'did not fire'} on the twenty-step run.")
if run.has_gpu:
    claim(
        "kernel-variance stays silent on the twenty steady GEMMs",
        not fired,
        otherwise="kernel-variance fired on the twenty-step run",
    )
findings_table(all_findings, caption=run.name)

# %%
# And the variance rule on the burst. The rule speaks up only when an instance of a kernel
# takes at least ``VARIANCE_MIN_RATIO`` times its median (printed below): a slow step like
# the post's, not a clock that settles a notch lower.

if burst is not None:
    burst_findings = diagnose(burst.trace, select=["kernel-variance"])
    print(
        f"The burst's slowest GEMM took {max(burst_us) / statistics.median(burst_us):.2f}x "
        f"the median; the rule's threshold is {VARIANCE_MIN_RATIO}x."
    )
else:
    burst_findings = []
    print("No GPU here, so there is no burst to diagnose.")
findings_table(burst_findings, caption="the burst")

# %%
# Beyond the post: a neighbour on the GPU
# ---------------------------------------
# A GPU shared by two processes runs the kernels of one process at a time and switches
# between them (time-slicing). A kernel of ours that is on the GPU when the other
# process's work arrives takes longer, and nothing in our trace shows why: the other
# process's kernels are in its own trace, if anyone records one. We start a second Python
# process that holds an 8192 bf16 matrix on the same GPU
# (:class:`~profiling_utils.neighbour.GpuNeighbour`), record thirty steps of our 4096
# ``matmul_add``, and have the neighbour run four 8192 GEMMs from the tenth recorded step.

shared = None
if device == "cuda":
    calls = [0]
    with GpuNeighbour(size=8192, gemms=4) as neighbour:

        def step_beside_a_neighbour():
            calls[0] += 1
            if calls[0] == 3 + 2 + 10:  # warm-up calls, wait and warmup steps, 10 steps
                neighbour.burst()
            return torch.add(torch.matmul(x, w), b)

        shared = capture(
            step_beside_a_neighbour,
            name=run_name(n, "bf16", warm=True) + "_shared-gpu",
            label="matmul_add",
            warmup_iters=3,
            wait=1,
            warmup=1,
            active=30,
            out_dir=trace_dir(),
        )
    print(f"The neighbour's four 8192 GEMMs took {neighbour.burst_ms:.1f} ms.")
    shared_findings = diagnose(shared.trace, select=["kernel-variance"])
else:
    shared_findings = []
    print("No GPU here: there is no GPU to share, so this part is skipped.")
findings_table(shared_findings, caption="the GEMM beside a neighbour")

# %%
# The finding compares each step's GEMM with the same GEMM in the other steps (same
# kernel, same launch configuration, same place in the step). An instance counts as slow
# when it takes at least ``VARIANCE_MIN_RATIO`` times the median, and exceeds it both by
# several times the spread of the others (their interquartile range) and by a few launch
# latencies of the trace, so that jitter of a microsecond on a tiny kernel does not count.
# For each slow instance it then lists what else of the trace ran on the GPU at the same
# time: here, nothing.

if shared_findings:
    variance = shared_findings[0].evidence
    slowest = variance["slow"][0]
    print(
        f"median {variance['median_us']:.1f} µs, IQR {variance['iqr_us']:.1f} µs; slow "
        f"steps {variance['slow_steps']}"
    )
    print(
        f"slowest: {slowest['dur_us']:.1f} µs in ProfilerStep#{slowest['step']}, "
        f"{slowest['dur_us'] / variance['median_us']:.1f}x the median"
    )
    overlapping = [row["name"] for row in slowest["overlapping"]]
    print(f"other work of the trace on the GPU meanwhile: {overlapping or 'none'}")
    slow_gemm = next(
        k for k in shared.trace.kernels if abs(k.start - slowest["start_us"]) < 1e-3
    )
    plot_timeline(
        shared.trace,
        step=shared.trace.step_of(slow_gemm).number,
        highlights=[highlight_span(slow_gemm, "slow GEMM")],
        max_depth=2,
        title=f"{shared.name}: the slow step",
    )

# %%
# The timeline shows our slow GEMM alone on our GPU lane: nothing of this trace ran beside
# it, and the kernel, its inputs and its launch are the same as in every other step. The
# time went to the other process. That is what the rule says when nothing in the trace
# overlaps a slow instance: the cause is outside the trace. On a machine you do not
# have to yourself, check ``nvidia-smi`` for other processes before reading a slow step as
# your code's, or as the GPU's clocks.

if shared is not None:
    claim(
        "kernel-variance fires on the run that shared the GPU",
        bool(shared_findings),
        findings=len(shared_findings),
    )
    claim(
        "the slowest GEMM took at least three times its median",
        slowest["dur_us"] >= 3 * variance["median_us"],
        slowest_us=slowest["dur_us"],
        median_us=variance["median_us"],
    )
    claim(
        "nothing else of the trace ran on the GPU during the slowest GEMM",
        not slowest["overlapping"],
        overlapping=len(slowest["overlapping"]),
    )

# %%
# What this means for reporting a number
# --------------------------------------
# - **Warm up first**, and say so: the first calls pay one-time costs (see
#   :ref:`sphx_glr_auto_examples_plot_02_cold_start.py`), and the first steps can still run
#   slower than the rest (compare the first two steps above).
# - **Report the median** over many steps, or the minimum when you want the best the
#   hardware can do; give the **spread** (min and max, or the quartiles) and the number of
#   steps. A mean over a handful of steps is pulled by a single slow one.
# - **Match the load you care about.** Short bursts and long sustained runs settle at
#   different clocks; a benchmark of one is not evidence about the other.
# - **Look at the trace, not only the table.** The table's average hides whether one step
#   was slow or all were.
# - **Know who else is on the GPU.** A slow step with nothing of your trace beside it may be
#   another process's work.
#
# The traces
# ----------

trace_links(run)

# %%

trace_links(burst) if burst is not None else print("No burst trace without a GPU.")

# %%

trace_links(shared) if shared is not None else print(
    "No shared-GPU trace without a GPU."
)
