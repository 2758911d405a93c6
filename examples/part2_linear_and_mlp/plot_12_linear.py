"""
nn.Linear: one GEMM, the transpose and the bias
===============================================

*Profile one* ``nn.Linear`` *layer. Its weight is used transposed and its bias is added:
which kernels does that take? And can* ``torch.compile`` *do anything for a single layer?*

A linear layer computes ``x @ W.T + b``. Written out, that is a transpose, a matrix
product and an add. The
`second post of the Hugging Face series
<https://huggingface.co/blog/torch-mlp-fusion>`_ ("Profiling in PyTorch (Part 2): From
nn.Linear to a Fused MLP") profiled a ``Linear(32, 64)`` on a batch of 1024 rows in bf16 on
its A100, and found one GEMM kernel and nothing else: the transpose cost no kernel, and the
add went into the GEMM. We check each of these on the GPU this page was built on, look at
how the transpose reaches the kernel, and compile the layer.
"""

# %%
# One layer, profiled
# -------------------
# The post's layer, with a bias, in bf16, under ``torch.no_grad()`` (no autograd
# bookkeeping). ``record_shapes=True`` makes the profiler write each operator's input
# sizes and strides into the trace; we use them below. Three unprofiled calls first, then
# twenty recorded steps (the profiler's schedule waits one step and warms up on another
# before it records, so they are numbered from 2).

import textwrap

import torch

from profiling_utils import (
    capture,
    compare,
    diagnose,
    roofline,
    run_name,
    time_calls,
)
from profiling_utils.claims import claim, which_is_greater, who_sets_the_pace
from profiling_utils.measures import host_speed_ratio, kernel_launches, step_times
from profiling_utils.render import (
    findings_table,
    gpu_work_listing,
    plot_timeline,
    profiler_table,
    span_tree,
    trace_dir,
    trace_links,
)
from profiling_utils.stats import Distribution

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
layer = torch.nn.Linear(32, 64, device=device, dtype=torch.bfloat16)
x = torch.randn(1024, 32, device=device, dtype=torch.bfloat16)


def step_of(fn):
    def step():
        with torch.no_grad():
            return fn(x)

    return step


def profile(fn, how):
    return capture(
        step_of(fn),
        name="linear_" + run_name((1024, 32, 64), "bf16", warm=True, compiled=how),
        label="linear_fwd",
        active=20,
        warmup_iters=3,
        record_shapes=True,
        out_dir=trace_dir(),
    )


eager = profile(layer, False)
step = eager.trace.steps[-1]
print(span_tree(eager.trace, step.span, width=80))

# %%
# ``aten::linear`` makes two calls: ``aten::t`` (the transpose, through ``transpose``
# and ``as_strided``) and ``aten::addmm``, which computes ``bias + x @ Wᵀ`` in one
# operator. (Built on a machine without a GPU, this page shows an ``expand`` and a
# ``copy_`` under ``addmm``: the CPU implementation copies the bias into the output first,
# then adds the product to it.)
#
# Which operators have device time?
# ---------------------------------
# The profiler's table, by device time:

profiler_table(eager, row_limit=8)

# %%
# The transpose's rows have CPU time and no device time. Each GPU activity of the trace
# belongs to the operator that launched it (:func:`~profiling_utils.measures.kernel_launches`
# links them); per step, on this run:

launched = [k for k in kernel_launches(eager.trace) if k.step is not None]
steps = len(eager.trace.steps)
by_op = {}
for k in launched:
    by_op.setdefault(k.op.name if k.op else "(no operator)", []).append(k.kernel)
for name, kernels in by_op.items():
    print(f"{name}: {len(kernels) / steps:g} kernel(s) per step, {kernels[0].name}")
if eager.has_gpu:
    views = {"aten::t", "aten::transpose", "aten::as_strided"}
    claim(
        "the transpose launches no GPU work",
        not any(k.op is not None and k.op.name in views for k in launched),
    )
    gemm = launched[0].kernel.name
    claim(
        "every step runs one kernel, a GEMM launched from aten::addmm",
        len(launched) == steps and set(by_op) == {"aten::addmm"},
        kernels=len(launched),
        steps=steps,
    )
    claim(
        "the GEMM kernel's name mentions the bias",
        "bias" in gemm.lower(),
        otherwise="the GEMM kernel's name does not mention the bias",
    )
