"""
Gaps inside a step: your host sync or the profiler?
===================================================

*The GPU lane shows the GPU idle in the middle of a step. Is that your code or the
profiler, and how do you tell from the trace?*

The `Hugging Face post <https://huggingface.co/blog/torch-profiler>`_ saw a gap between
two kernels of one step on its A100, attributed it to another ``Activity Buffer Request``
of the profiler, and confirmed it by recording more steps: the gap came back once, not in
every step, so it was not the code. Its cheatsheet turns that into a row: a gap between two
kernels in a single step is likely a buffer request.

A trace can say more than "once or every time". For an idle stretch of the GPU it records
when the next work was *launched* and what the CPU thread was doing meanwhile. We record
two runs, one whose code makes the GPU idle inside every step and one long enough that the
profiler may ask for a buffer mid-run, and read both with the ``intra-step-gap`` rule of
:func:`~profiling_utils.rules.diagnose`.
"""

# %%
# A host sync in every step
# -------------------------
# Three GEMMs per step, with the loss read on the CPU between the second and the third, as
# a training loop does when it logs ``loss.item()``. ``item()`` copies the value to the
# host and waits for it: the CPU stops issuing work until the GPU has finished everything
# queued before. For comparison, the same step without the ``item()``.

import collections
import statistics

import torch

from profiling_utils import capture, diagnose
from profiling_utils.claims import claim
from profiling_utils.measures import gpu_busy_us, gpu_gaps, step_times, thread_activity
from profiling_utils.render import (
    Highlight,
    findings_table,
    fold_lines,
    plot_per_step,
    plot_timeline,
    trace_dir,
    trace_links,
)
from profiling_utils.rules.gpu_lane import (
    GAP_MIN_LAUNCH_LATENCIES,
    GAP_MIN_US,
    GAP_REQUEST_RATIO,
    idle_stretches,
)
from profiling_utils.stats import Distribution

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
n = 4096 if device == "cuda" else 256
a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))


def step_with_item():
    y = (a @ b) @ b
    loss = y.float().mean()
    loss.item()  # the host sync
    return a @ b


def step_without_item():
    y = (a @ b) @ b
    loss = y.float().mean()
    return a @ b, loss


schedule = dict(label="step", warmup_iters=3, wait=1, warmup=1, active=10)
synced = capture(
    step_with_item, name=f"{n}_bf16_item-sync", out_dir=trace_dir(), **schedule
)
free = capture(
    step_without_item, name=f"{n}_bf16_no-sync", out_dir=trace_dir(), **schedule
)
synced_gaps = diagnose(synced.trace, select=["intra-step-gap"])
free_gaps = diagnose(free.trace, select=["intra-step-gap"])
findings_table(synced_gaps, caption=synced.name, rules=["intra-step-gap"])

# %%
# What the finding rests on. The rule scans each device's GPU work in time order for
# stretches in which no stream ran, between two activities of the same step, that last at
# least five times the trace's own launch latency (the median time from a launch call to
# its GPU work when the GPU was idle): a threshold that follows the machine, whose own
# launch latency is printed first.

if synced_gaps:
    evidence = synced_gaps[0].evidence
    print(f"launch latency of this trace: {evidence['launch_latency_us']:.1f} µs")
    idle = Distribution.of([gap for _, gap in evidence["gap_by_step_us"]], unit="µs")
    print(f"GPU idle after the copy, in the rule's steps: {idle}")
    print(f"the sync: {evidence['sync']['name']} under {evidence['sync_op']['name']}")
    print(f"last GPU work before the stretch: {evidence['before']['name'][:50]}")
    print(f"first GPU work after it: {evidence['after']['name'][:60]}")
    late_us = evidence["launched_after_idle_us"]
    print(
        f"the call launching the next work returned {late_us:.1f} µs after the GPU ran dry"
    )
    threshold = max(
        GAP_MIN_US, GAP_MIN_LAUNCH_LATENCIES * evidence["launch_latency_us"]
    )
    print(
        f"the rule's threshold: {threshold:.1f} µs ({GAP_MIN_LAUNCH_LATENCIES:g} launch "
        f"latencies, and at least {GAP_MIN_US:g} µs)"
    )
