"""
Several ranks: who waits for whom?
==================================

*One rank of a distributed job is slow. Its trace, read alone, looks fine; another rank's
trace is full of communication. Which rank is the straggler?*

A distributed job writes one trace per rank, and a collective such as ``all_reduce``
finishes on no rank before every rank has joined it. So when one rank is late, the others
sit in the collective's kernel waiting for it: their traces show long collectives and
"exposed communication", while the late rank's own collectives are short. We read real
two-rank recordings with :mod:`profiling_utils.ranks` and :mod:`profiling_utils.comm`,
from Python and from the command line, and find the rank the others wait for.
"""

# %%
# Three recordings of two ranks
# -----------------------------
#
# This site is built on a single GPU, so this page cannot record a distributed run itself.
# It reads traces recorded by ``scripts/record_nccl_fixtures.py`` on two NVIDIA H200 of one
# host, which the repository ships in ``tests/fixtures/nccl``; each trace names its GPU and
# the NCCL version (printed below). The outputs below are the same on any machine that
# builds the page, GPU or not. Each step does five 2048 × 2048 bf16 matrix products (their
# shapes are printed below too), then an ``all_reduce`` of 32 MiB (a gradient) and one of
# 4 KiB (a loss), then waits for the GPU:
#
# - ``balanced``: both ranks do the same work;
# - ``stalled``: rank 1 also sleeps 10 ms on the host before its ``all_reduce`` calls, every
#   step (``record_function("host_stall")``), as a slow data loader or logging on one rank
#   would;
# - ``overlapped``: the 32 MiB ``all_reduce`` runs beside the products (the last section).
#
# We copy them into this page's trace folder, each file named after its run, so that they
# can be downloaded at the end.

import collections
import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import profiling_utils
from profiling_utils import diagnose, load_trace
from profiling_utils.claims import claim
from profiling_utils.comm import collectives, comm_overlap
from profiling_utils.measures import (
    kernel_footprint,
    kernel_launches,
    resident_blocks_per_sm,
)
from profiling_utils.ranks import cross_rank, rank_profile, trace_files
from profiling_utils.render import (
    findings_table,
    fold_lines,
    plot_rank_step,
    trace_dir,
    trace_links,
)
from profiling_utils.rules.communication import OVERLAP_MIN_FRACTION
from profiling_utils.stats import Distribution, clearly_greater

# The recordings live in the repository, beside the package (this page runs from a checkout).
recorded = Path(profiling_utils.__file__).resolve().parents[1] / "tests/fixtures/nccl"
runs = ("balanced", "stalled", "overlapped")
for run in runs:
    shutil.rmtree(trace_dir() / run, ignore_errors=True)
    (trace_dir() / run).mkdir(parents=True)
    for source in sorted((recorded / run).glob("*.json.gz")):
        shutil.copyfile(source, trace_dir() / run / f"{run}_{source.name}")

traces = {
    run: [load_trace(path) for path in trace_files([trace_dir() / run])] for run in runs
}
for trace in traces["stalled"]:
    info = trace.metadata["distributedInfo"]
    print(
        f"{trace.path.name}: rank {trace.rank} of "
        f"{trace.world_size}, {trace.devices[0].name}, NCCL {info['nccl_version']}, "
        f"{len(trace.steps)} steps"
    )
stalled0 = traces["stalled"][0]
products = [op for op in stalled0.find("aten::mm") if stalled0.step_of(op)]
shapes = collections.Counter(
    (
        " × ".join(map(str, op.args.get("Input Dims") or [])),
        ", ".join(sorted(set(op.args.get("Input type") or []))),
    )
    for op in products
)
for (dims, types), count in sorted(shapes.items()):
    print(
        f"{stalled0.path.name}: {count / len(stalled0.steps):g} aten::mm per step, "
        f"{dims}, {types}"
    )
