"""The two-rank recordings of ``tests/fixtures/parallel/`` (see its README and
``scripts/record_parallel_traces.py``): the collectives of the common parallel recipes, read
rank by rank.

The expected figures are read from the raw JSON here, not from the model.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from profiling_utils import diagnose

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
    assert f"The thread makes this sync in 4 of the 4 steps; in the other {4 - found} " in (
        hit.message
    )
