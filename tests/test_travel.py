"""Step models that travel: predict --save-model → --step-model, split by the physics or said to be folded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SEED_TABLE, run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.fit.predict import MeasuredWorkload, predict_table, prior_from_specs
from tokenroof.fit.travel import portable, read_step_model, split_terms
from tokenroof.io.measurements import parse_csv, read_table
from tokenroof.specs import Precision, load_hardware, load_model

DECODE = "# batch_kind=static tpot_kind=step input_len=1000 output_len=300\nbatch,tpot_ms\n"
POINTS = "1,13.0\n8,14.1\n32,17.2\n64,21.9\n128,31.5\n"


def physics(table_text: str, decode_only: bool) -> tuple:
    table = parse_csv(table_text)
    workload = MeasuredWorkload.from_table(table, decode_only=decode_only)
    prior = prior_from_specs(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16"), workload)
    return table, prior


def test_split_terms_leave_the_model_unchanged_where_it_was_fitted_and_follow_the_context_elsewhere() -> None:
    table, prior = physics(DECODE + POINTS, decode_only=True)
    fit = predict_table(table, [256], prior, n_samples=0).fit
    folded, split = fit.step_model, split_terms(fit.step_model, prior)
    ctx = prior.context_tokens
    assert ctx == pytest.approx(1150)
    assert split.t_kv_token_s > 0 and folded.t_kv_token_s == 0
    for b in (1.0, 16.0, 200.0):
        assert split.step_s(b, b * ctx) == pytest.approx(float(folded.step_time_s(b)), rel=1e-9)
    # at four times the context the KV reads grow by the physics' bytes at the fitted bandwidth efficiency
    assert split.step_s(64, 64 * 4 * ctx) > 1.2 * split.step_s(64, 64 * ctx)


def test_the_prompt_share_is_taken_out_of_the_compute_for_a_scheduler_that_adds_prompts_itself() -> None:
    online = "# batch_kind=running tpot_kind=tpot input_len=1000 output_len=300\nbatch,tpot_ms\n" + POINTS
    table, prior = physics(online, decode_only=False)
    assert prior.prefill_ratio == pytest.approx(1000 / 300)
    fit = predict_table(table, [256], prior, n_samples=0).fit
    split = split_terms(fit.step_model, prior)
    # per running sequence the split model computes only its own token: the fitted compute less the prompt share
    per_seq = split.t_compute_s + split.t_attn_token_s * prior.context_tokens
    share = prior.compute_floor_s / prior.step_compute_floor_s
    assert per_seq == pytest.approx(fit.step_model.t_compute_s * share, rel=1e-9)
    assert share < 0.5  # 1000-in/300-out: the prompts are most of the GEMM tokens


def test_save_model_round_trips_into_simulate(tmp_path: Path) -> None:
    saved = tmp_path / "model.json"
    table_path = tmp_path / "decode.csv"
    table_path.write_text(DECODE + POINTS)
    data = run_json(
        [
            "predict",
            str(table_path),
            "--batch",
            "256",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm",
            "--samples",
            "10",
            "--save-model",
            str(saved),
        ]
    )
    travelling = read_step_model(saved)
    assert travelling.split and travelling.context_tokens == pytest.approx(1150)
    assert travelling.prior is not None and "llama-3.1-8b" in travelling.prior
    assert json.loads(saved.read_text())["format"] == "tokenroof step model"
    sim = run_json(
        [
            "simulate",
            "--step-model",
            str(saved),
            "--rate",
            "2",
            "--num-requests",
            "200",
            "--input-len",
            "1000",
            "--output-len",
            "300",
        ]
    )
    assert any("split out with the physics" in w for w in sim["warnings"])
    # the predict --json output itself is accepted too
    as_json = tmp_path / "predict.json"
    as_json.write_text(json.dumps(data))
    assert read_step_model(as_json).step_model.t_weights_s == pytest.approx(data["model"]["t_weights_s"])


def test_a_folded_fit_says_where_it_holds() -> None:
    """simulate --fit of a table without a prior once gave one TPOT for 100- and 4,000-token prompts silently."""

    def run(prompt_tokens: int) -> dict:
        args = ["simulate", "--fit", str(SEED_TABLE), "--rate", "1", "--num-requests", "100", "--output-len", "50"]
        return run_json([*args, "--input-len", str(prompt_tokens)])

    short, long = run(100), run(4000)
    assert short["tpot_ms"]["p50"] == pytest.approx(long["tpot_ms"]["p50"], rel=0.05)  # folded: not adjusted...
    assert any("at a workload it does not state" in w for w in long["warnings"])  # ...and it says so
    seed_at = parse_csv("# input_len=250 output_len=100\n" + SEED_TABLE.read_text())
    travelling = portable(predict_table(seed_at, [1], n_samples=0).fit, seed_at)
    note = travelling.notes(4000 + 25)[0]
    assert "without a physics prior" in note and "its TPOT is not adjusted" in note  # ...and says so


def test_fit_with_model_and_hardware_is_the_prior_not_a_conflict(tmp_path: Path) -> None:
    table_path = tmp_path / "decode.csv"
    table_path.write_text(DECODE + POINTS)
    args = [
        "simulate",
        "--fit",
        str(table_path),
        "-m",
        "llama-3.1-8b",
        "-H",
        "h100-sxm",
        "--rate",
        "2",
        "--num-requests",
        "200",
        "--input-len",
        "4000",
        "--output-len",
        "300",
    ]
    long = run_json(args)
    short = run_json([*args[:-4], "--input-len", "200", "--output-len", "300"])
    assert long["tpot_ms"]["p50"] > 1.05 * short["tpot_ms"]["p50"]  # the KV reads follow the context
    assert long["kv_cache_tokens"] > 0


def test_bad_step_model_files_name_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"t_fixed_s": 0.001, "t_weights_s": -1, "t_compute_s": 0, "t_kv_token_s": 0}))
    with pytest.raises(TokenroofError, match="t_weights_s = -1; must be a non-negative number"):
        read_step_model(bad)
    bad.write_text(json.dumps({"t_fixed_s": 0.001}))
    with pytest.raises(TokenroofError, match=r"missing required field\(s\): t_weights_s, t_compute_s, t_kv_token_s"):
        read_step_model(bad)
    result = run_cli(["simulate", "--step-model", str(bad), "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "1"])
    assert result.exit_code == 2 and "give one step-model source" in result.stderr


def test_the_table_context_is_required_for_a_fit_with_a_prior(tmp_path: Path) -> None:
    result = run_cli(["simulate", "--fit", str(SEED_TABLE), "-m", "llama-2-7b", "-H", "h100-sxm", "--rate", "1"])
    assert result.exit_code == 2 and "needs the workload the table was measured at" in result.stderr
    assert np.isfinite(read_table([SEED_TABLE]).batch).all()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"format": "tokenroof step model", "step_model": [], "fitted_at": 3}',
            "step_model = []; must be a JSON object (and 1 more: fitted_at)",
        ),
        (
            '{"format": "tokenroof step model", "fitted_at": [1], "step_model": {"t_fixed_s": 0, "t_weights_s": 0.01, '
            '"t_compute_s": 0, "t_kv_token_s": 0, "overlap": 2}}',
            "step_model.overlap = 2; must be in [0, 1] (and 1 more: fitted_at)",
        ),
        (
            '{"t_fixed_s": 0, "t_weights_s": 0.01, "t_compute_s": 0, "t_kv_token_s": true}',
            "t_kv_token_s = true; must be a number",
        ),
        (
            '{"t_fixed_s": 0, "t_weights_s": 0.01, "t_compute_s": 0, "t_kv_token_s": 0, "num_experts": 2, '
            '"experts_per_token": 4}',
            "experts_per_token exceeds num_experts",
        ),
        (
            '{"format": "tokenroof step model", "fitted_at": {"context_tokens": "lots"}, '
            '"step_model": {"t_fixed_s": 0, "t_weights_s": 0.01, "t_compute_s": 0, "t_kv_token_s": 0}}',
            'fitted_at.context_tokens = "lots"; must be a number',
        ),
        (
            '{"t_fixed_s": 0, "t_weights_s": 0.01, "t_compute_s": 0, "t_kv_token_s": 0, "batch_factors": [[0.5, 1]]}',
            "batch_factors = […]; pairs a batch outside [1, 1e+09] with a factor",
        ),
        (
            '{"t_fixed_s": 0, "t_weights_s": 0.01, "t_compute_s": 0, "t_kv_token_s": 0, '
            '"batch_factors": [[2, 1], [2, 0.9]]}',
            "holds one batch twice",
        ),
        (
            '{"t_fixed_s": 0, "t_weights_s": 0.01, "t_compute_s": 0, "t_kv_token_s": 0, "batch_factors": [[2, 0]]}',
            "must be a positive number",
        ),
        (
            '{"t_fixed_s": 0, "t_weights_s": 0.01, "t_compute_s": 0, "t_kv_token_s": 0, "batch_factors": [2, 1]}',
            "must be a list of [batch, factor] pairs",
        ),
        ("[1, 2]", "expected a JSON object"),
        ("{", "not valid JSON"),
    ],
)
def test_malformed_saved_models_are_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(content)
    with pytest.raises(TokenroofError) as info:
        read_step_model(path)
    assert message in str(info.value)


def test_a_folded_online_fit_does_not_pay_for_the_prompts_twice(tmp_path: Path) -> None:
    """An online fit's terms already carry the prompts: the scheduler once added them again (70 ms at batch 128
    where 21.3 ms was measured; advise then capped at 56 with 1,713 tok/s against 6,000 measured)."""
    from tests.test_trust import KNEE

    stated = tmp_path / "knee.csv"
    stated.write_text("# input_len=1000 output_len=200\n" + KNEE.read_text())
    table = read_table([stated])
    travelling = portable(predict_table(table, [1], n_samples=0).fit, table)
    sm = travelling.step_model
    assert sm.prompts_folded
    assert sm.step_s(128, 128 * 1100, 128 * 5, 128 / 200 * 1000**2) == pytest.approx(sm.step_s(128, 128 * 1100))
    assert sm.step_s(128, 128 * 1100) * 1e3 == pytest.approx(21.3, rel=0.05)
    advice = run_json(
        [
            "advise",
            str(stated),
            "--input-len",
            "1000",
            "--output-len",
            "200",
            "--tpot-slo-ms",
            "30",
            "--slo-statistic",
            "mean",
        ]
    )
    assert 150 < advice["max_num_seqs"] < 220 and advice["at_cap"]["throughput_tok_s"] > 5000
    # the table states its workload: the flags describe the target, not the measurement (the cap moves by at most
    # one: a closed loop's replacement misses the step planned as its predecessor ends, one step in `output` each)
    assert advice["max_num_seqs"] == pytest.approx(
        run_json(
            [
                "advise",
                str(stated),
                "--input-len",
                "300",
                "--output-len",
                "100",
                "--tpot-slo-ms",
                "30",
                "--slo-statistic",
                "mean",
            ]
        )["max_num_seqs"],
        abs=1,
    )


def test_a_split_model_is_exactly_the_fit_at_the_fitted_context() -> None:
    """The KV reads split out never exceed the fitted cost per sequence (the seed at 300 tokens once ran 23% slow)."""
    seed = parse_csv("# batch_kind=static tpot_kind=step\n" + SEED_TABLE.read_text())
    workload = MeasuredWorkload.from_table(seed, context=300)
    prior = prior_from_specs(load_model("llama-2-7b"), load_hardware("h100-sxm"), Precision.create("bf16"), workload)
    fit = predict_table(seed, [1], prior, n_samples=0).fit
    split = split_terms(fit.step_model, prior)
    for b in (1.0, 32.0, 128.0, 300.0):
        assert split.step_s(b, b * 300) == pytest.approx(float(fit.step_model.step_time_s(b)), rel=1e-9)


def test_a_hand_written_step_model_is_taken_as_written(tmp_path: Path) -> None:
    """Issue 27: a hand-written --step-model always got 'its KV reads stay as measured', though its t_kv_token_s
    moves with every sequence's context in the scheduler."""
    path = tmp_path / "m.json"
    path.write_text('{"t_fixed_s": 0.001, "t_weights_s": 0.005, "t_compute_s": 2e-5, "t_kv_token_s": 5e-8}')
    assert read_step_model(path).notes(2048) == []
    path.write_text(
        '{"t_fixed_s": 0.001, "t_weights_s": 0.005, "t_compute_s": 2e-5, "t_kv_token_s": 0, "t_seq_s": 1e-4}'
    )
    (note,) = read_step_model(path).notes(2048)
    assert "no KV cost per context token" in note


