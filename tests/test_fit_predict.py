"""Fitting and prediction: recover known step models, the founding question, warnings, intervals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA, SEED_TABLE, TINY_CONFIG
from tokenroof.errors import TokenroofError
from tokenroof.fit import intervals
from tokenroof.fit.core import Candidate, ContextLaw, Curve, Excluded, Fit, Prior, SmallBatch, fit_table
from tokenroof.fit.predict import (
    MeasuredWorkload,
    PredictResult,
    context_doublings,
    data_patterns,
    fit_notes,
    physics_checks,
    predict_table,
    prior_from_specs,
    read_with_prior,
    split_contexts,
    step_interval_samples,
)
from tokenroof.io.measurements import MeasurementTable, parse_csv, read_table
from tokenroof.model import roofline as rl
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Physics
from tokenroof.specs import HardwareSpec, Precision, load_hardware, load_model
from tokenroof.specs.model import model_from_config

SEED = SEED_TABLE


def synthetic(sm: StepModel, batches: list[float], noise: float = 0.0, seed: int = 1) -> MeasurementTable:
    b = np.array(batches, dtype=float)
    tpot_ms = sm.step_time_s(b) * 1e3 * (1 + noise * np.random.default_rng(seed).normal(size=b.size))
    body = "batch,tpot_ms\n" + "".join(f"{x:g},{t:.6g}\n" for x, t in zip(b, tpot_ms, strict=True))
    return parse_csv(body, "synthetic.csv")


def test_data_only_line_recovers_memory_bound_model_exactly() -> None:
    truth = StepModel(t_fixed_s=0.0, t_weights_s=8e-3, t_compute_s=0.0, t_kv_token_s=0.0, t_seq_s=60e-6)
    fit = fit_table(synthetic(truth, [1, 4, 16, 64]))
    assert fit.method == "line"
    b = np.array([256.0, 1024.0])
    assert np.allclose(fit.step_model.step_time_s(b), truth.step_time_s(b), rtol=1e-6)


def test_data_only_chooses_kinked_roofline_when_points_cross_the_knee() -> None:
    truth = StepModel(t_fixed_s=1e-3, t_weights_s=8e-3, t_compute_s=80e-6, t_kv_token_s=0.0, t_seq_s=10e-6)
    table = synthetic(truth, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], noise=0.005)
    fit = fit_table(table)
    assert fit.method == "roofline"
    assert "Akaike weights" in fit.reason and fit.weights["roofline"] > 0.9
    knee = fit.step_model.knee_batch()
    assert knee == pytest.approx(100, rel=0.15)
    assert float(fit.step_model.step_time_s(2048)) == pytest.approx(float(truth.step_time_s(2048)), rel=0.03)


def test_prior_recovers_first_principles_model_past_the_data() -> None:
    model, h100, bf16 = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16")
    eff = rl.Efficiencies(bandwidth=0.65, compute=0.6, overhead_s=1.5e-3)
    truth = rl.step_model_from_specs(model, h100, bf16, eff=eff)
    context = 500.0
    # fold the KV reads at this context into the per-sequence term, as measured curves do
    folded = StepModel(
        truth.t_fixed_s,
        truth.t_weights_s,
        truth.t_compute_s + truth.t_attn_token_s * context,
        0.0,
        float(truth.memory_time_per_seq_s(context)),
    )
    table = synthetic(folded, [1, 8, 16, 32, 64], noise=0.01)
    prior = prior_from_specs(model, h100, bf16, MeasuredWorkload(context_tokens=context, decode_only=True))
    result = predict_table(table, [128, 256, 512], prior)
    rows = result.predictions()
    expected = folded.step_time_s(np.array([128.0, 256, 512])) * 1e3
    # the knee lies past the data (≈ 270): whether the GEMMs' compute hides under the weight stream (max) or adds
    # to it is carried as two structures until data show it, so past the knee the answer hedges between them
    for row, want in zip(rows, expected, strict=True):
        assert row["tpot_ms"] == pytest.approx(want, rel=0.10)
        assert row["tpot_ms_low"] <= want <= row["tpot_ms_high"]
    assert set(result.fit.weights) == {"prior", "prior-additive"}  # five points: no roofline of their own
    assert min(result.fit.weights.values()) > 0.2  # the points below the knee cannot tell the two apart
    # intervals widen with distance from the data
    width = [r["tpot_ms_high"] / r["tpot_ms_low"] for r in rows]
    assert width[2] > width[0]
    assert any("no measured point is past the knee" in w for w in result.warnings)


def test_prior_fit_never_beats_the_peaks() -> None:
    table = read_table([SEED])
    prior = prior_from_specs(
        load_model("llama-2-7b"),
        load_hardware("h100-sxm"),
        Precision.create("bf16"),
        MeasuredWorkload(context_tokens=300),
    )
    fit = fit_table(table, prior, n_samples=20)
    floor = prior.weights_floor.t_weights_s
    assert fit.step_model.t_weights_s >= floor * (1 - 1e-9)
    assert fit.step_model.t_compute_s >= prior.compute_floor_s * (1 - 1e-9)
    for sample in fit.sample_models():
        assert sample.t_weights_s >= floor * (1 - 1e-9)


def test_founding_question_with_asserted_critical_batch() -> None:
    result = predict_table(read_table([SEED]), [256, 512], critical_batch=128)
    data = result.to_dict()
    at256, at512 = data["predictions"]
    assert at256["batch"] == 256 and at512["batch"] == 512
    assert at256["throughput_tok_s"] == pytest.approx(7000, rel=0.12)
    assert at512["throughput_tok_s"] == pytest.approx(7000, rel=0.12)
    assert at256["tpot_ms"] == pytest.approx(37, rel=0.12)
    assert at512["tpot_ms"] == pytest.approx(73, rel=0.12)
    assert at256["bound"] == "compute"
    assert data["critical_batch"] == 128
    assert any("asserted" in w for w in data["warnings"])


def test_founding_question_data_only_says_roof_not_observed() -> None:
    data = predict_table(read_table([SEED]), [256, 512]).to_dict()
    assert data["critical_batch"] is None
    assert "no knee" in data["critical_batch_reason"]
    assert any("no knee observed up to batch 128" in w for w in data["warnings"])
    # the junior answer: throughput keeps growing; the line at least keeps TPOT growing
    assert data["predictions"][1]["tpot_ms"] > data["predictions"][0]["tpot_ms"] > 20


def test_asserted_roof_implied_peak_fraction_warning() -> None:
    prior = prior_from_specs(
        load_model("llama-2-7b"),
        load_hardware("h100-sxm"),
        Precision.create("bf16"),
        MeasuredWorkload(context_tokens=300),
    )
    result = predict_table(read_table([SEED]), [256], prior, critical_batch=128, n_samples=20)
    note = next(w for w in result.warnings if "asserted roof at batch 128" in w)
    assert "about 8% of the dense peak" in note or "about 9% of the dense peak" in note


def test_roof_tok_s_pins_the_asymptote() -> None:
    result = predict_table(read_table([SEED]), [100_000], roof_tok_s=7000, n_samples=20)
    assert result.fit.step_model.throughput_asymptote_tok_s() == pytest.approx(7000, rel=1e-6)
    assert result.predictions()[0]["throughput_tok_s"] == pytest.approx(7000, rel=0.01)


def test_fractional_batches_echoed_and_bad_batches_rejected() -> None:
    rows = predict_table(read_table([SEED]), [127.6, 3.5], n_samples=20).predictions()
    assert [r["batch"] for r in rows] == [127.6, 3.5]
    with pytest.raises(TokenroofError, match="positive"):
        predict_table(read_table([SEED]), [-1])
    with pytest.raises(TokenroofError, match="not both"):
        fit_table(read_table([SEED]), critical_batch=128, roof_tok_s=7000)


def test_patterns_the_model_cannot_explain() -> None:
    falling = parse_csv("batch,throughput_tok_s\n1,100\n8,700\n64,3000\n128,2500\n", "f.csv")
    notes = predict_table(falling, [256], n_samples=10).warnings
    assert any("throughput falls" in n and "preemption" in n for n in notes)


CAPPED = "batch,throughput_tok_s,tpot_ms\n1,100,10\n8,780,10.2\n16,1540,10.4\n32,1560,10.3\n64,1565,10.3\n"


def test_a_server_cap_behind_client_concurrency_is_fitted_at_the_cap_and_tpot_stays_flat() -> None:
    """vLLM's TPOT excludes queueing: past the server's cap it stays flat while the client's concurrency grows."""
    table = parse_csv("# batch_kind=concurrency tpot_kind=tpot\n" + CAPPED, "c.csv")
    result = predict_table(table, [32, 128, 512], n_samples=20)
    assert result.excluded is not None and result.excluded.batches == (32.0, 64.0)
    assert not result.excluded.left_out  # they measure steps at the cap
    assert any("past the server's cap, batches 32, 64" in n and "holds its running batch" in n for n in result.warnings)
    rows = result.predictions()
    assert result.fit.curve.cap == pytest.approx(16.0, rel=0.02)
    for row in rows:  # flat TPOT and throughput past the cap, not TPOT = batch / throughput
        assert row["tpot_ms"] == pytest.approx(10.4, rel=0.03)
        assert row["throughput_tok_s"] == pytest.approx(1540, rel=0.03)
        assert row["bound"] == "capacity"
    assert not any("queue" in n and "TPOT (end-to-end" in n for n in result.warnings)


