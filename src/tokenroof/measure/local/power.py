"""The board's own power meter on an NVIDIA GPU: NVML's total-energy counter, read around the timed steps.

`nvmlDeviceGetTotalEnergyConsumption` (Volta and later) counts the millijoules the board has drawn since the driver
loaded; its difference over the timed decode steps, over the tokens they made, is the measured energy per output
token (what `nvidia-smi` reports as power is the same meter averaged). Without NVML (`pip install nvidia-ml-py`),
on a CPU, or on a board without the counter there is no reading, and bench-local says so; the TDP × utilization
model (model/cost.py) is the first-principles estimate instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MJ_PER_J = 1e3


@dataclass
class EnergyMeter:
    """NVML's energy counter of one GPU: `read_j()` the joules drawn since the driver loaded."""

    nvml: Any
    handle: Any
    name: str

    def read_j(self) -> float:
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / MJ_PER_J

    @property
    def source(self) -> str:
        return f"measured: NVML's total-energy counter of {self.name}, over the timed steps"

    def sm_clock_mhz(self) -> float | None:
        """The streaming multiprocessors' clock now (MHz; None where NVML cannot say): read at a point's first and
        last timed step, a clock that fell between them is a board throttling (power or heat) under the timing."""
        try:
            return float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
        except Exception:  # any NVMLError: the reading is optional
            return None


def energy_meter(device: Any) -> tuple[EnergyMeter | None, str | None]:
    """The meter of `device` (a torch device), or None and why there is none (None: a CPU, which is not said)."""
    if getattr(device, "type", "cpu") != "cuda":
        return None, None
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return (
            None,
            "no power reading: NVML's Python binding is not installed (pip install 'tokenroof[energy]')",
        )
    try:
        pynvml.nvmlInit()
        index = device.index if device.index is not None else 0
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        meter = EnergyMeter(pynvml, handle, name.decode() if isinstance(name, bytes) else str(name))
        meter.read_j()  # boards before Volta have no energy counter: NVMLError_NotSupported here
    except Exception as exc:  # any NVMLError: no driver, no such device, no counter
        return None, f"no power reading: NVML could not read the GPU's energy counter ({type(exc).__name__})"
    return meter, None
