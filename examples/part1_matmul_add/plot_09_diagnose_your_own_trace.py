"""
Diagnose your own trace
=======================

*You have a trace of your own training step. Which of the patterns from the earlier
tutorials are in it, and where in the trace is the evidence?*

The earlier tutorials each looked for one pattern by hand. :func:`profiling_utils.diagnose`
looks for all of them at once: every row of the trace reading cheatsheet of the `Hugging
Face post <https://huggingface.co/blog/torch-profiler>`_ this gallery follows, plus a few
rows that traces recorded on an H100 taught us, is a rule that reads a trace and reports
what it found with the numbers behind it. We record a small but realistic trace, a few
training steps of a tiny transformer, diagnose it from Python, then do the same from the
command line, where ``summary`` and ``compare`` join ``diagnose``.
"""

# %%
# A trace of a training step
# --------------------------
#
# A two-layer transformer encoder with an embedding and an output layer, trained on random
# tokens with AdamW. On a GPU it runs in bf16 autocast, as a training step usually would.
# The step is labelled ``train_step``; three warm-up iterations run first, then ten steps
# are recorded, enough to compare medians.

import json
import subprocess
import sys

import torch

from profiling_utils import capture, compare, diagnose
from profiling_utils.claims import claim
from profiling_utils.measures import step_times
from profiling_utils.render import (
    findings_table,
    fold_lines,
    highlight_span,
    plot_timeline,
    trace_dir,
    trace_links,
)
from profiling_utils.stats import Distribution, clearly_greater

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab=1024, dim=128, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        layer = torch.nn.TransformerEncoderLayer(
            dim, nhead=4, dim_feedforward=4 * dim, batch_first=True, norm_first=True
        )
        self.body = torch.nn.TransformerEncoder(
            layer, layers, enable_nested_tensor=False
        )
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)))


def training_step(**optimizer_options):
    """A model, an optimizer and a function that does one training step."""
    torch.manual_seed(0)
    model = TinyTransformer().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **optimizer_options)
    tokens = torch.randint(0, 1024, (8, 64), device=device)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(tokens)
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), tokens.flatten()
            )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


PARAMETERS = len(list(TinyTransformer().parameters()))  # tensors AdamW's loop visits


def record(step, name):
    return capture(
        step,
        name=name,
        label="train_step",
        out_dir=trace_dir(),
        warmup_iters=3,
        active=10,
    )


run = record(training_step(foreach=False), "tiny_transformer_train_adamw_loop")
print(
    f"{run.trace_path.name}: {len(run.trace.spans):,} events in {len(run.trace.steps)} steps"
)

# %%
# We asked AdamW for its simplest implementation, a Python loop over the parameters
# (``foreach=False``): that is what an older or a hand-written optimizer does, and it leaves
# something to find.
#
# Diagnose it from Python
# -----------------------
#
# :func:`~profiling_utils.diagnose` takes a loaded trace or a path and returns a list of
# :class:`~profiling_utils.Finding` objects, ordered with the cheatsheet tables that hold a
# warning first. As a table:

findings = diagnose(run.trace)
findings_table(findings, caption=run.name)

# %%
# How to read it
# --------------
#
# Each row is one finding:
#
# - **Severity**: ``warning`` is worth acting on, ``info`` is worth knowing. A warning names
#   a cost you could remove (an overhead-bound step, an op called very often, a first step
#   full of one-time work); an info explains what you are looking at (which launch API, which
#   GEMM kernel, the call chain).
# - **Cheatsheet table**: which of the post's five tables the row comes from (profiler
#   table, CPU lane, GPU lane, dispatch chain, torch.compile), so you know where in the
#   trace to look.
# - **Rule**: the rule's id, to select or ignore it (``select=``, ``ignore=``, or
#   ``--select``, ``--ignore`` on the command line).
# - **What the trace shows**: one sentence with the measured numbers.
#
# The CPU-lane rules ``planned-launch``, ``plain-launch`` and ``driver-launch`` sort kernel
# launches by whether *planning calls* came before them: the queries, attribute settings
# and function lookups that a library makes before a launch (``cudaOccupancy*``,
# ``cudaFuncGetAttributes``, ``cudaFuncSetAttribute``, ``cudaGetFuncBySymbol`` and their
# driver forms, as :data:`~profiling_utils.measures.PLANNING_CALL_PREFIXES` lists them).
# The :doc:`launch-planning tutorial <plot_06_launch_planning>` looks at them.
#
# The evidence
# ------------
#
# Behind each message is its evidence: the steps, event names, start times (µs from the
# trace's first event), durations and measured values the rule used. That is what lets you
# check a finding in the trace yourself. The evidence of the first finding, one line per
# entry (long values cut short here):

