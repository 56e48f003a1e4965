"""The scheduler's step model fitted to measured files (serving/replay.py): it replays what the files measured, and
the commands that run it (advise, simulate, plan) answer what the files show."""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT, SERVE_SWEEP, run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.fit.core import fit_table
from tokenroof.io.measurements import parse_csv, read_table
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Physics
from tokenroof.serving.engine.core import Server
from tokenroof.serving.replay import REPLAY_MISFIT, Design, condensed, fit_serving, serving_fit
from tokenroof.serving.saturation import at_cap
from tokenroof.serving.simulate import ClosedLoop, Lengths, Workload, simulate

VLLM = sorted((ROOT / "examples" / "vllm").glob("vllm-c*.json"))
GUIDELLM = ROOT / "examples" / "guidellm.json"
BENCH = ROOT / "examples" / "bench"
# a server like the examples': llama-3.1-8b on h100-sxm with the vllm-v1 profile as it stands (examples/vllm and
# examples/guidellm.json were written with it on 2026-12-04, before its bias correction; make_measured_examples.py)
EXAMPLES_TRUTH = Physics("llama-3.1-8b", "h100-sxm", engine="vllm-v1").step_model()


def load_generator():  # the script that writes the examples: the tests make files of other servers with it
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "scripts" / "make_measured_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = load_generator()
# a server unlike the examples': a slower GPU's weights, more per-step overhead, a 2,048-token budget
OTHER = StepModel(
    t_fixed_s=1.2e-3,
    t_weights_s=9.0e-3,
    t_compute_s=35e-6,
    t_kv_token_s=8e-8,
    t_seq_s=15e-6,
    t_attn_token_s=1e-9,
)


# a server for the scheduler's own runs: 12 ms steps at batch 1, 50 µs a prompt token, KV reads, 0.1 ms a sequence
SERVER = StepModel(t_fixed_s=2e-3, t_weights_s=10e-3, t_compute_s=50e-6, t_kv_token_s=1e-7, t_seq_s=1e-4)
# the server the recovery tests fit back from its own points
TRUTH = StepModel(t_fixed_s=3e-3, t_weights_s=12e-3, t_compute_s=60e-6, t_kv_token_s=2e-7, t_seq_s=1e-4)


@cache
def serve_sweep() -> tuple[Any, Any]:
    """SERVE_SWEEP read and fitted (data only) once for the module: tests read the table and fit, never change them."""
    table = read_table([SERVE_SWEEP])
    return table, fit_table(table, None, n_samples=0)


def truth_served(client: str, budget: int | None) -> Any:
    """TRUTH as a server whose steps the scheduler runs: its client and prompt budget, given."""
    from tokenroof.serving.replay import ServingFit

    return ServingFit(TRUTH, client, True, budget, "given", "ttft", [], 0.0, 0.0)


def closed_loop_table(server: Any, prompt: int) -> Any:
    """Four closed-loop points (1, 2, 4, 8 streams, `prompt` tokens in, 64 out) the scheduler makes from `server` (a
    ServingFit: its model, client and budget), as a bench table stating its workload."""
    from tokenroof.serving.replay import _closed_loop_at

    rows = []
    for c in (1, 2, 4, 8):
        tpot_s, ttft_s, throughput = _closed_loop_at(server, c, (Lengths(prompt), Lengths(64)), None)
        rows.append(f"{c},{throughput:.8g},{tpot_s * 1e3:.8g},{ttft_s * 1e3:.8g}")
    header = f"# input_len={prompt} output_len=64 client={server.client} batch_kind=concurrency tpot_kind=tpot\n"
    return parse_csv(header + "batch,throughput_tok_s,tpot_ms,ttft_ms\n" + "\n".join(rows) + "\n")


def vllm_files(
    tmp_path: Path, truth: StepModel, budget: int | None, concurrencies=(1, 4, 16, 32, 64), separate: bool = False
) -> list[Path]:
    rng = np.random.default_rng(7)
    files = []
    for c in concurrencies:
        path = tmp_path / f"vllm-c{c}.json"
        path.write_text(json.dumps(GENERATOR.vllm_result(c, 1024, 256, rng, truth, budget, None, separate)))
        files.append(path)
    return files


def test_steps_s_is_step_s_term_for_term() -> None:
    rng = np.random.default_rng(0)
    models = [
        OTHER,
        StepModel(1e-3, 4e-3, 2e-5, 5e-8, 1e-5, 1e-9, 2e-4, 8, 2, overlap=0.3),
        StepModel(1e-3, 4e-3, 2e-5, 5e-8, prompts_folded=True),
    ]
    batch = rng.integers(1, 300, 50).astype(float)
    context = batch * rng.uniform(100, 5000, 50)
    prefill = rng.choice([0.0, 512.0, 2048.0], 50)
    square = prefill**2 / rng.choice([1.0, 2.0], 50)
    for sm in models:
        each = [sm.step_s(b, c, p, q) for b, c, p, q in zip(batch, context, prefill, square, strict=True)]
        assert sm.steps_s(batch, context, prefill, square) == pytest.approx(each, rel=1e-12)


@pytest.mark.parametrize(
    "workload, budget, separate",
    [
        (ClosedLoop(16, Lengths(1024), Lengths(64), 96, "staggered"), None, False),
        (ClosedLoop(16, Lengths(1024), Lengths(64), 160, "burst"), 2048, False),
        (ClosedLoop(8, Lengths(300, "uniform", 0.5), Lengths(40, "lognormal", 0.5), 80, "staggered"), 1024, False),
        (Workload(40.0, Lengths(512), Lengths(64), 400), None, False),
        (ClosedLoop(16, Lengths(550), Lengths(64), 160, "burst"), 2048, True),  # vLLM V0: prefill steps of their own
        (Workload(40.0, Lengths(512, "uniform", 0.3), Lengths(64), 400), None, True),
    ],
)
def test_a_design_is_the_runs_own_means(workload, budget, separate) -> None:
    """TPOT and TTFT as weighted sums of step times are exactly the run's means, for the model that ran it (a prefill
    step of its own priced at the prompts it runs, as the scheduler priced it, not at the running batch waiting)."""
    result = simulate(OTHER, workload, 64, 0, None, max_num_batched_tokens=budget, separate_prefill=separate)
    chosen = result.measured()
    design = Design.of(result, chosen)
    summary = result.summary()
    assert design.tpot_s(OTHER) * 1e3 == pytest.approx(summary["tpot_ms"]["mean"], rel=1e-9)
    assert design.ttft_s(OTHER) * 1e3 == pytest.approx(summary["ttft_ms"]["mean"], rel=1e-9)


def test_a_known_server_is_recovered_from_its_vllm_files(tmp_path: Path) -> None:
    """Data only: the prompt budget, the weight stream and a prompt token's compute of a server the fit has never
    seen, from five vLLM files (2% noise per metric)."""
    table = read_table(vllm_files(tmp_path, OTHER, 2048))
    fit = fit_serving(table, fit_table(table, None, n_samples=0), 1024, 256)
    assert fit is not None and fit.client == "burst" and fit.max_num_batched_tokens == 2048
    assert fit.budget_source == "fitted" and fit.prefill_source == "ttft"
    assert fit.tpot_rms < 0.03 and fit.ttft_rms is not None and fit.ttft_rms < 0.03
    assert fit.model.t_weights_s == pytest.approx(OTHER.t_weights_s, rel=0.1)
    assert fit.model.t_compute_s == pytest.approx(OTHER.t_compute_s, rel=0.1)
    assert set(fit.alternatives) == {"whole prompts", "chunked at 8192"}
    assert all(ttft > 3 * fit.ttft_rms for _, ttft in fit.alternatives.values())  # the others replay TTFT badly
    assert fit.model.batch_factors == ()  # the form replays it within a bench's noise: no departures to keep


def test_a_v0_server_is_recovered_with_its_prefill_steps_of_their_own(tmp_path: Path) -> None:
    """The same server prefilling as vLLM V0 does, in steps of their own of up to 4,096 tokens: the mixed replays miss
    its TTFT, the fit tries V0's scheduling and recovers it, its budget, its weight stream and a prompt token's
    compute."""
    table = read_table(vllm_files(tmp_path, OTHER, 4096, separate=True))
    fit = fit_serving(table, fit_table(table, None, n_samples=0), 1024, 256)
    assert fit is not None and fit.separate_prefill and fit.max_num_batched_tokens == 4096
    assert fit.tpot_rms < 0.03 and fit.ttft_rms is not None and fit.ttft_rms < 0.03
    assert fit.model.t_weights_s == pytest.approx(OTHER.t_weights_s, rel=0.1)
    assert fit.model.t_compute_s == pytest.approx(OTHER.t_compute_s, rel=0.1)
    mixed = [ttft for name, (_, ttft) in fit.alternatives.items() if "steps of their own" not in name]
    assert mixed and min(mixed) > REPLAY_MISFIT
    assert "prompts prefilled in steps of their own of up to 4096 tokens" in fit.describe()


def swept_at(form: StepModel, ratios: tuple[tuple[int, float], ...]) -> tuple[list[Any], list[Any]]:
    """Burst sweep points (128 in / 256 out) at each concurrency, their TPOT the form's own × the ratio given, and
    their designs: a measured curve that departs from the form by those ratios."""
    from tokenroof.serving.replay import Point, design_at

    points, designs = [], []
    for c, ratio in ratios:
        p = Point(c, 128, 256, 1.0, None, 1.0, client="burst", requests=4 * c)
        d = design_at(p, None, None, form)
        points.append(replace(p, tpot_s=d.tpot_s(form) * ratio))
        designs.append(d)
    return points, designs


def test_measured_departures_never_make_a_step_faster_with_more_sequences() -> None:
    """A flat (weights-bound) form whose TPOT at 4 streams measured 30% over it: a factor of 1.3 at 4 fading to 1 by
    8 would make 8 sequences faster than 4, and advise's search assumes TPOT grows with the cap. The factors shrink
    towards 1 until the step never falls; the points the form replays exactly keep theirs at 1."""
    from tokenroof.serving.replay import measured_departures

    form = StepModel(5e-3, 10e-3, 2e-6, 0.0, 1e-5)
    points, designs = swept_at(form, ((1, 1.0), (2, 1.0), (4, 1.3)))
    raw = replace(measured_departures(form, points, designs), batch_factors=())
    bent = measured_departures(form, points, designs)
    assert [round(b) for b, _ in bent.batch_factors] == [1, 2, 4]
    steps = bent.step_time_s(np.arange(1.0, 20.0), 140.0)
    assert np.all(np.diff(steps) >= 0)
    assert 1.0 <= bent.batch_factors[-1][1] < 1.05  # shrunk from the ~1.3 the points alone ask
    assert raw == form


def test_measured_departures_judge_a_falling_factor_at_the_points_own_context() -> None:
    """A form whose KV reads dominate (0.1 ms a context token: ~34 ms a sequence at the points' ~340 tokens) rises
    steeply with the batch, so a factor of 0.85 at 4 streams after 1.0 at 1 and 2 still leaves 4 sequences slower
    than 2 at that context: it is kept, not shrunk. At no context the form would be flat, and the same factor would
    make 4 faster than 2: the check is made at the decode steps' own context per sequence."""
    from tokenroof.serving.replay import measured_departures

    form = StepModel(5e-3, 10e-3, 2e-6, 1e-4, 1e-5)
    points, designs = swept_at(form, ((1, 1.0), (2, 1.0), (4, 0.85)))
    bent = measured_departures(form, points, designs)
    assert [round(b) for b, _ in bent.batch_factors] == [1, 2, 4]
    assert bent.batch_factors[-1][1] < 0.9 and all(f == pytest.approx(1.0, abs=0.03) for _, f in bent.batch_factors[:2])
    steps = bent.step_time_s(np.arange(1.0, 20.0), 340.0)
    assert np.all(np.diff(steps) >= 0)
    flat = replace(bent, t_kv_token_s=0.0)
    assert not np.all(np.diff(flat.step_time_s(np.arange(1.0, 20.0), 340.0)) >= 0)


def test_measured_departures_merge_one_batch_measured_twice_and_keep_within_their_bounds() -> None:
    """Two sweep points at one batch give one knot (within KNOT_MERGE of it), not a batch held twice; a point the
    form makes 3.3x too slow (TPOT measured 0.3x the form's) gets the bound's factor, 0.5, not 0.3."""
    from tokenroof.serving.replay import FACTOR_BOUNDS, measured_departures

    form = StepModel(5e-3, 10e-3, 2e-6, 0.0, 1e-3)
    points, designs = swept_at(form, ((1, 0.3), (2, 1.0), (2, 1.0), (4, 1.0)))
    bent = measured_departures(form, points, designs)
    assert [round(b) for b, _ in bent.batch_factors] == [1, 2, 4]
    assert bent.batch_factors[0][1] == pytest.approx(FACTOR_BOUNDS[0])
    assert all(f == pytest.approx(1.0, abs=0.02) for _, f in bent.batch_factors[1:])


