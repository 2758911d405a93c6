"""
Warm-up and the schedule: what does each step hide?
===================================================

*The profiler's schedule decides which steps are recorded, and warm-up iterations can run
before the profiler starts. Which costs does each knob keep out of the trace, and does
keeping a cost out of the trace make it go away?*

We read the schedule step by step, then profile the same 64 by 64 matmul plus add three
ways, each in a fresh Python process: with nothing hidden, with the post's schedule, and
with the post's schedule after three warm-up iterations. Last, we time the first calls
with a plain clock, outside the profiler, to see what the trace no longer shows. The
:doc:`cold-start tutorial <plot_02_cold_start>` looks inside the
first step that the schedule hides.
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
# - ``repeat`` is the number of cycles; ``0`` repeats the cycle for as long as steps come.
#
# The schedule also takes ``skip_first``: that many steps, before the first cycle only, run
# with the profiler off, like a ``wait`` that is not repeated. It is another way to keep a
# process's first calls out of the trace. This page leaves it at ``0``
# (:func:`~profiling_utils.capture.capture` does not set it), so the first calls are hidden
# by ``wait`` and by warm-up iterations instead. Recent torch versions also take
# ``skip_first_wait``, which drops the first cycle's ``wait``.

import torch
from torch.profiler import schedule

from profiling_utils import capture, diagnose, load_trace, run_name
from profiling_utils.claims import at_least_times, claim
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
from profiling_utils.stats import Distribution

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
exported = [s.number for s in cycles.trace.steps]
print(f"steps in the exported trace: {exported}")
claim(
    "the exported trace holds only the second cycle's recorded steps, 7 to 9",
    exported == [7, 8, 9],
    steps=str(exported),
)
profiler_table(cycles)

# %%
# The table's ``# of Calls`` counts only those steps. To keep several cycles, export each
# one as it ends (``on_trace_ready``) or pass ``acc_events=True`` to
# ``torch.profiler.profile``.
#
# Three ways to record the same steps
# -----------------------------------
#
# Costs that are paid once happen once per *process*. This page is built in the same Python
# process as the tutorials before it, so each recording below runs in a new Python process
# of its own (:func:`~profiling_utils.fresh.run_in_fresh_process`). This is the whole
# program; its three arguments are the warm-up iterations, ``wait`` and ``warmup``, and it
# records ten steps:

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
    active=10,
)
report(trace_path=str(run.trace_path))
"""

setups = {
    "nothing hidden": (0, 0, 0),
    "post's schedule": (0, 1, 1),
    "post's schedule, warmed up": (3, 1, 1),
}
traces = {}
for label, args in setups.items():
    traces[label] = load_trace(
        run_in_fresh_process(PROGRAM, *args).values["trace_path"]
    )
    print(f"{label:27s} warmup_iters={args[0]} wait={args[1]} warmup={args[2]}")
has_gpu = traces["nothing hidden"].has_gpu

# %%
# The first step against the others
# ---------------------------------
#
# For each run, the first recorded step's width on the CPU, from
# :func:`~profiling_utils.measures.step_times`, and the median and interquartile range of
# the nine steps after it:

first_widths, first_ratios = {}, {}
for label, trace in traces.items():
    widths = [t.cpu_us for t in step_times(trace)]
    first_widths[label], later = widths[0], Distribution.of(widths[1:], unit="µs")
    first_ratios[label] = widths[0] / later.median
    print(f"{label}: first step {widths[0]:,.1f} µs, {widths[0] / later.median:,.1f}x")
    print(f"  the later steps' {later}")
    if label == "nothing hidden" and has_gpu:
        at_least_times(
            "with nothing hidden, the first step is at least 20x the later steps' median",
            20,
            first_us=widths[0],
            later_median_us=later.median,
        )
if has_gpu:
    at_least_times(
        "the post's schedule makes the first recorded step at least 20x narrower",
        20,
        nothing_hidden_us=first_widths["nothing hidden"],
        post_schedule_us=first_widths["post's schedule"],
    )

# %%
# With nothing hidden, the first recorded step holds the first call of the process and the
# profiler's own start-up, and dwarfs the others. The post's schedule moves the first call
# into the unrecorded ``wait`` step and throws away the profiler's first step
# (``warmup``). Warm-up iterations move the first calls out of the profiler's steps
# altogether; what they add on top of the schedule is the difference between the first
# steps of the last two runs (either can come out the wider), one step each: too few to
# call it a cost or a saving. Each ratio above
# is against the later steps of its own process, and those medians differ from process to
# process, so read the ratios as rough. For the two runs with the post's schedule, the
# ratio printed for each says how far its first recorded step still stands out; the
# :doc:`footprint tutorial <plot_04_buffer_request_and_offset>` looks at what the profiler
# itself does in such a step. `The post
# <https://huggingface.co/blog/torch-profiler>`_ saw every step take about the same time
# once it had warmed up; this run says whether that held here:

if has_gpu:
    warmed_ratio = first_ratios["post's schedule, warmed up"]
    claim(
        "once warmed up, the first recorded step is within 1.5x of the later steps' median, "
        "as the post saw",
        warmed_ratio <= 1.5,
        otherwise="once warmed up, the first recorded step is still over 1.5x the later "
        "steps' median here, unlike what the post saw",
        first_over_later_median=round(warmed_ratio, 2),
    )

# %%
# The run with nothing hidden, whole: the first step, highlighted, against the later
# steps, which are slivers at the right (with a GPU, the profiler's buffer request is
# highlighted too).

raw = traces["nothing hidden"]
marks = [highlight_span(raw.steps[0].span, "first step")]
marks += [
    highlight_span(o, "Activity Buffer Request")
    for o in raw.overhead
    if o.name == "Activity Buffer Request"
]
plot_timeline(
    raw,
    highlights=marks,
    max_depth=3,
    title="Nothing hidden: the first step holds the first call",
)

# %%
# The profiler's own start-up
# ---------------------------
#
# With a GPU, the grey boxes at the bottom are CUPTI's overhead lane. Only one kind of row
# there is the profiler's own: ``Activity Buffer Request``, CUPTI asking for its first
# buffers when the profiler starts recording. The module loading rows on the same lane are
# the driver loading kernel code, which a first call pays with or without a profiler. The
# schedule's ``warmup`` step is there to hold the buffer request:

for label, trace in traces.items():
    requests = [o.dur for o in trace.overhead if o.name == "Activity Buffer Request"]
    found = ", ".join(f"{us:,.1f} µs" for us in requests) or "none"
    print(f"{label:27s} Activity Buffer Request: {found}")
if has_gpu:
    has_request = {
        label: any(o.name == "Activity Buffer Request" for o in trace.overhead)
        for label, trace in traces.items()
    }
    claim(
        "an Activity Buffer Request is recorded with wait=0, warmup=0 "
        "and in neither run with warmup=1",
        has_request["nothing hidden"]
        and not has_request["post's schedule"]
        and not has_request["post's schedule, warmed up"],
    )

# %%
# The cheatsheet's rules about first steps, applied to the run with nothing hidden and to
# the warmed-up one:

FIRST_STEP_RULES = ["cold-start", "dead-window", "buffer-request"]
raw_findings = diagnose(raw, select=FIRST_STEP_RULES)
findings_table(raw_findings, caption="nothing hidden", rules=FIRST_STEP_RULES)

# %%

warmed = traces["post's schedule, warmed up"]
warmed_findings = diagnose(warmed, select=FIRST_STEP_RULES)
findings_table(
    warmed_findings, caption="post's schedule, warmed up", rules=FIRST_STEP_RULES
)

# %%

if has_gpu:
    raw_rules = {f.rule for f in raw_findings}
    claim(
        "cold-start and buffer-request fire on the run with nothing hidden",
        {"cold-start", "buffer-request"} <= raw_rules,
    )
    claim(
        "no first-step rule fires on the warmed-up run",
        not warmed_findings,
        otherwise="a first-step rule still fires on the warmed-up run: "
        + ", ".join(sorted({f.rule for f in warmed_findings})),
    )

# %%
# ``cold-start`` is the rule for a first step several times wider than the rest;
# ``buffer-request`` reports the profiler's own start-up. Once the schedule and the warm-up
# iterations have done their job, read steady-state numbers from the later steps.
#
# Not profiling a cost is not removing it
# ---------------------------------------
#
# Warm-up keeps one-time costs out of the measurement. The costs themselves are still paid,
# once per process, by whoever runs the code first: the first request a server answers,
# the first step of a training job. A plain clock shows them. We time the first ten calls
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
for _ in range(10):
    start = time.perf_counter()
    torch.add(torch.matmul(x, w), b)
    if device == "cuda":
        torch.cuda.synchronize()
    times.append((time.perf_counter() - start) * 1e6)
report(times_us=times)
"""

calls = run_in_fresh_process(FIRST_CALLS).values["times_us"]
later_calls = Distribution.of(calls[1:], unit="µs")
print(f"first call: {calls[0]:,.1f} µs")
print(f"the next nine: {later_calls}")
if has_gpu:
    at_least_times(
        "without the profiler, the first call is at least 20x the later calls' median",
        20,
        first_us=calls[0],
        later_median_us=later_calls.median,
    )

# %%
# With a GPU, the first call of a fresh process costs many times a later one, and no
# profiler was running here at all. (Creating the CUDA context is not in these numbers:
# the operands were made on the device before the clock started.) Warm-up iterations and
# the schedule's ``wait`` and ``warmup`` only decide whether the trace shows the cost. To
# pay it less often, or at a better moment, you need other tools: keep a process alive
# and reuse it, or load what is needed ahead of time. CUDA graphs, in a later tutorial, do
# not remove it: capturing a graph needs eager warm-up runs first, and those pay it. What
# a graph saves is the CPU's launch cost on every later call.
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
