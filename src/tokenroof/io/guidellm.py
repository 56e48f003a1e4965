"""GuideLLM JSON reports: one table row per benchmark of the sweep, with the client that drove it.

GuideLLM takes a benchmark's metrics over its successful requests between the first request's start and the run's end
(`GenerativeMetrics.compile` in 0.4–0.7, `GenerativeBenchmark.from_stats` in 0.2–0.3): with a warm-up or cool-down
set, over the window they leave (read as a steady window); otherwise over the whole run. A run stopped by a request
limit answers every request, the drain at its end included; one stopped by a time limit (`max_duration`:
`--max-seconds`, in 0.7 `--constraint kind=max_duration`) sends until the limit and cancels what is still in flight,
counted `incomplete` and left out of the means, and the request concurrency it reports is the successful requests'
only. So a benchmark's successful requests go into the table's `requests` and, for a rate where some were cancelled,
the requests it sent (successful and incomplete) into `sent`, and its points are replayed as such runs
(serving/replay.py; a closed loop's, synchronous, concurrent or throughput, with every stream started at once). A
report without its request totals (before GuideLLM 0.2) is read as a steady window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.io.table import ERRORED_SHARE, Row, _batch, _dig, _number, capped, request_count, spread_of

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
    kind = _strategy_kind(bench)
    if kind == "synchronous":
        return 1.0
    if kind == "concurrent":
        streams = _strategy(bench).get("streams")
        return _batch(streams, where, "strategy.streams") if streams is not None else batch
    if kind == "throughput":
        return batch
    return None


def _guidellm_client(data: Mapping[str, Any]) -> str | None:
    """The strategies of a GuideLLM sweep as one client: its rate points' kind (a synchronous point is a rate so low
    that one request runs at a time), else its streams' (concurrent and throughput start every stream at once)."""
    kinds = []
    for bench in data["benchmarks"]:
        kind = _strategy_kind(bench) if isinstance(bench, Mapping) else None
        if kind in GUIDELLM_CLIENTS:
            kinds.append(GUIDELLM_CLIENTS[kind])
    rates = [k for k in kinds if k in ("poisson", "constant")] or kinds
    return max(sorted(set(rates)), key=rates.count) if rates else None


def _strategy(bench: Mapping[str, Any]) -> Mapping[str, Any]:
    """A benchmark's scheduling strategy: 0.2–0.3 `args.strategy`, 0.4+ `config.strategy` ({} where none)."""
    strategy = _dig(bench, "args", "strategy") or _dig(bench, "config", "strategy")
    return strategy if isinstance(strategy, Mapping) else {}


def _strategy_kind(bench: Mapping[str, Any]) -> str | None:
    kind = _strategy(bench).get("type_")
    return kind if isinstance(kind, str) else None


def _transient(bench: Mapping[str, Any]) -> bool:
    """Whether a warm-up or cool-down was cut from the benchmark's metrics: GuideLLM 0.4+ `config.warmup` /
    `config.cooldown` (a percent or a value), 0.2–0.3 `args.warmup_number` / `warmup_duration` / `cooldown_…`."""
    for phase in ("warmup", "cooldown"):
        given = _dig(bench, "config", phase)
        if isinstance(given, Mapping) and any(_positive(given.get(k)) for k in ("percent", "value")):
            return True
        if _positive(given) or any(_positive(_dig(bench, "args", f"{phase}_{k}")) for k in ("number", "duration")):
            return True
    return False


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


TOTALS = ("successful", "incomplete", "errored")


def _totals(bench: Mapping[str, Any], where: str) -> tuple[int, int, int] | None:
    """A benchmark's successful, incomplete and errored requests (`metrics.request_totals`, 0.4+; `request_totals`,
    0.2–0.3); None where the report does not give them."""
    totals = _dig(bench, "metrics", "request_totals") or bench.get("request_totals")
    if not isinstance(totals, Mapping):
        return None
    counts = [request_count(totals.get(key, 0), where, f"request_totals.{key}") for key in TOTALS]
    return counts[0], counts[1], counts[2]


def _run_requests(bench: Mapping[str, Any], where: str, warnings: list[str]) -> tuple[int, int | None] | None:
    """A benchmark measured over its whole run: the requests its means are over (the successful ones) and, for a rate a
    time limit cut (requests still in flight cancelled: incomplete ones), the requests it sent (a closed loop's streams,
    all started at once, are replayed as a whole run of its answered requests, the cut's in-flight ones not modelled).
    None: a warm-up or cool-down window, no totals. Failed requests and a ramp-up inside the means are warned of."""
    kind = _strategy_kind(bench)
    if kind not in GUIDELLM_CLIENTS or _transient(bench):
        return None
    totals = _totals(bench, where)
    if totals is None or totals[0] == 0:
        return None
    successful, incomplete, errored = totals
    if errored > ERRORED_SHARE * (successful + incomplete + errored):
        warnings.append(
            f"{where}: {errored:,} requests failed: the run is replayed with the {successful + incomplete:,} that did "
            "not, so its load reads lighter than the server's if they held it"
        )
    ramp = _strategy(bench).get("rampup_duration")
    if _positive(ramp):
        warnings.append(
            f"{where}: its {ramp:g} s ramp-up is in its means (no warm-up cut it), replayed as the full rate from the "
            "start: the load reads heavier than it was (give a warm-up as long as the ramp to measure past it)"
        )
    return successful, successful + incomplete if incomplete and kind in ("poisson", "constant") else None


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
        # lengths its data drew at random (`prompt_tokens_stdev`, a dataset's): their spread, for the replay to draw
        spreads = [
            spread_of(_dig(bench.get("metrics", {}), metric, "successful", "std_dev"), mean)
            for bench, mean in zip((b for b in data["benchmarks"] if isinstance(b, Mapping)), values, strict=True)
        ]
        spread = [cv for cv in spreads if cv is not None]
        if spread:
            settings[f"{key}_cv"] = float(np.mean(spread))
    return settings


def _guidellm_rows(data: Mapping[str, Any], where: str, warnings: list[str]) -> list[Row]:
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
            concurrency = _strategy(bench).get("streams")
        if concurrency is None:
            raise TokenroofError(f"{here}: no request_concurrency metric and no concurrent strategy")
        batch = _batch(concurrency, here, "request_concurrency")
        cap, rate = _strategy(bench).get("max_concurrency"), _strategy(bench).get("rate")
        rate_run = _strategy_kind(bench) in ("poisson", "constant") and _positive(cap)
        if rate_run and capped(here, rate if _positive(rate) else 0.0, cap, batch, warnings):
            continue  # the client's cap filled: arrivals queued in the client, neither a rate nor a concurrency
        run = _run_requests(bench, here, warnings)
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
                requests=None if run is None else float(run[0]),
                concurrency=_guidellm_streams(bench, batch, here),
                sent=None if run is None or run[1] is None else float(run[1]),
            )
        )
    return rows
