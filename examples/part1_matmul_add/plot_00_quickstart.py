"""
Quickstart: the profiler table and the trace
============================================

*You run one matrix product and one bias add under the PyTorch profiler. What comes out,
and where do you look first?*

Two things: the **profiler table**, which adds up where the time went, and the **trace**,
which shows when each piece of work ran on the CPU and on the GPU. This page makes both for
``torch.add(torch.matmul(x, w), b)`` and shows them the way every tutorial on this site does:
the table as a table, the trace as a timeline and as a file you can download or open in
Perfetto.
"""

# %%
# The inputs
# ----------
#
# Three square bf16 matrices, on the GPU when there is one. ``step`` is the work one
# profiler step does.

import torch

from profiling_utils import capture, run_name
from profiling_utils.claims import claim
from profiling_utils.measures import step_times
from profiling_utils.render import plot_timeline, profiler_table, trace_dir, trace_links
from profiling_utils.stats import Distribution

device = "cuda" if torch.cuda.is_available() else "cpu"
size = 512
x = torch.randn(size, size, device=device, dtype=torch.bfloat16)
w = torch.randn_like(x)
b = torch.randn_like(x)


def step() -> torch.Tensor:
    return torch.add(torch.matmul(x, w), b)


# %%
# Profile it
# ----------
#
# :func:`~profiling_utils.capture.capture` runs ``step`` under a profiler schedule (one
# step waited, one warm-up step, ten recorded), with a ``record_function("matmul_add")``
# label around each call. Three unprofiled calls come first, so one-time start-up costs stay
# out of the recording. It writes the trace and the table into ``trace_dir()``, which this
# site publishes next to the page.

run = capture(
    step,
    name=run_name(size, "bf16", warm=True),
    label="matmul_add",
    warmup_iters=3,
    active=10,
    out_dir=trace_dir(),
)
recorded = [s.number for s in run.trace.steps]
print(f"recorded {', '.join(run.activities)} activity into {run.trace_path.name}")
print(f"steps in the trace: {recorded}")
claim(
    "the trace holds the ten recorded steps, 2 to 11: step 0 waited, step 1 warmed up",
    recorded == list(range(2, 12)),
)

# %%
# The profiler table
# ------------------
#
# One row per kind of event, summed over the ten recorded steps. The **Self** columns
# count time spent in the event itself; the **total** columns add the events it called, so
# the CPU row of ``matmul_add`` has a total that takes in the ``aten::`` operators below it
# and a self time that is only its own share. With a GPU, a second ``matmul_add`` row,
# marked †, is the same label as the GPU stream sees it; the note under the table says how
# to read it. The two lines under the table, *Self CPU time total* and *Self CUDA time
# total*, compare how long the CPU spent issuing the work with how long the GPU spent
# doing it.

profiler_table(run)

# %%
# The trace
# ---------
#
# The table sums; the trace shows *when*. Here is one recorded step on a time axis (the
# whole trace is in the file below). Each box is an event; a box drawn under another ran
# inside it: the ``ProfilerStep`` span, the ``matmul_add`` label, the ``aten::`` operators
# and the CUDA calls they made (orange). With a GPU, the kernels they launched have a lane
# of their own, under the GPU's copy of the ``matmul_add`` label. A box too narrow for its
# name has it written beside it in grey italics, with a small triangle pointing at the box:
# after it (◂), before it (▸) or under it (▴). That is a label, not an event, in what may
# be an idle stretch. A box that goes on past the picture's edge has a white triangle at
# that edge, pointing the way it goes on: the picture cut it, not the event. Under a CPU
# lane's title is the name the trace gives its thread (in a training step, autograd's
# backward pass runs on a thread of its own, ``pt_autograd_0``).

plot_timeline(run.trace, step=recorded[-1], title=f"{run.name}, one step")

# %%
# Download the trace, or open it in Perfetto, which reads it in your browser and lets you
# zoom into any part of it:

trace_links(run)

# %%
# The trace is also a Python object. Loaded into :class:`profiling_utils.trace.Trace`, its
# profiler steps are ready to measure; :func:`~profiling_utils.measures.step_times` gives
# each step's width on the CPU and the GPU work it launched:

times = step_times(run.trace)
for t in times[:3]:
    print(
        f"ProfilerStep#{t.step}: {t.cpu_us:7.1f} µs, {t.gpu_activities} GPU activities"
    )
print("...")
later = Distribution.of([t.cpu_us for t in times[1:]], unit="µs")
print(f"steps after the first: {later}")

# %%
# A step's width is CPU time: how long the step took to issue its work. One step is a
# sample, not a measurement: the next one differs by some microseconds for no reason the
# trace names, so read a median over many steps and its interquartile range (IQR), the
# middle half of the steps, as above.
#
# What this page says about the run is checked by the run: a claim that does not hold
# fails the build, and the box under the page's title lists each claim with its numbers.

launched = {t.gpu_activities for t in times}
if run.has_gpu:
    claim(
        "every recorded step launched the same GPU work",
        len(launched) == 1,
        gpu_activities=str(sorted(launched)),
    )
first_width = times[0].cpu_us
claim(
    "the first recorded step is wider than the later steps' upper quartile",
    first_width > later.quartiles[1],
    otherwise="the first recorded step is within the later steps' spread",
    first_us=first_width,
    later_q3_us=later.quartiles[1],
)

# %%
# A first recorded step that stands out, even after warm-up calls, is common, and the
# trace does not always name why. The :doc:`cold-start <plot_02_cold_start>` and
# :doc:`profiler-footprint <plot_04_buffer_request_and_offset>` tutorials show what can
# be in a first step when nothing keeps it out. Read steady-state numbers from the later
# steps.
