"""
Diagnose your own trace
=======================

*You have a trace of your own training step. Which of the patterns from the earlier
tutorials are in it, and where in the trace is the evidence?*

The earlier tutorials each looked for one pattern by hand. :func:`profiling_utils.diagnose`
looks for all of them at once: every row of the post's trace reading cheatsheet, plus a few
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
# The step is labelled ``train_step``; three warm-up iterations run first, then the
# post's schedule records three steps.

import json
import subprocess
import sys
import textwrap

import torch

from profiling_utils import capture, compare, diagnose
from profiling_utils.render import (
    findings_table,
    highlight_span,
    plot_timeline,
    trace_dir,
    trace_links,
)

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


run = capture(
    training_step(foreach=False),
    name="tiny_transformer_train_adamw_loop",
    label="train_step",
    out_dir=trace_dir(),
    warmup_iters=3,
)
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
# be checked in the trace. Here is the first recorded step, with the optimizer's part of it
# highlighted: AdamW, looping over the parameters, runs a handful of small operators for
# each of them. We count the operator calls, and the launches, inside it:

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
launches = [
    call for call in trace.runtime_calls if call.is_launch and inside(call, optimizer)
]
# The backward pass runs on a thread of its own: count the step's launches on every thread.
step_launches = [
    c for c in trace.runtime_calls if c.is_launch and trace.step_of(c) is step
]
share = optimizer.dur / step.span.dur
print(f"{optimizer.name}: {optimizer.dur:.1f} µs, {share:.0%} of the step's CPU time;")
print(f"  {len(ops)} operator calls", end="")
if step_launches:
    print(
        f", {len(launches)} of the step's {len(step_launches)} kernel launches", end=""
    )
print()
plot_timeline(
    trace,
    step=step.number,
    highlights=[highlight_span(optimizer, "optimizer step")],
    max_depth=2,
    title=run.name,
)

# %%
# The lines printed above the picture are the loop's price: a few small operators per
# parameter tensor, each with its own CPU cost and, with a GPU, its own launch, for little
# GPU work each. That is the kind of cost the ``overhead-bound`` and ``many-calls``
# warnings point at. At this zoom a whole training step is a dense wall of boxes, which is
# why a list of findings with numbers is a useful first read before opening the trace.
#
# The same from the command line
# ------------------------------
#
# ``python -m profiling_utils`` (also installed as ``profiling-utils``) has three commands.
# We run each as a reader would in a terminal, from the folder that holds the trace, and
# print what it prints.


def fold(line, width=88):
    """Wrap a long output line to the page, cutting very long ones (kernel names) short."""
    indent = line[: len(line) - len(line.lstrip())] + "    "
    return textwrap.fill(
        line,
        width,
        subsequent_indent=indent,
        max_lines=3,
        placeholder=" …",
        break_long_words=False,
        break_on_hyphens=False,
    )


def cli(*args):
    """Run ``python -m profiling_utils ARGS`` in the trace folder and print its output.

    Lines wider than this page are folded, and very long ones cut short.
    """
    print(fold("$ python -m profiling_utils " + " ".join(args)))
    done = subprocess.run(
        [sys.executable, "-m", "profiling_utils", *args],
        cwd=run.trace_path.parent,
        capture_output=True,
        text=True,
    )
    output = done.stdout + done.stderr
    print(
        "\n".join(fold(line) if len(line) > 88 else line for line in output.split("\n"))
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"profiling_utils {args[0]} exited with status {done.returncode}"
        )


cli("summary", "--top", "3", run.trace_path.name)

# %%
# ``summary`` is the overview: the device and CUDA versions, the lanes, a line per step
# (CPU time, GPU busy time and idle share, lane offset, dead window, launch delays, GPU
# gaps), the kernels with the most total time and how they were launched, the copies and
# memsets, and whether ``torch.compile`` or the profiler's own overhead show up. ``--json``
# gives the same as one JSON object.

cli("diagnose", "--select", "overhead-bound,many-calls", run.trace_path.name)

# %%
# ``diagnose`` prints the findings grouped by cheatsheet table, tables with a warning
# first; ``--select`` kept two rules here, and without it every rule runs, as in the table
# above. The header line counts findings and warnings. Under each finding, indented, is its
# evidence, the same dictionary as above. The exit status is 0 whether or not anything was
# found, so it can run in a script; ``--json`` gives one object with every finding, for a
# script to read.
#
# Compare two traces
# ------------------
#
# ``compare`` sets a baseline beside a second trace. Our trace's optimizer loops over the
# parameters; AdamW can also do its update in a few fused kernels (``fused=True``). We
# record that version and compare:

fused = capture(
    training_step(fused=True),
    name="tiny_transformer_train_adamw_fused",
    label="train_step",
    out_dir=trace_dir(),
    warmup_iters=3,
)
cli("compare", run.trace_path.name, fused.trace_path.name)

# %%
# Read the first block as "trace against baseline": the last column is the ratio, so below
# 1 means the second trace has less of it. The step table pairs the steps by position; the
# lists below it name the ops and kernels that only one of the two runs has, which is where
# the change shows (here, the optimizer's per-parameter ops against its fused ones). The
# same comparison from Python, in numbers:

comparison = compare(run.trace, fused.trace)
for label, side in (("loop ", comparison.baseline), ("fused", comparison.trace)):
    print(
        f"{label}: median CPU per step {side.median_step_cpu_us:9.1f} µs, "
        f"{side.launches_per_step or 0:5.1f} launches, {side.kernels_per_step or 0:5.1f} kernels"
    )

# %%
# On a CPU there are no launches or kernels to count, and the CPU time is the whole story.
# With a GPU, the fused optimizer needs fewer launches per step, and the step's CPU time
# goes down with them: the cure the overhead-bound warning asks for, in one line of code.
# Whether it was enough, the fused run's own diagnosis says:

findings_table(diagnose(fused.trace), caption=fused.name)

# %%
# Fusing the optimizer removes launches; it does not make the model's own kernels bigger.
# A model this small does little GPU work per operator, so where the table above still
# has the ``overhead-bound`` warning, the next steps are more work per launch (a larger
# batch or model) or fewer launches per step for the rest of it
# (:ref:`torch.compile and CUDA graphs <sphx_glr_auto_examples_plot_08_torch_compile.py>`).

# %%
# The traces
# ----------
#
# Both traces, to open in Perfetto next to the findings:

trace_links(run)

# %%

trace_links(fused)
