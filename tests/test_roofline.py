"""Cost model: hand-computed golden values and the structure of the step model."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TINY_CONFIG, run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.model import roofline as rl
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import HardwareSpec, Precision, load_hardware, load_model
from tokenroof.specs.engines import load_engine
from tokenroof.specs.model import ModelSpec, model_from_config

BF16 = Precision.create("bf16")
PEAK = rl.Efficiencies(bandwidth=1.0, compute=1.0, overhead_s=0.0)


@pytest.fixture
def llama7b():
    return load_model("llama-2-7b")


@pytest.fixture
def h100():
    return load_hardware("h100-sxm")


def test_weights_only_critical_batch_295(llama7b, h100) -> None:
    # peak FLOP/s ÷ bandwidth × bytes per parameter ÷ 2 = 989.4e12 / 3.35e12 × 2 / 2 = 295.3
    sm = rl.step_model_from_specs(llama7b, h100, BF16, eff=PEAK)
    assert sm.critical_batch_weights_only() == pytest.approx(295.3, rel=0.01)
    # equal efficiencies (the defaults) leave it unchanged
    assert rl.step_model_from_specs(llama7b, h100, BF16).critical_batch_weights_only() == pytest.approx(295.3, rel=0.01)


def test_kv_bytes_per_token(llama7b) -> None:
    assert rl.kv_bytes_per_token(llama7b, BF16) == 524_288  # 2 · 32 layers · 32 heads · 128 · 2 bytes
    assert rl.kv_bytes_per_token(load_model("llama-3.1-8b"), BF16) == 131_072  # 8 KV heads
    assert rl.kv_bytes_per_token(llama7b, Precision.create("bf16", kv_dtype="fp8")) == 262_144
    # TP splits heads; GQA with fewer KV heads than GPUs replicates them
    assert rl.kv_bytes_per_token(llama7b, BF16, tp=4) == 131_072
    assert rl.kv_bytes_per_token(load_model("llama-3.1-70b"), BF16, tp=16) == 2 * 80 * 1 * 128 * 2


def test_llama7b_kv_outweighs_compute_under_100_tokens(llama7b, h100) -> None:
    sm = rl.step_model_from_specs(llama7b, h100, BF16, eff=PEAK)
    assert sm.critical_batch(context=50) is not None
    assert sm.critical_batch(context=100) is None
    # crossover context = compute per sequence / KV read per token ≈ 13.36 µs / 0.1565 µs ≈ 85
    crossover = sm.t_compute_s / sm.t_kv_token_s
    assert 80 < crossover < 100


def test_matmul_flops_and_attention_flops_by_hand(llama7b) -> None:
    assert rl.matmul_flops(llama7b, 3) == pytest.approx(2 * 3 * llama7b.matmul_params_per_token)
    # 4 · 32 layers · 4096 · 1000 tokens · 2 sequences
    assert rl.attention_flops(llama7b, 2, 1000) == pytest.approx(4 * 32 * 4096 * 1000 * 2)


def test_moe_weights_grow_with_batch_and_saturate() -> None:
    mixtral = load_model("mixtral-8x7b")
    b = np.array([1, 2, 4, 16, 64, 4096], dtype=float)
    touched = rl.expected_experts_touched(8, 2, b)
    assert touched[0] == pytest.approx(2.0)  # one token touches its top-2
    assert touched[1] == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert np.all(np.diff(touched) > 0)
    assert touched[-1] == pytest.approx(8.0)
    weights = rl.weight_bytes_streamed(mixtral, BF16, b)
    all_weights = rl.dense_weight_bytes(mixtral, BF16) + 8 * rl.expert_weight_bytes(mixtral, BF16)
    assert np.all(np.diff(weights) > 0)
    assert weights[-1] == pytest.approx(all_weights)
    # all experts streamed = every parameter except the input embedding table
    assert all_weights / 2 == pytest.approx(mixtral.total_params - mixtral.vocab_size * mixtral.hidden_size)


def test_step_time_equals_bytes_over_bandwidth(llama7b, h100) -> None:
    eff = rl.Efficiencies(bandwidth=0.5, compute=0.5, overhead_s=0.002)
    sm = rl.step_model_from_specs(llama7b, h100, BF16, eff=eff)
    b, ctx = 4.0, 1000.0
    costs = rl.decode_costs(llama7b, BF16, b, ctx)
    bw, fl = h100.memory_bandwidth_bytes_per_s * 0.5, 989.4e12 * 0.5
    expected = (
        0.002 + max(costs.bytes_weights / bw, costs.flops / fl) + (costs.bytes_kv_read + costs.bytes_kv_write) / bw
    )
    assert float(sm.step_time_s(b, ctx)) == pytest.approx(float(expected), rel=1e-9)


def test_vectorised_over_batch_and_context(llama7b, h100) -> None:
    sm = rl.step_model_from_specs(llama7b, h100, BF16)
    b = np.arange(1, 65)[:, None]
    ctx = np.array([0, 512, 4096])[None, :]
    grid = sm.step_time_s(b, ctx)
    assert grid.shape == (64, 3)
    assert float(grid[9, 1]) == pytest.approx(float(sm.step_time_s(10, 512)))


def test_tensor_parallel_splits_and_adds_allreduce(llama7b, h100) -> None:
    one = rl.step_model_from_specs(llama7b, h100, BF16)
    four = rl.step_model_from_specs(llama7b, h100, BF16, tp=4)
    assert four.t_weights_s == pytest.approx(one.t_weights_s / 4)
    assert four.t_compute_s == pytest.approx(one.t_compute_s / 4)
    # 2 all-reduces per layer, each 8 µs of launch and sync plus 2 µs for each of the 3 GPUs past the first
    assert four.t_fixed_s == pytest.approx(one.t_fixed_s + 2 * 32 * (8e-6 + 3 * 2e-6))
    eight = rl.step_model_from_specs(llama7b, h100, BF16, tp=8)
    assert eight.t_fixed_s - four.t_fixed_s == pytest.approx(2 * 32 * 4 * 2e-6)  # four more GPUs in the ring
    # ring all-reduce: 2 per layer · 2·(4−1)/4 · 4096 · 2 bytes per sequence over 450 GB/s · 0.7
    per_seq = 2 * 32 * 2 * 0.75 * 4096 * 2 / (450e9 * 0.7)
    assert four.t_seq_s - four.t_kv_token_s == pytest.approx(per_seq)
    with pytest.raises(TokenroofError, match="does not divide"):
        rl.step_model_from_specs(llama7b, h100, BF16, tp=3)


def test_attention_runs_at_its_own_dtypes_peak() -> None:
    """fp8 GEMMs beside a bf16 KV cache attend in bf16 (Q·Kᵀ and P·V at the bf16 peak, half fp8's); with an fp8 cache
    too, at fp8's (TensorRT-LLM's FP8 FMHA). Llama-3.1-70B at TP4 on H100: 4·80·8192 / 4 = 655,360 attention FLOPs a
    context token per GPU, over the dense peak × the profile-free 0.75."""
    model, h100 = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    cases = {("fp8", "bf16"): "bf16", ("fp8", "fp8"): "fp8", ("bf16", "bf16"): "bf16", ("int4", "bf16"): "bf16"}
    for (weights, kv), attention in cases.items():
        precision = Precision.create(weights, kv)
        assert precision.attention_dtype == attention
        sm = rl.step_model_from_specs(model, h100, precision, tp=4)
        assert sm.t_attn_token_s == pytest.approx(655_360 / (h100.peak_for(attention) * 0.75))
    assert Precision.create("fp32").attention_dtype == "fp32"


def test_a_mesh_gives_a_small_ring_its_own_links_only(llama7b) -> None:
    """An MI300X pair shares one of its seven 64 GB/s links, four GPUs three each, eight all seven (448 GB/s); H100
    PCIe boards are bridged in pairs, so four reduce over PCIe Gen5 (64 GB/s). Per sequence: 2 all-reduces per layer
    · 2·(tp−1)/tp · 4096 · 2 bytes over the link at the profile-free 0.7 of it."""
    mi300x, pcie = load_hardware("mi300x"), load_hardware("h100-pcie")
    assert [mi300x.interconnect_bandwidth(t) for t in (2, 4, 8)] == [64e9, 192e9, 448e9]
    assert [pcie.interconnect_bandwidth(t) for t in (2, 4, 8, 16)] == [300e9, 64e9, 64e9, 64e9]  # from 4 on
    for hw, tp, link in ((mi300x, 2, 64e9), (mi300x, 4, 192e9), (mi300x, 8, 448e9), (pcie, 4, 64e9)):
        sm = rl.step_model_from_specs(llama7b, hw, BF16, tp=tp)
        assert sm.t_comm_seq_s == pytest.approx(2 * 32 * 2 * (tp - 1) / tp * 4096 * 2 / (link * 0.7))
    assert load_hardware("h100-sxm").interconnect_bandwidth(8) == 450e9  # NVSwitch: the whole link at any degree


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("1 = 64e9", "at least 2, got 1"),
        ("two = 64e9", "a whole number, got 'two'"),
        ("2 = 900e9", "gives 9e[+]11 at 2, more than the whole link"),
    ],
)
def test_a_bandwidth_by_degree_names_a_bad_degree(tmp_path: Path, table: str, says: str) -> None:
    base = (Path(rl.__file__).parents[1] / "specs" / "data" / "hardware" / "mi300x.toml").read_text()
    bad = base.replace("2 = 64e9", table, 1)
    path = tmp_path / "mesh.toml"
    path.write_text(bad)
    with pytest.raises(TokenroofError, match=says):
        load_hardware(str(path))


def test_max_batch_by_memory_by_hand(llama7b, h100) -> None:
    # (81,559 MiB · 0.9 − 6,738,415,616 · 2) / (524,288 · 2048) = (76,968,728,985.6 − 13,476,831,232) / 1,073,741,824
    # = 59.1 → 59
    assert rl.max_batch_by_memory(llama7b, h100, BF16, context=2048) == 59
    assert rl.max_batch_by_memory(load_model("llama-2-70b"), h100, BF16, context=2048) == 0


def test_server_reserve_by_hand_and_in_the_memory_cap(h100) -> None:
    """vLLM V1 on an H100 (80 GiB class: 8,192 profile tokens, 1,024 sequences), Llama-3.1-8B in bf16: the driver's
    0.64e9 + 0.1e9 outside PyTorch + 8,192 · (3 · 14,336 + 4,096) · 2 = 771,751,936 of MLP activations + 1,024 ·
    128,256 · 12 = 1,576,009,728 of sampler = 3,087,761,664 bytes; the pool loses them, and at --tp 2 each GPU
    holds 0.7e9 more buffers and half the MLP."""
    model = load_model("llama-3.1-8b")
    reserve = load_engine("vllm-v1").server.reserve
    assert rl.server_reserved_bytes(model, h100, BF16, 1, reserve) == 3_087_761_664
    assert rl.server_reserved_bytes(model, h100, BF16, 2, reserve) == 3_087_761_664 + 0.7e9 - 8192 * 3 * 7168 * 2
    assert rl.server_reserved_bytes(model, h100, BF16, 1, None) == 0.0
    # an A100 80GB is large but excluded (2,048 tokens, 256 sequences); an L40S is small
    a100 = load_hardware("a100-sxm-80gb")
    assert reserve.profile(a100.memory_bytes, a100.name, None) == (2048, 256)
    assert reserve.profile(h100.memory_bytes, h100.name, None) == (8192, 1024)
    l40s = load_hardware("l40s")
    assert reserve.profile(l40s.memory_bytes, l40s.name, None) == (2048, 256)
    # V0 profiles a whole context of the model's up to 32K (llama-2-7b: 4,096), the chunk budget past it
    v0 = load_engine("vllm-v0").server.reserve
    assert v0.profile(h100.memory_bytes, h100.name, 4096) == (4096, 256)
    assert v0.profile(h100.memory_bytes, h100.name, 131072) == (2048, 256)
    # (0.9 · 85,520,809,984 − 16,060,522,496 − 3,087,761,664) / (131,072 · 2048) = 215.5 → 215
    weights = rl.resident_weight_bytes(model, BF16)
    assert weights == 16_060_522_496
    assert rl.max_batch_by_memory(model, h100, BF16, 2048, reserved_bytes=3_087_761_664) == 215
    tokens = rl.kv_cache_tokens(model, h100, BF16, reserved_bytes=3_087_761_664)
    assert tokens == int((0.9 * h100.memory_bytes - weights - 3_087_761_664) // 131_072)
    free = rl.kv_cache_tokens(model, h100, BF16, memory_utilization=0.9, of_free=True, reserved_bytes=1e9)
    assert free == int((h100.memory_bytes - weights - 1e9) * 0.9 // 131_072)


def test_server_reserve_of_moe_models_and_at_tp_8(h100) -> None:
    """The widest MLP a token passes through: DeepSeek-V2-Lite's 6 routed experts of 1,408 and its 2,816 shared
    (11,264, past its dense layer's 10,944): 0.74e9 + 8,192 · (3 · 11,264 + 2,048) · 2 + 1,024 · 102,400 · 12 =
    2,585,493,760. Qwen3-30B-A3B at --tp 8: 8 experts of 768 split eight ways, three doublings of NCCL buffers:
    0.74e9 + 3 · 0.7e9 + 8,192 · (3 · 6,144 / 8 + 2,048) · 2 + 1,024 · 151,936 · 12 = 4,778,292,736."""
    reserve = load_engine("vllm-v1").server.reserve
    lite = load_model("deepseek-v2-lite")
    assert rl.server_reserved_bytes(lite, h100, BF16, 1, reserve) == pytest.approx(2_585_493_760, abs=1)
    a3b = load_model("qwen3-30b-a3b")
    assert rl.server_reserved_bytes(a3b, h100, BF16, 8, reserve) == pytest.approx(4_778_292_736, abs=1)


def test_every_cap_of_a_named_vllm_engine_holds_its_reserve() -> None:
    """roofline --engine vllm-v1 (its JSON and text), the prior's cap, Physics's batch and pool: one reserve, the
    3,087,761,664 bytes of Llama-3.1-8B on an H100 (test above), so 215 sequences of 2,048 tokens where 226 fit
    without it."""
    from tokenroof.fit.physics import Physics
    from tokenroof.fit.prior import MeasuredWorkload, prior_from_specs

    args = ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "2048", "--batch", "1"]
    named = run_json([*args, "--engine", "vllm-v1"])
    assert named["reserved_bytes_per_gpu"] == 3_087_761_664 and named["max_batch_by_memory"] == 215
    plain = run_json(args)
    assert plain["reserved_bytes_per_gpu"] == 0 and plain["max_batch_by_memory"] == 226
    # no server named: the cap says what vLLM V1 would hold, the named engine's answer does not repeat it
    assert plain["max_batch_by_memory_vllm_v1"] == 215 and named["max_batch_by_memory_vllm_v1"] is None
    assert "226 (215 beside vLLM V1's reserve: --engine vllm-v1)" in run_cli(args).stdout
    physics = Physics("llama-3.1-8b", "h100-sxm", "bf16", engine="vllm-v1")
    assert physics.reserved_bytes() == 3_087_761_664 and physics.max_batch(2048) == 215
    assert Physics("llama-3.1-8b", "h100-sxm", "bf16").max_batch(2048) == 226
    model, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    workload = MeasuredWorkload(context_tokens=2048)
    assert prior_from_specs(model, hw, BF16, workload, engine=load_engine("vllm-v1")).max_batch == 215
    assert prior_from_specs(model, hw, BF16, workload).max_batch == 226


def test_a_deployment_whose_weights_fit_but_not_beside_the_reserve_is_unservable() -> None:
    """gpt-20b at --tp 2 on A10Gs: 20.3 GB of weights per GPU fit in 90% of 24.15 GB (21.7), but not beside vLLM
    V1's 1.8 GB reserve; plan refuses it and says why, where before it failed on a KV pool of 0 (with --tp-choices
    2,4 it leaves tp 2 out with that warning and plans tp 4)."""
    from tokenroof.fit.physics import Physics

    assert Physics("gpt-20b", "a10g", "bf16", tp=2).unservable() is None
    why = Physics("gpt-20b", "a10g", "bf16", tp=2, engine="vllm-v1").unservable()
    assert why is not None and "beside the 1.8 GB its server reserves" in why
    plan = ["plan", "-m", "gpt-20b", "-H", "a10g", "--tp-choices", "2", "--engine", "vllm-v1", "--rate", "2"]
    result = run_cli([*plan, "--tpot-slo-ms", "100"])
    assert result.exit_code == 2 and "at --tp 2 beside the 1.8 GB its server reserves" in result.stderr


QWEN3_4B = {  # huggingface.co/Qwen/Qwen3-4B config.json, the shapes the profile reads
    "model_type": "qwen3",
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": True,
}


@pytest.mark.parametrize(
    ("model", "tokens", "logged_gib"),
    [
        # 'PyTorch activation peak memory takes 0.74GiB' (max_model_len 10,000, 256 sequences, V0 worker.py)
        (QWEN3_4B, 10_000, 0.74),
        # 'PyTorch activation peak memory takes 1.09GiB' (Qwen2-7B, max_model_len 8,192, 256 sequences, V0)
        ("qwen2-7b", 8192, 1.09),
    ],
)
def test_vllm_v0_profile_peak_matches_published_start_up_logs(h100, model, tokens, logged_gib) -> None:
    """The V0 profile's activations and sampler against what vLLM logged (the logs' own max_model_len): within 3%."""
    from dataclasses import replace

    spec = model_from_config(model, "Qwen3-4B") if isinstance(model, dict) else load_model(model)
    reserve = replace(load_engine("vllm-v0").server.reserve, driver_bytes=0.0, non_torch_bytes=0.0)
    reserve = replace(reserve, profile_tokens=tokens, whole_context_up_to=None)
    peak = rl.server_reserved_bytes(spec, h100, BF16, 1, reserve)
    assert peak / 2**30 == pytest.approx(logged_gib, rel=0.03)


def test_vllm_v1_pool_on_a_published_start_up_log() -> None:
    """vLLM 0.15.1 (V1), Llama-3.1-8B-Instruct bf16 on one A100 40GB (GCE a2-highgpu-1g), the LLM class (8,192
    tokens, 256 sequences), gpu_memory_utilization 0.9: 'Available KV cache memory: 19.28 GiB'. The sampler's bytes
    per logit were set from this log, so this pins the arithmetic, not an independent check."""
    from dataclasses import replace

    model, a100 = load_model("llama-3.1-8b"), load_hardware("a100-40gb")
    reserve = replace(load_engine("vllm-v1").server.reserve, profile_tokens=8192)
    reserved = rl.server_reserved_bytes(model, a100, BF16, 1, reserve)
    pool = rl.kv_cache_tokens(model, a100, BF16, reserved_bytes=reserved) * 131_072
    assert pool / 2**30 == pytest.approx(19.28, rel=0.01)
    assert rl.kv_cache_tokens(model, a100, BF16) * 131_072 / 2**30 > 20.9  # without the reserve: 9% too many


def test_prefill_time_compute_bound_for_long_prompts(llama7b, h100) -> None:
    p = 4096.0
    flops = 2 * p * llama7b.matmul_params_per_token + 2 * 32 * 4096 * p**2
    expected = flops / 989.4e12
    assert float(rl.prefill_time_s(llama7b, h100, BF16, p, eff=PEAK)) == pytest.approx(expected, rel=1e-9)


def test_efficiency_above_one_rejected() -> None:
    with pytest.raises(TokenroofError, match="nothing runs faster than the peak"):
        rl.Efficiencies(bandwidth=1.2)


# -- measured efficiencies in a hardware file (what `tokenroof calibrate` writes) ----------------------
CALIBRATED = """
name = "a calibrated test machine"
peaks = "dense"
memory_bytes = 64e9
memory_bandwidth_bytes_per_s = 20e9
[peak_flops_per_s]
fp32 = 200e9
bf16 = 400e9
[efficiencies]
overhead_s = 0.004
[efficiencies.bf16]
bandwidth = 0.5
kv_bandwidth = 0.25
compute = 0.8
overhead_s_per_layer = 0.001
"""


def test_hardware_efficiencies_set_the_step_model_by_hand(tmp_path: Path) -> None:
    from tokenroof.specs.hardware import read_hardware_toml

    path = tmp_path / "cal.toml"
    path.write_text(CALIBRATED)
    hw = read_hardware_toml(path)
    model = load_model("llama-2-7b")
    sm = rl.step_model_from_specs(model, hw, Precision.create("bf16"))
    assert sm.t_fixed_s == pytest.approx(0.004 + 32 * 0.001)  # global overhead + 32 layers × per-layer overhead
    assert sm.t_weights_s == pytest.approx(model.streamed_dense_params * 2 / (20e9 * 0.5))
    assert sm.t_kv_token_s == pytest.approx(2 * 32 * 4096 * 2 / (20e9 * 0.25))  # 512 KiB per token at 5 GB/s
    assert sm.t_compute_s == pytest.approx(2 * model.matmul_params_per_token / (400e9 * 0.8))
    fp32 = rl.step_model_from_specs(model, hw, Precision.create("fp32"))  # no fp32 table: serving defaults
    assert fp32.t_fixed_s == pytest.approx(0.004)
    assert fp32.t_weights_s == pytest.approx(model.streamed_dense_params * 4 / (20e9 * 0.75))
    explicit = rl.step_model_from_specs(model, hw, Precision.create("bf16"), eff=rl.Efficiencies())
    assert explicit.t_fixed_s == pytest.approx(1e-3)  # an explicit choice wins over the file


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[efficiencies]\nbandwidth = 1.5", "must be in \\(0, 1\\]"),
        ("[efficiencies]\nspeed = 0.5", "unknown key"),
        ("[efficiencies]\noverhead_s = -1", "non-negative"),
        ("[efficiencies.fp9]\nbandwidth = 0.5", "unknown dtype in"),
    ],
)
def test_bad_efficiencies_name_the_field(tmp_path: Path, table: str, message: str) -> None:
    from tokenroof.specs.hardware import read_hardware_toml

    base = CALIBRATED.split("[efficiencies]")[0]
    path = tmp_path / "bad.toml"
    path.write_text(base + table + "\n")
    with pytest.raises(TokenroofError, match=message):
        read_hardware_toml(path)


def test_roofline_cli_uses_the_hardware_files_efficiencies(tmp_path: Path) -> None:
    path = tmp_path / "cal.toml"
    path.write_text(CALIBRATED)
    data = run_json(["roofline", "-m", "llama-2-7b", "-H", str(path), "--batch", "1", "--context", "0"])
    assert data["efficiencies"]["bandwidth"] == 0.5 and data["efficiencies"]["overhead_s_per_layer"] == 0.001
    flagged = run_json(
        ["roofline", "-m", "llama-2-7b", "-H", str(path), "--batch", "1", "--bandwidth-efficiency", "0.9"]
    )
    assert flagged["efficiencies"]["bandwidth"] == 0.9 and flagged["efficiencies"]["kv_bandwidth"] == 0.25


def test_overlap_from_the_hardware_file_reaches_the_step_model_and_is_checked(tmp_path: Path) -> None:
    from tokenroof.specs.hardware import read_hardware_toml

    path = tmp_path / "cpu.toml"
    path.write_text(CALIBRATED.replace("compute = 0.8\n", "compute = 0.8\noverlap = 0\n"))
    sm = rl.step_model_from_specs(load_model("llama-2-7b"), read_hardware_toml(path), Precision.create("bf16"))
    assert sm.overlap == 0.0
    assert float(sm.step_time_s(1)) == pytest.approx(sm.t_fixed_s + sm.t_weights_s + sm.t_compute_s + sm.t_seq_s)
    path.write_text(CALIBRATED.replace("compute = 0.8\n", "compute = 0.8\noverlap = 1.5\n"))
    with pytest.raises(TokenroofError, match=r"overlap = 1.5; must be in \[0, 1\]"):
        read_hardware_toml(path)
    with pytest.raises(TokenroofError, match="overlap must be in"):
        rl.Efficiencies(overlap=-0.1)


# -- families: MLA, dense-first MoE layouts, sliding windows ------------------------------------------------------
def test_kv_read_without_windows_is_batch_times_context(llama7b) -> None:
    b, ctx = np.array([1.0, 8.0]), np.array([[100.0], [5000.0]])
    np.testing.assert_array_equal(rl.kv_read_bytes(llama7b, BF16, b, ctx), b * ctx * 524_288)


def test_deepseek_v3_streams_every_weight_but_the_embedding_when_all_experts_are_hit() -> None:
    v3 = load_model("deepseek-v3")
    # one routed expert per MoE layer: 58 layers (the first 3 are dense) · 3·7168·2048 · 2 bytes
    assert rl.expert_weight_bytes(v3, BF16) == 58 * 3 * 7168 * 2048 * 2
    everything = rl.dense_weight_bytes(v3, BF16) + 256 * rl.expert_weight_bytes(v3, BF16)
    assert everything / 2 == v3.total_params - v3.vocab_size * v3.hidden_size


def test_mla_step_model_attention_term(h100) -> None:
    v3 = load_model("deepseek-v3")
    sm = rl.step_model_from_specs(v3, h100, BF16, tp=8, eff=PEAK)
    # absorbed MLA: 61 layers · 128 heads · (2·576 + 2·512) FLOPs per cached token, heads split 8 ways
    assert sm.t_attn_token_s == pytest.approx(61 * 128 * 2176 / 8 / 989.4e12)
    assert sm.t_kv_token_s == pytest.approx(61 * 576 * 2 / 3.35e12)  # the latent is whole on each GPU


# -- by hand, one behaviour each (the tests `make mutation` runs on this module):
# First-principles bytes, FLOPs and terms of a tiny Llama on a made-up chip, by hand (make mutation).
TINY = TINY_CONFIG  # 2 layers, hidden 64, 4 heads of 16, `kv` KV heads, gated MLP 176, tied embeddings
BF16 = Precision()  # 2 bytes per weight, per KV element and per activation
CHIP = HardwareSpec(
    name="chip",
    memory_bytes=1e6,
    memory_bandwidth_bytes_per_s=1e6,
    peak_flops_per_s={"bf16": 1e9},
    interconnect_bandwidth_bytes_per_s=1e5,
)
EFF = rl.Efficiencies(
    bandwidth=0.5,
    compute=0.25,
    overhead_s=1e-3,
    interconnect=0.5,
    allreduce_latency_s=1e-5,
    overhead_s_per_layer=1e-4,
    kv_bandwidth=0.25,
    overlap=0.5,
    overhead_s_per_seq=2e-6,
)


def tiny(**changes: object) -> ModelSpec:
    return model_from_config({**TINY, **changes}, "tiny", "tiny")


M = tiny()


def test_the_tiny_models_counts_this_file_builds_on() -> None:
    # what the expected values below are made of (specs are tested in test_specs.py)
    assert (M.num_layers, M.head_dim, M.num_kv_heads, M.q_dim, M.kv_dim) == (2, 16, 1, 64, 16)
    assert (M.streamed_dense_params, M.total_params, M.matmul_params_per_token) == (94784, 94784, 94720)
    assert M.attention_flops_per_context_token == 512


def test_efficiencies_bounds_and_messages() -> None:
    rl.Efficiencies(bandwidth=1.0, compute=1.0, interconnect=1.0, kv_bandwidth=1.0, overlap=0.0)
    rl.Efficiencies(overlap=1.0, overhead_s=0.0, allreduce_latency_s=0.0)
    for name in ("bandwidth", "compute", "interconnect", "kv_bandwidth"):
        with pytest.raises(TokenroofError, match=rf"^{name} efficiency must be in \(0, 1\] .*got 1.5$"):
            rl.Efficiencies(**{name: 1.5})
        with pytest.raises(TokenroofError, match=rf"^{name} efficiency must be in"):
            rl.Efficiencies(**{name: 0.0})
    with pytest.raises(TokenroofError, match=r"^overlap must be in \[0, 1\], got 1.5$"):
        rl.Efficiencies(overlap=1.5)
    with pytest.raises(TokenroofError, match=r"^overlap must be in"):
        rl.Efficiencies(overlap=-0.5)
    for name in ("overhead_s", "allreduce_latency_s", "overhead_s_per_layer", "overhead_s_per_seq"):
        with pytest.raises(TokenroofError, match=r"^overheads and all-reduce latency must be non-negative$"):
            rl.Efficiencies(**{name: -1e-6})


def test_efficiencies_defaults_and_overhead() -> None:
    e = rl.Efficiencies()
    assert e.to_dict() == {
        "bandwidth": 0.75,
        "compute": 0.75,
        "overhead_s": 1e-3,
        "interconnect": 0.7,
        "allreduce_latency_s": 8e-6,
        "allreduce_step_latency_s": 2e-6,
        "overhead_s_per_layer": 0.0,
        "kv_bandwidth": None,
        "overlap": 1.0,
        "overhead_s_per_seq": 0.0,
        "host_s_per_layer": 0.0,
        "host_s_per_allreduce": 0.0,
    }
    assert EFF.step_overhead_s(2) == pytest.approx(1e-3 + 2e-4)


def test_default_efficiencies_precedence() -> None:
    # the default engine (generic) on a datasheet chip: its numbers
    assert rl.default_efficiencies(CHIP, BF16) == rl.Efficiencies(0.75, 0.75, 1e-3)
    cpp = load_engine("llama-cpp")
    k = cpp.accuracy.slowdown  # unfitted: the file's constants, every term e^bias_correction slower
    assert k == pytest.approx(math.exp(cpp.accuracy.bias_correction)) and k > 1
    online = rl.default_efficiencies(CHIP, BF16, cpp)
    assert (online.bandwidth, online.kv_bandwidth, online.compute) == pytest.approx((0.7 / k, 0.5 / k, 0.3 / k))
    assert (online.overhead_s, online.overhead_s_per_layer) == pytest.approx((0.5e-3 * k, 2e-5 * k))
    # serving adds the HTTP server's 1e-5 per sequence to the engine's own 2e-5
    assert online.overhead_s_per_seq == pytest.approx(3e-5 * k)
    assert rl.default_efficiencies(CHIP, BF16, cpp, serving=False).overhead_s_per_seq == pytest.approx(2e-5 * k)
    # a measured hardware file wins, the per-dtype table over the global one; unknown keys are ignored
    measured = HardwareSpec(
        name="m",
        memory_bytes=1e6,
        memory_bandwidth_bytes_per_s=1e6,
        peak_flops_per_s={"bf16": 1e9},
        efficiencies={"bandwidth": 0.6, "compute": 0.5, "bf16": {"compute": 0.4}, "note": 3},
    )
    got = rl.default_efficiencies(measured, BF16, cpp)
    assert (got.bandwidth, got.compute) == (0.6, 0.4)  # measured: no correction
    assert got.kv_bandwidth == pytest.approx(0.5 / k)
    assert got.overhead_s_per_seq == pytest.approx(3e-5 * k)  # calibrate does not measure it: the profile's stays


def test_bytes_by_hand() -> None:
    # K and V of 1 head of 16 in 2 layers at 2 bytes: 2·2·1·16·2 = 128 bytes per token
    assert rl.kv_bytes_per_token(M, BF16) == 128.0
    assert rl.kv_bytes_per_token(M, BF16, tp=2) == 128.0  # one KV head, replicated on both GPUs
    mha = tiny(num_key_value_heads=4)
    assert rl.kv_heads_per_gpu(mha, 1) == 4 and rl.kv_heads_per_gpu(mha, 2) == 2 and rl.kv_heads_per_gpu(mha, 3) == 2
    assert rl.kv_heads_per_gpu(M, 4) == 1
    assert rl.kv_bytes_per_token(mha, BF16, tp=2) == 2 * 2 * 2 * 16 * 2
    assert rl.kv_bytes_per_token(M, Precision(kv_dtype="fp8")) == 64.0
    assert np.allclose(rl.kv_read_bytes(M, BF16, [1, 3], 10), [1280, 3840])
    assert rl.dense_weight_bytes(M, BF16) == 94784 * 2 and rl.dense_weight_bytes(M, BF16, 2) == 94784
    assert rl.resident_weight_bytes(M, BF16, 2) == 94784
    assert rl.expert_weight_bytes(M, BF16) == 0.0
    assert np.allclose(rl.weight_bytes_streamed(M, BF16, [1, 64]), [94784 * 2] * 2)
    assert np.allclose(rl.expected_experts_touched(8, 2, [1, 2]), [2.0, 3.5])
    # per layer: QKV (64 in, 64 + 2·16 out) + o (64 + 64) + up/gate (64 + 2·176) + down (176 + 64) = 944 values
    assert np.allclose(rl.activation_bytes(M, BF16, [1, 3]), [2 * 944 * 2, 3 * 2 * 944 * 2])
    # tp 2: q, kv and the MLP split: (64 + 32 + 16) + (32 + 64) + (64 + 176) + (88 + 64) = 600
    assert float(rl.activation_bytes(M, BF16, 1, tp=2)) == 2 * 600 * 2
    # ring all-reduce: 2 per layer of b·h·2 bytes, 2(tp−1)/tp each
    assert np.array_equal(rl.allreduce_bytes(M, BF16, [1, 3]), [0.0, 0.0])
    assert np.allclose(rl.allreduce_bytes(M, BF16, [1, 3], tp=2), [2 * 2 * 1.0 * 128, 3 * 2 * 2 * 1.0 * 128])
    assert float(rl.allreduce_bytes(M, BF16, 1, tp=4)) == pytest.approx(2 * 2 * 1.5 * 128)


def test_moe_expert_bytes() -> None:
    moe = tiny(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2)
    assert moe.is_moe and moe.num_experts == 4
    one = rl.expert_weight_bytes(moe, BF16)
    assert one == moe.expert_params_all_layers * 2 and rl.expert_weight_bytes(moe, BF16, 2) == one / 2
    dense = rl.dense_weight_bytes(moe, BF16)
    # one token touches 2 experts, two tokens 4·(1 − 0.5²) = 3
    assert np.allclose(rl.weight_bytes_streamed(moe, BF16, [1, 2]), [dense + 2 * one, dense + 3 * one])
    # the activations pass through each of the 2 experts: one more (h + up + i + h) per layer
    extra = 64 + 352 + 176 + 64
    assert float(rl.activation_bytes(moe, BF16, 1)) == pytest.approx(2 * (944 + extra) * 2)


def test_flops_and_decode_costs_by_hand() -> None:
    assert np.allclose(rl.matmul_flops(M, [1, 2]), [2 * 94720, 4 * 94720])
    assert float(rl.matmul_flops(M, 1, tp=2)) == 94720
    assert np.allclose(rl.attention_flops(M, [1, 2], 10), [5120, 10240])
    assert float(rl.attention_flops(M, 2, 10, tp=2)) == 5120
    c = rl.decode_costs(M, BF16, [1, 2], 10)
    assert np.allclose(c.flops_matmul, [189440, 378880]) and np.allclose(c.flops_attention, [5120, 10240])
    assert np.allclose(c.bytes_weights, [189568, 189568]) and np.allclose(c.bytes_kv_read, [1280, 2560])
    assert np.allclose(c.bytes_kv_write, [128, 256]) and np.allclose(c.bytes_activations, [3776, 7552])
    assert np.allclose(c.bytes_allreduce, [0, 0])
    assert np.allclose(c.flops, [194560, 389120])
    assert np.allclose(c.bytes_memory, [189568 + 1280 + 128 + 3776, 189568 + 2560 + 256 + 7552])
    assert np.allclose(c.arithmetic_intensity_flops_per_byte, c.flops / c.bytes_memory)
    assert np.allclose(rl.decode_costs(M, BF16, 1, 10, tp=2).bytes_allreduce, [512])


def test_parallelism_checks() -> None:
    with pytest.raises(TokenroofError, match=r"^tp must be at least 1, got 0$"):
        rl.check_parallelism(M, CHIP, 0)
    with pytest.raises(TokenroofError, match=r"^tp 3 does not divide tiny's 4 attention heads$"):
        rl.check_parallelism(M, CHIP, 3)
    rl.check_parallelism(M, CHIP, 4)
    lone = HardwareSpec("lone", 1e6, 1e6, {"bf16": 1e9})
    rl.check_parallelism(M, lone, 1)
    rl.check_parallelism(M, replace(lone, interconnect_bandwidth_at_tp={2: 64e9}), 2)  # a figure at 2 GPUs alone
    with pytest.raises(
        TokenroofError, match=r"^lone has no interconnect_bandwidth_bytes_per_s \(nor one at 2 GPUs\); tp 2 needs one$"
    ):
        rl.check_parallelism(M, lone, 2)


def test_step_model_terms_by_hand() -> None:
    sm = rl.step_model_from_specs(M, CHIP, BF16, eff=EFF)
    assert sm.t_fixed_s == pytest.approx(1e-3 + 2 * 1e-4)
    assert sm.t_weights_s == pytest.approx(189568 / 0.5e6)
    assert sm.t_compute_s == pytest.approx(189440 / 0.25e9)
    assert sm.t_kv_token_s == pytest.approx(128 / 0.25e6)  # the KV's own bandwidth efficiency
    assert sm.t_seq_s == pytest.approx(128 / 0.25e6 + 2e-6)  # the KV write and the per-sequence overhead
    assert sm.t_attn_token_s == pytest.approx(512 / 0.25e9)
    assert (sm.t_expert_s, sm.num_experts, sm.experts_per_token, sm.overlap) == (0.0, 0, 0, 0.5)
    # without a KV efficiency, the weights' bandwidth
    plain = rl.step_model_from_specs(M, CHIP, BF16, eff=rl.Efficiencies(0.5, 0.25, 0.0))
    assert plain.t_kv_token_s == pytest.approx(128 / 0.5e6) and plain.t_fixed_s == 0.0


def test_step_model_under_tensor_parallelism() -> None:
    sm = rl.step_model_from_specs(M, CHIP, BF16, tp=2, eff=EFF)
    # 2 layers × 2 all-reduces of 10 µs plus 2 µs for the second GPU; 512 bytes per sequence over 0.5 · 1e5 B/s
    assert sm.t_fixed_s == pytest.approx(1e-3 + 2e-4 + 2 * 2 * (1e-5 + 2e-6))
    assert sm.t_seq_s == pytest.approx(128 / 0.25e6 + 512 / 0.5e5 + 2e-6)
    assert sm.t_weights_s == pytest.approx(94784 / 0.5e6) and sm.t_compute_s == pytest.approx(94720 / 0.25e9)
    assert sm.t_attn_token_s == pytest.approx(256 / 0.25e9)
    # what of those terms the all-reduces take, for the bound and the breakdown to name: the calls and the bytes
    assert sm.t_comm_fixed_s == pytest.approx(2 * 2 * (1e-5 + 2e-6)) and sm.t_comm_seq_s == pytest.approx(512 / 0.5e5)
    assert rl.step_model_from_specs(M, CHIP, BF16, eff=EFF).comm_parts_s() == (0.0, 0.0)


def test_default_efficiencies_are_used_without_eff() -> None:
    sm = rl.step_model_from_specs(M, CHIP, BF16)
    assert sm.t_weights_s == pytest.approx(189568 / 0.75e6) and sm.t_fixed_s == pytest.approx(1e-3)
    with pytest.raises(TokenroofError, match="tp 3 does not divide"):
        rl.step_model_from_specs(M, CHIP, BF16, tp=3)


def test_memory_cap_by_hand() -> None:
    # 0.9 MB free less 189,568 bytes of weights = 710,432; 128 bytes per token at context 100: 55 sequences
    assert rl.max_batch_by_memory(M, CHIP, BF16, 100) == 710432 // 12800
    assert rl.max_batch_by_memory(M, CHIP, BF16, 100, memory_utilization=1.0) == 810432 // 12800
    assert rl.max_batch_by_memory(M, CHIP, BF16, 0.5) == 710432 // 128  # at least one token held
    assert rl.max_batch_by_memory(M, CHIP, BF16, 100, tp=2) == ((900000 - 94784) // 12800)
    assert rl.max_batch_by_memory(M, CHIP, BF16, 100, memory_utilization=0.1) == 0  # the weights do not fit
    # 44.402 tokens × 128 bytes = 5,683.456 bytes per sequence; 710,432 / 5,683.456 = 125 exactly (the float product
    # rounds up and a floor division gave 124)
    assert rl.max_batch_by_memory(M, CHIP, BF16, 44.402) == 125
    for bad in (0.0, 1.5):
        with pytest.raises(TokenroofError, match=rf"^memory utilisation must be in \(0, 1\], got {bad}$"):
            rl.max_batch_by_memory(M, CHIP, BF16, 100, memory_utilization=bad)
    assert rl.kv_cache_tokens(M, CHIP, BF16) == 710432 // 128
    assert rl.kv_cache_tokens(M, CHIP, BF16, tp=2, memory_utilization=0.5) == (500000 - 94784) // 128
    assert rl.kv_cache_tokens(M, CHIP, BF16, memory_utilization=0.1) == 0


def test_memory_cap_with_sliding_windows_counts_the_window() -> None:
    windowed = tiny(model_type="mistral", sliding_window=10)
    assert windowed.effective_context(100.0) == 10.0
    assert rl.max_batch_by_memory(windowed, CHIP, BF16, 100) == 710432 // 1280


def test_prefill_time_is_the_schedulers_step() -> None:
    sm = rl.step_model_from_specs(M, CHIP, BF16, eff=EFF)
    got = rl.prefill_time_s(M, CHIP, BF16, [10, 2000], eff=EFF)
    assert got.shape == (2,)
    for tokens, value in zip((10, 2000), got, strict=True):
        compute = tokens * sm.t_compute_s + sm.t_attn_token_s * tokens**2 / 2
        w, c = sm.t_weights_s, compute
        assert value == pytest.approx(sm.t_fixed_s + max(w, c) + 0.5 * min(w, c))


MHA = tiny(num_key_value_heads=4)  # 4 KV heads: under tp 2 each GPU holds 2 of them


def test_the_multi_head_models_counts() -> None:
    # K and V grow from 64×16 to 64×64 each: 2·(4096 − 1024) = 6144 more per layer, 12,288 in 2 layers
    assert (MHA.kv_dim, MHA.streamed_dense_params, MHA.matmul_params_per_token) == (64, 94784 + 12288, 94720 + 12288)
    assert MHA.attention_flops_per_context_token == 512  # 4·L·q_dim = 4·2·64: the KV heads do not change it


def test_kv_bytes_split_by_tensor_parallelism() -> None:
    # 2 layers · K,V · 2 heads per GPU · 16 · 2 bytes = 256 bytes per token at tp 2 (512 at tp 1)
    assert rl.kv_bytes_per_token(MHA, BF16) == 512.0
    assert np.array_equal(rl.kv_read_bytes(MHA, BF16, [1, 3], 10, tp=2), [1 * 10 * 256, 3 * 10 * 256])


def test_weights_streamed_split_by_tensor_parallelism() -> None:
    # dense: 94,784 params · 2 bytes / 2 GPUs, at every batch
    assert np.array_equal(rl.weight_bytes_streamed(M, BF16, [1, 64], tp=2), [94784.0, 94784.0])
    moe = tiny(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2)
    # one expert (gate, up, down: 3·64·176 = 33,792 per layer) in 2 layers: 67,584 params, ·2 bytes / 2 GPUs
    assert moe.expert_params_all_layers == 67584
    dense = moe.streamed_dense_params  # ·2 bytes / 2 GPUs
    got = rl.weight_bytes_streamed(moe, BF16, [1, 2], tp=2)
    # 1 token touches 2 of the 4 experts, 2 tokens 4·(1 − 0.5²) = 3
    assert np.array_equal(got, [dense + 2 * 67584, dense + 3 * 67584])


def test_activation_bytes_of_an_ungated_mlp() -> None:
    neox = tiny(model_type="gpt_neox")  # no gate: the up projection writes i values, not 2i; 1 KV head
    assert not neox.family.gated_mlp and neox.kv_dim == 16
    # per layer: QKV (64 in, 64 + 2·16 out) + o (64 + 64) + up (64 + 176) + down (176 + 64) = 768 values
    assert float(rl.activation_bytes(neox, BF16, 1)) == 2 * 768 * 2
    assert np.array_equal(rl.activation_bytes(neox, BF16, [1, 3]), [3072.0, 3 * 3072.0])


def test_no_allreduce_is_still_a_float_array() -> None:
    # one GPU sends nothing, but the answer keeps the float array type of the other terms (integer batches)
    zero = rl.allreduce_bytes(M, BF16, [1, 3])
    assert zero.dtype == np.float64 and zero.shape == (2,)


def test_decode_costs_under_tensor_parallelism_by_hand() -> None:
    c = rl.decode_costs(MHA, BF16, [1, 2], 10, tp=2)
    assert np.array_equal(c.flops_matmul, [107008.0, 214016.0])  # 2 · 107,008 params · b / 2
    assert np.array_equal(c.flops_attention, [2560.0, 5120.0])  # 512 · 10 · b / 2
    assert np.array_equal(c.bytes_weights, [107072.0, 107072.0])  # 107,072 params · 2 bytes / 2
    assert np.array_equal(c.bytes_kv_read, [2560.0, 5120.0])  # b · 10 · 256
    assert np.array_equal(c.bytes_kv_write, [256.0, 512.0])  # b · 256
    # per layer: (64 + 32 + 2·32) + (32 + 64) + (64 + 2·88) + (88 + 64) = 648 values, 2 layers, 2 bytes
    assert np.array_equal(c.bytes_activations, [2592.0, 5184.0])
    assert np.array_equal(c.bytes_allreduce, [512.0, 1024.0])  # 2·2 all-reduces · (2·1/2) · b·64·2 bytes


def test_memory_caps_under_tensor_parallelism_count_the_gpus_kv_heads() -> None:
    # 900,000 − 107,072 bytes of weights (tp 2: half of 214,144) = 792,928 free; 256 bytes per token per GPU
    assert rl.max_batch_by_memory(MHA, CHIP, BF16, 100, tp=2) == 792928 // 25600  # 30
    assert rl.kv_cache_tokens(MHA, CHIP, BF16, tp=2) == 792928 // 256  # 3097


def test_prefill_of_no_prompts_is_an_empty_array() -> None:
    got = rl.prefill_time_s(M, CHIP, BF16, [], eff=EFF)
    assert got.shape == (0,) and got.dtype == np.float64


def test_efficiencies_at_peak_are_the_floors_by_name() -> None:
    peak = rl.Efficiencies.at_peak(5e-6)
    assert (peak.bandwidth, peak.compute, peak.interconnect, peak.overhead_s) == (1.0, 1.0, 1.0, 0.0)
    assert (peak.overhead_s_per_layer, peak.overhead_s_per_seq, peak.overlap) == (0.0, 0.0, 1.0)
    assert peak.allreduce_latency_s == 5e-6 and peak.kv_bandwidth is None


# -- TPOT as a benchmark of a workload counts it (roofline --input-len --output-len --batching) ----------------
# Hand-computed with a step of 1 ms fixed, 10 ms weights, 0.1 ms of GEMMs per token, 1 µs of KV per context token
# (overlap 1: the matmul term is max(weights, compute)); 100 in / 50 out tokens, mean context 125.
HAND = StepModel(t_fixed_s=1e-3, t_weights_s=10e-3, t_compute_s=0.1e-3, t_kv_token_s=1e-6)


@pytest.mark.parametrize(
    ("static", "chunked", "tpot_kind", "expected_ms"),
    [
        # online, chunked: at 10, b/o = 0.2 prompts a step, each whole in the step it falls in: a fifth of the steps
        # 1+max(10, (10+100)·0.1)+1.25 = 13.25, the rest 12.25 (spread over every step they had read 12.25, hidden
        # under the weights); at 100, 2 prompts in every step: 1+max(10, 10+20)+12.5
        (False, True, "tpot", [0.2 * 13.25 + 0.8 * 12.25, 43.5]),
        # online, separate: + 0.2 prefill steps of 1 prompt (1+max(10, 10)); 100: + 1 step of 2 prompts (1+20)
        (False, False, "tpot", [12.25 + 0.2 * 11, 23.5 + 21]),
        # decode steps only (tpot_kind step), cap 50: 100 runs in waves of 50: 1+max(10, 5)+6.25
        (False, True, "step", [12.25, 17.25]),
        (True, True, "tpot", [12.25, 17.25]),
        # static, end to end per output token: (prefill of the batch + 49 decode steps) / 50, × 2 waves at 100
        (True, True, "e2e", [(101 + 49 * 12.25) / 50, (501 + 49 * 17.25) / 50 * 2]),
    ],
)
def test_served_tpot_by_hand(static: bool, chunked: bool, tpot_kind: str, expected_ms: list[float]) -> None:
    from tokenroof.model.analysis import DecodeWorkload, served_tpot_s

    workload = DecodeWorkload(100, 50, static=static, chunked=chunked)
    got = served_tpot_s(HAND, [10, 100], workload, cap=50, tpot_kind=tpot_kind)
    assert got * 1e3 == pytest.approx(expected_ms)


def test_served_tpot_sees_the_window_context() -> None:
    from tokenroof.model.analysis import DecodeWorkload, served_tpot_s

    workload = DecodeWorkload(100, 50)
    at_window = served_tpot_s(HAND, [10], workload, cap=50, kv_context=25.0)
    assert at_window[0] * 1e3 == pytest.approx(12.45 - 10 * 100 * 1e-3)  # 100 fewer KV tokens per sequence


def test_a_prompt_runs_in_the_chunks_its_budget_leaves_not_spread_over_every_step() -> None:
    """Batch 10 of 200-token prompts and 50-token outputs (mean context 225): 0.2 prompts a step, 40 prompt tokens.
    With a budget of 110 tokens a step (100 beside the decodes) a prompt runs in two chunks of 100, in 40% of the
    steps: 1+max(10, 110·0.1)+2.25 = 14.25 there, 1+10+2.25 = 13.25 in the rest, 13.65 on average. Whole (no budget),
    in 20% of the steps: 1+max(10, 210·0.1)+2.25 = 24.25, 15.45 on average. Spread thin over every step (the old
    reading) its GEMMs hid under the weights: 13.25. Without a budget at batch 30, a whole 100-token prompt (of 50
    out) lands in 0.6 of the steps: 1+max(10, 13)+3.75 = 17.75 there, 14.75 in the rest. At batch 100 two prompts
    arrive a step, so every step carries prompt tokens: the mean load, 1+max(10, 10+20)+12.5 = 43.5."""
    from tokenroof.model.analysis import DecodeWorkload, online_step_s, served_tpot_s

    chunked = online_step_s(HAND, 10, 200, 50, True, budget=110) * 1e3
    whole = online_step_s(HAND, 10, 200, 50, True) * 1e3
    assert (chunked, whole) == pytest.approx((0.4 * 14.25 + 0.6 * 13.25, 0.2 * 24.25 + 0.8 * 13.25))
    assert online_step_s(HAND, 30, 100, 50, True) * 1e3 == pytest.approx(0.6 * 17.75 + 0.4 * 14.75)
    assert served_tpot_s(HAND, [100], DecodeWorkload(100, 50, budget=300), cap=200)[0] * 1e3 == pytest.approx(43.5)


def test_slowed_scales_every_term_of_the_step() -> None:
    eff = rl.Efficiencies(0.5, 0.25, 1e-3, overhead_s_per_layer=1e-4, overhead_s_per_seq=2e-6, kv_bandwidth=0.4)
    base, slow = (rl.step_model_from_specs(M, CHIP, BF16, tp=2, eff=e) for e in (eff, eff.slowed(1.25)))
    for b, ctx in ((1, 0.0), (8, 100.0), (512, 4000.0)):
        assert float(slow.step_time_s(b, ctx)) == pytest.approx(1.25 * float(base.step_time_s(b, ctx)))
    assert eff.slowed(2.0).kv_bandwidth == 0.2 and rl.Efficiencies().slowed(2.0).kv_bandwidth is None


def test_batch_in_pool_counts_whole_sequences_and_loses_none_to_rounding() -> None:
    """⌊pool / context⌋, where an exact fit stays exact: 1,000 tokens hold 100 sequences of 10, and 7 sequences of 1.3
    tokens fill 9.1 though 9.1 / 1.3 is 6.999999999999999 in floating point; a context under one token holds a
    token (a pool of 7 tokens: 7 sequences, not 14)."""
    assert rl.batch_in_pool(M, 1000.0, 10.0) == 100
    assert rl.batch_in_pool(M, 1000.0, 10.5) == 95  # 95.24
    assert 1.3 * 7 / 1.3 < 7 and rl.batch_in_pool(M, 1.3 * 7, 1.3) == 7
    assert rl.batch_in_pool(M, 7.0, 0.5) == rl.batch_in_pool(M, 7.0, 0.0) == 7
    windowed = tiny(model_type="mistral", sliding_window=10)
    assert rl.batch_in_pool(windowed, 1000.0, 100.0) == 100  # each holds its window of 10
