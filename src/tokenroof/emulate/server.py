"""The emulator's HTTP side (aiohttp): OpenAI-compatible endpoints over the realtime engine."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from aiohttp import web

from tokenroof.emulate import protocol as proto
from tokenroof.engine.core import BatchScheduler, Sequence
from tokenroof.engine.realtime import RealtimeEngine
from tokenroof.stepmodel import StepModel

DONE = b"data: [DONE]\n\n"
ENGINE_TASK = web.AppKey("engine_task", asyncio.Task)


@dataclass
class Emulator:
    """A continuous-batching server whose steps take `model`'s step time."""

    model: StepModel
    max_num_seqs: int = 256
    model_name: str = "tokenroof-emulator"
    max_model_len: int = 32768
    kv_cache_tokens: int | None = None
    max_num_batched_tokens: int | None = None
    queues: dict[str, asyncio.Queue[int]] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    engine: RealtimeEngine | None = None
    requests_total: int = 0
    errors_total: int = 0

    # -- engine -------------------------------------------------------------------
    def on_token(self, seq: Sequence, index: int, at: float) -> None:
        queue = self.queues.get(seq.request_id)
        if queue is not None:
            queue.put_nowait(index)

    async def start_engine(self, app: web.Application) -> None:
        scheduler = BatchScheduler(
            self.model, self.max_num_seqs, self.kv_cache_tokens, max_num_batched_tokens=self.max_num_batched_tokens
        )
        self.engine = RealtimeEngine(scheduler, self.on_token)
        app[ENGINE_TASK] = asyncio.create_task(self.engine.run())

    async def stop_engine(self, app: web.Application) -> None:
        app[ENGINE_TASK].cancel()

    # -- handlers ------------------------------------------------------------------
    def error(self, exc: proto.RequestError) -> web.Response:
        self.errors_total += 1
        return web.json_response(exc.body(), status=exc.status)

    async def generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            req = proto.parse_request(await request.read(), chat, self.max_model_len, self.model_name)
        except proto.RequestError as exc:
            return self.error(exc)
        assert self.engine is not None
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{next(self.ids)}"
        queue: asyncio.Queue[int] = asyncio.Queue()
        self.queues[rid] = queue
        self.requests_total += 1
        loop = asyncio.get_running_loop()
        self.engine.submit(Sequence(rid, req.prompt_tokens, req.max_tokens, loop.time()))
        try:
            if req.stream:
                return await self.stream(request, req, rid, queue)
            for _ in range(req.max_tokens):
                await queue.get()
            return web.json_response(proto.full_response(req, rid, req.max_tokens))
        finally:
            self.queues.pop(rid, None)
            self.engine.abort(rid)  # a no-op when it finished; frees the slot when the client left

    async def stream(
        self, request: web.Request, req: proto.GenerationRequest, rid: str, queue: asyncio.Queue[int]
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        middle = proto.chunk(req, rid, 2, False)  # every token but the first and the last is the same event
        try:
            await response.prepare(request)
            for _ in range(req.max_tokens):
                index = await queue.get()
                last = index == req.max_tokens
                event = middle if index > 1 and not last else proto.chunk(req, rid, index, last)
                await response.write(event)
            if req.include_usage:
                await response.write(proto.usage_chunk(req, rid, req.max_tokens))
            await response.write(DONE)
        except (ConnectionResetError, ConnectionError):
            return response  # the client went away; the finally above aborts the sequence
        return response

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self.generate(request, chat=True)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "owned_by": "tokenroof",
                        "max_model_len": self.max_model_len,
                    }
                ],
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text, with vLLM's metric names so scrapers of vLLM work unchanged."""
        engine = self.engine
        assert engine is not None
        sched = engine.scheduler
        label = f'{{model_name="{self.model_name}"}}'
        lines = [
            ("vllm:num_requests_running", "gauge", "Sequences in the running batch", len(sched.running)),
            ("vllm:num_requests_waiting", "gauge", "Requests queued beyond max_num_seqs", len(sched.waiting)),
            ("vllm:generation_tokens_total", "counter", "Tokens generated", engine.tokens_generated),
            ("vllm:prompt_tokens_total", "counter", "Prompt tokens prefilled", engine.prompt_tokens_processed),
            ("tokenroof:steps_total", "counter", "Engine steps completed", sched.steps),
            ("vllm:num_preemptions_total", "counter", "Sequences preempted for KV-cache room", sched.preemptions),
            ("tokenroof:requests_total", "counter", "Requests accepted", self.requests_total),
            ("tokenroof:request_errors_total", "counter", "Requests refused with 4xx", self.errors_total),
            (
                "tokenroof:step_lateness_max_seconds",
                "gauge",
                "Worst delay of a step behind its planned end",
                engine.lateness_s,
            ),
            (
                "tokenroof:step_lateness_seconds_total",
                "counter",
                "Σ delay of step ends behind plan",
                engine.lateness_sum_s,
            ),
            (
                "tokenroof:schedule_restarts_total",
                "counter",
                "Times the engine fell > 50 ms behind its schedule",
                engine.restarts,
            ),
        ]
        text = "".join(f"# HELP {n} {h}\n# TYPE {n} {t}\n{n}{label} {v}\n" for n, t, h, v in lines)
        return web.Response(text=text, content_type="text/plain")

    async def not_found(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "error": {
                    "message": f"no route {request.method} {request.path}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            },
            status=404,
        )

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20, handler_args={"handler_cancellation": True})
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_route("*", "/{tail:.*}", self.not_found)
        app.on_startup.append(self.start_engine)
        app.on_cleanup.append(self.stop_engine)
        return app


async def start(emulator: Emulator, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Start in the running event loop (tests, benchmarks); returns the runner and the base URL."""
    runner = web.AppRunner(emulator.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    assert server is not None
    sock = server.sockets[0]  # type: ignore[attr-defined]
    bound = sock.getsockname()[1]
    return runner, f"http://{host}:{bound}"


def serve(emulator: Emulator, host: str, port: int) -> None:
    """Run until interrupted (the CLI)."""
    web.run_app(emulator.app(), host=host, port=port, access_log=None, print=None)
