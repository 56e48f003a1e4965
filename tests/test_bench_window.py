"""Window arithmetic of a bench point, hand-computed on streams that step in lockstep (as a continuous-batching
server's do): tokens counted, the span they are divided by, and the running batch."""

from __future__ import annotations

import numpy as np
import pytest

from tokenroof.measure.http.client import RequestRecord
from tokenroof.measure.http.summary import running_batch, summarise, throughput_window

STEP_S = 0.02  # every stream gets one token per step
READ_S = 0.2e-3  # the client reads a step's four chunks 0.2 ms apart


def stream(i: int, first_step: int, n: int, ok: bool = True) -> RequestRecord:
    """Stream i's tokens arrive at steps first_step .. first_step + n - 1, read i-th within each step."""
    times = [k * STEP_S + i * READ_S for k in range(first_step, first_step + n)]
    record = RequestRecord(point="concurrency=4", index=i, start_s=times[0] - STEP_S, chunk_times_s=times)
    record.first_token_s = times[0]
    record.end_s = times[-1] + 1e-5
    record.ok = ok
    record.output_tokens = n if ok else 0
    if not ok:
        record.error_type = "cancelled"
    return record


def test_a_closed_loop_window_counts_as_many_steps_as_it_spans() -> None:
    """The window opens as stream 0 ends, read first of step 10, and closes as stream 3 ends, read last of step
    30: counted over [w0, w1] the three other tokens of step 10 come on top of the 20 steps spanned (83 tokens,
    207.2 tok/s, +3.75%). Half a step earlier the window holds steps 10 to 29: 80 tokens."""
    records = [stream(i, 0, 13 + 2 * i) for i in range(4)]  # ending inside the window at steps 12, 14, 16, 18
    records += [stream(i, 13 + 2 * i, 32 - 2 * i) for i in range(4)]  # each replaced in the next step, to step 44
    w0, w1 = 10 * STEP_S + 0.1e-3, 30 * STEP_S + 3 * READ_S + 0.1e-3
    t0, t1 = throughput_window("concurrency", records[:4], (w0, w1))
    assert (t0, t1) == pytest.approx((w0 - STEP_S / 2, w1 - STEP_S / 2))
    data = summarise("concurrency=4", "concurrency", 4, records, (w0, w1)).data
    assert data["throughput_tok_s"] == pytest.approx(80 / (w1 - w0))  # 199.7: the span is 0.6 ms past 20 steps
    assert data["batch"] == pytest.approx(4.0, rel=1e-3)


def test_an_open_loop_window_is_not_shifted() -> None:
    """Arrivals on a rate keep no phase with the steps: the window counts as it is."""
    records = [stream(i, 0, 40) for i in range(4)]
    assert throughput_window("rate", records, (0.2, 0.6)) == (0.2, 0.6)
    assert throughput_window("concurrency", [], (0.2, 0.6)) == (0.2, 0.6)  # no TPOT known: no shift


def test_a_request_cut_short_joins_the_batch_one_typical_step_before_its_first_token() -> None:
    """Stream 3 is cancelled after 3 tokens (steps 28-30): it ran 3 steps, 27 to 30, not the 2 between its first
    and last token. Over [0.2 s, 0.6 s] (20 steps): streams 0-2 run throughout (60 sequence-steps), stream 3 adds
    3: 63 / 20 = 3.15."""
    records = [stream(i, 0, 40) for i in range(3)] + [stream(3, 28, 3, ok=False)]
    w0, w1 = 10 * STEP_S + 3 * READ_S, 30 * STEP_S + 3 * READ_S
    assert running_batch(records, w0, w1) == pytest.approx(63 / 20)


def record(
    index: int, start: float, chunks: list[float], tokens: int, end: float, ok: bool = True, **kw: object
) -> RequestRecord:
    r = RequestRecord(point="p", index=index, start_s=start, chunk_times_s=chunks, ok=ok, **kw)  # type: ignore[arg-type]
    r.first_token_s = chunks[0] if chunks else None
    r.output_tokens, r.end_s = tokens, end
    return r


