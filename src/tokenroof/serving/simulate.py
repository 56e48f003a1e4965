"""`simulate`: the emulator's scheduler on a virtual clock (discrete events), for workloads too big to run.

The same `BatchScheduler` that times `emulate`'s steps on the wall clock is driven
here by jumping from step end to step end (and across idle gaps to the next
arrival), so simulated and emulated runs of a workload agree by construction.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.io.csvio import write_rows
from tokenroof.io.measurements import CLOSED_CLIENT_KINDS, read_jsonl
from tokenroof.model.cost import Billing, PowerModel, Price, bill_of_steps
from tokenroof.model.disagg import Disaggregation
from tokenroof.model.prefix import SharedPrefix
from tokenroof.model.speculative import Speculation, measured_acceptance
from tokenroof.model.stepmodel import StepModel, mean_context_tokens
from tokenroof.serving.engine.core import (
    QUIET_RUN_LEAST,
    BatchScheduler,
    PrefixCounts,
    QuietRun,
    Sequence,
    SpecCounts,
    StepPlan,
)
from tokenroof.serving.engine.fleet import Router, prefix_of
from tokenroof.stats import arrival_times, open_loop_window, percentiles, trend, typical_lifetime_s

DISTRIBUTIONS = ("fixed", "uniform", "lognormal")
OVERLOAD = 0.95  # an open loop whose servers complete fewer of the requests it offers than this is overloaded
OVERLOAD_SD = 2.5  # ... by more than this many standard deviations of the window's Poisson arrivals
OVERLOADED = "overloaded:"  # how that warning starts (plan reads it: an overloaded candidate carries no plan)
TOO_FEW = "too few requests:"  # how the warning of a window too thin for any figure starts
TIMESERIES_COLUMNS = ("start_s", "duration_s", "running_batch", "kv_tokens")  # timeseries.csv, one row per step


@dataclass(frozen=True)
class Lengths:
    """Token counts: fixed at `mean`, uniform over mean·(1 ± spread), or lognormal with mean `mean`, sigma `spread`."""

    mean: int
    kind: str = "fixed"
    spread: float = 0.5

    def __post_init__(self) -> None:
        if self.kind not in DISTRIBUTIONS:
            raise TokenroofError(f"unknown length distribution '{self.kind}'; known: {', '.join(DISTRIBUTIONS)}")
        if self.mean < 1 or self.spread < 0:
            raise TokenroofError(f"lengths need a mean ≥ 1 and a spread ≥ 0, got {self.mean} and {self.spread}")
        if self.kind == "uniform" and self.spread > 1:
            raise TokenroofError(
                f"uniform lengths span mean·(1 ± spread): a spread of {self.spread:g} reaches below zero tokens (its "
                "draws clipped at 1 would move the mean); at most 1, or a lognormal spread"
            )

    @property
    def shared_prefix(self) -> SharedPrefix | None:
        """The shared prefix these prompts start with (None: none; PromptLengths has one)."""
        return None

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            values = np.full(n, float(self.mean))
        elif self.kind == "uniform":
            values = rng.uniform(self.mean * (1 - self.spread), self.mean * (1 + self.spread), n)
        else:
            mu = math.log(self.mean) - self.spread**2 / 2
            values = rng.lognormal(mu, self.spread, n)
        return np.maximum(np.rint(values), 1).astype(int)


NO_PREFIX = SharedPrefix(0)


@dataclass(frozen=True)
class PromptLengths(Lengths):
    """Prompt lengths whose first tokens are a shared prefix (model/prefix.py): each prompt starts with one of
    `prefix.groups` prefixes of `prefix.tokens` tokens (its first min(tokens, prompt − 1) tokens)."""

    prefix: SharedPrefix = NO_PREFIX

    @property
    def shared_prefix(self) -> SharedPrefix | None:
        return self.prefix if self.prefix.tokens else None


@dataclass(frozen=True)
class LengthShape:
    """How lengths spread about their means (simulate's and plan's --input-dist, --output-dist, --spread): what
    advise's scheduler draws too, so that its cap is simulate's and plan's workload."""

    input_dist: str = "fixed"
    output_dist: str = "fixed"
    spread: float = 0.5

    @property
    def fixed(self) -> bool:
        return self.input_dist == "fixed" and self.output_dist == "fixed"

    def lengths(self, input_len: int, output_len: int, prefix: SharedPrefix | None = None) -> tuple[Lengths, Lengths]:
        """The prompts' lengths (with their shared prefix) and the outputs' about these means."""
        prompts: Lengths = Lengths(input_len, self.input_dist, self.spread)
        if prefix is not None and prefix.tokens:
            prompts = PromptLengths(input_len, self.input_dist, self.spread, prefix=prefix)
        return prompts, Lengths(output_len, self.output_dist, self.spread)

    def text(self) -> str:
        """'prompts lognormal (sigma 0.5), outputs fixed': as drawn."""

        def one(kind: str) -> str:
            what = {"lognormal": f" (sigma {self.spread:g})", "uniform": f" (± {self.spread:.0%})"}
            return kind + what.get(kind, "")

        return f"prompts {one(self.input_dist)}, outputs {one(self.output_dist)}"


def share_prefixes(seqs: list[Sequence], input_len: Lengths, rng: np.random.Generator) -> None:
    """Give each request its prompt's shared prefix (drawn after every other draw: a seed's arrivals and lengths
    stay what they are without prefixes)."""
    prefix = input_len.shared_prefix
    if prefix is None:
        return
    for seq, group in zip(seqs, prefix.draw(rng, len(seqs)), strict=True):
        seq.prefix_group, seq.prefix_tokens = int(group), prefix.tokens


@dataclass(frozen=True)
class Workload:
    rate_req_s: float
    input_len: Lengths
    output_len: Lengths
    num_requests: int = 1000
    burstiness: float = 1.0  # gamma shape of inter-arrival times; inf = a constant rate

    @property
    def mean_context_tokens(self) -> float:
        return mean_context_tokens(self.input_len.mean, self.output_len.mean)

    def arrivals(self, rng: np.random.Generator) -> list[Sequence]:
        if not self.rate_req_s > 0 or not self.burstiness > 0 or self.num_requests < 1:
            raise TokenroofError("the request rate and burstiness must be positive and num_requests ≥ 1")
        n = self.num_requests
        times = arrival_times(self.rate_req_s, self.burstiness, n, rng)
        prompts, outputs = self.input_len.sample(rng, n), self.output_len.sample(rng, n)
        seqs = [
            Sequence(str(i), int(p), int(o), float(t))
            for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))
        ]
        share_prefixes(seqs, self.input_len, rng)
        return seqs


# the clients a user names (simulate --client); "waves": every stream started at once, the next wave of as many sent
# only when the whole last one has ended (LLMPerf before 2024-12-09 collected its requests so)
WAVES = "waves"
CLOSED_CLIENTS = CLOSED_CLIENT_KINDS  # the tables' own list (io.table), WAVES among them
UNTIMED = ("burst", WAVES)  # closed loops started all at once: whose steps do not depend on how long they take
# and the one a replica "kept full" is: streams spread over a loaded request's life, so no two start together and
# no wave forms (what steady production traffic at that concurrency looks like; advise's and plan's figure)
EVEN = "even"
# bench's window at a concurrency c: max(2c, 16) requests completed after the first c (its --requests-per-point
# default, measure/http/config.py), which a staggered closed loop's window takes unless told how many
BENCH_WINDOW_PER_STREAM, BENCH_WINDOW_AT_LEAST = 2, 16


def bench_window(concurrency: int) -> int:
    return max(BENCH_WINDOW_PER_STREAM * concurrency, BENCH_WINDOW_AT_LEAST)


