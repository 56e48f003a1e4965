"""Prefix caching: a prompt prefix many requests share is prefilled once, and its KV blocks are held once.

vLLM's automatic prefix caching (on by default in V1) and SGLang's RadixAttention keep every computed full KV
block under a hash of its tokens and of all the tokens before it. A request whose first blocks hash the same as
blocks still in memory skips their prefill: it is scheduled with those tokens already computed, and reads the
same physical blocks as every other request holding them. The rules tokenroof models, as vLLM's V1 KV-cache
manager applies them:

- **Whole blocks only**: a hit covers ⌊shared / block_size⌋ blocks, and never the prompt's last token (vLLM
  recomputes at least one token, to have its logits): a 1,000-token shared prefix with 16-token blocks saves 992
  tokens of prefill (`cacheable_tokens`).
- **Computed blocks only, looked up when scheduled**: a request looks its prefix up when its prefill is
  scheduled (a prompt queued behind the token budget hits what the prompts before it computed meanwhile), and a
  block can be hit once the step that computes it has run: prompts prefilled in the same step all miss.
- **Held once**: a block referenced by several running requests counts once against the KV cache.
- **Evicted least recently freed first**: a block no request holds stays cached in free memory until an
  allocation needs the room; a finished request's blocks are freed tail first, so a prefix is evicted from its end.

Prefill of the uncached tail still attends to the cached tokens: a chunk of `take` tokens after `offset` tokens
already in the KV cache costs causal attention over take·offset + take²/2 query-key pairs (`chunk_attention_sq`,
the scheduler's Σ chunk² term, which the step model halves).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from tokenroof.errors import ParameterError

VLLM_BLOCK_SIZE = 16  # tokens a KV block holds: vLLM's default (--block-size), the scheduler's


def cacheable_tokens(prompt_tokens: int, prefix_tokens: int, block_size: int) -> int:
    """Prompt tokens a prefix-cache hit can skip: the shared prefix in whole blocks, never the prompt's last token.
    cacheable_tokens(1100, 1000, 16) = 992; cacheable_tokens(1000, 1000, 16) = 992 (⌊999/16⌋ · 16 = 992)."""
    return max(min(prefix_tokens, prompt_tokens - 1), 0) // block_size * block_size


def reserved_life_tokens(
    prompt_tokens: float, output_tokens: float, block_size: int = VLLM_BLOCK_SIZE, lookahead: int = 1
) -> float:
    """The KV a request's whole life holds, what an engine that reserves it at admission (TensorRT-LLM's
    GUARANTEED_NO_EVICT) sets aside: prompt and output, the slots its last step reserves past the first (γ,
    speculating), and its last block's unused slots."""
    return prompt_tokens + output_tokens + lookahead - 1 + block_size - 1


def chunk_attention_sq(take: float, offset: float) -> float:
    """A prefill chunk's causal attention in the step model's Σ chunk² units (it charges t_attn · sq / 2): `take`
    new tokens after `offset` tokens already in the KV cache attend over take·offset + take²/2 pairs, which is
    (take² + 2·take·offset) / 2. With no offset it is take²."""
    return take * take + 2.0 * take * offset


def block_keys(tokens: Sequence[Hashable], block_size: int) -> list[int]:
    """Cache keys of a prompt's full blocks, each hashing its tokens and its parent's key (vLLM's chained block
    hash): two prompts share a block's key exactly when they agree on every token up to its end."""
    keys, parent = [], 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        keys.append(parent)
    return keys


def prefix_key(group: int, block: int) -> int:
    """The cache key of block `block` of shared prefix `group` (a workload's synthetic prefixes: distinct from the
    hashes the emulator takes of real prompt text, which are Python hashes of tuples)."""
    return -((group + 1) << 40) - block


@dataclass(frozen=True)
class SharedPrefix:
    """A workload's shared prefixes: each prompt's first `tokens` tokens are one of `groups` prefixes (a system
    prompt, few-shot examples, a document many questions ask about), drawn uniformly per request — vllm bench
    serve's `--dataset-name prefix_repetition` (`--prefix-repetition-prefix-len`, `--prefix-repetition-num-prefixes`)
    and SGLang's `generated-shared-prefix` (`--gsp-system-prompt-len`, `--gsp-num-groups`)."""

    tokens: int
    groups: int = 1

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ParameterError(f"{{}} must be ≥ 0 tokens, got {self.tokens}", "prefix_len")
        if self.groups < 1:
            raise ParameterError(f"{{}} must be ≥ 1, got {self.groups}", "num_prefixes")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Each of `n` requests' prefix group (−1 for all when there is no prefix)."""
        if self.tokens == 0:
            return np.full(n, -1)
        return rng.integers(0, self.groups, n)

    def hit_fraction(self, prompt_tokens: int, block_size: int) -> float:
        """The share of a prompt's tokens a hit serves from the cache (every prefix resident: the steady state of a
        cache that holds them all)."""
        return cacheable_tokens(prompt_tokens, self.tokens, block_size) / prompt_tokens if prompt_tokens else 0.0

    def assumption(self, caching: bool, per_slot: bool = False, prompts_folded: bool = False) -> str:
        """What an answer on these prefixes rests on: they are the workload given, and how the server treats them
        (`per_slot`: llama-server's per-slot KV; `prompts_folded`: a fitted model whose terms carry the prompts)."""
        shared = f"each prompt's first {self.tokens} tokens are one of {self.groups} shared prefixes (as given)"
        if per_slot:
            return f"{shared}; llama-server's per-slot prompt cache is not modelled: every prompt is prefilled whole"
        if not caching:
            return f"{shared}; prefix caching off: each is prefilled with its prompt"
        why = ""
        if prompts_folded:
            why = ": the fitted model carries prompts in its per-sequence terms, so hits save KV memory, not prefill"
        return (
            f"{shared}; prefix caching hits them in the KV cache and skips their prefill (the cache starts warm, as a "
            f"server in service has it){why}"
        )

    def to_dict(self) -> dict[str, int]:
        return {"prefix_tokens": self.tokens, "num_prefixes": self.groups}