first = findings[0]
print(f"{first.rule} ({first.table}, {first.severity})")
for key, value in first.evidence.items():
    text, room = json.dumps(value), 76 - len(key)
    print(f"  {key}: {text if len(text) <= room else text[: room - 3] + '...'}")

# %%
# The evidence names steps, events and times on the trace's own axis, so a finding can
# be checked in the trace. Take the optimizer's part of the first recorded step: AdamW,
# looping over the model's parameter tensors, runs a handful of small operators for each
# of them. We count the operator calls, and the kernel launches, inside it:

trace = run.trace
step = trace.steps[0]
optimizer = next(
    span
    for span in trace.annotations
    if span.name.startswith("Optimizer.step") and trace.step_of(span) is step
)


def inside(span, outer):
    return outer.start <= span.start < outer.end and span.lane == outer.lane


ops = [
    op
    for op in trace.cpu_ops
    if inside(op, optimizer) and op.depth == optimizer.depth + 1
]


def launched_a_kernel(call):
    return any(work.cat == "kernel" for work in trace.gpu_work_of(call))


launches = [
    call
    for call in trace.runtime_calls
    if launched_a_kernel(call) and inside(call, optimizer)
]
# The backward pass runs on a thread of its own: count the step's launches on every thread.
step_launches = [
    c for c in trace.runtime_calls if launched_a_kernel(c) and trace.step_of(c) is step
]
share = optimizer.dur / step.span.dur
print(f"{optimizer.name}: {optimizer.dur:,.1f} µs, {share:.0%} of the step's CPU time;")
print(f"{len(ops)} operator calls for {PARAMETERS} parameter tensors", end="")
if step_launches:
    print(
        f", {len(launches)} of the step's {len(step_launches)} kernel launches", end=""
    )
print()
claim(
    "the optimizer loop makes at least three operator calls per parameter tensor",
    len(ops) >= 3 * PARAMETERS,
    calls=len(ops),
    parameters=PARAMETERS,
)
if run.has_gpu:
    claim(
        "the optimizer loop launches at least one kernel per parameter tensor",
        len(launches) >= PARAMETERS,
        launches=len(launches),
        parameters=PARAMETERS,
    )

# %%
# Each of those calls has its own CPU cost, and with a GPU the kernel launches counted above
# come with them. The step on a timeline, the optimizer's part highlighted:

plot_timeline(
    trace,
    step=step.number,
    highlights=[highlight_span(optimizer, "optimizer step")],
    max_depth=2,
    title=run.name,
)

# %%
# At this zoom a whole training step is a dense wall of boxes, which is why a list of
# findings with numbers is a useful first read before opening the trace.
#
# The same from the command line
# ------------------------------
#
# ``python -m profiling_utils`` (also installed as ``profiling-utils``) has three commands.
# We run each as a reader would in a terminal, from the folder that holds the trace, and
# print what it prints.


def cli(*args, max_lines=3):
    """Run ``python -m profiling_utils ARGS`` in the trace folder and print its output,
    a line wider than this page folded into at most ``max_lines``
    (:func:`~profiling_utils.render.fold_lines`)."""
    print(fold_lines("$ python -m profiling_utils " + " ".join(args)))
    done = subprocess.run(
        [sys.executable, "-m", "profiling_utils", *args],
        cwd=run.trace_path.parent,
        capture_output=True,
        text=True,
    )
    print(fold_lines(done.stdout + done.stderr, max_lines=max_lines))
    if done.returncode != 0:
        raise RuntimeError(
            f"profiling_utils {args[0]} exited with status {done.returncode}"
        )


cli("summary", "--top", "3", run.trace_path.name)

