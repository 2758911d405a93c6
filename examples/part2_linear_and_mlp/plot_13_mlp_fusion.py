"""
A GeGLU MLP: five kernels, and what fusing two of them saves
============================================================

*Profile the MLP block of a transformer. Which of its kernels are matrix products, why
do products of the same cost run different kernels, and what does fusing the gelu and the
multiply save, in bytes and in time: with* ``torch.compile`` *or with a hand-written
kernel?*

The MLP is a *GeGLU* block: two projections of the input, ``gate`` and ``up``, a
tanh-approximated GELU of the gate multiplied by ``up``, and a ``down`` projection back
to the model's width. The
`second post of the Hugging Face series
<https://huggingface.co/blog/torch-mlp-fusion>`_ ("Profiling in PyTorch (Part 2): From
nn.Linear to a Fused MLP") profiled it at batch 64, sequence 128, width 768 and hidden
size 3072 in bf16 on an A100. We run the same block on the GPU this page was built on,
eager, compiled, and with `Liger Kernel <https://github.com/linkedin/Liger-Kernel>`_'s
fused ``LigerGEGLUMLP``.
"""

# %%
# The block, profiled eagerly
# ---------------------------
# The module as the post writes it: three ``nn.Linear`` without bias. On a machine
# without a GPU the batch is cut to 1 x 8 tokens and the steps to five (at full size a
# CPU takes seconds per call). Three unprofiled calls, then the recorded steps, with
# the shapes recorded.

import re
import textwrap
from collections import Counter
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

from profiling_utils import capture, diagnose, roofline, time_calls
from profiling_utils.claims import claim, which_is_greater, who_sets_the_pace
from profiling_utils.measures import kernel_launches, step_times
from profiling_utils.render import (
    findings_table,
    gpu_work_listing,
    plot_timeline,
    profiler_table,
    span_tree,
    trace_dir,
    trace_links,
    value_table,
)
from profiling_utils.stats import Distribution, clearly_greater
from profiling_utils.tables import byte_size, cut


class GeGLU(torch.nn.Module):
    def __init__(self, dim=768, hidden=3072):
        super().__init__()
        self.gate_proj = torch.nn.Linear(dim, hidden, bias=False)
        self.up_proj = torch.nn.Linear(dim, hidden, bias=False)
        self.down_proj = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        gate = F.gelu(self.gate_proj(x), approximate="tanh")
        return self.down_proj(gate * self.up_proj(x))


torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
batch, seq = (64, 128) if device == "cuda" else (1, 8)
active = 20 if device == "cuda" else 5
dim, hidden = 768, 3072
x = torch.randn(batch, seq, dim, device=device, dtype=torch.bfloat16)
mlp = GeGLU(dim, hidden).to(device, torch.bfloat16)


def profile(model, how):
    def step():
        with torch.no_grad():
            return model(x)

    return capture(
        step,
        name=f"mlp_{batch}x{seq}x{dim}x{hidden}_bf16_warm_{how}",
        label="mlp_fwd",
        active=active,
        warmup_iters=3,
        record_shapes=True,
        out_dir=trace_dir(),
    )


eager = profile(mlp, "eager")
print(gpu_work_listing(eager.trace.steps[-1]))

# %%
# One step's GPU work, in launch order. Per step, by the operator that launched each
# kernel (:func:`~profiling_utils.measures.kernel_launches`):


def kernels_by_op(run):
    """{operator: [kernel, ...]} over the recorded steps."""
    found = {}
    for k in kernel_launches(run.trace):
        if k.step is not None and k.op is not None:
            found.setdefault(k.op.name, []).append(k.kernel)
    return found


steps = len(eager.trace.steps)
eager_kernels = kernels_by_op(eager)
for op, kernels in eager_kernels.items():
    print(f"{op:10s} {len(kernels) / steps:g} per step: {cut(kernels[0].name, 64)}")
if eager.has_gpu:
    claim(
        "each eager forward runs five kernels: three GEMMs from aten::mm, then one from"
        " aten::gelu and one from aten::mul",
        {op: len(k) / steps for op, k in eager_kernels.items()}
        == {"aten::mm": 3, "aten::gelu": 1, "aten::mul": 1},
        per_step={op: len(k) / steps for op, k in eager_kernels.items()},
    )
else:
    print(
        "No GPU here: the products and the elementwise work run inside CPU operators."
    )

