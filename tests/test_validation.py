"""The validation layer (specs/validate.py): every malformed spec file is one line naming the file and the key.

Each case is a reproducer fault testing found: a traceback, a wrong answer or a silent acceptance before.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tokenroof.errors import TokenroofError
from tokenroof.fit.travel import StepModelFields, read_step_model
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import list_hardware, list_models, load_hardware, load_model
from tokenroof.specs.hardware import hardware_from_dict
from tokenroof.specs.model import model_from_config

PRESETS = Path(__file__).resolve().parents[1] / "src" / "tokenroof" / "specs" / "data"
LLAMA = json.loads((PRESETS / "models" / "llama-2-7b.json").read_text())
MIXTRAL = json.loads((PRESETS / "models" / "mixtral-8x7b.json").read_text())
H100 = (PRESETS / "hardware" / "h100-sxm.toml").read_text()
TERMS = {"t_fixed_s": 0.001, "t_weights_s": 0.01, "t_compute_s": 5e-5, "t_kv_token_s": 1e-8}


def error_of(load: Any, path: Path) -> str:
    with pytest.raises(TokenroofError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


def load_config(path: Path) -> Any:
    return load_model(str(path))


def load_chip(path: Path) -> Any:
    return load_hardware(str(path))


def with_line(toml: str, key: str, value: str) -> str:
    """The TOML with `key`'s first line set to `value` (or the line added to the top table)."""
    line = re.compile(rf"^{re.escape(key)} = .*$", re.MULTILINE)
    return line.sub(f"{key} = {value}", toml, count=1) if line.search(toml) else f"{key} = {value}\n{toml}"


# -- model config.json ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"head_dim": "abc"}, 'head_dim = "abc"; must be a positive integer'),
        ({"head_dim": -128}, "head_dim = -128; must be a positive integer"),  # once "KV cache per token −128 KiB"
        ({"head_dim": True}, "head_dim = true; must be a positive integer"),  # a bool is never a number
        ({"num_hidden_layers": False}, "num_hidden_layers = false; must be a positive integer"),
        ({"hidden_size": 5e-324}, "hidden_size = 5e-324; must be a positive integer"),
        ({"hidden_size": 10**400}, "hidden_size = an integer of 1329 bits; is too large (more than 2,147,483,647)"),
        ({"num_attention_heads": 8192}, "num_attention_heads = 8192 exceeds hidden_size = 4096"),
        ({"num_key_value_heads": 64}, "32 attention heads are not a multiple of 64 KV heads"),
        ({"rope_theta": "1e4"}, 'rope_theta = "1e4"; must be a number'),
        ({"rope_theta": 5e-324}, "rope_theta = 5e-324; is too small to compute with (below 2.23e-308"),
        ({"rms_norm_eps": -1e-5}, "rms_norm_eps = -1e-05; must be a positive number"),
        ({"tie_word_embeddings": "false"}, 'tie_word_embeddings = "false"; must be true or false'),
        ({"model_type": "bert"}, 'model_type = "bert"; not a known family (known: gpt2,'),
        ({"rope_scaling": "linear"}, 'rope_scaling = "linear"; must be a JSON object'),
        (
            {"rope_scaling": {"rope_type": "linear", "factor": -1}},
            "rope_scaling = {…}; factor = -1: must be a finite number, not negative",
        ),
        (  # found by the property test: a number inside a list (LongRoPE's short_factor) went unchecked
            {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, -1]}},
            "rope_scaling = {…}; short_factor.1 = -1: must be a finite number, not negative",
        ),
        ({"rope_parameters": {"rope_theta": -1}}, "rope_parameters.rope_theta = -1; must be a positive number"),
    ],
)
def test_bad_config_fields_are_named(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **change}))
    assert error_of(load_config, path).startswith(message)


def test_moe_top_k_above_the_expert_count(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MIXTRAL, "num_experts_per_tok": 9}))
    assert error_of(load_config, path).startswith("num_experts_per_tok = 9 exceeds num_local_experts = 8")


