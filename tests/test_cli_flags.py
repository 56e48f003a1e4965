"""Numeric flags out of range get one line naming the flag, exit status 2 and no traceback (issue 13)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import run_cli
from tokenroof.cli import FLAG_RANGES, check_flags
from tokenroof.errors import TokenroofError

SEED = "examples/h100_7b_seed.csv"
SPECS = ["-m", "llama-3.1-8b", "-H", "h100-sxm"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["predict", SEED, "--batch", "256", "--critical-batch", "nan"], "--critical-batch must be a finite number"),
        (["predict", SEED, "--batch", "256", "--roof-tok-s", "-5"], "--roof-tok-s must be above 0"),
        (["roofline", *SPECS, "--context", "nan"], "--context must be a finite"),
        (["roofline", *SPECS, "--prompt-tokens", "-1"], "--prompt-tokens must be at least 1"),
        (["roofline", *SPECS, "--memory-utilization", "2"], "--gpu-memory-utilization must be above 0 and at most 1"),
        (["simulate", *SPECS, "--gpu-memory-utilization", "0"], "--gpu-memory-utilization must be above 0 and at"),
        (
            ["roofline", *SPECS, "--input-len", "1000", "--output-len", "300", "--prompt-tokens", "4000"],
            "give --prompt-tokens or --input-len/--output-len, not both",
        ),
        (["advise", *SPECS, "--tpot-slo-ms", "50", "--gpu-memory-utilization", "1.2"], "--gpu-memory-utilization"),
        (["roofline", *SPECS, "--overhead-ms", "-1"], "--overhead-ms must be at least 0"),
        (["simulate", *SPECS, "--rate", "10", "--spread", "nan"], "--spread must be a finite number"),
        (["simulate", *SPECS, "--spread", "0.3"], "--spread 0.3 spreads nothing: both lengths are fixed"),
        (["simulate", *SPECS, "--input-dist", "uniform", "--spread", "1.5"], "a spread of 1.5 reaches below zero"),
        (["plan", *SPECS, "--spread", "0.3"], "--spread 0.3 spreads nothing"),
        (["simulate", *SPECS, "--num-requests", "0"], "--num-requests must be at least 1"),
        (["simulate", *SPECS, "--tpot-slo-ms", "nan"], "--tpot-slo-ms must be a finite number"),
        (["simulate", *SPECS, "--input-len", "0"], "--input-len must be at least 1"),
        (["plan", *SPECS, "--rate", "nan"], "--request-rate must be a finite number"),
        (["plan", *SPECS, "--seeds", "0"], "--seeds must be at least 1"),
        (["plan", *SPECS, "--max-replicas", "0"], "--max-replicas must be at least 1"),
        (["plan", *SPECS, "--tp-choices", "1.5"], "--tp-choices: 1.5 is not a whole number"),
        (["plan", *SPECS, "--gpu-cost-per-hour", "nan"], "--gpu-cost-per-hour must be a positive price, got nan"),
        (["plan", *SPECS, "--tp-choices", "0,1"], "--tp-choices must be at least 1, got 0"),
        (["plan", *SPECS, "--slo-statistic", "p95"], "unknown --slo-statistic 'p95'"),
        (["advise", *SPECS, "--context", "inf", "--tpot-slo-ms", "40"], "--context must be a finite number"),
        (["advise", SEED, "--tpot-slo-ms", "30", "--slo-statistic", "p75"], "unknown --slo-statistic 'p75'"),
        (["simulate", *SPECS, "--rate", "0"], "--request-rate must be positive finite requests per second, got 0"),
        (["advise", *SPECS, "--context", "1000", "--tpot-slo-ms", "inf"], "--tpot-slo-ms must be a finite number"),
    ],
)
def test_out_of_range_flags_get_one_line(args: list[str], says: str) -> None:
    result = run_cli(args)
    assert result.exit_code == 2, result.output
    assert says in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_infinite_burstiness_is_a_constant_rate_not_an_error() -> None:
    check_flags({"burstiness": float("inf"), "rate": 5.0})
    with pytest.raises(TokenroofError, match="--rate must be above 0"):
        check_flags({"rate": 0.0})


def test_every_ranged_flag_has_a_sane_range() -> None:
    for name, (low, _, high) in FLAG_RANGES.items():
        assert low < high, name


def test_version_names_the_installed_distribution() -> None:
    from importlib.metadata import version

    from tests.conftest import run_cli

    result = run_cli(["--version"])
    assert result.exit_code == 0
    assert result.output.startswith(f"tokenroof {version('tokenroof')} (Python ")
    assert run_cli(["--version", "models"]).output == result.output  # eager: the command is not run


def test_one_concept_one_spelling_and_one_default_across_commands() -> None:
    """Issue 30: the rate was bench --request-rate but simulate/plan --rate, and simulate drew fixed lengths where
    plan drew lognormal ones, so simulating plan's answer with default flags simulated another workload."""
    import typer.main

    from tokenroof.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]

    def option(command: str, name: str) -> Any:
        (param,) = [p for p in commands[command].params if p.name == name]
        return param

    for command in ("bench", "simulate", "plan"):
        assert option(command, "request_rate").opts[0] == "--request-rate"
    for name in ("input_dist", "output_dist", "spread", "input_len", "output_len"):
        assert option("simulate", name).opts == option("plan", name).opts
        assert option("simulate", name).default == option("plan", name).default
    assert option("plan", "length_dist").hidden  # the older spelling still works, unlisted
    # requests per run: simulate and plan --num-requests; bench takes it too, and vllm bench serve's --num-prompts
    for command in ("simulate", "plan"):
        assert "--num-requests" in option(command, "num_requests").opts
    assert {"--num-requests", "--num-prompts"} <= set(option("bench", "requests_per_point").opts)
    for command in ("simulate", "plan"):  # and vllm bench serve's spelling of it
        assert "--num-prompts" in option(command, "num_requests").opts
    assert "--rate" in option("bench", "request_rate").opts  # read on every command, as the guide says
    # the fleet's router, arrivals' shape and seed: one default on the commands that run fleets
    for command in ("simulate", "plan", "emulate"):
        assert option(command, "router").default == "least-outstanding"
    for command in ("simulate", "plan", "bench"):
        assert option(command, "burstiness").default == 1.0
    assert option("simulate", "seed").default == option("plan", "seed").default == 0
    for command in ("predict", "advise", "simulate", "plan", "emulate"):  # measurements to fit: --fit on every one
        assert option(command, "fit").opts == ["--fit"]
    # vLLM's spellings read beside tokenroof's, where a user types them from a vllm serve or vllm bench line
    for command in ("roofline", "predict", "advise", "simulate", "plan", "emulate"):
        assert {"--tp", "--tensor-parallel-size"} <= set(option(command, "tp").opts)
        assert {"--kv-dtype", "--kv-cache-dtype"} <= set(option(command, "kv_dtype").opts)
    for command in ("bench", "simulate"):
        assert {"--concurrency", "--max-concurrency"} <= set(option(command, "concurrency").opts)
    for command in ("roofline", "advise", "simulate", "plan", "emulate"):
        assert option(command, "max_num_batched_tokens").help == option("simulate", "max_num_batched_tokens").help
    # the memory the server fills: vLLM's spelling on every command that sizes a KV cache, the engine's default
    for command in ("roofline", "predict", "advise", "simulate", "plan", "emulate"):
        assert option(command, "gpu_memory_utilization").opts[0] == "--gpu-memory-utilization"
        assert option(command, "gpu_memory_utilization").default is None