else:
    print("No GPU here: the transpose, product and add run inside CPU operators.")

# %%
# So the add has no kernel of its own: ``addmm`` hands the bias to the GEMM, which adds
# it to each output element before writing it (an *epilogue*), instead of writing the
# product and reading it back for a separate add. Whether the kernel's name says so is
# the last claim printed above (on a GPU build).
# (:doc:`Page 08 of Part 1 <../part1_matmul_add/plot_08_torch_compile>` met a different
# ``addmm``: there the bias was a full matrix, which ``addmm`` copied into the output
# before the GEMM.)
#
# Where did the transpose go?
# ---------------------------
# ``aten::t`` makes no copy. A tensor is a pointer into memory plus a *stride* per
# dimension: how many elements to skip to move one step along it. The transpose swaps
# the two strides and keeps the memory:

w = layer.weight
wt = w.t()
print(
    f"weight    {list(w.shape)}, strides {w.stride()}, contiguous {w.is_contiguous()}"
)
print(
    f"weight.t() {list(wt.shape)}, strides {wt.stride()}, contiguous {wt.is_contiguous()}"
)
print(f"same memory: {wt.data_ptr() == w.data_ptr()}")

# %%
# The trace recorded the same thing: ``aten::addmm``'s inputs, with the sizes and strides
# it received (bias, ``x``, ``Wᵀ``, then the two scalars ``beta`` and ``alpha``):

addmm = next(
    op for op in eager.trace.find("aten::addmm") if eager.trace.step_of(op) is step
)
for dims, strides, dtype in zip(
    addmm.args["Input Dims"],
    addmm.args["Input Strides"],
    addmm.args["Input type"],
    strict=True,
):
    print(f"  {dtype:14s} sizes {dims!s:12s} strides {strides}")
claim(
    "addmm receives the transposed weight as strides (1, 32) over the weight's memory",
    addmm.args["Input Strides"][2] == list(wt.stride()) == [1, 32],
    strides=str(addmm.args["Input Strides"][2]),
)

# %%
# ``Wᵀ`` arrives as a [32, 64] matrix whose first stride is 1: stored *column by column*
# (column-major), where ``x`` is stored row by row. A GEMM library takes each operand with
# a flag that says how to read it, so the layout costs nothing at run time. cuBLAS, which
# PyTorch calls on NVIDIA GPUs, thinks in column-major matrices and spells the flags ``N``
# (read as stored) and ``T`` (read transposed).
#
# The letters in the kernel's name
# --------------------------------
# The post's A100 ran
# ``cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8``: a CUTLASS
# kernel built for sm80 whose ``tn`` names those two flags. This run's GEMM, cut at its
# underscores:

if eager.has_gpu:
    print(gemm)
    print(" | ".join(gemm.split("_")))
else:
    print("No GPU here: no GEMM kernel to read.")

# %%
# On a Hopper GPU (an H100 or an H200) the kernel is a cuBLASLt ``nvjet`` kernel for sm90,
# and its name ends in three capital letters (split out above, at the name's underscores).
# NVIDIA does not document ``nvjet`` names. The first two letters fit the same reading
# as the A100's ``tn``: PyTorch hands cuBLAS the column-major view of the row-major
# product, which makes the weight the operand read transposed. What the third letter
# encodes we cannot tell from a trace. The groups of two numbers joined by an ``x`` look
# like tile shapes, by analogy with CUTLASS names; the whole name is a label for a tuned
# configuration, not a specification.
#
# What does ``torch.compile`` change?
# -----------------------------------
# The same layer, compiled (``torch.compile`` compiles it in the first of the unprofiled
# calls). One compiled step:

compiled_layer = torch.compile(layer)
compiled = profile(compiled_layer, True)
compiled_step = compiled.trace.steps[-1]
print(span_tree(compiled.trace, compiled_step.span, width=80))

