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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.model.stepmodel import mean_context_tokens
from tokenroof.specs.validate import read_text

# `requests`: how many requests a point's means are taken over from the start of its run, ramp-up included (as vLLM
# reports them); absent: a steady-state window (tokenroof bench; a rate point's window). `concurrency`: the
# closed-loop client's concurrency where the batch column is the server's running batch or a measured mean
# (tokenroof bench, GuideLLM's synchronous and concurrent points; empty for open-loop points)
COLUMNS = ("batch", "throughput_tok_s", "tpot_ms", "context_tokens", "ttft_ms", "requests", "concurrency")
DISAGREE = 0.10  # throughput and TPOT inconsistent by more than this → warning
# rows at one batch are repeated runs of it, pooled, unless their TPOTs scatter more than this (rms of log TPOT):
# that is two servers or workloads in one table
CONFLICT_SCATTER = 0.2
# contexts apart by less than this ratio are one level (a measured mean context moves a little from run to run);
# a table whose contexts fall into several levels is several curves, one per level, its points keyed (batch, level)
CONTEXT_LEVEL_RATIO = 1.1
MAX_ROW_WARNINGS = 10  # warnings of one kind named row by row; the rest are counted
# every number a table holds lies in here (batch × 1000 / throughput and the like stay normal floats)
PLAUSIBLE = (1e-9, 1e12)
SENTINEL = -7.25  # stands in for an empty cell while numpy parses (no valid cell is negative)
# What the batch column counts: the server's measured running batch; client concurrency (requests in flight,
# queued ones included, against a server that may cap its running batch); a static batch decoded together.
BATCH_KINDS = ("running", "concurrency", "static")
# What the TPOT column counts: mean time per output token after the first (vLLM's TPOT; excludes queueing);
# inter-token latency; end-to-end time ÷ output tokens (includes prefill and queueing); the decode step time.
TPOT_KINDS = ("tpot", "itl", "e2e", "step")
# How the measuring client drove the server: a closed loop whose streams all start at once (`vllm bench serve
# --max-concurrency`, GuideLLM's concurrent and throughput strategies), a closed loop whose streams start staggered
# over a request's life (tokenroof bench), or open-loop arrivals at a request rate (Poisson or evenly spaced).
CLIENT_KINDS = ("burst", "staggered", "poisson", "constant")
SETTINGS = {
    "batch_kind": BATCH_KINDS,
    "tpot_kind": TPOT_KINDS,
    "client": CLIENT_KINDS,
    "input_len": None,
    "output_len": None,
}


@dataclass(frozen=True)
class Semantics:
    """What a table's columns mean, and the workload behind it (None: not stated)."""

    batch_kind: str = "running"
    tpot_kind: str = "tpot"
    client: str | None = None  # CLIENT_KINDS; None: not stated
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


def as_decode_only(table: MeasurementTable) -> MeasurementTable:
    """The table as `--decode-only` states it: its TPOT is the time of pure decode steps (tpot_kind step)."""
    sem = table.semantics
    stated = tuple(dict.fromkeys((*sem.stated, "tpot_kind")))
    return replace(table, semantics=replace(sem, tpot_kind="step", stated=stated))


def parse_settings(lines: Iterable[str], where: str) -> Semantics:
    """`key=value` settings in provenance lines (`# batch_kind=static tpot_kind=e2e input_len=1024 ...`)."""
    found: dict[str, Any] = {}
    for line in lines:
        for key, value in re.findall(r"\b(batch_kind|tpot_kind|client|input_len|output_len)=([^\s,;]+)", line):
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
    requests: float | None = None
    concurrency: float | None = None


