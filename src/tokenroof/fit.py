"""Fit the step-time model to measured points.

Three ways, chosen by what is known (DESIGN.md "From measurements"):

- **prior**: model and hardware known. The first-principles terms at 100% of the
  peaks are hard floors (nothing runs faster than the datasheet) and the default
  efficiencies are log-normal prior centres; the fit is the MAP estimate and its
  uncertainty comes from randomize-then-optimize (data noise and prior centres
  redrawn each replicate), so terms the data cannot see (a knee beyond the last
  point) keep their prior width.
- **data only**: a memory-bound line `T = a + s·b` against the kinked roofline
  `T = f + max(W, b·c) + b·s`, chosen by AICc (the kinked model needs ≥ 6 points and
  a clear gain to be preferred); intervals by parametric bootstrap.
- **pinned**: `--critical-batch N` asserts the knee (W = N·c) or `--roof-tok-s X`
  the throughput asymptote (1/(c+s) = X); the rest is fitted.

Times are seconds; residuals are relative (a 2% miss counts the same at 5 and 50 ms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize, nnls

from tokenroof.errors import TokenroofError
from tokenroof.measurements import MeasurementTable
from tokenroof.stepmodel import StepModel
from tokenroof.units import ms_to_s

KNEE_GRID = np.geomspace(0.25, 1e5, 240)
NOISE_FLOOR = 0.01  # relative TPOT noise assumed at least this (benchmarks repeat to ~1–3%)
MAP_SIGMA = 0.04  # relative misfit the prior fit allows: benchmark noise (1–3%) plus what the step model misses


@dataclass(frozen=True)
class Prior:
    """First-principles floors (100% of peaks, no overhead) and the prior on efficiencies."""

    weights_floor: StepModel  # only t_weights_s / t_expert_s / experts used: W(b) at 100% bandwidth
    compute_floor_s: float  # c at 100% of peak FLOP/s (matmuls + attention at the context)
    per_seq_floor_s: float  # KV reads + KV write + all-reduce per sequence, at the peaks
    fixed_floor_s: float  # all-reduce latency per step
    prefill_floor_s: float = 0.0  # prompt compute carried per decode step per sequence, at peak FLOP/s
    bandwidth_center: float = 0.75
    compute_center: float = 0.75
    per_seq_center: float = 0.7  # per-sequence kernels (paged attention) relative to weight streaming
    fixed_center_s: float = 1e-3
    sigma_log_weights: float = 0.35
    sigma_log_compute: float = 0.5
    sigma_log_per_seq: float = 0.5
    sigma_log_fixed: float = 1.5
    flops_per_token: float = 0.0  # per GPU, for "the asserted roof implies X% of peak"
    peak_flops_per_s: float = 0.0
    label: str = ""
    max_batch: int | None = None  # largest batch the memory holds (None: unknown)

    def weights_at_peak_s(self, batch: np.ndarray) -> np.ndarray:
        return self.weights_floor.weights_time_s(batch)


@dataclass(frozen=True)
class Terms:
    """Fitted terms with the per-sequence memory time folded at the measured context."""

    fixed_s: float
    weights_scale: float  # W(b) = scale · weights shape (shape = 1 for data-only fits)
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
        )


@dataclass
class Fit:
    """The fitted model, how it was chosen, and samples for intervals."""

    terms: Terms
    method: str
    reason: str
    prior: Prior | None
    samples: list[Terms]
    sigma_rel: float
    n_fit: int
    warnings: list[str] = field(default_factory=list)

    @property
    def step_model(self) -> StepModel:
        return self.terms.step_model(self.prior)

    def sample_models(self) -> list[StepModel]:
        return [t.step_model(self.prior) for t in self.samples]


# -- model evaluation -----------------------------------------------------------------
def shape_of(prior: Prior | None, batch: np.ndarray) -> np.ndarray:
    """Weights time per unit scale at each batch (1 for dense data-only fits)."""
    if prior is None:
        return np.ones_like(batch)
    return prior.weights_at_peak_s(batch)


def predict_s(t: Terms, prior: Prior | None, batch: np.ndarray) -> np.ndarray:
    """TPOT in seconds. Beyond the prior's memory cap the running batch stays at the cap and requests
    queue, so throughput is flat and TPOT (= batch / throughput) grows with the queue."""
    cap = prior.max_batch if prior is not None else None
    running = batch if cap is None else np.minimum(batch, cap)
    shape = shape_of(prior, running)
    step = t.fixed_s + np.maximum(t.weights_scale * shape, running * t.compute_s) + running * t.per_seq_s
    return step * batch / running


def rel_residuals(t: Terms, prior: Prior | None, batch: np.ndarray, tpot_s: np.ndarray) -> np.ndarray:
    return predict_s(t, prior, batch) / tpot_s - 1.0


# -- data-only fits (profile likelihood over the knee, NNLS inside) ---------------------
def fit_line(batch: np.ndarray, tpot_s: np.ndarray) -> Terms:
    """T = a + s·b with a, s ≥ 0, relative least squares."""
    design = np.column_stack([np.ones_like(batch), batch]) / tpot_s[:, None]
    (a, s), _ = nnls(design, np.ones_like(batch))
    return Terms(0.0, a, 0.0, s)


def fit_kinked(batch: np.ndarray, tpot_s: np.ndarray, knee: float | None = None) -> Terms:
    """T = f + W·max(1, b/knee) + s·b: for a fixed knee it is linear in (f, W, s) ≥ 0; profile over the knee."""
    best: tuple[float, Terms] | None = None
    for b0 in KNEE_GRID if knee is None else [knee]:
        design = np.column_stack([np.ones_like(batch), np.maximum(1.0, batch / b0), batch]) / tpot_s[:, None]
        (f, w, s), rnorm = nnls(design, np.ones_like(batch))
        if best is None or rnorm < best[0] - 1e-15:
            best = (rnorm, Terms(f, w, w / b0, s))
    assert best is not None
    return best[1]


def fit_roof_pinned(batch: np.ndarray, tpot_s: np.ndarray, roof_tok_s: float) -> Terms:
    """Asymptote pinned: c + s = 1/roof. Profile over the knee and the split of 1/roof into c and s."""
    total = 1.0 / roof_tok_s
    best: tuple[float, Terms] | None = None
    for frac in np.linspace(0.02, 1.0, 50):
        c = frac * total
        s = total - c
        for b0 in KNEE_GRID:
            w = b0 * c
            pred_wo_f = np.maximum(w, batch * c) + batch * s
            f = max(0.0, float(np.sum((1 - pred_wo_f / tpot_s) / tpot_s) / np.sum(1 / tpot_s**2)))
            terms = Terms(f, w, c, s)
            rss = float(np.sum(rel_residuals(terms, None, batch, tpot_s) ** 2))
            if best is None or rss < best[0]:
                best = (rss, terms)
    assert best is not None
    return best[1]


def aicc(rss: float, n: int, k: int) -> float:
    if n - k - 1 <= 0:
        return math.inf
    return n * math.log(max(rss, 1e-300) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


def choose_data_only(batch: np.ndarray, tpot_s: np.ndarray) -> tuple[Terms, str, str, int]:
    """Line or kinked roofline by AICc; returns terms, method, reason and the number of parameters."""
    line = fit_line(batch, tpot_s)
    rss_line = float(np.sum(rel_residuals(line, None, batch, tpot_s) ** 2))
    n = batch.size
    if n < 6:
        return (
            line,
            "line",
            (
                f"{n} points cannot support the 4-term roofline (AICc needs ≥ 6): fitted the "
                "memory-bound line T = a + s·b"
            ),
            2,
        )
    kinked = fit_kinked(batch, tpot_s)
    rss_kink = float(np.sum(rel_residuals(kinked, None, batch, tpot_s) ** 2))
    a_line, a_kink = aicc(rss_line, n, 2), aicc(rss_kink, n, 4)
    if a_kink < a_line - 2:
        return kinked, "roofline", f"kinked roofline preferred by AICc ({a_kink:.1f} vs line {a_line:.1f})", 4
    return line, "line", f"memory-bound line preferred by AICc ({a_line:.1f} vs roofline {a_kink:.1f})", 2


# -- prior (MAP) fit --------------------------------------------------------------------
def _unpack(x: np.ndarray, prior: Prior) -> Terms:
    f, uw, uc, us = np.exp(x)
    # KV reads use the same HBM as the weights: their time scales with the fitted bandwidth efficiency
    # times a kernel factor; the prefill share is compute and scales with the compute efficiency.
    per_seq = prior.per_seq_floor_s * uw * us + prior.prefill_floor_s * uc
    return Terms(f, uw, prior.compute_floor_s * uc, per_seq)


def _centers(prior: Prior) -> np.ndarray:
    return np.log(
        [prior.fixed_center_s, 1 / prior.bandwidth_center, 1 / prior.compute_center, 1 / prior.per_seq_center]
    )


def _sigmas(prior: Prior) -> np.ndarray:
    return np.array([prior.sigma_log_fixed, prior.sigma_log_weights, prior.sigma_log_compute, prior.sigma_log_per_seq])


def fit_map(
    batch: np.ndarray,
    tpot_s: np.ndarray,
    prior: Prior,
    centers: np.ndarray | None = None,
    knee: float | None = None,
    roof_tok_s: float | None = None,
    start: np.ndarray | None = None,
) -> tuple[Terms, np.ndarray]:
    """MAP: relative residuals / MAP_SIGMA plus Gaussian priors on log inverse-efficiencies and log overhead.

    Returns the terms and the optimum in log space; `start` (a previous optimum) skips the multi-start
    search, as the interval replicates do.
    """
    mu = _centers(prior) if centers is None else centers
    sig = _sigmas(prior)
    lower = np.log([max(prior.fixed_floor_s, 1e-7), 1.0, 1.0, 1.0])

    def terms_of(x: np.ndarray) -> Terms:
        t = _unpack(x, prior)
        if knee is not None:  # W(knee) = knee · c  →  c from the weights scale
            w_at_knee = t.weights_scale * float(shape_of(prior, np.array([knee], dtype=float))[0])
            t = Terms(t.fixed_s, t.weights_scale, w_at_knee / knee, t.per_seq_s)
        if roof_tok_s is not None:
            t = Terms(t.fixed_s, t.weights_scale, t.compute_s, max(1.0 / roof_tok_s - t.compute_s, 0.0))
        return t

    def objective(x: np.ndarray) -> float:
        r = rel_residuals(terms_of(x), prior, batch, tpot_s) / MAP_SIGMA
        p = (x - mu) / sig
        return float(r @ r + p @ p)

    starts = [np.maximum(mu, lower)]
    if start is not None:
        starts = [start]
    else:
        for uc in (0.0, 1.0, 2.5):
            for uw in (0.0, 0.3, 1.0):
                starts.append(np.maximum(np.array([mu[0], uw, uc, mu[3]]), lower))
    best = None
    for x0 in starts:
        res = minimize(objective, x0, method="L-BFGS-B", bounds=[(lo, lo + 25) for lo in lower])
        if best is None or res.fun < best.fun:
            best = res
    assert best is not None
    return terms_of(best.x), best.x


# -- entry point ------------------------------------------------------------------------
def fit_table(
    table: MeasurementTable,
    prior: Prior | None = None,
    critical_batch: float | None = None,
    roof_tok_s: float | None = None,
    n_samples: int = 200,
    seed: int = 0,
) -> Fit:
    """Fit the step model to a table (TPOT is the step time); samples for intervals."""
    if critical_batch is not None and critical_batch <= 0:
        raise TokenroofError(f"--critical-batch must be positive, got {critical_batch:g}")
    if roof_tok_s is not None and roof_tok_s <= 0:
        raise TokenroofError(f"--roof-tok-s must be positive, got {roof_tok_s:g}")
    if critical_batch is not None and roof_tok_s is not None:
        raise TokenroofError("give --critical-batch or --roof-tok-s, not both")
    batch, tpot_s = table.batch.astype(float), ms_to_s(table.tpot_ms)
    rng = np.random.default_rng(seed)
    pinned = critical_batch is not None or roof_tok_s is not None
    if prior is not None:
        terms, x_map = fit_map(batch, tpot_s, prior, knee=critical_batch, roof_tok_s=roof_tok_s)
        method, k = "prior", 1
        reason = f"physics prior from {prior.label}: efficiencies fitted within the datasheet peaks"

        def refit(noisy: np.ndarray) -> Terms:
            centers = _centers(prior) + rng.normal(size=4) * _sigmas(prior)
            return fit_map(batch, noisy, prior, centers, critical_batch, roof_tok_s, x_map)[0]
    elif pinned:
        method, k = "pinned", 2
        if critical_batch is not None:
            terms = fit_pinned_knee(batch, tpot_s, critical_batch)
            reason = f"knee asserted at batch {critical_batch:g} (--critical-batch); the rest fitted"

            def refit(noisy: np.ndarray) -> Terms:
                return fit_pinned_knee(batch, noisy, critical_batch, rng.uniform(0.05, 0.35))
        else:
            assert roof_tok_s is not None
            terms = fit_roof_pinned(batch, tpot_s, roof_tok_s)
            reason = f"throughput asymptote asserted at {roof_tok_s:g} tok/s (--roof-tok-s); the rest fitted"

            def refit(noisy: np.ndarray) -> Terms:
                return fit_roof_pinned(batch, noisy, roof_tok_s)
    else:
        terms, method, reason, k = choose_data_only(batch, tpot_s)
        chosen = method

        def refit(noisy: np.ndarray) -> Terms:
            return fit_line(batch, noisy) if chosen == "line" else fit_kinked(batch, noisy)

    resid = rel_residuals(terms, prior, batch, tpot_s)
    dof = max(batch.size - k, 1)
    sigma = max(float(np.sqrt(resid @ resid / dof)), NOISE_FLOOR)
    fitted = predict_s(terms, prior, batch)
    samples = [refit(fitted * (1 + sigma * rng.normal(size=batch.size))) for _ in range(n_samples)]
    return Fit(terms, method, reason, prior, samples, sigma, int(batch.size))


def fit_pinned_knee(batch: np.ndarray, tpot_s: np.ndarray, knee: float, share: float = 0.15) -> Terms:
    """Knee asserted, no hardware: T = f + W·max(1, b/knee) + s·b, with the overhead share fixed.

    The intercept a = f + W is measured but its split is not; without a hardware
    prior the fixed overhead is taken as 15% of it (engines spend ~1 ms of a
    5–15 ms batch-1 step outside the weight-streaming kernels); interval samples draw
    it from 5–35%. Linear in (a, s) ≥ 0.
    """
    design = np.column_stack([share + (1 - share) * np.maximum(1.0, batch / knee), batch]) / tpot_s[:, None]
    (a, s), _ = nnls(design, np.ones_like(batch))
    w = (1 - share) * a
    return Terms(share * a, w, w / knee, s)
