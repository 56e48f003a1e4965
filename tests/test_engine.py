"""The continuous-batching scheduler on a virtual clock: step times, admission, caps, aborts."""

from __future__ import annotations

import pytest

from tokenroof.errors import TokenroofError
from tokenroof.model.speculative import Speculation
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.engine.core import BatchScheduler, Sequence, StepPlan, step_time_s

SM = StepModel(t_fixed_s=1e-3, t_weights_s=10e-3, t_compute_s=100e-6, t_kv_token_s=1e-6, t_seq_s=10e-6)
ATTENDING = StepModel(1e-3, 10e-3, 100e-6, 1e-6, 10e-6, t_attn_token_s=1e-7)  # SM, with attention (1e-7 s a token pair)


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


# -- by hand, one behaviour each (the tests `make mutation` runs on this module):
# The scheduler's bookkeeping by hand: admission, KV blocks, preemption, aborts, first and last tokens.
# T = 1 + max(0, (b + p)·0) + Σctx·0.01 + b·0.1: every step time says the batch and the context it saw
FLAT = StepModel(t_fixed_s=1.0, t_weights_s=0.0, t_compute_s=0.0, t_kv_token_s=0.01, t_seq_s=0.1)


def run(sched: BatchScheduler, steps: int, now: float = 0.0) -> list[StepPlan]:
    plans = []
    for _ in range(steps):
        plan = sched.plan_step(now)
        if plan is None:
            break
        plans.append(plan)
        sched.complete_step(plan)
        now = plan.end_s
    return plans


def test_sequence_and_plan_arithmetic() -> None:
    seq = Sequence("a", prompt_tokens=10, max_tokens=5, arrival_s=0.0, done_tokens=2, admitted_step=7)
    assert seq.context_at_admission == 12
    assert seq.finish_step == 7 + 5 - 2 - 1
    plan = StepPlan(step=0, start_s=2.0, duration_s=0.5, batch=1, admitted=(), prefill_tokens=0)
    assert plan.end_s == 2.5 and plan.kv_tokens == 0.0 and plan.preempted == 0


def test_step_time_sums_the_contexts() -> None:
    assert step_time_s(FLAT, [10, 30], 0, 0.0) == pytest.approx(1 + 40 * 0.01 + 2 * 0.1)
    assert step_time_s(FLAT, [], 5, 25.0) == pytest.approx(1.0)
    # prompts are charged: 5 prompt tokens in chunks of 2 and 3 (Σ chunk² = 13) beside 2 decoding sequences.
    # GEMM 0.1 s per token for 7 tokens, attention 1 ms per context token (40) and per prompt pair (13 / 2)
    gemm = StepModel(
        t_fixed_s=1.0, t_weights_s=0.0, t_compute_s=0.1, t_kv_token_s=0.01, t_seq_s=0.1, t_attn_token_s=1e-3
    )
    assert step_time_s(gemm, [10, 30], 5, 13.0) == pytest.approx(1 + 0.7 + 0.040 + 0.0065 + 0.4 + 0.2)


def test_settings_at_their_limits() -> None:
    assert BatchScheduler(FLAT, max_num_seqs=1).max_num_seqs == 1
    assert BatchScheduler(FLAT).max_num_seqs == 256 and BatchScheduler(FLAT).block_size == 16
    BatchScheduler(FLAT, kv_capacity_tokens=16)  # one block: allowed
    with pytest.raises(TokenroofError, match=r"^the KV cache must hold at least one block \(16 tokens\)$"):
        BatchScheduler(FLAT, kv_capacity_tokens=15)
    with pytest.raises(TokenroofError, match=r"at least one block \(4 tokens\)"):
        BatchScheduler(FLAT, kv_capacity_tokens=3, block_size=4)
    BatchScheduler(FLAT, max_num_seqs=4, max_num_batched_tokens=5)  # one more than the sequences: allowed
    with pytest.raises(TokenroofError, match=r"^max_num_batched_tokens \(4\) must exceed max_num_seqs \(4\)"):
        BatchScheduler(FLAT, max_num_seqs=4, max_num_batched_tokens=4)
    with pytest.raises(TokenroofError, match=r"^max_num_seqs must be at least 1, got 0$"):
        BatchScheduler(FLAT, max_num_seqs=0)


