"""plan: cheapest feasible configuration, its binding constraint and interval; infeasible targets explained."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable

import pytest

from tests.conftest import rendered, run_cli, run_json
from tests.schemas import validate
from tokenroof.cli import render
from tokenroof.errors import TokenroofError
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.plan import SETTLE_FACTOR, Candidate, Outcome, Plan, Slo, make_plan, settled_best
from tokenroof.serving.simulate import Lengths, Workload

SM = StepModel(t_fixed_s=2e-3, t_weights_s=8e-3, t_compute_s=50e-6, t_kv_token_s=0.0, t_seq_s=30e-6)
WORKLOAD = Workload(30, Lengths(200, "lognormal", 0.5), Lengths(100, "lognormal", 0.5), num_requests=1500)


def test_cheapest_feasible_configuration() -> None:
    plan = make_plan([SM], WORKLOAD, Slo(ttft_ms=500, tpot_ms=20), seeds=(0, 1), workers=1)
    data = plan.to_dict()
    assert data["feasible"] and data["slo"] == {"statistic": "p99", "ttft_ms": 500, "tpot_ms": 20}
    chosen = data["chosen"]
    assert chosen["ttft_ms_high"]["p99"] <= 500 and chosen["tpot_ms_high"]["p99"] <= 20
    assert chosen["ttft_ms_low"]["p99"] <= chosen["ttft_ms"]["p99"] <= chosen["ttft_ms_high"]["p99"]  # over seeds
    fewer = [t for t in data["points"] if t["replicas"] < chosen["replicas"]]
    assert all(not t["feasible"] for t in fewer)


def test_infeasible_tpot_says_what_is_closest_and_why() -> None:
    workload = dataclasses.replace(WORKLOAD, num_requests=600)  # the step's floor: no length changes it
    plan = make_plan([SM], workload, Slo(ttft_ms=500, tpot_ms=5), seeds=(0,), workers=1, max_replicas=4)
    data = plan.to_dict()
    assert not data["feasible"] and data["chosen"] is None
    assert "closest" in data["reason"] and "TPOT p99 (batch size)" in data["reason"]
    assert "the step itself is too slow" in data["reason"] and "even at max_num_seqs 8" in data["reason"]
    with pytest.raises(TokenroofError, match="SLOs must be positive"):
        make_plan([SM], WORKLOAD, Slo(0, 5))


def test_cli_plan_from_a_preset() -> None:
    data = run_json(
        [
            "plan",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm",
            "--rate",
            "5",
            "--num-requests",
            "600",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--gpu-cost-per-hour",
            "2",
        ]
    )
    assert data["feasible"] and data["chosen"]["replicas"] >= 1
    assert data["cost_per_hour"] == 2 * data["chosen"]["replicas"]
    result = run_cli(["plan", "--rate", "5"])
    assert result.exit_code == 2 and "give one step-model source" in result.stderr


@pytest.mark.ray
def test_plan_on_a_local_ray_cluster() -> None:
    pytest.importorskip("ray")
    processes = make_plan([SM], WORKLOAD, Slo(ttft_ms=500, tpot_ms=20), seeds=(0,), workers=1).to_dict()
    on_ray = make_plan([SM], WORKLOAD, Slo(ttft_ms=500, tpot_ms=20), seeds=(0,), ray_address="local")
    assert on_ray.to_dict()["chosen"] == processes["chosen"]  # same search, same answer


@pytest.mark.usefixtures("without_ray")
def test_ray_missing_is_a_clear_error() -> None:
    with pytest.raises(TokenroofError, match="pip install 'tokenroof\\[ray\\]'"):
        make_plan([SM], WORKLOAD, Slo(500, 20), seeds=(0,), ray_address="local")


@pytest.mark.heavy
def test_cli_plan_compares_hardware_and_tp_by_cost() -> None:
    data = run_json(
        [
            "plan",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm,a100-sxm-80gb",
            "--tp-choices",
            "1,2",
            "--rate",
            "8",
            "--num-requests",
            "300",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--gpu-cost-per-hour",
            "10,1",
        ]
    )
    choices = data["choices"]
    assert [(c["hardware"], c["tp"]) for c in choices] == [
        ("h100-sxm", 1),
        ("h100-sxm", 2),
        ("a100-sxm-80gb", 1),
        ("a100-sxm-80gb", 2),
    ]
    cheapest = min((c for c in choices if c["feasible"]), key=lambda c: c["cost_per_hour"])
    assert (data["hardware"], data["tp"]) == (cheapest["hardware"], cheapest["tp"])
    assert data["cost_per_hour"] == cheapest["cost_per_hour"]
    result = run_cli(["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm,l40s", "--gpu-cost-per-hour", "1,2,3"])
    assert result.exit_code == 2 and "one per --hardware choice" in result.stderr


@pytest.mark.heavy
def test_advise_plan_and_simulate_give_one_answer_for_one_deployment() -> None:
    """advise once said 11,936 tok/s at cap 371 (decode only) where simulate measured 6,189 and plan's text used the
    decode-only figure while its simulation saturated near 6,150: now all three run the same scheduler."""
    from tests.conftest import run_json

    deployment = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "300"]
    advice = run_json(["advise", *deployment, "--tpot-slo-ms", "40", "--ttft-slo-ms", "1000"])
    at_cap = advice["at_cap"]
    cap, tpot, thr = advice["max_num_seqs"], at_cap["tpot_ms"]["p99"], at_cap["throughput_tok_s"]
    assert advice["slo"]["statistic"] == "p99" and tpot <= 40
    assert 0.4 < thr / 11_936 < 0.7  # prefill included: far below the decode-only figure
    # simulate at that cap under more load than it can serve: the same steady state
    sim = run_json(
        [
            "simulate",
            *deployment,
            "--max-num-seqs",
            str(cap),
            "--rate",
            f"{2 * thr / 300:.1f}",
            "--num-requests",
            "4000",
        ]
    )
    assert sim["throughput_tok_s"] == pytest.approx(thr, rel=0.05)
    assert sim["tpot_ms"]["p99"] == pytest.approx(tpot, rel=0.05)
    # plan's figure for one replica is the same quantity (it does not depend on the length of the search's runs)
    slo = ["--ttft-slo-ms", "1000", "--tpot-slo-ms", "50"]
    plan = run_json(
        ["plan", *deployment, "--rate", "30", *slo, "--seeds", "1", "--num-requests", "400", "--workers", "1"]
    )
    assert plan["reference"]["throughput_tok_s"] == pytest.approx(sim["throughput_tok_s"], rel=0.05)


def test_a_load_past_what_the_search_may_try_is_said_not_a_crash() -> None:
    """3,000 req/s of 100-token outputs needs more replicas than 2 kept full can give: with --max-replicas 2
    nothing is simulated and the answer says how many it takes (it had raised from max() of no candidates)."""
    heavy = Workload(3000, Lengths(200), Lengths(100), num_requests=100)
    plan = make_plan([SM], heavy, Slo(ttft_ms=500, tpot_ms=20), seeds=(0,), workers=1, max_replicas=2)
    data = plan.to_dict()
    assert not data["feasible"] and data["points"] == [] and data["chosen"] is None
    assert re.search(r"takes at least \d+ replicas \(one kept full gives at most [\d,]+, at max_num_seqs \d+, prefill "
                     r"included\), past --max-replicas 2$", data["reason"]), data["reason"]  # fmt: skip
    args = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--request-rate", "50", "--max-replicas", "2"]
    said = run_cli([*args, "--ttft-slo-ms", "1000", "--tpot-slo-ms", "50", "--json"])
    assert said.exit_code == 1 and "Traceback" not in said.output
    validate("plan", json.loads(said.stdout))


def test_an_unreachable_ttft_stops_the_search_once_the_queue_is_gone() -> None:
    """A TTFT target under one prompt's prefill: more replicas lower TTFT only while they shorten the queue, so the
    search stops where a replica more gains under 5% (it had simulated every count up to --max-replicas, then named
    that limit, and called the binding queueing)."""
    workload = dataclasses.replace(WORKLOAD, num_requests=600)  # the same stop as on 1,500 (searched 1–5)
    plan = make_plan([SM], workload, Slo(ttft_ms=0.5, tpot_ms=50), seeds=(0,), workers=1, max_replicas=64)
    data = plan.to_dict()
    assert not data["feasible"] and max(p["replicas"] for p in data["points"]) < 10
    assert "TTFT stopped falling with more replicas at" in data["reason"]
    assert data["reason"].endswith("bound by TTFT p99 (prefill and step, no queue)")
    # each row by its own runs: the widest cap runs each prompt at once, a small one keeps it waiting for a place
    # (rows had all said queueing while the reason said the queue was gone)
    last = [p for p in data["points"] if p["replicas"] == max(q["replicas"] for q in data["points"])]
    widest, narrowest = max(last, key=lambda p: p["max_num_seqs"]), min(last, key=lambda p: p["max_num_seqs"])
    assert widest["binding"] == "TTFT p99 (prefill and step, no queue)"
    assert narrowest["binding"] == "TTFT p99 (queueing)" and narrowest["ttft_ms"]["p99"] > 2 * widest["ttft_ms"]["p99"]


def test_an_overloaded_candidate_is_never_the_answer() -> None:
    """A run that completed fewer requests than arrived meets a loose TTFT target only because its run ended: not
    feasible whatever its latencies, and its binding says the load."""
    slo = Slo(ttft_ms=3_600_000, tpot_ms=20)
    over = Outcome(Candidate(1, 8), 300)
    run = {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 1.0}
    summary = {"ttft_ms": run, "tpot_ms": run, "throughput_tok_s": 1.0, "preemptions": 0}
    over.add({**summary, "warnings": ["overloaded: 19.7 req/s offered, 3.38 carried: ..."]})
    assert not over.feasible(slo) and over.binding(slo) == "load (overloaded: its queue grows)"
    fine = Outcome(Candidate(1, 8), 300)
    fine.add({**summary, "warnings": ["few stretches: ..."]})
    assert fine.feasible(slo) and not fine.overloaded


def test_a_ttft_binds_by_queueing_where_half_of_it_passed_before_its_prompt_ran() -> None:
    """simulate's queue wait (vLLM's queue time: until a step first runs part of the prompt) at half the TTFT or more
    reads as queueing; less, as the steps that ran the prompt. Runs that did not say their wait: queueing."""
    slo = Slo(ttft_ms=100, tpot_ms=50)
    ttft, tpot = {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 300.0}, {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 10.0}
    summary = {"ttft_ms": ttft, "tpot_ms": tpot, "throughput_tok_s": 1.0, "preemptions": 0, "warnings": []}
    for wait_p99, cause in ((150.0, "queueing"), (149.0, "prefill and step, no queue")):
        o = Outcome(Candidate(1, 8), 300)
        o.add({**summary, "queue_wait_ms": {**ttft, "p99": wait_p99}})
        assert o.binding(slo) == f"TTFT p99 ({cause})"
    unsaid = Outcome(Candidate(1, 8), 300)
    unsaid.add(summary)
    assert unsaid.binding(slo) == "TTFT p99 (queueing)"
    assert unsaid.binding(Slo(ttft_ms=1000, tpot_ms=5)) == "TPOT p99 (batch size)"
    # meeting both, none binds yet: the nearest, and how near (10 ms of 20; 300 ms of 1,000 is farther)
    assert unsaid.binding(Slo(ttft_ms=1000, tpot_ms=20)) == "nearest: TPOT p99 (batch size), 50% of target"
    assert unsaid.binding(Slo(ttft_ms=400, tpot_ms=40)) == "nearest: TTFT p99 (queueing), 75% of target"
    # floored, not rounded: 300 ms of 300.9 meets its target and reads 99%, never 100%
    assert unsaid.binding(Slo(ttft_ms=300.9, tpot_ms=40)) == "nearest: TTFT p99 (queueing), 99% of target"


def outcome(cap: int, ttft_p99: float, requests: int = 1000, unsteady: bool = False) -> Outcome:
    """One run of 1 replica at `cap` with TPOT p99 10 ms and this TTFT p99."""
    run = {"mean": 1.0, "p50": 1.0, "p90": 1.0}
    return Outcome(
        Candidate(1, cap),
        requests,
        [{**run, "p99": ttft_p99}],
        [{**run, "p99": 10.0}],
        [1.0],
        [0],
        ["no steady state: the running batch grew"] if unsteady else [],
    )


def test_a_winner_that_had_not_settled_runs_again_and_is_judged_on_the_longer_runs() -> None:
    slo = Slo(ttft_ms=500, tpot_ms=20)
    calls: list[tuple[int, int]] = []

    def longer_from(results: dict[tuple[int, int], Outcome]) -> Callable[[Outcome], Outcome]:
        def longer(o: Outcome) -> Outcome:
            calls.append((o.candidate.max_num_seqs, o.requests))
            return results[(o.candidate.max_num_seqs, o.requests * SETTLE_FACTOR)]

        return longer

    # cap 256 has the most headroom (TTFT 100 of 500) but had not settled; with 4× the requests it reads 600 ms:
    # infeasible, so cap 128 (settled, 200 ms) wins; the longer run replaces the short one in what was tried
    short = [outcome(256, 100.0, unsteady=True), outcome(128, 200.0), outcome(64, 900.0)]
    tried = list(short)
    grown = {(256, 4000): outcome(256, 600.0, 4000)}
    best = settled_best(short, tried, slo, longer_from(grown), 16000)
    assert best is short[1] and calls == [(256, 1000)]
    assert tried[0] is grown[(256, 4000)] and tried[1:] == short[1:]
    # settled only at 16×: judged there (still feasible)
    calls.clear()
    short = [outcome(256, 100.0, unsteady=True), outcome(128, 200.0)]
    grown = {(256, 4000): outcome(256, 150.0, 4000, unsteady=True), (256, 16000): outcome(256, 180.0, 16000)}
    best = settled_best(short, list(short), slo, longer_from(grown), 16000)
    assert best is grown[(256, 16000)] and calls == [(256, 1000), (256, 4000)]
    # still unsettled at the most requests: kept (its warning says so), no third run
    calls.clear()
    grown = {(256, 4000): outcome(256, 150.0, 4000, unsteady=True), (256, 16000): outcome(256, 180.0, 16000, True)}
    best = settled_best(short, list(short), slo, longer_from(grown), 16000)
    assert best is grown[(256, 16000)] and len(calls) == 2
    plan = Plan(slo, best, [best], "")
    assert plan.warnings()[0].startswith("1 × max_num_seqs 256: 1 of its runs had not settled even with 16,000")
    # nothing feasible: None, and nothing runs again
    calls.clear()
    assert settled_best([outcome(8, 900.0, unsteady=True)], [], slo, longer_from({}), 16000) is None and not calls


@pytest.mark.heavy
def test_plan_judges_the_fleet_behind_the_router_given() -> None:
    """plan --router: each candidate fleet is simulated behind that router and the answer says which; a random
    spread (Poisson at each replica) needs at least as much as round-robin (each replica's arrivals smoothed)."""
    base = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "300"]
    base += ["--rate", "40", "--ttft-slo-ms", "500", "--tpot-slo-ms", "30", "--seeds", "1", "--num-requests", "800"]
    base += ["--workers", "1"]
    answers = {r: run_json([*base, "--router", r]) for r in ("round-robin", "random")}
    for router, answer in answers.items():
        validate("plan", answer)
        assert answer["router"] == router and answer["feasible"]
        search = answer["search"]  # how long the answer took, and over how many candidate fleets
        assert search["candidates_simulated"] == len(answer["points"]) and search["wall_s"] > 0
        assert search["workers"] == 1 and search["ray"] is False
    assert answers["random"]["gpus"] >= answers["round-robin"]["gpus"]
    assert "behind a random router" in rendered(render.plan_result, answers["random"])


