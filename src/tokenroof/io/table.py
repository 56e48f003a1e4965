"""MeasurementTable: measured (batch, throughput, TPOT) points and what they were measured under, built and
checked once whatever file they came from (the readers: csvio, vllm, guidellm, benchfiles; the front door:
measurements.read_table)."""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.model.stepmodel import mean_context_tokens

# `requests`: how many requests a point's means are taken over from the start of its run, ramp-up included (as vLLM
# reports them); absent (or empty on a row): a steady-state window (tokenroof bench; a rate point's window).
# `concurrency`: the closed-loop client's concurrency where the batch column is the server's running batch or a
# measured mean (tokenroof bench, GuideLLM's synchronous and concurrent points; empty for open-loop points). `sent`:
# with `requests`, how many the run sent where it stopped counting before all were answered, its means over the first
# `requests` answered (GuideLLM's `max_duration` drops what is still in flight; LLMPerf lets it finish uncounted);
# absent: every request sent was answered
COLUMNS = ("batch", "throughput_tok_s", "tpot_ms", "context_tokens", "ttft_ms", "requests", "concurrency", "sent")
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
CLOSED_CLIENT_KINDS = ("staggered", "burst", "waves")  # the closed loops (simulate --client names them)
CLIENT_KINDS = ("burst", "staggered", "waves", "poisson", "constant")
# The server measured, where the measuring client could tell (bench asks llama-server's GET /props); None: not said.
SERVERS = ("llama-server",)
SETTINGS = {
    "batch_kind": BATCH_KINDS,
    "tpot_kind": TPOT_KINDS,
    "client": CLIENT_KINDS,
    "input_len": None,
    "output_len": None,
    "kv_slots": None,
    "server": SERVERS,
    "burstiness": None,
    "input_len_cv": None,
    "output_len_cv": None,
}
LENGTH_SPREADS = ("input_len_cv", "output_len_cv")  # 0 stated: one length
MOST_LENGTHS_CV = 4.0  # a spread of lengths past this (sd ÷ mean) is a slip, not a workload


def loads_json(text: str, where: str, whole_file: bool = False) -> Any:
    """`json.loads`, each failure one TokenroofError naming `where` (a JSON Lines line, `path:N`; or a whole file,
    whose message says the line and keeps an over-long integer's reason to 80 characters)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = f"line {exc.lineno}: " if whole_file else ""
        raise TokenroofError(f"{where}: not valid JSON ({at}{exc.msg})") from None
    except ValueError as exc:  # an integer too long to convert
        reason = str(exc)[:80] if whole_file else str(exc)
        raise TokenroofError(f"{where}: not valid JSON ({reason})") from None
    except RecursionError:
        raise TokenroofError(f"{where}: JSON nested too deeply") from None


@dataclass(frozen=True)
class Semantics:
    """What a table's columns mean, and the workload behind it (None: not stated)."""

    batch_kind: str = "running"
    tpot_kind: str = "tpot"
    # the rest by name only: `client` was once inserted here, and a positional Semantics(kind, kind, in, out) in
    # benchmarks/curve_headers.py silently read the input length as the client and lost the output length
    _: KW_ONLY
    client: str | None = None  # CLIENT_KINDS; None: not stated
    input_len: float | None = None
    output_len: float | None = None
    # per-slot KV streams on this many slots (llama-server -np N without --kv-unified): a step runs one forward pass
    # per run of consecutive busy slots (serving/engine/core.py); None: one KV cache for all (every other server)
    kv_slots: int | None = None
    server: str | None = None  # SERVERS: which server was measured, where the client could tell
    # an open loop's random arrivals: the gamma shape of their gaps (`vllm bench serve --burstiness`; None: 1, Poisson)
    burstiness: float | None = None
    # lengths the client drew at random (LLMPerf's normal draws, a ShareGPT sample): their relative standard deviation
    # (sd ÷ mean), so that a replay draws them alike; None: every request of one length
    input_len_cv: float | None = None
    output_len_cv: float | None = None
    stated: tuple[str, ...] = ()  # the settings the source stated (the rest are defaults)

    def __post_init__(self) -> None:
        for key in LENGTH_SPREADS:
            problem = "" if getattr(self, key) is None else spread_problem(key, getattr(self, key))
            if problem:
                raise TokenroofError(problem)
        if self.burstiness is not None and self.client != "poisson":
            raise TokenroofError(
                f"burstiness={self.burstiness:g} shapes random arrivals' gaps: it goes with client=poisson ("
                + (f"the table says client={self.client})" if self.client else "the table states no client)")
            )

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


def _zero(text: str) -> bool:
    try:
        return float(text) == 0
    except ValueError:
        return False