def test_queueing_is_named_only_where_tpot_counts_it() -> None:
    queued = parse_csv("# batch_kind=concurrency tpot_kind=e2e\nbatch,tpot_ms\n1,14\n8,20\n16,42\n32,80\n64,154\n")
    result = predict_table(queued, [128], n_samples=10)
    assert any("requests queue" in n for n in result.warnings)
    assert result.predictions()[0]["tpot_ms"] == pytest.approx(154 * 2, rel=0.1)  # TPOT grows with the queue
    # the same flat throughput measured at a static batch is a roof the step model describes: no queueing word
    roof = parse_csv("# batch_kind=static tpot_kind=step\nbatch,tpot_ms\n1,14\n8,20\n16,42\n32,80\n64,154\n")
    notes = predict_table(roof, [128], n_samples=10).warnings
    assert not any("queue" in n for n in notes)


def test_memory_capacity_caps_the_running_batch() -> None:
    model, a100, bf16 = load_model("llama-2-7b"), load_hardware("a100-40gb"), Precision.create("bf16")
    prior = prior_from_specs(model, a100, bf16, MeasuredWorkload(input_len=2048, output_len=2048))
    assert prior.max_batch == rl.max_batch_by_memory(model, a100, bf16, 3072)
    body = "batch,tpot_ms\n1,14\n2,14.5\n4,15.5\n8,17.5\n"
    asked = [4 * prior.max_batch, 8 * prior.max_batch]
    rows = predict_table(parse_csv(body, "t.csv"), asked, prior, n_samples=10).predictions()
    assert rows[0]["bound"] == "capacity"
    assert rows[0]["throughput_tok_s"] == pytest.approx(rows[1]["throughput_tok_s"])  # flat past the cap
    assert rows[1]["tpot_ms"] == pytest.approx(rows[0]["tpot_ms"])  # vLLM's TPOT: the wait is in TTFT
    e2e = parse_csv("# tpot_kind=e2e\n" + body, "t.csv")
    rows = predict_table(e2e, asked, prior, n_samples=10).predictions()
    assert rows[1]["tpot_ms"] == pytest.approx(2 * rows[0]["tpot_ms"])  # end-to-end per token counts the queue


def test_a_noisy_three_point_table_gives_finite_intervals() -> None:
    """Bootstrap noise is drawn log-normally: a sample can never refit to a zero TPOT (it once divided by zero)."""
    from tokenroof.fit.predict import predict_table
    from tokenroof.io.measurements import parse_csv

    table = parse_csv("batch,tpot_ms\n1,2.0\n2,1.0\n4,1.5\n")
    rows = predict_table(table, [8.0, 64.0]).predictions()
    for row in rows:
        assert 0 < row["tpot_ms_low"] <= row["tpot_ms"] <= row["tpot_ms_high"] < float("inf")


# -- hardware with measured efficiencies: the slope per sequence has a prior -------------------------------
def test_measured_hardware_sets_the_slope_prior_and_datasheets_do_not(tmp_path) -> None:
    from tests.test_roofline import CALIBRATED
    from tokenroof.specs.hardware import read_hardware_toml

    path = tmp_path / "cal.toml"
    path.write_text(CALIBRATED)
    model, bf16 = load_model("llama-2-7b"), Precision.create("bf16")
    prior = prior_from_specs(
        model, read_hardware_toml(path), bf16, MeasuredWorkload(context_tokens=1000, decode_only=True)
    )
    # overlap 1 (not in the file): 512 KiB of KV per token, 1000 tokens read and one written, at 20 GB/s × 0.25
    assert prior.slope_center_s == pytest.approx(2 * 32 * 4096 * 2 * 1001 / 5e9)
    assert prior.sigma_log_slope == pytest.approx(0.3)
    datasheet = prior_from_specs(model, load_hardware("h100-sxm"), bf16, MeasuredWorkload(context_tokens=1000))
    assert datasheet.sigma_log_slope is None


def slope_prior(center_s: float) -> Prior:
    return Prior(
        StepModel(0.0, 0.010, 0.0, 0.0),
        compute_floor_s=1e-6,
        per_seq_floor_s=0.0,
        fixed_floor_s=0.0,
        slope_center_s=center_s,
        sigma_log_slope=0.3,
    )


def test_a_noisy_first_half_leans_on_the_measured_slope_and_a_clean_one_keeps_its_own() -> None:
    # truth 20 + 1·b ms; batch 8 measured 25% slow (a shared machine's busy stretch): its chord says 2.75 ms
    noisy = parse_csv("batch,tpot_ms\n1,21\n2,22\n4,24\n8,35\n")
    assert fit_table(noisy).step_model.t_seq_s == pytest.approx(0.00275)
    assert 0.0009 < fit_table(noisy, slope_prior(0.001)).step_model.t_seq_s < 0.0022
    clean = synthetic(StepModel(0.0, 0.020, 0.0, 0.0, 0.002), [1, 2, 4, 8, 16, 32])
    tpot_s, _ = fit_table(clean, slope_prior(0.001)).evaluate(np.array([64.0, 128.0]))
    assert tpot_s == pytest.approx([0.020 + 0.002 * 64, 0.020 + 0.002 * 128], rel=0.03)  # its own 2 ms slope


def test_a_prior_the_data_contradict_is_named_and_the_data_win() -> None:
    """A hardware file whose slope is 11× below a clean 1%-noise measurement must not win the blend (issue 11)."""
    clean = synthetic(StepModel(0.0, 0.020, 0.0, 0.0, 0.0022), [1, 2, 4, 8, 16, 32], noise=0.01)
    result = predict_table(clean, [64, 128], slope_prior(0.0002), n_samples=20)
    assert result.fit.step_model.t_seq_s == pytest.approx(0.0022, rel=0.1)
    assert any("prior and data disagree" in w and "slope per sequence at 2.2" in w for w in result.warnings)
    assert any("slope per sequence" in c for c in result.to_dict()["prior_conflicts"])
    for row, b in zip(result.predictions(), (64, 128), strict=True):
        assert row["tpot_ms"] == pytest.approx(20 + 2.2 * b, rel=0.1)


def test_a_knee_the_support_spans_is_found_though_the_prior_puts_it_past_the_data() -> None:
    """Truth knee 8 ms / 0.4 ms = 20; the prior's compute at 75% of peak puts it at 6 / 0.75 / (4e-5 / 0.75) = 150,
    past every point. Started from the line, no point was compute-bound and the fit kept the prior's knee: it missed
    batch 16 by 14% and batch 64 by 12% (points it was given) and read 128 and 256 21% and 26% low. The fit also starts
    compute-bound now, and keeps the better of the two."""
    truth = StepModel(1e-3, 8e-3, 4e-4, 0.0, t_seq_s=2e-5)
    prior = Prior(StepModel(0.0, 6e-3, 0.0, 0.0), 4e-5, 1e-6, 0.0)
    fit = fit_table(synthetic(truth, [4, 8, 16, 32, 64]), prior, n_samples=0)
    assert fit.best.structure == "prior"
    assert np.max(np.abs(fit.best.log_resid)) < 0.06
    far = np.array([128.0, 256.0])
    assert fit.step_model.step_time_s(far) == pytest.approx(truth.step_time_s(far), rel=0.04)


def test_a_prior_without_a_gemm_cost_fits_from_the_line_alone() -> None:
    """No compute floor (a prior that knows only the weights): there is no compute-bound start to try, and the fit
    runs (a log of zero GEMM time per sequence would raise)."""
    truth = StepModel(1e-3, 8e-3, 0.0, 0.0, t_seq_s=2e-5)
    fit = fit_table(synthetic(truth, [4, 8, 16, 32, 64]), Prior(StepModel(0.0, 6e-3, 0.0, 0.0), 0.0, 1e-6, 0.0))
    prior = next(c for c in fit.candidates if c.structure == "prior")
    assert np.max(np.abs(prior.log_resid)) < 0.02


