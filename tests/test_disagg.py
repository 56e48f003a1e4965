"""Disaggregated prefill and decode (model/disagg.py, simulate_disaggregated): hand-computed times, the link's queue."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tokenroof.errors import TokenroofError
from tokenroof.model.disagg import Disaggregation, KvTransfer
from tokenroof.model.prefix import chunk_attention_sq
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.simulate import Lengths, SimResult, Trace, Workload, simulate, simulate_disaggregated

SM = StepModel(t_fixed_s=1e-3, t_weights_s=5e-3, t_compute_s=2e-5, t_kv_token_s=1e-8, t_attn_token_s=1e-8)
LINK = KvTransfer(bytes_per_token=131_072, bandwidth_bytes_per_s=50e9)  # Llama-3.1-8B bf16 over one 400G NIC


@cache
def split_run() -> SimResult:
    """3 req/s of 2,000-token prompts and 100 outputs on one prefill and two decode replicas: the bills' run, simulated
    once for the module (a SimResult is read, never changed, by the tests that bill it)."""
    return simulate_disaggregated(SM, Workload(3.0, Lengths(2000), Lengths(100), 300), Disaggregation(1, 2, LINK))


def test_transfer_time_is_bytes_over_bandwidth() -> None:
    # 1,000 tokens × 128 KiB = 131 MB at 50 GB/s: 2.62 ms (+ the latency)
    assert LINK.time_s(1000) == pytest.approx(1000 * 131_072 / 50e9)
    assert KvTransfer(100.0, 1e9, latency_s=1e-3).time_s(10) == pytest.approx(1e-3 + 1e-6)
    with pytest.raises(TokenroofError, match="kv_transfer_gb_s"):
        KvTransfer(100.0, 0.0)
    with pytest.raises(TokenroofError, match="prefill_replicas"):
        Disaggregation(0, 1, LINK)


def test_a_lone_request_waits_for_prefill_transfer_and_the_decode_admission() -> None:
    """TTFT = prefill step (1,000 tokens and the first token's pass, as a colocated step that ends a prefill counts
    it, no decoding beside them) + transfer + the decode replica's admission step (the last prompt token recomputed
    over the 999 before it); then one decode step per token."""
    trace = Trace(((0.0, 1000, 10),))
    result = simulate_disaggregated(SM, trace, Disaggregation(1, 1, LINK))
    (seq,) = result.sequences
    prefill = SM.step_s(1, 1000.0, 1000, 1000**2)
    admit = SM.step_s(1, 1000.0, 1, chunk_attention_sq(1, 999))
    assert seq.first_token_s == pytest.approx(prefill + LINK.time_s(1000) + admit)
    decode = sum(SM.step_s(1, 1000.0 + k) for k in range(1, 10))
    assert seq.finished_s == pytest.approx(seq.first_token_s + decode)
    summary = result.summary()
    assert summary["disaggregation"]["prefill_replicas"] == 1
    assert summary["disaggregation"]["kv_transfer_ms"]["p50"] == pytest.approx(LINK.time_s(1000) * 1e3)


def test_transfers_queue_on_their_prefill_replicas_link() -> None:
    """Two prompts arriving together: the first is prefilled alone (the step starts as it arrives), the second in
    the next step, and its transfer waits for the first's on the replica's one link."""
    slow = KvTransfer(bytes_per_token=1e6, bandwidth_bytes_per_s=1e9)  # 1 ms a token: 0.5 s a prompt
    trace = Trace(((0.0, 500, 4), (0.0, 500, 4)))
    result = simulate_disaggregated(SM, trace, Disaggregation(1, 2, slow))
    second_prefill_ms = SM.step_s(1, 500.0, 500, 500**2) * 1e3
    waits = result.summary()["disaggregation"]["kv_transfer_ms"]
    assert waits["mean"] == pytest.approx((500.0 + 1000.0 - second_prefill_ms) / 2)
    a, b = result.sequences
    assert b.first_token_s - a.first_token_s == pytest.approx(0.5, rel=0.01)


def test_decode_steps_never_carry_long_prompts() -> None:
    """Colocated, a decode step that admits a 4,000-token prompt stalls every running sequence; disaggregated,
    the decode pool's steps carry one recomputed token per admission: the p99 step is shorter."""
    load = Workload(4.0, Lengths(4000), Lengths(200), num_requests=400)
    colocated = simulate(SM, load, 64, replicas=2).summary()
    split = simulate_disaggregated(SM, load, Disaggregation(1, 1, LINK), 64).summary()
    assert split["itl_ms"]["p99"] < 0.5 * colocated["itl_ms"]["p99"]
    assert split["tpot_ms"]["p99"] < colocated["tpot_ms"]["p99"]


