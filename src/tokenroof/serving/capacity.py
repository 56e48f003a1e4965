"""simulate and plan as the commands ask them: a `Deployment` in, the JSON contract's object out.

The CLI only parses flags into a `Deployment` and prints (or plots) what comes back; everything that decides an
answer (which step model, which KV budget, which workload, which hardware and tensor-parallel degree wins) is
here, so the library gives the same answers as the command line (`tokenroof.plan_choices`,
`tokenroof.simulate_rates`, `tokenroof.simulate_concurrencies`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.fit.physics import Physics
from tokenroof.model.cost import Billing, usd_per_million_tokens
from tokenroof.model.disagg import DEFAULT_LINK_BYTES_PER_S, Disaggregation
from tokenroof.model.speculative import SpeculativeConfig
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.advice import engine_flags
from tokenroof.serving.deployment import Deployment
from tokenroof.serving.engine.core import Server
from tokenroof.serving.plan import Slo
from tokenroof.serving.simulate import (
    OVERLOADED,
    TOO_FEW,
    ClosedLoop,
    SimResult,
    Trace,
    Workload,
    goodput_slo,
    simulate,
    simulate_disaggregated,
)
from tokenroof.style import fmt


class Simulated(NamedTuple):
    """A simulate answer: the JSON object, whether it is a sweep, and what a figure of it draws from (the sweep's
    rows, or the one run's result) for the deployment it ran."""

    data: dict[str, Any]
    sweep: bool
    rows: list[dict[str, Any]]
    result: SimResult | None
    deployment: Deployment


@dataclass(frozen=True)
class Traffic:
    """How a simulation offers load: requests per run (None: the default of the load's kind), burstiness (gamma shape),
    replicas and router, seed; for closed loops the client (saturation.closed_loop)."""

    num_requests: int | None = None
    burstiness: float = 1.0
    replicas: int = 1
    router: str = "round-robin"
    seed: int = 0
    ttft_slo_ms: float | None = None  # goodput: each request's own TTFT and TPOT
    tpot_slo_ms: float | None = None
    client: str = "staggered"

    @property
    def requests(self) -> int:
        return DEFAULT_REQUESTS if self.num_requests is None else self.num_requests


DEFAULT_REQUESTS = 10_000  # an open loop's run, unless --num-requests says


def caps_for(physics: Physics) -> tuple[int, ...]:
    """The batch caps plan searches: its doubling grid up to 256 and, where the named engine starts with a larger
    cap (vLLM V1's 1,024 on GPUs of 70 GiB or more), the doublings up to it."""
    from tokenroof.serving.plan import CAPS

    default, _ = physics.max_num_seqs()
    larger = []
    cap = max(CAPS) * 2
    while cap <= default:
        larger.append(cap)
        cap *= 2
    return (*sorted(larger, reverse=True), *CAPS)


def simulate_concurrencies(dep: Deployment, concurrencies: Sequence[int], traffic: Traffic) -> Simulated:
    """Closed loops at each concurrency (`bench --concurrency`, `vllm bench serve --max-concurrency`): one summary
    per concurrency in `points`, as a rate sweep has them."""
    from tokenroof.serving.saturation import closed_loop

    travelling, _ = dep.step_models()
    budget = dep.budget_notes(travelling)  # before the scheduler's settings are filled in
    server, dep, billing = dep.server(travelling), dep.scheduled_as(travelling), dep.billing()
    sm = travelling.step_model
    if dep.input_len is None or dep.output_len is None:
        raise TokenroofError("simulate needs the prompt and output lengths")
    if not concurrencies or any(c < 1 for c in concurrencies):
        raise ParameterError("{} takes whole numbers ≥ 1: '1,8,32'", "concurrency")
    if traffic.replicas != 1:
        raise ParameterError("{} drives one replica (a closed loop on one server); drop {}", "concurrency", "replicas")
    rows = []
    for c in concurrencies:
        loop = closed_loop(c, dep.input_len, dep.output_len, traffic.client, traffic.num_requests)
        if traffic.num_requests is not None:
            loop = replace(loop, num_requests=traffic.num_requests)
        rows.append(
            {
                "concurrency": c,
                "client": traffic.client,
                **run_one(dep.max_num_seqs, server, sm, loop, traffic, billing, dep.disaggregation())[0],
            }
        )
    slo = goodput_slo(traffic.ttft_slo_ms, traffic.tpot_slo_ms) if rows[0]["slo"] else None
    unsteady = [f"at concurrency {row['concurrency']}: {w}" for row in rows for w in row["warnings"]]
    notes = [
        *travelling.notes(dep.mean_context_tokens, dep.mean_lengths, dep.max_num_seqs),
        *dep.physics.eager_notes(),
        *speculation_notes(dep),
        *dep.prefix_notes(travelling),
        *budget,
    ]
    data = {"points": rows, "slo": slo, "step_model": sm.to_dict(), "warnings": [*notes, *unsteady]}
    return Simulated(data, True, rows, None, dep)


def simulate_rates(
    dep: Deployment, rates: Sequence[float], traffic: Traffic, trace: Path | None = None, out: Path | None = None
) -> Simulated:
    """One simulation (a rate or a trace) or a sweep over rates: the summary (or `points`), how to plot it, and
    whether it is a sweep."""
    travelling, _ = dep.step_models()
    budget = dep.budget_notes(travelling)  # before the scheduler's settings are filled in
    server, dep, billing = dep.server(travelling), dep.scheduled_as(travelling), dep.billing()
    sm = travelling.step_model
    notes = [
        *(
            travelling.notes(dep.mean_context_tokens, dep.mean_lengths, dep.max_num_seqs)
            if trace is None
            else travelling.notes(None)
        ),
        *dep.physics.eager_notes(),
        *speculation_notes(dep),
        *dep.prefix_notes(travelling),
        *budget,
    ]
    if not rates:
        raise ParameterError("{} needs at least one number", "request_rate")
    if any(not 0 < r < math.inf for r in rates):
        given = ", ".join(f"{r:g}" for r in rates)
        raise ParameterError(f"{{}} must be positive finite requests per second, got {given}", "request_rate")
    split = dep.disaggregation()
    if len(rates) > 1:
        if trace is not None or out is not None:
            raise ParameterError("{} and {} take a single {}", "trace", "out", "request_rate")
        rows = []
        for rate in rates:
            at_rate = workload(dep, rate, traffic)
            row = {"rate_req_s": rate, **run_one(dep.max_num_seqs, server, sm, at_rate, traffic, billing, split)[0]}
            if split is None:
                with_sensitivity(row, dep.max_num_seqs, server, sm, at_rate, traffic)
            rows.append(row)
        slo = goodput_slo(traffic.ttft_slo_ms, traffic.tpot_slo_ms) if rows[0]["slo"] else None
        unsteady = [f"at {row['rate_req_s']:g} req/s: {w}" for row in rows for w in row["warnings"]]
        data = {"points": rows, "slo": slo, "step_model": sm.to_dict(), "warnings": [*notes, *unsteady]}
        return Simulated(data, True, rows, None, dep)
    if trace is not None and dep.input_len is not None and dep.input_len.shared_prefix is not None:
        raise ParameterError(
            "{} replays the prompts bench sent, with the prefixes it recorded: drop {} and {}",
            "trace",
            "prefix_len",
            "num_prefixes",
        )
    offered = Trace.read(trace) if trace is not None else workload(dep, rates[0], traffic)
    if isinstance(offered, Trace) and offered.prefix is not None:
        caching = "prefix caching hits them (warm, as bench left the server)" if server.prefix_caching else "not cached"
        notes.append(
            f"the trace's prompts start with one of {offered.prefix.groups} shared prefixes of {offered.prefix.tokens} "
            f"tokens (bench's prefix_group); {caching}"
        )
    summary, result = run_one(dep.max_num_seqs, server, sm, offered, traffic, billing, split)
    if split is not None:
        notes += prefill_room_notes(dep, result)
    else:
        with_sensitivity(summary, dep.max_num_seqs, server, sm, offered, traffic)
    summary.update({"step_model": sm.to_dict(), "warnings": [*notes, *summary["warnings"]]})
    if out is not None:
        result.write(out, summary)
    return Simulated(summary, False, [], result, dep)


def prefill_room_notes(dep: Deployment, result: SimResult) -> list[str]:
    """A prefill replica holds a prompt's KV cache until it has crossed the link: a prompt longer than that pool's
    KV cache cannot be prefilled there (the simulated prefill pool does not run out of KV; say so where it would)."""
    room = dep.prefill_kv_tokens()
    if room is None:
        return []
    longest = max((s.prompt_tokens for s in result.sequences), default=0)
    if longest <= room:
        return []
    over = sum(s.prompt_tokens > room for s in result.sequences)
    return [
        f"a prefill replica holds {room:,} KV tokens, and {over} of the run's prompts are longer (up to {longest:,}): "
        "a real one could not prefill them (simulated as if it could); a larger or more parallel prefill pool can"
    ]


def speculation_notes(dep: Deployment) -> list[str]:
    """What a speculating deployment's answer rests on (Speculation.assumption); none without speculation."""
    spec = dep.speculation()
    return [] if spec is None else [spec.assumption()]


def workload(dep: Deployment, rate: float, traffic: Traffic) -> Workload:
    if dep.input_len is None or dep.output_len is None:
        raise TokenroofError("simulate needs the prompt and output lengths")
    return Workload(rate, dep.input_len, dep.output_len, traffic.requests, traffic.burstiness)


STEP_SENSITIVITY = 0.03  # the step-time error the sensitivity check tries: a bench's own noise (3% rms)
AMPLIFIED = 3.0  # TTFT p50 moving more than this many times that is worth a word
# ... and with every step that much faster it must fall by more than this many times it: a queue's response runs both
# ways, where a short light run's shift of its steps' boundaries against the arrivals runs either way by chance
AMPLIFIED_DOWN = 1.5


def ttft_sensitivity(
    max_num_seqs: int,
    server: Server,
    sm: StepModel,
    offered: Workload | Trace,
    traffic: Traffic,
    summary: dict[str, Any],
) -> str | None:
    """Near what a server carries, the queue amplifies any error in the step time into TTFT (on llama-server at 90%
    load, 6-10% of TTFT per 1% of step time): the same arrivals run again with every step STEP_SENSITIVITY slower, and
    a note where TTFT p50 and mean both move by more than AMPLIFIED times that, and both fall by more than
    AMPLIFIED_DOWN times it with every step that much faster. None below it, where the run is overloaded (its own
    warning says more), or where it holds too few requests for a p50 to move smoothly."""
    base = summary["ttft_ms"]["p50"]
    said = summary.get("warnings", [])
    if base is None or base <= 0 or any(w.startswith((OVERLOADED, TOO_FEW)) for w in said):
        return None
    slower, _ = run_one(max_num_seqs, server, sm.scaled(1 + STEP_SENSITIVITY), offered, traffic)
    moved = slower["ttft_ms"]["p50"]
    mean, moved_mean = summary["ttft_ms"]["mean"], slower["ttft_ms"]["mean"]
    if moved is None or moved / base - 1 <= AMPLIFIED * STEP_SENSITIVITY:
        return None
    # and the mean too: at light load one request's TTFT is the p50, and where the slower steps' boundaries fall
    # against its arrival moves it by a step's share (+10% on 2 runs in 8 of 50 requests at 10% load)
    if not (mean and moved_mean) or moved_mean / mean - 1 <= AMPLIFIED * STEP_SENSITIVITY:
        return None
    # both ways: 3% faster steps must lower it too (on 30 requests at a tenth of capacity 4 runs in 80 had read +9%
    # one way; near capacity the two-way read says it where the one-way did, 12 runs of 16)
    faster, _ = run_one(max_num_seqs, server, sm.scaled(1 - STEP_SENSITIVITY), offered, traffic)
    down, down_mean = faster["ttft_ms"]["p50"], faster["ttft_ms"]["mean"]
    limit = AMPLIFIED_DOWN * STEP_SENSITIVITY
    if down is None or down_mean is None or 1 - down / base <= limit or 1 - down_mean / mean <= limit:
        return None
    return (
        f"TTFT p50 {fmt(base)} ms rests on the step time: with every step {STEP_SENSITIVITY:.0%} slower it is "
        f"{fmt(moved)} ms ({moved / base - 1:+.0%}), {STEP_SENSITIVITY:.0%} faster {fmt(down)} ms "
        f"({down / base - 1:+.0%}); near what the server carries the queue amplifies any error in the steps (the "
        "fit's or the physics'), so read TTFT here as a range"
    )


def with_sensitivity(
    summary: dict[str, Any],
    max_num_seqs: int,
    server: Server,
    sm: StepModel,
    offered: Workload | Trace,
    traffic: Traffic,
) -> None:
    """`ttft_sensitivity`'s note, if any, added to the run's own warnings."""
    note = ttft_sensitivity(max_num_seqs, server, sm, offered, traffic, summary)
    if note:
        summary["warnings"] = [*summary["warnings"], note]


def run_one(
    max_num_seqs: int,
    server: Server,
    sm: StepModel,
    offered: Workload | Trace | ClosedLoop,
    traffic: Traffic,
    billing: Billing | None = None,
    disaggregation: Disaggregation | None = None,
) -> tuple[dict[str, Any], SimResult]:
    if disaggregation is not None:
        if isinstance(offered, ClosedLoop):
            raise ParameterError("a disaggregated server is simulated at request rates: drop {}", "concurrency")
        if traffic.replicas != 1:
            raise ParameterError(
                "{} and {} size a disaggregated server's pools: drop {}",
                "prefill_replicas",
                "decode_replicas",
                "replicas",
            )
        result = simulate_disaggregated(
            sm,
            offered,
            disaggregation,
            max_num_seqs,
            traffic.seed,
            server.kv_capacity_tokens,
            prefix_caching=server.prefix_caching,
            speculation=server.speculation,
            reserve_output=server.reserve_output,
        )
        summary = result.summary(traffic.ttft_slo_ms, traffic.tpot_slo_ms)
        if billing is not None and billing.known:
            summary["cost"] = result.bill(sm, billing.tp, billing.price, billing.power, billing.prefill)
        return summary, result
    result = simulate(
        sm,
        offered,
        max_num_seqs,
        traffic.seed,
        replicas=traffic.replicas,
        router=traffic.router,
        **server.settings(),
    )
    summary = result.summary(traffic.ttft_slo_ms, traffic.tpot_slo_ms)
    if billing is not None and billing.known:
        summary["cost"] = result.bill(sm, billing.tp, billing.price, billing.power)
    return summary, result


@dataclass(frozen=True)
class Search:
    """How plan searches: simulation seeds per candidate, the replica limit, processes or a Ray cluster."""

    seeds: int = 3
    max_replicas: int = 64
    workers: int | None = None
    ray_address: str | None = None
    router: str = "least-outstanding"  # the fleet's router: plan judges whole fleets behind it
    seed: int = 0  # the first of `seeds` consecutive simulation seeds

    @property
    def seed_list(self) -> tuple[int, ...]:
        return tuple(range(self.seed, self.seed + self.seeds))


@dataclass(frozen=True)
class Choices:
    """What plan compares: hardware names (empty: the deployment's own), tensor-parallel degrees, GPU-hour prices, and
    speculative decoding (None: none; given one, plan weighs the server without it and with it)."""

    hardware: tuple[str, ...] = ()
    tp: tuple[int, ...] = (1,)
    prices: tuple[float, ...] = ()
    speculation: tuple[SpeculativeConfig | None, ...] = (None,)
    # with shared prefixes plan weighs caching on and off (True, False): which wins, by how much
    prefix_caching: tuple[bool, ...] = (True,)
    disaggregate: bool = False  # also split each choice into prefill and decode pools (DistServe's question)
    kv_transfer_gb_s: float = DEFAULT_LINK_BYTES_PER_S / 1e9  # the link between the pools
    # the prefill pool's hardware to weigh for each split (Splitwise's question; empty: the deployment's own
    # prefill_hardware, else the choice's hardware); the cheapest split that meets the targets is kept
    prefill_hardware: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.prices and len(self.prices) not in (1, max(len(self.hardware), 1)):
            raise ParameterError("give one {}, or one per {} choice", "gpu_cost_per_hour", "hardware")
        bad = [p for p in self.prices if not 0 < p < math.inf]
        if bad:
            raise ParameterError(f"{{}} must be a positive price, got {bad[0]:g}", "gpu_cost_per_hour")
        if any(t < 1 for t in self.tp):
            raise ParameterError(f"{{}} must be at least 1, got {min(self.tp)}", "tp_choices")

    def price(self, chip: str | None) -> float | None:
        if not self.prices:
            return None
        return self.prices[0] if len(self.prices) == 1 or chip is None else self.prices[self.hardware.index(chip)]


def plan_choices(
    dep: Deployment,
    offered: Workload,
    slo: Slo,
    choices: Choices,
    search: Search,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """plan for each hardware × tp choice; the cheapest feasible one (GPUs, or cost with prices) is the answer."""
    import time

    from tokenroof.serving.plan import make_plan

    started = time.perf_counter()
    results, notes, unservable = [], [], []
    options = [
        (chip, degree, speculative, caching)
        for chip in choices.hardware or (dep.physics.hardware,)
        for degree in choices.tp
        for speculative in choices.speculation
        for caching in choices.prefix_caching
    ]
    if choices.disaggregate:
        splittable(dep, options, choices)
    for chip, degree, speculative, caching in options:  # a hardware, a TP degree, speculation or not, caching or not
        option = replace(
            dep.with_physics(replace(dep.physics, hardware=chip, tp=degree)),
            speculative=speculative,
            prefix_caching=caching,
        )
        why = option.physics.unservable() if option.physics.known else None
        if why is not None:  # another choice may hold the weights: this one is left out, and says why
            unservable.append(why)
            continue
        travelling, samples = option.step_models(n_samples=4)
        said = [
            *travelling.notes(
                offered.mean_context_tokens, (float(offered.input_len.mean), float(offered.output_len.mean))
            ),
            *option.physics.eager_notes(),
            *speculation_notes(option),
        ]
        said += option.prefix_notes(travelling) if len(choices.prefix_caching) == 1 else []
        said += option.budget_notes(travelling)  # the engine's scheduling, default budget and admission
        notes += [n for n in said if n not in notes]
        server = option.server(travelling)
        result = make_plan(
            [travelling.step_model, *samples],
            offered,
            slo,
            search.seed_list,
            server,
            search.max_replicas,
            search.workers,
            caps_for(option.physics),
            ray_address=search.ray_address,
            progress=progress,
            router=search.router,
        )
        entry = {**result.to_dict(), "hardware": chip, "tp": degree, "gpus_per_replica": degree}
        entry["step_model"] = travelling.step_model.to_dict()
        entry["model_samples"] = len(samples)
        spec = option.speculation()
        entry["speculation"] = None if spec is None else spec.to_dict()
        entry["prefix_caching"] = server.prefix_caching
        entry["disaggregated"] = None
        if choices.disaggregate:
            entry["disaggregated"] = best_split(
                [
                    (
                        prefill or chip,
                        disaggregated_entry(
                            replace(option, prefill_hardware=prefill),
                            [travelling.step_model, *samples],
                            offered,
                            slo,
                            search,
                            server,
                            choices,
                        ),
                    )
                    for prefill in choices.prefill_hardware or (option.prefill_hardware,)
                ]
            )
        if result.chosen is not None:
            entry["engine_flags"] = engine_flags(
                result.chosen.candidate.max_num_seqs,
                speculative,
                server.prefix_caching or server.per_slot_kv,
                option.physics.server_name,
            )
        entry["usd_per_million_output_tokens"] = None
        entry["energy"] = None
        if result.chosen is not None:
            entry["energy"] = chosen_energy(option, travelling.step_model, offered, result.chosen.candidate, server)
        if result.chosen is not None:
            entry["gpus"] = result.chosen.candidate.replicas * degree
            price = option.physics.price(choices.price(chip))  # as given, else the hardware file's
            usd = None if price is None else price.usd_per_hour
            entry["cost_per_hour"] = None if usd is None else entry["gpus"] * usd
            if usd is not None:  # the whole bill over the output tokens the offered traffic asks for
                served = offered.rate_req_s * offered.output_len.mean
                entry["usd_per_million_output_tokens"] = usd_per_million_tokens(usd, entry["gpus"], served)
        results.append(entry)
    if not results:
        raise TokenroofError(
            unservable[0] if len(unservable) == 1 else "no choice can hold the weights: " + "; ".join(unservable)
        )
    priced = all(r.get("cost_per_hour") is not None for r in results if r["feasible"])
    data = cheapest(results, [*notes, *(f"left out: {why}" for why in unservable)], priced and bool(results))
    data["search"] = {  # what the answer cost: candidate fleets simulated (every choice's), wall time, processes
        "candidates_simulated": sum(len(r["points"]) for r in results),
        "wall_s": time.perf_counter() - started,
        "workers": search.workers,
        "ray": search.ray_address is not None,
        "seeds": list(search.seed_list),  # each candidate's runs (--seed, --seeds)
    }
    return data


def chosen_energy(
    option: Deployment, sm: StepModel, offered: Workload, candidate: Any, server: Server
) -> dict[str, Any] | None:
    """The chosen replicas' power and energy per output token (cost.py's TDP × utilization model), from one run of
    the answer at the offered rate (seed 0, the central step model); None where the hardware has no TDP."""
    power = option.physics.power()
    if power is None:
        return None
    result = simulate(
        sm,
        offered,
        candidate.max_num_seqs,
        0,
        replicas=candidate.replicas,
        router=candidate.router,
        **server.settings(),
    )
    bill = result.bill(sm, option.physics.tp, None, power)
    return {
        "energy_j_per_output_token": bill["energy_j_per_output_token"],
        "power_watts_mean": bill["power_watts_mean"],
        "power": power.to_dict(),
    }


def splittable(dep: Deployment, options: list[tuple[Any, ...]], choices: Choices) -> None:
    """A split no choice can make is the flags' mistake, not one choice's (the link, the prefill pool's hardware or
    TP, a step model without the physics the KV transfer needs): raised before anything is simulated. Where some
    choice can make it, each that cannot is left out in its own entry (disaggregated_entry)."""
    first: TokenroofError | None = None
    for chip, degree, *_ in options:
        option = dep.with_physics(replace(dep.physics, hardware=chip, tp=degree))
        for prefill in choices.prefill_hardware or (option.prefill_hardware,):
            split = replace(
                option,
                prefill_hardware=prefill,
                prefill_replicas=1,
                decode_replicas=1,
                kv_transfer_gb_s=choices.kv_transfer_gb_s,
            )
            try:
                split.disaggregation()
                return
            except TokenroofError as exc:
                first = first or exc
    if first is not None:
        raise first


def disaggregated_entry(
    option: Deployment,
    models: list[StepModel],
    offered: Workload,
    slo: Slo,
    search: Search,
    server: Server,
    choices: Choices,
) -> dict[str, Any]:
    """The same choice with prefill and decode on pools of their own: the split that meets the SLOs with the fewest
    replicas (plan.plan_disaggregated), its GPUs, the link it assumed, and with both pools' prices its cost per hour
    (a prefill pool on other hardware at that hardware's price: --gpu-cost-per-hour where it is one of --hardware,
    else its file's)."""
    from tokenroof.serving.plan import plan_disaggregated

    split = replace(
        option,
        max_num_batched_tokens=server.max_num_batched_tokens,
        prefill_replicas=1,
        decode_replicas=1,
        kv_transfer_gb_s=choices.kv_transfer_gb_s,
    )
    try:
        layout = split.disaggregation()  # the search starts from each pool's bound: 1 + 1 only names the link
    except TokenroofError as exc:  # this choice's prefill pool cannot serve (its hardware or TP): it alone is out
        prefill = split.prefill_physics()
        return {
            "feasible": False,
            "gpus": None,
            "splits": [],
            "kv_transfer": {},
            "reason": exc.as_flags(),
            "prefill_tp": option.prefill_tp,
            "prefill_hardware": None if prefill is None else option.prefill_hardware,
            "cost_per_hour": None,
        }
    assert layout is not None
    answer = plan_disaggregated(
        models, offered, slo, search.seed_list, server, layout, search.max_replicas, option.max_num_seqs
    )
    replicas = answer.pop("gpus_replicas")
    prefill_tp = layout.prefill_tp or option.physics.tp
    gpus = None
    if replicas is not None:
        gpus = answer["prefill_replicas"] * prefill_tp + answer["decode_replicas"] * option.physics.tp
    answer["gpus"] = gpus
    answer["prefill_tp"] = layout.prefill_tp
    answer["prefill_hardware"] = layout.prefill_hardware
    answer["kv_transfer"] = layout.transfer.to_dict()
    answer["cost_per_hour"] = None
    prefill = split.prefill_physics() or option.physics
    decode_price = option.physics.price(choices.price(option.physics.hardware))
    given = option.prefill_gpu_cost_per_hour
    if given is None and prefill.hardware in choices.hardware:
        given = choices.price(prefill.hardware)
    prefill_price = prefill.price(given) if prefill is not option.physics else decode_price
    if gpus is not None and decode_price is not None and prefill_price is not None:
        answer["cost_per_hour"] = (
            answer["prefill_replicas"] * prefill_tp * prefill_price.usd_per_hour
            + answer["decode_replicas"] * option.physics.tp * decode_price.usd_per_hour
        )
    return answer


def cheapest(results: list[dict[str, Any]], notes: list[str], priced: bool) -> dict[str, Any]:
    feasible = [r for r in results if r["feasible"]]
    data = min(feasible, key=lambda r: r["cost_per_hour" if priced else "gpus"]) if feasible else results[0]
    data = {**data, "warnings": [*data.get("warnings", []), *notes]}
    if len(results) > 1:
        keys = ("hardware", "tp", "feasible", "gpus", "cost_per_hour", "reason")
        data["choices"] = [
            {
                **{k: r.get(k) for k in keys},
                "speculation": r["speculation"] and r["speculation"]["method"],
                "prefix_caching": r["prefix_caching"],
                **({} if r.get("disaggregated") is None else {"disaggregated": split_row(r["disaggregated"])}),
            }
            for r in results
        ]
    return data


def best_split(splits: list[tuple[str | None, dict[str, Any]]]) -> dict[str, Any]:
    """Of one choice's splits (one per prefill hardware weighed, by name), the cheapest that meets the targets: by
    cost per hour when every feasible one is priced, else by GPUs; with several, each one's outcome in
    `prefill_choices`."""
    if len(splits) == 1:
        return splits[0][1]
    feasible = [s for _, s in splits if s["feasible"] and s["gpus"] is not None]
    priced = bool(feasible) and all(s["cost_per_hour"] is not None for s in feasible)
    best = min(feasible, key=lambda s: s["cost_per_hour" if priced else "gpus"]) if feasible else splits[0][1]
    return {
        **best,
        "prefill_choices": [
            {"prefill_hardware": name, **{k: s.get(k) for k in ("feasible", "gpus", "cost_per_hour", "reason")}}
            for name, s in splits
        ],
    }


def split_row(split: dict[str, Any]) -> dict[str, Any]:
    """A choice's disaggregated split as the choices table shows it: its pools, GPUs and cost per hour."""
    return {
        "feasible": split["feasible"],
        "prefill_replicas": split.get("prefill_replicas"),
        "decode_replicas": split.get("decode_replicas"),
        "prefill_hardware": split.get("prefill_hardware"),
        "gpus": split["gpus"],
        "cost_per_hour": split.get("cost_per_hour"),
    }