def test_each_interval_sample_fit_starts_from_the_central_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interval's sample fits differ from the central one only by the prior centres each draws: each starts
    from the central θ (one start, no second compute-bound one), not from the line."""
    from scipy.optimize import OptimizeResult, least_squares

    from tokenroof.fit import structures

    calls: list[tuple[np.ndarray, OptimizeResult]] = []

    def recording(fun, x0, **kw):  # type: ignore[no-untyped-def]
        result = least_squares(fun, x0, **kw)
        calls.append((np.array(x0), result))
        return result

    monkeypatch.setattr(structures, "least_squares", recording)
    truth = StepModel(1e-3, 8e-3, 4e-4, 0.0, t_seq_s=2e-5)
    prior = Prior(StepModel(0.0, 6e-3, 0.0, 0.0), 4e-5, 1e-6, 0.0, bandwidth_center=0.8, compute_center=0.6)
    table = synthetic(truth, [4, 8, 16, 32, 64])
    fit_table(table, prior, n_samples=0)
    central = len(calls)  # every central solve starts twice: from the line and compute-bound (the test above)
    assert central % 2 == 0
    # θ = (fixed s, s per sequence, log memory and compute efficiencies). The compute-bound start keeps the line's
    # memory efficiency, takes the prior's floor per sequence and the rest of the line's slope as GEMM time: the prior's
    # 40 µs per sequence at peak over (slope - 1 µs) is the compute efficiency
    line, bound = calls[0][0], calls[1][0]
    assert bound[1] == pytest.approx(1e-6) and bound[2] == pytest.approx(line[2])
    assert np.exp(bound[3]) == pytest.approx(4e-5 / (line[1] - 1e-6)) and np.exp(bound[3]) < np.exp(line[3])
    calls.clear()
    fit_table(table, prior, n_samples=3)
    assert len(calls) == central + 3  # one start per sample
    for x0, _ in calls[central:]:
        assert any(np.allclose(x0, r.x, rtol=1e-9, atol=1e-12) for _, r in calls[:central])
        assert not np.allclose(x0, calls[0][0])


# -- tables at scale: repeated batches pooled, many distinct batches binned ----------------------------------------
KNEED = StepModel(t_fixed_s=1e-3, t_weights_s=8e-3, t_compute_s=80e-6, t_kv_token_s=0.0, t_seq_s=10e-6)
BATCHES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512.0])


def table_text(rows: list[tuple[float, float]]) -> str:
    return "batch,tpot_ms\n" + "".join(f"{b!r},{t!r}\n" for b, t in rows)


def test_repeated_rows_predict_as_their_pooled_points() -> None:
    """1,000 rows at each batch, scattered ±2–5% symmetrically in log (their geometric mean is the point), in
    shuffled order: the same curve as the table of the ten points, and σ counts the rows' scatter as well."""
    points = KNEED.step_time_s(BATCHES) * 1e3 * np.exp(0.01 * np.random.default_rng(3).normal(size=BATCHES.size))
    scatter = np.array([-0.05, -0.02, 0.02, 0.05])
    rows = [
        (float(b), float(t * np.exp(d)))
        for b, t in zip(BATCHES, points, strict=True)
        for d in scatter
        for _ in range(250)
    ]
    shuffled = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
    big = parse_csv(table_text(shuffled), "big.csv")
    small = parse_csv(table_text(list(zip(BATCHES.tolist(), points.tolist(), strict=True))), "small.csv")
    assert len(big) == 10 and big.count is not None and list(big.count) == [1000] * 10
    assert big.tpot_ms == pytest.approx(small.tpot_ms, rel=1e-12)
    asked = np.array([3.0, 300.0, 1024.0])
    fit_big, fit_small = fit_table(big, n_samples=20), fit_table(small, n_samples=20)
    assert fit_big.evaluate(asked)[0] == pytest.approx(fit_small.evaluate(asked)[0], rel=1e-7)
    assert fit_big.method == fit_small.method == "roofline"
    rms_scatter = float(np.sqrt(np.mean(scatter**2)))
    assert fit_small.sigma_rel > 0.01  # above the floor: the points' own misfit
    assert fit_big.sigma_rel == pytest.approx(np.hypot(rms_scatter, fit_small.sigma_rel), rel=1e-6)


def test_many_distinct_fractional_batches_fit_in_bins_as_they_would_point_by_point(monkeypatch) -> None:
    """5,000 measured running batches, all distinct: binned into fit.MAX_POINTS points, the fit matches the fit on
    every point, and the dense top of the range is not taken for a stalled (preempted) batch (single points at 3%
    noise can be: binning averages it away)."""
    import tokenroof.fit.core as fit_module

    rng = np.random.default_rng(5)
    b = rng.uniform(1, 512, 5000)
    t = KNEED.step_time_s(b) * 1e3 * np.exp(0.03 * rng.normal(size=b.size))
    table = parse_csv(table_text(list(zip(b.tolist(), t.tolist(), strict=True))), "dense.csv")
    assert len(table) == 5000
    inside = np.array([4.0, 64.0, 256.0, 450.0])
    binned, limit = fit_table(table, n_samples=10), fit_module.MAX_POINTS
    monkeypatch.setattr(fit_module, "MAX_POINTS", 10**6)
    every = fit_table(table, n_samples=10)
    assert len(binned.best.log_resid) <= limit < len(every.best.log_resid)  # the bins that hold points
    assert binned.excluded is None
    assert binned.evaluate(inside)[0] == pytest.approx(every.evaluate(inside)[0], rel=0.005)
    assert binned.sigma_rel == pytest.approx(every.sigma_rel, rel=0.01)
    assert binned.batch_range == (float(b.min()), float(b.max()))
    asked = np.array([64.0, 256.0, 1024.0])
    assert binned.evaluate(asked)[0] == pytest.approx(KNEED.step_time_s(asked), rel=0.03)


# -- by hand, one behaviour each (the tests `make mutation` runs on this module):
# predict's workload, prior, rows and warnings by hand (make mutation).
TINY = model_from_config(TINY_CONFIG, "tiny", "tiny")
CHIP = HardwareSpec("chip", 1e6, 1e6, {"bf16": 1e9}, key="chip")
BF16 = Precision()
EFF = rl.Efficiencies(bandwidth=0.5, compute=0.25, overhead_s=1e-3, overlap=0.5)
LINE_TABLE = "batch,tpot_ms\n1,2.5\n2,3\n4,4\n8,6\n"  # T = 2 + 0.5·b ms


def test_workload_from_the_flags_the_column_or_the_stated_lengths() -> None:
    table = parse_csv(LINE_TABLE, "t.csv")
    assert MeasuredWorkload.from_table(table, context=300.0) == MeasuredWorkload(300.0, None, None, False)
    assert MeasuredWorkload.from_table(table, input_len=100, output_len=50).mean_context == 125.0
    with pytest.raises(TokenroofError, match=r"^t.csv: the physics prior needs the mean context: give context N"):
        MeasuredWorkload.from_table(table, input_len=100)
    with_ctx = parse_csv("batch,tpot_ms,context_tokens\n1,2.5,100\n2,3,300\n", "c.csv")
    assert MeasuredWorkload.from_table(with_ctx).context_tokens == 200.0
    assert MeasuredWorkload.from_table(with_ctx, context=50.0).context_tokens == 50.0
    stated = parse_csv("# input_len=100 output_len=50\n" + LINE_TABLE)
    w = MeasuredWorkload.from_table(stated)
    assert (w.input_len, w.output_len, w.context_tokens, w.mean_context) == (100, 50, None, 125.0)
    assert MeasuredWorkload.from_table(stated, input_len=300).input_len == 300
    for bad, name in ((0.5, "context"), (float("inf"), "context")):
        with pytest.raises(TokenroofError, match=rf"^the {name} must be a finite number of tokens ≥ 1, got"):
            MeasuredWorkload.from_table(table, context=bad)
    with pytest.raises(TokenroofError, match=r"^the output length must be a finite number of tokens ≥ 1, got 0$"):
        MeasuredWorkload.from_table(table, input_len=10, output_len=0)
    assert MeasuredWorkload.from_table(table, context=1.0).context_tokens == 1.0


def test_what_the_table_counts_decides_decode_only_and_static() -> None:
    def kinds(head: str) -> tuple[bool, bool]:
        w = MeasuredWorkload.from_table(parse_csv(head + LINE_TABLE), context=100.0)
        return w.decode_only, w.static

    assert kinds("") == (False, False)
    assert kinds("# tpot_kind=step\n") == (True, False)
    assert kinds("# batch_kind=static tpot_kind=tpot\n") == (True, True)
    assert kinds("# batch_kind=static tpot_kind=itl\n") == (True, True)
    assert kinds("# batch_kind=static tpot_kind=e2e\n") == (False, True)
    assert MeasuredWorkload.from_table(parse_csv(LINE_TABLE), context=1.0, decode_only=True).decode_only


def test_workload_mean_context_and_prefill_ratio() -> None:
    assert MeasuredWorkload().mean_context == 0.0 and MeasuredWorkload(input_len=100).mean_context == 0.0
    assert MeasuredWorkload(context_tokens=7.0, input_len=100, output_len=50).mean_context == 7.0
    assert MeasuredWorkload(input_len=100, output_len=50).prefill_ratio == 2.0
    assert MeasuredWorkload(input_len=100, output_len=50, decode_only=True).prefill_ratio == 0.0
    assert MeasuredWorkload(input_len=100).prefill_ratio == 0.0 and MeasuredWorkload(output_len=5).prefill_ratio == 0.0


