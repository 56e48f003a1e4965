"""`tokenroof calibrate`: this machine's bandwidth, FLOP/s and framework overhead, as a hardware TOML.

Microbenchmarks (`bench.microbench`), timed round-robin with a device sync and
`perf_counter` in `passes` separate passes; each rate is taken at the lowest of the
passes' median times (interference on a shared machine only adds time, and comes in
stretches of seconds: on this project's 2-core VM bf16 kernels ran 2.2x slower in
about half of 10-second calibrations):

- STREAM-like copy (`b.copy_(a)`, read + write counted) and read (`a.sum()`) over
  arrays far larger than the caches;
- the bandwidth a weight-streaming matrix–vector product achieves (one row through
  a stack of weight matrices larger than the caches), per dtype: batch-1 decode;
- matmul FLOP/s per dtype: a large square GEMM (the peak) and 256 rows through the
  stack (decode at a large batch), prepacked as the engine prepacks;
- decode attention over a KV cache (bytes of K and V read per second);
- the framework's dispatch overhead per step and per layer (decode steps of 2- and
  10-layer tiny models of the same family);
- the overlap of weight streaming and compute at the ridge (`measure_overlap`).

Kernel efficiency depends on shape, most of all on CPUs: with a model, the stacks
use its layer's matrices and heads; without, square matrices. The file written is a
hardware spec like any preset: `memory_bandwidth_bytes_per_s` is the best streaming
bandwidth seen, `peak_flops_per_s` the large-GEMM rate, and `[efficiencies.<dtype>]`
what the decode kernels reached of those, with the overheads and the overlap, so
`--hardware calibrated.toml` needs no tuning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from tokenroof.errors import ParameterError
from tokenroof.measure.local.device import (
    flushing_denormals,
    machine_name,
    require_torch,
    resolve_device,
    torch_dtype,
    total_memory_bytes,
)
from tokenroof.measure.local.microbench import (
    DECODE_ROWS,
    DRIFT_WARN_RATIO,
    Kernel,
    attention_kernel,
    default_shapes,
    gemm_kernel,
    measure_overlap,
    model_shapes,
    overhead_kernels,
    overheads,
    run_interleaved,
    stack_kernel,
    stream_kernels,
    weight_stack,
)
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
    timing: str = ""
    warnings: list[str] = field(default_factory=list)

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
            "[peak_flops_per_s]  # large square GEMM",
            *(f"{d} = {v:.4g}" for d, v in self.gemm_flops_per_s.items()),
            "",
            f"# [efficiencies.<weight dtype>]: what decode kernels ({self.shapes}) reached of the peaks above,",
            "# and the framework's dispatch overheads per step and per layer",
        ]
        for dtype, values in self.efficiencies().items():
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
            f"timing = {_quote(self.timing)}",
            "",
            "[source]",
            "tool = "
            + _quote(f"tokenroof calibrate, torch {self.torch_version}, {self.device}, {self.threads} threads"),
            f"date = {_quote(self.date)}",
        ]
        return "\n".join(lines) + "\n"


def drift_warnings(kernels: Sequence[Kernel]) -> list[str]:
    """A warning naming the kernels whose passes ran at speeds further apart than DRIFT_WARN_RATIO."""
    moved = sorted(((k.pass_spread, k.name) for k in kernels if k.pass_spread > DRIFT_WARN_RATIO), reverse=True)
    if not moved:
        return []
    names = ", ".join(f"{spread - 1:.0%} for {name}" for spread, name in moved[:4])
    return [
        f"the machine's speed changed while calibrating: the slowest pass's median exceeded the quietest's by "
        f"{names}{' …' if len(moved) > 4 else ''}; each figure is from its quietest pass, but a slow stretch that "
        "outlasts every pass is not seen — calibrate again if the figures look low"
    ]


def quietest(calibrations: Sequence[Calibration]) -> Calibration:
    """Calibrations of one machine taken at different times, merged as their passes are: every rate at its
    best, each dtype's overheads and overlap from the calibration whose decode GEMM ran fastest (a slow
    stretch on a shared machine can outlast one calibration's passes; one before and one after a long
    measurement bracket it)."""
    if not calibrations:
        raise ValueError("no calibrations to merge")
    first = calibrations[0]

    def best(field_name: str) -> dict[str, float]:
        tables = [getattr(c, field_name) for c in calibrations]
        return {d: max(t[d] for t in tables if d in t) for d in tables[0]}

    quiet = {d: max(calibrations, key=lambda c: c.decode_gemm_flops_per_s.get(d, 0.0)) for d in first.overhead_s}
    return replace(
        first,
        copy_bandwidth_bytes_per_s=max(c.copy_bandwidth_bytes_per_s for c in calibrations),
        read_bandwidth_bytes_per_s=max(c.read_bandwidth_bytes_per_s for c in calibrations),
        gemv_bandwidth_bytes_per_s=best("gemv_bandwidth_bytes_per_s"),
        gemm_flops_per_s=best("gemm_flops_per_s"),
        decode_gemm_flops_per_s=best("decode_gemm_flops_per_s"),
        attention_bandwidth_bytes_per_s=best("attention_bandwidth_bytes_per_s"),
        overhead_s={d: c.overhead_s[d] for d, c in quiet.items()},
        overlap={d: c.overlap[d] for d, c in quiet.items() if d in c.overlap},
        ridge_rows={d: c.ridge_rows[d] for d, c in quiet.items() if d in c.ridge_rows},
        timing=f"quietest of {len(calibrations)} calibrations ({first.timing})",
        warnings=[],
    )


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@flushing_denormals
def calibrate(
    device_name: str = "auto",
    dtypes: tuple[str, ...] = ("fp32", "bf16"),
    repeats: int = 5,
    threads: int | None = None,
    sizes: dict[str, int] | None = None,
    model: ModelSpec | None = None,
    progress: Callable[[str], None] = lambda _: None,
    passes: int = 3,
) -> Calibration:
    """Run every microbenchmark on one device (`passes` × `repeats` interleaved rounds); `progress` is told
    each step's name."""
    torch = require_torch()
    device = resolve_device(device_name)
    if threads is not None:
        if threads < 1:
            raise ParameterError(f"{{}} must be at least 1, got {threads}", "threads")
        torch.set_num_threads(threads)
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
        for index in range(passes):
            progress(f"timing {len(kernels)} kernels × {repeats} interleaved rounds, pass {index + 1} of {passes}")
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
            timing=f"{passes} passes x {repeats} interleaved rounds; each rate at the lowest pass median",
            warnings=drift_warnings(list(kernels.values())),
        )
        for dtype in dtypes:
            progress(f"{dtype}: overlap of weight streaming and compute at the ridge")
            decode = kernels[f"decode_{dtype}"]
            result.overlap[dtype], result.ridge_rows[dtype] = measure_overlap(
                device, dtype, shapes, sizes["gemv_bytes"] // 4, decode, sync, repeats
            )
    return result
