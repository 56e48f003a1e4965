"""Specs: presets load, parameter counts match the published ones, bad files give one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_json
from tokenroof.errors import TokenroofError
from tokenroof.specs import DATA, Precision, list_hardware, list_models, load_hardware, load_model

REQUIRED_MODELS = {
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen3-8b",
    "mixtral-8x7b",
    "opt-1.3b",
}
REQUIRED_HARDWARE = {"h100-sxm", "h100-pcie", "h200", "a100-sxm-80gb", "a100-40gb", "l40s", "a10g", "b200", "mi300x"}


def test_required_presets_exist() -> None:
    assert set(list_models()) >= REQUIRED_MODELS
    assert set(list_hardware()) >= REQUIRED_HARDWARE


@pytest.mark.parametrize("name", [n for n in list_models() if load_model(n).published_parameter_count])
def test_parameter_count_within_one_percent_of_published(name: str) -> None:
    model = load_model(name)
    published = model.published_parameter_count
    assert published is not None
    assert abs(model.total_params / published - 1) < 0.01


def test_every_required_model_has_a_published_count() -> None:
    assert all(load_model(n).published_parameter_count for n in REQUIRED_MODELS)


def test_llama2_7b_count_by_hand() -> None:
    # embed 32000·4096 + 32 layers·(4·4096² + 3·4096·11008 + 2·4096) + 4096 + lm_head 32000·4096
    expected = 32000 * 4096 + 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096 + 32000 * 4096
    assert load_model("llama-2-7b").total_params == expected == 6_738_415_616


def test_attention_kinds_and_moe() -> None:
    assert load_model("llama-2-7b").attention_kind == "MHA"
    assert load_model("llama-3.1-8b").attention_kind == "GQA"
    mixtral = load_model("mixtral-8x7b")
    assert (mixtral.num_experts, mixtral.experts_per_token) == (8, 2)
    # active parameters per token ≈ 12.9B of 46.7B
    assert 12.5e9 < mixtral.matmul_params_per_token < 13.0e9


def test_tied_embeddings_counted_once(tiny_config: Path) -> None:
    tied = load_model(str(tiny_config))
    untied_path = tiny_config.with_name("untied.json")
    untied_path.write_text(json.dumps({**json.loads(tiny_config.read_text()), "tie_word_embeddings": False}))
    untied = load_model(str(untied_path))
    assert untied.total_params - tied.total_params == 100 * 64
    # the lm_head is read every step either way
    assert tied.streamed_dense_params == untied.streamed_dense_params


def test_mqa_config(tiny_config: Path) -> None:
    model = load_model(str(tiny_config))
    assert model.attention_kind == "MQA"
    assert model.kv_dim == 16


def test_config_folder_and_gpt2_key_aliases(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
        )
    )
    gpt2 = load_model(str(tmp_path))
    assert gpt2.intermediate_size == 4 * 768
    assert abs(gpt2.total_params - 124_439_808) < 1  # GPT-2 small, published 124M (HF count 124,439,808)


def test_unknown_preset_lists_known_ones() -> None:
    with pytest.raises(TokenroofError, match=r"unknown model 'llama-9b'; known presets: .*llama-2-7b"):
        load_model("llama-9b")
    with pytest.raises(TokenroofError, match=r"unknown hardware 'h900'; known presets: .*h100-sxm"):
        load_hardware("h900")


def test_config_missing_fields_named(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(TokenroofError, match=r"missing required field\(s\): 'num_hidden_layers'.*'vocab_size'"):
        load_model(str(path))


def test_config_not_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(TokenroofError, match="not valid JSON"):
        load_model(str(path))


def test_hardware_file_missing_field(tmp_path: Path) -> None:
    path = tmp_path / "chip.toml"
    path.write_text('name = "x"\npeaks = "dense"\nmemory_bytes = 1e9\n[peak_flops_per_s]\nbf16 = 1e12\n')
    with pytest.raises(TokenroofError, match=r"chip.toml: missing required field\(s\): memory_bandwidth_bytes_per_s"):
        load_hardware(str(path))


def test_hardware_must_be_dense(tmp_path: Path) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(
        'name = "x"\npeaks = "sparse"\nmemory_bytes = 1e9\nmemory_bandwidth_bytes_per_s = 1e9\n'
        "[peak_flops_per_s]\nbf16 = 1e12\n"
    )
    with pytest.raises(TokenroofError, match="dense peaks"):
        load_hardware(str(path))


def test_every_hardware_preset_cites_a_source_and_is_dense() -> None:
    for name in list_hardware():
        hw = load_hardware(name)
        assert hw.peaks == "dense"
        assert hw.source.get("url", "").startswith("https://")
        assert "bf16" in hw.peak_flops_per_s


def test_h100_ridge_point() -> None:
    assert load_hardware("h100-sxm").ridge_flops_per_byte("bf16") == pytest.approx(989.4e12 / 3.35e12)


def test_missing_peak_lists_available() -> None:
    with pytest.raises(TokenroofError, match=r"has no fp8 peak \(it has: .*bf16"):
        load_hardware("a100-sxm-80gb").peak_for("fp8")


def test_precision_bytes() -> None:
    assert Precision.create("bf16").weight_bytes_per_param == 2
    assert Precision.create("fp8").weight_bytes_per_param == 1
    assert Precision.create("fp8").compute_dtype == "fp8"
    int4 = Precision.create("int4")
    assert int4.weight_bytes_per_param == pytest.approx(0.5 + 2 / 128)
    assert int4.compute_dtype == "bf16" and int4.kv_dtype == "bf16"
    assert Precision.create("bf16", kv_dtype="fp8").kv_bytes_per_element == 1
    assert Precision.create("fp8").kv_source == "default" and Precision.create("fp8").kv_dtype == "bf16"
    engine_kv = {"fp8": "fp8"}
    assert (
        Precision.create("fp8", engine_kv=engine_kv).kv_dtype,
        Precision.create("fp8", engine_kv=engine_kv).kv_source,
    ) == ("fp8", "engine")
    assert Precision.create("int4", engine_kv=engine_kv).kv_dtype == "bf16"  # only the weights it names
    assert Precision.create("fp8", kv_dtype="fp16", engine_kv=engine_kv).kv_source == "given"
    assert Precision.create("bfloat16").weight_dtype == "bf16"
    with pytest.raises(TokenroofError, match="unknown weight dtype 'fp7'"):
        Precision.create("fp7")


# -- a checkpoint's quantization_config sets the weight dtype unless --dtype is given ----------------------------
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
W4A16 = {
    "quant_method": "compressed-tensors",
    "format": "pack-quantized",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128},
        }
    },
}
FP8_CHANNEL = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}},
}
NF4 = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}


def quantized(tmp_path: Path, quantization: dict) -> Path:
    """Llama-3.1-8B's config.json with this quantization_config."""
    base = json.loads(Path(str(DATA / "models" / "llama-3.1-8b.json")).read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, "quantization_config": quantization}))
    return path


