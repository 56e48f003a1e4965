"""AIPerf and GenAI-Perf aggregate exports: one run a row, their load settings wherever the release kept them, a
folder of runs found below it; a concurrency sweep recovers the server that ran it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_json
from tests.test_replay import TRUTH
from tokenroof.errors import TokenroofError
from tokenroof.io.measurements import read_table, resolve_inputs
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.simulate import ClosedLoop, Lengths, SimResult, simulate


def stats(avg: float, unit: str = "ms") -> dict[str, Any]:
    return {"unit": unit, "avg": avg, "p50": avg, "p99": avg * 1.2}


def export(concurrency: int | None = 8, rate: float | None = None, **metrics: Any) -> dict[str, Any]:
    """An AIPerf profile_export_aiperf.json (its layout as of 2025; 512 in, 128 out)."""
    loadgen: dict[str, Any] = {"concurrency": concurrency, "request_count": 200}
    if rate is not None:
        loadgen |= {"request_rate": rate, "request_rate_mode": "poisson"}
    return {
        "request_throughput": {"unit": "requests/sec", "avg": 4.0},
        "request_latency": stats(1800.0),
        "time_to_first_token": stats(95.0),
        "inter_token_latency": stats(13.4),
        "output_token_throughput": {"unit": "tokens/sec", "avg": 512.0},
        "output_sequence_length": {"unit": "tokens", "avg": 128.0},
        "input_sequence_length": {"unit": "tokens", "avg": 512.0},
        "request_count": {"unit": "requests", "avg": 200.0},
        "benchmark_duration": {"unit": "sec", "avg": 50.0},
        "input_config": {"endpoint": {"type": "chat", "streaming": True}, "loadgen": loadgen},
        **metrics,
    }


def artifacts(root: Path, runs: dict[str, dict[str, Any]]) -> Path:
    """AIPerf's artifacts folder: a folder a run, its aggregate export beside the inputs and per-request records."""
    for name, data in runs.items():
        run = root / name
        run.mkdir(parents=True)
        (run / "profile_export_aiperf.json").write_text(json.dumps(data, indent=2))
        (run / "inputs.json").write_text('{"data": []}')
        (run / "profile_export.jsonl").write_text('{"metadata": {}, "metrics": {}, "error": null}\n')
    return root


def test_a_folder_of_runs_is_their_exports_and_a_concurrency_reads_as_vllm_s_results_do(tmp_path: Path) -> None:
    """At --concurrency N alone: batch N, every stream started at once (client=burst), TPOT the inter-token
    latency (per request, after the first token), TTFT and output throughput as recorded, the lengths the run
    measured (context 512 + 128 / 2 = 576), the run's 200 requests. The folder's inputs and per-request records are
    not results and are passed over."""
    root = artifacts(
        tmp_path / "artifacts",
        {
            "m-openai-chat-concurrency8": export(),
            "m-openai-chat-concurrency32": export(32, inter_token_latency=stats(17.5)),
        },
    )
    assert [p.parent.name for p in resolve_inputs(root)] == [
        "m-openai-chat-concurrency32",
        "m-openai-chat-concurrency8",
    ]
    table = read_table([root])
    assert table.batch.tolist() == [8, 32] and table.tpot_ms.tolist() == [13.4, 17.5]
    assert table.ttft_ms is not None and table.ttft_ms.tolist() == [95.0, 95.0]
    assert table.throughput_tok_s.tolist() == [512.0, 512.0]
    assert table.context_tokens is not None and table.context_tokens.tolist() == [576.0, 576.0]
    assert table.requests is not None and table.requests.tolist() == [200, 200]
    assert table.concurrency is None  # a closed loop at the batch, as vLLM's results (the two mix in one table)
    few = tmp_path / "few_aiperf.json"  # fewer requests than --concurrency: all sent at once, that many streams
    few.write_text(json.dumps(export(256) | {"request_count": {"unit": "requests", "avg": 100.0}}))
    assert read_table([few, root]).batch.tolist() == [8, 32, 100]
    s = table.semantics
    assert (s.batch_kind, s.tpot_kind, s.client, s.input_len, s.output_len) == (
        "concurrency",
        "tpot",
        "burst",
        512,
        128,
    )
    assert table.provenance[0] == f"AIPerf export {root / 'm-openai-chat-concurrency32' / 'profile_export_aiperf.json'}"
    assert table.warnings[0].startswith("2 AIPerf/GenAI-Perf run(s) at a fixed concurrency: batch = the concurrency")