@dataclass(frozen=True)
class MeasurementTable:
    """Measured points sorted by batch, one per distinct batch; TPOT and throughput always both present (one may
    be derived). Rows repeated at one batch are pooled into its point: TPOT and throughput their geometric means
    (the fit is in log space), context and TTFT their means, `count` the rows and `tpot_log_ss` their scatter."""

    batch: np.ndarray
    tpot_ms: np.ndarray
    throughput_tok_s: np.ndarray
    context_tokens: np.ndarray | None = None
    ttft_ms: np.ndarray | None = None
    requests: np.ndarray | None = None  # per point: the requests its means were taken over, whole run (None: a window)
    concurrency: np.ndarray | None = None  # per point: the closed-loop client's concurrency (NaN: open loop or unknown)
    provenance: tuple[str, ...] = ()
    source: str = ""
    warnings: tuple[str, ...] = ()
    derived: tuple[str, ...] = field(default_factory=tuple)  # per point: "", "tpot_ms" or "throughput_tok_s"
    semantics: Semantics = field(default_factory=Semantics)
    count: np.ndarray | None = None  # rows pooled into each point (None: one each)
    tpot_log_ss: np.ndarray | None = None  # per point: the sum over its rows of log(row TPOT / point TPOT)²

    def __len__(self) -> int:
        return int(self.batch.size)

    @property
    def levels(self) -> np.ndarray:
        """Each point's context level (`context_levels`): all 0 without a context column or with one context."""
        return (
            np.zeros(len(self), dtype=np.int64) if self.context_tokens is None else context_levels(self.context_tokens)
        )

    @property
    def several_contexts(self) -> bool:
        """Whether the table holds curves at more than one context (levels apart by more than CONTEXT_LEVEL_RATIO)."""
        return bool(self.levels.max(initial=0) > 0)

    def level_contexts(self) -> list[float]:
        """The mean context of each level, in level order (empty without a context column)."""
        if self.context_tokens is None:
            return []
        levels = self.levels
        return [float(self.context_tokens[levels == k].mean()) for k in range(int(levels.max()) + 1)]

    def subset(self, keep: np.ndarray) -> MeasurementTable:
        """The points `keep` selects: a boolean mask (in point order), or indices (in their order)."""
        index = np.flatnonzero(keep) if keep.dtype == bool else keep

        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[index]

        derived: tuple[str, ...] = ()
        if len(self.derived) == len(self) and len(index):
            first = self.derived[0]
            same = self.derived.count(first) == len(self.derived)  # the usual case, at C speed
            derived = (first,) * len(index) if same else tuple(self.derived[i] for i in index.tolist())
        return replace(
            self,
            batch=self.batch[index],
            tpot_ms=self.tpot_ms[index],
            throughput_tok_s=self.throughput_tok_s[index],
            context_tokens=cut(self.context_tokens),
            ttft_ms=cut(self.ttft_ms),
            requests=cut(self.requests),
            concurrency=cut(self.concurrency),
            derived=derived,
            count=cut(self.count),
            tpot_log_ss=cut(self.tpot_log_ss),
        )

    @property
    def counts(self) -> np.ndarray:
        """Rows behind each point (float, for weights)."""
        return np.ones(len(self)) if self.count is None else self.count.astype(float)

    @property
    def log_ss(self) -> np.ndarray:
        """Within-point scatter of log TPOT, per point (zeros when no batch repeats)."""
        return np.zeros(len(self)) if self.tpot_log_ss is None else self.tpot_log_ss

    def head(self, n: int) -> MeasurementTable:
        """The first `n` points (by batch)."""
        return self.subset(np.arange(len(self)) < n)

    def to_csv(self) -> str:
        """The points as the DESIGN.md CSV: one row per point (rows pooled at a batch are written once)."""
        from tokenroof.io.csvio import write_rows

        columns = {"batch": self.batch, "throughput_tok_s": self.throughput_tok_s, "tpot_ms": self.tpot_ms}
        if self.context_tokens is not None:
            columns["context_tokens"] = self.context_tokens
        if self.ttft_ms is not None:
            columns["ttft_ms"] = self.ttft_ms
        if self.requests is not None:
            columns["requests"] = self.requests
        if self.concurrency is not None:
            columns["concurrency"] = self.concurrency
        out = io.StringIO()
        write_rows(out, self.provenance, list(columns), zip(*columns.values(), strict=True))
        return out.getvalue()

    def to_dict(self, max_points: int | None = None) -> dict[str, Any]:
        """The table as --json writes it. Past `max_points` points, the points are the bins the fit sees (`pooled`:
        means per bin of equal width in log batch) and `points_pooled_from` says how many there were: a JSON of a
        million measured rows helps no reader (it took longer and more memory than the fit)."""
        if max_points is not None and len(self) > max_points:
            shown = pooled(self, max_points)[0].to_dict()
            return {**shown, "points_pooled_from": len(self)}
        batch, thr, tpot = (a.astype(float).tolist() for a in (self.batch, self.throughput_tok_s, self.tpot_ms))
        points = [{"batch": b, "throughput_tok_s": r, "tpot_ms": t} for b, r, t in zip(batch, thr, tpot, strict=True)]
        extra = {
            "context_tokens": self.context_tokens,
            "ttft_ms": self.ttft_ms,
            "requests": self.requests,
            "concurrency": self.concurrency,
            "count": self.count,
        }
        for name, values in extra.items():
            if values is not None:
                for point, value in zip(points, values.tolist(), strict=True):
                    point[name] = None if isinstance(value, float) and math.isnan(value) else value
        return {
            "source": self.source,
            "provenance": list(self.provenance),
            "batch_kind": self.semantics.batch_kind,
            "tpot_kind": self.semantics.tpot_kind,
            "client": self.semantics.client,
            "input_len": self.semantics.input_len,
            "output_len": self.semantics.output_len,
            "stated": list(self.semantics.stated),
            "points": points,
            "points_pooled_from": None,
        }


# -- building and checking -------------------------------------------------------------
def _shown(value: Any) -> str:
    """A JSON value as a message shows it: short, and never an exception of its own."""
    try:
        return json.dumps(value)[:40]
    except (ValueError, TypeError, RecursionError):
        return type(value).__name__


def _clip(text: Any) -> str:
    """A cell or value as a message quotes it: 40 characters at most, on one line."""
    return repr(str(text)[:40])[1:-1]


def _number(text: Any, where: str, column: str) -> float | None:
    """A positive finite number from a CSV cell or a JSON value (None when empty); JSON true/false is no number."""
    if text is None or (isinstance(text, str) and text.strip() == ""):
        return None
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise TokenroofError(f"{where}: {column} must be a number, got {_shown(text)}")
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        raise TokenroofError(f"{where}: {column} '{_clip(text)}' is not a number") from None
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise TokenroofError(f"{where}: {column} must be a positive number, got {_clip(text)}")
    if not PLAUSIBLE[0] <= value <= PLAUSIBLE[1]:
        raise TokenroofError(
            f"{where}: {column} {_clip(text)} is outside any plausible measurement "
            f"({PLAUSIBLE[0]:g} to {PLAUSIBLE[1]:g}; TPOT and TTFT in ms, throughput in tok/s): a unit slip or a typo"
        )
    return value


def _batch(value: Any, where: str, column: str) -> float:
    """The batch of a JSON result: a positive number, never empty."""
    batch = _number(value, where, column)
    if batch is None:
        raise TokenroofError(f"{where}: {column} is empty")
    return batch


@dataclass(frozen=True)
class Columns:
    """Rows as read, in file order: one array per column of COLUMNS (NaN where the cell is empty), and how to
    name row i in a message."""

    values: dict[str, np.ndarray]
    where: Callable[[int], str]

    @classmethod
    def from_rows(cls, rows: Sequence[Row]) -> Columns:
        def column(name: str) -> np.ndarray:
            cells = [getattr(row, name) for row in rows]
            return np.array([math.nan if v is None else v for v in cells], dtype=float)

        return cls({name: column(name) for name in COLUMNS}, lambda i: rows[i].where)


