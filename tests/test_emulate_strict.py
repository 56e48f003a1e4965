"""The emulator refuses what vLLM refuses, the way vLLM does: one test per fault found by poking at it."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import run_cli
from tests.test_emulate import sse_events, with_emulator
from tokenroof.errors import TokenroofError
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.emulate.server import Emulator
from tokenroof.serving.engine.core import BatchScheduler, StepPlan

TERMS = {"t_fixed_s": 1e-3, "t_weights_s": 1e-3, "t_compute_s": 0.0, "t_kv_token_s": 0.0}


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def expect_error(response: aiohttp.ClientResponse, status: int, kind: str, param: str | None = None) -> str:
    """Assert the OpenAI error shape (newer vLLM's) and return its message."""
    assert response.status == status
    assert response.headers["Content-Type"].startswith("application/json")
    error = (await response.json())["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == (kind, param, status)
    return str(error["message"])


@pytest.mark.parametrize(
    ("field", "value"),
    [("t_fixed_s", "0.01"), ("t_weights_s", -1.0), ("t_kv_token_s", math.nan), ("t_seq_s", math.inf),
     ("t_compute_s", True), ("overlap", 1.5), ("num_experts", 2.5), ("prompts_folded", 1)],
)  # fmt: skip
def test_a_bad_step_model_is_refused_at_start(field: str, value: Any) -> None:
    terms: dict[str, Any] = {**TERMS, field: value}
    with pytest.raises(TokenroofError, match=field):
        Emulator(StepModel(**terms))
    with pytest.raises(TokenroofError, match="takes no time"):
        Emulator(StepModel(0.0, 0.0, 0.0, 0.0))


def test_a_step_model_file_with_a_string_field_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    path.write_text(json.dumps({**TERMS, "t_fixed_s": "0.01"}))
    result = run_cli(["emulate", "--step-model", str(path), "--port", "1"])
    assert result.exit_code == 2 and "t_fixed_s" in result.stderr and "Traceback" not in result.output


def test_a_dead_engine_fails_requests_with_500(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def check(session: aiohttp.ClientSession, url: str, emulator: Emulator) -> None:
        plan_step, calls = BatchScheduler.plan_step, []

        def dies_at_the_fourth_step(scheduler: BatchScheduler, now: float) -> StepPlan | None:
            calls.append(now)
            if len(calls) >= 4:
                raise RuntimeError("boom")
            return plan_step(scheduler, now)

        # on the class: a slotted scheduler's methods cannot be replaced on the instance (this test's one scheduler)
        monkeypatch.setattr(BatchScheduler, "plan_step", dies_at_the_fourth_step)
        stream = {"prompt": "a b", "max_tokens": 50, "stream": True}
        async with session.post(url + "/v1/completions", json=stream) as response:
            events = await sse_events(response)  # in flight when the engine died: tokens, then the error event
        assert events[-1] == "[DONE]" and "boom" in events[-2]["error"]["message"]
        assert events[-2]["error"]["code"] == 500 and 1 <= len(events) - 2 < 50
        async with session.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 2}) as response:
            assert "engine stopped: RuntimeError: boom" in await expect_error(response, 500, "InternalServerError")
        async with session.get(url + "/health") as response:
            assert response.status == 503

    with caplog.at_level(logging.ERROR, logger="tokenroof.serving.emulate.server"):
        with_emulator(check)
    lines = [r.getMessage() for r in caplog.records if r.name == "tokenroof.serving.emulate.server"]
    assert len(lines) == 1 and "boom" in lines[0] and "\n" not in lines[0]


def test_a_deeply_nested_body_is_a_400() -> None:
    async def check(session: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        deep = b"[" * 100_000 + b"]" * 100_000
        async with session.post(url + "/v1/completions", data=deep) as response:
            assert "nests too deeply" in await expect_error(response, 400, "BadRequestError")
        nested_prompt = b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        async with session.post(url + "/v1/chat/completions", data=nested_prompt) as response:
            await expect_error(response, 400, "BadRequestError")
        huge_int = b'{"prompt": "a", "max_tokens": ' + b"9" * 5000 + b"}"  # past Python's int-parsing limit
        async with session.post(url + "/v1/completions", data=huge_int) as response:
            assert "not valid JSON" in await expect_error(response, 400, "BadRequestError")

    with_emulator(check)


def test_n_other_than_one_is_a_400() -> None:
    async def check(session: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        for n in (2, 0, -1, "1", True, 1.0):
            async with session.post(url + "/v1/completions", json={"prompt": "a", "n": n}) as response:
                assert "n must be 1" in await expect_error(response, 400, "BadRequestError", "n")
        for n in (1, None):
            async with session.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 1, "n": n}) as resp:
                assert resp.status == 200

    with_emulator(check)


def test_an_unknown_model_is_a_404() -> None:
    async def check(session: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "model": "gpt-4"}
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            message = await expect_error(response, 404, "NotFoundError", "model")
        assert message == "The model `gpt-4` does not exist."
        async with session.post(url + "/v1/chat/completions", json={**body, "model": ["m"]}) as response:
            await expect_error(response, 400, "BadRequestError", "model")
        async with session.get(url + "/v1/models") as response:
            served = (await response.json())["data"][0]["id"]
        for model in (served, None):
            async with session.post(url + "/v1/chat/completions", json={**body, "model": model}) as response:
                assert response.status == 200 and (await response.json())["model"] == "served-name"

    with_emulator(check, model_name="served-name")


def test_every_4xx_is_openai_error_json() -> None:
    async def check(session: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        async with session.post(url + "/v1/completions", data=b"x" * 2000) as response:
            assert "Maximum request body size 1000" in await expect_error(response, 413, "RequestEntityTooLargeError")
        async with session.post(url + "/v1/completions", data=b"{oops") as response:
            await expect_error(response, 400, "BadRequestError")
        async with session.get(url + "/v2/nothing") as response:
            assert "no route GET /v2/nothing" in await expect_error(response, 404, "NotFoundError")
        gzip_lie = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        async with session.post(url + "/v1/completions", data=b"not gzip", headers=gzip_lie) as response:
            assert "malformed request body" in await expect_error(response, 400, "BadRequestError")

    with_emulator(check, max_body_bytes=1000)


def test_get_on_a_post_route_is_405_with_allow() -> None:
    async def check(session: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        for path in ("/v1/completions", "/v1/chat/completions"):
            async with session.get(url + path) as response:
                assert response.headers["Allow"] == "POST"
                await expect_error(response, 405, "MethodNotAllowedError")
        async with session.post(url + "/v1/models") as response:
            assert "GET" in response.headers["Allow"]
            await expect_error(response, 405, "MethodNotAllowedError")

    with_emulator(check)


def test_half_sent_requests_are_cut_off() -> None:
    async def check(session: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(url))
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        assert await asyncio.wait_for(reader.read(), 20) == b""  # closed without an answer
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(url))
        writer.write(b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt"')
        answer = await asyncio.wait_for(reader.read(), 20)  # a 408, then the connection closes
        writer.close()
        head, body = answer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 408") and b"Connection: close" in head
        assert json.loads(body)["error"]["type"] == "RequestTimeoutError"

    with_emulator(check, read_timeout_s=0.5)


def test_bad_addresses_are_one_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "step.json"
    path.write_text(json.dumps(TERMS))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [
            (["--port", "99999"], "--port must be between 1 and 65535, got 99999"),
            (["--port", "0"], "--port must be between 1 and 65535, got 0"),
            (["--port", str(port)], f"cannot listen on 127.0.0.1:{port}: Address already in use"),
            (["--host", "256.0.0.1", "--port", str(port)], f"cannot listen on 256.0.0.1:{port}: "),
        ]
        for args, message in cases:
            result = run_cli(["emulate", "--step-model", str(path), *args])
            assert result.exit_code == 2 and message in result.stderr, result.output
            assert "Traceback" not in result.output


def test_a_request_larger_than_the_kv_cache_is_a_400() -> None:
    async def check(session: aiohttp.ClientSession, url: str, _: Emulator) -> None:
        async with session.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 60}) as response:
            message = await expect_error(response, 400, "BadRequestError", "max_tokens")
        assert "of its last block's slots); the cache holds 64" in message

    with_emulator(check, max_model_len=64, kv_cache_tokens=64)  # the CLI's clamp: max_model_len = the cache