recorded_on = {trace.devices[0].name for run in runs for trace in traces[run]}
claim(
    "every trace this page reads was recorded on an NVIDIA H200 (the machine that built "
    "the page only reads them)",
    recorded_on == {"NVIDIA H200"},
    gpus=", ".join(sorted(recorded_on)),
)

# %%
# :func:`~profiling_utils.ranks.trace_files` expands a directory into its per-rank traces
# (``rank2`` before ``rank10``), and each trace records its rank and the job's size in
# ``distributedInfo``.
#
# One rank at a time
# ------------------
#
# First what each trace of the stalled run says on its own: the median step,
# the 32 MiB ``all_reduce`` kernels found by :func:`~profiling_utils.comm.collectives`, and
# rank 1's own stall.

MiB = 2**20


def median_us(spans):
    return statistics.median(span.dur for span in spans)


def gradient_reduce_us(trace):
    """Median duration of the trace's 32 MiB all_reduce kernels."""
    kernels = [c.span for c in collectives(trace) if c.bytes == 32 * MiB]
    return median_us(kernels)


rank0, rank1 = traces["stalled"]
step_us = {t.rank: median_us(step.span for step in t.steps) for t in (rank0, rank1)}
reduce_us = {t.rank: gradient_reduce_us(t) for t in (rank0, rank1)}
stall_us = median_us(rank1.find("host_stall"))
for rank in (0, 1):
    print(
        f"rank {rank}: median step {step_us[rank]:8,.0f} µs, "
        f"32 MiB all_reduce kernel {reduce_us[rank]:8,.0f} µs"
    )
print(f"rank 1's host_stall: {stall_us:,.0f} µs per step")

claim(
    "both ranks' median steps are within 5% of each other",
    abs(step_us[0] - step_us[1]) <= 0.05 * max(step_us.values()),
    rank0_step_us=step_us[0],
    rank1_step_us=step_us[1],
)
claim(
    "rank 0's 32 MiB all_reduce kernels last at least 10× as long as rank 1's",
    reduce_us[0] >= 10 * reduce_us[1],
    rank0_all_reduce_us=reduce_us[0],
    rank1_all_reduce_us=reduce_us[1],
)
claim(
    "rank 0's 32 MiB all_reduce lasts at least 80% of rank 1's host stall",
    reduce_us[0] >= 0.8 * stall_us,
    rank0_all_reduce_us=reduce_us[0],
    stall_us=stall_us,
)

# %%
# Both ranks take about as long per step, although only rank 1 sleeps: rank 0 spends the
# same time inside its ``all_reduce`` kernel, which cannot finish before rank 1 joins. The
# kernel's duration on rank 0 is mostly waiting; on rank 1, which arrives last and finds
# its peer ready, it is the transfer alone.
#
# One step of both ranks on one clock
# -----------------------------------
#
# Each trace writes a ``baseTimeNanoseconds``, and a span's ``ts`` counts from it: base
# plus ``ts`` is the host's clock, which the ranks of one host share (here both traces
# carry the same base, a claim below), so
# :func:`~profiling_utils.ranks.rank_profile` can put both ranks on one time axis.
# :func:`~profiling_utils.render.plot_rank_step` draws one step:

profiles = {
    run: [rank_profile(t) for t in traces[run]] for run in ("balanced", "stalled")
}
first, second = profiles["stalled"]
apart = [
    abs(b.start_us - a.start_us) for a, b in zip(first.steps, second.steps, strict=True)
]
print(f"the ranks' steps start at most {max(apart):,.0f} µs apart")
claim(
    "both ranks count time from the same baseTimeNanoseconds, and every step starts "
    "on both within 1% of rank 0's median step",
    first.clock_base_ns == second.clock_base_ns and max(apart) <= 0.01 * step_us[0],
    largest_gap_us=max(apart),
)
plot_rank_step(profiles["stalled"], step=4, title="stalled run, both ranks")

# %%
# The two ranks' steps begin together: each step ends with a collective that neither
# rank leaves before the other has joined, then a synchronisation. Rank 0's
# ``all_reduce`` kernel runs until rank 1's, which starts some 10 ms later, is done: the
# two kernels end together, and the long bar on rank 0 is the wait for rank 1. In every
# step, on the shared clock:


