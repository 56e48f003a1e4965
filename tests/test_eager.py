"""An engine without CUDA graphs (`--enforce-eager`): the host's launches as a floor the GPU's work runs under."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tests.conftest import run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.fit.physics import Physics
from tokenroof.model import roofline as rl
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import Precision, load_hardware, load_model
from tokenroof.specs.engines import load_engine

# 1 ms of fixed overhead, 5 ms of weights, 0.1 ms of compute and 0.05 ms of per-sequence time per sequence, 10 ms of
# launches
EAGER = StepModel(t_fixed_s=1e-3, t_weights_s=5e-3, t_compute_s=1e-4, t_kv_token_s=0.0, t_seq_s=5e-5, t_host_s=10e-3)


def test_the_step_is_the_overhead_plus_the_longer_of_the_gpus_work_and_the_launches() -> None:
    # batch 1: GPU 5 + 0.05 = 5.05 ms < 10 ms of launches → 1 + 10 = 11 ms, whatever the batch below the crossing
    # batch 100: GPU max(5, 100 × 0.1) + 100 × 0.05 = 10 + 5 = 15 ms > 10 → 1 + 15 = 16 ms
    assert EAGER.step_time_s([1, 10, 100]) == pytest.approx([11e-3, 11e-3, 16e-3])
    assert EAGER.bound([1, 100]).tolist() == ["host", "compute"]
    # the scheduler's float path and the fit's array path are the same formula
    for batch in (1, 10, 100):
        assert EAGER.step_s(batch, 0.0) == pytest.approx(float(EAGER.step_time_s(batch)))
    steps = EAGER.steps_s([1, 100], [0, 0], [0, 0], [0, 0])
    assert steps == pytest.approx([11e-3, 16e-3])
    # no launches (a CUDA-graph engine): the step model as before, term for term
    graphs = StepModel(t_fixed_s=1e-3, t_weights_s=5e-3, t_compute_s=1e-4, t_kv_token_s=0.0, t_seq_s=5e-5)
    assert graphs.step_time_s([1, 100]) == pytest.approx([6.05e-3, 16e-3])
    assert graphs.bound([1]).tolist() == ["weights"]


def test_prompt_tokens_in_a_step_count_as_gpu_work_under_the_launches() -> None:
    # 40 prompt tokens at 0.1 ms: compute 4.1 ms < 5 ms of weights, GPU 5.05 ms, still under 10 ms of launches;
    # 200 prompt tokens: compute 20.1 ms, GPU 20.15 ms > 10 → 1 + 20.15 ms
    assert EAGER.step_s(1, 0.0, prefill_tokens=40) == pytest.approx(11e-3)
    assert EAGER.step_s(1, 0.0, prefill_tokens=200) == pytest.approx(21.15e-3)


def test_launches_per_layer_less_the_all_reduces_the_launches_hide() -> None:
    """80 layers × 0.3 ms = 24 ms of launches. The all-reduces are GPU work the launches hide too: at TP8 two per
    layer of (10 µs + 7 × 2 µs) = 3.84 ms, so t_host = 24 − 3.84 = 20.16 ms beside t_fixed's 3.84 + 1 ms."""
    model, hw = load_model("llama-2-70b"), load_hardware("h100-sxm")
    eff = rl.Efficiencies(host_s_per_layer=3e-4, allreduce_latency_s=1e-5, allreduce_step_latency_s=2e-6)
    sm = rl.step_model_from_specs(model, hw, Precision.create("bf16"), 8, eff)
    assert sm.t_host_s == pytest.approx(24e-3 - 3.84e-3)
    assert sm.t_fixed_s == pytest.approx(1e-3 + 3.84e-3)
    # at batch 1 the host binds: 1 + 3.84 + 20.16 = 25 ms, the launches and the fixed overhead alone
    assert float(sm.step_time_s(1, 576)) == pytest.approx(25e-3)
    assert rl.step_model_from_specs(model, hw, Precision.create("bf16"), 8).t_host_s == 0.0
    # the all-reduces' launches only where --tp splits the model: 80 × (0.24 + 2 × 0.03) = 24 ms at --tp 2, 19.2 at 1
    eff = rl.Efficiencies(host_s_per_layer=2.4e-4, host_s_per_allreduce=3e-5, allreduce_latency_s=0.0)
    eff = replace(eff, allreduce_step_latency_s=0.0)
    assert rl.step_model_from_specs(model, hw, Precision.create("bf16"), 2, eff).t_host_s == pytest.approx(24e-3)
    assert rl.step_model_from_specs(model, hw, Precision.create("bf16"), 1, eff).t_host_s == pytest.approx(19.2e-3)


