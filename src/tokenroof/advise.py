"""`advise`: the batch cap (max_num_seqs) that meets a TPOT target, and what it costs in throughput."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tokenroof.errors import TokenroofError
from tokenroof.units import MS_PER_S

SEARCH_LIMIT = 1_000_000


class StepTime(Protocol):
    """What advise needs of a model: a StepModel, or a fitted curve (fit.FittedCurve)."""

    def step_time_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> NDArray[np.float64]: ...

    def throughput_tok_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> NDArray[np.float64]: ...


def engine_flags(cap: int) -> dict[str, str]:
    """The same cap in each engine's own words."""
    return {
        "vllm": f"--max-num-seqs {cap}",
        "sglang": f"--max-running-requests {cap}",
        "tgi": f"--max-batch-size {cap}",
        "tensorrt-llm": f"--max_batch_size {cap}",
    }


def largest_batch_within(sm: StepTime, tpot_slo_s: float, context: float = 0.0, limit: int | None = None) -> int:
    """Largest integer batch whose step time is ≤ the target (0 if batch 1 already misses it)."""
    if float(sm.step_time_s(1.0, context)) > tpot_slo_s * (1 + 1e-9):
        return 0
    hi = float(limit or SEARCH_LIMIT)
    if float(sm.step_time_s(hi, context)) <= tpot_slo_s:
        return int(hi)
    lo = 1.0
    while hi - lo > 0.5:  # T is increasing in b: bisection
        mid = (lo + hi) / 2
        if float(sm.step_time_s(mid, context)) <= tpot_slo_s:
            lo = mid
        else:
            hi = mid
    cap = int(np.floor(lo))
    if float(sm.step_time_s(cap + 1.0, context)) <= tpot_slo_s * (1 + 1e-9):  # exact hits at a boundary
        cap += 1
    return cap


def throughput_latency_knee(sm: StepTime, context: float, upper: float) -> float:
    """Kneedle (Satopää et al. 2011) on throughput against TPOT over batch 1…upper: the point of the curve
    farthest above the chord, where each extra ms of TPOT starts buying little throughput."""
    b = np.geomspace(1.0, max(upper, 2.0), 400)
    tpot = sm.step_time_s(b, context)
    thr = b / tpot
    x = (tpot - tpot[0]) / max(tpot[-1] - tpot[0], 1e-12)
    y = (thr - thr[0]) / max(thr[-1] - thr[0], 1e-12)
    return float(b[int(np.argmax(y - x))])


@dataclass
class Advice:
    tpot_slo_ms: float
    cap: int
    cap_interval: list[int | None]
    binding: str
    tpot_ms_at_cap: float
    throughput_tok_s_at_cap: float
    knee_batch: float
    reference_batch: float
    reference_throughput_tok_s: float
    source: str
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        given_up = 1 - self.throughput_tok_s_at_cap / self.reference_throughput_tok_s
        return {
            "tpot_slo_ms": self.tpot_slo_ms,
            "max_num_seqs": self.cap,
            "max_num_seqs_interval": self.cap_interval,
            "binding": self.binding,
            "tpot_ms_at_cap": self.tpot_ms_at_cap,
            "throughput_tok_s_at_cap": self.throughput_tok_s_at_cap,
            "knee_batch": self.knee_batch,
            "reference_batch": self.reference_batch,
            "reference_throughput_tok_s": self.reference_throughput_tok_s,
            "throughput_given_up_fraction": max(given_up, 0.0),
            "engine_flags": engine_flags(self.cap),
            "source": self.source,
            "warnings": list(self.warnings),
        }


def advise(
    sm: StepTime,
    tpot_slo_ms: float,
    context: float = 0.0,
    memory_limit: int | None = None,
    samples: Sequence[StepTime] = (),
    source: str = "",
) -> Advice:
    """Largest cap meeting the TPOT target (bounded by memory), its interval over `samples`, the knee."""
    if not 0 < tpot_slo_ms < float("inf"):
        raise TokenroofError(f"--tpot-slo-ms must be a positive finite number, got {tpot_slo_ms:g}")
    slo_s = tpot_slo_ms / MS_PER_S
    by_slo = largest_batch_within(sm, slo_s, context)
    if by_slo == 0:
        raise TokenroofError(
            f"no batch cap meets TPOT ≤ {tpot_slo_ms:g} ms: batch 1 already takes "
            f"{float(sm.step_time_s(1.0, context)) * MS_PER_S:.3g} ms per token"
        )
    cap, binding = by_slo, "tpot"
    warnings = []
    if memory_limit is not None and memory_limit < by_slo:
        cap, binding = memory_limit, "memory"
        warnings.append(
            f"the TPOT target allows batch {by_slo}, but the running batch cannot exceed {memory_limit} (memory, "
            "or a server cap the measurements show): that binds (a larger cap only queues or preempts)"
        )
    if memory_limit == 0:
        raise TokenroofError("the weights alone do not fit in memory: no batch cap can run")
    interval: list[int | None] = [None, None]
    if samples:
        caps = np.array([largest_batch_within(m, slo_s, context, memory_limit) for m in samples])
        interval = [int(np.percentile(caps, 5)), int(np.percentile(caps, 95))]
    reference = float(memory_limit) if memory_limit else float(max(4 * cap, 512))
    knee = throughput_latency_knee(sm, context, reference)
    if cap >= SEARCH_LIMIT:
        warnings.append(
            "the TPOT target is met at every batch tried: the cap is set by memory or admission, not by latency"
        )
    return Advice(
        tpot_slo_ms=tpot_slo_ms,
        cap=cap,
        cap_interval=interval,
        binding=binding,
        tpot_ms_at_cap=float(sm.step_time_s(cap, context)) * MS_PER_S,
        throughput_tok_s_at_cap=float(sm.throughput_tok_s(cap, context)),
        knee_batch=knee,
        reference_batch=reference,
        reference_throughput_tok_s=float(sm.throughput_tok_s(reference, context)),
        source=source,
        warnings=warnings,
    )
