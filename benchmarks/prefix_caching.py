"""Prefix caching: the loop closed (simulate against the emulator measured by bench) and the memory it frees.

1. Round trip: `emulate` with prefix caching, measured by `bench --prefix-len --num-prefixes` at closed-loop
   concurrencies, against `simulate`'s closed loop of the same workload and step model: the hit rate (the server's
   counters over bench's window), TTFT and TPOT p50. The emulator sleeps each step's modelled time, so this checks
   the scheduler's caching, the emulator's text hashing and bench's prompts and counters agree, not a GPU.
2. Memory: a KV cache too small for every prompt whole: simulate with and without caching, the batch it runs and
   what it carries (a shared block is held once).
3. Published: vLLM PR #9668 ("[V1] Prefix caching", github.com/vllm-project/vllm/pull/9668),
   `benchmark_prefix_caching.py` on one L40S, neuralmagic/Meta-Llama-3-8B-Instruct-FP8, 200 ShareGPT prompts of
   256-512 tokens each sent twice (400 requests at once, offline), 10 output tokens: 8.56 s without the cache,
   4.86 s with it (1.76×), a 49% hit rate. Simulated from first principles (llama-3.1-8b's shapes, fp8, l40s,
   the vllm-v1 profile's 8,192-token budget, 256 sequences, its KV pool), cold, lengths uniform over 256-512, the
   copies shuffled; three seeds.

    python benchmarks/prefix_caching.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.measure.http.run import BenchConfig, run_bench
from tokenroof.model.prefix import SharedPrefix
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.emulate.server import Emulator, start
from tokenroof.serving.saturation import closed_loop
from tokenroof.serving.simulate import ClosedLoop, Lengths, PromptLengths, Trace, simulate

STEP = StepModel(t_fixed_s=2e-3, t_weights_s=3e-3, t_compute_s=4e-5, t_kv_token_s=2e-8, t_attn_token_s=1e-8)
INPUT, PREFIX, GROUPS, OUTPUT = 512, 384, 4, 32


async def bench(concurrency: int, requests: int, out: Path) -> dict[str, Any]:
    runner, url = await start(Emulator(STEP, prefix_caching=True))
    try:
        cfg = BenchConfig(
            url=url,
            concurrencies=[concurrency],
            input_len=INPUT,
            output_len=OUTPUT,
            out_dir=out,
            requests_per_point=requests,
            prefix_len=PREFIX,
            num_prefixes=GROUPS,
        )
        (point,) = await run_bench(cfg)
        return point
    finally:
        await runner.cleanup()


def round_trip() -> None:
    print(f"1. emulate + bench against simulate: {INPUT}-token prompts, the first {PREFIX} one of {GROUPS} prefixes")
    print(f"{'streams':>8}{'hit rate':>18}{'TTFT p50 ms':>20}{'TPOT p50 ms':>20}")
    prompts = PromptLengths(INPUT, prefix=SharedPrefix(PREFIX, GROUPS))
    worst = 0.0
    for streams in (1, 4, 16):
        requests = max(2 * streams, 32)
        with tempfile.TemporaryDirectory() as tmp:
            point = asyncio.run(bench(streams, requests, Path(tmp)))
        loop = ClosedLoop(streams, prompts, Lengths(OUTPUT), streams + requests + streams, "staggered", requests)
        sim = simulate(STEP, loop, 256, prefix_caching=True).summary()
        pairs = [
            (point["prefix_cache"]["hit_rate"], sim["prefix_cache"]["hit_rate"]),
            (point["ttft_ms"]["p50"], sim["ttft_ms"]["p50"]),
            (point["tpot_ms"]["p50"], sim["tpot_ms"]["p50"]),
        ]
        cells = "".join(f"{m:>9.3g} / {s:<8.3g}" for m, s in pairs)
        worst = max(worst, abs(pairs[0][0] / pairs[0][1] - 1))
        print(f"{streams:>8}{cells}   (measured / simulated)")
    print(f"   hit rate: measured within {worst:.2%} of simulated (issue 32's target: 2%)")


def memory() -> None:
    print("2. memory: 64 streams kept full (a closed loop), 1,000-token prompts whose first 900 are one shared prefix,")
    print("   50 output tokens, a 12,000-token KV cache: a shared block is held once")
    prompts = PromptLengths(1000, prefix=SharedPrefix(900))
    for caching in (False, True):
        loop = closed_loop(64, prompts, Lengths(50))
        s = simulate(STEP, loop, 64, kv_capacity_tokens=12_000, prefix_caching=caching).summary()
        print(
            f"   caching {'on ' if caching else 'off'}: running batch {s['running_batch']:.3g}, "
            f"{s['preemptions']:,} preemptions, {s['throughput_tok_s']:,.0f} tok/s, TTFT p50 {s['ttft_ms']['p50']:.3g} "
            f"ms, TPOT p50 {s['tpot_ms']['p50']:.3g} ms"
        )


def published() -> None:
    from tokenroof.fit.physics import Physics

    print("3. vLLM PR #9668: L40S, Llama-3-8B FP8, 200 prompts of 256-512 tokens sent twice, 10 out, offline")
    physics = Physics("llama-3.1-8b", "l40s", "fp8", None, None, 1, "vllm-v1")
    sm, pool = physics.step_model(), physics.kv_pool_tokens()
    measured_off, measured_on, measured_rate = 8.56, 4.86, 0.49
    speedups = []
    for seed in (0, 1, 2):
        rng = np.random.default_rng(seed)
        lengths = rng.integers(256, 513, 200)
        order = rng.permutation(400)
        prompts, groups = np.concatenate([lengths, lengths])[order], np.concatenate([np.arange(200)] * 2)[order]
        records = tuple((0.0, int(p), 10) for p in prompts)
        runs = {}
        for caching in (False, True):
            trace = Trace(records, prefix=SharedPrefix(512, 200), groups=tuple(int(g) for g in groups), warm=False)
            result = simulate(
                sm, trace, 256, kv_capacity_tokens=pool, max_num_batched_tokens=8192, prefix_caching=caching
            )
            runs[caching] = (max(s.finished_s or 0.0 for s in result.sequences), result.prefix_cache)
        (off, _), (on, cache) = runs[False], runs[True]
        assert cache is not None
        speedups.append(off / on)
        print(
            f"   seed {seed}: {off:.2f} s without, {on:.2f} s with ({off / on:.2f}×), hit rate {cache['hit_rate']:.1%}"
        )
    mean = float(np.mean(speedups))
    print(
        f"   measured {measured_off} s / {measured_on} s ({measured_off / measured_on:.2f}×), hit rate "
        f"{measured_rate:.0%}: speed-up predicted {mean:.2f}×, {mean / (measured_off / measured_on) - 1:+.1%}"
    )


if __name__ == "__main__":
    round_trip()
    memory()
    published()
