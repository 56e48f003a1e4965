"""The bill: dollars per million tokens from a price per GPU-hour, joules per token from board power.

Cost. A deployment of `gpus` accelerators at `usd_per_hour` each that emits `tokens_per_s` costs
usd_per_hour · gpus / 3600 / tokens_per_s dollars a token. Providers price prompt and output tokens apart; the
honest split is by the time each takes: a step that prefills prompt tokens beside decoding ones costs, on top of
the decode step, what those prompt tokens add (`step(batch, ctx, prompts) − step(batch, ctx)`), and that share of
the step's price goes to the prompt tokens, the rest to the output tokens.

Energy. A board draws its idle power while it waits and up to its TDP while it works. Without a meter the model is
the hardware's TDP × utilization, stated as such:

    P = P_idle + (TDP − P_idle) · busy · (a + (1 − a) · c)

busy: the share of the step its kernels run (not the host's overhead); c: the share of the step the tensor
cores compute (the step's FLOPs at the achieved rate over its time; the rest streams memory); a: the power a
kernel streaming memory draws, as a fraction of a compute-bound one's (`MEMORY_ACTIVITY`, fitted
leave-one-model-out to ML.ENERGY's H100 measurements by benchmarks/bill.py). Energy per output token =
P · T_step / tokens. `bench-local` on a GPU measures the board's power with NVML instead and says so
(`power_source`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tokenroof.errors import ParameterError
from tokenroof.model.stepmodel import StepModel, factors_at
from tokenroof.specs.hardware import HardwareSpec

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

SECONDS_PER_HOUR = 3600.0
PER_MILLION = 1e6
IDLE_SHARE_OF_TDP = 0.1  # an idle H100 SXM draws 60–90 W of its 700 W (nvidia-smi); where a file gives none
MEMORY_ACTIVITY = 0.72  # memory-streaming kernels' draw over compute-bound ones' (benchmarks/bill.py --fit)


def usd_per_million_tokens(usd_per_hour: float, gpus: float, tokens_per_s: float) -> float | None:
    """Dollars a million tokens cost at `tokens_per_s` on `gpus` boards at `usd_per_hour` each (None: no tokens)."""
    if tokens_per_s <= 0:
        return None
    return usd_per_hour * gpus / SECONDS_PER_HOUR / tokens_per_s * PER_MILLION


@dataclass(frozen=True)
class Price:
    """What one accelerator costs an hour, and where that figure came from."""

    usd_per_hour: float
    source: str  # "given" (--gpu-cost-per-hour) or the hardware file's

    def __post_init__(self) -> None:
        if not 0 < self.usd_per_hour < float("inf"):
            raise ParameterError(
                f"{{}} must be a positive number of US dollars, got {self.usd_per_hour:g}", "gpu_cost_per_hour"
            )

    def split(
        self, gpus: float, step_s: float, prompt_share: float, output_tokens: float, prompt_tokens: float
    ) -> dict[str, float | None]:
        """One step's price split by time: `prompt_share` of it to the prompt tokens prefilled in it, the rest to the
        output tokens it emits ($ a million of each; None where the step has none)."""
        usd = self.usd_per_hour * gpus / SECONDS_PER_HOUR * step_s
        return {
            "usd_per_million_output_tokens": usd * (1 - prompt_share) / output_tokens * PER_MILLION
            if output_tokens > 0
            else None,
            "usd_per_million_input_tokens": usd * prompt_share / prompt_tokens * PER_MILLION
            if prompt_tokens > 0
            else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"usd_per_hour": self.usd_per_hour, "source": self.source}


def price_of(hardware: HardwareSpec, given: float | None = None) -> Price | None:
    """The price per accelerator-hour: as given, else the hardware file's, else None (no bill)."""
    if given is not None:
        return Price(given, "given")
    if hardware.usd_per_hour is not None:
        return Price(hardware.usd_per_hour, f"the hardware file's ({hardware.key or hardware.name})")
    return None


@dataclass(frozen=True)
class PowerModel:
    """Board power from the TDP and the busy share of a step (the module doc's model), per accelerator."""

    tdp_watts: float
    idle_watts: float
    source: str
    memory_activity: float = MEMORY_ACTIVITY

    def watts(self, busy: float, compute: float = 0.0) -> float:
        """Power (W) of a board busy `busy` of the time, its tensor cores computing `compute` of it (both clipped to
        [0, 1])."""
        busy, compute = min(max(busy, 0.0), 1.0), min(max(compute, 0.0), 1.0)
        activity = self.memory_activity + (1.0 - self.memory_activity) * compute
        return self.idle_watts + (self.tdp_watts - self.idle_watts) * busy * activity

    def to_dict(self) -> dict[str, Any]:
        return {
            "tdp_watts": self.tdp_watts,
            "idle_watts": self.idle_watts,
            "memory_activity": self.memory_activity,
            "source": self.source,
        }


