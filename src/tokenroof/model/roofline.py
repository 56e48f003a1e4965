"""First-principles decode costs: FLOPs and bytes per term, and the StepModel built from specs.

Every function here is pure and broadcasts over numpy arrays of batch and
context, so a sweep over batch × context is one call. Costs are per GPU under
tensor parallelism `tp` (weights, KV heads and FLOPs split `tp` ways).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model.prefix import chunk_attention_sq
from tokenroof.model.stepmodel import StepModel, expected_experts
from tokenroof.specs import HardwareSpec, ModelSpec, Precision

if TYPE_CHECKING:
    from tokenroof.specs.engines import EngineProfile, MemoryReserve

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Efficiencies:
    """Achieved fractions of the datasheet peaks, and the overheads per step and per sequence.

    The defaults are the `generic` engine profile's (specs/data/engines/generic.toml): decode
    GEMV/GEMM kernels reach roughly 70–85% of HBM bandwidth and 60–85% of dense tensor peak;
    the published Llama-3-8B batch-1 TPOT on an H100 (7.0–7.9 ms, shared/data/curves/argonne_*)
    against 4.5 ms at peak bandwidth says 75% plus ~1 ms of per-step overhead. Equal bandwidth
    and compute fractions keep the knee at the peak ridge point (≈ 295 for a bf16 7B model on an
    H100). NCCL ring all-reduce reaches ~70% of link bandwidth with ~8 µs latency per call at
    decode message sizes, and a ring crosses tp − 1 links twice: each further GPU adds ~2 µs of hops
    (`allreduce_step_latency_s`; fitted at 2.6–3.1 µs on the published TP2–TP8 curves, where one
    latency for every TP left TP4 70B 15–22% too fast and TP8 GPT-20B up to 14%). An engine
    profile (`default_efficiencies`) replaces them with what that engine achieves, fitted to
    published curves where there are some.
    """

    bandwidth: float = 0.75
    compute: float = 0.75
    overhead_s: float = 1.0e-3
    interconnect: float = 0.7
    allreduce_latency_s: float = 8e-6  # per all-reduce call: launch and synchronisation
    allreduce_step_latency_s: float = 2e-6  # per all-reduce call, per GPU past the first (the ring's hops)
    overhead_s_per_layer: float = 0.0  # eager frameworks launch kernels per layer; 0 for CUDA-graph servers
    kv_bandwidth: float | None = None  # fraction of peak bandwidth reading the KV cache (None: `bandwidth`)
    overlap: float = 1.0  # fraction of the smaller of weight streaming and compute hidden under the larger
    overhead_s_per_seq: float = 0.0  # per sequence per step: scheduling, sampling, detokenisation (engine profiles)
    host_s_per_layer: float = 0.0  # an eager engine's launches per layer; the GPU's work runs under them
    host_s_per_allreduce: float = 0.0  # ... and per all-reduce it launches (two a layer, at --tp 2 or more)

    @classmethod
    def at_peak(cls, allreduce_latency_s: float = 8e-6, allreduce_step_latency_s: float = 2e-6) -> Efficiencies:
        """Every peak reached, no overhead: the floors nothing can beat (an all-reduce still waits its latency)."""
        return cls(
            bandwidth=1.0,
            compute=1.0,
            overhead_s=0.0,
            interconnect=1.0,
            allreduce_latency_s=allreduce_latency_s,
            allreduce_step_latency_s=allreduce_step_latency_s,
        )

    def __post_init__(self) -> None:
        for name in ("bandwidth", "compute", "interconnect", "kv_bandwidth"):
            value = getattr(self, name)
            if value is None:
                continue
            if not 0 < value <= 1:
                raise TokenroofError(
                    f"{name} efficiency must be in (0, 1] (nothing runs faster than the peak), got {value}"
                )
        if not 0 <= self.overlap <= 1:
            raise TokenroofError(f"overlap must be in [0, 1], got {self.overlap}")
        latencies = (self.allreduce_latency_s, self.allreduce_step_latency_s)
        overheads = [self.overhead_s, self.overhead_s_per_layer, self.overhead_s_per_seq]
        overheads += [self.host_s_per_layer, self.host_s_per_allreduce]
        if min(*overheads, *latencies) < 0:
            raise TokenroofError("overheads and all-reduce latency must be non-negative")

    def step_overhead_s(self, num_layers: int) -> float:
        """Fixed time per step: the overhead plus the per-layer dispatch of `num_layers` layers."""
        return self.overhead_s + self.overhead_s_per_layer * num_layers

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def slowed(self, factor: float) -> Efficiencies:
        """Every term `factor` times slower: fractions of the peaks divided by it, overheads and latencies multiplied
        (a step model built from them takes `factor` times as long at every batch and context); an eager engine's
        launches, an estimate of their own with their own spread, are kept."""
        return replace(
            self,
            bandwidth=self.bandwidth / factor,
            compute=self.compute / factor,
            interconnect=self.interconnect / factor,
            kv_bandwidth=None if self.kv_bandwidth is None else self.kv_bandwidth / factor,
            overhead_s=self.overhead_s * factor,
            overhead_s_per_layer=self.overhead_s_per_layer * factor,
            overhead_s_per_seq=self.overhead_s_per_seq * factor,
            allreduce_latency_s=self.allreduce_latency_s * factor,
            allreduce_step_latency_s=self.allreduce_step_latency_s * factor,
        )


def profile_efficiencies(profile: EngineProfile, serving: bool = True) -> Efficiencies:
    """An engine profile's efficiencies over the defaults; an unfitted profile's slowed by its bias correction (the
    median by which physically motivated constants missed the published curves of other engines: such constants
    run about a quarter too fast, and an engine no curve measured is expected to do the same)."""
    known = {f.name for f in fields(Efficiencies)}
    eff = Efficiencies(**{k: float(v) for k, v in profile.efficiency_values(serving).items() if k in known})
    return eff.slowed(profile.accuracy.slowdown) if profile.accuracy.slowdown != 1.0 else eff


def default_efficiencies(
    hardware: HardwareSpec, precision: Precision, engine: EngineProfile | None = None, serving: bool = True
) -> Efficiencies:
    """The efficiencies a first-principles step model uses. Precedence, lowest first:

    1. the `Efficiencies` defaults (the generic profile's numbers);
    2. the engine profile (`engine`, else the default engine, `generic`): what that serving stack achieves, with
       the HTTP server's cost per sequence added when `serving` (online serving, not offline decode), an unfitted
       profile's slowed by its bias correction (`profile_efficiencies`);
    3. the hardware file's measured efficiencies, global then per weight dtype. Datasheet presets carry none; a
       `tokenroof calibrate` file carries what this machine's kernels achieved, and where it measures the same
       quantity as the profile (bandwidth, compute, overheads, overlap) it wins. The profile's per-sequence
       overhead, which calibrate does not measure, stays.

    Explicit flags (`roofline --bandwidth-efficiency` and friends) replace the result where given.
    """
    from tokenroof.specs.engines import load_engine

    known = {f.name for f in fields(Efficiencies)}
    profile = engine if engine is not None else load_engine()
    values: dict[str, Any] = asdict(profile_efficiencies(profile, serving))
    for scope in (hardware.efficiencies, hardware.efficiencies.get(precision.weight_dtype, {})):
        values.update({k: float(v) for k, v in scope.items() if k in known})
    return Efficiencies(**values)


# -- bytes -------------------------------------------------------------------------
def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads held by one GPU; heads are replicated when there are fewer than `tp`."""
    return -(-model.num_kv_heads // tp)


def kv_bytes_per_token(model: ModelSpec, precision: Precision, tp: int = 1) -> float:
    """Bytes of KV cache for one token of one sequence, all layers, per GPU (below any sliding window).

    Multi-head: K and V of the GPU's KV heads, 2·L·kv_heads·head_dim·bytes. MLA (DeepSeek-V2/V3): the latent
    and the rope key every head shares, L·(kv_lora_rank + qk_rope_head_dim)·bytes (576 values per layer),
    whole on every GPU: tensor parallelism splits the heads, not the latent (vLLM and SGLang replicate it).
    """
    if model.mla is not None:
        values = model.mla.cached_values_per_token
    else:
        values = 2 * kv_heads_per_gpu(model, tp) * model.head_dim
    return float(model.num_layers * values * precision.kv_bytes_per_element)


def kv_read_bytes(model: ModelSpec, precision: Precision, batch: ArrayLike, context: ArrayLike, tp: int = 1) -> Array:
    """KV-cache bytes one decode step reads, per GPU: b · Σ_layers min(ctx, window_l) · bytes per token per layer
    (`ModelSpec.effective_context`; every layer reads all `ctx` tokens without sliding windows)."""
    b = np.asarray(batch, dtype=float)
    return b * model.effective_context(context) * kv_bytes_per_token(model, precision, tp)


def dense_weight_bytes(model: ModelSpec, precision: Precision, tp: int = 1) -> float:
    """Bytes streamed every step regardless of batch (attention, norms, dense MLPs, lm_head), per GPU; beside
    quantised layers lm_head stays 16-bit unless the checkpoint quantised it (Precision.lm_head_bytes_per_param)."""
    head = model.lm_head_params
    body = model.streamed_dense_params - head
    return (body * precision.weight_bytes_per_param + head * precision.lm_head_bytes_per_param) / tp


def expert_weight_bytes(model: ModelSpec, precision: Precision, tp: int = 1) -> float:
    """Bytes of one routed expert in every MoE layer, per GPU (0 for dense models)."""
    if not model.is_moe:
        return 0.0
    return model.expert_params_all_layers * precision.weight_bytes_per_param / tp


def expected_experts_touched(num_experts: int, experts_per_token: int, tokens: ArrayLike) -> Array:
    """Expected distinct experts per layer hit by `tokens` tokens each routed to `k` of `E` (uniform routing).

    E · (1 − (1 − k/E)^tokens): k at one token, saturating at E.
    """
    return np.asarray(expected_experts(num_experts, experts_per_token, np.asarray(tokens, dtype=float)))


def weight_bytes_streamed(model: ModelSpec, precision: Precision, batch: ArrayLike, tp: int = 1) -> Array:
    """Weight bytes read in one decode step of `batch` sequences, per GPU (MoE: experts touched)."""
    touched = expected_experts_touched(model.num_experts, model.experts_per_token, batch)
    return dense_weight_bytes(model, precision, tp) + expert_weight_bytes(model, precision, tp) * touched


def resident_weight_bytes(model: ModelSpec, precision: Precision, tp: int = 1) -> float:
    """Bytes of all stored weights per GPU (the memory footprint, embeddings included): beside quantised layers the
    embedding table and a vision tower stay 16-bit, and lm_head too unless the checkpoint quantised it."""
    head = 0 if model.tie_word_embeddings else model.lm_head_params
    table = model.embedding_params + model.vision_params
    body = model.total_params - head - table
    per_param = precision.weight_bytes_per_param
    return (body * per_param + head * precision.lm_head_bytes_per_param + table * precision.table_bytes_per_param) / tp


def activation_bytes(model: ModelSpec, precision: Precision, batch: ArrayLike, tp: int = 1) -> Array:
    """GEMM input and output traffic per step, per GPU (overlapped by the GEMMs; reported, not timed).

    Per token per layer: QKV (in h, out q+2kv), output projection (in q, out h),
    MLP up/gate (in h, out 2i or i) and down (in i, out h).
    """
    h, q, kv, i = model.hidden_size, model.q_dim / tp, model.kv_dim / tp, model.intermediate_size / tp
    up = (2 if model.family.gated_mlp else 1) * i
    per_layer = (h + q + 2 * kv) + (q + h) + (h + up) + (i + h)
    experts = max(model.experts_per_token, 1)
    per_layer += (experts - 1) * (h + up + i + h)
    per_token = model.num_layers * per_layer * precision.activation_bytes_per_element
    return np.asarray(batch, dtype=float) * per_token


def allreduce_bytes(model: ModelSpec, precision: Precision, batch: ArrayLike, tp: int = 1) -> Array:
    """Bytes each GPU sends per step in ring all-reduces: 2 per layer of b·h activations, 2(tp−1)/tp each."""
    if tp == 1:
        return np.zeros_like(np.asarray(batch, dtype=float))
    message = np.asarray(batch, dtype=float) * model.hidden_size * precision.activation_bytes_per_element
    return 2 * model.num_layers * 2.0 * (tp - 1) / tp * message


# -- FLOPs -------------------------------------------------------------------------
def matmul_flops(model: ModelSpec, batch: ArrayLike, tp: int = 1) -> Array:
    """2 FLOPs per multiplied parameter per sequence (active experts only), per GPU."""
    return 2.0 * model.matmul_params_per_token * np.asarray(batch, dtype=float) / tp


def attention_flops(model: ModelSpec, batch: ArrayLike, context: ArrayLike, tp: int = 1) -> Array:
    """QKᵀ and AV for one new token over `context` cached tokens, per GPU: 4·L·q_dim·ctx per sequence for
    multi-head attention (`ModelSpec.attention_flops_per_context_token`; absorbed MLA's own), each layer over
    min(ctx, its window) tokens (`ModelSpec.effective_context`)."""
    b, ctx = np.asarray(batch, dtype=float), model.effective_context(context)
    return float(model.attention_flops_per_context_token) * ctx * b / tp


@dataclass(frozen=True)
class DecodeCosts:
    """FLOPs and bytes of one decode step, per GPU, by term (arrays broadcast over batch × context)."""

    flops_matmul: Array
    flops_attention: Array
    bytes_weights: Array
    bytes_kv_read: Array
    bytes_kv_write: Array
    bytes_activations: Array
    bytes_allreduce: Array

    @property
    def flops(self) -> Array:
        return self.flops_matmul + self.flops_attention

    @property
    def bytes_memory(self) -> Array:
        return self.bytes_weights + self.bytes_kv_read + self.bytes_kv_write + self.bytes_activations

    @property
    def arithmetic_intensity_flops_per_byte(self) -> Array:
        return self.flops / self.bytes_memory


def decode_costs(
    model: ModelSpec, precision: Precision, batch: ArrayLike, context: ArrayLike, tp: int = 1
) -> DecodeCosts:
    """All FLOPs and bytes of one decode step of `batch` sequences at `context` cached tokens each."""
    b, ctx = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(context, dtype=float))
    kv_token = kv_bytes_per_token(model, precision, tp)
    return DecodeCosts(
        flops_matmul=matmul_flops(model, b, tp),
        flops_attention=attention_flops(model, b, ctx, tp),
        bytes_weights=weight_bytes_streamed(model, precision, b, tp),
        bytes_kv_read=kv_read_bytes(model, precision, b, ctx, tp),
        bytes_kv_write=b * kv_token,
        bytes_activations=activation_bytes(model, precision, b, tp),
        bytes_allreduce=allreduce_bytes(model, precision, b, tp),
    )


# -- the step model from specs -------------------------------------------------------
def check_parallelism(model: ModelSpec, hardware: HardwareSpec, tp: int) -> None:
    if tp < 1:
        raise ParameterError(f"{{}} must be at least 1, got {tp}", "tp")
    if model.num_attention_heads % tp:
        raise ParameterError(
            f"{{}} {tp} does not divide {model.name}'s {model.num_attention_heads} attention heads", "tp"
        )
    if tp > 1 and hardware.interconnect_bandwidth(tp) is None:
        raise ParameterError(
            f"{hardware.name} has no interconnect_bandwidth_bytes_per_s (nor one at {tp} GPUs); {{}} {tp} needs one",
            "tp",
        )


def step_model_from_specs(
    model: ModelSpec,
    hardware: HardwareSpec,
    precision: Precision,
    tp: int = 1,
    eff: Efficiencies | None = None,
) -> StepModel:
    """The four (plus per-sequence) terms of DESIGN.md's step model from model × hardware × precision.

    `eff` defaults to `default_efficiencies` (the default engine profile under the hardware file's measured
    efficiencies). The per-sequence term carries the KV-cache write, the all-reduce bytes and the engine's
    overhead per sequence (scheduling, sampling, detokenisation)."""
    eff = eff or default_efficiencies(hardware, precision)
    check_parallelism(model, hardware, tp)
    bandwidth = hardware.memory_bandwidth_bytes_per_s * eff.bandwidth
    kv_bandwidth = hardware.memory_bandwidth_bytes_per_s * (eff.kv_bandwidth or eff.bandwidth)
    flops = hardware.peak_for(precision.compute_dtype) * eff.compute
    # attention at its own dtype's peak (fp8 GEMMs beside a bf16 cache attend in bf16), where the chip has one
    attention = precision.attention_dtype
    attn_flops = hardware.peak_for(attention) * eff.compute if attention in hardware.peak_flops_per_s else flops
    kv_token = kv_bytes_per_token(model, precision, tp)
    t_allreduce_seq = 0.0
    t_allreduce_fixed = 0.0
    if tp > 1:
        link = (hardware.interconnect_bandwidth(tp) or 0.0) * eff.interconnect  # what the topology gives `tp` GPUs
        t_allreduce_seq = float(allreduce_bytes(model, precision, 1.0, tp)) / link
        t_allreduce_fixed = 2 * model.num_layers * allreduce_call_s(eff, tp)
    return StepModel(
        t_fixed_s=eff.step_overhead_s(model.num_layers) + t_allreduce_fixed,
        t_weights_s=dense_weight_bytes(model, precision, tp) / bandwidth,
        t_compute_s=float(matmul_flops(model, 1.0, tp)) / flops,
        t_kv_token_s=kv_token / kv_bandwidth,
        t_seq_s=kv_token / kv_bandwidth + t_allreduce_seq + eff.overhead_s_per_seq,
        t_attn_token_s=float(attention_flops(model, 1.0, 1.0, tp)) / attn_flops,
        t_expert_s=expert_weight_bytes(model, precision, tp) / bandwidth,
        num_experts=model.num_experts,
        experts_per_token=model.experts_per_token,
        overlap=eff.overlap,
        # the all-reduces are GPU work the launches hide too: fixed + max(all-reduce + G, host) = fixed + all-reduce +
        # max(G, host − all-reduce)
        t_host_s=max(host_launches_s(eff, model.num_layers, tp) - t_allreduce_fixed, 0.0),
        t_comm_fixed_s=t_allreduce_fixed,
        t_comm_seq_s=t_allreduce_seq,
    )


def host_launches_s(eff: Efficiencies, layers: int, tp: int) -> float:
    """An eager engine's launches a step: each layer's ops, and its two all-reduces where --tp splits the model."""
    return layers * (eff.host_s_per_layer + (2 * eff.host_s_per_allreduce if tp > 1 else 0.0))


def allreduce_call_s(eff: Efficiencies, tp: int) -> float:
    """Latency of one all-reduce across `tp` GPUs (two per layer per step): a call's launch and synchronisation, and
    the ring's hops, tp − 1 each way, growing with every GPU added."""
    return eff.allreduce_latency_s + (tp - 1) * eff.allreduce_step_latency_s


def server_reserved_bytes(
    model: ModelSpec, hardware: HardwareSpec, precision: Precision, tp: int, reserve: MemoryReserve | None
) -> float:
    """Bytes per GPU a server holds beside its weights and KV cache (MemoryReserve): the driver's share, memory
    outside PyTorch (NCCL's buffers growing with each doubling of `tp`), and the peak of its start-up profile step —
    T tokens through the widest MLP, T·(3·I/tp + hidden) 16-bit activations, and the logits of S sequences sampled,
    S·vocab·(bytes per logit). 0 without a reserve."""
    if reserve is None:
        return 0.0
    tokens, seqs = reserve.profile(hardware.memory_bytes, hardware.name, model.max_position_embeddings)
    routed = model.experts_per_token * model.intermediate_size + model.shared_intermediate_size
    widest = max(routed if model.is_moe else model.intermediate_size, model.dense_intermediate_size)
    act_bytes = 4.0 if precision.compute_dtype == "fp32" else 2.0
    peak = tokens * (3 * widest / tp + model.hidden_size) * act_bytes
    sampler = seqs * model.vocab_size * reserve.sampler_bytes_per_logit
    outside = reserve.non_torch_bytes + reserve.non_torch_bytes_per_tp_doubling * math.log2(tp)
    return reserve.driver_bytes + outside + peak + sampler


def max_batch_by_memory(
    model: ModelSpec,
    hardware: HardwareSpec,
    precision: Precision,
    context: float,
    tp: int = 1,
    memory_utilization: float = 0.9,
    reserved_bytes: float = 0.0,
    of_free: bool = False,
) -> int:
    """Largest batch whose weights plus KV cache (`context` tokens each, a sliding-window layer holding only its
    window: `ModelSpec.effective_context`) fit in `memory_utilization` of memory, less what the server reserves
    beside them (`server_reserved_bytes`); `of_free`: the fraction is of the memory the weights leave (TensorRT-LLM's
    and LMDeploy's reading), the sequences the pool `kv_cache_tokens` sizes hold."""
    if not 0 < memory_utilization <= 1:
        raise TokenroofError(f"memory utilisation must be in (0, 1], got {memory_utilization}")
    if of_free:
        pool = kv_cache_tokens(model, hardware, precision, tp, memory_utilization, True, reserved_bytes)
        return batch_in_pool(model, pool, context)
    free = hardware.memory_bytes * memory_utilization - resident_weight_bytes(model, precision, tp) - reserved_bytes
    if free <= 0:
        return 0
    held = float(model.effective_context(max(context, 1.0)))
    # a batch that fits exactly must not lose a sequence to the rounding of bytes × context (44.402 tokens of
    # 128 bytes in 710,432 bytes are 125 sequences; the float quotient is 124.99999999999999)
    return math.floor(free / (kv_bytes_per_token(model, precision, tp) * held) * (1 + 1e-12))


def batch_in_pool(model: ModelSpec, pool_tokens: float, context: float) -> int:
    """Sequences of `context` tokens a KV pool of `pool_tokens` holds (a sliding-window layer holding only its window:
    `ModelSpec.effective_context`); a batch that fits exactly is not lost to rounding."""
    held = float(model.effective_context(max(context, 1.0)))
    return math.floor(pool_tokens / held * (1 + 1e-12))


def kv_cache_tokens(
    model: ModelSpec,
    hardware: HardwareSpec,
    precision: Precision,
    tp: int = 1,
    memory_utilization: float = 0.9,
    of_free: bool = False,
    reserved_bytes: float = 0.0,
) -> int:
    """Tokens of KV cache that fit beside the weights in `memory_utilization` of memory (vLLM's pool), or, `of_free`,
    in that fraction of the memory the weights leave (TensorRT-LLM's and LMDeploy's reading); less what the server
    reserves beside them (`server_reserved_bytes`: activations, sampler, buffers).

    Counted at every layer's cost per token: with sliding windows a sequence past its window holds fewer bytes
    per context token, so for such models the pool holds more context than this (a conservative count)."""
    weights = resident_weight_bytes(model, precision, tp)
    if of_free:
        free = (hardware.memory_bytes - weights - reserved_bytes) * memory_utilization
    else:
        free = hardware.memory_bytes * memory_utilization - weights - reserved_bytes
    return max(int(free // kv_bytes_per_token(model, precision, tp)), 0)


def prefill_time_s(
    model: ModelSpec,
    hardware: HardwareSpec,
    precision: Precision,
    prompt_tokens: ArrayLike,
    tp: int = 1,
    eff: Efficiencies | None = None,
    cached_tokens: float = 0.0,
) -> Array:
    """TTFT estimate for one prompt alone: the scheduler's own step (`StepModel.step_s`) with no sequence decoding
    and the prompt as one chunk, so roofline's TTFT and simulate's prefill are one formula.

    That step is t_fixed + matmul_time(weights, P·t_compute + t_attn·P²/2): each prompt token's 2·params FLOPs and
    causal attention 2·L·q_dim·P² (half of the full P×P) against the weights streamed once. With `cached_tokens`
    of the prompt served from a prefix cache, only the rest is computed, attending over the cached tokens too
    (prefix.chunk_attention_sq).
    """
    sm = step_model_from_specs(model, hardware, precision, tp, eff)
    p = np.asarray(prompt_tokens, dtype=float)

    def one(tokens: float) -> float:
        rest = tokens - min(cached_tokens, tokens)
        return sm.step_s(0.0, 0.0, rest, chunk_attention_sq(rest, tokens - rest))

    return np.vectorize(one, otypes=[float])(p)
