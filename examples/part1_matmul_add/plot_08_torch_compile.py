"""
torch.compile: what fused, and what it costs per step
=====================================================

*Compile* ``x @ w + b`` *with* ``torch.compile``. *Do the product and the add become one
operator, and one kernel? Does a step cost the CPU less?*

``torch.compile`` captures a function into a graph (TorchDynamo), prepares it (AOTAutograd)
and generates code for it (Inductor). The
`Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ found on its A100 that the
product and the add became one ``aten::addmm``, that a device-to-device copy appeared before
the GEMM, that the GEMM kernel stayed the same, and that the compiled step cost the CPU more
than the eager one (twice as much in its first recorded step). We check each of these on
the GPU this page was built on, then try the ``reduce-overhead`` mode, which the post
leaves to its readers.
"""

# %%
# The code Inductor generates
# ---------------------------
# The post's function at 4096 in bf16 (256 on a machine without a GPU, where a 4096 product
# takes the CPU too long). The first call of a compiled function compiles it;
# ``run_and_get_code``, a helper from Inductor's tests (not a public API), makes that call
# and hands back the Python that Inductor generated. Its ``call`` function is what runs at
# every later call:

import torch
from torch._inductor.utils import run_and_get_code

from profiling_utils import (
    capture,
    compare,
    diagnose,
    measure_peaks,
    run_name,
    time_calls,
)
from profiling_utils.claims import claim, which_is_greater, who_sets_the_pace
from profiling_utils.measures import (
    compiled_regions,
    host_speed_ratio,
    kernel_launches,
    memory_copies,
    step_times,
)
from profiling_utils.rates import rate_report
from profiling_utils.render import (
    findings_table,
    gpu_work_listing,
    highlight_span,
    plot_timeline,
    source_excerpt,
    span_tree,
    trace_dir,
    trace_links,
)
from profiling_utils.stats import Distribution, clearly_greater
from profiling_utils.tables import byte_size

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
n = 4096 if device == "cuda" else 256
x, w, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(3))


def matmul_add(x, w, b):
    return torch.add(torch.matmul(x, w), b)


compiled_fn = torch.compile(matmul_add)
_, generated = run_and_get_code(compiled_fn, x, w, b)
call_code = source_excerpt(generated[0], "def call(", "return ") if generated else ""
print(call_code or "Inductor generated no code in this process (nothing to show).")

# %%
# The product and the add are one line: ``extern_kernels.addmm``, given the bias first,
# computes ``b + x @ w`` with ATen's own ``addmm``. Inductor generates kernels of its own
# (Triton on a GPU, C++ on a CPU) for elementwise work; a matrix product it hands to an
# *extern kernel*, and here it folded the add into that call.

claim(
    "the generated code hands the product and the add to one addmm call",
    "extern_kernels.addmm(" in call_code,
)

# %%
# Profile the variants
# --------------------
# Three ways to run the function: eager, compiled, and compiled with
# ``mode="reduce-overhead"`` (on a GPU only: it replays CUDA graphs). Each is profiled for
# twenty steps after three unprofiled calls (in which ``reduce-overhead`` compiles and
# records its CUDA graph); the profiler's schedule first waits one step and warms up on
# another, so the recorded steps are numbered from 2.
# ``step_cpu`` collects each run's CPU time per step as a
# :class:`~profiling_utils.stats.Distribution`: its median and spread.

variants = {"eager": (matmul_add, False), "compiled": (compiled_fn, True)}
if device == "cuda":
    ro_fn = torch.compile(matmul_add, mode="reduce-overhead")
    variants["reduce-overhead"] = (ro_fn, "reduce-overhead")
runs = {
    name: capture(
        lambda fn=fn: fn(x, w, b),
        name=run_name(n, "bf16", warm=True, compiled=mode),
        label="matmul_add",
        active=20,
        warmup_iters=3,
        out_dir=trace_dir(),
    )
    for name, (fn, mode) in variants.items()
}
eager, compiled = runs["eager"], runs["compiled"]


def step_cpu(run):
    return Distribution.of([t.cpu_us for t in step_times(run.trace)], "µs")


# %%
# Did it fuse?
# ------------
# One compiled step, as the profiler recorded it, span inside span:

