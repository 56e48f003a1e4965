"""Fit the step-time model to measured points: one likelihood, a small family of structures, physics as a prior.

The likelihood: every measured TPOT is the model's times a log-normal error of one
relative size σ (estimated from the fit, at least 1%). Every structure predicts every
point, its residual is counted over all points, and structures are weighed by AICc
(Akaike weights), so the answer says which structure carried it and how surely.

Each structure is the step model of stepmodel.py fitted to a *support* of points,
plus a **small-batch regime** for the points below that support: the smallest
batches run special-cased kernels (batch-1 GEMV paths, CUDA-core kernels below ~8
rows, graph padding) whose cost the roofline does not describe, so they get their own
line `T = a + s·b` and are neither missed nor allowed to bend the slope that governs
every prediction beyond the data. The structures:

- **line** — `T = a + s·b` on the upper half of the points (at least two): the
  memory-bound regime, extrapolated by the slope next to the largest measured batch.
- **roofline** — `T = f + max(W, b·c) + s·b` on all points (six or more): a knee
  seen in the data.
- **prior** (`--model/--hardware`) — the same roofline on the upper half, with the
  physics as a proper prior, never an added term: `W = W_peak / e_w` and
  `c = c_peak·(1 + in/out) / e_c` (a step's GEMMs also carry the prompts of arriving
  requests), the efficiencies log-normal around the hardware file's or the default
  centres and never above 1, the cost per sequence never below the KV traffic at peak
  bandwidth. The maximum a posteriori fit lets the data set what they show (a knee
  among the points sets `c`); the prior sets the rest. When the data put an
  efficiency outside the prior's 99% band the fit says so, names the term, and lets
  the data win (the prior on it is widened tenfold).
- **pinned** — `--critical-batch N` asserts the knee (`c = W / N`), `--roof-tok-s X`
  the throughput asymptote (`c + s = 1/X`).

Intervals come from refitting noisy copies of the fitted curve (noise at σ, the
prior's centres redrawn), the copies shared among the structures by their weights;
`intervals.py` widens them with distance past the data, calibrated on published
curves. Times are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import OptimizeResult, least_squares, nnls

from tokenroof.errors import TokenroofError
from tokenroof.measurements import MeasurementTable
from tokenroof.stepmodel import StepModel
from tokenroof.units import ms_to_s

KNEE_GRID = np.geomspace(0.25, 1e5, 240)
SAMPLE_KNEE_GRID = np.geomspace(0.25, 1e5, 60)  # refits of interval samples: coarser, 4× faster
NOISE_FLOOR = 0.01  # relative TPOT noise assumed at least this (benchmarks repeat to ~1–3%)
OVERHEAD_SHARE = 0.15  # without hardware: share of the intercept that is fixed overhead, not weights
OVERHEAD_SHARE_RANGE = (0.05, 0.35)
CONFLICT_Z = 2.576  # two-sided 99% band of a log-normal prior
CONFLICT_WIDEN = 10.0
MIN_ROOFLINE_POINTS = 6


@dataclass(frozen=True)
class Prior:
    """First-principles terms at 100% of the peaks, and the prior on the efficiencies."""

    weights_floor: StepModel  # W(b) at 100% bandwidth (t_weights_s, t_expert_s, experts)
    compute_floor_s: float  # c at 100% of peak FLOP/s (matmuls + attention at the context)
    per_seq_floor_s: float  # KV reads + KV write + all-reduce per sequence, at the peaks
    fixed_floor_s: float  # all-reduce latency per step
    prefill_floor_s: float = 0.0  # prompt compute carried per decode step per sequence, at peak FLOP/s
    bandwidth_center: float = 0.75
    compute_center: float = 0.75
    sigma_log_bandwidth: float = 0.35
    sigma_log_compute: float = 0.5
    flops_per_token: float = 0.0  # per GPU, for "the asserted roof implies X% of peak"
    peak_flops_per_s: float = 0.0
    label: str = ""
    max_batch: int | None = None  # largest batch the memory holds (None: unknown)
    overlap: float = 1.0  # StepModel.overlap of the hardware (1: roofline max; calibrated CPUs: ~0)
    slope_center_s: float = 0.0  # dT/db below the knee at the centre efficiencies
    sigma_log_slope: float | None = None  # spread of that slope when the efficiencies were measured; None: floor only
    context_tokens: float = 0.0  # mean context the per-sequence terms were folded at

    @property
    def step_compute_floor_s(self) -> float:
        """GEMM time per running sequence at peak: its decode token plus the prompt share it carries."""
        return self.compute_floor_s + self.prefill_floor_s


@dataclass(frozen=True)
class Terms:
    """Fitted terms, the per-sequence time folded at the measured context."""

    fixed_s: float
    weights_scale: float  # W(b) = scale · weights shape (shape = 1 s for data-only fits)
    compute_s: float
    per_seq_s: float

    def step_model(self, prior: Prior | None) -> StepModel:
        if prior is None:
            return StepModel(self.fixed_s, self.weights_scale, self.compute_s, 0.0, self.per_seq_s)
        wf = prior.weights_floor
        return StepModel(
            self.fixed_s,
            wf.t_weights_s * self.weights_scale,
            self.compute_s,
            0.0,
            self.per_seq_s,
            t_expert_s=wf.t_expert_s * self.weights_scale,
            num_experts=wf.num_experts,
            experts_per_token=wf.experts_per_token,
            overlap=prior.overlap,
        )


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


def evaluate_s(
    sm: StepModel, small: SmallBatch | None, curve: Curve, batch: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """TPOT (s) and throughput (tok/s) at `batch`: the step model, the small-batch line below it, the cap."""
    b = np.asarray(batch, dtype=float)
    tpot = curve.tpot_s(sm, b)
    if small is not None:
        at_support = float(curve.tpot_s(sm, np.array([small.support_batch]))[0])
        tpot = small.apply(b, tpot, at_support)
    running = curve.running(b)
    throughput = running / (tpot * running / b if curve.queues else tpot)
    return tpot, throughput


# -- relative least squares ------------------------------------------------------------
def fit_line(batch: np.ndarray, tpot_s: np.ndarray) -> tuple[float, float]:
    """Intercept a and slope s ≥ 0 of T = a + s·b, relative least squares."""
    design = np.column_stack([np.ones_like(batch), batch]) / tpot_s[:, None]
    (a, s), _ = nnls(design, np.ones_like(batch))
    return float(a), float(s)


def upper_half(n: int) -> slice:
    """The support of the local structures: the upper half of the points by batch, at least two."""
    return slice(min(n // 2, n - 2), n)


def fit_kinked(batch: np.ndarray, tpot_s: np.ndarray, grid: np.ndarray = KNEE_GRID) -> Terms:
    """T = f + W·max(1, b/knee) + s·b: for a fixed knee linear in (f, W, s) ≥ 0; profile over the knee."""
    best: tuple[float, Terms] | None = None
    for b0 in grid:
        design = np.column_stack([np.ones_like(batch), np.maximum(1.0, batch / b0), batch]) / tpot_s[:, None]
        (f, w, s), rnorm = nnls(design, np.ones_like(batch))
        if best is None or rnorm < best[0] - 1e-15:
            best = (rnorm, Terms(f, w, w / b0, s))
    assert best is not None
    return best[1]


def fit_small_batch(batch: np.ndarray, tpot_s: np.ndarray, support: slice) -> tuple[SmallBatch | None, int]:
    """The line of the points below the support (and its parameter count): two or more distinct batches get a
    line, one batch a level; at the support's first batch the model takes over."""
    below = np.arange(batch.size) < (support.start or 0)
    if not below.any():
        return None, 0
    b, t = batch[below], tpot_s[below]
    if np.unique(b).size >= 2:
        a, s = fit_line(b, t)
        params = 2
    else:
        s = 0.0
        a = float(np.exp(np.mean(np.log(t))))
        params = 1
    return SmallBatch(float(b.max()), float(batch[support][0]), a, s), params


