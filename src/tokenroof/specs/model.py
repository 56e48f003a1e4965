"""ModelSpec: a decoder-only transformer read from a Hugging Face config.json.

Families differ in a few structural traits (gated MLP, biases, norm kind,
learned positions, q/k norms); those come from `FAMILIES` by `model_type`, and
everything else from the config's own fields, so any local config.json of a
known family works the same as a preset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import AliasChoices, ConfigDict, Field, PlainValidator, model_validator

from tokenroof.errors import TokenroofError
from tokenroof.specs.validate import Section, flag, load_json, positive, table_error, text, validated, whole


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
NORM_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")


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


def _family(value: Any) -> str:
    name = text(value).lower()
    if name not in FAMILIES:
        raise ValueError(f"not a known family (known: {', '.join(sorted(FAMILIES))})")
    return name


def _table(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError("must be a JSON object")
    return dict(value)


Size = Annotated[int, PlainValidator(whole(1))]
Positive = Annotated[float, PlainValidator(positive)]
Flag = Annotated[bool, PlainValidator(flag)]
Table = Annotated[dict[str, Any], PlainValidator(_table)]
Text = Annotated[str, PlainValidator(text)]


class RopeParameters(Section):
    """`rope_parameters` (newer configs): the theta and, unless "default", the scaling."""

    model_config = ConfigDict(extra="allow", frozen=True)

    rope_theta: Positive | None = None
    rope_type: Text = "default"


def _keys(field: str) -> Any:
    return Field(None, validation_alias=AliasChoices(*KEYS[field]))


class ConfigFields(Section):
    """The config.json keys tokenroof reads, checked (the first of a field's accepted keys that is given);
    every other key is ignored, and null means "not given", as Hugging Face writes unset attributes."""

    model_config = ConfigDict(extra="ignore", frozen=True, protected_namespaces=())

    model_type: Annotated[str, PlainValidator(_family)]
    hidden_size: Size | None = _keys("hidden_size")
    num_layers: Size | None = _keys("num_layers")
    num_attention_heads: Size | None = _keys("num_attention_heads")
    vocab_size: Size | None = _keys("vocab_size")
    intermediate_size: Size | None = _keys("intermediate_size")
    max_position_embeddings: Size | None = _keys("max_position_embeddings")
    num_kv_heads: Size | None = _keys("num_kv_heads")
    num_experts: Size | None = _keys("num_experts")
    experts_per_token: Size | None = _keys("experts_per_token")
    moe_intermediate_size: Size | None = _keys("moe_intermediate_size")
    head_dim: Size | None = None
    multi_query: Flag = False
    tie_word_embeddings: Flag | None = None
    rope_theta: Positive | None = None
    rope_parameters: RopeParameters | None = None
    rope_scaling: Table | None = None
    norm_eps: Positive | None = Field(None, validation_alias=AliasChoices(*NORM_EPS_KEYS))
    published_parameter_count: Annotated[int, PlainValidator(whole(1, 2**53))] | None = Field(
        None, alias="_published_parameter_count"
    )
    source: Text | None = Field(None, alias="_source")
    name_or_path: Text | None = Field(None, alias="_name_or_path")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """Shapes that cannot describe a transformer: no head without a dimension, no KV head unshared."""
        hidden, heads = self.hidden_size or 0, self.num_attention_heads or 0
        if heads > hidden:
            raise table_error(f"num_attention_heads = {heads} exceeds hidden_size = {hidden}")
        kv = self.kv_heads
        if heads % kv:
            raise table_error(f"{heads} attention heads are not a multiple of {kv} KV heads")
        if self.num_experts and (self.experts_per_token or 0) > self.num_experts:
            raise table_error(
                f"{KEYS['experts_per_token'][0]} = {self.experts_per_token} exceeds "
                f"{KEYS['num_experts'][0]} = {self.num_experts}: each token is routed to at most every expert"
            )
        return self

    @property
    def kv_heads(self) -> int:
        heads = self.num_attention_heads or 1
        return self.num_kv_heads or (1 if self.multi_query else heads)


def _missing(config: Mapping[str, Any]) -> list[str]:
    return [
        f"'{KEYS[f][0]}'" + (f" (or {', '.join(KEYS[f][1:])})" if len(KEYS[f]) > 1 else "")
        for f in REQUIRED
        if _lookup(config, f) is None
    ]


def _text_config(config: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """Multimodal configs keep the language model's shape under `text_config`."""
    if "text_config" not in config or _lookup(config, "hidden_size") is not None:
        return config
    inner = config["text_config"]
    if not isinstance(inner, Mapping):
        raise TokenroofError(f"{origin}: text_config must be a JSON object holding the language model's shape")
    return {**inner, "_source": config.get("_source", "")}


def model_from_config(config: Mapping[str, Any], origin: str, name: str = "") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json; errors name the file and the field."""
    config = _text_config(config, origin)
    missing = _missing(config)
    if missing:
        raise TokenroofError(f"{origin}: config.json is missing required field(s): {', '.join(missing)}")
    given = {k: v for k, v in config.items() if v is not None}
    return _spec(validated(ConfigFields, given, origin, "a JSON object"), origin, name)


def _spec(c: ConfigFields, origin: str, name: str) -> ModelSpec:
    """The ModelSpec of checked config fields, with the family's defaults for what the config leaves out."""
    assert c.hidden_size is not None and c.num_attention_heads is not None
    num_experts = c.num_experts or 0
    intermediate = c.moe_intermediate_size if num_experts and c.moe_intermediate_size else c.intermediate_size
    if intermediate is None:
        if c.model_type != "gpt2":
            raise TokenroofError(f"{origin}: config.json is missing required field 'intermediate_size'")
        intermediate = 4 * c.hidden_size
    rope = c.rope_parameters or RopeParameters()
    rope_scaling = c.rope_scaling or (rope.model_dump(exclude_unset=True) if rope.rope_type != "default" else None)
    tie = c.tie_word_embeddings if c.tie_word_embeddings is not None else c.model_type in ("gpt2", "opt")
    return ModelSpec(
        name=name or c.name_or_path or origin,
        model_type=c.model_type,
        hidden_size=c.hidden_size,
        num_layers=c.num_layers or 0,
        num_attention_heads=c.num_attention_heads,
        num_kv_heads=c.kv_heads,
        head_dim=c.head_dim or c.hidden_size // c.num_attention_heads,
        intermediate_size=intermediate,
        vocab_size=c.vocab_size or 0,
        max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=tie,
        family=FAMILIES[c.model_type],
        num_experts=num_experts,
        experts_per_token=(c.experts_per_token or min(2, num_experts)) if num_experts else 0,
        published_parameter_count=c.published_parameter_count,
        source=c.source if c.source is not None else origin,
        rope_theta=c.rope_theta or rope.rope_theta or 10000.0,
        norm_eps=c.norm_eps if c.norm_eps is not None else 1e-5,
        rope_scaling=rope_scaling,
    )


def read_model_config(path: Path, name: str = "") -> ModelSpec:
    """Load a config.json file (or a folder holding one, like a Hugging Face snapshot)."""
    if path.is_dir():
        path = path / "config.json"
    config = load_json(path)
    if not isinstance(config, dict):
        raise TokenroofError(f"{path}: expected a JSON object")
    return model_from_config(config, str(path), name or path.stem)
