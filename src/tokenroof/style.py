"""What the terminal tables (cli/render.py), the report and the figures share: the colours of the binding resource,
one per bound label (StepModel.bound), and how a number is printed."""

from __future__ import annotations

BOUND_STYLE = {
    "overhead": "magenta",
    "weights": "cyan",
    "compute": "red",
    "kv": "yellow",
    "interconnect": "green",
    "host": "blue",
}


def fmt(value: float | None, digits: int = 3) -> str:
    """A number with `digits` significant figures, thousands separated; '—' for None."""
    if value is None:
        return "—"
    if value == float("inf"):
        return "∞"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def fmt_beside(value: float, target: float, digits: int = 3) -> str:
    """`value` to `digits` significant figures, or as many more (up to 8) as tell it apart from the `target` it is
    set beside: a TPOT of 30.004 ms that misses a 30 ms target reads 30.004, not "30 against 30"."""
    for more in range(digits, 9):
        text = f"{value:.{more}g}"
        if value == target or float(text) != target:
            return text
    return f"{value:.8g}"
