"""
The dispatch chain: from ``torch.matmul`` to a kernel
=====================================================

*When you call* ``torch.matmul(x, w)``, *which layers does the call pass through before a
kernel runs on the GPU, what changes when the inputs get a batch dimension, and what does
that cost the CPU?*

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
# profiler starts) and recorded with the post's schedule, one step skipped and one warm-up
# step, but with thirty recorded steps instead of three: one step is a sample, and a cost
# is read off the median of many.

import textwrap

import torch

from profiling_utils import capture, diagnose, run_name
from profiling_utils.claims import at_least_times, claim
from profiling_utils.measures import host_speed_ratio, speeds_alike
from profiling_utils.render import (
    Highlight,
    findings_table,
    highlight_span,
    plot_timeline,
    trace_dir,
    trace_links,
    value_table,
)
from profiling_utils.stats import Distribution, clearly_greater

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
n = 64
STEPS = 30
PRODUCTS = ("aten::mm", "aten::bmm")


def matmul_add(x, w, b):
    return torch.add(torch.matmul(x, w), b)


def profile(x_shape, w_shape, name):
    x = torch.randn(x_shape, device=device, dtype=torch.bfloat16)
    w, b = (torch.randn(w_shape, device=device, dtype=torch.bfloat16) for _ in range(2))
    return capture(
        lambda: matmul_add(x, w, b),
        name=name,
        label="matmul_add",
        warmup_iters=3,
        active=STEPS,
        out_dir=trace_dir(),
    )


flat = profile((n, n), (n, n), run_name(n, "bf16", warm=True))
trace = flat.trace
print(
    f"{flat.name}: {len(trace.steps)} steps on {'a GPU' if flat.has_gpu else 'the CPU'}"
)

# %%
# Walk up from the kernel
# -----------------------
# Start at the bottom and climb. On a GPU the bottom is the GEMM kernel, linked to its
# launch call by a correlation id (the arrow Perfetto draws between the lanes); from the
# launch, :meth:`~profiling_utils.trace.Trace.ancestors` climbs the CPU nesting. Without a
# GPU the product runs inside the innermost operator, so we start there. We read a typical
# step: the one whose ``aten::matmul`` took the median time.


def recorded_matmuls(trace):
    """Every ``aten::matmul`` of a recorded step, in step order."""
    return [op for op in trace.find("aten::matmul") if trace.step_of(op) is not None]


def typical_step(trace):
    """The step whose ``aten::matmul`` took the median time of all steps."""
    ops = sorted(recorded_matmuls(trace), key=lambda op: op.dur)
    return trace.step_of(ops[len(ops) // 2])


def product_of(trace, step):
    """The product operator (``aten::mm`` or ``aten::bmm``) of a step's ``aten::matmul``."""
    matmul = next(op for op in recorded_matmuls(trace) if trace.step_of(op) is step)
    return next(c for c in trace.children(matmul) if c.name in PRODUCTS)


def product_kernels(trace):
    """The kernels launched by a product operator in the recorded steps."""
    return [
        k
        for k in trace.gpu_work
        if (op := trace.op_of(k)) is not None
        and op.name in PRODUCTS
        and trace.step_of(k)
    ]


def chain(trace, step):
    """The spans from ``ProfilerStep#N`` down to the product's kernel, outermost first."""
    product = product_of(trace, step)
    kernels = [k for k in step.gpu_work if trace.op_of(k) is product]
    if not kernels:
        return [*reversed(list(trace.ancestors(product))), product]
    launch = trace.launch_of(kernels[0])
    return [*reversed(list(trace.ancestors(launch))), launch, kernels[0]]


flat_step = typical_step(trace)
flat_chain = chain(trace, flat_step)
for depth, span in enumerate(flat_chain):
    where = "GPU" if span.lane.kind == "gpu" else "CPU"
    name = textwrap.shorten(span.name, 52, placeholder="…")
    print(f"{'  ' * depth}{name}   ({where}, {span.dur:.1f} µs)")

