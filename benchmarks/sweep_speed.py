"""Speed of one vectorised sweep over 1,000,000 (batch, context) points, against a per-point Python loop.

Prints figures; it asserts nothing (timings on shared machines are noisy: compare the ratio).
    python benchmarks/sweep_speed.py
"""

from __future__ import annotations

import time

import numpy as np

from tokenroof.model import roofline as rl
from tokenroof.specs import Precision, load_hardware, load_model


def best_of(repeats: int, func) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    model, hw, prec = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16")
    sm = rl.step_model_from_specs(model, hw, prec)
    batch = np.arange(1, 1001, dtype=float)[:, None]
    context = np.linspace(0, 131072, 1000)[None, :]
    n = batch.size * context.size

    t_step = best_of(5, lambda: sm.step_time_s(batch, context))
    t_full = best_of(
        3,
        lambda: (
            sm.step_time_s(batch, context),
            sm.bound(batch, context),
            rl.decode_costs(model, prec, batch, context),
        ),
    )

    flat_b = np.broadcast_to(batch, (1000, 1000)).ravel()
    flat_c = np.broadcast_to(context, (1000, 1000)).ravel()
    sample = 20_000
    t_loop_sample = best_of(
        1, lambda: [sm.step_time_s(float(b), float(c)) for b, c in zip(flat_b[:sample], flat_c[:sample], strict=True)]
    )
    t_loop = t_loop_sample * n / sample

    print(f"points: {n:,} (batch 1..1000 × context 0..131072), model llama-3.1-8b on h100-sxm")
    print(f"vectorised step time:                 {t_step * 1e3:8.1f} ms  ({n / t_step / 1e6:.0f} M points/s)")
    print(f"vectorised step + bound + cost terms: {t_full * 1e3:8.1f} ms")
    print(f"per-point Python loop (extrapolated from {sample:,}): {t_loop:8.1f} s")
    print(f"speed-up of one vectorised call over the loop: {t_loop / t_step:,.0f}×")


if __name__ == "__main__":
    main()