def build_table(
    rows: Sequence[Row], provenance: Iterable[str] = (), source: str = "", semantics: Semantics | None = None
) -> MeasurementTable:
    """Validate rows, derive the missing metric, warn on inconsistency, pool repeated batches, sort by batch."""
    return table_from_columns(Columns.from_rows(rows), provenance, source, semantics)


def table_from_columns(
    columns: Columns, provenance: Iterable[str] = (), source: str = "", semantics: Semantics | None = None
) -> MeasurementTable:
    """`build_table` on whole columns: every check and derivation vectorised, rows named only in messages."""
    batch = columns.values["batch"]
    if batch.size < 2:
        raise TokenroofError(f"{source or 'table'}: need at least 2 measured points, got {batch.size}")
    ctx_in = columns.values["context_tokens"]
    if np.isnan(ctx_in).any() and not np.isnan(ctx_in).all():
        raise TokenroofError(
            f"{columns.where(int(np.argmax(np.isnan(ctx_in))))}: context_tokens is empty here but given elsewhere; "
            "give it on every row"
        )
    level_in = np.zeros(batch.size, dtype=np.int64) if np.isnan(ctx_in).all() else context_levels(ctx_in)
    if level_in.max() > 0:  # several contexts: points keyed (batch, context level), in batch order
        order: np.ndarray | None = np.lexsort((level_in, batch))
    else:
        order = None if (batch[1:] >= batch[:-1]).all() else np.argsort(batch, kind="stable")
    col = columns.values
    if order is not None:  # an all-empty column (absent from the file) needs no reordering
        col = {name: v if np.isnan(v).all() else v[order] for name, v in col.items()}
    level = level_in if order is None else level_in[order]

    def where(i: int) -> str:  # i: a position in batch order
        return columns.where(i if order is None else int(order[i]))

    b, thr, tpot = col["batch"], col["throughput_tok_s"], col["tpot_ms"]
    empty = np.isnan(thr) & np.isnan(tpot)
    if empty.any():
        raise TokenroofError(f"{where(int(np.argmax(empty)))}: needs throughput_tok_s or tpot_ms (both are empty)")
    warnings = _disagreements(b, thr, tpot, where)
    tpot_all = np.where(np.isnan(tpot), b * 1000 / thr, tpot)
    thr_all = np.where(np.isnan(thr), b * 1000 / tpot_all, thr)
    groups = Groups.of(b, level)
    starts = groups.starts
    ctx = col["context_tokens"]
    warnings = _repeats(groups, b, tpot_all, where, None if np.isnan(ctx).all() else ctx) + warnings
    missing = np.isnan(col["ttft_ms"])
    if missing.any() and not missing.all():
        warnings.append(
            f"{where(int(np.argmax(missing)))}: ttft_ms is empty on {int(missing.sum())} of {missing.size} rows: "
            "their TPOT is fitted, their TTFT is not"
        )
    if starts.size < 2:
        raise TokenroofError(f"{source or 'table'}: need at least 2 measured points, got {starts.size}")
    if b[-1] == b[0]:
        raise TokenroofError(
            f"{source or 'table'}: every row is at batch {b[0]:g} (at {starts.size} contexts): a curve needs at least "
            "2 distinct batches"
        )
    repeated = groups.count.max() > 1
    return MeasurementTable(
        batch=b[starts],
        tpot_ms=groups.geometric_mean(tpot_all),
        throughput_tok_s=groups.geometric_mean(thr_all),
        context_tokens=None if np.isnan(ctx).all() else groups.mean(ctx),
        ttft_ms=None if np.isnan(col["ttft_ms"]).all() else groups.nanmean(col["ttft_ms"]),
        requests=None if np.isnan(col["requests"]).any() else groups.mean(col["requests"]),
        concurrency=None if np.isnan(col["concurrency"]).all() else groups.nanmean(col["concurrency"]),
        provenance=tuple(provenance),
        source=source,
        warnings=tuple(warnings),
        derived=_derived(thr, tpot, starts),
        semantics=semantics or Semantics(),
        count=groups.count if repeated else None,
        tpot_log_ss=groups.log_scatter(tpot_all) if repeated else None,
    )


def _derived(thr: np.ndarray, tpot: np.ndarray, starts: np.ndarray) -> tuple[str, ...]:
    """Per point: the column derived on every one of its rows ("" where some row measured both)."""
    codes = np.where(np.isnan(tpot), 1, np.where(np.isnan(thr), 2, 0))
    same = np.minimum.reduceat(codes, starts) == np.maximum.reduceat(codes, starts)
    point_codes = np.where(same, codes[starts], 0)
    labels = ("", "tpot_ms", "throughput_tok_s")
    if (point_codes == point_codes[0]).all():
        return (labels[int(point_codes[0])],) * point_codes.size
    return tuple(map(labels.__getitem__, point_codes.tolist()))


