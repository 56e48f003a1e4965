"""Simulated time ÷ wall time for one replica (goal ≥ 1000× on one core), and wall time for 1,000,000 requests.

python benchmarks/simulate_speed.py [--million]
"""

from __future__ import annotations

import sys
import time

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


if __name__ == "__main__":
    run(10_000)
    if "--million" in sys.argv:
        run(1_000_000)
