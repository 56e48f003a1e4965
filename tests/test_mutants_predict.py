"""predict's workload, prior, rows and warnings by hand (make mutation)."""

from __future__ import annotations

import pytest

from tests.conftest import TINY_CONFIG
from tokenroof.errors import TokenroofError
from tokenroof.fit.core import Excluded, Prior
from tokenroof.fit.predict import (
    Workload,
    context_doublings,
    data_patterns,
    physics_checks,
    predict_table,
    prior_from_specs,
    split_contexts,
)
from tokenroof.io.measurements import parse_csv
from tokenroof.model import roofline as rl
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import HardwareSpec, Precision
from tokenroof.specs.model import model_from_config

TINY = model_from_config(TINY_CONFIG, "tiny", "tiny")
CHIP = HardwareSpec("chip", 1e6, 1e6, {"bf16": 1e9}, key="chip")
BF16 = Precision()
EFF = rl.Efficiencies(bandwidth=0.5, compute=0.25, overhead_s=1e-3, overlap=0.5)
LINE_TABLE = "batch,tpot_ms\n1,2.5\n2,3\n4,4\n8,6\n"  # T = 2 + 0.5·b ms


def test_workload_from_the_flags_the_column_or_the_stated_lengths() -> None:
    table = parse_csv(LINE_TABLE, "t.csv")
    assert Workload.from_table(table, context=300.0) == Workload(300.0, None, None, False)
    assert Workload.from_table(table, input_len=100, output_len=50).mean_context == 125.0
    with pytest.raises(TokenroofError, match=r"^t.csv: the physics prior needs the mean context: give --context N"):
        Workload.from_table(table, input_len=100)
    with_ctx = parse_csv("batch,tpot_ms,context_tokens\n1,2.5,100\n2,3,300\n", "c.csv")
    assert Workload.from_table(with_ctx).context_tokens == 200.0
    assert Workload.from_table(with_ctx, context=50.0).context_tokens == 50.0
    stated = parse_csv("# input_len=100 output_len=50\n" + LINE_TABLE)
    w = Workload.from_table(stated)
    assert (w.input_len, w.output_len, w.context_tokens, w.mean_context) == (100, 50, None, 125.0)
    assert Workload.from_table(stated, input_len=300).input_len == 300
    for bad, name in ((0.5, "context"), (float("inf"), "context")):
        with pytest.raises(TokenroofError, match=rf"^the {name} must be a finite number of tokens ≥ 1, got"):
            Workload.from_table(table, context=bad)
    with pytest.raises(TokenroofError, match=r"^the output length must be a finite number of tokens ≥ 1, got 0$"):
        Workload.from_table(table, input_len=10, output_len=0)
    assert Workload.from_table(table, context=1.0).context_tokens == 1.0


def test_what_the_table_counts_decides_decode_only_and_static() -> None:
    def kinds(head: str) -> tuple[bool, bool]:
        w = Workload.from_table(parse_csv(head + LINE_TABLE), context=100.0)
        return w.decode_only, w.static

    assert kinds("") == (False, False)
    assert kinds("# tpot_kind=step\n") == (True, False)
    assert kinds("# batch_kind=static tpot_kind=tpot\n") == (True, True)
    assert kinds("# batch_kind=static tpot_kind=itl\n") == (True, True)
    assert kinds("# batch_kind=static tpot_kind=e2e\n") == (False, True)
    assert Workload.from_table(parse_csv(LINE_TABLE), context=1.0, decode_only=True).decode_only


def test_workload_mean_context_and_prefill_ratio() -> None:
    assert Workload().mean_context == 0.0 and Workload(input_len=100).mean_context == 0.0
    assert Workload(context_tokens=7.0, input_len=100, output_len=50).mean_context == 7.0
    assert Workload(input_len=100, output_len=50).prefill_ratio == 2.0
    assert Workload(input_len=100, output_len=50, decode_only=True).prefill_ratio == 0.0
    assert Workload(input_len=100).prefill_ratio == 0.0 and Workload(output_len=5).prefill_ratio == 0.0


