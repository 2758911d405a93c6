"""Cheatsheet row on fusion: chains of elementwise kernels over one tensor shape, each a round
trip of the tensor through GPU memory that one fused kernel would not make.

The chains are read from the ops that launched the kernels and the shapes the profiler
recorded for them (``record_shapes=True``); without recorded shapes the rule stays silent.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import msgspec

from ..tables import byte_size
from ..trace import Span, element_bytes, input_shapes
from .facts import Facts, median, us
from .registry import Hit, rule

__all__ = [
    "ELEMENTWISE_OPS",
    "GEMM_OPS",
    "MIN_CHAIN_KERNELS",
    "MIN_COMPUTING_KERNELS",
    "Chain",
    "elementwise_chains",
]

ELEMENTWISE_OPS = frozenset(
    {
        *("aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::rsub"),
        *("aten::mul", "aten::mul_", "aten::div", "aten::div_", "aten::neg", "aten::reciprocal"),
        *("aten::pow", "aten::sqrt", "aten::rsqrt", "aten::exp", "aten::log", "aten::abs"),
        *("aten::relu", "aten::relu_", "aten::gelu", "aten::silu", "aten::silu_"),
        *("aten::sigmoid", "aten::tanh", "aten::clamp", "aten::clamp_", "aten::clamp_min"),
        *("aten::where", "aten::masked_fill", "aten::masked_fill_", "aten::copy_"),
        *("aten::threshold_backward", "aten::gelu_backward", "aten::silu_backward"),
        *("aten::sigmoid_backward", "aten::tanh_backward"),
    }
)
"""Ops whose kernel reads each element of its inputs once and writes one output element per
element: a chain of them fuses into one kernel with no change to the result. ``aten::copy_``
is in (``.to(dtype)`` and ``.contiguous()`` launch it); reductions (softmax, layer norm, sum)
and dropout (it also writes a mask) are out, as is ``aten::fill_``, which reads nothing."""

GEMM_OPS = frozenset(
    {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
)
"""Ops whose GEMM kernel does not break a chain: it reads and writes tensors of its own (the
up projection between a GeGLU MLP's gelu and its mul), and the chain's tensor waits in
memory for the next elementwise kernel. The GEMM is not part of the chain. One that may read
the chain's tensor, an input of the chain's shape (the next layer's GEMM on a gelu's output),
breaks it: the kernels after it work on its output."""

MIN_CHAIN_KERNELS = 3
"""Shortest chain reported: two elementwise kernels in a row are common (a cast then a
copy); three or more over one shape is a sequence a fused kernel would replace."""

MIN_COMPUTING_KERNELS = 2
"""A shorter chain is reported when this many of its kernels compute (an op other than
``aten::copy_``): a gelu then a mul over one shape, as in a GeGLU MLP, is what a fused
kernel replaces; a cast then a copy is not reported."""

_REPORTED = 5


class Chain(msgspec.Struct, frozen=True, gc=False):
    """Consecutive elementwise kernels of one step over tensors of one shape."""

    step: int | None
    """N in ``ProfilerStep#N``; ``None`` in a trace whose rules read no step (the whole
    recording is read as one)."""
    ops: tuple[Span, ...]
    """The op that launched each kernel (``aten::add``, ``aten::copy_``...)."""
    kernels: tuple[Span, ...]
    """The kernels, in launch order."""
    dims: tuple[int, ...]
    """The shape of the tensor the chain works on, as recorded."""
    intermediate_bytes: tuple[int, ...]
    """Bytes of the tensor each kernel but the last writes and the next reads back."""

    @property
    def signature(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The ops' names and the shape: chains alike in every step share it."""
        return tuple(op.name for op in self.ops), self.dims

    @property
    def saved_bytes(self) -> int:
        """Memory traffic fusing the chain saves: each intermediate written, then read."""
        return 2 * sum(self.intermediate_bytes)

    @property
    def gpu_us(self) -> float:
        """The kernels' summed durations, µs."""
        return sum(kernel.dur for kernel in self.kernels)


def _dims_and_output_bytes(op: Span) -> tuple[tuple[int, ...], int] | None:
    """The shape an elementwise op works on (its first tensor input's) and the bytes of the
    tensor it writes, from the recorded shapes; ``None`` without them."""
    shapes = input_shapes(op)
    if shapes is None or not shapes.types:
        return None
    first = shapes.sizes(0)
    if first is None:
        return None
    # Dimensioned tensors only: a Python scalar is recorded with no dims (type "double"), and
    # neither it nor a 0-dim tensor sets the result's type when a dimensioned tensor is in.
    tensors = [
        (sizes, size)
        for index, dtype in enumerate(shapes.types)
        if (size := element_bytes(dtype)) is not None and (sizes := shapes.sizes(index)) is not None
    ]
    if not tensors or tensors[0][0] != first:
        return None
    shape = tensors[0][0]
    if op.name.endswith("_"):  # in place (copy_ too): it writes its first argument
        itemsize = tensors[0][1]
    else:  # a new tensor of the promoted type: the widest input's, for floating inputs
        itemsize = max(size for _, size in tensors)
    return shape, math.prod(shape) * itemsize


