"""Reading measurements: any file or folder of them into one MeasurementTable (io/table.py), by format: CSV
(csvread.py), vLLM (vllm.py), GuideLLM (guidellm.py), SGLang's bench_serving (sglang.py), AIPerf and GenAI-Perf
(genaiperf.py), LLMPerf (llmperf.py), tokenroof bench (benchfiles.py).

CSV format (DESIGN.md): `batch,throughput_tok_s,tpot_ms[,context_tokens][,ttft_ms][,requests][,concurrency][,sent]`,
`#` lines are free-text provenance and are kept. At least one of throughput and TPOT per row; the other is derived
(throughput = batch × 1000 / TPOT). Also read: `vllm bench serve --save-result` JSON files (one a run, at a
concurrency or a rate: pass several), GuideLLM JSON reports (one row per benchmark in the sweep), AIPerf and
GenAI-Perf exports (one a run), LLMPerf summaries (one a run, its requests file beside it), tokenroof bench folders,
and JSON Lines of results, a line a run (SGLang's bench_serving, `vllm bench serve --append-result`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.io import llmperf
from tokenroof.io.benchfiles import _bench_summary, _is_bench_summary, read_jsonl
from tokenroof.io.csvread import parse_csv
from tokenroof.io.genaiperf import genai_perf_run, is_genai_perf_export, tool_of
from tokenroof.io.guidellm import _guidellm_rows, _guidellm_settings
from tokenroof.io.sglang import is_sglang_result, sglang_run
from tokenroof.io.table import (
    CLIENT_KINDS,
    CLOSED_CLIENT_KINDS,
    COLUMNS,
    CONTEXT_LEVEL_RATIO,
    SETTINGS,
    MeasurementTable,
    Row,
    Semantics,
    _number,
    _shown,
    _table_rows,
    as_decode_only,
    build_table,
    loads_json,
    merge_settings,
    pooled,
)
from tokenroof.io.vllm import is_vllm_result, vllm_run
from tokenroof.model.stepmodel import mean_context_tokens
from tokenroof.specs.validate import read_text


def _json_rows(data: Any, where: str, warnings: list[str]) -> tuple[list[Row], list[str], dict[str, Any]]:
    if isinstance(data, Mapping) and isinstance(data.get("benchmarks"), list):
        return _guidellm_rows(data, where, warnings), [f"GuideLLM report {where}"], _guidellm_settings(data, where)
    if isinstance(data, Mapping) and "output_throughput" in data:
        row, read = vllm_run(data, where, warnings)
        return [] if row is None else [row], [f"vllm bench serve result {where}"], read
    points = data.get("points") if isinstance(data, Mapping) else data
    if not isinstance(points, list):
        raise TokenroofError(
            f"{where}: unrecognised JSON (expected tokenroof points, a vllm bench serve result, a GuideLLM report, an "
            "AIPerf or GenAI-Perf profile export, or an LLMPerf summary)"
        )
    rows = []
    for i, point in enumerate(points):
        here = f"{where} point {i}"
        if not isinstance(point, Mapping):
            raise TokenroofError(f"{here}: expected an object")
        unknown = [k for k in point if k not in COLUMNS]
        if unknown:
            shown = ", ".join(repr(key[:40]) for key in unknown[:5])
            raise TokenroofError(f"{here}: unknown key(s) {shown}; known: {', '.join(COLUMNS)}")
        values = {col: _number(point.get(col), here, col) for col in COLUMNS}
        if values["batch"] is None:
            raise TokenroofError(f"{here}: batch is missing")
        rows.append(
            Row(
                values["batch"],
                values["throughput_tok_s"],
                values["tpot_ms"],
                values["context_tokens"],
                values["ttft_ms"],
                here,
                values["requests"],
                values["concurrency"],
                values["sent"],
            )
        )
    provenance = data.get("provenance", []) if isinstance(data, Mapping) else []
    if not isinstance(provenance, list) or not all(isinstance(line, str) for line in provenance):
        raise TokenroofError(f"{where}: provenance must be a list of strings")
    settings: dict[str, Any] = {}
    if isinstance(data, Mapping):
        for key in SETTINGS:
            if data.get(key) is not None:
                settings[key] = data[key]
        for key, value in settings.items():
            allowed = SETTINGS[key]
            if allowed is None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise TokenroofError(f"{where}: {key} must be a number, got {_shown(value)}")
                settings[key] = _number(str(value), where, key)
            elif value not in allowed:
                raise TokenroofError(f"{where}: {key}={_shown(value)} is not known; known: {', '.join(allowed)}")
    return rows, provenance, settings


@dataclass(frozen=True)
class RunReader:
    """A tool whose files hold one run a document (a file, or a JSON Lines line): how to tell its documents, read one
    into its row (None: left out, with a warning) and its settings, and name it."""

    tool: str
    recognises: Callable[[Any], bool]
    read: Callable[[Mapping[str, Any], str, list[str]], tuple[Row | None, dict[str, Any]]]
    label: Callable[[Mapping[str, Any]], str]
    reading: str = ""  # how its figures were read where not as they stand: said once for a table holding its runs


RUN_READERS = (
    RunReader("AIPerf/GenAI-Perf", is_genai_perf_export, genai_perf_run, lambda d: f"{tool_of(d)} export"),
    RunReader("SGLang", is_sglang_result, sglang_run, lambda d: "sglang.bench_serving result"),
    RunReader("LLMPerf", llmperf.is_llmperf_summary, llmperf.llmperf_run, llmperf.label, llmperf.READING),
)


def is_json(path: Path, text: str) -> bool:
    """A JSON or JSON Lines file (a `.jsonl` always, even empty), not a CSV."""
    return path.suffix.lower() == ".jsonl" or text.lstrip().startswith(("{", "["))


def json_documents(text: str, where: str) -> list[tuple[str, Any]]:
    """A JSON file's document, or a JSON Lines file's, one a line and each named `path:N`: `sglang.bench_serving
    --output-file` appends a line a run, and so does `vllm bench serve --append-result`."""
    if not text.strip():
        raise TokenroofError(f"{where}: no JSON in the file (it is empty)")
    try:
        return [(where, json.loads(text))]
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":  # not a second document after the first: loads_json's error, naming the line
            return [(where, loads_json(text, where, whole_file=True))]
    except (ValueError, RecursionError):  # an over-long integer, nesting too deep: loads_json's error
        return [(where, loads_json(text, where, whole_file=True))]
    # JSON Lines end lines with \n alone (str.splitlines would also split at form feeds and U+2028 inside strings)
    lines = [(f"{where}:{n}", line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not lines:
        raise TokenroofError(f"{where}: no JSON in the file")
    documents = []
    for i, (here, line) in enumerate(lines):
        try:
            documents.append((here, json.loads(line)))
        except (ValueError, RecursionError):
            if i == 0:  # the first line is no document of its own: not JSON Lines, but several documents at once
                raise TokenroofError(
                    f"{where}: several JSON documents one after another, not one a line (JSON Lines) nor one in all"
                ) from None
            loads_json(line, here)  # raises, naming the line and why
    return documents


# the aggregate exports AIPerf and GenAI-Perf write in each run's folder (beside inputs.json and per-request
# records, which are not results); `--profile-export-file NAME` makes them NAME_aiperf.json, NAME_genai_perf.json
PROFILE_EXPORTS = ("*_aiperf.json", "*_genai_perf.json")
# LLMPerf's summaries (`--results-dir D`: D/{model}_{in}_{out}_summary.json; a concurrency sweep, a folder a run, since
# the name does not hold the concurrency)
LLMPERF_SUMMARIES = "*_summary.json"
RUN_RECORDS = {"inputs.json", "profile_export.jsonl"}  # what else a run's folder holds: its prompts, each request


def resolve_inputs(path: Path) -> list[Path]:
    """A measurement input as files: a bench folder (`tokenroof bench --out`) is its summary.csv (else its
    summary.json); an AIPerf or GenAI-Perf run's folder its aggregate export; another folder its JSON and JSON Lines
    files (one `vllm bench serve --save-result` file per concurrency, say), or where it has none, the exports below
    it (AIPerf's `artifacts/`, a folder a run)."""
    if not path.is_dir():
        return [path]
    for name in ("summary.csv", "summary.json"):
        if (path / name).is_file():
            return [path / name]
    here = sorted({f for pattern in PROFILE_EXPORTS for f in path.glob(pattern) if f.is_file()})
    if here:  # one run's folder: its export, not the inputs and per-request records beside it
        return here
    found = sorted(f for f in [*path.glob("*.json"), *path.glob("*.jsonl")] if f.is_file())
    digests = bool(found) and all(f.match(llmperf.DIGESTS) for f in found)
    if digests:  # scripts/benchmark.py's: the runs are below
        found = []
    if found and {f.name for f in found} <= RUN_RECORDS:
        raise TokenroofError(
            f"{path}: an AIPerf or GenAI-Perf run's folder without its aggregate export (profile_export_aiperf.json "
            "or profile_export_genai_perf.json): inputs.json and the per-request records are not results"
        )
    if found:
        return found
    below = sorted({f for pattern in PROFILE_EXPORTS for f in path.rglob(pattern) if f.is_file()})
    if below:  # their artifacts/ folder: a folder a run
        return below
    below = sorted(f for f in path.rglob(LLMPERF_SUMMARIES) if f.is_file())
    if below:  # LLMPerf's results folders, one a concurrency; a requests file without its summary is named, not dropped
        summaries = set(below)
        requests = path.rglob(f"*{llmperf.RESPONSES_SUFFIX}")
        return sorted([*below, *(f for f in requests if f.is_file() and llmperf.summary_path(f) not in summaries)])
    if digests:
        raise TokenroofError(
            f"{path}: only digests LLMPerf's scripts/benchmark.py writes (percentiles only, no means): give the "
            "result_* folders beside them (their _summary.json files)"
        )
    raise TokenroofError(
        f"{path}: a folder without summary.csv, summary.json or JSON result files (expected a tokenroof bench "
        "--out folder, or a folder of vllm bench serve, sglang.bench_serving, AIPerf, GenAI-Perf or LLMPerf results)"
    )


def describe_sources(files: Sequence[Path]) -> str:
    """Where a table came from, short enough for a message: one or two names, or the first and how many more."""
    names = [str(f) for f in files]
    return ", ".join(names) if len(names) <= 2 else f"{names[0]} and {len(names) - 1} more"


def one_context_two_workloads(parts: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Files whose lengths make one mean context but not one workload (1,024 in / 256 out beside 128 in / 2,048 out):
    the fit takes them as one curve and the replay their mean lengths, which none of them measured."""
    stated = [
        (where, s["input_len"], s["output_len"]) for where, s in parts if s.get("input_len") and s.get("output_len")
    ]
    for i, (a, in_a, out_a) in enumerate(stated):
        for b, in_b, out_b in stated[i + 1 :]:
            same = (
                abs(mean_context_tokens(in_a, out_a) / mean_context_tokens(in_b, out_b) - 1) < CONTEXT_LEVEL_RATIO - 1
            )
            if same and max(in_a, in_b) > OTHER_WORKLOAD * min(in_a, in_b):
                return [
                    f"{a} ({in_a:g} in / {out_a:g} out) and {b} ({in_b:g} in / {out_b:g} out) share a context but not "
                    "a workload: the fit takes them as one curve and the replay their mean lengths, which neither "
                    "measured; give each workload's files apart"
                ]
    return []


OTHER_WORKLOAD = 1.25  # prompts this many times longer at one context: another workload, not a run's spread


def read_table(paths: Sequence[Path | str]) -> MeasurementTable:
    """Read measurements into one table: CSV files (DESIGN.md), JSON (tokenroof points, `vllm bench serve` results,
    GuideLLM reports, AIPerf and GenAI-Perf exports, tokenroof bench's summary.json), JSON Lines of results (SGLang's
    bench_serving, vLLM's --append-result) and bench folders; several inputs are one table, their
    settings merged (the kinds must agree)."""
    given = [f for p in paths for f in resolve_inputs(Path(p))]
    if not given:
        raise TokenroofError("no measurement file given")
    # a file given twice (a folder and a file in it, or the same folder twice) is read once: twice, it had counted as
    # a repeated run and narrowed the intervals
    first: dict[Path, Path] = {}
    for f in given:
        first.setdefault(f.resolve(), f)
    files = list(first.values())
    once = (
        [] if len(files) == len(given) else [f"{len(given) - len(files)} file(s) given more than once: each read once"]
    )
    read_with_summary = llmperf.summaries_beside(files)  # LLMPerf's requests files: each read with its summary
    files = [f for f in files if f not in read_with_summary]
    texts = [read_text(path) for path in files]
    if len(files) == 1 and not is_json(files[0], texts[0]):
        table = parse_csv(texts[0], str(files[0]))
        return replace(table, warnings=(*once, *table.warnings))
    rows: list[Row] = []
    provenance: list[str] = []
    warnings: list[str] = []
    parts: list[tuple[str, dict[str, Any]]] = []
    vllm = 0  # rows from vLLM results: their batch is the client's concurrency, their context from token totals
    closed_loops = dict.fromkeys((r.tool for r in RUN_READERS), 0)  # ... and from the other tools' closed-loop runs
    readings = {}  # how each tool's figures were read, where not as they stand
    models: dict[str, str] = {}  # each model a result names, and the first result that names it
    for path, text in zip(files, texts, strict=True):
        if not is_json(path, text):
            table = parse_csv(text, str(path))
            rows += _table_rows(table)
            provenance += table.provenance
            warnings += table.warnings
            parts.append((str(path), {key: getattr(table.semantics, key) for key in table.semantics.stated}))
            continue
        for where, data in json_documents(text, str(path)):
            model = data.get("model_id") if isinstance(data, Mapping) else None
            if isinstance(model, str) and model:  # vLLM's and SGLang's results name the model they measured
                models.setdefault(model, where)
            reader = next((r for r in RUN_READERS if r.recognises(data)), None)
            if reader is not None:  # one run a document: AIPerf's and GenAI-Perf's exports, SGLang's lines
                row, settings = reader.read(data, where, warnings)
                rows += [] if row is None else [row]
                closed_loops[reader.tool] += row is not None and settings["client"] in ("burst", "waves")
                if reader.reading:
                    readings[reader.tool] = reader.reading
                provenance.append(f"{reader.label(data)} {where}")
                parts.append((where, settings))
                continue
            if llmperf.is_llmperf_responses(data):
                raise TokenroofError(
                    f"{where}: an LLMPerf run's requests ({llmperf.RESPONSES_SUFFIX}) given without its summary: pass "
                    "the run's folder, or its _summary.json (the requests file beside it is read with it)"
                )
            if llmperf.is_llmperf_digest(data):
                raise TokenroofError(
                    f"{where}: a digest LLMPerf's scripts/benchmark.py writes (percentiles only, no means): give the "
                    "result_* folders beside it (their _summary.json files)"
                )
            if where != str(path) and not (isinstance(data, Mapping) and "output_throughput" in data):
                raise TokenroofError(
                    f"{where}: a JSON Lines file whose lines are not benchmark results (expected one "
                    "sglang.bench_serving --output-file or vllm bench serve --append-result result a line)"
                )
            if _is_bench_summary(data):
                new_rows, settings = _bench_summary(data, where, warnings)
                new_prov = [f"tokenroof bench summary {where}"]
            else:
                new_rows, new_prov, settings = _json_rows(data, where, warnings)
            if isinstance(data, Mapping) and "output_throughput" in data and settings.get("client") == "burst":
                vllm += len(new_rows)  # a closed loop at its max_concurrency (a rate's batch is what it held)
            rows += new_rows
            provenance += new_prov
            parts.append((where, settings))
    if len(models) > 1:
        (named, at), (other, there) = list(models.items())[:2]
        raise TokenroofError(
            f"{there}: model_id {other} differs from {named} in {at}: results of two models are two tables (give "
            "each model's files apart)"
        )
    warnings += one_context_two_workloads(parts)
    for tool, reading in readings.items():
        warnings.insert(0, f"{tool}: {reading}")
    for tool, count in closed_loops.items():
        if count:
            warnings.insert(
                0,
                f"{count} {tool} run(s) at a fixed concurrency: batch = the concurrency, the client's; the running "
                "batch can be lower (ramp-up, drain, server caps)",
            )
    if vllm:
        warnings.insert(
            0,
            f"{vllm} vLLM result(s): batch = max_concurrency, the client's; the running batch can be lower (ramp-up, "
            "drain, server caps)",
        )
    if vllm and len({row.context_tokens is None for row in rows}) > 1:
        # a vLLM result without token totals has no context: then none of them speaks for its context
        rows = [replace(row, context_tokens=None) for row in rows] if vllm == len(rows) else rows
    left_out = [w for w in warnings if ": left out: " in w]
    if len(rows) < 2 and left_out:  # the reasons, not a bare count of the points that are left
        raise TokenroofError(
            f"{describe_sources(files)}: need at least 2 measured points, got {len(rows)}; "
            + "; ".join(left_out[:3])
            + (f"; and {len(left_out) - 3} more left out" if len(left_out) > 3 else "")
        )
    table = build_table(rows, provenance, describe_sources(files), merge_settings(parts, provenance))
    return replace(table, warnings=(*once, *warnings, *table.warnings))


# the front door: what the rest of tokenroof (and its users) read tables through
__all__ = [
    "CLIENT_KINDS",
    "CLOSED_CLIENT_KINDS",
    "COLUMNS",
    "CONTEXT_LEVEL_RATIO",
    "MeasurementTable",
    "Row",
    "Semantics",
    "as_decode_only",
    "build_table",
    "describe_sources",
    "is_vllm_result",
    "parse_csv",
    "pooled",
    "read_jsonl",
    "read_table",
    "resolve_inputs",
]
