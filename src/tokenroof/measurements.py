"""MeasurementTable: measured (batch, throughput, TPOT) points, read from CSV, JSON, or other tools' results.

CSV format (DESIGN.md): `batch,throughput_tok_s,tpot_ms[,context_tokens][,ttft_ms]`,
`#` lines are free-text provenance and are kept. At least one of throughput and
TPOT per row; the other is derived (throughput = batch × 1000 / TPOT). Also read:
`vllm bench serve --save-result` JSON files (one per concurrency: pass several)
and GuideLLM JSON reports (one row per benchmark in the sweep).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.stepmodel import mean_context_tokens

COLUMNS = ("batch", "throughput_tok_s", "tpot_ms", "context_tokens", "ttft_ms")
DISAGREE = 0.10  # throughput and TPOT inconsistent by more than this → warning
# What the batch column counts: the server's measured running batch; client concurrency (requests in flight,
# queued ones included, against a server that may cap its running batch); a static batch decoded together.
BATCH_KINDS = ("running", "concurrency", "static")
# What the TPOT column counts: mean time per output token after the first (vLLM's TPOT; excludes queueing);
# inter-token latency; end-to-end time ÷ output tokens (includes prefill and queueing); the decode step time.
TPOT_KINDS = ("tpot", "itl", "e2e", "step")
SETTINGS = {"batch_kind": BATCH_KINDS, "tpot_kind": TPOT_KINDS, "input_len": None, "output_len": None}


@dataclass(frozen=True)
class Semantics:
    """What a table's columns mean, and the workload behind it (None: not stated)."""

    batch_kind: str = "running"
    tpot_kind: str = "tpot"
    input_len: float | None = None
    output_len: float | None = None
    stated: tuple[str, ...] = ()  # the settings the source stated (the rest are defaults)

    @property
    def queues(self) -> bool:
        """Queued requests' waiting shows in TPOT only when it is end-to-end time per token."""
        return self.tpot_kind == "e2e"

    @property
    def mean_context(self) -> float | None:
        if self.input_len is None or self.output_len is None:
            return None
        return mean_context_tokens(self.input_len, self.output_len)

    def describe(self) -> str:
        text = f"batch = {self.batch_kind} batch, TPOT = {self.tpot_kind}"
        if self.input_len is not None and self.output_len is not None:
            text += f", {self.input_len:g} in / {self.output_len:g} out tokens"
        return text


def parse_settings(lines: Iterable[str], where: str) -> Semantics:
    """`key=value` settings in provenance lines (`# batch_kind=static tpot_kind=e2e input_len=1024 ...`)."""
    found: dict[str, Any] = {}
    for line in lines:
        for key, value in re.findall(r"\b(batch_kind|tpot_kind|input_len|output_len)=([^\s,;]+)", line):
            allowed = SETTINGS[key]
            if allowed is not None:
                if value not in allowed:
                    raise TokenroofError(f"{where}: {key}={value} is not known; known: {', '.join(allowed)}")
                found[key] = value
            else:
                number = _number(value, where, key)
                found[key] = number
    return Semantics(**found, stated=tuple(found))


@dataclass(frozen=True)
class Row:
    """One measured point as read, before derivation; `where` names it for messages."""

    batch: float
    throughput_tok_s: float | None
    tpot_ms: float | None
    context_tokens: float | None = None
    ttft_ms: float | None = None
    where: str = ""