def test_plan_at_a_terminal_says_how_long_it_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a terminal plan ends with its search's size and time (the JSON's `search`); on a pipe, where its text is
    compared run to run (the README's examples), it does not."""
    from rich.console import Console

    args = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "5", "--seeds", "1", "--num-requests", "300"]
    args += ["--workers", "1"]
    assert "searched" not in run_cli(args).output
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    said = run_cli(args).stderr
    assert re.search(r"searched \d+ candidate fleets in \d+\.\d s", said), said


def test_plan_says_when_the_engine_prefills_in_steps_of_their_own() -> None:
    from tests.conftest import run_json

    args = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "tgi", "--rate", "2", "--seeds", "1"]
    args += ["--num-requests", "300", "--workers", "1"]  # what the warnings say does not depend on the search's length
    data = run_json(args)
    # TGI's prefill step holds --max-batch-prefill-tokens, 4,096 by default
    said = "prompts prefilled in steps of their own (at most 4,096 prompt tokens a step: tgi's default, "
    assert (
        said + "--max-num-batched-tokens to change it), the running sequences waiting: tgi's scheduling"
        in (data["warnings"])
    )
    wider = run_json([*args, "--max-num-batched-tokens", "8192"])  # TGI --max-batch-prefill-tokens 8192
    assert "prompts prefilled in steps of their own (at most 8,192 prompt tokens a step), the running " in " ".join(
        wider["warnings"]
    )


def test_plan_searches_the_caps_its_prompt_budget_holds() -> None:
    """A step's budget holds a token of each running sequence: plan searches the caps under it (a 100-token budget:
    64 and below), and a budget under every cap is named by its flag (it had failed on the first cap, naming
    max_num_seqs, which plan has no flag for)."""
    from tokenroof.errors import ParameterError
    from tokenroof.serving.engine.core import Server

    light = dataclasses.replace(WORKLOAD, rate_req_s=5, num_requests=300)
    plan = make_plan([SM], light, Slo(ttft_ms=2000, tpot_ms=50), (0,), Server(max_num_batched_tokens=100), workers=1)
    assert {p["max_num_seqs"] for p in plan.to_dict()["points"]} <= {64, 32, 16, 8} and plan.chosen is not None
    with pytest.raises(ParameterError) as refused:
        make_plan([SM], light, Slo(ttft_ms=2000, tpot_ms=50), (0,), Server(max_num_batched_tokens=8), workers=1)
    assert refused.value.as_flags().startswith("--max-num-batched-tokens 8 holds none of the batch caps plan searches")