def test_simulate_runs_a_disaggregated_server_from_the_command_line() -> None:
    import json

    from typer.testing import CliRunner

    from tests.schemas import validate
    from tokenroof.cli import app

    runner = CliRunner()
    base = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "4", "--input-len", "2000"]
    base += ["--output-len", "100", "--num-requests", "300"]
    result = runner.invoke(app, [*base, "--prefill-replicas", "1", "--decode-replicas", "2", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    validate("simulate", data)
    split = data["disaggregation"]
    assert (split["prefill_replicas"], split["decode_replicas"]) == (1, 2)
    assert split["kv_transfer"]["bytes_per_token"] == 131_072  # Llama-3.1-8B bf16: 32 layers × 8 heads × 128 × 2 × 2
    assert split["kv_transfer"]["bandwidth_gb_s"] == 50
    priced = json.loads(
        runner.invoke(
            app, [*base, "--prefill-replicas", "1", "--decode-replicas", "2", "--gpu-cost-per-hour", "2.5", "--json"]
        ).stdout
    )
    validate("simulate", priced)
    # the decode pool's two GPUs, every hour, over the output tokens: 2.5 × 2 / 3600 / throughput × 10^6; the prefill
    # pool's one over the prompt tokens, 2,000 for each request the window carried
    cost = priced["cost"]
    assert cost["gpus"] == 3
    assert cost["usd_per_million_output_tokens"] == pytest.approx(2.5 * 2 / 3600 / priced["throughput_tok_s"] * 1e6)
    prompts_tok_s = priced["request_throughput_req_s"] * 2000
    assert cost["usd_per_million_input_tokens"] == pytest.approx(2.5 * 1 / 3600 / prompts_tok_s * 1e6, rel=0.03)
    assert cost["pools"] == {"prefill_gpus": 1, "decode_gpus": 2}
    text = runner.invoke(
        app, [*base, "--prefill-replicas", "1", "--decode-replicas", "2", "--gpu-cost-per-hour", "2.5"]
    )
    line = " ".join(text.output.split())
    assert "US$ per million output tokens (the decode pool's 2 GPUs)" in line and "(the prefill pool's 1)" in line
    assert "W across 3 boards" in line
    for flags, message in (
        (["--prefill-replicas", "1"], "--prefill-replicas and --decode-replicas together"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--replicas", "2"], "drop --replicas"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--kv-transfer-gb-s", "0"], "--kv-transfer-gb-s"),
    ):
        bad = runner.invoke(app, [*base, *flags])
        assert bad.exit_code != 0 and message in bad.output, bad.output


@pytest.mark.heavy
def test_plan_weighs_a_disaggregated_split_against_colocation() -> None:
    """plan --disaggregate: the split it finds meets both targets in its runs, is no smaller than each pool's lower
    bound, and the answer says which layout needs fewer GPUs."""
    import json

    from typer.testing import CliRunner

    from tests.conftest import rendered
    from tests.schemas import validate
    from tokenroof.cli import app, render

    runner = CliRunner()
    args = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "4000", "--output-len", "300"]
    args += ["--rate", "8", "--ttft-slo-ms", "600", "--tpot-slo-ms", "16", "--seeds", "1", "--num-requests", "600"]
    args += ["--workers", "1", "--disaggregate"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    validate("plan", data)
    split = data["disaggregated"]
    assert split["feasible"] and split["gpus"] == split["prefill_replicas"] + split["decode_replicas"]
    assert split["ttft_ms"]["p99"] <= 600 and split["tpot_ms"]["p99"] <= 16
    assert [split["prefill_replicas"], split["decode_replicas"], True] in split["splits"]
    assert all(not feasible for p, d, feasible in split["splits"] if p + d < split["gpus"])
    assert split["kv_transfer"]["bandwidth_gb_s"] == 50
    text = rendered(render.plan_result, data)
    assert "disaggregated: " in text
    assert "wins by" in text or "the same as colocated" in text


@pytest.mark.heavy
def test_bench_on_the_disaggregated_emulator_recovers_the_transfer_and_simulate_agrees(tmp_path: Path) -> None:
    """emulate with one prefill and one decode engine, a 256 ms link (128 tokens × 1 MB at 0.5 GB/s): bench's TTFT
    at one stream, less the same server's TTFT over a link that takes no time, is the transfer within 2%; simulate fed
    bench's own arrivals predicts its TTFT and TPOT p50 within 5%. The difference, not TTFT less the two steps the
    model prices (the prefill and the decode admission), since the client and the emulator's own delivery add a few
    ms to every TTFT on this machine (a CI run: 6 ms, 2.5% of the link)."""
    from tests.emulator_process import bench_in_process
    from tokenroof.serving.emulate.server import Emulator

    fast = StepModel(t_fixed_s=10e-3, t_weights_s=10e-3, t_compute_s=1e-4, t_kv_token_s=0.0)
    link = KvTransfer(bytes_per_token=1e6, bandwidth_bytes_per_s=0.5e9)
    split = Disaggregation(1, 1, link)

    def bench(split: Disaggregation, out: Path) -> dict[str, Any]:
        emulator = Emulator(fast, disaggregation=split)
        return bench_in_process(
            emulator, concurrencies=[1], input_len=128, output_len=8, out_dir=out, requests_per_point=8
        )

    point = bench(split, tmp_path)
    free = bench(Disaggregation(1, 1, KvTransfer(bytes_per_token=1.0, bandwidth_bytes_per_s=1e15)), tmp_path / "free")
    prefill = fast.step_s(1, 128.0, 128, 128**2)
    admit = fast.step_s(1, 128.0, 1, chunk_attention_sq(1, 127))
    assert free["ttft_ms"]["p50"] == pytest.approx((prefill + admit) * 1e3, abs=10.0)  # the steps, and the few ms
    transfer_ms = point["ttft_ms"]["p50"] - free["ttft_ms"]["p50"]
    assert transfer_ms == pytest.approx(link.time_s(128) * 1e3, rel=0.02)
    trace = Trace.read(tmp_path / "requests.jsonl")
    predicted = simulate_disaggregated(fast, trace, split).summary()
    assert predicted["ttft_ms"]["p50"] == pytest.approx(point["ttft_ms"]["p50"], rel=0.05)
    assert predicted["tpot_ms"]["p50"] == pytest.approx(point["tpot_ms"]["p50"], rel=0.05)


def test_the_decode_pool_speculates() -> None:
    """With speculation the decode replicas verify γ = 3 drafts a step at acceptance 0.7 (n-gram, a free proposer):
    E = (1 − 0.7⁴) / (1 − 0.7) = 2.53 tokens a sequence a step (less a little: each admission step emits one, a
    last step stops at max_tokens), its draws come back in vLLM's counters, and the prefill pool is untouched."""
    from tokenroof.model.speculative import Speculation

    spec = Speculation(3, (0.7,))
    load = Workload(2.0, Lengths(1000), Lengths(200), 300)
    plain = simulate_disaggregated(SM, load, Disaggregation(1, 1, LINK))
    fast = simulate_disaggregated(SM, load, Disaggregation(1, 1, LINK), speculation=spec)
    assert fast.step_tokens is not None and plain.step_tokens is None
    assert fast.step_tokens.sum() / fast.step_batches.sum() == pytest.approx(spec.tokens_per_step, rel=0.05)
    summary = fast.summary()
    drawn = summary["speculation"]["drawn"]
    assert drawn["iid_acceptance"] == pytest.approx(0.7, abs=0.02)
    assert summary["tpot_ms"]["p50"] < 0.6 * plain.summary()["tpot_ms"]["p50"]
    assert fast.prefill_steps is not None and plain.prefill_steps is not None
    assert np.array_equal(fast.prefill_steps, plain.prefill_steps)  # a free proposer: the prefill pool as before


def test_a_disaggregated_bill_counts_both_pools_energy() -> None:
    """Energy: each pool's steps, on the step model that timed them (the prefill pool's own here), at the power of
    their busy and compute shares, every other second of each board idle; a bill that left out the prefill pool (one
    board, busy a good share of the time) would come out lower."""
    from tokenroof.model.cost import PowerModel, pool_joules

    power = PowerModel(tdp_watts=700.0, idle_watts=70.0, memory_activity=0.72, source="test")
    load = Workload(3.0, Lengths(2000), Lengths(100), 300)
    prefill_sm = StepModel(t_fixed_s=1e-3, t_weights_s=5e-3, t_compute_s=6e-5, t_kv_token_s=1e-8, t_attn_token_s=1e-8)
    result = simulate_disaggregated(SM, load, Disaggregation(1, 2, LINK), prefill_model=prefill_sm)
    assert result.prefill_model is prefill_sm
    w0, w1 = result.window_s()
    bill = result.bill(SM, 1, None, power)

    def pool(columns: np.ndarray) -> dict[str, np.ndarray]:
        start, duration, batch, _, context, prefill, square, *_ = columns
        inside = (start + duration >= w0) & (start + duration <= w1)
        keys = ("duration_s", "batch", "context_tokens", "prefill_tokens", "prefill_sq_tokens")
        return dict(zip(keys, (a[inside] for a in (duration, batch, context, prefill, square)), strict=True))

    assert result.prefill_steps is not None
    decode = np.array(
        [
            result.step_starts_s,
            result.step_durations_s,
            result.step_batches,
            result.step_kv_tokens,
            result.step_contexts,
            result.step_prefill,
            result.step_prefill_sq,
            result.step_passes,
            result.step_batches,
        ]
    )
    prefill_j = pool_joules(prefill_sm, pool(result.prefill_steps), w1 - w0, 1, 1, power)
    assert prefill_j != pytest.approx(pool_joules(SM, pool(result.prefill_steps), w1 - w0, 1, 1, power))
    decode_j = pool_joules(SM, pool(decode), w1 - w0, 2, 1, power)
    assert prefill_j > 1.2 * 70.0 * (w1 - w0)  # the prefill board is busy, not idle
    assert bill["power_watts_mean"] == pytest.approx((prefill_j + decode_j) / (w1 - w0))
    outputs = float(pool(decode)["batch"].sum())  # one token a running sequence a step
    assert bill["energy_j_per_output_token"] == pytest.approx((prefill_j + decode_j) / outputs)


def test_a_proposer_with_weights_prefills_beside_the_target_and_its_kv_crosses_the_link() -> None:
    """EAGLE on a disaggregated server: the head's pass over each prompt runs on the prefill replica (as colocated),
    so TTFT grows over n-gram's (a free proposer); the link carries the head's KV beside the target's (one more
    layer of Llama-3.1-8B's 32: 128 KiB → 132 KiB a token)."""
    from tokenroof.fit.physics import Physics
    from tokenroof.model.speculative import SpeculativeConfig
    from tokenroof.serving.deployment import Deployment

    physics = Physics("llama-3.1-8b", "h100-sxm")
    eagle, ngram = SpeculativeConfig("eagle", 3, (0.7,)), SpeculativeConfig("ngram", 3, (0.7,))
    assert physics.kv_bytes_per_token(ngram) == physics.kv_bytes_per_token() == 131_072
    assert physics.kv_bytes_per_token(eagle) == 131_072 * 33 / 32
    dep = Deployment(
        physics,
        input_len=Lengths(2000),
        output_len=Lengths(100),
        prefill_replicas=1,
        decode_replicas=1,
        speculative=eagle,
    )
    split = dep.disaggregation()
    assert split is not None and split.transfer.bytes_per_token == 131_072 * 33 / 32
    load = Trace(tuple((float(i), 2000, 100) for i in range(4)))
    sm = physics.step_model()
    ttft = {}
    for name, config in (("eagle", eagle), ("ngram", ngram)):
        spec = physics.speculation(config)
        result = simulate_disaggregated(sm, load, Disaggregation(1, 1, LINK), speculation=spec)
        ttft[name] = result.summary()["ttft_ms"]["p50"]
    assert ttft["eagle"] > ttft["ngram"]


@pytest.mark.heavy
def test_plan_splits_a_speculating_server_too() -> None:
    """plan --disaggregate with n-gram speculation: the speculating choice gets its split as well, and the split's
    decode pool speculates (fewer decode replicas than the same split without speculation needs)."""
    from tests.conftest import run_json

    base = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "300"]
    base += ["--rate", "12", "--tpot-slo-ms", "9", "--ttft-slo-ms", "2000", "--seeds", "1", "--num-requests", "400"]
    base += ["--workers", "1", "--disaggregate"]
    spec = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}', "--acceptance-rate", "0.7"]
    plain, fast = run_json(base), run_json([*base, *spec])
    assert plain["disaggregated"]["feasible"] and fast["disaggregated"]["feasible"]
    assert fast["speculation"]["method"] == "ngram"
    assert fast["disaggregated"]["decode_replicas"] < plain["disaggregated"]["decode_replicas"]