# -- structures ---------------------------------------------------------------------------
Refit = Callable[[np.ndarray, np.random.Generator | None], tuple[StepModel, slice]]


@dataclass(frozen=True)
class Structure:
    """A named step-model structure: how to fit it to (batch, TPOT) and on which points."""

    name: str
    n_params: int
    fit: Refit  # (tpot_s, rng or None for the central fit) → terms and the support they were fitted on
    why: str


def line_structure(batch: np.ndarray) -> Structure:
    part = upper_half(batch.size)

    def fit(t: np.ndarray, rng: np.random.Generator | None) -> tuple[StepModel, slice]:
        a, s = fit_line(batch[part], t[part])
        return Terms(0.0, a, 0.0, s).step_model(None), part

    return Structure(
        "line", 2, fit, "memory-bound line T = a + s·b through the upper half of the points (the local slope)"
    )


def roofline_structure(batch: np.ndarray) -> Structure:
    every = slice(0, batch.size)

    def fit(t: np.ndarray, rng: np.random.Generator | None) -> tuple[StepModel, slice]:
        return fit_kinked(batch, t, KNEE_GRID if rng is None else SAMPLE_KNEE_GRID).step_model(None), every

    return Structure("roofline", 4, fit, "roofline with a knee T = f + max(W, b·c) + s·b through all points")


