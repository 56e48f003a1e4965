"""advise's answer as data: one JSON shape whichever way the cap was found, and the cap in each server's words."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenroof.model.speculative import SpeculativeConfig
from tokenroof.specs.engines import server_flags

NO_PREFIX_CACHING = {"vllm": "--no-enable-prefix-caching", "sglang": "--disable-radix-cache"}


def engine_flags(
    cap: int, speculative: SpeculativeConfig | None = None, prefix_caching: bool = True, server: str | None = None
) -> dict[str, str]:
    """The same cap in each server's own words: its batch-cap flag from the engines table (specs/data/engines),
    by server name. With speculative decoding, vLLM's (its --speculative-config) and SGLang's (its --speculative-*
    flags) beside the cap: the servers whose speculation tokenroof spells (a cap alone would not speculate).
    Without prefix caching, vLLM's and SGLang's caps gain the flag that turns their default (on) off. `server`: the
    one server the cap was found for (an --engine named: its admission, budget and efficiencies are not another's),
    its flag alone."""
    flags = {name: f"{flag} {cap}" for name, flag in server_flags("max_num_seqs").items()}
    if server is not None and server in flags:
        flags = {server: flags[server]}
    if not prefix_caching:
        flags = {
            server: f"{flag} {NO_PREFIX_CACHING[server]}" if server in NO_PREFIX_CACHING else flag
            for server, flag in flags.items()
        }
    if speculative is None:
        return flags
    spelled = {
        "vllm": lambda flag: f"{flag} --speculative-config '{speculative.vllm_json()}'",
        "sglang": lambda flag: f"{flag} {speculative.sglang_flags()}",
    }
    spoken = {name: spell(flags[name]) for name, spell in spelled.items() if name in flags}
    return spoken or flags  # the one server named does not spell speculation here: its cap, as found


def advice_dict(
    slo: dict[str, Any],
    cap: tuple[int, int | None, int | None],
    binding: str,
    at_cap: dict[str, Any],
    knee_batch: float | None,
    reference: dict[str, Any],
    source: str,
    warnings: Sequence[str],
) -> dict[str, Any]:
    """advise's one JSON shape, whichever way the cap was found (schemas/advise.schema.json)."""
    given_up = 1 - at_cap["throughput_tok_s"] / reference["throughput_tok_s"]
    return {
        "slo": slo,
        "max_num_seqs": cap[0],
        "max_num_seqs_low": cap[1],
        "max_num_seqs_high": cap[2],
        "interval_level": None if cap[1] is None else 0.9,
        "binding": binding,
        "at_cap": at_cap,
        "latency_knee_batch": knee_batch,  # Kneedle on throughput vs TPOT (roofline's knee_batch is the matmul knee)
        "reference": reference,
        "throughput_given_up_fraction": max(given_up, 0.0),
        "engine_flags": engine_flags(cap[0]),
        "source": source,
        "warnings": list(warnings),
    }
