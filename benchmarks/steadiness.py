"""How often simulate says a run is too short, against how far its figures are from a long run's; and the drain's
estimate against the drain itself.

Llama-3.1-8B on one H100 (the physics step model), 1,000-token prompts and 300-token outputs, Poisson arrivals at
rates from ~40% to ~95% of the ~21 req/s it carries; at each rate runs of 500, 1,000, 4,000 and 16,000 requests over
`--seeds` seeds, against one run of 64,000 requests (the figures a long run settles at). Printed per rate and length:
the runs' mean TPOT and p99 TPOT against the long run's (mean ± sd over seeds), and how many runs each of simulate's
warnings named: `overloaded` (fewer completed than arrived: a short run's ramp near saturation reads so too), `no
steady state` (the running batch's trend), `short run` (decoding after the last arrival) and `few stretches` (fewer
than 20 independent stretches of the load; neither of the last two beside `overloaded`). A warning is right where
the figures it flags are off, and noise where they are not. Then, per short run near saturation, `short run`'s
estimate of how low the drain reads TPOT (said only where the run is not `overloaded`) against what it did: the same
arrivals simulated again with three times the requests after them (nothing drains), the window's requests' mean TPOT
in each, and what simulate said of the short run. About two minutes on 2 cores.

    python benchmarks/steadiness.py [--seeds 10] [--rates 8,12,16,19,20] [--requests 500,1000,4000,16000]
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Physics
from tokenroof.serving.simulate import Lengths, SimResult, Workload, simulate

WARNINGS = ("overloaded", "no steady state", "short run", "few stretches")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--rates", default="8,12,16,19,20")
    parser.add_argument("--requests", default="500,1000,4000,16000")
    args = parser.parse_args()
    model = Physics("llama-3.1-8b", "h100-sxm").step_model()
    lengths = (Lengths(1000), Lengths(300))
    print("rate  requests  mean TPOT vs long  p99 TPOT vs long  " + "  ".join(WARNINGS) + "  (runs named)")
    for rate in (float(r) for r in args.rates.split(",")):
        long = simulate(model, Workload(rate, *lengths, num_requests=64000), max_num_seqs=256, seed=99).summary()
        for n in (int(r) for r in args.requests.split(",")):
            mean, p99, named = [], [], np.zeros(len(WARNINGS), dtype=int)
            for seed in range(args.seeds):
                run = simulate(model, Workload(rate, *lengths, num_requests=n), max_num_seqs=256, seed=seed).summary()
                mean.append(run["tpot_ms"]["mean"] / long["tpot_ms"]["mean"] - 1)
                p99.append(run["tpot_ms"]["p99"] / long["tpot_ms"]["p99"] - 1)
                named += [any(w.startswith(kind) for w in run["warnings"]) for kind in WARNINGS]
            print(
                f"{rate:4g}  {n:8,}  {np.mean(mean):+6.1%} ± {np.std(mean):4.1%}    {np.mean(p99):+6.1%} ± "
                f"{np.std(p99):4.1%}   "
                + "  ".join(f"{k:>{len(w)}}/{args.seeds}" for k, w in zip(named, WARNINGS, strict=True))
            )
    drains(model, args.seeds)


def window_tpot_s(run: SimResult, n: int, window: tuple[float, float]) -> float:
    """The mean TPOT of the first `n` requests sent inside `window`."""
    first = sorted(run.sequences, key=lambda q: int(q.request_id))[:n]
    sent = [q for q in first if window[0] <= q.arrival_s <= window[1] and q.finished_s and q.first_token_s]
    return float(np.mean([(q.finished_s - q.first_token_s) / (q.max_tokens - 1) for q in sent]))


def drains(model: StepModel, seeds: int) -> None:
    """`short run`'s estimate against the drain's effect, on the same arrivals continued."""
    print("\nrate  requests  seed  TPOT drained vs continued  drain's estimate  simulate said")
    for rate, n in ((20.0, 300), (20.0, 1000), (16.0, 300), (12.0, 300)):
        for seed in range(min(seeds, 4)):
            lengths = (Lengths(1000), Lengths(300))
            short, continued = (
                simulate(model, Workload(rate, *lengths, num_requests=k), 256, seed=seed) for k in (n, 3 * n)
            )
            window = short.window_s()
            estimate = short._drain_warnings(*window)  # the estimator, said or not
            low = re.search(r"about (\d+)% low", estimate[0]) if estimate else None
            said = ", ".join(kind for kind in WARNINGS if any(w.startswith(kind) for w in short.summary()["warnings"]))
            drained = window_tpot_s(short, n, window) / window_tpot_s(continued, n, window) - 1
            print(
                f"{rate:4g}  {n:8,}  {seed:4}  {drained:+24.1%}  {(low.group(1) + '% low') if low else '≤ 3%':>16}  "
                f"{said or '-'}"
            )


if __name__ == "__main__":
    main()
