"""The prior structure's closed forms: its step time and its Jacobian are what the StepModel and finite
differences give (the optimiser trusts both)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import nnls

import tokenroof.fit.structures as st
from tests.conftest import central_differences, matches_a_difference
from tests.test_contexts import measured
from tokenroof.fit.predict import MeasuredWorkload, predict_table
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Physics


@pytest.mark.parametrize(
    ("model", "contexts"),
    [
        ("llama-2-7b", None),  # one context, dense
        ("mixtral-8x7b", None),  # MoE: the weights streamed grow with the batch
        ("llama-3.1-8b", (4096, 16384)),  # several contexts: k and the attention per context token
    ],
)
def test_the_analytic_jacobian_is_the_finite_difference_one(
    model: str, contexts: tuple[int, ...] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mixtral-8x7B's 93 GB of bf16 weights need two H100s (one is refused: the weights alone do not fit)
    physics = Physics(model, "h100-sxm", "bf16", tp=2 if model.startswith("mixtral") else 1)
    table = measured(list(contexts or (1150,)), sm=physics.step_model())  # the model's own curve, 2% noise
    prior = physics.prior(MeasuredWorkload.from_table(table, decode_only=True))
    checked = []

    def least_squares(fun, x0, jac, **kwargs):  # type: ignore[no-untyped-def]
        result = real(fun, x0, jac=jac, **kwargs)
        for theta in (x0, result.x):  # where the optimiser starts and where it ends
            assert matches_a_difference(jac(theta), fun, theta), (jac(theta), central_differences(fun, theta))
        checked.append(x0.size)
        return result

    real = st.least_squares
    monkeypatch.setattr(st, "least_squares", least_squares)
    result = predict_table(table, [256], prior, n_samples=3)
    assert checked and set(checked) == {4 if contexts is None else 5}
    # the closed-form step time is the StepModel's: the model's own curve is described to about its noise (an MoE
    # curve's lower half, where the experts touched still grow, is left to the small-batch line: 7% rms)
    assert result.fit.sigma_rel < (0.08 if physics.step_model().num_experts else 0.04)


# -- by hand, one behaviour each (the tests `make mutation` runs on this module):
# The fit's structures on exact curves: each recovers the terms it was built from (make mutation).
B = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])


def kinked(b: np.ndarray, f: float, w: float, knee: float, s: float) -> np.ndarray:
    return f + w * np.maximum(1.0, b / knee) + s * b


def prior(**changes: object) -> st.Prior:
    base = {
        "weights_floor": StepModel(0.0, 6e-3, 0.0, 1e-8, t_seq_s=2e-6, t_attn_token_s=4e-9),
        "compute_floor_s": 2e-5,
        "per_seq_floor_s": 1e-5,
        "fixed_floor_s": 0.0,
        "label": "tiny on chip",
        "context_tokens": 800.0,
    }
    return st.Prior(**{**base, **changes})


def test_prior_defaults_and_derived_values() -> None:
    p = prior(prefill_floor_s=5e-6)
    assert p.step_compute_floor_s == pytest.approx(2.5e-5)
    assert (p.bandwidth_center, p.compute_center, p.sigma_log_bandwidth, p.sigma_log_compute) == (0.75, 0.75, 0.35, 0.5)
    assert (p.max_batch, p.overlap, p.slope_center_s, p.sigma_log_slope, p.kv_bandwidth_ratio) == (
        None,
        1.0,
        0,
        None,
        1,
    )
    assert p.effective_context(100.0) == 100.0
    windowed = prior(layer_windows=(None, 10, None, 30))
    assert float(windowed.effective_context(100.0)) == pytest.approx((100 + 10 + 100 + 30) / 4)
    assert np.allclose(windowed.effective_context(np.array([5.0, 20.0])), [5.0, (20 + 10 + 20 + 20) / 4])


def test_context_law_folds_and_unfolds_by_hand() -> None:
    whole = StepModel(1.0, 2.0, 3.0, 0.5, t_seq_s=4.0, t_attn_token_s=0.25)
    law = st.ContextLaw.of(whole, 8.0)
    assert (law.reference_tokens, law.kv_token_s, law.attn_token_s, law.source) == (8.0, 0.5, 0.25, "data")
    folded = law.fold(whole)
    assert (folded.t_seq_s, folded.t_compute_s, folded.t_kv_token_s, folded.t_attn_token_s) == (8.0, 5.0, 0.0, 0.0)
    assert (folded.t_fixed_s, folded.t_weights_s) == (1.0, 2.0)
    back = law.whole(folded)
    assert (back.t_seq_s, back.t_compute_s, back.t_kv_token_s, back.t_attn_token_s) == (4.0, 3.0, 0.5, 0.25)
    moved = law.at(folded, 16.0)  # folded at 16 instead: +0.5·8 per sequence, +0.25·8 compute
    assert (moved.t_seq_s, moved.t_compute_s, moved.t_kv_token_s) == (12.0, 7.0, 0.0)
    assert st.ContextLaw(8.0).fold(whole) == whole.__class__(1.0, 2.0, 3.0 + 2.0, 0.0, 4.0 + 4.0)


def test_physics_law_by_hand() -> None:
    p = prior(kv_bandwidth_ratio=0.5)
    # fitted weights 8 ms against 6 ms at peak: 75% bandwidth; KV reads 1e-8 / (0.75 · 0.5)
    folded = StepModel(0.0, 8e-3, 4e-5, 0.0, t_seq_s=1e-3)
    law = st.physics_law(folded, p)
    assert law is not None and law.source == "physics" and law.reference_tokens == 800.0
    assert law.kv_token_s == pytest.approx(1e-8 / 0.375)
    # attention: 4e-9 at peak scaled by the fitted compute over its floor (4e-5 / 2e-5)
    assert law.attn_token_s == pytest.approx(8e-9)
    # the KV reads never exceed the whole per-sequence cost at the reference; the attention never the compute
    lean = st.physics_law(StepModel(0.0, 8e-3, 1e-6, 0.0, t_seq_s=1e-6), p)
    assert lean is not None and lean.kv_token_s == pytest.approx(2e-6 / 800)
    assert lean.attn_token_s == pytest.approx(min(4e-9 * 1e-6 / 2e-5, 1e-6 / 800))
    capped = st.physics_law(StepModel(0.0, 8e-3, 1.6e-6, 0.0, t_seq_s=1.0), prior(compute_floor_s=1e-9))
    assert capped is not None and capped.attn_token_s == pytest.approx(1.6e-6 / 800)
    # faster than the peak: at most 100%; no fitted weights: the prior's centre
    fast = st.physics_law(StepModel(0.0, 3e-3, 4e-5, 0.0, t_seq_s=1e-3), p)
    assert fast is not None and fast.kv_token_s == pytest.approx(1e-8 / 0.5)
    none = st.physics_law(StepModel(0.0, 0.0, 0.0, 0.0, t_seq_s=1e-3), p)
    assert none is not None and none.kv_token_s == pytest.approx(1e-8 / 0.375) and none.attn_token_s == 0.0
    assert st.physics_law(folded, prior(context_tokens=0.0)) is None
    assert st.physics_law(folded, prior(compute_floor_s=0.0)).attn_token_s == 0.0  # type: ignore[union-attr]


def test_terms_to_step_models() -> None:
    t = st.Terms(1.0, 2.0, 3.0, 4.0, 0.5)
    assert t.step_model(None) == StepModel(1.0, 2.0, 3.0, 0.5, 4.0)
    assert st.Terms(1.0, 2.0, 3.0, 4.0).kv_token_s == 0.0
    moe = StepModel(0.0, 6.0, 0.0, 0.0, t_expert_s=0.5, num_experts=8, experts_per_token=2)
    sm = t.step_model(prior(weights_floor=moe, overlap=0.25))
    assert sm == StepModel(1.0, 12.0, 3.0, 0.5, 4.0, t_expert_s=1.0, num_experts=8, experts_per_token=2, overlap=0.25)


def test_lines_by_hand() -> None:
    t = 2.0 + 0.5 * B
    assert st.fit_line(B, t) == pytest.approx((2.0, 0.5))
    assert st.fit_line(B, t, np.full(B.size, 3.0)) == pytest.approx((2.0, 0.5))
    # relative least squares: a point counts as its weight; two points, one off the line, weighted 9:1
    a, s = st.fit_line(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.3]), np.array([1.0, 1.0, 1e6]))
    assert a + s * 3 == pytest.approx(3.3, rel=1e-4)
    assert st.fit_line(B, 10.0 - 0.1 * B)[1] == 0.0  # a falling curve: the slope is held at 0
    ctx = np.array([100.0, 100.0, 100.0, 400.0, 400.0, 400.0, 400.0])
    t = 1.0 + (0.5 + 0.01 * ctx) * B
    assert st.fit_line_contexts(B, t, ctx) == pytest.approx((1.0, 0.5, 0.01))
    assert st.fit_line_contexts(B, t, ctx, np.arange(1.0, 8.0)) == pytest.approx((1.0, 0.5, 0.01))


@pytest.mark.parametrize(("n", "start"), [(2, 0), (3, 1), (4, 2), (5, 2), (7, 3), (10, 5)])
def test_upper_half(n: int, start: int) -> None:
    assert st.upper_half(n) == slice(start, n)


def test_knee_misfits_match_nonnegative_least_squares_at_every_knee() -> None:
    rng = np.random.default_rng(1)
    t = kinked(B, 1.0, 4.0, 10.0, 0.05) * np.exp(0.05 * rng.normal(size=B.size))
    weight = np.array([1.0, 2.0, 1.0, 3.0, 1.0, 1.0, 2.0])
    grid = np.array([0.5, 1.0, 3.0, 10.0, 20.0, 100.0])
    root = np.sqrt(weight)
    got = st._knee_misfits(B, t, root, grid)
    for knee, misfit in zip(grid, got, strict=True):
        design = np.column_stack([np.ones_like(B), np.maximum(1.0, B / knee), B]) / t[:, None] * root[:, None]
        _, rnorm = nnls(design, root)
        assert misfit == pytest.approx(rnorm**2, rel=1e-6, abs=1e-12)


def test_kinked_fit_recovers_an_exact_roofline() -> None:
    t = kinked(B, 1.0, 4.0, 16.0, 0.05)
    terms = st.fit_kinked(B, t, np.array([4.0, 8.0, 16.0, 32.0]))
    assert (terms.fixed_s, terms.weights_scale, terms.compute_s, terms.per_seq_s) == pytest.approx(
        (1.0, 4.0, 0.25, 0.05), rel=1e-6
    )
    weighted = st.fit_kinked(B, t, np.array([4.0, 8.0, 16.0, 32.0]), np.arange(1.0, 8.0))
    assert weighted.compute_s == pytest.approx(0.25, rel=1e-6)
    # a knee past every point is one design: the first such knee is kept
    line = st.fit_kinked(B, 3.0 + 0.5 * B, np.array([100.0, 200.0]))
    assert line.compute_s == pytest.approx(line.weights_scale / 100.0) and line.per_seq_s == pytest.approx(0.5)
    assert line.fixed_s + line.weights_scale == pytest.approx(3.0)


def test_kinked_fit_across_contexts_recovers_the_kv_cost() -> None:
    ctx = np.array([100.0, 400.0] * 3 + [100.0])
    t = kinked(B, 1.0, 4.0, 16.0, 0.05) + 1e-3 * ctx * B
    terms = st.fit_kinked(B, t, np.array([4.0, 8.0, 16.0, 32.0, 1000.0]), context=ctx)
    assert (terms.fixed_s, terms.weights_scale, terms.compute_s, terms.per_seq_s, terms.kv_token_s) == pytest.approx(
        (1.0, 4.0, 0.25, 0.05, 1e-3), rel=1e-6
    )


def test_line_and_roofline_structures() -> None:
    t = 2.0 + 0.5 * B
    line = st.line_structure(B)
    assert (line.name, line.n_params) == ("line", 2)
    assert line.why == "memory-bound line T = a + s·b through the upper half of the points (the local slope)"
    sm, part = line.fit(t, None)
    assert part == slice(3, 7) and sm.t_weights_s == pytest.approx(2.0) and sm.t_seq_s == pytest.approx(0.5)
    assert (sm.t_fixed_s, sm.t_compute_s, sm.t_kv_token_s) == (0.0, 0.0, 0.0)
    ctx = np.array([100.0, 400.0] * 3 + [100.0])
    with_ctx = st.line_structure(B, None, ctx)
    assert with_ctx.n_params == 3 and "(s₀ + k·ctx)·b" in with_ctx.why and "across their contexts" in with_ctx.why
    t_ctx = 2.0 + (0.5 + 0.01 * ctx) * B
    sm, _ = with_ctx.fit(t_ctx, None)
    assert (sm.t_weights_s, sm.t_seq_s, sm.t_kv_token_s) == pytest.approx((2.0, 0.5, 0.01))
    roof = st.roofline_structure(B)
    assert (roof.name, roof.n_params) == ("roofline", 4)
    assert roof.why == "roofline with a knee T = f + max(W, b·c) + s·b through all points"
    assert st.roofline_structure(B, None, ctx).n_params == 5
    # the central fit searches the fine grid (the knee 16 is found to within its spacing)
    sm, part = roof.fit(kinked(B, 1.0, 4.0, 16.0, 0.05), None)
    assert part == slice(0, 7)
    assert sm.t_weights_s / sm.t_compute_s == pytest.approx(16.0, rel=0.03)
    sm_sample, _ = roof.fit(kinked(B, 1.0, 4.0, 16.0, 0.05), np.random.default_rng(0))
    assert sm_sample.t_weights_s / sm_sample.t_compute_s == pytest.approx(16.0, rel=0.15)


def test_pinned_structure_without_the_physics() -> None:
    t = 2.0 + 0.5 * B  # the upper half's line: a = 2, s = 0.5
    knee = st.pinned_structure(B, None, 100.0, None)
    assert (knee.name, knee.n_params) == ("pinned", 3)
    assert knee.why == (
        "knee asserted at batch 100 (--critical-batch); memory-bound line from the upper half of the points; "
        "overhead taken as 15% of the intercept"
    )
    sm, part = knee.fit(t, None)
    assert part == slice(3, 7)
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s, sm.t_seq_s) == pytest.approx((0.3, 1.7, 0.017, 0.5))
    roof = st.pinned_structure(B, None, None, 1.0)
    assert roof.why.startswith("throughput asymptote asserted at 1 tok/s (--roof-tok-s)")
    sm, _ = roof.fit(t, None)
    assert sm.t_compute_s == pytest.approx(0.5)  # c + s = 1 / 1 tok/s
    assert st.pinned_structure(B, None, None, 0.5).fit(t, None)[0].t_compute_s == pytest.approx(1.5)
    assert st.pinned_structure(B, None, None, 10.0).fit(t, None)[0].t_compute_s == 0.0  # never negative
    # an interval sample draws the overhead share in 5–35% of the intercept
    sm, _ = knee.fit(t, np.random.default_rng(3))
    assert 0.05 * 2.0 <= sm.t_fixed_s <= 0.35 * 2.0 and sm.t_fixed_s + sm.t_weights_s == pytest.approx(2.0)


def test_pinned_structure_with_the_physics_and_contexts() -> None:
    t = 9e-3 + 2e-5 * B  # a = 9 ms, s = 20 µs
    p = prior(overlap=0.5)  # W at 75%: 8 ms ≤ a
    sm, _ = st.pinned_structure(B, p, 200.0, None).fit(t, None)
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s) == pytest.approx((1e-3, 8e-3, 4e-5))
    # below the knee each sequence adds s = per-seq + (1 − overlap)·c: per-seq = 20 − 20 = 0 → the floor 10 µs
    assert sm.t_seq_s == pytest.approx(1e-5) and sm.overlap == 0.5
    assert "weights from the physics" in st.pinned_structure(B, p, 200.0, None).why
    # an intercept below W at the centre: the weights take all of it
    sm, _ = st.pinned_structure(B, prior(), 200.0, None).fit(7e-3 + 2e-5 * B, None)
    assert (sm.t_fixed_s, sm.t_weights_s) == pytest.approx((0.0, 7e-3))
    ctx = np.array([100.0, 400.0] * 3 + [100.0])
    t_ctx = 9e-3 + (2e-5 + 1e-8 * ctx) * B
    sm, _ = st.pinned_structure(B, None, 200.0, None, None, ctx, 300.0).fit(t_ctx, None)
    assert sm.t_kv_token_s == pytest.approx(1e-8) and sm.t_seq_s == pytest.approx(2e-5)
    assert st.ContextLaw(300.0).fold(sm).t_seq_s == pytest.approx(2e-5 + 3e-6)


def test_prior_structure_recovers_the_centre_model_and_names_no_conflict() -> None:
    p = prior()
    # the truth at the centres: W = 6 / 0.75 = 8 ms, c = 20 µs / 0.75, f = 1 ms, s = 20 µs
    truth = StepModel(1e-3, 8e-3, 2e-5 / 0.75, 0.0, t_seq_s=2e-5)
    t = truth.step_time_s(B)
    state = st.PriorFit()
    s = st.prior_structure(B, p, 0.02, state)
    assert (s.name, s.n_params) == ("prior", 2)
    assert s.why == "roofline through the upper half of the points with the physics of tiny on chip as a prior"
    sm, part = s.fit(t, None)
    assert part == slice(3, 7) and state.conflicts == []
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s, sm.t_seq_s) == pytest.approx(
        (1e-3, 8e-3, 2e-5 / 0.75, 2e-5), rel=1e-4
    )
    assert st.prior_structure(B, p, 0.02, st.PriorFit(), "prior-additive").name == "prior-additive"
    drawn, _ = s.fit(t, np.random.default_rng(0))
    assert drawn.t_weights_s + drawn.t_fixed_s == pytest.approx(9e-3, rel=0.02)


def test_prior_structure_names_a_slope_below_the_kv_floor() -> None:
    p = prior(per_seq_floor_s=1e-4)
    t = StepModel(1e-3, 8e-3, 2e-5 / 0.75, 0.0, t_seq_s=2e-5).step_time_s(B)
    state = st.PriorFit()
    sm, _ = st.prior_structure(B, p, 0.02, state).fit(t, None)
    assert len(state.conflicts) == 1
    assert state.conflicts[0].startswith(
        "the cost per added sequence the data show (20 µs) is below the KV traffic at peak bandwidth (100 µs at a "
        "mean context of 800)"
    )
    assert sm.t_seq_s == pytest.approx(2e-5, rel=1e-3)  # the data win


def test_prior_structure_names_a_measured_slope_the_data_contradict() -> None:
    # a calibrated file's slope per sequence (2 µs ± 0.3 in logs) against data sloping at 20 µs
    p = prior(slope_center_s=2e-6, sigma_log_slope=0.3, per_seq_floor_s=1e-6)
    t = StepModel(1e-3, 8e-3, 2e-5 / 0.75, 0.0, t_seq_s=2e-5).step_time_s(B)
    state = st.PriorFit()
    sm, _ = st.prior_structure(B, p, 0.02, state).fit(t, None)
    assert len(state.conflicts) == 1
    assert state.conflicts[0].startswith(
        "the data put the slope per sequence at 0.0197 ms (the prior's 0.002 ms), outside the prior's 99% band (+6.0 σ)"
    )
    assert state.conflicts[0].endswith(
        "the data win (that prior is widened 10×); check --model/--hardware/--dtype/--tp and the workload"
    )
    assert sm.t_seq_s == pytest.approx(2e-5, rel=0.03)  # widened, the prior no longer pulls the slope down
    # the same prior centred on the data's slope: no conflict, the truth back
    state = st.PriorFit()
    sm, _ = st.prior_structure(
        B, prior(slope_center_s=2e-5, sigma_log_slope=0.3, per_seq_floor_s=1e-6), 0.02, state
    ).fit(t, None)
    assert state.conflicts == [] and sm.t_seq_s == pytest.approx(2e-5, rel=1e-6)


def test_prior_structure_across_contexts() -> None:
    p = prior()
    ctx = np.array([400.0, 1600.0] * 3 + [400.0])
    truth = StepModel(1e-3, 8e-3, 2e-5 / 0.75, 2e-8, t_seq_s=1e-5, t_attn_token_s=4e-9 / 0.75)
    t = truth.step_time_s(B, ctx)
    state = st.PriorFit()
    s = st.prior_structure(B, p, 0.02, state, context=ctx)
    assert s.n_params == 3 and s.why.endswith(", the cost per context token fitted across the points' contexts")
    sm, _ = s.fit(t, None)
    assert state.conflicts == []
    assert sm.t_kv_token_s == pytest.approx(2e-8, rel=0.02) and sm.t_weights_s == pytest.approx(8e-3, rel=0.02)
    # KV reads per token below the peak's floor are named and the floor dropped
    thin = StepModel(1e-3, 8e-3, 2e-5 / 0.75, 2e-9, t_seq_s=1e-5, t_attn_token_s=4e-9 / 0.75).step_time_s(B, ctx)
    state = st.PriorFit()
    sm, _ = st.prior_structure(B, p, 0.02, state, context=ctx).fit(thin, None)
    assert any(c.startswith("the cost per context token the data show (2 ns per sequence)") for c in state.conflicts)
    assert sm.t_kv_token_s == pytest.approx(2e-9, rel=0.2)


# -- edge cases worked by hand ------------------------------------------------------------------------------------
def test_physics_law_at_a_reference_of_one_token() -> None:
    # a measured mean context of 1 token is a context: the law exists (KV 1e-8 / 0.75 at 8 ms against 6 ms at peak)
    law = st.physics_law(StepModel(0.0, 8e-3, 4e-5, 0.0, t_seq_s=1e-3), prior(context_tokens=1.0))
    assert law is not None and law.reference_tokens == 1.0 and law.kv_token_s == pytest.approx(1e-8 / 0.75)
    assert st.physics_law(StepModel(0.0, 8e-3, 4e-5, 0.0, t_seq_s=1e-3), prior(context_tokens=0.5)) is not None


def test_draw_is_log_normal_around_the_centre() -> None:
    z = np.random.default_rng(11).normal()  # the twin generator's first normal
    assert st._draw(np.random.default_rng(11), 2.0, 0.5) == pytest.approx(2.0 * np.exp(0.5 * z), rel=1e-12)
    assert st._draw(np.random.default_rng(11), 2.0, 0.0) == 2.0


FINE_KNEE = float(st.KNEE_GRID[70])  # 0.25·(4e5)^(70/239) ≈ 10.93: on the central grid, 6% from the sample grid's
SAMPLE_KNEE = float(st.SAMPLE_KNEE_GRID[17])  # 0.25·(4e5)^(17/59) ≈ 10.28: on the sample grid, 0.7% from the central's


# a point measured behind no rows (weight 0) counts for nothing: every weighted fit ignores how far off it lies
HALF_WEIGHT = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0])  # the point at batch 32 carries no rows


def off_at_32(t: np.ndarray, factor: float = 1.4) -> np.ndarray:
    return np.where(B == 32.0, t * factor, t)


def test_weightless_points_count_for_nothing_in_the_data_only_fits() -> None:
    ctx = np.array([100.0, 400.0] * 3 + [100.0])
    # the other points lie on a = 1, s₀ = 0.5, k = 0.01 (in the line structure's upper half: 8 @ 400, 16 @ 100 and
    # 64 @ 100, three points for three terms)
    t = off_at_32(1.0 + (0.5 + 0.01 * ctx) * B)
    assert st.fit_line_contexts(B, t, ctx, HALF_WEIGHT) == pytest.approx((1.0, 0.5, 0.01), rel=1e-9)
    assert st.fit_line(B, off_at_32(2.0 + 0.5 * B), HALF_WEIGHT) == pytest.approx((2.0, 0.5), rel=1e-9)
    sm, _ = st.line_structure(B, HALF_WEIGHT, ctx).fit(t, None)
    assert (sm.t_weights_s, sm.t_seq_s, sm.t_kv_token_s) == pytest.approx((1.0, 0.5, 0.01), rel=1e-9)
    # the roofline: six exact points of f = 1, W = 4, knee 16, s = 0.05 (c = 4 / 16)
    roof = off_at_32(kinked(B, 1.0, 4.0, 16.0, 0.05))
    grid = np.array([4.0, 8.0, 16.0, 32.0])
    terms = st.fit_kinked(B, roof, grid, HALF_WEIGHT)
    assert (terms.fixed_s, terms.weights_scale, terms.compute_s, terms.per_seq_s) == pytest.approx(
        (1.0, 4.0, 0.25, 0.05), rel=1e-9
    )
    with_kv = st.fit_kinked(B, off_at_32(kinked(B, 1.0, 4.0, 16.0, 0.05) + 1e-3 * ctx * B), grid, HALF_WEIGHT, ctx)
    assert (with_kv.compute_s, with_kv.per_seq_s, with_kv.kv_token_s) == pytest.approx((0.25, 0.05, 1e-3), rel=1e-9)
    # the structure's own grid: a knee on it (≈ 10.9) is recovered exactly
    on_grid = off_at_32(kinked(B, 1.0, 4.0, FINE_KNEE, 0.05))
    sm, _ = st.roofline_structure(B, HALF_WEIGHT).fit(on_grid, None)
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s, sm.t_seq_s) == pytest.approx(
        (1.0, 4.0, 4.0 / FINE_KNEE, 0.05), rel=1e-9
    )


def test_weightless_points_count_for_nothing_in_the_pinned_fits() -> None:
    # the line a = 2, s = 0.5 through 8, 16 and 64; overhead 15% of a; knee 100: c = 1.7 / 100
    sm, _ = st.pinned_structure(B, None, 100.0, None, HALF_WEIGHT).fit(off_at_32(2.0 + 0.5 * B), None)
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s, sm.t_seq_s) == pytest.approx((0.3, 1.7, 0.017, 0.5), rel=1e-9)
    ctx = np.array([100.0, 400.0] * 3 + [100.0])
    t = off_at_32(2.0 + (0.5 + 0.01 * ctx) * B)
    sm, _ = st.pinned_structure(B, None, 100.0, None, HALF_WEIGHT, ctx, 300.0).fit(t, None)
    assert (sm.t_weights_s, sm.t_seq_s, sm.t_kv_token_s) == pytest.approx((1.7, 0.5, 0.01), rel=1e-9)


# -- the normal-equation shortcut ---------------------------------------------------------------------------------
def test_solve_stacks_of_small_normal_equations() -> None:
    theta, ok = st._solve(np.array([[[4.0]], [[0.5]]]), np.array([[2.0], [3.0]]))
    assert theta.tolist() == [[0.5], [6.0]] and ok.tolist() == [True, True]  # 2 / 4, 3 / 0.5
    # [[2, 1], [1, 3]] θ = [5, 10]: det 5, θ = [(3·5 − 10) / 5, (2·10 − 5) / 5] = [1, 3]; the second pair is
    # collinear (det 0): not well-posed
    g = np.array([[[2.0, 1.0], [1.0, 3.0]], [[1.0, 2.0], [2.0, 4.0]]])
    theta, ok = st._solve(g, np.array([[5.0, 10.0], [1.0, 2.0]]))
    assert theta[0] == pytest.approx([1.0, 3.0]) and ok.tolist() == [True, False]
    # well-posedness is judged on unit columns: diagonal systems are well-posed at any scale
    g = np.array([[[1e-6, 0.0], [0.0, 1e-6]], [[1.0, 0.0], [0.0, 1e11]], [[1e11, 0.0], [0.0, 1.0]]])
    theta, ok = st._solve(g, np.array([[1e-6, 2e-6], [1.0, 1e11], [1e11, 1.0]]))
    assert ok.tolist() == [True, True, True] and theta == pytest.approx(np.array([[1.0, 2.0], [1.0, 1.0], [1.0, 1.0]]))
    # ... and a pair at 1e-5 of collinear (normalised det 1 − 0.99999² ≈ 2e-5) is still well-posed, 1e-6 (2e-12) not
    near = np.array([[[1.0, 0.99999], [0.99999, 1.0]], [[1e8, 1e8 * (1 - 1e-12)], [1e8 * (1 - 1e-12), 1e8]]])
    assert st._solve(near, np.array([[1.0, 1.0], [1.0, 1.0]]))[1].tolist() == [True, False]
    # 3×3: diag(1, 2, 4) θ = [1, 1, 1] → [1, 0.5, 0.25]; a repeated column is not well-posed
    g = np.array([np.diag([1.0, 2.0, 4.0]), np.ones((3, 3))])
    theta, ok = st._solve(g, np.ones((2, 3)))
    assert theta[0] == pytest.approx([1.0, 0.5, 0.25]) and ok.tolist() == [True, False]


@pytest.mark.parametrize(
    ("h", "best"),
    [
        # orthogonal columns of squared norms 1, 4, 2: each support's θᵢ = hᵢ / gᵢᵢ, and the least misfit is
        # yy − Σ hᵢ² / gᵢᵢ over the columns with hᵢ > 0 (yy = 10)
        ((2.0, -1.0, -1.0), 10 - 4),  # column 0 alone
        ((-1.0, 2.0, -1.0), 10 - 4 / 4),  # column 1 alone
        ((-1.0, -1.0, 2.0), 10 - 4 / 2),  # column 2 alone
        ((1.0, 2.0, -1.0), 10 - 1 - 1),  # columns 0 and 1
        ((1.0, -1.0, 2.0), 10 - 1 - 2),  # columns 0 and 2
        ((-1.0, 2.0, 2.0), 10 - 1 - 2),  # columns 1 and 2
        ((1.0, 2.0, 2.0), 10 - 1 - 1 - 2),  # all three
        ((-1.0, -1.0, -1.0), 10),  # none: θ = 0
    ],
)
def test_nnls_misfit_picks_the_best_non_negative_support(h: tuple[float, float, float], best: float) -> None:
    gram = np.diag([1.0, 4.0, 2.0])[None]
    assert st._nnls_misfit(gram, np.array([h]), 10.0) == pytest.approx([best])


def test_nnls_misfit_of_a_correlated_pair_by_hand() -> None:
    # columns 0, 1 of A = [[1, 0], [1, 1]]: AᵀA = [[2, 1], [1, 1]]; y = (1, 3): Aᵀy = (4, 3), yy = 10; unconstrained
    # θ = (1, 2) ≥ 0 fits exactly: misfit 0. With y = (3, 1): Aᵀy = (4, 1), θ = (3, −2) < 0: best single column is
    # column 0 (θ = 2, misfit 10 − 8 = 2) over column 1 (θ = 1, misfit 10 − 1 = 9)
    gram = np.zeros((2, 3, 3))
    gram[:, :2, :2] = [[2.0, 1.0], [1.0, 1.0]]
    gram[:, 2, 2] = 1.0  # an orthogonal third column the target does not touch (h₂ = 0)
    h = np.array([[4.0, 3.0, 0.0], [4.0, 1.0, 0.0]])
    assert st._nnls_misfit(gram, h, 10.0) == pytest.approx([0.0, 2.0], abs=1e-12)


# -- the knee profile -------------------------------------------------------------------------------------------
# batch 1 at 2.5, then 1 + 1.3·b: every knee between 1 and 2 fits exactly (only batch 1 lies below it). Knee 1.25:
# f = 1 (the intercept above), W + s = 1.5 (batch 1) and W / 1.25 + s = 1.3 → W = 1, s = 0.5, c = 0.8. Knee 1.5:
# W / 1.5 + s = 1.3 → W = 0.6, s = 0.9, c = 0.4. Tied knees keep the first.
TIED = np.where(B <= 1, 2.5, 1 + 1.3 * B)


@pytest.mark.parametrize("rows", [None, 3.0])
def test_tied_knees_keep_the_first(rows: float | None) -> None:
    weight = None if rows is None else np.full(B.size, rows)
    terms = st.fit_kinked(B, TIED, np.array([1.25, 1.5]), weight)
    assert (terms.fixed_s, terms.weights_scale, terms.compute_s, terms.per_seq_s) == pytest.approx(
        (1.0, 1.0, 0.8, 0.5), rel=1e-9
    )
    ctx = np.array([100.0, 400.0] * 3 + [100.0])
    terms = st.fit_kinked(B, TIED + 1e-3 * ctx * B, np.array([1.25, 1.5]), weight, ctx)
    assert (terms.fixed_s, terms.weights_scale, terms.compute_s, terms.per_seq_s, terms.kv_token_s) == pytest.approx(
        (1.0, 1.0, 0.8, 0.5, 1e-3), rel=1e-9
    )


def test_a_knee_a_hair_off_the_true_one_is_refit_and_loses() -> None:
    # the true knee 16 and one 1e-4 below it: both within the refit tolerance of the least normal-equation misfit
    # (≈ 9e-10 against 7e-9), and the exact refit keeps the true one
    t = kinked(B, 1.0, 4.0, 16.0, 0.05)
    grid = np.array([16.0 * (1 - 1e-4), 16.0])
    assert st._knee_misfits(B, t, np.ones(B.size), grid)[0] < 1e-9 * B.size
    terms = st.fit_kinked(B, t, grid)
    assert (terms.weights_scale, terms.compute_s, terms.per_seq_s) == pytest.approx((4.0, 0.25, 0.05), rel=1e-9)


def test_roofline_searches_the_fine_grid_centrally_and_the_coarse_one_in_samples() -> None:
    roof = st.roofline_structure(B)
    on_fine = kinked(B, 1.0, 4.0, FINE_KNEE, 0.05)
    sm, _ = roof.fit(on_fine, None)
    assert sm.t_compute_s == pytest.approx(4.0 / FINE_KNEE, rel=1e-9)
    on_coarse = kinked(B, 1.0, 4.0, SAMPLE_KNEE, 0.05)
    sm, _ = roof.fit(on_coarse, np.random.default_rng(0))
    assert (sm.t_weights_s, sm.t_compute_s) == pytest.approx((4.0, 4.0 / SAMPLE_KNEE), rel=1e-9)
    ctx = np.array([100.0, 400.0] * 3 + [100.0])
    with_ctx = st.roofline_structure(B, None, ctx)
    assert (with_ctx.name, with_ctx.n_params) == ("roofline", 5)
    assert with_ctx.why == (
        "roofline with a knee T = f + max(W, b·c) + (s₀ + k·ctx)·b through all points, across their contexts"
    )
    sm, part = with_ctx.fit(on_fine + 1e-3 * ctx * B, None)
    assert part == slice(0, 7)
    assert (sm.t_compute_s, sm.t_kv_token_s) == pytest.approx((4.0 / FINE_KNEE, 1e-3), rel=1e-9)


# -- the asserted knee or asymptote -----------------------------------------------------------------------------
def test_pinned_with_the_physics_by_hand() -> None:
    t = 9e-3 + 2e-5 * B  # a = 9 ms, s = 20 µs
    knee = st.pinned_structure(B, prior(), 200.0, None)
    assert knee.why == (
        "knee asserted at batch 200 (--critical-batch); memory-bound line from the upper half of the points; "
        "weights from the physics"
    )
    # a bandwidth centre above 100% is held at 100%: W = 6 ms at peak, the rest of a fixed
    sm, _ = st.pinned_structure(B, prior(bandwidth_center=1.25), 200.0, None).fit(t, None)
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s) == pytest.approx((3e-3, 6e-3, 3e-5))
    # no weights at peak (a floor without a weight stream): the whole intercept is fixed, c = 0 / 200
    bare = prior(weights_floor=StepModel(0.0, 0.0, 0.0, 1e-8, t_seq_s=2e-6))
    sm, _ = st.pinned_structure(B, bare, 200.0, None).fit(t, None)
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s, sm.t_seq_s) == pytest.approx((9e-3, 0.0, 0.0, 2e-5))


def test_pinned_samples_draw_the_bandwidth_and_the_overhead_share() -> None:
    # with the physics: e_w = 0.75·exp(0.35·z), z the generator's first normal (seed 4: z ≈ −0.65, e_w ≈ 0.60);
    # an intercept of 60 ms leaves W = 6 ms / e_w uncapped
    z = np.random.default_rng(4).normal()
    e_w = 0.75 * np.exp(0.35 * z)
    assert e_w < 1.0
    sm, _ = st.pinned_structure(B, prior(), 200.0, None).fit(60e-3 + 2e-5 * B, np.random.default_rng(4))
    assert (sm.t_weights_s, sm.t_fixed_s) == pytest.approx((6e-3 / e_w, 60e-3 - 6e-3 / e_w), rel=1e-9)
    # without: the overhead share is uniform in 5–35% of the intercept (seed 4: the first uniform draw)
    share = np.random.default_rng(4).uniform(0.05, 0.35)
    sm, _ = st.pinned_structure(B, None, 200.0, None).fit(2.0 + 0.5 * B, np.random.default_rng(4))
    assert (sm.t_fixed_s, sm.t_weights_s) == pytest.approx((share * 2.0, (1 - share) * 2.0), rel=1e-9)


def test_pinned_across_contexts_folds_at_the_default_reference_of_zero() -> None:
    ctx = np.array([100.0, 400.0] * 3 + [100.0])
    t = 9e-3 + (2e-6 + 1e-8 * ctx) * B  # a = 9 ms, s₀ = 2 µs, k = 10 ns per context token
    sm, _ = st.pinned_structure(B, prior(), 200.0, None, None, ctx).fit(t, None)
    # at context 0 the slope 2 µs lies below the floor 10 µs: held there; KV per token as fitted
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s) == pytest.approx((1e-3, 8e-3, 4e-5))
    assert (sm.t_seq_s, sm.t_kv_token_s) == pytest.approx((1e-5, 1e-8), rel=1e-9)


# -- the prior: a consistent truth at the centres, the knee inside the data -------------------------------------
def rich_prior(**changes: object) -> st.Prior:
    """c at peak 0.3 ms per sequence at the 800-token reference (attention 0.1 µs per token of it): at the centres
    W = 6 / 0.75 = 8 ms and c = 0.4 ms, a knee at 20 among the upper half's batches 8–64."""
    floor = StepModel(0.0, 6e-3, 0.0, 1e-8, t_seq_s=2e-6, t_attn_token_s=1e-7)
    return prior(**{"weights_floor": floor, "compute_floor_s": 3e-4, **changes})


