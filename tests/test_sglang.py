"""`sglang.bench_serving --output-file` JSON Lines: each run a row, closed loops and rates, read as SGLang computes
them; a sweep at request rates recovers the server that ran it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_json
from tests.test_replay import GENERATOR, TRUTH
from tokenroof.errors import TokenroofError
from tokenroof.io.measurements import read_table
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.simulate import Lengths

# one line as bench_serving writes it (its keys as of 2025; the totals make 1,024 in and 256 out a request)
LINE: dict[str, Any] = {
    "backend": "sglang",
    "dataset_name": "random",
    "request_rate": math.inf,
    "max_concurrency": 8,
    "sharegpt_output_len": None,
    "random_input_len": 1024,
    "random_output_len": 256,
    "random_range_ratio": 1.0,
    "duration": 40.0,
    "completed": 100,
    "total_input_tokens": 102400,
    "total_output_tokens": 25600,
    "total_output_tokens_retokenized": 25590,
    "request_throughput": 2.5,
    "input_throughput": 2560.0,
    "output_throughput": 640.0,
    "mean_e2e_latency_ms": 3100.0,
    "median_e2e_latency_ms": 3050.0,
    "mean_ttft_ms": 120.0,
    "median_ttft_ms": 110.0,
    "p99_ttft_ms": 300.0,
    "mean_tpot_ms": 11.7,
    "median_tpot_ms": 11.6,
    "p99_tpot_ms": 13.0,
    "mean_itl_ms": 11.7,
    "concurrency": 7.75,
    "accept_length": None,
}


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    """As bench_serving appends them: json.dumps a line (an infinite rate as `Infinity`)."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_each_line_is_a_run_and_a_closed_loop_reads_as_vllm_s_results_do(tmp_path: Path) -> None:
    """At --max-concurrency with every prompt sent at once: batch = the cap, the client a burst of streams; TPOT,
    TTFT and output throughput as recorded; the lengths (and so the context) from the totals: 102,400 / 100 = 1,024
    in, 25,600 / 100 = 256 out, context 1,024 + 256 / 2 = 1,152. Each row named by its line."""
    runs = [LINE, {**LINE, "max_concurrency": 32, "mean_tpot_ms": 14.2, "output_throughput": 2100.0}]
    path = write_lines(tmp_path / "sglang.jsonl", runs)
    assert "Infinity" in path.read_text()
    table = read_table([path])
    assert table.batch.tolist() == [8, 32] and table.tpot_ms.tolist() == [11.7, 14.2]
    assert table.throughput_tok_s.tolist() == [640.0, 2100.0] and table.ttft_ms is not None
    assert table.ttft_ms.tolist() == [120.0, 120.0] and table.context_tokens is not None
    assert table.context_tokens.tolist() == [1152.0, 1152.0]
    assert table.requests is not None and table.requests.tolist() == [100, 100]
    assert table.concurrency is None  # a closed loop at the batch, as vLLM's results (the two mix in one table)
    s = table.semantics
    assert (s.batch_kind, s.tpot_kind, s.client, s.input_len, s.output_len) == (
        "concurrency",
        "tpot",
        "burst",
        1024,
        256,
    )
    assert table.provenance == (f"sglang.bench_serving result {path}:1", f"sglang.bench_serving result {path}:2")
    assert table.warnings[0].startswith("2 SGLang run(s) at a fixed concurrency: batch = the concurrency")


