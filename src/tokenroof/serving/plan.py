"""`plan`: the cheapest replicas × batch cap that meets TTFT and TPOT SLOs at a target rate, with an interval.

Each candidate is simulated (`simulate`) over several seeds and, when the step
model comes from a fit, over samples of the fit; a candidate is feasible when the
worst of those runs meets both targets (on the SLO's statistic: p99 unless told). The search walks replica counts up
from the throughput lower bound and, at each, tries batch caps from large to
small; the cheapest feasible count wins, and among its caps the one with the most
headroom. A winner whose runs were too short to read (simulate's warnings: the running
batch still grew across the window, the drain read TPOT low, or the window held few
independent stretches of the load, so its p99 read low) runs again with 4× and then 16×
the requests and is judged on those runs. Candidates are
evaluated in parallel processes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model.disagg import Disaggregation
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.advice import engine_flags
from tokenroof.serving.engine.core import PLAIN, Server, budget_holds
from tokenroof.serving.saturation import STATISTICS, at_cap
from tokenroof.serving.simulate import OVERLOADED, Lengths, Workload, simulate

CAPS = (256, 128, 64, 32, 16, 8)
SETTLE_FACTOR, SETTLE_ROUNDS = 4, 2  # a winner whose runs had not settled runs again with 4×, then 16× the requests
TTFT_STILL_FALLING = 0.05  # a replica more that lowers the best TTFT by less than this: the queue is gone
QUEUED_SHARE = 0.5  # a TTFT at least this share of which passed before any of its prompt ran is bound by queueing
PREFILL_AND_STEP = "prefill and step, no queue"  # what a TTFT is without its queue: the steps that ran its prompt


@dataclass(frozen=True)
class Slo:
    """TTFT and TPOT targets on one statistic of their per-request distributions (mean, p50, p90 or p99)."""

    ttft_ms: float
    tpot_ms: float
    statistic: str = "p99"

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise ParameterError(f"unknown {{}} '{self.statistic}'; known: {', '.join(STATISTICS)}", "slo_statistic")
        if not (0 < self.ttft_ms < math.inf and 0 < self.tpot_ms < math.inf):
            raise TokenroofError("SLOs must be positive finite numbers of milliseconds")

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms}

    def label(self, metric: str) -> str:
        return f"{metric} {self.statistic}"


@dataclass(frozen=True)
class Candidate:
    replicas: int
    max_num_seqs: int
    router: str = "least-outstanding"  # the fleet's router (simulate's)


@dataclass
class Outcome:
    """A candidate's runs, one per (seed, model sample): each run's TTFT and TPOT distributions."""

    candidate: Candidate
    requests: int = 0  # requests per run
    ttft_ms: list[dict[str, float | None]] = field(default_factory=list)
    tpot_ms: list[dict[str, float | None]] = field(default_factory=list)
    throughput_tok_s: list[float] = field(default_factory=list)
    preemptions: list[int] = field(default_factory=list)
    unsteady: list[str] = field(default_factory=list)  # per run too short to read, the first of simulate's warnings
    overloaded: bool = False  # a run completed fewer requests than arrived: its queue grows for as long as it runs
    queue_wait_ms: list[dict[str, float | None]] = field(default_factory=list)  # each run's wait before its prompt ran

    def add(self, summary: dict[str, Any]) -> None:
        """One run's figures, from simulate's summary."""
        if "queue_wait_ms" in summary:
            self.queue_wait_ms.append(summary["queue_wait_ms"])
        self.ttft_ms.append(summary["ttft_ms"])
        self.tpot_ms.append(summary["tpot_ms"])
        self.throughput_tok_s.append(summary["throughput_tok_s"])
        self.preemptions.append(summary["preemptions"])
        self.unsteady.extend(summary["warnings"][:1])
        self.overloaded |= any(w.startswith(OVERLOADED) for w in summary["warnings"])

    def worst(self, metric: str, statistic: str) -> float:
        """The largest `statistic` of `metric` over the runs (a run with no value counts as never meeting it)."""
        values = [run[statistic] for run in getattr(self, metric)]
        return max(math.inf if v is None else v for v in values)

    def feasible(self, slo: Slo) -> bool:
        """Both targets met in every run, and the load carried: an overloaded fleet's TTFT is that of however long
        its run lasted (a loose TTFT target had passed one carrying a sixth of the rate)."""
        return (
            not self.overloaded
            and self.worst("ttft_ms", slo.statistic) <= slo.ttft_ms
            and self.worst("tpot_ms", slo.statistic) <= slo.tpot_ms
        )

    def headroom(self, slo: Slo) -> float:
        return min(
            slo.ttft_ms / self.worst("ttft_ms", slo.statistic), slo.tpot_ms / self.worst("tpot_ms", slo.statistic)
        )

    def binding(self, slo: Slo) -> str:
        """The constraint closest to (or past) its limit, named by its cause (`ttft_cause`); on a candidate that
        meets both targets none binds yet: the nearest, and how near (a winner at 58% of its TPOT target had read
        "TPOT p99 (batch size)" as though the batch size held it there)."""
        ttft = self.worst("ttft_ms", slo.statistic) / slo.ttft_ms
        tpot = self.worst("tpot_ms", slo.statistic) / slo.tpot_ms
        if self.overloaded and ttft <= 1 and tpot <= 1:
            return "load (overloaded: its queue grows)"
        if max(self.preemptions) > 0 and ttft >= tpot:
            named = "KV-cache capacity (preemptions raise TTFT)"
        elif ttft < tpot:
            named = f"{slo.label('TPOT')} (batch size)"
        else:
            named = f"{slo.label('TTFT')} ({self.ttft_cause(slo.statistic)})"
        if self.feasible(slo):  # floored: a row that meets its target never reads 100%
            return f"nearest: {named}, {math.floor(100 * max(ttft, tpot))}% of target"
        return named

    def ttft_cause(self, statistic: str) -> str:
        """What the TTFT is spent on: a queue (for a place in the batch, or behind other prompts in the prefill
        budget) where at least QUEUED_SHARE of it passed before any of the prompt ran (simulate's queue_wait, vLLM's
        queue time), else the steps that ran the prompt (slow where they also hold a large batch). Queueing where
        the runs did not say their wait."""
        if not self.queue_wait_ms:
            return "queueing"
        wait = max(math.inf if (v := run[statistic]) is None else v for run in self.queue_wait_ms)
        return "queueing" if wait >= QUEUED_SHARE * self.worst("ttft_ms", statistic) else PREFILL_AND_STEP

    def to_dict(self, slo: Slo) -> dict[str, Any]:
        """The contract's shape: each distribution is the median run, `_low`/`_high` the smallest and largest run."""
        row: dict[str, Any] = {
            "replicas": self.candidate.replicas,
            "max_num_seqs": self.candidate.max_num_seqs,
            "requests": self.requests,
            "feasible": self.feasible(slo),
        }
        for metric in ("ttft_ms", "tpot_ms"):
            runs = getattr(self, metric)
            for suffix, pick in (("", _median), ("_low", min), ("_high", max)):
                row[metric + suffix] = {s: _over(runs, s, pick) for s in STATISTICS}
        row["throughput_tok_s"] = _median(self.throughput_tok_s)
        row["throughput_tok_s_low"] = min(self.throughput_tok_s)
        row["throughput_tok_s_high"] = max(self.throughput_tok_s)
        row["preemptions"] = max(self.preemptions)
        row["binding"] = self.binding(slo)
        return row


