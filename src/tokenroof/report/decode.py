"""The decode curve's contents, gathered from the commands' JSON: curves, measured points, marked batches, targets.

Everything here is read from a command's output or computed by the library (a measurement table is fitted with
`predict_table`, as `tokenroof predict` without --model/--hardware does; a roofline's curve is its own step model
evaluated by `StepModel`), so the figure shows what the commands said and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.io.measurements import MeasurementTable
from tokenroof.model.stepmodel import StepModel
from tokenroof.units import MS_PER_S

CURVE_POINTS = 96  # batches on a dense curve (log-spaced)


@dataclass(frozen=True)
class Curve:
    """TPOT and throughput against batch: a fit with its 90% band, or first principles (no band)."""

    label: str
    kind: str  # "fit" or "roofline"
    batch: list[float]
    tpot_ms: list[float]
    throughput_tok_s: list[float]
    bound: list[str]
    band: dict[str, list[float]] | None = None  # tpot_ms_low/_high, throughput_tok_s_low/_high


@dataclass(frozen=True)
class Measured:
    label: str
    batch: list[float]
    tpot_ms: list[float]
    throughput_tok_s: list[float]


@dataclass(frozen=True)
class Mark:
    """A marked batch (vertical line) or a TPOT target (horizontal line on the TPOT panel)."""

    label: str
    value: float
    role: str  # knee, critical, memory, cap, slo


@dataclass
class DecodeView:
    curves: list[Curve] = field(default_factory=list)
    measured: list[Measured] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def mark(self, label: str, value: Any, role: str) -> None:
        """Add a line once (same role and value), skipping missing or non-finite values."""
        if value is None or not np.isfinite(float(value)) or float(value) <= 0:
            return
        if any(m.role == role and abs(m.value - float(value)) < 1e-9 for m in self.marks):
            return
        self.marks.append(Mark(label, float(value), role))

    def add_measured(self, points: Measured) -> None:
        """Add measured points unless the same points are drawn already (a table and predict's copy of it)."""
        if not any(m.batch == points.batch and m.tpot_ms == points.tpot_ms for m in self.measured):
            self.measured.append(points)

    @property
    def empty(self) -> bool:
        return not (self.curves or self.measured)


def step_model_of(data: dict[str, Any]) -> StepModel:
    """The StepModel an output's `step_model` object describes."""
    names = {f.name for f in fields(StepModel)}
    try:
        return StepModel(**{k: v for k, v in data.items() if k in names})
    except (TypeError, ValueError) as exc:  # the schema lets duplicate or out-of-range batch_factors through
        raise TokenroofError(f"step_model: {exc}") from None


def add_predict(view: DecodeView, data: dict[str, Any], label: str) -> None:
    """predict --json: the predictions with their 90% band (one curve per context asked), the measured points, knee,
    critical batch, memory cap."""
    contexts = list(dict.fromkeys(r.get("context_tokens") for r in data["predictions"]))
    for context in contexts:
        rows = sorted((r for r in data["predictions"] if r.get("context_tokens") == context), key=lambda r: r["batch"])

        def column(key: str, rows: list[dict[str, Any]] = rows) -> list[float]:
            return [float(r[key]) for r in rows]

        keys = ("tpot_ms_low", "tpot_ms_high", "throughput_tok_s_low", "throughput_tok_s_high")
        at = "" if context is None else f" at context {context:g}"
        fit = Curve(
            f"fit: {label}{at}",
            "fit",
            column("batch"),
            column("tpot_ms"),
            column("throughput_tok_s"),
            [str(r["bound"]) for r in rows],
            {k: column(k) for k in keys},
        )
        view.curves.append(fit)
    measured = data.get("measured") or {}
    points = measured.get("points") or []
    if points:
        view.add_measured(
            Measured(
                f"measured: {measured.get('source') or label}",
                [p["batch"] for p in points],
                [p["tpot_ms"] for p in points],
                [p["throughput_tok_s"] for p in points],
            )
        )
    view.mark(f"knee ({label})", data.get("knee_batch"), "knee")
    view.mark(f"critical batch ({label})", data.get("critical_batch"), "critical")
    view.mark(f"memory cap ({label})", data.get("max_batch_by_memory"), "memory")


def add_roofline(view: DecodeView, data: dict[str, Any], label: str) -> None:
    """roofline --json: its step model over the asked batch range, knee, critical batch and memory cap."""
    sm, ctx = step_model_of(data["step_model"]), float(data.get("context_tokens") or 0.0)
    asked = [float(p["batch"]) for p in data["points"]]
    dense = np.geomspace(min(asked), max(max(asked), min(asked) * 1.01), CURVE_POINTS)
    step_s = sm.step_time_s(dense, ctx)
    view.curves.append(
        Curve(
            f"first principles: {label}",
            "roofline",
            dense.tolist(),
            (step_s * MS_PER_S).tolist(),
            (dense / step_s).tolist(),
            [str(b) for b in sm.bound(dense, ctx)],
        )
    )
    view.mark(f"knee ({label})", data.get("knee_batch"), "knee")
    view.mark(f"critical batch ({label})", data.get("critical_batch"), "critical")
    view.mark(f"memory cap ({label})", data.get("max_batch_by_memory"), "memory")


def add_advice(view: DecodeView, data: dict[str, Any]) -> None:
    view.mark(f"advised max_num_seqs {data['max_num_seqs']}", data["max_num_seqs"], "cap")
    add_targets(view, data.get("slo"), "advise")


def add_targets(view: DecodeView, slo: dict[str, Any] | None, where: str) -> None:
    if slo and slo.get("tpot_ms") is not None:
        view.mark(f"TPOT target {slo['tpot_ms']:g} ms ({slo.get('statistic', '')}, {where})", slo["tpot_ms"], "slo")


def fit_table(table: MeasurementTable) -> dict[str, Any]:
    """predict --json for a measurement table, data only, over a dense grid from its smallest batch to twice its
    largest (as `tokenroof predict TABLE --batch ...` would answer)."""
    from tokenroof.fit.predict import predict_table

    low, high = float(table.batch.min()), float(table.batch.max())
    grid = np.geomspace(min(1.0, low), max(2 * high, low * 2), CURVE_POINTS)
    return predict_table(table, grid.tolist()).to_dict()


def add_table(view: DecodeView, table: MeasurementTable, label: str, fit: bool) -> None:
    """A measurement table's points; with `fit`, its data-only fit and band too (a fit failure is a note)."""
    if fit:
        try:
            data = fit_table(table)
        except TokenroofError as exc:
            view.notes.append(f"{label}: no fit ({exc})")
        else:
            add_predict(view, {**data, "measured": {**data["measured"], "source": label}}, f"{label}, data only")
            return
    view.add_measured(
        Measured(f"measured: {label}", table.batch.tolist(), table.tpot_ms.tolist(), table.throughput_tok_s.tolist())
    )


def regions(curve: Curve) -> list[tuple[float, float, str]]:
    """(from batch, to batch, binding resource) for each run of one bound along the curve."""
    spans: list[tuple[float, float, str]] = []
    b = curve.batch
    for i, bound in enumerate(curve.bound):
        left = b[0] if i == 0 else float(np.sqrt(b[i - 1] * b[i]))
        right = b[-1] if i == len(b) - 1 else float(np.sqrt(b[i] * b[i + 1]))
        if spans and spans[-1][2] == bound:
            spans[-1] = (spans[-1][0], right, bound)
        else:
            spans.append((left, right, bound))
    return spans
