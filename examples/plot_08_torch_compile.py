"""
torch.compile: what fused, and what it costs per step
=====================================================

*Compile* ``x @ w + b`` *with* ``torch.compile`` *and the two operators become one. Did the GPU
work shrink, is the GEMM kernel a new one, and does a step now cost the CPU less?*

``torch.compile`` captures a function into a graph (TorchDynamo), prepares it (AOTAutograd)
and generates code for it (Inductor). The trace shows each layer as a row of its own, and
what the generated code calls in place of our two operators. The
`Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ found that on its A100 the
matrix product and the add became one ``aten::addmm``, that a device-to-device copy appeared
before the GEMM, and that the compiled step cost the CPU about twice the eager one.

We check each of these on this machine, then try what the post leaves to its readers: the
``reduce-overhead`` mode, which replays a CUDA graph, and calling ``torch.addmm`` directly.
"""

# %%
# Eager and compiled
# ------------------
# The post's function at 4096 in bf16. On a machine without a GPU we use 256, and only the
# default mode: there compiling works too, but costs tens of seconds per graph, and CUDA
# graphs need a GPU.

import statistics
import textwrap
import time

import matplotlib.pyplot as plt
import torch

from profiling_utils import (
    achieved_gb_s,
    achieved_tflops,
    capture,
    compare,
    diagnose,
    gemm_flops,
    measure_peaks,
    run_name,
)
from profiling_utils.measures import (
    compiled_regions,
    kernel_launches,
    memory_copies,
    step_times,
)
from profiling_utils.render import (
    findings_table,
    highlight_span,
    plot_timeline,
    profiler_table,
    trace_dir,
    trace_links,
)

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
n = 4096 if device == "cuda" else 256
x, w, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(3))


def matmul_add(x, w, b):
    return torch.add(torch.matmul(x, w), b)


variants = {"eager": matmul_add, "compiled": torch.compile(matmul_add)}
if device == "cuda":
    variants["reduce-overhead"] = torch.compile(matmul_add, mode="reduce-overhead")
variants["torch.addmm"] = lambda x, w, b: torch.addmm(b, x, w)
if device == "cpu":
    print(
        "No GPU here: n=256 and the default compile mode only (CUDA graphs need a GPU)."
    )

# %%
# The first call of a compiled function compiles it. We make that call for each variant
# now, timed, so that compilation stays out of every profile below:

for name, fn in variants.items():
    start = time.perf_counter()
    for _ in range(3):  # reduce-overhead records its CUDA graph on the first calls
        fn(x, w, b)
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"{name:16s} first three calls: {time.perf_counter() - start:6.2f} s")

# %%
# The first compilation in a process also pays for setting the compiler itself up, which
# later compilations reuse: one reason a second compiled variant can take far less time.
#
# Compilation also leaves worker processes and caches behind, and the CPU's own clock moves
# with its load, so the CPU cost of a step can drift over a process's life. To compare the
# variants fairly we profile them in turns: three rounds, each variant once per round
# (three warm-up calls, the post's schedule with five recorded steps). Each variant's last
# round is the trace we read below.

names = {
    "eager": run_name(n, "bf16", warm=True),
    "compiled": run_name(n, "bf16", warm=True, compiled=True),
    "reduce-overhead": run_name(n, "bf16", warm=True, compiled="reduce-overhead"),
    "torch.addmm": run_name(n, "bf16", warm=True) + "_addmm",
}
runs, rounds = {}, {name: [] for name in variants}
for _ in range(3):
    for name, fn in variants.items():
        runs[name] = capture(
            lambda fn=fn: fn(x, w, b),
            name=names[name],
            label="matmul_add",
            active=5,
            warmup_iters=3,
            out_dir=trace_dir(),
        )
        rounds[name].append(step_times(runs[name].trace))
eager, compiled = runs["eager"], runs["compiled"]

# %%
# The compiled region's rows
# --------------------------
# :func:`~profiling_utils.measures.compiled_regions` collects what ``torch.compile`` leaves
# in a trace:

info = compiled_regions(compiled.trace)
lookup_us = statistics.median(span.dur for span in info.cache_lookups)
print(
    f"Torch-Compiled Region ids: {', '.join(info.region_ids)} ({len(info.regions)} calls)"
)
print(
    f"TorchDynamo Cache Lookup: {len(info.cache_lookups)} calls, median {lookup_us:.1f} µs"
)
print(f"AOTDispatcher rows: {sorted({span.name for span in info.aot_wrappers})}")
print(f"## Call CompiledFxGraph: {len(info.graph_calls)} calls, hashes:")
for graph_hash in info.graph_hashes:
    print(f"  {graph_hash}")
print(
    f"steps: {len(compiled.trace.steps)}, cudaGraphLaunch calls: {len(info.cuda_graph_launches)}"
)

# %%
# Every step makes the same calls:
#
# - ``TorchDynamo Cache Lookup``: Dynamo checks the call's *guards* (shapes, dtypes,
#   devices and other facts the compiled code assumed) and picks the compiled code that
#   matches. A failed check would mean a recompilation; this cost is paid on every call.
# - ``Torch-Compiled Region: F/C``: the compiled code running, for frame F's compilation C.
# - ``AOTDispatcher Runtime Wrapper Prologue``: AOTAutograd's runtime wrapper, present even
#   though nothing here needs gradients.
# - ``## Call CompiledFxGraph <hash>``: Inductor's generated code. One hash for every step
#   means every call reused the same graph. The code lives in Inductor's cache folder,
#   under ``torchinductor_<user>`` in the system's temporary directory.
#
# Inside the generated code, the operators it calls. One compiled step as a tree:


def print_tree(trace, span, depth=0):
    print(
        f"{'    ' * depth}{span.name[: 64 - 4 * depth]:<{64 - 4 * depth}} {span.dur:9.1f} µs"
    )
    for child in trace.children(span):
        print_tree(trace, child, depth + 1)


print_tree(compiled.trace, compiled.trace.steps[-1].span)

# %%
# Did it fuse?
# ------------
# The operators of one step, eager against compiled, from
# :func:`~profiling_utils.compare.compare`:

comparison = compare(eager.trace, compiled.trace)
only_eager = [f"{op.name} x{op.count}" for op in comparison.ops_only_in_baseline]
only_compiled = [f"{op.name} x{op.count}" for op in comparison.ops_only_in_trace]
for label, ops in (("eager:   ", only_eager), ("compiled:", only_compiled)):
    listed = ", ".join(ops) or "none"
    print(textwrap.fill(f"ops only in {label} {listed}", 88, subsequent_indent="    "))

# %%
# ``aten::matmul``, ``aten::mm`` and ``aten::add`` are gone; ``aten::addmm`` does both:
# ``addmm(b, x, w)`` computes ``b + x @ w``. This is fusion at the level of operators:
# Inductor recognised the pattern and called the one operator that does it. What happened on
# the GPU is a separate question. The GPU work of one step of each run:


def gpu_work_of_step(run):
    step = run.trace.steps[-1]
    for work in step.gpu_work:
        size = work.args.get("bytes")
        size = (
            ""
            if not size
            else f", {size / 2**20:.0f} MiB"
            if size >= 2**20
            else f", {size} B"
        )
        print(f"    {work.cat:11s} {work.dur:8.1f} µs  {work.name[:56]}{size}")
    if not step.gpu_work:
        print("    none: without a GPU the work runs inside the CPU ops")


for name in ("eager", "compiled"):
    print(f"{name}:")
    gpu_work_of_step(runs[name])