def parse_settings(lines: Iterable[str], where: str) -> Semantics:
    """`key=value` settings in provenance lines (`# batch_kind=static tpot_kind=e2e input_len=1024 ...`)."""
    found: dict[str, Any] = {}
    for line in lines:
        for key, value in re.findall(rf"\b({'|'.join(SETTINGS)})=([^\s,;]+)", line):
            allowed = SETTINGS[key]
            if allowed is not None:
                if value not in allowed:
                    raise TokenroofError(f"{where}: {key}={value} is not known; known: {', '.join(allowed)}")
                found[key] = value
            elif key in LENGTH_SPREADS and _zero(value):
                found[key] = None  # stated as one length
            else:
                number = _number(value, where, key)
                if key == "kv_slots":
                    if number is None or not number.is_integer() or number < 1:
                        raise TokenroofError(f"{where}: kv_slots={value} must be a whole number of slots, at least 1")
                    number = int(number)
                found[key] = number
    try:
        return Semantics(**found, stated=tuple(found))
    except TokenroofError as exc:
        raise TokenroofError(f"{where}: {exc}") from None


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
    sent: float | None = None


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
    requests: np.ndarray | None = None  # per point: the requests its means are over, a whole run (NaN, None: a window)
    concurrency: np.ndarray | None = None  # per point: the closed-loop client's concurrency (NaN: open loop or unknown)
    sent: np.ndarray | None = None  # per point: what a run cut at a time limit sent (NaN, None: all were answered)
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
            sent=cut(self.sent),
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
        if self.sent is not None:
            columns["sent"] = self.sent
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
            "sent": self.sent,
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
            "kv_slots": self.semantics.kv_slots,
            "server": self.semantics.server,
            "burstiness": self.semantics.burstiness,
            "input_len_cv": self.semantics.input_len_cv,
            "output_len_cv": self.semantics.output_len_cv,
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


# a rate run whose requests in flight averaged above this share of its client's concurrency cap was capped by it:
# arrivals queued in the client, so the run was neither a rate nor a concurrency
CAP_BOUND = 0.9


def held_in_flight(data: Mapping[str, Any], where: str, latency_key: str, tool: str) -> float:
    """The requests a run at a rate held in flight on average, Σ latency ÷ duration, from its mean end-to-end latency
    (`latency_key`, ms), completed requests and duration (s): vLLM's and SGLang's results hold all three."""
    latency_ms = _number(data.get(latency_key), where, latency_key)
    done = _number(data.get("completed"), where, "completed")
    duration_s = _number(data.get("duration"), where, "duration")
    if latency_ms is None or done is None or duration_s is None:
        raise TokenroofError(
            f"{where}: {tool}'s run at a request rate needs the requests it held in flight: no {latency_key}, "
            "completed and duration to count them from (give the measured batch in a CSV)"
        )
    return done * latency_ms / 1e3 / duration_s


def rate_value(value: Any) -> float:
    """A benchmark file's request rate (or burstiness) as a number: a JSON number, Infinity, or their text ("inf", "5");
    NaN for anything else (a missing rate, true/false, "trace"). The tools' files write an unbounded rate each their
    way: vLLM "inf", SGLang and AIPerf Infinity."""
    try:
        return float(value) if value is not None and not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        return math.nan


def capped(where: str, rate: Any, cap: float | None, held: float, warnings: list[str]) -> bool:
    """Whether a run at `rate` filled the client's concurrency `cap` (in flight above CAP_BOUND of it): then it is
    left out, and a warning says why."""
    if cap is None or held <= CAP_BOUND * cap:
        return False
    warnings.append(
        f"{where}: left out: at request rate {rate:g} the client's concurrency cap {cap:g} bound ({held:.1f} requests "
        "in flight on average), so arrivals queued in the client: neither a rate nor a concurrency"
    )
    return True


LENGTHS_FIXED_BELOW = 0.02  # lengths spread less than this (sd ÷ mean) are one length: a replay sends them as such


def lengths_cv(values: Sequence[float]) -> float | None:
    """The spread (sd ÷ mean) of the lengths a client drew at random, as a table's input_len_cv and output_len_cv
    state it; None where they are (nearly) one length, or too few to tell."""
    if len(values) < 2:
        return None
    cv = float(np.std(values) / np.mean(values))
    return cv if cv >= LENGTHS_FIXED_BELOW else None


def finite_number(value: Any) -> float | None:
    """A JSON value as a finite float, or None: not a number (true/false neither), NaN, infinite, or an integer past
    what a float holds (JSON allows 10**400)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


MOST_REQUESTS = 10_000_000  # a run's request counts are at most this (its runs are simulated request by request)
ERRORED_SHARE = 0.01  # failed requests above this share of a run's are warned of


def request_count(value: Any, where: str, name: str) -> int:
    """A tool's count of requests: a whole number from 0 to MOST_REQUESTS, else an error naming it."""
    number = finite_number(value)
    if number is None or not 0 <= number <= MOST_REQUESTS or number != int(number):
        raise TokenroofError(
            f"{where}: {name} must be a whole number of requests (at most {MOST_REQUESTS:,}), got {_shown(value)}"
        )
    return int(number)


