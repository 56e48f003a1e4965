"""The PyTorch decode engine: logits against Hugging Face transformers, KV-cache decoding, packing, checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import NEEDS_TORCH
from tokenroof.errors import TokenroofError
from tokenroof.specs import load_model
from tokenroof.specs.model import model_from_config

if TYPE_CHECKING:
    import torch

    from tokenroof.measure.local.torch_engine import (
        PREPACK_MIN_ROWS,
        DecoderLM,
        can_prepack,
        check_supported,
        load_checkpoint,
        rope_inv_freq,
    )

pytestmark = NEEDS_TORCH


@pytest.fixture(autouse=True, scope="module")
def _torch() -> None:
    """torch and the engine, imported when this file's first test runs (NEEDS_TORCH)."""
    global torch, PREPACK_MIN_ROWS, DecoderLM, can_prepack, check_supported, load_checkpoint, rope_inv_freq
    import torch

    from tokenroof.measure.local.torch_engine import (
        PREPACK_MIN_ROWS,
        DecoderLM,
        can_prepack,
        check_supported,
        load_checkpoint,
        rope_inv_freq,
    )


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}


def tiny(model_type: str, **extra: object) -> dict:
    config = {
        "model_type": model_type,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 101,
        "max_position_embeddings": 128,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "head_dim": 16,
    }
    return {**config, **extra}


def import_transformers() -> Any:
    """Hugging Face transformers, imported by the tests that compare against it (1-2 s: not at collection)."""
    return pytest.importorskip("transformers")


def hf_and_engine(config: dict) -> tuple[torch.nn.Module, DecoderLM]:
    transformers = import_transformers()
    torch.manual_seed(0)
    hf_config = transformers.AutoConfig.for_model(**config)
    hf = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32).eval()
    engine = DecoderLM(model_from_config(config, "tiny"), torch.float32)
    engine.load_state_dict(hf.state_dict(), strict=True)
    return hf, engine


