"""`tokenroof ui`: a local page (plotly.js served from the installed package) over a small HTTP API (`api`).

Bound to 127.0.0.1 by default; there, requests naming another Host are refused (a web page elsewhere cannot reach the
API through DNS rebinding). Needs aiohttp (`tokenroof[http]`) and plotly (`tokenroof[report]`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from tokenroof.errors import TokenroofError

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
MAX_UPLOAD_BYTES = 64 * 2**20

Handler = Callable[[Any], Awaitable[Any]]


def modules() -> Any:
    try:
        from aiohttp import web
    except ImportError:
        raise TokenroofError("the ui needs aiohttp: pip install 'tokenroof[http]'") from None
    from tokenroof.report.figures import plotly_modules

    plotly_modules()
    return web


def json_endpoint(work: Callable[[Any], Any]) -> Handler:
    """POST handler: the JSON body to `work` (in a thread), its answer as JSON; a TokenroofError is a 400."""
    web = modules()

    async def handler(request: Any) -> Any:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return web.json_response({"error": "the request body is not JSON"}, status=400)
        try:
            answer = await asyncio.to_thread(work, body)
        except TokenroofError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        text = answer if isinstance(answer, str) else json.dumps(answer)
        return web.Response(text=text, content_type="application/json")

    return handler


def hostname(host_header: str) -> str:
    """'127.0.0.1:8765' → '127.0.0.1'; '[::1]:8765' → '[::1]'."""
    if host_header.startswith("["):
        return host_header[: host_header.find("]") + 1]
    return host_header.rsplit(":", 1)[0]


def host_guard() -> Any:
    """Middleware refusing requests whose Host header is not a loopback name (DNS rebinding)."""
    web = modules()

    @web.middleware
    async def guard(request: Any, handler: Handler) -> Any:
        if hostname(request.host or "") not in LOOPBACK:
            return web.json_response({"error": f"host {request.host!r} not served here"}, status=403)
        return await handler(request)

    return guard


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

    guards = [host_guard()] if host in LOOPBACK else []  # bound elsewhere on purpose: any Host may be used
    app = web.Application(client_max_size=MAX_UPLOAD_BYTES, middlewares=guards)
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
    from tokenroof.serving.emulate.checks import bind_failure

    web = modules()
    try:
        web.run_app(make_app(host), host=host, port=port, access_log=None, print=None)
    except (OSError, OverflowError) as exc:
        raise bind_failure(host, port, exc) from None
