"""Where each input came from: model, hardware, workload, as far as its own JSON or file says."""

from __future__ import annotations

from typing import Any

from tokenroof.report.sources import Source
from tokenroof.style import fmt


def roofline_says(d: dict[str, Any]) -> tuple[str, str, str]:
    p = d.get("precision") or {}
    model = f"{(d.get('model') or {}).get('name', '—')} ({p.get('weight_dtype', '?')}, KV {p.get('kv_dtype', '?')})"
    return (
        model,
        f"{(d.get('hardware') or {}).get('name', '—')} ×{d.get('tp', 1)}",
        f"context {fmt(d.get('context_tokens'))}",
    )


def measured_says(measured: dict[str, Any]) -> str:
    parts = [f"batch = {measured.get('batch_kind', '?')} batch, TPOT = {measured.get('tpot_kind', '?')}"]
    if measured.get("input_len") is not None and measured.get("output_len") is not None:
        parts.append(f"{fmt(measured['input_len'])} in / {fmt(measured['output_len'])} out tokens")
    return ", ".join(parts)


def bench_says(d: dict[str, Any]) -> tuple[str, str, str]:
    s = d.get("settings") or {}
    workload = f"{s.get('endpoint', '?')}, {s.get('input_len', '?')} in / {s.get('output_len', '?')} out"
    targets = [f"{k.removesuffix('_slo_ms').upper()} ≤ {s[k]:g} ms" for k in ("ttft_slo_ms", "tpot_slo_ms") if s.get(k)]
    return str(d.get("model", "—")), f"server {d.get('url', '—')}", ", ".join([workload, *targets])


def simulation_says(d: dict[str, Any]) -> str:
    slo = d.get("slo") or {}
    targets = f", targets TTFT {fmt(slo.get('ttft_ms'))} / TPOT {fmt(slo.get('tpot_ms'))} ms" if slo else ""
    rows = d.get("points") or [d]
    rates = ", ".join(fmt(r.get("rate_req_s")) for r in rows if r.get("rate_req_s") is not None)
    loops = ", ".join(fmt(r.get("concurrency")) for r in rows if r.get("concurrency") is not None)
    if loops:
        return f"closed loops at concurrency {loops} ({rows[0].get('client')}){targets}"
    return f"rates {rates or 'from a trace'} req/s, {fmt(rows[0].get('requests'))} requests{targets}"


def says(source: Source) -> tuple[str, str, str]:
    """(model, hardware, workload) as the input states them ('—' where it does not)."""
    d = source.data
    if source.kind == "roofline":
        return roofline_says(d)
    if source.kind == "bench":
        return bench_says(d)
    if source.kind == "table" and source.table is not None:
        return "—", "—", source.table.semantics.describe()
    if source.kind == "predict":
        return "—", "—", measured_says(d.get("measured") or {})
    if source.kind == "advise":
        return "—", "—", str(d.get("source", "—"))
    if source.kind == "plan":
        slo = d["slo"]
        return (
            "—",
            f"{d.get('hardware') or '—'} ×{d.get('tp', 1)}",
            f"targets {slo['statistic']} TTFT {fmt(slo['ttft_ms'])} / TPOT {fmt(slo['tpot_ms'])} ms",
        )
    return "—", "—", simulation_says(d)


def stated_lines(source: Source) -> list[str]:
    """The free-text provenance the input carries (a table's '#' lines, predict's measured provenance)."""
    if source.table is not None:
        return list(source.table.provenance)
    return list((source.data.get("measured") or {}).get("provenance") or [])


def rows(sources: list[Source]) -> list[list[Any]]:
    out = []
    for s in sources:
        model, hardware, workload = says(s)
        out.append([str(s.path), s.kind, model, hardware, workload, " | ".join(stated_lines(s)) or "—"])
    return out