def spread_problem(key: str, cv: float) -> str:
    """What is wrong with a stated spread of lengths (input_len_cv, output_len_cv), "" if nothing."""
    if 0 <= cv <= MOST_LENGTHS_CV:
        return ""
    return (
        f"{key}={cv:g}: lengths whose standard deviation is {cv:g} times their mean are no workload "
        f"(ShareGPT's outputs spread about 1×; at most {MOST_LENGTHS_CV:g} is read): check the file"
    )


def spread_of(sd: Any, mean: float | None) -> float | None:
    """sd ÷ mean from a tool's statistics of its requests' lengths (None: not given, not a number, or one length)."""
    deviation = finite_number(sd)
    if mean is None or deviation is None or mean <= 0:
        return None
    return deviation / mean if deviation / mean >= LENGTHS_FIXED_BELOW else None


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
    in_flight = semantics is not None and semantics.batch_kind == "concurrency"
    ttft_in = col["ttft_ms"] if in_flight and not np.isnan(col["ttft_ms"]).all() else None
    warnings = _disagreements(b, thr, tpot, where, ttft_in, semantics.output_len if semantics is not None else None)
    tpot_all = np.where(np.isnan(tpot), b * 1000 / thr, tpot)
    thr_all = np.where(np.isnan(thr), b * 1000 / tpot_all, thr)
    fast = tpot_all < FASTEST_TPOT_MS
    if fast.any():  # a column in seconds (or throughput per ms): no decode step is this short
        i = int(np.argmax(fast))
        column = "throughput_tok_s" if np.isnan(tpot[i]) else "tpot_ms"
        raise TokenroofError(
            f"{where(i)}: a TPOT of {tpot_all[i]:.3g} ms (from {column}) is shorter than any decode step (≥ "
            f"{FASTEST_TPOT_MS:g} ms): is the column in seconds? tpot_ms is milliseconds, throughput_tok_s tokens a "
            "second"
        )
    groups = Groups.of(b, level)
    starts = groups.starts
    ctx = col["context_tokens"]
    # one context the whole table through, beside the lengths its header states: the two must agree (with several
    # contexts the stated lengths are one curve's, or the files' mean)
    lengths = (semantics.input_len, semantics.output_len) if semantics is not None else (None, None)
    if lengths[0] is not None and lengths[1] is not None and np.unique(ctx[~np.isnan(ctx)]).size == 1:
        low, high = 0.9 * lengths[0], 1.1 * (lengths[0] + lengths[1])
        off = ~np.isnan(ctx) & ((ctx < low) | (ctx > high))
        if off.any():
            i = int(np.argmax(off))
            raise TokenroofError(
                f"{where(i)}: context_tokens {ctx[i]:g} is not a context of the lengths the header states (input_len "
                f"{lengths[0]:g}, output_len {lengths[1]:g}: {lengths[0]:g}–{lengths[0] + lengths[1]:g} tokens): "
                "correct one or the other"
            )
    warnings = _repeats(groups, b, tpot_all, where, None if np.isnan(ctx).all() else ctx) + warnings
    sent, requests = col["sent"], col["requests"]
    odd = (~np.isnan(sent)) & (np.isnan(requests) | (sent < requests))
    if odd.any():
        i = int(np.argmax(odd))
        raise TokenroofError(
            f"{where(i)}: sent {sent[i]:g} without requests: give the requests its means are over (those answered) "
            "beside what the run sent"
            if np.isnan(requests[i])
            else f"{where(i)}: sent {sent[i]:g} is fewer than the {requests[i]:g} requests its means are over: a run "
            "sends at least the requests it answers"
        )
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
        requests=None if np.isnan(col["requests"]).all() else groups.mean(col["requests"]),
        concurrency=None if np.isnan(col["concurrency"]).all() else groups.nanmean(col["concurrency"]),
        sent=None if np.isnan(sent).all() else _pooled_sent(sent, requests, groups.mean),
        provenance=tuple(provenance),
        source=source,
        warnings=tuple(warnings),
        derived=_derived(thr, tpot, starts),
        semantics=semantics or Semantics(),
        count=groups.count if repeated else None,
        tpot_log_ss=groups.log_scatter(tpot_all) if repeated else None,
    )


FASTEST_TPOT_MS = 0.1  # below any decode step measured (a small model's on an H100 is ~2 ms a token at batch 1)


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
        sent=None if table.sent is None or table.requests is None else _pooled_sent(table.sent, table.requests, mean),
        derived=labels if len(table.derived) == n else (),
        count=np.rint(rows).astype(np.int64),
        tpot_log_ss=np.add.reduceat(scatter, starts),
    )
    return points, b[ends - 1]


