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

from tokenroof.errors import TokenroofError
from tokenroof.measurements import MeasurementTable, pooled
from tokenroof.stepmodel import StepModel
from tokenroof.structures import (
    Prior,
    PriorFit,
    Structure,
    fit_line,
    line_structure,
    pinned_structure,
    prior_structure,
    roofline_structure,
    upper_half,
)
from tokenroof.units import ms_to_s

__all__ = ["Curve", "Excluded", "Fit", "FittedCurve", "Prior", "fit_points", "fit_table", "past_cap"]

NOISE_FLOOR = 0.01  # relative TPOT noise assumed at least this (benchmarks repeat to ~1–3%)
MIN_ROOFLINE_POINTS = 6
MAX_POINTS = 1024  # more distinct batches than this are fitted in bins (measurements.pooled)


@dataclass(frozen=True)
class SmallBatch:
    """The smallest batches' own line, below the batches the step model was fitted on."""

    upto_batch: float  # the largest measured batch of this regime
    support_batch: float  # the smallest batch the step model was fitted on
    intercept_s: float
    slope_s: float

    def apply(self, batch: np.ndarray, model_s: np.ndarray, model_at_support_s: float) -> np.ndarray:
        """TPOT (s): this regime's line up to `upto_batch`, then straight to the model at `support_batch`."""
        below = self.intercept_s + self.slope_s * batch
        top = self.intercept_s + self.slope_s * self.upto_batch
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


@dataclass(frozen=True)
class Curve:
    """What turns a step model into TPOT at a requested batch: the running-batch cap and what TPOT counts."""

    cap: float | None = None  # the running batch cannot exceed this (memory, or a server cap seen in the data)
    queues: bool = False  # TPOT includes the wait of queued requests (end-to-end per token), not only decode steps

    def running(self, batch: np.ndarray) -> np.ndarray:
        return batch if self.cap is None else np.minimum(batch, self.cap)

    def tpot_s(self, sm: StepModel, batch: np.ndarray) -> np.ndarray:
        running = self.running(batch)
        step = sm.step_time_s(running)
        return step * batch / running if self.queues else step

    def throughput_tok_s(self, batch: np.ndarray, tpot_s: np.ndarray) -> np.ndarray:
        """Output tokens per second: the running batch each step (an end-to-end TPOT counts the queue too)."""
        running = self.running(batch)
        return running / (tpot_s * running / batch if self.queues else tpot_s)


