"""Record the GPU traces the tests use as fixtures, with their provenance.

Run on a CUDA machine from the repository root::

    python scripts/record_fixtures.py --out tests/fixtures/gpu

``--only series`` records only Parts 2 and 3 of the series (``nn.Linear``, the GeGLU MLP
eager, compiled and with Liger's kernel, attention naive, in place and through each SDPA
backend), with ``liger-kernel`` installed; like ``rows`` it adds to ``provenance.json``.

``--only tf32`` records only the 4096 fp32 GEMM with TF32 allowed, added the same way.

``--only rows`` records only the scenarios of the two rules about time that moves
(``kernel-variance``, ``intra-step-gap``) and adds them to an existing ``provenance.json``::

    python scripts/record_fixtures.py --out tests/fixtures/gpu --only rows

Each scenario is profiled with :func:`profiling_utils.capture.capture` and written as
``{name}.json.gz`` (the profiler tables are not kept: tests read traces). ``provenance.json``
records the GPU, driver, CUDA and torch that produced them, and each run's parameters.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiling_utils.capture import capture, run_name  # noqa: E402
from profiling_utils.neighbour import GpuNeighbour  # noqa: E402
from profiling_utils.provenance import environment  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}
"""``tf32``: fp32 tensors, with ``torch.set_float32_matmul_precision("high")`` while recording."""


def matmul_add(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(torch.matmul(x, w), b)


def operands(
    shape: tuple[int, ...], dtype: str, batched_weight: bool = False
) -> tuple[torch.Tensor, ...]:
    n = shape[-1]
    make = dict(device="cuda", dtype=DTYPES[dtype])
    w_shape = shape if batched_weight else (n, n)
    return torch.randn(*shape, **make), torch.randn(*w_shape, **make), torch.randn(n, n, **make)


TF32_RUNS = [dict(shape=(4096, 4096), dtype="tf32", warm=True, compiled=False)]


def matmul_runs() -> list[dict]:
    """The post's scenarios, plus the ones it invites and does not show."""
    runs = [
        # First of all, while the process has never touched the GPU: a truly cold start with
        # nothing hidden by the schedule (the default schedule's wait and warm-up steps absorb
        # most one-time costs, so the other "cold" runs below are only cold in name).
        dict(
            shape=(64, 64),
            dtype="bf16",
            warm=False,
            compiled=False,
            schedule=dict(wait=0, warmup=0, active=3),
            suffix="w0a3",
        ),
    ]
    for size in (64, 4096):
        for warm in (False, True):
            for compiled in (False, True):
                runs.append(dict(shape=(size, size), dtype="bf16", warm=warm, compiled=compiled))
    runs += [
        # The schedule without wait or warm-up: the profiler's buffer request shows up.
        dict(
            shape=(64, 64),
            dtype="bf16",
            warm=True,
            compiled=False,
            schedule=dict(wait=0, warmup=0, active=3),
            suffix="w0a3",
        ),
        dict(
            shape=(64, 64),
            dtype="bf16",
            warm=True,
            compiled=False,
            schedule=dict(wait=0, warmup=0, active=20),
            suffix="w0a20",
        ),
        # Twenty steps of a large GEMM: kernel variance.
        dict(
            shape=(4096, 4096),
            dtype="bf16",
            warm=True,
            compiled=False,
            schedule=dict(wait=0, warmup=0, active=20),
            suffix="w0a20",
        ),
        # A 3-D input times a 2-D weight folds into one aten::mm ...
        dict(shape=(8, 64, 64), dtype="bf16", warm=True, compiled=False),
        # ... a 3-D weight as well gives aten::bmm.
        dict(
            shape=(8, 64, 64),
            dtype="bf16",
            warm=True,
            compiled=False,
            batched_weight=True,
            suffix="bmm",
        ),
        # fp32 GEMM, and the same with TF32 allowed.
        dict(shape=(4096, 4096), dtype="fp32", warm=True, compiled=False),
        *TF32_RUNS,
        # CUDA graphs.
        dict(shape=(64, 64), dtype="bf16", warm=True, compiled="reduce-overhead"),
        dict(shape=(4096, 4096), dtype="bf16", warm=True, compiled="reduce-overhead"),
    ]
    return runs


