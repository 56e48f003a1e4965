"""The `tokenroof` command: parse, call one library function, print a table or JSON."""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from tokenroof import render
from tokenroof.errors import TokenroofError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Decode throughput and TPOT against batch size: from first principles, from your measurements.",
)
out = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])
NUMBER = re.compile(r"^-?[0-9][0-9.,eE+-]*$|^-?\.[0-9][0-9.,eE+-]*$|^-?(inf|nan)$", re.IGNORECASE)
LIST_OPTIONS = ("--batch",)


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Let list options take space-separated values: `--batch 256 512` → `--batch 256,512`."""
    result: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        result.append(token)
        i += 1
        if token in LIST_OPTIONS:
            values = []
            while i < len(argv) and NUMBER.match(argv[i]):
                values.append(argv[i])
                i += 1
            if values:
                result.append(",".join(values))
    return result


def parse_numbers(text: str, what: str) -> list[float]:
    """`"1,8, 32"` → [1.0, 8.0, 32.0]; a bad item names itself."""
    values = []
    for item in text.replace(" ", ",").split(","):
        if not item:
            continue
        try:
            values.append(float(item))
        except ValueError:
            raise TokenroofError(f"{what}: '{item}' is not a number") from None
    return values


def handle_errors(func: F) -> F:
    """Turn a TokenroofError into one line on stderr and exit status 2 (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TokenroofError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def emit_json(data: dict[str, Any]) -> None:
    """One JSON object on stdout; infinities become null."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    sys.stdout.write(json.dumps(clean(data), indent=2) + "\n")


def warn_all(warnings: Sequence[str]) -> None:
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)


def finish(
    data: dict[str, Any],
    table: Callable[[Console, dict[str, Any]], None],
    json_output: bool,
    plot: Path | None = None,
    draw: Callable[[Path], None] | None = None,
) -> None:
    """Write the plot if asked, then print JSON or the table followed by the warnings."""
    if plot is not None and draw is not None:
        draw(plot)
    if json_output:
        emit_json(data)
        return
    table(out, data)
    warn_all(data.get("warnings", []))
    if plot is not None:
        err.print(f"wrote {plot}")


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Preset name or path to a config.json.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", "-H", help="Preset name or path to a hardware TOML.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write a PNG figure to this path.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="Weight dtype: bf16, fp16, fp8, int8, int4, fp4, fp32.")]
KvDtypeOpt = Annotated[
    str | None,
    typer.Option("--kv-dtype", help="KV-cache dtype (default: weight dtype, or bf16 for quantised weights)."),
]
ComputeOpt = Annotated[
    str | None,
    typer.Option("--compute-dtype", help="Which tensor peak applies (default: weight dtype; bf16 for int4/int8)."),
]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")]


@app.command()
@handle_errors
def roofline(
    model: ModelOpt,
    hardware: HardwareOpt,
    batch: Annotated[str, typer.Option(help="Batch sizes: '1,8,32' or '1 8 32'.")] = "1,2,4,8,16,32,64,128,256,512",
    context: Annotated[float, typer.Option(help="Tokens in each sequence's KV cache.")] = 1024,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    bandwidth_efficiency: Annotated[float, typer.Option(help="Achieved fraction of peak memory bandwidth.")] = 0.75,
    compute_efficiency: Annotated[float, typer.Option(help="Achieved fraction of dense peak FLOP/s.")] = 0.75,
    overhead_ms: Annotated[float, typer.Option(help="Fixed per-step overhead (scheduler, launches).")] = 1.0,
    memory_utilization: Annotated[
        float, typer.Option(help="Fraction of memory for weights + KV (vLLM --gpu-memory-utilization).")
    ] = 0.9,
    prompt_tokens: Annotated[float | None, typer.Option(help="Also estimate TTFT for a prompt this long.")] = None,
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """First-principles decode roofline: TPOT, throughput and the binding resource at each batch."""
    from tokenroof.analysis import analyze_roofline
    from tokenroof.roofline import Efficiencies
    from tokenroof.specs import Precision, load_hardware, load_model

    result = analyze_roofline(
        load_model(model),
        load_hardware(hardware),
        Precision.create(dtype, kv_dtype, compute_dtype),
        parse_numbers(batch, "--batch"),
        context,
        tp,
        Efficiencies(bandwidth_efficiency, compute_efficiency, overhead_ms / 1e3),
        memory_utilization,
        prompt_tokens,
    )
    from tokenroof.plots import plot_roofline

    finish(result.to_dict(), render.roofline, json_output, plot, lambda path: plot_roofline(result, path))


OptModel = Annotated[
    str | None, typer.Option("--model", "-m", help="Model preset or config.json: enables the physics prior.")
]
OptHardware = Annotated[
    str | None, typer.Option("--hardware", "-H", help="Hardware preset or TOML: enables the physics prior.")
]
InputLenOpt = Annotated[float | None, typer.Option(help="Prompt tokens per request in the measured workload.")]
OutputLenOpt = Annotated[float | None, typer.Option(help="Output tokens per request in the measured workload.")]
DecodeOnlyOpt = Annotated[
    bool, typer.Option("--decode-only", help="TPOT was measured on pure decode steps (no prefill mixed in).")
]
ContextOpt = Annotated[
    float | None, typer.Option("--context", help="Mean tokens in each sequence's KV cache (default: input + output/2).")
]


def build_prior(
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
    table_context: float | None = None,
) -> Any:
    """The physics prior when both --model and --hardware are given; None for a data-only fit."""
    from tokenroof.predict import Workload, prior_from_specs
    from tokenroof.specs import Precision, load_hardware, load_model

    if (model is None) != (hardware is None):
        raise TokenroofError("give both --model and --hardware for the physics prior (or neither for data only)")
    if model is None or hardware is None:
        return None
    workload = Workload(context if context is not None else table_context, input_len, output_len, decode_only)
    return prior_from_specs(
        load_model(model), load_hardware(hardware), Precision.create(dtype, kv_dtype, compute_dtype), workload, tp
    )


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
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Fit measured points and predict TPOT and throughput at other batches, with 90% intervals."""
    from tokenroof.measurements import read_table
    from tokenroof.predict import predict_table

    table = read_table(files)
    table_context = float(table.context_tokens.mean()) if table.context_tokens is not None else None
    prior = build_prior(
        model, hardware, dtype, kv_dtype, compute_dtype, tp, context, input_len, output_len, decode_only, table_context
    )
    result = predict_table(
        table, parse_numbers(batch, "--batch"), prior, critical_batch, roof_tok_s, max(samples, 10), seed
    )
    from tokenroof.plots import plot_prediction

    finish(result.to_dict(), render.prediction, json_output, plot, lambda path: plot_prediction(result, path))


@app.command()
@handle_errors
def advise(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Measurements to fit (or give --model/--hardware alone for the first-principles curve)."),
    ] = None,
    tpot_slo_ms: Annotated[float, typer.Option(help="TPOT target in ms per output token.")] = 50.0,
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
    samples: Annotated[int, typer.Option(help="Samples for the cap's interval.")] = 200,
    json_output: JsonOpt = False,
) -> None:
    """The largest batch cap (max_num_seqs) that meets a TPOT target, and the flags to set it."""
    from tokenroof.advise import advise as advise_cap

    if files:
        from tokenroof.fit import fit_table
        from tokenroof.measurements import read_table

        table = read_table(files)
        table_context = float(table.context_tokens.mean()) if table.context_tokens is not None else None
        prior = build_prior(
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
            table_context,
        )
        fit = fit_table(table, prior, n_samples=max(samples, 10))
        result = advise_cap(
            fit.step_model,
            tpot_slo_ms,
            0.0,
            prior.max_batch if prior else None,
            fit.sample_models(),
            f"fitted to {table.source} ({fit.method})",
        )
        result.warnings = list(table.warnings) + result.warnings
    else:
        if model is None or hardware is None:
            raise TokenroofError("give a measurement file, or --model and --hardware for the first-principles curve")
        from tokenroof.roofline import max_batch_by_memory, step_model_from_specs
        from tokenroof.specs import Precision, load_hardware, load_model

        spec, chip = load_model(model), load_hardware(hardware)
        precision = Precision.create(dtype, kv_dtype, compute_dtype)
        ctx = context if context is not None else (input_len or 0) + (output_len or 0) / 2 or 1024.0
        sm = step_model_from_specs(spec, chip, precision, tp)
        limit = max_batch_by_memory(spec, chip, precision, ctx, tp)
        result = advise_cap(
            sm,
            tpot_slo_ms,
            ctx,
            limit,
            (),
            f"first principles: {spec.name} on {chip.name} ×{tp}, context {ctx:g}, default efficiencies",
        )
    finish(result.to_dict(), render.advice, json_output)


