"""This machine's roof: `calibrate`, then `bench-local`, against first principles and against `predict`.

For each config (dtype × context) on a 123M-parameter Llama-architecture config
(examples/llama-123m.json, random weights), over batch 1, 2, 4, …, 256:

1. first principles: the step model built from the model and the calibrated
   hardware TOML (its measured efficiencies, nothing tuned here) against the
   measured TPOT, per point;
2. `predict`, fitted on the first half of the measured curve (DESIGN.md's
   protocol: sorted by batch, the first max(3, n // 2) points), against the rest:
   data only, with the calibrated prior, and the linear baseline;
3. batch-1 TPOT against the weight bytes ÷ calibrated bandwidth bound.

Before each config the machine is calibrated twice, for that dtype: at the
model's own layer shapes (what `calibrate --model` does; the predictions use it)
and at square matrices (plain `calibrate`), to show how much kernel efficiency
depends on shape. Drift in this shared machine's speed is kept out of the
errors as far as it can be: every figure comes from its quietest pass (PASSES
calibration passes, PASSES round-robin bench-local passes), and the model-shape
calibration is repeated after the measurement and merged with the one before
(`quietest`), since a slow stretch can outlast one calibration (about 11 minutes
in all).

    python benchmarks/local_roofline.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import protocol_k, split
from tokenroof.fit.predict import MeasuredWorkload, predict_table, prior_from_specs
from tokenroof.io.measurements import read_table
from tokenroof.measure.local.calibrate import Calibration, calibrate, quietest
from tokenroof.measure.local.local import LocalConfig, run_bench_local
from tokenroof.model import roofline as rl
from tokenroof.specs import Precision, load_model
from tokenroof.specs.hardware import read_hardware_toml

ROOT = Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "examples" / "llama-123m.json")  # the 123M-parameter Llama (GPT-2-small sized)
CONFIGS = (("fp32", 128), ("bf16", 128), ("fp32", 512), ("bf16", 512))
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
PASSES = 5  # calibration passes and bench-local rounds: each figure from the quietest (see measure/local/local.py)


def first_principles(result, hw) -> tuple[np.ndarray, np.ndarray]:
    """Measured TPOT and the step model's on `hw`, per point (ms)."""
    sm = rl.step_model_from_specs(result.model, hw, result.precision)
    measured = np.array([p.tpot_ms for p in result.points])
    predicted = np.array([float(sm.step_time_s(p.batch, p.context_tokens)) * 1e3 for p in result.points])
    return measured, predicted


def tpot_errors(predicted_ms: np.ndarray, test: Any) -> np.ndarray:
    """|predicted / measured − 1| in %, per held-out point."""
    return np.abs(predicted_ms / test.tpot_ms - 1) * 100


def linear_baseline(train: Any, batches: np.ndarray) -> np.ndarray:
    """TPOT = a + c·b through the first points (relative least squares): the naive extrapolation."""
    w = 1 / train.tpot_ms
    design = np.column_stack([np.ones_like(train.batch), train.batch]) * w[:, None]
    coef, *_ = np.linalg.lstsq(design, train.tpot_ms * w, rcond=None)
    return coef[0] + coef[1] * batches


def extrapolation(csv: Path, hw, dtype: str, context: float) -> dict[str, np.ndarray]:
    table = read_table([csv])
    train, test = split(table, protocol_k(len(table)))
    prior = prior_from_specs(
        load_model(MODEL), hw, Precision.create(dtype), MeasuredWorkload(context, decode_only=True)
    )
    out = {"linear": tpot_errors(linear_baseline(train, test.batch), test)}
    for label, p in (("data-only", None), ("calibrated prior", prior)):
        rows = predict_table(train, test.batch, p, n_samples=40).predictions()
        out[label] = tpot_errors(np.array([r["tpot_ms"] for r in rows]), test)
    return out


