"""The scheduler's step model, fitted to what a server measured: TPOT and TTFT replayed the way they were measured.

A fit of TPOT against batch (fit/) folds the arriving prompts into its cost per sequence: the curve is right where it
was measured, but a scheduler given that model prefills every prompt for free, so its TTFT is one decode step and
its TPOT counts the prompts twice once they are added back. Here every measured online point is replayed on the
scheduler `simulate`, `advise` and `plan` run (engine/core.py), as the client that measured it drove the server:

- `vllm bench serve --max-concurrency N` starts every stream at once ("burst"); tokenroof bench staggers them
  over a request's life ("staggered"); a rate point (GuideLLM, bench --request-rate) is an open loop at its rate;
- the server prefills each prompt whole in the step that admits it, or in chunks of a token budget per step
  (`--max-num-batched-tokens`: vLLM V1 always chunks, at 8,192 tokens on large GPUs).

Which steps a request's TTFT and TPOT span, and what each step runs (decoding sequences, their context, prompt
tokens), is counted in steps: in a burst closed loop it does not depend on how long the steps take, in a staggered
or open loop only a little (their arrivals are timed). So each point is simulated (`Design`: once for a burst, again
with the fitted model for the others), and any step model's mean TPOT and TTFT there are weighted sums of its step
times: what the scheduler gives. The fit is then a small least-squares problem in the step model's
terms over log TPOT and log TTFT, bounded below by the hardware's peaks when the physics is known (`--model/
--hardware`): weights streamed at most at peak bandwidth, a prompt token's GEMMs at most at peak FLOP/s. A term
the data push onto its floor is named as a conflict, never silently taken.

What TTFT counts (the wait for a free slot, tokenisation, the network) all lands in the prefill cost: that is what
a user of these files will see again. Without TTFT in the table the prefill is priced by the physics (at the fitted
compute efficiency); without either it is not priced at all, and the model stays folded (travel.py says so).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from scipy.optimize import least_squares, lsq_linear

from tokenroof.errors import TokenroofError
from tokenroof.fit.core import NOISE_FLOOR, Fit, Prior
from tokenroof.fit.travel import Replayed, Travelling, from_table, online, portable, portable_samples
from tokenroof.io.measurements import MeasurementTable
from tokenroof.io.table import LENGTHS_FIXED_BELOW
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.engine.core import PromptOverBudget, budget_holds
from tokenroof.serving.saturation import closed_loop
from tokenroof.serving.simulate import CLOSED_CLIENTS, UNTIMED, Lengths, SimResult, Workload, bench_window, simulate

# the prompt budgets tried when neither the user nor an engine profile says how the server prefilled: whole prompts,
# and the chunk budgets of vLLM V1 (2,048 below 70 GiB of GPU memory, 8,192 above) and SGLang's 8,192 default
BUDGETS: tuple[int | None, ...] = (None, 2048, 8192)
# vLLM V0 (without chunked prefill, its default below 32K of context) and TGI prefill waiting prompts in steps of their
# own, whole, while they fit a token budget (V0's max(max_model_len, 2,048)), the running sequences waiting: tried when
# the mixed steps above replay the table's TTFT no better than REPLAY_MISFIT, at these budgets (None: every waiting
# prompt in one step)
SEPARATE_BUDGETS: tuple[int | None, ...] = (None, 2048, 4096, 8192)
# ... and taken only where its replay's cost is under this share of the best mixed one's: in benchmarks/open_loop.py a
# rate sweep of a server chunking at 2,048 whose queue samples left its TTFT 9.6% off took steps of their own on a near
# tie (saturation +14.5%, TPOT at twice the batch −71%); on LLMPerf's vLLM 0.4.3 sweep it fell to a tenth (0.11 → 0.01)
SEPARATE_MARGIN = 0.5
CLIENTS = {
    "burst": "closed loop, every stream started at once",
    "waves": "closed loop in waves, every stream started at once and the next wave when the last has ended",
    "staggered": "closed loop, streams staggered",
    "poisson": "open loop, Poisson arrivals at each point's rate",
    "constant": "open loop, evenly spaced arrivals at each point's rate",
}
MAX_TERM_S = 10.0  # no fitted step term comes near this
# the measured departures from the form kept in range (StepModel.batch_factors): knots closer than this share of a
# batch merge; each factor within these bounds; a factor's pull towards 1, against a point's relative TPOT error
KNOT_MERGE, FACTOR_BOUNDS, FACTOR_PULL = 0.1, (0.5, 2.0), 0.05
DEPARTURES_FROM = 0.03  # a replay within this (rms) is within a bench's repeat noise (1–3%): nothing to keep
# a point's TPOT residual is its decode steps' own only where they make up most of its TPOT: past that share the
# arriving prompts' steps (whose price the TTFT set) could as well be the cause. On the real engine's second run
# (2026-12-06) departures fitted at 4 and 8 streams (decode 77% and 65% of TPOT) made those steps 7% too slow
DECODE_SHARE = 0.85
REPLAY_MISFIT = 0.08  # a replay further off than this (rms, either metric) is named: several times a bench's noise
OUTLIER_SCALES = 3.0  # an open loop's TTFT this many robust scales off its replay is a queue's sample (ttft_outliers)


@dataclass(frozen=True)
class Design:
    """One measured point's steps as the scheduler runs them (what each step holds) and the weights that turn a step
    model's step times into the point's mean TPOT and mean TTFT."""

    batch: np.ndarray  # decoding (and just-prefilled) sequences per step
    context: np.ndarray  # Σ context over them
    prefill: np.ndarray  # prompt tokens prefilled in the step
    prefill_sq: np.ndarray  # Σ chunk² of those
    tpot: np.ndarray  # mean TPOT = tpot @ step times
    ttft: np.ndarray  # mean TTFT = ttft @ step times
    passes: np.ndarray | None = None  # forward passes per step (per-slot KV streams; None: one each)
    # an open-loop point: the relative spread (sd ÷ mean) of its mean TTFT between independent arrival samples of its
    # size, the noise its measured TTFT carries beside the bench's own (None: a closed loop, whose noise is the bench's)
    ttft_spread: float | None = None

    @classmethod
    def of(cls, result: SimResult, chosen: np.ndarray) -> Design:
        """The steps of `result` and, over the `chosen` requests, the share of each step in their TPOT (first token
        → last, ÷ output − 1) and TTFT (from the send: the queue, and the part of the step under way when the request
        arrived, included; a closed loop's arrives as a step ends and waits for the whole next one)."""
        assert result.step_contexts is not None and result.step_prefill is not None
        assert result.step_prefill_sq is not None
        starts, durations = result.step_starts_s, result.step_durations_s
        ends = starts + durations
        seqs = [s for s, keep in zip(result.sequences, chosen, strict=True) if keep]
        first = np.array([s.first_token_s for s in seqs], dtype=float)
        finished = np.array([s.finished_s for s in seqs], dtype=float)
        begun = np.array([s.arrival_s for s in seqs], dtype=float)
        out = np.array([s.max_tokens for s in seqs], dtype=float)
        n = len(seqs)
        if n == 0:
            raise TokenroofError("a replayed point holds no request in its window: too few requests to replay it")

        def share(start: np.ndarray, end: np.ndarray, weight: np.ndarray) -> np.ndarray:
            """Σ over requests of `weight` for each step whose end lies in (start, end]."""
            acc = np.zeros(ends.size + 1)
            np.add.at(acc, np.searchsorted(ends, start, "right"), weight)
            np.add.at(acc, np.searchsorted(ends, end, "right"), -weight)
            return np.cumsum(acc)[:-1]

        tpot = share(first, finished, np.where(out > 1, 1.0 / np.maximum(out - 1, 1), 0.0) / n)
        ttft = share(begun, first, np.full(n, 1.0 / n))
        # a request that arrived while a step was under way waits only for the rest of it
        j0 = np.minimum(np.searchsorted(ends, begun, "right"), ends.size - 1)
        late = starts[j0] < begun
        np.add.at(ttft, j0[late], -(begun[late] - starts[j0[late]]) / durations[j0[late]] / n)
        used = (tpot > 0) | (ttft > 0)
        batch = result.step_batches.astype(float)
        if result.step_gaps_s is not None and result.step_tokens is not None:
            # a prefill step of its own (separate_prefill) runs the sequences it prefills, the running ones waiting
            # (its recorded batch is the gauge's, every running sequence): priced as the scheduler priced it
            batch = np.where(np.isnan(result.step_gaps_s), result.step_tokens, batch)
        return cls(
            batch[used],
            result.step_contexts[used],
            result.step_prefill[used],
            result.step_prefill_sq[used],
            tpot[used],
            ttft[used],
            None if result.step_passes is None or (result.step_passes <= 1).all() else result.step_passes[used],
        )

    @staticmethod
    def mix(parts: Sequence[tuple[Design, float]]) -> Design:
        """A point between two simulated concurrencies: their designs, weighted."""
        return Design(
            np.concatenate([d.batch for d, _ in parts]),
            np.concatenate([d.context for d, _ in parts]),
            np.concatenate([d.prefill for d, _ in parts]),
            np.concatenate([d.prefill_sq for d, _ in parts]),
            np.concatenate([d.tpot * w for d, w in parts]),
            np.concatenate([d.ttft * w for d, w in parts]),
            None
            if all(d.passes is None for d, _ in parts)
            else np.concatenate([np.ones(d.batch.size) if d.passes is None else d.passes for d, _ in parts]),
        )

    def step_times_s(self, model: StepModel) -> np.ndarray:
        """Each step's time; a step of several forward passes (per-slot KV streams) pays the empty step's cost
        (`t_fixed` and the weights' read) once per pass past the first, as the scheduler times it."""
        times = model.steps_s(self.batch, self.context, self.prefill, self.prefill_sq)
        if self.passes is not None:
            times = times + (self.passes - 1) * model.step_s(0, 0.0)
        return times

    def tpot_s(self, model: StepModel) -> float:
        return float(self.tpot @ self.step_times_s(model))

    def ttft_s(self, model: StepModel) -> float:
        return float(self.ttft @ self.step_times_s(model))


@dataclass(frozen=True)
class Point:
    """One measured online point: the concurrency it held, its lengths, its request rate, and what was measured
    (seconds)."""

    concurrency: float
    input_len: int
    output_len: int
    tpot_s: float
    ttft_s: float | None
    rate_req_s: float  # output throughput ÷ output length: the rate an open-loop point was driven at
    weight: float = 1.0
    requests: int | None = None  # its means are over a whole run of this many requests (None: a steady window)
    client: str = "staggered"  # how its client drove the server (io.measurements.CLIENT_KINDS)
    server_cap: int | None = None  # the server's running-batch cap the point shows (None: the concurrency)
    in_flight: bool = False  # an open loop's concurrency counts requests in flight (GuideLLM's), not the running batch
    # its run sent this many, its means over the first `requests` answered (GuideLLM's time limit cut it; LLMPerf's
    # streams ran on past its count)
    sent: int | None = None
    burstiness: float = 1.0  # a "poisson" client's random arrivals: the gamma shape of their gaps (1: Poisson)
    lengths_cv: tuple[float, float] = (0.0, 0.0)  # prompt and output lengths drawn at random: sd ÷ mean (0: fixed)

    @property
    def lengths(self) -> tuple[Lengths, Lengths]:
        """The prompt and output lengths its client sent, as the replay draws them."""
        return drawn(self.input_len, self.lengths_cv[0]), drawn(self.output_len, self.lengths_cv[1])


def drawn(mean: float, cv: float) -> Lengths:
    """Lengths of this mean: fixed (cv 0), or drawn at random with this relative standard deviation (sd ÷ mean), as a
    client that drew them sent them (LLMPerf draws them from a normal, a ShareGPT sample is skewed): lognormal, whose
    σ = √ln(1 + cv²) keeps the mean and gives that spread. Streams of unequal lengths fall out of step, so their
    prompts arrive apart, where equal ones stay in lockstep and share their prefill steps: a TTFT apart by 15–25% at
    one concurrency on LLMPerf's default spread (tests/test_llmperf.py)."""
    tokens = max(round(mean), 1)
    if cv < LENGTHS_FIXED_BELOW:  # as the readers take it: within a bench's own jitter of one length
        return Lengths(tokens)
    return Lengths(tokens, "lognormal", math.sqrt(math.log1p(cv * cv)))


# requests simulated for an open-loop point: about 40 lifetimes of its mean concurrency, within these bounds
OPEN_LOOP_REQUESTS = (200, 2000)
OPEN_LOOP_MAX_NUM_SEQS = 1024  # the server's cap is not in the file: large enough not to bind below saturation
OPEN_LOOP_REPLAYS = 4  # independent arrival samples an open-loop point is replayed with (their mix, their spread)
OPEN_LOOP_MIN_REQUESTS = 100  # ... each at least this long
OPEN_LOOP_SEARCH = 8  # runs the search for an open-loop point's rate may take (matched_rate)
OPEN_LOOP_MATCH = 0.02  # ... and how close (log) to the point's concurrency it stops
# a closed-loop point whose running batch is below this share of its concurrency shows the server's cap: the rest queue
SERVER_CAP_SHOWN = 0.9


def open_loop_run(
    model: StepModel,
    rate: float,
    lengths: tuple[Lengths, Lengths],
    client: str,
    concurrency: float,
    kv_capacity_tokens: int | None,
    budget: int | None,
    kv_slots: int | None = None,
    seed: int = 0,
    share: int = 1,
    whole: int | None = None,
    burstiness: float = 1.0,
    separate: bool = False,
    reserve: bool = False,
) -> SimResult:
    """Arrivals at `rate` (random, gamma gaps of shape `burstiness`, 1 Poisson; or evenly spaced for "constant"),
    about 40 lifetimes of the expected concurrency (split over `share` runs of other seeds, each at least
    OPEN_LOOP_MIN_REQUESTS) or, for a point measured over a whole run, that run's `whole` requests, against a server
    whose cap does not bind (the file does not say it) or, with per-slot KV streams, its slots; `separate`: the server
    prefills prompts in steps of their own (vLLM V0's scheduling); `reserve`: it admits a request only with its whole
    output reserved in the KV cache (TensorRT-LLM's default)."""
    burstiness = burstiness if client == "poisson" else math.inf
    n = whole or max(int(np.clip(40 * concurrency, *OPEN_LOOP_REQUESTS)) // share, OPEN_LOOP_MIN_REQUESTS)
    workload = Workload(rate, *lengths, num_requests=n, burstiness=burstiness)
    cap = kv_slots or OPEN_LOOP_MAX_NUM_SEQS
    return simulate(
        model,
        workload,
        cap,
        seed,
        kv_capacity_tokens,
        max_num_batched_tokens=budget,
        per_slot_kv=kv_slots is not None,
        separate_prefill=separate,
        reserve_output=reserve,
    )


def answered_by_stop(result: SimResult) -> tuple[float, float, np.ndarray]:
    """A run cut at a time limit, as GuideLLM's `max_duration` ends one: the client sends until the limit and then
    drops what is still in flight. The run's first arrival, its stop (the last arrival: the limit, within one gap) and
    which requests were answered by then, what its means are over."""
    arrival = np.array([s.arrival_s for s in result.sequences], dtype=float)
    finished = np.array([math.inf if s.finished_s is None else s.finished_s for s in result.sequences], dtype=float)
    start, stop = float(arrival.min()), float(arrival.max())
    return start, stop, finished <= stop


def held_concurrency(result: SimResult, in_flight: bool, whole: bool = False, cut: bool = False) -> float:
    """What an open-loop point's batch column measured over a run's window, time-averaged: the requests in flight
    (sent and not yet answered: GuideLLM's request_concurrency), or the running batch (bench's, from the server's
    gauge). Not completions a second × mean end-to-end time: near saturation the queue grows over a run and the
    completions lag the arrivals, which would read the concurrency low and match it at a rate past the server's.
    `whole`: over the whole run, first arrival to last answer (SGLang's, vLLM's and AIPerf's rate runs: Σ latency ÷
    duration, ramp-up and drain in it, 3–8% under a steady window's on 300–1,000 requests; over a whole run the
    completions do not lag, and the two counts agree). `cut` (with `whole`): over a run stopped at its last arrival,
    the requests answered by then (GuideLLM's successful requests' concurrency from the first request to the stop:
    what is in flight at the stop is dropped, not counted; 3–13% under a steady window's on 20–60 s runs)."""
    if whole and cut:
        w0, w1, answered = answered_by_stop(result)
        if not in_flight:
            return result.running_batch(w0, w1)
        held = sum(
            float(s.finished_s or w1) - s.arrival_s for s, k in zip(result.sequences, answered, strict=True) if k
        )
        return float(held / max(w1 - w0, 1e-12))
    w0, w1 = result.window_s()
    if whole:
        w0 = min(s.arrival_s for s in result.sequences)
        w1 = max(w1 if s.finished_s is None else s.finished_s for s in result.sequences)
    if not in_flight:
        return result.running_batch(w0, w1) if whole else result.running_batch()
    start = np.array([s.arrival_s for s in result.sequences], dtype=float)
    end = np.array([w1 if s.finished_s is None else s.finished_s for s in result.sequences], dtype=float)
    inside = np.clip(np.minimum(end, w1) - np.maximum(start, w0), 0.0, None)
    return float(inside.sum() / max(w1 - w0, 1e-12))


def cut_count(result: SimResult, in_flight: bool, cancelled: int) -> float:
    """What the search matches a run cut at its last arrival on, against GuideLLM's count of it: the answered
    requests' concurrency (`held_concurrency`) with, beside it, what the requests cancelled at the stop held beyond the
    `cancelled` the run measured (each held from its arrival to the stop, time-averaged). GuideLLM's count alone levels
    off near saturation (a heavier load cancels more at the stop and answers no more: at 0.95, 1.0 and 1.05 of one
    server's saturation, 89, 88 and 88 requests on runs of 500), where the count of the requests in flight at the stop
    keeps growing, so a rate is found there too; below, the two runs cancel about as many: the count is GuideLLM's."""
    answered = held_concurrency(result, in_flight, whole=True, cut=True)
    if not in_flight:
        return answered
    w0, w1, kept = answered_by_stop(result)
    ages = np.array([w1 - s.arrival_s for s, k in zip(result.sequences, kept, strict=True) if not k])
    beyond = (ages.size - cancelled) * float(ages.mean()) if ages.size else 0.0
    return max(answered + beyond / max(w1 - w0, 1e-12), 1e-9)


def open_loop_design(
    point: Point,
    budget: int | None,
    kv_capacity_tokens: int | None,
    reference: StepModel,
    kv_slots: int | None,
    separate: bool = False,
    reserve: bool = False,
) -> Design:
    """An open-loop point's design: the runs of `matched_runs` (OPEN_LOOP_REPLAYS samples of arrivals at the rate at
    which `reference` holds the concurrency the point measured), mixed. The step pattern a point's means are sums over
    (how many sequences a step holds, how many prompts it prefills) follows from its concurrency, whatever the speed:
    a reference slower than the server at the measured rate would run past its saturation and time steps of hundreds
    of sequences the server never held, and one sample of arrivals is not another (two samples of 400 requests at 80%
    load: batches ±11%). The runs' spread of their mean TTFT (timed by `reference`) is the point's sampling noise
    (scaled to all the runs' requests together): near saturation a mean TTFT over a few hundred requests is a queue's
    sample (±39% between runs at 80% load, ±86% at 95%), and the fit weighs it so. A point whose means are a whole
    run's (the table gives its requests: SGLang's, vLLM's and AIPerf's rate runs) is replayed as whole runs of as many
    requests, matched on the requests in flight over the whole run as its tool counts them, each run's spread its own
    (matched over a steady window, the whole run's ramp and drain read as a lighter load: on the eight sweeps of
    `benchmarks/open_loop.py --format sglang` the fitted saturation's median |error| was 5.9% data only and 4.1% with
    the prior, matched over whole runs 2.0% and 0.9%; docs/ACCURACY.md). A whole run cut at a time limit (GuideLLM's
    `max_duration`: the point's `sent`) is replayed as runs of as many arrivals cut at the last, its means over what
    was answered by then, matched on `cut_count` (read as steady windows: 14.4% and 14.6% on `--stop seconds`; so
    replayed: 3.1% and 1.2%)."""
    lengths = point.lengths
    served = Served(reference, point.client, kv_capacity_tokens, budget, kv_slots, point.burstiness, separate, reserve)
    whole = point.requests  # a whole run's means (its requests given): replayed as whole runs of as many
    cancelled = None  # … or a run cut at a time limit: as many arrivals as it sent, its means over those answered
    if whole is not None and point.sent is not None and point.sent > whole:
        whole, cancelled = point.sent, point.sent - whole
    results = matched_runs(served, lengths, point.rate_req_s, point.concurrency, point.in_flight, whole, cancelled)
    if whole is None:
        chosen = [r.measured() for r in results]
    else:
        chosen = [
            np.ones(len(r.sequences), dtype=bool) if cancelled is None else answered_by_stop(r)[2] for r in results
        ]
    parts = [Design.of(r, c) for r, c in zip(results, chosen, strict=True)]
    ttft = np.array([d.ttft_s(reference) for d in parts])
    sampled = float(np.mean([c.sum() for c in chosen]))
    measured = len(results) * sampled if point.requests is None else point.requests  # (unknown: as long as all runs)
    spread = float(ttft.std(ddof=1) / max(float(ttft.mean()), 1e-12) * math.sqrt(sampled / measured))
    return replace(Design.mix([(d, 1.0 / len(parts)) for d in parts]), ttft_spread=spread)


class Served(NamedTuple):
    """The server an open loop is replayed on: the step model, the client's arrivals ("poisson" or "constant"), the KV
    cache (tokens; None: unlimited), the prompt budget per step (None: whole prompts), per-slot KV streams' slots, the
    gamma shape of a "poisson" client's gaps (1: Poisson)."""

    model: StepModel
    client: str
    kv_capacity_tokens: int | None
    budget: int | None
    kv_slots: int | None
    burstiness: float = 1.0
    separate: bool = False  # prompts prefilled in steps of their own (vLLM V0), the running sequences waiting
    reserve: bool = False  # each request admitted with its whole output's KV reserved (TensorRT-LLM)


def matched_runs(
    served: Served,
    lengths: tuple[Lengths, Lengths],
    rate: float,
    concurrency: float,
    in_flight: bool,
    whole: int | None = None,
    cancelled: int | None = None,
) -> list[SimResult]:
    """OPEN_LOOP_REPLAYS open-loop runs (seeds 0, 1, …, each a share of one replay's requests, or each a whole run of
    `whole` requests) of `served` (the step model, the client, the KV cache, the prompt budget, per-slot KV streams)
    at the rate from `rate` on at which they hold `concurrency` on average (`held_concurrency`, over the whole run
    where `whole`; `matched_rate`). `cancelled`: the runs were cut at their last arrival, that many requests cancelled
    there (`cut_count`)."""
    model, client, kv, budget, kv_slots, burstiness, separate, reserve = Served(*served)  # (a plain tuple: mixed)
    n = OPEN_LOOP_REPLAYS
    ran: dict[float, list[SimResult]] = {}

    def held(at: float) -> float:
        ran[at] = [
            open_loop_run(
                model,
                at,
                lengths,
                client,
                concurrency,
                kv,
                budget,
                kv_slots,
                k,
                n,
                whole,
                burstiness,
                separate,
                reserve,
            )
            for k in range(n)
        ]
        if cancelled is not None:
            return float(np.mean([cut_count(r, in_flight, cancelled) for r in ran[at]]))
        return float(np.mean([held_concurrency(r, in_flight, whole is not None) for r in ran[at]]))

    found = matched_rate(held, rate, concurrency)
    if found not in ran:  # nothing to search from (no rate or no concurrency): the rate given
        held(found)
    return ran[found]


def matched_rate(held: Callable[[float], float], rate: float, concurrency: float) -> float:
    """The rate at which `held(rate)` (a run's concurrency, increasing in the rate) meets `concurrency`, within
    OPEN_LOOP_MATCH (log) or after OPEN_LOOP_SEARCH runs: secant steps in log rate and log concurrency (the
    concurrency grows as the rate at light load and ever faster towards saturation: slopes from 1 up), kept inside
    the bracket the runs so far give and halving it where a step would leave it. Starts from the measured rate;
    returns a rate `held` was run at, the closest one where the search ran out."""
    if not (rate > 0 and concurrency > 0):
        return rate
    target = math.log(concurrency)
    low, high = -math.inf, math.inf  # log rates known to hold too few, too many
    x, previous, best = math.log(rate), None, (math.inf, rate)
    for _ in range(OPEN_LOOP_SEARCH):
        rate = math.exp(x) if previous is not None else rate  # the measured rate itself first
        got = held(rate)
        if not got > 0:
            break
        y = math.log(got) - target
        best = min(best, (abs(y), rate))
        if abs(y) <= OPEN_LOOP_MATCH:
            return rate
        if y < 0:
            low = max(low, x)
        else:
            high = min(high, x)
        # a run is never at the last one's rate: a step moves off it, a halving lands inside the bracket it ends
        slope = 1.0 if previous is None else min(max((y - previous[1]) / (x - previous[0]), 1.0), 50.0)
        previous = (x, y)
        step = x - y / slope  # beyond the run's own side of the bracket, never past its open end
        x = step if low < step < high else (low + high) / 2
    return best[1]  # the closest run (the measured rate where nothing was held)


def design_at(
    point: Point,
    budget: int | None,
    kv_capacity_tokens: int | None,
    reference: StepModel,
    kv_slots: int | None = None,
    separate: bool = False,
    reserve: bool = False,
) -> Design:
    """The design of a point. A closed loop is simulated at its concurrency (a fractional one between the two whole
    ones around it); an open-loop point at the rate that holds its concurrency (`open_loop_design`), its steps timed
    by `reference` (their pattern depends on it).
    With per-slot KV streams (`kv_slots`) the server's slots are simulated whatever the concurrency: which slots a
    loop's requests take, and so how many passes a step runs, depends on all of them. `separate`: the server prefills
    prompts in steps of their own, at most `budget` tokens a step (vLLM V0's scheduling)."""
    client = point.client
    lengths = point.lengths
    if client in ("poisson", "constant"):
        return open_loop_design(point, budget, kv_capacity_tokens, reference, kv_slots, separate, reserve)
    low = max(math.floor(point.concurrency), 1)
    high = max(math.ceil(point.concurrency), 1)
    if not budget_holds(budget, high, separate):
        raise TokenroofError(f"a prompt budget of {budget} tokens per step must exceed the concurrency {high}")

    # a burst that sent on past the requests it counted (LLMPerf: the streams in flight when its count was reached run
    # to their end, uncounted): as many sent, the means over the first answered
    beyond = point.sent - point.requests if client == "burst" and point.sent and point.requests else 0

    def at(c: int) -> Design:
        loop = closed_loop(c, *lengths, client, point.requests if client in UNTIMED else None)
        if client == "staggered":  # bench's own window, its requests in flight at both ends
            loop = replace(loop, num_requests=2 * c + bench_window(c), measure=None)
        if beyond > 0:
            loop = replace(loop, num_requests=loop.num_requests + beyond)
        cap = kv_slots or min(c, point.server_cap or c)
        result = simulate(
            reference,
            loop,
            cap,
            0,
            kv_capacity_tokens,
            max_num_batched_tokens=budget,
            per_slot_kv=kv_slots is not None,
            separate_prefill=separate,
            reserve_output=reserve,
        )
        chosen = result.measured()
        if beyond > 0:
            finished = np.array([s.finished_s for s in result.sequences], dtype=float)
            first = np.argsort(finished, kind="stable")[: loop.num_requests - beyond]
            chosen = np.zeros(len(result.sequences), dtype=bool)
            chosen[first] = True
        return Design.of(result, chosen)

    if high == low:
        return at(low)
    frac = point.concurrency - low
    return Design.mix([(at(low), 1 - frac), (at(high), frac)])


@dataclass(frozen=True)
class Terms:
    """The free terms of the scheduler's step model and how a parameter vector (log seconds) becomes one."""

    base: StepModel  # experts and overlap as the decode fit has them
    prior: Prior | None
    free_kv: bool  # several contexts measured and no prior: the KV reads per context token are fitted
    names: tuple[str, ...] = ("t_fixed_s", "t_weights_s", "t_compute_s", "t_seq_s")

    @classmethod
    def of(cls, base: StepModel, prior: Prior | None, several_contexts: bool) -> Terms:
        free_kv = prior is None and several_contexts
        names = ("t_fixed_s", "t_weights_s", "t_compute_s", "t_seq_s") + (("t_kv_token_s",) if free_kv else ())
        return cls(base, prior, free_kv, names)

    def floors(self) -> dict[str, float]:
        """Each term's physical floor: the hardware's peaks with a prior, else nothing below zero."""
        floors = dict.fromkeys(self.names, 0.0)
        if self.prior is not None:
            peak = self.prior.weights_floor
            floors.update(
                t_fixed_s=self.prior.fixed_floor_s, t_weights_s=peak.t_weights_s, t_compute_s=peak.t_compute_s
            )
        return floors

    def model(self, x: np.ndarray) -> StepModel:
        terms = {"t_attn_token_s": 0.0, "t_kv_token_s": 0.0} | dict(zip(self.names, np.exp(x).tolist(), strict=True))
        sm = replace(self.base, prompts_folded=False, **terms)
        if self.prior is not None:  # the hardware's overlap, whichever structure led the decode fit; KV reads at the
            # bandwidth the weights stream at, attention at the GEMMs' pace
            peak = self.prior.weights_floor
            e_bandwidth = min(peak.t_weights_s / sm.t_weights_s, 1.0) if sm.t_weights_s > 0 else 1.0
            e_compute = min(peak.t_compute_s / sm.t_compute_s, 1.0) if sm.t_compute_s > 0 else 1.0
            sm = replace(
                sm,
                overlap=self.prior.overlap,
                t_kv_token_s=peak.t_kv_token_s / (e_bandwidth * self.prior.kv_bandwidth_ratio),
                t_attn_token_s=peak.t_attn_token_s / e_compute,
            )
        return sm

    def efficiencies(self, sm: StepModel) -> dict[str, float]:
        """Bandwidth and compute efficiency the terms imply (with a prior)."""
        assert self.prior is not None
        peak = self.prior.weights_floor
        return {
            "bandwidth": peak.t_weights_s / sm.t_weights_s if sm.t_weights_s > 0 else math.inf,
            "compute": peak.t_compute_s / sm.t_compute_s if sm.t_compute_s > 0 else math.inf,
        }


Problem = tuple["Terms", list[Point], list[Design], float]


@dataclass
class ServingFit:
    """The scheduler's step model fitted to the measured points, and how well it replays them."""

    model: StepModel
    client: str
    client_stated: bool  # False: the table does not say how its client drove the server (staggered assumed)
    max_num_batched_tokens: int | None
    budget_source: str  # "given", "engine", "fitted" (the best replay of BUDGETS) or "assumed" (no TTFT to tell)
    prefill_source: str  # "ttft" (measured) or "physics" (no TTFT: the prior's compute per prompt token)
    replay: list[dict[str, Any]]
    tpot_rms: float
    ttft_rms: float | None
    conflicts: list[str] = field(default_factory=list)
    alternatives: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # budget → (TPOT, TTFT) rms
    problem: Problem | None = None  # what was solved, for the interval samples
    kv_slots: int | None = None  # per-slot KV streams on this many slots (the table's kv_slots), None: one KV cache
    form_rms: tuple[float, float | None] | None = None  # the form's own replay (TPOT, TTFT) where departures were kept
    in_flight: bool = False  # an open-loop table's batch counts requests in flight (GuideLLM's), not the running batch
    burstiness: float = 1.0  # an open loop's random arrivals: the gamma shape of their gaps (1: Poisson)
    lengths_cv: tuple[float, float] = (0.0, 0.0)  # the measured prompt and output lengths' spread (sd ÷ mean)
    # prompts prefilled in steps of their own (vLLM V0, TGI), at most max_num_batched_tokens a step, the running
    # sequences waiting; False: in the decode steps, whole or chunked
    separate_prefill: bool = False
    reserve_output: bool = False  # each request admitted with its whole output's KV reserved (TensorRT-LLM's default)
    kv_cache_tokens: int | None = None  # the KV cache it was replayed with (the named deployment's; None: unlimited)
    unstated: tuple[str, ...] = ()  # what the table's header could say of the workload and does not ('# key=…')
    lengths: tuple[float, float] = (0.0, 0.0)  # the measured workload's mean prompt and output tokens, replayed at
    server_cap: int | None = None  # the running-batch cap the measured server held its client's streams to (None: none)

    def samples(self, n: int, seed: int = 0) -> list[StepModel]:
        """`n` refits to noisy copies of the replayed points (noise at the replay's own rms, at least 1%): the spread
        a fit of another run of the same server would show."""
        if n <= 0 or self.problem is None:
            return []
        rng = np.random.default_rng(seed)
        terms, points, designs, sigma = self.problem
        tpot_noise = max(self.tpot_rms, NOISE_FLOOR)
        ttft_noise = max(self.ttft_rms or 0.0, NOISE_FLOOR)
        models = []
        for _ in range(n):
            noisy = [
                replace(
                    p,
                    tpot_s=d.tpot_s(self.model) * math.exp(rng.normal(0, tpot_noise)),
                    ttft_s=None if p.ttft_s is None else d.ttft_s(self.model) * math.exp(rng.normal(0, ttft_noise)),
                )
                for p, d in zip(points, designs, strict=True)
            ]
            x, _ = _solve(terms, noisy, designs, sigma)
            sample = terms.model(x)
            models.append(measured_departures(sample, noisy, designs) if self.model.batch_factors else sample)
        return models

    def misfit(self) -> list[str]:
        """A replay that misses what was measured says so: the workload assumed is not the one measured. The form's
        own replay is what says it: measured departures kept in range would hide the miss."""
        tpot_rms, ttft_rms = self.form_rms or (self.tpot_rms, self.ttft_rms)
        worst = max(tpot_rms, ttft_rms or 0.0)
        notes = [
            f"TTFT at concurrency {row['batch']:.3g} measured {row['ttft_ms']:.4g} ms, replayed "
            f"{row['ttft_ms_replayed']:.4g} ms: an open loop's mean TTFT is a sample of its queue, heavy-tailed near "
            "saturation; the fit weighs it as one (a pseudo-Huber loss) and leaves it out of the TTFT rms"
            for row in self.replay
            if row.get("ttft_outlier")
        ]
        if worst <= REPLAY_MISFIT:
            return notes
        ttft = f", TTFT {ttft_rms:.0%}" if ttft_rms is not None else ""
        form = "'s form" if self.form_rms else ""
        state = f"state {' '.join(self.unstated)} in its header, or " if self.unstated else ""
        return [
            *notes,
            f"the scheduler's model{form} replays the measured points only within {tpot_rms:.0%} rms in TPOT{ttft}: "
            f"the table does not look like the workload assumed ({self.describe()}); {state}name the engine "
            "measured (--engine, with --model/--hardware) for its prompt budget",
        ]

    def describe(self) -> str:
        """The workload semantics in one line, as every header states it."""
        budget = self.max_num_batched_tokens
        prefill = "prefilled whole" if budget is None else f"chunked at {budget} tokens per step"
        if self.separate_prefill:
            prefill = "prefilled in steps of their own" + ("" if budget is None else f" of up to {budget} tokens")
        how = {"fitted": "the best replay", "assumed": "assumed: no TTFT to tell", "engine": "the engine's default"}
        why = f" ({how[self.budget_source]})" if self.budget_source in how else ""
        client = CLIENTS[self.client]
        if self.client == "poisson" and self.burstiness != 1.0:
            client = client.replace("Poisson", f"gamma (burstiness {self.burstiness:g})")
        client += "" if self.client_stated else " (assumed: the table does not say; '# client=…')"
        slots = "" if self.kv_slots is None else f", per-slot KV streams on {self.kv_slots} slots (a pass per run)"
        spread = " and ".join(
            f"{what} lengths ±{cv:.0%}" for what, cv in zip(("prompt", "output"), self.lengths_cv, strict=True) if cv
        )
        drawn_as = f", {spread} drawn as measured (sd ÷ mean)" if spread else ""
        return f"online, {client}, prompts {prefill}{why}{slots}{drawn_as}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_model": self.model.to_dict(),
            "client": self.client,
            "input_len": self.lengths[0],
            "output_len": self.lengths[1],
            "server_cap": self.server_cap,
            "burstiness": self.burstiness,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "separate_prefill": self.separate_prefill,
            "reserve_output": self.reserve_output,
            "kv_cache_tokens": self.kv_cache_tokens,
            "kv_slots": self.kv_slots,
            "budget_source": self.budget_source,
            "prefill_source": self.prefill_source,
            "semantics": self.describe(),
            "tpot_rms": self.tpot_rms,
            "ttft_rms": self.ttft_rms,
            "form_tpot_rms": None if self.form_rms is None else self.form_rms[0],
            "form_ttft_rms": None if self.form_rms is None else self.form_rms[1],
            "replay": self.replay,
            "conflicts": self.conflicts,
            "alternatives": {k: {"tpot_rms": t, "ttft_rms": f} for k, (t, f) in self.alternatives.items()},
        }


def prompt_at_context(context: float, output_len: float) -> float:
    """The prompt a mean context stands for with `output_len` output tokens (a sequence's context is its prompt and
    half its output on average: model.stepmodel.mean_context_tokens), one token at least."""
    return max(context - output_len / 2, 1.0)


def online_points(table: MeasurementTable, fit: Fit, input_len: float, output_len: float) -> list[Point]:
    """The table's points to replay, each with its client (the table's; a point without a closed-loop concurrency in
    a bench table of both kinds is open-loop): those the decode fit did not leave out past a cap. A closed loop runs
    at the client's concurrency where the table gives it (bench's running batch is a little below it), else at the
    batch."""
    replayable(table, input_len, output_len)
    # past a cap the data show (preempted, or queued behind the server's cap: their TTFT holds the queue)
    left_out = set() if fit.excluded is None else set(fit.excluded.indices(table).tolist())
    ttft = table.ttft_ms
    points = []
    for i in range(len(table)):
        if i in left_out:
            continue
        context = None if table.context_tokens is None else float(table.context_tokens[i])
        prompt = input_len if context is None else prompt_at_context(context, output_len)
        t = None if ttft is None or not np.isfinite(ttft[i]) else float(ttft[i]) / 1e3
        client = client_of(table)
        concurrency = float(table.batch[i])
        cap = None
        if table.concurrency is not None:
            if np.isfinite(table.concurrency[i]):  # a closed loop at the client's concurrency
                concurrency = float(table.concurrency[i])
                # GuideLLM's synchronous, concurrent and throughput points beside its rates start every stream at once
                # (only GuideLLM mixes them in a table of requests in flight); bench's concurrencies beside its rates
                # start theirs staggered
                client = client if client in CLOSED else ("burst" if in_flight_of(table) else "staggered")
                if table.batch[i] < SERVER_CAP_SHOWN * concurrency:  # the server held its batch below the client's
                    cap = max(round(float(table.batch[i])), 1)
                    t = None  # its TTFT is the queue in front of the cap, which the client's window sets: not fitted
            elif client in CLOSED:
                client = "poisson"  # bench --request-rate beside --concurrency points
        requests = None  # a whole run's requests (a row without them: a steady window)
        if table.requests is not None and np.isfinite(table.requests[i]):
            requests = max(round(float(table.requests[i])), 1)
        sent = None  # a run cut at a time limit: what it sent
        if table.sent is not None and table.requests is not None and np.isfinite(table.sent[i]):
            sent = max(round(float(table.sent[i])), 1)
        points.append(
            Point(
                concurrency,
                round(prompt),
                max(round(output_len), 2),
                float(table.tpot_ms[i]) / 1e3,
                t,
                float(table.throughput_tok_s[i]) / max(round(output_len), 2),
                float(table.counts[i]),
                requests,
                client,
                cap,
                in_flight_of(table),
                sent,
                table.semantics.burstiness or 1.0,
                lengths_cv_of(table),
            )
        )
    return points


def lengths_cv_of(table: MeasurementTable) -> tuple[float, float]:
    """The spread of the table's prompt and output lengths (sd ÷ mean; 0: fixed)."""
    return table.semantics.input_len_cv or 0.0, table.semantics.output_len_cv or 0.0


CLOSED = CLOSED_CLIENTS  # the clients a closed-loop table names (simulate's; UNTIMED: those started all at once)
# the replay runs every request step by step: lengths and streams past these are slips in a file, not workloads it
# could simulate in a reasonable time (an output of a million tokens took 97 s and 4 GB)
MOST_REPLAYED = {"prompt tokens a request": 2_097_152, "output tokens a request": 131_072, "streams at once": 100_000}


def replayable(table: MeasurementTable, input_len: float, output_len: float) -> None:
    """Refuse, naming the table, a workload past what the replay simulates (MOST_REPLAYED)."""
    given = (input_len, output_len, float(table.batch.max()))
    for (what, most), value in zip(MOST_REPLAYED.items(), given, strict=True):
        if value > most:
            raise TokenroofError(
                f"{table.source}: {value:,.0f} {what} is past what the scheduler's replay simulates (at most "
                f"{most:,}): check the file"
            )


def in_flight_of(table: MeasurementTable) -> bool:
    """Whether the table's batch counts the client's requests in flight (GuideLLM's request_concurrency), not the
    server's running batch: what an open loop's replay matches (`held_concurrency`)."""
    return table.semantics.batch_kind == "concurrency"


def client_of(table: MeasurementTable) -> str:
    """How the measuring client drove the server, as the table states it (staggered when it does not: the client
    whose TTFT is least affected by how streams line up)."""
    return table.semantics.client or "staggered"


def unstated_of(table: MeasurementTable) -> tuple[str, ...]:
    """What the table's header could say of the workload a replay rests on and does not: its lengths, its client,
    and for a llama-server its slots (each its own KV stream unless --kv-unified)."""
    sem = table.semantics
    said = []
    if sem.input_len is None or sem.output_len is None:
        said.append("input_len=… output_len=…")
    if sem.client is None:
        said.append("client=…")
    if sem.server == "llama-server" and sem.kv_slots is None:
        said.append("kv_slots=N (its -np, without --kv-unified)")
    return tuple(f"'# {s}'" for s in said)


def fit_serving(
    table: MeasurementTable,
    fit: Fit,
    input_len: float,
    output_len: float,
    kv_capacity_tokens: int | None = None,
    budget: int | str | None = "fit",
    budget_source: str = "given",
    separate: bool = False,
    reserve: bool = False,
) -> ServingFit | None:
    """The scheduler's step model replaying the table's online points (module doc); None when the prefill has
    neither measured TTFT nor the physics to price it. `budget`: the prompt budget per step (None: whole prompts),
    or "fit" to take the best replay of BUDGETS (and, where none replays the TTFT within REPLAY_MISFIT, of prefill
    steps of their own at SEPARATE_BUDGETS); `separate`: with a budget given, the server prefills in steps of their
    own (the engine's scheduling); `reserve`: it admits with each whole output reserved (TensorRT-LLM's)."""
    points = online_points(table, fit, input_len, output_len)
    has_ttft = any(p.ttft_s is not None for p in points)
    prior = fit.prior
    if not points or (not has_ttft and prior is None):
        return None
    client = client_of(table)
    kv_slots = table.semantics.kv_slots
    # an open loop's steps, and a staggered loop's phases, depend on how long steps take: designed once with the
    # starting model (the decode fit, its prefill priced from the TTFT), once more with the fitted one
    timed = any(p.client not in UNTIMED for p in points)
    terms = Terms.of(fit.step_model, prior, table.several_contexts)
    reference = terms.model(_start(terms, points)[0])
    if budget == "fit" and not has_ttft:  # TPOT alone barely tells how prompts were scheduled: assume whole ones
        budget, budget_source = None, "assumed"
    candidates: tuple[int | None, ...] = BUDGETS if isinstance(budget, str) else (budget,)
    tried: dict[str, tuple[ServingFit, float]] = {}
    closed = [math.ceil(p.concurrency) for p in points if p.client in CLOSED]
    high = max(closed, default=0)

    def replay(policies: Sequence[int | None], apart: bool) -> None:
        """Fit each prompt budget of one scheduling (prompts in the decode steps, or in steps of their own)."""
        peak = math.inf  # the most prompt tokens (and, mixed, decode tokens) a step of the unbudgeted replay holds
        for b in policies:
            if b is not None and (b >= peak or not budget_holds(b, high, apart)):
                continue  # no step would split (the same replay as no budget), or the budget cannot hold the batch
            try:
                designs = [design_at(p, b, kv_capacity_tokens, reference, kv_slots, apart, reserve) for p in points]
            except PromptOverBudget:
                if not isinstance(budget, str):
                    raise
                continue  # a budget tried that no prefill step of its own can hold the prompts in: not this server's
            if b is None:
                peak = max(float((d.prefill if apart else d.batch + d.prefill).max()) for d in designs)
            result, cost = _solve(terms, points, designs, fit.sigma_rel)
            if timed:
                timing = terms.model(result)
                designs = [design_at(p, b, kv_capacity_tokens, timing, kv_slots, apart, reserve) for p in points]
                result, cost = _solve(terms, points, designs, fit.sigma_rel)
            source = "fitted" if isinstance(budget, str) else budget_source
            stated = table.semantics.client is not None
            found = _result(result, terms, points, designs, client, b, source, has_ttft, stated)
            found.problem = (terms, list(points), designs, fit.sigma_rel)
            found.kv_slots = kv_slots
            found.in_flight = in_flight_of(table)
            found.burstiness = table.semantics.burstiness or 1.0
            found.lengths_cv = lengths_cv_of(table)
            found.separate_prefill = apart
            found.reserve_output = reserve
            found.kv_cache_tokens = kv_capacity_tokens
            found.unstated = unstated_of(table)
            found.lengths = (input_len, output_len)
            found.server_cap = server_cap_of(fit, table)
            tried[_budget_name(b, apart)] = (found, cost)

    replay(candidates, separate and not isinstance(budget, str))
    if not tried:
        raise TokenroofError(
            f"no prompt budget exceeds the measured concurrency (tried {', '.join(map(str, candidates))})"
        )
    mixed_name = min(tried, key=lambda k: tried[k][1])
    best, mixed_cost = tried[mixed_name]
    # llama.cpp prefills in the decode steps (per-slot KV streams, a llama-server measured): never steps of their own
    llama = kv_slots is not None or table.semantics.server == "llama-server"
    best_name = mixed_name
    if isinstance(budget, str) and has_ttft and not llama and (best.ttft_rms or 0.0) > REPLAY_MISFIT:
        replay(SEPARATE_BUDGETS, True)
        apart = min((k for k in tried if tried[k][0].separate_prefill), key=lambda k: tried[k][1])
        # taken only where the data show it plainly: an open loop's queue samples alone can tip a near tie
        if tried[apart][1] < SEPARATE_MARGIN * mixed_cost:
            best_name = apart
    best = tried[best_name][0]
    best.alternatives = {k: (f.tpot_rms, f.ttft_rms) for k, (f, _) in tried.items() if k != best_name}
    # knots by batch alone: one context's points. A replay within DEPARTURES_FROM departs by noise only; one further
    # off than REPLAY_MISFIT misses for another reason than the steps' shape (the workload or the scheduling assumed;
    # llama-server's scattered per-slot passes), and a correction would carry that miss to other loads (the figure
    # once given here, llama-server's saturation +12% instead of −2%, compared with the offered rate that the
    # protocol then read as carried: not a measurement; the rule rests on the reason alone)
    if not table.several_contexts and DEPARTURES_FROM < best.tpot_rms <= REPLAY_MISFIT:
        assert best.problem is not None
        designs = best.problem[2]
        bent = measured_departures(best.model, points, designs)
        if bent.batch_factors:  # what is reported and saved replays the model that runs: the form's rms kept beside
            best.form_rms = (best.tpot_rms, best.ttft_rms)
            best.model = bent
            best.replay, best.tpot_rms, best.ttft_rms = replayed_points(bent, points, designs)
    return best


def server_cap_of(fit: Fit, table: MeasurementTable) -> int | None:
    """The running-batch cap the measured server held its client to, where the table measured it: a running batch
    that stopped growing while the client's streams grew past it (fit/core.server_held; its points left out of the
    replay). A concurrency table's cap is an estimate (throughput × TPOT), and one point's running batch below its
    client's a ramp as often as a cap: neither is taken."""
    held = fit.excluded
    if table.semantics.batch_kind != "running" or held is None or held.left_out or held.cap is None:
        return None
    return max(round(held.cap), 1)


def knot_basis(knots: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """StepModel.batch_factors as a linear function of the factors at `knots` (sorted batches): factor(b) = Φ @ f +
    c, Φ of shape (batches, knots). Held at the first factor below the first knot, linear in log b between knots,
    fading to 1 over the doubling past the last."""
    b = np.maximum(np.asarray(batch, dtype=float), 1.0)
    phi = np.zeros((b.size, knots.size))
    const = np.zeros(b.size)
    logk = np.log(knots)
    k = np.clip(np.searchsorted(knots, b, "right") - 1, 0, knots.size - 1)  # the knot at or below each batch
    inside = (b > knots[0]) & (b < knots[-1])
    rows = np.arange(b.size)
    share = np.zeros(b.size)
    if knots.size > 1:
        upper = np.minimum(k + 1, knots.size - 1)
        span = np.where(upper > k, logk[upper] - logk[k], 1.0)
        share = np.where(inside, (np.log(b) - logk[k]) / span, 0.0)
        phi[rows[inside], upper[inside]] = share[inside]
    phi[rows, k] += np.where(inside, 1.0 - share, 0.0)
    below = b <= knots[0]
    phi[rows[below], 0] = 1.0
    past = (b >= knots[-1]) & ~below
    fade = np.clip(np.log2(b[past] / knots[-1]), 0.0, 1.0)
    phi[rows[past], knots.size - 1] = 1.0 - fade
    const[past] = fade
    return phi, const


def measured_departures(model: StepModel, points: Sequence[Point], designs: Sequence[Design]) -> StepModel:
    """The fitted form with the measured curve's departures from it kept in range (StepModel.batch_factors): a decode
    step (no prompt tokens) × a factor interpolated in log batch between knots at the mean decoding batches of the
    points whose TPOT is mostly decode steps (DECODE_SHARE), the factors chosen so that each such point's mean TPOT
    replays as measured (linear least squares over log TPOT's first order, each factor pulled weakly towards 1 and
    bounded). The form's terms are unchanged, so past those batches the form alone answers. The model as given
    with fewer than two such batches."""
    base = replace(model, batch_factors=())
    kept = []  # (point, design, its decode steps, their form's time without further passes, with them)
    means = []
    for p, d in zip(points, designs, strict=True):
        decode = (d.prefill == 0) & (d.batch >= 1)
        weight = d.tpot * decode
        if weight.sum() <= 0:
            continue
        main = base.steps_s(d.batch, d.context, d.prefill, d.prefill_sq)
        times = d.step_times_s(base)
        if float(weight @ main) / float(d.tpot @ times) >= DECODE_SHARE:
            kept.append((p, d, decode, main, times))
            means.append(max(float(weight @ d.batch / weight.sum()), 1.0))
    knots: list[float] = []
    for m in sorted(means):  # merge batches within KNOT_MERGE of the last knot
        if knots and m <= knots[-1] * (1 + KNOT_MERGE):
            continue
        knots.append(m)
    if len(knots) < 2:
        return base
    at = np.array(knots)
    matrix, offset, measured, root_w = [], [], [], []
    num = den = 0.0  # the decode steps' mean context per sequence, for the shrink below
    for p, d, decode, main, times in kept:
        phi, const = knot_basis(at, d.batch)
        scaled = d.tpot * main * decode
        matrix.append(scaled @ phi)
        # further forward passes (per-slot KV streams) and steps with prompt tokens: the form's
        offset.append(float(d.tpot @ (times - main) + (d.tpot * main) @ ~decode + scaled @ const))
        measured.append(p.tpot_s)
        root_w.append(math.sqrt(p.weight))
        num += float((d.tpot * decode) @ (d.context / np.maximum(d.batch, 1.0)))
        den += float((d.tpot * decode).sum())
    scale = np.array(root_w) / np.array(measured)
    pull = FACTOR_PULL * float(np.sqrt(np.mean(np.square(root_w))))  # against a point of the mean weight
    rows = np.vstack([np.array(matrix) * scale[:, None], pull * np.eye(at.size)])
    target = np.concatenate([np.array(root_w) - np.array(offset) * scale, pull * np.ones(at.size)])
    factors = lsq_linear(rows, target, bounds=FACTOR_BOUNDS).x
    # a step never gets faster with more sequences: where the factors would make it (a last factor above 1 fading
    # over a flat form, or factors falling between knots), they shrink towards 1 until it does not
    per_seq = num / den if den > 0 else 0.0
    shrink = 1.0
    while shrink > 1e-3 and not _rising(base, at, 1.0 + shrink * (factors - 1.0), per_seq):
        shrink /= 2
    factors = 1.0 + shrink * (factors - 1.0)
    return replace(base, batch_factors=tuple(zip(at.tolist(), factors.tolist(), strict=True)))


def _rising(form: StepModel, knots: np.ndarray, factors: np.ndarray, context_per_seq: float) -> bool:
    """Whether the form × these factors never falls as the batch grows, from one sequence to past the fade, at the
    points' mean context per sequence."""
    batches = np.unique(np.concatenate([np.arange(1.0, math.ceil(2 * knots[-1]) + 2), knots]))
    sm = replace(form, batch_factors=tuple(zip(knots.tolist(), factors.tolist(), strict=True)))
    steps = sm.step_time_s(batches, context_per_seq)
    return bool(np.all(np.diff(steps) >= -1e-12 * steps[:-1]))


def _budget_name(budget: int | None, separate: bool = False) -> str:
    if separate:
        return "prefill steps of their own" + ("" if budget is None else f" of up to {budget} tokens")
    return "whole prompts" if budget is None else f"chunked at {budget}"


def _start(terms: Terms, points: Sequence[Point]) -> list[np.ndarray]:
    """Starting points: the decode fit's terms, the compute per prompt token from the smallest point's TTFT (or the
    prior's centre), and that halved and doubled."""
    floors = terms.floors()
    base = terms.base
    f0 = max(base.t_fixed_s, floors["t_fixed_s"], 1e-6)
    w0 = max(base.t_weights_s, floors["t_weights_s"], 1e-6)
    s0 = max(base.t_seq_s + base.t_kv_token_s * 1000.0, 1e-7)
    with_ttft = [p for p in points if p.ttft_s is not None]
    if with_ttft:
        p = min(with_ttft, key=lambda q: q.concurrency)
        assert p.ttft_s is not None
        c0 = (p.ttft_s - f0 - p.concurrency * s0) / (p.input_len + p.concurrency)
    elif terms.prior is not None:
        c0 = terms.prior.weights_floor.t_compute_s / terms.prior.compute_center
    else:
        c0 = base.t_compute_s
    c0 = max(c0, floors["t_compute_s"], 1e-9)
    starts = []
    for scale in (1.0, 0.5, 2.0):
        values = {"t_fixed_s": f0, "t_weights_s": w0, "t_compute_s": c0 * scale, "t_seq_s": s0, "t_kv_token_s": 1e-9}
        starts.append(np.log(np.array([max(values[n], floors[n], 1e-12) for n in terms.names])))
    return starts


def condensed(designs: Sequence[Design]) -> tuple[Design, np.ndarray]:
    """Every point's steps in one stack and the point each belongs to, each distinct step once per point with its
    weights summed and the steps that weigh in neither mean left out: the same sums over ~8× fewer rows (a steady loop
    repeats its steps: 207,933 distinct of 1,571,910 over the fits of test_replay and test_advise), each of the
    solver's evaluations timing each once."""
    stack = Design.mix([(d, 1.0) for d in designs])
    owner = np.repeat(np.arange(len(designs)), [d.batch.size for d in designs])
    passes = np.ones(stack.batch.size) if stack.passes is None else stack.passes
    weighs = (stack.tpot != 0.0) | (stack.ttft != 0.0)
    rows = np.stack([owner, stack.batch, stack.context, stack.prefill, stack.prefill_sq, passes])[:, weighs]
    distinct, which = distinct_columns(rows)
    tpot = np.bincount(which, stack.tpot[weighs], distinct.shape[1])
    ttft = np.bincount(which, stack.ttft[weighs], distinct.shape[1])
    point, batch, context, prefill, prefill_sq, steps_passes = distinct
    design = Design(batch, context, prefill, prefill_sq, tpot, ttft, None if stack.passes is None else steps_passes)
    return design, point.astype(int)


def distinct_columns(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(rows, axis=1, return_inverse=True)` (the distinct columns in lexicographic order, and which one
    each column is) by one lexsort of the rows as keys: the same arrays, ~7× faster (np.unique sorts the columns
    as one structured value each)."""
    order = np.lexsort(rows[::-1])  # lexsort's last key is its first: the first row leads
    ordered = rows[:, order]
    new = np.ones(ordered.shape[1], dtype=bool)
    np.any(ordered[:, 1:] != ordered[:, :-1], axis=0, out=new[1:])
    which = np.empty(order.size, dtype=np.intp)
    which[order] = np.cumsum(new) - 1
    return ordered[:, new], which


def pseudo_huber(z: np.ndarray) -> np.ndarray:
    """Residuals whose squares are the pseudo-Huber loss 2(√(1 + z²) − 1): z itself while small, growing as √(2|z|)
    past 1 (scipy's soft_l1), so that one sample's queue far in a heavy tail pulls no harder than a few noise units."""
    return np.sign(z) * np.sqrt(2.0 * (np.sqrt(1.0 + z * z) - 1.0))


def _solve(
    terms: Terms, points: Sequence[Point], designs: Sequence[Design], sigma_rel: float
) -> tuple[np.ndarray, float]:
    """Least squares in log TPOT and log TTFT (each point weighted by its rows), with the prior's centres as a
    log-normal pull when the physics is known; bounded below by the floors. Returns the best of the starts."""
    measured_tpot = np.log([p.tpot_s for p in points])
    has_ttft = np.array([p.ttft_s is not None for p in points])
    measured_ttft = np.log([p.ttft_s if p.ttft_s is not None else 1.0 for p in points])
    root_w = np.sqrt([p.weight for p in points])
    floors = terms.floors()
    lower = np.log([max(floors[n], 1e-12) for n in terms.names])
    upper = np.full(len(terms.names), math.log(MAX_TERM_S))
    noise = max(sigma_rel, NOISE_FLOOR)
    # an open-loop point's TTFT: a sample of a queue (heavy-tailed near saturation), in units of the bench's noise and
    # the sample's spread together, on a pseudo-Huber loss; a closed loop's on squares
    sampled = np.array([d.ttft_spread is not None for d in designs])
    ttft_scale = np.hypot(noise, np.array([d.ttft_spread or 0.0 for d in designs]))
    prior = terms.prior

    # every point's steps in one stack, timed in one call per evaluation (the solver's hot path); each point's mean
    # TPOT and TTFT are its own steps' weighted sum
    stack, owner = condensed(designs)

    def residuals(x: np.ndarray) -> np.ndarray:
        sm = terms.model(x)
        times = stack.step_times_s(sm)
        tpot = np.bincount(owner, stack.tpot * times, len(designs))
        ttft = np.bincount(owner, stack.ttft * times, len(designs))
        parts = [root_w * (np.log(np.maximum(tpot, 1e-12)) - measured_tpot)]
        miss = np.log(np.maximum(ttft, 1e-12)) - measured_ttft
        miss = np.where(sampled, noise * pseudo_huber(miss / ttft_scale), miss)
        parts.append((root_w * miss)[has_ttft])
        if prior is not None:  # the efficiencies' log-normal prior, in units of the measurement noise
            eff = terms.efficiencies(sm)
            parts.append(
                np.array(
                    [
                        noise * math.log(eff["bandwidth"] / prior.bandwidth_center) / prior.sigma_log_bandwidth,
                        noise * math.log(eff["compute"] / prior.compute_center) / prior.sigma_log_compute,
                    ]
                )
            )
        return np.concatenate(parts)

    best: tuple[np.ndarray, float] | None = None
    for x0 in _start(terms, points):
        x0 = np.clip(x0, lower + 1e-9, upper - 1e-9)
        found = least_squares(residuals, x0, bounds=(lower, upper), method="trf", x_scale=1.0, max_nfev=400)
        cost = float(found.cost)
        if best is None or cost < best[1]:
            best = (found.x, cost)
    assert best is not None
    return best


def _result(
    x: np.ndarray,
    terms: Terms,
    points: Sequence[Point],
    designs: Sequence[Design],
    client: str,
    budget: int | None,
    budget_source: str,
    has_ttft: bool,
    table_states_client: bool = True,
) -> ServingFit:
    sm = terms.model(x)
    replay, tpot_rms, ttft_rms = replayed_points(sm, points, designs)
    conflicts = []
    floors = terms.floors()
    if terms.prior is not None:
        for name, what in (("t_weights_s", "the weights stream"), ("t_compute_s", "a prompt token's GEMMs run")):
            if getattr(sm, name) <= floors[name] * 1.001:
                conflicts.append(
                    f"the measured points ask {what} at or beyond the peak of {terms.prior.label}: held at the peak "
                    f"({floors[name] * 1e3:.4g} ms); check the hardware and model named, or the table's batch"
                )
    return ServingFit(
        sm,
        client,
        table_states_client,
        budget,
        budget_source,
        "ttft" if has_ttft else "physics",
        replay,
        tpot_rms,
        ttft_rms,
        conflicts,
    )


def replayed_points(
    sm: StepModel, points: Sequence[Point], designs: Sequence[Design]
) -> tuple[list[dict[str, Any]], float, float | None]:
    """Each point as measured beside `sm`'s replay of it, and the rms of log(replayed / measured) in TPOT and TTFT
    (None: no TTFT measured). An open-loop point's row also holds its TTFT's sampling spread, and whether its TTFT is
    a queue's sample far in the tail (`ttft_outliers`): such a point is left out of the TTFT rms, which measures how
    the model replays the rest."""
    replay = []
    tpot_err, ttft_err = [], []
    for p, d in zip(points, designs, strict=True):
        tpot, ttft = d.tpot_s(sm), d.ttft_s(sm)
        replay.append(
            {
                "batch": p.concurrency,
                "tpot_ms": p.tpot_s * 1e3,
                "tpot_ms_replayed": tpot * 1e3,
                "ttft_ms": None if p.ttft_s is None else p.ttft_s * 1e3,
                "ttft_ms_replayed": ttft * 1e3,
            }
        )
        tpot_err.append(math.log(tpot / p.tpot_s))
        ttft_err.append(math.nan if p.ttft_s is None else math.log(ttft / p.ttft_s))
    far = ttft_outliers(np.array(ttft_err), [d.ttft_spread for d in designs])
    for row, d, out in zip(replay, designs, far, strict=True):
        if d.ttft_spread is not None:
            row.update(ttft_spread=d.ttft_spread, ttft_outlier=bool(out))
    kept = [e for e, out in zip(ttft_err, far, strict=True) if math.isfinite(e) and not out]
    ttft_rms = float(np.sqrt(np.mean(np.square(kept)))) if kept else None
    return replay, float(np.sqrt(np.mean(np.square(tpot_err)))), ttft_rms


def ttft_outliers(errors: np.ndarray, spreads: Sequence[float | None]) -> np.ndarray:
    """Which points' TTFT misses (log errors; NaN: not measured) are an open loop's queue sample far in its tail: an
    open-loop point (a sampling spread known) missing by more than REPLAY_MISFIT and OUTLIER_SCALES robust scales of
    all the points' misses (1.4826 × their median, a normal sd's estimate unmoved by the tail itself), and by more
    than twice its own spread. Near saturation one run's mean TTFT can sit far above what its rate gives on average
    (400 Poisson arrivals at 95% load: ±86% between runs); a closed loop's TTFT is never one."""
    sampled = np.array([s is not None for s in spreads])
    finite = np.isfinite(errors)
    if not (sampled & finite).any():
        return np.zeros(errors.size, dtype=bool)
    scale = max(1.4826 * float(np.median(np.abs(errors[finite]))), NOISE_FLOOR)
    spread = np.array([s or 0.0 for s in spreads])
    bound = np.maximum(max(REPLAY_MISFIT, OUTLIER_SCALES * scale), 2.0 * spread)
    return sampled & finite & (np.abs(np.where(finite, errors, 0.0)) > bound)


# -- the model other commands run -------------------------------------------------------------
def measured_lengths(table: MeasurementTable, lengths: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """The measured workload's prompt and output tokens: the table's, else `lengths` (flags); None when unknown."""
    sem = table.semantics
    if sem.input_len is not None and sem.output_len is not None:
        return sem.input_len, sem.output_len
    return lengths


def serving_fit(
    fit: Fit,
    table: MeasurementTable,
    kv_capacity_tokens: int | None = None,
    lengths: tuple[float, float] | None = None,
    budget: int | str | None = "fit",
    separate: bool = False,
    reserve: bool = False,
) -> ServingFit | None:
    """The scheduler's model replaying an online table, or None: a static or pure-decode table, unknown lengths, or a
    prefill that nothing prices (no TTFT, no prior). `budget`: the measured server's prompt budget per step as an
    engine profile gives it (None: whole prompts), or "fit"; `separate`: the engine prefills in steps of their own."""
    known = measured_lengths(table, lengths)
    if not online(table) or known is None:
        return None
    return fit_serving(table, fit, known[0], known[1], kv_capacity_tokens, budget, "engine", separate, reserve)


def travelling_of(replay: ServingFit, fit: Fit, table: MeasurementTable) -> Travelling:
    """A scheduler fit as the model that travels (`predict --save-model`, `--fit`)."""
    prior = fit.prior
    context = prior.context_tokens if prior is not None else fit.context_tokens or None
    # the workload it replayed, to compare a run's with: none single where the files measured several (their mean,
    # 1,463 tokens of 1,024- and 4,096-token runs, is no workload they ran)
    lengths: tuple[float | None, float | None] = (None, None) if table.several_contexts else replay.lengths
    info = Replayed(
        replay.client,
        replay.max_num_batched_tokens,
        replay.prefill_source,
        replay.tpot_rms,
        replay.ttft_rms,
        replay.describe(),
        replay.kv_slots,
        None if replay.form_rms is None else replay.form_rms[0],
        replay.separate_prefill,
        lengths[0],
        lengths[1],
        replay.server_cap,
        replay.reserve_output,
    )
    label = prior.label if prior is not None else None
    return Travelling(replay.model, context, 0.0, True, table.source, label, info, replay.kv_cache_tokens)


def portable_model(
    fit: Fit,
    table: MeasurementTable,
    kv_capacity_tokens: int | None = None,
    lengths: tuple[float, float] | None = None,
    budget: int | str | None = "fit",
    reserve: bool = False,
    separate: bool = False,
) -> Travelling:
    """The step model other commands run: an online table whose prefill is priced (measured TTFT, or the physics)
    gets the scheduler's own model, fitted to replay its points (`lengths`: the measured prompt and output tokens
    where the table does not state them; `budget`: its prompt budget per step, or "fit"); anything else the decode
    fit's (fit.travel.portable)."""
    replay = serving_fit(fit, table, kv_capacity_tokens, lengths, budget, separate, reserve)
    return travelling_of(replay, fit, table) if replay is not None else portable(fit, table)


def fitted_models(
    paths: Path | Sequence[Path],
    prior_of: Any = None,
    n_samples: int = 0,
    kv_capacity_tokens: int | None = None,
    budget: int | str | None = "fit",
    reserve: bool = False,
    separate: bool = False,
) -> tuple[Travelling, list[StepModel]]:
    """Fit measurement files and make the result the model other commands run (`portable_model`), with `n_samples`
    interval samples made the same way; the server's `budget`, `reserve` and `separate` as `engine_scheduling`."""
    fit, table = from_table(paths, prior_of, n_samples)
    replay = serving_fit(fit, table, kv_capacity_tokens, None, budget, separate, reserve)
    if replay is not None:
        return travelling_of(replay, fit, table), replay.samples(n_samples)
    return portable(fit, table), portable_samples(fit, table)


def replay_predictions(
    serving: ServingFit,
    batches: Sequence[float],
    contexts: Sequence[float | None],
    input_len: float,
    output_len: float,
    kv_capacity_tokens: int | None = None,
) -> dict[tuple[float, float | None], tuple[float, float, float]]:
    """The scheduler's model at each asked batch and context (None: as measured), run as the measuring client drove
    the server: (mean TPOT s, mean TTFT s, output tok/s) by (batch, context). A closed loop runs at the batch as its
    concurrency (a fractional one between the whole ones around it); an open-loop table (a rate sweep, its batch the
    mean concurrency measured) at the rate that holds that concurrency, over several arrival samples. A
    batch the fitted prompt budget cannot hold (it needs a token per sequence), or a closed loop's under one stream,
    has no answer here."""
    out = max(round(output_len), 2)
    answers = {}
    for context in contexts:
        prompt = input_len if context is None else prompt_at_context(context, output_len)
        lengths = drawn(prompt, serving.lengths_cv[0]), drawn(out, serving.lengths_cv[1])
        for batch in batches:
            if serving.client in ("poisson", "constant"):
                figures = _open_loop_at(serving, batch, lengths, kv_capacity_tokens)
            else:
                figures = _closed_loop_at(serving, batch, lengths, kv_capacity_tokens)
            if figures is not None:
                answers[(float(batch), context)] = figures
    return answers


def _closed_loop_at(
    serving: ServingFit, batch: float, lengths: tuple[Lengths, Lengths], kv: int | None
) -> tuple[float, float, float] | None:
    if batch < 1:  # a closed loop runs whole streams, one at least (0.5 had been run as 1)
        return None
    client = serving.client if serving.client in CLOSED else "staggered"
    budget = serving.max_num_batched_tokens
    low, high = max(math.floor(batch), 1), max(math.ceil(batch), 1)
    runs = []
    for c in sorted({low, high}):
        if not budget_holds(budget, c, serving.separate_prefill):
            return None
        slots = serving.kv_slots
        loop = closed_loop(c, *lengths, client)
        result = simulate(
            serving.model,
            loop,
            slots or min(c, serving.server_cap or c),  # the client's streams past the server's cap queue
            0,
            kv,
            max_num_batched_tokens=budget,
            per_slot_kv=slots is not None,
            separate_prefill=serving.separate_prefill,
            reserve_output=serving.reserve_output,
        )
        summary = result.summary()
        runs.append((summary["tpot_ms"]["mean"], summary["ttft_ms"]["mean"], summary["throughput_tok_s"]))
    share = batch - low if high > low else 0.0
    tpot, ttft, thr = ((1 - share) * a + share * b for a, b in zip(runs[0], runs[-1], strict=True))
    return tpot / 1e3, ttft / 1e3, thr


def _open_loop_at(
    serving: ServingFit, batch: float, lengths: tuple[Lengths, Lengths], kv: int | None
) -> tuple[float, float, float] | None:
    """An open loop whose mean concurrency is `batch`, as a measured point is replayed (`matched_runs`, from the rate
    Little's law gives a closed loop's request lifetime): the runs' mean TPOT, TTFT and output throughput."""
    guess = _closed_loop_at(replace(serving, client="staggered"), max(batch, 1.0), lengths, kv)
    if guess is None:
        return None
    tpot_s, ttft_s, _ = guess
    served = Served(
        serving.model,
        serving.client,
        kv,
        serving.max_num_batched_tokens,
        serving.kv_slots,
        serving.burstiness,
        serving.separate_prefill,
        serving.reserve_output,
    )
    start = batch / (ttft_s + (lengths[1].mean - 1) * tpot_s)
    summaries = [r.summary() for r in matched_runs(served, lengths, start, batch, serving.in_flight)]
    tpot = float(np.mean([s["tpot_ms"]["mean"] for s in summaries]))
    ttft = float(np.mean([s["ttft_ms"]["mean"] for s in summaries]))
    throughput = float(np.mean([s["throughput_tok_s"] for s in summaries]))
    return tpot / 1e3, ttft / 1e3, throughput


def engine_scheduling(physics: Any) -> tuple[int | str | None, bool, bool]:
    """How the named deployment's server schedules, for a replay of its measurements (predict, advise, simulate and
    plan --fit alike): its prompt budget ("fit" where no engine says: the best replay), whether it prefills in steps
    of their own (vLLM V0 without chunked prefill, TGI: at that step's budget), whether it admits with each whole
    output reserved (TensorRT-LLM)."""
    budget = physics.prompt_budget() if physics.known else "fit"
    separate = physics.known and budget is None and physics.engine_profile().prefill == "separate"
    if separate:
        budget = physics.separate_prefill_budget()
    return budget, separate, physics.known and physics.reserves_output


def with_scheduler(result: Any, physics: Any, lengths: tuple[float, float] | None = None) -> Any:
    """`predict`'s answer (fit/predict.PredictResult) with the scheduler's model of an online table: fitted to replay
    it (`result.serving`, what --save-model writes) and, where the table measured TTFT, answering at the asked
    batches and contexts (`result.scheduler`). `physics`: the deployment named (its KV pool, its engine's prompt
    budget); `lengths`: the measured prompt and output tokens where the table does not state them."""
    table = result.table
    kv = physics.kv_pool_tokens() if physics.known else None
    budget, separate, reserve = engine_scheduling(physics)
    result.serving = serving = serving_fit(result.fit, table, kv, lengths, budget, separate, reserve)
    if serving is not None:
        result.warnings += [f"prior and data disagree: {c}" for c in serving.conflicts] + serving.misfit()
        excluded = result.fit.excluded
        if excluded is not None:  # online_points leaves them out: the replay and its rms are over the rest
            rows = excluded.indices(table).tolist()
            given = table.concurrency  # the client's concurrency where the table gives it, else the batch
            at = [
                float(given[i]) if given is not None and np.isfinite(given[i]) else float(table.batch[i]) for i in rows
            ]
            shown = ", ".join(f"{c:g}" for c in at[:5])
            result.warnings.append(
                f"{'point' if len(rows) == 1 else 'points'} at concurrency {shown} left out of the scheduler's replay "
                "and its rms (past the cap the data show, where the server preempted or queued)"
            )
        if reserve:
            result.warnings += physics.admission_notes(kv)
    known = measured_lengths(table, lengths)
    if serving is not None and serving.prefill_source == "ttft" and known is not None:
        asked = list(result.contexts) if result.contexts else [None]
        result.scheduler = replay_predictions(serving, result.batches.tolist(), asked, *known, kv)
        moved = [c for c in asked if c is not None and any(key[1] == c for key in result.scheduler)]
        if moved:  # the workload each context stands for, on the scheduler (replay_predictions' prompt)
            result.warnings.append(
                "at each context asked the scheduler runs prompts of that context less half the measured output ("
                + ", ".join(f"{prompt_at_context(c, known[1]):,.0f} tokens at {c:,.0f}" for c in moved)
                + f") with the measured {known[1]:,.4g}-token outputs: their prefill moves with them"
            )
        missing = sorted({b for b in result.batches.tolist() for c in asked if (float(b), c) not in result.scheduler})
        under = [b for b in missing if b < 1 and serving.client not in ("poisson", "constant")]
        beyond = [b for b in missing if b not in under]
        if under:
            result.warnings.append(
                f"batch {', '.join(f'{b:g}' for b in under[:5])}: under one stream, which no closed loop runs: "
                "answered from the decode fit's line alone, without TTFT"
            )
        if beyond:
            shown = ", ".join(f"{b:g}" for b in beyond[:5])
            result.warnings.append(
                f"batch {shown}: beyond the {serving.max_num_batched_tokens}-token prompt budget the server was fitted "
                "with (a step holds a token per sequence): answered from the decode fit alone, without TTFT"
            )
        # the measured TTFT priced a prompt token's GEMMs: the compute the decode line lacked is known
        result.warnings = [w for w in result.warnings if not w.startswith("no knee observed")]
        if kv is not None and result.scheduler:  # past the memory's cap the rows are the scheduler's, not flat
            from tokenroof.fit.predict import CAP_FLAT, CAP_SCHEDULED
            from tokenroof.model.prefix import reserved_life_tokens

            scheduled = CAP_SCHEDULED
            if reserve and known is not None:  # none preempted: at most what the cache holds at their whole length
                held = physics.max_batch(reserved_life_tokens(*known))
                scheduled = (
                    "the scheduler's answers there admit as the engine does, each request with its whole output "
                    f"reserved: at most {held} run at once at these lengths (prompt and output, not the mean context), "
                    "none preempted, the rest queue, so throughput levels off and TTFT grows with the queue"
                )
            result.warnings = [
                w.replace(CAP_FLAT, scheduled) if w.startswith("batches above") else w for w in result.warnings
            ]
        if kv is None and float(result.batches.max()) > result.fit.batch_range[1]:
            result.warnings.append(
                "past the measured concurrency the KV cache may fill and the server preempt, which these answers do "
                "not see: its size comes from --model/--hardware (or the server's own, --kv-cache-tokens in simulate)"
            )
        knee = serving.model.knee_batch(0.0)
        if knee is not None and knee > result.fit.batch_range[1]:
            folded = result.fit.step_model.knee_batch(0.0)
            beside = (
                f" (the decode fit's knee of {folded:.3g} folds each step's share of prompt compute into its "
                "per-sequence terms)"
                if folded is not None and abs(folded / knee - 1) > 0.1
                else ""
            )
            result.warnings.append(
                f"the measured TTFT prices a token's GEMMs at {serving.model.t_compute_s * 1e6:.3g} µs: the decode "
                f"step's knee, prompts apart, lies near batch {knee:.0f}, past the measured points{beside}; the "
                "scheduler's answers carry it"
            )
    return result