# %%
# Three matrix products (one per ``nn.Linear``), the GELU, and the multiply: five kernels
# per forward, as on the post's A100. A memset of a few bytes before a GEMM, where the
# listing shows one, is the GEMM library's own, launched from inside ``aten::mm``.
#
# Operators that launch nothing
# -----------------------------
# The operator tree of one step has many more rows than five:

print(span_tree(eager.trace, eager.trace.steps[-1].span, width=80))

# %%
# Each ``aten::linear`` goes through ``aten::t`` (the weight transposed: met on
# :doc:`page 12 <plot_12_linear>`),
# and ``aten::matmul`` flattens the [batch, seq, 768] input into a matrix of
# ``batch·seq`` rows (``reshape``, ``view``), multiplies (``aten::mm``), and gives the
# result its three dimensions back (``_unsafe_view``). These views change a tensor's
# shape and strides, never its memory. The table sorts by device time, so the views,
# which have none, come last, most of them past its fourteen rows; the line and the claim
# after the table list them and check that none launches GPU work.

profiler_table(eager, row_limit=14)

# %%

views = {"aten::t", "aten::transpose", "aten::as_strided", "aten::reshape"}
views |= {"aten::view", "aten::_unsafe_view"}
step_ops = {
    op.name for op in eager.trace.cpu_ops if eager.trace.step_of(op) is not None
}
print(
    textwrap.fill(
        "view operators in a step: " + ", ".join(sorted(step_ops & views)), 88
    )
)
if eager.has_gpu:
    claim(
        "no view operator launches GPU work",
        not (set(eager_kernels) & views) and bool(step_ops & views),
    )

# %%
# Why two different GEMM kernels?
# -------------------------------
# :func:`~profiling_utils.roofline.roofline` reads each product's sizes from the trace,
# counts its ``2·m·n·k`` FLOPs and sets the rate its kernel ran at against the datasheet's
# bf16 peak for this GPU:

view = roofline(eager.trace)
gemms = [e for e in view.entries if e.kind == "gemm"]
by_shape = {}
for e in gemms:
    by_shape.setdefault(str(e.input_dims[:2]), []).append(e)
rows = []
for shape, entries in by_shape.items():
    kernel_names = {
        k.kernel.name
        for k in kernel_launches(eager.trace)
        if k.op is not None and k.op.id in {e.op.id for e in entries}
    }
    time = Distribution.of([e.gpu_us for e in entries], "µs")
    e = entries[0]
    tflops = e.flops / time.median / 1e6
    peak = e.compute_peak
    share = f"{tflops / peak.value:.0%}" if peak is not None else "n/a"
    rows.append([shape, e.flops / 1e9, time, tflops, share])
    text = f"{shape}: {', '.join(sorted(kernel_names))}"
    print(textwrap.fill(text, 88, subsequent_indent="    "))
(
    value_table(
        ["A x B", "GFLOP", "aten::mm GPU time (µs)", "TFLOP/s", "of peak"],
        rows,
        caption=f"The GEMMs of {eager.name}, medians over {steps} steps",
    )
    if rows
    else print(view.reason or "No GPU here: the roofline reads GPU kernels only.")
)

# %%
# The gate and up projections multiply [8192, 768] by [768, 3072]; the down projection
# multiplies [8192, 3072] by [3072, 768]. Each is ``2 · 8192 · 768 · 3072`` ≈ 38.7
# GFLOP (at the GPU build's batch; a CPU build runs a smaller one). The same work, but not
# the same problem: gate and up make a wide output from a short inner dimension (``k`` = 768),
# down a narrow output from a long one (``k`` = 3072). The GEMM library picks a kernel
# per problem shape, from heuristics NVIDIA does not publish, so the two shapes can get
# different tile sizes. The table's GPU time is all the GPU work each ``aten::mm``
# launched, its memset included where it has one, so the rate is a little under the
# kernel's own. On this run:

if eager.has_gpu:
    names = {
        shape: {
            k.kernel.name
            for k in kernel_launches(eager.trace)
            if k.op is not None and k.op.id in {e.op.id for e in entries}
        }
        for shape, entries in by_shape.items()
    }
    claim(
        "the three GEMMs of a forward each count 38.7 GFLOP",
        {e.flops for e in gemms} == {2 * batch * seq * dim * hidden}
        and len(gemms) == 3 * steps,
    )
    claim(
        "the two GEMM shapes run different kernels, one kernel per shape",
        all(len(n) == 1 for n in names.values())
        and len(set().union(*names.values())) == len(names) == 2,
        otherwise="the two GEMM shapes do not run one different kernel each",
        kernels=len(set().union(*names.values())),
    )
    claim(
        "every GEMM stays below the datasheet's bf16 peak",
        all(e.peak_share is not None and e.peak_share < 1 for e in gemms),
        highest=max(e.peak_share or 0 for e in gemms),
    )
    print(textwrap.fill(f"peak: {gemms[0].peak.describe()}", 88))

