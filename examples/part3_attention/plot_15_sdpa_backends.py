"""
scaled_dot_product_attention: four backends and auto
====================================================

*Call* ``torch.nn.functional.scaled_dot_product_attention`` *with each of its backends
pinned, and with none. Which kernels run, how are they launched, how long do they take, and
which backend does PyTorch pick by itself?*

``scaled_dot_product_attention`` (SDPA) computes ``softmax(QKᵀ/√d)·V`` in one call and
dispatches it to one of several implementations: *math* (attention written out in ATen
operators), *memory-efficient* (a CUTLASS kernel), *flash* (FlashAttention-2) and *cuDNN*.
`Part 3 of the Hugging Face series <https://huggingface.co/blog/torch-attention-profile>`_
("Profiling in PyTorch (Part 3): Attention is all you profile") profiled each on an A100.
We do the same on the GPU this page was built on, read each backend's kernels and launch
calls from the trace, time them over 20 steps, set their FLOP rate against the datasheet,
and let the cheatsheet's attention rules read the traces.
"""

# %%
# One call per backend
# --------------------
# The problem of :doc:`the previous page <plot_14_attention_naive>`: batch 8, 16 heads,
# 1024 tokens, head size 64, bf16, causal (``is_causal=True``: no mask tensor is
# passed), under ``torch.no_grad()``. Each backend is pinned with
# ``torch.nn.attention.sdpa_kernel``; ``auto`` pins none. The flash, memory-efficient and
# cuDNN backends are CUDA kernels: on a machine without a GPU only ``math`` and ``auto``
# run here, on a smaller problem.

from collections import Counter

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

from profiling_utils import capture, diagnose, time_calls
from profiling_utils.claims import claim, which_is_greater, who_sets_the_pace
from profiling_utils.datasheet import datasheet_peak
from profiling_utils.measures import host_speed_ratio, kernel_launches, step_times
from profiling_utils.render import (
    findings_table,
    fold_lines,
    gpu_work_listing,
    plot_timeline,
    trace_dir,
    trace_links,
    value_table,
)
from profiling_utils.roofline import roofline
from profiling_utils.rules.attention import SDPA_BACKENDS, SDPA_OP
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
PINNED = {
    "math": SDPBackend.MATH,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "auto": None,
}
if device != "cuda":
    PINNED = {name: PINNED[name] for name in ("math", "auto")}
    print("No GPU here: flash, memory-efficient and cuDNN attention are skipped.")


def attention(backend):
    with torch.no_grad():
        if backend is None:
            return scaled_dot_product_attention(q, k, v, is_causal=True)
        with sdpa_kernel(backend):
            return scaled_dot_product_attention(q, k, v, is_causal=True)


runs = {
    name: capture(
        lambda backend=backend: attention(backend),
        name=f"attention_{batch}x{heads}x{length}x{head_dim}_bf16_sdpa-{name}",
        label="attention_fwd",
        active=20,
        warmup_iters=3,
        record_shapes=True,
        out_dir=trace_dir(),
    )
    for name, backend in PINNED.items()
}
on_gpu = runs["auto"].has_gpu
print(f"q, k, v: {list(q.shape)} bf16 on {device}; runs: {', '.join(runs)}")

# %%
# Which backend ran, and what ``auto`` picks
# ------------------------------------------
# ``aten::scaled_dot_product_attention`` records the backend it chose as the operator it
# calls. That operator, in each run's last step:


def backend_op(trace):
    """The op ``aten::scaled_dot_product_attention`` called in the trace's last step."""
    step = trace.steps[-1]
    sdpa = next(s for s in trace.by_name[SDPA_OP] if trace.step_of(s) is step)
    children = [c.name for c in trace.children(sdpa) if c.cat == "cpu_op"]
    return next((c for c in children if "attention" in c), "none")


ops = {name: backend_op(run.trace) for name, run in runs.items()}
for name, op in ops.items():
    print(f"{name:9s} → {op}")

# %%
# Without a pin, SDPA tries its backends in a priority order and takes the first that
# accepts the inputs (dtype, head size, mask, GPU). The order this build of PyTorch
# holds (``torch._C._get_sdp_priority_order``, a private function):

get_order = getattr(torch._C, "_get_sdp_priority_order", None)
order = [SDPBackend(i).name for i in get_order()] if get_order else []
print("priority:", " > ".join(order) if order else "not available in this build")
BACKEND_OPS = {
    "CUDNN_ATTENTION": "aten::_scaled_dot_product_cudnn_attention",
    "FLASH_ATTENTION": "aten::_scaled_dot_product_flash_attention",
    "EFFICIENT_ATTENTION": "aten::_scaled_dot_product_efficient_attention",
    "MATH": "aten::_scaled_dot_product_attention_math",
}
picked = SDPA_BACKENDS.get(ops["auto"], ops["auto"])
print(f"auto ran: {picked}")

