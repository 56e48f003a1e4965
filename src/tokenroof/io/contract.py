"""The JSON contract (`tokenroof/schemas/*.schema.json`, linked at the repository's `schemas/`) as an input check.

Every command's --json is written to its schema (the tests check it); whatever reads such a file back — `report`,
the ui's figure — checks it here first, so a file that is not what its keys claim is one line naming the file and
the offending key, never a TypeError deep in the drawing code. Needs jsonschema (`tokenroof[report]`).
"""

from __future__ import annotations

import json
import math
import sys
from functools import cache
from importlib import resources
from typing import Any

from tokenroof.errors import TokenroofError

# a bench folder's summary.json: bench's points (its --json adds `out` and `warnings`)
BENCH_SUMMARY = {
    "type": "object",
    "required": ["url", "model", "points"],
    "properties": {
        "url": {"type": "string"},
        "model": {"type": ["string", "null"]},
        "points": {"type": "array", "items": {"$ref": "https://tokenroof.dev/schemas/bench.schema.json#/$defs/point"}},
    },
}

BENCH_POINT = {"$ref": "https://tokenroof.dev/schemas/bench.schema.json#/$defs/point"}  # one line of requests.jsonl
DOCUMENTS: dict[str, dict[str, Any]] = {"bench-summary": BENCH_SUMMARY, "bench-point": BENCH_POINT}
WHAT = {"bench-summary": "bench summary", "bench-point": "bench point"}


@cache
def schema(name: str) -> dict[str, Any]:
    """One command's schema ('predict', 'advise', ..., 'common')."""
    text = resources.files("tokenroof.schemas").joinpath(f"{name}.schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def names() -> list[str]:
    folder = resources.files("tokenroof.schemas")
    return sorted(p.name.removesuffix(".schema.json") for p in folder.iterdir() if p.name.endswith(".schema.json"))


@cache
def registry() -> Any:
    from referencing import Registry, Resource

    return Registry().with_resources((schema(n)["$id"], Resource.from_contents(schema(n))) for n in names())


def validator(kind: str) -> Any:
    try:
        from jsonschema import Draft202012Validator
    except ImportError:
        raise TokenroofError("reading a command's JSON needs jsonschema: pip install 'tokenroof[report]'") from None
    document = DOCUMENTS[kind] if kind in DOCUMENTS else schema(kind)
    return Draft202012Validator(document, registry=registry())


def where(path: Any) -> str:
    """A JSON path as the key a reader would look for: predictions[3].tpot_ms."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".") or "the top level"


def unrepresentable(data: Any, path: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], Any] | None:
    """The first number no command writes (NaN, an infinity: --json writes null; an integer beyond a float's range)
    and where it is; None when there is none. JSON Schema's `number` lets them through; the readers cannot."""
    if isinstance(data, float) and not math.isfinite(data):
        return path, data
    if isinstance(data, int) and not isinstance(data, bool) and abs(data) > sys.float_info.max:
        return path, data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found = unrepresentable(value, (*path, key))
        if found is not None:
            return found
    return None


def check(kind: str, data: Any, source: str) -> dict[str, Any]:
    """`data` if it is a valid `kind` answer ('predict', 'advise', ..., 'bench-summary'), else one line:
    '<source>: not a valid predict answer at predictions[3].tpot_ms: 'x' is not of type 'number''. Bench's own
    documents: 'bench-summary' (a folder's summary.json), 'bench-point' (a point's line in requests.jsonl)."""
    from jsonschema.exceptions import best_match

    name = WHAT.get(kind, f"{kind} answer")
    bad = unrepresentable(data)
    if bad is not None:
        number = f"{bad[1]}" if isinstance(bad[1], float) else f"an integer of {len(str(abs(bad[1])))} digits"
        raise TokenroofError(f"{source}: not a valid {name} at {where(bad[0])}: {number} (--json writes null)")
    errors = list(validator(kind).iter_errors(data))
    if errors:
        error = best_match(errors)
        message = error.message if len(error.message) <= 200 else error.message[:200] + "…"
        raise TokenroofError(f"{source}: not a valid {name} at {where(error.absolute_path)}: {message}")
    return dict(data)
