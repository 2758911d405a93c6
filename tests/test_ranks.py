"""Several ranks of one run: parallel loading, the cross-rank analysis and the CLI around it.

The synthetic runs are built so that the answer is known from their construction: every rank
computes, then joins an all-reduce; a rank that stalls on the host joins late, and the others'
GPUs sit in the all-reduce kernel until it arrives.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import statistics
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import (
    BASE_TIME_NS,
    FIXTURES,
    complete_event,
    flow_pair,
    run_cli,
    trace_document,
    write_trace,
)

from profiling_utils.cli import build_parser
from profiling_utils.comm import comm_overlap
from profiling_utils.loading import MAX_TRACE_BYTES_ENV
from profiling_utils.ranks import (
    analyse_files,
    cross_rank,
    rank_profile,
    recorded_rank,
    trace_files,
)
from profiling_utils.trace import load_trace

SAMPLED = FIXTURES / "ranks" / "sampled"
NCCL = FIXTURES / "nccl"

STEP_US = 1000.0
COMPUTE_US = 400.0
TRANSFER_US = 100.0


def iteration_events(
    index: int, rank: int, t: float, arrival: float, end: float, op_name: str
) -> list[dict[str, Any]]:
    """One iteration of a rank at ``t``: a GEMM, then an all-reduce from ``arrival`` to
    ``end``, each with its launch."""
    compute, collective = 100 * index + 10 * rank + 1, 100 * index + 10 * rank + 2
    return [
        complete_event("cudaLaunchKernel", "cuda_runtime", t + 5, 5, correlation=compute),
        complete_event("gemm", "kernel", t + 20, COMPUTE_US, pid=0, tid=7,
                       correlation=compute, device=0, stream=7),
        complete_event("cudaLaunchKernel", "cuda_runtime", arrival - 10, 5,
                       correlation=collective),
        complete_event("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "kernel",
                       arrival, end - arrival, pid=0, tid=20, correlation=collective,
                       device=0, stream=20, **{"Collective name": op_name,
                       "Process Group Name": "0", "Group size": 2}),
    ]  # fmt: skip


def rank_events(
    rank: int,
    *,
    steps: int = 3,
    stall_us: float = 0.0,
    late_us: float = 0.0,
    shift_us: float = 0.0,
    op_name: str = "allreduce",
) -> list[dict[str, Any]]:
    """One rank's steps: a compute kernel, then an all-reduce.

    ``late_us`` is how much later than the first rank the last rank reaches the all-reduce;
    this rank reaches it ``stall_us`` late (a host stall before its launch). Every rank's
    all-reduce ends at the same time: ``late_us + TRANSFER_US`` after the on-time start.
    ``shift_us`` is subtracted from every ts (a trace with a later ``baseTimeNanoseconds``).
    """
    events = []
    for index in range(steps):
        t = index * STEP_US - shift_us
        compute, collective = 100 * index + 10 * rank + 1, 100 * index + 10 * rank + 2
        arrival = t + 20 + COMPUTE_US + stall_us
        end = t + 20 + COMPUTE_US + late_us + TRANSFER_US
        events += [
            complete_event(f"ProfilerStep#{index}", "user_annotation", t, STEP_US - 1),
            *iteration_events(index, rank, t, arrival, end, op_name),
            *flow_pair(compute, t + 5, t + 20),
            *flow_pair(collective, arrival - 10, arrival),
        ]
    return events


def write_rank(directory: Path, rank: int, events: list[dict[str, Any]], **top: Any) -> Path:
    """Write rank ``rank``'s trace, ``rank-N.json``, into ``directory`` with its
    ``distributedInfo``."""
    info = {"backend": "nccl", "rank": rank, "world_size": 2}
    document = trace_document(events, distributedInfo=info, **top)
    return write_trace(directory / f"rank-{rank}.json", document)


@pytest.fixture
def stalled_run(tmp_path: Path) -> Path:
    """Two ranks; rank 1 stalls 300 µs on the host before each all-reduce."""
    write_rank(tmp_path, 0, rank_events(0, late_us=300))
    write_rank(tmp_path, 1, rank_events(1, stall_us=300, late_us=300))
    return tmp_path


def profiles(directory: Path) -> list[Any]:
    return [rank_profile(load_trace(path)) for path in trace_files([directory])]


# -- the analysis --------------------------------------------------------------------------------


def test_straggler_is_the_rank_the_others_wait_for(stalled_run: Path) -> None:
    report = cross_rank(profiles(stalled_run))
    assert report.matched_collectives == 3
    assert report.straggler is not None
    assert (report.straggler.rank, report.straggler.basis) == (1, "collectives")
    assert report.straggler.last_arrivals == 3
    assert report.straggler.caused_wait_us == pytest.approx(3 * 300)
    # The stalled rank's steps are no longer than the others': the step table cannot tell.
    assert {s.slowest for s in report.steps} <= {"rank 0", "rank 1"}
    assert all(s.spread == 0 for s in report.steps)
    assert [f.rule for f in report.findings][:2] == ["rank-straggler", "collective-skew"]
    assert "rank 1 is the straggler" in report.findings[0].message
    # The wait it caused, over the other rank's steps' time: a ratio (named _over_, not a
    # share), as the collectives it counts need not lie inside the steps.
    (other,) = (row for row in report.ranks if row.rank == 0)
    ratio = report.findings[0].evidence["caused_wait_over_others_step_time"]
    assert ratio == pytest.approx(3 * 300 / (other.median_step_us * other.steps))


def test_the_rank_whose_gpu_idles_most_is_set_against_the_others_only(tmp_path: Path) -> None:
    # Rank 1 stalls on the host before each all-reduce; its GPU waits 300 µs more per step.
    for rank, stall in ((0, 0.0), (1, 300.0), (2, 0.0)):
        write_rank(tmp_path, rank, rank_events(rank, stall_us=stall, late_us=300))
    three = cross_rank(profiles(tmp_path))
    idle = {r.label: r.gpu_idle_us for r in three.ranks}
    (finding,) = [f for f in three.findings if f.rule == "rank-gpu-idle"]
    assert idle["rank 1"] > 1.25 * idle["rank 0"] and idle["rank 0"] == idle["rank 2"]
    # The others' GPUs are busy in the all-reduce, waiting for rank 1: 300 µs a step each.
    assert finding.message == (
        f"rank 1's GPU idles {idle['rank 1']:,.0f} µs, against a median of "
        f"{idle['rank 0']:,.0f} µs on the other 2 ranks; 1,800 µs of the other ranks' GPU "
        "busy time is waiting in collectives for a late rank (busy, not working)."
    )
    (tmp_path / "rank-2.json").unlink()
    two = cross_rank(profiles(tmp_path))
    (finding,) = [f for f in two.findings if f.rule == "rank-gpu-idle"]
    assert f"against {idle['rank 0']:,.0f} µs on the other rank; 900 µs of the other rank's" in (
        finding.message
    )


def test_gpu_idle_of_a_rank_that_waits_for_none(tmp_path: Path) -> None:
    # Rank 1 runs no GEMM, so its GPU idles more, and no rank is late to a collective:
    # nothing of the other rank's busy time is waiting.
    write_rank(tmp_path, 0, rank_events(0))
    write_rank(tmp_path, 1, [e for e in rank_events(1) if e["name"] != "gemm"])
    (finding,) = [f for f in cross_rank(profiles(tmp_path)).findings if f.rule == "rank-gpu-idle"]
    assert finding.message.endswith("on the other rank.")
    assert finding.evidence["others_wait_us"] == 0


def test_gpu_idle_is_not_compared_between_ranks_without_steps(tmp_path: Path) -> None:
    # Serving ranks record no steps: each one's idle runs over its own recording, which
    # one kernel 20 ms before the others stretches. No finding may set them against each other.
    for rank in (0, 1):
        events = [e for e in rank_events(rank) if not e["name"].startswith("ProfilerStep#")]
        if rank == 1:
            events.append(complete_event("early", "kernel", -20_000, 5, pid=0, tid=7))
        write_rank(tmp_path, rank, events)
    report = cross_rank(profiles(tmp_path))
    assert [r.steps for r in report.ranks] == [0, 0]
    assert "rank-gpu-idle" not in {f.rule for f in report.findings}


def test_wait_and_transfer_split_each_rank_collectives(stalled_run: Path) -> None:
    rows = {row.rank: row for row in cross_rank(profiles(stalled_run)).ranks}
    assert rows[0].collective_us == pytest.approx(3 * (300 + TRANSFER_US))
    assert rows[0].wait_us == pytest.approx(3 * 300)
    assert rows[0].transfer_us == pytest.approx(3 * TRANSFER_US)
    assert rows[1].wait_us == pytest.approx(0)
    assert rows[1].transfer_us == pytest.approx(3 * TRANSFER_US)
    assert (rows[0].last_arrivals, rows[1].last_arrivals) == (0, 3)


def test_balanced_run_has_no_straggler(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, rank_events(0))
    write_rank(tmp_path, 1, rank_events(1))
    report = cross_rank(profiles(tmp_path))
    assert report.straggler is None
    assert [row.wait_us for row in report.ranks] == [0, 0]
    assert report.findings == []


def steps_only(first: int, step_us: float) -> list[dict[str, Any]]:
    """Three steps numbered from ``first``, each one op long, no collective."""
    return [
        event
        for n in range(first, first + 3)
        for event in (
            complete_event(f"ProfilerStep#{n}", "user_annotation", 2000.0 * n, step_us),
            complete_event("aten::add", "cpu_op", 2000.0 * n + 1, step_us - 2),
        )
    ]


def test_without_collectives_the_straggler_is_told_by_common_steps(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, steps_only(0, 1000.0))
    write_rank(tmp_path, 1, steps_only(0, 1300.0))
    report = cross_rank(profiles(tmp_path))
    assert report.straggler is not None
    assert (report.straggler.rank, report.straggler.basis) == (1, "steps")
    assert [f.rule for f in report.findings if f.rule == "rank-straggler"] == ["rank-straggler"]


def steps_lasting(durations: list[float]) -> list[dict[str, Any]]:
    """Steps numbered from 0, back to back, each one op long, no collective."""
    events, start = [], 0.0
    for n, step_us in enumerate(durations):
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", start, step_us),
            complete_event("aten::add", "cpu_op", start + 1, step_us - 2),
        ]
        start += step_us
    return events


def test_one_long_step_on_each_rank_in_turn_is_not_a_spread(tmp_path: Path) -> None:
    # Lock-step ranks whose step boundaries jitter: step 1 is long on rank 0, step 2 on
    # rank 1 (30% apart), but neither rank's steps are longer than the other's.
    write_rank(tmp_path, 0, steps_lasting([1000, 1300, 1000, 1010, 990]))
    write_rank(tmp_path, 1, steps_lasting([1000, 1000, 1300, 990, 1010]))
    report = cross_rank(profiles(tmp_path))
    assert max(s.spread for s in report.steps) > 0.25
    assert report.straggler is None
    assert not any(f.rule == "rank-step-spread" for f in report.findings)


@pytest.mark.parametrize(
    "durations",
    [
        ([3000, 1000], [4000, 2000]),  # a warm-up step, then twice as long: two steps
        ([1000, 1020, 980, 1010, 990], [1500, 1530, 1470, 1515, 1485]),
        ([1000], [1300]),  # one step each (schedule(active=1))
    ],
)
def test_steps_longer_on_one_rank_in_every_step_make_the_straggler(
    tmp_path: Path, durations: tuple[list[float], list[float]]
) -> None:
    write_rank(tmp_path, 0, steps_lasting(durations[0]))
    write_rank(tmp_path, 1, steps_lasting(durations[1]))
    report = cross_rank(profiles(tmp_path))
    assert report.straggler is not None
    assert (report.straggler.rank, report.straggler.basis) == (1, "steps")


def test_steps_longer_on_one_rank_only_in_some_steps_make_no_straggler(tmp_path: Path) -> None:
    # The same medians as a rank 20% slower, but rank 0 is the longer in two of five steps.
    write_rank(tmp_path, 0, steps_lasting([1000, 1150, 850, 1120, 880]))
    write_rank(tmp_path, 1, steps_lasting([1200, 1050, 1350, 1080, 1320]))
    report = cross_rank(profiles(tmp_path))
    assert report.straggler is None
    assert not any(f.rule in {"rank-straggler", "rank-step-spread"} for f in report.findings)


def test_traces_without_a_common_step_name_no_straggler(tmp_path: Path) -> None:
    # Two unrelated traces (a real case: a GPU trace's 92 µs steps beside a CPU-only trace's
    # 2,674 µs one): no step number in both, so no step times to compare.
    write_rank(tmp_path, 0, steps_only(0, 1000.0))
    write_rank(tmp_path, 1, steps_only(10, 1300.0))
    report = cross_rank(profiles(tmp_path))
    assert report.straggler is None and report.steps == []
    assert not any(f.rule == "rank-straggler" for f in report.findings)
    assert any("no step number is in two traces" in note for note in report.notes)


def test_traces_that_record_no_rank_and_share_no_collective_are_only_tabled(
    tmp_path: Path,
) -> None:
    # ``summary`` over a page's three unrelated traces named the longest-stepped one the
    # straggler and its GPU the idlest rank's. The same steps with ranks recorded are
    # judged (above); without them and without a collective, nothing says they are one run.
    for name, step_us in (("a", 1000.0), ("b", 1300.0)):
        write_trace(tmp_path / f"{name}.json", trace_document(steps_only(0, step_us)))
    report = cross_rank(profiles(tmp_path))
    assert [row.label for row in report.ranks] == ["a.json", "b.json"]
    assert len(report.steps) == 3  # the table is kept
    assert report.straggler is None and report.findings == []
    assert any("shown side by side" in note for note in report.notes)


def test_ranks_line_up_on_base_time_plus_ts(tmp_path: Path) -> None:
    # Rank 1's profiler started 1 ms later: its ts are 1000 µs smaller for the same moments.
    write_rank(tmp_path, 0, rank_events(0, late_us=300))
    write_rank(
        tmp_path,
        1,
        rank_events(1, stall_us=300, late_us=300, shift_us=1000),
        baseTimeNanoseconds=BASE_TIME_NS + 1_000_000,
    )
    report = cross_rank(profiles(tmp_path))
    assert report.straggler is not None and report.straggler.rank == 1
    assert report.ranks[0].wait_us == pytest.approx(3 * 300)


def test_old_traces_line_up_on_absolute_ts(tmp_path: Path) -> None:
    epoch_us = 1_682_725_898_000_000.0
    write_rank(
        tmp_path, 0, rank_events(0, late_us=300, shift_us=-epoch_us), baseTimeNanoseconds=None
    )
    write_rank(
        tmp_path, 1, rank_events(1, stall_us=300, late_us=300, shift_us=-epoch_us),
        baseTimeNanoseconds=None,
    )  # fmt: skip
    report = cross_rank(profiles(tmp_path))
    assert {p.clock for p in profiles(tmp_path)} == {"absolute ts"}
    assert report.straggler is not None and report.straggler.rank == 1
    assert report.ranks[0].wait_us == pytest.approx(3 * 300, abs=1)  # float µs near 1.7e15


def test_sends_and_receives_pair_only_by_a_recorded_peer(tmp_path: Path) -> None:
    # Rank 0 sends to rank 1, which posts its receive 300 µs late (a host stall).
    def run(peer: bool) -> Any:
        sends = rank_events(0, late_us=300, op_name="send")
        receives = rank_events(1, stall_us=300, late_us=300, op_name="recv")
        if peer:
            for events, key, other in ((sends, "Dst Rank", 1), (receives, "Src Rank", 0)):
                for event in events:
                    if event.get("cat") == "kernel" and event["name"].startswith("nccl"):
                        event["args"][key] = other
        write_rank(tmp_path, 0, sends)
        write_rank(tmp_path, 1, receives)
        return cross_rank(profiles(tmp_path))

    report = run(peer=False)  # a send pairs with a receive, not with the other rank's send
    assert [row.collectives for row in report.ranks] == [3, 3]
    assert report.matched_collectives == 0 and report.straggler is None
    assert any("6 send(s) and receive(s) not paired" in note for note in report.notes)
    report = run(peer=True)
    assert report.paired_sends == report.matched_collectives == 3
    assert report.ranks[0].wait_us == pytest.approx(3 * 300, abs=1)
    assert report.ranks[1].wait_us == pytest.approx(0, abs=1)
    assert report.straggler is not None and report.straggler.rank == 1
    assert "it reached 3 of 3 sends and receives last" in report.findings[0].message


def test_sends_in_a_sub_group_pair_by_the_global_ranks_they_record(tmp_path: Path) -> None:
    # Ranks 1 and 2 of a group [1, 2] (a pipeline's stages once data parallelism splits the
    # world): Dst Rank and Src Rank are global ranks, Rank the peer's rank in the group.
    sends = rank_events(1, late_us=300, op_name="send")
    receives = rank_events(2, stall_us=300, late_us=300, op_name="recv")
    for events, fields in (
        (sends, {"Dst Rank": 2, "Rank": 1}),
        (receives, {"Src Rank": 1, "Rank": 0}),
    ):
        for event in events:
            if event.get("cat") == "kernel" and event["name"].startswith("nccl"):
                event["args"].update(fields, **{"Process Group Ranks": "[1, 2]"})
    info = {"backend": "nccl", "world_size": 3}
    for rank, events in ((1, sends), (2, receives)):
        document = trace_document(events, distributedInfo={**info, "rank": rank})
        write_trace(tmp_path / f"rank-{rank}.json", document)
    report = cross_rank(profiles(tmp_path))
    assert report.paired_sends == 3
    assert [row.rank for row in report.ranks] == [1, 2]
    assert report.straggler is not None and report.straggler.rank == 2


def batch_events(rank: int, peers: dict[str, int], world: int, stall_us: float = 0.0) -> list:
    """One rank's three steps, each a ``batch_isend_irecv``: a send to ``peers["send"]`` and a
    receive from ``peers["recv"]``, where given, recorded with no kernel of their own, then
    one kernel under ``nccl:coalesced`` that ends at the same time on every rank."""
    events = []
    for index in range(3):
        t, correlation = index * STEP_US, 100 * index + 1
        arrival = t + 100 + stall_us
        sides = [(op, key) for op, key in (("send", "Dst Rank"), ("recv", "Src Rank"))
                 if op in peers]  # fmt: skip
        events += [
            complete_event(f"ProfilerStep#{index}", "user_annotation", t, STEP_US - 1),
            *(
                complete_event("record_param_comms", "cpu_op", t + 10 + 20 * k, 10,
                               **{"Collective name": op, "Process Group Name": "0",
                                  "Process Group Ranks": str(list(range(world))),
                                  "In msg nelems": 1024, "Out msg nelems": 1024,
                                  "dtype": "Float", key: peers[op]})
                for k, (op, key) in enumerate(sides)
            ),
            complete_event("nccl:coalesced", "user_annotation", arrival - 20, 15),
            complete_event("cudaLaunchKernel", "cuda_runtime", arrival - 15, 5,
                           correlation=correlation),
            complete_event("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "kernel",
                           arrival, t + 100 + 300 + 50 - arrival, pid=0, tid=20,
                           correlation=correlation, device=0, stream=20),
            *flow_pair(correlation, arrival - 15, arrival),
        ]  # fmt: skip
    return events


def write_batches(directory: Path, peers: list[dict[str, int]], late_rank: int) -> None:
    info = {"backend": "nccl", "world_size": len(peers)}
    for rank, mine in enumerate(peers):
        events = batch_events(rank, mine, len(peers), 300.0 if rank == late_rank else 0.0)
        write_trace(directory / f"rank-{rank}.json",
                    trace_document(events, distributedInfo={**info, "rank": rank}))  # fmt: skip


def test_a_batchs_sends_and_receives_pair_with_the_peers_they_record(tmp_path: Path) -> None:
    # Two ranks swap tensors in one batch each step; rank 1 reaches it 300 µs late.
    write_batches(tmp_path, [{"send": 1, "recv": 1}, {"send": 0, "recv": 0}], late_rank=1)
    found = profiles(tmp_path)
    assert [(c.op, c.bytes, c.transfers) for c in found[0].collectives] == [
        ("send_recv", 4096, (("send", 1, k, 4096), ("recv", 1, k, 4096))) for k in range(3)
    ]
    report = cross_rank(found)
    assert report.paired_sends == report.matched_collectives == 6  # both ways, three steps
    # One kernel per batch: rank 0 waits once per step, not once per send and receive.
    assert report.ranks[0].wait_us == pytest.approx(3 * 300, abs=1)
    assert report.ranks[1].wait_us == pytest.approx(0, abs=1)
    assert report.straggler is not None and report.straggler.rank == 1


def test_a_pipelines_batches_wait_only_for_their_own_peers(tmp_path: Path) -> None:
    # Four stages, each receiving from the one before and sending to the next in one batch;
    # the last stage arrives 300 µs late. Only stage 2, which sends to it, waits for it: by
    # position alone the four batches would be one call, and stages 0 and 1 would wait too.
    peers = [{"send": 1}, {"recv": 0, "send": 2}, {"recv": 1, "send": 3}, {"recv": 2}]
    write_batches(tmp_path, peers, late_rank=3)
    report = cross_rank(profiles(tmp_path))
    assert report.paired_sends == 3 * 3
    waits = [row.wait_us for row in report.ranks]
    assert waits == pytest.approx([0, 0, 3 * 300, 0], abs=1)
    assert report.straggler is not None and report.straggler.rank == 3


def p2p_events(op: str, peer: int, kernels: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """One step per kernel: a send to (or receive from) ``peer`` at ``(start, duration)``."""
    events = []
    for index, (start, duration) in enumerate(kernels):
        events += [
            complete_event(f"ProfilerStep#{index}", "user_annotation", index * 1000.0, 999),
            complete_event("cudaLaunchKernel", "cuda_runtime", start - 10, 5,
                           correlation=index + 1),
            complete_event("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "kernel",
                           start, duration, pid=0, tid=20, correlation=index + 1, device=0,
                           stream=20, **{"Collective name": op, "Process Group Name": "0",
                           "Group size": 2, "In msg nelems": 2**20, "dtype": "Float",
                           ("Dst Rank" if op == "send" else "Src Rank"): peer}),
            *flow_pair(index + 1, start - 10, start),
        ]  # fmt: skip
    return events


def test_a_send_held_until_the_peer_took_an_earlier_message_waits_for_it(
    tmp_path: Path,
) -> None:
    # Each 4 MiB send ends before its own receive begins (NCCL buffered it at the peer), but
    # only once the peer has taken the message before it, which filled NCCL's buffer there:
    # sends 1 and 2 wait 300 µs for that.
    write_rank(tmp_path, 0, p2p_events("send", 1, [(k * 1000.0, 600.0) for k in range(3)]))
    write_rank(tmp_path, 1, p2p_events("recv", 0, [(k * 1000.0 + 1300, 10.0) for k in range(3)]))
    report = cross_rank(profiles(tmp_path))
    assert report.paired_sends == 3
    assert report.ranks[0].wait_us == pytest.approx(2 * 300, abs=0.01)
    assert report.ranks[0].transfer_us == pytest.approx(3 * 600 - 2 * 300, abs=0.01)
    assert report.ranks[1].wait_us == 0
    assert report.straggler is not None and report.straggler.rank == 1
    assert any(
        "in 3 the send ended before its receive began" in note
        and "2 of these sends waited instead for the peer to take an earlier message" in note
        for note in report.notes
    )
    # Messages of 4 KiB do not fill NCCL's buffer at the peer: nothing held them.
    small = p2p_events("send", 1, [(k * 1000.0, 600.0) for k in range(3)])
    for event in small:
        if event.get("cat") == "kernel":
            event["args"]["In msg nelems"] = 1024
    write_rank(tmp_path, 0, small)
    report = cross_rank(profiles(tmp_path))
    assert [row.wait_us for row in report.ranks] == [0, 0]
    write_rank(tmp_path, 0, p2p_events("send", 1, [(k * 1000.0, 600.0) for k in range(3)]))
    # A send whose peer took the earlier message before it began was not held.
    write_rank(tmp_path, 1, p2p_events("recv", 0, [(k * 1000.0 + 700, 10.0) for k in range(3)]))
    report = cross_rank(profiles(tmp_path))
    assert [row.wait_us for row in report.ranks] == [0, 0]
    assert not any("waited instead" in note for note in report.notes)


def test_a_wait_for_a_rank_held_in_its_previous_collective_is_blamed_on_whom_it_waited_for(
    tmp_path: Path,
) -> None:
    # Rank 1 reaches its all_reduce with rank 0 300 µs late (group "1"); rank 0, held there
    # until rank 1 came, reaches its next all_reduce, with rank 2 (group "2"), 400 µs after
    # rank 2. Rank 2's wait is rank 1's doing, not rank 0's.
    kernels = {
        0: [("1", 100.0, 400.0), ("2", 505.0, 50.0)],
        1: [("1", 400.0, 100.0)],
        2: [("2", 105.0, 450.0)],
    }
    info = {"backend": "nccl", "world_size": 3}
    for rank, calls in kernels.items():
        events = [complete_event("ProfilerStep#0", "user_annotation", 0, 1_000)]
        for n, (group, start, duration) in enumerate(calls, start=1):
            events += [
                complete_event("cudaLaunchKernel", "cuda_runtime", start - 20, 5, correlation=n),
                complete_event("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "kernel",
                               start, duration, pid=0, tid=20, correlation=n, device=0,
                               stream=20, **{"Collective name": "allreduce",
                               "Process Group Name": group, "Group size": 2}),
                *flow_pair(n, start - 20, start),
            ]  # fmt: skip
        write_trace(tmp_path / f"rank-{rank}.json",
                    trace_document(events, distributedInfo={**info, "rank": rank}))  # fmt: skip
    report = cross_rank(profiles(tmp_path))
    waits = {row.rank: row.wait_us for row in report.ranks}
    assert waits == pytest.approx({0: 300.0, 1: 0.0, 2: 400.0})
    assert report.straggler is not None and report.straggler.rank == 1
    assert report.straggler.caused_wait_us == pytest.approx(700.0)


def test_mixed_clocks_are_not_lined_up(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, rank_events(0, late_us=300))
    write_rank(tmp_path, 1, rank_events(1, stall_us=300, late_us=300), baseTimeNanoseconds=None)
    report = cross_rank(profiles(tmp_path))
    assert report.matched_collectives == 0
    assert all(row.wait_us is None for row in report.ranks)
    assert any("keep time differently" in note for note in report.notes)


@pytest.mark.parametrize(
    "info", [None, {"backend": "nccl"}], ids=["no distributedInfo", "distributedInfo without rank"]
)
def test_traces_without_rank_are_named_by_file(tmp_path: Path, info: Any) -> None:
    for rank, events in enumerate(
        (rank_events(0, late_us=300), rank_events(1, stall_us=300, late_us=300))
    ):
        write_trace(tmp_path / f"rank-x{rank}.json", trace_document(events, distributedInfo=info))
    report = cross_rank(profiles(tmp_path))
    assert [row.label for row in report.ranks] == ["rank-x0.json", "rank-x1.json"]
    assert report.straggler is not None and report.straggler.label == "rank-x1.json"
    assert any("no rank recorded" in note for note in report.notes)


def test_content_tells_empty_from_cpu_only_from_gpu(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, [])
    write_rank(tmp_path, 1, [complete_event("aten::add", "cpu_op", 0, 5)])
    write_rank(tmp_path, 2, rank_events(2))
    assert [p.content for p in profiles(tmp_path)] == ["no events", "CPU only", "GPU"]


def test_two_real_ranks_of_a_128_rank_job() -> None:
    """HTA's sampled ranks 0 and 1: each only sees part of every all_to_all's 128 ranks."""
    counts = []
    for path in sorted(SAMPLED.glob("*.json.gz")):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        counts.append(
            sum(e.get("cat") == "kernel" and e["name"].startswith("nccl") for e in events)
        )
    report = cross_rank(profiles(SAMPLED))
    rank_0, rank_1 = report.ranks
    assert [rank_0.collectives, rank_1.collectives] == counts
    assert 0 < report.matched_collectives <= min(counts)
    assert rank_0.last_arrivals + rank_1.last_arrivals == report.matched_collectives
    for row in report.ranks:
        assert row.wait_us is not None and row.transfer_us is not None
        assert row.wait_us >= 0 and row.transfer_us >= 0
        assert row.wait_us + row.transfer_us <= row.collective_us + 1e-6
    # With two ranks, all one rank's wait is for the other.
    straggler = report.straggler
    assert straggler is not None
    other = rank_0 if straggler.rank == 1 else rank_1
    assert straggler.caused_wait_us == pytest.approx(other.wait_us)
    if report.matched_collectives < min(counts):
        assert any("do not overlap" in note for note in report.notes)


def test_overlap_matches_hta_on_the_step_it_keeps() -> None:
    # HTA's get_comm_comp_overlap() on these two ranks (traceinsight 0.6.1): 11.81% and
    # 20.05%. Its trace reader drops the last profiled step, so it measures step 551 alone;
    # the traces are in whole µs, so there is no rounding between the two tools.
    hta_percent = {0: 11.81, 1: 20.05}
    for rank, path in enumerate(sorted(SAMPLED.glob("*.json.gz"))):
        first, last = comm_overlap(load_trace(path)).steps
        assert (first.step, last.step) == (551, 552)
        assert round(100 * first.overlap_fraction, 2) == hta_percent[rank]


def _collective_starts(path: Path) -> tuple[int, list[float]]:
    """``baseTimeNanoseconds`` and the ``ts`` of each NCCL kernel of a recorded rank, read with
    json alone."""
    document = json.loads(gzip.decompress(path.read_bytes()))
    starts = sorted(
        e["ts"]
        for e in document["traceEvents"]
        if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel")
    )
    return document["baseTimeNanoseconds"], starts


def test_real_nccl_run_where_rank_1_stalls_on_the_host() -> None:
    run = NCCL / "stalled"
    report = cross_rank(profiles(run))
    rank_0, rank_1 = report.ranks
    # Every step of both ranks is about as long: the step table cannot name the straggler.
    assert all(s.spread < 0.05 for s in report.steps)
    assert report.straggler is not None
    assert (report.straggler.rank, report.straggler.basis) == (1, "collectives")
    assert report.matched_collectives == rank_1.last_arrivals == 10
    (base_0, starts_0), (base_1, starts_1) = (
        _collective_starts(run / f"rank{r}.json.gz") for r in (0, 1)
    )
    assert base_0 == base_1  # one host: the same clock and base
    starts = [starts_0, starts_1]
    lateness = [late - early for early, late in zip(*starts, strict=True)]
    assert all(d > 0 for d in lateness)
    assert rank_0.wait_us == pytest.approx(sum(lateness), abs=0.01)
    assert rank_1.wait_us == 0
    assert rank_0.wait_us > 0.9 * rank_0.collective_us  # ~10 ms per step, of ~10.3 ms
    assert [f.rule for f in report.findings][:2] == ["rank-straggler", "collective-skew"]
    assert report.findings[0].severity == "warning"


def test_ranks_whose_steps_are_numbered_apart_but_began_together_are_not_late(
    tmp_path: Path,
) -> None:
    # The balanced run with rank 1's steps numbered 3 higher (a profiler started on demand
    # numbers each rank's steps from where it began): its ranks began recording together.
    for path in trace_files([NCCL / "balanced"]):
        document = json.loads(gzip.decompress(path.read_bytes()))
        if recorded_rank(path) == 1:
            for event in document["traceEvents"]:
                name = str(event.get("name", ""))
                if name.startswith("ProfilerStep#"):
                    event["name"] = f"ProfilerStep#{int(name.split('#')[1]) + 3}"
        write_trace(tmp_path / path.name.removesuffix(".gz"), document)
    report = cross_rank(profiles(tmp_path))
    assert not [f for f in report.findings if f.rule == "rank-late-start"]
    assert report.straggler is None


def test_ranks_whose_recordings_do_not_overlap_are_not_one_run_s_window(tmp_path: Path) -> None:
    # Two traces of the balanced run with rank 1's recording moved 13 s later on the common
    # clock (as two runs' traces put together are): its "late start" would be the time
    # between the runs, and the calls around it did not wait for it.
    shift_ns = 13_000_000_000
    for path in trace_files([NCCL / "balanced"]):
        document = json.loads(gzip.decompress(path.read_bytes()))
        if recorded_rank(path) == 1:
            document["baseTimeNanoseconds"] += shift_ns
        write_trace(tmp_path / path.name.removesuffix(".gz"), document)
    loaded = profiles(tmp_path)
    report = cross_rank(loaded)
    assert not [f for f in report.findings if f.rule == "rank-late-start"]
    assert report.matched_collectives == 0
    (note,) = [n for n in report.notes if "not one profiling window" in n]
    zero, one = sorted(loaded, key=lambda p: p.rank)
    gap_us = one.recorded_from_us + shift_ns / 1000 - zero.recorded_to_us
    assert note.startswith(
        f"rank 0's recording ended {gap_us:,.0f} µs before rank 1's began, and no rank "
        "recorded in between"
    )
    # Moved by less than the recording, they overlap again, and nothing is said.
    with_overlap = [zero, msgspec.structs.replace(one, clock_base_ns=zero.clock_base_ns)]
    assert not [n for n in cross_rank(with_overlap).notes if "profiling window" in n]
    # A pipeline's first stage stopped recording before its last began, but the middle
    # stages recorded across both: one window, whose late stage is told.
    stages = profiles(FIXTURES / "parallel" / "pipeline_batched")
    first, last = (min(stages, key=lambda p: p.rank), max(stages, key=lambda p: p.rank))
    assert first.recorded_to_us < last.recorded_from_us  # one clock base: one host
    pipeline = cross_rank(stages)
    assert not [n for n in pipeline.notes if "profiling window" in n]
    assert [f for f in pipeline.findings if f.rule == "rank-late-start"]


def test_real_balanced_nccl_run_has_no_straggler() -> None:
    report = cross_rank(profiles(NCCL / "balanced"))
    assert report.matched_collectives == 10
    assert report.straggler is None
    assert all(f.severity == "info" for f in report.findings)
    skew = next(f for f in report.findings if f.rule == "collective-skew")
    assert "no rank's lateness costs the others twice the wait another's does" in skew.message
    # Rank 1's host windows are longer than rank 0's in each of the five steps (its steps
    # began earlier and drew level): the spread says so, step by step, from the raw events.
    durations = {}
    for rank in (0, 1):
        path = NCCL / "balanced" / f"rank{rank}.json.gz"
        document = json.loads(gzip.decompress(path.read_bytes()))
        durations[rank] = [
            e["dur"]
            for e in document["traceEvents"]
            if e.get("name", "").startswith("ProfilerStep#")
        ]
    differences = [b - a for a, b in zip(durations[0], durations[1], strict=True)]
    assert min(differences) > 0
    (spread,) = [f for f in report.findings if f.rule == "rank-step-spread"]
    assert spread.evidence["median_difference_us"] == pytest.approx(statistics.median(differences))
    assert "rank 1's steps are longer than rank 0's in each of the 5 steps both recorded" in (
        spread.message
    )


def test_cli_names_the_stalled_rank_of_the_real_run(capsys) -> None:
    status, out, _ = run_cli(capsys, "diagnose", str(NCCL / "stalled"))
    assert status == 0
    assert "[warning] rank-straggler: rank 1 is the straggler: it reached 10 of 10" in out


# -- files and workers ---------------------------------------------------------------------------


def test_trace_files_expands_directories_in_natural_order(tmp_path: Path) -> None:
    for name in ("rank-10.json", "rank-2.json.gz", "rank-1.json", "notes.txt"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "sub").mkdir()
    assert [p.name for p in trace_files([tmp_path])] == [
        "rank-1.json",
        "rank-2.json.gz",
        "rank-10.json",
    ]
    assert trace_files(["a.json", "b.json"]) == [Path("a.json"), Path("b.json")]


def _span_count(trace: Any) -> int:
    return len(trace.spans)


def test_spawned_workers_report_each_file_and_bad_ones_alone(stalled_run: Path) -> None:
    (stalled_run / "rank-2.json").write_text('{"traceEvents": [')
    files = trace_files([stalled_run])
    outcomes = analyse_files(
        files, _span_count, workers=2, context=multiprocessing.get_context("spawn")
    )
    assert [o.files for o in outcomes] == [(str(f),) for f in files]
    assert [o.value for o in outcomes[:2]] == [len(load_trace(f).spans) for f in files[:2]]
    assert outcomes[2].value is None
    assert outcomes[2].error is not None and outcomes[2].error.startswith(str(files[2]))
    assert "\n" not in outcomes[2].error


def test_traces_analysed_in_this_process_are_kept_when_asked(stalled_run: Path) -> None:
    files = trace_files([stalled_run])
    kept: list[Any] = []
    outcomes = analyse_files(files, _span_count, workers=1, keep=kept)
    assert [len(trace.spans) for trace in kept] == [o.value for o in outcomes]
    assert [trace.path for trace in kept] == files


def _exit_abruptly(trace: Any) -> None:
    os._exit(1)  # what the kernel's out-of-memory killer does to a worker


def test_a_worker_that_dies_gives_an_error_not_a_traceback(stalled_run: Path) -> None:
    files = trace_files([stalled_run])
    outcomes = analyse_files(files, _exit_abruptly, workers=2)
    assert [o.value for o in outcomes] == [None, None]
    assert all(o.error and "stopped abruptly" in o.error for o in outcomes)


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["summary", "diagnose"])
def test_cli_names_the_straggler_in_text(capsys, stalled_run: Path, command: str) -> None:
    status, out, err = run_cli(capsys, command, str(stalled_run))
    assert (status, err) == (0, "")
    assert "Across ranks (2 traces)" in out
    assert "rank-straggler: rank 1 is the straggler" in out


def server_rank_events(rank: int, first_us: float) -> list[dict[str, Any]]:
    """A server's rank without steps: four iterations of a GEMM then an all-reduce, the
    first at ``first_us``; rank 0's first all-reduce waits until rank 1's arrives at
    500,420 µs."""
    events = []
    for index in range(4):
        t = first_us + index * STEP_US if index or rank else 0.0
        arrival = t + 20 + COMPUTE_US
        end = arrival + TRANSFER_US if index or rank else 500_000.0 + 20 + COMPUTE_US + 100
        events += iteration_events(index, rank, t, arrival, end, "allreduce")
    return events


def test_a_rank_whose_recording_began_late_is_no_straggler_without_steps(tmp_path: Path) -> None:
    # A server's two ranks record no steps; rank 1's profiler starts 500 ms after rank 0's,
    # and rank 0's first all-reduce waits for it all that time: the recording's start, not
    # a late rank, which the traces cannot show.
    for rank in (0, 1):
        write_rank(tmp_path, rank, server_rank_events(rank, 500_000.0))
    report = cross_rank(profiles(tmp_path))
    assert report.straggler is None
    rules = [f.rule for f in report.findings]
    assert "rank-straggler" not in rules and "collective-skew" not in rules
    (late,) = [f for f in report.findings if f.rule == "rank-late-start"]
    assert late.message.startswith(
        "rank 1 began its recording 500,000 µs after rank 0 (the traces record no steps)"
    )
    assert late.message.endswith(
        "2 kernel(s) that began before a peer's recording did are left out of wait and transfer."
    )
    assert any(
        note.startswith("2 kernel(s) left out of wait and transfer") for note in report.notes
    )
    # Recordings begun together: no such finding.
    together = tmp_path / "together"
    together.mkdir()
    for rank in (0, 1):
        events = [e for e in rank_events(rank) if not e["name"].startswith("ProfilerStep")]
        write_rank(together, rank, events)
    assert not any(f.rule == "rank-late-start" for f in cross_rank(profiles(together)).findings)


def test_a_straggler_whose_median_step_is_longer_but_not_every_step_is_said_so(
    tmp_path: Path,
) -> None:
    # Rank 1 reaches every all-reduce 300 µs late; its steps are 2,000, 900 and 2,000 µs long
    # against rank 0's 1,000: a longer median, but not longer in every step.
    for rank, durations in ((0, (1000.0, 1000.0, 1000.0)), (1, (2000.0, 900.0, 2000.0))):
        events = []
        for index, dur in enumerate(durations):
            t = 3000.0 * index
            arrival = t + 420 + 300 * rank
            correlation = 100 * index + rank + 1
            events += [
                complete_event(f"ProfilerStep#{index}", "user_annotation", t, dur),
                complete_event("cudaLaunchKernel", "cuda_runtime", arrival - 10, 5,
                               correlation=correlation),
                complete_event("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "kernel",
                               arrival, t + 820 - arrival, pid=0, tid=20,
                               correlation=correlation, device=0, stream=20,
                               **{"Collective name": "allreduce", "Process Group Name": "0",
                                  "Group size": 2}),
            ]  # fmt: skip
        write_rank(tmp_path, rank, events)
    report = cross_rank(profiles(tmp_path))
    (finding,) = [f for f in report.findings if f.rule == "rank-straggler"]
    assert "Its median step (2,000 µs) is longer than the others' (1,000 µs), but not in " in (
        finding.message
    )


def test_cli_directory_of_one_trace_says_one_trace(capsys, stalled_run: Path, tmp_path) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    first = trace_files([stalled_run])[0]
    (alone / first.name).write_bytes(first.read_bytes())
    status, out, _ = run_cli(capsys, "summary", str(alone))
    assert status == 0
    # The trace in full (a tensorboard_trace_handler folder holds one), then its rank's row.
    _, single, _ = run_cli(capsys, "summary", str(alone / first.name))
    assert out.startswith(single.rstrip("\n") + "\n\nAcross ranks (1 trace)\n")
    assert "summary FILE shows one trace in full" not in out


@pytest.mark.parametrize("command", ["summary", "diagnose"])
def test_cli_leaves_out_a_directorys_json_that_is_no_trace(
    capsys, stalled_run: Path, command: str
) -> None:
    # HTA's test data keeps an execution trace (ExecutionTraceObserver) beside the Kineto one.
    other = stalled_run / "rank0_et.json"
    other.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": []}))
    status, out, err = run_cli(capsys, command, str(stalled_run), "--json")
    document = json.loads(out)
    assert status == 0 and document["errors"] == []
    assert len(document["traces"]) == 2 and document["cross_rank"]["straggler"]["rank"] == 1
    (skipped,) = document["skipped"]
    assert skipped["file"] == str(other)
    assert "JSON is not a trace: no 'traceEvents' key" in skipped["reason"]
    assert err == f"note: {skipped['reason']} (left out: not a trace)\n"
    # Named as such, it is an error; so is a damaged trace in the directory.
    first = str(stalled_run / "rank-0.json")
    status, _, err = run_cli(capsys, command, str(other), first)
    assert status == 2 and err.startswith(f"error: {other}: JSON is not a trace")
    other.write_bytes(b'{"traceEvents": [')
    status, _, err = run_cli(capsys, command, str(stalled_run))
    assert status == 2 and err.startswith(f"error: {other}: ")


def test_a_directory_of_nothing_but_other_json_is_an_error(capsys, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    status, _, err = run_cli(capsys, "summary", str(tmp_path))
    assert status == 2 and "JSON is not a trace" in err and "note:" not in err


def test_a_file_named_twice_is_one_rank(stalled_run: Path) -> None:
    first, second = trace_files([stalled_run])
    assert trace_files([first, stalled_run, first]) == [first, second]


@pytest.mark.parametrize("command", ["summary", "diagnose"])
def test_cli_json_of_several_traces(capsys, stalled_run: Path, command: str) -> None:
    files = [str(p) for p in trace_files([stalled_run])]
    status, out, _ = run_cli(capsys, command, *files, "--json")
    document = json.loads(out)
    assert status == 0
    assert set(document) == {"traces", "errors", "skipped", "cross_rank"}
    assert document["skipped"] == []
    key = "file" if command == "summary" else "trace"
    assert [t[key] for t in document["traces"]] == files
    cross = document["cross_rank"]
    assert cross["straggler"]["rank"] == 1
    assert [r["rank"] for r in cross["ranks"]] == [0, 1]
    assert set(cross) == {
        *("ranks", "steps", "matched_collectives", "paired_sends"),
        *("straggler", "findings", "notes"),
    }


def test_cli_reports_the_readable_ranks_and_exits_2(capsys, stalled_run: Path) -> None:
    (stalled_run / "rank-2.json").write_text('{"traceEvents": [')
    status, out, err = run_cli(capsys, "summary", str(stalled_run), "--json")
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {stalled_run / 'rank-2.json'}: ")
    document = json.loads(out)
    assert len(document["traces"]) == 2
    assert document["errors"] == [
        {"files": [str(stalled_run / "rank-2.json")], "error": err.removeprefix("error: ").strip()}
    ]


def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Two runs' directories of two ranks each: a balanced one, and one whose rank 1 stalls
    300 µs on the host before each all-reduce."""
    balanced, stalled = tmp_path / "balanced", tmp_path / "stalled"
    balanced.mkdir(), stalled.mkdir()
    for rank in (0, 1):
        write_rank(balanced, rank, rank_events(rank))
        write_rank(stalled, rank, rank_events(rank, stall_us=300 * rank, late_us=300))
    return balanced, stalled


