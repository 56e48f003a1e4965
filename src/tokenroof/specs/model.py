"""ModelSpec: a decoder-only transformer read from a Hugging Face config.json.

Families differ in a few structural traits (gated MLP, biases, norm kind,
learned positions, q/k norms); those come from `FAMILIES` by `model_type`, and
everything else from the config's own fields, so any local config.json of a
known family works the same as a preset.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenroof.errors import TokenroofError


@dataclass(frozen=True)
class Family:
    """Structural traits that config.json does not spell out."""

    gated_mlp: bool = True  # SwiGLU: gate, up and down projections
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    layer_norm: bool = False  # LayerNorm (weight + bias) instead of RMSNorm (weight)
    learned_positions_offset: int | None = None  # learned absolute positions: max_pos + offset rows
    qk_norm: bool = False


LLAMA = Family()
FAMILIES: dict[str, Family] = {
    "llama": LLAMA,
    "mistral": LLAMA,
    "mixtral": LLAMA,
    "qwen2": Family(qkv_bias=True),
    "qwen3": Family(qk_norm=True),
    "qwen3_moe": Family(qk_norm=True),
    "opt": Family(
        gated_mlp=False, qkv_bias=True, out_bias=True, mlp_bias=True, layer_norm=True, learned_positions_offset=2
    ),
    "gpt2": Family(
        gated_mlp=False, qkv_bias=True, out_bias=True, mlp_bias=True, layer_norm=True, learned_positions_offset=0
    ),
    "gpt_neox": Family(gated_mlp=False, qkv_bias=True, out_bias=True, mlp_bias=True, layer_norm=True),
}

# Each field: the accepted config keys, in order of preference.
KEYS: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "vocab_size": ("vocab_size",),
    "intermediate_size": ("intermediate_size", "ffn_dim", "n_inner"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "max_seq_len"),
    "num_kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "num_experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "experts_per_token": ("num_experts_per_tok", "moe_topk", "top_k"),
    "moe_intermediate_size": ("moe_intermediate_size",),
}
REQUIRED = ("hidden_size", "num_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer; parameter counts are derived properties."""

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

    # -- shapes -------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_kind(self) -> str:
        if self.num_kv_heads == self.num_attention_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    # -- parameters per layer -------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V and output projections (with biases where the family has them)."""
        h, f = self.hidden_size, self.family
        weights = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        biases = (self.q_dim + 2 * self.kv_dim if f.qkv_bias else 0) + (h if f.out_bias else 0)
        return weights + biases

    @property
    def expert_params(self) -> int:
        """One MLP (one expert for MoE): gate+up+down for gated MLPs, up+down otherwise."""
        h, i, f = self.hidden_size, self.intermediate_size, self.family
        matrices = 3 if f.gated_mlp else 2
        biases = (i + h) if f.mlp_bias else 0
        return matrices * h * i + biases

    @property
    def norm_params_per_layer(self) -> int:
        per_norm = 2 * self.hidden_size if self.family.layer_norm else self.hidden_size
        qk = 2 * self.head_dim if self.family.qk_norm else 0
        return 2 * per_norm + qk

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden_size * self.num_experts if self.is_moe else 0

    @property
    def dense_params_per_layer(self) -> int:
        """Parameters every token uses in a layer: attention, norms, router (and the MLP if dense)."""
        base = self.attention_params_per_layer + self.norm_params_per_layer + self.router_params_per_layer
        return base if self.is_moe else base + self.expert_params

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
    def total_params(self) -> int:
        """Stored parameters (tied lm_head counted once)."""
        experts = self.num_layers * self.num_experts * self.expert_params if self.is_moe else 0
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        return (
            self.embedding_params
            + self.num_layers * self.dense_params_per_layer
            + experts
            + self.final_norm_params
            + head
        )

    @property
    def matmul_params_per_token(self) -> int:
        """Parameters multiplied per token (2 FLOPs each): layers' projections, active experts, lm_head."""
        active_experts = self.experts_per_token * self.expert_params if self.is_moe else 0
        return self.num_layers * (self.dense_params_per_layer + active_experts) + self.lm_head_params

    @property
    def streamed_dense_params(self) -> int:
        """Parameters read from memory every decode step regardless of batch (experts excluded).

        The input embedding table is not streamed (a decode step reads one row per
        sequence); the lm_head is, tied or not.
        """
        return self.num_layers * self.dense_params_per_layer + self.final_norm_params + self.lm_head_params

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
            "total_params": self.total_params,
            "matmul_params_per_token": self.matmul_params_per_token,
        }


