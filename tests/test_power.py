"""The bill's energy side: NVML's energy counter read around bench-local's timed steps, and the TDP × utilization
model when no meter is there (issue 32, item 4)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

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
