"""Replicas behind a router on the wall clock: several engines, each with its own scheduler and KV cache, behind the
one `submit`/`abort` the emulator calls (`simulate --replicas --router` is the same fleet on a virtual clock).

The router sends each request round-robin, to the engine with the fewest outstanding requests (queued, prefilling
or running), or to one at random, request by request, with the rules and the draws of `simulate`'s router. The
engines share one event loop: a fleet of many replicas, or fast steps, can make the loop the bottleneck; the
emulator's lateness gauges say so. /metrics sums the engines' gauges, so bench's batch against a fleet is the
fleet's running batch, N times the per-replica `running_batch` simulate reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tokenroof.errors import ParameterError
from tokenroof.serving.engine.core import BatchScheduler, Sequence
from tokenroof.serving.engine.realtime import RealtimeEngine, TokenCallback

ROUTERS = ("round-robin", "least-outstanding", "random")  # simulate's routers too


@dataclass
class FleetEngine:
    """`replicas` schedulers run as realtime engines behind `router`."""

    replicas: list[BatchScheduler]
    on_token: TokenCallback
    router: str = "round-robin"
    seed: int = 0
    _engines: list[RealtimeEngine] = field(default_factory=list)
    _turn: int = 0
    _where: dict[str, int] = field(default_factory=dict)  # request → its replica, until the emulator lets it go
    _rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise ParameterError(f"unknown {{}} '{self.router}'; known: {', '.join(ROUTERS)}", "router")
        self._engines = [RealtimeEngine(s, self.on_token) for s in self.replicas]
        self._rng = np.random.default_rng([self.seed, 1])  # as simulate draws a random router's choices

    # -- what the emulator reads -------------------------------------------------------------------------------
    @property
    def engines(self) -> list[RealtimeEngine]:
        return list(self._engines)

    @property
    def schedulers(self) -> list[BatchScheduler]:
        return list(self.replicas)

    @property
    def cache_schedulers(self) -> list[BatchScheduler]:
        return list(self.replicas)

    @property
    def tokens_generated(self) -> int:
        return sum(e.tokens_generated for e in self._engines)

    @property
    def prompt_tokens_processed(self) -> int:
        return sum(e.prompt_tokens_processed for e in self._engines)

    @property
    def lateness_s(self) -> float:
        return max(e.lateness_s for e in self._engines)

    @property
    def lateness_sum_s(self) -> float:
        return sum(e.lateness_sum_s for e in self._engines)

    @property
    def restarts(self) -> int:
        return sum(e.restarts for e in self._engines)

    # -- requests -----------------------------------------------------------------------------------------------
    def route(self) -> int:
        """The replica the next request goes to."""
        if self.router == "round-robin":
            index, self._turn = self._turn, (self._turn + 1) % len(self.replicas)
            return index
        if self.router == "random":
            return int(self._rng.integers(len(self.replicas)))
        return min(range(len(self.replicas)), key=lambda i: self.replicas[i].outstanding)

    def submit(self, seq: Sequence) -> None:
        self.replicas[0].check(seq)  # every replica holds the same cache: refuse before routing
        index = self.route()
        self._engines[index].submit(seq)
        self._where[seq.request_id] = index

    def abort(self, request_id: str) -> None:
        """The emulator calls this as each request ends (a no-op for a finished one) or its client leaves."""
        index = self._where.pop(request_id, None)
        if index is not None:
            self._engines[index].abort(request_id)

    async def run(self) -> None:
        """Every engine until one fails (then the rest are cancelled and the failure surfaces) or all are cancelled."""
        import asyncio

        async with asyncio.TaskGroup() as group:
            for engine in self._engines:
                group.create_task(engine.run())