def test_prior_from_specs_by_hand() -> None:
    w = Workload(input_len=100, output_len=50)  # mean context 125, 2 prompt tokens per step per sequence
    p = prior_from_specs(TINY, CHIP, BF16, w, eff=EFF)
    peak = rl.step_model_from_specs(TINY, CHIP, BF16, 1, rl.Efficiencies(1.0, 1.0, 0.0, 1.0, EFF.allreduce_latency_s))
    central = rl.step_model_from_specs(TINY, CHIP, BF16, 1, EFF)
    assert p.weights_floor == peak and peak.t_weights_s == pytest.approx(189568 / 1e6)
    assert p.compute_floor_s == pytest.approx(189440 / 1e9 + 512 * 125 / 1e9)
    assert p.per_seq_floor_s == pytest.approx(128 * 125 / 1e6 + 128 / 1e6)
    # each prompt token: its matmuls and attention over half the prompt, at the peak
    per_token = (100 * 189440 / 1e9 + 512 / 1e9 * 100**2 / 2) / 100
    assert p.prefill_floor_s == pytest.approx(2 * per_token)
    assert p.step_compute_floor_s == pytest.approx(p.compute_floor_s + 2 * per_token)
    assert (p.fixed_floor_s, p.bandwidth_center, p.compute_center, p.overlap) == (0.0, 0.5, 0.25, 0.5)
    assert p.flops_per_token == 189440 and p.peak_flops_per_s == 1e9
    assert p.label == "tiny on chip ×1 (bf16)"
    assert p.max_batch == rl.max_batch_by_memory(TINY, CHIP, BF16, 125.0)
    central_per_token = (100 * central.t_compute_s + central.t_attn_token_s * 100**2 / 2) / 100
    slope = (
        float(central.memory_time_per_seq_s(125.0))
        + 0.5 * float(central.compute_time_per_seq_s(125.0))
        + 2 * central_per_token
    )
    assert p.slope_center_s == pytest.approx(slope) and p.sigma_log_slope is None
    assert (p.context_tokens, p.prefill_ratio, p.kv_bandwidth_ratio, p.layer_windows) == (125.0, 2.0, 1.0, ())


def test_a_static_batch_carries_its_prefill_per_sequence() -> None:
    w = Workload(input_len=100, output_len=50, static=True)
    p = prior_from_specs(TINY, CHIP, BF16, w, eff=EFF)
    per_token = (100 * 189440 / 1e9 + 512 / 1e9 * 100**2 / 2) / 100
    assert p.prefill_floor_s == 0.0 and p.prefill_ratio == 0.0
    assert p.per_seq_floor_s == pytest.approx(128 * 125 / 1e6 + 128 / 1e6 + 2 * per_token)


def test_prior_from_specs_details() -> None:
    # no prompt length: a prompt token costs a decode token's matmuls
    p = prior_from_specs(TINY, CHIP, BF16, Workload(context_tokens=100.0), eff=EFF)
    assert p.prefill_floor_s == 0.0 and p.max_batch == rl.max_batch_by_memory(TINY, CHIP, BF16, 100.0)
    kv = prior_from_specs(TINY, CHIP, BF16, Workload(100.0), eff=rl.Efficiencies(0.5, 0.25, kv_bandwidth=0.25))
    assert kv.kv_bandwidth_ratio == 0.5
    small = HardwareSpec("small", 1e5, 1e6, {"bf16": 1e9}, key="small")  # the weights alone fill it
    assert prior_from_specs(TINY, small, BF16, Workload(100.0), eff=EFF).max_batch is None
    measured = HardwareSpec("m", 1e6, 1e6, {"bf16": 1e9}, key="m", efficiencies={"bandwidth": 0.5})
    assert prior_from_specs(TINY, measured, BF16, Workload(100.0)).sigma_log_slope == 0.3
    # the default efficiencies: online serving adds an engine's per-sequence cost, a static batch does not
    from tokenroof.specs.engines import load_engine

    cpp = load_engine("llama-cpp")
    online = prior_from_specs(TINY, CHIP, BF16, Workload(input_len=100, output_len=50), engine=cpp)
    static = prior_from_specs(TINY, CHIP, BF16, Workload(input_len=100, output_len=50, static=True), engine=cpp)
    assert online.label == "tiny on chip ×1 (bf16), engine llama-cpp"
    assert online.slope_center_s - static.slope_center_s == pytest.approx(1e-5, rel=1e-6)


def test_context_doublings() -> None:
    table = parse_csv("batch,tpot_ms,context_tokens\n1,2.5,100\n2,3,100\n4,4,400\n8,6,400\n")
    fit = predict_table(table, [8], n_samples=0).fit
    assert context_doublings(fit, None) == 0.0
    assert context_doublings(fit, 200.0) == 0.0
    assert context_doublings(fit, 1600.0) == pytest.approx(2.0)
    assert context_doublings(fit, 25.0) == pytest.approx(2.0)
    line = predict_table(parse_csv(LINE_TABLE), [8], n_samples=0).fit
    assert context_doublings(line, 1000.0) == 0.0  # no measured context: nothing to count from


