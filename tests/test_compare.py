"""compare(): two recorded traces side by side, and the compile-cpu-tax rule it runs."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

import pytest
from conftest import (
    FIXTURES,
    complete_event,
    fixture_document,
    fixture_steps,
    gpu_fixture,
    trace_document,
    write_trace,
)

from profiling_utils import Comparison, TraceError, compare, load_trace
from profiling_utils.comm import comm_overlap
from profiling_utils.rules import Facts
from profiling_utils.stats import Distribution


def cpu_median(name: str) -> float:
    return statistics.median(e["dur"] for e in fixture_steps(name))


@pytest.fixture(scope="module")
def eager_vs_compiled() -> Comparison:
    return compare(gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_compile"))


def test_steps_side_by_side(eager_vs_compiled: Comparison) -> None:
    pairs = eager_vs_compiled.steps
    assert [(p.baseline_step, p.trace_step) for p in pairs] == [(2, 2), (3, 3), (4, 4)]
    assert [p.baseline_cpu_us for p in pairs] == [
        e["dur"] for e in fixture_steps("64_bf16_warm_eager")
    ]
    assert [p.trace_cpu_us for p in pairs] == [
        e["dur"] for e in fixture_steps("64_bf16_warm_compile")
    ]
    assert all(p.baseline_gpu_busy_us and p.trace_gpu_busy_us for p in pairs)


def test_counts_and_what_only_one_side_has(eager_vs_compiled: Comparison) -> None:
    eager, compiled = eager_vs_compiled.baseline, eager_vs_compiled.trace
    assert (eager.kernels_per_step, compiled.kernels_per_step) == (2, 1)  # mm + add; addmm
    assert (eager.launches_per_step, compiled.launches_per_step) == (2, 2)  # copy + GEMM
    assert compiled.launch_apis == {"cudaMemcpyAsync": 3, "cuLaunchKernelEx": 3}
    assert (eager.compiled, compiled.compiled) == (False, True)
    only_eager = {n.name for n in eager_vs_compiled.ops_only_in_baseline}
    only_compiled = {n.name for n in eager_vs_compiled.ops_only_in_trace}
    assert {"aten::matmul", "aten::mm", "aten::add"} <= only_eager
    assert {"TorchDynamo Cache Lookup", "aten::addmm"} <= only_compiled
    assert "aten::addmm" not in only_eager
    # The compiled GEMM is another variant of the eager kernel, and the add kernel is gone.
    assert len(eager_vs_compiled.kernels_only_in_baseline) == 2
    assert len(eager_vs_compiled.kernels_only_in_trace) == 1
    assert all(n.count == 3 for n in eager_vs_compiled.kernels_only_in_trace)


def test_compile_cpu_tax_against_the_eager_baseline(eager_vs_compiled: Comparison) -> None:
    (finding,) = eager_vs_compiled.findings
    assert (finding.rule, finding.severity, finding.table) == (
        "compile-cpu-tax",
        "warning",
        "torch.compile",
    )
    ratio = cpu_median("64_bf16_warm_compile") / cpu_median("64_bf16_warm_eager")
    assert finding.evidence["ratio"] == pytest.approx(ratio, 1e-3)
    assert eager_vs_compiled.cpu_ratio == pytest.approx(ratio)
    assert ratio > 1.2


def test_compile_cpu_tax_says_when_the_host_ran_at_another_speed(monkeypatch) -> None:
    # Recorded one after the other, the compiled run found the host 1.66x slower: every call
    # both runs make took that much longer, and part of the ratio is the host's.
    from profiling_utils import measures

    ratio = cpu_median("64_bf16_warm_compile") / cpu_median("64_bf16_warm_eager")
    monkeypatch.setattr(measures, "host_speed_ratio", lambda a, b: (1.66, 12))
    comparison = compare(gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_compile"))
    (finding,) = comparison.findings
    assert finding.evidence["host_speed_ratio"] == 1.66
    assert finding.message.endswith(
        " The host ran at another speed in each: the calls both runs make took 1.66× as long "
        f"in the compiled run, so part of the difference is the host's (at one speed, about "
        f"{ratio / 1.66:.1f}×)."
    )
    # Alike speeds (within a quarter): nothing said.
    monkeypatch.setattr(measures, "host_speed_ratio", lambda a, b: (1.1, 12))
    comparison = compare(gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_compile"))
    assert "another speed" not in comparison.findings[0].message


def test_compile_cpu_tax_with_the_compiled_run_as_baseline() -> None:
    comparison = compare(gpu_fixture("4096_bf16_warm_compile"), gpu_fixture("4096_bf16_warm_eager"))
    (finding,) = comparison.findings
    assert finding.evidence["eager"]["trace"].endswith("4096_bf16_warm_eager.json.gz")
    assert finding.evidence["compiled"]["trace"].endswith("4096_bf16_warm_compile.json.gz")
    # The 4096 GEMM keeps the GPU busy as long as the compiled step's CPU: the tax hides
    # behind it. The 64 one does not.
    compiled = comparison.baseline
    assert compiled.median_step_gpu_busy_us >= 0.75 * compiled.median_step_cpu_us
    assert finding.evidence["hidden_behind_gpu"] is True
    assert "there the tax hides behind the GPU's work" in finding.message


def test_compile_cpu_tax_is_not_hidden_where_the_cpu_sets_the_pace(
    eager_vs_compiled: Comparison,
) -> None:
    (finding,) = eager_vs_compiled.findings
    compiled = eager_vs_compiled.trace
    assert compiled.median_step_gpu_busy_us < 0.75 * compiled.median_step_cpu_us
    assert finding.evidence["hidden_behind_gpu"] is False
    assert "hides" not in finding.message


def test_cuda_graphs_still_pay_the_compile_tax_on_the_h100() -> None:
    comparison = compare(
        gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_compile-reduce-overhead")
    )
    assert comparison.trace.cuda_graph_launches == 3
    assert comparison.trace.launch_apis["cudaGraphLaunch"] == 3
    (finding,) = comparison.findings
    assert finding.evidence["compiled"]["cuda_graph_launches"] == 3
    assert finding.evidence["ratio"] > 2


@pytest.mark.parametrize(
    ("baseline", "trace"),
    [
        ("64_bf16_warm_eager", "64_bf16_cold_eager"),  # both eager
        ("64_bf16_warm_compile", "4096_bf16_warm_compile"),  # both compiled
    ],
)
def test_no_compile_tax_without_an_eager_and_a_compiled_side(baseline: str, trace: str) -> None:
    assert compare(gpu_fixture(baseline), gpu_fixture(trace)).findings == []


def test_a_trace_against_itself() -> None:
    trace = load_trace(gpu_fixture("4096_bf16_warm_eager"))
    comparison = compare(trace, trace)
    assert comparison.findings == []
    assert not comparison.ops_only_in_baseline and not comparison.ops_only_in_trace
    assert not comparison.kernels_only_in_baseline and not comparison.kernels_only_in_trace
    assert comparison.cpu_ratio == 1.0


def test_steps_pair_by_number_where_one_schedule_numbers_both(make_trace) -> None:
    # Steps #2-#4 of a wait=1, warmup=1 schedule against #0-#19 of another without them: #2
    # faces #2 (it had faced the other run's cold #0).
    comparison = compare(gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_eager_w0a20"))
    assert len(comparison.steps) == 20
    pairs = [(pair.baseline_step, pair.trace_step) for pair in comparison.steps]
    assert pairs[:5] == [(None, 0), (None, 1), (2, 2), (3, 3), (4, 4)]
    assert comparison.steps[5].baseline_cpu_us is None and comparison.steps[5].trace_step == 5

    # Numbers the two do not share: by position.
    def steps(first: int) -> list[dict]:
        return [
            complete_event(f"ProfilerStep#{first + k}", "user_annotation", 1000.0 * k, 100)
            for k in range(3)
        ]

    apart = compare(make_trace(steps(1), name="a.json"), make_trace(steps(10), name="b.json"))
    assert [(p.baseline_step, p.trace_step) for p in apart.steps] == [(1, 10), (2, 11), (3, 12)]


def test_to_dict_is_plain_json_and_to_text_reads(eager_vs_compiled: Comparison) -> None:
    data = eager_vs_compiled.to_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["findings"][0]["rule"] == "compile-cpu-tax"
    assert data["baseline"]["trace"].endswith("64_bf16_warm_eager.json.gz")
    text = eager_vs_compiled.to_text()
    assert "median step CPU (µs)" in text
    assert "TorchDynamo Cache Lookup" in text
    assert "[warning] compile-cpu-tax" in text


def test_compare_raises_trace_error_for_a_bad_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError):
        compare(gpu_fixture("64_bf16_warm_eager"), tmp_path / "missing.json.gz")


def test_steps_of_seconds_keep_their_columns_apart(make_trace) -> None:
    long_steps = [12_345_678.5, 98_765_432.25]
    baseline = make_trace(
        [complete_event(f"ProfilerStep#{i}", "user_annotation", i * 1e8, d)
         for i, d in enumerate(long_steps)],
        name="baseline.json",
    )  # fmt: skip
    trace = make_trace(
        [complete_event(f"ProfilerStep#{i}", "user_annotation", i * 1e8, 7.5) for i in (0, 1)],
        name="trace.json",
    )
    text = compare(baseline, trace).to_text()
    table = text.split("Steps (µs)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = [re.split(r"\s{2,}", line.strip()) for line in table]
    assert rows[0] == ["step", "baseline CPU", "trace CPU", "baseline GPU busy", "trace GPU busy"]
    assert rows[1:] == [
        ["#0 | #0", "12,345,678.5", "7.5", "-", "-"],
        ["#1 | #1", "98,765,432.2", "7.5", "-", "-"],
    ]


def test_step_numbers_are_written_as_names(make_trace) -> None:
    # ProfilerStep#1009 is step #1009, not #1,009; a step with no partner is "-", not "#-".
    baseline = make_trace(
        [complete_event(f"ProfilerStep#{n}", "user_annotation", n * 100, 50) for n in (1009,)],
        name="baseline.json",
    )
    trace = make_trace(
        [complete_event(f"ProfilerStep#{n}", "user_annotation", n * 100, 50) for n in (2, 3)],
        name="trace.json",
    )
    text = compare(baseline, trace).to_text()
    table = text.split("Steps (µs)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [re.split(r"\s{2,}", line.strip())[0] for line in table[1:]] == ["#1009 | #2", "- | #3"]


def test_an_empty_trace_is_not_called_cpu_only(make_trace) -> None:
    empty = make_trace([], name="empty.json", deviceProperties=None)
    cpu_only = make_trace(
        [complete_event("aten::add", "cpu_op", 0, 5)], name="cpu.json", deviceProperties=None
    )
    comparison = compare(empty, cpu_only)
    assert (comparison.baseline.content, comparison.trace.content) == ("no events", "CPU only")
    assert "content:  no events | CPU only" in comparison.to_text()
    gpu_and_cpu = compare(gpu_fixture("64_bf16_warm_eager"), cpu_only).to_text()
    assert "device:   NVIDIA H100 80GB HBM3 | -\n" in gpu_and_cpu
    gpu = compare(gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_eager"))
    assert gpu.baseline.content == "GPU"


def test_a_trace_that_lost_its_gpu_records_is_not_called_cpu_only(make_trace) -> None:
    # The recording's launch calls are all there, but none of its kernels, copies or memsets:
    # it ran on a GPU, so it is neither "CPU only" nor a run that launched no kernel.
    events = json.loads(gzip.decompress(gpu_fixture("64_bf16_warm_eager").read_bytes()))
    gpu_categories = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    kept = [e for e in events["traceEvents"] if e.get("cat") not in gpu_categories]
    lost = make_trace({**events, "traceEvents": kept}, name="lost.json")
    assert load_trace(lost).content == "GPU not recorded"
    comparison = compare(gpu_fixture("64_bf16_warm_eager"), lost)
    assert (comparison.baseline.content, comparison.trace.content) == ("GPU", "GPU not recorded")
    # Its kernels' names and counts are not known: no kernel is "only in the baseline", and
    # its counts are null, not 0.
    assert comparison.kernels_only_in_baseline == comparison.kernels_only_in_trace == []
    lost_side = comparison.to_dict()["trace"]
    unknown = (
        "kernels", "compiler_kernels", "launches", "gpu_activities", "collectives", "launch_apis"
    )  # fmt: skip
    assert [lost_side[key] for key in unknown] == [None] * len(unknown)
    text = comparison.to_text()
    assert "content:  GPU | GPU not recorded" in text
    assert "the trace launched GPU work that it does not hold" in text
    rows = {
        re.split(r"\s{2,}", line.strip())[0]: re.split(r"\s{2,}", line.strip())[1:]
        for line in text.splitlines()
        if "(whole trace)" in line
    }
    assert rows["kernels (whole trace)"] == ["6", "-"]  # not "0", with no "0.00×"
    assert rows["GPU activities (whole trace)"][1] == "-"
    assert text.count("not compared (no kernel recorded in the trace)") == 2
    assert "trace:    not known (no GPU record to tell a launch by)" in text
    # Beside a run whose GPU work is recorded, nothing changes.
    whole = compare(gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_compile"))
    assert "not compared" not in whole.to_text() and whole.kernels_only_in_baseline


def test_an_unnamed_device_is_described_as_summary_describes_it() -> None:
    # The TraceLens MI300-class trace has GPU work but no deviceProperties: the device is
    # told by its launch API and its GEMM kernels' ISA tag, as in summary and diagnose.
    path = Path(__file__).parent / "fixtures/foreign/tracelens__gemm_01_compute_few_tiles.json.gz"
    comparison = compare(path, path)
    assert comparison.baseline.device == "unknown AMD GPU, gfx942"
    assert "device:   unknown AMD GPU, gfx942\n" in comparison.to_text()


def test_runs_on_different_gpus_are_said_to_differ_in_hardware() -> None:
    h100 = gpu_fixture("4096_bf16_warm_eager")
    v100 = (
        Path(__file__).parent
        / "fixtures/foreign/kineto__tb_plugin_test_gpu_metrics_input.790be85.json.gz"
    )
    comparison = compare(h100, v100)
    assert comparison.devices_differ
    assert "(different devices: times and kernels differ with the hardware too" in (
        comparison.to_text()
    )
    assert not compare(h100, h100).devices_differ


def test_collectives_are_counted_apart_from_compute() -> None:
    # Rank 0 of a run where rank 1 stalls on the host before each all_reduce: rank 0's GPU is
    # "busy" waiting in the collective, which the compare table must show as such.
    nccl = FIXTURES / "nccl"
    comparison = compare(nccl / "balanced" / "rank0.json.gz", nccl / "stalled" / "rank0.json.gz")
    a, b = comparison.baseline, comparison.trace
    assert (a.collectives, b.collectives) == (10, 10)
    for side in (a, b):
        trace = load_trace(side.trace)
        per_step = {o.step: o.communication_us for o in comm_overlap(trace).steps}
        assert side.median_step_communication_us == pytest.approx(
            statistics.median(per_step.get(step.number, 0.0) for step in trace.steps)
        )
        assert 0 <= side.median_step_exposed_communication_us <= side.median_step_communication_us
    # The stall shows up as time in the all_reduce, most of the step's GPU busy time.
    assert b.median_step_communication_us > 10 * a.median_step_communication_us
    assert b.median_step_communication_us > 0.9 * b.median_step_gpu_busy_us
    rows = {line[:34].strip(): line[34:].split() for line in comparison.to_text().splitlines()}
    assert rows["collective kernels (whole trace)"] == ["10", "10", "1.00×"]
    assert rows["median step in collectives (µs)"][1] == f"{b.median_step_communication_us:,.1f}"


def test_two_ranks_of_one_run_say_which_ranks_they_are() -> None:
    balanced = FIXTURES / "nccl" / "balanced"
    comparison = compare(balanced / "rank0.json.gz", balanced / "rank1.json.gz")
    assert (comparison.baseline.rank, comparison.trace.rank) == (0, 1)
    assert comparison.to_dict()["trace"]["rank"] == 1
    text = comparison.to_text()
    assert (
        "\nrank:     0 | 1\n          (two ranks: they differ with their share of the work" in text
    )
    # One rank in two runs: named once, without the note; no rank recorded: no line.
    same = compare(balanced / "rank0.json.gz", FIXTURES / "nccl" / "stalled" / "rank0.json.gz")
    assert "\nrank:     0\ncontent:" in same.to_text()
    assert same.to_dict()["baseline"]["rank"] == 0
    assert (
        "rank:"
        not in compare(
            gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_compile")
        ).to_text()
    )


def test_no_collective_rows_without_collectives(eager_vs_compiled: Comparison) -> None:
    assert eager_vs_compiled.baseline.collectives == eager_vs_compiled.trace.collectives == 0
    assert eager_vs_compiled.trace.median_step_communication_us is None
    assert "collective" not in eager_vs_compiled.to_text()


def test_per_step_counts_leave_out_the_steps_the_rules_leave_out(make_trace) -> None:
    # Three steps of two launches each; the profiler's recording window ends inside step 2,
    # whose end was not recorded: two steps count, and so do only their four launches.
    events = [complete_event("PyTorch Profiler (0)", "Trace", 0, 2_500)]
    for n in range(3):
        t = 1_000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 900))
        for k in (1, 2):
            c = 10 * n + k
            events += [
                complete_event("cudaLaunchKernel", "cuda_runtime", t + 100 * k, 5, correlation=c),
                complete_event("k", "kernel", t + 100 * k + 10, 5, pid=0, tid=7, correlation=c),
            ]
    path = make_trace(events)
    side = compare(path, path).to_dict()["trace"]
    assert side["steps"] == 2
    assert side["kernels_per_step"] == 2.0 and side["launches_per_step"] == 2.0


def aot_steps(step_us: float, compiled: bool) -> list[dict]:
    """Three steps of ``step_us``; the compiled side calls AOTAutograd's CompiledFunction and
    nothing else marks it (torch before the ``Torch-Compiled Region`` labels)."""
    events = []
    for n in range(3):
        t = 10_000.0 * n
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, step_us))
        name = "CompiledFunction" if compiled else "aten::addmm"
        events.append(complete_event(name, "cpu_op", t + 10, step_us - 20))
    return events


@pytest.mark.parametrize("different_gpus", [False, True])
def test_compile_cpu_tax_reads_aotautograds_compiled_function(make_trace, different_gpus) -> None:
    a100 = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0}]
    v100 = [{"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0}]
    eager = make_trace(aot_steps(1_000, False), name="eager.json", deviceProperties=a100)
    compiled = make_trace(
        aot_steps(1_500, True),
        name="compiled.json",
        deviceProperties=v100 if different_gpus else a100,
    )
    (finding,) = compare(eager, compiled).findings
    assert finding.rule == "compile-cpu-tax" and finding.evidence["ratio"] == 1.5
    assert finding.evidence["devices_differ"] is different_gpus
    assert ("The two ran on different GPUs" in finding.message) is different_gpus


def with_sync(events: list[dict], sync_us: float) -> list[dict]:
    """``events`` (aot_steps') with a cudaDeviceSynchronize of ``sync_us`` ending each step."""
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    return events + [
        complete_event("cudaDeviceSynchronize", "cuda_runtime", s["ts"] + s["dur"] - sync_us - 5,
                       sync_us)
        for s in steps
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("eager", "compiled", "fires"),
    [
        # 1,000 µs eager, 100 of it in a device sync, against 1,500 µs compiled with 600 in
        # its sync (a slower GPU): 900 µs against 900 µs outside the syncs, no tax.
        ((1_000, 100), (1_500, 600), False),
        # The same syncs on both sides: 900 against 1,400 µs outside (1.6x).
        ((1_000, 100), (1_500, 100), True),
        # The compiled run's GPU is faster: 1,000 µs (600 in its sync) against 1,050 µs (100
        # in it), 1.05x in all but 400 against 950 µs outside (2.4x): the tax a wait hid.
        ((1_000, 600), (1_050, 100), True),
    ],
)
def test_compile_cpu_tax_leaves_the_waits_for_the_gpu_out(
    make_trace, eager: tuple[float, float], compiled: tuple[float, float], fires: bool
) -> None:
    eager_path = make_trace(with_sync(aot_steps(eager[0], False), eager[1]), name="eager.json")
    compiled_path = make_trace(
        with_sync(aot_steps(compiled[0], True), compiled[1]), name="compiled.json"
    )
    findings = compare(eager_path, compiled_path).findings
    assert bool(findings) is fires
    if fires:
        (finding,) = findings
        own = (compiled[0] - compiled[1], eager[0] - eager[1])
        assert finding.evidence["ratio_outside_syncs"] == pytest.approx(own[0] / own[1], abs=1e-3)
        assert (
            f"outside its waits for the GPU (host syncs), {own[0]:.1f} µs against {own[1]:.1f} µs"
        ) in finding.message


def test_the_text_lists_twenty_names_of_each_kind_and_the_json_all(make_trace) -> None:
    def steps(ops: list[str]) -> list[dict]:
        events = [complete_event("ProfilerStep#1", "user_annotation", 0, 1_000)]
        return events + [complete_event(op, "cpu_op", 10 + 10 * k, 5) for k, op in enumerate(ops)]

    baseline = make_trace(steps(["aten::mm"]), name="baseline.json")
    trace = make_trace(steps([f"aten::op{k:02d}" for k in range(25)]), name="trace.json")
    comparison = compare(baseline, trace)
    assert len(comparison.to_dict()["ops_only_in_trace"]) == 25
    text = comparison.to_text()
    listed = text.split("Ops only in the trace (count, µs in all, name):\n", 1)[1]
    listed = listed.split("\n\n", 1)[0]
    assert len(listed.splitlines()) == 21
    assert listed.splitlines()[-1] == "  ... and 5 more (--json lists them all)"


def test_traces_without_steps_compare_their_whole_recordings(make_trace) -> None:
    # Two scripts without a profiler schedule: one kernel each, 100 µs then 40 µs, launched
    # from one op; the host's events span 200 µs and 80 µs.
    def script(kernel_us: float, host_us: float) -> str:
        return str(
            make_trace(
                [
                    complete_event("aten::mm", "cpu_op", 0, host_us),
                    complete_event("cudaLaunchKernel", "cuda_runtime", 5, 5, correlation=1),
                    complete_event("gemm", "kernel", 20, kernel_us, pid=0, tid=7, correlation=1),
                ],
                name=f"script_{kernel_us:g}.json",
            )
        )

    comparison = compare(script(100.0, 200.0), script(40.0, 80.0))
    a, b = comparison.baseline, comparison.trace
    assert (a.steps, a.median_step_cpu_us) == (0, None)
    assert (a.recording_cpu_us, a.recording_gpu_busy_us) == (200.0, 100.0)
    assert (b.recording_cpu_us, b.recording_gpu_busy_us) == (80.0, 40.0)
    text = comparison.to_text()
    assert re.search(r"host, whole recording \(µs\) +200\.0 +80\.0 +0\.40×", text)
    assert re.search(r"GPU busy, whole trace \(µs\) +100\.0 +40\.0 +0\.40×", text)
    assert json.loads(json.dumps(comparison.to_dict()))["trace"]["recording_cpu_us"] == 80.0


def test_traces_with_steps_leave_the_whole_recording_rows_out(
    eager_vs_compiled: Comparison,
) -> None:
    assert "host, whole recording" not in eager_vs_compiled.to_text()
    assert eager_vs_compiled.baseline.recording_cpu_us > 0


def test_traces_without_steps_compare_their_communication_over_the_whole_trace(
    tmp_path: Path,
) -> None:
    # Rank 0 of the balanced and the stalled NCCL runs, their steps removed (a serving loop
    # records none): the stalled rank 0 waits in its all_reduces for its late peer.
    def stepless(run: str) -> Path:
        document = json.loads(
            gzip.decompress((FIXTURES / "nccl" / run / "rank0.json.gz").read_bytes())
        )
        document["traceEvents"] = [
            e
            for e in document["traceEvents"]
            if not str(e.get("name", "")).startswith("ProfilerStep#")
        ]
        return write_trace(tmp_path / f"{run}.json", document)

    comparison = compare(stepless("balanced"), stepless("stalled"))
    a, b = comparison.baseline, comparison.trace
    for side, run in ((a, "balanced"), (b, "stalled")):
        total = comm_overlap(load_trace(FIXTURES / "nccl" / run / "rank0.json.gz")).total
        assert side.communication_us == pytest.approx(total.communication_us)
        assert side.exposed_communication_us == pytest.approx(total.exposed_us)
    assert b.communication_us > 10 * a.communication_us
    assert "in collectives, whole trace (µs)" in comparison.to_text()
    assert (
        "in collectives, whole trace"
        not in compare(
            FIXTURES / "nccl" / "balanced" / "rank0.json.gz",
            FIXTURES / "nccl" / "stalled" / "rank0.json.gz",
        ).to_text()
    )


def test_the_steps_row_gives_no_ratio(make_trace) -> None:
    with_steps = make_trace(aot_steps(1_000, False), name="steps.json")
    without = make_trace([complete_event("aten::add", "cpu_op", 0, 100)], name="none.json")
    (row,) = [
        line
        for line in compare(with_steps, without).to_text().splitlines()
        if line.startswith("steps ")
    ]
    assert row.split() == ["steps", "3", "0"]


def test_a_device_without_a_name_is_not_said_to_differ() -> None:
    # HTA's sampled rank names no GPU (CUDA launches); the TensorBoard plugin's input names a
    # V100: nothing says they differ.
    foreign = FIXTURES / "foreign"
    unnamed = foreign / "hta__timeline_analysis_sampled_rank-0.json.gz"
    named = foreign / "kineto__tb_plugin_test_gpu_metrics_input.790be85.json.gz"
    comparison = compare(named, unnamed)
    assert (comparison.baseline.device_named, comparison.trace.device_named) == (True, False)
    assert not comparison.devices_differ
    assert "different devices" not in comparison.to_text()


def test_gpus_of_one_generic_name_differ_by_their_architecture(tmp_path: Path) -> None:
    # ROCm names an MI300X and an MI250 alike ("AMD Radeon Graphics"); gcnArchName tells them
    # apart.
    named = FIXTURES / "foreign" / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    document = json.loads(gzip.decompress(named.read_bytes()))
    assert {d["name"] for d in document["deviceProperties"]} == {"AMD Radeon Graphics"}
    for device in document["deviceProperties"]:
        device.update(gcnArchName="gfx942:sramecc+:xnack-", numSms=304)
    other = write_trace(tmp_path / "mi300.json.gz", document)
    comparison = compare(named, other)
    assert comparison.baseline.device == "AMD Radeon Graphics, gfx90a"
    assert comparison.trace.device == "AMD Radeon Graphics, gfx942"
    assert comparison.devices_differ
    assert not compare(named, named).devices_differ


def test_a_step_whose_gpu_records_are_missing_keeps_its_cpu_time(tmp_path: Path) -> None:
    # Three steps launching one kernel each; in the second trace the kernel of step 1 went
    # unrecorded (a dropped buffer): its CPU window is still a sample of the host's time.
    def steps(missing: int | None) -> list[dict]:
        events = []
        for n, step_us in enumerate([1000.0, 1300.0, 1100.0]):
            t = 10_000.0 * n
            events += [
                complete_event(f"ProfilerStep#{n}", "user_annotation", t, step_us),
                complete_event("aten::mm", "cpu_op", t + 10, 100),
                complete_event("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=n + 1),
            ]
            if n != missing:
                events.append(
                    complete_event("gemm", "kernel", t + 30, 50, pid=0, tid=7, correlation=n + 1)
                )
        return events

    whole = write_trace(tmp_path / "whole.json", trace_document(steps(None)))
    cut = write_trace(tmp_path / "cut.json", trace_document(steps(1)))
    comparison = compare(whole, cut)
    assert (comparison.baseline.steps, comparison.trace.steps) == (3, 3)
    assert comparison.trace.steps_without_gpu_records == 1
    assert comparison.baseline.median_step_cpu_us == comparison.trace.median_step_cpu_us == 1100
    assert comparison.cpu_ratio == 1.0
    assert [(p.trace_step, p.trace_cpu_us, p.trace_gpu_busy_us) for p in comparison.steps] == [
        (0, 1000.0, 50.0),
        (1, 1300.0, None),
        (2, 1100.0, 50.0),
    ]
    assert (
        "trace: 1 step whose kernels' GPU records are missing: its CPU time counts, its GPU "
        "figures do not" in comparison.to_text()
    )


def test_whole_trace_counts_of_recordings_of_different_lengths_get_no_ratio() -> None:
    comparison = compare(
        gpu_fixture("4096_bf16_warm_eager"), gpu_fixture("4096_bf16_shared-gpu_a30")
    )
    (row,) = [
        line for line in comparison.to_text().splitlines() if line.startswith("kernels (whole")
    ]
    assert row.split()[-2:] == ["6", "60"]
    assert "recordings of 3 and 30 steps, whose counts differ by that too" in comparison.to_text()
    (row,) = [
        line for line in comparison.to_text().splitlines() if line.startswith("median kernels per")
    ]
    assert row.endswith("1.00×")


def test_per_step_counts_are_medians_a_step_that_compiled_does_not_move(make_trace) -> None:
    # Three steps launching two kernels each; the first also runs 40 more (a compile's
    # autotuning): the mean would be 15.3 kernels a step, the median is 2.
    events = []
    for n in range(3):
        t = 1000.0 * n
        launches = 42 if n == 0 else 2
        events.append(complete_event(f"ProfilerStep#{n}", "user_annotation", t, 900))
        for k in range(launches):
            corr = 100 * n + k + 1
            events += [
                complete_event("cudaLaunchKernel", "cuda_runtime", t + 10 + 20 * k, 5,
                               correlation=corr),
                complete_event("k", "kernel", t + 20 + 20 * k, 5, pid=0, tid=7,
                               correlation=corr),
            ]  # fmt: skip
    path = make_trace(events)
    summary = compare(path, path).baseline
    assert (summary.kernels_per_step, summary.launches_per_step) == (2.0, 2.0)


def test_compile_cpu_tax_asks_whether_runs_whose_gpu_work_differs_did_the_same_work() -> None:
    # A 1024x32x64 linear layer eager against a 4096 matmul compiled: the GPUs' busy times
    # are 76 times apart. The 64 eager/compiled pair does the same work.
    (finding,) = compare(
        gpu_fixture("linear_1024x32x64_bf16_eager"), gpu_fixture("4096_bf16_warm_compile")
    ).findings
    assert "76× apart: compiling rarely changes the GPU's work that much" in finding.message
    (finding,) = compare(
        gpu_fixture("64_bf16_warm_eager"), gpu_fixture("64_bf16_warm_compile")
    ).findings
    assert "apart" not in finding.message


def test_an_amd_gpu_whose_architecture_one_trace_does_not_know_is_not_said_to_differ(
    tmp_path: Path,
) -> None:
    # The MI250 recording knows its architecture from its Tensile GEMM kernels' ISA tag; the
    # same recording without its GEMMs does not know it: nothing says the GPUs differ.
    named = FIXTURES / "foreign" / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    document = json.loads(gzip.decompress(named.read_bytes()))
    document["traceEvents"] = [
        e for e in document["traceEvents"] if "_ISA" not in str(e.get("name", ""))
    ]
    other = write_trace(tmp_path / "no_gemms.json.gz", document)
    comparison = compare(named, other)
    assert comparison.baseline.device == "AMD Radeon Graphics, gfx90a"
    assert comparison.trace.device == "AMD Radeon Graphics"
    assert not comparison.devices_differ


def test_a_cpu_only_trace_is_not_said_to_spend_no_time_in_collectives() -> None:
    # HTA's CPU-only rank runs Gloo collectives on its threads: no collective kernel, and
    # not "0.0" in collectives beside a GPU rank that has some.
    cpu_only = FIXTURES / "foreign" / "hta__cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
    gpu = FIXTURES / "nccl" / "balanced" / "rank0.json.gz"
    text = compare(cpu_only, gpu).to_text()
    (row,) = [line for line in text.splitlines() if line.startswith("median step in collectives")]
    assert row.split()[5] == "-"
    text = compare(gpu_fixture("4096_bf16_warm_eager"), gpu).to_text()
    (row,) = [line for line in text.splitlines() if line.startswith("median step in collectives")]
    assert row.split()[5] == "0.0"


def test_a_trace_whose_every_step_lost_its_gpu_records_gives_no_gpu_figures(tmp_path: Path) -> None:
    # Every kernel of the 64 warm eager run dropped (a profiler buffer lost): its steps'
    # CPU windows still compare, its GPU figures do not exist.
    path = gpu_fixture("64_bf16_warm_eager")
    document = json.loads(gzip.decompress(path.read_bytes()))
    document["traceEvents"] = [e for e in document["traceEvents"] if e.get("cat") != "kernel"]
    cut = write_trace(tmp_path / "cut.json.gz", document)
    comparison = compare(path, cut)
    assert comparison.trace.steps == comparison.baseline.steps == 3
    assert comparison.trace.steps_without_gpu_records == 3
    assert comparison.trace.median_step_gpu_busy_us is None
    assert comparison.trace.kernels_per_step is None
    assert comparison.cpu_ratio == 1.0
    assert all(pair.trace_gpu_busy_us is None for pair in comparison.steps)
    assert "trace: 3 steps whose kernels' GPU records are missing" in comparison.to_text()


def test_traces_of_torch_versions_that_name_things_differently_are_said_to(tmp_path: Path) -> None:
    # torch before 1.11 named autograd nodes without the version suffix (AddmmBackward);
    # a custom autograd Function has none in any version and says nothing.
    def trace(node: str, name: str) -> Path:
        events = [
            complete_event("ProfilerStep#1", "user_annotation", 0, 100),
            complete_event(node, "cpu_op", 10, 20),
            complete_event("MyFunctionBackward", "cpu_op", 40, 20),
        ]
        return write_trace(tmp_path / name, trace_document(events))

    old, new = trace("AddmmBackward", "old.json"), trace("AddmmBackward0", "new.json")
    comparison = compare(old, new)
    assert comparison.versions_differ
    assert "(written by torch or library versions that name ops, kernels or" in (
        comparison.to_text()
    )
    assert comparison.to_dict()["versions_differ"] is True
    assert not compare(new, trace("AddmmBackward0", "new2.json")).versions_differ

    # One kernel function with other argument types (torch 1.8's and 1.9's TensorIterator);
    # a kernel only one side runs, or an (anonymous namespace) in two names, says nothing.
    def kernels(*names: str) -> Path:
        events = [complete_event("ProfilerStep#1", "user_annotation", 0, 100)]
        for index, name in enumerate(names):
            events += [
                complete_event(
                    "cudaLaunchKernel", "cuda_runtime", 10 + index, 1, correlation=index
                ),
                complete_event(name, "kernel", 20 + index, 1, pid=0, tid=7, correlation=index),
            ]
        return write_trace(
            tmp_path / f"k{len(list(tmp_path.iterdir()))}.json", trace_document(events)
        )

    threshold = "void at::native::threshold_kernel_impl<float>({}, float, float)"
    old_k = kernels(threshold.format("at::TensorIterator&"))
    new_k = kernels(threshold.format("at::TensorIteratorBase&"))
    assert compare(old_k, new_k).versions_differ
    # The same inside a kernel template's arguments: the lambda's enclosing function
    # (torch 1.8's and 1.9's ReLU kernels in the ResNet traces).
    lambda_kernel = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl"
        "<float>({}, float, float)::{{lambda(float, float)#1}}, at::detail::Array<char*, 3> >"
        "(int, at::detail::Array<char*, 3>)"
    )
    assert compare(
        kernels(lambda_kernel.format("at::TensorIterator&")),
        kernels(lambda_kernel.format("at::TensorIteratorBase&")),
    ).versions_differ
    anonymous = "void at::native::(anonymous namespace){}(float*)"
    assert not compare(
        kernels(anonymous.format("::a")), kernels(anonymous.format("::b"))
    ).versions_differ
    # The legacy categories of torch ~1.8 (Operator, Kernel...) against today's.
    legacy = FIXTURES / "foreign" / "kineto__tb_plugin_test_gpu_metrics_input.790be85.json.gz"
    assert compare(legacy, gpu_fixture("64_bf16_warm_eager")).versions_differ
    assert not compare(legacy, legacy).versions_differ


def test_an_amd_gpu_against_an_unnamed_nvidia_one_differs_by_vendor() -> None:
    # HTA's sampled rank names no GPU but launches through CUDA: it differs from the MI250
    # by vendor.
    amd = FIXTURES / "foreign" / "hta__amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    unnamed_cuda = FIXTURES / "foreign" / "hta__timeline_analysis_sampled_rank-0.json.gz"
    comparison = compare(amd, unnamed_cuda)
    assert not comparison.trace.device_named
    assert comparison.devices_differ
    # The TraceLens trace names no GPU either, but its GEMM kernels name their ISA, gfx942
    # (an MI300): against the MI250's gfx90a, another GPU.
    unnamed_amd = FIXTURES / "foreign" / "tracelens__gemm_01_compute_few_tiles.json.gz"
    assert compare(amd, unnamed_amd).devices_differ


def test_gemms_at_another_fp32_matmul_precision_are_said_to() -> None:
    # The 4096 fp32 GEMM on the H100: ffma kernels (CUDA cores), then recorded again with
    # torch.set_float32_matmul_precision("high"): a TF32 kernel.
    fp32, tf32 = gpu_fixture("4096_fp32_warm_eager"), gpu_fixture("4096_tf32_warm_eager")
    comparison = compare(fp32, tf32)
    assert comparison.baseline.gemm_fp32_math == {"fp32": 3}
    assert comparison.trace.gemm_fp32_math == {"tf32": 3}
    assert comparison.fp32_math_differs and comparison.to_dict()["fp32_math_differs"] is True
    assert (
        "the baseline's on the CUDA cores, the trace's in TF32: they ran at different matmul "
        "precisions)" in " ".join(comparison.to_text().split())
    )
    # The same precision on both sides, or a side whose names say nothing (bf16), is not.
    assert not compare(fp32, fp32).fp32_math_differs
    bf16 = compare(fp32, gpu_fixture("4096_bf16_warm_eager"))
    assert bf16.trace.gemm_fp32_math == {} and not bf16.fp32_math_differs
    assert "matmul precisions" not in bf16.to_text()


def test_gemms_that_differ_in_fp32_math_on_other_gpus_may_differ_for_the_gpus(
    make_trace,
) -> None:
    # As HTA's trace_diff pair: an A100 against a V100, which has no TF32: not necessarily
    # another precision setting. Here the TF32 run's device is renamed another GPU.
    document = fixture_document("4096_tf32_warm_eager")
    document["deviceProperties"][0]["name"] = "NVIDIA A100-SXM4-80GB"
    comparison = compare(gpu_fixture("4096_fp32_warm_eager"), make_trace(document))
    assert comparison.devices_differ and comparison.fp32_math_differs
    text = " ".join(comparison.to_text().split())
    assert "the trace's in TF32: the GPUs differ (not every GPU has TF32), or their matmul" in text


def test_each_median_has_its_middle_half_and_says_when_it_cannot_tell_a_change(
    make_trace,
) -> None:
    # Three steps a side (the cold run still warming up: 313, 122, 85 µs): too few to tell a
    # change from noise, whatever the medians' ratio.
    cold, warm = gpu_fixture("64_bf16_cold_eager"), gpu_fixture("64_bf16_warm_eager")
    comparison = compare(cold, warm)
    cold_steps = Distribution.of(e["dur"] for e in fixture_steps("64_bf16_cold_eager"))
    assert comparison.baseline.step_cpu_iqr_us == pytest.approx(cold_steps.quartiles, abs=1e-3)
    text = comparison.to_text()
    row = next(line for line in text.splitlines() if line.startswith("  middle half of the"))
    assert row.endswith("few steps")
    assert "few steps: fewer than 5 steps on a side, too few to tell a change from noise" in text
    # The table and its notes fit a page's 88 columns (page 09 prints them).
    assert max(map(len, text.split("\nSteps (µs)")[0].splitlines()[4:])) <= 88

    # Six steps a side: middle halves apart (a change), or overlapping (an outlier's run).
    def run(name: str, durations: list[float]) -> Path:
        return make_trace(
            [
                complete_event(f"ProfilerStep#{k}", "user_annotation", 1000.0 * k, dur)
                for k, dur in enumerate(durations)
            ],
            name=name,
        )

    slow = run("slow.json", [100, 101, 102, 103, 104, 300])
    fast = run("fast.json", [60, 61, 62, 63, 64, 200])
    near = run("near.json", [95, 97, 99, 101, 103, 105])
    rows = {
        label: next(
            line
            for line in compare(slow, other).to_text().splitlines()
            if line.startswith("  middle half of")
        )
        for label, other in (("fast", fast), ("near", near))
    }
    assert not rows["fast"].endswith(("overlap", "few steps"))
    assert rows["near"].endswith("overlap")


def test_the_gpu_window_row_shows_a_gpu_bound_runs_speed_up() -> None:
    # Naive attention keeps the GPU busy ~1.27 ms a step against 0.52 ms of CPU time: its
    # CPU time understates the step; the GPU window does not.
    naive = gpu_fixture("attention_8x16x1024x64_bf16_naive")
    flash = gpu_fixture("attention_8x16x1024x64_bf16_sdpa-flash")
    comparison = compare(naive, flash)
    baseline = comparison.baseline
    assert baseline.median_step_gpu_window_us > 2 * baseline.median_step_cpu_us
    facts = Facts(load_trace(naive))
    kept = {step.number for step in facts.steps_with_gpu_records}
    windows = [t.gpu_window_us for t in facts.host_step_times if t.step in kept]
    assert baseline.median_step_gpu_window_us == pytest.approx(statistics.median(windows))
    assert "median step GPU window (µs)" in comparison.to_text()


def test_labels_only_in_one_run_show_where_its_time_went() -> None:
    # nccl/stalled: rank 1 sleeps ~10 ms on the host before each all_reduce, in a
    # record_function the balanced run does not have.
    balanced = FIXTURES / "nccl" / "balanced" / "rank1.json.gz"
    stalled = FIXTURES / "nccl" / "stalled" / "rank1.json.gz"
    comparison = compare(balanced, stalled)
    stalls = [s for s in load_trace(stalled).spans if s.name == "host_stall"]
    (label,) = comparison.labels_only_in_trace
    assert (label.name, label.count) == ("host_stall", len(stalls))
    assert label.total_us == pytest.approx(sum(s.dur for s in stalls))
    assert comparison.labels_only_in_baseline == []
    text = comparison.to_text()
    assert f"{len(stalls):>6}×" in text.split("Labels only in the trace", 1)[1].splitlines()[1]
    assert "in collectives: a collective's time includes waiting for the other ranks" in text
    # A pair with the same labels says nothing of them.
    assert "Labels only" not in compare(balanced, balanced).to_text()
