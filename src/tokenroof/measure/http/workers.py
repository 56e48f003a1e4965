"""bench --workers N: one sweep's load from N client processes on this host, planned and recorded by one coordinator.

One Python process cannot time thousands of streams: its own event-loop lag becomes the measurement (the self-check
says when it does). As AIPerf and GuideLLM do, bench then splits the client: the coordinator (the process the user
started) plans each point, sends the probe, scrapes /metrics, records every request and summarises; N worker
processes send the requests and report each one as it ends.

- **One schedule, planned centrally.** A closed loop's `c` streams are staggered over the probe's life as one process
  staggers them, stream j to worker j mod N; an open loop's arrivals are drawn once (the seed's gamma process, the
  same draws as without workers) and arrival j goes to worker j mod N: the union is the single-process schedule, so
  its statistics do not change.
- **One clock.** Times are seconds from the run's start on `time.perf_counter`, the host's monotonic clock, which
  every process reads alike; each worker's clock is checked as it starts (its reading must fall between the
  coordinator's sending the check and reading the answer).
- **Every request recorded once.** A worker reports each request when it is sent (the write-ahead line) and when it
  ends; the coordinator records both as a single-process run does, so requests.jsonl, `--resume` and the summaries
  are unchanged. A worker that dies mid-point leaves its requests in flight recorded as cut, and the point invalid.
- **The self-check per worker.** Each worker reports its event-loop lag and CPU share over the point; the point is
  client-bound when any worker (or the coordinator) is, and says which.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any, Protocol

import numpy as np

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.measure.http.client import REDACTION, Client, RequestRecord, open_client, send
from tokenroof.measure.http.load import (
    INTERRUPTED,
    WINDOW_CLOSED,
    Inflight,
    PointRun,
    Progress,
    closed_window,
    open_window,
)
from tokenroof.measure.http.redact import Redactor
from tokenroof.measure.http.selfcheck import LoopMonitor
from tokenroof.stats import arrival_times


class PromptSource(Protocol):
    """What a worker asks of bench's prompts (run.Prompts): a request's body, its shared-prefix group."""

    def payload(
        self, index: int, model: str, point: str = "", max_tokens: int | None = None, group: int | None = None
    ) -> dict[str, Any]: ...

    def group_of(self, point: str, index: int) -> int | None: ...


START_TIMEOUT_S = 120.0  # a worker imports the client and opens its pools (spawned: a fresh interpreter)
CLOCK_TOLERANCE_S = 1e-3  # a worker's reading may fall this far outside the coordinator's send/receive span
LEAD_S = 0.05  # a point's first send after its plan went out: the plans reach every worker before it
GRACE_S = 10.0  # how long stopped workers get to record their cancelled requests
Send = Callable[[tuple[Any, ...]], None]  # a worker's way to the coordinator


@dataclass(frozen=True)
class WorkerSetup:
    """What one worker needs for the whole run (pickled once, at its start)."""

    index: int
    count: int
    url: str  # the completions or chat endpoint
    timeout_s: float
    t0: float  # the coordinator's time.perf_counter() at the run's start: every process's zero
    headers: dict[str, str]
    prompts: PromptSource  # run.Prompts, pickled
    model: str
    redactor: Redactor  # error texts are redacted before they are cut, here as in the coordinator


def worker_main(conn: Connection, setup: WorkerSetup) -> None:
    """A worker process: the coordinator ends the run (Ctrl-C included) and records what was in flight."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    REDACTION.set(setup.redactor.text)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

        def readable() -> None:
            try:
                inbox.put_nowait(conn.recv())
            except (EOFError, OSError):  # the coordinator is gone: stop
                loop.remove_reader(conn.fileno())
                inbox.put_nowait(("exit",))

        loop.add_reader(conn.fileno(), readable)
        await serve_plans(inbox, outbox.put_nowait, setup)

    # reports leave through a thread of their own: a coordinator that falls behind fills the pipe and blocks that
    # thread, never the event loop timing the streams
    outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()

    def writer() -> None:
        while (message := outbox.get()) is not None:
            try:
                conn.send(message)
            except (BrokenPipeError, OSError):  # the coordinator is gone: nothing to report to
                return

    thread = threading.Thread(target=writer, name="bench-reports", daemon=True)
    thread.start()
    try:
        asyncio.run(main())
    finally:
        outbox.put(None)  # every report written before the process ends
        thread.join()


