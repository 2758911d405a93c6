"""``python -m profiling_utils diagnose`` and ``compare``: output, JSON shape, exit status."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, gpu_fixture, run_cli, write_trace

from profiling_utils.cli import main
from profiling_utils.rules import TABLES, rule_ids

ROOT = Path(__file__).resolve().parents[1]


def test_diagnose_text_groups_findings_under_their_table(capsys: pytest.CaptureFixture) -> None:
    path = str(gpu_fixture("64_bf16_warm_eager_w0a3"))
    status, out, err = run_cli(capsys, "diagnose", path)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == path
    assert "NVIDIA H100 80GB HBM3" in lines[1]
    headers = [line for line in lines if line in TABLES]
    assert headers[0] == "profiler table"  # holds a warning (overhead-bound)
    assert set(headers) == {"profiler table", "CPU lane", "GPU lane", "dispatch chain"}
    assert "  [warning] cold-start: ProfilerStep#0 took" in out
    assert "      during_op: " in out  # evidence follows each finding


def test_diagnose_header_names_the_gpus_that_ran_the_work(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    # Each rank of the two-GPU NCCL run lists both H200s in deviceProperties; rank 1 ran on
    # GPU 1 alone.
    path = ROOT / "tests" / "fixtures" / "nccl" / "balanced" / "rank1.json.gz"
    status, out, _ = run_cli(capsys, "diagnose", str(path))
    assert status == 0
    assert out.splitlines()[1].startswith(
        "  NVIDIA H200, 132 SMs, compute capability 9.0 (GPU 1 of the 2 listed); "
    )
    # Work on both: identical GPUs are counted.
    document = json.loads(gzip.decompress(path.read_bytes()))
    kernel = next(e for e in document["traceEvents"] if e.get("cat") == "kernel")
    document["traceEvents"].append({**kernel, "pid": 1 - kernel["pid"]})
    both = write_trace(tmp_path / "both.json", document)
    status, out, _ = run_cli(capsys, "diagnose", str(both))
    assert out.splitlines()[1].startswith("  2× NVIDIA H200, 132 SMs, compute capability 9.0; ")


def test_diagnose_json(capsys: pytest.CaptureFixture) -> None:
    path = str(gpu_fixture("4096_bf16_warm_compile"))
    status, out, _ = run_cli(capsys, "diagnose", "--json", path)
    assert status == 0
    data = json.loads(out)
    assert set(data) == {"trace", "device", "findings"}
    assert data["trace"] == path
    assert data["device"] == "NVIDIA H100 80GB HBM3"
    rules = [finding["rule"] for finding in data["findings"]]
    assert "bias-copy" in rules and "compiled-region" in rules
    for finding in data["findings"]:
        assert set(finding) == {"rule", "table", "severity", "message", "evidence"}
        assert finding["severity"] in ("info", "warning")


def test_diagnose_select_and_ignore(capsys: pytest.CaptureFixture) -> None:
    path = str(gpu_fixture("64_bf16_warm_eager_w0a3"))
    _, out, _ = run_cli(capsys, "diagnose", "--json", "--select", "cold-start,buffer-request", path)
    assert {f["rule"] for f in json.loads(out)["findings"]} == {"cold-start", "buffer-request"}
    _, out, _ = run_cli(
        capsys, "diagnose", "--json", "--select", "cold-start", "--select", "hotspot", path
    )
    assert {f["rule"] for f in json.loads(out)["findings"]} == {"cold-start", "hotspot"}
    _, out, _ = run_cli(capsys, "diagnose", "--json", "--ignore", "cold-start", path)
    rules = {f["rule"] for f in json.loads(out)["findings"]}
    assert "cold-start" not in rules and "buffer-request" in rules


def test_diagnose_without_findings_still_succeeds(capsys: pytest.CaptureFixture) -> None:
    path = str(gpu_fixture("64_bf16_warm_eager"))
    status, out, _ = run_cli(capsys, "diagnose", "--select", "dead-window", path)
    assert status == 0
    assert out.rstrip().endswith("No cheatsheet pattern found.")
    status, out, _ = run_cli(capsys, "diagnose", "--json", "--select", "dead-window", path)
    assert (status, json.loads(out)["findings"]) == (0, [])


def test_unknown_rule_id_is_bad_input(capsys: pytest.CaptureFixture) -> None:
    path = str(gpu_fixture("64_bf16_warm_eager"))
    status, out, err = run_cli(capsys, "diagnose", "--select", "cold-start,no-such-rule", path)
    assert (status, out) == (2, "")
    assert err == "error: unknown rule id(s): no-such-rule\n"


def test_a_select_naming_no_rule_is_bad_usage(capsys: pytest.CaptureFixture) -> None:
    # "--select ," once ran no rule and said "No cheatsheet pattern found."
    path = str(gpu_fixture("64_bf16_warm_eager"))
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, "diagnose", "--select", ",", path)
    assert exit_.value.code == 2
    assert "argument --select: no rule id in ','" in capsys.readouterr().err


def test_a_selection_that_leaves_no_rule_to_run_is_bad_usage(
    capsys: pytest.CaptureFixture,
) -> None:
    # Both had said "No cheatsheet pattern found." with status 0, as of a clean trace.
    path = str(gpu_fixture("4096_bf16_warm_eager"))
    status, out, err = run_cli(
        capsys, "diagnose", "--select", "hotspot", "--ignore", "hotspot", path
    )
    assert (status, out, err) == (2, "", "error: --select and --ignore leave no rule to run\n")
    status, out, err = run_cli(capsys, "diagnose", "--select", "rank-straggler", path)
    assert (status, out) == (2, "")
    assert err.startswith("error: rank-straggler compares ranks and one trace is given: give")
    status, out, err = run_cli(capsys, "diagnose", "--select", "compile-cpu-tax", path)
    assert (status, out) == (2, "")
    assert err == (
        "error: compile-cpu-tax compares a run with a baseline: compare BASELINE TRACE runs it\n"
    )
    # Both kinds asked for: both reasons.
    status, out, err = run_cli(
        capsys, "diagnose", "--select", "compile-cpu-tax,rank-straggler", path
    )
    assert (status, out) == (2, "")
    assert "rank-straggler compares ranks" in err and "compile-cpu-tax compares a run" in err
    # Over a run's ranks it runs, and no trace is said to show no pattern.
    ranks = str(FIXTURES / "nccl" / "stalled")
    status, out, _ = run_cli(capsys, "diagnose", "--select", "rank-straggler", ranks)
    assert status == 0
    assert "rank-straggler: rank 1 is the straggler" in out
    assert "No cheatsheet pattern found" not in out
    # No cross-rank rule selected: none ran, which is not "no finding".
    status, out, _ = run_cli(capsys, "diagnose", "--select", "hotspot", ranks)
    assert status == 0
    assert out.endswith("\n  No cross-rank rule ran: --select and --ignore left none.\n")
    assert "No cross-rank finding" not in out


def test_a_directory_of_one_trace_is_one_trace_to_the_cross_rank_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # A directory of one trace had run rank-straggler and said "No cross-rank finding."
    shutil.copy(gpu_fixture("4096_bf16_warm_eager"), tmp_path)
    status, out, err = run_cli(capsys, "diagnose", "--select", "rank-straggler", str(tmp_path))
    assert (status, out) == (2, "")
    assert err.startswith("error: rank-straggler compares ranks and one trace is given")
    status, out, _ = run_cli(capsys, "diagnose", str(tmp_path))
    assert status == 0
    assert "note: one trace: there is no other rank to compare it with" in out
    # Two traces have another rank to compare with: no such note.
    shutil.copy(gpu_fixture("64_bf16_warm_eager"), tmp_path)
    status, out, _ = run_cli(capsys, "diagnose", str(tmp_path))
    assert status == 0
    assert "no other rank" not in out


def test_rules_selected_by_name_that_cannot_run_are_said_to_be_left_out(
    capsys: pytest.CaptureFixture,
) -> None:
    # hotspot ran and compile-cpu-tax and rank-straggler were dropped without a word.
    path = str(gpu_fixture("4096_bf16_warm_eager"))
    selection = "compile-cpu-tax,hotspot,rank-straggler"
    status, out, err = run_cli(capsys, "diagnose", "--json", "--select", selection, path)
    assert status == 0
    assert [f["rule"] for f in json.loads(out)["findings"]] == ["hotspot"]
    assert err.splitlines() == [
        "note: not run: compile-cpu-tax compares a run with a baseline: compare BASELINE "
        "TRACE runs it",
        "note: not run: rank-straggler compares ranks and one trace is given: give several "
        "traces, or a directory of a run's per-rank traces",
    ]
    # Every rule by default: nothing was asked for by name, nothing to say.
    status, _, err = run_cli(capsys, "diagnose", "--json", path)
    assert (status, err) == (0, "")


@pytest.mark.parametrize("content", [None, b"", b'{"traceEvents": [', gzip.compress(b"{}")[:10]])
def test_unreadable_trace_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, content: bytes | None
) -> None:
    path = tmp_path / "bad.json.gz"
    if content is not None:
        path.write_bytes(content)
    for argv in (
        ["diagnose", str(path)],
        ["compare", str(gpu_fixture("64_bf16_warm_eager")), str(path)],
    ):
        status, out, err = run_cli(capsys, *argv)
        assert (status, out) == (2, "")
        assert err.startswith(f"error: {path}: ") and err.count("\n") == 1


def test_compare_text_and_json(capsys: pytest.CaptureFixture) -> None:
    eager = str(gpu_fixture("4096_bf16_warm_eager"))
    compiled = str(gpu_fixture("4096_bf16_warm_compile"))
    status, out, _ = run_cli(capsys, "compare", eager, compiled)
    assert status == 0
    assert out.startswith(f"baseline: {eager}\ntrace:    {compiled}\n")
    assert "[warning] compile-cpu-tax" in out
    status, out, _ = run_cli(capsys, "compare", "--json", eager, compiled)
    data = json.loads(out)
    assert status == 0
    assert set(data) == {
        "baseline",
        "trace",
        "cpu_ratio",
        "devices_differ",
        "fp32_math_differs",
        "versions_differ",
        "steps",
        "ops_only_in_baseline",
        "ops_only_in_trace",
        "kernels_only_in_baseline",
        "kernels_only_in_trace",
        "labels_only_in_baseline",
        "labels_only_in_trace",
        "findings",
    }
    assert [f["rule"] for f in data["findings"]] == ["compile-cpu-tax"]
    assert len(data["steps"]) == 3
    assert data["devices_differ"] is False and data["fp32_math_differs"] is False


def test_help_documents_the_json_and_the_rule_ids(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["diagnose", "--help"])
    out = capsys.readouterr().out
    assert "findings  [{rule, table, severity, message, evidence}]" in out
    assert all(rule_id in out for rule_id in rule_ids())
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "kernels_only_in_trace" in capsys.readouterr().out


def test_python_dash_m_runs_diagnose() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "profiling_utils",
            "diagnose",
            "--json",
            str(gpu_fixture("64_bf16_warm_compile-reduce-overhead")),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "cuda-graph" in {f["rule"] for f in json.loads(done.stdout)["findings"]}
