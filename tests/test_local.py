"""bench-local and calibrate: the sweep, its CSV, memory refusal, clear errors, and the calibrated hardware TOML."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.conftest import NEEDS_TORCH, ROOT, run_cli, run_json
from tests.schemas import validate
from tokenroof.errors import TokenroofError
from tokenroof.io.measurements import read_table
from tokenroof.measure.local.calibrate import Calibration, calibrate, quietest
from tokenroof.measure.local.device import check_fits, memory_needed_bytes, torch_dtype
from tokenroof.measure.local.local import LocalConfig, make_point, run_bench_local
from tokenroof.measure.local.microbench import Kernel, overheads
from tokenroof.specs import Precision, load_hardware, load_model
from tokenroof.specs.hardware import read_hardware_toml

if TYPE_CHECKING:
    import torch

pytestmark = NEEDS_TORCH


@pytest.fixture(autouse=True, scope="module")
def _torch() -> None:
    """torch, imported when this file's first test runs (NEEDS_TORCH)."""
    global torch
    import torch


TINY_SIZES = {"stream_bytes": 2**20, "gemv_bytes": 2**20, "kv_bytes": 2**20, "gemm_n": 64, "gemv_k": 64}


@pytest.fixture(scope="module")
def calibration() -> Calibration:
    """A calibration of this machine at tiny sizes (seconds, not minutes)."""
    return calibrate("cpu", ("fp32",), repeats=3, sizes=TINY_SIZES, passes=2)