def test_enforce_eager_adds_the_profiles_launches_and_widens_the_interval_where_the_host_sets_the_step() -> None:
    """The host's spread widens a step's interval only where the launches can set it. By hand, the profile's own
    factors lo, h, the host's spreads f, s (logs), a fixed 1 ms: a step whose launches (5 ms) outlast the GPU's 2 ms
    takes exp(∓hypot(log l, f)) / exp(hypot(log h, s)), but never below the GPU's own step (1 + 2) × lo; one whose
    GPU work (10 ms) outlasts them keeps lo below and reaches max(11 h, (1 + 5) exp(hypot(log h, s))) above: the
    launches' step at the same high, so the bound does not jump where the two cross."""
    graphs = load_engine("vllm-v0")
    eager = graphs.enforce_eager()
    assert graphs.eager is not None and eager.eager_enforced and eager.enforce_eager() is eager
    assert eager.efficiencies["host_s_per_layer"] == graphs.eager.host_s_per_layer
    assert "host_s_per_layer" not in graphs.efficiencies
    assert eager.accuracy == graphs.accuracy  # the profile's own spread; the host's goes in step by step
    lo, h = graphs.accuracy.factors()
    f, s = graphs.eager.log_spread_faster, graphs.eager.log_spread_slower
    steps, gpu = np.array([6.0, 11.0]), np.array([2.0, 10.0])
    lows, highs = eager.eager_interval_factors(steps, 1.0, gpu, 5.0)
    assert lows[0] == pytest.approx(max(6 * math.exp(-math.hypot(math.log(lo), f)), 3 * lo) / 6)
    assert highs[0] == pytest.approx(math.exp(math.hypot(math.log(h), s)))
    host_high = math.exp(math.hypot(math.log(h), s))  # the launches' step at the quadrature high: continuous
    assert lows[1] == pytest.approx(lo) and highs[1] == pytest.approx(max(11 * h, (1 + 5) * host_high) / 11)
    at_the_cross = eager.eager_interval_factors(np.array([6.0, 6.0]), 1.0, np.array([5.0 - 1e-9, 5.0 + 1e-9]), 5.0)
    assert at_the_cross[1][0] == pytest.approx(at_the_cross[1][1], rel=1e-6)
    assert [list(x) for x in graphs.eager_interval_factors(steps, 1.0, gpu, 5.0)] == [[lo, lo], [h, h]]
    assert rl.profile_efficiencies(eager).host_s_per_layer == pytest.approx(2.4e-4)
    assert rl.profile_efficiencies(eager).host_s_per_allreduce == pytest.approx(3e-5)
    # an unfitted profile's bias correction slows its kernels' constants, not the launches' own estimate
    v1 = rl.profile_efficiencies(load_engine("vllm-v1").enforce_eager())
    assert (
        v1.host_s_per_layer == pytest.approx(2.4e-4)
        and v1.overhead_s > load_engine("vllm-v1").efficiencies["overhead_s"]
    )
    with pytest.raises(TokenroofError, match=r"engine 'sglang' has no eager mode.*tgi or vllm-v0 or vllm-v1"):
        load_engine("sglang").enforce_eager()


def test_physics_runs_the_engine_eagerly_and_says_it_needs_specs() -> None:
    physics = Physics("llama-2-70b", "h100-sxm", tp=8, engine="vllm-v0", eager=True)
    graphs = Physics("llama-2-70b", "h100-sxm", tp=8, engine="vllm-v0")
    assert physics.step_model().t_host_s > 0 and graphs.step_model().t_host_s == 0
    assert float(physics.step_model().step_time_s(1, 576)) > 1.5 * float(graphs.step_model().step_time_s(1, 576))
    with pytest.raises(TokenroofError, match="eager shapes first principles"):
        Physics(eager=True)