def _median(values: Sequence[float]) -> float:
    return float(np.median(values))


def _over(
    runs: Sequence[dict[str, float | None]], statistic: str, pick: Callable[[list[float]], float]
) -> float | None:
    values = [run[statistic] for run in runs]
    return None if any(v is None for v in values) else float(pick([v for v in values if v is not None]))


def run_candidate(args: tuple[Candidate, Sequence[StepModel], Workload, Sequence[int], Server]) -> Outcome:
    candidate, models, workload, seeds, server = args
    outcome = Outcome(candidate, workload.num_requests)
    for model in models:
        for seed in seeds:
            s = simulate(
                model,
                workload,
                candidate.max_num_seqs,
                seed,
                replicas=candidate.replicas,
                router=candidate.router,
                **server.settings(),
            ).summary()
            outcome.add(s)
    return outcome


def replica_throughput_tok_s(model: StepModel, workload: Workload, cap: int, server: Server) -> float:
    """What one replica gives kept full at `cap`, its steps also prefilling the prompts (saturation.at_cap: the
    figure advise reports for the same cap)."""
    return at_cap(model, workload.input_len, workload.output_len, cap, server).throughput_tok_s


def replicas_lower_bound(per_replica_tok_s: float, workload: Workload) -> int:
    """Replicas needed at the best case: each one at its saturated throughput."""
    needed = workload.rate_req_s * workload.output_len.mean
    return max(1, math.ceil(needed / per_replica_tok_s))