def test_a_prefill_pool_of_its_own_tensor_parallelism() -> None:
    """--prefill-tp: the prefill pool runs Llama-3.1-70B at TP 2 beside a TP 4 decode pool. Its prefill is slower
    than at TP 4 (about twice: compute-bound), TPOT is the decode pool's either way, the bill counts 1 × 2 + 1 × 4
    GPUs and prices prompts on the prefill pool's two; the link's bytes are the model's whatever the TP."""
    from tests.conftest import run_json

    base = ["simulate", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "4", "--rate", "1", "--input-len", "4000"]
    base += ["--output-len", "100", "--num-requests", "200", "--prefill-replicas", "1", "--decode-replicas", "1"]
    base += ["--gpu-cost-per-hour", "2"]
    runs = {tp: run_json([*base, "--prefill-tp", str(tp)]) for tp in (2, 4)}
    assert runs[2]["ttft_ms"]["p50"] > 1.5 * runs[4]["ttft_ms"]["p50"]
    assert runs[2]["tpot_ms"]["p50"] == pytest.approx(runs[4]["tpot_ms"]["p50"], rel=0.02)
    assert runs[2]["cost"]["gpus"] == 6 and runs[2]["cost"]["pools"] == {"prefill_gpus": 2, "decode_gpus": 4}
    assert runs[2]["disaggregation"]["prefill_tp"] == 2
    assert runs[2]["disaggregation"]["kv_transfer"] == runs[4]["disaggregation"]["kv_transfer"]
    assert runs[2]["cost"]["usd_per_million_input_tokens"] < runs[4]["cost"]["usd_per_million_input_tokens"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefill-tp", "2"], "--prefill-tp sizes a disaggregated server's prefill pool: give --prefill-replicas"),
        (["--prefill-tp", "0", "--prefill-replicas", "1", "--decode-replicas", "1"], "--prefill-tp must be at least 1"),
        # the prefill pool's own TP, under its own flag (it had named --tp, which the user never gave)
        (
            ["--prefill-tp", "3", "--prefill-replicas", "1", "--decode-replicas", "1"],
            "--prefill-tp 3 does not divide llama-3.1-8b's 32 attention heads",
        ),
    ],
)
def test_prefill_tp_is_refused_where_it_means_nothing(args: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from tokenroof.cli import app

    base = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "1", "--input-len", "100"]
    result = CliRunner().invoke(app, [*base, "--output-len", "10", "--num-requests", "20", *args])
    assert result.exit_code != 0 and message in " ".join(result.output.split()), result.output


