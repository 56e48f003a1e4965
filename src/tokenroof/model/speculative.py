"""Speculative decoding on the step model: a proposer drafts γ tokens, the target verifies them in one step.

Each step a running sequence's proposer (an n-gram lookup in its own context, an EAGLE/MTP head on the target's
hidden states, or a small draft model) proposes γ tokens; the target runs the last token and the γ drafts
through one forward pass (a step over b·(γ + 1) tokens: `StepModel.step_s(query_tokens=γ + 1)`), and rejection
sampling keeps the drafts up to the first rejected one plus one token of its own. With `a_k` the chance that
draft k is accepted given the ones before it were (iid: every `a_k = α`), a verify step emits

    k + 1 tokens with probability a_1 ⋯ a_k · (1 − a_{k+1})   (k < γ),   γ + 1 with a_1 ⋯ a_γ,

and on average E = 1 + Σ_k a_1 ⋯ a_k tokens — for iid acceptance (1 − α^(γ+1)) / (1 − α) (Leviathan et al. 2023,
eq. 1). A step costs the verify plus γ of the proposer's own decode passes (none for n-gram); per output token
(vLLM's TPOT) it is (verify + drafts) / E. At small batch the verify step costs about what a decode step costs
(the weights' read dominates), so speculation divides TPOT by nearly E; as the batch grows the step turns compute
bound, verify costs up to (γ + 1) decode steps, and the speed-up falls below 1 at `break_even_batch`.

vLLM reports what its proposer achieved as counters (vllm/v1/spec_decode/metrics.py):
`vllm:spec_decode_num_drafts_total` (verify steps × sequences), `..._num_draft_tokens_total` (drafts × γ),
`..._num_accepted_tokens_total` and `..._num_accepted_tokens_per_pos_total{position=k}`; `measured_acceptance`
turns them back into γ and the acceptance by position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import brentq

from tokenroof.errors import ParameterError
from tokenroof.model import roofline as rl
from tokenroof.model.roofline import Efficiencies
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import HardwareSpec, ModelSpec, Precision

METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model")  # vLLM's speculative_config "method" values
HEADS = ("eagle", "eagle3", "mtp")  # proposers of one decoder layer on the target's hidden states and its LM head
MAX_SPECULATIVE_TOKENS = 32
LARGEST_BATCH = 1 << 20


@dataclass(frozen=True)
class Speculation:
    """γ drafted tokens a step, accepted position by position; `draft` is one proposer pass (None: free)."""

    num_tokens: int  # γ: vLLM's num_speculative_tokens
    acceptance: tuple[float, ...]  # a_k, k = 1..γ: P(draft k accepted | drafts 1..k−1 accepted)
    method: str = "ngram"
    draft: StepModel | None = None  # one proposer pass over the batch (the draft model, or the EAGLE/MTP head)
    draft_name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.num_tokens, bool) or not 1 <= self.num_tokens <= MAX_SPECULATIVE_TOKENS:
            raise ParameterError(
                f"{{}} must be a whole number from 1 to {MAX_SPECULATIVE_TOKENS}, got {self.num_tokens}",
                "num_speculative_tokens",
            )
        if self.method not in METHODS:
            raise ParameterError(f"unknown speculative {{}} '{self.method}'; known: {', '.join(METHODS)}", "method")
        if len(self.acceptance) not in (1, self.num_tokens):
            raise ParameterError(
                f"{{}} gives {len(self.acceptance)} rates; give one (every position alike) or "
                f"{self.num_tokens}, one per drafted position",
                "acceptance_rate",
            )
        if any(not (math.isfinite(a) and 0 <= a <= 1) for a in self.acceptance):
            raise ParameterError(
                f"{{}} must be probabilities in [0, 1], got {list(self.acceptance)}", "acceptance_rate"
            )
        if len(self.acceptance) == 1 and self.num_tokens > 1:
            object.__setattr__(self, "acceptance", self.acceptance * self.num_tokens)

    # -- tokens ---------------------------------------------------------------------------
    def emitted_probabilities(self) -> np.ndarray:
        """P(a verify step emits k tokens), k = 1..γ + 1: the accepted drafts, up to the first rejected, plus one."""
        probs, survive = [], 1.0
        for a in self.acceptance:
            probs.append(survive * (1.0 - a))
            survive *= a
        probs.append(survive)
        return np.array(probs)

    @property
    def tokens_per_step(self) -> float:
        """E: tokens a sequence gains per verify step, 1 + Σ_k a_1⋯a_k ((1 − α^(γ+1)) / (1 − α) when iid)."""
        return 1.0 + float(np.sum(np.cumprod(self.acceptance)))

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts over drafted tokens (vLLM's "draft acceptance rate"): (E − 1) / γ."""
        return (self.tokens_per_step - 1.0) / self.num_tokens

    # -- time ---------------------------------------------------------------------------
    def draft_s(self, batch: float, total_context: float) -> float:
        """The proposer's γ passes over `batch` sequences (0 for n-gram: a lookup on the host)."""
        if self.draft is None or batch <= 0:
            return 0.0
        return self.num_tokens * self.draft.step_s(batch, total_context)

    def step_s(
        self,
        target: StepModel,
        batch: float,
        total_context: float,
        prefill_tokens: float = 0.0,
        prefill_sq_tokens: float = 0.0,
        verifying: float | None = None,
    ) -> float:
        """One step (s): the target verifying γ drafts for each of `verifying` of its `batch` sequences (default all;
        a sequence whose prefill ends this step emits its first token and has drafted nothing), with any prompts
        prefilled beside them; the proposer's γ passes over those sequences; and the proposer's own pass over the
        prompts (a draft model keeps its own cache, an EAGLE/MTP head runs on the prompt's hidden states)."""
        verifying = batch if verifying is None else verifying
        if batch <= 0:
            verify = target.step_s(0.0, 0.0, prefill_tokens, prefill_sq_tokens)
        else:
            queries = 1.0 + self.num_tokens * verifying / batch
            verify = target.step_s(batch, total_context, prefill_tokens, prefill_sq_tokens, queries)
        prompts = 0.0
        if self.draft is not None and prefill_tokens:
            prompts = self.draft.step_s(0.0, 0.0, prefill_tokens, prefill_sq_tokens)
        drafting_context = total_context * verifying / batch if batch > 0 else 0.0
        return verify + self.draft_s(verifying, drafting_context) + prompts

    def tpot_s(self, target: StepModel, batch: float, context: float) -> float:
        """Mean time per output token of one sequence (s) at `batch` running sequences of `context` tokens."""
        return self.step_s(target, batch, batch * context) / self.tokens_per_step

    def speedup(self, target: StepModel, batch: float, context: float) -> float:
        """Output tokens per second with speculation over without, at the same running batch and context."""
        return target.step_s(batch, batch * context) / self.tpot_s(target, batch, context)

    def break_even_batch(self, target: StepModel, context: float, largest: float = LARGEST_BATCH) -> float | None:
        """The running batch past which speculation costs more than it gains (speed-up < 1): 0 when it does not
        pay even alone, None when it still pays at `largest`."""

        def gain(b: float) -> float:
            return self.speedup(target, b, context) - 1.0

        if gain(1.0) <= 0:
            return 0.0
        if gain(largest) > 0:
            return None
        return float(brentq(gain, 1.0, largest, xtol=1e-6, rtol=1e-9))

    def assumption(self) -> str:
        """What an answer with this speculation rests on, in a sentence: the acceptance given, not measured."""
        rates = ", ".join(f"{a:.3g}" for a in dict.fromkeys(self.acceptance))
        proposer = f"{self.draft_name}'s passes priced from its shapes" if self.draft_name else "drafts free (n-gram)"
        return (
            f"speculative decoding ({self.method}, {self.num_tokens} drafts a step) at the acceptance given ({rates}): "
            f"{self.tokens_per_step:.3g} tokens a verify step on average; {proposer}; a real proposer's acceptance "
            "varies with the traffic (bench on the server measures it)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "num_speculative_tokens": self.num_tokens,
            "acceptance_by_position": list(self.acceptance),
            "acceptance_rate": self.acceptance_rate,
            "tokens_per_step": self.tokens_per_step,
            "draft": self.draft_name or None,
        }


