"""Specs: presets load, parameter counts match the published ones, bad files give one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenroof.errors import TokenroofError
from tokenroof.specs import Precision, list_hardware, list_models, load_hardware, load_model

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
    assert Precision.create("bfloat16").weight_dtype == "bf16"
    with pytest.raises(TokenroofError, match="unknown weight dtype 'fp7'"):
        Precision.create("fp7")