def test_a_prefill_pool_on_hardware_of_its_own_is_timed_and_billed_as_that_hardware() -> None:
    """--prefill-hardware (Splitwise's prompt machines): Llama-3.1-8B decoding on A100s, prefilling on an H100. The
    prefill pool's steps are the H100's first-principles model (its prefill faster than the A100's, compute-bound:
    989 against 312 dense TFLOP/s), TPOT is the A100 pool's either way; the bill prices prompts at the H100's price
    on its one GPU and outputs at the A100's on two, by hand from the window's tokens, and names both powers."""
    from tests.conftest import run_json
    from tests.schemas import validate
    from tokenroof.model.cost import SECONDS_PER_HOUR
    from tokenroof.serving.deployment import Deployment, Physics

    base = ["simulate", "-m", "llama-3.1-8b", "-H", "a100-sxm-80gb", "--rate", "2", "--input-len", "4000"]
    base += ["--output-len", "100", "--num-requests", "300", "--prefill-replicas", "1", "--decode-replicas", "2"]
    base += ["--gpu-cost-per-hour", "1.5"]
    own = run_json([*base, "--prefill-hardware", "h100-sxm", "--prefill-gpu-cost-per-hour", "2.5"])
    same = run_json(base)
    validate("simulate", own)
    assert (
        own["disaggregation"]["prefill_hardware"] == "h100-sxm" and same["disaggregation"]["prefill_hardware"] is None
    )
    assert own["ttft_ms"]["p50"] < 0.7 * same["ttft_ms"]["p50"]  # a 4,000-token prefill: compute-bound
    assert own["tpot_ms"]["p50"] == pytest.approx(same["tpot_ms"]["p50"], rel=0.03)
    pools = own["cost"]["pools"]
    assert (pools["prefill_gpus"], pools["decode_gpus"]) == (1, 2)
    assert pools["prefill_price"]["usd_per_hour"] == 2.5 and own["cost"]["price"]["usd_per_hour"] == 1.5
    assert pools["prefill_power"]["tdp_watts"] == 700.0 and own["cost"]["power"]["tdp_watts"] == 400.0

    # by hand: the library's run, its window, its tokens
    dep = Deployment(
        Physics("llama-3.1-8b", "a100-sxm-80gb"),
        prefill_replicas=1,
        decode_replicas=2,
        prefill_hardware="h100-sxm",
        gpu_cost_per_hour=1.5,
        prefill_gpu_cost_per_hour=2.5,
    )
    split = dep.disaggregation()
    assert split is not None and split.prefill_model == Physics("llama-3.1-8b", "h100-sxm").step_model()
    result = simulate_disaggregated(dep.physics.step_model(), Workload(2.0, Lengths(4000), Lengths(100), 300), split)
    billing = dep.billing()
    assert billing.prefill is not None and billing.prefill.price is not None
    bill = result.bill(dep.physics.step_model(), 1, billing.price, billing.power, billing.prefill)
    w0, w1 = result.window_s()
    assert result.prefill_steps is not None
    start, duration, *_ = result.prefill_steps
    ended = (start + duration >= w0) & (start + duration <= w1)
    prompts = float(result.prefill_steps[5][ended].sum())
    want = 2.5 * 1 * (w1 - w0) / SECONDS_PER_HOUR / prompts * 1e6
    assert bill["usd_per_million_input_tokens"] == pytest.approx(want)
    colocated_price = result.bill(dep.physics.step_model(), 1, billing.price, billing.power)
    assert colocated_price["usd_per_million_input_tokens"] == pytest.approx(want * 1.5 / 2.5)
    # the outputs at the A100's price on the decode pool's two GPUs; the energy each pool's boards at their own power
    from tokenroof.model.cost import pool_joules
    from tokenroof.serving.simulate import window_steps

    ends = result.step_starts_s + result.step_durations_s
    outputs = float(result.step_batches[(ends >= w0) & (ends <= w1)].sum())
    assert bill["usd_per_million_output_tokens"] == pytest.approx(
        1.5 * 2 * (w1 - w0) / SECONDS_PER_HOUR / outputs * 1e6
    )
    start, duration, batch, _, context, prefill, square, *_ = result.prefill_steps
    prefill_pool = window_steps(start, duration, batch, context, prefill, square, w0, w1)
    decode_pool = window_steps(
        result.step_starts_s,
        result.step_durations_s,
        result.step_batches,
        result.step_contexts,
        result.step_prefill,
        result.step_prefill_sq,
        w0,
        w1,
    )
    assert billing.prefill.power is not None and billing.power is not None
    joules = pool_joules(split.prefill_model, prefill_pool, w1 - w0, 1, 1, billing.prefill.power)
    joules += pool_joules(dep.physics.step_model(), decode_pool, w1 - w0, 2, 1, billing.power)
    assert bill["power_watts_mean"] == pytest.approx(joules / (w1 - w0))
    assert billing.prefill.power.tdp_watts == 700 and billing.power.tdp_watts == 400


