"""A bench sweep: points in order, every request to JSONL as it ends, summaries to CSV/JSON as points end."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from tokenroof.bench.client import RequestRecord, send
from tokenroof.bench.load import PointRun, closed_loop, open_loop
from tokenroof.bench.scrape import BatchScraper
from tokenroof.bench.selfcheck import LoopMonitor
from tokenroof.bench.summary import PointSummary, summarise
from tokenroof.errors import TokenroofError
from tokenroof.measurements import read_jsonl
from tokenroof.stepmodel import mean_context_tokens

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


@dataclass
class BenchConfig:
    url: str
    concurrencies: list[int] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    burstiness: float = 1.0
    endpoint: str = "completions"
    model: str | None = None
    input_len: int = 128
    output_len: int = 128
    prompts_file: Path | None = None
    warmup: int | None = None  # requests completed before the window opens (default: the concurrency)
    requests_per_point: int | None = None  # completed requests in the window (default: 2 × concurrency, ≥ 16)
    max_duration_s: float = 300.0
    timeout_s: float = 120.0
    out_dir: Path = Path("bench-out")
    resume: bool = False
    api_key: str | None = None
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    max_failure_fraction: float = 0.05
    ignore_eos: bool = True
    seed: int = 0


@dataclass
class Prompts:
    """Synthetic prompts of `input_len` words (one token each on the emulator), or prompts from a JSONL file."""

    config: BenchConfig
    rng: np.random.Generator
    items: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, config: BenchConfig) -> Prompts:
        prompts = cls(config, np.random.default_rng(config.seed))
        if config.prompts_file is not None:
            prompts.items = read_prompts(config.prompts_file)
        return prompts

    def payload(self, index: int, model: str) -> dict[str, Any]:
        cfg = self.config
        item = self.items[index % len(self.items)] if self.items else {}
        max_tokens = int(item.get("max_tokens", cfg.output_len))
        text = item.get("prompt") or " ".join(self.rng.choice(WORDS, size=cfg.input_len))
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


def read_prompts(path: Path) -> list[dict[str, Any]]:
    items = []
    for number, item in read_jsonl(path):
        if isinstance(item, str):
            item = {"prompt": item}
        if not isinstance(item, dict) or not ("prompt" in item or "messages" in item):
            raise TokenroofError(f"{path}:{number}: expected a string or an object with 'prompt' or 'messages'")
        items.append(item)
    if not items:
        raise TokenroofError(f"{path}: no prompts")
    return items


class Recorder:
    """Appends every record to requests.jsonl the moment it ends (flushed), so a crash loses nothing."""

    def __init__(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / "requests.jsonl"
        self.file = self.path.open("a")

    def request(self, record: RequestRecord) -> None:
        self.write({"type": "request", **record.to_json()})

    def write(self, obj: dict[str, Any]) -> None:
        self.file.write(json.dumps(obj) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def finished_points(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Point summaries already in requests.jsonl (for --resume)."""
    path = out_dir / "requests.jsonl"
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    for line in path.read_text().splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        if isinstance(obj, dict) and obj.get("type") == "point":
            done[obj["point"]] = obj
    return done


def validity(summary: PointSummary, run: PointRun, monitor: LoopMonitor, max_failure_fraction: float) -> str | None:
    data = summary.data
    total = data["requests_completed"] + data["requests_failed"]
    if total and data["requests_failed"] / total > max_failure_fraction:
        return (
            f"{data['requests_failed']} of {total} requests failed ({data['failure_reasons']}): "
            "not averaged into the curve"
        )
    if data["requests_completed"] < 3:
        return f"only {data['requests_completed']} requests completed in the window"
    client = monitor.verdict(data["tpot_ms"]["p50"])
    if client:
        return client
    return run.note or None


async def resolve_model(session: aiohttp.ClientSession, cfg: BenchConfig, headers: dict[str, str]) -> str:
    if cfg.model:
        return cfg.model
    try:
        async with session.get(cfg.url.rstrip("/") + "/v1/models", headers=headers) as response:
            data = await response.json(content_type=None)
            return str(data["data"][0]["id"])
    except (aiohttp.ClientError, KeyError, IndexError, TypeError, ValueError, TimeoutError) as exc:
        raise TokenroofError(
            f"cannot list models at {cfg.url}/v1/models ({type(exc).__name__}: {exc}); "
            "is the server up? give --model to skip this"
        ) from None


