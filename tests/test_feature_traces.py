"""The recordings of ``tests/fixtures/features/``: profiler settings the gallery never uses, each
read as the trace shows it (see that folder's README and ``scripts/record_feature_traces.py``).

The expected figures are read from the raw JSON here, not from the model.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli

from profiling_utils import diagnose, load_trace
from profiling_utils.tables import byte_size

FEATURES = Path(__file__).parent / "fixtures" / "features"


def events(name: str) -> list[dict[str, Any]]:
    path = FEATURES / f"{name}.json.gz"
    return [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]]


def fired(name: str, rule: str) -> list[Any]:
    return diagnose(FEATURES / f"{name}.json.gz", select=[rule])


def test_every_kernel_a_cuda_graph_replays_is_its_launchs() -> None:
    raw = events("cuda_graph_replay_steps")
    graph_launches = {e["args"]["correlation"] for e in raw if e.get("name") == "cudaGraphLaunch"}
    kernels = [e for e in raw if e.get("cat") == "kernel"]
    gemm = max({e["name"] for e in kernels}, key=lambda n: sum(
        e["dur"] for e in kernels if e["name"] == n))  # fmt: skip
    runs = [e for e in kernels if e["name"] == gemm]
    assert all(e["args"]["correlation"] in graph_launches for e in runs)
    (hit,) = fired("cuda_graph_replay_steps", "hotspot")
    assert hit.evidence["kernel"] == gemm
    assert hit.evidence["ops"] == {"(replayed by a graph launch)": len(runs)}
    assert hit.message.endswith(f"{len(runs)} replayed by cudaGraphLaunch.")


def test_cublas_split_k_reduction_is_not_counted_as_a_gemm() -> None:
    raw = events("all_options_mlp_train")
    names = {e["name"] for e in raw if e.get("cat") == "kernel"}
    reductions = {n for n in names if "_execute_split_k_kernel" in n}
    assert reductions  # cuBLAS split the fp32 backward GEMMs along K
    (hit,) = fired("all_options_mlp_train", "gemm-kernel")
    listed = {row["kernel"] for row in hit.evidence["kernels"]}
    assert not listed & reductions and hit.evidence["gemm_kernels"] == len(listed)


def test_the_backward_label_waits_for_autograds_thread() -> None:
    # with_stack: under the backward label, Python frames down to run_backward, which holds
    # the main thread while the engine's own thread runs the backward ops.
    raw = events("all_options_mlp_train")
    main = next(e["tid"] for e in raw if e.get("name") == "backward")
    engine = {e["tid"] for e in raw if e.get("cat") == "cpu_op" and "Backward0" in e["name"]}
    assert engine and main not in engine
    (hit,) = fired("all_options_mlp_train", "cost-in-children")
    assert hit.message.startswith("backward: ")
    assert "run_backward" in hit.evidence["drill_down"][-1]["name"]
    assert f"which waits there while thread {engine.pop()} " in hit.message


def test_a_recording_without_the_cpu_activity_says_so(capsys) -> None:
    raw = events("cuda_only_mlp_train")
    assert not [e for e in raw if e.get("cat") in ("cpu_op", "user_annotation")]
    assert [e for e in raw if e.get("cat") == "kernel"]
    path = str(FEATURES / "cuda_only_mlp_train.json.gz")
    status, text, _ = run_cli(capsys, "diagnose", path)
    assert status == 0 and "(as in a recording without ProfilerActivity.CPU)" in text
    status, out, _ = run_cli(capsys, "summary", path, "--json")
    summary = json.loads(out)
    assert summary["has_gpu"] and not summary["host_ops_recorded"]
    # Beside the same steps recorded with the CPU activity: the missing ops are not news.
    full = str(FEATURES / "all_options_mlp_train.json.gz")
    status, text, _ = run_cli(capsys, "compare", full, path)
    assert (
        status == 0
        and (
            "(the trace records no op or label on the host, as without ProfilerActivity.CPU: ops "
            "and steps missing there were not recorded)"
        )
        in text
    )
    status, out, _ = run_cli(capsys, "compare", full, path, "--json")
    sides = json.loads(out)
    assert sides["baseline"]["host_ops_recorded"] and not sides["trace"]["host_ops_recorded"]


def test_an_empty_recording_names_what_it_holds(capsys) -> None:
    raw = events("empty_after_schedule_cycle")
    spans = [e["name"] for e in raw if e.get("ph") == "X"]
    trace = load_trace(FEATURES / "empty_after_schedule_cycle.json.gz")
    assert not trace.records_host_ops and not trace.has_gpu and len(trace.spans) == len(spans)
    assert trace.content == "profiler only"  # not "CPU only": nothing of the program ran in it
    status, text, _ = run_cli(capsys, "diagnose", str(trace.path))
    assert status == 0 and "no op, label or GPU work recorded, only " in text
    assert all(name in text for name in spans) and "export the trace from on_trace_ready" in text


def test_a_sync_waits_for_the_gpu_not_for_a_thread_that_runs_beside_it(tmp_path) -> None:
    # A pin-memory thread runs ops through each .item()'s sync: the drill-down ends on the
    # sync, which waits for the GPU; the thread is not named.
    document = json.loads(
        gzip.decompress((FEATURES / "cuda_graph_replay_steps.json.gz").read_bytes())
    )
    syncs = [e for e in document["traceEvents"] if e.get("name") == "cudaStreamSynchronize"]
    for sync in syncs:
        pinning = {"name": "aten::pin_memory", "cat": "cpu_op", "tid": 999_999, "args": {}}
        document["traceEvents"].append({**sync, **pinning, "dur": 0.9 * sync["dur"]})
    path = tmp_path / "pin.json.gz"
    path.write_bytes(gzip.compress(json.dumps(document).encode()))
    (hit,) = diagnose(path, select=["cost-in-children"])
    assert hit.evidence["drill_down"][-1]["name"] == "cudaStreamSynchronize"
    assert "waits there while" not in hit.message


def test_cost_in_children_follows_the_few_calls_that_hold_the_time() -> None:
    # AdamW reads its step counters with .item() on the host (eight short calls a step) and
    # the loop reads the loss (one call a step, waiting for the GPU): the loss's calls hold
    # the time, and the drill-down follows one of them to the sync.
    raw = events("side_stream_prefetch")
    items = sorted(e["dur"] for e in raw if e.get("name") == "aten::item")
    waits = [d for d in items if d > 100 * items[len(items) // 2]]
    assert len(waits) == 4 and sum(waits) >= 0.9 * sum(items)
    (hit,) = fired("side_stream_prefetch", "cost-in-children")
    assert hit.message.startswith("aten::item: ")
    assert f"4 of its {len(items)} calls hold " in hit.message
    assert hit.evidence["drill_down"][0]["total_us"] in [round(d, 3) for d in waits]
    assert hit.evidence["drill_down"][-1]["name"] == "cudaStreamSynchronize"
    assert hit.message.endswith("a host sync: it waits for the GPU to finish the work queued "
                                "before it.")  # fmt: skip


def test_a_cost_paid_for_every_new_shape_is_named() -> None:
    # cuDNN's attention builds a plan for each new key/value length: the first call with each
    # length is slow, the three other layers' calls with it are not, and every token brings
    # a new length.
    raw = events("decode_loop_no_steps")
    calls = sorted(
        (e for e in raw if e.get("name") == "aten::_cudnn_attention_forward"),
        key=lambda e: e["ts"],
    )
    by_shape: dict[str, list[float]] = {}
    for call in calls:
        key = json.dumps([call["args"]["Input Dims"], call["args"]["Input type"]])
        by_shape.setdefault(key, []).append(call["dur"])
    slow = {
        key: durs for key, durs in by_shape.items()
        if len(durs) > 1 and durs[0] >= 10 * sorted(durs[1:])[(len(durs) - 2) // 2]
    }  # fmt: skip
    assert len(slow) >= 30
    (hit,) = fired("decode_loop_no_steps", "new-shape-cost")
    evidence = hit.evidence
    assert evidence["op"] == "aten::_cudnn_attention_forward"
    assert evidence["outer_op"] == "aten::scaled_dot_product_attention"
    assert evidence["slow_first_calls"] == evidence["shapes_called_again"] == len(slow)
    assert evidence["shapes"] == len(by_shape)
    assert evidence["in_later_half"] > 0 and evidence["share"] > 0.5
    assert "a cost paid once per new shape" in hit.message


def test_attention_backends_chosen_call_by_call_show_their_key_lengths() -> None:
    # The first token's key has length 1 (flash runs it); the growing cache's, 2 to 48 (cuDNN).
    raw = events("decode_loop_no_steps")
    lengths: dict[str, list[int]] = {}
    for e in raw:
        if e.get("name") in ("aten::_scaled_dot_product_flash_attention",
                             "aten::_scaled_dot_product_cudnn_attention"):  # fmt: skip
            lengths.setdefault(e["name"], []).append(e["args"]["Input Dims"][1][-2])
    flash = lengths["aten::_scaled_dot_product_flash_attention"]
    cudnn = lengths["aten::_scaled_dot_product_cudnn_attention"]
    (hit,) = fired("decode_loop_no_steps", "attention-backend")
    assert hit.evidence["backends"]["flash"]["key_lengths"] == [min(flash), max(flash)]
    assert hit.evidence["backends"]["cuDNN"]["key_lengths"] == [min(cudnn), max(cudnn)]
    assert (
        f"flash {len(flash)}× (key length 1), cuDNN {len(cudnn)}× (key lengths "
        f"{min(cudnn)} to {max(cudnn)})" in hit.message
    )


def test_a_benchmarked_algorithm_search_per_new_batch_size_is_named() -> None:
    # cudnn.benchmark times its candidates on the first call with each new batch size; the
    # new sizes come once each, so their calls are set against the op's other calls per
    # input element.
    raw = events("varying_batch_cudnn_benchmark")
    calls = sorted(
        (e for e in raw if e.get("name") == "aten::convolution_backward"), key=lambda e: e["ts"]
    )
    batch = [e["args"]["Input Dims"][0][0] for e in calls]
    slow = [e["dur"] for e, n in zip(calls, batch, strict=True) if n != 32 and e["dur"] > 1e5]
    usual = [e["dur"] for e, n in zip(calls, batch, strict=True) if n == 32]
    assert len(slow) == 3 and max(usual) * 100 < min(slow)
    (hit,) = fired("varying_batch_cudnn_benchmark", "new-shape-cost")
    assert hit.evidence["op"] == "aten::convolution_backward"
    assert hit.evidence["slow_first_calls"] == 3 and hit.evidence["shapes_called_again"] == 0
    assert "scaled by input elements" in hit.message
    # The search itself: each slow call times its candidates with CUDA events on its thread.
    slow_calls = [e for e in calls if e["dur"] > 1e5]
    timing = [
        sum(
            1
            for e in raw
            if e.get("name") in ("cudaEventRecord", "cudaEventSynchronize")
            and e["tid"] == call["tid"]
            and call["ts"] <= e["ts"] < call["ts"] + call["dur"]
        )
        for call in slow_calls
    ]
    tried = hit.evidence["tried_candidates"]
    assert tried["timing_calls_median"] == sorted(timing)[1] > 0
    assert tried["timing_calls"] == ["cudaEventRecord", "cudaEventSynchronize"]
    assert tried["kernel_kinds_median"] >= 2 * tried["seen_shape_kernel_kinds_median"]
    assert hit.message.endswith(
        "it tried candidate kernels and timed them, as cuDNN does for each new shape under "
        "torch.backends.cudnn.benchmark = True."
    )


def test_a_new_shape_cost_without_timed_candidates_names_no_search(tmp_path: Path) -> None:
    # cuDNN attention's plan builds launch no candidates; and the benchmark run with its event
    # calls renamed away says nothing of a search either.
    (plans,) = fired("decode_loop_no_steps", "new-shape-cost")
    assert "tried_candidates" not in plans.evidence and "timed" not in plans.message
    document = json.loads(gzip.decompress((FEATURES / "varying_batch_cudnn_benchmark.json.gz")
                                          .read_bytes()))  # fmt: skip
    for event in document["traceEvents"]:
        if event.get("name") in ("cudaEventRecord", "cudaEventSynchronize"):
            event["name"] = "cudaStreamQuery"
    path = tmp_path / "untimed.json"
    path.write_text(json.dumps(document))
    (hit,) = diagnose(str(path), select=["new-shape-cost"])
    assert hit.evidence["slow_first_calls"] == 3 and "tried_candidates" not in hit.evidence


def test_the_optimizer_step_of_gradient_accumulation_is_read_as_a_cycle() -> None:
    # The steps holding the optimizer label, from the raw JSON: every fourth.
    raw = [e for e in events("gradient_accumulation_steps") if e.get("ph") == "X"]
    steps = sorted(
        (e for e in raw if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    labels = [e for e in raw if e["name"] == "optimizer" and e["cat"] == "user_annotation"]
    with_optimizer = [
        int(step["name"].split("#")[1])
        for step in steps
        if any(step["ts"] <= e["ts"] < step["ts"] + step["dur"] for e in labels)
    ]
    assert with_optimizer == [3, 7, 11]
    (hit,) = fired("gradient_accumulation_steps", "periodic-step")
    assert hit.evidence["period"] == 4 and hit.evidence["wide_steps"] == with_optimizer
    others = sorted(s["dur"] for s in steps[1:] if int(s["name"].split("#")[1]) not in (3, 7, 11))
    assert hit.evidence["median_other_cpu_us"] == round((others[3] + others[4]) / 2, 3)
    assert hit.evidence["only_in_wide_steps"]["name"] == "optimizer"
    assert fired("gradient_accumulation_steps", "slow-step") == []  # 1.4x, not 3x


def test_a_grad_scalers_host_sync_in_every_step_is_read_as_the_loops_habit() -> None:
    # GradScaler.step reads found_inf on the host (aten::item) before AdamW's update: one
    # cudaStreamSynchronize in each step, while the GPU still runs the step's backward.
    raw = [e for e in events("amp_grad_scaler_steps") if e.get("ph") == "X"]
    steps = sorted(
        (e for e in raw if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    syncs = [e for e in raw if e["name"] == "cudaStreamSynchronize"]
    per_step = [sum(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for e in syncs) for s in steps]
    assert per_step == [1, 1, 1, 1]
    (hit,) = fired("amp_grad_scaler_steps", "intra-step-gap")
    assert hit.evidence["cause"] == "host sync" and hit.evidence["sync_op"]["name"] == "aten::item"
    assert hit.evidence["steps_with_sync"] == [int(s["name"].split("#")[1]) for s in steps]
    assert hit.message.startswith("In 4 of 4 steps the GPU idles after a host sync")


def test_profile_memory_events_give_each_devices_peak_allocation(capsys) -> None:
    from profiling_utils import measures

    raw = events("all_options_mlp_train")
    memory = [e for e in raw if e.get("name") == "[memory]"]
    on_gpu = [e for e in memory if e["args"]["Device Type"] == 1]
    top = max(on_gpu, key=lambda e: e["args"]["Total Allocated"])  # the first of equal ones
    trace = load_trace(FEATURES / "all_options_mlp_train.json.gz")
    gpu, cpu = measures.memory_peaks(trace)
    assert (gpu.device, gpu.events, cpu.device) == ("GPU 0", len(on_gpu), "CPU")
    assert gpu.events + cpu.events == len(memory)
    assert gpu.peak_allocated_bytes == top["args"]["Total Allocated"]
    assert gpu.peak_reserved_bytes == max(e["args"]["Total Reserved"] for e in on_gpu)
    assert gpu.end_allocated_bytes == max(on_gpu, key=lambda e: e["ts"])["args"]["Total Allocated"]
    assert cpu.peak_reserved_bytes is None
    steps = [e for e in raw if e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]  # fmt: skip
    (holding,) = [s for s in steps if s["ts"] <= top["ts"] < s["ts"] + s["dur"]]
    assert f"ProfilerStep#{gpu.peak_step}" == holding["name"]
    status, out, _ = run_cli(capsys, "summary", str(FEATURES / "all_options_mlp_train.json.gz"))
    assert status == 0
    assert (
        f"  GPU 0  peak {byte_size(gpu.peak_allocated_bytes)} at {gpu.peak_at_us:,.1f} µs in "
        f"ProfilerStep#{gpu.peak_step}, {byte_size(gpu.peak_reserved_bytes)} reserved at most"
    ) in out
    # Without memory events: no peak, and no section.
    status, out, _ = run_cli(capsys, "summary", str(FEATURES / "cuda_only_mlp_train.json.gz"))
    assert status == 0 and "Memory allocated" not in out
    assert measures.memory_peaks(load_trace(FEATURES / "cuda_only_mlp_train.json.gz")) == []


def test_many_calls_reads_a_recording_besides_its_one_time_calls() -> None:
    # The decode loop without steps: 40 first calls per new key length (cuDNN's plan builds)
    # hold 95% of the host's time. Besides them, the per-token linear layers' calls weigh.
    (overhead,) = fired("decode_loop_no_steps", "overhead-bound")
    (many,) = fired("decode_loop_no_steps", "many-calls")
    long_calls = overhead.evidence["recording_long_calls"]
    assert many.evidence["recording_cpu_us"] == overhead.evidence["recording_cpu_us"]
    assert many.evidence["one_time_calls"] == long_calls["count"] == 40
    # The time at least one of them runs (a call's children inside it, counted once).
    assert many.evidence["one_time_us"] == long_calls["wall_us"] >= long_calls["self_us"]
    besides = many.evidence["besides_one_time_us"]
    assert besides == round(many.evidence["recording_cpu_us"] - long_calls["wall_us"], 3)
    linear = next(row for row in many.evidence["ops"] if row["op"] == "aten::linear")
    calls = [e["dur"] for e in events("decode_loop_no_steps") if e.get("name") == "aten::linear"]
    assert linear["calls"] == len(calls) == 432
    assert linear["cpu_share"] == round(min(sum(calls), 432 * linear["median_us"]) / besides, 4)
    # Of the whole recording's host time, the same calls are too few to name.
    whole = many.evidence["recording_cpu_us"]
    assert linear["cpu_share"] > 0.05 > linear["cpu_share"] * besides / whole
    assert "besides 40 one-time calls of 1.0% or more of it each" in many.message
    # An op whose first calls hold the one-time calls (each new key length's attention)
    # counts its other calls: no share of the time besides them is over 100%.
    raw = events("decode_loop_no_steps")
    attention = [e for e in raw if e.get("name") == "aten::scaled_dot_product_attention"]
    sdpa = next(r for r in many.evidence["ops"] if r["op"] == "aten::scaled_dot_product_attention")
    assert sdpa["calls"] == len(attention) - 40
    assert all(row["total_cpu_share"] < 1 for row in many.evidence["ops"])


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -float("inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def test_a_process_driving_two_gpus_shows_each_gpus_busy_time(capsys: Any) -> None:
    # The step table's busy time took both GPUs together (92% busy, "idle 8%") while each
    # GPU idled about half of each step, waiting for the other.
    raw = events("two_devices_model_parallel")
    steps: dict[int, dict[str, Any]] = {}
    for e in raw:
        if e.get("name", "").startswith("ProfilerStep#"):  # also on autograd's threads
            number = int(e["name"].split("#")[1])
            if number not in steps or e["dur"] > steps[number]["dur"]:
                steps[number] = e
    launches = {
        e["args"]["correlation"]: e
        for e in raw
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    expected = {}
    for number, step in steps.items():
        by_gpu: dict[str, list[tuple[float, float]]] = {}
        for e in raw:
            launch = launches.get(e.get("args", {}).get("correlation"))
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and launch is not None:
                if step["ts"] <= launch["ts"] < step["ts"] + step["dur"]:
                    by_gpu.setdefault(str(e["pid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        expected[number] = {gpu: _union_us(spans) for gpu, spans in sorted(by_gpu.items())}
    path = str(FEATURES / "two_devices_model_parallel.json.gz")
    status, out, _ = run_cli(capsys, "summary", "--json", path)
    rows = json.loads(out)["steps"]
    assert status == 0 and [row["step"] for row in rows] == sorted(expected) == [2, 3, 4, 5]
    for row in rows:
        by_gpu = row["gpu_busy_by_gpu_us"]
        assert list(by_gpu) == ["0", "1"]
        for gpu, busy in by_gpu.items():
            assert abs(busy - expected[row["step"]][gpu]) < 0.01  # epoch µs as floats: ~1 ns apart
        # They take turns: each is busy for well under the time the two together are.
        assert max(by_gpu.values()) < 0.6 * row["gpu_busy_us"]
        assert row["gpu_idle_fraction"] < 0.1
    status, text, _ = run_cli(capsys, "summary", path)
    medians = [sorted(row["gpu_busy_by_gpu_us"][gpu] for row in rows) for gpu in ("0", "1")]
    shown = [f"{(values[1] + values[2]) / 2:,.1f}" for values in medians]
    line = " ".join(text.split())
    assert f"the median over the steps: GPU 0 {shown[0]}, GPU 1 {shown[1]}." in line
    assert "take the 2 GPUs together" in line
    assert "the gaps columns count each GPU's own idle stretches, GPU by GPU" in line
    # ... which is why a step's gaps can add up to more than its idle time.
    assert any(row["gpu_gap_total_us"] > row["gpu_idle_us"] for row in rows)
    # One GPU: no such line, and the key is null.
    one = str(FEATURES / "side_stream_prefetch.json.gz")
    _, out, _ = run_cli(capsys, "summary", "--json", one)
    assert {row["gpu_busy_by_gpu_us"] for row in json.loads(out)["steps"]} == {None}
    _, text, _ = run_cli(capsys, "summary", one)
    assert "Each GPU's own busy time" not in text


def test_two_gpus_taking_turns_are_said_to_take_turns(capsys: Any) -> None:
    # No bound rule spoke (the busiest GPU, 54% busy, is neither idle nor compute-bound);
    # the two together are busy for 92% of the step, each alone for about half.
    (hit,) = fired("two_devices_model_parallel", "gpus-take-turns")
    path = str(FEATURES / "two_devices_model_parallel.json.gz")
    _, out, _ = run_cli(capsys, "summary", "--json", path)
    row = next(r for r in json.loads(out)["steps"] if r["step"] == hit.evidence["median_step"])
    assert hit.evidence["median_gpu_busy_by_gpu_us"] == pytest.approx(row["gpu_busy_by_gpu_us"])
    assert hit.evidence["median_gpus_busy_together_us"] == pytest.approx(row["gpu_busy_us"])
    assert hit.evidence["together_busy_fraction"] >= 0.75
    assert hit.evidence["busiest_gpu_busy_fraction"] < 0.6
    both = sum(row["gpu_busy_by_gpu_us"].values()) - row["gpu_busy_us"]
    assert f"both ran at once for {both:.1f} µs: they take turns" in hit.message
    # DataParallel's two GPUs work at once, and idle most of the step together: gpu-idle's.
    assert fired("data_parallel_two_gpus", "gpus-take-turns") == []
    for one_gpu in FEATURES.glob("*.json.gz"):
        if one_gpu.name.startswith(("two_devices", "data_parallel")):
            continue
        assert diagnose(one_gpu, select=["gpus-take-turns"]) == [], one_gpu.name


def _allocator_calls_by_step(name: str) -> tuple[dict[int, dict[str, Any]], dict[int, list]]:
    raw = events(name)
    steps: dict[int, dict[str, Any]] = {}
    for e in raw:
        if e.get("name", "").startswith("ProfilerStep#"):
            number = int(e["name"].split("#")[1])
            if number not in steps or e["dur"] > steps[number]["dur"]:
                steps[number] = e
    calls: dict[int, list] = {number: [] for number in steps}
    for e in raw:
        if e.get("cat") == "cuda_runtime" and e["name"] in ("cudaMalloc", "cudaFree"):
            for number, step in steps.items():
                if step["ts"] <= e["ts"] < step["ts"] + step["dur"]:
                    calls[number].append(e)
    return steps, calls


def test_empty_cache_in_every_step_is_allocator_churn() -> None:
    steps, calls = _allocator_calls_by_step("empty_cache_every_step")
    later = sorted(steps)[1:]
    (hit,) = fired("empty_cache_every_step", "allocator-churn")
    assert hit.evidence["steps_with_calls"] == later == [3, 4, 5]
    names = [e["name"] for number in later for e in calls[number]]
    assert hit.evidence["calls"] == {n: names.count(n) for n in ("cudaFree", "cudaMalloc")}
    assert hit.evidence["calls"] == {"cudaFree": 18, "cudaMalloc": 18}
    shares = sorted(
        (sum(e["dur"] for e in calls[n]) / steps[n]["dur"], n) for n in later
    )  # fmt: skip
    share, number = shares[1]
    assert hit.evidence["median_step"] == number
    assert abs(hit.evidence["median_step_share"] - share) < 1e-4
    assert share > 0.5  # most of the step: the first cudaFree waits for the GPU
    longest = max((e for n in later for e in calls[n]), key=lambda e: e["dur"])
    assert longest["name"] == "cudaFree"
    assert abs(hit.evidence["longest"]["dur_us"] - longest["dur"]) < 1e-3
    # empty_cache() is no op: its cudaFree calls are outside any.
    assert hit.evidence["places"]["cudaFree outside any op"] == 18


def test_cudnn_benchmark_frees_and_takes_memory_again_in_every_step() -> None:
    # A new batch size makes cuDNN's search take workspaces, and the next step at the old
    # size allocates again: the allocator calls the driver in every step, 11% of a 4.7 ms one.
    steps, calls = _allocator_calls_by_step("varying_batch_cudnn_benchmark")
    later = sorted(steps)[1:]
    assert all(calls[n] for n in later)
    (hit,) = fired("varying_batch_cudnn_benchmark", "allocator-churn")
    assert hit.evidence["steps_with_calls"] == later
    shares = sorted((sum(e["dur"] for e in calls[n]) / steps[n]["dur"], n) for n in later)
    share, number = shares[(len(shares) - 1) // 2]
    assert (hit.evidence["median_step"], round(share, 4)) == (
        number,
        hit.evidence["median_step_share"],
    )
    assert set(hit.evidence["places"]) >= {
        "cudaMalloc in aten::convolution_backward",
        "cudaFree in aten::cudnn_convolution",
    }


def test_data_parallels_reduce_and_broadcast_are_collectives_on_two_gpus(capsys: Any) -> None:
    # DataParallel sums its replicas' gradients with NCCL's rooted Reduce: "unknown" before.
    raw = events("data_parallel_two_gpus")
    kernels = [e["name"] for e in raw if e.get("cat") == "kernel"]
    reduces = sum(name.startswith("ncclDevKernel_Reduce_") for name in kernels)
    broadcasts = sum(name.startswith("ncclDevKernel_Broadcast_") for name in kernels)
    assert reduces and broadcasts
    path = str(FEATURES / "data_parallel_two_gpus.json.gz")
    _, out, _ = run_cli(capsys, "summary", "--json", path)
    summary = json.loads(out)
    counts: dict[str, int] = {}
    for row in summary["communication"]["by_op"]:
        counts[row["op"]] = counts.get(row["op"], 0) + row["count"]
    assert counts == {"reduce": reduces, "broadcast": broadcasts}
    # Both GPUs work in every step, at the same time for part of it.
    for row in summary["steps"]:
        by_gpu = row["gpu_busy_by_gpu_us"]
        assert list(by_gpu) == ["0", "1"] and min(by_gpu.values()) > 0
        assert sum(by_gpu.values()) > row["gpu_busy_us"]


def _compiling_by_step(name: str) -> dict[int, float]:
    """Per ProfilerStep#N, the time torch.compile's labels (``dynamo``, ``... (dynamo_timed)``,
    which torch 2.11 files as ``cpu_op``) cover inside it, µs, from the raw events: a union
    over every thread."""
    raw = [e for e in events(name) if e.get("ph") == "X"]
    labels = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in raw
        if e["name"] == "dynamo" or e["name"].endswith(" (dynamo_timed)")
    )
    found = {}
    for step in (e for e in raw if e["name"].startswith("ProfilerStep#")):
        start, end = step["ts"], step["ts"] + step["dur"]
        total, reached = 0.0, start
        for lo, hi in labels:
            lo, hi = max(lo, reached), min(hi, end)
            if hi > lo:
                total += hi - lo
                reached = hi
        found[int(step["name"].split("#")[1])] = total
    return found


def test_a_recompile_inside_a_step_is_the_compilers_time() -> None:
    # One step gets a new batch size: Dynamo compiles the frame again (region 0/1) inside it,
    # and that step is hundreds of times the others'.
    compiling = _compiling_by_step("recompile_one_step")
    (number,) = [n for n, us in compiling.items() if us > 0]
    (hit,) = fired("recompile_one_step", "compiling-recorded")
    assert hit.evidence["compiling_steps"] == [number]
    assert hit.evidence["median_step_compiling_us"] == pytest.approx(compiling[number], abs=0.01)
    assert hit.evidence["recompiled"] == ["0/1"]
    assert hit.evidence["median_step_compiling_us"] > 0.9 * hit.evidence["median_step_cpu_us"]
    (slow,) = fired("recompile_one_step", "slow-step")
    assert slow.evidence["step"] == number
    assert slow.evidence["compiling"]["us"] == pytest.approx(compiling[number], abs=0.01)
    assert "torch.compile was compiling for" in slow.message
    # The compiler's own calls (its dispatch modes while it traces) are no program's calls.
    assert fired("recompile_one_step", "many-calls") == []
    # The graphs compiled in that step: their first call there follows the compile.
    hits = fired("recompile_one_step", "compiled-graph-cache-hit")
    assert {hit.evidence["steps"][0] for hit in hits if hit.evidence["compiled_in_recording"]} == {
        number
    }
    for hit in hits:
        said = f"the first after torch.compile compiled in ProfilerStep#{number}"
        assert (said in hit.message) == hit.evidence["compiled_in_recording"]


def _step_holding(steps: list[dict[str, Any]], event: dict[str, Any]) -> int:
    (step,) = [s for s in steps if s["ts"] <= event["ts"] < s["ts"] + s["dur"]]
    return int(step["name"].split("#")[1])


def _raw_steps(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        (e for e in raw if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )


def test_a_step_that_captures_a_cuda_graph_is_read_as_the_capture() -> None:
    raw = [e for e in events("graph_capture_in_step") if e.get("ph") == "X"]
    steps = _raw_steps(raw)
    (begin,) = [e for e in raw if e["name"] == "cudaStreamBeginCapture"]
    (end,) = [e for e in raw if e["name"] == "cudaStreamEndCapture"]
    (made,) = [e for e in raw if e["name"].startswith("cudaGraphInstantiate")]
    replays = [e for e in raw if e["name"] == "cudaGraphLaunch"]
    number = _step_holding(steps, begin)
    trace = load_trace(FEATURES / "graph_capture_in_step.json.gz")
    (capture,) = trace.graph_captures
    assert (capture.begin.name, capture.end.name) == (begin["name"], end["name"])
    assert [call.name for call in capture.instantiations] == [made["name"]]
    assert capture.end.end - capture.begin.start == pytest.approx(
        end["ts"] + end["dur"] - begin["ts"], abs=1e-3
    )
    # The other steps capture nothing and replay graphs; none of them runs the model's ops.
    linear = [e for e in raw if e["name"] == "aten::linear"]
    assert {_step_holding(steps, e) for e in linear} == {number}
    (hit,) = fired("graph_capture_in_step", "slow-step")
    assert hit.evidence["step"] == number
    captured = hit.evidence["graph_captures"]
    assert captured["graphs"] == 1 and captured["cudagraph_trees_us"] is None
    assert captured["instantiate"] == made["name"]
    assert captured["instantiate_us"] == round(made["dur"], 3)
    others = [e for e in replays if _step_holding(steps, e) != number]
    assert captured["graph_launches_in_other_steps"] == len(others) > 0
    assert hit.evidence["only_in_step"]["name"] == "aten::linear"
    assert hit.evidence["only_in_step"]["us"] == round(sum(e["dur"] for e in linear), 3)
    assert "; it captures a graph of GPU work: " in hit.message
    assert "aten::linear, which no other step runs, took" in hit.message


def test_the_cuda_graph_trees_capture_is_no_compilation() -> None:
    # reduce-overhead: compiled in the unrecorded warm-up step, captured in the first recorded
    # one, inside CUDAGraphNode.record and its "(dynamo_timed)" twin.
    raw = [e for e in events("compile_reduce_overhead_capture") if e.get("ph") == "X"]
    steps = _raw_steps(raw)
    begins = [e for e in raw if e["name"] == "cudaStreamBeginCapture"]
    first = int(steps[0]["name"].split("#")[1])
    assert len(begins) == 2 and {_step_holding(steps, e) for e in begins} == {first}
    timed = {e["name"] for e in raw if e["name"].endswith(" (dynamo_timed)")}
    assert timed == {"CUDAGraphNode.record (dynamo_timed)"}
    (hit,) = fired("compile_reduce_overhead_capture", "cold-start")
    captured = hit.evidence["graph_captures"]
    assert captured["graphs"] == 2 and "compiling" not in hit.evidence
    records = [e for e in raw if e["name"] == "CUDAGraphNode.record" and e["cat"] == "cpu_op"]
    assert captured["cudagraph_trees_us"] == round(sum(e["dur"] for e in records), 3)
    assert "inside torch.compile's CUDA graph trees' CUDAGraphNode.record" in hit.message
    for cache in fired("compile_reduce_overhead_capture", "compiled-graph-cache-hit"):
        assert not cache.evidence["compiled_in_recording"]
        assert cache.message.endswith("cache hits.")


def test_replaying_a_graph_captured_before_the_recording_names_no_capture() -> None:
    trace = load_trace(FEATURES / "cuda_graph_replay_steps.json.gz")
    assert trace.graph_captures == [] and trace.find(name="cudaGraphLaunch")


def test_the_kernels_an_autotuner_launches_are_the_compilers_not_the_programs(capsys) -> None:
    # From the raw JSON: the kernels whose launch call lies inside a "(dynamo_timed)" compile
    # label on its thread (the coordinate descent tuning's candidates and cache flushes).
    raw = [e for e in events("autotune_in_step") if e.get("ph") == "X"]
    labels = [e for e in raw if e["name"].endswith(" (dynamo_timed)")]
    calls = {
        e["args"]["correlation"]: e
        for e in raw
        if e["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }

    def while_compiling(call: dict[str, Any]) -> bool:
        return any(
            label["tid"] == call["tid"] and label["ts"] <= call["ts"] <= label["ts"] + label["dur"]
            for label in labels
        )

    kernels = [e for e in raw if e["cat"] == "kernel"]
    compiler = [k for k in kernels if while_compiling(calls[k["args"]["correlation"]])]
    program = [k for k in kernels if k not in compiler]
    assert len(compiler) > 1000 and {k["name"] for k in program} == {"triton_poi_fused_mul_relu_0"}
    path = str(FEATURES / "autotune_in_step.json.gz")
    status, out, _ = run_cli(capsys, "summary", "--json", path)
    summary = json.loads(out)
    assert status == 0
    assert summary["compiler_kernels"] == {
        "count": len(compiler),
        "gpu_us": pytest.approx(sum(k["dur"] for k in compiler), abs=1e-6),
    }
    assert [(k["name"], k["count"]) for k in summary["top_kernels"]] == [
        ("triton_poi_fused_mul_relu_0", len(program))
    ]
    assert summary["launch_apis"] == {"cuLaunchKernel": len(program)}
    status, text, _ = run_cli(capsys, "summary", path)
    assert f"(left out here and from the launch APIs below: {len(compiler):,} kernels" in text
    # The tuning runs at the compiled code's first call, in a span that wraps its timed twin.
    trace = load_trace(path)
    from profiling_utils.rules import Facts

    facts = Facts(trace)
    (tuning,) = trace.find("CachingAutotuner.coordinate_descent_tuning")
    assert facts.is_compile_work(tuning)
    assert not any(a.name.endswith(" (dynamo_timed)") for a in trace.ancestors(tuning))


def test_compiled_graph_calls_without_a_cache_key_name_no_graph(capsys) -> None:
    raw = [e for e in events("autotune_in_step") if e.get("ph") == "X"]
    graph_calls = [e for e in raw if e["name"].startswith("## Call CompiledFxGraph")]
    assert {e["name"] for e in graph_calls} == {"## Call CompiledFxGraph None ##"}
    path = str(FEATURES / "autotune_in_step.json.gz")
    status, out, _ = run_cli(capsys, "summary", "--json", path)
    compiled = json.loads(out)["compile"]
    assert compiled["graph_calls"] == len(graph_calls) and compiled["graph_hashes"] == []
    assert fired("autotune_in_step", "compiled-graph-cache-hit") == []
    (hit,) = fired("recompile_one_step", "compiled-graph-cache-hit")[:1]
    assert hit.evidence["hash"] != "None"


def test_compare_leaves_the_compilers_kernels_out_of_the_names_only_one_side_has() -> None:
    from profiling_utils.compare import compare

    tuned = load_trace(FEATURES / "autotune_in_step.json.gz")
    other = load_trace(FEATURES / "recompile_one_step.json.gz")
    from profiling_utils.rules import Facts

    compiler = Facts(tuned).compiler_kernels
    flushes = {k.name for k in compiler} - {k.name for k in tuned.kernels if k not in compiler}
    assert flushes  # the cache flushes' kernel runs only while compiling
    comparison = compare(other, tuned)
    assert comparison.trace.compiler_kernels == len(compiler) > 1000
    assert comparison.trace.kernels == len(tuned.kernels)
    assert comparison.baseline.compiler_kernels == 0
    only = {n.name for n in comparison.kernels_only_in_trace}
    assert only == {"triton_poi_fused_mul_relu_0"} and not only & flushes
    assert "of them while compiling" in comparison.to_text()
