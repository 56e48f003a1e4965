"""Speed and memory of `predict` on large measurement tables: read, fit and predict 10^3 to 10^6 rows.

Three kinds of table, from one knee-shaped step model (TPOT = 1 + max(12, b·12/180) + 0.02·b ms) with 3%
log-normal noise per row:
- repeated: integer batches 1..512 drawn at random, so every batch repeats (a long benchmark log);
- fractional: every row a distinct measured average running batch in 1..512 (9 significant digits);
- wide: fractional, at two contexts (300 and 4,000 tokens, KV 10 ns per token), with throughput and TTFT columns.

Prints seconds to read the CSV, to fit and predict (`predict_table` at batch 256 and its JSON, as the CLI
does), the total, the process's peak memory (each table in a fresh process, imports included; issue 33's
target: a million rows under 2 s and 500 MB), with the prediction against the truth. "points" are what the
fit saw (distinct batches, or bins past fit.MAX_POINTS); "left out" are points past a running-batch stall the
data seem to show (`fit.past_cap`: single noisy points 3% apart can look like one). It asserts nothing:
timings on shared machines are noisy (run it with nothing else running).
    python benchmarks/fit_scale.py [--sizes 1000 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tokenroof.fit.predict import predict_table
from tokenroof.io.measurements import read_table

KINDS = ("repeated", "fractional", "wide")
NOISE = 0.03
ASKED = 256.0


def truth_ms(batch: np.ndarray) -> np.ndarray:
    return 1.0 + np.maximum(12.0, batch * 12.0 / 180.0) + 0.02 * batch


def write_table(path: Path, rows: int, kind: str, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    batch = rng.integers(1, 513, rows).astype(float) if kind == "repeated" else rng.uniform(1.0, 512.0, rows)
    columns = ["batch", "tpot_ms"]
    if kind == "wide":
        context = rng.choice([300.0, 4000.0], rows)
        tpot = (truth_ms(batch) + 1e-5 * batch * context) * np.exp(NOISE * rng.normal(size=rows))
        values = [tpot, batch * 1000 / tpot, context, 50 + rng.uniform(0, 10, rows)]
        columns += ["throughput_tok_s", "context_tokens", "ttft_ms"]
    else:
        values = [truth_ms(batch) * np.exp(NOISE * rng.normal(size=rows))]
    cells = np.char.mod("%.9g", batch)
    for column in values:
        cells = np.char.add(np.char.add(cells, ","), np.char.mod("%.6g", column))
    header = f"# synthetic: {kind} batches, {NOISE:.0%} noise\n{','.join(columns)}\n"
    path.write_text(header + "\n".join(cells) + "\n")


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
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the child process: one table
    args = parser.parse_args()
    if args.one:
        one(args.one)
        return
    want = float(truth_ms(np.array([ASKED]))[0])
    print(f"predict at batch {ASKED:g} (truth {want:.3f} ms at context 0); seconds, best of {args.repeats}")
    header = f"{'kind':<11} {'rows':>9} {'points':>7} {'left out':>8} {'read':>6} {'fit+pred':>9} {'total':>6}"
    print(f"{header} {'peak MB':>8}   TPOT ms")
    with tempfile.TemporaryDirectory() as folder:
        for kind in KINDS:
            for rows in args.sizes:
                path = Path(folder) / f"{kind}-{rows}.csv"
                write_table(path, rows, kind)
                runs = [in_a_fresh_process(path) for _ in range(args.repeats)]
                read, fit = min(r["read"] for r in runs), min(r["fit"] for r in runs)
                peak, first = min(r["peak_mb"] for r in runs), runs[0]
                tpot = first["tpot_ms"]
                truth = f"({tpot / want - 1:+.2%})" if kind != "wide" else "(context 300 and 4,000: no one truth)"
                print(
                    f"{kind:<11} {rows:>9,} {first['points']:>7,} {first['left_out']:>8,} {read:>6.2f} {fit:>9.2f} "
                    f"{read + fit:>6.2f} {peak:>8.0f}   {tpot:.3f} {truth}"
                )


def in_a_fresh_process(path: Path) -> dict[str, float]:
    """`timed` in a new Python process (its peak memory is this table's alone)."""
    done = subprocess.run([sys.executable, __file__, "--one", str(path)], capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM (reset at exec, unlike ru_maxrss, which a child started by a
    large parent inherits), else ru_maxrss."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(path: Path) -> None:
    read, fit, points, left_out, tpot = timed(path)
    peak_mb = peak_rss_mb()
    print(
        json.dumps(
            {"read": read, "fit": fit, "points": points, "left_out": left_out, "tpot_ms": tpot, "peak_mb": peak_mb}
        )
    )


if __name__ == "__main__":
    main()
