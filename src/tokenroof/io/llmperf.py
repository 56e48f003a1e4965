"""LLMPerf (`ray-project/llmperf`, `token_benchmark_ray.py --results-dir D`): one run a file, `D/{model}_{in}_{out}
_summary.json`, with its requests beside it in `…_individual_responses.json`; read as a table row.

What its numbers are, from its source (token_benchmark_ray.py, llmperf/ray_clients/openai_chat_completions_client.py,
2024-12):
- `--num-concurrent-requests N` starts N threads at once, each sending its next request as its last ends: a closed
  loop started all at once (`client=burst`), batch N. Until commit f1d6bed (2024-12-09) it sent in **waves**
  instead: N requests at once, then none until all N had ended (`client=waves`; its counts are whole waves: 104
  completed at 8 streams where 100 were asked). A run is read as its summary's `timestamp` dates it; one without a
  timestamp as the current code, said so. It stops when `--max-num-completed-requests` have completed (or
  at `--timeout`): the N − 1 requests still in flight then run to their end, and the run's end waits for them, but
  their tokens are dropped. Its means are over the completed requests, the first wave included (a whole run): the
  table's `requests`, and beside them `sent`, completed + N − 1, which the replay sends, averaging the first answered
  (a run stopped by its timeout sent no such extra; where it completed many requests a stream, the difference is the
  last few requests' company). A run in waves sent none beyond those it counted.
- Its **`inter_token_latency_s` is not TPOT**: a request's gaps between content chunks summed *from its send* (the
  first is the TTFT) and divided by the chunks it received (any without a token, the first naming the role, say,
  included): the first token's wait is spread over every gap. Read here as vLLM's TPOT instead, per request
  (end-to-end − TTFT) ÷ (output tokens − 1), averaged, from the requests file beside the summary; without one, from
  the summary's means ((mean end-to-end − mean TTFT) ÷ (mean output − 1), the same where a run's lengths are alike).
- Its **`mean_output_throughput_token_per_s`** divides the completed requests' tokens by the run's whole time, which
  includes the dropped requests' last stretch: up to one request's life too long, the more so the fewer requests a
  stream completed (at `--max-num-completed-requests` = N, about half the rate). Read here as the rate the N streams
  kept while counted, N × mean output ÷ mean end-to-end latency (a closed loop sends as each request ends, so each
  stream delivers one request's output per request lifetime). In waves it is the whole run's (nothing dropped), the
  client's own work between waves (tokenizing the answers, until 2024-06-18 drawing the next prompts) included: the
  same N × output ÷ end-to-end is read, the rate while the streams were busy.
- It counts tokens by re-tokenizing the text with a Llama-2 tokenizer (`hf-internal-testing/llama-tokenizer`), for
  whatever model served it: a model with another tokenizer emits other counts, and its TPOT and throughput are then
  per Llama-2 token. Where the mean counted differs from the `max_tokens` asked (`mean_output_tokens`) by more than
  10%, a warning says so.
- It draws each request's prompt and output lengths from normals (`--stddev-input-tokens 150`,
  `--stddev-output-tokens 80` by default): their spread (sd ÷ mean, as it drew them: the summary's `stddev_*_tokens`
  ÷ `mean_*_tokens`; without those, the counted lengths' spread) goes into the table (`input_len_cv`,
  `output_len_cv`) and the replay draws lengths so spread: streams of unequal lengths fall out of step and their
  prompts arrive apart, which moves TTFT by 15–25% at one concurrency; drawn at one length (its
  `scripts/benchmark.py` sweeps do), the streams stay in step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.io.table import (
    ERRORED_SHARE,
    Row,
    _batch,
    _number,
    finite_number,
    lengths_cv,
    loads_json,
    request_count,
    spread_of,
)
from tokenroof.model.stepmodel import mean_context_tokens
from tokenroof.specs.validate import read_text

RESPONSE_KEYS = ("inter_token_latency_s", "ttft_s", "end_to_end_latency_s")  # a request's, in its requests file
SUMMARY_SUFFIX, RESPONSES_SUFFIX = "_summary.json", "_individual_responses.json"
MOST_STREAMS = 100_000  # a run's concurrency is at most this (no benchmark client runs more streams)
WAVES = "waves"  # the client kind (table.CLIENT_KINDS) of a run that sent in waves
# LLMPerf's commit f1d6bed (2024-12-09 01:52 UTC): each stream its own closed loop; until then requests went in waves
CLOSED_LOOP_SINCE = 1_733_709_148
TOKENS_ASKED_GAP = 0.1  # counted output tokens further than this from those asked are warned of


def is_llmperf_summary(data: Any) -> bool:
    """An LLMPerf run's summary: the concurrency it ran at (or its count of completed requests, where that is
    missing: named by llmperf_run) and its flattened results."""
    return (
        isinstance(data, Mapping)
        and ("num_concurrent_requests" in data or "results_num_completed_requests" in data)
        and any(isinstance(key, str) and key.startswith("results_") for key in data)
    )


def is_llmperf_responses(data: Any) -> bool:
    """An LLMPerf run's requests file: a list of requests, each with its latencies in seconds."""
    return (
        isinstance(data, list)
        and bool(data)
        and isinstance(data[0], Mapping)
        and all(key in data[0] for key in RESPONSE_KEYS)
    )