@dataclass(frozen=True)
class ClosedLoop:
    """A client holding `concurrency` requests in flight, each one that ends replaced by the next at once, until
    `num_requests` are sent: `tokenroof bench --concurrency` (its streams start staggered over one probe request's
    life, alone on the server: "staggered"; on a loaded server they start closer than a request's life, and whole
    prompts prefilled together keep them in groups) and `vllm bench serve --max-concurrency` (every stream starts at
    once: "burst"; with fixed lengths they keep finishing, and prefilling, together); "waves" starts them at once
    too but sends the next `concurrency` only when all of the last have ended (LLMPerf before 2024-12-09: streams of
    unequal lengths idle while their wave's slowest finishes)."""

    concurrency: int
    input_len: Lengths
    output_len: Lengths
    num_requests: int
    client: str = "staggered"
    measure: int | None = None  # a staggered loop's window: requests completed in it (None: as bench, 2×, ≥ 16)
    # a staggered loop's start phase: 0, stream i at i/concurrency of the span (as bench starts them); k ≥ 1, the same
    # streams started at uniform random times over the same span (seeded by k, apart from the lengths' draws): how a
    # server's timing can line them up otherwise (whole prompts prefilled together keep whatever groups form)
    phase: int = 0

    def __post_init__(self) -> None:
        if self.phase < 0 or (self.phase and self.client != "staggered"):
            raise TokenroofError(f"a start phase is a staggered loop's, at least 0; got {self.phase} ({self.client})")
        if self.concurrency < 1 or self.num_requests < 1:
            raise TokenroofError(
                f"a closed loop needs a concurrency ≥ 1 and requests ≥ 1, got {self.concurrency} and "
                f"{self.num_requests}"
            )
        if self.client not in (*CLOSED_CLIENTS, EVEN):
            raise TokenroofError(f"unknown client '{self.client}'; known: {', '.join((*CLOSED_CLIENTS, EVEN))}")

    @property
    def mean_context_tokens(self) -> float:
        return mean_context_tokens(self.input_len.mean, self.output_len.mean)

    def requests(self, rng: np.random.Generator, model: StepModel) -> tuple[list[Sequence], list[Sequence]]:
        """The first `concurrency` requests with their start times, and the rest (sent as earlier ones end). A
        staggered client starts stream i at i/concurrency of one request's life (as bench does after its probe), or
        at random over it (`phase`)."""
        n = self.num_requests
        prompts, outputs = self.input_len.sample(rng, n), self.output_len.sample(rng, n)
        seqs = [Sequence(str(i), int(p), int(o), 0.0) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
        share_prefixes(seqs, self.input_len, rng)
        c = min(self.concurrency, n)
        if self.client in ("staggered", EVEN):
            i, o = float(self.input_len.mean), float(self.output_len.mean)
            # bench spreads its streams over one probe request's life, alone on the server; "even" over a life at
            # this concurrency
            loaded = float(c if self.client == EVEN else 1)
            life_s = model.step_s(1.0, i + o / 2, i, i * i) + (o - 1) * model.step_s(loaded, loaded * (i + o / 2))
            if self.phase:
                starts = np.sort(np.random.default_rng(self.phase).uniform(0.0, life_s, c))
            else:
                starts = np.arange(c) * life_s / c
            for seq, start in zip(seqs[:c], starts.tolist(), strict=True):
                seq.arrival_s = start
        return seqs[:c], seqs[c:]


@dataclass(frozen=True)
class Trace:
    """Arrivals replayed from `tokenroof bench`'s requests.jsonl: each finished request's send time and lengths."""

    records: tuple[tuple[float, int, int], ...]  # (arrival s, prompt tokens, output tokens)
    source: str = ""
    history: int = 0  # the first `history` records are the server's earlier traffic: run for the state they leave
    # (which slots llama-server's per-slot KV streams hand out next), not measured
    prefix: SharedPrefix | None = None  # bench's shared prefixes (its header's prefix_len, num_prefixes)
    groups: tuple[int, ...] = ()  # each record's prefix (bench's prefix_group), with `prefix`
    warm: bool = True  # the prefixes start cached (bench sends each once before its sweep); False: a cold server
    # the window bench took the point's figures over (s, on the records' clock), where the file holds one open-loop
    # point: a replay is scored over it, as the measurement was
    window_s: tuple[float, float] | None = None

    @classmethod
    def after(cls, history: list[Trace] | tuple[Trace, ...], trace: Trace, gap_s: float = 30.0) -> Trace:
        """`trace` as the server met it: after `history` (earlier runs, in order, `gap_s` of idle between)."""
        records: list[tuple[float, int, int]] = []
        offset = 0.0
        parts = (*history, trace)
        for part in parts:
            shift = offset
            records += [(t + offset, p, o) for t, p, o in part.records]
            offset = records[-1][0] + gap_s if records else 0.0
        shared = all(part.groups and part.prefix == trace.prefix for part in parts)
        groups = tuple(g for part in parts for g in part.groups) if shared else ()
        prefix = trace.prefix if shared else None
        window = None if trace.window_s is None else (trace.window_s[0] + shift, trace.window_s[1] + shift)
        return cls(tuple(records), trace.source, len(records) - len(trace.records), prefix, groups, window_s=window)

    @classmethod
    def read(cls, path: Path) -> Trace:
        """The completed requests of a bench requests.jsonl; with its header's shared prefixes (`bench --prefix-len`)
        each record's prefix too."""
        rows = []
        prefix: SharedPrefix | None = None
        windows: dict[Any, tuple[float, float] | None] = {}
        labels = set()
        for line, record in read_jsonl(path):
            if isinstance(record, dict) and record.get("type") == "point":
                edges = [record.get("window_start_s"), record.get("window_end_s")]
                numbers = [float(w) for w in edges if isinstance(w, int | float) and not isinstance(w, bool)]
                valid = len(numbers) == 2 and numbers[1] > numbers[0] and not record.get("invalid")
                # a point measured again (bench --resume) replaces its earlier line
                windows[record.get("point")] = (
                    (numbers[0], numbers[1]) if valid and record.get("kind") == "rate" else None
                )
            if isinstance(record, dict) and record.get("type") == "header":
                settings = record.get("settings") or {}
                tokens, groups = settings.get("prefix_len"), settings.get("num_prefixes")
                if isinstance(tokens, int) and isinstance(groups, int) and tokens > 0 and groups > 0:
                    prefix = SharedPrefix(tokens, groups)
            where = f"{path}:{line}"
            if not isinstance(record, dict):
                raise TokenroofError(f"{where}: expected a JSON object (a bench requests.jsonl record)")
            if record.get("type") != "request" or not record.get("ok"):
                continue
            if trace_whole(record.get("index", 0), where, "index", least=None) < 0:
                continue  # a warm-up request
            labels.add(record.get("point"))
            start_s = record.get("start_s")
            if not isinstance(start_s, int | float) or isinstance(start_s, bool) or not math.isfinite(start_s):
                raise TokenroofError(f"{where}: start_s must be a number of seconds, got {start_s!r}")
            prompt = record.get("prompt_tokens")
            group = record.get("prefix_group")
            rows.append(
                (
                    float(start_s),
                    max(trace_whole(prompt, where, "prompt_tokens"), 1) if prompt is not None else 1,
                    trace_whole(record.get("output_tokens"), where, "output_tokens"),
                    group if isinstance(group, int) and not isinstance(group, bool) else -1,
                )
            )
        if not rows:
            raise TokenroofError(f"{path}: no completed requests to replay (an empty trace)")
        rows.sort()
        start = rows[0][0]
        groups = tuple(g for *_, g in rows) if prefix is not None else ()
        # one rate point's window, where every request replayed is that point's (a sweep, or a point cut off
        # before its line: no one window)
        (label, window), *others = list(windows.items()) or [(None, None)]
        window = None if others or labels != {label} else window
        return cls(
            tuple((t - start, p, o) for t, p, o, _ in rows),
            str(path),
            prefix=prefix,
            groups=groups,
            window_s=None if window is None else (window[0] - start, window[1] - start),
        )

    def arrivals(self, rng: np.random.Generator) -> list[Sequence]:
        seqs = [Sequence(str(i), p, max(o, 1), t) for i, (t, p, o) in enumerate(self.records)]
        if self.prefix is not None:
            for seq, group in zip(seqs, self.groups, strict=True):
                if group >= 0:  # as bench sent it: its first prefix.tokens tokens one of the run's prefixes
                    seq.prefix_group, seq.prefix_tokens = group, self.prefix.tokens
        return seqs


def trace_whole(value: Any, where: str, name: str, least: int | None = 0) -> int:
    """A request record's count (tokens, its index): a whole number, at least `least` (None: any)."""
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or (least is not None and value < least):
        floor = "" if least is None else f", {least} or more"
        raise TokenroofError(f"{where}: {name} must be a whole number{floor}, got {value!r}")
    return int(value)


@dataclass
class SimResult:
    sequences: list[Sequence]
    step_starts_s: np.ndarray
    step_durations_s: np.ndarray
    step_batches: np.ndarray
    step_kv_tokens: np.ndarray
    kv_capacity_tokens: int | None = None  # all replicas together
    preemptions: int = 0
    replicas: int = 1
    # per step, what it ran (the scheduler's own inputs to the step model): Σ context, prompt tokens, Σ chunk²
    step_contexts: np.ndarray | None = None
    step_prefill: np.ndarray | None = None
    step_prefill_sq: np.ndarray | None = None
    loop: ClosedLoop | None = None  # the closed-loop client that drove it (None: arrivals at a rate, or a trace)
    step_passes: np.ndarray | None = None  # forward passes per step (more than one only with per-slot KV streams)
    first_measured: int = 0  # requests before this index are a trace's history: simulated, never summarised
    step_tokens: np.ndarray | None = None  # tokens each step emits (None: one per running sequence)
    speculation: dict[str, Any] | None = None  # speculative decoding: what was drafted and accepted (vLLM's counters)
    prefix_cache: dict[str, Any] | None = None  # prefix caching: prompt tokens looked up and hit (vLLM's counters)
    disaggregation: dict[str, Any] | None = None  # disaggregated prefill: the pools, the link, its transfers
    prefill_steps: np.ndarray | None = None  # disaggregated prefill: the prefill pool's steps (step_columns)
    prefill_replicas: int = 0
    prefill_model: StepModel | None = None  # the step model the prefill pool's steps were timed with
    prefill_tp: int | None = None  # the prefill pool's TP (None: the decode pool's)
    # the gap each step's running sequences saw between tokens: its duration, plus prefill steps of their own they
    # waited through (NaN: such a prefill step; None: every gap is its step's duration)
    step_gaps_s: np.ndarray | None = None
    measured_window_s: tuple[float, float] | None = None  # a replayed bench point's own window (Trace.window_s)
    model: StepModel | None = None  # the (decode) step model the steps were timed with (None: not kept)
    replayed: bool = False  # a trace's arrivals: its length is the trace's, not --num-requests
    burstiness: float = 1.0  # the arrivals' gamma shape (1: Poisson; inf: a constant rate)

    def write(self, out_dir: Path, summary: dict[str, Any]) -> None:
        """requests.jsonl (one line per request), timeseries.csv (per step), summary.json."""
        out_dir.mkdir(parents=True, exist_ok=True)
        with (out_dir / "requests.jsonl").open("w") as f:
            for s in self.sequences:
                first, end = s.first_token_s or 0.0, s.finished_s or 0.0
                f.write(
                    json.dumps(
                        {
                            "request_id": s.request_id,
                            "arrival_s": s.arrival_s,
                            "admitted_s": s.admitted_s,
                            "scheduled_s": s.scheduled_s,
                            "first_token_s": first,
                            "finished_s": end,
                            "prompt_tokens": s.prompt_tokens,
                            "output_tokens": s.max_tokens,
                            "preemptions": s.preemptions,
                            "ttft_ms": (first - s.arrival_s) * 1e3,
                            "tpot_ms": (end - first) / (s.max_tokens - 1) * 1e3 if s.max_tokens > 1 else None,
                        }
                    )
                    + "\n"
                )
        steps = zip(self.step_starts_s, self.step_durations_s, self.step_batches, self.step_kv_tokens, strict=True)
        write_rows(
            out_dir / "timeseries.csv",
            [],
            TIMESERIES_COLUMNS,
            ((start, duration, int(batch), int(kv)) for start, duration, batch, kv in steps),
            formats={"start_s": ".6f", "duration_s": ".6f"},  # to the µs: .6g keeps 10 ms past 1000 s
        )
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))

    def measured(self) -> np.ndarray:
        """Which requests the latencies are taken over (in request order), in the window of `window_s`: a staggered
        closed loop's that completed in it (bench), a burst's every one (vLLM's means are over the whole run), an
        open loop's that arrived in it."""
        w0, w1 = self.window_s()
        if self.loop is not None:
            finished = np.array([s.finished_s for s in self.sequences], dtype=float)
            return (finished >= w0) & (finished <= w1)
        arrival = np.array([s.arrival_s for s in self.sequences])
        return (arrival >= w0) & (arrival <= w1) & (np.arange(arrival.size) >= self.first_measured)

    def window_s(self) -> tuple[float, float]:
        """The window the figures are taken over. A closed loop's as its tool takes it: a burst's whole run
        (`vllm bench serve` averages every request), a staggered one's from the completion that replaced the last
        initial request to 2 × concurrency completions later (at least 16, as bench). An open loop's steady state,
        as `bench`'s open loop defines it: from the arrival of the request 10% into the
        run to the last arrival (ramp-up and drain left out), and never before one typical request's lifetime
        (median end-to-end) has passed since the first arrival: until then the running batch is still filling, and a
        short run would read low TPOT and throughput. Arrivals that come as a burst — over less time than a typical
        request takes — have no steady state: the window is then the whole run (stats.open_loop_window, the
        definition bench measures with). A replayed bench point is scored over the window bench took it over."""
        if self.loop is None and self.measured_window_s is not None:
            return self.measured_window_s
        arrivals = np.array([s.arrival_s for s in self.sequences[self.first_measured :]])
        finished = np.array([s.finished_s or 0.0 for s in self.sequences[self.first_measured :]])
        if self.loop is not None:
            ends = np.sort(finished)
            if self.loop.client in UNTIMED or ends.size < 2:
                return float(arrivals.min()), float(ends[-1])
            c = self.loop.concurrency
            open_at = min(c, ends.size - 2)
            close_at = min(open_at + (self.loop.measure or bench_window(c)), ends.size - 1)
            drains = ends.size - c  # past this completion no stream sends again: the batch drains
            if drains > open_at:  # (else no window before the drain: steadiness_warnings says so)
                close_at = min(close_at, drains)
            return float(ends[open_at]), float(ends[close_at])
        return open_loop_window(arrivals, typical_lifetime_s(arrivals, finished), float(finished.max()))

    def _overlap_s(self, w0: float, w1: float) -> np.ndarray:
        """The time each step spends inside [w0, w1]: what the window's time averages weigh each step by."""
        ends = self.step_starts_s + self.step_durations_s
        return np.clip(np.minimum(ends, w1) - np.maximum(self.step_starts_s, w0), 0.0, None)

    def running_batch(self, w0: float | None = None, w1: float | None = None) -> float:
        """The running batch a replica holds, time-averaged over [w0, w1] (default: the window of `window_s`; idle
        time counts): `summary`'s, without the rest of it."""
        if w0 is None or w1 is None:
            w0, w1 = self.window_s()
        return float((self.step_batches * self._overlap_s(w0, w1)).sum() / (w1 - w0) / self.replicas)

    def summary(self, ttft_slo_ms: float | None = None, tpot_slo_ms: float | None = None) -> dict[str, Any]:
        """Throughput, request rate, goodput and running batch over the steady-state window (`window_s`): tokens
        emitted and requests completed in it, the batch time-averaged over it (idle time counts); latencies over
        the requests sent in it (so an overloaded run's growing queue shows)."""
        seqs = self.sequences
        arrival = np.array([s.arrival_s for s in seqs])
        first = np.array([s.first_token_s for s in seqs], dtype=float)
        finished = np.array([s.finished_s for s in seqs], dtype=float)
        # the wait before a step first ran part of its prompt: vLLM's queue time (a request waiting, then scheduled)
        scheduled = np.array([s.scheduled_s for s in seqs], dtype=float)
        out = np.array([s.max_tokens for s in seqs])
        ttft = first - arrival
        tpot = np.where(out > 1, (finished - first) / np.maximum(out - 1, 1), np.nan)
        w0, w1 = self.window_s()
        span = w1 - w0
        sent = self.measured()
        done = (finished >= w0) & (finished <= w1)  # rates count completions: an overloaded server's true rate
        ends = self.step_starts_s + self.step_durations_s
        in_window = (ends >= w0) & (ends <= w1)
        overlap_s = self._overlap_s(w0, w1)
        good = done.copy()
        if ttft_slo_ms is not None:
            good &= ttft * 1e3 <= ttft_slo_ms
        if tpot_slo_ms is not None:
            good &= ~(tpot * 1e3 > tpot_slo_ms)

        def pct(values_s: np.ndarray) -> dict[str, float | None]:
            return percentiles_ms(values_s[sent])

        emitted = self.step_batches if self.step_tokens is None else self.step_tokens
        kv_fraction = None
        if self.kv_capacity_tokens:
            held = float((self.step_kv_tokens * overlap_s).sum()) / span / self.replicas
            kv_fraction = held / (self.kv_capacity_tokens / self.replicas)
        return {
            "requests": len(seqs),
            "requests_in_window": int(sent.sum()),
            "window_start_s": w0,
            "window_end_s": w1,
            "simulated_s": float(finished.max() - arrival.min()),
            "ttft_ms": pct(ttft),
            "tpot_ms": pct(tpot),
            "e2e_ms": pct(finished - arrival),
            "queue_wait_ms": pct(scheduled - arrival),
            "itl_ms": {k: v for k, v in zip(("mean", "p50", "p90", "p99"), self._itl_ms(in_window), strict=True)},
            "throughput_tok_s": float(emitted[in_window].sum() / span),
            "request_throughput_req_s": float(done.sum() / span),
            "goodput_req_s": float(good.sum() / span),
            "replicas": self.replicas,
            "running_batch": self.running_batch(w0, w1),
            "steps": int(self.step_batches.size),
            "preemptions": self.preemptions,
            "kv_cache_tokens": self.kv_capacity_tokens,
            "kv_use_mean_fraction": kv_fraction,
            "slo": None if ttft_slo_ms is None and tpot_slo_ms is None else goodput_slo(ttft_slo_ms, tpot_slo_ms),
            "warnings": self.steadiness_warnings(w0, w1),
            **({} if self.speculation is None else {"speculation": self.speculation}),
            **({} if self.prefix_cache is None else {"prefix_cache": self.cache_in_window(sent)}),
            **({} if self.disaggregation is None else {"disaggregation": self.disaggregation}),
        }

    def cache_in_window(self, sent: np.ndarray) -> dict[str, Any]:
        """The prefix cache's counters over the run, and its hit rate over the requests in the window (the prompt
        tokens they were served from the cache, at their last admission: what bench reads over its window)."""
        assert self.prefix_cache is not None
        chosen = [s for s, inside in zip(self.sequences, sent, strict=True) if inside]
        prompts = sum(s.prompt_tokens for s in chosen)
        hits = sum(min(s.cached_tokens, s.prompt_tokens) for s in chosen)
        return {**self.prefix_cache, "hit_rate": hits / prompts if prompts else None}

    def bill(
        self,
        sm: StepModel,
        tp: int,
        price: Price | None,
        power: PowerModel | None,
        prefill_billing: Billing | None = None,
    ) -> dict[str, Any]:
        """The window's bill (model/cost.py): $ a million output and prompt tokens, mean power, energy per output
        token, over the steps that ended in the window (those throughput counts). `prefill_billing`: a disaggregated
        server's prefill pool on hardware of its own (its price and power; None: the decode pool's)."""
        w0, w1 = self.window_s()
        if self.prefill_steps is not None:
            return self._pools_bill(sm, tp, price, power, w0, w1, prefill_billing)
        steps, outputs = self._decode_steps(w0, w1)
        prompts = float(steps["prefill_tokens"].sum())
        bill = bill_of_steps(sm, steps, w1 - w0, self.replicas, tp, outputs, prompts, price, power)
        return {
            **bill,
            "price": None if price is None else price.to_dict(),
            "power": None if power is None else power.to_dict(),
            "gpus": self.replicas * tp,
        }

    def _pools_bill(
        self,
        sm: StepModel,
        tp: int,
        price: Price | None,
        power: PowerModel | None,
        w0: float,
        w1: float,
        prefill_billing: Billing | None = None,
    ) -> dict[str, Any]:
        """A disaggregated server's bill: the prefill pool's boards (busy or idle) are the prompts' cost, the decode
        pool's the outputs'; the energy is both pools' over the output tokens, each pool's boards at their own power
        (a prefill pool on other hardware: its own price and power model)."""
        from tokenroof.model.cost import PER_MILLION, SECONDS_PER_HOUR, pool_joules

        assert self.prefill_steps is not None
        span = w1 - w0
        start, duration, batch, _, context, prefill, square, _, _, _ = self.prefill_steps
        prefill_pool = window_steps(start, duration, batch, context, prefill, square, w0, w1)
        decode_pool, outputs = self._decode_steps(w0, w1)
        prompts = float(prefill_pool["prefill_tokens"].sum())
        pools = ((prefill_pool, self.prefill_replicas), (decode_pool, self.replicas))
        prefill_replicas, decode_replicas = self.prefill_replicas, self.replicas
        prefill_tp = self.prefill_tp or tp

        prefill_price, prefill_power = (
            (price, power) if prefill_billing is None else (prefill_billing.price, prefill_billing.power)
        )

        def usd_per_million(pool_price: Price | None, gpus: int, tokens: float) -> float | None:
            if pool_price is None or tokens <= 0 or span <= 0:
                return None
            return pool_price.usd_per_hour * gpus * span / SECONDS_PER_HOUR / tokens * PER_MILLION

        bill: dict[str, Any] = {
            "usd_per_million_output_tokens": usd_per_million(price, decode_replicas * tp, outputs),
            "usd_per_million_input_tokens": usd_per_million(prefill_price, prefill_replicas * prefill_tp, prompts),
            "energy_j_per_output_token": None,
            "power_watts_mean": None,
        }
        if power is not None and prefill_power is not None and span > 0:
            models, tps, powers = (self.prefill_model or sm, sm), (prefill_tp, tp), (prefill_power, power)
            joules = sum(
                pool_joules(model, steps, span, replicas, boards, pool_power)
                for model, boards, pool_power, (steps, replicas) in zip(models, tps, powers, pools, strict=True)
            )
            bill["power_watts_mean"] = joules / span
            bill["energy_j_per_output_token"] = joules / outputs if outputs > 0 else None
        pool_sizes: dict[str, Any] = {
            "prefill_gpus": prefill_replicas * prefill_tp,
            "decode_gpus": decode_replicas * tp,
        }
        if prefill_billing is not None:  # on hardware of its own: what its boards cost and draw
            pool_sizes["prefill_price"] = None if prefill_price is None else prefill_price.to_dict()
            pool_sizes["prefill_power"] = None if prefill_power is None else prefill_power.to_dict()
        return {
            **bill,
            "price": None if price is None else price.to_dict(),
            "power": None if power is None else power.to_dict(),
            "gpus": prefill_replicas * prefill_tp + decode_replicas * tp,
            "pools": pool_sizes,
        }

    def _decode_steps(self, w0: float, w1: float) -> tuple[dict[str, np.ndarray], float]:
        """The (decode) steps that ended in [w0, w1], as bill_of_steps takes them, and the tokens they emitted."""
        ends = self.step_starts_s + self.step_durations_s
        emitted = self.step_batches if self.step_tokens is None else self.step_tokens
        computing = self.step_batches  # a prefill step of its own computes its new sequences, not those waiting
        if self.step_gaps_s is not None:
            computing = np.where(np.isfinite(self.step_gaps_s), self.step_batches, emitted)
        steps = window_steps(
            self.step_starts_s,
            self.step_durations_s,
            computing,
            self.step_contexts,
            self.step_prefill,
            self.step_prefill_sq,
            w0,
            w1,
        )
        return steps, float(emitted[(ends >= w0) & (ends <= w1)].sum())

    def steadiness_warnings(self, w0: float, w1: float) -> list[str]:
        """Whether the run was long enough for its figures, rather than print figures that move with --num-requests:
        too few requests for any (alone, where so); an open loop overloaded (then nothing else of the drain or the
        wander: the queue moves every figure); a running batch still growing across the window; the drain reading
        TPOT low; too few stretches of the load for its tails (benchmarks/steadiness.py measures each)."""
        few = self._few_requests_warnings(w0, w1)
        if few:
            return few
        overload = self.overload_warnings(w0, w1)  # past capacity the queue, not the drain or its wander, moves all
        rest = [] if overload else [*self._drain_warnings(w0, w1), *self._stretch_warnings(w0, w1)]
        return [*overload, *self._growth_warnings(w0, w1), *rest]

    def _block_batches(self, w0: float, w1: float, blocks: int) -> np.ndarray:
        """The running batch (all replicas) time-averaged over each of `blocks` equal spans of [w0, w1]."""
        edges = np.linspace(w0, w1, blocks + 1)
        return np.array([(self.step_batches * self._overlap_s(a, b)).sum() / (b - a) for a, b in pairwise(edges)])

    def _growth_warnings(self, w0: float, w1: float) -> list[str]:
        """The batch's trend across the window, told from its noise: a Poisson load's running batch wanders by more
        than 5% between a short window's halves (arrivals bunch, and each step slows as the batch grows), and read
        as growth that had flagged 40% of 1,000-request runs at 40% load. The window's block means (the
        batch-means method of simulation output analysis) give the slope of a straight line and its standard error
        from the residuals, widened for their lag-one correlation; a trend `GROWTH_T` standard errors up is growth."""
        if w1 <= w0:
            return []
        means = self._block_batches(w0, w1, TREND_BLOCKS)
        half = TREND_BLOCKS // 2
        first, second = float(means[:half].mean()), float(means[half:].mean())
        # grown by 5% and by a twentieth of a sequence a replica: at a near-empty server (one-token outputs, a
        # trickle of requests) a few percent of a tiny mean batch is the arrivals' noise, not a queue building
        if not (first > 0 and second > 1.05 * first and second - first > STEADY_SEQUENCES * self.replicas):
            return []
        slope, error = trend(means)
        if slope < GROWTH_T * error:
            return []
        return [
            f"no steady state: the running batch grew from {first / self.replicas:.3g} to "
            f"{second / self.replicas:.3g} across the window ({w0:.3g}–{w1:.3g} s), so TPOT and throughput here "
            "are lower than the load will settle at: simulate more requests (--num-requests), or the rate is "
            "near what the server can carry"
        ]

    def _few_requests_warnings(self, w0: float, w1: float) -> list[str]:
        """Too few requests for any steady figure: under `LEAST_IN_WINDOW` in the window (one request read 141 tok/s
        and 0.47 req/s at 10 req/s), or a staggered closed loop of c streams given no more than 2c requests, whose
        streams stop sending before the first c have been replaced (64 streams on 100 requests read 54 req/s beside
        2,361 tok/s, the batch 19.8: the drain)."""
        if self.replayed or self.measured_window_s is not None:
            return []
        seqs = self.sequences[self.first_measured :]
        loop = self.loop
        if loop is not None and loop.client not in UNTIMED and len(seqs) <= 2 * loop.concurrency:
            return [
                f"{TOO_FEW} {len(seqs):,} over {loop.concurrency} streams leave no steady window (the "
                f"streams stop sending before the first {loop.concurrency} are replaced, so these figures are the "
                f"ramp and the drain): simulate at least {2 * loop.concurrency + bench_window(loop.concurrency):,} "
                "requests (--num-requests)"
            ]
        inside = int(self.measured().sum())
        if inside < LEAST_IN_WINDOW:
            return [
                f"{TOO_FEW} {inside} in the window ({w0:.3g}–{w1:.3g} s), too few for a rate or a percentile: "
                "simulate more requests (--num-requests)"
            ]
        return self._no_window_warnings(seqs, w1) if self._own_length() else []

    def _no_window_warnings(self, seqs: list[Sequence], w1: float) -> list[str]:
        """An open loop whose arrivals end before a steady window opens: the window then spans the whole run
        (open_loop_window) and holds the ramp and the drain (10 requests at 10 req/s read 'overloaded' and had plan
        add replicas for them). Told from a queue's long lives, which also leave no window, by the requests' lives
        from their prompt's first step: the arrivals must outlast the ramp and one of those, as the window asks."""
        arrivals = np.array([s.arrival_s for s in seqs])
        if w1 <= arrivals.max():  # a steady window: it ends at the last arrival
            return []
        started = np.array([s.arrival_s if s.scheduled_s is None else s.scheduled_s for s in seqs])
        finished = np.array([s.finished_s or 0.0 for s in seqs])
        life = typical_lifetime_s(started, finished)
        if open_loop_window(arrivals, life, float(finished.max()))[1] <= arrivals.max():
            return []  # served, there is a window: the lives are a queue's (overload_warnings)
        span = float(arrivals.max() - arrivals.min())
        more = f" (at least {math.ceil(2.5 * life * len(seqs) / span):,} at this rate)" if span > 0 else ""
        return [
            f"{TOO_FEW} {len(seqs):,} arrive over {span:.3g} s, less than a ramp and a request's typical life "
            f"({life:.3g} s) after it: no steady window, so these figures are the ramp and the drain: simulate more "
            f"requests{more} (--num-requests)"
        ]

    def _own_length(self) -> bool:
        """Whether the run's length is simulate's to choose (--num-requests): an open loop's arrivals at a rate, not a
        closed loop (its window is the client's), nor a trace (its length is the trace's)."""
        return self.loop is None and not self.replayed and self.measured_window_s is None

    def _drain_warnings(self, w0: float, w1: float) -> list[str]:
        """An open loop's requests that arrive in the window decode on after it, and once the last request is
        admitted the running batch only drains: its steps shorten (fewer sequences, no prompts), and where a request
        lives long next to the run (near saturation, or few requests) much of the window's decoding is in those
        steps and TPOT reads low. Estimated from the steps: the decoding after the last admission run at the
        window's mean step instead of the drain's (an 8B model at 95% load on 300 requests: 25% of it, TPOT 31%
        under a 40,000-request run's; on 4,000, 1.4%). Said past `DRAIN_BIAS`; past capacity the queue keeps the
        batch full after the last arrival, so the last admission, not arrival, starts the drain."""
        if not self._own_length() or w1 <= w0:
            return []
        measured = self.sequences[self.first_measured :]
        admitted = [s.admitted_s for s in measured if s.admitted_s is not None]
        spans = np.array(
            [
                (s.first_token_s, s.finished_s)
                for s in measured
                if w0 <= s.arrival_s <= w1 and s.first_token_s is not None and s.finished_s is not None
            ],
            dtype=float,
        ).reshape(-1, 2)
        decoding = float((spans[:, 1] - spans[:, 0]).sum())
        if decoding <= 0 or not admitted:
            return []
        last = max(admitted)
        after = float(np.clip(spans[:, 1] - np.maximum(spans[:, 0], last), 0.0, None).sum())
        # each step's duration as its sequences waited it (weighed by the running batch: a token's wait, as TPOT
        # is): inside the window by the share of each step in it, in the drain every step after the last admission
        d = self.step_durations_s
        inside = self.step_batches * self._overlap_s(w0, w1) / np.where(d > 0, d, 1.0)
        draining = np.where(self.step_starts_s >= last, self.step_batches, 0.0)
        if after <= 0 or inside.sum() <= 0 or draining.sum() <= 0:
            return []
        shorter = float((d * draining).sum() / draining.sum()) / float((d * inside).sum() / inside.sum())
        if shorter >= 1:
            return []
        low = after * (1 / shorter - 1) / (decoding + after * (1 / shorter - 1))  # TPOT under what it would read
        if low <= DRAIN_BIAS:
            return []
        return [
            f"short run: {after / decoding:.0%} of the decoding by the window's requests came after the last "
            f"admission, while the batch drained in steps {1 - shorter:.0%} shorter than the window's, so TPOT here "
            f"reads about {low:.0%} low: simulate more requests (--num-requests)"
        ]

    def _stretch_warnings(self, w0: float, w1: float) -> list[str]:
        """Tail latencies come from the load's excursions, and a window holding few independent stretches of them
        samples few: its p99 TPOT reads low (8–9% at 90–95% load on 4,000 requests). How long an excursion lasts:
        requests live L (the typical lifetime), and where each step slows with the batch (elasticity ε of the step
        time in the batch, from the step model at the window's mean batch and context) a batch above its mean
        slows its own drain: it relaxes over τ = L / (1 − ε), the linearised fluid balance dB/dt = λ − B / E2E(B)
        (measured on the simulated load it runs 1–1.5× that, longer near saturation). The window holds span / τ
        stretches on each replica (their loads wander apart); under `LEAST_STRETCHES` in all, said — where
        ε ≥ `LEAST_ELASTICITY` (below it the step barely moves with the batch, nor do the tails with the
        excursions). From the model, not from the run's own wander: a run whose load happened not to wander would
        read many stretches and go unsaid, the very run whose p99 missed the excursions."""
        if not self._own_length() or w1 <= w0 or self.model is None:
            return []
        overlap = self._overlap_s(w0, w1)
        busy = float((self.step_batches * overlap).sum())
        if busy <= 0 or self.step_contexts is None:
            return []
        batch = busy / (w1 - w0) / self.replicas
        context = float((self.step_contexts * overlap).sum()) / busy
        up, down = (float(self.model.step_time_s(b, context)) for b in (batch * 1.01, batch / 1.01))
        elasticity = math.log(up / down) / (2 * math.log(1.01))
        if elasticity < LEAST_ELASTICITY:
            return []
        measured = self.sequences[self.first_measured :]
        arrivals = np.array([s.arrival_s for s in measured])
        ends = np.array([np.nan if s.finished_s is None else s.finished_s for s in measured])
        lifetime = typical_lifetime_s(arrivals, ends)
        if lifetime <= 0:
            return []
        relax = lifetime / max(1 - elasticity, 0.05)
        stretches = self.replicas * (w1 - w0) / relax  # each replica's load wanders on its own
        # arrivals of gamma shape β vary as 1/β of Poisson's: the same tail takes 1/β the stretches (none: constant)
        if stretches * self.burstiness >= LEAST_STRETCHES:
            return []
        across = "" if self.replicas == 1 else f" on each of {self.replicas} replicas"
        regular = (
            ""
            if self.burstiness == 1
            else f", worth {stretches * self.burstiness:.0f} at burstiness {self.burstiness:g}"
        )
        return [
            f"few stretches: requests live ~{lifetime:.2g} s and each step slows with the batch (elasticity "
            f"{elasticity:.2f}), so an excursion of the load lasts ~{relax:.2g} s and the window ({w1 - w0:.3g} s"
            f"{across}) holds about {stretches:.0f} of them{regular}: its p99 latencies rest on few and read low; "
            "simulate more requests (--num-requests)"
        ]

    def overload_warnings(self, w0: float, w1: float) -> list[str]:
        """An open loop offered more than the servers carry: requests arrive faster than they complete, the queue and
        TTFT grow for as long as the run lasts (a capped running batch does not grow: only this tells)."""
        if self.loop is not None or w1 <= w0:
            return []
        measured = self.sequences[self.first_measured :]  # a trace's history, and the idle gap after it, left out
        arrival = np.array([s.arrival_s for s in measured])
        finished = np.array([s.finished_s or 0.0 for s in measured])
        span = float(arrival.max() - arrival.min())
        if arrival.size < 2 or span <= 0:
            return []
        offered = (arrival.size - 1) / span  # the rate requests came at (a short run's window is the whole run)
        carried = float(((finished >= w0) & (finished <= w1)).sum()) / (w1 - w0)
        expected = offered * (w1 - w0)  # completions the window would hold if every arrival were carried
        # and short of it by more than Poisson arrivals' own noise: 50 requests at 2% load had read overloaded
        short = expected - carried * (w1 - w0)
        if offered <= 0 or carried >= OVERLOAD * offered or short <= OVERLOAD_SD * math.sqrt(expected):
            return []
        return [
            f"{OVERLOADED} {offered:.3g} req/s offered, {carried:.3g} carried: fewer requests completed than arrived, "
            "so the queue and TTFT grew across the run (these figures grow with --num-requests); past what the server "
            "holds they grow for as long as it lasts (lower the rate, or add replicas), near it a short run's queue "
            "still filling reads so too (simulate more requests to tell)"
        ]

    def _itl_ms(self, in_window: np.ndarray) -> list[float | None]:
        """The gaps between a running sequence's tokens: each decode step's duration, with the prefill steps of their
        own its sequences waited through before it (on its replica); None where no step decoded (every request one
        token, prefilled in steps of their own) or where no request has a second token (each one token: there is no
        gap between tokens, and the steps are prefills)."""
        if all(s.max_tokens <= 1 for s in self.sequences[self.first_measured :]):
            return [None] * 4
        durations = self.step_durations_s
        if self.step_gaps_s is not None:
            decoding = np.isfinite(self.step_gaps_s)
            if not decoding.any():
                return [None] * 4
            durations = self.step_gaps_s
            in_window = in_window & decoding if (in_window & decoding).any() else decoding
        steps = durations[in_window] if in_window.any() else durations
        return [float(steps.mean() * 1e3), *(float(np.percentile(steps, q) * 1e3) for q in (50, 90, 99))]


