"""simulate against a real server (issue 28): what bench sends and reads so a real server's measurement can be
replayed (fresh prompts, cached tokens), the simulator's closed loops and overload, and the protocol script."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.emulator_process import emulator_process
from tokenroof.measure.http.client import cached_count
from tokenroof.measure.http.config import BenchConfig
from tokenroof.measure.http.record import Previous
from tokenroof.measure.http.run import Prompts, prompt_salt
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.saturation import at_cap, saturation_rate
from tokenroof.serving.simulate import ClosedLoop, Lengths, Workload, simulate

GPU_LIKE = StepModel(t_fixed_s=1e-3, t_weights_s=6e-3, t_compute_s=2e-5, t_kv_token_s=5e-8, t_seq_s=1e-5)
# a CPU server: compute adds to the weight stream, a prompt token costs most of a decode step's sequence
CPU_LIKE = StepModel(t_fixed_s=1e-2, t_weights_s=5e-4, t_compute_s=8e-4, t_kv_token_s=0.0, t_seq_s=1.7e-3)


def test_prompts_are_fresh_per_run_and_fixed_per_request() -> None:
    """Issue 28: bench's prompts depended only on --seed, so a second run was served from llama-server's prompt
    cache (TTFT 160 ms instead of 738). A prompt is drawn from (seed, salt, point, index): a run's salt is new."""
    cfg = BenchConfig(url="http://x", input_len=32)
    one, other = Prompts.load(cfg, salt=1), Prompts.load(cfg, salt=2)
    assert one.words("concurrency=4", 7) == one.words("concurrency=4", 7)  # a resumed point sends the same
    assert one.words("concurrency=4", 7) != one.words("concurrency=4", 8)
    assert one.words("concurrency=4", 7) != one.words("concurrency=8", 7)
    assert one.words("concurrency=4", 7) != other.words("concurrency=4", 7)
    assert len(one.words("rate=2", 0).split()) == 32
    assert prompt_salt(cfg, Previous()) != prompt_salt(cfg, Previous())  # a new run, a new salt
    resumed = Previous(header={"type": "header", "settings": {"prompt_salt": 12345}})
    assert prompt_salt(cfg, resumed) == 12345
    assert prompt_salt(BenchConfig(url="http://x", prompt_salt=7), resumed) == 7  # given: repeat a run's prompts


def test_cached_prompt_tokens_are_read_where_the_server_says() -> None:
    assert cached_count({"usage": {"prompt_tokens": 129, "prompt_tokens_details": {"cached_tokens": 96}}}) == 96
    assert cached_count({"timings": {"cache_n": 128, "prompt_n": 1}}) == 128  # llama-server's own timings
    assert cached_count({"usage": {"prompt_tokens": 129}}) is None
    assert cached_count({"choices": []}) is None


def test_an_overloaded_open_loop_says_so() -> None:
    """Issue 27/28: simulate at 110% of what the server carries printed no warning."""
    capacity = saturation_rate(GPU_LIKE, Lengths(512), Lengths(128), 64)
    over = simulate(GPU_LIKE, Workload(1.3 * capacity, Lengths(512), Lengths(128), 3000), 64).summary()
    assert any(w.startswith("overloaded:") for w in over["warnings"])
    under = simulate(GPU_LIKE, Workload(0.5 * capacity, Lengths(512), Lengths(128), 3000), 64).summary()
    assert not any(w.startswith("overloaded:") for w in under["warnings"])


def test_a_closed_loop_keeps_waves_an_open_loop_does_not() -> None:
    """On a server whose prompts stall every decoding sequence (a CPU's whole-prompt prefill), bench's streams,
    started over one probe request's life, fall into groups whose prompts share a step: its TTFT is a group's
    (llama-server at 16 streams: 751 ms against 122 alone). The replica advise and plan keep full ("even") spreads
    its streams over a loaded life: no waves, and what it carries is what Poisson arrivals past saturation get."""
    lengths = Lengths(129), Lengths(64)
    bench_like = at_cap(CPU_LIKE, *lengths, 16, client="staggered")
    even = at_cap(CPU_LIKE, *lengths, 16)
    poisson = saturation_rate(CPU_LIKE, *lengths, 16) * 64
    assert bench_like.ttft_ms["mean"] > 2 * even.ttft_ms["mean"]
    assert even.throughput_tok_s == pytest.approx(poisson, rel=0.06)
    loop = ClosedLoop(16, *lengths, 64, "staggered")
    first, _ = loop.requests(np.random.default_rng(0), CPU_LIKE)
    probe_s = CPU_LIKE.step_s(1, 161, 129, 129**2) + 63 * CPU_LIKE.step_s(1, 161)
    assert first[-1].arrival_s == pytest.approx(15 * probe_s / 16)


