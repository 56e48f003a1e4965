"""The server's own running batch, scraped from its Prometheus /metrics while a point runs.

Every server in the engines table (specs/data/engines, `[server.metrics] running`) names its
running-batch gauge there — vLLM's `vllm:num_requests_running` (the emulator exports it too),
SGLang's `sglang:num_running_reqs`, TGI's `tgi_batch_current_size`, llama-server's
`llamacpp:requests_processing` with --metrics, and so on; sampled every 100 ms and averaged
over the window. It counts what the server counts as running (sequences queued or prefilling
over several chunks included), which the client can only infer from token timestamps; its own
error is sampling: against the emulator at 16 streams and a 1.4 s window (14 samples) it read
±0.8% where the client's estimate read within 0.1%. Servers without /metrics (llama.cpp by
default) fall back to the client-side estimate; summary.json keeps both.
"""

from __future__ import annotations

import asyncio
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tokenroof.model.speculative import MeasuredAcceptance, measured_acceptance
from tokenroof.specs.engines import server_metrics

GAUGES = tuple(server_metrics("running").values())  # each server's running-batch gauge, in server-name order
PREEMPTIONS = tuple(server_metrics("preemptions").values())  # each server's preemption counter, where it has one
SPEC = ("spec_drafts", "spec_draft_tokens", "spec_accepted")  # speculative decoding's counters, per server
SPEC_NAMES = {key: tuple(server_metrics(key).values()) for key in SPEC}  # type: ignore[arg-type]
BY_POSITION = tuple(server_metrics("spec_accepted_by_position").values())
CACHE = ("prefix_cache_queries", "prefix_cache_hits")  # prefix caching's counters, per server
CACHE_NAMES = {key: tuple(server_metrics(key).values()) for key in CACHE}  # type: ignore[arg-type]
PERIOD_S = 0.1
# the boards' own meters as NVIDIA's dcgm-exporter names them (its default counters): energy since boot in mJ (a
# counter, one series per GPU), and the power draw in W (a gauge); summed over the GPUs a scrape finds
ENERGY_MJ = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER_W = "DCGM_FI_DEV_POWER_USAGE"
MJ_PER_J = 1e3


def running_from_metrics(text: str) -> float | None:
    """Sum of the first running-batch gauge found (summed over label sets, e.g. several engines); None when absent
    or unusable (NaN, negative, infinite).

    prometheus_client's parser reads the exposition format (labels with spaces or escaped quotes, an optional
    sample timestamp after the value); text it cannot parse counts as no gauge.
    """
    value = metrics_from_text(text)[0]
    return None if value is None or math.isnan(value) else value


