"""MeasurementTable I/O: the DESIGN.md CSV, other tools' JSON, and every bad-table error names its row."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_json
from tokenroof.errors import TokenroofError
from tokenroof.io.measurements import MeasurementTable, parse_csv, read_table
from tokenroof.model.stepmodel import StepModel

GOOD = """# measured on a test box
# second provenance line
batch,throughput_tok_s,tpot_ms
8,600,13.3
1,80,12.5
32,,14.5
128,6400,
"""


def test_csv_sorted_derived_and_provenance_kept() -> None:
    table = parse_csv(GOOD, "t.csv")
    assert list(table.batch) == [1, 8, 32, 128]
    assert table.provenance == ("measured on a test box", "second provenance line")
    assert table.throughput_tok_s[2] == pytest.approx(32 * 1000 / 14.5)  # derived from TPOT
    assert table.tpot_ms[3] == pytest.approx(128 * 1000 / 6400)  # derived from throughput
    assert table.derived == ("", "", "throughput_tok_s", "tpot_ms")
    again = parse_csv(table.to_csv(), "again.csv")
    assert np.allclose(again.tpot_ms, table.tpot_ms, rtol=1e-5)
    assert again.provenance == table.provenance


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("batch,tpot_ms\n1,10\n", "need at least 2 measured points, got 1"),
        ("batch,tpot_ms\n1,10\n2,-3\n", "t.csv:3: tpot_ms must be a positive number, got -3"),
        ("batch,tpot_ms\n1,10\n2,nan\n", "t.csv:3: tpot_ms must be a positive number, got nan"),
        ("batch,tpot_ms\n0,10\n2,11\n", "t.csv:2: batch must be a positive number, got 0"),
        ("batch,tpot_ms\n1,10\n2,abc\n", "t.csv:3: tpot_ms 'abc' is not a number"),
        ("batch,throughput_tok_s,tpot_ms\n1,,\n2,100,20\n", "t.csv:2: needs throughput_tok_s or tpot_ms"),
        ("batch,tpot_ms\n1,10\n1,20\n", "t.csv:3: batch 1 appears twice with conflicting values"),
        ("batch,tpot_ms\n2,11\n1,10\n1,10.5\n1,20\n", "t.csv:5: batch 1 appears 3 times with conflicting"),
        ("batch,tpot_ms\n1,10\n,11\n", "t.csv:3: batch is empty"),
        ('batch,tpot_ms\n1,10\n2,"1' + "1" * 200_000 + '"\n', "t.csv:3: cannot read this line as CSV"),
        ("batch,tpot,ttft\n1,10,5\n2,11,5\n", "t.csv:1: unknown column(s) 'tpot', 'ttft'"),
        ("batch,ttft_ms\n1,10\n2,11\n", "header needs 'batch' and at least one of"),
        ("batch,tpot_ms\n1,10,3\n2,11\n", "t.csv:2: 3 values for 2 columns"),
        ("# only comments\n", "no header line"),
    ],
)
def test_bad_tables_name_the_row(body: str, message: str) -> None:
    with pytest.raises(TokenroofError) as info:
        parse_csv(body, "t.csv")
    assert message in str(info.value)


def test_identical_duplicate_is_a_warning() -> None:
    table = parse_csv("batch,tpot_ms\n1,10\n1,10\n2,11\n", "t.csv")
    assert len(table) == 2
    assert any("t.csv:3: duplicate of batch 1 at t.csv:2" in w for w in table.warnings)
    assert table.count is not None and list(table.count) == [2, 1]  # a repeated run weighs as one


def test_repeated_batches_pool_into_one_point_each() -> None:
    """Rows at one batch are repeated runs: one point at their geometric mean, their count and scatter kept."""
    # measured mean contexts move a little from run to run: one context (no two apart by more than 10%)
    rows = "4,,11,1000\n1,,10,950\n4,,12.1,1080\n1,,10.5,1010\n2,,10.2,980\n"
    body = "batch,throughput_tok_s,tpot_ms,context_tokens\n" + rows
    table = parse_csv(body, "t.csv")
    assert list(table.batch) == [1, 2, 4]
    assert list(table.count) == [2, 1, 2]
    assert table.tpot_ms == pytest.approx([np.sqrt(10 * 10.5), 10.2, np.sqrt(11 * 12.1)], rel=1e-12)
    assert table.throughput_tok_s == pytest.approx(table.batch * 1000 / table.tpot_ms, rel=1e-12)
    assert table.context_tokens == pytest.approx([980, 980, 1040]) and not table.several_contexts
    assert table.tpot_log_ss == pytest.approx([np.log(10.5 / 10) ** 2 / 2, 0, np.log(12.1 / 11) ** 2 / 2])
    assert table.derived == ("throughput_tok_s",) * 3
    assert table.warnings == ()
    points = table.to_dict()["points"]
    assert points[0] == {
        "batch": 1.0,
        "throughput_tok_s": pytest.approx(1000 / np.sqrt(105)),
        "tpot_ms": pytest.approx(np.sqrt(105)),
        "context_tokens": 980.0,
        "count": 2,
    }
    assert table.head(2).count is not None and list(table.head(2).count) == [2, 1]


def test_the_fast_reader_and_the_row_by_row_reader_agree() -> None:
    """Cells numpy reads in bulk, and the same table through the row-by-row reader (a quoted cell sends it there)."""
    body = "batch,throughput_tok_s,tpot_ms,ttft_ms\n8,600,13.3,40\n1,,12.5,30\n32, ,14.5,31\n,, ,\n"
    with pytest.raises(TokenroofError, match=r"t\.csv:5: batch is empty"):
        parse_csv(body, "t.csv")
    fast = parse_csv(body.replace(",, ,\n", ""), "t.csv")
    slow = parse_csv(body.replace(",, ,\n", "").replace("8,600", '"8",600'), "t.csv")
    for name in ("batch", "throughput_tok_s", "tpot_ms", "ttft_ms"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name))
    assert fast.derived == slow.derived == ("throughput_tok_s", "", "throughput_tok_s")


def test_row_warnings_are_counted_past_ten() -> None:
    body = "batch,throughput_tok_s,tpot_ms\n" + "".join(f"{b},{b * 50},10\n" for b in range(1, 16))
    warnings = parse_csv(body, "t.csv").warnings
    assert len(warnings) == 11 and warnings[-1] == "... and 5 more rows disagree likewise"


def test_pooled_bins_many_distinct_batches() -> None:
    from tokenroof.io.measurements import pooled

    body = "batch,tpot_ms\n" + "".join(f"{x!r},{10 + 0.05 * x!r}\n" for x in np.geomspace(1, 512, 5000).tolist())
    table = parse_csv(body, "t.csv")
    assert pooled(table, 5000)[0] is table
    points, tops = pooled(table, 100)
    assert len(points) == 100 and tops[-1] == table.batch[-1] and int(points.count.sum()) == 5000
    assert np.all(tops >= points.batch) and np.all(tops[:-1] < points.batch[1:])  # each bin's largest batch
    assert points.batch[0] > 1 and points.batch[-1] < 512 and np.all(np.diff(points.batch) > 0)
    assert points.tpot_ms == pytest.approx(10 + 0.05 * points.batch, rel=1e-4)  # the curve, at each bin's batch
    built = MeasurementTable(table.batch, table.tpot_ms, table.throughput_tok_s)  # no labels, no counts
    assert len(pooled(built, 100)[0]) == 100


def test_disagreeing_throughput_and_tpot_warn_with_row() -> None:
    table = parse_csv("batch,throughput_tok_s,tpot_ms\n1,100,10\n10,500,10\n", "t.csv")
    assert any(w.startswith("t.csv:3: throughput 500 tok/s and TPOT 10 ms disagree by -50%") for w in table.warnings)


def test_context_column_all_or_nothing() -> None:
    with pytest.raises(TokenroofError, match="context_tokens is empty here but given elsewhere"):
        parse_csv("batch,tpot_ms,context_tokens\n1,10,100\n2,11,\n", "t.csv")


def test_vllm_bench_serve_results(tmp_path: Path) -> None:
    paths = []
    for concurrency, tpot in ((1, 10.0), (8, 11.0), (32, 14.0)):
        result = {
            "backend": "vllm",
            "max_concurrency": concurrency,
            "output_throughput": concurrency * 1000 / tpot,
            "mean_tpot_ms": tpot,
            "mean_ttft_ms": 50.0,
            "completed": 100,
        }
        path = tmp_path / f"c{concurrency}.json"
        path.write_text(json.dumps(result))
        paths.append(path)
    table = read_table(paths)
    assert list(table.batch) == [1, 8, 32]
    assert list(table.tpot_ms) == [10.0, 11.0, 14.0]
    assert table.ttft_ms is not None
    assert any("max_concurrency" in w for w in table.warnings)


def test_vllm_detailed_results_state_how_spread_their_lengths_were(tmp_path: Path) -> None:
    """`--save-detailed` keeps every request's lengths: their spread (sd ÷ mean, a failed request's output of 0 left
    out) is the table's input_len_cv / output_len_cv, averaged over the runs, for the replay to draw lengths alike;
    lengths all alike state none, and a list that is not token counts is named."""
    base = {
        "backend": "vllm",
        "mean_ttft_ms": 50.0,
        "completed": 3,
        "total_input_tokens": 300,
        "total_output_tokens": 30,
    }
    runs = [
        base
        | {"max_concurrency": 1, "mean_tpot_ms": 10.0, "output_throughput": 100.0}
        | {"input_lens": [50, 100, 150, 999], "output_lens": [5, 10, 15, 0]},
        base
        | {"max_concurrency": 8, "mean_tpot_ms": 11.0, "output_throughput": 720.0}
        | {"input_lens": [100, 100, 100], "output_lens": [4, 10, 16]},
    ]
    paths = []
    for i, run in enumerate(runs):
        paths.append(tmp_path / f"c{i}.json")
        paths[-1].write_text(json.dumps(run))
    sem = read_table(paths).semantics
    first, second = np.std([5, 10, 15]) / 10, np.std([4, 10, 16]) / 10
    assert sem.output_len_cv == pytest.approx((first + second) / 2)
    assert sem.input_len_cv == pytest.approx(np.std([50, 100, 150]) / 100)  # the second run's are one length
    paths[1].write_text(json.dumps(runs[1] | {"output_lens": "4,10,16"}))
    with pytest.raises(TokenroofError, match=r"c1\.json: output_lens must be a list of token counts"):
        read_table(paths)


def test_vllm_rate_runs_read_as_the_requests_they_held_in_flight(tmp_path: Path) -> None:
    """A --request-rate run's batch is what it held in flight (completed × mean e2e latency ÷ duration: 100 × 2 s /
    50 s = 4), an open loop (Poisson at burstiness 1); without the latency and duration it cannot be counted, and
    every prompt at once without a cap has no steady batch: both refused. A cap the rate filled leaves it out."""
    run = {"output_throughput": 100.0, "mean_tpot_ms": 10.0, "request_rate": 4.0, "burstiness": 1.0}
    run |= {"completed": 100, "mean_e2el_ms": 2000.0, "duration": 50.0, "max_concurrency": None}
    paths = [tmp_path / f"r{i}.json" for i in range(3)]
    paths[0].write_text(json.dumps(run))
    paths[1].write_text(json.dumps(run | {"request_rate": 8.0, "mean_e2el_ms": 2500.0, "mean_tpot_ms": 12.0}))
    paths[2].write_text(json.dumps(run | {"request_rate": 20.0, "mean_e2el_ms": 4000.0, "max_concurrency": 8}))
    table = read_table(paths)
    assert table.batch.tolist() == [4.0, 5.0] and table.semantics.client == "poisson"
    assert table.semantics.batch_kind == "concurrency" and not any("vLLM result(s)" in w for w in table.warnings)
    (left,) = [w for w in table.warnings if "left out" in w]
    assert left.startswith(f"{paths[2]}: left out: at request rate 20 the client's concurrency cap 8 bound (8.0")
    paths[0].write_text(json.dumps({"output_throughput": 100.0, "mean_tpot_ms": 10.0, "request_rate": 4.0}))
    with pytest.raises(TokenroofError, match="vLLM's run at a request rate needs the requests it held in flight"):
        read_table([paths[0], paths[1]])
    paths[0].write_text(json.dumps({"output_throughput": 100.0, "mean_tpot_ms": 10.0, "request_rate": "inf"}))
    with pytest.raises(TokenroofError, match="has no max_concurrency"):
        read_table([paths[0], paths[1]])


def test_guidellm_report(tmp_path: Path) -> None:
    def dist(mean: float) -> dict:
        return {"successful": {"mean": mean, "median": mean}, "errored": None, "total": {"mean": mean}}

    benchmarks = []
    for streams, itl in ((1, 10.0), (16, 12.0), (64, 20.0)):
        benchmarks.append(
            {
                "args": {"strategy": {"type_": "concurrent", "streams": streams}},
                "metrics": {
                    "request_concurrency": dist(streams * 0.98),
                    "output_tokens_per_second": dist(streams * 0.98 * 1000 / itl),
                    "inter_token_latency_ms": dist(itl),
                    "time_per_output_token_ms": dist(itl * 1.3),  # includes the first token: not used
                    "time_to_first_token_ms": dist(40.0),
                },
            }
        )
    path = tmp_path / "guidellm.json"
    path.write_text(json.dumps({"benchmarks": benchmarks}))
    table = read_table([path])
    assert list(table.batch) == pytest.approx([0.98, 15.68, 62.72])
    assert list(table.tpot_ms) == [10.0, 12.0, 20.0]


def test_tokenroof_json_points(tmp_path: Path) -> None:
    path = tmp_path / "points.json"
    path.write_text(
        json.dumps({"provenance": ["x"], "points": [{"batch": 1, "tpot_ms": 10}, {"batch": 4, "tpot_ms": 11}]})
    )
    assert len(read_table([path])) == 2
    path.write_text(json.dumps({"points": [{"batch": 1, "tpot": 10}]}))
    with pytest.raises(TokenroofError, match="unknown key"):
        read_table([path])


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(TokenroofError, match="cannot read"):
        read_table([tmp_path / "missing.csv"])
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(TokenroofError, match="not valid JSON"):
        read_table([bad])


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        (b"\xef\xbb\xbfbatch,tpot_ms\n1,10\n8,12\n", "bom.csv", None),  # Excel's byte-order mark is fine
        (
            b"# caf\xe9\nbatch,tpot_ms\n1,10\n8,12\n",
            "latin1.csv",
            "latin1.csv: not UTF-8 text (byte 0xe9 at offset 5, line 1)",
        ),
        (b"batch,tpot_ms,tpot_ms\n1,10,11\n8,12,13\n", "dup.csv", "dup.csv:1: column(s) tpot_ms appear more than once"),
        (b'{"points":[{"batch":true,"tpot_ms":10},{"batch":8,"tpot_ms":12}]}', "b.json", "batch must be a number"),
        (b'{"points":[{"tpot_ms":10},{"batch":8,"tpot_ms":12}]}', "n.json", "point 0: batch is missing"),
        (b'{"provenance":5,"points":[{"batch":1,"tpot_ms":10},{"batch":8,"tpot_ms":12}]}', "p.json", "list of strings"),
        (b'{"points":' + b"[" * 5000 + b"]" * 5000 + b"}", "deep.json", "nested too deeply"),
        (b'{"benchmarks":[1,2]}', "g.json", "benchmark 0: expected an object"),
        (b'{"points":[{"batch":1' + b"0" * 5000 + b',"tpot_ms":10}]}', "big.json", "big.json: not valid JSON"),
        (b'{"max_concurrency":"","output_throughput":10,"mean_tpot_ms":10}', "v.json", "max_concurrency is empty"),
        (  # a fault test's find: a null TPOT had been derived from the throughput, silently
            b'{"max_concurrency":4,"output_throughput":10,"mean_tpot_ms":null}',
            "t.json",
            "t.json: a vLLM result without mean_tpot_ms",
        ),
        (b'{"points":[{"batch":1,"tpot_ms":10},{"batch":8,"tpot_ms":12}],"input_len":"abc"}', "s.json", "input_len"),
    ],
)
def test_malformed_files_are_named_never_a_traceback(tmp_path, content: bytes, name: str, message: str | None) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    if message is None:
        assert len(read_table([path])) == 2
        return
    with pytest.raises(TokenroofError) as info:
        read_table([path])
    assert message in str(info.value)


def test_a_large_table_is_read_as_one_block_and_alike() -> None:
    """Issue 33: a million rows took seconds and up to 1.5 GB; a large plain table is now parsed as one block (no
    string per line), the same table as row by row, and a bad cell still named by its line."""
    from unittest import mock

    from tokenroof.io import csvread

    rng = np.random.default_rng(0)
    batch = rng.uniform(1, 512, 60_000)
    rows = [f"{b!r},{10 + 0.05 * b:.6g},{'' if i % 7 else 30}" for i, b in enumerate(batch.tolist())]
    text = "# input_len=128\n\nbatch,tpot_ms,ttft_ms\r\n" + "\r\n".join(rows) + "\r\n"
    assert len(text) > csvread.LARGE_CSV_CHARS
    table = csvread._parse_large(text, "big.csv")
    assert table is not None  # read as one block
    with mock.patch.object(csvread, "LARGE_CSV_CHARS", 10**12):
        rows_read = parse_csv(text, "big.csv")
    for name in ("batch", "tpot_ms", "throughput_tok_s", "ttft_ms"):
        assert np.array_equal(getattr(table, name), getattr(rows_read, name), equal_nan=True), name
    assert table.provenance == rows_read.provenance == ("input_len=128",) and table.warnings == rows_read.warnings
    bad = text.replace(rows[41_000], rows[41_000].replace(",", ",x", 1))
    with pytest.raises(TokenroofError, match=r"^big\.csv:41004: "):  # 3 lines before the rows, counted from 1
        parse_csv(bad, "big.csv")


def test_semantics_past_the_two_kinds_are_named() -> None:
    """Semantics(kind, kind, input, output) once read the input length as the client (a field inserted between)
    and dropped the output length, silently, in benchmarks/curve_headers.py for two weeks of figures: the fields past
    the two kinds are keyword-only."""
    from tokenroof.io.table import Semantics

    with pytest.raises(TypeError):
        Semantics("static", "e2e", 200.0, 200.0)  # type: ignore[misc]
    named = Semantics("static", "e2e", input_len=200.0, output_len=100.0)
    assert (named.client, named.input_len, named.output_len, named.mean_context) == (None, 200.0, 100.0, 250.0)


def test_vllm_rate_runs_carry_their_burstiness_into_the_replay(tmp_path: Path) -> None:
    """`vllm bench serve --burstiness 0.25` draws gamma gaps of shape 0.25 (twice Poisson's spread): the table says
    so, runs of two burstinesses are two tables, and the replay draws its arrivals as the run did (gaps' coefficient of
    variation 1/√0.25 = 2 against Poisson's 1); the answer says which arrivals it assumed."""
    from tokenroof.serving.replay import Served, matched_runs
    from tokenroof.serving.simulate import Lengths

    run = {"output_throughput": 100.0, "mean_tpot_ms": 10.0, "request_rate": 4.0, "burstiness": 0.25}
    run |= {"completed": 100, "mean_e2el_ms": 2000.0, "duration": 50.0, "max_concurrency": None}
    run |= {"mean_ttft_ms": 30.0, "total_input_tokens": 25600, "total_output_tokens": 6400}
    paths = [tmp_path / f"r{i}.json" for i in range(2)]
    paths[0].write_text(json.dumps(run))
    paths[1].write_text(json.dumps(run | {"request_rate": 8.0, "mean_e2el_ms": 2500.0, "mean_tpot_ms": 12.0}))
    table = read_table(paths)
    assert table.semantics.client == "poisson" and table.semantics.burstiness == 0.25
    assert "gamma (burstiness 0.25)" in run_json(["predict", *map(str, paths), "--batch", "8"])["serving"]["semantics"]
    paths[1].write_text(json.dumps(run | {"request_rate": 8.0, "burstiness": 1.0}))
    with pytest.raises(TokenroofError, match=r"burstiness 1\.0 differs from 0\.25"):
        read_table(paths)
    sm = StepModel(t_fixed_s=3e-3, t_weights_s=12e-3, t_compute_s=60e-6, t_kv_token_s=2e-7, t_seq_s=1e-4)
    lengths = (Lengths(256), Lengths(64))
    spread = []
    for burstiness in (0.25, 1.0):
        runs = matched_runs(Served(sm, "poisson", None, None, None, burstiness), lengths, 5.0, 4.0, True, 400)
        gaps = np.concatenate([np.diff(sorted(s.arrival_s for s in r.sequences)) for r in runs])
        spread.append(float(gaps.std() / gaps.mean()))
    assert spread[0] == pytest.approx(2.0, rel=0.15) and spread[1] == pytest.approx(1.0, rel=0.1)


def test_the_tools_spell_an_unbounded_rate_each_their_way() -> None:
    """vLLM writes "inf", SGLang and AIPerf a JSON Infinity; text numbers read as numbers; anything else is no rate."""
    from tokenroof.io.table import rate_value

    assert [rate_value(v) for v in ("inf", float("inf"), "Infinity", 5, "2.5")] == [math.inf] * 3 + [5.0, 2.5]
    assert all(math.isnan(rate_value(v)) for v in (None, True, "trace", "", [1], {"a": 1}))


def test_a_burstiness_goes_with_random_arrivals_and_vllm_s_inf_sends_all_at_once(tmp_path: Path) -> None:
    """A CSV's burstiness without client=poisson is named, not ignored; vLLM at --burstiness inf draws no gaps and
    sends every request at once: read as --request-rate inf (batch = its max_concurrency), refused without a cap."""
    path = tmp_path / "t.csv"
    for head in ("# client=constant burstiness=0.25", "# burstiness=0.25"):
        path.write_text(head + "\nbatch,tpot_ms\n1,10\n4,11\n")
        with pytest.raises(TokenroofError, match=r"t\.csv.*: burstiness=0\.25 shapes random arrivals' gaps"):
            read_table([path])
    path.write_text("# client=poisson burstiness=0.25\nbatch,tpot_ms\n1,10\n4,11\n")
    assert read_table([path]).semantics.burstiness == 0.25
    run = {"output_throughput": 800.0, "mean_tpot_ms": 10.0, "request_rate": 4.0, "burstiness": math.inf}
    run |= {"completed": 100, "num_prompts": 100, "mean_e2el_ms": 2000.0, "duration": 50.0, "max_concurrency": 8}
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    files[0].write_text(json.dumps(run))
    files[1].write_text(json.dumps(run | {"max_concurrency": 16, "output_throughput": 1400.0}))
    table = read_table(files)
    assert table.batch.tolist() == [8, 16] and table.semantics.client == "burst" and table.semantics.burstiness is None
    files[1].write_text(json.dumps(run | {"max_concurrency": None}))
    with pytest.raises(TokenroofError, match="every prompt sent at once, as vLLM sends them at burstiness inf"):
        read_table(files)


def test_a_csv_states_its_lengths_spread_zero_as_one_length_and_past_four_as_a_slip() -> None:
    rows = "batch,throughput_tok_s,tpot_ms,ttft_ms\n1,100,10,50\n8,700,11.4,60\n"
    head = "# client=burst input_len=512 output_len=128 "
    assert parse_csv(head + "output_len_cv=0.3\n" + rows, "t.csv").semantics.output_len_cv == 0.3
    assert parse_csv(head + "output_len_cv=0\n" + rows, "t.csv").semantics.output_len_cv is None
    with pytest.raises(TokenroofError, match=r"t\.csv: output_len_cv=50: lengths whose standard deviation is 50"):
        parse_csv(head + "output_len_cv=50\n" + rows, "t.csv")


def test_a_closed_loop_s_throughput_is_checked_against_its_requests_lifetimes() -> None:
    """Requests in flight with TTFT: throughput = batch × output ÷ (TTFT + (output − 1) × TPOT) (Little's law over a
    request's life), not batch ÷ TPOT, which a closed loop waiting out each TTFT never reaches: 16 streams, 100 tokens,
    TTFT 1 s, TPOT 40 ms give 16 × 100 ÷ 4.96 s = 322.6 tok/s (batch ÷ TPOT: 400, −19%); a row 20% off that is named
    with the formula."""
    head = "# batch_kind=concurrency client=burst input_len=512 output_len=100\n"
    head += "batch,throughput_tok_s,tpot_ms,ttft_ms\n"
    quiet = parse_csv(head + "1,24.36,40,100\n16,322.6,40,1000\n", "t.csv")
    assert not any("disagree" in w for w in quiet.warnings)
    loud = parse_csv(head + "1,24.36,40,100\n16,258,40,1000\n", "t.csv")
    (said,) = [w for w in loud.warnings if "disagree" in w]
    assert "disagree by -20%" in said and "batch × output ÷ (TTFT + (output − 1) × TPOT) = 322.6 tok/s" in said


def test_a_tpot_in_seconds_and_a_context_the_stated_lengths_cannot_hold_are_named() -> None:
    """Two slips a table carries silently otherwise: TPOT written in seconds (advise had answered a cap of 523,415 at
    17 million tok/s) and, at one context, a context_tokens the header's lengths cannot make (predict had printed a
    mean context of 8,000 beside 1024 in / 256 out)."""
    with pytest.raises(TokenroofError, match=r"s.csv:2: a TPOT of 0.0125 ms \(from tpot_ms\) is shorter than any"):
        parse_csv("batch,tpot_ms\n1,0.0125\n8,0.0133\n32,0.0145\n", "s.csv")
    with pytest.raises(TokenroofError, match=r"t.csv:2: a TPOT of 0.05 ms \(from throughput_tok_s\)"):
        parse_csv("batch,throughput_tok_s\n1,20000\n8,150000\n", "t.csv")
    header = "# input_len=1024 output_len=256\nbatch,tpot_ms,context_tokens\n"
    with pytest.raises(
        TokenroofError, match=r"c\.csv:3: context_tokens 8000 is not a context of the lengths the header"
    ):
        parse_csv(header + "1,6.2,8000\n4,6.5,8000\n", "c.csv")
    assert parse_csv(header + "1,6.2,1152\n4,6.5,1152\n").context_tokens is not None  # the mean context: agreed
    several = parse_csv(header + "1,6.2,1152\n4,6.5,1152\n1,9.0,4224\n4,9.5,4224\n")  # one curve's lengths: not checked
    assert several.context_tokens is not None and len(np.unique(several.context_tokens)) == 2


def test_a_file_given_twice_is_read_once_and_said(tmp_path: Path) -> None:
    """The same folder twice (or a file and its folder) had counted each result as a repeated run and narrowed the
    intervals; it is read once, and the table says so."""
    from tests.conftest import ROOT

    once, twice = read_table([ROOT / "examples" / "vllm"]), read_table([ROOT / "examples" / "vllm"] * 2)
    assert twice.batch.tolist() == once.batch.tolist() and twice.count is None
    assert twice.warnings[0] == "6 file(s) given more than once: each read once"
    csv = tmp_path / "t.csv"
    csv.write_text("batch,tpot_ms\n1,10\n8,11\n")
    assert read_table([csv, tmp_path / "." / "t.csv"]).warnings[0].startswith("1 file(s) given more than once")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("request_rate", "fast", "request_rate 'fast' is not a number (nor inf"),
        ("burstiness", "high", "burstiness 'high' is not a number (nor inf"),
        ("max_concurrency", 16.5, "max_concurrency 16.5 is not a whole number of streams"),
    ],
)
def test_a_vllm_result_s_rate_burstiness_and_cap_are_numbers(
    tmp_path: Path, key: str, value: object, message: str
) -> None:
    """A rate of "fast" had read as inf (every prompt at once), a burstiness of "high" as none, a cap of 16.5 as 16.5
    streams: each is named, with its file."""
    from tests.conftest import ROOT

    data = json.loads((ROOT / "examples" / "vllm" / "vllm-c16.json").read_text())
    data[key] = value
    if key == "burstiness":
        data["request_rate"] = 4.0
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TokenroofError, match=f"r.json: {message}".replace("(", r"\(").replace(".", r"\.")):
        read_table([path])