@pytest.mark.parametrize(
    ("quantization", "dtype", "bytes_per_weight"),
    [
        (AWQ, "int4", 0.5 + (2 + 0.5) / 128),  # fp16 scale + 4-bit zero point per 128 weights
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}, "int4", 0.5 + 2.5 / 128),
        ({"quant_method": "gptq", "bits": 8, "group_size": -1}, "int8", 1.0),  # per-channel: negligible
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8", 1 + 4 / 16384),
        (W4A16, "int4", 0.5 + 2 / 128),
        (FP8_CHANNEL, "fp8", 1.0),
        (NF4, "int4", 0.5 + 4 / 64),  # one fp32 absmax per 64
        ({**NF4, "bnb_4bit_use_double_quant": True}, "int4", 0.5 + (1 + 4 / 256) / 64),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8", 1.0),
    ],
)
def test_checkpoint_quantization_sets_the_weight_dtype(
    tmp_path: Path, quantization: dict, dtype: str, bytes_per_weight: float
) -> None:
    model = load_model(str(quantized(tmp_path, quantization)))
    precision = Precision.create(checkpoint=model.quantization)
    assert (precision.weight_dtype, precision.source) == (dtype, "checkpoint")
    assert precision.weight_bytes_per_param == pytest.approx(bytes_per_weight, rel=1e-12)
    assert precision.to_dict()["quantization"].startswith(quantization["quant_method"])
    given = Precision.create("bf16", checkpoint=model.quantization)  # an explicit --dtype wins
    assert (given.weight_dtype, given.source, given.weight_bytes_per_param) == ("bf16", "given", 2.0)


def test_no_quantization_config_is_bf16_by_default() -> None:
    default = Precision.create(checkpoint=load_model("llama-3.1-8b").quantization)
    assert (default.weight_dtype, default.source, default.quantization) == ("bf16", "default", None)
    assert Precision.create("int4").weight_bytes_per_param == pytest.approx(0.5 + 2 / 128)  # by name: as before


def test_deepseek_v3_ships_fp8_with_block_scales() -> None:
    v3 = load_model("deepseek-v3")
    precision = Precision.create(checkpoint=v3.quantization)
    assert (precision.weight_dtype, precision.compute_dtype, precision.kv_dtype) == ("fp8", "fp8", "bf16")
    assert (
        precision.to_dict()["quantization"]
        == "fp8: fp8, 4 scale bytes per 16384 weights, embeddings and lm_head in 16 bits"
    )