def parse_metrics(text: str) -> dict[str, float] | None:
    """The known samples of a /metrics text, each summed over its label sets (by drafted position apart:
    `name[k]`); None when the text does not parse."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    counters = (*SPEC_NAMES.values(), *CACHE_NAMES.values())
    wanted = set(GAUGES) | set(PREEMPTIONS) | {n for names in counters for n in names} | {ENERGY_MJ, POWER_W}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                # the parser names a counter's samples <name>_total; DCGM's counter has no such suffix
                name = ENERGY_MJ if sample.name == f"{ENERGY_MJ}_total" else sample.name
                if name in BY_POSITION:
                    name = f"{name}[{int(sample.labels.get('position', 0))}]"
                elif name not in wanted:
                    continue
                elif name in (ENERGY_MJ, POWER_W):  # one series per board, kept apart (a MIG instance repeats its
                    # board's device-level reading under the same UUID: kept once)
                    board = board_key(sample.labels.get("gpu", ""), sample.labels.get("UUID", ""))
                    found[f"{name}@{board}"] = float(sample.value)
                    continue
                found[name] = found.get(name, 0.0) + float(sample.value)
    except (ValueError, TypeError, IndexError):
        return None
    return found


def first_of(found: dict[str, float], names: tuple[str, ...]) -> float | None:
    """The first of `names` found; NaN where it is not a finite non-negative number (a bad sample)."""
    value = next((found[n] for n in names if n in found), None)
    return value if value is None or (math.isfinite(value) and value >= 0) else math.nan


def metrics_from_text(text: str) -> tuple[float | None, float | None]:
    """The running-batch gauge and the preemption counter (each the first of the known names found, summed over
    label sets); None where absent, NaN where present but not a finite non-negative number (a bad sample)."""
    found = parse_metrics(text)
    if found is None:
        return None, None
    return first_of(found, GAUGES), first_of(found, PREEMPTIONS)


def spec_counters(found: dict[str, float]) -> tuple[float, ...] | None:
    """Speculative decoding's counters — drafts, drafted tokens, accepted tokens, then accepted by position — or None
    when the server exports none (it does not speculate, or has no such counters) or one is not a count."""
    values = [first_of(found, SPEC_NAMES[key]) for key in SPEC]
    if any(v is None or math.isnan(v) for v in values):
        return None
    by_position = []
    for k in range(64):
        value = next((found[f"{n}[{k}]"] for n in BY_POSITION if f"{n}[{k}]" in found), None)
        if value is None:
            break
        by_position.append(value)
    return (*values, *by_position)  # type: ignore[arg-type]


def cache_counters(found: dict[str, float]) -> tuple[float, float] | None:
    """Prefix caching's counters — prompt tokens queried, and hit — or None when the server exports none."""
    queries, hits = (first_of(found, CACHE_NAMES[key]) for key in CACHE)
    if queries is None or hits is None or math.isnan(queries) or math.isnan(hits):
        return None
    return queries, hits


PowerReading = dict[str, tuple[float | None, float | None]]  # board → (joules since boot, watts now)


def board_key(gpu: str, uuid: str) -> str:
    """A board's key in a reading: DCGM's `gpu` index and `UUID` labels, as 'index|UUID' (either may be empty)."""
    return f"{gpu}|{uuid}"


def board_name(board: str) -> str:
    """A board as a person reads it: 'GPU 0 (GPU-5f3e…)', or whichever of the two it has."""
    gpu, _, uuid = board.partition("|")
    if gpu and uuid:
        return f"GPU {gpu} ({uuid})"
    return f"GPU {gpu}" if gpu else uuid or "the unlabelled board"


def names_board(name: str, board: str) -> bool:
    """Whether a --power-gpus name is this board: its index, its UUID, or the start of its UUID from 'GPU-' and at
    least four more characters (as CUDA_VISIBLE_DEVICES takes a UUID's prefix; dcgm-exporter labels a MIG
    instance's series with its parent GPU's UUID, so that is the one to give)."""
    gpu, _, uuid = board.partition("|")
    prefix = len(name) >= len("GPU-") + 4 and name.startswith("GPU-") and uuid.startswith(name)
    return (name in (gpu, uuid) and bool(name)) or prefix


def board_chosen(board: str, gpus: frozenset[str] | None) -> bool:
    """Whether `--power-gpus` counts this board: every board without a choice, else one whose index or UUID (or the
    UUID's start) is named (dcgm-exporter lists every GPU of its host, the server's and its neighbours')."""
    return gpus is None or any(names_board(name, board) for name in gpus)


def power_reading(found: dict[str, float], gpus: frozenset[str] | None = None) -> PowerReading | None:
    """The boards' meters in one scrape, by board ('index|UUID'; only those `gpus` names, where given): joules since
    boot and watts now, None where a board lacks the series or its value is not a finite non-negative number; None
    when there is no board."""
    boards: dict[str, list[float | None]] = {}
    for key, value in found.items():
        name, at, board = key.partition("@")
        if at and name in (ENERGY_MJ, POWER_W) and board_chosen(board, gpus):
            slot = boards.setdefault(board, [None, None])
            usable = math.isfinite(value) and value >= 0
            slot[0 if name == ENERGY_MJ else 1] = (value / MJ_PER_J if name == ENERGY_MJ else value) if usable else None
    return {b: (v[0], v[1]) for b, v in boards.items()} or None


