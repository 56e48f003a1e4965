"""bench-local and calibrate: measuring this machine with the PyTorch decode engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tokenroof.cli import render
from tokenroof.cli.common import (
    JsonOpt,
    ModelOpt,
    PlotOpt,
    app,
    err,
    finish,
    handle_errors,
    parse_numbers,
    progress_bar,
)
from tokenroof.errors import TokenroofError

DeviceOpt = Annotated[str, typer.Option(help="auto (CUDA if present, else CPU), cpu, cuda or cuda:N.")]
ThreadsOpt = Annotated[int | None, typer.Option(help="CPU threads for PyTorch (default: PyTorch's choice).")]


def whole_batches(text: str) -> list[int]:
    values = parse_numbers(text, "--batch")
    if any(v != int(v) or v < 1 for v in values):
        raise TokenroofError(f"--batch: bench-local runs whole batches of at least 1, got {text}")
    return [int(v) for v in values]


@app.command("bench-local")
@handle_errors
def bench_local(
    model: ModelOpt,
    batch: Annotated[str, typer.Option(help="Batch sizes: '1,2,4' or '1 2 4'.")] = "1,2,4,8,16,32,64,128,256",
    context: Annotated[int, typer.Option(help="Prompt tokens in each sequence's KV cache before timing.")] = 512,
    dtype: Annotated[str | None, typer.Option(help="fp32, bf16 or fp16 (default: fp32 on CPU, bf16 on CUDA).")] = None,
    device: DeviceOpt = "auto",
    warmup: Annotated[int, typer.Option(help="Untimed decode steps per batch.")] = 3,
    steps: Annotated[int, typer.Option(help="Timed decode steps per batch (TPOT is their median).")] = 10,
    rounds: Annotated[
        int,
        typer.Option(
            help="Round-robin passes over the batches; TPOT is the lowest pass median (interference only adds time)."
        ),
    ] = 1,
    threads: ThreadsOpt = None,
    weights: Annotated[
        Path | None, typer.Option(help="Local safetensors checkpoint (file or folder); default random weights.")
    ] = None,
    hardware: Annotated[
        str | None, typer.Option("--hardware", "-H", help="Compare with this spec (e.g. calibrate's TOML).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Measurement CSV, one row per batch as measured (default: bench-local-MODEL-DTYPE-cN.csv)."),
    ] = None,
    memory_fraction: Annotated[float, typer.Option(help="Refuse points needing more of the free memory.")] = 0.9,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random weights and prompts.")] = 0,
    mode: Annotated[
        str | None,
        typer.Option(
            help="How each decode step runs: eager (kernels launched from Python), compile (torch.compile) or graph "
            "(a CUDA graph per batch, as vLLM decodes). Default: graph on CUDA, eager on CPU."
        ),
    ] = None,
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Time decode steps of a Llama-family model on this machine (random weights unless --weights)."""
    from tokenroof.measure.local.device import require_torch, resolve_device
    from tokenroof.measure.local.local import LocalConfig
    from tokenroof.specs import load_hardware, load_model

    require_torch()
    spec = load_model(model)
    hw = load_hardware(hardware) if hardware else None
    if dtype is None:
        dtype = "bf16" if resolve_device(device).type == "cuda" else "fp32"
    if out is None:
        out = Path(f"bench-local-{Path(model).stem if '/' in model else model}-{dtype}-c{context}.csv")
    config = LocalConfig(
        model=model,
        batches=whole_batches(batch),
        context=context,
        dtype=dtype,
        device=device,
        warmup=warmup,
        steps=steps,
        rounds=rounds,
        threads=threads,
        weights=weights,
        seed=seed,
        out=out,
        hardware=hardware,
        memory_fraction=memory_fraction,
        mode=mode,
    )
    result = measure_with_progress(config, spec, hw, json_output)
    from tokenroof.report.plots import plot_bench_local

    data = result.to_dict()
    finish(data, render.bench_local, json_output, plot, lambda path: plot_bench_local(data, path))
    if not json_output:
        err.print(f"wrote {out} (read it with: tokenroof predict {out} --batch ...)", highlight=False)


def measure_with_progress(config: Any, spec: Any, hw: Any, hidden: bool) -> Any:
    """run_bench_local with a progress bar and a line per point; Ctrl-C says where the points so far are."""
    from tokenroof.measure.local.local import run_bench_local

    with progress_bar(hidden, transient=True) as bar:
        task = bar.add_task("bench-local", total=len(config.batches) * config.rounds)

        def started(result: Any) -> None:
            bar.update(task, description=f"{spec.name} {config.dtype} on {result.device_name}")

        def measured(point: Any) -> None:
            bar.advance(task)
            bar.console.print(
                f"  batch {point.batch} ({point.steps} steps): TPOT {point.tpot_ms:.1f} ms "
                f"({point.tpot_ms_p10:.1f}–{point.tpot_ms_p90:.1f}), "
                f"{point.throughput_tok_s:,.0f} tok/s",
                highlight=False,
            )

        try:
            return run_bench_local(config, spec, hw, measured, started)
        except KeyboardInterrupt:
            raise TokenroofError(f"interrupted; the points measured so far are in {config.out}") from None


