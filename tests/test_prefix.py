"""Prefix caching (model/prefix.py, the scheduler's cache): hand-computed hits, memory, eviction and counters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tokenroof.errors import TokenroofError
from tokenroof.model.prefix import SharedPrefix, cacheable_tokens, chunk_attention_sq
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.engine.core import BatchScheduler, Sequence, StepPlan
from tokenroof.serving.simulate import ClosedLoop, Lengths, PromptLengths, Trace, Workload, simulate

SM = StepModel(t_fixed_s=1e-3, t_weights_s=1e-2, t_compute_s=1e-5, t_kv_token_s=0.0, t_attn_token_s=1e-7)


def seq(rid: str, prompt: int, out: int = 4, group: int = 0, prefix: int = 64) -> Sequence:
    s = Sequence(rid, prompt, out, 0.0)
    s.prefix_group, s.prefix_tokens = group, prefix
    return s


def step(sched: BatchScheduler, now: float = 0.0) -> StepPlan:
    plan = sched.plan_step(now)
    assert plan is not None
    sched.complete_step(plan)
    return plan


def test_cacheable_tokens_whole_blocks_never_the_last_token() -> None:
    assert cacheable_tokens(1100, 1000, 16) == 992  # ⌊1000/16⌋·16
    assert cacheable_tokens(1000, 1000, 16) == 992  # the last token is recomputed: ⌊999/16⌋·16
    assert cacheable_tokens(65, 64, 16) == 64
    assert cacheable_tokens(64, 64, 16) == 48
    assert cacheable_tokens(100, 15, 16) == 0
    assert cacheable_tokens(1, 64, 16) == 0


def test_chunk_attention_counts_the_tokens_before_the_chunk() -> None:
    # 36 tokens after 64 cached: 36·64 + 36²/2 = 2952 pairs, in Σ chunk² units (halved by the step model): 5904
    assert chunk_attention_sq(36, 64) == 36 * 36 + 2 * 36 * 64 == 5904
    assert chunk_attention_sq(10, 0) == 100


def test_second_request_skips_the_cached_prefix() -> None:
    sched = BatchScheduler(SM, max_num_seqs=8, prefix_caching=True)
    sched.submit(seq("a", 100))
    first = step(sched)
    assert first.prefill_tokens == 100 and first.prefill_sq == 100 * 100
    sched.submit(seq("b", 100))
    second = step(sched)
    # 64 prefix tokens = 4 whole blocks hit; 36 prefilled attending over them
    assert second.prefill_tokens == 36
    assert second.prefill_sq == 36 * 36 + 2 * 36 * 64
    assert sched.running["b"].cached_tokens == 64
    counts = sched.prefix_counts()
    assert counts is not None and (counts.queries, counts.hits) == (200, 64)
    assert counts.hit_rate == pytest.approx(64 / 200)


def test_requests_admitted_in_one_step_all_miss() -> None:
    """A block is hit once the step computing it has run: the two admitted together both prefill everything."""
    sched = BatchScheduler(SM, max_num_seqs=8, prefix_caching=True)
    sched.submit(seq("a", 100))
    sched.submit(seq("b", 100))
    plan = step(sched)
    assert plan.prefill_tokens == 200
    assert sched.prefix_counts() == (200, 0)


def test_other_groups_and_caching_off_miss() -> None:
    on = BatchScheduler(SM, max_num_seqs=8, prefix_caching=True)
    off = BatchScheduler(SM, max_num_seqs=8)
    for sched in (on, off):
        sched.submit(seq("a", 100, group=0))
        step(sched)
    on.submit(seq("b", 100, group=1))
    off.submit(seq("b", 100, group=0))
    assert step(on).prefill_tokens == 100
    assert step(off).prefill_tokens == 100
    assert off.prefix_counts() is None


def test_shared_blocks_count_once_against_the_kv_cache() -> None:
    """Two running sequences of 100-token prompts sharing 64 tokens hold 100 + 100 − 64 context tokens."""
    plain = BatchScheduler(SM, max_num_seqs=8, kv_capacity_tokens=10_000)
    cached = BatchScheduler(SM, max_num_seqs=8, kv_capacity_tokens=10_000, prefix_caching=True)
    for sched in (plain, cached):
        sched.submit(seq("a", 100, out=10))
        step(sched)
        sched.submit(seq("b", 100, out=10))
        step(sched)
    # the same two sequences, the same contexts: the cache holds b's first 64 tokens as a's, once
    assert plain.kv_tokens_next_step() - cached.kv_tokens_next_step() == 64


def test_admission_needs_only_the_tokens_past_the_hit() -> None:
    """A cache too small for two whole prompts still admits the second when its prefix is held by the first."""
    # a: 100 prompt, 50 output: footprint 101 + 15 at admission; b needs 116 − 64 while a holds the prefix
    capacity = 112 + 16 + 60 + 15 + 16  # a's context after a step (with its slack), then b past its hit
    for caching, admitted in ((False, False), (True, True)):
        sched = BatchScheduler(SM, max_num_seqs=8, kv_capacity_tokens=capacity, prefix_caching=caching)
        sched.submit(seq("a", 100, out=50))
        step(sched)
        sched.submit(seq("b", 100, out=50))
        sched.plan_step(0.0)
        assert ("b" in {s.request_id for s in sched.prefilling} | set(sched.running)) is admitted


def test_freed_prefix_is_evicted_tail_first_under_memory_pressure() -> None:
    """a's 4 prefix blocks stay cached after it finishes; a 160-token stranger needs room, evicting from the tail:
    c then hits only the blocks left."""
    sched = BatchScheduler(SM, max_num_seqs=8, kv_capacity_tokens=232, prefix_caching=True)
    sched.submit(seq("a", 100, out=2))
    step(sched)
    step(sched)  # a finishes: its 4 prefix blocks are free but cached
    assert not sched.running and len(sched._free) == 4
    # b: 161 + 15 = 176 tokens at admission, 232 − 176 = 56 free: room for 3 cached blocks, the tail one goes (and
    # still after its first step: 161 + 1 + 15 = 177 held, 55 free)
    sched.submit(seq("b", 160, out=2, group=7))
    step(sched)
    assert len(sched._free) == 3
    step(sched)  # b finishes: its own 4 blocks join the free ones (7 × 16 = 112 ≤ 232: none evicted)
    assert len(sched._free) == 7
    sched.submit(seq("c", 100, out=2))
    plan = sched.plan_step(0.0)
    assert plan is not None and [s.request_id for s in plan.admitted] == ["c"]
    assert plan.prefill_tokens == 100 - 48  # the first 3 blocks hit; the 4th was evicted


def test_preempted_sequence_hits_its_own_prefix_again() -> None:
    sched = BatchScheduler(SM, max_num_seqs=8, kv_capacity_tokens=10_000, prefix_caching=True)
    sched.submit(seq("a", 100, out=20))
    step(sched)
    step(sched)
    victim = sched.running["a"]
    sched._leave(victim)  # as a preemption does
    victim.done_tokens, victim.admitted_step = 2, -1
    sched.waiting.appendleft(victim)
    plan = step(sched)
    assert plan.prefill_tokens == 102 - 64  # prompt + 2 generated, the 4 prefix blocks hit


def test_per_slot_kv_streams_refuse_prefix_caching() -> None:
    with pytest.raises(TokenroofError, match="per-slot"):
        BatchScheduler(SM, max_num_seqs=4, per_slot_kv=True, prefix_caching=True)


def test_emulator_keys_give_the_longest_shared_run() -> None:
    """Explicit block keys (the emulator's hashes of text): hits stop at the first block not in memory."""
    sched = BatchScheduler(SM, max_num_seqs=8, prefix_caching=True)
    a = Sequence("a", 80, 4, 0.0, block_keys=(1, 2, 3, 4, 5))
    sched.submit(a)
    step(sched)
    b = Sequence("b", 80, 4, 0.0, block_keys=(1, 2, 9, 4, 5))
    sched.submit(b)
    assert step(sched).prefill_tokens == 80 - 32


def test_simulated_hit_rate_is_the_prefix_share_in_steady_state() -> None:
    """10 groups of a 512-token prefix in 600-token prompts: after each group's first miss, every admission hits
    512 of its 600 tokens (85.3%); the few first misses and same-step misses keep the rate just below."""
    prompts = PromptLengths(600, prefix=SharedPrefix(512, 10))
    load = Workload(5.0, prompts, Lengths(50), num_requests=2000)
    result = simulate(SM, load, 64, seed=1, prefix_caching=True)
    summary = result.summary()
    rate = summary["prefix_cache"]["hit_rate"]
    assert 0.83 < rate <= 512 / 600
    # the rate is over a window's requests: none in it, no rate (the run's counters stay)
    none = result.cache_in_window(np.zeros(len(result.sequences), dtype=bool))
    assert none["hit_rate"] is None and none["queries_tokens"] == summary["prefix_cache"]["queries_tokens"]
    plain = simulate(SM, load, 64, seed=1).summary()
    assert "prefix_cache" not in plain
    # a lone miss computes for 25 ms (600 tokens, the weights hidden under it); a hit 6 ms, under the 10 ms weights
    assert summary["ttft_ms"]["p50"] < 0.6 * plain["ttft_ms"]["p50"]


def test_prefixes_drawn_after_the_rest_keep_the_seed_s_workload() -> None:
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    plain = Workload(2.0, Lengths(200, "lognormal"), Lengths(20), num_requests=50).arrivals(rng_a)
    shared = Workload(2.0, PromptLengths(200, "lognormal", prefix=SharedPrefix(100, 4)), Lengths(20), 50).arrivals(
        rng_b
    )
    assert [(s.arrival_s, s.prompt_tokens) for s in plain] == [(s.arrival_s, s.prompt_tokens) for s in shared]
    assert {s.prefix_group for s in shared} == {0, 1, 2, 3}
    loop = ClosedLoop(4, PromptLengths(200, prefix=SharedPrefix(100)), Lengths(20), 10)
    first, rest = loop.requests(np.random.default_rng(0), SM)
    assert all(s.prefix_group == 0 and s.prefix_tokens == 100 for s in first + rest)


def test_shared_prefix_checks_its_numbers() -> None:
    with pytest.raises(TokenroofError, match="prefix_len"):
        SharedPrefix(-1)
    with pytest.raises(TokenroofError, match="num_prefixes"):
        SharedPrefix(10, 0)
    assert SharedPrefix(100, 2).hit_fraction(200, 16) == pytest.approx(96 / 200)


# -- the loop closed: emulate caches, bench reads its counters, simulate predicts the same hit rate -------------------
EMULATED = StepModel(t_fixed_s=2e-3, t_weights_s=2e-3, t_compute_s=1e-4, t_kv_token_s=0.0)


def bench_caching_emulator(tmp_path: Path, caching: bool, requests: int = 64) -> dict[str, Any]:
    from tests.emulator_process import bench_in_process
    from tokenroof.serving.emulate.server import Emulator

    return bench_in_process(
        Emulator(EMULATED, prefix_caching=caching),
        concurrencies=[8],
        input_len=128,
        output_len=16,
        out_dir=tmp_path / str(caching),
        requests_per_point=requests,
        prefix_len=96,
        num_prefixes=4,
    )


@pytest.mark.heavy
def test_bench_on_the_caching_emulator_reads_the_hit_rate_simulate_predicts(tmp_path: Path) -> None:
    """bench's shared-prefix prompts (96 of 128 tokens, 4 prefixes) on the emulator with prefix caching: the server's
    counters over bench's window, its usage's cached_tokens and simulate's closed loop agree within 2% (every admission
    in the window hits 6 whole blocks: 75%), and TTFT falls (a 128-token prefill 12.8 ms, a 32-token one 3.2 ms)."""
    cached = bench_caching_emulator(tmp_path, True)
    plain = bench_caching_emulator(tmp_path, False)
    assert "prefix_cache" not in plain and plain["cached_prompt_fraction"] is None
    loop = ClosedLoop(8, PromptLengths(128, prefix=SharedPrefix(96, 4)), Lengths(16), 200, "staggered", 64)
    predicted = simulate(EMULATED, loop, 256, prefix_caching=True).summary()["prefix_cache"]["hit_rate"]
    assert predicted == pytest.approx(0.75, rel=0.02)
    assert cached["prefix_cache"]["hit_rate"] == pytest.approx(predicted, rel=0.02)
    assert cached["cached_prompt_fraction"] == pytest.approx(predicted, rel=0.02)
    assert cached["ttft_ms"]["p50"] < 0.7 * plain["ttft_ms"]["p50"]
    # bench's records say which prefix each prompt started with: simulate --trace replays them with the same hits
    trace = Trace.read(tmp_path / "True" / "requests.jsonl")
    assert trace.prefix == SharedPrefix(96, 4) and len(trace.groups) == len(trace.records)
    assert set(trace.groups) == {0, 1, 2, 3}
    replayed = simulate(EMULATED, trace, 256, prefix_caching=True).summary()["prefix_cache"]["hit_rate"]
    assert replayed == pytest.approx(0.75, rel=0.02)


def test_bench_prompts_share_exactly_their_prefix() -> None:
    from tokenroof.measure.http.config import BenchConfig, check_config
    from tokenroof.measure.http.run import Prompts

    cfg = BenchConfig(url="http://x", concurrencies=[1], input_len=20, prefix_len=12, num_prefixes=2)
    prompts = Prompts(cfg, salt=5)
    texts = [prompts.words("c1", i).split() for i in range(12)]
    assert all(len(t) == 20 for t in texts)
    heads = {tuple(t[:12]) for t in texts}
    assert len(heads) == 2  # two prefixes, each drawn by some of the 12 requests
    assert len({tuple(t[12:]) for t in texts}) == 12  # the rest is each request's own
    plain = Prompts(BenchConfig(url="http://x", concurrencies=[1], input_len=20), salt=5)
    assert plain.words("c1", 3) != prompts.words("c1", 3)
    with pytest.raises(TokenroofError, match="prefix_len"):
        check_config(BenchConfig(url="http://x", concurrencies=[1], input_len=20, prefix_len=20))


def test_emulator_hashes_text_blocks_and_reports_cached_tokens() -> None:
    from tokenroof.model.prefix import block_keys
    from tokenroof.serving.emulate import protocol as proto

    a = block_keys(list("abcdefgh"), 4)
    b = block_keys(list("abcdefgX"), 4)
    c = block_keys(list("Xbcdefgh"), 4)
    assert len(a) == 2 and a[0] == b[0] and a[1] != b[1] and c[0] != a[0] and c[1] != a[1]  # chained
    raw = b'{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]}'
    req = proto.parse_request(raw, True, 100, "m", keep_tokens=True)
    assert len(req.tokens) == req.prompt_tokens == 12
    assert proto.usage(req, 3, 8)["prompt_tokens_details"] == {"cached_tokens": 8}
    assert "prompt_tokens_details" not in proto.usage(req, 3)


def test_roofline_ttft_computes_only_the_uncached_tail() -> None:
    """TTFT of a 2,000-token prompt whose first 1,800 tokens are cached: 1,792 in whole blocks, 208 computed, each
    attending over the 1,792 before it and half the 208: t_fixed + max(W, 208·t_c + t_attn·(208² + 2·208·1792)/2)."""
    from tokenroof.model import roofline as rl
    from tokenroof.model.analysis import analyze_roofline
    from tokenroof.specs import Precision, load_hardware, load_model

    model, hw, precision = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16")
    sm = rl.step_model_from_specs(model, hw, precision)
    compute = 208 * sm.t_compute_s + sm.t_attn_token_s * (208**2 + 2 * 208 * 1792) / 2
    by_hand = sm.t_fixed_s + max(sm.t_weights_s, compute)
    assert float(rl.prefill_time_s(model, hw, precision, 2000, cached_tokens=1792)) == pytest.approx(by_hand)
    # a long tail is compute-bound, so its attention over the cached tokens shows: 10,000 after 10,000 cached
    long = 10_000 * sm.t_compute_s + sm.t_attn_token_s * (10_000**2 + 2 * 10_000 * 10_000) / 2
    assert long > sm.t_weights_s
    assert float(rl.prefill_time_s(model, hw, precision, 20_000, cached_tokens=10_000)) == pytest.approx(
        sm.t_fixed_s + long
    )
    data = analyze_roofline(model, hw, precision, [1], prompt_tokens=2000, prefix_tokens=1800).to_dict()
    assert data["prefix_cached_tokens"] == 1792
    assert data["ttft_ms"] == pytest.approx(by_hand * 1e3)
    assert data["ttft_uncached_ms"] == pytest.approx(float(rl.prefill_time_s(model, hw, precision, 2000)) * 1e3)
    with pytest.raises(TokenroofError, match="prefix_len"):
        analyze_roofline(model, hw, precision, [1], prefix_tokens=100)


def test_plan_weighs_prefix_caching_on_and_off_and_advise_sets_the_flag() -> None:
    """A long shared system prompt: plan simulates the server with and without prefix caching and keeps the one
    needing fewer GPUs, naming both in its choices; with caching off advise gives vLLM's and SGLang's flags for it."""
    from typer.testing import CliRunner

    from tokenroof.cli import app

    runner = CliRunner()
    workload = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "3000", "--output-len", "100"]
    shared = ["--prefix-len", "2800", "--num-prefixes", "2"]
    result = runner.invoke(
        app,
        [
            "plan",
            *workload,
            *shared,
            "--rate",
            "20",
            "--ttft-slo-ms",
            "300",
            "--tpot-slo-ms",
            "40",
            "--seeds",
            "1",
            "--num-requests",
            "300",
            "--workers",
            "1",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.stdout)
    assert data["prefix_caching"] is True and data["workload"]["shared_prefix"] == {
        "prefix_tokens": 2800,
        "num_prefixes": 2,
    }
    by_caching = {c["prefix_caching"]: c for c in data["choices"]}
    assert set(by_caching) == {True, False}
    off = by_caching[False]
    assert not off["feasible"] or off["gpus"] > by_caching[True]["gpus"]
    advised = runner.invoke(
        app, ["advise", *workload, *shared, "--tpot-slo-ms", "40", "--no-enable-prefix-caching", "--json"]
    )
    assert advised.exit_code == 0, advised.output
    flags = json.loads(advised.stdout)["engine_flags"]
    assert flags["vllm"].endswith("--no-enable-prefix-caching") and flags["sglang"].endswith("--disable-radix-cache")


def test_a_prompt_queued_behind_the_budget_hits_what_ran_before_it() -> None:
    """vLLM V1 looks a prefix up when it schedules the prefill: with a 100-token budget the twin admitted beside the
    first prompt gets no budget in the first step, and in the second hits the 4 blocks the first step computed."""
    sched = BatchScheduler(SM, max_num_seqs=8, max_num_batched_tokens=100, prefix_caching=True)
    sched.submit(seq("a", 100))
    sched.submit(seq("b", 100))
    first = step(sched)
    assert first.prefill_tokens == 100 and [s.request_id for s in first.admitted] == ["a"]
    second = step(sched)
    assert second.prefill_tokens == 36 and sched.running["b"].cached_tokens == 64
    assert sched.prefix_counts() == (200, 64)
    # with room for both in one step, both miss: a block is hit only once the step computing it has run
    together = BatchScheduler(SM, max_num_seqs=8, max_num_batched_tokens=400, prefix_caching=True)
    together.submit(seq("a", 100))
    together.submit(seq("b", 100))
    assert step(together).prefill_tokens == 200


def test_kv_accounting_holds_through_random_traffic() -> None:
    """After every step: the KV the scheduler counts is the sum over its sequences (each running one's context less
    its shared blocks, plus lookahead and block slack; each prefilling one's reservation) plus every held block
    once; each held block's count is its holders; no block is both held and free; held and free fit the cache."""
    rng = np.random.default_rng(7)
    for trial in range(12):
        capacity = int(rng.choice([600, 1200, 4000]))
        sched = BatchScheduler(
            SM,
            max_num_seqs=int(rng.integers(2, 9)),
            kv_capacity_tokens=capacity,
            max_num_batched_tokens=int(rng.choice([64, 200])) if trial % 2 else None,
            prefix_caching=True,
        )
        if trial % 3 == 0:
            sched.warm(0, 64)
        n = 0
        for _ in range(150):
            if rng.random() < 0.4:
                prompt = int(rng.integers(20, 160))
                s = seq(str(n), prompt, int(rng.integers(1, 30)), int(rng.integers(0, 3)), int(rng.integers(0, 120)))
                n += 1
                if s.prompt_tokens + s.max_tokens + 15 <= capacity:
                    sched.submit(s)
            if rng.random() < 0.05 and (sched.running or sched.prefilling):
                victim = rng.choice([*sched.running, *(q.request_id for q in sched.prefilling)])
                sched.abort(str(victim))
            plan = sched.plan_step(0.0)
            if plan is None:
                continue
            sched.complete_step(plan)
            holders: dict[int, int] = {}
            for q in (*sched.running.values(), *sched.prefilling):
                for key in sched._keys(q)[: q.shared_blocks]:
                    holders[key] = holders.get(key, 0) + 1
            assert holders == sched._refs
            assert not set(sched._refs) & set(sched._free)
            bs = sched.block_size
            running = sum(
                q.context_at_admission + sched.generated(q) - q.done_tokens - q.shared_blocks * bs + 1 + bs - 1
                for q in sched.running.values()
            )
            expected = running + sum(q.reserved for q in sched.prefilling) + len(sched._refs) * bs
            assert sched.kv_tokens_next_step() == pytest.approx(expected)
            assert sched.kv_tokens_next_step() + len(sched._free) * bs <= capacity + bs * len(sched.running) + 1e-9


def test_roofline_holds_a_shared_prefix_once_in_memory() -> None:
    """4,000-token prompts sharing 3,500 (3,488 in whole blocks), 200 out: each sequence's own KV is 4,100 − 3,488
    tokens, the prefix once: (pool − 3,488) // 612 sequences fit, where 113 fit without the prefix shared."""
    from tokenroof.model import roofline as rl
    from tokenroof.model.analysis import DecodeWorkload, analyze_roofline
    from tokenroof.specs import Precision, load_hardware, load_model

    model, hw, precision = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16")
    workload = DecodeWorkload(4000, 200)
    plain = analyze_roofline(model, hw, precision, [1], workload=workload)
    shared = analyze_roofline(model, hw, precision, [1], workload=workload, prefix_tokens=3500)
    pool = rl.max_batch_by_memory(model, hw, precision, 1.0)
    assert plain.max_batch_by_memory == pool // 4100 == 113
    assert shared.max_batch_by_memory == (pool - 3488) // 612


def test_warm_prefixes_give_way_from_their_end_and_an_unlimited_cache_is_bounded(monkeypatch: Any) -> None:
    """Warmed as a server frees them (tail first): two 800-token prefixes in a 1,000-token cache keep the first's
    first 12 blocks, which a request then hits. An unlimited cache keeps at most UNLIMITED_FREE_BLOCKS freed blocks."""
    from tokenroof.serving.engine import core

    sched = BatchScheduler(SM, max_num_seqs=4, kv_capacity_tokens=1000, prefix_caching=True)
    sched.warm(0, 800)
    sched.warm(1, 800)
    assert len(sched._free) == 1000 // 16
    sched.submit(seq("a", 900, prefix=800))
    plan = sched.plan_step(0.0)
    assert plan is not None and sched.prefix_counts() == (900, 12 * 16)
    monkeypatch.setattr(core, "UNLIMITED_FREE_BLOCKS", 4)
    unlimited = BatchScheduler(SM, max_num_seqs=4, prefix_caching=True)
    for i in range(3):
        unlimited.submit(Sequence(str(i), 64, 1, 0.0, block_keys=(10 * i, 10 * i + 1, 10 * i + 2)))
        step(unlimited)
    unlimited.plan_step(0.0)  # blocks freed by the last step give way when the next is planned
    assert len(unlimited._free) == 4


def test_flag_mistakes_around_prefixes_are_named() -> None:
    from typer.testing import CliRunner

    from tokenroof.cli import app
    from tokenroof.serving.advice import engine_flags

    off, on = engine_flags(64, prefix_caching=False), engine_flags(64)
    assert set(off) == set(on) and off["vllm"] == "--max-num-seqs 64 --no-enable-prefix-caching"
    assert off["tgi"] == on["tgi"]
    runner = CliRunner()
    base = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm"]
    for args, message in (
        (["--num-prefixes", "3"], "--num-prefixes counts shared prefixes: give their length, --prefix-len"),
        (["--trace", "x.jsonl", "--prefix-len", "10"], "drop --prefix-len and --num-prefixes"),
    ):
        result = runner.invoke(app, [*base, *args])
        assert result.exit_code != 0 and message in result.output, result.output
    bad = runner.invoke(
        app, ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--prompt-tokens", "100", "--prefix-len", "-5"]
    )
    assert bad.exit_code != 0 and "--prefix-len must be ≥ 0" in bad.output


def test_the_prefix_router_keeps_each_prefix_on_one_replica_and_yields_to_load() -> None:
    """By hand: a prefix goes to the idlest replica the first time and to that replica after; a prompt without one
    to the idlest; while the busiest replica holds more than 64 requests above the idlest and more than 1.5 times
    it (SGLang's router's defaults), every request to the idlest."""
    from tokenroof.serving.engine.fleet import Router, prefix_of

    load = [3, 1, 2, 5]
    router = Router("prefix", 4)
    assert router.pick(load.__getitem__, 7) == 1  # new prefix: the idlest
    load[1] = 9
    assert router.pick(load.__getitem__, 7) == 1  # its home, though busier now
    assert router.pick(load.__getitem__, None) == 2 and router.pick(load.__getitem__, 8) == 2
    load[:] = [100, 30, 2, 5]  # 100 − 2 > 64 and 100 > 1.5 × 2: imbalanced
    assert router.pick(load.__getitem__, 7) == 2
    load[:] = [60, 30, 2, 5]  # 58 ≤ 64: balanced enough, the prefix's home again
    assert router.pick(load.__getitem__, 7) == 1
    grouped = Sequence("a", 100, 5, 0.0, prefix_group=3)
    keyed = Sequence("b", 100, 5, 0.0, block_keys=[11, 12])
    assert prefix_of(grouped) == 3 and prefix_of(keyed) == 11 and prefix_of(Sequence("c", 100, 5, 0.0)) is None


def test_routing_by_prefix_serves_each_prefix_from_one_replicas_cache() -> None:
    """Four replicas whose KV caches cannot each hold 32 shared 2,000-token prefixes beside their running
    sequences: round-robin spreads every prefix over all four and they evict each other, the prefix router keeps
    each on one replica. Its hit rate is near the 80% the prompts allow; round-robin's far below, TTFT longer."""
    from tokenroof.serving.simulate import simulate

    sm = StepModel(t_fixed_s=2e-3, t_weights_s=5e-3, t_compute_s=2e-6, t_kv_token_s=1e-9)
    load = Workload(30.0, PromptLengths(2500, prefix=SharedPrefix(2000, 32)), Lengths(50), 1500)

    def run(router: str) -> dict:
        result = simulate(sm, load, 64, kv_capacity_tokens=40_000, replicas=4, router=router, prefix_caching=True)
        return result.summary()

    spread, kept = run("round-robin"), run("prefix")
    assert kept["prefix_cache"]["hit_rate"] > 0.7 > 0.5 > spread["prefix_cache"]["hit_rate"]
    assert kept["ttft_ms"]["p50"] < spread["ttft_ms"]["p50"]


@pytest.mark.heavy
def test_plan_judges_a_fleet_behind_the_prefix_router_and_its_json_says_so() -> None:
    from tests.conftest import run_json
    from tests.schemas import validate

    args = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "20", "--router", "prefix", "--prefix-len"]
    data = run_json([*args, "800", "--num-prefixes", "8", "--seeds", "1", "--num-requests", "400", "--workers", "1"])
    validate("plan", data)
    assert data["router"] == "prefix" and data["chosen"] is not None


def test_a_prompt_queued_behind_a_prefill_step_of_its_own_hits_what_that_step_computed() -> None:
    """separate_prefill (vLLM V0, TGI) with a 150-token budget: "a" and "b" are admitted together, "a" fills the first
    prefill step and "b" (100 > the 50 left) waits for the next, by when "a"'s 4 prefix blocks are computed: "b" looks
    its prefix up as that step is scheduled and prefills 36 tokens after the 64 it hits."""
    sched = BatchScheduler(SM, max_num_seqs=8, max_num_batched_tokens=150, prefix_caching=True, separate_prefill=True)
    sched.submit(seq("a", 100))
    sched.submit(seq("b", 100))
    first = step(sched)
    assert [s.request_id for s in first.admitted] == ["a"] and first.prefill_tokens == 100
    second = step(sched, first.end_s)
    assert [s.request_id for s in second.admitted] == ["b"] and not second.decoding
    assert (second.prefill_tokens, second.prefill_sq) == (36, 36 * 36 + 2 * 36 * 64)
    assert sched.running["b"].cached_tokens == 64 and sched.prefix_counts() == (200, 64)
