"""EngineProfile: what one serving stack achieves on top of the roofline, loaded from a TOML file (data/engines/).

The datasheet gives peaks; an engine decides how much of them a decode step gets and what it
adds per step and per sequence. A profile carries, for one engine and version family:

- `[efficiencies]`: the roofline's `Efficiencies` fields — weight-streaming bandwidth, KV-cache
  read bandwidth and compute as fractions of the peaks, the fixed overhead per step (and per
  layer, for eager frameworks), the all-reduce latency, and `overhead_s_per_seq`, the engine's
  cost per sequence per step (scheduling, sampling: the StepModel's `t_seq_s`);
- `[serving]`: what serving over HTTP adds per sequence per step (detokenisation, output
  processing, streaming), counted for online serving and not for offline decode;
- how prefill is scheduled: `chunked` (prompt tokens share the decode steps, up to a token
  budget per step when `max_num_batched_tokens` is given) or `separate` (prompts in steps of
  their own, decoding paused);
- how its KV cache admits requests (`admission`): `on-demand` (admitted while the prompt's blocks fit, the
  running sequences preempted by recompute when their growth fills the cache: vLLM) or `reserve-output` (admitted
  only while the prompt and its whole output fit beside what every admitted request may still grow to, never
  preempted: TensorRT-LLM's default capacity scheduler, GUARANTEED_NO_EVICT);
- `[accuracy]`: how far its first-principles TPOT missed published curves, leave-one-curve-out
  (benchmarks/first_principles.py), and the quantiles of log(measured / predicted) that set
  the intervals of first-principles answers;
- `[server]`: how its server is driven and watched, the one table of engine flags and metric names:
  `name` (one per server: vLLM V0 and V1 are one `vllm`), `[server.flags]` (the command-line flag for each
  of tokenroof's settings: the batch cap `max_num_seqs`, the step's token budget `max_num_batched_tokens`,
  the `memory_fraction` the server may fill), `[server.metrics]` (its Prometheus gauges: `running`, the
  sequences in the running batch, and `waiting`) and `[server.defaults]`; `server_flags` and
  `server_metrics` read them for every shipped profile (advise's engine flags, bench's gauge scraper).

Fitted profiles are written by `benchmarks/first_principles.py --write`; an engine with fewer than
two published curves keeps physically motivated defaults, and its `[source]` says so.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self

import numpy as np
from pydantic import Field, PlainValidator, model_validator

from tokenroof.errors import ParameterError, TokenroofError, verbatim
from tokenroof.specs.hardware import EfficiencyTerms, Overhead
from tokenroof.specs.precision import canonical_dtype
from tokenroof.specs.validate import (
    Section,
    flag,
    load_toml,
    non_negative,
    number,
    table_error,
    text,
    validated,
    whole,
)

DEFAULT_ENGINE = "generic"  # today's defaults, named: one bandwidth and compute efficiency, 1 ms per step
PREFILL = ("chunked", "separate")
DEFAULT_LEVEL = 0.9
DEFAULT_MEMORY_FRACTION = 0.9  # vLLM's --gpu-memory-utilization: a profile's server without its own default
Setting = Literal["max_num_seqs", "max_num_batched_tokens", "memory_fraction"]  # the [server.flags] keys
Metric = Literal[
    "running",
    "waiting",
    "preemptions",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted",
    "spec_accepted_by_position",
    "prefix_cache_queries",
    "prefix_cache_hits",
]  # the [server.metrics] keys
SERVER_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
CLI_FLAG = re.compile(r"--?[A-Za-z][A-Za-z0-9_-]*")
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # Prometheus exposition format: a metric name


@dataclass(frozen=True)
class Accuracy:
    """First-principles TPOT against published curves, leave-one-curve-out, and the interval it implies.

    `log_error` is the median of log(measured / predicted) TPOT over the held-out points (the profile's bias),
    `log_error_low`/`_high` its quantiles at (1 ∓ level)/2: a first-principles TPOT t has the interval
    [t·e^low, t·e^high] at `interval_level`.
    """

    log_error: float
    log_error_low: float
    log_error_high: float
    interval_level: float = DEFAULT_LEVEL
    curves: int = 0
    points: int = 0
    tpot_error_median: float | None = None  # |TPOT error| as a fraction, held out
    tpot_error_p90: float | None = None
    # an unfitted profile's correction (log): the median of log(measured / predicted) that physically motivated
    # constants showed on other engines' published curves; its step model runs e^bias_correction slower, and the
    # quantiles above are of the corrected errors (0: none, a fitted profile's or generic's)
    bias_correction: float = 0.0

    @property
    def slowdown(self) -> float:
        return math.exp(self.bias_correction)

    def factors(self) -> tuple[float, float]:
        """Multipliers of a first-principles TPOT giving the interval's low and high ends; the interval always holds
        the estimate itself (a profile whose TPOT is mostly too fast has its estimate at the low end)."""
        return math.exp(min(self.log_error_low, 0.0)), math.exp(max(self.log_error_high, 0.0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "curves": self.curves,
            "points": self.points,
            "tpot_error_median": self.tpot_error_median,
            "tpot_error_p90": self.tpot_error_p90,
            "log_error": self.log_error,
            "log_error_low": self.log_error_low,
            "log_error_high": self.log_error_high,
            "interval_level": self.interval_level,
            "bias_correction": self.bias_correction,
        }


@dataclass(frozen=True)
class MemoryReserve:
    """What a server holds on each GPU besides the weights and the KV cache, as vLLM measures it at start-up
    (gpu_worker.determine_available_memory, the KV cache getting the rest of gpu_memory_utilization × memory):

    - the peak activations of its profile step: `profile_tokens` tokens through the MLP (gate and up projections'
      output beside the activation's, 3 × intermediate, and the residual stream) in 16-bit;
    - the profile's sampling of `profile_seqs` sequences: their logits over the vocabulary, `sampler_bytes_per_logit`
      each (fp32 logits and the sampler's copies);
    - memory outside PyTorch's allocator (`non_torch_bytes` on one GPU, `non_torch_bytes_per_tp_doubling` more each
      time --tp doubles: NCCL's and the custom all-reduce's buffers);
    - the driver's own share of the device (`driver_bytes`: nvidia-smi's total less CUDA's, which is what the
      fraction multiplies).

    vLLM sizes its profile step by the GPU (EngineArgs.get_batch_defaults): `large_gpu_profile_tokens` and
    `large_gpu_profile_seqs` on GPUs of `large_gpu_bytes` or more whose name has none of `large_gpu_excludes`;
    V0 without chunked prefill profiles a whole context of the model's when it is at most
    `whole_context_up_to` tokens."""

    driver_bytes: float = 0.0
    non_torch_bytes: float = 0.0
    non_torch_bytes_per_tp_doubling: float = 0.0
    profile_tokens: int = 0
    profile_seqs: int = 0
    sampler_bytes_per_logit: float = 0.0
    large_gpu_bytes: float | None = None
    large_gpu_profile_tokens: int | None = None
    large_gpu_profile_seqs: int | None = None
    large_gpu_excludes: tuple[str, ...] = ()
    whole_context_up_to: int | None = None

    def profile(self, memory_bytes: float, hardware_name: str, model_context: int | None) -> tuple[int, int]:
        """(tokens, sequences) of the profile step this server runs on that GPU for that model."""
        tokens, seqs = self.profile_tokens, self.profile_seqs
        name = hardware_name.lower()
        if (
            self.large_gpu_bytes is not None
            and memory_bytes >= self.large_gpu_bytes
            and not any(x.lower() in name for x in self.large_gpu_excludes)
        ):
            tokens = self.large_gpu_profile_tokens or tokens
            seqs = self.large_gpu_profile_seqs or seqs
        if self.whole_context_up_to is not None and model_context and model_context <= self.whole_context_up_to:
            tokens = max(tokens, model_context)
        return tokens, seqs

    def to_dict(self) -> dict[str, Any]:
        return {
            "driver_bytes": self.driver_bytes,
            "non_torch_bytes": self.non_torch_bytes,
            "non_torch_bytes_per_tp_doubling": self.non_torch_bytes_per_tp_doubling,
            "profile_tokens": self.profile_tokens,
            "profile_seqs": self.profile_seqs,
            "sampler_bytes_per_logit": self.sampler_bytes_per_logit,
            "large_gpu_bytes": self.large_gpu_bytes,
            "large_gpu_profile_tokens": self.large_gpu_profile_tokens,
            "large_gpu_profile_seqs": self.large_gpu_profile_seqs,
            "large_gpu_excludes": list(self.large_gpu_excludes),
            "whole_context_up_to": self.whole_context_up_to,
        }


@dataclass(frozen=True)
class Server:
    """How an engine's server is driven and watched: its flag for each of tokenroof's settings (`Setting`), its
    Prometheus gauges (`Metric`), and the defaults it starts with (absent where they depend on the hardware)."""

    name: str
    flags: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, float] = field(default_factory=dict)
    memory_fraction_of: str = "memory"  # "memory": weights and KV cache share the fraction; "free": after weights
    reserve: MemoryReserve | None = None  # what it holds beside weights and KV cache (None: not modelled)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flags": dict(self.flags),
            "metrics": dict(self.metrics),
            "defaults": dict(self.defaults),
            "memory_fraction_of": self.memory_fraction_of,
            "reserve": None if self.reserve is None else self.reserve.to_dict(),
        }


@dataclass(frozen=True)
class Eager:
    """`[eager]`: the engine run without CUDA graphs. The host launches every layer's kernels from Python each step;
    the launches are asynchronous, so the step takes the longer of them and the GPU's work, and the host binds at
    small batch and high --tp. Not fitted: an estimate, whose spread on either side widens the interval."""

    host_s_per_layer: float
    host_s_per_allreduce: float  # each of a layer's two all-reduces, launched where --tp splits the model
    log_spread_faster: float  # log of how much faster a host may launch than the estimate
    log_spread_slower: float  # and slower

    def to_dict(self) -> dict[str, float]:
        return {
            "host_s_per_layer": self.host_s_per_layer,
            "host_s_per_allreduce": self.host_s_per_allreduce,
            "log_spread_faster": self.log_spread_faster,
            "log_spread_slower": self.log_spread_slower,
        }


@dataclass(frozen=True)
class EngineProfile:
    """One engine and version family: efficiencies, overheads, prefill scheduling, accuracy, sources."""

    key: str
    name: str
    versions: str
    prefill: str
    accuracy: Accuracy
    fitted: bool = False  # constants fitted to published curves (else set by hand, physically motivated)
    max_num_batched_tokens: int | None = None
    efficiencies: Mapping[str, float] = field(default_factory=dict)
    serving: Mapping[str, float] = field(default_factory=dict)
    source: Mapping[str, str] = field(default_factory=dict)
    server: Server | None = None  # None: no server of its own (a framework, or tokenroof's defaults)
    # the KV-cache dtype it keeps when none is given, by weight dtype (absent: the model's 16-bit dtype)
    kv_dtype_by_weights: Mapping[str, str] = field(default_factory=dict)
    eager: Eager | None = None  # what --enforce-eager costs (None: the engine has no eager mode tokenroof knows)
    eager_enforced: bool = False
    admission: str = "on-demand"  # how the KV cache admits requests (module doc): or "reserve-output"

    def enforce_eager(self) -> EngineProfile:
        """This engine without CUDA graphs (`--enforce-eager`, or a release from before them): every layer's kernels
        launched from Python each step, the GPU's work running under those launches (StepModel.t_host_s). Its
        accuracy stays the profile's: the host's spread widens a step's interval only where the launches can set
        the step (`eager_interval_factors`), never a step the GPU's work sets."""
        if self.eager is None:
            known = " or ".join(k for k in list_engines() if load_engine(k).eager is not None)
            if self.key == DEFAULT_ENGINE:
                raise ParameterError(f"{{}} needs {{}} {known}: the engine run without CUDA graphs", "eager", "engine")
            per_layer = float(self.efficiencies.get("overhead_s_per_layer", 0.0))
            if per_layer > 0:
                raise ParameterError(
                    f"engine '{verbatim(self.key)}' launches eagerly already ({per_layer * 1e3:.2g} ms a layer in its "
                    "profile): drop {}",
                    "eager",
                )
            raise ParameterError(
                f"engine '{verbatim(self.key)}' has no eager mode in its profile ([eager]); {{}} applies to {known}",
                "eager",
            )
        if self.eager_enforced:
            return self
        return replace(
            self,
            name=f"{self.name}, eager",
            efficiencies=MappingProxyType(
                {
                    **self.efficiencies,
                    "host_s_per_layer": self.eager.host_s_per_layer,
                    "host_s_per_allreduce": self.eager.host_s_per_allreduce,
                }
            ),
            eager_enforced=True,
        )

    def chunks_prefill_for(self, model_context: int | None) -> bool:
        """Whether this engine, which prefills in steps of its own, chunks prefill instead for a model of
        `model_context` positions: vLLM V0 turns chunked prefill on by default when max_model_len passes
        `whole_context_up_to` (32K; vLLM 0.5.5 on), as its start-up profile does (EngineReserve.profile)."""
        reserve = self.reserve
        if self.prefill != "separate" or reserve is None or reserve.whole_context_up_to is None:
            return False
        return model_context is not None and model_context > reserve.whole_context_up_to

    def eager_interval_factors(
        self, step_s: np.ndarray, fixed_s: float, gpu_s: np.ndarray, host_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each step's interval factors (low, high) on this profile run eagerly: a step whose launches outlast the
        GPU's work widens by the host's spread and the profile's own, independent, so their logs add in quadrature,
        but never below the GPU's own step (`fixed_s` + `gpu_s`) at the profile's low; a step the GPU's work sets
        keeps the profile's own below and reaches above as far as the launches' step at that same quadrature high
        would (so the bound is continuous where the two cross). Not eager: the profile's factors everywhere."""
        low, high = self.accuracy.factors()
        step = np.asarray(step_s, dtype=float)
        if not self.eager_enforced or self.eager is None:
            return np.full_like(step, low), np.full_like(step, high)
        e = self.eager
        gpu_step = fixed_s + np.asarray(gpu_s, dtype=float)
        host_bound = host_s > gpu_s
        host_low = math.exp(-math.hypot(math.log(low), e.log_spread_faster))
        host_high = math.exp(math.hypot(math.log(high), e.log_spread_slower))
        slow_host = (fixed_s + host_s) * host_high
        lows = np.where(host_bound, np.maximum(step * host_low, gpu_step * low) / step, low)
        highs = np.where(host_bound, host_high, np.maximum(step * high, slow_host) / step)
        return lows, highs

    @property
    def reserve(self) -> MemoryReserve | None:
        """What its server holds beside weights and KV cache (`[server.reserve]`; None: not modelled, or no server)."""
        return self.server.reserve if self.server is not None else None

    def memory_fraction(self, given: float | None = None) -> tuple[float, bool]:
        """(fraction, whether of the memory left after the weights) this engine's server fills: `given` (its own
        setting, --gpu-memory-utilization), else its default (`[server.defaults] memory_fraction`), read as the server
        reads it (`memory_fraction_of`); vLLM's 0.9 of the whole memory when it has none."""
        of_free = self.server is not None and self.server.memory_fraction_of == "free"
        if given is not None:
            return given, of_free
        if self.server is None or "memory_fraction" not in self.server.defaults:
            return DEFAULT_MEMORY_FRACTION, False
        return float(self.server.defaults["memory_fraction"]), of_free

    def efficiency_values(self, serving: bool = True) -> dict[str, float]:
        """The `Efficiencies` fields this profile sets; `serving` adds the HTTP server's cost per sequence."""
        values = dict(self.efficiencies)
        extra = self.serving.get("overhead_s_per_seq", 0.0) if serving else 0.0
        if extra:
            values["overhead_s_per_seq"] = values.get("overhead_s_per_seq", 0.0) + extra
        return values

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "versions": self.versions,
            "prefill": self.prefill,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "efficiencies": dict(self.efficiencies),
            "serving": dict(self.serving),
            "fitted": self.fitted,
            "accuracy": self.accuracy.to_dict(),
            "source": dict(self.source),
            "server": None if self.server is None else self.server.to_dict(),
            "kv_dtype_by_weights": dict(self.kv_dtype_by_weights),
            "eager": None if self.eager is None else self.eager.to_dict(),
            "eager_enforced": self.eager_enforced,
            "admission": self.admission,
        }


# -- the file ------------------------------------------------------------------------
def _name(value: Any) -> str:
    if not text(value).strip():
        raise ValueError("must name the engine")
    return str(value)


def _kv_dtypes(value: Any) -> dict[str, str]:
    """`kv_dtype_by_weights = { fp8 = "fp8" }`: weight dtype → KV-cache dtype, both dtype names tokenroof knows."""
    if not isinstance(value, Mapping):
        raise ValueError("must be a table of weight dtype = KV-cache dtype")
    try:
        return {
            canonical_dtype(str(k), "weight dtype"): canonical_dtype(str(v), "KV-cache dtype") for k, v in value.items()
        }
    except TokenroofError as exc:
        raise ValueError(str(exc)) from None


def _bias(value: Any) -> float:
    result = number(value)
    if not 0 <= result <= 1:
        raise ValueError("must be in [0, 1]: the log of how much slower than physically motivated constants (≤ e×)")
    return result


def _level(value: Any) -> float:
    result = number(value)
    if not 0 < result < 1:
        raise ValueError("must be in (0, 1), the interval's coverage (0.9 for 90%)")
    return result


def _memory_fraction(value: Any) -> float:
    result = number(value)
    if not 0 < result <= 1:
        raise ValueError("must be in (0, 1], a fraction of the GPU's memory (0.9 for 90%)")
    return result


def _sources(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not value:
        raise ValueError("must be a table saying where every number comes from")
    return {str(k): text(v) for k, v in value.items()}


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not pattern.fullmatch(text(value)):
            raise ValueError(f"must be {what}")
        return str(value)

    return check


Fraction0 = Annotated[float, PlainValidator(non_negative)]
Count = Annotated[int, PlainValidator(whole(0))]


class EngineEfficiencies(EfficiencyTerms):
    """The hardware file's efficiency terms, plus the engine's cost per sequence per step and, for an engine that only
    runs eagerly, its launches per layer (an engine with CUDA graphs keeps those in [eager], for --enforce-eager)."""

    overhead_s_per_seq: Overhead | None = None
    host_s_per_layer: Overhead | None = None
    host_s_per_allreduce: Overhead | None = None


class EagerTable(Section):
    """`[eager]`: what --enforce-eager costs per layer, and how uncertain it is."""

    host_s_per_layer: Overhead
    host_s_per_allreduce: Overhead = 0.0
    log_spread_faster: Annotated[float, PlainValidator(number)] = 0.0
    log_spread_slower: Annotated[float, PlainValidator(number)] = 0.0

    @model_validator(mode="after")
    def _spreads(self) -> Self:
        if min(self.log_spread_faster, self.log_spread_slower) < 0:
            raise table_error("log_spread_faster and log_spread_slower are widths: non-negative logs")
        return self


class ServingTerms(Section):
    """What serving over HTTP adds per sequence per step."""

    overhead_s_per_seq: Overhead | None = None


class AccuracyTable(Section):
    """`[accuracy]`: leave-one-curve-out figures and the interval quantiles."""

    log_error: Annotated[float, PlainValidator(number)]
    log_error_low: Annotated[float, PlainValidator(number)]
    log_error_high: Annotated[float, PlainValidator(number)]
    interval_level: Annotated[float, PlainValidator(_level)] = DEFAULT_LEVEL
    curves: Count = 0
    points: Count = 0
    tpot_error_median: Fraction0 | None = None
    tpot_error_p90: Fraction0 | None = None
    bias_correction: Annotated[float, PlainValidator(_bias)] = 0.0

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if not self.log_error_low <= self.log_error <= self.log_error_high:
            raise table_error(
                f"expected log_error_low ≤ log_error ≤ log_error_high, got {self.log_error_low:g}, {self.log_error:g}, "
                f"{self.log_error_high:g}"
            )
        return self


CliFlag = Annotated[str, PlainValidator(_matching(CLI_FLAG, "a command-line flag, as --name or -n"))]
MetricName = Annotated[
    str, PlainValidator(_matching(METRIC_NAME, "a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"))
]


class ServerFlags(Section):
    """`[server.flags]`: the server's flag for each of tokenroof's settings it has one for."""

    max_num_seqs: CliFlag | None = None
    max_num_batched_tokens: CliFlag | None = None
    memory_fraction: CliFlag | None = None


class ServerMetrics(Section):
    """`[server.metrics]`: the server's Prometheus gauges (and counters), by what they count."""

    running: MetricName | None = None
    waiting: MetricName | None = None
    preemptions: MetricName | None = None  # a counter: sequences preempted for KV-cache room since the server started
    # speculative decoding's counters: verify steps × sequences, drafted tokens, accepted tokens, and accepted tokens
    # by drafted position (one sample per `position` label, 0 first)
    spec_drafts: MetricName | None = None
    spec_draft_tokens: MetricName | None = None
    spec_accepted: MetricName | None = None
    spec_accepted_by_position: MetricName | None = None
    # prefix caching's counters: prompt tokens looked up in the cache at admissions, and how many were hit
    prefix_cache_queries: MetricName | None = None
    prefix_cache_hits: MetricName | None = None


class ServerDefaults(Section):
    """`[server.defaults]`: what the server starts with where no flag is given (the step's token budget is the
    profile's own `max_num_batched_tokens`)."""

    max_num_seqs: Annotated[int, PlainValidator(whole(1))] | None = None
    memory_fraction: Annotated[float, PlainValidator(_memory_fraction)] | None = None


class ServerReserve(Section):
    """`[server.reserve]`: what the server holds on each GPU beside weights and KV cache (MemoryReserve)."""

    driver_bytes: Annotated[float, PlainValidator(non_negative)] = 0.0
    non_torch_bytes: Annotated[float, PlainValidator(non_negative)] = 0.0
    non_torch_bytes_per_tp_doubling: Annotated[float, PlainValidator(non_negative)] = 0.0
    profile_tokens: Count = 0
    profile_seqs: Count = 0
    sampler_bytes_per_logit: Annotated[float, PlainValidator(non_negative)] = 0.0
    large_gpu_bytes: Annotated[float, PlainValidator(non_negative)] | None = None
    large_gpu_profile_tokens: Count | None = None
    large_gpu_profile_seqs: Count | None = None
    large_gpu_excludes: list[Annotated[str, PlainValidator(text)]] = Field(default_factory=list)
    whole_context_up_to: Count | None = None


class ServerTable(Section):
    """`[server]`: the server's name (shared by the profiles of its versions), flags, metrics and defaults."""

    name: Annotated[str, PlainValidator(_matching(SERVER_NAME, "a lower-case name such as vllm or llama-cpp"))]
    # what memory_fraction is a fraction of: the whole memory, weights and KV cache together (vLLM, SGLang, TGI),
    # or the memory left free after the weights, all for the KV cache (TensorRT-LLM, LMDeploy)
    memory_fraction_of: Literal["memory", "free"] = "memory"
    flags: ServerFlags = ServerFlags()
    metrics: ServerMetrics = ServerMetrics()
    defaults: ServerDefaults = ServerDefaults()
    reserve: ServerReserve | None = None

    @model_validator(mode="after")
    def _flagged(self) -> Self:
        unflagged = [
            k for k, v in self.defaults.model_dump(exclude_none=True).items() if getattr(self.flags, k) is None
        ]
        if unflagged:
            raise table_error(f"a default for {', '.join(unflagged)} without its flag in [server.flags]")
        return self


class EngineFile(Section):
    """An engine TOML as written: every key known, every number in its unit and range, a source table."""

    name: Annotated[str, PlainValidator(_name)]
    versions: Annotated[str, PlainValidator(text)]
    prefill: Literal["chunked", "separate"]
    admission: Literal["on-demand", "reserve-output"] = "on-demand"
    fitted: Annotated[bool, PlainValidator(flag)] = False
    max_num_batched_tokens: Annotated[int, PlainValidator(whole(1))] | None = None
    efficiencies: EngineEfficiencies = EngineEfficiencies()
    serving: ServingTerms = ServingTerms()
    accuracy: AccuracyTable
    server: ServerTable | None = None
    kv_dtype_by_weights: Annotated[dict[str, str], PlainValidator(_kv_dtypes)] = Field(default_factory=dict)
    eager: EagerTable | None = None
    source: Annotated[dict[str, str], PlainValidator(_sources)] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sourced(self) -> Self:
        if not self.source:
            raise table_error("missing [source]: say where every number comes from")
        if self.fitted and self.accuracy.bias_correction:
            raise table_error("accuracy.bias_correction is for unfitted profiles: a fitted one's constants carry it")
        return self


def engine_from_dict(data: Mapping[str, Any], origin: str, key: str = "") -> EngineProfile:
    """Validate a parsed engine TOML; every problem is one line naming the file and the key."""
    spec = validated(EngineFile, data, origin)
    acc = spec.accuracy
    return EngineProfile(
        key=key,
        name=spec.name,
        versions=spec.versions,
        prefill=spec.prefill,
        accuracy=Accuracy(**acc.model_dump()),
        fitted=spec.fitted,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        efficiencies=MappingProxyType(spec.efficiencies.model_dump(exclude_none=True)),
        serving=MappingProxyType(spec.serving.model_dump(exclude_none=True)),
        source=MappingProxyType(dict(spec.source)),
        server=None if spec.server is None else _server(spec.server),
        kv_dtype_by_weights=MappingProxyType(dict(spec.kv_dtype_by_weights)),
        eager=None if spec.eager is None else Eager(**spec.eager.model_dump()),
        admission=spec.admission,
    )


def _server(table: ServerTable) -> Server:
    return Server(
        name=table.name,
        flags=MappingProxyType(table.flags.model_dump(exclude_none=True)),
        metrics=MappingProxyType(table.metrics.model_dump(exclude_none=True)),
        defaults=MappingProxyType(table.defaults.model_dump(exclude_none=True)),
        memory_fraction_of=table.memory_fraction_of,
        reserve=None if table.reserve is None else _reserve(table.reserve),
    )


def _reserve(table: ServerReserve) -> MemoryReserve:
    values = table.model_dump()
    values["large_gpu_excludes"] = tuple(values["large_gpu_excludes"])
    return MemoryReserve(**values)


# -- presets -------------------------------------------------------------------------
def engine_presets() -> dict[str, Path]:
    root = Path(str(resources.files("tokenroof.specs") / "data" / "engines"))
    return {p.stem: p for p in sorted(root.glob("*.toml"))}


@functools.cache
def _preset(path: Path) -> EngineProfile:
    """A shipped profile, read once per process (every first-principles step model asks for one)."""
    return engine_from_dict(load_toml(path), str(path), path.stem)


def list_engines() -> list[str]:
    """Names of the shipped engine profiles."""
    return list(engine_presets())


def load_engine(name_or_path: str | None = None) -> EngineProfile:
    """An engine profile by name (exact, case-insensitive; None: the default), or a path to an engine TOML."""
    presets = engine_presets()
    key = (name_or_path or DEFAULT_ENGINE).strip().lower()
    if key in presets:
        return _preset(presets[key])
    if name_or_path is not None and (name_or_path.endswith(".toml") or "/" in name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.exists():
            raise TokenroofError(f"engine file not found: {path}")
        return engine_from_dict(load_toml(path), str(path), path.stem)
    close = [p for p in presets if name_or_path and p.startswith(str(name_or_path).lower())]
    hint = f" (did you mean {' or '.join(close)}? versions differ in their costs)" if close else ""
    raise TokenroofError(
        f"unknown engine '{name_or_path}'{hint}; known profiles: {', '.join(presets)} (or an engine .toml path)"
    )


# -- the servers, across profiles ----------------------------------------------------
def server_flags(setting: Setting, profiles: Iterable[EngineProfile] | None = None) -> dict[str, str]:
    """Each server's command-line flag for `setting`, by server name in name order (every shipped profile unless
    `profiles` is given; servers without such a flag are left out)."""
    return _by_server(profiles, "flags", setting)


def server_metrics(metric: Metric, profiles: Iterable[EngineProfile] | None = None) -> dict[str, str]:
    """Each server's Prometheus name for `metric` (`running`: the running-batch gauge), by server name in name order."""
    return _by_server(profiles, "metrics", metric)


def _by_server(
    profiles: Iterable[EngineProfile] | None, table: Literal["flags", "metrics"], key: str
) -> dict[str, str]:
    """One value per server: the profiles of one server's versions (vLLM V0 and V1) must spell it alike."""
    found: dict[str, tuple[str, str]] = {}
    for profile in profiles if profiles is not None else map(load_engine, list_engines()):
        server = profile.server
        values = {} if server is None else server.flags if table == "flags" else server.metrics
        if server is None or key not in values:
            continue
        value = values[key]
        first = found.setdefault(server.name, (value, profile.key))
        if first[0] != value:
            raise TokenroofError(
                f"engine profiles {first[1]} and {profile.key} are both server '{server.name}' but give its "
                f"[server.{table}] {key} as '{first[0]}' and '{value}'; one server has one spelling"
            )
    return {name: found[name][0] for name in sorted(found)}
