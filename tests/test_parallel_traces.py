"""The two-rank recordings of ``tests/fixtures/parallel/`` (see its README and
``scripts/record_parallel_traces.py``): the collectives of the common parallel recipes, read
rank by rank.

The expected figures are read from the raw JSON here, not from the model.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from profiling_utils import diagnose
from profiling_utils.ranks import cross_rank, rank_profile, trace_files
from profiling_utils.trace import load_trace

PARALLEL = Path(__file__).parent / "fixtures" / "parallel"


def events(recipe: str, rank: int) -> list[dict[str, Any]]:
    path = PARALLEL / recipe / f"rank{rank}.json.gz"
    return [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]]


def fired(recipe: str, rank: int, rule: str) -> list[Any]:
    return diagnose(PARALLEL / recipe / f"rank{rank}.json.gz", select=[rule])


def test_a_gemms_share_of_gpu_time_leaves_the_collectives_out() -> None:
    raw = events("ddp_amp", 0)
    work = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    compute = sum(e["dur"] for e in work if not e["name"].startswith("ncclDevKernel"))
    assert compute < 0.7 * sum(e["dur"] for e in work)  # the collectives weigh
    (hit,) = fired("ddp_amp", 0, "gemm-kernel")
    top = hit.evidence["kernels"][0]
    assert top["gpu_share"] == round(top["total_us"] / compute, 4)
    assert "of GPU time besides communication)" in hit.message


def test_the_final_sync_of_a_rank_whose_gpu_was_held_is_no_flush() -> None:
    # Rank 0's GPU ran every recorded activity inside the sync that closes the recording,
    # about 457 ms after their launches: it was held by what the trace does not hold.
    raw = events("alltoall", 0)
    (sync,) = [e for e in raw if e.get("name") == "cudaDeviceSynchronize"]
    work = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert all(sync["ts"] <= e["ts"] < sync["ts"] + sync["dur"] for e in work)
    (hit,) = fired("alltoall", 0, "sync-flush")
    assert hit.evidence["first_work_after_launch_us"] > 0.5 * sync["dur"]
    assert "not a flush" in hit.message and "the flush itself" not in hit.message


def test_a_host_sync_in_every_step_is_counted_where_it_left_no_idle() -> None:
    # GradScaler.step reads its inf check in every step; only in one did the sync wait for
    # the GPU, which had run dry before the others began.
    raw = events("ddp_amp", 0)
    steps = [e for e in raw if e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]  # fmt: skip
    syncs = [e for e in raw if e.get("name") == "cudaStreamSynchronize"]
    with_sync = {s["name"] for s in steps for e in syncs if s["ts"] <= e["ts"] < s["ts"] + s["dur"]}
    assert len(with_sync) == len(steps) == 4
    (hit,) = fired("ddp_amp", 0, "intra-step-gap")
    found = len(hit.evidence["steps_with_gap"])
    assert found < 4 and hit.evidence["steps_with_sync"] == [2, 3, 4, 5]
    assert hit.message.startswith(f"In {found} of 4 steps the GPU idles after a host sync")
    assert f"The thread makes this sync in 4 of the 4 steps; in {4 - found} of the others " in (
        hit.message
    )


def test_sends_pair_with_their_receives_by_the_peer_each_records() -> None:
    # Rank 0 (the first stage) sends each micro-batch's activations to rank 1 and receives
    # its gradients back. The k-th send from one rank to the other pairs with the k-th
    # receive there; the call that starts first waits for the other.
    def calls(rank: int, op: str) -> list[dict[str, Any]]:
        kernels = [e for e in events("pipeline", rank) if e.get("cat") == "kernel"]
        found = [e for e in kernels if e["args"].get("Collective name") == op]
        return sorted(found, key=lambda e: e["ts"])

    wait = {0: 0.0, 1: 0.0}
    buffered = 0
    for sender, receiver in ((0, 1), (1, 0)):
        sends, receives = calls(sender, "send"), calls(receiver, "recv")
        assert len(sends) == len(receives) == 16
        assert all(e["args"]["Dst Rank"] == receiver for e in sends)
        for send, receive in zip(sends, receives, strict=True):
            if send["ts"] + send["dur"] <= receive["ts"]:
                buffered += 1  # the data waited at the peer
                continue
            latest = max(send["ts"], receive["ts"])
            wait[sender] += latest - send["ts"]
            wait[receiver] += latest - receive["ts"]
    traces = trace_files([PARALLEL / "pipeline"])
    report = cross_rank([rank_profile(load_trace(path)) for path in traces])
    assert report.paired_sends == report.matched_collectives == 32
    rows = {row.rank: row for row in report.ranks}
    moved = sum(4 * e["args"]["In msg nelems"] for e in calls(0, "send") + calls(0, "recv"))
    assert rows[0].matched_bytes == rows[1].matched_bytes == moved == 64 * 2**20
    for rank in (0, 1):
        assert rows[rank].wait_us == pytest.approx(wait[rank], abs=0.01)
    assert wait[1] > 50 * wait[0]  # the second stage waits for the first
    assert report.straggler is not None and report.straggler.rank == 0
    assert any(f"in {buffered} the send ended before its receive began" in n for n in report.notes)
    (straggler,) = [f for f in report.findings if f.rule == "rank-straggler"]
    assert "of 32 sends and receives last" in straggler.message
    # A receive's wait is also the pipeline's own: the message says so where the matched
    # calls are sends and receives, and not where they are collectives.
    assert "(the pipeline's bubble)" in straggler.message
    alltoall = cross_rank(
        [rank_profile(load_trace(p)) for p in trace_files([PARALLEL / "alltoall"])]
    )
    (collective,) = [f for f in alltoall.findings if f.rule == "rank-straggler"]
    assert "bubble" not in collective.message


def test_a_straggler_that_moves_more_in_its_collectives_is_told() -> None:
    # Both ranks route three quarters of their tokens to rank 1: its all_to_all calls hold
    # three times rank 0's rows, and its expert does three times the work.
    def moved(rank: int) -> int:
        kernels = [e for e in events("alltoall", rank) if e.get("cat") == "kernel"]
        exchanges = sorted(
            (e for e in kernels if e["args"].get("Collective name") == "all_to_allv"),
            key=lambda e: e["ts"],
        )
        # Rank 1's first exchange: rank 0 entered it before rank 1's recording began (rank 1
        # started about 457 ms late), so it is not judged, and its bytes are not matched.
        return sum(
            4 * max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) for e in exchanges[1:]
        )

    traces = trace_files([PARALLEL / "alltoall"])
    report = cross_rank([rank_profile(load_trace(path)) for path in traces])
    rows = {row.rank: row for row in report.ranks}
    # The warm-up step's last exchange on rank 0 has no size and no partner: not matched.
    assert rows[1].matched_bytes == moved(1)
    assert rows[1].matched_bytes >= 1.25 * rows[0].matched_bytes
    (straggler,) = [f for f in report.findings if f.rule == "rank-straggler"]
    assert report.straggler is not None and report.straggler.rank == 1
    assert "In them it moves 168 MiB, the others 112 MiB" in straggler.message


def test_an_uneven_all_to_alls_bus_bandwidth_counts_what_crosses_to_other_ranks() -> None:
    # Rank 0 keeps a quarter of its rows and sends three quarters to rank 1, and receives
    # rank 1's quarter: 12 MiB cross in its busier direction, not (n-1)/n = half of 16 MiB.
    from statistics import median

    def crossing(rank: int) -> list[tuple[int, float]]:
        found = []
        for e in events("alltoall", rank):
            args = e.get("args", {})
            if e.get("cat") != "kernel" or args.get("Collective name") != "all_to_allv":
                continue
            moved = []
            for key, nelems in (("In split size", "In msg nelems"),
                                ("Out split size", "Out msg nelems")):  # fmt: skip
                rows = json.loads(args[key])
                moved.append((sum(rows) - rows[rank]) * args[nelems] // sum(rows) * 4)
            found.append((max(moved), e["dur"]))
        return found

    (hit,) = fired("alltoall", 0, "collective-bandwidth")
    top = hit.evidence["kinds"][0]
    calls = crossing(0)
    assert {moved for moved, _ in calls} == {12 * 2**20}
    assert top["median_busbw_gb_s"] == round(median(m / (d * 1e3) for m, d in calls), 2)
    assert top["median_busbw_gb_s"] > 0.5 * top["median_algbw_gb_s"]  # not the even split's
    assert top["uneven_peer_bytes"] == 12 * 2**20
    assert "splits uneven: 12 MiB of each call crosses" in hit.message
    # Rank 1 receives three quarters of its 24 MiB output: what an even split would send.
    (hit,) = fired("alltoall", 1, "collective-bandwidth")
    assert hit.evidence["kinds"][0]["uneven_peer_bytes"] is None
    assert "splits uneven" not in hit.message


def test_summary_sets_messages_of_one_operation_apart_by_size(capsys) -> None:
    # DDP's 4 MiB buckets (one holds the biases too) beside the 4 KiB all_reduce of the
    # scaler's inf check: one median bandwidth over all three would describe none of them.
    raw = events("ddp_amp", 0)
    sizes = sorted(
        {
            4 * e["args"]["In msg nelems"]
            for e in raw
            if e.get("cat") == "kernel" and e["args"].get("Collective name") == "allreduce"
        }
    )
    assert len(sizes) == 3
    status, out, _ = run_cli(capsys, "summary", str(PARALLEL / "ddp_amp" / "rank0.json.gz"))
    section = out.split("\nCommunication (", 1)[1].split("\n\n", 1)[0]
    assert status == 0 and "4,198,400 B" in section and "4,194,304 B" in section
    assert "4 KiB" in section


def test_sends_in_sub_groups_pair_by_the_global_ranks_they_record() -> None:
    # Rank 1 sends to rank 2 in the group [1, 2, 3], rank 2 to rank 3 in [2, 3]: each kernel
    # records its peer's global rank (Dst Rank, Src Rank) and its rank in the group (Rank).
    sends, in_group = {}, {}
    for rank in range(4):
        for e in events("subgroups", rank):
            if e.get("cat") == "kernel" and e["args"].get("Collective name") == "send":
                sends.setdefault((rank, e["args"]["Dst Rank"]), []).append(e)
            elif e.get("name") == "record_param_comms" and e["args"].get("Dst Rank") == 2:
                in_group[rank] = e["args"]["Rank"]
    assert set(sends) == {(1, 2), (2, 3)}
    assert in_group == {1: 1, 3: 0}  # rank 2 is the second of [1, 2, 3], the first of [2, 3]
    traces = trace_files([PARALLEL / "subgroups"])
    report = cross_rank([rank_profile(load_trace(path)) for path in traces])
    # Each step's batch between ranks 2 and 3 pairs a send and a receive each way.
    batches = sum(e.get("name") == "nccl:coalesced" and e["cat"] == "user_annotation"
                  for e in events("subgroups", 2))  # fmt: skip
    assert report.paired_sends == sum(map(len, sends.values())) + 2 * batches
    # Rank 1 sleeps before each send: rank 2 waits for it in its receives. It takes part in
    # its sends and the all_reduces, not in the calls between ranks 2 and 3.
    straggler = report.straggler
    assert straggler is not None and straggler.rank == 1
    assert straggler.joined == 4 + len(sends[1, 2]) < straggler.matched
    (finding,) = [f for f in report.findings if f.rule == "rank-straggler"]
    assert f"of the {straggler.joined} collectives, sends and receives it took part in" in (
        finding.message
    )
    assert "moves" not in finding.message  # the ranks met in different calls: no sizes set apart


def test_a_batch_of_sends_and_receives_is_read_off_the_ops_before_its_kernel() -> None:
    # Ranks 2 and 3 swap tensors with batch_isend_irecv: an isend and an irecv that launch no
    # kernel (record_param_comms each), then one SendRecv kernel under nccl:coalesced, with no
    # args of its own.
    from profiling_utils.comm import Transfer, collectives

    raw = events("subgroups", 2)
    coalesced = [
        e for e in raw if e.get("name") == "nccl:coalesced" and e["cat"] != "gpu_user_annotation"
    ]
    kernels = [e for e in raw if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    assert coalesced and len(kernels) == len(coalesced) + sum(
        "Collective name" in e["args"] for e in kernels
    )
    batches = [c for c in collectives(load_trace(PARALLEL / "subgroups" / "rank2.json.gz"))
               if c.op == "send_recv"]  # fmt: skip
    assert len(batches) == len(coalesced)
    assert {(c.group, c.group_size, c.bytes) for c in batches} == {("2", 2, 4 * 2**20)}
    assert {c.transfers for c in batches} == {
        (Transfer("send", 3, 4 * 2**20), Transfer("recv", 3, 4 * 2**20))
    }
    # Across ranks, each send of rank 2's batches pairs with a receive of rank 3's batches.
    profiles = [rank_profile(load_trace(p)) for p in trace_files([PARALLEL / "subgroups"])]
    three = [c for c in profiles[3].collectives if c.op == "send_recv"]
    assert [c.transfers for c in three] == [
        (("send", 2, k, 4 * 2**20), ("recv", 2, 2 * k + 1, 4 * 2**20)) for k in range(len(three))
    ]  # its receives from rank 2 count the one before each batch too


def test_a_rank_that_entered_the_recorded_steps_late_is_told() -> None:
    # Rank 1 of the all_to_all recording began its recorded steps about 457 ms after rank 0
    # (see the fixtures' README); the other recordings' ranks began theirs together.
    def first_step_ns(recipe: str, rank: int) -> tuple[int, float]:
        path = PARALLEL / recipe / f"rank{rank}.json.gz"
        document = json.loads(gzip.decompress(path.read_bytes()))
        steps = [e for e in document["traceEvents"] if e.get("cat") == "user_annotation"
                 and e["name"].startswith("ProfilerStep#")]  # fmt: skip
        first = min(steps, key=lambda e: int(e["name"].split("#")[1]))
        return document["baseTimeNanoseconds"], first["ts"]

    (base0, ts0), (base1, ts1) = first_step_ns("alltoall", 0), first_step_ns("alltoall", 1)
    late_us = (base1 - base0) / 1000 + ts1 - ts0
    assert late_us > 400_000
    report = cross_rank([rank_profile(load_trace(p)) for p in trace_files([PARALLEL / "alltoall"])])
    (finding,) = [f for f in report.findings if f.rule == "rank-late-start"]
    assert finding.evidence["start_after_earliest_us"] == {
        "rank 0": 0.0, "rank 1": pytest.approx(late_us, abs=0.01)
    }  # fmt: skip
    assert f"rank 1 began its recorded steps {late_us:,.0f} µs after rank 0" in finding.message
    nccl = PARALLEL.parent / "nccl"
    for directory in [PARALLEL / r for r in ("pipeline", "ddp_amp", "subgroups")] + [
        nccl / r for r in ("stalled", "balanced", "overlapped")
    ]:
        traces = trace_files([directory])
        report = cross_rank([rank_profile(load_trace(p)) for p in traces])
        assert not [f for f in report.findings if f.rule == "rank-late-start"], directory


def test_a_rank_longer_in_all_but_its_first_step_makes_no_spread() -> None:
    # DDP with AMP: rank 1's host windows (ProfilerStep#N) run longer than rank 0's in every
    # step but the first, where rank 0's warm-up is the longer: not longer step by step.
    def step_durations(rank: int) -> list[float]:
        return [e["dur"] for e in events("ddp_amp", rank) if e.get("cat") == "user_annotation"
                and e["name"].startswith("ProfilerStep#")]  # fmt: skip

    differences = [b - a for a, b in zip(step_durations(0), step_durations(1), strict=True)]
    assert differences[0] < 0 < min(differences[1:])
    report = cross_rank([rank_profile(load_trace(p)) for p in trace_files([PARALLEL / "ddp_amp"])])
    assert not any(f.rule in {"rank-step-spread", "rank-straggler"} for f in report.findings)


def test_a_straggler_longer_in_every_step_says_so() -> None:
    # The all_to_all recording: rank 1, which moves more, is longer in each of the 4 steps.
    def step_durations(rank: int) -> dict[str, float]:
        return {e["name"]: e["dur"] for e in events("alltoall", rank) if e.get("cat") ==
                "user_annotation" and e["name"].startswith("ProfilerStep#")}  # fmt: skip

    zero, one = step_durations(0), step_durations(1)
    differences = [one[name] - zero[name] for name in zero.keys() & one.keys()]
    assert len(differences) == 4 and min(differences) > 0
    report = cross_rank([rank_profile(load_trace(p)) for p in trace_files([PARALLEL / "alltoall"])])
    (straggler,) = [f for f in report.findings if f.rule == "rank-straggler"]
    assert "Its steps are longer than the other rank's in each of the 4 steps they share" in (
        straggler.message
    )
    (spread,) = [f for f in report.findings if f.rule == "rank-step-spread"]
    assert spread.evidence["median_difference_us"] == pytest.approx(statistics.median(differences))


def test_a_pipelines_batches_pair_send_by_receive_across_four_ranks() -> None:
    # Each batch's sends and receives are the record_param_comms ops before its kernel.
    def batched(rank: int) -> list[list[tuple[str, int]]]:
        found, pending = [], []
        for e in sorted(events("pipeline_batched", rank), key=lambda e: e.get("ts", 0)):
            args = e.get("args", {})
            if e.get("name") == "record_param_comms" and args.get("Collective name") in (
                "send",
                "recv",
            ):
                key = "Dst Rank" if args["Collective name"] == "send" else "Src Rank"
                pending.append((args["Collective name"], args[key]))
            elif e.get("name") == "nccl:coalesced" and e["cat"] == "user_annotation":
                found.append(pending)
                pending = []
        return found

    traces = trace_files([PARALLEL / "pipeline_batched"])
    profiles = [rank_profile(load_trace(path)) for path in traces]
    for profile in profiles:
        calls = [c for c in profile.collectives if c.op == "send_recv"]
        raw = batched(profile.rank)
        assert [[(op, peer) for op, peer, _, _ in c.transfers] for c in calls] == raw
    # Stage 3 began its recorded steps 595 ms after the others. Stage 2's batch that sends
    # to it ran 580 ms, ending before stage 3's receive of that message began: it waited
    # for room at stage 3, freed before stage 3's recording began. That kernel is left out;
    # stage 1, held in turn until stage 2 took its message, waited for a rank that was
    # itself held: that wait is blamed on no rank. Stage 1, which sleeps 1 ms before each
    # batch, is the one the others wait for.
    report = cross_rank(profiles)
    (late,) = [f for f in report.findings if f.rule == "rank-late-start"]
    assert "rank 3 began its recorded steps" in late.message
    assert late.evidence["unexplained_kernels"] > 0
    assert report.straggler is not None and report.straggler.rank == 1
    # Rank 2's steps 2 and 3 are longer than rank 1's (held in a send to the late rank 3):
    # rank 1's are longer than the others' median, step by step, not than each of theirs.
    durations = {p.rank: {s.step: s.cpu_us for s in p.steps} for p in profiles}
    assert durations[2][3] > durations[1][3]
    assert all(
        own > statistics.median(durations[r][step] for r in (0, 2, 3))
        for step, own in durations[1].items()
    )
    (straggler,) = [f for f in report.findings if f.rule == "rank-straggler"]
    assert "Its steps are longer than the others' median in each of the 4 steps" in (
        straggler.message
    )
    (skew,) = [f for f in report.findings if f.rule == "collective-skew"]
    assert skew.evidence["unattributed_wait_us"] > 0.5 * sum(skew.evidence["wait_us"].values())
    assert "for ranks that were themselves held in earlier communication" in skew.message
    # Stages 0 and 1 read together: stage 0 only sends to stage 1. NCCL buffers each send
    # at stage 1, but only once stage 1 has taken the one before, so stage 0 waits for it.
    report = cross_rank(profiles[:2])
    assert not [f for f in report.findings if f.rule == "rank-late-start"]
    rows = {row.rank: row for row in report.ranks}
    assert rows[0].wait_us > 0.5 * rows[0].collective_us
    assert any("of these sends waited instead for the peer" in note for note in report.notes)
    assert report.straggler is not None and report.straggler.rank == 1


def test_collectives_replayed_by_a_cuda_graph_line_up_across_ranks() -> None:
    # Each all_reduce is named by its kernel alone; the k-th on each rank is one call.
    def starts(rank: int) -> list[float]:
        path = PARALLEL / "tp_graph" / f"rank{rank}.json.gz"
        document = json.loads(gzip.decompress(path.read_bytes()))
        base = document["baseTimeNanoseconds"] / 1000
        return sorted(
            base + e["ts"]
            for e in document["traceEvents"]
            if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_AllReduce")
        )

    zero, one = starts(0), starts(1)
    assert len(zero) == len(one) == 128  # 4 steps x 8 replays x 4 layers
    traces = trace_files([PARALLEL / "tp_graph"])
    profiles = [rank_profile(load_trace(path)) for path in traces]
    assert {(c.op, c.bytes) for p in profiles for c in p.collectives} == {("all_reduce", None)}
    report = cross_rank(profiles)
    assert report.matched_collectives == 128
    rows = {row.rank: row for row in report.ranks}
    expected = sum(max(b - a, 0.0) for a, b in zip(zero, one, strict=True))
    assert rows[0].wait_us == pytest.approx(expected, abs=1.0)
    assert rows[0].wait_us > 32 * 400  # most of rank 1's 32 sleeps of 500 µs
    assert report.straggler is not None and report.straggler.rank == 1


def test_the_stragglers_evidence_holds_the_calls_its_message_counts() -> None:
    # Four ranks in sub-groups: rank 1 took part in 8 of the 20 calls matched across them.
    report = cross_rank(
        [rank_profile(load_trace(p)) for p in trace_files([PARALLEL / "subgroups"])]
    )
    (finding,) = [f for f in report.findings if f.rule == "rank-straggler"]
    assert report.straggler is not None
    joined, matched = report.straggler.joined, report.matched_collectives
    assert joined < matched
    assert (finding.evidence["joined"], finding.evidence["matched_collectives"]) == (
        joined,
        matched,
    )
    assert f"it reached {finding.evidence['last_arrivals']} of the {joined} " in finding.message