step = compiled.trace.steps[-1]
print(span_tree(compiled.trace, step.span, width=80))

# %%
# From the outside in: ``TorchDynamo Cache Lookup`` checks the call's *guards* (shapes,
# dtypes, devices: what the compiled code assumed) and picks the compiled code; a failed
# check would mean a recompilation. ``Torch-Compiled Region`` is the compiled code running,
# ``AOTDispatcher Runtime Wrapper Prologue`` AOTAutograd's wrapper, and
# ``## Call CompiledFxGraph <hash>`` the ``call`` function shown above, which makes one
# ``aten::addmm``. The operators only one of the two runs has:

comparison = compare(eager.trace, compiled.trace)
for label, ops in (
    ("eager   ", comparison.ops_only_in_baseline),
    ("compiled", comparison.ops_only_in_trace),
):
    print(
        f"aten ops only in {label}:",
        ", ".join(o.name for o in ops if "aten::" in o.name),
    )
only_eager = {o.name for o in comparison.ops_only_in_baseline}
only_compiled = {o.name for o in comparison.ops_only_in_trace}
claim(
    "aten::addmm takes the place of eager's aten::mm and aten::add",
    {"aten::mm", "aten::add"} <= only_eager and "aten::addmm" in only_compiled,
)

# %%
# That is fusion at the level of operators. On the GPU, the work of one step of each run:

for name in ("eager", "compiled"):
    print(f"{name}:\n{gpu_work_listing(runs[name].trace.steps[-1])}")

# %%
# ``addmm`` writes ``b + x @ w`` into an output that must first hold ``b``. Here ``b`` is a
# full ``n × n`` addend, and PyTorch's CUDA ``addmm`` copies it there (the device-to-device
# copy above), then runs a GEMM that adds its product to what the output holds. (The
# one-row bias of an ``nn.Linear`` takes another path, which :doc:`page 12
# <../part2_linear_and_mlp/plot_12_linear>` profiles.) So the add kernel is gone, but the bias still
# crosses memory, now as a copy. A memset of a few bytes next to a GEMM, where the listing
# shows one, is cuBLAS's own. Counted over the twenty steps, with the GEMM kernels' names:


def gemm_kernel(run):
    names = {
        k.kernel.name
        for k in kernel_launches(run.trace)
        if k.op is not None and k.op.name in ("aten::mm", "aten::addmm")
    }
    return ", ".join(sorted(names))


if compiled.has_gpu:
    summary = {"eager": comparison.baseline, "compiled": comparison.trace}
    for name, side in summary.items():
        print(
            f"{name:8s} per step: kernels {side.kernels_per_step:g}, launch calls "
            f"{side.launches_per_step:g}; GEMM kernel:\n    {gemm_kernel(runs[name])}"
        )
    bias_copies = [
        c
        for c in memory_copies(compiled.trace)
        if c.kind == "DtoD" and c.step is not None
    ]
    claim(
        "every compiled step copies the bias (n x n bf16) device to device",
        len(bias_copies) == len(compiled.trace.steps)
        and all(c.bytes == n * n * 2 for c in bias_copies),
        steps=len(compiled.trace.steps),
        copies=len(bias_copies),
    )
    claim(
        "the compiled step runs one kernel fewer than the eager one",
        comparison.trace.kernels_per_step == comparison.baseline.kernels_per_step - 1,
        eager=comparison.baseline.kernels_per_step,
        compiled=comparison.trace.kernels_per_step,
    )
    claim(
        "the compiled GEMM is a different kernel from the eager one",
        gemm_kernel(eager) != gemm_kernel(compiled),
        otherwise="the compiled GEMM is the same kernel as the eager one, as in the post",
    )
else:
    print(
        "No GPU here: the product, the add and the copy run inside the CPU operators."
    )