def _may_read(gemm: Span, dims: tuple[int, ...]) -> bool:
    """Whether a GEMM op has an input of the sizes ``dims`` (so it may read a chain's tensor
    of that shape), as its recorded shapes say; without them, it is taken not to."""
    shapes = input_shapes(gemm)
    if shapes is None:
        return False
    return any(shapes.sizes(index) == dims for index in range(len(shapes.dims)))


def _first_type(op: Span) -> str:
    shapes = input_shapes(op)
    assert shapes is not None  # an op in a chain recorded its shapes
    return shapes.types[0]


_SHORTEST_CHAIN = min(MIN_CHAIN_KERNELS, MIN_COMPUTING_KERNELS)


def _long_enough(ops: list[Span]) -> bool:
    computing = sum(op.name != "aten::copy_" for op in ops)
    return len(ops) >= MIN_CHAIN_KERNELS or computing >= MIN_COMPUTING_KERNELS


def elementwise_chains(facts: Facts) -> list[Chain]:
    """Runs of kernels launched in a step (one of :attr:`Facts.steps`; anywhere in the
    recording where the rules read no step), on one stream, from :data:`ELEMENTWISE_OPS` over
    tensors of one shape: at least :data:`MIN_CHAIN_KERNELS` of them, or at least
    :data:`MIN_COMPUTING_KERNELS` that are not copies. GEMM kernels (:data:`GEMM_OPS`)
    between them do not join the run, and break it only where they take an input of the
    run's shape; any other kernel breaks it.

    The trace does not record which tensor a kernel reads: a run over one shape is taken to
    pass its tensor along, as a sequence of elementwise ops in a model does."""
    whole = not facts.steps  # no step to read: the whole recording is one
    step_of_id = (lambda _: None) if whole else facts.step_of_gpu_work
    kept = {None} if whole else {step.number for step in facts.steps}
    # Runs by op name and step first: the recorded shapes are decoded for long runs only.
    # (op, kernel), or (GEMM op, None) for a GEMM between the run's kernels.
    runs: list[list[tuple[Span, Span | None]]] = []
    open_runs: dict[Any, list[tuple[Span, Span | None]]] = {}
    run_step: dict[Any, int | None] = {}  # per lane: the step of its open run's kernels
    for launch, kernel in facts.program_kernel_launches:
        op = launch.op
        lane = kernel.lane
        run = open_runs.get(lane)
        if op is not None and op.name in GEMM_OPS:
            if run is not None:
                run.append((op, None))  # read with the shapes below: it may break the run
            continue
        if op is None or op.name not in ELEMENTWISE_OPS:
            if run is not None:
                runs.append(open_runs.pop(lane))
            continue
        step = step_of_id(kernel.id)
        if run is not None and run_step[lane] != step:
            runs.append(open_runs.pop(lane))
            run = None
        if run is None:
            run = open_runs[lane] = []
            run_step[lane] = step
        run.append((op, kernel))
    runs.extend(open_runs.values())
    chains = []
    for run in runs:
        kernels = [(op, kernel) for op, kernel in run if kernel is not None]  # no GEMM
        if len(kernels) < _SHORTEST_CHAIN:  # most runs: one elementwise kernel between others
            continue
        ops = [op for op, _ in kernels]
        if not _long_enough(ops) or step_of_id(kernels[0][1].id) not in kept:
            continue  # outside the steps the rules read (a step cut short, none at all)
        shaped: list[tuple[Span, Span, tuple[int, ...], int]] = []
        ended: list[tuple[Span | None, Span | None]] = [*run, (None, None)]
        for entry, launched in ended:
            if entry is not None and launched is None:  # a GEMM between elementwise kernels
                if not (shaped and _may_read(entry, shaped[-1][2])):
                    continue
                read = None  # the chain's tensor goes into it: the chain ends here
            else:
                read = None if entry is None else _dims_and_output_bytes(entry)
            if shaped and (read is None or read[0] != shaped[-1][2]):
                if _long_enough([item[0] for item in shaped]):
                    chains.append(
                        Chain(
                            step_of_id(shaped[0][1].id),
                            tuple(item[0] for item in shaped),
                            tuple(item[1] for item in shaped),
                            shaped[0][2],
                            tuple(item[3] for item in shaped[:-1]),
                        )
                    )
                shaped = []
            if read is not None and entry is not None and launched is not None:
                shaped.append((entry, launched, *read))
    return sorted(chains, key=lambda chain: chain.kernels[0].start)


