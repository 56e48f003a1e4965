"""GuideLLM reports (io/guidellm.py): how a benchmark's run ended decides what its means and concurrency are over, and
the replay (serving/replay.py) runs it the same way."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_json
from tests.test_replay import GENERATOR, TRUTH
from tokenroof.errors import TokenroofError
from tokenroof.io.measurements import read_table
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.replay import answered_by_stop, cut_count, held_concurrency
from tokenroof.serving.simulate import Lengths


def dist(mean: float) -> dict[str, Any]:
    return {"successful": {"mean": mean, "median": mean}, "errored": None, "total": {"mean": mean}}


def bench(
    kind: str, concurrency: float, itl: float, totals: dict | None = None, old: bool = False, **setting: Any
) -> dict[str, Any]:
    """One benchmark as GuideLLM 0.4+ writes it (`config`, `metrics.request_totals`) or, `old`, as 0.3 did (`args`,
    `request_totals` beside the metrics); `setting`: more of its config (args)."""
    strategy = {"type_": kind, "rate": 2.0} if kind in ("poisson", "constant") else {"type_": kind, "streams": 8}
    metrics = {
        "request_concurrency": dist(concurrency),
        "output_tokens_per_second": dist(concurrency * 1000 / itl),
        "inter_token_latency_ms": dist(itl),
        "time_to_first_token_ms": dist(40.0),
    }
    out: dict[str, Any] = {"type_": "generative_benchmark"}
    if old:
        out |= {"args": {"strategy": strategy, **setting}, "metrics": metrics}
        if totals is not None:
            out["request_totals"] = totals
    else:
        out |= {"config": {"strategy": strategy, **setting}, "metrics": metrics}
        if totals is not None:
            metrics["request_totals"] = totals
    return out


def write(tmp_path: Path, benchmarks: list[dict]) -> Path:
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps({"benchmarks": benchmarks}))
    return path


def totals(successful: int, incomplete: int) -> dict[str, int]:
    return {"successful": successful, "incomplete": incomplete, "errored": 0, "total": successful + incomplete}


def test_a_rate_run_cut_at_its_time_limit_counts_what_it_sent_and_says_it_was_cut(tmp_path: Path) -> None:
    """A time limit (no warm-up or cool-down) cancels what is in flight: the rate's requests are the successful ones,
    what its means are over, and what it sent (successful and incomplete) is its `sent`; a synchronous point beside
    them, a closed loop, is a whole run of its answered requests (replayed with its streams all started at once, the
    cut's one request in flight not modelled): no `sent`."""
    path = write(
        tmp_path,
        [
            bench("synchronous", 0.99, 10.0, totals(30, 1)),
            bench("poisson", 4.0, 11.0, totals(200, 6)),
            bench("poisson", 12.0, 14.0, totals(580, 25)),
        ],
    )
    table = read_table([path])
    assert table.semantics.client == "poisson" and table.requests is not None and table.sent is not None
    assert table.requests.tolist() == [30.0, 200.0, 580.0]
    assert np.isnan(table.sent[0]) and table.sent[1:].tolist() == [206.0, 605.0]
    points = run_json(["predict", str(path), "--batch", "16"])["measured"]["points"]
    assert [(p["requests"], p["sent"]) for p in points] == [(30, None), (200, 206), (580, 605)]


def test_a_request_limit_drains_and_a_warm_up_leaves_a_window(tmp_path: Path) -> None:
    """No request cancelled: every one answered, the drain in the means (requests, nothing `sent` beyond them); a
    warm-up or cool-down, in either release's spelling, cuts the ends off: a steady window, no requests; a report
    without totals likewise."""
    drained = read_table(
        [write(tmp_path, [bench("poisson", 4.0, 11.0, totals(200, 0)), bench("poisson", 9, 13.0, totals(400, 0))])]
    )
    assert drained.sent is None and drained.requests is not None
    assert drained.requests.tolist() == [200.0, 400.0]
    for setting, old in (
        ({"warmup": {"percent": 0.1, "value": None}}, False),
        ({"cooldown": {"percent": None, "value": 5}}, False),
        ({"warmup_number": 20}, True),
        ({"cooldown_duration": 10.0}, True),
    ):
        rows = [bench("poisson", c, itl, totals(200, 6), old=old, **setting) for c, itl in ((4.0, 11.0), (9.0, 13.0))]
        table = read_table([write(tmp_path, rows)])
        assert table.requests is None and table.sent is None, setting
    old = read_table([write(tmp_path, [bench("poisson", c, 12.0, totals(100, 3), old=True) for c in (3.0, 7.0)])])
    assert old.requests is not None and old.requests.tolist() == [100.0, 100.0]
    assert old.sent is not None and old.sent.tolist() == [103.0, 103.0]
    bare = read_table([write(tmp_path, [bench("poisson", c, 12.0) for c in (3.0, 7.0)])])
    assert bare.requests is None and bare.sent is None


def test_request_totals_that_are_no_counts_are_named(tmp_path: Path) -> None:
    for bad in (-1, 2.5, "6", True, float("inf"), 1e30):
        path = write(
            tmp_path,
            [
                bench("poisson", 4.0, 11.0, {"successful": 200, "incomplete": bad}),
                bench("poisson", 8, 12, totals(9, 1)),
            ],
        )
        with pytest.raises(TokenroofError, match=r"benchmark 0: request_totals.incomplete must be a whole number"):
            read_table([path])


def test_a_cut_run_holds_the_requests_answered_by_its_last_arrival() -> None:
    """By hand: arrivals at 0, 1, 2, 3 s answered at 1.5, 2.5, 5 and 3.5 s. Stopped at its last arrival (3 s), two were
    answered by then: (1.5 + 1.5) s in flight over 3 s = 1.0 requests, GuideLLM's count; the two cancelled held 1 s and
    0 s, so the search's count against a run that cancelled one is 1.0 + (2 − 1) × 0.5 s ÷ 3 s and against one that
    cancelled three 1.0 − 0.5 / 3. A whole run that drains holds (1.5 + 1.5 + 3 + 0.5) s over 0–5 s = 1.3."""
    seqs = [SimpleNamespace(arrival_s=float(a), finished_s=f) for a, f in ((0, 1.5), (1, 2.5), (2, 5.0), (3, 3.5))]
    run: Any = SimpleNamespace(sequences=seqs, window_s=lambda: (0.0, 5.0))
    start, stop, answered = answered_by_stop(run)
    assert (start, stop, answered.tolist()) == (0.0, 3.0, [True, True, False, False])
    assert held_concurrency(run, in_flight=True, whole=True, cut=True) == pytest.approx(1.0)
    assert cut_count(run, in_flight=True, cancelled=2) == pytest.approx(1.0)
    assert cut_count(run, in_flight=True, cancelled=1) == pytest.approx(1.0 + 0.5 / 3)
    assert cut_count(run, in_flight=True, cancelled=3) == pytest.approx(1.0 - 0.5 / 3)
    assert held_concurrency(run, in_flight=True, whole=True) == pytest.approx(1.3)


@pytest.mark.heavy
def test_a_sweep_cut_at_its_time_limits_recovers_the_server_that_ran_it(tmp_path: Path) -> None:
    """A server (TRUTH, cap 32) swept by GuideLLM at 20, 45, 70 and 90% of its saturation under a time limit, 300
    requests sent a rate (256 in, 64 out), each benchmark's means and concurrency over the requests answered by the
    limit: predict replays each rate as a run of as many arrivals stopped at the last, and the fitted saturation is the
    server's within 5% (+2.0% here; −2.2 to +2.0% over four samples of arrivals); read as steady windows (the totals
    dropped), the cut run's lighter concurrency reads as a lighter load and the saturation comes out lower (−2.1% here,
    −2.1 to −7.5% over the four)."""
    from tokenroof.serving.saturation import saturation_rate

    lengths = (Lengths(256), Lengths(64))
    saturation = saturation_rate(TRUTH, *lengths, 32)
    rates = [share * saturation for share in (0.2, 0.45, 0.7, 0.9)]
    rng = np.random.default_rng(0)  # no noise is drawn: the arrivals' sample is the only one
    report = GENERATOR.guidellm_report(rates, 256, 64, rng, TRUTH, None, None, 300, False, 0, "poisson", "seconds")
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(report))
    answered = [b["metrics"]["request_totals"]["successful"] for b in report["benchmarks"]]
    assert min(answered) < 300  # the time limit cancelled some at every rate here
    serving = run_json(["predict", str(path), "--batch", "16"])["serving"]
    assert serving["tpot_rms"] < 0.03
    cut = saturation_rate(StepModel(**serving["step_model"]), *lengths, 32)
    assert cut == pytest.approx(saturation, rel=0.05)
    for b in report["benchmarks"]:
        del b["metrics"]["request_totals"]
    path.write_text(json.dumps(report))
    window = run_json(["predict", str(path), "--batch", "16"])["serving"]
    assert saturation_rate(StepModel(**window["step_model"]), *lengths, 32) < cut