def test_submit_checks_the_whole_request_fits_the_cache() -> None:
    sched = BatchScheduler(FLAT, kv_capacity_tokens=32, block_size=16)
    sched.submit(Sequence("fits", prompt_tokens=10, max_tokens=7, arrival_s=0.0))  # 17 + 15 = 32
    big = r"^request big needs 33 tokens of KV cache \(10 prompt \+ 8 output \+ 15 of its last block's slots\); "
    with pytest.raises(TokenroofError, match=big + r"the cache holds 32$"):
        sched.submit(Sequence("big", prompt_tokens=10, max_tokens=8, arrival_s=0.0))
    with pytest.raises(TokenroofError, match=r"^zero: max_tokens must be at least 1$"):
        sched.submit(Sequence("zero", prompt_tokens=1, max_tokens=0, arrival_s=0.0))
    assert [s.request_id for s in sched.waiting] == ["fits"]


def test_one_sequence_step_by_step() -> None:
    sched = BatchScheduler(FLAT, max_num_seqs=2, block_size=4)
    seq = Sequence("a", prompt_tokens=6, max_tokens=3, arrival_s=0.0)
    assert sched.idle and sched.plan_step(0.0) is None
    sched.submit(seq)
    assert not sched.idle and sched.generated(seq) == 0
    first = sched.plan_step(5.0)
    assert first is not None
    assert (first.step, first.start_s, first.batch, first.prefill_tokens, first.preempted) == (0, 5.0, 1, 6, 0)
    assert first.admitted == (seq,) and seq.admitted_s == 5.0 and seq.admitted_step == sched.clock == 1  # decode clock
    # the prefilled sequence decodes in its first step at context 6: 1 + 6·0.01 + 0.1
    assert first.duration_s == pytest.approx(1.16)
    # after the step it holds 7 tokens, in blocks: 7 + (4 − 1)
    assert first.kv_tokens == 10.0
    assert sched.complete_step(first) == [] and seq.first_token_s == pytest.approx(6.16)
    assert sched.generated(seq) == 1 and sched.steps == 1
    second = sched.plan_step(first.end_s)
    assert second is not None and second.admitted == () and second.prefill_tokens == 0
    assert second.duration_s == pytest.approx(1 + 7 * 0.01 + 0.1) and second.kv_tokens == 11.0
    assert sched.complete_step(second) == []
    assert sched.generated(seq) == 2 and sched.running_sequences() == [seq]
    third = sched.plan_step(second.end_s)
    assert third is not None and third.step == 2
    assert sched.complete_step(third) == [seq]
    assert seq.finished_s == pytest.approx(third.end_s) and seq.first_token_s == pytest.approx(6.16)
    assert sched.generated(seq) == 3 and sched.idle and sched.plan_step(third.end_s) is None
    assert sched.running_sequences() == []


def test_contexts_grow_one_token_per_step_for_each_sequence() -> None:
    sched = BatchScheduler(FLAT, max_num_seqs=4)
    sched.submit(Sequence("a", prompt_tokens=10, max_tokens=4, arrival_s=0.0))
    plans = run(sched, 2)
    sched.submit(Sequence("b", prompt_tokens=20, max_tokens=2, arrival_s=0.0))
    plans += run(sched, 3, plans[-1].end_s)
    # contexts: [10], [11], [12, 20 (b prefilled in its step)], [13, 21]; both finish at step 3
    assert [p.batch for p in plans] == [1, 1, 2, 2]
    assert [p.duration_s for p in plans] == pytest.approx(
        [1 + 0.1 + 0.1, 1 + 0.11 + 0.1, 1 + 0.32 + 0.2, 1 + 0.34 + 0.2]
    )
    assert [p.prefill_tokens for p in plans] == [10, 0, 20, 0]


