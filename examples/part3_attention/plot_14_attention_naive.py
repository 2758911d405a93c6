"""
Naive attention: the copy an out-of-place mask hides
====================================================

*Write causal attention by hand: scores, mask, softmax, product. Which GPU work does the
mask cost, and what changes when it is applied in place?*

`Part 3 of the Hugging Face series <https://huggingface.co/blog/torch-attention-profile>`_
("Profiling in PyTorch (Part 3): Attention is all you profile") starts from attention
written out in PyTorch operators. On its A100 the post found a device-to-device copy in the
trace that no line of the code asks for, coming from ``masked_fill``, and saw it go away
with ``masked_fill_``. We run the same two functions on the GPU this page was built on, find
the copy from the trace, measure it against the memory's datasheet bandwidth, and check
whether removing it saves more GPU time than the steps' own noise.
"""

# %%
# The two functions
# -----------------
# Batch 8, 16 heads, 1024 tokens, head size 64, in bf16, as in the post (a smaller problem on
# a machine without a GPU). The causal mask is built once, outside the profiled step, so
# that the step holds attention only. ``naive`` masks the scores with ``masked_fill``, which
# returns a new tensor; ``in_place`` with ``masked_fill_``, which writes into the scores.

import math

import torch
from torch.nn.functional import softmax

from profiling_utils import capture, diagnose
from profiling_utils.claims import claim
from profiling_utils.measures import kernel_launches, memory_copies, step_times
from profiling_utils.rates import rate_report
from profiling_utils.render import (
    fold_lines,
    gpu_work_listing,
    highlight_span,
    plot_timeline,
    span_tree,
    trace_dir,
    trace_links,
)
from profiling_utils.stats import Distribution, clearly_greater
from profiling_utils.tables import byte_size

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
batch, heads, length, head_dim = (
    (8, 16, 1024, 64) if device == "cuda" else (1, 4, 256, 64)
)
q, k, v = (
    torch.randn(batch, heads, length, head_dim, device=device, dtype=torch.bfloat16)
    for _ in range(3)
)
masked = ~torch.tril(torch.ones(length, length, device=device, dtype=torch.bool))


def attention(in_place: bool) -> torch.Tensor:
    with torch.no_grad():
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        if in_place:
            scores.masked_fill_(masked, float("-inf"))
        else:
            scores = scores.masked_fill(masked, float("-inf"))
        return softmax(scores, dim=-1) @ v


print(f"q, k, v: {list(q.shape)} bf16 on {device}")

# %%
# Profile both
# ------------
# Each function is profiled for 20 steps, after three unprofiled calls; one step is one
# call. ``record_shapes=True`` keeps each operator's input shapes in the trace.

runs = {
    name: capture(
        lambda in_place=in_place: attention(in_place),
        name=f"attention_{batch}x{heads}x{length}x{head_dim}_bf16_{name}",
        label="attention_fwd",
        active=20,
        warmup_iters=3,
        record_shapes=True,
        out_dir=trace_dir(),
    )
    for name, in_place in (("naive", False), ("in_place", True))
}
naive, in_place = runs["naive"], runs["in_place"]
scores_bytes = batch * heads * length * length * 2  # the scores, in bf16

# %%
# What the out-of-place mask calls
# --------------------------------
# The operators the profiler recorded under ``aten::masked_fill`` in the last naive step,
# nested as they ran, with their durations (µs):


def op_in_last_step(trace, name):
    """The first op named ``name`` in the trace's last step."""
    step = trace.steps[-1]
    return next(s for s in trace.by_name.get(name, []) if trace.step_of(s) is step)


fill = op_in_last_step(naive.trace, "aten::masked_fill")
print(span_tree(naive.trace, fill, width=80))

# %%
# And under ``aten::masked_fill_``, in the last in-place step:

fill_ = op_in_last_step(in_place.trace, "aten::masked_fill_")
print(span_tree(in_place.trace, fill_, width=80))