def api_headers(cfg: BenchConfig) -> dict[str, str]:
    key = cfg.api_key or os.environ.get("TOKENROOF_API_KEY") or os.environ.get("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


ProgressHook = Callable[[str, int, int], None]  # (point label, requests just ended, window target)


async def run_bench(cfg: BenchConfig, progress: ProgressHook | None = None) -> list[dict[str, Any]]:
    """Run every point; returns the point summaries (resumed ones included), in order."""
    if not cfg.concurrencies and not cfg.rates:
        raise TokenroofError("give --concurrency and/or --request-rate")
    if any(c < 1 for c in cfg.concurrencies) or any(r <= 0 for r in cfg.rates) or cfg.burstiness <= 0:
        raise TokenroofError("concurrencies must be ≥ 1, request rates and burstiness > 0")
    if cfg.input_len < 1 or cfg.output_len < 2:
        raise TokenroofError("--input-len must be ≥ 1 and --output-len ≥ 2 (TPOT needs two tokens)")
    done = finished_points(cfg.out_dir) if cfg.resume else {}
    if not cfg.resume and (cfg.out_dir / "requests.jsonl").exists():
        raise TokenroofError(f"{cfg.out_dir}/requests.jsonl exists: pass --resume to continue it, or another --out")
    prompts = Prompts.load(cfg)
    headers = api_headers(cfg)
    recorder = Recorder(cfg.out_dir)
    url = cfg.url.rstrip("/") + ("/v1/chat/completions" if cfg.endpoint == "chat" else "/v1/completions")
    summaries: list[dict[str, Any]] = []
    model = cfg.model or ""
    t0 = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            model = await resolve_model(session, cfg, headers)
            points = [("concurrency", float(c)) for c in cfg.concurrencies] + [("rate", r) for r in cfg.rates]
            for kind, value in points:
                label = f"{kind}={value:g}"
                if label in done:
                    summaries.append(done[label])
                    continue

                async def one(record: RequestRecord) -> RequestRecord:
                    payload = prompts.payload(record.index, model)
                    return await send(session, url, payload, record, t0, cfg.timeout_s, headers)

                target = cfg.requests_per_point or max(2 * int(value), 16) if kind == "concurrency" else 0

                def on_record(record: RequestRecord, _label: str = label, _target: int = target) -> None:
                    recorder.request(record)
                    if progress:
                        progress(_label, 1, _target)

                monitor = LoopMonitor()
                monitor.start()
                scraper = BatchScraper(session, cfg.url, t0)
                scraper.start()
                if kind == "concurrency":
                    run = await closed_loop(
                        label, int(value), one, on_record, t0, cfg.warmup or int(value), target, cfg.max_duration_s
                    )
                else:
                    n = cfg.requests_per_point or max(int(value * 30), 32)
                    run = await open_loop(label, value, cfg.burstiness, n, one, on_record, t0, rng, cfg.timeout_s)
                await monitor.stop()
                await scraper.stop()
                summary = summarise(label, kind, value, run.records, run.window_s, cfg.ttft_slo_ms, cfg.tpot_slo_ms)
                server_batch = scraper.mean_in(*run.window_s)
                summary.data["batch_client"] = summary.data["batch"]
                summary.data["batch_server"] = server_batch
                summary.data["batch_source"] = "server /metrics" if server_batch is not None else "client timestamps"
                if server_batch is not None:
                    summary.data["batch"] = server_batch
                summary.invalid = validity(summary, run, monitor, cfg.max_failure_fraction)
                summary.data["client_loop_lag_p99_ms"] = monitor.lag_p99_ms
                summary.data["client_note"] = monitor.note(summary.data["tpot_ms"]["p50"])
                summary.data["client_cpu_fraction"] = monitor.cpu_fraction
                record = summary.to_json()
                recorder.write(record)
                summaries.append(record)
                write_outputs(cfg, model, summaries)
    except aiohttp.ClientError as exc:
        raise TokenroofError(f"{cfg.url}: {exc}") from None
    finally:
        recorder.close()
    write_outputs(cfg, model, summaries)
    return summaries


def write_outputs(cfg: BenchConfig, model: str, summaries: list[dict[str, Any]]) -> None:
    """summary.json (everything) and summary.csv (valid points, DESIGN.md format, read by `predict`)."""
    (cfg.out_dir / "summary.json").write_text(
        json.dumps({"url": cfg.url, "model": model, "points": summaries}, indent=2)
    )
    lines = [
        f"# tokenroof bench {cfg.url} model={model} endpoint={cfg.endpoint} input_len={cfg.input_len} "
        "batch_kind=running tpot_kind=tpot "
        f"output_len={cfg.output_len}",
        "# batch = time-averaged running batch (from the server's /metrics gauge where it has one, else from client "
        "timestamps); throughput = output tokens/s in the steady-state window; tpot_ms = mean TPOT excl. the 1st token",
    ]
    rows = ["batch,throughput_tok_s,tpot_ms,context_tokens,ttft_ms"]
    for s in summaries:
        if s.get("invalid"):
            lines.append(f"# left out {s['point']}: {s['invalid']}")
            continue
        lines.append(
            f"# {s['point']}: {s['requests_completed']} requests in the window, output tokens from "
            f"{s['output_tokens_source']}"
        )
        prompt = s["prompt_tokens_mean"] if s["prompt_tokens_mean"] is not None else cfg.input_len
        context = mean_context_tokens(prompt, s["output_tokens_mean"])
        rows.append(
            f"{s['batch']:.4g},{s['throughput_tok_s']:.6g},{s['tpot_ms']['mean']:.6g},{context:.5g},"
            f"{s['ttft_ms']['mean']:.6g}"
        )
    (cfg.out_dir / "summary.csv").write_text("\n".join(lines + rows) + "\n")
