"""`tokenroof bench`: every request accounted for, faults named, bad points marked, resume, keys kept out."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import ROOT
from tests.schemas import validate_bench_point
from tokenroof.errors import TokenroofError
from tokenroof.io.measurements import read_table
from tokenroof.measure.http.run import BenchConfig, run_bench
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.emulate.server import Emulator, start

FAST = StepModel(t_fixed_s=2e-3, t_weights_s=3e-3, t_compute_s=0.0, t_kv_token_s=0.0, t_seq_s=50e-6)


def good_chunks(n: int) -> list[bytes]:
    events = [{"choices": [{"index": 0, "text": " tok", "finish_reason": None}]} for _ in range(n)]
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]


def fault_app(seen_headers: list[str]) -> web.Application:
    """A misbehaving server: request k fails in way k mod 5 (500, stall, disconnect, malformed SSE, fine)."""
    counter = itertools.count()

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "faulty"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        if json.loads(await request.read()).get("max_tokens") == 1:  # bench sizing its prompts: answered well
            mode = 4
        else:
            seen_headers.append(request.headers.get("Authorization", ""))
            mode = next(counter) % 5
        if mode == 0:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunks = good_chunks(4)
        if mode == 1:  # stall past the client's timeout
            await response.write(chunks[0])
            await asyncio.sleep(1)
        elif mode == 2:  # disconnect mid-stream
            await response.write(chunks[0])
            assert request.transport is not None
            request.transport.close()
            return response
        elif mode == 3:
            await response.write(chunks[0] + b"this is not sse\n\n")
        else:
            for chunk in chunks:
                await response.write(chunk)
                await asyncio.sleep(0.002)
            await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    return app


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_faults_are_accounted_for_and_the_point_is_marked(tmp_path: Path) -> None:
    headers: list[str] = []

    async def main() -> list[dict[str, Any]]:
        runner, url = await serve_app(fault_app(headers))
        try:
            cfg = BenchConfig(
                url=url,
                concurrencies=[2],
                input_len=4,
                output_len=4,
                warmup=2,
                requests_per_point=10,
                timeout_s=0.5,
                out_dir=tmp_path,
                api_key="sk-secret-123",
            )
            return await run_bench(cfg)
        finally:
            await runner.cleanup()

    points = asyncio.run(main())
    records = [r for r in jsonl(tmp_path / "requests.jsonl") if r["type"] == "request"]
    assert len(records) == len(headers)  # every request sent is in the JSONL
    errors = " | ".join(r["error"] for r in records if not r["ok"])
    for reason in ("HTTP 500", "timeout after 0.5 s", "malformed SSE line", "stream"):
        assert reason in errors
    assert points[0]["invalid"] and "requests failed" in points[0]["invalid"]
    validate_bench_point(points[0])  # failures, reasons and examples in the contract's shapes
    assert points[0]["failure_reasons"] and points[0]["failure_examples"]
    assert "left out concurrency=2" in (tmp_path / "summary.csv").read_text()
    assert all(h == "Bearer sk-secret-123" for h in headers)
    for written in tmp_path.iterdir():
        assert "sk-secret" not in written.read_text()


def test_refused_connection_is_a_clear_error(tmp_path: Path) -> None:
    cfg = BenchConfig(url="http://127.0.0.1:9", concurrencies=[1], out_dir=tmp_path)
    with pytest.raises(TokenroofError, match="cannot list models"):
        asyncio.run(run_bench(cfg))
    cfg = BenchConfig(
        url="http://127.0.0.1:9",
        concurrencies=[1],
        out_dir=tmp_path / "b",
        model="m",
        requests_per_point=3,
        warmup=1,
        timeout_s=2,
    )
    points = asyncio.run(run_bench(cfg))
    records = [r for r in jsonl(tmp_path / "b" / "requests.jsonl") if r["type"] == "request"]
    assert records and all("connection refused" in r["error"] for r in records)
    assert points[0]["invalid"]


def emulated_sweep(tmp_path: Path, concurrencies: list[int], resume: bool = False) -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        runner, url = await start(Emulator(FAST))
        try:
            cfg = BenchConfig(
                url=url,
                concurrencies=concurrencies,
                input_len=4,
                output_len=8,
                out_dir=tmp_path,
                resume=resume,
                requests_per_point=12,
            )
            return await run_bench(cfg)
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def test_sweep_writes_a_table_predict_reads_and_resumes(tmp_path: Path) -> None:
    first = emulated_sweep(tmp_path, [1, 2])
    assert [p["point"] for p in first] == ["concurrency=1", "concurrency=2"]
    with pytest.raises(TokenroofError, match="pass resume"):
        emulated_sweep(tmp_path, [1, 2])
    again = emulated_sweep(tmp_path, [1, 2, 4], resume=True)
    assert [p["point"] for p in again] == ["concurrency=1", "concurrency=2", "concurrency=4"]
    points = [r for r in jsonl(tmp_path / "requests.jsonl") if r["type"] == "point"]
    invalid = [p["point"] for p in first if p["invalid"]]  # client-bound on a loaded machine: measured again
    assert [p["point"] for p in points] == ["concurrency=1", "concurrency=2", *invalid, "concurrency=4"]
    csv_text = (tmp_path / "summary.csv").read_text()
    assert "model=tokenroof-emulator" in csv_text
    valid = [p for p in again if not p["invalid"]]
    # invalid points (e.g. the client-bound check on a loaded machine) are left out of the table, not averaged in
    assert csv_text.count("# left out") == len(again) - len(valid)
    if len(valid) >= 2:
        assert len(read_table([tmp_path / "summary.csv"])) == len(valid)
    for p in again:
        assert p["output_tokens_source"] == "usage"
        assert set(p["aliases"]) >= {"tpot_ms", "ttft_ms", "itl_ms"}


def test_cli_bad_input(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    result = run_cli(["bench", "http://127.0.0.1:9", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "give --concurrency and/or --request-rate" in result.stderr
    result = run_cli(["bench", "http://127.0.0.1:9", "--concurrency", "1", "--out", str(tmp_path / "y")])
    assert result.exit_code == 2 and "cannot list models at http://127.0.0.1:9/v1/models" in result.stderr
    result = run_cli(["bench", "http://127.0.0.1:9", "--concurrency", "1", "--endpoint", "embeddings"])
    assert result.exit_code == 2 and "--endpoint must be completions or chat" in result.stderr
    result = run_cli(["emulate"])
    assert result.exit_code == 2 and "give one step-model source" in result.stderr
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "a"}\n{oops\n')
    result = run_cli(
        [
            "bench",
            "http://127.0.0.1:9",
            "--concurrency",
            "1",
            "--model",
            "m",
            "--prompts",
            str(bad),
            "--out",
            str(tmp_path / "z"),
        ]
    )
    assert result.exit_code == 2 and f"{bad}:2: not valid JSON" in result.stderr


def test_open_loop_rate_and_chat_endpoint(tmp_path: Path) -> None:
    async def main() -> list[dict[str, Any]]:
        runner, url = await start(Emulator(FAST))
        try:
            cfg = BenchConfig(
                url=url,
                rates=[40.0],
                burstiness=0.5,
                endpoint="chat",
                input_len=4,
                output_len=4,
                requests_per_point=30,
                out_dir=tmp_path,
            )
            return await run_bench(cfg)
        finally:
            await runner.cleanup()

    (point,) = asyncio.run(main())
    assert point["kind"] == "rate" and point["value"] == 40.0
    records = [r for r in jsonl(tmp_path / "requests.jsonl") if r["type"] == "request"]
    assert len(records) == 30 and all(r["ok"] for r in records)
    assert point["requests_completed"] > 0 and point["window_end_s"] > point["window_start_s"]
    # the table says how the arrivals were drawn, burstiness too, so predict replays them so
    from tokenroof.io.table import parse_settings

    head = [line for line in (tmp_path / "summary.csv").read_text().splitlines() if line.startswith("#")]
    said = parse_settings(head, "summary.csv")
    assert (said.client, said.burstiness) == ("poisson", 0.5)


def test_arrival_process_mean_rate() -> None:
    import numpy as np

    from tokenroof.stats import arrival_times

    times = arrival_times(rate=10.0, burstiness=0.3, n=20_000, rng=np.random.default_rng(1))
    assert times[0] == 0.0
    assert (len(times) - 1) / times[-1] == pytest.approx(10.0, rel=0.05)
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(0.3), rel=0.1)  # gamma CV = 1/sqrt(shape)


def test_running_batch_gauges_of_each_engine() -> None:
    from tokenroof.measure.http.scrape import running_from_metrics

    vllm = (
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m",engine="0"} 12.0\n'
        'vllm:num_requests_running{model_name="m",engine="1"} 3.0\nvllm:num_requests_waiting{model_name="m"} 4\n'
    )
    assert running_from_metrics(vllm) == 15.0
    assert running_from_metrics('sglang:num_running_reqs{tp_rank="0"} 7\n') == 7.0
    assert running_from_metrics("tgi_batch_current_size 9\n") == 9.0
    assert running_from_metrics("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n") == 2.0
    assert running_from_metrics("llamacpp:requests_deferred 5\n") is None
    # a sample timestamp (ms) after the value, and a label value holding a space: the value is still the value
    assert running_from_metrics('vllm:num_requests_running{model_name="a b"} 6 1733232000000\n') == 6.0
    assert running_from_metrics("not prometheus {{{\n") is None


def test_the_preemption_counter_is_read_and_differenced_over_the_window() -> None:
    """Issue 27: bench's table hid 117 preemptions behind status "ok"."""
    from tokenroof.measure.http.scrape import BatchScraper, metrics_from_text

    text = 'vllm:num_requests_running 12\nvllm:num_preemptions_total{model_name="m"} 40\n'
    assert metrics_from_text(text) == (12.0, 40.0)
    assert metrics_from_text("vllm:num_requests_running 12\n") == (12.0, None)  # a server without the counter
    running, preempted = metrics_from_text("vllm:num_requests_running NaN\n")  # issue 33: a bad sample, marked
    assert running is not None and math.isnan(running) and preempted is None
    scraper = BatchScraper(None, "", 0.0)  # type: ignore[arg-type]
    scraper.preemptions = [(0.5, 40.0), (1.0, 41.0), (2.0, 157.0), (3.5, 160.0)]
    assert scraper.preempted_in(0.9, 3.0) == 116.0
    assert scraper.preempted_in(3.0, 4.0) is None  # one reading: no difference to take


