"""`simulate`: the emulator's scheduler on a virtual clock (discrete events), for workloads too big to run.

The same `BatchScheduler` that times `emulate`'s steps on the wall clock is driven
here by jumping from step end to step end (and across idle gaps to the next
arrival), so simulated and emulated runs of a workload agree by construction.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from tokenroof.engine.core import BatchScheduler, Sequence
from tokenroof.errors import TokenroofError
from tokenroof.stepmodel import StepModel

DISTRIBUTIONS = ("fixed", "uniform", "lognormal")


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

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            values = np.full(n, float(self.mean))
        elif self.kind == "uniform":
            values = rng.uniform(self.mean * (1 - self.spread), self.mean * (1 + self.spread), n)
        else:
            mu = math.log(self.mean) - self.spread**2 / 2
            values = rng.lognormal(mu, self.spread, n)
        return np.maximum(np.rint(values), 1).astype(int)


@dataclass(frozen=True)
class Workload:
    rate_req_s: float
    input_len: Lengths
    output_len: Lengths
    num_requests: int = 1000
    burstiness: float = 1.0  # gamma shape of inter-arrival times; inf = a constant rate

    def arrivals(self, rng: np.random.Generator) -> list[Sequence]:
        if not self.rate_req_s > 0 or not self.burstiness > 0 or self.num_requests < 1:
            raise TokenroofError("the request rate and burstiness must be positive and num_requests ≥ 1")
        n = self.num_requests
        if math.isinf(self.burstiness):
            gaps = np.full(n, 1.0 / self.rate_req_s)
        else:
            gaps = rng.gamma(self.burstiness, 1.0 / (self.rate_req_s * self.burstiness), n)
        times = np.cumsum(gaps) - gaps[0]
        prompts, outputs = self.input_len.sample(rng, n), self.output_len.sample(rng, n)
        return [
            Sequence(str(i), int(p), int(o), float(t))
            for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))
        ]


@dataclass
class SimResult:
    sequences: list[Sequence]
    step_starts_s: np.ndarray
    step_durations_s: np.ndarray
    step_batches: np.ndarray
    step_kv_tokens: np.ndarray
    kv_capacity_tokens: int | None = None
    preemptions: int = 0

    def summary(self, ttft_slo_ms: float | None = None, tpot_slo_ms: float | None = None) -> dict[str, Any]:
        seqs = self.sequences
        arrival = np.array([s.arrival_s for s in seqs])
        first = np.array([s.first_token_s for s in seqs], dtype=float)
        finished = np.array([s.finished_s for s in seqs], dtype=float)
        admitted = np.array([s.admitted_s for s in seqs], dtype=float)
        out = np.array([s.max_tokens for s in seqs])
        ttft = first - arrival
        tpot = np.where(out > 1, (finished - first) / np.maximum(out - 1, 1), np.nan)
        span = float(finished.max() - arrival.min())
        busy = float(self.step_durations_s.sum())
        good = np.ones(len(seqs), dtype=bool)
        if ttft_slo_ms is not None:
            good &= ttft * 1e3 <= ttft_slo_ms
        if tpot_slo_ms is not None:
            good &= ~(tpot * 1e3 > tpot_slo_ms)

        def pct(values: np.ndarray) -> dict[str, float]:
            values = values[~np.isnan(values)] * 1e3
            return {
                "mean": float(values.mean()),
                "p50": float(np.percentile(values, 50)),
                "p90": float(np.percentile(values, 90)),
                "p99": float(np.percentile(values, 99)),
            }

        return {
            "requests": len(seqs),
            "simulated_s": span,
            "ttft_ms": pct(ttft),
            "tpot_ms": pct(tpot),
            "e2e_ms": pct(finished - arrival),
            "queue_wait_ms": pct(admitted - arrival),
            "itl_ms": pct(self.step_durations_s),
            "throughput_tok_s": float(out.sum() / span),
            "request_throughput_req_s": len(seqs) / span,
            "goodput_req_s": float(good.sum() / span),
            "mean_running_batch": float((self.step_batches * self.step_durations_s).sum() / busy) if busy else 0.0,
            "steps": int(self.step_batches.size),
            "preemptions": self.preemptions,
            "kv_cache_tokens": self.kv_capacity_tokens,
            "kv_use_mean_fraction": None
            if not self.kv_capacity_tokens
            else float((self.step_kv_tokens * self.step_durations_s).sum() / busy / self.kv_capacity_tokens),
        }


def simulate(
    model: StepModel,
    workload: Workload,
    max_num_seqs: int = 256,
    seed: int = 0,
    kv_capacity_tokens: int | None = None,
    block_size: int = 16,
) -> SimResult:
    """Run the workload through the continuous-batching scheduler on a virtual clock."""
    rng = np.random.default_rng(seed)
    pending = deque(workload.arrivals(rng))
    done: list[Sequence] = []
    scheduler = BatchScheduler(model, max_num_seqs, kv_capacity_tokens, block_size)
    starts: list[float] = []
    durations: list[float] = []
    batches: list[int] = []
    kv: list[float] = []
    now = 0.0
    while pending or not scheduler.idle:
        while pending and pending[0].arrival_s <= now:
            scheduler.submit(pending.popleft())
        plan = scheduler.plan_step(now)
        if plan is None:
            now = pending[0].arrival_s
            continue
        starts.append(plan.start_s)
        durations.append(plan.duration_s)
        batches.append(plan.batch)
        kv.append(plan.kv_tokens)
        done.extend(scheduler.complete_step(plan))
        now = plan.end_s
    done.sort(key=lambda s: int(s.request_id))
    return SimResult(
        done,
        np.array(starts),
        np.array(durations),
        np.array(batches),
        np.array(kv),
        kv_capacity_tokens,
        scheduler.preemptions,
    )