def counter_watts(readings: list[tuple[float, PowerReading]], board: str, w0: float, w1: float) -> float | None:
    """One board's mean power over [w0, w1] from its energy counter: the rise between the first and last times a new
    value appeared inside the window (an exporter refreshes its counter every collect interval, 30 s by default for
    dcgm-exporter: the time of a scrape that read an old value says nothing), over the time between them; after a
    drop (a GPU or driver reset) only the readings after it count. None: fewer than two new values in the window."""
    changes: list[tuple[float, float]] = []
    previous = None
    for t, reading in readings:
        joules = reading.get(board, (None, None))[0]
        if joules is None:
            continue
        if previous is not None and joules != previous and w0 <= t <= w1:
            if changes and joules < changes[-1][1]:
                changes = []  # the counter went back: start again after it
            changes.append((t, joules))
        previous = joules
    if len(changes) < 2 or changes[-1][0] <= changes[0][0]:
        return None
    return (changes[-1][1] - changes[0][1]) / (changes[-1][0] - changes[0][0])


def power_in(
    readings: list[tuple[float, PowerReading]], w0: float, w1: float, url: str
) -> tuple[dict[str, Any] | None, str | None]:
    """The boards' mean power over [w0, w1], summed over the boards the endpoint lists (every board's counter, as
    `counter_watts`; where any board's counter did not move, the power gauges' means instead), and why there is
    none where there is none."""
    boards = sorted({b for _, r in readings for b in r})
    where = metrics_url(url)
    if not boards:
        return None, f"{where} had no {ENERGY_MJ} or {POWER_W} series in the window"
    each = [counter_watts(readings, b, w0, w1) for b in boards]
    if all(w is not None for w in each):
        source = f"measured: {ENERGY_MJ} (the boards' energy counters) at {where}, {counted(boards)}"
        return {"watts_mean": sum(w for w in each if w is not None), "gpus": len(boards), "source": source}, None
    means = []
    for board in boards:
        gauge = [r[board][1] for t, r in readings if w0 <= t <= w1 and board in r and r[board][1] is not None]
        if not gauge:
            return None, (
                f"{where}: the energy counter of {board_name(board)} did not move in the window and it has no "
                f"{POWER_W} reading (dcgm-exporter collects every 30 s unless told: run it with -c 1000 or less)"
            )
        means.append(sum(g for g in gauge if g is not None) / len(gauge))
    stale = "" if all(w is None for w in each) else "some of "
    source = (
        f"measured: {POWER_W} (the boards' power gauges, mean of the scrapes) at {where}, {counted(boards)}: "
        f"{stale}the energy counters did not move in the window (dcgm-exporter collects every 30 s unless told: "
        "run it with -c 1000 or less)"
    )
    return {"watts_mean": sum(means), "gpus": len(boards), "source": source}, None


def counted(boards: list[str]) -> str:
    """The boards a power figure sums, named: '2 GPUs: GPU 0 (GPU-…), GPU 1 (GPU-…)'."""
    return f"{len(boards)} GPU{'s' if len(boards) != 1 else ''}: {', '.join(board_name(b) for b in boards)}"


def metrics_url(url: str) -> str:
    """The /metrics address of a base URL (given with or without /metrics)."""
    base = url.rstrip("/")
    return base if base.endswith("/metrics") else f"{base}/metrics"


def listed_boards(found: dict[str, float] | None) -> set[str]:
    """The boards a scrape lists DCGM energy or power series for ('index|UUID'), whichever --power-gpus names."""
    return {k.partition("@")[2] for k in found or {} if k.partition("@")[0] in (ENERGY_MJ, POWER_W)}


def no_boards(found: dict[str, float] | None, where: str, gpus: frozenset[str] | None) -> str:
    """Why a scrape gave no board: no DCGM series at all, or none of the boards --power-gpus names (those listed)."""
    listed = sorted(listed_boards(found))
    if gpus is None or not listed:
        return f"{where} has no {ENERGY_MJ} or {POWER_W} series"
    return (
        f"{where} lists no board --power-gpus names ({', '.join(sorted(gpus))}); it lists "
        f"{', '.join(board_name(b) for b in listed)}"
    )


