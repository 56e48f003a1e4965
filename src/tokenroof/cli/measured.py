"""predict and advise: fitting measured points."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tokenroof import render
from tokenroof.cli import (
    ComputeOpt,
    ContextOpt,
    DecodeOnlyOpt,
    DtypeOpt,
    InputLenOpt,
    JsonOpt,
    KvDtypeOpt,
    OptHardware,
    OptModel,
    OutputLenOpt,
    PlotOpt,
    TpOpt,
    app,
    err,
    finish,
    handle_errors,
    parse_numbers,
)
from tokenroof.deployment import Physics
from tokenroof.errors import TokenroofError

if TYPE_CHECKING:
    from tokenroof.fit import Prior
    from tokenroof.measurements import MeasurementTable
    from tokenroof.predict import Workload


def table_and_prior(
    files: list[Path], physics: Physics, flags: Workload, flags_are_target: bool = False
) -> tuple[MeasurementTable, Prior | None]:
    """The measured table, and the physics prior when the model and hardware are known (None: data only).

    The prior's context is --context, else the mean of the table's context_tokens column, else from the lengths
    (the flags', else the table's): never a silent 0 (Workload.from_table raises). With `flags_are_target` (advise
    asking about a workload) the lengths the table states win, and the flags only stand in for lengths it lacks.
    """
    from tokenroof.measurements import read_table
    from tokenroof.predict import Workload

    table = read_table(files)
    if not physics.known:
        return table, None
    input_len, output_len = flags.input_len, flags.output_len
    if flags_are_target and (table.semantics.mean_context is not None or table.context_tokens is not None):
        input_len = output_len = None
    workload = Workload.from_table(table, flags.context_tokens, input_len, output_len, flags.decode_only)
    return table, physics.prior(workload)


@app.command()
@handle_errors
def predict(
    files: Annotated[list[Path], typer.Argument(help="Measurement CSV, or vllm bench serve / GuideLLM JSON files.")],
    batch: Annotated[str, typer.Option(help="Batches to predict: '256 512' or '256,512' (fractional allowed).")],
    model: OptModel = None,
    hardware: OptHardware = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    context: ContextOpt = None,
    input_len: InputLenOpt = None,
    output_len: OutputLenOpt = None,
    decode_only: DecodeOnlyOpt = False,
    critical_batch: Annotated[float | None, typer.Option(help="Assert the compute roof (knee) at this batch.")] = None,
    roof_tok_s: Annotated[float | None, typer.Option(help="Assert the throughput asymptote (tok/s).")] = None,
    samples: Annotated[int, typer.Option(help="Samples for the 90% intervals.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed for the interval samples.")] = 0,
    save_model: Annotated[
        Path | None,
        typer.Option(help="Write the fitted step model (and the workload it was fitted at) for --step-model."),
    ] = None,
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Fit measured points and predict TPOT and throughput at other batches, with 90% intervals."""
    from tokenroof.predict import Workload, predict_table

    physics = Physics(model, hardware, dtype, kv_dtype, compute_dtype, tp)
    table, prior = table_and_prior(files, physics, Workload(context, input_len, output_len, decode_only))
    result = predict_table(
        table, parse_numbers(batch, "--batch"), prior, critical_batch, roof_tok_s, max(samples, 10), seed
    )
    if save_model is not None:
        save_fitted(result, save_model)
    from tokenroof.plots import plot_prediction

    finish(result.to_dict(), render.prediction, json_output, plot, lambda path: plot_prediction(result, path))


def save_fitted(result: Any, path: Path) -> None:
    """predict --save-model: the fitted step model, its KV reads and prompt share split out where a prior is known."""
    from tokenroof.travel import portable

    travelling = portable(result.fit, result.table)
    try:
        path.write_text(travelling.to_json())
    except OSError as exc:
        raise TokenroofError(f"{path}: cannot write ({exc.strerror})") from None
    err.print(f"wrote {path} (use it with --step-model)", highlight=False)