def record_matmul(run: dict, out: Path, tmp: Path) -> dict:
    x, w, b = operands(run["shape"], run["dtype"], run.get("batched_weight", False))
    fn = matmul_add
    if run["compiled"]:
        mode = None if run["compiled"] is True else run["compiled"]
        fn = torch.compile(matmul_add, mode=mode)
    size = run["shape"] if len(run["shape"]) == 3 else run["shape"][0]
    name = run_name(size, run["dtype"], warm=run["warm"], compiled=run["compiled"])
    if run.get("suffix"):
        name += f"_{run['suffix']}"
    sched = run.get("schedule", dict(wait=1, warmup=1, active=3))
    torch.set_float32_matmul_precision("high" if run["dtype"] == "tf32" else "highest")
    try:
        result = capture(
            lambda: fn(x, w, b),
            name=name,
            out_dir=tmp,
            label="matmul_add",
            warmup_iters=3 if run["warm"] else 0,
            **sched,
        )
    finally:
        torch.set_float32_matmul_precision("highest")
    target = out / result.trace_path.name
    target.write_bytes(result.trace_path.read_bytes())
    return {
        "file": target.name,
        "scenario": "matmul_add",
        **{k: run[k] for k in run},
        **result.params,
    }


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab: int = 1024, dim: int = 256, layers: int = 4) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        layer = torch.nn.TransformerEncoderLayer(
            dim, nhead=4, dim_feedforward=4 * dim, batch_first=True, norm_first=True
        )
        self.body = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(tokens)))


def record_training(out: Path, tmp: Path, active: int) -> dict:
    """A small transformer's training steps: the shape of trace people bring to the CLI."""
    torch.manual_seed(0)
    model = TinyTransformer().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 1024, (16, 128), device="cuda")
    target = torch.randint(0, 1024, (16, 128), device="cuda")

    def train_step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    result = capture(
        train_step,
        name=f"train_tiny_transformer_a{active}",
        out_dir=tmp,
        label="train_step",
        warmup_iters=3,
        wait=1,
        warmup=1,
        active=active,
        record_shapes=True,
    )
    target_path = out / result.trace_path.name
    target_path.write_bytes(result.trace_path.read_bytes())
    return {"file": target_path.name, "scenario": "training", **result.params}


# -- the rows of time that moves: kernel-variance and intra-step-gap ---------------------------


def record_shared_gpu(out: Path, tmp: Path) -> dict:
    """A 4096 bf16 GEMM per step while another process runs four 8192 GEMMs from the tenth
    recorded step: the GPU time-slices between the two processes (kernel-variance)."""
    torch.manual_seed(0)
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    calls = [0]
    with GpuNeighbour(size=8192, gemms=4) as neighbour:

        def step() -> torch.Tensor:
            calls[0] += 1
            if calls[0] == 3 + 1 + 1 + 10:  # warm-up calls, wait, warmup, then 10 steps
                neighbour.burst()
            return (a @ b) + a

        result = capture(
            step, name="4096_bf16_shared-gpu_a30", out_dir=tmp, label="step",
            warmup_iters=3, wait=1, warmup=1, active=30,
        )  # fmt: skip
    target = out / result.trace_path.name
    target.write_bytes(result.trace_path.read_bytes())
    return {
        "file": target.name,
        "scenario": "shared_gpu",
        "neighbour": {"size": 8192, "gemms": 4, "burst_ms": neighbour.burst_ms},
        **result.params,
    }


def record_item_sync(out: Path, tmp: Path) -> dict:
    """Three 4096 bf16 GEMMs per step with ``loss.item()`` between the second and the third:
    the host sync drains the GPU in every step (intra-step-gap)."""
    torch.manual_seed(0)
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    def step() -> torch.Tensor:
        y = (a @ b) @ b
        y.float().mean().item()  # the host sync
        return a @ b

    result = capture(
        step, name="4096_bf16_item-sync", out_dir=tmp, label="step",
        warmup_iters=3, wait=1, warmup=1, active=20,
    )  # fmt: skip
    target = out / result.trace_path.name
    target.write_bytes(result.trace_path.read_bytes())
    return {"file": target.name, "scenario": "item_sync", **result.params}


def trim_to_steps(document: dict, first: int, last: int) -> dict:
    """A trace document cut down to ``ProfilerStep#first`` .. ``#last``: the host events
    inside those steps, the GPU work (and flows) they launched, and the metadata."""
    events = document["traceEvents"]
    steps = {
        e["name"]: e
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "user_annotation"
        and e["name"].startswith("ProfilerStep#")
    }  # fmt: skip
    start = steps[f"ProfilerStep#{first}"]["ts"]
    end = steps[f"ProfilerStep#{last}"]["ts"] + steps[f"ProfilerStep#{last}"]["dur"]
    launched = {
        e["args"]["correlation"]
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")
        and start <= e["ts"] <= end and "correlation" in e.get("args", {})
    }  # fmt: skip
    kept = []
    for e in events:
        if e.get("ph") == "M" or "ts" not in e or e.get("name") == "Record Window End":
            kept.append(e)
        elif e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            if e.get("args", {}).get("correlation") in launched:
                kept.append(e)
        elif e.get("ph") in ("s", "f"):
            if e.get("id") in launched:
                kept.append(e)
        elif e.get("cat") != "gpu_user_annotation" and start <= e["ts"] <= end:
            kept.append(e)
    return {**document, "traceEvents": kept}


