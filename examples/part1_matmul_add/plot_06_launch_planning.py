"""
Launch planning: which kernels ask before they launch?
======================================================

*In the post's A100 trace, the matrix product's launch comes after an occupancy query and the
bias add's launch does not. On this GPU, which kernels are planned before they are launched,
through which launch call, and when does the planning happen?*

A kernel launch names a grid of thread blocks, and each block needs registers and shared
memory on a streaming multiprocessor (SM). An elementwise kernel needs little of either, so
PyTorch launches it with a fixed shape and nothing to work out. A GEMM library has many
kernels for one product and sizes each launch to the GPU, so it may call the CUDA runtime or
driver first: to look up the kernel's function handle (``cudaGetFuncBySymbol``), to read or
set its attributes (``cudaFuncGetAttributes``, ``cudaFuncSetAttribute``), to ask how many of
its blocks one SM can hold (``cudaOccupancy*``). This page calls those queries, attribute
settings and function lookups made before a launch its *planning calls*; they sit in the
trace before the launch, inside the operator that makes it (not always just before: in a
process's first GEMM, allocations and module loading can come in between).

In its 64×64 trace on an A100, the
`Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ found
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` before the GEMM's launch. We look for
planning calls on this machine, in warm steps and in a process's very first GEMM, and read
what the kernels' names say, down to whether an fp32 GEMM ran on the CUDA cores or on the
tensor cores.
"""

# %%
# The runs
# --------
# The post's ``matmul_add``, warmed up (three calls before the profiler starts) and recorded
# with its schedule, in bf16 and in fp32, at the post's two sizes (only the small one on a
# machine without a GPU, where there are no kernels to inspect but the runs still work).

import collections
import math
import re
import statistics

import torch

from profiling_utils import capture, diagnose, load_trace, run_name
from profiling_utils.claims import at_least_times, claim
from profiling_utils.fresh import run_in_fresh_process
from profiling_utils.kernels import fp32_math, fp32_math_word
from profiling_utils.measures import kernel_launches
from profiling_utils.render import (
    Highlight,
    findings_table,
    plot_timeline,
    trace_dir,
    trace_links,
    value_table,
)
from profiling_utils.tables import cut

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
sizes = (64, 4096) if device == "cuda" else (64,)
dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
GEMMS = ("aten::mm", "aten::bmm")


def profile(size, dtype_name):
    x, w, b = (
        torch.randn(size, size, device=device, dtype=dtypes[dtype_name])
        for _ in range(3)
    )
    return capture(
        lambda: torch.add(torch.matmul(x, w), b),
        name=run_name(size, dtype_name, warm=True),
        label="matmul_add",
        warmup_iters=3,
        out_dir=trace_dir(),
    )


runs = [profile(size, dtype_name) for size in sizes for dtype_name in dtypes]
print(
    f"{len(runs)} runs on {torch.cuda.get_device_name() if device == 'cuda' else 'a CPU'}"
)

# %%
# How each kernel was launched
# ----------------------------
# :func:`~profiling_utils.measures.kernel_launches` follows every kernel back to its launch
# call and to the operator that made it. Its planning calls are the occupancy queries,
# attribute reads and settings, and function lookups made inside that operator since its
# previous launch (the calls named in
# :data:`~profiling_utils.measures.PLANNING_CALL_PREFIXES`). The kernels of
# each run's last recorded step (every run warm and eager; kernel names cut at 24
# characters, enough for the architecture they name):


def last_step_launches(run):
    last = run.trace.steps[-1].number
    return [k for k in kernel_launches(run.trace) if k.step == last]


rows = []
for run in runs:
    for launch in last_step_launches(run):
        planning = ", ".join(call.name for call in launch.planning_calls) or "none"
        op = launch.op.name if launch.op else "?"
        size_and_dtype = run.name.removesuffix("_warm_eager").replace("_", " ")
        kernel = cut(launch.kernel.name.removeprefix("void "), 24)
        rows.append([size_and_dtype, op, launch.api, planning, kernel])
if device == "cpu":
    print("No GPU here: the operators compute on the CPU and launch no kernel.")
columns = ["run", "operator", "launched with", "planning calls", "kernel"]
value_table(columns, rows) if rows else None

