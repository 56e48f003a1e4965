"""The emulator's HTTP side (aiohttp): OpenAI-compatible endpoints over the realtime engine.

Every error is OpenAI error JSON (`protocol.error_body`), including aiohttp's own 404, 405 (with Allow) and 413;
a client gets `read_timeout_s` to send a request's headers (aiohttp's keep-alive timer, which also closes idle
keep-alive connections) and as long again for its body (408). If the engine task dies, requests fail with 500
instead of waiting for tokens that never come, and /health answers 503, as vLLM's does for a dead engine.
Only malformed HTTP framing (a bad Content-Length or chunk size) gets aiohttp's plain-text 400, answered before
any application code runs, as uvicorn answers it for vLLM.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model.cost import EnergyCounter, PowerModel
from tokenroof.model.disagg import Disaggregation
from tokenroof.model.prefix import block_keys
from tokenroof.model.speculative import Speculation
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.emulate import protocol as proto
from tokenroof.serving.emulate.checks import SHUTDOWN_TIMEOUT_S, bind_failure, check_step_model, start_site
from tokenroof.serving.engine.core import BatchScheduler, PrefixCounts, PromptOverBudget, Sequence, SpecCounts
from tokenroof.serving.engine.fleet import FleetEngine, Router
from tokenroof.serving.engine.realtime import RealtimeEngine, StepRunner
from tokenroof.serving.engine.split import SplitEngine

LOG = logging.getLogger(__name__)
DONE = b"data: [DONE]\n\n"
DEAD = -1  # put on every waiting request's queue when the engine task ends
ENGINE_TASK = web.AppKey("engine_task", asyncio.Task)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def spec_total(counts: list[SpecCounts | None]) -> SpecCounts | None:
    """The replicas' spec-decode counters summed (None: none speculates)."""
    each = [c for c in counts if c is not None]
    if not each:
        return None
    by_position = tuple(sum(c.accepted_by_position[k] for c in each) for k in range(len(each[0].accepted_by_position)))
    return SpecCounts(
        sum(c.drafts for c in each),
        sum(c.draft_tokens for c in each),
        sum(c.accepted_tokens for c in each),
        by_position,
    )


