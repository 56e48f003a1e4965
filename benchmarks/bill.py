"""Score the bill's power model against measured GPU power: ML.ENERGY's H100 serving runs (vLLM 0.11.1).

For each measured point (a model at a running batch, benchmarks/data/mlenergy_v3_h100_lm_arena_chat.csv) the
first-principles step model (`--engine vllm-v1`, an online workload of the measured output length and an assumed
prompt length) gives the board's busy and compute shares, the power model (model/cost.py) the watts, and with the
step model's throughput the joules per output token. The one free constant, the draw of memory-streaming kernels
relative to compute-bound ones (`MEMORY_ACTIVITY`), is fitted leave-one-model-out: each model's points are scored
with the constant fitted on the other models. `--fit` prints the constant fitted on all of them (what cost.py
ships).

    python benchmarks/bill.py [--input-len 256] [--fit]
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from tokenroof.model.analysis import online_step_s
from tokenroof.model.cost import PowerModel, busy_share, compute_share, power_model
from tokenroof.model.roofline import default_efficiencies, step_model_from_specs
from tokenroof.specs import Precision, load_engine, load_hardware, load_model

DATA = Path(__file__).parent / "data" / "mlenergy_v3_h100_lm_arena_chat.csv"
PRESETS = {  # the measured models tokenroof has presets of (Qwen3-32B and Llama-3.1-405B-FP8 have none)
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
    "Qwen/Qwen3-8B": "qwen3-8b",
}
GRID = [round(0.30 + 0.01 * i, 2) for i in range(71)]


@dataclass(frozen=True)
class Point:
    model: str
    batch: float
    tp: int
    watts_per_gpu: float
    j_per_token: float
    busy: float
    compute: float
    predicted_tok_s: float


def points(input_len: float) -> list[Point]:
    hardware = load_hardware("h100-sxm")
    engine = load_engine("vllm-v1")
    out = []
    with DATA.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    for r in rows:
        preset = PRESETS.get(r["model"])
        if preset is None:
            continue
        model, tp, batch = load_model(preset), int(r["tp"]), float(r["avg_batch"])
        precision = Precision.create(r["dtype"].replace("bfloat16", "bf16"))
        sm = step_model_from_specs(model, hardware, precision, tp, default_efficiencies(hardware, precision, engine))
        output = float(r["output_len_mean"])
        ctx = input_len + output / 2
        step = online_step_s(sm, batch, input_len, output, chunked=True)
        decode = sm.step_s(batch, batch * ctx)
        prompts = batch / output * input_len
        compute = compute_share(sm, batch, batch * ctx, step, prompts, prompts * input_len)
        out.append(
            Point(
                preset,
                batch,
                tp,
                float(r["power_per_gpu_w"]),
                float(r["j_per_output_token"]),
                busy_share(sm, decode),
                compute,
                batch / step,
            )
        )
    return out


def watts(power: PowerModel, p: Point, activity: float) -> float:
    return replace(power, memory_activity=activity).watts(p.busy, p.compute)


def fit(power: PowerModel, pts: list[Point]) -> float:
    """The activity minimising the median |log(predicted / measured)| power over `pts`."""
    return min(GRID, key=lambda a: statistics.median(abs(math.log(watts(power, p, a) / p.watts_per_gpu)) for p in pts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input-len", type=float, default=256.0, help="assumed prompt tokens (not published)")
    parser.add_argument("--fit", action="store_true", help="print the constant fitted on every model")
    args = parser.parse_args()
    power = power_model(load_hardware("h100-sxm"))
    assert power is not None
    pts = points(args.input_len)
    models = sorted({p.model for p in pts})
    print(f"{len(pts)} ML.ENERGY H100 points of {len(models)} models; prompts assumed {args.input_len:g} tokens\n")
    print(f"{'model':<16}{'activity':>9}{'power err med':>15}{'p90':>7}{'J/tok err med':>15}{'p90':>7}")
    power_errors, energy_errors = [], []
    for held in models:
        activity = fit(power, [p for p in pts if p.model != held])
        pe, ee = [], []
        for p in (p for p in pts if p.model == held):
            w = watts(power, p, activity)
            pe.append(w / p.watts_per_gpu - 1)
            ee.append(w * p.tp / p.predicted_tok_s / p.j_per_token - 1)
        power_errors += pe
        energy_errors += ee
        print(f"{held:<16}{activity:>9.2f}{row(pe)}{row(ee)}")
    print(f"{'all (LOMO)':<16}{'':>9}{row(power_errors)}{row(energy_errors)}")
    big = [e for p, e in zip(pts, energy_errors, strict=True) if p.batch >= 32]
    print(f"{'batch >= 32':<16}{'':>9}{'':>22}{row(big)}")
    if args.fit:
        print(f"\nMEMORY_ACTIVITY fitted on all {len(models)} models: {fit(power, pts):.2f}")


def row(errors: list[float]) -> str:
    absolute = sorted(abs(e) for e in errors)
    p90 = absolute[min(int(0.9 * len(absolute)), len(absolute) - 1)]
    return f"{statistics.median(absolute):>14.1%}{p90:>7.1%}"


if __name__ == "__main__":
    main()