def test_plan_prices_a_split_across_two_kinds_of_gpu() -> None:
    """plan --disaggregate --prefill-hardware: the split's cost per hour is each pool's GPUs at its own price, and the
    answer's line compares the two layouts by cost (GPUs of two kinds are not counted as equals)."""
    from tests.conftest import rendered, run_json
    from tests.schemas import validate
    from tokenroof.cli import render

    args = ["plan", "-m", "llama-3.1-8b", "-H", "a100-sxm-80gb", "--input-len", "4000", "--output-len", "300"]
    args += ["--rate", "4", "--ttft-slo-ms", "600", "--tpot-slo-ms", "30", "--seeds", "1", "--num-requests", "300"]
    args += ["--workers", "1", "--disaggregate", "--prefill-hardware", "h100-sxm", "--gpu-cost-per-hour", "1.5"]
    data = run_json([*args, "--prefill-gpu-cost-per-hour", "2.5"])
    validate("plan", data)
    split = data["disaggregated"]
    assert split["feasible"] and split["prefill_hardware"] == "h100-sxm"
    assert split["cost_per_hour"] == pytest.approx(split["prefill_replicas"] * 2.5 + split["decode_replicas"] * 1.5)
    text = rendered(render.plan_result, data)
    assert f"{split['cost_per_hour']:.2f} per hour against colocated's {data['cost_per_hour']:.2f}" in text
    assert "prefill (h100-sxm)" in text
    cheaper = "disaggregated" if split["cost_per_hour"] < data["cost_per_hour"] else "colocated"
    assert f"{cheaper} costs" in text