def test_a_csv_says_what_a_cut_run_sent(tmp_path: Path) -> None:
    """The same by hand: a `sent` column beside `requests`; a row without them a steady window; a JSON point the
    same; fewer sent than answered is no run."""
    path = tmp_path / "rates.csv"
    head = "# batch_kind=concurrency tpot_kind=itl client=poisson input_len=256 output_len=64\n"
    path.write_text(head + "batch,tpot_ms,ttft_ms,requests,sent\n1,10,40,,\n4,11,45,200,206\n12,14,60,580,605\n")
    table = read_table([path])
    assert table.requests is not None and table.sent is not None
    assert np.isnan(table.requests[0]) and table.requests[1:].tolist() == [200, 580] and table.sent[2] == 605
    points = tmp_path / "points.json"
    points.write_text(
        json.dumps({"points": [{"batch": 4, "tpot_ms": 11, "requests": 200, "sent": 206}, {"batch": 8, "tpot_ms": 12}]})
    )
    assert read_table([points]).sent.tolist()[0] == 206  # type: ignore[union-attr]
    for cells, message in (
        (",206", "sent 206 without requests"),
        ("300,206", "sent 206 is fewer than the 300 requests"),
    ):
        path.write_text(head + f"batch,tpot_ms,requests,sent\n1,10,,\n4,11,{cells}\n")
        with pytest.raises(TokenroofError, match=message):
            read_table([path])