def workload_dict(workload: Workload) -> dict[str, Any]:
    """The traffic as plan's JSON states it: rate, arrivals, each length's mean and distribution."""

    def lengths(x: Lengths) -> dict[str, Any]:
        return {"mean": x.mean, "distribution": x.kind, "spread": None if x.kind == "fixed" else x.spread}

    prefix = workload.input_len.shared_prefix
    return {
        "request_rate_req_s": workload.rate_req_s,
        "burstiness": workload.burstiness,
        "input_len": lengths(workload.input_len),
        "output_len": lengths(workload.output_len),
        "num_requests": workload.num_requests,
        "shared_prefix": None if prefix is None else prefix.to_dict(),
    }


@dataclass
class Plan:
    slo: Slo
    chosen: Outcome | None
    tried: list[Outcome]
    reason: str
    replica: tuple[int, float] = (0, 0.0)  # the cap at which one replica kept full gives the most, and that tok/s
    workload: Workload | None = None  # the traffic planned for (stated in the answer: it is an assumption)
    router: str = "least-outstanding"  # the fleet's router (an assumption too: round-robin smooths, random does not)

    def to_dict(self) -> dict[str, Any]:
        return {
            "feasible": self.chosen is not None,
            "workload": None if self.workload is None else workload_dict(self.workload),
            "router": self.router,
            "reference": {"max_num_seqs": self.replica[0], "throughput_tok_s": self.replica[1]},
            "chosen": None if self.chosen is None else self.chosen.to_dict(self.slo),
            "reason": self.reason,
            "slo": self.slo.to_dict(),
            "interval": "_low/_high: the smallest and largest over every seed × model sample",
            "points": [o.to_dict(self.slo) for o in self.tried],
            "engine_flags": None if self.chosen is None else engine_flags(self.chosen.candidate.max_num_seqs),
            "warnings": self.warnings(),
        }

    def warnings(self) -> list[str]:
        if self.chosen is None or not self.chosen.unsteady:
            return []
        c = self.chosen.candidate
        return [
            f"{c.replicas} × max_num_seqs {c.max_num_seqs}: {len(self.chosen.unsteady)} of its runs had not settled "
            f"even with {self.chosen.requests:,} requests each (e.g. {self.chosen.unsteady[0]}); its latencies may be "
            "optimistic: raise --num-requests"
        ]


