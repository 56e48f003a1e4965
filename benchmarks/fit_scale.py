"""Speed of `predict` on large measurement tables: read, fit and predict 10^3 to 10^6 rows.

Two kinds of table, both from one knee-shaped step model (TPOT = 1 + max(12, b·12/180) + 0.02·b ms) with 3%
log-normal noise per row:
- repeated: integer batches 1..512 drawn at random, so every batch repeats (a long benchmark log);
- fractional: every row a distinct measured average running batch in 1..512 (9 significant digits).

Prints seconds to read the CSV, to fit and predict (`predict_table` at batch 256 and its JSON, as the CLI
does), and the total, with the prediction against the truth. "points" are what the fit saw (distinct batches,
or bins past fit.MAX_POINTS); "left out" are points past a running-batch stall the data seem to show
(`fit.past_cap`: single noisy points 3% apart can look like one). It asserts nothing: timings on shared
machines are noisy (run it with nothing else running).
    python benchmarks/fit_scale.py [--sizes 1000 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from tokenroof.fit.predict import predict_table
from tokenroof.io.measurements import read_table

KINDS = ("repeated", "fractional")
NOISE = 0.03
ASKED = 256.0


def truth_ms(batch: np.ndarray) -> np.ndarray:
    return 1.0 + np.maximum(12.0, batch * 12.0 / 180.0) + 0.02 * batch


def write_table(path: Path, rows: int, kind: str, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    batch = rng.integers(1, 513, rows).astype(float) if kind == "repeated" else rng.uniform(1.0, 512.0, rows)
    tpot = truth_ms(batch) * np.exp(NOISE * rng.normal(size=rows))
    cells = np.char.add(np.char.add(np.char.mod("%.9g", batch), ","), np.char.mod("%.6g", tpot))
    path.write_text(f"# synthetic: {kind} batches, {NOISE:.0%} noise\nbatch,tpot_ms\n" + "\n".join(cells) + "\n")


def timed(path: Path) -> tuple[float, float, int, int, float]:
    """Seconds to read and to fit + predict, the points fitted and left out (past a cap the data seem to show),
    and the predicted TPOT (ms) at ASKED."""
    start = time.perf_counter()
    table = read_table([path])
    read = time.perf_counter()
    result = predict_table(table, [ASKED])
    data = result.to_dict()
    done = time.perf_counter()
    left_out = len(result.excluded.batches) if result.excluded is not None and result.excluded.left_out else 0
    return read - start, done - read, result.fit.n_fit, left_out, float(data["predictions"][0]["tpot_ms"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6])
    parser.add_argument("--repeats", type=int, default=1, help="best of this many runs")
    args = parser.parse_args()
    want = float(truth_ms(np.array([ASKED]))[0])
    print(f"predict at batch {ASKED:g} (truth {want:.3f} ms); seconds, best of {args.repeats}")
    print(f"{'kind':<11} {'rows':>9} {'points':>7} {'left out':>8} {'read':>6} {'fit+pred':>9} {'total':>6}   TPOT ms")
    with tempfile.TemporaryDirectory() as folder:
        for kind in KINDS:
            for rows in args.sizes:
                path = Path(folder) / f"{kind}-{rows}.csv"
                write_table(path, rows, kind)
                runs = [timed(path) for _ in range(args.repeats)]
                read, fit = min(r[0] for r in runs), min(r[1] for r in runs)
                _, _, points, left_out, tpot = runs[0]
                print(
                    f"{kind:<11} {rows:>9,} {points:>7,} {left_out:>8,} {read:>6.2f} {fit:>9.2f} {read + fit:>6.2f}   "
                    f"{tpot:.3f} ({tpot / want - 1:+.2%})"
                )


if __name__ == "__main__":
    main()