# %%
# The share is of the datasheet's dense bf16 peak, printed with its source by
# ``RooflineEntry.peak.describe()``. The post's A100 ran a kernel with ``128x128`` in its
# name for gate and up and one with ``128x256`` for down (its numbers: 0.19 and 0.17 ms).
# An ``nvjet`` name carries such groups too (``256x128``, ``64x4``...); NVIDIA does not
# document them, and we read them as tile shapes only by analogy.
#
# What ``torch.compile`` does
# ---------------------------
# The same module, compiled. ``run_and_get_code`` (a helper from Inductor's tests, not a
# public API) makes the first call, which compiles, and hands back the generated Python;
# on a GPU it holds the Triton kernels Inductor wrote:

compiled_mlp = torch.compile(mlp)
with torch.no_grad():
    _, generated = run_and_get_code(compiled_mlp, x)
kernel_defs = re.findall(r"def (triton_\w+)\(([^)]*)\)", "\n".join(generated))
for name, params in kernel_defs:
    print(textwrap.fill(f"{name}({params})", 88, subsequent_indent="    "))
if not kernel_defs and device == "cuda":
    print(
        "Inductor generated no code in this process (a cached graph): nothing to show."
    )
elif not kernel_defs:
    print("No Triton kernel: on a CPU Inductor writes C++.")
compiled = profile(compiled_mlp, "compile")
print(gpu_work_listing(compiled.trace.steps[-1]))

# %%
# The matrix products stay ``aten::mm`` calls to the GEMM library: Inductor hands them to
# *extern kernels*. The GELU and the multiply became one Triton kernel,
# ``triton_poi_fused_...gelu_mul...`` (``poi`` for *pointwise*). It reads the gate and
# ``up`` and writes their product. Its pointer arguments say where: an ``in_ptr`` is only
# read, an ``out_ptr`` only written, and an ``in_out_ptr`` is read and then overwritten
# with the result (Inductor reuses a buffer that nothing needs afterwards).

compiled_kernels = kernels_by_op(compiled)
fused_ops = [op for op in compiled_kernels if op.startswith("triton_")]
if compiled.has_gpu:
    claim(
        "one Triton kernel takes the place of the gelu and mul kernels",
        len(fused_ops) == 1
        and len(compiled_kernels[fused_ops[0]]) == steps
        and len(compiled_kernels.get("aten::mm", [])) == 3 * steps
        and not {"aten::gelu", "aten::mul"} & set(compiled_kernels),
        kernels=", ".join(sorted(compiled_kernels)),
    )
    fused_op = compiled_kernels[fused_ops[0]][0] if fused_ops else None
    fused_args = compiled.trace.op_of(fused_op).args if fused_op else {}
    recorded = fused_args.get("Input Dims", [])
    values = fused_args.get("Concrete Inputs") or [""] * len(recorded)
    print(f"{fused_ops[0] if fused_ops else 'no fused kernel'}, as recorded:")
    for dims, dtype, value in zip(
        recorded, fused_args.get("Input type", []), values, strict=False
    ):
        print(f"  {dtype:14s} dims {dims!s:16s} {value}".rstrip())
    tensors = [d for d in recorded if d]
    scalars = [v for d, v in zip(recorded, values, strict=False) if not d]
    claim(
        "the fused kernel records two tensor arguments of the intermediate's size",
        len(tensors) == 2
        and all(torch.Size(d).numel() == batch * seq * hidden for d in tensors),
        recorded=str(recorded),
    )
    claim(
        "the fused kernel's one other argument is a scalar, the intermediate's element "
        "count",
        scalars == [str(batch * seq * hidden)],
        otherwise="the fused kernel's other arguments are not just the intermediate's "
        "element count",
        scalars=", ".join(scalars),
    )