def test_fcfs_admission_up_to_the_cap() -> None:
    sched = BatchScheduler(FLAT, max_num_seqs=2)
    for i in range(3):
        sched.submit(Sequence(str(i), prompt_tokens=1, max_tokens=1, arrival_s=0.0))
    plan = sched.plan_step(0.0)
    assert plan is not None and [s.request_id for s in plan.admitted] == ["0", "1"] and plan.batch == 2
    assert [s.request_id for s in sched.waiting] == ["2"]
    done = sched.complete_step(plan)
    assert [s.request_id for s in done] == ["0", "1"]
    nxt = sched.plan_step(plan.end_s)
    assert nxt is not None and [s.request_id for s in nxt.admitted] == ["2"] and nxt.step == 1


def test_admission_waits_for_kv_blocks_and_the_exact_fit_is_admitted() -> None:
    # block 4; a's next step holds 5 + 3 = 8 tokens, b needs 3 + 1 + 3 = 7 of 15 left... capacity 15: 8 + 7 = 15 fits
    sched = BatchScheduler(FLAT, max_num_seqs=4, kv_capacity_tokens=15, block_size=4)
    sched.submit(Sequence("a", prompt_tokens=4, max_tokens=3, arrival_s=0.0))
    sched.submit(Sequence("b", prompt_tokens=3, max_tokens=1, arrival_s=0.0))
    plan = sched.plan_step(0.0)
    assert plan is not None and [s.request_id for s in plan.admitted] == ["a", "b"]
    assert plan.kv_tokens == 15.0
    tight = BatchScheduler(FLAT, max_num_seqs=4, kv_capacity_tokens=14, block_size=4)
    tight.submit(Sequence("a", prompt_tokens=4, max_tokens=3, arrival_s=0.0))
    tight.submit(Sequence("b", prompt_tokens=3, max_tokens=1, arrival_s=0.0))
    plan = tight.plan_step(0.0)
    assert plan is not None and [s.request_id for s in plan.admitted] == ["a"]
    assert [s.request_id for s in tight.waiting] == ["b"]


def test_preemption_recomputes_the_newest_and_readmits_it_first() -> None:
    # block 1: tokens held = Σ(context + 1). a and b start at 2 tokens each; the cache of 9 overflows at step 2
    sched = BatchScheduler(FLAT, max_num_seqs=4, kv_capacity_tokens=9, block_size=1)
    a = Sequence("a", prompt_tokens=2, max_tokens=4, arrival_s=0.0)
    b = Sequence("b", prompt_tokens=2, max_tokens=4, arrival_s=0.0)
    sched.submit(a)
    sched.submit(b)
    plans = run(sched, 2)
    assert [p.preempted for p in plans] == [0, 0] and [p.kv_tokens for p in plans] == [6.0, 8.0]
    third = sched.plan_step(plans[-1].end_s)
    assert third is not None
    # next step would hold 5 + 5 = 10 > 9: b (admitted last) goes back to the front of the queue
    assert third.preempted == 1 and sched.preemptions == 1 and third.batch == 1
    assert b.preemptions == 1 and b.done_tokens == 2 and b.admission == 1 and b.admitted_step == -1
    assert list(sched.waiting) == [b] and sched.generated(b) == 2
    assert third.kv_tokens == 5.0
    sched.complete_step(third)
    # readmitted once a finishes: it prefills its prompt plus what it had made (2 + 2 tokens)
    rest = run(sched, 10, third.end_s)
    assert a.finished_s is not None and b.finished_s is not None
    readmit = next(p for p in rest if p.admitted)
    assert readmit.admitted == (b,) and readmit.prefill_tokens == 4
    # b makes its 2 remaining tokens after readmission: it finishes one step after the one that readmits it
    assert b.finished_s == pytest.approx(rest[rest.index(readmit) + 1].end_s)
    assert sched.generated(b) == 4 and b.first_token_s == pytest.approx(plans[0].end_s)
    assert b.admitted_s == 0.0  # its queueing ended at its first admission, not at the readmission


