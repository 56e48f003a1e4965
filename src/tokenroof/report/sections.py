"""The report's sections as HTML fragments: the decode curve, advice, bench, simulate, plan, warnings, provenance."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from tokenroof.report import figures
from tokenroof.report.decode import DecodeView, regions
from tokenroof.report.sources import Source
from tokenroof.style import fmt

Figure = Callable[[Any], str]  # a plotly figure → its <div> (the page numbers them)


def esc(value: Any) -> str:
    return html.escape("—" if value is None else str(value))


def num(value: Any, digits: int = 3) -> str:
    return esc(fmt(value, digits)) if isinstance(value, int | float) or value is None else esc(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    """An HTML table; cells are escaped unless given as ('html', fragment)."""

    def cell(value: Any) -> str:
        if isinstance(value, tuple) and value and value[0] == "html":
            return str(value[1])
        return num(value) if isinstance(value, int | float) or value is None else esc(value)

    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def facts(pairs: Sequence[tuple[str, Any]]) -> str:
    """A definition list of (name, value) pairs; values escaped unless ('html', fragment)."""
    items = []
    for name, value in pairs:
        shown = value[1] if isinstance(value, tuple) and value and value[0] == "html" else num(value)
        items.append(f"<dt>{esc(name)}</dt><dd>{shown}</dd>")
    return f'<dl class="facts">{"".join(items)}</dl>'


def flags_html(flags: dict[str, str] | None) -> str:
    if not flags:
        return "—"
    return (
        "<ul class='flags'>" + "".join(f"<li>{esc(k)}: <code>{esc(v)}</code></li>" for k, v in flags.items()) + "</ul>"
    )


def notes_html(notes: Sequence[str]) -> str:
    return "".join(f'<p class="note">{esc(n)}</p>' for n in notes)


# -- the decode curve ------------------------------------------------------------------
def decode_section(view: DecodeView, figure: Figure) -> str:
    if view.empty:
        return notes_html(
            [*view.notes, "no decode curve: give a measurement table, a bench folder, predict or roofline"]
        )
    rows = []
    for curve in view.curves:
        for left, right, bound in regions(curve):
            rows.append([curve.label, f"{fmt(left)} – {fmt(right)}", bound])
    marks = [[m.label, m.value] for m in view.marks]
    return (
        figure(figures.decode_figure(view))
        + "<h3>Binding resource by region</h3>"
        + table(["curve", "running batch", "bound"], rows)
        + ("<h3>Marked batches and targets</h3>" + table(["line", "value"], marks) if marks else "")
        + notes_html(view.notes)
    )


# -- advice ----------------------------------------------------------------------------
def advice_card(source: Source) -> str:
    d = source.data
    at = d["at_cap"]
    tpot = at["tpot_ms"] if isinstance(at["tpot_ms"], int | float) else (at["tpot_ms"] or {}).get(d["slo"]["statistic"])
    slo, reference = d["slo"], d["reference"]["throughput_tok_s"]
    interval = (
        f" ({fmt(d['max_num_seqs_low'])} – {fmt(d['max_num_seqs_high'])} at 90%)" if d["max_num_seqs_low"] else ""
    )
    return f"<h3>{esc(source.name)}</h3>" + facts(
        [
            ("max_num_seqs", f"{d['max_num_seqs']}{interval}"),
            ("binding", d["binding"]),
            ("targets", f"TPOT {fmt(slo['tpot_ms'])} ms, TTFT {fmt(slo['ttft_ms'])} ms ({slo['statistic']})"),
            ("TPOT at the cap (ms)", tpot),
            ("throughput at the cap (tok/s)", at["throughput_tok_s"]),
            ("throughput given up", f"{d['throughput_given_up_fraction']:.0%} of {fmt(reference)} tok/s"),
            ("throughput–latency knee", d["latency_knee_batch"]),
            ("engine flags", ("html", flags_html(d["engine_flags"]))),
            ("source", d["source"]),
        ]
    )


def advice_section(sources: Sequence[Source]) -> str:
    return "".join(advice_card(s) for s in sources if s.kind == "advise")


# -- bench -----------------------------------------------------------------------------
def bench_rows(points: Sequence[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for p in points:
        failures = ", ".join(f"{k} {v}" for k, v in (p.get("failure_reasons") or {}).items())
        verdict = p.get("invalid") or "valid"
        checks = [p.get("client_note"), f"loop lag p99 {fmt(p.get('client_loop_lag_p99_ms'))} ms"]
        checks.append(
            f"client CPU {p['client_cpu_fraction']:.0%}" if p.get("client_cpu_fraction") is not None else None
        )
        rows.append(
            [
                p["point"],
                p.get("batch"),
                p.get("batch_source"),
                p.get("requests_completed"),
                p.get("requests_failed"),
                failures or "—",
                (p.get("ttft_ms") or {}).get("p99"),
                (p.get("tpot_ms") or {}).get("p50"),
                (p.get("itl_ms") or {}).get("p99"),
                p.get("goodput_req_s"),
                ("html", f'<span class="{"bad" if p.get("invalid") else "ok"}">{esc(verdict)}</span>'),
                "; ".join(c for c in checks if c),
            ]
        )
    return rows


BENCH_HEADERS = (
    "level",
    "running batch",
    "batch from",
    "completed",
    "failed",
    "failures",
    "TTFT p99 (ms)",
    "TPOT p50 (ms)",
    "ITL p99 (ms)",
    "goodput (req/s)",
    "verdict",
    "self-checks",
)


def bench_block(source: Source, figure: Figure) -> str:
    points = source.data.get("points") or []
    settings = source.data.get("settings") or {}
    parts = [f"<h3>{esc(source.name)}: {esc(source.data.get('model'))} at {esc(source.data.get('url'))}</h3>"]
    for kind in ("concurrency", "rate"):
        level = [p for p in points if p.get("kind") == kind]
        if level:
            parts.append(figure(figures.bench_latency_figure(level, settings, kind)))
            parts.append(figure(figures.bench_goodput_figure(level, kind)))
    parts.append(table(BENCH_HEADERS, bench_rows(points), "wide"))
    examples = [f"{p['point']}: {e}" for p in points for e in p.get("failure_examples") or []]
    if examples:
        parts.append("<h4>Failure examples</h4>" + notes_html(examples))
    return "".join(parts) + notes_html(source.notes)


def bench_section(sources: Sequence[Source], figure: Figure) -> str:
    return "".join(bench_block(s, figure) for s in sources if s.kind == "bench")


# -- simulate and plan ------------------------------------------------------------------
def simulation_facts(d: dict[str, Any]) -> str:
    def stat(key: str, q: str) -> Any:
        return (d.get(key) or {}).get(q)

    return facts(
        [
            ("requests (in window)", f"{d['requests']} ({d['requests_in_window']})"),
            ("TTFT p50 / p99 (ms)", f"{fmt(stat('ttft_ms', 'p50'))} / {fmt(stat('ttft_ms', 'p99'))}"),
            ("TPOT p50 / p99 (ms)", f"{fmt(stat('tpot_ms', 'p50'))} / {fmt(stat('tpot_ms', 'p99'))}"),
            ("throughput (tok/s)", d["throughput_tok_s"]),
            ("goodput (req/s)", d["goodput_req_s"]),
            ("running batch", d["running_batch"]),
            ("preemptions", d["preemptions"]),
        ]
    )


def simulate_section(sources: Sequence[Source], figure: Figure) -> str:
    parts = []
    for s in sources:
        if s.kind == "simulate-sweep":
            parts.append(f"<h3>{esc(s.name)}</h3>" + figure(figures.sweep_figure(s.data)))
        elif s.kind == "simulate":
            parts.append(f"<h3>{esc(s.name)}</h3>" + simulation_facts(s.data))
    return "".join(parts)


def plan_block(source: Source, figure: Figure) -> str:
    d = source.data
    chosen = d.get("chosen")
    answer = f"{chosen['replicas']} × max_num_seqs {chosen['max_num_seqs']}" if chosen else "infeasible"
    head = facts(
        [
            ("answer", answer),
            ("hardware", f"{d.get('hardware') or '—'} ×{d.get('tp')} ({d.get('gpus') or '—'} GPUs)"),
            ("reason", d["reason"]),
            ("engine flags", ("html", flags_html(d.get("engine_flags")))),
        ]
    )
    choices = d.get("choices") or []
    rows = [[c["hardware"], c["tp"], "yes" if c["feasible"] else "no", c["gpus"], c["reason"]] for c in choices]
    extra = table(["hardware", "tp", "feasible", "GPUs", "reason"], rows) if rows else ""
    return f"<h3>{esc(source.name)}</h3>" + head + figure(figures.plan_figure(d)) + extra


def plan_section(sources: Sequence[Source], figure: Figure) -> str:
    return "".join(plan_block(s, figure) for s in sources if s.kind == "plan")


def warnings_section(sources: Sequence[Source]) -> str:
    rows = [[s.name, w] for s in sources for w in s.data.get("warnings") or []]
    rows += [[s.name, w] for s in sources if s.table is not None for w in s.table.warnings]
    return table(["input", "warning"], rows) if rows else ""