def goodput_slo(ttft_slo_ms: float | None, tpot_slo_ms: float | None) -> dict[str, Any]:
    """The targets goodput counts against: each request's own TTFT and TPOT (statistic "request", vLLM's goodput)."""
    return {"statistic": "request", "ttft_ms": ttft_slo_ms, "tpot_ms": tpot_slo_ms}


def percentiles_ms(values_s: np.ndarray) -> dict[str, float | None]:
    """Mean and p50/p90/p99 in ms of durations in seconds (stats.percentiles: as bench summarises its own)."""
    return percentiles(values_s)


@dataclass
class Replica:
    """One engine: its scheduler and the step in flight (None when idle), or the run of quiet steps in flight."""

    scheduler: BatchScheduler
    plan: StepPlan | None = None
    run: QuietRun | None = None

    @property
    def outstanding(self) -> int:
        """What a least-outstanding router compares: queued, prefilling (a long prompt chunked over several steps
        is work in hand) and running, as the emulator's fleet counts it."""
        return self.scheduler.outstanding


STEADY_SEQUENCES = 0.05  # the least growth of the mean running batch (a replica) that _growth_warnings names
TREND_BLOCKS = 16  # the window's spans whose mean batches tell a trend from noise (_growth_warnings)
GROWTH_T = 3.0  # standard errors of the batch's slope that read as growth (~1 in 30 runs at 40–60% load at most)
LEAST_IN_WINDOW = 10  # requests in the window below which no figure is steady (_few_requests_warnings)
LEAST_STRETCHES = 20  # independent stretches of the load a window needs before its p99 is read (_stretch_warnings)
LEAST_ELASTICITY = 0.1  # a step slower by less than this share of the batch's growth leaves the tails to the arrivals
DRAIN_BIAS = 0.03  # how low the drain may read TPOT before _drain_warnings says so


