"""Engine profiles (specs/engines.py, specs/data/engines/*.toml): loading, precedence, step times by hand, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import run_cli, run_json
from tokenroof.errors import TokenroofError
from tokenroof.fit.predict import MeasuredWorkload, prior_from_specs
from tokenroof.model import roofline as rl
from tokenroof.serving.deployment import Physics
from tokenroof.specs import Precision, load_hardware, load_model
from tokenroof.specs.engines import DEFAULT_ENGINE, list_engines, load_engine

BF16 = Precision.create("bf16")
ISSUE_ENGINES = {
    "vllm-v0",
    "vllm-v1",
    "sglang",
    "tensorrt-llm",
    "tgi",
    "lmdeploy",
    "llama-cpp",
    "fastertransformer",
    "pytorch-eager",
}

# One decode step of llama-2-7b on an H100 SXM (bf16, TP 1), batch 8, context 1000, served online, per profile.
# Re-fitting a profile (benchmarks/first_principles.py --write) moves its number: update it here on purpose.
PINNED_MS = {
    "fastertransformer": 8.8267,
    "generic": 7.9306,
    "llama-cpp": 11.9722,
    "lmdeploy": 9.7091,
    "pytorch-eager": 48.7955,
    "sglang": 9.0301,
    "tensorrt-llm": 8.8948,
    "tgi": 11.2171,
    "vllm-v0": 9.3619,
    "vllm-v1": 9.1802,
}


def by_hand_s(name: str, batch: float, context: float) -> float:
    """T = overhead + per-layer·32 + max(weights, compute) + b·((ctx + 1)·KV read + per-seq), from the file, times
    an unfitted profile's slowdown e^bias_correction (every term scales by it)."""
    profile = load_engine(name)
    return profile.accuracy.slowdown * unscaled_s(profile.efficiency_values(serving=True), batch, context)


def unscaled_s(v: dict[str, float], batch: float, context: float) -> float:
    bandwidth, compute = v.get("bandwidth", 0.75), v.get("compute", 0.75)
    kv_bandwidth = v.get("kv_bandwidth", bandwidth)
    fixed = v.get("overhead_s", 1e-3) + 32 * v.get("overhead_s_per_layer", 0.0)
    weights = 6_607_343_616 * 2 / (3.35e12 * bandwidth)  # streamed params × 2 bytes at the achieved bandwidth
    flops = 2 * 6_607_339_520 + 4 * 32 * 4096 * context  # matmuls + attention over the context, per sequence
    matmul = max(weights, batch * flops / (989.4e12 * compute))
    kv_token = 2 * 32 * 32 * 128 * 2  # K and V, 32 layers × 32 heads × 128 dims × 2 bytes
    per_seq = (context + 1) * kv_token / (3.35e12 * kv_bandwidth) + v.get("overhead_s_per_seq", 0.0)
    return fixed + matmul + batch * per_seq


def test_every_engine_the_issue_names_ships_and_the_default_is_generic() -> None:
    assert ISSUE_ENGINES | {DEFAULT_ENGINE} == set(list_engines())
    assert load_engine().key == "generic" and load_engine(None).key == "generic"
    defaults = rl.Efficiencies()
    generic = rl.Efficiencies(**load_engine("generic").efficiency_values())
    assert generic == defaults  # the profile-free defaults, named: nothing changes without --engine


@pytest.mark.parametrize("name", sorted(PINNED_MS))
def test_one_step_time_per_profile_by_hand(name: str) -> None:
    model, h100 = load_model("llama-2-7b"), load_hardware("h100-sxm")
    eff = rl.default_efficiencies(h100, BF16, load_engine(name))
    step = float(rl.step_model_from_specs(model, h100, BF16, 1, eff).step_time_s(8, 1000))
    assert step == pytest.approx(by_hand_s(name, 8, 1000), rel=1e-12)
    assert step * 1e3 == pytest.approx(PINNED_MS[name], rel=1e-4)


@pytest.mark.parametrize("name", sorted(PINNED_MS))
def test_every_profile_says_where_its_numbers_come_from(name: str) -> None:
    profile = load_engine(name)
    assert profile.source and profile.prefill in ("chunked", "separate")
    acc = profile.accuracy
    assert acc.log_error_low <= acc.log_error <= acc.log_error_high and acc.interval_level == 0.9
    if profile.fitted:  # fitted on two or more published curves, with the held-out figures
        assert acc.curves >= 2 and acc.tpot_error_median is not None and acc.tpot_error_p90 is not None
    low, high = acc.factors()
    assert low <= 1.0 <= high