def test_the_memory_fraction_is_the_engines_own_setting_read_as_it_reads_it() -> None:
    """--gpu-memory-utilization sizes the KV cache on every command, read as the --engine reads its own setting:
    TensorRT-LLM's 0.9 of what the weights leave is its default, so giving it changes nothing (it had counted as 0.9
    of the whole memory); simulate's pool shrinks with it as the roofline's does, and the default is said."""
    from tests.conftest import run_json
    from tokenroof.fit.physics import Physics

    for engine in (None, "vllm-v1", "tensorrt-llm"):
        named = ["--engine", engine] if engine else []
        base = ["roofline", *SPECS, *named, "--batch", "1"]
        default = run_json(base)["max_batch_by_memory"]
        assert run_json([*base, "--gpu-memory-utilization", "0.9"])["max_batch_by_memory"] == default
        assert run_json([*base, "--gpu-memory-utilization", "0.6"])["max_batch_by_memory"] < default
    assert Physics(*SPECS[1::2], engine="tensorrt-llm", memory_fraction_given=0.5).memory_fraction() == (0.5, True)
    assert Physics(*SPECS[1::2], engine="vllm-v1", memory_fraction_given=0.5).memory_fraction() == (0.5, False)
    # by hand: vLLM V1's reserve 0.64e9 + 0.1e9 + 8,192·47,104·2 + 1,024·128,256·12 = 3,087,761,664 bytes, weights
    # 16,060,522,496; (0.6 × 85,520,809,984 − both) / 131,072 bytes a token = 245,393 tokens
    sized = Physics(*SPECS[1::2], engine="vllm-v1", memory_fraction_given=0.6).kv_pool_tokens()
    assert sized == (int(0.6 * 85_520_809_984) - 3_087_761_664 - 16_060_522_496) // 131_072 == 245_393
    sim = ["simulate", *SPECS, "--engine", "vllm-v1", "--concurrency", "8", "--num-requests", "40"]
    assert run_json([*sim, "--gpu-memory-utilization", "0.6"])["points"][0]["kv_cache_tokens"] == 245_393
    assert run_json([*sim, "--memory-utilization", "0.6"])["points"][0]["kv_cache_tokens"] == 245_393  # as roofline
    said = run_json(sim)["warnings"]
    full = Physics(*SPECS[1::2], engine="vllm-v1").kv_pool_tokens()
    assert (
        f"a KV cache of {full:,} tokens on h100-sxm: 0.9 of the whole memory, less the weights and the server's "
        "reserve, vllm-v1's default (--gpu-memory-utilization to change it)"
    ) in said
    assert not [w for w in run_json([*sim, "--gpu-memory-utilization", "0.6"])["warnings"] if "KV cache of" in w]
    both = run_json([*sim, "--gpu-memory-utilization", "0.6", "--kv-cache-tokens", "9000"])
    assert both["points"][0]["kv_cache_tokens"] == 9000
    assert (
        "--gpu-memory-utilization 0.6 changes nothing here: --kv-cache-tokens 9,000 sizes the KV cache"
        in (both["warnings"])
    )
    # without a model and hardware there is no memory to take a share of: refused, not ignored
    alone = run_cli(["simulate", "--fit", SEED, "--rate", "1", "--gpu-memory-utilization", "0.5"])
    assert alone.exit_code == 2 and "--gpu-memory-utilization sizes the KV cache from the model's weights" in (
        alone.stderr
    )


