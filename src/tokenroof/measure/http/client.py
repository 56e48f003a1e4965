"""One streamed request, timed: SSE parsing and the per-request record.

Definitions (written down because the tools disagree):
- TTFT: request sent → first chunk carrying output text.
- TPOT: (last token time − first token time) / (output tokens − 1); the first token
  is excluded (vLLM's TPOT; GenAI-Perf/AIPerf call it "inter token latency";
  GuideLLM's inter_token_latency_ms; GuideLLM's own time_per_output_token_ms
  includes the first token and is not this).
- ITL: gaps between consecutive chunks carrying text (vLLM's ITL).
- E2E: request sent → last byte of the stream (vLLM's E2EL, GuideLLM request_latency).
- Output tokens: the server's `usage.completion_tokens` when it sends usage
  (asked for with stream_options.include_usage), else the number of text chunks
  (`output_tokens_source` says which).

Every request ends as a record: ok, or failed with one of ERROR_TYPES and a one-line
reason, whatever the server sends (bodies that are not the OpenAI format included).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from aiohttp.http_exceptions import LineTooLong

ERROR_TYPES = ("malformed_body", "protocol", "timeout", "server_error", "client_error", "connection", "cancelled")
# llama.cpp's server closes idle keep-alive connections after 5 s; reusing one it just closed fails the request
KEEPALIVE_S = 2.0
REASON_CHARS = 200


class BodyError(Exception):
    """The server answered with something the OpenAI streaming API never sends (error type malformed_body)."""


# the run's redaction (the API key, URL secrets: measure/http/redact.py), applied to every text before it is cut:
# a secret a cut splits would escape the mask. bench sets it for its run; its tasks inherit it.
REDACTION: ContextVar[Callable[[str], str]] = ContextVar("redaction", default=lambda text: text)


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """Redacted (REDACTION), whitespace (newlines included) collapsed, cut to `limit` characters."""
    text = " ".join(REDACTION.get()(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(data: str | bytes, limit: int = 80) -> str:
    """`data` quoted for an error (bytes as Python writes them), redacted before it is cut: a secret across the cut
    would escape the mask."""
    if isinstance(data, bytes):
        text = REDACTION.get()(data.decode("utf-8", "backslashreplace"))
        return repr(text.encode("utf-8", "backslashreplace")[:limit])
    return repr(REDACTION.get()(data)[:limit])


@dataclass
class RequestRecord:
    """Everything measured about one request; times are seconds from the run's start."""

    point: str
    index: int
    start_s: float
    ok: bool = False
    error: str = ""
    error_type: str | None = None  # one of ERROR_TYPES when not ok
    status: int | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    output_tokens: int = 0
    output_tokens_source: str = "stream"
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens the server served from its cache (where it says)
    prefix_group: int | None = None  # which of bench's shared prefixes the prompt starts with (--prefix-len)
    retries: int = 0  # resent on a fresh connection after a pooled one failed before any response byte
    chunk_times_s: list[float] = field(default_factory=list)

    def fail(self, error_type: str, reason: str, now_s: float | None = None) -> None:
        """Mark the request failed with one of ERROR_TYPES and a one-line reason (the first failure wins)."""
        self.ok = False
        if self.error_type is None:
            self.error_type = error_type
            self.error = one_line(reason) or error_type
        if self.end_s is None and now_s is not None:
            self.end_s = now_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.start_s

    @property
    def tpot_s(self) -> float | None:
        if len(self.chunk_times_s) < 2 or self.output_tokens < 2:
            return None
        return (self.chunk_times_s[-1] - self.chunk_times_s[0]) / (self.output_tokens - 1)

    @property
    def itl_s(self) -> list[float]:
        times = self.chunk_times_s
        return [b - a for a, b in itertools.pairwise(times)]

    def to_json(self) -> dict[str, Any]:
        """The JSONL record: summary numbers, not every chunk time."""
        itl = sorted(self.itl_s)
        record = {k: v for k, v in asdict(self).items() if k != "chunk_times_s"}
        record.update(
            {
                "ttft_ms": None if self.ttft_s is None else self.ttft_s * 1e3,
                "tpot_ms": None if self.tpot_s is None else self.tpot_s * 1e3,
                "e2e_ms": None if self.end_s is None else (self.end_s - self.start_s) * 1e3,
                "itl_ms_p50": itl[len(itl) // 2] * 1e3 if itl else None,
                "itl_ms_max": itl[-1] * 1e3 if itl else None,
                "chunks": len(self.chunk_times_s),
            }
        )
        return record


def chunk_text(event: dict[str, Any]) -> str:
    """Output text carried by one streamed event (completions or chat); BodyError where `choices` is malformed."""
    choices = event.get("choices")
    if choices is None:
        return ""
    if not isinstance(choices, list):
        raise BodyError(f"'choices' is {type(choices).__name__}, not a list: {one_line(str(choices), 80)}")
    if not choices:
        return ""
    choice = choices[0]
    if not isinstance(choice, dict):
        raise BodyError(f"choices[0] is {type(choice).__name__}, not an object")
    if "text" in choice:
        return str(choice.get("text") or "")
    delta = choice.get("delta") or {}
    if not isinstance(delta, dict):
        raise BodyError(f"choices[0].delta is {type(delta).__name__}, not an object")
    return str(delta.get("content") or delta.get("reasoning_content") or "")


def token_count(usage: dict[str, Any], name: str) -> int | None:
    """usage[name] as a count (None when absent); BodyError when it is not a whole number ≥ 0."""
    value = usage.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != int(value):
        raise BodyError(f"usage.{name} is {one_line(json.dumps(value), 40)}, not a token count")
    return int(value)


def cached_count(event: dict[str, Any]) -> int | None:
    """Prompt tokens served from the server's cache, where it says: OpenAI's and vLLM's
    usage.prompt_tokens_details.cached_tokens, llama.cpp's timings.cache_n (None: not said)."""
    usage, timings = event.get("usage"), event.get("timings")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    for source, name in ((details, "cached_tokens"), (timings, "cache_n")):
        if isinstance(source, dict) and source.get(name) is not None:
            return token_count(source, name)
    return None


def usage_counts(event: dict[str, Any]) -> tuple[int, int | None] | None:
    """(completion tokens, prompt tokens) from an event's usage, or None when it carries no completion count."""
    usage = event.get("usage")
    if usage is None:
        return None
    if not isinstance(usage, dict):
        raise BodyError(f"'usage' is {type(usage).__name__}, not an object")
    completion = token_count(usage, "completion_tokens")
    return None if completion is None else (completion, token_count(usage, "prompt_tokens"))


def error_reason(body: bytes) -> str:
    """The message in an error body: OpenAI's error.message, a plain `error`/`message`/`detail`, else the text."""
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return one_line(text) or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return one_line(str(error["message"]))
        for key in ("error", "message", "detail"):
            if data.get(key):
                return one_line(str(data[key]))
    return one_line(text)


def http_error_type(status: int) -> str:
    return "server_error" if status >= 500 else "client_error" if status >= 400 else "protocol"


def classify(exc: BaseException, record: RequestRecord, timeout_s: float) -> tuple[str, str]:
    """(error type, one-line reason) for an exception that ended a request."""
    chunks = len(record.chunk_times_s)
    if isinstance(exc, BodyError):
        return "malformed_body", str(exc)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connection", f"connection refused or failed: {exc.os_error or exc}"
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connection", f"connecting timed out: {exc}"
    if isinstance(exc, TimeoutError):
        return "timeout", f"timeout after {timeout_s:g} s ({chunks} chunks received)"
    if isinstance(exc, LineTooLong):
        return "malformed_body", f"SSE line too long: {exc}"
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientOSError | aiohttp.ServerDisconnectedError | OSError):
        if record.status is None:
            return "connection", f"connection closed before any response: {type(exc).__name__}"
        return "protocol", f"stream broken after {chunks} chunks: {type(exc).__name__}"
    return "protocol", f"{type(exc).__name__}: {exc}"


