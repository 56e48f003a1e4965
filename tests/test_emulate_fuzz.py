"""Property test of the emulator's request handling: whatever a client posts, the answer is a 2xx or a 4xx with
the OpenAI error JSON shape, never a 5xx and never a hang.

Bounded in the default suite; TOKENROOF_FUZZ_EXAMPLES (an int) raises the example count for a longer run
(`TOKENROOF_FUZZ_EXAMPLES=2000 pytest tests/test_emulate_fuzz.py`, what `make fuzz` runs).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.emulate.server import Emulator, start

FUZZ_EXAMPLES = int(os.environ.get("TOKENROOF_FUZZ_EXAMPLES", "60"))
QUICK = StepModel(t_fixed_s=1e-4, t_weights_s=0.0, t_compute_s=0.0, t_kv_token_s=0.0)
MODEL = "fuzz-model"
PATHS = ("/v1/completions", "/v1/chat/completions")

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"])},
    optional={
        "content": st.text(max_size=40) | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text()}))
    },
)
REQUIRED = {
    "prompt": st.text(max_size=40) | st.lists(st.integers(0, 100), min_size=1, max_size=8),
    "messages": st.lists(MESSAGE, min_size=1, max_size=3),
}
OPTIONAL: dict[str, st.SearchStrategy[Any]] = {  # plausible values, edge cases included
    "max_tokens": st.integers(-2, 70),
    "max_completion_tokens": st.integers(-2, 70),
    "min_tokens": st.integers(-2, 70),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "n": st.just(1) | st.integers(-1, 3),
    "model": st.sampled_from([MODEL, "other-model", ""]),
    "temperature": st.floats(-1, 3),
    "top_p": st.floats(-0.5, 1.5),
    "presence_penalty": st.floats(-3, 3),
    "ignore_eos": st.booleans(),
}


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    """A plausible request with up to three of its fields replaced by any JSON at all (wrong types, nesting)."""
    body = draw(st.fixed_dictionaries(REQUIRED, optional=OPTIONAL))
    for key in draw(st.lists(st.sampled_from([*REQUIRED, *OPTIONAL]), max_size=3, unique=True)):
        body[key] = draw(JSON)
    return body


NESTED = st.integers(1, 20_000).map(lambda depth: '{"prompt": ' + "[" * depth + "]" * depth + "}")
BODIES = st.one_of(  # half of them plausible requests
    objects().map(lambda body: json.dumps(body).encode()),
    st.one_of(JSON.map(lambda value: json.dumps(value).encode()), NESTED.map(str.encode), st.binary(max_size=64)),
)


@pytest.fixture(scope="module")
def emulator_url() -> Iterator[str]:
    """One emulator on its own event loop thread for every example: a 64-token context keeps requests short, and
    a 48-token KV cache refuses some requests that fit the context (a 400 from the scheduler's check)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    emulator = Emulator(QUICK, 8, MODEL, max_model_len=64, kv_cache_tokens=48, read_timeout_s=5.0)
    runner, url = asyncio.run_coroutine_threadsafe(start(emulator), loop).result(30)
    try:
        yield url
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def post(url: str, path: str, raw: bytes) -> tuple[int, str, bytes]:
    """(status, content type, body); a hang raises TimeoutError."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    try:
        conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        conn.close()


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), raw=BODIES)
def test_any_body_gets_a_2xx_or_an_openai_4xx(emulator_url: str, path: str, raw: bytes) -> None:
    status, content_type, data = post(emulator_url, path, raw)
    event(f"HTTP {status}")  # --hypothesis-show-statistics: how many got through to generation
    assert 200 <= status < 500, data
    if status >= 400:
        error = json.loads(data)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
        assert isinstance(error["message"], str) and isinstance(error["type"], str)
    elif content_type.startswith("text/event-stream"):
        assert data.endswith(b"data: [DONE]\n\n") and b'"error"' not in data
    else:
        assert json.loads(data)["usage"]["completion_tokens"] >= 1