def test_a_rate_run_s_batch_is_what_it_held_in_flight(tmp_path: Path) -> None:
    """At a request rate: Poisson arrivals, batch = the requests in flight on average (the line's concurrency; an
    older line without it: completed × mean latency ÷ duration = 100 × 4 s / 40 s = 10); no
    closed-loop concurrency. A cap the rate ran under and filled (in flight above 90% of it) leaves the run out."""
    rated = {**LINE, "request_rate": 2.5, "max_concurrency": None}
    older = {k: v for k, v in rated.items() if k != "concurrency"} | {
        "request_rate": 4.0,
        "mean_e2e_latency_ms": 4000.0,
    }
    capped = {**rated, "request_rate": 8.0, "max_concurrency": 16, "concurrency": 15.2}
    loose = {**rated, "request_rate": 6.0, "max_concurrency": 64, "concurrency": 12.5, "output_throughput": 1500.0}
    table = read_table([write_lines(tmp_path / "rates.jsonl", [rated, older, capped, loose])])
    assert table.batch.tolist() == pytest.approx([7.75, 10.0, 12.5])
    assert table.semantics.client == "poisson" and table.semantics.batch_kind == "concurrency"
    assert table.concurrency is None or np.isnan(table.concurrency).all()
    (left_out,) = [w for w in table.warnings if "left out" in w]
    assert left_out.startswith(f"{tmp_path / 'rates.jsonl'}:3: left out: at request rate 8 the client's")
    assert "concurrency cap 16 bound (15.2 requests in flight" in left_out
    assert not any("run(s) at a fixed concurrency" in w for w in table.warnings)


def test_what_cannot_be_read_is_named_by_its_line(tmp_path: Path) -> None:
    def refused(lines: list[Any], match: str) -> None:
        path = tmp_path / "bad.jsonl"
        path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
        with pytest.raises(TokenroofError, match=match):
            read_table([path])

    refused([LINE, {**LINE, "max_concurrency": None}], r"bad\.jsonl:2: an SGLang run with every prompt sent at once")
    refused([LINE, {**LINE, "request_rate": "trace"}], r"bad\.jsonl:2: an SGLang run that replayed a trace")
    refused([LINE, {**LINE, "request_rate": -1}], r"bad\.jsonl:2: request_rate must be a positive number or Infinity")
    refused([LINE, '{"max_concurrency": 4,'], r"bad\.jsonl:2: not valid JSON")
    refused([LINE, {"id": 3}], r"bad\.jsonl:2: a JSON Lines file whose lines are not benchmark results")
    rated = {**LINE, "request_rate": 2.0, "concurrency": None, "mean_e2e_latency_ms": None}
    refused([rated, LINE], r"bad\.jsonl:1: SGLang's run at a request rate needs the requests it held in flight")
    refused([{**rated, "concurrency": 3.0}, LINE], r"bad\.jsonl:2: client burst differs from poisson.*two tables: give")
    refused(['{"a": 1} x'], r"bad\.jsonl: several JSON documents one after another, not one a line")
    refused([json.dumps(LINE, indent=1), json.dumps(LINE, indent=1)], r"bad\.jsonl: several JSON documents")
    refused([], r"bad\.jsonl: no JSON in the file \(it is empty\)")
    refused(["", "  "], r"bad\.jsonl: no JSON in the file")
    for key in ("completed", "total_output_tokens", "output_throughput", "mean_tpot_ms"):
        missing = {k: v for k, v in LINE.items() if k != key}
        refused([LINE, missing], rf"bad\.jsonl:2: an SGLang result without {key}")
    # JSON Lines split at newlines alone: a form feed or U+2028 inside a line moves no line number
    refused([LINE, "\f", '{"x": "\u2028"', LINE], r"bad\.jsonl:3: not valid JSON")


def test_vllm_results_appended_a_line_each_are_read_as_its_files_are(tmp_path: Path) -> None:
    """`vllm bench serve --append-result` writes JSON Lines too: each line a vLLM result (no retokenized total)."""
    sglang_only = ("total_output_tokens_retokenized", "concurrency", "accept_length")
    vllm = {k: v for k, v in LINE.items() if k not in sglang_only} | {"backend": "vllm"}
    path = tmp_path / "vllm.jsonl"
    path.write_text(json.dumps(vllm) + "\n" + json.dumps({**vllm, "max_concurrency": 16}) + "\n")
    table = read_table([path])
    assert table.batch.tolist() == [8, 16] and table.provenance[0] == f"vllm bench serve result {path}:1"
    assert table.warnings[0].startswith("2 vLLM result(s)")
    # an SGLang line without its retokenized total is still SGLang's: the requests in flight it measured, or its name
    older = {k: v for k, v in LINE.items() if k != "total_output_tokens_retokenized"} | {"max_concurrency": None}
    path.write_text(
        json.dumps(older | {"request_rate": 2.0})
        + "\n"
        + json.dumps(older | {"request_rate": 3.0, "concurrency": 11.0})
        + "\n"
    )
    assert read_table([path]).batch.tolist() == [7.75, 11.0]


