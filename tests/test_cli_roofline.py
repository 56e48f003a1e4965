"""`tokenroof roofline` through the CLI: JSON contract, tables, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli, run_json

CONTRACT = {
    "critical_batch",
    "critical_batch_weights_only",
    "knee_batch",
    "ridge_flops_per_byte",
    "max_batch_by_memory",
    "throughput_asymptote_tok_s",
    "points",
}


def test_json_contract_keys_and_batches_echoed() -> None:
    data = run_json(
        [
            "roofline",
            "--model",
            "llama-2-7b",
            "--hardware",
            "h100-sxm",
            "--batch",
            "1",
            "8",
            "127.6",
            "--context",
            "300",
        ]
    )
    assert set(data) >= CONTRACT
    assert [p["batch"] for p in data["points"]] == [1, 8, 127.6]
    for point in data["points"]:
        assert {"batch", "tpot_ms", "throughput_tok_s", "bound"} <= set(point)
        assert point["throughput_tok_s"] == pytest.approx(point["batch"] * 1000 / point["tpot_ms"])
    assert data["critical_batch"] is None
    assert "KV-cache reads" in data["critical_batch_reason"]
    assert data["critical_batch_weights_only"] == pytest.approx(295.3, rel=0.01)
    assert data["efficiencies"]["bandwidth"] == 0.75  # the assumptions are stated


def test_comma_batches_and_zero_context_critical_batch() -> None:
    data = run_json(["roofline", "-m", "llama-2-7b", "-H", "h100-sxm", "--batch", "1,64", "--context", "0"])
    assert data["knee_batch"] == pytest.approx(data["critical_batch_weights_only"])
    assert data["critical_batch"] is not None


def test_table_output_mentions_bounds() -> None:
    result = run_cli(["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "2048"])
    assert result.exit_code == 0
    assert "knee batch" in result.stdout and "weights" in result.stdout and "kv" in result.stdout
    assert "do not fit in memory" in result.stderr


def test_context_above_model_max_warns() -> None:
    data = run_json(["roofline", "-m", "llama-2-7b", "-H", "h100-sxm", "--context", "8000", "--batch", "1"])
    assert any("exceeds llama-2-7b's maximum of 4096" in w for w in data["warnings"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-m", "gpt-9", "-H", "h100-sxm"], "unknown model 'gpt-9'; known presets:"),
        (["-m", "llama-2-7b", "-H", "tpu"], "unknown hardware 'tpu'; known presets:"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--batch", "0"], "batch sizes must be positive numbers, got 0"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--batch", "-4"], "batch sizes must be positive numbers, got -4"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--batch", "x"], "--batch: 'x' is not a number"),
        (["-m", "llama-2-7b", "-H", "a100-sxm-80gb", "--dtype", "fp8", "--compute-dtype", "fp8"], "has no fp8 peak"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--tp", "3"], "does not divide"),
        (["-m", "missing/config.json", "-H", "h100-sxm"], "model file not found"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--input-len", "128"], "--input-len and --output-len go together"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--batching", "static"], "give --input-len and --output-len with it"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--input-len", "1", "--output-len", "2", "--context", "9"], "not both"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--input-len", "1", "--output-len", "2", "--batching", "x"], "one of"),
        (["-m", "llama-2-7b", "-H", "h100-sxm", "--input-len", "0.5", "--output-len", "2"], "at least 1"),
    ],
)
def test_bad_input_one_line_error(args: list[str], message: str) -> None:
    result = run_cli(["roofline", *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_user_config_and_hardware_files(tiny_config: Path, tmp_path: Path) -> None:
    chip = tmp_path / "laptop.toml"
    chip.write_text(
        'name = "laptop"\npeaks = "dense"\nmemory_bytes = 16e9\nmemory_bandwidth_bytes_per_s = 100e9\n'
        "[peak_flops_per_s]\nbf16 = 20e12\n"
    )
    data = run_json(["roofline", "-m", str(tiny_config), "-H", str(chip), "--batch", "1,2", "--context", "10"])
    assert data["hardware"]["name"] == "laptop"
    assert data["ridge_flops_per_byte"] == pytest.approx(200)


def test_plot_written(tmp_path: Path) -> None:
    out = tmp_path / "roof.png"
    result = run_cli(["roofline", "-m", "mixtral-8x7b", "-H", "h100-sxm", "--tp", "2", "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 10_000


def test_list_commands() -> None:
    assert "llama-3.1-8b" in run_cli(["models"]).stdout
    listed = run_cli(["hardware"]).stdout
    assert "h100-sxm" in listed and "448*" in listed  # the MI300X's mesh: less for a small ring, said below
    assert "mi300x: 64 at TP2, 192 at TP4, 448 at TP8" in listed and "h100-pcie: 64 at TP4;" in listed


def test_several_contexts_in_one_call() -> None:
    """'TPOT at 8k versus 32k context?': each context's roofline, by hand the KV term scales with the context."""
    data = run_json(["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--batch", "16", "--context", "8192,32768"])
    short, long = data["contexts"]
    assert (short["context_tokens"], long["context_tokens"]) == (8192, 32768)
    # KV read per step: 16 sequences × context × 131,072 B; the time adds one written token per sequence
    assert short["points"][0]["bytes_kv_read"] == 16 * 8192 * 131_072
    assert long["points"][0]["bytes_kv_read"] == 4 * short["points"][0]["bytes_kv_read"]
    assert long["points"][0]["time_kv_ms"] == pytest.approx(4 * short["points"][0]["time_kv_ms"], rel=1e-3)
    assert long["max_batch_by_memory"] < short["max_batch_by_memory"]
    single = run_json(["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--batch", "16", "--context", "8192"])
    assert single["points"] == short["points"]