# %%
# Read it from the top:
#
# - ``ProfilerStep#N`` is written by the profiler, one per ``prof.step()``;
# - ``matmul_add`` is our ``record_function`` label;
# - ``aten::matmul`` is the operator that ``torch.matmul`` lands on. It does no arithmetic
#   itself: it looks at the shapes and picks the operator that does;
# - ``aten::mm`` is that operator for two 2-D matrices;
# - under it, on a GPU, the call into the CUDA runtime or driver that queues the kernel,
#   and on the GPU's stream the kernel itself, which starts later: the CPU does not wait.
#
# On the CPU, each level's duration includes the levels below it. The kernel is the
# exception: it runs on the GPU after its launch call has queued it, so its time is not
# part of the launch call's. The CPU time of the product operator against the GPU time of
# its kernel, as medians over the recorded steps:

mm_cpu = Distribution.of(
    [s.dur for s in trace.find("aten::mm") if trace.step_of(s)], "µs"
)
print(f"aten::mm on the CPU:  {mm_cpu}")
if flat.has_gpu:
    gemm_gpu = Distribution.of([k.dur for k in product_kernels(trace)], "µs")
    print(f"its kernel on the GPU: {gemm_gpu}")
    at_least_times(
        "at 64, the CPU spends at least 3x as long in aten::mm as the GPU in its kernel",
        3,
        aten_mm_us=mm_cpu.median,
        kernel_us=gemm_gpu.median,
    )

# %%
# At this size the CPU takes longer to get the product started than the GPU takes to
# compute it: the chain, not the arithmetic, sets the pace.
#
# The step as a timeline, with the operator that starts the chain and, on a GPU, the
# kernel it ends in, highlighted:

matmul_span = next(s for s in flat_chain if s.name == "aten::matmul")
marks = [highlight_span(matmul_span, "aten::matmul")]
if flat.has_gpu:
    marks.append(highlight_span(flat_chain[-1], "its GEMM kernel"))
plot_timeline(
    trace,
    step=flat_step.number,
    highlights=marks,
    title=f"2-D product, ProfilerStep#{flat_step.number}",
)

# %%
# Each row of the CPU lane is one level deeper in the chain. On a GPU, the kernels sit on
# the stream's lane, each a little after the launch call that queued it; the profiler also
# draws our label there, stretched over the GPU work launched inside it.
#
# The batched case
# ----------------
# The post adds a batch of 8 to all three operands, making each ``(8, n, n)``
# (``torch.randn(8, size, size)``), and sees ``aten::matmul`` dispatch to the batched
# product ``aten::bmm``. We do the same: same code, new shapes. A third shape, which the
# post does not try, multiplies the batch by one 2-D weight:

batched = profile((8, n, n), (8, n, n), run_name((8, n, n), "bf16", warm=True))
folded = profile((8, n, n), (n, n), f"8x{n}x{n}-by-{n}x{n}_bf16_warm_eager")
runs = {"2-D @ 2-D": flat, "3-D @ 3-D": batched, "3-D @ 2-D": folded}


def matmul_children(run):
    """The names of the operators ``aten::matmul`` called in a typical step."""
    trace = run.trace
    step = typical_step(trace)
    matmul = next(op for op in recorded_matmuls(trace) if trace.step_of(op) is step)
    return [child.name for child in trace.children(matmul)]


children = {shapes: matmul_children(run) for shapes, run in runs.items()}
for shapes, names in children.items():
    print(f"{shapes}: aten::matmul ->")
    print(
        textwrap.fill(
            ", ".join(names), 88, initial_indent="    ", subsequent_indent="    "
        )
    )

# %%
# For two 3-D inputs ``aten::matmul`` first shapes the operands into a stack of matrices
# (``aten::expand`` and ``aten::reshape``), calls the batched product ``aten::bmm``, then
# views the result back to the caller's shape (``aten::_unsafe_view``). With a 2-D weight
# it needs no batched product: it folds the batch into the rows of one tall matrix and
# calls ``aten::mm``. Which product runs depends on both operands' shapes.
#
# For contiguous inputs the reshapes are views: they change how a tensor's memory is read,
# not the memory. A reshape that had to copy would show an ``aten::clone`` or
# ``aten::copy_`` inside ``aten::matmul``:

COPIES = ("aten::clone", "aten::copy_", "aten::contiguous")
copies = [
    span.name
    for run in runs.values()
    for op in recorded_matmuls(run.trace)
    for span in run.trace.spans
    if span.name in COPIES and op.start <= span.start and span.end <= op.end
    and span.lane == op.lane
]  # fmt: skip
claim(
    "aten::matmul dispatches 3-D @ 3-D to aten::bmm",
    "aten::bmm" in children["3-D @ 3-D"],
)
claim("aten::matmul folds 3-D @ 2-D into aten::mm", "aten::mm" in children["3-D @ 2-D"])
claim("no operand is copied inside aten::matmul", not copies, copies=len(copies))
print(f"Copies inside aten::matmul, all runs and steps: {len(copies)}")

# %%
# What does the batch cost the CPU?
# ---------------------------------
# Per ``aten::matmul`` call, the CPU time in the product operator and the time around it
# (the views and ``aten::matmul``'s own code), as the median over the recorded steps with
# the interquartile range, the middle half of the steps (each column its own median: the
# two parts need not add up to the whole):


def matmul_costs(run):
    """Per recorded step: aten::matmul's time, in its product operator and around it."""
    trace = run.trace
    total, product, around = [], [], []
    for op in recorded_matmuls(trace):
        inner = sum(c.dur for c in trace.children(op) if c.name in PRODUCTS)
        total.append(op.dur)
        product.append(inner)
        around.append(op.dur - inner)
    return [Distribution.of(values, "µs") for values in (total, product, around)]


costs = {shapes: matmul_costs(run) for shapes, run in runs.items()}
value_table(
    ["µs per call", "aten::matmul", "in the product", "around it"],
    [[shapes, *distributions] for shapes, distributions in costs.items()],
)

# %%
# A difference counts as a cost only when it is larger than the spread: when the middle
# halves of the two sets of steps do not overlap
# (:func:`~profiling_utils.stats.clearly_greater`). Single steps can lie outside the
# middle half: the first lines below set each run's slowest ``aten::matmul`` call against
# the median of its calls. With three steps, one such step could pass for a cost.
#
# Two recordings made one after the other can also run at different host speeds (other
# work on the machine, clocks): every call of one then takes longer, the batch's or not.
# :func:`~profiling_utils.measures.host_speed_ratio` sets the calls both recordings make
# that hold no call of their own (``aten::empty``, the launch calls...) against each other.
# The claims below compare the batched call with the 2-D one only where that ratio is
# within a quarter of 1.

for shapes, (total, _, _) in costs.items():
    print(
        f"{shapes}: slowest aten::matmul {max(total.samples):,.1f} µs, "
        f"median {total.median:,.1f} µs"
    )
(flat_total, flat_product, flat_around) = costs["2-D @ 2-D"]
(bmm_total, bmm_product, bmm_around) = costs["3-D @ 3-D"]
speed = host_speed_ratio(batched.trace, flat.trace)
if speed is not None:
    print(
        f"host speed: the 3-D @ 3-D recording's leaf calls took a median {speed[0]:.2f}x "
        f"the 2-D recording's ({speed[1]} kinds of call)"
    )
if flat.has_gpu and speeds_alike(speed[0] if speed else None):
    claim(
        "the batched call spends clearly more CPU time around its product than the "
        "2-D call",
        clearly_greater(bmm_around, flat_around),
        batched_us=bmm_around.median,
        two_d_us=flat_around.median,
    )
    claim(
        "the batched product operator takes clearly longer than aten::mm",
        clearly_greater(bmm_product, flat_product),
        otherwise="aten::bmm and aten::mm do not take clearly different times",
        bmm_us=bmm_product.median,
        mm_us=flat_product.median,
    )
elif flat.has_gpu:
    claim(
        "the two recordings ran at different host speeds: their operators' CPU times do "
        "not compare, and no cost of the batch is read from them",
        True,
        host_speed_ratio=speed[0] if speed else None,
    )
else:
    print("No GPU here: the products compute on the CPU and their time buries the")
    print("dispatch, so the comparison is made only on a GPU build.")

