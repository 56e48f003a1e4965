"""StepModel: closed forms for knee, critical batch, asymptote, bound labels."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from tokenroof.model.stepmodel import (
    StepModel,
    expected_experts,
    factor_at,
    factors_at,
    matmul_time_s,
    mean_context_tokens,
    under_host,
)

SM = StepModel(t_fixed_s=1e-3, t_weights_s=10e-3, t_compute_s=50e-6, t_kv_token_s=10e-9)


def test_step_time_by_hand() -> None:
    # b=100, ctx=1000: 1 + max(10, 5) + 100·1000·1e-5 ms = 12 ms
    assert float(SM.step_time_s(100, 1000)) == pytest.approx(12e-3)
    # b=400: 1 + max(10, 20) + 4 = 25 ms
    assert float(SM.step_time_s(400, 1000)) == pytest.approx(25e-3)
    assert float(SM.throughput_tok_s(400, 1000)) == pytest.approx(400 / 25e-3)


def test_knee_and_critical_batch_closed_form() -> None:
    assert SM.knee_batch(1000) == pytest.approx(200)  # 10 ms / 50 µs
    assert SM.critical_batch(1000) == pytest.approx(10e-3 / (50e-6 - 10e-6))  # 250
    assert SM.critical_batch(0) == pytest.approx(200)
    assert SM.critical_batch(5000) is None  # 5000 · 10 ns = 50 µs ≥ compute
    assert "never turns compute-bound" in SM.no_critical_batch_reason(5000)


def test_asymptote() -> None:
    assert SM.throughput_asymptote_tok_s(1000) == pytest.approx(1 / 60e-6)
    big = float(SM.throughput_tok_s(1e7, 1000))
    assert big == pytest.approx(1 / 60e-6, rel=1e-3)


def test_bound_labels() -> None:
    b = np.array([1, 100, 400, 10_000])
    assert list(SM.bound(b, 0)) == ["weights", "weights", "compute", "compute"]
    tiny = StepModel(t_fixed_s=20e-3, t_weights_s=10e-3, t_compute_s=50e-6, t_kv_token_s=10e-9)
    assert str(tiny.bound(1, 0)) == "overhead"
    assert list(SM.bound([1000], [6000])) == ["kv"]


def test_moe_knee_solved_numerically() -> None:
    moe = StepModel(
        t_fixed_s=0,
        t_weights_s=2e-3,
        t_compute_s=20e-6,
        t_kv_token_s=0,
        t_expert_s=1e-3,
        num_experts=8,
        experts_per_token=2,
    )
    knee = moe.knee_batch(0)
    assert knee is not None
    assert float(moe.weights_time_s(knee)) == pytest.approx(knee * 20e-6, rel=1e-6)
    # at large batch all 8 experts are read: 10 ms / 20 µs = 500
    assert knee == pytest.approx(500, rel=0.01)


@pytest.mark.parametrize(
    ("overlap", "batch", "expected_s"),
    [
        (1.0, 5, 1 + 10 + 5 * 0.5),  # the roofline's max: weights (10) hide compute (5)
        (0.0, 5, 1 + 10 + 5 + 5 * 0.5),  # nothing hidden: weights and compute add
        (0.5, 5, 1 + 10 + 2.5 + 5 * 0.5),  # half of the smaller term hidden
        (0.0, 20, 1 + 20 + 10 + 20 * 0.5),  # past the knee the weights are the smaller term
        (0.5, 20, 1 + 20 + 5 + 20 * 0.5),
    ],
)
def test_overlap_hides_that_fraction_of_the_smaller_matmul_term(overlap: float, batch: int, expected_s: float) -> None:
    sm = StepModel(t_fixed_s=1.0, t_weights_s=10.0, t_compute_s=1.0, t_kv_token_s=0.0, t_seq_s=0.5, overlap=overlap)
    assert float(sm.step_time_s(batch)) == pytest.approx(expected_s)
    assert sm.knee_batch() == pytest.approx(10.0)  # where compute overtakes weight streaming, whatever the overlap


# -- by hand, one behaviour each (the tests `make mutation` runs on this module):
# The step model's formulas by hand, one behaviour each (make mutation: each would fail if a formula changed).
# every term non-zero and distinct, in exactly representable seconds
FULL = StepModel(
    t_fixed_s=0.5,
    t_weights_s=8.0,
    t_compute_s=1.0,
    t_kv_token_s=0.125,
    t_seq_s=0.25,
    t_attn_token_s=0.0625,
)


def test_mean_context_is_the_prompt_plus_half_the_output() -> None:
    assert mean_context_tokens(1000, 300) == 1150
    assert mean_context_tokens(0, 2) == 1


def test_expected_experts_by_hand() -> None:
    # E·(1 − (1 − k/E)^n): 8·(1 − 0.75^n)
    assert expected_experts(8, 2, 1.0) == pytest.approx(2.0)
    assert expected_experts(8, 2, 2.0) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert expected_experts(8, 2, 0.0) == pytest.approx(0.0)
    assert np.allclose(expected_experts(8, 2, np.array([1.0, 3.0])), [2.0, 8 * (1 - 0.75**3)])
    # a dense model touches none, whatever the tokens, keeping the array's shape
    assert expected_experts(0, 0, 5.0) == 0.0
    assert np.array_equal(expected_experts(0, 0, np.array([1.0, 7.0])), [0.0, 0.0])


@pytest.mark.parametrize(
    ("weights", "compute", "overlap", "expected"),
    [
        (10.0, 4.0, 1.0, 10.0),  # the roofline's max
        (10.0, 4.0, 0.0, 14.0),  # nothing hidden: they add
        (10.0, 4.0, 0.5, 12.0),  # half of the smaller hidden
        (4.0, 10.0, 0.5, 12.0),  # symmetric
        (4.0, 10.0, 0.25, 13.0),  # three quarters of the smaller still paid
    ],
)
def test_matmul_time_is_max_plus_the_unhidden_share_of_min(
    weights: float, compute: float, overlap: float, expected: float
) -> None:
    assert matmul_time_s(weights, compute, overlap) == pytest.approx(expected)
    assert np.allclose(matmul_time_s(np.array([weights]), np.array([compute]), overlap), [expected])


def test_numpy_scalars_become_plain_numbers() -> None:
    sm = StepModel(np.float64(1.0), np.float32(2.0), 0.5, 0.0, num_experts=np.int64(8), experts_per_token=2)
    assert type(sm.t_fixed_s) is float and type(sm.t_weights_s) is float and type(sm.num_experts) is int
    assert json.loads(json.dumps(sm.to_dict()))["num_experts"] == 8
    assert sm.to_dict() == {
        "t_fixed_s": 1.0,
        "t_weights_s": 2.0,
        "t_compute_s": 0.5,
        "t_kv_token_s": 0.0,
        "t_seq_s": 0.0,
        "t_attn_token_s": 0.0,
        "t_expert_s": 0.0,
        "num_experts": 8,
        "experts_per_token": 2,
        "overlap": 1.0,
        "prompts_folded": False,
        "t_host_s": 0.0,
        "t_comm_fixed_s": 0.0,
        "t_comm_seq_s": 0.0,
    }


def test_defaults() -> None:
    sm = StepModel(1.0, 2.0, 3.0, 4.0)
    assert (sm.t_seq_s, sm.t_attn_token_s, sm.t_expert_s, sm.num_experts, sm.experts_per_token) == (0, 0, 0, 0, 0)
    assert sm.overlap == 1.0 and sm.prompts_folded is False
    # the default context is 0: no KV reads
    assert float(sm.step_time_s(1)) == 1 + max(2, 3)
    assert float(sm.throughput_tok_s(2)) == pytest.approx(2 / (1 + 6))


def test_terms_per_sequence_and_per_step_by_hand() -> None:
    assert float(FULL.compute_time_per_seq_s(16)) == 1.0 + 0.0625 * 16  # 2
    assert float(FULL.memory_time_per_seq_s(16)) == 0.125 * 16 + 0.25  # 2.25
    c = FULL.components_s([2.0, 6.0], 16.0)
    assert np.array_equal(c["overhead"], [0.5, 0.5])
    assert np.array_equal(c["weights"], [8.0, 8.0])
    assert np.array_equal(c["compute"], [4.0, 12.0])
    assert np.array_equal(c["kv"], [4.5, 13.5])
    # T = 0.5 + max(8, b·2) + b·2.25
    assert np.allclose(FULL.step_time_s([2.0, 6.0], 16.0), [0.5 + 8 + 4.5, 0.5 + 12 + 13.5])
    assert np.allclose(FULL.throughput_tok_s([2.0, 6.0], 16.0), [2 / 13.0, 6 / 26.0])


def test_moe_weights_grow_with_the_experts_touched() -> None:
    moe = StepModel(0.0, 2.0, 0.0, 0.0, t_expert_s=0.5, num_experts=8, experts_per_token=2)
    assert np.allclose(moe.experts_touched([1.0, 2.0]), [2.0, 3.5])
    assert np.allclose(moe.weights_time_s([1.0, 2.0]), [2.0 + 0.5 * 2.0, 2.0 + 0.5 * 3.5])
    assert float(moe.step_time_s(2.0)) == pytest.approx(3.75)


def test_prompt_compute_counts_causal_attention_as_half_the_square() -> None:
    assert FULL.prompt_compute_s(4.0) == 4 * 1.0 + 0.0625 * 16 / 2  # 4.5
    assert FULL.prompt_compute_s(4.0, 10.0) == 4 * 1.0 + 0.0625 * 10 / 2  # 4.3125 (chunks given)
    assert FULL.prompt_compute_s(0.0) == 0.0


def test_scheduler_step_by_hand() -> None:
    # 2 sequences holding 16 tokens in all, 4 prompt tokens in one chunk:
    # compute = 2·1 + 0.0625·16 + (4·1 + 0.0625·16/2) = 3 + 4.5 = 7.5 < weights 8
    # T = 0.5 + 8 + 16·0.125 + 2·0.25 = 11
    assert FULL.step_s(2, 16.0, 4.0, 16.0) == pytest.approx(11.0)
    # 6 prompt tokens: compute = 3 + 6 + 0.0625·36/2 = 10.125 > 8
    assert FULL.step_s(2, 16.0, 6.0, 36.0) == pytest.approx(0.5 + 10.125 + 2 + 0.5)
    # additive (overlap 0): weights and compute both paid
    cpu = StepModel(0.5, 8.0, 1.0, 0.125, 0.25, 0.0625, overlap=0.0)
    assert cpu.step_s(2, 16.0, 4.0, 16.0) == pytest.approx(0.5 + 8 + 7.5 + 2 + 0.5)
    # no prefill: the vectorised model at the mean context
    assert FULL.step_s(2, 32.0) == pytest.approx(float(FULL.step_time_s(2, 16.0)))
    assert isinstance(FULL.step_s(2, 32.0), float)


def test_a_folded_model_adds_no_prompts() -> None:
    folded = StepModel(0.5, 8.0, 1.0, 0.125, 0.25, 0.0625, prompts_folded=True)
    assert folded.step_s(2, 16.0, 6.0, 36.0) == pytest.approx(FULL.step_s(2, 16.0))
    assert folded.step_s(2, 16.0, 6.0, 36.0) == pytest.approx(0.5 + 8 + 2 + 0.5)


def test_scheduler_moe_step_routes_the_prompt_tokens_too() -> None:
    moe = StepModel(0.0, 2.0, 0.0, 0.0, t_expert_s=0.5, num_experts=8, experts_per_token=2)
    # 1 decoding + 1 prompt token: 2 tokens touch 3.5 experts
    assert moe.step_s(1, 0.0, 1.0, 1.0) == pytest.approx(2.0 + 0.5 * 3.5)
    assert moe.step_s(1, 0.0) == pytest.approx(2.0 + 0.5 * 2.0)


def test_bound_labels_at_exact_ties_and_each_term() -> None:
    sm = StepModel(t_fixed_s=0.5, t_weights_s=1.0, t_compute_s=0.25, t_kv_token_s=0.0)
    # compute equals weights at b = 4: still weight-bound; past it compute-bound
    assert list(sm.bound([1.0, 4.0, 5.0])) == ["weights", "weights", "compute"]
    # overhead larger than the matmul
    assert str(StepModel(2.0, 1.0, 0.25, 0.0).bound(1.0)) == "overhead"
    # overhead equal to the matmul: the first (overhead) wins a tie
    assert str(StepModel(1.0, 1.0, 0.25, 0.0).bound(1.0)) == "overhead"
    # KV reads equal to the matmul: the matmul wins the tie; above it, kv
    kv = StepModel(0.0, 1.0, 0.25, 0.25)
    assert str(kv.bound(1.0, 4.0)) == "weights"
    assert str(kv.bound(1.0, 5.0)) == "kv"
    # a compute-bound matmul (2) against KV reads of b·0.25·ctx: a tie keeps compute, above it kv
    assert str(StepModel(0.0, 1.0, 0.5, 0.25).bound(4.0, 2.0)) == "compute"
    assert str(StepModel(0.0, 1.0, 0.5, 0.25).bound(4.0, 1.0)) == "compute"
    assert str(StepModel(0.0, 1.0, 0.5, 0.25).bound(4.0, 3.0)) == "kv"


def test_knee_and_critical_batch_with_attention_and_per_sequence_time() -> None:
    # knee: W / (c + attn·ctx) = 8 / (1 + 0.0625·16) = 4
    assert FULL.knee_batch(16) == pytest.approx(4.0)
    assert FULL.knee_batch() == pytest.approx(8.0)
    # critical: W / (c + attn·ctx − kv·ctx − t_seq); at ctx 0: 8 / (1 − 0.25) = 32/3
    assert FULL.critical_batch() == pytest.approx(8 / 0.75)
    assert FULL.critical_batch(2) == pytest.approx(8 / (1 + 0.125 - 0.25 - 0.25))
    # the weights-only knee ignores attention
    assert FULL.critical_batch_weights_only() == pytest.approx(8.0)
    # memory per sequence exactly equal to compute: never compute-bound
    assert StepModel(0.0, 1.0, 0.5, 0.0, t_seq_s=0.5).critical_batch() is None
    assert StepModel(0.0, 1.0, 0.5, 0.0, t_seq_s=0.25).critical_batch() == pytest.approx(4.0)
    # no compute at all: no knee
    assert StepModel(0.0, 1.0, 0.0, 0.0).knee_batch() is None


def test_moe_crossing_found_or_none() -> None:
    moe = StepModel(0.0, 2.0, 0.5, 0.0, t_expert_s=0.5, num_experts=8, experts_per_token=2)
    knee = moe.knee_batch()
    assert knee is not None
    assert float(moe.weights_time_s(knee)) == pytest.approx(knee * 0.5, rel=1e-9)
    assert 6 < knee < 12  # 2 + 0.5·touched ∈ (3, 6] at b = 2·(3…6)
    # compute so small the crossing lies past any batch: none
    assert StepModel(0.0, 2.0, 1e-12, 0.0, t_expert_s=0.5, num_experts=8, experts_per_token=2).knee_batch() is None


def test_no_critical_batch_reason_names_both_sides() -> None:
    text = FULL.no_critical_batch_reason(16)
    assert text.startswith("at context 16 the KV-cache reads per sequence (2.25e+06 µs per step)")
    assert "outweigh its compute (2e+06 µs per step)" in text


def test_asymptote_and_its_rounding_floor() -> None:
    # 1 / (compute + memory per sequence) = 1 / (2 + 2.25) at ctx 16
    assert FULL.throughput_asymptote_tok_s(16) == pytest.approx(1 / 4.25)
    assert FULL.throughput_asymptote_tok_s() == pytest.approx(1 / 1.25)
    assert StepModel(1.0, 1.0, 0.0, 0.0).throughput_asymptote_tok_s() == float("inf")
    assert StepModel(1.0, 1.0, 1e-12, 0.0).throughput_asymptote_tok_s() == float("inf")  # a picosecond: rounding
    assert StepModel(1.0, 1.0, 2e-12, 0.0).throughput_asymptote_tok_s() == pytest.approx(5e11)


def test_a_folded_model_adds_no_prompts_even_where_nothing_hides_them() -> None:
    # overlap 0: every second of compute shows. Decoding alone: compute = 2·1 + 0.0625·16 = 3
    # T = 0.5 + 8 + 3 + 16·0.125 + 2·0.25 = 14, the 6 arriving prompt tokens already in the fitted terms
    folded = StepModel(0.5, 8.0, 1.0, 0.125, 0.25, 0.0625, overlap=0.0, prompts_folded=True)
    assert folded.step_s(2, 16.0, 6.0, 36.0) == 14.0


def test_scheduler_step_uses_the_chunks_squares_it_is_given() -> None:
    # 6 prompt tokens in two chunks of 3: Σ chunk² = 18, not 6² = 36
    # compute = 2·1 + 0.0625·16 + 6·1 + 0.0625·18/2 = 9.5625 > weights 8
    # T = 0.5 + 9.5625 + 16·0.125 + 2·0.25 = 12.5625
    assert FULL.step_s(2, 16.0, 6.0, 18.0) == 12.5625


def test_bound_defaults_to_no_context() -> None:
    # KV reads of 2 s per context token: at the default context 0 they cost nothing
    sm = StepModel(0.0, 1.0, 0.25, 2.0)
    assert list(sm.bound([1.0, 8.0])) == ["weights", "compute"]  # compute 8·0.25 = 2 > weights 1 at b = 8
    assert str(sm.bound(1.0, 1.0)) == "kv"  # one context token: 2 s of KV against 1 s of weights


def test_dense_knee_is_the_closed_form_even_past_any_batch() -> None:
    # W / c = 1 / 2⁻⁴⁰ = 2⁴⁰ ≈ 1.1e12, beyond the 1e9 a MoE search stops at
    assert StepModel(0.0, 1.0, 2.0**-40, 0.0).knee_batch() == 2.0**40
    assert StepModel(0.0, 1.0, 0.5, 0.0).knee_batch() == 2.0  # 1 / 0.5


def test_a_single_expert_moe_streams_its_expert_at_every_batch() -> None:
    # E = k = 1: every token touches the one expert, weights = 1 + 1·1 = 2 s; knee = 2 / 0.5 = 4
    one = StepModel(0.0, 1.0, 0.5, 0.0, t_expert_s=1.0, num_experts=1, experts_per_token=1)
    assert one.knee_batch() == pytest.approx(4.0)


def test_moe_knee_below_one_sequence() -> None:
    # weights 0.25 + 0.0625·8·(1 − 0.75^b) against compute b·1: at b = 1/4 the weights are above 0.25,
    # at b = 1/2 they are 0.25 + 0.5·(1 − 0.75^0.5) < 0.25 + 0.5·0.14 < 0.5: the crossing lies in (1/4, 1/2)
    moe = StepModel(0.0, 0.25, 1.0, 0.0, t_expert_s=0.0625, num_experts=8, experts_per_token=2)
    knee = moe.knee_batch()
    assert knee is not None and 0.25 < knee < 0.5
    assert float(moe.weights_time_s(knee)) == pytest.approx(knee, rel=1e-9)


def test_moe_knee_none_when_compute_stays_under_a_second_of_weights() -> None:
    # weights at most 0.5 + 0.0625·8 = 1 s; compute at the 1e9 search limit 1e9·2⁻³¹ ≈ 0.47 s: no crossing
    moe = StepModel(0.0, 0.5, 2.0**-31, 0.0, t_expert_s=0.0625, num_experts=8, experts_per_token=2)
    assert moe.knee_batch() is None


def test_no_critical_batch_reason_in_full() -> None:
    # memory 3.125 µs per sequence, compute 2.125 µs: 3 significant figures, a tie rounds to even
    sm = StepModel(0.0, 1.0, 2.125e-6, 0.0, t_seq_s=3.125e-6)
    assert sm.no_critical_batch_reason(0) == (
        "at context 0 the KV-cache reads per sequence (3.12 µs per step) outweigh its compute (2.12 µs per step): "
        "decode never turns compute-bound; throughput approaches a bandwidth plateau set by KV reads, "
        "not a compute roof"
    )


def test_steps_s_is_step_s_over_arrays_term_for_term() -> None:
    """The scheduler fit evaluates `steps_s` (vectorised); it must be `step_s` for every step and every term: dense
    and MoE, overlapped or not, prompts priced or folded. By hand for one: fixed 1 + max(weights 2, compute
    (3 + 5)·0.25 + attention 0.125·(40 + 64/2)) + kv 40·0.0625 + seq 3·0.5 = 1 + 11 + 2.5 + 1.5 = 16."""
    hand = StepModel(1.0, 2.0, 0.25, 0.0625, t_seq_s=0.5, t_attn_token_s=0.125)
    assert hand.steps_s([3], [40], [5], [64]).tolist() == [16.0] == [hand.step_s(3, 40, 5, 64)]
    models = [
        hand,
        StepModel(1e-3, 5e-3, 2e-5, 3e-8, t_seq_s=7e-6, t_attn_token_s=1e-9, overlap=0.4),
        StepModel(1e-3, 2e-3, 1e-5, 3e-8, t_seq_s=1e-6, t_expert_s=4e-4, num_experts=8, experts_per_token=2),
        StepModel(2e-3, 4e-3, 3e-5, 1e-8, t_seq_s=2e-6, t_attn_token_s=2e-9, prompts_folded=True),
    ]
    batch = np.array([1.0, 4.0, 32.0, 7.0, 256.0])
    context = np.array([100.0, 3000.0, 40000.0, 0.0, 2e6])
    prefill = np.array([0.0, 512.0, 0.0, 2048.0, 128.0])
    prefill_sq = np.array([0.0, 512.0**2, 0.0, 2 * 1024.0**2, 128.0**2])
    for model in models:
        got = model.steps_s(batch, context, prefill, prefill_sq)
        want = [model.step_s(*args) for args in zip(batch, context, prefill, prefill_sq, strict=True)]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        assert got.dtype == np.float64 and got.shape == batch.shape


KNOTS = ((1.0, 0.9), (4.0, 1.2))


@pytest.mark.parametrize(
    ("batch", "factor"),
    [
        (0, 1.0),  # no decoding sequence (an extra forward pass's empty step): the form's
        (1, 0.9),
        (2, 1.05),  # halfway in log batch between 1 and 4
        (4, 1.2),
        (6, 1.2 - 0.2 * 0.5849625007211562),  # fading over the doubling past 4: log2(6/4) of the way
        (8, 1.0),
        (100, 1.0),
    ],
)
def test_measured_departures_by_hand(batch: float, factor: float) -> None:
    assert factor_at(KNOTS, batch) == pytest.approx(factor)
    assert factors_at(KNOTS, np.array([batch]))[0] == pytest.approx(factor)
    assert factor_at((), batch) == 1.0
    assert factors_at((), np.array([batch, 2.0])).tolist() == [1.0, 1.0]


def test_departures_apply_to_decode_steps_only_and_every_path_agrees() -> None:
    """A decode step × the factor at its batch: step_s, steps_s and step_time_s; a step with prompt tokens or
    speculative queries is the form's, as are the components."""
    line = StepModel(t_fixed_s=1e-2, t_weights_s=5e-4, t_compute_s=8e-4, t_kv_token_s=1e-7, t_seq_s=1.7e-3)
    bent = StepModel(**{**line.to_dict(), "batch_factors": [[4, 1.2], [1, 0.9]]})  # sorted as made
    assert bent.batch_factors == KNOTS
    assert bent.step_s(2, 300.0) == pytest.approx(1.05 * line.step_s(2, 300.0))
    assert bent.step_s(2, 300.0, 128, 128**2) == line.step_s(2, 300.0, 128, 128**2)
    assert bent.step_s(2, 300.0, query_tokens=3) == line.step_s(2, 300.0, query_tokens=3)
    assert bent.step_s(0, 0.0) == line.step_s(0, 0.0)
    batches = np.array([1.0, 2.0, 3.0, 6.0, 2.0])
    prefill = np.array([0.0, 0.0, 0.0, 0.0, 64.0])
    arrays = bent.steps_s(batches, batches * 150, prefill, prefill**2)
    one_by_one = [bent.step_s(b, b * 150, p, p * p) for b, p in zip(batches, prefill, strict=True)]
    assert arrays == pytest.approx(one_by_one)
    assert bent.step_time_s(batches[:4], 150.0) == pytest.approx(one_by_one[:4])
    assert bent.components_s(2, 150.0)["weights"] == line.components_s(2, 150.0)["weights"]
    assert bent.to_dict()["batch_factors"] == [[1.0, 0.9], [4.0, 1.2]]
    assert "batch_factors" not in line.to_dict() and line.departures() == ""
    three = StepModel(1e-3, 1e-3, 0.0, 0.0, batch_factors=((1, 0.9), (2, 1.1), (16, 0.97)))
    assert three.departures().endswith("(×0.90 at 1, ×1.10 at 2, ×0.97 at 16 sequences; fading to none by 32)")
    assert bent.departures() == (
        "in range its decode steps take the measured departures from these terms (×0.90 at 1, ×1.20 at 4 sequences; "
        "fading to none by 8)"
    )