def test_a_workload_gives_tpot_as_its_benchmark_counts_it() -> None:
    """--input-len/--output-len: the mean context, TPOT through served_tpot_s (the path benchmarks/first_principles.py
    scores against published curves), the engine's prefill policy, and the bare decode step beside it."""
    from tokenroof.model import roofline as rl
    from tokenroof.model.analysis import DecodeWorkload, served_tpot_s
    from tokenroof.specs import Precision, load_hardware, load_model
    from tokenroof.specs.engines import load_engine

    # Llama-3-8B (8K positions): V0 prefills in steps of its own (past 32K, Llama-3.1's 131K, it chunks)
    base = ["roofline", "-m", "llama-3-8b", "-H", "h100-sxm", "--batch", "1,64,400", "--engine", "vllm-v0"]
    online = run_json([*base, "--input-len", "1024", "--output-len", "512"])
    plain = run_json([*base, "--context", "1280"])
    assert online["context_tokens"] == 1280 == online["workload"]["mean_context_tokens"]
    assert online["workload"] == {**online["workload"], "batching": "online", "prefill": "separate"}  # V0's
    assert online["prompt_tokens"] == 1024 and online["ttft_ms"] > 0
    spec, hw, engine = load_model("llama-3-8b"), load_hardware("h100-sxm"), load_engine("vllm-v0")
    precision = Precision.create("bf16")
    sm = rl.step_model_from_specs(spec, hw, precision, 1, rl.default_efficiencies(hw, precision, engine))
    expected = served_tpot_s(sm, [1, 64, 400], DecodeWorkload(1024, 512, chunked=False), online["max_batch_by_memory"])
    assert [p["tpot_ms"] for p in online["points"]] == pytest.approx(expected * 1e3)
    for served, bare in zip(online["points"], plain["points"], strict=True):
        assert served["decode_step_ms"] == pytest.approx(bare["tpot_ms"])
        assert served["tpot_ms"] > bare["tpot_ms"]  # the arriving prompts' prefill steps
        assert served["e2e_ms_per_token"] is None

    static = run_json([*base, "--input-len", "1024", "--output-len", "512", "--batching", "static"])
    cap = static["max_batch_by_memory"]
    assert 64 < cap < 400
    low, _, high = static["points"]
    assert low["tpot_ms"] == pytest.approx(low["decode_step_ms"])  # a static batch's TPOT: its decode steps
    assert high["tpot_ms"] < high["decode_step_ms"]  # 400 run in waves of the cap: each step holds `cap`
    assert high["throughput_tok_s"] == pytest.approx(cap * 1e3 / high["tpot_ms"])
    assert all(p["e2e_ms_per_token"] > p["tpot_ms"] for p in static["points"])  # plus the batch's prefill
    assert any("runs in waves of" in w for w in static["warnings"])
    assert static["efficiencies"]["overhead_s_per_seq"] < online["efficiencies"]["overhead_s_per_seq"]  # no HTTP


