"""`predict`: fit a measured table and answer at any batch, with intervals, bounds and honest warnings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokenroof import roofline as rl
from tokenroof.fit import Fit, Prior, fit_table
from tokenroof.measurements import MeasurementTable
from tokenroof.specs import HardwareSpec, ModelSpec, Precision
from tokenroof.stepmodel import StepModel, queued_tpot_s
from tokenroof.units import MS_PER_S

LEVEL = 0.90  # central interval
# Spread (log) of the per-sequence slope that measured efficiencies imply: the calibrated first-principles
# step model missed this CPU's measured TPOT by 5-35% (median over the batches of a config) in
# benchmarks/local_roofline.py, so a factor of e^0.3 ≈ 1.35 is one standard deviation.
SIGMA_LOG_MEASURED_SLOPE = 0.3


@dataclass(frozen=True)
class Workload:
    """What the measured server was doing: context per sequence and whether TPOT carries prefill."""

    context_tokens: float | None = None
    input_len: float | None = None
    output_len: float | None = None
    decode_only: bool = False

    @property
    def mean_context(self) -> float:
        """Average KV-cache length per sequence during decode."""
        if self.context_tokens is not None:
            return self.context_tokens
        if self.input_len is not None and self.output_len is not None:
            return self.input_len + self.output_len / 2
        return 0.0

    @property
    def prefill_ratio(self) -> float:
        """Prompt tokens prefilled per decode step per running sequence (DESIGN.md: b · in/out)."""
        if self.decode_only or not self.input_len or not self.output_len:
            return 0.0
        return self.input_len / self.output_len


def prior_from_specs(
    model: ModelSpec,
    hardware: HardwareSpec,
    precision: Precision,
    workload: Workload,
    tp: int = 1,
    eff: rl.Efficiencies | None = None,
    memory_utilization: float = 0.9,
) -> Prior:
    """Floors at 100% of the peaks and prior centres at the efficiencies (the hardware file's, else the defaults)."""
    eff = eff or rl.default_efficiencies(hardware, precision)
    peak = rl.step_model_from_specs(
        model,
        hardware,
        precision,
        tp,
        rl.Efficiencies(1.0, 1.0, 0.0, 1.0, eff.allreduce_latency_s),
    )
    ctx = workload.mean_context

    def prefill_per_token_s(sm: StepModel) -> float:
        """Compute per prompt token (matmuls, and attention over half the prompt on average)."""
        return sm.t_compute_s + sm.t_attn_token_s * (workload.input_len or 0.0) / 2

    # below the knee each added sequence costs its KV traffic, the compute the GEMMs do not hide, its prompt
    central = rl.step_model_from_specs(model, hardware, precision, tp, eff)
    slope_center = (
        central.memory_time_per_seq_s(ctx)
        + (1 - eff.overlap) * central.compute_time_per_seq_s(ctx)
        + workload.prefill_ratio * prefill_per_token_s(central)
    )
    # paged KV caches (vLLM, SGLang, TGI) hold each sequence's current length, on average the mean context
    cap = rl.max_batch_by_memory(model, hardware, precision, workload.mean_context, tp, memory_utilization)
    return Prior(
        weights_floor=peak,
        compute_floor_s=float(peak.compute_time_per_seq_s(ctx)),
        per_seq_floor_s=float(peak.memory_time_per_seq_s(ctx)),
        prefill_floor_s=workload.prefill_ratio * prefill_per_token_s(peak),
        fixed_floor_s=peak.t_fixed_s,
        bandwidth_center=eff.bandwidth,
        compute_center=eff.compute,
        flops_per_token=float(rl.matmul_flops(model, 1.0, tp)),
        peak_flops_per_s=hardware.peak_for(precision.compute_dtype),
        label=f"{model.name} on {hardware.key or hardware.name} ×{tp} ({precision.compute_dtype})",
        max_batch=cap if cap > 0 else None,
        overlap=eff.overlap,
        slope_center_s=float(slope_center),
        sigma_log_slope=SIGMA_LOG_MEASURED_SLOPE if hardware.efficiencies else None,
    )


def evaluate(sm: StepModel, batch: np.ndarray, cap: int | None) -> tuple[np.ndarray, np.ndarray]:
    """TPOT (s) and throughput (tok/s) with the running batch capped by memory (see `queued_tpot_s`)."""
    tpot = queued_tpot_s(sm, batch, cap)
    return tpot, np.asarray(batch, dtype=float) / tpot


@dataclass
class PredictResult:
    table: MeasurementTable
    fit: Fit
    batches: np.ndarray
    prior: Prior | None
    critical_batch_asserted: float | None = None
    warnings: list[str] = field(default_factory=list)

    def critical_batch(self) -> tuple[float | None, list[float | None], str | None]:
        if self.critical_batch_asserted is not None:
            return self.critical_batch_asserted, [None, None], None
        sm = self.fit.step_model
        value = sm.critical_batch(0.0)
        samples = [m.critical_batch(0.0) for m in self.fit.sample_models()]
        finite = [s for s in samples if s is not None]
        lo, hi = np.percentile(finite, [50 * (1 - LEVEL), 50 * (1 + LEVEL)]) if finite else (None, None)
        if len(finite) < LEVEL * len(samples):
            hi = None  # in more than 10% of samples the step never turns compute-bound
        if value is None:
            reason = (
                "no knee in the fitted data: the memory-bound line has no compute term"
                if self.fit.method == "line"
                else "the per-sequence memory time (KV reads and the rest) exceeds the per-sequence compute time: "
                "decode never turns compute-bound; throughput approaches a bandwidth plateau"
            )
            return None, [None if lo is None else float(lo), None if hi is None else float(hi)], reason
        return value, [None if lo is None else float(lo), None if hi is None else float(hi)], None

    def predictions(self) -> list[dict[str, Any]]:
        cap = self.prior.max_batch if self.prior else None
        sm, b = self.fit.step_model, self.batches
        tpot, thr = evaluate(sm, b, cap)
        draws = [evaluate(m, b, cap) for m in self.fit.sample_models()]
        tpots = np.array([d[0] for d in draws])
        thrs = np.array([d[1] for d in draws])
        q = [50 * (1 - LEVEL), 50 * (1 + LEVEL)]
        t_lo, t_hi = np.percentile(tpots, q, axis=0)
        r_lo, r_hi = np.percentile(thrs, q, axis=0)
        bounds = sm.bound(b if cap is None else np.minimum(b, cap))
        rows = []
        for i, batch in enumerate(b):
            rows.append(
                {
                    "batch": float(batch),
                    "throughput_tok_s": float(thr[i]),
                    "tpot_ms": float(tpot[i] * MS_PER_S),
                    "bound": "capacity" if cap is not None and batch > cap else str(bounds[i]),
                    "throughput_tok_s_low": float(min(r_lo[i], thr[i])),
                    "throughput_tok_s_high": float(max(r_hi[i], thr[i])),
                    "tpot_ms_low": float(min(t_lo[i], tpot[i]) * MS_PER_S),
                    "tpot_ms_high": float(max(t_hi[i], tpot[i]) * MS_PER_S),
                    "extrapolated": bool(batch > self.table.batch.max() or batch < self.table.batch.min()),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        sm = self.fit.step_model
        crit, crit_interval, reason = self.critical_batch()
        terms = sm.to_dict()
        terms.update(
            {
                "method": self.fit.method,
                "why": self.fit.reason,
                "residual_rms_relative": self.fit.sigma_rel,
                "points_fitted": self.fit.n_fit,
            }
        )
        return {
            "predictions": self.predictions(),
            "critical_batch": crit,
            "critical_batch_interval": crit_interval,
            "critical_batch_reason": reason,
            "knee_batch": sm.knee_batch(0.0),
            "throughput_asymptote_tok_s": sm.throughput_asymptote_tok_s(0.0),
            "max_batch_by_memory": self.prior.max_batch if self.prior else None,
            "interval_level": LEVEL,
            "model": terms,
            "measured": self.table.to_dict(),
            "warnings": list(self.warnings),
        }


# -- warnings -----------------------------------------------------------------------------
def data_patterns(table: MeasurementTable) -> list[str]:
    """Shapes the step model cannot explain: falling throughput, flat throughput (a cap or a queue)."""
    notes = []
    b, thr, tpot = table.batch, table.throughput_tok_s, table.tpot_ms
    for i in range(1, len(table)):
        grow_b = b[i] / b[i - 1]
        grow_thr = thr[i] / thr[i - 1]
        if grow_b < 1.2:
            continue
        if grow_thr < 0.97:
            notes.append(
                f"throughput falls from {thr[i - 1]:.4g} tok/s at batch {b[i - 1]:g} to {thr[i]:.4g} at "
                f"batch {b[i]:g}: the step model cannot explain falling throughput (KV-cache preemption "
                "and recompute, or swapping, is the usual cause)"
            )
        elif grow_thr < 1.05:
            grow_tpot = tpot[i] / tpot[i - 1]
            if grow_tpot < 1.05:
                notes.append(
                    f"throughput and TPOT are both flat from batch {b[i - 1]:g} to {b[i]:g}: a server-side "
                    "batch cap (max_num_seqs) holds the running batch; requests queue and the batch column "
                    "is not the running batch"
                )
            else:
                notes.append(
                    f"throughput is flat from batch {b[i - 1]:g} to {b[i]:g} while TPOT grows ×"
                    f"{grow_tpot:.2f}: requests queue or are preempted (a full KV cache or a batch cap); "
                    "points past this are not the running batch"
                )
    return notes


def fit_notes(result: PredictResult, max_asked: float) -> list[str]:
    fit, sm, table = result.fit, result.fit.step_model, result.table
    notes = []
    top = float(table.batch.max())
    knee = sm.knee_batch(0.0)
    if fit.method == "line" and max_asked > top:
        notes.append(
            f"no knee observed up to batch {top:g}: beyond it the memory-bound line assumes TPOT keeps "
            "growing at the measured slope; where a compute knee lies past the data TPOT will be higher "
            "(give --model/--hardware for the physics, or --critical-batch)"
        )
    if fit.method == "prior" and knee is not None and knee > top and max_asked > top:
        notes.append(
            f"no measured point is past the knee (batch ≈ {knee:.0f}): the compute roof comes from the "
            f"hardware prior ({result.prior.label if result.prior else ''}), not from the data"
        )
    if fit.method == "pinned":
        notes.append("the compute roof is asserted (--critical-batch / --roof-tok-s), not observed")
    if result.critical_batch_asserted is not None and result.prior is not None and result.prior.peak_flops_per_s:
        n = result.critical_batch_asserted
        thr = float(sm.throughput_tok_s(n))
        achieved = thr * result.prior.flops_per_token
        notes.append(
            f"the asserted roof at batch {n:g} ({thr:,.0f} tok/s) implies the matmuls run at "
            f"{achieved / 1e12:.0f} TFLOP/s, about {achieved / result.prior.peak_flops_per_s:.0%} of the "
            f"dense peak of {result.prior.label}: check it"
        )
    if max_asked > 4 * top:
        notes.append(
            f"predicting up to {max_asked / top:.1f}× the largest measured batch: intervals widen, "
            "and effects outside the model (preemption, scheduler limits) grow"
        )
    if result.prior is not None:
        notes += physics_checks(fit, result.prior)
    if fit.sigma_rel > 0.05:
        notes.append(
            f"the fitted model misses the measured TPOTs by {fit.sigma_rel:.0%} rms: the curve has a shape "
            "the step model does not explain"
        )
    cap = result.prior.max_batch if result.prior else None
    if cap is not None and max_asked > cap:
        notes.append(
            f"batches above {cap} do not fit in memory (weights + KV cache at the mean context, "
            "90% of memory): there the running batch stays at the cap, throughput is flat and TPOT "
            "counts queueing"
        )
    return notes


def physics_checks(fit: Fit, prior: Prior) -> list[str]:
    """Measured terms faster than the datasheet allows mean the model, hardware or workload is misdescribed."""
    notes = []
    t = fit.terms
    intercept_s = t.fixed_s + t.weights_scale * prior.weights_floor.t_weights_s
    weights_floor_s = prior.weights_floor.t_weights_s + prior.fixed_floor_s
    if intercept_s < 0.98 * weights_floor_s:
        notes.append(
            f"the measured step at batch → 0 ({intercept_s * 1e3:.3g} ms) is faster than streaming the "
            f"weights at peak bandwidth ({weights_floor_s * 1e3:.3g} ms for {prior.label}): check --model, "
            "--hardware, --dtype and --tp"
        )
    seq_floor_s = prior.per_seq_floor_s + prior.prefill_floor_s
    if t.per_seq_s < 0.9 * seq_floor_s:
        notes.append(
            f"the measured cost per added sequence ({t.per_seq_s * 1e6:.3g} µs) is below the KV-cache "
            f"traffic at peak bandwidth ({seq_floor_s * 1e6:.3g} µs): the context (or prompt share) is "
            "smaller than --context / --input-len say, or the KV cache is quantised (--kv-dtype)"
        )
    return notes


def predict_table(
    table: MeasurementTable,
    batches: Sequence[float],
    prior: Prior | None = None,
    critical_batch: float | None = None,
    roof_tok_s: float | None = None,
    n_samples: int = 200,
    seed: int = 0,
) -> PredictResult:
    """Fit `table` and predict at `batches` (each echoed as asked)."""
    from tokenroof.analysis import validate_batches

    arr = validate_batches(batches)
    fit = fit_table(table, prior, critical_batch, roof_tok_s, n_samples, seed)
    result = PredictResult(table, fit, arr, prior, critical_batch)
    result.warnings = list(table.warnings) + data_patterns(table) + fit_notes(result, float(arr.max()))
    return result
