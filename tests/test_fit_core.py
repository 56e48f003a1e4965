"""fit/core.py by hand: the small-batch line, caps, the likelihood, caps seen in the data (make mutation)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tokenroof.errors import TokenroofError
from tokenroof.fit import core as ft
from tokenroof.fit.structures import ContextLaw, Prior
from tokenroof.io.measurements import Row, Semantics, build_table, parse_csv
from tokenroof.model.stepmodel import StepModel

LINE = StepModel(0.0, 2.0, 0.0, 0.0, t_seq_s=0.5)  # T = 2 + 0.5·b


def test_small_batch_line_then_bridge_then_model() -> None:
    small = ft.SmallBatch(upto_batch=4.0, support_batch=8.0, intercept_s=1.0, slope_s=0.5)
    b = np.array([2.0, 4.0, 6.0, 8.0, 10.0])
    model = np.full(5, 100.0)
    # line 1 + 0.5·b to 4 (3), then straight to the model's 7 at 8, then the model
    assert np.allclose(small.apply(b, model, 7.0), [2.0, 3.0, 5.0, 100.0, 100.0])
    # a longer context adds its KV reads per sequence to the slope; a shorter one takes at most the whole slope
    assert np.allclose(small.apply(b[:2], model[:2], 7.0, 0.25), [1 + 0.75 * 2, 1 + 0.75 * 4])
    assert np.allclose(small.apply(b[:2], model[:2], 7.0, -1.0), [1.0, 1.0])
    # no gap between the regimes: no bridge
    touching = ft.SmallBatch(4.0, 4.0, 1.0, 0.5)
    assert np.allclose(touching.apply(np.array([4.0, 5.0]), np.array([9.0, 9.0]), 9.0), [3.0, 9.0])
    assert small.to_dict() == {"up_to_batch": 4.0, "intercept_ms": 1000.0, "slope_ms_per_seq": 500.0}


def test_curve_running_batch_tpot_and_throughput() -> None:
    b = np.array([5.0, 20.0])
    free = ft.Curve()
    assert free.running(b) is b and np.allclose(free.tpot_s(LINE, b), [4.5, 12.0])
    assert np.allclose(free.throughput_tok_s(b, np.array([4.5, 12.0])), [5 / 4.5, 20 / 12.0])
    capped = ft.Curve(cap=10.0)
    assert np.allclose(capped.running(b), [5.0, 10.0])
    assert np.allclose(capped.tpot_s(LINE, b), [4.5, 7.0])  # past the cap, the cap's step
    assert np.allclose(capped.throughput_tok_s(b, np.array([4.5, 7.0])), [5 / 4.5, 10 / 7.0])
    queued = ft.Curve(cap=10.0, queues=True)
    # an end-to-end TPOT counts the queue: the step × batch / running
    assert np.allclose(queued.tpot_s(LINE, b), [4.5, 14.0])
    assert np.allclose(queued.throughput_tok_s(b, np.array([4.5, 14.0])), [5 / 4.5, 10 / 7.0])
    # the memory's cap at 100 tokens halves at 200, and a context below one token counts as one
    memory = ft.Curve(cap=10.0, cap_context_tokens=100.0)
    assert np.allclose(memory.running(b, 200.0), [5.0, 5.0])
    assert np.allclose(memory.running(b, np.array([50.0, 0.5])), [5.0, 20.0])
    assert np.allclose(memory.running(b), [5.0, 10.0])
    assert np.allclose(capped.running(b, 200.0), [5.0, 10.0])  # a server's cap does not move with context
    kv = StepModel(0.0, 2.0, 0.0, 0.01)
    assert np.allclose(free.tpot_s(kv, b, 100.0), [2 + 5.0, 2 + 20.0])


def test_evaluate_with_and_without_a_context_law() -> None:
    small = ft.SmallBatch(1.0, 2.0, 1.0, 0.25)
    tpot, thr = ft.evaluate_s(LINE, small, ft.Curve(), np.array([1.0, 4.0]))
    assert np.allclose(tpot, [1.25, 4.0]) and np.allclose(thr, [1 / 1.25, 1.0])
    # folded at 100 tokens with 0.01 s of KV per token per sequence: at 200 tokens each sequence costs 1 s more
    law = ContextLaw(100.0, 0.01)
    folded = StepModel(0.0, 2.0, 0.0, 0.0, t_seq_s=1.5)
    tpot, thr = ft.evaluate_s(folded, None, ft.Curve(), np.array([2.0, 4.0]), 200.0, law)
    assert np.allclose(tpot, [2 + 2 * 2.5, 2 + 4 * 2.5]) and np.allclose(thr, [2 / 7.0, 4 / 12.0])
    # the small-batch line moves by the KV reads too
    tpot, _ = ft.evaluate_s(folded, small, ft.Curve(), np.array([1.0]), 200.0, law)
    assert np.allclose(tpot, [1.0 + 1.25])
    # moved far below the reference, never faster than the fixed part and the weights
    tpot, _ = ft.evaluate_s(folded, None, ft.Curve(), np.array([4.0]), 0.0, ContextLaw(100.0, 1.0))
    assert np.allclose(tpot, [2.0])
    # without a law the context is ignored
    assert np.allclose(ft.evaluate_s(folded, None, ft.Curve(), np.array([2.0]), 200.0)[0], [5.0])


def test_small_batch_fits() -> None:
    b, t = np.array([1.0, 2.0, 4.0, 8.0]), np.array([1.5, 2.0, 6.0, 10.0])
    assert ft.fit_small_batch(b, t, slice(0, 4)) == (None, 0)
    small, k = ft.fit_small_batch(b, t, slice(2, 4))
    assert k == 2 and small == ft.SmallBatch(2.0, 4.0, pytest.approx(1.0), pytest.approx(0.5))
    one, k = ft.fit_small_batch(b, t, slice(1, 4))
    assert k == 1 and one == ft.SmallBatch(1.0, 2.0, 1.5, 0.0)
    level, _ = ft.fit_small_batch(np.array([1.0, 1.0, 4.0]), np.array([1.0, 4.0, 9.0]), slice(2, 3))
    assert level is not None and level.intercept_s == pytest.approx(2.0)  # geometric mean of 1 and 4
    weighted, _ = ft.fit_small_batch(
        np.array([1.0, 1.0, 4.0]), np.array([1.0, 4.0, 9.0]), slice(2, 3), np.array([3.0, 1.0, 1.0])
    )
    assert weighted is not None and weighted.intercept_s == pytest.approx(4 ** (1 / 4))


def test_contexts_law_and_reduction() -> None:
    whole = StepModel(0.0, 2.0, 0.0, 0.01, t_seq_s=0.5)
    several = ft.Contexts(np.array([100.0, 300.0]), 200.0)
    law = several.law(whole)
    assert law == ContextLaw(200.0, 0.01, 0.0)
    b, t = np.array([2.0, 4.0]), np.array([5.0, 20.0])
    # moved to the reference: −0.01·b·(ctx − 200), never below a tenth
    assert np.allclose(several.reduced(b, t, law), [5.0 + 2.0, 20.0 - 4.0])
    assert np.allclose(several.reduced(b, np.array([1.0, 2.0]), law), [3.0, 0.2])
    assert several.reduced(b, t, None) is t
    one = ft.Contexts(None, 200.0)
    assert one.law(whole) is None and one.reduced(b, t, law) is t
    prior = Prior(StepModel(0.0, 1.0, 0.0, 1e-3), 1.0, 0.0, 0.0, context_tokens=200.0)
    physics = ft.Contexts(None, 200.0, prior).law(StepModel(0.0, 2.0, 0.0, 0.0, t_seq_s=10.0))
    assert physics is not None and physics.source == "physics" and physics.kv_token_s == pytest.approx(2e-3)


def test_excluded_points_are_found_by_position_or_by_context() -> None:
    table = parse_csv("batch,tpot_ms\n1,10\n2,11\n4,12\n8,14\n")
    assert list(ft.Excluded((4.0, 8.0), "r").indices(table)) == [2, 3]
    several = parse_csv("batch,tpot_ms,context_tokens\n1,10,100\n1,20,1000\n2,11,100\n2,21,1000\n")
    assert list(ft.Excluded((2.0,), "r", contexts=(1000.0,)).indices(several)) == [3]
    assert list(ft.Excluded((1.0, 2.0), "r", contexts=(100.0, 100.0)).indices(several)) == [0, 2]
    e = ft.Excluded((1.0,), "why")
    assert e.cap is None and e.left_out and e.contexts == ()


def test_evidence_and_the_information_criteria_by_hand() -> None:
    single = ft.Evidence.single(3)
    assert np.array_equal(single.count, [1, 1, 1]) and np.array_equal(single.log_ss, [0, 0, 0]) and single.rows == 3
    ev = ft.Evidence(np.array([1.0, 4.0, 2.0]), np.array([0.0, 0.01, 0.02]))
    assert ev.rows == 7.0
    cut = ev.cut(slice(1, 3))
    assert np.array_equal(cut.count, [4.0, 2.0]) and np.array_equal(cut.log_ss, [0.01, 0.02])
    r = np.array([0.1, -0.1, 0.2])
    assert ev.rss(r) == pytest.approx(0.01 + 4 * 0.01 + 2 * 0.04 + 0.03)
    # AICc: n = 3 rows, rss 0.06, σ² = 0.02, k + 1 = 2 → 3 + 3·ln 0.02 + 4 + 12/0 → too few: infinite
    assert ft.aicc(r, 1) == math.inf
    assert ft.aicc(r, 1, small_sample=False) == pytest.approx(0.06 / 0.02 + 3 * math.log(0.02) + 4)
    r5 = np.array([0.1, -0.1, 0.2, 0.0, 0.1])  # rss 0.07, n 5, σ² 0.014
    assert ft.aicc(r5, 1) == pytest.approx(5 + 5 * math.log(0.014) + 4 + 2 * 2 * 3 / 2)
    # σ floored at 1%: a perfect fit scores as if 1% off
    assert ft.aicc(np.zeros(5), 1, small_sample=False) == pytest.approx(0 + 5 * math.log(1e-4) + 4)
    assert ft.aicc(r5, 1, evidence=ft.Evidence(np.full(5, 2.0), np.zeros(5))) == pytest.approx(
        10 + 10 * math.log(0.014) + 4 + 12 / 7
    )


def test_akaike_weights() -> None:
    w = ft.akaike_weights([10.0, 12.0])
    assert w == pytest.approx([1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))])
    assert ft.akaike_weights([math.inf, 3.0]) == pytest.approx([0.0, 1.0])
    assert ft.akaike_weights([math.inf, math.inf, math.inf]) == pytest.approx([1 / 3] * 3)


def test_pins_are_checked() -> None:
    ft.check_pins(None, None)
    ft.check_pins(100.0, None)
    ft.check_pins(None, 100.0)
    with pytest.raises(TokenroofError, match=r"^critical_batch must be positive, got 0$"):
        ft.check_pins(0.0, None)
    with pytest.raises(TokenroofError, match=r"^roof_tok_s must be positive, got -1$"):
        ft.check_pins(None, -1.0)
    with pytest.raises(TokenroofError, match=r"^give critical_batch or roof_tok_s, not both$") as info:
        ft.check_pins(10.0, 10.0)
    assert info.value.as_flags() == "give --critical-batch or --roof-tok-s, not both"  # what the command line says


def test_noise_by_hand() -> None:
    ev = ft.Evidence(np.array([1.0, 4.0]), np.array([0.0, 0.0]))
    sigma, noise = ft._noise(np.array([0.05, 0.0]), ev)
    # σ = √(0.0025 / 5) ≈ 2.24%; per point max(√(0.0025 / 5), σ/√rows)
    assert sigma == pytest.approx(math.sqrt(0.0025 / 5))
    assert noise == pytest.approx([math.sqrt(0.0025 / 5), math.sqrt(0.0025 / 5)])
    sigma, noise = ft._noise(np.zeros(2), ft.Evidence(np.array([1.0, 4.0]), np.array([0.0, 0.0])))
    assert sigma == 0.01 and noise == pytest.approx([0.01, 0.005])
    sigma, _ = ft._noise(np.zeros(2), ft.Evidence(np.array([1.0, 1.0]), np.array([0.0, 0.08])))
    assert sigma == pytest.approx(0.2)  # the rows' own scatter counts


def test_local_noise_by_hand() -> None:
    b = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    assert ft.local_noise(b, 2 + 0.5 * b) == 0.02  # a perfect line: the 2% floor
    t = (2 + 0.5 * b) * np.exp(np.array([0, 0, 0.1, -0.1, 0.1, -0.1]))
    a, s = ft.fit_line(b[3:], t[3:])
    resid = np.log((a + s * b[3:]) / t[3:])
    assert ft.local_noise(b, t) == pytest.approx(math.sqrt(float(resid @ resid) / 1))
    few = np.array([1.0, 2.0, 4.0])  # the upper half of three points is two: all three are used
    t3 = np.array([2.0, 3.0, 4.5])
    a, s = ft.fit_line(few, t3)
    resid = np.log((a + s * few) / t3)
    assert ft.local_noise(few, t3) == pytest.approx(max(math.sqrt(float(resid @ resid)), 0.02))
    ctx = np.array([100.0, 400.0] * 3)
    assert ft.local_noise(b, 2 + (0.5 + 0.01 * ctx) * b, context=ctx) == 0.02


def test_a_running_batch_that_stops_growing_is_left_out() -> None:
    rows = [(16, 5), (32, 6), (64, 8), (65, 12), (65.5, 20)]
    body = "".join(f"{b},{b / t * 1e3:.6g},{t}\n" for b, t in rows)
    table = parse_csv("batch,throughput_tok_s,tpot_ms\n" + body)
    seen = ft.past_cap(table)
    assert seen is not None and seen.batches == (65.0, 65.5) and seen.cap == 64.0 and seen.left_out
    assert seen.reason == (
        "the running batch stops growing at ≈64 while TPOT moves (8 → 20 ms): the KV cache is full or a cap holds "
        "the batch (preemption), so these points are not decode steps at their batch"
    )
    # TPOT growing no faster than the batch: decode steps, nothing left out
    steady = parse_csv("batch,tpot_ms\n16,5\n32,6\n64,8\n65,8.1\n65.5,8.2\n")
    assert ft.past_cap(steady) is None
    assert ft.past_cap(parse_csv("# batch_kind=static\nbatch,throughput_tok_s,tpot_ms\n" + body)) is None
    fit = ft.fit_table(table, n_samples=0)
    assert fit.excluded == seen and fit.n_fit == 3 and fit.curve.cap == 64.0


def test_a_server_cap_behind_client_concurrency() -> None:
    rows = [(8, 800, 10), (16, 1600, 10), (32, 1620, 10.2), (64, 1630, 10.3)]
    body = "".join(f"{b},{thr},{t}\n" for b, thr, t in rows)
    table = parse_csv("# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms\n" + body)
    seen = ft.past_cap(table)
    assert seen is not None and seen.batches == (32.0, 64.0) and seen.cap == pytest.approx(16.0)
    assert not seen.left_out
    assert seen.reason == (
        "throughput stops growing past concurrency 16: the server holds its running batch near 16 and TPOT stays "
        "flat; these points are fitted as steps at that batch"
    )
    fit = ft.fit_table(table, n_samples=0)
    assert fit.n_fit == 4 and fit.curve.cap == pytest.approx(16.0) and fit.batch_range == (8.0, 16.0)
    # TPOT growing with the concurrency: a roof the running batch grew into, no cap
    roof = parse_csv(
        "# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms\n8,800,10\n16,1600,10\n32,1620,19.8\n"
    )
    assert ft.past_cap(roof) is None


def test_a_server_cap_under_a_running_batch_the_client_sent_past() -> None:
    """bench's table: the running batch (the server's gauge) holds at 48 while the client's concurrency goes 48 → 64
    and TTFT grows 26 → 424 ms, TPOT within what 1% more sequences allow: the server's own cap held the batch, the
    rest queued. The cap is the data's; the point is a step at that batch (not preemption: fitted, not left out). A
    batch that grew with its client, or a client no further than the batch, shows none."""
    head = "# batch_kind=running tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms,ttft_ms,concurrency\n"
    rows = "16,2115,7.47,19.7,16\n32,3528,8.97,21.5,32\n47.48,4501,10.54,25.9,48\n48,4153,10.84,424.5,64\n"
    seen = ft.past_cap(parse_csv(head + rows))
    assert seen is not None and seen.batches == (48.0,) and seen.cap == 48.0 and not seen.left_out
    assert seen.reason == (
        "the running batch holds at ≈48 while the client's concurrency grows to 64 (TTFT 25.9 → 424.5 ms): a server "
        "cap (max_num_seqs, slots) holds the batch and the rest queue; these points are steps at that batch"
    )
    fit = ft.fit_table(parse_csv(head + rows), n_samples=0)
    assert fit.curve.cap == 48.0 and fit.n_fit == 4
    grew = rows.replace("48,4153,10.84,424.5,64", "62,5100,12.2,27,64")
    assert ft.past_cap(parse_csv(head + grew)) is None
    assert ft.past_cap(parse_csv(head + rows.replace(",424.5,64", ",424.5,50"))) is None
    assert ft.past_cap(parse_csv(head + rows + "48.5,4200,10.9,300,\n")) is None  # a rate row beside: no client held


def test_end_to_end_tpot_queues_unless_ttft_says_otherwise() -> None:
    head = "# batch_kind=concurrency tpot_kind=e2e\nbatch,throughput_tok_s,tpot_ms,ttft_ms\n"
    queued = parse_csv(head + "8,800,10,50\n16,1600,10,50\n32,1620,19.8,500\n")
    seen = ft.past_cap(queued)
    assert (
        seen is not None and seen.cap == 16.0 and "requests queue (their wait is in the end-to-end TPOT)" in seen.reason
    )
    roof = parse_csv(head + "8,800,10,50\n16,1600,10,50\n32,1620,19.8,60\n")
    assert ft.past_cap(roof) is None
    fit = ft.fit_table(queued, n_samples=0)
    assert fit.curve.queues and fit.curve.cap == 16.0


def test_the_memory_cap_from_the_physics() -> None:
    table = parse_csv("batch,tpot_ms\n1,10\n2,10.5\n4,11\n8,12\n")
    prior = Prior(StepModel(0.0, 5e-3, 0.0, 0.0), 1e-5, 1e-6, 0.0, max_batch=100, context_tokens=500.0)
    fit = ft.fit_table(table, prior, n_samples=0)
    assert fit.curve.cap == 100 and fit.curve.cap_context_tokens == 500.0 and fit.notes == []
    low = ft.fit_table(table, Prior(StepModel(0.0, 5e-3, 0.0, 0.0), 1e-5, 1e-6, 0.0, max_batch=6), n_samples=0)
    assert low.curve.cap == 8.0
    assert low.notes == [
        "the physics puts the memory cap at 6 sequences, below the measured batch 8: the memory held it, so the cap "
        "is taken there; check --context, --dtype and --kv-dtype"
    ]


def test_a_physics_cap_the_concurrency_data_ran_past_is_raised_to_what_they_held() -> None:
    # throughput × TPOT (Little's law over the decode): 380 tok/s × 10 ms = 3.8 decoding at concurrency 4,
    # 1,300 × 11.5 ms = 14.95 at 16, 2,200 × 13 ms = 28.6 at 32
    head = "# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms\n"
    table = parse_csv(head + "4,380,10\n16,1300,11.5\n32,2200,13\n")
    assert ft.running_seen(table) == pytest.approx((28.6, 32.0))
    prior = Prior(StepModel(0.0, 5e-3, 0.0, 0.0), 1e-5, 1e-6, 0.0, max_batch=10, context_tokens=500.0)
    fit = ft.fit_table(table, prior, n_samples=0)
    # 28.6 > 1.1 × 10: more ran together than the estimate allows; the cap is what ran, the point at 32 a step there
    assert fit.curve.cap == pytest.approx(28.6) and fit.curve.from_physics and fit.cap_raised_from == 10
    assert fit.notes == [
        "the physics puts the memory cap at 10 sequences, below the 28.6 the data show decoding at once (throughput "
        "× TPOT at concurrency 32), so the cap is taken there, a floor of what fits; check --context, --dtype and "
        "--kv-dtype"
    ]
    # at RAN_PAST_CAP × the estimate exactly (5.5 decoding at 8 against 5: 550 tok/s × 10 ms) still within it
    edge = ft.fit_table(parse_csv(head + "2,190,10\n8,550,10\n"), replace(prior, max_batch=5), n_samples=0)
    assert edge.cap_raised_from is None and edge.curve.cap == 5
    # within RAN_PAST_CAP of the estimate (28.6 ≤ 1.1 × 27) the data do not contradict it: the server ran 27
    held = ft.fit_table(table, replace(prior, max_batch=27), n_samples=0)
    assert held.curve.cap == 27 and held.notes == [] and held.cap_raised_from is None
    # an end-to-end TPOT (its queue's wait is in it) says nothing of what ran: the cap stays the physics'
    e2e = parse_csv(head.replace("tpot_kind=tpot", "tpot_kind=e2e") + "4,380,10\n16,1300,11.5\n32,2200,13\n")
    assert ft.fit_table(e2e, prior, n_samples=0).curve.cap == 10
    # another batch kind has its own rule (the measured batch itself ran)
    assert ft.running_seen(parse_csv("batch,throughput_tok_s,tpot_ms\n4,380,10\n16,1300,11.5\n")) is None


def test_what_ran_counts_only_points_that_measured_both_columns_and_no_more_than_were_in_flight() -> None:
    head = "# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms\n"
    # a column derived from the other: throughput × TPOT is the batch to the digit
    derived = parse_csv("# batch_kind=concurrency tpot_kind=tpot\nbatch,tpot_ms\n4,10\n16,11.5\n32,13\n")
    assert ft.running_seen(derived) is None
    # both columns written, the same numbers (2,461.5 × 13 ms = 32.0): nothing learnt either
    exact = parse_csv(head + "4,380,10\n32,2461.538,13\n")
    assert ft.running_seen(exact) == pytest.approx((3.8, 4.0))
    # a point labelled derived is not read, whatever its numbers say
    labelled = replace(parse_csv(head + "4,380,10\n32,2200,13\n"), derived=("", "throughput_tok_s"))
    assert ft.running_seen(labelled) == pytest.approx((3.8, 4.0))
    # more decoding than in flight (a throughput counting prompt tokens: 5×): no evidence of what ran
    total = parse_csv(head + "4,1900,10\n32,2200,13\n")
    assert ft.running_seen(total) == pytest.approx((28.6, 32.0))
    assert ft.running_seen(parse_csv(head + "4,1900,10\n32,11000,13\n")) is None
    # at 1.05 × the concurrency exactly (2,100 × 10 ms = 21 at 20) still evidence; within 0.1% of it (2,461 tok/s ×
    # 13 ms = 31.993 at 32) a derived column's rounding
    assert ft.running_seen(parse_csv(head + "4,380,10\n20,2100,10\n")) == pytest.approx((21.0, 20.0))
    assert ft.running_seen(parse_csv(head + "4,380,10\n32,2461,13\n")) == pytest.approx((3.8, 4.0))
    # a table that does not say which columns were derived (built in code): every point is read
    unsaid = replace(parse_csv(head + "4,380,10\n32,2200,13\n"), derived=())
    assert ft.running_seen(unsaid) == pytest.approx((28.6, 32.0))


def test_fit_points_weights_and_samples() -> None:
    b = np.array([1.0, 2.0, 4.0, 8.0])
    fit = ft.fit_points(b, 2 + 0.5 * b, n_samples=7, seed=1)
    assert fit.method == "line" and fit.weights == {"line": 1.0} and len(fit.samples) == 7
    assert fit.reason == (
        "memory-bound line T = a + s·b through the upper half of the points (the local slope); "
        "batches ≤ 2 on their own line (small-batch kernels)"
    )
    assert fit.n_fit == 4 and fit.batch_range == (1.0, 8.0) and fit.sigma_rel == 0.01
    assert fit.step_model.t_weights_s == pytest.approx(2.0) and fit.step_model.t_seq_s == pytest.approx(0.5)
    tpot, thr = fit.evaluate(np.array([16.0]))
    assert tpot == pytest.approx([10.0]) and thr == pytest.approx([1.6])
    assert fit.context_source is None and fit.cap_at(1000.0) is None and fit.context_tokens == 0.0
    assert ft.fit_points(b, 2 + 0.5 * b, n_samples=0).samples == []
    pinned = ft.fit_points(b, 2 + 0.5 * b, critical_batch=100.0, n_samples=0)
    assert pinned.method == "pinned" and list(pinned.weights) == ["pinned"]
    six = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    both = ft.fit_points(six, 2 + 0.5 * six, n_samples=0)
    assert set(both.weights) == {"line", "roofline"} and "; Akaike weights line " in both.reason
    assert sum(both.weights.values()) == pytest.approx(1.0)


def test_a_fit_moves_with_its_context_law() -> None:
    rows = [Row(b, None, (2 + (0.5 + 0.001 * c) * b) * 1e3, c) for c in (100.0, 1000.0) for b in (1, 2, 4, 8)]
    fit = ft.fit_table(build_table(rows, semantics=Semantics("static", "step")), n_samples=0)
    assert fit.context_source == "data" and fit.context_tokens == pytest.approx(550.0)
    assert fit.context_range == (100.0, 1000.0)
    sm = fit.step_model_at(2000.0)
    assert sm.t_seq_s == pytest.approx(0.5 + 0.001 * 2000, rel=1e-6)
    tpot, _ = fit.evaluate(np.array([8.0]), context=2000.0)
    assert tpot == pytest.approx([2 + 2.5 * 8], rel=1e-6)
    assert fit.step_model_at() is fit.step_model
    curve = fit.as_step_time(2000.0)
    assert float(curve.step_time_s(8.0)) == pytest.approx(22.0, rel=1e-6)
    assert float(curve.throughput_tok_s(8.0)) == pytest.approx(8 / 22.0, rel=1e-6)
    single = ft.fit_points(np.array([1.0, 2.0, 4.0, 8.0]), 2 + 0.5 * np.array([1.0, 2.0, 4.0, 8.0]), n_samples=0)
    with pytest.raises(TokenroofError, match=r"^the table was measured at one context: moving it to 300 needs"):
        single.require_context_law(300.0)
    at_500 = ft.fit_table(parse_csv("batch,tpot_ms,context_tokens\n1,2.5,500\n2,3,500\n4,4,500\n8,6,500\n"))
    at_500.require_context_law(500.0)
    at_500.require_context_law(500.0 * (1 + 1e-12))
    with pytest.raises(TokenroofError, match=r"^the table was measured at a context of 500 tokens: moving it to 600"):
        at_500.require_context_law(600.0)


def test_a_concurrency_step_of_exactly_one_fifth_more_counts_as_a_step() -> None:
    """past_cap compares concurrency steps of at least 1.2×: 20 → 24 is one (flat throughput there is the cap),
    20 → 23 is not (too close to tell a plateau from noise)."""
    head = "# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms\n10,1000,10\n20,2000,10\n"
    seen = ft.past_cap(parse_csv(head + "24,2010,10.1\n"))
    assert seen is not None and seen.batches == (24.0,) and seen.cap == pytest.approx(20.0)
    assert ft.past_cap(parse_csv(head + "23,2010,10.1\n")) is None


# -- fits made by hand: chosen candidates, weights, samples and a curve, answers worked out on paper ---------------
def cand(
    model: StepModel, name: str = "line", small: ft.SmallBatch | None = None, law: ContextLaw | None = None
) -> ft.Candidate:
    return ft.Candidate(name, model, small, 2, np.zeros(4), law)


def made(
    *candidates: ft.Candidate,
    weights: dict[str, float] | None = None,
    samples: tuple[ft.Candidate, ...] = (),
    curve: ft.Curve | None = None,
    reference: float = 0.0,
) -> ft.Fit:
    """A fit whose first candidate is the best (weight 1 unless `weights` says otherwise), at `reference` tokens."""
    best = candidates[0]
    return ft.Fit(
        best,
        list(candidates),
        weights or {best.structure: 1.0},
        "by hand",
        None,
        curve or ft.Curve(),
        list(samples),
        0.01,
        4,
        (1.0, 8.0),
        contexts=ft.Contexts(None, reference, None),
    )


FOLDED = StepModel(0.0, 2.0, 0.0, 0.0, t_seq_s=1.5)  # T = 2 + 1.5·b at 100 tokens ...
KV_LAW = ContextLaw(100.0, 0.01)  # ... and each token more costs each sequence 0.01: at 200, T = 2 + 2.5·b


def test_curve_step_time_under_a_memory_cap_at_a_longer_context() -> None:
    kv = StepModel(0.0, 2.0, 0.0, 0.01)  # T = 2 + 0.01·ctx·b
    b = np.array([5.0, 20.0])
    # the memory holds 10 at 100 tokens, 5 at 200: both run 5 sequences, a step of 2 + 5 × 0.01 × 200 = 12
    assert np.allclose(ft.Curve(cap=10.0, cap_context_tokens=100.0).tpot_s(kv, b, 200.0), [12.0, 12.0])
    # end to end, the 20 wait their turn: 12 × 20 / 5 = 48
    assert np.allclose(ft.Curve(10.0, True, 100.0).tpot_s(kv, b, 200.0), [12.0, 48.0])


def test_the_fits_answer_below_the_support_and_as_a_weighted_geometric_mean() -> None:
    small = ft.SmallBatch(1.0, 2.0, 1.0, 0.25)  # batch 1 runs 1 + 0.25 = 1.25, the model 2 + 0.5 = 2.5
    fit = made(cand(LINE, small=small))
    assert fit.evaluate(np.array([1.0]))[0] == pytest.approx([1.25])
    assert fit.evaluate(np.array([1.0]), fit.best)[0] == pytest.approx([1.25])
    # integer batches are batches: 16 → 2 + 8 = 10 s, 1.6 tok/s
    tpot, thr = fit.evaluate(np.array([1, 16]))
    assert tpot == pytest.approx([1.25, 10.0]) and thr == pytest.approx([0.8, 1.6])
    # half the weight each on 2 + 0.5·b and a flat 16: at 4, √(4 × 16) = 8
    both = made(cand(LINE), cand(StepModel(0.0, 16.0, 0.0, 0.0), "flat"), weights={"line": 0.5, "flat": 0.5})
    tpot, thr = both.evaluate(np.array([4.0]))
    assert tpot == pytest.approx([8.0]) and thr == pytest.approx([0.5])


def test_throughput_at_another_context_runs_the_batch_the_memory_holds_there() -> None:
    memory = ft.Curve(cap=10.0, cap_context_tokens=100.0)
    moving = made(cand(FOLDED, law=KV_LAW), curve=memory, reference=100.0)
    # at 200 tokens the memory holds 10 × 100 / 200 = 5 of the 20: a step of 2 + 5 × 2.5 = 14.5 for 5 tokens
    tpot, thr = moving.evaluate(np.array([20.0]), context=200.0)
    assert tpot == pytest.approx([14.5]) and thr == pytest.approx([5 / 14.5])
    # without a law the fit stays at its context: the cap of 10 and 2 + 10 × 1.5 = 17, whatever context is asked
    still = made(cand(FOLDED), curve=memory, reference=100.0)
    tpot, thr = still.evaluate(np.array([20.0]), context=200.0)
    assert tpot == pytest.approx([17.0]) and thr == pytest.approx([10 / 17.0])


def test_the_cap_at_a_context_moves_only_with_a_law() -> None:
    memory = ft.Curve(cap=10.0, cap_context_tokens=100.0)
    moving = made(cand(FOLDED, law=KV_LAW), curve=memory, reference=100.0)
    # the memory's cap holds 10 at 100 tokens: 5 at 200, 20 at 50
    assert moving.cap_at() == 10.0 and moving.cap_at(200.0) == 5.0 and moving.cap_at(50.0) == 20.0
    assert made(cand(FOLDED), curve=memory, reference=100.0).cap_at(200.0) == 10.0


def test_samples_move_with_their_laws() -> None:
    # samples 2 + 0.5·b and 2 + 1.0·b at 100 tokens; at 200 each sequence reads 100 × 0.01 = 1 more
    half, one = StepModel(0.0, 2.0, 0.0, 0.0, t_seq_s=0.5), StepModel(0.0, 2.0, 0.0, 0.0, t_seq_s=1.0)
    samples = (cand(half, law=KV_LAW), cand(one, law=KV_LAW))
    fit = made(cand(FOLDED, law=KV_LAW), samples=samples, reference=100.0)
    assert fit.sample_models_at() == [half, one]
    assert [m.t_seq_s for m in fit.sample_models_at(200.0)] == pytest.approx([1.5, 2.0])
    # each sample's curve at batch 4: 2 + 4 × 0.5 = 4 and 2 + 4 × 1 = 6; at 200 tokens 2 + 4 × 1.5 = 8 and 10
    tpot, thr = fit.sample_curves(np.array([4.0]))
    assert tpot == pytest.approx(np.array([[4.0], [6.0]])) and thr == pytest.approx(np.array([[1.0], [4 / 6]]))
    tpot, thr = fit.sample_curves(np.array([4.0]), 200.0)
    assert tpot == pytest.approx(np.array([[8.0], [10.0]])) and thr == pytest.approx(np.array([[0.5], [0.4]]))
    # no samples: the fit's own curve, at 200 tokens 2 + 4 × 2.5 = 12
    tpot, thr = made(cand(FOLDED, law=KV_LAW), reference=100.0).sample_curves(np.array([4.0]), 200.0)
    assert tpot == pytest.approx(np.array([[12.0]])) and thr == pytest.approx(np.array([[4 / 12]]))


def test_a_fit_without_a_law_answers_within_one_context_level() -> None:
    at_512 = made(cand(LINE), reference=512.0)
    # CONTEXT_LEVEL_RATIO is 1.1: 512 × 1.1 and 512 / 1.1 are still the measured context, a step past is not
    at_512.require_context_law(512.0 * 1.1)
    at_512.require_context_law(512.0 / 1.1)
    assert float(at_512.as_step_time(512.0).step_time_s(4.0)) == pytest.approx(4.0)
    with pytest.raises(TokenroofError) as err:
        at_512.as_step_time(1024.0)
    assert err.value.as_flags() == (
        "the table was measured at a context of 512 tokens: moving it to 1024 needs the KV cost per context token, "
        "from two or more measured contexts (a context_tokens column) or from the physics (--model/--hardware)"
    )
    # no context stated: counted as one token, so only about one token is the measured context
    unknown = made(cand(LINE))
    unknown.require_context_law(1.0)
    with pytest.raises(TokenroofError, match=r"^the table was measured at one context: moving it to 2 needs"):
        unknown.require_context_law(2.0)


def test_an_excluded_point_needs_its_context() -> None:
    several = parse_csv("batch,tpot_ms,context_tokens\n1,10,100\n1,20,1000\n2,11,100\n2,21,1000\n")
    with pytest.raises(ValueError):  # two batches, one context: which curve the second lies on is not said
        ft.Excluded((1.0, 2.0), "r", contexts=(100.0,)).indices(several)


def test_local_noise_counts_each_points_rows() -> None:
    b = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    rows = ft.Evidence(np.array([1.0, 1.0, 1.0, 1.0, 1.0, 3.0]), np.zeros(6))
    # the upper half 8, 16, 32 at 1, 2, 8: b/T = 8, 8, 4, weighing 1, 1, 3 rows. The intercept stays at 0 (the
    # best line through the origin leaves all three wanting a lower one), and the relative least squares slope is
    # Σw·x / Σw·x² = (8 + 8 + 12) / (64 + 64 + 48) = 7/44: the line over-reads the first two by 14/11 and the last
    # by 7/11, over 5 rows less 2 parameters
    t = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 8.0])
    rss = 2 * math.log(14 / 11) ** 2 + 3 * math.log(7 / 11) ** 2
    assert ft.local_noise(b, t, rows) == pytest.approx(math.sqrt(rss / 3), rel=1e-9)
    # with contexts 100, 100, 400 and T = 100, 200, 3200 the KV term k·ctx·b alone carries it: b·ctx/T = 8, 8, 4
    # again, k = 7/44, the same misfit over 5 rows less 3 parameters (intercept, slope, KV)
    ctx = np.array([100.0, 400.0, 100.0, 100.0, 100.0, 400.0])
    t_ctx = np.array([1.0, 1.0, 1.0, 100.0, 200.0, 3200.0])
    assert ft.local_noise(b, t_ctx, rows, ctx) == pytest.approx(math.sqrt(rss / 2), rel=1e-9)


def test_a_queue_is_told_by_ttft_doubling_and_a_plateau_by_flat_tpot() -> None:
    e2e = "# batch_kind=concurrency tpot_kind=e2e\nbatch,throughput_tok_s,tpot_ms,ttft_ms\n8,800,10,50\n"
    # throughput flattens from 16 to 32 (1620 < 1.05 × 1600); TTFT there must more than double for a queue
    assert ft.past_cap(parse_csv(e2e + "16,1600,10,50\n32,1620,19.8,100\n")) is None  # exactly doubled: a roof
    queued = ft.past_cap(parse_csv(e2e + "16,1600,10,50\n32,1620,19.8,125\n"))  # 2.5×: a queue at 16
    assert queued is not None and queued.batches == (32.0,) and queued.cap == 16.0
    # doubling is counted from the step before, not from the first concurrency (300 > 2 × 50 but not 2 × 200)
    assert ft.past_cap(parse_csv(e2e + "16,1600,10,200\n32,1620,19.8,300\n")) is None
    tpot = "# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms\n8,800,10\n16,1600,10\n"
    # TPOT 5% up where throughput flattens is no longer flat: a roof the running batch grew into
    assert ft.past_cap(parse_csv(tpot + "32,1620,10.5\n")) is None
    # flat is counted from the step before: 16 → 16.2 ms is flat though both are far above the first 10 ms; the
    # server holds 2000 tok/s × 16 ms = 32 sequences
    capped = ft.past_cap(parse_csv(tpot + "32,2000,16\n64,1990,16.2\n"))
    assert capped is not None and capped.batches == (64.0,) and capped.cap == 32.0 and not capped.left_out


def test_the_largest_from_here_on() -> None:
    assert list(ft._from_here(np.array([1.0, 3.0, 2.0, 0.5]))) == [3.0, 3.0, 2.0, 0.5]


def test_fit_table_draws_200_samples_from_seed_0_by_default_and_a_seed_repeats() -> None:
    table = parse_csv("batch,tpot_ms\n1,2.5\n2,3.1\n4,3.9\n8,6.1\n")
    default = ft.fit_table(table)
    assert len(default.samples) == 200
    assert default.sample_models() == ft.fit_table(table, n_samples=200, seed=0).sample_models()
    assert ft.fit_table(table, n_samples=3, seed=5).sample_models() != default.sample_models()[:3]


def test_two_points_before_a_cap_are_fitted_and_one_is_not_enough() -> None:
    # the running batch stalls past 32 while TPOT triples: 32.5 and 32.6 are preemption; 16 and 32 are left, and
    # the line through (16, 5 ms) and (32, 6 ms) is 4 ms + 1/16 ms per sequence
    two = ft.fit_table(parse_csv("batch,tpot_ms\n16,5\n32,6\n32.5,12\n32.6,20\n"), n_samples=0)
    assert two.n_fit == 2 and two.excluded is not None and two.excluded.batches == (32.5, 32.6)
    assert two.step_model.t_weights_s == pytest.approx(4e-3) and two.step_model.t_seq_s == pytest.approx(1 / 16e3)
    # stalled past 16 with one point left: no fit stands on one, so all three are fitted (the cap then at the
    # largest measured batch), the stall still named
    one = ft.fit_table(parse_csv("batch,tpot_ms\n16,5\n16.2,12\n16.3,20\n"), n_samples=0)
    assert one.n_fit == 3 and one.excluded is not None and one.excluded.batches == (16.2, 16.3)
    assert one.curve.cap == 16.3 and one.batch_range == (16.0, 16.3)


def test_a_memory_cap_scales_with_each_points_effective_context() -> None:
    # half the layers hold a window of 50 tokens: 100 and 400 tokens count as (100 + 50)/2 = 75 and (400 + 50)/2
    # = 225; the prior's memory holds 6 sequences at 200 tokens, so 8 at 225 needs a cap of 8 × 225/200 = 9 there
    rows = "".join(f"{b},{2 + (0.05 + 1e-3 * c) * b:.6g},{c}\n" for c in (100, 400) for b in (1, 2, 4, 8))
    table = parse_csv("# batch_kind=static tpot_kind=step\nbatch,tpot_ms,context_tokens\n" + rows)
    floor = StepModel(0.0, 1e-3, 0.0, 0.0)
    prior = Prior(floor, 1e-5, 1e-6, 0.0, max_batch=6, context_tokens=200.0, layer_windows=(None, 50))
    fit = ft.fit_table(table, prior, n_samples=0)
    values = fit.contexts.values
    assert fit.context_tokens == 200.0 and values is not None and np.array_equal(values, [75.0, 225.0] * 4)
    assert fit.curve == ft.Curve(9.0, False, 200.0, from_physics=True)
    assert fit.notes == [
        "the physics puts the memory cap at 6 sequences at a context of 200, below what the measured batches need "
        "there (9): the memory held them, so the cap is taken there; check --context, --dtype and --kv-dtype"
    ]
    # the cap at 400 tokens is the 8 measured there; at 800 (425 held) 9 × 200/425
    assert fit.cap_at(400.0) == pytest.approx(8.0) and fit.cap_at(800.0) == pytest.approx(1800 / 425)
    # a memory that holds exactly what was measured (9 at 200 tokens) is taken as it is, with nothing to say
    exact = ft.fit_table(table, replace(prior, max_batch=9), n_samples=0)
    assert exact.curve.cap == 9 and exact.notes == [] and exact.cap_raised_from is None and fit.cap_raised_from == 6
    # predict says whose cap it is at each context asked: what the data held, moved there
    from tokenroof.fit.predict import predict_table

    said = predict_table(table, [16], prior, n_samples=0, contexts=[200.0, 800.0]).warnings
    assert (
        # 200 tokens count as (200 + 50)/2 = 125: 9 × 200/125 = 14.4 there
        "the caps of 14.4 at 200 tokens, 4.235 at 800 tokens are what the data held, moved to each context (the "
        "physics' estimate, 6, was below it), a floor of what fits: past it the interval also holds up to 2× as many "
        "sequences running at once" in said
    )


def test_a_server_cap_seen_at_every_context_is_one_cap_that_does_not_move() -> None:
    # at 1024 tokens throughput stops at 1600 tok/s × 10 ms = 16 running, at 4096 at 600 × 20 ms = 12: one server's
    # max_num_seqs, the smaller; the points past it (32 and 64 at each context) are fitted as steps at 12
    rows = [(8, 800, 10, 1024), (16, 1600, 10, 1024), (32, 1620, 10.2, 1024), (64, 1630, 10.3, 1024)]
    rows += [(8, 400, 20, 4096), (16, 600, 20, 4096), (32, 610, 20.2, 4096), (64, 615, 20.4, 4096)]
    head = "# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms,context_tokens\n"
    fit = ft.fit_table(parse_csv(head + "".join(f"{b},{thr},{t},{c}\n" for b, thr, t, c in rows)), n_samples=0)
    tail = "TPOT stays flat; these points are fitted as steps at that batch"
    assert fit.excluded == ft.Excluded(
        (32.0, 64.0, 32.0, 64.0),
        "at context 1024: throughput stops growing past concurrency 16: the server holds its running batch near 16 "
        f"and {tail}; at context 4096: throughput stops growing past concurrency 16: the server holds its running "
        f"batch near 12 and {tail}",
        12.0,
        False,
        (1024.0, 1024.0, 4096.0, 4096.0),
    )
    assert fit.n_fit == 8 and fit.batch_range == (8.0, 12.0)
    # a server's cap, not the memory's: the same 12 at any context
    assert fit.curve == ft.Curve(12.0, False, None) and fit.context_source == "data" and fit.cap_at(8192.0) == 12.0


def test_preemption_in_one_contexts_curve_leaves_its_points_out_and_the_reference_weighs_rows() -> None:
    # at 1000 tokens the running batch stalls past 4 (4.05, 4.1) while TPOT runs from 6 to 14 ms; at 100 it grows
    rows = "".join(f"{b},{t},100\n" for b, t in ((1, 2.5), (1, 2.52), (2, 3), (4, 4), (8, 6)))
    rows += "".join(f"{b},{t},1000\n" for b, t in ((1, 3), (2, 4), (4, 6), (4.05, 9), (4.1, 14)))
    fit = ft.fit_table(parse_csv("batch,tpot_ms,context_tokens\n" + rows), n_samples=0)
    assert fit.excluded == ft.Excluded(
        (4.05, 4.1),
        "at context 1000: the running batch stops growing at ≈4 while TPOT moves (6 → 14 ms): the KV cache is full "
        "or a cap holds the batch (preemption), so these points are not decode steps at their batch",
        None,
        True,
        (1000.0, 1000.0),
    )
    # the 7 points left hold 8 rows (two at batch 1, 100 tokens): the reference context is the rows' mean,
    # (5 × 100 + 3 × 1000) / 8 = 437.5, and no cap is carried to the other context
    assert fit.n_fit == 7 and fit.context_tokens == pytest.approx(437.5) and fit.curve == ft.Curve()


def test_a_binned_table_spans_its_rows_or_the_servers_cap() -> None:
    # 1025 concurrencies from 1 to 2 (1/1024 apart) are more than MAX_POINTS: they are fitted in bins
    dense = "".join(f"{1 + i / 1024!r},{100 + 100 * i / 1024!r},10\n" for i in range(1025))
    head = "# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms\n"
    alone = ft.fit_table(parse_csv(head + dense), n_samples=0)
    assert alone.n_fit < 1025 and alone.batch_range == (1.0, 2.0)  # the rows' range, not the bins' means
    # then 8 and 16 at 10 ms, and past 16 the throughput stops (1600 × 10 ms = 16 running): fitted at 16
    capped = ft.fit_table(parse_csv(head + dense + "8,800,10\n16,1600,10\n32,1620,10.2\n64,1630,10.3\n"), n_samples=0)
    assert capped.curve.cap == 16.0 and capped.batch_range == (1.0, 16.0)