class InProcess:
    """`map` in this process (`--workers 1`: no pool of processes to start, nothing to pickle)."""

    def map(self, fn: Any, jobs: Any) -> Any:
        return map(fn, jobs)

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class RayPool:
    """`map` over a Ray cluster (`--ray ADDRESS`; "local" starts one on this machine). Optional extra `ray`."""

    def __init__(self, address: str) -> None:
        try:
            import ray
        except ImportError:
            raise ParameterError("{} needs Ray: pip install 'tokenroof[ray]'", "ray") from None
        self.ray = ray
        if not ray.is_initialized():
            if address == "local":
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        self.task = ray.remote(run_candidate)

    def map(self, fn: Any, jobs: Any) -> Any:
        return self.ray.get([self.task.remote(job) for job in jobs])

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def make_plan(
    models: Sequence[StepModel],
    workload: Workload,
    slo: Slo,
    seeds: Sequence[int] = (0, 1, 2),
    server: Server = PLAIN,
    max_replicas: int = 64,
    workers: int | None = None,
    caps: Sequence[int] = CAPS,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    router: str = "least-outstanding",
) -> Plan:
    """Cheapest replica count (then most headroom) meeting both SLOs in every seed × model sample, each replica a
    `server` (its KV cache, prompt budget, KV streams and speculation), the fleet behind `router`."""
    if not models:
        raise TokenroofError("no step model to plan with")
    budget = server.max_num_batched_tokens
    held = [cap for cap in caps if budget_holds(budget, cap, server.separate_prefill)]
    if not held:
        raise ParameterError(
            f"{{}} {budget} holds none of the batch caps plan searches ({', '.join(map(str, caps))}): each running "
            "sequence takes one token of every step's budget",
            "max_num_batched_tokens",
        )
    caps = held
    best_cap, per_replica = max(
        ((cap, replica_throughput_tok_s(models[0], workload, cap, server)) for cap in caps),
        key=lambda pair: pair[1],
    )
    start = replicas_lower_bound(per_replica, workload)
    if start > max_replicas:
        return Plan(
            slo,
            None,
            [],
            f"no configuration meets the SLOs: carrying {workload.rate_req_s * workload.output_len.mean:,.0f} output "
            f"tok/s takes at least {start:,} replicas (one kept full gives at most {per_replica:,.0f}, at "
            f"max_num_seqs {best_cap}, prefill included), past --max-replicas {max_replicas}",
            (best_cap, per_replica),
            workload,
            router,
        )
    tried: list[Outcome] = []
    pool_cm: Any = (
        RayPool(ray_address)
        if ray_address
        else InProcess()
        if workers == 1
        else ProcessPoolExecutor(max_workers=workers)
    )
    most = workload.num_requests * SETTLE_FACTOR**SETTLE_ROUNDS
    last_ttft: float | None = None  # the best TTFT at the replica count before
    with pool_cm as pool:

        def longer(o: Outcome) -> Outcome:
            return rerun(pool, o, models, workload, seeds, server)

        for replicas in range(start, max_replicas + 1):
            jobs = [(Candidate(replicas, cap, router), models, workload, seeds, server) for cap in caps]
            outcomes = list(pool.map(run_candidate, jobs))
            tried.extend(outcomes)
            if progress is not None:
                progress(replicas, len(tried))
            best = settled_best(outcomes, tried, slo, longer, most)
            if best is not None:
                below = [o for o in tried if o.candidate.replicas == replicas - 1]
                if below:
                    why = f"{replicas - 1} fail, bound by " + max(below, key=lambda o: o.headroom(slo)).binding(slo)
                else:
                    why = (
                        f"fewer cannot carry {workload.rate_req_s * workload.output_len.mean:,.0f} output tok/s: "
                        f"one replica kept full gives at most {per_replica:,.0f} (at max_num_seqs {best_cap}, "
                        "prefill included)"
                    )
                count = "1 replica is" if replicas == 1 else f"{replicas} replicas is"
                reason = f"{count} the fewest that meets both SLOs"
                reason += f" ({why})" if replicas > 1 else ""
                if best.requests > workload.num_requests:
                    reason += (
                        f"; its runs had not settled at {workload.num_requests:,} requests: judged on {best.requests:,}"
                    )
                return Plan(slo, best, tried, reason, (best_cap, per_replica), workload, router)
            if all(o.worst("tpot_ms", slo.statistic) > slo.tpot_ms for o in outcomes) and replicas > start + 1:
                break  # more replicas do not lower TPOT once queueing is gone: the step itself is too slow
            ttft = min(o.worst("ttft_ms", slo.statistic) for o in outcomes)
            if ttft > slo.ttft_ms and last_ttft is not None and ttft > (1 - TTFT_STILL_FALLING) * last_ttft:
                break  # nor TTFT once the queue is gone: what is left is the prompt's prefill and the step
            last_ttft = ttft
    closest = max(tried, key=lambda o: o.headroom(slo))
    return Plan(
        slo,
        None,
        tried,
        infeasible_reason(tried, closest, slo, max_replicas),
        (best_cap, per_replica),
        workload,
        router,
    )


def rerun(
    pool: Any, outcome: Outcome, models: Sequence[StepModel], workload: Workload, seeds: Sequence[int], server: Server
) -> Outcome:
    """The candidate again, with `SETTLE_FACTOR` times the requests per run."""
    longer = replace(workload, num_requests=outcome.requests * SETTLE_FACTOR)
    return next(iter(pool.map(run_candidate, [(outcome.candidate, models, longer, seeds, server)])))


