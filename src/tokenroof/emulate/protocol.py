"""OpenAI request parsing and response bodies for the emulator (no HTTP here).

Tokens: the emulator has no tokenizer; a prompt string counts one token per
whitespace-separated word (a list of token ids counts its length), and every
generated token is the text " tok". Synthetic prompts of N words are N tokens.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

CHAT_TEMPLATE_TOKENS = 4  # role markers per message, roughly what chat templates add


class RequestError(Exception):
    """A malformed request: becomes a 4xx with an OpenAI-style error body."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": "invalid_request_error", "param": self.param, "code": None}}


@dataclass(frozen=True)
class GenerationRequest:
    chat: bool
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    model: str


def count_prompt(prompt: Any) -> int:
    if isinstance(prompt, str):
        return len(prompt.split())
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return len(prompt[0].split())
    raise RequestError("prompt must be a string, a list of token ids, or a list with one string", "prompt")


def count_messages(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    total = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise RequestError(f"messages[{i}] must be an object with a role", "messages")
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content must be a string or a list of parts", "messages")
        total += len(content.split()) + CHAT_TEMPLATE_TOKENS
    return total


def parse_request(raw: bytes, chat: bool, max_model_len: int, default_model: str) -> GenerationRequest:
    """Validate a /v1/completions or /v1/chat/completions body."""
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    prompt_tokens = count_messages(body.get("messages")) if chat else count_prompt(body.get("prompt"))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 16))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError(f"max_tokens must be a positive integer, got {max_tokens!r}", "max_tokens")
    min_tokens = body.get("min_tokens", 0)
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0 or min_tokens > max_tokens:
        raise RequestError(f"min_tokens must be an integer between 0 and max_tokens, got {min_tokens!r}", "min_tokens")
    if prompt_tokens + max_tokens > max_model_len:
        raise RequestError(
            f"this model's maximum context length is {max_model_len} tokens; the request asks for "
            f"{prompt_tokens} prompt + {max_tokens} output tokens",
            "max_tokens",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream must be true or false", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", "stream_options")
    return GenerationRequest(
        chat,
        prompt_tokens,
        max_tokens,
        stream,
        bool(options.get("include_usage")),
        str(body.get("model") or default_model),
    )


def usage(req: GenerationRequest, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": req.prompt_tokens + completion_tokens,
    }


def chunk(req: GenerationRequest, rid: str, index: int, finish: bool) -> bytes:
    """One SSE event carrying token number `index` (1-based)."""
    reason = "length" if finish else None
    if req.chat:
        delta: dict[str, Any] = {"content": " tok"}
        if index == 1:
            delta["role"] = "assistant"
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": " tok", "logprobs": None, "finish_reason": reason}
        obj = "text_completion"
    event = {"id": rid, "object": obj, "created": int(time.time()), "model": req.model, "choices": [choice]}
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def usage_chunk(req: GenerationRequest, rid: str, completion_tokens: int) -> bytes:
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    event = {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": req.model,
        "choices": [],
        "usage": usage(req, completion_tokens),
    }
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def full_response(req: GenerationRequest, rid: str, completion_tokens: int) -> dict[str, Any]:
    text = " tok" * completion_tokens
    if req.chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": "length",
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": req.model,
        "choices": [choice],
        "usage": usage(req, completion_tokens),
    }
