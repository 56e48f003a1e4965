"""Validation protocol of DESIGN.md over every curve in ../shared/data/curves (or the folders given).

For each curve: sort by batch, fit on the first max(3, n // 2) points, predict the
rest, and report absolute % error of TPOT and throughput: per curve, and median and
90th percentile over all held-out points, for the linear baseline (TPOT = a + c·b,
weighted by 1/TPOT), tokenroof data-only, and tokenroof with model/hardware priors
where the curve's header names them (data-only otherwise).

    python benchmarks/accuracy.py [CURVE_DIR ...] [--verbose]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from curve_headers import read_setup
from tokenroof.errors import TokenroofError
from tokenroof.measurements import MeasurementTable, read_table
from tokenroof.predict import predict_table, prior_from_specs
from tokenroof.specs import Precision, load_hardware, load_model

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "curves"
SAMPLES = int(__import__("os").environ.get("ACC_SAMPLES", "40"))  # interval samples per fit (not scored here)


def linear_baseline(train: MeasurementTable, batches: np.ndarray) -> np.ndarray:
    w = 1 / train.tpot_ms
    design = np.column_stack([np.ones_like(train.batch), train.batch]) * w[:, None]
    coef, *_ = np.linalg.lstsq(design, train.tpot_ms * w, rcond=None)
    return coef[0] + coef[1] * batches


def tokenroof_prediction(train: MeasurementTable, batches: np.ndarray, use_prior: bool) -> tuple[np.ndarray, str]:
    prior, label = None, "data-only"
    if use_prior:
        setup = read_setup(train.provenance)
        if setup.model and setup.hardware:
            prior = prior_from_specs(
                load_model(setup.model),
                load_hardware(setup.hardware),
                Precision.create(setup.dtype),
                setup.workload,
                setup.tp,
            )
            label = f"{setup.model}/{setup.hardware}x{setup.tp}"
    result = predict_table(train, batches, prior, n_samples=SAMPLES)
    rows = result.predictions()
    return np.array([r["tpot_ms"] for r in rows]), f"{label} [{result.fit.method}]"


def errors(pred_tpot: np.ndarray, test: MeasurementTable) -> tuple[np.ndarray, np.ndarray]:
    pred_thr = test.batch * 1000 / pred_tpot
    return np.abs(pred_tpot / test.tpot_ms - 1) * 100, np.abs(pred_thr / test.throughput_tok_s - 1) * 100


def split(table: MeasurementTable) -> tuple[MeasurementTable, MeasurementTable]:
    n = len(table)
    k = max(3, n // 2)
    test = MeasurementTable(table.batch[k:], table.tpot_ms[k:], table.throughput_tok_s[k:])
    return table.head(k), test


def summary(name: str, tpot: list[float], thr: list[float]) -> str:
    return (
        f"{name:34s} TPOT median {np.median(tpot):5.1f}%  p90 {np.percentile(tpot, 90):6.1f}%   "
        f"throughput median {np.median(thr):5.1f}%  p90 {np.percentile(thr, 90):6.1f}%"
    )


def main(argv: list[str]) -> None:
    verbose = "--verbose" in argv
    dirs = [Path(a) for a in argv if not a.startswith("--")] or [DEFAULT_DIR]
    files = sorted(f for d in dirs for f in d.glob("*.csv"))
    totals: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in ("linear", "data-only", "prior")}
    print(f"{'curve':58s} {'n':>3s} {'held':>4s}  {'linear':>7s} {'data':>7s} {'prior':>7s}  (mean |TPOT err| %)")
    for path in files:
        try:
            table = read_table([path])
        except TokenroofError as exc:
            print(f"{path.name}: skipped ({exc})")
            continue
        train, test = split(table)
        if len(test) == 0:
            continue
        preds = {"linear": (linear_baseline(train, test.batch), "")}
        preds["data-only"] = tokenroof_prediction(train, test.batch, use_prior=False)
        preds["prior"] = tokenroof_prediction(train, test.batch, use_prior=True)
        means = []
        for key, (pred, _) in preds.items():
            e_tpot, e_thr = errors(pred, test)
            totals[key][0].extend(e_tpot)
            totals[key][1].extend(e_thr)
            means.append(float(np.mean(e_tpot)))
        print(
            f"{path.name[:58]:58s} {len(table):3d} {len(test):4d}  {means[0]:6.1f}% {means[1]:6.1f}% "
            f"{means[2]:6.1f}%  {preds['prior'][1]}"
        )
        if verbose:
            for key, (pred, _) in preds.items():
                print(
                    f"    {key:10s} "
                    + " ".join(f"{b:g}:{p:.3g}/{t:.3g}" for b, p, t in zip(test.batch, pred, test.tpot_ms, strict=True))
                )
    count = len(totals["linear"][0])
    print(f"\nover all {count} held-out points:")
    print(summary("linear baseline (a + c·b)", *totals["linear"]))
    print(summary("tokenroof data-only", *totals["data-only"]))
    print(summary("tokenroof with priors", *totals["prior"]))


if __name__ == "__main__":
    main(sys.argv[1:])