# %%
# ``masked_fill`` must return a new tensor, so it clones the scores (``aten::clone``, which
# copies them with ``aten::copy_``) and then runs the in-place ``masked_fill_`` on the
# clone (the ``aten::expand`` views the mask at the scores' shape: no copy). The in-place
# ``masked_fill_`` goes straight to its own work. This holds on any device:

clones = [c for c in naive.trace.children(fill) if c.name == "aten::clone"]
claim(
    "out-of-place masked_fill clones the scores (aten::clone → aten::copy_) first",
    any(
        c.name == "aten::copy_" for clone in clones for c in naive.trace.children(clone)
    ),
)
claim(
    "in-place masked_fill_ calls no clone",
    not any(c.name == "aten::clone" for c in in_place.trace.children(fill_)),
)

# %%
# The GPU work of a step
# ----------------------
# One step of each run, as the GPU executed it:

for name, run in runs.items():
    print(f"{name}:\n{gpu_work_listing(run.trace.steps[-1])}")

# %%
# Two GEMMs (``QKᵀ`` and ``PV``; a memset of a few bytes next to one is cuBLAS's), the
# division by √d, the mask, the softmax. The division's kernel applies a ``MulFunctor``:
# dividing a CUDA tensor by a Python number, PyTorch multiplies by its reciprocal (a claim
# below checks the kernel's name). The naive step has one more line: a device-to-device
# memcpy, the clone's copy. PyTorch's ``copy_`` copies a contiguous tensor to one of the
# same dtype on the same GPU with ``cudaMemcpyAsync`` rather than with a kernel, so the
# clone appears as a ``Memcpy DtoD``. Counted over all the steps:


def per_step(run):
    kernels = Distribution.of(
        [sum(1 for w in s.gpu_work if w.cat == "kernel") for s in run.trace.steps]
    )
    activities = Distribution.of([t.gpu_activities for t in step_times(run.trace)])
    return kernels.median, activities.median


if naive.has_gpu:
    counts = {name: per_step(run) for name, run in runs.items()}
    for name, (kernels, activities) in counts.items():
        print(f"{name:8s} per step: {kernels:g} kernels, {activities:g} GPU activities")
    copies = [
        c for c in memory_copies(naive.trace) if c.kind == "DtoD" and c.step is not None
    ]
    in_place_copies = [c for c in memory_copies(in_place.trace) if c.kind == "DtoD"]
    launch = naive.trace.launch_of(copies[0].span) if copies else None
    path = [*reversed(list(naive.trace.ancestors(launch))), launch] if launch else []
    chain = " → ".join(span.name for span in [*path, copies[0].span]) if path else ""
    print(fold_lines(f"\nthe copy, from its step down:\n{chain}"))
    claim(
        "every naive step copies the scores (B·H·L·L bf16) device to device, "
        "from inside aten::masked_fill",
        len(copies) == len(naive.trace.steps)
        and all(c.bytes == scores_bytes for c in copies)
        and "aten::masked_fill →" in chain,
        steps=len(naive.trace.steps),
        copies=len(copies),
        bytes=scores_bytes,
    )
    claim("the in-place steps make no device-to-device copy", not in_place_copies)
    division = [
        k.kernel.name
        for k in kernel_launches(naive.trace)
        if k.op is not None and k.op.name == "aten::div"
    ]
    claim(
        "the division by √d runs a MulFunctor kernel",
        bool(division) and all("MulFunctor" in name for name in division),
        otherwise="the division by √d runs a kernel that is not a MulFunctor",
        kernels=len(division),
    )
    claim(
        "both variants run the same number of kernels per step; the copy is the "
        "one extra GPU activity",
        counts["naive"][0] == counts["in_place"][0]
        and counts["naive"][1] == counts["in_place"][1] + 1,
        naive=counts["naive"],
        in_place=counts["in_place"],
    )