def test_plan_takes_the_arrivals_and_seeds_simulate_takes() -> None:
    """plan's --burstiness and --seed, spelt and defaulted as simulate's: its answer states the gamma arrivals, the
    seeds it ran are --seed onwards (its JSON's search.seeds), and another first seed moves its tails."""
    from tests.conftest import run_json
    from tokenroof.serving.capacity import Search

    args = ["plan", *SPECS, "--rate", "4", "--num-prompts", "200", "--seeds", "2", "--workers", "1"]
    data = run_json([*args, "--burstiness", "0.5", "--seed", "7"])
    assert data["workload"]["burstiness"] == 0.5
    other = run_json([*args, "--burstiness", "0.5", "--seed", "8"])  # seeds 8, 9: one run the same, one new
    assert other["chosen"]["ttft_ms"]["p99"] != data["chosen"]["ttft_ms"]["p99"]
    assert Search(seeds=2, seed=7).seed_list == (7, 8) and Search().seed_list == (0, 1, 2)
    assert (data["search"]["seeds"], other["search"]["seeds"]) == ([7, 8], [8, 9])
    said = run_cli([*args, "--burstiness", "0.5"]).stdout
    assert "workload: 4 req/s (gamma arrivals, burstiness 0.5)" in said


def test_plan_states_the_workload_it_assumed() -> None:
    from tests.conftest import run_cli

    args = ["plan", *SPECS, "--rate", "8", "--num-requests", "200", "--seeds", "1", "--workers", "1"]
    args += ["--output-dist", "lognormal"]
    result = run_cli(args)
    assert result.exit_code == 0, result.output
    assert "workload: 8 req/s (Poisson); prompts 1,000 tokens (fixed), outputs 300 tokens (lognormal, sigma 0.5)" in (
        result.stdout
    )