def record_training_buffer_request(out: Path, tmp: Path, active: int = 40) -> dict:
    """The tiny transformer for ``active`` steps, cut down to the step in which the profiler's
    Activity Buffer Request landed and its two neighbours (intra-step-gap: a one-off)."""
    run = record_training(tmp, tmp / "full", active)
    full = tmp / run["file"]
    document = json.loads(gzip.decompress(full.read_bytes()))
    request_ts = [
        e["ts"] for e in document["traceEvents"]
        if e.get("ph") == "X" and e.get("name") == "Activity Buffer Request"
    ]  # fmt: skip
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
        for e in document["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "user_annotation"
        and e["name"].startswith("ProfilerStep#")
    )  # fmt: skip
    inside = [n for lo, hi, n in steps for ts in request_ts if lo <= ts <= hi]
    numbers = [n for _, _, n in steps]
    middle = inside[-1] if inside else numbers[len(numbers) // 2]
    first, last = max(numbers[0], middle - 1), min(numbers[-1], middle + 1)
    name = f"train_tiny_transformer_a{active}_buffer-request.json.gz"
    if not inside:
        print(f"{name}: no Activity Buffer Request inside a step; record again", flush=True)
    trimmed = trim_to_steps(document, first, last)
    (out / name).write_bytes(gzip.compress(json.dumps(trimmed).encode(), 9, mtime=0))
    return {
        **run,
        "file": name,
        "trimmed": f"ProfilerStep#{first}..#{last} of {active} recorded steps, around the "
        "Activity Buffer Request (scripts/record_fixtures.py trim_to_steps)",
    }


# -- Parts 2 and 3 of the series: nn.Linear, the GeGLU MLP, attention ---------------------------


def _record(step, name: str, out: Path, tmp: Path, label: str, **fields) -> dict:
    """Capture ``step`` warm (three calls first), with shapes, and copy the trace to ``out``."""
    result = capture(step, name=name, out_dir=tmp, label=label, warmup_iters=3, record_shapes=True)
    target = out / result.trace_path.name
    target.write_bytes(result.trace_path.read_bytes())
    return {"file": target.name, **fields, **result.params}


def record_linear(out: Path, tmp: Path, compiled: bool) -> dict:
    """Part 2's first script: one ``nn.Linear(32, 64)`` on a [1024, 32] bf16 batch, no grad."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 64, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1024, 32, device="cuda", dtype=torch.bfloat16)
    fn = torch.compile(layer) if compiled else layer

    def step() -> torch.Tensor:
        with torch.no_grad():
            return fn(x)

    tag = "compile" if compiled else "eager"
    return _record(step, f"linear_1024x32x64_bf16_{tag}", out, tmp, "linear_fwd",
                   scenario="linear", compiled=compiled)  # fmt: skip


class GeGLU(torch.nn.Module):
    """Part 2's MLP: gate and up projections, tanh-GELU of the gate times up, down projection."""

    def __init__(self, dim: int = 768, hidden: int = 3072) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(dim, hidden, bias=False)
        self.up_proj = torch.nn.Linear(dim, hidden, bias=False)
        self.down_proj = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.nn.functional.gelu(self.gate_proj(x), approximate="tanh")
        return self.down_proj(gate * self.up_proj(x))


def record_mlp(out: Path, tmp: Path, variant: str) -> dict:
    """The GeGLU MLP on a [64, 128, 768] bf16 batch, no grad: ``eager``, ``compile``, or
    ``liger`` (Liger's ``LigerGEGLUMLP``, its gelu-times-up a hand-written Triton kernel)."""
    torch.manual_seed(0)
    if variant == "liger":
        from types import SimpleNamespace

        from liger_kernel.transformers import LigerGEGLUMLP

        config = SimpleNamespace(
            hidden_size=768, intermediate_size=3072, hidden_act="gelu_pytorch_tanh"
        )
        model = LigerGEGLUMLP(config)
    else:
        model = GeGLU()
    model = model.to("cuda", torch.bfloat16)
    fn = torch.compile(model) if variant == "compile" else model
    x = torch.randn(64, 128, 768, device="cuda", dtype=torch.bfloat16)

    def step() -> torch.Tensor:
        with torch.no_grad():
            return fn(x)

    return _record(step, f"mlp_64x128x768x3072_bf16_{variant}", out, tmp, "mlp_fwd",
                   scenario="mlp", variant=variant)  # fmt: skip


def attention_inputs() -> tuple[torch.Tensor, ...]:
    """Query, key and value of Part 3: batch 8, 16 heads, 1024 tokens, head size 64, bf16."""
    torch.manual_seed(0)
    return tuple(
        torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)
    )


