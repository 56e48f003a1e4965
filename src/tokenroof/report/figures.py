"""Plotly figures for the report and the ui page: the decode curve, bench's levels, a simulate sweep, a plan.

Each function takes the commands' JSON (or a `DecodeView` gathered from it) and returns a `plotly.graph_objects.Figure`;
nothing here computes a physical quantity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.report.decode import Curve, DecodeView, Mark, regions

LINE_STYLE = {  # role → (colour, dash)
    "knee": ("black", "dash"),
    "critical": ("red", "dash"),
    "memory": ("firebrick", "dot"),
    "cap": ("green", "dashdot"),
    "slo": ("darkorange", "dash"),
}
# the binding resource's shading: the terminal's colours (style.py BOUND_STYLE) in tints that print
BOUND_COLOUR = {
    "overhead": "#e377c2",
    "weights": "#17becf",
    "compute": "#d62728",
    "kv": "#bcbd22",
    "interconnect": "#2ca02c",
    "host": "#1f77b4",
    "capacity": "#7f7f7f",
}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
PERCENTILES = (("p50", "solid"), ("p90", "dash"), ("p99", "dot"))
HEIGHT_PX = 420


def plotly_modules() -> tuple[Any, Any]:
    """plotly.graph_objects and make_subplots, or a one-line error naming the extra."""
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        raise TokenroofError("the report and the ui need plotly: pip install 'tokenroof[report]'") from None
    return go, make_subplots


def panels(titles: Sequence[str]) -> Any:
    """A row of panels in a light style set here (no template: plotly_white's costs a quarter of the drawing time)."""
    _, make_subplots = plotly_modules()
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=list(titles), horizontal_spacing=0.08)
    fig.update_layout(
        template="none",
        colorway=PALETTE,
        font={"family": "system-ui, sans-serif", "size": 12, "color": "#2a3f5f"},
        height=HEIGHT_PX,
        margin={"l": 60, "r": 20, "t": 60, "b": 40},
        legend={"orientation": "h", "yanchor": "top", "y": -0.22, "font": {"size": 11}},
        hovermode="closest",
    )
    fig.update_xaxes(showgrid=True, gridcolor="#e5ecf6", zeroline=False, showline=True, linecolor="#c8d4e3")
    fig.update_yaxes(showgrid=True, gridcolor="#e5ecf6", zeroline=False, showline=True, linecolor="#c8d4e3")
    return fig


def batch_axis(fig: Any, col: int, values: Sequence[float], title: str = "running batch") -> None:
    """A log axis ticked at powers of two over `values`."""
    low, high = max(min(values), 1e-3), max(values)
    ticks = [2.0**k for k in range(math.floor(math.log2(low)), math.ceil(math.log2(high)) + 1)]
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks], title_text=title, col=col)


def level_axis(fig: Any, col: int, values: Sequence[float], title: str) -> None:
    """Concurrency or rate: a log axis when the levels span 8× or more, else linear."""
    if values and min(values) > 0 and max(values) / min(values) >= 8:
        batch_axis(fig, col, values, title)
    else:
        fig.update_xaxes(title_text=title, col=col)


def latency_axis(fig: Any, col: int, values: Sequence[Any]) -> None:
    """Log scale where latencies span 10× or more (queueing), ticked at powers of ten past 100×; else linear."""
    finite = [v for v in values if isinstance(v, int | float) and v > 0]
    span = max(finite) / min(finite) if finite else 1.0
    if span >= 100:
        fig.update_yaxes(type="log", dtick=1, col=col)
    elif span >= 10:
        fig.update_yaxes(type="log", col=col)


def line_trace(x: Sequence[float | None], y: Sequence[float | None], name: str, **style: Any) -> Any:
    go, _ = plotly_modules()
    return go.Scatter(x=list(x), y=list(y), name=name, mode=style.pop("mode", "lines"), **style)


# -- the decode curve --------------------------------------------------------------------
def band_trace(curve: Curve, low: str, high: str, colour: str, show: bool) -> Any:
    assert curve.band is not None
    x = curve.batch + curve.batch[::-1]
    y = curve.band[low] + curve.band[high][::-1]
    return line_trace(
        x,
        y,
        f"90% interval ({curve.label})",
        fill="toself",
        fillcolor=colour,
        opacity=0.25,
        line={"width": 0},
        hoverinfo="skip",
        legendgroup=curve.label + " band",
        showlegend=show,
    )


def add_curve(fig: Any, curve: Curve, colour: str) -> None:
    for col, key, unit in ((1, "tpot_ms", "ms"), (2, "throughput_tok_s", "tok/s")):
        if curve.band is not None:
            fig.add_trace(band_trace(curve, f"{key}_low", f"{key}_high", colour, col == 1), row=1, col=col)
        dash = "solid" if curve.kind == "fit" else "longdash"
        trace = line_trace(
            curve.batch,
            getattr(curve, key),
            curve.label,
            line={"color": colour, "dash": dash},
            legendgroup=curve.label,
            showlegend=col == 1,
            customdata=curve.bound,
            hovertemplate=f"batch %{{x:.4g}}<br>%{{y:.4g}} {unit}<br>%{{customdata}}-bound<extra>{curve.label}</extra>",
        )
        fig.add_trace(trace, row=1, col=col)


