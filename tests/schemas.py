"""The JSON contract: schemas/*.schema.json, loaded once, and one call to check an output against its command's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from tokenroof.io.contract import registry, schema

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"  # the link to src/tokenroof/schemas
COMMANDS = ("roofline", "predict", "advise", "simulate", "plan", "bench", "bench-local", "calibrate")


def load(name: str) -> dict[str, Any]:
    return schema(name)


def validate(command: str, data: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError (with the path of the offending key) if `data` breaks the contract."""
    Draft202012Validator(load(command), registry=registry()).validate(json.loads(json.dumps(data)))


def validate_part(command: str, pointer: str, data: Any) -> None:
    """A part of a command's output against the part of its schema at `pointer` ("/$defs/point")."""
    document = {"$ref": load(command)["$id"] + "#" + pointer}
    Draft202012Validator(document, registry=registry()).validate(json.loads(json.dumps(data)))


def validate_bench_point(point: dict[str, Any]) -> None:
    """One bench sweep point (as run_bench returns it and summary.json holds it) against bench's point definition."""
    validate_part("bench", "/$defs/point", point)
