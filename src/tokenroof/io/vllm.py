"""`vllm bench serve --save-result` JSON: one file per concurrency or request rate, read as table rows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.io.table import Row, _batch, _number
from tokenroof.model.stepmodel import mean_context_tokens
from tokenroof.specs.validate import read_text


def _vllm_row(data: Mapping[str, Any], where: str, warnings: list[str]) -> Row:
    """One `vllm bench serve --save-result` file: batch = max_concurrency (an upper bound on the running batch)."""
    concurrency = data.get("max_concurrency")
    if concurrency is None:
        raise TokenroofError(
            f"{where}: vLLM result has no max_concurrency (a request-rate run has no fixed batch); "
            "rerun with --max-concurrency, or give the measured running batch in a CSV"
        )
    lengths = _vllm_settings(data, where)
    context = None  # the run's mean context from its token totals: runs at other lengths are other contexts
    if lengths.get("input_len") is not None and lengths.get("output_len") is not None:
        context = mean_context_tokens(lengths["input_len"], lengths["output_len"])
    row = Row(
        _batch(concurrency, where, "max_concurrency"),
        _number(data.get("output_throughput"), where, "output_throughput"),
        _number(data.get("mean_tpot_ms"), where, "mean_tpot_ms"),
        context,
        _number(data.get("mean_ttft_ms"), where, "mean_ttft_ms"),
        where,
        _number(data.get("completed"), where, "completed"),
    )
    return row


def _vllm_settings(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """vLLM's TPOT excludes the first token and so any queueing; lengths from the run's token totals."""
    settings: dict[str, Any] = {"batch_kind": "concurrency", "tpot_kind": "tpot", "client": _vllm_client(data)}
    done = _number(data.get("completed"), where, "completed")
    for key, total in (("input_len", "total_input_tokens"), ("output_len", "total_output_tokens")):
        value = _number(data.get(total), where, total)
        if done and value:
            settings[key] = value / done
    return settings


def _vllm_client(data: Mapping[str, Any]) -> str:
    """`--request-rate inf` (the default) with `--max-concurrency`: every stream starts at once; a finite rate
    arrives open-loop (`--burstiness` 1: Poisson, larger: smoother; inf is read as evenly spaced)."""
    rate = data.get("request_rate")
    try:
        finite = rate is not None and math.isfinite(float(rate))
    except (TypeError, ValueError):
        finite = False
    if not finite:
        return "burst"
    burstiness = data.get("burstiness", 1.0)
    return "constant" if isinstance(burstiness, str) or burstiness in (math.inf,) else "poisson"


def is_vllm_result(path: Path) -> bool:
    """A `vllm bench serve --save-result` file: one point of a table that its sibling files complete."""
    try:
        text = read_text(path) if path.is_file() else ""
        return text.lstrip().startswith("{") and '"output_throughput"' in text and "max_concurrency" in text
    except TokenroofError:
        return False