else:
    print(
        "No GPU here: the clone copies the scores inside the CPU operator aten::copy_."
    )

# %%
# The post counted six kernels against five on its A100, the memcpy among them; here the
# memcpy is a GPU activity of its own kind, and the kernels are as many in both runs.
#
# The last naive step's GPU work in the timeline, with the clone's copy highlighted (on a
# machine without a GPU, the step's CPU lane instead). ``around="gpu"`` frames the work the
# step launched, wherever it ran: in a GPU-bound run the CPU gets ahead of the GPU, so a
# step's kernels may run long after its CPU side ended (the claim below says whether they
# did here).

last = naive.trace.steps[-1]
step_copies = [
    c for c in memory_copies(naive.trace) if c.kind == "DtoD" and c.step == last.number
]
plot_timeline(
    naive.trace,
    step=last.number,
    around="gpu",
    highlights=[highlight_span(c.span, "Memcpy DtoD") for c in step_copies[:1]],
    title=f"naive, ProfilerStep#{last.number}",
)
if last.gpu_work:
    gpu_start = min(w.start for w in last.gpu_work)
    claim(
        "the last naive step's GPU work starts after the step's CPU side has ended",
        gpu_start > last.end,
        otherwise="the last naive step's GPU work starts before its CPU side ends",
        lag_us=round(gpu_start - last.end, 1),
    )
    gpu_end = max(w.end for w in last.gpu_work)
    meanwhile = sorted(
        {
            s.name
            for s in naive.trace.spans
            if s.lane.kind == "cpu"
            and s.depth == 0
            and s.start < gpu_end
            and s.end > gpu_start
        }
    )
    print(
        "on the CPU while this step's GPU work ran:", ", ".join(meanwhile) or "nothing"
    )

# %%
# Where the claim holds, the CPU lane above the kernels holds none of this step's calls:
# the CPU issued them earlier, and the line above names what it did while they ran. A
# ``cudaDeviceSynchronize`` there, after the last step, waits for the GPU to finish what
# the CPU queued (:doc:`page 01 <../part1_matmul_add/plot_01_overhead_vs_compute>` counts
# that wait in torch's table). A kernel box too narrow for a shortened name shows the
# first word of it, the kernel's family (the GEMMs' ``nvjet``, on a Hopper GPU).
#
# How fast is the copy?
# ---------------------
# The scores are ``[batch, heads, L, L]`` in bf16, 2 bytes an element; the first two
# lines below give their size on this run. :func:`~profiling_utils.rates.rate_report` puts the
# copy's rate, bytes copied per second, next to the datasheet's memory bandwidth. A
# device-to-device copy reads each byte and writes it back, so the datasheet allows it
# half the bandwidth. Where the scores are more than four times the size of the L2 cache
# (a claim below says whether they are), memory, not the cache, sets this ceiling.

print(f"scores: {[batch, heads, length, length]} bf16, {scores_bytes // 2:,} elements")
print(f"        × 2 bytes = {scores_bytes:,} bytes ({byte_size(scores_bytes)})")
if naive.has_gpu and copies:
    l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0)
    if l2_bytes:
        print(f"L2 cache: {byte_size(l2_bytes)}")
        claim(
            "the scores are more than four times the size of the L2 cache",
            scores_bytes > 4 * l2_bytes,
            otherwise="the scores are at most four times the size of the L2 cache",
            scores_bytes=scores_bytes,
            l2_bytes=l2_bytes,
        )
    copy_us = Distribution.of([c.span.dur for c in copies], "µs")
    print(f"copy of {byte_size(copies[0].bytes)}: {copy_us}")
    report = rate_report(
        copies[0].bytes / copy_us.median / 1e3,
        "copy",
        device=naive.trace.devices[0].name,
        copy_bytes=copies[0].bytes,
        subject="the scores' copy, median step",
    )
    print(report)
    claim(
        "the scores' copy stays below the datasheet's ceiling for a copy",
        not report.above_peak,
        shares=", ".join(f"{s.against} {s.share:.0%}" for s in report.shares),
    )