def pinned_structure(batch: np.ndarray, prior: Prior | None, knee: float | None, roof_tok_s: float | None) -> Structure:
    part = upper_half(batch.size)
    asserted = (
        f"knee asserted at batch {knee:g} (--critical-batch)"
        if knee is not None
        else f"throughput asymptote asserted at {roof_tok_s:g} tok/s (--roof-tok-s)"
    )

    def fit(t: np.ndarray, rng: np.random.Generator | None) -> tuple[StepModel, slice]:
        a, s = fit_line(batch[part], t[part])
        if prior is not None:
            e_w = (
                prior.bandwidth_center if rng is None else _draw(rng, prior.bandwidth_center, prior.sigma_log_bandwidth)
            )
            w_peak = prior.weights_floor.t_weights_s
            scale = min(1.0 / min(e_w, 1.0), a / w_peak) if w_peak > 0 else 0.0
            w, fixed = scale * w_peak, max(a - scale * w_peak, 0.0)
        else:
            share = OVERHEAD_SHARE if rng is None else rng.uniform(*OVERHEAD_SHARE_RANGE)
            scale = w = (1 - share) * a
            fixed = share * a
        compute = w / knee if knee is not None else max(1.0 / (roof_tok_s or math.inf) - s, 0.0)
        overlap = prior.overlap if prior is not None else 1.0
        per_seq = max(s - (1.0 - overlap) * compute, prior.per_seq_floor_s if prior is not None else 0.0)
        return Terms(fixed, scale, compute, per_seq).step_model(prior), part

    how = (
        "weights from the physics" if prior is not None else f"overhead taken as {OVERHEAD_SHARE:.0%} of the intercept"
    )
    return Structure("pinned", 3, fit, f"{asserted}; memory-bound line from the upper half of the points; {how}")


def _draw(rng: np.random.Generator, center: float, sigma: float) -> float:
    return float(center * math.exp(sigma * rng.normal()))


@dataclass
class PriorFit:
    """State of the maximum a posteriori fit: which priors the data overruled."""

    conflicts: list[str] = field(default_factory=list)