def _lookup(config: Mapping[str, Any], field: str) -> Any:
    for key in KEYS[field]:
        if config.get(key) is not None:
            return config[key]
    return None


def _int_field(config: Mapping[str, Any], field: str, origin: str) -> int | None:
    value = _lookup(config, field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TokenroofError(f"{origin}: field '{KEYS[field][0]}' must be a positive integer, got {value!r}")
    return value


def model_from_config(config: Mapping[str, Any], origin: str, name: str = "") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json; errors name the file and the missing field."""
    if "text_config" in config and _lookup(config, "hidden_size") is None:
        config = {**config["text_config"], "_source": config.get("_source", "")}
    missing = [
        f"'{KEYS[f][0]}'" + (f" (or {', '.join(KEYS[f][1:])})" if len(KEYS[f]) > 1 else "")
        for f in REQUIRED
        if _lookup(config, f) is None
    ]
    if missing:
        raise TokenroofError(f"{origin}: config.json is missing required field(s): {', '.join(missing)}")
    model_type = str(config.get("model_type", "")).lower()
    family = FAMILIES.get(model_type)
    if family is None:
        known = ", ".join(sorted(FAMILIES))
        raise TokenroofError(f"{origin}: model_type '{model_type}' is not a known family (known: {known})")
    ints = {f: _int_field(config, f, origin) for f in KEYS}
    hidden, heads = ints["hidden_size"], ints["num_attention_heads"]
    assert hidden is not None and heads is not None
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = ints["num_kv_heads"] or (1 if config.get("multi_query") else heads)
    if heads % kv_heads:
        raise TokenroofError(f"{origin}: {heads} attention heads are not a multiple of {kv_heads} KV heads")
    num_experts = ints["num_experts"] or 0
    intermediate = (
        ints["moe_intermediate_size"] if num_experts and ints["moe_intermediate_size"] else ints["intermediate_size"]
    )
    if intermediate is None:
        if model_type != "gpt2":
            raise TokenroofError(f"{origin}: config.json is missing required field 'intermediate_size'")
        intermediate = 4 * hidden
    tie = config.get("tie_word_embeddings")
    rope: Mapping[str, Any] = config.get("rope_parameters") or {}
    if not isinstance(rope, Mapping):
        rope = {}
    rope_theta = config.get("rope_theta", rope.get("rope_theta", 10000.0))
    rope_scaling = config.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
    eps = next((config[k] for k in ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon") if k in config), 1e-5)
    return ModelSpec(
        name=name or str(config.get("_name_or_path", "")) or origin,
        model_type=model_type,
        hidden_size=hidden,
        num_layers=ints["num_layers"] or 0,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=int(head_dim),
        intermediate_size=intermediate,
        vocab_size=ints["vocab_size"] or 0,
        max_position_embeddings=ints["max_position_embeddings"],
        tie_word_embeddings=bool(tie) if tie is not None else model_type in ("gpt2", "opt"),
        family=family,
        num_experts=num_experts,
        experts_per_token=(ints["experts_per_token"] or 2) if num_experts else 0,
        published_parameter_count=config.get("_published_parameter_count"),
        source=str(config.get("_source", origin)),
        rope_theta=float(rope_theta),
        norm_eps=float(eps),
        rope_scaling=dict(rope_scaling) if isinstance(rope_scaling, Mapping) else None,
    )


def read_model_config(path: Path, name: str = "") -> ModelSpec:
    """Load a config.json file (or a folder holding one, like a Hugging Face snapshot)."""
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TokenroofError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except OSError as exc:
        raise TokenroofError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(config, dict):
        raise TokenroofError(f"{path}: expected a JSON object")
    return model_from_config(config, str(path), name or path.stem)