else:
    print("No GPU here: no device-to-device copy to measure.")

# %%
# Does the in-place step save that time?
# --------------------------------------
# A step's GPU time is the time at least one of its kernels or copies ran. Its median over
# the 20 steps, with the spread (the interquartile range), for both runs:

if naive.has_gpu:
    gpu = {
        name: Distribution.of([t.gpu_busy_us for t in step_times(run.trace)], "µs")
        for name, run in runs.items()
    }
    cpu = {
        name: Distribution.of([t.cpu_us for t in step_times(run.trace)], "µs")
        for name, run in runs.items()
    }
    for name in runs:
        print(f"{name:8s} GPU {gpu[name]}\n{'':8s} CPU {cpu[name]}")
    saving = gpu["naive"].median - gpu["in_place"].median
    print(
        f"GPU time saved per step: {saving:.1f} µs; the copy: {copy_us.median:.1f} µs"
    )
    claim(
        "the naive step's GPU time is clearly greater than the in-place step's",
        clearly_greater(gpu["naive"], gpu["in_place"]),
        naive=gpu["naive"],
        in_place=gpu["in_place"],
    )
    claim(
        "the GPU time saved per step is within a factor of two of the copy's own time",
        0.5 * copy_us.median <= saving <= 2 * copy_us.median,
        saved_us=saving,
        copy_us=copy_us.median,
    )
else:
    print("No GPU here: the step GPU times are measured on the GPU build of this page.")

# %%
# The saving is the copy: the other kernels are the same ones, at the same sizes, in both
# runs. What stays is the mask kernel itself. It too reads and writes the whole score
# tensor, and it reads the mask, broadcast over batch and heads, with a generic
# (not vectorised) elementwise kernel. Its time in the in-place run, next to the copy's:

if naive.has_gpu and copies:
    mask_us = Distribution.of(
        [
            k.kernel.dur
            for k in kernel_launches(in_place.trace)
            if k.op is not None and k.op.name == "aten::masked_fill_"
        ],
        "µs",
    )
    print(f"masked_fill_ kernel: {mask_us}\nthe copy:            {copy_us}")
    claim(
        "the in-place mask kernel takes longer than the copy of the same scores",
        clearly_greater(mask_us, copy_us),
        mask_us=mask_us,
        copy_us=copy_us,
        otherwise="the in-place mask kernel is no slower than the copy of the same scores",
    )
else:
    print("No GPU here: the mask kernel is timed on the GPU build of this page.")

# %%
# Fusing the mask into the softmax, or the whole of attention into one kernel, removes
# these round trips through memory: that is what the fused backends of
# :doc:`the next page <plot_15_sdpa_backends>` do.
#
# What the cheatsheet finds
# -------------------------
# The cheatsheet's ``hidden-memcpy`` row looks for exactly this: a ``cudaMemcpyAsync``
# that no copy in the code asked for, here reached through ``masked_fill`` → ``clone`` →
# ``copy_``. :func:`~profiling_utils.diagnose` on each trace, that rule only:

hidden = {
    name: list(diagnose(run.trace, select=["hidden-memcpy"]))
    for name, run in runs.items()
}
for name, found in hidden.items():
    print(
        fold_lines(
            f"{name:9s} hidden-memcpy: {found[0].message if found else 'silent'}"
        )
    )
if naive.has_gpu:
    claim(
        "hidden-memcpy fires on the naive run, from aten::masked_fill, and stays silent on "
        "the in-place run",
        bool(hidden["naive"])
        and hidden["naive"][0].evidence["groups"][0]["op"] == "aten::masked_fill"
        and not hidden["in_place"],
    )

# %%
# Both traces, to open in Perfetto:

trace_links(naive)

# %%

trace_links(in_place)
