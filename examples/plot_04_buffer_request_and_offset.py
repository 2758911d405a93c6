"""
The profiler's own footprint: buffer requests, lane offsets and the final sync
==============================================================================

*With no* ``wait`` *and no* ``warmup`` *in the schedule, the first recorded step holds work
that is not yours. What is it, how long does it take, and how do you tell it from your own
code?*

We profile a warmed-up 64 by 64 matmul plus add with ``wait=0, warmup=0``, so that the
profiler's start-up lands in the recording, and look at three things the post points out:
the ``Activity Buffer Request`` on the profiler's own row, how far the GPU lane lags behind
the CPU lane, with a gap inside the first step, and the ``cudaDeviceSynchronize`` that ends
the recording. Twenty recorded steps then show which of these happen once.
"""

# %%
# Record with nothing to absorb the start-up
# ------------------------------------------
#
# Three warm-up iterations run before the profiler starts, so the process has already done
# this work: what remains unusual in the first step is the profiler's.

import statistics

import matplotlib.pyplot as plt
import torch

from profiling_utils import capture, diagnose, run_name
from profiling_utils.measures import gpu_gaps, lane_offset, step_times
from profiling_utils.render import (
    Highlight,
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
x, w, b = (torch.randn(64, 64, device=device, dtype=torch.bfloat16) for _ in range(3))


def step():
    return torch.add(torch.matmul(x, w), b)


run = capture(
    step,
    name=run_name(64, "bf16", warm=True) + "_w0a3",
    label="matmul_add",
    out_dir=trace_dir(),
    warmup_iters=3,
    wait=0,
    warmup=0,
    active=3,
)
trace = run.trace
profiler_table(run)

# %%
# torch warned, above the table, that the profiler "won't be using warmup" and that this
# "can skew profiler results". That skew is what this page is about: with ``warmup=0`` the
# profiler's own start-up is recorded with the first step instead of being thrown away
# with a warm-up step.
#
# Most rows of the table are ours: the operators, the launch calls and the kernels. With a
# GPU one is not:

profiler_rows = [
    row for row in run.key_averages if row.key == "Activity Buffer Request"
]
for row in profiler_rows:
    print(
        f"{row.key}: {row.count} call(s), {row.self_cpu_time_total:.1f} µs of CPU time"
    )
if not profiler_rows:
    print(
        "No Activity Buffer Request row: without a GPU there is no CUPTI to ask for one."
    )

# %%
# That row is the profiler's own work. In the trace it has a row of its own.
#
# The Activity Buffer Request
# ---------------------------
#
# The profiler collects GPU activity through NVIDIA's CUPTI, which hands the records over
# in buffers that the profiler provides. Kineto shows the time it spent providing one as an
# ``Activity Buffer Request`` on the overhead row of the trace (``pid -1``).

requests = [span for span in trace.overhead if span.name == "Activity Buffer Request"]
for request in requests:
    inside = trace.step_of(request)
    ops = [op for op in trace.cpu_ops if op.start <= request.start < op.end]
    running = max(ops, key=lambda op: op.depth).name if ops else "no operator"
    print(f"Activity Buffer Request: {request.dur:.1f} µs, from {request.start:.1f} µs")
    print(f"  in ProfilerStep#{inside.number if inside else '?'}, while {running} runs")
if not requests:
    print("No Activity Buffer Request in this trace", end="")
    print(": there is no GPU, so no CUPTI." if not trace.has_gpu else ".")

# %%
# With a GPU, the request falls in the first recorded step, inside the operator named
# above. On the H100 this site is built on that is the first ``aten::mm``, the first
# operator to launch a kernel, which suggests that the profiler asks for its first buffer
# when the session's first GPU activity is about to be recorded. In the timeline the
# request sits on the "CUPTI overhead" row, and the operator above it does not end before
# the request does: the CPU thread waits for it.

first = trace.steps[0]
marks = [highlight_span(r, "Activity Buffer Request") for r in requests]
if not marks:
    marks = [highlight_span(first.span, "first step")]
plot_timeline(trace, highlights=marks, max_depth=4, title=run.name)

# %%
# The post saw the same row on its A100 and tied it to the offset between its CPU and GPU
# lanes (`the post <https://huggingface.co/blog/torch-profiler>`_).
#
# The offset between the lanes
# ----------------------------
#
# :func:`~profiling_utils.measures.lane_offset` measures, per step, how far the GPU lane
# runs behind the CPU lane: from the step's first launch call to the start of the GPU work
# it started, and from the step's start on the CPU to its first GPU work.

offsets = lane_offset(trace)
if offsets:
    print("step  first launch       launch → GPU start   step start → first GPU work")
for offset in offsets:
    print(
        f"#{offset.step:<4d} {offset.launch.name:18s} {offset.offset_us:15.1f} µs"
        f" {offset.step_start_to_gpu_us:26.1f} µs"
    )
if offsets and requests:
    share = (
        sum(r.dur for r in requests if trace.step_of(r) is first)
        / offsets[0].step_start_to_gpu_us
    )
    print(f"The buffer request is {share:.0%} of the first step's start-to-GPU offset.")
if not offsets:
    print("No GPU work in this trace: there is no GPU lane to be offset from.")

# %%
# With a GPU, the first step's offset is many times the later ones'. The buffer request
# holds the CPU before it reaches the first launch, and the last line above says how much
# of the offset it makes up; the first launch call of the session can itself be slow. In
# later steps the GPU starts a few microseconds after each launch.
# `The post <https://huggingface.co/blog/torch-profiler>`_ measured an offset of about
# 2.5 ms on its A100.
#
# Zoomed to the first step, with the offset from the step's start to its first GPU work
# marked across all lanes, and the largest idle stretch of the GPU inside the step:

marks = []
if offsets:
    marks.append(
        Highlight(first.start, offsets[0].gpu.start, "step start → first GPU work")
    )
first_gaps = [gap for gap in gpu_gaps(trace) if gap.step == first.number]
if first_gaps:
    widest_gap = max(first_gaps, key=lambda gap: gap.gap_us)
    marks.append(highlight_between(widest_gap.before, widest_gap.after, "GPU gap"))
plot_timeline(trace, step=first.number, highlights=marks, max_depth=4, title=run.name)

# %%
# The gap inside the step
# -----------------------
#
# The post also saw the GPU idle between the two kernels of this first step, and suggested
# another buffer request as the likely cause. The trace can tell: if the second kernel was
# launched *before* the GPU went idle, something other than our code held the GPU back; if
# it was launched *after*, the GPU was simply waiting for the CPU.

for gap in gpu_gaps(trace):
    launch = trace.launch_of(gap.after)
    late = launch.end - gap.before.end
    reason = (
        f"launched {late:.1f} µs after the GPU went idle: the GPU waited for the CPU"
        if late > 0
        else f"launched {-late:.1f} µs before the GPU went idle: the GPU was held back"
    )
    print(f"ProfilerStep#{gap.step}: {gap.gap_us:.1f} µs idle before the add kernel,")
    print(f"  {reason}")
if not trace.has_gpu:
    print("No GPU here, so no GPU gaps.")

# %%
# Compare the first step's line with the others. On the H100 this site is built on, the
# add kernel of the first step was launched after the GEMM had finished, so the gap is CPU
# time: the first step's operators run slower, after the buffer request, and the GPU waits
# for them (see the output above for this build).
#
# Twenty steps: once, or every time?
# ----------------------------------
#
# The post's test: record many steps. Whatever the profiler does once shows in one step;
# whatever your code does shows in all of them.

long_run = capture(
    step,
    name=run_name(64, "bf16", warm=True) + "_w0a20",
    label="matmul_add",
    out_dir=trace_dir(),
    warmup_iters=3,
    wait=0,
    warmup=0,
    active=20,
)
long_trace = long_run.trace
long_requests = [
    span for span in long_trace.overhead if span.name == "Activity Buffer Request"
]
request_steps = sorted({long_trace.step_of(r).number for r in long_requests})
print(
    f"{len(long_requests)} Activity Buffer Request(s) in 20 steps, in steps {request_steps}"
)
widths = [t.cpu_us for t in step_times(long_trace)]
gap_by_step = {gap.step: gap.gap_us for gap in gpu_gaps(long_trace)}
gaps = [gap_by_step.get(s.number, 0.0) for s in long_trace.steps]
for label, values in (("step width", widths), ("GPU gap", gaps)):
    others = statistics.median(values[1:])
    print(
        f"{label:10s}: first step {values[0]:7.1f} µs, the others' median {others:7.1f} µs"
    )

# %%
# Step by step:

fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 4.6), sharex=True)
numbers = [s.number for s in long_trace.steps]
top.bar(numbers, widths, color="#56b4e9")
top.set_yscale("log")
top.set_ylabel("step width (µs)")
top.set_title("Twenty recorded steps, step by step", loc="left")
bottom.bar(numbers, gaps, color="#009e73")
bottom.set_ylabel("GPU gap (µs)")
bottom.set_xlabel("ProfilerStep#")
bottom.set_xticks(numbers)
fig.tight_layout()