def gradient_reduces(trace):
    """(start, end) of each 32 MiB all_reduce kernel, µs on the host's clock."""
    origin = trace.base_time_ns / 1000 + trace.origin_us
    return [
        (origin + c.span.start, origin + c.span.end)
        for c in collectives(trace)
        if c.bytes == 32 * MiB
    ]


pairs = list(zip(gradient_reduces(rank0), gradient_reduces(rank1), strict=True))
later_start = [start1 - start0 for (start0, _), (start1, _) in pairs]
end_apart = [abs(end1 - end0) for (_, end0), (_, end1) in pairs]
print(
    f"rank 1's kernel starts {min(later_start):,.0f}–{max(later_start):,.0f} µs later"
)
print(f"the two kernels end {min(end_apart):,.0f}–{max(end_apart):,.0f} µs apart")
claim(
    "in every step the two ranks' 32 MiB all_reduce kernels end within 1% of rank 0's "
    "kernel time of each other",
    max(end_apart) <= 0.01 * reduce_us[0],
    largest_gap_us=max(end_apart),
    rank0_all_reduce_us=reduce_us[0],
)

# %%
# Diagnosed alone, each rank tells a different story
# --------------------------------------------------
#
# The cheatsheet's communication rules on each trace of the stalled run:

comm_rules = ["exposed-communication", "comm-overlap", "collective-bandwidth"]
alone = {t.rank: diagnose(t, select=comm_rules) for t in (rank0, rank1)}
findings_table(alone[0], caption="stalled, rank 0", rules=comm_rules)

# %%

findings_table(alone[1], caption="stalled, rank 1", rules=comm_rules)

# %%
# ``exposed-communication`` fires on rank 0: communication with no compute beside it
# fills most of its step. On rank 1 it stays silent. ``collective-bandwidth`` reports the
# bandwidth each rank's 32 MiB ``all_reduce`` reached: its *algorithm bandwidth*, the
# tensor's bytes over the kernel's time (NCCL's *bus bandwidth* scales it by
# 2(n-1)/n for an all_reduce of n ranks, which is 1 for two, so the findings show the two
# equal). On rank 0 it is that of a kernel
# that mostly waited, far below rank 1's, which is that of the transfer alone. Read alone,
# rank 0 looks communication-bound and rank 1 looks healthy: the opposite of where the
# time is lost.


def fired(findings, rule):
    return any(f.rule == rule for f in findings)


def gradient_bandwidth(findings):
    """Median algorithm bandwidth (GB/s) of the 32 MiB all_reduce, from the evidence."""
    (finding,) = (f for f in findings if f.rule == "collective-bandwidth")
    (kind,) = (k for k in finding.evidence["kinds"] if k["bytes"] == 32 * MiB)
    return kind["median_algbw_gb_s"]


bandwidth = {rank: gradient_bandwidth(alone[rank]) for rank in (0, 1)}
print(
    f"32 MiB all_reduce, algorithm bandwidth: rank 0 {bandwidth[0]:.1f} GB/s, "
    f"rank 1 {bandwidth[1]:.1f} GB/s"
)
claim(
    "exposed-communication fires on rank 0 of the stalled run, not on rank 1",
    fired(alone[0], "exposed-communication")
    and not fired(alone[1], "exposed-communication"),
)
claim(
    "collective-bandwidth fires on both ranks, rank 0's at least 10× below rank 1's",
    bandwidth[0] * 10 <= bandwidth[1],
    rank0_gb_s=bandwidth[0],
    rank1_gb_s=bandwidth[1],
)

# %%
# In the balanced run the 32 MiB ``all_reduce`` takes about as long as rank 1's in the
# stalled one. The communication is still exposed, since nothing computes beside it, but
# for a smaller share of the step:

for trace in traces["balanced"]:
    (finding,) = diagnose(trace, select=["exposed-communication"])
    share = finding.evidence["median_exposed_share"]
    balanced_us = gradient_reduce_us(trace)
    print(
        f"balanced, rank {trace.rank}: 32 MiB all_reduce {balanced_us:,.0f} µs, "
        f"exposed communication {share:.0%} of the step"
    )
    claim(
        f"in the balanced run, rank {trace.rank}'s 32 MiB all_reduce is within 2× of "
        "stalled rank 1's",
        balanced_us <= 2 * reduce_us[1],
        balanced_us=balanced_us,
        stalled_rank1_us=reduce_us[1],
    )
    claim(
        f"exposed-communication fires on rank {trace.rank} of the balanced run, "
        "exposed for less than half of the step with the median exposed share",
        share < 0.5,
        exposed_share=share,
    )

# %%
# ``comm-overlap`` is the rule for the opposite case, a collective hidden behind compute,
# as data-parallel training arranges. It stays silent on the balanced and stalled runs'
# four traces: :func:`~profiling_utils.comm.comm_overlap` measures how much of the
# communication ran beside a compute kernel, and here the collectives only start once the
# matrix products they reduce have finished. The last section reads a run where it fires.

for run in ("balanced", "stalled"):
    for trace in traces[run]:
        overlap = comm_overlap(trace).total
        print(
            f"{run + ',':9} rank {trace.rank}: {overlap.communication_us:8,.0f} µs of "
            f"communication, {overlap.overlapped_us:,.0f} µs of it beside compute"
        )
        claim(
            f"comm-overlap stays silent on rank {trace.rank} ({run}): no compute runs "
            "beside its collectives",
            overlap.overlapped_us == 0 and not fired(diagnose(trace), "comm-overlap"),
            overlapped_us=overlap.overlapped_us,
        )

# %%
# Across ranks: the straggler
# ---------------------------
#
# :func:`~profiling_utils.ranks.cross_rank` lines the ranks' collectives up (the k-th
# ``all_reduce`` of a process group is the same call on every rank) and splits each
# kernel's time into **wait**, from the rank's own arrival until the last rank arrives,
# and **transfer**, the rest. The rank that arrives last, again and again, is the one the
# others wait for.


def print_ranks(report):
    """Each rank's time in collectives, split into wait and transfer."""
    for row in report.ranks:
        print(
            f"{row.label}: {row.collective_us:8,.0f} µs in collectives = "
            f"{row.wait_us:8,.0f} wait + {row.transfer_us:5,.0f} transfer; "
            f"last at {row.last_arrivals} of {report.matched_collectives}"
        )


report = cross_rank(profiles["stalled"])
print("stalled run")
print_ranks(report)
straggler = report.straggler
print(
    f"straggler: {straggler.label}, the others waited {straggler.caused_wait_us:,.0f} µs"
)

short_rank = min(reduce_us, key=reduce_us.get)
claim(
    "the straggler is rank 1, the rank whose all_reduce kernels are short",
    straggler.rank == 1 == short_rank,
    straggler=straggler.label,
    shorter_all_reduce=f"rank {short_rank}",
)
claim(
    "rank 1 reached every matched collective last",
    straggler.last_arrivals == report.matched_collectives > 0,
    last_arrivals=straggler.last_arrivals,
    matched=report.matched_collectives,
)
balanced = cross_rank(profiles["balanced"])
print("\nbalanced run")
print_ranks(balanced)
print(f"straggler: {balanced.straggler or 'none'}")
for finding in balanced.findings:
    print(fold_lines(f"{finding.rule}: {finding.message}"))
claim(
    "in the balanced run each rank reaches some collectives last, and no straggler is named",
    balanced.straggler is None and all(row.last_arrivals > 0 for row in balanced.ranks),
)
claim(
    "in the balanced run each rank waits for at least a quarter of its time in collectives",
    all(row.wait_us >= 0.25 * row.collective_us for row in balanced.ranks),
    **{
        f"rank{row.rank}_wait_share": row.wait_us / row.collective_us
        for row in balanced.ranks
    },
)

