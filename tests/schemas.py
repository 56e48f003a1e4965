"""The JSON contract: schemas/*.schema.json, loaded once, and one call to check an output against its command's."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
COMMANDS = ("roofline", "predict", "advise", "simulate", "plan", "bench", "bench-local", "calibrate")


@cache
def load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


@cache
def registry() -> Registry:
    resources = [(load(p.name.removesuffix(".schema.json"))["$id"], p) for p in sorted(SCHEMAS.glob("*.schema.json"))]
    return Registry().with_resources(
        (uri, Resource.from_contents(load(p.name.removesuffix(".schema.json")))) for uri, p in resources
    )


def validate(command: str, data: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError (with the path of the offending key) if `data` breaks the contract."""
    Draft202012Validator(load(command), registry=registry()).validate(json.loads(json.dumps(data)))


def validate_bench_point(point: dict[str, Any]) -> None:
    """One bench sweep point (as run_bench returns it and summary.json holds it) against bench's point definition."""
    schema = {"$ref": load("bench")["$id"] + "#/$defs/point"}
    Draft202012Validator(schema, registry=registry()).validate(json.loads(json.dumps(point)))
