"""Fit the step-time model to measured points.

Every fit starts from what the data determine best: the memory-bound line
`T = a + s·b` near the top of the measured range. The step model is piecewise
linear and convex in b, so the slope next to the largest measured batch governs
every prediction beyond it; the smallest batches run special-cased kernels
(batch-1 GEMV fast paths, CUDA-core kernels below ~8 rows, graph padding) that the
model does not describe, and a global line through them understates that slope.
The line is therefore fitted to the upper half of the points (at least two), and
what the data cannot show is added according to what is known:

- **data only**: nothing; or, with ≥ 6 points, the kinked roofline
  `T = f + max(W, b·c) + b·s` on all points when AICc prefers it (a knee seen in the data).
- **prior** (`--model`/`--hardware`): the physics adds the compute branch — the
  weights term `W = W_peak / e_w` (at most the intercept) and `c = c_peak / e_c`,
  so the knee sits at `W / c` — and the KV-cache capacity that caps the running
  batch. Intervals redraw `e_w` and `e_c` from log-normal priors around the default
  efficiencies (capped at 1: nothing beats the datasheet) as well as the data noise.
- **measured hardware**: a hardware file with measured efficiencies (`tokenroof
  calibrate`) also knows the cost per added sequence below the knee (KV reads at the
  measured attention bandwidth, plus the compute the GEMMs do not hide). The data's
  slope and that one are then combined by their precisions: the data's from its
  standard error at the fitted noise, the physics' from `sigma_log_slope`. A clean
  table keeps its own slope; two noisy points at small batches (a CPU's first half,
  where kernel selection and a shared machine's load move single points by 20%)
  give way to the measured physics (and drawing both for the intervals gives the
  combined slope's variance). Datasheet priors only floor the slope: the published
  serving curves' slopes run 1.1–6.8× (median 1.9×) the per-sequence cost at the
  default efficiencies (frameworks do per-sequence work the roofline does not
  count), so a datasheet slope is no centre.
- **pinned**: `--critical-batch N` asserts the knee (`c = W / N`), `--roof-tok-s X`
  the throughput asymptote (`c + s = 1/X`).

Times are seconds; residuals are relative (a 2% miss counts the same at 5 and 50 ms).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.optimize import nnls

from tokenroof.errors import TokenroofError
from tokenroof.measurements import MeasurementTable
from tokenroof.stepmodel import StepModel, queued_tpot_s
from tokenroof.units import ms_to_s

KNEE_GRID = np.geomspace(0.25, 1e5, 240)
NOISE_FLOOR = 0.01  # relative TPOT noise assumed at least this (benchmarks repeat to ~1–3%)
OVERHEAD_SHARE = 0.15  # without hardware: share of the intercept that is fixed overhead, not weights
OVERHEAD_SHARE_RANGE = (0.05, 0.35)


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

    @property
    def step_model(self) -> StepModel:
        return self.terms.step_model(self.prior)

    @cached_property
    def _sample_models(self) -> list[StepModel]:
        return [t.step_model(self.prior) for t in self.samples]

    def sample_models(self) -> list[StepModel]:
        """The interval samples as step models (built once: predictions, the critical batch and plots share them)."""
        return self._sample_models


# -- model evaluation -----------------------------------------------------------------
def predict_s(t: Terms, prior: Prior | None, batch: np.ndarray) -> np.ndarray:
    """TPOT in seconds, capped by the prior's KV-cache capacity when it has one (see `queued_tpot_s`)."""
    return queued_tpot_s(t.step_model(prior), batch, prior.max_batch if prior is not None else None)


def rel_residuals(t: Terms, prior: Prior | None, batch: np.ndarray, tpot_s: np.ndarray) -> np.ndarray:
    return predict_s(t, prior, batch) / tpot_s - 1.0


