"""OpenAI request parsing and response bodies for the emulator (no HTTP here).

Tokens: the emulator has no tokenizer; a prompt string counts one token per
whitespace-separated word (a list of token ids counts its length), and every
generated token is the text " tok". Synthetic prompts of N words are N tokens.

Validation is as strict as vLLM's where the emulator reads a field (types, ranges, `n`, the model name) and
loose where vLLM is loose (unknown fields are ignored).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

CHAT_TEMPLATE_TOKENS = 4  # role markers per message, roughly what chat templates add
DEFAULT_MAX_TOKENS = 16  # vLLM's and OpenAI's default for /v1/completions
ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}
# sampling fields the emulator ignores but checks as vLLM's SamplingParams does: (lowest, highest, lowest allowed)
SAMPLING_RANGES = {
    "temperature": (0.0, math.inf, True),
    "top_p": (0.0, 1.0, False),
    "presence_penalty": (-2.0, 2.0, True),
    "frequency_penalty": (-2.0, 2.0, True),
}


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    """An error as newer vLLM sends it, OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

    `type` is vLLM's exception-style name ("BadRequestError", "NotFoundError", ...) and `code` the HTTP status.
    Older vLLM sent the flat {"object": "error", "message": ..., "type": ..., "param": ..., "code": ...}; the
    nested form is the one the openai client reads (body["error"]["message"]).
    """
    kind = ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


class ApiError(Exception):
    """An error answered with an OpenAI error body: a 4xx for the client's mistakes, a 5xx for the emulator's."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status

    def body(self) -> dict[str, Any]:
        return error_body(str(self), self.status, self.param)


