"""Record the GPU traces the tests use as fixtures, with their provenance.

Run on a CUDA machine from the repository root::

    python scripts/record_fixtures.py --out tests/fixtures/gpu

Each scenario is profiled with :func:`profiling_utils.capture.capture` and written as
``{name}.json.gz`` (the profiler tables are not kept: tests read traces). ``provenance.json``
records the GPU, driver, CUDA and torch that produced them, and each run's parameters.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiling_utils.capture import capture, run_name  # noqa: E402
from profiling_utils.provenance import environment  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def matmul_add(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(torch.matmul(x, w), b)


def operands(
    shape: tuple[int, ...], dtype: str, batched_weight: bool = False
) -> tuple[torch.Tensor, ...]:
    n = shape[-1]
    make = dict(device="cuda", dtype=DTYPES[dtype])
    w_shape = shape if batched_weight else (n, n)
    return torch.randn(*shape, **make), torch.randn(*w_shape, **make), torch.randn(n, n, **make)


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
        # fp32 GEMM.
        dict(shape=(4096, 4096), dtype="fp32", warm=True, compiled=False),
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
    result = capture(
        lambda: fn(x, w, b),
        name=name,
        out_dir=tmp,
        label="matmul_add",
        warmup_iters=3 if run["warm"] else 0,
        **sched,
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/gpu"))
    parser.add_argument("--training-steps", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("record_fixtures.py needs a CUDA GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for run in matmul_runs():
            t0 = time.perf_counter()
            records.append(record_matmul(run, args.out, tmp))
            print(f"{records[-1]['file']:45s} {time.perf_counter() - t0:6.1f} s", flush=True)
        records.append(record_training(args.out, tmp, args.training_steps))
        print(records[-1]["file"], flush=True)
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