@pytest.fixture(scope="module")
def calibrated(calibration: Calibration, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That calibration written as TOML."""
    path = tmp_path_factory.mktemp("cal") / "calibrated.toml"
    path.write_text(calibration.to_toml())
    return path


def test_calibrate_json_validates_against_its_schema(calibration: Calibration) -> None:
    validate("calibrate", {**calibration.to_dict(), "out": None})


def test_kernel_rates_come_from_the_quietest_pass_and_overheads_from_one_pass() -> None:
    kernel = Kernel("k", lambda: None, 1e9, passes=[[0.4, 0.5, 0.6], [0.2, 0.25, 0.9], [0.3, 0.3, 0.3]])
    assert kernel.time_s == pytest.approx(0.25) and kernel.rate == pytest.approx(4e9)
    assert kernel.pass_median_s() == pytest.approx(0.3) and kernel.pass_median_s(0) == pytest.approx(0.5)
    # the deep probe ran fastest in pass 1: both probes are read there, by hand
    # per layer (0.012 - 0.004) / 8 = 1 ms, per step 0.004 - 2 × 1 ms = 2 ms
    # (each probe's own fastest pass, 3 ms and 12 ms, would have said 1.125 ms and 0.75 ms)
    shallow = Kernel("2 layers", lambda: None, 1.0, passes=[[0.003], [0.004]])
    deep = Kernel("10 layers", lambda: None, 1.0, passes=[[0.020], [0.012]])
    step_s, layer_s = overheads(shallow, deep)
    assert layer_s == pytest.approx(0.001) and step_s == pytest.approx(0.002)


def test_calibrated_toml_loads_as_hardware_with_measured_efficiencies(calibrated: Path) -> None:
    hw = read_hardware_toml(calibrated)
    assert hw.peaks == "dense" and hw.memory_bandwidth_bytes_per_s > 1e8
    assert hw.peak_for("fp32") > 1e8
    eff = hw.efficiencies["fp32"]
    assert 0 < eff["bandwidth"] <= 1 and 0 < eff["kv_bandwidth"] <= 1 and 0 < eff["compute"] <= 1
    assert eff["overhead_s_per_layer"] >= 0 and eff["overhead_s"] >= 0
    assert "threads" in hw.measured and hw.source["tool"].startswith("tokenroof calibrate")
    assert hw.measured["timing"].startswith("2 passes x 3 interleaved rounds")


def test_bench_local_writes_a_csv_that_predict_reads(tiny_config: Path, tmp_path: Path, calibrated: Path) -> None:
    out = tmp_path / "tiny.csv"
    data = run_json(
        ["bench-local", "-m", str(tiny_config), "--batch", "1", "2", "4", "--context", "16", "--steps", "3",
         "--warmup", "1", "--device", "cpu", "--out", str(out), "--hardware", str(calibrated)]
    )  # fmt: skip
    validate("bench-local", data)
    points = data["points"]
    assert [p["batch"] for p in points] == [1, 2, 4]
    for p in points:
        assert p["tpot_ms_low"] <= p["tpot_ms"] <= p["tpot_ms_high"]
        assert p["throughput_tok_s"] == pytest.approx(p["batch"] * 1e3 / p["tpot_ms"])
        assert p["context_tokens"] == 16 + 1 + 1  # context + warm-up + (steps - 1) / 2
        assert p["achieved_bytes_per_s"] > 0 and p["predicted_tpot_ms"] > 0 and p["predicted_bound"]
    table = read_table([out])
    assert list(table.batch) == [1, 2, 4]
    assert any("tokenroof bench-local" in line for line in table.provenance)
    assert table.tpot_ms[0] == pytest.approx(points[0]["tpot_ms"], rel=1e-4)
    predicted = run_json(["predict", str(out), "--batch", "8"])
    assert predicted["predictions"][0]["tpot_ms"] > 0


def test_bench_local_table_and_plot(tiny_config: Path, tmp_path: Path, calibrated: Path) -> None:
    png = tmp_path / "local.png"
    result = run_cli(
        ["bench-local", "-m", str(tiny_config), "--batch", "1,2", "--context", "8", "--steps", "2", "--device", "cpu",
         "--out", str(tmp_path / "t.csv"), "--hardware", str(calibrated), "--plot", str(png)]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "TPOT ms" in result.stdout and "predicted" in result.stdout
    assert png.stat().st_size > 10_000


def test_an_interrupted_sweep_keeps_the_points_it_measured(tiny_config: Path, tmp_path: Path) -> None:
    out = tmp_path / "partial.csv"
    config = LocalConfig(str(tiny_config), [1, 2, 4], context=8, steps=2, warmup=0, device="cpu", out=out)

    def stop_after_second(point: object) -> None:
        if point.batch == 2:  # type: ignore[attr-defined]
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_bench_local(config, load_model(str(tiny_config)), on_point=stop_after_second)
    assert list(read_table([out]).batch) == [1, 2]


def test_memory_estimate_is_weights_plus_kv_plus_workspace_by_hand() -> None:
    spec = load_model("llama-2-7b")
    need = memory_needed_bytes(spec, Precision.create("bf16"), batch=8, max_len=1000, chunk=512)
    assert need["weights"] == spec.total_params * 2
    assert need["kv_cache"] == 2 * 32 * 4096 * 2 * 8 * 1000  # K and V, 32 layers, 4096 wide, 2 bytes, 8 × 1000 tokens
    assert need["workspace"] == 3 * 4.0 * 32 * 1000 * 512 + 2 * 4.0 * 8 * 32000 + 3 * 2.0 * 512 * 11008


def test_a_batch_that_does_not_fit_is_refused_before_allocating() -> None:
    spec = load_model("llama-2-7b")
    precision = Precision.create("bf16")
    with pytest.raises(TokenroofError) as info:
        check_fits(spec, precision, [1, 64, 256], 4096, 512, available=32 * 2**30, fraction=0.9)
    message = str(info.value)
    assert "batch 256 × context 4096" in message and "batches that do not fit: 64, 256" in message
    # by hand: 28.8 GiB budget − 12.55 GiB of bf16 weights − ~0.8 GiB workspace leaves 15.4 GiB;
    # each sequence's KV cache is 2 GiB
    assert "the largest batch that fits at this context is 7" in message
    with pytest.raises(TokenroofError, match="not even batch 1 fits"):
        check_fits(spec, precision, [1], 4096, 512, available=8 * 2**30, fraction=0.9)


def test_cli_refuses_a_model_larger_than_memory(tmp_path: Path) -> None:
    result = run_cli(
        ["bench-local", "-m", "llama-3-70b", "--batch", "1", "--device", "cpu", "--out", str(tmp_path / "x.csv")]
    )
    assert result.exit_code == 2
    assert "not even batch 1 fits" in result.output and "GiB" in result.output
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize(
    ("dtype", "message"),
    [("fp8", "dtype fp8 is not run by the local engine"), ("fp7", "unknown dtype 'fp7'; known:")],
)
def test_dtypes_the_engine_cannot_run_are_named(dtype: str, message: str) -> None:
    with pytest.raises(TokenroofError, match=message):
        torch_dtype(dtype, torch.device("cpu"))


def test_cuda_on_a_machine_without_one_is_a_clear_error(tiny_config: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = run_cli(["bench-local", "-m", str(tiny_config), "--batch", "1", "--device", "cuda"])
    assert result.exit_code == 2 and "sees no CUDA device" in result.output


def test_unsupported_model_family_is_refused(tmp_path: Path) -> None:
    result = run_cli(
        ["bench-local", "-m", "opt-1.3b", "--batch", "1", "--device", "cpu", "--out", str(tmp_path / "o.csv")]
    )
    assert result.exit_code == 2 and "not Llama-like" in result.output


def test_without_torch_the_message_says_how_to_install(tiny_config: Path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from tokenroof.cli import main\n"
        f"main(['bench-local', '-m', {str(tiny_config)!r}, '--batch', '1'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "needs PyTorch" in done.stderr and "pip install 'tokenroof[local]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_drift_between_passes_is_reported() -> None:
    from tokenroof.measure.local.calibrate import drift_warnings
    from tokenroof.measure.local.local import drift_warning

    steady, drifted = [[0.010, 0.011], [0.0105, 0.0102]], [[0.010, 0.010], [0.016, 0.015]]  # medians 10 / 15.5 ms
    assert drift_warning({1: steady, 4: steady}) == []
    [warning] = drift_warning({1: steady, 4: drifted})
    assert "at 1 of 2 batches (at batch 4 the slowest pass's median was 55% above" in warning
    assert drift_warning({1: [[0.01]], 4: [[0.02]]}) == []  # one pass: nothing to compare
    kernels = [Kernel("gemv_bf16", lambda: None, 1.0, passes=drifted), Kernel("copy", lambda: None, 1.0, passes=steady)]
    [warning] = drift_warnings(kernels)
    assert "by 55% for gemv_bf16;" in warning and "copy" not in warning


def test_quietest_merges_calibrations_taken_at_different_times() -> None:
    def cal(gemv: float, decode: float, overhead: tuple[float, float], overlap: float) -> Calibration:
        return Calibration(
            "m", "cpu", 2, "t", 1e10, 20e9, 21e9, {"bf16": gemv}, {"bf16": 1e12}, {"bf16": decode},
            {"bf16": 15e9}, {"bf16": overhead}, {"bf16": overlap}, {"bf16": 64}, timing="3 passes",
        )  # fmt: skip

    slow, quiet = cal(12e9, 0.5e12, (0.004, 0.0005), 0.2), cal(6e9, 1.3e12, (0.002, 0.00025), 0.8)
    merged = quietest([slow, quiet])
    assert merged.gemv_bandwidth_bytes_per_s["bf16"] == 12e9  # every rate at its best
    assert merged.decode_gemm_flops_per_s["bf16"] == 1.3e12
    # overheads and overlap from the calibration whose decode GEMM ran fastest, together
    assert merged.overhead_s["bf16"] == (0.002, 0.00025) and merged.overlap["bf16"] == 0.8
    assert merged.timing == "quietest of 2 calibrations (3 passes)"
    assert quietest([slow]).decode_gemm_flops_per_s == slow.decode_gemm_flops_per_s


def test_calibrate_cli_writes_toml_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tokenroof.measure.local.calibrate as cal

    monkeypatch.setattr(cal, "CPU_SIZES", TINY_SIZES)
    out = tmp_path / "mine.toml"
    data = run_json(
        ["calibrate", "--device", "cpu", "--dtype", "fp32", "--repeats", "3", "--passes", "2", "--out", str(out)]
    )
    assert data["out"] == str(out) and data["threads"] >= 1
    assert data["memory_bandwidth_bytes_per_s"] == max(
        data["copy_bandwidth_bytes_per_s"],
        data["read_bandwidth_bytes_per_s"],
        data["gemv_bandwidth_bytes_per_s"]["fp32"],
    )
    assert load_hardware(str(out)).efficiencies["fp32"]["bandwidth"] == pytest.approx(
        data["efficiencies"]["fp32"]["bandwidth"], rel=1e-3
    )
    bad = run_cli(["calibrate", "--device", "cpu", "--dtype", "int4", "--out", str(tmp_path / "b.toml")])
    assert bad.exit_code == 2 and "not run by the local engine" in bad.output


def test_rounds_pool_every_pass_and_keep_one_row_per_batch(tiny_config: Path, tmp_path: Path) -> None:
    out = tmp_path / "rounds.csv"
    seen: list[tuple[int, int]] = []
    config = LocalConfig(str(tiny_config), [2, 1], context=8, steps=3, warmup=0, rounds=2, device="cpu", out=out)
    result = run_bench_local(config, load_model(str(tiny_config)), on_point=lambda p: seen.append((p.batch, p.steps)))
    assert seen == [(2, 3), (1, 3), (2, 6), (1, 6)]  # round-robin; each report pools the passes so far
    assert [p.batch for p in result.points] == [1, 2] and all(p.steps == 6 for p in result.points)
    table = read_table([out])
    assert list(table.batch) == [1, 2]
    assert any("the lowest of 2 round-robin passes" in line for line in table.provenance)


def test_tpot_is_the_least_disturbed_pass_and_the_spread_pools_every_step() -> None:
    config = LocalConfig("m", [4], context=100, steps=3, warmup=2, rounds=3)
    slow_pass, quiet_pass, spiky_pass = [0.020, 0.021, 0.022], [0.010, 0.011, 0.012], [0.013, 0.050, 0.012]
    point = make_point(config, 4, [0.3, 0.1, 0.2], [slow_pass, quiet_pass, spiky_pass])
    assert point.tpot_ms == pytest.approx(11.0)  # the quiet pass's median; the spike is outvoted within its pass
    assert point.tpot_ms_min == pytest.approx(10.0) and point.steps == 9
    assert point.tpot_ms_p90 == pytest.approx(np.percentile(slow_pass + quiet_pass + spiky_pass, 90) * 1e3)
    assert point.ttft_ms == pytest.approx(200.0) and point.context_tokens == 103.0


def test_measuring_leaves_denormals_alone(calibration: Calibration) -> None:
    """calibrate and bench-local flush denormals while they time, and only then (the setting is process-wide)."""
    import numpy as np

    assert np.float64(5e-324) * 1.0 > 0


def test_a_curve_the_machine_cannot_produce_is_named() -> None:
    """Issue 27: bench-local printed 251% of a hardware file's bandwidth without a word."""
    from tokenroof.measure.local.local import LocalPoint, implausible

    def point(batch: int, tpot_ms: float, fraction: float) -> LocalPoint:
        return LocalPoint(batch, 128, tpot_ms, tpot_ms, tpot_ms, tpot_ms, 1.0, 8, 1e9, 1e9, bandwidth_fraction=fraction)

    hardware = load_hardware("h100-sxm")
    fine = [point(1, 10.0, 0.5), point(4, 10.5, 0.6), point(16, 12.0, 0.7)]
    assert implausible(fine, hardware) == []
    too_fast = [point(1, 10.0, 2.51), point(4, 10.5, 0.9)]
    (warning,) = implausible(too_fast, hardware)
    assert "batch 1 moved 251% of h100-sxm's peak bandwidth" in warning and "recalibrate" in warning
    falling = [point(1, 10.0, 0.5), point(4, 50.0, 0.5)]  # 100 tok/s, then 80
    (warning,) = implausible(falling, hardware)
    assert warning.startswith("throughput falls from 100 tok/s at batch 1 to 80 at batch 4")
    assert implausible(too_fast, None)[:1] == []  # no hardware file: no fraction to judge


# -- engine modes (issue 26): eager, compile, graph ---------------------------------------------------------------
def test_graph_mode_off_cuda_is_refused_in_one_line(tiny_config: Path, tmp_path: Path) -> None:
    """A CUDA graph needs CUDA: on a CPU `--mode graph` is one line naming the modes that run there, before anything
    is measured; an unknown mode and a compiled or captured mode without a warm-up step are refused too."""
    base = ["bench-local", "-m", str(tiny_config), "--batch", "1", "--context", "8", "--device", "cpu"]
    result = run_cli([*base, "--mode", "graph", "--out", str(tmp_path / "g.csv")])
    assert result.exit_code != 0 and "Traceback" not in result.output
    said = " ".join(result.stderr.split())
    assert "--mode graph replays CUDA graphs, which need a CUDA device (this run is on cpu): use eager or" in said
    assert not (tmp_path / "g.csv").exists()
    result = run_cli([*base, "--mode", "fused"])
    assert result.exit_code != 0 and "--mode 'fused': expected eager, compile, graph" in " ".join(result.stderr.split())
    result = run_cli([*base, "--mode", "compile", "--warmup", "0"])
    assert result.exit_code != 0 and "--warmup compile compiles or captures" in " ".join(result.stderr.split())


def test_the_mode_is_stated_in_the_csv_the_json_and_the_table(tiny_config: Path, tmp_path: Path) -> None:
    """On a CPU the default is eager; the CSV's provenance, the JSON and the table say which mode measured."""
    out = tmp_path / "eager.csv"
    args = ["bench-local", "-m", str(tiny_config), "--batch", "1,2", "--context", "8", "--steps", "2"]
    args += ["--device", "cpu"]
    data = run_json([*args, "--out", str(out)])
    validate("bench-local", data)
    assert data["mode"] == "eager"
    assert any(line.startswith("engine mode eager (each kernel launched") for line in read_table([out]).provenance)
    result = run_cli([*args, "--out", str(tmp_path / "t.csv")])
    assert result.exit_code == 0 and "eager mode; context 8 tokens" in result.stdout


class RecordedGraph:
    """A CPU stand-in for GraphCapture: records the captured body and runs it again on each replay."""

    def __init__(self) -> None:
        self.body: object = None
        self.warmups = 0

    def capture(self, body: object, warmups: int = 3) -> None:
        self.warmups = warmups
        for _ in range(warmups + 1):  # warm-ups, then the capture itself runs the body once
            body()  # type: ignore[operator]
        self.body = body

    def replay(self) -> None:
        self.body()  # type: ignore[operator]


def test_a_captured_step_decodes_what_eager_steps_at_its_position_decode(tiny_config: Path) -> None:
    """The graph's step refills its own input with its argmax, so each replay decodes the token the last chose, and
    every replay is a step at the captured position: replays give the tokens eager steps at that position give."""
    from tokenroof.measure.local.local import decode_steps
    from tokenroof.measure.local.torch_engine import CapturedStep, DecoderLM

    spec = load_model(str(tiny_config))
    engine = DecoderLM(spec, torch.float32, "cpu")
    engine.init_random(0)
    engine.allocate_cache(3, 32)
    prompt = torch.randint(0, spec.vocab_size, (3, 12), generator=torch.Generator().manual_seed(1))
    first = engine.prefill(prompt).argmax(-1, keepdim=True)
    captured = CapturedStep(engine, first, 12, RecordedGraph())
    replayed = []
    for _ in range(3):
        captured.replay()
        replayed.append(captured.tokens.clone())
    engine.allocate_cache(3, 32)
    engine.prefill(prompt)
    tokens, eager = first, []
    for _ in range(4 + 3):  # the capture's three warm-ups and the capture itself, then the three replays
        tokens = engine.forward(tokens, 12).argmax(-1, keepdim=True)
        eager.append(tokens)
    assert all(torch.equal(a, b) for a, b in zip(replayed, eager[4:], strict=True))
    assert captured.tokens.shape == (3, 1) and captured.logits.shape == (3, spec.vocab_size)
    with pytest.raises(TokenroofError, match="KV cache too small"):  # the capture runs the engine's own checks
        CapturedStep(engine, first, 32, RecordedGraph())  # a 32-token cache holds positions 0..31
    assert callable(decode_steps(engine, "eager", first, 12))


@pytest.mark.slow  # torch.compile's first call compiles (about 10-25 s on 2 cores even for the tiny model)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own imports (torch.jit.script_method)
def test_compile_mode_decodes_as_eager_and_bench_local_times_it(tiny_config: Path, tmp_path: Path) -> None:
    """torch.compile's step gives eager's logits at every batch and position (one compilation for batch 1, one for
    the rest: the batch and position are dynamic), and bench-local measures in that mode, saying so."""
    from tokenroof.measure.local.torch_engine import DecoderLM

    spec = load_model(str(tiny_config))
    engine = DecoderLM(spec, torch.float32, "cpu")
    engine.init_random(0)
    compiled = engine.compiled()
    assert engine.compiled() is compiled  # compiled once, kept
    for batch in (1, 4, 6):
        engine.allocate_cache(batch, 32)
        tokens = torch.randint(0, spec.vocab_size, (batch, 1), generator=torch.Generator().manual_seed(batch))
        for position in (5, 6, 9):
            want = engine.forward(tokens, position)
            got = compiled(tokens, position)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    out = tmp_path / "compiled.csv"
    args = ["bench-local", "-m", str(tiny_config), "--batch", "1,2", "--context", "8", "--steps", "2", "--warmup", "1"]
    data = run_json([*args, "--device", "cpu", "--mode", "compile", "--out", str(out)])
    validate("bench-local", data)
    assert data["mode"] == "compile" and [p["batch"] for p in data["points"]] == [1, 2]
    assert all(p["tpot_ms"] > 0 and p["context_tokens"] == 8 + 1 + 0.5 for p in data["points"])
    assert any(line.startswith("engine mode compile") for line in read_table([out]).provenance)