# %%
# The add is one of PyTorch's own elementwise kernels, launched with the classic
# ``cudaLaunchKernel`` and nothing before it, as on the post's A100. The GEMMs come from
# cuBLAS or cuBLASLt, and which kernel, launch call and planning they get depends on the
# GPU, the dtype, the size and the library version: the table is this machine's answer.
# The extended launch calls (``cudaLaunchKernelExC`` in the runtime, ``cuLaunchKernelEx``
# in the driver) take launch attributes that the classic call cannot, such as the
# thread-block clusters that Hopper GPUs added.

if device == "cuda":
    adds = [
        k
        for run in runs
        for k in last_step_launches(run)
        if k.op and k.op.name == "aten::add"
    ]
    claim(
        "every add kernel is launched with cudaLaunchKernel and no planning call",
        all(k.api == "cudaLaunchKernel" and not k.planning_calls for k in adds),
        adds=len(adds),
    )
    occupancy = sum(len(run.trace.find(prefix="cudaOccupancy")) for run in runs)
    claim(
        "no recorded warm step makes an occupancy query",
        occupancy == 0,
        otherwise=f"recorded warm steps make {occupancy} occupancy queries",
        queries=occupancy,
    )

# %%
# What a kernel's name says
# -------------------------
# cuBLAS names a kernel after its template, and the name often carries an architecture:
# ``sm80_xmma_…`` is a kernel family written for the instructions that the A100's
# generation (compute capability 8.0) introduced, ``nvjet_sm90_…`` one written for
# Hopper's. The name does not say which machine code ran. Compiled GPU code (SASS) built
# for compute capability 8.x does not run on a 9.x GPU, so on a newer GPU such a kernel
# runs from code the library shipped for that GPU under the same name, or from PTX that
# the driver compiled when it loaded the library. The trace records only the name. The
# GEMM kernels' names here, against this GPU:

for device_info in runs[0].trace.devices:
    major, minor = device_info.compute_capability or ("?", "?")
    print(f"{device_info.name}: compute capability {major}.{minor}")
for run in runs:
    for launch in last_step_launches(run):
        if launch.op and launch.op.name in GEMMS:
            named = re.search(r"sm_?(\d+)", launch.kernel.name)
            arch = f"names sm{named.group(1)}" if named else "names no architecture"
            print(f"{run.name}: GEMM kernel {arch}")

# %%
# How a GEMM computes on fp32 data
# --------------------------------
# The name also says how a GEMM computes on fp32 data: ``ffma`` (a fused fp32 multiply-add)
# or ``sgemm`` in it means the CUDA cores; ``tf32`` (or CUTLASS's ``s1688gemm``) means the
# tensor cores in TF32, which keeps fp32's range but rounds its inputs to a 10-bit mantissa.
# PyTorch runs fp32 matmuls in full fp32 unless told otherwise:
# ``torch.set_float32_matmul_precision("high")`` allows TF32.
# :func:`~profiling_utils.kernels.fp32_math` reads which from the name, and
# :func:`~profiling_utils.kernels.fp32_math_word` gives the part it read (in parentheses below:
# cuBLAS writes it far into a name the table cuts short). The largest fp32 run, and the
# same product recorded again with TF32 allowed (each run's median GEMM kernel over its
# recorded steps, and the TFLOP/s of that median kernel, 2·n³ operations):

size = sizes[-1]
x32, w32, b32 = (torch.randn(size, size, device=device) for _ in range(3))
torch.set_float32_matmul_precision("high")
try:
    tf32_run = capture(
        lambda: torch.add(torch.matmul(x32, w32), b32),
        name=run_name(size, "tf32", warm=True),
        label="matmul_add",
        warmup_iters=3,
        out_dir=trace_dir(),
    )
finally:
    torch.set_float32_matmul_precision("highest")


def recorded_gemms(run):
    return [
        k
        for k in kernel_launches(run.trace)
        if k.op and k.op.name in GEMMS and k.step is not None
    ]