def test_prior_from_specs_by_hand() -> None:
    w = MeasuredWorkload(input_len=100, output_len=50)  # mean context 125, 2 prompt tokens per step per sequence
    p = prior_from_specs(TINY, CHIP, BF16, w, eff=EFF)
    peak = rl.step_model_from_specs(TINY, CHIP, BF16, 1, rl.Efficiencies.at_peak(EFF.allreduce_latency_s))
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
    w = MeasuredWorkload(input_len=100, output_len=50, static=True)
    p = prior_from_specs(TINY, CHIP, BF16, w, eff=EFF)
    per_token = (100 * 189440 / 1e9 + 512 / 1e9 * 100**2 / 2) / 100
    assert p.prefill_floor_s == 0.0 and p.prefill_ratio == 0.0
    assert p.per_seq_floor_s == pytest.approx(128 * 125 / 1e6 + 128 / 1e6 + 2 * per_token)


def test_prior_from_specs_details() -> None:
    # no prompt length: a prompt token costs a decode token's matmuls
    p = prior_from_specs(TINY, CHIP, BF16, MeasuredWorkload(context_tokens=100.0), eff=EFF)
    assert p.prefill_floor_s == 0.0 and p.max_batch == rl.max_batch_by_memory(TINY, CHIP, BF16, 100.0)
    kv = prior_from_specs(TINY, CHIP, BF16, MeasuredWorkload(100.0), eff=rl.Efficiencies(0.5, 0.25, kv_bandwidth=0.25))
    assert kv.kv_bandwidth_ratio == 0.5
    small = HardwareSpec("small", 1e5, 1e6, {"bf16": 1e9}, key="small")  # the weights alone fill it
    assert prior_from_specs(TINY, small, BF16, MeasuredWorkload(100.0), eff=EFF).max_batch is None
    measured = HardwareSpec("m", 1e6, 1e6, {"bf16": 1e9}, key="m", efficiencies={"bandwidth": 0.5})
    assert prior_from_specs(TINY, measured, BF16, MeasuredWorkload(100.0)).sigma_log_slope == 0.3
    # the default efficiencies: online serving adds an engine's per-sequence cost, a static batch does not
    from tokenroof.specs.engines import load_engine

    cpp = load_engine("llama-cpp")
    online = prior_from_specs(TINY, CHIP, BF16, MeasuredWorkload(input_len=100, output_len=50), engine=cpp)
    static = prior_from_specs(TINY, CHIP, BF16, MeasuredWorkload(input_len=100, output_len=50, static=True), engine=cpp)
    assert online.label == "tiny on chip ×1 (bf16), engine llama-cpp"
    # the HTTP server's 1e-5 per sequence, slowed with the rest of the unfitted profile
    assert online.slope_center_s - static.slope_center_s == pytest.approx(1e-5 * cpp.accuracy.slowdown, rel=1e-6)


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
    with pytest.raises(TokenroofError, match=r"^context must be a finite number of tokens ≥ 1, got 0.5$"):
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
    capped = predict_table(parse_csv("# tpot_kind=tpot\n" + LINE_TABLE), [8, 20], prior, n_samples=0)
    assert capped.warnings[-2:] == [
        "batches above 10 do not run together (weights + KV cache at the mean context in the engine's share of "
        "memory): there the running batch stays at the cap, throughput is flat and TPOT stays at the cap's (queued "
        "requests wait before their first token: TTFT grows)",
        "the cap of 10 is the physics' estimate (the engine's KV dtype, memory fraction and reservations move it): "
        "past it the interval also holds up to 2× as many sequences running at once",
    ]
    rows = capped.predictions()
    assert rows[1]["bound"] == "capacity" and rows[0]["bound"] != "capacity"
    assert rows[1]["throughput_tok_s"] == pytest.approx(10 / (rows[1]["tpot_ms"] / 1e3))
    assert predict_table(parse_csv(LINE_TABLE), [8, 10], prior, n_samples=0).warnings[-1].startswith("batches") is False


def test_past_the_cap_an_unstated_tpot_reading_is_held_both_ways() -> None:
    """A table that does not say whether its TPOT counts the queue: past the cap the interval holds the flat reading
    (TPOT after the first token) and the growing one (end-to-end per token), and the note says why; throughput is the
    same in both. A table that says keeps its one reading."""
    prior = Prior(StepModel(0.0, 1e-3, 0.0, 0.0), 1e-6, 1e-6, 0.0, max_batch=10, context_tokens=100.0, label="x")
    stated = predict_table(parse_csv("# tpot_kind=tpot\n" + LINE_TABLE), [8, 20], prior, n_samples=0)
    unstated = predict_table(parse_csv(LINE_TABLE), [8, 20], prior, n_samples=0)
    queued = predict_table(parse_csv("# tpot_kind=e2e\n" + LINE_TABLE), [8, 20], prior, n_samples=0)
    (s8, s20), (u8, u20), (_, q20) = stated.predictions(), unstated.predictions(), queued.predictions()
    assert u8 == s8  # below the cap the readings agree
    assert u20["tpot_ms"] == s20["tpot_ms"] and u20["tpot_ms_low"] == s20["tpot_ms_low"]
    # T = 2 + 0.5·b ms: 7 at the cap, 12 with the whole batch running (the physics' cap may be wrong), 14 in the
    # queue's reading (7 × batch / cap), the highest of the three
    assert u20["tpot_ms_high"] == pytest.approx(s20["tpot_ms_high"] * 14 / 12)
    assert q20["tpot_ms"] == pytest.approx(s20["tpot_ms"] * 2)  # what the e2e reading predicts lies inside
    assert u20["tpot_ms_low"] <= q20["tpot_ms"] <= u20["tpot_ms_high"]
    assert u20["throughput_tok_s_high"] == s20["throughput_tok_s_high"]
    assert unstated.warnings[-2].endswith(
        "; the table does not say what its TPOT counts ('# tpot_kind=tpot' or 'e2e'), so the interval holds both "
        "readings (flat, and growing with the queue)"
    )
    assert unstated.warnings[-1].startswith("the cap of 10 is the physics' estimate")
    assert "both readings" not in stated.warnings[-1] and "both readings" not in queued.warnings[-1]


def test_past_a_cap_the_physics_estimated_the_interval_holds_the_whole_batch_running() -> None:
    """A memory cap from the prior is an estimate (an engine keeping an fp8 KV cache holds twice the sequences): past
    it the band reaches the uncapped model's, upward where TPOT counts steps, downward where it counts the queue. A cap
    the data showed is kept as it is."""
    prior = Prior(StepModel(0.0, 1e-3, 0.0, 0.0), 1e-6, 1e-6, 0.0, max_batch=10, context_tokens=100.0, label="x")
    stated = predict_table(parse_csv("# tpot_kind=tpot\n" + LINE_TABLE), [8, 20], prior, n_samples=0)
    queued = predict_table(parse_csv("# tpot_kind=e2e\n" + LINE_TABLE), [8, 20], prior, n_samples=0)
    assert stated.fit.curve.from_physics and queued.fit.curve.from_physics
    cal, fit = stated.calibration, stated.fit
    (low, high), (low8, high8) = (
        (float(x[0]) for x in cal.bounds(np.ones(1), cal.scale(np.zeros(1), fit.sigma_rel, np.array([d]))))
        for d in (np.log2(20 / 8), 0.0)
    )
    (s8, s20), (q8, q20) = stated.predictions(), queued.predictions()
    # T = 2 + 0.5·b ms: the cap's step 7 ms, the whole batch's 12 ms (at 8, below the cap, the band is the fit's own)
    assert (s8["tpot_ms_low"], s8["tpot_ms_high"]) == pytest.approx((6 * low8, 6 * high8), rel=1e-9)
    assert s20["tpot_ms"] == pytest.approx(7.0) and s20["bound"] == "capacity"
    assert (s20["tpot_ms_low"], s20["tpot_ms_high"]) == pytest.approx((7 * low, 12 * high), rel=1e-9)
    # throughput: 10 sequences a 7 ms step at the cap, or all 20 a 12 ms step
    assert s20["throughput_tok_s"] == pytest.approx(10 / 7e-3)
    assert (s20["throughput_tok_s_low"], s20["throughput_tok_s_high"]) == pytest.approx(
        (10 / (7e-3 * high), 20 / (12e-3 * low)), rel=1e-9
    )
    # at 40, four times the cap, the band reaches the step at twice it (12 ms), not the whole 40 (22 ms)
    far = predict_table(parse_csv("# tpot_kind=tpot\n" + LINE_TABLE), [40], prior, n_samples=0)
    (f40,) = far.predictions()
    (far_high,) = (
        float(x[0])
        for x in [cal.bounds(np.ones(1), cal.scale(np.zeros(1), fit.sigma_rel, np.array([np.log2(40 / 8)])))[1]]
    )
    assert f40["tpot_ms"] == pytest.approx(7.0) and f40["tpot_ms_high"] == pytest.approx(12 * far_high, rel=1e-9)
    # at another context the cap moves with it and so does the band's: at 200 tokens, twice the prior's 100, the
    # memory holds 5 (the steps do not move: the prior reads no KV), so batch 20 runs 5 (4.5 ms) and the band reaches
    # 10 running (7 ms), not the reference context's 20 (12 ms); one doubling of context past the data
    moved = predict_table(parse_csv("# tpot_kind=tpot\n" + LINE_TABLE), [20], prior, n_samples=0, contexts=[200.0])
    (m20,) = moved.predictions()
    (moved_high,) = (
        float(x[0])
        for x in [cal.bounds(np.ones(1), cal.scale(np.zeros(1), fit.sigma_rel, np.array([np.log2(20 / 8) + 1])))[1]]
    )
    assert m20["tpot_ms"] == pytest.approx(4.5) and m20["tpot_ms_high"] == pytest.approx(7 * moved_high, rel=1e-9)
    # end to end per token: 7 × 20 / 10 = 14 ms at the cap, 12 with none (the queue's wait gone)
    assert q20["tpot_ms"] == pytest.approx(14.0) and q8 == s8
    assert (q20["tpot_ms_low"], q20["tpot_ms_high"]) == pytest.approx((12 * low, 14 * high), rel=1e-9)
    assert (q20["throughput_tok_s_low"], q20["throughput_tok_s_high"]) == pytest.approx(
        (10 / (7e-3 * high), 20 / (12e-3 * low)), rel=1e-9
    )
    # a cap the data showed (the server's, behind client concurrency) is not widened past
    capped_at_16 = parse_csv("# batch_kind=concurrency tpot_kind=tpot\n" + CAPPED, "c.csv")
    seen = predict_table(capped_at_16, [128], replace(prior, max_batch=64), n_samples=0)
    (row,) = seen.predictions()
    assert seen.fit.curve.cap == pytest.approx(16.0, rel=0.02) and not seen.fit.curve.from_physics
    assert row["bound"] == "capacity" and seen.to_dict()["model"]["running_batch_cap_source"] == "data"
    assert stated.to_dict()["model"]["running_batch_cap_source"] == "physics"
    assert row["tpot_ms_high"] < row["tpot_ms"] * 2  # the uncapped step at 128 would be far above


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