@pytest.mark.heavy
def test_plan_keeps_each_choices_split_and_a_choice_whose_prefill_pool_cannot_serve_is_out_alone() -> None:
    """Several --hardware choices with --prefill-hardware: every choice's split is in its row (pools, GPUs, cost), so
    an A100 decode pool behind H100 prompt machines is not lost when the cheapest colocated choice is the H100; and a
    prefill pool that cannot hold the weights (Llama-2-13B on one A10G) rules out that choice's split, not the plan."""
    from tests.conftest import rendered, run_json
    from tests.schemas import validate
    from tokenroof.cli import render

    args = ["plan", "-m", "llama-3.1-8b", "-H", "a100-sxm-80gb,h100-sxm", "--gpu-cost-per-hour", "1.5,2.5"]
    args += ["--input-len", "4000", "--output-len", "300", "--rate", "4", "--ttft-slo-ms", "600", "--tpot-slo-ms", "30"]
    args += [
        "--seeds",
        "1",
        "--num-requests",
        "300",
        "--workers",
        "1",
        "--disaggregate",
        "--prefill-hardware",
        "h100-sxm",
    ]
    data = run_json(args)
    validate("plan", data)
    rows = {c["hardware"]: c["disaggregated"] for c in data["choices"]}
    a100 = rows["a100-sxm-80gb"]
    assert a100["feasible"] and a100["prefill_hardware"] == "h100-sxm"
    assert a100["cost_per_hour"] == pytest.approx(a100["prefill_replicas"] * 2.5 + a100["decode_replicas"] * 1.5)
    assert rows["h100-sxm"]["prefill_hardware"] is None  # its prefill pool is its own hardware
    assert "(h100-sxm) + " in rendered(render.plan_result, data)

    small = ["plan", "-m", "llama-2-13b", "-H", "h100-sxm", "--tp-choices", "1,2", "--input-len", "500"]
    small += ["--output-len", "50", "--rate", "1", "--seeds", "1", "--num-requests", "100", "--workers", "1"]
    small += ["--disaggregate", "--prefill-hardware", "a10g"]
    data = run_json(small)
    validate("plan", data)
    rows = {c["tp"]: c["disaggregated"] for c in data["choices"]}
    assert not rows[1]["feasible"] and rows[2]["feasible"]


def test_the_bill_and_the_verdict_say_what_is_known_of_each_pool() -> None:
    """The bill's line names each pool's price, or that the prefill hardware has none; plan's verdict between GPUs
    of two kinds is by cost, in the right direction, the same when equal, and refused without both prices."""
    from tokenroof.cli.render import bill_line, layout_line

    a100 = {"usd_per_hour": 1.5, "source": "given"}
    cost = {
        "usd_per_million_output_tokens": 0.37,
        "usd_per_million_input_tokens": None,
        "energy_j_per_output_token": None,
        "power_watts_mean": None,
        "price": a100,
        "power": None,
        "gpus": 3,
        "pools": {"prefill_gpus": 1, "decode_gpus": 2, "prefill_price": None, "prefill_power": None},
    }
    line = bill_line(cost)
    assert "1.5 a decode GPU-hour (given)" in line and "the prefill hardware has no price" in line
    colocated = {"feasible": True, "gpus": 10, "cost_per_hour": 15.0, "slo": {"statistic": "p99"}}
    split = {"feasible": True, "prefill_replicas": 2, "decode_replicas": 2, "gpus": 4, "prefill_hardware": "h100-sxm"}
    split |= {"ttft_ms": {"p99": 200.0}, "tpot_ms": {"p99": 20.0}}
    assert "disaggregated costs 47% less" in layout_line(colocated, {**split, "cost_per_hour": 8.0})
    assert "colocated costs 20% less" in layout_line(colocated, {**split, "cost_per_hour": 18.75})
    assert "the same as colocated's" in layout_line(colocated, {**split, "cost_per_hour": 15.0})
    assert "cannot be compared" in layout_line(colocated, {**split, "cost_per_hour": None})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefill-hardware", "h100-sxm"], "--prefill-hardware sizes a disaggregated server's prefill pool"),
        (
            ["--prefill-gpu-cost-per-hour", "2"],
            "--prefill-gpu-cost-per-hour prices a prefill pool on --prefill-hardware",
        ),
        (
            ["--prefill-hardware", "a100-sxm-80gb", "--prefill-gpu-cost-per-hour", "2"],
            "give its price in --gpu-cost-per-hour",
        ),
        (["--prefill-hardware", "h100-sxm", "--prefill-gpu-cost-per-hour", "-1"], "must be a positive number, got -1"),
        (
            ["--prefill-hardware", "a10g", "--prefill-replicas", "1", "--decode-replicas", "1", "-m", "llama-2-13b"],
            "the prefill pool (a10g ×1, --prefill-hardware/--prefill-tp)",
        ),
        (
            ["--prefill-hardware", "h999", "--prefill-replicas", "1", "--decode-replicas", "1"],
            "unknown hardware 'h999'",
        ),
    ],
)
def test_prefill_hardware_is_refused_where_it_means_nothing(args: list[str], message: str) -> None:
    from tests.conftest import run_cli

    base = ["simulate", "-m", "llama-3.1-8b", "-H", "a100-sxm-80gb", "--rate", "1", "--input-len", "100"]
    result = run_cli([*base, "--output-len", "10", "--num-requests", "20", *args])
    assert result.exit_code != 0 and message in " ".join(result.output.split()), result.output


