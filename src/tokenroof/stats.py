"""The two statistics that the simulator and the load client must compute alike: arrival times of a gamma process,
and the mean/p50/p90/p99 summary of latencies (simulate's figures are compared with bench's)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

STATISTICS = ("mean", "p50", "p90", "p99")


def arrival_times(rate: float, burstiness: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """n arrival times (s, the first at 0) with gamma inter-arrival gaps of mean 1/rate: burstiness 1 is Poisson,
    < 1 burstier, > 1 smoother, inf a constant rate (no draws)."""
    if math.isinf(burstiness):
        return np.arange(n) / rate
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    return np.cumsum(gaps) - gaps[0]


def percentiles(values: Sequence[float] | np.ndarray, scale: float = 1e3) -> dict[str, float | None]:
    """Mean and p50/p90/p99 of `values` × `scale` (seconds → ms by default), NaNs left out; None where none remain
    (the TPOT of one-token outputs)."""
    arr = np.asarray(values, dtype=float) * scale
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return dict.fromkeys(STATISTICS)
    return {
        "mean": float(arr.mean()),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
    }
