"""Continuous batching, clock-free: admission, one token per running sequence per step, step times from a StepModel.

The scheduler knows nothing about time passing: a driver asks for the next step's
plan at time `now`, waits `plan.duration_s` (really, for `emulate`; virtually, for
`simulate`) and then completes it. Semantics, as in vLLM's default scheduler:

- FCFS admission while fewer than `max_num_seqs` sequences run; the rest wait.
- An admitted sequence is prefilled inside the step that admits it (its prompt
  tokens join the step's compute) and emits its first token at the end of that step.
- Every running sequence emits one token per step; a sequence leaves when it has
  `max_tokens` tokens (the emulator has no EOS: as if `ignore_eos` were set).
- With `separate_prefill` (vLLM V0 without chunked prefill, TGI), waiting prompts are
  prefilled whole in a step of their own, as many as the token budget holds (the first
  always), while the running sequences wait; each prompt's first token comes at that
  step's end. The running sequences count their tokens on a decode clock (`clock`) that
  such a step does not move.
- With a KV-cache capacity (`kv_capacity_tokens`, in `block_size` blocks), a
  sequence is admitted only if its blocks fit, and when the running sequences'
  next tokens would not fit, the most recently admitted is preempted by
  recompute: it goes back to the front of the queue and, readmitted, prefills its
  prompt plus what it had generated (vLLM's default policy). Block use is counted
  as Σ(context + 1) + b·(block_size − 1) tokens, an upper bound on the blocks
  vLLM's allocator holds, kept in O(1).
- With `reserve_output` (TensorRT-LLM's default capacity scheduler, GUARANTEED_NO_EVICT), a sequence is admitted
  only if its whole life fits beside every admitted sequence's: the blocks of prompt + max_tokens (+ the γ slots a
  speculating step reserves) summed over the admitted ones, whatever they hold yet. The cache then never overflows
  and nothing is preempted; the running batch stops at what the cache holds at the sequences' final lengths, not
  their mean, and the rest wait. With prefix caching a reservation counts its shared prefix's blocks in full (a
  conservative count: TensorRT-LLM's block reuse may reserve a shared block once).
- With per-slot KV streams (`per_slot_kv`: llama-server with `-np N` and no `--kv-unified`, its default since
  2025), every sequence holds one of `max_num_seqs` slots, taken as llama-server takes them (the idle slot least
  recently released; among never-used ones the highest id), and a step runs one forward pass per run of
  consecutive busy slot ids among its decoding sequences plus one per run among the prompts it prefills
  (llama.cpp splits such a batch with `split_equal(sequential)`: each ubatch holds consecutive sequence ids).
  Each pass past the first costs the step model's empty step (`t_fixed` and the weights' read).
- With speculative decoding (`speculation`), a sequence's first token comes from its prefill step as before, and
  each later step emits a random 1..γ + 1 tokens, drawn when it starts running (`Speculation.emitted_probabilities`,
  seeded): a sequence finishes at the step its draws reach `max_tokens`. The step costs the verify over b·(γ + 1)
  tokens plus the proposer's passes (`Speculation.step_s`); the KV the step reads grows by the expected
  tokens per step, and each running sequence reserves γ + 1 slots for the next. `spec_counts` gives vLLM's
  spec-decode counters (drafts, drafted and accepted tokens, accepted by position) over what has run.
- With prefix caching (`prefix_caching`; model/prefix.py), a sequence's prompt blocks are looked up when it is
  admitted and again when its first chunk is scheduled: its leading blocks still in memory (held by a sequence, or
  freed but not yet evicted) are hit and skip prefill (whole blocks, never the prompt's last token), and the blocks
  it computes are kept under their keys from the step that computes them (hit only after it has run). A block held
  by several sequences counts once against the KV cache; freed blocks stay cached in free memory and are evicted
  least recently freed first when an admission or a step needs the room (a sequence's blocks are freed tail first).
  A sequence's shareable blocks are `Sequence.block_keys` (the emulator hashes its prompt's text) or, for a
  workload's synthetic prefixes, `prefix_group`/`prefix_tokens`. `prefix_counts` gives vLLM's prefix-cache counters
  (tokens queried, tokens hit).
- A prompt chunk of `take` tokens after `offset` tokens already in the KV cache (earlier chunks, cached blocks)
  attends over take·offset + take²/2 pairs (`chunk_attention_sq`).
- Step time: `StepModel.step_s` — `t_fixed + max(t_weights(b + p), (b + p)·t_compute + t_attn·Σctx) + Σctx·t_kv
  + b·t_seq` for b running sequences, p prompt tokens being prefilled and ctx each sequence's current length:
  the DESIGN.md step model with each step's own contexts, from the same object every command uses.

Bookkeeping is O(1) per step plus O(1) per admission and finish: a sequence
admitted at step k with n tokens to make finishes at step k + n − 1, and the sum
of contexts is kept from running sums, so a simulator never touches every
sequence every step. Between events nothing changes but the contexts' growth: a
simulator asks for those steps as one quiet run (`plan_quiet_run`), their
durations from the step model over arrays, and completes them at once.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Sequence as Keys
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model.prefix import cacheable_tokens, chunk_attention_sq, prefix_key, reserved_life_tokens
from tokenroof.model.speculative import Speculation
from tokenroof.model.stepmodel import StepModel


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the engine."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    done_tokens: int = 0  # tokens emitted before the current admission (after a preemption)
    prefill_left: int = 0  # prompt (+ recomputed) tokens still to prefill in chunks
    preemptions: int = 0
    admission: int = 0  # bumps on preemption: invalidates the old finish-heap entry
    admitted_step: int = -1
    admitted_s: float | None = None
    scheduled_s: float | None = None  # the start of the step that first ran part of its prompt (vLLM's queue time ends)
    first_token_s: float | None = None
    finished_s: float | None = None
    aborted: bool = False
    draws: np.ndarray | None = None  # speculative decoding: tokens emitted by each decode step of this admission
    tokens_after: np.ndarray | None = None  # ... and the tokens emitted after each step (its prefill step first)
    # prefix caching: the prompt's shareable full blocks, as cache keys in order (None: from prefix_group/_tokens)
    block_keys: Keys[int] | None = None
    prefix_group: int = -1  # a workload's shared prefix this prompt starts with (−1: none)
    prefix_tokens: int = 0  # ... and its length in tokens
    cached_tokens: int = 0  # prompt tokens served from the prefix cache at its latest admission
    shared_blocks: int = 0  # its leading blocks it holds in the shared cache (counted there, not as its own)
    reserved: int = 0  # KV tokens it reserves while prefilling
    sharing: bool = True  # its computed blocks still go into the cache (False once one was there already)
    kv_ready: bool = False  # disaggregated decode: its prompt's KV arrived from a prefill replica (1 token recomputed)
    prefilled_s: float | None = None  # disaggregated: when its prefill step ended on the prefill replica
    prefill_started: bool = False  # a chunk of its prompt has been scheduled since its admission
    promised: int = 0  # reserve_output: the KV tokens its admission reserved for its whole life

    @property
    def context_at_admission(self) -> int:
        return self.prompt_tokens + self.done_tokens

    @property
    def finish_step(self) -> int:
        if self.tokens_after is not None:
            return self.admitted_step + len(self.tokens_after) - 1
        return self.admitted_step + self.max_tokens - self.done_tokens - 1


class PromptOverBudget(ParameterError):
    """A prompt longer than a prefill step of its own holds (separate prefill never splits one)."""


QUIET_RUN_STEPS = 4096  # the most steps one quiet run coalesces
QUIET_RUN_LEAST = 8  # and the fewest: shorter runs cost more as arrays than one step at a time


class QuietRun(NamedTuple):
    """Consecutive steps in which nothing changes but the contexts' growth (BatchScheduler.plan_quiet_run): a
    simulator takes them in one go. Columns per step, as StepPlan holds them one at a time."""

    start_s: np.ndarray
    duration_s: np.ndarray
    batch: int
    kv_tokens: np.ndarray
    context_tokens: np.ndarray
    passes: int  # forward passes each step runs (more than one only with per-slot KV streams)
    last: StepPlan  # the run's last step, which completes it
    waited_s: float = 0.0  # prefill steps of their own its sequences waited through before its first step

    @property
    def end_s(self) -> float:
        return self.last.end_s


class StepPlan(NamedTuple):
    """What one step does: how many run, who was admitted, how long it takes. A named tuple, not a frozen
    dataclass: a simulation makes one per step, and a frozen dataclass takes 2 µs to build against 0.4 µs."""

    step: int  # steps completed before this one
    start_s: float
    duration_s: float
    batch: int
    admitted: tuple[Sequence, ...]
    prefill_tokens: int
    kv_tokens: float = 0.0  # KV-cache tokens held after this step (upper bound, see module doc)
    preempted: int = 0
    context_tokens: float = 0.0  # Σ context over the running sequences (what the step reads)
    prefill_sq: float = 0.0  # Σ chunk² of the prompt tokens (their causal attention)
    passes: int = 1  # forward passes the step runs (more than one only with per-slot KV streams)
    emitted: float = -1.0  # tokens the step emits (expected, when speculating); -1: one per running sequence
    decoding: bool = True  # the running sequences decode (False: a prefill step of its own, they wait)
    waited_s: float = 0.0  # prefill steps of their own the running sequences waited through before this step

    @property
    def tokens(self) -> float:
        return self.batch if self.emitted < 0 else self.emitted

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class Server:
    """What a replica's scheduler runs with besides its batch cap: the KV cache (tokens; None: unlimited), the prompt
    tokens a step may prefill (None: whole prompts), whether each slot has its own KV stream (llama-server), and the
    speculative decoding it does. One object from the flags to every simulation (simulate, advise, plan, emulate);
    picklable, for the process and Ray pools."""

    kv_capacity_tokens: int | None = None
    max_num_batched_tokens: int | None = None
    per_slot_kv: bool = False  # llama-server's per-slot KV streams
    speculation: Speculation | None = None
    prefix_caching: bool = False  # vLLM's automatic prefix caching (SGLang's RadixAttention)
    separate_prefill: bool = False  # prompts prefilled in steps of their own, decodes paused (vLLM V0, TGI)
    reserve_output: bool = False  # admitted with its whole output's KV reserved, never preempted (TensorRT-LLM)

    def settings(self) -> dict[str, Any]:
        """The scheduler's keyword arguments (BatchScheduler's, and simulate's)."""
        return {
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "per_slot_kv": self.per_slot_kv,
            "speculation": self.speculation,
            "prefix_caching": self.prefix_caching,
            "separate_prefill": self.separate_prefill,
            "reserve_output": self.reserve_output,
        }


