"""Is the client the bottleneck? Event-loop lag and this process's CPU share while a point runs."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np

PERIOD_S = 0.005


@dataclass
class LoopMonitor:
    """Sleeps PERIOD_S in a loop and records how late it wakes: a busy loop delays every stream it reads."""

    lags_s: list[float] = field(default_factory=list)
    cpu_start: float = 0.0
    wall_start: float = 0.0
    cpu_end: float = 0.0
    wall_end: float = 0.0
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + PERIOD_S
            await asyncio.sleep(PERIOD_S)
            self.lags_s.append(max(loop.time() - due, 0.0))

    def start(self) -> None:
        self.cpu_start, self.wall_start = time.process_time(), time.perf_counter()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self.cpu_end, self.wall_end = time.process_time(), time.perf_counter()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def lag_p99_ms(self) -> float:
        return float(np.percentile(self.lags_s, 99) * 1e3) if self.lags_s else 0.0

    @property
    def cpu_fraction(self) -> float:
        wall = self.wall_end - self.wall_start
        return (self.cpu_end - self.cpu_start) / wall if wall > 0 else 0.0

    def verdict(self, tpot_ms: float | None) -> str | None:
        """A reason the point is invalid because of the client, or None.

        A late loop delays every chunk it reads. TPOT averages over a whole request,
        so it survives lag well below one step; once the lag reaches half a step the
        client is reading tokens later than the server sends them, and a client near
        a full core cannot keep up at all.
        """
        limit_ms = 0.5 * tpot_ms if tpot_ms else 5.0
        if self.lag_p99_ms > limit_ms:
            return (
                f"client-bound: event-loop lag p99 {self.lag_p99_ms:.1f} ms exceeds half a TPOT "
                f"({limit_ms:.1f} ms): the client, not the server, set the timing"
            )
        if self.cpu_fraction > 0.9:
            return f"client-bound: the client process used {self.cpu_fraction:.0%} of a core"
        return None

    def note(self, tpot_ms: float | None) -> str | None:
        """A caveat that does not invalidate the point: ITL percentiles carry the client's lag."""
        if tpot_ms and self.lag_p99_ms > 0.05 * tpot_ms:
            return f"client loop lag p99 {self.lag_p99_ms:.1f} ms is over 5% of TPOT: ITL percentiles include it"
        return None
