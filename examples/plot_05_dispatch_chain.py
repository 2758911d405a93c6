"""
The dispatch chain: from ``torch.matmul`` to a kernel
=====================================================

*When you call* ``torch.matmul(x, w)``, *which layers does the call pass through before a
kernel runs on the GPU, and what changes when the inputs get a batch dimension?*

Every profiled step is a tree: the profiler's step span holds our ``record_function`` label,
the label holds the PyTorch operators, an operator holds the ones it calls in turn, and the
innermost ones hold the CUDA calls that queue work on the GPU. That nesting is the
*dispatch chain*. Reading it tells you which operator a Python call really became, and where
its CPU time went.

We read the chain straight from the trace, with
:meth:`Trace.ancestors <profiling_utils.trace.Trace.ancestors>` and
:meth:`Trace.children <profiling_utils.trace.Trace.children>`, for a plain 2-D product and for
the batched 3-D product that the
`Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ takes as a detour.
"""

# %%
# The workload
# ------------
# The post's ``matmul_add`` at its small size, 64, in bf16: small enough that the chain, not
# the arithmetic, is what the trace shows. The run is warmed up (three calls before the
# profiler starts) and recorded with the post's schedule: one step skipped, one warm-up
# step, three recorded steps.

import statistics
import textwrap

import torch