async def serve_plans(inbox: asyncio.Queue[tuple[Any, ...]], tell: Send, setup: WorkerSetup) -> None:
    """A worker's life, whatever carries its messages (a pipe, a Ray actor): answer the clock check, run each point's
    share as it is planned, stop at "exit"."""
    async with open_client(setup.url, setup.timeout_s, setup.t0, setup.headers) as client:
        while True:
            message = await inbox.get()
            if message[0] == "exit":
                return
            if message[0] == "clock":
                tell(("clock", setup.index, client.now()))
            elif message[0] in ("closed", "open"):
                await _run_share(tell, inbox, client, setup, message)
            # anything else ("stop" for a point this worker already finished) is late: ignored


async def _run_share(
    tell: Send, inbox: asyncio.Queue[tuple[Any, ...]], client: Client, setup: WorkerSetup, plan: tuple[Any, ...]
) -> None:
    """This worker's share of one point: its streams (closed loop) or its arrivals (open loop), until they end or the
    coordinator says stop; then its self-check, in a "done" message."""
    kind, label = plan[0], plan[1]
    count = 0

    def on_send(record: RequestRecord) -> None:
        nonlocal count
        count += 1
        tell(("sent", setup.index, record.index, record.start_s, label))

    async def send_one(record: RequestRecord) -> RequestRecord:
        record.prefix_group = setup.prompts.group_of(record.point, record.index)
        return await send(client, setup.prompts.payload(record.index, setup.model, record.point), record)

    inflight = Inflight(label, send_one, lambda record: tell(("record", setup.index, record)), setup.t0)
    inflight.on_send = on_send
    monitor = LoopMonitor()
    monitor.start()
    body = asyncio.ensure_future(_streams(inflight, plan, setup) if kind == "closed" else _arrivals(inflight, plan))
    stop = asyncio.ensure_future(_stop_of(inbox, label))
    try:
        await asyncio.wait([body, stop], return_when=asyncio.FIRST_COMPLETED)
    finally:
        reason = WINDOW_CLOSED
        if stop.done():
            reason = stop.result()
        else:
            stop.cancel()
        body.cancel()
        await asyncio.gather(body, return_exceptions=True)
        await inflight.cancel_all(reason)
        await monitor.stop()
        stats = {"lag_p99_ms": monitor.lag_p99_ms, "cpu_s": monitor.cpu_end - monitor.cpu_start, "requests": count}
        stats["cpu_fraction"] = monitor.cpu_fraction
        tell(("done", setup.index, stats, label))


async def _stop_of(inbox: asyncio.Queue[tuple[Any, ...]], label: str) -> str:
    """The reason the coordinator stops point `label`: its "stop"; an "exit" stops it too and is put back for the
    serve loop; anything else (a late stop of an earlier point) is ignored."""
    while True:
        message = await inbox.get()
        if message[0] == "stop" and message[1] == label:
            return str(message[2])
        if message[0] == "exit":
            inbox.put_nowait(message)
            return INTERRUPTED


async def _streams(inflight: Inflight, plan: tuple[Any, ...], setup: WorkerSetup) -> None:
    """Closed loop: each stream starts at its time and sends its next request when its last ends; request indices
    base + worker + N·k, apart from every other worker's."""
    _, _, base, starts = plan
    counter = itertools.count()

    async def stream(at: float) -> None:
        await asyncio.sleep(max(at - inflight.now(), 0.0))
        while True:
            await asyncio.wait([inflight.start(base + setup.index + setup.count * next(counter))])

    await asyncio.gather(*(stream(at) for at in starts))


async def _arrivals(inflight: Inflight, plan: tuple[Any, ...]) -> None:
    """Open loop: each arrival sent at its time, whatever has ended; done when every request has."""
    for index, at in plan[2]:
        delay = at - inflight.now()
        if delay > 0:
            await asyncio.sleep(delay)
        inflight.start(index)
    await inflight.wait_all()