def test_serving_adds_the_http_servers_cost_per_sequence() -> None:
    profile = load_engine("vllm-v0")
    online, offline = profile.efficiency_values(serving=True), profile.efficiency_values(serving=False)
    extra = profile.serving["overhead_s_per_seq"]
    assert online["overhead_s_per_seq"] == pytest.approx(offline["overhead_s_per_seq"] + extra)
    h100 = load_hardware("h100-sxm")
    assert rl.default_efficiencies(h100, BF16, profile, serving=False).overhead_s_per_seq == pytest.approx(
        offline["overhead_s_per_seq"]
    )


CALIBRATED = """
name = "a calibrated H100"
peaks = "dense"
memory_bytes = 80e9
memory_bandwidth_bytes_per_s = 3.35e12
[peak_flops_per_s]
bf16 = 989.4e12
[efficiencies]
bandwidth = 0.5
[efficiencies.bf16]
overhead_s = 0.004
"""


def test_a_calibrated_hardware_file_wins_where_it_measures_the_same_thing(tmp_path: Path) -> None:
    from tokenroof.specs.hardware import read_hardware_toml

    path = tmp_path / "cal.toml"
    path.write_text(CALIBRATED)
    profile = load_engine("vllm-v0")
    eff = rl.default_efficiencies(read_hardware_toml(path), BF16, profile)
    assert eff.bandwidth == 0.5 and eff.overhead_s == 0.004  # measured on this machine: the file's
    assert eff.kv_bandwidth == profile.efficiencies["kv_bandwidth"]  # not measured there: the profile's
    assert eff.overhead_s_per_seq == pytest.approx(profile.efficiency_values()["overhead_s_per_seq"])