from profiling_utils import capture, diagnose, run_name
from profiling_utils.render import (
    Highlight,
    findings_table,
    highlight_span,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
n = 64


def matmul_add(x, w, b):
    return torch.add(torch.matmul(x, w), b)


def profile(shape):
    x, w, b = (
        torch.randn(shape, device=device, dtype=torch.bfloat16) for _ in range(3)
    )
    return capture(
        lambda: matmul_add(x, w, b),
        name=run_name(shape, "bf16", warm=True),
        label="matmul_add",
        warmup_iters=3,
        out_dir=trace_dir(),
    )


flat = profile((n, n))
print(
    f"Profiled {flat.name} on {'the GPU' if flat.has_gpu else 'the CPU (no GPU here)'}"
)

# %%
# Walk up from the kernel
# -----------------------
# Start at the bottom and climb. On a GPU the bottom is the GEMM kernel: the kernel whose
# launch call sits somewhere inside ``aten::matmul``. Its launch is linked to it by a
# correlation id (the arrow Perfetto draws between the lanes); from the launch,
# :meth:`~profiling_utils.trace.Trace.ancestors` climbs the CPU nesting, nearest first.
# Without a GPU the product runs inside the innermost operator, so we start there.


def inside(trace, span, name):
    """Whether ``span`` is nested in a span called ``name`` on its lane."""
    return any(outer.name == name for outer in trace.ancestors(span))


def chain(trace, step):
    """The spans from ``ProfilerStep#N`` down to the product's kernel, outermost first."""
    if trace.has_gpu:
        kernel = next(
            work
            for work in step.gpu_work
            if work.cat == "kernel"
            and inside(trace, trace.launch_of(work), "aten::matmul")
        )
        launch = trace.launch_of(kernel)
        return [*reversed(list(trace.ancestors(launch))), launch, kernel]
    matmul = next(op for op in trace.find("aten::matmul") if trace.step_of(op) is step)
    innermost = matmul
    while ops := [
        c for c in trace.children(innermost) if c.name in ("aten::mm", "aten::bmm")
    ]:
        innermost = ops[0]
    return [*reversed(list(trace.ancestors(innermost))), innermost]


def print_chain(trace, step):
    links = chain(trace, step)
    for depth, span in enumerate(links):
        where = "GPU" if span.lane.kind == "gpu" else "CPU"
        print(f"{'    ' * depth}{span.name}   ({where}, {span.cat}, {span.dur:.1f} µs)")
    return links


flat_step = flat.trace.steps[-1]
flat_chain = print_chain(flat.trace, flat_step)

# %%
# Read it from the top:
#
# - ``ProfilerStep#N`` is written by the profiler, one per ``prof.step()``;
# - ``matmul_add`` is our ``record_function`` label: it marks where our code starts and ends,
#   so the step is easy to find;
# - ``aten::matmul`` is the operator that ``torch.matmul`` lands on. It does no arithmetic
#   itself: it looks at the shapes and picks the operator that does;
# - ``aten::mm`` is that operator for two 2-D matrices;
# - under it, on a GPU, the call into the CUDA runtime or driver that queues the kernel,
#   and on the GPU's stream the kernel itself, which starts later: the CPU does not wait.
#
# Each level's duration includes the levels below it. How the innermost CPU levels compare
# with the kernel in this run:

cpu_links = [span for span in flat_chain if span.lane.kind == "cpu"]
op, call = cpu_links[-2], cpu_links[-1]
if flat.has_gpu:
    kernel = flat_chain[-1]
    print(
        f"{op.name} took {op.dur:.1f} µs on the CPU, {call.dur:.1f} µs of it in {call.name};"
    )
    print(f"the kernel {kernel.name[:40]}... ran for {kernel.dur:.1f} µs on the GPU:")
    print(
        f"the CPU spent {op.dur / kernel.dur:.1f}x as long getting the product started "
        "as the GPU spent computing it."
    )
else:
    print(f"{call.name} did the product itself on the CPU, in {call.dur:.1f} µs.")

# %%
# The whole step as a tree
# ------------------------
# The chain is one path through the step's tree. :meth:`~profiling_utils.trace.Trace.children`
# gives the rest. For each span we print its total duration and its *self* time, what is
# left after its children: the profiler table's Self and Total columns, for one step.


def print_tree(trace, span, depth=0):
    below = sum(child.dur for child in trace.children(span))
    print(
        f"{'    ' * depth}{span.name:<{44 - 4 * depth}} total {span.dur:7.1f} µs",
        end="",
    )
    print(f"   self {span.dur - below:7.1f} µs")
    for child in trace.children(span):
        print_tree(trace, child, depth + 1)


print_tree(flat.trace, flat_step.span)

# %%
# ``aten::add`` sits beside ``aten::matmul`` inside the label: the bias add is its own
# operator with its own launch. A row's self time is whatever ran inside it but outside its
# children: for our label, the Python that calls the two operators and the profiler's own
# bookkeeping.
#
# The same step as a timeline, with the operator that starts the chain and, on a GPU, the
# kernel it ends in, highlighted:

matmul_span = next(s for s in flat_chain if s.name == "aten::matmul")
marks = [highlight_span(matmul_span, "aten::matmul")]
if flat.has_gpu:
    marks.append(highlight_span(flat_chain[-1], "its GEMM kernel"))
plot_timeline(
    flat.trace,
    step=flat_step.number,
    highlights=marks,
    title=f"{flat.name}: ProfilerStep#{flat_step.number}",
)

# %%
# Each row of the CPU lane is one level deeper in the chain. On a GPU, the kernels sit on the
# stream's lane, each a little after the launch call that queued it, and the profiler also
# draws our label there: a copy of ``matmul_add`` stretched over the GPU work launched inside
# it.
#
# The profiler table adds up the same spans over the three recorded steps, one row per name.
# On a GPU that GPU-side copy of the label is a row of its own (marked †), with the GPU time
# it covers rather than CPU time:

profiler_table(flat)

# %%
# The batched case
# ----------------
# The post adds a batch axis to all three operands, ``(8, n, n)``, and sees ``aten::matmul``
# dispatch to the batched product ``aten::bmm``. Same code, new shapes:

batched = profile((8, n, n))
batched_step = batched.trace.steps[-1]
batched_chain = print_chain(batched.trace, batched_step)

# %%
# Which operator did ``aten::matmul`` choose, and what else did it call on the way? Its
# direct children, for both runs:


def matmul_children(run):
    trace = run.trace
    step = trace.steps[-1]
    matmul = next(op for op in trace.find("aten::matmul") if trace.step_of(op) is step)
    return [child.name for child in trace.children(matmul)]


for run in (flat, batched):
    print(f"{run.name:22s} aten::matmul ->")
    print(
        textwrap.fill(
            ", ".join(matmul_children(run)),
            88,
            initial_indent="    ",
            subsequent_indent="    ",
        )
    )

# %%
# For 3-D inputs ``aten::matmul`` first shapes the operands into a stack of matrices
# (``aten::expand`` and ``aten::reshape``), calls the batched product, then views the result
# back to the caller's shape (``aten::_unsafe_view``). For contiguous inputs these are
# views: they change how a tensor's memory is read, not the memory. A reshape that had to
# copy would show an ``aten::clone`` or ``aten::copy_`` under it:

trace = batched.trace
matmul = next(
    op for op in trace.find("aten::matmul") if trace.step_of(op) is batched_step
)
copies = [
    span.name
    for span in trace.spans
    if span.name in ("aten::clone", "aten::copy_", "aten::contiguous")
    and inside(trace, span, "aten::matmul")
]
print(
    f"Copies made inside aten::matmul in the batched run: {', '.join(copies) or 'none'}"
)

# %%
# The batched step on a timeline, with the preparation before the product highlighted:

children = trace.children(matmul)
product = next(c for c in children if c.name in ("aten::bmm", "aten::mm"))
marks = [highlight_span(product, product.name)]
if children[0] is not product:
    marks.append(
        Highlight(children[0].start, product.start, "views first", lane=matmul.lane)
    )
plot_timeline(
    trace,
    step=batched_step.number,
    highlights=marks,
    title=f"{batched.name}: ProfilerStep#{batched_step.number}",
)

# %%
# What does the batch cost the CPU? Per ``aten::matmul`` call (median of the three recorded
# steps), the time in the product operator and the time around it, in the views and in
# ``aten::matmul``'s own code:


PRODUCTS = ("aten::mm", "aten::bmm")


def matmul_cost(run):
    """Median µs per recorded ``aten::matmul``: in total, and in its product operator."""
    trace = run.trace
    matmuls = [op for op in trace.find("aten::matmul") if trace.step_of(op) is not None]
    products = [c for op in matmuls for c in trace.children(op) if c.name in PRODUCTS]
    return statistics.median(op.dur for op in matmuls), statistics.median(
        p.dur for p in products
    )


costs = {run.name: matmul_cost(run) for run in (flat, batched)}
for name, (total, product) in costs.items():
    print(
        f"{name:22s} {total:6.1f} µs: {product:6.1f} in the product, {total - product:5.1f} around"
    )
(flat_total, flat_product), (batched_total, batched_product) = costs.values()
print(
    f"The batched call cost {batched_total - flat_total:+.1f} µs against the 2-D one:"
)
print(
    f"{batched_product - flat_product:+.1f} µs in the product operator, "
    f"{(batched_total - batched_product) - (flat_total - flat_product):+.1f} µs around it."
)

# %%
# Split this way, the output shows where a batch's CPU cost goes: into the extra view
# operators, each with its own dispatch, into the batched product operator itself, or both.
#
# Extra runtime calls?
# --------------------
# On its A100 the `post <https://huggingface.co/blog/torch-profiler>`__ saw ``aten::matmul``
# hold several extra CUDA runtime calls in the batched case, besides the kernel launch. Here
# is every runtime or driver call made inside ``aten::matmul``, step by step, for both runs
# on this machine:


def runtime_calls(trace, op_name="aten::matmul"):
    """Per step, the CUDA runtime and driver calls nested anywhere inside ``op_name``."""
    calls = {}
    for op in trace.find(op_name):
        step = trace.step_of(op)
        if step is None:
            continue
        found, todo = [], [op]
        while todo:
            for child in trace.children(todo.pop()):
                if child.cat in ("cuda_runtime", "cuda_driver"):
                    found.append(child)
                todo.append(child)
        calls[step.number] = sorted(found, key=lambda span: span.start)
    return calls


calls = {run.name: runtime_calls(run.trace) for run in (flat, batched)}
for name, per_step in calls.items():
    for number, found in per_step.items():
        listed = ", ".join(span.name for span in found) or "none"
        print(f"{name:22s} ProfilerStep#{number}: {listed}")

# %%
# And the comparison, computed from those lists:

flat_names = {span.name for found in calls[flat.name].values() for span in found}
batched_names = {span.name for found in calls[batched.name].values() for span in found}
extra = sorted(batched_names - flat_names)
if not flat.has_gpu:
    print(
        "No GPU here: neither product made a CUDA call, so there is nothing to compare."
    )
elif extra:
    print(f"The batched product made calls the 2-D one did not: {', '.join(extra)}.")
else:
    print(
        "In the recorded steps the batched product made no runtime call that the 2-D one"
    )
    print(f"did not: both made only {', '.join(sorted(flat_names))}.")
if flat.has_gpu:
    same = flat_chain[-1].name == batched_chain[-1].name
    print(
        f"GEMM kernel: {'the same in both runs' if same else 'different in the two runs'}."
    )

# %%
# On the H100 this site is built on, both paths launch one kernel through the driver's
# ``cuLaunchKernelEx`` and make no other call in a warmed-up step (see the output above,
# whose last line also says whether the batch changed the kernel).
# The post reads its extra calls as cuBLAS working out which kernel to run. A warm step
# cannot show that work if the library does it once and reuses the answer: the next
# tutorial, :ref:`sphx_glr_auto_examples_plot_06_launch_planning.py`, profiles a GEMM's very
# first call to look for it.
#
# One more shape: a batch times a matrix
# --------------------------------------
# A linear layer applied to a batch multiplies a 3-D input by a 2-D weight. ``aten::matmul``
# needs no batched product for that: it can fold the batch into the rows of one tall matrix.

x3 = torch.randn(8, n, n, device=device, dtype=torch.bfloat16)
w2, b2 = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
folded = capture(
    lambda: matmul_add(x3, w2, b2),
    name=f"8x{n}x{n}-by-{n}x{n}_bf16_warm_eager",
    label="matmul_add",
    warmup_iters=3,
    out_dir=trace_dir(),
)
print(f"{folded.name}: aten::matmul ->")
print(
    textwrap.fill(
        ", ".join(matmul_children(folded)),
        88,
        initial_indent="    ",
        subsequent_indent="    ",
    )
)

# %%
# With a 2-D weight the chain goes through ``aten::mm`` again, between a reshape and a view
# back: which product runs depends on both operands' shapes, not on the input's alone.
#
# What the cheatsheet finds
# -------------------------
# :func:`~profiling_utils.rules.diagnose` applies the cheatsheet's rules to a trace. Its
# dispatch-chain rules, on each of the three runs:

chain_rules = ["call-chain", "mm-dispatch", "bmm-dispatch", "cost-in-children"]
findings_table(diagnose(flat.trace, select=chain_rules), caption=flat.name)

# %%

findings_table(diagnose(batched.trace, select=chain_rules), caption=batched.name)

# %%

findings_table(diagnose(folded.trace, select=chain_rules), caption=folded.name)

# %%
# ``call-chain`` follows the launch with the most GPU time in the trace. Where the bias
# add's kernel outlasts the small GEMM's, it shows the add's chain rather than the
# product's; either is a true chain of a recorded step.
#
# The traces
# ----------
# Open a trace in Perfetto and click a kernel: the arrow from its launch call leads back up
# the chain we printed.

trace_links(flat)

# %%

trace_links(batched)

# %%

trace_links(folded)
