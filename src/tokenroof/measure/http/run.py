"""A bench sweep: points in order, every request to JSONL as it ends, summaries to CSV/JSON as points end."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.io.csvio import write_rows
from tokenroof.io.measurements import read_jsonl
from tokenroof.measure.http.client import REDACTION, Client, RequestRecord, error_reason, open_client, send
from tokenroof.measure.http.config import BenchConfig, Endpoints, api_key, check_config, run_settings
from tokenroof.measure.http.load import Inflight, PointRun, closed_loop, open_loop
from tokenroof.measure.http.record import Notice, Previous, Recorder, check_settings, read_previous
from tokenroof.measure.http.redact import Redactor
from tokenroof.measure.http.scrape import BatchScraper, PowerScraper, unlisted_remark
from tokenroof.measure.http.selfcheck import LoopMonitor, client_bound
from tokenroof.measure.http.summary import PointSummary, describe_failures, summarise
from tokenroof.measure.http.workers import (
    RayWorkerPool,
    WorkerPool,
    WorkerSetup,
    closed_split,
    open_split,
    require_ray,
)
from tokenroof.model.stepmodel import mean_context_tokens

# synthetic prompts: random common English words (one token each in most tokenizers; exactly one on the emulator)
WORDS = (
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
)


async def resolve_model(client: Client, cfg: BenchConfig, endpoints: Endpoints, redactor: Redactor) -> str:
    if cfg.model:
        return cfg.model
    where = redactor.text(endpoints.api("models"))
    hint = "is the server up? give --model to skip this"
    try:
        async with (
            asyncio.timeout(cfg.timeout_s),
            client.session.get(endpoints.api("models"), headers=client.headers) as r,
        ):
            status, body = r.status, await r.read()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TokenroofError(
            redactor.text(f"cannot list models at {where} ({type(exc).__name__}: {exc}); {hint}")
        ) from None
    if status != 200:
        raise TokenroofError(
            redactor.text(f"cannot list models at {where}: HTTP {status}: {error_reason(body)}; {hint}")
        )
    try:
        return str(json.loads(body)["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise TokenroofError(f"cannot list models at {where}: the answer is not an OpenAI model list; {hint}") from None


async def probe_server(client: Client, endpoints: Endpoints, timeout_s: float) -> dict[str, Any]:
    """What the server says of itself where it can: llama-server answers GET /props with its slots (`-np`), which a
    batch cap for it changes (advise says so). Empty for any other server, or when the probe fails: it is optional."""
    try:
        async with (
            asyncio.timeout(min(timeout_s, 10.0)),
            client.session.get(endpoints.root + "/props", headers=client.headers) as r,
        ):
            if r.status != 200:
                return {}
            props = json.loads(await r.read())
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return {}
    slots = props.get("total_slots") if isinstance(props, dict) else None
    if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1:
        return {"server": "llama-server", "server_slots": slots}
    return {}


@dataclass
class Prompts:
    """Synthetic prompts of `input_len` tokens as the server counts them (`words_per_prompt` words, sized on it:
    `calibrate_words`), or prompts from a JSONL file.

    A synthetic prompt is drawn from (seed, salt, point, request index): the same request gets the same prompt
    however the run goes (a resumed point included), and a new run's salt gives new prompts, so a server's
    prompt cache (llama-server's, vLLM's prefix cache) never serves a repeated run from memory."""

    config: BenchConfig
    salt: int = 0
    items: list[dict[str, Any]] = field(default_factory=list)
    words_per_prompt: int | None = None  # None: a word a token, until calibrated

    @classmethod
    def load(cls, config: BenchConfig, salt: int = 0) -> Prompts:
        prompts = cls(config, salt)
        if config.prompts_file is not None:
            prompts.items = read_prompts(config.prompts_file)
        return prompts

    def words(self, point: str, index: int, group: int | None = None) -> str:
        """Request `index`'s synthetic prompt; with shared prefixes, one of the run's prefixes (drawn per request,
        unless `group` says which) and then words of its own, the prefix's words scaled as the calibration scaled
        the prompt's."""
        cfg = self.config
        key = int.from_bytes(hashlib.sha256(point.encode()).digest()[:8], "little")
        rng = np.random.default_rng([cfg.seed, self.salt, key, index & 0xFFFFFFFFFFFF])
        size = cfg.input_len if self.words_per_prompt is None else self.words_per_prompt
        if not cfg.prefix_len:
            return " ".join(rng.choice(WORDS, size=size))
        shared = min(round(cfg.prefix_len * size / cfg.input_len), size - 1)
        drawn = int(rng.integers(cfg.num_prefixes))  # the first draw: `group_of` repeats it
        group = drawn if group is None else group
        prefix = np.random.default_rng([cfg.seed, self.salt, PREFIX_STREAM, group]).choice(WORDS, size=shared)
        return " ".join([*prefix, *rng.choice(WORDS, size=size - shared)])

    def group_of(self, point: str, index: int) -> int | None:
        """Which shared prefix request `index`'s synthetic prompt starts with (None: no prefixes, or a prompts
        file)."""
        cfg = self.config
        if not cfg.prefix_len or self.items:
            return None
        key = int.from_bytes(hashlib.sha256(point.encode()).digest()[:8], "little")
        return int(np.random.default_rng([cfg.seed, self.salt, key, index & 0xFFFFFFFFFFFF]).integers(cfg.num_prefixes))

    def payload(
        self, index: int, model: str, point: str = "", max_tokens: int | None = None, group: int | None = None
    ) -> dict[str, Any]:
        cfg = self.config
        item = self.items[index % len(self.items)] if self.items else {}
        max_tokens = int(item.get("max_tokens", cfg.output_len)) if max_tokens is None else max_tokens
        text = item.get("prompt") or self.words(point, index, group)
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
        }
        if cfg.ignore_eos:
            body.update({"ignore_eos": True, "min_tokens": max_tokens})
        if cfg.endpoint == "chat":
            body["messages"] = item.get("messages") or [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        return body


PREFIX_STREAM = 0x5052454649580000  # the random stream of the shared prefixes (apart from every point's)
CALIBRATION = "calibration"  # the point label of the requests that find the words per prompt (never measured)
CALIBRATION_TRIES = 3


async def calibrate_words(client: Client, prompts: Prompts, model: str) -> tuple[int, str, list[RequestRecord]]:
    """Words per synthetic prompt that make `input_len` prompt tokens as the server counts them, and how that was
    found. `vllm bench serve`'s random prompts are `input_len` tokens of the model's own tokenizer; bench has no
    tokenizer, so it asks the server: a prompt of n words (max_tokens 1) comes back with its usage's prompt tokens t,
    and the next try has n × input_len / t words (a BOS token or a chat template's tokens included, as the server
    prefills them), up to three tries, the closest kept. A server that reports no usage, or fails, leaves one word
    per token, and the answer says it approximates. The requests are returned to be recorded (never measured)."""
    target = prompts.config.input_len
    words, sent = target, []
    tried: list[tuple[int, int, int]] = []  # (|tokens − input_len|, words, tokens)
    for attempt in range(CALIBRATION_TRIES):
        prompts.words_per_prompt = words
        payload = prompts.payload(attempt, model, CALIBRATION, max_tokens=1)
        record = await send(client, payload, RequestRecord(CALIBRATION, attempt, client.now()))
        sent.append(record)
        if not record.ok or not record.prompt_tokens:
            why = record.error or "the server reported no prompt tokens (usage)"
            prompts.words_per_prompt = None if not tried else min(tried)[1]
            kept = prompts.words_per_prompt or target
            return kept, f"{kept} words, not calibrated on the server ({why}): prompt tokens approximate", sent
        tried.append((abs(record.prompt_tokens - target), words, record.prompt_tokens))
        if record.prompt_tokens == target:
            break
        words = max(1, round(words * target / record.prompt_tokens))
        if any(words == w for _, w, _ in tried):
            break
    _, words, tokens = min(tried)
    prompts.words_per_prompt = words
    return words, f"{words} words, {tokens} prompt tokens as the server counted them", sent


async def warm_prefixes(client: Client, prompts: Prompts, model: str) -> list[RequestRecord]:
    """With shared prefixes, one request (max_tokens 1) carrying each prefix before the sweep, so every point
    measures a server whose cache holds them, as one in service does (a point's first request of a prefix would
    otherwise be a miss the next point never sees). Returned to be recorded, never measured."""
    sent = []
    for group in range(prompts.config.num_prefixes if prompts.config.prefix_len else 0):
        index = CALIBRATION_TRIES + group  # after calibrate_words' requests: prompts of their own
        payload = prompts.payload(index, model, CALIBRATION, max_tokens=1, group=group)
        sent.append(await send(client, payload, RequestRecord(CALIBRATION, index, client.now())))
    return sent


def read_prompts(path: Path) -> list[dict[str, Any]]:
    items = []
    for number, item in read_jsonl(path):
        if isinstance(item, str):
            item = {"prompt": item}
        if not isinstance(item, dict) or not ("prompt" in item or "messages" in item):
            raise TokenroofError(f"{path}:{number}: expected a string or an object with 'prompt' or 'messages'")
        tokens = item.get("max_tokens", 1)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise TokenroofError(f"{path}:{number}: max_tokens must be a whole number ≥ 1, got {tokens!r}")
        items.append(item)
    if not items:
        raise TokenroofError(f"{path}: no prompts")
    return items


def validity(summary: PointSummary, run: PointRun, monitor: LoopMonitor, max_failure_fraction: float) -> str | None:
    data = summary.data
    if any(w.get("exited") for w in run.clients):  # part of the client went: it explains whatever else is wrong
        return run.note
    total = data["requests_completed"] + data["requests_failed"]
    if total and data["requests_failed"] / total > max_failure_fraction:
        return (
            f"{data['requests_failed']} of {total} requests failed ({describe_failures(data['failure_reasons'])}): "
            "not averaged into the curve"
        )
    if data["requests_completed"] < 3:
        return f"only {data['requests_completed']} requests completed in the window"
    tpot = data["tpot_ms"]["p50"]
    client = monitor.verdict(tpot)
    for worker in run.clients:  # bench --workers: each client process checked on its own
        who = f"worker {worker['worker']} of {len(run.clients)}"
        client = client or client_bound(worker["lag_p99_ms"], worker["cpu_fraction"], tpot, who)
    if client:
        return client
    return run.note or None


ProgressHook = Callable[[str, int, int], None]  # (point label, requests just ended, expected requests)


@dataclass
class Bench:
    """One sweep in progress: the client, the prompts, where records go, what an earlier run left."""

    cfg: BenchConfig
    client: Client
    endpoints: Endpoints
    model: str
    prompts: Prompts
    recorder: Recorder
    redactor: Redactor
    previous: Previous
    progress: ProgressHook | None = None
    notice: Notice | None = None
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    server: dict[str, Any] = field(default_factory=dict)  # what the server said of itself (probe_server)
    pool: WorkerPool | None = None  # bench --workers N > 1 or --ray: the client processes that send the requests

    def say(self, text: str) -> None:
        if self.notice is not None:
            self.notice(self.redactor.text(text))

    async def sweep(self) -> list[dict[str, Any]]:
        """Every point in order; valid points an earlier run finished are kept, the rest measured."""
        cfg = self.cfg
        kept = self.previous.valid_points()
        points = [("concurrency", float(c)) for c in cfg.concurrencies] + [("rate", r) for r in cfg.rates]
        summaries: list[dict[str, Any]] = []
        for kind, value in points:
            label = f"{kind}={value:g}"
            if label in kept:
                self.say(f"{label}: kept from {self.recorder.path}")
                summaries.append(kept[label])
                continue
            self.explain_rerun(label)
            summaries.append(await self.measure(kind, value))
            write_outputs(cfg, self.model, summaries, self.redactor, self.server, self.client_info())
        write_outputs(cfg, self.model, summaries, self.redactor, self.server, self.client_info())
        return summaries

    def client_info(self) -> dict[str, Any]:
        """summary.json's word on the client: its worker processes and their clock check (none: one process)."""
        return {} if self.pool is None else self.pool.client()

    def explain_rerun(self, label: str) -> None:
        last = self.previous.points.get(label)
        if last is not None:
            self.say(f"{label}: measuring again, its last attempt was invalid ({last['invalid']})")
        elif label in self.previous.attempts:
            self.say(f"{label}: measuring again, its last attempt did not finish")

    async def send_one(self, record: RequestRecord) -> RequestRecord:
        record.prefix_group = self.prompts.group_of(record.point, record.index)
        return await send(self.client, self.prompts.payload(record.index, self.model, record.point), record)

    def on_send(self, attempt: int, record: RequestRecord) -> None:
        """Write ahead: a request is on file from the moment it is sent, so a crash (SIGKILL, power) cannot lose it;
        the run that resumes records each one that never ended as cut by the crash (`account_for_crash`)."""
        sent = {"type": "sent", "point": record.point, "index": record.index, "start_s": record.start_s}
        self.recorder.write({**sent, "attempt": attempt})

    def on_record(self, expected: int, record: RequestRecord) -> None:
        if record.error:
            record.error = self.redactor.text(record.error)
        self.recorder.request(record)
        if self.progress and record.error_type != "cancelled":
            self.progress(record.point, 1, expected)

    async def measure(self, kind: str, value: float) -> dict[str, Any]:
        """One point under its watchdog; its summary is written after its last request."""
        cfg, label = self.cfg, f"{kind}={value:g}"
        attempt = self.previous.attempts.get(label, 0) + 1
        self.recorder.write({"type": "start", "point": label, "attempt": attempt})
        if kind == "concurrency":
            measure = cfg.requests_per_point or max(2 * int(value), 16)
            warmup = cfg.warmup if cfg.warmup is not None else int(value)
            expected = 1 + warmup + measure  # the probe, the warm-up, the window
        else:
            expected = cfg.requests_per_point or max(int(value * 30), 32)
        on_record = functools.partial(self.on_record, expected)
        inflight = Inflight(label, self.send_one, on_record, self.client.t0, self.previous.next_index.get(label, 0))
        inflight.on_send = functools.partial(self.on_send, attempt)
        deadline_s = inflight.now() + cfg.max_duration_s
        monitor = LoopMonitor()
        gpus = None if cfg.power_gpus is None else frozenset(cfg.power_gpus)
        scraper = BatchScraper(self.client.session, self.endpoints.root, self.client.t0, gpus=gpus)
        meters = None
        if cfg.power_metrics_url is not None:
            meters = PowerScraper(self.client.session, cfg.power_metrics_url, self.client.t0, gpus)
            meters.start()
        monitor.start()
        scraper.start()
        try:
            if self.pool is not None and kind == "concurrency":
                run = await closed_split(self.pool, inflight, int(value), warmup, measure, deadline_s, -attempt)
            elif self.pool is not None:
                run = await open_split(self.pool, inflight, value, cfg.burstiness, expected, self.rng, deadline_s)
            elif kind == "concurrency":
                run = await closed_loop(inflight, int(value), warmup, measure, deadline_s, probe_index=-attempt)
            else:
                run = await open_loop(inflight, value, cfg.burstiness, expected, self.rng, deadline_s)
        finally:
            await monitor.stop()
            await scraper.stop()
            if meters is not None:
                await meters.stop()
        monitor.helpers_cpu_s = sum(w["cpu_s"] for w in run.clients)
        summary = self.point_summary(label, kind, value, run, monitor, scraper, meters)
        summary["attempt"] = attempt
        self.recorder.write(summary)
        return summary

    @staticmethod
    def power_of(
        data: dict[str, Any], run: PointRun, scraper: BatchScraper, meters: PowerScraper | None
    ) -> dict[str, Any] | None:
        """The boards' mean power over the window and the energy per output token it makes (None: no meter read);
        from --power-metrics where given (a remark says why it gave nothing), else the server's own /metrics."""
        power, why = scraper.power_in(*run.window_s) if meters is None else meters.power_in(*run.window_s)
        if why is not None:
            run.remarks.append(f"no power reading: {why}")
        source = scraper if meters is None else meters
        partly = unlisted_remark(source.missing, source.where) if power is not None else None
        if partly is not None:
            run.remarks.append(partly)
        if meters is not None and meters.failures and power is not None:
            run.remarks.append(f"{meters.failures} scrape(s) of the power endpoint failed (last: {meters.failure})")
        if power is None:
            return None
        tokens_s = data.get("throughput_tok_s") or 0.0
        power["energy_j_per_output_token"] = power["watts_mean"] / tokens_s if tokens_s > 0 else None
        return power

    def point_summary(
        self,
        label: str,
        kind: str,
        value: float,
        run: PointRun,
        monitor: LoopMonitor,
        scraper: BatchScraper,
        meters: PowerScraper | None = None,
    ) -> dict[str, Any]:
        cfg = self.cfg
        summary = summarise(label, kind, value, run.records, run.window_s, cfg.ttft_slo_ms, cfg.tpot_slo_ms)
        data = summary.data
        # a closed loop cannot run more sequences than it holds in flight: a larger reading is not this run's
        server_batch = scraper.mean_in(*run.window_s, limit=value if kind == "concurrency" else math.inf)
        if scraper.bad:
            run.remarks.append(
                f"the server's running-batch gauge gave {scraper.bad} unusable sample(s) (NaN, negative, infinite, or "
                "above the concurrency): dropped" + ("" if server_batch is not None else "; the batch is the client's")
            )
        data["batch_client"] = data["batch"]
        data["batch_server"] = server_batch
        data["batch_source"] = "server /metrics" if server_batch is not None else "client timestamps"
        if server_batch is not None:
            data["batch"] = server_batch
        data["preemptions"] = scraper.preempted_in(*run.window_s)  # None: the server exports no counter
        drafted = scraper.drafted_in(*run.window_s)  # speculative decoding, where the server speculates
        if drafted is not None:
            data["speculation"] = drafted.to_dict()
        cache = scraper.cached_in(*run.window_s)  # prefix caching, where the server counts its hits
        if cache is not None:
            data["prefix_cache"] = cache
        data["power"] = self.power_of(data, run, scraper, meters)
        summary.invalid = validity(summary, run, monitor, cfg.max_failure_fraction)
        cached = data["cached_prompt_fraction"]
        if cached is not None and cached > CACHED_REMARK:
            run.remarks.append(
                f"the server served {cached:.0%} of the prompt tokens from its cache: TTFT here is a cache hit's, not "
                "a prefill's (a repeated --prompt-salt, or prompts sharing a prefix)"
            )
        data["remarks"] = run.remarks
        # with worker processes: the worst of them and the coordinator, each one in client_workers
        data["client_loop_lag_p99_ms"] = max([monitor.lag_p99_ms, *(w["lag_p99_ms"] for w in run.clients)])
        readers = [w["lag_p99_ms"] for w in run.clients]  # with workers, they read the streams: their lag is the ITL's
        data["client_note"] = monitor.note(data["tpot_ms"]["p50"], max(readers) if readers else None)
        data["client_cpu_fraction"] = max([monitor.cpu_fraction, *(w["cpu_fraction"] for w in run.clients)])
        if run.clients:
            data["client_workers"] = [
                {
                    "worker": w["worker"],
                    "requests_sent": w["requests"],
                    "client_loop_lag_p99_ms": w["lag_p99_ms"],
                    "client_cpu_fraction": w["cpu_fraction"],
                    "exited": bool(w.get("exited", False)),
                }
                for w in run.clients
            ]
        data["cpu_steal_fraction"], data["other_processes_busy_cores"] = monitor.contention
        return dict(self.redactor.value(summary.to_json()))


def api_headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


async def run_bench(
    cfg: BenchConfig, progress: ProgressHook | None = None, notice: Notice | None = None
) -> list[dict[str, Any]]:
    """Run every point; returns the point summaries (resumed ones included), in order.

    `notice` hears what the user should know as it happens (a repaired file, a point
    measured again). Interrupted (cancelled, e.g. Ctrl-C), the requests in flight are
    recorded as cancelled before the cancellation goes on.
    """
    check_config(cfg)
    if cfg.ray_address is not None:
        require_ray()
    endpoints = Endpoints.of(cfg.url)
    key = api_key(cfg)
    redactor = Redactor.of(cfg.url, key)
    REDACTION.set(redactor.text)  # every error text is redacted before it is cut (client.one_line)
    say = notice or (lambda _text: None)
    path = cfg.out_dir / "requests.jsonl"
    if not cfg.resume and path.exists():
        raise ParameterError(f"{path} exists: pass {{}} to continue it, or another {{}}", "resume", "out")
    previous = read_previous(path, lambda text: say(redactor.text(text))) if cfg.resume else Previous()
    salt = prompt_salt(cfg, previous)
    prompts = Prompts.load(cfg, salt)
    recorder: Recorder | None = None
    try:
        async with open_client(
            endpoints.api("chat/completions" if cfg.endpoint == "chat" else "completions"),
            cfg.timeout_s,
            time.perf_counter(),
            api_headers(key),
        ) as client:
            model = await resolve_model(client, cfg, endpoints, redactor)
            server = await probe_server(client, endpoints, cfg.timeout_s)
            settings = {**run_settings(cfg, model, redactor.text(endpoints.root)), "prompt_salt": salt, **server}
            calibration: list[RequestRecord] = []
            if cfg.prompts_file is None:
                found, calibration = await prompt_words(client, prompts, model, previous, say)
                settings.update(found)
                calibration += await warm_prefixes(client, prompts, model)
            check_settings(previous, settings, path)
            recorder = Recorder(path, redactor)
            if previous.header is None:
                recorder.write({"type": "header", "tool": "tokenroof bench", "settings": settings})
            for record in calibration:
                recorder.write({**record.to_json(), "type": CALIBRATION})
            account_for_crash(previous, recorder, say)
            rng = np.random.default_rng(cfg.seed)
            bench = Bench(cfg, client, endpoints, model, prompts, recorder, redactor, previous, progress, notice, rng)
            bench.server = server
            if cfg.workers == 1 and cfg.ray_address is None:
                return await bench.sweep()
            setups = [
                WorkerSetup(
                    i, cfg.workers, client.url, cfg.timeout_s, client.t0, client.headers, prompts, model, redactor
                )
                for i in range(cfg.workers)
            ]
            bench.pool = (
                WorkerPool(setups) if cfg.ray_address is None else RayWorkerPool(setups, address=cfg.ray_address)
            )
            try:
                await bench.pool.start()
                where = "processes" if cfg.ray_address is None else f"Ray actors ({cfg.ray_address})"
                say(f"{cfg.workers} client worker {where} started (clocks checked)")
                return await bench.sweep()
            finally:
                await asyncio.shield(bench.pool.close())
    except aiohttp.ClientError as exc:
        raise TokenroofError(redactor.text(f"{cfg.url}: {exc}")) from None
    finally:
        if recorder is not None:
            recorder.close()


CRASHED = "cancelled: cut by a crash (sent before the last run stopped, never ended)"


def account_for_crash(previous: Previous, recorder: Recorder, say: Notice) -> None:
    """Every request an earlier run sent but never ended (it was killed) is recorded now, once, as cancelled by
    the crash: requests.jsonl then accounts for every request sent, and its point is measured again."""
    for (label, index), sent in sorted(previous.sent.items()):
        start = sent.get("start_s")
        record = RequestRecord(label, index, float(start) if isinstance(start, int | float) else 0.0)
        record.fail("cancelled", CRASHED)
        recorder.request(record)
    if previous.sent:
        say(
            f"{len(previous.sent)} request(s) sent before the last run stopped never ended: recorded as cut by the "
            "crash"
        )
    previous.sent.clear()


CACHED_REMARK = 0.05  # a point whose server served more of its prompt tokens from its cache says so


async def prompt_words(
    client: Client, prompts: Prompts, model: str, previous: Previous, say: Notice
) -> tuple[dict[str, Any], list[RequestRecord]]:
    """The words per synthetic prompt (header settings `prompt_words`, `prompt_calibration`): a resumed run keeps its
    own, so every request keeps its prompt; a new one calibrates on the server (`calibrate_words`)."""
    if previous.header is not None:  # resumed: the prompts it was measured with (uncalibrated files: a word a token)
        old = previous.header.get("settings")
        words = old.get("prompt_words") if isinstance(old, dict) else None
        if not isinstance(old, dict) or not isinstance(words, int) or isinstance(words, bool) or words < 1:
            return {}, []
        prompts.words_per_prompt = words
        return {"prompt_words": words, "prompt_calibration": old.get("prompt_calibration")}, []
    words, how, sent = await calibrate_words(client, prompts, model)
    say(f"prompts of {prompts.config.input_len} tokens: {how}")
    return {"prompt_words": words, "prompt_calibration": how}, sent


def prompt_salt(cfg: BenchConfig, previous: Previous) -> int:
    """The run's prompt salt: as given, else the resumed run's, else a fresh one."""
    if cfg.prompt_salt is not None:
        return cfg.prompt_salt
    settings = (previous.header or {}).get("settings")
    old = settings.get("prompt_salt") if isinstance(settings, dict) else None
    if isinstance(old, int) and not isinstance(old, bool) and old >= 0:
        return old
    return secrets.randbits(48)


def write_outputs(
    cfg: BenchConfig,
    model: str,
    summaries: list[dict[str, Any]],
    redactor: Redactor,
    server: dict[str, Any] | None = None,
    pool: dict[str, Any] | None = None,
) -> None:
    """summary.json (everything) and summary.csv (valid points, DESIGN.md format, read by `predict`); `pool`: the
    worker pool's description (WorkerPool.client), when bench ran one."""
    url = redactor.text(Endpoints.of(cfg.url).root)
    processes = {f"client_{key}": value for key, value in (pool or {}).items()}
    (cfg.out_dir / "summary.json").write_text(
        json.dumps(
            redactor.value({"url": url, "model": model, **(server or {}), **processes, "points": summaries}), indent=2
        )
    )
    closed = any(s.get("kind") == "concurrency" for s in summaries) or not summaries
    client = "staggered" if closed else ("constant" if math.isinf(cfg.burstiness) else "poisson")
    # the prompt in tokens as the server counted them (usage), where it said
    counted = [s["prompt_tokens_mean"] for s in summaries if not s.get("invalid") and s.get("prompt_tokens_mean")]
    input_len = f"{np.mean(counted):.6g}" if counted else str(cfg.input_len)
    said = f"server={server['server']} " if server else ""
    if client == "poisson" and cfg.burstiness != 1.0:  # gamma gaps of this shape: the replay draws them so
        said += f"burstiness={cfg.burstiness:g} "
    lines = [
        f"tokenroof bench {url} model={model} endpoint={cfg.endpoint} input_len={input_len} "
        f"batch_kind=running tpot_kind=tpot client={client} {said}"
        f"output_len={cfg.output_len} (input_len: the server's mean prompt tokens; --input-len {cfg.input_len})",
        "batch = time-averaged running batch (from the server's /metrics gauge where it has one, else from client "
        "timestamps); throughput = output tokens/s in the steady-state window; tpot_ms = mean TPOT excl. the 1st token",
    ]
    if server:
        lines.append(
            f"the server: llama-server with {server['server_slots']} slots (its GET /props); a batch cap for it is "
            "a restart with a new -np. If it ran without --kv-unified (per-slot KV streams), say so on the first "
            f"line: the setting kv_slots, set to {server['server_slots']}"
        )
    rows = []
    for s in summaries:
        if s.get("invalid"):
            lines.append(redactor.text(f"left out {s['point']}: {s['invalid']}"))
            continue
        lines.append(
            f"{s['point']}: {s['requests_completed']} requests in the window, output tokens from "
            f"{s['output_tokens_source']}"
        )
        prompt = s["prompt_tokens_mean"] if s["prompt_tokens_mean"] is not None else cfg.input_len
        context = mean_context_tokens(prompt, s["output_tokens_mean"])
        concurrency = s["value"] if s.get("kind") == "concurrency" else None  # open-loop points: empty
        rows.append(
            [s["batch"], s["throughput_tok_s"], s["tpot_ms"]["mean"], context, s["ttft_ms"]["mean"], concurrency]
        )
    columns = ("batch", "throughput_tok_s", "tpot_ms", "context_tokens", "ttft_ms", "concurrency")
    write_rows(cfg.out_dir / "summary.csv", lines, columns, rows, {"batch": ".4g", "context_tokens": ".5g"})


def outcome(summaries: list[dict[str, Any]], out_dir: Path) -> tuple[list[str], str | None]:
    """Warnings (each point's first distinct failure reasons, one line each) and, where points are invalid, the
    line that says so (the CLI then exits non-zero)."""
    warnings = [f"{p['point']}: {example}" for p in summaries for example in p.get("failure_examples", [])]
    invalid = [p["point"] for p in summaries if p.get("invalid")]
    if not invalid:
        return warnings, None
    return warnings, (
        f"{len(invalid)} of {len(summaries)} points invalid ({', '.join(invalid)}): left out of "
        f"{out_dir / 'summary.csv'}, details in {out_dir / 'summary.json'}"
    )


def interrupted_line(out_dir: Path) -> str:
    return (
        f"interrupted: every request sent is in {out_dir / 'requests.jsonl'} (those in flight as cancelled), "
        f"finished points in {out_dir / 'summary.csv'}; --resume continues"
    )