def test_rows_by_hand_for_an_exact_line() -> None:
    result = predict_table(parse_csv(LINE_TABLE, "t.csv"), [8, 32], n_samples=0)
    rows = result.predictions()
    assert [r["batch"] for r in rows] == [8.0, 32.0]
    assert rows[0]["tpot_ms"] == pytest.approx(6.0) and rows[0]["throughput_tok_s"] == pytest.approx(8000 / 6)
    assert rows[1]["tpot_ms"] == pytest.approx(18.0) and rows[1]["bound"] == "kv"
    assert rows[0]["extrapolated"] is False and rows[1]["extrapolated"] is True
    for r in rows:
        assert r["tpot_ms_low"] <= r["tpot_ms"] <= r["tpot_ms_high"]
        assert r["throughput_tok_s_low"] == pytest.approx(r["throughput_tok_s"] * r["tpot_ms"] / r["tpot_ms_high"])
        assert r["throughput_tok_s_high"] == pytest.approx(r["throughput_tok_s"] * r["tpot_ms"] / r["tpot_ms_low"])
        assert "context_tokens" not in r
    assert rows[1]["tpot_ms_high"] - rows[1]["tpot_ms"] > rows[0]["tpot_ms_high"] - rows[0]["tpot_ms"]
    crit, interval, reason = result.critical_batch()
    assert crit is None and interval == [None, None]
    assert reason == "no knee in the fitted data: the memory-bound line has no compute term"
    asserted = predict_table(parse_csv(LINE_TABLE), [8], critical_batch=100.0, n_samples=0)
    assert asserted.critical_batch() == (100.0, [None, None], None)
    d = result.to_dict()
    assert d["critical_batch"] is None and d["knee_batch"] is None and d["max_batch_by_memory"] is None
    assert d["throughput_asymptote_tok_s"] == pytest.approx(2000.0)
    assert d["model"]["method"] == "line" and d["model"]["points_fitted"] == 4 and d["excluded_points"] is None
    assert d["model"]["context_tokens"] is None and d["model"]["context_law"] is None
    assert d["interval_level"] == 0.9 and d["prior_conflicts"] == []


def test_rows_at_contexts_and_the_law() -> None:
    table = parse_csv(
        "batch,tpot_ms,context_tokens\n1,2.6,100\n2,3.2,100\n4,4.4,100\n8,6.8,100\n"
        "1,2.9,400\n2,3.8,400\n4,5.6,400\n8,9.2,400\n"
    )
    result = predict_table(table, [8], n_samples=0, contexts=[100, 1000])
    rows = result.predictions()
    assert [r["context_tokens"] for r in rows] == [100.0, 1000.0]
    # T = 2 + (0.5 + 0.001·ctx)·b ms
    assert rows[0]["tpot_ms"] == pytest.approx(6.8, rel=1e-3) and rows[1]["tpot_ms"] == pytest.approx(14.0, rel=1e-3)
    assert rows[0]["extrapolated"] is False and rows[1]["extrapolated"] is True
    law = result.context_law()
    assert law is not None and law["source"] == "data" and law["measured_contexts"] == [100.0, 400.0]
    assert law["kv_token_s"] == pytest.approx(1e-6, rel=1e-3) and law["reference_tokens"] == pytest.approx(250.0)
    # without --context a table of several is predicted at each of its own
    assert predict_table(table, [8], n_samples=0).contexts == [100.0, 400.0]
    with pytest.raises(TokenroofError, match=r"^--context must be a finite number of tokens ≥ 1, got 0.5$"):
        predict_table(table, [8], n_samples=0, contexts=[0.5])


def test_split_contexts() -> None:
    plain = parse_csv(LINE_TABLE, "t.csv")
    assert split_contexts(plain, None) == (None, None) and split_contexts(plain, []) == (None, None)
    assert split_contexts(plain, [300.0]) == (300.0, None)
    with pytest.raises(TokenroofError, match=r"^t.csv: the table does not say the context it was measured at"):
        split_contexts(plain, [300.0, 600.0])
    stated = parse_csv("# input_len=100 output_len=50\n" + LINE_TABLE)
    assert split_contexts(stated, [300.0]) == (None, [300.0])
    column = parse_csv("batch,tpot_ms,context_tokens\n1,2.5,100\n2,3,100\n")
    assert split_contexts(column, [300.0, 600.0]) == (None, [300.0, 600.0])