@app.command()
@handle_errors
def advise(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Measurements to fit (or give --model/--hardware alone for the first-principles curve)."),
    ] = None,
    tpot_slo_ms: Annotated[float, typer.Option(help="TPOT target in ms per output token.")] = 50.0,
    ttft_slo_ms: Annotated[
        float | None, typer.Option(help="TTFT target in ms (with --input-len/--output-len: the scheduler's answer).")
    ] = None,
    slo_statistic: Annotated[
        str, typer.Option(help="Which statistic the targets bound: mean, p50, p90 or p99 (with the lengths).")
    ] = "p99",
    model: OptModel = None,
    hardware: OptHardware = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    context: ContextOpt = None,
    input_len: InputLenOpt = None,
    output_len: OutputLenOpt = None,
    decode_only: DecodeOnlyOpt = False,
    max_num_batched_tokens: Annotated[int | None, typer.Option(help="Token budget per step (chunked prefill).")] = None,
    samples: Annotated[int, typer.Option(help="Samples for the cap's interval.")] = 200,
    json_output: JsonOpt = False,
) -> None:
    """The largest batch cap (max_num_seqs) that meets a TPOT (and TTFT) target, and the flags to set it.

    With --input-len and --output-len the answer comes from the scheduler simulate uses (a replica kept full at each
    cap, prefill included); without, from the decode step time alone."""
    from tokenroof.predict import Workload

    physics = Physics(model, hardware, dtype, kv_dtype, compute_dtype, tp)
    if not files and not physics.known:
        raise TokenroofError("give a measurement file, or --model and --hardware for the first-principles curve")
    flags = Workload(context, input_len, output_len, decode_only)
    if input_len is not None and output_len is not None and not decode_only:
        targets = Targets(tpot_slo_ms, ttft_slo_ms, slo_statistic)
        data = advise_with_prefill(files, physics, flags, targets, max_num_batched_tokens)
    else:
        if ttft_slo_ms is not None:
            raise TokenroofError("--ttft-slo-ms needs --input-len and --output-len (the prompts decide TTFT)")
        data = advise_decode_only(files, physics, flags, tpot_slo_ms, samples)
    finish(data, render.advice, json_output)


@dataclass(frozen=True)
class Targets:
    tpot_slo_ms: float
    ttft_slo_ms: float | None
    statistic: str


def advise_with_prefill(
    files: list[Path] | None, physics: Physics, flags: Workload, targets: Targets, max_num_batched_tokens: int | None
) -> dict[str, Any]:
    """advise from the scheduler: the fitted (portable) or first-principles step model, a replica kept full."""
    from tokenroof.saturation import advise_cap
    from tokenroof.simulate import Lengths

    assert flags.input_len is not None and flags.output_len is not None
    notes: list[str] = []
    if files:
        from tokenroof.fit import fit_table
        from tokenroof.travel import portable

        table, prior = table_and_prior(files, physics, flags, flags_are_target=True)
        travelling = portable(fit_table(table, prior, n_samples=0), table)
        sm, notes = travelling.step_model, list(table.warnings)
        notes += travelling.notes(flags.mean_context)
        source = f"fitted to {table.source}, run on simulate's scheduler"
    else:
        sm = physics.step_model()
        source = f"first principles: {physics.label()}, run on simulate's scheduler"
    lengths = Lengths(round(flags.input_len)), Lengths(round(flags.output_len))
    result = advise_cap(
        sm,
        *lengths,
        targets.tpot_slo_ms,
        targets.ttft_slo_ms,
        targets.statistic,
        physics.kv_pool_tokens(),
        max_num_batched_tokens,
        source=source,
    )
    result.warnings = notes + result.warnings
    return result.to_dict()


def advise_decode_only(
    files: list[Path] | None, physics: Physics, flags: Workload, tpot_slo_ms: float, samples: int
) -> dict[str, Any]:
    """advise from the decode step time alone (no prompts in the steps): the fitted curve or first principles."""
    from tokenroof.advise import advise as advise_step_time

    if files:
        from tokenroof.fit import fit_table

        table, prior = table_and_prior(files, physics, flags)
        fit = fit_table(table, prior, n_samples=max(samples, 10))
        result = advise_step_time(
            fit.as_step_time(),
            tpot_slo_ms,
            0.0,
            int(fit.curve.cap) if fit.curve.cap is not None else None,
            fit.sample_models(),
            f"fitted to {table.source} ({fit.method}); the decode step time (no prompts in the steps)",
        )
        result.warnings = list(table.warnings) + result.warnings
        return result.to_dict()
    ctx = flags.mean_context or 1024.0
    result = advise_step_time(
        physics.step_model(),
        tpot_slo_ms,
        ctx,
        physics.max_batch(ctx),
        (),
        f"first principles: {physics.label()}, context {ctx:g}, the decode step time (no prompts in the steps; give "
        "--input-len and --output-len for the scheduler's answer)",
    )
    return result.to_dict()