@dataclass(frozen=True)
class GenerationRequest:
    chat: bool
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    model: str
    tokens: tuple[Any, ...] = ()  # the prompt's tokens as the emulator counts them (kept for prefix caching)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def count_prompt(prompt: Any) -> int:
    if isinstance(prompt, str):
        return len(prompt.split())
    if isinstance(prompt, list) and prompt and all(is_int(t) and t >= 0 for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return len(prompt[0].split())
    raise ApiError("prompt must be a string, a list of token ids, or a list with one string", "prompt")


def content_words(content: Any, where: str) -> int:
    """Words in a message's content: a string, null, or a list of parts whose text parts carry strings."""
    if content is None or isinstance(content, str):
        return len((content or "").split())
    if not isinstance(content, list):
        raise ApiError(f"{where}.content must be a string or a list of parts", "messages")
    words = 0
    for j, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type", "text"), str):
            raise ApiError(f"{where}.content[{j}] must be an object with a type", "messages")
        if part.get("type", "text") == "text":
            if not isinstance(part.get("text"), str):
                raise ApiError(f"{where}.content[{j}].text must be a string", "messages")
            words += len(part["text"].split())
    return words


def count_messages(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list", "messages")
    total = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(f"messages[{i}] must be an object with a string role", "messages")
        total += content_words(message.get("content"), f"messages[{i}]") + CHAT_TEMPLATE_TOKENS
    return total


def prompt_items(body: dict[str, Any], chat: bool) -> tuple[Any, ...]:
    """The prompt's tokens as `count_prompt`/`count_messages` count them (a word, a token id, a chat template's
    role markers), for prefix caching's block hashes. Called on a body those already checked."""
    if not chat:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        return tuple(prompt.split()) if isinstance(prompt, str) else tuple(prompt or ())
    items: list[Any] = []
    for message in body["messages"]:
        items += [("<|role|>", message["role"])] * CHAT_TEMPLATE_TOKENS
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if part.get("type", "text") == "text":
                    items += part["text"].split()
        else:
            items += (content or "").split()
    return tuple(items)


def load_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"null")
    except RecursionError:
        raise ApiError("request body nests too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, and ints past Python's digit limit
        raise ApiError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError("request body must be a JSON object")
    return body


def check_model(body: dict[str, Any], model_name: str) -> str:
    """The model asked for: absent or empty means the served one; any other name is vLLM's 404."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(f"model must be a string, got {model!r}", "model")
    if model and model != model_name:
        raise ApiError(f"The model `{model}` does not exist.", "model", status=404)
    return model_name


def check_sampling(body: dict[str, Any]) -> None:
    """`n` (one choice only) and the sampling fields the emulator ignores but vLLM range-checks."""
    n = body.get("n")
    if n is not None and (not is_int(n) or n != 1):
        raise ApiError(f"n must be 1: the emulator makes one choice per request, got {n!r}", "n")
    for key, (low, high, low_allowed) in SAMPLING_RANGES.items():
        value = body.get(key)
        if value is None:
            continue
        if not is_number(value) or value > high or value < low or (value == low and not low_allowed):
            bound = "[" if low_allowed else "("
            raise ApiError(f"{key} must be a number in {bound}{low:g}, {high:g}], got {value!r}", key)
    if not isinstance(body.get("ignore_eos", False), bool):
        raise ApiError("ignore_eos must be true or false", "ignore_eos")


def output_tokens(body: dict[str, Any], prompt_tokens: int, max_model_len: int) -> int:
    """max_completion_tokens, else max_tokens, else 16; checked against min_tokens and the context length."""
    max_tokens = body.get("max_completion_tokens")
    max_tokens = body.get("max_tokens") if max_tokens is None else max_tokens
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if not is_int(max_tokens) or max_tokens < 1:
        raise ApiError(f"max_tokens must be a positive integer, got {max_tokens!r}", "max_tokens")
    min_tokens = body.get("min_tokens")
    if min_tokens is not None and (not is_int(min_tokens) or min_tokens < 0 or min_tokens > max_tokens):
        raise ApiError(f"min_tokens must be an integer between 0 and max_tokens, got {min_tokens!r}", "min_tokens")
    if prompt_tokens + max_tokens > max_model_len:
        raise ApiError(
            f"this model's maximum context length is {max_model_len} tokens; the request asks for "
            f"{prompt_tokens} prompt + {max_tokens} output tokens",
            "max_tokens",
        )
    return max_tokens


def stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, include_usage)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError("stream must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError("stream_options must be an object", "stream_options")
    include_usage = (options or {}).get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise ApiError("stream_options.include_usage must be true or false", "stream_options")
    return bool(stream), bool(include_usage)


def parse_request(
    raw: bytes, chat: bool, max_model_len: int, model_name: str, keep_tokens: bool = False
) -> GenerationRequest:
    """Validate a /v1/completions or /v1/chat/completions body; raises ApiError (400, or 404 for the model).
    `keep_tokens`: keep the prompt's tokens (prefix caching hashes them)."""
    body = load_body(raw)
    model = check_model(body, model_name)
    prompt_tokens = count_messages(body.get("messages")) if chat else count_prompt(body.get("prompt"))
    check_sampling(body)
    stream, include_usage = stream_flags(body)
    max_tokens = output_tokens(body, prompt_tokens, max_model_len)
    tokens = prompt_items(body, chat) if keep_tokens else ()
    return GenerationRequest(chat, prompt_tokens, max_tokens, stream, include_usage, model, tokens)


def sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def usage(req: GenerationRequest, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    """OpenAI's usage; with prefix caching, vLLM's `prompt_tokens_details.cached_tokens` (prompt tokens served from
    the cache: vLLM sends it with --enable-prompt-tokens-details)."""
    counts: dict[str, Any] = {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": req.prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        counts["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return counts


def chunk(req: GenerationRequest, rid: str, index: int, finish: bool, tokens: int = 1) -> bytes:
    """One SSE event carrying `tokens` tokens, the last of them token number `index` (1-based)."""
    reason = "length" if finish else None
    text = " tok" * tokens
    if req.chat:
        delta: dict[str, Any] = {"content": text}
        if index == tokens:  # the first chunk
            delta["role"] = "assistant"
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        obj = "text_completion"
    return sse({"id": rid, "object": obj, "created": int(time.time()), "model": req.model, "choices": [choice]})


def usage_chunk(req: GenerationRequest, rid: str, completion_tokens: int, cached_tokens: int | None = None) -> bytes:
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    event = {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": req.model,
        "choices": [],
        "usage": usage(req, completion_tokens, cached_tokens),
    }
    return sse(event)


def full_response(
    req: GenerationRequest, rid: str, completion_tokens: int, cached_tokens: int | None = None
) -> dict[str, Any]:
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
        "usage": usage(req, completion_tokens, cached_tokens),
    }
