"""Model families: golden parameter counts and KV bytes against published figures, sliding windows, MLA, MoE
layouts, multimodal configs and Hugging Face ids from the local cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.model import roofline as rl
from tokenroof.specs import Precision, load_hardware, load_model
from tokenroof.specs.model import model_from_config

BF16 = Precision.create("bf16")
PRESETS = Path(__file__).resolve().parents[1] / "src" / "tokenroof" / "specs" / "data" / "models"
NEW_PRESETS = (
    "gemma-2-9b",
    "deepseek-v2-lite",
    "deepseek-v3",
    "qwen2-57b-a14b",
    "qwen3-30b-a3b",
    "phi-3-mini",
    "mixtral-8x22b",
    "llava-1.5-7b",
)


def preset(name: str) -> dict[str, Any]:
    return json.loads((PRESETS / f"{name}.json").read_text())


# -- golden: total parameters within 1% of the published figure, KV bytes per token exact -----------------
@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("llama-3.1-8b", 8.03e9),  # model card: 8B; HF safetensors 8,030,261,248
        ("gemma-2-9b", 9.24e9),  # HF safetensors 9,241,705,984
        ("deepseek-v2-lite", 15.7e9),  # model card: 15.7B total, 2.4B active
        ("deepseek-v3", 671e9),  # model card: 671B total (685B on the Hub with the 14B MTP module)
        ("qwen2-57b-a14b", 57.4e9),  # HF: 57.4B
        ("qwen3-30b-a3b", 30.5e9),  # model card: 30.5B total, 3.3B active
        ("phi-3-mini", 3.8e9),  # model card: 3.8B
        ("mixtral-8x22b", 141e9),  # model card: 141B total, 39B active
        ("mistral-7b", 7.24e9),  # model card: 7.3B; HF safetensors 7,241,732,096
        ("llava-1.5-7b", 7.06e9),  # HF: 7.06B (Vicuna-7B + CLIP ViT-L/14-336 + projector)
    ],
)
def test_parameter_count_within_one_percent_of_published(name: str, published: float) -> None:
    assert abs(load_model(name).total_params / published - 1) < 0.01


@pytest.mark.parametrize(
    ("name", "kv_bytes"),
    [
        ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2),  # 131,072: K and V · layers · KV heads · head_dim · bf16
        ("gemma-2-9b", 2 * 42 * 8 * 256 * 2),  # 344,064: head_dim 256
        ("deepseek-v2-lite", 27 * (512 + 64) * 2),  # 31,104: MLA latent + rope key, one per layer
        ("deepseek-v3", 61 * (512 + 64) * 2),  # 70,272
        ("qwen2-57b-a14b", 2 * 28 * 4 * 128 * 2),  # 57,344
        ("qwen3-30b-a3b", 2 * 48 * 4 * 128 * 2),  # 98,304
        ("phi-3-mini", 2 * 32 * 32 * 96 * 2),  # 393,216: MHA
        ("mixtral-8x22b", 2 * 56 * 8 * 128 * 2),  # 229,376
        ("mistral-7b", 2 * 32 * 8 * 128 * 2),  # 131,072
        ("llava-1.5-7b", 2 * 32 * 32 * 128 * 2),  # 524,288: the Vicuna-7B language model
    ],
)
def test_kv_bytes_per_token_exact(name: str, kv_bytes: int) -> None:
    assert rl.kv_bytes_per_token(load_model(name), BF16) == kv_bytes


def test_gemma2_9b_count_by_hand() -> None:
    # embedding (tied) + 42 layers · (q,o 3584·4096 + k,v 3584·2048 + GeGLU 3·3584·14336 + 4 RMSNorms) + final norm
    layer = 2 * 3584 * 4096 + 2 * 3584 * 2048 + 3 * 3584 * 14336 + 4 * 3584
    assert load_model("gemma-2-9b").total_params == 256000 * 3584 + 42 * layer + 3584 == 9_241_705_984


def test_mixtral_8x22b_active_parameters() -> None:
    assert abs(load_model("mixtral-8x22b").matmul_params_per_token / 39e9 - 1) < 0.01  # model card: 39B active


# -- DeepSeek: MLA, shared experts, dense first layers ---------------------------------------------------
def test_deepseek_v3_mla_caches_576_values_per_layer_on_every_gpu() -> None:
    v3 = load_model("deepseek-v3")
    assert v3.attention_kind == "MLA" and v3.mla is not None
    assert v3.mla.cached_values_per_token == 576 and v3.kv_dim == 576
    # the latent is shared by all heads: tensor parallelism replicates it instead of splitting it
    assert rl.kv_bytes_per_token(v3, BF16, tp=8) == rl.kv_bytes_per_token(v3, BF16) == 61 * 576 * 2


def test_deepseek_v3_layout_by_hand() -> None:
    v3 = load_model("deepseek-v3")
    assert (v3.dense_mlp_layers, v3.moe_layers, v3.num_experts, v3.experts_per_token) == (3, 58, 256, 8)
    assert v3.dense_intermediate_size == 18432 and v3.shared_intermediate_size == 2048
    # q_a 7168·1536 + norm + q_b 1536·128·192 + kv_a 7168·576 + norm + kv_b 512·128·256 + o 128·128·7168
    attention = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    assert v3.attention_params_per_layer == attention == 187_107_328


def test_mla_attention_flops_are_the_absorbed_form() -> None:
    # per head per cached token: scores over latent + rope key 2·576, weighted sum of the latent 2·512
    v3 = load_model("deepseek-v3")
    assert float(rl.attention_flops(v3, 2, 1000)) == 61 * 128 * (2 * 576 + 2 * 512) * 1000 * 2


def test_deepseek_v2_lite_full_rank_queries_and_two_shared_experts() -> None:
    lite = load_model("deepseek-v2-lite")
    assert lite.mla is not None and lite.mla.q_lora_rank == 0
    assert lite.shared_intermediate_size == 2 * 1408 and lite.dense_mlp_layers == 1


def test_mla_family_names_the_fields_it_needs(tmp_path: Path) -> None:
    config = {k: v for k, v in preset("deepseek-v3").items() if k not in ("kv_lora_rank", "v_head_dim")}
    with pytest.raises(TokenroofError, match=r"missing required field\(s\): 'kv_lora_rank', 'v_head_dim'"):
        model_from_config(config, "config.json")


def test_unknown_family_names_the_fields_every_family_gives() -> None:
    with pytest.raises(TokenroofError, match=r"not a known family .*\(hidden_size, num_hidden_layers, "):
        model_from_config({**preset("mixtral-8x22b"), "model_type": "jamba"}, "config.json")


# -- Qwen MoE: shared expert and its gate ------------------------------------------------------------------
def test_qwen2_moe_shared_expert_and_gate() -> None:
    qwen = load_model("qwen2-57b-a14b")
    assert qwen.shared_intermediate_size == 20480
    assert qwen.shared_expert_params == 3 * 3584 * 20480 + 3584  # gated MLP + sigmoid gate hidden → 1
    assert qwen.moe_layers == 28 and qwen.layer_windows == ()  # use_sliding_window false


def test_qwen3_moe_mlp_only_layers_are_dense(tmp_path: Path) -> None:
    base = load_model("qwen3-30b-a3b")
    dense = model_from_config({**preset("qwen3-30b-a3b"), "mlp_only_layers": [0, 1]}, "config.json")
    assert (dense.dense_mlp_layers, dense.dense_intermediate_size) == (2, 6144)
    moe_layer = 128 * 3 * 2048 * 768 + 2048 * 128
    assert base.total_params - dense.total_params == 2 * (moe_layer - 3 * 2048 * 6144)


# -- sliding windows -----------------------------------------------------------------------------------------
def test_mistral_7b_at_16k_reads_kv_over_its_4096_token_window() -> None:
    mistral = load_model("mistral-7b")
    per_layer_token = 2 * 8 * 128 * 2  # K and V of 8 KV heads, bf16
    # 32 layers each read their last 4096 tokens, not 16384
    assert float(rl.kv_read_bytes(mistral, BF16, 1, 16384)) == 32 * 4096 * per_layer_token == 536_870_912
    costs = rl.decode_costs(mistral, BF16, 4, 16384)
    assert float(costs.bytes_kv_read) == 4 * 32 * 4096 * per_layer_token
    assert float(costs.flops_attention) == 4 * 32 * 32 * 128 * 4096 * 4
    assert float(rl.kv_read_bytes(mistral, BF16, 1, 2048)) == 32 * 2048 * per_layer_token  # inside the window
    h100 = load_hardware("h100-sxm")
    assert rl.max_batch_by_memory(mistral, h100, BF16, 16384) == rl.max_batch_by_memory(mistral, h100, BF16, 4096)


def test_gemma2_alternates_window_and_global_layers() -> None:
    gemma = load_model("gemma-2-9b")
    assert gemma.layer_windows[:4] == (4096, None, 4096, None) and gemma.sliding_windows == {4096: 21}
    # 21 layers at their 4096-token window, 21 at the whole 16384: 10240 per layer on average
    assert float(gemma.effective_context(16384)) == (21 * 4096 + 21 * 16384) / 42 == 10240
    assert float(rl.kv_read_bytes(gemma, BF16, 1, 16384)) == 10240 * 344_064
    ctx = np.array([0.0, 1000.0, 4096.0, 8192.0])
    np.testing.assert_array_equal(gemma.effective_context(ctx), [0, 1000, 4096, 6144])


def gemma3_text(**extra: Any) -> dict[str, Any]:
    return {
        "model_type": "gemma3_text",
        "hidden_size": 640,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 1000,
        "sliding_window": 512,
        **extra,
    }


def test_gemma3_five_local_to_one_global() -> None:
    gemma3 = model_from_config(gemma3_text(sliding_window_pattern=6), "config.json")
    assert [i for i, w in enumerate(gemma3.layer_windows) if w is None] == [5, 11]
    assert gemma3.sliding_windows == {512: 10}
    assert float(gemma3.effective_context(4096)) == (10 * 512 + 2 * 4096) / 12
    assert gemma3.tie_word_embeddings and gemma3.norm_params_per_layer == 4 * 640 + 2 * 256  # q/k norms


def test_layer_types_name_each_layer() -> None:
    kinds = ["full_attention"] + ["sliding_attention"] * 11
    model = model_from_config(gemma3_text(layer_types=kinds), "config.json")
    assert model.layer_windows == (None,) + (512,) * 11
    with pytest.raises(TokenroofError, match="layer_types names 2 layers, num_hidden_layers = 12"):
        model_from_config(gemma3_text(layer_types=kinds[:2]), "config.json")
    with pytest.raises(TokenroofError, match=r"layer_types\[0\] = \"chunked_attention\"; must be"):
        model_from_config(gemma3_text(layer_types=["chunked_attention"] * 12), "config.json")


def test_qwen_windows_only_when_switched_on() -> None:
    assert load_model("qwen2-7b").layer_windows == ()  # sliding_window given, use_sliding_window false
    on = model_from_config(
        {**preset("qwen3-30b-a3b"), "sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 40},
        "config.json",
    )
    assert on.sliding_windows == {4096: 8}  # layers 40-47: the first max_window_layers attend globally


def test_phi3_mini_window_and_mixtral_without_one() -> None:
    assert load_model("phi-3-mini").sliding_windows == {2047: 32}
    assert load_model("mixtral-8x22b").layer_windows == ()  # sliding_window null


# -- multimodal ------------------------------------------------------------------------------------------------
def test_llava_counts_the_vision_tower_in_memory_not_in_decode() -> None:
    llava = load_model("llava-1.5-7b")
    clip = 303_507_456  # CLIP ViT-L/14-336 vision model
    projector = 1024 * 4096 + 4096 + 4096 * 4096 + 4096
    assert llava.vision_params == clip + projector
    assert abs(llava.language_params / 6.74e9 - 1) < 0.01  # Vicuna-7B (vocab 32064)
    assert llava.total_params == llava.language_params + clip + projector
    assert llava.streamed_dense_params == llava.layer_dense_params + 4096 + 32064 * 4096  # no vision weights
    resident = rl.resident_weight_bytes(llava, BF16)
    assert resident == llava.total_params * 2


def test_text_config_defaults_are_the_family_class_defaults() -> None:
    # llava-hf writes only what differs from LlamaConfig: hidden 4096, 32 layers, 32 heads, 11008
    llava = load_model("llava-1.5-7b")
    assert (llava.hidden_size, llava.num_layers, llava.num_attention_heads, llava.intermediate_size) == (
        4096,
        32,
        32,
        11008,
    )


def test_vision_config_fields_are_named(tmp_path: Path) -> None:
    config = preset("llava-1.5-7b")
    config["vision_config"] = {**config["vision_config"], "patch_size": "14"}
    with pytest.raises(TokenroofError, match=r'vision_config.patch_size = "14"; must be a positive integer'):
        model_from_config(config, "config.json")


# -- Hugging Face ids from the local cache ------------------------------------------------------------------
REPO = "meta-llama/Llama-3.1-8B-Instruct"


def fake_cache(hub: Path, repo: str = REPO, commit: str = "0e9e39f249a16976918f6564b8830bc894c89659") -> Path:
    folder = hub / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    hub_config = {k: v for k, v in preset("llama-3.1-8b").items() if not k.startswith("_")}  # as the Hub serves it
    (snapshot / "config.json").write_text(json.dumps(hub_config))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    return snapshot / "config.json"


def test_hf_id_resolves_from_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    fake_cache(tmp_path / "hub")
    model = load_model(REPO)
    assert model.name == REPO and model.total_params == load_model("llama-3.1-8b").total_params


def test_hf_hub_cache_wins_over_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    path = fake_cache(tmp_path / "hub")
    assert load_model(REPO).source == str(path)


def test_hf_id_not_in_the_cache_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(TokenroofError) as info:
        load_model(REPO)
    message = str(info.value)
    assert "\n" not in message and "not in the Hugging Face cache" in message
    assert str(tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B-Instruct") in message
    assert f"huggingface-cli download {REPO} config.json" in message
    result = run_cli(["roofline", "-m", REPO, "-H", "h100-sxm"])
    assert result.exit_code == 2 and "not in the Hugging Face cache" in result.output


def test_roofline_cli_takes_a_cached_hf_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    fake_cache(tmp_path / "hub")
    data = run_json(["roofline", "-m", REPO, "-H", "h100-sxm", "--batch", "1"])
    assert data["model"]["name"] == REPO and data["kv_bytes_per_token"] == 131_072


# -- the presets in the CLI -----------------------------------------------------------------------------------
def test_models_command_lists_the_new_presets() -> None:
    result = run_cli(["models"])
    assert result.exit_code == 0
    for name in NEW_PRESETS:
        assert name in result.output


def test_roofline_json_reports_kv_read_over_the_window() -> None:
    data = run_json(["roofline", "-m", "mistral-7b", "-H", "h100-sxm", "--batch", "1", "--context", "16384"])
    assert data["points"][0]["bytes_kv_read"] == 32 * 4096 * 2 * 8 * 128 * 2
    assert data["model"]["sliding_windows"] == {"4096": 32}
