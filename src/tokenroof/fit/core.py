"""Fit the step-time model to measured points: one likelihood over all of them, structures weighed by evidence.

The likelihood: every measured TPOT is the model's times a log-normal error of one
relative size σ (estimated from the fit, at least 1%). Rows repeated at one batch come as
one point (their geometric mean) weighing as many rows, their scatter about it counted in σ
(`Evidence`); tables of more than MAX_POINTS distinct batches are fitted on bins of
neighbouring batches (measurements.pooled), so a fit costs the same at 10^6 rows. Every structure of
structures.py predicts every point, its residual is counted over all points, and the
structures are weighed by AICc (Akaike weights; plain AIC when no structure has
points enough for the correction): predictions are the weighted
(geometric) average, and the answer says which structure carried it and how surely.

Each structure is a step model fitted to a *support* of points, plus a **small-batch
line** for the points below that support: the smallest batches run special-cased
kernels (batch-1 GEMV paths, CUDA-core kernels below ~8 rows, graph padding) whose cost
the roofline does not describe, so they get their own `T = a + s·b` and are neither
missed nor allowed to bend the slope that governs every prediction past the data.

What TPOT counts decides how a running-batch cap shows (`Curve`): past the cap TPOT
stays flat when it excludes queueing (vLLM's TPOT, an ITL) and grows with the queue
when it is end-to-end time per token. Points past a cap the data show are named
(`past_cap`): preempted ones are left out, ones behind a server's cap are fitted as the
steps at that cap.

Intervals come from refitting noisy copies of the fitted curve (noise at σ, the
prior's centres redrawn), the copies shared among the structures by their weights;
intervals.py widens them with distance past the data, calibrated on published curves.
Times are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike

from tokenroof.errors import ParameterError
from tokenroof.fit.intervals import distance_doublings
from tokenroof.fit.structures import (
    ContextLaw,
    Prior,
    PriorFit,
    Structure,
    faster_than_peak,
    fit_line,
    fit_line_contexts,
    line_structure,
    physics_law,
    pinned_structure,
    prior_structure,
    roofline_structure,
    upper_half,
)
from tokenroof.io.measurements import CONTEXT_LEVEL_RATIO, MeasurementTable, pooled
from tokenroof.model.stepmodel import StepModel
from tokenroof.units import ms_to_s

__all__ = [
    "ContextLaw",
    "Contexts",
    "Curve",
    "Excluded",
    "Fit",
    "FittedCurve",
    "Prior",
    "fit_points",
    "fit_table",
    "past_cap",
]

NOISE_FLOOR = 0.01  # relative TPOT noise assumed at least this (benchmarks repeat to ~1–3%)
MIN_ROOFLINE_POINTS = 6
MIN_STEP_S = 1e-9  # no step is faster (a floor for degenerate fits moved far from their contexts)
MAX_POINTS = 1024  # more distinct batches than this are fitted in bins (measurements.pooled)
# a client-concurrency table whose throughput × TPOT (the sequences decoding at once, by Little's law) exceeds the
# physics' memory cap by more than this contradicts the cap: more ran together than it allows
RAN_PAST_CAP = 1.1
# ... and a point whose throughput × TPOT exceeds its concurrency by more than this is no evidence of what ran (a
# throughput that counts prompt tokens too, or a TPOT that is not per output token)
RAN_PAST_CONCURRENCY = 1.05


@dataclass(frozen=True)
class SmallBatch:
    """The smallest batches' own line, below the batches the step model was fitted on."""

    upto_batch: float  # the largest measured batch of this regime
    support_batch: float  # the smallest batch the step model was fitted on
    intercept_s: float
    slope_s: float

    def apply(
        self,
        batch: np.ndarray,
        model_s: np.ndarray,
        model_at_support_s: float | np.ndarray,
        kv_s_per_seq: float | np.ndarray = 0.0,
    ) -> np.ndarray:
        """TPOT (s): this regime's line up to `upto_batch`, then straight to the model at `support_batch`.
        `kv_s_per_seq`: the KV reads per sequence a point's context adds to (or takes from) the reference's."""
        slope = np.maximum(self.slope_s + kv_s_per_seq, 0.0)  # a shorter context takes at most the whole slope
        below = self.intercept_s + slope * batch
        top = self.intercept_s + slope * self.upto_batch
        span = max(self.support_batch - self.upto_batch, 1e-12)
        bridge = top + (model_at_support_s - top) * (batch - self.upto_batch) / span
        return np.where(batch <= self.upto_batch, below, np.where(batch < self.support_batch, bridge, model_s))

    def to_dict(self) -> dict[str, float]:
        return {
            "up_to_batch": self.upto_batch,
            "intercept_ms": self.intercept_s * 1e3,
            "slope_ms_per_seq": self.slope_s * 1e3,
        }


@dataclass(frozen=True)
class Candidate:
    """One structure fitted to the table: the step model on its support and the small-batch line below it."""

    structure: str
    model: StepModel
    small: SmallBatch | None
    n_params: int
    log_resid: np.ndarray  # log(model / measured) at every fitted point
    law: ContextLaw | None = None  # how `model` (folded at the reference context) moves with context (None: unknown)


