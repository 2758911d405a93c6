"""
Cold start: why is the first profiled step wider?
=================================================

*The first recorded step of a trace is often far wider than the ones after it. What is in
that extra time, and is it your code's cost?*

We record the very first calls of a Python process, a 64 by 64 matmul plus add, with
nothing hidden by the profiler's schedule, and compare the first step with the nine after
it: its width, the *dead window* of the `Hugging Face post
<https://huggingface.co/blog/torch-profiler>`_ that this gallery follows (from entering the
``record_function`` label to the first ``aten::`` operator inside it), and what the trace
names inside it.
"""

# %%
# A fresh process, recorded from its first call
# ---------------------------------------------
#
# One-time costs are paid once per process. This page is built in the same Python process
# as the tutorials before it, which have already used the GPU, so the recording runs in a
# new Python process of its own (:func:`~profiling_utils.fresh.run_in_fresh_process`).
# Here is its whole program; save it as a file and run it, and you get the same kind of
# trace. ``wait=0, warmup=0`` and no warm-up iterations: the first recorded step is the
# first call of the process.

import statistics

from profiling_utils import diagnose, load_trace
from profiling_utils.claims import at_least_times, claim
from profiling_utils.fresh import run_in_fresh_process
from profiling_utils.measures import dead_windows, step_times
from profiling_utils.render import (
    findings_table,
    highlight_between,
    highlight_span,
    plot_timeline,
    trace_links,
)
from profiling_utils.rules import cpu_lane
from profiling_utils.stats import Distribution

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
    name=run_name(64, "bf16", warm=False) + "_first_call",
    label="matmul_add",
    out_dir=trace_dir(),
    wait=0,
    warmup=0,
    active=10,
)
report(trace_path=str(run.trace_path))
"""

cold = load_trace(run_in_fresh_process(COLD_PROGRAM).values["trace_path"])
has_gpu = cold.has_gpu
print(f"recorded steps: {[s.number for s in cold.steps]}")
print("with GPU activity" if has_gpu else "CPU only: this build has no GPU")

# %%
# Step widths
# -----------
#
# :func:`~profiling_utils.measures.step_times` gives each ``ProfilerStep``'s width on the
# CPU. The nine steps after the first make a
# :class:`~profiling_utils.stats.Distribution`: their median and interquartile range.

widths = [t.cpu_us for t in step_times(cold)]
first_width, later_widths = widths[0], Distribution.of(widths[1:], unit="µs")
print(f"first step:  {first_width:12,.1f} µs")
print(f"later steps: {later_widths}")
if has_gpu:
    at_least_times(
        "the first step, the process's first call, is at least 100x the later steps' median",
        100,
        first_us=first_width,
        later_median_us=later_widths.median,
    )

# %%
# With a GPU the first step is at least a hundred times wider: it is not a slow version
# of the later steps, it holds work that the later steps do not do at all.
#
# The dead window
# ---------------
#
# The post's first clue is the *dead window*: in its first recorded step, 227.757 µs
# passed between entering the label and the first ``aten::`` operator, against 5.521 and
# 4.488 µs in the next two (on the post's A100). Ours, from
# :func:`~profiling_utils.measures.dead_windows`:

dead = [d.gap_us for d in dead_windows(cold, label="matmul_add")]
later_dead = Distribution.of(dead[1:], unit="µs")
print(f"first dead window: {dead[0]:8.1f} µs")
print(f"later ones:        {later_dead}")
if has_gpu:
    at_least_times(
        "the first dead window is at least 3x the later ones' median",
        3,
        first_us=dead[0],
        later_median_us=later_dead.median,
    )
    claim(
        "the first dead window is less than a tenth of the first step's width",
        dead[0] < first_width / 10,
        first_dead_us=dead[0],
        first_step_us=first_width,
    )

# %%
# The dead window is CPU time spent between our label and the operator: calling the
# lambda, entering ``torch.matmul`` through Python and the dispatcher, and the profiler's
# work when it records the operator's start. It is longer the first time, but it is a
# small part of the first step's extra width. The rest is inside the operators.
#
# What the first step holds
# -------------------------
#
# We set the first ``aten::mm`` and ``aten::add`` beside the median of their later calls,
# and list the rows that CUPTI, the library the profiler uses to see the GPU, put on its
# overhead lane during the first step. Only one kind is the profiler's own: the
# ``Activity Buffer Request``, CUPTI asking for memory to hold its records. The others,
# ``Runtime Triggered Module Loading`` and ``Lazy Function Loading``, are the driver
# loading kernel code; CUPTI reports them on the same lane, but a process pays them with
# or without a profiler.

first = cold.steps[0]
for name in ("aten::mm", "aten::add"):
    calls = list(cold.find(name))
    later = statistics.median(op.dur for op in calls[1:])
    print(
        f"{name:9s} first call {calls[0].dur:10,.1f} µs "
        f"({calls[0].dur / first.span.dur:4.0%} of the step), later median {later:,.1f} µs"
    )
overhead = [o for o in cold.overhead if first.start <= o.start < first.end]
overhead_us = sum(o.dur for o in overhead)
request_us = sum(o.dur for o in overhead if o.name == "Activity Buffer Request")
for row in sorted({o.name for o in overhead}):
    rows = [o for o in overhead if o.name == row]
    print(f"  {row}: {len(rows)} row(s), {sum(o.dur for o in rows):,.1f} µs")
print(f"rows on CUPTI's overhead lane in the first step: {overhead_us:,.1f} µs in all")
print(f"of which the profiler's own buffer requests: {request_us:,.1f} µs")

first_mm = next(iter(cold.find("aten::mm")))
if has_gpu:
    claim(
        "the first aten::mm takes more than half of the first step",
        first_mm.dur > first.span.dur / 2,
        first_mm_us=first_mm.dur,
        first_step_us=first.span.dur,
    )
    claim(
        "the profiler's own buffer requests are less than a quarter of the first step",
        request_us < first.span.dur / 4,
        request_us=request_us,
        first_step_us=first.span.dur,
    )

# %%
# With a GPU, most of the first step is the first matrix product. The trace shows *where*
# the time is, not what it was spent on; no row names it. Likely causes, in general (which
# apply depends on the CUDA, cuBLAS and torch versions):
#
# - **Lazy module loading.** Recent CUDA versions load a kernel's code onto the GPU the
#   first time the kernel is launched; CUPTI reports part of it as the module loading rows
#   above.
# - **cuBLAS set-up.** The first matrix product on a device creates a cuBLAS handle and
#   its workspace, and picks a kernel for the shape; this happens once.
# - **Allocator and caches.** The first allocations of a size reach ``cudaMalloc``; later
#   ones reuse the caching allocator's blocks.
# - **The profiler itself.** With ``warmup=0`` its buffer request lands in the first
#   recorded step; the buffer request line above says how much of the step it is.
#
# The first ``aten::add`` is slow too, though its kernel is a plain elementwise sum. The
# trace can say a little more about *where* inside each first call the time went: how much
# of it is the op's own (outside every call recorded inside it), the longest runtime call
# inside it, the overhead rows that fall within it, and the GPU work it launched.

# %%

RUNTIME = {"cuda_runtime", "cuda_driver"}
for name in ("aten::mm", "aten::add"):
    op = next(iter(cold.find(name)))
    own_us = cold.self_us(op)
    calls = [s for s in cold.within(op) if s.cat in RUNTIME]
    gpu_us = sum(w.dur for call in calls for w in cold.gpu_work_of(call))
    inside = [o for o in cold.overhead if op.start <= o.start < op.end]
    print(f"first {name}: {op.dur:,.1f} µs, {own_us:,.1f} µs of it its own")
    if calls:
        longest = max(calls, key=lambda s: s.dur)
        print(f"  longest runtime call inside: {longest.name}, {longest.dur:,.1f} µs")
    for row in sorted({o.name for o in inside}):
        print(f"  {row}: {sum(o.dur for o in inside if o.name == row):,.1f} µs")
    print(f"  GPU work it launched: {gpu_us:,.1f} µs")
    if has_gpu:
        claim(
            f"most of the first {name} is its own time",
            own_us > op.dur / 2,
            own_us=own_us,
            first_call_us=op.dur,
        )
        claim(
            f"the first {name}'s GPU work is under a hundredth of its time on the CPU",
            gpu_us < op.dur / 100,
            gpu_us=gpu_us,
            first_call_us=op.dur,
        )

# %%
# Most of each first call is its own time: on its thread, outside every call the trace
# records inside it. What they launch takes the GPU a hundredth of that or less (the
# claims above): the cost is on the CPU, before the GPU has anything to run. The trace
# says little about what that time is spent on. The overhead rows printed with each call
# fall within its own time, on a row of their own: they are the part CUPTI saw (a buffer
# request among them is the profiler's). The rest of the causes listed above run in calls
# the profiler does not record: it skips a few frequent runtime calls by design, and of
# the driver's API it records only the kernel launches.
#
# The first step in the timeline
# ------------------------------
#
# The first step, with the dead window and the first ``aten::mm`` highlighted:

window = dead_windows(cold, label="matmul_add")[0]
dead_window = highlight_between(window.annotation, window.first_op, "dead window")
plot_timeline(
    cold,
    step=first.number,
    highlights=[
        dead_window,
        highlight_span(first_mm, "first aten::mm"),
    ],
    title=f"Fresh process, ProfilerStep#{first.number}",
)

# %%
# At the scale of the whole step the dead window is hard to make out: under half a percent
# of the step (a claim below), a few pixels at most at the left edge of the ``aten::mm``
# band. Zoomed to it, with as much time again on each side:

if has_gpu:
    claim(
        "the first dead window is under half a percent of the first step's width",
        dead[0] < first_width / 200,
        first_dead_us=dead[0],
        first_step_us=first_width,
    )

plot_timeline(
    cold,
    window=(dead_window.start - window.gap_us, dead_window.end + window.gap_us),
    highlights=[dead_window],
    title=f"Fresh process, ProfilerStep#{first.number}: the dead window",
)

# %%
# The label opens, and the CPU spends the window inside it before the first operator
# starts. What the profiler recorded of that time:

before_op = [
    s.name
    for s in cold.within(window.annotation)
    if s.start < window.first_op.start and s is not window.first_op
]
claim(
    f"nothing is recorded inside the label before {window.first_op.name}",
    not before_op,
    otherwise=f"inside the label, before {window.first_op.name}: {', '.join(before_op)}",
    gap_us=window.gap_us,
)

# %%
# And the last step of the same run. Each picture is zoomed to its own step, so compare
# their time axes.

last = cold.steps[-1]
window = dead_windows(cold, label="matmul_add")[-1]
plot_timeline(
    cold,
    step=last.number,
    highlights=[highlight_between(window.annotation, window.first_op, "dead window")],
    title=f"Fresh process, ProfilerStep#{last.number}",
)

# %%
# What the cheatsheet says
# ------------------------
#
# Two rows of the cheatsheet's CPU lane table are about this page: ``cold-start`` (a first
# step several times wider than the median of the others) and ``dead-window`` (a long gap,
# in one step only, between a label and its first operator). Their thresholds, where a
# launch latency is the trace's own: the median delay from a launch call's start to its
# kernel's start, over the launches that found the GPU idle (:doc:`plot_10_gaps_inside_a_step`
# prints one):

print(
    f"cold-start: at least {cpu_lane.COLD_START_MIN_RATIO}x the others' median "
    f"and {cpu_lane.COLD_START_MIN_EXCESS_LAUNCHES:g} launch latencies more"
)
print(
    f"dead-window: at least {cpu_lane.DEAD_WINDOW_MIN_RATIO}x the quickest other "
    f"and {cpu_lane.DEAD_WINDOW_MIN_EXCESS_LAUNCHES:g} launch latencies more"
)
cold_rules = ["cold-start", "dead-window"]
findings = diagnose(cold, select=cold_rules)
findings_table(findings, caption=cold.path.name, rules=cold_rules)

# %%

fired = {finding.rule for finding in findings}
if has_gpu:
    claim("the cheatsheet's cold-start row fires on this trace", "cold-start" in fired)
    claim(
        "the cheatsheet's dead-window row fires on this trace",
        "dead-window" in fired,
        otherwise="the dead-window row stays silent: the first dead window is under "
        "its threshold on this machine",
        first_us=dead[0],
        quickest_other_us=min(dead[1:]),
    )

# %%
# The thresholds are meant to leave ordinary step-to-step jitter out and to catch the first
# call of the process; a later step that stalls once can pass them too, and the table lists
# every step that did, with its ratio. With the post's schedule (``wait=1``), that first call lands
# in an unrecorded step instead, and the first recorded step no longer holds it: the
# :doc:`next tutorial <plot_03_warmup_and_schedule>` records the same steps three ways and
# measures how much each knob hides. The fix the post recommends is
# to warm up before profiling, and that hides the cost from the trace; it is still paid,
# once per process, by whoever runs the code first.
#
# The trace
# ---------

trace_links(cold.path)