def retryable(exc: BaseException, record: RequestRecord) -> bool:
    """A pooled keep-alive connection the server had closed: it failed before any response byte, once."""
    stale = isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)
    connect = isinstance(exc, aiohttp.ClientConnectorError)  # a new connection that failed: nothing to retry
    return stale and not connect and record.status is None and not record.chunk_times_s and record.retries == 0


@dataclass(frozen=True)
class Client:
    """Where and how requests go: a keep-alive pool, and a pool of fresh connections for retries."""

    session: aiohttp.ClientSession
    fresh: aiohttp.ClientSession
    url: str
    timeout_s: float
    t0: float
    headers: dict[str, str] = field(default_factory=dict)

    def now(self) -> float:
        return time.perf_counter() - self.t0


@contextlib.asynccontextmanager
async def open_client(url: str, timeout_s: float, t0: float, headers: dict[str, str]) -> AsyncIterator[Client]:
    """Idle connections kept KEEPALIVE_S (under llama.cpp's 5 s); retries on connections closed after use."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    pooled = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
    once = aiohttp.TCPConnector(limit=0, force_close=True)
    async with (
        aiohttp.ClientSession(connector=pooled, timeout=timeout) as session,
        aiohttp.ClientSession(connector=once, timeout=timeout) as fresh,
    ):
        yield Client(session, fresh, url, timeout_s, t0, headers)


async def send(client: Client, payload: dict[str, Any], record: RequestRecord) -> RequestRecord:
    """POST a streaming request and fill `record`; never raises but CancelledError, every failure is recorded.

    A pooled keep-alive connection the server already closed fails before any response
    (llama.cpp's server does this between requests); such a request never reached the
    server and is resent once on a fresh connection (`retries` in the record).
    """
    while True:
        session = client.session if record.retries == 0 else client.fresh
        try:
            async with asyncio.timeout(client.timeout_s):
                await post(session, client, payload, record)
        except Exception as exc:  # anything a server can make happen ends as a classified record
            if retryable(exc, record):
                record.retries += 1
                record.start_s = client.now()
                continue
            record.fail(*classify(exc, record, client.timeout_s))
        break
    if record.end_s is None:
        record.end_s = client.now()
    return record


async def post(session: aiohttp.ClientSession, client: Client, payload: dict[str, Any], record: RequestRecord) -> None:
    async with session.post(client.url, json=payload, headers=client.headers) as response:
        record.status = response.status
        if response.status != 200:
            body = await response.content.read(64 * 1024)
            record.fail(http_error_type(response.status), f"HTTP {response.status}: {error_reason(body)}")
            return
        await read_stream(response, record, client.t0)


def sse_data(line: bytes) -> bytes | None:
    """The payload of a `data:` line; None for blank, comment and other SSE field lines; BodyError otherwise."""
    if not line or line.startswith(b":"):
        return None
    if line.startswith(b"data:"):
        return line[5:].strip()
    if line.startswith((b"event:", b"id:", b"retry:")):
        return None
    raise BodyError(f"malformed SSE line: {shown(line)}")


def parse_event(data: bytes) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise BodyError(f"malformed SSE data: {shown(data)}") from None
    if not isinstance(event, dict):
        raise BodyError(f"unexpected SSE data: {shown(data)}")
    return event


async def read_stream(response: aiohttp.ClientResponse, record: RequestRecord, t0: float) -> None:
    """Consume `data:` events; a malformed line (BodyError) or a stream without [DONE] fails the request."""
    usage: tuple[int, int | None] | None = None
    cached: int | None = None
    async for raw in response.content:
        now = time.perf_counter() - t0
        data = sse_data(raw.strip())
        if data is None:
            continue
        if data == b"[DONE]":
            record.end_s = time.perf_counter() - t0
            record.cached_tokens = cached
            finish(record, usage)
            return
        event = parse_event(data)
        if event.get("error"):
            error = event["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            record.fail("server_error", f"server error in stream: {message}", now)
            return
        if chunk_text(event):
            record.chunk_times_s.append(now)
            if record.first_token_s is None:
                record.first_token_s = now
        usage = usage_counts(event) or usage
        cached = cached_count(event) if cached is None else cached
    record.fail("protocol", f"stream ended without [DONE] after {len(record.chunk_times_s)} chunks")


def finish(record: RequestRecord, usage: tuple[int, int | None] | None) -> None:
    """A stream that ended with [DONE]: output tokens from usage (else the text chunks); none is a failure."""
    if usage is not None:
        record.output_tokens, record.prompt_tokens = usage
        record.output_tokens_source = "usage"
    else:
        record.output_tokens = len(record.chunk_times_s)
    record.ok = record.output_tokens > 0
    if not record.ok:
        record.fail("protocol", "stream ended with [DONE] but no output tokens")