def six_requests() -> list[RequestRecord]:
    """Two completed in the window [1, 3], one still running at its close, a timeout, a protocol error with one
    chunk, a cancelled one."""
    return [
        record(
            0, 0.5, [1.0, 1.1, 1.2, 1.3, 1.4], 5, 1.4, prompt_tokens=100, cached_tokens=50, output_tokens_source="usage"
        ),
        record(1, 1.0, [1.3, 1.5, 1.7], 3, 1.7, prompt_tokens=100),
        record(2, 2.0, [2.5, 3.0, 3.5], 3, 3.5, prompt_tokens=300),
        record(3, 1.5, [], 0, 2.0, ok=False, error_type="timeout", error="read timed out"),
        record(4, 2.5, [], 0, 2.6, ok=False, error_type="cancelled", error="stop"),
        record(5, 1.6, [1.7], 0, 1.8, ok=False, error="bad json"),
    ]


def test_a_closed_loop_point_by_hand() -> None:
    """Latencies of the two requests that ended in [1, 3]; tokens and batch over the window shifted half their median
    step (0.15 s) earlier, [0.925, 2.925]; the running batch with each request joining one of its own steps before
    its first token (the failed one: the median step of all three with a TPOT, 0.2 s)."""
    point = summarise("c4", "concurrency", 4, six_requests(), (1.0, 3.0), ttft_slo_ms=600, tpot_slo_ms=150)
    d = point.data
    assert (d["requests_completed"], d["requests_failed"], d["requests_cancelled"]) == (2, 2, 1)
    assert d["failure_reasons"] == {"timeout": 1, "protocol": 1}
    assert d["failure_examples"] == ["timeout: read timed out", "protocol: bad json"]
    # tokens: 5 + 3 + one of request 2's (2.5; 3.0 is past 2.925) + the protocol error's one chunk = 10 over 2 s
    assert d["throughput_tok_s"] == pytest.approx(5.0)
    # batch: [0.925, 1.4] 0.475 + [1.1, 1.7] 0.6 + [2.0, 2.925] 0.925 + [1.5, 1.7] 0.2 = 2.2 s over 2 s
    assert d["batch"] == pytest.approx(1.1)
    assert d["request_throughput_req_s"] == pytest.approx(1.0)
    assert d["goodput_req_s"] == pytest.approx(0.5)  # request 0 meets both targets; request 1's TPOT is 200 ms
    assert d["ttft_ms"] == pytest.approx({"mean": 400.0, "p50": 400.0, "p90": 480.0, "p99": 498.0})
    assert d["tpot_ms"] == pytest.approx({"mean": 150.0, "p50": 150.0, "p90": 190.0, "p99": 199.0})
    assert d["itl_ms"] == pytest.approx({"mean": 800 / 6, "p50": 100.0, "p90": 200.0, "p99": 200.0})
    assert d["e2e_ms"] == pytest.approx({"mean": 800.0, "p50": 800.0, "p90": 880.0, "p99": 898.0})
    assert (d["output_tokens_mean"], d["output_tokens_source"], d["prompt_tokens_mean"]) == (4.0, "stream+usage", 100.0)
    assert d["cached_prompt_fraction"] == 0.5  # only request 0 says: 50 of its 100
    assert point.to_json() == {
        "type": "point",
        "point": "c4",
        "kind": "concurrency",
        "value": 4,
        "window_start_s": 1.0,
        "window_end_s": 3.0,
        "invalid": None,
        **d,
    }