# -- the local line and the kinked roofline -----------------------------------------------
def upper_half(n: int) -> slice:
    """The points the local line is fitted to: the upper half by batch, at least two."""
    return slice(min(n // 2, n - 2), n)


def fit_line(batch: np.ndarray, tpot_s: np.ndarray) -> tuple[float, float]:
    """Intercept a and slope s ≥ 0 of T = a + s·b, relative least squares."""
    design = np.column_stack([np.ones_like(batch), batch]) / tpot_s[:, None]
    (a, s), _ = nnls(design, np.ones_like(batch))
    return float(a), float(s)


def fit_local_line(batch: np.ndarray, tpot_s: np.ndarray) -> tuple[float, float]:
    part = upper_half(batch.size)
    return fit_line(batch[part], tpot_s[part])


def line_noise(batch: np.ndarray, tpot_s: np.ndarray) -> float:
    """Relative noise about the local line: its rms misfit over the upper half, or over all points when the
    upper half is two points (a line through two points has no residual to speak of); at least 1%."""
    part = upper_half(batch.size)
    if batch[part].size > 2:
        a, s = fit_line(batch[part], tpot_s[part])
        resid, dof = (a + s * batch[part]) / tpot_s[part] - 1, batch[part].size - 2
    else:
        a, s = fit_line(batch, tpot_s)
        resid, dof = (a + s * batch) / tpot_s - 1, max(batch.size - 2, 1)
    return max(float(np.sqrt(resid @ resid / dof)), NOISE_FLOOR)


def combine_slope(batch: np.ndarray, tpot_s: np.ndarray, slope_prior_s: float, sigma_log: float) -> tuple[float, float]:
    """The local line with its slope combined with a prior slope by precision: (intercept, slope).

    The data's slope has variance σ²·[(XᵀX)⁻¹]₁₁ for the relative least squares X = [1, b]/T over the upper
    half at the noise σ of `line_noise`; the prior's is (sigma_log · slope_prior)². The intercept is refitted
    (relative least squares) at the combined slope.
    """
    part = upper_half(batch.size)
    b, t = batch[part], tpot_s[part]
    a, s = fit_line(b, t)
    design = np.column_stack([np.ones_like(b), b]) / t[:, None]
    var_data = line_noise(batch, tpot_s) ** 2 * float(np.linalg.pinv(design.T @ design)[1, 1])
    var_prior = (sigma_log * slope_prior_s) ** 2
    if var_prior <= 0:
        return a, s
    slope = (s * var_prior + slope_prior_s * var_data) / (var_data + var_prior)
    intercept = float(np.sum((1 - slope * b / t) / t) / np.sum(1 / t**2))
    return max(intercept, 0.0), float(slope)


def fit_kinked(batch: np.ndarray, tpot_s: np.ndarray) -> Terms:
    """T = f + W·max(1, b/knee) + s·b: for a fixed knee linear in (f, W, s) ≥ 0; profile over the knee."""
    best: tuple[float, Terms] | None = None
    for b0 in KNEE_GRID:
        design = np.column_stack([np.ones_like(batch), np.maximum(1.0, batch / b0), batch]) / tpot_s[:, None]
        (f, w, s), rnorm = nnls(design, np.ones_like(batch))
        if best is None or rnorm < best[0] - 1e-15:
            best = (rnorm, Terms(f, w, w / b0, s))
    assert best is not None
    return best[1]


def aicc(rss: float, n: int, k: int) -> float:
    if n - k - 1 <= 0:
        return math.inf
    return n * math.log(max(rss, 1e-300) / n) + 2 * k + 2 * k * (k + 1) / (n - k - 1)


def prefer_kinked(batch: np.ndarray, tpot_s: np.ndarray) -> tuple[Terms | None, str]:
    """The kinked roofline on all points if AICc prefers it to a line (≥ 6 points), else None and why."""
    n = batch.size
    if n < 6:
        return None, f"{n} points cannot support the 4-term roofline (AICc needs ≥ 6)"
    a, s = fit_line(batch, tpot_s)
    rss_line = float(np.sum((a / tpot_s + s * batch / tpot_s - 1) ** 2))
    kinked = fit_kinked(batch, tpot_s)
    rss_kink = float(np.sum(rel_residuals(kinked, None, batch, tpot_s) ** 2))
    a_line, a_kink = aicc(rss_line, n, 2), aicc(rss_kink, n, 4)
    if a_kink < a_line - 2:
        return kinked, f"a knee is seen in the data: kinked roofline preferred by AICc ({a_kink:.1f} vs {a_line:.1f})"
    return None, f"no knee in the data: AICc prefers a line ({a_line:.1f} vs kinked roofline {a_kink:.1f})"


# -- adding what the data cannot show -------------------------------------------------------
def physics_terms(
    a: float, s: float, prior: Prior, e_w: float, e_c: float, knee: float | None = None, roof_tok_s: float | None = None
) -> Terms:
    """The local line (a, s) plus the physics: W = W_peak/e_w (at most a), c = c_peak/e_c (or pinned)."""
    w_peak = prior.weights_floor.t_weights_s
    scale = min(1.0 / e_w, a / w_peak) if w_peak > 0 else 0.0
    fixed = max(a - scale * w_peak, 0.0)
    compute = prior.compute_floor_s / e_c
    if knee is not None:
        compute = scale * w_peak / knee
    if roof_tok_s is not None:
        compute = max(1.0 / roof_tok_s - s, 0.0)
    # below the knee the model's slope is per_seq + (1 − overlap)·compute: keep it the measured slope s, but
    # never below the KV traffic at peak bandwidth (a few sequences' KV can sit in a cache; a large batch's cannot)
    per_seq = max(s - (1.0 - prior.overlap) * compute, prior.per_seq_floor_s)
    return Terms(fixed, scale, compute, per_seq)


def pinned_terms(a: float, s: float, share: float, knee: float | None, roof_tok_s: float | None) -> Terms:
    """No hardware: the intercept is split into overhead (`share`) and weights; the roof is asserted."""
    w = (1 - share) * a
    compute = w / knee if knee is not None else max(1.0 / (roof_tok_s or math.inf) - s, 0.0)
    return Terms(share * a, w, compute, s)


def _lognormal(rng: np.random.Generator, center: float, sigma: float) -> float:
    return float(center * math.exp(sigma * rng.normal()))


def _lognormal_efficiency(rng: np.random.Generator, center: float, sigma: float) -> float:
    return min(_lognormal(rng, center, sigma), 1.0)


# -- entry point ------------------------------------------------------------------------
def check_pins(critical_batch: float | None, roof_tok_s: float | None) -> None:
    if critical_batch is not None and critical_batch <= 0:
        raise TokenroofError(f"--critical-batch must be positive, got {critical_batch:g}")
    if roof_tok_s is not None and roof_tok_s <= 0:
        raise TokenroofError(f"--roof-tok-s must be positive, got {roof_tok_s:g}")
    if critical_batch is not None and roof_tok_s is not None:
        raise TokenroofError("give --critical-batch or --roof-tok-s, not both")


def fit_table(
    table: MeasurementTable,
    prior: Prior | None = None,
    critical_batch: float | None = None,
    roof_tok_s: float | None = None,
    n_samples: int = 200,
    seed: int = 0,
) -> Fit:
    """Fit the step model to a table (TPOT is the step time), with samples for intervals."""
    check_pins(critical_batch, roof_tok_s)
    batch, tpot_s = running_steps(table.batch.astype(float), ms_to_s(table.tpot_ms), prior)
    rng = np.random.default_rng(seed)
    pinned = critical_batch is not None or roof_tok_s is not None
    make: Callable[[np.ndarray, bool], Terms]
    if prior is not None:
        method = "prior"
        reason = (
            f"memory-bound line from the upper half of the points; compute branch and capacity from the "
            f"physics of {prior.label}"
        )

        if prior.sigma_log_slope is not None:
            reason += (
                "; slope per sequence: the data's and the measured hardware's "
                f"({prior.slope_center_s * 1e3:.3g} ms) combined by their precisions"
            )

        def make(t: np.ndarray, draw: bool) -> Terms:
            if prior.sigma_log_slope is not None:
                center = prior.slope_center_s
                slope_prior = _lognormal(rng, center, prior.sigma_log_slope) if draw else center
                a, s = combine_slope(batch, t, slope_prior, prior.sigma_log_slope)
            else:
                a, s = fit_local_line(batch, t)
            e_w = (
                _lognormal_efficiency(rng, prior.bandwidth_center, prior.sigma_log_bandwidth)
                if draw
                else min(prior.bandwidth_center, 1.0)
            )
            e_c = (
                _lognormal_efficiency(rng, prior.compute_center, prior.sigma_log_compute)
                if draw
                else min(prior.compute_center, 1.0)
            )
            return physics_terms(a, s, prior, e_w, e_c, critical_batch, roof_tok_s)
    elif pinned:
        method = "pinned"
        reason = (
            "knee asserted at batch " + f"{critical_batch:g} (--critical-batch)"
            if critical_batch is not None
            else f"throughput asymptote asserted at {roof_tok_s:g} tok/s (--roof-tok-s)"
        )
        reason += (
            f"; memory-bound line from the upper half of the points; overhead taken as {OVERHEAD_SHARE:.0%} of "
            "the intercept"
        )

        def make(t: np.ndarray, draw: bool) -> Terms:
            a, s = fit_local_line(batch, t)
            share = rng.uniform(*OVERHEAD_SHARE_RANGE) if draw else OVERHEAD_SHARE
            return pinned_terms(a, s, share, critical_batch, roof_tok_s)
    else:
        kinked, why = prefer_kinked(batch, tpot_s)
        if kinked is not None:
            method, reason = "roofline", why

            def make(t: np.ndarray, draw: bool) -> Terms:
                return fit_kinked(batch, t)
        else:
            method, reason = "line", f"{why}: memory-bound line T = a + s·b from the upper half of the points"

            def make(t: np.ndarray, draw: bool) -> Terms:
                a, s = fit_local_line(batch, t)
                return Terms(0.0, a, 0.0, s)

    terms = make(tpot_s, False)
    sigma = noise_level(batch, tpot_s, terms, prior)
    fitted = predict_s(terms, prior, batch)
    # relative noise drawn log-normally: a noisy table never yields a non-positive TPOT to refit
    samples = [make(fitted * np.exp(sigma * rng.normal(size=batch.size)), True) for _ in range(n_samples)]
    return Fit(terms, method, reason, prior, samples, sigma, int(batch.size))


def running_steps(batch: np.ndarray, tpot_s: np.ndarray, prior: Prior | None) -> tuple[np.ndarray, np.ndarray]:
    """Points past the memory cap measure the step at the cap (requests queue): map them there.

    A point at batch b > cap with TPOT T ran `cap` sequences per step, each step taking T·cap/b;
    several such points are averaged into one point at the cap.
    """
    cap = prior.max_batch if prior is not None else None
    if cap is None or not np.any(batch > cap):
        return batch, tpot_s
    over = batch > cap
    at_cap = float(np.mean(tpot_s[over] * cap / batch[over]))
    below = ~over & (batch < cap)
    if int(below.sum()) < 1:  # nothing measured below the cap: keep the points as they are
        return batch, tpot_s
    steps = np.append(tpot_s[below], at_cap)
    return np.append(batch[below], float(cap)), steps


def noise_level(batch: np.ndarray, tpot_s: np.ndarray, terms: Terms, prior: Prior | None) -> float:
    """Relative noise for the interval samples: the rms misfit over the points the fit used, at least 1%."""
    part = upper_half(batch.size)
    if batch[part].size <= 2:
        return line_noise(batch, tpot_s)
    resid = rel_residuals(terms, prior, batch[part], tpot_s[part])
    return max(float(np.sqrt(resid @ resid / (resid.size - 2))), NOISE_FLOOR)