def unlisted(found: dict[str, float] | None, gpus: frozenset[str] | None) -> tuple[str, ...]:
    """The names --power-gpus gives that no board the scrape lists has (by index or UUID); none where it lists no
    board (that is `no_boards`' case)."""
    listed = listed_boards(found)
    if gpus is None or not listed:
        return ()
    return tuple(sorted(g for g in gpus if not any(names_board(g, board) for board in listed)))


def unlisted_remark(missing: tuple[str, ...], where: str) -> str | None:
    """A remark for --power-gpus names no board at `where` has while others matched: the power counts fewer boards
    than were named (a mistyped UUID would otherwise halve a two-board figure unsaid)."""
    if not missing:
        return None
    return (
        f"--power-gpus names {', '.join(missing)}, which no board at {where} has (by index, UUID or UUID prefix): "
        "the power counts only the boards it found"
    )


class Poller(ABC):
    """A /metrics scrape loop run as a task while a point runs: `start` it, `stop` it (cancelled, never raising)."""

    _task: asyncio.Task[None] | None

    @abstractmethod
    async def _run(self) -> None:
        """Scrape every PERIOD_S until cancelled (or until there is nothing to read)."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


@dataclass
class PowerScraper(Poller):
    """The boards' meters from a Prometheus endpoint of their own (dcgm-exporter beside the server: `bench
    --power-metrics URL`), read every 100 ms while a point runs; a failed scrape is counted and the next one tried."""

    session: aiohttp.ClientSession
    url: str
    t0: float
    gpus: frozenset[str] | None = None  # --power-gpus: the boards counted, by index or UUID (None: every one listed)
    readings: list[tuple[float, PowerReading]] = field(default_factory=list)
    failures: int = 0
    failure: str | None = None  # the last failed scrape's reason
    missing: tuple[str, ...] = ()  # --power-gpus names no board listed has, while others matched (`unlisted`)
    _task: asyncio.Task[None] | None = None

    @property
    def where(self) -> str:
        return metrics_url(self.url)

    async def _run(self) -> None:
        where = self.where
        while True:
            try:
                async with self.session.get(where, timeout=aiohttp.ClientTimeout(total=2.0)) as response:
                    found = parse_metrics(await response.text()) if response.status == 200 else None
                    why = f"{where} answered HTTP {response.status}" if response.status != 200 else None
            except (aiohttp.ClientError, TimeoutError, ValueError, UnicodeDecodeError) as exc:
                found, why = None, f"{where} could not be read ({type(exc).__name__})"
            reading = None if found is None else power_reading(found, self.gpus)
            if reading is None:
                self.failures += 1
                self.failure = why or no_boards(found, where, self.gpus)
            else:
                self.readings.append((time.perf_counter() - self.t0, reading))
                self.missing = unlisted(found, self.gpus)
            await asyncio.sleep(PERIOD_S)

    def power_in(self, w0: float, w1: float) -> tuple[dict[str, Any] | None, str | None]:
        power, why = power_in(self.readings, w0, w1, self.url)
        if power is None and not self.readings:
            why = self.failure or why
        return power, why


@dataclass
class BatchScraper(Poller):
    session: aiohttp.ClientSession
    url: str
    t0: float
    samples: list[tuple[float, float]] = field(default_factory=list)
    preemptions: list[tuple[float, float]] = field(default_factory=list)  # the counter's readings, where it has one
    speculation: list[tuple[float, tuple[float, ...]]] = field(default_factory=list)  # spec-decode counter readings
    prefix_cache: list[tuple[float, tuple[float, float]]] = field(default_factory=list)  # prefix-cache readings
    power: list[tuple[float, PowerReading]] = field(default_factory=list)  # DCGM's meters, where /metrics has them
    gpus: frozenset[str] | None = None  # --power-gpus: the boards counted (None: every one listed)
    unmatched: str | None = None  # why the /metrics boards gave no reading: none of them is one --power-gpus names
    missing: tuple[str, ...] = ()  # --power-gpus names no board listed has, while others matched (`unlisted`)
    bad: int = 0  # samples of the gauge that were not a count (NaN, negative, infinite): dropped
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            try:
                async with self.session.get(self.url.rstrip("/") + "/metrics") as response:
                    if response.status != 200:
                        return
                    found = parse_metrics(await response.text())
                value = None if found is None else first_of(found, GAUGES)
                metered = None if found is None else power_reading(found, self.gpus)
                if metered is None and found is not None and self.gpus is not None and power_reading(found):
                    self.unmatched = no_boards(found, metrics_url(self.url), self.gpus)
                if found is None or (value is None and metered is None):
                    return  # no known gauge: stop asking
                preempted = first_of(found, PREEMPTIONS)
                now = time.perf_counter() - self.t0
                drafted = spec_counters(found)
                if drafted is not None:
                    self.speculation.append((now, drafted))
                cached = cache_counters(found)
                if cached is not None:
                    self.prefix_cache.append((now, cached))
                if metered is not None:
                    self.power.append((now, metered))
                    self.missing = unlisted(found, self.gpus)
                if value is None:
                    pass  # the boards' meters without a running-batch gauge: the batch is the client's
                elif math.isnan(value):
                    self.bad += 1
                else:
                    self.samples.append((now, value))
                if preempted is not None and not math.isnan(preempted):
                    self.preemptions.append((now, preempted))
            except (aiohttp.ClientError, TimeoutError, ValueError, IndexError):
                return
            await asyncio.sleep(PERIOD_S)

    def preempted_in(self, w0: float, w1: float) -> float | None:
        """Sequences the server preempted between the readings around [w0, w1] (None: it has no counter)."""
        inside = [v for t, v in self.preemptions if w0 <= t <= w1]
        if len(inside) < 2:
            return None
        return max(inside[-1] - inside[0], 0.0)

    def drafted_in(self, w0: float, w1: float) -> MeasuredAcceptance | None:
        """What the server's proposer drafted and had accepted between the readings around [w0, w1] (None: it does
        not speculate, exports no counters, or fewer than two readings fell in the window)."""
        inside = [v for t, v in self.speculation if w0 <= t <= w1]
        if len(inside) < 2 or len(inside[0]) != len(inside[-1]):
            return None
        delta = [b - a for a, b in zip(inside[0], inside[-1], strict=True)]
        return measured_acceptance(delta[0], delta[1], delta[2], delta[3:])

    def cached_in(self, w0: float, w1: float) -> dict[str, float | None] | None:
        """The server's prefix cache between the readings around [w0, w1]: prompt tokens looked up, hit, and the
        rate (None: no counters, or fewer than two readings in the window)."""
        inside = [v for t, v in self.prefix_cache if w0 <= t <= w1]
        if len(inside) < 2:
            return None
        queries, hits = (max(b - a, 0.0) for a, b in zip(inside[0], inside[-1], strict=True))
        return {"queries_tokens": queries, "hits_tokens": hits, "hit_rate": hits / queries if queries else None}

    @property
    def where(self) -> str:
        return metrics_url(self.url)

    def power_in(self, w0: float, w1: float) -> tuple[dict[str, Any] | None, str | None]:
        """The boards' mean power over [w0, w1] where the server's own /metrics carries DCGM's series (None: not;
        with --power-gpus given, why: it names boards nothing here meters)."""
        if not self.power:
            if self.unmatched is None and self.gpus is not None:
                return None, (
                    f"{self.where} has no {ENERGY_MJ} or {POWER_W} series, so the boards --power-gpus names "
                    "are not metered there: give dcgm-exporter's address with --power-metrics"
                )
            return None, self.unmatched
        return power_in(self.power, w0, w1, self.url)

    def mean_in(self, w0: float, w1: float, limit: float = math.inf) -> float | None:
        """The gauge's mean over [w0, w1] (None: fewer than 5 samples), samples above `limit` (more sequences than
        the client sent: not this run's count) dropped and counted as bad."""
        inside = [v for t, v in self.samples if w0 <= t <= w1]
        usable = [v for v in inside if v <= limit]
        self.bad += len(inside) - len(usable)
        return sum(usable) / len(usable) if len(usable) >= 5 else None