@pytest.mark.parametrize("knots", [((0.5, 1.0),), ((2.0, 0.0),), ((2.0, 1.0), (2.0, 1.1)), ((2.0, float("nan")),)])
def test_bad_departures_are_refused(knots: tuple[tuple[float, float], ...]) -> None:
    with pytest.raises(ValueError, match="batch_factors"):
        StepModel(1e-3, 1e-3, 0.0, 0.0, batch_factors=knots)


def test_departure_limits_are_inclusive() -> None:
    """Batches in [1, 1e9] and factors in [1e-3, 1e3] (FACTOR_LIMITS), ends included."""
    edges = StepModel(1e-3, 1e-3, 0.0, 0.0, batch_factors=((1.0, 1e3), (1e9, 1e-3)))
    assert edges.batch_factors == ((1.0, 1e3), (1e9, 1e-3))


def test_an_eager_engines_launches_set_the_step_where_they_outlast_the_gpus_work() -> None:
    """t_host_s: the GPU's work runs under the host's kernel launches, so a step is t_fixed + max(GPU, launches).
    By hand (powers of two, exact): W = 2^-8 s, C = 2^-14 s a sequence, launches 2^-7 s, t_fixed 2^-10 s. Batch 1:
    GPU max(2^-8, 2^-14) = 2^-8 < 2^-7, so 2^-10 + 2^-7; batch 1024: C·b = 2^-4 > 2^-7, so 2^-10 + 2^-4."""
    assert under_host(2.0**-8, 2.0**-7) == 2.0**-7
    assert under_host(2.0**-6, 2.0**-7) == 2.0**-6
    assert under_host(2.0**-8, 0.0) == 2.0**-8  # no launches measured: the GPU's work alone
    assert under_host(np.array([2.0**-8, 2.0**-6]), 2.0**-7).tolist() == [2.0**-7, 2.0**-6]
    eager = StepModel(2.0**-10, 2.0**-8, 2.0**-14, 0.0, t_host_s=2.0**-7)
    assert eager.step_s(1, 0.0) == 2.0**-10 + 2.0**-7
    assert eager.step_s(1024, 0.0) == 2.0**-10 + 2.0**-4
    assert eager.step_time_s(np.array([1.0, 1024.0])).tolist() == [2.0**-10 + 2.0**-7, 2.0**-10 + 2.0**-4]
    assert eager.steps_s([1.0, 1024.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]).tolist() == [
        2.0**-10 + 2.0**-7,
        2.0**-10 + 2.0**-4,
    ]


