"""The fit's structures on exact curves: each recovers the terms it was built from (make mutation)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import nnls

from tokenroof.fit import structures as st
from tokenroof.model.stepmodel import StepModel

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