def test_roofline_enforce_eager_names_the_host_as_the_bound_and_says_so_in_json() -> None:
    args = ["roofline", "-m", "llama-2-70b", "-H", "h100-sxm", "--tp", "8", "--engine", "vllm-v0", "--batch", "1,256"]
    graphs, eager = run_json(args), run_json([*args, "--enforce-eager"])
    rows, base = eager["points"], graphs["points"]
    assert rows[0]["bound"] == "host" and base[0]["bound"] != "host"
    assert rows[0]["tpot_ms"] > 1.5 * base[0]["tpot_ms"] and rows[0]["time_host_ms"] > 0
    # at a large batch the GPU's work outlasts the launches: eager costs little there
    assert rows[1]["bound"] != "host" and rows[1]["tpot_ms"] == pytest.approx(base[1]["tpot_ms"], rel=0.05)
    assert eager["engine"]["eager_enforced"] is True and "eager" in eager["engine"]["name"]
    assert eager["efficiencies"]["host_s_per_layer"] == pytest.approx(2.4e-4) and eager["step_model"]["t_host_s"] > 0
    hi, lo = (rows[0]["tpot_ms_high"] / rows[0]["tpot_ms"]), (base[0]["tpot_ms_high"] / base[0]["tpot_ms"])
    assert hi > lo  # an estimate: the interval widens where the launches set the step
    assert np.isfinite(hi)
    assert rows[0]["tpot_ms_low"] >= base[0]["tpot_ms_low"]  # never faster than the same server with graphs
    for key in ("tpot_ms_low", "tpot_ms_high"):  # where the GPU's work sets the step, eager's interval is graphs'
        assert rows[1][key] == pytest.approx(base[1][key], rel=1e-9)


def test_enforce_eager_on_an_engine_without_an_eager_mode_is_one_line() -> None:
    result = run_cli(["roofline", "-m", "llama-2-7b", "-H", "h100-sxm", "--enforce-eager"])
    assert result.exit_code != 0
    assert "--enforce-eager needs --engine tgi or vllm-v0 or vllm-v1" in result.output
    result = run_cli(["roofline", "-m", "llama-2-7b", "-H", "h100-sxm", "--engine", "sglang", "--enforce-eager"])
    assert result.exit_code != 0 and "engine 'sglang' has no eager mode" in result.output
    result = run_cli(["roofline", "-m", "llama-2-7b", "-H", "h100-sxm", "--engine", "pytorch-eager", "--enforce-eager"])
    assert result.exit_code != 0
    assert "engine 'pytorch-eager' launches eagerly already (0.9 ms a layer in its profile): drop --enforce-eager" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_the_curve_scorer_reads_the_engine_version_and_eager_from_a_header() -> None:
    """benchmarks/first_principles.py: a V1 engine named after a ';' in the engine field is V1 (the ROCm tables were
    scored as V0), and a vLLM release from before CUDA graphs (or the flag) is scored eager."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import first_principles as fp
    finally:
        sys.path.pop(0)
    rocm = "# model: x; engine: vLLM 0.10.0 README (most likely measured on 0.9.1; V1 engine either way; ROCm)"
    assert fp.engine_of(rocm) == "vllm-v1"
    assert fp.engine_of("# engine: vLLM 0.5.3") == "vllm-v0" and not fp.eager_of("# engine: vLLM 0.5.3")
    assert fp.eager_of("# engine: vLLM 0.2.1 (offline)") and fp.eager_of("# engine: vLLM 0.6.0 --enforce-eager")
    assert not fp.eager_of("# engine: vLLM 0.2.5") and not fp.eager_of("# GPU: eager; engine: SGLang")
    assert not fp.eager_of("# engine: vLLM 0.6.0, enforce_eager=False")
    assert fp.eager_of("# engine: vLLM, enforce_eager=True")
    assert fp.engine_of("# engine: vLLM 0.6.3 (not the V1 engine)") == "vllm-v0"


def test_simulate_advise_and_plan_say_the_answer_runs_without_cuda_graphs() -> None:
    """Every first-principles answer run eagerly says so, and what the launches cost a step (roofline's engine line
    does; simulate, advise and plan did not); without the flag, nothing is said."""
    base = ["-m", "llama-2-70b", "-H", "h100-sxm", "--tp", "8", "--engine", "vllm-v0", "--input-len", "500"]
    base += ["--output-len", "100"]
    said = "run without CUDA graphs (--enforce-eager): the host launches each layer's kernels every step, "
    runs = {
        "simulate": ["simulate", *base, "--request-rate", "1", "--num-requests", "60"],
        "advise": ["advise", *base, "--tpot-slo-ms", "40"],
        "plan": ["plan", *base, "--rate", "1", "--num-requests", "200", "--seeds", "1", "--workers", "1"],
    }
    for name, args in runs.items():
        eager = run_json([*args, "--enforce-eager"])
        notes = [w for w in eager["warnings"] if w.startswith(said)]
        assert len(notes) == 1 and "ms a step" in notes[0] and "vllm-v0's [eager] profile, not fitted" in notes[0], name
        if name == "simulate":
            assert not any(w.startswith(said) for w in run_json(args)["warnings"])