# %%
# ``summary`` is the overview: the device and CUDA versions; the lanes, each with its busy
# time (on a GPU lane, the time its kernels, copies and memsets ran; on a CPU thread, the
# time it spent in operators and runtime calls, labels such as the step left out, so the
# profiler's own row, which holds only its label over the whole trace, shows 0); a line
# per step (its CPU time is the step's window, from start to end, whatever the threads did
# in it; then GPU busy time and idle share, lane offset and dead window as on pages 02 and
# 04, launch delays, GPU gaps); the kernels with the most total time and how they were
# launched; the CPU operators with the most self time; the rates the ops achieved against
# their GPU's datasheet peak (a roofline, which needs the shapes a recording with
# ``record_shapes=True`` writes: this one has none, and the section says so); the copies and
# memsets; the collective kernels of a distributed run (NCCL, RCCL: none in this one-GPU run)
# and how much of their time compute hides; and whether ``torch.compile`` or the profiler's
# own overhead show up. ``--json`` gives the same as one JSON object.

cli("diagnose", "--select", "overhead-bound,many-calls", run.trace_path.name)

# %%
# ``diagnose`` prints the findings grouped by cheatsheet table, tables with a warning
# first; ``--select`` kept two rules here, and without it every rule runs, as in the table
# above. The header line counts findings and warnings. Under each finding, indented, is its
# evidence, the same dictionary as above. The exit status is 0 whether or not anything was
# found, so it can run in a script; ``--json`` gives one object with every finding, for a
# script to read.
#
# What drives ``many-calls``?
# ---------------------------
#
# ``many-calls`` names the operators called 50 times or more per step whose calls, each
# counted at the length of the operator's median call (or all of them at their total,
# where that is less: the message then says "in all"), take 5% or more of the steps' CPU
# time (an operator called as often for less is left out, and so is one whose time is a
# few long calls, such as one blocking copy per step). An operator whose calls nearly all
# run inside another one it names (``aten::_to_copy``, which ``aten::to`` calls) is the
# same calls again: its evidence says ``within`` which, and the count leaves it out. Is
# that the optimizer's loop? For each operator it counts, the share of its calls made
# inside ``Optimizer.step``:

many = next((f for f in findings if f.rule == "many-calls"), None)
optimizer_steps = [s for s in trace.annotations if s.name.startswith("Optimizer.step")]
named_calls = in_optimizer = 0
for entry in many.evidence["ops"] if many else []:
    if entry["within"] is not None:
        print(f"{entry['op']:24s} runs inside {entry['within']}")
        continue
    calls = [op for op in trace.find(entry["op"]) if trace.step_of(op) is not None]
    inside_count = sum(any(inside(op, o) for o in optimizer_steps) for op in calls)
    named_calls, in_optimizer = named_calls + len(calls), in_optimizer + inside_count
    print(
        f"{entry['op']:24s} {entry['calls_per_step']:6.1f} calls per step, "
        f"{inside_count / len(calls):4.0%} of them inside the optimizer"
    )
if many is None:
    print("many-calls did not fire on this run: no operator is called that often.")
else:
    share = in_optimizer / named_calls
    if share > 2 / 3:
        split = (
            "over two thirds of the calls of the operators many-calls counts are the "
        )
        split += "optimizer's"
    elif share < 1 / 3:
        split = (
            "over two thirds of the calls of the operators many-calls counts are made "
        )
        split += "outside the optimizer"
    else:
        split = (
            "the calls of the operators many-calls counts split between the optimizer "
        )
        split += "and the rest of the step, neither making two thirds of them"
    claim(split, True, calls=named_calls, in_optimizer=in_optimizer)

