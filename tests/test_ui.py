"""`tokenroof ui`: the API answers what the CLI's --json answers (schema-valid), and the page works in a browser.

The browser check is slow (`make test-slow`); the default run sends the page's own requests without a browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
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
from tokenroof.ui import MAX_UPLOAD_BYTES, MAX_WORK, api, make_app, start

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
    assert figure["error"]["message"] == "nothing to draw: give a roofline or predict answer"
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
    errors = [body["error"]["message"] for status, body in answers if status == 400]
    assert len(errors) == len(answers)
    assert errors[0] == "unknown model '/etc/passwd'; pick a preset or upload a config.json"
    assert errors[1] == "--context must be at least 0, got -5"
    assert errors[2] == "the batch range must be 0 < from < to, got 8 to 2"
    assert errors[3] == "predict needs a measurement file"
    assert errors[4].startswith("no batch cap meets TPOT ≤ 0.001 ms")
    assert "x.csv" in errors[5] and "tokenroof-ui-" not in errors[5]


def test_another_host_is_refused() -> None:
    ((status, body),) = call([("GET", "/api/presets", None)], headers={"Host": "evil.example:8765"})
    assert status == 403 and "not served here" in body["error"]["message"]


def test_the_ui_answers_its_own_page_only() -> None:
    """Issue 33: a cross-site page could POST text/plain without a preflight; every refusal before the body is
    read, each one line in OpenAI's error shape."""

    async def main() -> list[tuple[int, Any, dict[str, str]]]:
        async with TestClient(TestServer(make_app())) as client:
            own = f"http://{client.host}:{client.port}"
            tries = [
                ("POST", "/api/roofline", {"Origin": "https://evil.example"}, json.dumps(FORM)),
                ("POST", "/api/roofline", {"Origin": "null"}, json.dumps(FORM)),
                ("POST", "/api/roofline", {"Sec-Fetch-Site": "cross-site"}, json.dumps(FORM)),
                ("POST", "/api/roofline", {"Content-Type": "text/plain"}, json.dumps(FORM)),
                ("POST", "/api/roofline", {"Content-Type": "application/json", "Origin": own}, json.dumps(FORM)),
                ("GET", "/api/roofline", {}, None),
                ("GET", "/nowhere", {}, None),
                (
                    "POST",
                    "/api/roofline",
                    {"Content-Type": "application/json"},
                    io.BytesIO(b"x" * (MAX_UPLOAD_BYTES + 1)),
                ),
            ]
            answers = []
            for method, path, headers, data in tries:
                headers = {"Content-Type": "application/json", **headers} if method == "POST" else headers
                response = await client.request(method, path, headers=headers, data=data)
                answers.append((response.status, await response.json(), dict(response.headers)))
            return answers

    answers = asyncio.run(main())
    assert [status for status, _, _ in answers] == [403, 403, 403, 415, 200, 405, 404, 413]
    for status, body, _ in answers:
        if status != 200:
            assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["code"] == status
            assert "\n" not in body["error"]["message"]
    assert "cross-origin request from 'https://evil.example'" in answers[0][1]["error"]["message"]
    assert answers[3][1]["error"]["message"] == "the body must be application/json, got 'text/plain'"


