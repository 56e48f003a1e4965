"""emulate and bench: measuring servers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tokenroof.cli import render
from tokenroof.cli.common import (
    AcceptanceOpt,
    BudgetOpt,
    ComputeOpt,
    DecodeReplicasOpt,
    DtypeOpt,
    EagerOpt,
    EngineOpt,
    FitOpt,
    JsonOpt,
    KvDtypeOpt,
    KvTransferOpt,
    MemoryFractionOpt,
    NumPrefixesOpt,
    OptHardware,
    OptModel,
    PlotOpt,
    PrefillHardwareOpt,
    PrefillReplicasOpt,
    PrefillTpOpt,
    PrefixCachingOpt,
    PrefixLenOpt,
    ReplicasOpt,
    RouterOpt,
    SpeculativeOpt,
    StepModelFileOpt,
    TpOpt,
    app,
    err,
    finish,
    handle_errors,
    parse_numbers,
    progress_bar,
)
from tokenroof.cli.common import speculative_config as speculative_config_of
from tokenroof.errors import TokenroofError
from tokenroof.serving.deployment import Deployment, Physics

DEFAULT_MAX_MODEL_LEN = 32768  # emulate without a model or --max-model-len: the longest request it accepts


@app.command()
@handle_errors
def emulate(
    model: OptModel = None,
    hardware: OptHardware = None,
    fit: FitOpt = None,
    step_model: StepModelFileOpt = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    engine: EngineOpt = None,
    enforce_eager: EagerOpt = False,
    gpu_memory_utilization: MemoryFractionOpt = None,
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            help="Running-batch cap; requests beyond it queue (default: the --engine's own, vLLM V1's 1,024 on GPUs "
            "of 70 GiB or more; else 256)."
        ),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(help="Longest prompt + output accepted (default: the model's positions, else 32,768)."),
    ] = None,
    served_model_name: Annotated[str, typer.Option(help="Model id the server reports.")] = "tokenroof-emulator",
    kv_cache_tokens: Annotated[
        int | None,
        typer.Option(
            help="KV-cache capacity in tokens; sequences are preempted when it fills (default: from --model/--hardware "
            "memory, as simulate; else unlimited)."
        ),
    ] = None,
    max_num_batched_tokens: BudgetOpt = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    read_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds a client may take to send a request's headers, and again its body (408); also how long "
            "an idle keep-alive connection stays open."
        ),
    ] = 30.0,
    speculative_config: SpeculativeOpt = None,
    acceptance_rate: AcceptanceOpt = None,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed of speculation's acceptance draws and of a random router.")
    ] = 0,
    enable_prefix_caching: PrefixCachingOpt = None,
    prefill_replicas: PrefillReplicasOpt = None,
    prefill_tp: PrefillTpOpt = None,
    prefill_hardware: PrefillHardwareOpt = None,
    decode_replicas: DecodeReplicasOpt = None,
    kv_transfer_gb_s: KvTransferOpt = 50.0,
    replicas: ReplicasOpt = 1,
    router: RouterOpt = "least-outstanding",
) -> None:
    """An OpenAI-compatible server whose decode steps take the step model's time (continuous batching)."""
    from tokenroof.serving.emulate.checks import check_port

    check_port(port)
    require_http()
    from tokenroof.serving.emulate.server import Emulator, serve

    physics = Physics(
        model, hardware, dtype, kv_dtype, compute_dtype, tp, engine, enforce_eager, gpu_memory_utilization
    )
    max_num_seqs, cap_default = (max_num_seqs, None) if max_num_seqs is not None else physics.max_num_seqs()
    speculative = speculative_config_of(speculative_config, acceptance_rate)
    dep = Deployment(
        physics,
        fit,
        step_model,
        None,
        None,
        max_num_seqs,
        kv_cache_tokens,
        max_num_batched_tokens,
        speculative=speculative,
        prefix_caching=enable_prefix_caching is not False,
        prefill_replicas=prefill_replicas,
        decode_replicas=decode_replicas,
        kv_transfer_gb_s=kv_transfer_gb_s,
        prefill_tp=prefill_tp,
        prefill_hardware=prefill_hardware,
        max_model_len=max_model_len,
        max_num_seqs_default=cap_default,
    )
    for flag, given in (("--prefill-tp", prefill_tp), ("--prefill-hardware", prefill_hardware)):
        if given is not None and prefill_replicas is None:
            raise TokenroofError(f"{flag} sizes a disaggregated server's prefill pool: give --prefill-replicas too")
    travelling, _ = dep.step_models()
    split = dep.disaggregation()
    if split is not None and (dep.speculative is not None or dep.slot_streams(travelling)):
        raise TokenroofError("a disaggregated emulator runs plain vLLM-like engines: drop --speculative-config")
    sm, kv = travelling.step_model, dep.kv_tokens(travelling)
    max_num_batched_tokens = dep.prompt_budget(travelling)
    per_slot_kv = dep.slot_streams(travelling)
    from tokenroof.serving.capacity import speculation_notes

    for note in [
        *travelling.notes(None),
        *dep.physics.eager_notes(),
        *speculation_notes(dep),
        *dep.budget_notes(travelling),
    ]:
        err.print(f"note: {note}", highlight=False)
    max_model_len = physics.max_model_len(max_model_len) or DEFAULT_MAX_MODEL_LEN
    max_model_len = min(max_model_len, kv or max_model_len)  # a request must fit in the cache on its own
    emulator = Emulator(
        sm,
        max_num_seqs,
        served_model_name,
        max_model_len,
        kv,
        max_num_batched_tokens,
        read_timeout,
        per_slot_kv=per_slot_kv,
        speculation=dep.speculation(),
        seed=seed,
        prefix_caching=dep.server(travelling).prefix_caching,
        separate_prefill=split is None and dep.server(travelling).separate_prefill,
        reserve_output=dep.server(travelling).reserve_output,
        disaggregation=split,
        replicas=replicas,
        router=router,
        power=None if split is not None else physics.power(),  # a split's pools may be other boards: not metered
        tp=tp,
    )
    fleet = f" × {replicas} replicas behind {router}" if replicas > 1 else ""
    if split is not None:  # the pools, and a prefill pool's own step model where it has one
        pool = render.prefill_tp_text(split.to_dict())
        fleet = f", disaggregated: {split.prefill_replicas} prefill{pool} + {split.decode_replicas} decode replicas"
        fleet += f", the prefill pool's steps {split.prefill_model}" if split.prefill_model is not None else ""
    if emulator.power is None and physics.known:
        why = "a disaggregated server's pools may be other boards" if split is not None else "its hardware has no TDP"
        err.print(f"note: /metrics carries no power counters: {why}", highlight=False)
    if emulator.power is not None:
        err.print(
            "note: /metrics carries dcgm-exporter's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION and DCGM_FI_DEV_POWER_USAGE "
            f"for each of its {replicas * tp} board(s), {emulator.power.source}",
            highlight=False,
        )
    err.print(f"emulating {sm} with max_num_seqs={max_num_seqs}{fleet} on http://{host}:{port}", highlight=False)
    serve(emulator, host, port)