MATH_WORDS = {
    "fp32": "fp32, CUDA cores",
    "tf32": "TF32, tensor cores",
    None: "neither",
}
large_fp32 = runs[-1]
gemm_us, said = {}, {}
rows = []
for run in (large_fp32, tf32_run):
    gemms = recorded_gemms(run)
    if not gemms:
        continue
    said[run.name] = {fp32_math(k.kernel.name) for k in gemms}
    gemm_us[run.name] = statistics.median(k.kernel.dur for k in gemms)
    names = sorted({k.kernel.name for k in gemms})
    words = sorted({fp32_math_word(k.kernel.name) or "" for k in gemms} - {""})
    says = ", ".join(sorted(MATH_WORDS[kind] for kind in said[run.name]))
    says += f" (by {', '.join(words)})" if words else ""
    tflops = 2 * size**3 / gemm_us[run.name] / 1e6
    rows.append([run.name, cut(names[0], 28), says, gemm_us[run.name], tflops])
if not rows:
    print("No GPU here: the runs launched no GEMM kernel to read.")
columns = ["run", "GEMM kernel", "its name says", "median (µs)", "TFLOP/s"]
value_table(columns, rows) if rows else None

# %%
# The cheatsheet's ``fp32-gemm`` rule reads the same names: it reports fp32 GEMMs on the
# CUDA cores of a GPU that has TF32 tensor cores (compute capability 8.0 or newer), when
# they keep the GPU busy for a good part of the steps and no GEMM of the trace runs TF32.
# On the fp32 run, then on the TF32 one:

findings_table(
    diagnose(large_fp32.trace, select=["fp32-gemm"]),
    caption=large_fp32.name,
    rules=["fp32-gemm"],
)

# %%

findings_table(
    diagnose(tf32_run.trace, select=["fp32-gemm"]),
    caption=tf32_run.name,
    rules=["fp32-gemm"],
)

# %%
# The finding quotes the datasheet's two rates; the table above gives this run's, and the
# claims below check what it measured. TF32 is not free. The largest error of each product
# against the same product computed in fp64, relative to the product's largest value:

reference = x32.double() @ w32.double()
errors = {}
try:
    for precision, kind in (("highest", "fp32"), ("high", "TF32 allowed")):
        torch.set_float32_matmul_precision(precision)
        error = (x32 @ w32).double() - reference
        errors[kind] = (error.abs().max() / reference.abs().max()).item()
finally:
    torch.set_float32_matmul_precision("highest")
for kind, error in errors.items():
    print(f"{kind}: largest error {error:.1e} of the largest value")

# %%
# Most training tolerates TF32's error; code that needs fp32's digits (a solver, a
# reduction that cancels) does not, and keeps the default.

if device == "cuda" and len(gemm_us) == 2:
    claim(
        "the fp32 run's GEMM kernels compute on the CUDA cores, by their names",
        said[large_fp32.name] == {"fp32"},
        otherwise=f"the fp32 run's GEMM kernel names say {said[large_fp32.name]}",
    )
    claim(
        "with TF32 allowed, the GEMM kernels' names say TF32",
        said[tf32_run.name] == {"tf32"},
        otherwise=f"with TF32 allowed, the GEMM kernel names say {said[tf32_run.name]}",
    )
    at_least_times(
        "the TF32 GEMM kernel is at least twice as fast as the fp32 one",
        2,
        fp32_gemm_us=gemm_us[large_fp32.name],
        tf32_gemm_us=gemm_us[tf32_run.name],
    )
    fired = {
        run.name: bool(diagnose(run.trace, select=["fp32-gemm"]))
        for run in (large_fp32, tf32_run)
    }
    at_least_times(
        "TF32's error is at least ten times fp32's",
        10,
        tf32_error=errors["TF32 allowed"],
        fp32_error=errors["fp32"],
    )
    claim(
        "fp32-gemm reports the fp32 run and not the TF32 one",
        fired == {large_fp32.name: True, tf32_run.name: False},
        otherwise=f"fp32-gemm fired: {fired}",
    )

# %%
# What the kernels ask of an SM
# -----------------------------
# The trace also records each kernel's footprint: registers per thread, shared memory per
# block, grid and block. One row per kernel of each run's last recorded step, each row one
# kernel's own figures (names cut as above):

