"""The prior structure's closed forms: its step time and its Jacobian are what the StepModel and finite
differences give (the optimiser trusts both)."""

from __future__ import annotations

import pytest

import tokenroof.fit.structures as st
from tests.conftest import central_differences, matches_a_difference
from tests.test_contexts import measured
from tokenroof.fit.predict import Workload, predict_table
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
    prior = physics.prior(Workload.from_table(table, decode_only=True))
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