@dataclass(frozen=True)
class Curve:
    """What turns a step model into TPOT at a requested batch: the running-batch cap and what TPOT counts."""

    cap: float | None = None  # the running batch cannot exceed this (memory, or a server cap seen in the data)
    queues: bool = False  # TPOT includes the wait of queued requests (end-to-end per token), not only decode steps
    # the memory's cap holds at this (effective) context and shrinks in proportion at longer ones (None: a server's
    # cap, the same at every context)
    cap_context_tokens: float | None = None
    # the cap is the physics' estimate of the memory (weights and KV at the mean context in the engine's share), not
    # one the data showed: the engine's KV dtype, memory fraction and reservations can move it, so intervals past it
    # also hold up to twice as many sequences running (PredictResult.predictions_at, PHYSICS_CAP_SLACK)
    from_physics: bool = False

    def running(self, batch: np.ndarray, context: ArrayLike | None = None) -> np.ndarray:
        if self.cap is None:
            return batch
        if context is None or self.cap_context_tokens is None:
            return np.minimum(batch, self.cap)
        ctx = np.maximum(np.asarray(context, dtype=float), 1.0)
        return np.minimum(batch, self.cap * self.cap_context_tokens / ctx)

    def tpot_s(self, sm: StepModel, batch: np.ndarray, context: ArrayLike | None = None) -> np.ndarray:
        """Step time at the running batch: `sm` as it is (folded) without `context`, at `context` with it."""
        running = self.running(batch, context)
        step = sm.step_time_s(running) if context is None else sm.step_time_s(running, context)
        return step * batch / running if self.queues else step

    def throughput_tok_s(self, batch: np.ndarray, tpot_s: np.ndarray, context: ArrayLike | None = None) -> np.ndarray:
        """Output tokens per second: the running batch each step (an end-to-end TPOT counts the queue too)."""
        running = self.running(batch, context)
        return running / (tpot_s * running / batch if self.queues else tpot_s)