def test_reserving_the_whole_output_admits_fewer_and_never_preempts() -> None:
    """TensorRT-LLM's GUARANTEED_NO_EVICT, by hand: the two sequences of the test above (prompt 2, 4 tokens to make,
    a life of 2 + 4 = 6 tokens at block 1) in a cache of 9: the second waits until the first leaves (6 + 6 > 9), and
    nothing is preempted; with a cache of 12 both run from the first step."""
    sched = BatchScheduler(FLAT, max_num_seqs=4, kv_capacity_tokens=9, block_size=1, reserve_output=True)
    a = Sequence("a", prompt_tokens=2, max_tokens=4, arrival_s=0.0)
    b = Sequence("b", prompt_tokens=2, max_tokens=4, arrival_s=0.0)
    sched.submit(a)
    sched.submit(b)
    plans = run(sched, 20)
    assert [p.batch for p in plans] == [1, 1, 1, 1, 1, 1, 1, 1] and sched.preemptions == 0
    assert plans[4].admitted == (b,) and b.first_token_s == pytest.approx(plans[4].end_s)
    assert max(p.kv_tokens for p in plans) <= 6 and sched._promised == 0  # all given back
    roomy = BatchScheduler(FLAT, max_num_seqs=4, kv_capacity_tokens=12, block_size=1, reserve_output=True)
    for seq in (Sequence("a", 2, 4, 0.0), Sequence("b", 2, 4, 0.0)):
        roomy.submit(seq)
    assert [p.batch for p in run(roomy, 20)] == [2, 2, 2, 2]
    with pytest.raises(TokenroofError, match=r"needs 7 tokens of KV cache \(2 prompt \+ 5 output \+ 0 of"):  # a life
        BatchScheduler(FLAT, kv_capacity_tokens=6, block_size=1, reserve_output=True).submit(Sequence("c", 2, 5, 0.0))


def test_an_aborted_reservation_is_given_back() -> None:
    sched = BatchScheduler(FLAT, max_num_seqs=4, kv_capacity_tokens=12, block_size=1, reserve_output=True)
    a, b, c = (Sequence(name, 2, 4, 0.0) for name in "abc")
    for seq in (a, b, c):
        sched.submit(seq)
    plan = sched.plan_step(0.0)
    assert plan is not None and plan.admitted == (a, b) and list(sched.waiting) == [c]
    sched.complete_step(plan)
    sched.abort("a")
    nxt = sched.plan_step(plan.end_s)
    assert nxt is not None and nxt.admitted == (c,) and sched._promised == 12


def test_a_lone_sequence_is_never_preempted() -> None:
    sched = BatchScheduler(FLAT, max_num_seqs=4, kv_capacity_tokens=6, block_size=1)
    seq = Sequence("a", prompt_tokens=1, max_tokens=5, arrival_s=0.0)
    sched.submit(seq)
    plans = run(sched, 10)
    assert len(plans) == 5 and sum(p.preempted for p in plans) == 0 and sched.preemptions == 0


def test_abort_of_a_waiting_and_a_prefilling_request() -> None:
    sched = BatchScheduler(FLAT, max_num_seqs=4, max_num_batched_tokens=8, kv_capacity_tokens=64, block_size=4)
    sched.submit(Sequence("long", prompt_tokens=20, max_tokens=1, arrival_s=0.0))
    queued = Sequence("queued", prompt_tokens=1, max_tokens=1, arrival_s=0.0)
    plan = sched.plan_step(0.0)
    assert plan is not None and plan.prefill_tokens == 8 and plan.batch == 0
    # the prefilling prompt reserves its blocks: 21 + 3
    assert plan.kv_tokens == 24.0
    sched.complete_step(plan)
    sched.submit(queued)
    sched.abort("long")
    assert sched.kv_tokens_next_step() == 0 and not sched.prefilling
    assert [s.request_id for s in sched.waiting] == ["queued"]
    sched.abort("queued")
    assert queued.aborted and sched.idle and sched.plan_step(plan.end_s) is None
    sched.abort("unknown")  # nothing to drop: no error


def test_abort_of_a_running_sequence_frees_it_without_a_finish() -> None:
    sched = BatchScheduler(FLAT, max_num_seqs=4)
    a = Sequence("a", prompt_tokens=5, max_tokens=2, arrival_s=0.0)
    b = Sequence("b", prompt_tokens=7, max_tokens=2, arrival_s=0.0)
    sched.submit(a)
    sched.submit(b)
    first = sched.plan_step(0.0)
    assert first is not None
    sched.abort("a")
    assert sched.complete_step(first) == [] and a.first_token_s is None and b.first_token_s is not None
    second = sched.plan_step(first.end_s)
    # only b's context (8) counts now
    assert second is not None and second.batch == 1 and second.duration_s == pytest.approx(1 + 0.08 + 0.1)
    assert sched.complete_step(second) == [b] and a.finished_s is None


