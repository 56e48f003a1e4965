"""predict and advise: fitting measured points."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
from tokenroof.errors import TokenroofError
from tokenroof.stepmodel import mean_context_tokens


def table_and_prior(
    files: list[Path],
    model: str | None,
    hardware: str | None,
    dtype: str,
    kv_dtype: str | None,
    compute_dtype: str | None,
    tp: int,
    context: float | None,
    input_len: float | None,
    output_len: float | None,
    decode_only: bool,
    flags_are_target: bool = False,
) -> tuple[Any, Any]:
    """The measured table, and the physics prior when both --model and --hardware are given (None: data only).

    The prior's context is --context, else the mean of the table's context_tokens column, else from the lengths
    (the flags', else the table's): never a silent 0 (Workload.from_table raises). With `flags_are_target` (advise
    asking about a workload) the lengths the table states win, and the flags only stand in for lengths it lacks.
    """
    from tokenroof.measurements import read_table
    from tokenroof.predict import Workload, prior_from_specs
    from tokenroof.specs import Precision, load_hardware, load_model

    if (model is None) != (hardware is None):
        raise TokenroofError("give both --model and --hardware for the physics prior (or neither for data only)")
    table = read_table(files)
    if model is None or hardware is None:
        return table, None
    if flags_are_target and (table.semantics.mean_context is not None or table.context_tokens is not None):
        input_len = output_len = None
    workload = Workload.from_table(table, context, input_len, output_len, decode_only)
    precision = Precision.create(dtype, kv_dtype, compute_dtype)
    return table, prior_from_specs(load_model(model), load_hardware(hardware), precision, workload, tp)


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
    from tokenroof.predict import predict_table

    table, prior = table_and_prior(
        files, model, hardware, dtype, kv_dtype, compute_dtype, tp, context, input_len, output_len, decode_only
    )
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
    if (model is None) != (hardware is None):
        raise TokenroofError("give both --model and --hardware (or neither, with a measurement file)")
    if not files and model is None:
        raise TokenroofError("give a measurement file, or --model and --hardware for the first-principles curve")
    if input_len is not None and output_len is not None and not decode_only:
        data = advise_with_prefill(
            files,
            tpot_slo_ms,
            ttft_slo_ms,
            slo_statistic,
            model,
            hardware,
            dtype,
            kv_dtype,
            compute_dtype,
            tp,
            context,
            input_len,
            output_len,
            max_num_batched_tokens,
        )
    else:
        if ttft_slo_ms is not None:
            raise TokenroofError("--ttft-slo-ms needs --input-len and --output-len (the prompts decide TTFT)")
        data = advise_decode_only(
            files,
            tpot_slo_ms,
            model,
            hardware,
            dtype,
            kv_dtype,
            compute_dtype,
            tp,
            context,
            input_len,
            output_len,
            decode_only,
            samples,
        )
    finish(data, render.advice, json_output)


def advise_with_prefill(
    files: list[Path] | None,
    tpot_slo_ms: float,
    ttft_slo_ms: float | None,
    statistic: str,
    model: str | None,
    hardware: str | None,
    dtype: str,
    kv_dtype: str | None,
    compute_dtype: str | None,
    tp: int,
    context: float | None,
    input_len: float,
    output_len: float,
    max_num_batched_tokens: int | None,
) -> dict[str, Any]:
    """advise from the scheduler: the fitted (portable) or first-principles step model, a replica kept full."""
    from tokenroof.cli.serving import kv_pool_tokens
    from tokenroof.saturation import advise_cap
    from tokenroof.simulate import Lengths

    notes: list[str] = []
    if files:
        from tokenroof.fit import fit_table
        from tokenroof.travel import portable

        table, prior = table_and_prior(
            files, model, hardware, dtype, kv_dtype, compute_dtype, tp, context, input_len, output_len, False, True
        )
        travelling = portable(fit_table(table, prior, n_samples=0), table)
        sm, notes = travelling.step_model, list(table.warnings)
        notes += travelling.notes(mean_context_tokens(input_len, output_len))
        source = f"fitted to {table.source}, run on simulate's scheduler"
    else:
        from tokenroof.roofline import step_model_from_specs
        from tokenroof.specs import Precision, load_hardware, load_model

        assert model is not None and hardware is not None
        precision = Precision.create(dtype, kv_dtype, compute_dtype)
        sm = step_model_from_specs(load_model(model), load_hardware(hardware), precision, tp)
        source = f"first principles: {model} on {hardware} ×{tp}, run on simulate's scheduler"
    kv = kv_pool_tokens(model, hardware, dtype, kv_dtype, compute_dtype, tp)
    lengths = Lengths(round(input_len)), Lengths(round(output_len))
    result = advise_cap(sm, *lengths, tpot_slo_ms, ttft_slo_ms, statistic, kv, max_num_batched_tokens, source=source)
    result.warnings = notes + result.warnings
    return result.to_dict()


def advise_decode_only(
    files: list[Path] | None,
    tpot_slo_ms: float,
    model: str | None,
    hardware: str | None,
    dtype: str,
    kv_dtype: str | None,
    compute_dtype: str | None,
    tp: int,
    context: float | None,
    input_len: float | None,
    output_len: float | None,
    decode_only: bool,
    samples: int,
) -> dict[str, Any]:
    """advise from the decode step time alone (no prompts in the steps): the fitted curve or first principles."""
    from tokenroof.advise import advise as advise_step_time

    if files:
        from tokenroof.fit import fit_table

        table, prior = table_and_prior(
            files, model, hardware, dtype, kv_dtype, compute_dtype, tp, context, input_len, output_len, decode_only
        )
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
    from tokenroof.roofline import max_batch_by_memory, step_model_from_specs
    from tokenroof.specs import Precision, load_hardware, load_model

    assert model is not None and hardware is not None
    spec, chip = load_model(model), load_hardware(hardware)
    precision = Precision.create(dtype, kv_dtype, compute_dtype)
    ctx = context if context is not None else mean_context_tokens(input_len or 0, output_len or 0) or 1024.0
    sm = step_model_from_specs(spec, chip, precision, tp)
    result = advise_step_time(
        sm,
        tpot_slo_ms,
        ctx,
        max_batch_by_memory(spec, chip, precision, ctx, tp),
        (),
        f"first principles: {spec.name} on {chip.name} ×{tp}, context {ctx:g}, the decode step time (no prompts in "
        "the steps; give --input-len and --output-len for the scheduler's answer)",
    )
    return result.to_dict()
