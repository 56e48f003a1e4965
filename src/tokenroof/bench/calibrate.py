"""`tokenroof calibrate`: this machine's bandwidth, FLOP/s and framework overhead, as a hardware TOML.

Microbenchmarks, each timed with `perf_counter` after a warm-up and a device
sync, repeated, reported as median and best:

- STREAM-like copy (`b.copy_(a)`, read + write) and read (`a.sum()`) over arrays
  far larger than the caches;
- the bandwidth a weight-streaming matrix–vector product achieves (`linear` of one
  row against a stack of weight matrices larger than the caches), per dtype: the
  batch-1 decode kernel;
- matmul FLOP/s per dtype: a large square GEMM (the peak) and a decode-shaped one
  (256 rows against a weight matrix, the largest usual batch);
- the framework's dispatch overhead per decode step and per transformer layer,
  from decode steps of two tiny Llama models that differ only in depth.

The file it writes is a hardware spec like any preset: `memory_bandwidth_bytes_per_s`
is the best streaming bandwidth seen, `peak_flops_per_s` the large-GEMM rate, and
`[efficiencies]` the measured fractions that decode-shaped kernels reach of those
peaks, with the overheads (so `--hardware calibrated.toml` needs no tuning).
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tokenroof.bench.local import require_torch, resolve_device, torch_dtype
from tokenroof.errors import TokenroofError
from tokenroof.specs import ModelSpec

MIB = 2**20
CPU_SIZES = {"stream_bytes": 256 * MIB, "gemv_bytes": 256 * MIB, "kv_bytes": 256 * MIB, "gemm_n": 2048, "gemv_k": 2048}
GPU_SIZES = {
    "stream_bytes": 2048 * MIB,
    "gemv_bytes": 2048 * MIB,
    "kv_bytes": 2048 * MIB,
    "gemm_n": 8192,
    "gemv_k": 8192,
}
DECODE_ROWS = 256


@dataclass(frozen=True)
class Timing:
    """Seconds per call over repeats: median and best."""

    median_s: float
    best_s: float


@dataclass
class Calibration:
    """What `calibrate` measured; `to_toml()` is the hardware spec."""

    name: str
    device: str
    threads: int
    torch_version: str
    memory_bytes: float
    copy_bandwidth_bytes_per_s: float
    read_bandwidth_bytes_per_s: float
    gemv_bandwidth_bytes_per_s: dict[str, float] = field(default_factory=dict)
    gemm_flops_per_s: dict[str, float] = field(default_factory=dict)
    decode_gemm_flops_per_s: dict[str, float] = field(default_factory=dict)
    attention_bandwidth_bytes_per_s: dict[str, float] = field(default_factory=dict)
    overhead_s: dict[str, tuple[float, float]] = field(default_factory=dict)  # dtype → (per step, per layer)
    overlap: dict[str, float] = field(default_factory=dict)  # dtype → fraction hidden at the ridge
    ridge_rows: dict[str, int] = field(default_factory=dict)
    shapes: str = ""
    date: str = ""

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """The best streaming bandwidth any kernel reached (this machine's measured peak)."""
        return max(
            self.copy_bandwidth_bytes_per_s, self.read_bandwidth_bytes_per_s, *self.gemv_bandwidth_bytes_per_s.values()
        )

    def efficiencies(self) -> dict[str, Any]:
        """Per dtype: GEMV bandwidth / peak bandwidth, decode-shaped GEMM / large GEMM; overheads in seconds."""
        peak_bw = self.memory_bandwidth_bytes_per_s
        table: dict[str, Any] = {}
        for dtype, gemv in self.gemv_bandwidth_bytes_per_s.items():
            step, layer = self.overhead_s[dtype]
            table[dtype] = {
                "bandwidth": min(gemv / peak_bw, 1.0),
                "kv_bandwidth": min(self.attention_bandwidth_bytes_per_s[dtype] / peak_bw, 1.0),
                "compute": min(self.decode_gemm_flops_per_s[dtype] / self.gemm_flops_per_s[dtype], 1.0),
                "overhead_s": step,
                "overhead_s_per_layer": layer,
                "overlap": self.overlap.get(dtype, 1.0),
            }
        return table

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "efficiencies": self.efficiencies(),
        }

    def to_toml(self) -> str:
        lines = [
            f"# written by `tokenroof calibrate` on {self.date}: measured, not a datasheet",
            f"name = {_quote(self.name)}",
            'peaks = "dense"  # measured rates of dense kernels',
            f"memory_bytes = {self.memory_bytes:.6g}",
            f"memory_bandwidth_bytes_per_s = {self.memory_bandwidth_bytes_per_s:.4g}  # best streaming kernel below",
            "",
            "[peak_flops_per_s]  # large square GEMM, median of repeats",
            *(f"{d} = {v:.4g}" for d, v in self.gemm_flops_per_s.items()),
            "",
            f"# [efficiencies.<weight dtype>]: what decode kernels ({self.shapes}) reached of the peaks above,",
            "# and the framework's dispatch overheads per step and per layer",
        ]
        for dtype, values in self.efficiencies().items():
            if isinstance(values, dict):
                lines += ["", f"[efficiencies.{dtype}]", *(f"{k} = {v:.4g}" for k, v in values.items())]
        lines += [
            "",
            "[measured]",
            f"copy_bandwidth_bytes_per_s = {self.copy_bandwidth_bytes_per_s:.4g}  # STREAM-like copy, read + write",
            f"read_bandwidth_bytes_per_s = {self.read_bandwidth_bytes_per_s:.4g}  # sum of an array",
            *(f"gemv_bandwidth_bytes_per_s_{d} = {v:.4g}" for d, v in self.gemv_bandwidth_bytes_per_s.items()),
            *(
                f"decode_gemm_flops_per_s_{d} = {v:.4g}  # {DECODE_ROWS} rows"
                for d, v in self.decode_gemm_flops_per_s.items()
            ),
            *(
                f"attention_bandwidth_bytes_per_s_{d} = {v:.4g}"
                for d, v in self.attention_bandwidth_bytes_per_s.items()
            ),
            *(f"ridge_rows_{d} = {v}  # where the overlap was measured" for d, v in self.ridge_rows.items()),
            f"threads = {self.threads}",
            f"shapes = {_quote(self.shapes)}",
            "",
            "[source]",
            "tool = "
            + _quote(f"tokenroof calibrate, torch {self.torch_version}, {self.device}, {self.threads} threads"),
            f"date = {_quote(self.date)}",
        ]
        return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def time_call(fn: Callable[[], Any], sync: Callable[[], None], repeats: int, warmup: int = 2) -> Timing:
    """Warm up, then time `repeats` calls, each followed by a device sync."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return Timing(statistics.median(times), min(times))


def machine_name(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu} ({torch.get_num_threads()} threads)"


def total_memory_bytes(device: Any) -> float:
    import os

    import torch

    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


@dataclass
class Kernel:
    """One microbenchmark: a call and the bytes or FLOPs it moves or does per call."""

    name: str
    call: Callable[[], Any]
    amount: float  # bytes or FLOPs per call
    times_s: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Bytes/s or FLOP/s at the median time."""
        return self.amount / statistics.median(self.times_s)


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
    from tokenroof.bench.torch_engine import Linear

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

    from tokenroof.bench.torch_engine import PREPACK_MIN_ROWS, can_prepack

    if can_prepack(device, tdt) and rows >= PREPACK_MIN_ROWS:
        for layer in layers:
            layer.pack(rows)
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

    from tokenroof.bench.torch_engine import cached_attention

    tdt = torch_dtype(dtype, device)
    per_seq = 2 * shapes.kv_heads * context * shapes.head_dim * tdt.itemsize
    batch = max(nbytes // per_seq, 1)
    k = torch.randn(batch, shapes.kv_heads, context, shapes.head_dim, dtype=tdt, device=device)
    v = torch.randn_like(k)
    q = torch.randn(batch, 1, shapes.group * shapes.kv_heads, shapes.head_dim, dtype=tdt, device=device)
    return Kernel(f"attention_{dtype}", lambda: cached_attention(q, k, v, context - 1), float(batch * per_seq))


def run_interleaved(kernels: list[Kernel], sync: Callable[[], None], rounds: int) -> None:
    """Warm each kernel, then time them round-robin, so a burst of load from elsewhere hits all alike."""
    for kernel in kernels:
        kernel.call()
        kernel.call()
    sync()
    for _ in range(rounds):
        for kernel in kernels:
            start = time.perf_counter()
            kernel.call()
            sync()
            kernel.times_s.append(time.perf_counter() - start)


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
    run_interleaved([one], sync, 3)
    per_row = statistics.median(decode.times_s) / DECODE_ROWS
    t1 = statistics.median(one.times_s)
    rows = int(min(max(round(t1 / per_row), 1), DECODE_ROWS))
    ridge = stack_kernel(f"ridge_{dtype}", layers, rows, device, tdt, False)
    one.times_s.clear()
    run_interleaved([one, ridge], sync, repeats)
    t1, t_ridge = statistics.median(one.times_s), statistics.median(ridge.times_s)
    hidden = t1 + rows * per_row - t_ridge
    return float(min(max(hidden / min(t1, rows * per_row), 0.0), 1.0)), rows


def overhead_kernels(device: Any, dtype: str, model_type: str) -> tuple[Kernel, Kernel]:
    """Decode steps of two tiny models of this family (2 and 10 layers): their difference is per-layer overhead."""
    import torch

    from tokenroof.bench.torch_engine import DecoderLM
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
    """(per step, per layer) seconds from the 2- and 10-layer probes."""
    shallow_s, deep_s = (statistics.median(k.times_s) for k in (shallow, deep))
    per_layer = max((deep_s - shallow_s) / 8, 0.0)
    return max(shallow_s - 2 * per_layer, 0.0), per_layer


def calibrate(
    device_name: str = "auto",
    dtypes: tuple[str, ...] = ("fp32", "bf16"),
    repeats: int = 9,
    threads: int | None = None,
    sizes: dict[str, int] | None = None,
    model: ModelSpec | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Calibration:
    """Run every microbenchmark on one device; `progress` is told each step's name."""
    torch = require_torch()
    device = resolve_device(device_name)
    if threads is not None:
        if threads < 1:
            raise TokenroofError(f"--threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    for dtype in dtypes:
        torch_dtype(dtype, device)  # an unknown or unsupported dtype fails before anything runs
    sizes = sizes or (GPU_SIZES if device.type == "cuda" else CPU_SIZES)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    shapes = model_shapes(model) if model is not None else default_shapes(sizes["gemv_k"])
    with torch.inference_mode():
        progress(f"allocating buffers ({shapes.label})")
        kernels = {k.name: k for k in stream_kernels(device, sizes["stream_bytes"])}
        for dtype in dtypes:
            tdt = torch_dtype(dtype, device)
            kernels[f"gemv_{dtype}"] = stack_kernel(
                f"gemv_{dtype}", weight_stack(device, tdt, shapes, sizes["gemv_bytes"]), 1, device, tdt, False
            )
            decode_layers = weight_stack(device, tdt, shapes, sizes["gemv_bytes"] // 4)
            kernels[f"decode_{dtype}"] = stack_kernel(f"decode_{dtype}", decode_layers, DECODE_ROWS, device, tdt, True)
            kernels[f"gemm_{dtype}"] = gemm_kernel(device, dtype, sizes["gemm_n"])
            kernels[f"attention_{dtype}"] = attention_kernel(device, dtype, shapes, sizes["kv_bytes"])
            shallow, deep = overhead_kernels(device, dtype, shapes.model_type)
            kernels[shallow.name], kernels[deep.name] = shallow, deep
        progress(f"timing {len(kernels)} kernels × {repeats} interleaved rounds")
        run_interleaved(list(kernels.values()), sync, repeats)
        result = Calibration(
            name=f"{machine_name(device)}, calibrated",
            device=str(device),
            threads=torch.get_num_threads(),
            torch_version=torch.__version__,
            memory_bytes=total_memory_bytes(device),
            copy_bandwidth_bytes_per_s=kernels["copy"].rate,
            read_bandwidth_bytes_per_s=kernels["read"].rate,
            shapes=shapes.label,
            gemv_bandwidth_bytes_per_s={d: kernels[f"gemv_{d}"].rate for d in dtypes},
            decode_gemm_flops_per_s={d: kernels[f"decode_{d}"].rate for d in dtypes},
            attention_bandwidth_bytes_per_s={d: kernels[f"attention_{d}"].rate for d in dtypes},
            gemm_flops_per_s={d: max(kernels[f"gemm_{d}"].rate, kernels[f"decode_{d}"].rate) for d in dtypes},
            overhead_s={d: overheads(kernels[f"overhead_2_{d}"], kernels[f"overhead_10_{d}"]) for d in dtypes},
            date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        )
        for dtype in dtypes:
            progress(f"{dtype}: overlap of weight streaming and compute at the ridge")
            decode = kernels[f"decode_{dtype}"]
            result.overlap[dtype], result.ridge_rows[dtype] = measure_overlap(
                device, dtype, shapes, sizes["gemv_bytes"] // 4, decode, sync, repeats
            )
    return result
