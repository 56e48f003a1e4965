"""Every --json output validates against its schema, and the schemas give one key one shape everywhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, ValidationError

from tests.conftest import run_cli, run_json
from tests.schemas import COMMANDS, SCHEMAS, load, validate

SEED = "examples/h100_7b_seed.csv"
SPECS = ["-m", "llama-3.1-8b", "-H", "h100-sxm"]
LENGTHS = ["--input-len", "1000", "--output-len", "300"]
SMALL = ["--num-requests", "400"]
INFEASIBLE = ["--tpot-slo-ms", "5", "--max-replicas", "1", "--workers", "1"]  # the step too slow: one replica shows it


def test_every_schema_is_a_valid_draft_2020_12_schema() -> None:
    names = sorted(p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json"))
    assert set(COMMANDS) | {"common"} == set(names)
    for name in names:
        Draft202012Validator.check_schema(load(name))


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("roofline", ["roofline", *SPECS, "--batch", "1,64", "--context", "1000", "--prompt-tokens", "500"]),
        ("roofline", ["roofline", *SPECS, "--batch", "1,64", "--context", "8192,32768"]),
        (
            "roofline",
            [
                "roofline",
                *SPECS,
                "--batch",
                "1,64",
                "--input-len",
                "512",
                "--output-len",
                "128",
                "--batching",
                "static",
            ],
        ),
        ("predict", ["predict", SEED, "--batch", "256", "--samples", "20"]),
        ("predict", ["predict", SEED, "--batch", "256,512", *SPECS, "--context", "300", "--samples", "20"]),
        ("advise", ["advise", SEED, "--tpot-slo-ms", "30", "--samples", "20"]),
        ("advise", ["advise", *SPECS, "--context", "1150", "--tpot-slo-ms", "40"]),
        ("advise", ["advise", *SPECS, *LENGTHS, "--tpot-slo-ms", "40", "--ttft-slo-ms", "1000"]),
        ("simulate", ["simulate", *SPECS, *LENGTHS, "--rate", "10", *SMALL]),
        ("simulate", ["simulate", *SPECS, *LENGTHS, "--rate", "5,10", *SMALL, "--tpot-slo-ms", "20"]),
        ("simulate", ["simulate", "--fit", SEED, "--rate", "10", *SMALL, "--ttft-slo-ms", "500"]),
        ("simulate", ["simulate", *SPECS, *LENGTHS, "--concurrency", "4,8", "--num-requests", "60"]),  # a closed loop
        ("roofline", ["roofline", *SPECS, "--tp", "2", "--batch", "1,64", "--gpu-memory-utilization", "0.6"]),
        ("plan", ["plan", *SPECS, *LENGTHS, "--rate", "10", *SMALL, "--seeds", "1", "--slo-statistic", "p90"]),
    ],
)
def test_json_output_validates_against_its_schema(command: str, args: list[str]) -> None:
    validate(command, run_json(args))


@pytest.mark.heavy
def test_bench_output_and_summary_json_validate(tmp_path: Path) -> None:
    """Against the emulator (its own process): a closed-loop and an open-loop point, on stdout and in summary.json."""
    from tests.emulator_process import emulator_process
    from tests.schemas import validate_bench_point

    # 20 ms steps: a busy machine's event-loop lag stays under half a TPOT (a client-bound point is left out and bench
    # exits 1, its output in the same shape)
    terms = {"t_fixed_s": 2e-3, "t_weights_s": 18e-3, "t_compute_s": 0.0, "t_kv_token_s": 0.0, "t_seq_s": 5e-5}
    with emulator_process(terms, tmp_path) as url:
        flags = ["--concurrency", "2", "--request-rate", "40", "--requests-per-point", "24"]
        flags += ["--input-len", "4", "--output-len", "4"]
        result = run_cli(["bench", url, *flags, "--out", str(tmp_path / "out"), "--json"])
    data = json.loads(result.stdout)
    assert result.exit_code == (1 if any(p["invalid"] for p in data["points"]) else 0), result.stderr
    validate("bench", data)
    assert [p["kind"] for p in data["points"]] == ["concurrency", "rate"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["points"] == data["points"]
    for point in summary["points"]:
        validate_bench_point(point)
    broken = {**data["points"][0], "tpot_ms": 5.0}
    with pytest.raises(ValidationError):
        validate_bench_point(broken)


@pytest.mark.heavy
def test_an_infeasible_plan_prints_its_candidates_and_exits_1() -> None:
    """Nothing meets the targets: the JSON (or the table) is the evidence, the status says no; errors exit 2."""
    args = ["plan", "--fit", SEED, "--rate", "10", *SMALL, "--seeds", "1", *INFEASIBLE]
    result = run_cli([*args, "--json"])
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    validate("plan", data)
    assert data["chosen"] is None and data["points"]
    assert result.stderr.strip() == f"infeasible: {data['reason']}"
    table = run_cli(args)
    assert table.exit_code == 1 and "infeasible:" in table.stdout and "max_num_seqs" in table.stdout


def test_a_broken_output_is_caught_with_its_path() -> None:
    data = run_json(["advise", *SPECS, "--context", "1150", "--tpot-slo-ms", "40"])
    data["at_cap"]["tpot_ms"] = [30.0, 32.0]  # the old list-shaped interval
    with pytest.raises(ValidationError) as caught:
        validate("advise", data)
    assert list(caught.value.absolute_path) == ["at_cap", "tpot_ms"]


def test_simulate_out_summary_is_the_same_object(tmp_path: Path) -> None:
    run_json(["simulate", *SPECS, *LENGTHS, "--rate", "10", *SMALL, "--out", str(tmp_path)])
    validate("simulate", json.loads((tmp_path / "summary.json").read_text()))


# -- one key, one shape -------------------------------------------------------------------
COMMON = "common.schema.json#/$defs/"
SHARED = {  # keys whose shape is a common definition wherever they appear (or that definition's _or_null)
    "step_model": "step_model",
    "slo": "slo",
    "engine_flags": "engine_flags",
    "warnings": "warnings",
    "reference": "reference",
}
MS_SHAPES = {"number", "number_or_null", "distribution", "distribution_or_null", "value_or_distribution"}
RETIRED = {"mean_running_batch", "tried", "rates", "window_s", "statistic", "replica_saturated"}


def properties(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Every (location, properties object, its key → schema) in a schema tree."""
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict):
            yield where, node["properties"], node
        for key, value in node.items():
            yield from properties(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from properties(value, f"{where}/{i}")


def shape(schema: dict[str, Any]) -> str:
    """A key's shape by name: a common definition it refers to, or its JSON type."""
    ref = schema.get("$ref", "")
    if ref.startswith(COMMON) or ref.startswith("#/$defs/"):
        return ref.rsplit("/", 1)[1].replace("integer", "number")
    kind = schema.get("type")
    return "number" if kind in ("number", "integer") else str(kind)


def contract_breaks(name: str, schema: dict[str, Any]) -> list[str]:
    """Where a schema gives a key other than the contract's shape."""
    breaks = []
    for where, props, _ in properties(schema):
        for key, sub in props.items():
            at = f"{name}{where}.{key}"
            if key in RETIRED and not (where.endswith("/slo") and key == "statistic"):
                breaks.append(f"{at}: a retired key")
            if key.endswith("_interval"):
                breaks.append(f"{at}: intervals are _low/_high siblings")
            if key in SHARED and shape(sub).removesuffix("_or_null") != SHARED[key]:
                breaks.append(f"{at}: always the common {SHARED[key]}")
            if key.endswith("_ms") and sub is not True and shape(sub) not in MS_SHAPES:
                breaks.append(f"{at}: a number or a {{mean,p50,p90,p99}} distribution")
            for suffix in ("_low", "_high"):
                base = key.removesuffix(suffix)
                if key.endswith(suffix) and base + "_s" not in props:
                    if base not in props:
                        breaks.append(f"{at}: an interval without its value {base}")
                    elif shape(sub).removesuffix("_or_null") != shape(props[base]).removesuffix("_or_null"):
                        breaks.append(f"{at}: not the shape of {base}")
    return breaks


@pytest.mark.parametrize("name", [*COMMANDS, "common"])
def test_one_key_one_shape(name: str) -> None:
    assert contract_breaks(name, load(name)) == []


def test_the_shape_check_catches_what_the_old_outputs_did() -> None:
    old = {
        "properties": {
            "max_num_seqs_interval": {"type": "array"},
            "tpot_p99_ms": {"type": "array"},
            "mean_running_batch": {"type": "number"},
            "model": {"properties": {"tpot_ms_low": {"type": "number"}}},
            "step_model": {"type": "object"},
        }
    }
    assert len(contract_breaks("old", old)) == 5