def test_an_open_loop_point_by_hand() -> None:
    """At a rate: the requests sent in [1, 3] (1, 2 and the failures) for latencies, those that completed in it for
    the rates, the window not shifted."""
    d = summarise("r2", "rate", 2.0, six_requests(), (1.0, 3.0)).data
    assert (d["requests_completed"], d["requests_failed"]) == (2, 2)
    assert d["request_throughput_req_s"] == pytest.approx(2 / 2)
    assert d["throughput_tok_s"] == pytest.approx((5 + 3 + 2 + 1) / 2)  # request 2's 2.5 and 3.0 both count now
    assert d["ttft_ms"]["mean"] == pytest.approx((300 + 500) / 2) and d["prompt_tokens_mean"] == 200.0
    assert d["goodput_req_s"] == pytest.approx(1.0)  # no targets: every completed request is good
    assert d["cached_prompt_fraction"] is None  # neither says


def test_summary_helpers_at_their_edges() -> None:
    from tokenroof.measure.http.summary import (
        cached_fraction,
        describe_failures,
        failure_examples,
        tokens_in_window,
        typical_step_s,
    )

    failed = [record(i, 0.0, [], 0, 1.0, ok=False, error_type="timeout", error=f"e{i % 4}") for i in range(8)]
    assert failure_examples(failed) == ["timeout: e0", "timeout: e1", "timeout: e2"]  # three distinct, in order
    assert failure_examples(failed, limit=5) == ["timeout: e0", "timeout: e1", "timeout: e2", "timeout: e3"]
    assert describe_failures({"timeout": 3, "server_error": 2}) == "timeout 3, server_error 2"
    assert typical_step_s([record(0, 0.0, [1.0], 1, 1.0)]) is None  # one token: no TPOT
    assert typical_step_s([record(0, 0.0, [1.0, 2.0, 4.0], 3, 4.0), record(1, 0, [1.0, 1.2], 2, 1.2)]) == 0.85
    usage = record(0, 0.0, [1.0, 2.0], 10, 2.0)  # usage counted 10 tokens over 2 chunks: 5 each
    assert tokens_in_window(usage, 1.5, 2.0) == 5.0 and tokens_in_window(usage, 1.0, 2.0) == 10.0
    assert tokens_in_window(record(0, 0.0, [], 0, 1.0), 0.0, 9.0) == 0.0
    assert cached_fraction([record(0, 0, [1.0], 1, 1.0, prompt_tokens=0, cached_tokens=0)]) is None  # no prompt
    assert (
        cached_fraction(
            [
                record(0, 0, [1.0], 1, 1.0, prompt_tokens=40, cached_tokens=10),
                record(1, 0, [1.0], 1, 1.0, prompt_tokens=60, cached_tokens=0),
            ]
        )
        == 0.1
    )
    assert running_batch(six_requests(), 2.0, 2.0) == 0.0  # an empty window


def test_window_edges_and_targets_are_inclusive() -> None:
    """A request ending (closed loop) or sent (open loop) exactly on either edge is in the window; one exactly at
    both targets meets them; a 1-token one (no TPOT) meets a TPOT target; a point with nothing completed says 0."""
    edge = [
        record(0, 0.0, [0.5, 1.0], 2, 1.0),  # ends at w0: TTFT 500 ms, TPOT 500 ms
        record(1, 3.0, [3.25], 1, 3.25),  # sent at w1, one token
        record(2, 2.0, [2.5, 3.0], 2, 3.0),  # ends at w1
    ]
    closed = summarise("c", "concurrency", 2, edge, (1.0, 3.0), ttft_slo_ms=500, tpot_slo_ms=500).data
    assert closed["requests_completed"] == 2 and closed["goodput_req_s"] == pytest.approx(1.0)
    assert closed["e2e_ms"]["mean"] == pytest.approx(1000.0)
    opened = summarise("r", "rate", 1.0, edge, (1.0, 3.0), ttft_slo_ms=500, tpot_slo_ms=500).data
    assert opened["requests_completed"] == 2  # requests 1 and 2: sent in [1, 3], their latencies
    # the rates count what completed in [1, 3], whenever sent: requests 0 and 2, at the targets exactly
    assert opened["request_throughput_req_s"] == opened["goodput_req_s"] == pytest.approx(1.0)
    # one token each (no TPOT): TTFT 250 ms exactly, 300 ms, and 0 (its first token as it was sent)
    one = [record(3, 1.5, [1.75], 1, 1.75), record(4, 1.5, [1.8], 1, 1.8), record(5, 2.0, [2.0], 1, 2.0)]
    assert summarise("r", "rate", 1.0, one, (1.0, 3.0), ttft_slo_ms=250, tpot_slo_ms=1).data["goodput_req_s"] == 1.0
    empty = summarise("c", "concurrency", 1, edge, (5.0, 6.0)).data
    assert (empty["requests_completed"], empty["output_tokens_mean"]) == (0, 0.0)


