"""A checkpoint's `quantization_config`: the weight dtype it stores and the bytes its scales add.

Read from config.json for AWQ, GPTQ, FP8 (Hugging Face's fine-grained FP8, as DeepSeek-V3 ships),
compressed-tensors (llm-compressor) and bitsandbytes. Scale overhead is per group of weights:

- AWQ: one fp16 scale and one packed zero point (`bits` wide) per `group_size` weights.
- GPTQ: the same (its zero points are stored even when symmetric); `group_size` -1 is one scale per output
  channel, negligible beside the weights.
- FP8 with `weight_block_size` [a, b]: one fp32 scale per a×b block; per-tensor scales are negligible.
- compressed-tensors: one 16-bit scale per group or block (nvfp4: one fp8 scale per 16), plus a zero point
  when asymmetric; per-channel and per-tensor scales are negligible.
- bitsandbytes 4-bit (nf4/fp4): one fp32 absmax per 64 weights, or with double quantisation one 8-bit absmax
  per 64 and an fp32 per 256 of those. LLM.int8: per-row scales, negligible.

Every one of them quantises the linear layers only: the embedding table (and a vision tower) stays at 16 bits,
and so does lm_head (AutoAWQ, GPTQ, HF's FP8 and bitsandbytes skip it; compressed-tensors lists it in `ignore`,
and quantises it only where that list leaves it out). A dtype given by name (`--dtype int4`) is counted the same
way, as vLLM's own quantisers leave its ParallelLMHead unquantised.

A method tokenroof does not read is kept by name (`weight_dtype` None): giving `--dtype` is then the way on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, Self

from pydantic import ConfigDict, PlainValidator, model_validator

from tokenroof.specs.validate import Section, flag, table_error, text, whole

FP16_SCALE_BYTES = 2.0
FP32_SCALE_BYTES = 4.0
BNB_BLOCK = 64  # bitsandbytes 4-bit block size
BNB_DOUBLE_BLOCK = 256  # blocks sharing one fp32 scale under double quantisation
INT_DTYPES = {4: "int4", 8: "int8"}
FLOAT_DTYPES = {4: "fp4", 8: "fp8"}
METHODS = ("awq", "bitsandbytes", "compressed-tensors", "fp8", "gptq")


@dataclass(frozen=True)
class Quantization:
    """How a checkpoint stores its weights: dtype, and scale bytes per group of `group_size` weights."""

    method: str
    weight_dtype: str | None  # None: a method tokenroof does not read
    group_size: int = 1
    scale_bytes_per_group: float = 0.0
    # the output projection quantised too: only where the config says so (compressed-tensors' `ignore` without it);
    # AWQ, GPTQ, FP8 and bitsandbytes keep lm_head, like the embedding table, at 16 bits
    lm_head_quantized: bool = False

    @property
    def scale_bytes_per_param(self) -> float:
        return self.scale_bytes_per_group / self.group_size

    def describe(self) -> str:
        """`awq: int4, 2.5 scale bytes per 128 weights`: what the checkpoint's config says."""
        if self.weight_dtype is None:
            return f"{self.method}: not read by tokenroof"
        head = "lm_head quantised too" if self.lm_head_quantized else "embeddings and lm_head in 16 bits"
        if not self.scale_bytes_per_group:
            return f"{self.method}: {self.weight_dtype}, {head}"
        scales = f"{self.scale_bytes_per_group:g} scale bytes per {self.group_size} weights"
        return f"{self.method}: {self.weight_dtype}, {scales}, {head}"


Bits = Annotated[int, PlainValidator(whole(1, 64))]
Group = Annotated[int, PlainValidator(whole(-1))]
Side = Annotated[int, PlainValidator(whole(1))]
Flag = Annotated[bool, PlainValidator(flag)]
Text = Annotated[str, PlainValidator(text)]


def _method(value: Any) -> str:
    return text(value).lower()


