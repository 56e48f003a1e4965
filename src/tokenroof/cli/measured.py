"""predict and advise: fitting measured points."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tokenroof.cli import render
from tokenroof.cli.common import (
    AcceptanceOpt,
    BudgetOpt,
    ComputeOpt,
    DecodeOnlyOpt,
    DtypeOpt,
    EagerOpt,
    EngineOpt,
    FitOpt,
    InputDistOpt,
    InputLenOpt,
    JsonOpt,
    KvDtypeOpt,
    MemoryFractionOpt,
    NumPrefixesOpt,
    OptHardware,
    OptModel,
    OutputDistOpt,
    OutputLenOpt,
    PlotOpt,
    PrefixCachingOpt,
    PrefixLenOpt,
    SpeculativeOpt,
    SpreadOpt,
    TpOpt,
    app,
    err,
    finish,
    handle_errors,
    parse_numbers,
    shared_prefix,
    spread_of,
)
from tokenroof.cli.common import speculative_config as speculative_config_of
from tokenroof.errors import TokenroofError
from tokenroof.fit.physics import Physics

if TYPE_CHECKING:
    pass


@app.command()
@handle_errors
def predict(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Measurement CSV; vllm bench serve, GuideLLM, AIPerf or GenAI-Perf JSON, SGLang bench_serving "
            "JSON Lines, LLMPerf results (a run's _summary.json or its folder); tokenroof bench --out folders; or "
            "their folders (or --fit, as simulate and plan spell it)."
        ),
    ] = None,
    fit: FitOpt = None,
    batch: Annotated[
        str | None,
        typer.Option(
            help="Batches to predict: '256 512' or '256,512' (fractional allowed); with --save-model alone, the "
            "measured batches."
        ),
    ] = None,
    model: OptModel = None,
    hardware: OptHardware = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    engine: EngineOpt = None,
    gpu_memory_utilization: MemoryFractionOpt = None,
    context: Annotated[
        str | None,
        typer.Option(
            help="Contexts to predict at, '8192,32768' (tokens in each sequence's KV cache): a table that states its "
            "context (a context_tokens column, '# input_len=… output_len=…') moves to each; a table that does not "
            "takes one value, the context it was measured at."
        ),
    ] = None,
    input_len: InputLenOpt = None,
    output_len: OutputLenOpt = None,
    decode_only: DecodeOnlyOpt = False,
    critical_batch: Annotated[float | None, typer.Option(help="Assert the compute roof (knee) at this batch.")] = None,
    roof_tok_s: Annotated[float | None, typer.Option(help="Assert the throughput asymptote (tok/s).")] = None,
    samples: Annotated[int, typer.Option(help="Samples for the 90% intervals.")] = 200,
    seed: Annotated[int, typer.Option(min=0, help="Seed for the interval samples.")] = 0,
    save_model: Annotated[
        Path | None,
        typer.Option(help="Write the fitted step model (and the workload it was fitted at) for --step-model."),
    ] = None,
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Fit measured points and predict TPOT and throughput at other batches, with 90% intervals."""
    from tokenroof.fit.predict import MeasuredWorkload, predict_table, prior_for, split_contexts, unread_context
    from tokenroof.io.measurements import read_table

    physics = Physics(  # measured: no --enforce-eager
        model, hardware, dtype, kv_dtype, compute_dtype, tp, engine, memory_fraction_given=gpu_memory_utilization
    )
    physics.refuse_eager_for_measurements()
    files = [*(files or []), *(fit or [])]
    if not files:
        raise TokenroofError("give the measurements to fit: files, or --fit FILE (repeat it for several)")
    table = read_table(files)
    if decode_only:  # TPOT of pure decode steps, whatever the file's own kinds say
        from tokenroof.io.measurements import as_decode_only

        table = as_decode_only(table)
    table, input_len, output_len = files_lengths_win(table, input_len, output_len)
    measured_at, contexts = split_contexts(table, parse_numbers(context, "--context") if context else None)
    prior = prior_for(table, physics, MeasuredWorkload(measured_at, input_len, output_len, decode_only))
    lengths = (input_len, output_len) if input_len is not None and output_len is not None else None
    if batch is None and save_model is None:
        raise TokenroofError("give --batch, the batches to predict (or --save-model to save the fitted model)")
    batches = parse_numbers(batch, "--batch") if batch is not None else sorted({float(b) for b in table.batch})
    result = predict_table(
        table,
        batches,
        prior,
        critical_batch,
        roof_tok_s,
        max(samples, 10),
        seed,
        contexts,
    )
    from tokenroof.serving.replay import with_scheduler

    with_scheduler(result, physics, lengths)  # an online table: the scheduler's model replays it, and answers
    result.warnings += unread_physics_flags(model, hardware, dtype, kv_dtype, compute_dtype, tp)
    result.warnings += unread_context(measured_at, prior)
    if lengths is not None and result.serving is None and not physics.known and result.table.ttft_ms is None:
        result.warnings.append(  # given, they had changed nothing and the answer had asked for them
            f"--input-len {lengths[0]:g} and --output-len {lengths[1]:g} change nothing here: with no TTFT in the "
            "table and no --model/--hardware nothing prices a prompt, so the measured prefill stays in the "
            "per-sequence terms"
        )
    if save_model is not None:
        save_fitted(result, save_model, physics.kv_pool_tokens() if physics.known else None)
    from tokenroof.report.plots import plot_prediction

    finish(result.to_dict(), render.prediction, json_output, plot, lambda path: plot_prediction(result, path))


