"""The bill's energy side: NVML's energy counter read around bench-local's timed steps, and the TDP × utilization
model when no meter is there (issue 32, item 4)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from tokenroof.errors import TokenroofError
from tokenroof.measure.local.local import LocalConfig, make_point
from tokenroof.measure.local.power import energy_meter


class FakeNvml(types.ModuleType):
    """pynvml as a GPU answers it: the energy counter (mJ) advances by `step_mj` at every read."""

    def __init__(self, step_mj: float = 0.0, supported: bool = True) -> None:
        super().__init__("pynvml")
        self.counter_mj, self.step_mj, self.supported = 1_000_000.0, step_mj, supported

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: str) -> float:
        if not self.supported:
            raise RuntimeError("NVMLError_NotSupported")
        self.counter_mj += self.step_mj
        return self.counter_mj


class Device:
    def __init__(self, kind: str, index: int | None = 0) -> None:
        self.type, self.index = kind, index


def test_the_energy_counter_is_read_in_joules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(step_mj=2500.0))
    meter, why = energy_meter(Device("cuda"))
    assert why is None and meter is not None
    before = meter.read_j()
    assert meter.read_j() - before == pytest.approx(2.5)  # 2,500 mJ between two reads
    assert "NVML's total-energy counter of NVIDIA H100 80GB HBM3" in meter.source


def test_no_meter_is_said_and_a_cpu_needs_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert energy_meter(Device("cpu")) == (None, None)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(supported=False))
    meter, why = energy_meter(Device("cuda"))
    assert meter is None and why is not None and "could not read the GPU's energy counter" in why
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import fails
    meter, why = energy_meter(Device("cuda"))
    assert meter is None and why is not None and "pip install 'tokenroof[energy]'" in why


def test_a_points_energy_by_hand() -> None:
    """Batch 8, two passes of 10 steps of 20 ms: 160 tokens in 0.4 s; 120 J and 160 J drawn: 280 J → 700 W,
    1.75 J a token."""
    config = LocalConfig("llama-2-7b", batches=[8], steps=10)
    rounds: list[Any] = [[0.02] * 10, [0.02] * 10]
    point = make_point(config, 8, [0.1, 0.1], rounds, [120.0, 160.0])
    assert point.power_watts == pytest.approx(700.0)
    assert point.energy_j_per_token == pytest.approx(1.75)
    unmetered = make_point(config, 8, [0.1, 0.1], rounds)
    assert unmetered.power_watts is None and unmetered.energy_j_per_token is None


def test_the_price_split_and_the_power_model_by_hand() -> None:
    """$2.50 an hour on 2 GPUs: 1/720 $ a second. A 36 ms step is 5e-5 $; with prompts adding a quarter of it,
    1.25e-5 $ over 300 prompt tokens (0.0417 $/M) and 3.75e-5 $ over 32 output tokens (1.17 $/M).
    Power: 700 W TDP, 70 W idle, memory kernels at 0.72: busy 0.9 computing 0.5 → 70 + 630·0.9·0.86 = 557.6 W."""
    from tokenroof.model.cost import PowerModel, Price, usd_per_million_tokens

    split = Price(2.5, "given").split(2, 0.036, 0.25, 32, 300)
    assert split["usd_per_million_input_tokens"] == pytest.approx(1.25e-5 / 300 * 1e6)
    assert split["usd_per_million_output_tokens"] == pytest.approx(3.75e-5 / 32 * 1e6)
    assert usd_per_million_tokens(2.5, 1, 1000.0) == pytest.approx(2.5 / 3600 / 1000 * 1e6)
    power = PowerModel(700.0, 70.0, "test", 0.72)
    assert power.watts(0.9, 0.5) == pytest.approx(70 + 630 * 0.9 * 0.86)
    assert power.watts(0.0) == 70.0 and power.watts(1.0, 1.0) == 700.0 and power.watts(2.0, 5.0) == 700.0
    with pytest.raises(TokenroofError, match="gpu_cost_per_hour must be a positive number"):
        Price(0.0, "given")


def test_steps_watts_is_step_watts_over_arrays_term_for_term() -> None:
    """A long simulation's bill prices every step at once (steps_watts); it must be step_watts for each: a step of no
    time, steps past the fixed overhead, compute-bound prompts, an eager engine whose launches outlast the GPU's work,
    folded prompts, MoE. By hand for one: fixed 1 of a 16 s step → busy 15/16; compute (3 + 5)·0.25 + 0.125·(40 +
    64/2) = 11 s → 11/16; 100 + 600·0.9375·(0.72 + 0.28·0.6875) = 100 + 600·0.9375·0.9125 = 613.28125 W."""
    import numpy as np

    from tokenroof.model.cost import PowerModel, pool_joules, step_watts, steps_watts
    from tokenroof.model.stepmodel import StepModel

    power = PowerModel(700.0, 100.0, "test", 0.72)
    hand = StepModel(1.0, 2.0, 0.25, 0.0625, t_seq_s=0.5, t_attn_token_s=0.125)
    one = [np.array([v]) for v in (16.0, 3.0, 40.0, 5.0, 64.0)]
    assert (
        steps_watts(power, hand, *one).tolist()
        == pytest.approx([613.28125])
        == [step_watts(power, hand, 16, 3, 40, 5, 64)]
    )
    models = [
        hand,
        StepModel(1e-3, 5e-3, 2e-5, 3e-8, t_seq_s=7e-6, t_attn_token_s=1e-9, overlap=0.4),
        StepModel(1e-3, 2e-3, 1e-5, 3e-8, t_seq_s=1e-6, t_expert_s=4e-4, num_experts=8, experts_per_token=2),
        StepModel(2e-3, 4e-3, 3e-5, 1e-8, t_seq_s=2e-6, t_attn_token_s=2e-9, prompts_folded=True),
        StepModel(1e-3, 2e-3, 1e-5, 3e-8, t_seq_s=1e-6, t_host_s=9e-3),  # eager: host-bound at small batches
    ]
    batch = np.array([1.0, 4.0, 32.0, 7.0, 256.0, 0.0, 3.0])
    context = np.array([100.0, 3000.0, 40000.0, 0.0, 2e6, 0.0, 900.0])
    prefill = np.array([0.0, 512.0, 0.0, 2048.0, 128.0, 4096.0, 0.0])
    square = np.array([0.0, 512.0**2, 0.0, 2 * 1024.0**2, 128.0**2, 4096.0**2, 0.0])
    for model in models:
        duration = np.append(model.steps_s(batch, context, prefill, square)[:-1], 0.0)  # the last takes no time
        got = steps_watts(power, model, duration, batch, context, prefill, square)
        want = [step_watts(power, model, *args) for args in zip(duration, batch, context, prefill, square, strict=True)]
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        steps = {"duration_s": duration, "batch": batch, "context_tokens": context, "prefill_tokens": prefill}
        steps["prefill_sq_tokens"] = square
        idle_s = max(10.0 - duration.sum(), 0.0)  # 5 s on 2 replicas; the hand model's steps take longer
        assert pool_joules(model, steps, 5.0, 2, 4, power) == pytest.approx(4 * (np.dot(want, duration) + 100 * idle_s))


def test_roofline_simulate_and_plan_carry_the_bill() -> None:
    """llama-3.1-8b on an H100 (700 W TDP in its file) at $2.50 an hour: at batch 1 a 7 ms step makes 142 tokens a
    second, $4.9 a million; every command's JSON names the price and the power model it used."""
    import json

    from typer.testing import CliRunner

    from tests.schemas import validate
    from tokenroof.cli import app

    runner = CliRunner()
    deployment = ["-m", "llama-3.1-8b", "-H", "h100-sxm", "--gpu-cost-per-hour", "2.5"]
    roof = json.loads(runner.invoke(app, ["roofline", *deployment, "--batch", "1,64", "--json"]).output)
    validate("roofline", roof)
    one = roof["points"][0]
    assert one["usd_per_million_output_tokens"] == pytest.approx(2.5 / 3600 / one["throughput_tok_s"] * 1e6)
    assert roof["cost"]["price"]["source"] == "given" and roof["cost"]["power"]["tdp_watts"] == 700.0
    assert 70 < one["power_watts"] < roof["points"][1]["power_watts"] <= 700  # busier at batch 64
    sim = runner.invoke(app, ["simulate", *deployment, "--rate", "2", "--num-requests", "300", "--json"])
    out = json.loads(sim.output)
    validate("simulate", out)
    cost = out["cost"]
    assert cost["gpus"] == 1 and cost["usd_per_million_output_tokens"] > cost["usd_per_million_input_tokens"] > 0
    # the whole bill is the output's plus the prompts': 2.5 $/h over the window
    prompts_per_s = out["request_throughput_req_s"] * 1000
    spent = (
        cost["usd_per_million_output_tokens"] * out["throughput_tok_s"]
        + cost["usd_per_million_input_tokens"] * prompts_per_s
    )
    assert spent / 1e6 == pytest.approx(2.5 / 3600, rel=0.05)
    plain = json.loads(runner.invoke(app, ["roofline", "-m", "llama-3.1-8b", "-H", "a10g", "--json"]).output)
    assert plain["cost"] == {"price": None, "power": None} and plain["points"][0]["power_watts"] is None


