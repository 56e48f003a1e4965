"""Disaggregated prefill and decode on the wall clock: prefill engines and decode engines joined by a KV link, behind
the one `submit`/`abort` the emulator calls (model/disagg.py has the rules; `simulate_disaggregated` the same
server on a virtual clock).

A request goes to the prefill engine with the fewest outstanding requests as a one-token job; when its prefill step
ends, its KV cache crosses that engine's link (after the transfers queued before it), then the decode engine with
the fewest outstanding requests takes it with its KV in place and streams every token through the emulator's
callback, the first from its admission step.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tokenroof.model.disagg import KvTransfer
from tokenroof.serving.engine.core import BatchScheduler, Sequence
from tokenroof.serving.engine.realtime import EngineGroup, RealtimeEngine, TokenCallback


@dataclass
class SplitEngine(EngineGroup):
    """`prefill` and `decode` schedulers run as realtime engines, a prompt's KV sent over `transfer` between them."""

    prefill: list[BatchScheduler]
    decode: list[BatchScheduler]
    transfer: KvTransfer
    on_token: TokenCallback
    _prefill: list[RealtimeEngine] = field(default_factory=list)
    _decode: list[RealtimeEngine] = field(default_factory=list)
    _link_free: list[float] = field(default_factory=list)
    _waiting: dict[str, Sequence] = field(default_factory=dict)  # requests between their arrival and a decode engine
    _moving: set[asyncio.Task[None]] = field(default_factory=set)
    cached: dict[str, int] = field(default_factory=dict)  # prompt tokens each request's prefill found in the cache

    def __post_init__(self) -> None:
        self._prefill = [RealtimeEngine(s, self._prefilled(i)) for i, s in enumerate(self.prefill)]
        self._decode = [RealtimeEngine(s, self.on_token) for s in self.decode]
        self._link_free = [0.0] * len(self.prefill)

    # -- what the emulator reads -------------------------------------------------------------------------------
    @property
    def engines(self) -> list[RealtimeEngine]:
        return [*self._prefill, *self._decode]

    @property
    def schedulers(self) -> list[BatchScheduler]:
        """The decode engines' schedulers: the running batch, the queue and the tokens the clients see."""
        return list(self.decode)

    @property
    def cache_schedulers(self) -> list[BatchScheduler]:
        """Where prompts are looked up in a prefix cache: the prefill engines."""
        return list(self.prefill)

    @property
    def tokens_generated(self) -> int:
        return sum(e.tokens_generated for e in self._decode)

    @property
    def prompt_tokens_processed(self) -> int:
        return sum(e.prompt_tokens_processed for e in self._prefill)

    # -- requests -----------------------------------------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        """Admission checks (the KV cache holds it) are the decode engine's: made here, on the first, at once."""
        self.decode[0].check(seq)
        engine = min(self._prefill, key=lambda e: e.scheduler.outstanding)
        job = Sequence(seq.request_id, seq.prompt_tokens, 1, seq.arrival_s, block_keys=seq.block_keys)
        job.prefix_group, job.prefix_tokens = seq.prefix_group, seq.prefix_tokens
        self._waiting[seq.request_id] = seq
        engine.submit(job)

    def abort(self, request_id: str) -> None:
        self._waiting.pop(request_id, None)
        self.cached.pop(request_id, None)
        for engine in self.engines:
            engine.abort(request_id)

    def _prefilled(self, index: int) -> TokenCallback:
        def done(job: Sequence, made: int, at: float) -> None:
            seq = self._waiting.get(job.request_id)
            if seq is None or made < 1:
                return
            if self.prefill[index].prefix_caching:  # read (and dropped) by the response
                self.cached[job.request_id] = job.cached_tokens
            task = asyncio.get_running_loop().create_task(self._send(index, seq, at))
            self._moving.add(task)
            task.add_done_callback(self._moving.discard)

        return done

    async def _send(self, index: int, seq: Sequence, ready_s: float) -> None:
        """The KV over the prefill engine's link (queued behind earlier transfers), then to a decode engine."""
        begin = max(ready_s, self._link_free[index])
        self._link_free[index] = begin + self.transfer.time_s(seq.prompt_tokens)
        delay = self._link_free[index] - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)
        if self._waiting.pop(seq.request_id, None) is None:
            return  # the client left meanwhile
        seq.kv_ready = True
        min(self._decode, key=lambda e: e.scheduler.outstanding).submit(seq)