# %%
# In the stalled run, rank 1's collectives are all transfer, and it arrived last at every
# one; rank 0's are almost all wait. The straggler's steps are about as long as the
# others' (the median steps printed above): the time it loses is paid by the others, inside
# their collectives. So look at
# the rank with the *short* collectives, and at what it does before them (here, the
# ``host_stall``).
#
# Waiting alone does not make a straggler. In the balanced run both ranks wait too, for a
# large part of their time in collectives, but the later rank is not always the same one:
# each reaches some collectives last, and ``collective-skew`` reads the waits as spread
# across the ranks rather than one late rank. What names a straggler is arriving last
# again and again. ``rank-step-spread``, an ``info`` finding, says when one rank's steps
# are longer than another's in every step both recorded (single steps of lock-step ranks
# jitter against each other: one is long on one rank, the next on the other, and that is
# no spread). With no straggler named, the rank with the longer steps is not late: it may
# spend the difference waiting for the other in their collectives (``collective-skew``
# names the rank that waits most).
#
# The same from the command line
# ------------------------------
#
# ``summary`` given a directory (or several files) loads each rank's trace in its own
# process and prints the per-rank table and the cross-rank findings. Its table is wider
# than this page, so we ask for ``--json`` and print the keys we need:

command = ["summary", "--json", "stalled"]
print("$ python -m profiling_utils " + " ".join(command))
done = subprocess.run(
    [sys.executable, "-m", "profiling_utils", *command],
    cwd=trace_dir(),
    capture_output=True,
    text=True,
    check=True,
)
summary = json.loads(done.stdout)["cross_rank"]
keys = ("median_step_us", "collective_us", "wait_us", "transfer_us", "last_arrivals")
print(f"{'label':8}" + "".join(f"{key:>16}" for key in keys))
for row in summary["ranks"]:
    print(f"{row['label']:8}" + "".join(f"{row[key]:16,.0f}" for key in keys))
print("straggler:", {key: summary["straggler"][key] for key in ("label", "basis")})
print("findings:")
for finding in summary["findings"]:
    print(fold_lines(f"  {finding['rule']}: {finding['message']}", max_lines=5))
claim(
    "the CLI names the same straggler",
    summary["straggler"]["rank"] == straggler.rank,
    cli=summary["straggler"]["label"],
)
idle_rank1_us = next(row["gpu_idle_us"] for row in summary["ranks"] if row["rank"] == 1)
stalls_us = sum(span.dur for span in rank1.find("host_stall"))
claim(
    "rank 1's GPU idles for at least as long as its host stalls last in all",
    idle_rank1_us >= stalls_us,
    rank1_gpu_idle_us=idle_rank1_us,
    host_stalls_us=stalls_us,
)
claim(
    "the CLI gives three cross-rank findings: rank-straggler, collective-skew, rank-gpu-idle",
    sorted(f["rule"] for f in summary["findings"])
    == ["collective-skew", "rank-gpu-idle", "rank-straggler"],
    rules=[f["rule"] for f in summary["findings"]],
)
idle_finding = next(f for f in summary["findings"] if f["rule"] == "rank-gpu-idle")
claim(
    "rank-gpu-idle counts rank 0's wait in its all_reduces as busy, not working",
    "waiting in collectives for a late rank" in idle_finding["message"],
    rank0_wait_us=idle_finding["evidence"]["others_wait_us"],
)

