"""Batch × context (issue 14): tables keyed (batch, context), one fit whose KV term moves with context, and the
contexts a user asks about in predict, advise and roofline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SEED_TABLE, run_cli, run_json
from tests.schemas import validate
from tokenroof.errors import TokenroofError
from tokenroof.fit.core import ContextLaw, Curve, fit_table
from tokenroof.fit.predict import MeasuredWorkload, predict_table
from tokenroof.io.measurements import MeasurementTable, Row, Semantics, build_table, parse_csv, pooled
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Physics

# an 8B-like decode step: 6 ms of weights, a knee near 300, 60 ns of KV reads per context token per sequence
TRUTH = StepModel(1e-3, 6e-3, 2e-5, 6e-8, 5e-6)
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
STEP = Semantics(batch_kind="static", tpot_kind="step")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llama-3.1-8b_h100_two_contexts.csv"


def measured(contexts: list[float], noise: float = 0.02, seed: int = 3, sm: StepModel = TRUTH) -> MeasurementTable:
    """TPOT of `sm` at every batch of BATCHES and every context, with log-normal noise."""
    rng = np.random.default_rng(seed)
    rows = [
        Row(b, None, float(sm.step_time_s(b, c)) * 1e3 * float(np.exp(noise * rng.normal())), c)
        for c in contexts
        for b in BATCHES
    ]
    return build_table(rows, semantics=STEP)


def test_a_table_is_keyed_by_batch_and_context() -> None:
    """One batch at two contexts is two points (it was "batch 1 appears twice with conflicting values");
    runs whose measured mean contexts differ by a few percent are one context and pool."""
    table = parse_csv("batch,tpot_ms,context_tokens\n1,10,8192\n1,14,32768\n8,11,8192\n8,20,32768\n8,11.2,8300\n")
    assert table.several_contexts and table.level_contexts() == pytest.approx([(8192 + (8192 + 8300) / 2) / 2, 32768])
    assert list(table.batch) == [1, 1, 8, 8] and list(table.levels) == [0, 1, 0, 1]
    assert table.tpot_ms == pytest.approx([10, 14, np.sqrt(11 * 11.2), 20])
    assert list(table.counts) == [1, 1, 2, 1]
    with pytest.raises(TokenroofError, match="batch 8 at context 8300 appears twice with conflicting values"):
        parse_csv("batch,tpot_ms,context_tokens\n1,10,8192\n8,11,8192\n8,20,8300\n")


def test_pooling_many_rows_never_mixes_contexts() -> None:
    rows = [Row(float(b), None, 10 + 0.01 * b * (1 + c / 8192), c) for c in (8192, 32768) for b in range(1, 3001)]
    table = build_table(rows)
    points, tops = pooled(table, 200)
    assert len(points) <= 200 and int(points.counts.sum()) == 6000
    assert set(points.context_tokens.tolist()) == {8192.0, 32768.0}  # every bin holds one context
    assert np.all(np.diff(points.batch) >= 0) and np.all(tops >= points.batch)


def test_the_law_folds_and_moves_by_hand() -> None:
    """A whole model folded at 1000 tokens, then moved to 3000: KV per sequence +2000·k, compute +2000·a."""
    whole = StepModel(1e-3, 5e-3, 2e-5, 1e-8, 3e-6, t_attn_token_s=1e-9)
    law = ContextLaw.of(whole, 1000.0)
    folded = law.fold(whole)
    assert folded.t_seq_s == pytest.approx(3e-6 + 1000 * 1e-8) and folded.t_compute_s == pytest.approx(2e-5 + 1e-6)
    assert folded.t_kv_token_s == 0 and folded.t_attn_token_s == 0
    assert law.whole(folded).step_time_s(64, 2500) == pytest.approx(whole.step_time_s(64, 2500), rel=1e-12)
    moved = law.at(folded, 3000.0)
    assert moved.t_seq_s == pytest.approx(folded.t_seq_s + 2000 * 1e-8)
    assert moved.t_compute_s == pytest.approx(folded.t_compute_s + 2000 * 1e-9)


def test_a_memory_cap_shrinks_with_context_and_a_server_cap_does_not() -> None:
    memory = Curve(cap=100.0, cap_context_tokens=1000.0)
    assert memory.running(np.array([80.0, 120.0]), 2000.0) == pytest.approx([50, 50])
    assert memory.running(np.array([80.0, 120.0]), 500.0) == pytest.approx([80, 120])
    server = Curve(cap=100.0)
    assert server.running(np.array([80.0, 120.0]), 2000.0) == pytest.approx([80, 100])


def test_two_measured_contexts_predict_a_third() -> None:
    """Fitted at 8k and 32k (2% noise, data only): 16k and 64k within 5% at every batch, inside the intervals."""
    table = measured([8192, 32768])
    result = predict_table(table, [1, 8, 64, 128, 256], n_samples=100, contexts=[16384, 65536])
    law = result.fit.best.law
    assert law is not None and law.source == "data"
    assert law.kv_token_s == pytest.approx(TRUTH.t_kv_token_s, rel=0.15)
    for row in result.predictions():
        truth = float(TRUTH.step_time_s(row["batch"], row["context_tokens"])) * 1e3
        assert row["tpot_ms"] == pytest.approx(truth, rel=0.05)
        assert row["tpot_ms_low"] <= truth <= row["tpot_ms_high"]
    assert [r["extrapolated"] for r in result.predictions()] == [False] * 4 + [True] + [True] * 5


def test_a_batch_the_long_context_never_reached_is_extrapolated_there() -> None:
    """8k measured at batches 1-128, 32k at 1-16 (its memory held no more): batch 64 lies inside the table's batches
    but was measured only at 8k. At 8k it is in range; at 32k and at 16k (between the two, the 32k curve's side
    reaching 16 only) it lies two doublings past what was measured there, so it is extrapolated and its interval
    is wider than at 8k's same distance 0. Batch 8 is in range at every measured and between context."""
    rng = np.random.default_rng(3)
    rows = [
        Row(b, None, float(TRUTH.step_time_s(b, c)) * 1e3 * float(np.exp(0.02 * rng.normal())), c)
        for c, top in ((8192, 128), (32768, 16))
        for b in BATCHES
        if b <= top
    ]
    result = predict_table(build_table(rows, semantics=STEP), [8, 64], n_samples=100, contexts=[8192, 16384, 32768])
    assert result.fit.context_batches == ((8192, 8192, 1, 128), (32768, 32768, 1, 16))
    rows_by = {(r["batch"], r["context_tokens"]): r for r in result.predictions()}
    assert {key: r["extrapolated"] for key, r in rows_by.items()} == {
        (8, 8192): False,
        (8, 16384): False,
        (8, 32768): False,
        (64, 8192): False,
        (64, 16384): True,
        (64, 32768): True,
    }
    np.testing.assert_allclose(result.fit.batch_doublings(np.array([8.0, 64.0]), 32768), [0.0, 2.0])
    np.testing.assert_allclose(result.fit.batch_doublings(np.array([8.0, 64.0]), 4096), [0.0, 0.0])  # 8k's side

    def width(key: tuple[float, float]) -> float:
        return rows_by[key]["tpot_ms_high"] / rows_by[key]["tpot_ms_low"]

    assert width((64, 32768)) > 1.3 * width((8, 32768))  # 1.56 against 1.11 (1.13 read over the whole table)