# %%
# The compiler traced the layer's ``forward`` and decomposed ``aten::linear`` into the
# ``addmm`` it makes; Inductor's generated code calls that ``addmm`` directly and builds
# the transposed view of the weight itself, without an operator the profiler records.
# Around it come the rows of a compiled call (met on
# :doc:`page 08 <../part1_matmul_add/plot_08_torch_compile>`): the guard check (``TorchDynamo
# Cache Lookup``), the compiled region, ``Pregraph bytecode`` (the part of the frame
# TorchDynamo rewrote that runs before the graph), AOTAutograd's wrapper, and the generated
# ``call``. The two numbers after
# ``Torch-Compiled Region`` are TorchDynamo's ids for the compiled frame and for its
# compilation (0 the first, higher a recompilation). They are assigned in the running
# process, so code compiled earlier in it can raise them: this script run alone shows
# ``0/0``; in a documentation build the pages before it run in the same process (page 08
# compiles ``nn.Linear`` layers too), and the numbers printed above then count those
# earlier compilations as well: above 0, they need not mean this layer was compiled
# twice. The operators only one run has, and the GPU work per step:

comparison = compare(eager.trace, compiled.trace)
for label, ops in (
    ("eager   ", comparison.ops_only_in_baseline),
    ("compiled", comparison.ops_only_in_trace),
):
    names = ", ".join(o.name for o in ops) or "none"
    print(textwrap.fill(f"ops only in {label}: {names}", 88, subsequent_indent="    "))
for name, run in (("eager", eager), ("compiled", compiled)):
    print(f"{name}:\n{gpu_work_listing(run.trace.steps[-1])}")


def gemm_kernels(run):
    return sorted(
        {k.kernel.name for k in kernel_launches(run.trace) if k.step is not None}
    )


if compiled.has_gpu:
    claim(
        "the compiled layer runs the same single GEMM kernel as eager",
        gemm_kernels(compiled) == gemm_kernels(eager)
        and comparison.trace.kernels_per_step == 1,
        otherwise="the compiled layer runs a different GPU kernel set from eager",
        eager=", ".join(gemm_kernels(eager)),
        compiled=", ".join(gemm_kernels(compiled)),
    )

# %%
# What a step costs the CPU
# -------------------------
# With nothing to fuse, what the compiled call adds is its wrapping. The CPU time of each
# step (the ``ProfilerStep`` span), twenty steps per run, with the GPU's busy time beside
# it:


def per_step(run, field):
    return Distribution.of([getattr(t, field) for t in step_times(run.trace)], "µs")


cpu = {
    name: per_step(run, "cpu_us")
    for name, run in (("eager", eager), ("compiled", compiled))
}
for name, times in cpu.items():
    print(f"{name:9s} CPU {times}")
if eager.has_gpu:
    for name, run in (("eager", eager), ("compiled", compiled)):
        print(f"{name:9s} GPU busy {per_step(run, 'gpu_busy_us')}")
    which_is_greater(
        "a compiled step costs the CPU more than an eager one",
        "a compiled step costs the CPU less than an eager one",
        "compiled and eager steps cost the CPU alike, within the spread",
        host_speed=host_speed_ratio(compiled.trace, eager.trace),
        compiled=cpu["compiled"],
        eager=cpu["eager"],
    )

# %%
# ``which_is_greater`` words the claim by what this run measured: it calls one side greater
# only where the interquartile ranges of the two do not overlap, so a difference inside
# the step-to-step spread is reported as none, and compares the two recordings only where
# the calls both make that hold no call of their own took about as long in each (else the
# host ran at another speed while one was recorded, and the claim says so). On its A100
# the post found the same kernel and the same ``aten::addmm`` in the compiled layer, with
# the compile rows added around them, and a compiled step that cost the CPU a few
# microseconds less.
#
# These CPU times were taken under the profiler, which adds its own work to each
# operator and call it records (more with ``record_shapes``, on here), and the compiled
# step records other rows than the eager one. Timed without the profiler
# (:func:`~profiling_utils.capture.time_calls`: thirty batches of twenty back-to-back
# calls, each batch between two CUDA events, so that a call is timed at the CPU's pace
# when the GPU waits for it; the two variants' batches in turn, so that the machine's
# speed changing meanwhile falls on both), what a call of each costs end to end, and the
# CPU's part of it:

timed = time_calls(
    {
        name: lambda fn=fn: step_of(fn)()
        for name, fn in (("eager", layer), ("compiled", compiled_layer))
    }
)
for name, times in timed.items():
    print(f"{name:9s} per call, unprofiled: end to end {times.end_to_end}")
    print(f"{'':9s} the CPU's part {times.issue}")
if eager.has_gpu:
    which_is_greater(
        "without the profiler, a compiled call takes longer than an eager one",
        "without the profiler, a compiled call takes less time than an eager one",
        "without the profiler, compiled and eager calls take the same time, within the "
        "spread",
        compiled=timed["compiled"].end_to_end,
        eager=timed["eager"].end_to_end,
    )
    who_sets_the_pace("an eager call", timed["eager"])

# %%
# Where the CPU's time is most of a call's, the compiled call's extra CPU work is paid
# in full; the claims above say how it went here.
#
# How busy is the GPU?
# --------------------
# :func:`~profiling_utils.roofline.roofline` counts the GEMM's work from its recorded
# shapes, ``2·m·n·k`` FLOPs, and sets the rate its kernel ran at against the datasheet:

view = roofline(eager.trace)
entries = [e for e in view.entries if e.kind == "gemm"]
if entries:
    e = entries[-1]
    print(
        f"{e.name} {e.input_dims[1]} x {e.input_dims[2]}: {e.flops / 1e6:.2f} MFLOP, "
        f"{e.gpu_us:.1f} µs, {e.tflops:.2f} TFLOP/s"
    )
    if e.peak is not None:
        print(f"{e.intensity:.0f} FLOP per byte moved: {e.bound}-bound by the roofline")
        print(textwrap.fill(f"{e.peak_share:.1%} of {e.peak.describe()}", 88))
        claim(
            "the GEMM reaches less than a tenth of the ceiling that bounds it",
            e.peak_share < 0.1,
            share=e.peak_share,
        )
    gemm_us = Distribution.of([entry.gpu_us for entry in entries], "µs")
    claim(
        "the GEMM kernel takes less than a tenth of a step's CPU time",
        gemm_us.median * 10 < cpu["eager"].median,
        gemm=gemm_us,
        step_cpu=cpu["eager"],
    )
else:
    print(view.reason or "No GPU here: the roofline counts GPU kernels only.")

# %%
# Whether a kernel is bounded by compute or by memory depends on its FLOPs per byte
# against the GPU's *ridge point* (peak FLOP/s over memory bandwidth): below it, memory
# is the ceiling. A product this small does few FLOPs per byte either way, and it ends
# far below its ceiling: the kernel is short, and the step's time is the CPU's work of
# calling it. A single small layer is bound by the CPU's overhead (the operators'
# dispatch and the launch together); the cheatsheet's rules say the same:

linear_rules = ["overhead-bound", "addmm-fusion", "gemm-kernel", "hotspot"]
findings_table(
    diagnose(eager.trace, select=linear_rules), caption=eager.name, rules=linear_rules
)

# %%
# In the timeline
# ---------------
# The last recorded step of each run, CPU lane above, GPU stream below (on a machine
# without a GPU, the CPU lane only). The GEMM is the sliver that follows the launch under
# ``aten::addmm``: the CPU's calls take most of the step.

plot_timeline(
    eager.trace,
    step=eager.trace.steps[-1].number,
    title=f"eager, ProfilerStep#{eager.trace.steps[-1].number}",
)

# %%
# The compiled step: the compile rows wrap the same ``aten::addmm``.

plot_timeline(
    compiled.trace,
    step=compiled.trace.steps[-1].number,
    title=f"compiled, ProfilerStep#{compiled.trace.steps[-1].number}",
)

# %%
# The traces
# ----------

trace_links(eager)

# %%

trace_links(compiled)