# %%
# The batch's sure cost is the extra operators, each with its own dispatch. Whether the
# batched product operator itself costs more is decided by the claims above, on this run,
# where the two recordings ran at one host speed.
#
# Extra runtime calls?
# --------------------
# On its A100 the `post <https://huggingface.co/blog/torch-profiler>`__ saw ``aten::matmul``
# hold several extra CUDA runtime calls in the batched case, besides the kernel launch.
# Here are the runtime and driver calls made inside ``aten::matmul`` on this machine, with
# how many recorded steps made each, and the GEMM kernel each run launched:


def runtime_calls(run):
    """How many recorded steps made each CUDA call nested inside ``aten::matmul``."""
    trace = run.trace
    steps_with = {}
    for op in recorded_matmuls(trace):
        names = {
            span.name
            for span in trace.spans
            if span.cat in ("cuda_runtime", "cuda_driver")
            and op.start <= span.start < op.end
            and span.lane == op.lane
        }
        for name in names:
            steps_with[name] = steps_with.get(name, 0) + 1
    return steps_with


calls = {shapes: runtime_calls(run) for shapes, run in runs.items()}
kernels = {
    shapes: {k.name for k in product_kernels(r.trace)} for shapes, r in runs.items()
}
for shapes, steps_with in calls.items():
    listed = ", ".join(f"{name} ({k})" for name, k in steps_with.items()) or "none"
    print(textwrap.fill(f"{shapes}: {listed}", 88, subsequent_indent="    "))
    for name in sorted(kernels[shapes]):
        print(f"    kernel {textwrap.shorten(name, 70, placeholder='…')}")

# %%
# Whether the batch changed either, worded by what this run found:

if flat.has_gpu:
    extra = sorted(set(calls["3-D @ 3-D"]) - set(calls["2-D @ 2-D"]))
    claim(
        "in recorded steps the batched product makes no CUDA call the 2-D one does not",
        not extra,
        otherwise="in recorded steps the batched product makes CUDA calls the 2-D one "
        "does not: " + ", ".join(extra),
    )
    claim(
        "the batched and the 2-D product launch the same GEMM kernel",
        kernels["3-D @ 3-D"] == kernels["2-D @ 2-D"],
        otherwise="the batched and the 2-D product launch different GEMM kernels",
    )
else:
    print("No GPU here: no CUDA calls and no kernels to compare.")

# %%
# The post reads its extra calls as cuBLAS working out which kernel to run. A warm step
# cannot show that work if the library does it once and reuses the answer: the next
# tutorial, :doc:`plot_06_launch_planning`, profiles a GEMM's
# very first call to look for it.
#
# The batched chain on a timeline, in a typical step, with the views before the product
# highlighted:

trace = batched.trace
step = typical_step(trace)
matmul = next(op for op in recorded_matmuls(trace) if trace.step_of(op) is step)
inner = trace.children(matmul)
product = next(c for c in inner if c.name in PRODUCTS)
marks = [highlight_span(product, product.name)]
if inner[0] is not product:
    marks.append(Highlight(inner[0].start, product.start, "views", lane=matmul.lane))
plot_timeline(
    trace,
    step=step.number,
    highlights=marks,
    title=f"Batched product, ProfilerStep#{step.number}",
)

# %%
# What the cheatsheet finds
# -------------------------
# :func:`~profiling_utils.rules.diagnose` applies the cheatsheet's rules to a trace. Its
# dispatch-chain rules, on the batched run:

chain_rules = ["call-chain", "mm-dispatch", "bmm-dispatch", "cost-in-children"]
findings_table(
    diagnose(batched.trace, select=chain_rules), caption=batched.name, rules=chain_rules
)

# %%
# ``call-chain`` follows the launch with the most GPU time in the trace; where the bias
# add's kernel outlasts the small GEMM's, it shows the add's chain rather than the
# product's. Either is a true chain of a recorded step.
#
# The traces
# ----------
# Open a trace in Perfetto and click a kernel: the arrow from its launch call leads back up
# the chain printed above.

trace_links(flat)

# %%

trace_links(batched)

# %%

trace_links(folded)