# -- second pass: what the last mutation run left alive -------------------------------------------------------------
CONTEXT_MESSAGE = (
    ": the physics prior needs the mean context: give --context N (the mean KV length per sequence), or --input-len "
    "and --output-len, or measurements that carry them (a context_tokens column, '# input_len=… output_len=…', "
    "vLLM/GuideLLM result files)"
)


@pytest.mark.parametrize(
    ("source", "kwargs", "message"),
    [
        ("t.csv", {}, "t.csv" + CONTEXT_MESSAGE),
        ("", {"output_len": 50.0}, "the table" + CONTEXT_MESSAGE),  # a table with no name still says which
        (
            "t.csv",
            {"input_len": 0.5, "output_len": 50.0},
            "the input length must be a finite number of tokens ≥ 1, got 0.5",
        ),
        ("t.csv", {"context": float("nan")}, "the context must be a finite number of tokens ≥ 1, got nan"),
    ],
)
def test_workload_errors_name_the_problem_and_where(source: str, kwargs: dict, message: str) -> None:
    with pytest.raises(TokenroofError) as caught:
        MeasuredWorkload.from_table(parse_csv(LINE_TABLE, source), **kwargs)
    assert caught.value.as_flags() == message  # the command line's words


LINK = HardwareSpec("Link chip", 1e6, 1e6, {"bf16": 1e9}, 1e6, key="link")  # 1 MB/s links between chips


def test_prior_from_specs_split_over_two_chips_by_hand() -> None:
    eff = rl.Efficiencies(0.5, 0.25, 1e-3, overlap=0.5, allreduce_latency_s=1e-5)
    p = prior_from_specs(
        TINY, LINK, BF16, MeasuredWorkload(context_tokens=100.0), tp=2, eff=eff, memory_utilization=0.5
    )
    # the floors are at 100% of the peaks, the links' too, but keep the all-reduce latency: 2 layers × 2 × (10 µs
    # per call + 2 µs for the second GPU in the ring)
    assert p.fixed_floor_s == pytest.approx(4.8e-5, rel=1e-12)
    # per sequence: 128 B of KV per token (the one KV head on both chips), 100 read + 1 written, and the ring
    # all-reduces: 2 layers × 2 × 2·(2−1)/2 × 64 values × 2 B = 512 B, all at 1 MB/s
    assert p.per_seq_floor_s == pytest.approx((101 * 128 + 512) / 1e6, rel=1e-12)
    assert p.flops_per_token == 189440 / 2  # each chip multiplies half the weights
    assert p.label == "tiny on link ×2 (bf16)"  # the key, not the long name
    # half the memory: 500,000 B less half of the 189,568 B of weights, over 12,800 B per sequence → 31.6
    assert p.max_batch == 31
    nameless = HardwareSpec("Link chip", 1e6, 1e6, {"bf16": 1e9}, 1e6)
    assert (
        prior_from_specs(TINY, nameless, BF16, MeasuredWorkload(100.0), tp=2, eff=eff).label
        == "tiny on Link chip ×2 (bf16)"
    )


def test_prior_from_specs_edges_by_hand() -> None:
    # a one-token prompt prefills with its matmuls and attention over half of itself: 189,440 + 512/2 FLOPs at
    # 1 GFLOP/s, a quarter of a prompt token per decode step (1 in, 4 out)
    p = prior_from_specs(TINY, CHIP, BF16, MeasuredWorkload(input_len=1.0, output_len=4.0), eff=EFF)
    assert p.prefill_floor_s == pytest.approx(0.25 * (189440 + 256) / 1e9, rel=1e-12)
    # room for exactly one sequence: 0.9 × 230,000 B − 189,568 B of weights = 17,432 B ≥ 12,800 B (100 tokens × 128)
    one = HardwareSpec("one", 230_000, 1e6, {"bf16": 1e9}, key="one")
    assert prior_from_specs(TINY, one, BF16, MeasuredWorkload(100.0), eff=EFF).max_batch == 1


def handmade(
    best: StepModel,
    samples: tuple[StepModel, ...] = (),
    method: str = "roofline",
    sigma: float = 0.01,
    curve: Curve | None = None,
    small: SmallBatch | None = None,
    laws: tuple[ContextLaw | None, ...] = (),
) -> Fit:
    """A fit with the terms and samples given (one structure, measured at batches 1 to 8): answers by hand."""
    chosen = Candidate(method, best, small, 3, np.zeros(4), laws[0] if laws else None)
    drawn = [Candidate(method, m, None, 3, np.zeros(4), laws[i + 1] if laws else None) for i, m in enumerate(samples)]
    return Fit(chosen, [chosen], {method: 1.0}, "by hand", None, curve or Curve(), drawn, sigma, 4, (1.0, 8.0))


def knee_at(batch: float) -> StepModel:
    return StepModel(0.0, float(batch), 1.0, 0.0)  # W / c: the step turns compute-bound at `batch` (units aside)


NEVER = StepModel(0.0, 1.0, 0.0, 0.0)  # no compute term: never compute-bound


def critical(best: StepModel, samples: tuple[StepModel, ...], method: str = "roofline") -> tuple:
    return PredictResult(parse_csv(LINE_TABLE), handmade(best, samples, method), np.array([8.0]), None).critical_batch()


def test_the_critical_batch_interval_by_hand() -> None:
    twenty = tuple(knee_at(k) for k in range(1, 21))
    # the 5th and 95th percentiles of 1..20: positions 0.05 × 19 = 0.95 and 18.05 → 1.95 and 19.05
    value, (low, high), reason = critical(knee_at(10), twenty)
    assert (value, reason) == (10.0, None)
    assert low == pytest.approx(1.95, rel=1e-12) and high == pytest.approx(19.05, rel=1e-12)
    # the point estimate outside the samples' band widens it to hold the estimate
    assert critical(knee_at(30), twenty)[1] == [pytest.approx(1.95, rel=1e-12), 30.0]
    assert critical(knee_at(0.5), twenty)[1] == [0.5, pytest.approx(19.05, rel=1e-12)]
    # 18 of 20 samples turn compute-bound (90%): the band holds; 1..18 → 1 + 0.85 and 17 + 0.15
    eighteen = (*twenty[:18], NEVER, NEVER)
    assert critical(knee_at(10), eighteen)[1] == [pytest.approx(1.85, rel=1e-12), pytest.approx(17.15, rel=1e-12)]
    # 17 of 20 (85%): more than 10% never do, so there is no upper end; 1..17 → 1 + 0.8
    seventeen = (*twenty[:17], NEVER, NEVER, NEVER)
    assert critical(knee_at(10), seventeen)[1] == [pytest.approx(1.8, rel=1e-12), None]
    assert critical(knee_at(10), (NEVER,) * 20)[1] == [None, None]  # no sample turns: no band at all
    assert critical(knee_at(10), ())[1] == [None, None]