def test_work_past_the_bound_is_told_to_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MAX_WORK requests are worked on at once; the next is a 429 with Retry-After, its body unread."""
    release = threading.Event()

    def slow(raw: bytes) -> dict[str, Any]:
        release.wait(timeout=30)
        return {"ok": True}

    monkeypatch.setattr(api, "roofline", slow)

    async def main() -> list[int]:
        async with TestClient(TestServer(make_app())) as client:
            held = [asyncio.create_task(client.post("/api/roofline", json=FORM)) for _ in range(MAX_WORK)]
            await asyncio.sleep(0.3)
            refused = await client.post("/api/roofline", json=FORM)
            assert refused.headers["Retry-After"] == "1"
            assert "busy" in (await refused.json())["error"]["message"]
            release.set()
            return [refused.status] + [(await task).status for task in held]

    assert asyncio.run(main()) == [429] + [200] * MAX_WORK


# the kept reproducers of the last fault round: each was an HTTP 500 with a traceback on the console
BAD_BODIES = [
    ('{"dtype": 5}', "dtype: Input should be a valid string"),
    ('{"tp": 1' + "0" * 400 + "}", "tp: "),
    ('{"context": 1' + "0" * 400 + "}", "context: Input should be a finite number"),
    ('{"context": NaN}', "context: Input should be a finite number"),
    ('{"model": "\ud800"}', "not JSON"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
    ('{"tp": true}', "tp: Input should be a valid integer"),
    ('{"prior": "yes"}', "prior: Input should be a valid boolean"),
    ('{"tables": {"name": "x"}}', "tables: Input should be a valid array"),
    ('{"tables": [{"name": "x.csv"}]}', "tables.0.text: Field required"),
    ('{"colour": "red"}', "colour: Extra inputs are not permitted"),
    ("[1, 2]", "expected a JSON object"),
    ("", "not JSON"),
]


@pytest.mark.parametrize(("raw", "said"), BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_a_bad_value_is_a_400_never_a_500(raw: str, said: str) -> None:
    async def main() -> tuple[int, Any]:
        async with TestClient(TestServer(make_app())) as client:
            headers = {"Content-Type": "application/json"}
            response = await client.post("/api/roofline", data=raw.encode("utf-8", "surrogatepass"), headers=headers)
            return response.status, await response.json()

    status, body = asyncio.run(main())
    assert status == 400 and said in body["error"]["message"], body


def test_uploads_named_dot_dot_or_odd_text_and_bad_answers_to_draw() -> None:
    table = {"name": "..", "text": SEED_TABLE.read_text()}
    answers = call(
        [
            ("POST", "/api/predict", {"table": table, "batch_min": 1, "batch_max": 64}),
            ("POST", "/api/predict", {"table": {"name": "../../x.csv", "text": "batch,tpot_ms\n1,\u2028\n"}}),
            ("POST", "/api/figure", {"roofline": {"model": 1}}),
            ("POST", "/api/figure", {"advise": {"max_num_seqs": 1, "at_cap": None, "engine_flags": {}}}),
            ("POST", "/api/figure", {"predict": {"predictions": [{"batch": "x"}]}}),
        ]
    )
    assert answers[0][0] == 200 and answers[0][1]["measured"]["source"] == "measurements.csv"
    assert [status for status, _ in answers[1:]] == [400] * 4
    assert answers[1][1]["error"]["message"].startswith("x.csv")
    assert answers[2][1]["error"]["message"].startswith("the roofline answer: not a valid roofline answer")
    assert answers[3][1]["error"]["message"].startswith("the advise answer: not a valid advise answer")


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def flood(port: int, headers: dict[str, str], n: int = 6, size: int = MAX_UPLOAD_BYTES) -> list[int]:
    """n parallel POSTs of `size` bytes each; their statuses (0: the server closed before answering)."""
    import http.client
    from concurrent.futures import ThreadPoolExecutor

    body = b"x" * size

    def one(_: int) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            connection.request("POST", "/api/predict", body=body, headers=headers)
            return connection.getresponse().status
        except OSError:
            return 0
        finally:
            connection.close()

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_cross_site_flood_leaves_memory_flat() -> None:
    """Issue 33's done-criterion: 64 MB × 6 cross-site text/plain uploads (what any web page can send without a
    preflight) are refused and the ui's peak memory stays within 100 MB of idle (it was 7.8 GB)."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.emulator_process import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tokenroof", "ui", "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/presets", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the ui did not start"
                time.sleep(0.2)
        idle = peak_rss_mb(proc.pid)
        cross_site = {"Content-Type": "text/plain", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
        assert set(flood(port, cross_site)) <= {403, 0}
        assert peak_rss_mb(proc.pid) - idle < 100
        assert set(flood(port, {"Content-Type": "text/plain"})) <= {415, 0}  # a script without the browser's headers
        assert peak_rss_mb(proc.pid) - idle < 100
        # and a stopped ui stops, even with an upload stalled halfway (it waited 60 s for it: one CI run failed here)
        with socket.create_connection(("127.0.0.1", port)) as stalled:
            head = b"POST /api/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            stalled.sendall(head + b"Content-Length: 1000000\r\n\r\n" + b"x" * 1000)
            time.sleep(0.3)
            proc.terminate()
            proc.wait(timeout=10)
    finally:
        proc.kill()  # a no-op where it stopped; where it did not, pytest reports the timeout, not a leaked process
        proc.wait()


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


@pytest.mark.heavy
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
    assert status == 400 and "two uploads named vllm-c1.json with the same text" in json.dumps(refused)
