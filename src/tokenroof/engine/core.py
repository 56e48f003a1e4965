"""Continuous batching, clock-free: admission, one token per running sequence per step, step times from a StepModel.

The scheduler knows nothing about time passing: a driver asks for the next step's
plan at time `now`, waits `plan.duration_s` (really, for `emulate`; virtually, for
`simulate`) and then completes it. Semantics, as in vLLM's default scheduler:

- FCFS admission while fewer than `max_num_seqs` sequences run; the rest wait.
- An admitted sequence is prefilled inside the step that admits it (its prompt
  tokens join the step's compute) and emits its first token at the end of that step.
- Every running sequence emits one token per step; a sequence leaves when it has
  `max_tokens` tokens (the emulator has no EOS: as if `ignore_eos` were set).
- Step time: `t_fixed + max(t_weights(b + p), (b + p)·t_compute + t_attn·Σctx) + Σctx·t_kv + b·t_seq`
  for b running sequences, p prompt tokens being prefilled and ctx each sequence's
  current length: the DESIGN.md step model with each step's own contexts.

Bookkeeping is O(1) per step plus O(1) per admission and finish: a sequence
admitted at step k with n tokens to make finishes at step k + n − 1, and the sum
of contexts is kept from running sums, so a simulator never touches every
sequence every step.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from tokenroof.errors import TokenroofError
from tokenroof.stepmodel import StepModel


@dataclass(eq=False)
class Sequence:
    """One request inside the engine."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    admitted_step: int = -1
    admitted_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    aborted: bool = False

    @property
    def finish_step(self) -> int:
        return self.admitted_step + self.max_tokens - 1


@dataclass(frozen=True)
class StepPlan:
    """What one step does: how many run, who was admitted, how long it takes."""

    index: int
    start_s: float
    duration_s: float
    batch: int
    admitted: tuple[Sequence, ...]
    prefill_tokens: int

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class StepCoefficients:
    """The step model's terms as plain floats (the simulator's hot loop avoids numpy)."""

    fixed: float
    weights: float
    expert: float
    num_experts: int
    experts_per_token: int
    compute: float
    attn: float
    kv: float
    seq: float

    @classmethod
    def of(cls, m: StepModel) -> StepCoefficients:
        return cls(
            m.t_fixed_s,
            m.t_weights_s,
            m.t_expert_s,
            m.num_experts,
            m.experts_per_token,
            m.t_compute_s,
            m.t_attn_token_s,
            m.t_kv_token_s,
            m.t_seq_s,
        )

    def weights_s(self, tokens: int) -> float:
        if self.num_experts == 0:
            return self.weights
        touched = self.num_experts * (1.0 - (1.0 - self.experts_per_token / self.num_experts) ** tokens)
        return self.weights + self.expert * touched

    def step_s(self, batch: int, total_ctx: float, prefill: int, prefill_sq: float) -> float:
        compute = (batch + prefill) * self.compute + self.attn * (total_ctx + prefill_sq / 2)
        return self.fixed + max(self.weights_s(batch + prefill), compute) + total_ctx * self.kv + batch * self.seq


def step_time_s(model: StepModel, contexts: list[int], prefill_tokens: int, prefill_sq_tokens: float) -> float:
    """Duration of one step for sequences at these contexts plus `prefill_tokens` prompt tokens."""
    return StepCoefficients.of(model).step_s(len(contexts), float(sum(contexts)), prefill_tokens, prefill_sq_tokens)


@dataclass
class BatchScheduler:
    """FCFS continuous batching up to `max_num_seqs` running sequences."""

    model: StepModel
    max_num_seqs: int = 256
    waiting: deque[Sequence] = field(default_factory=deque)
    running: dict[str, Sequence] = field(default_factory=dict)
    steps: int = 0  # steps completed
    _finishing: list[tuple[int, int, Sequence]] = field(default_factory=list)  # heap of (finish step, order, seq)
    _order: int = 0
    _sum_prompt: int = 0
    _sum_admit: int = 0

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise TokenroofError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        self.coefficients = StepCoefficients.of(self.model)

    def submit(self, seq: Sequence) -> None:
        if seq.max_tokens < 1:
            raise TokenroofError(f"{seq.request_id}: max_tokens must be at least 1")
        self.waiting.append(seq)

    def generated(self, seq: Sequence) -> int:
        """Tokens a running (or finished) sequence has emitted so far."""
        if seq.admitted_step < 0:
            return 0
        return min(self.steps - seq.admitted_step, seq.max_tokens)

    def _leave(self, seq: Sequence) -> None:
        del self.running[seq.request_id]
        self._sum_prompt -= seq.prompt_tokens
        self._sum_admit -= seq.admitted_step

    def abort(self, request_id: str) -> None:
        """Drop a request (client gone); its slot frees at once."""
        seq = self.running.get(request_id)
        if seq is not None:
            seq.aborted = True
            self._leave(seq)
            return
        for queued in self.waiting:
            if queued.request_id == request_id:
                queued.aborted = True
        self.waiting = deque(s for s in self.waiting if not s.aborted)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def plan_step(self, now: float) -> StepPlan | None:
        """Admit waiting sequences and return the next step, or None when there is nothing to run."""
        admitted = []
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting.popleft()
            seq.admitted_step, seq.admitted_s = self.steps, now
            self.running[seq.request_id] = seq
            self._sum_prompt += seq.prompt_tokens
            self._sum_admit += seq.admitted_step
            heapq.heappush(self._finishing, (seq.finish_step, self._order, seq))
            self._order += 1
            admitted.append(seq)
        batch = len(self.running)
        if batch == 0:
            return None
        prefill = sum(s.prompt_tokens for s in admitted)
        prefill_sq = float(sum(s.prompt_tokens**2 for s in admitted))
        total_ctx = float(self._sum_prompt + batch * self.steps - self._sum_admit)
        duration = self.coefficients.step_s(batch, total_ctx, prefill, prefill_sq)
        return StepPlan(self.steps, now, duration, batch, tuple(admitted), prefill)

    def complete_step(self, plan: StepPlan) -> list[Sequence]:
        """Every running sequence emits a token; returns those that finished at this step."""
        for seq in plan.admitted:
            if not seq.aborted:
                seq.first_token_s = plan.end_s
        finished = []
        while self._finishing and self._finishing[0][0] <= self.steps:
            _, _, seq = heapq.heappop(self._finishing)
            if seq.aborted or seq.request_id not in self.running:
                continue
            seq.finished_s = plan.end_s
            self._leave(seq)
            finished.append(seq)
        self.steps += 1
        return finished

    def running_sequences(self) -> list[Sequence]:
        return list(self.running.values())