def test_constant_rate_arrivals_with_infinite_burstiness() -> None:
    import numpy as np

    from tokenroof.stats import arrival_times

    times = arrival_times(rate=4.0, burstiness=float("inf"), n=5, rng=np.random.default_rng(1))
    assert times.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_cpu_taken_by_others_and_the_hypervisor(tmp_path: Path) -> None:
    from tokenroof.measure.http.selfcheck import LoopMonitor, MachineCpu, contention

    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal, in ticks
    stat.write_text(
        f"cpu  {3 * ticks} 0 {ticks} {10 * ticks} {ticks} 0 0 {ticks} 0 0\ncpu0 1 2 3\ncpu1 4 5 6\nintr 9\n"
    )
    start = MachineCpu.read(stat)
    assert start == MachineCpu(busy_s=4.0, steal_s=1.0, total_s=16.0, cores=2)
    end = MachineCpu(busy_s=4.0 + 3.0, steal_s=1.0 + 0.4, total_s=16.0 + 4.0, cores=2)  # 2 s on 2 cores
    steal, others = contention(start, end, process_cpu_s=1.0, wall_s=2.0)
    assert steal == pytest.approx(0.1) and others == pytest.approx(1.0)  # (3 - 1) s busy elsewhere over 2 s
    assert MachineCpu.read(tmp_path / "missing") is None
    monitor = LoopMonitor(cpu_end=1.0, wall_end=2.0, machine_start=start, machine_end=end)
    assert monitor.note(None) == "the hypervisor stole 10% of CPU time during the point"  # a core was left
    monitor.machine_end = MachineCpu(busy_s=4.0 + 4.0, steal_s=1.0, total_s=16.0 + 4.0, cores=2)
    assert monitor.note(None) == "other processes kept 1.5 of 2 cores busy: the client may have waited for a core"