def prior_structure(batch: np.ndarray, prior: Prior, noise: float, state: PriorFit, name: str = "prior") -> Structure:
    """The roofline on the upper half with log-normal priors on the efficiencies (MAP, bounded least squares).

    Prior–data conflict: the fit is first made with every prior widened tenfold (the data speak); a term whose
    value there lies outside its prior's 99% band is named, and its prior stays widened in the final fit.
    """
    part = upper_half(batch.size)
    b = batch[part]
    w_peak = prior.weights_floor.t_weights_s
    c_peak = prior.step_compute_floor_s
    centers = {"bandwidth": prior.bandwidth_center, "compute": prior.compute_center, "slope": prior.slope_center_s}
    sigmas = {"bandwidth": prior.sigma_log_bandwidth, "compute": prior.sigma_log_compute}
    if prior.sigma_log_slope is not None and prior.slope_center_s > 0:
        sigmas["slope"] = prior.sigma_log_slope
    widen = dict.fromkeys(sigmas, 1.0)

    def model(theta: np.ndarray) -> Terms:
        fixed, per_seq, log_ew, log_ec = theta
        return Terms(fixed, math.exp(-log_ew), c_peak / math.exp(log_ec), per_seq)

    def logs(theta: np.ndarray) -> dict[str, float]:
        """Each prior's variable, in logs: the efficiencies, and the slope per sequence below the knee."""
        slope = theta[1] + (1 - prior.overlap) * model(theta).compute_s
        return {"bandwidth": theta[2], "compute": theta[3], "slope": math.log(max(slope, 1e-15))}

    def solve_full(t: np.ndarray, center: dict[str, float], scale: dict[str, float]) -> OptimizeResult:
        def residuals(theta: np.ndarray) -> np.ndarray:
            pred = model(theta).step_model(prior).step_time_s(b)
            values = logs(theta)
            pulls = [(values[k] - math.log(center[k])) / (sigmas[k] * scale[k]) for k in sigmas]
            return np.concatenate([np.log(pred / t[part]) / noise, pulls])

        a, s = fit_line(b, t[part])
        floor_s = prior.per_seq_floor_s
        ew0 = min(center["bandwidth"], 1.0, a / w_peak if w_peak > 0 else 1.0)
        x0 = np.array(
            [
                max(a - w_peak / max(ew0, 1e-6), 0.0),
                max(s, floor_s),
                math.log(max(ew0, 1e-6)),
                math.log(min(center["compute"], 1.0)),
            ]
        )
        lower = np.array([0.0, floor_s, -np.inf, -np.inf])
        upper = np.array([np.inf, np.inf, 0.0, 0.0])
        x0 = np.clip(x0, lower + 1e-15, upper - 1e-12)
        return least_squares(residuals, x0, bounds=(lower, upper), x_scale="jac")

    def solve(t: np.ndarray, center: dict[str, float], scale: dict[str, float]) -> np.ndarray:
        return np.asarray(solve_full(t, center, scale).x)

    def spread(result: OptimizeResult) -> dict[str, float]:
        """Standard errors of each prior's variable in the data-led fit (delta method on the Gauss-Newton
        covariance): a conflict is judged against the data's uncertainty as well as the prior's."""
        theta, jac = result.x, result.jac
        cov = np.linalg.pinv(jac.T @ jac)
        base = logs(theta)
        out = {}
        for key in sigmas:
            grad = np.zeros(theta.size)
            for i in range(theta.size):
                step = 1e-6 * max(abs(theta[i]), 1e-9)
                moved = theta.copy()
                moved[i] += step
                grad[i] = (logs(moved)[key] - base[key]) / step
            out[key] = float(np.sqrt(max(float(grad @ cov @ grad), 0.0)))
        return out

    def fit(t: np.ndarray, rng: np.random.Generator | None) -> tuple[StepModel, slice]:
        if rng is None:
            led = solve_full(t, centers, dict.fromkeys(sigmas, CONFLICT_WIDEN))
            free, se = logs(led.x), spread(led)
            state.conflicts = []
            for term, sigma in sigmas.items():
                z = (free[term] - math.log(centers[term])) / math.hypot(sigma, se[term])
                widen[term] = CONFLICT_WIDEN if abs(z) > CONFLICT_Z else 1.0
                if abs(z) > CONFLICT_Z:
                    what = (
                        f"the slope per sequence at {math.exp(free[term]) * 1e3:.3g} ms (the prior's "
                        f"{centers[term] * 1e3:.3g} ms)"
                        if term == "slope"
                        else f"the {term} efficiency at {math.exp(free[term]):.0%} (the prior's {centers[term]:.0%})"
                    )
                    state.conflicts.append(
                        f"the data put {what}, outside the prior's 99% band ({z:+.1f} σ): the data win (that prior "
                        f"is widened {CONFLICT_WIDEN:g}×); check --model/--hardware/--dtype/--tp and the workload"
                    )
            theta = solve(t, centers, widen)
        else:
            drawn = {k: _draw(rng, centers[k], sigmas[k] * widen[k]) for k in sigmas}
            theta = solve(t, {**centers, **drawn}, widen)
        return model(theta).step_model(prior), part

    why = f"roofline through the upper half of the points with the physics of {prior.label} as a prior"
    return Structure(name, 2, fit, why)