def test_results_of_two_models_or_two_workloads_at_one_context_are_named(tmp_path: Path) -> None:
    """vLLM results that name two models are refused; results whose lengths make one context but not one workload
    (1,024 in / 256 out beside 128 in / 2,048 out: both a mean context of 1,152) are said (the replay had taken their
    mean lengths, 725 in / 853 out, which none measured); the two lengths' files at two contexts stay two curves."""
    from tests.conftest import ROOT

    source = ROOT / "examples" / "vllm"
    for name in ("vllm-c1.json", "vllm-c4.json", "vllm-c16.json"):
        (tmp_path / name).write_text((source / name).read_text())
    other = json.loads((source / "vllm-c32.json").read_text())
    path = tmp_path / "vllm-c32.json"
    path.write_text(json.dumps({**other, "model_id": "Qwen/Qwen2.5-72B-Instruct"}))
    with pytest.raises(TokenroofError, match=r"vllm-c32\.json: model_id Qwen/Qwen2\.5-72B-Instruct differs from "):
        read_table([tmp_path])
    done = other["completed"]
    path.write_text(json.dumps({**other, "total_input_tokens": 128 * done, "total_output_tokens": 2048 * done}))
    said = [w for w in read_table([tmp_path]).warnings if "share a context but not a workload" in w]
    assert len(said) == 1 and "(1024 in / 256 out) and " in said[0] and "(128 in / 2048 out)" in said[0]
    assert not any("share a context" in w for w in read_table([source, ROOT / "examples" / "vllm-in4096"]).warnings)