print(
    f"kernels per step: eager {comparison.baseline.kernels_per_step:g}, "
    f"compiled {comparison.trace.kernels_per_step:g}; launch calls per step: eager "
    f"{comparison.baseline.launches_per_step:g}, compiled {comparison.trace.launches_per_step:g}"
)
if eager.has_gpu:
    busy = {
        name: statistics.median(t.gpu_busy_us for t in step_times(runs[name].trace))
        for name in ("eager", "compiled")
    }
    print(
        f"GPU busy per step (median): eager {busy['eager']:.1f} µs, compiled "
        f"{busy['compiled']:.1f} µs ({busy['compiled'] / busy['eager'] - 1:+.1%})"
    )

# %%
# On a GPU, the add kernel is gone, but the compiled step still moves the bias before its
# GEMM: a device-to-device copy, then the GEMM (the few-byte memset before the GEMM is
# cuBLAS's own and is in both runs). ``addmm`` writes ``x @ w + b`` into an output that
# must first hold ``b``: the copy puts it there, and the GEMM adds its product to what it
# finds (a GEMM *epilogue* that reads the output, ``β = 1``). The bias still crosses memory,
# now as a copy instead of an add: compare the launch calls and the GPU time per step in
# the last lines above. Without a GPU the same copy is the ``aten::copy_`` inside
# ``aten::addmm`` in the tree above.
#
# The copy before the GEMM
# ------------------------
# :func:`~profiling_utils.measures.memory_copies` lists each copy with its size and
# duration. A copy reads and writes its bytes, so we count both and put the rate next to
# this GPU's measured copy peak (a 1 GiB copy timed the same way).

peaks = measure_peaks()
copies = [
    c for c in memory_copies(compiled.trace) if c.kind == "DtoD" and c.step is not None
]
if copies and peaks is not None:
    copy_us = statistics.median(c.span.dur for c in copies)
    rate = achieved_gb_s(2 * copies[0].bytes, copy_us)
    print(
        f"{copies[0].span.name}: {copies[0].bytes / 2**20:.0f} MiB through {copies[0].api},"
    )
    print(
        f"median {copy_us:.1f} µs over {len(copies)} steps: {rate:,.0f} GB/s read + write, "
        f"{rate / peaks.copy_gb_s:.0%} of the measured peak of {peaks.copy_gb_s:,.0f} GB/s"
    )
    l2_mib = torch.cuda.get_device_properties(0).L2_cache_size / 2**20
    if rate > peaks.copy_gb_s:
        print(
            f"Faster than the {peaks.copy_bytes / 2**30:g} GiB copy: the "
            f"{copies[0].bytes / 2**20:.0f} MiB this copy writes fit in this GPU's\n"
            f"{l2_mib:.0f} MiB L2 cache."
        )
elif peaks is None:
    print("No GPU here: no device-to-device copy to measure.")
else:
    print("This compiled run made no device-to-device copy in its steps.")

# %%
# Every byte a GPU reads or writes passes through its L2 cache, which sends written data
# on to memory later. A copy is over when its last write has reached the cache, not memory.
# The copy that set the peak is many times larger than the cache, so it runs at the speed
# of memory; a copy whose writes fit in the cache can finish sooner. A share above 100%
# (as on the H100, see the output above) means the copy's bytes did not all reach memory
# within its time, not that memory got faster.
#
# The `post <https://huggingface.co/blog/torch-profiler>`__ measured this copy at 32 MB in
# about 33 µs on its A100; ours is in the output above. (The cheatsheet's ``bias-copy``
# finding below quotes the copy's rate as a trace viewer does, bytes over time, counting
# each byte once; here we count it read and written, as the peak does.)
#
# Is the GEMM kernel eager's?
# ---------------------------
# The post found the same cuBLAS kernel in both runs on its A100,
# ``ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_nn``. Here are the GEMM kernels
# of our two runs, their durations and their throughput against the measured peak:


def gemm_of(run):
    launches = [
        k
        for k in kernel_launches(run.trace)
        if k.op and k.op.name in ("aten::mm", "aten::addmm") and k.step is not None
    ]
    if not launches:
        return None, None
    return launches[0].kernel.name, statistics.median(k.kernel.dur for k in launches)