def test_no_critical_batch_says_why_by_structure() -> None:
    plateau = (
        "the per-sequence memory time (KV reads and the rest) exceeds the per-sequence compute time: decode never "
        "turns compute-bound; throughput approaches a bandwidth plateau"
    )
    assert critical(NEVER, (knee_at(4),)) == (None, [None, None], plateau)
    assert critical(NEVER, (), "line")[2] == "no knee in the fitted data: the memory-bound line has no compute term"
    # issue 11's table: a roofline whose knee (W/c ≈ 85) is real but whose per-sequence time exceeds the compute
    result = predict_table(read_table([DATA / "issue11_knee.csv"]), [1024], n_samples=10)
    sm = result.fit.step_model
    assert result.fit.method == "roofline" and sm.t_seq_s > sm.t_compute_s
    assert result.critical_batch() == (None, [None, None], plateau)
    d = result.to_dict()
    assert d["critical_batch_reason"] == plateau
    assert d["knee_batch"] == pytest.approx(sm.t_weights_s / sm.t_compute_s, rel=1e-12)
    assert d["throughput_asymptote_tok_s"] == pytest.approx(1 / (sm.t_compute_s + sm.t_seq_s), rel=1e-12)


def test_a_measured_knee_gives_its_critical_batch_and_band() -> None:
    truth = StepModel(t_fixed_s=1e-3, t_weights_s=8e-3, t_compute_s=80e-6, t_kv_token_s=0.0, t_seq_s=10e-6)
    b = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    table = parse_csv("batch,tpot_ms\n" + "".join(f"{x},{float(truth.step_time_s(x)) * 1e3:.6g}\n" for x in b))
    result = predict_table(table, [64], n_samples=20)
    value, (low, high), reason = result.critical_batch()
    # b* = W / (c − s) = 8 ms / 70 µs ≈ 114.3, the fit's own terms giving it
    sm = result.fit.step_model
    assert value == pytest.approx(8e-3 / 70e-6, rel=0.02) and reason is None
    assert value == pytest.approx(sm.t_weights_s / (sm.t_compute_s - sm.t_seq_s), rel=1e-12)
    assert low is not None and high is not None and low <= value <= high and low < high
    d = result.to_dict()
    assert (d["critical_batch"], d["critical_batch_low"], d["critical_batch_high"]) == (value, low, high)


def test_to_dict_by_hand() -> None:
    best = StepModel(1e-3, 4e-3, 1e-3, 0.0)  # T = 1 + max(4, b) ms: the knee at 4
    small = SmallBatch(2.0, 4.0, 0.01, 0.001)
    fit = handmade(best, (knee_at(3), knee_at(5)), small=small, curve=Curve(cap=64.0, queues=True))
    result = PredictResult(parse_csv("# tpot_kind=step\n" + LINE_TABLE), fit, np.array([4.0]), None)
    d = result.to_dict()
    assert set(d) == {
        "predictions",
        "by_context",
        "critical_batch",
        "critical_batch_low",
        "critical_batch_high",
        "critical_batch_reason",
        "knee_batch",
        "throughput_asymptote_tok_s",
        "max_batch_by_memory",
        "interval_level",
        "interval_calibration",
        "excluded_points",
        "prior_conflicts",
        "workload",
        "serving",
        "model",
        "step_model",
        "measured",
        "warnings",
    }
    assert d["workload"] == "decode-only (TPOT of pure decode steps): no prompts in the measured steps"
    assert d["serving"] is None
    # samples at 3 and 5 around the estimate 4: percentiles 3 + 0.05·2 and 3 + 0.95·2
    assert (d["critical_batch"], d["critical_batch_reason"]) == (4.0, None)
    assert d["critical_batch_low"] == pytest.approx(3.1) and d["critical_batch_high"] == pytest.approx(4.9)
    assert d["knee_batch"] == 4.0 and d["throughput_asymptote_tok_s"] == pytest.approx(1000.0)
    assert d["max_batch_by_memory"] is None and d["excluded_points"] is None and d["by_context"] is None
    cal = intervals.stored("data")
    assert d["interval_calibration"] == {
        "kappa_per_doubling": cal.kappa_per_doubling,
        "q_low": cal.q_low,
        "q_high": cal.q_high,
        "curves": cal.curves,
    }
    assert d["model"] == {
        **best.to_dict(),
        "method": "roofline",
        "why": "by hand",
        "structure_weights": {"roofline": 1.0},
        "small_batch": {"up_to_batch": 2.0, "intercept_ms": 10.0, "slope_ms_per_seq": 1.0},
        "residual_rms_relative": 0.01,
        "points_fitted": 4,
        "running_batch_cap": 64.0,
        "running_batch_cap_source": "data",  # a handmade cap, not the physics'
        "tpot_counts_queueing": True,
        "context_tokens": None,
        "context_law": None,
        "prompts_folded": False,  # decode steps alone: no arriving prompts folded into the terms
    }
    online = PredictResult(parse_csv(LINE_TABLE), handmade(best), np.array([4.0]), None).to_dict()
    assert online["model"]["prompts_folded"] is True and online["model"]["small_batch"] is None
    assert online["step_model"]["prompts_folded"] is False  # the step model as fitted says nothing of it


CAPPED_TWO = (
    "batch,throughput_tok_s,tpot_ms,context_tokens\n1,100,10,100\n8,780,10.2,100\n16,1540,10.4,100\n32,1560,10.3,100\n"
    "64,1565,10.3,100\n1,50,20,400\n8,390,20.4,400\n16,770,20.8,400\n32,780,20.6,400\n64,782,20.6,400\n"
)


def test_to_dict_names_the_memory_cap_and_the_points_past_a_servers_cap() -> None:
    prior = Prior(StepModel(0.0, 1e-3, 0.0, 0.0), 1e-6, 1e-6, 0.0, max_batch=10, context_tokens=100.0, label="x")
    d = predict_table(parse_csv(LINE_TABLE), [8], prior, n_samples=0).to_dict()
    assert d["max_batch_by_memory"] == 10
    assert d["interval_calibration"]["curves"] == intervals.stored("prior").curves
    # a server holding 16 sequences at both contexts: the points past it are named with their contexts
    table = parse_csv("# batch_kind=concurrency tpot_kind=tpot\n" + CAPPED_TWO)
    result = predict_table(table, [8], n_samples=0)
    assert result.excluded is not None
    assert result.to_dict()["excluded_points"] == {
        "batches": [32.0, 64.0, 32.0, 64.0],
        "reason": result.excluded.reason,
        "running_batch_cap": result.excluded.cap,
        "left_out": False,
        "contexts": [100.0, 100.0, 400.0, 400.0],
    }
    assert result.excluded.cap == pytest.approx(16, rel=0.02)
    one = predict_table(parse_csv("# batch_kind=concurrency tpot_kind=tpot\n" + CAPPED), [8], n_samples=0).to_dict()
    assert one["excluded_points"]["batches"] == [32.0, 64.0] and one["excluded_points"]["contexts"] is None


FLAT = StepModel(0.0, 1e-3, 0.0, 0.0)  # T = 1 ms at every batch
SLOPED = StepModel(0.0, 1e-3, 0.0, 0.0, 1e-3)  # T = (1 + b) ms


def test_the_samples_spread_per_batch_by_hand() -> None:
    b = np.array([1.0, 3.0])
    fit = handmade(FLAT, (FLAT, SLOPED))
    tpot, sd = step_interval_samples(fit, b)
    # two samples, 1 and 1 + b ms: the log-sd of two values is half their log ratio, at each batch on its own
    assert tpot == pytest.approx([1e-3, 1e-3]) and sd == pytest.approx([np.log(2) / 2, np.log(4) / 2], rel=1e-12)
    for none in (handmade(FLAT), handmade(FLAT, (SLOPED,))):  # no spread from fewer than two samples
        tpot, sd = step_interval_samples(none, b)
        assert sd.shape == (2,) and sd.tolist() == [0.0, 0.0]


def test_the_samples_spread_at_the_context_asked() -> None:
    # both samples are 1 ms at the 100 tokens they were folded at; the second reads 10 µs per context token, so
    # at 200 tokens it costs 1 ms more per sequence: 1 + b ms against 1 ms
    laws = (ContextLaw(100.0), ContextLaw(100.0), ContextLaw(100.0, kv_token_s=1e-5))
    fit = handmade(FLAT, (FLAT, FLAT), laws=laws)
    assert step_interval_samples(fit, np.array([1.0]))[1].tolist() == [0.0]
    assert step_interval_samples(fit, np.array([1.0]), 200.0)[1] == pytest.approx([np.log(2) / 2], rel=1e-9)


LAW_TABLE = (
    "batch,tpot_ms,context_tokens\n1,2.6,100\n2,3.2,100\n4,4.4,100\n8,6.8,100\n"
    "1,2.9,400\n2,3.8,400\n4,5.6,400\n8,9.2,400\n"
)


