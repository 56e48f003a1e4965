"""advise: hand-computed caps, memory binding, infeasible targets, engine flags."""

from __future__ import annotations

import pytest

from tests.conftest import SEED_TABLE, run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.advise import advise, engine_flags, largest_batch_within, throughput_latency_knee

SM = StepModel(t_fixed_s=1e-3, t_weights_s=10e-3, t_compute_s=50e-6, t_kv_token_s=0.0, t_seq_s=10e-6)
SEED = str(SEED_TABLE)


def test_cap_by_hand() -> None:
    # past the knee (200): T = 1 + 0.06·b ms ≤ 20 → b ≤ 316.7
    assert largest_batch_within(SM, 20e-3) == 316
    # below the knee: T = 11 + 0.01·b ≤ 12 → b ≤ 100
    assert largest_batch_within(SM, 12e-3) == 100
    assert largest_batch_within(SM, 10e-3) == 0


def test_advice_fields_and_memory_binding() -> None:
    advice = advise(SM, 20.0).to_dict()
    assert advice["max_num_seqs"] == 316
    assert advice["binding"] == "tpot"
    assert advice["at_cap"]["tpot_ms"] <= 20.0 and advice["slo"]["statistic"] == "mean"
    assert advice["engine_flags"]["vllm"] == "--max-num-seqs 316"
    limited = advise(SM, 20.0, memory_limit=150).to_dict()
    assert limited["max_num_seqs"] == 150 and limited["binding"] == "memory"
    assert any("the running batch cannot exceed" in w and "that binds" in w for w in limited["warnings"])


def test_infeasible_target_says_why() -> None:
    with pytest.raises(TokenroofError, match=r"batch 1 already takes 11 ms"):
        advise(SM, 5.0)


def test_knee_of_throughput_latency_curve_is_inside_the_range() -> None:
    knee = throughput_latency_knee(SM, 0.0, 1000.0)
    assert 50 < knee < 400


def test_engine_flags_spelling() -> None:
    assert engine_flags(64) == {  # from the engines table, servers in name order
        "llama-cpp": "--parallel 64",
        "lmdeploy": "--max-batch-size 64",
        "sglang": "--max-running-requests 64",
        "tensorrt-llm": "--max_batch_size 64",
        "tgi": "--max-batch-size 64",
        "vllm": "--max-num-seqs 64",
    }
    assert list(engine_flags(64)) == sorted(engine_flags(64))


def test_cli_advise_from_measurements_and_from_specs() -> None:
    data = run_json(["advise", SEED, "--tpot-slo-ms", "30", "--samples", "20"])
    assert data["max_num_seqs"] > 128
    lo, hi = data["max_num_seqs_low"], data["max_num_seqs_high"]
    assert lo <= data["max_num_seqs"] <= hi
    data = run_json(["advise", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "2048", "--tpot-slo-ms", "30"])
    assert data["binding"] == "memory" and data["max_num_seqs"] == 208
    table = run_cli(["advise", SEED, "--tpot-slo-ms", "30", "--samples", "20"])
    assert "--max-running-requests" in table.stdout


def test_cli_advise_needs_a_source() -> None:
    result = run_cli(["advise", "--tpot-slo-ms", "30"])
    assert result.exit_code == 2
    assert "give a measurement file, or --model and --hardware" in result.stderr