def proposer_spec(target: ModelSpec, method: str, draft: ModelSpec | None = None) -> ModelSpec | None:
    """The shapes one proposer pass streams: the draft model's; for EAGLE/EAGLE-3/MTP one decoder layer of the
    target's shapes and the target's LM head (the head reads the target's hidden states); None for n-gram."""
    if method == "ngram":
        return None
    if method == "draft_model":
        if draft is None:
            raise ParameterError("speculative method 'draft_model' needs the draft model ({})", "draft_model")
        if draft.vocab_size != target.vocab_size:
            raise ParameterError(
                f"the draft {draft.name} has a vocabulary of {draft.vocab_size:,} tokens and {target.name} "
                f"{target.vocab_size:,}: a draft must share the target's tokenizer ({{}})",
                "draft_model",
            )
        return draft
    return replace(
        target,
        name=f"{target.name} {method} head",
        num_layers=1,
        layer_windows=target.layer_windows[:1],
        dense_mlp_layers=min(target.dense_mlp_layers, 1),
        published_parameter_count=None,
        vision_params=0,
    )


def speculation_from_specs(
    target: ModelSpec,
    hardware: HardwareSpec,
    precision: Precision,
    tp: int,
    eff: Efficiencies,
    method: str,
    num_tokens: int,
    acceptance: tuple[float, ...],
    draft: ModelSpec | None = None,
) -> Speculation:
    """A speculation whose proposer pass is priced from its shapes on the target's hardware, precision and TP. A
    proposer pass carries no engine overhead of its own (the scheduler and sampler run once a step, in the verify)
    but its kernels' launches and all-reduces."""
    shapes = proposer_spec(target, method, draft)
    pass_model = None
    if shapes is not None:
        quiet = replace(eff, overhead_s=0.0, overhead_s_per_seq=0.0)
        pass_model = rl.step_model_from_specs(shapes, hardware, precision, tp, quiet)
    name = "" if shapes is None else shapes.name
    return Speculation(num_tokens, tuple(acceptance), method, pass_model, name)