UNLIMITED_FREE_BLOCKS = 65_536  # freed blocks an unlimited KV cache keeps cached (a million tokens at 16 a block)
PLAIN = Server()  # an unlimited KV cache, whole prompts, one KV stream, no speculation


class PrefixCounts(NamedTuple):
    """Prefix caching's counters, as vLLM V1 names them (`vllm:prefix_cache_queries_total`,
    `vllm:prefix_cache_hits_total`): prompt tokens looked up at admissions, and how many of them were hit."""

    queries: int
    hits: int

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None


class SpecCounts(NamedTuple):
    """Speculative decoding's counters, as vLLM names them: verify steps × sequences (`drafts`), drafted tokens,
    accepted tokens, and how often each drafted position was accepted."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_by_position: tuple[int, ...]


def budget_holds(budget: int | None, batch: float, separate: bool = False) -> bool:
    """Whether a step's prompt budget holds `batch` running sequences: each takes one token of every step's budget
    (prefilled in steps of their own, the budget bounds those steps alone; None: no budget)."""
    return budget is None or separate or budget > batch


def slot_runs(slots: list[int]) -> int:
    """Runs of consecutive ids among `slots` (distinct): the ubatches llama.cpp splits a step's sequences into when
    each slot has its own KV stream. [0, 1, 2] → 1, [2, 5, 6] → 2, [] → 0."""
    ordered = sorted(slots)
    return sum(1 for i, s in enumerate(ordered) if i == 0 or ordered[i - 1] != s - 1)


def step_time_s(model: StepModel, contexts: list[int], prefill_tokens: int, prefill_sq_tokens: float) -> float:
    """Duration of one step for sequences at these contexts plus `prefill_tokens` prompt tokens."""
    return model.step_s(len(contexts), float(sum(contexts)), prefill_tokens, prefill_sq_tokens)


@dataclass(slots=True)  # attribute access on the hot path: ~8% of a simulation
class BatchScheduler:
    """FCFS continuous batching up to `max_num_seqs` running sequences."""

    model: StepModel
    max_num_seqs: int = 256
    kv_capacity_tokens: int | None = None
    block_size: int = 16
    max_num_batched_tokens: int | None = None  # token budget per step (chunked prefill); None: whole prompts
    per_slot_kv: bool = False  # llama.cpp's per-slot KV streams: a step runs one pass per run of consecutive slots
    speculation: Speculation | None = None  # speculative decoding: γ drafts a step, verified together
    seed: int = 0  # the acceptance draws of speculative decoding
    prefix_caching: bool = False  # prompt blocks computed once are kept and shared (vLLM's automatic prefix caching)
    separate_prefill: bool = False  # waiting prompts prefilled in steps of their own, decodes paused (vLLM V0, TGI)
    reserve_output: bool = False  # admit with the whole output's KV reserved; never preempt (TensorRT-LLM's default)
    waiting: deque[Sequence] = field(default_factory=deque)
    prefilling: deque[Sequence] = field(default_factory=deque)
    running: dict[str, Sequence] = field(default_factory=dict)
    steps: int = 0  # steps completed
    # the running sequences' clock: decode steps completed, plus one (each sequence gains a token a decode step; a
    # prefill step of its own, `separate_prefill`, does not move it, and its prompts count from clock − 1, which the
    # start at 1 keeps clear of −1, a sequence not admitted)
    clock: int = 1
    preemptions: int = 0
    _finishing: list[tuple[int, int, int, Sequence]] = field(default_factory=list)  # (finish step, order, version, seq)
    _order: int = 0
    _sum_ctx0: int = 0  # Σ context at admission over running sequences
    _sum_admit: int = 0  # Σ admission step over running sequences
    _reserved: int = 0  # KV tokens held by sequences still prefilling
    _promised: int = 0  # reserve_output: Σ over admitted sequences of the KV tokens reserved for their whole life
    _slot_of: dict[str, int] = field(default_factory=dict)  # per-slot KV: the slot each admitted sequence holds
    _released: list[int] = field(default_factory=list)  # per-slot KV: per slot, the order it was last released in
    _releases: int = 0
    _gain: float = 1.0  # expected tokens a running sequence gains per step (E with speculation)
    _lookahead: int = 1  # KV slots a running sequence needs for its next step (γ + 1 with speculation)
    _rng: np.random.Generator | None = None
    _emitted_cdf: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _spec_done: list[int] = field(default_factory=list)  # drafts, accepted, accepted at each position: of departed
    _refs: dict[int, int] = field(default_factory=dict)  # prefix caching: cached blocks held, by key → holders
    _free: OrderedDict[int, None] = field(default_factory=OrderedDict)  # ... cached blocks no one holds, LRU first
    _sum_shared: int = 0  # Σ tokens running sequences hold in shared blocks (counted once, in _refs)
    _fresh: set[int] = field(default_factory=set)  # blocks the step being planned computes: not hit before it runs
    _prefix_queries: int = 0
    _prefix_hits: int = 0
    _joining: set[str] = field(default_factory=set)  # prompts the prefill step in flight completes (separate_prefill)
    _waited_s: float = 0.0  # prefill steps of their own run while sequences waited, since the last decode step
    last_step_s: float = 0.0  # the duration of the step planned last (whether a quiet run may be worth trying)

    def __post_init__(self) -> None:
        self._released = [-1] * self.max_num_seqs
        if self.speculation is not None:
            self._gain = self.speculation.tokens_per_step
            self._lookahead = self.speculation.num_tokens + 1
            self._rng = np.random.default_rng(self.seed)
            self._emitted_cdf = np.cumsum(self.speculation.emitted_probabilities())[:-1]  # 1..γ+1 tokens by inversion
            self._spec_done = [0] * (2 + self.speculation.num_tokens)
        if self.max_num_seqs < 1:
            raise TokenroofError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if self.prefix_caching and self.per_slot_kv:
            raise TokenroofError(
                "prefix caching is modelled for one shared KV cache (vLLM, SGLang), not llama-server's per-slot KV "
                "streams (each slot reuses only its own last prompt)"
            )
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens < self.block_size:
            raise TokenroofError(f"the KV cache must hold at least one block ({self.block_size} tokens)")
        if not budget_holds(self.max_num_batched_tokens, self.max_num_seqs, self.separate_prefill):
            raise TokenroofError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must exceed max_num_seqs "
                f"({self.max_num_seqs}): every running sequence needs one token of the budget"
            )

    def submit(self, seq: Sequence) -> None:
        self.check(seq)
        self.waiting.append(seq)

    def check(self, seq: Sequence) -> None:
        """Refuse a request this server can never run (no tokens to make, more KV than the cache holds)."""
        if seq.max_tokens < 1:
            raise TokenroofError(f"{seq.request_id}: max_tokens must be at least 1")
        if self.kv_capacity_tokens is not None and self._life(seq) > self.kv_capacity_tokens:
            padded = self._life(seq) - seq.prompt_tokens - seq.max_tokens  # its last block's slots, and γ's
            raise TokenroofError(
                f"request {seq.request_id} needs {self._life(seq)} tokens of KV cache ({seq.prompt_tokens} prompt + "
                f"{seq.max_tokens} output + {padded} of its last block's"
                + (" and the speculated tokens'" if self._lookahead > 1 else "")
                + f" slots); the cache holds {self.kv_capacity_tokens}"
            )
        budget = self.max_num_batched_tokens
        if self.separate_prefill and budget is not None and seq.prompt_tokens > budget:
            raise PromptOverBudget(  # vLLM V0 (a budget of at least max_model_len), TGI (--max-batch-prefill-tokens)
                f"request {seq.request_id}'s prompt is {seq.prompt_tokens:,} tokens; a prefill step holds "
                f"{budget:,}, and prefilled in steps of their own, prompts are never split: raise {{}} (TGI's "
                "--max-batch-prefill-tokens) past the longest prompt",
                "max_num_batched_tokens",
            )

    def generated(self, seq: Sequence) -> int:
        """Tokens a sequence has emitted so far."""
        if seq.admitted_step < 0 or seq.request_id not in self.running:
            return seq.done_tokens if seq.finished_s is None else seq.max_tokens
        ran = self.clock - seq.admitted_step  # decode steps completed since its admission
        if seq.request_id in self._joining:  # its prefill step (of its own) is still running: its token is to come
            ran -= 1
        if seq.tokens_after is None or ran == 0:
            return min(seq.done_tokens + ran, seq.max_tokens)
        made = int(seq.tokens_after[min(ran, len(seq.tokens_after)) - 1])
        return min(seq.done_tokens + made, seq.max_tokens)

    def _draw(self, seq: Sequence) -> None:
        """Speculative decoding: the tokens each of the sequence's steps will emit, until it has `max_tokens`."""
        assert self.speculation is not None and self._rng is not None
        left = seq.max_tokens - seq.done_tokens
        draws = np.searchsorted(self._emitted_cdf, self._rng.random(max(left - 1, 0)), side="right") + 1
        after = np.concatenate(([1], 1 + np.cumsum(draws)))
        steps = int(np.searchsorted(after, left)) + 1  # the first step whose tokens reach what is left
        seq.draws, seq.tokens_after = draws[: steps - 1], after[:steps]

    def _count_drafts(self, seq: Sequence, ran: int) -> None:
        """Add a departing sequence's verify steps (`ran` steps completed, its prefill step first) to the counts."""
        if seq.draws is None or ran <= 1:
            return
        accepted = seq.draws[: ran - 1] - 1
        self._spec_done[0] += len(accepted)
        self._spec_done[1] += int(accepted.sum())
        for position in range(self.speculation.num_tokens if self.speculation else 0):
            self._spec_done[2 + position] += int(np.count_nonzero(accepted > position))

    def spec_counts(self) -> SpecCounts | None:
        """vLLM's spec-decode counters over the steps completed (None without speculation)."""
        if self.speculation is None:
            return None
        done = list(self._spec_done)
        saved = self._spec_done
        try:  # the running sequences' steps so far, as if they departed now
            self._spec_done = done
            for seq in self.running.values():
                self._count_drafts(seq, self.clock - seq.admitted_step)
        finally:
            self._spec_done = saved
        return SpecCounts(done[0], done[0] * self.speculation.num_tokens, done[1], tuple(done[2:]))

    def _footprint(self, tokens: int) -> int:
        return tokens + self.block_size - 1

    def _life(self, seq: Sequence) -> int:
        """The most KV a sequence's whole life holds, in blocks (model.prefix.reserved_life_tokens)."""
        return int(reserved_life_tokens(seq.prompt_tokens, seq.max_tokens, self.block_size, self._lookahead))

    def _contexts(self, b: int) -> float:
        """Σ context over the `b` running sequences (speculating: expected, E tokens a step after the first)."""
        if self._gain == 1.0:
            return self._sum_ctx0 + b * self.clock - self._sum_admit
        return self._sum_ctx0 + self._gain * (b * self.clock - self._sum_admit)

    def kv_tokens_next_step(self, extra: int = 0) -> float:
        """KV tokens held after the next step (upper bound): running sequences, prefill reservations, `extra`."""
        b = len(self.running)
        shared = len(self._refs) * self.block_size - self._sum_shared  # shared blocks, once, less their holders' use
        return self._contexts(b) + b * self._lookahead + b * (self.block_size - 1) + self._reserved + shared + extra

    def _leave(self, seq: Sequence, release: bool = True, ran: int | None = None) -> None:
        """Take a sequence out of the running batch; `ran`: the steps it completed (default: those before now)."""
        if seq.draws is not None:
            self._count_drafts(seq, self.clock - seq.admitted_step if ran is None else ran)
        if release:
            self._release_slot(seq)
        del self.running[seq.request_id]
        self._promised -= seq.promised
        seq.promised = 0
        self._sum_ctx0 -= seq.context_at_admission
        self._sum_admit -= seq.admitted_step
        self._sum_shared -= seq.shared_blocks * self.block_size
        self._unshare(seq)

    def _preempt_for_room(self) -> int:
        """Preempt the most recently admitted sequences until the next step's KV fits; returns how many."""
        count = 0
        capacity = self.kv_capacity_tokens
        while capacity is not None and len(self.running) > 1 and self.kv_tokens_next_step() > capacity:
            victim = self.running[next(reversed(self.running))]
            generated_now = self.generated(victim) - victim.done_tokens
            self._leave(victim)
            victim.done_tokens += generated_now
            victim.admission += 1
            victim.preemptions += 1
            victim.admitted_step = -1
            victim.kv_ready = False  # its KV is gone: readmitted, it recomputes here
            self.waiting.appendleft(victim)
            count += 1
        self.preemptions += count
        return count

    def abort(self, request_id: str) -> None:
        """Drop a request (client gone); its slot frees at once."""
        seq = self.running.get(request_id)
        if seq is not None:
            seq.aborted = True
            self._leave(seq)
            return
        for queued in (*self.waiting, *self.prefilling):
            if queued.request_id == request_id:
                queued.aborted = True
                if queued in self.prefilling:
                    self._reserved -= queued.reserved
                    queued.reserved = 0
                    self._promised -= queued.promised
                    queued.promised = 0
                    self._unshare(queued)
                    self._release_slot(queued)
        self.waiting = deque(s for s in self.waiting if not s.aborted)
        self.prefilling = deque(s for s in self.prefilling if not s.aborted)

    @property
    def outstanding(self) -> int:
        """Requests it holds: queued, prefilling or running (what a least-outstanding router compares)."""
        return len(self.waiting) + len(self.prefilling) + len(self.running)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running and not self.prefilling

    def restore_slots(self, order: list[int]) -> None:
        """Start from the slots a running server has used: `order` lists them from least to most recently used
        (llama-server's GET /slots: each slot's last `id_task`), the rest never used."""
        if len(set(order)) != len(order) or any(not 0 <= s < self.max_num_seqs for s in order):
            raise TokenroofError(f"a slot order lists each of slots 0..{self.max_num_seqs - 1} at most once: {order}")
        for rank, slot in enumerate(order):
            self._released[slot] = rank
        self._releases = len(order)

    def slot(self, request_id: str) -> int | None:
        """The slot a sequence holds (per-slot KV streams; None: none held, or one KV cache for all)."""
        return self._slot_of.get(request_id)

    def _take_slot(self, seq: Sequence) -> None:
        """llama-server's choice: the idle slot released longest ago, the last such in id order on a tie (never
        used: the highest id first)."""
        busy = set(self._slot_of.values())
        best = -1
        for slot, released in enumerate(self._released):
            if slot not in busy and (best < 0 or released <= self._released[best]):
                best = slot
        self._slot_of[seq.request_id] = best

    def _release_slot(self, seq: Sequence) -> None:
        slot = self._slot_of.pop(seq.request_id, None)
        if slot is not None:
            self._released[slot] = self._releases
            self._releases += 1

    # -- prefix caching -------------------------------------------------------------------
    def _keys(self, seq: Sequence) -> Keys[int]:
        """The sequence's shareable prompt blocks, as cache keys (empty without prefix caching)."""
        if not self.prefix_caching:
            return ()
        if seq.block_keys is None:
            blocks = min(seq.prefix_tokens, seq.prompt_tokens) // self.block_size if seq.prefix_group >= 0 else 0
            seq.block_keys = [prefix_key(seq.prefix_group, i) for i in range(blocks)]
        return seq.block_keys

    def _hits(self, seq: Sequence, start: int = 0) -> tuple[int, int]:
        """(blocks hit from block `start` on, of them cached but held by no one): the leading blocks in memory, never
        the prompt's last token, never a block the step being planned computes."""
        keys = self._keys(seq)
        most = cacheable_tokens(seq.prompt_tokens, len(keys) * self.block_size, self.block_size) // self.block_size
        hit = revived = 0
        while start + hit < most:
            key = keys[start + hit]
            if key in self._free:
                revived += 1
            elif key not in self._refs or key in self._fresh:
                break
            hit += 1
        return hit, revived

    def _hold(self, keys: Keys[int]) -> None:
        """Hold these cached blocks (back from free memory, or one more holder)."""
        for key in keys:
            if key in self._free:
                del self._free[key]
                self._refs[key] = 1
            else:
                self._refs[key] += 1

    def _share(self, seq: Sequence, hit: int) -> None:
        """Hold the `hit` leading blocks found at admission."""
        self._hold(self._keys(seq)[:hit])
        seq.shared_blocks, seq.sharing = hit, True

    def _hit_more(self, seq: Sequence) -> None:
        """Before a prompt's first chunk runs, take the blocks computed since it was admitted: vLLM V1 looks a
        request's prefix up when it schedules its prefill, so a prompt queued behind a token budget hits what the
        prompts before it computed meanwhile."""
        if not seq.sharing:
            return
        hit, _ = self._hits(seq, seq.shared_blocks)
        if not hit:
            return
        self._hold(self._keys(seq)[seq.shared_blocks : seq.shared_blocks + hit])
        seq.shared_blocks += hit
        extra = hit * self.block_size
        seq.cached_tokens += extra
        seq.prefill_left -= extra
        seq.reserved -= extra
        self._reserved -= extra
        self._prefix_hits += extra

    def _cache_computed(self, seq: Sequence, computed_tokens: int) -> None:
        """Put the sequence's blocks that its prefill has now computed into the cache (until one is there already:
        computed twice, the second copy stays the sequence's own, and so does the rest of its prompt)."""
        keys = self._keys(seq)
        full = min(computed_tokens // self.block_size, len(keys))
        while seq.sharing and seq.shared_blocks < full:
            key = keys[seq.shared_blocks]
            if key in self._refs or key in self._free:
                seq.sharing = False
                break
            self._refs[key] = 1
            self._fresh.add(key)
            seq.shared_blocks += 1
            seq.reserved -= self.block_size
            self._reserved -= self.block_size

    def _unshare(self, seq: Sequence) -> None:
        """Let go of the sequence's shared blocks, tail first (the last freed is the last evicted)."""
        if not seq.shared_blocks:
            return
        keys = self._keys(seq)
        for key in reversed(keys[: seq.shared_blocks]):
            left = self._refs[key] - 1
            if left:
                self._refs[key] = left
            else:
                del self._refs[key]
                self._free[key] = None
        seq.shared_blocks = 0

    def _evict(self, extra: int = 0) -> None:
        """Evict cached blocks no one holds, least recently freed first, until they fit in the free memory (an
        unlimited KV cache keeps at most `UNLIMITED_FREE_BLOCKS` of them: a long run's every prompt is not kept)."""
        if not self._free:
            return
        if self.kv_capacity_tokens is None:
            for _ in range(len(self._free) - UNLIMITED_FREE_BLOCKS):
                self._free.popitem(last=False)
            return
        room = self.kv_capacity_tokens - self.kv_tokens_next_step(extra)
        excess = len(self._free) - max(int(room // self.block_size), 0)
        for _ in range(max(excess, 0)):
            self._free.popitem(last=False)

    def warm(self, group: int, prefix_tokens: int) -> None:
        """Start with a workload's shared prefix already computed and cached (free, evictable): a server that has
        served it before, as one in service has (and as bench's calibration and probe requests leave it)."""
        if not self.prefix_caching:
            return
        for block in reversed(range(prefix_tokens // self.block_size)):  # freed tail first, as a server frees them
            key = prefix_key(group, block)
            if key not in self._refs:
                self._free[key] = None
                self._free.move_to_end(key)
        self._evict()

    def prefix_counts(self) -> PrefixCounts | None:
        """vLLM's prefix-cache counters over the admissions so far (None without prefix caching)."""
        return PrefixCounts(self._prefix_queries, self._prefix_hits) if self.prefix_caching else None

    def _need(self, seq: Sequence, hit: int, revived: int) -> int:
        """KV tokens admitting the sequence takes: its own footprint past the blocks it hits, and the hit blocks
        no one held (back from free memory)."""
        return self._footprint(seq.context_at_admission + 1) - (hit - revived) * self.block_size

    def _fits(self, seq: Sequence, need: int) -> bool:
        if self.kv_capacity_tokens is None:
            return True
        if self.reserve_output:  # its whole life beside every admitted one's (more than they hold, so it is enough)
            return self._promised + self._life(seq) <= self.kv_capacity_tokens
        return self.kv_tokens_next_step(need) <= self.kv_capacity_tokens

    def _start_running(self, seq: Sequence, admitted_step: int | None = None) -> None:
        """Into the running batch; `admitted_step` on the decode clock (default now: its first token comes at this
        step's end, its next at the next decode step's)."""
        if self.speculation is not None:
            self._draw(seq)
        seq.admitted_step = self.clock if admitted_step is None else admitted_step
        self.running[seq.request_id] = seq
        self._sum_ctx0 += seq.context_at_admission
        self._sum_shared += seq.shared_blocks * self.block_size
        self._sum_admit += seq.admitted_step
        heapq.heappush(self._finishing, (seq.finish_step, self._order, seq.admission, seq))
        self._order += 1

    def plan_step(self, now: float) -> StepPlan | None:
        """Preempt if the KV cache overflows, admit what fits, prefill within the token budget, and return the
        next step (None: nothing to run). A sequence whose prefill completes this step emits its first token."""
        preempted = 0 if self.kv_capacity_tokens is None else self._preempt_for_room()
        if self.prefix_caching:  # only a prefix cache computes and frees blocks
            self._fresh.clear()
            self._evict()
        while self.waiting and len(self.running) + len(self.prefilling) < self.max_num_seqs:
            seq = self.waiting[0]
            hit, revived = self._hits(seq) if self.prefix_caching and not seq.kv_ready else (0, 0)
            need = self._need(seq, hit, revived)
            if not self._fits(seq, need):
                break
            self.waiting.popleft()
            if self.reserve_output:
                seq.promised = self._life(seq)
                self._promised += seq.promised
            seq.admitted_s = seq.admitted_s if seq.admitted_s is not None else now
            seq.cached_tokens = hit * self.block_size
            seq.prefill_started = False
            # a sequence whose KV came from a prefill replica recomputes its last token, for its logits (vLLM's P/D)
            seq.prefill_left = 1 if seq.kv_ready else seq.context_at_admission - seq.cached_tokens
            seq.reserved = self._footprint(seq.context_at_admission + 1) - seq.cached_tokens
            self._reserved += seq.reserved
            if self.prefix_caching:
                self._share(seq, hit)
                self._prefix_queries += seq.context_at_admission
                self._prefix_hits += seq.cached_tokens
                self._evict()
            self.prefilling.append(seq)
            if self.per_slot_kv:
                self._take_slot(seq)
        if self.separate_prefill and self.prefilling:
            return self._plan_prefill_step(now, preempted)
        room = math.inf if self.max_num_batched_tokens is None else self.max_num_batched_tokens - len(self.running)
        completed, prefill, prefill_sq = [], 0, 0.0
        decoding = [self._slot_of[r] for r in self.running] if self.per_slot_kv else []
        prompts: list[int] = []
        while self.prefilling and room > 0:
            seq = self.prefilling[0]
            if seq.scheduled_s is None:
                seq.scheduled_s = now
            if self.per_slot_kv:
                prompts.append(self._slot_of[seq.request_id])
            if self.prefix_caching and not seq.prefill_started and not seq.kv_ready:
                self._hit_more(seq)
            take = int(min(room, seq.prefill_left))
            room -= take
            prefill += take
            prefill_sq += self._prefill_chunk(seq, take)
            if seq.prefill_left:
                break  # chunked: the rest of this prompt waits for the next step
            self._join(seq)
            completed.append(seq)
        batch = len(self.running)
        if batch == 0 and prefill == 0:
            return None
        total_ctx = float(self._contexts(batch))
        if self.speculation is None:
            duration = self.model.step_s(batch, total_ctx, prefill, prefill_sq)
        else:  # the sequences whose prefill ends now emit their first token, drafting nothing yet
            verifying = batch - len(completed)
            duration = self.speculation.step_s(self.model, batch, total_ctx, prefill, prefill_sq, verifying)
        passes = slot_runs(decoding) + slot_runs(prompts) if self.per_slot_kv else 1
        emitted = -1.0 if self.speculation is None else len(completed) + (batch - len(completed)) * self._gain
        duration, kv = self._closed(duration, passes)
        waited, self._waited_s = self._waited_s, 0.0
        return StepPlan(
            self.steps, now, duration, batch, tuple(completed), prefill, kv, preempted, total_ctx, prefill_sq, passes,
            emitted, True, waited
        )  # fmt: skip

    def _prefill_chunk(self, seq: Sequence, take: int) -> float:
        """Schedule `take` more of the sequence's prompt this step; returns the chunk's Σ chunk² term (its causal
        attention over the tokens before it)."""
        seq.prefill_started = True
        offset = seq.context_at_admission - seq.prefill_left  # tokens in the KV cache before this chunk
        seq.prefill_left -= take
        if self.prefix_caching:
            self._cache_computed(seq, offset + take)
        return chunk_attention_sq(take, offset)

    def _join(self, seq: Sequence, admitted_step: int | None = None) -> None:
        """A sequence whose prefill is all scheduled leaves the prefilling queue for the running batch."""
        self.prefilling.popleft()
        self._reserved -= seq.reserved
        seq.reserved = 0
        self._start_running(seq, admitted_step)

    def _closed(self, duration_s: float, passes: int) -> tuple[float, float]:
        """A planned step's duration with its extra passes' cost (per-slot KV streams), and the KV it holds after it
        (once the cache's evictions for its growth are made). One StepPlan is built from them, not three: the hot
        path of every simulation."""
        if passes > 1:
            duration_s += (passes - 1) * self.model.step_s(0, 0.0)
        self.last_step_s = duration_s
        if self.prefix_caching:
            self._evict()  # the step's own growth: cached blocks give way before it runs
        return duration_s, float(self.kv_tokens_next_step())

    def _plan_prefill_step(self, now: float, preempted: int) -> StepPlan:
        """A prefill step of its own (`separate_prefill`: vLLM V0 without chunked prefill, TGI): the waiting prompts,
        whole, while they fit the token budget (the first always), the running sequences waiting; each prompt emits
        its first token at the step's end and joins the batch. The step costs the prompts' prefill and the new
        sequences' sampling."""
        room = math.inf if self.max_num_batched_tokens is None else self.max_num_batched_tokens
        completed: list[Sequence] = []
        prefill, prefill_sq, slots = 0, 0.0, []
        waiting = len(self.running)  # the running sequences this step keeps waiting
        while self.prefilling:
            seq = self.prefilling[0]
            if self.prefix_caching and not seq.prefill_started and not seq.kv_ready:
                self._hit_more(seq)
            take = seq.prefill_left
            if completed and take > room:
                break
            if seq.scheduled_s is None:
                seq.scheduled_s = now
            room -= take
            prefill += take
            prefill_sq += self._prefill_chunk(seq, take)
            if self.per_slot_kv:
                slots.append(self._slot_of[seq.request_id])
            self._join(seq, self.clock - 1)  # its first token now; its second at the next decode step
            completed.append(seq)
        self._joining = {seq.request_id for seq in completed}
        batch = len(completed)
        context = float(sum(seq.context_at_admission for seq in completed))
        if self.speculation is None:
            duration = self.model.step_s(batch, context, prefill, prefill_sq)
        else:
            duration = self.speculation.step_s(self.model, batch, context, prefill, prefill_sq, 0)
        passes = slot_runs(slots) if self.per_slot_kv else 1
        # the running batch as vLLM's gauge counts it (those waiting too); the step's tokens are the new ones' first
        running = len(self.running)
        duration, kv = self._closed(duration, passes)
        step = StepPlan(
            self.steps, now, duration, running, tuple(completed), prefill, kv, preempted, context, prefill_sq, passes,
            float(batch), False
        )  # fmt: skip
        if waiting:
            self._waited_s += step.duration_s
        return step

    def plan_quiet_run(self, now: float, until_s: float) -> QuietRun | None:
        """The steps from `now` on in which nothing changes but the contexts' growth, as one run: none admitted (no
        queue, or no room under the batch cap), no prompt in flight, no finish before the run's last step, no
        preemption, and none starting at or after `until_s` (the next event the caller knows of: an arrival).
        Their durations come from the step model over arrays, the same formula term for term, and each step
        starts where the one before ended, as when planned one at a time. Prefix caching's evictions as the KV
        grows touch only blocks no one holds, which the next admission's plan_step evicts to the same point.
        Speculating, each sequence's tokens a step were drawn when it started running (its finish step with them)
        and the KV grows by the expected tokens a step, as plan_step counts them; each step's cost is then
        Speculation.step_s, one at a time. None when fewer than `QUIET_RUN_LEAST` steps are quiet."""
        if self.prefilling or not self._finishing:
            return None
        if until_s - now < QUIET_RUN_LEAST * self.last_step_s:  # the next event is a few steps away (a guess)
            return None
        steps = self._finishing[0][0] - self.clock + 1  # the first finish ends the run (a stale entry: sooner)
        batch = len(self.running)
        if steps < QUIET_RUN_LEAST or batch == 0 or (self.waiting and batch < self.max_num_seqs):
            return None
        context0 = self._contexts(batch)
        growth = batch * self._gain  # KV tokens the running sequences gain a step (expected, speculating)
        passes = slot_runs([self._slot_of[r] for r in self.running]) if self.per_slot_kv else 1
        extra_s = (passes - 1) * self.model.step_s(0, 0.0) if passes > 1 else 0.0
        spec = self.speculation
        first_s = self.model.step_s(batch, context0) if spec is None else spec.step_s(self.model, batch, context0)
        first_s += extra_s
        # steps only lengthen as the contexts grow: the first's duration bounds how many start before `until_s`
        if until_s < math.inf:
            steps = min(steps, int((until_s - now) / first_s) + 1)
        kv = float(self.kv_tokens_next_step())
        if self.kv_capacity_tokens is not None:
            if kv > self.kv_capacity_tokens:
                return None
            steps = min(steps, int((self.kv_capacity_tokens - kv) // growth) + 1)  # each step holds `growth` more
        steps = min(steps, QUIET_RUN_STEPS)
        if steps < QUIET_RUN_LEAST:
            return None
        k = np.arange(steps, dtype=float)
        context = context0 + growth * k
        if spec is None:
            duration = self.model.steps_s(np.full(steps, float(batch)), context, np.zeros(steps), np.zeros(steps))
        else:
            duration = np.array([spec.step_s(self.model, batch, c) for c in context.tolist()])
        if passes > 1:
            duration += extra_s
        start = np.empty(steps)
        start[0] = now
        np.cumsum(duration[:-1], out=start[1:])
        start[1:] += now
        ran = int(np.searchsorted(start, until_s, side="left"))  # steps starting before the next event
        if ran < QUIET_RUN_LEAST:
            return None
        self._fresh.clear()  # as plan_step begins: the blocks computed before now are hit from here on
        self._evict()
        self.last_step_s = float(duration[ran - 1])
        emitted = -1.0 if spec is None else growth
        waited, self._waited_s = self._waited_s, 0.0
        last = StepPlan(self.steps + ran - 1, float(start[ran - 1]), float(duration[ran - 1]), batch, (), 0)
        last = last._replace(
            kv_tokens=kv + growth * (ran - 1), context_tokens=float(context[ran - 1]), passes=passes, emitted=emitted
        )
        return QuietRun(start[:ran], duration[:ran], batch, kv + growth * k[:ran], context[:ran], passes, last, waited)

    def complete_quiet_run(self, run: QuietRun) -> list[Sequence]:
        """Complete every step of a quiet run: the finishes come at its last."""
        self.steps += run.start_s.size - 1
        self.clock += run.start_s.size - 1
        return self.complete_step(run.last)

    def complete_step(self, plan: StepPlan) -> list[Sequence]:
        """Every running sequence emits a token (in a prefill step of its own, only the prompts completed); returns
        those that finished at this step."""
        for seq in plan.admitted:
            if not seq.aborted and seq.first_token_s is None:
                seq.first_token_s = plan.end_s
        finished = []
        self._joining.clear()
        clock = self.clock if plan.decoding else self.clock - 1  # a prefill step's prompts count from clock − 1
        while self._finishing and self._finishing[0][0] <= clock:
            _, _, version, seq = heapq.heappop(self._finishing)
            if seq.aborted or version != seq.admission or seq.request_id not in self.running:
                continue
            seq.finished_s = plan.end_s
            self._leave(seq, release=False, ran=clock - seq.admitted_step + 1)
            finished.append(seq)
        # llama-server releases a step's finished slots in id order: the lower id counts as released first
        if self.per_slot_kv:
            for seq in sorted(finished, key=lambda s: self._slot_of.get(s.request_id, 0)):
                self._release_slot(seq)
        self.steps += 1
        if plan.decoding:
            self.clock += 1
        return finished

    def running_sequences(self) -> list[Sequence]:
        return list(self.running.values())