def test_fewer_prompts_than_the_cap_is_a_closed_loop_of_that_many(tmp_path: Path) -> None:
    """--max-concurrency 256 with 100 prompts: all sent at once and the cap never reached, so batch 100 (SGLang's
    completed requests; vLLM's num_prompts), not 256."""
    path = write_lines(tmp_path / "s.jsonl", [{**LINE, "max_concurrency": 256}, {**LINE, "max_concurrency": 64}])
    assert read_table([path]).batch.tolist() == [64, 100]
    vllm = {k: v for k, v in LINE.items() if k not in ("total_output_tokens_retokenized", "concurrency")}
    vllm |= {"backend": "vllm", "num_prompts": 100}
    path.write_text(
        json.dumps(vllm | {"max_concurrency": 256}) + "\n" + json.dumps(vllm | {"max_concurrency": 8}) + "\n"
    )
    assert read_table([path]).batch.tolist() == [8, 100]


@pytest.mark.heavy
def test_a_sweep_of_request_rates_recovers_the_server_that_ran_it(tmp_path: Path) -> None:
    """A server (TRUTH, cap 32) swept by bench_serving at 20, 45, 70 and 90% of its saturation, 300 requests a rate
    (256 in, 64 out): predict fits the scheduler to the lines (each an open loop at its rate, replayed as whole runs
    of the line's requests at the rate that holds its requests in flight over the whole run, as bench_serving counts
    them) and its saturation is the server's within 5% (+2.2%; replayed over steady windows instead, −5.3% here and
    −4 to −12% over fifteen samples of arrivals, the whole run's ramp and drain read as a lighter load); the rows it
    replays are the lines' own within 3% in TPOT."""
    from tokenroof.serving.saturation import saturation_rate

    lengths = (Lengths(256), Lengths(64))
    saturation = saturation_rate(TRUTH, *lengths, 32)
    lines = []
    rng = np.random.default_rng(0)  # no noise is drawn: the arrivals' sample is the only one
    for seed, share in enumerate((0.2, 0.45, 0.7, 0.9)):  # as bench_serving reports them (the examples' writer)
        rate = share * saturation
        lines.append(GENERATOR.sglang_line(rate, 256, 64, rng, 300, seed, TRUTH, None, None, False, 32))
    path = write_lines(tmp_path / "sweep.jsonl", lines)
    serving = run_json(["predict", str(path), "--batch", "16"])["serving"]
    assert serving["client"] == "poisson" and serving["tpot_rms"] < 0.03
    assert [row["batch"] for row in serving["replay"]] == pytest.approx(sorted(line["concurrency"] for line in lines))
    fitted = StepModel(**serving["step_model"])
    assert saturation_rate(fitted, *lengths, 32) == pytest.approx(saturation, rel=0.05)


def test_the_page_reads_an_uploaded_sglang_file() -> None:
    """The page's file input takes .jsonl, and an upload keeps its name: SGLang's lines read as from the command
    line (no TTFT here: the decode fit alone, quick)."""
    from tests.test_ui import call
    from tokenroof.ui.page import PAGE

    assert 'accept=".csv,.json,.jsonl"' in PAGE
    lines = [
        {**LINE, "max_concurrency": c, "mean_tpot_ms": t, "mean_ttft_ms": None}
        for c, t in ((1, 9.0), (8, 11.7), (32, 14.2))
    ]
    text = "".join(
        json.dumps({**line, "output_throughput": line["max_concurrency"] * 1e3 / line["mean_tpot_ms"]}) + "\n"
        for line in lines
    )
    ((status, predict),) = call(
        [("POST", "/api/predict", {"table": {"name": "sweep.jsonl", "text": text}, "batch_min": 1, "batch_max": 64})]
    )
    assert status == 200 and predict["measured"]["source"] == "sweep.jsonl"
    assert [p["batch"] for p in predict["measured"]["points"]] == [1, 8, 32]
