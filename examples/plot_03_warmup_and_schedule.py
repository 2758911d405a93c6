"""
Warm-up and the schedule: what does each step hide?
===================================================

*The profiler's schedule has four knobs, and warm-up iterations can run before the profiler
starts. Which costs does each one keep out of the trace, and does keeping a cost out of
the trace make it go away?*

We read the schedule step by step, then profile the same 64 by 64 matmul plus add three
ways, each in a fresh Python process: with nothing hidden, with the post's schedule, and
with the post's schedule after three warm-up iterations. Last, we time the first calls
with a plain clock, outside the profiler, to see what the trace no longer shows.
"""

# %%
# The schedule, step by step
# --------------------------
#
# ``torch.profiler.schedule(wait, warmup, active, repeat)`` is a function from a step
# number to what the profiler does in that step. Calling it shows the whole plan:
#
# - ``wait`` steps run with the profiler *off*: nothing about them is recorded;
# - ``warmup`` steps run with the profiler *on*, and what it collected is then thrown away,
#   so its own start-up costs can land there;
# - ``active`` steps are recorded; the last one also hands the trace over
#   (``RECORD_AND_SAVE``);
# - ``repeat`` runs that cycle again; ``0`` repeats it for as long as steps come.

import statistics

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch.profiler import schedule

from profiling_utils import capture, diagnose, load_trace, run_name
from profiling_utils.fresh import run_in_fresh_process
from profiling_utils.measures import step_times
from profiling_utils.render import (
    findings_table,
    highlight_span,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)

plan = schedule(wait=1, warmup=1, active=3, repeat=2)
for number in range(12):
    print(f"step {number:2d}: {plan(number).name}")