def test_chunked_prefill_takes_the_budget_less_the_decoding_sequences() -> None:
    sched = BatchScheduler(FLAT, max_num_seqs=2, max_num_batched_tokens=10, block_size=1)
    sched.submit(Sequence("d", prompt_tokens=1, max_tokens=20, arrival_s=0.0))
    run(sched, 1)
    sched.submit(Sequence("p", prompt_tokens=20, max_tokens=1, arrival_s=0.0))
    plans = run(sched, 3, 10.0)
    assert [p.prefill_tokens for p in plans] == [9, 9, 2]
    assert [p.batch for p in plans] == [1, 1, 2]
    # the chunks' squares feed causal attention: with attention per token 1 and nothing else, T = Σ chunk² / 2
    attn = StepModel(0.0, 0.0, 0.0, 0.0, t_attn_token_s=1.0)
    sched = BatchScheduler(attn, max_num_seqs=1, max_num_batched_tokens=4)
    sched.submit(Sequence("p", prompt_tokens=6, max_tokens=1, arrival_s=0.0))
    first = sched.plan_step(0.0)
    assert first is not None and first.prefill_tokens == 4 and first.duration_s == pytest.approx(16 / 2)


def test_the_token_budget_is_shared_by_the_prompts_of_one_step() -> None:
    # budget 5: the first prompt takes 3, the second the 2 left, its last token waits for the next step
    sched = BatchScheduler(FLAT, max_num_seqs=4, max_num_batched_tokens=5)
    for name in ("a", "b"):
        sched.submit(Sequence(name, prompt_tokens=3, max_tokens=1, arrival_s=0.0))
    first = sched.plan_step(0.0)
    assert first is not None and first.prefill_tokens == 5 and [s.request_id for s in first.admitted] == ["a"]
    sched.complete_step(first)
    second = sched.plan_step(first.end_s)
    assert second is not None and second.prefill_tokens == 1 and [s.request_id for s in second.admitted] == ["b"]


def test_a_sequence_preempted_twice_counts_twice() -> None:
    # block 1, cache 16: three 2-token prompts hold 3·(2 + k + 1) tokens after k steps, so step 3 (18) preempts c,
    # the newest; readmitted beside a (still growing to 14 tokens), c is preempted again before it can finish
    sched = BatchScheduler(FLAT, max_num_seqs=4, kv_capacity_tokens=16, block_size=1)
    seqs = [Sequence(name, prompt_tokens=2, max_tokens=m, arrival_s=0.0) for name, m in (("a", 12), ("b", 6), ("c", 6))]
    for seq in seqs:
        sched.submit(seq)
    plans = run(sched, 200)
    assert [s.preemptions for s in seqs] == [0, 0, 2] and sched.preemptions == sum(p.preempted for p in plans) == 2
    assert all(s.finished_s is not None for s in seqs) and sched.generated(seqs[2]) == 6


def test_a_prefill_step_of_its_own_is_one_pass_that_preempts_nothing() -> None:
    """separate_prefill (vLLM V0, TGI): a waiting prompt is prefilled in a step of its own, the running sequences
    paused; one forward pass (a shared KV cache, no per-slot streams), nothing preempted, the prompt's tokens and its
    first token at the step's end, the new sequence counted running as vLLM's gauge counts it. By hand: an 8-token
    prompt alone, 1 + max(10, (1 + 8)·0.1) + 8·1e-3 + 1·0.01 = 11.018 ms."""
    sched = BatchScheduler(SM, 4, separate_prefill=True)
    sched.submit(Sequence("0", 8, 4, 0.0))
    plan = sched.plan_step(0.0)
    assert plan is not None and not plan.decoding
    assert plan.passes == 1 and plan.preempted == 0 and plan.prefill_tokens == 8 and plan.batch == 1
    assert plan.duration_s == pytest.approx(11.018e-3)


