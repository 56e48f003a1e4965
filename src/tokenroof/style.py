"""What the terminal tables (cli/render.py), the report and the figures share: the colours of the binding resource,
one per bound label (StepModel.bound), and how a number is printed."""

from __future__ import annotations

BOUND_STYLE = {"overhead": "magenta", "weights": "cyan", "compute": "red", "kv": "yellow", "host": "blue"}


def fmt(value: float | None, digits: int = 3) -> str:
    """A number with `digits` significant figures, thousands separated; '—' for None."""
    if value is None:
        return "—"
    if value == float("inf"):
        return "∞"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"