# %%
# An operator called from the optimizer's loop is called once per parameter tensor, or a
# few times, per step. Under autocast there is another source of small, frequent calls:
# each forward pass casts every weight it uses to bf16 (``aten::to``, which calls
# ``aten::_to_copy`` and ``aten::copy_``), and the backward pass casts each gradient back.
# The claims box says how the calls above split on this run, counted over the operators
# the finding counts (an operator that also runs on its own, as ``aten::copy_`` does beside
# the casts that call it, keeps all its calls); the names say the rest (``aten::to``,
# ``aten::_to_copy`` and ``aten::copy_`` are casts and copies: outside the optimizer,
# autocast's; inside it, the optimizer's own). Either way, the cure is fewer, larger
# operations: a fused optimizer for the calls inside it, weights kept in bf16 for
# autocast's casts.
#
# Compare two traces
# ------------------
#
# ``compare`` sets a baseline beside a second trace. Our trace's optimizer loops over the
# parameters; AdamW can also do its update in a few fused kernels (``fused=True``). We
# record that version and compare:

fused = record(training_step(fused=True), "tiny_transformer_train_adamw_fused")
cli("compare", run.trace_path.name, fused.trace_path.name)

# %%
# Read the first block as "trace against baseline": the last column is the ratio, so below
# 1 means the second trace has less of it. Under each median, the middle half of each run's
# steps; where the two middle halves overlap, that row says ``overlap`` (``few steps`` with
# fewer than five a side), and the ratio may be noise rather than a change: the test these
# pages hold their own comparisons to. The GPU window row is the step as the GPU runs it,
# which a GPU-bound step's CPU time understates. The step table pairs the steps by number
# (by position where the two runs number them differently); the lists below it name the
# labels, ops and kernels that only one of the two runs has, which is where the change
# shows (here, the optimizer's per-parameter ops against its fused ones). The same
# comparison from Python: the CPU time per step, and the part of it inside the optimizer's
# ``Optimizer.step`` label, each with its spread over the ten steps:

comparison = compare(run.trace, fused.trace)
claim(
    "only the fused run calls aten::_fused_adamw_",
    "aten::_fused_adamw_" in {op.name for op in comparison.ops_only_in_trace},
)
cpu = {}
optimizer_cpu = {}
for label, side, capture_run in (
    ("loop", comparison.baseline, run),
    ("fused", comparison.trace, fused),
):
    cpu[label] = Distribution.of(
        [t.cpu_us for t in step_times(capture_run.trace)], "µs"
    )
    optimizer_cpu[label] = Distribution.of(
        [
            span.dur
            for span in capture_run.trace.annotations
            if span.name.startswith("Optimizer.step")
        ],
        "µs",
    )
    print(f"{label:5s} CPU per step: {cpu[label]}")
    print(f"      in Optimizer.step: {optimizer_cpu[label]}")
    if capture_run.has_gpu:
        print(
            f"      {side.launches_per_step:.1f} launches and {side.kernels_per_step:.1f} "
            "kernels per step"
        )
if run.has_gpu:
    claim(
        "a training step with the fused optimizer makes fewer launches than with the loop",
        comparison.trace.launches_per_step < comparison.baseline.launches_per_step,
        loop=comparison.baseline.launches_per_step,
        fused=comparison.trace.launches_per_step,
    )
    # The optimizer's own time, not the whole step's: the step also holds the forward and
    # backward passes, whose spread from step to step can be as large as the saving.
    claim(
        "the fused optimizer's Optimizer.step costs the CPU less than the loop's",
        clearly_greater(optimizer_cpu["loop"], optimizer_cpu["fused"]),
        loop=optimizer_cpu["loop"],
        fused=optimizer_cpu["fused"],
    )

# %%
# On a CPU there are no launches or kernels to count, and the CPU time is the whole story.
# With a GPU, the claims above say whether the fused optimizer needed fewer launches per
# step and cost the CPU less: fewer launches, the cure the cheatsheet's overhead-bound row
# names (the cheatsheet page gives each rule's meaning), in one line of code. Whether it
# was enough, the fused run's own diagnosis says:

findings_table(diagnose(fused.trace), caption=fused.name)

# %%
# Fusing the optimizer removes launches; it does not make the model's own kernels bigger.
# A model this small does little GPU work per operator, so where the table above still
# has the ``overhead-bound`` warning, the next steps are more work per launch (a larger
# batch or model) or fewer launches per step for the rest of it
# (:doc:`torch.compile and CUDA graphs <plot_08_torch_compile>`).

# %%
# The traces
# ----------
#
# Both traces, to open in Perfetto next to the findings:

trace_links(run)

# %%

trace_links(fused)