def evaluate_s(
    sm: StepModel, small: SmallBatch | None, curve: Curve, batch: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """TPOT (s) and throughput (tok/s) at `batch`: the step model, the small-batch line below it, the cap."""
    b = np.asarray(batch, dtype=float)
    tpot = curve.tpot_s(sm, b)
    if small is not None:
        at_support = float(curve.tpot_s(sm, np.array([small.support_batch]))[0])
        tpot = small.apply(b, tpot, at_support)
    return tpot, curve.throughput_tok_s(b, tpot)


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
class Excluded:
    """Points past a cap the data show: left out of the decode fit (preemption), or fitted as steps at the cap."""

    batches: tuple[float, ...]
    reason: str
    cap: float | None = None  # the running batch they show the server holding
    left_out: bool = True  # False: they measure steps at the cap and are fitted there


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

    @property
    def method(self) -> str:
        return self.best.structure

    @property
    def step_model(self) -> StepModel:
        return self.best.model

    @cached_property
    def _sample_models(self) -> list[StepModel]:
        return [c.model for c in self.samples]

    def sample_models(self) -> list[StepModel]:
        """The interval samples as step models (built once: predictions, the critical batch and plots share them)."""
        return self._sample_models

    def evaluate(self, batch: np.ndarray, candidate: Candidate | None = None) -> tuple[np.ndarray, np.ndarray]:
        """TPOT (s) and throughput at `batch`: one candidate's, or the Akaike-weighted (geometric) average."""
        if candidate is not None:
            return evaluate_s(candidate.model, candidate.small, self.curve, batch)
        b = np.asarray(batch, dtype=float)
        log_tpot = np.zeros_like(b)
        for c in self.candidates:
            log_tpot += self.weights[c.structure] * np.log(self.evaluate(b, c)[0])
        tpot = np.exp(log_tpot)
        return tpot, self.curve.throughput_tok_s(b, tpot)

    def as_step_time(self) -> FittedCurve:
        """The fitted curve where a step model is expected (advise): the weighted structures, small batches, cap."""
        return FittedCurve(self)

    def sample_curves(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TPOT (s) and throughput of every sample at `batch`: arrays (samples × batches)."""
        draws = [self.evaluate(batch, c) for c in self.samples] or [self.evaluate(batch)]
        return np.array([d[0] for d in draws]), np.array([d[1] for d in draws])


@dataclass(frozen=True)
class FittedCurve:
    """TPOT and throughput of a fit as functions of batch, with the step model's signature (context is folded
    into the fitted terms, so it is ignored)."""

    fit: Fit

    def step_time_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> np.ndarray:
        b = np.asarray(batch, dtype=float)
        return self.fit.evaluate(np.atleast_1d(b))[0].reshape(b.shape)

    def throughput_tok_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> np.ndarray:
        b = np.asarray(batch, dtype=float)
        return self.fit.evaluate(np.atleast_1d(b))[1].reshape(b.shape)


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
) -> Candidate:
    sm, support = structure.fit(tpot_s, rng)
    small, k_small = fit_small_batch(batch, tpot_s, support, weight)
    pred, _ = evaluate_s(sm, small, curve, batch)
    return Candidate(structure.name, sm, small, structure.n_params + k_small, np.log(pred / tpot_s))


def check_pins(critical_batch: float | None, roof_tok_s: float | None) -> None:
    if critical_batch is not None and critical_batch <= 0:
        raise TokenroofError(f"--critical-batch must be positive, got {critical_batch:g}")
    if roof_tok_s is not None and roof_tok_s <= 0:
        raise TokenroofError(f"--roof-tok-s must be positive, got {roof_tok_s:g}")
    if critical_batch is not None and roof_tok_s is not None:
        raise TokenroofError("give --critical-batch or --roof-tok-s, not both")


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
) -> Fit:
    """Fit (batch, TPOT in s) points, sorted by batch: every structure, AICc weights, interval samples.
    `evidence`: the rows behind each point (default: one each)."""
    check_pins(critical_batch, roof_tok_s)
    curve = curve or Curve()
    evidence = evidence or Evidence.single(batch.size)
    rng = np.random.default_rng(seed)
    states = [PriorFit(), PriorFit()]  # what each prior structure's central fit found in conflict
    structures = _structures(batch, tpot_s, prior, critical_batch, roof_tok_s, evidence, states)
    fitted = [candidate(s, batch, tpot_s, curve, weight=evidence.count) for s in structures]
    scores = [aicc(c.log_resid, c.n_params, evidence=evidence) for c in fitted]
    if not any(math.isfinite(x) for x in scores):  # too few points for the correction anywhere: plain AIC
        scores = [aicc(c.log_resid, c.n_params, small_sample=False, evidence=evidence) for c in fitted]
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
            samples.append(candidate(structure, batch, noisy, curve, rng, evidence.count))
    shares = {c.structure: float(w) for c, w in zip(fitted, weights, strict=True)}
    reason = structures[order].why
    if len(fitted) > 1:
        reason += "; Akaike weights " + ", ".join(f"{name} {w:.0%}" for name, w in shares.items())
    if best.small is not None:
        reason += f"; batches ≤ {best.small.upto_batch:g} on their own line (small-batch kernels)"
    conflicts = list(dict.fromkeys(states[0].conflicts + states[1].conflicts))
    span = (float(batch[0]), float(batch[-1]))
    return Fit(best, fitted, shares, reason, prior, curve, samples, sigma, int(batch.size), span, conflicts)


def _structures(
    batch: np.ndarray,
    tpot_s: np.ndarray,
    prior: Prior | None,
    critical_batch: float | None,
    roof_tok_s: float | None,
    evidence: Evidence,
    states: list[PriorFit],
) -> list[Structure]:
    """The structures to weigh: the asserted one, or the line (none with the physics known: the compute term
    exists), the prior ones, and the roofline where the distinct batches are enough for a knee."""
    weight = evidence.count
    if critical_batch is not None or roof_tok_s is not None:
        return [pinned_structure(batch, prior, critical_batch, roof_tok_s, weight)]
    structures = [line_structure(batch, weight)]
    if prior is not None:
        noise = local_noise(batch, tpot_s, evidence)
        structures = [prior_structure(batch, prior, noise, states[0], weight=weight)]
        if prior.overlap > 0:
            additive = replace(prior, overlap=0.0)
            structures.append(prior_structure(batch, additive, noise, states[1], "prior-additive", weight))
    if batch.size >= MIN_ROOFLINE_POINTS:
        structures.append(roofline_structure(batch, weight))
    return structures


def _noise(log_resid: np.ndarray, evidence: Evidence) -> tuple[float, np.ndarray]:
    """The relative noise σ of one measured row (its misfit over all rows, at least NOISE_FLOOR), and the noise
    of each point for the interval samples: σ/√rows, but never below the points' own misfit (the structure's
    misfit does not average away over repeated rows)."""
    between = float(np.sum(evidence.count * log_resid**2))
    sigma = max(float(np.sqrt((between + float(evidence.log_ss.sum())) / evidence.rows)), NOISE_FLOOR)
    return sigma, np.maximum(float(np.sqrt(between / evidence.rows)), sigma / np.sqrt(evidence.count))


def local_noise(batch: np.ndarray, tpot_s: np.ndarray, evidence: Evidence | None = None) -> float:
    """Relative noise of one row, to weigh the data against the prior: the misfit of a line on the upper half
    (or on all points when the upper half is two), at least 2% (published curves repeat to ~1–3%)."""
    evidence = evidence or Evidence.single(batch.size)
    part = upper_half(batch.size)
    part = part if batch[part].size > 2 else slice(0, batch.size)
    b, t, here = batch[part], tpot_s[part], evidence.cut(part)
    a, s = fit_line(b, t, here.count)
    resid = np.log((a + s * b) / t)
    dof = max(here.rows - 2, 1)
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
    the table's TPOT counts it. Tables of more than MAX_POINTS distinct batches are fitted on bins (`pooled`)."""
    points, ends = pooled(table, MAX_POINTS)
    seen = past_cap(points)
    keep = len(points) - (len(seen.batches) if seen is not None and seen.left_out else 0)
    if keep < 2:
        keep = len(points)
    batch, tpot_s = points.batch[:keep].astype(float), ms_to_s(points.tpot_ms[:keep])
    queues, notes, capped = points.semantics.queues, [], False
    cap = seen.cap if seen is not None else (prior.max_batch if prior is not None else None)
    if cap is not None and points.semantics.batch_kind != "concurrency" and cap < batch.max():
        if seen is None:
            notes.append(
                f"the physics puts the memory cap at {cap:g} sequences, below the measured batch {batch.max():g}: "
                "the memory held it, so the cap is taken there; check --context, --dtype and --kv-dtype"
            )
        cap = float(batch.max())
    elif cap is not None and cap < batch.max():  # the server ran `cap` sequences per step: fit the steps there
        running = np.minimum(batch, cap)
        tpot_s = tpot_s * running / batch if queues else tpot_s
        batch, capped = running, True
    evidence = Evidence(points.counts[:keep], points.log_ss[:keep])
    fit = fit_points(batch, tpot_s, prior, Curve(cap, queues), critical_batch, roof_tok_s, n_samples, seed, evidence)
    if len(points) < len(table):  # binned: the rows span the range, not the bins' means
        top = float(table.batch[ends[keep - 1] - 1])
        fit.batch_range = (float(table.batch[0]), float(batch.max()) if capped else top)
    fit.excluded = seen
    fit.notes = notes
    return fit
