"""bench --workers N: the load from N client processes, one schedule planned by the coordinator, every request
recorded once in the same files, each worker's self-check, and a worker that dies mid-point accounted for."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.emulator_process import bench_in_process
from tests.test_bench_faults import FakeServer, config, lines, probe_then_stall, serve
from tokenroof.errors import TokenroofError
from tokenroof.io.measurements import read_jsonl
from tokenroof.measure.http.run import run_bench
from tokenroof.model.stepmodel import StepModel
from tokenroof.stats import arrival_times

STEP = StepModel(t_fixed_s=4e-3, t_weights_s=6e-3, t_compute_s=1e-4, t_kv_token_s=0.0)


def test_two_workers_send_one_schedule_and_every_request_is_recorded_once(tmp_path: Path) -> None:
    """A closed loop of 8 streams and a Poisson rate from two worker processes against the emulator: every request
    sent is recorded exactly once, each worker's share and self-check is in the point, the closed loop's TPOT is the
    emulator's step at its batch, and the open loop's requests leave on the seed's own arrival times (the schedule
    one process would have sent: arrival j at base + t_j, whichever worker sent it)."""
    from tokenroof.serving.emulate.server import Emulator

    def run(name: str, **point: Any) -> dict[str, Any]:
        out = tmp_path / name
        found = bench_in_process(Emulator(STEP), input_len=1, output_len=16, out_dir=out, workers=2, **point)
        sent = [(s["point"], s["index"]) for _, s in read_jsonl(out / "requests.jsonl") if s.get("type") == "sent"]
        records = lines(out)
        assert len(sent) == len(set(sent)) and sorted(sent) == sorted((r["point"], r["index"]) for r in records)
        assert not found["invalid"], found["invalid"]
        shares = found["client_workers"]
        assert [w["worker"] for w in shares] == [0, 1] and not any(w["exited"] for w in shares)
        assert all(w["requests_sent"] > 0 for w in shares)
        mine = [r for r in records if r["index"] >= 0]  # the probe (index < 0) is the coordinator's
        assert sum(w["requests_sent"] for w in shares) == len(mine)
        assert found["client_loop_lag_p99_ms"] >= max(w["client_loop_lag_p99_ms"] for w in shares)  # the worst one
        assert json.loads((out / "summary.json").read_text())["client_workers"] == 2
        found["records"] = records
        return found

    closed = run("closed", concurrencies=[8], requests_per_point=32)
    rate = 30.0
    opened = run("open", rates=[rate], requests_per_point=60)
    # closed loop: the running batch is the 8 streams (less a step between each stream's requests, one in 17 of a
    # 16-token request's), each step the emulator's at that batch (1 prompt token each admission: b/16 a step)
    batch = closed["batch"]
    assert batch == pytest.approx(8 * 16 / 17, rel=0.05)
    want = STEP.step_s(batch, 0.0, batch / 16) * 1e3
    # 10%: the emulator shares this process (and the machine) with the test run; bench_scale.py measures closely
    assert closed["tpot_ms"]["mean"] == pytest.approx(want, rel=0.10)
    # open loop: request j left at base + t_j of the seed's arrivals (the same draws as one process)
    times = arrival_times(rate, 1.0, 60, np.random.default_rng(0))
    starts = {r["index"]: r["start_s"] for r in opened["records"]}
    late = np.array([starts[j] - times[j] for j in range(60)])
    spread = np.abs(late - np.median(late))  # one base; each arrival on time but for its worker's loop lag
    assert np.mean(spread < 0.02) >= 0.9, spread  # arrivals dealt to the wrong times would be ~33 ms apart


def test_a_worker_that_dies_mid_point_is_accounted_for_and_the_sweep_stops(tmp_path: Path) -> None:
    """Worker 1 killed while its requests stall: they are recorded as cut by its exit, the point is invalid and says
    why, nothing sent goes unrecorded, and the next point refuses to run with half its client gone."""
    server = FakeServer(probe_then_stall)
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 30
        while server.requests < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        workers = sorted(multiprocessing.active_children(), key=lambda p: p.name)
        victim = next(p for p in workers if p.name == "bench-1")
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        killed.append(victim.pid)

    async def main() -> list[dict[str, Any]]:
        runner, url = await serve(server)
        try:
            cfg = config(url, tmp_path, concurrencies=[4, 5], workers=2, max_duration_s=3.0, timeout_s=30.0)
            return await run_bench(cfg)
        finally:
            await runner.cleanup()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    with pytest.raises(TokenroofError) as raised:
        asyncio.run(main())
    assert (
        raised.value.as_flags()
        == "bench client worker(s) 1 exited: the sweep stops here (--resume continues with fresh workers)"
    )
    thread.join(5)
    assert killed
    (point,) = json.loads((tmp_path / "summary.json").read_text())["points"]
    assert point["point"] == "concurrency=4" and "client worker(s) 1 stopped answering mid-point" in point["invalid"]
    assert [w["exited"] for w in point["client_workers"]] == [False, True]
    records = lines(tmp_path)
    cut = [r for r in records if "client worker 1 exited mid-point" in (r["error"] or "")]
    assert cut and all(r["error_type"] == "cancelled" for r in cut)
    sent = {(s["point"], s["index"]) for _, s in read_jsonl(tmp_path / "requests.jsonl") if s.get("type") == "sent"}
    assert sent == {(r["point"], r["index"]) for r in records}


def test_workers_must_be_at_least_one(tmp_path: Path) -> None:
    with pytest.raises(TokenroofError) as raised:
        asyncio.run(run_bench(config("http://127.0.0.1:9", tmp_path, workers=0)))
    assert raised.value.as_flags() == "--workers must be ≥ 1, got 0"