def test_a_workload_table_names_it() -> None:
    result = run_cli(
        [
            "roofline",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm",
            "--input-len",
            "1024",
            "--output-len",
            "512",
            "--batching",
            "static",
            "--batch",
            "1,8",
        ]
    )
    assert result.exit_code == 0
    assert "workload: 1,024 in / 512 out tokens (mean context 1,280), a static batch" in result.stdout
    assert "e2e ms/tok" in result.stdout and "decode ms" in result.stdout


def test_the_all_reduces_are_their_own_column_and_bound_under_tensor_parallelism() -> None:
    """Llama-3.1-70B fp8 over 8 H100s: 160 all-reduce calls a step (2 a layer) cost more than streaming the weights
    at small batch, which the bound names 'interconnect', not 'overhead'; their bytes leave the KV column."""
    args = ["roofline", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--dtype", "fp8", "--context", "2048"]
    split = run_json([*args, "--tp", "8", "--batch", "1", "256"])
    terms, (one, full) = split["step_model"], split["points"]
    assert terms["t_comm_fixed_s"] > 0 and 0 < terms["t_comm_seq_s"] < terms["t_seq_s"]
    for point in (one, full):
        b = point["batch"]
        assert point["time_interconnect_ms"] == pytest.approx(
            (terms["t_comm_fixed_s"] + b * terms["t_comm_seq_s"]) * 1e3
        )
        assert point["time_overhead_ms"] == pytest.approx((terms["t_fixed_s"] - terms["t_comm_fixed_s"]) * 1e3)
        kv_s = b * (2048 * terms["t_kv_token_s"] + terms["t_seq_s"] - terms["t_comm_seq_s"])
        assert point["time_kv_ms"] == pytest.approx(kv_s * 1e3)
    assert (one["bound"], full["bound"]) == ("interconnect", "kv")
    assert "comm ms" in run_cli([*args, "--tp", "8", "--batch", "1"]).output
    alone = run_json([*args, "--batch", "1"])
    assert alone["points"][0]["time_interconnect_ms"] == 0 and alone["step_model"]["t_comm_fixed_s"] == 0
    assert "comm ms" not in run_cli([*args, "--batch", "1"]).output


def test_the_prompt_budget_given_is_the_one_an_online_workload_runs() -> None:
    """--max-num-batched-tokens on roofline, as on simulate and advise: an online workload's prompts chunked at the
    budget given, not the engine's default (vLLM V1's 8,192 on an H100); refused where no step carries prompts."""
    args = ["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "vllm-v1", "--batch", "64"]
    args += ["--input-len", "4000", "--output-len", "300"]
    default, given = run_json(args), run_json([*args, "--max-num-batched-tokens", "512"])
    assert (default["workload"]["max_num_batched_tokens"], given["workload"]["max_num_batched_tokens"]) == (8192, 512)
    assert given["points"][0]["tpot_ms"] != default["points"][0]["tpot_ms"]
    alone = run_cli(["roofline", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--max-num-batched-tokens", "512"])
    assert alone.exit_code == 2 and "give --input-len/--output-len with it" in alone.stderr