def add_marks(fig: Any, marks: Sequence[Mark], ranges: dict[int, tuple[float, float]], x_range: tuple) -> None:
    """Marked batches as vertical lines on both panels, TPOT targets as horizontal lines on the TPOT panel."""
    for mark in marks:
        colour, dash = LINE_STYLE[mark.role]
        style = {"line": {"color": colour, "dash": dash, "width": 1.5}, "legendgroup": mark.label}
        if mark.role == "slo":
            fig.add_trace(line_trace(x_range, [mark.value] * 2, mark.label, **style), row=1, col=1)
            continue
        for col in (1, 2):
            trace = line_trace([mark.value] * 2, ranges[col], mark.label, showlegend=col == 1, **style)
            fig.add_trace(trace, row=1, col=col)


def shade_regions(fig: Any, curve: Curve) -> None:
    """The binding resource along `curve`, as shaded spans with one legend entry per resource."""
    seen: set[str] = set()
    for left, right, bound in regions(curve):
        colour = BOUND_COLOUR.get(bound, "grey")
        for col in (1, 2):
            fig.add_vrect(
                x0=left,
                x1=right,
                fillcolor=colour,
                opacity=0.15,
                layer="below",
                line_width=0,
                row=1,
                col=col,
                exclude_empty_subplots=False,
            )
        if bound not in seen:
            seen.add(bound)
            marker = {"symbol": "square", "size": 12, "color": colour, "opacity": 0.35}
            fig.add_trace(line_trace([None], [None], f"{bound}-bound", mode="markers", marker=marker), row=1, col=1)


def data_ranges(view: DecodeView) -> tuple[list[float], dict[int, tuple[float, float]]]:
    """All batches drawn, and each panel's y extent (for the vertical lines)."""
    batches = [b for c in view.curves for b in c.batch] + [b for m in view.measured for b in m.batch]
    tpot = [v for c in view.curves for v in c.tpot_ms] + [v for m in view.measured for v in m.tpot_ms]
    thr = [v for c in view.curves for v in c.throughput_tok_s] + [v for m in view.measured for v in m.throughput_tok_s]
    tpot += [m.value for m in view.marks if m.role == "slo"]
    return batches, {1: (0.0, max(tpot) * 1.05), 2: (0.0, max(thr) * 1.05)}


def decode_figure(view: DecodeView) -> Any:
    """TPOT and throughput against the running batch: curves, bands, measured points, marks, bound regions."""
    fig = panels(("TPOT (ms per output token)", "throughput (output tok/s)"))
    palette = PALETTE
    shaded = next((c for c in view.curves if c.kind == "roofline"), view.curves[0] if view.curves else None)
    if shaded is not None:
        shade_regions(fig, shaded)
    for i, curve in enumerate(view.curves):
        add_curve(fig, curve, palette[i % len(palette)])
    for i, points in enumerate(view.measured):
        size = 7 if len(points.batch) <= 200 else 4
        style = {"mode": "markers", "marker": {"size": size, "color": palette[(i + 3) % len(palette)]}}
        for col, key in ((1, "tpot_ms"), (2, "throughput_tok_s")):
            trace = line_trace(points.batch, getattr(points, key), points.label, showlegend=col == 1, **style)
            fig.add_trace(trace.update(legendgroup=points.label), row=1, col=col)
    batches, ranges = data_ranges(view)
    batches += [m.value for m in view.marks if m.role != "slo"]
    add_marks(fig, view.marks, ranges, (min(batches), max(batches)))
    for col in (1, 2):
        batch_axis(fig, col, batches)
    fig.update_yaxes(rangemode="tozero")
    return fig


# -- bench, simulate, plan -------------------------------------------------------------------
def percentile_panels(fig: Any, rows: Sequence[dict[str, Any]], x: Sequence[float], keys: Sequence[str]) -> None:
    """p50/p90/p99 of each distribution key against the levels, one panel each."""
    for col, key in enumerate(keys, start=1):
        drawn: list[Any] = []
        for q, dash in PERCENTILES:
            y = [(r.get(key) or {}).get(q) for r in rows]
            drawn += y
            name = f"{key.removesuffix('_ms').upper()} {q}"
            fig.add_trace(line_trace(x, y, name, mode="lines+markers", line={"dash": dash}), row=1, col=col)
        fig.update_yaxes(title_text="ms", col=col)
        latency_axis(fig, col, drawn)


def target_line(fig: Any, x: Sequence[float], value: float | None, col: int, label: str) -> None:
    if value is not None and x:
        style = {"line": {"color": LINE_STYLE["slo"][0], "dash": "dash"}}
        fig.add_trace(line_trace([min(x), max(x)], [value, value], label, **style), row=1, col=col)


