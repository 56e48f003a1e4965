"""Window arithmetic of a bench point, hand-computed on streams that step in lockstep (as a continuous-batching
server's do): tokens counted, the span they are divided by, and the running batch."""

from __future__ import annotations

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
