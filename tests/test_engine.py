"""The continuous-batching scheduler on a virtual clock: step times, admission, caps, aborts."""

from __future__ import annotations

import pytest

from tokenroof.errors import TokenroofError
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.engine.core import BatchScheduler, Sequence, step_time_s

SM = StepModel(t_fixed_s=1e-3, t_weights_s=10e-3, t_compute_s=100e-6, t_kv_token_s=1e-6, t_seq_s=10e-6)


def drain(scheduler: BatchScheduler) -> list[tuple[float, int, float]]:
    """Run to completion on a virtual clock; (start, batch, duration) per step."""
    now, steps = 0.0, []
    while True:
        plan = scheduler.plan_step(now)
        if plan is None:
            return steps
        steps.append((plan.start_s, plan.batch, plan.duration_s))
        scheduler.complete_step(plan)
        now = plan.end_s


def test_step_time_matches_the_step_model_without_prefill() -> None:
    contexts = [100, 300]
    assert step_time_s(SM, contexts, 0, 0.0) == pytest.approx(float(SM.step_time_s(2, 200)))


def test_one_sequence_by_hand() -> None:
    sched = BatchScheduler(SM, max_num_seqs=4)
    seq = Sequence("a", prompt_tokens=10, max_tokens=3, arrival_s=0.0)
    sched.submit(seq)
    steps = drain(sched)
    assert [b for _, b, _ in steps] == [1, 1, 1]
    # first step: prefill 10 prompt tokens join the compute (11·100 µs < 10 ms weights: hidden), KV at context 10
    assert steps[0][2] == pytest.approx(1e-3 + 10e-3 + 10 * 1e-6 + 10e-6)
    assert steps[1][2] == pytest.approx(1e-3 + 10e-3 + 11 * 1e-6 + 10e-6)
    assert sched.generated(seq) == 3 and seq.finished_s == pytest.approx(sum(d for _, _, d in steps))
    assert seq.first_token_s == pytest.approx(steps[0][2])


def test_cap_queues_and_admits_fcfs() -> None:
    sched = BatchScheduler(SM, max_num_seqs=2)
    for i in range(5):
        sched.submit(Sequence(str(i), 1, 2, 0.0))
    plan = sched.plan_step(0.0)
    assert plan is not None
    assert [s.request_id for s in plan.admitted] == ["0", "1"] and plan.batch == 2 and len(sched.waiting) == 3
    steps = drain(sched)
    assert max(b for _, b, _ in steps) == 2
    assert sum(b for _, b, _ in steps) == 10  # 5 sequences × 2 tokens, one per running sequence per step


def test_prefill_above_the_knee_costs_compute() -> None:
    sched = BatchScheduler(SM, max_num_seqs=4)
    sched.submit(Sequence("long", prompt_tokens=500, max_tokens=1, arrival_s=0.0))
    plan = sched.plan_step(0.0)
    assert plan is not None
    assert plan.duration_s == pytest.approx(1e-3 + 501 * 100e-6 + 500 * 1e-6 + 10e-6)


def test_abort_frees_the_slot() -> None:
    sched = BatchScheduler(SM, max_num_seqs=1)
    sched.submit(Sequence("a", 1, 100, 0.0))
    sched.submit(Sequence("b", 1, 1, 0.0))
    first = sched.plan_step(0.0)
    assert first is not None and [s.request_id for s in first.admitted] == ["a"]
    sched.complete_step(first)
    sched.abort("a")
    second = sched.plan_step(first.end_s)
    assert second is not None and [s.request_id for s in second.admitted] == ["b"] and second.batch == 1


def test_bad_settings() -> None:
    with pytest.raises(TokenroofError, match="max_num_seqs must be at least 1"):
        BatchScheduler(SM, max_num_seqs=0)
    with pytest.raises(TokenroofError, match="max_tokens must be at least 1"):
        BatchScheduler(SM).submit(Sequence("x", 1, 0, 0.0))


