"""Load shapes: closed loop at fixed concurrency, open loop at a request rate; steady-state windows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from tokenroof.bench.client import RequestRecord

Send = Callable[[RequestRecord], Awaitable[RequestRecord]]
Record = Callable[[RequestRecord], None]


@dataclass
class PointRun:
    """The records of one sweep point and its measurement window (seconds from the run's start)."""

    records: list[RequestRecord] = field(default_factory=list)
    window_s: tuple[float, float] = (0.0, 0.0)
    note: str = ""


async def cancel_all(
    tasks: set[asyncio.Task[RequestRecord]],
    records: list[RequestRecord],
    pending: dict[asyncio.Task[RequestRecord], RequestRecord],
    on_record: Record,
    t0: float,
) -> None:
    """Stop requests still in flight after the window; they are recorded as cancelled (not failures)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        record = pending[task]
        if record.end_s is None or task.cancelled():
            record.ok = False
            record.error = "cancelled: still running when the measurement window closed"
            record.end_s = time.perf_counter() - t0
            records.append(record)
            on_record(record)


async def closed_loop(
    label: str,
    concurrency: int,
    send: Send,
    on_record: Record,
    t0: float,
    warmup: int,
    measure: int,
    max_duration_s: float,
) -> PointRun:
    """`concurrency` workers each send the next request when their last one ends.

    Workers start staggered over the duration of one probe request, so that fixed
    output lengths do not march in lockstep waves (all finishing, then all
    prefilling, in the same steps). The window opens when `warmup` requests have
    completed (every initial request replaced: steady state) and closes after
    `measure` more, or at `max_duration_s`.
    """
    run = PointRun()
    state = {"done": 0, "index": 0}
    w0: list[float] = []
    stop = asyncio.Event()
    started = time.perf_counter() - t0
    pending: dict[asyncio.Task[RequestRecord], RequestRecord] = {}

    probe = RequestRecord(label, -1, time.perf_counter() - t0)
    await send(probe)
    run.records.append(probe)
    on_record(probe)
    stagger = ((probe.end_s or probe.start_s) - probe.start_s) / concurrency

    async def worker(delay: float) -> None:
        await asyncio.sleep(delay)
        while not stop.is_set():
            record = RequestRecord(label, state["index"], time.perf_counter() - t0)
            state["index"] += 1
            task = asyncio.ensure_future(send(record))
            pending[task] = record
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                return
            del pending[task]
            run.records.append(record)
            on_record(record)
            state["done"] += 1
            now = time.perf_counter() - t0
            if not w0 and state["done"] >= warmup:
                w0.append(now)
            if (w0 and state["done"] >= warmup + measure) or now - started > max_duration_s:
                stop.set()

    workers = [asyncio.create_task(worker(i * stagger)) for i in range(concurrency)]
    await stop.wait()
    end = time.perf_counter() - t0
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    await cancel_all(set(pending), run.records, pending, on_record, t0)
    if not w0:
        w0.append(started)
        run.note = f"warm-up did not finish within {max_duration_s:g} s: the window includes ramp-up"
    run.window_s = (w0[0], end)
    return run


def arrival_times(rate: float, burstiness: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Gamma inter-arrival times with mean 1/rate; burstiness 1 is Poisson, < 1 burstier, > 1 smoother."""
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    return np.cumsum(gaps) - gaps[0]


async def open_loop(
    label: str,
    rate: float,
    burstiness: float,
    n: int,
    send: Send,
    on_record: Record,
    t0: float,
    rng: np.random.Generator,
    drain_timeout_s: float,
) -> PointRun:
    """Requests arrive on a gamma process regardless of completions; the window spans the arrivals after the
    first 10% up to the last arrival (ramp-up and drain excluded)."""
    run = PointRun()
    times = arrival_times(rate, burstiness, n, rng)
    base = time.perf_counter() - t0
    tasks: set[asyncio.Task[RequestRecord]] = set()
    pending: dict[asyncio.Task[RequestRecord], RequestRecord] = {}

    def finished(task: asyncio.Task[RequestRecord]) -> None:
        record = pending.pop(task)
        tasks.discard(task)
        if not task.cancelled():
            run.records.append(record)
            on_record(record)

    for i, offset in enumerate(times):
        delay = base + offset - (time.perf_counter() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        record = RequestRecord(label, i, time.perf_counter() - t0)
        task = asyncio.ensure_future(send(record))
        pending[task] = record
        tasks.add(task)
        task.add_done_callback(finished)
    w0, w1 = base + times[int(0.1 * n)], base + times[-1]
    if tasks:
        _, still = await asyncio.wait(set(tasks), timeout=drain_timeout_s)
        if still:
            run.note = f"{len(still)} requests still running {drain_timeout_s:g} s after the last arrival"
            left = {t: pending[t] for t in still}
            await cancel_all(set(still), run.records, left, on_record, t0)
    run.window_s = (float(w0), float(w1))
    return run