@rule(
    "elementwise-chain",
    "GPU lane",
    see="""Several short elementwise kernels (add, mul, gelu, where, copy_...) over a tensor of
    one shape, each launched by its own aten op, one after the other or with only GEMMs
    between them that take no input of that shape (counted per step, or over the whole
    recording in a trace without steps).""",
    means="""Each kernel writes the whole tensor to GPU memory and the next reads it back: a
    fusion opportunity. One fused kernel (torch.compile, or a fused op such as F.gelu(x + b))
    saves 2 × the tensor's bytes per kernel it removes, and the launches. Needs the shapes:
    record with record_shapes=True.""",
    severity="info",
    from_post=False,
    example="auto_examples/part2_linear_and_mlp/plot_13_mlp_fusion",
)
def elementwise_chain(facts: Facts) -> Iterator[Hit]:
    chains = elementwise_chains(facts)
    if not chains:
        return
    by_signature: dict[object, list[Chain]] = defaultdict(list)
    for chain in chains:
        by_signature[chain.signature].append(chain)
    rows = sorted(by_signature.values(), key=lambda group: -sum(c.saved_bytes for c in group))
    gpu_us = sum(chain.gpu_us for chain in chains)
    saved = sum(chain.saved_bytes for chain in chains)
    launches = sum(len(chain.kernels) - 1 for chain in chains)  # one kernel each, fused
    if not facts.steps:  # the whole recording, as one
        yield (
            f"{len(chains)} chain(s) of elementwise kernels over one shape in the recording (no "
            f"steps to count per step); fusing them would save {byte_size(saved)} of memory "
            f"traffic and {launches:,} kernel launch(es) in it (their kernels take "
            f"{gpu_us:,.1f} µs of GPU time; biggest: {_biggest(rows)}).",
            {
                "window": "recording",
                "chain_count": len(chains),
                "saved_bytes": saved,
                "saved_launches": launches,
                "gpu_us": us(gpu_us),
                "chains": [_chain_row(group, count=len(group)) for group in rows[:_REPORTED]],
            },
        )
        return
    steps = sorted({chain.step for chain in chains if chain.step is not None})
    per_step = len(facts.steps)  # averaged over every step, those without a chain too
    yield (
        f"{len(chains)} chain(s) of elementwise kernels over one shape in {per_step} step(s), "
        f"{len(chains) / per_step:.3g} per step; fusing them would save "
        f"{byte_size(saved / per_step)} of memory traffic and {launches / per_step:,.3g} "
        f"kernel launch(es) per step (their kernels take {gpu_us / per_step:,.1f} µs of GPU "
        f"time per step; biggest: {_biggest(rows)}).",
        {
            "chains_per_step": round(len(chains) / per_step, 2),
            "saved_bytes_per_step": round(saved / per_step),
            "saved_launches_per_step": round(launches / per_step, 2),
            "gpu_us_per_step": us(gpu_us / per_step),
            "steps": steps,
            "chains": [
                _chain_row(group, per_step=round(len(group) / per_step, 2))
                for group in rows[:_REPORTED]
            ],
        },
    )


def _biggest(rows: list[list[Chain]]) -> str:
    """``aten::add → aten::mul on [64, 1024]``: the chain that saves the most bytes (a long
    one by its first and last ops, and how many it holds)."""
    biggest = rows[0][0]
    names = [op.name for op in biggest.ops]
    if len(names) > _NAMED_OPS:
        left_out = len(names) - _NAMED_OPS + 1
        names = [*names[:3], f"… {left_out} more …", *names[-(_NAMED_OPS - 4) :]]
        return f"{' → '.join(names)}, {len(biggest.ops)} ops on {list(biggest.dims)}"
    return f"{' → '.join(names)} on {list(biggest.dims)}"


_NAMED_OPS = 6
"""A chain of more ops is named by its first three and last two."""


def _chain_row(group: list[Chain], **how_often: Any) -> dict[str, Any]:
    """The evidence of the chains alike (one signature): ops, shape, dtypes, ``how_often``
    they run (``per_step`` or ``count``), bytes saved per chain and median GPU time."""
    first = group[0]
    return {
        "ops": [op.name for op in first.ops],
        "dims": list(first.dims),
        "input_types": [_first_type(op) for op in first.ops],
        **how_often,
        "saved_bytes_per_chain": first.saved_bytes,
        "median_gpu_us": us(median(c.gpu_us for c in group)),
    }