def evaluate_s(
    sm: StepModel,
    small: SmallBatch | None,
    curve: Curve,
    batch: np.ndarray,
    context: ArrayLike | None = None,
    law: ContextLaw | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """TPOT (s) and throughput (tok/s) at `batch`: the step model, the small-batch line below it, the cap. Without
    `context` (or a `law` to move with it) the model as folded at its reference context; with both, at `context`
    (effective tokens, one or one per batch)."""
    b = np.asarray(batch, dtype=float)
    moving = context is not None and law is not None
    ctx = np.broadcast_to(np.asarray(context, dtype=float), b.shape) if moving else None
    model = law.whole(sm) if moving and law is not None else sm
    held = 0.0 if ctx is None else ctx  # a folded model holds its context in its terms: evaluated at 0
    running = curve.running(b, ctx)
    step = model.step_time_s(running, held)
    if small is not None:  # the smallest running batches' own line (a cap below it holds the batch there)
        shift = 0.0 if ctx is None or law is None else law.kv_token_s * (ctx - law.reference_tokens)
        step = small.apply(running, step, model.step_time_s(small.support_batch, held), shift)
    if ctx is not None:
        # moved far below the reference, a split fitted there can take more than a sequence costs: no step is
        # faster than its fixed part (the overhead and the weight stream)
        step = np.maximum(step, max(model.t_fixed_s + float(model.weights_time_s(0.0)), MIN_STEP_S))
    tpot = step * b / running if curve.queues else step
    return tpot, curve.throughput_tok_s(b, tpot, ctx)


def fit_small_batch(
    batch: np.ndarray, tpot_s: np.ndarray, support: slice, weight: np.ndarray | None = None
) -> tuple[SmallBatch | None, int]:
    """The line of the points below the support (and its parameter count): two or more distinct batches get a
    line, one batch a level; at the support's first batch the model takes over."""
    below = np.arange(batch.size) < (support.start or 0)
    if not below.any():
        return None, 0
    b, t = batch[below], tpot_s[below]
    w = np.ones_like(b) if weight is None else weight[below]
    if np.unique(b).size >= 2:
        a, s = fit_line(b, t, w)
        params = 2
    else:
        s = 0.0
        a = float(np.exp(np.sum(w * np.log(t)) / np.sum(w)))
        params = 1
    return SmallBatch(float(b.max()), float(batch[support][0]), a, s), params


@dataclass(frozen=True)
class Contexts:
    """The contexts behind the points: each point's effective context when the table holds several (None: one
    context, folded into the terms), the reference context the fitted terms are folded at, and the prior, whose
    physics moves a one-context fit to other contexts."""

    values: np.ndarray | None = None
    reference: float = 0.0
    prior: Prior | None = None

    def law(self, sm: StepModel) -> ContextLaw | None:
        """How a structure's model moves with context: fitted (several contexts), from the physics (one context and
        a prior), or unknown (one context, data only)."""
        if self.values is not None:
            return ContextLaw.of(sm, self.reference)
        if self.prior is not None:
            return physics_law(sm, self.prior)
        return None

    def reduced(self, batch: np.ndarray, tpot_s: np.ndarray, law: ContextLaw | None) -> np.ndarray:
        """The points' TPOTs moved to the reference context (for the small-batch line), never below a tenth."""
        if self.values is None or law is None:
            return tpot_s
        moved = tpot_s - law.kv_token_s * batch * (self.values - law.reference_tokens)
        return np.maximum(moved, 0.1 * tpot_s)


@dataclass(frozen=True)
class Excluded:
    """Points past a cap the data show: left out of the decode fit (preemption), or fitted as steps at the cap."""

    batches: tuple[float, ...]
    reason: str
    cap: float | None = None  # the running batch they show the server holding
    left_out: bool = True  # False: they measure steps at the cap and are fitted there
    contexts: tuple[float, ...] = ()  # in a table of several contexts, the context of each batch's curve

    def indices(self, points: MeasurementTable) -> np.ndarray:
        """Where these points lie in `points`: the last ones of a one-context table, else matched by (batch,
        context)."""
        if not self.contexts:
            return np.arange(len(points) - len(self.batches), len(points))
        level_context = np.asarray(points.level_contexts())[points.levels]
        hit = np.zeros(len(points), dtype=bool)
        for batch, context in zip(self.batches, self.contexts, strict=True):
            hit |= (points.batch == batch) & (level_context == context)
        return np.flatnonzero(hit)


# -- the fit --------------------------------------------------------------------------------
@dataclass
class Fit:
    """The chosen structure, every candidate's weight, and samples for intervals."""

    best: Candidate
    candidates: list[Candidate]
    weights: dict[str, float]
    reason: str
    prior: Prior | None
    curve: Curve
    samples: list[Candidate]
    sigma_rel: float
    n_fit: int
    batch_range: tuple[float, float]  # the smallest and largest fitted batch
    conflicts: list[str] = field(default_factory=list)
    excluded: Excluded | None = None  # points past a cap (left out, or fitted at the cap)
    notes: list[str] = field(default_factory=list)  # what the fit found worth a warning
    contexts: Contexts = field(default_factory=Contexts)
    context_range: tuple[float, float] | None = None  # the smallest and largest measured context (None: not stated)
    # at each context level of a table of several (uncapped; else empty), in context order: its smallest and largest
    # context, and its smallest and largest measured batch
    context_batches: tuple[tuple[float, float, float, float], ...] = ()
    # the physics' memory cap (at the reference context) where the data showed more running and the cap was raised to
    # what they held, a floor of what fits (None: not raised)
    cap_raised_from: float | None = None

    @property
    def method(self) -> str:
        return self.best.structure

    @property
    def context_tokens(self) -> float:
        """The (effective) context the fitted terms are folded at: the step model, the critical batch."""
        return self.contexts.reference

    def batch_doublings(self, batch: np.ndarray, context: float | None) -> np.ndarray:
        """How many doublings each batch lies outside the batches measured (0 inside). At a context of a table of
        several, those measured at the contexts either side of it (the nearest one past the measured range), the
        farther of the two: a long context's memory holds fewer sequences, so its curve stops at a smaller batch,
        and a batch the short context reached but the long one did not was never measured that long. Else the
        whole table's."""
        if context is None or not self.context_batches:
            return distance_doublings(batch, float(self.batch_range[0]), float(self.batch_range[1]))
        below = [level for level in self.context_batches if level[0] <= context]
        above = [level for level in self.context_batches if level[1] >= context]
        sides = [*below[-1:], *above[:1]]
        return np.max([distance_doublings(batch, low, high) for _, _, low, high in sides], axis=0)

    @property
    def context_source(self) -> str | None:
        """What moves the fit to other contexts: "data" (several measured), "physics" (the prior), None (neither)."""
        return self.best.law.source if self.best.law is not None else None

    def effective(self, context: ArrayLike) -> np.ndarray:
        """Raw contexts as the fit's terms count them (sliding-window layers hold their window; with the prior)."""
        prior = self.contexts.prior
        ctx = np.asarray(context, dtype=float)
        return ctx if prior is None else prior.effective_context(ctx)

    def require_context_law(self, context: float) -> None:
        """Raise when asked about another context (raw tokens) than the one measured — further than one context level
        (CONTEXT_LEVEL_RATIO) from it — with nothing to move the fit there."""
        ratio = float(self.effective(context)) / max(self.context_tokens, 1.0)
        if self.context_source is None and not 1 / CONTEXT_LEVEL_RATIO <= ratio <= CONTEXT_LEVEL_RATIO:
            at = f"at a context of {self.context_tokens:g} tokens" if self.context_tokens else "at one context"
            raise ParameterError(
                f"the table was measured {at}: moving it to {context:g} needs the KV cost per context token, from "
                "two or more measured contexts (a context_tokens column) or from the physics ({}/{})",
                "model",
                "hardware",
            )

    def cap_at(self, context: float | None = None) -> float | None:
        """The running-batch cap at `context` (raw tokens; None: the reference): the memory's shrinks with context."""
        if self.curve.cap is None:
            return None
        if context is None or self.context_source is None:
            return self.curve.cap
        return float(self.curve.running(np.array([np.inf]), self.effective(context))[0])

    def step_model_at(self, context: float | None = None) -> StepModel:
        """The chosen structure's model folded at `context` (raw tokens; None: the reference)."""
        return self._moved(self.best, context)

    def sample_models_at(self, context: float | None = None) -> list[StepModel]:
        if context is None:
            return self.sample_models()
        return [self._moved(c, context) for c in self.samples]

    def _moved(self, c: Candidate, context: float | None) -> StepModel:
        if context is None or c.law is None:
            return c.model
        return c.law.at(c.model, float(self.effective(context)))

    @property
    def step_model(self) -> StepModel:
        return self.best.model

    @cached_property
    def _sample_models(self) -> list[StepModel]:
        return [c.model for c in self.samples]

    def sample_models(self) -> list[StepModel]:
        """The interval samples as step models (built once: predictions, the critical batch and plots share them)."""
        return self._sample_models

    def evaluate(
        self, batch: np.ndarray, candidate: Candidate | None = None, context: ArrayLike | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """TPOT (s) and throughput at `batch`: one candidate's, or the Akaike-weighted (geometric) average; at the
        reference context, or at `context` (raw tokens, one or one per batch)."""
        b = np.asarray(batch, dtype=float)
        ctx = None if context is None else self.effective(context)
        if candidate is not None:
            return evaluate_s(candidate.model, candidate.small, self.curve, b, ctx, candidate.law)
        log_tpot = np.zeros_like(b)
        for c in self.candidates:
            log_tpot += self.weights[c.structure] * np.log(evaluate_s(c.model, c.small, self.curve, b, ctx, c.law)[0])
        tpot = np.exp(log_tpot)
        moves = ctx is not None and self.context_source is not None
        return tpot, self.curve.throughput_tok_s(b, tpot, ctx if moves else None)

    def as_step_time(self, context: float | None = None) -> FittedCurve:
        """The fitted curve where a step model is expected (advise): the weighted structures, small batches, cap;
        at the reference context, or at `context` (raw tokens)."""
        if context is not None:
            self.require_context_law(context)
        return FittedCurve(self, context)

    def sample_curves(self, batch: np.ndarray, context: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """TPOT (s) and throughput of every sample at `batch`: arrays (samples × batches)."""
        draws = [self.evaluate(batch, c, context) for c in self.samples] or [self.evaluate(batch, context=context)]
        return np.array([d[0] for d in draws]), np.array([d[1] for d in draws])


@dataclass(frozen=True)
class FittedCurve:
    """TPOT and throughput of a fit as functions of batch at one context, with the step model's signature (the
    context it holds at is fixed when it is made, so the argument is ignored)."""

    fit: Fit
    context: float | None = None  # raw tokens; None: the reference the terms are folded at

    def step_time_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> np.ndarray:
        b = np.asarray(batch, dtype=float)
        return self.fit.evaluate(np.atleast_1d(b), context=self.context)[0].reshape(b.shape)

    def throughput_tok_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> np.ndarray:
        b = np.asarray(batch, dtype=float)
        return self.fit.evaluate(np.atleast_1d(b), context=self.context)[1].reshape(b.shape)


@dataclass(frozen=True)
class Evidence:
    """The measured rows behind each point: how many, and how far their TPOTs scatter around the point's
    (geometric mean). The likelihood is over rows: a point counts as often as its rows, and their scatter
    about it is misfit that no structure removes."""

    count: np.ndarray  # rows per point
    log_ss: np.ndarray  # per point: the sum over its rows of log(row TPOT / point TPOT)²

    @classmethod
    def single(cls, n: int) -> Evidence:
        return cls(np.ones(n), np.zeros(n))

    @property
    def rows(self) -> float:
        return float(self.count.sum())

    def cut(self, part: slice) -> Evidence:
        return Evidence(self.count[part], self.log_ss[part])

    def rss(self, log_resid: np.ndarray) -> float:
        """The sum over rows of log(model / row TPOT)²: each point's residual once per row, plus the scatter."""
        root = np.sqrt(self.count) * log_resid
        return float(root @ root) + float(self.log_ss.sum())


def aicc(log_resid: np.ndarray, k: int, small_sample: bool = True, evidence: Evidence | None = None) -> float:
    """AICc of a log-normal likelihood with the noise estimated (floored at NOISE_FLOOR): k + 1 parameters;
    infinite where the points cannot support them (a structure then weighs nothing, or all weigh alike)."""
    evidence = evidence or Evidence.single(log_resid.size)
    n, rss = evidence.rows, evidence.rss(log_resid)
    k_all = k + 1
    sigma2 = max(rss / n, NOISE_FLOOR**2)
    neg2ll = rss / sigma2 + n * math.log(sigma2)
    if not small_sample:
        return neg2ll + 2 * k_all
    if n - k_all - 1 <= 0:
        return math.inf
    return neg2ll + 2 * k_all + 2 * k_all * (k_all + 1) / (n - k_all - 1)


def akaike_weights(scores: Sequence[float]) -> np.ndarray:
    s = np.asarray(scores, dtype=float)
    if not np.isfinite(s).any():
        return np.full(s.size, 1.0 / s.size)
    d = np.where(np.isfinite(s), s - np.min(s[np.isfinite(s)]), np.inf)
    w = np.exp(-0.5 * d)
    return w / w.sum()


def candidate(
    structure: Structure,
    batch: np.ndarray,
    tpot_s: np.ndarray,
    curve: Curve,
    rng: np.random.Generator | None = None,
    weight: np.ndarray | None = None,
    contexts: Contexts | None = None,
) -> Candidate:
    """A structure fitted: its model folded at the reference context with the law that moves it, the small-batch
    line (fitted on the points moved to the reference), and its residual at every point's own context."""
    contexts = contexts or Contexts()
    sm, support = structure.fit(tpot_s, rng)
    law = contexts.law(sm)
    folded = law.fold(sm) if law is not None else sm
    small, k_small = fit_small_batch(batch, contexts.reduced(batch, tpot_s, law), support, weight)
    pred, _ = evaluate_s(folded, small, curve, batch, contexts.values, law)
    return Candidate(structure.name, folded, small, structure.n_params + k_small, np.log(pred / tpot_s), law)


def check_pins(critical_batch: float | None, roof_tok_s: float | None) -> None:
    if critical_batch is not None and critical_batch <= 0:
        raise ParameterError(f"{{}} must be positive, got {critical_batch:g}", "critical_batch")
    if roof_tok_s is not None and roof_tok_s <= 0:
        raise ParameterError(f"{{}} must be positive, got {roof_tok_s:g}", "roof_tok_s")
    if critical_batch is not None and roof_tok_s is not None:
        raise ParameterError("give {} or {}, not both", "critical_batch", "roof_tok_s")


def fit_points(
    batch: np.ndarray,
    tpot_s: np.ndarray,
    prior: Prior | None = None,
    curve: Curve | None = None,
    critical_batch: float | None = None,
    roof_tok_s: float | None = None,
    n_samples: int = 200,
    seed: int = 0,
    evidence: Evidence | None = None,
    contexts: Contexts | None = None,
) -> Fit:
    """Fit (batch, TPOT in s) points, sorted by batch: every structure, AICc weights, interval samples.
    `evidence`: the rows behind each point (default: one each); `contexts`: their contexts (default: one,
    folded into the terms, moved to others by the prior's physics when there is one)."""
    check_pins(critical_batch, roof_tok_s)
    curve = curve or Curve()
    evidence = evidence or Evidence.single(batch.size)
    contexts = contexts or Contexts(prior=prior, reference=prior.context_tokens if prior is not None else 0.0)
    rng = np.random.default_rng(seed)
    states = [PriorFit(), PriorFit()]  # what each prior structure's central fit found in conflict
    structures = _structures(batch, tpot_s, prior, critical_batch, roof_tok_s, evidence, states, contexts)
    fitted = [candidate(s, batch, tpot_s, curve, weight=evidence.count, contexts=contexts) for s in structures]
    scores = [aicc(c.log_resid, c.n_params, evidence=evidence) for c in fitted]
    if not any(math.isfinite(x) for x in scores):  # too few points for the correction anywhere: plain AIC
        scores = [aicc(c.log_resid, c.n_params, small_sample=False, evidence=evidence) for c in fitted]
    left_out, unphysical = _unphysical(fitted, prior, float(batch.max()))
    scores = [math.inf if c.structure in left_out else x for c, x in zip(fitted, scores, strict=True)]
    weights = akaike_weights(scores)
    order = int(np.argmax(weights))
    best = fitted[order]
    log_fit = sum(w * c.log_resid for c, w in zip(fitted, weights, strict=True)) + np.log(tpot_s)
    sigma, noise = _noise(log_fit - np.log(tpot_s), evidence)
    counts = rng.multinomial(n_samples, weights) if n_samples > 0 else np.zeros(len(structures), dtype=int)
    samples, fitted_s = [], np.exp(log_fit)
    for structure, count in zip(structures, counts, strict=True):
        for _ in range(int(count)):
            noisy = fitted_s * np.exp(noise * rng.normal(size=batch.size))
            samples.append(candidate(structure, batch, noisy, curve, rng, evidence.count, contexts))
    shares = {c.structure: float(w) for c, w in zip(fitted, weights, strict=True)}
    reason = structures[order].why
    if len(fitted) > 1:
        reason += "; Akaike weights " + ", ".join(f"{name} {w:.0%}" for name, w in shares.items())
    if best.small is not None:
        reason += f"; batches ≤ {best.small.upto_batch:g} on their own line (small-batch kernels)"
    conflicts = list(dict.fromkeys(states[0].conflicts + states[1].conflicts + unphysical))
    span = (float(batch.min()), float(batch.max()))
    return Fit(
        best, fitted, shares, reason, prior, curve, samples, sigma, int(batch.size), span, conflicts, contexts=contexts
    )


def _unphysical(fitted: list[Candidate], prior: Prior | None, largest_batch: float) -> tuple[set[str], list[str]]:
    """With the physics known: the structures to leave out, and the conflicts to name. A data-only structure whose
    model claims a term faster than the hardware's peaks allow is left out (its weight goes to those the physics
    bounds); one bounded by the physics that still lands there sits on the floor and is named."""
    if prior is None:
        return set(), []
    left_out, conflicts = set(), []
    for c in fitted:
        claims = faster_than_peak(c.model, prior, largest_batch)
        if not claims:
            continue
        bounded = c.structure.startswith("prior")
        if not bounded:
            left_out.add(c.structure)
        conflicts.append(
            f"the {c.structure} fit puts {'; '.join(claims)} on {prior.label}: "
            + ("it sits at the peak" if bounded else "left out, the physics-bounded fits carry the answer")
            + "; if the model, hardware, dtype or --tp named is not what was measured, say so"
        )
    return left_out, conflicts


def _structures(
    batch: np.ndarray,
    tpot_s: np.ndarray,
    prior: Prior | None,
    critical_batch: float | None,
    roof_tok_s: float | None,
    evidence: Evidence,
    states: list[PriorFit],
    contexts: Contexts,
) -> list[Structure]:
    """The structures to weigh: the asserted one, or the line (none with the physics known: the compute term
    exists), the prior ones, and the roofline where the distinct batches are enough for a knee."""
    weight, ctx = evidence.count, contexts.values
    if critical_batch is not None or roof_tok_s is not None:
        return [pinned_structure(batch, prior, critical_batch, roof_tok_s, weight, ctx, contexts.reference)]
    structures = [line_structure(batch, weight, ctx)]
    if prior is not None:
        noise = local_noise(batch, tpot_s, evidence, ctx)
        structures = [prior_structure(batch, prior, noise, states[0], weight=weight, context=ctx)]
        if prior.overlap > 0:
            additive = replace(prior, overlap=0.0)
            structures.append(prior_structure(batch, additive, noise, states[1], "prior-additive", weight, ctx))
    if np.unique(batch).size >= MIN_ROOFLINE_POINTS:
        structures.append(roofline_structure(batch, weight, ctx))
    return structures


def _noise(log_resid: np.ndarray, evidence: Evidence) -> tuple[float, np.ndarray]:
    """The relative noise σ of one measured row (its misfit over all rows, at least NOISE_FLOOR), and the noise
    of each point for the interval samples: σ/√rows, but never below the points' own misfit (the structure's
    misfit does not average away over repeated rows)."""
    between = float(np.sum(evidence.count * log_resid**2))
    sigma = max(float(np.sqrt((between + float(evidence.log_ss.sum())) / evidence.rows)), NOISE_FLOOR)
    return sigma, np.maximum(float(np.sqrt(between / evidence.rows)), sigma / np.sqrt(evidence.count))


def local_noise(
    batch: np.ndarray, tpot_s: np.ndarray, evidence: Evidence | None = None, context: np.ndarray | None = None
) -> float:
    """Relative noise of one row, to weigh the data against the prior: the misfit of a line on the upper half
    (or on all points when the upper half is two), at least 2% (published curves repeat to ~1–3%); with several
    contexts, the line's slope grows with context."""
    evidence = evidence or Evidence.single(batch.size)
    part = upper_half(batch.size)
    part = part if batch[part].size > 2 else slice(0, batch.size)
    b, t, here = batch[part], tpot_s[part], evidence.cut(part)
    if context is None:
        a, s = fit_line(b, t, here.count)
        resid, params = np.log((a + s * b) / t), 2
    else:
        a, s0, k = fit_line_contexts(b, t, context[part], here.count)
        resid, params = np.log((a + (s0 + k * context[part]) * b) / t), 3
    dof = max(here.rows - params, 1)
    return max(float(np.sqrt(here.rss(resid) / dof)), 2 * NOISE_FLOOR)


def _queued(table: MeasurementTable) -> np.ndarray:
    """Whether each point (from the second), past a throughput plateau at client concurrency, waits in a queue
    (see `past_cap`)."""
    if table.semantics.queues:
        ttft = table.ttft_ms
        return np.ones(len(table) - 1, dtype=bool) if ttft is None else ttft[1:] > 2 * ttft[:-1]
    return table.tpot_ms[1:] < 1.05 * table.tpot_ms[:-1]


def _from_here(values: np.ndarray) -> np.ndarray:
    """The largest of values[i:] for every i."""
    return np.maximum.accumulate(values[::-1])[::-1]


def past_cap(table: MeasurementTable) -> Excluded | None:
    """Points past a cap the data show, by what the columns count (MeasurementTable.semantics).

    - running batch: the batch stops growing (every later point within 3%) while TPOT still moves (> 3% beyond
      what that growth allows: a step's time grows at most in proportion to the batch): the KV cache is full
      or a cap holds the batch; the later points measure preemption, not decode steps: left out.
    - client concurrency: throughput stops growing for good (every later point < 5% above, for ≥ 1.2× the
      concurrency) and TPOT (or ITL, which exclude queueing) stays flat: the server holds its running batch near
      throughput × TPOT. The points past it measure steps at that running batch and are fitted there. Flat
      throughput with a growing TPOT is a roof the running batch grew into, which the step model describes. An
      end-to-end TPOT grows either way: TTFT tells a queue (it grows) from a roof; without a TTFT column the points
      are taken as queued.
    A static batch whose throughput flattens is a compute or bandwidth roof, which the step model describes.
    """
    sem, b, thr, tpot = table.semantics, table.batch.astype(float), table.throughput_tok_s, table.tpot_ms
    if len(table) < 2 or sem.batch_kind == "static":
        return None
    if sem.batch_kind == "running":
        stalled = _from_here(b)[1:] < 1.03 * b[:-1]
        moved = tpot[-1] > 1.03 * tpot[:-1] * np.maximum(b[-1] / b[:-1], 1.0)
        hits = stalled & moved
        if not hits.any():
            return server_held(table)
    else:
        flat = (b[1:] >= 1.2 * b[:-1]) & (_from_here(thr)[1:] < 1.05 * thr[:-1])
        hits = flat & _queued(table)
    if not hits.any():
        return None
    i = int(np.argmax(hits)) + 1
    later = tuple(float(x) for x in b[i:])
    if sem.batch_kind == "running":
        return Excluded(
            later,
            f"the running batch stops growing at ≈{b[i - 1]:.4g} while TPOT moves "
            f"({tpot[i - 1]:.3g} → {tpot[-1]:.3g} ms): the KV cache is full or a cap holds "
            "the batch (preemption), so these points are not decode steps at their batch",
            float(b[i - 1]),
        )
    running = float(thr[i - 1] * tpot[i - 1] / 1e3) if not sem.queues else float(b[i - 1])
    what = "requests queue (their wait is in the end-to-end TPOT)" if sem.queues else "TPOT stays flat"
    return Excluded(
        later,
        f"throughput stops growing past concurrency {b[i - 1]:g}: the server holds its running batch near "
        f"{running:.4g} and {what}; these points are fitted as steps at that batch",
        min(running, float(b[i - 1])),
        left_out=False,
    )


SENT_BEYOND_HELD = 1.2  # a closed-loop client holding this many times the running batch the server ran: a cap held it


def server_held(table: MeasurementTable) -> Excluded | None:
    """A running-batch table whose client's concurrency (bench's column) grows past a batch that stops growing: the
    server's own cap (max_num_seqs, llama-server's slots) held the batch and the rest queued (their wait is TTFT). The
    points from there on are steps at that batch (fitted as they are), and the cap is the data's."""
    if table.concurrency is None or len(table) < 2 or not np.isfinite(table.concurrency).all():
        return None  # (rate rows beside the closed loops: their batch is no running batch the client held)
    b, c = table.batch.astype(float), table.concurrency
    held = (c[1:] >= SENT_BEYOND_HELD * b[1:]) & (_from_here(b)[1:] < 1.03 * b[:-1])
    if not held.any():
        return None
    i = int(np.argmax(held)) + 1
    cap = float(b[i - 1 :].max())
    ttft = ""
    if table.ttft_ms is not None and np.isfinite(table.ttft_ms[[i - 1, -1]]).all():
        ttft = f" (TTFT {table.ttft_ms[i - 1]:.4g} → {table.ttft_ms[-1]:.4g} ms)"
    return Excluded(
        tuple(float(x) for x in b[i:]),
        f"the running batch holds at ≈{cap:.4g} while the client's concurrency grows to {c[-1]:g}{ttft}: a server "
        "cap (max_num_seqs, slots) holds the batch and the rest queue; these points are steps at that batch",
        cap,
        left_out=False,
    )


def fit_table(
    table: MeasurementTable,
    prior: Prior | None = None,
    critical_batch: float | None = None,
    roof_tok_s: float | None = None,
    n_samples: int = 200,
    seed: int = 0,
) -> Fit:
    """Fit a measurement table: preempted points past a cap are left out (and named), points past a server cap are
    fitted as the steps at that cap, and the cap (the data's, else the memory's) turns the step model into TPOT as
    the table's TPOT counts it. Tables of more than MAX_POINTS distinct batches are fitted on bins (`pooled`).
    A table of several contexts is fitted as one model whose cost per sequence grows with context (`Contexts`);
    each context's curve is checked for a cap on its own."""
    points, tops = pooled(table, MAX_POINTS)
    several = points.several_contexts
    seen = _past_caps(points) if several else past_cap(points)
    keep = np.ones(len(points), dtype=bool)
    if seen is not None and seen.left_out:
        keep = ~np.isin(np.arange(len(points)), seen.indices(points))
        if several:  # preemption in some context's curve: its cap is not carried to the others
            seen = replace(seen, cap=None)
    if keep.sum() < 2:
        keep[:] = True
    batch, tpot_s = points.batch[keep].astype(float), ms_to_s(points.tpot_ms[keep])
    contexts = _contexts(points, keep, prior)
    queues, notes, capped = points.semantics.queues, [], False
    memory = seen is None or seen.cap is None  # the cap, if any, is the memory's (the prior's), not the data's
    cap = (prior.max_batch if prior is not None else None) if memory else seen.cap  # type: ignore[union-attr]
    scales = memory and cap is not None and several  # the memory's cap holds at the prior's context, shrinks past it
    # one context only: at several, what ran at each would be held against the cap moved to that context
    seen_running = running_seen(points.subset(keep)) if memory and not several and not queues else None
    raised_from = None
    if cap is not None and seen_running is not None and seen_running[0] > RAN_PAST_CAP * cap:
        ran, at = seen_running
        notes.append(
            f"the physics puts the memory cap at {cap:g} sequences, below the {ran:,.1f} the data show decoding at "
            f"once (throughput × TPOT at concurrency {at:g}), so the cap is taken there, a floor of what fits; check "
            "--context, --dtype and --kv-dtype"
        )
        raised_from, cap = cap, ran
    if cap is not None and points.semantics.batch_kind != "concurrency":
        held = batch * contexts.values / contexts.reference if scales and contexts.values is not None else batch
        if cap < held.max():
            if memory:
                raised_from = cap
                what = (
                    f" at a context of {contexts.reference:g}, below what the measured batches need there "
                    f"({held.max():.4g}): the memory held them"
                    if scales
                    else f", below the measured batch {batch.max():g}: the memory held it"
                )
                notes.append(
                    f"the physics puts the memory cap at {cap:g} sequences{what}, so the cap is taken there; check "
                    "--context, --dtype and --kv-dtype"
                )
            cap = float(held.max())
    elif cap is not None and cap < batch.max():  # the server ran `cap` sequences per step
        running = np.minimum(batch, cap)
        tpot_s = tpot_s * running / batch if queues else tpot_s
        batch, capped = running, True
    from_physics = cap is not None and memory
    curve = Curve(cap, queues, contexts.reference if from_physics else None, from_physics)
    evidence = Evidence(points.counts[keep], points.log_ss[keep])
    fit = fit_points(
        batch, tpot_s, prior, curve, critical_batch, roof_tok_s, n_samples, seed, evidence, contexts=contexts
    )
    if len(points) < len(table):  # binned: the rows span the range, not the bins' means
        top = float(tops[keep].max())
        fit.batch_range = (float(table.batch.min()), float(batch.max()) if capped else top)
    if points.context_tokens is not None:
        fit.context_range = (float(points.context_tokens[keep].min()), float(points.context_tokens[keep].max()))
        if several and not capped:
            levels, measured = points.levels[keep], points.context_tokens[keep]
            low, high = points.batch[keep], tops[keep]
            fit.context_batches = tuple(
                (
                    float(measured[levels == k].min()),
                    float(measured[levels == k].max()),
                    float(low[levels == k].min()),
                    float(high[levels == k].max()),
                )
                for k in np.unique(levels)
            )
    fit.excluded = seen
    fit.notes = notes
    fit.cap_raised_from = raised_from
    return fit


def running_seen(points: MeasurementTable) -> tuple[float, float] | None:
    """The most sequences a client-concurrency table shows decoding at once, and the concurrency it showed them at:
    throughput × TPOT (Little's law over the decode: each decoding sequence emits a token per TPOT), over the points
    that measured both columns and show no more running than were in flight. None: another batch kind, or no such
    point."""
    if points.semantics.batch_kind != "concurrency":
        return None
    both = (
        np.array([d == "" for d in points.derived])
        if len(points.derived) == len(points)
        else np.ones(len(points), bool)
    )
    running = points.throughput_tok_s * points.tpot_ms / 1e3
    both &= ~np.isclose(running, points.batch, rtol=1e-3)  # a column derived from the other: nothing to learn
    both &= running <= RAN_PAST_CONCURRENCY * points.batch
    if not both.any():
        return None
    i = int(np.flatnonzero(both)[np.argmax(running[both])])
    return float(running[i]), float(points.batch[i])


def _contexts(points: MeasurementTable, keep: np.ndarray, prior: Prior | None) -> Contexts:
    """The points' contexts for the fit: each point's (effective, with the prior) when the table holds several,
    the reference the terms fold at (the prior's context, else the points' mean, else the stated workload's)."""
    ctx = points.context_tokens
    if not points.several_contexts or ctx is None:
        if prior is not None:
            return Contexts(None, prior.context_tokens, prior)
        stated = float(ctx[keep].mean()) if ctx is not None else points.semantics.mean_context
        return Contexts(None, stated or 0.0, None)
    values = ctx[keep] if prior is None else prior.effective_context(ctx[keep])
    reference = prior.context_tokens if prior is not None else float(np.average(values, weights=points.counts[keep]))
    return Contexts(np.asarray(values, dtype=float), reference, prior)


def _past_caps(points: MeasurementTable) -> Excluded | None:
    """`past_cap` on each context's curve of a table of several. Preempted points (a running batch that stalls) are
    left out; a server's cap behind client concurrency is one server's max_num_seqs, the same at every context: the
    points past it are fitted as steps at the smallest cap the curves show."""
    levels, contexts = points.levels, points.level_contexts()
    found = []
    for level, context in enumerate(contexts):
        seen = past_cap(points.subset(levels == level))
        if seen is not None:
            found.append((context, seen))
    if not found:
        return None
    batches = tuple(b for _, seen in found for b in seen.batches)
    reason = "; ".join(f"at context {context:g}: {seen.reason}" for context, seen in found)
    at = tuple(context for context, seen in found for _ in seen.batches)
    if all(not seen.left_out for _, seen in found):
        cap = min(seen.cap for _, seen in found if seen.cap is not None)
        return Excluded(batches, reason, cap, False, at)
    return Excluded(batches, reason, None, True, at)
