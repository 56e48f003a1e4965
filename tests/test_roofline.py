"""Cost model: hand-computed golden values and the structure of the step model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_json
from tokenroof.errors import TokenroofError
from tokenroof.model import roofline as rl
from tokenroof.specs import Precision, load_hardware, load_model

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
    assert four.t_fixed_s == pytest.approx(one.t_fixed_s + 2 * 32 * 8e-6)
    # ring all-reduce: 2 per layer · 2·(4−1)/4 · 4096 · 2 bytes per sequence over 450 GB/s · 0.7
    per_seq = 2 * 32 * 2 * 0.75 * 4096 * 2 / (450e9 * 0.7)
    assert four.t_seq_s - four.t_kv_token_s == pytest.approx(per_seq)
    with pytest.raises(TokenroofError, match="does not divide"):
        rl.step_model_from_specs(llama7b, h100, BF16, tp=3)


def test_max_batch_by_memory_by_hand(llama7b, h100) -> None:
    # (80e9 · 0.9 − 6,738,415,616 · 2) / (524,288 · 2048) = 54.5 → 54
    assert rl.max_batch_by_memory(llama7b, h100, BF16, context=2048) == 54
    assert rl.max_batch_by_memory(load_model("llama-2-70b"), h100, BF16, context=2048) == 0


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
