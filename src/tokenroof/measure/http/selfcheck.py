"""Is the client the bottleneck? Event-loop lag, its CPU share, and CPU that others took while a point runs."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PERIOD_S = 0.005
STEAL_NOTE = 0.05  # a hypervisor taking more than this share of CPU time gets a note


@dataclass(frozen=True)
class MachineCpu:
    """Whole-machine CPU seconds since boot (all cores), from the first line of /proc/stat."""

    busy_s: float  # user, nice, system, irq, softirq
    steal_s: float  # taken by the hypervisor for other guests
    total_s: float  # busy + idle + iowait + steal
    cores: int = 1  # the CPUs these times are summed over

    @classmethod
    def read(cls, path: Path = Path("/proc/stat")) -> MachineCpu | None:
        """None where there is no /proc/stat (not Linux) or it cannot be read."""
        try:
            lines = path.read_text().splitlines()
            fields = lines[0].split()
            values = [float(v) for v in fields[1:9]] + [0.0] * (9 - len(fields))
        except (OSError, ValueError, IndexError):
            return None
        if not fields or fields[0] != "cpu":
            return None
        user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
        tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        busy = user + nice + system + irq + softirq
        cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        return cls(busy / tick, steal / tick, (busy + idle + iowait + steal) / tick, max(cores, 1))


def contention(
    start: MachineCpu, end: MachineCpu, process_cpu_s: float, wall_s: float
) -> tuple[float | None, float | None]:
    """(steal fraction of all CPU time, cores kept busy by other processes) over an interval.

    Other processes' busy time is the machine's busy time less this process's CPU time.
    """
    total = end.total_s - start.total_s
    steal = (end.steal_s - start.steal_s) / total if total > 0 else None
    others = max(end.busy_s - start.busy_s - process_cpu_s, 0.0) / wall_s if wall_s > 0 else None
    return steal, others


@dataclass
class LoopMonitor:
    """Sleeps PERIOD_S in a loop and records how late it wakes: a busy loop delays every stream it reads."""

    lags_s: list[float] = field(default_factory=list)
    cpu_start: float = 0.0
    wall_start: float = 0.0
    cpu_end: float = 0.0
    wall_end: float = 0.0
    machine_start: MachineCpu | None = None
    machine_end: MachineCpu | None = None
    helpers_cpu_s: float = 0.0  # CPU seconds the client's worker processes used over the point (bench --workers)
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + PERIOD_S
            await asyncio.sleep(PERIOD_S)
            self.lags_s.append(max(loop.time() - due, 0.0))

    def start(self) -> None:
        self.cpu_start, self.wall_start = time.process_time(), time.perf_counter()
        self.machine_start = MachineCpu.read()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self.cpu_end, self.wall_end = time.process_time(), time.perf_counter()
        self.machine_end = MachineCpu.read()
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

    @property
    def contention(self) -> tuple[float | None, float | None]:
        """(steal fraction, cores busy with other processes) during the point; None where unknown. The client's own
        worker processes (`helpers_cpu_s`, bench --workers) are not others."""
        if self.machine_start is None or self.machine_end is None:
            return None, None
        wall = self.wall_end - self.wall_start
        own = self.cpu_end - self.cpu_start + self.helpers_cpu_s
        return contention(self.machine_start, self.machine_end, own, wall)

    def verdict(self, tpot_ms: float | None) -> str | None:
        """A reason the point is invalid because of the client, or None (`client_bound`)."""
        return client_bound(self.lag_p99_ms, self.cpu_fraction, tpot_ms)

    def note(self, tpot_ms: float | None, lag_p99_ms: float | None = None) -> str | None:
        """Caveats that do not invalidate the point: ITL percentiles carry the client's lag (`lag_p99_ms`: that of
        the processes that read the streams, when not this one); other processes or the hypervisor took CPU the
        client may have needed (the lag check above judges whether it did)."""
        notes = []
        lag = self.lag_p99_ms if lag_p99_ms is None else lag_p99_ms
        if tpot_ms and lag > 0.05 * tpot_ms:
            notes.append(f"client loop lag p99 {lag:.1f} ms is over 5% of TPOT: ITL percentiles include it")
        steal, others = self.contention
        if steal is not None and steal > STEAL_NOTE:
            notes.append(f"the hypervisor stole {steal:.0%} of CPU time during the point")
        cores = self.machine_start.cores if self.machine_start else 1
        if others is not None and others > cores - 1:
            notes.append(
                f"other processes kept {others:.1f} of {cores} cores busy: the client may have waited for a core"
            )
        return "; ".join(notes) or None


def client_bound(lag_p99_ms: float, cpu_fraction: float, tpot_ms: float | None, who: str = "the client") -> str | None:
    """A reason a point is invalid because of the client (one process of it: `who`), or None.

    A late loop delays every chunk it reads. TPOT averages over a whole request, so it survives lag well below one
    step; once the lag reaches half a step the client is reading tokens later than the server sends them, and a
    client near a full core cannot keep up at all.
    """
    limit_ms = 0.5 * tpot_ms if tpot_ms else 5.0
    if lag_p99_ms > limit_ms:
        return (
            f"client-bound: {'' if who == 'the client' else who + ': '}event-loop lag p99 {lag_p99_ms:.1f} ms exceeds "
            f"half a TPOT ({limit_ms:.1f} ms): the client, not the server, set the timing"
        )
    if cpu_fraction > 0.9:
        process = "the client process" if who == "the client" else who
        return f"client-bound: {process} used {cpu_fraction:.0%} of a core"
    return None