def test_the_knot_basis_is_the_factor_the_step_model_takes() -> None:
    """The fit's linear form of batch_factors (Φ @ f + c) is StepModel's own interpolation, for any factors."""
    from tokenroof.model.stepmodel import factors_at
    from tokenroof.serving.replay import knot_basis

    rng = np.random.default_rng(3)
    batches = np.concatenate([[0.0, 0.5, 1.0, 1.2, 1.98, 2.5, 3.0, 16.0, 20.0, 32.0, 100.0], rng.uniform(1, 40, 50)])
    # five knots from one sequence; two from above one (batches below the first knot, one span between)
    for knots in (np.array([1.0, 1.98, 3.95, 7.9, 16.0]), np.array([1.5, 3.0])):
        for _ in range(5):
            f = rng.uniform(0.5, 2.0, knots.size)
            phi, const = knot_basis(knots, batches)
            expected = factors_at(tuple(zip(knots.tolist(), f.tolist(), strict=True)), np.maximum(batches, 1.0))
            assert phi @ f + const == pytest.approx(expected, rel=1e-12)


def test_a_server_whose_steps_bend_away_from_the_form_is_replayed_in_range_and_the_form_answers_past_it(
    tmp_path: Path,
) -> None:
    """A server whose decode steps are not the form's (a CPU: a fast matrix-vector product at one sequence, slow
    small-row GEMMs at a few): the fit keeps the measured departures at the measured batches, its steps there are the
    server's, and past the measured batches the form alone answers."""
    truth = StepModel(1e-2, 5e-4, 8e-4, 0.0, 1.7e-3, batch_factors=((1.0, 0.9), (2.0, 1.1), (8.0, 1.0)))
    table = read_table(vllm_files(tmp_path, truth, None, concurrencies=(1, 2, 4, 8, 16)))
    fit = fit_serving(table, fit_table(table, None, n_samples=0), 1024, 256)
    assert fit is not None and fit.form_rms is not None
    assert 0.03 < fit.form_rms[0] < 0.08 and fit.tpot_rms < 0.01  # the form alone misses by more than the noise
    assert [r["tpot_ms_replayed"] for r in fit.replay] == pytest.approx([r["tpot_ms"] for r in fit.replay], rel=0.01)
    knots = [b for b, _ in fit.model.batch_factors]
    assert knots == pytest.approx([1, 2, 4, 8, 16], rel=0.05)  # each point's mean decoding batch
    for batch in (1, 2, 4, 8, 16):
        assert fit.model.step_s(batch, batch * 1152.0) == pytest.approx(truth.step_s(batch, batch * 1152.0), rel=0.05)
    line = replace(fit.model, batch_factors=())
    assert abs(line.step_s(1, 1152.0) / truth.step_s(1, 1152.0) - 1) > 0.1  # what the form alone said
    assert fit.model.step_s(64, 64 * 1152.0) == line.step_s(64, 64 * 1152.0)
    samples = fit.samples(3)
    assert all(s.batch_factors and [b for b, _ in s.batch_factors] == knots for s in samples)


def test_without_ttft_or_physics_nothing_prices_prefill(tmp_path: Path) -> None:
    files = vllm_files(tmp_path, OTHER, 2048, (1, 8, 32))
    for path in files:
        data = json.loads(path.read_text())
        del data["mean_ttft_ms"]
        path.write_text(json.dumps(data))
    table = read_table(files)
    assert table.ttft_ms is None
    assert serving_fit(fit_table(table, None, n_samples=0), table) is None
    result = run_cli(
        [
            "advise",
            *map(str, files),
            "--tpot-slo-ms",
            "40",
            "--ttft-slo-ms",
            "500",
            "--input-len",
            "1024",
            "--output-len",
            "256",
        ]
    )
    assert result.exit_code == 2 and "nothing prices a prompt's prefill" in result.output
    # the physics prices it, and says so
    prior = Physics("llama-3.1-8b", "h100-sxm").prior
    from tokenroof.fit.predict import MeasuredWorkload as Measured

    fit = fit_table(table, prior(Measured.from_table(table)), n_samples=0)
    physics_priced = serving_fit(fit, table)
    assert physics_priced is not None and physics_priced.prefill_source == "physics"
    assert physics_priced.budget_source == "assumed" and physics_priced.max_num_batched_tokens is None


def replayed(saved: Path, args: list[str]) -> list[dict]:
    return run_json(["simulate", "--step-model", str(saved), *args])["points"]


def within_the_fits_residual(replayed_ms: list[float], measured_ms: list[float], fit_rms: float, floor: float) -> None:
    """The replay's errors: their rms within 2× the fit's own (at least `floor`, a run's scatter), none beyond 3×."""
    errors = np.log(np.array(replayed_ms) / np.array(measured_ms))
    bound = max(fit_rms, floor)
    assert math.sqrt(float(np.mean(errors**2))) <= 2 * bound, errors
    assert np.abs(errors).max() <= 3 * bound, errors


def test_a_saved_model_replays_the_vllm_files_it_was_fitted_to(tmp_path: Path) -> None:
    """predict --save-model, then simulate with it as vllm bench serve ran: the files' mean TPOT and TTFT within 2×
    the fit's own residual (issue 27: the prior's model read 18.1 ms where 12.8 was measured)."""
    saved = tmp_path / "m.json"
    data = run_json(["predict", *map(str, VLLM), "--batch", "256", "--samples", "10", "--save-model", str(saved)])
    serving = data["serving"]
    assert serving["client"] == "burst" and serving["max_num_batched_tokens"] == 8192
    lengths = ["--input-len", "1024", "--output-len", "256"]
    points = replayed(saved, ["--concurrency", "1,4,16,32,64,128", "--client", "burst", *lengths])
    files = {json.loads(p.read_text())["max_concurrency"]: json.loads(p.read_text()) for p in VLLM}
    measured = [files[point["concurrency"]] for point in points]
    tpot = [point["tpot_ms"]["mean"] for point in points]
    ttft = [point["ttft_ms"]["mean"] for point in points]
    within_the_fits_residual(tpot, [m["mean_tpot_ms"] for m in measured], serving["tpot_rms"], 0.01)
    within_the_fits_residual(ttft, [m["mean_ttft_ms"] for m in measured], serving["ttft_rms"], 0.01)


@pytest.mark.heavy
def test_a_saved_model_replays_guidellm_rates_and_a_bench_sweep(tmp_path: Path) -> None:
    saved = tmp_path / "g.json"
    data = run_json(["predict", str(GUIDELLM), "--batch", "64", "--samples", "10", "--save-model", str(saved)])
    serving = data["serving"]
    assert serving["client"] == "poisson"
    report = json.loads(GUIDELLM.read_text())["benchmarks"]
    runs = [
        run_json(
            [
                "simulate",
                "--step-model",
                str(saved),
                "--rate",
                str(bench["args"]["strategy"]["rate"]),
                "--input-len",
                "256",
                "--output-len",
                "128",
                "--num-requests",
                "3000",
                "--max-num-seqs",
                "1024",
            ]
        )
        for bench in report
    ]
    for ours, theirs, rms in (
        ("tpot_ms", "inter_token_latency_ms", "tpot_rms"),
        ("ttft_ms", "time_to_first_token_ms", "ttft_rms"),
    ):
        got = [run[ours]["mean"] for run in runs]
        measured = [bench["metrics"][theirs]["successful"]["mean"] for bench in report]
        within_the_fits_residual(got, measured, serving[rms], 0.02)  # a Poisson run of 3,000 scatters by ~2%
    saved = tmp_path / "b.json"
    data = run_json(["predict", str(BENCH), "--batch", "64", "--samples", "10", "--save-model", str(saved)])
    serving = data["serving"]
    assert serving["client"] == "staggered"
    table = read_table([BENCH])
    assert table.concurrency is not None and table.ttft_ms is not None
    below = table.concurrency <= 48  # the server's cap: the point at 64 queued behind it
    points = replayed(
        saved,
        [
            "--concurrency",
            ",".join(str(int(c)) for c in table.concurrency[below]),
            "--input-len",
            "512",
            "--output-len",
            "128",
            "--max-num-seqs",
            "48",
        ],
    )
    got_tpot = [p["tpot_ms"]["mean"] for p in points]
    got_ttft = [p["ttft_ms"]["mean"] for p in points]
    within_the_fits_residual(got_tpot, list(table.tpot_ms[below]), serving["tpot_rms"], 0.01)
    within_the_fits_residual(got_ttft, list(table.ttft_ms[below]), serving["ttft_rms"], 0.01)


def test_advise_from_vllm_files_is_true_to_them() -> None:
    """The cap advise gives from the files meets the targets at the measured points it covers, and the next measured
    point past it does not (issue 27: cap 344 'TTFT 40 ms' where the files measured 140 ms at 128)."""
    files = {json.loads(p.read_text())["max_concurrency"]: json.loads(p.read_text()) for p in VLLM}
    tpot_slo, ttft_slo = 16.0, 450.0
    advice = run_json(
        [
            "advise",
            *map(str, VLLM),
            "--tpot-slo-ms",
            str(tpot_slo),
            "--ttft-slo-ms",
            str(ttft_slo),
            "--slo-statistic",
            "mean",
            "--input-len",
            "1024",
            "--output-len",
            "256",
        ]
    )
    cap = advice["max_num_seqs"]
    meets = [c for c, f in files.items() if f["mean_tpot_ms"] <= tpot_slo and f["mean_ttft_ms"] <= ttft_slo]
    fails = [c for c in files if c not in meets]
    assert max(meets) <= cap < min(fails)
    assert advice["at_cap"]["ttft_ms"]["mean"] <= ttft_slo and advice["at_cap"]["tpot_ms"]["mean"] <= tpot_slo
    assert "every stream started at once" in advice["source"]
    assert advice["engine_flags"]["vllm"] == f"--max-num-seqs {cap}"  # the files' server, its cap as it is spelt
    # the decode-only answer from the same files (TPOT alone) agrees within its interval
    args = ["advise", *map(str, VLLM), "--tpot-slo-ms", str(tpot_slo), "--samples", "50", "--context", "1152"]
    decode = run_json(args)
    assert decode["max_num_seqs_low"] - 2 <= cap <= decode["max_num_seqs_high"] + 2


def test_at_cap_runs_a_closed_loop_of_the_asked_client() -> None:
    """A burst's first wave waits for every prompt before it (the TTFT the vLLM files show); staggered streams do
    not, and the decode steps are the same."""
    budget = Server(None, 8192)
    burst = at_cap(EXAMPLES_TRUTH, Lengths(1024), Lengths(256), 64, budget, client="burst")
    staggered = at_cap(EXAMPLES_TRUTH, Lengths(1024), Lengths(256), 64, budget, client="staggered")
    assert burst.ttft_ms["mean"] > 3 * staggered.ttft_ms["mean"]
    assert burst.tpot_ms["mean"] == pytest.approx(staggered.tpot_ms["mean"], rel=0.1)
    with pytest.raises(TokenroofError, match="unknown client"):
        ClosedLoop(4, Lengths(10), Lengths(10), 10, "tides")


def test_at_cap_runs_each_deployment_once_and_hands_each_caller_its_own_figures() -> None:
    """The same arguments meet the run already made (advise's margin search, plan's reference replica): equal figures,
    each caller's statistics its own to change; another argument (the seed) runs again."""
    from tokenroof.serving.saturation import _kept_full

    args = (EXAMPLES_TRUTH, Lengths(256, "lognormal", 0.5), Lengths(32), 8, Server(None, 2048))
    first = at_cap(*args)
    first.tpot_ms["p99"] = -1.0
    again = at_cap(*args)
    assert _kept_full.cache_info().hits == 1 and again.tpot_ms["p99"] > 0 and again.ttft_ms is not first.ttft_ms
    assert replace(again, tpot_ms={}, ttft_ms={}) == replace(first, tpot_ms={}, ttft_ms={})
    other = at_cap(*args, seed=1)
    assert _kept_full.cache_info().misses == 2 and other.tpot_ms != again.tpot_ms

    class Unkeyed(Lengths):  # an argument that cannot be a key runs uncached, to the same figures
        __hash__ = None  # type: ignore[assignment]

    unkeyed = at_cap(EXAMPLES_TRUTH, Unkeyed(256, "lognormal", 0.5), *args[2:])
    assert _kept_full.cache_info().misses == 2 and unkeyed == again


