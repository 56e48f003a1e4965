"""`predict`: fit a measured table and answer at any batch, with intervals, bounds and honest warnings."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tokenroof.errors import ParameterError
from tokenroof.fit import intervals
from tokenroof.fit.core import MAX_POINTS, Excluded, Fit, Prior, fit_table
from tokenroof.fit.intervals import LEVEL, Calibration
from tokenroof.fit.prior import SIGMA_LOG_MEASURED_SLOPE, MeasuredWorkload, prior_from_specs
from tokenroof.fit.travel import online
from tokenroof.io.measurements import MeasurementTable
from tokenroof.units import MS_PER_S

if TYPE_CHECKING:
    from tokenroof.fit.physics import Physics

__all__ = ["SIGMA_LOG_MEASURED_SLOPE", "MeasuredWorkload", "PredictResult", "predict_table", "prior_from_specs"]


def step_interval_samples(fit: Fit, batch: np.ndarray, context: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Point TPOT (s) and the log-sd of the samples' TPOT at `batch` (at `context`, raw tokens; None: as fitted)."""
    tpot, _ = fit.evaluate(batch, context=context)
    samples, _ = fit.sample_curves(batch, context)
    return tpot, np.std(np.log(samples), axis=0) if len(fit.samples) > 1 else np.zeros_like(tpot)


def context_doublings(fit: Fit, context: float | None) -> float:
    """How far `context` (raw tokens) lies outside the measured contexts, in doublings of the context the layers
    hold (sliding-window layers hold their window: past it nothing moves); 0 inside, or as fitted."""
    if context is None:
        return 0.0
    if fit.context_range is not None:
        low, high = (float(fit.effective(c)) for c in fit.context_range)
    else:
        low = high = fit.context_tokens
    if low <= 0:
        return 0.0
    return float(intervals.distance_doublings(np.array([float(fit.effective(context))]), low, high)[0])


# past a memory cap the physics estimated, the interval holds up to this many times the sequences running at once:
# the KV dtype alone moves the cap twice over (fp8 against bf16), the memory fraction and reservations by less
PHYSICS_CAP_SLACK = 2.0


