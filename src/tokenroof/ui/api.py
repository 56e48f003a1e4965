"""The ui page's HTTP API: each endpoint calls the library function the CLI command calls and answers its --json.

POST /api/roofline  → `tokenroof roofline --json` (analysis.analyze_roofline)
POST /api/predict   → `tokenroof predict --json` (predict.read_with_prior + predict.predict_table)
POST /api/advise    → `tokenroof advise --json` (advise.advise_answer)
POST /api/figure    → the report's decode figure (Plotly JSON) from those three answers
GET  /api/presets   → the model and hardware presets and the dtypes

The browser sends names and numbers, and an uploaded config.json or measurement file as text; the physics stays here.
Each body is read by a pydantic model (`Form`, `Answers`): JSON types checked strictly, numbers finite, unknown keys
refused, nesting and text (lone surrogates) checked by the parser; ranges are the CLI's (`check_flags`), so the
page refuses what the command refuses, in the command's words. Every refusal is a TokenroofError (a 400).
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
from typing import Annotated, Any, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tokenroof.errors import TokenroofError

CURVE_BATCHES = 64  # batches the page's roofline and predict are asked at (log-spaced over its range)
DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "fp4", "fp32")
SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
MAX_UPLOADS = 64  # measurement files in one request (vLLM writes one per concurrency)
MAX_TEXT = 64 * 2**20  # an upload's characters (the server's body cap is the real bound)
MAX_TP = 4096


def finite(value: Any) -> Any:
    """Infinities and NaN become null, as the CLI's --json writes them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def check(values: dict[str, Any]) -> None:
    """The CLI's numeric flag ranges (FLAG_RANGES), so the page refuses what the command refuses."""
    from tokenroof.params import check_flags

    check_flags(values)


Name = Annotated[str, Field(max_length=200)]
Number = Annotated[float, Field(allow_inf_nan=False)]
STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, str_max_length=MAX_TEXT, protected_namespaces=())


class Upload(BaseModel):
    model_config = STRICT
    name: Name | None = None
    text: str


class Form(BaseModel):
    """The page's form (what its form() sends); every field optional, defaults the CLI's."""

    model_config = STRICT
    model: Name | None = None
    model_config_text: str | None = Field(None, alias="model_config")  # an uploaded config.json
    hardware: Name | None = None
    dtype: Name | None = None
    kv_dtype: Name | None = None
    tp: int = Field(1, le=MAX_TP)
    context: Number = 1024.0
    batch_min: Number = 1.0
    batch_max: Number = 512.0
    table: Upload | None = None
    tables: list[Upload] | None = Field(None, max_length=MAX_UPLOADS)
    prior: bool = False
    tpot_slo_ms: Number | None = 50.0


class Answers(BaseModel):
    """What /api/figure draws: the page's roofline, predict and advise answers (each checked as it is drawn)."""

    model_config = STRICT
    roofline: dict[str, Any] | None = None
    predict: dict[str, Any] | None = None
    advise: dict[str, Any] | None = None
    table_name: Name | None = None
    adviseError: str | None = None  # the page's own name


Body = TypeVar("Body", bound=BaseModel)


def parse(kind: type[Body], raw: bytes | str | Any) -> Body:
    """A request body (JSON text, or an already-parsed value) as `kind`, or one line saying what is wrong."""
    try:
        if isinstance(raw, bytes | str):
            return kind.model_validate_json(raw)
        return kind.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            why = first["msg"].removeprefix("Invalid JSON: ")
            raise TokenroofError(f"the request body is not JSON ({why})") from None
        if first["type"] == "model_type":
            raise TokenroofError("expected a JSON object") from None
        where = ".".join(str(p) for p in first["loc"]) or "body"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise TokenroofError(f"{where}: {first['msg']}{more}") from None