else:
    evidence = None
    print("No idle stretch after a host sync in this run", end="")
    print(": item() has no GPU to wait for." if not synced.has_gpu else ".")
print(f"without the item(): {len(free_gaps)} intra-step-gap finding(s)")

# Every step, the GPU's idle time from the end of the copy to the host to its next work.
idle_after_copy = []
if synced.has_gpu:
    gpu_work = sorted(synced.trace.gpu_work, key=lambda span: span.start)
    for each in synced.trace.steps:
        for copy in (w for w in each.gpu_work if w.name.startswith("Memcpy DtoH")):
            after = next((w for w in gpu_work if w.start >= copy.end), None)
            if after is not None:
                idle_after_copy.append((each.number, after.start - copy.end))
    listed = ", ".join(f"#{number} {gap:.1f}" for number, gap in idle_after_copy)
    print(fold_lines(f"GPU idle after the copy, every step (µs): {listed}"))

# %%
# One step up close, the idle stretch after the copy to the host marked (the copy, a box
# a pixel or two wide, ends where the band begins):

step = evidence["step"] if evidence else synced.trace.steps[0].number
marks = []
if evidence:
    idle_from = evidence["before"]["start_us"] + evidence["before"]["dur_us"]
    # The copy itself lasts a microsecond or two: a band of its own would be a hairline.
    marks.append(
        Highlight(idle_from, evidence["after"]["start_us"], "GPU idle after the copy")
    )
plot_timeline(synced.trace, step=step, highlights=marks, max_depth=4, title=synced.name)

# %%
# The copy to the host (``Memcpy DtoH``) is the last GPU work before the stretch; the CPU
# sits in ``cudaStreamSynchronize`` until it is done, and only then returns to Python and
# launches the rest of the step. The GPU waits for the whole way back. Everything the GPU had
# queued ahead of the sync is drained, so the GPU idles after the copy in every step (the
# list printed above); the rule reports the steps where that stretch reaches its threshold
# (the finding says how many: a short round trip can fall under it). It recurs: this is your
# code, and the fix is to read the value less often, or later.

if synced.has_gpu:
    claim(
        "in every recorded step the GPU idles after the copy to the host",
        len(idle_after_copy) == len(synced.trace.steps)
        and all(gap > 0 for _, gap in idle_after_copy),
        steps=len(synced.trace.steps),
        steps_with_idle=sum(gap > 0 for _, gap in idle_after_copy),
    )
    claim(
        "intra-step-gap finds the GPU idle after a host sync",
        evidence is not None and evidence["cause"] == "host sync",
        findings=len(synced_gaps),
    )
    claim(
        "without the item() the GPU never idles long enough for the rule",
        not free_gaps,
        findings=len(free_gaps),
    )
if synced.has_gpu and evidence is not None:
    claim(
        "the rule reports the idle stretch after the sync in more than one recorded step",
        len(evidence["steps_with_gap"]) > 1,
        steps_with_gap=len(evidence["steps_with_gap"]),
        steps=len(synced.trace.steps),
    )
    claim(
        "the last GPU work before the stretch is the copy to the host",
        evidence["before"]["name"].startswith("Memcpy DtoH"),
        before=evidence["before"]["name"],
    )
    claim(
        "the call launching the work after the sync returned only after the GPU had run dry",
        evidence["launched_after_idle_us"] > 0,
        launched_after_idle_us=evidence["launched_after_idle_us"],
    )

# %%
# The profiler's buffer request: once, if it shows
# ------------------------------------------------
# The post's case. The profiler collects GPU activity records in buffers that it hands to
# NVIDIA's CUPTI; when one fills up, it asks for another, and the trace shows the time as
# an ``Activity Buffer Request`` on the overhead row. A short run fills none after the
# first (see :doc:`plot_04_buffer_request_and_offset`); a longer one with many kernels
# can. We train a tiny transformer, a loop that launches many kernels in every step (the
# count is printed below).
#
# The profiler turns CUPTI on at the start of the schedule's ``warmup`` steps and drops
# what they recorded only at the end, so warm-up steps fill the buffers too, at no cost in
# trace size. Ten warm-up steps and twenty-two recorded ones put the filling of the first
# buffer inside the recording without keeping, and processing, every step before it.
# Below the kernel counts, every span on CUPTI's overhead row, with the step it fell in.
# CUPTI names each kind. Besides the request, a ``Buffer Flush`` is CUPTI's time flushing
# its activity records into the profiler's buffers: a cost of profiling too. Module and
# function loading rows (see :doc:`plot_02_cold_start`) are the driver loading kernel
# code, which a process pays with or without a profiler.


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab=1024, dim=256, layers=4):
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