def test_predict_from_vllm_files_answers_from_the_scheduler_and_holds_the_holdout() -> None:
    """The files measured TTFT: the scheduler's model answers at any concurrency, with TTFT; the held-out files at
    256 and 384 (preempting) fall inside the intervals."""
    holdout = {
        json.loads(p.read_text())["max_concurrency"]: json.loads(p.read_text())
        for p in sorted((ROOT / "examples" / "vllm-holdout").glob("*.json"))
    }
    for physics in ([], ["-m", "llama-3.1-8b", "-H", "h100-sxm"]):
        data = run_json(["predict", *map(str, VLLM), "--batch", "256", "384", "--samples", "50", *physics])
        for row in data["predictions"]:
            measured = holdout[int(row["batch"])]
            assert row["tpot_ms_low"] <= measured["mean_tpot_ms"] <= row["tpot_ms_high"], (physics, row)
            assert "ttft_ms" in row
        at_256 = data["predictions"][0]
        assert at_256["tpot_ms"] == pytest.approx(holdout[256]["mean_tpot_ms"], rel=0.03)
        assert at_256["ttft_ms"] == pytest.approx(holdout[256]["mean_ttft_ms"], rel=0.05)


@pytest.mark.heavy
def test_two_contexts_of_online_files_hold_their_own_points() -> None:
    """vLLM files at 1,024 prompt tokens and one at 4,096: the decode fit folds each length's prompts into a KV cost
    per context token (issue 27: 'weights 0 ms', and the measured batch-128 point outside its interval); the
    scheduler's model replays both lengths and every measured point lies inside its interval."""
    files = [*map(str, VLLM), str(ROOT / "examples" / "vllm-in4096" / "vllm-in4096-c64.json")]
    table = read_table(files)
    for physics in ([], ["-m", "llama-3.1-8b", "-H", "h100-sxm"]):
        data = run_json(["predict", *files, "--batch", "1", "4", "16", "32", "64", "128", "--samples", "50", *physics])
        assert data["serving"]["tpot_rms"] < 0.02 and data["model"]["t_weights_s"] > 0.004
        rows = {(r["batch"], round(r["context_tokens"])): r for r in data["predictions"]}
        for batch, context, tpot in zip(table.batch, table.context_tokens, table.tpot_ms, strict=True):
            row = rows[(float(batch), round(context))]
            assert row["tpot_ms_low"] <= tpot <= row["tpot_ms_high"], (physics, batch, context, tpot, row)


@pytest.mark.parametrize(
    "args",
    [
        ["advise", str(ROOT / "examples" / "h100_7b_seed.csv"), "--context", "300", "--tpot-slo-ms", "30"],
        ["advise", "--context", "300", "--tpot-slo-ms", "30"],
        ["predict", str(ROOT / "examples" / "h100_7b_seed.csv"), "--context", "300", "--batch", "64"],
        ["simulate", "--rate", "1", "--num-requests", "20"],
        ["simulate", "--fit", str(VLLM[0]), "--fit", str(VLLM[1]), "--rate", "1"],
        ["plan", "--rate", "1"],
        ["advise", *map(str, VLLM), "--tpot-slo-ms", "40", "--input-len", "1024", "--output-len", "256"],
    ],
)
def test_a_deployment_that_cannot_hold_its_weights_is_refused_on_every_path(args: list[str]) -> None:
    """Issue 27: advise with a table answered cap 180 for Mixtral-8x22B (281 GB of weights) on one 80 GB H100."""
    result = run_cli([*args, "-m", "mixtral-8x22b", "-H", "h100-sxm"])
    assert result.exit_code == 2, result.output
    assert "281 GB of weights per GPU at --tp 1" in result.output and "--tp 4 or more" in result.output


@pytest.mark.heavy
def test_plan_leaves_out_the_choices_that_cannot_hold_the_weights() -> None:
    plan = ["plan", "-m", "mixtral-8x22b", "-H", "h100-sxm", "--tp-choices", "1,4", "--rate", "1"]
    data = run_json(
        [*plan, "--seeds", "1", "--num-requests", "200", "--workers", "1"]
    )  # what is left out, not the figures
    assert data["tp"] == 4 and any("left out: mixtral-8x22b" in w for w in data["warnings"])


def test_mixed_points_keep_their_own_clients_and_empty_cells(tmp_path: Path) -> None:
    """A GuideLLM sweep mixes a synchronous point, the throughput point and rates; a bench table mixes concurrency
    and rate points: each point is replayed as its own client drove it (GuideLLM's closed loops start every stream at
    once, bench's staggered), and an empty cell stays empty."""
    from tokenroof.serving.replay import online_points

    report = json.loads(GUIDELLM.read_text())
    first = report["benchmarks"][0]
    synchronous = {**first, "args": {"strategy": {"type_": "synchronous"}}}
    throughput = {**report["benchmarks"][-1], "args": {"strategy": {"type_": "throughput", "max_concurrency": 512}}}
    mixed = tmp_path / "guidellm.json"
    mixed.write_text(json.dumps({"benchmarks": [synchronous, *report["benchmarks"][1:], throughput]}))
    table = read_table([mixed])
    assert table.semantics.client == "poisson" and table.concurrency is not None
    points = online_points(table, fit_table(table, None, n_samples=0), 256, 128)
    assert [p.client for p in points][:1] == ["burst"] and points[0].concurrency == 1.0
    assert {p.client for p in points[1:-1]} == {"poisson"} and points[-1].client == "burst"
    # a bench CSV of both kinds: the rate point's concurrency is empty, written back empty
    csv = tmp_path / "summary.csv"
    csv.write_text(
        "# batch_kind=running tpot_kind=tpot client=staggered input_len=512 output_len=128\n"
        "batch,throughput_tok_s,tpot_ms,context_tokens,ttft_ms,concurrency\n"
        "1,160,6.2,576,13,1\n4,600,6.5,576,18,4\n6.1,900,6.6,576,,\n16,2100,7.5,576,19,16\n"
    )
    table = read_table([csv])
    assert np.isnan(table.concurrency[2]) and np.isnan(table.ttft_ms[2])
    assert any("ttft_ms is empty on 1 of 4 rows" in w for w in table.warnings)
    again = tmp_path / "again.csv"
    again.write_text(table.to_csv())
    back = read_table([again])
    assert np.array_equal(back.concurrency, table.concurrency, equal_nan=True)
    points = online_points(table, fit_table(table, None, n_samples=0), 512, 128)
    assert [p.client for p in points] == ["staggered", "staggered", "poisson", "staggered"]
    assert points[2].ttft_s is None


@pytest.mark.heavy
def test_batches_the_fitted_budget_cannot_hold_are_answered_by_the_decode_fit(tmp_path: Path) -> None:
    """The scheduler needs a token of the prompt budget per sequence: past the budget predict answers from the decode
    fit (and says so) instead of failing, and advise's caps stop below it."""
    files = vllm_files(tmp_path, OTHER, 2048)
    data = run_json(["predict", *map(str, files), "--batch", "64", "4096", "--samples", "10"])
    assert "ttft_ms" in data["predictions"][0] and "ttft_ms" not in data["predictions"][1]
    assert any("beyond the 2048-token prompt budget" in w for w in data["warnings"])
    advice = run_json(
        ["advise", *map(str, files), "--tpot-slo-ms", "10000", "--input-len", "1024", "--output-len", "256"]
    )
    assert advice["max_num_seqs"] < 2048


@pytest.mark.heavy
def test_plan_from_a_guidellm_sweep_answers_what_it_measured() -> None:
    """Issue 27: plan --fit guidellm.json --rate 20 said p99 TTFT 28 ms where GuideLLM measured a 52 ms mean (its
    model priced prefill at nothing). The sweep measured 11.4 ms mean TTFT and 6.67 ms TPOT at 20 req/s."""
    data = run_json(
        [
            *("plan", "--fit", str(GUIDELLM), "--rate", "20", "--input-len", "256", "--output-len", "128"),
            *("--length-dist", "fixed", "--slo-statistic", "mean", "--ttft-slo-ms", "1000", "--tpot-slo-ms", "50"),
            *("--seeds", "1", "--num-requests", "1500", "--workers", "1"),
        ]
    )
    chosen = data["chosen"]
    assert chosen["replicas"] == 1
    assert chosen["ttft_ms_low"]["mean"] <= 11.4 * 1.1 and chosen["ttft_ms_high"]["mean"] >= 11.4 * 0.9
    assert chosen["tpot_ms_low"]["mean"] <= 6.67 * 1.1 and chosen["tpot_ms_high"]["mean"] >= 6.67 * 0.9