@dataclass
class WorkerPool:
    """The coordinator's side: N worker processes, their messages in one queue, which are alive."""

    setups: list[WorkerSetup]
    processes: list[Any] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    inbox: asyncio.Queue[tuple[int, tuple[Any, ...]]] = field(default_factory=asyncio.Queue)
    alive: list[bool] = field(default_factory=list)
    clock_span_ms: float = 0.0  # the widest send/receive span a worker's clock check fell in

    @property
    def count(self) -> int:
        return len(self.setups)

    async def start(self) -> None:
        """Spawn the workers, then check each one's clock against the coordinator's."""
        context = worker_context()
        loop = asyncio.get_running_loop()
        for setup in self.setups:
            parent, child = context.Pipe()
            process = context.Process(target=worker_main, args=(child, setup), daemon=True, name=f"bench-{setup.index}")
            process.start()
            child.close()
            self.processes.append(process)
            self.conns.append(parent)
            self.alive.append(True)
            loop.add_reader(parent.fileno(), self._readable, setup.index)
        for _ in range(2):  # the first round's span holds each worker's start-up; the second is the check's own
            self.clock_span_ms = 0.0
            await self.check_clocks(CLOCK_TOLERANCE_S, "this host's processes do not share a monotonic clock")

    async def check_clocks(self, tolerance_s: float, why: str) -> None:
        """Each worker's clock, read through its own message channel, must fall between the coordinator's sending the
        check and reading the answer (within `tolerance_s`)."""
        t0 = self.setups[0].t0
        for index in range(self.count):
            sent = _now(t0)
            self.tell(index, ("clock",))
            message = await self.expect(index, "clock", START_TIMEOUT_S)
            received = _now(t0)
            reading = float(message[2])
            if not sent - tolerance_s <= reading <= received + tolerance_s:
                raise TokenroofError(
                    f"bench worker {index}'s clock read {reading:.6f} s, outside the coordinator's {sent:.6f}–"
                    f"{received:.6f} s: {why}"
                )
            self.clock_span_ms = max(self.clock_span_ms, (received - sent) * 1e3)

    def _readable(self, index: int) -> None:
        conn = self.conns[index]
        try:
            message = conn.recv()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
            self.alive[index] = False
            message = ("gone",)
        self.inbox.put_nowait((index, message))

    def require_all(self) -> None:
        """A point needs every worker: with one gone, its share of the streams or arrivals would be missing."""
        gone = [i for i, alive in enumerate(self.alive) if not alive]
        if gone:
            raise ParameterError(
                f"bench client worker(s) {', '.join(map(str, gone))} exited: the sweep stops here ({{}} continues "
                "with fresh workers)",
                "resume",
            )

    def tell(self, index: int, message: tuple[Any, ...]) -> None:
        if self.alive[index]:
            try:
                self.conns[index].send(message)
            except (BrokenPipeError, OSError):
                self.alive[index] = False

    def retire(self, index: int) -> None:
        """Worker `index` no longer answers: killed, and counted gone (the next point refuses to run without it)."""
        if self.alive[index]:
            self.alive[index] = False
            asyncio.get_running_loop().remove_reader(self.conns[index].fileno())
        if self.processes[index].is_alive():
            self.processes[index].kill()

    async def expect(self, index: int, kind: str, timeout_s: float) -> tuple[Any, ...]:
        """The next message, which must be worker `index`'s `kind` (used only before any point runs)."""
        try:
            async with asyncio.timeout(timeout_s):
                who, message = await self.inbox.get()
        except TimeoutError:
            raise TokenroofError(f"bench worker {index} did not answer within {timeout_s:.0f} s") from None
        if who != index or message[0] != kind:
            raise TokenroofError(f"bench worker {who} answered {message[0]!r} where worker {index}'s {kind} was due")
        return message

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        for index in range(self.count):
            self.tell(index, ("exit",))
        for index, conn in enumerate(self.conns):
            if self.alive[index]:
                loop.remove_reader(conn.fileno())
        for process in self.processes:
            await asyncio.to_thread(process.join, 5.0)
            if process.is_alive():
                process.kill()
        for conn in self.conns:
            conn.close()

    def client(self) -> dict[str, Any]:
        """What summary.json says of the client: how many processes, and the clock check (the widest span between
        sending a worker the check and reading its answer: how far apart their clocks could be unnoticed)."""
        return {"workers": self.count, "clock_check_span_ms": self.clock_span_ms}