def test_measured_departures_travel_with_the_saved_model(tmp_path: Path) -> None:
    """A scheduler fit's batch_factors are written by --save-model, read back exactly, and named in its notes."""
    from tokenroof.fit.travel import Replayed, Travelling
    from tokenroof.model.stepmodel import StepModel

    sm = StepModel(1e-2, 5e-4, 8e-4, 0.0, 1.7e-3, batch_factors=((1.0, 0.9), (2.0, 1.1), (16.0, 0.97)))
    info = Replayed("staggered", None, "ttft", 0.067, 0.107, "online, closed loop, streams staggered", None)
    path = tmp_path / "m.json"
    path.write_text(Travelling(sm, 160.0, 0.0, True, "sweep", None, info).to_json())
    back = read_step_model(path)
    assert back.step_model == sm
    (note,) = back.notes(160.0)
    assert "in range its decode steps take the measured departures from these terms (×0.90 at 1, ×1.10 at 2, " in note
    assert "×0.97 at 16 sequences; fading to none by 32)" in note


def test_predict_json_of_a_scheduler_fit_travels_as_the_saved_model(tmp_path: Path) -> None:
    """`predict --json` of files with TTFT carries the scheduler's model under "serving": --step-model runs it, as
    --save-model's file (its top-level "model", the decode fit, prices a prompt's prefill at nothing)."""
    from tests.conftest import ROOT

    files = str(ROOT / "examples" / "vllm")
    as_json, saved = tmp_path / "predict.json", tmp_path / "model.json"
    as_json.write_text(json.dumps(run_json(["predict", files, "--batch", "128", "--save-model", str(saved)])))
    one, other = read_step_model(as_json), read_step_model(saved)
    assert one.step_model == other.step_model and one.replayed == other.replayed and one.split
    assert one.replayed is not None and one.replayed.client == "burst" and one.prices_prefill


