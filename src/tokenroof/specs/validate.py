"""One validation layer for the spec files: model config.json, hardware TOML, step-model JSON.

Reading: UTF-8 only (a leading byte-order mark is skipped), at most `MAX_DEPTH` levels of
nesting. Checking: pydantic models whose fields use the validators below; `validated`
turns a ValidationError into one TokenroofError line, `<file>: <key> = <value>; <what was
expected>`, and names any further problems by key.

Rules every file shares: a bool is never a number; numbers are finite, and nonzero ones
are normal floats (5e-324 is a slip, not a size); integers fit in a float.
"""

from __future__ import annotations

import codecs
import json
import math
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from tokenroof.errors import TokenroofError

MAX_DEPTH = 32  # spec files nest two or three levels; deeper is a broken or hostile file
MAX_SIZE = 2**31 - 1  # no model dimension, layer count or vocabulary comes near this
SMALLEST_NORMAL = sys.float_info.min
TABLE_ERRORS = {"model_type", "model_attributes_type", "dict_type"}

M = TypeVar("M", bound=BaseModel)


# -- reading ------------------------------------------------------------------------
def read_text(path: Path) -> str:
    """A file's text as UTF-8 (a byte-order mark is skipped); a bad byte is named by offset and line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TokenroofError(f"{path}: cannot read ({exc.strerror or exc})") from None
    bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = bom + exc.start
        line = raw.count(b"\n", 0, offset) + 1
        raise TokenroofError(
            f"{path}: not UTF-8 text (byte 0x{raw[offset]:02x} at offset {offset}, line {line}); save it as UTF-8"
        ) from None


def load_json(path: Path) -> Any:
    """Parse a JSON file; every way it can fail is one line naming the file."""

    def where(exc: Exception) -> str:
        return f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else str(exc)

    return parse(path, json.loads, "JSON", json.JSONDecodeError, where)


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; every way it can fail is one line naming the file."""
    return cast(dict[str, Any], parse(path, tomllib.loads, "TOML", tomllib.TOMLDecodeError, str))


def parse(
    path: Path, loads: Callable[[str], Any], kind: str, syntax: type[Exception], where: Callable[[Exception], str]
) -> Any:
    """`loads` the file's text: a syntax error, nesting too deep or an integer of more digits than Python converts
    (a ValueError) is one line naming the file; then the nesting is checked."""
    text = read_text(path)
    try:
        data = loads(text)
    except syntax as exc:
        raise TokenroofError(f"{path}: not valid {kind} ({where(exc)})") from None
    except RecursionError:
        raise TokenroofError(too_deep(str(path))) from None
    except ValueError as exc:
        raise TokenroofError(f"{path}: not valid {kind} ({str(exc).split(':')[0]})") from None
    check_depth(data, str(path))
    return data


def too_deep(origin: str) -> str:
    return f"{origin}: nested more than {MAX_DEPTH} levels deep; a spec file needs a few"