if on_gpu:
    first = next((BACKEND_OPS[b] for b in order if b in BACKEND_OPS), None)
    claim(
        "auto ran the first backend of the priority order",
        ops["auto"] == first,
        auto=ops["auto"],
        otherwise="auto ran a backend after the first of the priority order "
        "(the first refused these inputs)",
    )
    pinned_same = [n for n in runs if n != "auto" and ops[n] == ops["auto"]]
    claim(
        "auto's backend is one of the pinned runs'",
        bool(pinned_same),
        same_as=", ".join(pinned_same),
    )
else:
    print("No GPU here: on the CPU auto runs the CPU's own flash kernel.")

# %%
# Kernels and launches
# --------------------
# The GPU work of one step (one call) of each run. The math backend's is long; it has its
# own section below.

if on_gpu:
    for name in ("efficient", "flash", "cudnn", "auto"):
        print(f"{name}:\n{gpu_work_listing(runs[name].trace.steps[-1])}")
else:
    print(
        "No GPU here: the backends' kernels are listed on the GPU build of this page."
    )

# %%
# One kernel per call for each fused backend (a memset of a few bytes may come with it):
# a claim below checks it over all the steps. The memory-efficient kernel is a
# CUTLASS kernel whose template targets the A100's generation (``sm80`` in its name: the
# instructions it is written for, not the machine code that ran, which cannot be sm_80
# code on a 9.x GPU; :doc:`Part 1's launch-planning page
# <../part1_matmul_add/plot_06_launch_planning>` explains), flash is
# ``pytorch_flash::flash_fwd_kernel``, FlashAttention-2 as vendored in PyTorch, and cuDNN's
# kernel name says which GPU generation it was generated for. How each kernel was
# launched, from the runtime or driver call the trace links to it, over all 20 steps:


def launch_apis(run):
    # A kernel in a step has its launch call in the trace: the step is the launch's.
    apis = Counter(k.api for k in kernel_launches(run.trace) if k.step is not None)
    steps = len(run.trace.steps)
    return ", ".join(f"{api} {count / steps:g}×" for api, count in apis.most_common())


def main_kernel(run):
    """The kernel with the most GPU time in the run, and how it was launched."""
    launched = [k for k in kernel_launches(run.trace) if k.step is not None]
    time = Counter()
    for launch in launched:
        time[launch.kernel.name] += launch.kernel.dur
    name = time.most_common(1)[0][0]
    return next(k for k in launched if k.kernel.name == name)


if on_gpu:
    for name, run in runs.items():
        print(fold_lines(f"{name:9s} per step: {launch_apis(run)}"))
    mains = {name: main_kernel(run) for name, run in runs.items()}
    claim(
        "the cuDNN kernel is launched through the driver (cuLaunchKernelEx)",
        mains["cudnn"].api == "cuLaunchKernelEx",
        api=mains["cudnn"].api,
        otherwise=f"the cuDNN kernel is launched with {mains['cudnn'].api}",
    )
    per_step = {
        name: {
            sum(1 for w in s.gpu_work if w.cat == "kernel")
            for s in runs[name].trace.steps
        }
        for name in ("efficient", "flash", "cudnn")
    }
    claim(
        "each fused backend runs one kernel per call",
        all(counts == {1} for counts in per_step.values()),
        otherwise="a fused backend runs more than one kernel per call here",
        **{name: ", ".join(map(str, sorted(c))) for name, c in per_step.items()},
    )
    claim(
        "the flash and memory-efficient kernels are launched with cudaLaunchKernel",
        mains["flash"].api == mains["efficient"].api == "cudaLaunchKernel",
        flash=mains["flash"].api,
        efficient=mains["efficient"].api,
    )
else:
    print("No GPU here: no kernel launches to read.")

# %%
# ``cudaLaunchKernel`` is the CUDA runtime's plain launch. ``cuLaunchKernelEx`` is the
# driver's extended launch, which takes launch attributes such as a thread-block cluster
# size (Hopper's ``cga`` in cuDNN's kernel name); ``cudaLaunchKernelExC`` is the runtime's
# version of it, which cuBLAS uses for the math backend's GEMMs.
#
# In the timeline, the GPU work of one call of the math backend and of ``auto`` (on a
# machine without a GPU, the step's CPU lane instead); each picture has its own time axis.
# The math backend first:

math_trace = runs["math"].trace
plot_timeline(
    math_trace,
    step=math_trace.steps[-1].number,
    around="gpu",
    title=f"math, ProfilerStep#{math_trace.steps[-1].number}",
)

