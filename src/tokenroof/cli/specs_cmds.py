"""roofline, models, hardware: first principles and the presets."""

from __future__ import annotations

from typing import Annotated

import typer

from tokenroof.cli import render
from tokenroof.cli.common import (
    AcceptanceOpt,
    BudgetOpt,
    ComputeOpt,
    DtypeOpt,
    EagerOpt,
    EngineOpt,
    GpuCostOpt,
    HardwareOpt,
    JsonOpt,
    KvDtypeOpt,
    MemoryFractionOpt,
    ModelOpt,
    PlotOpt,
    SpeculativeOpt,
    TpOpt,
    app,
    finish,
    handle_errors,
    out,
    parse_numbers,
)
from tokenroof.cli.common import speculative_config as speculative_config_of
from tokenroof.errors import TokenroofError


@app.command()
@handle_errors
def roofline(
    model: ModelOpt,
    hardware: HardwareOpt,
    batch: Annotated[str, typer.Option(help="Batch sizes: '1,8,32' or '1 8 32'.")] = "1,2,4,8,16,32,64,128,256,512",
    context: Annotated[
        str | None,
        typer.Option(
            show_default="1024, or the mean context of --input-len/--output-len",
            help="Tokens in each sequence's KV cache: '8192', or several to compare: '8192,32768'.",
        ),
    ] = None,
    input_len: Annotated[
        float | None,
        typer.Option(
            help="Prompt tokens per request: with --output-len, TPOT as a benchmark of that workload counts it "
            "(online: arriving prompts' prefill included, as the engine schedules it) at its mean context."
        ),
    ] = None,
    output_len: Annotated[float | None, typer.Option(help="Output tokens per request (with --input-len).")] = None,
    batching: Annotated[
        str,
        typer.Option(
            help="With --input-len/--output-len: 'online' (continuous batching at each running batch, as `vllm "
            "bench serve` loads a server) or 'static' (the batch prefilled together, then decoded to the end: "
            "adds the end-to-end time per output token)."
        ),
    ] = "online",
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    engine: EngineOpt = None,
    enforce_eager: EagerOpt = False,
    bandwidth_efficiency: Annotated[
        float | None,
        typer.Option(
            help="Achieved fraction of peak memory bandwidth (default: the engine profile's, or the hardware file's)."
        ),
    ] = None,
    compute_efficiency: Annotated[
        float | None,
        typer.Option(
            help="Achieved fraction of dense peak FLOP/s (default: the engine profile's, or the hardware file's)."
        ),
    ] = None,
    overhead_ms: Annotated[
        float | None,
        typer.Option(help="Fixed per-step overhead in ms (default: the engine profile's, or the hardware file's)."),
    ] = None,
    gpu_memory_utilization: MemoryFractionOpt = None,
    prompt_tokens: Annotated[float | None, typer.Option(help="Also estimate TTFT for a prompt this long.")] = None,
    max_num_batched_tokens: BudgetOpt = None,
    speculative_config: SpeculativeOpt = None,
    acceptance_rate: AcceptanceOpt = None,
    gpu_cost_per_hour: GpuCostOpt = None,
    prefix_len: Annotated[
        int,
        typer.Option(
            "--prefix-len",
            help="With --prompt-tokens (or --input-len): its first tokens a prefix cache holds; TTFT computes the "
            "rest.",
        ),
    ] = 0,
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """First-principles decode roofline: TPOT, throughput and the binding resource at each batch, with the engine
    profile's spread against published curves as an interval."""
    from dataclasses import replace

    from tokenroof.model.analysis import BATCHINGS, DecodeWorkload, analyze_roofline
    from tokenroof.model.roofline import default_efficiencies
    from tokenroof.specs import Precision, load_hardware, load_model
    from tokenroof.specs.engines import load_engine

    spec, hw, profile = load_model(model), load_hardware(hardware), load_engine(engine)
    profile = profile.enforce_eager() if enforce_eager else profile
    workload, long_context = None, False  # long_context: vLLM V0 chunks prefill past 32K positions
    if (input_len is None) != (output_len is None):
        raise TokenroofError("--input-len and --output-len go together: give both, or neither")
    if batching not in BATCHINGS:
        raise TokenroofError(f"--batching must be one of {', '.join(BATCHINGS)}, got {batching!r}")
    if input_len is not None and output_len is not None:
        if prompt_tokens is not None:
            raise TokenroofError(
                "give --prompt-tokens or --input-len/--output-len, not both: the workload's prompts are --input-len "
                "long, and its TTFT is theirs"
            )
        if context is not None:
            raise TokenroofError(
                "give --context or --input-len/--output-len, not both: the lengths set the context (their mean)"
            )
        long_context = speculative_config is None and profile.chunks_prefill_for(spec.max_position_embeddings)
        chunked = profile.prefill == "chunked" or long_context
        # the prompt budget given, else the named engine's default, as simulate runs it (whole prompts: none named)
        budget = max_num_batched_tokens if chunked else None
        if budget is None and engine is not None and chunked:
            from tokenroof.fit.physics import Physics

            named = Physics(model, hardware, dtype, kv_dtype, compute_dtype, tp, engine, enforce_eager).prompt_budget()
            budget = named if isinstance(named, int) else None
        workload = DecodeWorkload(input_len, output_len, batching == "static", chunked, budget)
    elif batching != "online":
        raise TokenroofError("--batching describes a workload: give --input-len and --output-len with it")
    if max_num_batched_tokens is not None:
        why = (
            "give --input-len/--output-len with it"
            if workload is None
            else "a static batch is prefilled before it decodes"
            if workload.static
            else f"{engine or 'this engine'} prefills prompts in steps of their own, whole"
            if not workload.chunked
            else None
        )
        if why is not None:
            raise TokenroofError(
                f"--max-num-batched-tokens budgets the prompts an online workload's decode steps carry: {why}"
            )
    precision = Precision.create(
        dtype, kv_dtype, compute_dtype, checkpoint=spec.quantization, engine_kv=profile.kv_dtype_by_weights
    )
    eff = default_efficiencies(hw, precision, profile, serving=workload is None or not workload.static)
    given = {"bandwidth": bandwidth_efficiency, "compute": compute_efficiency}
    given["overhead_s"] = None if overhead_ms is None else overhead_ms / 1e3
    eff = replace(eff, **{k: v for k, v in given.items() if v is not None})
    batches = parse_numbers(batch, "--batch")
    contexts = [workload.mean_context] if workload is not None else parse_numbers(context or "1024", "--context")
    speculative = speculative_config_of(speculative_config, acceptance_rate)
    results = [
        analyze_roofline(
            spec,
            hw,
            precision,
            batches,
            ctx,
            tp,
            eff,
            gpu_memory_utilization,
            prompt_tokens,
            profile,
            workload,
            speculative,
            gpu_cost_per_hour,
            prefix_len,
        )
        for ctx in contexts
    ]
    if not results:
        raise TokenroofError("--context needs at least one number")
    from tokenroof.model.analysis import by_context
    from tokenroof.report.plots import plot_roofline

    data = results[0].to_dict() if len(results) == 1 else by_context(results)
    budget = profile.max_num_batched_tokens
    if workload is not None and long_context:
        data["warnings"].append(
            f"prompts share the decode steps: {profile.key} turns chunked prefill on by default for a model of "
            f"{spec.max_position_embeddings:,} positions (past 32K; vLLM 0.5.5 on), not its prefill steps of their own"
        )
    prompt = input_len or 0
    if workload is not None and not workload.chunked and budget is not None and prompt > budget:
        data["warnings"].append(  # TGI's --max-batch-prefill-tokens: the server refuses such a prompt
            f"a {prompt:,.0f}-token prompt is more than a {profile.key} prefill step holds by default ({budget:,} "
            "tokens; TGI's --max-batch-prefill-tokens): that server refuses it, and the TTFT here prices it whole"
        )
    table = render.roofline if len(results) == 1 else render.roofline_contexts
    finish(data, table, json_output, plot, lambda path: plot_roofline(results, path))


@app.command("models")
def list_models_cmd() -> None:
    """List the model presets."""
    from tokenroof.specs import list_models, load_model

    render.model_list(out, [load_model(name) for name in list_models()])


@app.command("hardware")
def list_hardware_cmd() -> None:
    """List the hardware presets with their dense peaks and sources."""
    from tokenroof.specs import list_hardware, load_hardware

    render.hardware_list(out, [load_hardware(name) for name in list_hardware()])