def test_cli_compare_pairs_two_runs_rank_by_rank(capsys, tmp_path: Path) -> None:
    balanced, stalled = two_runs(tmp_path)
    status, out, _ = run_cli(capsys, "compare", str(balanced), str(stalled), "--json")
    document = json.loads(out)
    assert status == 0
    assert [(p["baseline"]["trace"], p["trace"]["trace"]) for p in document["pairs"]] == [
        (str(balanced / f"rank-{r}.json"), str(stalled / f"rank-{r}.json")) for r in (0, 1)
    ]
    assert document["baseline_cross_rank"]["straggler"] is None
    assert document["trace_cross_rank"]["straggler"]["rank"] == 1


def test_cli_compare_leaves_out_a_directorys_json_that_is_no_trace(capsys, tmp_path: Path) -> None:
    # One run keeps an execution trace beside its Kineto traces, the other does not: left out
    # before pairing, the runs hold the same ranks and pair by them.
    balanced, stalled = two_runs(tmp_path)
    other = balanced / "rank0_et.json"
    other.write_text(json.dumps({"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": []}))
    status, out, err = run_cli(capsys, "compare", str(balanced), str(stalled), "--json")
    document = json.loads(out)
    assert status == 0 and document["errors"] == []
    assert document["paired_by"] == "recorded rank" and len(document["pairs"]) == 2
    (skipped,) = document["skipped"]
    assert skipped["file"] == str(other)
    assert "JSON is not a trace: no 'traceEvents' key" in skipped["reason"]
    assert err == f"note: {skipped['reason']} (left out: not a trace)\n"
    assert document["trace_cross_rank"]["straggler"]["rank"] == 1
    # A trace whose head does not name its events (a large key written first) is loaded to
    # tell, and kept.
    late = stalled / "rank-1.json"
    head = json.dumps({"padding": "x" * (1 << 18)})[:-1]
    late.write_text(head + ", " + late.read_text().lstrip()[1:])
    status, out, err = run_cli(capsys, "compare", str(balanced), str(stalled), "--json")
    document = json.loads(out)
    assert status == 0 and len(document["pairs"]) == 2 and len(document["skipped"]) == 1
    # Two runs of nothing but other JSON: an error, as before.
    for run in (balanced, stalled):
        for trace in run.glob("rank-*.json"):
            trace.unlink()
    (stalled / "config.json").write_text('{"lr": 0.1}')
    status, _, err = run_cli(capsys, "compare", str(balanced), str(stalled))
    assert status == 2 and "JSON is not a trace" in err and "note:" not in err