def test_the_host_binds_a_step_only_where_its_launches_outlast_the_gpus_whole_work_and_the_overhead() -> None:
    """bound(): "host" where t_host exceeds the GPU's work (matmuls and KV reads together) and the fixed overhead, by
    hand. Weights 4 ms, 0.1 ms a sequence of compute, 1 µs a KV token, launches 6 ms: at batch 1 and no context the
    GPU's 4 ms, with 1,000 tokens of context 5 ms, run under the launches (host); with 3,000 tokens 7 ms outlast
    them (weights bind); batch 100 computes for 10 ms. Launches that only tie the GPU's work (4 ms) or the overhead
    (6 ms), or that outlast the GPU but not an 8 ms overhead, do not bind."""
    sm = StepModel(t_fixed_s=1e-3, t_weights_s=4e-3, t_compute_s=1e-4, t_kv_token_s=1e-6, t_host_s=6e-3)
    assert sm.bound([1, 1, 1, 100], [0, 1000, 3000, 0]).tolist() == ["host", "host", "weights", "compute"]
    assert replace(sm, t_host_s=4e-3).bound(1).tolist() == "weights"  # a tie with the GPU's work
    assert replace(sm, t_fixed_s=6e-3).bound(1).tolist() == "overhead"  # a tie with the overhead
    assert replace(sm, t_fixed_s=8e-3).bound(1).tolist() == "overhead"  # past the GPU, under the overhead


