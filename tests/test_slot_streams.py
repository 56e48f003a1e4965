"""llama-server's per-slot KV streams (-np N without --kv-unified): which slot a request takes, how many forward
passes a step runs, and a trace replayed after the server's earlier traffic (serving/engine/core.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tokenroof.errors import TokenroofError
from tokenroof.fit.travel import Replayed, Travelling, read_step_model
from tokenroof.io.table import parse_settings
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Deployment
from tokenroof.serving.engine.core import BatchScheduler, Sequence, slot_runs
from tokenroof.serving.simulate import Trace, simulate

SM = StepModel(t_fixed_s=1e-3, t_weights_s=10e-3, t_compute_s=100e-6, t_kv_token_s=1e-6, t_seq_s=10e-6)
EMPTY_STEP_S = 1e-3 + 10e-3  # t_fixed + the weights' read: what each pass past the first costs


def test_runs_of_consecutive_slots_by_hand() -> None:
    assert slot_runs([]) == 0
    assert slot_runs([3]) == 1
    assert slot_runs([0, 1, 2]) == 1
    assert slot_runs([2, 5, 6]) == 2
    assert slot_runs([6, 2, 5]) == 2  # order does not matter
    assert slot_runs([0, 15]) == 2  # no wrap-around: slot 15 and slot 0 are two streams apart
    assert slot_runs([0, 2, 4, 6]) == 4


def step(sched: BatchScheduler, now: float) -> tuple[float, int, list[str]]:
    plan = sched.plan_step(now)
    assert plan is not None
    finished = sched.complete_step(plan)
    return plan.end_s, plan.passes, [s.request_id for s in finished]


def test_a_fresh_server_hands_out_the_highest_slot_first_then_the_least_recently_released() -> None:
    """llama-server's get_available_slot: the idle slot with the oldest t_last_used, ties to the last in id order;
    never-used slots (t_last_used −1) first, so 15, 14, ... on a fresh 16-slot server."""
    sched = BatchScheduler(SM, max_num_seqs=4, per_slot_kv=True)
    a, b = Sequence("a", 8, 1, 0.0), Sequence("b", 8, 1, 0.0)
    sched.submit(a)
    sched.submit(b)
    plan = sched.plan_step(0.0)
    assert plan is not None and (sched.slot("a"), sched.slot("b")) == (3, 2)
    # both finish in this step; llama-server releases them in id order, so slot 2 counts as released first
    assert {s.request_id for s in sched.complete_step(plan)} == {"a", "b"}
    assert sched.slot("a") is None
    for name in "cdef":
        sched.submit(Sequence(name, 8, 5, plan.end_s))
    sched.plan_step(plan.end_s)
    # never used (1, 0), then the least recently released (2 before 3)
    assert [sched.slot(n) for n in "cdef"] == [1, 0, 2, 3]


def test_a_step_runs_one_pass_per_run_of_consecutive_slots_and_each_extra_pass_costs_an_empty_step() -> None:
    sched = BatchScheduler(SM, max_num_seqs=4, per_slot_kv=True)
    for name, out in (("a", 10), ("b", 2), ("c", 10)):
        sched.submit(Sequence(name, 10, out, 0.0))
    plan = sched.plan_step(0.0)
    assert plan is not None
    assert [sched.slot(n) for n in "abc"] == [3, 2, 1]
    assert plan.passes == 1  # three prompts in consecutive slots: one ubatch
    sched.complete_step(plan)
    plan = sched.plan_step(plan.end_s)
    assert plan is not None and plan.passes == 1  # decoding 3, 2, 1
    sched.complete_step(plan)  # b (slot 2) is done after its 2 tokens
    plan = sched.plan_step(plan.end_s)
    assert plan is not None and plan.batch == 2 and plan.passes == 2  # slots 3 and 1: two streams apart
    one_pass = SM.step_s(2, plan.context_tokens)
    assert plan.duration_s == pytest.approx(one_pass + EMPTY_STEP_S)
    # a new prompt joins (slot 0, never used): decoding 3 and 1 are still two runs, its prompt a pass of its own
    sched.complete_step(plan)
    sched.submit(Sequence("d", 10, 4, plan.end_s))
    plan = sched.plan_step(plan.end_s)
    assert plan is not None and sched.slot("d") == 0 and plan.passes == 3  # never used beats released
    assert plan.duration_s == pytest.approx(SM.step_s(3, plan.context_tokens, 10, 100.0) + 2 * EMPTY_STEP_S)


def test_one_kv_cache_for_all_runs_every_step_as_one_pass() -> None:
    """Without per-slot streams nothing changes: no slots are held and every step is one pass."""
    sched = BatchScheduler(SM, max_num_seqs=4)
    for name, out in (("a", 10), ("b", 2), ("c", 10)):
        sched.submit(Sequence(name, 10, out, 0.0))
    now = 0.0
    for _ in range(5):
        now, passes, _ = step(sched, now)
        assert passes == 1
    assert sched.slot("a") is None


def test_simulate_records_the_passes_and_the_same_arrivals_cost_more_with_per_slot_streams() -> None:
    records = tuple((0.05 * i, 16, 8 + (i % 5)) for i in range(200))
    trace = Trace(records)
    unified = simulate(SM, trace, 16, 0, None)
    split = simulate(SM, trace, 16, 0, None, per_slot_kv=True)
    assert unified.step_passes is not None and set(unified.step_passes.tolist()) == {1}
    assert split.step_passes is not None and split.step_passes.max() > 1
    # every extra pass adds an empty step's time: the two runs' step times differ by exactly that where the steps
    # are the same; overall the split server is slower
    assert split.summary()["tpot_ms"]["mean"] > unified.summary()["tpot_ms"]["mean"]


def test_a_trace_after_its_history_is_summarised_over_its_own_requests_only() -> None:
    earlier = Trace(((0.0, 8, 4), (0.5, 8, 4)))
    now = Trace(((0.0, 8, 4), (0.1, 8, 4), (0.2, 8, 4)), "load")
    run = Trace.after([earlier], now, gap_s=10.0)
    assert run.history == 2 and run.source == "load"
    assert [t for t, _, _ in run.records] == pytest.approx([0.0, 0.5, 10.5, 10.6, 10.7])
    result = simulate(SM, run, 4, 0, None)
    assert result.first_measured == 2
    summary = result.summary()
    assert summary["window_start_s"] >= 10.5  # the history's requests are never in the window
    alone = simulate(SM, now, 4, 0, None).summary()
    # an idle gap after one KV cache for all: the history leaves nothing behind, the figures are the trace's own
    assert summary["ttft_ms"]["p50"] == pytest.approx(alone["ttft_ms"]["p50"])
    assert Trace.after([], now).history == 0


def test_the_table_header_states_per_slot_streams() -> None:
    sem = parse_settings(["# input_len=128 output_len=64 kv_slots=16"], "t.csv")
    assert sem.kv_slots == 16 and "kv_slots" in sem.stated
    assert parse_settings(["# input_len=128"], "t.csv").kv_slots is None
    for bad in ("0", "2.5", "-1"):
        with pytest.raises(TokenroofError, match="kv_slots"):
            parse_settings([f"# kv_slots={bad}"], "t.csv")


def test_a_model_fitted_on_per_slot_streams_says_so_and_simulate_follows_it(tmp_path: Path) -> None:
    replayed = Replayed("staggered", None, "ttft", 0.05, 0.1, "online", kv_slots=16)
    saved = tmp_path / "model.json"
    saved.write_text(Travelling(SM, 200.0, replayed=replayed, source="sweep").to_json())
    back = read_step_model(saved)
    assert back.replayed is not None and back.replayed.kv_slots == 16
    dep = Deployment(step_model_file=saved, max_num_seqs=16)
    assert dep.slot_streams(back) and dep.scheduled_as(back).per_slot_kv is True
    assert not replace(dep, per_slot_kv=False).slot_streams(back)  # what the user says wins
    plain = Travelling(SM, 200.0, replayed=replace(replayed, kv_slots=None))
    assert not dep.slot_streams(plain)


def test_a_server_restored_from_its_slots_hands_out_the_least_recently_used_first() -> None:
    """GET /slots gives each slot's last task: the simulation starts there, never-used slots first."""
    sched = BatchScheduler(SM, max_num_seqs=4, per_slot_kv=True)
    sched.restore_slots([2, 0, 3])  # slot 1 never used; then 2 is the least recently used
    for name in "abcd":
        sched.submit(Sequence(name, 8, 3, 0.0))
    sched.plan_step(0.0)
    assert [sched.slot(n) for n in "abcd"] == [1, 2, 0, 3]
    for bad in ([0, 0], [4], [-1]):
        with pytest.raises(TokenroofError, match=r"^a slot order lists each of slots 0\.\.3 at most once: \["):
            BatchScheduler(SM, max_num_seqs=4, per_slot_kv=True).restore_slots(bad)
    two = Trace(((0.0, 8, 3), (0.0, 8, 3)))
    restored = simulate(SM, two, 4, 0, None, per_slot_kv=True, slot_order=[3, 1, 2, 0])
    fresh = simulate(SM, two, 4, 0, None, per_slot_kv=True)
    assert restored.step_passes is not None and fresh.step_passes is not None
    # the first prompt alone, then the second's beside the first's decode, then both decoding: in slots 3 and 1
    # (two runs) from the restored order, in 3 and 2 (one) on a fresh server
    assert restored.step_passes.tolist()[:3] == [1, 2, 2] and fresh.step_passes.tolist()[:3] == [1, 2, 1]


def test_predict_on_a_per_slot_sweep_states_its_slots(tmp_path: Path) -> None:
    """A sweep of llama-server -np 16 whose first line says kv_slots=16 (its bench could not tell whether the server ran
    --kv-unified, so the user says so): the scheduler's fit replays it with 16 per-slot KV streams, and predict's JSON
    says so (what --save-model keeps and simulate then follows)."""
    from tests.conftest import ROOT, run_json

    lines = (ROOT / "examples" / "llama-server-2026-12-06c" / "sweep" / "summary.csv").read_text().splitlines()
    sweep = tmp_path / "summary.csv"
    sweep.write_text("\n".join([lines[0] + " kv_slots=16", *lines[1:]]) + "\n")
    serving = run_json(["predict", str(sweep), "--batch", "8"])["serving"]
    assert serving["kv_slots"] == 16 and serving["client"] == "staggered"
