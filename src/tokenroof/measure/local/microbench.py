"""Microbenchmarks of decode-shaped kernels, timed round-robin: what `calibrate` is made of.

Each `Kernel` is a call and the bytes or FLOPs it moves or does; `run_interleaved`
times many of them in rounds so a burst of load from elsewhere hits all alike.
Kernels run through the decode engine's own code (its prepacked `Linear`, its
attention), so they measure what `bench-local` runs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tokenroof.measure.local.device import torch_dtype
from tokenroof.specs import ModelSpec

DECODE_ROWS = 256  # the decode GEMM's rows: the largest usual batch
DRIFT_WARN_RATIO = 1.25  # pass medians further apart than this: the machine's speed changed, say so


@dataclass
class Kernel:
    """One microbenchmark: a call and the bytes or FLOPs it moves or does per call."""

    name: str
    call: Callable[[], Any]
    amount: float  # bytes or FLOPs per call
    passes: list[list[float]] = field(default_factory=list)  # call times (s), one list per interleaved pass

    def pass_median_s(self, index: int = -1) -> float:
        return statistics.median(self.passes[index])

    @property
    def time_s(self) -> float:
        """The quietest pass's median time (see `quietest_median_s`)."""
        return quietest_median_s(self.passes)

    @property
    def rate(self) -> float:
        """Bytes/s or FLOP/s at `time_s`."""
        return self.amount / self.time_s

    @property
    def pass_spread(self) -> float:
        """Slowest pass median ÷ quietest (1 with one pass): how far the machine's speed moved meanwhile."""
        return pass_spread(self.passes)


def pass_medians_s(passes: Sequence[Sequence[float]]) -> list[float]:
    return [statistics.median(times) for times in passes if times]


def quietest_median_s(passes: Sequence[Sequence[float]]) -> float:
    """The lowest of the passes' median times: on a shared machine interference only ever adds time, and it
    comes in stretches of seconds (a neighbour on the same cores), so whole passes run slow. The one rule for
    `calibrate`'s kernels and `bench-local`'s TPOT."""
    return min(pass_medians_s(passes))


def pass_spread(passes: Sequence[Sequence[float]]) -> float:
    """Slowest pass median ÷ quietest (1 with one pass)."""
    medians = pass_medians_s(passes)
    return max(medians) / min(medians) if len(medians) > 1 else 1.0


def stream_kernels(device: Any, nbytes: int) -> list[Kernel]:
    """STREAM-like copy (read + write counted) and read over fp32 arrays of `nbytes` each."""
    import torch

    n = nbytes // 4
    a = torch.ones(n, device=device)
    b = torch.empty(n, device=device)
    return [Kernel("copy", lambda: b.copy_(a), 2.0 * n * 4), Kernel("read", lambda: a.sum(), n * 4.0)]


@dataclass(frozen=True)
class Shapes:
    """The decode kernels' shapes: one layer's weight matrices (out, in) and the attention heads."""

    label: str
    matrices: tuple[tuple[int, int], ...]
    kv_heads: int = 8
    head_dim: int = 128
    group: int = 4  # query heads per KV head
    model_type: str = "llama"


def default_shapes(k: int) -> Shapes:
    return Shapes(f"square {k}×{k} matrices", ((k, k),))


def model_shapes(spec: ModelSpec) -> Shapes:
    """The projections of one layer of `spec` (kernel efficiency depends on shape, most of all on CPUs)."""
    h, q, kv, i = spec.hidden_size, spec.q_dim, spec.kv_dim, spec.intermediate_size
    return Shapes(
        f"{spec.name}'s layer shapes",
        ((q, h), (kv, h), (kv, h), (h, q), (i, h), (i, h), (h, i)),
        spec.num_kv_heads,
        spec.head_dim,
        spec.num_attention_heads // spec.num_kv_heads,
        spec.model_type,
    )


def weight_stack(device: Any, tdt: Any, shapes: Shapes, nbytes: int) -> list[Any]:
    """Engine Linears cycling through the layer's shapes until they hold at least `nbytes` (one layer at least)."""
    from tokenroof.measure.local.torch_engine import Linear

    layers, total, index = [], 0, 0
    element = tdt.itemsize
    while total < nbytes or index < len(shapes.matrices):
        out_features, in_features = shapes.matrices[index % len(shapes.matrices)]
        layer = Linear(in_features, out_features, bias=False, dtype=tdt, device=device)
        layer.weight.data.normal_(0, 0.02)
        layers.append(layer)
        total += out_features * in_features * element
        index += 1
    return layers


def stack_kernel(name: str, layers: list[Any], rows: int, device: Any, tdt: Any, count_flops: bool) -> Kernel:
    """`rows` rows through every Linear of the stack (prepacked as the engine packs): weight bytes or FLOPs per call."""
    import torch

    from tokenroof.measure.local.torch_engine import prepack_linears

    prepack_linears(layers, rows)
    inputs = {layer.in_features: torch.randn(rows, layer.in_features, dtype=tdt, device=device) for layer in layers}

    def run() -> None:
        for layer in layers:
            layer(inputs[layer.in_features])

    params = sum(layer.weight.numel() for layer in layers)
    return Kernel(name, run, 2.0 * rows * params if count_flops else float(params * tdt.itemsize))


