"""HardwareSpec: one accelerator, loaded from a TOML file (a preset or the user's own)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, PlainValidator, model_validator

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.specs.precision import DTYPE_BYTES, canonical_dtype
from tokenroof.specs.validate import (
    Plausible,
    Section,
    fraction,
    load_toml,
    table_error,
    text,
    unit_interval,
    validated,
)


@dataclass(frozen=True)
class HardwareSpec:
    """Dense peaks, memory and interconnect of one accelerator, SI units, with its source."""

    name: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]
    interconnect_bandwidth_bytes_per_s: float | None = None
    peaks: str = "dense"
    source: Mapping[str, str] = field(default_factory=dict)
    key: str = ""
    # measured efficiencies (calibrated files): global keys, and per-weight-dtype tables that override them
    efficiencies: Mapping[str, Any] = field(default_factory=dict)
    measured: Mapping[str, Any] = field(default_factory=dict)
    tdp_watts: float | None = None  # the board's maximum power (thermal design power), from its datasheet
    idle_watts: float | None = None  # the board's power with nothing running (None: a share of the TDP, cost.py)
    usd_per_hour: float | None = None  # what one of it costs an hour (the user's price; presets carry none)
    # where the topology gives a tp-way all-reduce less than the whole (an MI300X pair shares one of its seven
    # links; H100 PCIe boards bridged in pairs cross PCIe past two): each GPU's bandwidth, by tensor-parallel degree
    interconnect_bandwidth_at_tp: Mapping[int, float] = field(default_factory=dict)

    def interconnect_bandwidth(self, tp: int) -> float | None:
        """The bandwidth each GPU's all-reduce sees across `tp` GPUs (bytes/s each way): the file's figure for the
        largest degree it lists up to `tp` (a figure holds from its degree on: H100 PCIe's 64 GB/s past its bridged
        pairs, at 4, 8, 16), else the whole link's (None: the file gives none)."""
        listed = [d for d in self.interconnect_bandwidth_at_tp if d <= tp]
        return self.interconnect_bandwidth_at_tp[max(listed)] if listed else self.interconnect_bandwidth_bytes_per_s

    def peak_for(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype; an error lists the dtypes this chip has."""
        if dtype in self.peak_flops_per_s:
            return self.peak_flops_per_s[dtype]
        known = ", ".join(sorted(self.peak_flops_per_s))
        raise ParameterError(
            f"{self.name} has no {dtype} peak (it has: {known}); choose {{}} from those", "compute_dtype"
        )

    def ridge_flops_per_byte(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound at the peaks."""
        return self.peak_for(dtype) / self.memory_bandwidth_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "peaks": self.peaks,
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "interconnect_bandwidth_bytes_per_s": self.interconnect_bandwidth_bytes_per_s,
            "interconnect_bandwidth_at_tp": {str(k): v for k, v in self.interconnect_bandwidth_at_tp.items()},
            "peak_flops_per_s": dict(self.peak_flops_per_s),
            "source": dict(self.source),
            "efficiencies": {k: dict(v) if isinstance(v, Mapping) else v for k, v in self.efficiencies.items()},
            "tdp_watts": self.tdp_watts,
            "idle_watts": self.idle_watts,
            "usd_per_hour": self.usd_per_hour,
        }