def test_null_means_not_given(tmp_path: Path) -> None:
    """Hugging Face writes unset attributes as null: the default applies (rope_theta once raised a TypeError)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "rope_theta": None, "head_dim": None, "num_key_value_heads": None}))
    model = load_model(str(path))
    assert (model.rope_theta, model.head_dim, model.num_kv_heads) == (10000.0, 128, 32)


def test_a_bom_is_skipped_and_other_bytes_must_be_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(LLAMA).encode())
    assert load_model(str(path)).total_params == load_model("llama-2-7b").total_params
    path.write_bytes(b'{\n  "model_type": "ll\xe1ma"\n}')
    assert error_of(load_config, path) == "not UTF-8 text (byte 0xe1 at offset 21, line 2); save it as UTF-8"


@pytest.mark.parametrize(
    "content",
    [
        "[" * 100_000 + "]" * 100_000,  # once a RecursionError inside json
        '{"a": ' * 40 + "1" + "}" * 40,  # parses, but no spec nests this deep
    ],
)
def test_deep_nesting_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    assert error_of(load_config, path) == "nested more than 32 levels deep; a spec file needs a few"


def test_an_integer_too_long_to_parse(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 1' + "0" * 5000 + "}")
    assert error_of(load_config, path).startswith("not valid JSON (Exceeds the limit (4300 digits)")


def test_text_config_must_be_an_object(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llava", "text_config": 3}))
    assert "text_config must be a JSON object" in error_of(load_config, path)


def test_every_model_preset_loads() -> None:
    for name in list_models():
        model = load_model(name)
        assert model.head_dim > 0 and model.total_params > 0


# -- hardware TOML ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("memory_bytes", "inf", "memory_bytes = inf; must be a finite number"),  # once a traceback
        ("memory_bandwidth_bytes_per_s", "inf", "memory_bandwidth_bytes_per_s = inf; must be a finite number"),
        ("memory_bytes", "80", "memory_bytes = 80; looks like GB; give bytes (80e9)"),  # once accepted
        ("memory_bytes", "81920", "memory_bytes = 81920; looks like MB; give bytes (81920e6)"),
        ("memory_bytes", "80e18", "memory_bytes = 8e+19; looks like bytes scaled twice; give bytes (8e+10)"),
        ("memory_bytes", "5e-324", "memory_bytes = 5e-324; is too small to compute with"),
        ("memory_bytes", "true", "memory_bytes = true; must be a number"),
        ("memory_bytes", '"80GB"', 'memory_bytes = "80GB"; must be a number'),
        ("memory_bytes", "-80e9", "memory_bytes = -8e+10; must be a positive number of bytes"),
        (
            "memory_bandwidth_bytes_per_s",
            "3.35",
            "memory_bandwidth_bytes_per_s = 3.35; looks like TB/s; give bytes per second (3.35e12)",
        ),
        (
            "interconnect_bandwidth_bytes_per_s",
            "450",
            "interconnect_bandwidth_bytes_per_s = 450; looks like GB/s; give bytes per second (450e9)",
        ),
        ("bf16", "989.4", "peak_flops_per_s.bf16 = 989.4; looks like TFLOP/s; give FLOP/s (989.4e12)"),
        ("fp9", "1e12", "peak_flops_per_s.fp9: unknown dtype 'fp9'; known: bf16,"),
        ("bfloat16", "1e15", "peak_flops_per_s: gives bf16 twice (under different names)"),
        ("name", "3", "name = 3; must be a string"),
        ("vendor", '"x"', "unknown key 'vendor' (known: name, peaks, memory_bytes,"),
    ],
)
def test_bad_hardware_values_are_named(tmp_path: Path, key: str, value: str, message: str) -> None:
    path = tmp_path / "chip.toml"
    peaks = key in ("fp9", "bfloat16")
    path.write_text(
        H100.replace("[peak_flops_per_s]\n", f"[peak_flops_per_s]\n{key} = {value}\n")
        if peaks
        else with_line(H100, key, value)
    )
    assert error_of(load_chip, path).startswith(message)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("overhead_s = nan", "efficiencies.overhead_s = nan; must be a finite number"),  # once a nan TPOT
        ("overhead_s = inf", "efficiencies.overhead_s = inf; must be a finite number"),
        ("overhead_s = 4", "efficiencies.overhead_s = 4; looks like ms; give seconds (4e-3)"),
        ("bandwidth = 80", "efficiencies.bandwidth = 80; must be in (0, 1], a fraction of the peak; a percentage?"),
        ("compute = 0", "efficiencies.compute = 0; must be in (0, 1]"),
        ("[efficiencies.bf16]\noverlap = -0.5", "efficiencies.bf16.overlap = -0.5; must be in [0, 1]"),
        ("[efficiencies.bf16]\nspeed = 1", "efficiencies.bf16: unknown key 'speed' (known: bandwidth,"),
        ("[efficiencies.bf16]\n[efficiencies.bfloat16]", "efficiencies: [efficiencies.bfloat16] is bf16 again"),
    ],
)
def test_bad_efficiencies_are_named(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(f"{H100}\n[efficiencies]\n{table}\n")
    assert error_of(load_chip, path).startswith(message)


def test_every_problem_is_counted_and_missing_fields_come_first(tmp_path: Path) -> None:
    path = tmp_path / "chip.toml"
    path.write_text('name = "x"\npeaks = "dense"\nmemory_bytes = 80\n[peak_flops_per_s]\nbf16 = nan\n')
    assert error_of(load_chip, path) == (
        "missing required field(s): memory_bandwidth_bytes_per_s (and 2 more: memory_bytes, peak_flops_per_s.bf16)"
    )


@pytest.mark.parametrize(
    "content",
    ["a = " + "[" * 5000 + "]" * 5000, "a = " + "{b = " * 3000 + "1" + "}" * 3000, "a" + ".b" * 5000 + " = 1"],
)
def test_deeply_nested_toml_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(content)
    assert error_of(load_chip, path) == "nested more than 32 levels deep; a spec file needs a few"


def test_hardware_must_be_utf8_and_may_start_with_a_bom(tmp_path: Path) -> None:
    path = tmp_path / "chip.toml"
    path.write_bytes(b"\xef\xbb\xbf" + H100.encode())
    assert load_hardware(str(path)).memory_bytes == 81_559 * 2**20
    path.write_bytes(H100.encode().replace(b"NVIDIA", b"NV\xe9IDIA"))
    assert error_of(load_chip, path) == "not UTF-8 text (byte 0xe9 at offset 10, line 1); save it as UTF-8"


def test_every_hardware_preset_passes_the_units_checks() -> None:
    for name in list_hardware():
        hw = load_hardware(name)
        assert 1e9 < hw.memory_bytes < 1e12 and 1e11 < hw.memory_bandwidth_bytes_per_s < 1e14


def test_the_cli_prints_one_line_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "chip.toml"
    path.write_text(with_line(H100, "memory_bytes", "80"))
    result = run_cli(["roofline", "-m", "llama-2-7b", "-H", str(path)])
    assert result.exit_code == 2 and "memory_bytes = 80; looks like GB; give bytes (80e9)" in result.stderr
    assert "Traceback" not in result.output


# -- step model JSON ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"t_fixed_s": "0.001"}, 't_fixed_s = "0.001"; must be a number'),
        ({"t_fixed_s": -1}, "t_fixed_s = -1; must be a non-negative number"),
        ({"t_fixed_s": float("nan")}, "t_fixed_s = nan; must be a finite number"),
        ({"t_compute_s": 1e400}, "t_compute_s = inf; must be a finite number"),
        ({"t_weights_s": True}, "t_weights_s = true; must be a number"),
        ({"t_seq_s": None}, "t_seq_s = null; must be a number"),
        ({"num_experts": 8.5}, "num_experts = 8.5; must be a non-negative integer"),
        ({"prompts_folded": 1}, "prompts_folded = 1; must be true or false"),
        ({"t_sq_s": 1e-6}, "unknown key 't_sq_s' (known: t_fixed_s, t_weights_s,"),
    ],
)
def test_bad_step_model_values_are_named(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**TERMS, **change}).replace("Infinity", "1e400"))
    assert error_of(read_step_model, path).startswith(message)


def test_missing_step_model_terms_are_named_and_whole_floats_count(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"t_fixed_s": 0.001, "t_compute_s": 1e-5}))
    assert error_of(read_step_model, path) == "missing required field(s): t_weights_s, t_kv_token_s"
    path.write_text(json.dumps({**TERMS, "num_experts": 8.0, "experts_per_token": 2}))
    assert read_step_model(path).step_model.num_experts == 8


def test_predict_json_keeps_its_derived_values_and_a_saved_model_its_format(tmp_path: Path) -> None:
    """Stated rule: `predict --json`'s "model" carries derived values beside the terms, which are ignored; a saved
    model and a bare StepModel hold only known keys."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"predictions": [], "model": {**TERMS, "method": "roofline", "context_tokens": 300}}))
    travelling = read_step_model(path)
    assert travelling.context_tokens == 300 and travelling.step_model.t_weights_s == 0.01
    path.write_text(json.dumps({"predictions": [], "model": {**TERMS, "t_fixed_s": "x"}}))
    assert error_of(read_step_model, path) == 'model.t_fixed_s = "x"; must be a number'
    path.write_text(json.dumps({"format": "tokenroof step model v2", "step_model": TERMS}))
    assert error_of(read_step_model, path).startswith('format = "tokenroof step model v2"; expected')
    path.write_text(json.dumps({"format": "tokenroof step model", "step_model": TERMS, "notes": ""}))
    assert error_of(read_step_model, path).startswith("unknown key 'notes' (known: format, step_model,")


