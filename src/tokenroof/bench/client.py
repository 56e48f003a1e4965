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
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp


@dataclass
class RequestRecord:
    """Everything measured about one request; times are seconds from the run's start."""

    point: str
    index: int
    start_s: float
    ok: bool = False
    error: str = ""
    status: int | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    output_tokens: int = 0
    output_tokens_source: str = "stream"
    prompt_tokens: int | None = None
    retried: bool = False
    chunk_times_s: list[float] = field(default_factory=list)

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
    """Output text carried by one streamed event (completions or chat)."""
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    if "text" in choice:
        return str(choice.get("text") or "")
    delta = choice.get("delta") or {}
    return str(delta.get("content") or delta.get("reasoning_content") or "") if isinstance(delta, dict) else ""


async def send(
    session: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any],
    record: RequestRecord,
    t0: float,
    timeout_s: float,
    headers: dict[str, str] | None = None,
) -> RequestRecord:
    """POST a streaming request and fill `record`; every failure ends as ok=False with its reason.

    A pooled keep-alive connection the server already closed fails before any response
    (llama.cpp's server does this between requests); such a request never reached the
    server and is retried once on a fresh connection (`retried` in the record).
    """
    for attempt in (0, 1):
        try:
            async with asyncio.timeout(timeout_s):
                async with session.post(url, json=payload, headers=headers) as response:
                    record.status = response.status
                    if response.status != 200:
                        body = (await response.text())[:200]
                        record.error = f"HTTP {response.status}: {body}"
                        return record
                    await read_stream(response, record, t0)
                    return record
        except aiohttp.ClientConnectorError as exc:
            record.error = f"connection refused or failed: {exc.os_error or exc}"
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if attempt == 0 and record.status is None:
                record.retried = True
                record.start_s = time.perf_counter() - t0
                continue
            record.error = f"stream broken after {len(record.chunk_times_s)} chunks: {type(exc).__name__}"
        except TimeoutError:
            record.error = f"timeout after {timeout_s:g} s ({len(record.chunk_times_s)} chunks received)"
        except (aiohttp.ClientPayloadError, ConnectionResetError) as exc:
            record.error = f"stream broken after {len(record.chunk_times_s)} chunks: {type(exc).__name__}"
        except aiohttp.ClientError as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        break
    record.end_s = record.end_s or time.perf_counter() - t0
    return record


async def read_stream(response: aiohttp.ClientResponse, record: RequestRecord, t0: float) -> None:
    """Consume `data:` events; a malformed line or a stream without [DONE] fails the request."""
    done = False
    usage_tokens = None
    async for raw in response.content:
        now = time.perf_counter() - t0
        line = raw.strip()
        if not line or line.startswith(b":"):
            continue
        if not line.startswith(b"data:"):
            if line.startswith((b"event:", b"id:", b"retry:")):
                continue
            record.error = f"malformed SSE line: {line[:80]!r}"
            return
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            break
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            record.error = f"malformed SSE data: {data[:80]!r}"
            return
        if not isinstance(event, dict):
            record.error = f"unexpected SSE data: {data[:80]!r}"
            return
        if "error" in event:
            record.error = f"server error in stream: {str(event['error'])[:120]}"
            return
        if chunk_text(event):
            record.chunk_times_s.append(now)
            if record.first_token_s is None:
                record.first_token_s = now
        usage = event.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            usage_tokens = int(usage["completion_tokens"])
            record.prompt_tokens = usage.get("prompt_tokens")
    record.end_s = time.perf_counter() - t0
    if not done:
        record.error = f"stream ended without [DONE] after {len(record.chunk_times_s)} chunks"
        return
    record.output_tokens = usage_tokens if usage_tokens is not None else len(record.chunk_times_s)
    record.output_tokens_source = "usage" if usage_tokens is not None else "stream"
    record.ok = record.output_tokens > 0
    if not record.ok:
        record.error = "no output tokens"