def test_genai_perf_s_flat_settings_and_a_rate_s_requests_in_flight(tmp_path: Path) -> None:
    """GenAI-Perf keeps its flags flat in input_config (or, later, under perf_analyzer.stimulus) and sends a rate
    evenly spaced: batch = request throughput × mean latency (4 req/s × 1.8 s = 7.2 in flight), an open loop. Times
    in seconds are read as such; a rate whose concurrency cap filled is left out, with a warning."""
    flat = export(None) | {"input_config": {"concurrency": None, "request_rate": 4.0, "streaming": True}}
    later = export(None) | {"input_config": {"perf_analyzer": {"stimulus": {"request_rate": 6.0}}}}
    later |= {"request_throughput": {"avg": 6.0}, "request_latency": stats(2.0, "sec")}
    capped = export(16, 9.0) | {"request_throughput": {"avg": 9.0}, "request_latency": stats(1750.0)}
    paths = []
    for name, data in (("a", flat), ("b", later), ("c", capped)):
        paths.append(tmp_path / f"{name}_genai_perf.json")
        paths[-1].write_text(json.dumps(data))
    table = read_table(paths[:2])
    assert table.batch.tolist() == pytest.approx([7.2, 12.0])
    assert table.semantics.client == "constant" and table.semantics.batch_kind == "concurrency"
    assert table.concurrency is None or np.isnan(table.concurrency).all()
    assert table.provenance == (f"GenAI-Perf export {paths[0]}", f"GenAI-Perf export {paths[1]}")
    with pytest.raises(TokenroofError, match=r"c_genai_perf\.json: client poisson differs from constant"):
        read_table(paths)
    rates = []  # AIPerf at rates: Poisson arrivals, the capped one left out
    for name, data in (("d", export(None, 4.0)), ("e", later | {"input_config": export(None, 6.0)["input_config"]})):
        rates.append(tmp_path / f"{name}_aiperf.json")
        rates[-1].write_text(json.dumps(data))
    table = read_table([paths[2], *rates])
    assert table.batch.tolist() == pytest.approx([7.2, 12.0]) and table.semantics.client == "poisson"
    (left,) = [w for w in table.warnings if "left out" in w]
    assert left.startswith(
        f"{paths[2]}: left out: at request rate 9 the client's concurrency cap 16 bound (15.8 requests"
    )


def test_aiperf_s_gamma_arrivals_are_the_table_s_burstiness(tmp_path: Path) -> None:
    """`--arrival-pattern gamma --arrival-smoothness 0.5` draws gaps of gamma shape 0.5, as vLLM's `--burstiness 0.5`:
    the table's burstiness; a gamma pattern without a smoothness, and Poisson, say none (1)."""
    paths = []
    for name, rate, extra in (("a", 4.0, {"arrival_smoothness": 0.5}), ("b", 6.0, {"arrival_smoothness": 0.5})):
        data = export(None, rate) | {"request_throughput": {"avg": rate}}
        data["input_config"]["loadgen"] |= {"arrival_pattern": "gamma", **extra}
        del data["input_config"]["loadgen"]["request_rate_mode"]
        paths.append(tmp_path / f"{name}_aiperf.json")
        paths[-1].write_text(json.dumps(data))
    table = read_table(paths)
    assert table.semantics.client == "poisson" and table.semantics.burstiness == 0.5
    for path in paths:
        data = json.loads(path.read_text())
        del data["input_config"]["loadgen"]["arrival_smoothness"]
        path.write_text(json.dumps(data))
    assert read_table(paths).semantics.burstiness is None