class RayWorker:
    """A bench worker as a Ray actor (asynchronous: one event loop): the coordinator tells it messages and drains
    what it said; its clock is set from the coordinator's by one exchange (Ray workers may sit on other hosts)."""

    def __init__(self, setup: WorkerSetup) -> None:
        self.setup = setup
        self.outbox: list[tuple[Any, ...]] = []
        self.inbox: asyncio.Queue[tuple[Any, ...]] | None = None
        self.task: asyncio.Task[None] | None = None

    async def raw_clock(self) -> float:
        return time.perf_counter()

    async def start(self, t0: float) -> None:
        """Serve with `t0` as zero: this host's perf_counter at the coordinator's zero."""
        REDACTION.set(self.setup.redactor.text)
        self.inbox = asyncio.Queue()
        setup = replace(self.setup, t0=t0)
        self.task = asyncio.get_running_loop().create_task(serve_plans(self.inbox, self.outbox.append, setup))

    async def tell(self, message: tuple[Any, ...]) -> None:
        assert self.inbox is not None
        self.inbox.put_nowait(message)

    async def drain(self) -> list[tuple[Any, ...]]:
        said, self.outbox[:] = list(self.outbox), []
        if self.task is not None and self.task.done() and not said and self.task.exception() is not None:
            raise RuntimeError(f"bench worker failed: {self.task.exception()!r}")
        return said


POLL_S = 0.01  # how often the coordinator drains its Ray workers' reports


@dataclass
class RayWorkerPool(WorkerPool):
    """`bench --ray ADDRESS`: the workers as Ray actors spread over a cluster ("local" starts one here). Each one's
    clock is set by one exchange (its reading at the coordinator's midpoint) and checked like a process's, within
    half that exchange's round trip."""

    address: str = "local"
    actors: list[Any] = field(default_factory=list)
    poller: asyncio.Task[None] | None = None

    async def start(self) -> None:
        require_ray()
        import ray

        if not ray.is_initialized():
            if self.address == "local":
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=self.address, log_to_driver=False)
        actor: Any = ray.remote(RayWorker).options(num_cpus=0, scheduling_strategy="SPREAD")
        t0 = self.setups[0].t0
        uncertainty = 0.0
        for setup in self.setups:
            handle = actor.remote(setup)
            sent = _now(t0)
            raw = float(await handle.raw_clock.remote())
            received = _now(t0)
            uncertainty = max(uncertainty, (received - sent) / 2)
            await handle.start.remote(raw - (sent + received) / 2)
            self.actors.append(handle)
            self.alive.append(True)
        self.poller = asyncio.get_running_loop().create_task(self._poll())
        for _ in range(2):
            self.clock_span_ms = 0.0
            await self.check_clocks(CLOCK_TOLERANCE_S + uncertainty, "its clock drifted from the coordinator's")

    async def _poll(self) -> None:
        import ray

        while True:
            for index, handle in enumerate(self.actors):
                if not self.alive[index]:
                    continue
                try:
                    said = await handle.drain.remote()
                except (ray.exceptions.RayError, RuntimeError):
                    self.alive[index] = False
                    said = [("gone",)]
                for message in said:
                    self.inbox.put_nowait((index, message))
            await asyncio.sleep(POLL_S)

    def tell(self, index: int, message: tuple[Any, ...]) -> None:
        if self.alive[index]:
            self.actors[index].tell.remote(message)

    def retire(self, index: int) -> None:
        import ray

        self.alive[index] = False
        ray.kill(self.actors[index])

    async def close(self) -> None:
        if not self.actors:  # never started (Ray missing, or the cluster refused): nothing to stop
            return
        import ray

        for index in range(self.count):
            self.tell(index, ("exit",))
        await asyncio.sleep(POLL_S)
        if self.poller is not None:
            self.poller.cancel()
            await asyncio.gather(self.poller, return_exceptions=True)
        for handle in self.actors:
            ray.kill(handle)

    def client(self) -> dict[str, Any]:
        return {**super().client(), "ray": self.address}