def test_chunked_prefill_spreads_a_long_prompt_and_keeps_decoding() -> None:
    sched = BatchScheduler(SM, max_num_seqs=2, max_num_batched_tokens=65)
    short = Sequence("short", prompt_tokens=4, max_tokens=10, arrival_s=0.0)
    sched.submit(short)
    first = sched.plan_step(0.0)
    assert first is not None and first.admitted == (short,)
    sched.complete_step(first)
    sched.submit(Sequence("long", prompt_tokens=200, max_tokens=2, arrival_s=0.0))
    chunks = []
    now = first.end_s
    for _ in range(4):
        plan = sched.plan_step(now)
        assert plan is not None
        chunks.append((plan.prefill_tokens, plan.batch, [s.request_id for s in plan.admitted]))
        sched.complete_step(plan)
        now = plan.end_s
    # 65-token budget, one token for the decoding sequence: 64 + 64 + 64 + 8 prompt tokens
    assert [c[0] for c in chunks] == [64, 64, 64, 8]
    assert [c[1] for c in chunks] == [1, 1, 1, 2]  # "short" decodes every step; "long" joins when prefilled
    assert chunks[3][2] == ["long"]
    with pytest.raises(TokenroofError, match="must exceed max_num_seqs"):
        BatchScheduler(SM, max_num_seqs=64, max_num_batched_tokens=64)


@pytest.mark.parametrize("overlap", [1.0, 0.3, 0.0])
def test_scheduler_step_time_keeps_the_step_models_overlap(overlap: float) -> None:
    sm = StepModel(t_fixed_s=1e-3, t_weights_s=5e-3, t_compute_s=2e-4, t_kv_token_s=1e-7, t_seq_s=1e-5, overlap=overlap)
    for batch in (1, 25, 100):
        contexts = [300] * batch
        assert step_time_s(sm, contexts, 0, 0.0) == pytest.approx(float(sm.step_time_s(batch, 300)))


# -- one formula: the scheduler's step time is StepModel.step_s, which equals the vectorised step model --------
MOE = StepModel(
    t_fixed_s=0.5e-3,
    t_weights_s=2e-3,
    t_compute_s=40e-6,
    t_kv_token_s=0.5e-6,
    t_seq_s=5e-6,
    t_attn_token_s=0.02e-6,
    t_expert_s=0.4e-3,
    num_experts=8,
    experts_per_token=2,
    overlap=0.3,
)


@pytest.mark.parametrize(
    "model", [SM, MOE, StepModel(1e-3, 4e-3, 200e-6, 1e-6, overlap=0.0)], ids=["dense", "moe", "cpu"]
)
@pytest.mark.parametrize(("batch", "context"), [(1, 0), (3, 250), (64, 1000), (700, 40)])
def test_scalar_and_vector_paths_agree(model: StepModel, batch: int, context: int) -> None:
    assert model.step_s(batch, batch * context) == pytest.approx(float(model.step_time_s(batch, context)), rel=1e-12)


def test_a_moe_step_with_prefill_and_partial_overlap_by_hand() -> None:
    """2 sequences at contexts 100 and 300, a 50-token prompt chunk: 52 tokens through the GEMMs."""
    touched = 8 * (1 - (1 - 2 / 8) ** 52)
    weights = 2e-3 + 0.4e-3 * touched
    compute = 52 * 40e-6 + 0.02e-6 * (400 + 50**2 / 2)
    expected = 0.5e-3 + max(weights, compute) + 0.7 * min(weights, compute) + 400 * 0.5e-6 + 2 * 5e-6
    assert MOE.step_s(2, 400, 50, 50**2) == pytest.approx(expected, rel=1e-12)
    sched = BatchScheduler(MOE, max_num_seqs=4)
    for name, prompt in (("a", 100), ("b", 300)):
        sched.submit(Sequence(name, prompt_tokens=prompt, max_tokens=5, arrival_s=0.0))
    first = sched.plan_step(0.0)
    assert first is not None
    sched.complete_step(first)
    sched.submit(Sequence("c", prompt_tokens=50, max_tokens=5, arrival_s=0.0))
    plan = sched.plan_step(first.end_s)
    assert plan is not None and plan.prefill_tokens == 50
    # three run (the new one emits its first token at the end of the step that prefills it), at contexts 101,
    # 301 and 50, and its 50 prompt tokens share the step's GEMMs
    assert plan.batch == 3
    assert plan.duration_s == pytest.approx(MOE.step_s(3, 101 + 301 + 50, 50, 50**2), rel=1e-12)