def test_machine_cpu_and_contention_by_hand(tmp_path: Path) -> None:
    """busy = user + nice + system + irq + softirq; a short line is padded with zeros; one `cpu` line and no per-core
    ones is one core; a first line that is not `cpu` is unreadable."""
    from tokenroof.measure.http.selfcheck import MachineCpu, contention

    stat, tick = tmp_path / "stat", os.sysconf("SC_CLK_TCK")
    stat.write_text(f"cpu  {tick} {2 * tick} {4 * tick} {8 * tick} {16 * tick} {32 * tick} {64 * tick} {128 * tick}\n")
    assert MachineCpu.read(stat) == MachineCpu(busy_s=103.0, steal_s=128.0, total_s=255.0, cores=1)
    stat.write_text(f"cpu  {3 * tick} 0 {tick} {10 * tick}\n")  # an old kernel: no iowait, irq, softirq or steal
    assert MachineCpu.read(stat) == MachineCpu(busy_s=4.0, steal_s=0.0, total_s=14.0, cores=1)
    stat.write_text("intr 1 2 3\ncpu 1 2 3 4 5 6 7 8\n")
    assert MachineCpu.read(stat) is None
    stat.write_text("cpu one two\n")
    assert MachineCpu.read(stat) is None
    start = MachineCpu(busy_s=0.0, steal_s=0.0, total_s=0.0, cores=2)
    # half a second of CPU time in all, a tenth of it stolen; 0.3 s busy of which 0.1 s was this process, over 0.5 s
    steal, others = contention(start, MachineCpu(0.3, 0.05, 0.5, 2), process_cpu_s=0.1, wall_s=0.5)
    assert steal == pytest.approx(0.1) and others == pytest.approx(0.4)
    assert contention(start, MachineCpu(0.3, 0.05, 0.5, 2), process_cpu_s=0.5, wall_s=0.5)[1] == 0.0  # never < 0
    assert contention(start, start, process_cpu_s=0.0, wall_s=0.0) == (None, None)