def record_attention(out: Path, tmp: Path, variant: str) -> dict:
    """Causal attention, ``naive`` (out-of-place ``masked_fill``), ``inplace``
    (``masked_fill_``), or ``sdpa-<backend>`` with SDPA pinned to one backend (``auto``:
    none pinned). The naive variants build their mask once, outside the step."""
    import math

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention, softmax

    q, k, v = attention_inputs()
    length = q.shape[-2]
    masked = ~torch.tril(torch.ones(length, length, device="cuda", dtype=torch.bool))

    def naive(in_place: bool) -> torch.Tensor:
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if in_place:
            scores.masked_fill_(masked, float("-inf"))
        else:
            scores = scores.masked_fill(masked, float("-inf"))
        return softmax(scores, dim=-1) @ v

    backends = {
        "math": SDPBackend.MATH,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }

    def step() -> torch.Tensor:
        with torch.no_grad():
            if variant in ("naive", "inplace"):
                return naive(variant == "inplace")
            backend = variant.removeprefix("sdpa-")
            if backend == "auto":
                return scaled_dot_product_attention(q, k, v, is_causal=True)
            with sdpa_kernel(backends[backend]):
                return scaled_dot_product_attention(q, k, v, is_causal=True)

    return _record(step, f"attention_8x16x1024x64_bf16_{variant}", out, tmp, "attention_fwd",
                   scenario="attention", variant=variant)  # fmt: skip


SERIES = (
    *(lambda out, tmp, c=c: record_linear(out, tmp, c) for c in (False, True)),
    *(lambda out, tmp, v=v: record_mlp(out, tmp, v) for v in ("eager", "compile", "liger")),
    *(
        lambda out, tmp, v=v: record_attention(out, tmp, v)
        for v in (
            "naive",
            "inplace",
            "sdpa-math",
            "sdpa-efficient",
            "sdpa-flash",
            "sdpa-cudnn",
            "sdpa-auto",
        )
    ),  # fmt: skip
)
"""The scenarios of ``--only series``: Parts 2 and 3 of the series."""


ROWS = (record_shared_gpu, record_item_sync, record_training_buffer_request)
"""The scenarios of ``--only rows``."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/gpu"))
    parser.add_argument("--training-steps", type=int, default=3)
    parser.add_argument(
        "--only",
        choices=("all", "rows", "series", "tf32"),
        default="all",
        help="rows: only the kernel-variance and intra-step-gap scenarios; series: only "
        "Parts 2 and 3 of the series (Linear, MLP, attention); tf32: only the fp32 GEMM with "
        "TF32 allowed; each added to the existing provenance.json",
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("record_fixtures.py needs a CUDA GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "full").mkdir()
        if args.only == "all":
            for run in matmul_runs():
                t0 = time.perf_counter()
                records.append(record_matmul(run, args.out, tmp))
                print(f"{records[-1]['file']:45s} {time.perf_counter() - t0:6.1f} s", flush=True)
            records.append(record_training(args.out, tmp, args.training_steps))
            print(records[-1]["file"], flush=True)
        if args.only == "tf32":
            records += [record_matmul(run, args.out, tmp) for run in TF32_RUNS]
        for scenario in {"all": ROWS + SERIES, "rows": ROWS, "series": SERIES, "tf32": []}[
            args.only
        ]:
            t0 = time.perf_counter()
            records.append(scenario(args.out, tmp))
            print(f"{records[-1]['file']:45s} {time.perf_counter() - t0:6.1f} s", flush=True)
    if args.only != "all":
        existing = json.loads((args.out / "provenance.json").read_text())
        files = {record["file"] for record in records}
        kept = [run for run in existing["runs"] if run["file"] not in files]
        existing["runs"] = kept + [{**r, "environment": environment().as_dict()} for r in records]
        (args.out / "provenance.json").write_text(
            json.dumps(existing, indent=2, default=str) + "\n"
        )
        return
    provenance = {
        "environment": environment().as_dict(),
        "device_properties": {
            "name": torch.cuda.get_device_name(0),
            "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
            "capability": list(torch.cuda.get_device_capability(0)),
        },
        "recorded_by": "scripts/record_fixtures.py",
        "runs": records,
    }
    (args.out / "provenance.json").write_text(json.dumps(provenance, indent=2, default=str) + "\n")
    print(json.dumps(provenance["environment"]))


if __name__ == "__main__":
    main()