def test_deeply_nested_step_model_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"t_fixed_s": ' + "[" * 5000 + "]" * 5000 + "}")
    assert error_of(read_step_model, path) == "nested more than 32 levels deep; a spec file needs a few"


def test_the_file_schema_has_exactly_the_step_model_fields() -> None:
    assert list(StepModelFields.model_fields) == [f.name for f in fields(StepModel)]


# -- properties: whatever a field holds, the answer is a spec or one TokenroofError line ----------------
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=5,
)


@settings(max_examples=150, deadline=None, database=None)
@given(key=st.sampled_from([*LLAMA, "head_dim", "num_local_experts", "rope_parameters"]), value=JSON_VALUES)
def test_any_config_value_gives_a_spec_or_one_line(key: str, value: Any) -> None:
    try:
        model = model_from_config({**LLAMA, key: value}, "config.json")
    except TokenroofError as exc:
        assert "\n" not in str(exc)
        return
    assert model.head_dim > 0 and model.kv_dim > 0 and model.total_params > 0


@settings(max_examples=150, deadline=None, database=None)
@given(
    key=st.sampled_from(["memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops_per_s", "efficiencies", "x"]),
    value=JSON_VALUES,
)
def test_any_hardware_value_gives_a_spec_or_one_line(key: str, value: Any) -> None:
    data = {**tomllib.loads(H100), key: value}
    try:
        hw = hardware_from_dict(data, "chip.toml")
    except TokenroofError as exc:
        assert "\n" not in str(exc)
        return
    assert hw.memory_bytes >= 1e8 and all(1e8 <= v <= 1e18 for v in hw.peak_flops_per_s.values())


@settings(max_examples=150, deadline=None, database=None)
@given(key=st.sampled_from([f.name for f in fields(StepModel)]), value=JSON_VALUES)
def test_any_step_model_value_gives_a_model_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, key: str, value: Any
) -> None:
    path = tmp_path_factory.mktemp("sm") / "m.json"
    path.write_text(json.dumps({**TERMS, key: value}))
    try:
        sm = read_step_model(path).step_model
    except TokenroofError as exc:
        assert "\n" not in str(exc)
        return
    assert float(sm.step_time_s(8, 100)) > 0
