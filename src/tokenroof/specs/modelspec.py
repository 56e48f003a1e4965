"""ModelSpec: the shape of a decoder-only transformer; parameter counts are derived properties.

Built from a Hugging Face config.json by specs/model.py. Layers may differ: MoE models can keep dense
MLPs in some layers (DeepSeek's first layers), attention may use a sliding window in some layers
(`layer_windows`), and DeepSeek's MLA caches a latent instead of K and V (`mla`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tokenroof.specs.families import Family
from tokenroof.specs.quantization import Quantization


@dataclass(frozen=True)
class Mla:
    """Multi-head latent attention (DeepSeek-V2/V3): K and V are up-projected from a latent of `kv_lora_rank`
    values per token that every head shares, cached beside one rope key of `qk_rope_head_dim` values."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0  # 0: a full-rank query projection (DeepSeek-V2-Lite)

    @property
    def cached_values_per_token(self) -> int:
        """Values cached per token per layer, shared by all heads: latent + rope key (512 + 64 = 576 in V2/V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def params(self, hidden: int, heads: int) -> int:
        """One layer's projections and latent RMSNorms: q (low-rank with q_lora_rank), kv_a (to latent + rope
        key), kv_b (latent to per-head K-nope and V), o."""
        r = self.q_lora_rank
        q = hidden * r + r + r * heads * self.qk_head_dim if r else hidden * heads * self.qk_head_dim
        kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        kv = hidden * self.cached_values_per_token + self.kv_lora_rank + kv_b
        return q + kv + heads * self.v_head_dim * hidden


def held_context(layer_windows: tuple[int | None, ...], context: ArrayLike) -> NDArray[np.float64]:
    """Mean KV tokens a layer holds at `context`, over `layer_windows` (one per layer: a sliding window, or None for
    a global layer; empty: every layer global)."""
    ctx = np.asarray(context, dtype=float)
    if not layer_windows:
        return ctx
    total = np.zeros_like(ctx)
    for window, layers in Counter(layer_windows).items():
        total = total + layers * (ctx if window is None else np.minimum(ctx, window))
    return total / len(layer_windows)


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer; parameter counts are derived properties.

    For MoE models `intermediate_size` is one routed expert's; `dense_mlp_layers` layers instead hold a
    dense MLP of `dense_intermediate_size`, and every MoE layer a shared expert of `shared_intermediate_size`
    (0: none). `vision_params` (a multimodal model's image encoder and projector) are held in memory but
    never read by a decode step.
    """

    name: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int | None
    tie_word_embeddings: bool
    family: Family
    num_experts: int = 0
    experts_per_token: int = 0
    published_parameter_count: int | None = None
    source: str = ""
    # numerics that do not change costs, read for the PyTorch decode engine
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    rope_scaling: Mapping[str, Any] | None = field(default=None, compare=False)
    # structure beyond Llama's
    mla: Mla | None = None
    layer_windows: tuple[int | None, ...] = ()  # each layer's attention window (None: global); () none
    dense_mlp_layers: int = 0
    dense_intermediate_size: int = 0
    shared_intermediate_size: int = 0
    vision_params: int = 0
    quantization: Quantization | None = None  # the checkpoint's quantization_config

    # -- shapes -------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of what the K and V projections write per token (MLA: the cached latent and rope key)."""
        return self.mla.cached_values_per_token if self.mla else self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_kind(self) -> str:
        if self.mla is not None:
            return "MLA"
        if self.num_kv_heads == self.num_attention_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    # -- context --------------------------------------------------------------------
    def effective_context(self, context: ArrayLike) -> NDArray[np.float64]:
        """Mean KV tokens a layer reads and holds for one sequence at `context`: Σ_l min(ctx, window_l) / L.

        Sliding-window layers (Mistral-7B-v0.1's every layer, Gemma-2's alternate ones, Gemma-3's five of six)
        keep only their last `window` tokens; global layers keep all. The step model is linear in context
        (b·ctx·t_kv_token, ctx·t_attn_token), so KV reads, KV held and attention FLOPs all take this in place
        of `ctx`. Exact for one context; where a scheduler sums the contexts of sequences on both sides of a
        window into one total, the linear model overstates the KV of those past it (Σ min ≠ min Σ).
        """
        return held_context(self.layer_windows, context)

    @property
    def sliding_windows(self) -> dict[int, int]:
        """{window tokens: layers} of the sliding-window layers (empty: every layer sees the whole context)."""
        return dict(Counter(w for w in self.layer_windows if w is not None))

    @property
    def attention_flops_per_context_token(self) -> int:
        """FLOPs of QKᵀ and AV for one new token against one cached token, all layers and heads.

        Multi-head: 4·L·heads·head_dim. MLA decodes absorbed (vLLM, SGLang): each head scores the shared
        latent and rope key, 2·(kv_lora_rank + qk_rope_head_dim), and sums the latent, 2·kv_lora_rank.
        """
        mla = self.mla
        per_head = 4 * self.head_dim if mla is None else 2 * mla.cached_values_per_token + 2 * mla.kv_lora_rank
        return self.num_layers * self.num_attention_heads * per_head

    # -- parameters per layer -------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V and output projections (with biases where the family has them; MLA's own layout)."""
        h, f = self.hidden_size, self.family
        if self.mla is not None:
            return self.mla.params(h, self.num_attention_heads)
        weights = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        biases = (self.q_dim + 2 * self.kv_dim if f.qkv_bias else 0) + (h if f.out_bias else 0)
        return weights + biases

    def mlp_params(self, intermediate: int) -> int:
        """One MLP of this width: gate+up+down for gated MLPs, up+down otherwise (with biases if the family has)."""
        h, f = self.hidden_size, self.family
        matrices = 3 if f.gated_mlp else 2
        return matrices * h * intermediate + ((intermediate + h) if f.mlp_bias else 0)

    @property
    def expert_params(self) -> int:
        """One MLP (one routed expert for MoE)."""
        return self.mlp_params(self.intermediate_size)

    @property
    def shared_expert_params(self) -> int:
        """The MLP every token of an MoE layer passes beside its routed experts (and Qwen2-MoE's gate on it)."""
        if not self.shared_intermediate_size:
            return 0
        gate = self.hidden_size if self.family.shared_expert_gate else 0
        return self.mlp_params(self.shared_intermediate_size) + gate

    @property
    def norm_params_per_layer(self) -> int:
        per_norm = 2 * self.hidden_size if self.family.layer_norm else self.hidden_size
        qk = 2 * self.head_dim if self.family.qk_norm else 0
        return self.family.norms_per_layer * per_norm + qk

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden_size * self.num_experts if self.is_moe else 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP routes to experts."""
        return self.num_layers - self.dense_mlp_layers if self.is_moe else 0

    @property
    def layer_dense_params(self) -> int:
        """Parameters every token uses, all layers: attention, norms, dense MLPs, routers, shared experts."""
        base = self.num_layers * (self.attention_params_per_layer + self.norm_params_per_layer)
        if not self.is_moe:
            return base + self.num_layers * self.expert_params
        dense = self.dense_mlp_layers * self.mlp_params(self.dense_intermediate_size)
        return base + dense + self.moe_layers * (self.router_params_per_layer + self.shared_expert_params)

    @property
    def expert_params_all_layers(self) -> int:
        """One routed expert in every MoE layer (what streaming one more expert per layer reads)."""
        return self.moe_layers * self.expert_params

    # -- whole model ------------------------------------------------------------------
    @property
    def embedding_params(self) -> int:
        """Token embedding table plus learned position embeddings, if any."""
        positions = 0
        offset = self.family.learned_positions_offset
        if offset is not None and self.max_position_embeddings:
            positions = (self.max_position_embeddings + offset) * self.hidden_size
        return self.vocab_size * self.hidden_size + positions

    @property
    def lm_head_params(self) -> int:
        """Output projection; shares the embedding table when tied (still read every step)."""
        return self.vocab_size * self.hidden_size

    @property
    def final_norm_params(self) -> int:
        return 2 * self.hidden_size if self.family.layer_norm else self.hidden_size

    @property
    def language_params(self) -> int:
        """Stored parameters of the language model (tied lm_head counted once)."""
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        experts = self.num_experts * self.expert_params_all_layers
        return self.embedding_params + self.layer_dense_params + experts + self.final_norm_params + head

    @property
    def total_params(self) -> int:
        """Stored parameters: the language model and any vision tower and projector."""
        return self.language_params + self.vision_params

    @property
    def matmul_params_per_token(self) -> int:
        """Parameters multiplied per token (2 FLOPs each): layers' projections, active experts, lm_head."""
        active = self.experts_per_token * self.expert_params_all_layers
        return self.layer_dense_params + active + self.lm_head_params

    @property
    def streamed_dense_params(self) -> int:
        """Parameters read from memory every decode step regardless of batch (routed experts excluded).

        The input embedding table is not streamed (a decode step reads one row per sequence); the lm_head
        is, tied or not. A vision tower is not read at decode.
        """
        return self.layer_dense_params + self.final_norm_params + self.lm_head_params

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model_type": self.model_type,
            "attention": self.attention_kind,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "num_experts": self.num_experts,
            "experts_per_token": self.experts_per_token,
            "sliding_windows": {str(w): n for w, n in self.sliding_windows.items()},
            "vision_params": self.vision_params,
            "quantization": self.quantization.describe() if self.quantization else None,
            "total_params": self.total_params,
            "matmul_params_per_token": self.matmul_params_per_token,
        }
