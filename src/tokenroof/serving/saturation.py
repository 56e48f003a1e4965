"""One replica kept full at a batch cap, prefill included: what `advise` and `plan` answer, from `simulate`'s scheduler.

A server whose `max_num_seqs` is the question is measured the way a closed-loop client at
concurrency N = the cap measures it (`simulate.ClosedLoop`): every finished request is
replaced at once, so the running batch stays at the cap and each step also prefills the
prompts of the requests that replace the finished ones.

- `even` (the default: steady traffic at that concurrency): the streams start spread over one
  loaded request's life, so no wave forms; the figures are taken over 10 × N requests (at
  least 200) completed after every initial one was replaced (ramp-up and drain left out);
- `staggered` (tokenroof bench, to be true to its files): spread over one probe request's
  life alone on the server, the same window;
- `burst` (`vllm bench serve --max-concurrency N`): every stream starts at once and the
  figures are over the whole run, the first wave included, as vLLM takes them.

On llama-server a staggered loop's streams line up into groups that finish, and are replaced and prefilled,
together: its log shows a request that arrives while the server launches others joining them, so groups one step
apart merge (2026-12-07f at 10 streams: groups of 1, 2, 3 and 4 merged into 3 and 7). Which groups form depends on
how the streams started and on a few ms of timing, and with them the TTFT tail, where TPOT barely moves: the same
server, cap and client measured p99 TTFT 1,838 ms on one run and 1,029 on the next, where bench's own stagger
simulates 1,329 and ten start phases 1,132-1,927. `advise_cap` with `phases` checks its cap over that many start
phases (`phase_band`) and keeps a cap every phase meets. (tokenroof serve's four runs kept bench's stagger: their
TTFT tails sat at its phase, so a server that launches at step boundaries alone is not checked this way.)

throughput: output tokens per second over the window; TPOT: (last token − first token) ÷
(output − 1); TTFT: send to first token — the wait a client at that concurrency sees (it
sends only when one of its requests ends), not a queue that grows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model.prefix import VLLM_BLOCK_SIZE, reserved_life_tokens
from tokenroof.model.stepmodel import StepModel, mean_context_tokens
from tokenroof.serving.advice import advice_dict
from tokenroof.serving.engine.core import PLAIN, Server
from tokenroof.serving.simulate import EVEN, UNTIMED, ClosedLoop, Lengths, Workload, simulate
from tokenroof.style import fmt_beside

STATISTICS = ("mean", "p50", "p90", "p99")


def measured(stats: dict[str, float | None]) -> dict[str, float]:
    """The statistics of a run that had requests to measure (at_cap keeps a window full of them)."""
    if any(v is None for v in stats.values()):
        raise TokenroofError("the simulated window holds no request to measure")
    return {k: float(v) for k, v in stats.items() if v is not None}


@dataclass(frozen=True)
class AtCap:
    """One replica held at `max_num_seqs` running sequences."""

    max_num_seqs: int
    throughput_tok_s: float
    tpot_ms: dict[str, float]
    ttft_ms: dict[str, float]
    running_batch: float
    preemptions: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_num_seqs": self.max_num_seqs,
            "throughput_tok_s": self.throughput_tok_s,
            "tpot_ms": self.tpot_ms,
            "ttft_ms": self.ttft_ms,
            "running_batch": self.running_batch,
            "preemptions": self.preemptions,
        }


MEASURED_PER_STREAM = 10  # a staggered loop's window holds this many requests per stream (at least MEASURED_AT_LEAST)
MEASURED_AT_LEAST = 200
PROMPTS_PER_STREAM = 10  # a burst run sends this many per stream (at least BURST_AT_LEAST), as `--num-prompts` often is
BURST_AT_LEAST = 100


def closed_loop(
    concurrency: int,
    input_len: Lengths,
    output_len: Lengths,
    client: str = EVEN,
    requests: int | None = None,
    phase: int = 0,
) -> ClosedLoop:
    """The closed loop `at_cap` runs: enough requests for its window (`requests`: a burst run's size as measured;
    `phase`: a staggered loop's start phase, ClosedLoop.phase)."""
    if client in UNTIMED:
        return ClosedLoop(
            concurrency,
            input_len,
            output_len,
            requests or max(BURST_AT_LEAST, PROMPTS_PER_STREAM * concurrency),
            client,
        )
    measure = max(MEASURED_AT_LEAST, MEASURED_PER_STREAM * concurrency)
    return ClosedLoop(concurrency, input_len, output_len, 2 * concurrency + measure, client, measure, phase)


def at_cap(
    model: StepModel,
    input_len: Lengths,
    output_len: Lengths,
    max_num_seqs: int,
    server: Server = PLAIN,
    seed: int = 0,
    client: str = EVEN,
    requests: int | None = None,
    phase: int = 0,
) -> AtCap:
    """Steady-state throughput, TPOT and TTFT of one replica kept full at `max_num_seqs` (see the module doc), its
    scheduler a `server` (KV cache, prompt budget, KV streams, speculation); a staggered loop's streams started in
    `phase` (ClosedLoop.phase)."""
    if max_num_seqs < 1:
        raise TokenroofError(f"max_num_seqs must be at least 1, got {max_num_seqs}")
    if output_len.mean < 2:
        raise ParameterError(
            f"TPOT needs at least 2 output tokens per request, got {{}} {output_len.mean}", "output_len"
        )
    args = (model, input_len, output_len, max_num_seqs, server, seed, client, requests, phase)
    try:
        hash(args)
    except TypeError:  # an argument that cannot be a key (nothing shipped makes one): run it uncached
        found = _kept_full.__wrapped__(*args)
    else:
        found = _kept_full(*args)
    return replace(found, tpot_ms=dict(found.tpot_ms), ttft_ms=dict(found.ttft_ms))  # the caller's own statistics


@functools.lru_cache(maxsize=512)
def _kept_full(
    model: StepModel,
    input_len: Lengths,
    output_len: Lengths,
    max_num_seqs: int,
    server: Server,
    seed: int,
    client: str,
    requests: int | None,
    phase: int = 0,
) -> AtCap:
    """at_cap's simulation, once per process for the same arguments (all immutable; the run is seeded): advise's
    search and the margin it then checks at other targets, plan's reference replica, the same deployment asked twice
    by the page, meet the same caps."""
    loop = closed_loop(max_num_seqs, input_len, output_len, client, requests, phase)
    result = simulate(model, loop, max_num_seqs, seed, **server.settings())
    summary = result.summary()
    return AtCap(
        max_num_seqs,
        summary["throughput_tok_s"],
        measured(summary["tpot_ms"]),
        measured(summary["ttft_ms"]),
        summary["running_batch"],
        result.preemptions,
    )


def saturation_rate(
    model: StepModel,
    input_len: Lengths,
    output_len: Lengths,
    max_num_seqs: int,
    server: Server = PLAIN,
    burstiness: float = 1.0,
    requests: int = 4000,
    seed: int = 0,
) -> float:
    """The request rate one replica carries under arrivals it cannot keep up with (Poisson by default): what an
    open loop past saturation measures. Below a closed loop's figure where a closed loop's streams line up into
    waves whose prompts share their prefill steps (llama.cpp's whole-prompt prefill does); the rate, not tok/s."""
    kept_full = at_cap(model, input_len, output_len, max_num_seqs, server, seed)
    offered = 2.0 * kept_full.throughput_tok_s / output_len.mean  # twice what a full closed loop gives: overloaded
    load = Workload(offered, input_len, output_len, num_requests=requests, burstiness=burstiness)
    result = simulate(model, load, max_num_seqs, seed, **server.settings())
    return carried_rate([s.finished_s or 0.0 for s in result.sequences])


def carried_rate(times_s: Sequence[float] | np.ndarray) -> float:
    """Events a second over the middle three fifths of a run (the 20% to the 80% event): of completions under
    arrivals a server cannot keep up with, what it carries once its queue is full (ramp-up and drain left out); the
    same of the sends, the rate they came at. One estimator for the saturation predicted and the one measured."""
    ordered = np.sort(np.asarray(times_s, dtype=float))
    n = ordered.size
    if n < 5:
        raise TokenroofError(f"a carried rate needs at least 5 events, got {n}")
    lo, hi = ordered[n // 5], ordered[(4 * n) // 5]
    return float(((4 * n) // 5 - n // 5) / max(hi - lo, 1e-12))


PHASES = 10  # start phases a staggered loop's cap is checked over: bench's own stagger and nine drawn at random


@dataclass(frozen=True)
class PhaseBand:
    """A staggered loop's `statistic` at one cap over its start phases: bench's own stagger's, the lowest and the
    highest."""

    runs: int
    statistic: str
    tpot_ms: tuple[float, float, float]
    ttft_ms: tuple[float, float, float]

    def meets(self, tpot_slo_ms: float, ttft_slo_ms: float | None) -> bool:
        """Every phase meets the targets."""
        return self.tpot_ms[2] <= tpot_slo_ms and (ttft_slo_ms is None or self.ttft_ms[2] <= ttft_slo_ms)

    def to_dict(self) -> dict[str, Any]:
        """The contract's value with its _low/_high siblings: bench's stagger's figure, the lowest and highest."""
        out: dict[str, Any] = {"runs": self.runs}  # the statistic is the answer's slo.statistic
        for key, (own, low, high) in (("tpot_ms", self.tpot_ms), ("ttft_ms", self.ttft_ms)):
            out |= {key: own, f"{key}_low": low, f"{key}_high": high}
        return out


def phase_band(
    model: StepModel,
    input_len: Lengths,
    output_len: Lengths,
    max_num_seqs: int,
    statistic: str,
    server: Server = PLAIN,
    phases: int = PHASES,
) -> PhaseBand:
    """A staggered loop kept full at `max_num_seqs` from `phases` start phases (0: bench's own stagger)."""
    runs = [
        at_cap(model, input_len, output_len, max_num_seqs, server, client="staggered", phase=k) for k in range(phases)
    ]
    tpot = [r.tpot_ms[statistic] for r in runs]
    ttft = [r.ttft_ms[statistic] for r in runs]
    return PhaseBand(phases, statistic, (tpot[0], min(tpot), max(tpot)), (ttft[0], min(ttft), max(ttft)))


@dataclass
class CapAdvice:
    """The largest `max_num_seqs` whose steady-state statistic meets the targets, from the scheduler."""

    statistic: str
    tpot_slo_ms: float
    ttft_slo_ms: float | None
    chosen: AtCap
    binding: str
    reference: AtCap  # the largest cap tried: what more batch buys
    knee_batch: float
    source: str
    warnings: list[str]
    phases: PhaseBand | None = None  # the chosen cap over a staggered loop's start phases

    def to_dict(self) -> dict[str, Any]:
        at = self.chosen.to_dict()
        if self.phases is not None:
            at["phases"] = self.phases.to_dict()
        return advice_dict(
            {"statistic": self.statistic, "tpot_ms": self.tpot_slo_ms, "ttft_ms": self.ttft_slo_ms},
            (self.chosen.max_num_seqs, None, None),
            self.binding,
            at,
            self.knee_batch,
            {"max_num_seqs": self.reference.max_num_seqs, "throughput_tok_s": self.reference.throughput_tok_s},
            self.source,
            self.warnings,
        )


SATURATED_GAIN = 0.02  # a doubled cap that adds less throughput than this share: the server is saturated there


def advise_cap(
    model: StepModel,
    input_len: Lengths,
    output_len: Lengths,
    tpot_slo_ms: float,
    ttft_slo_ms: float | None = None,
    statistic: str = "p99",
    server: Server = PLAIN,
    limit: int = 4096,
    source: str = "",
    client: str = EVEN,
    phases: int = 1,
) -> CapAdvice:
    """Largest cap whose steady-state TPOT (and TTFT) `statistic` meets the targets: caps on a doubling grid, then
    bisection between the last that meets them and the first that does not (TPOT grows with the cap). With
    `phases` > 1 (the staggered client on llama-server, module doc), the cap found is checked over that many start
    phases (`phase_band`), and where some phase misses, the largest cap below it that every phase meets is taken by
    bisection."""
    if statistic not in STATISTICS:
        raise TokenroofError(f"unknown statistic '{statistic}'; known: {', '.join(STATISTICS)}")
    if not 0 < tpot_slo_ms < math.inf or (ttft_slo_ms is not None and not 0 < ttft_slo_ms < math.inf):
        raise TokenroofError("the TPOT and TTFT targets must be positive finite numbers")
    if phases > 1 and client != "staggered":
        raise TokenroofError(f"start phases are a staggered loop's; the client is {client}")
    kv, budget = server.kv_capacity_tokens, server.max_num_batched_tokens
    if kv is not None:  # past what the cache holds at the mean context a larger cap only preempts or waits for room
        # (reserving each request's whole life as the scheduler does, its last block's padding and a speculating
        # step's slots included: a larger cap only waits)
        lookahead = 1 if server.speculation is None else server.speculation.num_tokens + 1
        held = (
            reserved_life_tokens(input_len.mean, output_len.mean, VLLM_BLOCK_SIZE, lookahead)
            if server.reserve_output
            else mean_context_tokens(input_len.mean, output_len.mean)
        )
        limit = min(limit, max(int(kv // held), 1))
    if budget is not None:  # a step holds one token per sequence of its budget, and a prompt's chunk
        limit = min(limit, budget - 1)
    memo: dict[int, AtCap] = {}

    def run(cap: int) -> AtCap:
        if cap not in memo:
            memo[cap] = at_cap(model, input_len, output_len, cap, server, client=client)
        return memo[cap]

    def meets(cap: int) -> bool:
        r = run(cap)
        return r.tpot_ms[statistic] <= tpot_slo_ms and (ttft_slo_ms is None or r.ttft_ms[statistic] <= ttft_slo_ms)

    grid = sorted({min(2**k, limit) for k in range(0, int(math.log2(limit)) + 2)})
    if not meets(1):
        r = run(1)
        tpot, ttft = r.tpot_ms[statistic], r.ttft_ms[statistic]
        said = [f"TPOT is {fmt_beside(tpot, tpot_slo_ms)} ms (target {tpot_slo_ms:g})"]
        if ttft_slo_ms is not None:
            said.append(f"TTFT is {fmt_beside(ttft, ttft_slo_ms)} ms (target {ttft_slo_ms:g})")
        else:
            said.append(f"TTFT is {ttft:.3g} ms")
        raise TokenroofError(f"no batch cap meets the targets: at max_num_seqs 1 the {statistic} {' and '.join(said)}")
    good, bad = 1, None
    for cap in grid[1:]:
        if meets(cap):
            good = cap
        else:
            bad = cap
            break
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if meets(mid) else (good, mid)
    binding = "limit"
    warnings = []
    if bad is not None:
        over = run(bad)
        binding = "tpot" if over.tpot_ms[statistic] > tpot_slo_ms else "ttft"
    band = None
    if phases > 1:
        bands: dict[int, PhaseBand] = {}

        def band_at(cap: int) -> PhaseBand:
            if cap not in bands:
                bands[cap] = phase_band(model, input_len, output_len, cap, statistic, server, phases)
            return bands[cap]

        if not band_at(good).meets(tpot_slo_ms, ttft_slo_ms):
            missed = good
            low, high = 1, good  # one stream has one phase, which met the targets above
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (mid, high) if band_at(mid).meets(tpot_slo_ms, ttft_slo_ms) else (low, mid)
            over_band = band_at(high)
            binding = "tpot" if over_band.tpot_ms[2] > tpot_slo_ms else "ttft"
            good, bad = low, high
            warnings.append(phases_note(band_at(missed), missed, band_at(good), good))
        band = band_at(good)
    chosen = run(good)
    if bad is None:
        warnings.append(f"the targets are met at every cap up to {limit}: the cap is set by memory or admission")
    if chosen.preemptions:
        warnings.append(
            f"at max_num_seqs {good} the KV cache preempts ({chosen.preemptions} in the run): the cap is near what "
            "the cache holds"
        )
    # the knee and the most a larger cap could give are the server's, not the search's: caps past the first that
    # missed the targets, doubling, until throughput stops rising (the search alone stopped there, so both had
    # followed the target: a knee of 16 at an 8.7 ms target, 128 at 50 ms, on one server)
    beyond = max(memo)
    while beyond < limit:
        last = run(beyond).throughput_tok_s
        beyond = min(2 * beyond, limit)
        if run(beyond).throughput_tok_s < last * (1 + SATURATED_GAIN):
            break
    knee = knee_of(list(memo.values()), statistic)
    reference = max(memo.values(), key=lambda r: r.throughput_tok_s)  # the most a larger cap could give
    return CapAdvice(statistic, tpot_slo_ms, ttft_slo_ms, chosen, binding, reference, knee, source, warnings, band)


def phases_note(missed: PhaseBand, missed_cap: int, kept: PhaseBand, cap: int) -> str:
    """Why a staggered loop's cap came down: the cap bench's own stagger meets, missed in some start phase."""
    stat = missed.statistic

    def spans(band: PhaseBand) -> str:
        (_, tpot_low, tpot_high), (_, ttft_low, ttft_high) = band.tpot_ms, band.ttft_ms
        return f"TPOT {tpot_low:.1f}–{tpot_high:.1f} ms, TTFT {ttft_low:,.0f}–{ttft_high:,.0f} ms"

    return (
        f"at max_num_seqs {missed_cap} the targets hold with the streams started as bench starts them, but "
        "llama-server lines them up into groups that prefill their prompts together (a request that arrives while it "
        "launches others joins them), and which groups form depends on how they started: over "
        f"{missed.runs} start phases the {stat} {spans(missed)}; at {cap} every phase meets them ({spans(kept)})"
    )


def knee_of(points: list[AtCap], statistic: str) -> float:
    """Kneedle (Satopää et al. 2011) on throughput against TPOT over the caps simulated."""
    points = sorted(points, key=lambda p: p.max_num_seqs)
    if len(points) < 3:
        return float(points[-1].max_num_seqs)
    tpot = np.array([p.tpot_ms[statistic] for p in points])
    thr = np.array([p.throughput_tok_s for p in points])
    x = (tpot - tpot[0]) / max(tpot[-1] - tpot[0], 1e-12)
    y = (thr - thr[0]) / max(thr.max() - thr[0], 1e-12)
    return float(points[int(np.argmax(y - x))].max_num_seqs)