# LLMPerf's scripts/benchmark.py writes, beside each run's result_{model}_{N}/ folder, {model}_cur_{N}.json: a digest
# of the summary's percentiles (no means), read as no run of its own
DIGESTS = "*_cur_*.json"
DIGEST_KEYS = ("concurrency", "latency_ms_per_token_(inter_token_latency)_p50")


def is_llmperf_digest(data: Any) -> bool:
    return isinstance(data, Mapping) and all(key in data for key in DIGEST_KEYS)


def responses_path(summary: Path) -> Path:
    """The requests file LLMPerf writes beside a summary (`X_summary.json` → `X_individual_responses.json`)."""
    return summary.with_name(summary.name.removesuffix(SUMMARY_SUFFIX) + RESPONSES_SUFFIX)


def summary_path(requests: Path) -> Path:
    """The summary a requests file belongs beside (`X_individual_responses.json` → `X_summary.json`)."""
    return requests.with_name(requests.name.removesuffix(RESPONSES_SUFFIX) + SUMMARY_SUFFIX)


def _required(data: Mapping[str, Any], key: str, where: str) -> float:
    value = _number(data.get(key), where, key)
    if value is None:
        raise TokenroofError(f"{where}: an LLMPerf summary without {key}")
    return value


def _count(data: Mapping[str, Any], key: str, where: str, required: bool = False) -> int:
    """A count the summary holds: a whole number, 0 or more (0 where it is absent and not `required`)."""
    if key not in data:
        if required:
            raise TokenroofError(f"{where}: an LLMPerf summary without {key}")
        return 0
    return request_count(data[key], where, key)


class Requests(NamedTuple):
    """What a run's requests file says beyond its summary: vLLM's TPOT averaged over its requests, and the spread
    (sd ÷ mean) of their prompt and output lengths."""

    tpot_ms: float
    input_cv: float | None
    output_cv: float | None


def _whole(value: Any, where: str, name: str) -> float | None:
    """A request's token count: a whole number, 0 or more (None: absent)."""
    if value is None:
        return None
    number = finite_number(value)
    if number is None or number < 0 or number != int(number):
        raise TokenroofError(f"{where}: {name} must be a whole number of tokens, got {value!r}")
    return number


def _seconds(value: Any, where: str, name: str) -> float | None:
    """A request's latency in seconds: a finite number, 0 or more (None: absent)."""
    if value is None:
        return None
    number = finite_number(value)
    if number is None or number < 0:
        raise TokenroofError(f"{where}: {name} must be a number of seconds, 0 or more, got {value!r}")
    return number