@dataclass(frozen=True)
class MeasurementTable:
    """Measured points sorted by batch; TPOT and throughput always both present (one may be derived)."""

    batch: np.ndarray
    tpot_ms: np.ndarray
    throughput_tok_s: np.ndarray
    context_tokens: np.ndarray | None = None
    ttft_ms: np.ndarray | None = None
    provenance: tuple[str, ...] = ()
    source: str = ""
    warnings: tuple[str, ...] = ()
    derived: tuple[str, ...] = field(default_factory=tuple)  # per row: "", "tpot_ms" or "throughput_tok_s"
    semantics: Semantics = field(default_factory=Semantics)

    def __len__(self) -> int:
        return int(self.batch.size)

    def head(self, n: int) -> MeasurementTable:
        """The first `n` points (by batch)."""

        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[:n]

        return MeasurementTable(
            self.batch[:n],
            self.tpot_ms[:n],
            self.throughput_tok_s[:n],
            cut(self.context_tokens),
            cut(self.ttft_ms),
            self.provenance,
            self.source,
            self.warnings,
            self.derived[:n],
            self.semantics,
        )

    def to_csv(self) -> str:
        out = io.StringIO()
        for line in self.provenance:
            out.write(f"# {line}\n")
        cols = ["batch", "throughput_tok_s", "tpot_ms"]
        if self.context_tokens is not None:
            cols.append("context_tokens")
        if self.ttft_ms is not None:
            cols.append("ttft_ms")
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(cols)
        for i in range(len(self)):
            row = [self.batch[i], self.throughput_tok_s[i], self.tpot_ms[i]]
            if self.context_tokens is not None:
                row.append(self.context_tokens[i])
            if self.ttft_ms is not None:
                row.append(self.ttft_ms[i])
            writer.writerow([f"{v:.6g}" for v in row])
        return out.getvalue()

    def to_dict(self) -> dict[str, Any]:
        points = []
        for i in range(len(self)):
            point = {
                "batch": float(self.batch[i]),
                "throughput_tok_s": float(self.throughput_tok_s[i]),
                "tpot_ms": float(self.tpot_ms[i]),
            }
            if self.context_tokens is not None:
                point["context_tokens"] = float(self.context_tokens[i])
            points.append(point)
        return {
            "source": self.source,
            "provenance": list(self.provenance),
            "batch_kind": self.semantics.batch_kind,
            "tpot_kind": self.semantics.tpot_kind,
            "input_len": self.semantics.input_len,
            "output_len": self.semantics.output_len,
            "stated": list(self.semantics.stated),
            "points": points,
        }


# -- building and checking -------------------------------------------------------------
def _number(text: Any, where: str, column: str) -> float | None:
    """A positive finite number from a CSV cell or a JSON value (None when empty); JSON true/false is no number."""
    if text is None or str(text).strip() == "":
        return None
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise TokenroofError(f"{where}: {column} must be a number, got {json.dumps(text)[:40]}")
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        raise TokenroofError(f"{where}: {column} '{str(text)[:40]}' is not a number") from None
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise TokenroofError(f"{where}: {column} must be a positive number, got {text}")
    return value


def _check_duplicates(rows: Sequence[Row], warnings: list[str]) -> list[Row]:
    """Identical duplicates are merged with a warning; conflicting ones are an error naming both rows."""
    kept: dict[float, Row] = {}
    for row in rows:
        first = kept.get(row.batch)
        if first is None:
            kept[row.batch] = row
            continue
        a = first.tpot_ms or first.batch * 1000 / (first.throughput_tok_s or 1)
        b = row.tpot_ms or row.batch * 1000 / (row.throughput_tok_s or 1)
        if abs(a / b - 1) > 0.02:
            raise TokenroofError(
                f"{row.where}: batch {row.batch:g} appears twice with conflicting values "
                f"(also at {first.where}: TPOT {a:.4g} ms vs {b:.4g} ms); keep one"
            )
        warnings.append(f"{row.where}: duplicate of batch {row.batch:g} at {first.where}; kept the first")
    return list(kept.values())


