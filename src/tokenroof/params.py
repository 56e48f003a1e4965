"""Every numeric parameter's range, by name, and one line for a value out of it: the command line and the local
page check the same values the same way (the messages name the flag, `--tpot-slo-ms`, which both show)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from tokenroof.errors import TokenroofError


def parse_numbers(text: str, what: str) -> list[float]:
    """`"1,8, 32"` → [1.0, 8.0, 32.0] (commas or any whitespace between); a bad item names itself, on one line, and so
    does an empty one between commas (`10,,20`: a value left out, not a separator to pass over)."""
    values = []
    pieces = text.split(",")
    if len(pieces) > 1 and any(not piece.strip() for piece in pieces):
        raise TokenroofError(f"{what}: an empty item between commas in '{repr(text[:60])[1:-1]}'")
    for item in re.split(r"[\s,]+", text):
        if not item:
            continue
        try:
            values.append(float(item))
        except ValueError:
            raise TokenroofError(f"{what}: '{repr(item[:40])[1:-1]}' is not a number") from None
    return values


def parse_names(text: str, what: str) -> tuple[str, ...]:
    """`"h100-sxm, a100-sxm-80gb"` → its names; an empty one between commas named (`a,,b`)."""
    names = tuple(part.strip() for part in text.split(","))
    if not all(names):
        raise TokenroofError(f"{what}: an empty item between commas in '{repr(text[:60])[1:-1]}'")
    return names


# The range each numeric flag takes, by its parameter name: (lowest, whether the lowest itself is allowed, highest).
# Every float flag must be finite unless named in ALLOW_INF; integer flags are whole by their type.
FLAG_RANGES: dict[str, tuple[float, bool, float]] = {
    "rate": (0, False, math.inf),
    "request_rate": (0, False, math.inf),
    "burstiness": (0, False, math.inf),
    "spread": (0, True, 10),
    "num_requests": (1, True, 100_000_000),  # a run holds each request in memory: a hundred million at most
    "max_num_seqs": (1, True, math.inf),
    "replicas": (1, True, math.inf),
    "seeds": (1, True, math.inf),
    "max_replicas": (1, True, math.inf),
    "workers": (1, True, math.inf),
    "samples": (1, True, math.inf),
    "tp": (1, True, math.inf),
    "kv_cache_tokens": (1, True, math.inf),
    "max_num_batched_tokens": (1, True, math.inf),
    "max_model_len": (1, True, math.inf),
    "input_len": (1, True, math.inf),
    "output_len": (1, True, math.inf),
    "context": (0, True, math.inf),
    "prompt_tokens": (1, True, math.inf),
    "critical_batch": (0, False, math.inf),
    "roof_tok_s": (0, False, math.inf),
    "ttft_slo_ms": (0, False, math.inf),
    "tpot_slo_ms": (0, False, math.inf),
    "gpu_memory_utilization": (0, False, 1),
    "memory_fraction": (0, False, 1),
    "bandwidth_efficiency": (0, False, 1),
    "compute_efficiency": (0, False, 1),
    "overhead_ms": (0, True, math.inf),
    "warmup": (0, True, math.inf),
    "steps": (1, True, math.inf),
    "rounds": (1, True, math.inf),
    "repeats": (1, True, math.inf),
    "passes": (1, True, math.inf),
}
ALLOW_INF = {"burstiness"}  # inf = a constant request rate
LIST_FLAGS = {"context"}  # flags that take a list ('8192,32768'), each item in the flag's range


def check_flags(values: dict[str, Any]) -> None:
    """One line for the first numeric flag out of its range (NaN, an infinity, a negative count, ...); a flag that
    takes a list ('8192,32768') is checked item by item."""
    for name, given in values.items():
        flag = "--" + name.replace("_", "-")
        items = parse_numbers(given, flag) if isinstance(given, str) and name in LIST_FLAGS else [given]
        for value in items:
            _check_flag(name, flag, value)


def _check_flag(name: str, flag: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, float) and (math.isnan(value) or (math.isinf(value) and name not in ALLOW_INF)):
        raise TokenroofError(f"{flag} must be a finite number, got {value}")
    if name not in FLAG_RANGES:
        return
    low, inclusive, high = FLAG_RANGES[name]
    if value < low or (value == low and not inclusive) or value > high:
        bound = f"{'at least' if inclusive else 'above'} {low:g}" + (
            f" and at most {high:g}" if high < math.inf else ""
        )
        raise TokenroofError(f"{flag} must be {bound}, got {shown(value)}")


def shown(value: float) -> str:
    """A number for a message: %g, and an integer too large for a float (%g would overflow) by its digits."""
    if isinstance(value, float) or abs(value) < 10**15:
        short = f"{value:g}"  # and more figures where six would round it onto the bound it missed (1.0000001)
        return short if not isinstance(value, float) or float(short) == value else f"{value:.12g}"
    digits = str(abs(value))
    return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"


def whole_numbers(values: Sequence[float], flag: str) -> list[int]:
    """Values that must be integers (concurrencies, TP degrees): 1.5 or nan is an error, never silently truncated."""
    for value in values:
        if not math.isfinite(value) or value != round(value):
            raise TokenroofError(f"{flag}: {value:g} is not a whole number")
    return [int(v) for v in values]