def test_the_measured_contexts_are_described_at_every_point() -> None:
    table = measured([4096, 32768])
    result = predict_table(table, BATCHES, n_samples=20)  # no --context: each measured context
    rows = result.predictions()
    assert [r["context_tokens"] for r in rows] == pytest.approx([4096.0] * 8 + [32768.0] * 8)
    by_context = table.tpot_ms[np.argsort(table.levels, kind="stable")]
    for row, tpot in zip(rows, by_context, strict=True):
        assert row["tpot_ms"] == pytest.approx(tpot, rel=0.10)


def test_one_context_data_only_cannot_move_and_says_why() -> None:
    table = measured([8192])
    with pytest.raises(TokenroofError, match=r"two or more measured contexts .* or from the physics"):
        predict_table(table, [64], n_samples=10, contexts=[32768])
    assert fit_table(table, n_samples=0).context_source is None


def test_one_context_with_the_physics_moves_by_the_kv_reads() -> None:
    """With a prior the KV reads per context token come from the physics at the fitted bandwidth efficiency: TPOT
    at 16k minus TPOT at 8k is b·k·8192 below the knee (no attention compute under the weights there)."""
    physics = Physics("llama-3.1-8b", "h100-sxm", "bf16")
    truth = physics.step_model()
    table = measured([8192], sm=truth)
    prior = physics.prior(MeasuredWorkload.from_table(table, decode_only=True))
    fit = fit_table(table, prior, n_samples=0)
    law = fit.best.law
    assert fit.context_source == "physics" and law is not None
    best = next(c for c in fit.candidates if c.structure == "prior")
    assert best.law is not None and best.law.source == "physics"
    e_bandwidth = min(prior.weights_floor.t_weights_s / best.model.t_weights_s, 1.0)
    kv_read = prior.weights_floor.t_kv_token_s / (e_bandwidth * prior.kv_bandwidth_ratio)
    assert best.law.kv_token_s == pytest.approx(
        min(kv_read, (best.model.t_seq_s + best.model.t_compute_s) / 8192), rel=1e-9
    )
    batch = np.array([16.0, 32.0])  # below the knee: attention compute stays under the weight stream
    gap = fit.evaluate(batch, best, context=16384)[0] - fit.evaluate(batch, best, context=8192)[0]
    assert gap == pytest.approx(batch * best.law.kv_token_s * 8192, rel=1e-6)
    # and the physics is about right: within 10% of the truth at twice the context
    assert fit.evaluate(batch, context=16384)[0] == pytest.approx(truth.step_time_s(batch, 16384), rel=0.10)


