"""
Kernel variance: one GEMM, twenty timings
=========================================

*The same kernel, on the same data, twenty times in a row: does it take the same time every
time? And which of the twenty numbers should you report?*

A kernel's duration is not a constant of the code. The GPU changes its clock with load,
power draw and temperature, and on a shared machine other work competes for it. The
`Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ met this on its A100:
a typical 4096 GEMM took about 580 µs there, but the mean of five was 1084 µs, pulled up by
instances that ran far longer than the rest (the post's numbers, not this page's).

We record twenty steps of the same GEMM and read their distribution. Then we look at two
causes that no single step of a trace can show: a load sustained for seconds, and a second
process that shares the GPU, which the ``kernel-variance`` rule is there to catch.
"""

# %%
# Twenty steps of the same GEMM
# -----------------------------
# The post's ``matmul_add`` at 4096 in bf16 (128 on a machine without a GPU, where a 4096
# product would take seconds). Three calls warm it up; then every one of twenty steps is
# recorded (``wait=0``, ``warmup=0``, ``active=20``), as in the post.

import collections
import statistics
import textwrap
import warnings

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
from profiling_utils.measures import kernel_launches, kernel_stats, queued_idle
from profiling_utils.neighbour import GpuNeighbour
from profiling_utils.rates import rate_report
from profiling_utils.render import (
    Highlight,
    findings_table,
    fold_lines,
    highlight_span,
    plot_per_step,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
    value_table,
)
from profiling_utils.rules.gpu_lane import VARIANCE_MIN_RATIO
from profiling_utils.stats import Distribution, clearly_greater
from profiling_utils.tables import cut

# torch warns that a schedule without a warm-up step can skew the results: see below.
warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
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
# Without a warm-up step in the schedule, the first recorded step also carries the
# profiler's own start-up (torch warns about it; the page hides the warning). That is the
# post's setup, and we keep it; keep an eye on the first steps.
#
# On a GPU the GEMM of each step is the kernel launched from ``aten::mm``
# (:func:`~profiling_utils.measures.kernel_launches` links each kernel to its operator).
# Without a GPU the product runs inside ``aten::mm`` on the CPU, so we time that operator
# instead.

if run.has_gpu:
    gemms = [
        k.kernel for k in kernel_launches(trace) if k.op and k.op.name == "aten::mm"
    ]
else:
    gemms = [op for op in trace.find("aten::mm") if trace.step_of(op) is not None]
steps = [trace.step_of(gemm).number for gemm in gemms]
durations = [gemm.dur for gemm in gemms]
gemm = Distribution.of(durations, unit="µs")
print(cut(gemms[0].name, 88))
print(f"{gemm}; min {gemm.min:.1f}, max {gemm.max:.1f} µs")
print(textwrap.fill("µs per step: " + ", ".join(f"{d:.1f}" for d in durations), 88))

# %%
# Each bar is one step's GEMM, drawn up or down from the median of the twenty (the dashed
# line), so that a difference of a few microseconds shows:

plot_per_step(
    steps,
    {"GEMM": durations},
    log=False,
    from_median=True,
    title=f"The same {n}x{n} bf16 GEMM in {len(steps)} steps",
)

# %%
# :func:`~profiling_utils.measures.kernel_stats` gives the same statistics for every kernel
# of a trace, and flags *outlier steps*: steps holding an instance outside Tukey's fences
# (1.5 interquartile ranges beyond the quartiles) that is also at least 10% and 1 µs away
# from the median, so that jitter is not reported. An instance is set against its *role*,
# the same kernel at the same place in the other steps (here each step runs the GEMM once),
# so that one kernel run at several sizes per step is not judged against its own mix. The
# spread is max minus min over the median.

stats_rows = [
    [
        cut(s.name, 40),
        s.count,
        s.min_us,
        s.median_us,
        s.mean_us,
        s.max_us,
        f"{s.spread:.1%}",
        ", ".join(map(str, s.outlier_steps)) or "none",
    ]
    for s in kernel_stats(trace)
]
columns = ["kernel", "n", "min µs", "median", "mean", "max", "spread", "outliers"]
value_table(columns, stats_rows, caption=run.name) if stats_rows else print(
    "kernel_stats reads GPU kernels, and a CPU run has none."
)

