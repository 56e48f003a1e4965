"""The ui page's HTTP API: each endpoint calls the library function the CLI command calls and answers its --json.

POST /api/roofline  → `tokenroof roofline --json` (analysis.analyze_roofline)
POST /api/predict   → `tokenroof predict --json` (predict.read_with_prior + predict.predict_table)
POST /api/advise    → `tokenroof advise --json` (advise.advise_answer)
POST /api/figure    → the report's decode figure (Plotly JSON) from those three answers
GET  /api/presets   → the model and hardware presets and the dtypes

The browser sends names and numbers, and an uploaded config.json or measurement file as text; the physics stays here.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError

CURVE_BATCHES = 64  # batches the page's roofline and predict are asked at (log-spaced over its range)
DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp4", "fp32")
SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
MAX_UPLOADS = 64  # measurement files in one request (vLLM writes one per concurrency)


def finite(value: Any) -> Any:
    """Infinities and NaN become null, as the CLI's --json writes them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def number(body: dict[str, Any], key: str, default: float | None = None) -> float | None:
    value = body.get(key, default)
    if value is None or value == "":
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenroofError(f"{key} must be a number, got {value!r}")
    return float(value)


def check(values: dict[str, Any]) -> None:
    """The CLI's numeric flag ranges (FLAG_RANGES), so the page refuses what the command refuses."""
    from tokenroof.cli import check_flags

    check_flags(values)


@dataclass(frozen=True)
class Request:
    """One request's inputs, the uploads written to a private folder for the library's file readers."""

    body: dict[str, Any]
    folder: Path

    def answer(self, data: dict[str, Any]) -> dict[str, Any]:
        """The command's JSON as the CLI prints it (no infinities), the private folder left out of file names."""
        text = json.dumps(finite(data)).replace(json.dumps(str(self.folder) + "/")[1:-1], "")
        return dict(json.loads(text))

    def model(self) -> str:
        from tokenroof.specs import list_models

        config = self.body.get("model_config")
        if config:
            path = self.folder / "config.json"
            path.write_text(str(config), encoding="utf-8")
            return str(path)
        name = str(self.body.get("model") or "")
        if name not in list_models():
            raise TokenroofError(f"unknown model '{name}'; pick a preset or upload a config.json")
        return name

    def hardware(self) -> str:
        from tokenroof.specs import list_hardware

        name = str(self.body.get("hardware") or "")
        if name not in list_hardware():
            raise TokenroofError(f"unknown hardware '{name}'; known presets: {', '.join(list_hardware())}")
        return name

    def physics(self, known: bool = True) -> Any:
        from tokenroof.serving.deployment import Physics

        tp = int(number(self.body, "tp", 1) or 1)
        check({"tp": tp})
        dtype, kv = self.body.get("dtype") or None, self.body.get("kv_dtype") or None
        if not known:
            return Physics(dtype=dtype, tp=tp)
        return Physics(self.model(), self.hardware(), dtype, kv, None, tp)

    def batches(self) -> list[float]:
        low, high = number(self.body, "batch_min", 1.0), number(self.body, "batch_max", 512.0)
        assert low is not None and high is not None
        if not (0 < low < high < math.inf):
            raise TokenroofError(f"the batch range must be 0 < from < to, got {low:g} to {high:g}")
        return np.geomspace(low, high, CURVE_BATCHES).tolist()

    def context(self) -> float:
        context = number(self.body, "context", 1024.0)
        assert context is not None
        check({"context": context})
        return context

    def table_files(self) -> list[Path]:
        """The uploaded measurement files (`table`, one, or `tables`, several: vLLM's one result file per
        concurrency), each written under its own (sanitised) name; [] when none."""
        uploads = self.body.get("tables")
        if uploads is None:
            uploads = [self.body["table"]] if self.body.get("table") else []
        if not isinstance(uploads, list) or len(uploads) > MAX_UPLOADS:
            raise TokenroofError(f"tables must be a list of at most {MAX_UPLOADS} {{name, text}}")
        paths = []
        for table in uploads:
            if not isinstance(table, dict) or not isinstance(table.get("text"), str):
                raise TokenroofError("table must be {name, text}")
            name = SAFE_NAME.sub("_", Path(str(table.get("name") or "measurements.csv")).name) or "measurements.csv"
            path = self.folder / name
            if path in paths:
                raise TokenroofError(f"two uploads named {name}")
            path.write_text(table["text"], encoding="utf-8")
            paths.append(path)
        return paths