def test_data_patterns() -> None:
    falling = parse_csv("batch,throughput_tok_s\n1,100\n8,700\n9,650\n64,3000\n128,2900\n", "f.csv")
    notes = data_patterns(falling, None)
    # 8 → 9 is less than 1.2×; 64 → 128 falls by 3.3%: one note
    assert notes == [
        "throughput falls from 3000 tok/s at batch 64 to 2900 at batch 128: the step model cannot explain falling "
        "throughput (KV-cache preemption and recompute, or swapping, is the usual cause)"
    ]
    assert data_patterns(parse_csv("batch,throughput_tok_s\n1,100\n64,3000\n128,2920\n"), None) == []
    left = data_patterns(parse_csv(LINE_TABLE), Excluded((4.0, 8.0), "why"))
    assert left == ["left out of the fit, batches 4, 8: why"]
    held = data_patterns(parse_csv(LINE_TABLE), Excluded((8.0,), "why", 4.0, left_out=False))
    assert held == ["past the server's cap, batches 8: why"]
    several = parse_csv("batch,throughput_tok_s,context_tokens\n1,100,10\n64,3000,10\n128,2000,10\n1,90,500\n")
    assert data_patterns(several, None)[0].endswith(
        "at batch 128 at context 10: the step model cannot explain falling throughput (KV-cache preemption and "
        "recompute, or swapping, is the usual cause)"
    )


def test_physics_checks_at_the_boundary() -> None:
    prior = Prior(StepModel(0.0, 8e-3, 0.0, 0.0), 1e-5, 0.0, 2e-3, label="m on h")  # 10 ms at the peaks
    fast = parse_csv("batch,tpot_ms\n1,9.7\n2,12\n")
    assert physics_checks(fast, prior) == [
        "the fastest measured step (9.7 ms) is faster than streaming the weights at peak bandwidth (10 ms for m on "
        "h): check --model, --hardware, --dtype and --tp"
    ]
    assert physics_checks(parse_csv("batch,tpot_ms\n1,9.9\n2,12\n"), prior) == []
    assert physics_checks(parse_csv("batch,tpot_ms\n1,12\n2,9.7\n"), prior) != []  # the fastest, wherever it is


def test_notes_past_the_data() -> None:
    result = predict_table(parse_csv(LINE_TABLE), [16, 64], n_samples=0)
    assert result.warnings[0].startswith("no knee observed up to batch 8: beyond it the memory-bound line assumes")
    assert result.warnings[1] == (
        "predicting up to 8.0× the largest measured batch: intervals widen, and effects outside the model "
        "(preemption, scheduler limits) grow"
    )
    assert len(result.warnings) == 2
    assert predict_table(parse_csv(LINE_TABLE), [8], n_samples=0).warnings == []
    assert len(predict_table(parse_csv(LINE_TABLE), [32], n_samples=0).warnings) == 1  # 4× exactly: no widening note


def test_notes_on_a_pinned_fit_a_bad_fit_and_a_cap() -> None:
    pinned = predict_table(parse_csv(LINE_TABLE), [8], critical_batch=100.0, n_samples=0)
    assert pinned.warnings == ["the compute roof is asserted (--critical-batch / --roof-tok-s), not observed"]
    zigzag = predict_table(parse_csv("batch,tpot_ms\n1,2\n2,4\n4,3\n8,8\n"), [8], n_samples=0)
    assert any(w.startswith("the fitted model misses the measured TPOTs by") for w in zigzag.warnings)
    prior = Prior(StepModel(0.0, 1e-3, 0.0, 0.0), 1e-6, 1e-6, 0.0, max_batch=10, context_tokens=100.0, label="x")
    capped = predict_table(parse_csv(LINE_TABLE), [8, 20], prior, n_samples=0)
    assert capped.warnings[-1] == (
        "batches above 10 do not run together (weights + KV cache at the mean context in 90% of memory): there the "
        "running batch stays at the cap, throughput is flat and TPOT stays at the cap's (queued requests wait before "
        "their first token: TTFT grows)"
    )
    rows = capped.predictions()
    assert rows[1]["bound"] == "capacity" and rows[0]["bound"] != "capacity"
    assert rows[1]["throughput_tok_s"] == pytest.approx(10 / (rows[1]["tpot_ms"] / 1e3))
    assert predict_table(parse_csv(LINE_TABLE), [8, 10], prior, n_samples=0).warnings[-1].startswith("batches") is False


def test_the_asserted_roof_names_its_implied_peak_fraction() -> None:
    prior = Prior(
        StepModel(0.0, 1e-3, 0.0, 0.0), 1e-6, 1e-6, 0.0, flops_per_token=1e9, peak_flops_per_s=1e12, label="m on h"
    )
    result = predict_table(parse_csv(LINE_TABLE), [8], prior, critical_batch=8.0, n_samples=0)
    thr = float(result.fit.step_model.throughput_tok_s(8.0))
    expected = (
        f"the asserted roof at batch 8 ({thr:,.0f} tok/s) implies the matmuls run at {thr * 1e9 / 1e12:.0f} TFLOP/s, "
        f"about {thr * 1e9 / 1e12:.0%} of the dense peak of m on h: check it"
    )
    assert expected in result.warnings
