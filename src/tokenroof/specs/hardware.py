"""HardwareSpec: one accelerator, loaded from a TOML file (a preset or the user's own)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.specs.precision import canonical_dtype

REQUIRED_FIELDS = ("name", "peaks", "memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops_per_s")


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

    def peak_for(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype; an error lists the dtypes this chip has."""
        if dtype in self.peak_flops_per_s:
            return self.peak_flops_per_s[dtype]
        known = ", ".join(sorted(self.peak_flops_per_s))
        raise TokenroofError(f"{self.name} has no {dtype} peak (it has: {known}); choose --compute-dtype from those")

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
            "peak_flops_per_s": dict(self.peak_flops_per_s),
            "source": dict(self.source),
            "efficiencies": {k: dict(v) if isinstance(v, Mapping) else v for k, v in self.efficiencies.items()},
        }


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise TokenroofError(f"{where} must be a positive number, got {value!r}")
    return float(value)


def hardware_from_dict(data: Mapping[str, Any], origin: str, key: str = "") -> HardwareSpec:
    """Validate a parsed hardware TOML; every problem names the file and the field."""
    missing = [f for f in REQUIRED_FIELDS if f not in data]
    if missing:
        raise TokenroofError(f"{origin}: missing required field(s): {', '.join(missing)}")
    if data["peaks"] != "dense":
        raise TokenroofError(
            f"{origin}: peaks = {data['peaks']!r}; tokenroof needs dense peaks (halve with-sparsity numbers) "
            'and the file must say peaks = "dense"'
        )
    raw_peaks = data["peak_flops_per_s"]
    if not isinstance(raw_peaks, Mapping) or not raw_peaks:
        raise TokenroofError(f"{origin}: [peak_flops_per_s] must be a table such as bf16 = 989.4e12")
    peaks = {
        canonical_dtype(k, f"dtype in {origin} [peak_flops_per_s]"): _positive(v, f"{origin}: peak_flops_per_s.{k}")
        for k, v in raw_peaks.items()
    }
    interconnect = data.get("interconnect_bandwidth_bytes_per_s")
    efficiencies = _efficiencies(data.get("efficiencies", {}), origin)
    source = data.get("source", {})
    return HardwareSpec(
        name=str(data["name"]),
        memory_bytes=_positive(data["memory_bytes"], f"{origin}: memory_bytes"),
        memory_bandwidth_bytes_per_s=_positive(
            data["memory_bandwidth_bytes_per_s"], f"{origin}: memory_bandwidth_bytes_per_s"
        ),
        peak_flops_per_s=MappingProxyType(peaks),
        interconnect_bandwidth_bytes_per_s=None
        if interconnect is None
        else _positive(interconnect, f"{origin}: interconnect_bandwidth_bytes_per_s"),
        peaks="dense",
        source=MappingProxyType({str(k): str(v) for k, v in source.items()}) if isinstance(source, Mapping) else {},
        key=key,
        efficiencies=efficiencies,
        measured=dict(data.get("measured", {})) if isinstance(data.get("measured"), Mapping) else {},
    )


EFFICIENCY_FRACTIONS = ("bandwidth", "compute", "interconnect", "kv_bandwidth")
EFFICIENCY_SECONDS = ("overhead_s", "overhead_s_per_layer", "allreduce_latency_s")
EFFICIENCY_OTHER = ("overlap",)  # a fraction in [0, 1]: 0 is allowed


def _efficiencies(raw: Any, origin: str) -> dict[str, Any]:
    """`[efficiencies]`: fractions of the peaks in (0, 1], overheads in seconds, and per-dtype sub-tables."""
    if not isinstance(raw, Mapping):
        raise TokenroofError(f"{origin}: [efficiencies] must be a table")
    result: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"{origin}: efficiencies.{key}"
        if isinstance(value, Mapping):
            result[canonical_dtype(key, f"dtype in {origin} [efficiencies]")] = _efficiencies(value, where)
            continue
        if key not in EFFICIENCY_FRACTIONS + EFFICIENCY_SECONDS + EFFICIENCY_OTHER:
            known = ", ".join(EFFICIENCY_FRACTIONS + EFFICIENCY_SECONDS + EFFICIENCY_OTHER)
            raise TokenroofError(f"{where}: unknown key (known: {known}, or a dtype sub-table)")
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise TokenroofError(f"{where} must be a non-negative number, got {value!r}")
        if key in EFFICIENCY_FRACTIONS and not 0 < value <= 1:
            raise TokenroofError(f"{where} = {value:g}; a fraction of the peak must be in (0, 1]")
        if key in EFFICIENCY_OTHER and not 0 <= value <= 1:
            raise TokenroofError(f"{where} = {value:g}; must be in [0, 1]")
        result[key] = float(value)
    return result


def read_hardware_toml(path: Path, key: str = "") -> HardwareSpec:
    """Load one hardware TOML file."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TokenroofError(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise TokenroofError(f"{path}: cannot read ({exc.strerror})") from None
    return hardware_from_dict(data, str(path), key or path.stem)