def load_protocol():
    spec = importlib.util.spec_from_file_location("real_server", ROOT / "benchmarks" / "real_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_protocol_runs_against_a_server_and_writes_its_report(tmp_path: Path, capsys) -> None:
    """benchmarks/real_server.py end to end against the emulator (a known server): sweep, fit, loads, report."""
    protocol = load_protocol()
    step = {"t_fixed_s": 2e-3, "t_weights_s": 8e-3, "t_compute_s": 4e-5, "t_kv_token_s": 0.0, "t_seq_s": 2e-4}
    with emulator_process(step, tmp_path, max_num_seqs=8) as url:
        protocol.main(
            [
                url,
                "--slots",
                "8",
                "--concurrency",
                "1,4,8",
                "--input-len",
                "64",
                "--output-len",
                "24",
                "--loads",
                "0.5,2",
                "--requests",
                "40",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    load, overloaded = report["loads"]
    assert report["fit"]["tpot_rms"] < 0.1 and load["measured"]["requests_completed"] >= 30
    assert abs(load["errors"]["throughput"]) < 0.15 and abs(load["errors"]["tpot p50"]) < 0.25
    out = capsys.readouterr().out
    assert "below saturation, median |error|" in out and "saturation: the server carried" in out
    # at twice the predicted rate the server completes what it can, below what was sent: that is the saturation
    assert load["carried_req_s"] == pytest.approx(load["sent_req_s"], rel=0.1)
    assert overloaded["carried_req_s"] < 0.8 * overloaded["sent_req_s"]
    assert report["measured_saturation_req_s"] == overloaded["carried_req_s"]
    assert report["predicted_saturation_req_s"] == pytest.approx(overloaded["carried_req_s"], rel=0.2)
    assert report["simulated_saturation_req_s"] == pytest.approx(overloaded["carried_req_s"], rel=0.15)
    # each load its own Poisson sample: bench's seed 0, then 1
    for fraction, seed in (("0.5", 0), ("2", 1)):
        header = json.loads((tmp_path / "out" / f"load-{fraction}" / "requests.jsonl").read_text().splitlines()[0])
        assert header["type"] == "header" and header["settings"]["seed"] == seed


def test_the_carried_rate_is_events_over_the_middle_three_fifths() -> None:
    """Ten events: the 2nd (index 2) to the 8th (index 8), six intervals over 6 − 1.5 s; order does not matter."""
    from tokenroof.errors import TokenroofError
    from tokenroof.serving.saturation import carried_rate

    times = [0.0, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 9.0]
    assert carried_rate(times[::-1]) == pytest.approx(6 / 4.5)
    with pytest.raises(TokenroofError, match="at least 5 events"):
        carried_rate([0.0, 1.0])


def test_the_saturation_the_loads_show_is_a_fallen_behind_load_or_a_floor_the_server_kept_up_with() -> None:
    """2026-12-07's run: at 90% load the server completed 1.482 req/s of 1.677 sent (fell behind, by the 0.95 rule), at
    110% it completed 2.065 of 1.812 sent: it kept up with a higher rate than the 90% load "saturated" at, so that was
    one draw's burst, and the figure is the floor 1.812 (the protocol read 1.482 and a +25% miss). 2026-12-06a: at
    110% 1.968 of 2.145 (behind), 90% kept up with 1.7: the saturation is 1.968."""
    protocol = load_protocol()

    def load(fraction: float, sent: float, carried: float) -> dict[str, float]:
        return {"fraction": fraction, "sent_req_s": sent, "carried_req_s": carried}

    noisy = [load(0.3, 0.565, 0.573), load(0.9, 1.677, 1.482), load(1.1, 1.812, 2.065)]
    assert protocol.saturation_shown(noisy) == (1.812, noisy[2], True)
    behind = [load(0.9, 1.70, 1.69), load(1.1, 2.145, 1.968)]
    assert protocol.saturation_shown(behind) == (1.968, behind[1], False)
    # 0.95 × 2.0 = 1.9: completing 1.90 is keeping up, 1.89 falling behind
    assert (
        protocol.saturation_shown([load(1.1, 2.0, 1.90)])[2]
        and not protocol.saturation_shown([load(1.1, 2.0, 1.89)])[2]
    )
    rate, top, floor = protocol.saturation_shown([])
    assert math.isnan(rate) and top is None and not floor
    # kept up with, within 0.95: the floor is what completed where less than was sent (12-06e: 1.719 of 1.794)
    assert protocol.saturation_shown([load(0.9, 1.794, 1.719)])[:1] == (1.719,)
    # a load too short to tell a rate from (NaN) says nothing either way
    unknown = [load(0.6, 1.1, 1.1), load(1.1, 2.0, math.nan)]
    assert protocol.saturation_shown(unknown) == (1.1, unknown[0], True)


@pytest.mark.slow
def test_the_protocol_runs_against_the_real_engine(tmp_path: Path, capsys) -> None:
    """A short version of the protocol against `tokenroof serve` (a 26M-parameter Llama on one CPU thread): the
    scheduler the simulator runs is the server's own, so what is left to miss is the step model."""
    pytest.importorskip("torch")
    from tests.emulator_process import server_process
    from tests.test_serve_engine import SMALL

    protocol = load_protocol()
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL))
    args = ["serve", "--model", str(config), "--max-num-seqs", "8", "--max-model-len", "256", "--threads", "1"]
    with server_process(args) as url:
        protocol.main(
            [url, "--slots", "8", "--concurrency", "1,2,4,8", "--input-len", "64", "--output-len", "24",
             "--loads", "0.5", "--requests", "40", "--out", str(tmp_path / "out")]
        )  # fmt: skip
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (load,) = report["loads"]
    assert load["measured"]["requests_completed"] >= 30 and not load["measured"]["invalid"]
    assert abs(load["errors"]["throughput"]) < 0.15 and abs(load["errors"]["ttft p50"]) < 0.5
    assert "below saturation, median |error|" in capsys.readouterr().out


LLAMA = ROOT / "examples" / "llama-server"


def test_the_real_llama_server_loads_are_simulated_within_the_issue_targets_on_per_slot_kv_streams() -> None:
    """The one real server in examples/ (llama-server on this CPU, examples/llama-server/README.md), run with 16 slots
    and llama.cpp's per-slot KV streams (no --kv-unified). Fitted on its sweep with that stated (kv_slots=16), each
    Poisson load simulated with its own arrivals from the slots the server's /slots showed as it began: throughput
    within 5%, TTFT p50 within 20%, the p90s within 25%, TPOT p50 within 10% at 60 and 90% load; at 30% it is
    pinned at -11%. That run's protocol read the ring by each slot's last task id, which after a closed-loop sweep is
    not the ring the server uses (2026-12-06a: TPOT p50 at 30% −48% from it, +6% from the server's log), and its log
    was not kept to correct it. Without the per-slot
    streams the same fit misses the loaded TPOT by a third or more: the scheduler, not the fit, was what was wrong."""
    from tokenroof.fit.core import fit_table
    from tokenroof.io.measurements import read_table
    from tokenroof.serving.replay import serving_fit
    from tokenroof.serving.simulate import Trace

    swept = read_table([LLAMA / "sweep"])
    assert swept.semantics.kv_slots is None  # bench cannot tell: the protocol (--kv-slots) or the header says it
    table = replace(swept, semantics=replace(swept.semantics, kv_slots=16))
    serving = serving_fit(fit_table(table, None, n_samples=0), table)
    assert serving is not None and serving.kv_slots == 16 and "per-slot KV streams" in serving.describe()
    assert serving.tpot_rms < 0.16 and serving.ttft_rms is not None and serving.ttft_rms < 0.1
    unified = serving_fit(fit_table(swept, None, n_samples=0), swept)
    assert unified is not None
    for fraction in (0.3, 0.6, 0.9):
        folder = LLAMA / f"load-{fraction:g}"
        (measured,) = json.loads((folder / "summary.json").read_text())["points"]
        trace = Trace.read(folder / "requests.jsonl")
        order = json.loads((folder / "slots.json").read_text())["order"]
        got = simulate(serving.model, trace, 16, 0, None, per_slot_kv=True, slot_order=order).summary()
        assert got["throughput_tok_s"] == pytest.approx(measured["throughput_tok_s"], rel=0.05)
        assert got["ttft_ms"]["p50"] == pytest.approx(measured["ttft_ms"]["p50"], rel=0.2)
        for metric in ("ttft_ms", "tpot_ms"):
            assert got[metric]["p90"] == pytest.approx(measured[metric]["p90"], rel=0.25)
        tpot = got["tpot_ms"]["p50"] / measured["tpot_ms"]["p50"]
        assert (0.85 < tpot < 1.0) if fraction == 0.3 else (0.9 < tpot < 1.1)
        if fraction > 0.5:
            plain = simulate(unified.model, trace, 16, 0, None).summary()
            assert plain["tpot_ms"]["p50"] < 0.75 * measured["tpot_ms"]["p50"]


LLAMA_0612 = [ROOT / "examples" / f"llama-server-2026-12-06{run}" for run in "abc"]
# 2026-12-07: the same model and flags, a CPU 40% faster at one sequence (15.4 ms a token against 25-26)
LLAMA_1207 = ROOT / "examples" / "llama-server-2026-12-07f"
LLAMA_1207H = ROOT / "examples" / "llama-server-2026-12-07h"  # the protocol again, on a run nothing was tuned to


def server_slots(run: Path) -> list[dict[str, float]]:
    """A run's server-slots.csv (llama-server's own log, one row per task) as numbers; a field it left empty: NaN."""
    import csv

    lines = [line for line in (run / "server-slots.csv").read_text().splitlines() if not line.startswith("#")]
    return [{k: float(v) if v else math.nan for k, v in row.items()} for row in csv.DictReader(lines)]


def least_recently_used(tasks: list[dict[str, float]], until_s: float) -> list[int]:
    """The slots as llama-server picks them at `until_s`: by when each was last released (its t_last_used)."""
    last: dict[int, float] = {}
    for task in tasks:
        if task["release_s"] <= until_s:
            last[int(task["slot"])] = max(last.get(int(task["slot"]), -1.0), task["release_s"])
    return sorted(last, key=last.__getitem__)


def test_the_ring_probe_reads_the_slots_in_the_order_llama_server_takes_them() -> None:
    """llama-server gives an arrival the slot released longest ago; its GET /slots shows each slot's last task id,
    which orders the slots by when their last requests arrived. After the closed-loop sweep of 2026-12-06a the two
    disagreed (the server's log: the ring began 15, 12, 5, 7 where the task ids said 15, 13, 14, 10), and the first
    load's simulation started from the wrong ring. The protocol now sends one request per slot, one at a time,
    before reading /slots (`slot_order`): on 2026-12-06b what it read is, at every load, the ring in the server's
    own log; on 2026-12-06c (128-word probes, the ring the slots the probes report) too."""
    first, probed, third = LLAMA_0612
    tasks = server_slots(first)
    # bench's calibration requests (one output token, a full prompt): the sweep's pair, then one pair before each load
    calibrations = [t for t in tasks if t["output_tokens"] == 1 and t["prompt_tokens"] >= 100]
    starts = [calibrations[i]["launch_s"] for i in range(2, 10, 2)]
    said = [json.loads((first / f"load-{f}" / "slots.json").read_text()) for f in ("0.3", "0.6", "0.9", "1.1")]
    # the fixture's rings are its log's; after the closed-loop sweep the task ids said another, after a load the same
    assert [least_recently_used(tasks, s) for s in starts] == [s["order"] for s in said]
    assert said[0]["order"][:5] == [15, 12, 5, 7, 10] and said[0]["by_task_id"][:5] == [15, 13, 14, 10, 11]
    assert said[1]["order"] == said[1]["by_task_id"] and said[2]["order"] == said[2]["by_task_id"]
    tasks = server_slots(probed)
    probe = [i for i, t in enumerate(tasks) if t["output_tokens"] == 1 and t["prompt_tokens"] < 64]
    assert len(probe) == 4 * 16  # one per slot before each of the four loads (32-word prompts then; 128 now)
    ends = [i for i in probe if i + 1 not in probe]
    for fraction, end in zip(("0.3", "0.6", "0.9", "1.1"), ends, strict=True):
        order = json.loads((probed / f"load-{fraction}" / "slots.json").read_text())["order"]
        assert least_recently_used(tasks, tasks[end]["release_s"]) == order
    tasks = server_slots(third)
    short = [i for i, t in enumerate(tasks) if t["output_tokens"] == 1]  # probes and calibrations: one token each
    runs = [i for i in short if i - 1 not in short and i + 17 in short]  # each load's 16 probes, then 2 calibrations
    assert len(runs) == 4
    for fraction, begin in zip(("0.3", "0.6", "0.9", "1.1"), runs, strict=True):
        order = json.loads((third / f"load-{fraction}" / "slots.json").read_text())["order"]
        assert [int(t["slot"]) for t in tasks[begin : begin + 16]] == order
        assert least_recently_used(tasks, tasks[begin + 15]["release_s"]) == order


def stand_in_llama_server(
    released: list[float], last_task: list[int], says_slot: bool = True, always: int | None = None
) -> Any:
    """A stand-in for llama-server's slot choice: POST /completion takes the idle slot with the oldest release (never
    used: −1; ties to the highest id), or slot `always` (as a prompt's cached prefix would pick it), and answers
    with its `id_slot` (where `says_slot`); GET /slots shows each slot's last task id."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    clock = [max(released) + 1.0]

    class Slots(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            slot = min(range(len(released)), key=lambda i: (released[i], -i)) if always is None else always
            last_task[slot] = max(last_task) + 1
            released[slot] = clock[0]
            clock[0] += 1
            self.answer(json.dumps({"id_slot": slot} if says_slot else {}).encode())

        def do_GET(self) -> None:
            self.answer(json.dumps([{"id": i, "id_task": t} for i, t in enumerate(last_task)]).encode())

        def answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slots)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("says_slot", [True, False], ids=["id_slot", "task-ids"])
def test_the_ring_probe_against_a_server_whose_task_ids_disagree_with_its_ring(says_slot: bool) -> None:
    """`slot_order` against the stand-in: the task ids order the used slots 0, 1, 3, the ring is 2 (never used), 3,
    1, 0, and the probe reads the ring (from the slots the probes report, or else from the task ids after them),
    leaving it as it was."""
    released = [3.0, 1.0, -1.0, 0.0]  # when each slot was last released
    server = stand_in_llama_server(released, [10, 11, -1, 13], says_slot)
    try:
        assert load_protocol().slot_order(f"http://127.0.0.1:{server.server_address[1]}") == [2, 3, 1, 0]
        assert sorted(range(4), key=released.__getitem__) == [2, 3, 1, 0]  # the ring as it was
    finally:
        server.shutdown()
        server.server_close()


def test_a_ring_probe_that_cannot_tell_is_no_answer() -> None:
    """No /slots (any other server), or probes that report one slot twice (picked by a cached prompt, not by age): no
    ring, and the load is simulated after the history instead."""
    protocol = load_protocol()
    assert protocol.slot_order("http://127.0.0.1:9") is None
    server = stand_in_llama_server([0.0, 1.0], [1, 2], always=0)
    try:
        assert protocol.slot_order(f"http://127.0.0.1:{server.server_address[1]}") is None
    finally:
        server.shutdown()
        server.server_close()


def test_the_ring_turns_by_the_calibration_requests_bench_sends_first(tmp_path: Path) -> None:
    """bench sends its calibration requests one at a time before a load: each takes a slot by llama-server's rule
    (never used first, the highest id first; then the one released longest ago) and moves it to the ring's end.
    Failed ones and unreadable lines do not count."""
    protocol = load_protocol()
    requests = tmp_path / "requests.jsonl"
    lines = [{"type": "header"}, {"type": "calibration", "ok": True}, {"type": "calibration", "ok": True}]
    lines += [{"type": "calibration", "ok": False}, {"type": "request", "ok": True}]
    requests.write_text("".join(json.dumps(obj) + "\n" for obj in lines) + '{"type": "calib')
    assert protocol.ring_at_start([3, 0, 1, 2], 4, requests) == [1, 2, 3, 0]
    assert protocol.ring_at_start([3, 0, 1], 4, requests) == [0, 1, 2, 3]  # slot 2, never used, then 3
    assert protocol.ring_at_start([], 4, requests) == [3, 2]
    requests.write_text(json.dumps({"type": "request", "ok": True}) + "\n")
    assert protocol.ring_at_start([3, 0, 1, 2], 4, requests) == [3, 0, 1, 2]


@pytest.mark.parametrize("run", [*LLAMA_0612, LLAMA_1207, LLAMA_1207H], ids=lambda p: p.name)
def test_the_2026_12_06_llama_server_runs_from_the_ring_the_server_used(run: Path) -> None:
    """Three more llama-server runs (2026-12-06: the same 106M f32 model, this CPU 3× slower at decode than on 12-05;
    60 requests a load), each load simulated from the ring the server used, turned by bench's calibration requests:
    on 06a from the server's log (the protocol then read /slots by task id: TPOT p50 at 30% load −32% from it,
    +6% from the log), on 06b and 06c from the ring probe, each scored over the window bench measured it over (06c's
    bench opened it as simulate does) (scored over
    simulate's own, which then opened a lifetime later than bench's, 06a at 90% read throughput +10%, TTFT p50 / p90
    +42 / +43%). In the issue's targets but for: 06a at 90% load, TTFT p50 / p90 +27 / +42% (the simulated decode is
    2-5% slower than the server's at every load, within TPOT's target, and this near saturation TTFT moves 6-10% per
    1% of step time: 3% faster steps give +8 / +11%); 06b at 60% load, TPOT p50 −13%; 06c at 90%, TTFT p50 / p90 +26
    / +43% with TPOT on target (the simulated slots free later while the batch fills: its README). 2026-12-07f, on a
    faster day: every one in the targets (TTFT p50 −3 / −2 / −1%, TPOT p50 +7 / −8 / +8%); 2026-12-07h, on a slower
    one, all but TPOT p50 at 60% load (−13%; TTFT p50 −3 / −11 / −3%, the 90% load within 3% throughout). Pinned
    within a few points of those figures, so that a change for the worse shows."""
    protocol = load_protocol()
    from tokenroof.fit.core import fit_table
    from tokenroof.io.measurements import read_table
    from tokenroof.serving.replay import serving_fit
    from tokenroof.serving.simulate import Trace

    swept = read_table([run / "sweep"])
    table = replace(swept, semantics=replace(swept.semantics, kv_slots=16))
    serving = serving_fit(fit_table(table, None, n_samples=0), table)
    # 07f's and 07h's sweeps replay within 15.8% and 14.0% only: their 16 streams fell into lockstep (TTFT 2.4 s)
    assert serving is not None and serving.tpot_rms < (0.17 if run in (LLAMA_1207, LLAMA_1207H) else 0.08)
    misses = {
        ("llama-server-2026-12-06a", 0.9): {"ttft_ms p50": 0.3, "ttft_ms p90": 0.45},
        ("llama-server-2026-12-06b", 0.6): {"tpot_ms p50": 0.15},
        ("llama-server-2026-12-06c", 0.9): {"ttft_ms p50": 0.3, "ttft_ms p90": 0.46},
        ("llama-server-2026-12-07h", 0.6): {"tpot_ms p50": 0.15},
    }
    for fraction in (0.3, 0.6, 0.9):
        folder = run / f"load-{fraction:g}"
        (measured,) = json.loads((folder / "summary.json").read_text())["points"]
        order = protocol.ring_at_start(
            json.loads((folder / "slots.json").read_text())["order"], 16, folder / "requests.jsonl"
        )
        trace = Trace.read(folder / "requests.jsonl")
        summary = simulate(serving.model, trace, 16, 0, None, per_slot_kv=True, slot_order=order).summary()
        targets = {"throughput_tok_s": 0.05, "tpot_ms p50": 0.1, "ttft_ms p50": 0.2, "tpot_ms p90": 0.25}
        targets |= {"ttft_ms p90": 0.25} | misses.get((run.name, fraction), {})
        for name, tolerance in targets.items():
            metric, _, stat = name.partition(" ")
            said, seen = (
                (summary[metric], measured[metric]) if not stat else (summary[metric][stat], measured[metric][stat])
            )
            assert said == pytest.approx(seen, rel=tolerance), (fraction, name)


@pytest.mark.parametrize("seed", "de")
def test_the_90_percent_load_with_other_poisson_samples_misses_ttft_the_same_way(seed: str) -> None:
    """examples/llama-server-2026-12-06d and -e: one server swept once, then loaded at 90% with 120 requests drawn with
    bench's seed 1 and 2 (every earlier load had seed 0's arrivals). Throughput within 1%, TPOT p50 +6 / +4%, what the
    server completed over the run's middle within 2% of the simulation's on the same arrivals; TTFT p50 +46 / +34%:
    the miss of 06a and 06c is not one sample's (the step model's shape between 8 and 16 streams: the README).
    Pinned within a few points of those figures."""
    protocol = load_protocol()
    from tokenroof.fit.core import fit_table
    from tokenroof.io.measurements import read_table
    from tokenroof.serving.replay import serving_fit

    run = ROOT / "examples" / f"llama-server-2026-12-06{seed}"
    swept = read_table([run / "sweep"])
    table = replace(swept, semantics=replace(swept.semantics, kv_slots=16))
    serving = serving_fit(fit_table(table, None, n_samples=0), table)
    assert serving is not None
    folder = run / "load-0.9"
    (measured,) = json.loads((folder / "summary.json").read_text())["points"]
    # the protocol's own replay: bench's arrivals from the ring the server's /slots showed, turned by the calibrations
    summary = protocol.predicted_load(serving.model, folder, 16, None, True, [])
    assert summary["throughput_tok_s"] == pytest.approx(measured["throughput_tok_s"], rel=0.02)
    assert summary["tpot_ms"]["p50"] == pytest.approx(measured["tpot_ms"]["p50"], rel=0.08)
    ttft = summary["ttft_ms"]["p50"] / measured["ttft_ms"]["p50"] - 1
    assert (0.4 < ttft < 0.52) if seed == "d" else (0.28 < ttft < 0.4)
    _, done = protocol.carried(folder)
    assert summary["carried_req_s"] == pytest.approx(done, rel=0.02)


@pytest.mark.parametrize("run", LLAMA_0612[1:], ids=lambda p: p.name)
def test_advise_s_cap_on_the_2026_12_06_llama_server_meets_both_targets_on_the_restarted_server(
    run: Path, tmp_path: Path
) -> None:
    """advise on each sweep (kv_slots=16) for p99 TPOT ≤ 100 ms and TTFT ≤ 1.5 s sets cap 12 (06b: predicted 100 / 663
    ms; 06c: 97 / 646); llama-server restarted with -np 12 and benched at 12 streams measured 91 / 670 ms and 92 / 891
    ms: both met on both. TPOT's prediction within 10%; TTFT's within 20% on 06b, 28% under on 06c."""
    from tests.conftest import run_json

    first, *rest = (run / "sweep" / "summary.csv").read_text().splitlines()
    table = tmp_path / "sweep.csv"
    table.write_text("\n".join([f"{first} kv_slots=16", *rest]) + "\n")
    targets = ["--tpot-slo-ms", "100", "--ttft-slo-ms", "1500"]
    answer = run_json(["advise", str(table), "--input-len", "128", "--output-len", "64", *targets])
    # the cap benched; at 11 (predicted p99 TPOT 99.997 ms against 100: a hair would move it) fewer streams only help
    assert answer["max_num_seqs"] in (11, 12)
    (benched,) = json.loads((run / "advised-c12" / "summary.json").read_text())["points"]
    assert benched["point"] == "concurrency=12" and benched["requests_completed"] >= 40
    assert benched["tpot_ms"]["p99"] <= 100 and benched["ttft_ms"]["p99"] <= 1500
    if answer["max_num_seqs"] == 12:
        ttft = 0.2 if run.name.endswith("b") else 0.3
        assert answer["at_cap"]["ttft_ms"]["p99"] == pytest.approx(benched["ttft_ms"]["p99"], rel=ttft)
        assert answer["at_cap"]["tpot_ms"]["p99"] == pytest.approx(benched["tpot_ms"]["p99"], rel=0.1)


def test_advise_s_cap_on_the_2026_12_07_llama_server_is_checked_over_bench_s_start_phases(tmp_path: Path) -> None:
    """The same question on 2026-12-07f's sweep set cap 10 from bench's own stagger (predicted p99 TPOT 79.7 ms, TTFT
    1,329); the server restarted with -np 10 and benched at 10 streams measured 83.1 / 1,838 ms (groups of 3 and 7
    prefilled together), and a second time 84.5 / 1,029 (groups of 2, 2, 4, 2): the same cap, 1.8x apart in TTFT. Over
    ten start phases the scheduler's p99 TTFT at 10 spans 1,132-1,927 ms, so advise now keeps a cap every phase meets,
    7 (TTFT 696-1,111); benched at 7 on a restarted -np 7: 63.1 / 772 ms, both met (TPOT 7% over the prediction)."""
    from tests.conftest import run_json
    from tests.schemas import validate

    first, *rest = (LLAMA_1207 / "sweep" / "summary.csv").read_text().splitlines()
    table = tmp_path / "sweep.csv"
    table.write_text("\n".join([f"{first} kv_slots=16", *rest]) + "\n")
    targets = ["--tpot-slo-ms", "100", "--ttft-slo-ms", "1500"]
    answer = run_json(["advise", str(table), "--input-len", "128", "--output-len", "64", *targets])
    assert (answer["max_num_seqs"], answer["binding"]) == (7, "ttft")
    (note,) = [w for w in answer["warnings"] if "start phases" in w]
    found = re.search(r"at max_num_seqs 10 .* TTFT ([\d,]+)–([\d,]+) ms; at 7 every phase meets them", note)
    assert found, note
    low, high = (float(x.replace(",", "")) for x in found.groups())
    measured = {}
    for folder in ("advised-c10", "advised-c10b", "advised-c7"):
        (benched,) = json.loads((LLAMA_1207 / folder / "summary.json").read_text())["points"]
        assert benched["requests_completed"] >= 40
        measured[folder] = (benched["tpot_ms"]["p99"], benched["ttft_ms"]["p99"])
    assert low < measured["advised-c10"][1] < high and 0.85 * low < measured["advised-c10b"][1] < low
    assert measured["advised-c10"][1] > 1500 > measured["advised-c10b"][1]  # one cap, one server: missed, then met
    tpot, ttft = measured["advised-c7"]
    validate("advise", answer)  # the phases as the schema has them
    phases = answer["at_cap"]["phases"]
    assert tpot <= 100 and ttft <= 1500 and phases["ttft_ms_low"] <= ttft <= phases["ttft_ms_high"] < 1500
    assert answer["at_cap"]["tpot_ms"]["p99"] == pytest.approx(tpot, rel=0.1)


def test_advise_s_cap_over_start_phases_on_a_run_it_was_not_tuned_on(tmp_path: Path, monkeypatch) -> None:
    """2026-12-07g, the protocol run again after the start-phase check was built: bench's own stagger alone meets
    p99 TPOT ≤ 100 ms and TTFT ≤ 1.5 s up to 10 (predicted TTFT 1,444 ms); over ten start phases the cap is 7.
    Both benched on restarted servers: at 7, 64.7 / 768 ms, both met; at 10, 83.6 / 1,613 ms, TTFT missed (groups of
    4 and 6). TPOT's prediction at 7 within 2%, the TTFT inside the phases' span."""
    from tests.conftest import run_json
    from tokenroof.serving import saturation

    run = ROOT / "examples" / "llama-server-2026-12-07g"
    first, *rest = (run / "sweep" / "summary.csv").read_text().splitlines()
    table = tmp_path / "sweep.csv"
    table.write_text("\n".join([f"{first} kv_slots=16", *rest]) + "\n")
    asked = ["advise", str(table), "--input-len", "128", "--output-len", "64", "--tpot-slo-ms", "100"]
    asked += ["--ttft-slo-ms", "1500"]
    answer = run_json(asked)
    phases = answer["at_cap"]["phases"]
    benched = {}
    for cap in (7, 10):
        (point,) = json.loads((run / f"advised-c{cap}" / "summary.json").read_text())["points"]
        assert point["requests_completed"] >= 40
        benched[cap] = (point["tpot_ms"]["p99"], point["ttft_ms"]["p99"])
    assert answer["max_num_seqs"] == 7 and benched[7][0] <= 100 and benched[7][1] <= 1500
    assert answer["at_cap"]["tpot_ms"]["p99"] == pytest.approx(benched[7][0], rel=0.02)
    assert phases["ttft_ms_low"] <= benched[7][1] <= phases["ttft_ms_high"] < 1500
    monkeypatch.setattr(saturation, "PHASES", 1)  # bench's own stagger alone: the cap that missed
    alone = run_json(asked)
    assert alone["max_num_seqs"] == 10 and "phases" not in alone["at_cap"]
    assert alone["at_cap"]["ttft_ms"]["p99"] < 1500 < benched[10][1]


def test_a_step_of_several_passes_costs_what_its_passes_cost_apart() -> None:
    """benchmarks/llama_server_passes.py on 2026-12-07's server: k streams pinned to slots, contiguous (one forward
    pass) and spread over the ring (llama.cpp splits the step into one ubatch per run of consecutive slots); every
    spread set's step is the sum of its passes' contiguous steps within -1...+6%, the scheduler's pricing of a pass
    (a step of its own). The runs by hand first."""
    spec = importlib.util.spec_from_file_location("passes", ROOT / "benchmarks" / "llama_server_passes.py")
    assert spec is not None and spec.loader is not None
    passes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(passes)
    assert passes.passes([5, 0, 2, 1]) == [3, 1] and passes.passes([0, 8]) == [1, 1] and passes.passes([3]) == [1]
    rows = json.loads((LLAMA_1207 / "passes.json").read_text())
    assert passes.table({r["slots"]: r["step_ms"] for r in rows}) == rows  # the script's sums, from its steps
    several = [r for r in rows if len(r["passes"]) > 1]
    assert len(several) == 6
    for r in several:
        assert -0.02 < r["step_ms"] / r["sum_of_passes_ms"] - 1 < 0.07, r["slots"]


SERVE = ROOT / "examples" / "serve-llama-123m"
# the same engine and protocol on 2026-12-06, three times: steps 40-50% slower than on 2026-12-04, another shape
RUNS = [SERVE, *(ROOT / "examples" / f"serve-llama-123m-2026-12-06{run}" for run in "abc")]


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_real_engine_sweep_replays_and_its_loads_are_simulated_within_the_issue_targets(run: Path) -> None:
    """examples/serve-llama-123m*: `tokenroof serve` (real fp32 forward passes of llama-123m on one CPU thread) swept
    and loaded by `make real-server`, four times. The fit on each sweep simulates every load below saturation within
    the issue's targets (throughput 5%, TPOT p50 10%, TTFT p50 20%, p90s 25%), but one: TTFT p90 at 90% load of the
    first 2026-12-06 run, +26% (a queue's tail near saturation over 60 requests; +29% scored over simulate's own
    window rather than bench's). TPOT p50 at light load was -11%
    on the first run while the step model was a line in the batch and this CPU's steps are not (31.7 ms at one
    sequence, the line 35.7; 44.5 at two, the line 40.3): the fit now keeps the sweep's measured departures from the
    line where its TPOT is mostly decode steps (examples/serve-llama-123m/README.md)."""
    from tokenroof.fit.core import fit_table
    from tokenroof.io.measurements import read_table
    from tokenroof.serving.replay import serving_fit
    from tokenroof.serving.simulate import Trace

    table = read_table([run / "sweep"])
    serving = serving_fit(fit_table(table, None, n_samples=0), table)
    assert serving is not None and serving.max_num_batched_tokens is None  # whole prompts, as the server ran
    assert serving.tpot_rms < 0.08 and serving.ttft_rms is not None and serving.ttft_rms < 0.15
    assert [round(b) for b, _ in serving.model.batch_factors] == [1, 2]
    for fraction in (0.3, 0.6, 0.9):
        folder = run / f"load-{fraction:g}"
        (measured,) = json.loads((folder / "summary.json").read_text())["points"]
        summary = simulate(serving.model, Trace.read(folder / "requests.jsonl"), 16, 0, None).summary()
        assert summary["throughput_tok_s"] == pytest.approx(measured["throughput_tok_s"], rel=0.05)
        assert summary["ttft_ms"]["p50"] == pytest.approx(measured["ttft_ms"]["p50"], rel=0.2)
        assert summary["tpot_ms"]["p50"] == pytest.approx(measured["tpot_ms"]["p50"], rel=0.1)
        assert summary["tpot_ms"]["p90"] == pytest.approx(measured["tpot_ms"]["p90"], rel=0.25)
        tail = 0.28 if (run.name, fraction) == ("serve-llama-123m-2026-12-06a", 0.9) else 0.25
        assert summary["ttft_ms"]["p90"] == pytest.approx(measured["ttft_ms"]["p90"], rel=tail)


@pytest.mark.parametrize("run", [RUNS[0], RUNS[2], RUNS[3]], ids=lambda p: p.name)
def test_advise_s_cap_benched_on_the_real_engine(run: Path) -> None:
    """A run's report: advise on its sweep for p99 TPOT ≤ 110 ms and TTFT ≤ 1.5 s, and the cap benched on the server
    (12-06a's report is re-scored by today's code, whose cap, 8, is not the 7 benched then). TTFT is met on every run;
    TPOT on 12-04 and 12-06b, and on 12-06c missed by 0.4 ms (110.4: advise takes the largest cap whose predicted p99
    meets the target, and its prediction, 105.2, was 5% under). TPOT's predictions are within 5% of the measured,
    TTFT's within 27% (12-04's tail)."""
    found = json.loads((run / "report.json").read_text())["advise"]
    assert found["ttft"]["met"] and found["tpot"]["measured_p99_ms"] <= 1.005 * found["tpot"]["target_ms"]
    assert found["met"] == (run.name != "serve-llama-123m-2026-12-06c")
    for metric, within in (("tpot", 0.05), ("ttft", 0.3)):
        said, seen = found[metric]["predicted_p99_ms"], found[metric]["measured_p99_ms"]
        assert said == pytest.approx(seen, rel=within)


def test_advise_says_when_its_cap_sits_within_the_fits_error_of_a_target() -> None:
    """On 12-06c advise's cap 9 predicted p99 TPOT 105.2 ms against 110, within twice the sweep replay's 3.8% rms,
    and the server measured 110.4: the answer now says so and names the cap that keeps that margin (8: predicted
    97.7 ms). On 12-04 (102.1 ms against 110, replay error 3% or less) nothing is said."""
    from tests.conftest import run_json

    targets = ["--input-len", "128", "--output-len", "64", "--tpot-slo-ms", "110", "--ttft-slo-ms", "1500"]
    close = run_json(["advise", str(RUNS[3] / "sweep"), *targets])
    assert close["max_num_seqs"] == 9
    (said,) = [w for w in close["warnings"] if "replay error" in w]
    # the figures to the fit's own precision (its solver stops within ~0.2% of them: the summation order moves them)
    found = re.search(r"p99 TPOT ([\d.]+) ms \(target 110, ([\d.]+)%\)", said)
    assert found and float(found[1]) == pytest.approx(105.2, abs=0.5) and float(found[2]) == pytest.approx(3.8, abs=0.2)
    assert "max_num_seqs 8 keeps it" in said
    clear = run_json(["advise", str(RUNS[0] / "sweep"), *targets])
    assert not [w for w in clear["warnings"] if "replay error" in w]


def test_the_margin_note_by_hand() -> None:
    """margin_notes: a statistic over target × (1 − 2 rms) is close; the search is asked with the targets tightened by
    that margin; no cap meeting them is said too."""
    from types import SimpleNamespace

    from tokenroof.errors import TokenroofError
    from tokenroof.serving.advise import Targets, margin_notes

    def at(cap: int, tpot: float, ttft: float) -> SimpleNamespace:
        return SimpleNamespace(max_num_seqs=cap, tpot_ms={"p99": tpot}, ttft_ms={"p99": ttft})

    result = SimpleNamespace(statistic="p99", chosen=at(9, 95.0, 500.0))
    asked: list[tuple[float, float | None]] = []

    def search(tpot: float, ttft: float | None) -> SimpleNamespace:
        asked.append((tpot, ttft))
        return SimpleNamespace(chosen=at(7, 85.0, 400.0))

    targets = Targets(100.0, 1000.0)
    assert margin_notes(result, 0.02, 0.1, targets, search) == []  # 95 ≤ 100 × 0.96, 500 ≤ 1000 × 0.8
    (note,) = margin_notes(result, 0.03, 0.1, targets, search)  # 95 > 94
    assert asked[-1] == (pytest.approx(94.0), pytest.approx(800.0))
    # three figures, as the cap's own line prints them (6.25 there had read 6.2 here)
    assert "p99 TPOT 95 ms (target 100, 3.0%)" in note and "TTFT" not in note.split(" is within")[0]
    assert note.endswith("max_num_seqs 7 keeps it (predicted p99 TPOT 85 ms, TTFT 400)")
    (both,) = margin_notes(result, 0.03, 0.3, targets, search)  # 500 > 1000 × 0.4
    assert "p99 TPOT 95 ms (target 100, 3.0%) and p99 TTFT 500 ms (target 1000, 30.0%)" in both

    margin_notes(result, 0.03, None, targets, search)  # no TTFT replay error: the TTFT target asked as given
    assert asked[-1] == (pytest.approx(94.0), 1000.0)

    def nothing(tpot: float, ttft: float | None) -> SimpleNamespace:
        raise TokenroofError("no batch cap meets the targets")

    assert margin_notes(result, 0.03, None, targets, nothing)[0].endswith("no cap keeps that margin")


def test_the_departures_are_the_engines_own_steps() -> None:
    """The departures a sweep's TPOT shows at one and two streams are the steps': the engine logged 31.7 / 44.5 ms
    steps at 1 / 2 sequences on 2026-12-04 (the line alone said 35.7 / 40.3), and the steps at 4 and 8 sequences,
    left to the line, are within 5% of the 51.3 / 64.8 ms logged."""
    from tokenroof.fit.core import fit_table
    from tokenroof.io.measurements import read_table
    from tokenroof.serving.replay import serving_fit

    table = read_table([SERVE / "sweep"])
    serving = serving_fit(fit_table(table, None, n_samples=0), table)
    assert serving is not None
    logged = {1: 31.726, 2: 44.5085, 4: 51.3285, 8: 64.832}
    for batch, wall_ms in logged.items():
        assert serving.model.step_s(batch, batch * 160.0) * 1e3 == pytest.approx(wall_ms, rel=0.05)
    for batch in (1, 2):
        assert serving.model.step_s(batch, batch * 160.0) * 1e3 == pytest.approx(logged[batch], rel=0.02)
    line = replace(serving.model, batch_factors=())
    assert line.step_s(1, 160.0) * 1e3 > 1.1 * logged[1]  # the line alone: 35.7 ms
    assert serving.model.step_s(8, 8 * 160.0) == line.step_s(8, 8 * 160.0)  # past the departures, the line


def test_advise_on_a_llama_server_sweep_says_the_cap_is_a_new_server(tmp_path: Path) -> None:
    """advise's cap on llama-server is a restart with a new -np, and on this CPU that alone changed the prompt time
    1.6× (examples/llama-server/advised-c14): the answer says to bench the new cap, naming both slot counts."""
    from tests.conftest import run_json

    lines = (LLAMA / "sweep" / "summary.csv").read_text().splitlines()
    table = tmp_path / "summary.csv"
    targets = ["--tpot-slo-ms", "60", "--ttft-slo-ms", "1000", "--input-len", "129", "--output-len", "64"]

    def advise(setting: str) -> dict:
        """advise on the sweep with `setting` added to its header."""
        table.write_text("\n".join([f"{lines[0]} {setting}", *lines[1:]]) + "\n")
        return run_json(["advise", str(table), *targets])

    answer = advise("kv_slots=16")
    cap = answer["max_num_seqs"]
    assert cap != 16
    assert any(f"-np 16); the cap is a new -np {cap}" in w and "bench the new cap" in w for w in answer["warnings"])
    # a sweep bench ran against llama-server says so itself (server=llama-server, from its GET /props), kv_slots or not
    said = advise("server=llama-server")
    assert any("measured on llama-server; the cap is a new -np" in w for w in said["warnings"])


def test_predict_on_the_real_engine_sweep_states_the_departures_it_keeps(tmp_path: Path) -> None:
    """`predict` on a sweep whose steps bend away from the form: the JSON carries the knots (and validates), the text
    says what the answers carry, and the saved model runs them in simulate."""
    from tests.conftest import run_cli, run_json
    from tests.schemas import validate

    data = run_json(["predict", str(SERVE / "sweep"), "--batch", "4", "32", "--save-model", str(tmp_path / "m.json")])
    validate("predict", data)
    knots = data["serving"]["step_model"]["batch_factors"]
    # only 1 and 2 streams: from 4 the arriving prompts' steps make up a quarter of TPOT and more (DECODE_SHARE)
    assert [round(b) for b, _ in knots] == [1, 2] and 0.85 < knots[0][1] < 0.95 and 1.05 < knots[1][1] < 1.15
    text = " ".join(run_cli(["predict", str(SERVE / "sweep"), "--batch", "4"]).output.split())
    said = "in range its decode steps take the measured departures from these terms (×0.90 at 1, ×1.10 at 1.98 "
    assert said + "sequences; fading to none by 3.97)" in text
    saved = str(tmp_path / "m.json")
    simulated = run_json(["simulate", "--step-model", saved, "--concurrency", "2", "--num-requests", "40"])
    assert any("measured departures" in w for w in simulated["warnings"])