def test_a_prior_that_the_data_would_defeat_is_named_not_silent(tmp_path: Path) -> None:
    """Issue 27: six vLLM files with -m llama-3.1-8b -H h100-sxm gave 'weights 0.644 ms' (7.4x the H100's
    bandwidth), compute 4.4x faster than peak, the prior at 0% and no conflict."""
    rows = "\n".join(f"{b},{5 + max(0.644, b * 0.0049) + b * 0.02:.4f}" for b in (1, 2, 4, 8, 16, 32, 64, 128, 256))
    table = tmp_path / "fast.csv"
    table.write_text("# input_len=1024 output_len=256 batch_kind=concurrency\nbatch,tpot_ms\n" + rows + "\n")
    data = run_json(
        ["predict", str(table), "--batch", "512", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--samples", "10"]
    )
    assert data["model"]["structure_weights"]["roofline"] == 0.0  # the data-only fit's impossible terms left out
    assert data["model"]["t_weights_s"] >= 4.48e-3 * 0.99
    assert any("faster than peak bandwidth allows" in c and "left out" in c for c in data["prior_conflicts"])
    assert any(w.startswith("prior and data disagree") for w in data["warnings"])


def test_the_workload_is_stated_whichever_way_it_came(tmp_path: Path) -> None:
    """Issue 27: one table, two answers (29.6 vs 49.4 ms at 256), neither saying whether prompts shared the steps."""
    table = tmp_path / "t.csv"
    table.write_text(
        "batch,tpot_ms,context_tokens\n"
        + "\n".join(f"{b},{t},1152" for b, t in ((1, 12.5), (8, 13.3), (32, 14.5), (128, 20)))
    )
    physics = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--samples", "10", "--batch", "256"]
    unsaid = run_json(["predict", str(table), *physics])
    assert "lengths not stated" in unsaid["workload"] and unsaid["serving"] is None
    said = run_json(["predict", str(table), *physics, "--input-len", "1024", "--output-len", "256"])
    assert said["workload"].startswith("online, closed loop, streams staggered (assumed")
    assert "prompts prefilled whole (assumed: no TTFT to tell)" in said["workload"]
    step = run_json(["predict", str(table), *physics, "--decode-only"])
    assert step["workload"] == "decode-only (TPOT of pure decode steps): no prompts in the measured steps"


def test_every_command_reads_the_same_inputs(tmp_path: Path) -> None:
    """A bench folder, its summary.json and a folder of vLLM files are tables to predict, the report and simulate's
    --fit alike; repeated --fit files are one table."""
    from tokenroof.report.sources import load_sources

    by_folder = read_table([BENCH])
    by_summary = read_table([BENCH / "summary.json"])
    assert by_folder.batch.tolist() == pytest.approx(by_summary.batch.tolist(), rel=1e-3)
    assert by_summary.semantics.client == "staggered" and by_summary.concurrency is not None
    (vllm,) = load_sources([ROOT / "examples" / "vllm"])
    assert vllm.kind == "table" and vllm.table is not None and len(vllm.table) == len(VLLM)
    (again,) = load_sources(VLLM)
    assert again.table is not None and again.table.batch.tolist() == vllm.table.batch.tolist()
    lengths = ["--input-len", "1024", "--output-len", "256", "--concurrency", "8"]
    repeated = ["simulate", *(a for f in VLLM for a in ("--fit", str(f))), *lengths]
    assert (
        run_json(repeated)["points"]
        == run_json(["simulate", "--fit", str(ROOT / "examples" / "vllm"), *lengths])["points"]
    )


def test_predict_replays_a_guidellm_rate_at_its_own_concurrency() -> None:
    """An open-loop table's point predicted at the concurrency it measured (4.06 requests in flight at one of
    GuideLLM's rates): the scheduler's model run at the rate that holds that many (Little's law) gives back the
    measured mean TPOT, TTFT and output throughput within the replay's few percent (6.42 ms, 9.65 ms, 633 tok/s)."""
    data = run_json(["predict", str(GUIDELLM), "--batch", "4.064642055513319"])
    measured = next(p for p in data["measured"]["points"] if abs(p["batch"] - 4.0646) < 1e-3)
    (predicted,) = data["predictions"]
    assert data["serving"]["client"] == "poisson" and not predicted["extrapolated"]
    for key in ("tpot_ms", "ttft_ms", "throughput_tok_s"):
        assert predicted[key] == pytest.approx(measured[key], rel=0.08), key


def test_an_open_loop_replay_runs_under_the_kv_cache_it_is_given() -> None:
    """A rate point is replayed under the measured server's KV cache: 40 req/s of 256 + 64-token requests keep about 20
    in flight on the examples' server, over 6,000 tokens of KV; a 2,048-token cache holds every step to it by
    preempting, an unlimited one does not."""
    from tokenroof.serving.replay import open_loop_run

    lengths = (Lengths(256), Lengths(64))
    bounded = open_loop_run(EXAMPLES_TRUTH, 40.0, lengths, "poisson", 16.0, 2048, None)
    free = open_loop_run(EXAMPLES_TRUTH, 40.0, lengths, "poisson", 16.0, None, None)
    assert bounded.kv_capacity_tokens == 2048 and float(bounded.step_kv_tokens.max()) <= 2048
    assert bounded.preemptions > 0
    assert free.kv_capacity_tokens is None and free.preemptions == 0 and float(free.step_kv_tokens.max()) > 6000


def test_an_open_loop_at_a_concurrency_holds_that_many_requests() -> None:
    """A rate table is answered at the rate whose open loop holds the asked concurrency (Little's law: requests a
    second × each one's life, from its TTFT and 49 more tokens at its TPOT), Poisson or evenly spaced arrivals, its
    concurrency the running batch (bench) or the requests in flight (GuideLLM), and the answer is in seconds and
    tokens a second."""
    from tokenroof.serving.replay import ServingFit, _open_loop_at

    sm = SERVER
    poisson = ServingFit(sm, "poisson", True, None, "given", "ttft", [], 0.0, 0.0)
    for serving in (poisson, replace(poisson, client="constant"), replace(poisson, in_flight=True)):
        for batch in (4.0, 16.0):
            answer = _open_loop_at(serving, batch, (Lengths(200), Lengths(50)), None)
            assert answer is not None
            tpot_s, ttft_s, throughput = answer
            assert float(sm.step_time_s(1.0, 225.0)) < tpot_s < float(sm.step_time_s(batch * 2, 225.0))
            assert ttft_s > float(sm.step_s(0.0, 0.0, 200.0, 200.0**2))  # at least its prompt's own step
            held = throughput / 50 * (ttft_s + 49 * tpot_s)
            assert held == pytest.approx(batch, rel=0.03), (serving.client, batch)
    # the server's limits run in it: 2,000-token prompts chunked at 1,100 tokens a step take two steps to a first
    # token; a KV cache of 12,000 tokens holds 5 of 8 such requests, the rest queue; per-slot KV streams add passes
    long = (Lengths(2000), Lengths(50))
    plain = _open_loop_at(poisson, 8.0, long, None)
    chunked = _open_loop_at(replace(poisson, max_num_batched_tokens=1100), 8.0, long, None)
    full = _open_loop_at(poisson, 8.0, long, 12_000)
    slots = _open_loop_at(replace(poisson, kv_slots=16), 8.0, long, None)
    assert plain and chunked and full and slots
    assert chunked[1] > 1.05 * plain[1] and full[1] > 5 * plain[1] and slots[0] > 1.05 * plain[0]


def test_serving_fit_samples_are_refits_that_still_replay_the_sweep() -> None:
    """The interval samples of the scheduler's fit (what plan runs beside the central model): refits to noisy copies
    of the measured points, as many as asked, the same for a seed and others for another, each its own model and
    each replaying the sweep's TPOT and TTFT within three times the central fit's own miss; none without a problem
    solved (a model given, not fitted)."""
    from tokenroof.serving.replay import replayed_points

    table, fit = serve_sweep()
    serving = serving_fit(fit, table, None, None, "fit")
    assert serving is not None and serving.problem is not None and serving.ttft_rms is not None
    samples = serving.samples(3, seed=0)
    assert len(samples) == 3 and samples == serving.samples(3, seed=0) and samples != serving.samples(3, seed=1)
    assert len(serving.samples(1)) == 1 and serving.samples(0) == []
    _, points, designs, _ = serving.problem
    for sample in samples:
        assert sample != serving.model
        _, tpot_rms, ttft_rms = replayed_points(sample, points, designs)
        assert tpot_rms < 3 * serving.tpot_rms and ttft_rms is not None and ttft_rms < 3 * serving.ttft_rms
    assert replace(serving, problem=None).samples(3) == []


@pytest.mark.heavy
def test_fitted_models_run_the_scheduler_fit_as_asked() -> None:
    """What simulate, advise and plan run from measured files: vLLM's files fitted on the scheduler, the prompt budget
    of the best replay (8,192: vLLM's default, chunked) unless one is given (None: whole prompts), under the KV cache
    given (a small one bounds the replayed batches, so the fit differs), with the samples asked for (none unless)."""
    from tokenroof.serving.replay import fitted_models

    travelling, none = fitted_models(VLLM)
    assert travelling.replayed is not None and none == []
    assert (travelling.replayed.client, travelling.replayed.max_num_batched_tokens) == ("burst", 8192)
    whole, samples = fitted_models(VLLM, None, 2, None, None)
    assert whole.replayed is not None and whole.replayed.max_num_batched_tokens is None and len(samples) == 2
    bounded, _ = fitted_models(VLLM, None, 0, 10_000)
    assert bounded.step_model != travelling.step_model


def test_replay_predictions_run_each_batch_and_context_as_the_measuring_client_drove_the_server() -> None:
    """`predict`'s scheduler answers (replay_predictions) are the scheduler's own runs, checked against simulate run
    here: a whole batch is a closed loop of that many streams (the table's client; a client that is not a closed
    loop's runs staggered), a fractional batch the straight line between the two around it, a context its prompt
    (the context less half the output: the mean context over a request's decode), an output length rounded to a
    whole token and at least 2; the table's KV slots and prompt budget run in it, and a batch the budget cannot hold
    (a step needs a token per sequence) has no answer. Seconds, seconds and output tokens a second."""
    from tokenroof.serving.replay import ServingFit, _closed_loop_at, replay_predictions
    from tokenroof.serving.saturation import closed_loop

    sm = SERVER
    staggered = ServingFit(sm, "staggered", True, None, "given", "ttft", [], 0.0, 0.0)

    def ran(c: int, prompt: int, out: int, client: str = "staggered", **server: Any) -> tuple[float, float, float]:
        slots = server.pop("slots", None)
        loop = closed_loop(c, Lengths(prompt), Lengths(out), client)
        s = simulate(sm, loop, slots or c, 0, server.pop("kv", None), per_slot_kv=slots is not None, **server).summary()
        return s["tpot_ms"]["mean"] / 1e3, s["ttft_ms"]["mean"] / 1e3, s["throughput_tok_s"]

    answers = replay_predictions(staggered, [1, 3.25, 4], [None, 1000.0], 200, 50.4)
    assert set(answers) == {(b, c) for b in (1.0, 3.25, 4.0) for c in (None, 1000.0)}
    assert answers[(4.0, None)] == pytest.approx(ran(4, 200, 50), rel=1e-12)
    assert answers[(1.0, None)] == pytest.approx(ran(1, 200, 50), rel=1e-12)
    three, four = ran(3, 200, 50), ran(4, 200, 50)
    assert answers[(3.25, None)] == pytest.approx(
        tuple(0.75 * a + 0.25 * b for a, b in zip(three, four, strict=True)), rel=1e-12
    )
    assert answers[(1.0, 1000.0)] == pytest.approx(ran(1, 975, 50), rel=1e-12)  # 1,000 − 50 / 2
    assert answers[(4.0, 1000.0)][1] > 2 * answers[(4.0, None)][1]  # a longer prompt, a later first token
    # the output length: rounded, and at least the 2 tokens a TPOT needs
    assert replay_predictions(staggered, [2], [None], 200, 1.2)[(2.0, None)] == pytest.approx(ran(2, 200, 2))
    # the client as measured when it is a closed loop's; the server's slots, KV pool and budget
    burst = replay_predictions(replace(staggered, client="burst"), [3], [None], 200, 50)[(3.0, None)]
    assert burst == pytest.approx(ran(3, 200, 50, "burst"), rel=1e-12) and burst != pytest.approx(three)
    slotted = replay_predictions(replace(staggered, kv_slots=8), [3], [None], 200, 50)[(3.0, None)]
    assert slotted == pytest.approx(ran(3, 200, 50, slots=8), rel=1e-12) and slotted != pytest.approx(three)
    kv = replay_predictions(staggered, [4], [None], 200, 50, kv_capacity_tokens=600)[(4.0, None)]
    assert kv == pytest.approx(ran(4, 200, 50, kv=600), rel=1e-12) and kv[1] > four[1]
    budgeted = replay_predictions(replace(staggered, max_num_batched_tokens=64), [1, 3.25, 4, 64], [None], 200, 50)
    assert set(budgeted) == {(1.0, None), (3.25, None), (4.0, None)}  # 64 sequences need more than 64 tokens a step
    assert budgeted[(4.0, None)] == pytest.approx(ran(4, 200, 50, max_num_batched_tokens=64), rel=1e-12)
    assert budgeted[(4.0, None)][1] > four[1]  # a 200-token prompt chunked at 64 a step
    assert set(replay_predictions(replace(staggered, max_num_batched_tokens=4), [3.25], [None], 200, 50)) == set()
    assert set(replay_predictions(replace(staggered, max_num_batched_tokens=2), [1], [None], 200, 50)) == {(1.0, None)}
    # a context shorter than half the output still prompts a token
    assert replay_predictions(staggered, [1], [20.0], 200, 50)[(1.0, 20.0)] == pytest.approx(ran(1, 1, 50))
    assert replay_predictions(staggered, [1], [None], 0.4, 50)[(1.0, None)] == pytest.approx(ran(1, 1, 50))
    # asked of an open-loop fit directly, the closed loop runs staggered
    assert _closed_loop_at(replace(staggered, client="poisson"), 3, (Lengths(200), Lengths(50)), None) == three
    # an open-loop table is answered by its open loop, at the rate that holds the batch (tested above)
    for client in ("poisson", "constant"):
        held = replay_predictions(replace(staggered, client=client), [4], [None], 200, 50)[(4.0, None)]
        assert held != pytest.approx(four)
        assert held[2] / 50 * (held[1] + 49 * held[0]) == pytest.approx(4.0, rel=0.05)
        full = replay_predictions(replace(staggered, client=client), [4], [None], 200, 50, kv_capacity_tokens=500)
        assert full[(4.0, None)][1] > 1.5 * held[1]  # two requests' KV fill the pool: the rest queue


def test_with_scheduler_fits_the_server_as_the_deployment_says_and_answers_from_it() -> None:
    """`with_scheduler` (predict's scheduler answers for an online table) on llama-server's sweep: it fits the
    scheduler with the deployment's KV pool and prompt budget where one is named (the best-replaying budget and no
    pool where not), answers at the asked batches and contexts from that fit, and says so in its warnings: batches
    the budget cannot hold (five named), a KV cache that is not known past the measured concurrency, a knee the
    measured TTFT places past the data (its compute per token in µs); "no knee observed" goes, other warnings stay.
    The lengths are the table's, else the ones given; unknown lengths give no answers."""
    from types import SimpleNamespace

    from tokenroof.fit.predict import PredictResult
    from tokenroof.serving.replay import replay_predictions, with_scheduler

    table, fit = serve_sweep()
    top = fit.batch_range[1]  # 14.97

    def predicted(batches: list[float], physics: Any, contexts: list[float] | None = None, lengths=None, t=table):
        asked = PredictResult(t, fit, np.array(batches), None, contexts=contexts, warnings=["no knee observed", "kept"])
        return with_scheduler(asked, physics, lengths)

    unknown = SimpleNamespace(known=False)
    r = predicted([2, top, 24], unknown)
    fitted = serving_fit(fit, table, None, None, "fit")
    assert fitted is not None and fitted.max_num_batched_tokens is None and fitted.budget_source == "fitted"
    assert r.serving.to_dict() == fitted.to_dict()
    serving_contract(fitted.to_dict())
    tried = replace(fitted, alternatives={"chunked at 512": (0.08, 0.3), "chunked at 2048": (0.07, None)})
    serving_contract(tried.to_dict())
    formed = replace(fitted, form_rms=(0.05, 0.2)).to_dict()
    assert (formed["form_tpot_rms"], formed["form_ttft_rms"]) == (0.05, 0.2)
    plain = replace(fitted, form_rms=None).to_dict()
    assert (plain["form_tpot_rms"], plain["form_ttft_rms"]) == (None, None)
    assert tried.to_dict()["alternatives"] == {
        "chunked at 512": {"tpot_rms": 0.08, "ttft_rms": 0.3},
        "chunked at 2048": {"tpot_rms": 0.07, "ttft_rms": None},
    }
    assert r.scheduler == replay_predictions(fitted, [2, top, 24], [None], 128, 64, None)
    knee = fitted.model.knee_batch(0.0)
    assert knee is not None and knee > top
    assert r.warnings[0] == "kept" and not any(w.startswith("no knee observed") for w in r.warnings)
    assert any(w.startswith("past the measured concurrency the KV cache may fill") for w in r.warnings)
    assert any(w.endswith("(or the server's own, --kv-cache-tokens in simulate)") for w in r.warnings)
    assert any(f"{fitted.model.t_compute_s * 1e6:.3g} µs" in w and f"near batch {knee:.0f}," in w for w in r.warnings)
    within = predicted([2, top], unknown, contexts=[500.0])
    assert set(within.scheduler) == {(2.0, 500.0), (top, 500.0)}
    assert within.scheduler == replay_predictions(fitted, [2, top], [500.0], 128, 64, None)
    assert not any("the KV cache may fill" in w for w in within.warnings)  # nothing asked past the data
    # the lengths: the table's, else the ones given, else none to answer with
    bare = replace(table, semantics=replace(table.semantics, input_len=None, output_len=None, stated=()))
    given = predicted([2, top], unknown, lengths=(128.0, 64.0), t=bare)
    assert given.scheduler == predicted([2, top], unknown).scheduler
    assert predicted([2, top], unknown, t=bare).scheduler is None
    # a deployment named: its KV pool and prompt budget, in the fit and in the answers
    named = SimpleNamespace(known=True, kv_pool_tokens=lambda: 1500, prompt_budget=lambda: 32, reserves_output=False)
    bounded = serving_fit(fit, table, 1500, None, 32)
    batches = [2.0, top, 40.0, 48.0, 56.0, 64.0, 72.0, 80.0]
    r = predicted(batches, named)
    assert r.serving.to_dict() == bounded.to_dict() and bounded.max_num_batched_tokens == 32
    # serving_fit is fit_serving at the table's lengths, its budget "the engine's default" where one is given
    assert bounded.budget_source == "engine"
    assert bounded.to_dict() == fit_serving(table, fit, 128.0, 64.0, 1500, 32, "engine").to_dict()
    assert fitted.to_dict() == fit_serving(table, fit, 128.0, 64.0, None, "fit").to_dict()
    serving_contract(bounded.to_dict())
    assert r.scheduler == replay_predictions(bounded, batches, [None], 128, 64, 1500)
    assert r.scheduler != replay_predictions(bounded, batches, [None], 128, 64, None)
    assert set(r.scheduler) == {(2.0, None), (top, None)}
    beyond = [w for w in r.warnings if w.startswith("batch ")]
    assert len(beyond) == 1 and beyond[0].startswith("batch 40, 48, 56, 64, 72: beyond the 32-token prompt budget")
    assert beyond[0].endswith("answered from the decode fit alone, without TTFT")
    assert not any("the KV cache may fill" in w for w in r.warnings)  # its size is known
    # no TTFT measured: the physics prices the prompts, whole ones assumed, and the scheduler gives no answers
    from tokenroof.fit.prior import MeasuredWorkload

    tpot_only = replace(table, ttft_ms=None)
    prior = Physics("llama-3.1-8b", "h100-sxm").prior(MeasuredWorkload(input_len=128, output_len=64))
    priced = PredictResult(tpot_only, fit_table(tpot_only, prior, n_samples=0), np.array([2.0, top]), prior)
    r = with_scheduler(priced, unknown)
    assert r.serving.prefill_source == "physics" and r.serving.budget_source == "assumed" and r.scheduler is None
    serving_contract(r.serving.to_dict())


def serving_contract(serving: dict[str, Any]) -> None:
    """A ServingFit's JSON (predict's "serving", what --save-model writes) against the contract: every key it
    declares, nothing else."""
    from tests.schemas import validate_part

    validate_part("predict", "/properties/serving", serving)


def test_a_replay_that_misses_the_measured_points_says_by_how_much_and_what_to_state() -> None:
    """ServingFit.misfit: silent within REPLAY_MISFIT (its edge included), past it the rms in TPOT and TTFT (TTFT
    only where measured), judged on the form's own replay where measured departures were kept (they would hide the
    miss), and what to state to mend it."""
    from tokenroof.serving.replay import REPLAY_MISFIT, ServingFit

    sm = SERVER
    fit = ServingFit(sm, "staggered", True, None, "given", "ttft", [], REPLAY_MISFIT, REPLAY_MISFIT)
    assert fit.misfit() == []
    assert replace(fit, ttft_rms=None).misfit() == []  # no TTFT measured: TPOT alone is judged
    (tpot,) = replace(fit, tpot_rms=0.31, ttft_rms=None).misfit()
    assert tpot.startswith("the scheduler's model replays the measured points only within 31% rms in TPOT: the table")
    (both,) = replace(fit, ttft_rms=0.42).misfit()
    assert f"within {REPLAY_MISFIT:.0%} rms in TPOT, TTFT 42%: the table does not look like the workload" in both
    # it asks for what the header leaves unsaid, and only that (a journey check found it asking a llama-server sweep
    # that states its lengths and client for them, and not for its slots)
    assert both.endswith("the workload assumed (" + fit.describe() + "); name the engine measured (--engine, with "
                         "--model/--hardware) for its prompt budget")  # fmt: skip
    unsaid = ("'# client=…'", "'# kv_slots=N (its -np, without --kv-unified)'")
    (asks,) = replace(fit, ttft_rms=0.42, unstated=unsaid).misfit()
    assert "; state '# client=…' '# kv_slots=N (its -np, without --kv-unified)' in its header, or name the" in asks
    from tokenroof.io.measurements import read_table
    from tokenroof.serving.replay import unstated_of

    sweep = read_table([ROOT / "examples" / "llama-server-2026-12-07f" / "sweep"])
    assert unstated_of(sweep) == ("'# kv_slots=N (its -np, without --kv-unified)'",)
    assert unstated_of(read_table([ROOT / "examples" / "h100_7b_seed.csv"])) == (
        "'# input_len=… output_len=…'",
        "'# client=…'",
    )
    assert f"({fit.describe()})" in both
    # the form's own replay decides: departures kept in range would hide a miss, or make one look worse
    (form,) = replace(fit, form_rms=(0.5, None)).misfit()
    assert form.startswith("the scheduler's model's form replays the measured points only within 50% rms in TPOT:")
    assert replace(fit, tpot_rms=0.9, ttft_rms=0.9, form_rms=(0.01, 0.02)).misfit() == []


def test_an_open_loop_run_is_simulate_on_about_forty_lifetimes_of_the_rate_asked() -> None:
    """open_loop_run: Poisson arrivals (or evenly spaced, "constant") at the rate, 40 × the concurrency requests
    within [200, 2000], on a server whose cap does not bind (1,024) or, with per-slot KV streams, its slots —
    the same run as simulate given that workload and server."""
    from tokenroof.serving.replay import OPEN_LOOP_MAX_NUM_SEQS, OPEN_LOOP_REQUESTS, open_loop_run

    sm = SERVER
    lengths = (Lengths(200), Lengths(50))
    assert OPEN_LOOP_REQUESTS == (200, 2000) and OPEN_LOOP_MAX_NUM_SEQS == 1024
    for client, burstiness in (("poisson", 1.0), ("constant", math.inf)):
        for concurrency, n in ((2.0, 200), (12.0, 480), (80.0, 2000)):
            ran = open_loop_run(sm, 5.0, lengths, client, concurrency, 30_000, 2048)
            workload = Workload(5.0, *lengths, num_requests=n, burstiness=burstiness)
            same = simulate(sm, workload, 1024, 0, 30_000, max_num_batched_tokens=2048)
            assert len(ran.sequences) == n and ran.summary() == same.summary(), (client, concurrency)
    gaps = np.diff([s.arrival_s for s in open_loop_run(sm, 5.0, lengths, "constant", 2.0, None, None).sequences])
    assert gaps == pytest.approx(0.2)  # evenly spaced at 5 a second
    slots = open_loop_run(sm, 5.0, lengths, "poisson", 2.0, None, None, kv_slots=4)
    workload = Workload(5.0, *lengths, num_requests=200, burstiness=1.0)
    assert slots.summary() == simulate(sm, workload, 4, 0, None, per_slot_kv=True).summary()
    assert slots.summary() != simulate(sm, workload, 4, 0, None).summary()


def test_an_open_loop_run_split_over_seeds_is_simulate_on_its_share_of_the_requests() -> None:
    """One of `share` runs of a point: its own seed, the point's requests ÷ share, never under 100."""
    from tokenroof.serving.replay import OPEN_LOOP_MIN_REQUESTS, open_loop_run

    lengths = (Lengths(200), Lengths(50))
    assert OPEN_LOOP_MIN_REQUESTS == 100
    for concurrency, share, n in ((12.0, 4, 120), (80.0, 4, 500), (2.0, 4, 100), (80.0, 1, 2000)):
        ran = open_loop_run(SERVER, 5.0, lengths, "poisson", concurrency, None, None, None, 3, share)
        same = simulate(SERVER, Workload(5.0, *lengths, num_requests=n), 1024, 3, None)
        assert len(ran.sequences) == n and ran.summary() == same.summary(), (concurrency, share)


def test_matched_rate_finds_the_rate_that_holds_the_concurrency_from_either_side_of_saturation() -> None:
    """A queue whose concurrency grows as r·W/(1 − r/S) below its saturation S (W = 2 s, S = 10 req/s) and without
    bound past it: the rate that holds 5 in flight is 5 / (2 + 5/10) = 2.0 req/s, found within OPEN_LOOP_MATCH in at
    most OPEN_LOOP_SEARCH runs from a measured rate below it, above it, or past saturation."""
    from tokenroof.serving.replay import OPEN_LOOP_MATCH, OPEN_LOOP_SEARCH, matched_rate

    def queue(rate: float) -> float:
        return 2.0 * rate / (1.0 - rate / 10.0) if rate < 9.99 else 1e4 * rate

    for start in (0.1, 1.9, 4.0, 9.5, 30.0):
        asked: list[float] = []

        def held(rate: float, asked: list[float] = asked) -> float:
            asked.append(rate)
            return queue(rate)

        found = matched_rate(held, start, 5.0)
        assert abs(math.log(queue(found) / 5.0)) <= OPEN_LOOP_MATCH, start
        assert found == pytest.approx(2.0, rel=0.03) and len(asked) <= OPEN_LOOP_SEARCH
    assert matched_rate(lambda r: 0.0, 3.0, 5.0) == 3.0  # nothing held: the measured rate stands
    assert matched_rate(queue, 0.1, 0.5) == pytest.approx(0.5 / 2.05, rel=0.03)  # under one in flight too
    assert matched_rate(queue, 0.0, 5.0) == 0.0 and matched_rate(queue, 3.0, 0.0) == 3.0


@pytest.mark.parametrize(("power", "runs"), [(1.0, 2), (3.0, 3), (0.5, 7)])
def test_matched_rate_steps_by_the_slope_its_runs_show(power: float, runs: int) -> None:
    """A concurrency that is a power of the rate, c = r^k, is met exactly by the secant in log-log: at light load (k =
    1, Little's law) the second run; steeper (k = 3) the third, the first step taking slope 1 and the next the slope
    its two runs show. A flatter one (k = 1/2; a concurrency never grows slower than the rate, so a slope under 1 is
    read as 1) halves its log miss each run: 1.26, 0.63, … under OPEN_LOOP_MATCH at the seventh."""
    from tokenroof.serving.replay import OPEN_LOOP_MATCH, matched_rate

    asked: list[float] = []

    def held(rate: float) -> float:
        asked.append(rate)
        return rate**power

    found = matched_rate(held, 2.0, 5.0)
    assert len(asked) == runs and found == asked[-1]
    if power >= 1:
        assert found == pytest.approx(5.0 ** (1 / power), rel=1e-9)
    else:
        assert 0.01 < abs(math.log(found**power / 5.0)) <= OPEN_LOOP_MATCH


def test_matched_rate_halves_its_bracket_where_a_step_would_leave_it() -> None:
    """A concurrency that jumps from 1 to 100 at 2 req/s never meets 5: the runs close in on the jump from both
    sides, each inside the bracket the runs before it give once it has two ends, and a closest run (1 held, 5×
    short, against 100, 20× over; the first of equals) is returned after OPEN_LOOP_SEARCH runs."""
    from tokenroof.serving.replay import OPEN_LOOP_SEARCH, matched_rate

    asked: list[float] = []

    def held(rate: float) -> float:
        asked.append(rate)
        return 1.0 if rate < 2.0 else 100.0

    found = matched_rate(held, 1.0, 5.0)
    assert len(asked) == OPEN_LOOP_SEARCH and found < 2.0
    below = [r for r in asked if r < 2.0]
    above = [r for r in asked if r >= 2.0]
    assert below and above and found == min(below)
    for i, rate in enumerate(asked[2:], start=2):
        low = max((r for r in asked[:i] if r < 2.0), default=0.0)
        high = min((r for r in asked[:i] if r >= 2.0), default=math.inf)
        assert low < rate < high, (i, rate)
    assert max(above) - min(below) > 0 and min(above) - max(below) < 0.05  # closed in on the jump


def test_held_concurrency_is_the_time_averaged_requests_in_flight_or_the_running_batch() -> None:
    """Requests in flight over the window, by hand: [0, 10] and [5, 15] over a window (0, 10) are 10 + 5 request-
    seconds in 10 s (1.5); over (5, 15), with a third sent at 12 and unanswered, 5 + 10 + 3 (1.8). The running batch
    is the run's own time average."""
    from types import SimpleNamespace

    from tokenroof.serving.replay import held_concurrency

    def run(window: tuple[float, float]) -> Any:
        seqs = [SimpleNamespace(arrival_s=a, finished_s=f) for a, f in ((0.0, 10.0), (5.0, 15.0), (12.0, None))]
        return SimpleNamespace(sequences=seqs, window_s=lambda: window, running_batch=lambda: 7.5)

    assert held_concurrency(run((0.0, 10.0)), True) == pytest.approx(1.5)
    assert held_concurrency(run((5.0, 15.0)), True) == pytest.approx(1.8)
    assert held_concurrency(run((0.0, 10.0)), False) == 7.5
    assert held_concurrency(run((9.5, 10.0)), True) == pytest.approx(2.0)  # a window under a second: both in flight


def test_pseudo_huber_residuals_square_to_the_loss() -> None:
    """2(√(1 + z²) − 1) by hand: z while small, 0.9102 at 1, ∓14.07 at ∓100; odd."""
    from tokenroof.serving.replay import pseudo_huber

    z = np.array([0.0, 1e-3, 1.0, -1.0, 100.0, -100.0])
    got = pseudo_huber(z)
    assert got == pytest.approx([0.0, 1e-3, 0.91018, -0.91018, 14.0716, -14.0716], rel=1e-4, abs=1e-9)
    assert got**2 == pytest.approx(2 * (np.sqrt(1 + z**2) - 1))


def test_ttft_outliers_are_open_loop_misses_far_past_the_rest_and_their_own_spread() -> None:
    """Misses of 1-2% and one of 55%: the 55% is named where the point is an open loop's, never a closed loop's. A 9%
    miss among 1-2% ones passes REPLAY_MISFIT (8%) and three robust scales (1.4826 × 1.5% × 3 = 6.7%): named, unless
    the point's own spread (5%) puts it within twice that. An unmeasured TTFT (NaN) is never named."""
    from tokenroof.serving.replay import ttft_outliers

    far = np.array([0.01, -0.02, 0.015, 0.55])
    assert ttft_outliers(far, [0.02] * 4).tolist() == [False, False, False, True]
    assert not ttft_outliers(far, [None] * 4).any()
    near = np.array([0.01, 0.02, -0.01, 0.09])
    assert ttft_outliers(near, [0.01] * 4).tolist() == [False, False, False, True]
    assert not ttft_outliers(near, [0.01, 0.01, 0.01, 0.05]).any()
    assert ttft_outliers(near, [0.01, 0.01, 0.01, 0.04])[3]  # twice 4% is 8%: 9% is past it
    assert not ttft_outliers(np.array([0.01, math.nan, 0.5]), [0.01, 0.01, None])[1]
    assert ttft_outliers(far, [None] * 4).dtype == bool and ttft_outliers(far, [0.02] * 4).dtype == bool


@cache
def open_loop_sweep() -> tuple[Any, float]:
    """TRUTH under Poisson arrivals at 20, 40, 60, 80 and 95% of its saturation (cap 32, 256 + 64-token requests),
    400 requests a load, each its own sample and nothing added, as a bench table of the running batch; and the
    saturation rate."""
    from tokenroof.serving.saturation import saturation_rate

    lengths = (Lengths(256), Lengths(64))
    saturation = saturation_rate(TRUTH, *lengths, 32)
    rows = []
    for seed, share in enumerate((0.2, 0.4, 0.6, 0.8, 0.95)):
        got = simulate(TRUTH, Workload(share * saturation, *lengths, 400), 32, seed, None).summary()
        rows.append(f"{got['running_batch']:.6g},{got['throughput_tok_s']:.8g},{got['tpot_ms']['mean']:.8g},"
                    f"{got['ttft_ms']['mean']:.8g}")  # fmt: skip
    header = "# input_len=256 output_len=64 client=poisson batch_kind=running tpot_kind=tpot\n"
    return parse_csv(header + "batch,throughput_tok_s,tpot_ms,ttft_ms\n" + "\n".join(rows) + "\n"), saturation


def test_an_open_loop_fits_rows_hold_each_points_spread_and_the_rms_leaves_out_the_tail_sample() -> None:
    """The replayed rows of the sweep: each point as measured (the table's ms) beside its replay (the design's, in
    ms), the open-loop rows with their TTFT spread (a few %) and whether the TTFT is a tail sample (one is); the
    TPOT rms over every point, the TTFT rms over the others, by hand."""
    from tokenroof.serving.replay import replayed_points

    table, _ = open_loop_sweep()
    fitted = serving_fit(fit_table(table, None, n_samples=0), table, None, None, "fit")
    assert fitted is not None and fitted.problem is not None
    _, points, designs, _ = fitted.problem
    rows, tpot_rms, ttft_rms = replayed_points(fitted.model, points, designs)
    assert rows == fitted.replay and (tpot_rms, ttft_rms) == (fitted.tpot_rms, fitted.ttft_rms)
    assert [r["batch"] for r in rows] == pytest.approx(table.batch.tolist())
    assert [r["tpot_ms"] for r in rows] == pytest.approx(table.tpot_ms.tolist())
    assert [r["ttft_ms"] for r in rows] == pytest.approx(table.ttft_ms.tolist())
    for row, design in zip(rows, designs, strict=True):
        assert set(row) == {"batch", "tpot_ms", "tpot_ms_replayed", "ttft_ms", "ttft_ms_replayed", "ttft_spread",
                            "ttft_outlier"}  # fmt: skip
        assert row["tpot_ms_replayed"] == pytest.approx(design.tpot_s(fitted.model) * 1e3)
        assert row["ttft_ms_replayed"] == pytest.approx(design.ttft_s(fitted.model) * 1e3)
        assert row["ttft_spread"] == design.ttft_spread and 0.001 < row["ttft_spread"] < 0.1
        assert isinstance(row["ttft_outlier"], bool)
    assert [r["ttft_outlier"] for r in rows] == [False, False, False, False, True]
    tpot = [math.log(r["tpot_ms_replayed"] / r["tpot_ms"]) for r in rows]
    ttft = [math.log(r["ttft_ms_replayed"] / r["ttft_ms"]) for r in rows if not r["ttft_outlier"]]
    assert tpot_rms == pytest.approx(math.sqrt(np.mean(np.square(tpot))))
    assert ttft_rms == pytest.approx(math.sqrt(np.mean(np.square(ttft))))
    closed = closed_loop_table(truth_served("staggered", None), 256)
    closed_fit = serving_fit(fit_table(closed, None, n_samples=0), closed, None, None, "fit")
    assert closed_fit is not None and all(set(r) == set(rows[0]) - {"ttft_spread", "ttft_outlier"}
                                          for r in closed_fit.replay)  # fmt: skip


def test_matched_runs_run_the_server_given_and_the_design_reads_their_spread() -> None:
    """The four runs of an open-loop point run the server it was measured on (its KV cache, prompt budget and per-slot
    KV streams) at the rate found, each its own seed; without a concurrency to match, at the rate given. The point's
    design is their mix, its TTFT spread their mean TTFTs' sd ÷ mean (by hand); a point whose means are a whole run's
    of so many requests is replayed as whole runs of as many, their spread its own; its concurrency read as the table
    measured it: requests
    in flight (GuideLLM) hold more than the running batch (bench) near saturation, so a lower rate meets them."""
    from tokenroof.serving.replay import Point, matched_runs, open_loop_design

    lengths = (Lengths(1000), Lengths(50))
    runs = matched_runs((SERVER, "poisson", 30_000, 512, 16), lengths, 20.0, 10.0, False)
    assert len(runs) == 4 and len({len(r.sequences) for r in runs}) == 1
    for r in runs:
        assert r.kv_capacity_tokens == 30_000 and r.step_passes is not None and r.step_prefill is not None
        assert float(r.step_prefill.max()) <= 512
    assert len({r.summary()["ttft_ms"]["mean"] for r in runs}) == 4
    still = matched_runs((SERVER, "poisson", None, None, None), lengths, 2.0, 0.0, False)
    assert len(still) == 4 and still[0].sequences[1].arrival_s > 0

    point = Point(24.0, 256, 64, 0.02, 0.05, 60.0, client="poisson")
    design = open_loop_design(point, None, None, SERVER, None)
    served = (SERVER, "poisson", None, None, None)
    parts = [Design.of(r, r.measured()) for r in matched_runs(served, (Lengths(256), Lengths(64)), 60.0, 24.0, False)]
    ttft = np.array([d.ttft_s(SERVER) for d in parts])
    assert design.ttft_spread == pytest.approx(float(ttft.std(ddof=1) / ttft.mean()) * math.sqrt(1 / 4), rel=1e-9)
    assert design.ttft_s(SERVER) == pytest.approx(float(ttft.mean()), rel=1e-9)
    # means over a whole run of 300 requests (SGLang's, vLLM's, AIPerf's rate runs): four whole runs of 300, matched
    # on the requests in flight over each whole run, and their own spread is the point's (one run of that length)
    whole = open_loop_design(replace(point, requests=300), None, None, SERVER, None)
    runs = matched_runs(served, (Lengths(256), Lengths(64)), 60.0, 24.0, False, 300)
    assert {len(r.sequences) for r in runs} == {300}
    every = [Design.of(r, np.ones(300, dtype=bool)) for r in runs]
    ttft = np.array([d.ttft_s(SERVER) for d in every])
    assert whole.ttft_spread == pytest.approx(float(ttft.std(ddof=1) / ttft.mean()), rel=1e-9)
    assert whole.ttft_s(SERVER) == pytest.approx(float(ttft.mean()), rel=1e-9)
    in_flight = open_loop_design(replace(point, in_flight=True), None, None, SERVER, None)
    assert float(in_flight.batch @ in_flight.tpot) < float(design.batch @ design.tpot)


def test_an_open_loop_answer_is_the_mean_of_the_runs_that_hold_the_asked_concurrency() -> None:
    """predict's answer at a concurrency on a GuideLLM-like table (requests in flight): the mean TPOT, TTFT (s) and
    output throughput of the four runs matched_runs finds from the rate a closed loop's lifetime gives, exactly."""
    from tokenroof.serving.replay import ServingFit, _closed_loop_at, _open_loop_at, matched_runs

    serving = ServingFit(SERVER, "poisson", True, 2048, "given", "ttft", [], 0.0, 0.0, in_flight=True)
    lengths = (Lengths(200), Lengths(50))
    answer = _open_loop_at(serving, 12.0, lengths, 40_000)
    guess = _closed_loop_at(replace(serving, client="staggered"), 12.0, lengths, 40_000)
    assert answer is not None and guess is not None
    start = 12.0 / (guess[1] + 49 * guess[0])
    runs = [r.summary() for r in matched_runs((SERVER, "poisson", 40_000, 2048, None), lengths, start, 12.0, True)]
    assert len(runs) == 4 and len({r["tpot_ms"]["mean"] for r in runs}) == 4  # four samples of arrivals
    expected = (
        np.mean([r["tpot_ms"]["mean"] for r in runs]) / 1e3,
        np.mean([r["ttft_ms"]["mean"] for r in runs]) / 1e3,
        np.mean([r["throughput_tok_s"] for r in runs]),
    )
    assert answer == pytest.approx(expected, rel=1e-12)
    running = _open_loop_at(replace(serving, in_flight=False), 12.0, lengths, 40_000)
    assert running is not None and running != answer  # the running batch is matched otherwise


def test_an_open_loop_sweep_to_saturation_recovers_the_server_that_ran_it() -> None:
    """Five Poisson loads up to 95% of saturation, 400 requests each: one sample of arrivals a load, as a server gives
    (the 95% load's mean TTFT here 74 ms where its rate gives 42 on average). The scheduler fit replays each at the
    rate that holds its measured batch, over four samples, its TTFT on a loss that lets one queue's tail sample go:
    TPOT replayed within 1%, the saturation rate within 6% of the server's (replayed at each load's measured rate,
    one sample each, and every TTFT on squares: TPOT 6.8% rms, saturation −19%, and prompts chunked at 2,048 tokens
    where they were whole), the tail sample named and the rest of TTFT within 3%."""
    from tokenroof.serving.saturation import saturation_rate

    table, saturation = open_loop_sweep()
    fitted = serving_fit(fit_table(table, None, n_samples=0), table, None, None, "fit")
    assert fitted is not None and fitted.max_num_batched_tokens is None
    assert fitted.tpot_rms < 0.01 and fitted.ttft_rms is not None and fitted.ttft_rms < 0.03
    (tail,) = [row for row in fitted.replay if row["ttft_outlier"]]
    assert tail["batch"] == pytest.approx(26.07, rel=1e-3) and tail["ttft_ms"] > 1.5 * tail["ttft_ms_replayed"]
    (note,) = fitted.misfit()
    assert note.startswith("TTFT at concurrency 26.1 measured 73.67 ms") and "a sample of its queue" in note
    recovered = saturation_rate(fitted.model, Lengths(256), Lengths(64), 32)
    assert recovered == pytest.approx(saturation, rel=0.06)


def test_portable_model_travels_the_scheduler_fit_made_with_the_pool_lengths_and_budget_given() -> None:
    """portable_model on llama-server's sweep: the scheduler's fit with the KV pool, the lengths (where the table
    does not state them) and the prompt budget given, as travelling_of makes it travel; the budget "fit" unless
    told. A table without lengths and none given travels the decode fit."""
    from tokenroof.fit.travel import portable
    from tokenroof.serving.replay import portable_model, travelling_of

    table, fit = serve_sweep()
    bare = replace(table, semantics=replace(table.semantics, input_len=None, output_len=None, stated=()))
    bounded = serving_fit(fit, table, 1500, None, 32)
    assert bounded is not None
    assert portable_model(fit, table, 1500, None, 32) == travelling_of(bounded, fit, table)
    assert portable_model(fit, bare, 1500, (128.0, 64.0), 32) == travelling_of(bounded, fit, bare)
    fitted = serving_fit(fit, table, None, None, "fit")
    assert fitted is not None
    assert portable_model(fit, table) == travelling_of(fitted, fit, table) != travelling_of(bounded, fit, table)
    assert portable_model(fit, bare) == portable(fit, bare)


WORKLOAD_LINES = [
    (
        "staggered",
        True,
        None,
        "fitted",
        None,
        "closed loop, streams staggered, prompts prefilled whole (the best replay)",
    ),
    (
        "burst",
        True,
        2048,
        "engine",
        None,
        "closed loop, every stream started at once, prompts chunked at 2048 tokens per step (the engine's default)",
    ),
    (
        "poisson",
        True,
        None,
        "assumed",
        None,
        "open loop, Poisson arrivals at each point's rate, prompts prefilled whole (assumed: no TTFT to tell)",
    ),
    (
        "staggered",
        False,
        512,
        "given",
        16,
        "closed loop, streams staggered (assumed: the table does not say; '# client=…'), prompts chunked at 512 tokens "
        "per step, per-slot KV streams on 16 slots (a pass per run)",
    ),
]


@pytest.mark.parametrize(("client", "stated", "budget", "source", "slots", "line"), WORKLOAD_LINES)
def test_the_scheduler_fits_workload_line_is_the_headers_words(client, stated, budget, source, slots, line) -> None:
    """ServingFit.describe: the workload the fit assumed in the words every header and `predict` state — the client,
    how prompts were prefilled and why (a given budget needs no why), per-slot KV streams where the server ran them."""
    from tokenroof.serving.replay import ServingFit

    fit = ServingFit(SERVER, client, stated, budget, source, "ttft", [], 0.01, 0.02, kv_slots=slots)
    assert fit.describe() == "online, " + line


def test_a_scheduler_fit_travels_with_its_context_source_and_replay() -> None:
    """travelling_of: the scheduler's model, at the context the prior was made for (else the fit's), the table as
    its source, the prior's label, nothing folded (its prefill is a term of its own), and how it was measured and
    replays (Replayed: client, budget, prefill source, rms, the workload line, slots, the form's rms, the lengths
    replayed at)."""
    from tokenroof.fit.prior import MeasuredWorkload
    from tokenroof.fit.travel import Replayed
    from tokenroof.serving.replay import travelling_of

    table, fit = serve_sweep()
    serving = serving_fit(fit, table, None, None, "fit")
    assert serving is not None
    serving = replace(serving, kv_slots=16, form_rms=(0.04, 0.05))
    t = travelling_of(serving, fit, table)
    assert (t.step_model, t.context_tokens, t.prefill_ratio, t.split) == (serving.model, 160.0, 0.0, True)
    assert (t.source, t.prior) == (table.source, None)
    info = (serving.client, None, "ttft", serving.tpot_rms, serving.ttft_rms, serving.describe(), 16, 0.04)
    assert t.replayed == Replayed(*info, False, *serving.lengths) and serving.lengths == (128.0, 64.0)
    assert travelling_of(replace(serving, form_rms=None), fit, table).replayed.form_tpot_rms is None
    prior = Physics("llama-3.1-8b", "h100-sxm").prior(
        MeasuredWorkload(context_tokens=900.0, input_len=128, output_len=64)
    )
    with_prior = travelling_of(serving, replace(fit, prior=prior), table)
    assert (with_prior.context_tokens, with_prior.prior) == (900.0, prior.label)


@pytest.mark.parametrize(
    ("client", "budget", "prompt"), [("staggered", None, 256), ("burst", None, 256), ("burst", 2048, 3000)]
)
def test_the_scheduler_fit_recovers_the_server_that_made_its_points(client: str, budget: int | None, prompt: int):
    """The scheduler's fit (fit_serving and what it runs: the designs, the start, the solve, the replay) on four
    closed-loop points the scheduler itself made from a known server: it finds the client and the prompt budget
    (whole prompts, or 2,048 tokens a step for 3,000-token prompts), the step's fixed, weight and per-token compute
    times within 1% (the KV reads and per-sequence time fold into one term at one context), replays the points
    exactly and answers at 16 streams, past them, within 0.1%."""
    from tokenroof.serving.replay import _closed_loop_at

    server = truth_served(client, budget)
    lengths = (Lengths(prompt), Lengths(64))
    table = closed_loop_table(server, prompt)
    fitted = serving_fit(fit_table(table, None, n_samples=0), table, None, None, "fit")
    assert fitted is not None
    assert (fitted.client, fitted.max_num_batched_tokens, fitted.budget_source) == (client, budget, "fitted")
    assert fitted.tpot_rms < 1e-4 and fitted.ttft_rms is not None and fitted.ttft_rms < 1e-4 and fitted.misfit() == []
    sm = fitted.model
    assert (sm.t_fixed_s, sm.t_weights_s, sm.t_compute_s) == pytest.approx((3e-3, 12e-3, 60e-6), rel=0.01)
    context = prompt + 64 / 2
    assert sm.memory_time_per_seq_s(context) == pytest.approx(TRUTH.memory_time_per_seq_s(context), rel=0.01)
    far = _closed_loop_at(fitted, 16, lengths, None)
    assert far == pytest.approx(_closed_loop_at(server, 16, lengths, None), rel=1e-3)


def test_a_budget_the_fit_cannot_try_is_named_by_its_replay() -> None:
    """A server chunking at 512 tokens (not among the budgets the fit tries): its replay misses the TTFT by more than
    the noise, and says so."""
    from tokenroof.serving.replay import REPLAY_MISFIT

    table = closed_loop_table(truth_served("staggered", 512), 1024)
    fitted = serving_fit(fit_table(table, None, n_samples=0), table, None, None, "fit")
    assert fitted is not None and fitted.ttft_rms is not None and fitted.ttft_rms > REPLAY_MISFIT
    (said,) = fitted.misfit()
    assert "the table does not look like the workload assumed" in said


def test_distinct_columns_are_numpys_unique_columns() -> None:
    """distinct_columns gives np.unique(axis=1, return_inverse=True)'s arrays: columns with repeats, ties broken by
    the later rows, a lone column, none; by hand on three columns first."""
    from tokenroof.serving.replay import distinct_columns

    distinct, which = distinct_columns(np.array([[2.0, 1.0, 2.0], [0.5, 3.0, 0.5]]))
    assert distinct.tolist() == [[1.0, 2.0], [3.0, 0.5]] and which.tolist() == [1, 0, 1]
    rng = np.random.default_rng(7)
    for rows in (
        rng.integers(0, 3, (6, 500)).astype(float) * [[1.0], [0.5], [128.0], [1e-3], [3.0], [1.0]],
        np.array([[4.0], [2.0]]),
        np.zeros((6, 0)),
    ):
        want, inverse = np.unique(rows, axis=1, return_inverse=True)
        got, which = distinct_columns(rows)
        assert np.array_equal(got, want) and np.array_equal(which, inverse.ravel())


def test_condensed_steps_are_the_same_sums_each_distinct_step_once_per_point() -> None:
    def design(batch, context, tpot, ttft, passes=None) -> Design:  # decode steps (no prompt tokens)
        zeros = np.zeros(len(batch))
        rows = (np.array(batch, dtype=float), np.array(context, dtype=float), zeros, zeros)
        return Design(*rows, np.array(tpot), np.array(ttft), None if passes is None else np.array(passes, dtype=float))

    a = design([1, 1, 2], [10, 10, 20], [0.25, 0.25, 0.5], [0.0, 0.0, 1.0])
    # b's first step is a's: kept apart (another point's); its second weighs in neither mean: left out
    b = design([1, 3, 4], [10, 5, 8], [2.0, 0.0, 1.0], [0.0, 0.0, 0.0])
    stack, point = condensed([a, b])
    assert point.tolist() == [0, 0, 1, 1] and stack.passes is None
    assert stack.batch.tolist() == [1.0, 2.0, 1.0, 4.0] and stack.context.tolist() == [10.0, 20.0, 10.0, 8.0]
    assert stack.tpot.tolist() == [0.5, 0.5, 2.0, 1.0] and stack.ttft.tolist() == [0.0, 1.0, 0.0, 0.0]
    # any step model's means are unchanged; passes (per-slot KV streams) keep steps of other passes apart
    sm = StepModel(t_fixed_s=1e-3, t_weights_s=2e-3, t_compute_s=1e-5, t_kv_token_s=1e-6)
    c = design([2, 2], [20, 20], [1.0, 1.0], [1.0, 1.0], passes=[1, 3])
    stack, point = condensed([a, c])
    assert stack.batch.size == 4 and stack.passes is not None and stack.passes.tolist() == [1.0, 1.0, 1.0, 3.0]
    times = stack.step_times_s(sm)
    for i, d in enumerate((a, c)):
        assert float(stack.tpot[point == i] @ times[point == i]) == pytest.approx(d.tpot_s(sm), rel=1e-12)
        assert float(stack.ttft[point == i] @ times[point == i]) == pytest.approx(d.ttft_s(sm), rel=1e-12)


def test_lengths_past_what_the_replay_simulates_are_refused_naming_the_table(tmp_path: Path) -> None:
    """An output of a million tokens a request ran the replay 97 s into 4 GB before it was bounded: a slip, named."""
    path = tmp_path / "long.csv"
    path.write_text(
        "# client=burst input_len=512 output_len=1000000\nbatch,throughput_tok_s,tpot_ms,ttft_ms\n1,100,10,50\n"
        "8,700,11.4,60\n"
    )
    result = run_cli(["predict", str(path), "--batch", "16"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"{path}: 1,000,000 output tokens a request is past what the scheduler's replay simulates" in result.output


def test_a_server_cap_the_files_show_holds_the_schedulers_answers_past_it() -> None:
    """examples/bench: the server held its running batch at 48 where the client ran 64 streams (TTFT 424 ms measured,
    4,153 tok/s, TPOT 10.8 ms). The scheduler's answer at 64 runs the client's 64 streams against that cap: TTFT the
    queue's, TPOT and throughput the cap's (it had run 64 sequences at once: 35 ms and 5,180 tok/s)."""
    from tests.conftest import ROOT

    answer = run_json(["predict", str(ROOT / "examples" / "bench"), "--batch", "48", "64"])
    at_cap, past = answer["predictions"]
    assert answer["serving"] is not None and past["ttft_ms"] > 300 and past["ttft_ms"] == pytest.approx(424.5, rel=0.2)
    assert past["tpot_ms"] == pytest.approx(at_cap["tpot_ms"], rel=0.03)
    assert past["throughput_tok_s"] == pytest.approx(at_cap["throughput_tok_s"], rel=0.03)


def test_no_server_cap_is_read_where_the_table_did_not_measure_one(tmp_path: Path) -> None:
    """The cap the scheduler's answers take is a running batch measured held while the client's streams grew past it;
    not a concurrency table's estimate (vLLM's files: none), nor one point whose running batch sat below its client's
    (bench's first point read 0.85 at one stream: a ramp, which had capped every answer at 1: 163 tok/s at 16)."""
    from tests.conftest import ROOT

    vllm = run_json(["predict", str(ROOT / "examples" / "vllm"), "--batch", "128"])
    assert vllm["serving"]["server_cap"] is None
    lines = (ROOT / "examples" / "bench" / "summary.csv").read_text().splitlines()
    ramp = [line.replace("1,161.139,6.14522", "0.85,161.139,6.14522") for line in lines if not line.endswith(",64")]
    (tmp_path / "summary.csv").write_text("\n".join(ramp) + "\n")
    answer = run_json(["predict", str(tmp_path / "summary.csv"), "--batch", "16"])
    assert answer["serving"]["server_cap"] is None
    assert answer["predictions"][0]["throughput_tok_s"] == pytest.approx(2115, rel=0.05)
    untimed = [",".join(cell for k, cell in enumerate(line.split(",")) if k != 4) for line in lines]
    (tmp_path / "untimed.csv").write_text("\n".join(untimed) + "\n")
    args = ["predict", str(tmp_path / "untimed.csv"), "--batch", "16", "-m", "llama-3.1-8b", "-H", "h100-sxm"]
    assert "the predictions run the scheduler's model" not in run_cli(args).output  # no TTFT: the decode fit's


def test_a_prompt_budget_tried_that_cannot_hold_the_prompts_is_passed_over(tmp_path: Path) -> None:
    """6,000-token prompts whose TTFT the prompts-in-the-steps replay misses: the fit also tries prefill steps of their
    own at 2,048 tokens, which cannot hold one (vLLM V0 never splits a prompt there). That budget is passed over, not
    the answer (predict had ended with 'raise --max-num-batched-tokens', a flag it does not have)."""
    path = tmp_path / "long.csv"
    path.write_text(
        "# batch_kind=concurrency tpot_kind=tpot client=burst input_len=6000 output_len=256\n"
        "batch,throughput_tok_s,tpot_ms,ttft_ms\n1,113.7,8.114,545.2\n4,328.2,10.96,977\n16,614.9,23.62,1566\n"
        "32,714.4,39.78,2957\n64,776.5,69.96,7402\n"
    )
    answer = run_json(["predict", str(path), "--batch", "128"])
    tried = answer["serving"]["alternatives"]
    assert "prefill steps of their own" in tried  # the steps of their own were tried, whole prompts each
    assert not any(f"prefill steps of their own of up to {b} tokens" in tried for b in (2048, 4096))


def test_past_the_memory_cap_the_warning_says_what_the_schedulers_rows_hold() -> None:
    """A fault test's finds: past the physics' memory cap the scheduler's rows (a full KV cache: preempted sequences
    recomputed, the rest queued) rose while the warning said TPOT stays at the cap's; and the decode step's knee,
    prompts apart (near 263), was printed beside the decode fit's 52.2 with nothing to say which was which."""
    from tokenroof.fit.predict import CAP_FLAT, CAP_SCHEDULED

    specs = ["-m", "llama-3.1-8b", "-H", "h100-sxm"]
    data = run_json(["predict", *map(str, VLLM), "--batch", "64", "512", "--samples", "10", *specs])
    (cap,) = [w for w in data["warnings"] if w.startswith("batches above")]
    assert CAP_SCHEDULED in cap and CAP_FLAT not in cap
    (knee,) = [w for w in data["warnings"] if "prompts apart, lies near batch" in w]
    assert "(the decode fit's knee of 52.2 folds each step's share of prompt compute" in knee
    seed = str(ROOT / "examples" / "h100_7b_seed.csv")
    decode_only = run_json(
        ["predict", seed, "--batch", "512", "--samples", "10", "-m", "llama-2-7b", "-H", "h100-sxm", "--context", "300"]
    )
    assert any(CAP_FLAT in w for w in decode_only["warnings"])
    assert not any(CAP_SCHEDULED in w for w in decode_only["warnings"])


def test_predict_and_advise_at_another_context_say_which_workload_each_runs() -> None:
    """A fault test's find: at --context 2000 on the vLLM sweep advise answered cap 181 at 39.9 ms and predict 49.1 ms
    at 165: advise's decode fit keeps the measured prompts' share and moves only the KV reads, predict's scheduler
    runs 1,872-token prompts; neither said so, and advise called its online fit "no prompts in the steps"."""
    specs = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "2000"]
    predicted = run_json(["predict", *map(str, VLLM), "--batch", "165", "--samples", "10", *specs])
    assert any(
        w.startswith("at each context asked the scheduler runs prompts of that context less half the measured output")
        and "(1,872 tokens at 2,000) with the measured 256-token outputs" in w
        for w in predicted["warnings"]
    )
    advised = run_json(["advise", *map(str, VLLM), "--tpot-slo-ms", "40", "--samples", "10", *specs])
    assert "their prompts' share folded in as measured (the KV reads moved to this context" in advised["source"]
    assert any(
        w.startswith("at another context this answer keeps the measured prompts' share of each step")
        and "(1,872 tokens at 2,000, with the measured 256-token outputs)" in w
        for w in advised["warnings"]
    )
    static = run_json(["advise", str(ROOT / "examples" / "llama-3.1-8b_h100_two_contexts.csv"), "--tpot-slo-ms", "30",
                       "--context", "8192"])  # fmt: skip
    assert static["source"].endswith("the decode step time (no prompts in the steps)")
    assert not any(w.startswith("at another context") for w in static["warnings"])


def test_a_saved_model_keeps_the_kv_cache_predict_answered_with(tmp_path: Path) -> None:
    """A cross-command check's find: predict -m -H ran its answers with the physics' KV pool (preempting past it at
    384 streams), but --save-model dropped it, and simulate --step-model ran an unlimited cache (TTFT 876 ms against
    predict's 1,702) with nothing said. The pool is saved with the model, simulate runs it and says so, and a pool
    given wins."""
    saved = tmp_path / "m.json"
    specs = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "vllm-v1"]
    (row,) = run_json(
        ["predict", *map(str, VLLM), "--batch", "384", "--samples", "10", *specs, "--save-model", str(saved)]
    )["predictions"]
    kv = Physics("llama-3.1-8b", "h100-sxm", engine="vllm-v1").kv_pool_tokens()
    assert json.loads(saved.read_text())["fitted_at"]["kv_cache_tokens"] == kv
    run = [
        "simulate",
        "--step-model",
        str(saved),
        "--concurrency",
        "384",
        "--max-num-seqs",
        "1024",
        "--client",
        "burst",
    ]
    run += ["--input-len", "1024", "--output-len", "256"]
    data = run_json(run)
    (point,) = data["points"]
    assert point["kv_cache_tokens"] == kv and point["preemptions"] > 0
    assert point["tpot_ms"]["mean"] == pytest.approx(row["tpot_ms"], rel=1e-6)
    assert point["ttft_ms"]["mean"] == pytest.approx(row["ttft_ms"], rel=1e-6)
    assert any(
        w.startswith(f"a KV cache of {kv:,} tokens, the pool predict sized for llama-3.1-8b") for w in data["warnings"]
    )
    given = run_json([*run, "--kv-cache-tokens", "900000"])
    assert given["points"][0]["kv_cache_tokens"] == 900_000 and not any(
        "pool predict sized" in w for w in given["warnings"]
    )


def test_predict_replays_a_named_tensorrt_llm_as_it_admits(tmp_path: Path) -> None:
    """A cross-command check's find: predict --engine tensorrt-llm replayed the files with vLLM's on-demand admission
    (TTFT 914 ms at 384 streams) where simulate --fit of the same flags reserved each whole output (2,059 ms), with
    nothing said. The replay, its answers, simulate --fit and the saved model now admit alike, and say so."""
    saved = tmp_path / "trt.json"
    specs = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "tensorrt-llm"]
    data = run_json(
        ["predict", *map(str, VLLM), "--batch", "384", "--samples", "10", *specs, "--save-model", str(saved)]
    )
    (row,) = data["predictions"]
    assert any("GUARANTEED_NO_EVICT" in w for w in data["warnings"])
    assert json.loads(saved.read_text())["fitted_at"]["replay"]["reserve_output"] is True
    loop = ["--concurrency", "384", "--max-num-seqs", "1024", "--client", "burst", "--input-len", "1024"]
    loop += ["--output-len", "256"]
    as_json = tmp_path / "predict.json"  # predict --json as a step model: its scheduler's model, pool and admission
    as_json.write_text(json.dumps(data))
    sources = ([*specs, "--fit", str(ROOT / "examples" / "vllm")], ["--step-model", str(saved)])
    for source in (*sources, ["--step-model", str(as_json)]):
        ran = run_json(["simulate", *source, *loop])
        (point,) = ran["points"]
        assert point["tpot_ms"]["mean"] == pytest.approx(row["tpot_ms"], rel=1e-6), source
        assert point["ttft_ms"]["mean"] == pytest.approx(row["ttft_ms"], rel=1e-6), source
        assert point["preemptions"] == 0 and any("GUARANTEED_NO_EVICT" in w for w in ran["warnings"])
    # past the memory's cap it says what the reservation holds, not that sequences are preempted (a review's find)
    small = ["-m", "llama-3.1-8b", "-H", "a100-40gb", "--engine", "tensorrt-llm"]
    capped = run_json(["predict", *map(str, VLLM), "--batch", "256", "--samples", "10", *small])["warnings"]
    (past,) = [w for w in capped if w.startswith("batches above 160")]
    assert "at most 142 run at once at these lengths" in past and "preempts" not in past
    vllm = run_json(
        ["predict", *map(str, VLLM), "--batch", "384", "--samples", "10", *specs[:4], "--engine", "vllm-v1"]
    )
    assert not any("GUARANTEED_NO_EVICT" in w for w in vllm["warnings"])


