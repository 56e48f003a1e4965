"""Start-up checks for the emulator: the step model it runs and the address it listens on (no HTTP here)."""

from __future__ import annotations

import math
import os
from dataclasses import fields
from typing import Any

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model.stepmodel import StepModel

WHOLE_FIELDS = ("num_experts", "experts_per_token")
# On SIGTERM or Ctrl-C, how long a server waits for requests in flight before closing them. aiohttp's default,
# 60 s, let one client stalled mid-upload hold the ui (or an emulator) open for a minute after it was told to stop
# (measured: 60.9 s; one CI run failed on it). Our handlers answer in milliseconds; a stream cut short is what a
# stopping server does anyway.
SHUTDOWN_TIMEOUT_S = 1.0


def check_term(name: str, value: object) -> None:
    """One numeric StepModel field: a finite real number (not a bool), at least zero."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TokenroofError(f"step model: {name} must be a finite non-negative number, got {value!r}")
    if name in WHOLE_FIELDS and value != int(value):
        raise TokenroofError(f"step model: {name} must be a whole number, got {value!r}")


def check_step_model(model: StepModel, max_batch: int, max_context_tokens: int) -> None:
    """Refuse a step model the engine cannot run: a wrong type, NaN, ∞ or a negative term would kill the engine
    task or make time run backwards; all-zero terms would make steps take no time and starve the server."""
    for f in fields(model):
        value = getattr(model, f.name)
        if f.name == "prompts_folded":
            if not isinstance(value, bool):
                raise TokenroofError(f"step model: prompts_folded must be true or false, got {value!r}")
        elif f.name != "batch_factors":  # checked as the model is made
            check_term(f.name, value)
    if model.overlap > 1:
        raise TokenroofError(f"step model: overlap must lie in [0, 1], got {model.overlap!r}")
    if model.experts_per_token > model.num_experts:
        raise TokenroofError("step model: experts_per_token exceeds num_experts")
    if model.step_s(1, 1.0) <= 0:
        raise TokenroofError("step model: a one-sequence step takes no time; give at least one positive term")
    tokens = float(max_batch * max_context_tokens)
    if not math.isfinite(model.step_s(max_batch, tokens, max_context_tokens, float(max_context_tokens) ** 2)):
        raise TokenroofError("step model: a full batch's step takes an infinite time; the terms are too large")


def check_port(port: int) -> None:
    if isinstance(port, bool) or not 1 <= port <= 65535:
        raise ParameterError(f"{{}} must be between 1 and 65535, got {port}", "port")


def bind_failure(host: str, port: int, exc: OSError | OverflowError) -> TokenroofError:
    """One line for a failed bind: an unknown host, a port in use, a port out of range."""
    if isinstance(exc, OSError) and exc.errno and exc.errno > 0:  # EADDRINUSE, EACCES, EADDRNOTAVAIL, ...
        reason = os.strerror(exc.errno)
    else:  # a resolver error (gaierror: negative errno) or a port bind() refuses
        reason = str(getattr(exc, "strerror", None) or exc)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return TokenroofError(f"cannot listen on {address}: {reason}")


async def start_site(app: Any, host: str, port: int) -> tuple[Any, int]:
    """Start an aiohttp `app` on host:port in the running loop (port 0: any free one): its runner and the port it
    bound, or one line for a failed bind (the emulator and the ui page start the same way)."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except (OSError, OverflowError) as exc:
        await runner.cleanup()
        raise bind_failure(host, port, exc) from None
    server = site._server
    assert server is not None
    return runner, int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