# %%
# Then ``auto``:

auto_trace = runs["auto"].trace
plot_timeline(
    auto_trace,
    step=auto_trace.steps[-1].number,
    around="gpu",
    title=f"auto, ProfilerStep#{auto_trace.steps[-1].number}",
)

# %%
# Time per call
# -------------
# One step is one call, so a step's GPU time (the time at least one of its kernels ran) is
# the GPU time of one call, and the duration of ``aten::scaled_dot_product_attention`` is
# the CPU time of one call. The table below gives their medians over the 20 steps, with
# the interquartile range.


def sdpa_cpu_us(run):
    trace = run.trace
    return Distribution.of(
        [s.dur for s in trace.by_name[SDPA_OP] if trace.step_of(s) is not None], "µs"
    )


cpu = {name: sdpa_cpu_us(run) for name, run in runs.items()}
gpu = {
    name: Distribution.of([t.gpu_busy_us for t in step_times(run.trace)], "µs")
    for name, run in runs.items()
}

# %%
# The work is counted as the roofline of this library counts it
# (:mod:`profiling_utils.roofline`): ``4·B·H·L²·D`` FLOPs for ``QKᵀ`` and ``PV``, the
# softmax not counted, halved for a causal mask, which leaves about half of the products
# out. Its rate is set against the datasheet's dense bf16 tensor-core peak (no sparsity),
# the inputs' dtype. Not for the math backend: it computes the whole ``L×L`` products,
# masked entries too, in fp32 on the CUDA cores (its operators, below), so neither the
# causal count nor the bf16 peak applies to it, and its row leaves the rate out:

flops = 4 * batch * heads * length * length * head_dim // 2
device_name = runs["auto"].trace.devices[0].name if on_gpu else None
peak = datasheet_peak(device_name, "bf16") if device_name else None
print(f"{flops / 1e9:.2f} GFLOP per call (causal)")
print(
    fold_lines(f"peak: {peak.describe()}")
    if peak
    else "no datasheet peak for this device"
)
rows = []
for name in runs:
    tflops = flops / gpu[name].median / 1e6 if on_gpu and name != "math" else None
    share = f"{tflops / peak.value:.0%}" if peak and tflops else None
    rows.append([name, cpu[name], gpu[name], tflops, share])
value_table(
    ["backend", "CPU µs/call", "GPU µs/call", "TFLOP/s", "of bf16 peak"],
    rows,
    caption=f"{runs['auto'].trace.devices[0].describe() if on_gpu else 'CPU'}",
)

# %%
# The roofline counts the same FLOPs from the shapes each op recorded (with
# ``is_causal``): checked for the fused backends' ops.

if on_gpu:
    counted = {
        name: {
            e.flops for e in roofline(runs[name].trace).entries if e.kind == "attention"
        }
        for name in ("efficient", "flash", "cudnn")
    }
    print({name: sorted(f / 1e9 for f in c) for name, c in counted.items()}, "GFLOP")
    claim(
        "the roofline counts the page's FLOPs for each fused backend's op",
        all(c == {flops} for c in counted.values()),
        flops=flops,
    )
    for name in (name for name in runs if name != "math"):
        rate = flops / gpu[name].median / 1e6
        claim(
            f"{name} stays below the datasheet's bf16 peak",
            peak is None or rate < peak.value,
            tflops=rate,
        )
else:
    print("No GPU here: FLOP rates are measured on the GPU build of this page.")

# %%
# Which backend is quickest here?
# -------------------------------
# The post's A100 numbers (CPU / GPU µs per call): memory-efficient 117 / 277.9, flash
# 138 / 146.8, cuDNN 214 / 186.3; flash was the quickest on the GPU there. On this GPU,
# each comparison counts only when the two middle halves of the steps do not overlap
# (:func:`~profiling_utils.stats.clearly_greater`, which
# :func:`~profiling_utils.claims.which_is_greater` words the claims by):

