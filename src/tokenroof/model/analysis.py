"""`roofline`: the first-principles answer for one model × hardware × precision × context."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model import roofline as rl
from tokenroof.model.cost import Price, busy_share, compute_share, power_model, price_of
from tokenroof.model.prefix import VLLM_BLOCK_SIZE, cacheable_tokens, reserved_life_tokens
from tokenroof.model.speculative import Speculation, SpeculativeConfig, speculation_from_specs
from tokenroof.model.stepmodel import StepModel, mean_context_tokens
from tokenroof.specs import HardwareSpec, ModelSpec, Precision, load_model
from tokenroof.specs.engines import EngineProfile, load_engine
from tokenroof.units import MS_PER_S

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
BATCHINGS = ("online", "static")


@dataclass(frozen=True)
class DecodeWorkload:
    """The requests a roofline is read under (`roofline --input-len --output-len --batching`): `online`, a server
    continuously batching at each running batch (`vllm bench serve`, GuideLLM), or `static`, a batch prefilled
    together and decoded to the end (`vllm bench throughput`-style offline runs, Argonne's and FasterTransformer's
    tables). `chunked`: arriving prompts share the decode steps (vLLM V1, SGLang, TensorRT-LLM), else they are
    prefilled in steps of their own (vLLM V0, TGI): the engine profile's `prefill`."""

    input_len: float
    output_len: float
    static: bool = False
    chunked: bool = True
    budget: int | None = None  # chunked: the prompt tokens a step may carry beside its decodes (None: whole prompts)

    def __post_init__(self) -> None:
        for name, value in (("input_len", self.input_len), ("output_len", self.output_len)):
            if not (np.isfinite(value) and value >= 1):
                raise ParameterError(f"{{}} must be a finite number of tokens ≥ 1, got {value:g}", name)

    @property
    def mean_context(self) -> float:
        return mean_context_tokens(self.input_len, self.output_len)

    @property
    def fullest_batch(self) -> float | None:
        """The largest running batch an online workload's prompt budget keeps full (None: no budget binds): the room
        beside b decode tokens must prefill the b · input/output prompt tokens its finishes bring each step, so
        b ≤ budget / (1 + input/output)."""
        if self.budget is None or self.static or not self.chunked:
            return None
        return self.budget / (1 + self.input_len / self.output_len)

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_len": self.input_len,
            "output_len": self.output_len,
            "batching": "static" if self.static else "online",
            "prefill": "chunked" if self.chunked else "separate",
            "max_num_batched_tokens": self.budget if self.chunked else None,
            "mean_context_tokens": self.mean_context,
        }


def online_step_s(
    sm: StepModel,
    batch: float,
    input_len: float,
    output_len: float,
    chunked: bool,
    context: float | None = None,
    budget: int | None = None,
) -> float:
    """The mean step (s) of a server continuously batching `batch` sequences: each sequence brings one prompt per
    `output_len` steps, so batch/output_len prompts arrive per step, prefilled in the decode steps (chunked) or, one
    step every output_len/batch, in a prefill step of their own (all arrivals of a step together when they are
    more than one). Contexts are spread evenly over a request's life: the mean context each (`context`: the one the
    KV terms see, a sliding window's).

    In the decode steps a prompt runs whole, or in chunks of what the step's `budget` leaves beside the decodes
    (None: whole), in the steps it falls in, not spread over every step: where fewer steps than all carry one, the
    mean step is those steps' share of a step with a chunk and the rest's of one without. Spread thin, a prompt's
    tokens hide under the weight stream (max(weights, tokens·compute) is convex: Jensen), which read the mean step
    20–30% under simulate's at batch 16–64 of 1,000-token prompts and 300-token outputs; as it runs, 14.3 ms at 64
    on an H100's llama-3.1-8b where simulate reads 14.2. Past where every step carries prompt tokens, the mean load."""
    total_ctx = batch * (mean_context_tokens(input_len, output_len) if context is None else context)
    arriving = batch / output_len
    if chunked:
        per_step = arriving * input_len  # prompt tokens a step carries on average
        chunk = input_len if budget is None else float(min(input_len, max(budget - batch, 1)))
        share = per_step / chunk  # the steps that carry one
        if share >= 1.0:
            return sm.step_s(batch, total_ctx, per_step, arriving * input_len**2)
        # a chunk's attention over the prompt before it: a prompt's Σ chunk² is input_len² however it is cut
        lumpy = sm.step_s(batch, total_ctx, chunk, input_len * chunk)
        return share * lumpy + (1.0 - share) * sm.step_s(batch, total_ctx)
    together = max(arriving, 1.0)
    prefill = sm.step_s(0.0, 0.0, together * input_len, together * input_len**2)
    return sm.step_s(batch, total_ctx) + min(arriving, 1.0) * prefill


