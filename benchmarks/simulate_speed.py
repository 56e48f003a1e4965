"""Simulated time ÷ wall time for one replica (goal ≥ 1000× on one core), and wall time for 1,000,000 requests.

`--fleet`: 64 replicas behind round-robin, 1,000,000 requests at 20 req/s each (issue 31: under 60 s on 2 cores),
and each replica's figures against one replica alone fed every 64th arrival (gamma gaps of shape 64, what
round-robin leaves it) and fed Poisson arrivals (what a random router leaves it).

python benchmarks/simulate_speed.py [--million] [--fleet]
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tokenroof.model.roofline import step_model_from_specs
from tokenroof.serving.simulate import Lengths, Workload, simulate
from tokenroof.specs import Precision, load_hardware, load_model


def run(n: int) -> None:
    model = step_model_from_specs(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16"))
    workload = Workload(
        rate_req_s=20,
        input_len=Lengths(1000, "lognormal", 0.5),
        output_len=Lengths(300, "lognormal", 0.5),
        num_requests=n,
    )
    start = time.perf_counter()
    result = simulate(model, workload, max_num_seqs=256)
    wall = time.perf_counter() - start
    summary = result.summary()
    print(
        f"{n:>9,} requests (llama-3.1-8b on h100-sxm, 20 req/s, 1000-in/300-out lognormal): "
        f"{summary['simulated_s']:,.0f} s simulated in {wall:.2f} s wall = {summary['simulated_s'] / wall:,.0f}× "
        f"real time; {summary['steps']:,} steps, mean running batch {summary['running_batch']:.1f}, "
        f"TTFT p99 {summary['ttft_ms']['p99']:.0f} ms, TPOT p99 {summary['tpot_ms']['p99']:.1f} ms"
    )


def fleet(replicas: int = 64, n: int = 1_000_000) -> None:
    model = step_model_from_specs(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16"))
    prompts, outputs = Lengths(1000, "lognormal", 0.5), Lengths(300, "lognormal", 0.5)
    start = time.perf_counter()
    result = simulate(model, Workload(20.0 * replicas, prompts, outputs, n), 256, replicas=replicas)
    whole = result.summary()
    wall = time.perf_counter() - start
    print(f"{n:,} requests over {replicas} replicas (round-robin): {wall:.1f} s wall, {whole['steps']:,} steps")
    alone = {
        f"one replica, gamma shape {replicas}": simulate(
            model, Workload(20.0, prompts, outputs, n // replicas, float(replicas)), 256
        ).summary(),
        "one replica, Poisson": simulate(model, Workload(20.0, prompts, outputs, n // replicas), 256).summary(),
    }

    def figures(s: dict[str, Any], k: int) -> dict[str, float]:
        out = {"running batch": s["running_batch"], "tok/s": s["throughput_tok_s"] / k}
        return out | {f"{m} {q}": s[f"{m}_ms"][q] for m in ("tpot", "ttft") for q in ("p50", "p99")}

    fleet_each = figures(whole, replicas)
    for name, single in alone.items():
        cells = ", ".join(f"{label} {v / fleet_each[label] - 1:+.1%}" for label, v in figures(single, 1).items())
        print(f"   {name} against each fleet replica: {cells}")


if __name__ == "__main__":
    run(10_000)
    if "--million" in sys.argv:
        run(1_000_000)
    if "--fleet" in sys.argv:
        fleet()