def test_a_knee_in_the_data_at_two_contexts_is_found_though_the_prior_puts_it_past_them() -> None:
    """GEMMs 8× slower than the physics (knee near 40, the prior's past every batch measured): the prior fit, which
    also starts compute-bound at several contexts (its KV cost per context token carried over), finds the knee: every
    point within 8% (2% noise) and the GEMM time per sequence within 15%."""
    import dataclasses

    physics = Physics("llama-3.1-8b", "h100-sxm", "bf16")
    base = physics.step_model()
    truth = dataclasses.replace(base, t_compute_s=base.t_compute_s * 8)
    table = measured([4096, 16384], sm=truth)
    fit = fit_table(table, physics.prior(MeasuredWorkload.from_table(table, decode_only=True)), n_samples=0)
    prior = next(c for c in fit.candidates if c.structure == "prior")
    assert prior.law is not None and prior.law.source == "data"
    assert np.max(np.abs(prior.log_resid)) < 0.08
    assert prior.model.t_compute_s == pytest.approx(truth.t_compute_s, rel=0.15)


def test_sliding_window_layers_stop_growing_past_their_window() -> None:
    """Mistral-7B-v0.1 (every layer windowed at 4096): past the window TPOT does not grow with context."""
    physics = Physics("mistral-7b", "h100-sxm", "bf16")
    table = measured([2048], sm=physics.step_model())
    fit = fit_table(table, physics.prior(MeasuredWorkload.from_table(table, decode_only=True)), n_samples=0)
    at = {ctx: fit.evaluate(np.array([32.0]), context=ctx)[0][0] for ctx in (2048, 4096, 16384)}
    assert at[4096] > at[2048] and at[16384] == pytest.approx(at[4096], rel=1e-12)


def test_each_contexts_curve_is_checked_for_a_cap_on_its_own() -> None:
    """At 32k the running batch stalls at 40 while TPOT moves (preemption): those points leave, 8k's stay."""
    rows = [Row(b, None, float(TRUTH.step_time_s(b, 8192)) * 1e3, 8192) for b in BATCHES]
    rows += [Row(b, None, float(TRUTH.step_time_s(b, 32768)) * 1e3, 32768) for b in BATCHES[:6]]
    rows += [Row(40.5, None, 60.0, 32768), Row(40.8, None, 90.0, 32768)]
    table = build_table(rows)
    fit = fit_table(table, n_samples=0)
    assert fit.excluded is not None and fit.excluded.batches == (40.8,)  # 40.5 measures steps at the cap
    assert "at context 32768" in fit.excluded.reason and fit.n_fit == len(table) - 1