CTX = np.array([400.0, 1600.0] * 3 + [400.0])


def rich_truth(overlap: float = 1.0, seq_s: float = 1e-5, kv_s: float = 2e-8) -> StepModel:
    """The whole model at the centres: compute at context 0 (0.3 ms − 800 · 0.1 µs) / 0.75, attention 0.1 µs / 0.75
    per token."""
    return StepModel(1e-3, 8e-3, 2.2e-4 / 0.75, kv_s, t_seq_s=seq_s, t_attn_token_s=1e-7 / 0.75, overlap=overlap)


def terms_of(sm: StepModel) -> tuple[float, ...]:
    return (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s, sm.t_kv_token_s, sm.t_seq_s, sm.t_attn_token_s)


@pytest.mark.parametrize("overlap", [1.0, 0.5, 0.0])
def test_prior_recovers_a_truth_at_its_centres_across_contexts(overlap: float) -> None:
    # every residual and every pull is zero at the truth: the MAP fit is the truth, to the optimiser's precision
    truth = rich_truth(overlap)
    state = st.PriorFit()
    structure = st.prior_structure(B, rich_prior(overlap=overlap), 0.02, state, context=CTX)
    assert structure.why == (
        "roofline through the upper half of the points with the physics of tiny on chip as a prior, the cost per "
        "context token fitted across the points' contexts"
    )
    sm, part = structure.fit(truth.step_time_s(B, CTX), None)
    assert part == slice(3, 7) and state.conflicts == []
    assert terms_of(sm) == pytest.approx(terms_of(truth), rel=1e-7)