def settled_best(
    outcomes: list[Outcome], tried: list[Outcome], slo: Slo, longer: Callable[[Outcome], Outcome], most_requests: int
) -> Outcome | None:
    """The feasible candidate with the most headroom (then the larger cap), once its runs have settled: a winner
    whose runs simulate said were too short to read (near saturation the load relaxes slowly, and TTFT and TPOT read
    low) runs again with more requests, up to `SETTLE_ROUNDS` times, and is judged on the longer runs (which replace
    it in `tried`). None: nothing feasible."""
    feasible = [o for o in outcomes if o.feasible(slo)]
    while feasible:
        best = max(feasible, key=lambda o: (o.headroom(slo), o.candidate.max_num_seqs))
        if not best.unsteady or best.requests >= most_requests:
            return best
        again = longer(best)
        tried[tried.index(best)] = again
        feasible.remove(best)
        if again.feasible(slo):
            feasible.append(again)
    return None


def infeasible_reason(tried: Sequence[Outcome], closest: Outcome, slo: Slo, max_replicas: int) -> str:
    """Why nothing meets the targets: the step itself too slow at the smallest cap (no replica count helps), or
    the search's replica limit reached; then the closest candidate and what binds it."""
    bound = closest.binding(slo)
    smallest = min(tried, key=lambda o: o.candidate.max_num_seqs)
    floor_ms = smallest.worst("tpot_ms", slo.statistic)
    last = tried[-1].candidate.replicas
    ttft_ms = min(o.worst("ttft_ms", slo.statistic) for o in tried if o.candidate.replicas == last)
    if floor_ms > slo.tpot_ms:
        why = (
            f"even at max_num_seqs {smallest.candidate.max_num_seqs} the {slo.statistic} TPOT is {floor_ms:.3g} ms "
            f"> {slo.tpot_ms:g} ms: the step itself is too slow, and more replicas do not shorten it (searched "
            f"{tried[0].candidate.replicas}–{last})"
        )
    elif last < max_replicas and ttft_ms > slo.ttft_ms:
        bound = f"{slo.label('TTFT')} ({PREFILL_AND_STEP})"
        why = (
            f"the {slo.statistic} TTFT stopped falling with more replicas at {ttft_ms:.3g} ms > {slo.ttft_ms:g} ms "
            f"(searched {tried[0].candidate.replicas}–{last}): with the queue gone what is left is the prompt's "
            "prefill and the step, which more replicas do not shorten"
        )
    else:
        why = f"searched up to {last} replicas (--max-replicas {max_replicas})"
    return (
        f"no configuration meets the SLOs: {why}; closest: {closest.candidate.replicas} × max_num_seqs "
        f"{closest.candidate.max_num_seqs}, bound by {bound}"
    )


# -- disaggregated prefill: the prefill:decode split, as DistServe chooses it ---------------------------------------
BUSY_PREFILL = 0.7  # a prefill pool busier than this is what queues TTFT; below it the decode pool's admission is


@dataclass
class Split:
    """A prefill:decode split's runs (one per seed × model sample) and how busy its prefill pool was."""

    prefill_replicas: int
    decode_replicas: int
    outcome: Outcome
    prefill_busy: list[float] = field(default_factory=list)

    def to_dict(self, slo: Slo) -> dict[str, Any]:
        return {
            **self.outcome.to_dict(slo),
            "prefill_replicas": self.prefill_replicas,
            "decode_replicas": self.decode_replicas,
            "prefill_busy_fraction": _median(self.prefill_busy),
        }


