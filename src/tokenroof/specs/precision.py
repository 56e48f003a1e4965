"""Precision: weight, KV-cache and compute dtypes, chosen independently.

Bytes per element are exact for the storage formats; group-quantised formats
(int4, fp4) add the scale overhead of one 16-bit scale per `group_size` weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenroof.errors import TokenroofError

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
    """Weight dtype, KV-cache dtype and compute dtype (which hardware peak applies)."""

    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    compute_dtype: str = "bf16"
    group_size: int = 128

    @classmethod
    def create(
        cls,
        dtype: str = "bf16",
        kv_dtype: str | None = None,
        compute_dtype: str | None = None,
        group_size: int = 128,
    ) -> Precision:
        """Build from user names; the KV cache defaults to the weight dtype when 16-bit, else bf16."""
        weight = canonical_dtype(dtype, "weight dtype")
        if kv_dtype is None:
            kv = weight if weight in ("fp32", "bf16", "fp16") else "bf16"
        else:
            kv = canonical_dtype(kv_dtype, "KV-cache dtype")
        compute = (
            default_compute_dtype(weight) if compute_dtype is None else canonical_dtype(compute_dtype, "compute dtype")
        )
        if group_size <= 0:
            raise TokenroofError(f"group size must be positive, got {group_size}")
        return cls(weight, kv, compute, group_size)

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per weight, including per-group scales for int4/fp4."""
        base = DTYPE_BYTES[self.weight_dtype]
        if self.weight_dtype in GROUP_QUANTISED:
            return base + SCALE_BYTES / self.group_size
        return base

    @property
    def kv_bytes_per_element(self) -> float:
        """Bytes per cached K or V element."""
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def activation_bytes_per_element(self) -> float:
        """Bytes per activation element between kernels (16-bit unless computing in fp32)."""
        return 4.0 if self.compute_dtype == "fp32" else 2.0

    def to_dict(self) -> dict[str, object]:
        return {
            "weight_dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "compute_dtype": self.compute_dtype,
            "weight_bytes_per_param": self.weight_bytes_per_param,
        }
