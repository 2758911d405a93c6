"""
Cold start: why is the first profiled step wider?
=================================================

*The first recorded step of a trace is often visibly wider than the ones after it. What is
in that extra time, and is it your code's cost?*

We profile a 64 by 64 matmul plus add with no warm-up iterations, the post's "cold" run,
and measure two things in every recorded step: its width, and the *dead window* between
entering the ``record_function("matmul_add")`` label and the start of the first ``aten::``
operator inside it. To tell one-time costs of the process from costs of the profiler's
first recorded step, we make the same recording twice: once in a fresh Python process, and
once more in this one, after it has run the step a few times.
"""

# %%
# A fresh process for the cold run
# --------------------------------
#
# One-time costs are paid once per process. This page is built in the same Python process
# as the tutorials before it, which have already used the GPU, so the cold run gets a new
# Python process of its own. Here is its whole program; save it as a file and run it, and
# you get the same trace.

import statistics

import torch

from profiling_utils import capture, diagnose, load_trace, run_name
from profiling_utils.fresh import run_in_fresh_process
from profiling_utils.measures import dead_windows, kernel_launches, step_times
from profiling_utils.render import (
    findings_table,
    highlight_between,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)
from profiling_utils.rules import Facts, cpu_lane

COLD_PROGRAM = """
import torch
from profiling_utils import capture, run_name
from profiling_utils.fresh import report
from profiling_utils.render import trace_dir

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x, w, b = (torch.randn(64, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
run = capture(
    lambda: torch.add(torch.matmul(x, w), b),
    name=run_name(64, "bf16", warm=False) + "_fresh_process",
    label="matmul_add",
    out_dir=trace_dir(),
)
report(trace_path=str(run.trace_path))
"""

cold = load_trace(run_in_fresh_process(COLD_PROGRAM).values["trace_path"])
print(f"cold run: {cold.path.name}, recorded steps {[s.number for s in cold.steps]}")