if on_gpu:
    ranked = sorted((n for n in runs if n != "auto"), key=lambda n: gpu[n].median)
    print("pinned backends by median GPU time per call:", " < ".join(ranked))
    claim(
        "the math backend takes at least 5x the GPU time of the slowest fused backend",
        gpu["math"].median
        >= 5 * max(gpu[n].median for n in ("efficient", "flash", "cudnn")),
        math=gpu["math"],
    )
    which_is_greater(
        "flash is clearly quicker on the GPU than memory-efficient",
        "flash is clearly slower on the GPU than memory-efficient",
        "flash and memory-efficient take the same GPU time, within the spread",
        efficient=gpu["efficient"],
        flash=gpu["flash"],
    )
    which_is_greater(
        "cuDNN is clearly quicker on the GPU than flash (the post's A100 had it the "
        "other way round)",
        "cuDNN is clearly slower on the GPU than flash, as on the post's A100",
        "cuDNN and flash take the same GPU time, within the spread",
        flash=gpu["flash"],
        cudnn=gpu["cudnn"],
    )
    which_is_greater(
        "cuDNN's call costs the CPU clearly more than flash's, as on the post's A100",
        "cuDNN's call costs the CPU clearly less than flash's, the other way round from "
        "the post's A100",
        "cuDNN's and flash's calls cost the CPU alike, within the spread",
        host_speed=host_speed_ratio(runs["cudnn"].trace, runs["flash"].trace),
        cudnn=cpu["cudnn"],
        flash=cpu["flash"],
    )
else:
    print("No GPU here: the backends are ranked on the GPU build of this page.")

# %%
# A CPU time set against another recording's counts only where the host ran at one speed
# in both: recorded one after the other on a shared machine, every call of one recording
# can take longer, whatever the backend. The CPU claims here first set the calls both
# recordings make that hold no call of their own (``aten::empty``, the launch calls...)
# against each other (:func:`~profiling_utils.measures.host_speed_ratio`), and where
# those differ by more than a quarter, say so instead of comparing.
#
# The CPU time of a call is the dispatcher, the backend's checks and the launch. Where a
# call costs the CPU more than its kernel costs the GPU, a model made of such calls keeps
# the GPU waiting, unless other calls have queued enough work ahead of it. Per call, for
# the fused backends:

if on_gpu:
    for name in ("efficient", "flash", "cudnn"):
        if clearly_greater(cpu[name], gpu[name]):
            verdict = "the CPU takes longer"
        elif clearly_greater(gpu[name], cpu[name]):
            verdict = "the GPU takes longer"
        else:
            verdict = "alike, within their spread"
        print(
            f"{name:9s} CPU {cpu[name].median:6.1f} µs, GPU {gpu[name].median:6.1f} µs "
            f"per call: {verdict}"
        )
    which_is_greater(
        "the pinned cuDNN call costs the CPU more than its kernel costs the GPU",
        "the pinned cuDNN call costs the CPU less than its kernel costs the GPU",
        "the pinned cuDNN call costs the CPU about what its kernel costs the GPU, within "
        "the spread",
        cpu=cpu["cudnn"],
        gpu=gpu["cudnn"],
    )
    which_is_greater(
        "auto's call, which runs the same cuDNN operators and kernel, costs the CPU "
        "clearly less than the pinned one",
        "auto's call, which runs the same cuDNN operators and kernel, costs the CPU "
        "clearly more than the pinned one",
        "auto's call, which runs the same cuDNN operators and kernel, costs the CPU about "
        "what the pinned one does, within the spread",
        host_speed=host_speed_ratio(runs["cudnn"].trace, runs["auto"].trace),
        pinned=cpu["cudnn"],
        auto=cpu["auto"],
    )

# %%
# These CPU times were taken under the profiler (with ``record_shapes``, which adds to
# every operator it records). They are the time of ``aten::scaled_dot_product_attention``
# alone; the pinned runs' ``sdpa_kernel`` context, entered around every call, adds to the
# step around it, not to these. Timed without the profiler
# (:func:`~profiling_utils.capture.time_calls`: thirty batches of twenty back-to-back
# calls, each batch between two CUDA events, so a call the CPU cannot issue fast enough
# is timed at the CPU's pace; the backends' batches in turn, so that the machine's speed
# changing meanwhile falls on all of them), each backend as pinned above, end to end and
# the CPU's part of it:

timed = time_calls(
    {
        name: lambda backend=backend: attention(backend)
        for name, backend in PINNED.items()
    }
)
for name, times in timed.items():
    print(f"{name:9s} per call, unprofiled: end to end {times.end_to_end}")
    if on_gpu:
        ratio = times.end_to_end.median / gpu[name].median
        print(f"{'':9s} {ratio:.2f}x its profiled GPU time")
    print(f"{'':9s} the CPU's part {times.issue}")