gemms = {name: gemm_of(runs[name]) for name in ("eager", "compiled")}
for name, (kernel, dur_us) in gemms.items():
    if kernel is None:
        print(f"{name:9s}: no GEMM kernel (no GPU)")
        continue
    tflops = achieved_tflops(gemm_flops(n, n, n), dur_us)
    print(
        f"{name:9s}: {kernel}\n           median {dur_us:.1f} µs, {tflops:.0f} TFLOP/s, "
        f"{tflops / peaks.matmul_tflops:.0%} of the measured peak"
    )
if gemms["eager"][0] is not None:
    same = gemms["eager"][0] == gemms["compiled"][0]
    print("Same kernel in both runs." if same else "Different kernels in the two runs.")

# %%
# On the H100 this site is built on, the two kernels are not the same (see the output
# above): both are cuBLASLt ``nvjet`` kernels with the same tile shape, but eager's name
# carries ``_bz_`` and the compiled one's ``_badd_``. NVIDIA does not document these names;
# read against what the two runs do, one is the variant that ignores the output's old
# contents (``β = 0``) and the other the variant that adds to them (``β = 1``). So the
# "fused" compiled step runs a different, bias-adding GEMM, plus a copy, in place of a
# GEMM plus an add kernel. The bias-adding variant reads the output before it writes it,
# more memory traffic than a GEMM that only writes: compare the two durations above. A
# share above 100% of the peak means a GEMM ran a little faster per operation than the
# larger reference GEMM that set it; the
# :ref:`kernel-variance tutorial <sphx_glr_auto_examples_plot_07_kernel_variance.py>`
# shows the same.
#
# The compiled step on a timeline, with the copy and Dynamo's guard check highlighted:

trace = compiled.trace
step = trace.steps[-1]
marks = [
    highlight_span(
        next(s for s in info.cache_lookups if trace.step_of(s) is step), "guard check"
    )
]
copy_in_step = [c.span for c in copies if c.step == step.number]
if copy_in_step:
    marks.append(highlight_span(copy_in_step[0], "bias copy"))
plot_timeline(
    trace, step=step.number, highlights=marks, title=f"{compiled.name}: one step"
)

# %%
# CPU cost per step
# -----------------
# The `post's <https://huggingface.co/blog/torch-profiler>`__ eager and compiled steps took
# 0.1 and 0.2 ms, then 0.07 and 0.1 ms, then again 0.07 and 0.1 ms of CPU time on its A100:
# the compiled step was about twice as expensive.
# :func:`~profiling_utils.compare.compare` pairs the steps of our last round the same way:

print(f"{'step':>8s} {'eager CPU':>12s} {'compiled CPU':>14s}")
for pair in comparison.steps:
    print(
        f"{pair.index:8d} {pair.baseline_cpu_us:9.1f} µs {pair.trace_cpu_us:11.1f} µs"
    )
print(f"compiled / eager, median step: {comparison.cpu_ratio:.2f}x")
for finding in comparison.findings:
    print(
        textwrap.fill(
            f"[{finding.rule}] {finding.message}", 88, subsequent_indent="    "
        )
    )

# %%
# Pooled over the three rounds, for every variant: the median and the range of the fifteen
# recorded steps, and how often a capture's slowest step was its first.

step_cpu_us = {
    name: [t.cpu_us for times in captures for t in times]
    for name, captures in rounds.items()
}
medians = {name: statistics.median(values) for name, values in step_cpu_us.items()}
for name, values in step_cpu_us.items():
    first_slowest = sum(
        max(times, key=lambda t: t.cpu_us) is times[0] for times in rounds[name]
    )
    print(
        f"{name:16s} median {medians[name]:6.1f} µs (min {min(values):5.1f}, max "
        f"{max(values):5.1f}), {medians[name] / medians['eager']:.2f}x eager;"
    )
    print(f"{'':16s} slowest step first in {first_slowest} of {len(rounds[name])}")

# %%
# The same medians as bars, with the middle half of each variant's steps as a line:

fig, ax = plt.subplots(figsize=(7, 3.6))
labels = list(step_cpu_us)
ax.barh(labels, [medians[name] for name in labels], color="#56b4e9")
for row, name in enumerate(labels):
    q1, _, q3 = statistics.quantiles(step_cpu_us[name], n=4)
    ax.plot([q1, q3], [row, row], color="0.2", linewidth=2)
ax.invert_yaxis()
ax.set_xlabel("CPU time per step, µs (bar: median; line: middle half of the steps)")
ax.set_title(f"{n}x{n} bf16 matmul + add: what a step costs the CPU", loc="left")
ax.grid(True, axis="x", color="0.92")
fig.tight_layout()

# %%
# In a sentence, from the pooled medians:

ratio = medians["compiled"] / medians["eager"]
print(
    f"The compiled step cost the CPU {ratio:.2f}x what the eager step did"
    + (", as in the post." if ratio > 1.05 else ".")
)
if device == "cpu":
    print(
        "Without a GPU, a step's CPU time includes the product itself, computed on the CPU."
    )

# %%
# Where does the extra time go? Per step of the last round (median), the time inside the
# operators that do the work, and the compiled step's time around them, inside our label:


def per_step_us(trace, names):
    """Median over the recorded steps of the time spent in the CPU spans called ``names``."""
    per_step = {}
    for name in names:
        for span in trace.find(name):
            if span.lane.kind == "cpu" and trace.step_of(span) is not None:
                number = trace.step_of(span).number
                per_step[number] = per_step.get(number, 0.0) + span.dur
    return statistics.median(per_step.values())


eager_ops_us = per_step_us(eager.trace, ["aten::matmul", "aten::add"])
addmm_us = per_step_us(compiled.trace, ["aten::addmm"])
around_us = per_step_us(compiled.trace, ["matmul_add"]) - addmm_us
print(f"eager:    aten::matmul + aten::add  {eager_ops_us:6.1f} µs")
print(f"compiled: aten::addmm               {addmm_us:6.1f} µs")
print(
    f"compiled: around aten::addmm        {around_us:6.1f} µs (guard check, region, wrappers)"
)

# %%
# The layers that ``torch.compile`` puts around the operator (the guard check, the region,
# the AOT wrapper and the generated code's entry) are paid on every call. That cost is per
# call, not per operator, so it pays off in functions with many operators, where fusion
# removes many launches and kernels; for one matrix product plus an add there is little to
# win back.
#
# Does the extra CPU time cost anything? Only if the GPU has to wait for it. Per variant,
# the GPU's busy time in the median step and the share of the step's window in which it
# sat idle, pooled over the rounds:

if eager.has_gpu:
    gpu_busy_us = {}
    for name, captures in rounds.items():
        times = [t for times in captures for t in times]
        gpu_busy_us[name] = statistics.median(t.gpu_busy_us for t in times)
        idle = statistics.median(t.gpu_idle_fraction for t in times)
        print(
            f"{name:16s} GPU busy {gpu_busy_us[name]:6.1f} µs per step, "
            f"idle {idle:4.0%} of its window"
        )
    waits = [name for name in rounds if medians[name] > gpu_busy_us[name]]
    print(
        f"Median CPU step longer than the GPU's work per step: {', '.join(waits) or 'none'}."
    )
else:
    print("No GPU here: the CPU does all the work, so nothing waits for it.")

# %%
# Where the CPU takes longer over a step than the GPU needs for its work, the GPU idles
# between steps and the extra CPU time is paid in wall time; where the GPU's work is
# longer, the CPU runs ahead and its extra time is hidden. The post's 4096 GEMM took about
# 580 µs on its A100, longer than any of the CPU steps it reports, so there the GPU set the
# pace either way. The last line above names the variants for which that does not hold on
# this GPU. The profiler adds CPU time to every operator, so a run without it idles less.
#
# Beyond the post: ``mode="reduce-overhead"``
# -------------------------------------------
# The post leaves its readers to find the mode that cuts the CPU overhead. It is
# ``reduce-overhead``: Inductor's code is recorded once into a CUDA graph, and each call
# replays the graph with one ``cudaGraphLaunch`` in place of one launch per kernel. A
# replayed step:

ro = runs.get("reduce-overhead")
if ro is not None:
    print_tree(ro.trace, ro.trace.steps[-1].span)
    ro_info = compiled_regions(ro.trace)
    replays = [
        s for s in ro_info.cuda_graph_launches if ro.trace.step_of(s) is not None
    ]
    replayed = [w.name[:50] for w in ro.trace.gpu_work_of(replays[-1])]
    print(f"\ncudaGraphLaunch calls in the steps: {len(replays)}; one replays:")
    for name in replayed:
        print(f"  {name}")
    copies_in = [
        op for op in ro.trace.find("aten::_foreach_copy_") if ro.trace.step_of(op)
    ]
    copy_work = [
        w
        for op in copies_in
        for c in ro.trace.children(op)
        for w in ro.trace.gpu_work_of(c)
    ]
    copy_gpu_us = sum(w.dur for w in copy_work) / max(len(copies_in), 1)
    print(
        f"aten::_foreach_copy_ calls in the steps: {len(copies_in)},\n"
        f"with {len(copy_work)} "
        f"kernels and {copy_gpu_us:.1f} µs of GPU time per call"
    )
else:
    print("No GPU here: reduce-overhead needs CUDA graphs, so it was not run.")

# %%
# One ``cudaGraphLaunch`` starts the whole graph: the bias copy and the GEMM. Before it,
# ``aten::_foreach_copy_`` copies our three inputs into the graph's own buffers: a CUDA
# graph replays fixed memory addresses, and ``x``, ``w`` and ``b`` are plain tensors that
# could live anywhere next time (the weights of an ``nn.Module``, parameters, are kept in
# place instead). Those copies are GPU work too (their time is in the output above), which
# the eager step does not do; the GPU busy times per step above include it. Did the replay
# save CPU time here? From the pooled medians:

if ro is not None:
    print(
        f"reduce-overhead: {medians['reduce-overhead']:.1f} µs per step, "
        f"{medians['reduce-overhead'] / medians['eager']:.2f}x eager and "
        f"{medians['reduce-overhead'] / medians['compiled']:.2f}x the default mode."
    )

# %%
# For one GEMM the replay has little to replace: eager makes only a few launch calls per
# step (counted above), and the replay path adds the input copies and CUDA graph
# bookkeeping of its own. A replay pays when it replaces many launches.
#
# When does a replay pay?
# -----------------------
# A stack of sixteen small linear layers (64 features, bf16) makes at least one launch per
# layer in eager mode. Its weights are parameters, so the CUDA graph keeps them in place and
# copies only the input. The same three ways to run it:

if device == "cuda":
    stack = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(16)))
    stack = stack.to(device, torch.bfloat16).requires_grad_(False)
    layers_in = torch.randn(64, 64, device=device, dtype=torch.bfloat16)
    stack_runs, stack_cpu_us = {}, {}
    how = {"eager": False, "default": True, "reduce-overhead": "reduce-overhead"}
    for mode, compiled_as in how.items():
        model = stack if mode == "eager" else torch.compile(stack, mode=mode)
        for _ in range(3):
            model(layers_in)
        stack_runs[mode] = capture(
            lambda model=model: model(layers_in),
            name="linear-stack_"
            + run_name((16, 64), "bf16", warm=True, compiled=compiled_as),
            label="linear_stack",
            active=5,
            warmup_iters=3,
            out_dir=trace_dir(),
        )
    for mode, stack_run in stack_runs.items():
        summary = compare(stack_runs["eager"].trace, stack_run.trace).trace
        stack_cpu_us[mode] = summary.median_step_cpu_us
        print(
            f"{mode:16s} median {summary.median_step_cpu_us:7.1f} µs of CPU per step, "
            f"{summary.launches_per_step:g} launch calls per step"
        )
    print(
        f"For the stack, reduce-overhead costs "
        f"{stack_cpu_us['reduce-overhead'] / stack_cpu_us['eager']:.2f}x eager's CPU time per "
        f"step,\nagainst {medians['reduce-overhead'] / medians['eager']:.2f}x for the one GEMM."
    )
