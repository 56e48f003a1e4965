"""StepModel: closed forms for knee, critical batch, asymptote, bound labels."""

from __future__ import annotations

import numpy as np
import pytest

from tokenroof.model.stepmodel import StepModel

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