@dataclass(frozen=True)
class MeasuredAcceptance:
    """What a server's spec-decode counters say over an interval: γ, accepted per draft, acceptance by position."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_by_position: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        """γ: drafted tokens per draft."""
        return round(self.draft_tokens / self.drafts)

    @property
    def acceptance_rate(self) -> float:
        """Accepted over drafted tokens."""
        return self.accepted_tokens / self.draft_tokens

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens per verify step: 1 + accepted per draft (vLLM's "mean acceptance length")."""
        return 1.0 + self.accepted_tokens / self.drafts

    def by_position(self) -> tuple[float, ...] | None:
        """a_k from the per-position counts: accepted at k over accepted at k − 1 (drafts at k = 1)."""
        counts = self.accepted_by_position
        if len(counts) != self.num_tokens:
            return None
        rates, before = [], self.drafts
        for c in counts:
            rates.append(c / before if before else 0.0)
            before = c
        return tuple(rates)

    def iid_rate(self) -> float:
        """The α that, alike at every position, gives the measured tokens per step: Σ_{k≤γ} α^k = accepted/drafts."""
        gamma, target = self.num_tokens, self.accepted_tokens / self.drafts
        if target <= 0:
            return 0.0
        if target >= gamma:
            return 1.0
        return float(brentq(lambda a: sum(a**k for k in range(1, gamma + 1)) - target, 0.0, 1.0, xtol=1e-12))

    def to_dict(self) -> dict[str, Any]:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "accepted_by_position": list(self.accepted_by_position),
            "num_speculative_tokens": self.num_tokens,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_by_position": None if self.by_position() is None else list(self.by_position() or ()),
            "iid_acceptance": self.iid_rate(),
        }


def measured_acceptance(
    drafts: float, draft_tokens: float, accepted: float, by_position: Sequence[float] = ()
) -> MeasuredAcceptance | None:
    """Counter deltas over a run, or None when the server drafted nothing (no speculation, or no counters)."""
    if not drafts or drafts <= 0 or draft_tokens <= 0:
        return None
    return MeasuredAcceptance(round(drafts), round(draft_tokens), round(accepted), tuple(round(c) for c in by_position))


