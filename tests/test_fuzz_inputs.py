"""Issue 33: what reads a command's JSON back (`report`, `bench --resume`) and the ui's API raise nothing but the
project's own errors, whatever they are given: real outputs with their values replaced, keys dropped, types
changed, plus raw bytes for the API.

TOKENROOF_FUZZ_EXAMPLES sets the examples per test (30 by default; `make fuzz` runs 2000).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, SEED_TABLE, run_json
from tokenroof.errors import TokenroofError

FUZZ = settings(
    max_examples=int(os.environ.get("TOKENROOF_FUZZ_EXAMPLES", 30)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PHYSICS = ["--model", "llama-2-7b", "--hardware", "h100-sxm", "--context", "300"]
LENGTHS = ["--input-len", "128", "--output-len", "64"]

# any JSON value, the awkward ones included: NaN and infinities (Python's json writes them), huge integers, lone
# surrogates, deep-ish nesting
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["", "..", "\ud800", "nan", "1e999", "concurrency=1"])
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in `doc` (lists: their first three items)."""
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:3]):
            yield from paths(value, (*prefix, i))


def mutated(doc: Any, data: st.DataObject, times: int = 3) -> Any:
    """`doc` with 1..times places replaced by any JSON value, or deleted."""
    doc = json.loads(json.dumps(doc))
    for _ in range(data.draw(st.integers(1, times))):
        places = list(paths(doc))
        place = data.draw(st.sampled_from(places))
        if not place:
            doc = data.draw(VALUES)
            continue
        parent = functools.reduce(lambda d, k: d[k], place[:-1], doc)
        how = data.draw(st.sampled_from(["delete", "any", "alike", "alike"]))
        if how == "delete" and isinstance(parent, dict):
            del parent[place[-1]]
        else:
            parent[place[-1]] = data.draw(alike(parent[place[-1]]) if how == "alike" else VALUES)
    return doc


def alike(value: Any) -> st.SearchStrategy[Any]:
    """A value of the same JSON type (what a schema lets through: the readers' own checks are then what is tried)."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(-3, 10**6) | st.sampled_from([0, 1, 2**31, 2**63])
    if isinstance(value, float):
        return st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, 1e-300, 1e300, -1.0])
    if isinstance(value, str):
        return st.text(max_size=12) | st.sampled_from(["", "concurrency=1", "rate=inf", "memory", "none"])
    if isinstance(value, list):
        return st.sampled_from([[], value[:1], value[::-1], value * 2])
    return st.just(value) if value is None else st.sampled_from([{}, value])


def dump(doc: Any) -> str:
    return json.dumps(doc, allow_nan=True, ensure_ascii=False)


PLAN_SEARCH = ["--num-requests", "60", "--workers", "1"]  # a short search, in this process


@functools.cache
def answers() -> dict[str, Any]:
    """One real --json of each command the report reads."""
    seed = str(SEED_TABLE)
    return {
        "roofline": run_json(["roofline", *PHYSICS, "--batch", "1,8,64"]),
        "roofline-contexts": run_json(["roofline", *PHYSICS[:4], "--context", "300,2000", "--batch", "1,8"]),
        "predict": run_json(["predict", seed, "--batch", "1,8,64,256", *PHYSICS, "--samples", "20"]),
        "advise": run_json(["advise", seed, "--tpot-slo-ms", "30", *PHYSICS, "--samples", "20"]),
        "simulate": run_json(["simulate", *PHYSICS[:4], "--rate", "2", "--num-requests", "40", *LENGTHS]),
        "simulate-sweep": run_json(["simulate", *PHYSICS[:4], "--rate", "2,4", "--num-requests", "40", *LENGTHS]),
        "plan": run_json(["plan", *PHYSICS[:4], "--rate", "4", "--tpot-slo-ms", "50", *PLAN_SEARCH, *LENGTHS]),
        "bench": json.loads((ROOT / "examples" / "bench" / "summary.json").read_text()),
    }


@contextlib.contextmanager
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("fuzz")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_answers_are_what_the_report_reads() -> None:
    from tokenroof.report.sources import kind_of

    for kind, doc in answers().items():
        if kind == "roofline-contexts":
            assert kind_of(doc["contexts"][0]) == "roofline"
        else:
            assert kind_of(doc) == kind, kind


@FUZZ
@given(data=st.data())
def test_report_raises_only_its_own_errors(data: st.DataObject, tmp_path_factory: Any) -> None:
    from tokenroof.report import build_report, load_sources

    kind = data.draw(st.sampled_from(sorted(answers())))
    doc = mutated(answers()[kind], data)
    with scratch(tmp_path_factory) as folder:
        if kind == "bench":
            shutil.copy(ROOT / "examples" / "bench" / "summary.csv", folder / "summary.csv")
            (folder / "summary.json").write_text(dump(doc), encoding="utf-8", errors="surrogatepass")
            path = folder
        else:
            path = folder / f"{kind}.json"
            path.write_text(dump(doc), encoding="utf-8", errors="surrogatepass")
        try:
            build_report(load_sources([path]))
            event("drawn")
        except TokenroofError:
            event("refused")


@functools.cache
def bench_lines() -> list[dict[str, Any]]:
    """The example bench run's requests.jsonl, cut to its header, starts, a few requests and every point."""
    lines = [json.loads(line) for line in (ROOT / "examples" / "bench" / "requests.jsonl").read_text().splitlines()]
    requests = [obj for obj in lines if obj["type"] == "request"][:6]
    return [obj for obj in lines if obj["type"] != "request"] + requests


