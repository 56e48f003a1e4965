"""simulate and plan: capacity from the step model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
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
    GpuCostOpt,
    InputDistOpt,
    JsonOpt,
    KvDtypeOpt,
    KvTransferOpt,
    MemoryFractionOpt,
    NumPrefixesOpt,
    OptHardware,
    OptModel,
    OutputDistOpt,
    PlotOpt,
    PrefillGpuCostOpt,
    PrefillHardwareOpt,
    PrefillReplicasOpt,
    PrefillTpOpt,
    PrefixCachingOpt,
    PrefixLenOpt,
    ReplicasOpt,
    RouterOpt,
    SloStatisticOpt,
    SpeculativeOpt,
    SpreadOpt,
    StepModelFileOpt,
    TpOpt,
    app,
    err,
    finish,
    handle_errors,
    parse_numbers,
    progress_bar,
    prompt_lengths,
    spread_of,
)
from tokenroof.cli.common import speculative_config as speculative_config_of
from tokenroof.errors import TokenroofError
from tokenroof.params import parse_names, whole_numbers
from tokenroof.serving.deployment import Deployment, Physics


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
    engine: EngineOpt = None,
    enforce_eager: EagerOpt = False,
    gpu_memory_utilization: MemoryFractionOpt = None,
    request_rate: Annotated[
        str | None,
        typer.Option(
            "--request-rate", "--rate", help="Request rate(s) (req/s): '10' (the default), or a sweep '5,10,20,40'."
        ),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            "--concurrency",
            "--max-concurrency",
            help="Closed-loop concurrencies instead of a rate: '1,8,32' (each request that ends is replaced at once, "
            "as bench --concurrency and vllm bench serve --max-concurrency drive a server).",
        ),
    ] = None,
    client: Annotated[
        str | None,
        typer.Option(
            help="How a closed loop starts its streams: staggered (as tokenroof bench; figures over a steady window), "
            "burst (all at once, as vllm bench serve; figures over the whole run), waves (all at once, the next "
            "wave when the whole last one has ended, as LLMPerf before 2024-12-09) or even (spread over one "
            "request's life at that concurrency: the steady traffic advise keeps each cap full with). Default: "
            "staggered."
        ),
    ] = None,
    burstiness: Annotated[float, typer.Option(help="Gamma shape of arrivals: 1 = Poisson; inf = constant.")] = 1.0,
    input_len: Annotated[int, typer.Option(help="Mean prompt tokens.")] = 1000,
    output_len: Annotated[int, typer.Option(help="Mean output tokens.")] = 300,
    input_dist: InputDistOpt = "fixed",
    output_dist: OutputDistOpt = "fixed",
    spread: SpreadOpt = None,
    prefix_len: PrefixLenOpt = 0,
    num_prefixes: NumPrefixesOpt = 1,
    enable_prefix_caching: PrefixCachingOpt = None,
    prefill_replicas: PrefillReplicasOpt = None,
    prefill_tp: PrefillTpOpt = None,
    prefill_hardware: PrefillHardwareOpt = None,
    decode_replicas: DecodeReplicasOpt = None,
    kv_transfer_gb_s: KvTransferOpt = 50.0,
    num_requests: Annotated[
        int | None,
        typer.Option(
            "--num-requests",
            "--num-prompts",
            help="Requests to simulate (default: 10,000 at a rate; a closed loop 2 × concurrency + max(200, 10 × "
            "concurrency) staggered, 10 × concurrency (at least 100) in a burst).",
        ),
    ] = None,
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            help="Running-batch cap (default: the --engine's own, vLLM V1's 1,024 on GPUs of 70 GiB or more; else 256)."
        ),
    ] = None,
    replicas: ReplicasOpt = 1,
    max_num_batched_tokens: BudgetOpt = None,
    router: RouterOpt = "least-outstanding",
    ttft_slo_ms: Annotated[float | None, typer.Option(help="TTFT target for goodput.")] = None,
    tpot_slo_ms: Annotated[float | None, typer.Option(help="TPOT target for goodput.")] = None,
    kv_cache_tokens: Annotated[
        int | None,
        typer.Option(help="KV-cache capacity in tokens (default: from --model/--hardware memory; else unlimited)."),
    ] = None,
    trace: Annotated[Path | None, typer.Option(help="Replay arrivals and lengths from bench's requests.jsonl.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write requests.jsonl, timeseries.csv, summary.json here.")] = None,
    plot: PlotOpt = None,
    seed: Annotated[
        int, typer.Option(min=0, help="Seed for arrivals and lengths (and speculation's acceptance draws).")
    ] = 0,
    speculative_config: SpeculativeOpt = None,
    acceptance_rate: AcceptanceOpt = None,
    gpu_cost_per_hour: GpuCostOpt = None,
    prefill_gpu_cost_per_hour: PrefillGpuCostOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Simulate a workload on the emulator's scheduler with a virtual clock (thousands of times real time)."""
    from tokenroof.serving.capacity import Traffic, simulate_concurrencies, simulate_rates
    from tokenroof.serving.simulate import CLOSED_CLIENTS, EVEN, Lengths

    if client is not None and client not in (*CLOSED_CLIENTS, EVEN):
        raise TokenroofError(f"unknown --client '{client}'; known: {', '.join((*CLOSED_CLIENTS, EVEN))}")
    # flags one mode takes and the other would pass over without a word
    if concurrency is not None and request_rate is not None:
        raise TokenroofError("--concurrency runs closed loops, --request-rate an open loop: give one")
    if trace is not None and request_rate is not None:
        raise TokenroofError("--trace replays its own arrivals: drop --request-rate")
    if client is not None and concurrency is None:
        raise TokenroofError("--client is how a closed loop starts its streams: give --concurrency too")
    if num_requests is not None and num_requests < 1:
        raise TokenroofError(f"--num-requests must be at least 1, got {num_requests}")

    physics = Physics(
        model, hardware, dtype, kv_dtype, compute_dtype, tp, engine, enforce_eager, gpu_memory_utilization
    )
    max_num_seqs, cap_default = (max_num_seqs, None) if max_num_seqs is not None else physics.max_num_seqs()
    dep = Deployment(
        physics,
        fit,
        step_model,
        prompt_lengths(input_len, input_dist, spread_of(spread, input_dist, output_dist), prefix_len, num_prefixes),
        Lengths(output_len, output_dist, spread_of(spread, input_dist, output_dist)),
        max_num_seqs,
        kv_cache_tokens,
        max_num_batched_tokens,
        speculative=speculative_config_of(speculative_config, acceptance_rate),
        gpu_cost_per_hour=gpu_cost_per_hour,
        prefill_gpu_cost_per_hour=prefill_gpu_cost_per_hour,
        prefix_caching=enable_prefix_caching is not False,
        prefill_replicas=prefill_replicas,
        decode_replicas=decode_replicas,
        kv_transfer_gb_s=kv_transfer_gb_s,
        prefill_tp=prefill_tp,
        prefill_hardware=prefill_hardware,
        max_num_seqs_default=cap_default,
    )
    prefill_price_flags(prefill_gpu_cost_per_hour, prefill_hardware, [hardware] if hardware else [])
    for flag, given in (("--prefill-tp", prefill_tp), ("--prefill-hardware", prefill_hardware)):
        if given is not None and prefill_replicas is None:
            raise TokenroofError(f"{flag} sizes a disaggregated server's prefill pool: give --prefill-replicas too")
    traffic = Traffic(num_requests, burstiness, replicas, router, seed, ttft_slo_ms, tpot_slo_ms, client or "staggered")
    if concurrency is not None:
        if trace is not None or out is not None:
            raise TokenroofError("--concurrency runs a sweep: --trace and --out take a single --request-rate")
        answer = simulate_concurrencies(
            dep, whole_numbers(parse_numbers(concurrency, "--concurrency"), "--concurrency"), traffic
        )
    else:
        answer = simulate_rates(dep, parse_numbers(request_rate or "10", "--request-rate"), traffic, trace, out)
    finish(answer.data, render.rate_sweep if answer.sweep else render.simulation, json_output, plot, figure_of(answer))