def test_config_gives_any_commands_flags_from_toml_and_the_command_line_wins(tmp_path) -> None:
    """Issue 30: --config FILE (TOML) for any command, as GuideLLM's scenarios: top-level keys for every command
    that has the flag, [command] tables for one, flags on the command line over both."""
    import json

    import typer.main

    from tokenroof.cli import app
    from tokenroof.cli.config import default_map

    path = tmp_path / "scenario.toml"
    path.write_text(
        'model = "llama-3.1-8b"\nhardware = "h100-sxm"\n[roofline]\nbatch = [1, 8]\njson = true\n'
        '[simulate]\nrequest-rate = 40\n[bench]\nmodel = "served-name"\n'
    )
    defaults = default_map(path, typer.main.get_command(app))
    assert defaults["roofline"] == {
        "model": "llama-3.1-8b",
        "hardware": "h100-sxm",
        "batch": "1,8",
        "json_output": True,
    }
    assert defaults["simulate"]["request_rate"] == 40
    assert defaults["bench"] == {"model": "served-name"}  # bench's --model is the server's id: tables only
    result = run_cli(["--config", str(path), "roofline", "--batch", "2"])
    assert result.exit_code == 0, result.output
    assert [p["batch"] for p in json.loads(result.stdout)["points"]] == [2]  # the flag wins over the file


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("modle = 3\n", "'modle' is neither a command's table nor a flag of any command"),
        (
            "[simulate]\nratee = 3\n",
            "[simulate] ratee: `tokenroof simulate` has no such flag; it has: acceptance-rate, burstiness,",
        ),
        ("model = [\n", "not TOML"),
        ("[roofline]\nbatch = [[1]]\n", "a list of plain values"),
        ('[roofline]\njson = "yes"\n', "[roofline] json: the flag takes true or false, got 'yes'"),
        ("[roofline]\ncontext = true\n", "[roofline] context: the flag takes a value, not true or false, got True"),
        ('[roofline]\ntp = "two"\n', "[roofline] tp: Input should be a valid integer"),
        ("tp = 2.7\n", "tp (for roofline): Input should be a valid integer, got a number with a fractional part"),
        ("[simulate]\nseed = -1\n", "[simulate] seed: Input should be greater than or equal to 0, got -1"),
        ('out = "here"\n', "'out' means something else on each command (bench's folder, bench-local's CSV"),
        ("workers = 4\n", "'workers' means something else on each command"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_file(tmp_path, capsys, text: str, says: str) -> None:
    from tokenroof.cli import main

    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_info:
        main(["roofline", "--config", str(path)])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert says in stderr and str(path) in stderr.replace("\n", "") and "Traceback" not in stderr


def test_a_shared_key_one_command_cannot_take_leaves_that_one_alone(tmp_path, capsys) -> None:
    """A top-level `context = "8192,32768"` is roofline's list and bench-local's one number: roofline takes it, and
    bench-local refuses it only when it is the command run; a switch the file turns on the command line turns off."""
    from tokenroof.cli import main

    path = tmp_path / "shared.toml"
    path.write_text('context = "1024,2048"\njson = true\n')
    result = run_cli(["--config", str(path), "roofline", *SPECS, "--batch", "1"])
    assert result.exit_code == 0 and [c["context_tokens"] for c in json.loads(result.stdout)["contexts"]] == [
        1024,
        2048,
    ]
    plain = run_cli(["--config", str(path), "roofline", *SPECS, "--batch", "1", "--no-json"])
    assert plain.exit_code == 0 and plain.stdout.startswith("llama-3.1-8b")
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", str(path), "bench-local", "--model", "llama-3.2-1b"])
    assert exit_info.value.code == 2
    assert "context (for bench-local): Input should be a valid integer" in capsys.readouterr().err


def test_a_commands_own_table_wins_over_a_shared_key_it_could_not_take(tmp_path, capsys) -> None:
    """A top-level `context` list is roofline's; bench-local's table gives its own one number, which wins there (the
    shared value is not checked against it); tokenroof's own ranges name the file and key too."""
    from tokenroof.cli.config import default_map

    path = tmp_path / "own.toml"
    path.write_text('context = "1024,2048"\n[bench-local]\ncontext = 512\n')
    import typer.main

    from tokenroof.cli import app, main

    defaults = default_map(path, typer.main.get_command(app), "bench-local")
    assert defaults["bench-local"]["context"] == 512 and defaults["roofline"]["context"] == "1024,2048"
    ranged = tmp_path / "ranged.toml"
    ranged.write_text("gpu-memory-utilization = 1.5\n")
    with pytest.raises(SystemExit):
        main(["--config", str(ranged), "roofline", *SPECS])
    said = capsys.readouterr().err
    assert "gpu-memory-utilization (for " in said and "must be above 0 and at most 1, got 1.5" in said


def test_an_integer_too_large_for_a_float_is_refused_in_one_line() -> None:
    """Found by the ui fuzz test: a 330-digit --tp overflowed the message's %g (an OverflowError, not the error)."""
    from tokenroof.params import check_flags

    with pytest.raises(TokenroofError, match=r"--tp must be at least 1, got -3\.481e\+307"):
        check_flags({"tp": -(18**245)})


def test_measurements_are_given_alike_to_every_command_that_fits_them() -> None:
    """predict and advise read their files positionally, as before, or with --fit as simulate and plan spell it; the
    answers are the same, and predict without any says what it needs."""
    from tests.conftest import run_json

    args = ["--batch", "256", "--samples", "20"]
    assert (
        run_json(["predict", "--fit", SEED, *args])["predictions"] == run_json(["predict", SEED, *args])["predictions"]
    )
    advised = run_json(["advise", "--fit", SEED, "--tpot-slo-ms", "30", "--samples", "20"])
    assert (
        advised["max_num_seqs"] == run_json(["advise", SEED, "--tpot-slo-ms", "30", "--samples", "20"])["max_num_seqs"]
    )
    none = run_cli(["predict", "--batch", "256"])
    assert none.exit_code == 2 and "give the measurements to fit: files, or --fit FILE" in none.stderr


def test_a_fault_tests_finds_on_the_days_flags(tmp_path) -> None:
    """A fault test of the new flags found: a roofline budget too small to keep the batch full answered faster
    than the default; TensorRT-LLM's share of what the weights leave refused weights that fit; predict dropped the
    memory cap where not one sequence fit; a huge --num-requests was a traceback; a config's repeated flag was
    last-one-wins, its --fit unreadable and a byte-order mark not TOML."""
    from tests.conftest import run_json
    from tokenroof.fit.physics import Physics

    lengths = ["--engine", "vllm-v1", "--input-len", "1000", "--output-len", "300", "--batch", "8,64"]
    starved = run_json(["roofline", *SPECS, *lengths, "--max-num-batched-tokens", "65"])["warnings"]
    # 65 / (1 + 1000 / 300) = 15: beyond it the room beside the decodes prefills fewer tokens than finishes bring
    assert any(w.startswith("batches above 15 cannot stay full under a 65-token step budget") for w in starved)
    assert not any("cannot stay full" in w for w in run_json(["roofline", *SPECS, *lengths])["warnings"])
    # an engine whose share is of what the weights leave: 16 GB of weights fit in 17 GB, whatever the share
    assert Physics("llama-3.1-8b", "h100-sxm", engine="tensorrt-llm", memory_fraction_given=0.01).unservable() is None
    why = Physics("llama-3.1-8b", "h100-sxm", engine="vllm-v1", memory_fraction_given=0.1).unservable()
    assert why is not None and "give --tp 4 or more" in why and "larger --gpu-memory-utilization" in why  # 32 heads
    whole = Physics("llama-3.1-70b", "h100-sxm", memory_fraction_given=1.0).unservable()  # all of it: no larger share
    assert whole is not None and "give --tp 2 or more" in whole and "--gpu-memory-utilization" not in whole
    capped = ["predict", SEED, "-m", "llama-2-7b", "-H", "h100-sxm", "--context", "1024", "--batch", "8"]
    refused = run_cli([*capped, "--engine", "tensorrt-llm", "--gpu-memory-utilization", "0.005"])
    assert refused.exit_code == 2 and "not one sequence of 1,024 tokens fits in the KV cache" in refused.stderr
    # an empty KV cache beside weights that fit: one message on every command that sizes one, naming the share
    for command in (["simulate", "--rate", "1"], ["advise", "--tpot-slo-ms", "50", "--input-len", "99"]):
        args = [*command, *SPECS, "--engine", "tensorrt-llm", "--gpu-memory-utilization", "1e-9"]
        if command[0] == "advise":
            args += ["--output-len", "9"]
        empty = run_cli(args)
        assert empty.exit_code == 2 and "at 1e-09 of what the weights leave holds 0 tokens, not one block" in (
            empty.stderr
        )
    past = run_cli(["roofline", *SPECS, "--gpu-memory-utilization", "1.0000001"])
    assert "at most 1, got 1.0000001" in past.stderr  # not rounded onto the bound it missed
    huge = run_cli(["simulate", *SPECS, "--num-requests", "99999999999999999999"])
    assert huge.exit_code == 2 and "--num-requests must be at least 1 and at most 1e+08" in huge.stderr
    twice = tmp_path / "twice.toml"
    twice.write_text("[simulate]\nrequest-rate = 3\nrequest_rate = 5\n")
    said = run_cli(["--config", str(twice), "simulate", *SPECS])
    assert said.exit_code == 2 and "'request-rate' and 'request_rate' are one flag (--request-rate)" in said.stderr
    fitted = tmp_path / "fit.toml"
    fitted.write_text(f'\ufeff[predict]\nfit = ["{SEED}"]\nbatch = "256"\n')  # a byte-order mark first, as Notepad
    assert run_cli(["--config", str(fitted), "predict", "--samples", "20"]).exit_code == 0