@pytest.mark.heavy
def test_plan_weighs_several_prefill_hardware_and_keeps_the_cheapest_split() -> None:
    """plan --prefill-hardware a100-sxm-80gb,h100-sxm (Splitwise's question, asked of every choice): each choice's
    split is tried with each prefill hardware, every outcome is in `prefill_choices`, and the split kept is the
    cheapest that meets the targets (both priced by --gpu-cost-per-hour beside --hardware)."""
    from tests.conftest import rendered, run_json
    from tests.schemas import validate
    from tokenroof.cli import render

    args = ["plan", "-m", "llama-3.1-8b", "-H", "a100-sxm-80gb,h100-sxm", "--gpu-cost-per-hour", "1.5,2.5"]
    args += ["--input-len", "4000", "--output-len", "300", "--rate", "4", "--ttft-slo-ms", "600", "--tpot-slo-ms", "30"]
    args += ["--seeds", "1", "--num-requests", "300", "--workers", "1", "--disaggregate"]
    data = run_json([*args, "--prefill-hardware", "a100-sxm-80gb,h100-sxm"])
    validate("plan", data)
    split = data["disaggregated"]
    weighed = {c["prefill_hardware"]: c for c in split["prefill_choices"]}
    assert set(weighed) == {"a100-sxm-80gb", "h100-sxm"}
    met = [c for c in weighed.values() if c["feasible"] and c["cost_per_hour"] is not None]
    assert met and split["cost_per_hour"] == min(c["cost_per_hour"] for c in met)
    assert "prefill hardware weighed: a100-sxm-80gb" in rendered(render.plan_result, data)
    from tests.conftest import run_cli

    refused = run_cli([*args, "--prefill-hardware", "a100-sxm-80gb,h100-sxm", "--prefill-gpu-cost-per-hour", "2"])
    assert refused.exit_code != 0 and "prices one prefill hardware" in " ".join(refused.output.split())


def test_a_disaggregated_bill_without_power_models_prices_the_pools_and_draws_no_energy() -> None:
    """Prices without power models (--gpu-cost-per-hour on hardware whose file gives no power): each pool is priced,
    the energy and power are None, and a prefill pool on hardware of its own states its price (or None) and no power."""
    from tokenroof.model.cost import Billing, Price

    result = split_run()
    decode_price, prefill_price = Price(2.0, "given"), Price(1.0, "given")
    bill = result.bill(SM, 1, decode_price, None, Billing(1, prefill_price, None))
    assert bill["power"] is None and bill["power_watts_mean"] is None and bill["energy_j_per_output_token"] is None
    assert bill["price"] == decode_price.to_dict() and bill["gpus"] == 3
    assert bill["pools"] == {
        "prefill_gpus": 1,
        "decode_gpus": 2,
        "prefill_price": prefill_price.to_dict(),
        "prefill_power": None,
    }
    assert bill["usd_per_million_output_tokens"] > 0 and bill["usd_per_million_input_tokens"] > 0
    unpriced = result.bill(SM, 1, decode_price, None, Billing(1, None, None))  # the prefill pool's price unknown
    assert unpriced["pools"]["prefill_price"] is None and unpriced["usd_per_million_input_tokens"] is None