shared_bytes = collections.defaultdict(list)  # per kind, each kernel's shared memory
rows = []
for run in runs:
    for launch in last_step_launches(run):
        fp = launch.footprint
        kind = "GEMM" if launch.op and launch.op.name in GEMMS else "add"
        shared_bytes[kind].append(fp.shared_memory_bytes or 0)
        shared_kib = (
            None if fp.shared_memory_bytes is None else fp.shared_memory_bytes / 1024
        )
        rows.append(
            [
                run.name.removesuffix("_warm_eager").replace("_", " "),
                cut(launch.kernel.name.removeprefix("void "), 24),
                fp.registers_per_thread,
                shared_kib,
                math.prod(fp.block) if fp.block else None,
            ]
        )
columns = [
    "run",
    "kernel",
    "registers / thread",
    "shared memory / block (KiB)",
    "threads / block",
]
value_table(columns, rows) if rows else None

# %%
# An SM has a fixed register file and a fixed amount of shared memory, shared by the
# blocks it holds at once. A kernel whose block takes a large share of either leaves room
# for only a few of its blocks per SM, and how many fit decides how well a launch fills
# the GPU. That is what a GEMM library plans for. The post gives the A100's add kernel 32
# registers per thread and no shared memory.

if device == "cuda":
    gemm_least = min(shared_bytes["GEMM"], default=0)
    add_most = max(shared_bytes["add"], default=0)
    claim(
        "every GEMM kernel asks for more shared memory per block than any add kernel",
        gemm_least > add_most,
        otherwise="some GEMM kernel asks for no more shared memory per block than an "
        "add kernel",
        least_gemm_bytes=gemm_least,
        most_add_bytes=add_most,
    )

# %%
# A planning call on the timeline
# -------------------------------
# A zoom on the CPU lane around the GEMM's operator in the last step of the largest run
# whose GEMM has a planning call (the picture's title names it), with its planning calls
# and its launch highlighted:

planned = [
    (run, k)
    for run in runs
    for k in last_step_launches(run)
    if k.op and k.op.name in GEMMS and k.planning_calls
]
if planned:
    run, gemm = planned[-1]
    op = gemm.op
    first, last = gemm.planning_calls[0], gemm.planning_calls[-1]
    margin = op.dur * 0.15
    plot_timeline(
        run.trace,
        window=(op.start - margin, op.end + margin),
        lanes=[op.lane],
        highlights=[
            Highlight(first.start, last.end, "planning", lane=op.lane),
            Highlight(gemm.launch.start, gemm.launch.end, gemm.api, lane=op.lane),
        ],
        title=f"{run.name}: {op.name}, ProfilerStep#{gemm.step}",
    )
else:
    print("No GEMM in these warm steps was launched after a planning call.")

# %%
# Where did the occupancy query go?
# ---------------------------------
# A GEMM library must size a kernel's launch at some point. If it does not ask before every
# launch, it may ask once and remember the answer. To see that, the first call must be in
# the trace: the very first GEMM of a fresh process, profiled with no warm-up at all
# (``wait=0``, ``warmup=0``, no warm-up calls). This page's process has run GEMMs already,
# so the first call is profiled in a new Python process, through
# :func:`~profiling_utils.fresh.run_in_fresh_process`:

FIRST_CALL = """
import torch
from profiling_utils import capture
from profiling_utils.fresh import report
from profiling_utils.render import trace_dir

x, w, b = (torch.randn(64, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
run = capture(
    lambda: torch.add(torch.matmul(x, w), b),
    name="64_bf16_first-call_eager",
    label="matmul_add",
    out_dir=trace_dir(),
    wait=0,
    warmup=0,
    active=6,
)
report(trace_path=str(run.trace_path))
"""

first_call = None
if device == "cuda":
    fresh = run_in_fresh_process(FIRST_CALL)
    first_call = load_trace(fresh.values["trace_path"])
    gemm_launches = [
        k for k in kernel_launches(first_call) if k.op and k.op.name in GEMMS
    ]
    names = sorted({c.name for k in gemm_launches for c in k.planning_calls})
    counts = [
        collections.Counter(c.name for c in k.planning_calls) for k in gemm_launches
    ]
    columns = ["planning call", *(f"#{k.step}" for k in gemm_launches)]
    rows = [[name, *(count[name] for count in counts)] for name in names]
    apis = collections.Counter(k.api for k in gemm_launches)
    print("GEMMs launched with " + ", ".join(f"{a} ({n}×)" for a, n in apis.items()))