@dataclass(frozen=True)
class Request:
    """One request's inputs, the uploads written to a private folder for the library's file readers."""

    body: Form
    folder: Path

    def answer(self, data: dict[str, Any]) -> dict[str, Any]:
        """The command's JSON as the CLI prints it (no infinities), the private folder left out of file names."""
        text = json.dumps(finite(data)).replace(json.dumps(str(self.folder) + "/")[1:-1], "")
        return dict(json.loads(text))

    def model(self) -> str:
        from tokenroof.specs import list_models

        if self.body.model_config_text:
            path = self.folder / "config.json"
            path.write_text(self.body.model_config_text, encoding="utf-8")
            return str(path)
        name = self.body.model or ""
        if name not in list_models():
            raise TokenroofError(f"unknown model '{name}'; pick a preset or upload a config.json")
        return name

    def hardware(self) -> str:
        from tokenroof.specs import list_hardware

        name = self.body.hardware or ""
        if name not in list_hardware():
            raise TokenroofError(f"unknown hardware '{name}'; known presets: {', '.join(list_hardware())}")
        return name

    def physics(self, known: bool = True) -> Any:
        from tokenroof.fit.physics import Physics

        tp = self.body.tp
        check({"tp": tp})
        dtype, kv = self.body.dtype or None, self.body.kv_dtype or None
        if not known:
            return Physics(dtype=dtype, tp=tp)
        return Physics(self.model(), self.hardware(), dtype, kv, None, tp)

    def batches(self) -> list[float]:
        low, high = self.body.batch_min, self.body.batch_max
        if not (0 < low < high < math.inf):
            raise TokenroofError(f"the batch range must be 0 < from < to, got {low:g} to {high:g}")
        return np.geomspace(low, high, CURVE_BATCHES).tolist()

    def context(self) -> float:
        check({"context": self.body.context})
        return self.body.context

    def table_files(self) -> list[Path]:
        """The uploaded measurement files (`table`, one, or `tables`, several: vLLM's one result file per
        concurrency), each written under its own (sanitised) name; [] when none. AIPerf names every run's export
        alike: a name given again with other text goes into a numbered folder (`2/profile_export_aiperf.json`), and
        the same file twice is refused."""
        uploads = self.body.tables if self.body.tables is not None else [self.body.table] if self.body.table else []
        paths: list[Path] = []
        texts: dict[str, set[str]] = {}
        for table in uploads:
            name = upload_name(table.name)
            seen = texts.setdefault(name, set())
            if table.text in seen:
                raise TokenroofError(f"two uploads named {name} with the same text (the same file twice?)")
            path = self.folder / name if not seen else self.folder / str(len(seen) + 1) / name
            seen.add(table.text)
            path.parent.mkdir(exist_ok=True)
            path.write_text(table.text, encoding="utf-8")
            paths.append(path)
        return paths


def upload_name(name: str | None) -> str:
    """An upload's file name, safe in the scratch folder: its last part, odd characters as _, never '.' or '..'."""
    safe = SAFE_NAME.sub("_", Path(name or "").name).strip(".")
    return safe or "measurements.csv"


@contextmanager
def request_of(raw: bytes | str | Any) -> Iterator[Request]:
    body = parse(Form, raw)
    with tempfile.TemporaryDirectory(prefix="tokenroof-ui-") as folder:
        try:
            yield Request(body, Path(folder))
        except TokenroofError as exc:  # the upload's own name, not the scratch folder's
            raise TokenroofError(exc.as_flags().replace(folder + "/", "")) from None


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
    from tokenroof.fit.predict import MeasuredWorkload, predict_table, read_with_prior
    from tokenroof.serving.replay import with_scheduler

    with request_of(body) as req:
        files = req.table_files()
        if not files:
            raise TokenroofError("predict needs a measurement file")
        prior = req.body.prior
        workload = MeasuredWorkload(req.context() if prior else None)
        physics = req.physics(known=prior)
        table, fitted_prior = read_with_prior(files, physics, workload)
        result = with_scheduler(predict_table(table, req.batches(), fitted_prior), physics)
        return req.answer(result.to_dict())


def advise(body: Any) -> dict[str, Any]:
    """As `tokenroof advise [FILE] --tpot-slo-ms T [--model M --hardware H --context C] --json`."""
    from tokenroof.fit.predict import MeasuredWorkload
    from tokenroof.serving.advise import Targets, advise_answer

    with request_of(body) as req:
        files = req.table_files()
        known = not files or req.body.prior
        tpot = req.body.tpot_slo_ms if req.body.tpot_slo_ms is not None else 50.0
        check({"tpot_slo_ms": tpot})
        workload = MeasuredWorkload(req.context() if known else None)
        return req.answer(advise_answer(files, req.physics(known), workload, Targets(tpot)))


def figure(raw: bytes | str | Any) -> str:
    """The decode figure (Plotly JSON) of a roofline, predict and advise answer, as the report draws it."""
    from tokenroof.report.decode import DecodeView, add_advice, add_predict, add_roofline
    from tokenroof.report.figures import decode_figure
    from tokenroof.report.sources import checked

    body = parse(Answers, raw)
    view = DecodeView()
    if body.roofline:
        r = checked("roofline", body.roofline, "the roofline answer")
        add_roofline(view, r, f"{r['model']['name']} on {r['hardware']['name']} ×{r['tp']}")
    if body.predict:
        add_predict(view, checked("predict", body.predict, "the predict answer"), body.table_name or "measurements")
    if body.advise:
        add_advice(view, checked("advise", body.advise, "the advise answer"))
    if view.empty:
        raise TokenroofError("nothing to draw: give a roofline or predict answer")
    return str(decode_figure(view).to_json())


def presets() -> dict[str, Any]:
    from tokenroof.specs import list_hardware, list_models

    return {"models": list_models(), "hardware": list_hardware(), "dtypes": list(DTYPES)}