def test_what_cannot_be_read_is_named(tmp_path: Path) -> None:
    def refused(data: dict[str, Any], match: str) -> None:
        path = tmp_path / "run_aiperf.json"
        path.write_text(json.dumps(data))
        with pytest.raises(TokenroofError, match=match):
            read_table([path, path])

    refused({k: v for k, v in export().items() if k != "input_config"}, r"run_aiperf\.json: no input_config")
    refused(export(None), r"run_aiperf\.json: input_config gives neither a concurrency nor a request rate")
    no_latency = {k: v for k, v in export(None, 4.0).items() if k != "request_latency"}
    refused(no_latency, r"a run at a request rate needs request_throughput and request_latency")
    refused(export(time_to_first_token=stats(95.0, "min")), r"time_to_first_token in unit 'min'; known: ms, s")
    refused(export(inter_token_latency=[13.4]), r"inter_token_latency must be an object of statistics, got list")
    refused(export(inter_token_latency={"avg": -1}), r"inter_token_latency\.avg must be a positive number")
    refused(export(inter_token_latency={"unit": "ms"}), r"run_aiperf\.json: inter_token_latency has no avg")
    for metric in ("inter_token_latency", "output_token_throughput", "input_sequence_length", "output_sequence_length"):
        missing = {k: v for k, v in export().items() if k != metric}
        refused(missing, rf"run_aiperf\.json: an export without {metric}")
    refused(export(None, 4.0, request_throughput={"unit": "requests/min", "avg": 240.0}), r"request_throughput in unit")
    refused(export(output_token_throughput={"unit": 7, "avg": 512.0}), r"output_token_throughput in unit 7; known")
    refused(export(input_sequence_length={"unit": "kilotokens", "avg": 0.5}), r"input_sequence_length in unit")


def test_a_cancelled_or_failing_run_says_so_and_a_run_folder_without_its_export_is_named(tmp_path: Path) -> None:
    """was_cancelled and failed requests are warnings naming the file (their means cover what completed); a run's
    folder holding only its inputs and per-request records has no result, and a folder with results of its own reads
    them, not exports further down."""
    runs = artifacts(
        tmp_path / "a",
        {"c8": export() | {"was_cancelled": True}, "c16": export(16) | {"error_request_count": {"avg": 3}}},
    )
    warnings = read_table([runs]).warnings
    cancelled = "c8/profile_export_aiperf.json: the run was cancelled before it finished: its means are over the"
    assert any(w.endswith(f"{cancelled} requests it completed") for w in warnings)
    failed = "c16/profile_export_aiperf.json: 3 requests failed; the means are over those that did not"
    assert any(w.endswith(failed) for w in warnings)
    (runs / "c8" / "profile_export_aiperf.json").unlink()
    with pytest.raises(TokenroofError, match=r"c8: an AIPerf or GenAI-Perf run's folder without its aggregate export"):
        resolve_inputs(runs / "c8")
    mixed = tmp_path / "mixed"
    artifacts(mixed / "old", {"c64": export(64)})
    (mixed / "c8_aiperf.json").write_text(json.dumps(export()))
    (mixed / "c32_aiperf.json").write_text(json.dumps(export(32)))
    assert [p.name for p in resolve_inputs(mixed)] == ["c32_aiperf.json", "c8_aiperf.json"]


def aiperf_export(result: SimResult, concurrency: int) -> dict[str, Any]:
    """A simulated closed-loop run as AIPerf reports it: means over every request, ITL (latency − TTFT) ÷ (output −
    1), output throughput over the benchmark's duration (first request sent to last finished)."""
    seqs = result.sequences
    latency = np.array([(s.finished_s or 0) - s.arrival_s for s in seqs])
    ttft = np.array([(s.first_token_s or 0) - s.arrival_s for s in seqs])
    out = np.array([s.max_tokens for s in seqs])
    duration = max(s.finished_s or 0 for s in seqs) - min(s.arrival_s for s in seqs)
    data = export(concurrency, inter_token_latency=stats(float(np.mean((latency - ttft) / (out - 1))) * 1e3))
    return data | {
        "time_to_first_token": stats(float(ttft.mean()) * 1e3),
        "request_latency": stats(float(latency.mean()) * 1e3),
        "output_token_throughput": {"unit": "tokens/sec", "avg": float(out.sum() / duration)},
        "request_count": {"unit": "requests", "avg": float(len(seqs))},
        "input_sequence_length": {"unit": "tokens", "avg": 256.0},
        "output_sequence_length": {"unit": "tokens", "avg": 64.0},
    }


