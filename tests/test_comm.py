"""profiling_utils.comm on synthetic traces shaped like torch 2.x and older NCCL traces."""

from __future__ import annotations

import random
from typing import Any

import pytest
from conftest import complete_event

from profiling_utils import diagnose, load_trace
from profiling_utils.comm import _intersection, _operation, collectives, comm_overlap

COMM_STREAM = 20


def nccl_step(
    number: int,
    t: float,
    *,
    overlap: bool,
    recorded: bool = True,
    correlation: int = 100,
) -> list[dict[str, Any]]:
    """One step (1000 µs): a compute kernel 100-400 on stream 7, then an all_reduce of 2^20
    floats in a group of 4 ranks running 500 µs on stream 20, from 200 (beside the compute
    kernel for 200 µs) with ``overlap`` else from 450 (alone). ``recorded``: torch 2.x's
    collective args; else only the nccl:all_reduce label with its Input Dims."""
    comm_start = t + (200 if overlap else 450)
    params = {
        "Collective name": "allreduce",
        "In msg nelems": 1 << 20,
        "Out msg nelems": 1 << 20,
        "dtype": "Float",
        "Group size": 4,
        "Process Group Name": "0",
    }
    label_args = {"Input Dims": [[1 << 20]], "Input type": ["float"]}
    c = correlation
    return [
        complete_event(f"ProfilerStep#{number}", "user_annotation", t, 1000),
        complete_event("aten::mm", "cpu_op", t + 10, 30),
        complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=c),
        complete_event("gemm", "kernel", t + 100, 300, pid=0, tid=7, correlation=c),
        complete_event("c10d::allreduce_", "cpu_op", t + 50, 60),
        complete_event("record_param_comms", "cpu_op", t + 55, 50, **(params if recorded else {})),
        complete_event("nccl:all_reduce", "user_annotation", t + 60, 40, **label_args),
        complete_event("cudaLaunchKernel", "cuda_runtime", t + 70, 5, correlation=c + 1),
        complete_event(
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "kernel", comm_start, 500,
            pid=0, tid=COMM_STREAM, correlation=c + 1, **(params if recorded else {}),
        ),
    ]  # fmt: skip


@pytest.fixture
def two_steps(make_trace: Any) -> Any:
    def make(**kwargs: Any) -> Any:
        events = nccl_step(1, 1000.0, **kwargs) + nccl_step(2, 3000.0, correlation=200, **kwargs)
        return load_trace(make_trace(events))

    return make


def test_collectives_read_torch2_args(two_steps: Any) -> None:
    found = collectives(two_steps(overlap=False))
    assert [(c.op, c.group, c.group_size, c.dtype, c.step, c.index) for c in found] == [
        ("all_reduce", "0", 4, "Float", 1, 0),
        ("all_reduce", "0", 4, "Float", 2, 1),
    ]
    first = found[0]
    assert first.bytes == 4 << 20
    assert first.duration_us == pytest.approx(500.0)
    # nccl-tests: algbw = bytes / time; busbw = algbw * 2(n-1)/n for all_reduce.
    assert first.algbw_gb_s == pytest.approx((4 << 20) / 500e-6 / 1e9)
    assert first.busbw_gb_s == pytest.approx(first.algbw_gb_s * 2 * 3 / 4)


def test_collectives_fall_back_to_the_nccl_label_in_older_traces(two_steps: Any) -> None:
    first = collectives(two_steps(overlap=False, recorded=False))[0]
    assert (first.op, first.bytes, first.dtype) == ("all_reduce", 4 << 20, "float")
    assert first.group is None and first.group_size is None
    assert first.algbw_gb_s is not None and first.busbw_gb_s is None


def test_collectives_empty_without_communication(fixture_path: Any) -> None:
    trace = load_trace(fixture_path("64_bf16_warm_eager"))
    assert collectives(trace) == []
    overlap = comm_overlap(trace)
    assert overlap.total.communication_us == 0 and overlap.total.overlap_fraction is None


@pytest.mark.parametrize(("overlap", "overlapped"), [(True, 200.0), (False, 0.0)])
def test_comm_overlap_per_step_and_total(two_steps: Any, overlap: bool, overlapped: float) -> None:
    result = comm_overlap(two_steps(overlap=overlap))
    assert [s.step for s in result.steps] == [1, 2]
    for step in result.steps:
        assert step.communication_us == pytest.approx(500.0)
        assert step.compute_us == pytest.approx(300.0)
        assert step.overlapped_us == pytest.approx(overlapped)
        assert step.exposed_us == pytest.approx(500.0 - overlapped)
    assert result.total.exposed_us == pytest.approx(2 * (500.0 - overlapped))
    assert result.total.overlap_fraction == pytest.approx(overlapped / 500.0)