def simulate(
    model: StepModel,
    workload: Workload | Trace | ClosedLoop,
    max_num_seqs: int = 256,
    seed: int = 0,
    kv_capacity_tokens: int | None = None,
    block_size: int = 16,
    replicas: int = 1,
    router: str = "round-robin",
    max_num_batched_tokens: int | None = None,
    per_slot_kv: bool = False,
    slot_order: list[int] | None = None,
    speculation: Speculation | None = None,
    prefix_caching: bool = False,
    separate_prefill: bool = False,
    reserve_output: bool = False,
) -> SimResult:
    """Run the workload through `replicas` continuous-batching schedulers behind a router, on a virtual clock.

    Events in time order: an arrival is routed (round-robin; to the replica with the fewest outstanding requests;
    or to one uniformly at random, request by request: what an L4 balancer gives when each request opens its own
    connection) and wakes an idle replica; a step end completes that replica's step and plans its next one.
    Round-robin over Poisson arrivals gives each replica every `replicas`-th arrival, gamma-distributed gaps of shape
    `replicas`: far smoother than Poisson, so its tails are those of one replica at `Workload(burstiness=replicas)`;
    a random router leaves each replica's arrivals Poisson (for Poisson input).
    """
    if replicas < 1:
        raise TokenroofError(f"replicas must be at least 1, got {replicas}")
    routing = Router(router, replicas, seed)
    rng = np.random.default_rng(seed)
    if isinstance(workload, ClosedLoop):
        first, rest = workload.requests(rng, model)
        waiting_to_send: deque[Sequence] = deque(rest)
    else:
        first, waiting_to_send = workload.arrivals(rng), deque()
    # two time-ordered sources of arrivals: the scheduled ones (in order), and a closed loop's replacements (each
    # sent as a step ends, so in order too); the next arrival is the earlier of their heads
    scheduled = sorted(first, key=lambda s: s.arrival_s)
    times = [seq.arrival_s for seq in scheduled] + [math.inf]  # a sentinel past the last
    replacements: deque[Sequence] = deque()
    next_scheduled = 0
    engines = [
        Replica(
            BatchScheduler(
                model,
                max_num_seqs,
                kv_capacity_tokens,
                block_size,
                max_num_batched_tokens,
                per_slot_kv,
                speculation=speculation,
                seed=seed + 1 + index,  # the acceptance draws: one stream per replica, apart from the arrivals'
                prefix_caching=prefix_caching,
                separate_prefill=separate_prefill,
                reserve_output=reserve_output,
            )
        )
        for index in range(replicas)
    ]
    if prefix_caching:
        warm_prefixes([engine.scheduler for engine in engines], workload)
    if slot_order is not None:  # per-slot KV streams: the slots as the server had used them
        for engine in engines:
            engine.scheduler.restore_slots(slot_order)
    done: list[Sequence] = []
    record: list[float] = []  # every step, in the order they were planned (step_row), since the last quiet run
    blocks: list[np.ndarray] = []  # the steps before it, as rows: the steps one at a time, and each quiet run
    ends: list[tuple[float, int]] = []  # heap of (step end, replica)

    closed_fleet = isinstance(workload, ClosedLoop) and replicas > 1
    waves = isinstance(workload, ClosedLoop) and workload.client == WAVES
    wave_size = wave_left = len(first)

    def next_event_s() -> float:
        """The earliest event that could change a replica's next step: an arrival (scheduled, or a closed loop's
        replacement; with several replicas another's step end may send one)."""
        soonest = min(times[next_scheduled], replacements[0].arrival_s if replacements else math.inf)
        return min(soonest, ends[0][0]) if closed_fleet and ends else soonest

    def start_step(index: int, now: float) -> None:
        engine = engines[index]
        scheduler = engine.scheduler
        # the next scheduled arrival bounds the next event: no quiet run when it is a few steps away (the hot path)
        quiet = now + QUIET_RUN_LEAST * scheduler.last_step_s < times[next_scheduled]
        engine.run = run = scheduler.plan_quiet_run(now, next_event_s()) if quiet else None
        if run is not None:  # steps in which nothing changes, taken at once
            engine.plan = run.last
            if record:
                blocks.append(step_columns(record).T)
                record.clear()
            blocks.append(quiet_rows(run))
            heapq.heappush(ends, (run.end_s, index))
            return
        engine.plan = plan = engine.scheduler.plan_step(now)
        if plan is not None:
            record.extend(step_row(plan))
            heapq.heappush(ends, (plan.start_s + plan.duration_s, index))

    while True:
        arrival_s = times[next_scheduled]
        from_scheduled = not replacements or arrival_s <= replacements[0].arrival_s
        if not from_scheduled:
            arrival_s = replacements[0].arrival_s
        if ends and ends[0][0] < arrival_s:
            end_s, index = heapq.heappop(ends)
            engine = engines[index]
            assert engine.plan is not None
            if engine.run is not None:
                finished = engine.scheduler.complete_quiet_run(engine.run)
            else:
                finished = engine.scheduler.complete_step(engine.plan)
            done.extend(finished)
            for _ in finished:  # a closed loop sends the next request as one ends (after this replica plans on)
                if waves:  # … or the next wave as the last of this one ends
                    wave_left -= 1
                    if wave_left == 0 and waiting_to_send:
                        wave = [waiting_to_send.popleft() for _ in range(min(wave_size, len(waiting_to_send)))]
                        wave_left = len(wave)
                        for seq in wave:
                            seq.arrival_s = end_s
                        replacements.extend(wave)
                elif waiting_to_send:
                    seq = waiting_to_send.popleft()
                    seq.arrival_s = end_s
                    replacements.append(seq)
            start_step(index, end_s)
            continue
        if arrival_s == math.inf:  # nothing left to arrive, and no step under way
            break
        if from_scheduled:
            seq = scheduled[next_scheduled]
            next_scheduled += 1
        else:
            seq = replacements.popleft()
        index = routing.pick(lambda i: engines[i].outstanding, prefix_of(seq))
        engines[index].scheduler.submit(seq)
        if engines[index].plan is None:
            start_step(index, seq.arrival_s)
    done.sort(key=lambda s: int(s.request_id))
    preemptions = sum(e.scheduler.preemptions for e in engines)
    capacity = None if kv_capacity_tokens is None else kv_capacity_tokens * replicas
    columns = np.concatenate([*blocks, step_columns(record).T]).T
    if replicas > 1:  # a quiet run records its steps when it starts: the replicas' rows in order of start
        columns = columns[:, np.argsort(columns[0], kind="stable")]
    start, duration, batch, kv, context, prefill, prefill_sq, passes, tokens, gaps = columns
    alone = not np.isfinite(gaps).all()  # prefill steps of their own: their tokens are the new sequences' first
    drafted = None
    if speculation is not None:
        counts = [e.scheduler.spec_counts() for e in engines]
        drafted = speculation_summary(speculation, counts)
    loop = workload if isinstance(workload, ClosedLoop) else None
    cached = prefix_summary([e.scheduler.prefix_counts() for e in engines]) if prefix_caching else None
    return SimResult(
        done,
        start,
        duration,
        batch.astype(int),
        kv,
        capacity,
        preemptions,
        replicas,
        context,
        prefill,
        prefill_sq,
        loop,
        passes.astype(int),
        workload.history if isinstance(workload, Trace) else 0,
        None if speculation is None and not alone else tokens,
        drafted,
        cached,
        step_gaps_s=None if np.array_equal(gaps, duration) else gaps,
        measured_window_s=workload.window_s if isinstance(workload, Trace) else None,
        model=model,
        replayed=isinstance(workload, Trace),
        burstiness=workload.burstiness if isinstance(workload, Workload) else 1.0,
    )