def test_rows_at_other_contexts_by_hand() -> None:
    # T = 2 + (0.5 + 0.001·ctx)·b ms: at batch 1 the weights (2 ms) outweigh the KV at 100 tokens (0.6 ms), not at
    # 10,000 (10.5 ms)
    rows = predict_table(parse_csv(LAW_TABLE), [1], n_samples=0, contexts=[100, 10_000]).predictions()
    assert [r["bound"] for r in rows] == ["weights", "kv"]
    assert rows[1]["tpot_ms"] == pytest.approx(12.5, rel=1e-9)
    # the memory holds 10 sequences at the prior's 100 tokens, 5 at 200: past it throughput is 5 per step
    prior = Prior(FLAT, 1e-6, 1e-6, 0.0, max_batch=10, context_tokens=100.0, label="x")
    result = predict_table(parse_csv(LINE_TABLE), [20], prior, n_samples=0, contexts=[200.0])
    (row,) = result.predictions()
    assert row["bound"] == "capacity" and row["throughput_tok_s"] * row["tpot_ms"] / 1e3 == pytest.approx(5.0)
    assert result.by_context() is not None and result.by_context()[0]["running_batch_cap"] == 5.0
    # the notes name the cap at the context asked, each context's where several are
    assert result.warnings[-2].startswith("batches above 5 do not run together")
    both = predict_table(parse_csv(LINE_TABLE), [8], prior, n_samples=0, contexts=[100.0, 200.0]).warnings
    assert both[-2].startswith("batches above 10 at 100 tokens, 5 at 200 tokens do not run together")
    assert both[-1].startswith("the caps of 10 at 100 tokens, 5 at 200 tokens are the physics' estimate")
    law = result.context_law()
    assert law is not None and law["source"] == "physics" and law["reference_tokens"] == 100.0
    assert law["measured_contexts"] is None  # one measured context: nothing measured to list
    # a prior that states no context has no law to move the cap by: it holds 10 at any context asked
    unstated = Prior(FLAT, 1e-6, 1e-6, 0.0, max_batch=10, label="x")
    (row,) = predict_table(parse_csv(LINE_TABLE), [20], unstated, n_samples=0, contexts=[1.0]).predictions()
    assert row["bound"] == "capacity" and row["throughput_tok_s"] * row["tpot_ms"] / 1e3 == pytest.approx(10.0)


def test_context_doublings_from_a_one_token_context() -> None:
    table = parse_csv("batch,tpot_ms,context_tokens\n1,2.5,1\n2,3,1\n4,4,4\n8,6,4\n")
    fit = predict_table(table, [8], n_samples=0).fit
    assert context_doublings(fit, 16.0) == pytest.approx(2.0)  # 4 → 16 tokens: two doublings past the data


def test_data_patterns_at_their_thresholds() -> None:
    def notes(body: str) -> list[str]:
        return data_patterns(parse_csv("batch,throughput_tok_s\n" + body), None)

    # 10 → 12 is 1.2× the batch exactly, and the throughput falls 10%: named
    assert notes("1,100\n10,1000\n12,900\n") == [
        "throughput falls from 1000 tok/s at batch 10 to 900 at batch 12: the step model cannot explain falling "
        "throughput (KV-cache preemption and recompute, or swapping, is the usual cause)"
    ]
    assert notes("1,100\n10,1000\n20,970\n") == []  # 3% exactly is within a benchmark's noise
    # points past a cap in a table of several contexts are named with theirs
    excluded = Excluded((32.0, 64.0), "why", 16.0, left_out=False, contexts=(100.0, 400.0))
    assert data_patterns(parse_csv(LINE_TABLE), excluded) == [
        "past the server's cap, batches 32 (context 100), 64 (context 400): why"
    ]


def test_physics_checks_threshold_and_rounding() -> None:
    prior = Prior(StepModel(0.0, 0.05, 0.0, 0.0), 1e-5, 0.0, 0.0, label="m on h")  # 50 ms at the peaks
    assert physics_checks(parse_csv("batch,tpot_ms\n1,49\n2,60\n"), prior) == []  # 98% of it exactly: tolerated
    assert physics_checks(parse_csv("batch,tpot_ms\n1,48.9\n2,60\n"), prior) != []
    # 8 + 1.99 ms printed to three figures
    tight = Prior(StepModel(0.0, 8e-3, 0.0, 0.0), 1e-5, 0.0, 1.99e-3, label="m on h")
    assert physics_checks(parse_csv("batch,tpot_ms\n1,9.7\n2,12\n"), tight) == [
        "the fastest measured step (9.7 ms) is faster than streaming the weights at peak bandwidth (9.99 ms for m on "
        "h): check --model, --hardware, --dtype and --tp"
    ]


def notes_of(
    fit: Fit, max_asked: float, prior: Prior | None = None, excluded: Excluded | None = None, table: str = LINE_TABLE
) -> list[str]:
    """fit_notes for a fit measured at batches 1 to 8 (its table states what TPOT counts), asked up to `max_asked`."""
    stated = table if "tpot_kind" in table else "# tpot_kind=tpot\n" + table
    return fit_notes(PredictResult(parse_csv(stated), fit, np.array([max_asked]), prior, excluded=excluded), max_asked)


def test_the_prior_knee_note_only_past_the_data() -> None:
    prior = Prior(FLAT, 1e-6, 1e-6, 0.0, label="m on h")  # 1 ms of weights at the peak: the table's 2.5 ms is slower
    assert notes_of(handmade(knee_at(16), method="prior"), 9, prior) == [
        "no measured point is past the knee (batch ≈ 16): the compute roof comes from the hardware prior (m on h), "
        "not from the data"
    ]
    assert notes_of(handmade(knee_at(8), method="prior"), 16, prior) == []  # the knee at the largest measured batch
    assert notes_of(handmade(knee_at(16), method="prior"), 8, prior) == []  # asked no further than measured
    assert notes_of(handmade(knee_at(16)), 9, prior) == []  # a roofline saw its knee in the data
    # an asserted roof past the data is named as asserted, not as the prior's
    pinned = predict_table(parse_csv(LINE_TABLE), [16], critical_batch=100.0, n_samples=0)
    assert pinned.fit.step_model.knee_batch() == pytest.approx(100.0)
    assert pinned.warnings == ["the compute roof is asserted (--critical-batch / --roof-tok-s), not observed"]


def test_the_misfit_note_above_five_percent() -> None:
    assert notes_of(handmade(FLAT, sigma=0.05), 8) == []
    assert notes_of(handmade(FLAT, sigma=0.12), 8) == [
        "the fitted model misses the measured TPOTs by 12% rms: the curve has a shape the step model does not explain"
    ]


def test_the_cap_note_says_whose_cap_and_what_tpot_counts() -> None:
    server = Excluded((32.0,), "why", 16.0, left_out=False)
    assert notes_of(handmade(FLAT, curve=Curve(cap=16.0)), 32, excluded=server) == [
        "batches above 16 do not run together (the server's cap seen in the data): there the running batch stays at "
        "the cap, throughput is flat and TPOT stays at the cap's (queued requests wait before their first token: "
        "TTFT grows)"
    ]
    assert notes_of(handmade(FLAT, curve=Curve(cap=16.0, queues=True)), 32) == [
        "batches above 16 do not run together (weights + KV cache at the mean context in the engine's share of "
        "memory): there the running batch stays at the cap, throughput is flat and TPOT (end-to-end per token) grows "
        "with the queue"
    ]
    assert notes_of(handmade(FLAT, curve=Curve(cap=16.0, from_physics=True)), 32)[1] == (
        "the cap of 16 is the physics' estimate (the engine's KV dtype, memory fraction and reservations move it): "
        "past it the interval also holds up to 2× as many sequences running at once"
    )


def test_a_cap_raised_to_what_ran_is_named_measured_and_still_widened_past() -> None:
    # client concurrency whose throughput × TPOT shows 28.6 decoding at once (2,200 tok/s × 13 ms) over a physics
    # cap of 10: the cap is what ran, said to be the data's floor, not an estimate
    table = parse_csv(
        "# batch_kind=concurrency tpot_kind=tpot\nbatch,throughput_tok_s,tpot_ms\n4,380,10\n16,1300,11.5\n32,2200,13\n"
    )
    prior = Prior(StepModel(0.0, 5e-3, 0.0, 0.0), 1e-5, 1e-6, 0.0, max_batch=10, context_tokens=500.0)
    result = predict_table(table, [32, 64], prior, n_samples=0)
    assert result.cap_source == "measured" and result.to_dict()["model"]["running_batch_cap"] == pytest.approx(28.6)
    assert result.to_dict()["max_batch_by_memory"] == 10  # the physics' own figure is still reported as it is
    assert (
        "batches above 28.6 do not run together (the most the data show running at once, where the memory's "
        "estimate was lower; more may fit): there the running batch stays at the cap, throughput is flat and TPOT "
        "stays at the cap's (queued requests wait before their first token: TTFT grows)" in result.warnings
    )
    assert (
        "the cap of 28.6 is what the data held (the physics' estimate, 10, was below it), a floor of what fits: past "
        "it the interval also holds up to 2× as many sequences running at once" in result.warnings
    )
    at_32, at_64 = result.predictions()
    # throughput at the measured concurrency is what ran there (28.6 a step), not 32; flat past it
    assert at_32["throughput_tok_s"] == pytest.approx(2200, rel=0.03) and at_64["throughput_tok_s"] == pytest.approx(
        at_32["throughput_tok_s"]
    )
    assert at_64["tpot_ms_high"] > at_64["tpot_ms"] * 1.2  # the band reaches the steps of up to 57 running
    # a running batch raised past the estimate is "measured" too (the memory held what was measured)
    running = predict_table(parse_csv(LINE_TABLE), [16], replace(prior, max_batch=6), n_samples=0)
    assert running.fit.curve.cap == 8 and running.cap_source == "measured"