def worker_context() -> Any:
    """How workers start: forked from a server process that has imported this module once (Python's forkserver:
    no copy of the coordinator's event loop or threads, a worker ready in milliseconds, the user's script not run
    again); spawned (a fresh interpreter each) where there is no fork."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def require_ray() -> None:
    """--ray needs the optional extra: say so before anything is sent."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ParameterError("{} needs Ray: pip install 'tokenroof[ray]'", "ray") from None


def _now(t0: float) -> float:
    return time.perf_counter() - t0


@dataclass
class SplitPoint:
    """One point's requests from the pool: the workers' reports recorded through the coordinator's `Inflight` (its
    write-ahead and record hooks, its run), the requests each worker has in flight, each one's self-check."""

    pool: WorkerPool
    inflight: Inflight
    outstanding: dict[int, dict[int, float]] = field(default_factory=dict)  # worker → {index: start_s}
    stats: dict[int, dict[str, Any]] = field(default_factory=dict)  # worker → its "done" report
    sent_indices: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # workers that died mid-point
    planned: set[int] = field(default_factory=set)  # workers sent a share (one with none has nothing to report)
    sent_by: dict[int, int] = field(default_factory=dict)  # worker → requests it reported sent

    def plan(self, who: int, message: tuple[Any, ...], share: int) -> None:
        """Send worker `who` its share of the point (`share` streams or arrivals); a worker with none gets no plan."""
        if share:
            self.planned.add(who)
            self.pool.tell(who, message)

    def handle(self, who: int, message: tuple[Any, ...]) -> RequestRecord | None:
        """Record one message; returns the record of a request that ended (None for anything else). A message of
        another point (a worker that answered after its grace) is dropped: its requests were recorded as cut."""
        kind = message[0]
        label = message[2].point if kind == "record" else message[-1] if kind in ("sent", "done") else None
        if label is not None and label != self.inflight.label:
            return None
        if kind == "sent":
            _, _, index, start_s, _ = message
            self.outstanding.setdefault(who, {})[index] = start_s
            self.sent_indices.append(index)
            self.sent_by[who] = self.sent_by.get(who, 0) + 1
            if self.inflight.on_send is not None:
                self.inflight.on_send(RequestRecord(self.inflight.label, index, start_s))
            return None
        if kind == "record":
            record: RequestRecord = message[2]
            self.outstanding.get(who, {}).pop(record.index, None)
            self.inflight.run.records.append(record)
            self.inflight.on_record(record)
            return record
        if kind == "done":
            self.stats[who] = message[2]
        elif kind == "gone" and who in self.planned and who not in self.stats:
            self.lose(who, f"cancelled: client worker {who} exited mid-point")
        return None

    def lose(self, who: int, reason: str) -> None:
        """Worker `who` is gone or stuck: its requests in flight recorded as cut for `reason`, the worker retired (the
        next point refuses to run without it), its share of the point marked lost."""
        self.cut(who, reason)
        self.pool.retire(who)
        self.lost.append(who)
        sent = self.sent_by.get(who, 0)
        self.stats[who] = {"lag_p99_ms": 0.0, "cpu_s": 0.0, "cpu_fraction": 0.0, "requests": sent, "exited": True}

    def cut(self, who: int, reason: str) -> None:
        """Record worker `who`'s requests still in flight as cancelled for `reason` (it cannot report them)."""
        for index, start_s in sorted(self.outstanding.pop(who, {}).items()):
            record = RequestRecord(self.inflight.label, index, start_s)
            record.fail("cancelled", reason, self.inflight.now())
            self.inflight.run.records.append(record)
            self.inflight.on_record(record)

    def busy(self) -> list[int]:
        """The workers sent a share whose share has not ended."""
        return [w for w in sorted(self.planned) if w not in self.stats]

    async def next_message(self) -> tuple[int, tuple[Any, ...]]:
        return await self.pool.inbox.get()

    async def stop(self, reason: str) -> None:
        """Tell every worker still running to stop, then record until each is done (or cut them after GRACE_S)."""
        for w in self.busy():
            self.pool.tell(w, ("stop", self.inflight.label, reason))
        try:
            async with asyncio.timeout(GRACE_S):
                while self.busy():
                    self.handle(*await self.next_message())
        except TimeoutError:
            for w in self.busy():
                self.lose(w, f"cancelled: client worker {w} did not stop within {GRACE_S:.0f} s ({reason})")

    def finish(self, run: PointRun) -> None:
        """The workers' self-checks and losses into the point's run."""
        run.clients = [{"worker": w, **self.stats[w]} for w in sorted(self.stats)]
        if self.lost:  # first: it explains whatever else went wrong with the point
            lost = ", ".join(map(str, sorted(set(self.lost))))
            note = f"client worker(s) {lost} stopped answering mid-point: their requests in flight were recorded as cut"
            run.note = f"{note}; {run.note}" if run.note else note


