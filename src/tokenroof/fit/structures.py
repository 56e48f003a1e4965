"""The structures `fit` weighs: the step model's shapes, each with how to fit it to (batch, TPOT) points.

- **line** — `T = a + s·b` on the upper half of the points (at least two): the
  memory-bound regime, extrapolated by the slope next to the largest measured batch.
- **roofline** — `T = f + max(W, b·c) + s·b` on all points: a knee seen in the data
  (profiled over the knee, non-negative least squares at each).
- **prior** (`--model/--hardware`) — the same roofline on the upper half, with the
  physics as a proper prior, never an added term: `W = W_peak / e_w` and
  `c = c_peak·(1 + in/out) / e_c` (a step's GEMMs also carry the prompts of arriving
  requests), the efficiencies log-normal around the hardware file's or the default
  centres and never above 1, the cost per sequence never below the KV traffic at peak
  bandwidth, and with a calibrated hardware file a log-normal prior on the slope per
  sequence too. The maximum a posteriori fit (bounded least squares with the priors as
  pseudo-residuals) lets the data set what they show — points past the knee set `c` —
  and the prior sets the rest. **prior-additive** is the same with the GEMMs' compute
  added to the weight stream instead of hidden under it (StepModel.overlap 0): real
  kernels lie between, and only points past the knee tell them apart.
- **pinned** — `--critical-batch N` asserts the knee (`c = W / N`), `--roof-tok-s X`
  the throughput asymptote (`c + s = 1/X`).

With several measured contexts (a table keyed (batch, context)) every structure also fits
the per-sequence cost's growth with context: `s·b` becomes `(s₀ + k·ctx)·b`, k ≥ 0 the KV
reads per context token (a column b·ctx beside the others; with the physics, the attention
FLOPs per context token ride on the compute term at the fitted compute efficiency). Structures
return such models whole (`t_kv_token_s`, `t_attn_token_s`); `ContextLaw` folds them at a
reference context and moves them to others.

Relative least squares throughout: a 2% miss counts the same at 5 and 50 ms; a point counts as often as
the measured rows behind it (`weight`). Times are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import OptimizeResult, least_squares, nnls

from tokenroof.model.stepmodel import StepModel, matmul_time_s
from tokenroof.specs.modelspec import held_context

KNEE_GRID = np.geomspace(0.25, 1e5, 240)
SAMPLE_KNEE_GRID = np.geomspace(0.25, 1e5, 60)  # refits of interval samples: coarser, 4× faster
OVERHEAD_SHARE = 0.15  # without hardware: share of the intercept that is fixed overhead, not weights
OVERHEAD_SHARE_RANGE = (0.05, 0.35)
CONFLICT_Z = 2.576  # two-sided 99% band of a log-normal prior
CONFLICT_WIDEN = 10.0
KNEE_TOLERANCE = 1e-9  # knees whose normal-equation misfit is this near the least (× the total weight) are refit
MIN_EFFICIENCY = 1e-9  # the efficiencies' floor in the MAP fit: keeps the optimiser's trial steps finite
FLOOR_TOLERANCE = 0.8  # a measured slope this far below the KV floor contradicts the stated context


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
    prefill_ratio: float = 0.0  # prompt tokens sharing each step's GEMMs per running sequence (online: in/out)
    max_positions: int | None = None  # the model's longest context (max_position_embeddings; None: not stated)
    kv_bandwidth_ratio: float = 1.0  # the KV reads' bandwidth efficiency over the weights' (engine profiles)
    layer_windows: tuple[int | None, ...] = ()  # the model's attention window per layer (None: global; () all global)

    @property
    def step_compute_floor_s(self) -> float:
        """GEMM time per running sequence at peak: its decode token plus the prompt share it carries."""
        return self.compute_floor_s + self.prefill_floor_s

    def effective_context(self, context: np.ndarray | float) -> np.ndarray:
        """Mean KV tokens a layer reads at `context` (sliding-window layers hold their window;
        ModelSpec.effective_context)."""
        return held_context(self.layer_windows, context)


PEAK_TOLERANCE = 0.01  # a fitted term may come this close to its physical floor (rounding), no closer


def faster_than_peak(sm: StepModel, prior: Prior, largest_batch: float) -> list[str]:
    """What a fitted model (folded at the prior's context) claims faster than the hardware's peaks allow: streaming
    the weights above peak bandwidth, GEMMs above peak FLOP/s where its knee lies inside the measured batches (past
    them the data bound the compute only from above), KV reads per sequence above peak bandwidth. Empty: none."""
    floor = prior.weights_floor
    found = []
    weights_floor = float(floor.weights_time_s(1.0))
    if float(sm.weights_time_s(1.0)) < (1 - PEAK_TOLERANCE) * weights_floor:
        found.append(
            f"the weight stream {sm.weights_time_s(1.0) * 1e3:.3g} ms per step, faster than peak bandwidth allows "
            f"({weights_floor * 1e3:.3g} ms)"
        )
    knee = sm.knee_batch(0.0)
    if (
        knee is not None
        and knee <= largest_batch
        and sm.t_compute_s < (1 - PEAK_TOLERANCE) * prior.step_compute_floor_s
    ):
        found.append(
            f"compute {sm.t_compute_s * 1e6:.3g} µs per sequence past a knee at batch {knee:.3g}, faster than peak "
            f"FLOP/s allows ({prior.step_compute_floor_s * 1e6:.3g} µs)"
        )
    if sm.t_seq_s + sm.t_compute_s < (1 - PEAK_TOLERANCE) * prior.per_seq_floor_s:
        found.append(
            f"{(sm.t_seq_s + sm.t_compute_s) * 1e6:.3g} µs per sequence, less than its KV reads take at peak bandwidth "
            f"({prior.per_seq_floor_s * 1e6:.3g} µs)"
        )
    return found


@dataclass(frozen=True)
class ContextLaw:
    """How a model folded at `reference_tokens` moves with context: per sequence, `kv_token_s` of KV reads and
    `attn_token_s` of attention compute per (effective) context token. `source`: "data" (fitted across the
    measured contexts) or "physics" (one measured context: the prior's KV and attention at the fitted
    efficiencies)."""

    reference_tokens: float
    kv_token_s: float = 0.0
    attn_token_s: float = 0.0
    source: str = "data"

    @classmethod
    def of(cls, sm: StepModel, reference_tokens: float) -> ContextLaw:
        """The law a whole model (t_kv_token_s, t_attn_token_s set) carries."""
        return cls(reference_tokens, sm.t_kv_token_s, sm.t_attn_token_s)

    def fold(self, sm: StepModel) -> StepModel:
        """A whole model with its context terms folded in at the reference (unchanged when it has none)."""
        ref = self.reference_tokens
        return replace(
            sm,
            t_seq_s=sm.t_seq_s + sm.t_kv_token_s * ref,
            t_compute_s=sm.t_compute_s + sm.t_attn_token_s * ref,
            t_kv_token_s=0.0,
            t_attn_token_s=0.0,
        )

    def whole(self, folded: StepModel) -> StepModel:
        """The folded model with the law's context terms split out: at the reference it is the folded one."""
        ref = self.reference_tokens
        return replace(
            folded,
            t_seq_s=folded.t_seq_s - self.kv_token_s * ref,
            t_compute_s=folded.t_compute_s - self.attn_token_s * ref,
            t_kv_token_s=self.kv_token_s,
            t_attn_token_s=self.attn_token_s,
        )

    def at(self, folded: StepModel, context: float) -> StepModel:
        """The folded model folded instead at `context` (effective tokens)."""
        return ContextLaw(context).fold(self.whole(folded))


def physics_law(folded: StepModel, prior: Prior) -> ContextLaw | None:
    """One measured context: KV reads per context token at the fitted bandwidth efficiency (what the weights stream
    at, times the engine's KV-to-weights ratio), attention per context token at the fitted compute efficiency; the
    KV reads never more than the whole per-sequence cost the fitted model shows at the measured context (a data-only
    structure may carry it as compute past a low knee), the attention never more than the compute."""
    ref = prior.context_tokens
    if ref <= 0:
        return None
    peak = prior.weights_floor
    e_bandwidth = min(peak.t_weights_s / folded.t_weights_s, 1.0) if folded.t_weights_s > 0 else prior.bandwidth_center
    kv_read = peak.t_kv_token_s / (e_bandwidth * prior.kv_bandwidth_ratio)
    kv = min(kv_read, max(folded.t_seq_s + folded.t_compute_s, 0.0) / ref)
    attn = 0.0
    if folded.t_compute_s > 0 and prior.step_compute_floor_s > 0:
        attn = min(peak.t_attn_token_s * folded.t_compute_s / prior.step_compute_floor_s, folded.t_compute_s / ref)
    return ContextLaw(ref, kv, attn, "physics")


@dataclass(frozen=True)
class Terms:
    """Fitted terms, the per-sequence time folded at the measured context (or, with `kv_token_s`, split: the
    per-sequence time at context 0 and the KV reads per context token)."""

    fixed_s: float
    weights_scale: float  # W(b) = scale · weights shape (shape = 1 s for data-only fits)
    compute_s: float
    per_seq_s: float
    kv_token_s: float = 0.0

    def step_model(self, prior: Prior | None) -> StepModel:
        if prior is None:
            return StepModel(self.fixed_s, self.weights_scale, self.compute_s, self.kv_token_s, self.per_seq_s)
        wf = prior.weights_floor
        return StepModel(
            self.fixed_s,
            wf.t_weights_s * self.weights_scale,
            self.compute_s,
            self.kv_token_s,
            self.per_seq_s,
            t_expert_s=wf.t_expert_s * self.weights_scale,
            num_experts=wf.num_experts,
            experts_per_token=wf.experts_per_token,
            overlap=prior.overlap,
        )


# -- relative least squares ------------------------------------------------------------
# Each point weighs the rows behind it (`weight`, None: one each): its relative residual is scaled by √weight.
def _root(batch: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    return np.ones_like(batch) if weight is None else np.sqrt(weight)


def fit_line(batch: np.ndarray, tpot_s: np.ndarray, weight: np.ndarray | None = None) -> tuple[float, float]:
    """Intercept a and slope s ≥ 0 of T = a + s·b, relative least squares."""
    root = _root(batch, weight)
    design = np.column_stack([np.ones_like(batch), batch]) / tpot_s[:, None] * root[:, None]
    (a, s), _ = nnls(design, root)
    return float(a), float(s)


def fit_line_contexts(
    batch: np.ndarray, tpot_s: np.ndarray, context: np.ndarray, weight: np.ndarray | None = None
) -> tuple[float, float, float]:
    """Intercept a, slope s₀ and KV cost per context token k, all ≥ 0, of T = a + (s₀ + k·ctx)·b."""
    root = _root(batch, weight)
    design = np.column_stack([np.ones_like(batch), batch, batch * context]) / tpot_s[:, None] * root[:, None]
    (a, s, k), _ = nnls(design, root)
    return float(a), float(s), float(k)


def upper_half(n: int) -> slice:
    """The support of the local structures: the upper half of the points by batch, at least two."""
    return slice(min(n // 2, n - 2), n)


def fit_kinked(
    batch: np.ndarray,
    tpot_s: np.ndarray,
    grid: np.ndarray = KNEE_GRID,
    weight: np.ndarray | None = None,
    context: np.ndarray | None = None,
) -> Terms:
    """T = f + W·max(1, b/knee) + s·b: for a fixed knee linear in (f, W, s) ≥ 0; profile over the knee.

    Every knee's misfit comes at once from the normal equations (`_knee_misfits`); the knees within rounding of
    the least are then solved exactly (non-negative least squares on the points), the first least one kept.
    With `context` (several measured contexts), s·b is (s₀ + k·ctx)·b.
    """
    if context is not None:
        return _fit_kinked_contexts(batch, tpot_s, grid, weight, context)
    root = _root(batch, weight)
    approx = _knee_misfits(batch, tpot_s, root, grid)
    near = np.flatnonzero(approx <= approx.min() + KNEE_TOLERANCE * float(root @ root))
    beyond = batch.max() <= grid[near]  # past every point: one design, whatever the knee
    near = np.concatenate([near[~beyond], near[beyond][:1]])
    best: tuple[float, Terms] | None = None
    for b0 in grid[np.sort(near)]:
        design = np.column_stack([np.ones_like(batch), np.maximum(1.0, batch / b0), batch]) / tpot_s[:, None]
        (f, w, s), rnorm = nnls(design * root[:, None], root)
        if best is None or rnorm < best[0] - 1e-15:
            best = (rnorm, Terms(f, w, w / b0, s))
    assert best is not None
    return best[1]


def _fit_kinked_contexts(
    batch: np.ndarray, tpot_s: np.ndarray, grid: np.ndarray, weight: np.ndarray | None, context: np.ndarray
) -> Terms:
    """`fit_kinked` with the column b·ctx: non-negative least squares at every knee past the smallest batch (a
    table of several contexts is small: no prefix-sum shortcut)."""
    root = _root(batch, weight)
    knees = np.concatenate([grid[grid < batch.max()], grid[grid >= batch.max()][:1]])
    best: tuple[float, Terms] | None = None
    for b0 in knees:
        columns = [np.ones_like(batch), np.maximum(1.0, batch / b0), batch, batch * context]
        design = np.column_stack(columns) / tpot_s[:, None] * root[:, None]
        (f, w, s, k), rnorm = nnls(design, root)
        if best is None or rnorm < best[0] - 1e-15:
            best = (rnorm, Terms(f, w, w / b0, s, k))
    assert best is not None
    return best[1]


def _knee_misfits(batch: np.ndarray, tpot_s: np.ndarray, root: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The least squared relative misfit of T = f + W·max(1, b/knee) + s·b, (f, W, s) ≥ 0, at every knee.

    Columns u = x (x = √weight / T), v = x·max(1, b/knee), z = x·b against the target √weight: below the knee
    v = u, above it v = z / knee, so each knee's normal equations are prefix sums over the points by batch.
    """
    order = np.argsort(batch, kind="stable")
    b, x, y = batch[order], (root / tpot_s)[order], root[order]
    terms = np.column_stack([x * x, x * x * b, x * x * b * b, x * y, x * y * b])  # uu, uz, zz, hu, hz per point
    prefix = np.vstack([np.zeros(5), np.cumsum(terms, axis=0)])
    below = prefix[np.searchsorted(b, grid, side="right")]  # points with b ≤ knee
    above = prefix[-1] - below
    c = 1.0 / grid
    uu, uz, zz = below[:, 0] + above[:, 0], below[:, 1] + above[:, 1], below[:, 2] + above[:, 2]
    uv = below[:, 0] + c * above[:, 1]
    vv = below[:, 0] + c * c * above[:, 2]
    vz = below[:, 1] + c * above[:, 2]
    hv = below[:, 3] + c * above[:, 4]
    gram = np.stack([np.stack([uu, uv, uz], -1), np.stack([uv, vv, vz], -1), np.stack([uz, vz, zz], -1)], -2)
    h = np.stack([below[:, 3] + above[:, 3], hv, below[:, 4] + above[:, 4]], -1)
    return _nnls_misfit(gram, h, float(y @ y))


def _nnls_misfit(gram: np.ndarray, h: np.ndarray, yy: float) -> np.ndarray:
    """min ‖y − Aθ‖² over θ ≥ 0 for a stack of 3-column problems given AᵀA and Aᵀy: the least misfit over the
    supports whose unconstrained solution is non-negative (the optimum is one of them). Near-singular supports
    are skipped: a smaller support spans the same columns."""
    best = np.full(h.shape[0], yy)
    for support in ([0], [1], [2], [0, 1], [0, 2], [1, 2], [0, 1, 2]):
        g, hs = gram[:, support][:, :, support], h[:, support]
        theta, ok = _solve(g, hs)
        misfit = yy - 2 * np.einsum("ki,ki->k", theta, hs) + np.einsum("ki,kij,kj->k", theta, g, theta)
        best = np.where(ok & (theta >= 0).all(axis=1), np.minimum(best, misfit), best)
    return best


def _solve(g: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """θ = g⁻¹h for a stack of 1×1, 2×2 or 3×3 normal equations, and which are well-posed (the columns' Gram
    determinant, normalised to unit columns, above 1e-10)."""
    diag = np.einsum("kii->ki", g)
    if h.shape[1] == 1:
        return h / diag, np.ones(h.shape[0], dtype=bool)
    if h.shape[1] == 2:
        off = g[:, 0, 1]
        det = diag[:, 0] * diag[:, 1] - off * off
        ok = det > 1e-10 * diag[:, 0] * diag[:, 1]
        safe = np.where(ok, det, 1.0)[:, None]
        return np.stack([diag[:, 1] * h[:, 0] - off * h[:, 1], diag[:, 0] * h[:, 1] - off * h[:, 0]], -1) / safe, ok
    scale = np.sqrt(diag)
    ok = np.linalg.det(g / scale[:, :, None] / scale[:, None, :]) > 1e-10
    g_ok = np.where(ok[:, None, None], g, np.eye(h.shape[1]))
    return np.linalg.solve(g_ok, h[..., None])[..., 0], ok


# -- structures ---------------------------------------------------------------------------
Refit = Callable[[np.ndarray, np.random.Generator | None], tuple[StepModel, slice]]


@dataclass(frozen=True)
class Structure:
    """A named step-model structure: how to fit it to (batch, TPOT) and on which points."""

    name: str
    n_params: int
    fit: Refit  # (tpot_s, rng or None for the central fit) → terms and the support they were fitted on
    why: str


def _cut(weight: np.ndarray | None, part: slice) -> np.ndarray | None:
    return None if weight is None else weight[part]


def line_structure(batch: np.ndarray, weight: np.ndarray | None = None, context: np.ndarray | None = None) -> Structure:
    part = upper_half(batch.size)

    def fit(t: np.ndarray, rng: np.random.Generator | None) -> tuple[StepModel, slice]:
        if context is not None:
            a, s, k = fit_line_contexts(batch[part], t[part], context[part], _cut(weight, part))
            return Terms(0.0, a, 0.0, s, k).step_model(None), part
        a, s = fit_line(batch[part], t[part], _cut(weight, part))
        return Terms(0.0, a, 0.0, s).step_model(None), part

    if context is not None:
        why = "memory-bound line T = a + (s₀ + k·ctx)·b through the upper half of the points, across their contexts"
        return Structure("line", 3, fit, why)
    return Structure(
        "line", 2, fit, "memory-bound line T = a + s·b through the upper half of the points (the local slope)"
    )


def roofline_structure(
    batch: np.ndarray, weight: np.ndarray | None = None, context: np.ndarray | None = None
) -> Structure:
    every = slice(0, batch.size)

    def fit(t: np.ndarray, rng: np.random.Generator | None) -> tuple[StepModel, slice]:
        grid = KNEE_GRID if rng is None else SAMPLE_KNEE_GRID
        return fit_kinked(batch, t, grid, weight, context).step_model(None), every

    if context is not None:
        why = "roofline with a knee T = f + max(W, b·c) + (s₀ + k·ctx)·b through all points, across their contexts"
        return Structure("roofline", 5, fit, why)
    return Structure("roofline", 4, fit, "roofline with a knee T = f + max(W, b·c) + s·b through all points")


def pinned_structure(
    batch: np.ndarray,
    prior: Prior | None,
    knee: float | None,
    roof_tok_s: float | None,
    weight: np.ndarray | None = None,
    context: np.ndarray | None = None,
    reference: float = 0.0,
) -> Structure:
    """The asserted knee or asymptote, with the slope measured (with `context`: at the `reference` context, its
    growth with context fitted across the points' contexts)."""
    part = upper_half(batch.size)
    asserted = (
        f"knee asserted at batch {knee:g} (--critical-batch)"
        if knee is not None
        else f"throughput asymptote asserted at {roof_tok_s:g} tok/s (--roof-tok-s)"
    )

    def fit(t: np.ndarray, rng: np.random.Generator | None) -> tuple[StepModel, slice]:
        kv = 0.0
        if context is not None:
            a, s, kv = fit_line_contexts(batch[part], t[part], context[part], _cut(weight, part))
            s += kv * reference
        else:
            a, s = fit_line(batch[part], t[part], _cut(weight, part))
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
        folded = Terms(fixed, scale, compute, per_seq).step_model(prior)
        return (folded if context is None else ContextLaw(reference, kv).whole(folded)), part

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


# θ, the prior fit's parameters, by position: the fixed time per step (s); the cost per sequence at context 0 with
# several contexts, else at the prior's (s); the log bandwidth and log compute efficiencies; with several contexts,
# the cost per context token per sequence (s)
FIXED, PER_SEQ, LOG_BANDWIDTH, LOG_COMPUTE, PER_CONTEXT_TOKEN = range(5)


class PriorFitter:
    """The roofline on the upper half with log-normal priors on the efficiencies (MAP, bounded least squares).

    Prior–data conflict: the central fit (`fit` without a generator) is first made with every prior widened tenfold
    (the data speak); a term whose value there lies outside its prior's 99% band is named in `state.conflicts`, and
    its prior stays widened in the final fit. A floor the data's slope lies well below (the KV traffic per sequence,
    per context token) is dropped and named the same way. Interval samples (`fit` with a generator) start from the
    central θ and keep what it widened and dropped (the fit runs the central fit first; a sample before it draws at
    the stated widths, from the memory-bound line's start).
    With `context` (each point's effective context, several measured): the cost per sequence at the prior's
    context plus k per context token, k fitted (at least the KV reads at peak bandwidth), the attention per
    context token at the fitted compute efficiency.
    """

    def __init__(
        self,
        batch: np.ndarray,
        prior: Prior,
        noise: float,
        state: PriorFit,
        weight: np.ndarray | None = None,
        context: np.ndarray | None = None,
    ) -> None:
        self.prior, self.noise, self.state = prior, noise, state
        self.part = upper_half(batch.size)
        self.b, self.w = batch[self.part], _cut(weight, self.part)
        self.ctx = None if context is None else context[self.part]
        self.peak = prior.weights_floor
        self.root = _root(self.b, self.w)
        self.w_peak = self.peak.t_weights_s
        self.c_peak = prior.step_compute_floor_s
        self.centers = {
            "bandwidth": prior.bandwidth_center,
            "compute": prior.compute_center,
            "slope": prior.slope_center_s,
        }
        self.sigmas = {"bandwidth": prior.sigma_log_bandwidth, "compute": prior.sigma_log_compute}
        if prior.sigma_log_slope is not None and prior.slope_center_s > 0:
            self.sigmas["slope"] = prior.sigma_log_slope
        self.widen = dict.fromkeys(self.sigmas, 1.0)  # set by the central fit: CONFLICT_WIDEN where data and prior part
        self.per_seq_floor = prior.per_seq_floor_s  # dropped by the central fit when the data's slope lies below it
        self.kv_floor = self.peak.t_kv_token_s  # likewise, per context token
        self.central: np.ndarray | None = None  # the central fit's θ: where each interval sample's fit starts
        # the step time of θ at the support's points in closed form (what `whole(θ).step_time_s(b, ctx)` gives,
        # without building a StepModel: the optimiser calls it thousands of times per fit)
        self.weights_peak_b = self.peak.weights_time_s(self.b)  # W(b) at 100% bandwidth; θ's bandwidth scales it
        attention = 0.0 if self.ctx is None else self.peak.t_attn_token_s * (self.ctx - prior.context_tokens)
        self.compute_peak_b = self.b * (self.c_peak + attention)

    # -- θ → the step model --------------------------------------------------------------------------------------
    def per_seq_ref(self, theta: np.ndarray) -> float:
        """The cost per sequence at the prior's context: θ's per-sequence cost itself, or with several contexts that
        (the cost at context 0, never negative) plus k per context token."""
        if self.ctx is None:
            return float(theta[PER_SEQ])
        return float(theta[PER_SEQ] + theta[PER_CONTEXT_TOKEN] * self.prior.context_tokens)

    def terms(self, theta: np.ndarray) -> Terms:
        weights_scale = math.exp(-theta[LOG_BANDWIDTH])
        return Terms(theta[FIXED], weights_scale, self.c_peak / math.exp(theta[LOG_COMPUTE]), self.per_seq_ref(theta))

    def whole(self, theta: np.ndarray) -> StepModel:
        """The step model of `theta`: folded at the prior's context, or with several contexts split by its law."""
        folded = self.terms(theta).step_model(self.prior)
        if self.ctx is None:
            return folded
        attn = self.peak.t_attn_token_s / math.exp(theta[LOG_COMPUTE])
        return ContextLaw(self.prior.context_tokens, float(theta[PER_CONTEXT_TOKEN]), attn).whole(folded)

    def slope_of(self, theta: np.ndarray) -> float:
        """The slope per sequence below the knee: the cost per sequence and the compute the GEMMs do not hide."""
        return self.per_seq_ref(theta) + (1 - self.prior.overlap) * self.c_peak * math.exp(-theta[LOG_COMPUTE])

    def logs(self, theta: np.ndarray) -> dict[str, float]:
        """Each prior's variable, in logs: the efficiencies, and the slope per sequence below the knee."""
        return {
            "bandwidth": theta[LOG_BANDWIDTH],
            "compute": theta[LOG_COMPUTE],
            "slope": math.log(max(self.slope_of(theta), 1e-15)),
        }

    def step_s(self, theta: np.ndarray) -> np.ndarray:
        weights = self.weights_peak_b * math.exp(-theta[LOG_BANDWIDTH])
        compute = self.compute_peak_b * math.exp(-theta[LOG_COMPUTE])
        ctx = self.ctx
        per_seq = self.per_seq_ref(theta) if ctx is None else theta[PER_SEQ] + theta[PER_CONTEXT_TOKEN] * ctx
        return theta[FIXED] + matmul_time_s(weights, compute, self.prior.overlap) + self.b * per_seq

    # -- the least-squares problem ---------------------------------------------------------------------------------
    def residuals(
        self, theta: np.ndarray, t: np.ndarray, center: dict[str, float], scale: dict[str, float]
    ) -> np.ndarray:
        """The points' log misfit (weighted, in units of the noise), then each prior's pull."""
        values = self.logs(theta)
        pulls = [(values[k] - math.log(center[k])) / (self.sigmas[k] * scale[k]) for k in self.sigmas]
        return np.concatenate([np.log(self.step_s(theta) / t[self.part]) * self.root / self.noise, pulls])

    def jacobian(self, theta: np.ndarray, center: dict[str, float], scale: dict[str, float]) -> np.ndarray:
        """∂(residuals)/∂θ in closed form: the points' log step times, then each prior's pull."""
        b, o = self.b, self.prior.overlap
        weights = self.weights_peak_b * math.exp(-theta[LOG_BANDWIDTH])
        compute = self.compute_peak_b * math.exp(-theta[LOG_COMPUTE])
        side = np.sign(weights - compute) * o / 2  # matmul_time_s = (W + C)(1 − o/2) + |W − C|·o/2
        d_step = np.column_stack(
            [
                np.ones_like(b),
                b,
                -weights * (1 - o / 2 + side),
                -compute * (1 - o / 2 - side),
                *([] if self.ctx is None else [b * self.ctx]),
            ]
        )
        rows = [d_step * (self.root / self.noise / self.step_s(theta))[:, None]]
        slope = self.slope_of(theta)
        d_slope = np.zeros(theta.size)
        if slope > 1e-15:
            d_slope[PER_SEQ] = 1.0 / slope
            d_slope[LOG_COMPUTE] = -(1 - o) * self.c_peak * math.exp(-theta[LOG_COMPUTE]) / slope
            if self.ctx is not None:
                d_slope[PER_CONTEXT_TOKEN] = self.prior.context_tokens / slope
        for key in self.sigmas:
            pull = np.zeros(theta.size)
            if key == "slope":
                pull = d_slope
            else:
                pull[LOG_BANDWIDTH if key == "bandwidth" else LOG_COMPUTE] = 1.0
            rows.append((pull / (self.sigmas[key] * scale[key]))[None, :])
        return np.vstack(rows)

    def line(self, t: np.ndarray) -> tuple[float, float, float]:
        """The memory-bound line of the support: intercept, slope at the prior's context, KV cost per token."""
        if self.ctx is None:
            a, s = fit_line(self.b, t[self.part], self.w)
            return a, s, 0.0
        a, s0, k = fit_line_contexts(self.b, t[self.part], self.ctx, self.w)
        return a, s0 + k * self.prior.context_tokens, k

    def solve_full(
        self, t: np.ndarray, center: dict[str, float], scale: dict[str, float], start: np.ndarray | None = None
    ) -> OptimizeResult:
        """The MAP θ for step times `t` under priors at `center` widened by `scale`, from the memory-bound line's
        θ (and, where that puts the knee past every point, also from a compute-bound start: the better of the two)."""
        a, s, k = self.line(t)
        floor_s = self.per_seq_floor
        if self.ctx is not None:  # the cost at context 0: its floor the KV write and all-reduce at the peaks
            s, floor_s = max(s - k * self.prior.context_tokens, 0.0), self.peak.t_seq_s if floor_s > 0 else 0.0
        ew0 = min(center["bandwidth"], 1.0, self.w_peak / a if a > 0 else 1.0)
        x0 = np.array(
            [
                max(a - self.w_peak / max(ew0, 1e-6), 0.0),
                max(s, floor_s),
                math.log(max(ew0, 1e-6)),
                math.log(min(center["compute"], 1.0)),
            ]
            + ([] if self.ctx is None else [max(k, self.kv_floor)])
        )
        least = math.log(MIN_EFFICIENCY)
        lower = np.array([0.0, floor_s, least, least] + ([] if self.ctx is None else [self.kv_floor]))
        upper = np.array([np.inf, np.inf, 0.0, 0.0] + ([] if self.ctx is None else [np.inf]))
        starts = [x0] if start is None else [start]
        compute_s = s - floor_s  # the line's slope as GEMM time, beyond the per-sequence floor
        if start is None and self.c_peak > 0 and compute_s > 0 and self.c_peak / compute_s < math.exp(x0[LOG_COMPUTE]):
            # from the line's start the knee lies past every point whenever the centre efficiencies put it there, and
            # then no point moves the compute efficiency: a knee the data show would never be found. The fit also
            # starts compute-bound (the line's slope as GEMM time, its intercept as the fixed time) and keeps the
            # better of the two.
            bound = [max(a, 0.0), floor_s, x0[LOG_BANDWIDTH], math.log(self.c_peak / compute_s)]
            starts.append(np.array(bound + list(x0[4:])))
        fits = [
            least_squares(
                lambda theta: self.residuals(theta, t, center, scale),
                np.clip(x, lower + 1e-15, upper - 1e-12),
                jac=lambda theta: self.jacobian(theta, center, scale),
                bounds=(lower, upper),
                x_scale="jac",
            )
            for x in starts
        ]
        return min(fits, key=lambda r: float(r.cost))

    def spread(self, result: OptimizeResult) -> dict[str, float]:
        """Standard errors of each prior's variable in the data-led fit (delta method on the Gauss-Newton
        covariance): a conflict is judged against the data's uncertainty as well as the prior's."""
        theta, jac = result.x, result.jac
        cov = np.linalg.pinv(jac.T @ jac)
        base = self.logs(theta)
        out = {}
        for key in self.sigmas:
            grad = np.zeros(theta.size)
            for i in range(theta.size):
                step = 1e-6 * max(abs(theta[i]), 1e-9)
                moved = theta.copy()
                moved[i] += step
                grad[i] = (self.logs(moved)[key] - base[key]) / step
            out[key] = float(np.sqrt(max(float(grad @ cov @ grad), 0.0)))
        return out

    # -- the structure's fit -----------------------------------------------------------------------------------
    def fit(self, t: np.ndarray, rng: np.random.Generator | None) -> tuple[StepModel, slice]:
        """The central fit (no `rng`): floors and conflicts judged, priors widened where the data overrule them;
        an interval sample (`rng`): priors drawn about their centres, from the central fit's θ where there is one."""
        if rng is None:
            theta = self.central_fit(t)
        else:
            drawn = {k: _draw(rng, self.centers[k], self.sigmas[k] * self.widen[k]) for k in self.sigmas}
            theta = np.asarray(self.solve_full(t, {**self.centers, **drawn}, self.widen, self.central).x)
        return self.whole(theta), self.part

    def central_fit(self, t: np.ndarray) -> np.ndarray:
        prior, state = self.prior, self.state
        self.per_seq_floor = prior.per_seq_floor_s
        _, slope, kv = self.line(t)
        if slope < FLOOR_TOLERANCE * prior.per_seq_floor_s:
            self.per_seq_floor = 0.0
        self.kv_floor = self.peak.t_kv_token_s if kv >= FLOOR_TOLERANCE * self.peak.t_kv_token_s else 0.0
        led = self.solve_full(t, self.centers, dict.fromkeys(self.sigmas, CONFLICT_WIDEN))
        free, se = self.logs(led.x), self.spread(led)
        state.conflicts = []
        for term, sigma in self.sigmas.items():
            center = self.centers[term]
            z = (free[term] - math.log(center)) / math.hypot(sigma, se[term])
            self.widen[term] = CONFLICT_WIDEN if abs(z) > CONFLICT_Z else 1.0
            if abs(z) > CONFLICT_Z:
                what = (
                    f"the slope per sequence at {math.exp(free[term]) * 1e3:.3g} ms (the prior's {center * 1e3:.3g} ms)"
                    if term == "slope"
                    else f"the {term} efficiency at {math.exp(free[term]):.0%} (the prior's {center:.0%})"
                )
                state.conflicts.append(
                    f"the data put {what}, outside the prior's 99% band ({z:+.1f} σ): the data win (that prior "
                    f"is widened {CONFLICT_WIDEN:g}×); check --model/--hardware/--dtype/--tp and the workload"
                )
        if self.per_seq_floor == 0.0 and prior.per_seq_floor_s > 0:
            state.conflicts.append(
                f"the cost per added sequence the data show ({slope * 1e6:.3g} µs) is below the KV traffic at peak "
                f"bandwidth ({prior.per_seq_floor_s * 1e6:.3g} µs at a mean context of {prior.context_tokens:g}): "
                "the context is smaller than stated, or the KV cache is quantised (--kv-dtype); the data win (that "
                "floor is dropped)"
            )
        if self.ctx is not None and self.kv_floor == 0.0 and self.peak.t_kv_token_s > 0:
            state.conflicts.append(
                f"the cost per context token the data show ({kv * 1e9:.3g} ns per sequence) is below the KV "
                f"reads at peak bandwidth ({self.peak.t_kv_token_s * 1e9:.3g} ns): the contexts are smaller than "
                "stated, or the KV cache is quantised (--kv-dtype); the data win (that floor is dropped)"
            )
        self.central = np.asarray(self.solve_full(t, self.centers, self.widen).x)
        return self.central


def prior_structure(
    batch: np.ndarray,
    prior: Prior,
    noise: float,
    state: PriorFit,
    name: str = "prior",
    weight: np.ndarray | None = None,
    context: np.ndarray | None = None,
) -> Structure:
    """The roofline on the upper half with the physics as a prior: `PriorFitter`'s fit as a structure."""
    fitter = PriorFitter(batch, prior, noise, state, weight, context)
    why = f"roofline through the upper half of the points with the physics of {prior.label} as a prior"
    if context is not None:
        why += ", the cost per context token fitted across the points' contexts"
    return Structure(name, 2 if context is None else 3, fitter.fit, why)
