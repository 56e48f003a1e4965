"""Many streams from `bench --workers N` against `emulate --replicas R` (issue 31): how many the machine holds.

The emulator (its own process) runs R replicas behind round-robin, each step a fixed `--step-s` long whatever its
batch, so the truth is known: TPOT = the step, throughput = running batch ÷ the step. bench drives a closed loop of
`--streams` streams from `--workers` client processes (1-token prompts, `--output-len` tokens each) and the script
prints, for each client size, TPOT and throughput against that truth, every request recorded once, and each
process's self-check (event-loop lag p99, CPU share). A slow step keeps the token rate (streams ÷ step) within what
two cores stream: the question is whether the client can hold that many connections and time them.

    python benchmarks/bench_scale.py [--streams 10000] [--workers 1,4] [--replicas 64] [--step-s 1.0] [--output-len 8]
                                     [--ray local]   (each client size once more as Ray actors: bench --ray)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.emulator_process import emulator_health

from tokenroof.io.measurements import read_jsonl
from tokenroof.measure.http.run import BenchConfig, run_bench
from tokenroof.serving.emulate.process import server_process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--workers", default="1,4", help="client processes to try, e.g. '1,4'")
    parser.add_argument("--replicas", type=int, default=64)
    parser.add_argument("--step-s", type=float, default=1.0)
    parser.add_argument("--output-len", type=int, default=8)
    parser.add_argument("--ray", default=None, help="also run each client size as Ray actors on this cluster")
    args = parser.parse_args()
    step = args.step_s
    per_replica = -(-args.streams // args.replicas)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "step.json"
        model.write_text(json.dumps({"t_fixed_s": step, "t_weights_s": 0.0, "t_compute_s": 0.0, "t_kv_token_s": 0.0}))
        emulate = ["emulate", "--step-model", str(model), "--replicas", str(args.replicas)]
        emulate += ["--max-num-seqs", str(2 * per_replica), "--read-timeout", "600"]
        print(
            f"emulate: {args.replicas} replicas behind round-robin, every step {step * 1e3:g} ms; bench: a closed "
            f"loop of {args.streams:,} streams, 1-token prompts, {args.output_len} output tokens"
        )
        header = (
            f"{'workers':>7} {'batch':>8} {'TPOT ms':>8} {'error':>7} {'tok/s':>8} {'truth':>8} {'error':>7} "
            f"{'requests':>8} {'once':>5} {'lag p99 ms':>11} {'CPU':>5} {'wall s':>7}  status"
        )
        print(header)
        runs = [(int(w), None) for w in args.workers.split(",")]
        runs += [(workers, args.ray) for workers, _ in runs] if args.ray else []
        for workers, ray in runs:
            out = Path(tmp) / f"w{workers}{'-ray' if ray else ''}"
            with server_process(emulate) as url:
                cfg = BenchConfig(
                    url=url,
                    concurrencies=[args.streams],
                    input_len=1,
                    output_len=args.output_len,
                    out_dir=out,
                    workers=workers,
                    ray_address=ray,
                    max_duration_s=600,
                    timeout_s=600,
                )
                start = time.perf_counter()
                (point,) = asyncio.run(run_bench(cfg))
                wall = time.perf_counter() - start
                late, restarts = emulator_health(url)
            rows = [obj for _, obj in read_jsonl(out / "requests.jsonl")]
            sent = [(r["point"], r["index"]) for r in rows if r.get("type") == "sent"]
            ended = [(r["point"], r["index"]) for r in rows if r.get("type") == "request"]
            once = len(sent) == len(set(sent)) == len(ended) == len(set(ended)) and set(sent) == set(ended)
            tpot = point["tpot_ms"]["mean"] or float("nan")
            truth = point["batch"] / step
            shares = point.get("client_workers") or []
            lag = max([point["client_loop_lag_p99_ms"], *(w["client_loop_lag_p99_ms"] for w in shares)])
            cpu = max([point["client_cpu_fraction"], *(w["client_cpu_fraction"] for w in shares)])
            print(
                f"{workers:5d}{'/R' if ray else '  '} {point['batch']:8.1f} {tpot:8.1f} "
                f"{tpot / (step * 1e3) - 1:+7.2%} "
                f"{point['throughput_tok_s']:8.0f} {truth:8.0f} {point['throughput_tok_s'] / truth - 1:+7.2%} "
                f"{len(ended):8d} {'yes' if once else 'NO':>5} {lag:11.1f} {cpu:5.0%} {wall:7.1f}  "
                f"{point['invalid'] or 'ok'}"
            )
            for w in shares:
                print(
                    f"{'':7} worker {w['worker']}: {w['requests_sent']} requests, lag p99 "
                    f"{w['client_loop_lag_p99_ms']:.1f} ms, CPU {w['client_cpu_fraction']:.0%}"
                )
            print(f"{'':7} emulator: mean step lateness {late * 1e3:.1f} ms, schedule restarts {restarts}")


if __name__ == "__main__":
    main()
