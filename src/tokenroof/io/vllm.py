"""`vllm bench serve --save-result` JSON: one file per concurrency or request rate, read as table rows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.io.table import Row, _batch, _number, capped, finite_number, held_in_flight, lengths_cv, rate_value
from tokenroof.model.stepmodel import mean_context_tokens
from tokenroof.specs.validate import read_text


def vllm_run(data: Mapping[str, Any], where: str, warnings: list[str]) -> tuple[Row | None, dict[str, Any]]:
    """One `vllm bench serve --save-result` file's row and settings (`_vllm_settings`). Every prompt sent at once
    (`--request-rate inf`, the default) with `--max-concurrency N`: a closed loop, batch = N (an upper bound on the
    running batch), or num_prompts where fewer (the cap never reached). At a finite `--request-rate` an open loop, its
    batch the requests it held in flight by Little's law (completed × mean end-to-end latency ÷ duration, GuideLLM's
    request concurrency); a `--max-concurrency` the rate filled (in flight above 90% of it) made it neither: left
    out, with a warning (None)."""
    for key in ("request_rate", "burstiness"):  # a number or inf; "fast" had read as inf, "high" as nothing
        if data.get(key) is not None and math.isnan(rate_value(data.get(key))):
            raise TokenroofError(f"{where}: {key} {data.get(key)!r} is not a number (nor inf, vLLM's unbounded one)")
    for key in ("output_throughput", "mean_tpot_ms"):  # vLLM writes both: a missing one is named, not derived
        if _number(data.get(key), where, key) is None:
            raise TokenroofError(
                f"{where}: a vLLM result without {key} (vllm bench serve writes it; is the file cut or edited?)"
            )
    settings = _vllm_settings(data, where)
    cap = data.get("max_concurrency")
    if settings["client"] == "burst":
        if cap is None:
            raise TokenroofError(
                f"{where}: vLLM result has no max_concurrency (every prompt sent at once"
                + (", as vLLM sends them at burstiness inf" if math.isinf(rate_value(data.get("burstiness"))) else "")
                + ", no cap: no steady batch); rerun with --max-concurrency or at a --request-rate, or give the "
                "measured running batch in a CSV"
            )
        batch = _batch(cap, where, "max_concurrency")
        if not batch.is_integer():
            raise TokenroofError(f"{where}: max_concurrency {batch:g} is not a whole number of streams")
        prompts = _number(data.get("num_prompts"), where, "num_prompts")
        if prompts is not None and prompts < batch:  # all sent at once, the cap never reached: that many streams
            batch = prompts
    else:
        batch = held_in_flight(data, where, "mean_e2el_ms", "vLLM")
        limit = None if cap is None else _batch(cap, where, "max_concurrency")
        if capped(where, float(data["request_rate"]), limit, batch, warnings):
            return None, settings
    return metrics_row(data, where, batch, settings), settings


def metrics_row(data: Mapping[str, Any], where: str, batch: float, lengths: Mapping[str, Any]) -> Row:
    """A run's row at `batch` from vLLM's metrics (SGLang's are the same): output throughput, mean TPOT and TTFT, the
    completed requests, and the mean context from the token totals its `lengths` (its settings) were read from (runs
    at other lengths are other contexts)."""
    context = None
    if lengths.get("input_len") is not None and lengths.get("output_len") is not None:
        context = mean_context_tokens(lengths["input_len"], lengths["output_len"])
    return Row(
        batch,
        _number(data.get("output_throughput"), where, "output_throughput"),
        _number(data.get("mean_tpot_ms"), where, "mean_tpot_ms"),
        context,
        _number(data.get("mean_ttft_ms"), where, "mean_ttft_ms"),
        where,
        _number(data.get("completed"), where, "completed"),
    )


def _vllm_settings(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """vLLM's TPOT excludes the first token and so any queueing; lengths from the run's token totals."""
    settings: dict[str, Any] = {"batch_kind": "concurrency", "tpot_kind": "tpot", "client": _vllm_client(data)}
    burstiness = data.get("burstiness")
    if settings["client"] == "poisson" and burstiness is not None:  # gamma gaps of this shape (1: Poisson)
        settings["burstiness"] = _number(burstiness, where, "burstiness")
    done = _number(data.get("completed"), where, "completed")
    for key, total in (("input_len", "total_input_tokens"), ("output_len", "total_output_tokens")):
        value = _number(data.get(total), where, total)
        if done and value:
            settings[key] = value / done
    return settings | _lengths_spread(data, where)


MOST_TOKENS = 1e12  # a request's length in tokens is at most this (table.PLAUSIBLE's bound)


def _lengths_spread(data: Mapping[str, Any], where: str) -> dict[str, float]:
    """The spread of the requests' lengths where the file lists them (`--save-detailed`: `input_lens`, `output_lens`,
    a failed request's output 0): a random dataset with `--random-range-ratio`, a ShareGPT sample."""
    outputs, inputs = data.get("output_lens"), data.get("input_lens")
    if outputs is None:
        return {}
    for key, values in (("output_lens", outputs), ("input_lens", inputs)):
        if values is not None and (
            not isinstance(values, list)
            or not all((v := finite_number(n)) is not None and 0 <= v <= MOST_TOKENS for n in values)
        ):
            raise TokenroofError(f"{where}: {key} must be a list of token counts, 0 or more")
    answered = [i for i, out in enumerate(outputs) if out > 0]
    spread = {"output_len_cv": lengths_cv([outputs[i] for i in answered])}
    if isinstance(inputs, list) and len(inputs) == len(outputs):
        spread["input_len_cv"] = lengths_cv([inputs[i] for i in answered])
    return {key: cv for key, cv in spread.items() if cv is not None}


def _vllm_client(data: Mapping[str, Any]) -> str:
    """`--request-rate inf` (the default) with `--max-concurrency`: every stream starts at once; a finite rate
    arrives open-loop: random gaps (gamma of shape `--burstiness`: 1 Poisson, below burstier, above smoother; the
    table's `burstiness`). At `--burstiness inf` vLLM draws gamma(inf, 0), NaN, and sleeps not at all: every request
    at once, as at a rate of inf."""
    if not math.isfinite(rate_value(data.get("request_rate"))) or math.isinf(rate_value(data.get("burstiness", 1.0))):
        return "burst"
    return "poisson"


def is_vllm_result(path: Path) -> bool:
    """A `vllm bench serve --save-result` file: one point of a table that its sibling files complete."""
    try:
        text = read_text(path) if path.is_file() else ""
        return text.lstrip().startswith("{") and '"output_throughput"' in text and "max_concurrency" in text
    except TokenroofError:
        return False