@app.command()
@handle_errors
def calibrate(
    device: DeviceOpt = "auto",
    dtype: Annotated[str, typer.Option(help="Dtypes to measure, comma-separated.")] = "fp32,bf16",
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Measure kernels at this model's layer shapes (default: square matrices)."),
    ] = None,
    threads: ThreadsOpt = None,
    repeats: Annotated[int, typer.Option(help="Interleaved timing rounds per kernel in each pass.")] = 5,
    passes: Annotated[
        int, typer.Option(help="Separate timing passes; each rate is taken at the lowest pass median.")
    ] = 3,
    out: Annotated[Path, typer.Option(help="Hardware TOML to write (use it as --hardware).")] = Path("calibrated.toml"),
    json_output: JsonOpt = False,
) -> None:
    """Measure this machine's bandwidth, matmul FLOP/s and framework overhead; write a hardware TOML."""
    from tokenroof.measure.local.calibrate import calibrate as run_calibration
    from tokenroof.specs import load_model
    from tokenroof.specs.hardware import read_hardware_toml

    if repeats < 3:
        raise TokenroofError(f"--repeats must be at least 3, got {repeats}")
    if passes < 1:
        raise TokenroofError(f"--passes must be at least 1, got {passes}")
    dtypes = tuple(d.strip() for d in dtype.split(",") if d.strip())
    spec = load_model(model) if model else None
    with err.status("calibrating") as status:
        result = run_calibration(
            device,
            dtypes,
            repeats,
            threads,
            model=spec,
            progress=lambda label: status.update(f"calibrate: {label}"),
            passes=passes,
        )
    out.write_text(result.to_toml())
    read_hardware_toml(out)  # what we wrote must load as --hardware
    data = {**result.to_dict(), "out": str(out)}
    finish(data, render.calibration, json_output)
    if not json_output:
        err.print(f"wrote {out} (use it as --hardware {out})", highlight=False)


@app.command()
@handle_errors
def serve(
    model: ModelOpt,
    dtype: Annotated[str | None, typer.Option(help="fp32, bf16 or fp16 (default: fp32 on CPU, bf16 on CUDA).")] = None,
    device: DeviceOpt = "auto",
    max_num_seqs: Annotated[int, typer.Option(help="Slots: sequences decoded at once; requests beyond queue.")] = 16,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            help="Tokens per slot (prompt + output), all held in the KV cache (default: 2048, or the model's less)."
        ),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="Token budget per step (chunked prefill); default: whole prompts.")
    ] = None,
    threads: ThreadsOpt = None,
    weights: Annotated[
        Path | None, typer.Option(help="Local safetensors checkpoint (file or folder); default random weights.")
    ] = None,
    served_model_name: Annotated[
        str | None, typer.Option(help="Model id the server reports (default: the model's name).")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    read_timeout: Annotated[
        float, typer.Option(help="Seconds a client may take to send a request's headers, and again its body (408).")
    ] = 30.0,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random weights.")] = 0,
    step_log: Annotated[
        Path | None,
        typer.Option(help="JSONL with one line per engine step: batch, prompt tokens, context, compute and wall s."),
    ] = None,
) -> None:
    """An OpenAI-compatible server running a Llama-family model for real (PyTorch) under emulate's scheduler."""
    from tokenroof.cli.serving import require_http
    from tokenroof.measure.local.device import require_torch, resolve_device
    from tokenroof.serving.emulate.checks import check_port
    from tokenroof.specs import load_model

    check_port(port)
    require_http()
    require_torch()
    spec = load_model(model)
    if dtype is None:
        dtype = "bf16" if resolve_device(device).type == "cuda" else "fp32"
    if max_model_len is None:
        max_model_len = min(2048, spec.max_position_embeddings or 2048)
    from tokenroof.measure.local.serve_engine import ServeConfig, build_server
    from tokenroof.serving.emulate.server import serve as run_server

    config = ServeConfig(
        dtype,
        device,
        max_num_seqs,
        max_model_len,
        max_num_batched_tokens,
        threads,
        weights,
        seed,
        served_model_name,
        read_timeout,
        step_log=step_log,
    )
    server, line = build_server(spec, config)
    err.print(f"{line}; on http://{host}:{port}", highlight=False)
    run_server(server, host, port)