@app.command()
@handle_errors
def emulate(
    model: OptModel = None,
    hardware: OptHardware = None,
    fit: Annotated[
        Path | None, typer.Option(help="Step model fitted to this measurement file (as predict does).")
    ] = None,
    step_model: Annotated[
        Path | None, typer.Option(help="Step model terms from a JSON file (StepModel fields).")
    ] = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    max_num_seqs: Annotated[int, typer.Option(help="Running-batch cap; requests beyond it queue.")] = 256,
    max_model_len: Annotated[int, typer.Option(help="Longest prompt + output accepted.")] = 32768,
    served_model_name: Annotated[str, typer.Option(help="Model id the server reports.")] = "tokenroof-emulator",
    kv_cache_tokens: Annotated[
        int | None,
        typer.Option(help="KV-cache capacity in tokens; sequences are preempted when it fills (default: unlimited)."),
    ] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(help="Token budget per step (chunked prefill).")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """An OpenAI-compatible server whose decode steps take the step model's time (continuous batching)."""
    require_http()
    from tokenroof.emulate.server import Emulator, serve

    sm = load_step_model(model, hardware, fit, step_model, dtype, kv_dtype, compute_dtype, tp)
    err.print(f"emulating {sm} with max_num_seqs={max_num_seqs} on http://{host}:{port}", highlight=False)
    if kv_cache_tokens is not None and kv_cache_tokens < max_model_len:
        max_model_len = kv_cache_tokens  # a request must fit in the cache on its own
    emulator = Emulator(sm, max_num_seqs, served_model_name, max_model_len, kv_cache_tokens, max_num_batched_tokens)
    serve(emulator, host, port)


def require_http() -> None:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise TokenroofError("bench and emulate need aiohttp: pip install 'tokenroof[http]'") from None


def load_step_model(
    model: str | None,
    hardware: str | None,
    fit: Path | None,
    step_model: Path | None,
    dtype: str,
    kv_dtype: str | None,
    compute_dtype: str | None,
    tp: int,
) -> Any:
    """The emulator's step model from exactly one source: specs, a fit, or a JSON file."""
    from tokenroof.stepmodel import StepModel

    sources = sum(x is not None for x in (fit, step_model)) + (model is not None or hardware is not None)
    if sources != 1:
        raise TokenroofError("give one step-model source: --model/--hardware, --fit FILE, or --step-model JSON")
    if step_model is not None:
        try:
            return StepModel(**json.loads(step_model.read_text()))
        except (OSError, json.JSONDecodeError, TypeError) as exc:
            raise TokenroofError(f"{step_model}: not a StepModel JSON ({exc})") from None
    if fit is not None:
        from tokenroof.fit import fit_table
        from tokenroof.measurements import read_table

        return fit_table(read_table([fit]), n_samples=0).step_model
    from tokenroof.roofline import step_model_from_specs
    from tokenroof.specs import Precision, load_hardware, load_model

    if model is None or hardware is None:
        raise TokenroofError("give both --model and --hardware")
    return step_model_from_specs(
        load_model(model), load_hardware(hardware), Precision.create(dtype, kv_dtype, compute_dtype), tp
    )


@app.command()
@handle_errors
def bench(
    url: Annotated[str, typer.Argument(help="Server base URL, e.g. http://127.0.0.1:8000")],
    concurrency: Annotated[str, typer.Option(help="Closed-loop concurrencies: '1,8,32,128'.")] = "",
    request_rate: Annotated[str, typer.Option(help="Open-loop request rates (req/s): '2,4,8'.")] = "",
    burstiness: Annotated[float, typer.Option(help="Gamma shape of arrivals: 1 = Poisson.")] = 1.0,
    input_len: Annotated[int, typer.Option(help="Synthetic prompt length (words).")] = 128,
    output_len: Annotated[int, typer.Option(help="Output tokens per request (ignore_eos, min_tokens).")] = 128,
    endpoint: Annotated[str, typer.Option(help="completions or chat.")] = "completions",
    model: Annotated[str | None, typer.Option(help="Model id (default: the first of /v1/models).")] = None,
    prompts: Annotated[Path | None, typer.Option(help="JSONL of prompts instead of synthetic ones.")] = None,
    warmup: Annotated[int | None, typer.Option(help="Requests completed before the window opens.")] = None,
    requests_per_point: Annotated[int | None, typer.Option(help="Requests measured per point.")] = None,
    max_duration: Annotated[float, typer.Option(help="Longest a point may run (s).")] = 300.0,
    timeout: Annotated[float, typer.Option(help="Per-request timeout (s).")] = 120.0,
    out: Annotated[Path, typer.Option(help="Folder for requests.jsonl, summary.csv, summary.json.")] = Path(
        "bench-out"
    ),
    resume: Annotated[bool, typer.Option(help="Skip points already finished in --out.")] = False,
    api_key: Annotated[
        str | None, typer.Option(help="API key (else $TOKENROOF_API_KEY or $OPENAI_API_KEY); never written to results.")
    ] = None,
    ttft_slo_ms: Annotated[float | None, typer.Option(help="TTFT target for goodput.")] = None,
    tpot_slo_ms: Annotated[float | None, typer.Option(help="TPOT target for goodput.")] = None,
    max_failure_fraction: Annotated[float, typer.Option(help="A point with more failures is marked invalid.")] = 0.05,
    ignore_eos: Annotated[bool, typer.Option(help="Send ignore_eos and min_tokens (vLLM, SGLang, llama.cpp).")] = True,
    seed: Annotated[int, typer.Option(help="Seed for prompts and arrivals.")] = 0,
    json_output: JsonOpt = False,
) -> None:
    """Measure a server's decode curve: TPOT and throughput against the running batch, written for predict."""
    import asyncio

    require_http()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tokenroof.bench.run import BenchConfig, run_bench

    if endpoint not in ("completions", "chat"):
        raise TokenroofError(f"--endpoint must be completions or chat, got {endpoint!r}")
    cfg = BenchConfig(
        url=url,
        concurrencies=[int(c) for c in parse_numbers(concurrency, "--concurrency")],
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
    )
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, disable=json_output) as bar:
        tasks: dict[str, Any] = {}

        def progress(label: str, step: int, target: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=target or None)
            bar.advance(tasks[label], step)

        summaries = asyncio.run(run_bench(cfg, progress))
    finish({"points": summaries, "out": str(out), "warnings": []}, render.bench, json_output)