def _requests(path: Path, where: str, completed: int, warnings: list[str]) -> Requests | None:
    """The requests file's completed requests (None: no such file), `completed` of them as its summary counts: TPOT
    over those of two or more output tokens. A completed request of no token (LLMPerf's client records a stream that
    returned no text so: no error, 0 tokens, TTFT 0) and one whose TTFT is past its end are left out of TPOT, said."""
    if not path.is_file():
        return None
    data = loads_json(read_text(path), str(path), whole_file=True)
    if not isinstance(data, list):
        raise TokenroofError(f"{path}: expected LLMPerf's list of requests beside {where}")
    tpots, prompts, outputs, empty, impossible = [], [], [], 0, []
    for i, request in enumerate(data):
        here = f"{path} request {i}"
        if not isinstance(request, Mapping):
            raise TokenroofError(f"{here}: expected an object")
        if request.get("error_code") is not None:
            continue
        out = _whole(request.get("number_output_tokens"), here, "number_output_tokens")
        prompt = _whole(request.get("number_input_tokens"), here, "number_input_tokens")
        e2e = _seconds(request.get("end_to_end_latency_s"), here, "end_to_end_latency_s")
        ttft = _seconds(request.get("ttft_s"), here, "ttft_s")
        if out is None or e2e is None or ttft is None or prompt is None:
            raise TokenroofError(
                f"{here}: a completed request needs number_input_tokens, number_output_tokens, ttft_s and "
                "end_to_end_latency_s"
            )
        if out == 0:
            empty += 1
            continue
        prompts.append(prompt)
        outputs.append(out)
        if ttft > e2e:
            impossible.append(i)
        elif out >= 2 and e2e > ttft:
            tpots.append((e2e - ttft) / (out - 1) * 1e3)
    if empty + len(outputs) != completed:
        raise TokenroofError(
            f"{path}: {empty + len(outputs):,} completed requests (no error_code) where its summary {where} counts "
            f"{completed:,}: the requests file is not that run's"
        )
    if empty:
        warnings.append(
            f"{path}: {empty:,} completed request(s) returned no token: left out of TPOT and the lengths' spread (the "
            "summary's means, which count them, give the row's other figures)"
        )
    if impossible:
        shown = ", ".join(map(str, impossible[:5])) + (", …" if len(impossible) > 5 else "")
        warnings.append(
            f"{path}: {len(impossible):,} request(s) with ttft_s past end_to_end_latency_s (requests {shown}): left "
            "out of TPOT"
        )
    if not tpots:
        raise TokenroofError(
            f"{path}: no completed request of two or more output tokens, its TTFT before its end, to take TPOT from"
        )
    return Requests(float(np.mean(tpots)), lengths_cv(prompts), lengths_cv(outputs))


def client_of_run(data: Mapping[str, Any], where: str, warnings: list[str]) -> str:
    """How the run's LLMPerf sent (module doc): in waves before commit f1d6bed, else a closed loop a stream; a run
    without a timestamp as the current code, said once."""
    stamp = finite_number(data.get("timestamp"))
    if stamp is None:
        said = "LLMPerf run(s) without a timestamp: read as its code since 2024-12-09 sends"
        if not any(w.startswith(said) for w in warnings):
            warnings.append(
                f"{said} (each stream sending its next request as its last ends); a checkout older than commit "
                "f1d6bed sent in waves of N, which its counts show as whole waves (104 completed at 8 streams where "
                f"100 were asked): {where}"
            )
        return "burst"
    if stamp < CLOSED_LOOP_SINCE:
        said = "LLMPerf run(s) dated before 2024-12-09 (its commit f1d6bed): read as it then sent, in waves"
        if not any(w.startswith(said) for w in warnings):
            warnings.append(f"{said} (N requests at once, the next N when all had ended), its means over all it sent")
        return WAVES
    return "burst"


