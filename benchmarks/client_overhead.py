"""How much can one `tokenroof bench` process measure? Against an emulator with near-zero step time.

Sweeps concurrency against an emulator whose steps take 0.5 ms (plus 5 µs per sequence),
so the client (and the emulator's own HTTP layer) is what limits the token rate. Prints
the streamed tokens/s the client sustained, its loop lag and CPU, and the TPOT error
against the emulator's model at each concurrency: the client's measurements can be
trusted up to the concurrency where the error passes 2% (bench marks such points
client-bound by itself).

    python benchmarks/client_overhead.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.emulator_process import emulator_health, emulator_process

from tokenroof.measure.http.run import BenchConfig, run_bench
from tokenroof.model.stepmodel import StepModel

TERMS = {"t_fixed_s": 0.5e-3, "t_weights_s": 0.0, "t_compute_s": 0.0, "t_kv_token_s": 0.0, "t_seq_s": 5e-6}
CONCURRENCY = [1, 4, 16, 32, 64, 128, 256]


def main() -> None:
    model = StepModel(**TERMS)
    with tempfile.TemporaryDirectory() as tmp, emulator_process(TERMS, Path(tmp)) as url:
        cfg = BenchConfig(
            url=url, concurrencies=CONCURRENCY, input_len=1, output_len=64, out_dir=Path(tmp) / "o", max_duration_s=60
        )
        points = asyncio.run(run_bench(cfg))
        late, restarts = emulator_health(url)
    print(
        f"emulator step model: {model.t_fixed_s * 1e3:g} ms + {model.t_seq_s * 1e6:g} µs per sequence; "
        f"emulator mean step lateness {late * 1e3:.2f} ms, schedule restarts {restarts}"
    )
    print(
        f"{'concurrency':>11} {'batch':>7} {'tok/s':>9} {'TPOT ms':>8} {'model ms':>9} {'error':>7} "
        f"{'loop lag p99':>12} {'client CPU':>10}  status"
    )
    first_bad = None
    for p in points:
        want = float(model.step_time_s(p["batch"])) * 1e3
        got = p["tpot_ms"]["mean"] or float("nan")
        error = got / want - 1
        if first_bad is None and abs(error) > 0.02:
            first_bad = p["point"]
        print(
            f"{p['value']:11g} {p['batch']:7.1f} {p['throughput_tok_s']:9.0f} {got:8.3f} {want:9.3f} "
            f"{error:+7.1%} {p['client_loop_lag_p99_ms']:10.1f}ms {p['client_cpu_fraction']:10.0%}  "
            f"{p['invalid'] or 'ok'}"
        )
    best = max(points, key=lambda p: p["throughput_tok_s"])
    print(
        f"most streamed tokens/s sustained by one client process: {best['throughput_tok_s']:,.0f} (at {best['point']})"
    )
    print(f"TPOT error first passes 2% at: {first_bad or 'never in this sweep'}")


if __name__ == "__main__":
    main()