else:
    print("No GPU here: there is no first kernel launch to profile.")
caption = "Planning calls before each step's GEMM launch, in a fresh process"
value_table(columns, rows, caption=caption) if first_call is not None else None

# %%
# One column per recorded step. Where the first step's GEMM launch comes after a burst of
# planning calls and the later steps' after none, the planning has not gone away: it moved
# from every launch to the first one, and its answer is reused. A trace of warm steps cannot
# show it. What this run found:

if first_call is not None:
    occupancy_by_step = [
        sum(n for name, n in count.items() if name.startswith("cudaOccupancy"))
        for count in counts
    ]
    claim(
        "occupancy queries come before the process's first GEMM launch only",
        occupancy_by_step[0] > 0 and not any(occupancy_by_step[1:]),
        otherwise="occupancy queries before the GEMM launches, step by step: "
        + ", ".join(map(str, occupancy_by_step)),
        queries_by_step=" ".join(map(str, occupancy_by_step)),
    )

# %%
# What else the first call does
# -----------------------------
# The first ``aten::mm`` of the process against the later ones, and the longest stretch
# inside it in which the trace recorded no CUDA call:

if first_call is not None:
    mms = [op for op in first_call.find("aten::mm") if first_call.step_of(op)]
    first_mm, later_us = mms[0], statistics.median(op.dur for op in mms[1:])
    calls = first_call.children(first_mm)
    edges = [
        first_mm.start,
        *(t for c in calls for t in (c.start, c.end)),
        first_mm.end,
    ]
    silent = max(edges[i + 1] - edges[i] for i in range(0, len(edges) - 1, 2))
    overhead = [
        s
        for s in first_call.overhead
        if first_mm.start <= s.start and s.end <= first_mm.end
    ]
    columns = ["inside the first aten::mm", "µs"]
    rows = [
        ["first aten::mm", first_mm.dur],
        ["later aten::mm (median)", later_us],
        ["CUDA calls inside the first", sum(c.dur for c in calls)],
        ["longest stretch with no CUDA call", silent],
        *([f"overhead lane: {s.name}", s.dur] for s in overhead),
    ]
    at_least_times(
        "the process's first aten::mm takes at least 10x the median of the later ones",
        10,
        first_us=first_mm.dur,
        median_later_us=later_us,
    )
value_table(columns, rows) if first_call is not None else None

# %%
# The CUDA calls, planning calls among them, are a small part of that first ``aten::mm``,
# and so is what the overhead lane recorded meanwhile (the driver loading kernel code, as
# *Runtime Triggered Module Loading* and *Lazy Function Loading*, and the profiler's buffer
# request are the kinds to expect there). Most of the time passes with no CUDA call
# recorded: the CPU is busy inside the libraries, most likely setting them up on first use.
# The trace tells when that time passes, not what it is spent on. The
# :doc:`cold-start tutorial <plot_02_cold_start>` measures what
# such first-use work costs a step.

if first_call is not None:
    claim(
        "the CUDA calls inside the first aten::mm take less than a quarter of it",
        sum(c.dur for c in calls) < 0.25 * first_mm.dur,
        calls_us=sum(c.dur for c in calls),
        first_us=first_mm.dur,
    )
    claim(
        "the longest stretch with no CUDA call is more than half the first aten::mm",
        silent > 0.5 * first_mm.dur,
        silent_us=silent,
        first_us=first_mm.dur,
    )

# %%
# The planning calls of the first step on the timeline, with the overhead lane below the
# CPU lane. The occupancy queries are marked together, as one band from the first to the
# last (other calls can fall between them), and each planning call longer than 20 µs on
# its own. Printed with the picture: how long the occupancy queries
# took, and how much of each long planning call the overhead lane shows the driver loading
# code (*Runtime Triggered Module Loading*, *Lazy Function Loading*):

