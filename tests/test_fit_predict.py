"""Fitting and prediction: recover known step models, the founding question, warnings, intervals."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SEED_TABLE
from tokenroof.errors import TokenroofError
from tokenroof.fit.core import Prior, fit_table
from tokenroof.fit.predict import Workload, predict_table, prior_from_specs
from tokenroof.io.measurements import MeasurementTable, parse_csv, read_table
from tokenroof.model import roofline as rl
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import Precision, load_hardware, load_model

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
    prior = prior_from_specs(model, h100, bf16, Workload(context_tokens=context, decode_only=True))
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
        load_model("llama-2-7b"), load_hardware("h100-sxm"), Precision.create("bf16"), Workload(context_tokens=300)
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
        load_model("llama-2-7b"), load_hardware("h100-sxm"), Precision.create("bf16"), Workload(context_tokens=300)
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
    prior = prior_from_specs(model, a100, bf16, Workload(input_len=2048, output_len=2048))
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
    prior = prior_from_specs(model, read_hardware_toml(path), bf16, Workload(context_tokens=1000, decode_only=True))
    # overlap 1 (not in the file): 512 KiB of KV per token, 1000 tokens read and one written, at 20 GB/s × 0.25
    assert prior.slope_center_s == pytest.approx(2 * 32 * 4096 * 2 * 1001 / 5e9)
    assert prior.sigma_log_slope == pytest.approx(0.3)
    datasheet = prior_from_specs(model, load_hardware("h100-sxm"), bf16, Workload(context_tokens=1000))
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