# -- the file ------------------------------------------------------------------------
# Units sanity: SI units in every key, and ranges no real accelerator (or a calibrated CPU) falls outside;
# a value outside names the slip it looks like ("memory_bytes = 80; looks like GB; give bytes (80e9)").
MEMORY_BYTES = Plausible(
    "bytes", 1e8, 1e14, 80e9, (("GB", 1e9), ("MB", 1e6), ("TB", 1e12), ("KB", 1e3), ("bytes scaled twice", 1e-9))
)
BANDWIDTH = (("GB/s", 1e9), ("TB/s", 1e12), ("MB/s", 1e6), ("bytes/s scaled twice", 1e-9))
MEMORY_BANDWIDTH = Plausible("bytes per second", 1e8, 1e15, 2e12, BANDWIDTH)
INTERCONNECT_BANDWIDTH = Plausible("bytes per second", 1e8, 1e14, 100e9, BANDWIDTH)
FLOPS = Plausible(
    "FLOP/s",
    1e8,
    1e18,
    500e12,
    (("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("PFLOP/s", 1e15), ("FLOP/s scaled twice", 1e-12)),
)
OVERHEAD_SECONDS = Plausible("seconds", 0.0, 1.0, 1e-3, (("ms", 1e-3), ("µs", 1e-6)))
WATTS = Plausible("watts", 1.0, 5000.0, 700.0, (("kW", 1e3), ("mW", 1e-3)))
USD_PER_HOUR = Plausible(
    "US dollars an hour", 1e-4, 1000.0, 2.5, (("cents an hour", 1e-2), ("dollars a month", 1 / 730))
)


def _dense(value: Any) -> str:
    if value != "dense":
        raise ValueError(
            'tokenroof needs dense peaks (halve with-sparsity numbers) and the file must say peaks = "dense"'
        )
    return "dense"


def _name(value: Any) -> str:
    if not text(value).strip():
        raise ValueError("must name the accelerator")
    return str(value)


def _dtype(value: Any) -> str:
    try:
        return canonical_dtype(text(value), "dtype")
    except TokenroofError as exc:
        raise ValueError(str(exc)) from None


def _one_peak_per_dtype(peaks: Any) -> Any:
    """Before the keys are made canonical: `bf16` and `bfloat16` both given is one dtype twice."""
    if isinstance(peaks, Mapping):
        names = [canonical_dtype_or_none(str(key)) for key in peaks]
        twice = sorted({n for n in names if n is not None and names.count(n) > 1})
        if twice:
            raise table_error(f"gives {', '.join(twice)} twice (under different names); give each dtype once")
    return peaks


def _some_peak(peaks: dict[str, float]) -> dict[str, float]:
    if not peaks:
        raise ValueError("must give at least one dense peak, such as bf16 = 989.4e12")
    return peaks


def _degree(value: Any) -> int:
    try:
        degree = int(str(value))
    except ValueError:
        raise ValueError(f"a tensor-parallel degree is a whole number, got {value!r}") from None
    if degree < 2:
        raise ValueError(f"a tensor-parallel degree past one GPU is at least 2, got {degree}")
    return degree


Fraction = Annotated[float, PlainValidator(fraction)]
Overhead = Annotated[float, PlainValidator(OVERHEAD_SECONDS)]
Dtype = Annotated[str, PlainValidator(_dtype)]


class EfficiencyTerms(Section):
    """Measured efficiencies: fractions of the peaks in (0, 1], overheads in seconds, overlap in [0, 1]."""

    bandwidth: Fraction | None = None
    compute: Fraction | None = None
    interconnect: Fraction | None = None
    kv_bandwidth: Fraction | None = None
    overhead_s: Overhead | None = None
    overhead_s_per_layer: Overhead | None = None
    allreduce_latency_s: Overhead | None = None
    allreduce_step_latency_s: Overhead | None = None
    overlap: Annotated[float, PlainValidator(unit_interval)] | None = None


class Efficiencies(EfficiencyTerms):
    """`[efficiencies]`: global terms, and `[efficiencies.<weight dtype>]` tables that override them."""

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, EfficiencyTerms] = Field(init=False)

    @model_validator(mode="before")
    @classmethod
    def _dtype_tables(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        result: dict[str, Any] = {}
        for key, value in data.items():
            if key in EfficiencyTerms.model_fields:
                result[key] = value
            elif not isinstance(value, Mapping):
                known = ", ".join(EfficiencyTerms.model_fields)
                raise table_error(f"unknown key {key!r} (known: {known}, or a dtype sub-table)")
            elif (dtype := canonical_dtype_or_none(str(key))) is None:
                raise table_error(f"unknown dtype in [efficiencies.{key}]; known: {', '.join(sorted(DTYPE_BYTES))}")
            elif dtype in result:
                raise table_error(f"[efficiencies.{key}] is {dtype} again; give each dtype once")
            else:
                result[dtype] = value
        return result


def canonical_dtype_or_none(name: str) -> str | None:
    try:
        return canonical_dtype(name)
    except TokenroofError:
        return None


class HardwareFile(Section):
    """A hardware TOML as written: every key known, every number in its SI unit and range."""

    name: Annotated[str, PlainValidator(_name)]
    peaks: Annotated[str, PlainValidator(_dense)]
    memory_bytes: Annotated[float, PlainValidator(MEMORY_BYTES)]
    memory_bandwidth_bytes_per_s: Annotated[float, PlainValidator(MEMORY_BANDWIDTH)]
    interconnect_bandwidth_bytes_per_s: Annotated[float, PlainValidator(INTERCONNECT_BANDWIDTH)] | None = None
    interconnect_bandwidth_at_tp: dict[
        Annotated[int, PlainValidator(_degree)], Annotated[float, PlainValidator(INTERCONNECT_BANDWIDTH)]
    ] = Field(default_factory=dict)
    peak_flops_per_s: Annotated[
        dict[Dtype, Annotated[float, PlainValidator(FLOPS)]],
        BeforeValidator(_one_peak_per_dtype),
        AfterValidator(_some_peak),
    ]
    efficiencies: Efficiencies = Efficiencies()
    measured: dict[str, Any] = Field(default_factory=dict)  # what `tokenroof calibrate` measured, kept as written
    source: dict[str, Any] = Field(default_factory=dict)
    tdp_watts: Annotated[float, PlainValidator(WATTS)] | None = None
    idle_watts: Annotated[float, PlainValidator(WATTS)] | None = None
    usd_per_hour: Annotated[float, PlainValidator(USD_PER_HOUR)] | None = None

    @model_validator(mode="after")
    def _a_ring_gets_no_more_than_the_link(self) -> HardwareFile:
        whole = self.interconnect_bandwidth_bytes_per_s
        over = {d: v for d, v in self.interconnect_bandwidth_at_tp.items() if whole is not None and v > whole}
        if over:
            raise table_error(
                f"interconnect_bandwidth_at_tp gives {', '.join(f'{v:g} at {d}' for d, v in sorted(over.items()))}, "
                f"more than the whole link (interconnect_bandwidth_bytes_per_s = {whole:g}): a ring gets at most it"
            )
        return self

    @model_validator(mode="after")
    def _idle_below_tdp(self) -> HardwareFile:
        if self.idle_watts is not None and self.tdp_watts is not None and self.idle_watts >= self.tdp_watts:
            raise table_error(f"idle_watts ({self.idle_watts:g}) must be below tdp_watts ({self.tdp_watts:g})")
        return self


def hardware_from_dict(data: Mapping[str, Any], origin: str, key: str = "") -> HardwareSpec:
    """Validate a parsed hardware TOML; every problem is one line naming the file and the key."""
    hw = validated(HardwareFile, data, origin)
    return HardwareSpec(
        name=hw.name,
        memory_bytes=hw.memory_bytes,
        memory_bandwidth_bytes_per_s=hw.memory_bandwidth_bytes_per_s,
        peak_flops_per_s=MappingProxyType(dict(hw.peak_flops_per_s)),
        interconnect_bandwidth_bytes_per_s=hw.interconnect_bandwidth_bytes_per_s,
        interconnect_bandwidth_at_tp=MappingProxyType(dict(hw.interconnect_bandwidth_at_tp)),
        peaks=hw.peaks,
        source=MappingProxyType({str(k): str(v) for k, v in hw.source.items()}),
        key=key,
        efficiencies=hw.efficiencies.model_dump(exclude_none=True),
        measured=dict(hw.measured),
        tdp_watts=hw.tdp_watts,
        idle_watts=hw.idle_watts,
        usd_per_hour=hw.usd_per_hour,
    )


def read_hardware_toml(path: Path, key: str = "") -> HardwareSpec:
    """Load one hardware TOML file."""
    return hardware_from_dict(load_toml(path), str(path), key or path.stem)
