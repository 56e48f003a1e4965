"""plan: cheapest feasible configuration, its binding constraint and interval; infeasible targets explained."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.plan import Slo, make_plan
from tokenroof.simulate import Lengths, Workload
from tokenroof.stepmodel import StepModel

SM = StepModel(t_fixed_s=2e-3, t_weights_s=8e-3, t_compute_s=50e-6, t_kv_token_s=0.0, t_seq_s=30e-6)
WORKLOAD = Workload(30, Lengths(200, "lognormal", 0.5), Lengths(100, "lognormal", 0.5), num_requests=1500)


def test_cheapest_feasible_configuration() -> None:
    plan = make_plan([SM], WORKLOAD, Slo(ttft_p99_ms=500, tpot_p99_ms=20), seeds=(0, 1), workers=1)
    data = plan.to_dict()
    assert data["feasible"]
    chosen = data["chosen"]
    assert chosen["ttft_p99_ms"][1] <= 500 and chosen["tpot_p99_ms"][1] <= 20
    assert chosen["ttft_p99_ms"][0] <= chosen["ttft_p99_ms"][1]  # an interval over seeds
    fewer = [t for t in data["tried"] if t["replicas"] < chosen["replicas"]]
    assert all(not t["feasible"] for t in fewer)


def test_infeasible_tpot_says_what_is_closest_and_why() -> None:
    plan = make_plan([SM], WORKLOAD, Slo(ttft_p99_ms=500, tpot_p99_ms=5), seeds=(0,), workers=1, max_replicas=4)
    data = plan.to_dict()
    assert not data["feasible"] and data["chosen"] is None
    assert "closest" in data["reason"] and "TPOT p99 (batch size)" in data["reason"]
    with pytest.raises(TokenroofError, match="SLOs must be positive"):
        make_plan([SM], WORKLOAD, Slo(0, 5))


def test_cli_plan_from_a_preset() -> None:
    data = run_json(
        [
            "plan",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm",
            "--rate",
            "5",
            "--num-requests",
            "600",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--gpu-cost-per-hour",
            "2",
        ]
    )
    assert data["feasible"] and data["chosen"]["replicas"] >= 1
    assert data["cost_per_hour"] == 2 * data["chosen"]["replicas"]
    result = run_cli(["plan", "--rate", "5"])
    assert result.exit_code == 2 and "give one step-model source" in result.stderr