# %%
# Two tensor arguments (the gate and ``up``) plus a scalar, listed above with the value
# the profiler recorded for it: the product goes into one of the two tensors, so the
# kernel reads two tensors and writes one.
#
# The bytes fusion saves
# ----------------------
# Eager, the GELU writes its [8192, 3072] bf16 output to GPU memory, 48 MiB, and the
# multiply reads it back. The fused kernel keeps each value in registers between the two
# steps. ``roofline`` counts each elementwise operator's bytes from its recorded shapes:
# every input read, the output written. A fused kernel records its arguments under its
# own name; named in ``roofline(trace, elementwise=...)`` it is counted the same way
# (every argument read, one output written), which is right for a kernel that writes
# into one of its inputs, as the claim above showed.

intermediate = batch * seq * hidden * 2


def elementwise(run, names=()):
    """Bytes and kernel time per step of the elementwise work, and its entries."""
    entries = [e for e in roofline(run.trace, elementwise=names).entries]
    entries = [e for e in entries if e.kind == "elementwise"]
    per_step = {}
    for e in entries:
        per_step.setdefault(run.trace.step_of(e.op).number, []).append(e.gpu_us)
    moved = sum(e.bytes or 0 for e in entries) / len(run.trace.steps)
    times = [sum(t) for t in per_step.values()] or [0.0]
    return moved, Distribution.of(times, "µs"), entries


moved, time, rates = {}, {}, {}
moved["eager"], time["eager"], eager_entries = elementwise(eager)
moved["compiled"], time["compiled"], fused_entries = elementwise(compiled, fused_ops)
print(f"intermediate [{batch * seq}, {hidden}] bf16: {byte_size(intermediate)}")
for e in eager_entries[:2] + fused_entries[:1]:
    print(f"  {e.name[:40]:40s} {byte_size(e.bytes):>8}  {e.gb_s:6.0f} GB/s", end="")
    print(f"  {e.peak_share:.0%} of HBM" if e.peak_share is not None else "")
memory_peak = next((e.memory_peak for e in eager_entries if e.memory_peak), None)
if memory_peak is not None:
    print(textwrap.fill(f"HBM: {memory_peak.describe()}", 88, subsequent_indent="    "))

# %%
# On a GPU, per step: the GELU reads the gate and writes its output (two tensors of 48
# MiB), the multiply reads that and ``up`` and writes the product (three), five in all.
# The fused kernel moves three. The rates above are GB/s over each kernel's time in the
# first recorded step, against the datasheet's memory bandwidth printed on the last line;
# the times below are medians over every step.

if eager.has_gpu:
    for how in ("eager", "compiled"):
        print(f"{how:9s} {byte_size(moved[how]):>8} per step, kernel time {time[how]}")
    claim(
        "fusing saves two transfers of the intermediate per forward",
        moved["eager"] - moved["compiled"] == 2 * intermediate
        and moved["eager"] == 5 * intermediate,
        eager=byte_size(moved["eager"]),
        compiled=byte_size(moved["compiled"]),
    )
    claim(
        "the fused kernel takes less time than eager's gelu and mul together",
        clearly_greater(time["eager"], time["compiled"]),
        otherwise="the fused kernel does not clearly beat eager's gelu and mul",
        eager=time["eager"],
        compiled=time["compiled"],
    )
else:
    print("No GPU here: no kernels, so nothing to count or time.")

# %%
# The ``elementwise-chain`` rule of the cheatsheet finds this from the eager trace alone:
# elementwise kernels over one shape, one after another or with only GEMMs between them
# that take no input of that shape (the up projection reads ``x``, not the gelu's output),
# and the bytes a fused kernel would save:

findings_table(
    diagnose(eager.trace, select=["elementwise-chain"]),
    caption=eager.name,
    rules=["elementwise-chain"],
)

# %%
# A hand-written kernel: Liger
# ----------------------------
# The post also loads a fused GeGLU kernel from the Hugging Face Hub with the ``kernels``
# package; this site is built without network access, so we use Liger's layer from its
# PyPI package, ``liger-kernel``, instead. ``LigerGEGLUMLP`` keeps the three projections
# as ``nn.Linear`` and computes the GELU-times-up in one Triton kernel of its own:

liger = None
if device == "cuda":
    try:
        from liger_kernel.transformers import LigerGEGLUMLP
    except ImportError as error:
        print(f"Liger Kernel is not installed here ({error.name}): skipped.")
    else:
        config = SimpleNamespace(
            hidden_size=dim, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh"
        )
        liger_mlp = LigerGEGLUMLP(config).to(device, torch.bfloat16)
        liger = profile(liger_mlp, "liger")
        print(gpu_work_listing(liger.trace.steps[-1]))
