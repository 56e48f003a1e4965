"""Precision: weight, KV-cache and compute dtypes, chosen independently.

Bytes per element are exact for the storage formats; group-quantised formats
(int4, fp4) add the scale overhead of one 16-bit scale per `group_size` weights.
The weight dtype is the one given (`--dtype`), else the checkpoint's `quantization_config`
with the scale bytes its format stores (specs/quantization.py), else bf16; `source` says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.specs.quantization import METHODS as READ_METHODS
from tokenroof.specs.quantization import Quantization

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,  # stored as fp32; a tensor-core compute mode
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}
ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8": "fp8",
    "w8a8": "int8",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "awq": "int4",
    "gptq": "int4",
}
GROUP_QUANTISED = {"int4", "fp4"}
UNQUANTISED_BYTES = 2.0  # what quantisers leave unquantised (embeddings, lm_head) stays in the 16-bit model dtype
SCALE_BYTES = 2.0  # one fp16/bf16 scale per group


def canonical_dtype(name: str, what: str = "dtype") -> str:
    """Normalise a dtype name (`bfloat16` -> `bf16`); unknown names are an error listing the known ones."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        known = ", ".join(sorted(DTYPE_BYTES))
        raise TokenroofError(f"unknown {what} '{name}'; known: {known}")
    return key


def default_compute_dtype(weight_dtype: str) -> str:
    """The tensor-core dtype a serving engine uses for matmuls with these weights.

    fp8 weights run W8A8 fp8 GEMMs (vLLM's default on Hopper); int8/int4/fp4
    weights are taken as weight-only quantisation, dequantised to bf16.
    """
    if weight_dtype in ("fp32", "bf16", "fp16", "fp8"):
        return weight_dtype
    return "bf16"


@dataclass(frozen=True)
class Precision:
    """Weight dtype, KV-cache dtype and compute dtype (which hardware peak applies).

    `scale_bytes_per_group` None is the rule for a dtype given by name: one 16-bit scale per group for
    int4/fp4, none otherwise; a checkpoint's quantization sets it. `source` is where the weight dtype came
    from: "given", "checkpoint" (its quantization_config, described by `quantization`) or "default".
    """

    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    compute_dtype: str = "bf16"
    group_size: int = 128
    scale_bytes_per_group: float | None = None
    source: str = "given"
    quantization: str | None = None
    lm_head_quantized: bool = False  # a quantised checkpoint whose lm_head is quantised too (specs/quantization.py)
    kv_source: str = "given"  # "given", "engine" (the profile's default under these weights) or "default"

    @classmethod
    def create(
        cls,
        dtype: str | None = None,
        kv_dtype: str | None = None,
        compute_dtype: str | None = None,
        group_size: int = 128,
        checkpoint: Quantization | None = None,
        engine_kv: Mapping[str, str] | None = None,
    ) -> Precision:
        """Build from user names; `dtype` None takes the checkpoint's quantization, else bf16. The KV cache, when
        not given, is what the engine keeps under these weights (`engine_kv`: an engine profile's
        `kv_dtype_by_weights`, TensorRT-LLM's FP8 cache under FP8 weights), else the weight dtype when 16-bit,
        else bf16; `kv_source` says which."""
        if group_size <= 0:
            raise TokenroofError(f"group size must be positive, got {group_size}")
        weight, source, scale, described, head = "bf16", "default", None, None, False
        if dtype is not None:
            weight, source = canonical_dtype(dtype, "weight dtype"), "given"
        elif checkpoint is not None:
            weight, source, described = _checkpoint_dtype(checkpoint), "checkpoint", checkpoint.describe()
            group_size, scale = checkpoint.group_size, checkpoint.scale_bytes_per_group
            head = checkpoint.lm_head_quantized
        kv_source = "given"
        if kv_dtype is not None:
            kv = canonical_dtype(kv_dtype, "KV-cache dtype")
        elif engine_kv and weight in engine_kv:
            kv, kv_source = canonical_dtype(engine_kv[weight], "KV-cache dtype"), "engine"
        else:
            kv, kv_source = (weight if weight in ("fp32", "bf16", "fp16") else "bf16"), "default"
        compute = (
            default_compute_dtype(weight) if compute_dtype is None else canonical_dtype(compute_dtype, "compute dtype")
        )
        return cls(weight, kv, compute, group_size, scale, source, described, head, kv_source)

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per weight, including per-group scales (int4/fp4 by name, or as the checkpoint stores them)."""
        scale = self.scale_bytes_per_group
        if scale is None:
            scale = SCALE_BYTES if self.weight_dtype in GROUP_QUANTISED else 0.0
        return DTYPE_BYTES[self.weight_dtype] + scale / self.group_size

    @property
    def quantised(self) -> bool:
        """Weights below 16 bits: the linear layers only, the embedding table (and lm_head, usually) left at 16."""
        return DTYPE_BYTES[self.weight_dtype] < UNQUANTISED_BYTES

    @property
    def lm_head_bytes_per_param(self) -> float:
        """Bytes per lm_head weight: 16-bit beside quantised layers unless the checkpoint quantised it too."""
        if self.quantised and not self.lm_head_quantized:
            return UNQUANTISED_BYTES
        return self.weight_bytes_per_param

    @property
    def table_bytes_per_param(self) -> float:
        """Bytes per embedding-table (and vision-tower) weight: 16-bit beside quantised layers."""
        return UNQUANTISED_BYTES if self.quantised else self.weight_bytes_per_param

    @property
    def kv_bytes_per_element(self) -> float:
        """Bytes per cached K or V element."""
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def attention_dtype(self) -> str:
        """The dtype attention's matmuls (Q·Kᵀ and P·V) run in: fp8 where the GEMMs and the KV cache both are (FP8
        attention kernels: TensorRT-LLM's FMHA, FlashAttention-3); otherwise the 16-bit activations' (a narrower
        cache is dequantised as it is read), fp32 when computing in it."""
        if self.compute_dtype in ("fp32", "bf16", "fp16"):
            return self.compute_dtype
        return "fp8" if self.compute_dtype == "fp8" and self.kv_dtype == "fp8" else "bf16"

    @property
    def activation_bytes_per_element(self) -> float:
        """Bytes per activation element between kernels (16-bit unless computing in fp32)."""
        return 4.0 if self.compute_dtype == "fp32" else 2.0

    def to_dict(self) -> dict[str, object]:
        return {
            "weight_dtype": self.weight_dtype,
            "weight_dtype_source": self.source,
            "quantization": self.quantization,
            "kv_dtype": self.kv_dtype,
            "kv_dtype_source": self.kv_source,
            "compute_dtype": self.compute_dtype,
            "attention_dtype": self.attention_dtype,
            "weight_bytes_per_param": self.weight_bytes_per_param,
            "lm_head_bytes_per_param": self.lm_head_bytes_per_param,
        }


def _checkpoint_dtype(checkpoint: Quantization) -> str:
    if checkpoint.weight_dtype is None:
        known = ", ".join(sorted(READ_METHODS))
        raise ParameterError(
            f"the checkpoint's quantization_config method '{checkpoint.method}' is not one tokenroof reads "
            f"({known}); give {{}}",
            "dtype",
        )
    return checkpoint.weight_dtype
