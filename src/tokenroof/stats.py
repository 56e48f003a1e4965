"""What the simulator and the load client must compute alike (simulate's figures are compared with bench's): arrival
times of a gamma process, an open loop's steady-state window, and the mean/p50/p90/p99 summary of latencies."""

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


def typical_lifetime_s(arrivals_s: Sequence[float] | np.ndarray, ends_s: Sequence[float] | np.ndarray) -> float:
    """The median send-to-end time of the requests sent in the run's second half (once the batch has grown: the
    early ones run faster); `ends_s` NaN where a request did not end (0 when none did)."""
    arrivals, ends = np.asarray(arrivals_s, dtype=float), np.asarray(ends_s, dtype=float)
    if arrivals.size == 0:
        return 0.0
    lives = (ends - arrivals)[arrivals >= np.median(arrivals)]
    lives = lives[~np.isnan(lives)]
    return float(np.median(lives)) if lives.size else 0.0


def open_loop_window(
    arrivals_s: Sequence[float] | np.ndarray, lifetime_s: float, last_end_s: float
) -> tuple[float, float]:
    """An open loop's steady-state window, as bench measures it and simulate reports it: from the arrival 10% into
    the run to the last arrival (ramp-up and drain left out), and never before one typical request's lifetime
    (`typical_lifetime_s`) has passed since the first arrival: until then the running batch is still filling, and
    a short run reads low throughput (60 requests at 90% of a 16-slot llama-server's capacity: 90 tok/s from the
    arrival 10% in, 100 a lifetime in, what it carried once full). Arrivals spread over less than a lifetime have no
    steady state: the window is then the whole run, the first arrival to the last end (`last_end_s`)."""
    ordered = np.sort(np.asarray(arrivals_s, dtype=float))
    w0 = max(float(ordered[int(0.1 * ordered.size)]), float(ordered[0]) + lifetime_s)
    w1 = float(ordered[-1])
    if w1 - w0 < lifetime_s:
        return float(ordered[0]), max(last_end_s, float(ordered[0]) + 1e-9)
    return w0, w1


def trend(means: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """The slope of a straight line through equally spaced block means (a block apart) and its standard error: the
    residuals' variance over n − 2, widened by (1 + r)/(1 − r) for their lag-one correlation r (held in [0, 0.9]),
    as the batch-means method of simulation output analysis widens for blocks shorter than the series remembers.
    An error of 0: the means lie on the line."""
    y = np.asarray(means, dtype=float)
    if y.size < 3:
        raise ValueError(f"a trend needs at least 3 block means, got {y.size}")
    x = np.arange(y.size) - (y.size - 1) / 2
    slope = float((x * y).sum() / (x * x).sum())
    residuals = y - y.mean() - slope * x
    squares = float((residuals**2).sum())
    if squares <= 0:
        return slope, 0.0
    lag_one = float(np.clip((residuals[1:] * residuals[:-1]).sum() / squares, 0.0, 0.9))
    return slope, math.sqrt(squares / (y.size - 2) / float((x * x).sum()) * (1 + lag_one) / (1 - lag_one))