@pytest.mark.heavy
def test_plan_states_the_answers_energy() -> None:
    """plan's answer carries its power and energy per output token (one run of the chosen replicas), with the power
    model's source; on hardware without a TDP, null."""
    import json

    from typer.testing import CliRunner

    from tests.schemas import validate
    from tokenroof.cli import app

    runner = CliRunner()
    args = ["plan", "-m", "llama-3.1-8b", "--rate", "5", "--num-requests", "600", "--seeds", "1", "--workers", "1"]
    result = runner.invoke(app, [*args, "-H", "h100-sxm", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    validate("plan", data)
    energy = data["energy"]
    assert 0 < energy["energy_j_per_output_token"] < 5 and 70 <= energy["power_watts_mean"] <= 700 * data["gpus"]
    assert "TDP" in energy["power"]["source"]


# -- the server's boards, read by bench: dcgm-exporter's counters (the emulator exports them from its power model)
DCGM_TEXT = """# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3"} 1500000
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3"} 2500000
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3"} 410.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3"} 389.5
"""


def test_dcgm_meters_by_hand() -> None:
    """Two boards: 1,500 and 2,500 J since boot, 410.5 and 389.5 W now. Over a window whose new counter values 2 s
    apart rose 800 J a board the mean is 400 W a board, 800 W in all; a board instance repeated under one UUID (MIG)
    counts once; a board whose series appears mid-window adds nothing of its energy since boot."""
    from tokenroof.measure.http.scrape import parse_metrics, power_in, power_reading

    found = parse_metrics(DCGM_TEXT)
    assert found is not None and power_reading(found) == {"0|GPU-a": (1500.0, 410.5), "1|GPU-b": (2500.0, 389.5)}
    mig = DCGM_TEXT + 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",GPU_I_ID="1"} 410.5\n'
    assert power_reading(parse_metrics(mig) or {}) == power_reading(found)
    # --power-gpus: the server's boards among those the exporter lists, by index or by UUID
    assert power_reading(found, frozenset({"1"})) == {"1|GPU-b": (2500.0, 389.5)}
    assert power_reading(found, frozenset({"GPU-a", "7"})) == {"0|GPU-a": (1500.0, 410.5)}
    assert power_reading(found, frozenset({"7"})) is None
    # a UUID's start names its board, as CUDA_VISIBLE_DEVICES takes one ('GPU-' and at least four more characters)
    from tokenroof.measure.http.scrape import names_board, unlisted

    assert names_board("GPU-5f3e", "0|GPU-5f3e9a1b") and names_board("GPU-5f3e9a1b", "0|GPU-5f3e9a1b")
    assert not names_board("GPU-5f3", "0|GPU-5f3e9a1b") and not names_board("GPU-5f3f", "0|GPU-5f3e9a1b")
    assert not names_board("", "|GPU-a") and names_board("0", "0|GPU-a") and not names_board("0", "10|GPU-a")
    assert unlisted(found, frozenset({"1", "GPU-x", "9"})) == ("9", "GPU-x") and unlisted(found, None) == ()

    def two(a: float, b: float) -> dict[str, tuple[float | None, float | None]]:
        return {"0|GPU-a": (a, 400.0), "1|GPU-b": (b, 400.0)}

    readings = [(0.25, two(1000, 2000)), (0.5, two(1200, 2200)), (1.5, two(1600, 2600)), (2.5, two(2000, 3000))]
    power, why = power_in(readings, 0.0, 3.0, "http://h:9400/metrics")
    assert why is None and power is not None
    assert power["watts_mean"] == pytest.approx(800.0) and power["gpus"] == 2
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in power["source"] and "http://h:9400/metrics" in power["source"]
    assert "2 GPUs: GPU 0 (GPU-a), GPU 1 (GPU-b)" in power["source"]
    # board b appears at 1.5 s with 5 MJ since boot: one new value of its own in the window, too few to time, so the
    # gauges answer for both (400 + 400 W), never 5 MJ over a second
    late = [(0.5, {"0|GPU-a": (1200.0, 400.0)}), (1.5, two(1600, 5e6)), (2.5, two(2000, 5e6 + 400))]
    power, _ = power_in(late, 0.0, 3.0, "u")
    assert power is not None and power["watts_mean"] == pytest.approx(800.0)
    assert "DCGM_FI_DEV_POWER_USAGE" in power["source"]


def test_a_counter_refreshed_every_collect_interval_is_timed_from_its_new_values() -> None:
    """dcgm-exporter refreshes its counter every collect interval (30 s unless told): scraped every 0.1 s at a steady
    800 W with a 1 s interval, the mean over any window is 800 W (timed between new values, not scrapes); with the
    30 s default a 20 s window sees no new value and the power gauges answer, saying why; a counter that goes back
    (a GPU reset) starts the count again after it."""
    from tokenroof.measure.http.scrape import power_in

    def stair(interval: float) -> list[tuple[float, dict[str, tuple[float | None, float | None]]]]:
        return [(k / 10, {"GPU-a": (800.0 * interval * (k // (10 * interval)), 800.0)}) for k in range(700)]

    for w0, w1 in ((5.0, 25.0), (25.3, 45.7), (2.05, 61.95)):
        power, why = power_in(stair(1.0), w0, w1, "u")
        assert why is None and power is not None and power["watts_mean"] == pytest.approx(800.0, rel=1e-9)
    power, why = power_in(stair(30.0), 5.0, 25.0, "u")
    assert power is not None and power["watts_mean"] == pytest.approx(800.0)
    assert "DCGM_FI_DEV_POWER_USAGE" in power["source"] and "-c 1000" in power["source"]
    flat = [(k / 10, {"GPU-a": (100.0, None)}) for k in range(50)]
    power, why = power_in(flat, 0.0, 5.0, "u")
    assert power is None and why is not None and "did not move" in why
    reset = [(0.5, {"GPU-a": (900.0, 0.0)}), (1.0, {"GPU-a": (10.0, 0.0)}), (2.0, {"GPU-a": (410.0, 0.0)})]
    power, _ = power_in(reset, 0.0, 3.0, "u")
    assert power is not None and power["watts_mean"] == pytest.approx(400.0)
    assert power_in([], 0.0, 1.0, "u")[0] is None


def test_the_emulators_boards_idle_when_nothing_runs() -> None:
    """After its last step an engine waiting for requests draws idle power on its gauge, as its counter does."""
    import asyncio

    from tokenroof.model.cost import EnergyCounter, PowerModel
    from tokenroof.model.stepmodel import StepModel
    from tokenroof.serving.engine.core import BatchScheduler, Sequence
    from tokenroof.serving.engine.realtime import RealtimeEngine

    sm = StepModel(t_fixed_s=1e-3, t_weights_s=4e-3, t_compute_s=1e-4, t_kv_token_s=0.0)

    async def main() -> tuple[float, float]:
        engine = RealtimeEngine(BatchScheduler(sm, 8), lambda *_: None)
        engine.meter = EnergyCounter(PowerModel(700.0, 100.0, "given"), 1, asyncio.get_running_loop().time())
        task = asyncio.create_task(engine.run())
        engine.submit(Sequence("a", 4, 4, asyncio.get_running_loop().time()))
        await asyncio.sleep(0.01)
        busy = engine.meter.watts
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return busy, engine.meter.watts

    busy, idle = asyncio.run(main())
    assert busy > 100.0 and idle == 100.0


@pytest.mark.heavy
def test_bench_reads_the_boards_energy_the_emulator_meters_and_simulate_agrees(tmp_path: Any) -> None:
    """The emulator's replica on two boards of 700 W TDP (idle 100 W) exports DCGM's counters from the power model;
    bench reads them back over its window (from the server's /metrics, and from --power-metrics pointed at it), and
    simulate's bill on bench's own requests predicts the mean power and the energy per output token within 2%."""
    import asyncio

    from tests.schemas import validate_bench_point
    from tokenroof.measure.http.run import BenchConfig, run_bench
    from tokenroof.model.cost import PowerModel
    from tokenroof.model.stepmodel import StepModel
    from tokenroof.serving.emulate.server import Emulator, start
    from tokenroof.serving.simulate import Trace, simulate

    power = PowerModel(700.0, 100.0, "given")
    sm = StepModel(t_fixed_s=4e-3, t_weights_s=16e-3, t_compute_s=1e-4, t_kv_token_s=0.0)

    async def main() -> list[dict[str, Any]]:
        runner, url = await start(Emulator(sm, max_num_seqs=8, power=power, tp=2))
        try:
            common = {"concurrencies": [4], "input_len": 32, "output_len": 16, "requests_per_point": 24}
            own = await run_bench(BenchConfig(url=url, out_dir=tmp_path / "own", **common))
            beside = await run_bench(BenchConfig(url=url, out_dir=tmp_path / "dcgm", power_metrics_url=url, **common))
            return [*own, *beside]
        finally:
            await runner.cleanup()

    own, beside = asyncio.run(main())
    for point, folder in ((own, "own"), (beside, "dcgm")):
        validate_bench_point(point)
        measured = point["power"]
        assert measured is not None and measured["gpus"] == 2, point["remarks"]
        assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in measured["source"]  # the counters, not the gauges
        predicted = simulate(sm, Trace.read(tmp_path / folder / "requests.jsonl"), 8).bill(sm, 2, None, power)
        assert measured["watts_mean"] == pytest.approx(predicted["power_watts_mean"], rel=0.02)
        per_token = predicted["energy_j_per_output_token"]
        assert measured["energy_j_per_output_token"] == pytest.approx(per_token, rel=0.03)
    # busy 16 of a 20.4 ms step at batch 4, its tensor cores 2% of it: each board well above idle, below the TDP
    assert 2 * 100 < own["power"]["watts_mean"] < 2 * 700
    from tests.conftest import rendered
    from tokenroof.cli import render

    text = rendered(render.bench, {"out": str(tmp_path / "own"), "points": [own], "slo": None})
    assert "J/token" in text and "power: measured: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in text


def test_a_power_endpoint_without_meters_is_a_remark_not_a_failure(tmp_path: Any) -> None:
    """--power-metrics at an endpoint with no DCGM series: the point is measured, its power null, and a remark says
    why; so does --power-gpus without --power-metrics at a server whose /metrics meters no board. A --power-metrics
    that is not an http(s) address is refused before anything runs."""
    import asyncio

    from tokenroof.measure.http.run import BenchConfig, run_bench
    from tokenroof.model.stepmodel import StepModel
    from tokenroof.serving.emulate.server import Emulator, start

    sm = StepModel(t_fixed_s=8e-3, t_weights_s=12e-3, t_compute_s=1e-4, t_kv_token_s=0.0)

    async def main() -> list[dict[str, Any]]:
        runner, url = await start(Emulator(sm, max_num_seqs=8))
        try:
            config = BenchConfig(url=url, concurrencies=[2], input_len=8, output_len=8, requests_per_point=8)
            config.out_dir, config.power_metrics_url = tmp_path, url
            points = await run_bench(config)
            config = BenchConfig(url=url, concurrencies=[2], input_len=8, output_len=8, requests_per_point=8)
            config.out_dir, config.power_gpus = tmp_path / "gpus", ("0",)
            return points + await run_bench(config)
        finally:
            await runner.cleanup()

    point, named = asyncio.run(main())
    assert point["power"] is None and (not point["invalid"] or "client-bound" in point["invalid"])  # a loaded machine
    assert any("no power reading" in r and "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in r for r in point["remarks"])
    assert named["power"] is None
    assert any(
        r.startswith("no power reading: ") and "the boards --power-gpus names are not metered there" in r
        for r in (named["remarks"])
    )
    from tests.conftest import run_cli

    result = run_cli(["bench", "http://127.0.0.1:9", "--concurrency", "1", "--power-metrics", "localhost:9400"])
    assert result.exit_code == 2 and "--power-metrics localhost:9400: give dcgm-exporter's address as http://" in (
        " ".join(result.stderr.split())
    )


@pytest.mark.heavy
def test_power_gpus_counts_only_the_servers_boards_and_names_the_ones_listed(tmp_path: Any) -> None:
    """dcgm-exporter lists every board of its host: `--power-gpus 1` counts board 1 alone (half of the emulator's two
    equal boards); a name no board has leaves the point's power null, and the remark lists the boards there are; a
    list that matches one board and not another counts the one and says which name matched nothing."""
    import asyncio

    from tokenroof.measure.http.run import BenchConfig, run_bench
    from tokenroof.model.cost import PowerModel
    from tokenroof.model.stepmodel import StepModel
    from tokenroof.serving.emulate.server import Emulator, start

    sm = StepModel(t_fixed_s=4e-3, t_weights_s=16e-3, t_compute_s=1e-4, t_kv_token_s=0.0)

    async def main() -> list[dict[str, Any]]:
        runner, url = await start(Emulator(sm, max_num_seqs=8, power=PowerModel(700.0, 100.0, "given"), tp=2))
        try:
            common = {"url": url, "concurrencies": [2], "input_len": 8, "output_len": 8, "requests_per_point": 8}
            points = []
            runs = [("all", None), ("one", ("1", "GPU-x")), ("none", ("GPU-x",)), ("own", ("GPU-x",))]
            runs.append(("ownpart", ("0", "GPU-y")))
            for name, gpus in runs:
                meters = None if name.startswith("own") else url  # the server's /metrics, which carries the boards
                config = BenchConfig(out_dir=tmp_path / name, power_metrics_url=meters, power_gpus=gpus, **common)
                points.extend(await run_bench(config))
            return points
        finally:
            await runner.cleanup()

    every, one, none, own, ownpart = asyncio.run(main())
    assert every["power"]["gpus"] == 2 and one["power"]["gpus"] == 1 and ownpart["power"]["gpus"] == 1
    for point, name in ((one, "GPU-x"), (ownpart, "GPU-y")):
        assert any(r.startswith(f"--power-gpus names {name}, which no board at ") for r in point["remarks"]), point
    assert not any("--power-gpus" in r for r in every["remarks"])
    assert one["power"]["watts_mean"] == pytest.approx(every["power"]["watts_mean"] / 2, rel=0.05)
    assert "1 GPU: GPU 1" in one["power"]["source"]
    for point in (none, own):
        assert point["power"] is None and (
            not point["invalid"] or "client-bound" in point["invalid"]
        )  # a loaded machine
        assert any("--power-gpus names (GPU-x)" in r and "GPU 0, GPU 1" in r for r in point["remarks"]), point


def test_power_gpus_on_the_command_line_is_a_list_of_names() -> None:
    from tests.conftest import run_cli

    result = run_cli(["bench", "http://127.0.0.1:9", "--concurrency", "1", "--power-gpus", "0,,1"])
    assert result.exit_code != 0 and "--power-gpus: give GPU indices or UUIDs separated by commas" in result.output


def test_the_emulators_meter_bills_a_prefill_step_of_its_own_by_its_new_sequences() -> None:
    """vLLM V0's scheduling: a prefill step runs the new prompts while the others wait, so the boards compute the new
    sequences only (simulate bills it so); the running batch it reports still counts those waiting."""
    import asyncio

    from tokenroof.model.cost import EnergyCounter, PowerModel
    from tokenroof.model.stepmodel import StepModel
    from tokenroof.serving.engine.core import BatchScheduler, Sequence
    from tokenroof.serving.engine.realtime import RealtimeEngine

    sm = StepModel(t_fixed_s=1e-3, t_weights_s=4e-3, t_compute_s=1e-4, t_kv_token_s=0.0)
    billed: list[tuple[float, float]] = []  # (batch billed, prompt tokens) a step

    async def main() -> None:
        scheduler = BatchScheduler(sm, 8, separate_prefill=True)
        engine = RealtimeEngine(scheduler, lambda *_: None)
        engine.meter = EnergyCounter(PowerModel(700.0, 100.0, "given"), 1, asyncio.get_running_loop().time())
        add = engine.meter.add_step

        def record(model: StepModel, duration: float, batch: float, context: float, prefill: float, sq: float) -> None:
            billed.append((batch, prefill))
            add(model, duration, batch, context, prefill, sq)

        engine.meter.add_step = record  # type: ignore[method-assign]
        task = asyncio.create_task(engine.run())
        for name in "abc":
            engine.submit(Sequence(name, 4, 6, 0.0))
        await asyncio.sleep(0.02)
        engine.submit(Sequence("d", 50, 2, 0.0))  # a prefill step alone while a, b and c wait
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert billed[0] == (3, 12)  # a, b and c prefilled together: three new sequences
    assert (1, 50) in billed  # d's prefill step: its one new sequence, not the four running


def test_the_sm_clock_is_read_around_the_timed_steps_and_a_fall_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's SM clock at a point's first and last timed step: a board that slowed by more than a tenth while timed
    is named (batch, from and to); where NVML cannot read the clock there is no reading and no warning."""
    from tokenroof.measure.local.local import throttled

    class ClockedNvml(FakeNvml):
        NVML_CLOCK_SM = 1

        def __init__(self, clocks: list[float]) -> None:
            super().__init__()
            self.clocks = clocks

        def nvmlDeviceGetClockInfo(self, handle: str, which: int) -> float:
            assert which == self.NVML_CLOCK_SM
            return self.clocks.pop(0)

    monkeypatch.setitem(sys.modules, "pynvml", ClockedNvml([1980.0, 1410.0]))
    meter, _ = energy_meter(Device("cuda"))
    assert meter is not None and (meter.sm_clock_mhz(), meter.sm_clock_mhz()) == (1980.0, 1410.0)
    assert meter.sm_clock_mhz() is None  # NVML raised (no reading left): no clock, no failure
    config = LocalConfig("llama-2-7b", batches=[8], steps=10)
    steady, slowed = (make_point(config, b, [0.1], [[0.02] * 10]) for b in (8, 64))
    steady.sm_clock_mhz_start, steady.sm_clock_mhz_end = 1980.0, 1950.0
    slowed.sm_clock_mhz_start, slowed.sm_clock_mhz_end = 1980.0, 1410.0
    (said,) = throttled([steady, slowed])
    assert "fell during 1 of 2 points (at batch 64 from 1,980 to 1,410 MHz)" in said
    assert throttled([steady]) == [] and throttled([make_point(config, 1, [0.1], [[0.02]])]) == []


def test_a_simulated_sweep_prints_its_bill_and_plan_its_price_per_token() -> None:
    """simulate over several rates (or concurrencies) prints each point's US$ per million output tokens and J/token
    with the bill's sources, as its JSON has them; plan's answer line carries the US$ per million output tokens, and
    one replica, one GPU are singular."""
    from tests.conftest import run_cli

    args = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--request-rate", "2,4", "--num-requests", "200"]
    result = run_cli([*args, "--gpu-cost-per-hour", "2"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "US$/M" in text and "J/token" in text and "the bill: US$ at 2 a GPU-hour (given); power modelled:" in text
    search = ["--seeds", "1", "--num-requests", "300", "--workers", "1", "--gpu-cost-per-hour", "2"]
    plan = run_cli(["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--rate", "2", *search])
    assert plan.exit_code == 0, plan.output
    said = " ".join(plan.stdout.split())
    assert "1 replica × max_num_seqs" in said and "(1 GPU, 2.00 per hour, " in said
    assert " US$ per million output tokens): " in said and "1 GPUs" not in said


def test_the_bill_splits_a_step_with_a_prompt_by_the_form_that_timed_it() -> None:
    """A scheduler fit's measured departures time decode steps, not steps with a prompt (the form times those): the
    prompts' share of such a step is the step less the form's decode step, whatever the decode factor."""
    from dataclasses import replace

    from tokenroof.model.cost import Price, bill_of_steps
    from tokenroof.model.stepmodel import StepModel

    form = StepModel(1e-2, 5e-3, 1e-4, 0.0, 1e-3)
    mixed = form.step_s(1, 500.0, 100, 100**2)  # one sequence at context 500 and a 100-token prompt
    price = Price(3600.0, "given")  # $1 a second
    for factor in (0.5, 1.0, 2.0):
        sm = replace(form, batch_factors=((1.0, factor), (4.0, factor)))
        decode = sm.step_s(1, 500.0)
        steps = {
            "duration_s": [mixed, decode],
            "batch": [1.0, 1.0],
            "context_tokens": [500.0, 500.0],
            "prefill_tokens": [100.0, 0.0],
        }
        bill = bill_of_steps(sm, steps, mixed + decode, 1, 1, 2.0, 100.0, price, None)
        prompt_s = mixed - form.step_s(1, 500.0)
        assert bill["usd_per_million_input_tokens"] == pytest.approx(prompt_s / 100 * 1e6)
        assert bill["usd_per_million_output_tokens"] == pytest.approx((mixed + decode - prompt_s) / 2 * 1e6)