def test_predict_advise_and_simulate_fit_replay_a_named_engine_alike(tmp_path: Path) -> None:
    """A journey check's find: with --engine vllm-v0 (prefill steps of their own) predict replayed the files so, while
    advise and simulate --fit replayed them with whole prompts "(the engine's default)", another model from the same
    inputs (TTFT 39% apart at advise's cap); and advise then ran a fit replayed with prefill steps of their own as
    chunked steps (p99 TTFT 1,732 ms where simulate --fit read 1,591). One rule now (engine_scheduling) for all three,
    and advise runs the scheduling the fit was replayed with."""
    specs = ["-m", "llama-2-7b", "-H", "h100-sxm", "--engine", "vllm-v0"]  # 4,096 positions: V0 does not chunk
    saved = tmp_path / "v0.json"
    predicted = run_json(
        ["predict", *map(str, VLLM), "--batch", "64", "--samples", "10", *specs, "--save-model", str(saved)]
    )
    semantics = predicted["serving"]["semantics"]
    assert "prefilled in steps of their own" in semantics and predicted["serving"]["separate_prefill"] is True
    advised = run_json(["advise", *map(str, VLLM), "--tpot-slo-ms", "40", "--ttft-slo-ms", "3000", *specs])
    assert f"({semantics})" in advised["source"] and "(simulate --client burst " in advised["source"]
    cap = str(advised["max_num_seqs"])
    loop = ["--concurrency", cap, "--max-num-seqs", cap, "--client", "burst", "--input-len", "1024"]
    loop += ["--output-len", "256"]
    for source in ([*specs, "--fit", str(ROOT / "examples" / "vllm")], ["--step-model", str(saved)]):
        (point,) = run_json(["simulate", *source, *loop])["points"]
        assert point["ttft_ms"]["p99"] == pytest.approx(advised["at_cap"]["ttft_ms"]["p99"], rel=1e-6), source
        assert point["tpot_ms"]["p99"] == pytest.approx(advised["at_cap"]["tpot_ms"]["p99"], rel=1e-6), source