if on_gpu:
    which_is_greater(
        "without the profiler, a cuDNN call takes longer than a flash one",
        "without the profiler, a cuDNN call takes less time than a flash one",
        "without the profiler, cuDNN and flash calls take the same time, within the spread",
        cudnn=timed["cudnn"].end_to_end,
        flash=timed["flash"].end_to_end,
    )
    who_sets_the_pace("a pinned cuDNN call", timed["cudnn"])
    which_is_greater(
        "without the profiler, the pinned cuDNN call costs the CPU more than auto's",
        "without the profiler, the pinned cuDNN call costs the CPU less than auto's",
        "without the profiler, the pinned cuDNN call and auto's cost the CPU alike",
        pinned=timed["cudnn"].issue,
        auto=timed["auto"].issue,
    )
    which_is_greater(
        "without the profiler, the pinned cuDNN call takes longer end to end than auto's",
        "without the profiler, the pinned cuDNN call takes less time end to end than auto's",
        "without the profiler, the pinned cuDNN call and auto's take the same time end to "
        "end, within the spread",
        pinned=timed["cudnn"].end_to_end,
        auto=timed["auto"].end_to_end,
    )

# %%
# The CPU's part above is the whole call, ``sdpa_kernel``'s context included for the
# pinned backends; the table's CPU column is the operator alone, under the profiler. For
# ``auto``, which enters no context, the two cover the same work, and their difference is
# what the profiler added to it, with whatever the host's speed changed between the
# recording and the timing (a shared machine's speed moves from minute to minute). The
# claims above say how a pinned cuDNN call
# stands once the profiler is off. Where the GPU sets the pace, the CPU's time hides
# behind the kernel's, and a CPU saving changes nothing. Where the CPU's time is most of
# the call, the two are close, and whether a CPU saving shows depends on how close.
# ``auto`` runs the same kernel without the context: the last two claims say whether its
# call costs the CPU less, and whether that shows end to end.
#
# What the profiler does not see
# ------------------------------
# A trace holds a kernel's launch configuration as CUPTI reports it: grid, block,
# registers per thread and shared memory per block (static plus dynamic). Beside them it
# holds an *estimated achieved occupancy*, the share of the SM's warp slots the
# configuration allows. CUPTI does not report that one: Kineto, the library that writes
# the trace, computes it from the configuration with CUDA's occupancy calculator. It is a
# calculation, not a measurement. For each run's longest kernel:

if on_gpu:
    for name, main in mains.items():
        f = main.footprint
        smem = (
            f"{f.shared_memory_bytes / 1024:.0f} KiB" if f.shared_memory_bytes else "—"
        )
        print(
            fold_lines(
                f"{name:9s} occupancy {f.occupancy_pct}%, {f.registers_per_thread} "
                f"registers/thread, {smem} shared, grid {f.grid}, block {f.block} "
                f"({main.api})\n    {main.kernel.name}"
            )
        )
    cudnn_occupancy = mains["cudnn"].footprint.occupancy_pct
    claim(
        "the trace reports no occupancy (0% or none) for the cuDNN kernel, as on the "
        "post's A100",
        not cudnn_occupancy,
        occupancy=cudnn_occupancy,
        otherwise=f"the trace reports {cudnn_occupancy}% occupancy for the cuDNN kernel",
    )
else:
    print("No GPU here: no kernel launch configurations to read.")

# %%
# How Kineto computes it (``kernelOccupancy`` in libkineto's
# ``CudaDeviceProperties.cpp``): the calculator finds how many blocks fit on one SM, from
# the registers per thread, the shared memory and the block size; Kineto caps that at
# the grid's blocks per SM and divides those blocks' threads by the most an SM holds. So a
# grid of fewer blocks than the GPU has SMs shows a small share, which can round to 0%.
#
# The calculator is called with the default shared-memory limit and no allowance for
# more. A block may use at most 48 KiB of shared memory unless its kernel opts in to
# more, and GEMM and attention kernels with large tiles often do. The calculation
# ignores the opt-in, finds that no block of such a kernel fits, and the trace says 0%,
# however many blocks were in fact resident. The kernels of this page's runs on either
# side of the 48 KiB line (at or under it, only those with at least one block per SM,
# which the cap at the grid cannot bring down to 0%):

if on_gpu:
    DEFAULT_SHARED = 48 * 1024  # bytes per block a kernel may use without opting in
    above, within = {}, {}
    for run in runs.values():
        for launch in kernel_launches(run.trace):
            f = launch.footprint
            if f.shared_memory_bytes is None:
                continue
            if f.shared_memory_bytes > DEFAULT_SHARED:
                above.setdefault(launch.kernel.name, set()).add(f.occupancy_pct)
            elif (f.blocks_per_sm or 0) >= 1:
                within.setdefault(launch.kernel.name, set()).add(f.occupancy_pct)
    for label, group in (
        ("above 48 KiB per block", above),
        ("at or under 48 KiB, at least one block per SM", within),
    ):
        values = set().union(*group.values())
        shown = sorted(v for v in values if v is not None)
        shown = [f"{v:g}%" for v in shown] + (["none"] * (None in values))
        print(
            fold_lines(
                f"{label}: {len(group)} kernel(s), occupancy {', '.join(shown) or '—'}"
            )
        )
    claim(
        "every kernel of these runs with more than 48 KiB of shared memory per block "
        "reports 0% or no occupancy, and every one at or under 48 KiB with at least one "
        "block per SM reports a value above 0%",
        not any(v for vs in above.values() for v in vs)
        and all(v for vs in within.values() for v in vs),
        above=len(above),
        within=len(within),
        otherwise="on this run, 48 KiB of shared memory per block does not separate the "
        "kernels that report an occupancy from those that report none",
    )
    sms = runs["cudnn"].trace.devices[0].compute_units
    grid = mains["cudnn"].footprint.grid
    claim(
        "cuDNN launches one block per SM (a persistent kernel)",
        grid is not None and grid[0] == sms and grid[1:] == (1, 1),
        grid=grid,
        sms=sms,
        otherwise=f"cuDNN's grid {grid} is not one block per SM",
    )