def bench_latency_figure(points: Sequence[dict[str, Any]], settings: dict[str, Any], kind: str) -> Any:
    """TTFT, TPOT and ITL percentiles per level of one kind (concurrency or rate); invalid levels crossed out."""
    fig = panels(("TTFT", "TPOT", "ITL"))
    x = [float(p["value"]) for p in points]
    percentile_panels(fig, points, x, ("ttft_ms", "tpot_ms", "itl_ms"))
    bad = [(v, p) for v, p in zip(x, points, strict=True) if p.get("invalid")]
    if bad:
        marker = {"symbol": "x", "size": 11, "color": "red"}
        y = [(p.get("tpot_ms") or {}).get("p50") for _, p in bad]
        text = [str(p["invalid"]) for _, p in bad]
        invalid = line_trace([v for v, _ in bad], y, "invalid level", mode="markers", marker=marker, hovertext=text)
        fig.add_trace(invalid, row=1, col=2)
    target_line(fig, x, settings.get("ttft_slo_ms"), 1, "TTFT target")
    target_line(fig, x, settings.get("tpot_slo_ms"), 2, "TPOT target")
    for col in (1, 2, 3):
        level_axis(fig, col, x, kind)
    return fig


def bench_goodput_figure(points: Sequence[dict[str, Any]], kind: str) -> Any:
    """Requests/s served and within the targets (goodput), output tokens/s and the running batch, per level."""
    fig = panels(("requests/s", "output tok/s", "running batch"))
    x = [float(p["value"]) for p in points]
    marker = {"mode": "lines+markers"}
    fig.add_trace(line_trace(x, [p["request_throughput_req_s"] for p in points], "served", **marker), row=1, col=1)
    fig.add_trace(line_trace(x, [p["goodput_req_s"] for p in points], "goodput (targets met)", **marker), row=1, col=1)
    fig.add_trace(line_trace(x, [p["throughput_tok_s"] for p in points], "output tok/s", **marker), row=1, col=2)
    fig.add_trace(line_trace(x, [p["batch"] for p in points], "running batch", **marker), row=1, col=3)
    for col in (1, 2, 3):
        level_axis(fig, col, x, kind)
    return fig


def sweep_figure(data: dict[str, Any]) -> Any:
    """simulate over several rates: latency percentiles and goodput against the offered rate, with the targets."""
    rows = data["points"]
    closed = "concurrency" in rows[0]  # simulate --concurrency: closed loops, nothing "offered"
    x = [float(r["concurrency"] if closed else r["rate_req_s"]) for r in rows]
    fig = panels(("TTFT", "TPOT", "requests/s"))
    percentile_panels(fig, rows, x, ("ttft_ms", "tpot_ms"))
    slo = data.get("slo") or {}
    target_line(fig, x, slo.get("ttft_ms"), 1, "TTFT target")
    target_line(fig, x, slo.get("tpot_ms"), 2, "TPOT target")
    marker = {"mode": "lines+markers"}
    if not closed:
        fig.add_trace(line_trace(x, x, "offered", line={"color": "grey", "dash": "dot"}), row=1, col=3)
    fig.add_trace(line_trace(x, [r["request_throughput_req_s"] for r in rows], "served", **marker), row=1, col=3)
    fig.add_trace(line_trace(x, [r["goodput_req_s"] for r in rows], "goodput", **marker), row=1, col=3)
    fig.update_xaxes(title_text="concurrency (closed loop)" if closed else "request rate (req/s)")
    return fig


def plan_figure(data: dict[str, Any]) -> Any:
    """plan's candidates: the target statistic of TTFT and TPOT (worst run) against max_num_seqs, per replica count."""
    stat = data["slo"]["statistic"]
    fig = panels((f"{stat} TTFT (worst run)", f"{stat} TPOT (worst run)"))
    caps: list[float] = []
    for replicas in sorted({p["replicas"] for p in data["points"]}):
        rows = sorted((p for p in data["points"] if p["replicas"] == replicas), key=lambda p: p["max_num_seqs"])
        x = [float(p["max_num_seqs"]) for p in rows]
        caps += x
        for col, key in ((1, "ttft_ms_high"), (2, "tpot_ms_high")):
            trace = line_trace(x, [p[key][stat] for p in rows], f"{replicas} replicas", mode="lines+markers")
            fig.add_trace(trace.update(legendgroup=str(replicas), showlegend=col == 1), row=1, col=col)
    target_line(fig, caps, data["slo"].get("ttft_ms"), 1, "TTFT target")
    target_line(fig, caps, data["slo"].get("tpot_ms"), 2, "TPOT target")
    chosen = data.get("chosen")
    if chosen:
        star = {"symbol": "star", "size": 14, "color": "green"}
        for col, key in ((1, "ttft_ms_high"), (2, "tpot_ms_high")):
            trace = line_trace([chosen["max_num_seqs"]], [chosen[key][stat]], "chosen", mode="markers", marker=star)
            fig.add_trace(trace.update(showlegend=col == 1), row=1, col=col)
    for col in (1, 2):
        batch_axis(fig, col, caps or [1.0], "max_num_seqs")
    fig.update_yaxes(title_text="ms")
    fig.update_yaxes(rangemode="tozero", col=2)
    latency_axis(fig, 1, [p["ttft_ms_high"][stat] for p in data["points"]])
    return fig
