"""This machine's roof: `calibrate`, then `bench-local`, against first principles and against `predict`.

For each config (dtype × context) on SmolLM2-135M (a real Llama-family config,
random weights), over batch 1…256:

1. first principles: the step model built from the model and the calibrated
   hardware TOML (its measured efficiencies, nothing tuned here) against the
   measured TPOT, per point;
2. `predict`, fitted on the first half of the measured curve (DESIGN.md's
   protocol: sorted by batch, the first max(3, n // 2) points), against the rest:
   data only, with the calibrated prior, and the linear baseline;
3. batch-1 TPOT against the weight bytes ÷ calibrated bandwidth bound.

The calibration is run twice: at the model's own layer shapes (what `calibrate
--model` does) and at square matrices (plain `calibrate`), to show how much
kernel efficiency depends on shape on this machine.

    python benchmarks/local_roofline.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import errors, linear_baseline, split
from tokenroof import roofline as rl
from tokenroof.bench.calibrate import calibrate
from tokenroof.bench.local import LocalConfig, run_bench_local
from tokenroof.measurements import read_table
from tokenroof.predict import Workload, predict_table, prior_from_specs
from tokenroof.specs import Precision, load_model
from tokenroof.specs.hardware import read_hardware_toml

MODEL = "smollm2-135m"
CONFIGS = (("fp32", 128), ("bf16", 128), ("fp32", 1024), ("bf16", 1024))
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def first_principles(result, hw) -> tuple[np.ndarray, np.ndarray]:
    measured = np.array([p.tpot_ms for p in result.points])
    predicted = np.array(
        [
            float(rl.step_model_from_specs(result.model, hw, result.precision).step_time_s(p.batch, p.context_tokens))
            * 1e3
            for p in result.points
        ]
    )
    return measured, predicted


def extrapolation(csv: Path, hw, dtype: str, context: float) -> dict[str, np.ndarray]:
    table = read_table([csv])
    train, test = split(table)
    prior = prior_from_specs(load_model(MODEL), hw, Precision.create(dtype), Workload(context, decode_only=True))
    out = {"linear": errors(linear_baseline(train, test.batch), test)[0]}
    for label, p in (("data-only", None), ("calibrated prior", prior)):
        rows = predict_table(train, test.batch, p, n_samples=40).predictions()
        out[label] = errors(np.array([r["tpot_ms"] for r in rows]), test)[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and two configs (a smoke run)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out-local")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    steps, configs = (4, CONFIGS[:2]) if args.quick else (10, CONFIGS)
    spec = load_model(MODEL)

    started = time.perf_counter()
    toml = {}
    for label, model in (("model shapes", spec), ("square shapes", None)):
        cal = calibrate("cpu", ("fp32", "bf16"), repeats=9, model=model)
        path = args.out / f"calibrated-{label.split()[0]}.toml"
        path.write_text(cal.to_toml())
        toml[label] = read_hardware_toml(path)
        eff = cal.efficiencies()
        print(
            f"calibrate ({label}): copy {cal.copy_bandwidth_bytes_per_s / 1e9:.1f} GB/s, "
            f"read {cal.read_bandwidth_bytes_per_s / 1e9:.1f} GB/s, "
            + ", ".join(
                f"{d}: matvec {cal.gemv_bandwidth_bytes_per_s[d] / 1e9:.1f} GB/s, "
                f"attention {cal.attention_bandwidth_bytes_per_s[d] / 1e9:.1f} GB/s, "
                f"GEMM {cal.gemm_flops_per_s[d] / 1e9:.0f} GFLOP/s, "
                f"decode GEMM {cal.decode_gemm_flops_per_s[d] / 1e9:.0f} GFLOP/s, "
                f"overhead {eff[d]['overhead_s_per_layer'] * 1e3:.2f} ms/layer"
                for d in ("fp32", "bf16")
            )
            + f"; {cal.threads} threads"
        )

    summary = []
    for dtype, context in configs:
        csv = args.out / f"{MODEL}-{dtype}-c{context}.csv"
        config = LocalConfig(MODEL, BATCHES, context, dtype, "cpu", warmup=3, steps=steps, out=csv)
        result = run_bench_local(config, spec)
        hw = toml["model shapes"]
        measured, predicted = first_principles(result, hw)
        _, predicted_square = first_principles(result, toml["square shapes"])
        err = (predicted / measured - 1) * 100
        err_sq = (predicted_square / measured - 1) * 100
        bound = rl.dense_weight_bytes(spec, result.precision) / hw.memory_bandwidth_bytes_per_s * 1e3
        print(f"\n== {MODEL} {dtype}, context {context}  (CSV: {csv})")
        heads = ("TPOT ms", "p10-p90", "tok/s", "first-pr.", "error", "square")
        print(f"{'batch':>6s} " + " ".join(f"{h:>9s}" for h in heads))
        for p, pr, e, es in zip(result.points, predicted, err, err_sq, strict=True):
            spread = f"{p.tpot_ms_p10:.0f}-{p.tpot_ms_p90:.0f}"
            cells = (f"{p.tpot_ms:.1f}", spread, f"{p.throughput_tok_s:.0f}", f"{pr:.1f}", f"{e:+.0f}%", f"{es:+.0f}%")
            print(f"{p.batch:6d} " + " ".join(f"{c:>9s}" for c in cells))
        ratio = measured[0] / bound
        print(
            f"batch-1 TPOT {measured[0]:.1f} ms = {ratio:.2f}x the weight bytes / calibrated bandwidth ({bound:.1f} ms)"
        )
        extra = extrapolation(csv, hw, dtype, result.points[0].context_tokens)
        for label, e in extra.items():
            print(
                f"predict from the first half, {label:16s}: "
                f"held-out TPOT error median {np.median(e):5.1f}%, max {e.max():5.1f}%"
            )
        summary.append((dtype, context, np.abs(err), np.abs(err_sq), ratio, extra))

    print("\n== summary (absolute % TPOT error)")
    for dtype, context, e, es, ratio, extra in summary:
        print(
            f"{dtype} c{context:<5d} first principles median {np.median(e):4.0f}% max {e.max():4.0f}% "
            f"(square-shape calibration: median {np.median(es):4.0f}% max {es.max():4.0f}%)  "
            f"predict data-only median {np.median(extra['data-only']):4.1f}%, "
            f"prior {np.median(extra['calibrated prior']):4.1f}%, linear {np.median(extra['linear']):4.1f}%  "
            f"batch-1 / bound {ratio:.2f}x"
        )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