# %%
# ``capture`` used the post's schedule: step 0 runs unprofiled (``wait=1``), step 1 runs
# with the profiler on but is thrown away (``warmup=1``), and steps 2 to 4 are recorded
# (``active=3``). So the very first call of the process, with whatever it set up, happened
# in step 0, *before* the recording. Keep that in mind for what follows.
#
# The same recording, in a process that has done it before
# --------------------------------------------------------
#
# Now the same capture in this process, with three warm-up iterations first
# (``warmup_iters=3``), so that nothing in the recording is new to the process, even when
# you run this file on its own. Whatever still makes its first recorded step wide is not a
# cold start of the process.

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x, w, b = (torch.randn(64, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
again = capture(
    lambda: torch.add(torch.matmul(x, w), b),
    name=run_name(64, "bf16", warm=True) + "_same_process",
    label="matmul_add",
    out_dir=trace_dir(),
    warmup_iters=3,
)
profiler_table(again)

# %%
# The table sums over the three recorded steps, so a wide first step only raises the
# totals: nothing in it says *which* step was slow. For that we need the trace.
#
# Step by step
# ------------
#
# :func:`~profiling_utils.measures.step_times` gives each ``ProfilerStep``'s width on the
# CPU, :func:`~profiling_utils.measures.dead_windows` the time from the label's start to its
# first ``aten::`` operator, and :func:`~profiling_utils.measures.kernel_launches` where
# each kernel's launch call sits, from which we take the time ``aten::mm`` spends before
# it launches the product's kernel (there is no launch on a CPU).


def per_step(trace):
    """Step width, dead window and aten::mm's time before its launch call, by step (µs)."""
    widths = {t.step: t.cpu_us for t in step_times(trace)}
    dead = {d.step: d.gap_us for d in dead_windows(trace, label="matmul_add")}
    mm_before_launch = {
        k.step: k.launch.start - k.op.start
        for k in kernel_launches(trace)
        if k.op and k.op.name == "aten::mm" and k.launch
    }
    return widths, dead, mm_before_launch


recordings = {"fresh process": cold, "same process, warmed up": again.trace}
for label, trace in recordings.items():
    widths, dead, mm_before_launch = per_step(trace)
    print(f"{label:24s}  step width   dead window   aten::mm before its launch")
    for number, width in widths.items():
        before = mm_before_launch.get(number)
        before_text = f"{before:12.1f}" if before is not None else "           -"
        print(
            f"  ProfilerStep#{number:<10d} {width:10.1f} {dead[number]:13.1f} {before_text}"
        )

# %%
# In both recordings we compare the first step with the last: how much wider it is, and
# how much of that the dead window and the wait inside ``aten::mm`` account for. If the
# warmed-up recording's first step stands out about as much as the fresh process's, the
# extra time comes with the profiler's first recorded step, not with a cold process.

extra_width = {}
for label, trace in recordings.items():
    widths, dead, mm_before_launch = per_step(trace)
    first, last = min(widths), max(widths)
    extra_width[label] = widths[first] - widths[last]
    print(f"{label}: first step {extra_width[label]:+.1f} µs wider than the last;")
    print(f"  dead window {dead[first] - dead[last]:+.1f} µs", end="")
    if first in mm_before_launch and last in mm_before_launch:
        extra = mm_before_launch[first] - mm_before_launch[last]
        print(f", aten::mm before its launch {extra:+.1f} µs", end="")
    print()
if extra_width["fresh process"] > 0:
    kept = extra_width["same process, warmed up"] / extra_width["fresh process"]
    print(
        f"The warmed-up recording's extra width is {kept:.0%} of the fresh process's:"
    )
    print(
        "  most of it comes with the profiler's first recorded step."
        if kept >= 0.5
        else "  most of it was a cold start of the process."
    )

# %%
# The dead window the post points at is one part of the extra width; the lines above say
# how it compares with the wait inside ``aten::mm`` in this build.
#
# `The post <https://huggingface.co/blog/torch-profiler>`_ saw a long first dead window on
# its A100: 227.757 µs in its first recorded step (``ProfilerStep#2``), then 5.521 µs and
# 4.488 µs in the next two. Ours, in the fresh process:

cold_widths, cold_dead, _ = per_step(cold)
first, last = min(cold_widths), max(cold_widths)
print(
    f"first dead window {cold_dead[first]:.1f} µs, last {cold_dead[last]:.1f} µs "
    f"(the post's first: 227.757 µs)"
)

# %%
# A different GPU, driver, CUDA and torch pay different one-time costs, so how long the
# first dead window lasts belongs to the machine; that the first one is the longest is
# what carries over.
#
# Where the dead window is
# ------------------------
#
# The first recorded step of the cold run, zoomed in, with the dead window highlighted:
# the ``matmul_add`` label has started, and nothing inside it has yet reached the
# dispatcher.

window = next(d for d in dead_windows(cold, label="matmul_add") if d.step == first)
plot_timeline(
    cold,
    step=first,
    highlights=[highlight_between(window.annotation, window.first_op, "dead window")],
    title=f"Fresh process, ProfilerStep#{first}",
)

# %%
# The dead window is CPU time spent between our label and the operator: calling the
# lambda, entering ``torch.matmul`` through Python and the dispatcher, and the profiler's
# own work when it records the operator's start. Nothing runs on the GPU for this step yet.
# The long ``aten::mm`` box is the other part measured above: the time before its launch
# call (the :ref:`launch-planning tutorial <sphx_glr_auto_examples_plot_06_launch_planning.py>`
# looks inside a first ``aten::mm``).
#
# And the last recorded step of the same run, for comparison. Each picture is zoomed to
# its own step, so read the time axis: this one spans less time.

window = next(d for d in dead_windows(cold, label="matmul_add") if d.step == last)
plot_timeline(
    cold,
    step=last,
    highlights=[highlight_between(window.annotation, window.first_op, "dead window")],
    title=f"Fresh process, ProfilerStep#{last}",
)

# %%
# What makes a first step wide
# ----------------------------
#
# The trace shows *where* the extra time is, not what it was spent on. Likely causes, in
# general (none of them is named in the trace, and which ones apply depends on the CUDA,
# cuBLAS and torch versions):
#
# - **Lazy module loading.** Recent CUDA versions load a kernel's code onto the GPU the first
#   time that kernel is launched, not when the program starts. The first launch of each
#   kernel pays for it.
# - **cuBLAS and cuBLASLt set-up.** The first matrix product on a device creates a library
#   handle and allocates a workspace for it; both happen once.
# - **Heuristics.** cuBLAS picks a kernel for each new shape and type; the choice can be
#   cached, so the first product of a shape may cost more than the next.
# - **Allocator and caches.** The first allocations of a size reach ``cudaMalloc``; later
#   ones reuse the caching allocator's blocks. CPU caches and branch predictors are cold
#   too.
# - **The profiler itself.** The first step it records may pay for setting up its own
#   recording, which would explain a wide first step in the warmed-up recording above.
#
# With the post's schedule, the first *call* lands in the unrecorded ``wait`` step, so most
# of the set-up costs above are paid before anything is recorded. What a first recorded
# step still shows is what was left over, plus the profiler's share.
#
# The fix is the one the post recommends: warm up before profiling. The next tutorial does
# that, and shows what it does and does not change.
#
# What the cheatsheet says
# ------------------------
#
# Two rows of the cheatsheet's CPU lane table are about this page: ``cold-start`` (a first
# step several times wider than the others) and ``dead-window`` (a long gap, in one step
# only, between a label and its first operator). Applied to the fresh process's trace:

findings = diagnose(cold, select=["cold-start", "dead-window"])
findings_table(findings, caption=cold.path.name)

# %%
# Each rule has a threshold, so that ordinary step-to-step jitter is not reported: the
# first step must be some multiple of the other steps (their median for a step's width,
# the quickest of them for a dead window, since the second step is often still settling),
# and longer by a few of the trace's own launch latencies (the median time from a launch
# call to its kernel's start on an idle GPU, which differs from one GPU and driver to
# another). The thresholds, and this recording's first step against them:


def first_against(by_step, baseline):
    return by_step[first] / baseline([v for n, v in by_step.items() if n != first])


fired = {finding.rule for finding in findings}
latency = Facts(cold).launch_latency_us
print(f"launch latency in this trace: {latency:.1f} µs")
checks = {
    "cold-start": (
        cold_widths,
        statistics.median,
        "the median",
        cpu_lane.COLD_START_MIN_RATIO,
        cpu_lane.COLD_START_MIN_EXCESS_LAUNCHES * latency,
    ),
    "dead-window": (
        cold_dead,
        min,
        "the quickest",
        cpu_lane.DEAD_WINDOW_MIN_RATIO,
        cpu_lane.DEAD_WINDOW_MIN_EXCESS_LAUNCHES * latency,
    ),
}
for rule, (by_step, baseline, which, min_ratio, min_excess_us) in checks.items():
    verdict = "fired" if rule in fired else "did not fire"
    print(f"{rule} {verdict}: it asks for {min_ratio}x {which} of the other steps")
    print(
        f"  and {min_excess_us:.0f} µs more; here {first_against(by_step, baseline):.1f}x"
    )

# %%
# A first step that stands out by less than that is what a warmed-up recording normally
# looks like; the rules are there for the case the post met, where one-time costs fill the
# first recorded step. The next tutorial records a trace with nothing hidden, and applies
# the same rules to it.
#
# The traces
# ----------

trace_links(cold.path)

# %%

trace_links(again)