def test_the_client_verdict_and_notes_at_their_thresholds() -> None:
    from tokenroof.measure.http.selfcheck import LoopMonitor, MachineCpu, client_bound

    def monitor(lag_ms: float, cpu: float = 0.5) -> LoopMonitor:
        return LoopMonitor(lags_s=[lag_ms / 1e3] * 10, cpu_end=cpu, wall_end=1.0)

    assert monitor(5.0).verdict(10.0) is None  # half a TPOT exactly: still valid
    assert monitor(5.1).verdict(10.0) == (
        "client-bound: event-loop lag p99 5.1 ms exceeds half a TPOT (5.0 ms): the client, not the server, set the "
        "timing"
    )
    assert monitor(6.0).verdict(10.0) is not None and monitor(6.0).verdict(20.0) is None
    assert monitor(1.0).verdict(10.0) is None and monitor(5.1).verdict(None) is not None  # no TPOT: 5 ms
    assert monitor(4.9).verdict(None) is None
    assert monitor(0.0, cpu=0.9).verdict(10.0) is None
    assert monitor(0.0, cpu=0.95).verdict(10.0) == "client-bound: the client process used 95% of a core"
    assert monitor(0.5).note(10.0) is None  # 5% of TPOT exactly
    assert monitor(0.6).note(10.0) == "client loop lag p99 0.6 ms is over 5% of TPOT: ITL percentiles include it"
    assert monitor(0.6).note(None) is None
    quiet = MachineCpu(0.0, 0.0, 0.0, 1)
    stolen = LoopMonitor(cpu_end=0.0, wall_end=1.0, machine_start=quiet, machine_end=MachineCpu(0.0, 0.05, 1.0, 1))
    assert stolen.note(None) is None  # 5% stolen exactly: no note
    busy = LoopMonitor(cpu_end=0.0, wall_end=1.0, machine_start=quiet, machine_end=MachineCpu(0.5, 0.0, 1.0, 1))
    assert busy.note(None) == "other processes kept 0.5 of 1 cores busy: the client may have waited for a core"
    # the lag of the processes that read the streams (bench --workers), when given, is the one judged; notes add up
    assert monitor(0.0).note(10.0, lag_p99_ms=0.6) == monitor(0.6).note(10.0)
    assert monitor(0.6).note(10.0, lag_p99_ms=0.0) is None
    both = LoopMonitor(
        lags_s=[0.6e-3] * 10, cpu_end=0.0, wall_end=1.0, machine_start=quiet, machine_end=MachineCpu(0.5, 0.0, 1.0, 1)
    )
    assert both.note(10.0) == (
        "client loop lag p99 0.6 ms is over 5% of TPOT: ITL percentiles include it; other processes kept 0.5 of 1 "
        "cores busy: the client may have waited for a core"
    )
    # one of several client processes names itself
    assert client_bound(6.0, 0.5, 10.0, who="worker 2") == (
        "client-bound: worker 2: event-loop lag p99 6.0 ms exceeds half a TPOT (5.0 ms): the client, not the server, "
        "set the timing"
    )
    assert client_bound(0.0, 0.95, 10.0, who="worker 2") == "client-bound: worker 2 used 95% of a core"