# %%
# Three cross-rank findings, their messages printed above: ``rank-straggler`` names
# rank 1; ``collective-skew`` sums the wait and the transfer over both ranks; and
# ``rank-gpu-idle`` names the rank whose GPU idles longest, rank 1, whose GPU has nothing
# to do while its host sleeps (the claim above sets its idle time against its stalls).
# Rank 0's GPU idles little, not because it works, but because its all_reduce kernels run
# while they wait for rank 1: the finding says how much of its busy time that is.
# ``python -m profiling_utils diagnose --select
# exposed-communication,comm-overlap,collective-bandwidth stalled/stalled_rank0.json.gz``
# gives the single-rank findings above for one trace (without ``--select``, every rule's).
#
# Communication beside compute
# ----------------------------
#
# In the ``overlapped`` run both ranks do the balanced run's work, but the gradient's
# ``all_reduce`` starts, asynchronously, before the products, as DDP starts a bucket's
# while the backward pass goes on. The step of ``scripts/record_nccl_fixtures.py``
# differs from the balanced one in these lines (``record_function`` labels left out):
#
# .. code-block:: diff
#
#    +    work = dist.all_reduce(grad, async_op=True)  # queued on NCCL's stream
#         y = x @ w
#         for _ in range(4):
#             y = y @ w
#    -    dist.all_reduce(grad)
#    +    work.wait()  # the compute stream waits for the all_reduce
#         dist.all_reduce(small)
#
# The products run on the compute stream while the ``all_reduce`` runs on NCCL's.

overlapped = traces["overlapped"]
overlap_rules = ["comm-overlap", "exposed-communication"]
findings_table(
    diagnose(overlapped[0], select=overlap_rules),
    caption="overlapped, rank 0",
    rules=overlap_rules,
)

# %%
# ``comm-overlap`` fires, and ``exposed-communication`` still does: compute hides part of
# the communication, not all of it. On both ranks, the communication time split as
# :func:`~profiling_utils.comm.comm_overlap` splits it, and the exposed part per step
# beside the balanced run's:


def exposed_per_step(trace):
    """Exposed communication of each step, µs."""
    return Distribution.of([s.exposed_us for s in comm_overlap(trace).steps], unit="µs")


for trace, balanced_trace in zip(overlapped, traces["balanced"], strict=True):
    total = comm_overlap(trace).total
    share = total.overlap_fraction
    print(
        f"overlapped, rank {trace.rank}: {total.communication_us:,.0f} µs of "
        f"communication = {total.overlapped_us:,.0f} beside compute ({share:.0%}) + "
        f"{total.exposed_us:,.0f} exposed"
    )
    exposed = exposed_per_step(trace)
    exposed_balanced = exposed_per_step(balanced_trace)
    print(f"  exposed per step, overlapped: {exposed}")
    print(f"  exposed per step, balanced:   {exposed_balanced}")
    findings = diagnose(trace, select=["comm-overlap", "exposed-communication"])
    claim(
        f"comm-overlap and exposed-communication both fire on rank {trace.rank} of the "
        "overlapped run",
        fired(findings, "comm-overlap") and fired(findings, "exposed-communication"),
    )
    claim(
        f"on rank {trace.rank}, compute runs beside at least {OVERLAP_MIN_FRACTION:.0%} "
        "of the communication in the overlapped run, beside none in the balanced and "
        "stalled runs",
        share >= OVERLAP_MIN_FRACTION
        and all(
            comm_overlap(traces[run][trace.rank]).total.overlapped_us == 0
            for run in ("balanced", "stalled")
        ),
        overlap_share=share,
    )
    claim(
        f"rank {trace.rank}'s exposed communication per step is clearly smaller in the "
        "overlapped run than in the balanced one",
        clearly_greater(exposed_balanced, exposed),
        overlapped=exposed,
        balanced=exposed_balanced,
    )

# %%
# About two fifths of each rank's communication ran beside compute, and on each rank the
# median step exposed less communication than the balanced run's median step. The rest
# still runs with no compute beside it, which is why ``exposed-communication`` still fires;
# the overlapped traces below show where, the NCCL stream's kernels beside the compute
# stream's.
#
# Overlap is not free: a product that runs beside the ``all_reduce`` shares the GPU with
# NCCL's kernel, which holds SMs for as long as it runs. The products' kernels of each
# rank, those that ran beside a collective against those that ran alone:

beside, alone = {}, {}
for trace in overlapped:
    beside_comm = [(k.start, k.end) for k in trace.kernels if k.is_communication]
    products = [
        k.kernel
        for k in kernel_launches(trace)
        if k.op is not None and k.op.name == "aten::mm"
    ]
    overlapping = [
        k for k in products if any(s < k.end and k.start < e for s, e in beside_comm)
    ]
    beside[trace.rank] = Distribution.of([k.dur for k in overlapping], unit="µs")
    alone[trace.rank] = Distribution.of(
        [k.dur for k in products if k not in overlapping], unit="µs"
    )
    print(f"rank {trace.rank}: product beside a collective {beside[trace.rank]}")
    print(f"        product alone               {alone[trace.rank]}")
    claim(
        f"on rank {trace.rank}, a product beside the all_reduce took clearly longer than "
        "one alone",
        clearly_greater(beside[trace.rank], alone[trace.rank]),
        otherwise=f"on rank {trace.rank}, products beside the all_reduce and alone took "
        "alike, within the spread",
        beside=beside[trace.rank],
        alone=alone[trace.rank],
    )

# %%
# How much slower, and why? Each kernel records its grid, its block, and the shared
# memory and registers each block takes; the trace's device properties give what one SM
# has (:func:`~profiling_utils.measures.resident_blocks_per_sm` sets one against the
# other). An SM that holds one of NCCL's blocks has no room left for a product's block
# when the two blocks together need more shared memory or registers than the SM has:


def blocks(kernel):
    footprint = kernel_footprint(kernel)
    return footprint, math.prod(footprint.grid) if footprint.grid else None


first = overlapped[0]
device = first.devices[0]
product = next(
    k.kernel
    for k in kernel_launches(first)
    if k.op is not None and k.op.name == "aten::mm"
)
all_reduce = max(first.communication, key=lambda k: k.dur)
(product_fp, product_blocks), (nccl_fp, nccl_blocks) = (
    blocks(product),
    blocks(all_reduce),
)
per_sm = {
    "product": resident_blocks_per_sm(product_fp, device),
    "all_reduce": resident_blocks_per_sm(nccl_fp, device),
}
for name, (fp, grid_blocks) in (
    ("product", (product_fp, product_blocks)),
    ("all_reduce", (nccl_fp, nccl_blocks)),
):
    print(
        f"{name}: {grid_blocks} blocks of {math.prod(fp.block)} threads, each with "
        f"{fp.shared_memory_bytes:,} B of shared memory\n    and "
        f"{fp.registers_per_thread} registers per thread: at most {per_sm[name]} per SM"
    )
print(
    f"one SM of the {device.name}: {device.shared_memory_per_sm_bytes:,} B of shared "
    f"memory, {device.registers_per_sm:,} registers; {device.compute_units} SMs"
)
side_by_side = (
    product_fp.shared_memory_bytes + nccl_fp.shared_memory_bytes
    <= device.shared_memory_per_sm_bytes
    and product_fp.registers_per_thread * math.prod(product_fp.block)
    + nccl_fp.registers_per_thread * math.prod(nccl_fp.block)
    <= device.registers_per_sm
)
print(f"one block of each fits on an SM together: {'yes' if side_by_side else 'no'}")
held = 0 if side_by_side else math.ceil(nccl_blocks / per_sm["all_reduce"])
waves_alone = math.ceil(product_blocks / (device.compute_units * per_sm["product"]))
waves_beside = math.ceil(
    product_blocks / ((device.compute_units - held) * per_sm["product"])
)
print(
    f"SMs NCCL's blocks hold: {held}; the product's waves alone: {waves_alone}, "
    f"beside the all_reduce: {waves_beside}"
)
claim(
    "beside the all_reduce, the product's blocks need two waves of the SMs left to them, "
    "where alone they need one",
    (waves_alone, waves_beside) == (1, 2),
    otherwise="beside the all_reduce, the product's blocks need no more waves than alone",
    alone=waves_alone,
    beside=waves_beside,
)
claim(
    "on both ranks, a product beside the all_reduce takes 1.5 to 2.5 times as long as "
    "one alone, about what a second wave costs",
    all(1.5 <= beside[rank].median / alone[rank].median <= 2.5 for rank in beside),
    **{
        f"rank_{rank}_ratio": round(beside[rank].median / alone[rank].median, 2)
        for rank in beside
    },
)