# %%
# The post found the same cuBLAS kernel in both runs on its A100
# (``ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn``). Whether that holds on
# this GPU is the last claim above, with the names printed before it. Where the names
# differ only in a part such as ``_bz_`` against ``_badd_`` (as with cuBLASLt's ``nvjet``
# kernels on Hopper GPUs), the two are variants of one GEMM: NVIDIA does not document these
# names, but read against what the two runs do, one ignores what the output held
# (``β = 0``) and the other adds to it (``β = 1``).
#
# The bias copy against the peaks
# -------------------------------
# How fast is that copy? :func:`~profiling_utils.peaks.measure_peaks` measures this GPU's
# peaks first (its copy peaks are printed, with the conditions they were measured under);
# then
# :func:`~profiling_utils.rates.rate_report` puts the copy's rate, in bytes copied per
# second, next to the datasheet's memory bandwidth and the measured copy peaks:

if compiled.has_gpu:
    copy_us = Distribution.of([c.span.dur for c in bias_copies], "µs")
    copy_bytes = bias_copies[0].bytes
    peaks = measure_peaks()
    print(
        f"{peaks.summary(only='copy')}\n\nbias copy of {byte_size(copy_bytes)}: {copy_us}"
    )
    report = rate_report(
        copy_bytes / copy_us.median / 1e3,
        "copy",
        device=compiled.trace.devices[0].name,
        peaks=peaks,
        copy_bytes=copy_bytes,
        subject="bias copy, median step",
    )
    print(report)
else:
    print("No GPU here: no device-to-device copy to measure.")

# %%
# A device-to-device copy reads each byte from memory and writes it back, so the datasheet
# allows it half the memory bandwidth. The likely reason a copy can beat that ceiling,
# which this page does not measure: a GPU's L2 cache holds written bytes and sends them on
# to memory later, so a copy can count as done once its last write is in the cache, and a
# copy whose bytes fit in the cache can finish before memory has taken them all. The
# report only checks the sizes, the copy's against the cache's, and never prints a share
# above 100% without such a reason. On this run:

if compiled.has_gpu:
    above = [share for share in report.shares if share.above_peak]
    if above:
        claim(
            "where the bias copy beats a ceiling, its bytes fit in the L2 cache",
            all(share.reason == "l2-cache" for share in above),
            above=", ".join(f"{s.against} {s.share:.0%}" for s in above),
        )
    else:
        claim("the bias copy stays below every ceiling", True, copy=copy_us)

# %%
# The post measured this copy at 32 MB in about 33 µs on its A100. The compiled step on a
# timeline, with Dynamo's guard check and the bias copy highlighted:

lookups = compiled_regions(compiled.trace).cache_lookups
guard_check = next(s for s in lookups if compiled.trace.step_of(s) is step)
marks = [highlight_span(guard_check, "guard check")]
if compiled.has_gpu:
    marks.append(highlight_span(bias_copies[-1].span, "bias copy"))
plot_timeline(
    compiled.trace,
    step=step.number,
    highlights=marks,
    title=f"{compiled.name}: one step",
)
if step.gpu_work:
    own_start = min(work.start for work in step.gpu_work)
    earlier = [
        work
        for work in compiled.trace.gpu_work
        if step.start <= work.start < own_start and work not in step.gpu_work
    ]
    when = (
        f"{own_start - step.end:,.1f} µs after its CPU side ends"
        if own_start >= step.end
        else "while its CPU side runs"
    )
    print(f"this step's GPU work starts {when};")
    print(
        f"{len(earlier)} GPU activities launched by earlier steps start after this step's\n"
        "start and before its own work"
    )

# %%
# The picture runs from the step's start on the CPU to the end of the GPU work it
# launched. The GPU can run behind the CPU: the line above says whether, and how much of
# what the GPU lane shows before the step's own work was launched by earlier steps. The
# highlighted bands run through every lane to mark a time, not an event on each lane.
#
# What a step costs the CPU
# -------------------------
# The post's compiled step cost its A100's CPU more than the eager one: 0.2 ms against
# 0.1 ms in its first recorded step, then 0.1 against 0.07 ms. Ours, over twenty steps
# each, and on a GPU the GPU's busy time per step:

cpu = {name: step_cpu(run) for name, run in runs.items()}
for name, times in cpu.items():
    print(f"{name:16s} {times}, {times.median / cpu['eager'].median:.2f}x eager")