else:
    print("No GPU here: Liger's kernels are Triton kernels for GPUs; skipped.")

# %%
# Liger's GELU-times-up is an autograd ``Function``, ``LigerGELUMulFunction``, recorded as
# an operator of that name. It allocates its output (``aten::empty_like``) and launches
# one kernel that reads the gate and ``up``: named in ``roofline``, it is counted as the
# Inductor kernel is.

if liger is not None:
    liger_kernels = kernels_by_op(liger)
    liger_ops = [op for op in liger_kernels if op != "aten::mm"]
    allocates = [
        {child.name for child in liger.trace.children(liger.trace.op_of(kernel))}
        for kernel in liger_kernels[liger_ops[0]]
    ] if len(liger_ops) == 1 else []  # fmt: skip
    claim(
        "Liger's function allocates its output (aten::empty_like) in every step",
        bool(allocates) and all("aten::empty_like" in names for names in allocates),
        function=", ".join(liger_ops),
    )
    moved["Liger"], time["Liger"], liger_entries = elementwise(liger, liger_ops)
    for how in ("compiled", "Liger"):
        print(f"{how:9s} {byte_size(moved[how]):>8} per step, kernel time {time[how]}")
    claim(
        "Liger's forward runs four kernels: three GEMMs and its own",
        len(liger_ops) == 1
        and len(liger_kernels[liger_ops[0]]) == steps
        and len(liger_kernels.get("aten::mm", [])) == 3 * steps,
        kernels=", ".join(sorted(liger_kernels)),
    )
    claim(
        "Liger's kernel moves the same bytes as Inductor's",
        moved["Liger"] == moved["compiled"],
        liger=byte_size(moved["Liger"]),
    )
    which_is_greater(
        "Liger's kernel is faster than Inductor's",
        "Inductor's kernel is faster than Liger's",
        "Liger's and Inductor's kernels take the same time, within the spread",
        inductor=time["compiled"],
        liger=time["Liger"],
    )

# %%
# Both kernels have the same bytes to move, so their times differ by how close each comes
# to the memory bandwidth. The post measured Liger at 92.8 µs against Inductor's 89.4 µs
# on its A100; the last claim says what this run found, over twenty steps each, and
# calls a difference inside the spread none.
#
# The whole forward
# -----------------
# Fusion removes one kernel and two transfers of 48 MiB; the three GEMMs remain. The GPU's
# busy time per step (the union of its kernels) for each variant:

runs = {"eager": eager, "compiled": compiled}
if liger is not None:
    runs["Liger"] = liger
busy = {
    how: Distribution.of([t.gpu_busy_us for t in step_times(run.trace)], "µs")
    for how, run in runs.items()
}
if eager.has_gpu:
    for how, b in busy.items():
        print(f"{how:9s} GPU busy {b}")
    gemm_us = Distribution.of(
        [
            sum(e.gpu_us for e in gemms if eager.trace.step_of(e.op) is s)
            for s in eager.trace.steps
        ],
        "µs",
    )
    claim(
        "the three GEMMs take more than half of an eager forward's GPU busy time",
        gemm_us.median > busy["eager"].median / 2,
        gemms=gemm_us,
        busy=busy["eager"],
    )
    claim(
        "a compiled forward keeps the GPU busy for less time than an eager one",
        clearly_greater(busy["eager"], busy["compiled"]),
        otherwise="compiled and eager forwards keep the GPU busy alike, within the spread",
        eager=busy["eager"],
        compiled=busy["compiled"],
    )

# %%
# The GEMMs hold most of a forward's GPU busy time. Fusion replaces the elementwise
# kernels and keeps the three GEMMs (the same three per forward in every variant, as the
# listings show), but their time need not stay the same: a compiled graph calls them
# from its own code, on tensors it laid out itself. The GEMM kernels' time per forward
# (the kernels ``aten::mm`` launched, medians over the steps), and how the busy time
# compiling saves splits:


def gemm_time(run):
    """The time of the GEMM kernels per step (those ``aten::mm`` launched), µs."""
    per_step = {}
    for k in kernel_launches(run.trace):
        if k.step is not None and k.op is not None and k.op.name == "aten::mm":
            per_step[k.step] = per_step.get(k.step, 0.0) + k.kernel.dur
    return Distribution.of(per_step.values(), "µs") if per_step else None


