"""The one decode step-time model every command uses (DESIGN.md, "One model at the centre").

    T_step(b, ctx) = t_fixed + max(G(b, ctx), t_host)
    G(b, ctx) = max(t_weights(b), b · t_compute(ctx)) + b · (ctx · t_kv_token + t_seq)
                [+ (1 − overlap) · min(t_weights(b), b · t_compute(ctx))]

- t_fixed: per-step overhead (scheduler, launches, sampling; all-reduce latency).
- t_weights(b): streaming the weights once; constant for dense models, and for
  MoE growing with the expected number of distinct experts touched at batch b.
- t_compute(ctx): matmul time per sequence plus attention FLOPs per context token.
- t_kv_token: reading one context token's K and V for one sequence.
- t_seq: per-sequence time outside the max (KV-cache write, all-reduce bytes).
- t_host: the host's time to launch one step's kernels one by one (an eager engine: no CUDA graphs). Launches
  are asynchronous, so the GPU's work G runs under it: the step takes the longer of the two, and the host
  binds while G is shorter (a small batch, a model split over many GPUs). 0 for CUDA-graph servers.
- prompts_folded: a model fitted to online steps carries the arriving prompts' cost
  in its per-sequence terms, so `step_s` adds none on top (travel.py splits them out
  where the physics is known).
- batch_factors: where a fit of a server's own measurements found its decode steps off the line this form draws
  (a CPU's matrix-vector product at batch 1, its small-row GEMMs at 2–5), the measured departure at each measured
  batch: (batch, factor) knots. A decode step (no prompt tokens, one query token a sequence) takes the step time
  above × factor(b), interpolated in log b between knots, held below the first, and fading to 1 over the doubling
  past the last: in range the data, beyond it the form. Empty (no correction) for every model but a scheduler fit
  (serving/replay.py). The components and bounds are the form's, and so are steps with prompt tokens and
  speculative verify steps (other kernel shapes than the measured decode); the factor scales the whole step, its
  KV reads included, as measured at the fit's context.
- overlap: the fraction of the smaller of weight streaming and compute hidden under
  the larger. 1 (the default) is the roofline's max: GPU GEMMs pipeline loads under
  tensor-core math. CPU GEMMs hide little (`tokenroof calibrate` measured ~0 on a
  2-core Xeon), so there the two add.

TPOT(b) = T_step(b); throughput(b) = b / T_step(b). All times in seconds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq

BOUNDS = ("overhead", "weights", "compute", "kv", "interconnect", "host")


def mean_context_tokens(input_len: float, output_len: float) -> float:
    """Average KV-cache length of a sequence over its decode: the prompt plus half the output (tokens)."""
    return input_len + output_len / 2


def expected_experts(num_experts: int, experts_per_token: int, tokens: Any) -> Any:
    """Expected distinct experts per layer hit by `tokens` tokens each routed to k of E (uniform routing):
    E · (1 − (1 − k/E)^tokens), k at one token, saturating at E. Floats or arrays."""
    if num_experts == 0:
        return tokens * 0.0
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** tokens)


def under_host(gpu_s: Any, host_s: float) -> Any:
    """The GPU's work of a step, or the host's launches when they take longer (floats or arrays)."""
    return gpu_s if host_s <= 0 else np.maximum(gpu_s, host_s) if isinstance(gpu_s, np.ndarray) else max(gpu_s, host_s)


def matmul_time_s(weights_s: Any, compute_s: Any, overlap: float) -> Any:
    """max(W, C) + (1 − overlap)·min(W, C), written with + and abs so floats (the scheduler's hot path) and
    arrays (sweeps) share one formula: (W + C)(1 − overlap/2) + |W − C|·overlap/2."""
    return (weights_s + compute_s) * (1.0 - overlap / 2) + abs(weights_s - compute_s) * (overlap / 2)


BIG_BATCH = 1e9
FACTOR_LIMITS = (1e-3, 1e3)  # a measured departure from the form is a few tens of percent: beyond these, a slip


def knots_problem(knots: Sequence[tuple[float, float]]) -> str:
    """What is wrong with `batch_factors` knots ("" if nothing): batches in [1, BIG_BATCH], each once, factors within
    FACTOR_LIMITS (NaN fails both)."""
    low, high = FACTOR_LIMITS
    if any(not 1 <= b <= BIG_BATCH for b, _ in knots):
        return f"pairs a batch outside [1, {BIG_BATCH:g}] with a factor"
    if any(not low <= f <= high for _, f in knots):
        return f"holds a factor outside [{low:g}, {high:g}] (a measured departure is a few tens of percent)"
    if len({b for b, _ in knots}) != len(knots):
        return "holds one batch twice"
    return ""


def factor_at(knots: tuple[tuple[float, float], ...], batch: float) -> float:
    """A `batch_factors` correction at one batch (plain floats: the scheduler's hot path); 1 without knots or
    decoding sequences."""
    if not knots or batch < 1:
        return 1.0
    first_b, first_f = knots[0]
    if batch <= first_b:
        return first_f
    last_b, last_f = knots[-1]
    if batch >= last_b:
        fade = min(math.log2(batch / last_b), 1.0)
        return last_f + (1.0 - last_f) * fade
    for (b0, f0), (b1, f1) in itertools.pairwise(knots):  # a handful of knots: a scan is fastest
        if batch <= b1:
            share = math.log(batch / b0) / math.log(b1 / b0)
            return f0 + (f1 - f0) * share
    return last_f  # not reached


def departures_text(knots: list[list[float]]) -> str:
    """Measured departures ([batch, factor] knots, as JSON holds them) in words."""
    shown = ", ".join(f"×{f:.2f} at {b:.3g}" for b, f in knots)
    return (
        f"in range its decode steps take the measured departures from these terms ({shown} sequences; fading to "
        f"none by {2 * knots[-1][0]:.3g})"
    )


def factors_at(knots: tuple[tuple[float, float], ...], batch: ArrayLike) -> NDArray[np.float64]:
    """`factor_at` over an array of batches."""
    b = np.asarray(batch, dtype=float)
    if not knots:
        return np.ones_like(b)
    at = np.array([k[0] for k in knots])
    f = np.array([k[1] for k in knots])
    logb = np.log(np.maximum(b, 1e-12))
    inside = np.interp(logb, np.log(at), f)  # held at the ends
    fade = np.clip(np.log2(np.maximum(b, 1e-12) / at[-1]), 0.0, 1.0)
    out = np.where(b > at[-1], f[-1] + (1.0 - f[-1]) * fade, inside)
    return np.where(b < 1, 1.0, out)


# StepModel's terms in seconds: a step is homogeneous in them (max, min and sums), so scaling them all scales it
TIME_TERMS = (
    "t_fixed_s",
    "t_weights_s",
    "t_compute_s",
    "t_kv_token_s",
    "t_seq_s",
    "t_attn_token_s",
    "t_expert_s",
    "t_host_s",
    "t_comm_fixed_s",
    "t_comm_seq_s",
)


@dataclass(frozen=True)
class StepModel:
    """The terms of the step-time model, in seconds."""

    t_fixed_s: float
    t_weights_s: float
    t_compute_s: float
    t_kv_token_s: float
    t_seq_s: float = 0.0
    t_attn_token_s: float = 0.0  # attention compute per context token per sequence
    t_expert_s: float = 0.0  # streaming one expert's weights in every layer (MoE)
    num_experts: int = 0
    experts_per_token: int = 0
    overlap: float = 1.0
    prompts_folded: bool = False  # fitted to online steps: the prompts' cost is already in the per-sequence terms
    t_host_s: float = 0.0  # an eager engine's kernel launches per step, which the GPU's work runs under
    batch_factors: tuple[tuple[float, float], ...] = ()  # measured departures of decode steps from the form, by batch
    # what of t_fixed_s and t_seq_s the tensor-parallel all-reduces take (their calls' latency; their bytes per
    # sequence over the links): parts of those terms, not added to them, so that the breakdown and the bound can name
    # the interconnect (a fit to measurements cannot tell them apart, and leaves them 0)
    t_comm_fixed_s: float = 0.0
    t_comm_seq_s: float = 0.0

    def __post_init__(self) -> None:
        """Plain Python numbers (fits hand over numpy scalars): readable reprs and JSON; knots as sorted tuples."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.floating | np.integer):
                object.__setattr__(self, f.name, value.item())
        knots = tuple(sorted((float(b), float(x)) for b, x in self.batch_factors))
        problem = knots_problem(knots)
        if problem:
            raise ValueError(f"batch_factors {problem}: {knots}")
        object.__setattr__(self, "batch_factors", knots)

    def scaled(self, factor: float) -> StepModel:
        """Every step `factor` times as long: each time term scaled (the measured departures are ratios, and stay)."""
        return replace(self, **{name: getattr(self, name) * factor for name in TIME_TERMS})

    # -- terms ------------------------------------------------------------------
    def experts_touched(self, batch: ArrayLike) -> NDArray[np.float64]:
        """Expected distinct experts per layer hit by `batch` tokens routed to top-k of E uniformly."""
        return np.asarray(expected_experts(self.num_experts, self.experts_per_token, np.asarray(batch, dtype=float)))

    def weights_time_s(self, batch: ArrayLike) -> NDArray[np.float64]:
        """Time to stream the weights touched at this batch."""
        b = np.asarray(batch, dtype=float)
        return self.t_weights_s + self.t_expert_s * self.experts_touched(b)

    def compute_time_per_seq_s(self, context: ArrayLike) -> NDArray[np.float64]:
        """Matmul plus attention compute time per sequence at this context."""
        return self.t_compute_s + self.t_attn_token_s * np.asarray(context, dtype=float)

    def memory_time_per_seq_s(self, context: ArrayLike) -> NDArray[np.float64]:
        """KV reads plus other per-sequence time outside the max."""
        return self.t_kv_token_s * np.asarray(context, dtype=float) + self.t_seq_s

    def comm_parts_s(self) -> tuple[float, float]:
        """The all-reduces' share of t_fixed_s and of t_seq_s (t_comm_fixed_s, t_comm_seq_s), never more than the
        terms they are part of."""
        return min(self.t_comm_fixed_s, self.t_fixed_s), min(self.t_comm_seq_s, self.t_seq_s)

    def components_s(self, batch: ArrayLike, context: ArrayLike) -> dict[str, NDArray[np.float64]]:
        """The step time split into overhead, matmul (weights or compute, the larger), KV, the interconnect (the
        tensor-parallel all-reduces: their calls' latency, and their bytes, which run with the KV reads) and the
        host's launches (which the rest but the overhead and the calls' latency runs under)."""
        b, ctx = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(context, dtype=float))
        weights = self.weights_time_s(b)
        compute = b * self.compute_time_per_seq_s(ctx)
        comm_fixed, comm_seq = self.comm_parts_s()
        return {
            "overhead": np.full_like(b, self.t_fixed_s - comm_fixed),
            "weights": weights,
            "compute": compute,
            "kv": b * (self.memory_time_per_seq_s(ctx) - comm_seq),
            "interconnect": comm_fixed + b * comm_seq,
            "host": np.full_like(b, self.t_host_s),
        }

    def _gpu_time_s(self, batch: ArrayLike, context: ArrayLike) -> NDArray[np.float64]:
        """The GPU's work of a decode step (what the host's launches run beside): matmuls, KV and the all-reduces'
        bytes, the per-sequence terms."""
        b, ctx = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(context, dtype=float))
        matmul = matmul_time_s(self.weights_time_s(b), b * self.compute_time_per_seq_s(ctx), self.overlap)
        return np.asarray(matmul + b * self.memory_time_per_seq_s(ctx), dtype=float)

    def step_time_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> NDArray[np.float64]:
        """T_step(b, ctx) in seconds; broadcasts over arrays of batch and context."""
        step = self.t_fixed_s + under_host(self._gpu_time_s(batch, context), self.t_host_s)
        return step * factors_at(self.batch_factors, np.broadcast_to(batch, step.shape)) if self.batch_factors else step

    def prompt_compute_s(self, prompt_tokens: float, prompt_sq_tokens: float | None = None) -> float:
        """GEMM and attention time of prefilling prompt tokens: each token's matmuls, and causal attention over
        the tokens before it in its chunk (Σ chunk²/2; one chunk of the whole prompt when not given)."""
        sq = prompt_tokens**2 if prompt_sq_tokens is None else prompt_sq_tokens
        return prompt_tokens * self.t_compute_s + self.t_attn_token_s * sq / 2

    def step_s(
        self,
        batch: float,
        total_context: float,
        prefill_tokens: float = 0.0,
        prefill_sq_tokens: float = 0.0,
        query_tokens: float = 1.0,
    ) -> float:
        """One step as the scheduler runs it: the fixed overhead, and the GPU's work (`gpu_s`) or an eager engine's
        launches, the longer; a decode step × the measured factor at its batch (`batch_factors`)."""
        gpu = self.gpu_s(batch, total_context, prefill_tokens, prefill_sq_tokens, query_tokens)
        step = float(self.t_fixed_s + (gpu if gpu >= self.t_host_s else self.t_host_s))
        if self.batch_factors and not prefill_tokens and query_tokens == 1:
            return step * factor_at(self.batch_factors, batch)
        return step

    def gpu_s(
        self,
        batch: float,
        total_context: float,
        prefill_tokens: float = 0.0,
        prefill_sq_tokens: float = 0.0,
        query_tokens: float = 1.0,
    ) -> float:
        """The GPU's work of one step as the scheduler runs it, in plain floats (its hot path): `batch` decoding
        sequences holding `total_context` KV tokens in all, plus `prefill_tokens` prompt tokens sharing the step's
        GEMMs (`prefill_sq_tokens` = Σ chunk², for causal attention within the chunks). With equal contexts and no
        prefill, t_fixed plus it (or the launches) is `step_time_s(batch, total_context / batch)`.

        `query_tokens`: tokens each decoding sequence runs through the model this step — 1 for plain decode,
        γ + 1 for a speculative verify step (the last token and γ drafts): the GEMMs see batch·q tokens, each
        query attends to the sequence's context (q times the attention FLOPs), the KV cache is read once and q
        tokens are written per sequence."""
        if self.prompts_folded:  # the terms already carry an average step's prompts
            prefill_tokens = prefill_sq_tokens = 0.0
        tokens = batch * query_tokens
        weights = self.t_weights_s
        if self.num_experts:
            weights += self.t_expert_s * expected_experts(
                self.num_experts, self.experts_per_token, tokens + prefill_tokens
            )
        compute = tokens * self.t_compute_s + query_tokens * self.t_attn_token_s * total_context
        if prefill_tokens:
            compute += self.prompt_compute_s(prefill_tokens, prefill_sq_tokens)
        matmul = matmul_time_s(weights, compute, self.overlap)
        extra_writes = (tokens - batch) * self.t_kv_token_s  # the drafts' KV, beyond the one token in t_seq
        return float(matmul + total_context * self.t_kv_token_s + batch * self.t_seq_s + extra_writes)

    def steps_s(
        self, batch: ArrayLike, total_context: ArrayLike, prefill_tokens: ArrayLike, prefill_sq_tokens: ArrayLike
    ) -> NDArray[np.float64]:
        """`step_s` over arrays of steps (the same formula, term for term): what a fit of the scheduler's own steps
        evaluates many times."""
        gpu = self.steps_gpu_s(batch, total_context, prefill_tokens, prefill_sq_tokens)
        step = np.asarray(self.t_fixed_s + under_host(gpu, self.t_host_s), dtype=float)
        if self.batch_factors:
            decode = np.asarray(prefill_tokens, dtype=float) == 0
            step = np.where(decode, step * factors_at(self.batch_factors, np.broadcast_to(batch, step.shape)), step)
        return step

    def steps_gpu_s(
        self, batch: ArrayLike, total_context: ArrayLike, prefill_tokens: ArrayLike, prefill_sq_tokens: ArrayLike
    ) -> NDArray[np.float64]:
        """`gpu_s` over arrays of steps (plain decode: one query token a sequence)."""
        b = np.asarray(batch, dtype=float)
        ctx = np.asarray(total_context, dtype=float)
        p = np.asarray(prefill_tokens, dtype=float)
        sq = np.asarray(prefill_sq_tokens, dtype=float)
        if self.prompts_folded:
            p = sq = np.zeros_like(p)
        weights = self.t_weights_s + (
            self.t_expert_s * expected_experts(self.num_experts, self.experts_per_token, b + p)
            if self.num_experts
            else 0.0
        )
        compute = b * self.t_compute_s + self.t_attn_token_s * ctx + p * self.t_compute_s + self.t_attn_token_s * sq / 2
        matmul = matmul_time_s(weights, compute, self.overlap)
        return np.asarray(matmul + ctx * self.t_kv_token_s + b * self.t_seq_s, dtype=float)

    def throughput_tok_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> NDArray[np.float64]:
        return np.asarray(batch, dtype=float) / self.step_time_s(batch, context)

    def bound(self, batch: ArrayLike, context: ArrayLike = 0.0) -> NDArray[np.str_]:
        """Which term dominates each step: overhead, weights, compute, kv or interconnect (the tensor-parallel
        all-reduces, calls and bytes); host where the launches take longer than the GPU's whole work and than the
        fixed overhead (an eager engine at small batch)."""
        c = self.components_s(batch, context)
        matmul_is_compute = c["compute"] > c["weights"]
        matmul = np.maximum(c["weights"], c["compute"])
        stacked = np.stack([c["overhead"], matmul, c["kv"], c["interconnect"]])
        winner = np.argmax(stacked, axis=0)
        labels = np.array(["overhead", "weights", "kv", "interconnect"])[winner]
        labels = np.where((winner == 1) & matmul_is_compute, "compute", labels)
        host_binds = (c["host"] > self._gpu_time_s(batch, context)) & (c["host"] > self.t_fixed_s)
        return np.where(host_binds, "host", labels)

    # -- characteristic batches -----------------------------------------------------
    def _crossing(self, per_seq_s: float) -> float | None:
        """Batch where b·(compute − per_seq) first exceeds the weight time; None if never."""
        gap = self.t_compute_s - per_seq_s
        if gap <= 0:
            return None
        if self.num_experts == 0:
            return self.t_weights_s / gap

        def f(b: float) -> float:
            return float(self.weights_time_s(b)) - b * gap

        return float(brentq(f, 1e-9, BIG_BATCH)) if f(BIG_BATCH) < 0 else None

    def knee_batch(self, context: float = 0.0) -> float | None:
        """b_knee = t_weights / t_compute: where the weight-streaming matmuls turn compute-bound."""
        attn = self.t_attn_token_s * context
        return replace(self, t_compute_s=self.t_compute_s + attn, t_attn_token_s=0.0)._crossing(0.0)

    def critical_batch(self, context: float = 0.0) -> float | None:
        """b* = t_weights / (t_compute − ctx·t_kv − t_seq); None when KV reads dominate at every batch."""
        attn = self.t_attn_token_s * context
        shifted = replace(self, t_compute_s=self.t_compute_s + attn, t_attn_token_s=0.0)
        return shifted._crossing(float(self.memory_time_per_seq_s(context)))

    def critical_batch_weights_only(self) -> float | None:
        """The knee at zero context: t_weights / t_compute (matmuls only)."""
        return replace(self, t_attn_token_s=0.0)._crossing(0.0)

    def no_critical_batch_reason(self, context: float) -> str:
        per_seq_compute = float(self.compute_time_per_seq_s(context))
        per_seq_memory = float(self.memory_time_per_seq_s(context))
        return (
            f"at context {context:g} the KV-cache reads per sequence ({per_seq_memory * 1e6:.3g} µs per step) "
            f"outweigh its compute ({per_seq_compute * 1e6:.3g} µs per step): decode never turns compute-bound; "
            "throughput approaches a bandwidth plateau set by KV reads, not a compute roof"
        )

    def throughput_asymptote_tok_s(self, context: float = 0.0) -> float:
        """lim b→∞ of b / T_step: 1 / (max(compute, expert streaming) + KV + per-seq time) per sequence."""
        per_seq = float(self.compute_time_per_seq_s(context)) + float(self.memory_time_per_seq_s(context))
        return float("inf") if per_seq <= 1e-12 else 1.0 / per_seq  # below a picosecond: rounding, not a cost

    def departures(self) -> str:
        """`batch_factors` in words ("" without): what a user of a scheduler fit should know it carries."""
        if not self.batch_factors:
            return ""
        return departures_text([list(k) for k in self.batch_factors])

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON takes them; batch_factors only where there are some (as [batch, factor] lists)."""
        data = asdict(self)
        if self.batch_factors:
            data["batch_factors"] = [list(k) for k in self.batch_factors]
        else:
            del data["batch_factors"]
        return data
