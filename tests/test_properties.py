"""Property tests: every reader turns any input into a table or a spec, or into one TokenroofError, never a
traceback (nor a numpy warning, which pytest makes an error).

Inputs: random bytes and text (a byte-order mark, Latin-1), JSON values of random nesting, mutations of valid
files (a key dropped or added, a value set to a wrong type, a bool, null, NaN, ±inf, a huge integer, a negative,
5e-324), random TOML, random CSV. What a reader accepts must be sane: finite, and positive where it is a size.

TOKENROOF_FUZZ_EXAMPLES sets the examples per test (50 by default; `make fuzz` runs 2000).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import tomllib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenroof.cli import parse_numbers
from tokenroof.errors import TokenroofError
from tokenroof.fit.predict import predict_table
from tokenroof.fit.travel import Travelling, read_step_model
from tokenroof.io import csvread
from tokenroof.io.measurements import COLUMNS, MeasurementTable, parse_csv, read_table
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import list_hardware, list_models
from tokenroof.specs.hardware import HardwareSpec, read_hardware_toml
from tokenroof.specs.model import read_model_config

FUZZ = settings(max_examples=int(os.environ.get("TOKENROOF_FUZZ_EXAMPLES", 50)), deadline=None)
# a whole fit and the scheduler's replay per example (~0.4 s): a fifth as many in the default run (make fuzz: 2,000)
HEAVY = settings(FUZZ, max_examples=max(FUZZ.max_examples // 5, 10))
SPECS = Path(__file__).resolve().parents[1] / "src" / "tokenroof" / "specs" / "data"

# -- generated values --------------------------------------------------------------------------------------------
HUGE = "__a huge integer__"  # json.dumps cannot write one of 5,000 digits: `dump` puts it in the text
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
WRONG = st.sampled_from(
    [None, True, False, math.nan, math.inf, -math.inf, HUGE, 10**30, -1, -2.5, 0, 0.0, 5e-324, 1e308, 1e-300]
) | st.sampled_from(["", " ", "12", "abc", "nan", [], {}, [1, 2], {"a": 1}])


def dump(data: Any) -> str:
    return json.dumps(data).replace(json.dumps(HUGE), "1" + "0" * 5000)


def slots(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a JSON document."""
    found, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            found.append((node, key))
            stack.append(value)
    return found


@st.composite
def mutated(draw: st.DrawFn, seeds: list[Any]) -> Any:
    """A valid document with one to three things broken: a key dropped or added, a value replaced."""
    doc = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 3))):
        places = slots(doc)
        if not places:
            break
        node, key = draw(st.sampled_from(places))
        how = draw(st.sampled_from(("drop", "wrong", "random", "add")))
        value = copy.deepcopy(draw(WRONG if how == "wrong" else WRONG | JSON))  # WRONG's lists are shared objects
        if how == "drop":
            del node[key]
        elif how == "add" and isinstance(node, dict):
            node[draw(st.text(max_size=8))] = value
        else:
            node[key] = value
    return doc


BYTES = st.binary(max_size=300) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))
ENCODED = st.tuples(st.text(max_size=200), st.sampled_from(["utf-8-sig", "latin-1", "utf-16"])).map(
    lambda pair: pair[0].encode(pair[1], "replace")
)


def only_tokenroof_errors(read: Callable[[], Any]) -> Any:
    """What `read` returns, or None when it raised a TokenroofError; any other exception fails the test."""
    try:
        return read()
    except TokenroofError as exc:
        assert str(exc) and "\n" not in str(exc).strip()
        return None


