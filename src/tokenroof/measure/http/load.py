"""Load shapes: closed loop at fixed concurrency, open loop at a request rate; steady-state windows.

Every request a point starts goes through `Inflight`, which records it exactly once
however it ends: completed, failed, cancelled when the window closes, when the point's
watchdog fires at --max-duration, or when the run is interrupted (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokenroof.measure.http.client import RequestRecord
from tokenroof.stats import arrival_times, open_loop_window, typical_lifetime_s

Send = Callable[[RequestRecord], Awaitable[RequestRecord]]
Record = Callable[[RequestRecord], None]
WINDOW_CLOSED = "still running when the measurement window closed"
INTERRUPTED = "interrupted before the point ended"


@dataclass
class PointRun:
    """The records of one sweep point and its measurement window (seconds from the run's start).

    `note` makes the point invalid; `remarks` are caveats that do not.
    """

    records: list[RequestRecord] = field(default_factory=list)
    window_s: tuple[float, float] = (0.0, 0.0)
    note: str = ""
    remarks: list[str] = field(default_factory=list)
    clients: list[dict[str, Any]] = field(default_factory=list)  # bench --workers: each worker's self-check


@dataclass
class Inflight:
    """The requests of one point from start to record: each is recorded exactly once, however it ends."""

    label: str
    send: Send
    on_record: Record
    t0: float
    next_index: int = 0
    run: PointRun = field(default_factory=PointRun)
    tasks: dict[asyncio.Task[RequestRecord], RequestRecord] = field(default_factory=dict)
    cancel_reason: str = WINDOW_CLOSED
    on_send: Callable[[RequestRecord], None] | None = None  # the write-ahead line: sent, not yet ended

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def start(self, index: int | None = None) -> asyncio.Task[RequestRecord]:
        """Send one request (the next index unless given); its record is written when it ends."""
        if index is None:
            index, self.next_index = self.next_index, self.next_index + 1
        record = RequestRecord(self.label, index, self.now())
        if self.on_send is not None:
            self.on_send(record)
        task = asyncio.ensure_future(self.send(record))
        self.tasks[task] = record
        task.add_done_callback(self.finish)
        return task

    def finish(self, task: asyncio.Task[RequestRecord]) -> None:
        """Record the request of `task` (once: later calls do nothing); cancelled ones as error type cancelled."""
        record = self.tasks.pop(task, None)
        if record is None:
            return
        if not task.done() or task.cancelled():
            if not record.ok:  # cancelled while closing a stream that had ended ([DONE] read): it completed
                record.fail("cancelled", f"cancelled: {self.cancel_reason}", self.now())
        elif (exc := task.exception()) is not None:  # send() never raises; recorded all the same
            record.fail("protocol", f"{type(exc).__name__}: {exc}", self.now())
        self.run.records.append(record)
        self.on_record(record)

    async def wait_all(self) -> None:
        while self.tasks:
            await asyncio.wait(list(self.tasks))

    async def cancel_all(self, reason: str) -> None:
        """Cancel the requests still running and record them as cancelled for `reason`."""
        self.cancel_reason = reason
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        try:
            if tasks:
                await asyncio.wait(tasks)
        finally:
            for task in tasks:
                self.finish(task)  # interrupted while waiting: record the rest now

    async def watched(self, body: Coroutine[Any, Any, None], deadline_s: float) -> bool:
        """Run a point's `body` until it returns or the watchdog fires at `deadline_s` (seconds from the run's
        start); then cancel and record whatever is still in flight. True when the watchdog fired."""
        scope = asyncio.timeout(max(deadline_s - self.now(), 0.0))
        try:
            async with scope:
                await body
        except BaseException as exc:
            if not (isinstance(exc, TimeoutError) and scope.expired()):
                await self.cancel_all(INTERRUPTED)
                raise
        fired = scope.expired()
        await self.cancel_all("point reached --max-duration" if fired else WINDOW_CLOSED)
        return fired


@dataclass
class Progress:
    """Closed-loop progress: requests ended, and when the window opened and closed."""

    warmup: int
    measure: int
    done: int = 0
    w0: float | None = None
    w1: float | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def ended(self, now: float) -> None:
        self.done += 1
        if self.w0 is None and self.done >= self.warmup:
            self.w0 = now
        if self.w0 is not None and self.done >= self.warmup + self.measure and self.w1 is None:
            self.w1 = now
            self.stop.set()


async def closed_loop(
    inflight: Inflight, concurrency: int, warmup: int, measure: int, deadline_s: float, probe_index: int = -1
) -> PointRun:
    """`concurrency` workers each send the next request when their last one ends.

    Workers start staggered over the duration of one probe request, so that fixed
    output lengths do not march in lockstep waves (all finishing, then all
    prefilling, in the same steps). The window opens when `warmup` requests have
    completed (every initial request replaced: steady state) and closes after
    `measure` more, or when the watchdog fires at `deadline_s`.
    """
    started = inflight.now()
    progress = Progress(warmup, measure)

    async def worker(delay: float) -> None:
        await asyncio.sleep(delay)
        while not progress.stop.is_set():
            await asyncio.wait([inflight.start()])
            progress.ended(inflight.now())

    async def body() -> None:
        probe = inflight.start(probe_index)
        await asyncio.wait([probe])  # not `await probe`: cancelling the body must leave it to cancel_all
        record = probe.result()
        stagger = ((record.end_s or record.start_s) - record.start_s) / concurrency
        workers = [asyncio.create_task(worker(i * stagger)) for i in range(concurrency)]
        try:
            await progress.stop.wait()
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    fired = await inflight.watched(body(), deadline_s)
    return closed_window(inflight.run, progress, started, fired, deadline_s, inflight.now(), warmup)


def closed_window(
    run: PointRun, progress: Progress, started: float, fired: bool, deadline_s: float, now: float, warmup: int
) -> PointRun:
    """A closed loop's window: from the warm-up's end to the window's last request (or the watchdog)."""
    end = progress.w1 if progress.w1 is not None else min(now, deadline_s)
    if progress.w0 is None:
        run.note = "warm-up did not finish within --max-duration: the window includes ramp-up"
    elif fired:
        run.remarks.append(
            f"stopped at --max-duration after {progress.done - warmup} of {progress.measure} window requests"
        )
    run.window_s = (progress.w0 if progress.w0 is not None else started, end)
    return run


