"""Replicas behind a router on the wall clock: several engines, each with its own scheduler and KV cache, behind the
one `submit`/`abort` the emulator calls (`simulate --replicas --router` is the same fleet on a virtual clock).

The router sends each request round-robin, to the engine with the fewest outstanding requests (queued, prefilling
or running), or to one at random, request by request, with the rules and the draws of `simulate`'s router. The
engines share one event loop: a fleet of many replicas, or fast steps, can make the loop the bottleneck; the
emulator's lateness gauges say so. /metrics sums the engines' gauges, so bench's batch against a fleet is the
fleet's running batch, N times the per-replica `running_batch` simulate reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tokenroof.errors import ParameterError
from tokenroof.serving.engine.core import BatchScheduler, Sequence
from tokenroof.serving.engine.realtime import EngineGroup, RealtimeEngine, TokenCallback

ROUTERS = ("round-robin", "least-outstanding", "random", "prefix")  # simulate's routers too
# the prefix router's load guard, SGLang's router's defaults (sgl-router --balance-abs-threshold 64
# --balance-rel-threshold 1.5): the fleet is imbalanced when the busiest replica holds more than this many requests
# above the idlest and more than this multiple of it, and then every request goes to the idlest
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5


def prefix_of(seq: Sequence) -> int | None:
    """What a prefix router routes a request by: its workload's shared prefix (simulate), else its prompt's first
    block (emulate hashes the prompt's text); None: no shared prefix to keep together."""
    if seq.prefix_group >= 0:
        return seq.prefix_group
    return seq.block_keys[0] if seq.block_keys else None


class Router:
    """Which of `replicas` takes the next request: round-robin, the fewest outstanding (the lowest index of the
    tied), uniformly at random, request by request (draws seeded apart from the arrivals'), or by prefix (SGLang's
    cache-aware router, simplified: a prompt goes where its shared prefix went before, so that replica's prefix
    cache holds it; a new prefix, or a prompt without one, to the fewest outstanding; and every request to the
    fewest outstanding while the fleet is imbalanced, `BALANCE_ABS_THRESHOLD`/`_REL_`). One router for simulate's
    fleets and emulate's."""

    def __init__(self, kind: str, replicas: int, seed: int = 0) -> None:
        if kind not in ROUTERS:
            raise ParameterError(f"unknown {{}} '{kind}'; known: {', '.join(ROUTERS)}", "router")
        self.kind, self.replicas, self._turn = kind, replicas, 0
        self._rng = np.random.default_rng([seed, 1])
        self._home: dict[int, int] = {}  # prefix → the replica that took it first (the prefix router)

    def pick(self, outstanding: Callable[[int], int], prefix: int | None = None) -> int:
        """The replica for the next request; `outstanding(i)`: what replica i holds (least-outstanding and the prefix
        router read it); `prefix`: the request's shared prefix (`prefix_of`; the prefix router reads it)."""
        if self.kind == "round-robin":
            index, self._turn = self._turn, (self._turn + 1) % self.replicas
            return index
        if self.kind == "random":
            return int(self._rng.integers(self.replicas))
        idlest = min(range(self.replicas), key=outstanding)
        if self.kind == "least-outstanding" or prefix is None:
            return idlest
        loads = [outstanding(i) for i in range(self.replicas)]
        busiest, least = max(loads), loads[idlest]
        if busiest - least > BALANCE_ABS_THRESHOLD and busiest > BALANCE_REL_THRESHOLD * least:
            return idlest  # imbalanced: the load first, the cache after
        return self._home.setdefault(prefix, idlest)


@dataclass
class FleetEngine(EngineGroup):
    """`replicas` schedulers run as realtime engines behind `router`."""

    replicas: list[BatchScheduler]
    on_token: TokenCallback
    router: str = "round-robin"
    seed: int = 0
    _engines: list[RealtimeEngine] = field(default_factory=list)
    _where: dict[str, int] = field(default_factory=dict)  # request → its replica, until the emulator lets it go
    _router: Router = field(init=False)

    def __post_init__(self) -> None:
        self._router = Router(self.router, len(self.replicas), self.seed)
        self._engines = [RealtimeEngine(s, self.on_token) for s in self.replicas]

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

    # -- requests -----------------------------------------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        self.replicas[0].check(seq)  # every replica holds the same cache: refuse before routing
        index = self._router.pick(lambda i: self.replicas[i].outstanding, prefix_of(seq))
        self._engines[index].submit(seq)
        self._where[seq.request_id] = index

    def abort(self, request_id: str) -> None:
        """The emulator calls this as each request ends (a no-op for a finished one) or its client leaves."""
        index = self._where.pop(request_id, None)
        if index is not None:
            self._engines[index].abort(request_id)