def write(folder: Path, name: str, content: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# -- measurement tables ------------------------------------------------------------------------------------------
CELLS = (
    st.sampled_from(["", " ", "1", "8", "0", "-1", "nan", "inf", "1e400", "5e-324", "abc", '"7"', "1_0", " 2.5 "])
    | st.sampled_from(["\u0661", "1e308", "0x10", "#", "-7.25", "12.5", "3", "1,5", '"', "1\x00"])
    | st.floats().map(repr)
    | st.integers(-5, 10**6).map(str)
)
NUMBERS = st.sampled_from(
    ["1", "2", "4", "8", "8", "32", "128", "0.5", "10", "11.5", "13", "1e-3", "1e6", "1e-9", "1e12", ""]
)


@st.composite
def csv_texts(draw: st.DrawFn, cells: st.SearchStrategy[str] = CELLS) -> str:
    """A CSV body: a header of known and unknown names, rows of odd cells (some short or long), comments, blanks."""
    names = draw(
        st.lists(st.sampled_from([*COLUMNS, "batch", "tpot_ms", "tpot", "", " batch"]), min_size=1, max_size=6)
    )
    lines = [",".join(names)]
    for _ in range(draw(st.integers(0, 12))):
        width = len(names) + draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
        lines.append(",".join(draw(st.lists(cells, min_size=max(width, 0), max_size=max(width, 0)))))
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["", "  ", "# input_len=128", "#"])))
    return draw(st.sampled_from(["\n", "\n", "\r\n", "\r", "\u2028"])).join(lines) + draw(
        st.sampled_from(["", "\n", "\r\n"])
    )


@st.composite
def plausible_csv(draw: st.DrawFn) -> str:
    """Mostly valid tables: a real header, numbers from a few batches (so rows repeat), some empty cells."""
    header = draw(st.sampled_from(["batch,tpot_ms", "batch,throughput_tok_s", "batch,throughput_tok_s,tpot_ms"]))
    header += draw(st.sampled_from(["", ",context_tokens", ",ttft_ms"]))
    kinds = draw(st.sampled_from(["", "# batch_kind=concurrency tpot_kind=tpot\n", "# tpot_kind=e2e\n"]))
    width = header.count(",") + 1
    rows = draw(st.lists(st.lists(NUMBERS, min_size=width, max_size=width).map(",".join), max_size=12))
    return kinds + header + "\n" + "\n".join(rows) + "\n"


def same_outcome(text: str) -> MeasurementTable | None:
    """parse_csv as a large text (one block), with the bulk reader and row by row: the same table, or the same
    error."""
    outcomes: list[MeasurementTable | str] = []
    ways = [
        mock.patch.object(csvread, "LARGE_CSV_CHARS", 0),
        contextlib.nullcontext(),
        mock.patch.object(csvread, "_fast_cells", return_value=None),
    ]
    for way in ways:
        with way:
            try:
                outcomes.append(parse_csv(text, "t.csv"))
            except TokenroofError as exc:
                outcomes.append(str(exc))
    first = outcomes[0]
    for second in outcomes[1:]:
        if isinstance(first, str) or isinstance(second, str):
            assert first == second
            continue
        names = ("batch", "tpot_ms", "throughput_tok_s", "context_tokens", "ttft_ms", "requests", "concurrency")
        for name in (*names, "count", "tpot_log_ss"):
            a, b = getattr(first, name), getattr(second, name)
            # TTFT and the client's concurrency may be empty on some rows (NaN: not measured there)
            assert (a is None and b is None) or np.array_equal(a, b, equal_nan=True), name
        assert (first.derived, first.warnings, first.provenance) == (
            second.derived,
            second.warnings,
            second.provenance,
        )
    return None if isinstance(first, str) else first


def check_table(table: MeasurementTable) -> None:
    """At least two points, in batch order, one per (batch, context level), every value positive and finite."""
    levels = table.levels
    step, level_step = np.diff(table.batch), np.diff(levels)
    assert len(table) >= 2 and np.all((step > 0) | ((step == 0) & (level_step > 0)))
    for values in (table.batch, table.tpot_ms, table.throughput_tok_s):
        assert np.all(np.isfinite(values)) and np.all(values > 0)
    for values in (table.ttft_ms, table.concurrency):  # NaN where a row does not give it, else positive
        if values is not None:
            given = values[~np.isnan(values)]
            assert given.size and np.all(np.isfinite(given)) and np.all(given > 0)


@FUZZ
@given(csv_texts())
def test_csv_text_is_a_table_or_one_error_whichever_reader(text: str) -> None:
    table = same_outcome(text)
    if table is not None:
        check_table(table)


