"""`tokenroof bench-local`: time decode steps of a Llama-family model on this machine's CPU or GPU.

For each batch: allocate the KV cache, prefill one prompt of `context` tokens
(timed: the TTFT of one request), give every other sequence a copy of that
cache (timing does not depend on values, and prefilling batch × context tokens
would take longer than the whole sweep), then run warm-up decode steps and time
`steps` more: on a CPU each by the wall clock, on a GPU each by CUDA events on the
GPU's clock, queued without a synchronisation between steps. The engine runs each
step in one of three modes (`ENGINE_MODES`): eager, compiled (torch.compile), or
replayed from a CUDA graph (the default on a GPU, as serving engines decode). TPOT
is the median step; the spread is reported beside it. With several round-robin passes
(`rounds`), TPOT is the lowest of the passes' medians: on a shared machine
interference only ever adds time, and whole passes run slow while a neighbour
is busy (the median within a pass already ignores single slow steps). The CSV
is rewritten after every measured point, so an interrupted sweep keeps what it
measured. Devices, dtypes
and the memory check live in `bench.device`.

Torch is an optional extra: nothing here imports it before `require_torch()`.
"""

from __future__ import annotations

import contextlib
import itertools
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.io.csvio import write_rows
from tokenroof.measure.local.device import (
    available_memory_bytes,
    check_fits,
    flushing_denormals,
    machine_name,
    require_torch,
    resolve_device,
    torch_dtype,
)
from tokenroof.measure.local.microbench import DRIFT_WARN_RATIO, pass_spread, quietest_median_s
from tokenroof.measure.local.power import EnergyMeter, energy_meter
from tokenroof.model import roofline as rl
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import HardwareSpec, ModelSpec, Precision

CSV_COLUMNS = ("batch", "throughput_tok_s", "tpot_ms", "context_tokens", "ttft_ms")  # DESIGN.md, read by predict
# how the engine runs a decode step: kernels launched one by one from Python; through torch.compile (fused
# elementwise chains); replayed from a CUDA graph captured per batch (no launches from Python: how vLLM, SGLang and
# TensorRT-LLM decode)
ENGINE_MODES = ("eager", "compile", "graph")
MODE_NOTES = {
    "eager": "eager (each kernel launched from Python: on a GPU the launches, not the kernels, can set the step)",
    "compile": "compile (torch.compile: the elementwise chains fused; the first steps of a batch compile, untimed; "
    "on a CPU its GEMMs run on unpacked weights, eager's on packed ones)",
    "graph": "graph (one CUDA graph per batch, captured at the point's context and replayed: no launches from Python)",
}


def default_mode(device_type: str) -> str:
    """CUDA graphs on a GPU (what serving engines run), eager on a CPU (no graphs there; compile costs minutes)."""
    return "graph" if device_type == "cuda" else "eager"