def power_model(hardware: HardwareSpec) -> PowerModel | None:
    """The TDP × utilization model of this hardware (None: its file gives no TDP)."""
    if hardware.tdp_watts is None:
        return None
    idle = hardware.idle_watts if hardware.idle_watts is not None else IDLE_SHARE_OF_TDP * hardware.tdp_watts
    said = "its file's idle power" if hardware.idle_watts is not None else f"idle {IDLE_SHARE_OF_TDP:.0%} of it"
    return PowerModel(
        hardware.tdp_watts,
        idle,
        f"modelled: {hardware.tdp_watts:g} W TDP × the step's busy share, memory-streaming kernels at "
        f"{MEMORY_ACTIVITY:.0%} of a compute-bound one's draw, {said}",
    )


def compute_share(
    sm: StepModel, batch: float, total_context: float, step_s: float, prefill: float = 0.0, prefill_sq: float = 0.0
) -> float:
    """The share of a step the tensor cores compute: its GEMM and attention FLOPs at the achieved rate (decode
    tokens, and any prompt tokens prefilled in it) over the step's time."""
    if step_s <= 0 or sm.prompts_folded:
        return 0.0
    flops_s = batch * sm.t_compute_s + sm.t_attn_token_s * total_context + sm.prompt_compute_s(prefill, prefill_sq)
    return min(flops_s / step_s, 1.0)


def busy_share(
    sm: StepModel, step_s: float, batch: float = 0.0, context: float = 0.0, prefill: float = 0.0, sq: float = 0.0
) -> float:
    """The share of a step its kernels keep the board busy: all of it but the fixed overhead (the host's
    scheduling, sampling and launches, when the board waits), and, for an eager engine whose launches outlast the
    GPU's work (StepModel.t_host_s), only that work (of `batch` sequences at `context` tokens in all, with `prefill`
    prompt tokens)."""
    if step_s <= 0:
        return 0.0
    busy = max(step_s - sm.t_fixed_s, 0.0)
    if sm.t_host_s > 0:
        busy = min(busy, sm.gpu_s(batch, context, prefill, sq))
    return busy / step_s


def step_watts(
    power: PowerModel,
    sm: StepModel,
    duration_s: float,
    batch: float,
    context: float,
    prefill: float = 0.0,
    prefill_sq: float = 0.0,
) -> float:
    """A board's power through one step: its busy and compute shares (busy_share, compute_share)."""
    busy = busy_share(sm, duration_s, batch, context, prefill, prefill_sq)
    return power.watts(busy, compute_share(sm, batch, context, duration_s, prefill, prefill_sq))


def steps_watts(
    power: PowerModel,
    sm: StepModel,
    duration_s: NDArray[np.float64],
    batch: NDArray[np.float64],
    context: NDArray[np.float64],
    prefill: NDArray[np.float64],
    prefill_sq: NDArray[np.float64],
) -> NDArray[np.float64]:
    """`step_watts` over arrays of steps, term for term (busy_share, compute_share, PowerModel.watts): what a long
    simulation's bill evaluates once per step."""
    import numpy as np

    live = duration_s > 0
    span = np.where(live, duration_s, 1.0)  # a step of no time: busy and compute shares 0, as step_watts has them
    busy = np.maximum(duration_s - sm.t_fixed_s, 0.0)
    if sm.t_host_s > 0:
        busy = np.minimum(busy, sm.steps_gpu_s(batch, context, prefill, prefill_sq))
    busy = np.where(live, busy / span, 0.0)
    if sm.prompts_folded:
        compute = np.zeros_like(span)
    else:
        flops_s = batch * sm.t_compute_s + sm.t_attn_token_s * context + prefill * sm.t_compute_s
        flops_s = flops_s + sm.t_attn_token_s * prefill_sq / 2  # prompt_compute_s, over arrays
        compute = np.where(live, np.minimum(flops_s / span, 1.0), 0.0)
    busy, compute = np.clip(busy, 0.0, 1.0), np.clip(compute, 0.0, 1.0)
    activity = power.memory_activity + (1.0 - power.memory_activity) * compute
    return np.asarray(power.idle_watts + (power.tdp_watts - power.idle_watts) * busy * activity, dtype=float)