def test_a_disaggregated_bill_scales_with_the_boards_and_draws_no_energy_without_the_prefill_pools_power() -> None:
    """At --tp 2 each replica is two boards: the prompts' and the outputs' prices per million tokens double (same
    steps, same window), and the GPUs counted are 1·2 + 2·2. A decode pool with a power model beside a prefill pool on
    hardware of its own without one: the energy cannot be told (None), the prices still can. A run whose window is
    under a second is billed like any other."""
    from tokenroof.model.cost import Billing, PowerModel, Price

    result = split_run()
    price = Price(2.0, "given")
    one, two = result.bill(SM, 1, price, None), result.bill(SM, 2, price, None)
    assert two["usd_per_million_output_tokens"] == pytest.approx(2 * one["usd_per_million_output_tokens"])
    assert two["usd_per_million_input_tokens"] == pytest.approx(2 * one["usd_per_million_input_tokens"])
    assert (one["gpus"], two["gpus"]) == (3, 6) and two["pools"] == {"prefill_gpus": 2, "decode_gpus": 4}
    power = PowerModel(tdp_watts=700.0, idle_watts=70.0, memory_activity=0.72, source="test")
    half = result.bill(SM, 1, price, power, Billing(1, Price(1.0, "given"), None))
    assert half["energy_j_per_output_token"] is None and half["power_watts_mean"] is None
    assert (
        half["power"] == power.to_dict()
        and half["usd_per_million_output_tokens"] == one["usd_per_million_output_tokens"]
    )
    short = simulate_disaggregated(SM, Workload(50.0, Lengths(200), Lengths(8), 20), Disaggregation(1, 1, LINK))
    w0, w1 = short.window_s()
    assert 0 < w1 - w0 < 1
    brief = short.bill(SM, 1, price, power)
    assert brief["usd_per_million_output_tokens"] > 0 and brief["usd_per_million_input_tokens"] > 0
    assert brief["energy_j_per_output_token"] > 0 and brief["power_watts_mean"] > 70.0


def test_two_prefill_replicas_take_two_prompts_at_once_and_the_pools_busy_share_is_by_hand() -> None:
    """Two prompts arriving together on two prefill replicas: each goes to the idle one (the fewest outstanding), so
    both are prefilled at once and reach their first token together; the prefill pool's busy share is its step time
    over the run's span (first arrival to last finish) and its replicas: 2 × prefill / span / 2. The decode pool's
    KV cache is each replica's times their number; a trace's history and window pass to the result."""
    trace = Trace(((0.0, 1000, 10), (0.0, 1000, 10)), history=0, window_s=(0.0, 5.0))
    result = simulate_disaggregated(SM, trace, Disaggregation(2, 2, LINK), kv_capacity_tokens=4096)
    a, b = result.sequences
    prefill = SM.step_s(1, 1000.0, 1000, 1000**2)
    assert a.first_token_s == pytest.approx(b.first_token_s)
    assert a.prefilled_s == pytest.approx(prefill) and b.prefilled_s == pytest.approx(prefill)
    span = max(a.finished_s, b.finished_s)
    summary = result.summary()["disaggregation"]
    assert summary["prefill_busy_fraction"] == pytest.approx(2 * prefill / span / 2)
    assert summary["kv_transfer_ms"]["p99"] == pytest.approx(LINK.time_s(1000) * 1e3)  # each on its own link
    assert result.kv_capacity_tokens == 2 * 4096 and result.replicas == 2
    assert result.measured_window_s == (0.0, 5.0) and result.first_measured == 0
    one = simulate_disaggregated(SM, trace, Disaggregation(1, 2, LINK))
    assert one.sequences[1].prefilled_s == pytest.approx(2 * prefill, rel=1e-3)  # one replica: one after the other
    assert one.kv_capacity_tokens is None and one.measured_window_s == (0.0, 5.0)
    assert one.summary()["disaggregation"]["prefill_busy_fraction"] == pytest.approx(
        float(one.prefill_steps[1].sum()) / max(s.finished_s for s in one.sequences)
    )
    # the first record as the server's earlier traffic: run, not measured (the window opens at the second)
    later_trace = Trace(((0.0, 1000, 10), (30.0, 1000, 10)), history=1)
    later = simulate_disaggregated(SM, later_trace, Disaggregation(1, 1, LINK))
    assert later.first_measured == 1 and later.measured_window_s is None
    plain = simulate_disaggregated(SM, replace(later_trace, history=0), Disaggregation(1, 1, LINK))
    assert later.summary()["window_start_s"] == 30.0 and plain.summary()["window_start_s"] < 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kv-transfer-gb-s", "0"], "--kv-transfer-gb-s must be a positive finite bandwidth, got 0 GB/s"),
        (["--prefill-hardware", "h999"], "unknown hardware 'h999'"),
        (["--prefill-tp", "3"], "--prefill-tp 3 does not divide llama-3.1-8b's 32 attention heads"),
    ],
)
def test_a_split_no_choice_can_make_is_the_flags_mistake(args: list[str], message: str) -> None:
    """plan --disaggregate: where no choice's split can be built the flags are wrong, said before anything is
    simulated, exit 2 (it had printed the error in place of the split and the colocated answer after it, exit 0); a
    choice that alone cannot serve is left out in its own entry (the heavy test beside)."""
    from tests.conftest import run_cli

    base = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--num-requests", "50", "--seeds", "1", "--workers", "1"]
    result = run_cli([*base, "--disaggregate", *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_a_prefill_pools_cap_fits_its_budget() -> None:
    """A prefill replica's sequences end with their prompts, so its budget need not exceed a decode batch: 512
    prompt tokens a step run (it had asked the budget to exceed a cap of 1,024 the user never set)."""
    link = KvTransfer(131072, 50e9)
    workload = Workload(4.0, Lengths(600), Lengths(20), 60)
    result = simulate_disaggregated(SM, workload, Disaggregation(1, 1, link, 512), 256)
    assert len(result.sequences) == 60 and all(s.finished_s is not None for s in result.sequences)
    assert max(result.prefill_steps[5]) <= 512  # each prefill step's prompt tokens within the budget
