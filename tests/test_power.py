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