def build_table(
    rows: Sequence[Row], provenance: Iterable[str] = (), source: str = "", semantics: Semantics | None = None
) -> MeasurementTable:
    """Validate rows, derive the missing metric, warn on inconsistency, sort by batch."""
    warnings: list[str] = []
    rows = _check_duplicates(rows, warnings)
    if len(rows) < 2:
        raise TokenroofError(f"{source or 'table'}: need at least 2 measured points, got {len(rows)}")
    rows = sorted(rows, key=lambda r: r.batch)
    tpot, thr, derived = [], [], []
    for row in rows:
        if row.tpot_ms is None and row.throughput_tok_s is None:
            raise TokenroofError(f"{row.where}: needs throughput_tok_s or tpot_ms (both are empty)")
        implied_tpot = row.batch * 1000 / row.throughput_tok_s if row.throughput_tok_s else None
        if row.tpot_ms is not None and implied_tpot is not None:
            gap = row.tpot_ms / implied_tpot - 1
            if abs(gap) > DISAGREE:
                warnings.append(
                    f"{row.where}: throughput {row.throughput_tok_s:g} tok/s and TPOT {row.tpot_ms:g} ms disagree "
                    f"by {gap:+.0%} (batch × 1000 / TPOT = {row.batch * 1000 / row.tpot_ms:.4g} tok/s); online runs "
                    "average TPOT per request and count first tokens in throughput, and a batch that is not the "
                    "running batch (queued or preempted requests) widens the gap; the fit uses TPOT"
                )
        tpot.append(row.tpot_ms if row.tpot_ms is not None else implied_tpot)
        thr.append(row.throughput_tok_s if row.throughput_tok_s is not None else row.batch * 1000 / (row.tpot_ms or 1))
        derived.append("tpot_ms" if row.tpot_ms is None else "throughput_tok_s" if row.throughput_tok_s is None else "")
    ctx = [r.context_tokens for r in rows]
    if any(c is not None for c in ctx) and any(c is None for c in ctx):
        missing = next(r.where for r in rows if r.context_tokens is None)
        raise TokenroofError(f"{missing}: context_tokens is empty here but given elsewhere; give it on every row")
    ttft = [r.ttft_ms for r in rows]
    return MeasurementTable(
        batch=np.array([r.batch for r in rows]),
        tpot_ms=np.array(tpot, dtype=float),
        throughput_tok_s=np.array(thr, dtype=float),
        context_tokens=None if ctx[0] is None else np.array(ctx, dtype=float),
        ttft_ms=None if any(t is None for t in ttft) else np.array(ttft, dtype=float),
        provenance=tuple(provenance),
        source=source,
        warnings=tuple(warnings),
        derived=tuple(derived),
        semantics=semantics or Semantics(),
    )


# -- readers -------------------------------------------------------------------------
def parse_csv(text: str, source: str = "<csv>") -> MeasurementTable:
    """Parse the DESIGN.md CSV; errors name the file, line and column."""
    provenance, body = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            provenance.append(stripped.lstrip("#").strip())
        elif stripped:
            body.append((number, line))
    if not body:
        raise TokenroofError(f"{source}: no header line (expected {','.join(COLUMNS[:3])})")
    header_no, header_line = body[0]
    header = [h.strip() for h in next(csv.reader([header_line]))]
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise TokenroofError(f"{source}:{header_no}: column(s) {', '.join(repeated)} appear more than once")
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise TokenroofError(
            f"{source}:{header_no}: unknown column(s) {', '.join(repr(u) for u in unknown)}; "
            f"known: {', '.join(COLUMNS)}"
        )
    if "batch" not in header or not {"throughput_tok_s", "tpot_ms"} & set(header):
        raise TokenroofError(
            f"{source}:{header_no}: header needs 'batch' and at least one of 'throughput_tok_s', 'tpot_ms'"
        )
    rows = []
    for number, line in body[1:]:
        cells = next(csv.reader([line]))
        where = f"{source}:{number}"
        if len(cells) != len(header):
            raise TokenroofError(f"{where}: {len(cells)} values for {len(header)} columns")
        record = dict(zip(header, cells, strict=True))
        values = {col: _number(record.get(col), where, col) for col in COLUMNS}
        if values["batch"] is None:
            raise TokenroofError(f"{where}: batch is empty")
        rows.append(
            Row(
                values["batch"],
                values["throughput_tok_s"],
                values["tpot_ms"],
                values["context_tokens"],
                values["ttft_ms"],
                where,
            )
        )
    return build_table(rows, provenance, source, parse_settings(provenance, source))