@dataclass(frozen=True)
class Groups:
    """Runs of equal batch in batch order: where each starts, and how many rows it holds."""

    starts: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, batch: np.ndarray, level: np.ndarray | None = None) -> Groups:
        """Runs of equal batch (and equal context level, where given) in that order."""
        change = batch[1:] != batch[:-1]
        if level is not None:
            change |= level[1:] != level[:-1]
        starts = np.flatnonzero(np.concatenate(([True], change)))
        return cls(starts, np.diff(np.append(starts, batch.size)))

    def mean(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, self.starts) / self.count

    def nanmean(self, values: np.ndarray) -> np.ndarray:
        """Each group's mean over its rows that give a value (NaN where none does)."""
        given = ~np.isnan(values)
        total = np.add.reduceat(np.where(given, values, 0.0), self.starts)
        rows = np.add.reduceat(given.astype(float), self.starts)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(rows > 0, total / np.maximum(rows, 1.0), np.nan)

    def geometric_mean(self, values: np.ndarray) -> np.ndarray:
        """Each group's geometric mean; a single row's value exactly as read."""
        if self.count.max() == 1:
            return values
        single = self.count == 1
        return np.where(single, values[self.starts], np.exp(self.mean(np.log(values))))

    def log_scatter(self, values: np.ndarray) -> np.ndarray:
        """Each group's sum of squared log deviations from its geometric mean."""
        logs = np.log(values)
        centre = np.repeat(self.mean(logs), self.count)
        return np.add.reduceat((logs - centre) ** 2, self.starts)