def check_depth(data: Any, origin: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH (walked without recursion, so any depth is safe to check)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth >= MAX_DEPTH:
                    raise TokenroofError(too_deep(origin))
                stack.append((child, depth + 1))


# -- errors -------------------------------------------------------------------------
def validated(model: type[M], data: Any, origin: str, table: str = "a table", where: str = "") -> M:
    """`model` checked against `data`; a failure is one TokenroofError line naming `origin` and the key.
    `table` is what the format calls a mapping; `where` prefixes every key (a nested section)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise TokenroofError(error_line(exc, origin, table, where)) from None


def error_line(exc: ValidationError, origin: str, table: str = "a table", where: str = "") -> str:
    """The first problem in full (all missing fields at once), then the keys of any others."""
    errors = exc.errors(include_url=False)
    prefix: tuple[str | int, ...] = (where,) if where else ()
    missing = [dotted((*prefix, *e["loc"])) for e in errors if e["type"] == "missing"]
    others = [e for e in errors if e["type"] != "missing"]
    first = f"missing required field(s): {', '.join(missing)}" if missing else describe(others.pop(0), table, prefix)
    rest = [dotted((*prefix, *e["loc"])) or "(top level)" for e in others]
    more = f" (and {len(rest)} more: {', '.join(rest)})" if rest else ""
    return one_line(f"{origin}: {first}{more}")


def one_line(text: str) -> str:
    """Keys and values from the file may hold line breaks: shown escaped, so an error stays one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def describe(error: ErrorDetails, table: str, prefix: tuple[str | int, ...] = ()) -> str:
    """`key = value; problem` for a value, `key: problem` for a whole table or a key's name."""
    loc = (*prefix, *error["loc"])
    kind = error["type"]
    if kind == "value_error":
        problem = str(error.get("ctx", {}).get("error", error["msg"]))
    elif kind in TABLE_ERRORS:
        problem = f"must be {table}"
    elif kind == "table":
        problem = error["msg"]
    else:
        problem = error["msg"][:1].lower() + error["msg"][1:]
    if loc and loc[-1] == "[key]":
        return f"{dotted(loc[:-1])}: {problem}"
    if kind == "table":
        return f"{dotted(loc)}: {problem}" if loc else problem
    return f"{dotted(loc) or '(top level)'} = {show(error['input'])}; {problem}"


def table_error(problem: str) -> PydanticCustomError:
    """An error about a whole table (an unknown key, fields that disagree): no value is shown."""
    return PydanticCustomError("table", "{problem}", {"problem": problem})


def dotted(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def show(value: Any) -> str:
    """A value as the file spelled it, short."""
    if isinstance(value, Mapping):
        out = "{}" if not value else "{…}"
    elif isinstance(value, list):
        out = "[]" if not value else "[…]"
    elif isinstance(value, bool | str) or value is None:
        out = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, float):  # the shorter of Python's round-trip form and six significant digits
        short = f"{value:.6g}"
        out = short if len(short) < len(repr(value)) and float(short) == value else repr(value)
    elif isinstance(value, int):
        out = str(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
    else:
        out = repr(value)
    return out if len(out) <= 40 else out[:39] + "…"


# -- sections -----------------------------------------------------------------------
class Section(BaseModel):
    """A table of a spec file, frozen; with extra="forbid" an unknown key is named with the known ones."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if cls.model_config.get("extra") != "forbid" or not isinstance(data, Mapping):
            return data
        known = [field.alias or name for name, field in cls.model_fields.items()]
        unknown = [repr(key) for key in data if key not in known]
        if unknown:
            raise table_error(f"unknown key {', '.join(unknown)} (known: {', '.join(known)})")
        return data


# -- values -------------------------------------------------------------------------
def number(value: Any) -> float:
    """A finite float from a JSON or TOML number; bools, strings and null are not numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    try:
        result = float(value)
    except OverflowError:
        raise ValueError("is too large for a float") from None
    if not math.isfinite(result):
        raise ValueError("must be a finite number")
    if 0 < abs(result) < SMALLEST_NORMAL:
        raise ValueError(f"is too small to compute with (below {SMALLEST_NORMAL:.3g}, a denormal float)")
    return result


def positive(value: Any) -> float:
    result = number(value)
    if result <= 0:
        raise ValueError("must be a positive number")
    return result


def non_negative(value: Any) -> float:
    result = number(value)
    if result < 0:
        raise ValueError("must be a non-negative number")
    return result


def fraction(value: Any) -> float:
    """A fraction of a peak, in (0, 1]; a percentage is named as one."""
    result = number(value)
    if 0 < result <= 1:
        return result
    hint = f"; a percentage? give {result / 100:g}" if 1 < result <= 100 else ""
    raise ValueError(f"must be in (0, 1], a fraction of the peak{hint}")


def unit_interval(value: Any) -> float:
    result = number(value)
    if not 0 <= result <= 1:
        raise ValueError("must be in [0, 1]")
    return result


def whole(low: int, high: int = MAX_SIZE, integral_floats: bool = False) -> Callable[[Any], int]:
    """Integers in [low, high]; with `integral_floats`, 8.0 counts as 8."""
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer ≥ {low}")

    def check(value: Any) -> int:
        if integral_floats and isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"must be {what}")
        if value > high:
            raise ValueError(f"is too large (more than {high:,})")
        return value

    return check


def flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


@dataclass(frozen=True)
class Plausible:
    """A quantity in SI units that real hardware puts within [low, high]; outside it, the likely slip is named
    (`slips`: what the user probably wrote, and the factor that turns it into the SI unit)."""

    unit: str
    low: float
    high: float
    typical: float
    slips: tuple[tuple[str, float], ...]

    def __call__(self, value: Any) -> float:
        result = number(value)
        if result < 0 or (result == 0 and self.low > 0):
            raise ValueError(f"must be a {'positive' if self.low > 0 else 'non-negative'} number of {self.unit}")
        if self.low <= result <= self.high:
            return result
        raise ValueError(self.slip(result))

    def slip(self, value: float) -> str:
        fits = [
            (abs(math.log10(value * factor / self.typical)), name, factor)
            for name, factor in self.slips
            if self.low <= value * factor <= self.high
        ]
        if not fits:
            return f"is not a plausible number of {self.unit} (expected {self.low:g} to {self.high:g})"
        _, name, factor = min(fits)
        return f"looks like {name}; give {self.unit} ({scaled(value, factor)})"


def scaled(value: float, factor: float) -> str:
    """`value` × `factor` written the way a user would type it: 80 × 1e9 is 80e9."""
    exponent = round(math.log10(factor))
    plain = f"{value:g}"
    if 10.0**exponent == factor and "e" not in plain:
        return f"{plain}e{exponent}"
    return f"{value * factor:.6g}"