def test_predict_cli_lists_contexts_and_refuses_a_list_for_a_table_without_one(tmp_path) -> None:
    path = tmp_path / "two.csv"
    path.write_text(measured([8192, 32768]).to_csv())
    data = run_json(["predict", str(path), "--batch", "64,256", "--context", "8192,16384", "--samples", "20"])
    validate("predict", data)
    assert [(r["context_tokens"], r["batch"]) for r in data["predictions"]] == [
        (8192, 64),
        (8192, 256),
        (16384, 64),
        (16384, 256),
    ]
    assert data["model"]["context_law"]["source"] == "data"
    assert data["model"]["context_law"]["measured_contexts"] == pytest.approx([8192, 32768])
    shown = run_cli(["predict", str(path), "--batch", "64", "--context", "8192,16384", "--samples", "20"])
    assert shown.exit_code == 0 and "context" in shown.stdout and "16,384" in shown.stdout
    refused = run_cli(["predict", str(SEED_TABLE), "--batch", "256", "--context", "300,1000"])
    assert refused.exit_code == 2 and "does not say the context it was measured at" in refused.stderr
    assert "Traceback" not in refused.output


def test_advise_answers_at_each_context_and_asks_which_of_a_table_of_several(tmp_path) -> None:
    path = tmp_path / "two.csv"
    path.write_text(measured([8192, 32768]).to_csv())
    data = run_json(["advise", str(path), "--tpot-slo-ms", "30", "--context", "8192,16384,32768", "--samples", "20"])
    validate("advise", data)
    caps = [answer["max_num_seqs"] for answer in data["contexts"]]
    assert [answer["context_tokens"] for answer in data["contexts"]] == [8192, 16384, 32768]
    assert caps[0] > caps[1] > caps[2] >= 1
    for answer in data["contexts"]:  # each cap is the largest batch whose TPOT meets the target there
        truth = lambda b, c=answer["context_tokens"]: float(TRUTH.step_time_s(b, c)) * 1e3  # noqa: E731
        assert truth(answer["max_num_seqs"] * 0.9) <= 30 <= truth(answer["max_num_seqs"] * 1.1)
    asked = run_cli(["advise", str(path), "--tpot-slo-ms", "30"])
    assert (
        asked.exit_code == 2
        and "holds curves at several contexts (8192, 32768): give --context, one or several, to say where to advise"
        in " ".join(asked.stderr.split())
    )
    both = ["advise", str(path), "--input-len", "1000", "--output-len", "200", "--context", "8192,32768"]
    refused = run_cli(both)
    assert refused.exit_code == 2 and "--context takes one value with --input-len/--output-len" in refused.stderr