if compiled.has_gpu:
    for name, run in runs.items():
        busy = Distribution.of([t.gpu_busy_us for t in step_times(run.trace)], "µs")
        print(f"{name:16s} GPU busy {busy}")
    # Timings move from run to run: where the middle halves of the two overlap, the run
    # says so rather than what other runs showed.
    which_is_greater(
        "a compiled step costs the CPU more than an eager one",
        "an eager step costs the CPU more than a compiled one",
        "this run cannot tell a compiled step's CPU cost from an eager one's: the middle "
        "halves of their steps overlap",
        host_speed=host_speed_ratio(compiled.trace, eager.trace),
        compiled=cpu["compiled"],
        eager=cpu["eager"],
    )

# %%
# The guard check, the region, the wrapper and the graph's entry (the tree above) are
# paid on every call, for the function as a whole. In a function of many operators,
# fusion saves many launches and kernels in return; for one product and an add there is
# little to win back.
#
# Extra CPU time costs wall time only where the GPU waits for it: where a step's GPU work
# takes longer than the CPU needs to issue it, the CPU runs ahead and its extra time is
# hidden. The CPU times above were also taken under the profiler, which adds its own work
# to every operator and runtime call it records, and a compiled step runs more of those.
# What a caller's loop sees is each variant timed without the profiler
# (:func:`~profiling_utils.capture.time_calls`: thirty batches of twenty back-to-back
# calls, each batch between two CUDA events, so that a call the CPU cannot issue fast
# enough is timed at the CPU's pace; the variants' batches in turn, so that the machine's
# speed changing meanwhile falls on all of them), beside the CPU's own part, its time to
# make the calls:

timed = time_calls(
    {name: lambda fn=fn: fn(x, w, b) for name, (fn, _) in variants.items()}
)
for name, times in timed.items():
    print(f"{name:16s} per call, unprofiled: end to end {times.end_to_end}")
    print(f"{'':16s} the CPU's part {times.issue}")
if compiled.has_gpu:
    which_is_greater(
        "without the profiler, a compiled call takes longer than an eager one",
        "without the profiler, a compiled call takes less time than an eager one",
        "without the profiler, a compiled call takes as long as an eager one, within the "
        "spread",
        compiled=timed["compiled"].end_to_end,
        eager=timed["eager"].end_to_end,
    )
    who_sets_the_pace("an eager call", timed["eager"])
    who_sets_the_pace("a compiled call", timed["compiled"])

# %%
# Where the GPU sets the pace of both, the compiled call's extra CPU work can hide
# behind the GPU's, and what each call takes comes from the GPU: its work (a copy and one
# GEMM against a GEMM and an add) and the gaps between it. The claims above say how the
# two compared on this run.
#
# Beyond the post: ``mode="reduce-overhead"``
# -------------------------------------------
# ``reduce-overhead`` records Inductor's code once into a CUDA graph, and each call replays
# the graph with one ``cudaGraphLaunch`` in place of one launch per kernel. A replayed
# step:

ro = runs.get("reduce-overhead")
if ro is not None:
    ro_step = ro.trace.steps[-1]
    print(span_tree(ro.trace, ro_step.span, width=80))
    print(gpu_work_listing(ro_step))
    per_step = [
        [s for s in ro.trace.find(name) if ro.trace.step_of(s) is recorded]
        for recorded in ro.trace.steps
        for name in ("cudaGraphLaunch", "aten::_foreach_copy_")
    ]
    claim(
        "every reduce-overhead step makes one aten::_foreach_copy_ and one cudaGraphLaunch",
        all(len(found) == 1 for found in per_step),
        steps=len(ro.trace.steps),
    )
else:
    print("No GPU here: reduce-overhead needs CUDA graphs, so it was not run.")

# %%
# One ``cudaGraphLaunch`` starts the work of the generated ``call``. Before it,
# ``aten::_foreach_copy_`` copies the three inputs into the graph's own buffers: a CUDA
# graph replays fixed memory addresses, and ``x``, ``w`` and ``b`` could live anywhere at
# the next call (a module's parameters, by contrast, stay where they are). Those copies
# are GPU work the other runs do not do: three tensors of 32 MiB, each read and written
# again, in the GPU busy time per step printed above. Did the replay save CPU time here,
# and time end to end? Without the profiler (the CPU's parts and end-to-end times printed
# earlier, the profiler adding unevenly to the variants' CPU times):