def test_failed_requests_a_ramp_up_and_a_filled_client_cap_are_said(tmp_path: Path) -> None:
    """More than 1% of a run failed, a ramp-up inside the means: each warned of by benchmark; a rate whose client cap
    filled (in flight above 90% of it) is no rate: left out, as vLLM's."""
    rows = [
        bench("poisson", 4.0, 11.0, {"successful": 200, "incomplete": 6, "errored": 9}),
        bench("constant", 9.0, 13.0, totals(400, 20)),
        bench("constant", 15.5, 16.0, totals(500, 30)),
    ]
    rows[1]["config"]["strategy"]["rampup_duration"] = 10.0
    rows[2]["config"]["strategy"]["max_concurrency"] = 16
    table = read_table([write(tmp_path, rows)])
    assert table.batch.tolist() == [4.0, 9.0]
    failed, ramp, left = table.warnings[:3]
    assert failed.endswith("benchmark 0: 9 requests failed: the run is replayed with the 206 that did not, so its load "
                           "reads lighter than the server's if they held it")  # fmt: skip
    assert "benchmark 1: its 10 s ramp-up is in its means" in ramp
    assert "benchmark 2: left out: at request rate 2 the client's concurrency cap 16 bound (15.5" in left


def test_repeated_runs_at_one_concurrency_pool_what_they_sent(tmp_path: Path) -> None:
    """Rows at one batch pool: a cut run (sent 120 of 100 answered) beside one that answered all it sent (100) sent 110
    on average, still cut; two that answered all, no cut; a whole run pooled with a window, a window."""
    path = tmp_path / "rates.csv"
    head = "# batch_kind=concurrency tpot_kind=itl client=poisson input_len=256 output_len=64\n"
    path.write_text(
        head + "batch,tpot_ms,requests,sent\n4,11,100,120\n4,11.2,100,\n8,12,100,\n8,12.1,100,\n16,14,90,\n16,14,,\n"
    )
    table = read_table([path])
    assert table.requests is not None and table.sent is not None
    assert table.requests[:2].tolist() == [100, 100] and np.isnan(table.requests[2])
    assert table.sent[0] == 110 and np.isnan(table.sent[1:]).all()


@pytest.mark.heavy
def test_a_sweep_s_throughput_benchmark_replays_as_every_stream_at_once(tmp_path: Path) -> None:
    """GuideLLM's sweep runs a throughput benchmark beside its rates: every stream at once, each replaced as it ends,
    averaged over the whole run (no warm-up), the first wave's prompts prefilled together in it. Replayed so (a burst
    closed loop of its answered requests), its TTFT is the measured within 5% (0.0% here) and the saturation the
    server's within 2.5% (−0.5%); replayed as a staggered loop over a steady window, −4.9%."""
    from tokenroof.serving.saturation import saturation_rate

    lengths = (Lengths(256), Lengths(64))
    saturation = saturation_rate(TRUTH, *lengths, 32)
    rates = [share * saturation for share in (0.2, 0.45, 0.7, 0.9)]
    rng = np.random.default_rng(0)
    report = GENERATOR.guidellm_report(rates, 256, 64, rng, TRUTH, None, None, 300, False, 0, "poisson", "seconds")
    seconds = max(b["metrics"]["request_totals"]["total"] / r for b, r in zip(report["benchmarks"], rates, strict=True))
    report["benchmarks"].append(GENERATOR.guidellm_throughput(32, seconds, 256, 64, TRUTH, None, None))
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(report))
    serving = run_json(["predict", str(path), "--batch", "16"])["serving"]
    top = max(serving["replay"], key=lambda row: row["batch"])
    assert top["ttft_ms_replayed"] == pytest.approx(top["ttft_ms"], rel=0.05)
    assert saturation_rate(StepModel(**serving["step_model"]), *lengths, 32) == pytest.approx(saturation, rel=0.025)


def test_lengths_drawn_at_random_state_their_spread(tmp_path: Path) -> None:
    """A dataset's (or `output_tokens_stdev`'s) spread of lengths: each benchmark's std_dev ÷ mean, averaged over the
    sweep, as the table's output_len_cv for the replay to draw lengths alike; prompts of one length (std_dev 0) state
    none."""
    benchmarks = [bench("poisson", c, 20.0 + c, totals(100, 0)) for c in (2.0, 6.0)]
    for b, sd in zip(benchmarks, (32.0, 48.0), strict=True):
        b["metrics"]["output_token_count"] = {"successful": {"mean": 128.0, "std_dev": sd}}
        b["metrics"]["prompt_token_count"] = {"successful": {"mean": 256.0, "std_dev": 0.0}}
    sem = read_table([write(tmp_path, benchmarks)]).semantics
    assert sem.output_len_cv == pytest.approx((0.25 + 0.375) / 2) and sem.input_len_cv is None