def test_notes_of_a_line_fit_asked_far_past_it() -> None:
    warnings = predict_table(parse_csv(LINE_TABLE), [40], n_samples=0).warnings
    assert warnings == [
        "no knee observed up to batch 8: beyond it the memory-bound line assumes TPOT keeps growing at the measured "
        "slope; where a compute knee lies past the data TPOT will be higher (give --model/--hardware for the "
        "physics, or --critical-batch)",
        "predicting up to 5.0× the largest measured batch: intervals widen, and effects outside the model "
        "(preemption, scheduler limits) grow",
    ]


def test_predict_table_samples_and_seeds() -> None:
    table = parse_csv(LINE_TABLE)
    # the library's defaults are the CLI's (--samples 200 --seed 0): the web UI and the report answer as predict does
    default = predict_table(table, [64])
    assert len(default.fit.samples) == 200
    assert default.predictions() == predict_table(table, [64], n_samples=200, seed=0).predictions()
    ten = predict_table(table, [64], n_samples=10, seed=0)
    assert len(ten.fit.samples) == 10
    assert ten.predictions() == predict_table(table, [64], n_samples=10).predictions()  # a seed repeats its draws
    other = predict_table(table, [64], n_samples=10, seed=1).predictions()[0]
    assert other["tpot_ms_high"] != ten.predictions()[0]["tpot_ms_high"]


def test_predict_table_contexts() -> None:
    rows = predict_table(parse_csv(LAW_TABLE), [8], n_samples=0, contexts=[1.0]).predictions()
    assert rows[0]["context_tokens"] == 1.0  # one token is a context
    # a table measured at one context is answered there: no list of contexts, no per-context rows
    one = predict_table(
        parse_csv("batch,tpot_ms,context_tokens\n1,2.5,100\n2,3,100\n4,4,100\n8,6,100\n"), [8], n_samples=0
    )
    assert one.contexts is None and one.by_context() is None and "context_tokens" not in one.predictions()[0]
    prior = Prior(FLAT, 1e-6, 1e-6, 0.0, context_tokens=100.0, label="x", max_positions=256)
    warnings = predict_table(parse_csv(LINE_TABLE), [8], prior, n_samples=0, contexts=[256, 257]).warnings
    named = [w for w in warnings if "positions" in w]
    assert named == ["context 257 exceeds the model's maximum of 256 positions: no request holds that many tokens"]


def test_read_with_prior_takes_the_flags_unless_they_are_the_target(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("# input_len=100 output_len=50\n" + LINE_TABLE)
    physics = Physics("llama-2-7b", "h100-sxm")
    flags = MeasuredWorkload(input_len=1000.0, output_len=1000.0)
    table, prior = read_with_prior([path], physics, flags)
    assert len(table) == 4 and prior is not None
    assert prior.context_tokens == 1500.0  # the flags: 1000 in + half of 1000 out
    _, asked = read_with_prior([path], physics, flags, flags_are_target=True)
    assert asked is not None and asked.context_tokens == 125.0  # the table's own: 100 + 50 / 2
    assert read_with_prior([path], Physics(), flags)[1] is None  # data alone


def test_the_workload_line_says_what_the_steps_held_and_what_was_assumed(tmp_path: Path) -> None:
    """predict's `workload`: a static batch and pure decode steps hold no prompts; an online table with its lengths
    says them, and "assumed" unless its header states what its columns count; its client where the header names one;
    without lengths, that their prefill is priced by nothing; with two contexts, both."""
    from tokenroof.fit.predict import workload_line

    one = "batch,throughput_tok_s,tpot_ms\n1,100,10\n8,640,12.5\n32,1600,20\n"

    def line(header: str, body: str = one) -> str:
        path = tmp_path / "t.csv"
        path.write_text(f"{header}\n{body}")
        return workload_line(read_table([path]))

    assert line("# batch_kind=static") == "decode-only (a static batch): no prompts in the measured steps"
    assert line("# tpot_kind=step") == "decode-only (TPOT of pure decode steps): no prompts in the measured steps"
    assert line("# input_len=250 output_len=100") == (
        "online (250 in / 100 out, prompts in the steps, assumed): their prefill is folded into the per-sequence "
        "terms, not priced apart (no TTFT in the table, nor the physics)"
    )
    assert line("# input_len=250 output_len=100 batch_kind=concurrency tpot_kind=tpot client=burst").startswith(
        "online (250 in / 100 out, prompts in the steps, burst client): their prefill"
    )
    assert line("# batch_kind=concurrency tpot_kind=tpot") == (
        "online (prompts in the steps) of lengths not stated: their prefill is in the per-sequence terms as measured, "
        "priced by nothing (give the measured --input-len/--output-len, or --decode-only if TPOT excludes prefill)"
    )
    # either setting stated is the header saying what its columns count; one length alone is no lengths
    assert ", assumed" not in line("# input_len=250 output_len=100 batch_kind=concurrency")
    assert ", assumed" not in line("# input_len=250 output_len=100 tpot_kind=tpot")
    assert line("# input_len=250 batch_kind=concurrency").startswith("online (prompts in the steps) of lengths not")
    rows = "".join(f"{b},{b * 90},{10 + b / 4 + c / 1000},{c}\n" for c in (1000, 4000) for b in (1, 8, 32))
    two = line("# input_len=950 output_len=100", "batch,throughput_tok_s,tpot_ms,context_tokens\n" + rows)
    assert two.startswith("online (mean contexts 1,000 and 4,000, 100 out, prompts in the steps, assumed)"), two


def test_a_row_the_scheduler_answers_takes_its_centre_and_widens_the_band_to_hold_both_by_hand() -> None:
    """PredictResult._on_the_scheduler: the scheduler's TPOT (s → ms), TTFT and throughput at the centre; the decode
    fit's band scaled by scheduler ÷ decode, widened to keep the decode fit's own bounds; throughput's band from TPOT's
    (throughput × TPOT is the batch's tokens a second, held). 20 ms decode [18, 23], scheduler 25 ms: ×1.25, band
    [min(22.5, 18), max(28.75, 23)] = [18, 28.75], throughput 300 × 25 / 28.75 = 260.87 to 300 × 25 / 18 = 416.67;
    a scheduler at 16 ms: ×0.8, [14.4, 23]."""
    from tokenroof.fit.predict import PredictResult

    # the decode fit's throughput band: its TPOT band's reciprocals, 400 × 20 / 23 to 400 × 20 / 18
    row = {"batch": 8.0, "tpot_ms": 20.0, "tpot_ms_low": 18.0, "tpot_ms_high": 23.0, "throughput_tok_s": 400.0}
    row |= {"throughput_tok_s_low": 400 * 20 / 23, "throughput_tok_s_high": 400 * 20 / 18}
    slower = PredictResult._on_the_scheduler(None, dict(row), 0.025, 0.3, 300.0)  # type: ignore[arg-type]
    assert slower == pytest.approx(
        {
            "batch": 8.0,
            "tpot_ms": 25.0,
            "tpot_ms_low": 18.0,
            "tpot_ms_high": 28.75,
            "throughput_tok_s": 300.0,
            "throughput_tok_s_low": 300 * 25 / 28.75,
            "throughput_tok_s_high": 300 * 25 / 18,
            "ttft_ms": 300.0,
        }
    )
    # past a physics cap the decode fit's throughput band reached higher (the whole batch running: 600 where its
    # TPOT band gives 444): moved to the scheduler's centre, 600 × 300 / 400 = 450, above 300 × 25 / 18 = 416.67
    wide = PredictResult._on_the_scheduler(None, row | {"throughput_tok_s_high": 600.0}, 0.025, 0.3, 300.0)  # type: ignore[arg-type]
    assert (wide["throughput_tok_s_low"], wide["throughput_tok_s_high"]) == pytest.approx((300 * 25 / 28.75, 450.0))
    # and a band that reached lower: 200 × 300 / 400 = 150, below 260.87
    low = PredictResult._on_the_scheduler(None, row | {"throughput_tok_s_low": 200.0}, 0.025, 0.3, 300.0)  # type: ignore[arg-type]
    assert low["throughput_tok_s_low"] == pytest.approx(150.0)
    faster = PredictResult._on_the_scheduler(None, dict(row), 0.016, 0.2, 500.0)  # type: ignore[arg-type]
    assert (faster["tpot_ms_low"], faster["tpot_ms_high"], faster["ttft_ms"]) == pytest.approx((14.4, 23.0, 200.0))
    assert (faster["throughput_tok_s_low"], faster["throughput_tok_s_high"]) == pytest.approx(
        (500 * 16 / 23, 500 * 16 / 14.4)
    )