def prefix_summary(counts: list[PrefixCounts | None]) -> dict[str, Any]:
    """The replicas' prefix-cache counters summed, in vLLM's terms (prompt tokens queried and hit, the whole run)."""
    total = PrefixCounts(sum(c.queries for c in counts if c), sum(c.hits for c in counts if c))
    return {"queries_tokens": total.queries, "hits_tokens": total.hits, "hit_rate": total.hit_rate}


def window_steps(
    start: np.ndarray,
    duration: np.ndarray,
    batch: np.ndarray,
    context: np.ndarray | None,
    prefill: np.ndarray | None,
    square: np.ndarray | None,
    w0: float,
    w1: float,
) -> dict[str, np.ndarray]:
    """The steps that ended in [w0, w1], as model.cost's bill_of_steps and pool_joules take them (a column not
    recorded counts as zeros)."""
    inside = (start + duration >= w0) & (start + duration <= w1)
    zeros = np.zeros(duration.size)
    return {
        "duration_s": duration[inside],
        "batch": batch[inside],
        "context_tokens": (zeros if context is None else context)[inside],
        "prefill_tokens": (zeros if prefill is None else prefill)[inside],
        "prefill_sq_tokens": (zeros if square is None else square)[inside],
    }


def step_row(plan: StepPlan) -> tuple[float, ...]:
    """What a simulation keeps of a step (a flat row: keeping the plans would hold every request the garbage
    collector then walks); `step_columns` reads the rows back."""
    return (
        plan.start_s,
        plan.duration_s,
        plan.batch,
        plan.kv_tokens,
        plan.context_tokens,
        plan.prefill_tokens,
        plan.prefill_sq,
        plan.passes,
        plan.batch if plan.emitted < 0 else plan.emitted,  # StepPlan.tokens, without a property call a step
        plan.duration_s + plan.waited_s if plan.decoding else math.nan,
    )


