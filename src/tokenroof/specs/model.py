"""Reading a Hugging Face config.json into a ModelSpec (specs/modelspec.py).

Families differ in structural traits the config does not spell out; those come from
`specs.families.FAMILIES` by `model_type`, and everything else from the config's own fields, so any
local config.json of a known family works the same as a preset. Multimodal configs hold the language
model under `text_config`; their vision tower is counted as weights held in memory, never as decode cost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import AliasChoices, ConfigDict, Field, PlainValidator, model_validator

from tokenroof.errors import TokenroofError
from tokenroof.specs.families import (
    FAMILIES,
    FULL,
    SLIDING,
    TEXT_DEFAULTS,
    Family,
    is_moe_layer,
    layer_windows,
    projector_params,
    vit_params,
)
from tokenroof.specs.modelspec import Mla, ModelSpec
from tokenroof.specs.quantization import QuantizationFields
from tokenroof.specs.validate import Section, flag, load_json, positive, table_error, text, validated, whole

__all__ = ["FAMILIES", "Family", "Mla", "ModelSpec", "model_from_config", "read_model_config"]

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
CARRIED = ("_source", "_published_parameter_count", "quantization_config")  # a multimodal config's, kept


def _lookup(config: Mapping[str, Any], field: str) -> Any:
    for key in KEYS[field]:
        if config.get(key) is not None:
            return config[key]
    return None


def _family(value: Any) -> str:
    name = text(value).lower()
    if name not in FAMILIES:
        reads = ", ".join(KEYS[f][0] for f in (*REQUIRED, "intermediate_size"))
        raise ValueError(
            f"not a known family (known: {', '.join(FAMILIES)}); another family needs its structure "
            f"added to tokenroof.specs.families, beside the fields every family gives ({reads})"
        )
    return name


def _table(value: Any) -> dict[str, Any]:
    """A JSON object carried as it is (rope_scaling): its numbers (factors, frequencies, lengths) must still be
    finite and not negative."""
    if not isinstance(value, Mapping):
        raise ValueError("must be a JSON object")
    _sane(value)
    return dict(value)


def _sane(value: Any, where: str = "") -> None:
    """Every number in a JSON value, nested lists and objects included (LongRoPE's factor lists), finite and not
    negative."""
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        at = f"{where}{'.' if where else ''}{key}"
        if isinstance(item, Mapping | list):
            _sane(item, at)
        elif isinstance(item, int | float) and not isinstance(item, bool) and not (math.isfinite(item) and item >= 0):
            raise ValueError(f"{at} = {item}: must be a finite number, not negative")


def _layer_type(value: Any) -> str:
    kind = text(value)
    if kind not in (SLIDING, FULL):
        raise ValueError(f"must be {SLIDING!r} or {FULL!r} (other attention kinds are not modelled)")
    return kind


Size = Annotated[int, PlainValidator(whole(1))]
Count = Annotated[int, PlainValidator(whole(0))]
Positive = Annotated[float, PlainValidator(positive)]
Flag = Annotated[bool, PlainValidator(flag)]
Table = Annotated[dict[str, Any], PlainValidator(_table)]
Text = Annotated[str, PlainValidator(text)]
LayerType = Annotated[str, PlainValidator(_layer_type)]


class RopeParameters(Section):
    """`rope_parameters` (newer configs): the theta and, unless "default", the scaling."""

    model_config = ConfigDict(extra="allow", frozen=True)

    rope_theta: Positive | None = None
    rope_type: Text = "default"


class VisionFields(Section):
    """A multimodal config's `vision_config`: the ViT shape whose parameters are held in memory."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    hidden_size: Size
    intermediate_size: Size
    num_hidden_layers: Size
    patch_size: Size
    image_size: Size
    num_channels: Size = 3


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
    # sliding-window attention
    sliding_window: Size | None = None
    use_sliding_window: Flag | None = None
    max_window_layers: Count = 0
    sliding_window_pattern: Size | None = None
    layer_types: list[LayerType] | None = None
    # DeepSeek MLA
    kv_lora_rank: Size | None = None
    q_lora_rank: Size | None = None
    qk_rope_head_dim: Size | None = None
    qk_nope_head_dim: Size | None = None
    v_head_dim: Size | None = None
    # MoE layout: shared experts, dense layers
    n_shared_experts: Count | None = None
    shared_expert_intermediate_size: Count | None = None
    first_k_dense_replace: Count = 0
    moe_layer_freq: Size = 1
    decoder_sparse_step: Size = 1
    mlp_only_layers: list[Count] = Field(default_factory=list)
    quantization_config: QuantizationFields | None = None
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
        if self.layer_types is not None and len(self.layer_types) != self.num_layers:
            raise table_error(
                f"layer_types names {len(self.layer_types)} layers, num_hidden_layers = {self.num_layers}"
            )
        return self

    @property
    def kv_heads(self) -> int:
        heads = self.num_attention_heads or 1
        return self.num_kv_heads or (1 if self.multi_query else heads)

    @property
    def family(self) -> Family:
        return FAMILIES[self.model_type]


def _missing(config: Mapping[str, Any]) -> list[str]:
    """The required fields the config lacks: every family's, then its family's own (MLA's ranks)."""
    missing = [
        f"'{KEYS[f][0]}'" + (f" (or {', '.join(KEYS[f][1:])})" if len(KEYS[f]) > 1 else "")
        for f in REQUIRED
        if _lookup(config, f) is None
    ]
    kind = config.get("model_type")
    family = FAMILIES.get(kind.lower()) if isinstance(kind, str) else None
    return missing + [f"'{key}'" for key in (family.needs if family else ()) if config.get(key) is None]


def _text_config(config: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """Multimodal configs keep the language model's shape under `text_config`, writing only what differs from
    the family's defaults; the outer config's source, published count and quantization carry over."""
    if "text_config" not in config or _lookup(config, "hidden_size") is not None:
        return config
    inner = config["text_config"]
    if not isinstance(inner, Mapping):
        raise TokenroofError(f"{origin}: text_config must be a JSON object holding the language model's shape")
    kind = inner.get("model_type")
    defaults = TEXT_DEFAULTS.get(kind, {}) if isinstance(kind, str) else {}
    carried = {key: config[key] for key in CARRIED if config.get(key) is not None and key not in inner}
    return {**defaults, **inner, "_source": config.get("_source", ""), **carried}


def model_from_config(config: Mapping[str, Any], origin: str, name: str = "") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json; errors name the file and the field."""
    language = _text_config(config, origin)
    missing = _missing(language)
    if missing:
        raise TokenroofError(f"{origin}: config.json is missing required field(s): {', '.join(missing)}")
    given = {k: v for k, v in language.items() if v is not None}
    spec = _spec(validated(ConfigFields, given, origin, "a JSON object"), origin, name)
    if language is not config and config.get("vision_config") is not None:
        spec = replace(spec, vision_params=_vision_params(config, spec.hidden_size, origin))
    return spec


def _vision_params(config: Mapping[str, Any], text_hidden: int, origin: str) -> int:
    """The image encoder and projector of a multimodal config (memory only: a decode step never reads them)."""
    vision = validated(VisionFields, config["vision_config"], origin, "a JSON object", "vision_config")
    kind = config.get("model_type")
    projector = projector_params(kind, vision.hidden_size, text_hidden) if isinstance(kind, str) else 0
    return vit_params(vision.model_dump()) + projector


def _spec(c: ConfigFields, origin: str, name: str) -> ModelSpec:
    """The ModelSpec of checked config fields, with the family's defaults for what the config leaves out."""
    assert c.hidden_size is not None and c.num_attention_heads is not None
    mla = _mla(c)
    rope = c.rope_parameters or RopeParameters()
    rope_scaling = c.rope_scaling or (rope.model_dump(exclude_unset=True) if rope.rope_type != "default" else None)
    if rope_scaling is not None and c.rope_scaling is None:
        try:
            _table(rope_scaling)
        except ValueError as exc:
            raise TokenroofError(f"{origin}: rope_parameters.{exc}") from None
    tie = c.tie_word_embeddings if c.tie_word_embeddings is not None else c.family.tied_by_default
    return ModelSpec(
        name=name or c.name_or_path or origin,
        model_type=c.model_type,
        hidden_size=c.hidden_size,
        num_layers=c.num_layers or 0,
        num_attention_heads=c.num_attention_heads,
        num_kv_heads=c.kv_heads,
        head_dim=mla.qk_head_dim if mla else c.head_dim or c.hidden_size // c.num_attention_heads,
        intermediate_size=_intermediate(c, origin),
        vocab_size=c.vocab_size or 0,
        max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=tie,
        family=c.family,
        published_parameter_count=c.published_parameter_count,
        source=c.source if c.source is not None else origin,
        rope_theta=c.rope_theta or rope.rope_theta or 10000.0,
        norm_eps=c.norm_eps if c.norm_eps is not None else 1e-5,
        rope_scaling=rope_scaling,
        mla=mla,
        layer_windows=_windows(c),
        quantization=c.quantization_config.quantization() if c.quantization_config else None,
        **_moe(c, origin),
    )


def _intermediate(c: ConfigFields, origin: str) -> int:
    """The MLP width: one routed expert's for MoE (`moe_intermediate_size` where given), else the dense one."""
    if c.num_experts and c.moe_intermediate_size:
        return c.moe_intermediate_size
    if c.intermediate_size is not None:
        return c.intermediate_size
    if c.model_type != "gpt2":
        raise TokenroofError(f"{origin}: config.json is missing required field 'intermediate_size'")
    assert c.hidden_size is not None
    return 4 * c.hidden_size


def _moe(c: ConfigFields, origin: str) -> dict[str, int]:
    """Experts, top-k, the dense-MLP layers among them (DeepSeek's first layers) and the shared expert."""
    experts = c.num_experts or 0
    if not experts:
        return {}
    layers = c.num_layers or 0
    skip = frozenset(c.mlp_only_layers)
    routed = sum(
        is_moe_layer(i, c.first_k_dense_replace, c.moe_layer_freq, c.decoder_sparse_step, skip) for i in range(layers)
    )
    if routed < layers and c.intermediate_size is None:
        raise TokenroofError(f"{origin}: config.json has {layers - routed} dense MLP layers but no 'intermediate_size'")
    shared = c.shared_expert_intermediate_size or (c.n_shared_experts or 0) * _intermediate(c, origin)
    return {
        "num_experts": experts,
        "experts_per_token": c.experts_per_token or min(2, experts),
        "dense_mlp_layers": layers - routed,
        "dense_intermediate_size": (c.intermediate_size or 0) if routed < layers else 0,
        "shared_intermediate_size": shared,
    }


def _mla(c: ConfigFields) -> Mla | None:
    """DeepSeek's latent attention (the family's required fields were checked before validation)."""
    if not c.family.mla:
        return None
    assert c.kv_lora_rank and c.qk_rope_head_dim and c.qk_nope_head_dim and c.v_head_dim
    return Mla(c.kv_lora_rank, c.qk_rope_head_dim, c.qk_nope_head_dim, c.v_head_dim, c.q_lora_rank or 0)


def _windows(c: ConfigFields) -> tuple[int | None, ...]:
    return layer_windows(
        c.family,
        c.num_layers or 0,
        c.sliding_window,
        c.layer_types,
        c.sliding_window_pattern,
        c.use_sliding_window,
        c.max_window_layers if c.use_sliding_window else 0,
    )


def read_model_config(path: Path, name: str = "") -> ModelSpec:
    """Load a config.json file (or a folder holding one, like a Hugging Face snapshot)."""
    if path.is_dir():
        path = path / "config.json"
    config = load_json(path)
    if not isinstance(config, dict):
        raise TokenroofError(f"{path}: expected a JSON object")
    return model_from_config(config, str(path), name or path.stem)
