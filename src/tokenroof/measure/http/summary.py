"""Per sweep point: steady-state window metrics from request records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tokenroof.measure.http.client import RequestRecord
from tokenroof.stats import percentiles

ALIASES = {
    "ttft_ms": "vLLM TTFT; GuideLLM time_to_first_token_ms; GenAI-Perf/AIPerf time to first token",
    "tpot_ms": "vLLM TPOT (excl. 1st token); GenAI-Perf/AIPerf 'inter token latency'; GuideLLM inter_token_latency_ms",
    "itl_ms": "vLLM ITL (gaps between streamed chunks)",
    "e2e_ms": "vLLM E2EL; GuideLLM request_latency; GenAI-Perf request latency",
    "throughput_tok_s": "vLLM output token throughput, but over the steady-state window only",
    "batch": "time-averaged sequences in the running batch: the server's gauge (vLLM num_requests_running) where "
    "its /metrics has one, else estimated client-side",
}
EXAMPLES = 3  # distinct failure reasons kept per point


def tokens_in_window(record: RequestRecord, w0: float, w1: float) -> float:
    """Output tokens whose chunks arrived inside [w0, w1] (usage-counted tokens spread over the chunks)."""
    times = record.chunk_times_s
    if not times:
        return 0.0
    per_chunk = record.output_tokens / len(times) if record.ok else 1.0
    return per_chunk * sum(1 for t in times if w0 <= t <= w1)


def typical_step_s(records: Sequence[RequestRecord]) -> float | None:
    """The median TPOT of the requests that completed with two or more tokens: one step of the point."""
    steps = [r.tpot_s for r in records if r.ok and r.tpot_s]
    return float(np.median(steps)) if steps else None


def throughput_window(kind: str, ok: Sequence[RequestRecord], window: tuple[float, float]) -> tuple[float, float]:
    """The window over which tokens are counted: at a fixed concurrency half a step earlier than the latency window.

    A closed-loop window opens and closes as a request ends, just after its last token, so each edge sits on a
    step's arrivals: every token of the step at the opening edge that the client stamped after it (streams of one
    step arrive together) counted on top of the span's steps, up to one step in 60 (+1.6%) by the order the client
    read them. Half a median step earlier each edge lies between two steps' arrivals, and the span holds as many
    steps as it counts. Open-loop windows open on request arrivals, which keep no phase with the steps.
    """
    w0, w1 = window
    step = typical_step_s(ok)
    if kind == "rate" or step is None:
        return w0, w1
    return w0 - step / 2, w1 - step / 2


def running_batch(records: Sequence[RequestRecord], w0: float, w1: float) -> float:
    """Time-average number of sequences in the server's running batch over [w0, w1].

    A sequence joins the batch one step before its first token (the step that
    prefills it, ≈ one TPOT; the point's median TPOT for a request with fewer than
    two tokens or cut short by the window's close) and leaves at its last token.
    """
    typical = typical_step_s(records) or 0.0
    total = 0.0
    for r in records:
        if not r.chunk_times_s:
            continue
        step = r.tpot_s if r.ok and r.tpot_s else typical
        start, end = r.chunk_times_s[0] - step, r.chunk_times_s[-1]
        total += max(0.0, min(end, w1) - max(start, w0))
    return total / (w1 - w0) if w1 > w0 else 0.0


def failure_counts(failed: Sequence[RequestRecord]) -> dict[str, int]:
    """Failures by error type (client.ERROR_TYPES), most common first."""
    counts = Counter(r.error_type or "protocol" for r in failed)
    return dict(counts.most_common())


def failure_examples(failed: Sequence[RequestRecord], limit: int = EXAMPLES) -> list[str]:
    """The first `limit` distinct failure reasons, one line each ('client_error: HTTP 400: …')."""
    seen: dict[str, None] = {}
    for r in failed:
        seen.setdefault(f"{r.error_type or 'protocol'}: {r.error}", None)
        if len(seen) == limit:
            break
    return list(seen)


def describe_failures(counts: dict[str, int]) -> str:
    """'timeout 3, server_error 2'."""
    return ", ".join(f"{kind} {n}" for kind, n in counts.items())


def cached_fraction(ok: Sequence[RequestRecord]) -> float | None:
    """The share of prompt tokens the server served from its cache (None: it does not say)."""
    told = [r for r in ok if r.cached_tokens is not None and r.prompt_tokens]
    if not told:
        return None
    return sum(r.cached_tokens or 0 for r in told) / sum(r.prompt_tokens or 0 for r in told)


@dataclass
class PointSummary:
    label: str
    kind: str  # "concurrency" or "rate"
    value: float
    window_s: tuple[float, float]
    data: dict[str, Any]
    invalid: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "point",
            "point": self.label,
            "kind": self.kind,
            "value": self.value,
            "window_start_s": self.window_s[0],  # simulate's names: one key, one shape
            "window_end_s": self.window_s[1],
            "invalid": self.invalid,
            **self.data,
        }


def summarise(
    label: str,
    kind: str,
    value: float,
    records: Sequence[RequestRecord],
    window: tuple[float, float],
    ttft_slo_ms: float | None = None,
    tpot_slo_ms: float | None = None,
) -> PointSummary:
    """Window metrics: throughput counts tokens arriving in the window, the request rate and goodput the requests
    that completed in it (an overloaded server's true rate, as simulate counts it: not the rate they were sent at);
    latencies use the requests that completed in it (closed loop) or were sent in it (open loop: every request sent
    after ramp-up, however long it ran)."""
    w0, w1 = window
    span = max(w1 - w0, 1e-9)
    ended = [r for r in records if r.end_s is not None and w0 <= r.end_s <= w1]
    done = [r for r in records if w0 <= r.start_s <= w1 and r.end_s is not None] if kind == "rate" else ended
    ok = [r for r in done if r.ok]
    completed = [r for r in ended if r.ok]
    failed = [r for r in records if not r.ok and r.error_type != "cancelled"]
    t0, t1 = throughput_window(kind, ok, window)
    tokens = sum(tokens_in_window(r, t0, t1) for r in records)
    good = [
        r
        for r in completed
        if (ttft_slo_ms is None or (r.ttft_s or 0) * 1e3 <= ttft_slo_ms)
        and (tpot_slo_ms is None or (r.tpot_s or 0) * 1e3 <= tpot_slo_ms)
    ]
    sources = sorted({r.output_tokens_source for r in ok})
    prompt = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    mean_out = float(np.mean([r.output_tokens for r in ok])) if ok else 0.0
    data = {
        "requests_completed": len(ok),
        "requests_failed": len(failed),
        "requests_cancelled": sum(1 for r in records if r.error_type == "cancelled"),
        "failure_reasons": failure_counts(failed),
        "failure_examples": failure_examples(failed),
        "batch": running_batch(records, t0, t1),
        "throughput_tok_s": tokens / span,
        "request_throughput_req_s": len(completed) / span,
        "goodput_req_s": len(good) / span,
        "ttft_ms": percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_ms": percentiles([r.tpot_s for r in ok if r.tpot_s is not None]),
        "itl_ms": percentiles([g for r in ok for g in r.itl_s]),
        "e2e_ms": percentiles([(r.end_s or 0) - r.start_s for r in ok]),
        "output_tokens_mean": mean_out,
        "output_tokens_source": "+".join(sources) or None,
        "prompt_tokens_mean": float(np.mean(prompt)) if prompt else None,
        "cached_prompt_fraction": cached_fraction(ok),
        "aliases": ALIASES,
    }
    return PointSummary(label, kind, value, window, data)