@dataclass
class Emulator:
    """A continuous-batching server whose steps take `model`'s step time."""

    model: StepModel
    max_num_seqs: int = 256
    model_name: str = "tokenroof-emulator"
    max_model_len: int = 32768
    kv_cache_tokens: int | None = None
    max_num_batched_tokens: int | None = None
    read_timeout_s: float = 30.0
    max_body_bytes: int = 64 * 2**20  # larger bodies get 413
    queues: dict[str, asyncio.Queue[int]] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    engine: RealtimeEngine | SplitEngine | FleetEngine | None = None
    engine_error: str | None = None  # why the engine task ended; requests fail with 500 from then on
    requests_total: int = 0
    errors_total: int = 0
    runner: StepRunner | None = None  # a real engine computing each step (`serve`); None: sleep the model's time
    per_slot_kv: bool = False  # llama-server's per-slot KV streams: a pass per run of consecutive busy slots
    speculation: Speculation | None = None  # speculative decoding: several tokens a step, vLLM's counters on /metrics
    seed: int = 0  # speculation's acceptance draws
    prefix_caching: bool = False  # vLLM's automatic prefix caching: prompts' blocks hashed from their text, shared
    disaggregation: Disaggregation | None = None  # prefill and decode engines of their own, joined by a KV link
    replicas: int = 1  # engines behind a router, each its own scheduler and KV cache (simulate --replicas)
    router: str = "round-robin"
    power: PowerModel | None = None  # boards' power: DCGM's energy counter and power gauge on /metrics, per board
    tp: int = 1  # boards per replica (each draws the replica's power)
    separate_prefill: bool = False  # prompts prefilled in steps of their own, decodes paused (vLLM V0, TGI)
    reserve_output: bool = False  # admitted with its whole output's KV reserved, never preempted (TensorRT-LLM)
    scheduler: BatchScheduler = field(init=False)

    def __post_init__(self) -> None:
        """Refuse bad settings here, before the server binds, as one-line TokenroofErrors."""
        if isinstance(self.max_model_len, bool) or self.max_model_len < 1:
            raise TokenroofError(f"max_model_len must be at least 1, got {self.max_model_len}")
        if not math.isfinite(self.read_timeout_s) or self.read_timeout_s <= 0:
            raise ParameterError(
                f"the read timeout ({{}}) must be positive seconds, got {self.read_timeout_s}", "read_timeout"
            )
        check_step_model(self.model, self.max_num_seqs, self.max_model_len)
        if isinstance(self.replicas, bool) or self.replicas < 1:
            raise ParameterError(f"{{}} must be at least 1, got {self.replicas}", "replicas")
        if self.replicas > 1 and (self.disaggregation is not None or self.runner is not None):
            raise ParameterError(
                "{} runs a fleet of emulated engines: not with a disaggregated server or a real engine", "replicas"
            )
        Router(self.router, self.replicas)  # an unknown router fails here, before the server binds
        if self.power is not None and self.disaggregation is not None:
            raise ParameterError("a disaggregated emulator's pools may be other boards: it meters no {}", "power")
        self.scheduler = self.new_scheduler(self.seed)

    # -- engine -------------------------------------------------------------------
    def on_token(self, seq: Sequence, index: int, at: float) -> None:
        queue = self.queues.get(seq.request_id)
        if queue is not None:
            queue.put_nowait(index)

    async def start_engine(self, app: web.Application) -> None:
        if self.disaggregation is not None:
            self.engine = self.split_engine(self.disaggregation)
        elif self.replicas > 1:
            self.engine = FleetEngine(
                [self.new_scheduler(self.seed + 1 + i) for i in range(self.replicas)],
                self.on_token,
                self.router,
                self.seed,
            )
        else:
            self.engine = RealtimeEngine(self.scheduler, self.on_token, runner=self.runner)
        if self.power is not None:
            now = asyncio.get_running_loop().time()
            for each in self.engines():
                each.meter = EnergyCounter(self.power, self.tp, now)
        task = asyncio.create_task(self.engine.run())
        task.add_done_callback(self.engine_stopped)
        app[ENGINE_TASK] = task

    def engines(self) -> list[RealtimeEngine]:
        """Every realtime engine running: the one, a fleet's replicas, a split's prefill and decode engines."""
        engine = self.engine
        assert engine is not None
        return [engine] if isinstance(engine, RealtimeEngine) else list(engine.engines)

    def power_metrics(self) -> str:
        """DCGM exporter's names (dcgm-exporter's default counters) for every board: its energy since the emulator
        started (mJ, a counter) and the last step's draw (W), labelled gpu="0", "1", … in replica order."""
        meters = [e.meter for e in self.engines() if e.meter is not None]
        if not meters:
            return ""
        now = asyncio.get_running_loop().time()
        energy, power = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_POWER_USAGE"
        text = f"# HELP {energy} Total energy consumption since boot (in mJ).\n# TYPE {energy} counter\n"
        gauge = f"# HELP {power} Power draw (in W).\n# TYPE {power} gauge\n"
        board = 0
        for meter in meters:
            for _ in range(meter.tp):
                text += f'{energy}{{gpu="{board}"}} {meter.joules(now) * 1e3:.3f}\n'
                gauge += f'{power}{{gpu="{board}"}} {meter.watts:.3f}\n'
                board += 1
        return text + gauge

    def new_scheduler(self, seed: int) -> BatchScheduler:
        """A scheduler with this emulator's settings, its own KV cache, and acceptance draws from `seed` (a fleet's
        replica `i` takes seed + 1 + i, as simulate seeds its replicas)."""
        return BatchScheduler(
            self.model,
            self.max_num_seqs,
            self.kv_cache_tokens,
            max_num_batched_tokens=self.max_num_batched_tokens,
            per_slot_kv=self.per_slot_kv,
            speculation=self.speculation,
            seed=seed,
            prefix_caching=self.prefix_caching,
            separate_prefill=self.separate_prefill,
            reserve_output=self.reserve_output,
        )

    def split_engine(self, dis: Disaggregation) -> SplitEngine:
        """Prefill engines (their own token budget, the prefix cache) and decode engines (the batch cap, the KV
        cache) of this emulator's step model."""
        budget = dis.prefill_budget_tokens or self.max_num_batched_tokens
        prefill = [
            BatchScheduler(
                dis.prefill_model or self.model,  # a prefill pool of its own TP has its own step model
                max(self.max_num_seqs, 1024),
                max_num_batched_tokens=budget,
                prefix_caching=self.prefix_caching,
            )
            for _ in range(dis.prefill_replicas)
        ]
        decode = [
            BatchScheduler(self.model, self.max_num_seqs, self.kv_cache_tokens, reserve_output=self.reserve_output)
            for _ in range(dis.decode_replicas)
        ]
        return SplitEngine(prefill, decode, dis.transfer, self.on_token)

    def engine_stopped(self, task: asyncio.Task[None]) -> None:
        """The engine runs forever unless it fails: record why, log one line, wake every waiting request."""
        if task.cancelled():
            return  # shut down with the server
        exc = task.exception()
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # a fleet's or a split's engines: the first
            exc = exc.exceptions[0]
        reason = f": {type(exc).__name__}: {' '.join(str(exc).split())}" if exc else ""
        self.engine_error = f"the emulator's engine stopped{reason}"
        LOG.error("%s; requests now fail with 500", self.engine_error)
        for queue in self.queues.values():
            queue.put_nowait(DEAD)

    async def stop_engine(self, app: web.Application) -> None:
        app[ENGINE_TASK].cancel()

    async def next_token(self, queue: asyncio.Queue[int]) -> int:
        index = await queue.get()
        if index == DEAD:
            raise proto.ApiError(self.engine_error or "the emulator's engine stopped", status=500)
        return index

    # -- errors --------------------------------------------------------------------
    @web.middleware
    async def openai_errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Whatever a handler or aiohttp's router raises goes out as OpenAI error JSON."""
        headers: dict[str, str] = {}
        close = False
        try:
            return await handler(request)
        except proto.ApiError as exc:
            error = exc
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            error = http_error(request, exc)
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        except (HttpProcessingError, web.RequestPayloadError) as exc:  # a body cut short or badly encoded
            request.content.feed_eof()  # read no more of it: aiohttp would log the same error again while lingering
            detail = getattr(exc.__cause__ or exc, "message", None) or str(exc)
            error, close = proto.ApiError(f"malformed request body: {' '.join(str(detail).split())}"), True
        except Exception:
            LOG.exception("error answering %s %s", request.method, request.path)
            error = proto.ApiError("internal error in the emulator", status=500)
        return self.error(error, headers, close)

    def error(self, exc: proto.ApiError, headers: dict[str, str] | None = None, close: bool = False) -> web.Response:
        if exc.status < 500:
            self.errors_total += 1
        response = web.json_response(exc.body(), status=exc.status, headers=headers)
        if close or exc.status in (408, 413):  # the body is unread or unreadable: close rather than wait for it
            response.force_close()
        return response

    # -- handlers ------------------------------------------------------------------
    async def read_body(self, request: web.Request) -> bytes:
        try:
            async with asyncio.timeout(self.read_timeout_s):
                return await request.read()
        except TimeoutError:
            message = f"the request body did not arrive within {self.read_timeout_s:g} s"
            raise proto.ApiError(message, status=408) from None

    async def generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        raw = await self.read_body(request)
        req = proto.parse_request(raw, chat, self.max_model_len, self.model_name, self.prefix_caching)
        if self.engine_error is not None:
            raise proto.ApiError(self.engine_error, status=500)
        assert self.engine is not None
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{next(self.ids)}"
        seq = Sequence(rid, req.prompt_tokens, req.max_tokens, asyncio.get_running_loop().time())
        if self.prefix_caching:
            seq.block_keys = block_keys(req.tokens, self.scheduler.block_size)
        try:
            self.engine.submit(seq)
        except PromptOverBudget as exc:  # a prefill step of its own holds less than the prompt
            raise proto.ApiError(exc.as_flags(), "prompt") from None
        except TokenroofError as exc:  # more than the KV cache holds
            raise proto.ApiError(str(exc), "max_tokens") from None
        queue: asyncio.Queue[int] = asyncio.Queue()
        self.queues[rid] = queue
        self.requests_total += 1
        try:
            if req.stream:
                return await self.stream(request, req, seq, queue)
            while await self.next_token(queue) < req.max_tokens:
                pass
            return web.json_response(proto.full_response(req, rid, req.max_tokens, self.cached(seq)))
        finally:
            self.queues.pop(rid, None)
            self.engine.abort(rid)  # a no-op when it finished; frees the slot when the client left

    def cached(self, seq: Sequence) -> int | None:
        """Prompt tokens the request was served from the prefix cache (None: the emulator does not cache)."""
        if not self.prefix_caching:
            return None
        if isinstance(self.engine, SplitEngine):  # the prefill engine looked it up
            return self.engine.cached.pop(seq.request_id, 0)
        return seq.cached_tokens

    async def stream(
        self, request: web.Request, req: proto.GenerationRequest, seq: Sequence, queue: asyncio.Queue[int]
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            await response.prepare(request)
            await self.stream_tokens(response, req, seq, queue)
            await response.write(DONE)
        except ConnectionError:
            return response  # the client went away; generate's finally aborts the sequence
        return response

    async def stream_tokens(
        self, response: web.StreamResponse, req: proto.GenerationRequest, seq: Sequence, queue: asyncio.Queue[int]
    ) -> None:
        rid = seq.request_id
        middle = proto.chunk(req, rid, 2, False)  # every token but the first and the last is the same event
        made = 0
        try:
            while made < req.max_tokens:  # one event a step: one token, or a speculative step's several
                index = await self.next_token(queue)
                tokens, made, last = index - made, index, index == req.max_tokens
                plain = tokens == 1 and index > 1 and not last
                await response.write(middle if plain else proto.chunk(req, rid, index, last, tokens))
            if req.include_usage:
                await response.write(proto.usage_chunk(req, rid, req.max_tokens, self.cached(seq)))
        except proto.ApiError as exc:  # the engine died mid-stream: the error goes as an event, as vLLM sends it
            await response.write(proto.sse(exc.body()))

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
        if self.engine_error is not None:
            raise proto.ApiError(self.engine_error, status=503)
        return web.Response(text="")

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text, with vLLM's metric names so scrapers of vLLM work unchanged."""
        engine = self.engine
        assert engine is not None
        scheds = engine.schedulers
        label = f'{{model_name="{self.model_name}"}}'
        running, waiting = sum(len(s.running) for s in scheds), sum(len(s.waiting) for s in scheds)
        lines = [
            ("vllm:num_requests_running", "gauge", "Sequences in the running batch", running),
            ("vllm:num_requests_waiting", "gauge", "Requests queued beyond max_num_seqs", waiting),
            ("vllm:generation_tokens_total", "counter", "Tokens generated", engine.tokens_generated),
            ("vllm:prompt_tokens_total", "counter", "Prompt tokens prefilled", engine.prompt_tokens_processed),
            ("tokenroof:steps_total", "counter", "Engine steps completed", sum(s.steps for s in scheds)),
            (
                "vllm:num_preemptions_total",
                "counter",
                "Sequences preempted for KV-cache room",
                sum(s.preemptions for s in scheds),
            ),
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
                "Times the engine fell more than a step (and 50 ms) behind its schedule",
                engine.restarts,
            ),
        ]
        each = [c for c in (s.prefix_counts() for s in engine.cache_schedulers) if c is not None]
        cache = PrefixCounts(sum(c.queries for c in each), sum(c.hits for c in each)) if each else None
        if cache is not None:  # vLLM V1's prefix-cache counters (tokens), under its names
            lines += [
                (
                    "vllm:prefix_cache_queries_total",
                    "counter",
                    "Prompt tokens looked up in the prefix cache",
                    cache.queries,
                ),
                ("vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache", cache.hits),
            ]
        counts = spec_total([s.spec_counts() for s in scheds])
        if counts is not None:  # vLLM V1's spec-decode counters (vllm/v1/spec_decode/metrics.py), under its names
            lines += [
                ("vllm:spec_decode_num_drafts_total", "counter", "Verify steps × sequences", counts.drafts),
                ("vllm:spec_decode_num_draft_tokens_total", "counter", "Drafted tokens", counts.draft_tokens),
                ("vllm:spec_decode_num_accepted_tokens_total", "counter", "Accepted tokens", counts.accepted_tokens),
            ]
        text = "".join(f"# HELP {n} {h}\n# TYPE {n} {t}\n{n}{label} {v}\n" for n, t, h, v in lines)
        if len(scheds) > 1:  # a fleet: each replica's batch and queue under names of their own (vLLM's are the sums,
            # so a scraper that adds up every series of a vLLM name still reads the fleet's)
            for name, what, of in (
                ("tokenroof:replica_requests_running", "Sequences in a replica's running batch", "running"),
                ("tokenroof:replica_requests_waiting", "Requests queued at a replica", "waiting"),
            ):
                text += f"# HELP {name} {what}\n# TYPE {name} gauge\n"
                for k, sched in enumerate(scheds):
                    text += f'{name}{{model_name="{self.model_name}",replica="{k}"}} {len(getattr(sched, of))}\n'
        if counts is not None:
            name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            text += f"# HELP {name} Accepted tokens by drafted position\n# TYPE {name} counter\n"
            for k, value in enumerate(counts.accepted_by_position):
                text += f'{name}{{model_name="{self.model_name}",position="{k}"}} {value}\n'
        text += self.power_metrics()
        return web.Response(text=text, content_type="text/plain")

    def app(self) -> web.Application:
        handler_args = {
            "handler_cancellation": True,
            "keepalive_timeout": self.read_timeout_s,  # also how long a client may take to send its headers
            "lingering_time": min(self.read_timeout_s, 10.0),  # reading an unread body before closing
        }
        app = web.Application(
            client_max_size=self.max_body_bytes, handler_args=handler_args, middlewares=[self.openai_errors]
        )
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.on_startup.append(self.start_engine)
        app.on_cleanup.append(self.stop_engine)
        return app


def http_error(request: web.Request, exc: web.HTTPException) -> proto.ApiError:
    """aiohttp's own 4xx (no route, wrong method, body too large) as an ApiError."""
    if exc.status == 404:
        message = f"no route {request.method} {request.path}"
    elif exc.status == 405:
        message = f"method {request.method} is not allowed on {request.path} (allowed: {exc.headers.get('Allow')})"
    else:
        message = exc.text or exc.reason
    return proto.ApiError(message, status=exc.status)


async def start(emulator: Emulator, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Start in the running event loop (tests, benchmarks); returns the runner and the base URL."""
    runner, bound = await start_site(emulator.app(), host, port)
    return runner, f"http://{host}:{bound}"


def serve(emulator: Emulator, host: str, port: int) -> None:
    """Run until interrupted (the CLI); a failed bind is a one-line TokenroofError naming host:port."""
    try:
        web.run_app(
            emulator.app(), host=host, port=port, access_log=None, print=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S
        )
    except (OSError, OverflowError) as exc:
        raise bind_failure(host, port, exc) from None