@FUZZ
@given(data=st.data())
def test_resume_raises_only_its_own_errors(data: st.DataObject, tmp_path_factory: Any) -> None:
    from tokenroof.measure.http.record import check_settings, read_previous
    from tokenroof.measure.http.redact import Redactor
    from tokenroof.measure.http.run import BenchConfig, write_outputs

    lines = bench_lines()
    settings = lines[0]["settings"]
    chosen = data.draw(st.lists(st.integers(0, len(lines) - 1), min_size=1, max_size=3))
    docs = [mutated(obj, data) if i in chosen else obj for i, obj in enumerate(lines)]
    with scratch(tmp_path_factory) as folder:
        path = folder / "requests.jsonl"
        path.write_text("".join(dump(d) + "\n" for d in docs), encoding="utf-8", errors="surrogatepass")
        try:
            previous = read_previous(path, lambda _: None)
            check_settings(previous, settings, path)
            cfg = BenchConfig(url=settings["url"], out_dir=folder, concurrencies=[1], resume=True)
            write_outputs(cfg, "m", list(previous.valid_points().values()), Redactor.of(cfg.url, None))
            event("resumed")
        except TokenroofError:
            event("refused")


FORM = {"model": "llama-2-7b", "hardware": "h100-sxm", "tp": 1, "context": 300, "batch_min": 1, "batch_max": 64}
TABLE = {"name": "seed.csv", "text": SEED_TABLE.read_text()}


@FUZZ
@given(data=st.data(), endpoint=st.sampled_from(["roofline", "predict", "advise", "figure"]))
def test_the_ui_api_raises_only_its_own_errors(data: st.DataObject, endpoint: str) -> None:
    from tests.test_ui import api_samples
    from tokenroof.ui import api

    base: Any = {**FORM, "table": TABLE, "prior": data.draw(st.booleans()), "tpot_slo_ms": 30}
    if endpoint == "figure":
        base = {k: answers()[k] for k in ("roofline", "predict", "advise")}
    body = mutated(base, data)
    raw = data.draw(st.sampled_from(["json", "bytes"]))
    text = dump(body) if raw == "json" else data.draw(st.binary(max_size=64)).decode("latin-1")
    with pytest.MonkeyPatch.context() as patch:
        api_samples(patch, 20)  # interval samples as the fast tests ask them
        try:
            answer = getattr(api, endpoint)(text.encode("utf-8", "surrogatepass"))
            json.dumps(answer if isinstance(answer, dict) else json.loads(answer), allow_nan=False)
            event("answered")
        except TokenroofError:
            event("refused")
