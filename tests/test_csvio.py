"""csvio.write_rows, the one CSV writer, and the tables written through it: bench-local's measurements and
simulate's per-step timeseries, by hand."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tokenroof.io.csvio import format_cell, write_rows
from tokenroof.io.measurements import read_table


def test_provenance_then_header_then_rows_with_numbers_as_they_read_back() -> None:
    out = io.StringIO()
    rows = [(1, 125.0, 8.0, 1000.5, None), (np.int64(2), np.float64(2 / 3), 1234567.891, 1_234_567, "a, b")]
    write_rows(out, ["tokenroof test", "two\nlines"], ("batch", "x", "y", "kv", "note"), rows)
    assert out.getvalue() == (
        '# tokenroof test\n# two\n# lines\nbatch,x,y,kv,note\n1,125,8,1000.5,\n2,0.666667,1.23457e+06,1234567,"a, b"\n'
    )


def test_a_column_may_ask_for_its_own_number_format() -> None:
    out = io.StringIO()
    write_rows(out, [], ("start_s", "n"), [(3600.0123456, 7)], formats={"start_s": ".6f"})
    assert out.getvalue() == "start_s,n\n3600.012346,7\n"
    assert format_cell(3600.0123456) == "3600.01" and format_cell(12) == "12" and format_cell(None) == ""


@pytest.mark.parametrize(
    ("rows", "formats", "message"),
    [
        ([(1, 2.0, 3.0)], {}, r"row 0 has 3 cells for 2 columns \(a, b\)"),
        ([(1, 2.0)], {"c": ".3f"}, "formats for column"),
    ],
)
def test_a_row_that_does_not_fit_the_header_is_refused(rows: list[tuple], formats: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        write_rows(io.StringIO(), [], ("a", "b"), rows, formats)


def test_a_path_is_replaced_whole_and_read_back_by_predicts_reader(tmp_path: Path) -> None:
    path = tmp_path / "points.csv"
    columns = ("batch", "throughput_tok_s", "tpot_ms", "context_tokens", "ttft_ms")
    write_rows(path, ["tokenroof test"], columns, [(1, 100.0, 10.0, 512, 50.0), (8, 640.0, 12.5, 512, 61.0)])
    table = read_table([path])
    assert list(table.batch) == [1, 8] and list(table.tpot_ms) == [10.0, 12.5]
    assert any("tokenroof test" in line for line in table.provenance)
    assert [p.name for p in tmp_path.iterdir()] == ["points.csv"]


def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "partial.csv"
    write_rows(path, [], ("batch", "tpot_ms"), [(1, 10.0)])
    before = path.read_text()

    def interrupted() -> Iterator[tuple[int, float]]:
        yield (1, 10.0)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_rows(path, [], ("batch", "tpot_ms"), interrupted())
    assert path.read_text() == before == "batch,tpot_ms\n1,10\n"
    assert [p.name for p in tmp_path.iterdir()] == ["partial.csv"]  # no temporary file left behind


# -- the tables written through it ---------------------------------------------------------------------------
def test_bench_local_writes_its_points_in_batch_order(tmp_path: Path) -> None:
    from tokenroof.measure.local.local import LocalConfig, LocalPoint, LocalResult, write_csv
    from tokenroof.specs import Precision, load_model

    def point(batch: int, tpot_ms: float) -> LocalPoint:
        return LocalPoint(batch, 17.5, tpot_ms, tpot_ms, tpot_ms, tpot_ms, 12.3456789, 3, 1.0, 1.0)

    config = LocalConfig("llama-2-7b", [1, 4], context=16, steps=3)
    result = LocalResult(load_model("llama-2-7b"), Precision.create("fp32"), "cpu", "a CPU", 2, "2.x", config)
    result.points = [point(4, 10.0), point(1, 8.0)]  # measured out of order (a second round-robin pass)
    path = tmp_path / "local.csv"
    write_csv(result, path)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# tokenroof bench-local") and lines[-4].endswith("batch_kind=static tpot_kind=step")
    assert lines[-3:] == [
        "batch,throughput_tok_s,tpot_ms,context_tokens,ttft_ms",
        "1,125,8,17.5,12.3457",  # 1 × 1000 / 8 ms
        "4,400,10,17.5,12.3457",
    ]


def test_simulate_timeseries_keeps_microseconds_and_whole_counts(tmp_path: Path) -> None:
    from tokenroof.serving.simulate import SimResult

    sim = SimResult(
        sequences=[],
        step_starts_s=np.array([0.0, 3600.0123456]),
        step_durations_s=np.array([0.0123456789, 0.02]),
        step_batches=np.array([1, 256]),
        step_kv_tokens=np.array([1000, 1_234_567]),
    )
    sim.write(tmp_path, {})
    assert (tmp_path / "timeseries.csv").read_text() == (
        "start_s,duration_s,running_batch,kv_tokens\n0.000000,0.012346,1,1000\n3600.012346,0.020000,256,1234567\n"
    )