# %%
# For a kernel above the line, then, 0% says nothing about how many of its blocks ran at
# once; the shared memory in cuDNN's line of the first list shows whether its kernel is
# one. The post's A100 also reported no occupancy for cuDNN. The cuDNN kernel's grid
# tells more: where it is one block per SM (the last claim above), each block loops over tiles (a
# *persistent* kernel), and an occupancy figure would say little anyway.
#
# Below the line the estimate is the calculator's, and flash's should follow from its
# registers (the post found 13% on its A100). An SM of an A100 or H100 holds 65,536
# registers and at most 64 warps; a block of ``block`` threads using ``r`` registers
# each fits ``65,536 // (r × block)`` times, and those blocks' warps over 64 is the
# estimate; the claim below compares it with the trace's:

if on_gpu:
    f = mains["flash"].footprint
    threads = f.block[0] * f.block[1] * f.block[2]
    blocks = 65536 // (max(f.registers_per_thread, 1) * threads)
    estimate = 100 * blocks * threads / 32 / 64
    print(
        f"flash: {f.registers_per_thread} registers × {threads} threads → {blocks} blocks "
        f"per SM, {blocks * threads // 32} warps of 64: {estimate:.1f}%; "
        f"reported {f.occupancy_pct}%"
    )
    claim(
        "flash's reported occupancy is what its registers allow (within 2 points)",
        f.occupancy_pct is not None and abs(estimate - f.occupancy_pct) <= 2,
        computed=estimate,
        reported=f.occupancy_pct,
        otherwise="flash's reported occupancy is not what its registers alone allow",
    )

# %%
# A high occupancy is not what these kernels aim for: keeping tiles in registers and
# shared memory is, and what they achieve shows in the FLOP rate above, not here.
#
# The math backend, read from its trace
# -------------------------------------
# The math backend writes attention out in ATen operators. One of its steps:

math_run = runs["math"]
print(gpu_work_listing(math_run.trace.steps[-1]))

# %%
# Twenty GPU activities for one call. The operators directly under
# ``aten::_scaled_dot_product_attention_math`` tell why:

math_op = next(
    s
    for s in math_run.trace.by_name.get("aten::_scaled_dot_product_attention_math", [])
    if math_run.trace.step_of(s) is math_run.trace.steps[-1]
)
inner = [c for c in math_run.trace.children(math_op) if c.cat == "cpu_op"]
print(
    fold_lines(
        ", ".join(f"{n} {c}×" for n, c in Counter(c.name for c in inner).items())
    )
)


def under(trace, op):
    """Every op nested in ``op``, at any depth."""
    found, todo = [], [op]
    while todo:
        for child in trace.children(todo.pop()):
            if child.cat == "cpu_op":
                found.append(child)
                todo.append(child)
    return found


nested = under(math_run.trace, math_op)
gemm_types = {
    (s.args.get("Input type") or [None])[0] for s in nested if s.name == "aten::bmm"
}
names = {s.name for s in nested}
print("GEMM input types:", gemm_types)

# %%
# - ``aten::to``: ``q``, ``k`` and ``v`` copied from bf16 to fp32 first. With bf16 or
#   fp16 inputs, the math backend computes in fp32 unless
#   ``torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`` is set (it is not by
#   default; the run prints the setting below). Two more cast back to bf16: the output,
#   and the whole [batch, heads, seq, seq] matrix of attention weights, which the math
#   backend returns beside the output and ``scaled_dot_product_attention`` drops, so that
#   cast's work is thrown away. (An ``aten::to`` of a 0-dim tensor may show too: it has
#   nothing to copy.)
# - ``aten::ones`` and ``aten::tril``: the causal mask, built on every call (the
#   hand-written attention of :doc:`the previous page <plot_14_attention_naive>` built it
#   once), then turned into an
#   additive mask of ``-inf`` (``aten::where``) and added to the scores.
# - Two ``aten::matmul``, whose ``aten::bmm`` run on fp32 tensors: fp32 GEMM kernels, on
#   CUDA cores rather than the bf16 tensor cores.
# - ``aten::_safe_softmax``: a softmax that returns 0 rather than NaN for a row masked out
#   entirely (``isneginf``, ``all`` and ``where`` over the whole score tensor).

