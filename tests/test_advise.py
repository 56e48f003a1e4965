"""advise: hand-computed caps, memory binding, infeasible targets, engine flags."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, SEED_TABLE, SERVE_SWEEP, run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.fit.predict import MeasuredWorkload
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.advise import (
    SEARCH_LIMIT,
    Advice,
    Targets,
    advice_dict,
    advise,
    advise_answer,
    at_context,
    engine_flags,
    largest_batch_within,
    throughput_latency_knee,
)
from tokenroof.serving.deployment import Physics
from tokenroof.serving.engine.core import Server
from tokenroof.serving.saturation import PHASES
from tokenroof.serving.simulate import Lengths

SM = StepModel(t_fixed_s=1e-3, t_weights_s=10e-3, t_compute_s=50e-6, t_kv_token_s=0.0, t_seq_s=10e-6)
SEED = str(SEED_TABLE)


def test_cap_by_hand() -> None:
    # past the knee (200): T = 1 + 0.06·b ms ≤ 20 → b ≤ 316.7
    assert largest_batch_within(SM, 20e-3) == 316
    # below the knee: T = 11 + 0.01·b ≤ 12 → b ≤ 100
    assert largest_batch_within(SM, 12e-3) == 100
    assert largest_batch_within(SM, 10e-3) == 0


def test_advice_fields_and_memory_binding() -> None:
    advice = advise(SM, 20.0).to_dict()
    assert advice["max_num_seqs"] == 316
    assert advice["binding"] == "tpot"
    assert advice["at_cap"]["tpot_ms"] <= 20.0 and advice["slo"]["statistic"] == "mean"
    assert advice["engine_flags"]["vllm"] == "--max-num-seqs 316"
    limited = advise(SM, 20.0, memory_limit=150).to_dict()
    assert limited["max_num_seqs"] == 150 and limited["binding"] == "memory"
    assert any("the running batch cannot exceed" in w and "that binds" in w for w in limited["warnings"])


def test_infeasible_target_says_why() -> None:
    with pytest.raises(TokenroofError, match=r"batch 1 already takes 11 ms"):
        advise(SM, 5.0)


def test_knee_of_throughput_latency_curve_is_inside_the_range() -> None:
    knee = throughput_latency_knee(SM, 0.0, 1000.0)
    assert 50 < knee < 400


def test_engine_flags_spelling() -> None:
    assert engine_flags(64) == {  # from the engines table, servers in name order
        "llama-cpp": "--parallel 64",
        "lmdeploy": "--max-batch-size 64",
        "sglang": "--max-running-requests 64",
        "tensorrt-llm": "--max_batch_size 64",
        "tgi": "--max-batch-size 64",
        "vllm": "--max-num-seqs 64",
    }
    assert list(engine_flags(64)) == sorted(engine_flags(64))


def test_engine_flags_turn_prefix_caching_off_and_speculate_in_each_servers_words() -> None:
    """Without prefix caching, vLLM's cap gains --no-enable-prefix-caching and SGLang's --disable-radix-cache (their
    defaults are on; the other servers' flags stay the cap alone); speculating, only the two servers whose
    speculation tokenroof spells, each cap followed by its speculative flags (vLLM's JSON config, SGLang's EAGLE
    steps with topk 1 and γ + 1 draft tokens)."""
    from tokenroof.model.speculative import SpeculativeConfig

    assert engine_flags(8, prefix_caching=False) == {
        "llama-cpp": "--parallel 8",
        "lmdeploy": "--max-batch-size 8",
        "sglang": "--max-running-requests 8 --disable-radix-cache",
        "tensorrt-llm": "--max_batch_size 8",
        "tgi": "--max-batch-size 8",
        "vllm": "--max-num-seqs 8 --no-enable-prefix-caching",
    }
    eagle = SpeculativeConfig("eagle", 3, (0.7,))
    config = '--speculative-config \'{"method": "eagle", "num_speculative_tokens": 3}\''
    sglang = "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1"
    sglang += " --speculative-num-draft-tokens 4"
    assert engine_flags(8, eagle) == {
        "vllm": f"--max-num-seqs 8 {config}",
        "sglang": f"--max-running-requests 8 {sglang}",
    }
    assert engine_flags(8, eagle, prefix_caching=False) == {
        "vllm": f"--max-num-seqs 8 --no-enable-prefix-caching {config}",
        "sglang": f"--max-running-requests 8 --disable-radix-cache {sglang}",
    }


def test_cli_advise_from_measurements_and_from_specs() -> None:
    data = run_json(["advise", SEED, "--tpot-slo-ms", "30", "--samples", "20"])
    assert data["max_num_seqs"] > 128
    lo, hi = data["max_num_seqs_low"], data["max_num_seqs_high"]
    assert lo <= data["max_num_seqs"] <= hi
    # memory: 0.9 × 81,559 MiB = 76.97 GB less 16.06 GB of weights, over 2,048 tokens × 131,072 B = 226.9 sequences
    data = run_json(["advise", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "2048", "--tpot-slo-ms", "35"])
    assert data["binding"] == "memory" and data["max_num_seqs"] == 226
    table = run_cli(["advise", SEED, "--tpot-slo-ms", "30", "--samples", "20"])
    assert "--max-running-requests" in table.stdout


def test_cli_advise_needs_a_source() -> None:
    result = run_cli(["advise", "--tpot-slo-ms", "30"])
    assert result.exit_code == 2
    assert "give a measurement file, or --model and --hardware" in result.stderr


# -- by hand, one behaviour each (the tests `make mutation` runs on this module):
# advise by hand on straight-line step times: the cap, its boundaries, the reference, the JSON (make mutation).
# T(b) = 1 + 0.125·b seconds (exact in binary): T ≤ 2 up to b = 8
LINE = StepModel(t_fixed_s=1.0, t_weights_s=0.0, t_compute_s=0.0, t_kv_token_s=0.0, t_seq_s=0.125)
# T(b, ctx) = 1 + b·ctx·0.125
KV = StepModel(t_fixed_s=1.0, t_weights_s=0.0, t_compute_s=0.0, t_kv_token_s=0.125)
FLAT = StepModel(t_fixed_s=1.0, t_weights_s=0.0, t_compute_s=0.0, t_kv_token_s=0.0)
PHYSICS = Physics("llama-3.1-8b", "h100-sxm")


def test_largest_batch_at_and_around_the_target() -> None:
    assert largest_batch_within(LINE, 2.0) == 8  # T(8) = 2 exactly: met
    assert largest_batch_within(LINE, 2.1) == 8
    assert largest_batch_within(LINE, 1.999) == 7
    assert largest_batch_within(LINE, 1.125) == 1  # T(1) exactly
    assert largest_batch_within(LINE, 1.12) == 0
    assert largest_batch_within(KV, 2.0, context=2.0) == 4  # 1 + b·0.25 ≤ 2
    assert largest_batch_within(LINE, 1e9, limit=5) == 5
    # every target between: the bisection ends within half a sequence, so the cap is exact, never one short
    for limit in (None, 11, 13, 23, 50):
        for eighths in range(9, 8 * (limit or 50) - 8):
            target = 1.0 + eighths / 8 * 0.125 + 1e-6  # T(b) = 1 + 0.125·b: b = eighths/8 is the last batch met
            assert largest_batch_within(LINE, target, limit=limit) == eighths // 8, (limit, target)
    assert largest_batch_within(FLAT, 2.0) == SEARCH_LIMIT == 1_000_000
    assert largest_batch_within(LINE, 1.0 + 0.125 * 1000) == 1000


def test_throughput_latency_knee_of_a_sharp_roof() -> None:
    # T = max(1, b/8): throughput grows as b to 8, then stays at 8 while TPOT grows: the knee is at 8
    roof = StepModel(t_fixed_s=0.0, t_weights_s=1.0, t_compute_s=0.125, t_kv_token_s=0.0)
    assert throughput_latency_knee(roof, 0.0, 64.0) == pytest.approx(8.0, rel=0.02)
    # the context counts: T = 1 + b·ctx·0.125 is flat at context 0 (the knee is the last batch), bends at 8
    assert throughput_latency_knee(KV, 0.0, 64.0) == pytest.approx(64.0)
    assert throughput_latency_knee(KV, 8.0, 64.0) < 16
    # below batch 2 the curve still spans batches 1…2
    assert 1.0 < throughput_latency_knee(roof, 0.0, 1.0) <= 2.0


def test_advice_dict_shape_and_the_throughput_given_up() -> None:
    at_cap = {"throughput_tok_s": 75.0, "tpot_ms": 2.0}
    d = advice_dict({"statistic": "mean"}, (8, 6, 9), "tpot", at_cap, 4.0, {"throughput_tok_s": 100.0}, "s", ["w"])
    assert d["max_num_seqs"] == 8 and d["max_num_seqs_low"] == 6 and d["max_num_seqs_high"] == 9
    assert d["interval_level"] == 0.9 and d["binding"] == "tpot" and d["latency_knee_batch"] == 4.0
    assert d["throughput_given_up_fraction"] == pytest.approx(0.25)
    assert d["engine_flags"]["vllm"] == "--max-num-seqs 8" and d["source"] == "s" and d["warnings"] == ["w"]
    assert d["slo"] == {"statistic": "mean"} and d["at_cap"] is at_cap and d["reference"] == {"throughput_tok_s": 100.0}
    none = advice_dict(
        {}, (8, None, None), "memory", {"throughput_tok_s": 120.0}, None, {"throughput_tok_s": 100.0}, "", []
    )
    assert none["interval_level"] is None and none["throughput_given_up_fraction"] == 0.0


def test_advice_to_dict() -> None:
    a = Advice(20.0, 8, [6, 9], "tpot", 2.0, 4.0, 3.0, 16.0, 5.0, "src", ["w"])
    d = a.to_dict()
    assert d["slo"] == {"statistic": "mean", "tpot_ms": 20.0, "ttft_ms": None}
    assert d["at_cap"] == {
        "max_num_seqs": 8,
        "tpot_ms": 2.0,
        "ttft_ms": None,
        "throughput_tok_s": 4.0,
        "running_batch": 8.0,
        "preemptions": None,
    }
    assert d["reference"] == {"max_num_seqs": 16.0, "throughput_tok_s": 5.0}
    assert d["throughput_given_up_fraction"] == pytest.approx(0.2)
    assert (d["max_num_seqs_low"], d["max_num_seqs_high"], d["latency_knee_batch"]) == (6, 9, 3.0)
    assert d["source"] == "src" and d["warnings"] == ["w"]


def test_advise_by_hand() -> None:
    a = advise(LINE, 2000.0, source="here")
    assert (a.cap, a.binding, a.cap_interval, a.source, a.warnings) == (8, "tpot", [None, None], "here", [])
    assert a.tpot_ms_at_cap == pytest.approx(2000.0) and a.throughput_tok_s_at_cap == pytest.approx(4.0)
    # the reference is 4× the cap, at least 512: T(512) = 65 s
    assert a.reference_batch == 512.0 and a.reference_throughput_tok_s == pytest.approx(512 / 65)
    assert advise(LINE, 2000.0).source == ""
    wide = advise(LINE, 1000.0 * (1 + 0.125 * 200))
    assert wide.cap == 200 and wide.reference_batch == 800.0
    assert wide.reference_throughput_tok_s == pytest.approx(800 / 101)
    assert 1 <= a.knee_batch <= 512


def test_advise_at_a_context() -> None:
    a = advise(KV, 2000.0, context=2.0)
    assert a.cap == 4 and a.tpot_ms_at_cap == pytest.approx(2000.0) and a.throughput_tok_s_at_cap == pytest.approx(2)


def test_advise_memory_binds_and_sets_the_reference() -> None:
    a = advise(LINE, 2000.0, memory_limit=5)
    assert (a.cap, a.binding, a.reference_batch) == (5, "memory", 5.0)
    assert a.warnings == [
        "the TPOT target allows batch 8, but the running batch cannot exceed 5 (memory, or a server cap the "
        "measurements show): that binds (a larger cap only queues or preempts)"
    ]
    assert a.tpot_ms_at_cap == pytest.approx(1625.0)
    same = advise(LINE, 2000.0, memory_limit=8)
    assert (same.cap, same.binding, same.warnings, same.reference_batch) == (8, "tpot", [], 8.0)
    # a target every batch meets: said so, not as the search's limit ("allows batch 1000000", a journey check's find)
    (every,) = advise(LINE, 1e9, memory_limit=5).warnings[:1]
    assert every.startswith("the TPOT target is met at every batch tried, but the running batch cannot exceed 5")
    with pytest.raises(TokenroofError, match=r"^the weights alone do not fit in memory: no batch cap can run$"):
        advise(LINE, 2000.0, memory_limit=0)


def test_advise_refuses_bad_and_unreachable_targets() -> None:
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(TokenroofError, match=r"^tpot_slo_ms must be a positive finite number"):
            advise(LINE, bad)
    with pytest.raises(TokenroofError, match=r"^no batch cap meets TPOT ≤ 1000 ms: batch 1 already takes 1.12e\+03 ms"):
        advise(LINE, 1000.0)
    # a miss by less than the third figure is told apart from its target (a fault test read "30 ms" beside 30)
    with pytest.raises(TokenroofError, match=r"^no batch cap meets TPOT ≤ 30 ms: batch 1 already takes 30.004 ms"):
        advise(StepModel(0.030004, 0.0, 0.0, 0.0), 30.0)


def test_a_number_beside_its_target_shows_the_figures_that_tell_them_apart() -> None:
    from tokenroof.style import fmt_beside

    assert [fmt_beside(v, 30.0) for v in (30.004, 29.99, 30.0, 45.25, 30.000004)] == [
        "30.004",
        "29.99",
        "30",
        "45.2",
        "30.000004",
    ]


def test_advise_interval_over_samples_and_the_unbounded_warning() -> None:
    samples = [StepModel(1.0, 0.0, 0.0, 0.0, t_seq_s=0.125 * f) for f in np.linspace(0.5, 2.0, 21)]
    a = advise(LINE, 2000.0, samples=samples)
    caps = sorted(largest_batch_within(s, 2.0) for s in samples)
    assert a.cap_interval == [int(np.percentile(caps, 5)), int(np.percentile(caps, 95))]
    assert a.cap_interval[0] < 8 < a.cap_interval[1]
    limited = advise(LINE, 2000.0, memory_limit=6, samples=samples)
    assert limited.cap_interval[1] == 6  # the samples' caps are bounded by memory too
    free = advise(FLAT, 2000.0)
    assert free.cap == SEARCH_LIMIT and free.warnings == [
        "the TPOT target is met at every batch tried: the cap is set by memory or admission, not by latency"
    ]


def test_targets_statistic() -> None:
    for ok in (None, "mean", "p50", "p90", "p99"):
        assert Targets(30.0, statistic=ok).statistic == ok
    with pytest.raises(TokenroofError, match=r"^unknown slo_statistic 'p95'; known: mean, p50, p90, p99$"):
        Targets(30.0, statistic="p95")


def test_advise_answer_refusals() -> None:
    with pytest.raises(TokenroofError, match=r"^give a measurement file, or model and hardware"):
        advise_answer([], Physics(), MeasuredWorkload(), Targets(30.0))
    with pytest.raises(TokenroofError, match=r"^context takes one value with input_len/output_len"):
        advise_answer([], PHYSICS, MeasuredWorkload(input_len=100, output_len=20), Targets(30.0), contexts=[100, 200])
    with pytest.raises(TokenroofError, match=r"^ttft_slo_ms needs input_len and output_len"):
        advise_answer([], PHYSICS, MeasuredWorkload(), Targets(30.0, ttft_slo_ms=500.0))


def test_first_principles_decode_only_answer() -> None:
    sm = PHYSICS.step_model()
    d = advise_answer([], PHYSICS, MeasuredWorkload(), Targets(30.0))
    assert d["context_tokens"] == 1024.0  # no context given: 1024
    expected = min(largest_batch_within(sm, 30e-3, 1024.0), PHYSICS.max_batch(1024.0))
    assert d["max_num_seqs"] == expected and d["step_model"] == sm.to_dict()
    assert d["source"] == (
        "first principles: llama-3.1-8b on h100-sxm ×1, context 1024, the decode step time (no prompts in the steps; "
        "give --input-len and --output-len for the scheduler's answer)"
    )
    assert d["max_num_seqs_low"] is None and d["max_num_seqs_high"] is None  # no fit: no samples to spread it
    # the model's whole window is a context a request can hold; one token more is named
    edge, past = (
        advise_answer([], PHYSICS, MeasuredWorkload(context_tokens=c), Targets(30.0)) for c in (131_072.0, 131_073.0)
    )
    assert not any("maximum of 131072 positions" in w for w in edge["warnings"])
    assert "context 131073 exceeds llama-3.1-8b's maximum of 131072 positions" in past["warnings"]
    at = advise_answer([], PHYSICS, MeasuredWorkload(context_tokens=300.0), Targets(30.0))
    assert at["context_tokens"] == 300.0
    assert at["max_num_seqs"] == min(largest_batch_within(sm, 30e-3, 300.0), PHYSICS.max_batch(300.0))
    # a statistic other than the mean is named as not what this answer bounds
    warned = advise_answer([], PHYSICS, MeasuredWorkload(), Targets(30.0, statistic="p90"))
    assert warned["warnings"][-1].startswith("--slo-statistic p90 needs the scheduler's distribution")
    assert advise_answer([], PHYSICS, MeasuredWorkload(), Targets(30.0, statistic="mean"))["warnings"] == []
    several = advise_answer([], PHYSICS, MeasuredWorkload(), Targets(30.0), contexts=[300.0, 4096.0])
    assert [c["context_tokens"] for c in several["contexts"]] == [300.0, 4096.0]
    assert several["contexts"][0]["max_num_seqs"] > several["contexts"][1]["max_num_seqs"]


@pytest.fixture
def advise_cap_once(monkeypatch: pytest.MonkeyPatch):
    """advise_cap, each search run once per test: the answer under test (which looks advise_cap up as it runs) and
    the test's direct call share a search only where their arguments are equal, so a difference in what the answer
    passes still shows as a different result; each caller gets its own copy. Half the time of two searches."""
    import copy
    import inspect

    from tokenroof.serving import saturation

    searched: dict = {}

    real = saturation.advise_cap
    signature = inspect.signature(real)

    def once(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = tuple(bound.arguments.items())
        if key not in searched:
            searched[key] = real(*args, **kwargs)
        return copy.deepcopy(searched[key])

    monkeypatch.setattr(saturation, "advise_cap", once)
    return once


def test_first_principles_answer_on_the_scheduler(advise_cap_once) -> None:
    """Without files the answer is advise_cap's on the physics' step model and the deployment's server (its KV pool,
    vLLM's prefix caching on, the prompt budget given), its figures as they are, the source said."""
    from tokenroof.serving.simulate import EVEN

    flags = MeasuredWorkload(input_len=100, output_len=20)
    sm = PHYSICS.step_model()
    source = (
        "first principles: llama-3.1-8b on h100-sxm ×1, run on simulate's scheduler; each cap kept full by steady "
        "traffic, streams spread over a request's life (simulate --client even --concurrency N --max-num-seqs N)"
    )

    def direct(targets: Targets, budget: int | None) -> dict:
        server = Server(PHYSICS.kv_pool_tokens(), budget, False, None, True, False)
        statistic = targets.statistic or "p99"
        found = advise_cap_once(
            sm, Lengths(100), Lengths(20), targets.tpot_slo_ms, targets.ttft_slo_ms, statistic, server, source=source,
            client=EVEN,
        )  # fmt: skip
        return {k: v for k, v in found.to_dict().items() if k != "warnings"}

    d = advise_answer([], PHYSICS, flags, Targets(40.0))
    want = direct(Targets(40.0), None)
    assert {k: d[k] for k in want} == want and d["step_model"] == sm.to_dict()
    assert d["slo"]["statistic"] == "p99" and d["source"] == source
    mean = advise_answer([], PHYSICS, flags, Targets(40.0, 5000.0, "mean"), max_num_batched_tokens=8192)
    want = direct(Targets(40.0, 5000.0, "mean"), 8192)
    assert {k: mean[k] for k in want} == want
    assert mean["slo"]["statistic"] == "mean"


def seed_with_lengths(tmp_path: Path) -> Path:
    """The seed table with its lengths stated (250 in, 100 out): a context the physics can move."""
    table = tmp_path / "t.csv"
    table.write_text("# input_len=250 output_len=100\n" + SEED_TABLE.read_text())
    return table


def test_fitted_answers_cap_at_the_memory_of_each_context(tmp_path: Path) -> None:
    """Decode-only advice from a fit with the physics, a TPOT target every batch meets: the KV cache binds. llama-3.1-8b
    on an H100 holds 464,692 KV tokens (the pool the physics states); the table's context is 250 + 100/2 = 300 tokens
    a sequence: ⌊464,692 / 300⌋ = 1,548 sequences; at 2,048 tokens ⌊464,692 / 2,048⌋ = 226, with the step model
    folded at 2,048 (its TPOT at the cap its own)."""
    table = seed_with_lengths(tmp_path)
    assert PHYSICS.kv_pool_tokens() == 464_692
    own, far = (
        advise_answer([table], PHYSICS, MeasuredWorkload(), Targets(1000.0), samples=10, contexts=[c])
        for c in (None, 2048.0)
    )
    assert (own["max_num_seqs"], own["binding"], own["max_num_seqs_low"], own["max_num_seqs_high"]) == (
        1548,
        "memory",
        1548,
        1548,
    )
    # an online table (prompts in its steps, as assumed): the fit folds their share in, and keeps it at 2,048
    assert (
        own["source"]
        == f"fitted to {table} (prior); the measured steps' time, their prompts' share folded in as measured"
    )
    assert (far["max_num_seqs"], far["binding"], far["context_tokens"]) == (226, "memory", 2048.0)
    assert far["step_model"] != own["step_model"] and far["at_cap"]["tpot_ms"] < own["at_cap"]["tpot_ms"]
    # the workload's --context, when no context is asked, is where to advise: the same answer as asking for it
    flagged = advise_answer([table], PHYSICS, MeasuredWorkload(context_tokens=2048.0), Targets(1000.0), samples=10)
    assert flagged == far
    # --decode-only: the measured TPOT holds no prompts, so the prior prices none in the steps and more sequences fit
    plain, decode = (
        advise_answer([table], PHYSICS, MeasuredWorkload(decode_only=d), Targets(30.0), samples=10)
        for d in (False, True)
    )
    assert plain["binding"] == decode["binding"] == "tpot" and decode["max_num_seqs"] > plain["max_num_seqs"]


def test_fitted_answers(tmp_path: Path) -> None:
    d = advise_answer([SEED_TABLE], Physics(), MeasuredWorkload(), Targets(30.0), samples=10)
    assert d["source"].startswith(f"fitted to {SEED_TABLE} (") and "the measured steps' time" in d["source"]
    assert "context_tokens" not in d and d["max_num_seqs_low"] is not None
    # a table that states its context is advised at another with the physics
    table = seed_with_lengths(tmp_path)
    at = advise_answer([table], PHYSICS, MeasuredWorkload(), Targets(30.0), samples=10, contexts=[300.0])
    assert at["context_tokens"] == 300.0 and "at context 300;" in at["source"]
    online = advise_answer([table], PHYSICS, MeasuredWorkload(input_len=250, output_len=100), Targets(40.0))
    assert online["source"] == (
        f"fitted on simulate's scheduler to {table} (online, closed loop, streams staggered (assumed: the table does "
        "not say; '# client=…'), prompts prefilled whole (assumed: no TTFT to tell)); each cap kept full by a closed "
        "loop, streams staggered (simulate --client staggered --concurrency N --max-num-seqs N)"
    )


def test_largest_batch_on_every_side_of_each_boundary() -> None:
    # T(b) = 1 + b/8: batch n takes exactly 1 + n/8 s (binary fractions, no rounding)
    for n in range(1, 130):
        assert largest_batch_within(LINE, 1 + 0.125 * n) == n  # an exact hit is met
        assert largest_batch_within(LINE, 1 + 0.125 * n + 0.0625) == n  # halfway to the next batch
    # T(b, ctx 2) = 1 + b/4: the context counts at every step of the search, the last check included
    for n in range(1, 70):
        assert largest_batch_within(KV, 1 + 0.25 * n, context=2.0) == n
        assert largest_batch_within(KV, 1 + 0.25 * n + 0.125, context=2.0) == n


def test_batch_one_is_checked_at_the_context() -> None:
    # T(1, ctx 2) = 1.25 s > 1.2 s (at context 0 it would be 1 s)
    assert largest_batch_within(KV, 1.2, context=2.0) == 0
    with pytest.raises(TokenroofError, match=r"^no batch cap meets TPOT ≤ 1200 ms: batch 1 already takes 1.25e\+03 ms"):
        advise(KV, 1200.0, context=2.0)


def test_advise_defaults_to_no_context() -> None:
    # T(b, ctx 0) = 1 s at every batch: no latency cap
    assert advise(KV, 2000.0).cap == SEARCH_LIMIT


def test_advise_takes_sub_millisecond_targets() -> None:
    fast = StepModel(t_fixed_s=2.0**-12, t_weights_s=0.0, t_compute_s=0.0, t_kv_token_s=0.0)  # 0.244 ms per step
    a = advise(fast, 0.5)
    assert a.tpot_slo_ms == 0.5 and a.cap == SEARCH_LIMIT
    assert a.tpot_ms_at_cap == 1000 * 2.0**-12


def test_advise_interval_is_the_5th_and_95th_percentile() -> None:
    # caps 1 (T = 1 + b) and 101 (T = 1 + b/101) at 2 s: percentiles 1 + 0.05·100 = 6 and 1 + 0.95·100 = 96
    samples = [StepModel(1.0, 0.0, 0.0, 0.0, t_seq_s=1.0), StepModel(1.0, 0.0, 0.0, 0.0, t_seq_s=1 / 101)]
    assert advise(LINE, 2000.0, samples=samples).cap_interval == [6, 96]


def test_advise_knee_and_reference_at_the_context() -> None:
    # ctx 8: T = 1 + b, cap 4 at 5 s; the reference is max(4·4, 512) = 512 at T = 513 s
    a = advise(KV, 5000.0, context=8.0)
    assert (a.cap, a.reference_batch) == (4, 512.0)
    assert a.reference_throughput_tok_s == 512 / 513
    # Kneedle on T = 1 + b over 1…512: throughput b/(1+b) has slope 1/(1+b)², equal to the chord's
    # (512/513 − 1/2)/511 = 1/1026 at b = √1026 − 1 ≈ 31.03 (the grid steps by 512^(1/399) ≈ 1.6%)
    assert a.knee_batch == pytest.approx(1026**0.5 - 1, rel=0.016)


def test_knee_of_a_smooth_curve_in_milliseconds() -> None:
    # T = 1 ms + b·0.125 ms over 1…64: throughput 8000·b/(8+b) has slope 64000/(8+b)²; the chord's slope in
    # normalised units is (thr(64) − thr(1))/63 = (64000/9 − 8000/9)/63 = 8000/81: equal at (8+b)² = 648,
    # b = √648 − 8 ≈ 17.46 (the scale of the times does not move the knee; the grid steps by ~1%)
    ms = StepModel(t_fixed_s=1e-3, t_weights_s=0.0, t_compute_s=0.0, t_kv_token_s=0.0, t_seq_s=1.25e-4)
    assert throughput_latency_knee(ms, 0.0, 64.0) == pytest.approx(648**0.5 - 8, rel=0.011)
    assert throughput_latency_knee(LINE, 0.0, 64.0) == pytest.approx(648**0.5 - 8, rel=0.011)


def test_interval_level_with_a_low_bound_only() -> None:
    d = advice_dict({}, (8, 6, None), "tpot", {"throughput_tok_s": 1.0}, None, {"throughput_tok_s": 1.0}, "", [])
    assert d["interval_level"] == 0.9


def test_at_context_names_the_context_of_an_error() -> None:
    def fails(context: float | None) -> dict:
        raise TokenroofError("no cap")

    with pytest.raises(TokenroofError, match=r"^at context 300: no cap$"):
        at_context(fails, 300.0)
    with pytest.raises(TokenroofError, match=r"^no cap$"):
        at_context(fails, None)


def test_advise_answer_leaves_the_servers_prefix_caching_on_unless_told() -> None:
    """The library's advise on the scheduler (prompt and output lengths given), called with no caching setting: vLLM's
    and SGLang's prefix caching is on by default, so the cap's flags do not turn it off."""
    data = advise_answer([], PHYSICS, MeasuredWorkload(None, 1000.0, 300.0), Targets(40.0))
    cap = data["max_num_seqs"]
    assert data["engine_flags"]["vllm"] == f"--max-num-seqs {cap}"
    assert data["engine_flags"]["sglang"] == f"--max-running-requests {cap}"


A10G = Physics("llama-3.1-8b", "a10g")  # a small KV pool: a cap search of a few dozen caps


def test_advise_with_prefill_from_first_principles_runs_the_scheduler_the_deployment_names(advise_cap_once) -> None:
    """advise_with_prefill without files, on a small KV pool (llama-3.1-8b on an A10G: a search of a few dozen caps):
    the answer is advise_cap's on the physics' step model with the deployment's server — its KV pool (less a
    draft's), prefix caching (on unless told), speculation, and for an engine that prefills in steps of their own
    (TGI) those steps and its prompt budget — with the same statistic, the source, the notes that say what was
    assumed first, and the engine flags that set the cap."""
    from tokenroof.model.prefix import SharedPrefix
    from tokenroof.model.speculative import SpeculativeConfig
    from tokenroof.serving.advise import advise_with_prefill
    from tokenroof.serving.simulate import EVEN, PromptLengths

    flags, targets = MeasuredWorkload(input_len=512, output_len=64), Targets(80.0, 2000.0)

    def expected(physics: Physics, server: Server, notes: list[str], prompts=None, spec=None, caching=True) -> dict:
        sm = physics.step_model()
        source = (
            f"first principles: {physics.label()}, run on simulate's scheduler; each cap kept full by steady traffic, "
            "streams spread over a request's life (simulate --client even --concurrency N --max-num-seqs N)"
        )
        direct = advise_cap_once(
            sm, prompts or Lengths(512), Lengths(64), 80.0, 2000.0, "p99", server, source=source, client=EVEN
        )
        answer = {**direct.to_dict(), "step_model": sm.to_dict()}
        answer["warnings"] = notes + answer["warnings"]
        answer["engine_flags"] = engine_flags(answer["max_num_seqs"], spec, caching, physics.server_name)
        return answer

    plain = advise_with_prefill([], A10G, flags, targets, None)
    assert plain == expected(A10G, Server(A10G.kv_pool_tokens(), None, False, None, True, False), A10G.eager_notes())
    assert 8 < plain["max_num_seqs"] < 64 and plain["slo"]["statistic"] == "p99"
    assert "--enable-prefix-caching" not in " ".join(plain["engine_flags"])  # vLLM's default: nothing to set
    # prefix caching off, told: a server without it, and the flag that turns it off
    uncached = advise_with_prefill([], A10G, flags, targets, None, prefix_caching=False)
    assert uncached == expected(
        A10G, Server(A10G.kv_pool_tokens(), None, False, None, False, False), A10G.eager_notes(), caching=False
    )
    # TGI prefills in steps of their own, within its prompt budget, and says so
    tgi = Physics("llama-3.1-8b", "a10g", engine="tgi")
    from tokenroof.fit.travel import Travelling
    from tokenroof.serving.deployment import Deployment

    dep = Deployment(tgi)
    planned = Travelling(tgi.step_model())
    assert dep.separate_prefill(planned) and dep.prompt_budget(planned) is not None
    server = Server(tgi.kv_pool_tokens(), dep.prompt_budget(planned), False, None, True, True)
    separate = advise_with_prefill([], tgi, flags, targets, None)
    assert separate == expected(tgi, server, [*tgi.eager_notes(), *dep.budget_notes(planned)])
    assert separate["max_num_seqs"] != plain["max_num_seqs"] or separate["at_cap"] != plain["at_cap"]
    # a shared prefix and EAGLE speculation: the prompts share it, the pool holds the draft's KV too
    eagle, prefix = SpeculativeConfig("eagle", 3, (0.7,)), SharedPrefix(256, 2)
    both = advise_with_prefill([], A10G, flags, targets, None, speculative=eagle, prefix=prefix)
    speculation = A10G.speculation(eagle)
    notes = [*A10G.eager_notes(), speculation.assumption(), prefix.assumption(True, False, False)]
    server = Server(A10G.kv_pool_tokens(eagle), None, False, speculation, True, False)
    assert both == expected(A10G, server, notes, PromptLengths(512, prefix=prefix), spec=eagle)


def test_advise_with_prefill_from_files_keeps_the_cap_full_as_their_client_did(tmp_path: Path, advise_cap_once) -> None:
    """advise_with_prefill on llama-server's sweep (examples/serve-llama-123m-2026-12-06c): the answer is advise_cap's
    on the scheduler's model fitted to the files (portable_model with the measured lengths), each cap kept full by the
    client that measured them (staggered streams; every stream at once where the file says burst) and prefilled with
    the fitted budget; the notes the fit made come first. A file that says it measured llama-server is told the cap
    is a new -np, and its cap is checked over bench's start phases (saturation.PHASES). Refused: a --context the
    file's own context contradicts, a TTFT target nothing prices."""
    from tokenroof.errors import ParameterError
    from tokenroof.fit.core import fit_table
    from tokenroof.fit.predict import read_with_prior
    from tokenroof.serving.advise import advise_with_prefill
    from tokenroof.serving.replay import portable_model

    text = SERVE_SWEEP.read_text()
    flags, targets, physics = MeasuredWorkload(input_len=128, output_len=64), Targets(100.0, 1000.0), Physics()

    def expected(path: Path, client: str, how: str, phases: int) -> dict:
        table, prior = read_with_prior([path], physics, flags, flags_are_target=True)
        fit = fit_table(table, prior, n_samples=0)
        travelling = portable_model(fit, table, None, (128, 64), "fit")
        replayed = travelling.replayed
        assert replayed is not None and replayed.kv_slots is None
        server = Server(None, replayed.max_num_batched_tokens, False, None, True, False)
        source = (
            f"fitted on simulate's scheduler to {table.source} ({replayed.semantics}); each cap kept full by a closed "
            f"loop, {how} (simulate --client {client} --concurrency N --max-num-seqs N)"
        )
        sm = travelling.step_model
        direct = advise_cap_once(
            sm, Lengths(128), Lengths(64), 100.0, 1000.0, "p99", server, source=source, client=client, phases=phases
        )
        answer = {**direct.to_dict(), "step_model": sm.to_dict()}
        answer["engine_flags"] = engine_flags(answer["max_num_seqs"], None, True)
        notes = [*table.warnings, *fit.conflicts, *travelling.notes(flags.mean_context)]
        return {**answer, "warnings": notes}

    def compare(path: Path, client: str, how: str, phases: int = 1) -> dict:
        got, want = advise_with_prefill([path], physics, flags, targets, None), expected(path, client, how, phases)
        assert got["warnings"][: len(want["warnings"])] == want["warnings"]
        assert {k: v for k, v in got.items() if k != "warnings"} == {k: v for k, v in want.items() if k != "warnings"}
        return got

    staggered = tmp_path / "staggered.csv"
    staggered.write_text(text)
    plain = compare(staggered, "staggered", "streams staggered")
    assert 1 <= plain["max_num_seqs"] <= 16 and not any("-np" in w for w in plain["warnings"])
    assert "phases" not in plain["at_cap"]  # tokenroof serve's streams keep bench's stagger (saturation's module doc)
    unstated = tmp_path / "unstated.csv"  # no lengths in the header: the flags' stand in
    unstated.write_text(text.replace(" input_len=128 ", " ", 1).replace(" output_len=64 ", " ", 1))
    assert compare(unstated, "staggered", "streams staggered")["max_num_seqs"] == plain["max_num_seqs"]
    burst = tmp_path / "burst.csv"
    burst.write_text(text.replace("client=staggered", "client=burst", 1))
    compare(burst, "burst", "every stream started at once")
    llama = tmp_path / "llama.csv"
    llama.write_text(text.replace("client=staggered", "client=staggered server=llama-server", 1))
    said = compare(llama, "staggered", "streams staggered", PHASES)
    assert said["at_cap"]["phases"]["runs"] == PHASES and said["max_num_seqs"] < plain["max_num_seqs"]
    (np_note,) = [w for w in said["warnings"] if "-np" in w]
    assert np_note.startswith(f"measured on llama-server; the cap is a new -np {said['max_num_seqs']}, a restarted")
    with pytest.raises(ParameterError, match="states the context it was measured at") as refused:
        advise_with_prefill([staggered], physics, MeasuredWorkload(128, 128, 64), targets, None)
    assert refused.value.parameters == ("input_len", "output_len", "context")
    untimed = tmp_path / "untimed.csv"  # the columns up to context_tokens: no ttft_ms
    rows = (row if row.startswith("#") else ",".join(row.split(",")[:4]) for row in text.splitlines())
    untimed.write_text("\n".join(rows) + "\n")
    with pytest.raises(ParameterError, match="nothing prices a prompt's prefill") as refused:
        advise_with_prefill([untimed], physics, flags, targets, None)
    assert refused.value.parameters == ("model", "hardware", "model", "hardware", "ttft_slo_ms")
    assert advise_with_prefill([untimed], physics, flags, Targets(100.0), None)["max_num_seqs"] >= 1


def test_advise_answer_sends_every_setting_to_the_scheduler_and_refuses_what_only_it_can_answer() -> None:
    """advise_answer: with both lengths (and not --decode-only) the scheduler's answer, every setting passed on (the
    prompt budget, speculation, a shared prefix, prefix caching); with one length or none the decode-only answer,
    which refuses a shared prefix, speculation and a TTFT target by their parameters, and says that a percentile
    target bounds only the mean step time."""
    from tokenroof.errors import ParameterError
    from tokenroof.model.prefix import SharedPrefix
    from tokenroof.model.speculative import SpeculativeConfig
    from tokenroof.serving.advise import advise_with_prefill

    flags, targets = MeasuredWorkload(input_len=512, output_len=64), Targets(80.0, 2000.0)
    eagle, prefix = SpeculativeConfig("eagle", 3, (0.7,)), SharedPrefix(256, 2)
    given = advise_answer([], A10G, flags, targets, 1024, speculative=eagle, prefix=prefix, prefix_caching=False)
    assert given == advise_with_prefill([], A10G, flags, targets, 1024, eagle, prefix, False)
    cached = advise_with_prefill([], A10G, flags, targets, 1024, eagle, prefix, True)
    assert given != cached == advise_answer([], A10G, flags, targets, 1024, speculative=eagle, prefix=prefix)
    decode_only = advise_answer([], A10G, MeasuredWorkload(input_len=512), Targets(80.0))
    assert decode_only == advise_answer([], A10G, MeasuredWorkload(), Targets(80.0))
    assert decode_only["source"].endswith(
        "the decode step time (no prompts in the steps; give --input-len and --output-len for the scheduler's answer)"
    )
    assert decode_only["slo"]["statistic"] == "mean" and given["slo"]["statistic"] == "p99"
    refusals = [
        ({"prefix": prefix}, Targets(80.0), "shared prefixes are answered on the scheduler", "prefix_len"),
        (
            {"speculative": eagle},
            Targets(80.0),
            "speculative decoding is answered on the scheduler",
            "speculative_config",
        ),
    ]
    for kwargs, asked, message, flag in refusals:
        with pytest.raises(ParameterError, match=message) as refused:
            advise_answer([], A10G, MeasuredWorkload(), asked, **kwargs)
        assert refused.value.parameters == ("input_len", "output_len", flag)
    with pytest.raises(ParameterError, match=r"needs input_len and output_len \(the prompts decide TTFT\)") as refused:
        advise_answer([], A10G, MeasuredWorkload(), targets)
    assert refused.value.parameters == ("ttft_slo_ms", "input_len", "output_len")
    p99 = advise_answer([], A10G, MeasuredWorkload(), Targets(80.0, None, "p99"))
    assert p99["warnings"][-1] == (
        "--slo-statistic p99 needs the scheduler's distribution (give --input-len and --output-len); the decode-only "
        "answer bounds the mean step time, which every token of a full batch takes"
    )


def test_the_margin_note_at_its_edges() -> None:
    """margin_notes at its edges, by hand: a statistic exactly at target × (1 − 2 rms) is not close (TPOT or TTFT);
    a margin that leaves a target at zero or below has no cap to search for (nothing said), one that leaves it just
    above zero does; without a TTFT target the note names no TTFT."""
    from types import SimpleNamespace

    from tokenroof.serving.advise import MARGIN_RMS, margin_notes

    def at(cap: int, tpot: float, ttft: float) -> SimpleNamespace:
        return SimpleNamespace(max_num_seqs=cap, tpot_ms={"p99": tpot}, ttft_ms={"p99": ttft})

    def search(tpot: float, ttft: float | None) -> SimpleNamespace:
        return SimpleNamespace(chosen=at(3, 0.4, 0.4))

    def advised(tpot: float, ttft: float) -> SimpleNamespace:
        return SimpleNamespace(statistic="p99", chosen=at(9, tpot, ttft))

    targets = Targets(100.0, 1000.0)
    edge_tpot, edge_ttft = 100.0 * (1 - MARGIN_RMS * 0.05), 1000.0 * (1 - MARGIN_RMS * 0.1)
    assert margin_notes(advised(edge_tpot, edge_ttft), 0.05, 0.1, targets, search) == []
    assert margin_notes(advised(edge_tpot + 1e-9, edge_ttft), 0.05, 0.1, targets, search) != []
    assert margin_notes(advised(edge_tpot, edge_ttft + 1e-6), 0.05, 0.1, targets, search) != []
    assert margin_notes(advised(95.0, 500.0), 0.5, None, targets, search) == []  # TPOT target × 0 = 0
    assert margin_notes(advised(95.0, 500.0), 0.5, None, Targets(100.0), search) == []
    assert margin_notes(advised(95.0, 900.0), 0.01, 0.5, targets, search) == []  # TTFT target × 0
    (low,) = margin_notes(advised(95.0, 500.0), 0.4975, None, Targets(100.0), search)  # TPOT target 0.5 ms
    assert low.endswith("max_num_seqs 3 keeps it (predicted p99 TPOT 0.4 ms)")
    (ttft_low,) = margin_notes(advised(95.0, 900.0), 0.01, 0.49975, targets, search)  # TTFT target 0.5 ms
    assert ttft_low.endswith("max_num_seqs 3 keeps it (predicted p99 TPOT 0.4 ms, TTFT 0)")


def test_a_band_over_start_phases_by_hand() -> None:
    """phase_band: at_cap's statistic from each start phase (0: bench's stagger) — bench's own, the lowest and the
    highest; it meets targets where its highest does; to_dict is the contract's value with _low/_high siblings."""
    from tokenroof.serving.saturation import PhaseBand, at_cap, phase_band

    lengths = (Lengths(128), Lengths(16))
    band = phase_band(SM, *lengths, 4, "p90", phases=3)
    runs = [at_cap(SM, *lengths, 4, client="staggered", phase=k) for k in range(3)]
    tpot, ttft = ([getattr(r, key)["p90"] for r in runs] for key in ("tpot_ms", "ttft_ms"))
    assert band == PhaseBand(3, "p90", (tpot[0], min(tpot), max(tpot)), (ttft[0], min(ttft), max(ttft)))
    made = PhaseBand(10, "p99", (50.0, 48.0, 52.0), (600.0, 500.0, 900.0))
    assert made.meets(52.0, 900.0) and made.meets(52.0, None)
    assert not made.meets(51.9, None) and not made.meets(60.0, 899.0)
    assert made.to_dict() == {
        "runs": 10,
        "tpot_ms": 50.0,
        "tpot_ms_low": 48.0,
        "tpot_ms_high": 52.0,
        "ttft_ms": 600.0,
        "ttft_ms_low": 500.0,
        "ttft_ms_high": 900.0,
    }


def test_advise_cap_over_start_phases_keeps_a_cap_every_phase_meets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A made-up server: at cap c, bench's stagger gives p99 TPOT c ms and TTFT 10·c ms, and its start phases TTFT up
    to 50·c ms. For TPOT ≤ 9 ms and TTFT ≤ 300 ms bench's stagger meets 9; with phases the cap is the largest whose
    every phase meets them, 6 (50·6 = 300; 350 at 7), found by bisection below 9, bound by TTFT, and said. One phase
    is the search as before; phases of a client other than bench's staggered one are refused."""
    from tokenroof.serving import saturation
    from tokenroof.serving.saturation import AtCap, PhaseBand, advise_cap

    def made_at_cap(model, input_len, output_len, cap, server=None, seed=0, client="even", requests=None, phase=0):
        assert phase == 0
        return AtCap(cap, 10.0 * cap, {"p99": float(cap)}, {"p99": 10.0 * cap}, float(cap), 0)

    banded: list[int] = []

    def made_band(model, input_len, output_len, cap, statistic, server, phases):
        banded.append(cap)
        return PhaseBand(phases, statistic, (cap, cap, cap + 0.5), (10.0 * cap, 10.0 * cap, 50.0 * cap))

    monkeypatch.setattr(saturation, "at_cap", made_at_cap)
    monkeypatch.setattr(saturation, "phase_band", made_band)
    lengths = (Lengths(128), Lengths(16))
    plain = advise_cap(SM, *lengths, 9.0, 300.0, client="staggered")
    assert (plain.chosen.max_num_seqs, plain.phases, banded) == (9, None, [])
    assert "phases" not in plain.to_dict()["at_cap"]
    found = advise_cap(SM, *lengths, 9.0, 300.0, client="staggered", phases=4)
    assert (found.chosen.max_num_seqs, found.binding) == (6, "ttft") and banded == [9, 5, 7, 6]
    assert found.to_dict()["at_cap"]["phases"] == {
        "runs": 4,
        "tpot_ms": 6,
        "tpot_ms_low": 6,
        "tpot_ms_high": 6.5,
        "ttft_ms": 60.0,
        "ttft_ms_low": 60.0,
        "ttft_ms_high": 300.0,
    }
    (note,) = [w for w in found.warnings if "start phases" in w]
    assert note == (
        "at max_num_seqs 9 the targets hold with the streams started as bench starts them, but llama-server lines "
        "them up into groups that prefill their prompts together (a request that arrives while it launches others "
        "joins them), and which groups form depends on how they started: over 4 start phases the p99 TPOT 9.0–9.5 "
        "ms, TTFT 90–450 ms; at 6 every phase meets them (TPOT 6.0–6.5 ms, TTFT 60–300 ms)"
    )
    tight = advise_cap(SM, *lengths, 6.2, 1000.0, client="staggered", phases=4)  # TPOT's highest phase binds
    assert (tight.chosen.max_num_seqs, tight.binding) == (5, "tpot")
    # at 7 the highest phase's TPOT is on its target (met) and its TTFT over: TTFT binds
    edge = advise_cap(SM, *lengths, 7.5, 300.0, client="staggered", phases=4)
    assert (edge.chosen.max_num_seqs, edge.binding) == (6, "ttft")
    # every phase misses past one stream (TTFT 100 ms at 2 against 60): one, which the search never bands
    del banded[:]
    lone = advise_cap(SM, *lengths, 9.0, 60.0, client="staggered", phases=2)
    assert lone.chosen.max_num_seqs == 1 and banded == [6, 3, 2, 1] and lone.to_dict()["at_cap"]["phases"]["runs"] == 2
    for phases in (2, 4):
        with pytest.raises(TokenroofError, match="start phases are a staggered loop's"):
            advise_cap(SM, *lengths, 9.0, 300.0, client="burst", phases=phases)


def test_advise_cap_searches_a_made_up_server_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """advise_cap's search on a server whose cap c gives p99 TPOT c ms, TTFT 10·c ms, throughput 100·c / (1 + c/50)
    tok/s, and preempts from cap 20 on. TPOT ≤ 9 ms: the doubling grid 1, 2, 4, 8, 16, then bisection 12, 10, 9:
    cap 9, bound by TPOT; past 16 the caps double until throughput gains under 2% (1% from 2,048 to 4,096, the
    search's limit, is the first such), so the most throughput is at 4,096. TTFT ≤ 75 ms binds at 7. A KV cache of
    2,500 tokens at a mean context of 100 + 50 / 2 tokens caps the search at 2,500 // 125 = 20 (every target met
    there: bound by the limit, and it preempts); a prompt budget of 13 tokens at 12. Refused: an unknown statistic,
    targets that are not positive finite numbers, and a server no cap serves within them (cap 1 already misses)."""
    from tokenroof.serving import saturation
    from tokenroof.serving.saturation import AtCap, advise_cap, knee_of

    asked: list[int] = []
    servers: set[Server | None] = set()

    def made(cap: int) -> AtCap:
        thr = 100.0 * cap / (1 + cap / 50)
        return AtCap(cap, thr, {"p99": float(cap)}, {"p99": 10.0 * cap}, float(cap), 3 if cap >= 20 else 0)

    def made_at_cap(model, input_len, output_len, cap, server=None, seed=0, client="even", requests=None, phase=0):
        asked.append(cap)
        servers.add(server)
        return made(cap)

    monkeypatch.setattr(saturation, "at_cap", made_at_cap)
    lengths = (Lengths(100), Lengths(50))
    found = advise_cap(SM, *lengths, 9.0)
    assert asked == [1, 2, 4, 8, 16, 12, 10, 9, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert (found.chosen.max_num_seqs, found.binding, found.reference.max_num_seqs) == (9, "tpot", 4096)
    assert (found.statistic, found.tpot_slo_ms, found.ttft_slo_ms, found.warnings) == ("p99", 9.0, None, [])
    assert found.source == "" and servers == {Server()}
    assert found.knee_batch == knee_of([made(c) for c in asked], "p99") and found.to_dict()["max_num_seqs"] == 9
    ttft = advise_cap(SM, *lengths, 100.0, 75.0, source="made up")
    assert (ttft.chosen.max_num_seqs, ttft.binding, ttft.source, ttft.ttft_slo_ms) == (7, "ttft", "made up", 75.0)
    on_target = advise_cap(SM, *lengths, 8.0, 70.0)  # a target met exactly is met; at 8 TPOT is on it, TTFT over
    assert (on_target.chosen.max_num_seqs, on_target.binding) == (7, "ttft")
    assert advise_cap(SM, *lengths, 1.5).chosen.max_num_seqs == 1
    full = advise_cap(SM, *lengths, 1000.0, server=Server(2500))
    assert (full.chosen.max_num_seqs, full.binding) == (20, "limit")
    assert full.warnings == [
        "the targets are met at every cap up to 20: the cap is set by memory or admission",
        "at max_num_seqs 20 the KV cache preempts (3 in the run): the cap is near what the cache holds",
    ]
    assert advise_cap(SM, *lengths, 1000.0, server=Server(None, 13)).chosen.max_num_seqs == 12
    # reserving each request's whole life as the scheduler does: 100 + 50 and its last block's 15 unused slots
    reserving = Server(2500, reserve_output=True)
    assert advise_cap(SM, *lengths, 1000.0, server=reserving).chosen.max_num_seqs == 2500 // 165
    assert servers == {Server(), Server(2500), Server(None, 13), reserving}
    assert advise_cap(SM, *lengths, 1000.0, server=Server(50)).chosen.max_num_seqs == 1  # 100 // 150 = 0: one
    assert advise_cap(SM, *lengths, 1000.0, limit=5).chosen.max_num_seqs == 5
    unbounded = advise_cap(SM, *lengths, 1e9)
    (said, *_) = unbounded.warnings
    assert unbounded.chosen.max_num_seqs == 4096 and said.startswith("the targets are met at every cap up to 4096:")
    with pytest.raises(TokenroofError, match=r"^unknown statistic 'p95'; known: mean, p50, p90, p99$"):
        advise_cap(SM, *lengths, 9.0, statistic="p95")
    for tpot, ttft in ((0.0, None), (math.inf, None), (9.0, 0.0), (9.0, math.inf)):
        with pytest.raises(TokenroofError, match=r"^the TPOT and TTFT targets must be positive finite numbers$"):
            advise_cap(SM, *lengths, tpot, ttft)
    with pytest.raises(TokenroofError, match=r"^no batch cap meets"):  # a sub-millisecond TTFT target is a target
        advise_cap(SM, *lengths, 9.0, 0.5)
    with pytest.raises(TokenroofError) as refused:
        advise_cap(SM, *lengths, 0.5)
    assert str(refused.value) == (
        "no batch cap meets the targets: at max_num_seqs 1 the p99 TPOT is 1 ms (target 0.5) and TTFT is 10 ms"
    )


def test_the_caps_interval_holds_the_cap_it_brackets() -> None:
    """The decode fit's samples need not centre on its answer (an Akaike mixture of structures is not their median):
    on the bench sweep at 12 ms their caps' 5–95% span was 57–62 around a cap of 55; the band is widened to hold it,
    and every target's cap lies inside its band."""
    from tests.conftest import ROOT

    for target in ("9", "12", "14"):
        args = ["advise", str(ROOT / "examples" / "bench"), "--tpot-slo-ms", target, "--context", "576"]
        answer = run_json(args)  # (at the files' context: the decode step time's answer)
        assert answer["max_num_seqs_low"] <= answer["max_num_seqs"] <= answer["max_num_seqs_high"]


def test_advise_on_files_that_state_their_lengths_answers_on_the_scheduler_at_them() -> None:
    """vLLM's and LLMPerf's files state the lengths they measured: advise without --input-len/--output-len answers at
    those on the scheduler (once it answered from the decode step alone, no prompts in its steps, 5,217 tok/s at cap
    130 where the files measured 4,835 at 128; and refused a TTFT target), and says so; --context asks for the decode
    step's answer."""
    from tests.conftest import ROOT

    vllm = str(ROOT / "examples" / "vllm")
    said = run_json(["advise", vllm, "--tpot-slo-ms", "25", "--slo-statistic", "mean"])
    given = run_json(["advise", vllm, "--tpot-slo-ms", "25", "--slo-statistic", "mean", "--input-len", "1024",
                      "--output-len", "256"])  # fmt: skip
    assert said["max_num_seqs"] == given["max_num_seqs"] and said["at_cap"] == given["at_cap"]
    assert said["warnings"][0].startswith("advised at 1,024 prompt / 256 output tokens (the lengths the files state)")
    one = run_json(["advise", vllm, "--tpot-slo-ms", "25", "--output-len", "512"])  # the other length the files'
    assert one["warnings"][0].startswith("advised at 1,024 prompt / 512 output tokens (the files' where not given)")
    two = run_cli(["advise", vllm, str(ROOT / "examples" / "vllm-in4096"), "--tpot-slo-ms", "25"])  # no one workload
    assert two.exit_code != 0 and "holds curves at several contexts (1152, 4224): give --context" in two.output
    refused = run_cli(["advise", vllm, "--tpot-slo-ms", "25", "--prefix-len", "2000"])  # checked against theirs
    assert refused.exit_code != 0 and "--prefix-len (2000) is part of the prompt" in refused.output
    assert said["at_cap"]["throughput_tok_s"] < 4900
    decode = run_json(["advise", vllm, "--tpot-slo-ms", "25", "--context", "1152"])
    assert decode["at_cap"]["ttft_ms"] is None
    llmperf = str(ROOT / "examples" / "llmperf-yi-1.5-34b-4xa10g-vllm")
    both = run_json(["advise", llmperf, "--tpot-slo-ms", "100", "--ttft-slo-ms", "2000"])
    assert both["at_cap"]["ttft_ms"]["p99"] <= 2000 and both["at_cap"]["tpot_ms"]["p99"] <= 100
    # LLMPerf sent these in waves; a cap is kept full as production traffic would, and the answer says which
    assert both["source"].endswith(
        "each cap kept full by steady traffic, streams spread over a request's life (simulate --client even "
        "--concurrency N --max-num-seqs N; not the files' waves: no production client waits for a whole wave to end)"
    )


def test_advise_says_a_ttft_nothing_prices_is_no_servers() -> None:
    """The seed table measured no TTFT and names no model: a TTFT target is refused, and the answer without one says
    the TTFT it prints holds no prompt's compute."""
    args = ["advise", str(SEED_TABLE), "--tpot-slo-ms", "30", "--input-len", "1000", "--output-len", "300"]
    answer = run_json(args)
    assert any("the TTFT here is the wait for a step, not the server's" in w for w in answer["warnings"])


def test_simulate_client_even_replays_advises_answer_at_its_cap() -> None:
    """A cross-command check's find: advise keeps each cap full with steady traffic ("even": streams spread over a
    request's life), which simulate could not be asked for, and the guide called it staggered; at advise's cap
    simulate --client even now reads advise's p99 TPOT and TTFT, and advise's first line names the client."""
    physics = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "300"]
    answer = run_json(["advise", *physics, "--tpot-slo-ms", "100", "--ttft-slo-ms", "300"])
    assert answer["source"].endswith(
        "streams spread over a request's life (simulate --client even --concurrency N --max-num-seqs N)"
    )
    cap = answer["max_num_seqs"]
    args = ["simulate", *physics, "--concurrency", str(cap), "--max-num-seqs", str(cap), "--client", "even"]
    (point,) = run_json(args)["points"]
    assert point["client"] == "even"
    assert point["ttft_ms"]["p99"] == pytest.approx(answer["at_cap"]["ttft_ms"]["p99"], rel=1e-6)
    assert point["tpot_ms"]["p99"] == pytest.approx(answer["at_cap"]["tpot_ms"]["p99"], rel=1e-6)


def test_a_ttft_target_on_files_of_several_workloads_asks_which() -> None:
    """A journey check's find: files that state two workloads' lengths were told '--ttft-slo-ms needs --input-len and
    --output-len' as though they stated none; the refusal names the workloads they hold."""
    files = [str(ROOT / "examples" / "vllm"), str(ROOT / "examples" / "vllm-in4096")]
    refused = run_cli(["advise", *files, "--tpot-slo-ms", "45", "--ttft-slo-ms", "6000"])
    assert refused.exit_code == 2
    assert "the files hold several workloads (mean contexts 1,152, 4,224), give the one to advise for" in refused.stderr


def test_a_cap_past_what_the_files_measured_is_said_to_be() -> None:
    """A journey check's find: advise answered cap 272 on files measured up to 128, and 62 on a bench sweep whose
    server held its batch at 48, with a margin note from the in-range replay error and nothing said of either."""
    args = ["advise", str(ROOT / "examples" / "bench"), "--tpot-slo-ms", "12", "--ttft-slo-ms", "100"]
    bench = run_json([*args, "--slo-statistic", "mean"])["warnings"]
    assert any(w.startswith("max_num_seqs 62 lies past the largest batch the files measured (48)") for w in bench)
    assert any(w.startswith("the measured server held its running batch at 48 (its own cap)") for w in bench)


def test_the_knee_and_the_reference_are_the_servers_not_the_targets() -> None:
    """A journey check's find: advise's knee and "tok/s available" were taken over the caps its search happened to
    try, so they followed the target (knee 16 at 8.7 ms, 128 at 50 ms on one sweep; "309 tok/s available at batch
    2"). Past the first cap that misses, caps double until throughput stops rising: one knee, one reference."""
    files = str(ROOT / "examples" / "vllm")
    answers = [
        run_json(["advise", files, "--tpot-slo-ms", tpot, "--ttft-slo-ms", ttft])
        for tpot, ttft in (("8.7", "400"), ("50", "6000"))
    ]
    assert {a["latency_knee_batch"] for a in answers} == {128.0}
    # the 50 ms answer's cap lies past what the files measured, and says so; the 8.7 ms one's does not
    past = "max_num_seqs 272 lies past the largest batch the files measured (128)"
    assert [any(w.startswith(past) for w in a["warnings"]) for a in answers] == [False, True]
    references = [a["reference"]["throughput_tok_s"] for a in answers]
    assert min(references) > 5300 and max(references) / min(references) < 1.02


def test_advise_draws_the_lengths_as_simulate_and_plan_do() -> None:
    """--input-dist/--output-dist/--spread: advise's caps are kept full with lengths drawn as simulate draws them,
    so its cap is simulate's and plan's workload; the decode-only answer has none to draw, and says so."""
    from tests.conftest import run_json
    from tokenroof.serving.simulate import Lengths, LengthShape

    base = ["advise", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "300"]
    base += ["--tpot-slo-ms", "30", "--ttft-slo-ms", "1000"]
    fixed = run_json(base)
    drawn = run_json([*base, "--input-dist", "lognormal", "--output-dist", "uniform", "--spread", "0.4"])
    assert drawn["max_num_seqs"] != fixed["max_num_seqs"]
    assert "lengths drawn about their means: prompts lognormal (sigma 0.4), outputs uniform (± 40%), as simulate" in (
        " ".join(drawn["warnings"])
    )
    shape = LengthShape("lognormal", "uniform", 0.4)
    assert shape.lengths(1000, 300) == (Lengths(1000, "lognormal", 0.4), Lengths(300, "uniform", 0.4))
    decode = run_json(
        ["advise", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tpot-slo-ms", "30", "--output-dist", "lognormal"]
    )
    assert any(
        "the length distributions (prompts fixed, outputs lognormal (sigma 0.5)) change nothing here" in w
        for w in decode["warnings"]
    )
