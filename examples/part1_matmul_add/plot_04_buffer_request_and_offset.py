"""
The profiler's own footprint: the buffer request, the lane offset and the final sync
====================================================================================

*With no* ``wait`` *and no* ``warmup`` *in the schedule, the first recorded step holds work
that is not yours. What is it, what does it cost, and how do you tell it from your own
code?*

The profiler collects GPU activity through NVIDIA's CUPTI, which hands its records over in
buffers that the profiler provides. Kineto shows the time spent providing one as an
``Activity Buffer Request`` on the trace's overhead row (``pid -1``). The
`Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ found one in its first
recorded step and tied it to a wide offset between its CPU and GPU lanes, and to a gap on
the GPU. Here we record fifty steps of a warmed-up 64 by 64 matmul plus add with nothing
to absorb the profiler's start-up, and sort what happens once from what happens every step.
"""

# %%
# Record in a fresh process
# -------------------------
#
# The profiler starts up in a process's first profiling session; what a later session
# pays again can depend on the sessions before it and on the versions of torch, CUPTI and
# the driver. This page's own process has already profiled other examples while the site
# was built, so the recording is made in a new Python process instead, through
# :func:`~profiling_utils.fresh.run_in_fresh_process`: this is the program it runs, and
# the few lines to copy into your own script. Three calls run before the profiler starts,
# so CUDA and cuBLAS are set up; then fifty steps are recorded with ``wait=0, warmup=0``.
# The same process then records the same fifty steps again, as a second profiling session.

import statistics

import torch

from profiling_utils import capture, diagnose, load_trace, run_name
from profiling_utils.claims import at_least_times, claim
from profiling_utils.fresh import run_in_fresh_process
from profiling_utils.measures import gpu_gaps, lane_offset, step_times
from profiling_utils.render import (
    findings_table,
    highlight_between,
    highlight_span,
    plot_per_step,
    plot_timeline,
    trace_dir,
    trace_links,
    value_table,
)
from profiling_utils.stats import Distribution

STEPS = 50
PROGRAM = """
import sys
import torch
from profiling_utils import capture, run_name
from profiling_utils.fresh import report
from profiling_utils.render import trace_dir

steps = int(sys.argv[1])
device = "cuda" if torch.cuda.is_available() else "cpu"
x, w, b = (torch.randn(64, 64, device=device, dtype=torch.bfloat16) for _ in range(3))

def step():
    return torch.add(torch.matmul(x, w), b)

for session in ("first", "second"):
    run = capture(
        step,
        name=run_name(64, "bf16", warm=True) + f"_w0a{steps}_{session}-session",
        label="matmul_add",
        out_dir=trace_dir(),
        warmup_iters=3,
        wait=0,
        warmup=0,
        active=steps,
    )
    report(**{session: str(run.trace_path)})
"""

fresh = run_in_fresh_process(PROGRAM, STEPS)
trace = load_trace(fresh.values["first"])
second = load_trace(fresh.values["second"])
has_gpu = trace.has_gpu
print(f"{len(trace.steps)} steps recorded {'with' if has_gpu else 'without'} a GPU")

# %%
# torch warns, when it builds such a schedule, that the profiler "won't be using warmup"
# and that this "can skew profiler results". That skew is what this page is about.
#
# The Activity Buffer Request
# ---------------------------
#
# Every span on the overhead row, where it falls, and what our code was running then:

requests = [span for span in trace.overhead if span.name == "Activity Buffer Request"]
first = trace.steps[0]
for request in requests:
    step = trace.step_of(request)
    ops = [op for op in trace.cpu_ops if op.start <= request.start < op.end]
    running = max(ops, key=lambda op: op.depth).name if ops else "no operator"
    print(f"Activity Buffer Request: {request.dur:,.1f} µs")
    print(f"  in ProfilerStep#{step.number if step else '?'}, while {running} runs")
if not has_gpu:
    print("No GPU here: no CUPTI, so no buffer request and no GPU lane.")

# %%
# The request falls in the first recorded step, inside the operator named above. The
# claims below check that this is the first operator that launches a kernel, that it does
# not end before the request does, and when the recording's first CUDA call (a runtime or
# driver API call, such as a kernel launch) starts. In the zoom on the first step, the
# request is the highlighted box on the overhead row:

if has_gpu:
    claim(
        "the recording holds an Activity Buffer Request, only in its first step",
        bool(requests) and all(trace.step_of(r) is first for r in requests),
        requests=len(requests),
        steps=len(trace.steps),
    )
    launching_op = trace.op_of(lane_offset(trace)[0].launch)
    claim(
        "the request falls inside the first operator that launches a kernel, which "
        "ends after it",
        launching_op.start <= requests[0].start and requests[0].end <= launching_op.end,
        operator=launching_op.name,
    )
    first_call = min(trace.runtime_calls, key=lambda call: call.start)
    after_us = first_call.start - requests[0].end
    claim(
        "the recording's first CUDA call starts within 10 µs after the request ends",
        0 <= after_us <= 10,
        otherwise="the recording's first CUDA call does not start within 10 µs after "
        "the request ends",
        call=first_call.name,
        after_us=after_us,
    )
    marks = [highlight_span(r, "Activity Buffer Request") for r in requests]
    plot_timeline(
        trace,
        step=first.number,
        highlights=marks,
        max_depth=4,
        title=f"First session, ProfilerStep#{first.number}: the first recorded step",
    )

# %%
# CUPTI writes an activity record for each CUDA call and each GPU activity. A first CUDA
# call that starts right after the request ends suggests that CUPTI asks for its first
# buffer as it is about to write its first activity record, the one for that call, while
# the CPU thread waits.
#
# The first step against the others
# ---------------------------------
#
# What the request costs shows in the first step's numbers, set against the median of
# the other steps (with the interquartile range, the middle half of those steps):
#
# - the step's width, its CPU time;
# - from the step's start to its first GPU work, the offset between the two lanes;
# - the first launch call, and from it to the start of the GPU work it queued;
# - the GPU's idle time between the product's kernel and the add's.

widths = [t.cpu_us for t in step_times(trace)]
rows = [["step width", widths[0], Distribution.of(widths[1:], unit="µs")]]
if has_gpu:
    offsets = lane_offset(trace)
    gap_by_step = {gap.step: gap.gap_us for gap in gpu_gaps(trace)}
    gaps = [gap_by_step.get(s.number, 0.0) for s in trace.steps]
    measures = {
        "step start → first GPU work": [o.step_start_to_gpu_us for o in offsets],
        "first launch call": [o.launch.dur for o in offsets],
        "launch → its GPU work": [o.offset_us for o in offsets],
        "GPU idle inside the step": gaps,
    }
    for name, values in measures.items():
        rows.append([name, values[0], Distribution.of(values[1:], unit="µs")])
value_table(["µs", "first step", "other steps: median (IQR)"], rows)

# %%
# The first step is many times wider than a typical one, and the buffer request is a
# large share of the difference. The GPU work of the first step also starts much later
# after the step begins: that is the post's offset between the lanes, about 2.5 ms in its
# A100 trace. The first launch call and its GPU work may add to it: whether the profiler's
# start-up also slows that call depends on the GPU and its libraries, so its claim below
# says what this run found.

if has_gpu:
    typical = Distribution.of(widths[1:], unit="µs").median
    at_least_times(
        "the first step is at least 5x as wide as the median of the others",
        5,
        first_step_us=widths[0],
        median_others_us=typical,
    )
    request_us = sum(r.dur for r in requests)
    claim(
        "the buffer request is at least 40% of what the first step takes beyond a "
        "typical step",
        request_us >= 0.4 * (widths[0] - typical),
        request_us=request_us,
        extra_us=widths[0] - typical,
    )
    lag = measures["step start → first GPU work"]
    at_least_times(
        "the first step's GPU work starts at least 5x later after the step begins",
        5,
        first_step_us=lag[0],
        median_others_us=statistics.median(lag[1:]),
    )
    launch = measures["first launch call"]
    claim(
        "the first step's first launch call takes at least 3x a typical one",
        launch[0] >= 3 * statistics.median(launch[1:]),
        otherwise="the first step's first launch call takes less than 3x a typical one",
        first_us=launch[0],
        median_others_us=statistics.median(launch[1:]),
    )

# %%
# The gap inside the step
# -----------------------
#
# The post saw the GPU idle between the two kernels of one step (its second recorded step)
# and concluded that another buffer request had caused it. The trace can tell. If the
# add's launch call began *after* the product's kernel had finished, the idle GPU was
# waiting for the CPU; if it began before, something else held the GPU back.