def test_physics_carries_the_engine_to_the_step_model_and_the_prior() -> None:
    plain = Physics("llama-2-7b", "h100-sxm", "bf16")
    vllm = Physics("llama-2-7b", "h100-sxm", "bf16", engine="vllm-v0")
    assert vllm.step_model().step_time_s(8, 1000) == pytest.approx(PINNED_MS["vllm-v0"] / 1e3, rel=1e-4)
    assert plain.step_model().step_time_s(8, 1000) == pytest.approx(PINNED_MS["generic"] / 1e3, rel=1e-4)
    assert vllm.label().endswith("engine vllm-v0") and "engine" not in plain.label()
    online = MeasuredWorkload(input_len=1000, output_len=300)
    prior, base = vllm.prior(online), plain.prior(online)
    assert prior.bandwidth_center == load_engine("vllm-v0").efficiencies["bandwidth"]
    assert prior.slope_center_s > base.slope_center_s  # per-sequence overheads on top of the KV reads
    assert prior.label.endswith("engine vllm-v0")
    vllm_v0 = load_engine("vllm-v0")
    static, online_prior = (
        prior_from_specs(load_model("llama-2-7b"), load_hardware("h100-sxm"), BF16, w, engine=vllm_v0)
        for w in (MeasuredWorkload(1000, static=True), MeasuredWorkload(1000))
    )
    assert static.slope_center_s < online_prior.slope_center_s  # offline decode pays no HTTP server


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"engine": "vllm"}, "unknown engine 'vllm' (did you mean vllm-v0 or vllm-v1?"),
        ({"engine": "nope"}, "unknown engine 'nope'; known profiles: fastertransformer, generic,"),
        ({"engine": "/nope/engine.toml"}, "engine file not found: /nope/engine.toml"),
    ],
)
def test_a_bad_engine_name_is_one_line(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(TokenroofError) as info:
        Physics("llama-2-7b", "h100-sxm", **kwargs)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_an_engine_without_model_and_hardware_is_refused() -> None:
    with pytest.raises(TokenroofError, match="engine shapes first principles: give model and hardware"):
        Physics(engine="vllm-v0")


GOOD = """
name = "my engine"
versions = "1.x"
prefill = "separate"
[efficiencies]
bandwidth = 0.8
[accuracy]
log_error = 0.0
log_error_low = -0.1
log_error_high = 0.2
[source]
numbers = "measured by me"
"""


BAD_FILES = [
    (
        "bandwidth = 0.8",
        "bandwidth = 85",
        "efficiencies.bandwidth = 85; must be in (0, 1], a fraction of the peak; a percentage? give 0.85",
    ),
    ("bandwidth = 0.8", "speed = 0.8", "efficiencies: unknown key 'speed'"),
    ('prefill = "separate"', 'prefill = "eager"', "prefill = \"eager\"; input should be 'chunked' or 'separate'"),
    ("log_error_low = -0.1", "log_error_low = 0.5", "accuracy: expected log_error_low ≤ log_error ≤ log_error_high"),
    ('numbers = "measured by me"', "", "source = {}; must be a table saying where every number comes from"),
    ("[efficiencies]", "max_num_batched_tokens = 0\n[efficiencies]", "max_num_batched_tokens = 0; must be a positive"),
    (
        "[efficiencies]",
        'kv_dtype_by_weights = { fp8 = "fp6" }\n[efficiencies]',
        "kv_dtype_by_weights = {…}; unknown KV-cache dtype 'fp6'; known: bf16",
    ),
    (
        "[efficiencies]",
        'kv_dtype_by_weights = "fp8"\n[efficiencies]',
        'kv_dtype_by_weights = "fp8"; must be a table of weight dtype = KV-cache',
    ),
]


@pytest.mark.parametrize(("old", "new", "message"), BAD_FILES)
def test_a_bad_engine_file_is_one_line_naming_the_key(tmp_path: Path, old: str, new: str, message: str) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(TokenroofError) as info:
        load_engine(str(path))
    assert str(info.value) == f"{path}: {message}" or str(info.value).startswith(f"{path}: {message}")
    path.write_text(GOOD)
    assert load_engine(str(path)).efficiencies["bandwidth"] == 0.8


# -- the CLI -------------------------------------------------------------------------------------------------
SPECS = ["-m", "llama-2-7b", "-H", "h100-sxm", "--dtype", "bf16"]


def test_roofline_names_its_engine_and_brackets_tpot_at_the_profiles_spread() -> None:
    data = run_json(["roofline", *SPECS, "--batch", "8", "--context", "1000", "--engine", "vllm-v0"])
    assert data["engine"]["key"] == "vllm-v0" and data["engine"]["fitted"] and data["interval_level"] == 0.9
    pt = data["points"][0]
    assert pt["tpot_ms"] == pytest.approx(PINNED_MS["vllm-v0"], rel=1e-4)
    acc = load_engine("vllm-v0").accuracy
    assert pt["tpot_ms_low"] == pytest.approx(pt["tpot_ms"] * math.exp(min(acc.log_error_low, 0)))
    assert pt["tpot_ms_high"] == pytest.approx(pt["tpot_ms"] * math.exp(max(acc.log_error_high, 0)))
    assert pt["throughput_tok_s_low"] == pytest.approx(8e3 / pt["tpot_ms_high"])
    assert pt["throughput_tok_s_high"] == pytest.approx(8e3 / pt["tpot_ms_low"])
    default = run_json(["roofline", *SPECS, "--batch", "8", "--context", "1000"])
    assert default["engine"]["key"] == "generic"
    assert default["points"][0]["tpot_ms"] == pytest.approx(PINNED_MS["generic"], rel=1e-4)


def test_roofline_text_says_which_profile() -> None:
    result = run_cli(["roofline", *SPECS, "--batch", "8", "--engine", "tensorrt-llm"])
    assert result.exit_code == 0, result.output
    assert "engine: TensorRT-LLM (tensorrt-llm)" in result.stdout and "fitted to 4 published curves" in result.stdout
    plain = run_cli(["roofline", *SPECS, "--batch", "8"])
    assert "engine: generic (no engine profile)" in plain.stdout and "give --engine" in plain.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["roofline", *SPECS, "--engine", "vllm"],
        ["advise", *SPECS, "--context", "1000", "--engine", "vllm"],
        ["simulate", *SPECS, "--engine", "vllm"],
        ["plan", *SPECS, "--engine", "vllm"],
    ],
)
def test_every_first_principles_command_takes_engine_and_names_a_bad_one(args: list[str]) -> None:
    result = run_cli(args)
    assert result.exit_code == 2
    assert (
        "unknown engine 'vllm' (did you mean vllm-v0 or vllm-v1?" in result.stderr
        and "known profiles:" in result.stderr
    )


def test_advise_from_first_principles_uses_the_engine() -> None:
    args = ["advise", *SPECS, "--context", "1000", "--tpot-slo-ms", "40"]
    generic, vllm = run_json(args), run_json([*args, "--engine", "vllm-v0"])
    assert vllm["max_num_seqs"] < generic["max_num_seqs"]  # vLLM V0's per-sequence costs fill the budget sooner
    assert "engine vllm-v0" in vllm["source"]