def pooled(table: MeasurementTable, max_points: int) -> tuple[MeasurementTable, np.ndarray]:
    """At most `max_points` points, for fitting, and the largest batch of `table` each holds. Past that many
    distinct batches, neighbours are pooled into bins of equal width in log batch (1024 bins over batches 1–512
    are 0.6% wide, and TPOT moves less than the batch across one), each bin a point as repeated rows are: TPOT and
    throughput their rows' geometric means, batch, context and TTFT their means, their scatter kept. A table of
    several contexts is pooled level by level (bins never mix contexts), its points back in batch order."""
    n = len(table)
    if n <= max_points:
        return table, table.batch.astype(float)
    if table.several_contexts:
        levels = table.levels
        n_levels = int(levels.max()) + 1
        parts = [pooled(table.subset(levels == k), max(max_points // n_levels, 2)) for k in range(n_levels)]
        merged = _concat([p for p, _ in parts])
        order = np.lexsort((merged.levels, merged.batch))
        return merged.subset(order), np.concatenate([t for _, t in parts])[order]
    b, count = table.batch.astype(float), table.counts
    edges = np.geomspace(b[0], b[-1], max_points + 1)
    bins = np.minimum(np.searchsorted(edges, b, side="right") - 1, max_points - 1)
    starts = np.flatnonzero(np.concatenate(([True], bins[1:] != bins[:-1])))
    ends = np.append(starts[1:], n)
    rows = np.add.reduceat(count, starts)

    def mean(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(count * values, starts) / rows

    def nanmean(values: np.ndarray) -> np.ndarray:  # over the rows that give a value
        given = np.where(np.isnan(values), 0.0, count)
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.add.reduceat(given * np.nan_to_num(values), starts)
            weight = np.add.reduceat(given, starts)
            return np.where(weight > 0, total / np.maximum(weight, 1e-300), np.nan)

    centre = mean(np.log(table.tpot_ms))
    scatter = table.log_ss + count * (np.log(table.tpot_ms) - np.repeat(centre, ends - starts)) ** 2
    derived = table.derived if len(table.derived) == n else ("",) * n
    labels = tuple(derived[i] if len(set(derived[i:j])) == 1 else "" for i, j in zip(starts, ends, strict=True))
    points = replace(
        table,
        batch=mean(b),
        tpot_ms=np.exp(centre),
        throughput_tok_s=np.exp(mean(np.log(table.throughput_tok_s))),
        context_tokens=None if table.context_tokens is None else mean(table.context_tokens),
        ttft_ms=None if table.ttft_ms is None else nanmean(table.ttft_ms),
        requests=None if table.requests is None else mean(table.requests),
        concurrency=None if table.concurrency is None else nanmean(table.concurrency),
        derived=labels if len(table.derived) == n else (),
        count=np.rint(rows).astype(np.int64),
        tpot_log_ss=np.add.reduceat(scatter, starts),
    )
    return points, b[ends - 1]


def _concat(parts: Sequence[MeasurementTable]) -> MeasurementTable:
    """Points of several tables (of one source, with the same columns) as one, in the given order."""

    def join(name: str) -> np.ndarray | None:
        arrays = [getattr(p, name) for p in parts]
        return None if any(a is None for a in arrays) else np.concatenate(arrays)

    counts = [p.counts for p in parts]
    derived = sum((p.derived for p in parts), ())
    return replace(
        parts[0],
        batch=np.concatenate([p.batch for p in parts]),
        tpot_ms=np.concatenate([p.tpot_ms for p in parts]),
        throughput_tok_s=np.concatenate([p.throughput_tok_s for p in parts]),
        context_tokens=join("context_tokens"),
        ttft_ms=join("ttft_ms"),
        requests=join("requests"),
        concurrency=join("concurrency"),
        derived=derived if len(derived) == sum(len(p) for p in parts) else (),
        count=np.rint(np.concatenate(counts)).astype(np.int64),
        tpot_log_ss=np.concatenate([p.log_ss for p in parts]),
    )


def context_levels(context: np.ndarray) -> np.ndarray:
    """Each context's level: the distinct contexts in increasing order, a new level wherever one exceeds the one
    below it by more than CONTEXT_LEVEL_RATIO (all 0: one context, or contexts spread without a gap)."""
    values = np.unique(context)
    level_of = np.concatenate(([0], np.cumsum(values[1:] > CONTEXT_LEVEL_RATIO * values[:-1])))
    return level_of[np.searchsorted(values, context)].astype(np.int64)


def _repeats(
    groups: Groups, b: np.ndarray, tpot: np.ndarray, where: Callable[[int], str], ctx: np.ndarray | None = None
) -> list[str]:
    """Rows at one batch are repeated runs, pooled; rows that scatter beyond any run-to-run noise are an error
    naming the two furthest apart, and runs identical to the last digit a warning (a row copied twice?)."""
    count = groups.count
    if count.max() == 1:
        return []
    rms = np.sqrt(groups.log_scatter(tpot) / count)
    if (rms > CONFLICT_SCATTER).any():
        g = int(np.argmax(rms > CONFLICT_SCATTER))
        rows = np.arange(groups.starts[g], groups.starts[g] + count[g])
        low, high = rows[np.argmin(tpot[rows])], rows[np.argmax(tpot[rows])]
        first, later = min(low, high), max(low, high)  # batch order keeps file order within a batch
        times = "twice" if count[g] == 2 else f"{count[g]} times"
        at = f" at context {ctx[later]:g}" if ctx is not None else ""
        raise TokenroofError(
            f"{where(int(later))}: batch {b[later]:g}{at} appears {times} with conflicting values (also at "
            f"{where(int(first))}: TPOT {tpot[first]:.4g} ms vs {tpot[later]:.4g} ms; repeated runs of one server "
            f"scatter less than ±{CONFLICT_SCATTER:.0%}); keep one"
        )
    copied = np.flatnonzero((count > 1) & (rms == 0))
    warnings = [
        f"{where(int(groups.starts[g]) + 1)}: duplicate of batch {b[groups.starts[g]]:g} at "
        f"{where(int(groups.starts[g]))} (identical TPOT); counted as a repeated run"
        for g in copied[:MAX_ROW_WARNINGS]
    ]
    return warnings + _more(copied.size, "batches repeat a row identically")


def _more(n: int, what: str) -> list[str]:
    return [f"... and {n - MAX_ROW_WARNINGS} more {what}"] if n > MAX_ROW_WARNINGS else []


def _disagreements(b: np.ndarray, thr: np.ndarray, tpot: np.ndarray, where: Callable[[int], str]) -> list[str]:
    """Rows whose throughput and TPOT disagree by more than DISAGREE, named (the first MAX_ROW_WARNINGS)."""
    with np.errstate(invalid="ignore"):
        gap = tpot / (b * 1000 / thr) - 1
        rows = np.flatnonzero(np.abs(gap) > DISAGREE)
    warnings = [
        f"{where(int(i))}: throughput {thr[i]:g} tok/s and TPOT {tpot[i]:g} ms disagree by {gap[i]:+.0%} "
        f"(batch × 1000 / TPOT = {b[i] * 1000 / tpot[i]:.4g} tok/s); online runs average TPOT per request and "
        "count first tokens in throughput, and a batch that is not the running batch (queued or preempted "
        "requests) widens the gap; the fit uses TPOT"
        for i in rows[:MAX_ROW_WARNINGS]
    ]
    return warnings + _more(rows.size, "rows disagree likewise")


# -- readers -------------------------------------------------------------------------
def parse_csv(text: str, source: str = "<csv>") -> MeasurementTable:
    """Parse the DESIGN.md CSV; errors name the file, line and column."""
    if len(text) >= LARGE_CSV_CHARS:
        table = _parse_large(text, source)
        if table is not None:
            return table
    lines = text.splitlines()
    kinds = _line_kinds(lines)
    provenance = [lines[i].strip().lstrip("#").strip() for i in np.flatnonzero(kinds == 1)]
    body = np.flatnonzero(kinds == 0)
    if not body.size:
        raise TokenroofError(f"{source}: no header line (expected {','.join(COLUMNS[:3])})")
    header = _header(lines[body[0]], f"{source}:{body[0] + 1}")
    data = body[1:]
    contiguous = data.size and data[-1] - data[0] == data.size - 1
    rows = lines[data[0] : data[-1] + 1] if contiguous else [lines[i] for i in data]

    def where(i: int) -> str:
        return f"{source}:{data[i] + 1}"

    values = _fast_cells(rows, header) if rows else None
    if values is None:
        values = _cells(rows, header, where)
    absent = np.full(len(rows), np.nan)
    columns = {name: values[:, header.index(name)] if name in header else absent for name in COLUMNS}
    return table_from_columns(Columns(columns, where), provenance, source, parse_settings(provenance, source))


LARGE_CSV_CHARS = 1 << 20  # from here on, a plain table is parsed without a Python string per line
LINE_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines' other line ends


def _parse_large(text: str, source: str) -> MeasurementTable | None:
    """A large plain table (comments and the header first, then one data row per line, every cell a number or
    empty) parsed from the text as one block: a million rows in a fraction of the memory a string per line costs.
    None leaves anything else to the line-by-line parse, which names the problem."""
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if any(end in text for end in "\r\x0b\x0c\x1c\x1d\x1e") or (not text.isascii() and LINE_BREAKS.search(text)):
        return None  # a line end other than \\n: the line-by-line parse splits as str.splitlines does
    provenance, start, number = [], 0, 0
    while True:  # the lines before the data: comments, blanks, the header
        end = text.find("\n", start)
        if end < 0:
            return None
        line, number = text[start:end], number + 1
        start = end + 1
        head = line.strip()
        if head.startswith("#"):
            provenance.append(head.lstrip("#").strip())
        elif head:
            header = _header(line, f"{source}:{number}")
            break
    body = text[start:].rstrip("\n")
    raw = np.frombuffer(body.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(raw == ord("\n")) + 1))
    first = raw[starts] if raw.size else raw
    if not raw.size or not ((first > ord(" ")) & (first < 127) & (first != ord("#"))).all():
        return None  # a blank or comment line among the rows, or no rows
    rows = len(starts)
    filled, empty_cells = _fill_empty_text(body)
    try:
        parsed = np.loadtxt(_chunked_lines(filled), delimiter=",", dtype=float, comments=None, ndmin=2)
    except ValueError:
        return None
    del body, raw, starts, first, filled  # the text's copies, before the table's own arrays are made
    values = _checked_cells(parsed, empty_cells, rows, header)
    if values is None:
        return None
    header_line = number

    def where(i: int) -> str:
        return f"{source}:{header_line + 1 + i}"

    absent = np.full(rows, np.nan)
    columns = {name: values[:, header.index(name)] if name in header else absent for name in COLUMNS}
    return table_from_columns(Columns(columns, where), provenance, source, parse_settings(provenance, source))


def _chunked_lines(text: str, chunk_chars: int = 1 << 20) -> Iterator[str]:
    """The lines of `text` (\\n only), a chunk at a time: numpy reads them at its speed while only one chunk's
    strings are alive (io.StringIO holds four bytes per character, four times the text)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + chunk_chars)
        end = len(text) if end < 0 else end + 1
        yield from text[start:end].split("\n")[: None if end == len(text) else -1]
        start = end


def _line_kinds(lines: list[str]) -> np.ndarray:
    """Per line: 0 data (the header among them), 1 provenance ('#'), 2 blank. A line whose first byte is a visible
    ASCII character other than '#' is data, decided in bulk; the others (whitespace first, '#', non-ASCII) one
    by one."""
    kinds = np.zeros(len(lines), dtype=np.int8)
    if not lines:
        return kinds
    data = np.frombuffer(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"), dtype=np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(data == ord("\n"))[:-1] + 1))
    first = data[starts]
    plain = (first > ord(" ")) & (first < 127) & (first != ord("#"))
    for i in np.flatnonzero(~plain):
        head = lines[i].lstrip()[:1]
        kinds[i] = 2 if not head else 1 if head == "#" else 0
    return kinds


def _header(line: str, where: str) -> list[str]:
    """The header's column names: each known, none twice, batch and a TPOT or throughput among them."""
    header = [h.strip() for h in _split(line, where)]
    repeated = sorted(name for name, n in Counter(header).items() if n > 1)
    if repeated:
        raise TokenroofError(f"{where}: column(s) {', '.join(repeated)} appear more than once")
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise TokenroofError(
            f"{where}: unknown column(s) {', '.join(repr(u) for u in unknown)}; known: {', '.join(COLUMNS)}"
        )
    if "batch" not in header or not {"throughput_tok_s", "tpot_ms"} & set(header):
        raise TokenroofError(f"{where}: header needs 'batch' and at least one of 'throughput_tok_s', 'tpot_ms'")
    return header


def _split(line: str, where: str) -> list[str]:
    """One CSV line's cells (quoting as Excel writes it); a line the csv module cannot read is named."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error as exc:
        raise TokenroofError(f"{where}: cannot read this line as CSV ({exc})") from None


def _cells(rows: Sequence[str], header: list[str], where: Callable[[int], str]) -> np.ndarray:
    """Every cell as a number (NaN: empty), row by row, raising at the first bad cell as its row and column."""
    values = np.full((len(rows), len(header)), np.nan)
    checked = [(col, header.index(col)) for col in COLUMNS if col in header]
    for i, line in enumerate(rows):
        cells = _split(line, where(i))
        if len(cells) != len(header):
            raise TokenroofError(f"{where(i)}: {len(cells)} values for {len(header)} columns")
        for col, j in checked:
            value = _number(cells[j], where(i), col)
            if value is not None:
                values[i, j] = value
        if math.isnan(values[i, header.index("batch")]):
            raise TokenroofError(f"{where(i)}: batch is empty")
    return values


def _loadtxt(rows: list[str]) -> np.ndarray:
    return np.loadtxt(rows, delimiter=",", dtype=float, comments=None, ndmin=2)


def _fast_cells(rows: list[str], header: list[str]) -> np.ndarray | None:
    """`_cells` at C speed when every cell is a valid number or empty; None leaves the rest (quoting, a bad cell,
    a short row, a blank cell) to `_cells`, which names the problem. Empty cells are parsed as SENTINEL, a value
    no valid cell has, counted, and turned into NaN."""
    text, empty_cells = _fill_empty(rows)
    try:
        values = _loadtxt(text.split("\n") if empty_cells else rows)
    except ValueError:
        return None
    return _checked_cells(values, empty_cells, len(rows), header)


def _checked_cells(values: np.ndarray, empty_cells: int, rows: int, header: list[str]) -> np.ndarray | None:
    """numpy's cells if each is plausible or was empty (SENTINEL, as many as were filled), empties as NaN, the batch
    never empty; None when not (the line-by-line parse then names the problem)."""
    if values.shape != (rows, len(header)):
        return None
    empty = values == SENTINEL
    plausible = (values >= PLAUSIBLE[0]) & (values <= PLAUSIBLE[1])  # False for NaN
    if np.count_nonzero(empty) != empty_cells or not (empty | plausible).all():
        return None
    values[empty] = np.nan
    return None if np.isnan(values[:, header.index("batch")]).any() else values


def _fill_empty(rows: list[str]) -> tuple[str, int]:
    """The rows as one text with SENTINEL in every empty cell (between two commas, or a comma and a line's end),
    and how many ("", 0 when none)."""
    text, filled = _fill_empty_text("\n".join(rows))
    return (text, filled) if filled else ("", 0)


def _fill_empty_text(rows: str) -> tuple[str, int]:
    """`rows` (lines joined by \\n) with SENTINEL in every empty cell, and how many."""
    text, filled = "\n" + rows + "\n", 0
    for empty in (",,", ",,", "\n,", ",\n"):  # twice: ",,," holds two, and replace does not overlap
        found = text.count(empty)
        if found:
            filled += found
            text = text.replace(empty, empty[0] + repr(SENTINEL) + empty[1])
    return text[1:-1], filled


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
    lengths = _vllm_settings(data, where)
    context = None  # the run's mean context from its token totals: runs at other lengths are other contexts
    if lengths.get("input_len") is not None and lengths.get("output_len") is not None:
        context = mean_context_tokens(lengths["input_len"], lengths["output_len"])
    row = Row(
        _batch(concurrency, where, "max_concurrency"),
        _number(data.get("output_throughput"), where, "output_throughput"),
        _number(data.get("mean_tpot_ms"), where, "mean_tpot_ms"),
        context,
        _number(data.get("mean_ttft_ms"), where, "mean_ttft_ms"),
        where,
        _number(data.get("completed"), where, "completed"),
    )
    return row


def _vllm_settings(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """vLLM's TPOT excludes the first token and so any queueing; lengths from the run's token totals."""
    settings: dict[str, Any] = {"batch_kind": "concurrency", "tpot_kind": "tpot", "client": _vllm_client(data)}
    done = _number(data.get("completed"), where, "completed")
    for key, total in (("input_len", "total_input_tokens"), ("output_len", "total_output_tokens")):
        value = _number(data.get(total), where, total)
        if done and value:
            settings[key] = value / done
    return settings


def _vllm_client(data: Mapping[str, Any]) -> str:
    """`--request-rate inf` (the default) with `--max-concurrency`: every stream starts at once; a finite rate
    arrives open-loop (`--burstiness` 1: Poisson, larger: smoother; inf is read as evenly spaced)."""
    rate = data.get("request_rate")
    try:
        finite = rate is not None and math.isfinite(float(rate))
    except (TypeError, ValueError):
        finite = False
    if not finite:
        return "burst"
    burstiness = data.get("burstiness", 1.0)
    return "constant" if isinstance(burstiness, str) or burstiness in (math.inf,) else "poisson"


GUIDELLM_CLIENTS = {
    "concurrent": "burst",
    "throughput": "burst",
    "synchronous": "staggered",
    "poisson": "poisson",
    "constant": "constant",
}


def _guidellm_streams(bench: Mapping[str, Any], batch: float, where: str) -> float | None:
    """A closed-loop strategy's concurrency: synchronous 1, concurrent its streams, throughput (every request at
    once, as many as it holds) the concurrency measured; None for a rate (an open loop)."""
    strategy = _dig(bench, "args", "strategy") or _dig(bench, "config", "strategy")
    kind = strategy.get("type_") if isinstance(strategy, Mapping) else None
    if kind == "synchronous":
        return 1.0
    if kind == "concurrent":
        streams = strategy.get("streams") if isinstance(strategy, Mapping) else None
        return _batch(streams, where, "strategy.streams") if streams is not None else batch
    if kind == "throughput":
        return batch
    return None


def _guidellm_client(data: Mapping[str, Any]) -> str | None:
    """The strategies of a GuideLLM sweep as one client: its rate points' kind (a synchronous point is a rate so low
    that one request runs at a time), else its streams' (concurrent and throughput start every stream at once)."""
    kinds = []
    for bench in data["benchmarks"]:
        if isinstance(bench, Mapping):
            strategy = _dig(bench, "args", "strategy") or _dig(bench, "config", "strategy")
            kind = strategy.get("type_") if isinstance(strategy, Mapping) else None
            if isinstance(kind, str) and kind in GUIDELLM_CLIENTS:
                kinds.append(GUIDELLM_CLIENTS[kind])
    rates = [k for k in kinds if k in ("poisson", "constant")] or kinds
    return max(sorted(set(rates)), key=rates.count) if rates else None


def _guidellm_settings(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"batch_kind": "concurrency", "tpot_kind": "itl"}
    client = _guidellm_client(data)
    if client is not None:
        settings["client"] = client
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
        for key in ("batch_kind", "tpot_kind", "client"):
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
        batch = _batch(concurrency, here, "request_concurrency")
        rows.append(
            Row(
                batch,
                _number(
                    _dig(metrics, "output_tokens_per_second", "successful", "mean"), here, "output_tokens_per_second"
                ),
                _number(_dig(metrics, "inter_token_latency_ms", "successful", "mean"), here, "inter_token_latency_ms"),
                None,
                _number(_dig(metrics, "time_to_first_token_ms", "successful", "mean"), here, "time_to_first_token_ms"),
                here,
                concurrency=_guidellm_streams(bench, batch, here),
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
                    raise TokenroofError(f"{where}: {key} must be a number of tokens, got {_shown(value)}")
                settings[key] = _number(str(value), where, key)
            elif value not in allowed:
                raise TokenroofError(f"{where}: {key}={_shown(value)} is not known; known: {', '.join(allowed)}")
    return rows, provenance, settings


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; an unreadable file or a bad line names itself."""
    lines = read_text(path).split("\n")  # JSON Lines end on \n only: U+2028 or U+0085 inside a string is text
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise TokenroofError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except ValueError as exc:  # an integer too long to convert
            raise TokenroofError(f"{path}:{number}: not valid JSON ({exc})") from None
        except RecursionError:
            raise TokenroofError(f"{path}:{number}: JSON nested too deeply") from None
    return rows


def resolve_inputs(path: Path) -> list[Path]:
    """A measurement input as files: a bench folder (`tokenroof bench --out`) is its summary.csv (else its
    summary.json); another folder its JSON files (one `vllm bench serve --save-result` file per concurrency, say)."""
    if not path.is_dir():
        return [path]
    for name in ("summary.csv", "summary.json"):
        if (path / name).is_file():
            return [path / name]
    found = sorted(path.glob("*.json"))
    if not found:
        raise TokenroofError(
            f"{path}: a folder without summary.csv, summary.json or JSON result files (expected a tokenroof bench "
            "--out folder, or a folder of vllm bench serve results)"
        )
    return found


def is_vllm_result(path: Path) -> bool:
    """A `vllm bench serve --save-result` file: one point of a table that its sibling files complete."""
    try:
        text = read_text(path) if path.is_file() else ""
        return text.lstrip().startswith("{") and '"output_throughput"' in text and "max_concurrency" in text
    except TokenroofError:
        return False


def describe_sources(files: Sequence[Path]) -> str:
    """Where a table came from, short enough for a message: one or two names, or the first and how many more."""
    names = [str(f) for f in files]
    return ", ".join(names) if len(names) <= 2 else f"{names[0]} and {len(names) - 1} more"


def _table_rows(table: MeasurementTable) -> list[Row]:
    """A parsed CSV's points as rows, to join other files' (repeated rows come as their pooled point)."""

    def cell(values: np.ndarray | None, i: int) -> float | None:
        return None if values is None or not np.isfinite(values[i]) else float(values[i])

    return [
        Row(
            float(table.batch[i]),
            float(table.throughput_tok_s[i]),
            float(table.tpot_ms[i]),
            cell(table.context_tokens, i),
            cell(table.ttft_ms, i),
            f"{table.source} batch {table.batch[i]:g}",
            cell(table.requests, i),
            cell(table.concurrency, i),
        )
        for i in range(len(table))
    ]


def _bench_summary(data: Mapping[str, Any], where: str, warnings: list[str]) -> tuple[list[Row], dict[str, Any]]:
    """tokenroof bench's summary.json: its valid points (batch = the running batch), each closed-loop one with its
    concurrency; the lengths from the requests' token counts."""
    rows, closed, rates, lengths = [], False, False, []
    for point in data["points"]:
        label = point.get("point", "?") if isinstance(point, Mapping) else "?"
        here = f"{where} {label}"
        if not isinstance(point, Mapping):
            raise TokenroofError(f"{here}: expected an object")
        if point.get("invalid"):
            warnings.append(f"{here}: left out ({point['invalid']})")
            continue
        kind = point.get("kind")
        prompt = _number(point.get("prompt_tokens_mean"), here, "prompt_tokens_mean")
        output = _number(point.get("output_tokens_mean"), here, "output_tokens_mean")
        context = mean_context_tokens(prompt, output) if prompt and output else None
        if prompt and output:
            lengths.append((prompt, output))
        closed |= kind == "concurrency"
        rates |= kind == "rate"
        rows.append(
            Row(
                _batch(point.get("batch"), here, "batch"),
                _number(point.get("throughput_tok_s"), here, "throughput_tok_s"),
                _number(_dig(point, "tpot_ms", "mean"), here, "tpot_ms.mean"),
                context,
                _number(_dig(point, "ttft_ms", "mean"), here, "ttft_ms.mean"),
                here,
                None,
                _number(point.get("value"), here, "value") if kind == "concurrency" else None,
            )
        )
    settings: dict[str, Any] = {"batch_kind": "running", "tpot_kind": "tpot", "client": "staggered"}
    if rates and not closed:
        settings["client"] = "poisson"
    if lengths:
        settings["input_len"], settings["output_len"] = (float(np.mean(v)) for v in zip(*lengths, strict=True))
    return rows, settings


def _is_bench_summary(data: Any) -> bool:
    points = data.get("points") if isinstance(data, Mapping) else None
    return isinstance(points, list) and any(isinstance(p, Mapping) and p.get("type") == "point" for p in points)


def read_table(paths: Sequence[Path | str]) -> MeasurementTable:
    """Read measurements into one table: CSV files (DESIGN.md), JSON (tokenroof points, `vllm bench serve` results,
    GuideLLM reports, tokenroof bench's summary.json) and bench folders; several inputs are one table, their
    settings merged (the kinds must agree)."""
    files = [f for p in paths for f in resolve_inputs(Path(p))]
    if not files:
        raise TokenroofError("no measurement file given")
    texts = [read_text(path) for path in files]
    if len(files) == 1 and not texts[0].lstrip().startswith(("{", "[")):
        return parse_csv(texts[0], str(files[0]))
    rows: list[Row] = []
    provenance: list[str] = []
    warnings: list[str] = []
    parts: list[tuple[str, dict[str, Any]]] = []
    vllm = 0  # rows from vLLM results: their batch is the client's concurrency, their context from token totals
    for path, text in zip(files, texts, strict=True):
        if not text.lstrip().startswith(("{", "[")):
            table = parse_csv(text, str(path))
            rows += _table_rows(table)
            provenance += table.provenance
            warnings += table.warnings
            parts.append((str(path), {key: getattr(table.semantics, key) for key in table.semantics.stated}))
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TokenroofError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        except ValueError as exc:  # an integer too long to convert
            raise TokenroofError(f"{path}: not valid JSON ({str(exc)[:80]})") from None
        except RecursionError:
            raise TokenroofError(f"{path}: JSON nested too deeply") from None
        if _is_bench_summary(data):
            new_rows, settings = _bench_summary(data, str(path), warnings)
            new_prov = [f"tokenroof bench summary {path}"]
        else:
            new_rows, new_prov, settings = _json_rows(data, str(path), warnings)
        if isinstance(data, Mapping) and "output_throughput" in data:
            vllm += len(new_rows)
        rows += new_rows
        provenance += new_prov
        parts.append((str(path), settings))
    if vllm:
        warnings.insert(
            0,
            f"{vllm} vLLM result(s): batch = max_concurrency, the client's; the running batch can be lower (ramp-up, "
            "drain, server caps)",
        )
    if vllm and len({row.context_tokens is None for row in rows}) > 1:
        # a vLLM result without token totals has no context: then none of them speaks for its context
        rows = [replace(row, context_tokens=None) for row in rows] if vllm == len(rows) else rows
    table = build_table(rows, provenance, describe_sources(files), merge_settings(parts, provenance))
    return replace(table, warnings=tuple(warnings) + table.warnings)