def llmperf_run(data: Mapping[str, Any], where: str, warnings: list[str]) -> tuple[Row | None, dict[str, Any]]:
    """One run's row and settings (module doc): batch N, a closed loop started at once (or in waves, as LLMPerf
    sent before 2024-12-09), means over the completed requests; TPOT excluding the first token (from the requests
    file beside `where` where there is one); throughput the rate the streams kept while counted."""
    if "num_concurrent_requests" not in data:
        raise TokenroofError(f"{where}: an LLMPerf summary without num_concurrent_requests")
    batch = _batch(data.get("num_concurrent_requests"), where, "num_concurrent_requests")
    if not batch.is_integer():
        raise TokenroofError(f"{where}: num_concurrent_requests must be a whole number of streams, got {batch:g}")
    if batch > MOST_STREAMS:
        raise TokenroofError(
            f"{where}: num_concurrent_requests {batch:g} is more streams than any benchmark client runs (at most "
            f"{MOST_STREAMS:,}): a slip"
        )
    done = _count(data, "results_num_completed_requests", where, required=True)
    started = _count(data, "results_num_requests_started", where)
    errored = _count(data, "results_number_errors", where)
    if "results_num_requests_started" in data and done + errored > started:
        raise TokenroofError(
            f"{where}: {done:,} completed and {errored:,} failed requests of {started:,} started: the counts disagree"
        )
    client = client_of_run(data, where, warnings)
    if done == 0:
        warnings.append(f"{where}: left out: no request completed")
        return None, {"batch_kind": "concurrency", "tpot_kind": "tpot", "client": client}
    started = max(started, done + errored)
    if errored > ERRORED_SHARE * started:
        warnings.append(f"{where}: {errored:,} of {started:,} requests failed; the means are over those that did not")
    e2e_ms = _required(data, "results_end_to_end_latency_s_mean", where) * 1e3
    ttft_ms = _required(data, "results_ttft_s_mean", where) * 1e3
    output = _required(data, "results_number_output_tokens_mean", where)
    prompt = _required(data, "results_number_input_tokens_mean", where)
    if output < 2 or e2e_ms <= ttft_ms:
        raise TokenroofError(
            f"{where}: {output:g} output tokens a request over {e2e_ms:.4g} ms end to end after a {ttft_ms:.4g} ms "
            "TTFT: no token after the first to take TPOT from"
        )
    settings: dict[str, Any] = {
        "batch_kind": "concurrency",
        "tpot_kind": "tpot",
        "client": client,
        "input_len": prompt,
        "output_len": output,
    }
    beside = responses_path(Path(where)) if where.endswith(SUMMARY_SUFFIX) else None
    requests = None if beside is None else _requests(beside, where, done, warnings)
    if requests is None:
        requests = Requests(
            (e2e_ms - ttft_ms) / (output - 1),
            spread_of(data.get("results_number_input_tokens_stddev"), prompt),
            spread_of(data.get("results_number_output_tokens_stddev"), output),
        )
    for key, name, counted in (
        ("input_len_cv", "input_tokens", requests.input_cv),
        ("output_len_cv", "output_tokens", requests.output_cv),
    ):
        # the spread it drew its lengths with (its --stddev-*-tokens), where the summary keeps it: the counts' own
        # spread adds its Llama-2 tokenizer's noise (a Yi-1.5 sweep drawn at exactly 150 tokens counted 159 ± 3.5)
        drawn_sd, drawn_mean = finite_number(data.get(f"stddev_{name}")), finite_number(data.get(f"mean_{name}"))
        if (drawn_sd is not None and drawn_sd < 0) or (drawn_mean is not None and drawn_mean <= 0 and drawn_sd):
            around = "" if drawn_mean is None else f" around mean_{name} {drawn_mean:g}"
            raise TokenroofError(
                f"{where}: stddev_{name} {drawn_sd:g}{around}: a spread is 0 or more around a positive mean"
            )
        cv = counted if drawn_sd is None or drawn_mean is None else spread_of(drawn_sd, drawn_mean)
        if cv is not None:  # drawn at random: the replay draws them alike
            settings[key] = cv
    tpot_ms = requests.tpot_ms
    throughput = batch * output / (e2e_ms / 1e3)
    asked = finite_number(data.get("mean_output_tokens"))
    if asked is not None and asked > 0 and abs(output / asked - 1) > TOKENS_ASKED_GAP:
        warnings.append(
            f"{where}: {output:.4g} output tokens a request as LLMPerf counts them (a Llama-2 tokenizer on the "
            f"text) where it asked for {asked:g}: the model stopped early or its tokenizer counts otherwise; TPOT "
            "and throughput are per LLMPerf's token"
        )
    # the streams still in flight when the count was reached run on, uncounted: sent beyond the requests averaged
    # (none in waves: each wave ended whole)
    sent = float(done + batch - 1) if client != WAVES else None
    row = Row(batch, throughput, tpot_ms, mean_context_tokens(prompt, output), ttft_ms, where, float(done), None, sent)
    return row, settings


def label(data: Mapping[str, Any]) -> str:
    return "LLMPerf summary"


# said once for a table holding LLMPerf runs (read_table): where its own figures were not taken as they stand
READING = (
    "TPOT = (end-to-end − TTFT) ÷ (output tokens − 1), not LLMPerf's inter_token_latency_s (which spreads the TTFT "
    "over every gap); throughput = the streams × mean output ÷ mean end-to-end latency, not LLMPerf's "
    "mean_output_throughput_token_per_s (whose time runs on while the requests it drops at the end finish or, in "
    "waves, counts the client's own work between them)"
)


def summaries_beside(files: Sequence[Path]) -> set[Path]:
    """The requests files among `files` whose summary is there too (each read with its summary, not on its own)."""
    names = set(files)
    return {f for f in files if f.name.endswith(RESPONSES_SUFFIX) and summary_path(f) in names}