def quiet_rows(run: QuietRun) -> np.ndarray:
    """A quiet run's steps as rows of `step_row`'s columns (no prompts, every sequence one token)."""
    rows = np.zeros((run.start_s.size, STEP_COLUMNS))
    rows[:, 9] = run.duration_s
    rows[0, 9] += run.waited_s  # the gaps: the first step's after any prefill steps its sequences waited through
    rows[:, 0], rows[:, 1], rows[:, 3], rows[:, 4] = run.start_s, run.duration_s, run.kv_tokens, run.context_tokens
    rows[:, 2], rows[:, 7], rows[:, 8] = run.batch, run.passes, run.last.tokens
    return rows


STEP_COLUMNS = 10  # step_row's


def step_columns(record: list[float]) -> np.ndarray:
    """`step_row`s, flattened, as columns: start, duration, batch, KV held, Σ context, prompt tokens, Σ chunk²,
    passes, tokens emitted."""
    return np.array(record, dtype=float).reshape(-1, STEP_COLUMNS).T


def warm_prefixes(schedulers: list[BatchScheduler], workload: Workload | Trace | ClosedLoop) -> None:
    """Start each scheduler with the workload's shared prefixes cached, as a server in service has them (a trace:
    as bench left its server, unless the trace says cold)."""
    if isinstance(workload, Trace):
        prefix = workload.prefix if workload.warm else None
    else:
        prefix = workload.input_len.shared_prefix
    if prefix is None or not prefix.tokens:
        return
    for scheduler in schedulers:
        for group in range(prefix.groups):
            scheduler.warm(group, prefix.tokens)