def test_advise_from_first_principles_at_several_contexts_is_bound_by_memory_at_the_long_one() -> None:
    data = run_json(
        ["advise", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tpot-slo-ms", "30", "--context", "8192,32768"]
    )
    validate("advise", data)
    short, long = data["contexts"]
    physics = Physics("llama-3.1-8b", "h100-sxm", "bf16")
    assert long["max_num_seqs"] <= physics.max_batch(32768) < physics.max_batch(8192)
    assert short["max_num_seqs"] <= physics.max_batch(8192) and short["context_tokens"] == 8192


def test_a_fit_of_several_contexts_travels_with_its_kv_law_and_says_prefill_is_missing(tmp_path) -> None:
    """The portable model runs each sequence at its own context with the fitted k; a line has no compute term,
    so prefill costs nothing in it, and the notes say so."""
    from tokenroof.serving.replay import fitted_models

    path = tmp_path / "two.csv"
    path.write_text(measured([8192, 32768]).to_csv())
    travelling, samples = fitted_models(path, n_samples=10)
    sm = travelling.step_model
    assert travelling.split and travelling.prior is None and len(samples) == 10
    assert sm.t_kv_token_s == pytest.approx(TRUTH.t_kv_token_s, rel=0.15)
    assert sm.step_time_s(64, 16384) == pytest.approx(TRUTH.step_time_s(64, 16384), rel=0.05)
    notes = travelling.notes(16384)
    assert sm.t_compute_s > 0 and not any("prefill costs nothing" in n for n in notes)  # a knee: compute fitted
    assert any("fitted there, so it runs at each sequence's own context" in n for n in notes)
    line, _ = fitted_models(EXAMPLE)  # its points show no knee: a memory-bound line, no compute term
    assert line.step_model.t_compute_s == 0 and any("prefill costs nothing" in n for n in line.notes(16384))


def test_prediction_band_at_a_context_is_predict_at_that_context() -> None:
    from tokenroof.report.plots import prediction_band

    result = predict_table(measured([8192, 32768]), [64], n_samples=20, contexts=[16384])
    dense = np.array([8.0, 64.0, 200.0])
    band = prediction_band(result, dense, 16384)
    rows = result.predictions_at(16384)
    assert band["tpot_ms"][1] == pytest.approx(rows[0]["tpot_ms"], rel=1e-9)
    assert band["tpot_ms"][2] > band["tpot_ms"][1] > band["tpot_ms"][0]


def test_the_report_draws_one_fit_per_context_and_reads_advise_at_several(tmp_path) -> None:
    from tokenroof.report.decode import DecodeView, add_predict
    from tokenroof.report.sources import from_file

    predicted = run_json(["predict", str(EXAMPLE), "--batch", "8,64", "--context", "8192,32768", "--samples", "20"])
    view = DecodeView()
    add_predict(view, predicted, "two")
    assert [c.label for c in view.curves] == ["fit: two at context 8192", "fit: two at context 32768"]
    assert view.curves[1].tpot_ms[1] == pytest.approx(predicted["predictions"][3]["tpot_ms"])
    advised = tmp_path / "advise.json"
    advised.write_text(
        run_cli(["advise", str(EXAMPLE), "--tpot-slo-ms", "60", "--context", "8192,32768", "--json"]).stdout
    )
    source = from_file(advised)
    assert source.kind == "advise" and source.data["context_tokens"] == 8192
    assert source.notes == ["advise.json: advise at 2 contexts; the report draws the first, 8192"]


def test_what_a_review_found_stays_fixed(tmp_path) -> None:
    """Each a user's report: a context inside the measured level is not 'another context'; a batch alone at several
    contexts is no curve; a cap at long contexts never makes TPOT fall with batch; advise refuses what predict does."""
    near = parse_csv("batch,tpot_ms,context_tokens\n1,10,8000\n8,11,8400\n32,14,8000\n64,18,8400\n")
    assert not near.several_contexts
    assert predict_table(near, [16], n_samples=10, contexts=[8192]).predictions()[0]["context_tokens"] == 8192
    with pytest.raises(TokenroofError, match=r"every row is at batch 8 .* at least 2 distinct batches"):
        parse_csv("batch,tpot_ms,context_tokens\n8,7.5,4096\n8,15,16384\n8,22,32768\n")
    physics = Physics("llama-3.1-8b", "h100-sxm", "bf16")
    one = measured([8192], sm=physics.step_model())
    prior = physics.prior(MeasuredWorkload.from_table(one, decode_only=True))
    rows = predict_table(one, [1, 2, 4, 6, 8, 12, 16, 32], prior, n_samples=10, contexts=[262144]).predictions()
    tpot = [r["tpot_ms"] for r in rows]
    assert tpot == sorted(tpot) and rows[-1]["bound"] == "capacity"  # 262k tokens: a handful of sequences fit
    path = tmp_path / "plain.csv"
    path.write_text("batch,tpot_ms\n1,10\n8,11\n32,14\n")
    refused = run_cli(["advise", str(path), "--context", "8192,32768"])
    assert refused.exit_code == 2 and "does not say the context it was measured at" in refused.stderr
    stated = tmp_path / "stated.csv"
    stated.write_text(measured([8192]).to_csv())
    both = run_cli(["advise", str(stated), "--input-len", "8000", "--output-len", "300", "--context", "100000"])
    assert both.exit_code == 2 and "drop --context" in both.stderr
    named = run_cli(["advise", str(EXAMPLE), "--tpot-slo-ms", "20", "--context", "4096,1000000"])
    assert named.exit_code == 2 and named.stderr.startswith("error: at context 1e+06: no batch cap meets")


def test_a_server_cap_at_every_context_is_fitted_at_the_cap() -> None:
    """Client concurrency past the server's max_num_seqs (96): throughput flat, end-to-end TPOT grows with the queue,
    at both contexts; predicted at 512 the running batch stays 96 and TPOT is the queue's."""
    rows = []
    for context in (1024, 2048):
        for c in (8, 16, 32, 64, 96, 128, 192, 256):
            running = min(c, 96)
            step_ms = float(TRUTH.step_time_s(running, context)) * 1e3
            rows.append(Row(c, running * 1000 / step_ms, step_ms * c / running, context, 50.0 * max(1, c / 96) ** 4))
    table = build_table(rows, semantics=Semantics(batch_kind="concurrency", tpot_kind="e2e"))
    fit = fit_table(table, n_samples=0)
    assert fit.excluded is not None and not fit.excluded.left_out and fit.curve.cap == pytest.approx(96, rel=0.05)
    predicted = fit.evaluate(np.array([512.0]), context=1024)[0][0] * 1e3
    truth = float(TRUTH.step_time_s(96, 1024)) * 1e3 * 512 / 96
    assert predicted == pytest.approx(truth, rel=0.1)


def test_vllm_results_at_two_lengths_are_two_contexts(tmp_path) -> None:
    import json

    for c, tpot, inp in ((1, 10, 1000), (8, 12, 1000), (32, 16, 1000), (1, 12, 8000), (8, 16, 8000), (32, 30, 8000)):
        result = {"max_concurrency": c, "mean_tpot_ms": tpot, "output_throughput": c * 1000 / tpot, "completed": 10}
        result |= {"total_input_tokens": inp * 10, "total_output_tokens": 2000, "mean_ttft_ms": 50}
        (tmp_path / f"c{c}_i{inp}.json").write_text(json.dumps(result))
    from tokenroof.io.measurements import read_table

    table = read_table(sorted(tmp_path.glob("*.json")))
    assert table.level_contexts() == pytest.approx([1100, 8100])  # input + output/2 from the token totals


def test_a_sliding_window_model_at_its_measured_context_is_not_extrapolated(tmp_path) -> None:
    """Mistral-7B-v0.1 holds 4096 tokens per layer: a table measured at 8k, asked at 8k and 16k, is not past its
    data in context (the layers hold the same window)."""
    physics = Physics("mistral-7b", "h100-sxm", "bf16")
    table = measured([8192], sm=physics.step_model())
    prior = physics.prior(MeasuredWorkload.from_table(table, decode_only=True))
    rows = predict_table(table, [32], prior, n_samples=10, contexts=[8192, 16384]).predictions()
    assert [r["extrapolated"] for r in rows] == [False, False]
    assert rows[1]["tpot_ms"] == pytest.approx(rows[0]["tpot_ms"], rel=1e-9)


def test_a_context_past_the_models_positions_is_named() -> None:
    physics = Physics("llama-3.1-8b", "h100-sxm", "bf16")
    table = measured([8192], sm=physics.step_model())
    prior = physics.prior(MeasuredWorkload.from_table(table, decode_only=True))
    warnings = predict_table(table, [8], prior, n_samples=5, contexts=[8192, 200000]).warnings
    assert "context 200000 exceeds the model's maximum of 131072 positions: no request holds that many tokens" in (
        warnings
    )
    specs = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--tpot-slo-ms", "100"]
    advised = run_json(["advise", *specs, "--context", "200000"])
    assert "context 200000 exceeds llama-3.1-8b's maximum of 131072 positions" in advised["warnings"]


def test_the_characteristic_batches_at_each_context_asked() -> None:
    """Longer contexts: attention per sequence grows (the knee comes earlier) and the memory holds fewer sequences
    (the cap shrinks in proportion)."""
    specs = ["-m", "llama-3.1-8b", "-H", "h100-sxm"]
    data = run_json(["predict", str(EXAMPLE), *specs, "--batch", "64", "--context", "8192,32768", "--samples", "20"])
    validate("predict", data)
    short, long = data["by_context"]
    assert (short["context_tokens"], long["context_tokens"]) == (8192, 32768)
    assert long["knee_batch"] < short["knee_batch"]
    assert long["running_batch_cap"] == pytest.approx(short["running_batch_cap"] / 4)
    assert long["throughput_asymptote_tok_s"] < short["throughput_asymptote_tok_s"]
    plain = run_json(["predict", str(EXAMPLE), "--batch", "64", "--samples", "20"])
    assert plain["by_context"] is not None and len(plain["by_context"]) == 2  # each measured context
