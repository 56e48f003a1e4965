"""The scheduler on the wall clock: each step really takes its planned time (asyncio), or, given a `StepRunner`,
as long as the runner takes to compute it (a real engine: `tokenroof serve`)."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tokenroof.model.cost import EnergyCounter
from tokenroof.serving.engine.core import BatchScheduler, Sequence, StepPlan

TokenCallback = Callable[[Sequence, int, float], None]  # (sequence, tokens made so far, time) after each step


class StepRunner(Protocol):
    """Computes a planned step for real; the step lasts as long as `run` takes."""

    async def run(self, scheduler: BatchScheduler, plan: StepPlan) -> None: ...


RESTART_BEHIND_S = 0.05  # a driver later than this (and than a step) restarts its schedule from now


@dataclass
class RealtimeEngine:
    """Runs steps back to back on absolute deadlines (no drift), waking when requests arrive."""

    scheduler: BatchScheduler
    on_token: TokenCallback
    clock: Callable[[], float] = field(default=lambda: asyncio.get_running_loop().time())
    runner: StepRunner | None = None  # None: sleep each step's modelled time
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    last_plan: StepPlan | None = None
    tokens_generated: int = 0
    prompt_tokens_processed: int = 0
    lateness_s: float = 0.0  # worst delay of a step's end behind its plan
    lateness_sum_s: float = 0.0  # Σ delay, for the mean
    restarts: int = 0  # times the driver fell more than a step (and 50 ms) behind and restarted its schedule
    meter: EnergyCounter | None = None  # its boards' energy, step by step (the emulator's DCGM counters)

    @property
    def schedulers(self) -> list[BatchScheduler]:
        """The schedulers whose batch the clients see (one; a disaggregated engine has its decode pool's)."""
        return [self.scheduler]

    @property
    def cache_schedulers(self) -> list[BatchScheduler]:
        """The schedulers that look prompts up in a prefix cache."""
        return [self.scheduler]

    def submit(self, seq: Sequence) -> None:
        self.scheduler.submit(seq)
        self._wake.set()

    def abort(self, request_id: str) -> None:
        self.scheduler.abort(request_id)

    async def run(self) -> None:
        """Forever: plan a step, sleep until its end, tell each running sequence how many tokens it has made (one
        more a step, or several when speculating: one delivery, as vLLM streams a step's tokens in one chunk)."""
        now = self.clock()
        while True:
            plan = self.scheduler.plan_step(now)
            if plan is None:
                if self.meter is not None:
                    self.meter.watts = self.meter.power.idle_watts  # nothing runs: the boards idle
                self._wake.clear()
                await self._wake.wait()
                now = self.clock()
                continue
            if self.runner is None:
                delay = plan.end_s - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)
            else:
                start = self.clock()
                await self.runner.run(self.scheduler, plan)
                plan = plan._replace(start_s=start, duration_s=self.clock() - start)
            self.last_plan = plan
            emitting = self.scheduler.running_sequences()  # the plan's batch, less any aborted meanwhile
            before = [self.scheduler.generated(seq) for seq in emitting]
            self.scheduler.complete_step(plan)
            self.prompt_tokens_processed += plan.prefill_tokens
            if self.meter is not None:
                self.meter.add_step(
                    self.scheduler.model,
                    plan.duration_s,
                    plan.batch if plan.decoding else len(plan.admitted),  # a prefill step computes its new ones
                    plan.context_tokens,
                    plan.prefill_tokens,
                    plan.prefill_sq,
                )
            for seq, made in zip(emitting, before, strict=True):
                now_made = self.scheduler.generated(seq)  # one token more, or several when speculating
                if now_made > made:  # none in a prefill step of its own (the running sequences wait)
                    self.tokens_generated += now_made - made
                    self.on_token(seq, now_made, plan.end_s)
            # the next step starts when this one was due to end, not when delivery finished, so a driver that
            # delivers late but keeps up keeps the model's step time (no drift); one more than a step (and 50 ms)
            # behind (an overloaded machine) restarts from now rather than bursting to catch up
            late = self.clock() - plan.end_s
            self.lateness_s = max(self.lateness_s, late)
            self.lateness_sum_s += max(late, 0.0)
            behind = late > max(RESTART_BEHIND_S, plan.duration_s)
            if behind:
                self.restarts += 1
            now = self.clock() if behind else plan.end_s


class EngineGroup(ABC):
    """Several realtime engines behind one `submit`/`abort` (a fleet, a split of prefill and decode): what the
    emulator reads of all of them, and running them together. Subclasses say which engines (`engines`)."""

    @property
    @abstractmethod
    def engines(self) -> list[RealtimeEngine]:
        """Every engine of the group, in the order they are run."""

    @property
    def lateness_s(self) -> float:
        return max(e.lateness_s for e in self.engines)

    @property
    def lateness_sum_s(self) -> float:
        return sum(e.lateness_sum_s for e in self.engines)

    @property
    def restarts(self) -> int:
        return sum(e.restarts for e in self.engines)

    async def run(self) -> None:
        """Every engine until one fails (then the rest are cancelled and the failure surfaces) or all are cancelled."""
        async with asyncio.TaskGroup() as group:
            for engine in self.engines:
                group.create_task(engine.run())
