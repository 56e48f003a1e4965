"""Continuous batching, clock-free: admission, one token per running sequence per step, step times from a StepModel.

The scheduler knows nothing about time passing: a driver asks for the next step's
plan at time `now`, waits `plan.duration_s` (really, for `emulate`; virtually, for a
simulator) and then completes it. Semantics, as in vLLM's default scheduler:

- FCFS admission while fewer than `max_num_seqs` sequences run; the rest wait.
- An admitted sequence is prefilled inside the step that admits it (its prompt
  tokens join the step's compute) and emits its first token at the end of that step.
- Every running sequence emits one token per step; a sequence leaves when it has
  `max_tokens` tokens (the emulator has no EOS: as if `ignore_eos` were set).
- Step time: `t_fixed + max(t_weights(b), (b + p)·t_compute + t_attn·Σctx) + Σctx·t_kv + b·t_seq`
  for b running sequences, p prompt tokens being prefilled and ctx each sequence's
  current length: the DESIGN.md step model with each step's own contexts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tokenroof.errors import TokenroofError
from tokenroof.stepmodel import StepModel


@dataclass
class Sequence:
    """One request inside the engine."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    generated: int = 0
    admitted_s: float | None = None
    finished_s: float | None = None
    aborted: bool = False

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def done(self) -> bool:
        return self.aborted or self.generated >= self.max_tokens


@dataclass(frozen=True)
class StepPlan:
    """What one step does: who emits a token at its end, who was admitted, how long it takes."""

    start_s: float
    duration_s: float
    running: tuple[Sequence, ...]
    admitted: tuple[Sequence, ...]
    prefill_tokens: int

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


def step_time_s(model: StepModel, contexts: list[int], prefill_tokens: int, prefill_sq_tokens: float) -> float:
    """Duration of one step for sequences at these contexts plus `prefill_tokens` prompt tokens."""
    b = len(contexts)
    total_ctx = float(sum(contexts))
    compute = (b + prefill_tokens) * model.t_compute_s + model.t_attn_token_s * (total_ctx + prefill_sq_tokens / 2)
    weights = float(model.weights_time_s(b + prefill_tokens))
    return model.t_fixed_s + max(weights, compute) + total_ctx * model.t_kv_token_s + b * model.t_seq_s


@dataclass
class BatchScheduler:
    """FCFS continuous batching up to `max_num_seqs` running sequences."""

    model: StepModel
    max_num_seqs: int = 256
    waiting: deque[Sequence] = field(default_factory=deque)
    running: list[Sequence] = field(default_factory=list)
    steps: int = 0

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise TokenroofError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")

    def submit(self, seq: Sequence) -> None:
        if seq.max_tokens < 1:
            raise TokenroofError(f"{seq.request_id}: max_tokens must be at least 1")
        self.waiting.append(seq)

    def abort(self, request_id: str) -> None:
        """Drop a request (client gone): it leaves at the next step boundary."""
        for seq in (*self.waiting, *self.running):
            if seq.request_id == request_id:
                seq.aborted = True
        self.waiting = deque(s for s in self.waiting if not s.aborted)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def plan_step(self, now: float) -> StepPlan | None:
        """Admit waiting sequences and return the next step, or None when there is nothing to run."""
        self.running = [s for s in self.running if not s.aborted]
        admitted = []
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting.popleft()
            seq.admitted_s = now
            self.running.append(seq)
            admitted.append(seq)
        if not self.running:
            return None
        prefill = sum(s.prompt_tokens for s in admitted)
        prefill_sq = float(sum(s.prompt_tokens**2 for s in admitted))
        contexts = [s.context_tokens for s in self.running]
        duration = step_time_s(self.model, contexts, prefill, prefill_sq)
        return StepPlan(now, duration, tuple(self.running), tuple(admitted), prefill)

    def complete_step(self, plan: StepPlan) -> list[Sequence]:
        """Every sequence of the plan emits a token; returns those that finished."""
        self.steps += 1
        finished = []
        for seq in plan.running:
            if seq.aborted:
                continue
            seq.generated += 1
            if seq.done:
                seq.finished_s = plan.end_s
                finished.append(seq)
        self.running = [s for s in self.running if not s.done]
        return finished