@pytest.mark.parametrize(
    "config",
    [
        tiny("llama", rope_scaling=LLAMA3_ROPE),  # GQA, Llama-3 RoPE scaling
        tiny("llama", num_key_value_heads=1, tie_word_embeddings=True),  # MQA, tied head
        tiny("mistral"),
        tiny("qwen2"),  # q/k/v biases
        tiny("qwen3"),  # q/k norms
    ],
    ids=["llama3-gqa", "llama-mqa-tied", "mistral", "qwen2-bias", "qwen3-qknorm"],
)
def test_logits_match_transformers_for_prefill_chunks_and_decode(config: dict) -> None:
    hf, engine = hf_and_engine(config)
    ids = torch.randint(0, config["vocab_size"], (3, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = hf(ids).logits
    engine.allocate_cache(3, 32)
    prefill = engine.forward(ids[:, :8], 0, all_logits=True)  # first chunk: causal from position 0
    chunk = engine.forward(ids[:, 8:16], 8, all_logits=True)  # a later chunk attends to the cache
    steps = torch.stack([engine.forward(ids[:, i : i + 1], i) for i in range(16, 24)], dim=1)  # decode
    torch.testing.assert_close(prefill, reference[:, :8], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(chunk, reference[:, 8:16], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(steps, reference[:, 16:24], atol=1e-5, rtol=1e-4)


def test_prefill_in_chunks_gives_the_last_token_logits_of_one_pass() -> None:
    hf, engine = hf_and_engine(tiny("llama"))
    ids = torch.randint(0, 101, (2, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        reference = hf(ids).logits[:, -1]
    engine.allocate_cache(2, 20)
    torch.testing.assert_close(engine.prefill(ids, chunk=6), reference, atol=1e-5, rtol=1e-4)


def test_sequences_given_a_copied_cache_decode_like_the_source() -> None:
    _, engine = hf_and_engine(tiny("llama"))
    prompt = torch.randint(0, 101, (1, 10), generator=torch.Generator().manual_seed(3))
    engine.allocate_cache(4, 12)
    engine.prefill(prompt)
    engine.copy_sequence(0, slice(1, 4))
    logits = engine.forward(torch.full((4, 1), 7), 10)
    for row in range(1, 4):
        torch.testing.assert_close(logits[row], logits[0])


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_prepacked_weights_give_the_plain_result(dtype_name: str) -> None:
    dtype = getattr(torch, dtype_name)
    if not can_prepack(torch.device("cpu"), dtype):
        pytest.skip(f"this PyTorch build cannot prepack {dtype}")
    spec = model_from_config(tiny("llama"), "tiny")
    engine = DecoderLM(spec, dtype)
    engine.init_random(seed=4)
    engine.allocate_cache(8, 12)
    engine.prefill(torch.randint(0, 101, (8, 10), generator=torch.Generator().manual_seed(5)))
    tokens = torch.randint(0, 101, (8, 1), generator=torch.Generator().manual_seed(6))
    plain = engine.forward(tokens, 10)
    assert engine.prepack(8)
    packed = engine.forward(tokens, 10)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(packed.float(), plain.float(), atol=tolerance, rtol=tolerance)
    # one row: fp32 keeps the plain matrix-vector path (faster there); bf16 packs from one row up
    assert engine.prepack(1) == (PREPACK_MIN_ROWS[dtype] <= 1)
    one_row = engine.forward(tokens[:1], 10)
    engine.prepack(0)
    one_row_plain = engine.forward(tokens[:1], 10)
    torch.testing.assert_close(one_row.float(), one_row_plain.float(), atol=tolerance, rtol=tolerance)


def test_random_weights_are_seeded_and_finite() -> None:
    spec = model_from_config(tiny("llama"), "tiny")
    first, second = DecoderLM(spec, torch.float32), DecoderLM(spec, torch.float32)
    first.init_random(seed=9)
    second.init_random(seed=9)
    for (name, a), (_, b) in zip(first.named_parameters(), second.named_parameters(), strict=True):
        assert torch.equal(a, b), name
        assert torch.isfinite(a).all(), name
    assert torch.equal(first.model.norm.weight, torch.ones(64))


def test_checkpoint_loads_from_safetensors_and_rejects_a_mismatch(tmp_path: Path) -> None:
    hf, _ = hf_and_engine(tiny("llama"))
    hf.save_pretrained(tmp_path / "ckpt", safe_serialization=True)
    engine = DecoderLM(model_from_config(tiny("llama"), "tiny"), torch.float32)
    load_checkpoint(engine, tmp_path / "ckpt")
    ids = torch.randint(0, 101, (1, 6), generator=torch.Generator().manual_seed(7))
    engine.allocate_cache(1, 6)
    with torch.no_grad():
        torch.testing.assert_close(engine.prefill(ids), hf(ids).logits[:, -1], atol=1e-5, rtol=1e-4)
    wider = DecoderLM(model_from_config(tiny("llama", num_hidden_layers=3), "tiny"), torch.float32)
    with pytest.raises(TokenroofError, match=r"missing \['model\.layers\.2\."):
        load_checkpoint(wider, tmp_path / "ckpt")
    with pytest.raises(TokenroofError, match=r"no \*\.safetensors"):
        load_checkpoint(engine, tmp_path)


def test_llama3_rope_scaling_matches_transformers() -> None:
    transformers = import_transformers()
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = tiny("llama", rope_scaling=LLAMA3_ROPE)
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](transformers.AutoConfig.for_model(**config), "cpu")
    torch.testing.assert_close(rope_inv_freq(model_from_config(config, "tiny")), expected.float())


@pytest.mark.parametrize(
    ("model", "message"),
    [("opt-1.3b", "not Llama-like"), ("mixtral-8x7b", "mixture-of-experts")],
)
def test_unsupported_families_are_named(model: str, message: str) -> None:
    with pytest.raises(TokenroofError, match=message):
        check_supported(load_model(model))


def test_kv_cache_too_small_is_an_error_not_a_crash() -> None:
    engine = DecoderLM(model_from_config(tiny("llama"), "tiny"), torch.float32)
    engine.init_random()
    engine.allocate_cache(1, 4)
    with pytest.raises(TokenroofError, match="KV cache too small"):
        engine.forward(torch.zeros(1, 5, dtype=torch.long), 0)