# %%
# What the twenty say, computed from the numbers above:

mean_us = statistics.fmean(durations)
first_two, later = durations[:2], Distribution.of(durations[2:], unit="µs")
print(
    f"The mean, {mean_us:.1f} µs, is {mean_us / gemm.median - 1:+.1%} off the median."
)
print(
    f"Timed over the first five steps only, the mean would be "
    f"{statistics.fmean(durations[:5]):.1f} µs."
)
print(
    f"ProfilerStep#{steps[0]} and #{steps[1]}: {first_two[0]:.1f} and "
    f"{first_two[1]:.1f} µs"
)
print(f"ProfilerStep#{steps[2]} to #{steps[-1]}: {later}")
if run.has_gpu:
    claim(
        "the twenty GEMMs all ran within 10% of their median",
        gemm.max <= 1.1 * gemm.median and gemm.min >= 0.9 * gemm.median,
        otherwise="a GEMM of the twenty ran more than 10% away from their median",
        slowest_us=gemm.max,
        median_us=gemm.median,
    )
    claim(
        "the first two GEMMs were slower than every later one",
        min(first_two) > later.max,
        otherwise="a later GEMM was as slow as one of the first two",
        first_two_us=f"{first_two[0]:.1f}, {first_two[1]:.1f}",
        slowest_later_us=later.max,
    )

# %%
# The post's mean was pulled up by slow instances. The claims above say whether this run's
# twenty stayed within 10% of their median and whether its first two steps were the slow
# ones. Where the first steps are the slower ones, the trace cannot say why, since it
# records no clock speed: the profiler starting up around the first step and the GPU
# raising its clock after an idle moment are both candidates.
#
# The profiler table sums the twenty steps: a total divided by its number of calls is the
# mean, the statistic the post warns about.

profiler_table(run)

# %%
# Where the run recorded the profiler's own ``Activity Buffer Request`` (the post's setup
# has no ``warmup`` step to hold it), the table lists it too, with CUDA time: torch's table
# counts that event of the profiler's overhead row as device time, so the CUDA totals of
# the rows around it can exceed ``Self CUDA time total``. It is CUPTI asking for memory,
# not work of the program: :doc:`page 04 <plot_04_buffer_request_and_offset>` reads it.
#
# How fast is that?
# -----------------
# A product of two n×n matrices is 2n³ floating-point operations. At the median duration
# that is a rate, which :func:`~profiling_utils.rates.rate_report` puts next to the
# datasheet's peak and to two peaks measured on this GPU by
# :func:`~profiling_utils.peaks.measure_peaks`: a large bf16 GEMM in a short burst, timed
# from a trace like ours, and the same GEMM sustained for seconds.

peaks = measure_peaks()
if run.has_gpu and peaks is not None:
    tflops = achieved_tflops(gemm_flops(n, n, n), gemm.median)
    report = rate_report(
        tflops,
        "bf16",
        device=trace.devices[0].name,
        peaks=peaks,
        subject=f"the {n} GEMM at its median",
    )
    print(report)
    datasheet = report.share("datasheet")
    if datasheet is not None:
        claim(
            "the GEMM's median rate is below the datasheet's bf16 peak",
            not datasheet.above_peak,
            tflops=tflops,
            datasheet_tflops=datasheet.peak,
        )
else:
    print("No GPU here: there is no GEMM kernel and no GPU peak to compare it with.")

# %%
# A share above 100% of a measured peak is not a GPU beating itself: each peak is the
# median rate of one reference product under stated conditions, and the report says which
# condition explains it.
#
# Beyond the post: a sustained load
# ---------------------------------
# The two measured peaks time the same 8192 GEMM: a few calls in a burst, read from a
# trace, then calls back to back for seconds, each timed with CUDA events (for calls that
# run back to back, both measure the GPU's time per call). Their durations:

if peaks is not None:
    burst = Distribution.of(peaks.matmul_burst.durations_us, unit="µs")
    sustained = Distribution.of(peaks.matmul_sustained.durations_us, unit="µs")
    print(f"{peaks.matmul_burst.operation}, per call:")
    print(f"  burst:     {burst}")
    print(f"  sustained: {sustained}")
    print(
        f"  sustained over burst: {sustained.median / burst.median:.2f}x the duration"
    )
    print("How each was measured:")
    for measured in (peaks.matmul_burst, peaks.matmul_sustained):
        kind = "sustained" if measured.sustained else "burst"
        how = f"  {kind}: {measured.conditions()}"
        print(textwrap.fill(how, 88, subsequent_indent="    "))
    clocks = peaks.matmul_sustained.sm_clock_mhz
    claim(
        "the GEMM ran clearly slower sustained than in the short burst",
        clearly_greater(sustained, burst),
        otherwise="the GEMM ran as fast sustained as in the short burst, within spread",
        burst=burst,
        sustained=sustained,
    )
    if len(clocks) >= 2:
        print(
            fold_lines(
                "SM clock readings under the sustained load, MHz: "
                + ", ".join(map(str, clocks))
            )
        )
        claim(
            "the SM clock readings moved during the sustained load",
            max(clocks) > min(clocks),
            otherwise="the SM clock read the same throughout the sustained load",
            lowest_mhz=min(clocks),
            highest_mhz=max(clocks),
        )
    slowest_ratio = sustained.max / sustained.median
    claim(
        f"no sustained call took {VARIANCE_MIN_RATIO}x the sustained median, the "
        "kernel-variance rule's threshold",
        slowest_ratio < VARIANCE_MIN_RATIO,
        otherwise=f"a sustained call took at least {VARIANCE_MIN_RATIO}x their median",
        slowest_over_median=slowest_ratio,
    )
else:
    print("No GPU here: there are no measured peaks to compare.")

# %%
# Same kernel, same inputs, same launch: when the sustained run is slower (the claims above
# say whether it was here), the change is in the GPU. The likeliest cause is its clock,
# which power and thermal management lower under a sustained load. NVML's readings of it,
# taken about every quarter second and printed where it could read them, are snapshots of
# a clock that power management keeps adjusting: one reading says little, their median and
# range more. The trace does not record clocks; to watch them while your own load runs, use
# ``nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv -lms 100``.
# A slower clock moves every call together, so no single step stands out from the others
# and ``kernel-variance``, which compares a kernel's instances with their median, has
# nothing to flag. A short benchmark sees the burst; a long training run lives in the
# sustained rate.
#
# What the cheatsheet finds
# -------------------------
# :func:`~profiling_utils.rules.diagnose` with the variance rule only, on the twenty-step
# run (the page's other findings, those of a ``wait=0, warmup=0`` schedule, are read on
# :doc:`plot_03_warmup_and_schedule`):

fired = bool(diagnose(trace, select=["kernel-variance"]))
print(f"kernel-variance {'fired' if fired else 'did not fire'} on the twenty-step run.")
if run.has_gpu:
    claim(
        "kernel-variance stays silent on the twenty GEMMs",
        not fired,
        otherwise="kernel-variance fired on the twenty-step run",
    )

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
shared_findings = []
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
    print("No GPU here: there is no GPU to share, so this part is skipped.")
findings_table(
    shared_findings, caption="the GEMM beside a neighbour", rules=["kernel-variance"]
)

# %%
# The finding compares each step's kernel with the same kernel in the other steps (same
# name, same launch configuration, same place in the step). An instance counts as slow
# when it takes at least the ratio printed below times the median (the rule's
# ``VARIANCE_MIN_RATIO``), and exceeds the median both by several times the spread of the
# others (their interquartile range) and by a few launch latencies of the trace, so that
# jitter of a microsecond on a tiny kernel does not count. For each slow instance it then
# lists what else of the trace ran on the GPU at the same time. The neighbour runs four
# GEMMs, so more than one of our instances, of more than one kernel, can be slow; the
# lines below count them, then detail the slowest of them all and its kernel.