def test_a_steps_communication_is_hidden_by_the_next_steps_compute(make_trace: Any) -> None:
    # Step 1 launches GEMM a (30-60) and an all_reduce (70-370); step 2's GEMM b runs at
    # 200-300 on the compute stream, beside 100 µs of step 1's collective.
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    events = [
        complete_event("ProfilerStep#1", "user_annotation", 0, 100),
        complete_event("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1),
        complete_event("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=2),
        complete_event("ProfilerStep#2", "user_annotation", 100, 100),
        complete_event("cudaLaunchKernel", "cuda_runtime", 110, 5, correlation=3),
        complete_event("a", "kernel", 30, 30, pid=0, tid=7, correlation=1),
        complete_event(nccl, "kernel", 70, 300, pid=0, tid=COMM_STREAM, correlation=2),
        complete_event("b", "kernel", 200, 100, pid=0, tid=7, correlation=3),
    ]
    result = comm_overlap(load_trace(make_trace(events)))
    first, second = result.steps
    assert (first.step, first.communication_us, first.compute_us) == (1, 300.0, 30.0)
    assert (first.overlapped_us, first.exposed_us) == (100.0, 200.0)
    assert (second.communication_us, second.compute_us) == (0.0, 100.0)
    assert result.total.overlapped_us == 100.0


def test_the_kernel_name_is_the_last_resort(make_trace: Any) -> None:
    events = [
        complete_event("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1),
        complete_event(
            "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "kernel", 20, 50, pid=0, tid=COMM_STREAM, correlation=1,
        ),
        complete_event("cudaLaunchKernel", "cuda_runtime", 100, 5, correlation=2),
        complete_event("ncclDevKernel_Generic", "kernel", 110, 50, pid=0, tid=COMM_STREAM,
                       correlation=2),
        # Before NCCL 2.7 the operation led the name.
        complete_event("cudaLaunchKernel", "cuda_runtime", 200, 5, correlation=3),
        complete_event("ncclReduceScatterRingLLKernel_sum_f16(ncclColl)", "kernel", 210, 50,
                       pid=0, tid=COMM_STREAM, correlation=3),
        complete_event("cudaLaunchKernel", "cuda_runtime", 300, 5, correlation=4),
        complete_event("ncclSendRecvKernel_copy_i8(ncclColl)", "kernel", 310, 50,
                       pid=0, tid=COMM_STREAM, correlation=4),
    ]  # fmt: skip
    found = collectives(load_trace(make_trace(events)))
    assert [(c.op, c.bytes, c.group, c.step, c.index) for c in found] == [
        ("all_gather", None, None, None, 0),
        ("unknown", None, None, None, 1),
        ("reduce_scatter", None, None, None, 2),
        ("unknown", None, None, None, 3),
    ]
    assert found[0].algbw_gb_s is None and found[0].busbw_gb_s is None


def test_a_rooted_reduce_is_named_and_counted_as_one_pass(make_trace: Any) -> None:
    # DataParallel sums its replicas' gradients with NCCL's Reduce: it was "unknown".
    events = [
        complete_event("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1),
        complete_event("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                       "kernel", 20, 100, pid=0, tid=COMM_STREAM, correlation=1,
                       **{"Collective name": "reduce", "In msg nelems": 25000,
                          "Out msg nelems": 25000, "dtype": "Float", "Group size": 2}),
        complete_event("cudaLaunchKernel", "cuda_runtime", 200, 5, correlation=2),
        complete_event("ncclReduceRingLLKernel_sum_f32(ncclColl)", "kernel", 210, 50,
                       pid=0, tid=COMM_STREAM, correlation=2),
    ]  # fmt: skip
    reduce, older = collectives(load_trace(make_trace(events)))
    assert (reduce.op, older.op) == ("reduce", "reduce")
    assert reduce.bytes == 100_000
    assert reduce.busbw_gb_s == reduce.algbw_gb_s == pytest.approx(1.0)  # 100 kB in 100 µs
    assert [_operation(name) for name in ("nccl:reduce", "allreduce", "reduce_scatter")] == [
        "reduce",
        "all_reduce",
        "reduce_scatter",
    ]


def test_index_counts_within_each_group(make_trace: Any) -> None:
    events = []
    for i, (group, collective) in enumerate(
        [("0", "allreduce"), ("1", "_allgather_base"), ("0", "broadcast"), ("1", "reduce_scatter")]
    ):
        t = 100.0 * i
        args = {
            "Collective name": collective,
            "Process Group Name": group,
            "In msg nelems": 8,
            "Out msg nelems": 64,
            "dtype": "BFloat16",
            "Group size": 8,
        }
        events += [
            complete_event("cudaLaunchKernel", "cuda_runtime", t, 5, correlation=i + 1),
            complete_event("ncclDevKernel_Generic", "kernel", t + 10, 2, pid=0, tid=COMM_STREAM,
                           correlation=i + 1, **args),
        ]  # fmt: skip
    found = collectives(load_trace(make_trace(events)))
    assert [(c.op, c.group, c.index) for c in found] == [
        ("all_reduce", "0", 0),
        ("all_gather", "1", 0),
        ("broadcast", "0", 1),
        ("reduce_scatter", "1", 1),
    ]
    # The larger of the input and output buffers, as nccl-tests counts an all_gather's size.
    assert {c.bytes for c in found} == {64 * 2}
    gather = found[1]
    assert gather.busbw_gb_s == pytest.approx(gather.algbw_gb_s * 7 / 8)
    assert found[2].busbw_gb_s == pytest.approx(found[2].algbw_gb_s)


def test_exposed_share_is_of_the_step_not_of_overlapping_gpu_windows(make_trace: Any) -> None:
    # Steps of 100 µs. Each runs 12 µs of all-reduce alone, then a GEMM, and launches a last
    # kernel that runs only after the next step's work has begun: each step's GPU window is
    # 150 µs, but a step takes 100. Against 150 the 12 µs would be 8%, under the rule's 10%.
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    events = []
    for n in range(4):
        t, c = 100.0 * n, 10 * n
        events += [
            complete_event(f"ProfilerStep#{n}", "user_annotation", t, 100),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 1, 2, correlation=c + 1),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 4, 2, correlation=c + 2),
            complete_event("cudaLaunchKernel", "cuda_runtime", t + 7, 2, correlation=c + 3),
            complete_event(nccl, "kernel", t + 10, 12, pid=0, tid=COMM_STREAM, correlation=c + 1),
            complete_event("gemm", "kernel", t + 22, 68, pid=0, tid=7, correlation=c + 2),
            complete_event("late", "kernel", t + 150, 10, pid=0, tid=8, correlation=c + 3),
        ]
    (finding,) = diagnose(make_trace(events), select=["exposed-communication"])
    row = finding.evidence["steps"][0]
    assert (row["exposed_us"], row["step_window_us"]) == (12.0, 100.0)
    assert "for 12% of the step (12.0 of 100.0 µs, the longer of its CPU and GPU windows)" in (
        finding.message
    )
    assert finding.evidence["median_exposed_share"] == 0.12


@pytest.mark.parametrize(
    ("collective", "ins", "outs", "group_size"),
    [
        ("_allgather_base", 8, 64, 8),  # the output holds every rank's input
        ("reduce_scatter", 64, 8, 8),  # the input holds every rank's output
        ("allreduce", 64, 64, None),  # in and out alike: no telling
        ("_allgather_base", 8, 60, None),  # not a whole multiple
    ],
)
def test_a_group_size_not_recorded_is_read_off_the_buffers(
    make_trace: Any, collective: str, ins: int, outs: int, group_size: int | None
) -> None:
    args = {"Collective name": collective, "In msg nelems": ins, "Out msg nelems": outs,
            "dtype": "Float"}  # fmt: skip
    events = [
        complete_event("cudaLaunchKernel", "cuda_runtime", 0, 5, correlation=1),
        complete_event("ncclDevKernel_Generic", "kernel", 10, 2, pid=0, tid=COMM_STREAM,
                       correlation=1, **args),
    ]  # fmt: skip
    (found,) = collectives(load_trace(make_trace(events)))
    assert found.group_size == group_size


def test_an_old_collectives_dtype_comes_from_its_kernels_name(make_trace: Any) -> None:
    # torch ~1.9 with NCCL < 2.7: the nccl:all_reduce label records its sizes without dtypes
    # ("Input dims"), and the kernel's name ends in the element type.
    events = [
        complete_event("nccl:all_reduce", "cpu_op", 0, 50, **{"Input dims": [[1024, 1024]]}),
        complete_event("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1),
        complete_event("ncclAllReduceRingLLKernel_sum_f32(ncclColl)", "kernel", 20, 400,
                       pid=0, tid=COMM_STREAM, correlation=1),
        complete_event("nccl:broadcast", "cpu_op", 100, 50, **{"Input dims": [[1024]]}),
        complete_event("cudaLaunchKernel", "cuda_runtime", 110, 5, correlation=2),
        complete_event("ncclBroadcastRingLLKernel_copy_i8(ncclColl)", "kernel", 120, 10,
                       pid=0, tid=COMM_STREAM, correlation=2),
    ]  # fmt: skip
    found = collectives(load_trace(make_trace(events)))
    assert [(c.op, c.bytes, c.dtype) for c in found] == [
        ("all_reduce", 4 << 20, "float32"),
        ("broadcast", 1024, "int8"),
    ]


def test_intersection_starts_at_the_first_interval_that_reaches_the_steps() -> None:
    # The compute intervals of the whole trace against one step's collectives: the walk
    # skips the intervals that end before the step's first collective, and the length is
    # the same as measured point by point.
    chosen = random.Random(7)
    for _ in range(200):
        cuts = sorted(chosen.sample(range(1, 400), 40))
        whole = list(zip(cuts[0::2], cuts[1::2], strict=True))  # disjoint, in order
        first = chosen.randrange(0, 200)
        cuts = sorted(chosen.sample(range(first, first + 200), 10))
        step = list(zip(cuts[0::2], cuts[1::2], strict=True))
        covered = sum(
            1
            for t in range(0, 400)
            if any(s <= t < e for s, e in whole) and any(s <= t < e for s, e in step)
        )
        assert _intersection(step, whole) == covered
        assert _intersection([], whole) == _intersection(step, []) == 0.0


@pytest.mark.parametrize(
    ("distributed", "group", "peer_bytes"),
    [
        # Rank 2 of a four-rank group: 6 of its 12 rows go out, 9 of 12 come in.
        ({"rank": 2, "world_size": 4}, {}, 9 * 1024 * 4),
        ({"rank": 6, "world_size": 8}, {"Process Group Ranks": "[4, 5, 6, 7]"}, 9 * 1024 * 4),
        # Without its place in the group, no split is its own: the even-split factor applies.
        ({"rank": 6, "world_size": 8}, {}, None),
        ({"rank": 1, "world_size": 8}, {"Process Group Ranks": "[4, 5, 6, 7]"}, None),
        ({}, {}, None),
    ],
)
def test_an_all_to_alls_bytes_to_other_ranks_come_from_its_splits(
    make_trace: Any, distributed: dict, group: dict, peer_bytes: int | None
) -> None:
    args = {"Collective name": "all_to_allv", "In msg nelems": 12 * 1024,
            "Out msg nelems": 12 * 1024, "dtype": "Float", "Group size": 4,
            "In split size": "[2, 2, 6, 2]", "Out split size": "[3, 3, 3, 3]", **group}  # fmt: skip
    events = [
        complete_event("cudaLaunchKernel", "cuda_runtime", 0, 5, correlation=1),
        complete_event("ncclDevKernel_SendRecv", "kernel", 10, 2, pid=0, tid=COMM_STREAM,
                       correlation=1, **args),
    ]  # fmt: skip
    top = {"distributedInfo": distributed} if distributed else {}
    (found,) = collectives(load_trace(make_trace(events, **top)))
    assert found.peer_bytes == peer_bytes
    even = found.algbw_gb_s * 3 / 4  # type: ignore[operator]
    expected = even if peer_bytes is None else peer_bytes / 2e3
    assert found.busbw_gb_s == pytest.approx(expected)


def _member(ts: float, op: str, peer: int) -> dict[str, Any]:
    """A send or receive of a batch: recorded, no kernel of its own."""
    return complete_event("record_param_comms", "cpu_op", ts, 5, **{
        "Collective name": op, "Process Group Name": "0", "Group size": 2, "dtype": "Float",
        "In msg nelems": 256, ("Dst Rank" if op == "send" else "Src Rank"): peer})  # fmt: skip


def test_a_batch_is_read_off_the_sends_and_receives_since_the_last_one(make_trace: Any) -> None:
    # Two batches; the first one's kernel was not recorded (its label was). The second
    # batch's kernel runs its own receive only, not the first batch's send too.
    events = [
        _member(0, "send", 1),
        complete_event("nccl:coalesced", "user_annotation", 10, 20),
        _member(40, "recv", 1),
        complete_event("nccl:coalesced", "user_annotation", 50, 20),
        complete_event("cudaLaunchKernel", "cuda_runtime", 55, 5, correlation=1),
        complete_event("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "kernel",
                       80, 10, pid=0, tid=COMM_STREAM, correlation=1),
    ]  # fmt: skip
    (batch,) = collectives(load_trace(make_trace(events)))
    assert (batch.op, batch.group, batch.group_size, batch.bytes) == ("send_recv", "0", 2, 1024)
    assert [(t.op, t.peer) for t in batch.transfers] == [("recv", 1)]


def test_a_coalesced_label_around_a_collective_leaves_the_op_to_the_kernel(
    make_trace: Any,
) -> None:
    events = [
        complete_event("nccl:coalesced", "user_annotation", 50, 20),
        complete_event("cudaLaunchKernel", "cuda_runtime", 55, 5, correlation=1),
        complete_event("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                       "kernel", 80, 10, pid=0, tid=COMM_STREAM, correlation=1),
    ]  # fmt: skip
    (found,) = collectives(load_trace(make_trace(events)))
    assert found.op == "all_reduce" and found.transfers == ()