def served_tpot_s(
    sm: StepModel,
    batches: Any,
    workload: DecodeWorkload,
    cap: int,
    tpot_kind: str = "tpot",
    kv_context: float | None = None,
) -> np.ndarray:
    """TPOT (s) at each batch, counted the way a benchmark of `workload` counts it (tpot_kind as in
    io.table.TPOT_KINDS):

    - online (tpot, itl, e2e): the mean step with the arriving prompts in it (`online_step_s`);
    - a static batch, or any decode-step timing (tpot_kind step): the decode step at the mean context, at most
      `cap` sequences at once (a larger batch runs in waves of `cap`);
    - a static batch timed end to end (tpot_kind e2e): the batch's prefill plus output_len − 1 decode steps, per
      output token, times the number of waves.

    `kv_context`: the context the KV terms see (a sliding window's; default the mean context)."""
    b = np.asarray(batches, dtype=float)
    i, o = workload.input_len, workload.output_len
    if not workload.static and tpot_kind != "step":
        steps = [online_step_s(sm, x, i, o, workload.chunked, kv_context, workload.budget) for x in b.ravel()]
        return np.array(steps).reshape(b.shape)
    running = np.minimum(b, max(cap, 1))
    step = sm.step_time_s(running, workload.mean_context if kv_context is None else kv_context)
    if tpot_kind != "e2e":
        return step
    prefill = np.array([sm.step_s(0.0, 0.0, x * i, x * i * i) for x in running.ravel()]).reshape(b.shape)
    return (prefill + (o - 1) * step) / o * b / running