def test_cli_compare_keeps_the_readable_side_of_a_pair_that_cannot_be_read(
    capsys, tmp_path: Path
) -> None:
    # The stalled run's rank 1 is cut short: its pair is refused, but the balanced run's
    # rank 1 still reads, and the balanced run's analysis holds both its ranks.
    balanced, stalled = two_runs(tmp_path)
    cut = stalled / "rank-1.json"
    cut.write_bytes(cut.read_bytes()[:200])
    status, out, err = run_cli(capsys, "compare", str(balanced), str(stalled), "--json")
    document = json.loads(out)
    assert status == 2 and "rank-1.json" in err
    assert len(document["pairs"]) == 1 and len(document["errors"]) == 1
    assert [row["rank"] for row in document["baseline_cross_rank"]["ranks"]] == [0, 1]
    assert [row["rank"] for row in document["trace_cross_rank"]["ranks"]] == [0]
    # Both files of the pair cut short: each is named, on stderr and under errors.
    other = balanced / "rank-1.json"
    other.write_bytes(other.read_bytes()[:200])
    status, out, err = run_cli(capsys, "compare", str(balanced), str(stalled), "--json")
    document = json.loads(out)
    assert status == 2
    assert [line.split(": ")[1] for line in err.splitlines()] == [str(other), str(cut)]
    assert [entry["error"].split(": ")[0] for entry in document["errors"]] == [
        str(other),
        str(cut),
    ]
    assert all(entry["files"] == [str(other), str(cut)] for entry in document["errors"])
    assert [row["rank"] for row in document["baseline_cross_rank"]["ranks"]] == [0]