@dataclass(frozen=True)
class Excluded:
    """Points left out of the decode fit, and why."""

    batches: tuple[float, ...]
    reason: str
    cap: float | None = None  # the running batch they show the server holding


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
    excluded: Excluded | None = None  # points past a cap, left out

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
        running = self.curve.running(b)
        return tpot, running / (tpot * running / b if self.curve.queues else tpot)

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


def aicc(log_resid: np.ndarray, k: int) -> float:
    """AICc of a log-normal likelihood with the noise estimated (floored at NOISE_FLOOR): k + 1 parameters;
    infinite where the points cannot support them (a structure then weighs nothing, or all weigh alike)."""
    n = log_resid.size
    k_all = k + 1
    if n - k_all - 1 <= 0:
        return math.inf
    sigma2 = max(float(log_resid @ log_resid) / n, NOISE_FLOOR**2)
    neg2ll = float(log_resid @ log_resid) / sigma2 + n * math.log(sigma2)
    return neg2ll + 2 * k_all + 2 * k_all * (k_all + 1) / (n - k_all - 1)


def akaike_weights(scores: Sequence[float]) -> np.ndarray:
    s = np.asarray(scores, dtype=float)
    if not np.isfinite(s).any():
        return np.full(s.size, 1.0 / s.size)
    d = np.where(np.isfinite(s), s - np.min(s[np.isfinite(s)]), np.inf)
    w = np.exp(-0.5 * d)
    return w / w.sum()


def candidate(
    structure: Structure, batch: np.ndarray, tpot_s: np.ndarray, curve: Curve, rng: np.random.Generator | None = None
) -> Candidate:
    sm, support = structure.fit(tpot_s, rng)
    small, k_small = fit_small_batch(batch, tpot_s, support)
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
) -> Fit:
    """Fit (batch, TPOT in s) points, sorted by batch: every structure, AICc weights, interval samples."""
    check_pins(critical_batch, roof_tok_s)
    curve = curve or Curve()
    rng = np.random.default_rng(seed)
    state = PriorFit()
    structures: list[Structure]
    if critical_batch is not None or roof_tok_s is not None:
        structures = [pinned_structure(batch, prior, critical_batch, roof_tok_s)]
    else:
        # with the physics known the compute term exists (efficiencies ≤ 1): no bare line
        structures = [line_structure(batch)]
        if prior is not None:
            noise = local_noise(batch, tpot_s)
            structures = [prior_structure(batch, prior, noise, state)]
            if prior.overlap > 0:
                additive = replace(prior, overlap=0.0)
                structures.append(prior_structure(batch, additive, noise, PriorFit(), "prior-additive"))
        if batch.size >= MIN_ROOFLINE_POINTS:
            structures.append(roofline_structure(batch))
    fitted = [candidate(s, batch, tpot_s, curve) for s in structures]
    weights = akaike_weights([aicc(c.log_resid, c.n_params) for c in fitted])
    order = int(np.argmax(weights))
    best = fitted[order]
    log_fit = sum(w * c.log_resid for c, w in zip(fitted, weights, strict=True)) + np.log(tpot_s)
    sigma = max(float(np.sqrt(np.mean((log_fit - np.log(tpot_s)) ** 2))), NOISE_FLOOR)
    fitted_s = np.exp(log_fit)
    counts = rng.multinomial(n_samples, weights) if n_samples > 0 else np.zeros(len(structures), dtype=int)
    samples = []
    for structure, count in zip(structures, counts, strict=True):
        for _ in range(int(count)):
            noisy = fitted_s * np.exp(sigma * rng.normal(size=batch.size))
            samples.append(candidate(structure, batch, noisy, curve, rng))
    shares = {c.structure: float(w) for c, w in zip(fitted, weights, strict=True)}
    reason = structures[order].why
    if len(fitted) > 1:
        reason += "; Akaike weights " + ", ".join(f"{name} {w:.0%}" for name, w in shares.items())
    if best.small is not None:
        reason += f"; batches ≤ {best.small.upto_batch:g} on their own line (small-batch kernels)"
    return Fit(
        best,
        fitted,
        shares,
        reason,
        prior,
        curve,
        samples,
        sigma,
        int(batch.size),
        (float(batch[0]), float(batch[-1])),
        list(state.conflicts),
    )