@dataclass(frozen=True)
class RooflineResult:
    """Summary batches and per-point breakdown; `to_dict` is the `roofline --json` contract."""

    model: ModelSpec
    hardware: HardwareSpec
    precision: Precision
    tp: int
    context_tokens: float
    efficiencies: rl.Efficiencies
    memory_utilization: float
    step_model: StepModel
    batches: np.ndarray
    prompt_tokens: float | None = None
    warnings: list[str] = field(default_factory=list)
    engine: EngineProfile = field(default_factory=load_engine)  # whose efficiencies, and whose error spread
    memory_of_free: bool = False  # memory_utilization is of what the weights leave (TensorRT-LLM's, LMDeploy's)
    workload: DecodeWorkload | None = None  # None: the bare decode step at context_tokens
    speculation: Speculation | None = None  # speculative decoding: its TPOT, throughput and speed-up beside each point
    price: Price | None = None  # what one accelerator costs an hour: $ per million tokens beside each point
    prefix_tokens: int = 0  # the prompt's first tokens a prefix cache holds: TTFT computes only the rest

    @property
    def kv_context_tokens(self) -> float:
        """The context the step model's linear KV and attention terms see: sliding-window layers hold only their
        window (ModelSpec.effective_context); the context itself for a model without windows."""
        return float(self.model.effective_context(self.context_tokens))

    @property
    def critical_batch(self) -> float | None:
        return self.step_model.critical_batch(self.kv_context_tokens)

    @property
    def critical_batch_reason(self) -> str | None:
        if self.critical_batch is not None:
            return None
        return self.step_model.no_critical_batch_reason(self.kv_context_tokens)

    @property
    def reserved_bytes(self) -> float:
        """What the engine's server holds per GPU beside weights and KV cache (0 for a profile with no
        `[server.reserve]`)."""
        return rl.server_reserved_bytes(self.model, self.hardware, self.precision, self.tp, self.engine.reserve)

    @property
    def max_batch_under_vllm(self) -> int | None:
        """For a profile with no server of its own (whose memory is sized as vLLM's 90%, without a server's
        reservations): the largest batch once vLLM V1 reserves what it does (`--engine vllm-v1`); None otherwise."""
        if self.engine.server is not None:
            return None
        from tokenroof.specs.engines import load_engine

        reserve = load_engine("vllm-v1").reserve
        return self.cap_beside(rl.server_reserved_bytes(self.model, self.hardware, self.precision, self.tp, reserve))

    @property
    def max_batch_by_memory(self) -> int:
        """Sequences whose KV cache fits beside the weights and what the server reserves (`cap_beside`)."""
        return self.cap_beside(self.reserved_bytes)

    def cap_beside(self, reserved: float) -> int:
        """Sequences whose KV cache fits beside the weights and `reserved` bytes per GPU; with a workload whose
        prompts share a cached prefix, that prefix held once: b = (pool − P) / (context − P) for P shared tokens of
        each sequence's context."""
        whole = self.held_at(self.context_tokens, reserved)
        shared = cacheable_tokens(round(self.prompt_tokens or 0), self.prefix_tokens, VLLM_BLOCK_SIZE)
        if not shared or self.workload is None or shared >= self.context_tokens:
            return whole
        pool = self.held_at(1.0, reserved)
        return max(whole, math.floor((pool - shared) / (self.context_tokens - shared)))

    def held_at(self, context: float, reserved: float) -> int:
        """Sequences of `context` tokens the memory holds beside the weights and `reserved`, its fraction read as
        the engine reads it (of the whole memory, or of what the weights leave: Physics.kv_pool_tokens' pool)."""
        return rl.max_batch_by_memory(
            self.model,
            self.hardware,
            self.precision,
            context,
            self.tp,
            self.memory_utilization,
            reserved,
            self.memory_of_free,
        )

    def points(self) -> list[dict[str, Any]]:
        sm, b, ctx = self.step_model, self.batches, self.kv_context_tokens
        limit = self.max_batch_by_memory
        decode = sm.step_time_s(b, ctx)
        step, e2e, running = decode, None, b
        if self.workload is not None:  # TPOT as a benchmark of the workload counts it (served_tpot_s)
            step = served_tpot_s(sm, b, self.workload, limit, "tpot", ctx)
            if self.workload.static:  # in waves of what fits
                e2e = served_tpot_s(sm, b, self.workload, limit, "e2e", ctx)
                running = np.minimum(b, max(limit, 1))
        parts = sm.components_s(b, ctx)
        costs = rl.decode_costs(self.model, self.precision, b, self.context_tokens, self.tp)  # applies windows
        bound = sm.bound(b, ctx)
        gpu = sm.steps_gpu_s(b, b * ctx, np.zeros_like(b), np.zeros_like(b))  # the GPU's work, under any launches
        lows, highs = self.engine.eager_interval_factors(decode, sm.t_fixed_s, gpu, sm.t_host_s)
        rows = []
        for i, batch in enumerate(b):
            low, high = float(lows[i]), float(highs[i])
            rows.append(
                {
                    "batch": float(batch),
                    "tpot_ms": float(step[i] * MS_PER_S),
                    "tpot_ms_low": float(step[i] * low * MS_PER_S),
                    "tpot_ms_high": float(step[i] * high * MS_PER_S),
                    "throughput_tok_s": float(running[i] / step[i]),
                    "throughput_tok_s_low": float(running[i] / (step[i] * high)),
                    "throughput_tok_s_high": float(running[i] / (step[i] * low)),
                    "bound": str(bound[i]),
                    "fits_in_memory": bool(batch <= limit),
                    "decode_step_ms": float(decode[i] * MS_PER_S),
                    "e2e_ms_per_token": None if e2e is None else float(e2e[i] * MS_PER_S),
                    "time_overhead_ms": float(parts["overhead"][i] * MS_PER_S),
                    "time_weights_ms": float(parts["weights"][i] * MS_PER_S),
                    "time_compute_ms": float(parts["compute"][i] * MS_PER_S),
                    "time_kv_ms": float(parts["kv"][i] * MS_PER_S),
                    "time_interconnect_ms": float(parts["interconnect"][i] * MS_PER_S),
                    "time_host_ms": float(parts["host"][i] * MS_PER_S),
                    "flops_matmul": float(costs.flops_matmul[i]),
                    "flops_attention": float(costs.flops_attention[i]),
                    "bytes_weights": float(costs.bytes_weights[i]),
                    "bytes_kv_read": float(costs.bytes_kv_read[i]),
                    "bytes_kv_write": float(costs.bytes_kv_write[i]),
                    "bytes_activations": float(costs.bytes_activations[i]),
                    "bytes_allreduce": float(costs.bytes_allreduce[i]),
                    "arithmetic_intensity_flops_per_byte": float(costs.arithmetic_intensity_flops_per_byte[i]),
                    **self.speculative_point(float(batch)),
                    **self.bill(float(running[i]), float(decode[i]), float(step[i])),
                }
            )
        return rows

    def bill(self, running: float, decode_s: float, step_s: float) -> dict[str, Any]:
        """What a point costs: dollars a million output (and, with a workload, prompt) tokens at the price, the
        board's power and the energy per output token (TDP × utilization, see cost.py); None where unknown.

        Bare decode: a `decode_s` step emits `running` tokens, all of its time theirs. Online: a mean step of
        `step_s` emits `running` tokens and prefills running/output_len prompts, whose share is what they add to
        the decode step. Static: a wave of `running` sequences is prefilled together, then decodes output_len − 1
        steps; the prefill's share goes to the prompts."""
        w, gpus = self.workload, float(self.tp)
        wave_s, emitted, prompts, share = decode_s, running, 0.0, 0.0
        if w is not None and w.static:
            prefill = self.step_model.step_s(0.0, 0.0, running * w.input_len, running * w.input_len**2)
            wave_s = prefill + (w.output_len - 1) * decode_s
            emitted, prompts, share = running * w.output_len, running * w.input_len, prefill / wave_s
        elif w is not None:
            wave_s, prompts = step_s, running / w.output_len * w.input_len
            share = max(1.0 - decode_s / step_s, 0.0)
        out: dict[str, Any] = {"usd_per_million_output_tokens": None, "usd_per_million_input_tokens": None}
        if self.price is not None:
            out.update(self.price.split(gpus, wave_s, share, emitted, prompts))
        power = power_model(self.hardware)
        watts = None
        if power is not None:  # the decode step's busy and compute shares, prompts prefilled beside it included
            sm, ctx = self.step_model, self.kv_context_tokens
            prompt = 0.0 if w is None or w.static else prompts
            square = 0.0 if w is None or w.static else prompts * w.input_len
            compute = compute_share(
                sm, running, running * ctx, step_s if w and not w.static else decode_s, prompt, square
            )
            watts = power.watts(busy_share(sm, decode_s, running, running * ctx), compute) * gpus
        out["power_watts"] = watts
        out["energy_j_per_output_token"] = None if watts is None else watts * wave_s / emitted
        return out

    def speculative_point(self, batch: float) -> dict[str, Any]:
        """Speculative decoding at this running batch, on the decode step at the context: TPOT (the step over the
        tokens a step emits), throughput and speed-up over plain decode; nothing without speculation."""
        spec = self.speculation
        if spec is None:
            return {}
        tpot = spec.tpot_s(self.step_model, batch, self.kv_context_tokens)
        return {
            "speculative_tpot_ms": tpot * MS_PER_S,
            "speculative_throughput_tok_s": batch / tpot,
            "speculative_speedup": spec.speedup(self.step_model, batch, self.kv_context_tokens),
        }

    def speculation_dict(self) -> dict[str, Any] | None:
        spec = self.speculation
        if spec is None:
            return None
        ctx = self.kv_context_tokens
        one = spec.step_s(self.step_model, 1.0, ctx)
        draft_share = spec.draft_s(1.0, ctx) / one
        return {
            **spec.to_dict(),
            "break_even_batch": spec.break_even_batch(self.step_model, ctx),
            "draft_share_at_batch_1": draft_share,
        }

    def to_dict(self) -> dict[str, Any]:
        sm, ctx = self.step_model, self.kv_context_tokens
        power = power_model(self.hardware)
        ttft = uncached = cached = None
        if self.prompt_tokens:
            args = (self.model, self.hardware, self.precision, self.prompt_tokens, self.tp, self.efficiencies)
            uncached = float(rl.prefill_time_s(*args)) * MS_PER_S
            cached = cacheable_tokens(round(self.prompt_tokens), self.prefix_tokens, VLLM_BLOCK_SIZE)
            ttft = float(rl.prefill_time_s(*args, cached_tokens=cached)) * MS_PER_S if cached else uncached
        return {
            "model": self.model.to_dict(),
            "hardware": self.hardware.to_dict(),
            "precision": self.precision.to_dict(),
            "tp": self.tp,
            "context_tokens": self.context_tokens,
            "kv_context_tokens": ctx,
            "engine": self.engine.to_dict(),
            "efficiencies": self.efficiencies.to_dict(),
            "memory_utilization": self.memory_utilization,
            "memory_fraction_of": "free" if self.memory_of_free else "whole",
            "critical_batch": sm.critical_batch(ctx),
            "critical_batch_reason": self.critical_batch_reason,
            "critical_batch_weights_only": sm.critical_batch_weights_only(),
            "knee_batch": sm.knee_batch(ctx),
            "ridge_flops_per_byte": self.hardware.ridge_flops_per_byte(self.precision.compute_dtype),
            "max_batch_by_memory": self.max_batch_by_memory,
            "reserved_bytes_per_gpu": self.reserved_bytes,
            "max_batch_by_memory_vllm_v1": self.max_batch_under_vllm,
            "throughput_asymptote_tok_s": sm.throughput_asymptote_tok_s(ctx),
            "kv_bytes_per_token": rl.kv_bytes_per_token(self.model, self.precision, self.tp),
            "weight_bytes_per_gpu": rl.resident_weight_bytes(self.model, self.precision, self.tp),
            "prompt_tokens": self.prompt_tokens,
            "ttft_ms": ttft,
            "prefix_cached_tokens": cached if self.prefix_tokens else None,
            "ttft_uncached_ms": uncached if self.prefix_tokens else None,
            "workload": None if self.workload is None else self.workload.to_dict(),
            "step_model": sm.to_dict(),
            "warnings": list(self.warnings),
            "interval_level": self.engine.accuracy.interval_level,
            "speculation": self.speculation_dict(),
            "cost": {
                "price": None if self.price is None else self.price.to_dict(),
                "power": None if power is None else power.to_dict(),
            },
            "points": self.points(),
        }