print(f"kernel-variance: slow means at least {VARIANCE_MIN_RATIO}x the median")
if shared_findings:
    every = [f.evidence for f in shared_findings]
    print(
        f"{sum(len(e['slow']) for e in every)} slow instance(s) of {len(every)} kernel(s)"
    )
    variance = max(every, key=lambda e: max(s["dur_us"] for s in e["slow"]))
    slowest = max(variance["slow"], key=lambda s: s["dur_us"])
    print(cut(variance["kernel"], 88))
    print(
        f"median {variance['median_us']:.1f} µs, IQR {variance['iqr_us']:.1f} µs; "
        f"{len(variance['slow'])} slow instance(s), in steps "
        f"{', '.join(map(str, variance['slow_steps']))}"
    )
    print(
        f"slowest: {slowest['dur_us']:.1f} µs in ProfilerStep#{slowest['step']}, "
        f"{slowest['dur_us'] / variance['median_us']:.1f}x the median"
    )
    print(f"other GPU work of this trace meanwhile: {len(slowest['overlapping'])}")
    slow_kernel = next(
        k for k in shared.trace.kernels if abs(k.start - slowest["start_us"]) < 1e-3
    )
    slow_step = shared.trace.step_of(slow_kernel).number
    plot_timeline(
        shared.trace,
        step=slow_step,
        highlights=[highlight_span(slow_kernel, "slow kernel")],
        max_depth=2,
        title=f"{shared.name}, ProfilerStep#{slow_step}: its kernel ran slow",
    )
    ahead = [
        s.number
        for s in shared.trace.steps
        if slow_kernel.start < s.start < slow_kernel.end
    ]
    claim(
        "the CPU started later steps while the slow kernel ran",
        bool(ahead),
        otherwise="the CPU started no step while the slow kernel ran",
        steps=f"{ahead[0]}-{ahead[-1]}" if ahead else "none",
    )
    calls_meanwhile = collections.Counter(
        span.name
        for span in shared.trace.spans
        if span.cat in ("cuda_runtime", "cuda_driver")
        and span.start < slow_kernel.end
        and span.end > slow_kernel.start
    )
    print(
        fold_lines(
            "runtime calls on the CPU while it ran: "
            + (
                ", ".join(f"{name} x{n}" for name, n in calls_meanwhile.items())
                or "none"
            )
        )
    )

# %%
# The picture starts just before that step starts on the CPU, and the dashed lines are
# the edges of the steps, that one's and later ones'. The CPU runs ahead of the GPU, so
# the CPU lane above the kernel need not be the kernel's step: the lines above say which
# steps, if any, the CPU started while the slow kernel ran, and which runtime calls it
# made. A
# ``cudaDeviceSynchronize`` among them, after the last step, is the profiler waiting at
# the end of the recording for the GPU to finish what the CPU queued (page 01 met it).
#
# The slowest instance has our GPU lane to itself: nothing of this trace runs beside it,
# and it is the same kernel, with the same grid and block, as in every other step (the
# claims below check both), called on the same tensors (the code above). The time went
# to the other process. That is what the rule says when nothing in the trace overlaps a
# slow instance: the cause is outside the trace. On a machine you do not have to
# yourself, check ``nvidia-smi`` for other processes before reading a slow step as your
# code's, or as the GPU's clocks.

if shared is not None:
    claim(
        "kernel-variance fires on the run that shared the GPU",
        bool(shared_findings),
        findings=len(shared_findings),
    )
    if shared_findings:
        claim(
            "the slowest instance took at least three times its kernel's median",
            slowest["dur_us"] >= 3 * variance["median_us"],
            slowest_us=slowest["dur_us"],
            median_us=variance["median_us"],
        )
        claim(
            "nothing else of the trace ran on the GPU during the slowest instance",
            not slowest["overlapping"],
            overlapping=len(slowest["overlapping"]),
        )
        configurations = {
            (k.footprint.grid, k.footprint.block)
            for k in kernel_launches(shared.trace)
            if k.kernel.name == slow_kernel.name
        }
        claim(
            "every instance of the slow kernel ran with one grid and block",
            len(configurations) == 1,
            configurations=len(configurations),
        )

