"""Lengths a client drew at random, replayed as drawn or as one length: what the scheduler fit makes of each.

A known server (a step model below, not fitted to anything) is swept the way LLMPerf sweeps it
(`token_benchmark_ray.py --num-concurrent-requests N`, N = 1..32, a closed loop started at once, six requests a
stream; `scripts/make_measured_examples.py llmperf_run`), its prompt and output lengths drawn uniform over
mean × (1 ± spread). `predict` reads the folder (the table then states the lengths' spread, `input_len_cv` /
`output_len_cv`) and fits the scheduler, which draws lengths so spread; the same table with the spread struck out is
fitted again at one length. Printed per spread: the replay's TPOT / TTFT rms, and the fitted model's mean TPOT and
TTFT kept full at 32 streams against the server's (both at the sweep's own lengths, drawn as measured). About 2 s.

    python benchmarks/length_spread.py
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from tokenroof.fit.core import fit_table
from tokenroof.io.measurements import read_table
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.replay import drawn, serving_fit
from tokenroof.serving.saturation import at_cap

ROOT = Path(__file__).resolve().parent.parent
SERVER = StepModel(t_fixed_s=3e-3, t_weights_s=12e-3, t_compute_s=60e-6, t_kv_token_s=2e-7, t_seq_s=1e-4)
CONCURRENCIES = (1, 2, 4, 8, 16, 32)
INPUT_LEN, OUTPUT_LEN = 512, 64
# (prompt spread, output spread) as uniform half-widths: fixed, outputs ±15/30/50%, and both as LLMPerf's defaults
# (550 ± 150 in, 150 ± 80 out: sd ÷ mean 0.27 and 0.53, a uniform's half-width √3 times that)
SPREADS = ((0.0, 0.0), (0.0, 0.15), (0.0, 0.3), (0.0, 0.5), (0.47, 0.92))


def generator():  # the examples' writer, which also writes LLMPerf's files of a known server
    spec = importlib.util.spec_from_file_location("make_measured_examples", ROOT / "scripts/make_measured_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep(folder: Path, input_spread: float, spread: float) -> None:
    make = generator()
    for n in CONCURRENCIES:
        summary, requests = make.llmperf_run(
            n, INPUT_LEN, OUTPUT_LEN, 6 * n, SERVER, spread=spread, input_spread=input_spread
        )
        run = folder / f"c{n}"
        run.mkdir()
        (run / f"model_{INPUT_LEN}_{OUTPUT_LEN}_summary.json").write_text(json.dumps(summary))
        (run / f"model_{INPUT_LEN}_{OUTPUT_LEN}_individual_responses.json").write_text(json.dumps(requests))


def main() -> None:
    head = f"{'spread in / out':>16}  {'cv in / out':>11}  {'replayed as':>12}  {'rms TPOT / TTFT':>16}"
    print(f"{head}  at 32: TPOT, TTFT")
    for input_spread, spread in SPREADS:
        with tempfile.TemporaryDirectory() as tmp:
            sweep(Path(tmp), input_spread, spread)
            table = read_table([Path(tmp)])
        sem = table.semantics
        cv = (sem.input_len_cv or 0.0, sem.output_len_cv or 0.0)
        lengths = drawn(INPUT_LEN, cv[0]), drawn(OUTPUT_LEN, cv[1])
        truth = at_cap(SERVER, *lengths, 32)
        one = replace(table, semantics=replace(sem, input_len_cv=None, output_len_cv=None))
        for label, fitted_table in (("drawn", table), ("one length", one)):
            if label == "one length" and cv == (0.0, 0.0):
                continue
            serving = serving_fit(fit_table(fitted_table, None, n_samples=0), fitted_table)
            assert serving is not None and serving.ttft_rms is not None
            kept = at_cap(serving.model, *lengths, 32)
            tpot = kept.tpot_ms["mean"] / truth.tpot_ms["mean"] - 1
            ttft = kept.ttft_ms["mean"] / truth.ttft_ms["mean"] - 1
            print(
                f"{f'±{input_spread:.0%} / ±{spread:.0%}':>16}  {f'{cv[0]:.2f} / {cv[1]:.2f}':>11}  {label:>12}  "
                f"{f'{serving.tpot_rms:.1%} / {serving.ttft_rms:.1%}':>16}  {tpot:+.1%}, {ttft:+.1%}"
            )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