if first_call is not None and gemm_launches[0].planning_calls:
    launch = gemm_launches[0]
    planning = launch.planning_calls
    queries = [c for c in planning if c.name.startswith("cudaOccupancy")]
    marks = [
        Highlight(c.start, c.end, c.name, lane=launch.op.lane)
        for c in planning
        if not c.name.startswith("cudaOccupancy") and c.dur > 20
    ]
    if queries:
        marks.append(
            Highlight(
                queries[0].start,
                queries[-1].end,
                f"{len(queries)} occupancy queries, first to last",
                lane=launch.op.lane,
            )
        )
    pad = (planning[-1].end - planning[0].start) * 0.2
    plot_timeline(
        first_call,
        window=(planning[0].start - pad, planning[-1].end + pad),
        lanes=[
            launch.op.lane,
            *(lane for lane in first_call.lanes if lane.kind == "overhead"),
        ],
        highlights=marks,
        title="First GEMM of a process: its planning calls",
    )
    if queries:
        print(
            f"{len(queries)} occupancy queries: {sum(c.dur for c in queries):.1f} µs in "
            f"all, median {statistics.median(c.dur for c in queries):.2f} µs, longest "
            f"{max(c.dur for c in queries):.2f} µs"
        )

    def loading_us(call):
        """Time of the call covered by the driver's loading on the overhead lane."""
        return sum(
            max(0.0, min(span.end, call.end) - max(span.start, call.start))
            for span in first_call.overhead
            if span.name.endswith("Loading")
        )

    for call in planning:
        if not call.name.startswith("cudaOccupancy") and call.dur > 20:
            print(
                f"{call.name}: {call.dur:.1f} µs, {loading_us(call):.1f} µs of it "
                "under loading on the overhead lane"
            )
    longest = max(planning, key=lambda c: c.dur)
    claim(
        "loading on the overhead lane covers more than half of the longest planning call",
        loading_us(longest) > 0.5 * longest.dur,
        otherwise="loading on the overhead lane covers at most half of the longest "
        "planning call",
        call=longest.name,
        call_us=longest.dur,
        loading_us=loading_us(longest),
    )
elif first_call is not None:
    print("The first GEMM launch came after no planning call: nothing to mark.")

# %%
# A planning call can take long with little work of its own. ``cudaFuncSetAttribute``, for
# one, only sets a property of a kernel; but when a call is the first to touch a kernel,
# the driver may load the kernel's code while it runs, and the overhead lane shows that
# loading under the call. The claim above says whether loading covered most of this run's
# longest planning call; where it does, most of the call's time is a first-use cost of
# loading, not the call's own.
#
# What the cheatsheet finds
# -------------------------
# :func:`~profiling_utils.rules.diagnose` applies the cheatsheet's rules to a trace. Its
# launch rules, on the largest fp32 run and on the first-call trace:

launch_rules = ["planned-launch", "plain-launch", "driver-launch", "gemm-kernel"]
findings_table(
    diagnose(large_fp32.trace, select=launch_rules),
    caption=large_fp32.name,
    rules=launch_rules,
)

# %%

if first_call is not None:
    first_findings = diagnose(first_call, select=launch_rules)
else:
    first_findings = []
    print("No GPU here, so there is no first-call trace to diagnose.")
findings_table(first_findings, caption="first GEMM of a process", rules=launch_rules)

# %%
# What to take from this
# ----------------------
# - A planning call before a launch marks a kernel whose launch is worked out at run time,
#   usually a GEMM or a convolution. Its absence in warm steps does not mean there is no
#   planning: a library may plan on first use and reuse the answer.
# - Read the launch API too: ``cudaLaunchKernel`` for PyTorch's own elementwise kernels,
#   the extended calls for library kernels that pass launch attributes.
# - A kernel's name is its template's: an architecture in it says what the template was
#   written for, not which machine code ran.
# - On fp32 data, a GEMM kernel's name says where it computed: ``ffma`` or ``sgemm`` on the
#   CUDA cores, ``tf32`` on the tensor cores. Allowing TF32 is one line, where the model's
#   numerics tolerate it.
#
# The traces
# ----------

trace_links(large_fp32)

# %%

trace_links(tf32_run)

# %%

trace_links(first_call.path) if first_call is not None else print(
    "No first-call trace here."
)