def validate_batches(batches: Sequence[float]) -> np.ndarray:
    """Batches must be positive finite numbers (fractional allowed: a measured average running batch)."""
    arr = np.asarray(list(batches), dtype=float)
    if arr.size == 0:
        raise TokenroofError("no batch sizes given")
    bad = arr[~np.isfinite(arr) | (arr <= 0)]
    if bad.size:
        raise TokenroofError(f"batch sizes must be positive numbers, got {bad[0]:g}")
    return arr


def analyze_roofline(
    model: ModelSpec,
    hardware: HardwareSpec,
    precision: Precision,
    batches: Sequence[float] = DEFAULT_BATCHES,
    context_tokens: float = 1024,
    tp: int = 1,
    eff: rl.Efficiencies | None = None,
    memory_utilization: float | None = None,
    prompt_tokens: float | None = None,
    engine: EngineProfile | None = None,
    workload: DecodeWorkload | None = None,
    speculation: SpeculativeConfig | None = None,
    usd_per_hour: float | None = None,
    prefix_tokens: int = 0,
) -> RooflineResult:
    """Build the step model from specs and evaluate it over `batches` at `context_tokens`, or, given a `workload`,
    at its mean context with TPOT counted as a benchmark of it counts it (`served_tpot_s`).

    `engine` (None: the default profile) gives the efficiencies unless `eff` does, and always the intervals: its
    spread of first-principles TPOT against published curves (EngineProfile.accuracy). The profile's HTTP-serving
    cost per sequence counts unless the workload is a static batch. `memory_utilization` (None: the engine's
    default) is the engine's own setting, read as it reads it: of the whole memory (vLLM's --gpu-memory-utilization),
    or of what the weights leave (TensorRT-LLM's --kv_cache_free_gpu_memory_fraction)."""
    engine = engine or load_engine()
    memory_utilization, of_free = engine.memory_fraction(memory_utilization)
    eff = eff or rl.default_efficiencies(hardware, precision, engine, serving=workload is None or not workload.static)
    if workload is not None:
        context_tokens = workload.mean_context
        prompt_tokens = workload.input_len if prompt_tokens is None else prompt_tokens
    arr = validate_batches(batches)
    if not 0 <= context_tokens < float("inf"):
        raise ParameterError(
            f"{{}} must be a finite non-negative number of tokens, got {context_tokens:g}", "context_tokens"
        )
    warnings = []
    limit = model.max_position_embeddings
    if limit and context_tokens > limit:
        warnings.append(f"context {context_tokens:g} exceeds {model.name}'s maximum of {limit} positions")
    sm = rl.step_model_from_specs(model, hardware, precision, tp, eff)
    result = RooflineResult(
        model, hardware, precision, tp, float(context_tokens), eff, memory_utilization, sm, arr, prompt_tokens, warnings
    )
    spec = None
    if speculation is not None:
        draft = load_model(speculation.model) if speculation.model is not None else None
        spec = speculation_from_specs(
            model,
            hardware,
            precision,
            tp,
            eff,
            speculation.method,
            speculation.num_speculative_tokens,
            speculation.acceptance,
            draft,
        )
    price = price_of(hardware, usd_per_hour)
    if prefix_tokens < 0:
        raise ParameterError(f"{{}} must be ≥ 0 tokens, got {prefix_tokens}", "prefix_len")
    if prefix_tokens and not prompt_tokens:
        raise ParameterError(
            "{} is part of a prompt: give {} (or {}) with it", "prefix_len", "prompt_tokens", "input_len"
        )
    if prefix_tokens and prompt_tokens and prefix_tokens >= prompt_tokens:
        raise ParameterError(
            f"{{}} ({prefix_tokens}) is part of the prompt: it must be shorter than it ({prompt_tokens:g})",
            "prefix_len",
        )
    result = replace(
        result,
        engine=engine,
        workload=workload,
        speculation=spec,
        price=price,
        prefix_tokens=prefix_tokens,
        memory_of_free=of_free,
    )
    warnings += memory_warnings(result, float(arr.max()))
    most = None if workload is None else workload.fullest_batch
    if workload is not None and most is not None and float(arr.max()) > most:
        warnings.append(
            f"batches above {most:,.0f} cannot stay full under a {workload.budget:,}-token step budget: the room "
            f"beside their decodes prefills fewer prompt tokens a step than their finishes bring "
            f"(batch × {workload.input_len:g} / {workload.output_len:g}); their rows assume a full batch the "
            "server would not keep (simulate runs fewer)"
        )
    servable = result.max_batch_by_memory > 0
    if engine.admission == "reserve-output" and workload is not None and not workload.static and servable:
        held = result.held_at(reserved_life_tokens(workload.input_len, workload.output_len), result.reserved_bytes)
        warnings.append(
            f"{engine.key} admits a request only with its prompt and whole output reserved in the KV cache (its "
            f"default capacity scheduler, GUARANTEED_NO_EVICT): at most {held} run at once at these lengths, where "
            f"the memory holds {result.max_batch_by_memory} at their mean context (the fits column); simulate runs it "
            f"(--max-num-seqs {max(held, 1)} or more)"
        )
    return result


