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
once more in this one.
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
import subprocess
import sys

import torch

from profiling_utils import capture, diagnose, load_trace, run_name
from profiling_utils.measures import dead_windows, step_times
from profiling_utils.render import (
    findings_table,
    highlight_between,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)
from profiling_utils.rules import cpu_lane

COLD_PROGRAM = """
import torch
from profiling_utils import capture, run_name
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
print(run.trace_path)
"""

child = subprocess.run([sys.executable, "-c", COLD_PROGRAM], capture_output=True, text=True)
if child.returncode != 0:
    raise RuntimeError(f"the cold run failed:\n{child.stderr}")
cold = load_trace(child.stdout.strip().splitlines()[-1])
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
# Now the same capture in this process, right after the fresh one and after the earlier
# tutorials: still no warm-up iterations, but nothing in it is new to the process.

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x, w, b = (torch.randn(64, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
again = capture(
    lambda: torch.add(torch.matmul(x, w), b),
    name=run_name(64, "bf16", warm=False) + "_same_process",
    label="matmul_add",
    out_dir=trace_dir(),
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
# CPU, and :func:`~profiling_utils.measures.dead_windows` the time from the label's start to
# its first ``aten::`` operator.


def widths_and_dead_windows(trace):
    widths = {t.step: t.cpu_us for t in step_times(trace)}
    dead = {d.step: d.gap_us for d in dead_windows(trace, label="matmul_add")}
    return widths, dead


cold_widths, cold_dead = widths_and_dead_windows(cold)
again_widths, again_dead = widths_and_dead_windows(again.trace)
print("               step width (µs)           dead window (µs)")
print("step    fresh process  same process   fresh process  same process")
for number in cold_widths:
    print(
        f"#{number:<5d} {cold_widths[number]:14.1f} {again_widths[number]:13.1f}"
        f" {cold_dead[number]:15.2f} {again_dead[number]:13.2f}"
    )

# %%
# Read it row by row: is the first recorded step the widest, is its dead window the
# longest, and have both settled by the last step? We let the code answer for this run:


def verdict(widths, dead):
    first, *rest = widths
    wide = widths[first] > max(widths[n] for n in rest)
    long = dead[first] > max(dead[n] for n in rest)
    return (
        f"first step {'is' if wide else 'is not'} the widest, its dead window "
        f"{'is' if long else 'is not'} the longest"
    )


print(f"fresh process: {verdict(cold_widths, cold_dead)}")
print(f"same process:  {verdict(again_widths, again_dead)}")

# %%
# The post saw a long first dead window on its A100: 227.757 µs in its first recorded step
# (``ProfilerStep#2``), then 5.521 µs and 4.488 µs in the next two (`the post
# <https://huggingface.co/blog/torch-profiler>`_).
#
# How much of the first step's excess is a cold start of the *process*, and how much
# comes with the first recorded step of *any* profile? The second column answers that: the
# same process had already run this code, yet its first step still stands out. We put the
# two side by side as "first step over last step":

first, last = min(cold_widths), max(cold_widths)
for label, widths, dead in (
    ("fresh process", cold_widths, cold_dead),
    ("same process ", again_widths, again_dead),
):
    print(
        f"{label}: first step {widths[first] / widths[last]:.1f}x the last's width, "
        f"dead window {dead[first] / dead[last]:.1f}x ({dead[first] - dead[last]:+.1f} µs)"
    )
cold_excess = cold_dead[first] - cold_dead[last]
again_excess = again_dead[first] - again_dead[last]
if cold_excess <= 0:
    print("In the fresh process the first dead window was no longer than the last one.")
elif again_excess >= cold_excess / 2:
    print(f"Extra dead window of the first step: {cold_excess:+.1f} µs in the fresh process,")
    print(f"{again_excess:+.1f} µs in a process that has run this code before. Most of it is")
    print("not a cold start of the process: it comes with the first recorded step.")
else:
    print(f"Extra dead window of the first step: {cold_excess:+.1f} µs in the fresh process,")
    print(f"{again_excess:+.1f} µs in a process that has run this code before. Most of it")
    print("was a cold start of the process.")

# %%
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
#
# And the last recorded step of the same run, for comparison:

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
#   recording, which would explain why even the same-process run above has a wide first
#   step.
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
# Each rule has a threshold, so that ordinary step-to-step jitter is not reported. Whether
# they fired here, and what they ask for:

fired = {finding.rule for finding in findings}
width_ratio = cold_widths[first] / statistics.median(
    width for number, width in cold_widths.items() if number != first
)
dead_ratio = cold_dead[first] / statistics.median(
    gap for number, gap in cold_dead.items() if number != first
)
print(f"cold-start {'fired' if 'cold-start' in fired else 'did not fire'}: it asks for a first")
print(f"  step at least {cpu_lane.COLD_START_MIN_RATIO}x the median of the others and")
print(f"  {cpu_lane.COLD_START_MIN_EXCESS_US:.0f} µs longer; here {width_ratio:.1f}x.")
print(f"dead-window {'fired' if 'dead-window' in fired else 'did not fire'}: it asks for a dead")
print(f"  window at least {cpu_lane.DEAD_WINDOW_MIN_RATIO}x the median of the others and")
print(f"  {cpu_lane.DEAD_WINDOW_MIN_EXCESS_US:.0f} µs longer; here {dead_ratio:.1f}x.")

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