def figure_of(answer: Any) -> Callable[[Path], None]:
    """How `--plot` draws a simulate answer: latency and goodput against load for a sweep, one run's time series."""

    def draw(path: Path) -> None:
        from tokenroof.report.plots import deployment_label, plot_rate_sweep, plot_simulation

        label = deployment_label(answer.deployment)
        if answer.sweep:
            plot_rate_sweep(answer.rows, path, label)
        else:
            plot_simulation(answer.result, path, answer.deployment.max_num_seqs, label)

    return draw


@app.command()
@handle_errors
def plan(
    model: OptModel = None,
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware",
            "-H",
            help="Preset names or hardware TOML paths, one or several to compare: 'h100-sxm,a100-sxm-80gb' (with "
            "--tp-choices for the tensor-parallel degrees).",
        ),
    ] = None,
    fit: Annotated[
        list[Path] | None,
        typer.Option(help="Step model fitted to these measurements (repeat --fit; its uncertainty is sampled)."),
    ] = None,
    step_model: StepModelFileOpt = None,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    engine: EngineOpt = None,
    enforce_eager: EagerOpt = False,
    gpu_memory_utilization: MemoryFractionOpt = None,
    request_rate: Annotated[
        float, typer.Option("--request-rate", "--rate", help="Target request rate (req/s), Poisson arrivals.")
    ] = 10.0,
    input_len: Annotated[int, typer.Option(help="Mean prompt tokens.")] = 1000,
    output_len: Annotated[int, typer.Option(help="Mean output tokens.")] = 300,
    input_dist: InputDistOpt = "fixed",
    output_dist: OutputDistOpt = "fixed",
    spread: SpreadOpt = None,
    length_dist: Annotated[
        str | None, typer.Option(hidden=True, help="Both --input-dist and --output-dist (the older spelling).")
    ] = None,
    prefix_len: PrefixLenOpt = 0,
    num_prefixes: NumPrefixesOpt = 1,
    enable_prefix_caching: PrefixCachingOpt = None,
    ttft_slo_ms: Annotated[
        float,
        typer.Option(
            help="TTFT target (ms), on --slo-statistic: a fleet is sized for both targets, so plan has one where "
            "advise and simulate take none unless given."
        ),
    ] = 1000.0,
    tpot_slo_ms: Annotated[float, typer.Option(help="TPOT target (ms), on --slo-statistic.")] = 50.0,
    slo_statistic: SloStatisticOpt = "p99",
    seeds: Annotated[int, typer.Option(help="Simulation seeds per candidate: --seed, --seed + 1, ...")] = 3,
    seed: Annotated[
        int, typer.Option(min=0, help="The first simulation seed (arrivals and lengths), as simulate's.")
    ] = 0,
    burstiness: Annotated[
        float, typer.Option(help="Gamma shape of arrivals: 1 = Poisson; inf = constant (as simulate's and bench's).")
    ] = 1.0,
    num_requests: Annotated[
        int,
        typer.Option(
            "--num-requests",
            "--num-prompts",
            help="Requests per simulation, each of --seeds (3 × 4,000 a candidate where simulate runs 10,000 once).",
        ),
    ] = 4000,
    max_replicas: Annotated[int, typer.Option(help="Give up beyond this many replicas.")] = 64,
    max_num_batched_tokens: BudgetOpt = None,
    gpu_cost_per_hour: Annotated[
        str | None, typer.Option(help="Price of one GPU-hour: one for every --hardware choice, or one each: '2.5,1.2'.")
    ] = None,
    prefill_gpu_cost_per_hour: PrefillGpuCostOpt = None,
    tp_choices: Annotated[str | None, typer.Option(help="Tensor-parallel degrees to compare: '1,2,4'.")] = None,
    workers: Annotated[int | None, typer.Option(help="Parallel processes (default: one per core).")] = None,
    ray: Annotated[
        str | None, typer.Option("--ray", help="Run the search on a Ray cluster at ADDRESS ('local' starts one here).")
    ] = None,
    speculative_config: Annotated[
        str | None,
        typer.Option(
            "--speculative-config",
            help="Weigh speculative decoding too (vLLM's JSON, with --acceptance-rate): the server is planned with "
            "and without it, and the cheaper wins.",
        ),
    ] = None,
    acceptance_rate: AcceptanceOpt = None,
    disaggregate: Annotated[
        bool,
        typer.Option(
            "--disaggregate/--no-disaggregate",
            help="Also weigh prefill and decode on pools of their own (DistServe): the fewest prefill + decode "
            "replicas meeting the targets, against the colocated answer.",
        ),
    ] = False,
    kv_transfer_gb_s: KvTransferOpt = 50.0,
    prefill_tp: PrefillTpOpt = None,
    prefill_hardware: PrefillHardwareOpt = None,
    router: RouterOpt = "least-outstanding",
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """The cheapest replicas × batch cap meeting TTFT and TPOT targets (p99 unless told) at a request rate, with an
    interval."""
    from tokenroof.serving.capacity import Choices, Search, plan_choices
    from tokenroof.serving.plan import Slo
    from tokenroof.serving.simulate import Lengths, Workload

    chips = parse_names(hardware, "--hardware") if hardware else ()
    prefill_chips = parse_names(prefill_hardware, "--prefill-hardware") if prefill_hardware else ()
    if length_dist is not None:
        input_dist = output_dist = length_dist
    lengths = (
        prompt_lengths(input_len, input_dist, spread_of(spread, input_dist, output_dist), prefix_len, num_prefixes),
        Lengths(output_len, output_dist, spread_of(spread, input_dist, output_dist)),
    )
    dep = Deployment(
        Physics(
            model,
            chips[0] if chips else None,
            dtype,
            kv_dtype,
            compute_dtype,
            tp,
            engine,
            enforce_eager,
            gpu_memory_utilization,
        ),
        fit,
        step_model,
        prefill_tp=prefill_tp,
        prefill_hardware=prefill_chips[0] if len(prefill_chips) == 1 else None,
        prefill_gpu_cost_per_hour=prefill_gpu_cost_per_hour,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    if len(prefill_chips) > 1 and prefill_gpu_cost_per_hour is not None:
        raise TokenroofError(
            "--prefill-gpu-cost-per-hour prices one prefill hardware: with several, give their prices in "
            "--gpu-cost-per-hour beside --hardware, or in their files"
        )
    for prefill_chip in prefill_chips:
        prefill_price_flags(prefill_gpu_cost_per_hour, prefill_chip, chips)
    for flag, given in (("--prefill-tp", prefill_tp), ("--prefill-hardware", prefill_hardware)):
        if given is not None and not disaggregate:
            raise TokenroofError(f"{flag} sizes the prefill pool of a disaggregated answer: give --disaggregate too")
    choices = Choices(
        chips,
        tuple(whole_numbers(parse_numbers(tp_choices, "--tp-choices"), "--tp-choices")) if tp_choices else (tp,),
        tuple(parse_numbers(gpu_cost_per_hour, "--gpu-cost-per-hour")) if gpu_cost_per_hour else (),
    )
    speculative = speculative_config_of(speculative_config, acceptance_rate)
    if speculative is not None:
        choices = replace(choices, speculation=(None, speculative))
    if disaggregate:
        choices = replace(choices, disaggregate=True, kv_transfer_gb_s=kv_transfer_gb_s)
    if len(prefill_chips) > 1:  # plan weighs each for the prefill pool (Splitwise's question)
        choices = replace(choices, prefill_hardware=prefill_chips)
    if enable_prefix_caching is not None or prefix_len > 0:  # shared prefixes: caching on and off, unless told
        caching = (True, False) if enable_prefix_caching is None else (enable_prefix_caching,)
        choices = replace(choices, prefix_caching=caching)
    with progress_bar(hidden=json_output, transient=True) as bar:
        task = bar.add_task("planning", total=None)

        def progress(replicas: int, tried: int) -> None:
            bar.update(task, description=f"planning: {tried} candidates simulated, now at {replicas} replicas")

        data = plan_choices(
            dep,
            Workload(request_rate, *lengths, num_requests, burstiness),
            Slo(ttft_slo_ms, tpot_slo_ms, slo_statistic),
            choices,
            Search(seeds, max_replicas, workers, ray, router, seed),
            progress,
        )
    from tokenroof.report.plots import plot_plan

    finish(data, render.plan_result, json_output, plot, lambda path: plot_plan(data, path))
    if err.is_terminal and not json_output:  # how long the answer took (the JSON's `search`; not on a pipe, where
        # output is compared run to run)
        search = data["search"]
        err.print(
            f"searched {search['candidates_simulated']} candidate fleets in {search['wall_s']:.1f} s", highlight=False
        )
    if data["chosen"] is None:  # the candidates are the answer's evidence: printed, then a status a script can test
        from rich.markup import escape

        if json_output:
            err.print(escape(f"infeasible: {data['reason']}"), highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def prefill_price_flags(price: float | None, prefill_hardware: str | None, hardware: Sequence[str]) -> None:
    """--prefill-gpu-cost-per-hour prices a prefill pool on hardware of its own: refused without one, on the decode
    pool's hardware (whose price --gpu-cost-per-hour gives), or not a positive number."""
    if price is None:
        return
    if prefill_hardware is None:
        raise TokenroofError("--prefill-gpu-cost-per-hour prices a prefill pool on --prefill-hardware: give it too")
    if prefill_hardware in hardware:
        raise TokenroofError(
            f"--prefill-hardware {prefill_hardware} is a --hardware choice: give its price in --gpu-cost-per-hour, "
            "not --prefill-gpu-cost-per-hour"
        )
    if not 0 < price < float("inf"):
        raise TokenroofError(f"--prefill-gpu-cost-per-hour must be a positive number, got {price:g}")