def by_context(results: Sequence[RooflineResult]) -> dict[str, Any]:
    """Several contexts for one deployment (`roofline --context 8192,32768`): each context's whole roofline under
    `contexts`, the deployment once, the warnings together."""
    each = [r.to_dict() for r in results]
    shared = {k: each[0][k] for k in ("model", "hardware", "precision", "tp", "engine", "efficiencies")}
    warnings = [w for d in each for w in d["warnings"]]
    return {**shared, "contexts": each, "warnings": list(dict.fromkeys(warnings))}


def memory_warnings(result: RooflineResult, largest_batch: float) -> list[str]:
    """What does not fit: the weights alone, or the batches above the memory's limit at this context."""
    limit_b = result.max_batch_by_memory
    if limit_b == 0:
        weights_gb = rl.resident_weight_bytes(result.model, result.precision, result.tp) / 1e9
        reserved_gb = result.reserved_bytes / 1e9
        what = (
            f"the weights ({weights_gb:.1f} GB per GPU) and what the engine reserves beside them ({reserved_gb:.1f} GB)"
            if reserved_gb
            else f"the weights alone ({weights_gb:.1f} GB per GPU)"
        )
        if result.memory_of_free:  # the engine's fraction is of what the weights leave: there is nothing left
            return [f"{what} do not fit in {result.hardware.name}'s memory"]
        return [f"{what} do not fit in {result.memory_utilization:.0%} of {result.hardware.name}'s memory"]
    if largest_batch > limit_b:
        static = result.workload is not None and result.workload.static
        held = "weights + KV cache + the engine's reserve" if result.reserved_bytes else "weights + KV cache"
        return [
            f"batches above {limit_b} do not fit in memory at context {result.context_tokens:g} ({held}); "
            + (
                f"a static batch runs in waves of {limit_b} (fits_in_memory=false)"
                if static
                else "they are computed anyway and marked fits_in_memory=false"
            )
        ]
    return []
