"""tokenroof: decode throughput and latency against batch size, from first principles and from measurements.

The public API, imported lazily (`import tokenroof` stays light; each name loads its module on first use):

    from tokenroof import Physics, analyze_roofline, read_table, predict_table, advise_answer, simulate

- specs: `load_model`, `load_hardware`, `load_engine`, `Precision`
- the one step-time model: `StepModel`; first principles: `Physics` (model × hardware × precision × TP × engine),
  `analyze_roofline`
- measurements and fits: `read_table`, `MeasurementTable`, `fit_table`, `predict_table`
- answers: `advise_answer` (the batch cap), `Deployment` (the server every scheduler command builds),
  `simulate` (the scheduler on a virtual clock), `make_plan` (replicas × batch cap); as the commands ask them,
  `simulate_rates`, `simulate_concurrencies` and `plan_choices` (hardware × TP choices, the cheapest that meets
  the targets)
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from tokenroof.errors import TokenroofError

__version__ = "0.1.0"

_HOMES = {
    "load_model": "tokenroof.specs",
    "load_hardware": "tokenroof.specs",
    "load_engine": "tokenroof.specs.engines",
    "Precision": "tokenroof.specs",
    "StepModel": "tokenroof.model.stepmodel",
    "Physics": "tokenroof.fit.physics",
    "Deployment": "tokenroof.serving.deployment",
    "analyze_roofline": "tokenroof.model.analysis",
    "read_table": "tokenroof.io.measurements",
    "MeasurementTable": "tokenroof.io.measurements",
    "fit_table": "tokenroof.fit.core",
    "predict_table": "tokenroof.fit.predict",
    "advise_answer": "tokenroof.serving.advise",
    "simulate": "tokenroof.serving.simulate",
    "make_plan": "tokenroof.serving.plan",
    "plan_choices": "tokenroof.serving.capacity",
    "simulate_rates": "tokenroof.serving.capacity",
    "simulate_concurrencies": "tokenroof.serving.capacity",
}
__all__ = ["TokenroofError", "__version__", *_HOMES]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'tokenroof' has no attribute {name!r}")
