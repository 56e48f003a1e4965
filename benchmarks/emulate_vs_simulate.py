"""The same workload through `emulate` + `bench` (real time, this machine) and through `simulate` (virtual time).

Llama-3.1-8B on an A10G from the roofline preset (≈ 36 ms steps), 200-token prompts,
64 output tokens, Poisson arrivals at three rates below saturation. Prints TTFT and
TPOT p50/p90 from both and their differences (goal: within 5%).

    python benchmarks/emulate_vs_simulate.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.emulator_process import emulator_process

from tokenroof.measure.http.run import BenchConfig, run_bench
from tokenroof.model.roofline import step_model_from_specs
from tokenroof.serving.simulate import Lengths, Workload, simulate
from tokenroof.specs import Precision, load_hardware, load_model

RATES = {1.0: 150, 3.0: 800, 6.0: 900}  # req/s → requests sent by bench (saturation is near 12 req/s)
PROMPT, OUTPUT = 200, 64


def main() -> None:
    model = step_model_from_specs(load_model("llama-3.1-8b"), load_hardware("a10g"), Precision.create("bf16"))
    with tempfile.TemporaryDirectory() as tmp:
        terms = {k: v for k, v in model.to_dict().items()}
        with emulator_process(terms, Path(tmp)) as url:
            measured = {}
            for rate, n in RATES.items():
                cfg = BenchConfig(
                    url=url,
                    rates=[rate],
                    input_len=PROMPT,
                    output_len=OUTPUT,
                    requests_per_point=n,
                    out_dir=Path(tmp) / f"r{rate:g}",
                    seed=int(rate),
                )
                measured[rate] = asyncio.run(run_bench(cfg))[0]
    print(f"step model: {json.dumps({k: round(v, 9) for k, v in terms.items() if isinstance(v, float)})}")
    print(
        f"{'rate':>5} {'batch':>6}  {'TTFT p50 bench/sim':>20} {'diff':>6}  {'TTFT p90':>14} {'diff':>6}  "
        f"{'TPOT p50':>14} {'diff':>6}  {'TPOT p90':>14} {'diff':>6}"
    )
    for rate, point in measured.items():
        workload = Workload(rate, Lengths(PROMPT), Lengths(OUTPUT), num_requests=20_000)
        sim = simulate(model, workload, max_num_seqs=256, seed=1).summary()
        cells = []
        for metric in ("ttft_ms", "tpot_ms"):
            for q in ("p50", "p90"):
                got, want = point[metric][q], sim[metric][q]
                if got is None:
                    cells.append(f"{'—':>6}/{want:6.1f} {'':>6}")
                    continue
                cells.append(f"{got:6.1f}/{want:6.1f} {got / want - 1:+6.1%}")
        print(
            f"{rate:5g} {point['batch']:6.1f}  {cells[0]:>27}  {cells[1]:>21}  {cells[2]:>21}  {cells[3]:>21}"
            f"  {point['invalid'] or ''}"
        )


if __name__ == "__main__":
    main()