def gemm_kernel(device: Any, dtype: str, n: int) -> Kernel:
    """A large square product [n, n] × [n, n]: 2·n³ FLOPs per call (the peak)."""
    import torch

    tdt = torch_dtype(dtype, device)
    a = torch.randn(n, n, dtype=tdt, device=device)
    w = torch.randn(n, n, dtype=tdt, device=device)
    return Kernel(f"gemm_{dtype}", lambda: torch.nn.functional.linear(a, w), 2.0 * n**3)


def attention_kernel(device: Any, dtype: str, shapes: Shapes, nbytes: int, context: int = 1024) -> Kernel:
    """The engine's decode attention over a KV cache of about `nbytes`: K+V bytes read per call."""
    import torch

    from tokenroof.measure.local.torch_engine import cached_attention

    tdt = torch_dtype(dtype, device)
    per_seq = 2 * shapes.kv_heads * context * shapes.head_dim * tdt.itemsize
    batch = max(nbytes // per_seq, 1)
    k = torch.randn(batch, shapes.kv_heads, context, shapes.head_dim, dtype=tdt, device=device)
    v = torch.randn_like(k)
    q = torch.randn(batch, 1, shapes.group * shapes.kv_heads, shapes.head_dim, dtype=tdt, device=device)
    return Kernel(f"attention_{dtype}", lambda: cached_attention(q, k, v, context - 1), float(batch * per_seq))


def run_interleaved(kernels: list[Kernel], sync: Callable[[], None], rounds: int) -> None:
    """One pass: warm each kernel, then time them round-robin, so a burst of load from elsewhere hits all alike."""
    for kernel in kernels:
        kernel.call()
        kernel.call()
        kernel.passes.append([])
    sync()
    for _ in range(rounds):
        for kernel in kernels:
            start = time.perf_counter()
            kernel.call()
            sync()
            kernel.passes[-1].append(time.perf_counter() - start)


def measure_overlap(
    device: Any, dtype: str, shapes: Shapes, nbytes: int, decode: Kernel, sync: Callable[[], None], repeats: int
) -> tuple[float, int]:
    """(overlap, ridge rows): how much of weight streaming a GEMM hides under its compute at the ridge.

    On a stack like the decode kernel's: T1 (one row: weight streaming), the per-row
    compute time tc = T(256)/256 from `decode`, and T at the ridge M* = T1/tc rows.
    A perfect roofline gives T(M*) = T1 (overlap 1); streaming then computing gives
    T1 + M*·tc (overlap 0).
    """
    tdt = torch_dtype(dtype, device)
    layers = weight_stack(device, tdt, shapes, nbytes)
    one = stack_kernel(f"ridge1_{dtype}", layers, 1, device, tdt, False)
    one.call()
    sync()
    # all three timed in the same passes, so a slow stretch of the machine scales them alike
    run_interleaved([one, decode], sync, 3)
    rows = int(min(max(round(one.pass_median_s() / (decode.pass_median_s() / DECODE_ROWS)), 1), DECODE_ROWS))
    ridge = stack_kernel(f"ridge_{dtype}", layers, rows, device, tdt, False)
    run_interleaved([one, ridge, decode], sync, repeats)
    t1, t_ridge, per_row = one.pass_median_s(), ridge.pass_median_s(), decode.pass_median_s() / DECODE_ROWS
    hidden = t1 + rows * per_row - t_ridge
    return float(min(max(hidden / min(t1, rows * per_row), 0.0), 1.0)), rows


def overhead_kernels(device: Any, dtype: str, model_type: str) -> tuple[Kernel, Kernel]:
    """Decode steps of two tiny models of this family (2 and 10 layers): their difference is per-layer overhead."""
    import torch

    from tokenroof.measure.local.torch_engine import DecoderLM
    from tokenroof.specs.model import model_from_config

    def probe(layers: int) -> Kernel:
        config = {
            "model_type": model_type,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": layers,
            "vocab_size": 256,
        }
        engine = DecoderLM(model_from_config(config, "overhead probe"), torch_dtype(dtype, device), device)
        engine.init_random()
        engine.allocate_cache(1, 64)
        tokens = torch.zeros(1, 1, dtype=torch.long, device=device)
        return Kernel(f"overhead_{layers}_{dtype}", lambda: engine.forward(tokens, 8), 1.0)

    return probe(2), probe(10)


def overheads(shallow: Kernel, deep: Kernel) -> tuple[float, float]:
    """(per step, per layer) seconds from the 2- and 10-layer probes, in the pass where the deep one ran fastest
    (both from one pass: a slow stretch of the machine must not land on one probe only)."""
    quiet = min(range(len(deep.passes)), key=deep.pass_median_s)
    shallow_s, deep_s = shallow.pass_median_s(quiet), deep.pass_median_s(quiet)
    per_layer = max((deep_s - shallow_s) / 8, 0.0)
    return max(shallow_s - 2 * per_layer, 0.0), per_layer