def test_a_scheduler_fit_says_its_kv_reads_stay_only_where_they_do(tmp_path: Path) -> None:
    """Fitted at one context without a prior, the KV reads stay as measured at another context, said; fitted across
    two contexts they were fitted per token and move with the context: no such note."""
    from tests.conftest import ROOT

    one, two = tmp_path / "one.json", tmp_path / "two.json"
    run_json(["predict", str(ROOT / "examples" / "vllm"), "--batch", "64", "--save-model", str(one)])
    both = [str(ROOT / "examples" / "vllm"), str(ROOT / "examples" / "vllm-in4096")]
    run_json(["predict", *both, "--batch", "64", "--save-model", str(two)])
    assert read_step_model(two).step_model.t_kv_token_s > 0
    notes = {path: read_step_model(path).notes(4224.0) for path in (one, two)}
    assert any("they are not moved" in n and "at 4,224" in n for n in notes[one])
    assert not any("not moved" in n for n in notes[two])


def test_a_scheduler_fit_run_at_other_lengths_than_it_replayed_says_so(tmp_path: Path) -> None:
    """The saved model keeps the lengths the files measured (1,024 in / 256 out); simulate at its own defaults
    (1,000 / 300) says its replay error holds for those, not these; at the files' lengths nothing is said."""
    from tests.conftest import ROOT

    saved = tmp_path / "model.json"
    run_json(["predict", str(ROOT / "examples" / "vllm"), "--batch", "128", "--save-model", str(saved)])
    replayed = read_step_model(saved).replayed
    assert replayed is not None and (replayed.input_len, replayed.output_len) == (1024, 256)
    args = ["simulate", "--step-model", str(saved), "--concurrency", "16", "--client", "burst"]
    said = [w for w in run_json(args)["warnings"] if w.startswith("run at")]
    assert said == [
        "run at 1,000 prompt / 300 output tokens, where the files measured 1,024 / 256: its replay error holds for "
        "theirs (give their lengths to replay the files)"
    ]
    at_theirs = run_json([*args, "--input-len", "1024", "--output-len", "256"])
    assert not any(w.startswith("run at") for w in at_theirs["warnings"])


