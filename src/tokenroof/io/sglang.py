"""`python -m sglang.bench_serving --output-file F` results: JSON Lines, one line a run (the file grows a line
each run), read as table rows.

The metrics are vLLM's, which bench_serving was adapted from: TPOT the mean over requests of (latency − TTFT) ÷
(output tokens − 1), the first token and so any queueing excluded; the lengths from the run's token totals. SGLang
runs are often at a `--request-rate`, and each line records `concurrency`, the mean number of requests in flight
over the whole run (Σ end-to-end latency ÷ duration, ramp-up and drain included): the batch a rate run held from
the client's side, read as GuideLLM's request concurrency is but over the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.io.table import Row, _batch, _number, capped, held_in_flight, rate_value
from tokenroof.io.vllm import _vllm_settings, metrics_row

SGLANG_KEY = "total_output_tokens_retokenized"  # a bench_serving line's own key: vLLM's results have no such total


def is_sglang_result(data: Any) -> bool:
    """One line of `sglang.bench_serving --output-file`: vLLM's metrics with its own retokenized total, or the
    requests in flight it measured (`concurrency`). Not its backend: `vllm bench serve --backend sglang` names it
    too."""
    if not isinstance(data, Mapping) or not ("output_throughput" in data or "mean_tpot_ms" in data):
        return False
    return SGLANG_KEY in data or "concurrency" in data


def _required(data: Mapping[str, Any], key: str, where: str) -> float:
    """A number the line must hold (a missing one named, not derived from the others)."""
    value = _number(data.get(key), where, key)
    if value is None:
        raise TokenroofError(f"{where}: an SGLang result without {key}")
    return value


def _rate(data: Mapping[str, Any], where: str) -> float:
    """The run's request rate: a positive number, inf (every prompt sent at once, `--max-concurrency` gating)."""
    rate = data.get("request_rate")
    if isinstance(rate, str) and rate.strip().lower() == "trace":
        raise TokenroofError(
            f'{where}: an SGLang run that replayed a trace\'s timestamps (request_rate "trace") is neither a fixed '
            "concurrency nor a rate; rerun with --max-concurrency or --request-rate"
        )
    value = rate_value(rate)
    if not value > 0:  # NaN too
        raise TokenroofError(f"{where}: request_rate must be a positive number or Infinity, got {rate!r}")
    return value


def _in_flight(data: Mapping[str, Any], where: str) -> float:
    """The mean number of requests in flight: the line's `concurrency`, else (bench_serving before it recorded one)
    the same Σ latency ÷ duration from the mean end-to-end latency, the completed requests and the duration."""
    if data.get("concurrency") is not None:
        return _batch(data["concurrency"], where, "concurrency")
    return held_in_flight(data, where, "mean_e2e_latency_ms", "SGLang")


def sglang_run(data: Mapping[str, Any], where: str, warnings: list[str]) -> tuple[Row | None, dict[str, Any]]:
    """One run's row and settings (`_settings`). At `--max-concurrency N` with every prompt sent at once (rate inf)
    the client is a closed loop of N streams: batch N (the completed requests, where fewer: the cap never bound), as
    vLLM's results are read. At a finite rate arrivals are Poisson (bench_serving draws exponential gaps) and the
    batch is the requests measured in flight; a `--max-concurrency` the rate ran under caps that from the client's
    side, and where it bound (in flight on average above 90% of it) the run was neither a rate nor a concurrency:
    left out, with a warning (None). Its metrics and token totals are required: none is derived from the others."""
    rate = _rate(data, where)
    settings = _settings(data, where, rate)
    cap = data.get("max_concurrency")
    for key in ("completed", "total_input_tokens", "total_output_tokens", "output_throughput", "mean_tpot_ms"):
        _required(data, key, where)
    if math.isinf(rate):
        if cap is None:
            raise TokenroofError(
                f"{where}: an SGLang run with every prompt sent at once and no --max-concurrency has no steady batch "
                "(it drains as requests finish); rerun with --max-concurrency N, or at a --request-rate"
            )
        # fewer prompts than the cap: all of them at once, the cap never reached (a closed loop of that many streams)
        batch = min(_batch(cap, where, "max_concurrency"), _required(data, "completed", where))
    else:
        batch = _in_flight(data, where)
        if capped(where, rate, None if cap is None else _batch(cap, where, "max_concurrency"), batch, warnings):
            return None, settings
    return metrics_row(data, where, batch, settings), settings


def _settings(data: Mapping[str, Any], where: str, rate: float) -> dict[str, Any]:
    """vLLM's reading (TPOT after the first token; lengths from the totals), the batch counted as requests in flight
    and the client as it ran at `rate`: a closed loop started all at once, or Poisson arrivals."""
    settings = _vllm_settings(data, where)
    settings["client"] = "burst" if math.isinf(rate) else "poisson"
    return settings
