"""simulate and plan: capacity from the step model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tokenroof import render
from tokenroof.cli import (
    ComputeOpt,
    DtypeOpt,
    FitOpt,
    JsonOpt,
    KvDtypeOpt,
    OptHardware,
    OptModel,
    PlotOpt,
    StepModelFileOpt,
    TpOpt,
    app,
    err,
    finish,
    handle_errors,
    parse_numbers,
)
from tokenroof.cli.serving import load_step_model
from tokenroof.deployment import Physics
from tokenroof.errors import TokenroofError
from tokenroof.stepmodel import mean_context_tokens


@app.command()
@handle_errors
def simulate(
    model: OptModel = None,
    hardware: OptHardware = None,
    fit: FitOpt = None,
    step_model: StepModelFileOpt = None,
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

    physics = Physics(model, hardware, dtype, kv_dtype, compute_dtype, tp)
    travelling, _ = load_step_model(physics, fit, step_model)
    sm = travelling.step_model
    notes = travelling.notes(mean_context_tokens(input_len, output_len) if trace is None else None)
    if kv_cache_tokens is None:
        kv_cache_tokens = physics.kv_pool_tokens()
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
            {"rates": sweep, "warnings": notes},
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
    summary["warnings"] = notes
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
    step_model: StepModelFileOpt = None,
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
    notes: list[str] = []
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
        physics = Physics(model, chip, dtype, kv_dtype, compute_dtype, degree)
        travelling, samples = load_step_model(physics, fit, step_model, n_samples=4)
        models = [travelling.step_model, *samples]
        notes += [n for n in travelling.notes(workload.mean_context_tokens) if n not in notes]
        kv = physics.kv_pool_tokens()
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
    data = {**data, "warnings": [*data.get("warnings", []), *notes]}
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