def test_quantised_checkpoints_keep_embeddings_and_lm_head_at_16_bits(tmp_path: Path) -> None:
    """Issue 27: an AWQ Llama-3.1-8B was counted at 4.17 GB where its checkpoint holds about 5.7 GB."""
    from tokenroof.model.roofline import dense_weight_bytes, resident_weight_bytes

    model = load_model(str(quantized(tmp_path, AWQ)))
    awq = Precision.create(checkpoint=model.quantization)
    table = 128256 * 4096  # embed_tokens, and lm_head (untied) the same shape
    body = model.total_params - 2 * table
    per_weight = 0.5 + 2.5 / 128
    assert resident_weight_bytes(model, awq) == pytest.approx(body * per_weight + 2 * table * 2.0, rel=1e-12)
    assert 5.6e9 < resident_weight_bytes(model, awq) < 5.8e9  # the checkpoint's ~5.7 GB
    streamed = model.streamed_dense_params - table  # lm_head is read every step, at 16 bits
    assert dense_weight_bytes(model, awq) == pytest.approx(streamed * per_weight + table * 2.0, rel=1e-12)
    assert "embeddings and lm_head in 16 bits" in awq.to_dict()["quantization"]
    assert awq.lm_head_bytes_per_param == 2.0 and Precision.create("bf16").lm_head_bytes_per_param == 2.0
    # compressed-tensors says which modules it left alone: lm_head out of `ignore` is quantised with the rest
    kept = Precision.create(
        checkpoint=load_model(str(quantized(tmp_path, {**W4A16, "ignore": ["lm_head"]}))).quantization
    )
    assert kept.lm_head_bytes_per_param == 2.0
    all_in = Precision.create(checkpoint=load_model(str(quantized(tmp_path, {**W4A16, "ignore": []}))).quantization)
    assert all_in.lm_head_bytes_per_param == pytest.approx(0.5 + 2 / 128)
    assert resident_weight_bytes(model, all_in) == pytest.approx(
        (body + table) * (0.5 + 2 / 128) + table * 2.0, rel=1e-12
    )
    # a dtype given by name is counted as vLLM quantises: linear layers only
    fp8 = Precision.create("fp8")
    assert dense_weight_bytes(model, fp8) == pytest.approx(streamed * 1.0 + table * 2.0, rel=1e-12)
    bf16 = Precision.create("bf16")
    assert resident_weight_bytes(model, bf16) == pytest.approx(model.total_params * 2.0, rel=1e-12)


def test_physics_takes_the_checkpoint_dtype_unless_given(tmp_path: Path) -> None:
    from tokenroof.serving.deployment import Physics

    path = str(quantized(tmp_path, AWQ))
    assert Physics(path, "h100-sxm").precision.weight_dtype == "int4"
    assert Physics(path, "h100-sxm", dtype="fp8").precision.weight_dtype == "fp8"
    assert Physics("llama-3.1-8b", "h100-sxm").precision.source == "default"


def test_unread_method_loads_and_needs_dtype(tmp_path: Path) -> None:
    model = load_model(str(quantized(tmp_path, {"quant_method": "hqq", "nbits": 4.5})))
    with pytest.raises(TokenroofError, match=r"method 'hqq' is not one tokenroof reads .*; give dtype$"):
        Precision.create(checkpoint=model.quantization)
    assert Precision.create("int4", checkpoint=model.quantization).weight_dtype == "int4"


@pytest.mark.parametrize(
    ("quantization", "message"),
    [
        ({"quant_method": "gptq", "bits": 3}, "gptq with 3-bit weights is not modelled"),
        ({"quant_method": "awq", "bits": "4"}, 'quantization_config.bits = "4"; must be a positive integer'),
        ({"quant_method": "bitsandbytes"}, "sets neither load_in_4bit nor load_in_8bit"),
        ({"quant_method": "compressed-tensors", "config_groups": {}}, "no config_groups.*.weights scheme"),
    ],
)
def test_bad_quantization_config_is_named(tmp_path: Path, quantization: dict, message: str) -> None:
    with pytest.raises(TokenroofError, match=re.escape(message)):
        load_model(str(quantized(tmp_path, quantization)))


def test_dtype_flag_left_out_says_so() -> None:
    args = ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--batch", "1"]
    assert run_json(args)["precision"]["weight_dtype_source"] == "default"
    assert run_json([*args, "--dtype", "bf16"])["precision"]["weight_dtype_source"] == "given"


def test_opt_13b_count_by_hand() -> None:
    # OPT: embed 50272·5120 (tied head) + learned positions (2048 + 2)·5120 + 40 layers·(4·5120² + 4·5120 attention
    # with biases, 2·5120·20480 + 20480 + 5120 FFN with biases, 2·2·5120 layer norms) + final norm 2·5120
    layer = 4 * 5120**2 + 4 * 5120 + 2 * 5120 * 20480 + 20480 + 5120 + 4 * 5120
    expected = 50272 * 5120 + 2050 * 5120 + 40 * layer + 2 * 5120
    assert load_model("opt-13b").total_params == expected == 12_853_473_280
