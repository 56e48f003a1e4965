"""The fit's pieces by hand: the small-batch line, caps, the likelihood, caps seen in the data (make mutation)."""

from __future__ import annotations

import math

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
    with pytest.raises(TokenroofError, match=r"^--critical-batch must be positive, got 0$"):
        ft.check_pins(0.0, None)
    with pytest.raises(TokenroofError, match=r"^--roof-tok-s must be positive, got -1$"):
        ft.check_pins(None, -1.0)
    with pytest.raises(TokenroofError, match=r"^give --critical-batch or --roof-tok-s, not both$"):
        ft.check_pins(10.0, 10.0)


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