# %%
# Five steps make one cycle; after two cycles the profiler does nothing more. Each
# ``RECORD_AND_SAVE`` ends a cycle, and with ``repeat=2`` there are two of them. A profiler
# that is exported once, at the end, keeps only the last cycle (torch warns about this
# unless ``acc_events=True``; ``capture`` keeps torch's behaviour, says so in its
# documentation, and silences the warning). We check with a capture in this process:

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x, w, b = (torch.randn(64, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
cycles = capture(
    lambda: torch.add(torch.matmul(x, w), b),
    name=run_name(64, "bf16", warm=True) + "_repeat2",
    label="matmul_add",
    out_dir=trace_dir(),
    warmup_iters=3,
    wait=1,
    warmup=1,
    active=3,
    repeat=2,
)
print(f"steps in the exported trace: {[s.number for s in cycles.trace.steps]}")
profiler_table(cycles)

# %%
# Only the second cycle's steps are in the trace, and the table's ``# of Calls`` counts only
# them. To keep several cycles, export each one as it ends (``on_trace_ready``) or pass
# ``acc_events=True`` to ``torch.profiler.profile``.
#
# Three ways to record the same steps
# -----------------------------------
#
# Costs that are paid once happen once per *process*. This page is built in the same Python
# process as the tutorials before it, so every comparison below runs in a new Python
# process of its own. This is the whole program; its three arguments are the warm-up
# iterations, ``wait`` and ``warmup``:

PROGRAM = """
import sys
import torch
from profiling_utils import capture, run_name
from profiling_utils.fresh import report
from profiling_utils.render import trace_dir

warmup_iters, wait, warmup = (int(arg) for arg in sys.argv[1:4])
torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x, w, b = (torch.randn(64, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
run = capture(
    lambda: torch.add(torch.matmul(x, w), b),
    name=f"{run_name(64, 'bf16', warm=warmup_iters > 0)}_wait{wait}_warmup{warmup}",
    label="matmul_add",
    out_dir=trace_dir(),
    warmup_iters=warmup_iters,
    wait=wait,
    warmup=warmup,
    active=5,
)
report(trace_path=str(run.trace_path))
"""

setups = {
    "nothing hidden": (0, 0, 0),
    "post's schedule": (0, 1, 1),
    "post's schedule, warmed up": (3, 1, 1),
}
traces = {
    label: load_trace(run_in_fresh_process(PROGRAM, *args).values["trace_path"])
    for label, args in setups.items()
}
for label, (warmup_iters, wait, warmup) in setups.items():
    print(f"{label:27s} warmup_iters={warmup_iters} wait={wait} warmup={warmup}")

# %%
# Step widths side by side
# ------------------------
#
# Each run recorded five steps. Their widths on the CPU, from
# :func:`~profiling_utils.measures.step_times`, in µs:

widths = {
    label: [t.cpu_us for t in step_times(trace)] for label, trace in traces.items()
}
print(
    f"{'':27s}" + "".join(f"{f'step {i + 1}':>9s}" for i in range(5)) + "  1st/median"
)
for label, row in widths.items():
    ratio = row[0] / statistics.median(row[1:])
    print(f"{label:27s}" + "".join(f"{v:9.1f}" for v in row) + f"  {ratio:9.1f}x")

# %%
# The last column is the first step's width over the median of the other four: 1 means the
# first step looks like the rest.

fig, ax = plt.subplots(figsize=(7, 4))
positions = np.arange(5)
for offset, (label, row) in zip((-0.27, 0, 0.27), widths.items(), strict=True):
    ax.bar(positions + offset, row, width=0.27, label=label)
ax.set_yscale("log")
ax.set_xticks(positions, [str(i + 1) for i in range(5)])
ax.set_xlabel("recorded step")
ax.set_ylabel("step width on the CPU (µs, log scale)")
ax.set_title("The same five steps, recorded three ways", loc="left")
ax.legend(frameon=False)
fig.tight_layout()

# %%
# With nothing hidden, the first recorded step holds the first call of the process and
# the profiler's own start-up (the next tutorial takes that part apart), so it dwarfs the
# others. The post's schedule moves the first call into the unrecorded ``wait`` step and
# throws away the profiler's first step (``warmup``). Warm-up iterations move the first
# calls out of the profiler's steps altogether. What they add on top of the schedule is
# the difference between the last two rows of the table above.
#
# `The post <https://huggingface.co/blog/torch-profiler>`_ saw every step take about the
# same time once it had warmed up. Where a first recorded step still stands out, with the
# schedule alone or with warm-up iterations too, the likely reason is the profiler's own
# first recorded step, which the previous tutorial measured in a process that had run the
# code before: warm-up iterations cannot remove that, since the profiler is not running
# during them.
#
# Where the time of the unwarmed first step goes
# ----------------------------------------------
#
# The "nothing hidden" trace, with the matrix product's ``aten::mm`` of its first step
# highlighted:

raw = traces["nothing hidden"]
first = raw.steps[0]
mm = next(op for op in raw.find("aten::mm") if raw.step_of(op) is first)
for name in ("aten::mm", "aten::add"):
    durations = {raw.step_of(op).number: op.dur for op in raw.find(name)}
    later = statistics.median(
        d for number, d in durations.items() if number != first.number
    )
    print(
        f"{name:9s} in ProfilerStep#{first.number}: {durations[first.number]:9.1f} µs "
        f"({durations[first.number] / first.span.dur:.0%} of the step); later: {later:.1f} µs"
    )
overhead = [o for o in raw.overhead if first.start <= o.start < first.end]
print(f"CUPTI overhead rows in ProfilerStep#{first.number}: {len(overhead)}")
for row in overhead:
    print(f"  {row.name}: {row.dur:.1f} µs")
plot_timeline(
    raw,
    highlights=[highlight_span(mm, "first aten::mm")],
    max_depth=3,
    title="Nothing hidden: the first step holds the first call",
)

# %%
# With a GPU, the first ``aten::mm`` of a process takes most of its step, and the first
# ``aten::add`` is far slower than the later ones too, though no math library is involved
# in an add. The overhead row (the grey boxes at the bottom of the timeline) names part of
# it: besides the profiler's ``Activity Buffer Request``, CUPTI records the driver loading
# kernel code on first use (``Runtime Triggered Module Loading``, ``Lazy Function
# Loading``). On the H100 this site is built on, those rows add up to far less than the
# two first calls (compare the lines above); setting up cuBLAS is a likely part of the
# product's remaining time, though no row names it. The later steps are thin slivers at
# the right. Under the post's schedule the same calls still happen, in the ``wait`` step,
# where the profiler is off.
#
# The cheatsheet's rules about first steps, applied to the trace with nothing hidden and to
# the warmed-up one:

FIRST_STEP_RULES = ["cold-start", "dead-window", "buffer-request"]
findings_table(diagnose(raw, select=FIRST_STEP_RULES), caption="nothing hidden")

# %%

warmed = traces["post's schedule, warmed up"]
findings_table(
    diagnose(warmed, select=FIRST_STEP_RULES), caption="post's schedule, warmed up"
)

# %%
# ``cold-start`` is the rule for a first step several times wider than the rest;
# ``buffer-request`` reports the profiler's own start-up, which the trace with nothing
# hidden also holds (the next tutorial takes it apart). Once the schedule and the warm-up
# iterations have done their job, a first step that still stands out a little, as measured
# above, stays under the rules' thresholds or near them (the second table): read
# steady-state numbers from the later steps either way.
#
# Not profiling a cost is not removing it
# ---------------------------------------
#
# Warm-up keeps one-time costs out of the measurement. The costs themselves are still paid,
# once per process, by whoever runs the code first: the first request a server answers,
# the first step of a training job. A plain clock shows them. We time the first five calls
# of the step in a fresh process, waiting for the GPU after each one so that the clock
# covers the GPU's work too:

FIRST_CALLS = """
import time
import torch
from profiling_utils.fresh import report

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
x, w, b = (torch.randn(64, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
times = []
for _ in range(5):
    start = time.perf_counter()
    torch.add(torch.matmul(x, w), b)
    if device == "cuda":
        torch.cuda.synchronize()
    times.append((time.perf_counter() - start) * 1e6)
report(times_us=times)
"""

fresh_calls = run_in_fresh_process(FIRST_CALLS).values["times_us"]
print("call           " + "".join(f"{i + 1:>10d}" for i in range(len(fresh_calls))))
print("time (µs)      " + "".join(f"{t:10.1f}" for t in fresh_calls))
later = statistics.median(fresh_calls[1:])
print(
    f"The first call took {fresh_calls[0] / later:.0f}x the median of the calls after it."
)

# %%
# With a GPU, the first call of a fresh process costs many times a later one, whatever the
# profiler's schedule says, and no profiler was running here at all. (Creating the CUDA
# context is not in these numbers: the operands were made on the device before the clock
# started.) Warm-up iterations and the schedule's ``wait`` and ``warmup`` only decide
# whether the trace shows the cost. To shrink the cost itself you need other tools: keep a
# process alive and reuse it, load what is needed ahead of time, or capture the work once
# and replay it (CUDA graphs, in a later tutorial).
#
# The traces
# ----------
#
# The three fresh-process runs, and the two-cycle capture:

trace_links(traces["nothing hidden"].path)

# %%

trace_links(traces["post's schedule"].path)

# %%

trace_links(traces["post's schedule, warmed up"].path)

# %%

trace_links(cycles)