def bill_of_steps(
    sm: StepModel,
    steps: dict[str, Any],
    span_s: float,
    replicas: int,
    tp: int,
    output_tokens: float,
    prompt_tokens: float,
    price: Price | None,
    power: PowerModel | None,
) -> dict[str, Any]:
    """The bill of a simulated window: `steps` (arrays over the steps of every replica inside it: `duration_s`,
    `batch`, `context_tokens`) ran on `replicas` × `tp` boards for `span_s` seconds, emitting `output_tokens` and
    prefilling `prompt_tokens`. A replica's idle time costs as much as its busy time and draws idle power; busy
    time goes to prompts and outputs by what the prompts added to each step (the step less the decode step of its
    batch); idle time follows the busy time's split."""
    import numpy as np

    duration = np.asarray(steps["duration_s"], dtype=float)
    batch = np.asarray(steps["batch"], dtype=float)
    zeros = np.zeros_like(duration)
    decode_s = replace(sm, batch_factors=()).steps_s(batch, steps["context_tokens"], zeros, zeros)
    if sm.batch_factors:  # a step with a prompt was timed by the form, so is its decode; the others take the factor
        prompted = np.asarray(steps.get("prefill_tokens", zeros), dtype=float) > 0
        decode_s = np.where(prompted, decode_s, decode_s * factors_at(sm.batch_factors, batch))
    decode = np.where(batch > 0, np.minimum(decode_s, duration), 0.0)
    busy_s = float(duration.sum())
    share = float(np.clip(duration - decode, 0.0, None).sum()) / busy_s if busy_s > 0 else 0.0
    out: dict[str, Any] = {
        "usd_per_million_output_tokens": None,
        "usd_per_million_input_tokens": None,
        "energy_j_per_output_token": None,
        "power_watts_mean": None,
    }
    if price is not None and span_s > 0:
        out.update(price.split(replicas * tp, span_s, share, output_tokens, prompt_tokens))
    if power is not None and span_s > 0:
        joules = pool_joules(sm, steps, span_s, replicas, tp, power)
        out["power_watts_mean"] = joules / span_s
        out["energy_j_per_output_token"] = joules / output_tokens if output_tokens > 0 else None
    return out


@dataclass
class EnergyCounter:
    """The energy counter of one replica's `tp` boards, as DCGM keeps it (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION): each
    step at the power of its busy and compute shares (pool_joules' model, step by step), idle power between steps.
    `joules(now)` is the total since `started_s`; `watts` the draw of the last step (the engine sets it to idle
    when it waits for requests)."""

    power: PowerModel
    tp: int
    started_s: float
    busy_joules: float = 0.0
    busy_s: float = 0.0
    watts: float = 0.0

    def __post_init__(self) -> None:
        self.watts = self.power.idle_watts

    def add_step(
        self,
        sm: StepModel,
        duration_s: float,
        batch: float,
        context: float,
        prefill: float = 0.0,
        prefill_sq: float = 0.0,
    ) -> None:
        """One step of `duration_s` on every board of the replica."""
        self.watts = step_watts(self.power, sm, duration_s, batch, context, prefill, prefill_sq)
        self.busy_joules += self.watts * duration_s
        self.busy_s += duration_s

    def joules(self, now_s: float) -> float:
        """One board's joules since the counter started (a replica's boards draw alike)."""
        idle_s = max(now_s - self.started_s - self.busy_s, 0.0)
        return self.busy_joules + self.power.idle_watts * idle_s


def pool_joules(
    sm: StepModel, steps: dict[str, Any], span_s: float, replicas: int, tp: int, power: PowerModel
) -> float:
    """Joules `replicas` × `tp` boards draw over `span_s` seconds running `steps` (as bill_of_steps takes them):
    each step at the power of its busy and compute shares, the rest of the time idle."""
    import numpy as np

    duration = np.asarray(steps["duration_s"], dtype=float)
    zeros = np.zeros_like(duration)
    batch = np.asarray(steps["batch"], dtype=float)
    context = np.asarray(steps["context_tokens"], dtype=float)
    prefill = np.asarray(steps.get("prefill_tokens", zeros), dtype=float)
    square = np.asarray(steps.get("prefill_sq_tokens", zeros), dtype=float)
    watts = steps_watts(power, sm, duration, batch, context, prefill, square)
    idle_s = max(span_s * replicas - float(duration.sum()), 0.0)
    return tp * (float((watts * duration).sum()) + power.idle_watts * idle_s)


@dataclass(frozen=True)
class Billing:
    """How a deployment is billed: the boards a replica holds, the price per board-hour and the power model."""

    tp: int = 1
    price: Price | None = None
    power: PowerModel | None = None
    prefill: Billing | None = None  # a disaggregated server's prefill pool on other hardware (None: as this one)

    @property
    def known(self) -> bool:
        return self.price is not None or self.power is not None