@FUZZ
@given(plausible_csv())
def test_plausible_tables_read_alike_and_fit_without_a_traceback(text: str) -> None:
    table = same_outcome(text)
    if table is not None:
        check_table(table)
        only_tokenroof_errors(lambda: predict_table(table, [1.0, 1000.0], n_samples=5).to_dict())


@FUZZ
@given(BYTES | ENCODED, st.sampled_from(["t.csv", "t.json"]))
def test_any_bytes_are_a_table_or_one_error(folder: Path, content: bytes, name: str) -> None:
    table = only_tokenroof_errors(lambda: read_table([write(folder, name, content)]))
    if table is not None:
        check_table(table)


def guidellm_bench(streams: int, itl: float) -> dict[str, Any]:
    def dist(mean: float) -> dict[str, Any]:
        return {"successful": {"mean": mean, "median": mean}, "errored": None, "total": {"mean": mean}}

    return {
        "args": {"strategy": {"type_": "concurrent", "streams": streams}},
        "metrics": {
            "request_concurrency": dist(streams * 0.98),
            "output_tokens_per_second": dist(streams * 980 / itl),
            "inter_token_latency_ms": dist(itl),
            "time_to_first_token_ms": dist(40.0),
            "prompt_token_count": dist(256.0),
            "output_token_count": dist(128.0),
        },
    }


def vllm_result(concurrency: int, tpot: float) -> dict[str, Any]:
    return {
        "backend": "vllm",
        "max_concurrency": concurrency,
        "output_throughput": concurrency * 1000 / tpot,
        "mean_tpot_ms": tpot,
        "mean_ttft_ms": 50.0,
        "completed": 100,
        "total_input_tokens": 25600,
        "total_output_tokens": 12800,
    }


MEASURED = [
    {
        "provenance": ["bench"],
        "batch_kind": "running",
        "input_len": 256,
        "points": [
            {"batch": 1, "tpot_ms": 10, "throughput_tok_s": 100, "context_tokens": 300, "ttft_ms": 30},
            {"batch": 8, "tpot_ms": 11, "context_tokens": 300, "ttft_ms": 31},
            {"batch": 8, "throughput_tok_s": 720, "context_tokens": 310, "ttft_ms": 32},
        ],
    },
    [{"batch": 1, "tpot_ms": 10}, {"batch": 4, "tpot_ms": 10.5}],
    {"benchmarks": [guidellm_bench(1, 10.0), guidellm_bench(16, 12.0), guidellm_bench(64, 20.0)]},
    vllm_result(1, 10.0),
]


@FUZZ
@given(st.lists(mutated(MEASURED) | JSON, min_size=1, max_size=3))
def test_measurement_json_is_a_table_or_one_error(folder: Path, docs: list[Any]) -> None:
    paths = [write(folder, f"m{i}.json", dump(doc)) for i, doc in enumerate(docs)]
    table = only_tokenroof_errors(lambda: read_table(paths))
    if table is not None:
        check_table(table)


@FUZZ
@given(st.lists(mutated([vllm_result(c, t) for c, t in ((1, 10.0), (8, 11.0), (32, 14.0))]), min_size=2, max_size=3))
def test_vllm_results_are_a_table_or_one_error(folder: Path, docs: list[Any]) -> None:
    paths = [write(folder, f"v{i}.json", dump(doc)) for i, doc in enumerate(docs)]
    table = only_tokenroof_errors(lambda: read_table(paths))
    if table is not None:
        check_table(table)


# -- model config.json, hardware TOML, step-model JSON -------------------------------------------------------------
def sane_numbers(obj: Any, where: str = "") -> None:
    """Every number in a dataclass (nested ones and mappings too) is finite and not negative."""
    values = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj
    items = (
        values.items() if isinstance(values, dict) else enumerate(values) if isinstance(values, list | tuple) else ()
    )
    for key, value in items:
        if isinstance(value, dict | list | tuple):
            sane_numbers(value, f"{where}.{key}")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            assert math.isfinite(value) and value >= 0, f"{where}.{key} = {value!r}"


