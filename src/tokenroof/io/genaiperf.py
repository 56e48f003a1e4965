"""NVIDIA's AIPerf (`profile_export_aiperf.json`) and its predecessor GenAI-Perf (`profile_export_genai_perf.json`):
one file a run, read as a table row (AIPerf's means over the run's requests, a whole run; GenAI-Perf's over
perf_analyzer's stable measurement windows, a steady one).

Both write each metric as its statistics (`{"unit": "ms", "avg": …, "p50": …}`) and the run's settings under
`input_config`: AIPerf's nested (`loadgen.concurrency`, `loadgen.request_rate`, `loadgen.request_rate_mode`),
GenAI-Perf's flat (its flags' names) or, in its later config-file releases, under `perf_analyzer.stimulus`. Their
`inter_token_latency` is vLLM's TPOT: per request (latency − TTFT) ÷ (output tokens − 1), averaged, so the first
token and any queueing are out of it. A run at `--concurrency N` alone keeps N requests in flight, all started at
once (`client=burst`, batch N, as vLLM's results are read); a run at `--request-rate` is an open loop, its batch the
requests it held in flight by Little's law (request throughput × mean request latency), its arrivals Poisson
(AIPerf's default; its gamma arrivals, `--arrival-pattern gamma --arrival-smoothness S`, as gaps of gamma shape S:
the table's burstiness, as vLLM's `--burstiness`) or evenly spaced (`request_rate_mode` or, in later
AIPerf, `arrival_pattern` constant; GenAI-Perf's perf_analyzer sends at a constant rate unless told). AIPerf's
`--benchmark-duration`, ramps or a warm-up inside the measured requests break "all started at once" and "the whole
run": such runs are read as the file says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from tokenroof.errors import TokenroofError
from tokenroof.io.table import Row, _batch, _number, capped, rate_value, spread_of
from tokenroof.model.stepmodel import mean_context_tokens

METRICS = ("inter_token_latency", "output_token_throughput", "time_to_first_token")
TIME_UNITS = {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3}  # to milliseconds
# the units each tool writes for the other metrics read (per second, in tokens), as they spell them
UNITS = {
    "output_token_throughput": ("tokens/sec", "tokens/s", "tok/s"),
    "request_throughput": ("requests/sec", "requests/s", "req/s"),
    "input_sequence_length": ("tokens",),
    "output_sequence_length": ("tokens",),
    "request_count": ("requests", "count"),
}


def is_genai_perf_export(data: Any) -> bool:
    """An AIPerf or GenAI-Perf aggregate export: two or more of its metrics and settings (a missing metric is then
    named, not taken for another format)."""
    return isinstance(data, Mapping) and sum(key in data for key in (*METRICS, "request_latency", "input_config")) >= 2


def _stat(data: Mapping[str, Any], metric: str, where: str, time: bool = False) -> float | None:
    """A metric's mean (`avg`), in ms for a time; None when the export has no such metric."""
    entry = data.get(metric)
    if entry is None:
        return None
    if not isinstance(entry, Mapping):
        raise TokenroofError(f"{where}: {metric} must be an object of statistics, got {type(entry).__name__}")
    value = _number(entry.get("avg"), where, f"{metric}.avg")
    if value is None:
        raise TokenroofError(f"{where}: {metric} has no avg")
    unit = entry.get("unit")
    known = tuple(TIME_UNITS) if time else UNITS.get(metric, ())
    if unit is not None and known and (not isinstance(unit, str) or unit.strip().lower() not in known):
        raise TokenroofError(f"{where}: {metric} in unit {unit!r}; known: {', '.join(known)}")
    return value * TIME_UNITS[(unit or "ms").strip().lower()] if time else value


def _required(data: Mapping[str, Any], metric: str, where: str, time: bool = False) -> float:
    """A metric the export must hold (a missing one named, not derived from the others)."""
    value = _stat(data, metric, where, time)
    if value is None:
        raise TokenroofError(f"{where}: an export without {metric}")
    return value


def _setting(config: Mapping[str, Any], name: str) -> Any:
    """A load setting from input_config, wherever the tool's release kept it."""
    for path in (("loadgen", name), (name,), ("perf_analyzer", "stimulus", name)):
        node: Any = config
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


class Load(NamedTuple):
    """How the run was told to load the server: its concurrency cap and request rate (None: not given, or unbounded),
    its arrivals ("poisson" or "constant") and, for gamma arrivals, their shape (None: Poisson's)."""

    cap: float | None
    rate: float | None
    arrivals: str
    burstiness: float | None