async def closed_split(
    pool: WorkerPool,
    inflight: Inflight,
    concurrency: int,
    warmup: int,
    measure: int,
    deadline_s: float,
    probe_index: int = -1,
) -> PointRun:
    """`load.closed_loop` over the pool: the probe from the coordinator, stream j (started j × stagger after it) on
    worker j mod N; the window opens and closes on the requests ended as every worker reports them."""
    pool.require_all()
    started = inflight.now()
    progress = Progress(warmup, measure)
    split = SplitPoint(pool, inflight)

    async def body() -> None:
        probe = inflight.start(probe_index)
        await asyncio.wait([probe])
        record = probe.result()
        stagger = ((record.end_s or record.start_s) - record.start_s) / concurrency
        begin = inflight.now() + LEAD_S
        base = inflight.next_index
        for w in range(pool.count):
            starts = [begin + j * stagger for j in range(w, concurrency, pool.count)]
            split.plan(w, ("closed", inflight.label, base, starts), len(starts))
        while not progress.stop.is_set() and split.busy():
            who, message = await split.next_message()
            ended = split.handle(who, message)
            if ended is not None:  # at its own end (a Ray worker's report arrives a poll later)
                progress.ended(ended.end_s if ended.end_s is not None else inflight.now())

    fired = await _watched(split, body(), deadline_s)
    await split.stop("point reached --max-duration" if fired else WINDOW_CLOSED)
    await inflight.cancel_all("point reached --max-duration" if fired else WINDOW_CLOSED)  # the probe, if running
    run = closed_window(inflight.run, progress, started, fired, deadline_s, inflight.now(), warmup)
    split.finish(run)
    return run


async def open_split(
    pool: WorkerPool,
    inflight: Inflight,
    rate: float,
    burstiness: float,
    n: int,
    rng: np.random.Generator,
    deadline_s: float,
) -> PointRun:
    """`load.open_loop` over the pool: the arrivals drawn once here, arrival j sent by worker j mod N at its time;
    the window from the arrivals the workers report sent."""
    pool.require_all()
    times = arrival_times(rate, burstiness, n, rng)
    base = inflight.now() + LEAD_S
    first = inflight.next_index
    split = SplitPoint(pool, inflight)
    for w in range(pool.count):
        share = [(first + j, base + float(times[j])) for j in range(w, n, pool.count)]
        split.plan(w, ("open", inflight.label, share), len(share))

    async def body() -> None:
        while split.busy():
            split.handle(*await split.next_message())

    fired = await _watched(split, body(), deadline_s)
    await split.stop("point reached --max-duration")
    sent = sorted(base + float(times[i - first]) for i in split.sent_indices)
    run = open_window(inflight.run, sent, fired, n)
    split.finish(run)
    return run


async def _watched(split: SplitPoint, body: Coroutine[Any, Any, None], deadline_s: float) -> bool:
    """Run a point's `body` until it returns or its watchdog fires at `deadline_s` (True); anything else that ends
    it (Ctrl-C, an error) first stops every worker and records what was in flight."""
    try:
        async with asyncio.timeout(max(deadline_s - split.inflight.now(), 0.0)) as scope:
            await body
    except TimeoutError:
        if not scope.expired():
            await asyncio.shield(_interrupted(split))
            raise
        return True
    except BaseException:
        await asyncio.shield(_interrupted(split))
        raise
    return False


async def _interrupted(split: SplitPoint) -> None:
    """Ctrl-C (the coordinator's task cancelled): every worker told to stop; what they had in flight recorded, the
    coordinator's own probe included."""
    await split.stop(INTERRUPTED)
    await split.inflight.cancel_all(INTERRUPTED)