# vLLM's speculative_config keys that change nothing tokenroof prices (the n-gram window, the draft's own TP: the
# draft runs at the target's TP here, as in vLLM V1 by default)
IGNORED_KEYS = ("prompt_lookup_max", "prompt_lookup_min", "draft_tensor_parallel_size", "quantization")


@dataclass(frozen=True)
class SpeculativeConfig:
    """What a user turns on, in vLLM's terms (`--speculative-config '{"method": …, "num_speculative_tokens": …,
    "model": …}'`), with the acceptance it is expected to reach (no server knows that before it runs)."""

    method: str
    num_speculative_tokens: int
    acceptance: tuple[float, ...]
    model: str | None = None  # the draft model: a preset name or a config.json path (method draft_model)

    def __post_init__(self) -> None:
        Speculation(self.num_speculative_tokens, self.acceptance, self.method)  # the same checks, in one place
        if (self.method == "draft_model") != (self.model is not None):
            raise ParameterError(
                "a draft model ({}'s \"model\") goes with method 'draft_model', and only with it", "speculative_config"
            )

    def sglang_flags(self) -> str:
        """The same configuration as SGLang's server flags (docs.sglang.ai, advanced_features/speculative_decoding):
        its algorithm (EAGLE for EAGLE and MTP heads, EAGLE3, STANDALONE for a draft model, NGRAM) drafting a chain of
        γ tokens (top-k 1, γ + 1 tokens verified). An EAGLE head's path is the user's to add
        (--speculative-draft-model-path), as vLLM's "model" is."""
        algorithm = {
            "eagle": "EAGLE",
            "mtp": "EAGLE",
            "eagle3": "EAGLE3",
            "draft_model": "STANDALONE",
            "ngram": "NGRAM",
        }
        gamma = self.num_speculative_tokens
        flags = f"--speculative-algorithm {algorithm[self.method]}"
        if self.model is not None:
            flags += f" --speculative-draft-model-path {self.model}"
        if self.method != "ngram":
            flags += f" --speculative-num-steps {gamma} --speculative-eagle-topk 1"
        return flags + f" --speculative-num-draft-tokens {gamma + 1}"

    def vllm_json(self) -> str:
        """The same configuration as vLLM's --speculative-config takes it."""
        import json

        config: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.model is not None:
            config["model"] = self.model
        return json.dumps(config)


def parse_speculative_config(text: str, acceptance: str | None) -> SpeculativeConfig:
    """vLLM's `--speculative-config` JSON and the acceptance rate ("0.7", or one per drafted position "0.8,0.6,0.4").
    As vLLM, a config naming a model and no method drafts with that model."""
    import json

    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParameterError(
            f"{{}} is not JSON ({exc.msg} at character {exc.pos}): {text!r}", "speculative_config"
        ) from None
    if not isinstance(config, dict):
        raise ParameterError(f"{{}} must be a JSON object, got {text!r}", "speculative_config")
    known = ("method", "num_speculative_tokens", "model", *IGNORED_KEYS)
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise ParameterError(
            f"{{}} has unknown keys {', '.join(unknown)}; known: {', '.join(known)}", "speculative_config"
        )
    method = config.get("method") or ("draft_model" if config.get("model") else None)
    gamma = config.get("num_speculative_tokens")
    if method is None or gamma is None:
        raise ParameterError(
            '{} needs "method" (or a draft "model") and "num_speculative_tokens"', "speculative_config"
        )
    if isinstance(gamma, bool) or not isinstance(gamma, int):
        raise ParameterError(
            f"num_speculative_tokens in {{}} must be a whole number, got {gamma!r}", "speculative_config"
        )
    if acceptance is None:
        raise ParameterError(
            "{} needs the acceptance its proposer reaches on your traffic ({}: one rate, or one per position; "
            "bench on a speculating vLLM measures it)",
            "speculative_config",
            "acceptance_rate",
        )
    try:
        rates = tuple(float(x) for x in acceptance.split(",") if x.strip())
    except ValueError:
        raise ParameterError(f"{{}} must be numbers in [0, 1], got {acceptance!r}", "acceptance_rate") from None
    model = config.get("model") if method == "draft_model" else None
    return SpeculativeConfig(str(method), gamma, rates, None if model is None else str(model))