def _load(data: Mapping[str, Any], where: str) -> Load:
    """The load settings as the run was told them."""
    config = data.get("input_config")
    if not isinstance(config, Mapping):
        raise TokenroofError(
            f"{where}: no input_config: the run's --concurrency or --request-rate is not in the file; give the "
            "measurements as a CSV with the batch"
        )
    concurrency = _setting(config, "concurrency")
    rate = _setting(config, "request_rate")
    cap = None if concurrency in (None, 0) else _batch(concurrency, where, "input_config concurrency")
    per_s = None
    # an unbounded rate: every request at once, the cap gating
    if rate not in (None, 0) and not math.isinf(rate_value(rate)):
        per_s = _number(rate, where, "input_config request_rate")
    mode = str(_setting(config, "request_rate_mode") or _setting(config, "arrival_pattern") or "").lower()
    if "constant" in mode:
        arrivals = "constant"
    elif mode or "loadgen" in config:
        arrivals = "poisson"  # AIPerf's default, and any mode it names that is not constant (poisson, gamma)
    else:
        arrivals = "constant"  # GenAI-Perf's perf_analyzer: --request-distribution constant unless told
    if cap is None and per_s is None:
        raise TokenroofError(
            f"{where}: input_config gives neither a concurrency nor a request rate; give the measurements as a CSV "
            "with the batch"
        )
    smoothness = _setting(config, "arrival_smoothness") or _setting(config, "vllm_burstiness")
    burstiness = None  # gamma gaps of this shape (AIPerf's smoothness, as vLLM's burstiness)
    if per_s is not None and arrivals == "poisson" and "gamma" in mode and smoothness is not None:
        burstiness = _number(smoothness, where, "input_config arrival_smoothness")
    return Load(cap, per_s, arrivals, burstiness)


def genai_perf_run(data: Mapping[str, Any], where: str, warnings: list[str]) -> tuple[Row | None, dict[str, Any]]:
    """One run's row and settings (`_settings`). The row: at a concurrency alone, batch N (AIPerf's requests,
    where fewer: all sent at once) and a closed loop; at a rate, the requests held in flight (a rate capped by a
    concurrency it filled, above 90% of it on average, was neither: left out with a warning, None)."""
    load = _load(data, where)
    cap, rate = load.cap, load.rate
    settings = _settings(data, where, load)
    # AIPerf's means are over its run's requests (after any warm-up); GenAI-Perf's perf_analyzer measures stable
    # windows of a load already running: a steady window, no whole run (None)
    requests = _stat(data, "request_count", where) if tool_of(data) == "AIPerf" else None
    if data.get("was_cancelled") is True:
        warnings.append(
            f"{where}: the run was cancelled before it finished: its means are over the requests it completed"
        )
    errored = data.get("error_request_count")
    errored = errored.get("avg") if isinstance(errored, Mapping) else errored
    if isinstance(errored, int | float) and not isinstance(errored, bool) and errored > 0:
        warnings.append(f"{where}: {errored:g} requests failed; the means are over those that did not")
    if rate is None:
        assert cap is not None
        batch = cap if requests is None else min(cap, requests)  # fewer requests than streams: all of them at once
    else:
        throughput = _stat(data, "request_throughput", where)
        latency_ms = _stat(data, "request_latency", where, time=True)
        if throughput is None or latency_ms is None:
            raise TokenroofError(
                f"{where}: a run at a request rate needs request_throughput and request_latency to count the "
                "requests it held in flight"
            )
        batch = throughput * latency_ms / 1e3
        if capped(where, rate, cap, batch, warnings):
            return None, settings
    return Row(
        batch,
        _required(data, "output_token_throughput", where),
        _required(data, "inter_token_latency", where, time=True),
        mean_context_tokens(settings["input_len"], settings["output_len"]),
        _stat(data, "time_to_first_token", where, time=True),
        where,
        requests,
    ), settings


def tool_of(data: Mapping[str, Any]) -> str:
    """Which tool wrote the export: AIPerf keeps its load settings under input_config.loadgen."""
    config = data.get("input_config")
    return (
        "AIPerf" if "aiperf_version" in data or (isinstance(config, Mapping) and "loadgen" in config) else "GenAI-Perf"
    )


def _settings(data: Mapping[str, Any], where: str, load: Load) -> dict[str, Any]:
    """TPOT after the first token, the batch counted as requests in flight, the client as it ran (`load`), the
    lengths the run measured (its mean input and output sequence lengths)."""
    settings: dict[str, Any] = {
        "batch_kind": "concurrency",
        "tpot_kind": "tpot",
        "client": "burst" if load.rate is None else load.arrivals,
    }
    if load.burstiness is not None:
        settings["burstiness"] = load.burstiness
    for key, metric in (("input_len", "input_sequence_length"), ("output_len", "output_sequence_length")):
        settings[key] = _required(data, metric, where)
        entry = data.get(metric)
        cv = spread_of(entry.get("std"), settings[key]) if isinstance(entry, Mapping) else None
        if cv is not None:  # lengths drawn at random (`--output-tokens-stddev`, a dataset's): the replay draws alike
            settings[f"{key}_cv"] = cv
    return settings
