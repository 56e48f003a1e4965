"""bench's settings: the configuration, its checks (finite, in range, integers where integers), the server's URLs."""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from yarl import URL

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.measure.http.redact import Redactor


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
    max_duration_s: float = 300.0  # the watchdog ends a point after this long, in every mode
    timeout_s: float = 120.0
    out_dir: Path = Path("bench-out")
    resume: bool = False
    api_key: str | None = None
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    max_failure_fraction: float = 0.05
    ignore_eos: bool = True
    seed: int = 0
    # the synthetic prompts' salt: None draws one per run (kept by --resume), so a server's prompt cache never
    # serves a second run's prompts; a number repeats a run's prompts (to measure the cache itself)
    prompt_salt: int | None = None
    # shared prefixes: each synthetic prompt's first `prefix_len` tokens are one of `num_prefixes` prefixes (drawn per
    # request), as vllm bench serve's prefix_repetition dataset: the server's prefix cache is what is measured
    prefix_len: int = 0
    num_prefixes: int = 1
    workers: int = 1  # client processes on this host (measure.http.workers): one schedule, every record in one file
    ray_address: str | None = None  # the workers as Ray actors on this cluster ("local" starts one) instead
    # the boards' meters (dcgm-exporter's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION) at a Prometheus endpoint of their own;
    # None: read them from the server's /metrics where it carries them
    power_metrics_url: str | None = None
    # the boards whose meters count, by DCGM's gpu index or UUID (--power-gpus; None: every board listed)
    power_gpus: tuple[str, ...] | None = None


def require(ok: bool, template: str, *parameters: str) -> None:
    """`template` with one `{}` per BenchConfig field it names (the command line shows their flags)."""
    if not ok:
        raise ParameterError(template, *parameters)


def check_config(cfg: BenchConfig) -> None:
    """Every flag finite and in range (nan would silently disable a check), integers where integers."""
    require(bool(cfg.concurrencies or cfg.rates), "give {} and/or {}", "concurrencies", "rates")
    whole = all(math.isfinite(c) and c == round(c) and c >= 1 for c in cfg.concurrencies)
    require(whole, "{}: every value must be a whole number ≥ 1", "concurrencies")
    require(all(math.isfinite(r) and r > 0 for r in cfg.rates), "{}: every value must be finite and > 0", "rates")
    labels = [f"c{c}" for c in cfg.concurrencies] + [f"r{r:g}" for r in cfg.rates]
    require(len(set(labels)) == len(labels), "{}/{}: a value is listed twice", "concurrencies", "rates")
    require(cfg.burstiness > 0, f"{{}} must be > 0 (inf: a constant rate), got {cfg.burstiness:g}", "burstiness")
    timeout = cfg.timeout_s
    require(math.isfinite(timeout) and timeout > 0, f"{{}} must be finite and > 0, got {timeout:g}", "timeout_s")
    for name, slo in (("ttft_slo_ms", cfg.ttft_slo_ms), ("tpot_slo_ms", cfg.tpot_slo_ms)):
        require(slo is None or (math.isfinite(slo) and slo > 0), f"{{}} must be finite and > 0, got {slo}", name)
    require(
        math.isfinite(cfg.max_duration_s) and cfg.max_duration_s > 0,
        f"{{}} must be finite and > 0, got {cfg.max_duration_s:g}",
        "max_duration_s",
    )
    fraction = cfg.max_failure_fraction
    require(0 <= fraction <= 1, f"{{}} must be between 0 and 1, got {fraction:g}", "max_failure_fraction")
    require(
        cfg.input_len >= 1 and cfg.output_len >= 2,
        "{} must be ≥ 1 and {} ≥ 2 (TPOT needs two)",
        "input_len",
        "output_len",
    )
    require(cfg.warmup is None or cfg.warmup >= 0, f"{{}} must be ≥ 0, got {cfg.warmup}", "warmup")
    rpp = cfg.requests_per_point
    require(rpp is None or rpp >= 1, f"{{}} must be ≥ 1, got {rpp}", "requests_per_point")
    require(cfg.seed >= 0, f"{{}} must be ≥ 0, got {cfg.seed}", "seed")
    require(cfg.prompt_salt is None or cfg.prompt_salt >= 0, f"{{}} must be ≥ 0, got {cfg.prompt_salt}", "prompt_salt")
    require(cfg.endpoint in ("completions", "chat"), f"--endpoint must be completions or chat, got {cfg.endpoint!r}")
    require(
        0 <= cfg.prefix_len < cfg.input_len,
        f"{{}} ({cfg.prefix_len}) is part of the prompt: it must be ≥ 0 and shorter than {{}} ({cfg.input_len})",
        "prefix_len",
        "input_len",
    )
    require(cfg.num_prefixes >= 1, f"{{}} must be ≥ 1, got {cfg.num_prefixes}", "num_prefixes")
    require(cfg.workers >= 1, f"{{}} must be ≥ 1, got {cfg.workers}", "workers")
    require(
        cfg.num_prefixes == 1 or cfg.prefix_len > 0,
        "{} counts shared prefixes: give their length, {}",
        "num_prefixes",
        "prefix_len",
    )
    require(
        cfg.prefix_len == 0 or cfg.prompts_file is None, "{} shapes synthetic prompts: drop {}", "prefix_len", "prompts"
    )
    if cfg.power_metrics_url is not None:
        try:
            meters = URL(cfg.power_metrics_url.strip())
        except (ValueError, TypeError):
            meters = URL()
        require(
            meters.scheme in ("http", "https") and bool(meters.host),
            f"{{}} {Redactor.of(cfg.power_metrics_url, None).text(cfg.power_metrics_url)}: give dcgm-exporter's "
            "address as http://HOST:PORT (its /metrics is read)",
            "power_metrics",
        )


