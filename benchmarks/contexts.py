"""Batch × context: how well a fit moves to contexts it was not measured at (issue 14).

No published curve in benchmarks/curves varies the context alone (the Argonne pairs change
the prompt with it, and their e2e TPOT carries the batch's prefill), so the truth here is
synthetic: a decode step from first principles with efficiencies *unlike* the prior's centres
(KV reads at 55% of peak bandwidth, weights at 65%, compute at 50%, 2 ms of overhead),
evaluated at batches 1–128 with 2% log-normal noise, and for a sliding-window and an MLA
model as well. Two ways to move:

- **data**: a table measured at two contexts (4k and 16k), fitted as one model whose KV term
  grows with context; predicted at 8k (between), 32k and 64k (2× and 4× past), data only and
  with the physics prior;
- **physics**: a table measured at one context (8k) with the prior; predicted at 16k, 32k and
  4k by the prior's KV reads at the fitted bandwidth efficiency.

Figures: median and 90th percentile |TPOT error| at batches 1–256, and how many truths fall in
the 90% intervals. Memory caps are left out of the truth, so predictions are compared only where
the memory holds the batch.

    python benchmarks/contexts.py
"""

from __future__ import annotations

import numpy as np

from tokenroof.fit.predict import MeasuredWorkload, predict_table
from tokenroof.io.measurements import Row, Semantics, build_table
from tokenroof.model import roofline as rl
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Physics

SETUPS = (("llama-3.1-8b", "h100-sxm"), ("mistral-7b", "h100-sxm"), ("deepseek-v2-lite", "h100-sxm"))
TRUE_EFFICIENCIES = rl.Efficiencies(bandwidth=0.65, compute=0.5, overhead_s=2e-3, kv_bandwidth=0.55)
MEASURED = (1, 2, 4, 8, 16, 32, 64, 128)
ASKED = (1, 8, 32, 64, 128, 256)
STEP = Semantics(batch_kind="static", tpot_kind="step")
SEEDS = 5


def truth_of(physics: Physics) -> StepModel:
    model, hardware = physics._specs()
    return rl.step_model_from_specs(model, hardware, physics.precision, physics.tp, TRUE_EFFICIENCIES)


def table_at(truth: StepModel, contexts: tuple[float, ...], seed: int, effective: object) -> object:
    rng = np.random.default_rng(seed)
    rows = []
    for context in contexts:
        held = float(effective(context))  # type: ignore[operator]
        for b in MEASURED:
            tpot_ms = float(truth.step_time_s(b, held)) * 1e3 * float(np.exp(0.02 * rng.normal()))
            rows.append(Row(b, None, tpot_ms, context))
    return build_table(rows, semantics=STEP)


def score(
    physics: Physics, truth: StepModel, measured: tuple[float, ...], asked: tuple[float, ...], prior: bool, seed: int
) -> tuple[list[float], list[bool]]:
    model, _ = physics._specs()
    table = table_at(truth, measured, seed, model.effective_context)
    fit_prior = physics.prior(MeasuredWorkload.from_table(table, decode_only=True)) if prior else None  # type: ignore[arg-type]
    result = predict_table(table, ASKED, fit_prior, n_samples=100, seed=seed, contexts=list(asked))  # type: ignore[arg-type]
    errors, inside = [], []
    for row in result.predictions():
        context, batch = row["context_tokens"], row["batch"]
        if batch > physics.max_batch(context):
            continue  # the truth has no memory cap: compare only where the memory holds the batch
        true_ms = float(truth.step_time_s(batch, float(model.effective_context(context)))) * 1e3
        errors.append(abs(row["tpot_ms"] / true_ms - 1) * 100)
        inside.append(row["tpot_ms_low"] <= true_ms <= row["tpot_ms_high"])
    return errors, inside


def main() -> None:
    cases = (
        ("data: measured 4k+16k, data only", (4096, 16384), (8192, 32768, 65536), False),
        ("data: measured 4k+16k, with prior", (4096, 16384), (8192, 32768, 65536), True),
        ("physics: measured 8k, with prior", (8192,), (4096, 16384, 32768), True),
    )
    print(f"truth: {TRUE_EFFICIENCIES}; {SEEDS} noise seeds per setup; batches {ASKED}")
    for label, measured, asked, prior in cases:
        print(f"\n{label}, predicted at {', '.join(f'{c:g}' for c in asked)}")
        every_error, every_inside = [], []
        for name, hardware in SETUPS:
            physics = Physics(name, hardware, "bf16")
            truth = truth_of(physics)
            errors, inside = [], []
            for seed in range(SEEDS):
                e, i = score(physics, truth, measured, asked, prior, seed)
                errors += e
                inside += i
            every_error += errors
            every_inside += inside
            print(
                f"  {name:18s} TPOT |error| median {np.median(errors):5.1f}%  p90 {np.percentile(errors, 90):5.1f}%"
                f"  90% intervals hold {np.mean(inside):6.1%} of {len(inside)}"
            )
        print(
            f"  {'all':18s} TPOT |error| median {np.median(every_error):5.1f}%  "
            f"p90 {np.percentile(every_error, 90):5.1f}%  90% intervals hold {np.mean(every_inside):6.1%}"
        )


if __name__ == "__main__":
    main()