def calibrated(dtype: str, model, path: Path, before: Calibration | None = None) -> tuple[Calibration, Any]:
    """Calibrate for one dtype (at the model's shapes, or square ones), write the TOML and load it; given an
    earlier calibration (`before` the measurement), the quietest of the two."""
    cal = calibrate("cpu", (dtype,), model=model, passes=PASSES)
    label = "calibrate"
    if before is not None:
        cal, label = quietest([before, cal]), "calibrate again, quietest of both"
    path.write_text(cal.to_toml())
    eff = cal.efficiencies()[dtype]
    print(
        f"{label} {dtype} ({cal.shapes}): copy {cal.copy_bandwidth_bytes_per_s / 1e9:.1f} GB/s, "
        f"read {cal.read_bandwidth_bytes_per_s / 1e9:.1f} GB/s, "
        f"matvec {cal.gemv_bandwidth_bytes_per_s[dtype] / 1e9:.1f} GB/s, "
        f"attention {cal.attention_bandwidth_bytes_per_s[dtype] / 1e9:.1f} GB/s, "
        f"GEMM {cal.gemm_flops_per_s[dtype] / 1e9:.0f} GFLOP/s, "
        f"decode GEMM {cal.decode_gemm_flops_per_s[dtype] / 1e9:.0f} GFLOP/s, "
        f"overhead {eff['overhead_s_per_layer'] * 1e3:.2f} ms/layer; {cal.threads} threads"
    )
    return cal, read_hardware_toml(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer batches and steps, two configs (a smoke run)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out-local")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    steps, rounds, configs, batches = (4, 1, CONFIGS[:2], BATCHES[::2]) if args.quick else (8, PASSES, CONFIGS, BATCHES)
    spec = load_model(MODEL)
    started = time.perf_counter()
    summary = []
    for dtype, context in configs:
        print(f"\n== {spec.name} {dtype}, context {context}: calibrate, then bench-local ({rounds} round-robin passes)")
        toml = args.out / f"calibrated-{dtype}.toml"
        before, _ = calibrated(dtype, spec, toml)
        _, square = calibrated(dtype, None, args.out / f"calibrated-square-{dtype}.toml")
        csv = args.out / f"{spec.name}-{dtype}-c{context}.csv"
        config = LocalConfig(MODEL, batches, context, dtype, "cpu", warmup=3, steps=steps, rounds=rounds, out=csv)
        result = run_bench_local(config, spec)
        _, hw = calibrated(dtype, spec, toml, before)
        measured, predicted = first_principles(result, hw)
        _, predicted_square = first_principles(result, square)
        err = (predicted / measured - 1) * 100
        err_sq = (predicted_square / measured - 1) * 100
        heads = ("TPOT ms", "p10-p90", "tok/s", "first-pr.", "error", "square")
        print(f"{'batch':>6s} " + " ".join(f"{h:>9s}" for h in heads))
        for p, pr, e, es in zip(result.points, predicted, err, err_sq, strict=True):
            spread = f"{p.tpot_ms_p10:.0f}-{p.tpot_ms_p90:.0f}"
            cells = (f"{p.tpot_ms:.1f}", spread, f"{p.throughput_tok_s:.0f}", f"{pr:.1f}", f"{e:+.0f}%", f"{es:+.0f}%")
            print(f"{p.batch:6d} " + " ".join(f"{c:>9s}" for c in cells))
        weights = rl.dense_weight_bytes(spec, result.precision)
        streaming = hw.memory_bandwidth_bytes_per_s * hw.efficiencies[dtype]["bandwidth"]
        ratios = (
            measured[0] / (weights / streaming * 1e3),
            measured[0] / (weights / hw.memory_bandwidth_bytes_per_s * 1e3),
        )
        print(
            f"batch-1 TPOT {measured[0]:.1f} ms = {ratios[0]:.2f}x weight bytes / calibrated {dtype} matvec bandwidth, "
            f"{ratios[1]:.2f}x weight bytes / best streaming bandwidth"
        )
        extra = extrapolation(csv, hw, dtype, result.points[0].context_tokens)
        for label, e in extra.items():
            print(
                f"predict from the first half, {label:16s}: "
                f"held-out TPOT error median {np.median(e):5.1f}%, max {e.max():5.1f}%"
            )
        summary.append((dtype, context, np.abs(err), np.abs(err_sq), ratios, extra))

    half = f"the first {len(batches) // 2} of {len(batches)} points"
    print(f"\n== summary (absolute % TPOT error; predict fitted on {half})")
    for dtype, context, e, es, ratios, extra in summary:
        print(
            f"{dtype} c{context:<5d} first principles median {np.median(e):3.0f}% max {e.max():3.0f}% "
            f"(square-shape calibration: {np.median(es):3.0f}% / {es.max():3.0f}%)  "
            f"predict data-only {np.median(extra['data-only']):4.1f}%, "
            f"prior {np.median(extra['calibrated prior']):4.1f}%, linear {np.median(extra['linear']):4.1f}%  "
            f"batch-1 {ratios[0]:.2f}x matvec bound, {ratios[1]:.2f}x peak"
        )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