def test_scaled_makes_every_step_that_many_times_as_long() -> None:
    """Each time term times the factor: the step (max, min and sums of them) with it, the launches an eager engine's
    step runs under, prompts' and experts' costs too; the measured departures are ratios and stay."""
    sm = StepModel(
        t_fixed_s=2e-3,
        t_weights_s=8e-3,
        t_compute_s=4e-5,
        t_kv_token_s=2e-8,
        t_seq_s=5e-5,
        t_attn_token_s=1e-8,
        t_expert_s=1e-4,
        num_experts=8,
        experts_per_token=2,
        overlap=0.7,
        t_host_s=9e-3,
        batch_factors=((1.0, 1.1), (4.0, 0.95)),
    )
    slower = sm.scaled(1.03)
    assert slower.batch_factors == sm.batch_factors and slower.overlap == sm.overlap
    for batch, context, prompt in ((1, 100.0, 0.0), (3, 900.0, 0.0), (64, 64_000.0, 512.0), (256, 5e5, 0.0)):
        assert slower.step_s(batch, context, prompt, prompt**2) == pytest.approx(
            1.03 * sm.step_s(batch, context, prompt, prompt**2), rel=1e-12
        )
    assert slower.t_host_s == pytest.approx(9.27e-3) and slower.t_fixed_s == pytest.approx(2.06e-3)