allowed = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
print(f"allow_fp16_bf16_reduction_math_sdp: {allowed}")
upcasts = [
    s
    for s in nested
    if s.name == "aten::copy_"
    and (s.args.get("Input type") or [])[:2] == ["float", "c10::BFloat16"]
    and (s.args.get("Input Dims") or [None])[0] == list(q.shape)
]
claim(
    "the math backend copies q, k and v from bf16 to fp32",
    len(upcasts) == 3,
    copies=len(upcasts),
)
weights_shape = [*q.shape[:-1], k.shape[-2]]
weight_casts = [
    s
    for s in nested
    if s.name == "aten::to"
    and (s.args.get("Input type") or [None])[0] == "float"
    and (s.args.get("Input Dims") or [None])[0] == weights_shape
]
claim(
    f"the math backend casts a {weights_shape} fp32 tensor, the attention weights, "
    "to another dtype",
    len(weight_casts) == 1,
    casts=len(weight_casts),
)
claim(
    "the math backend's GEMMs (aten::bmm) run on fp32 inputs",
    gemm_types == {"float"},
    types=", ".join(sorted(map(str, gemm_types))),
)
claim(
    "the math backend builds the causal mask inside the call (aten::ones, aten::tril)",
    {"aten::ones", "aten::tril"} <= names,
)
claim(
    "the math backend's softmax is aten::_safe_softmax",
    "aten::_safe_softmax" in names,
    otherwise="the math backend's softmax is not aten::_safe_softmax in this build",
)
if on_gpu:
    gemm_kernels = sorted(
        {
            k.kernel.name
            for k in kernel_launches(math_run.trace)
            if k.op is not None and k.op.name == "aten::bmm"
        }
    )
    print(fold_lines("\n".join(gemm_kernels)))
    claim(
        "the fp32 GEMM kernels' names say ffma (fp32 multiply-adds on CUDA cores)",
        all("ffma" in name for name in gemm_kernels),
        otherwise="the fp32 GEMM kernels' names do not say ffma on this GPU",
    )

# %%
# Where the math backend's GPU time goes, in the call shown above: the GPU work each of
# its operators launched (the operators listed above, each with what it calls):

if on_gpu:
    gpu_by_op = Counter()
    for launched in kernel_launches(math_run.trace):
        if launched.launch is None or launched.launch.start >= math_op.end:
            continue
        outer = next(
            (
                a
                for a in math_run.trace.ancestors(launched.launch)
                if a.parent == math_op.id
            ),
            None,
        )
        if outer is not None:
            gpu_by_op[outer.name] += launched.kernel.dur
    call_gpu_us = sum(gpu_by_op.values())
    for name, us in gpu_by_op.most_common(6):
        print(f"{name:24s} {us:8.1f} µs  {us / call_gpu_us:4.0%}")
    gemm_share = gpu_by_op["aten::matmul"] / call_gpu_us
    claim(
        "the two GEMMs take less than half of the math backend's kernel time: the passes "
        "over the whole fp32 score matrix (mask, softmax, casts) take most of the rest",
        gemm_share < 0.5,
        otherwise="the two GEMMs take at least half of the math backend's kernel time",
        gemm_share=f"{gemm_share:.0%}",
    )

# %%
# The post found the math backend 3.7 times slower than its own in-place attention on the
# A100 (7.239 ms against 1.955 ms); here compare the table above with the in-place step
# of :doc:`the previous page <plot_14_attention_naive>`. The math backend's GEMMs also
# compute the whole ``L × L`` score matrix, the masked half included: the roofline
# counts their FLOPs from their shapes,

if on_gpu:
    gemm_flops = [
        e.flops for e in roofline(math_run.trace).entries if e.name == "aten::bmm"
    ]
    per_call = sum(gemm_flops) / len(math_run.trace.steps)
    print(
        f"math GEMMs: {per_call / 1e9:.2f} GFLOP per call; causal count {flops / 1e9:.2f}"
    )
    claim(
        "the math backend's GEMMs do twice the causal FLOP count",
        per_call == 2 * flops,
        gemm_flops=per_call,
        causal_flops=flops,
    )

