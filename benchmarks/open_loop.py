"""The scheduler fit on an open-loop sweep to saturation, as users' GuideLLM sweeps measure it (issue 28).

GuideLLM's `sweep` profile runs a synchronous and a throughput benchmark, then rates spaced evenly between the two: its
top rates sit near saturation, where one run's mean TTFT is a sample of a queue (400 Poisson arrivals at 95% load:
±86% between runs) and its batch a sample too (±10%). benchmarks/replay.py's GuideLLM case fits rates up to half of
saturation with 3,000 requests a rate; this one fits what a sweep measures:

- a known server (each truth of benchmarks/replay.py) under Poisson arrivals at 1/9 … 8/9 of its saturation rate
  (GuideLLM's eight rates between a synchronous rate near 0 and the throughput one) and at 95%, `--requests` arrivals
  a rate (500 by default), each rate its own sample and nothing added: the sample is the noise;
- written as GuideLLM's report (scripts/make_measured_examples.py), read by `predict`'s path data only and with the
  physics prior (model and hardware named, no engine), the scheduler fitted (serving_fit, through with_scheduler);
- scored: the prompt budget found, the replay of the sweep (TPOT and TTFT rms; points whose TTFT the fit names a
  queue's tail sample), the saturation rate the fitted model predicts against the truth's (saturation_rate, the same
  server), and TPOT at twice the batch the sweep reached (a closed loop the sweep did not measure), each over seeds.

`--format sglang` writes the same sweep as `sglang.bench_serving` does instead: a JSON line a rate, its means over the
whole run (ramp-up and drain included) and its `concurrency` Σ latency ÷ duration, Poisson arrivals.

`--format vllm` writes each rate as a `vllm bench serve --request-rate R --save-result` file (whole runs, as SGLang's),
its arrivals gamma gaps of shape `--burstiness` (1: Poisson); `--as-poisson` says burstiness 1 in the files whatever
the run drew, so they are replayed as Poisson, as before tokenroof read vLLM's burstiness.

`--stop seconds` writes GuideLLM's report as a run under a time limit takes it (no warm-up or cool-down): means and
request concurrency over the successful requests from the first request to the limit, what was in flight then cancelled
(`incomplete`); `--stop requests` as a run under a request limit (every request answered, the drain in the means);
the default `window`, a steady window (warm-up and cool-down cut). `--as-window` drops the request totals from such a
report, so it is read as a steady window, as before the reader took them.

    python benchmarks/open_loop.py [--requests N] [--seeds K] [--arrivals poisson|constant] [--format guidellm|sglang]
        [--stop window|seconds|requests] [--as-window] [--format vllm --burstiness B [--as-poisson]]
        [--prior-only | --data-only]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import cases, generator
from tokenroof.fit.predict import MeasuredWorkload, predict_table, prior_for
from tokenroof.io.measurements import read_table
from tokenroof.serving.deployment import Physics
from tokenroof.serving.engine.core import Server
from tokenroof.serving.replay import with_scheduler
from tokenroof.serving.saturation import at_cap, saturation_rate
from tokenroof.serving.simulate import Lengths

FRACTIONS = (*(k / 9 for k in range(1, 9)), 0.95)  # GuideLLM's sweep rates (of the throughput rate), and one more
CAP = 256  # the batch cap the truth and the fit are both run at for the saturation rate (vLLM's usual max_num_seqs)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="Poisson arrivals a rate")
    parser.add_argument("--seeds", type=int, default=2, help="sweeps per truth, each its own arrival samples")
    parser.add_argument("--data-only", action="store_true", help="leave out the fits with the physics prior")
    parser.add_argument("--prior-only", action="store_true", help="leave out the data-only fits")
    parser.add_argument(
        "--arrivals", choices=("poisson", "constant"), default="poisson",
        help="Poisson arrivals, or evenly spaced ones (GuideLLM's sweep default)",
    )  # fmt: skip
    parser.add_argument(
        "--format", choices=("guidellm", "sglang", "vllm"), default="guidellm",
        help="the sweep as GuideLLM's report, SGLang's bench_serving lines or vllm bench serve results (whole runs)",
    )  # fmt: skip
    parser.add_argument(
        "--stop", choices=("window", "seconds", "requests"), default="window",
        help="GuideLLM: a steady window, a run stopped at a time limit, or one stopped at a request limit",
    )  # fmt: skip
    parser.add_argument("--as-window", action="store_true", help="GuideLLM: drop the request totals from the report")
    parser.add_argument("--burstiness", type=float, default=1.0, help="vLLM: the gamma shape of arrival gaps")
    parser.add_argument("--as-poisson", action="store_true", help="vLLM: the files say burstiness 1")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    modes = [m for m in (False, True) if not (m and args.data_only) and not (not m and args.prior_only)]
    gen = generator()
    scores: dict[bool, dict[str, list]] = {
        m: {k: [] for k in ("sat", "far", "tpot", "ttft", "budget", "tail")} for m in modes
    }
    for case in cases():
        lengths = Lengths(case.input_len), Lengths(case.output_len)
        truth_server = Server(None, case.budget)
        truth_sat = saturation_rate(case.truth, *lengths, CAP, truth_server)
        print(f"{case.name}: saturation {truth_sat:.3g} req/s at cap {CAP}")
        for seed in range(args.seeds):
            rates = [f * truth_sat for f in FRACTIONS]
            rng = np.random.default_rng(seed)
            with tempfile.TemporaryDirectory() as tmp:
                if args.format == "vllm":
                    path = Path(tmp)
                    for i, rate in enumerate(rates):
                        run = gen.vllm_rate_result(rate, case.input_len, case.output_len, rng, args.requests,
                                                   100 * seed + i, case.truth, case.budget, None, noise=False,
                                                   burstiness=args.burstiness)  # fmt: skip
                        run["burstiness"] = 1.0 if args.as_poisson else args.burstiness
                        (path / f"vllm-{i}.json").write_text(json.dumps(run))
                elif args.format == "sglang":
                    path = Path(tmp) / "sweep.jsonl"
                    lines = [
                        gen.sglang_line(rate, case.input_len, case.output_len, rng, args.requests, 100 * seed + i,
                                        case.truth, case.budget, None, noise=False)
                        for i, rate in enumerate(rates)
                    ]  # fmt: skip
                    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
                else:
                    path = Path(tmp) / "guidellm.json"
                    report = gen.guidellm_report(
                        rates, case.input_len, case.output_len, rng, case.truth, case.budget, None,
                        requests=args.requests, noise=False, seed=100 * seed, arrivals=args.arrivals,
                        stop=args.stop,
                    )  # fmt: skip
                    for bench in report["benchmarks"] if args.as_window else []:
                        bench["metrics"].pop("request_totals", None)
                    path.write_text(json.dumps(report))
                table = read_table([path])
            for prior in modes:
                physics = case.physics if prior else Physics()
                fitted_prior = prior_for(table, physics, MeasuredWorkload()) if prior else None
                top = [float(table.batch.max())]
                result = with_scheduler(predict_table(table, top, fitted_prior, n_samples=0), physics)
                serving = result.serving
                assert serving is not None
                fitted = Server(None, serving.max_num_batched_tokens)
                sat = saturation_rate(serving.model, *lengths, CAP, fitted)
                far = max(round(2 * float(table.batch.max())), 2)
                far_true = at_cap(case.truth, *lengths, far, truth_server).tpot_ms["mean"]
                far_fit = at_cap(serving.model, *lengths, far, fitted).tpot_ms["mean"]
                tail = sum(bool(row.get("ttft_outlier")) for row in serving.replay)
                got = scores[prior]
                got["sat"].append(sat / truth_sat - 1)
                got["far"].append(far_fit / far_true - 1)
                got["tpot"].append(serving.tpot_rms)
                got["ttft"].append(serving.ttft_rms or 0.0)
                got["budget"].append(serving.max_num_batched_tokens == case.budget)
                got["tail"].append(tail)
                print(
                    f"  seed {seed} {'with prior' if prior else 'data only '}: budget "
                    f"{serving.max_num_batched_tokens} ({'right' if got['budget'][-1] else 'wrong'}), replay rms TPOT "
                    f"{serving.tpot_rms:.1%} TTFT {serving.ttft_rms or 0:.1%} ({tail} TTFT named a queue's tail "
                    f"sample); saturation {sat:.3g} req/s ({got['sat'][-1]:+.1%}); TPOT at a closed loop of {far}: "
                    f"{got['far'][-1]:+.1%}"
                )
                if args.verbose:
                    for row in serving.replay:
                        print(
                            f"    {json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})}"
                        )
                    for warning in result.warnings:
                        print(f"    warning: {warning}")
    stop_label = {
        "sglang": "",
        "vllm": f"(burstiness {args.burstiness:g}{' read as Poisson' * args.as_poisson}) ",
        "guidellm": f"(stop {args.stop}{' read as a window' * args.as_window}) ",
    }[args.format]
    for prior, got in scores.items():
        sat_abs, far_abs = np.abs(got["sat"]), np.abs(got["far"])
        print(
            f"{'with prior' if prior else 'data only'}: {len(sat_abs)} {args.format} sweeps "
            f"{stop_label}"
            f"({args.requests} "
            f"{args.arrivals if args.format == 'guidellm' else 'random'} arrivals a rate): "
            f"saturation |error| median {np.median(sat_abs):.1%} max {sat_abs.max():.1%} (mean signed "
            f"{np.mean(got['sat']):+.1%}); TPOT at twice the swept batch median {np.median(far_abs):.1%} max "
            f"{far_abs.max():.1%}; replay rms TPOT median {np.median(got['tpot']):.1%}, TTFT "
            f"{np.median(got['ttft']):.1%}; budget right {sum(got['budget'])}/{len(got['budget'])}; "
            f"{sum(got['tail'])} TTFT points named a queue's tail sample"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