# %%
# With a GPU there is one buffer request, in the first step, and the first step's width
# and gap stand out from the nineteen after it: the profiler's start-up, paid once. A gap
# that your code causes shows in every step, like the smaller gap of the other nineteen:
# the GPU waiting while the CPU gets from the product's launch to the add's. A schedule
# with ``wait`` and ``warmup`` steps keeps the start-up out of the recording, which is why
# the post's default schedule has them.
#
# The synchronisation that ends the window
# ----------------------------------------
#
# When the recording ends, the profiler calls ``cudaDeviceSynchronize`` so that every GPU
# activity has finished and been reported before it collects them. The call blocks the CPU
# for as long as the GPU still has queued work, so its length says more about the GPU than
# about the CPU. We measure it against two amounts of GPU work: what ran *during* the sync
# (what it actually waited for) and what ran in all the recorded steps.


def sync_report(trace):
    """The final cudaDeviceSynchronize against the GPU work it waited for and a median step."""
    syncs = [
        s
        for s in trace.find("cudaDeviceSynchronize")
        if s.start >= trace.steps[-1].start
    ]
    if not syncs:
        print(f"{trace.path.name}: no cudaDeviceSynchronize after the last step")
        return
    sync = syncs[-1]
    during = sum(
        max(0.0, min(work.end, sync.end) - max(work.start, sync.start))
        for work in trace.gpu_work
    )
    times = step_times(trace)
    recorded = sum(t.gpu_busy_us for t in times)
    median_step = statistics.median(t.cpu_us for t in times)
    print(f"{trace.path.name}: cudaDeviceSynchronize {sync.dur:.1f} µs")
    print(f"  GPU busy during it {during:.1f} µs ({during / sync.dur:.0%} of it)")
    print(
        f"  GPU work in all recorded steps {recorded:.1f} µs; median step {median_step:.1f} µs"
    )


