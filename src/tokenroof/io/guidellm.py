"""GuideLLM JSON reports: one table row per benchmark of the sweep, with the client that drove it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.io.table import Row, _batch, _dig, _number

GUIDELLM_CLIENTS = {
    "concurrent": "burst",
    "throughput": "burst",
    "synchronous": "staggered",
    "poisson": "poisson",
    "constant": "constant",
}


def _guidellm_streams(bench: Mapping[str, Any], batch: float, where: str) -> float | None:
    """A closed-loop strategy's concurrency: synchronous 1, concurrent its streams, throughput (every request at
    once, as many as it holds) the concurrency measured; None for a rate (an open loop)."""
    strategy = _dig(bench, "args", "strategy") or _dig(bench, "config", "strategy")
    kind = strategy.get("type_") if isinstance(strategy, Mapping) else None
    if kind == "synchronous":
        return 1.0
    if kind == "concurrent":
        streams = strategy.get("streams") if isinstance(strategy, Mapping) else None
        return _batch(streams, where, "strategy.streams") if streams is not None else batch
    if kind == "throughput":
        return batch
    return None


def _guidellm_client(data: Mapping[str, Any]) -> str | None:
    """The strategies of a GuideLLM sweep as one client: its rate points' kind (a synchronous point is a rate so low
    that one request runs at a time), else its streams' (concurrent and throughput start every stream at once)."""
    kinds = []
    for bench in data["benchmarks"]:
        if isinstance(bench, Mapping):
            strategy = _dig(bench, "args", "strategy") or _dig(bench, "config", "strategy")
            kind = strategy.get("type_") if isinstance(strategy, Mapping) else None
            if isinstance(kind, str) and kind in GUIDELLM_CLIENTS:
                kinds.append(GUIDELLM_CLIENTS[kind])
    rates = [k for k in kinds if k in ("poisson", "constant")] or kinds
    return max(sorted(set(rates)), key=rates.count) if rates else None


def _guidellm_settings(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"batch_kind": "concurrency", "tpot_kind": "itl"}
    client = _guidellm_client(data)
    if client is not None:
        settings["client"] = client
    for key, metric in (("input_len", "prompt_token_count"), ("output_len", "output_token_count")):
        values = [
            _number(_dig(bench.get("metrics", {}), metric, "successful", "mean"), f"{where} benchmark {i}", metric)
            for i, bench in enumerate(data["benchmarks"])
            if isinstance(bench, Mapping)
        ]
        given = [v for v in values if v is not None]
        if given:
            settings[key] = float(np.mean(given))
    return settings


def _guidellm_rows(data: Mapping[str, Any], where: str) -> list[Row]:
    """GuideLLM report: batch = measured mean request concurrency; TPOT = inter_token_latency_ms (excludes the
    first token, like vLLM's TPOT; GuideLLM's own time_per_output_token_ms includes it)."""
    rows = []
    for i, bench in enumerate(data["benchmarks"]):
        here = f"{where} benchmark {i}"
        if not isinstance(bench, Mapping):
            raise TokenroofError(f"{here}: expected an object, got {type(bench).__name__}")
        metrics = bench.get("metrics", {})
        concurrency = _dig(metrics, "request_concurrency", "successful", "mean")
        if concurrency is None:
            concurrency = _dig(bench, "args", "strategy", "streams") or _dig(bench, "config", "strategy", "streams")
        if concurrency is None:
            raise TokenroofError(f"{here}: no request_concurrency metric and no concurrent strategy")
        batch = _batch(concurrency, here, "request_concurrency")
        rows.append(
            Row(
                batch,
                _number(
                    _dig(metrics, "output_tokens_per_second", "successful", "mean"), here, "output_tokens_per_second"
                ),
                _number(_dig(metrics, "inter_token_latency_ms", "successful", "mean"), here, "inter_token_latency_ms"),
                None,
                _number(_dig(metrics, "time_to_first_token_ms", "successful", "mean"), here, "time_to_first_token_ms"),
                here,
                concurrency=_guidellm_streams(bench, batch, here),
            )
        )
    return rows