gemm_times = {how: gemm_time(run) for how, run in runs.items()}
if eager.has_gpu:
    for how, g in gemm_times.items():
        print(f"{how:9s} GEMM kernels per forward {g}")
    gemm_eager, gemm_compiled = gemm_times["eager"], gemm_times["compiled"]
    for how, gemm in gemm_times.items():
        if how == "eager":
            continue
        claim(
            f"the {how} forward's GEMM kernels take as long as eager's, within their spread "
            "(the two IQRs added)",
            abs(gemm.median - gemm_eager.median) <= gemm_eager.iqr + gemm.iqr,
            otherwise=f"the {how} forward's GEMM kernels differ from eager's by more than "
            "their spread (the two IQRs added)",
            eager=gemm_eager,
            **{how: gemm},
        )

    # Rounded first, so that the printed terms add up to the printed total.
    def shown(d):
        return round(d.median, 1)  # as the lines above print it

    busy_saved = round(shown(busy["eager"]) - shown(busy["compiled"]), 1)
    elementwise_saved = round(shown(time["eager"]) - shown(time["compiled"]), 1)
    gemm_change = round(shown(gemm_eager) - shown(gemm_compiled), 1)
    rest = round(busy_saved - elementwise_saved - gemm_change, 1)
    print(
        f"saved by compiling, per forward (medians): GPU busy {busy_saved:.1f} µs\n"
        f"  = elementwise kernels {elementwise_saved:.1f} µs {gemm_change:+.1f} µs in the "
        f"GEMM kernels {rest:+.1f} µs the rest"
    )

# %%
# Liger's projections are plain ``nn.Linear`` on the same ``x`` as eager's, so where the
# claims above find its GEMMs apart from eager's, the difference comes from the recordings
# themselves (the GPU's clock and temperature move from one run to the next), not from the
# code; the same drift weighs on every comparison of GPU time across recordings on this
# page. In GPU busy time, then, a compiled forward gains what its fused kernel saves over the
# GELU and the multiply, give or take what its GEMMs did (the rest: memsets, and medians
# taken apart). Busy time leaves out the gaps between kernels. Where the CPU takes longer
# to launch a forward than the GPU takes to run it, those gaps are the CPU's launches,
# and the CPU time per step sets the pace. Per step, as the CPU saw it, against the GPU's
# busy time:

step_cpu = {
    how: Distribution.of([t.cpu_us for t in step_times(run.trace)], "µs")
    for how, run in runs.items()
}
for how, cpu_time in step_cpu.items():
    print(f"{how:9s} CPU per step {cpu_time}")
if eager.has_gpu:
    which_is_greater(
        "an eager step takes the CPU longer than the GPU is busy",
        "an eager step keeps the GPU busy longer than it takes the CPU",
        "an eager step takes the CPU about as long as the GPU is busy, within the spread",
        cpu=step_cpu["eager"],
        busy=busy["eager"],
    )

# %%
# These CPU times were taken under the profiler, which adds its own work to every
# operator it records, more with ``record_shapes`` (on here): they overstate what a
# step costs the CPU, and by how much differs between variants that run different code
# (a compiled forward runs its guard checks and wrappers, :doc:`page 08
# <../part1_matmul_add/plot_08_torch_compile>`; Liger's, an autograd ``Function``). What
# a user's loop sees is the time per forward without the profiler:
# :func:`~profiling_utils.capture.time_calls` runs thirty batches of twenty
# back-to-back forwards of each variant, the variants' batches in turn (the machine's speed
# changing meanwhile falls on all of them), each batch between two CUDA events, so a
# forward the CPU cannot launch fast enough is timed at the CPU's pace; beside it, the
# CPU's part, its time to make the calls.


def forward(model):
    def call():
        with torch.no_grad():
            return model(x)

    return call


models = {"eager": mlp, "compiled": compiled_mlp}
if liger is not None:
    models["Liger"] = liger_mlp
timed = time_calls({how: forward(model) for how, model in models.items()})
for how, times in timed.items():
    print(f"{how:9s} per forward, unprofiled: end to end {times.end_to_end}")
    print(f"{'':9s} the CPU's part {times.issue}")
