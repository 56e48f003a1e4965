"""`tokenroof ui`: the API answers what the CLI's --json answers (schema-valid), and the page works in a browser.

The browser check is slow (`make test-slow`); the default run sends the page's own requests without a browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.conftest import SEED_TABLE, run_json
from tests.schemas import validate
from tests.test_report import browser, console_errors, needs_browser
from tokenroof.ui import api, make_app, start

CHART_DRAWN = (
    "(() => { const c = document.getElementById('chart'); return c.querySelector('.main-svg') && c.data.length; })()"
)
FORM = {"model": "llama-2-7b", "hardware": "h100-sxm", "dtype": "bf16", "tp": 1, "context": 300}
TABLE = {"name": "seed.csv", "text": SEED_TABLE.read_text()}


def call(requests: list[tuple[str, str, Any]], headers: dict[str, str] | None = None) -> list[tuple[int, Any]]:
    """(status, JSON) for each (method, path, body) against the app, in one event loop."""

    async def main() -> list[tuple[int, Any]]:
        async with TestClient(TestServer(make_app())) as client:
            answers = []
            for method, path, body in requests:
                response = await client.request(method, path, json=body, headers=headers)
                answers.append((response.status, await response.json()))
            return answers

    return asyncio.run(main())


def set_default(monkeypatch: pytest.MonkeyPatch, function: Any, name: str, value: Any) -> None:
    """Give a function's parameter another default for this test (as a CLI flag would give it another value)."""
    names = function.__code__.co_varnames[: function.__code__.co_argcount]
    defaults = list(function.__defaults__)
    defaults[names.index(name) - (len(names) - len(defaults))] = value
    monkeypatch.setattr(function, "__defaults__", tuple(defaults))


def api_samples(monkeypatch: pytest.MonkeyPatch, samples: int) -> list[str]:
    """The API's interval samples (predict's and advise's default, 200) set to `samples`; the CLI's same flag."""
    from tokenroof.fit.predict import predict_table
    from tokenroof.serving.advise import advise_answer

    set_default(monkeypatch, predict_table, "n_samples", samples)
    set_default(monkeypatch, advise_answer, "samples", samples)
    return ["--samples", str(samples)]


