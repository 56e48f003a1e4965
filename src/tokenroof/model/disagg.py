"""Disaggregated prefill and decode (DistServe, Splitwise, vLLM's P/D connectors, Dynamo): prompts are prefilled on
one pool of replicas, their KV cache sent over a link to another pool that decodes.

A request's life, as tokenroof schedules it: it queues at a prefill replica, which prefills prompts in steps of its
own (no decoding sequence shares them, so decode steps never stall behind a long prompt); its KV cache then crosses
the link, `kv_bytes_per_token × prompt tokens` at the link's bandwidth, after the transfers queued before it on
the same prefill replica's link; a decode replica admits it as soon as its KV has arrived and its batch has room,
recomputes the prompt's last token (vLLM's decode side loads the KV and computes at least one token), and from
that step on decodes it like any other sequence. TTFT is therefore prefill queue + prefill + transfer + the decode
replica's admission step; TPOT is the decode pool's alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model.stepmodel import StepModel

# one 400 Gb/s RDMA NIC per GPU (InfiniBand NDR, ConnectX-7): 50 GB/s each way, the inter-node link DistServe and
# Splitwise assume; NVLink within a node (H100: 450 GB/s each way) is nine times more
DEFAULT_LINK_BYTES_PER_S = 50e9


@dataclass(frozen=True)
class KvTransfer:
    """The link a prompt's KV cache crosses from a prefill replica to a decode replica."""

    bytes_per_token: float  # KV bytes of one token, all layers, as the prefill replica holds them (per GPU × TP)
    bandwidth_bytes_per_s: float = DEFAULT_LINK_BYTES_PER_S
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.bytes_per_token > 0:
            raise TokenroofError(f"the KV bytes per token must be > 0, got {self.bytes_per_token}")
        if not 0 < self.bandwidth_bytes_per_s < float("inf"):
            raise ParameterError(
                f"{{}} must be a positive finite bandwidth, got {self.bandwidth_bytes_per_s / 1e9:g} GB/s",
                "kv_transfer_gb_s",
            )

    def time_s(self, tokens: float) -> float:
        """Seconds to send `tokens` tokens' KV cache: latency + bytes ÷ bandwidth."""
        return self.latency_s + tokens * self.bytes_per_token / self.bandwidth_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "bytes_per_token": self.bytes_per_token,
            "bandwidth_gb_s": self.bandwidth_bytes_per_s / 1e9,
            "latency_ms": self.latency_s * 1e3,
        }


@dataclass(frozen=True)
class Disaggregation:
    """Prefill and decode pools: how many replicas each, the prefill replicas' prompt tokens per step (None: whole
    prompts, one step each batch of them), and the link between them."""

    prefill_replicas: int
    decode_replicas: int
    transfer: KvTransfer
    prefill_budget_tokens: int | None = None
    # a prefill pool of its own tensor parallelism (DistServe chooses each pool's) or hardware (Splitwise's prompt
    # machines): its step model, TP and hardware (None: the decode pool's)
    prefill_model: StepModel | None = None
    prefill_tp: int | None = None
    prefill_hardware: str | None = None

    def __post_init__(self) -> None:
        if self.prefill_replicas < 1 or self.decode_replicas < 1:
            raise ParameterError(
                f"a disaggregated server needs ≥ 1 replica in each pool, got {{}} {self.prefill_replicas} and {{}} "
                f"{self.decode_replicas}",
                "prefill_replicas",
                "decode_replicas",
            )

    @property
    def replicas(self) -> int:
        return self.prefill_replicas + self.decode_replicas

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefill_replicas": self.prefill_replicas,
            "decode_replicas": self.decode_replicas,
            "prefill_budget_tokens": self.prefill_budget_tokens,
            "prefill_tp": self.prefill_tp,
            "prefill_hardware": self.prefill_hardware,
            "kv_transfer": self.transfer.to_dict(),
        }