def local_noise(batch: np.ndarray, tpot_s: np.ndarray) -> float:
    """Relative noise to weigh the data against the prior: the misfit of a line on the upper half (or on all
    points when the upper half is two), at least 2% (published curves repeat to ~1–3%)."""
    part = upper_half(batch.size)
    b, t = (batch[part], tpot_s[part]) if batch[part].size > 2 else (batch, tpot_s)
    a, s = fit_line(b, t)
    resid = np.log((a + s * b) / t)
    dof = max(b.size - 2, 1)
    return max(float(np.sqrt(resid @ resid / dof)), 2 * NOISE_FLOOR)


def past_cap(table: MeasurementTable) -> Excluded | None:
    """Points past a cap the data show, by what the columns count (MeasurementTable.semantics).

    - running batch: the batch stops growing (within 3%) while TPOT still moves: the KV cache is full or a cap
      holds the batch; the later points measure preemption, not decode steps.
    - client concurrency: throughput stops growing (< 5% for ≥ 1.2× the batch): the server holds its running batch;
      past it TPOT is flat (TPOT, ITL exclude queueing) or grows as batch ÷ throughput (end-to-end per token).
    A static batch whose throughput flattens is a compute or bandwidth roof, which the step model describes.
    """
    sem, b, thr = table.semantics, table.batch.astype(float), table.throughput_tok_s
    for i in range(1, len(table)):
        stalled = bool(np.all(b[i:] < 1.03 * b[i - 1]))
        moved = table.tpot_ms[-1] > 1.03 * table.tpot_ms[i - 1]
        if sem.batch_kind == "running" and stalled and moved:
            return Excluded(
                tuple(float(x) for x in b[i:]),
                f"the running batch stops growing at ≈{b[i - 1]:.4g} while TPOT moves "
                f"({table.tpot_ms[i - 1]:.3g} → {table.tpot_ms[-1]:.3g} ms): the KV cache is full or a cap holds "
                "the batch (preemption), so these points are not decode steps at their batch",
                float(b[i - 1]),
            )
        if sem.batch_kind == "concurrency" and b[i] >= 1.2 * b[i - 1] and thr[i] < 1.05 * thr[i - 1]:
            running = float(thr[i - 1] * table.tpot_ms[i - 1] / 1e3) if not sem.queues else float(b[i - 1])
            what = "requests queue (their wait is in the end-to-end TPOT)" if sem.queues else "TPOT stays flat"
            return Excluded(
                tuple(float(x) for x in b[i:]),
                f"throughput stops growing past concurrency {b[i - 1]:g}: the server holds its running batch near "
                f"{running:.4g} and {what}; these points are past that cap",
                running,
            )
    return None


def fit_table(
    table: MeasurementTable,
    prior: Prior | None = None,
    critical_batch: float | None = None,
    roof_tok_s: float | None = None,
    n_samples: int = 200,
    seed: int = 0,
) -> Fit:
    """Fit a measurement table: points past a cap the data show are left out (and named), and the cap (the data's,
    else the memory's) turns the step model into TPOT as the table's TPOT counts it."""
    excluded = past_cap(table)
    keep = len(table) - (len(excluded.batches) if excluded else 0)
    if excluded is not None and keep < 2:
        excluded, keep = None, len(table)
    batch, tpot_s = table.batch[:keep].astype(float), ms_to_s(table.tpot_ms[:keep])
    cap = excluded.cap if excluded is not None else (prior.max_batch if prior is not None else None)
    queues = table.semantics.queues
    if cap is not None and table.semantics.batch_kind == "running" and cap < batch.max():
        cap = float(batch.max())  # a running batch was measured there: memory held it
    elif cap is not None and cap < batch.max():  # the server ran `cap` sequences per step: fit the steps there
        running = np.minimum(batch, cap)
        tpot_s = tpot_s * running / batch if queues else tpot_s
        batch = running
    fit = fit_points(batch, tpot_s, prior, Curve(cap, queues), critical_batch, roof_tok_s, n_samples, seed)
    fit.excluded = excluded
    return fit