@contextmanager
def request_of(body: Any) -> Iterator[Request]:
    if not isinstance(body, dict):
        raise TokenroofError("expected a JSON object")
    with tempfile.TemporaryDirectory(prefix="tokenroof-ui-") as folder:
        try:
            yield Request(body, Path(folder))
        except TokenroofError as exc:  # the upload's own name, not the scratch folder's
            raise TokenroofError(str(exc).replace(folder + "/", "")) from None


def roofline(body: Any) -> dict[str, Any]:
    """As `tokenroof roofline --model M --hardware H --dtype D --kv-dtype K --tp N --context C --batch ... --json`."""
    from tokenroof.model.analysis import analyze_roofline
    from tokenroof.specs import load_hardware, load_model

    with request_of(body) as req:
        physics = req.physics()
        result = analyze_roofline(
            load_model(physics.model),
            load_hardware(physics.hardware),
            physics.precision,
            req.batches(),
            req.context(),
            physics.tp,
        )
        return req.answer(result.to_dict())


def predict(body: Any) -> dict[str, Any]:
    """As `tokenroof predict FILE --batch ... --json` (with --model/--hardware/--context when `prior` is set)."""
    from tokenroof.fit.predict import Workload, predict_table, read_with_prior
    from tokenroof.serving.replay import with_scheduler

    with request_of(body) as req:
        files = req.table_files()
        if not files:
            raise TokenroofError("predict needs a measurement file")
        prior = bool(req.body.get("prior"))
        workload = Workload(req.context() if prior else None)
        physics = req.physics(known=prior)
        table, fitted_prior = read_with_prior(files, physics, workload)
        result = with_scheduler(predict_table(table, req.batches(), fitted_prior), physics)
        return req.answer(result.to_dict())


def advise(body: Any) -> dict[str, Any]:
    """As `tokenroof advise [FILE] --tpot-slo-ms T [--model M --hardware H --context C] --json`."""
    from tokenroof.fit.predict import Workload
    from tokenroof.serving.advise import Targets, advise_answer

    with request_of(body) as req:
        files = req.table_files()
        known = not files or bool(req.body.get("prior"))
        tpot = number(req.body, "tpot_slo_ms", 50.0)
        check({"tpot_slo_ms": tpot})
        assert tpot is not None
        workload = Workload(req.context() if known else None)
        return req.answer(advise_answer(files, req.physics(known), workload, Targets(tpot)))


def figure(body: Any) -> str:
    """The decode figure (Plotly JSON) of a roofline, predict and advise answer, as the report draws it."""
    from tokenroof.report.decode import DecodeView, add_advice, add_predict, add_roofline
    from tokenroof.report.figures import decode_figure

    if not isinstance(body, dict):
        raise TokenroofError("expected a JSON object")
    view = DecodeView()
    if body.get("roofline"):
        r = body["roofline"]
        add_roofline(view, r, f"{r['model']['name']} on {r['hardware']['name']} ×{r['tp']}")
    if body.get("predict"):
        add_predict(view, body["predict"], str(body.get("table_name") or "measurements"))
    if body.get("advise"):
        add_advice(view, body["advise"])
    if view.empty:
        raise TokenroofError("nothing to draw: give a roofline or predict answer")
    return str(decode_figure(view).to_json())


def presets() -> dict[str, Any]:
    from tokenroof.specs import list_hardware, list_models

    return {"models": list_models(), "hardware": list_hardware(), "dtypes": list(DTYPES)}