if has_gpu:
    waited = [
        gap
        for gap in gpu_gaps(trace)
        if trace.launch_of(gap.after).start > gap.before.end
    ]
    print(f"GPU gaps: {len(gpu_gaps(trace))}, in {len(trace.steps)} steps")
    print(
        f"  of which the next launch call began after the GPU went idle: {len(waited)}"
    )
    first_gap = next(gap for gap in gpu_gaps(trace) if gap.step == first.number)
    late_us = trace.launch_of(first_gap.after).start - first_gap.before.end
    print(f"First step: the add's launch call began {late_us:.1f} µs after the GPU")
    print("went idle.")
    claim(
        "in the first step, the add's launch call began after the product's kernel "
        "had finished",
        late_us > 0,
        late_us=late_us,
    )
    at_least_times(
        "the first step's GPU gap is at least 3x the median of the others",
        3,
        first_gap_us=gaps[0],
        median_others_us=statistics.median(gaps[1:]),
    )

# %%
# The end of the first step up close, from the product's launch to the add's kernel, with
# the GPU's idle stretch between the two kernels marked:

if has_gpu:
    product_launch = trace.launch_of(first_gap.before)
    lo = min(product_launch.start, first_gap.before.start)
    hi = first_gap.after.end
    margin = 0.15 * (hi - lo)
    plot_timeline(
        trace,
        window=(
            lo - margin,
            hi + 3 * margin,
        ),  # room after the add's launch for its name
        highlights=[highlight_between(first_gap.before, first_gap.after, "GPU idle")],
        title=f"First session, ProfilerStep#{first.number}: after the request",
    )

# %%
# The first step's gap is CPU time: the GPU waited for a CPU that was slower in that
# step, not for a second buffer request. The later steps have a gap too, a smaller one,
# and the count above says how many of them are the same kind: the CPU taking longer to
# get from the product's launch to the add's than the GPU takes to run a 64 by 64 product.
#
# Once, or every step?
# --------------------
#
# The post's test: record many steps. What the profiler does once shows in one step; what
# your code does shows in all of them.

series = {"step width": widths}
if has_gpu:
    series["GPU idle in the step"] = gaps
plot_per_step([s.number for s in trace.steps], series, title=f"{STEPS} recorded steps")

# %%
# The first step stands out by far; the steps after it settle toward the median. A
# schedule with ``wait`` and ``warmup`` steps keeps that step out of the recording, which
# is why the post's default schedule has them (the
# :doc:`schedule tutorial <plot_03_warmup_and_schedule>` compares them).
#
# A second profiling session
# --------------------------
#
# The fresh process recorded the same fifty steps a second time. Its start-up, against
# the first session's:

for name, recorded in (("first session", trace), ("second session", second)):
    found = [s for s in recorded.overhead if s.name == "Activity Buffer Request"]
    total = sum(s.dur for s in found)
    width = step_times(recorded)[0].cpu_us
    print(f"{name}: {len(found)} buffer request(s), {total:,.1f} µs; ", end="")
    print(f"first step {width:,.1f} µs")

# %%
# How much start-up a later session pays depends on what the profiler and CUPTI kept from
# the first one, which can change with their versions. What this run found:

if has_gpu:
    second_request = sum(
        s.dur for s in second.overhead if s.name == "Activity Buffer Request"
    )
    claim(
        "a second session in the same process pays less than half the first's request",
        second_request < 0.5 * request_us,
        otherwise="a second session in the same process pays at least half the first's "
        "request again",
        first_session_us=request_us,
        second_session_us=second_request,
    )

# %%
# Because that outcome can change with versions, this page does not rely on it: it records
# in a fresh process, where its first session is the process's first, whatever the site's
# build profiled before it.
#
# The synchronisation that ends the recording
# -------------------------------------------
#
# When a recording ends, the profiler calls ``cudaDeviceSynchronize`` so that every GPU
# activity has finished and been reported. The call blocks the CPU for as long as the GPU
# still has queued work, so its length says how far the CPU was ahead of the GPU, not what
# the CPU costs. At this size the GPU has long finished; for contrast, the same recording
# at 8192, where each product keeps the GPU busy far longer than the CPU takes to launch it
# (recorded in this page's process, with the post's schedule: the sync does not depend on
# the start-up).


