"""`tokenroof ui`: a local page (plotly.js served from the installed package) over a small HTTP API (`api`).

A local service any web page in the same browser can try to reach, so it answers only its own page:
- bound to 127.0.0.1 by default; there, requests naming another Host are refused (DNS rebinding);
- a request whose `Origin` is not the page's own (another site, `null`) or that a browser marks cross-site
  (`Sec-Fetch-Site`) is refused before its body is read, 403;
- POST bodies must be `application/json` (415 otherwise): a cross-site page can send `text/plain` without a
  preflight, never JSON;
- a body above MAX_UPLOAD_BYTES is refused (413), and at most MAX_WORK requests are worked on at once; past that
  the answer is 429 with Retry-After, before the body is read (flow control keeps unread bodies in the socket);
- every error, its own or aiohttp's, is one line in OpenAI's error shape ({"error": {"message", "type", "param",
  "code"}}), a 4xx for the caller's mistakes.
Needs aiohttp (`tokenroof[http]`) and plotly (`tokenroof[report]`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from tokenroof.errors import TokenroofError

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
MAX_UPLOAD_BYTES = 64 * 2**20
MAX_WORK = 2  # requests worked on at once (each may hold an upload and a fit); more get 429
ERROR_TYPES = {403: "PermissionDeniedError", 413: "RequestEntityTooLargeError", 415: "UnsupportedMediaTypeError"}
ERROR_TYPES |= {429: "RateLimitError", 404: "NotFoundError", 405: "MethodNotAllowedError"}

Handler = Callable[[Any], Awaitable[Any]]


def modules() -> Any:
    try:
        from aiohttp import web
    except ImportError:
        raise TokenroofError("the ui needs aiohttp: pip install 'tokenroof[http]'") from None
    from tokenroof.report.figures import plotly_modules

    plotly_modules()
    return web


def error(message: str, status: int = 400, headers: dict[str, str] | None = None) -> Any:
    """One line in OpenAI's error shape, as the emulator and vLLM answer."""
    kind = ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return modules().json_response(body, status=status, headers=headers)


def json_endpoint(work: Callable[[bytes], Any]) -> Handler:
    """POST handler: the raw JSON body to `work` (in a thread: parsing a large upload is work too), its answer as
    JSON; a TokenroofError is a 400. `work` validates the body itself (api.parse)."""

    async def handler(request: Any) -> Any:
        raw = await request.read()
        try:
            answer = await asyncio.to_thread(work, raw)
        except TokenroofError as exc:
            return error(exc.as_flags())
        text = answer if isinstance(answer, str) else json.dumps(answer)
        return modules().Response(text=text, content_type="application/json")

    return handler


def hostname(host_header: str) -> str:
    """'127.0.0.1:8765' → '127.0.0.1'; '[::1]:8765' → '[::1]'."""
    if host_header.startswith("["):
        return host_header[: host_header.find("]") + 1]
    return host_header.rsplit(":", 1)[0]


def refusal(request: Any, loopback: bool) -> tuple[int, str] | None:
    """Why a request is not served (status, one line), before its body is read; None: serve it."""
    if loopback and hostname(request.host or "") not in LOOPBACK:
        return 403, f"host {request.host!r} not served here"
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        return 403, f"cross-origin request from {origin[:100]!r} refused: the ui answers its own page only"
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return 403, "cross-site request refused: the ui answers its own page only"
    if request.method == "POST":
        if request.content_type != "application/json":
            return 415, f"the body must be application/json, got {request.content_type[:100]!r}"
        if (request.content_length or 0) > MAX_UPLOAD_BYTES:
            return 413, f"the body is {request.content_length} bytes; at most {MAX_UPLOAD_BYTES} are read"
    return None


def guard(loopback: bool) -> Any:
    """Middleware: the refusals above, the bound on concurrent work, and every error as one JSON line."""
    web = modules()
    slots = asyncio.Semaphore(MAX_WORK)

    @web.middleware
    async def middleware(request: Any, handler: Handler) -> Any:
        refused = refusal(request, loopback)
        if refused:
            return error(refused[1], refused[0])
        if request.method != "POST":
            return await serve_errors(request, handler)
        if slots.locked():
            return error(f"busy: {MAX_WORK} requests are being worked on; try again", 429, {"Retry-After": "1"})
        async with slots:
            return await serve_errors(request, handler)

    return middleware


async def serve_errors(request: Any, handler: Handler) -> Any:
    """aiohttp's own errors (404, 405, 413 past the size cap) as one JSON line too."""
    web = modules()
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if exc.status == 413:
            return error(f"the body is larger than {MAX_UPLOAD_BYTES} bytes", 413)
        return error(f"{exc.reason}: {request.method} {request.path[:100]}", exc.status)


def make_app(host: str = "127.0.0.1") -> Any:
    """The page, plotly.js and the API on one aiohttp application."""
    from plotly.offline import get_plotlyjs

    from tokenroof.ui import api
    from tokenroof.ui.page import PAGE

    web = modules()
    plotly_js = get_plotlyjs()

    async def page(_: Any) -> Any:
        return web.Response(text=PAGE, content_type="text/html")

    async def script(_: Any) -> Any:
        return web.Response(text=plotly_js, content_type="application/javascript")

    async def presets(_: Any) -> Any:
        return web.json_response(api.presets())

    # bound elsewhere on purpose: any Host may be used, the other refusals hold
    app = web.Application(client_max_size=MAX_UPLOAD_BYTES, middlewares=[guard(host in LOOPBACK)])
    app.router.add_get("/", page)
    app.router.add_get("/plotly.min.js", script)
    app.router.add_get("/api/presets", presets)
    for name in ("roofline", "predict", "advise", "figure"):
        app.router.add_post(f"/api/{name}", json_endpoint(getattr(api, name)))
    return app


async def start(host: str = "127.0.0.1", port: int = 0) -> tuple[Any, str]:
    """Start in the running event loop (tests); returns the runner and the page's URL."""
    from tokenroof.serving.emulate.checks import start_site

    runner, bound = await start_site(make_app(host), host, port)
    return runner, f"http://{host}:{bound}/"


def serve(host: str, port: int) -> None:
    """Run until interrupted (the CLI)."""
    from tokenroof.serving.emulate.checks import SHUTDOWN_TIMEOUT_S, bind_failure

    web = modules()
    try:
        web.run_app(
            make_app(host), host=host, port=port, access_log=None, print=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S
        )
    except (OSError, OverflowError) as exc:
        raise bind_failure(host, port, exc) from None