else:
    print("No GPU here: CUDA graphs need one, so this comparison is skipped.")

# %%
# On the H100 this site is built on, the sixteen-layer stack is where ``reduce-overhead``
# earns its name (see the output above): one replay in place of a launch per layer.
#
# The replayed step on a timeline:

if ro is not None:
    trace = ro.trace
    step = trace.steps[-1]
    marks = [
        highlight_span(next(s for s in replays if trace.step_of(s) is step), "replay")
    ]
    inputs = [op for op in copies_in if trace.step_of(op) is step]
    if inputs:
        marks.append(highlight_span(inputs[0], "input copies"))
    plot_timeline(
        trace, step=step.number, highlights=marks, title=f"{ro.name}: one step"
    )

# %%
# Beyond the post: ``torch.addmm`` by hand
# ----------------------------------------
# The post invites its readers to trace ``torch.addmm`` themselves. Called directly, in
# eager mode:

addmm = runs["torch.addmm"]
print_tree(addmm.trace, addmm.trace.steps[-1].span)
print()
gpu_work_of_step(addmm)
kernel, _ = gemm_of(addmm)
if kernel is not None:
    match = "the same" if kernel == gemms["compiled"][0] else "not the same"
    print(f"Its GEMM kernel is {match} as the compiled run's.")
print(
    f"torch.addmm: {medians['torch.addmm']:.1f} µs of CPU per step, "
    f"{medians['torch.addmm'] / medians['eager']:.2f}x eager and "
    f"{medians['torch.addmm'] / medians['compiled']:.2f}x the compiled step."
)

# %%
# On a GPU, the eager ``aten::addmm`` makes the same copy and launches the same GEMM as
# the compiled graph (see the output above), without Dynamo's guard check, the region and
# the wrappers around it: writing ``torch.addmm(b, x, w)`` yourself gets what Inductor
# chose here, for one operator's dispatch cost.
#
# The profiler table and the findings
# -----------------------------------
# The compiled run's table: the region rows carry CPU time of their own, and
# ``aten::addmm`` takes the place of the eager pair. On a GPU, the row marked † is our label
# as the profiler draws it on the GPU: the GPU time it spans, not work of its own.

profiler_table(compiled)

# %%
# :func:`~profiling_utils.rules.diagnose` on the compiled run, with the rules of the
# cheatsheet's torch.compile table and the GPU-lane rules about the copy:

compile_rules = [
    "compiled-region",
    "dynamo-cache-lookup",
    "aot-wrapper",
    "compiled-graph-cache-hit",
    "addmm-fusion",
    "hidden-memcpy",
    "bias-copy",
    "memset-before-gemm",
    "gemm-kernel",
]
findings_table(diagnose(compiled.trace, select=compile_rules), caption=compiled.name)

# %%
# The rule that needs a baseline, ``compile-cpu-tax``, runs in
# :func:`~profiling_utils.compare.compare` (its finding is printed with the step table
# above). On the ``reduce-overhead`` run, the CUDA graph rule:

if ro is not None:
    ro_findings = diagnose(ro.trace, select=["cuda-graph", "compiled-graph-cache-hit"])
else:
    ro_findings = []
    print("No GPU here, so there is no reduce-overhead run to diagnose.")
findings_table(ro_findings, caption="reduce-overhead")

# %%
# The traces
# ----------

trace_links(eager)

# %%

trace_links(compiled)

# %%

trace_links(ro) if ro is not None else print("No reduce-overhead trace without a GPU.")

# %%

trace_links(addmm)