def _all_sent(sent: np.ndarray, requests: np.ndarray | None) -> np.ndarray:
    """What each row's run sent: its `sent`, else (every request answered) its `requests`; NaN for a window."""
    return sent if requests is None else np.where(np.isnan(sent), requests, sent)


def _pooled_sent(sent: np.ndarray, requests: np.ndarray, mean: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    return _cut_only(mean(_all_sent(sent, requests)), mean(requests))


def _cut_only(sent: np.ndarray, requests: np.ndarray | None) -> np.ndarray:
    """Pooled points' `sent`, NaN where nothing was cancelled (or where a window was pooled in: no whole run)."""
    if requests is None:
        return np.full_like(sent, np.nan)
    with np.errstate(invalid="ignore"):
        return np.where(sent > requests, sent, np.nan)


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
        sent=join("sent"),
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


def _disagreements(
    b: np.ndarray,
    thr: np.ndarray,
    tpot: np.ndarray,
    where: Callable[[int], str],
    ttft: np.ndarray | None = None,
    output_len: float | None = None,
) -> list[str]:
    """Rows whose throughput and TPOT disagree by more than DISAGREE, named (the first MAX_ROW_WARNINGS). Where the
    batch is the requests in flight and a row gives its TTFT (and the table its output length), the throughput they
    imply is Little's law's over a request's whole life, batch × output ÷ (TTFT + (output − 1) × TPOT): a closed loop
    of streams waiting out each TTFT emits less than batch ÷ TPOT, by design."""
    expected = b * 1000 / tpot
    how = np.full(b.size, "batch × 1000 / TPOT")
    if ttft is not None and output_len is not None and output_len >= 2:
        life = np.isfinite(ttft)
        expected = np.where(life, b * output_len * 1000 / (ttft + (output_len - 1) * tpot), expected)
        how = np.where(life, "batch × output ÷ (TTFT + (output − 1) × TPOT)", how)
    with np.errstate(invalid="ignore"):
        gap = thr / expected - 1
        rows = np.flatnonzero(np.abs(gap) > DISAGREE)
    warnings = [
        f"{where(int(i))}: throughput {thr[i]:g} tok/s and TPOT {tpot[i]:g} ms disagree by {gap[i]:+.0%} "
        f"({how[i]} = {expected[i]:.4g} tok/s); online runs average TPOT per request and "
        "count first tokens in throughput, and a batch that is not the running batch (queued or preempted "
        "requests) widens the gap; the fit uses TPOT"
        for i in rows[:MAX_ROW_WARNINGS]
    ]
    return warnings + _more(rows.size, "rows disagree likewise")


def _dig(data: Mapping[str, Any], *path: str) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def merge_settings(parts: Sequence[tuple[str, Mapping[str, Any]]], provenance: Sequence[str]) -> Semantics:
    """One table's semantics from several files: kinds must agree, lengths (and their spreads) are averaged."""
    merged: dict[str, Any] = {}
    for where, part in parts:
        for key in ("batch_kind", "tpot_kind", "client", "kv_slots", "server", "burstiness"):
            if key in part and merged.setdefault(key, (part[key], where))[0] != part[key]:
                closed = {part[key], merged[key][0]} & set(CLOSED_CLIENT_KINDS)
                mixed = key == "client" and closed and {part[key], merged[key][0]} & {"poisson", "constant"}
                raise TokenroofError(
                    f"{where}: {key} {part[key]} differs from {merged[key][0]} in {merged[key][1]}; "
                    + (
                        "runs at a fixed concurrency and runs at a request rate are two tables: give them apart "
                        "(one kind of sweep a file: SGLang's bench_serving appends every run to one output file)"
                        if mixed
                        else "give files of one kind"
                    )
                )
    for where, part in parts:  # each file's spread checked where it was read
        for key in LENGTH_SPREADS:
            problem = "" if part.get(key) is None else spread_problem(key, part[key])
            if problem:
                raise TokenroofError(f"{where}: {problem}")
    values: dict[str, Any] = {key: value for key, (value, _) in merged.items()}
    for key in ("input_len", "output_len", *LENGTH_SPREADS):
        given = [part[key] for _, part in parts if part.get(key) is not None]
        if given:
            values[key] = float(np.mean(given))
    stated = parse_settings(provenance, "provenance")
    for key in stated.stated:
        values.setdefault(key, getattr(stated, key))
    try:
        return Semantics(**values, stated=tuple(values))
    except TokenroofError as exc:
        raise TokenroofError(f"{parts[0][0] if parts else 'the table'}: {exc}") from None


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
            cell(table.sent, i),
        )
        for i in range(len(table))
    ]