def test_the_all_reduces_are_named_apart_from_the_overhead_and_the_kv_and_cost_nothing_more() -> None:
    """t_comm_fixed_s and t_comm_seq_s are parts of t_fixed_s and t_seq_s: by hand, 5 ms fixed of which 4 ms are
    the all-reduce calls, 3 ms of weights, 10 µs a sequence of which 4 µs are the all-reduce bytes, no KV reads."""
    plain = StepModel(t_fixed_s=5e-3, t_weights_s=3e-3, t_compute_s=0.0, t_kv_token_s=0.0, t_seq_s=10e-6)
    split = replace(plain, t_comm_fixed_s=4e-3, t_comm_seq_s=4e-6)
    b = np.array([1.0, 100.0, 1000.0])
    assert np.array_equal(split.step_time_s(b), plain.step_time_s(b))  # 5 + 3 + b·0.01 ms either way
    parts = split.components_s(b, 0.0)
    assert parts["overhead"] == pytest.approx([1e-3] * 3)
    assert parts["interconnect"] == pytest.approx([4e-3 + 4e-6, 4e-3 + 0.4e-3, 4e-3 + 4e-3])
    assert parts["kv"] == pytest.approx([6e-6, 0.6e-3, 6e-3])
    # at 1 the calls (4.004 ms) outlast the weights (3); at 1000 the KV term's 6 ms the calls' 8 ms do not
    assert list(split.bound(b)) == ["interconnect", "interconnect", "interconnect"]
    assert list(plain.bound(b)) == ["overhead", "overhead", "kv"]
    assert list(replace(split, t_comm_seq_s=0.0).bound(b)) == ["interconnect", "interconnect", "kv"]
    # a part larger than its term (a refit shrank the term) is the whole term, no more
    shrunk = replace(split, t_fixed_s=1e-3)
    assert shrunk.comm_parts_s() == (1e-3, 4e-6) and shrunk.components_s(1.0, 0.0)["overhead"] == pytest.approx(0.0)
