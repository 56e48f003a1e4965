"""`tokenroof predict` through the CLI: the DESIGN.md JSON contract, tables, plots, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DATA, SEED_TABLE, run_cli, run_json

SEED = str(SEED_TABLE)
KEYS = {
    "batch",
    "throughput_tok_s",
    "tpot_ms",
    "bound",
    "throughput_tok_s_low",
    "throughput_tok_s_high",
    "tpot_ms_low",
    "tpot_ms_high",
}


def test_founding_question_json_contract() -> None:
    data = run_json(["predict", SEED, "--batch", "256", "512", "--critical-batch", "128", "--samples", "50"])
    assert {"predictions", "critical_batch", "model", "warnings"} <= set(data)
    assert [p["batch"] for p in data["predictions"]] == [256, 512]
    for point in data["predictions"]:
        assert set(point) >= KEYS
        assert point["tpot_ms_low"] <= point["tpot_ms"] <= point["tpot_ms_high"]
    assert data["predictions"][0]["tpot_ms"] == pytest.approx(37, rel=0.12)
    assert data["predictions"][1]["throughput_tok_s"] == pytest.approx(7000, rel=0.12)
    assert data["model"]["method"] == "pinned"


def test_with_physics_prior_and_table_output(tmp_path: Path) -> None:
    plot = tmp_path / "fit.png"
    result = run_cli(
        [
            "predict",
            SEED,
            "--batch",
            "256,512",
            "-m",
            "llama-2-7b",
            "-H",
            "h100-sxm",
            "--context",
            "300",
            "--samples",
            "30",
            "--plot",
            str(plot),
        ]
    )
    assert result.exit_code == 0, result.output
    assert "predictions (90% intervals)" in result.stdout
    assert "with the physics of llama-2-7b" in result.stdout.replace("\n", " ")
    assert plot.stat().st_size > 10_000


def test_curve_from_the_shared_data() -> None:
    curve = str(DATA / "mmg_offline_decode_llama2_7b_h100_64gb_vllm.csv")
    data = run_json(["predict", curve, "--batch", "200", "--samples", "30"])
    assert data["predictions"][0]["tpot_ms"] > 37  # beyond the last measured point (160: 37 ms)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.csv", "--batch", "8"], "missing.csv: cannot read"),
        ([SEED, "--batch", "0"], "batch sizes must be positive"),
        ([SEED, "--batch", "8", "-m", "llama-2-7b"], "give both --model and --hardware"),
        ([SEED, "--batch", "8", "--critical-batch", "-3"], "--critical-batch must be above 0"),
    ],
)
def test_bad_input(args: list[str], message: str) -> None:
    result = run_cli(["predict", *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_malformed_csv_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("batch,tpot_ms\n1,10\n2,oops\n")
    result = run_cli(["predict", str(bad), "--batch", "8"])
    assert result.exit_code == 2
    assert f"{bad}:3: tpot_ms 'oops' is not a number" in result.stderr


def test_lengths_given_against_the_files_own_are_said_not_used() -> None:
    """vLLM's files state the lengths they measured (1024 in / 256 out): --input-len 4096 beside them is said not used,
    and the answer is the files' own (the prior and the scheduler's replay once took different ones); lengths that
    agree with the files are said nothing of."""
    from tests.conftest import ROOT

    files = str(ROOT / "examples" / "vllm")
    plain = run_json(["predict", files, "--batch", "64"])
    other = run_json(["predict", files, "--batch", "64", "--input-len", "4096", "--output-len", "256"])
    same = run_json(["predict", files, "--batch", "64", "--input-len", "1024", "--output-len", "256"])
    said = [w for w in other["warnings"] if "not used" in w]
    assert len(said) == 1 and said[0].startswith("--input-len 4096 not used: the files state the lengths they measured")
    assert other["predictions"] == plain["predictions"] == same["predictions"]
    assert not any("not used" in w for w in same["warnings"])


def test_save_model_alone_predicts_at_the_measured_batches(tmp_path: Path) -> None:
    """--save-model needs no --batch (the answer is then at the measured batches); without either, --batch is asked
    for, by name."""
    from tests.conftest import ROOT

    saved = tmp_path / "model.json"
    answer = run_json(["predict", str(ROOT / "examples" / "vllm"), "--save-model", str(saved)])
    assert [p["batch"] for p in answer["predictions"]] == [1, 4, 16, 32, 64, 128] and saved.is_file()
    refused = run_cli(["predict", str(ROOT / "examples" / "vllm")])
    assert refused.exit_code != 0 and "give --batch, the batches to predict" in refused.output


def test_a_batch_under_one_stream_has_no_closed_loop_answer() -> None:
    """A closed loop runs whole streams: the scheduler's answer at 0.5 had been its answer at 1 (twice the throughput
    per stream); it is left to the decode fit's line, and said. A table's batch may be under one (an open loop's held
    concurrency at a light rate), so the batch itself is not refused."""
    from tests.conftest import ROOT

    answer = run_json(["predict", str(ROOT / "examples" / "vllm"), "--batch", "0.5", "1"])
    half, one = answer["predictions"]
    assert "ttft_ms" not in half and one["ttft_ms"] > 0
    assert half["throughput_tok_s"] == pytest.approx(0.5 * 1000 / half["tpot_ms"])
    assert any(w.startswith("batch 0.5: under one stream, which no closed loop runs") for w in answer["warnings"])


def test_lengths_that_nothing_prices_are_said_to_change_nothing() -> None:
    """A CSV with no TTFT and no --model/--hardware: --input-len/--output-len price no prompt, and the answer says so
    (it had printed the same answer and asked for them); with the physics they price it, and nothing is said."""
    args = ["predict", str(SEED_TABLE), "--batch", "256", "--input-len", "4096", "--output-len", "256"]
    (said,) = [w for w in run_json(args)["warnings"] if "change nothing" in w]
    assert said.startswith("--input-len 4096 and --output-len 256 change nothing here: with no TTFT in the table")
    priced = run_json([*args, "-m", "llama-2-7b", "-H", "h100-sxm"])["warnings"]
    assert not any("change nothing" in w for w in priced)


def test_physics_flags_without_a_model_and_hardware_are_said_unread() -> None:
    """--tp, --dtype, --kv-dtype, --compute-dtype feed the physics prior: without --model/--hardware they had changed
    nothing and said nothing, in predict and in advise; with them, nothing is said."""
    base = ["predict", str(SEED_TABLE), "--batch", "256"]
    said = run_json([*base, "--tp", "4", "--dtype", "fp8"])["warnings"]
    assert "without --model and --hardware nothing here reads --tp 4, --dtype fp8 (the physics prior's flags)" in said
    advised = run_json(["advise", str(SEED_TABLE), "--tpot-slo-ms", "30", "--kv-dtype", "fp8"])["warnings"]
    assert "without --model and --hardware nothing here reads --kv-dtype fp8 (the physics prior's flags)" in advised
    priced = run_json([*base, "--tp", "2", "-m", "llama-2-7b", "-H", "h100-sxm", "--context", "300"])["warnings"]
    assert not any("nothing here reads" in w for w in priced) and not any(
        "nothing here reads" in w for w in run_json(base)["warnings"]
    )


def test_flags_the_answer_does_not_read_are_said_unread() -> None:
    """A fault test's finds: --context on a table that states none (read as its measured context, which only the
    prior reads), --max-num-batched-tokens on advise's decode-only answer and --samples on its scheduler answer had
    changed nothing and said nothing; where they are read, nothing is said."""
    unread = "--context 300 changes nothing here: the table states no context"
    few = ["--samples", "20"]  # read by both, and by the decode-only answer: the intervals' draws, kept few here
    for command in (["predict", SEED, "--batch", "256", *few], ["advise", SEED, "--tpot-slo-ms", "30", *few]):
        assert any(w.startswith(unread) for w in run_json([*command, "--context", "300"])["warnings"])
        priced = run_json([*command, "--context", "300", "-m", "llama-2-7b", "-H", "h100-sxm"])["warnings"]
        assert not any(w.startswith(unread) for w in priced)
    budget = "--max-num-batched-tokens 2048 changes nothing here: the decode-only answer"
    decode = run_json(["advise", SEED, "--tpot-slo-ms", "30", "--max-num-batched-tokens", "2048", *few])["warnings"]
    assert any(w.startswith(budget) for w in decode)
    lengths = ["--input-len", "300", "--output-len", "100", "--max-num-batched-tokens", "2048"]
    scheduler = run_json(["advise", SEED, "--tpot-slo-ms", "30", *lengths, "--samples", "20"])["warnings"]
    assert not any(w.startswith(budget) for w in scheduler)
    assert any(w.startswith("--samples 20 changes nothing here: the scheduler's answer") for w in scheduler)
    assert not any(
        w.startswith("--samples")
        for w in run_json(["advise", SEED, "--tpot-slo-ms", "30", "--samples", "20"])["warnings"]
    )


def test_a_fitted_term_below_a_nanosecond_prints_as_zero() -> None:
    """An optimiser's bound is not a cost: the scheduler's overhead read 1.25e-09 ms on one machine and 1.86e-09 on
    another (the guide's example then differed by machine); below a nanosecond a term prints 0."""
    from tokenroof.cli.render import term

    assert [term(v, 1e3) for v in (1.86e-12, 0.0, -1e-15, 1e-9, 4.47e-3)] == ["0", "0", "0", "1e-06", "4.47"]
    assert term(2.5e-5, 1e6) == "25"