@cache
def model_seeds() -> list[Any]:
    return [json.loads((SPECS / "models" / f"{name}.json").read_text()) for name in list_models()]


@FUZZ
@given(st.one_of(st.builds(dump, st.deferred(lambda: mutated(model_seeds())) | JSON), BYTES, ENCODED))
def test_model_config_is_a_spec_or_one_error(folder: Path, content: str | bytes) -> None:
    spec = only_tokenroof_errors(lambda: read_model_config(write(folder, "config.json", content)))
    if spec is not None:
        sane_numbers(spec)
        for size in (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.num_kv_heads, spec.vocab_size):
            assert size >= 1
        assert spec.head_dim >= 1 and spec.intermediate_size >= 1


def toml_value(value: Any) -> str:
    if value == HUGE:
        return "1" + "0" * 5000
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items() if v is not None) + "}"
        )
    return json.dumps(str(value))


def toml_text(data: dict[str, Any], prefix: str = "") -> str:
    """TOML for a parsed document (None dropped: TOML has no null); sub-tables as [a."b"] sections."""
    lines = [f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict | None)]
    for key, value in data.items():
        if isinstance(value, dict):
            name = f"{prefix}.{json.dumps(str(key))}" if prefix else json.dumps(str(key))
            lines.append(f"\n[{name}]\n" + toml_text(value, name))
    return "\n".join(lines) + "\n"


@cache
def hardware_seeds() -> list[Any]:
    return [tomllib.loads((SPECS / "hardware" / f"{name}.toml").read_text()) for name in list_hardware()]


TOML_LINES = st.lists(
    st.tuples(st.sampled_from(["name", "memory_bytes", "[peak_flops_per_s]", "bf16", "x"]), CELLS).map(
        lambda kv: kv[0] if kv[0].startswith("[") else f"{kv[0]} = {kv[1]}"
    ),
    max_size=8,
).map("\n".join)


@FUZZ
@given(st.one_of(st.deferred(lambda: mutated(hardware_seeds())).map(toml_text), TOML_LINES, BYTES, ENCODED))
def test_hardware_toml_is_a_spec_or_one_error(folder: Path, content: str | bytes) -> None:
    spec: HardwareSpec | None = only_tokenroof_errors(lambda: read_hardware_toml(write(folder, "hw.toml", content)))
    if spec is not None:
        assert math.isfinite(spec.memory_bytes) and spec.memory_bytes > 0
        assert math.isfinite(spec.memory_bandwidth_bytes_per_s) and spec.memory_bandwidth_bytes_per_s > 0
        assert spec.peak_flops_per_s and all(math.isfinite(v) and v > 0 for v in spec.peak_flops_per_s.values())
        sane_numbers(dict(spec.efficiencies))


@cache
def step_model_seeds() -> list[Any]:
    model = StepModel(1e-3, 8e-3, 60e-6, 1e-8, 10e-6, t_expert_s=1e-3, num_experts=8, experts_per_token=2)
    saved = json.loads(Travelling(model, 300.0, 0.5, False, "t.csv", None).to_json())
    return [saved, model.to_dict(), {"predictions": [], "model": {**model.to_dict(), "context_tokens": 300.0}}]


@FUZZ
@given(st.one_of(st.builds(dump, st.deferred(lambda: mutated(step_model_seeds())) | JSON), BYTES, ENCODED))
def test_step_model_json_is_a_model_or_one_error(folder: Path, content: str | bytes) -> None:
    travelling = only_tokenroof_errors(lambda: read_step_model(write(folder, "sm.json", content)))
    if travelling is not None:
        sane_numbers(travelling.step_model)
        assert travelling.context_tokens is None or math.isfinite(travelling.context_tokens)


# -- the CLI's number lists -----------------------------------------------------------------------------------------
@FUZZ
@given(st.text(max_size=40) | st.lists(CELLS, max_size=5).map(",".join))
def test_number_lists_are_numbers_or_one_error(text: str) -> None:
    values = only_tokenroof_errors(lambda: parse_numbers(text, "--batch"))
    if values is not None:
        assert all(isinstance(v, float) for v in values)