def test_a_concurrency_sweep_recovers_the_server_that_ran_it(tmp_path: Path) -> None:
    """A server (TRUTH) profiled by AIPerf at --concurrency 1, 4, 16 and 32 (every stream started at once, 10×N
    requests, 256 in, 64 out): predict fits the scheduler to the exports and replays their TPOT within 2%; at 64
    streams, past the data, its TPOT is the server's within 5%."""
    runs = {}
    for c in (1, 4, 16, 32):
        loop = ClosedLoop(c, Lengths(256), Lengths(64), 10 * c, "burst")
        runs[f"m-concurrency{c}"] = aiperf_export(simulate(TRUTH, loop, 1024, 0, None), c)
    root = artifacts(tmp_path / "artifacts", runs)
    serving = run_json(["predict", str(root), "--batch", "64"])["serving"]
    assert serving["client"] == "burst" and serving["tpot_rms"] < 0.02
    fitted = StepModel(**serving["step_model"])
    loop = ClosedLoop(64, Lengths(256), Lengths(64), 640, "burst")
    truth, fit = (simulate(m, loop, 1024, 0, None).summary()["tpot_ms"]["mean"] for m in (TRUTH, fitted))
    assert fit == pytest.approx(truth, rel=0.05)


def test_report_takes_a_folder_of_runs_or_their_exports_as_one_table(tmp_path: Path) -> None:
    """`report` reads AIPerf's runs as it reads vLLM's result files: their folder, or the exports given one by one, are
    one measured table (a bench folder, with its summary.json, stays a bench run)."""
    from tokenroof.report.sources import load_sources

    root = artifacts(tmp_path / "artifacts", {"c8": export(), "c32": export(32, inter_token_latency=stats(17.5))})
    exports = sorted(root.rglob("profile_export_aiperf.json"))
    for given in ([root], exports):
        (source,) = load_sources(given)
        assert source.kind == "table" and source.table is not None and source.table.batch.tolist() == [8, 32]


def test_the_page_takes_runs_whose_exports_share_one_name() -> None:
    """AIPerf names every run's export profile_export_aiperf.json: uploaded together they are each read (a repeated
    name with other text goes into a numbered folder), the same file twice is refused."""
    from tests.test_ui import call

    runs = [{"name": "profile_export_aiperf.json", "text": json.dumps(export(c))} for c in (4, 16)]
    ((status, predict), (refused, error)) = call(
        [
            ("POST", "/api/predict", {"tables": runs, "batch_min": 1, "batch_max": 32}),
            ("POST", "/api/predict", {"tables": [runs[0], runs[0]]}),
        ]
    )
    assert status == 200 and [p["batch"] for p in predict["measured"]["points"]] == [4, 16]
    assert refused == 400 and "two uploads named profile_export_aiperf.json with the same text" in json.dumps(error)


def test_lengths_drawn_at_random_state_their_spread(tmp_path: Path) -> None:
    """`--output-tokens-stddev` (or a dataset's lengths): the export's std ÷ avg is the table's output_len_cv, for the
    replay to draw lengths alike; a std of 0 states none."""
    runs = {
        f"c{c}": export(c, output_sequence_length={"unit": "tokens", "avg": 128.0, "std": 38.4})
        | {"input_sequence_length": {"unit": "tokens", "avg": 512.0, "std": 0.0}}
        for c in (4, 8)
    }
    sem = read_table([artifacts(tmp_path, runs)]).semantics
    assert sem.output_len_cv == pytest.approx(0.3) and sem.input_len_cv is None