def final_sync(trace):
    """The last step's closing cudaDeviceSynchronize and the GPU time inside it."""
    syncs = trace.find("cudaDeviceSynchronize")
    sync = next(s for s in reversed(syncs) if s.start >= trace.steps[-1].start)
    busy = sum(
        max(0.0, min(work.end, sync.end) - max(work.start, sync.start))
        for work in trace.gpu_work
    )
    return sync, busy


rows = []
if has_gpu:
    n = 8192
    x, w, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    big = capture(
        lambda: torch.add(torch.matmul(x, w), b),
        name=run_name(n, "bf16", warm=True),
        label="matmul_add",
        out_dir=trace_dir(),
        warmup_iters=3,
    )
    for size, recorded in ((64, trace), (n, big.trace)):
        sync, busy = final_sync(recorded)
        rows.append([f"{size} by {size}", sync.dur, busy, f"{busy / sync.dur:.0%}"])
else:
    print("No GPU here: the profiler makes no device synchronisation to measure.")
value_table(["recording", "sync (µs)", "GPU busy in it (µs)", "share"], rows)

# %%
# The cheatsheet's ``sync-flush`` row speaks of such a sync when it outlasts a median step:

flush = diagnose(big.trace, select=["sync-flush"]) if has_gpu else []
if has_gpu:
    claim("sync-flush fires on the 8192 recording", bool(flush), findings=len(flush))
findings_table(
    flush, caption=big.trace.path.name if has_gpu else None, rules=["sync-flush"]
)

# %%
# At 64 the sync has next to nothing to wait for; at 8192 the GPU is busy for most of it,
# finishing the products the CPU queued. The post measured a 1.78 ms sync covering 26 µs
# of GPU work on its A100 and read it as the overhead-bound symptom. Since a sync waits
# for queued GPU work, one that lasts long while the GPU is idle spent its time on
# something else; the table says how long this run's syncs lasted.

if has_gpu:
    (_, sync_small, busy_small, _), (_, sync_big, busy_big, _) = rows
    claim(
        "at 64 the GPU is busy for less than a quarter of the final sync",
        busy_small < 0.25 * sync_small,
        sync_us=sync_small,
        gpu_busy_us=busy_small,
    )
    claim(
        "at 8192 the GPU is busy for more than half of the final sync",
        busy_big > 0.5 * sync_big,
        sync_us=sync_big,
        gpu_busy_us=busy_big,
    )
    big_sync, _ = final_sync(big.trace)
    first_gpu_us = min(work.start for work in big.trace.gpu_work) - big_sync.start
    claim(
        "at 8192 the recording's first GPU activity starts after the final sync began",
        first_gpu_us > 0,
        otherwise="at 8192 the recording's first GPU activity starts before the final "
        "sync began",
        into_sync_us=first_gpu_us,
    )

# %%
# The busy share counts only GPU work the trace holds. Work launched before the recording
# began (the warm-up step's, with this schedule) is not in it, although the GPU may still
# be running it when the recorded steps start; where the check above found the first
# recorded activity inside the sync, whatever the GPU ran before it there is not counted,
# and the share at 8192 falls short of the time the GPU was busy.

# %%
# What the cheatsheet says
# ------------------------
#
# The cheatsheet's rules about the profiler's footprint, on the fifty-step recording:

request_rules = ["buffer-request", "cold-start", "intra-step-gap"]
findings = diagnose(trace, select=request_rules)
if has_gpu:
    claim(
        "intra-step-gap stays silent on this recording",
        not any(f.rule == "intra-step-gap" for f in findings),
    )
findings_table(findings, caption=trace.path.name, rules=request_rules)

# %%
# ``buffer-request`` reports the request, the step and the op it fell in, and how much of
# that op's self time it is: the profiler table charges the wait to the op. ``cold-start``
# flags the first step's width. ``intra-step-gap`` leaves the first step to ``cold-start``:
# it speaks of idle stretches in later steps, after a host sync, during a buffer request, or
# with the next work already queued (see
# :doc:`plot_10_gaps_inside_a_step`).
#
# The traces
# ----------

trace_links(trace.path, title="first session, 50 steps")

# %%

trace_links(second.path, title="second session, 50 steps")