def unread_physics_flags(
    model: str | None, hardware: str | None, dtype: str | None, kv_dtype: str | None, compute_dtype: str | None, tp: int
) -> list[str]:
    """Flags that describe the physics prior, given without --model and --hardware: nothing reads them (they had
    changed nothing and said nothing)."""
    if model is not None or hardware is not None:
        return []
    given = [
        flag
        for flag, shown in (
            (f"--tp {tp}", tp != 1),
            (f"--dtype {dtype}", dtype not in (None, "bf16")),
            (f"--kv-dtype {kv_dtype}", kv_dtype is not None),
            (f"--compute-dtype {compute_dtype}", compute_dtype is not None),
        )
        if shown
    ]
    if not given:
        return []
    return [f"without --model and --hardware nothing here reads {', '.join(given)} (the physics prior's flags)"]


def files_lengths_win(
    table: Any, input_len: float | None, output_len: float | None
) -> tuple[Any, float | None, float | None]:
    """The measured workload's lengths where the files state them (vLLM's, GuideLLM's, LLMPerf's results, a CSV's
    '# input_len=… output_len=…'): the flags describe the measured workload only where the files do not, and flags
    that differ from the files' are said not used (the prior and the scheduler's replay both take the files')."""
    sem = table.semantics
    if sem.input_len is None or sem.output_len is None or (input_len is None and output_len is None):
        return table, input_len, output_len
    given = {"--input-len": (input_len, sem.input_len), "--output-len": (output_len, sem.output_len)}
    differ = [f"{flag} {value:g}" for flag, (value, files) in given.items() if value is not None and value != files]
    if differ:
        note = (
            f"{' and '.join(differ)} not used: the files state the lengths they measured ({sem.input_len:g} in / "
            f"{sem.output_len:g} out), which the fit takes; to answer for another workload, give these lengths to "
            "advise, or to simulate and plan with the saved model (--save-model, then --step-model)"
        )
        table = replace(table, warnings=(*table.warnings, note))
    return table, None, None


def save_fitted(result: Any, path: Path, kv_cache_tokens: int | None = None) -> None:
    """predict --save-model: the step model other commands run: fitted on the scheduler to an online table (its
    replay, result.serving), else the decode fit with its KV reads and prompt share split out where a prior is
    known (fit.travel); with the KV pool predict's answers ran with (`kv_cache_tokens`, from --model/--hardware),
    which a run of the saved model keeps unless told otherwise."""
    from tokenroof.fit.travel import portable
    from tokenroof.serving.replay import travelling_of

    if result.serving is not None:
        travelling = travelling_of(result.serving, result.fit, result.table)
    else:
        travelling = portable(result.fit, result.table)
    travelling = replace(travelling, kv_cache_tokens=kv_cache_tokens)
    try:
        path.write_text(travelling.to_json())
    except OSError as exc:
        raise TokenroofError(f"{path}: cannot write ({exc.strerror})") from None
    err.print(f"wrote {path} (use it with --step-model)", highlight=False)