# %%
# twice the causal count that the table's FLOP rate is based on, and in fp32.
#
# What the cheatsheet says
# ------------------------
# :func:`~profiling_utils.diagnose` applies the cheatsheet's rules to each trace. For the
# math backend:

math_findings = diagnose(math_run.trace)
findings_table(math_findings, caption=math_run.name)

# %%
# Where the table holds an ``elementwise-chain`` finding, read its saving with care. The
# trace does not say which tensor a kernel reads, so the rule takes a run of elementwise
# kernels over one shape to pass one tensor along. What its chain holds here:

chain_found = next((f for f in math_findings if f.rule == "elementwise-chain"), None)
chain_ops = chain_found.evidence["chains"][0]["ops"] if chain_found else []
scale_muls = [
    s.args.get("Input Dims")
    for s in nested
    if s.name == "aten::mul"
    and (s.args.get("Input Dims") or [None])[0] == list(q.shape)
]
one_tensor = bool(scale_muls) and all(sum(1 for d in m if d) == 1 for m in scale_muls)
if (
    chain_ops == ["aten::copy_"] * 3 + ["aten::mul"]
    and len(upcasts) == 3
    and one_tensor
):
    counted = chain_found.evidence["chains"][0]["saved_bytes_per_chain"]
    round_trip = 2 * q.numel() * torch.finfo(torch.float32).bits // 8
    print(
        fold_lines(
            f"chain: {' → '.join(chain_ops)}; the mul's recorded dims: {scale_muls[0]}\n"
            "The three copies are the upcasts of q, k and v, three different tensors, and "
            "the mul reads one tensor and a scalar, so at most one copy feeds it. Fusing "
            "the four kernels saves at most that copy's round trip through memory, "
            f"{byte_size(round_trip)}, of the {byte_size(counted)} the rule counts per "
            "chain.",
            max_lines=6,
        )
    )
elif chain_ops:
    print(fold_lines(f"chain: {' → '.join(chain_ops)}"))
else:
    print("No elementwise-chain finding on this run.")

# %%
# ``attention-backend`` names the backend from the operator under
# ``aten::scaled_dot_product_attention``. ``attention-math-fp32`` warns because the math
# backend's GEMMs take fp32 inputs, though the call's own inputs are bf16: the upcast
# above. ``mask-rebuilt`` sees the ``[L, L]`` triangle built in every step. For ``auto``:

auto_findings = diagnose(runs["auto"].trace)
findings_table(auto_findings, caption=runs["auto"].name)

# %%
# A ``dead-window`` row, where the table has one, is about the time between the step's
# label and the call in one step, not about attention (:doc:`page 02
# <../part1_matmul_add/plot_02_cold_start>` reads that rule on a process's first call;
# here it can fire on the first recorded step, after the warm-up calls). A ``gpu-idle``
# row, where the table has one, says where the GPU waits in the median step: with one
# attention call per step, the host's work before the call (its dispatch, the step's own
# bookkeeping) counts in the step beside the kernels. Each run's backend as the rule
# names it:

expected = {
    "math": "math",
    "efficient": "memory-efficient",
    "flash": "flash",
    "cudnn": "cuDNN",
}
named = {}
for name, run in runs.items():
    found = {
        f.rule: f for f in (math_findings if name == "math" else diagnose(run.trace))
    }
    backend = found.get("attention-backend")
    named[name] = list(backend.evidence["backends"]) if backend else []
    rules = sorted(r for r in found if r.startswith(("attention", "mask")))
    print(
        fold_lines(
            f"{name:9s} backend: {named[name] or 'none'}; attention rules: {rules}"
        )
    )
    if on_gpu and name != "auto":
        claim(
            f"attention-backend names {expected[name]} for the {name} run",
            named[name] == [expected[name]],
        )
    if on_gpu and name == "math":
        claim(
            "attention-math-fp32 and mask-rebuilt fire on the math run",
            {"attention-math-fp32", "mask-rebuilt"} <= set(found),
        )
    elif on_gpu:
        claim(
            f"attention-math-fp32 and mask-rebuilt stay silent on the {name} run",
            not {"attention-math-fp32", "mask-rebuilt"} & set(found),
        )
if on_gpu:
    claim(
        "attention-backend names for auto the backend auto ran",
        named["auto"] == [SDPA_BACKENDS.get(ops["auto"])],
        auto=", ".join(named["auto"]),
    )
else:
    print("No GPU here: the attention rules read GPU work, and stay silent.")

# %%
# The post also loads a FlashAttention-2 build from the Hugging Face Hub with the
# ``kernels`` library; this site builds without network access, so that variant is left
# out. The traces, to open in Perfetto:

trace_links(runs["auto"])

# %%

trace_links(runs["math"])