def run_split(
    models: Sequence[StepModel],
    workload: Workload,
    seeds: Sequence[int],
    server: Server,
    disaggregation: Disaggregation,
    cap: int,
) -> Split:
    from tokenroof.serving.simulate import simulate_disaggregated

    split = Split(
        disaggregation.prefill_replicas,
        disaggregation.decode_replicas,
        Outcome(Candidate(disaggregation.replicas, cap), workload.num_requests),
    )
    for model in models:
        for seed in seeds:
            s = simulate_disaggregated(
                model,
                workload,
                disaggregation,
                cap,
                seed,
                server.kv_capacity_tokens,
                prefix_caching=server.prefix_caching,
                speculation=server.speculation,
                reserve_output=server.reserve_output,
            ).summary()
            split.outcome.add(s)
            split.prefill_busy.append(s["disaggregation"]["prefill_busy_fraction"] or 0.0)
    return split


def plan_disaggregated(
    models: Sequence[StepModel],
    workload: Workload,
    slo: Slo,
    seeds: Sequence[int],
    server: Server,
    disaggregation: Disaggregation,
    max_replicas: int = 64,
    cap: int = 256,
) -> dict[str, Any]:
    """The fewest replicas, split into a prefill and a decode pool, meeting both SLOs in every run (DistServe's
    question). From each pool's lower bound (the prompt tokens a second the prefill pool must compute; the output
    tokens a second the decode pool must emit at its cap), one replica is added at a time: to the decode pool while
    TPOT alone misses (only its batch sets TPOT), else to whichever pool's extra replica gives the more headroom
    (TTFT queues at either: for a prefill replica, or for room in a decode replica's batch). The first split meeting
    both wins; the search gives up when eight additions in a row bring no more headroom."""
    sm = models[0]
    i, o = float(workload.input_len.mean), float(workload.output_len.mean)
    prefill_sm = disaggregation.prefill_model or sm  # a prefill pool of its own TP has its own step model
    per_prompt_s = prefill_sm.step_s(0.0, 0.0, 8 * i, 8 * i * i) / 8  # a prompt's share of a step prefilling eight
    prefill = max(1, math.ceil(workload.rate_req_s * per_prompt_s))
    spec = server.speculation
    if spec is None:
        decode_tok_s = cap / sm.step_s(cap, cap * (i + o / 2))
    else:  # a verify step of the whole cap, E tokens a sequence
        decode_tok_s = cap * spec.tokens_per_step / spec.step_s(sm, cap, cap * (i + o / 2), 0.0, 0.0, cap)
    decode = max(1, math.ceil(workload.rate_req_s * o / decode_tok_s))
    runs: dict[tuple[int, int], Split] = {}

    def run(p: int, d: int) -> Split:
        if (p, d) not in runs:
            layout = replace(disaggregation, prefill_replicas=p, decode_replicas=d)
            runs[(p, d)] = run_split(models, workload, seeds, server, layout, cap)
        return runs[(p, d)]

    best, stale = -math.inf, 0
    while prefill + decode <= max_replicas and stale < 8:
        split = run(prefill, decode)
        outcome = split.outcome
        if outcome.feasible(slo):
            return {
                "feasible": True,
                **split.to_dict(slo),
                "gpus_replicas": prefill + decode,
                "splits": [[p, d, r.outcome.feasible(slo)] for (p, d), r in runs.items()],
                "reason": f"{prefill} prefill + {decode} decode replicas meet both SLOs: the first split found adding "
                "one replica at a time where the runs gained most",
            }
        headroom = outcome.headroom(slo)
        best, stale = (headroom, 0) if headroom > best * 1.001 else (best, stale + 1)
        if prefill + decode == max_replicas:
            break
        ttft_over = outcome.worst("ttft_ms", slo.statistic) > slo.ttft_ms
        if not ttft_over:  # TPOT alone misses: only the decode pool's batch sets it
            decode += 1
        elif run(prefill + 1, decode).outcome.headroom(slo) >= run(prefill, decode + 1).outcome.headroom(slo):
            prefill += 1
        else:
            decode += 1
    closest = max(runs.values(), key=lambda t: t.outcome.headroom(slo)) if runs else None
    return {
        "feasible": False,
        **({} if closest is None else closest.to_dict(slo)),
        "gpus_replicas": None,
        "splits": [[p, d, r.outcome.feasible(slo)] for (p, d), r in runs.items()],
        "reason": f"no prefill:decode split up to {max_replicas} replicas meets both SLOs"
        + ("" if closest is None else f" (closest: {closest.prefill_replicas}P + {closest.decode_replicas}D)"),
    }
