"""Prediction intervals that hold: the samples' spread and the fit's noise, widened with distance past the data.

A fitted curve is most uncertain where nothing was measured, and mostly in one direction:
past the largest measured batch the slope of real servers tends to grow (framework
work per sequence, prefill interference, a knee), which no parameter spread inside
one structure shows. So each prediction's log-scale spread is

    scale(b) = sqrt(sd_samples(b)² + σ² + (κ · d(b))²)

with σ the fit's relative noise and d(b) the distance past the measured range in
doublings of batch (0 inside it), and the interval is

    [T̂ · exp(q_low · scale), T̂ · exp(q_high · scale)]

— normalised split-conformal prediction (Lei et al. 2018, "Distribution-free
predictive inference for regression"). κ and the quantiles q_low, q_high of
log(measured / predicted) / scale are learned from published curves (every prefix of
at least three points fitted, the rest predicted), κ as the value that gives the
narrowest intervals at the stated coverage. `benchmarks/accuracy.py` re-learns them
leaving out each curve in turn and reports the coverage on the left-out curve;
`benchmarks/accuracy.py --write` stores the constants learned on all curves in
`data/intervals.json`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib.resources import files

import numpy as np

LEVEL = 0.90
KAPPA_GRID = np.linspace(0.0, 0.4, 41)
FALLBACK_QUANTILE = 1.645  # a normal 90% band when no calibration is stored


@dataclass(frozen=True)
class Calibration:
    kappa_per_doubling: float
    q_low: float
    q_high: float
    points: int = 0
    curves: int = 0

    def bounds(self, tpot: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The interval around `tpot` at log-scale `scale` (see the module docstring)."""
        return tpot * np.exp(self.q_low * scale), tpot * np.exp(self.q_high * scale)

    def scale(self, sample_log_sd: np.ndarray, sigma: float, distance: np.ndarray) -> np.ndarray:
        return np.sqrt(sample_log_sd**2 + sigma**2 + (self.kappa_per_doubling * distance) ** 2)


FALLBACK = Calibration(0.1, -FALLBACK_QUANTILE, FALLBACK_QUANTILE)


def distance_doublings(batch: np.ndarray, low: float, high: float) -> np.ndarray:
    """How far each batch lies outside [low, high], in doublings (0 inside)."""
    b = np.asarray(batch, dtype=float)
    return np.maximum(np.log2(b / high), 0.0) + np.maximum(np.log2(low / b), 0.0)


def learn(log_error: np.ndarray, sample_log_sd: np.ndarray, sigma: np.ndarray, distance: np.ndarray) -> Calibration:
    """κ and the conformal quantiles from held-out errors log(measured / predicted): the narrowest mean interval."""
    alpha = (1 - LEVEL) / 2
    best: tuple[float, Calibration] | None = None
    for kappa in KAPPA_GRID:
        scale = np.sqrt(sample_log_sd**2 + sigma**2 + (kappa * distance) ** 2)
        z = log_error / scale
        lo, hi = (float(q) for q in np.quantile(z, [alpha, 1 - alpha]))
        width = float(np.mean((hi - lo) * scale))
        if best is None or width < best[0]:
            best = (width, Calibration(float(kappa), float(lo), float(hi), int(log_error.size)))
    assert best is not None
    return best[1]


@cache
def stored(kind: str) -> Calibration:
    """The calibration learned on the published curves for `kind` ("data" or "prior"); a wide normal band if none."""
    path = files("tokenroof.fit") / "data" / "intervals.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return FALLBACK
    entry = data.get(kind)
    return Calibration(**entry) if isinstance(entry, dict) else FALLBACK


def to_json(calibrations: dict[str, Calibration], note: str) -> str:
    return json.dumps({"_note": note, **{k: asdict(v) for k, v in calibrations.items()}}, indent=2) + "\n"