# %%
# Alone, the product fills the GPU in one wave, one block per SM. Beside the
# ``all_reduce``, an SM that holds one of NCCL's blocks has no room for one of the
# product's, the SMs left are fewer than the product's blocks, and the blocks left over
# wait for a second wave: the product takes about twice as long (the last claim). The
# collective's blocks hold their SMs by the shared memory and registers they take, for
# as long as the collective runs.
#
# Did the overlap pay? The median step of each run, per rank, and the GPU's idle time
# per step (the step's GPU window less its busy time):

step_medians, idle_medians = {}, {}
for run in ("balanced", "overlapped"):
    profiles_of_run = [rank_profile(t) for t in traces[run]]
    step_medians[run] = [
        Distribution.of([s.cpu_us for s in p.steps], unit="µs") for p in profiles_of_run
    ]
    idle_medians[run] = [
        Distribution.of([s.gpu_window_us - s.gpu_busy_us for s in p.steps], unit="µs")
        for p in profiles_of_run
    ]
    for rank, (steps, idle) in enumerate(
        zip(step_medians[run], idle_medians[run], strict=True)
    ):
        print(f"{run:10s} rank {rank}: step {steps}")
        print(f"{'':10s}         GPU idle {idle}")
claim(
    "on both ranks, a step of the overlapped run is clearly shorter than a step of the "
    "balanced run",
    all(
        clearly_greater(balanced, overlapped_steps)
        for balanced, overlapped_steps in zip(
            step_medians["balanced"], step_medians["overlapped"], strict=True
        )
    ),
    otherwise="on some rank, a step of the overlapped run is not clearly shorter than a "
    "step of the balanced run",
)
saved = {
    rank: (
        step_medians["balanced"][rank].median - step_medians["overlapped"][rank].median,
        exposed_per_step(traces["balanced"][rank]).median
        - exposed_per_step(overlapped[rank]).median,
    )
    for rank in (0, 1)
}
for rank, (step_saved, exposed_saved) in saved.items():
    print(
        f"rank {rank}: the median step {step_saved:,.1f} µs shorter, the median exposed "
        f"communication {exposed_saved:,.1f} µs less"
    )
claim(
    "on both ranks, the median step shrank by more than the median exposed communication, "
    "and the median GPU idle time per step shrank too",
    all(step_saved > exposed_saved for step_saved, exposed_saved in saved.values())
    and all(
        o.median < b.median
        for b, o in zip(
            idle_medians["balanced"], idle_medians["overlapped"], strict=True
        )
    ),
    otherwise="on some rank, the median step did not shrink by more than the median "
    "exposed communication, or the median GPU idle time did not shrink",
)

# %%
# A step holds more than its communication and its products: also the time the GPU
# idles between them, waiting for the host, which the overlapped run changes too (it
# launches its work in another order). Where the last claim holds, the overlapped steps
# are shorter than the exposed communication alone explains, the GPU idles less in them,
# and the products' second waves are paid out of that. Steps vary within a run (the
# IQRs above, a hundred µs wide for some), so read these medians as sizes, not as exact
# sums.
#
# The traces
# ----------
#
# The stalled run's two traces, to open side by side in Perfetto:

trace_links(trace_dir() / "stalled" / "stalled_rank0.json.gz")

# %%

trace_links(trace_dir() / "stalled" / "stalled_rank1.json.gz")

# %%
# And the overlapped run's, where the ``all_reduce`` and the products share the GPU:

trace_links(trace_dir() / "overlapped" / "overlapped_rank0.json.gz")

# %%

trace_links(trace_dir() / "overlapped" / "overlapped_rank1.json.gz")