sync_report(trace)

# %%
# At this size the GPU finished its last kernel long before the steps ended, so the sync
# has next to nothing to wait for. `The post <https://huggingface.co/blog/torch-profiler>`_
# measured a 1.78 ms sync on its A100, covering 26 µs of GPU work, and read it as the
# overhead-bound symptom: the CPU, not the GPU, set the pace. For contrast, the same
# recording at 8192, where each product keeps the GPU busy far longer than the CPU takes to
# launch it, so the CPU runs ahead of a busy GPU:

if device == "cuda":
    x, w, b = (
        torch.randn(8192, 8192, device=device, dtype=torch.bfloat16) for _ in range(3)
    )
    big = capture(
        step,
        name=run_name(8192, "bf16", warm=True) + "_w0a3",
        label="matmul_add",
        out_dir=trace_dir(),
        warmup_iters=3,
        wait=0,
        warmup=0,
        active=3,
    )
    sync_report(big.trace)
else:
    big = None
    print("No GPU here: no sync to wait for a busy GPU, so no contrast to show.")

# %%
# With a GPU, the sync of the large run is mostly GPU work (the second line): the CPU had
# queued the steps' GEMMs and the sync waits for them to finish. A long sync is therefore
# not CPU cost to optimise; it tells you how far the CPU was ahead of the GPU when the
# window closed.
#
# What the cheatsheet says
# ------------------------
#
# The rules about the profiler's own footprint, applied to the three-step and the
# twenty-step recordings:

FOOTPRINT_RULES = ["buffer-request", "cold-start", "intra-step-gap", "sync-flush"]
findings_table(diagnose(trace, select=FOOTPRINT_RULES), caption=run.name)

# %%

findings_table(diagnose(long_trace, select=FOOTPRINT_RULES), caption=long_run.name)

# %%
# ``buffer-request`` reports the request with the step it fell in and the offset it
# caused; ``cold-start`` flags the first step's width and says how much of it overlaps the
# request. ``intra-step-gap`` reads an idle GPU inside a step by its cause: a host sync,
# the profiler's buffer request holding the CPU in one step, or a GPU held back with its
# next kernel queued (see :ref:`sphx_glr_auto_examples_plot_10_gaps_inside_a_step.py`).
# The first step's late launch measured above is plain CPU time, which it leaves to
# ``cold-start``. ``sync-flush`` speaks only of a sync longer than a median
# step, which the large recording's lines above compare; its finding, if it fired:

big_findings = diagnose(big.trace, select=["sync-flush"]) if big is not None else []
findings_table(big_findings, caption="the 8192 recording")

# %%
# The traces
# ----------

trace_links(run)

# %%

trace_links(long_run)

# %%
# With a GPU, the 8192 recording too:

trace_links(big) if big is not None else None
