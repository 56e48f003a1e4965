"""Write the measured-journey examples: `vllm bench serve` results and a GuideLLM report of one known server.

No real H100 is reachable from here, so the "server" is the scheduler of `simulate` running a step model that is
*not* the one any fit assumes: llama-3.1-8b on an H100 SXM with the vllm-v1 engine profile, prompts chunked at
vLLM V1's 8,192-token budget, measured the way each tool measures:

- `examples/vllm/vllm-c{N}.json`: `vllm bench serve --dataset-name random --random-input-len 1024
  --random-output-len 256 --max-concurrency N --request-rate inf --num-prompts 10N` (every stream starts at once,
  means over every request: the first wave's long TTFTs included), N = 1..128, and one file at 4,096 prompt tokens
  (`examples/vllm-in4096/`);
- `examples/vllm-holdout/`: the same at N = 256, 384 (what the fits are checked against, never fitted);
- `examples/guidellm.json`: a GuideLLM sweep of Poisson request rates (256 in / 128 out), with the measured mean
  concurrency as GuideLLM reports it.
- `examples/sglang/sweep.jsonl`: `python -m sglang.bench_serving --dataset-name random --random-input-len 1024
  --random-output-len 256 --random-range-ratio 1 --request-rate R --num-prompts 1000 --output-file sweep.jsonl` at
  R = 2, 4, 8, 12 and 16 req/s (Poisson arrivals; means over every request of the run, and its `concurrency`,
  Σ latency ÷ duration, as bench_serving computes them), a line a run.

The committed files were written with the vllm-v1 profile as it stood then (examples/vllm*/ and guidellm.json on
2026-12-04, before the profile's bias correction and the presets' memory fix; examples/sglang/ on 2026-12-07): the
profile has moved since, so running the script now writes other numbers than the docs show.

Each metric carries 2% log-normal noise (seeded), as repeated runs of a real server scatter. The files say they are
synthetic (a `tokenroof_provenance` key, which the readers pass over as they do any key they do not read). Run from
the repository root:

    .venv/bin/python scripts/make_measured_examples.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Physics
from tokenroof.serving.replay import answered_by_stop, held_concurrency
from tokenroof.serving.simulate import ClosedLoop, Lengths, SimResult, Workload, simulate

ROOT = Path(__file__).resolve().parent.parent
TRUTH = Physics("llama-3.1-8b", "h100-sxm", engine="vllm-v1")
BUDGET = 8192  # vLLM V1's max_num_batched_tokens on GPUs of 70 GiB or more
NOISE = 0.02
PROVENANCE = (
    "SYNTHETIC: written by scripts/make_measured_examples.py, not a real vLLM run: simulate's scheduler with "
    "llama-3.1-8b on h100-sxm (engine profile vllm-v1, prompts chunked at 8192 tokens), 2% noise per metric"
)


def noisy(rng: np.random.Generator, value: float) -> float:
    return float(value * np.exp(rng.normal(0.0, NOISE)))


def stats(values_ms: np.ndarray) -> dict[str, float]:
    return {
        "mean": float(values_ms.mean()),
        "median": float(np.median(values_ms)),
        "std": float(values_ms.std()),
        "p99": float(np.percentile(values_ms, 99)),
    }


def vllm_result(
    concurrency: int,
    input_len: int,
    output_len: int,
    rng: np.random.Generator,
    truth: StepModel | None = None,
    budget: int | None = BUDGET,
    kv_capacity_tokens: int | None = None,
    separate: bool = False,
) -> dict[str, Any]:
    """One `vllm bench serve --save-result` file: `--num-prompts` 10× the concurrency (at least 100), every stream
    started at once, each replaced as one ends; means over every request, as vLLM takes them. `truth`: the server's
    step model (TRUTH's by default, with its KV pool); `separate`: it prefills in steps of their own (vLLM V0), at most
    `budget` tokens a step."""
    sm, kv = (TRUTH.step_model(), TRUTH.kv_pool_tokens()) if truth is None else (truth, kv_capacity_tokens)
    prompts = max(100, 10 * concurrency)
    run = ClosedLoop(concurrency, Lengths(input_len), Lengths(output_len), prompts, "burst")
    result = simulate(sm, run, 1024, 0, kv, max_num_batched_tokens=budget, separate_prefill=separate)
    seqs = result.sequences
    ttft = np.array([(s.first_token_s or 0) - s.arrival_s for s in seqs]) * 1e3
    tpot = np.array([((s.finished_s or 0) - (s.first_token_s or 0)) / (s.max_tokens - 1) for s in seqs]) * 1e3
    e2e = np.array([(s.finished_s or 0) - s.arrival_s for s in seqs]) * 1e3
    steps = result.step_durations_s * 1e3
    duration = max(s.finished_s or 0 for s in seqs)
    scale = {name: noisy(rng, 1.0) for name in ("ttft", "tpot", "thr")}
    output_tok_s = prompts * output_len / duration * scale["thr"]
    data: dict[str, Any] = {
        "tokenroof_provenance": PROVENANCE,
        "date": "20261204-120000",
        "backend": "vllm",
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": prompts,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": concurrency,
        "duration": duration,
        "completed": prompts,
        "total_input_tokens": input_len * prompts,
        "total_output_tokens": output_len * prompts,
        "request_throughput": output_tok_s / output_len,
        "output_throughput": output_tok_s,
        "total_token_throughput": output_tok_s * (input_len + output_len) / output_len,
    }
    for name, values in (("ttft", ttft * scale["ttft"]), ("tpot", tpot * scale["tpot"]), ("itl", steps)):
        for key, value in stats(values).items():
            data[f"{key}_{name}_ms"] = value
    for key, value in stats(e2e).items():
        data[f"{key}_e2el_ms"] = value
    return data


def whole_rate_run(
    workload: Workload,
    seed: int,
    truth: StepModel | None,
    budget: int | None,
    kv_capacity_tokens: int | None,
    max_num_seqs: int,
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """A rate run as vLLM's and SGLang's clients take it (every request answered, none capped by the client): its
    duration from the first request sent to the last finished, and each request's latency, TTFT and TPOT ((latency −
    TTFT) ÷ (output − 1)), all in seconds. `truth`: the server's step model (TRUTH's by default, with its KV pool)."""
    sm, kv = (TRUTH.step_model(), TRUTH.kv_pool_tokens()) if truth is None else (truth, kv_capacity_tokens)
    result = simulate(sm, workload, max_num_seqs, seed, kv, max_num_batched_tokens=budget)
    seqs = result.sequences
    start = min(s.arrival_s for s in seqs)
    duration = max(s.finished_s or 0 for s in seqs) - start
    e2e = np.array([(s.finished_s or 0) - s.arrival_s for s in seqs])
    ttft = np.array([(s.first_token_s or 0) - s.arrival_s for s in seqs])
    return duration, e2e, ttft, (e2e - ttft) / (workload.output_len.mean - 1)


def measured_rate_run(
    workload: Workload,
    seed: int,
    truth: StepModel | None,
    budget: int | None,
    kv_capacity_tokens: int | None,
    max_num_seqs: int,
    rng: np.random.Generator,
    noise: bool,
) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray]:
    """`whole_rate_run` as a rate run's tool reports it (vLLM's, SGLang's): the duration (s), the output throughput
    (tok/s), each request's end-to-end latency (s), TTFT and TPOT (ms), the examples' 2% noise drawn on the
    throughput, TTFT and TPOT (in that order) unless `noise` is off."""
    duration, e2e, ttft, tpot = whole_rate_run(workload, seed, truth, budget, kv_capacity_tokens, max_num_seqs)

    def jitter(value: float) -> float:
        return noisy(rng, value) if noise else float(value)

    output_tok_s = jitter(workload.num_requests * workload.output_len.mean / duration)
    return duration, output_tok_s, e2e, ttft * 1e3 * jitter(1.0), tpot * 1e3 * jitter(1.0)


def vllm_rate_result(
    rate: float,
    input_len: int,
    output_len: int,
    rng: np.random.Generator,
    prompts: int = 1000,
    seed: int = 0,
    truth: StepModel | None = None,
    budget: int | None = BUDGET,
    kv_capacity_tokens: int | None = None,
    noise: bool = True,
    burstiness: float = 1.0,
) -> dict[str, Any]:
    """One `vllm bench serve --request-rate R --burstiness B --save-result` file: gamma gaps of shape B (1: Poisson),
    no client cap, means over every request, the duration from the first request sent to the last finished, as vLLM
    takes them; the examples' 2% noise on TTFT, TPOT and throughput unless `noise` is off."""
    workload = Workload(rate, Lengths(input_len), Lengths(output_len), num_requests=prompts, burstiness=burstiness)
    duration, output_tok_s, e2e, ttft, tpot = measured_rate_run(
        workload, seed, truth, budget, kv_capacity_tokens, 1024, rng, noise
    )
    data: dict[str, Any] = {
        "tokenroof_provenance": PROVENANCE,
        "backend": "vllm",
        "num_prompts": prompts,
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": None,
        "duration": duration,
        "completed": prompts,
        "total_input_tokens": input_len * prompts,
        "total_output_tokens": output_len * prompts,
        "request_throughput": output_tok_s / output_len,
        "output_throughput": output_tok_s,
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2el", e2e * 1e3)):
        data.update({f"{key}_{name}_ms": value for key, value in stats(values).items()})
    return data


def guidellm_report(
    rates: list[float],
    input_len: int,
    output_len: int,
    rng: np.random.Generator,
    truth: StepModel | None = None,
    budget: int | None = BUDGET,
    kv_capacity_tokens: int | None = None,
    requests: int = 3000,
    noise: bool = True,
    seed: int = 0,
    arrivals: str = "poisson",
    stop: str = "window",
) -> dict[str, Any]:
    """A GuideLLM report of request rates against the same server (open loop): Poisson or evenly spaced (`arrivals`
    "constant", GuideLLM's sweep default) arrivals, `requests` a rate, each rate its own sample (seeded `seed` + its
    index), its means with the examples' 2% noise unless `noise` is off (then the arrival sample is the only noise,
    as on a real server). `stop`: how each benchmark's means were taken, as GuideLLM's GenerativeMetrics.compile takes
    them: "window", a steady window (warm-up and cool-down cut; no request totals, as the shipped example);
    "seconds", a time limit at the last arrival, what is in flight then cancelled (`incomplete`), the means and the
    concurrency over the requests answered by then; "requests", a request limit, every request answered, the means and
    the concurrency over the whole run."""
    sm, kv = (TRUTH.step_model(), TRUTH.kv_pool_tokens()) if truth is None else (truth, kv_capacity_tokens)
    benchmarks = []
    for i, rate in enumerate(rates):
        burstiness = math.inf if arrivals == "constant" else 1.0
        workload = Workload(rate, Lengths(input_len), Lengths(output_len), num_requests=requests, burstiness=burstiness)
        result = simulate(sm, workload, 1024, seed + i, kv, max_num_batched_tokens=budget)
        if stop != "window":
            benchmarks.append(guidellm_run(result, rate, input_len, output_len, rng, noise, arrivals, stop))
            continue
        summary = result.summary()
        # requests in flight, time-averaged over the window the other metrics are taken over (GuideLLM's
        # request_concurrency is the time-weighted distribution of requests in flight): what the fit matches
        concurrency = held_concurrency(result, in_flight=True)

        def jitter(value: float) -> float:
            return noisy(rng, value) if noise else float(value)

        def dist(mean: float) -> dict[str, Any]:
            return {"successful": {"mean": mean, "median": mean}, "errored": None, "total": {"mean": mean}}

        benchmarks.append(
            {
                "type_": "generative_benchmark",
                "args": {"strategy": {"type_": arrivals, "rate": rate}},
                "metrics": {
                    "requests_per_second": dist(summary["request_throughput_req_s"]),
                    "request_concurrency": dist(concurrency),
                    "output_tokens_per_second": dist(jitter(summary["throughput_tok_s"])),
                    "inter_token_latency_ms": dist(jitter(summary["tpot_ms"]["mean"])),
                    "time_to_first_token_ms": dist(jitter(summary["ttft_ms"]["mean"])),
                    "prompt_token_count": dist(float(input_len)),
                    "output_token_count": dist(float(output_len)),
                },
            }
        )
    return {"tokenroof_provenance": PROVENANCE.replace("vLLM run", "GuideLLM run"), "benchmarks": benchmarks}


def guidellm_run(
    result: SimResult,
    rate: float,
    input_len: int,
    output_len: int,
    rng: np.random.Generator,
    noise: bool,
    arrivals: str,
    stop: str,
    strategy: dict[str, Any] | None = None,
    seconds: float | None = None,
) -> dict[str, Any]:
    """One GuideLLM 0.4+ benchmark over its whole run (`guidellm_report`'s "seconds" and "requests" stops): its
    successful requests' means, their time-weighted concurrency from the first request to the run's end, the request
    totals, the strategy and the limit in `config`. `strategy` (a closed loop's) and `seconds`: a run cut that long
    after its first request, what was in flight then cancelled (the requests not yet sent never were)."""
    start, end, answered = answered_by_stop(result)
    sent = len(result.sequences)
    if stop == "requests":
        answered = np.ones(len(result.sequences), dtype=bool)
        end = max(s.finished_s or 0.0 for s in result.sequences)
    elif seconds is not None:
        end = start + seconds
        answered = np.array([s.finished_s is not None and s.finished_s <= end for s in result.sequences])
        sent = sum(s.arrival_s <= end for s in result.sequences)
    seqs = [s for s, kept in zip(result.sequences, answered, strict=True) if kept]
    e2e = np.array([(s.finished_s or 0.0) - s.arrival_s for s in seqs])
    ttft = np.array([(s.first_token_s or 0.0) - s.arrival_s for s in seqs])
    itl = (e2e - ttft) / (output_len - 1)

    def jitter(value: float) -> float:
        return noisy(rng, value) if noise else float(value)

    def dist(mean: float) -> dict[str, Any]:
        return {"successful": {"mean": mean, "median": mean}, "errored": None, "total": {"mean": mean}}

    duration = end - start
    limit = {"max_duration": {"seconds": duration}} if stop == "seconds" else {"max_requests": {"count": len(seqs)}}
    incomplete = sent - len(seqs)
    return {
        "type_": "generative_benchmark",
        "config": {
            "strategy": strategy or {"type_": arrivals, "rate": rate},
            "constraints": limit,
            "warmup": {"percent": None, "value": None},
            "cooldown": {"percent": None, "value": None},
        },
        "metrics": {
            "request_totals": {
                "successful": len(seqs), "incomplete": incomplete, "errored": 0, "total": sent
            },
            "requests_per_second": dist(len(seqs) / duration),
            "request_concurrency": dist(float(e2e.sum() / duration)),
            "output_tokens_per_second": dist(jitter(len(seqs) * output_len / duration)),
            "inter_token_latency_ms": dist(jitter(float(itl.mean()) * 1e3)),
            "time_to_first_token_ms": dist(jitter(float(ttft.mean()) * 1e3)),
            "prompt_token_count": dist(float(input_len)),
            "output_token_count": dist(float(output_len)),
        },
    }  # fmt: skip


def guidellm_throughput(
    streams: int,
    seconds: float,
    input_len: int,
    output_len: int,
    truth: StepModel | None = None,
    budget: int | None = BUDGET,
    kv_capacity_tokens: int | None = None,
) -> dict[str, Any]:
    """GuideLLM's throughput benchmark (a sweep's second): `streams` requests at once, each replaced as it ends, cut
    `seconds` after the first (its time limit, no warm-up), no noise."""
    sm, kv = (TRUTH.step_model(), TRUTH.kv_pool_tokens()) if truth is None else (truth, kv_capacity_tokens)
    loop = ClosedLoop(streams, Lengths(input_len), Lengths(output_len), 100 * streams, "burst")
    result = simulate(sm, loop, 1024, 0, kv, max_num_batched_tokens=budget)
    strategy = {"type_": "throughput", "max_concurrency": streams}
    rng = np.random.default_rng(0)  # (no noise drawn)
    return guidellm_run(result, 0.0, input_len, output_len, rng, False, "", "seconds", strategy, seconds)


def sglang_line(
    rate: float,
    input_len: int,
    output_len: int,
    rng: np.random.Generator,
    prompts: int = 1000,
    seed: int = 0,
    truth: StepModel | None = None,
    budget: int | None = BUDGET,
    kv_capacity_tokens: int | None = None,
    noise: bool = True,
    max_num_seqs: int = 1024,
) -> dict[str, Any]:
    """One run of `sglang.bench_serving` at a request rate, as its calculate_metrics takes it: Poisson arrivals,
    means over every request, the duration from the first request sent to the last finished, TPOT (latency − TTFT)
    ÷ (output − 1), `concurrency` Σ latency ÷ duration; the examples' 2% noise on TTFT, TPOT and throughput unless
    `noise` is off. `truth`: the server's step model (TRUTH's by default, with its KV pool), its batch cap
    `max_num_seqs`."""
    workload = Workload(rate, Lengths(input_len), Lengths(output_len), num_requests=prompts)
    duration, output_tok_s, e2e, ttft, tpot = measured_rate_run(
        workload, seed, truth, budget, kv_capacity_tokens, max_num_seqs, rng, noise
    )
    data: dict[str, Any] = {
        "tokenroof_provenance": PROVENANCE.replace("vLLM run", "SGLang run"),
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": rate,
        "max_concurrency": None,
        "sharegpt_output_len": None,
        "random_input_len": input_len,
        "random_output_len": output_len,
        "random_range_ratio": 1.0,
        "duration": duration,
        "completed": prompts,
        "total_input_tokens": input_len * prompts,
        "total_output_tokens": output_len * prompts,
        "total_output_tokens_retokenized": output_len * prompts,
        "request_throughput": output_tok_s / output_len,
        "input_throughput": output_tok_s * input_len / output_len,
        "output_throughput": output_tok_s,
        "total_throughput": output_tok_s * (input_len + output_len) / output_len,
    }
    for name, values in (("e2e_latency", e2e * 1e3), ("ttft", ttft), ("tpot", tpot)):
        data.update({f"{key}_{name}_ms": value for key, value in stats(values).items()})
    data.update(concurrency=float(e2e.sum() / duration), accept_length=None)
    return data


def llmperf_statistics(name: str, values: np.ndarray) -> dict[str, Any]:
    """One metric's statistics as LLMPerf's summary flattens them (pandas' quantiles, mean, min, max, stddev)."""
    out = {f"results_{name}_quantiles_p{q}": float(np.percentile(values, q)) for q in (25, 50, 75, 90, 95, 99)}
    out |= {f"results_{name}_mean": float(values.mean()), f"results_{name}_min": float(values.min())}
    return out | {f"results_{name}_max": float(values.max()), f"results_{name}_stddev": float(values.std(ddof=1))}


def llmperf_run(
    concurrency: int,
    input_len: int,
    output_len: int,
    completed: int,
    truth: StepModel,
    kv_capacity_tokens: int | None = None,
    budget: int | None = None,
    speed: float = 1.0,
    spread: float = 0.0,
    input_spread: float = 0.0,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One `token_benchmark_ray.py --num-concurrent-requests N --max-num-completed-requests M` run (ray-project/llmperf
    as of 2024-12) against `truth`, its summary and its requests file: N threads start at once and each sends its next
    request as its last ends until M have completed; the N − 1 then in flight run to their end (the run's end waits
    for them) and are dropped. A request's inter_token_latency_s is its gaps from the send summed (the TTFT first)
    over the chunks it received: its tokens, a role chunk and a finish chunk. `speed` scales every time (a run's
    drift); `spread`: output lengths uniform over output_len × (1 ± spread) (LLMPerf draws them normal, mean ±
    `--stddev-output-tokens`), so the streams drift apart as they do on a server; `input_spread` the prompts'."""
    outputs = Lengths(output_len, "uniform", spread) if spread else Lengths(output_len)
    prompts = Lengths(input_len, "uniform", input_spread) if input_spread else Lengths(input_len)
    run = ClosedLoop(concurrency, prompts, outputs, completed + concurrency - 1, "burst")
    result = simulate(truth, run, 1024, 0, kv_capacity_tokens, max_num_batched_tokens=budget)
    seqs = sorted(result.sequences, key=lambda s: s.finished_s or 0.0)
    counted = seqs[:completed]
    ttft = np.array([(s.first_token_s or 0.0) - s.arrival_s for s in counted]) * speed
    e2e = np.array([(s.finished_s or 0.0) - s.arrival_s for s in counted]) * speed
    out = np.array([s.max_tokens for s in counted], dtype=float)
    prompt_tokens = np.array([s.prompt_tokens for s in counted], dtype=float)
    itl = e2e / (out + 2)  # the role chunk and the finish chunk are received but carry no token
    end_s = max(s.finished_s or 0.0 for s in seqs) * speed
    requests = [
        {
            "error_code": None,
            "error_msg": "",
            "inter_token_latency_s": float(i),
            "ttft_s": float(t),
            "end_to_end_latency_s": float(e),
            "request_output_throughput_token_per_s": float(o / e),
            "number_total_tokens": int(p + o),
            "number_output_tokens": int(o),
            "number_input_tokens": int(p),
        }
        for i, t, e, o, p in zip(itl, ttft, e2e, out, prompt_tokens, strict=True)
    ]
    model = "meta-llama/Llama-3.1-8B-Instruct"
    summary: dict[str, Any] = {
        "tokenroof_provenance": PROVENANCE.replace("a real vLLM run", "a real LLMPerf run"),
        "version": "2023-08-31",
        "name": f"meta-llama-Llama-3-1-8B-Instruct_{input_len}_{output_len}_summary",
        "model": model,
        "mean_input_tokens": input_len,
        "stddev_input_tokens": round(input_len * input_spread / math.sqrt(3)),  # a uniform spread's sd
        "mean_output_tokens": output_len,
        "stddev_output_tokens": round(output_len * spread / math.sqrt(3)),
        "num_concurrent_requests": concurrency,
    }
    for name, values in (
        ("inter_token_latency_s", itl),
        ("ttft_s", ttft),
        ("end_to_end_latency_s", e2e),
        ("request_output_throughput_token_per_s", out / e2e),
        ("number_input_tokens", prompt_tokens),
        ("number_output_tokens", out),
    ):
        summary |= llmperf_statistics(name, values)
    summary |= {
        "results_num_requests_started": completed,
        "results_error_rate": 0.0,
        "results_number_errors": 0,
        "results_error_code_frequency": "{}",
        "results_mean_output_throughput_token_per_s": float(out.sum() / end_s),
        "results_num_completed_requests": completed,
        "results_num_completed_requests_per_min": completed / end_s * 60,
        "timestamp": 1796644800,
    }
    return summary, requests


def write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path.relative_to(ROOT)}")


def main() -> None:
    rng = np.random.default_rng(2026)
    for c in (1, 4, 16, 32, 64, 128):
        write(ROOT / "examples" / "vllm" / f"vllm-c{c}.json", vllm_result(c, 1024, 256, rng))
    write(ROOT / "examples" / "vllm-in4096" / "vllm-in4096-c64.json", vllm_result(64, 4096, 256, rng))
    for c in (256, 384):
        write(ROOT / "examples" / "vllm-holdout" / f"vllm-c{c}.json", vllm_result(c, 1024, 256, rng))
    write(ROOT / "examples" / "guidellm.json", guidellm_report([1, 5, 10, 20, 30, 40], 256, 128, rng))
    sglang_rng = np.random.default_rng(2027)  # its own stream: added later, it leaves the files above as they were
    lines = [sglang_line(rate, 1024, 256, sglang_rng, seed=i) for i, rate in enumerate((2, 4, 8, 12, 16))]
    path = ROOT / "examples" / "sglang" / "sweep.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