@dataclass(frozen=True)
class Endpoints:
    """The server's URLs from its base URL, given with or without the OpenAI `/v1` (query parameters kept)."""

    base: URL

    @classmethod
    def of(cls, url: str) -> Endpoints:
        try:
            parsed = URL(url.strip())
        except (ValueError, TypeError):
            parsed = URL()
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise TokenroofError(f"{Redactor.of(url, None).text(url)}: give the server as http://HOST:PORT")
        path = parsed.path.rstrip("/")
        path = path.removesuffix("/v1")
        return cls(parsed.with_path(path or "/").with_query(parsed.query))

    def api(self, name: str) -> str:
        return str(self.base.with_path(self.base.path.rstrip("/") + "/v1/" + name).with_query(self.base.query))

    @property
    def root(self) -> str:
        """The base without its query, for /metrics."""
        return str(self.base.with_query(None)).rstrip("/")


def api_key(cfg: BenchConfig) -> str | None:
    """--api-key, else the environment's (unless the URL carries its own user:password)."""
    if cfg.api_key:
        if URL(cfg.url.strip()).user is not None:
            raise TokenroofError("give the API key or user:password in the URL, not both")
        return cfg.api_key
    if URL(cfg.url.strip()).user is not None:
        return None
    return os.environ.get("TOKENROOF_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def run_settings(cfg: BenchConfig, model: str, url: str) -> dict[str, Any]:
    """What a measurement depends on (the header of requests.jsonl; --resume must find the same)."""
    digest = hashlib.sha256(cfg.prompts_file.read_bytes()).hexdigest() if cfg.prompts_file else None
    return {
        "url": url,
        "endpoint": cfg.endpoint,
        "model": model,
        "input_len": cfg.input_len,
        "output_len": cfg.output_len,
        "prompts_sha256": digest,
        "ignore_eos": cfg.ignore_eos,
        "burstiness": cfg.burstiness,
        "warmup": cfg.warmup,
        "requests_per_point": cfg.requests_per_point,
        "seed": cfg.seed,
        "ttft_slo_ms": cfg.ttft_slo_ms,
        "tpot_slo_ms": cfg.tpot_slo_ms,
        "max_failure_fraction": cfg.max_failure_fraction,
        **({"prefix_len": cfg.prefix_len, "num_prefixes": cfg.num_prefixes} if cfg.prefix_len else {}),
    }