def speculation_summary(speculation: Speculation, counts: list[SpecCounts | None]) -> dict[str, Any]:
    """The speculation configured and what the replicas' draws came to, in vLLM's counter terms."""
    each = [c for c in counts if c is not None]
    by_position = [sum(c.accepted_by_position[k] for c in each) for k in range(speculation.num_tokens)]
    measured = measured_acceptance(
        sum(c.drafts for c in each),
        sum(c.draft_tokens for c in each),
        sum(c.accepted_tokens for c in each),
        by_position,
    )
    return {"configured": speculation.to_dict(), "drawn": None if measured is None else measured.to_dict()}


def simulate_disaggregated(
    model: StepModel,
    workload: Workload | Trace,
    disaggregation: Disaggregation,
    max_num_seqs: int = 256,
    seed: int = 0,
    kv_capacity_tokens: int | None = None,
    block_size: int = 16,
    prefix_caching: bool = False,
    prefill_model: StepModel | None = None,
    speculation: Speculation | None = None,
    reserve_output: bool = False,
) -> SimResult:
    """Prefill and decode on pools of their own, joined by a KV transfer (model/disagg.py), on a virtual clock.

    Each prefill replica is a scheduler whose requests make one token (the prefill) with its own prompt budget; a
    prompt whose prefill ends queues on its replica's link (one transfer at a time); at the transfer's end a decode
    replica (the fewest outstanding) takes it with its KV in place. The result's steps and batches are the decode
    pool's (what throughput and TPOT count); `disaggregation` in the summary states the prefill pool's busy share
    and the transfers' times. The prefill replicas' KV cache is not limited (it holds a prompt until it is sent).
    With `speculation` the decode replicas speculate, and a proposer with weights of its own (a draft model, an
    EAGLE/MTP head) runs its pass over each prompt on the prefill replica, as colocated; its KV crosses the link with
    the target's when `disaggregation.transfer` counts it (Deployment.disaggregation does)."""
    rng = np.random.default_rng(seed)
    arrivals = sorted(workload.arrivals(rng), key=lambda s: s.arrival_s)
    dis = disaggregation
    prefill_sm = prefill_model or disaggregation.prefill_model or model
    # a prefill replica's sequences end as their prompt does, so none holds a decode token of its budget: its cap
    # only bounds the prompts admitted at once, under the budget
    budget = dis.prefill_budget_tokens
    cap = max(max_num_seqs, 1024)
    if budget is not None:
        cap = max(min(cap, budget - 1), 1)
    prefillers = [
        BatchScheduler(
            prefill_sm,
            max_num_seqs=cap,
            max_num_batched_tokens=budget,
            block_size=block_size,
            prefix_caching=prefix_caching,
            speculation=None if speculation is None or speculation.draft is None else speculation,
        )
        for _ in range(dis.prefill_replicas)
    ]
    decoders = [
        BatchScheduler(
            model,
            max_num_seqs,
            kv_capacity_tokens,
            block_size,
            speculation=speculation,
            seed=seed + 1 + i,
            reserve_output=reserve_output,
        )
        for i in range(dis.decode_replicas)
    ]
    if prefix_caching:
        warm_prefixes(prefillers, workload)
    pools: dict[str, list[BatchScheduler]] = {"prefill": prefillers, "decode": decoders}
    plans: dict[tuple[str, int], StepPlan | None] = {}
    events: list[tuple[float, int, str, int, Any]] = []  # (time, order, kind, replica, payload)
    order = 0
    link_free = [0.0] * dis.prefill_replicas
    original: dict[str, Sequence] = {}
    record: list[float] = []  # the decode pool's steps, as simulate records them
    prefill_record: list[float] = []  # the prefill pool's, for its bill
    transfers_s, done = [], []

    def push(t: float, kind: str, replica: int, payload: Any = None) -> None:
        nonlocal order
        heapq.heappush(events, (t, order, kind, replica, payload))
        order += 1

    def start(pool: str, index: int, now: float) -> None:
        plan = pools[pool][index].plan_step(now)
        plans[(pool, index)] = plan
        if plan is None:
            return
        (record if pool == "decode" else prefill_record).extend(step_row(plan))
        push(plan.end_s, pool, index)

    for seq in arrivals:
        push(seq.arrival_s, "arrival", -1, seq)
    while events:
        now, _, kind, index, payload = heapq.heappop(events)
        if kind == "arrival":
            seq = payload
            original[seq.request_id] = seq
            target = min(range(dis.prefill_replicas), key=lambda i: prefillers[i].outstanding)
            job = Sequence(seq.request_id, seq.prompt_tokens, 1, seq.arrival_s)
            job.prefix_group, job.prefix_tokens = seq.prefix_group, seq.prefix_tokens
            prefillers[target].submit(job)
            if plans.get(("prefill", target)) is None:
                start("prefill", target, now)
        elif kind == "transfer":
            seq = payload
            seq.kv_ready = True
            target = min(range(dis.decode_replicas), key=lambda i: decoders[i].outstanding)
            decoders[target].submit(seq)
            if plans.get(("decode", target)) is None:
                start("decode", target, now)
        else:
            plan = plans[(kind, index)]
            assert plan is not None
            finished = pools[kind][index].complete_step(plan)
            if kind == "prefill":
                for job in finished:
                    seq = original[job.request_id]
                    seq.prefilled_s, seq.scheduled_s = now, job.scheduled_s  # its queue ended on the prefill pool
                    begin = max(now, link_free[index])
                    link_free[index] = begin + dis.transfer.time_s(seq.prompt_tokens)
                    transfers_s.append(link_free[index] - now)
                    push(link_free[index], "transfer", index, seq)
            else:
                done.extend(finished)
            start(kind, index, now)
    done.sort(key=lambda s: int(s.request_id))
    start_s, duration, batch, kv, context, prefill, prefill_sq, passes, tokens, _ = step_columns(record)
    prefill_steps = step_columns(prefill_record)
    prefill_busy_s = float(prefill_steps[1].sum())  # the prefill pool's step durations
    span = max(s.finished_s or 0.0 for s in done) - min(s.arrival_s for s in done) if done else 0.0
    waits = np.array(transfers_s)
    summary = {
        **dis.to_dict(),
        "prefill_busy_fraction": prefill_busy_s / span / dis.prefill_replicas if span > 0 else None,
        "kv_transfer_ms": percentiles(waits) if waits.size else None,
    }
    result = SimResult(
        done,
        start_s,
        duration,
        batch.astype(int),
        kv,
        None if kv_capacity_tokens is None else kv_capacity_tokens * dis.decode_replicas,
        sum(e.preemptions for e in decoders),
        dis.decode_replicas,
        context,
        prefill,
        prefill_sq,
        None,
        passes.astype(int),
        workload.history if isinstance(workload, Trace) else 0,
        None if speculation is None else tokens,
        None if speculation is None else speculation_summary(speculation, [d.spec_counts() for d in decoders]),
    )
    result.disaggregation = summary
    result.measured_window_s = workload.window_s if isinstance(workload, Trace) else None
    result.model, result.replayed = model, isinstance(workload, Trace)
    result.burstiness = workload.burstiness if isinstance(workload, Workload) else 1.0
    result.prefill_steps, result.prefill_replicas = prefill_steps, dis.prefill_replicas
    result.prefill_model, result.prefill_tp = prefill_sm, dis.prefill_tp
    return result