def test_prefill_steps_of_their_own_fill_the_budget_pass_per_slot_run_and_add_up_the_wait() -> None:
    """separate_prefill with llama-server's per-slot KV streams and a 300-token budget. A prompt that fills the budget
    to the token joins the step (100 + 200 = 300); the next waits for a step of its own. By hand, with attention
    (t_attn 1e-7 s per token pair) and the ring 3, 0, 2, 1 (least recently used first: "r" takes slot 3, "a" 0, "b" 2,
    "c" 1):
    - "a" and "b": 300 prompt tokens, Σ chunk² = 100² + 200² = 50,000, context 300; compute 2·1e-4 + 1e-7·300 +
      300·1e-4 + 1e-7·50,000/2 = 32.73 ms over the weights' 10; 1 + 32.73 + 300·1e-3 (KV) + 2·0.01 = 34.05 ms, and
      slots 0 and 2 are two runs: one more pass, the empty step's 1 + 10 ms: 45.05 ms;
    - "c" alone: 50 tokens, 2,500; compute 5.23 ms under the weights: 1 + 10 + 0.05 + 0.01 = 11.06 ms, one pass;
    - the decode step after them says "r" waited through both: 56.11 ms."""
    sm = ATTENDING
    sched = BatchScheduler(sm, 4, max_num_batched_tokens=300, separate_prefill=True, per_slot_kv=True)
    sched.restore_slots([3, 0, 2, 1])
    sched.submit(Sequence("r", 10, 20, 0.0))
    first = sched.plan_step(0.0)
    assert first is not None
    sched.complete_step(first)
    for name, prompt in (("a", 100), ("b", 200), ("c", 50)):
        sched.submit(Sequence(name, prompt, 5, first.end_s))
    both = sched.plan_step(first.end_s)
    assert both is not None and not both.decoding
    assert [s.request_id for s in both.admitted] == ["a", "b"] and (both.batch, both.tokens) == (3, 2)  # r waits
    assert (both.prefill_tokens, both.prefill_sq, both.context_tokens, both.passes) == (300, 50_000.0, 300.0, 2)
    assert both.duration_s == pytest.approx(45.05e-3) and both.step == 1
    sched.complete_step(both)
    alone = sched.plan_step(both.end_s)
    assert alone is not None and [s.request_id for s in alone.admitted] == ["c"] and not alone.decoding
    assert (alone.prefill_tokens, alone.prefill_sq, alone.passes) == (50, 2_500.0, 1)
    assert alone.duration_s == pytest.approx(11.06e-3)
    sched.complete_step(alone)
    decode = sched.plan_step(alone.end_s)
    assert decode is not None and decode.decoding and decode.batch == 4
    assert decode.waited_s == pytest.approx(56.11e-3)
    assert [sched.slot(r) for r in "rabc"] == [3, 0, 2, 1]


def test_a_prefill_step_of_its_own_while_speculating_verifies_nothing_and_drafts_only_the_prompt() -> None:
    """Speculating (γ = 3, a draft model), a prefill step of its own runs the prompt through the target and the draft
    model's own pass over it; nobody verifies or drafts yet. By hand, prompts of 100 and 50 tokens (Σ chunk² 12,500):
    the target 1 + max(10, 2·1e-4 + 1e-7·150 + 150·1e-4 + 1e-7·12,500/2 = 15.84) + 150·1e-3 + 2·0.01 = 17.01 ms; the
    draft model 0.5 + max(1, 150·2e-5 = 3) = 3.5 ms: 20.51 ms."""
    sm = ATTENDING
    draft = StepModel(t_fixed_s=0.5e-3, t_weights_s=1e-3, t_compute_s=2e-5, t_kv_token_s=0.0)
    spec = Speculation(3, (0.7,), "draft_model", draft, "d")
    sched = BatchScheduler(sm, 4, separate_prefill=True, speculation=spec)
    sched.submit(Sequence("a", 100, 8, 0.0))
    sched.submit(Sequence("b", 50, 8, 0.0))
    plan = sched.plan_step(0.0)
    assert plan is not None and not plan.decoding and (plan.prefill_tokens, plan.prefill_sq) == (150, 12_500.0)
    assert plan.duration_s == pytest.approx(20.51e-3)