@FUZZ
@given(st.lists(st.floats(allow_nan=False), max_size=6), st.sampled_from([",", " ", ", "]))
def test_number_lists_read_back_exactly(values: list[float], separator: str) -> None:
    assert parse_numbers(separator.join(repr(v) for v in values), "--batch") == values


# -- physics floors ----------------------------------------------------------------------------------------------
@cache
def floors_prior() -> Any:
    from tokenroof.fit.predict import MeasuredWorkload
    from tokenroof.serving.deployment import Physics

    return Physics("llama-3.1-8b", "h100-sxm").prior(MeasuredWorkload(input_len=1024, output_len=256))


@st.composite
def generated_tables(draw: Any) -> MeasurementTable:
    """A curve T = f + max(W, b·c) + s·b with terms anywhere from far faster than an H100 allows to far slower,
    and a few percent of noise: what a user's file of another GPU, a quantised model or a typo might hold."""
    f = draw(st.floats(0.0, 10.0)) * 1e-3
    w = draw(st.floats(0.11, 20.0)) * 1e-3  # a TPOT under 0.1 ms is a unit slip a table is refused for (io.table)
    c = draw(st.floats(0.5, 300.0)) * 1e-6
    s = draw(st.floats(0.0, 200.0)) * 1e-6
    batches = sorted(draw(st.sets(st.sampled_from([1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256]), min_size=3)))
    noise = draw(st.lists(st.floats(-0.03, 0.03), min_size=len(batches), max_size=len(batches)))
    rows = "\n".join(
        f"{b},{(f + max(w, b * c) + s * b) * 1e3 * math.exp(e):.6g}" for b, e in zip(batches, noise, strict=True)
    )
    return parse_csv("# input_len=1024 output_len=256\nbatch,tpot_ms\n" + rows + "\n")


@pytest.mark.heavy
@HEAVY
@given(generated_tables())
def test_no_fitted_term_beats_the_hardware_without_a_named_conflict(table: MeasurementTable) -> None:
    """Every structure that carries weight is within the hardware's peaks, or a conflict names what it claims; the
    scheduler's model (bounded by the peaks) is never faster, and says when it sits at a peak."""
    from tokenroof.fit.core import fit_table
    from tokenroof.fit.structures import faster_than_peak
    from tokenroof.serving.replay import serving_fit

    prior = floors_prior()
    fit = fit_table(table, prior, n_samples=0)
    largest = float(table.batch.max())
    for c in fit.candidates:
        claims = faster_than_peak(c.model, prior, largest)
        if fit.weights[c.structure] > 0 and claims:
            assert any(c.structure in conflict for conflict in fit.conflicts), (c.structure, claims)
    serving = serving_fit(fit, table)
    assert serving is not None  # the physics prices the prefill
    peak = prior.weights_floor
    assert serving.model.t_weights_s >= peak.t_weights_s * (1 - 1e-9)
    assert serving.model.t_compute_s >= peak.t_compute_s * (1 - 1e-9)
    at_floor = (
        serving.model.t_weights_s <= peak.t_weights_s * 1.001 or serving.model.t_compute_s <= peak.t_compute_s * 1.001
    )
    assert not at_floor or serving.conflicts


def test_an_empty_item_between_commas_is_named_not_passed_over() -> None:
    """`--request-rate 10,,20` left a value out: named (it had simulated 10 and 20 as if nothing were missing); the
    same for a list of names. Commas with spaces, or spaces alone, still separate."""
    from tokenroof.params import parse_names

    for text in ("10,,20", "1,8,", ",4"):
        with pytest.raises(TokenroofError, match=f"--batch: an empty item between commas in '{text}'"):
            parse_numbers(text, "--batch")
    assert parse_numbers("1, 8 32", "--batch") == [1.0, 8.0, 32.0]
    assert parse_names("h100-sxm, a100-sxm-80gb", "--hardware") == ("h100-sxm", "a100-sxm-80gb")
    with pytest.raises(TokenroofError, match="--hardware: an empty item between commas in 'h100-sxm,,a100'"):
        parse_names("h100-sxm,,a100", "--hardware")