def gpu_list(text: str | None) -> tuple[str, ...] | None:
    """`--power-gpus 0,1` (indices or UUIDs, comma-separated) as a tuple; None when not given."""
    if text is None:
        return None
    gpus = tuple(part.strip() for part in text.split(","))
    if not all(gpus):
        raise TokenroofError(f"--power-gpus: give GPU indices or UUIDs separated by commas ('0,1'), got {text!r}")
    return gpus


def require_http() -> None:
    try:
        import aiohttp  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError:
        raise TokenroofError("bench and emulate need aiohttp: pip install 'tokenroof[http]'") from None


@app.command()
@handle_errors
def bench(
    url: Annotated[str, typer.Argument(help="Server base URL, e.g. http://127.0.0.1:8000 (with or without /v1).")],
    concurrency: Annotated[
        str,
        typer.Option(
            "--concurrency",
            "--max-concurrency",
            help="Closed-loop concurrencies: '1,8,32,128' (vllm bench serve's --max-concurrency).",
        ),
    ] = "",
    request_rate: Annotated[
        str, typer.Option("--request-rate", "--rate", help="Open-loop request rates (req/s): '2,4,8'.")
    ] = "",
    burstiness: Annotated[float, typer.Option(help="Gamma shape of arrivals: 1 = Poisson.")] = 1.0,
    input_len: Annotated[
        int, typer.Option(help="Synthetic prompt tokens, as the server counts them (bench calibrates on it).")
    ] = 128,
    output_len: Annotated[int, typer.Option(help="Output tokens per request (ignore_eos, min_tokens).")] = 128,
    endpoint: Annotated[str, typer.Option(help="completions or chat.")] = "completions",
    model: Annotated[str | None, typer.Option(help="Model id (default: the first of /v1/models).")] = None,
    prompts: Annotated[Path | None, typer.Option(help="JSONL of prompts instead of synthetic ones.")] = None,
    warmup: Annotated[
        int | None,
        typer.Option(show_default="the concurrency", help="Requests completed before a closed loop's window opens."),
    ] = None,
    requests_per_point: Annotated[
        int | None,
        typer.Option(
            "--requests-per-point",
            "--num-requests",
            "--num-prompts",
            show_default="2 × the concurrency, at least 16; 30 × the rate, at least 32",
            help="Requests measured per point: per concurrency or rate, not for the whole sweep (--num-requests and "
            "--num-prompts, as simulate, plan and vllm bench serve spell a run's requests).",
        ),
    ] = None,
    max_duration: Annotated[float, typer.Option(help="Longest a point may run (s), in every mode.")] = 300.0,
    timeout: Annotated[float, typer.Option(help="Per-request timeout (s).")] = 120.0,
    out: Annotated[Path, typer.Option(help="Folder for requests.jsonl, summary.csv, summary.json.")] = Path(
        "bench-out"
    ),
    resume: Annotated[bool, typer.Option(help="Continue --out: keep its valid points, measure the rest.")] = False,
    api_key: Annotated[
        str | None, typer.Option(help="API key (else $TOKENROOF_API_KEY or $OPENAI_API_KEY); never written to results.")
    ] = None,
    ttft_slo_ms: Annotated[float | None, typer.Option(help="TTFT target for goodput.")] = None,
    tpot_slo_ms: Annotated[float | None, typer.Option(help="TPOT target for goodput.")] = None,
    max_failure_fraction: Annotated[float, typer.Option(help="A point with more failures is marked invalid.")] = 0.05,
    ignore_eos: Annotated[bool, typer.Option(help="Send ignore_eos and min_tokens (vLLM, SGLang, llama.cpp).")] = True,
    seed: Annotated[int, typer.Option(min=0, help="Seed for prompts and arrivals.")] = 0,
    prompt_salt: Annotated[
        int | None,
        typer.Option(
            help="Salt of the synthetic prompts (default: a new one each run, kept by --resume, so a server's prompt "
            "cache never serves a repeated run); give a run's own to repeat its prompts."
        ),
    ] = None,
    prefix_len: PrefixLenOpt = 0,
    num_prefixes: NumPrefixesOpt = 1,
    workers: Annotated[
        int,
        typer.Option(
            help="Client processes on this host sending the requests (one schedule planned here, every record in "
            "one file): for more streams than one process can time."
        ),
    ] = 1,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="Run the --workers as Ray actors spread over this cluster ('local' starts one here; needs "
            "tokenroof[ray]); each one's clock set and checked by the coordinator.",
        ),
    ] = None,
    power_metrics: Annotated[
        str | None,
        typer.Option(
            help="The GPUs' dcgm-exporter (e.g. http://host:9400, with or without /metrics; every GPU it lists is "
            "counted unless --power-gpus names the server's; run it with -c 1000 or less): each point's mean power "
            "and energy per output token from their energy counters (default: from the server's own /metrics where "
            "it carries them)."
        ),
    ] = None,
    power_gpus: Annotated[
        str | None,
        typer.Option(
            help="The server's GPUs among those the exporter lists, by index or UUID as DCGM labels them "
            "('0,1', 'GPU-5f3e...'; CUDA_VISIBLE_DEVICES' list): only their power counts.",
        ),
    ] = None,
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Measure a server's decode curve: TPOT and throughput against the running batch, written for predict."""
    import asyncio

    from rich.markup import escape

    require_http()

    from tokenroof.measure.http.run import BenchConfig, interrupted_line, outcome, run_bench
    from tokenroof.params import whole_numbers

    cfg = BenchConfig(
        url=url,
        concurrencies=whole_numbers(parse_numbers(concurrency, "--concurrency"), "--concurrency"),
        rates=parse_numbers(request_rate, "--request-rate"),
        burstiness=burstiness,
        endpoint=endpoint,
        model=model,
        input_len=input_len,
        output_len=output_len,
        prompts_file=prompts,
        warmup=warmup,
        requests_per_point=requests_per_point,
        max_duration_s=max_duration,
        timeout_s=timeout,
        out_dir=out,
        resume=resume,
        api_key=api_key,
        ttft_slo_ms=ttft_slo_ms,
        tpot_slo_ms=tpot_slo_ms,
        max_failure_fraction=max_failure_fraction,
        ignore_eos=ignore_eos,
        seed=seed,
        prompt_salt=prompt_salt,
        prefix_len=prefix_len,
        num_prefixes=num_prefixes,
        workers=workers,
        ray_address=ray,
        power_metrics_url=power_metrics,
        power_gpus=gpu_list(power_gpus),
    )
    with progress_bar(json_output) as bar:
        tasks: dict[str, Any] = {}

        def progress(label: str, step: int, target: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=target or None)
            bar.advance(tasks[label], step)

        def notice(text: str) -> None:
            err.print(f"note: {escape(text)}", highlight=False, soft_wrap=True)

        try:
            summaries = asyncio.run(run_bench(cfg, progress, notice))
        except KeyboardInterrupt:
            summaries = None
    if summaries is None:
        err.print(escape(interrupted_line(out)), highlight=False, soft_wrap=True)
        raise typer.Exit(130)
    warnings, invalid = outcome(summaries, out)
    from tokenroof.report.plots import plot_bench
    from tokenroof.serving.simulate import goodput_slo

    slo = goodput_slo(ttft_slo_ms, tpot_slo_ms) if ttft_slo_ms is not None or tpot_slo_ms is not None else None
    data = {"points": summaries, "out": str(out), "warnings": warnings, "slo": slo}
    finish(data, render.bench, json_output, plot, lambda path: plot_bench(summaries, path, str(out)))
    if invalid:
        err.print(escape(invalid), highlight=False, soft_wrap=True)
        raise typer.Exit(1)