if ro is not None:
    which_is_greater(
        "without the profiler, for one GEMM, reduce-overhead costs the CPU more than the "
        "default mode",
        "without the profiler, for one GEMM, reduce-overhead costs the CPU less than the "
        "default mode",
        "without the profiler, for one GEMM, reduce-overhead and the default mode cost the "
        "CPU alike",
        reduce_overhead=timed["reduce-overhead"].issue,
        default=timed["compiled"].issue,
    )
    which_is_greater(
        "without the profiler, a reduce-overhead call takes longer end to end than a "
        "default-mode one",
        "without the profiler, a reduce-overhead call takes less time end to end than a "
        "default-mode one",
        "without the profiler, reduce-overhead and default-mode calls take the same time end "
        "to end, within the spread",
        reduce_overhead=timed["reduce-overhead"].end_to_end,
        default=timed["compiled"].end_to_end,
    )

# %%
# A replay pays when it replaces many launches, and one GEMM makes only a few; here the
# replay also brings the three input copies, GPU work the default mode does not do.
#
# When does a replay pay?
# -----------------------
# A stack of sixteen small linear layers (64 features, bf16) makes a launch per layer in
# eager mode. Its weights are parameters, which the CUDA graph can keep in place, so only
# the input needs copying:

if device == "cuda":
    stack = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(16)))
    stack = stack.to(device, torch.bfloat16).requires_grad_(False)
    layers_in = torch.randn(64, 64, device=device, dtype=torch.bfloat16)
    stack_cpu, stack_launches = {}, {}
    for mode in (False, "reduce-overhead"):
        model = torch.compile(stack, mode=mode) if mode else stack
        stack_run = capture(
            lambda model=model: model(layers_in),
            name="linear-stack_" + run_name((16, 64), "bf16", warm=True, compiled=mode),
            label="linear_stack",
            active=20,
            warmup_iters=3,
            out_dir=trace_dir(),
        )
        label = mode or "eager"
        stack_cpu[label] = step_cpu(stack_run)
        launches = compare(stack_run.trace, stack_run.trace).trace.launches_per_step
        stack_launches[label] = launches
        print(f"{label:16s} CPU per step {stack_cpu[label]}")
        print(f"{'':16s} {launches:g} launch calls per step")
    claim(
        "eager makes at least one launch call per layer",
        stack_launches["eager"] >= 16,
        launches_per_step=stack_launches["eager"],
    )
    claim(
        "for sixteen layers, reduce-overhead costs the CPU less than eager",
        clearly_greater(stack_cpu["eager"], stack_cpu["reduce-overhead"]),
        eager=stack_cpu["eager"],
        reduce_overhead=stack_cpu["reduce-overhead"],
    )
else:
    print("No GPU here: CUDA graphs need one, so this comparison is skipped.")

# %%
# The cheatsheet's findings
# -------------------------
# :func:`~profiling_utils.rules.diagnose` on the compiled run, with the rules of the
# cheatsheet's torch.compile table and the GPU-lane rules about the copy:

compile_rules = [
    "compiling-recorded",
    "compiled-region",
    "dynamo-cache-lookup",
    "aot-wrapper",
    "compiled-graph-cache-hit",
    "addmm-fusion",
    "gemm-kernel",
    "bias-copy",
    "hidden-memcpy",
    "memset-before-gemm",
]
findings_table(
    diagnose(compiled.trace, select=compile_rules),
    caption=compiled.name,
    rules=compile_rules,
)

# %%
# Rules that compare two traces run in :func:`~profiling_utils.compare.compare`; against
# the eager run:

findings_table(comparison.findings, caption=f"{compiled.name} against {eager.name}")

# %%
# And on the ``reduce-overhead`` run, the row about CUDA graphs:

ro_findings = diagnose(ro.trace, select=["cuda-graph"]) if ro is not None else []
findings_table(
    ro_findings, caption=ro.name if ro is not None else None, rules=["cuda-graph"]
)

# %%
# The traces
# ----------

trace_links(eager)

# %%

trace_links(compiled)

# %%

trace_links(ro) if ro is not None else print("No reduce-overhead trace without a GPU.")