if eager.has_gpu:
    eager_t = timed["eager"].end_to_end
    for how in timed:
        if how == "eager":
            continue
        which_is_greater(
            f"without the profiler, a {how} forward takes less time than an eager one",
            f"without the profiler, a {how} forward takes longer than an eager one",
            f"without the profiler, {how} and eager forwards take the same time, within the "
            "spread",
            eager=eager_t,
            **{how: timed[how].end_to_end},
        )
    for how, times in timed.items():
        who_sets_the_pace(f"a{'n' if how == 'eager' else ''} {how} forward", times)

# %%
# The last claims give this run's answer. Where the GPU sets the pace without the
# profiler, the CPU's work hides behind the GPU's however much the profiler made of it,
# and what a fused forward saves end to end comes from its GPU time: its busy time, and
# the gaps between its kernels, which busy time leaves out. Where the CPU's time is most
# of a forward's, the CPU and the GPU take about as long, and either side's saving may
# or may not show: set each variant's CPU part against its time end to end above, and
# against the comparisons with eager, to see which one did. Where the two spreads overlap,
# the run does not say which side sets the pace, and neither saving can be counted on.
#
# The rule again, on each run: it fires on the eager run only when the GELU and the
# multiply are separate kernels.

fired = {
    how: list(diagnose(run.trace, select=["elementwise-chain"]))
    for how, run in runs.items()
}
for how, found in fired.items():
    print(f"{how:9s} elementwise-chain: {'fires' if found else 'silent'}")
if eager.has_gpu:
    claim(
        "elementwise-chain fires on the eager run and stays silent on the fused ones",
        bool(fired["eager"]) and not any(fired[h] for h in fired if h != "eager"),
    )

# %%
# Where this GPU differs from the post
# ------------------------------------
# The structure is the post's: five kernels eager, four compiled and with Liger, three of
# them GEMMs (the claims above check it). The kernels and their times are this GPU's. Side
# by side, the post's A100 figures (as the post reports them: its ``128x128`` kernel runs
# gate and up, its ``128x256`` one down) and this run's medians (our GEMM kernels in launch
# order, with how many of a forward's three products each runs):


def verdict(first: str, second: str) -> str:
    """Which of two kernel-time distributions is clearly faster on this run."""
    if clearly_greater(time[second], time[first]):
        return f"{first} faster"
    if clearly_greater(time[first], time[second]):
        return f"{second} faster"
    return "alike, within the spread"


if eager.has_gpu and liger is not None:
    gemm_calls = Counter(
        k.kernel.name
        for k in kernel_launches(eager.trace)
        if k.op is not None and k.op.name == "aten::mm"
    )
    forwards = len(eager.trace.steps)
    gemm_kernels = [
        f"{cut(name, 40)}, {n / forwards:g} per forward"
        for name, n in gemm_calls.items()
    ]
    rows = [
        [
            "GEMM kernels",
            "…128x128…_tn (gate, up), …128x256…_tn (down)",
            gemm_kernels[0],
        ],
        *[["", "", name] for name in gemm_kernels[1:]],
        [
            "Liger / Inductor kernel",
            "92.8 / 89.4 µs: Inductor faster",
            f"{time['Liger'].median:.1f} / {time['compiled'].median:.1f} µs: "
            + verdict("Liger", "compiled").replace("compiled", "Inductor"),
        ],
    ]
    for row in rows:
        if row[1]:
            print(f"{row[0]:24s} post: {row[1]:34s}")
        print(f"{'':24s} {'here:' if row[1] else '     '} {row[2]}")
else:
    print("No GPU comparison on this machine.")

# %%
# The post's figures are from its own A100 run and are not re-measured here. Note what
# the second row compares: two kernels that move the same bytes, so the faster one is
# the one that streams memory better on this GPU.
#
# In the timeline
# ---------------
# The GPU work of the last recorded step of the eager and the compiled run
# (``around="gpu"``; on a machine without a GPU, the step's CPU lane instead). Eager, the
# GELU and the multiply are two kernels between the GEMMs:

plot_timeline(
    eager.trace,
    step=eager.trace.steps[-1].number,
    around="gpu",
    title=f"eager, ProfilerStep#{eager.trace.steps[-1].number}",
)

# %%
# Compiled, one Triton kernel sits where those two were:

plot_timeline(
    compiled.trace,
    step=compiled.trace.steps[-1].number,
    around="gpu",
    title=f"compiled, ProfilerStep#{compiled.trace.steps[-1].number}",
)

# %%
# The traces
# ----------

trace_links(eager)

# %%

trace_links(compiled)

# %%

trace_links(liger) if liger is not None else print("No Liger trace on this machine.")