@dataclass
class PredictResult:
    table: MeasurementTable
    fit: Fit
    batches: np.ndarray
    prior: Prior | None
    critical_batch_asserted: float | None = None
    excluded: Excluded | None = None
    warnings: list[str] = field(default_factory=list)
    contexts: list[float] | None = None  # contexts to predict at (raw tokens; None: the one the table was measured at)
    serving: Any = None  # serving/replay.ServingFit: the scheduler's model replaying an online table (None: none)
    # the scheduler's model run at the asked batches and contexts (serving/replay.replay_predictions): where the table
    # measured TTFT it is the answer, the decode fit's calibrated band around it
    scheduler: dict[tuple[float, float | None], tuple[float, float, float]] | None = None

    @property
    def cap_source(self) -> str | None:
        """Where the running-batch cap comes from: "physics" (weights and KV in the engine's share of memory, an
        estimate), "measured" (the memory's cap raised to what the data held, where the physics' estimate was below
        what ran: a floor), "data" (a server's cap the points showed), None (no cap)."""
        if self.fit.curve.cap is None:
            return None
        if not self.fit.curve.from_physics:
            return "data"
        return "physics" if self.fit.cap_raised_from is None else "measured"

    @property
    def reading_unstated(self) -> bool:
        """The table does not say whether its TPOT counts queued requests' wait (`# tpot_kind=…`): past a cap,
        where the two readings part (flat, or growing with the queue), an interval holds both."""
        return self.fit.curve.cap is not None and "tpot_kind" not in self.table.semantics.stated

    @property
    def calibration(self) -> Calibration:
        return intervals.stored("prior" if self.prior is not None else "data")

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
        if value is not None and lo is not None:
            lo = min(float(lo), value)
            hi = None if hi is None else max(float(hi), value)
        interval = [None if lo is None else float(lo), None if hi is None else float(hi)]
        if value is None:
            interval = [None, None]
            reason = (
                "no knee in the fitted data: the memory-bound line has no compute term"
                if self.fit.method == "line"
                else "the per-sequence memory time (KV reads and the rest) exceeds the per-sequence compute time: "
                "decode never turns compute-bound; throughput approaches a bandwidth plateau"
            )
            return None, interval, reason
        return value, interval, None

    def predictions(self) -> list[dict[str, Any]]:
        """One row per batch, for each context asked (in the order asked), or at the measured one."""
        asked: list[float | None] = list(self.contexts) if self.contexts else [None]
        return [row for context in asked for row in self.predictions_at(context)]

    def predictions_at(self, context: float | None) -> list[dict[str, Any]]:
        """Rows at `context` (raw tokens; None: as fitted): intervals widen past the measured batches and contexts."""
        b, fit = self.batches, self.fit
        tpot, sd = step_interval_samples(fit, b, context)
        moves = context is not None and fit.context_source is not None
        ctx = fit.effective(context) if moves and context is not None else None
        running = fit.curve.running(b, ctx)
        thr = fit.curve.throughput_tok_s(b, tpot, ctx)
        cal = self.calibration
        distance = fit.batch_doublings(b, context) + context_doublings(fit, context)
        t_lo, t_hi = cal.bounds(tpot, cal.scale(sd, fit.sigma_rel, distance))
        t_lo, t_hi = np.minimum(t_lo, tpot), np.maximum(t_hi, tpot)
        # throughput = running / step: its bounds are the TPOT bounds' reciprocals
        r_lo, r_hi = thr * tpot / t_hi, thr * tpot / t_lo
        if self.reading_unstated:  # past the cap, TPOT under the other reading too (throughput is the same in both)
            other = tpot * running / b if fit.curve.queues else tpot * b / running
            t_lo, t_hi = np.minimum(t_lo, t_lo * other / tpot), np.maximum(t_hi, t_hi * other / tpot)
        capped = running < b * (1 - 1e-12)
        if fit.curve.from_physics and capped.any():  # past a cap the physics estimated: the batch may run whole
            lo, hi = self._uncapped_band(b, context, distance)
            t_lo, t_hi = np.where(capped, np.minimum(t_lo, lo), t_lo), np.where(capped, np.maximum(t_hi, hi), t_hi)
            # running whole, throughput is the batch over its step (each TPOT reading's, with no queue to wait in)
            r_lo, r_hi = (
                np.where(capped, np.minimum(r_lo, b / hi), r_lo),
                np.where(capped, np.maximum(r_hi, b / lo), r_hi),
            )
        bounds = fit.step_model_at(context).bound(running)
        rows = []
        for i, batch in enumerate(b):
            row = {
                "batch": float(batch),
                "throughput_tok_s": float(thr[i]),
                "tpot_ms": float(tpot[i] * MS_PER_S),
                "bound": "capacity" if capped[i] else str(bounds[i]),
                "throughput_tok_s_low": float(r_lo[i]),
                "throughput_tok_s_high": float(r_hi[i]),
                "tpot_ms_low": float(t_lo[i] * MS_PER_S),
                "tpot_ms_high": float(t_hi[i] * MS_PER_S),
                "extrapolated": bool(distance[i] > 0),
                **({} if context is None else {"context_tokens": float(context)}),
            }
            if self.scheduler is not None and (float(batch), context) in self.scheduler:
                row = self._on_the_scheduler(row, *self.scheduler[(float(batch), context)])
                if not capped[i]:  # the term that binds the scheduler's decode step, the model that answered
                    at = context if context is not None else (self.fit.context_tokens or 0.0)
                    row["bound"] = str(self.serving.model.bound(float(batch), at))
            rows.append(row)
        return rows

    def _uncapped_band(
        self, b: np.ndarray, context: float | None, distance: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The calibrated TPOT band (s) at `b` with the cap at PHYSICS_CAP_SLACK × the physics' estimate: what the rows
        past a memory cap from the physics also hold, since that cap is an estimate (an engine that keeps an fp8 KV
        cache under fp8 weights holds twice the sequences the default bf16 cache does). Up to the raised cap its TPOT
        counts no queue: above the capped reading where TPOT counts steps, below it where TPOT counts the wait."""
        fit = self.fit
        assert fit.curve.cap is not None  # rows past a cap ask for it
        cap = fit.curve.cap * PHYSICS_CAP_SLACK
        tpot, sd = step_interval_samples(replace(fit, curve=replace(fit.curve, cap=cap)), b, context)
        cal = self.calibration
        lo, hi = cal.bounds(tpot, cal.scale(sd, fit.sigma_rel, distance))
        return np.minimum(lo, tpot), np.maximum(hi, tpot)

    def _on_the_scheduler(self, row: dict[str, Any], tpot_s: float, ttft_s: float, thr: float) -> dict[str, Any]:
        """A row answered by the scheduler's model: its TPOT, TTFT and throughput at the centre, the decode fit's
        calibrated band around it, widened to hold the decode fit's own answer where the two disagree."""
        tpot_ms = tpot_s * MS_PER_S
        scale = tpot_ms / row["tpot_ms"]
        low = min(row["tpot_ms_low"] * scale, row["tpot_ms_low"])
        high = max(row["tpot_ms_high"] * scale, row["tpot_ms_high"])
        return {
            **row,
            "tpot_ms": tpot_ms,
            "throughput_tok_s": thr,
            "tpot_ms_low": low,
            "tpot_ms_high": high,
            # the reciprocals of the TPOT band, and the decode fit's throughput band moved to this centre (which past a
            # physics cap holds the whole batch running: more throughput, where its TPOT band reached higher)
            "throughput_tok_s_low": min(
                thr * tpot_ms / high, row["throughput_tok_s_low"] * thr / row["throughput_tok_s"]
            ),
            "throughput_tok_s_high": max(
                thr * tpot_ms / low, row["throughput_tok_s_high"] * thr / row["throughput_tok_s"]
            ),
            "ttft_ms": ttft_s * MS_PER_S,
        }

    def context_law(self) -> dict[str, Any] | None:
        """How the fitted terms move with context: fitted across the measured contexts ("data"), or the prior's KV
        reads and attention at the fitted efficiencies ("physics"); None: they cannot."""
        law = self.fit.best.law
        if law is None:
            return None
        return {
            "source": law.source,
            "reference_tokens": law.reference_tokens,
            "kv_token_s": law.kv_token_s,
            "attn_token_s": law.attn_token_s,
            "measured_contexts": self.table.level_contexts() if self.table.several_contexts else None,
        }

    def by_context(self) -> list[dict[str, Any]] | None:
        """The characteristic batches at each context asked (the top-level ones are at the reference context)."""
        if not self.contexts:
            return None
        rows = []
        for context in self.contexts:
            sm = self.fit.step_model_at(context)  # folded at the context: its figures at context 0 are there
            rows.append(
                {
                    "context_tokens": float(context),
                    "critical_batch": sm.critical_batch(0.0),
                    "knee_batch": sm.knee_batch(0.0),
                    "throughput_asymptote_tok_s": sm.throughput_asymptote_tok_s(0.0),
                    "running_batch_cap": self.fit.cap_at(context),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        sm = self.fit.step_model
        crit, crit_interval, reason = self.critical_batch()
        terms = sm.to_dict()
        small = self.fit.best.small
        terms.update(
            {
                "method": self.fit.method,
                "why": self.fit.reason,
                "structure_weights": dict(self.fit.weights),
                "small_batch": small.to_dict() if small is not None else None,
                "residual_rms_relative": self.fit.sigma_rel,
                "points_fitted": self.fit.n_fit,
                "running_batch_cap": self.fit.curve.cap,
                "running_batch_cap_source": self.cap_source,
                "tpot_counts_queueing": self.fit.curve.queues,
                "context_tokens": self.fit.context_tokens or None,
                "context_law": self.context_law(),
                # these terms are never split: a scheduler reading them back must not add the prompts again
                "prompts_folded": online(self.table),
            }
        )
        cal = self.calibration
        return {
            "predictions": self.predictions(),
            "by_context": self.by_context(),
            "critical_batch": crit,
            "critical_batch_low": crit_interval[0],
            "critical_batch_high": crit_interval[1],
            "critical_batch_reason": reason,
            "knee_batch": sm.knee_batch(0.0),
            "throughput_asymptote_tok_s": sm.throughput_asymptote_tok_s(0.0),
            "max_batch_by_memory": self.prior.max_batch if self.prior else None,
            "interval_level": LEVEL,
            "interval_calibration": {
                "kappa_per_doubling": cal.kappa_per_doubling,
                "q_low": cal.q_low,
                "q_high": cal.q_high,
                "curves": cal.curves,
            },
            "excluded_points": (
                {
                    "batches": list(self.excluded.batches),
                    "reason": self.excluded.reason,
                    "running_batch_cap": self.excluded.cap,
                    "left_out": self.excluded.left_out,
                    "contexts": list(self.excluded.contexts) or None,
                }
                if self.excluded
                else None
            ),
            "prior_conflicts": list(self.fit.conflicts) + (list(self.serving.conflicts) if self.serving else []),
            "workload": workload_line(self.table, self.serving),
            "serving": self.serving.to_dict() if self.serving is not None else None,
            "model": terms,
            "step_model": sm.to_dict(),
            "measured": self.table.to_dict(MAX_POINTS),
            "warnings": list(self.warnings),
        }


def read_with_prior(
    files: list[Path], physics: Physics, flags: MeasuredWorkload, flags_are_target: bool = False
) -> tuple[MeasurementTable, Prior | None]:
    """The measured table, and the physics prior when the model and hardware are known (None: data only).

    The prior's context is --context, else the mean of the table's context_tokens column, else from the lengths
    (the flags', else the table's): never a silent 0 (MeasuredWorkload.from_table raises). With `flags_are_target`
    (advise asking about a workload) the lengths the table states win, and the flags only stand in for lengths it
    lacks.
    """
    from tokenroof.io.measurements import read_table

    table = read_table(files)
    return table, prior_for(table, physics, flags, flags_are_target)


def prior_for(
    table: MeasurementTable, physics: Physics, flags: MeasuredWorkload, flags_are_target: bool = False
) -> Prior | None:
    """`read_with_prior` for a table already read."""
    if not physics.known:
        return None
    input_len, output_len = flags.input_len, flags.output_len
    if flags_are_target and (table.semantics.mean_context is not None or table.context_tokens is not None):
        input_len = output_len = None
    workload = MeasuredWorkload.from_table(table, flags.context_tokens, input_len, output_len, flags.decode_only)
    return physics.prior(workload)


def split_contexts(table: MeasurementTable, contexts: list[float] | None) -> tuple[float | None, list[float] | None]:
    """--context as the context the table was measured at (a table that does not state one: one value) or as the
    contexts to predict at (a table that states its own)."""
    if not contexts:
        return None, None
    if table.context_tokens is not None or table.semantics.mean_context is not None:
        return None, contexts
    if len(contexts) > 1:
        raise ParameterError(
            f"{table.source}: the table does not say the context it was measured at, so {{}} gives that one "
            "context; to predict at several, state the table's own (a context_tokens column, or '# input_len=… "
            "output_len=…') and list the contexts to predict at",
            "context",
        )
    return contexts[0], None


def unread_context(measured_at: float | None, prior: Prior | None) -> list[str]:
    """--context read as the context a table that states none was measured at: only the physics prior reads it
    (its KV traffic and memory cap), so without one it changes nothing, and says so."""
    if measured_at is None or prior is not None:
        return []
    return [
        f"--context {measured_at:g} changes nothing here: the table states no context, so it is read as the one the "
        "table was measured at, which only the physics prior reads (give --model and --hardware); to move the "
        "answer to another context the table must state its own (a context_tokens column, or '# input_len=… "
        "output_len=…')"
    ]


def workload_line(table: MeasurementTable, serving: Any = None) -> str:
    """What the measured steps held, in one line (every header states it): pure decode, or online with how the
    prompts met the steps."""
    sem = table.semantics
    if not online(table):
        kind = "a static batch" if sem.batch_kind == "static" else "TPOT of pure decode steps"
        return f"decode-only ({kind}): no prompts in the measured steps"
    lengths = f"{sem.input_len:g} in / {sem.output_len:g} out, " if sem.input_len and sem.output_len else ""
    if table.several_contexts and sem.output_len:
        held = " and ".join(f"{c:,.0f}" for c in table.level_contexts())
        lengths = f"mean contexts {held}, {sem.output_len:g} out, "
    if serving is not None:
        return f"{serving.describe()} ({lengths}replayed on the scheduler)"
    client = f", {sem.client} client" if sem.client else ""
    assumed = "" if {"batch_kind", "tpot_kind"} & set(sem.stated) else ", assumed"
    if not lengths:
        return (
            f"online (prompts in the steps{client}{assumed}) of lengths not stated: their prefill is in the "
            "per-sequence terms as measured, priced by nothing (give the measured --input-len/--output-len, or "
            "--decode-only if TPOT excludes prefill)"
        )
    return (
        f"online ({lengths}prompts in the steps{client}{assumed}): their prefill is folded into the per-sequence "
        "terms, not priced apart (no TTFT in the table, nor the physics)"
    )


# -- warnings -----------------------------------------------------------------------------
def data_patterns(table: MeasurementTable, excluded: Excluded | None) -> list[str]:
    """Shapes worth a word, by what the columns count: falling throughput, points past a cap, flat throughput."""
    notes = []
    if excluded is not None:
        if excluded.contexts:
            pairs = zip(excluded.batches, excluded.contexts, strict=True)
            which = ", ".join(f"{b:g} (context {c:g})" for b, c in pairs)
        else:
            which = ", ".join(f"{b:g}" for b in excluded.batches)
        verb = "left out of the fit" if excluded.left_out else "past the server's cap"
        notes.append(f"{verb}, batches {which}: {excluded.reason}")
    levels, contexts = table.levels, table.level_contexts()
    for level in range(int(levels.max(initial=0)) + 1):
        curve = table.subset(levels == level)
        at = f" at context {contexts[level]:g}" if table.several_contexts else ""
        b, thr = curve.batch, curve.throughput_tok_s
        falls = np.flatnonzero((b[1:] / b[:-1] >= 1.2) & (thr[1:] / thr[:-1] < 0.97)) + 1
        for i in falls.tolist():
            notes.append(
                f"throughput falls from {thr[i - 1]:.4g} tok/s at batch {b[i - 1]:g} to {thr[i]:.4g} at "
                f"batch {b[i]:g}{at}: the step model cannot explain falling throughput (KV-cache preemption "
                "and recompute, or swapping, is the usual cause)"
            )
    return notes


def fit_notes(result: PredictResult, max_asked: float) -> list[str]:
    fit, sm = result.fit, result.fit.step_model
    notes = []
    top = fit.batch_range[1]
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
        notes += physics_checks(result.table, result.prior)
    if fit.sigma_rel > 0.05:
        notes.append(
            f"the fitted model misses the measured TPOTs by {fit.sigma_rel:.0%} rms: the curve has a shape "
            "the step model does not explain"
        )
    asked: list[float | None] = list(result.contexts) if result.contexts else [None]
    caps = {c: fit.cap_at(c) for c in asked}  # the memory's cap moves with the context asked
    cap = min((c for c in caps.values() if c is not None), default=None)
    if cap is not None and max_asked > cap:
        several = bool(result.contexts) and len(set(caps.values())) > 1  # each context its own
        cap_text = (
            ", ".join(f"{v:.4g} at {c:,.0f} tokens" for c, v in caps.items() if v is not None)
            if several
            else f"{cap:.4g}"
        )
        source = (
            "the server's cap seen in the data"
            if result.excluded is not None
            else "the most the data show running at once, where the memory's estimate was lower; more may fit"
            if result.cap_source == "measured"
            else "weights + KV cache at the mean context in the engine's share of memory"
        )
        counts = (
            "there the running batch stays at the cap, throughput is flat and TPOT (end-to-end per token) grows with "
            "the queue"
            if fit.curve.queues
            else CAP_FLAT
        )
        notes.append(
            f"batches above {cap_text} do not run together ({source}): {counts}"
            + (
                "; the table does not say what its TPOT counts ('# tpot_kind=tpot' or 'e2e'), so the interval holds "
                "both readings (flat, and growing with the queue)"
                if result.reading_unstated
                else ""
            )
        )
        if fit.curve.from_physics:
            what = (
                f"what the data held{', moved to each context' if several else ''} (the physics' estimate, "
                f"{fit.cap_raised_from:.4g}, was below it), a floor of what fits"
                if fit.cap_raised_from is not None
                else "the physics' estimate (the engine's KV dtype, memory fraction and reservations move it)"
            )
            notes.append(
                f"{'the caps of ' + cap_text + ' are' if several else 'the cap of ' + cap_text + ' is'} {what}: "
                f"past it the interval also holds up to {PHYSICS_CAP_SLACK:g}× as many sequences running at once"
            )
    notes += [f"prior and data disagree: {c}" for c in fit.conflicts]
    return notes


CAP_FLAT = (
    "there the running batch stays at the cap, throughput is flat and TPOT stays at the cap's (queued requests wait "
    "before their first token: TTFT grows)"
)
# … and where the scheduler answers past the cap (serving/replay.with_scheduler), what its rows hold instead
CAP_SCHEDULED = (
    "the scheduler's answers there run the KV cache full: the running batch stays near the cap, the sequences it "
    "preempts are recomputed and the rest queue, so throughput levels off, TPOT can still grow a little and TTFT "
    "grows with the queue"
)


def physics_checks(table: MeasurementTable, prior: Prior) -> list[str]:
    """A measured step faster than the datasheet allows means the model, hardware or workload is misdescribed."""
    fastest_s = float(table.tpot_ms.min()) / MS_PER_S
    weights_floor_s = prior.weights_floor.t_weights_s + prior.fixed_floor_s
    if fastest_s < 0.98 * weights_floor_s:
        return [
            f"the fastest measured step ({fastest_s * 1e3:.3g} ms) is faster than streaming the weights at peak "
            f"bandwidth ({weights_floor_s * 1e3:.3g} ms for {prior.label}): check --model, --hardware, --dtype and --tp"
        ]
    return []


def predict_table(
    table: MeasurementTable,
    batches: Sequence[float],
    prior: Prior | None = None,
    critical_batch: float | None = None,
    roof_tok_s: float | None = None,
    n_samples: int = 200,
    seed: int = 0,
    contexts: Sequence[float] | None = None,
) -> PredictResult:
    """Fit `table` and predict at `batches` (each echoed as asked), at each of `contexts` (raw tokens; None: at the
    context the table was measured at)."""
    from tokenroof.model.analysis import validate_batches

    arr = validate_batches(batches)
    for context in contexts or []:
        if not (math.isfinite(context) and context >= 1):
            raise ParameterError(f"{{}} must be a finite number of tokens ≥ 1, got {context:g}", "context")
    fit = fit_table(table, prior, critical_batch, roof_tok_s, n_samples, seed)
    for context in contexts or []:
        fit.require_context_law(context)
    asked = list(contexts) if contexts else (table.level_contexts() if table.several_contexts else None)
    result = PredictResult(table, fit, arr, prior, critical_batch, fit.excluded, contexts=asked)
    result.warnings = (
        list(table.warnings) + data_patterns(table, fit.excluded) + fit.notes + fit_notes(result, float(arr.max()))
    )
    limit = prior.max_positions if prior is not None else None
    result.warnings += [
        f"context {c:g} exceeds the model's maximum of {limit} positions: no request holds that many tokens"
        for c in asked or []
        if limit and c > limit
    ]
    return result