ADVISE_LENGTHS = (
    "{} tokens per request of the workload to advise for (the scheduler's answer; default: the lengths the files "
    "state, where they state them)."
)


@app.command()
@handle_errors
def advise(
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Measurements to fit, or --fit as simulate and plan spell it (or give --model/--hardware alone for "
            "the first-principles curve)."
        ),
    ] = None,
    fit: FitOpt = None,
    tpot_slo_ms: Annotated[float, typer.Option(help="TPOT target in ms per output token.")] = 50.0,
    ttft_slo_ms: Annotated[
        float | None, typer.Option(help="TTFT target in ms (with --input-len/--output-len: the scheduler's answer).")
    ] = None,
    slo_statistic: Annotated[
        str | None,
        typer.Option(
            help="Which statistic the targets bound: mean, p50, p90 or p99 (default p99 with --input-len/--output-len;"
            " the decode-only answer is the mean step time)."
        ),
    ] = None,
    model: OptModel = None,
    hardware: OptHardware = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    engine: EngineOpt = None,
    enforce_eager: EagerOpt = False,
    gpu_memory_utilization: MemoryFractionOpt = None,
    context: Annotated[
        str | None,
        typer.Option(
            help="Contexts to advise at, '8192,32768' (the decode-only answer, one per context): a table that states "
            "its context moves to each; a table that does not takes one value, the context it was measured at. "
            "With --input-len/--output-len one value, the measured table's context when it does not state one."
        ),
    ] = None,
    input_len: Annotated[float | None, typer.Option(help=ADVISE_LENGTHS.format("Prompt"))] = None,
    output_len: Annotated[float | None, typer.Option(help=ADVISE_LENGTHS.format("Output"))] = None,
    decode_only: DecodeOnlyOpt = False,
    max_num_batched_tokens: BudgetOpt = None,
    samples: Annotated[
        int | None,
        typer.Option(help="Samples for the cap's interval (the decode-only answer's; default 200)."),
    ] = None,
    speculative_config: SpeculativeOpt = None,
    acceptance_rate: AcceptanceOpt = None,
    input_dist: InputDistOpt = "fixed",
    output_dist: OutputDistOpt = "fixed",
    spread: SpreadOpt = None,
    prefix_len: PrefixLenOpt = 0,
    num_prefixes: NumPrefixesOpt = 1,
    enable_prefix_caching: PrefixCachingOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """The largest batch cap (max_num_seqs) that meets a TPOT (and TTFT) target, and the flags to set it.

    With --input-len and --output-len (or the lengths the files state, unless --context is given) the answer comes
    from the scheduler simulate uses (a replica kept full at each cap, prefill included); without, from the decode
    step time alone."""
    from tokenroof.fit.predict import MeasuredWorkload
    from tokenroof.serving.advise import Targets, advise_answer
    from tokenroof.serving.simulate import LengthShape

    physics = Physics(
        model, hardware, dtype, kv_dtype, compute_dtype, tp, engine, enforce_eager, gpu_memory_utilization
    )
    contexts = parse_numbers(context, "--context") if context else None
    flags = MeasuredWorkload(
        contexts[0] if contexts and len(contexts) == 1 else None, input_len, output_len, decode_only
    )
    targets = Targets(tpot_slo_ms, ttft_slo_ms, slo_statistic)
    speculative = speculative_config_of(speculative_config, acceptance_rate)
    prefix = shared_prefix(prefix_len, num_prefixes, input_len)
    data = advise_answer(
        [*(files or []), *(fit or [])],
        physics,
        flags,
        targets,
        max_num_batched_tokens,
        samples,
        contexts,
        speculative,
        prefix,
        enable_prefix_caching is not False,
        LengthShape(input_dist, output_dist, spread_of(spread, input_dist, output_dist)),
    )
    if isinstance(data.get("warnings"), list):
        data["warnings"] += unread_physics_flags(model, hardware, dtype, kv_dtype, compute_dtype, tp)
    finish(data, render.advice_contexts if "contexts" in data else render.advice, json_output)