def test_prior_recovers_a_truth_at_its_centres_past_the_knee() -> None:
    # one context: c = 0.3 / 0.75 = 0.4 ms, knee 20: batches 32 and 64 past it
    truth = StepModel(1e-3, 8e-3, 4e-4, 0.0, t_seq_s=2e-5)
    sm, _ = st.prior_structure(B, prior(compute_floor_s=3e-4), 0.02, st.PriorFit()).fit(truth.step_time_s(B), None)
    assert terms_of(sm) == pytest.approx(terms_of(truth), rel=1e-7)
    # compute faster than the peak (c = 0.2 ms: 150%): the efficiency is held at 100%, c = 0.3 ms
    fast = StepModel(1e-3, 8e-3, 2e-4, 0.0, t_seq_s=2e-5)
    sm, _ = st.prior_structure(B, prior(compute_floor_s=3e-4), 0.02, st.PriorFit()).fit(fast.step_time_s(B), None)
    assert sm.t_compute_s == pytest.approx(3e-4, rel=1e-9)


@pytest.mark.parametrize(
    ("overlap", "context"),
    [
        (1.0, None),  # the max: points on both sides of the knee
        (0.5, CTX),  # half hidden, several contexts: the KV column and every term of the slope's pull
        (0.0, CTX),
    ],
)
def test_prior_jacobian_is_the_finite_difference_one(
    overlap: float, context: np.ndarray | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = rich_truth(overlap)
    t = truth.step_time_s(B, 800.0 if context is None else context) * np.exp(0.01 * np.sin(B))  # off the truth
    slope = 1e-5 + 2e-8 * 800 + (1 - overlap) * 4e-4  # the slope per sequence below the knee at the reference
    p = rich_prior(overlap=overlap, slope_center_s=slope * 1.1, sigma_log_slope=0.3)
    real = st.least_squares
    checked = []

    def least_squares(fun, x0, jac, **kwargs):  # type: ignore[no-untyped-def]
        result = real(fun, x0, jac=jac, **kwargs)
        for theta in (x0, result.x):  # where the optimiser starts and where it ends
            assert jac(theta) == pytest.approx(central_differences(fun, theta), rel=1e-4, abs=1e-6)
        checked.append(x0.size)
        return result

    monkeypatch.setattr(st, "least_squares", least_squares)
    st.prior_structure(B, p, 0.02, st.PriorFit(), context=context).fit(t, None)
    assert checked == ([4, 4] if context is None else [5, 5])  # the data-led fit and the final one


# memory-bound truths at prior()'s centres (W = 8 ms, the knee past 64): one context, and several, where the
# compute at context 0 is (20 µs − 800 · 4 ns) / 0.75 and the attention 4 ns / 0.75 per token
def lean_truth(seq_s: float = 2e-5) -> StepModel:
    return StepModel(1e-3, 8e-3, 2e-5 / 0.75, 0.0, t_seq_s=seq_s)


def lean_truth_ctx(seq_s: float = 1e-5, kv_s: float = 2e-8) -> StepModel:
    return StepModel(1e-3, 8e-3, 1.68e-5 / 0.75, kv_s, t_seq_s=seq_s, t_attn_token_s=4e-9 / 0.75)


def test_prior_weightless_points_count_for_nothing() -> None:
    # batch 32 at 60% of the truth: counted, the line through the upper half would slope at 3.9 µs, below 80% of
    # the 10 µs floor, and drop it; weightless, the other three points give the truth
    t = off_at_32(lean_truth().step_time_s(B), 0.6)
    state = st.PriorFit()
    sm, _ = st.prior_structure(B, prior(), 0.02, state, weight=HALF_WEIGHT).fit(t, None)
    assert state.conflicts == [] and terms_of(sm) == pytest.approx(terms_of(lean_truth()), rel=1e-7)
    # several contexts: counted, that point (at 1600 tokens) would put k at 0, below the KV reads at peak
    t = off_at_32(lean_truth_ctx().step_time_s(B, CTX), 0.6)
    state = st.PriorFit()
    sm, _ = st.prior_structure(B, prior(), 0.02, state, weight=HALF_WEIGHT, context=CTX).fit(t, None)
    assert state.conflicts == [] and terms_of(sm) == pytest.approx(terms_of(lean_truth_ctx()), rel=1e-7)


def test_prior_cost_per_sequence_at_context_zero_keeps_its_floor() -> None:
    # the data ask for no cost per sequence at context 0 (all of it KV: 20 ns × 800 = 16 µs at the reference, above
    # the 10 µs floor): the floor at context 0 is the KV write and all-reduce at the peaks, 2 µs
    state = st.PriorFit()
    sm, _ = st.prior_structure(B, prior(), 0.02, state, context=CTX).fit(lean_truth_ctx(0.0).step_time_s(B, CTX), None)
    assert state.conflicts == [] and sm.t_seq_s == pytest.approx(2e-6, rel=1e-9)
    # a slope at the reference (1 µs + 16 µs) below 80% of a 100 µs floor drops it, and the one at context 0 with it
    state = st.PriorFit()
    t = lean_truth_ctx(1e-6).step_time_s(B, CTX)
    sm, _ = st.prior_structure(B, prior(per_seq_floor_s=1e-4), 0.02, state, context=CTX).fit(t, None)
    assert len(state.conflicts) == 1 and terms_of(sm) == pytest.approx(terms_of(lean_truth_ctx(1e-6)), rel=1e-7)


def test_prior_samples_draw_their_centres() -> None:
    # memory-bound points pin f + W and s only: a sample's efficiencies are its drawn centres, e_w = 0.75·e^(0.35 z₁)
    # (seed 2: 0.80, W = 6 ms / e_w) and e_c = 0.75·e^(0.5 z₂) (0.58, c = 20 µs / e_c), z the generator's normals
    twin = np.random.default_rng(2)
    e_w, e_c = 0.75 * np.exp(0.35 * twin.normal()), 0.75 * np.exp(0.5 * twin.normal())
    assert 6 / 9 < e_w < 1 and e_c < 1  # f = 9 ms − W stays positive, neither above 100%
    expected = (9e-3 - 6e-3 / e_w, 6e-3 / e_w, 2e-5 / e_c, 0.0, 2e-5, 0.0)
    t = lean_truth().step_time_s(B)
    # a sample refit before any central fit draws at the stated widths
    structure = st.prior_structure(B, prior(), 0.02, st.PriorFit())
    assert terms_of(structure.fit(t, np.random.default_rng(2))[0]) == pytest.approx(expected, rel=1e-6)
    # after a central fit with no conflict: the same
    structure.fit(t, None)
    assert terms_of(structure.fit(t, np.random.default_rng(2))[0]) == pytest.approx(expected, rel=1e-6)
    # several contexts: a sample before and after the central fit agree
    t = lean_truth_ctx().step_time_s(B, CTX)
    structure = st.prior_structure(B, prior(), 0.02, st.PriorFit(), context=CTX)
    first = structure.fit(t, np.random.default_rng(2))[0]
    structure.fit(t, None)
    assert terms_of(first) == pytest.approx(terms_of(structure.fit(t, np.random.default_rng(2))[0]), rel=1e-9)
    assert first.t_kv_token_s == pytest.approx(2e-8, rel=1e-6) and first.t_compute_s == pytest.approx(
        1.68e-5 / e_c, rel=1e-6
    )


def test_prior_edge_cases_name_no_conflict() -> None:
    t = lean_truth().step_time_s(B)
    # a slope spread without a slope centre (0: not measured) is no prior
    cases = [prior(sigma_log_slope=0.3), prior(per_seq_floor_s=0.0)]  # and no floor at all
    for p in cases:
        state = st.PriorFit()
        sm, _ = st.prior_structure(B, p, 0.02, state).fit(t, None)
        assert state.conflicts == [] and terms_of(sm) == pytest.approx(terms_of(lean_truth()), rel=1e-7)
    # no KV reads at peak (a stated context of 0 KV bytes): no floor on k to fall below
    no_kv = prior(weights_floor=StepModel(0.0, 6e-3, 0.0, 0.0, t_seq_s=2e-6, t_attn_token_s=4e-9))
    state = st.PriorFit()
    st.prior_structure(B, no_kv, 0.02, state, context=CTX).fit(lean_truth_ctx(kv_s=1e-9).step_time_s(B, CTX), None)
    assert state.conflicts == []


def test_prior_judges_the_floor_afresh_at_every_central_fit() -> None:
    state = st.PriorFit()
    structure = st.prior_structure(B, prior(), 0.02, state)
    structure.fit(lean_truth(2e-6).step_time_s(B), None)  # 2 µs: below 80% of the 10 µs floor
    assert len(state.conflicts) == 1
    sm, _ = structure.fit(lean_truth().step_time_s(B), None)  # 20 µs: above it
    assert state.conflicts == [] and sm.t_seq_s == pytest.approx(2e-5, rel=1e-7)


# -- the prior's conflicts, worded ------------------------------------------------------------------------------
WIN = "the data win (that prior is widened 10×); check --model/--hardware/--dtype/--tp and the workload"


@pytest.mark.parametrize(
    ("changes", "truth", "noise", "message"),
    [
        # the knee at 20 (points 32, 64 past it) fixes both efficiencies; near-exact data (noise 0.1%) leave the
        # widened prior next to nothing to pull, and z = ln(e / 0.75) / σ
        (  # bandwidth: W = 30 ms against 6 ms: 20%, z = ln(0.2 / 0.75) / 0.35 = −3.78
            {"compute_floor_s": 1.125e-3},
            StepModel(1e-3, 30e-3, 1.5e-3, 0.0, t_seq_s=2e-5),
            1e-3,
            f"the data put the bandwidth efficiency at 20% (the prior's 75%), outside the prior's 99% band (-3.8 σ): "
            f"{WIN}",
        ),
        (  # a measured slope of 1.2345 µs against data at 12.345 µs: z = ln 10 / 0.3 = +7.7
            {"slope_center_s": 1.2345e-6, "sigma_log_slope": 0.3, "per_seq_floor_s": 1e-6},
            StepModel(1e-3, 8e-3, 2e-5 / 0.75, 0.0, t_seq_s=1.2345e-5),
            1e-3,
            "the data put the slope per sequence at 0.0123 ms (the prior's 0.00123 ms), outside the prior's 99% band "
            f"(+7.7 σ): {WIN}",
        ),
        (  # a slope of 12.349995 µs below 80% of a 123.49995 µs floor (both a hair below a rounding boundary)
            {"per_seq_floor_s": 123.49995e-6},
            StepModel(1e-3, 8e-3, 2e-5 / 0.75, 0.0, t_seq_s=12.349995e-6),
            0.02,  # the slope shown is the line's through the points, whatever the noise
            "the cost per added sequence the data show (12.3 µs) is below the KV traffic at peak bandwidth (123 µs at "
            "a mean context of 800): the context is smaller than stated, or the KV cache is quantised (--kv-dtype); "
            "the data win (that floor is dropped)",
        ),
    ],
)
def test_prior_conflict_messages(changes: dict[str, float], truth: StepModel, noise: float, message: str) -> None:
    state = st.PriorFit()
    sm, _ = st.prior_structure(B, prior(**changes), noise, state).fit(truth.step_time_s(B), None)
    assert state.conflicts == [message]
    assert terms_of(sm) == pytest.approx(terms_of(truth), rel=1e-3)  # the data win


def test_prior_kv_conflict_message() -> None:
    # k = 1.2349999999 ns against 12.349999995 ns at peak (each a hair below a rounding boundary)
    floor = StepModel(0.0, 6e-3, 0.0, 12.349999995e-9, t_seq_s=2e-6, t_attn_token_s=4e-9)
    state = st.PriorFit()
    t = lean_truth_ctx(kv_s=1.2349999999e-9).step_time_s(B, CTX)
    st.prior_structure(B, prior(weights_floor=floor), 0.02, state, context=CTX).fit(t, None)
    assert state.conflicts == [
        "the cost per context token the data show (1.23 ns per sequence) is below the KV reads at peak bandwidth "
        "(12.3 ns): the contexts are smaller than stated, or the KV cache is quantised (--kv-dtype); the data win "
        "(that floor is dropped)"
    ]


def test_prior_fits_steps_growing_from_the_origin() -> None:
    # compute-bound from batch 8 with no fixed time (T = 1.27 ms · b), bent up by up to 1%: the line through the
    # upper half would cut the axis below 0, so its intercept is held at 0; the fit still describes the points (to
    # the 1% bend) and never streams the weights above the peak
    t = StepModel(0.0, 8e-3, 1.25e-3, 0.0, t_seq_s=2e-5).step_time_s(B) * (1 + 0.01 * B / 64)
    assert st.fit_line(B[3:], t[3:])[0] == 0.0
    sm, part = st.prior_structure(B, prior(compute_floor_s=3e-4), 0.02, st.PriorFit()).fit(t, None)
    assert sm.step_time_s(B[part]) == pytest.approx(t[part], rel=0.01)
    assert sm.t_weights_s >= 6e-3


def test_faster_than_peak_names_each_term_past_its_floor_by_hand() -> None:
    """llama-3.1-8b on an H100 at 1,024 tokens of context, pure decode: the weights stream in 4.48 ms at peak
    bandwidth, a sequence's GEMMs take 15.7 µs at peak FLOP/s and its KV reads 40.1 µs. A model at the floors claims
    nothing, nor one 1% under them (rounding); 2% under the weights' floor is named, with both times; GEMMs at half
    their floor are named only where the knee they put at 4.48 ms / 7.86 µs = 570 lies inside the batches measured;
    a cost per sequence (t_seq + t_compute) under the KV floor is named."""
    from tokenroof.fit.prior import prior_from_specs
    from tokenroof.specs import Precision, load_hardware, load_model

    prior = prior_from_specs(
        load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16"),
        MeasuredWorkload(decode_only=True, context_tokens=1024.0),
    )  # fmt: skip
    w, c, s = float(prior.weights_floor.weights_time_s(1.0)), prior.step_compute_floor_s, prior.per_seq_floor_s
    assert (round(w * 1e3, 2), round(c * 1e6, 1), round(s * 1e6, 1)) == (4.48, 15.7, 40.1)

    def model(weights: float, compute: float, seq: float) -> StepModel:
        return StepModel(t_fixed_s=1e-3, t_weights_s=weights, t_compute_s=compute, t_kv_token_s=0.0, t_seq_s=seq)

    assert st.faster_than_peak(model(w, c, s), prior, 4096) == []
    assert st.faster_than_peak(model(0.99 * w, 0.99 * c, 0.99 * s - 0.99 * c), prior, 4096) == []
    assert st.faster_than_peak(model(0.98 * w, c, s), prior, 64) == [
        f"the weight stream {0.98 * w * 1e3:.3g} ms per step, faster than peak bandwidth allows ({w * 1e3:.3g} ms)"
    ]
    fast = model(w, c / 2, s)
    knee = w / (c / 2)
    assert 569 < knee < 571 and st.faster_than_peak(fast, prior, 512) == []
    assert st.faster_than_peak(fast, prior, 1024) == [
        f"compute {c / 2 * 1e6:.3g} µs per sequence past a knee at batch {knee:.3g}, faster than peak FLOP/s allows "
        f"({c * 1e6:.3g} µs)"
    ]
    assert st.faster_than_peak(model(w, c, 0.3 * s), prior, 64) == [
        f"{(0.3 * s + c) * 1e6:.3g} µs per sequence, less than its KV reads take at peak bandwidth ({s * 1e6:.3g} µs)"
    ]
