"""`tokenroof report`: one self-contained HTML page from bench folders, the commands' --json and measurement tables.

`sources` tells each input by its shape, `decode` gathers the decode curve from them, `figures` draws with Plotly,
`sections` and `provenance` write the HTML fragments, `page` puts them in one file with plotly.js inlined once.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path

from tokenroof import __version__
from tokenroof.errors import TokenroofError
from tokenroof.report import provenance, sections
from tokenroof.report.decode import DecodeView, add_advice, add_predict, add_roofline, add_table, add_targets
from tokenroof.report.figures import plotly_modules
from tokenroof.report.page import Page
from tokenroof.report.sources import Source, load_sources

__all__ = ["build_report", "decode_view", "load_sources", "write_report"]


def decode_view(sources: Sequence[Source]) -> DecodeView:
    """The decode curve from every input that has a part in it. Tables and bench folders are fitted (data only)
    unless a predict output is among the inputs: then its fit is the one shown, and their points are drawn."""
    view = DecodeView()
    have_fit = any(s.kind == "predict" for s in sources)
    for s in sources:
        if s.kind == "predict":
            add_predict(view, s.data, s.name)
        elif s.kind == "roofline":
            try:
                add_roofline(view, s.data, s.name)
            except TokenroofError as exc:  # a step_model the schema lets through and StepModel refuses
                raise TokenroofError(f"{s.path}: {exc}") from None
        elif s.kind == "advise":
            add_advice(view, s.data)
        elif s.kind in ("plan", "simulate", "simulate-sweep"):
            add_targets(view, s.data.get("slo"), s.kind)
        elif s.kind == "bench":
            settings = s.data.get("settings") or {}
            add_targets(view, {"statistic": "request", "tpot_ms": settings.get("tpot_slo_ms")}, "bench")
        if s.table is not None:
            add_table(view, s.table, s.name, fit=not have_fit)
    return view


def provenance_html(sources: Sequence[Source], command_line: str) -> str:
    head = sections.facts(
        [("tokenroof", __version__), ("command line", ("html", f"<code>{sections.esc(command_line)}</code>"))]
    )
    headers = ["input", "recognised as", "model", "hardware", "workload", "stated provenance"]
    return head + sections.table(headers, provenance.rows(list(sources)), "wide")


def build_report(sources: Sequence[Source], command_line: str = "", title: str = "tokenroof report") -> str:
    """The page's HTML."""
    plotly_modules()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = Page(title, f"{len(sources)} input(s): {', '.join(s.name for s in sources)}; generated {when}")
    page.add(
        "decode",
        "Decode curve: TPOT and throughput against the running batch",
        sections.decode_section(decode_view(sources), page.figure),
    )
    page.add("advice", "Advice: the batch cap and the engine flags", sections.advice_section(sources))
    page.add("bench", "Bench: latency, goodput and failures per level", sections.bench_section(sources, page.figure))
    page.add("simulate", "Simulate", sections.simulate_section(sources, page.figure))
    page.add("plan", "Plan", sections.plan_section(sources, page.figure))
    page.add("warnings", "Warnings", sections.warnings_section(sources))
    page.add("provenance", "Provenance", provenance_html(sources, command_line))
    return page.render()


def write_report(paths: Sequence[Path], out: Path, command_line: str = "", title: str = "tokenroof report") -> int:
    """Read the inputs, write the page to `out`; returns how many inputs it holds."""
    sources = load_sources(paths)
    text = build_report(sources, command_line, title)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TokenroofError(f"cannot write {out}: {exc.strerror}") from None
    return len(sources)