def test_an_open_loop_window_opens_a_lifetime_after_the_first_arrival_as_simulate_s_does() -> None:
    """Twenty requests sent 1 s apart, each 5 s from send to end: 10% in is 2 s, a lifetime 5 s, so bench's window is
    [5, 19], simulate's on the same arrivals and ends (stats.open_loop_window, the one definition). Before, bench
    opened it at 2 s, while the batch was still filling: a short run at 90% of a llama-server's capacity read 90
    tok/s where it carried 100 (examples/llama-server-2026-12-06a)."""
    from tokenroof.measure.http.load import PointRun, open_window
    from tokenroof.serving.simulate import Sequence, SimResult

    records = []
    for i in range(20):
        record = RequestRecord(point="rate=1", index=i, start_s=float(i), ok=True, end_s=i + 5.0)
        records.append(record)
    run = open_window(PointRun(records=records), [float(i) for i in range(20)], False, 20)
    assert run.window_s == (5.0, 19.0) and run.note == ""
    seqs = [Sequence(str(i), 8, 4, float(i)) for i in range(20)]
    for seq in seqs:
        seq.finished_s = seq.arrival_s + 5.0
    empty = np.zeros(0)
    assert SimResult(seqs, empty, empty, empty.astype(int), empty).window_s() == run.window_s
    # failures do not set the lifetime; a run shorter than one is measured whole, to its last end
    failed = [RequestRecord(point="rate=1", index=i, start_s=float(i), ok=False, end_s=i + 60.0) for i in range(20)]
    assert open_window(PointRun(records=records + failed), [float(i) for i in range(20)], False, 40).window_s == (
        5.0,
        19.0,
    )
    slow = [RequestRecord(point="rate=1", index=i, start_s=float(i), ok=True, end_s=i + 30.0) for i in range(20)]
    assert open_window(PointRun(records=slow), [float(i) for i in range(20)], False, 20).window_s == (0.0, 49.0)


def test_an_open_loop_counts_as_its_rate_what_completed_in_the_window_not_what_was_sent_in_it() -> None:
    """Window [1, 3]: two requests sent before it end inside it, one sent inside ends after it, one is both: the
    server completed three in the window (1.5 req/s; the requests sent in it, two, were the count before); the
    latencies stay those of the two sent in it. Goodput likewise: TTFT ≤ 400 ms holds for three of the completed."""
    records = [
        record(0, 0.5, [0.9, 1.5], 2, 1.5),  # sent before, completes inside: TTFT 400 ms
        record(1, 0.6, [1.2, 1.6], 2, 1.6),  # sent before, completes inside: TTFT 600 ms
        record(2, 1.2, [1.4, 2.2], 2, 2.2),  # both: TTFT 200 ms
        record(3, 2.0, [2.3, 3.5], 2, 3.5),  # sent inside, completes after: TTFT 300 ms
    ]
    d = summarise("r", "rate", 1.0, records, (1.0, 3.0), ttft_slo_ms=400).data
    assert d["request_throughput_req_s"] == pytest.approx(3 / 2)
    assert d["goodput_req_s"] == pytest.approx(2 / 2)  # requests 0 and 2 (1: 600 ms)
    assert d["requests_completed"] == 2 and d["ttft_ms"]["mean"] == pytest.approx(250.0)  # requests 2 and 3
