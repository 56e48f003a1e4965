"""The physics prior of a fit: the workload the measurements were taken under, and the floors and centres the
model × hardware × precision put on the fitted terms (DESIGN.md: the prior)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.fit.core import Prior
from tokenroof.model import roofline as rl
from tokenroof.model.stepmodel import StepModel, mean_context_tokens
from tokenroof.specs import HardwareSpec, ModelSpec, Precision

if TYPE_CHECKING:
    from tokenroof.io.measurements import MeasurementTable
    from tokenroof.specs.engines import EngineProfile

# Spread (log) of the per-sequence slope that measured efficiencies imply: the calibrated first-principles
# step model missed this CPU's measured TPOT by 5-35% (median over the batches of a config) in
# benchmarks/local_roofline.py, so a factor of e^0.3 ≈ 1.35 is one standard deviation.
SIGMA_LOG_MEASURED_SLOPE = 0.3


@dataclass(frozen=True)
class MeasuredWorkload:
    """What the measured server was doing: context per sequence and whether TPOT carries prefill."""

    context_tokens: float | None = None
    input_len: float | None = None
    output_len: float | None = None
    decode_only: bool = False
    static: bool = False  # a static batch: prompts prefilled together before decoding, not during it

    @classmethod
    def from_table(
        cls,
        table: MeasurementTable,
        context: float | None = None,
        input_len: float | None = None,
        output_len: float | None = None,
        decode_only: bool = False,
    ) -> MeasuredWorkload:
        """The workload behind a table: the flags, else the table's context column or its stated lengths.

        Raises when nothing gives the context: the physics prior's KV reads and memory cap depend on it, and a
        silent 0 would put the cap at hundreds of thousands of sequences.
        """
        sem = table.semantics
        input_len = input_len if input_len is not None else sem.input_len
        output_len = output_len if output_len is not None else sem.output_len
        if context is None and table.context_tokens is not None:
            context = float(table.context_tokens.mean())
        if context is None and (input_len is None or output_len is None):
            raise ParameterError(
                f"{table.source or 'the table'}: the physics prior needs the mean context: give {{}} N "
                "(the mean KV length per sequence), or {} and {}, or measurements that carry "
                "them (a context_tokens column, '# input_len=… output_len=…', vLLM/GuideLLM result files)",
                "context",
                "input_len",
                "output_len",
            )
        for name, value in (("context", context), ("input length", input_len), ("output length", output_len)):
            if value is not None and not (math.isfinite(value) and value >= 1):
                raise TokenroofError(f"the {name} must be a finite number of tokens ≥ 1, got {value:g}")
        static = sem.batch_kind == "static"
        # a static batch's TPOT or ITL starts after the batch's prefill: only an end-to-end TPOT carries it
        excludes_prompts = sem.tpot_kind == "step" or (static and sem.tpot_kind in ("tpot", "itl"))
        return cls(context, input_len, output_len, decode_only or excludes_prompts, static=static)

    @property
    def mean_context(self) -> float:
        """Average KV-cache length per sequence during decode."""
        if self.context_tokens is not None:
            return self.context_tokens
        if self.input_len is not None and self.output_len is not None:
            return mean_context_tokens(self.input_len, self.output_len)
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
    workload: MeasuredWorkload,
    tp: int = 1,
    eff: rl.Efficiencies | None = None,
    memory_utilization: float = 0.9,
    engine: EngineProfile | None = None,
    of_free: bool = False,
) -> Prior:
    """Floors at 100% of the peaks and prior centres at the efficiencies: `eff`, else the engine profile's (the
    default engine when None) under the hardware file's measured ones (roofline.default_efficiencies). The profile's
    HTTP-serving cost per sequence counts when the workload was online (not a static batch, not pure decode)."""
    serving = not (workload.static or workload.decode_only)
    eff = eff or rl.default_efficiencies(hardware, precision, engine, serving)
    peak = rl.step_model_from_specs(
        model,
        hardware,
        precision,
        tp,
        rl.Efficiencies.at_peak(eff.allreduce_latency_s, eff.allreduce_step_latency_s),
    )
    ctx = float(model.effective_context(workload.mean_context))  # sliding-window layers hold their window

    def prefill_per_token_s(sm: StepModel) -> float:
        """Compute per prompt token (matmuls, and attention over half the prompt on average)."""
        prompt = workload.input_len or 0.0
        return sm.prompt_compute_s(prompt) / prompt if prompt > 0 else sm.t_compute_s

    # below the knee each added sequence costs its KV traffic, the compute the GEMMs do not hide, its prompt
    central = rl.step_model_from_specs(model, hardware, precision, tp, eff)
    slope_center = (
        central.memory_time_per_seq_s(ctx)
        + (1 - eff.overlap) * central.compute_time_per_seq_s(ctx)
        + workload.prefill_ratio * prefill_per_token_s(central)
    )
    # continuous batching: arriving prompts share each step's GEMMs (they move the knee); a static batch is
    # prefilled once before decoding, which an end-to-end TPOT spreads over the steps as cost per sequence
    prefill_peak = workload.prefill_ratio * prefill_per_token_s(peak)
    # paged KV caches (vLLM, SGLang, TGI) hold each sequence's current length, on average the mean context
    reserved = rl.server_reserved_bytes(model, hardware, precision, tp, engine.reserve if engine else None)
    context = workload.mean_context
    # of_free: the fraction is of the memory the weights leave (TensorRT-LLM, LMDeploy): the pool it sizes
    cap = rl.max_batch_by_memory(model, hardware, precision, context, tp, memory_utilization, reserved, of_free)
    return Prior(
        weights_floor=peak,
        compute_floor_s=float(peak.compute_time_per_seq_s(ctx)),
        per_seq_floor_s=float(peak.memory_time_per_seq_s(ctx)) + (prefill_peak if workload.static else 0.0),
        prefill_floor_s=0.0 if workload.static else prefill_peak,
        fixed_floor_s=peak.t_fixed_s,
        bandwidth_center=eff.bandwidth,
        compute_center=eff.compute,
        flops_per_token=float(rl.matmul_flops(model, 1.0, tp)),
        peak_flops_per_s=hardware.peak_for(precision.compute_dtype),
        label=f"{model.name} on {hardware.key or hardware.name} ×{tp} ({precision.compute_dtype})"
        + (f", engine {engine.key}" if engine is not None else ""),
        max_batch=cap if cap > 0 else None,
        overlap=eff.overlap,
        slope_center_s=float(slope_center),
        sigma_log_slope=SIGMA_LOG_MEASURED_SLOPE if hardware.efficiencies else None,
        context_tokens=ctx,
        prefill_ratio=0.0 if workload.static else workload.prefill_ratio,
        layer_windows=tuple(model.layer_windows),
        max_positions=model.max_position_embeddings,
        kv_bandwidth_ratio=(eff.kv_bandwidth or eff.bandwidth) / eff.bandwidth,
    )