def test_the_kv_pool_follows_the_named_engines_memory_fraction_as_that_engine_reads_it() -> None:
    """Issue 30: the profiles' memory fraction was recorded and never read (simulate --engine tgi sized vLLM's
    pool). Llama-3.1-8B in bf16 on an 80 GB H100: 16.06 GB of weights, 131,072 bytes of KV per token."""
    from tokenroof.fit.physics import Physics
    from tokenroof.fit.prior import MeasuredWorkload
    from tokenroof.model.roofline import kv_bytes_per_token, resident_weight_bytes
    from tokenroof.specs import Precision, load_hardware, load_model

    model, chip, bf16 = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision.create("bf16")
    weights, per_token = resident_weight_bytes(model, bf16), kv_bytes_per_token(model, bf16)
    assert per_token == 32 * 2 * 8 * 128 * 2
    memory = chip.memory_bytes
    cases = {
        None: (0.9, False, (0.9 * memory - weights) // per_token),  # vLLM's default
        # V1 reserves its start-up profile's 3,087,761,664 bytes (test_roofline: the reserve by hand)
        "vllm-v1": (0.9, False, (0.9 * memory - weights - 3_087_761_664) // per_token),
        "tgi": (1.0, False, (memory - weights) // per_token),  # --cuda-memory-fraction 1.0 of the whole memory
        "tensorrt-llm": (0.9, True, ((memory - weights) * 0.9) // per_token),  # of what the weights leave
        "lmdeploy": (0.8, True, ((memory - weights) * 0.8) // per_token),
        "llama-cpp": (0.9, False, (0.9 * memory - weights) // per_token),  # sized in tokens: no fraction
    }
    for engine, (fraction, of_free, tokens) in cases.items():
        physics = Physics("llama-3.1-8b", "h100-sxm", "bf16", engine=engine)
        assert physics.memory_fraction() == (fraction, of_free), engine
        assert physics.kv_pool_tokens() == int(tokens), engine
        # advise's first-principles cap and the prior's read the same pool (they held vLLM's 90% for every engine)
        assert physics.max_batch(2048) == int(tokens) // 2048, engine
        assert physics.prior(MeasuredWorkload(context_tokens=2048)).max_batch == int(tokens) // 2048, engine


def test_the_kv_cache_is_what_the_engine_keeps_under_the_weights_and_the_answer_says_so() -> None:
    """TensorRT-LLM runs Model Optimizer FP8 checkpoints with their FP8 KV cache; vLLM keeps the model's 16 bits until
    told. Without --kv-dtype the first principles follow the engine, name it as an assumption, and a flag wins."""
    from tokenroof.fit.physics import Physics

    fp8 = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--dtype", "fp8", "--batch", "8", "--context", "1000"]
    trt = run_json(["roofline", *fp8, "--engine", "tensorrt-llm"])
    vllm = run_json(["roofline", *fp8, "--engine", "vllm-v1"])
    given = run_json(["roofline", *fp8, "--engine", "tensorrt-llm", "--kv-dtype", "bf16"])
    assert (trt["precision"]["kv_dtype"], trt["precision"]["kv_dtype_source"]) == ("fp8", "engine")
    assert (vllm["precision"]["kv_dtype"], vllm["precision"]["kv_dtype_source"]) == ("bf16", "default")
    assert (given["precision"]["kv_dtype"], given["precision"]["kv_dtype_source"]) == ("bf16", "given")
    assert trt["kv_bytes_per_token"] * 2 == vllm["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 2
    bf16 = run_json(["roofline", *fp8[:4], "--batch", "8", "--engine", "tensorrt-llm"])
    assert bf16["precision"]["kv_dtype"] == "bf16"  # 16-bit weights: the engine keeps a 16-bit cache
    text = run_cli(["roofline", *fp8, "--engine", "tensorrt-llm"]).stdout
    assert "KV fp8 (tensorrt-llm's cache under fp8 weights; --kv-dtype to change)" in " ".join(text.split())
    physics = Physics("llama-3.1-8b", "h100-sxm", dtype="fp8", engine="tensorrt-llm")
    assert physics.precision.kv_dtype == "fp8"
    assert (
        Physics("llama-3.1-8b", "h100-sxm", dtype="fp8", kv_dtype="fp16", engine="tensorrt-llm").precision.kv_dtype
        == "fp16"
    )


def test_a_bias_correction_is_for_unfitted_profiles_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace("log_error_high = 0.2", "log_error_high = 0.2\nbias_correction = 0.2"))
    assert load_engine(str(path)).accuracy.slowdown == pytest.approx(math.exp(0.2))
    path.write_text(GOOD.replace("log_error_high = 0.2", "log_error_high = 0.2\nbias_correction = 2"))
    with pytest.raises(TokenroofError, match=r"accuracy.bias_correction = 2; must be in \[0, 1\]"):
        load_engine(str(path))
    fitted = GOOD.replace('prefill = "separate"', 'prefill = "separate"\nfitted = true')
    path.write_text(fitted.replace("log_error_high = 0.2", "log_error_high = 0.2\nbias_correction = 0.2"))
    with pytest.raises(TokenroofError, match="bias_correction is for unfitted profiles"):
        load_engine(str(path))
    fitted_ones = [n for n in list_engines() if load_engine(n).fitted]
    assert fitted_ones and all(load_engine(n).accuracy.bias_correction == 0 for n in [*fitted_ones, "generic"])
    unfitted = [n for n in list_engines() if not load_engine(n).fitted and n != "generic"]
    assert unfitted and all(load_engine(n).accuracy.bias_correction > 0 for n in unfitted)


def test_one_set_of_efficiency_fields() -> None:
    """The step model's Efficiencies, a hardware file's [efficiencies] and an engine file's are the same fields (an
    engine adds its cost per sequence): a field added to one and not the others would be silently ignored."""
    from dataclasses import fields

    from tokenroof.specs.engines import EngineEfficiencies
    from tokenroof.specs.hardware import EfficiencyTerms

    step = {f.name for f in fields(rl.Efficiencies)}
    assert set(EngineEfficiencies.model_fields) == step
    # calibrate does not measure the cost per sequence; the host's launches belong to an engine run eagerly, not to
    # the machine (a hardware file's would slow every CUDA-graph engine on it)
    assert set(EfficiencyTerms.model_fields) == step - {
        "overhead_s_per_seq",
        "host_s_per_layer",
        "host_s_per_allreduce",
    }


def test_vllm_v1s_prompt_budget_follows_the_gpu_as_vllm_serve_does() -> None:
    """`vllm serve` V1 chunks prompts at 8,192 tokens a step on GPUs of 70 GiB or more other than A100s, else 2,048
    (EngineArgs.get_batch_defaults): a fit replaying a named vllm-v1 server takes the budget of its GPU."""
    from tokenroof.fit.physics import Physics

    assert Physics("llama-3.1-8b", "h100-sxm", "bf16", engine="vllm-v1").prompt_budget() == 8192
    assert Physics("llama-3.1-8b", "a100-sxm-80gb", "bf16", engine="vllm-v1").prompt_budget() == 2048
    assert Physics("llama-3.1-8b", "l40s", "bf16", engine="vllm-v1").prompt_budget() == 2048
    assert Physics("llama-3.1-8b", "l40s", "bf16").prompt_budget() == "fit"


def test_vllm_v0s_prefill_step_holds_max_model_len_and_past_32k_it_chunks(tmp_path: Path) -> None:
    """vLLM V0 without chunked prefill holds max(max_model_len, 2,048) prompt tokens in a prefill step
    (SchedulerConfig), so Llama-3-8B's (8,192 positions) takes eight 1,000-token prompts at most, not every waiting
    one; past 32K of context (Llama-3.1-8B, 131,072) V0 turns chunked prefill on (vLLM 0.5.5 on) at 2,048 tokens, as
    its start-up profile does. Each answer says which it assumed."""
    from tests.conftest import run_json
    from tokenroof.fit.physics import Physics

    v0 = Physics("llama-3-8b", "h100-sxm", "bf16", engine="vllm-v0")
    assert (v0.chunks_long_contexts(), v0.separate_prefill_budget(), v0.prompt_budget()) == (False, 8192, None)
    long = Physics("llama-3.1-8b", "h100-sxm", "bf16", engine="vllm-v0")
    assert (long.chunks_long_contexts(), long.prompt_budget()) == (True, 2048)
    assert Physics("llama-3.1-8b", "h100-sxm", "bf16", engine="tgi").separate_prefill_budget() == 4096
    # a server started with --max-model-len (emulate's flag): V0 chunks past 32K of it, not of the model's positions
    from tokenroof.serving.deployment import Deployment

    for given, separate, budget in ((16384, True, 16384), (None, False, 2048), (10**6, False, 2048)):
        dep = Deployment(long, max_model_len=given)
        travelling, _ = dep.step_models()
        assert (dep.separate_prefill(travelling), dep.prompt_budget(travelling)) == (separate, budget), given
    assert long.max_model_len(10**6) == 131072 and v0.max_model_len() == 8192 and Physics().max_model_len(7) == 7
    args = ["simulate", "-H", "h100-sxm", "--engine", "vllm-v0", "--request-rate", "1000", "--input-len", "1000"]
    args += ["--output-len", "50", "--num-requests", "40", "--json"]
    burst = run_json([*args, "-m", "llama-3-8b", "--out", str(tmp_path)])
    firsts = {
        round(r["first_token_s"], 6) for r in map(json.loads, (tmp_path / "requests.jsonl").read_text().splitlines())
    }
    assert len(firsts) == 6  # the first prompt alone, then 8 a prefill step (8 × 1,000 ≤ 8,192): not all 39 at once
    said = "prompts prefilled in steps of their own (at most 8,192 prompt tokens a step: vllm-v0's default"
    assert any(said in w for w in burst["warnings"])
    chunked = run_json([*args, "-m", "llama-3.1-8b"])
    assert any(
        "prompts chunked at 2,048 tokens a step: vllm-v0's default past 32K of context" in w
        for w in (chunked["warnings"])
    )
    assert not any("steps of their own" in w for w in chunked["warnings"])
    speculating = run_json([*args, "-m", "llama-3.1-8b", "--speculative-config", '{"method": "ngram", '
                            '"num_speculative_tokens": 3}', "--acceptance-rate", "0.6"])  # fmt: skip
    assert any("steps of their own" in w for w in speculating["warnings"])  # V0 chunks only without speculation
    roof = ["roofline", "-H", "h100-sxm", "--engine", "vllm-v0", "--input-len", "1000", "--output-len", "100"]
    long_roof, short_roof = (run_json([*roof, "-m", m, "--batch", "8"]) for m in ("llama-3.1-8b", "llama-3-8b"))
    assert any(
        "vllm-v0 turns chunked prefill on by default for a model of 131,072 positions" in w
        for w in (long_roof["warnings"])
    )
    assert (long_roof["workload"]["prefill"], short_roof["workload"]["prefill"]) == ("chunked", "separate")


def test_simulate_chunks_prompts_at_a_named_engines_budget_and_says_so() -> None:
    """simulate with --engine vllm-v1 on an L40S prefills a 6,000-token prompt in 2,048-token chunks, the engine's
    default there (before, first principles prefilled whole prompts whatever the engine), and says it assumed so;
    a budget given wins, and with no engine named prompts go whole."""
    from tests.conftest import run_json

    args = ["simulate", "-m", "llama-3.1-8b", "-H", "l40s", "--rate", "0.2", "--input-len", "6000"]
    args += ["--output-len", "20", "--num-requests", "20"]
    named = run_json([*args, "--engine", "vllm-v1"])
    said = [w for w in named["warnings"] if "prompts chunked at 2,048 tokens a step: vllm-v1's default" in w]
    assert said
    given = run_json([*args, "--engine", "vllm-v1", "--max-num-batched-tokens", "8192"])
    assert not any("prompts chunked" in w for w in given["warnings"])
    # three chunks of a lone prompt take longer than one whole prefill step (each chunk its own step's fixed cost
    # and the weights' read)
    assert named["ttft_ms"]["p50"] > given["ttft_ms"]["p50"]
    plain = run_json(args)
    assert not any("prompts chunked" in w for w in plain["warnings"])
    # a batch cap past the engine's default budget: refused by name, as vLLM refuses to start
    from tests.conftest import run_cli

    refused = run_cli([*args, "--engine", "vllm-v1", "--max-num-seqs", "4096"])
    assert refused.exit_code == 2
    assert "--max-num-batched-tokens is 2,048 by default for vllm-v1 on this GPU: it must exceed --max-num-seqs" in (
        refused.stderr
    )


def test_a_fit_named_with_an_engine_that_prefills_apart_is_replayed_and_run_so() -> None:
    """--fit with --engine tgi: the files are replayed as TGI schedules (prefill steps of their own), as predict
    replays them (it had kept the scheduling a fit without the engine found, and said --engine named the physics
    only, while predict of the same flags replayed TGI's: two models from one input), and the answer says so."""
    from tests.conftest import ROOT

    args = ["simulate", "--fit", str(ROOT / "examples" / "vllm"), "-m", "llama-3.1-8b", "-H", "h100-sxm"]
    data = run_json([*args, "--engine", "tgi", "--concurrency", "4", "--num-requests", "60"])
    assert any(w.startswith("prompts prefilled in steps of their own (at most 4,096") for w in data["warnings"])
    assert not any("not tgi's prefill steps of their own" in w for w in data["warnings"])
    plain = run_json([*args, "--concurrency", "4", "--num-requests", "60"])
    assert not any("prefill steps of their own" in w for w in plain["warnings"])


def test_roofline_says_a_prompt_longer_than_tgis_prefill_step_is_refused_by_that_server() -> None:
    """simulate, advise and plan refuse a prompt past TGI's 4,096-token prefill step; roofline, which prices a
    whole prompt, says the server would refuse it."""
    args = ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "tgi", "--batch", "1"]
    long = run_json([*args, "--input-len", "5000", "--output-len", "100"])
    said = "a 5,000-token prompt is more than a tgi prefill step holds by default (4,096 tokens"
    assert any(w.startswith(said) for w in long["warnings"])
    assert not any(
        "prefill step holds" in w for w in run_json([*args, "--input-len", "4000", "--output-len", "9"])["warnings"]
    )


def test_tensorrt_llm_reserves_each_requests_whole_output_and_says_so() -> None:
    """TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT) admits a request only with its prompt and
    whole output reserved: in a cache of 50,000 tokens, 1,000 + 1,000-token requests run 50,000 // 2,015 = 24 at once
    and never preempt, where vLLM's on-demand admission runs more and preempts; the answer says which it assumed."""
    assert load_engine("tensorrt-llm").admission == "reserve-output"
    assert {load_engine(name).admission for name in list_engines() if name != "tensorrt-llm"} == {"on-demand"}
    base = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "1000"]
    run = [*base, "--concurrency", "64", "--num-requests", "300", "--kv-cache-tokens", "50000"]
    trt = run_json([*run, "--engine", "tensorrt-llm"])
    vllm = run_json([*run, "--engine", "vllm-v1"])
    (point,) = trt["points"]
    assert point["running_batch"] == pytest.approx(24.0) and point["preemptions"] == 0
    assert vllm["points"][0]["running_batch"] > 30 and vllm["points"][0]["preemptions"] > 0
    said = "the KV cache admits as tensorrt-llm's default capacity scheduler (GUARANTEED_NO_EVICT)"
    assert any(w.startswith(said) for w in trt["warnings"]) and not any(w.startswith(said) for w in vllm["warnings"])
    advised = run_json(["advise", *base[1:], "--engine", "tensorrt-llm", "--tpot-slo-ms", "60"])
    assert any(w.startswith(said) for w in advised["warnings"])
    # plan too, and its default prompt budget (a cross-command check found plan silent on both)
    rate = ["--request-rate", "2", "--num-requests", "100", "--seeds", "1", "--workers", "1"]
    rate += ["--ttft-slo-ms", "2000", "--tpot-slo-ms", "60"]
    planned = run_json(["plan", *base[1:], *rate, "--engine", "tensorrt-llm"])["warnings"]
    assert any(w.startswith(said) for w in planned)
    assert "prompts chunked at 8,192 tokens a step: tensorrt-llm's default on this GPU" in " ".join(planned)


def test_the_cap_found_for_a_named_engine_is_given_in_its_words_alone() -> None:
    """A cross-command check's find: advise --engine vllm-v1 printed its cap as TensorRT-LLM's --max_batch_size too,
    whose admission, budget and efficiencies give another cap; a named engine's answer names its server alone, an
    answer for no engine (or one without a server of its own) every server's."""
    from tokenroof.serving.advice import engine_flags

    base = ["advise", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tpot-slo-ms", "40"]
    assert set(run_json([*base, "--engine", "vllm-v1"])["engine_flags"]) == {"vllm"}
    scheduled = run_json([*base, "--engine", "tensorrt-llm", "--input-len", "1000", "--output-len", "300"])
    assert set(scheduled["engine_flags"]) == {"tensorrt-llm"}
    assert (
        len(run_json(base)["engine_flags"]) > 4
        and len(run_json([*base, "--engine", "fastertransformer"])["engine_flags"]) > 4
    )
    assert engine_flags(8, server="tensorrt-llm") == {"tensorrt-llm": "--max_batch_size 8"}
    assert Physics("llama-3.1-8b", "h100-sxm", engine="vllm-v0").server_name == "vllm"
    assert Physics("llama-3.1-8b", "h100-sxm").server_name is None


def test_roofline_sizes_the_memory_as_each_engine_and_simulate_do() -> None:
    """A cross-command check's find: roofline held vLLM's 90% of the whole memory for every engine (404 sequences at
    context 1,150) where simulate sized each engine's own pool: TensorRT-LLM's 0.9 of what the weights leave, TGI's
    and LMDeploy's defaults. Now the two agree, and TensorRT-LLM's reservation of each whole output is said with
    the batch it holds (simulate's running batch at a concurrency past it)."""
    base = ["-m", "llama-3.1-8b", "-H", "h100-sxm"]
    for engine in ("tensorrt-llm", "tgi", "lmdeploy", "vllm-v1", None):
        named = ["--engine", engine] if engine else []
        physics = Physics("llama-3.1-8b", "h100-sxm", engine=engine)
        roofline = run_json(["roofline", *base, *named, "--context", "1150"])
        assert roofline["max_batch_by_memory"] == physics.max_batch(1150.0), engine
    lengths = ["--input-len", "1000", "--output-len", "300"]
    said = run_json(["roofline", *base, "--engine", "tensorrt-llm", *lengths, "--batch", "380"])["warnings"]
    (reserved,) = [w for w in said if "GUARANTEED_NO_EVICT" in w]
    held = int(reserved.split("at most ")[1].split()[0])
    simulated = run_json(
        ["simulate", *base, "--engine", "tensorrt-llm", *lengths, "--concurrency", "380", "--max-num-seqs", "1024",
         "--num-requests", "1200"]
    )  # fmt: skip
    assert simulated["points"][0]["running_batch"] <= held < 1.03 * simulated["points"][0]["running_batch"]
    assert not any("GUARANTEED_NO_EVICT" in w for w in run_json(["roofline", *base, *lengths])["warnings"])


def test_simulate_starts_with_the_named_engines_batch_cap_and_says_so() -> None:
    """A cross-command check's find: simulate --engine vllm-v1 capped the batch at 256, vLLM V0's default, while the
    KV reserve assumed V1's 1,024 on an H100 (the batch pinned at 256, TTFT 4.5 s at 384 streams); the engine's own
    cap is taken where none is given, and said; tokenroof's 256 without an engine, unsaid."""
    assert Physics("llama-3.1-8b", "h100-sxm", engine="vllm-v1").max_num_seqs() == (
        1024,
        "vllm-v1's default on this GPU",
    )
    assert Physics("llama-3.1-8b", "a10g", engine="vllm-v1").max_num_seqs()[0] == 256
    assert Physics("llama-3.1-8b", "h100-sxm", engine="vllm-v0").max_num_seqs() == (256, "vllm-v0's default")
    assert Physics("llama-3.1-8b", "h100-sxm").max_num_seqs() == (256, None)
    run = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "1000", "--output-len", "300"]
    run += ["--concurrency", "384", "--num-requests", "1200"]
    v1 = run_json([*run, "--engine", "vllm-v1"])
    assert v1["points"][0]["running_batch"] > 300
    assert "max_num_seqs 1,024: vllm-v1's default on this GPU (--max-num-seqs to change it)" in v1["warnings"]
    plain = run_json(run)
    assert plain["points"][0]["running_batch"] == pytest.approx(256) and not any(
        w.startswith("max_num_seqs") for w in plain["warnings"]
    )
    given = run_json([*run, "--engine", "vllm-v1", "--max-num-seqs", "128"])
    assert given["points"][0]["running_batch"] == pytest.approx(128) and not any(
        w.startswith("max_num_seqs") for w in given["warnings"]
    )


def test_plan_searches_up_to_the_named_engines_own_batch_cap() -> None:
    """A review's find: plan searched caps up to 256 while simulate now starts vLLM V1 on an H100 at its own 1,024;
    plan's grid reaches the engine's default cap by doublings (none past 256 without one)."""
    from tokenroof.serving.capacity import caps_for

    assert caps_for(Physics("llama-3.1-8b", "h100-sxm", engine="vllm-v1")) == (1024, 512, 256, 128, 64, 32, 16, 8)
    assert caps_for(Physics("llama-3.1-8b", "a10g", engine="vllm-v1")) == (256, 128, 64, 32, 16, 8)
    assert caps_for(Physics("llama-3.1-8b", "h100-sxm")) == caps_for(Physics()) == (256, 128, 64, 32, 16, 8)