@app.command()
@handle_errors
def simulate(
    model: OptModel = None,
    hardware: OptHardware = None,
    fit: Annotated[Path | None, typer.Option(help="Step model fitted to this measurement file.")] = None,
    step_model: Annotated[Path | None, typer.Option(help="Step model terms from a JSON file.")] = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    rate: Annotated[str, typer.Option(help="Request rate(s) (req/s): '10', or a sweep '5,10,20,40'.")] = "10",
    burstiness: Annotated[float, typer.Option(help="Gamma shape of arrivals: 1 = Poisson; inf = constant.")] = 1.0,
    input_len: Annotated[int, typer.Option(help="Mean prompt tokens.")] = 1000,
    output_len: Annotated[int, typer.Option(help="Mean output tokens.")] = 300,
    input_dist: Annotated[str, typer.Option(help="fixed, uniform or lognormal.")] = "fixed",
    output_dist: Annotated[str, typer.Option(help="fixed, uniform or lognormal.")] = "fixed",
    spread: Annotated[float, typer.Option(help="Uniform ± fraction, or lognormal sigma.")] = 0.5,
    num_requests: Annotated[int, typer.Option(help="Requests to simulate.")] = 10_000,
    max_num_seqs: Annotated[int, typer.Option(help="Running-batch cap.")] = 256,
    replicas: Annotated[int, typer.Option(help="Replicas behind the router.")] = 1,
    max_num_batched_tokens: Annotated[int | None, typer.Option(help="Token budget per step (chunked prefill).")] = None,
    router: Annotated[str, typer.Option(help="round-robin or least-outstanding.")] = "round-robin",
    ttft_slo_ms: Annotated[float | None, typer.Option(help="TTFT target for goodput.")] = None,
    tpot_slo_ms: Annotated[float | None, typer.Option(help="TPOT target for goodput.")] = None,
    kv_cache_tokens: Annotated[
        int | None,
        typer.Option(help="KV-cache capacity in tokens (default: from --model/--hardware memory; else unlimited)."),
    ] = None,
    trace: Annotated[Path | None, typer.Option(help="Replay arrivals and lengths from bench's requests.jsonl.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write requests.jsonl, timeseries.csv, summary.json here.")] = None,
    plot: PlotOpt = None,
    seed: Annotated[int, typer.Option(help="Seed for arrivals and lengths.")] = 0,
    json_output: JsonOpt = False,
) -> None:
    """Simulate a workload on the emulator's scheduler with a virtual clock (thousands of times real time)."""
    from tokenroof.simulate import Lengths, Trace, Workload
    from tokenroof.simulate import simulate as run_simulation

    sm = load_step_model(model, hardware, fit, step_model, dtype, kv_dtype, compute_dtype, tp)
    if kv_cache_tokens is None and model is not None and hardware is not None:
        from tokenroof.roofline import kv_cache_tokens as kv_pool
        from tokenroof.specs import Precision, load_hardware, load_model

        precision = Precision.create(dtype, kv_dtype, compute_dtype)
        kv_cache_tokens = kv_pool(load_model(model), load_hardware(hardware), precision, tp)
    rates = parse_numbers(rate, "--rate")
    if not rates:
        raise TokenroofError("--rate needs at least one number")
    if len(rates) > 1:
        if trace is not None or out is not None:
            raise TokenroofError("--trace and --out take a single --rate")
        from tokenroof.simulate import rate_sweep

        sweep = rate_sweep(
            sm,
            rates,
            Lengths(input_len, input_dist, spread),
            Lengths(output_len, output_dist, spread),
            num_requests,
            burstiness,
            max_num_seqs,
            seed,
            kv_cache_tokens,
            replicas,
            router,
            max_num_batched_tokens,
            ttft_slo_ms,
            tpot_slo_ms,
        )
        from tokenroof.plots import plot_rate_sweep

        finish(
            {"rates": sweep, "warnings": []},
            render.rate_sweep,
            json_output,
            plot,
            lambda path: plot_rate_sweep(sweep, path),
        )
        return
    workload: Workload | Trace = Workload(
        rates[0],
        Lengths(input_len, input_dist, spread),
        Lengths(output_len, output_dist, spread),
        num_requests,
        burstiness,
    )
    if trace is not None:
        workload = Trace.read(trace)
    result = run_simulation(
        sm,
        workload,
        max_num_seqs,
        seed,
        kv_cache_tokens,
        replicas=replicas,
        router=router,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    summary = result.summary(ttft_slo_ms, tpot_slo_ms)
    summary["warnings"] = []
    if out is not None:
        result.write(out, summary)
    from tokenroof.plots import plot_simulation

    finish(summary, render.simulation, json_output, plot, lambda path: plot_simulation(result, path))


@app.command()
@handle_errors
def plan(
    model: OptModel = None,
    hardware: OptHardware = None,
    fit: Annotated[
        Path | None, typer.Option(help="Step model fitted to this file (its uncertainty is sampled).")
    ] = None,
    step_model: Annotated[Path | None, typer.Option(help="Step model terms from a JSON file.")] = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    rate: Annotated[float, typer.Option(help="Target request rate (req/s).")] = 10.0,
    input_len: Annotated[int, typer.Option(help="Mean prompt tokens.")] = 1000,
    output_len: Annotated[int, typer.Option(help="Mean output tokens.")] = 300,
    length_dist: Annotated[str, typer.Option(help="fixed, uniform or lognormal.")] = "lognormal",
    spread: Annotated[float, typer.Option(help="Uniform ± fraction, or lognormal sigma.")] = 0.5,
    ttft_slo_ms: Annotated[float, typer.Option(help="p99 TTFT target (ms).")] = 1000.0,
    tpot_slo_ms: Annotated[float, typer.Option(help="p99 TPOT target (ms).")] = 50.0,
    seeds: Annotated[int, typer.Option(help="Simulation seeds per candidate.")] = 3,
    num_requests: Annotated[int, typer.Option(help="Requests per simulation.")] = 4000,
    max_replicas: Annotated[int, typer.Option(help="Give up beyond this many replicas.")] = 64,
    gpu_cost_per_hour: Annotated[
        str | None, typer.Option(help="Price of one GPU-hour; with several --hardware, one price each: '2.5,1.2'.")
    ] = None,
    tp_choices: Annotated[str | None, typer.Option(help="Tensor-parallel degrees to compare: '1,2,4'.")] = None,
    workers: Annotated[int | None, typer.Option(help="Parallel processes (default: one per core).")] = None,
    ray: Annotated[
        str | None, typer.Option("--ray", help="Run the search on a Ray cluster at ADDRESS ('local' starts one here).")
    ] = None,
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """The cheapest replicas × batch cap meeting p99 TTFT and TPOT targets at a request rate, with an interval."""
    from tokenroof.plan import Slo, make_plan
    from tokenroof.simulate import Lengths, Workload

    chips = [h.strip() for h in hardware.split(",") if h.strip()] if hardware else []
    degrees = [int(x) for x in parse_numbers(tp_choices, "--tp-choices")] if tp_choices else [tp]
    prices = parse_numbers(gpu_cost_per_hour, "--gpu-cost-per-hour") if gpu_cost_per_hour else []
    if prices and len(prices) not in (1, max(len(chips), 1)):
        raise TokenroofError("give one --gpu-cost-per-hour, or one per --hardware choice")
    workload = Workload(
        rate, Lengths(input_len, length_dist, spread), Lengths(output_len, length_dist, spread), num_requests
    )
    slo = Slo(ttft_slo_ms, tpot_slo_ms)
    choices: list[str | None] = list(chips) or [None]
    options = [(chip, degree) for chip in choices for degree in degrees]
    results = []
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        disable=json_output,
        transient=True,
    )
    task = bar.add_task("planning", total=None)

    def progress(replicas: int, tried: int) -> None:
        bar.update(task, description=f"planning: {tried} candidates simulated, now at {replicas} replicas")

    bar.start()
    for chip, degree in options:
        sm = load_step_model(model, chip, fit, step_model, dtype, kv_dtype, compute_dtype, degree)
        models = [sm]
        if fit is not None:
            from tokenroof.fit import fit_table
            from tokenroof.measurements import read_table

            models += fit_table(read_table([fit]), n_samples=4).sample_models()
        kv = None
        if model is not None and chip is not None:
            from tokenroof.roofline import kv_cache_tokens as kv_pool
            from tokenroof.specs import Precision, load_hardware, load_model

            precision = Precision.create(dtype, kv_dtype, compute_dtype)
            kv = kv_pool(load_model(model), load_hardware(chip), precision, degree)
        result = make_plan(
            models, workload, slo, tuple(range(seeds)), kv, max_replicas, workers, ray_address=ray, progress=progress
        )
        entry = result.to_dict()
        entry.update({"hardware": chip, "tp": degree, "gpus_per_replica": degree})
        if result.chosen is not None:
            gpus = result.chosen.candidate.replicas * degree
            entry["gpus"] = gpus
            if prices:
                price = prices[0] if len(prices) == 1 or chip is None else prices[chips.index(chip)]
                entry["cost_per_hour"] = gpus * price
        results.append(entry)
    bar.stop()
    feasible = [r for r in results if r["feasible"]]
    key = "cost_per_hour" if prices else "gpus"
    data = min(feasible, key=lambda r: r[key]) if feasible else results[0]
    if len(results) > 1:
        data = {
            **data,
            "choices": [
                {k: r.get(k) for k in ("hardware", "tp", "feasible", "gpus", "cost_per_hour", "reason")}
                for r in results
            ],
        }
    from tokenroof.plots import plot_plan

    finish(data, render.plan_result, json_output, plot, lambda path: plot_plan(data, path))


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


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point."""
    args = normalize_argv(sys.argv[1:] if argv is None else argv)
    app(args=args, prog_name="tokenroof")