# the default run fits with 20 interval samples on both sides; the slow run with both sides' defaults
@pytest.mark.parametrize("samples", [20, pytest.param(None, marks=pytest.mark.slow, id="default-samples")])
def test_the_api_answers_as_the_cli_does(samples: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    flags = api_samples(monkeypatch, samples) if samples else []
    (status, roofline), (_, predict), (_, advise), (_, presets) = call(
        [
            ("POST", "/api/roofline", {**FORM, "batch_min": 1, "batch_max": 512}),
            ("POST", "/api/predict", {**FORM, "table": TABLE, "prior": True, "batch_min": 1, "batch_max": 512}),
            ("POST", "/api/advise", {**FORM, "table": TABLE, "prior": True, "tpot_slo_ms": 30}),
            ("GET", "/api/presets", None),
        ]
    )
    assert status == 200
    validate("roofline", roofline)
    validate("predict", predict)
    validate("advise", advise)
    batches = ",".join(repr(float(b)) for b in np.geomspace(1, 512, api.CURVE_BATCHES))
    physics = ["--model", "llama-2-7b", "--hardware", "h100-sxm", "--dtype", "bf16", "--context", "300"]
    assert roofline == run_json(["roofline", *physics, "--batch", batches])
    cli_predict = run_json(["predict", str(SEED_TABLE), "--batch", batches, *physics, *flags])
    assert predict["predictions"] == cli_predict["predictions"]
    assert predict["measured"]["source"] == "seed.csv"  # the upload's own name, not the server's scratch folder
    cli_advise = run_json(["advise", str(SEED_TABLE), "--tpot-slo-ms", "30", *physics, *flags])
    assert advise["max_num_seqs"] == cli_advise["max_num_seqs"] == 297
    assert "llama-2-7b" in presets["models"] and "h100-sxm" in presets["hardware"]


def test_the_data_only_fit_and_first_principles_advice() -> None:
    (_, predict), (_, advise), (_, first) = call(
        [
            ("POST", "/api/predict", {"table": TABLE, "batch_min": 1, "batch_max": 256}),
            ("POST", "/api/advise", {"table": TABLE, "tpot_slo_ms": 30}),
            ("POST", "/api/advise", {**FORM, "tpot_slo_ms": 30}),
        ]
    )
    validate("predict", predict)
    assert predict["max_batch_by_memory"] is None  # no model or hardware: no memory cap
    validate("advise", advise)
    validate("advise", first)
    assert first["source"].startswith("first principles: llama-2-7b on h100-sxm")


def test_an_uploaded_config_and_the_figure(tiny_config: Path) -> None:
    body = {**FORM, "model": None, "model_config": tiny_config.read_text(), "batch_min": 1, "batch_max": 64}
    (status, roofline), (_, figure) = call([("POST", "/api/roofline", body), ("POST", "/api/figure", {})])
    assert status == 200
    validate("roofline", roofline)
    assert roofline["model"]["hidden_size"] == 64
    assert figure == {"error": "nothing to draw: give a roofline or predict answer"}
    drawn = json.loads(api.figure({"roofline": roofline}))
    assert any(trace.get("name", "").startswith("first principles: config") for trace in drawn["data"])


def test_bad_requests_get_one_line() -> None:
    answers = call(
        [
            ("POST", "/api/roofline", {**FORM, "model": "/etc/passwd"}),
            ("POST", "/api/roofline", {**FORM, "context": -5}),
            ("POST", "/api/roofline", {**FORM, "batch_min": 8, "batch_max": 2}),
            ("POST", "/api/predict", {**FORM}),
            ("POST", "/api/advise", {**FORM, "tpot_slo_ms": 0.001}),
            ("POST", "/api/predict", {"table": {"name": "x.csv", "text": "batch,tpot_ms\n1,oops\n2,3\n"}}),
        ]
    )
    errors = [body["error"] for status, body in answers if status == 400]
    assert len(errors) == len(answers)
    assert errors[0] == "unknown model '/etc/passwd'; pick a preset or upload a config.json"
    assert errors[1] == "--context must be at least 0, got -5"
    assert errors[2] == "the batch range must be 0 < from < to, got 8 to 2"
    assert errors[3] == "predict needs a measurement file"
    assert errors[4].startswith("no batch cap meets TPOT ≤ 0.001 ms")
    assert "x.csv" in errors[5] and "tokenroof-ui-" not in errors[5]


def test_another_host_is_refused() -> None:
    ((status, body),) = call([("GET", "/api/presets", None)], headers={"Host": "evil.example:8765"})
    assert status == 403 and "not served here" in body["error"]


# -- in a browser ----------------------------------------------------------------------------------
@contextlib.contextmanager
def served() -> Iterator[str]:
    """The ui on a free loopback port, in a thread with its own event loop."""
    loop = asyncio.new_event_loop()
    runner, url = loop.run_until_complete(start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def first_principles_tpot(page: Any) -> list[float]:
    return page.evaluate(
        "document.getElementById('chart').data.find(t => (t.name || '').startsWith('first principles')).y"
    )


PAGE_FORM = {  # what the page's form() sends, as it first loads
    "model": "llama-3.1-8b",
    "model_config": None,
    "hardware": "h100-sxm",
    "dtype": None,
    "kv_dtype": None,
    "tp": 1,
    "context": 1024,
    "batch_min": 1,
    "batch_max": 512,
    "table": None,
    "prior": False,
    "tpot_slo_ms": 50,
}
PAGE_GETS = {"/plotly.min.js", "/api/presets"}
PAGE_POSTS = {"/api/roofline", "/api/predict", "/api/advise", "/api/figure"}


async def page_update(client: TestClient, body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The page's update(): roofline, predict when a file is loaded, advise, then the figure of those answers."""

    async def post(path: str, data: Any) -> Any:
        response = await client.post(path, json=data)
        assert response.status == 200, await response.text()
        return await response.json()

    answers = {"roofline": await post("/api/roofline", body)}
    if body["table"]:
        answers["predict"] = await post("/api/predict", body)
    answers["advise"] = await post("/api/advise", body)
    table_name = body["table"] and body["table"]["name"]
    return answers, await post("/api/figure", {**answers, "table_name": table_name})


def trace_y(figure: dict[str, Any], prefix: str) -> list[float]:
    return next(t["y"] for t in figure["data"] if t.get("name", "").startswith(prefix))


def test_the_page_without_a_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the browser check does, by the page's own requests: every element its script names is on the page and
    every path it fetches is served; a longer context moves the curve and lowers the memory cap; an uploaded CSV is
    fitted and drawn with its interval."""
    api_samples(monkeypatch, 20)

    async def main() -> None:
        async with TestClient(TestServer(make_app())) as client:
            page = await (await client.get("/")).text()
            script = page[page.rindex("<script>") :]
            ids = set(re.findall(r'\bid="([^"]+)"', page))
            assert set(re.findall(r'\$\("([^"]+)"\)', script)) <= ids
            assert set(re.findall(r'"(/[a-z./]+)"', page)) == PAGE_GETS | PAGE_POSTS
            for method, paths in (("GET", PAGE_GETS), ("POST", PAGE_POSTS)):
                for path in paths:
                    assert (await client.request(method, path)).status != 404, path
            assert len(await (await client.get("/plotly.min.js")).read()) > 1_000_000
            first, drawn = await page_update(client, PAGE_FORM)
            longer, drawn_longer = await page_update(client, {**PAGE_FORM, "context": 8192})
            assert longer["roofline"]["max_batch_by_memory"] < first["roofline"]["max_batch_by_memory"]
            assert trace_y(drawn_longer, "first principles")[-1] > trace_y(drawn, "first principles")[-1]
            table = {"name": SEED_TABLE.name, "text": SEED_TABLE.read_text()}
            fitted, drawn_fit = await page_update(client, {**PAGE_FORM, "table": table})
            names = [trace.get("name") for trace in drawn_fit["data"]]
            assert "fit: h100_7b_seed.csv" in names and "90% interval (fit: h100_7b_seed.csv)" in names
            assert np.isfinite(fitted["predict"]["model"]["residual_rms_relative"])  # the fit line's "rms …%"
            assert "--max-num-seqs" in json.dumps(fitted["advise"]["engine_flags"])

    asyncio.run(main())


@pytest.mark.slow
@needs_browser
def test_the_page_in_a_browser(tmp_path: Path) -> None:
    """The chart draws; a longer context moves the curve and lowers the memory cap; an uploaded CSV is fitted."""
    with served() as url, browser() as chromium:
        page = chromium.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(120_000)  # a loaded 2-core machine: never a flaky timeout
        errors = console_errors(page)
        page.goto(url)
        page.wait_for_function("window.tokenroof && window.tokenroof.answers.roofline", timeout=60_000)
        page.wait_for_function(CHART_DRAWN, timeout=60_000)
        page.screenshot(path=str(tmp_path / "ui-first-principles.png"))
        cap, tpot = int(page.inner_text("#memory-cap").replace(",", "")), first_principles_tpot(page)
        page.fill("#context", "8192")
        page.wait_for_function("window.tokenroof.answers.roofline.context_tokens === 8192", timeout=60_000)
        assert int(page.inner_text("#memory-cap").replace(",", "")) < cap
        assert first_principles_tpot(page)[-1] > tpot[-1]
        page.screenshot(path=str(tmp_path / "ui-context-8192.png"))
        page.set_input_files("#measurements", str(SEED_TABLE))
        page.wait_for_function("window.tokenroof.answers.predict !== undefined", timeout=60_000)
        names = page.evaluate("document.getElementById('chart').data.map(t => t.name)")
        assert "fit: h100_7b_seed.csv" in names and "90% interval (fit: h100_7b_seed.csv)" in names
        assert page.inner_text("#fit").endswith("%") and "--max-num-seqs" in page.inner_text("#flags")
        page.screenshot(path=str(tmp_path / "ui-fitted.png"))
    assert errors == []


def test_several_vllm_result_files_are_one_table_as_on_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM writes one result file per concurrency: the page takes them together and answers as predict does (the
    scheduler's model, TTFT included)."""
    from tests.conftest import ROOT

    files = sorted((ROOT / "examples" / "vllm").glob("vllm-c*.json"))
    tables = [{"name": f.name, "text": f.read_text()} for f in files]
    flags = api_samples(monkeypatch, 20)
    ((status, predict),) = call([("POST", "/api/predict", {"tables": tables, "batch_min": 64, "batch_max": 256})])
    assert status == 200, predict
    validate("predict", predict)
    assert predict["serving"]["client"] == "burst" and all("ttft_ms" in p for p in predict["predictions"])
    batches = ",".join(repr(float(b)) for b in np.geomspace(64, 256, api.CURVE_BATCHES))
    cli = run_json(["predict", *map(str, files), "--batch", batches, *flags])
    assert [p["tpot_ms"] for p in predict["predictions"]] == pytest.approx([p["tpot_ms"] for p in cli["predictions"]])
    ((status, refused),) = call([("POST", "/api/predict", {"tables": [tables[0], tables[0]]})])
    assert status == 400 and "two uploads named" in json.dumps(refused)