# -- the sweep -------------------------------------------------------------------------
@dataclass
class LocalConfig:
    model: str
    batches: list[int]
    context: int = 512
    dtype: str = "fp32"
    device: str = "auto"
    warmup: int = 3
    steps: int = 10
    rounds: int = 1  # passes over the batches, round-robin; TPOT from each batch's quietest pass
    threads: int | None = None
    weights: Path | None = None
    seed: int = 0
    out: Path | None = None
    hardware: str | None = None
    memory_fraction: float = 0.9
    prefill_chunk: int = 512
    mode: str | None = None  # ENGINE_MODES; None: default_mode of the device

    def validate(self) -> None:
        if not self.batches or min(self.batches) < 1:
            raise ParameterError(f"{{}} needs positive whole numbers, got {self.batches}", "batch")
        for name in ("context", "steps", "prefill_chunk", "rounds"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{{}} must be at least 1, got {getattr(self, name)}", name)
        if self.warmup < 0:
            raise ParameterError(f"{{}} must be non-negative, got {self.warmup}", "warmup")
        if not 0 < self.memory_fraction <= 1:
            raise ParameterError(f"{{}} must be in (0, 1], got {self.memory_fraction}", "memory_fraction")
        if self.threads is not None and self.threads < 1:
            raise ParameterError(f"{{}} must be at least 1, got {self.threads}", "threads")
        if self.mode is not None and self.mode not in ENGINE_MODES:
            raise ParameterError(f"{{}} {self.mode!r}: expected {', '.join(ENGINE_MODES)}", "mode")
        if self.mode in ("compile", "graph") and self.warmup < 1:
            raise ParameterError(
                f"{{}} {self.mode} compiles or captures each batch on its first step: give at least one warm-up step",
                "warmup",
            )

    def resolved_mode(self, device_type: str) -> str:
        """The mode to run on this device; graph mode off CUDA is refused in one line."""
        mode = self.mode or default_mode(device_type)
        if mode == "graph" and device_type != "cuda":
            raise ParameterError(
                f"{{}} graph replays CUDA graphs, which need a CUDA device (this run is on {device_type}): "
                "use eager or compile",
                "mode",
            )
        return mode


@dataclass
class LocalPoint:
    """One batch: decode step times (median and spread), one prompt's prefill, and the roof it reached."""

    batch: int
    context_tokens: float
    tpot_ms: float
    tpot_ms_p10: float
    tpot_ms_p90: float
    tpot_ms_min: float
    ttft_ms: float
    steps: int
    achieved_bytes_per_s: float
    achieved_flops_per_s: float
    predicted_tpot_ms: float | None = None
    predicted_bound: str | None = None
    bandwidth_fraction: float | None = None  # achieved bytes/s over the hardware's (calibrated) bandwidth
    flops_fraction: float | None = None
    power_watts: float | None = None  # the board's mean power over the timed steps (NVML; None: no meter)
    energy_j_per_token: float | None = None  # joules per output token over the timed steps (NVML; None: no meter)
    sm_clock_mhz_start: float | None = None  # the GPU's SM clock at the first and last timed step (NVML; last pass)
    sm_clock_mhz_end: float | None = None

    @property
    def throughput_tok_s(self) -> float:
        return self.batch * 1e3 / self.tpot_ms

    def to_dict(self) -> dict[str, Any]:
        """The contract's keys: the spread of the timed steps (p10–p90) as `tpot_ms_low`/`tpot_ms_high`."""
        row = asdict(self)
        row["tpot_ms_low"], row["tpot_ms_high"] = row.pop("tpot_ms_p10"), row.pop("tpot_ms_p90")
        return {**row, "throughput_tok_s": self.throughput_tok_s}


@dataclass
class LocalResult:
    model: ModelSpec
    precision: Precision
    device: str
    device_name: str
    threads: int
    torch_version: str
    config: LocalConfig
    points: list[LocalPoint] = field(default_factory=list)
    hardware: HardwareSpec | None = None
    warnings: list[str] = field(default_factory=list)
    power_source: str | None = None  # how the points' power and energy were had (None: not measured)
    mode: str = "eager"  # ENGINE_MODES: how the engine ran each decode step

    def provenance(self) -> list[str]:
        c = self.config
        return [
            f"tokenroof bench-local, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            f"model {self.model.name} ({self.model.total_params / 1e6:.1f}M parameters, "
            f"{'checkpoint ' + str(c.weights) if c.weights else 'random weights'}), "
            f"dtype {self.precision.weight_dtype}",
            f"device {self.device_name} ({self.device}), {self.threads} threads, torch {self.torch_version}, "
            f"{platform.python_implementation()} {platform.python_version()}",
            f"engine mode {MODE_NOTES[self.mode]}",
            f"tpot_ms: median of {c.steps} timed decode steps after {c.warmup} warm-up steps"
            f"{f', the lowest of {c.rounds} round-robin passes over the batches' if c.rounds > 1 else ''}"
            f"{', each timed by CUDA events on the GPU' if self.device.startswith('cuda') else ''}; "
            f"ttft_ms: prefill of one {c.context}-token prompt (eager in every mode); context_tokens: mean KV length "
            "while timed",
            "batch_kind=static tpot_kind=step",
        ]

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "model": self.model.to_dict(),
            "precision": self.precision.to_dict(),
            "device": self.device,
            "device_name": self.device_name,
            "threads": self.threads,
            "torch_version": self.torch_version,
            "mode": self.mode,
            "context": c.context,
            "warmup_steps": c.warmup,
            "timed_steps": c.steps,
            "hardware": None if self.hardware is None else self.hardware.to_dict(),
            "interval_level": 0.8,
            "interval": "_low/_high: p10 and p90 of the timed decode steps",
            "power_source": self.power_source,
            "points": [p.to_dict() for p in self.points],
            "warnings": self.warnings,
        }


def compare_to_roof(
    point: LocalPoint, spec: ModelSpec, precision: Precision, hardware: HardwareSpec | None, sm: StepModel | None
) -> None:
    """Achieved bytes/s and FLOP/s of the step; with a hardware spec (and its step model `sm`), the
    first-principles TPOT and its bound."""
    costs = rl.decode_costs(spec, precision, point.batch, point.context_tokens)
    step_s = point.tpot_ms / 1e3
    point.achieved_bytes_per_s = float(costs.bytes_memory) / step_s
    point.achieved_flops_per_s = float(costs.flops) / step_s
    if hardware is None or sm is None:
        return
    point.predicted_tpot_ms = float(sm.step_time_s(point.batch, point.context_tokens)) * 1e3
    point.predicted_bound = str(sm.bound(point.batch, point.context_tokens))
    point.bandwidth_fraction = point.achieved_bytes_per_s / hardware.memory_bandwidth_bytes_per_s
    point.flops_fraction = point.achieved_flops_per_s / hardware.peak_for(precision.compute_dtype)


def spread_ms(times_s: Sequence[float]) -> tuple[float, float, float]:
    """(p10, p90, min) of step times, in ms."""
    ms = np.asarray(times_s) * 1e3
    return float(np.percentile(ms, 10)), float(np.percentile(ms, 90)), float(ms.min())


def build_engine(config: LocalConfig, spec: ModelSpec, device: Any, dtype: Any) -> Any:
    from tokenroof.measure.local.torch_engine import DecoderLM, load_checkpoint

    engine = DecoderLM(spec, dtype, device)
    if config.weights is not None:
        load_checkpoint(engine, config.weights)
    else:
        engine.init_random(config.seed)
    return engine


def time_batch(
    engine: Any,
    config: LocalConfig,
    batch: int,
    sync: Callable[[], None],
    meter: EnergyMeter | None = None,
    mode: str = "eager",
) -> tuple[float, list[float], float | None, tuple[float | None, float | None]]:
    """Prefill one prompt (timed), copy its cache to the batch, warm up, time `steps` decode steps in `mode`:
    (TTFT, steps) s, the joules the board drew over the timed steps (None: no meter) and its SM clock (MHz) as
    the timing began and as it ended (None: no meter, or no clock reading). On a GPU each step is
    timed by CUDA events on the GPU's own clock, the steps queued without a synchronisation between them (as a
    server queues them); on a CPU by the wall clock."""
    torch = require_torch()
    ctx, device = config.context, engine.device
    gen = torch.Generator().manual_seed(config.seed + batch)
    engine.allocate_cache(batch, ctx + config.warmup + config.steps)
    engine.prepack(batch if mode == "eager" else 0)  # CPU weight packing is eager's: compile traces plain products
    prompt = torch.randint(0, engine.spec.vocab_size, (1, ctx), generator=gen).to(device)
    sync()
    start = time.perf_counter()
    logits = engine.prefill(prompt, config.prefill_chunk)
    sync()
    ttft_s = time.perf_counter() - start
    engine.copy_sequence(0, slice(1, batch))
    run = decode_steps(engine, mode, logits.argmax(-1, keepdim=True).expand(batch, 1).contiguous(), ctx)
    cuda = device.type == "cuda"
    times: list[float] = []
    events: list[tuple[Any, Any]] = []
    drawn_j = None
    clock_start = None
    for step in range(config.warmup + config.steps):
        if step == config.warmup:
            sync()
            if meter is not None:
                drawn_j = -meter.read_j()
                clock_start = meter.sm_clock_mhz()
        if step < config.warmup:
            run(step)
        elif cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            run(step)
            end.record()
            events.append((begin, end))
        else:
            start = time.perf_counter()
            run(step)
            times.append(time.perf_counter() - start)
    if events:  # the host queued every step: wait for the last one to begin, then read the clock while it runs
        events[-1][0].synchronize()
    clock_end = None if meter is None else meter.sm_clock_mhz()
    sync()
    if meter is not None and drawn_j is not None:
        drawn_j += meter.read_j()
    times += [begin.elapsed_time(end) / 1e3 for begin, end in events]  # ms on the GPU's clock
    engine.cache = []  # free the KV cache before the next batch allocates its own
    return ttft_s, times, drawn_j, (clock_start, clock_end)


def on_device(torch: Any, device: Any) -> Any:
    """The device a GPU's timing runs on as the current one (`--device cuda:1`): CUDA events, side streams and graph
    captures use the current device, not the engine's; on a CPU, nothing."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def decode_steps(engine: Any, mode: str, tokens: Any, ctx: int) -> Callable[[int], None]:
    """One decode step of the batch as `mode` runs it, called with the step's index (its position past `ctx`); each
    step decodes the token the one before chose (argmax). In graph mode every replay is a step at position `ctx`."""
    if mode == "graph":
        from tokenroof.measure.local.torch_engine import CapturedStep

        captured = CapturedStep(engine, tokens, ctx)
        return lambda step: captured.replay()
    forward = engine.compiled() if mode == "compile" else engine.forward
    state = [tokens]

    def run(step: int) -> None:
        state[0] = forward(state[0], ctx + step).argmax(-1, keepdim=True)

    return run


def mean_position(config: LocalConfig, mode: str) -> float:
    """The KV length the timed steps read, on average (the position of the step's token): each eager or compiled
    step one further, every graph replay at the context."""
    return float(config.context) if mode == "graph" else config.context + config.warmup + (config.steps - 1) / 2


def make_point(
    config: LocalConfig,
    batch: int,
    ttfts_s: Sequence[float],
    rounds_s: Sequence[Sequence[float]],
    drawn_j: Sequence[float] = (),
    mode: str = "eager",
) -> LocalPoint:
    """TPOT: the lowest per-pass median step; spread over every timed step of this batch (all passes); median TTFT;
    energy: every pass's joules over every pass's tokens and time (`drawn_j`, one per pass; none: no meter)."""
    p10, p90, fastest = spread_ms([t for steps in rounds_s for t in steps])
    seconds = sum(sum(steps) for steps in rounds_s)
    tokens = batch * sum(len(steps) for steps in rounds_s)
    joules = sum(drawn_j) if len(drawn_j) == len(rounds_s) and drawn_j else None
    return LocalPoint(
        batch=batch,
        context_tokens=mean_position(config, mode),
        tpot_ms=quietest_median_s(rounds_s) * 1e3,
        tpot_ms_p10=p10,
        tpot_ms_p90=p90,
        tpot_ms_min=fastest,
        ttft_ms=statistics.median(ttfts_s) * 1e3,
        steps=sum(len(steps) for steps in rounds_s),
        achieved_bytes_per_s=0.0,
        achieved_flops_per_s=0.0,
        power_watts=None if joules is None or seconds <= 0 else joules / seconds,
        energy_j_per_token=None if joules is None or tokens <= 0 else joules / tokens,
    )


def write_csv(result: LocalResult, path: Path) -> None:
    """Rewrite the CSV with every point so far, in batch order (replaced in one step: an interruption never
    truncates it)."""
    points = sorted(result.points, key=lambda p: p.batch)
    rows = [(p.batch, p.throughput_tok_s, p.tpot_ms, p.context_tokens, p.ttft_ms) for p in points]
    write_rows(path, result.provenance(), CSV_COLUMNS, rows)


@flushing_denormals
def run_bench_local(
    config: LocalConfig,
    spec: ModelSpec,
    hardware: HardwareSpec | None = None,
    on_point: Callable[[LocalPoint], None] = lambda _: None,
    on_start: Callable[[LocalResult], None] = lambda _: None,
) -> LocalResult:
    """Measure every batch in order; the CSV (if `config.out`) gains each row as it is measured."""
    config.validate()
    torch = require_torch()
    from tokenroof.measure.local.torch_engine import check_supported

    check_supported(spec)
    device = resolve_device(config.device)
    mode = config.resolved_mode(device.type)
    dtype = torch_dtype(config.dtype, device)
    precision = Precision.create(config.dtype)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    max_len = config.context + config.warmup + config.steps
    limit = spec.max_position_embeddings
    warnings = []
    if limit and max_len > limit:
        warnings.append(f"context {max_len} exceeds {spec.name}'s {limit} positions (timing is still meaningful)")
    check_fits(
        spec,
        precision,
        config.batches,
        max_len,
        config.prefill_chunk,
        available_memory_bytes(device),
        config.memory_fraction,
    )
    result = LocalResult(
        spec,
        precision,
        str(device),
        machine_name(device),
        torch.get_num_threads(),
        torch.__version__,
        config,
        hardware=hardware,
        warnings=warnings,
        mode=mode,
    )

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    engine = build_engine(config, spec, device, dtype)
    engine.allocate_cache(1, 32)
    engine.prefill(torch.zeros(1, 16, dtype=torch.long, device=device))  # first-call allocations, kept out of TTFT
    on_start(result)
    if config.out is not None:
        config.out.parent.mkdir(parents=True, exist_ok=True)
        write_csv(result, config.out)
    roof = None if hardware is None else rl.step_model_from_specs(spec, hardware, precision)
    meter, no_meter = energy_meter(device)
    result.power_source = None if meter is None else meter.source
    if no_meter is not None:
        result.warnings.append(no_meter)
    samples: dict[int, tuple[list[float], list[list[float]]]] = {b: ([], []) for b in config.batches}
    drawn: dict[int, list[float]] = {b: [] for b in config.batches}
    for _ in range(config.rounds):  # round-robin over the batches: drift in machine speed hits every point alike
        for batch in config.batches:
            try:
                with on_device(torch, device):
                    ttft_s, times, drawn_j, clocks = time_batch(engine, config, batch, sync, meter, mode)
            except torch.OutOfMemoryError:
                engine.cache = []
                raise TokenroofError(
                    f"batch {batch} ran out of device memory although the estimate said it fits; "
                    f"points measured so far are saved{' in ' + str(config.out) if config.out else ''}"
                ) from None
            samples[batch][0].append(ttft_s)
            samples[batch][1].append(times)
            if drawn_j is not None:
                drawn[batch].append(drawn_j)
            point = make_point(config, batch, *samples[batch], drawn[batch], mode)
            point.sm_clock_mhz_start, point.sm_clock_mhz_end = clocks
            compare_to_roof(point, spec, precision, hardware, roof)
            result.points = [p for p in result.points if p.batch != batch] + [point]
            if config.out is not None:
                write_csv(result, config.out)
            on_point(point)
    result.points.sort(key=lambda p: p.batch)
    result.warnings += drift_warning({b: rounds for b, (_, rounds) in samples.items()})
    result.warnings += implausible(result.points, hardware)
    result.warnings += throttled(result.points)
    return result


THROTTLE_RATIO = 0.9  # an SM clock that ends a point below this share of where it began


def throttled(points: list[LocalPoint]) -> list[str]:
    """Say where the GPU's SM clock fell during a point's timed steps (power or thermal throttling): those steps
    were timed on a slower board than the ones before."""
    fell = [
        p
        for p in points
        if p.sm_clock_mhz_start
        and p.sm_clock_mhz_end is not None
        and p.sm_clock_mhz_end < THROTTLE_RATIO * p.sm_clock_mhz_start
    ]
    if not fell:
        return []
    worst = min(fell, key=lambda p: (p.sm_clock_mhz_end or 0.0) / (p.sm_clock_mhz_start or 1.0))
    return [
        f"the GPU's SM clock fell during {len(fell)} of {len(points)} points (at batch {worst.batch} from "
        f"{worst.sm_clock_mhz_start:,.0f} to {worst.sm_clock_mhz_end:,.0f} MHz): the board throttled (power or heat) "
        "while those steps were timed; check nvidia-smi -q -d PERFORMANCE, or lock the clocks"
    ]


def implausible(points: list[LocalPoint], hardware: HardwareSpec | None) -> list[str]:
    """What a measured curve says that the machine cannot: more bytes per second than the hardware file's peak (the
    file is not this machine, or is out of date: recalibrate), and throughput that falls as the batch grows (the
    engine is not batching: memory pressure, or Python launches dominate)."""
    warnings = []
    over = [p for p in points if p.bandwidth_fraction is not None and p.bandwidth_fraction > 1.0]
    if over and hardware is not None:
        worst = max(over, key=lambda p: p.bandwidth_fraction or 0.0)
        warnings.append(
            f"batch {worst.batch} moved {worst.bandwidth_fraction:.0%} of {hardware.key or hardware.name}'s peak "
            f"bandwidth ({len(over)} of {len(points)} batches above 100%): the hardware file is not this machine's, "
            "or the bytes counted are not all read from memory (caches): recalibrate (tokenroof calibrate --out)"
        )
    falls = [(a, b) for a, b in itertools.pairwise(points) if b.throughput_tok_s < 0.97 * a.throughput_tok_s]
    if falls:
        a, b = falls[0]
        warnings.append(
            f"throughput falls from {a.throughput_tok_s:,.4g} tok/s at batch {a.batch} to {b.throughput_tok_s:,.4g} at "
            f"batch {b.batch}: a larger batch should never decode fewer tokens per second (memory pressure, or "
            "per-sequence work outside the batched kernels)"
        )
    return warnings


def drift_warning(rounds_by_batch: dict[int, list[list[float]]]) -> list[str]:
    """Say so when a batch's passes ran at speeds further apart than DRIFT_WARN_RATIO (the machine drifted)."""
    spreads = {b: pass_spread(rounds) for b, rounds in rounds_by_batch.items()}
    moved = [b for b, spread in spreads.items() if spread > DRIFT_WARN_RATIO]
    if not moved:
        return []
    worst = max(moved, key=spreads.__getitem__)
    return [
        f"the machine's speed changed between passes at {len(moved)} of {len(spreads)} batches (at batch {worst} "
        f"the slowest pass's median was {spreads[worst] - 1:.0%} above the quietest's); TPOT is each batch's "
        "quietest pass, since interference only adds time"
    ]