def test_the_loop_monitor_measures_a_blocked_loop() -> None:
    """Started in a running loop it wakes every 5 ms; a 60 ms block shows as lag, and stopping ends the task."""
    import time as clock

    from tokenroof.measure.http.selfcheck import LoopMonitor

    async def main() -> LoopMonitor:
        monitor = LoopMonitor()
        monitor.start()
        await asyncio.sleep(0.03)
        clock.sleep(0.06)  # the loop is blocked: the monitor wakes ~60 ms late
        await asyncio.sleep(0.02)
        await monitor.stop()
        assert monitor._task is not None and monitor._task.done()
        return monitor

    monitor = asyncio.run(main())
    assert len(monitor.lags_s) >= 3 and min(monitor.lags_s) >= 0.0
    assert min(monitor.lags_s) < 0.005  # a wake-up on time lags by less than a period (the lag is past the due time)
    assert max(monitor.lags_s) > 0.04 and monitor.lag_p99_ms > 30
    assert monitor.wall_end > monitor.wall_start and 0.0 <= monitor.cpu_fraction <= 1.5
    if Path("/proc/stat").exists():
        assert monitor.machine_start is not None and monitor.machine_end is not None
        assert monitor.contention[0] is not None


def tokenizing_app(per_word: float, extra: int, status: int = 200) -> tuple[web.Application, list[int]]:
    """A server that counts a prompt as `per_word` tokens a word plus `extra` (a BOS token, a chat template) and
    reports it in its usage; the prompt lengths in words it was sent, in order."""
    words_seen: list[int] = []

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "tok"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        words = len(body["prompt"].split())
        words_seen.append(words)
        if status != 200:
            return web.json_response({"error": {"message": "no"}}, status=status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in good_chunks(body["max_tokens"]):
            await response.write(chunk)
        usage = {"prompt_tokens": round(words * per_word) + extra, "completion_tokens": body["max_tokens"]}
        await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    return app, words_seen


def run_against(
    app: web.Application, out: Path, input_len: int, concurrencies: tuple[int, ...] = (1,), resume: bool = False
) -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        runner, url = await serve_app(app)
        try:
            cfg = BenchConfig(
                url=url,
                concurrencies=list(concurrencies),
                input_len=input_len,
                output_len=3,
                warmup=0,
                requests_per_point=3,
                out_dir=out,
                resume=resume,
            )
            return await run_bench(cfg)
        finally:
            await runner.cleanup()

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("per_word", "extra", "words", "tries"),
    [
        (1.0, 0, 100, 1),  # a word a token (the emulator): found at once
        (1.0, 1, 99, 2),  # llama's BOS: 100 words are 101 tokens, 99 are 100
        (1.3, 12, 68, 3),  # 1.3 tokens a word and a chat template: 100 words 142 tokens, 70 → 103, 68 → 100
    ],
)
def test_synthetic_prompts_are_sized_in_the_servers_tokens(
    per_word: float, extra: int, words: int, tries: int, tmp_path: Path
) -> None:
    """--input-len counts tokens as the server does (vllm bench serve's random prompts are tokens of the model's
    tokenizer): bench sends a prompt, reads the server's count from its usage and resizes, up to three tries; the
    sizing requests are recorded, never measured, and the header says what was found."""
    app, seen = tokenizing_app(per_word, extra)
    (point,) = run_against(app, tmp_path, 100)
    objects = jsonl(tmp_path / "requests.jsonl")
    calibration = [o for o in objects if o["type"] == "calibration"]
    assert len(calibration) == tries and all(o["output_tokens"] == 1 for o in calibration)
    (header,) = [o for o in objects if o["type"] == "header"]
    assert header["settings"]["prompt_words"] == words
    assert f"{words} words, 100 prompt tokens" in header["settings"]["prompt_calibration"]
    assert set(seen[tries:]) == {words}  # every measured prompt (the probe too) has the calibrated length
    assert point["prompt_tokens_mean"] == pytest.approx(100)
    # resumed (a point added), the prompts keep their length and nothing is sized again
    app2, seen2 = tokenizing_app(per_word, extra)
    objects_before = len(objects)
    run_against(app2, tmp_path, 100, (1, 2), resume=True)
    after = jsonl(tmp_path / "requests.jsonl")
    assert len([o for o in after if o["type"] == "calibration"]) == tries and len(after) > objects_before
    assert set(seen2) == {words}