model = TinyTransformer().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
batch = (16, 128) if device == "cuda" else (2, 32)
tokens = torch.randint(0, 1024, batch, device=device)
target = torch.randint(0, 1024, batch, device=device)


def train_step():
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


train = capture(
    train_step,
    name="tiny_transformer_train_w10a22",
    label="train_step",
    out_dir=trace_dir(),
    warmup_iters=3,
    wait=1,
    warmup=10 if device == "cuda" else 1,
    active=22 if device == "cuda" else 5,
)
recorded = train.trace.steps
print(f"recorded: ProfilerStep#{recorded[0].number} to #{recorded[-1].number}")
if train.has_gpu:
    per_step = collections.Counter(
        step.number
        for step in map(train.trace.step_of, train.trace.kernels)
        if step is not None
    )
    kernels = [per_step[step.number] for step in recorded]
    counts = f"{min(kernels)}" + (
        f" to {max(kernels)}" if max(kernels) > min(kernels) else ""
    )
    print(f"kernels per recorded step: {counts}")
    claim(
        "every recorded step launches at least 100 kernels",
        min(kernels) >= 100,
        otherwise=f"the fewest kernels in a recorded step is {min(kernels)}",
        fewest=min(kernels),
    )
requests = [s for s in train.trace.overhead if s.name == "Activity Buffer Request"]
# Every span of CUPTI's overhead row, the requests and whatever else it recorded there.
for span in train.trace.overhead:
    inside = train.trace.step_of(span)
    where = f"ProfilerStep#{inside.number}" if inside else "outside the steps"
    print(f"{span.name}: {span.dur:.1f} µs, in {where}")
if not requests:
    print("No Activity Buffer Request in this run", end="")
    print(": without a GPU there is no CUPTI." if not train.has_gpu else ".")
train_gaps = diagnose(train.trace, select=["intra-step-gap"])
findings_table(train_gaps, caption=train.name, rules=["intra-step-gap"])

# %%
# Each step's longest idle stretch of the GPU, as the rule measured it:

one_off = next((f for f in train_gaps if f.evidence["cause"] == "buffer request"), None)
if one_off is not None:
    numbers, longest = zip(*one_off.evidence["longest_idle_by_step_us"], strict=True)
    plot_per_step(
        numbers,
        {"longest GPU idle": longest},
        log=False,
        title=f"ProfilerStep#{one_off.evidence['step']} against the other steps",
    )
elif train.has_gpu:
    # An idle stretch between two activities of a step, no stream of the GPU running.
    longest_by_step: dict[int, float] = {}
    for g in gpu_gaps(train.trace):
        longest_by_step[g.step] = max(longest_by_step.get(g.step, 0.0), g.gap_us)
    numbers, longest = zip(*sorted(longest_by_step.items()), strict=True)
    plot_per_step(
        numbers,
        {"longest GPU idle": longest},
        log=False,
        title="No step stood out with a buffer request: each step's longest GPU idle",
    )
else:
    print("No GPU here: no GPU idle to plot.")

# %%
# The tallest bar is not necessarily the request's: the rule reports an idle stretch only
# for a cause the trace shows, a host sync that returned as the GPU ran dry, the profiler's
# buffer request, or work launched in time and held back. A stretch that ends because the
# CPU launched the next kernel late, with none of those in it, is CPU time between
# launches, which it leaves to the rows about CPU time (``overhead-bound``; ``cold-start``
# for the first step, ``slow-step`` for a later one). The run's longest idle stretch, how
# the rule reads it (:func:`~profiling_utils.rules.gpu_lane.idle_stretches`), whether the
# request overlaps it, and what the launching thread did meanwhile
# (:func:`~profiling_utils.measures.thread_activity`): the operators it ran (the outermost
# ones), how long no operator ran at all (Python between operators, or anything else the
# profiler does not record as an operator), and the labels open during it:

if train.has_gpu:
    longest_gap = max(idle_stretches(train.trace), key=lambda idle: idle.gap_us)
    idle_from, idle_to = longest_gap.before.end, longest_gap.after.start
    print(
        f"ProfilerStep#{longest_gap.step}: the GPU idled {longest_gap.gap_us:,.1f} µs, "
        f"from {idle_from:,.1f} to {idle_to:,.1f} µs"
    )
    print(f"How intra-step-gap reads it: {longest_gap.cause}")
    overlapped = any(r.start < idle_to and r.end > idle_from for r in requests)
    print(
        "A buffer request overlaps it."
        if overlapped
        else "No buffer request overlaps it."
    )
    launch = longest_gap.launch
    thread = train.trace.thread_name(launch.lane) or launch.lane.label
    print(
        fold_lines(
            f"The call that launched the next kernel, {launch.name} on thread {thread}, "
            f"began {launch.start - idle_from:,.1f} µs after the GPU ran dry."
        )
    )
    activity = thread_activity(train.trace, launch.lane, idle_from, idle_to)
    print("Its outermost operators that ran longest in the stretch:")
    for op, inside in activity.ops[:3]:
        print(f"  {op.name}: {inside:,.1f} µs of it")
    print(f"No operator ran for {activity.no_op_us:,.1f} µs of it.")
    labels = " > ".join(label.name for label in activity.labels) or "none"
    print(fold_lines(f"Labels open during it: {labels}."))

# %%
# The rule reports a step as a one-off only against the other steps: the idle stretch
# during the request must be at least ``GAP_REQUEST_RATIO`` times the median of the other
# steps' longest idle stretch (the ratio is printed below), and such stretches must show in
# at most a third of the steps (in more, they are the code's, not a one-off).
# Zoomed to that stretch, with the request on the overhead row; when no step stood out,
# zoomed to the request itself, to see what the GPU did meanwhile (every row of CUPTI's in
# view is highlighted with its name):

print(f"GAP_REQUEST_RATIO = {GAP_REQUEST_RATIO:g}")
in_steps = [r for r in requests if train.trace.step_of(r) is not None]
if one_off is not None:
    e = one_off.evidence
    idle_from = e["before"]["start_us"] + e["before"]["dur_us"]
    margin = 0.3 * e["gap_us"]
    plot_timeline(
        train.trace,
        window=(idle_from - margin, e["after"]["start_us"] + margin),
        highlights=[Highlight(idle_from, e["after"]["start_us"], "GPU idle")],
        max_depth=3,
        title=f"{train.name}: ProfilerStep#{e['step']}",
    )
elif in_steps:
    request = max(in_steps, key=lambda r: r.dur)
    margin = 0.3 * request.dur
    # The request, and any other row of CUPTI's beside it (a Buffer Flush), whole and named.
    rows = [
        o
        for o in train.trace.overhead
        if o.start < request.end + margin and o.end > request.start - margin
    ]
    plot_timeline(
        train.trace,
        window=(min(o.start for o in rows) - margin, max(o.end for o in rows) + margin),
        highlights=[Highlight(o.start, o.end, o.name) for o in rows],
        max_depth=3,
        title=f"{train.name}: ProfilerStep#{train.trace.step_of(request).number}",
    )
else:
    print("No request landed inside the recorded steps: nothing to zoom to.")

# %%
# A request holds the CPU thread that asked for it, not the GPU. The GPU goes on with
# what was queued before the request, and goes idle only if the request outlasts that
# queue, the next kernel then being launched after the GPU has run dry. That is likely
# when the loop is overhead-bound, the CPU taking longer to issue a step than the GPU
# takes to run it: the GPU then has little queued, and what stops the CPU soon stops the
# GPU. A short request, or a GPU with more work queued, leaves no gap. How long the
# request lasts varies from run to run; what it did in this one:

if train.has_gpu:
    idle_share = Distribution.of(
        [100 * t.gpu_idle_fraction for t in step_times(train.trace)], unit="%"
    )
    print(f"GPU idle share of each recorded step: {idle_share}")
    if one_off is not None:
        e = one_off.evidence
        print(
            fold_lines(
                f"The request in ProfilerStep#{e['step']} lasted "
                f"{e['request']['dur_us']:.1f} µs; the GPU sat idle {e['gap_us']:.1f} µs, "
                f"and the call launching the next kernel returned "
                f"{e['launched_after_idle_us']:.1f} µs after it ran dry: the profiler's gap, "
                "once, as the post says."
            )
        )
    elif in_steps:
        request = max(in_steps, key=lambda r: r.dur)
        busy = gpu_busy_us(train.trace, window=(request.start, request.end))
        idle_during = request.dur - busy
        number = train.trace.step_of(request).number
        print(
            fold_lines(
                f"The request in ProfilerStep#{number} lasted {request.dur:.1f} µs, and the "
                f"GPU was idle for {idle_during:.1f} µs of it."
            )
        )
        overlapping = [
            idle
            for idle in idle_stretches(train.trace)
            if idle.before.end < request.end and idle.after.start > request.start
        ]
        if overlapping:
            stretch = max(overlapping, key=lambda idle: idle.gap_us)
            others = statistics.median(
                gap
                for step_number, gap in longest_by_step.items()
                if step_number != number
            )
            print(
                fold_lines(
                    f"The longest idle stretch overlapping it lasted {stretch.gap_us:.1f} µs "
                    f"(read as {stretch.cause}): {stretch.gap_us / others:.2f} times the "
                    f"median of the other steps' longest idle stretch, {others:.1f} µs, "
                    f"{'shorter' if stretch.gap_us < others else 'longer'} than a typical step's."
                )
            )
        else:
            print(
                "No idle stretch of the GPU overlapped it: work was queued throughout."
            )
    claim(
        "the GPU was idle for more than half of the median recorded step",
        idle_share.median > 50,
        otherwise="the GPU was busy for at least half of the median recorded step",
        idle_share_percent=idle_share,
    )
    claim(
        "one Activity Buffer Request landed inside the recorded steps",
        len(in_steps) == 1,
        otherwise=f"{len(in_steps)} Activity Buffer Requests landed inside the steps",
        requests_in_steps=len(in_steps),
    )
    claim(
        "intra-step-gap reports the buffer request's step as a one-off",
        one_off is not None,
        otherwise="intra-step-gap does not single out a step with a buffer request in this run",
        buffer_request_findings=int(one_off is not None),
    )
    if one_off is not None:
        late_us = one_off.evidence["launched_after_idle_us"]
        claim(
            "the call launching the next kernel returned after the GPU ran dry: the request "
            "held the CPU thread, not the GPU",
            late_us > 0,
            launched_after_idle_us=late_us,
        )
        claim(
            "the idle stretch is longer than the request itself",
            one_off.evidence["gap_us"] > one_off.evidence["request"]["dur_us"],
            otherwise="the GPU still had work queued when the request began: the idle "
            "stretch is shorter than the request",
            gap_us=one_off.evidence["gap_us"],
            request_us=one_off.evidence["request"]["dur_us"],
        )

# %%
# Reading a gap inside a step
# ---------------------------
# - **Every step, after a host sync** (``item()``, printing a GPU value, ``nonzero``, a
#   blocking copy): your code. The GPU drains and waits for the CPU's next launch.
# - **Once, while an Activity Buffer Request holds the CPU**: the profiler. Recording more
#   steps, as the post does, tells such a one-off from a gap that recurs; a ``wait`` and
#   ``warmup`` in the schedule do not keep a mid-run request out. The request leaves a gap
#   of its own only if the GPU runs dry during it, and in a loop whose GPU already idles for
#   most of every step that gap may not stand out at all: the outputs above say whether it
#   did in this run.
# - **Once, with the next work launched before the GPU went idle**: something outside the
#   trace held the GPU back, such as another process on the same GPU; see
#   :doc:`plot_07_kernel_variance`.
# - **Every step, without a sync**: CPU launch time, the overhead-bound row's business
#   (:doc:`plot_01_overhead_vs_compute`).
# - **Once, without a sync or a request, the next launch late**: the CPU took longer than
#   usual between two launches, in an operator or outside any (Python between operators).
#   The CPU lane shows the operators, and the time none ran; the rule reports nothing, the
#   trace showing no cause for it to name (``slow-step`` names the step, and where its
#   extra time went, once it takes three times the others' median or more).
#
# The traces
# ----------

trace_links(synced)

# %%

trace_links(free)

# %%

trace_links(train)
