"""What each report input is, told by its shape: a bench folder, a command's --json, or a measurement table.

The shapes are the JSON contract's (schemas/*.schema.json): predict has `predictions`, advise `at_cap` and
`engine_flags`, plan `feasible` and `chosen`, roofline `ridge_flops_per_byte`, a simulate sweep `points` of
simulations with `rate_req_s`, one simulation `requests_in_window`; bench's summary.json has `url`, `model` and
`points`. Anything else goes to `tokenroof.io.measurements.read_table` (CSV, tokenroof points, vLLM, GuideLLM,
SGLang, AIPerf).
A JSON input told by its keys is then checked against its command's schema (`tokenroof.io.contract`): a file
that has the keys but not the contract is one line naming the file and the key, never an error in the drawing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.io.llmperf import RESPONSES_SUFFIX
from tokenroof.io.measurements import (
    LLMPERF_SUMMARIES,
    PROFILE_EXPORTS,
    MeasurementTable,
    is_vllm_result,
    read_table,
    resolve_inputs,
)
from tokenroof.specs.validate import read_text

# kind → the keys that tell it (all must be present); checked in this order
SHAPES: tuple[tuple[str, frozenset[str]], ...] = (
    ("predict", frozenset({"predictions", "step_model", "critical_batch"})),
    ("advise", frozenset({"max_num_seqs", "at_cap", "engine_flags"})),
    ("plan", frozenset({"feasible", "chosen", "points", "slo"})),
    ("roofline", frozenset({"ridge_flops_per_byte", "max_batch_by_memory", "points"})),
    ("simulate", frozenset({"requests_in_window", "ttft_ms", "tpot_ms", "slo"})),
    ("bench", frozenset({"url", "model", "points"})),
)
KNOWN = "a bench folder, predict/advise/simulate/plan/roofline --json, or a measurement CSV/JSON"


@dataclass
class Source:
    """One input: where it came from, what it is, its JSON (as read) and, for tables and bench, its points."""

    path: Path
    kind: str  # predict, advise, plan, roofline, simulate, simulate-sweep, bench, table
    data: dict[str, Any] = field(default_factory=dict)
    table: MeasurementTable | None = None
    notes: list[str] = field(default_factory=list)  # what the report could not use, said once

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)


def kind_of(data: Any) -> str | None:
    """The command whose --json `data` is (None: not one the report knows)."""
    if not isinstance(data, dict):
        return None
    points = data.get("points")
    sweep = isinstance(points, list) and all(
        isinstance(p, dict) and ("rate_req_s" in p or "concurrency" in p) for p in points
    )
    if sweep and {"points", "slo", "step_model"} <= data.keys() and "feasible" not in data:
        return "simulate-sweep"
    for kind, keys in SHAPES:
        if keys <= data.keys():
            return kind
    return None


def checked(kind: str, data: Any, source: object) -> dict[str, Any]:
    """`data` checked against the schema of the command whose --json it is (`kind` as kind_of tells it)."""
    from tokenroof.io.contract import check

    if kind == "bench":  # a bench folder's summary.json, or bench --json (which adds `out` and `warnings`)
        return check("bench" if {"out", "warnings"} <= data.keys() else "bench-summary", data, str(source))
    return check("simulate" if kind == "simulate-sweep" else kind, data, str(source))


def load_json(path: Path) -> Any:
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise TokenroofError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise TokenroofError(f"{path}: JSON nested too deeply") from None


def bench_header(folder: Path) -> dict[str, Any]:
    """The settings in the first line of a bench folder's requests.jsonl (empty when it has none)."""
    try:
        with (folder / "requests.jsonl").open(encoding="utf-8") as f:
            first = json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        return {}
    return first.get("settings", {}) if isinstance(first, dict) and first.get("type") == "header" else {}


def from_bench_folder(folder: Path, data: dict[str, Any]) -> Source:
    source = Source(folder, "bench", data)
    source.data["settings"] = bench_header(folder)
    csv_path = folder / "summary.csv"
    valid = sum(1 for p in data.get("points") or [] if isinstance(p, dict) and not p.get("invalid"))
    if valid < 2:
        source.notes.append(f"{valid} valid level(s) in {folder}: too few for a decode curve (2 or more)")
    elif csv_path.exists():
        try:
            source.table = read_table([csv_path])
        except TokenroofError as exc:
            source.notes.append(f"no decode curve from {csv_path}: {exc}")
    return source


def from_folder(folder: Path) -> Source:
    summary = folder / "summary.json"
    if not summary.exists():
        raise TokenroofError(f"{folder}: a folder without summary.json (expected a bench or simulate --out folder)")
    data = load_json(summary)
    kind = kind_of(data)
    if kind == "bench":
        return from_bench_folder(folder, checked(kind, data, summary))
    if kind == "simulate":
        return Source(folder, kind, checked(kind, data, summary))
    raise TokenroofError(f"{summary}: not a bench or simulate summary")


def from_file(path: Path) -> Source:
    text = read_text(path)
    if text.lstrip().startswith(("{", "[")):
        data = load_json(path)
        contexts = data.get("contexts") if isinstance(data, dict) else None
        each = kind_of(contexts[0]) if isinstance(contexts, list) and contexts else None
        if each in ("roofline", "advise"):  # roofline or advise --context A,B: one answer per context
            assert isinstance(contexts, list)
            first = checked(each, data, path)["contexts"][0]
            note = f"{path.name}: {each} at {len(contexts)} contexts; the report draws the first"
            note += f", {first['context_tokens']:g}" if first.get("context_tokens") is not None else ""
            return Source(path, each, first, notes=[note])
        kind = kind_of(data)
        if kind == "bench":
            return from_bench_folder(path.parent, checked(kind, data, path))
        if kind is not None:
            return Source(path, kind, checked(kind, data, path))
    try:
        table = read_table([path])
    except TokenroofError as exc:
        raise TokenroofError(f"{path}: not {KNOWN} ({exc})") from None
    return Source(path, "table", {}, table)


def one_run_each(path: Path) -> bool:
    """A file holding one benchmark run, which with its siblings makes one table (`vllm bench serve`'s results,
    AIPerf's and GenAI-Perf's exports, LLMPerf's summaries and the requests files beside them), or a folder of them
    (not a bench or simulate folder)."""
    if path.is_dir():
        if (path / "summary.json").exists():
            return False
        try:
            return any(one_run_each(f) for f in resolve_inputs(path))
        except TokenroofError:
            return False
    patterns = (*PROFILE_EXPORTS, LLMPERF_SUMMARIES, f"*{RESPONSES_SUFFIX}")
    return is_vllm_result(path) or any(path.match(pattern) for pattern in patterns)


def recognise(path: Path) -> Source:
    """One input, told by its shape."""
    if path.is_dir():
        return from_folder(path)
    if not path.exists():
        raise TokenroofError(f"{path}: no such file or folder")
    return from_file(path)


def load_sources(paths: Sequence[Path]) -> list[Source]:
    if not paths:
        raise TokenroofError(f"give at least one input: {KNOWN}")
    # vLLM, AIPerf, GenAI-Perf and LLMPerf write one file a run: a sweep's files (or a folder of them) are one table
    paths = [Path(p) for p in paths]
    results = [p for p in paths if one_run_each(p)]
    sources = [recognise(p) for p in paths if p not in results]
    if results:
        sources.insert(0, Source(results[0], "table", {}, read_table(results)))
    return sources