def test_a_server_that_cannot_size_the_prompts_leaves_a_word_a_token_and_says_so(tmp_path: Path) -> None:
    app, seen = tokenizing_app(1.0, 1, status=500)
    (point,) = run_against(app, tmp_path, 50)
    (header,) = [o for o in jsonl(tmp_path / "requests.jsonl") if o["type"] == "header"]
    assert header["settings"]["prompt_words"] == 50
    assert "not calibrated on the server (HTTP 500" in header["settings"]["prompt_calibration"]
    assert "approximate" in header["settings"]["prompt_calibration"]
    assert point["invalid"]  # every measured request failed too
    assert set(seen) == {50}  # the one sizing request and every measured one: a word a token


def test_the_table_bench_writes_for_llama_server_reads_back(tmp_path: Path) -> None:
    """Against llama-server (its GET /props gave the slots) bench's summary.csv says how a cap changes that server and
    how to state per-slot KV streams, and `read_table` reads the file as written: a hint once spelt `kv_slots=N`,
    which the reader took for a setting, and every sweep of a llama-server failed to load (the 2026-12-06 run)."""
    from tokenroof.measure.http.record import read_previous
    from tokenroof.measure.http.redact import Redactor
    from tokenroof.measure.http.run import write_outputs

    previous = read_previous(ROOT / "examples" / "bench" / "requests.jsonl", lambda _: None)
    cfg = BenchConfig(url="http://127.0.0.1:8040", out_dir=tmp_path, concurrencies=[1])
    server = {"server": "llama-server", "server_slots": 16}
    write_outputs(cfg, "m", list(previous.valid_points().values()), Redactor.of(cfg.url, None), server)
    text = (tmp_path / "summary.csv").read_text()
    assert "a batch cap for it is a restart with a new -np" in text and "the setting kv_slots, set to 16" in text
    table = read_table([tmp_path / "summary.csv"])
    assert table.semantics.server == "llama-server" and table.semantics.kv_slots is None
    stated = tmp_path / "stated.csv"
    first, *rest = text.splitlines()
    stated.write_text("\n".join([f"{first} kv_slots=16", *rest]) + "\n")
    assert read_table([stated]).semantics.kv_slots == 16
