"""Model families: the structural traits a config.json does not spell out, by `model_type`.

Everything else comes from the config's own fields (specs/model.py reads them), so any local
config.json of a known family works the same as a preset. A family is data: adding one is a line
in `FAMILIES` unless its layers hold something new (MLA, shared experts, sliding windows, a vision
tower each took one field and one formula).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    """Structural traits that config.json does not spell out."""

    gated_mlp: bool = True  # SwiGLU/GeGLU: gate, up and down projections
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    layer_norm: bool = False  # LayerNorm (weight + bias) instead of RMSNorm (weight)
    learned_positions_offset: int | None = None  # learned absolute positions: max_pos + offset rows
    qk_norm: bool = False
    norms_per_layer: int = 2  # Gemma-2/3 norm both before and after attention and MLP: 4
    tied_by_default: bool = False  # tie_word_embeddings when the config leaves it out
    window_every: int = 1  # with a sliding_window: every n-th layer (n, 2n, ...) global, the rest windowed
    window_opt_in: bool = False  # Qwen: sliding_window applies only with use_sliding_window true
    shared_expert_gate: bool = False  # Qwen2-MoE: a sigmoid gate (hidden → 1) on the shared expert
    mla: bool = False  # DeepSeek-V2/V3 multi-head latent attention
    needs: tuple[str, ...] = ()  # config keys this family cannot do without, beyond every family's


LLAMA = Family()
GEMMA = Family(tied_by_default=True)
GEMMA2 = Family(norms_per_layer=4, tied_by_default=True, window_every=2)
GEMMA3 = Family(norms_per_layer=4, tied_by_default=True, window_every=6, qk_norm=True)
DEEPSEEK = Family(mla=True, needs=("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"))
FAMILIES: dict[str, Family] = {  # oldest first, the order an unknown family's error lists them in
    "gpt2": Family(
        gated_mlp=False,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        layer_norm=True,
        learned_positions_offset=0,
        tied_by_default=True,
    ),
    "gpt_neox": Family(gated_mlp=False, qkv_bias=True, out_bias=True, mlp_bias=True, layer_norm=True),
    "opt": Family(
        gated_mlp=False,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        layer_norm=True,
        learned_positions_offset=2,
        tied_by_default=True,
    ),
    "llama": LLAMA,
    "mistral": LLAMA,
    "mixtral": LLAMA,
    "gemma": GEMMA,
    "phi3": LLAMA,  # fused qkv_proj and gate_up_proj: the same parameters as Llama's
    "deepseek_v2": DEEPSEEK,
    "qwen2": Family(qkv_bias=True, window_opt_in=True),
    "qwen2_moe": Family(qkv_bias=True, window_opt_in=True, shared_expert_gate=True),
    "gemma2": GEMMA2,
    "deepseek_v3": DEEPSEEK,
    "gemma3": GEMMA3,
    "gemma3_text": GEMMA3,
    "qwen3": Family(qk_norm=True, window_opt_in=True),
    "qwen3_moe": Family(qk_norm=True, window_opt_in=True),
}
# Multimodal configs write their language model under `text_config` holding only what differs from the
# Transformers class's defaults; these are those defaults (LlamaConfig) for the families that do so.
TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 32000,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
    },
}
SLIDING, FULL = "sliding_attention", "full_attention"


def layer_windows(
    family: Family,
    num_layers: int,
    window: int | None,
    layer_types: list[str] | None = None,
    every: int | None = None,
    opt_in: bool | None = None,
    first_full: int = 0,
) -> tuple[int | None, ...]:
    """Each layer's attention window in tokens (None: the whole context); () when no layer has one.

    `layer_types` (newer configs) names each layer; otherwise the family's pattern: Mistral windows every
    layer, Gemma-2 alternates (windowed first), Gemma-3 windows five of six (`sliding_window_pattern`), Qwen
    only with `use_sliding_window` and from layer `max_window_layers` on.
    """
    if window is None or (family.window_opt_in and not opt_in):
        return ()
    if layer_types is not None:
        windows = tuple(window if kind == SLIDING else None for kind in layer_types)
    else:
        n = every or family.window_every
        windows = tuple(None if (n > 1 and (i + 1) % n == 0) or i < first_full else window for i in range(num_layers))
    return windows if any(w is not None for w in windows) else ()


def is_moe_layer(
    i: int, first_dense: int = 0, every: int = 1, sparse_step: int = 1, dense_layers: frozenset[int] = frozenset()
) -> bool:
    """Whether layer `i` of an MoE model routes to experts: DeepSeek's `first_k_dense_replace` and
    `moe_layer_freq`, Qwen-MoE's `decoder_sparse_step` and `mlp_only_layers` (all default to every layer)."""
    return i >= first_dense and i % every == 0 and (i + 1) % sparse_step == 0 and i not in dense_layers


def vit_params(vision: Mapping[str, int]) -> int:
    """Parameters of a ViT image encoder (CLIP's layout): patch embedding, class token and positions, a
    LayerNorm before and after, and per layer q/k/v/o and a two-matrix MLP with biases and two LayerNorms.
    CLIP ViT-L/14-336 (LLaVA-1.5): 303,507,456."""
    d, i = vision["hidden_size"], vision["intermediate_size"]
    patch, size, channels = vision["patch_size"], vision["image_size"], vision["num_channels"]
    positions = (size // patch) ** 2 + 1
    embeddings = channels * patch * patch * d + d + positions * d
    layer = 4 * (d * d + d) + (d * i + i) + (i * d + d) + 2 * 2 * d
    return embeddings + 2 * 2 * d + vision["num_hidden_layers"] * layer


def projector_params(model_type: str, vision_hidden: int, text_hidden: int) -> int:
    """The multimodal projector from image features to the language model's width: LLaVA's two-layer MLP
    with biases; 0 for a projector tokenroof does not know (the vision tower is still counted)."""
    if model_type in ("llava", "llava_next"):
        return vision_hidden * text_hidden + text_hidden + text_hidden * text_hidden + text_hidden
    return 0
