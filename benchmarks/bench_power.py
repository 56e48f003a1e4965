"""bench's power reading against the emulator's power model (issue 32): the loop closed.

`emulate`'s replica on two boards of 700 W TDP (100 W idle) exports dcgm-exporter's energy counter from the TDP ×
utilization model; bench reads it over each point's window, and `simulate`'s bill on bench's own requests says what
the model predicts. Prints, per concurrency, the mean power and the energy per output token each way.

    python benchmarks/bench_power.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from tokenroof.measure.http.run import BenchConfig, run_bench
from tokenroof.model.cost import PowerModel
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.emulate.server import Emulator, start
from tokenroof.serving.simulate import Trace, simulate

POWER = PowerModel(700.0, 100.0, "given")
STEP = StepModel(t_fixed_s=4e-3, t_weights_s=16e-3, t_compute_s=1e-4, t_kv_token_s=0.0)
BOARDS = 2
MAX_NUM_SEQS = 64


async def bench_one(concurrency: int, out: Path) -> dict[str, Any]:
    runner, url = await start(Emulator(STEP, max_num_seqs=MAX_NUM_SEQS, power=POWER, tp=BOARDS))
    try:
        config = BenchConfig(
            url=url,
            out_dir=out,
            concurrencies=[concurrency],
            input_len=32,
            output_len=16,
            requests_per_point=max(24, 2 * concurrency),
        )
        (point,) = await run_bench(config)
        return point
    finally:
        await runner.cleanup()


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-power-"))
    head = ("streams", 7), ("bench W", 8), ("simulate W", 10), ("error", 6), ("bench J/tok", 11), ("simulate", 8)
    print("  ".join(f"{name:>{width}}" for name, width in head) + "  error")
    for concurrency in (1, 4, 16):
        out = root / f"c{concurrency}"
        point = asyncio.run(bench_one(concurrency, out))
        measured = point["power"]
        predicted = simulate(STEP, Trace.read(out / "requests.jsonl"), MAX_NUM_SEQS).bill(STEP, BOARDS, None, POWER)
        watts, model_watts = measured["watts_mean"], predicted["power_watts_mean"]
        joules, model_joules = measured["energy_j_per_output_token"], predicted["energy_j_per_output_token"]
        print(
            f"{concurrency:>7}  {watts:>8.1f}  {model_watts:>10.1f}  {watts / model_watts - 1:>+6.1%}  "
            f"{joules:>11.3f}  {model_joules:>8.3f}  {joules / model_joules - 1:+.1%}"
        )
    print(f"source: {measured['source']}")


if __name__ == "__main__":
    main()