# %%
# Slow kernels are one sign of a neighbour. The other can be a wait: while the neighbour's
# GEMMs hold the GPU, our next kernel, launched and queued, cannot start, and our GPU lane
# shows nothing although work was waiting. ``kernel-variance`` compares kernels with their
# own kind and does not see it. :func:`~profiling_utils.measures.queued_idle` lists each
# stretch in which the GPU ran nothing of the trace while launched work waited; on a GPU
# of our own that is a few microseconds at most, the time the GPU takes to start a kernel.
# The longest such wait of each run:

if shared is not None:
    waits = {
        "alone": queued_idle(trace),
        "beside the neighbour": queued_idle(shared.trace),
    }
    longest_wait = {}
    for how, found in waits.items():
        longest_wait[how] = max(found, key=lambda q: q.idle_us, default=None)
        q = longest_wait[how]
        print(
            f"{how:20s} "
            + (
                f"{q.idle_us:8.1f} µs, before {cut(q.work.name, 24)} "
                f"(launched in step {q.step})"
                if q is not None
                else "no wait"
            )
        )
    alone_us = longest_wait["alone"].idle_us if longest_wait["alone"] else 0.0
    stalled = longest_wait["beside the neighbour"]
    stalled_us = stalled.idle_us if stalled is not None else 0.0
    claim(
        "beside the neighbour, launched work waited on an idle lane at least 10x longer "
        "than in the run alone",
        stalled_us >= 10 * max(alone_us, 1.0),
        otherwise="beside the neighbour, no launched work waited on an idle lane 10x "
        "longer than in the run alone",
        shared_us=stalled_us,
        alone_us=alone_us,
    )
    if stalled is not None and stalled_us >= 10 * max(alone_us, 1.0):
        margin = stalled_us / 2
        plot_timeline(
            shared.trace,
            window=(
                min(stalled.launch.start, stalled.start_us) - margin,
                stalled.work.start + margin,
            ),
            highlights=[
                Highlight(stalled.start_us, stalled.work.start, "idle, work queued")
            ],
            max_depth=1,
            title=f"{shared.name}: our work waits",
        )
        queued_meanwhile = [
            span
            for span in shared.trace.spans
            if span.is_launch and stalled.start_us < span.start < stalled.work.start
        ]
        claim(
            "the CPU went on launching while the GPU lane sat idle",
            bool(queued_meanwhile),
            otherwise="the CPU launched nothing more while the GPU lane sat idle",
            launches=len(queued_meanwhile),
        )
    else:
        print("No wait stood out: nothing to zoom to.")
else:
    print("No GPU here: no queue to wait in.")

# %%
# Where the checks above find a long wait, they draw it: the CPU had launched the next
# work before the idle band began (its launch call is on the CPU lane, drawn even below
# the rows the picture cuts), a last check says whether the CPU went on launching during
# it, and the GPU lane stays empty until the neighbour's GEMMs let our work through, with
# nothing in the trace to explain the band. The lines above say whether this run had such
# a wait; the neighbour may show only as stretched kernels. In a trace of yours, a stretch
# like it is the clearest sign that something outside the trace shared the GPU.
#
# What this means for reporting a number
# --------------------------------------
# - **Warm up first**, and say so: the first calls pay one-time costs (see
#   :doc:`plot_02_cold_start`).
# - **Report the median** over many steps, or the minimum when you want the best the
#   hardware can do; give the **spread** (the quartiles, or min and max) and the number of
#   steps. A mean over a handful of steps is pulled by a single slow one.
# - **Match the load you care about.** A short burst and a sustained run can settle at
#   different clocks; a benchmark of one is not evidence about the other.
# - **Look at the trace, not only the table.** The table's totals hide whether one step
#   was slow or all were.
# - **Know who else is on the GPU.** A slow step with nothing of your trace beside it may be
#   another process's work.
#
# The traces
# ----------

trace_links(run)

# %%

trace_links(shared) if shared is not None else print(
    "No shared-GPU trace without a GPU."
)