async def open_loop(
    inflight: Inflight, rate: float, burstiness: float, n: int, rng: np.random.Generator, deadline_s: float
) -> PointRun:
    """Requests arrive on a gamma process regardless of completions; the window spans the arrivals after the
    first 10% and after one typical request's lifetime up to the last arrival (ramp-up and drain excluded).

    When the watchdog fires at `deadline_s`, arrivals stop and the window ends at the
    first request it cut short, so that every request sent inside the window ended on
    its own (no survivor bias towards fast requests).
    """
    times = arrival_times(rate, burstiness, n, rng)
    base = inflight.now()
    sent: list[float] = []

    async def body() -> None:
        for offset in times:
            delay = base + offset - inflight.now()
            if delay > 0:
                await asyncio.sleep(delay)
            inflight.start()
            sent.append(base + offset)
        await inflight.wait_all()

    fired = await inflight.watched(body(), deadline_s)
    return open_window(inflight.run, sent, fired, n)


def open_window(run: PointRun, sent: list[float], fired: bool, n: int) -> PointRun:
    """An open loop's window from its arrivals' scheduled times (`sent`, in order): after the first 10%, and after one
    typical request's lifetime, up to the last (stats.open_loop_window: simulate's too); cut at the first request the
    watchdog cancelled."""
    if not sent:
        run.note = "the watchdog fired before the first arrival: raise --max-duration"
        return run
    # every request sent splits the run at its median send; a lifetime is a served request's (NaN: failed, cut off)
    ends = [r.end_s if r.ok and r.end_s is not None else math.nan for r in run.records]
    lifetime_s = typical_lifetime_s([r.start_s for r in run.records], ends)
    last_end_s = max((r.end_s for r in run.records if r.end_s is not None), default=sent[-1])
    w0, w1 = open_loop_window(sent, lifetime_s, last_end_s)
    if fired:
        w1 = min([w1, *(r.start_s for r in run.records if r.error_type == "cancelled")])
        run.remarks.append(f"stopped at --max-duration after {len(sent)} of {n} arrivals")
        if w1 <= w0:
            run.note = "--max-duration ended the point before a steady-state window formed"
    run.window_s = (float(w0), float(max(w1, w0)))
    return run