def test_a_scheduler_fit_of_a_capped_server_says_when_it_runs_under_another_cap(tmp_path: Path) -> None:
    """examples/bench: the server held its running batch at 48 while its client ran 64 streams. The saved model
    keeps that cap; simulate under its default cap of 256 says so and how to run it as measured; under 48, nothing."""
    from tests.conftest import ROOT

    saved = tmp_path / "model.json"
    run_json(["predict", str(ROOT / "examples" / "bench"), "--batch", "64", "--save-model", str(saved)])
    replayed = read_step_model(saved).replayed
    assert replayed is not None and replayed.server_cap == 48
    args = ["simulate", "--step-model", str(saved), "--concurrency", "64", "--input-len", "512", "--output-len", "128"]
    said = [w for w in run_json(args)["warnings"] if "held its running batch" in w]
    assert said == [
        "the files' server held its running batch at 48 (its client ran more streams, which queued); run here under "
        "a cap of 256 (--max-num-seqs 48 runs it as measured)"
    ]
    capped = run_json([*args, "--max-num-seqs", "48"])
    assert not any("held its running batch" in w for w in capped["warnings"])
    assert capped["points"][0]["ttft_ms"]["p50"] > 150


def test_a_saved_model_with_no_lengths_is_refused(tmp_path: Path) -> None:
    """A saved scheduler fit whose replayed lengths are 0 is a slip: named when read (it had divided by them)."""
    from tests.conftest import ROOT

    saved = tmp_path / "model.json"
    run_json(["predict", str(ROOT / "examples" / "vllm"), "--batch", "128", "--save-model", str(saved)])
    data = json.loads(saved.read_text())
    data["fitted_at"]["replay"]["input_len"] = 0
    saved.write_text(json.dumps(data))
    with pytest.raises(TokenroofError, match="input_len"):
        read_step_model(saved)