def _dig(data: Mapping[str, Any], *path: str) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _vllm_row(data: Mapping[str, Any], where: str, warnings: list[str]) -> Row:
    """One `vllm bench serve --save-result` file: batch = max_concurrency (an upper bound on the running batch)."""
    concurrency = data.get("max_concurrency")
    if concurrency is None:
        raise TokenroofError(
            f"{where}: vLLM result has no max_concurrency (a request-rate run has no fixed batch); "
            "rerun with --max-concurrency, or give the measured running batch in a CSV"
        )
    warnings.append(
        f"{where}: batch = max_concurrency {concurrency}; the running batch can be lower (ramp-up, drain, server caps)"
    )
    return Row(
        _number(concurrency, where, "max_concurrency") or 0.0,
        _number(data.get("output_throughput"), where, "output_throughput"),
        _number(data.get("mean_tpot_ms"), where, "mean_tpot_ms"),
        None,
        _number(data.get("mean_ttft_ms"), where, "mean_ttft_ms"),
        where,
    )


def _vllm_settings(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """vLLM's TPOT excludes the first token and so any queueing; lengths from the run's token totals."""
    settings: dict[str, Any] = {"batch_kind": "concurrency", "tpot_kind": "tpot"}
    done = _number(data.get("completed"), where, "completed")
    for key, total in (("input_len", "total_input_tokens"), ("output_len", "total_output_tokens")):
        value = _number(data.get(total), where, total)
        if done and value:
            settings[key] = value / done
    return settings


def _guidellm_settings(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"batch_kind": "concurrency", "tpot_kind": "itl"}
    for key, metric in (("input_len", "prompt_token_count"), ("output_len", "output_token_count")):
        values = [
            _number(_dig(bench.get("metrics", {}), metric, "successful", "mean"), f"{where} benchmark {i}", metric)
            for i, bench in enumerate(data["benchmarks"])
            if isinstance(bench, Mapping)
        ]
        given = [v for v in values if v is not None]
        if given:
            settings[key] = float(np.mean(given))
    return settings


def merge_settings(parts: Sequence[tuple[str, Mapping[str, Any]]], provenance: Sequence[str]) -> Semantics:
    """One table's semantics from several files: kinds must agree, lengths are averaged."""
    merged: dict[str, Any] = {}
    for where, part in parts:
        for key in ("batch_kind", "tpot_kind"):
            if key in part and merged.setdefault(key, (part[key], where))[0] != part[key]:
                raise TokenroofError(
                    f"{where}: {key} {part[key]} differs from {merged[key][0]} in {merged[key][1]}; "
                    "give files of one kind"
                )
    values: dict[str, Any] = {key: value for key, (value, _) in merged.items()}
    for key in ("input_len", "output_len"):
        given = [part[key] for _, part in parts if part.get(key) is not None]
        if given:
            values[key] = float(np.mean(given))
    stated = parse_settings(provenance, "provenance")
    for key in stated.stated:
        values.setdefault(key, getattr(stated, key))
    return Semantics(**values, stated=tuple(values))


def _guidellm_rows(data: Mapping[str, Any], where: str) -> list[Row]:
    """GuideLLM report: batch = measured mean request concurrency; TPOT = inter_token_latency_ms (excludes the
    first token, like vLLM's TPOT; GuideLLM's own time_per_output_token_ms includes it)."""
    rows = []
    for i, bench in enumerate(data["benchmarks"]):
        here = f"{where} benchmark {i}"
        if not isinstance(bench, Mapping):
            raise TokenroofError(f"{here}: expected an object, got {type(bench).__name__}")
        metrics = bench.get("metrics", {})
        concurrency = _dig(metrics, "request_concurrency", "successful", "mean")
        if concurrency is None:
            concurrency = _dig(bench, "args", "strategy", "streams") or _dig(bench, "config", "strategy", "streams")
        if concurrency is None:
            raise TokenroofError(f"{here}: no request_concurrency metric and no concurrent strategy")
        rows.append(
            Row(
                _number(concurrency, here, "request_concurrency") or 0.0,
                _number(
                    _dig(metrics, "output_tokens_per_second", "successful", "mean"), here, "output_tokens_per_second"
                ),
                _number(_dig(metrics, "inter_token_latency_ms", "successful", "mean"), here, "inter_token_latency_ms"),
                None,
                _number(_dig(metrics, "time_to_first_token_ms", "successful", "mean"), here, "time_to_first_token_ms"),
                here,
            )
        )
    return rows


def _json_rows(data: Any, where: str, warnings: list[str]) -> tuple[list[Row], list[str], dict[str, Any]]:
    if isinstance(data, Mapping) and isinstance(data.get("benchmarks"), list):
        return _guidellm_rows(data, where), [f"GuideLLM report {where}"], _guidellm_settings(data, where)
    if isinstance(data, Mapping) and "output_throughput" in data:
        return [_vllm_row(data, where, warnings)], [f"vllm bench serve result {where}"], _vllm_settings(data, where)
    points = data.get("points") if isinstance(data, Mapping) else data
    if not isinstance(points, list):
        raise TokenroofError(
            f"{where}: unrecognised JSON (expected tokenroof points, a vllm bench serve result or a GuideLLM report)"
        )
    rows = []
    for i, point in enumerate(points):
        here = f"{where} point {i}"
        if not isinstance(point, Mapping):
            raise TokenroofError(f"{here}: expected an object")
        unknown = [k for k in point if k not in COLUMNS]
        if unknown:
            raise TokenroofError(f"{here}: unknown key(s) {', '.join(unknown)}; known: {', '.join(COLUMNS)}")
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
                    raise TokenroofError(f"{where}: {key} must be a number of tokens, got {value!r}")
                settings[key] = _number(str(value), where, key)
            elif value not in allowed:
                raise TokenroofError(f"{where}: {key}={value} is not known; known: {', '.join(allowed)}")
    return rows, provenance, settings


def read_text(path: Path) -> str:
    """A file's text: UTF-8, a leading byte-order mark (Excel) dropped; anything else is named, not a traceback."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenroofError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TokenroofError(
            f"{path}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; an unreadable file or a bad line names itself."""
    lines = read_text(path).splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise TokenroofError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise TokenroofError(f"{path}:{number}: JSON nested too deeply") from None
    return rows


def read_table(paths: Sequence[Path | str]) -> MeasurementTable:
    """Read one CSV, or one or more JSON files (tokenroof, vLLM bench serve, GuideLLM) into one table."""
    files = [Path(p) for p in paths]
    if not files:
        raise TokenroofError("no measurement file given")
    texts = [read_text(path) for path in files]
    if len(files) == 1 and not texts[0].lstrip().startswith(("{", "[")):
        return parse_csv(texts[0], str(files[0]))
    rows: list[Row] = []
    provenance: list[str] = []
    warnings: list[str] = []
    parts: list[tuple[str, dict[str, Any]]] = []
    for path, text in zip(files, texts, strict=True):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TokenroofError(
                f"{path}: not valid JSON (line {exc.lineno}: {exc.msg}); CSV files are read one at a time"
            ) from None
        except RecursionError:
            raise TokenroofError(f"{path}: JSON nested too deeply") from None
        new_rows, new_prov, settings = _json_rows(data, str(path), warnings)
        rows += new_rows
        provenance += new_prov
        parts.append((str(path), settings))
    table = build_table(rows, provenance, ", ".join(str(p) for p in files), merge_settings(parts, provenance))
    return MeasurementTable(
        table.batch,
        table.tpot_ms,
        table.throughput_tok_s,
        table.context_tokens,
        table.ttft_ms,
        table.provenance,
        table.source,
        tuple(warnings) + table.warnings,
        table.derived,
        table.semantics,
    )