def test_cli_compare_refuses_runs_of_different_sizes(capsys, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_rank(run, 0, rank_events(0))
    write_rank(run, 1, rank_events(1))
    single = write_rank(tmp_path, 0, rank_events(0))
    status, _, err = run_cli(capsys, "compare", str(run), str(single))
    assert status == 2 and "compare pairs them rank by rank" in err


@pytest.mark.parametrize("command", ["summary", "diagnose", "compare"])
def test_help_documents_the_multi_rank_json(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    help_text = capsys.readouterr().out
    for key in ("errors", "cross_rank", "matched_collectives", "caused_wait_us", "last_arrivals"):
        assert key in help_text


def test_max_trace_bytes_refuses_the_large_trace_alone(capsys, tmp_path: Path) -> None:
    small = write_rank(tmp_path, 0, rank_events(0, steps=1))
    large = write_rank(tmp_path, 1, rank_events(1, steps=6))
    limit = (small.stat().st_size + large.stat().st_size) // 2
    status, out, err = run_cli(
        capsys, "summary", str(tmp_path), "--json", "--max-trace-bytes", str(limit)
    )
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {large}: ")
    assert [t["file"] for t in json.loads(out)["traces"]] == [str(small)]


def _gloo_starts(rank: int) -> list[tuple[str, float, float]]:
    """Rank ``rank``'s ``gloo:<op>`` ranges of the Gloo fixture: (name, absolute start, dur),
    in start order, read from the raw JSON."""
    path = FIXTURES / "gloo" / "slow" / f"rank{rank}.json.gz"
    document = json.loads(gzip.decompress(path.read_bytes()))
    base_us = document["baseTimeNanoseconds"] / 1000
    ranges = [
        (event["name"], base_us + event["ts"], event["dur"])
        for event in document["traceEvents"]
        if event.get("ph") == "X" and event["name"].startswith("gloo:")
    ]
    return sorted(ranges, key=lambda r: r[1])


def test_gloo_collectives_on_the_host_find_the_rank_the_others_wait_for(capsys) -> None:
    # Rank 1 sleeps 20 ms before three of the all_reduces: rank 0 waits in them. The ranks
    # hold no kernel, so their collectives are Gloo's host ranges (they had been "0
    # collectives", with no cross-rank finding).
    status, out, _ = run_cli(capsys, "summary", "--json", str(FIXTURES / "gloo" / "slow"))
    assert status == 0
    report = json.loads(out)["cross_rank"]
    zero, one = _gloo_starts(0), _gloo_starts(1)
    assert [name for name, _, _ in zero] == [name for name, _, _ in one]
    # Rank 0's wait: how much later rank 1's part began, within rank 0's own range.
    waited = sum(
        min(max(b - a, 0.0), dur) for (_, a, dur), (_, b, _) in zip(zero, one, strict=True)
    )
    assert waited > 50_000  # the three sleeps
    rows = {row["label"]: row for row in report["ranks"]}
    assert rows["rank 0"]["collectives"] == len(zero) == 5
    assert rows["rank 0"]["wait_us"] == pytest.approx(waited, abs=1.0)
    assert rows["rank 0"]["collective_us"] == pytest.approx(sum(d for _, _, d in zero))
    assert report["matched_collectives"] == 5
    assert report["straggler"]["label"] == "rank 1"
    assert report["straggler"]["caused_wait_us"] == pytest.approx(waited, abs=1.0)
    assert any("Gloo backend's host ranges" in note for note in report["notes"])
    assert {f["rule"] for f in report["findings"]} >= {"rank-straggler", "collective-skew"}
    # A rank with collective kernels reads those alone: no note about Gloo.
    status, out, _ = run_cli(capsys, "summary", "--json", str(FIXTURES / "nccl" / "stalled"))
    assert not any("Gloo" in note for note in json.loads(out)["cross_rank"]["notes"])


def _gloo_copy(directory: Path, change: Any) -> Path:
    """The Gloo fixture's two ranks written into ``directory``, each document passed to
    ``change`` first."""
    for rank in (0, 1):
        path = FIXTURES / "gloo" / "slow" / f"rank{rank}.json.gz"
        document = json.loads(gzip.decompress(path.read_bytes()))
        change(document)
        write_trace(directory / f"rank{rank}.json", document)
    return directory


def test_gloo_collectives_of_several_process_groups_are_not_lined_up(
    tmp_path: Path, capsys
) -> None:
    # The ranges do not say whose group they are: the k-th all_reduce of one rank may be a
    # sub-group's on another (a three-rank run with a group of two had its straggler named
    # for 1 of 1 collectives).
    def sub_group(document: dict[str, Any]) -> None:
        document["distributedInfo"]["pg_count"] = 2

    _, out, _ = run_cli(capsys, "summary", "--json", str(_gloo_copy(tmp_path, sub_group)))
    report = json.loads(out)["cross_rank"]
    assert [row["collectives"] for row in report["ranks"]] == [None, None]
    assert report["straggler"] is None and report["matched_collectives"] == 0
    assert (
        "the Gloo collectives of rank 0, rank 1 are not lined up: the traces record several "
        "process groups, and a Gloo range does not say whose it is (a rank's k-th all_reduce "
        "may be another group's on another rank)"
    ) in report["notes"]


def test_gloo_sub_groups_that_pg_count_leaves_out_are_counted_from_pg_config(
    tmp_path: Path, capsys
) -> None:
    # A group made with use_local_synchronization is listed in pg_config, not counted in
    # pg_count, and only by its members: rank 1 here. Rank 0, outside it, records the
    # world's calls alone, and its ranges are not lined up either.
    def sub_group_of_rank_1(document: dict[str, Any]) -> None:
        info = document["distributedInfo"]
        if info["rank"] == 1:
            info["pg_config"].append({"pg_name": "9f3c", "pg_size": 1, "ranks": [1]})

    directory = _gloo_copy(tmp_path, sub_group_of_rank_1)
    assert [load_trace(path).process_groups for path in trace_files([directory])] == [1, 2]
    _, out, _ = run_cli(capsys, "summary", "--json", str(directory))
    report = json.loads(out)["cross_rank"]
    assert [row["collectives"] for row in report["ranks"]] == [None, None]  # not known
    assert report["matched_collectives"] == 0 and report["straggler"] is None
    (note,) = [n for n in report["notes"] if "Gloo" in n]
    assert note.startswith("the Gloo collectives of rank 0, rank 1 are not lined up")


def test_rooted_gloo_collectives_are_not_lined_up(tmp_path: Path) -> None:
    # A broadcast's root returns once it has sent, before a late rank arrives: its ranges
    # do not all last until the last arrival, so they are left out.
    def broadcast_first(document: dict[str, Any]) -> None:
        first = min(
            (e for e in document["traceEvents"] if e.get("name") == "gloo:all_reduce"),
            key=lambda e: e["ts"],
        )
        first["name"] = "gloo:broadcast"

    loaded = profiles(_gloo_copy(tmp_path, broadcast_first))
    assert [len(p.collectives) for p in loaded] == [4, 4]
    assert all(c.op in ("all_reduce", "barrier") for p in loaded for c in p.collectives)


@pytest.mark.parametrize("written", ["1GB", "lots", "0"])
def test_a_size_limit_no_trace_can_be_read_under_is_a_usage_error(
    capsys, monkeypatch, tmp_path: Path, written: str
) -> None:
    # Said once, before any trace is read: not a traceback from each worker.
    write_rank(tmp_path, 0, rank_events(0, steps=1))
    write_rank(tmp_path, 1, rank_events(1, steps=1))
    monkeypatch.setenv(MAX_TRACE_BYTES_ENV, written)
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, "summary", str(tmp_path))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {MAX_TRACE_BYTES_ENV} must be a whole number of bytes above 0" in err
    assert "Traceback" not in err
    monkeypatch.delenv(MAX_TRACE_BYTES_ENV)
    for option in ("--max-trace-bytes", "--jobs"):
        with pytest.raises(SystemExit):
            run_cli(capsys, "summary", str(tmp_path), option, "0")
        assert "must be 1 or more, not 0" in capsys.readouterr().err


def test_a_refusal_under_the_command_line_limit_names_its_option(capsys, tmp_path: Path) -> None:
    path = write_rank(tmp_path, 0, rank_events(0, steps=1))
    status, _, err = run_cli(capsys, "summary", str(path), "--max-trace-bytes", "100")
    assert status == 2
    assert "allowed (the limit given); to load it anyway, raise the limit: " in err
    assert "--max-trace-bytes on the command line" in err


@pytest.mark.parametrize("command", ["summary", "diagnose", "compare"])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_run_whose_every_trace_is_refused_gives_the_errors_only(
    command: str, as_json: bool, capsys, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        (run / f"rank-{rank}.json").write_text('{"traceEvents": [')  # cut short
    argv = [command, str(run)] + ([str(run)] if command == "compare" else [])
    status, out, err = run_cli(capsys, *argv, *(["--json"] if as_json else []))
    assert status == 2
    assert all(line.startswith("error: ") for line in err.splitlines())
    assert len(err.splitlines()) == 2  # one per trace, or per pair for compare
    if as_json:
        document = json.loads(out)
        assert len(document["errors"]) == 2
        reports = [value for key, value in document.items() if key.endswith("cross_rank")]
        assert reports and all(report["ranks"] == [] for report in reports)
    else:
        assert out == ""


def test_a_directory_without_traces_says_so_and_names_subdirectories_that_hold_some(
    capsys, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    status, out, err = run_cli(capsys, "summary", str(empty))
    assert (status, out) == (2, "")
    assert err == f"error: {empty}: directory holds no .json or .json.gz trace\n"
    run = tmp_path / "run"
    for rank in (0, 1):
        (run / f"rank{rank}").mkdir(parents=True)
        write_rank(run / f"rank{rank}", rank, rank_events(rank))
    (run / "logs").mkdir()  # a subdirectory without traces is not named
    status, _, err = run_cli(capsys, "diagnose", str(run))
    assert status == 2
    assert err.endswith(
        "traces are in its subdirectories (rank0, rank1), which are not searched: name them\n"
    )
    status, out, _ = run_cli(capsys, "diagnose", str(run / "rank0"), str(run / "rank1"), "--json")
    assert status == 0 and len(json.loads(out)["traces"]) == 2


def test_a_trace_that_starts_a_collective_later_is_lined_up(tmp_path: Path) -> None:
    # Rank 1's trace misses the first all-reduce (recording began after it): its first
    # call is rank 0's second. By position alone no call would pair with its own.
    write_rank(tmp_path, 0, rank_events(0, late_us=300))
    events = rank_events(1, stall_us=300, late_us=300)
    first_nccl = next(e for e in events if e["name"].startswith("ncclDevKernel"))
    write_rank(tmp_path, 1, [e for e in events if e is not first_nccl])
    report = cross_rank(profiles(tmp_path))
    assert report.matched_collectives == 2
    rows = {row.rank: row for row in report.ranks}
    assert rows[0].wait_us == pytest.approx(2 * 300)
    assert rows[1].last_arrivals == 2
    assert "rank 1's trace starts 1 all_reduce call after rank 0's" in " ".join(report.notes)


def test_sequences_that_line_up_as_written_are_not_shifted(stalled_run: Path) -> None:
    report = cross_rank(profiles(stalled_run))
    assert report.matched_collectives == 3
    assert not any("lined up" in note for note in report.notes)


def test_a_world_larger_than_the_ranks_given_is_noted(tmp_path: Path) -> None:
    for rank in (0, 1):
        events = rank_events(rank, stall_us=300 if rank else 0, late_us=300)
        info = {"backend": "nccl", "rank": rank, "world_size": 128}
        write_trace(tmp_path / f"rank-{rank}.json", trace_document(events, distributedInfo=info))
    notes = " ".join(cross_rank(profiles(tmp_path)).notes)
    assert "the traces record a world of 128 ranks and 2 are given" in notes


def test_a_world_of_the_ranks_given_is_not_noted(stalled_run: Path) -> None:
    assert not any("world of" in note for note in cross_rank(profiles(stalled_run)).notes)


def test_the_ranks_steps_are_those_the_rules_take_as_samples(tmp_path: Path) -> None:
    # The MI250 trace's step 2 is the 49 µs step the profiler opens as it stops (no op, no
    # GPU work): as two ranks, the median step is step 1's 9,288 µs, not the mean of the two.
    source = FIXTURES / "foreign" / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    document = json.loads(gzip.decompress(source.read_bytes()))
    for rank in (0, 1):
        document["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        write_trace(tmp_path / f"rank{rank}.json.gz", document)
    profile = rank_profile(load_trace(tmp_path / "rank0.json.gz"))
    assert [step.step for step in profile.steps] == [1]
    assert [step.number for step in load_trace(source).steps] == [1, 2]
    report = cross_rank([profile, rank_profile(load_trace(tmp_path / "rank1.json.gz"))])
    assert [row.median_step_us for row in report.ranks] == [pytest.approx(9288.3, abs=0.1)] * 2


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("at_the_end", [False, True])
def test_recorded_rank_reads_the_files_head_or_tail(tmp_path: Path, compressed, at_the_end) -> None:
    # Kineto writes distributedInfo before the events; older versions wrote it after them.
    events = [complete_event(f"op{n}", "cpu_op", n, 1, note="x" * 200) for n in range(3000)]
    info = {"backend": "nccl", "rank": 5, "world_size": 8, "pg_config": [{"ranks": [0, 5]}]}
    document = {"distributedInfo": info, "traceEvents": events}
    if at_the_end:
        document = {"traceEvents": events, "distributedInfo": info}
    path = write_trace(tmp_path / ("t.json.gz" if compressed else "t.json"), document)
    assert len(json.dumps(events)) > 3 * 2**18  # beyond the head that is read first
    assert recorded_rank(path) == 5 == load_trace(path).rank
    del document["distributedInfo"]
    assert recorded_rank(write_trace(path, document)) is None


def test_compare_pairs_two_runs_rank_with_rank(tmp_path: Path, capsys) -> None:
    # Kineto names a trace after its host and process: here the names sort against the ranks.
    runs = {}
    for run in ("balanced", "stalled"):
        runs[run] = tmp_path / run
        runs[run].mkdir()
        for rank, name in ((0, "host-b_1234"), (1, "host-a_5678")):
            source = NCCL / run / f"rank{rank}.json.gz"
            (runs[run] / f"{name}.pt.trace.json.gz").write_bytes(source.read_bytes())
    status, out, _ = run_cli(
        capsys, "compare", "--json", str(runs["balanced"]), str(runs["stalled"])
    )
    assert status == 0
    assert json.loads(out)["paired_by"] == "recorded rank"
    pairs = json.loads(out)["pairs"]
    for pair in pairs:
        assert Path(pair["baseline"]["trace"]).name == Path(pair["trace"]["trace"]).name
    assert [Path(pair["baseline"]["trace"]).name for pair in pairs] == [
        "host-b_1234.pt.trace.json.gz",  # rank 0 first
        "host-a_5678.pt.trace.json.gz",
    ]


def test_the_same_trace_twice_is_not_judged_as_two_ranks() -> None:
    # It lines up with itself at every collective; one copy would be "last" at each.
    profile = rank_profile(load_trace(NCCL / "stalled" / "rank1.json.gz"))
    report = cross_rank([profile, profile])
    assert report.matched_collectives > 0
    assert report.findings == [] and report.straggler is None
    assert "several traces claim the same rank (rank 1 ×2): are they from one run?" in (
        report.notes
    )
    assert [row.last_arrivals for row in report.ranks] == [0, 0]  # tied starts: none is last


def test_a_profiler_s_cycles_of_each_rank_are_told_apart_from_another_run() -> None:
    # schedule(repeat=2) writes a file per cycle: each rank's two traces, one after another.
    stalled = [rank_profile(load_trace(NCCL / "stalled" / f"rank{r}.json.gz")) for r in (0, 1)]
    length = max(p.recorded_to_us for p in stalled) - min(p.recorded_from_us for p in stalled)
    later = [
        msgspec.structs.replace(
            p, file=f"later-{p.rank}.json", clock_base_ns=p.clock_base_ns + int(2 * length * 1000)
        )
        for p in stalled
    ]
    report = cross_rank([*stalled, *later])
    assert report.findings == [] and report.straggler is None
    (note,) = [n for n in report.notes if "claim the same rank" in n]
    assert note == (
        "several traces claim the same rank (rank 0 ×2, rank 1 ×2), each rank's recorded one "
        "after another: the cycles of a profiler's schedule (repeat), or several runs; give "
        "one cycle's traces at a time to compare its ranks"
    )
    assert not [n for n in report.notes if "profiling window" in n]  # said once, above


def test_traces_of_worlds_of_different_sizes_are_not_judged_as_one_run() -> None:
    stalled = [rank_profile(load_trace(NCCL / "stalled" / f"rank{r}.json.gz")) for r in (0, 1)]
    assert cross_rank(stalled).findings  # one run: judged
    other = msgspec.structs.replace(stalled[1], world_size=16)
    report = cross_rank([stalled[0], other])
    assert report.findings == [] and report.straggler is None
    assert any("worlds of different sizes (2, 16 ranks)" in note for note in report.notes)
    assert not any("record a world of" in note for note in report.notes)  # no such one world


def test_cross_rank_rules_are_selected_and_ignored_like_the_others(capsys) -> None:
    run = str(NCCL / "stalled")
    status, out, _ = run_cli(capsys, "diagnose", "--json", run)
    every = {f["rule"] for f in json.loads(out)["cross_rank"]["findings"]}
    assert {"rank-straggler", "collective-skew", "rank-gpu-idle"} <= every
    status, out, err = run_cli(capsys, "diagnose", "--json", "--ignore", "collective-skew", run)
    assert status == 0 and err == ""
    assert {f["rule"] for f in json.loads(out)["cross_rank"]["findings"]} == every - {
        "collective-skew"
    }
    status, out, _ = run_cli(
        capsys, "diagnose", "--json", "--select", "hotspot,rank-straggler", run
    )
    document = json.loads(out)
    assert [f["rule"] for f in document["cross_rank"]["findings"]] == ["rank-straggler"]
    for trace in document["traces"]:
        assert {f["rule"] for f in trace["findings"]} <= {"hotspot"}
    status, _, err = run_cli(capsys, "diagnose", "--select", "rank-stragler", run)
    assert status == 2 and "unknown rule id(s): rank-stragler" in err


def test_compare_says_when_it_pairs_in_file_name_order(capsys, tmp_path: Path) -> None:
    # No trace records its rank: the pairs follow the file names, and the output says so.
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        run.mkdir()
        for name in ("x", "y"):
            events = [complete_event("ProfilerStep#1", "user_annotation", 0, 100)]
            write_trace(run / f"{name}.json", trace_document(events))
    status, out, _ = run_cli(capsys, "compare", "--json", *map(str, runs))
    assert status == 0 and json.loads(out)["paired_by"] == "file-name order"
    _, text, _ = run_cli(capsys, "compare", *map(str, runs))
    assert text.startswith("Traces paired in file-name order (not every trace records a rank")


def test_the_rank_longer_in_every_step_is_found_whichever_median_is_longest(
    tmp_path: Path,
) -> None:
    # Rank 2 has the longest median step but is the shortest in step 0; rank 1 is 11.5%
    # longer than rank 0 in every step: the spread names rank 1 against rank 0.
    write_rank(tmp_path, 0, steps_lasting([1000] * 5))
    write_rank(tmp_path, 1, steps_lasting([1115] * 5))
    write_rank(tmp_path, 2, steps_lasting([900, 1050, 1400, 1400, 1400]))
    report = cross_rank(profiles(tmp_path))
    assert report.straggler is None
    (spread,) = [f for f in report.findings if f.rule == "rank-step-spread"]
    assert (spread.evidence["longer"], spread.evidence["shorter"]) == ("rank 1", "rank 0")
    assert spread.evidence["median_difference_us"] == pytest.approx(115)


def test_ranks_that_meet_in_collectives_are_not_compared_over_one_step(tmp_path: Path) -> None:
    # One step each, rank 1's 300 µs longer: between ranks that meet in an all-reduce, one
    # step's difference is where their boundaries fell, not their pace.
    write_rank(tmp_path, 0, rank_events(0, steps=1))
    events = rank_events(1, steps=1)
    for event in events:
        if event["name"] == "ProfilerStep#0":
            event["dur"] += 300
    write_rank(tmp_path, 1, events)
    report = cross_rank(profiles(tmp_path))
    assert report.matched_collectives == 1
    assert not any(f.rule == "rank-step-spread" for f in report.findings)