def test_points_past_the_cap_are_said_to_be_left_out_of_the_replay() -> None:
    """A journey check's find: bench's point at concurrency 64 (its server held 48, the rest queued) was left out of
    the scheduler's replay and of the rms printed beside it, without a word."""
    said = run_json(["predict", str(ROOT / "examples" / "bench"), "--batch", "48"])["warnings"]
    assert (
        "point at concurrency 64 left out of the scheduler's replay and its rms (past the cap the data show, where the "
        "server preempted or queued)" in said
    )
    assert not any(
        "left out of the scheduler" in w for w in run_json(["predict", *map(str, VLLM), "--batch", "64"])["warnings"]
    )


def test_a_row_the_scheduler_answers_names_the_term_that_binds_its_step() -> None:
    """A journey check's find: on GuideLLM's sweep every row read "overhead", the decode fit's split (a line cannot
    tell a per-step overhead from the weights' read), while the scheduler that answered the row puts 5.25 ms in the
    weights and 0.78 ms in overhead; the bound is now the answering model's."""
    data = run_json(["predict", str(ROOT / "examples" / "guidellm.json"), "--batch", "4.06", "40.7", "--samples", "10"])
    sm = data["serving"]["step_model"]
    assert sm["t_weights_s"] > 5 * sm["t_fixed_s"]
    assert [row["bound"] for row in data["predictions"]] == ["weights", "weights"]


def test_a_fit_of_several_workloads_is_not_said_to_have_measured_their_mean() -> None:
    """A journey check's find: simulate --fit of the 1,024- and the 4,096-token vLLM runs at 4,096 in warned "where
    the files measured 1,463 / 256", their mean, a workload they never ran."""
    fits = ["--fit", str(ROOT / "examples" / "vllm"), "--fit", str(ROOT / "examples" / "vllm-in4096")]
    run = ["simulate", *fits, "--concurrency", "8", "--max-num-seqs", "8", "--client", "burst", "--output-len", "256"]
    assert not any("where the files measured" in w for w in run_json([*run, "--input-len", "4096"])["warnings"])
    one = ["simulate", "--fit", str(ROOT / "examples" / "vllm"), *run[5:], "--input-len", "4096"]
    assert any("where the files measured 1,024 / 256" in w for w in run_json(one)["warnings"])