class WeightScheme(Section):
    """compressed-tensors `config_groups.<name>.weights`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    num_bits: Bits
    type: Text = "int"
    strategy: Text = "tensor"
    group_size: Group | None = None
    block_structure: list[Side] | None = None
    symmetric: Flag = True


class SchemeGroup(Section):
    model_config = ConfigDict(extra="ignore", frozen=True)

    weights: WeightScheme | None = None


class QuantizationFields(Section):
    """The `quantization_config` keys tokenroof reads, others ignored; a method it does not read keeps its name."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    quant_method: Annotated[str, PlainValidator(_method)]
    bits: Bits | None = None
    group_size: Group | None = None
    zero_point: Flag = True
    weight_block_size: list[Side] | None = None
    format: Text | None = None
    config_groups: dict[str, SchemeGroup] | None = None
    load_in_4bit: Flag = False
    load_in_8bit: Flag = False
    bnb_4bit_use_double_quant: Flag = False
    ignore: list[Text] | None = None  # compressed-tensors: modules left unquantised (names or "re:" patterns)

    @model_validator(mode="before")
    @classmethod
    def _unknown_method_by_name(cls, data: Any) -> Any:
        """A method tokenroof does not read is kept by name, its other keys unread."""
        method = data.get("quant_method") if isinstance(data, Mapping) else None
        if isinstance(method, str) and method.lower() not in METHODS:
            return {"quant_method": method}
        return data

    @model_validator(mode="after")
    def _readable(self) -> Self:
        self.quantization()  # a scheme that cannot be read is an error naming quantization_config
        return self

    def quantization(self) -> Quantization:
        """What the checkpoint stores: its weight dtype and scale overhead."""
        reader = READERS.get(self.quant_method)
        return Quantization(self.quant_method, None) if reader is None else reader(self)


def _dtype(bits: int, kinds: Mapping[int, str], what: str) -> str:
    if bits not in kinds:
        known = " or ".join(f"{b}-bit" for b in kinds)
        raise table_error(f"{what} with {bits}-bit weights is not modelled (known: {known}); give --dtype")
    return kinds[bits]


def _grouped(method: str, dtype: str, group: int | None, scale_bytes: float) -> Quantization:
    """Scales per `group` weights; no group, or one per channel (-1, 0), is negligible overhead."""
    if group is None or group <= 0:
        return Quantization(method, dtype)
    return Quantization(method, dtype, group, scale_bytes)


def _awq_gptq(q: QuantizationFields) -> Quantization:
    bits = q.bits if q.bits is not None else 4
    dtype = _dtype(bits, INT_DTYPES, q.quant_method)
    zero = bits / 8 if q.zero_point or q.quant_method == "gptq" else 0.0
    group = q.group_size if q.group_size is not None else 128
    return _grouped(q.quant_method, dtype, group, FP16_SCALE_BYTES + zero)


def _fp8(q: QuantizationFields) -> Quantization:
    if not q.weight_block_size:
        return Quantization("fp8", "fp8")
    return Quantization("fp8", "fp8", math.prod(q.weight_block_size), FP32_SCALE_BYTES)


def _compressed_tensors(q: QuantizationFields) -> Quantization:
    schemes = [g.weights for g in (q.config_groups or {}).values() if g.weights is not None]
    if not schemes:
        raise table_error("compressed-tensors config has no config_groups.*.weights scheme")
    w = schemes[0]
    kinds = FLOAT_DTYPES if w.type == "float" else INT_DTYPES
    dtype = _dtype(w.num_bits, kinds, f"compressed-tensors {w.type}")
    scale = (1.0 if q.format == "nvfp4-pack-quantized" else FP16_SCALE_BYTES) + (0 if w.symmetric else w.num_bits / 8)
    if w.strategy == "group":
        found = _grouped("compressed-tensors", dtype, w.group_size, scale)
    elif w.strategy == "block" and w.block_structure:
        found = _grouped("compressed-tensors", dtype, math.prod(w.block_structure), scale)
    else:
        found = Quantization("compressed-tensors", dtype)
    # llm-compressor writes the modules it left alone: lm_head among them (its recipes' default) keeps it 16-bit
    head_ignored = q.ignore is None or any("lm_head" in name for name in q.ignore)
    return replace(found, lm_head_quantized=not head_ignored)


def _bitsandbytes(q: QuantizationFields) -> Quantization:
    if q.load_in_4bit:
        per_block = 1.0 + FP32_SCALE_BYTES / BNB_DOUBLE_BLOCK if q.bnb_4bit_use_double_quant else FP32_SCALE_BYTES
        return Quantization("bitsandbytes", "int4", BNB_BLOCK, per_block)
    if q.load_in_8bit:
        return Quantization("bitsandbytes", "int8")
    raise table_error("bitsandbytes config sets neither load_in_4bit nor load_in_8bit")


READERS: dict[str, Callable[[QuantizationFields], Quantization]] = {
    "awq": _awq_gptq,
    "gptq": _awq_gptq,
    "fp8": _fp8,
    "compressed-tensors": _compressed_tensors,
    "bitsandbytes": _bitsandbytes,
}
