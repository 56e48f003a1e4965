"""Readable rich tables for each command's result dict (the same dict `--json` prints)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from tokenroof.model.stepmodel import departures_text
from tokenroof.specs import HardwareSpec, ModelSpec
from tokenroof.style import BOUND_STYLE, fmt


def bound_cell(bound: str) -> str:
    return f"[{BOUND_STYLE.get(bound, 'white')}]{bound}[/]"


def engine_line(engine: dict[str, Any], level: float) -> str:
    """Which engine profile the numbers assume, and how far that profile missed published curves."""
    acc = engine["accuracy"]
    name = engine["name"] if engine["key"] in engine["name"] else f"{engine['name']} ({engine['key']})"
    text = f"engine: {name}, {engine['prefill']} prefill"
    if engine["fitted"] and acc["tpot_error_median"] is not None:
        text += (
            f"; fitted to {acc['curves']} published curves, held-out TPOT error {acc['tpot_error_median']:.0%} median, "
            f"{acc['tpot_error_p90']:.0%} p90"
        )
    elif engine["key"] == "generic":
        text += "; give --engine (vllm-v0, vllm-v1, sglang, tensorrt-llm, ...) for a serving engine's costs"
    elif acc.get("bias_correction"):
        slower = math.exp(acc["bias_correction"])
        text += (
            f"; not fitted: physically motivated defaults run {slower:.2f}× slower, the median by which such "
            "constants missed other engines' published curves"
        )
    else:
        text += "; not fitted (physically motivated defaults)"
    if engine.get("eager_enforced") and engine.get("eager"):
        e = engine["eager"]
        text += (
            f"; eager (--enforce-eager): {e['host_s_per_layer'] * 1e3:.2g} ms of launches per layer and "
            f"{e['host_s_per_allreduce'] * 1e3:.2g} ms per all-reduce (two a layer past --tp 1), an estimate not "
            f"fitted to any curve{' (those had CUDA graphs)' if engine['fitted'] else ''}, so the interval widens by "
            "the host's spread, "
            f"×{math.exp(-e['log_spread_faster']):.2g}–×{math.exp(e['log_spread_slower']):.2g}"
        )
    return text + f"; {level:.0%} interval from its spread across curves"


def launches_per_layer_s(eff: dict[str, Any], tp: int) -> float:
    """An eager engine's launches per layer at this --tp (model/roofline.py host_launches_s)."""
    return float(eff["host_s_per_layer"]) + (2 * float(eff.get("host_s_per_allreduce", 0.0)) if tp > 1 else 0.0)


def roofline(console: Console, data: dict[str, Any]) -> None:
    m, hw, p, eff = data["model"], data["hardware"], data["precision"], data["efficiencies"]
    console.print(
        f"[bold]{m['name']}[/] ({m['total_params'] / 1e9:.2f}B params, {m['attention']}) on "
        f"[bold]{hw['name']}[/] ×{data['tp']}  weights {p['weight_dtype']}, KV {kv_text(p, data['engine'])}, "
        f"compute {compute_text(p)}  context {fmt(data['context_tokens'])} tokens",
        highlight=False,
    )
    console.print(
        f"assumed: {eff['bandwidth']:.0%} of peak bandwidth, {eff['compute']:.0%} of dense peak FLOP/s, "
        f"{eff['overhead_s'] * 1e3:.3g} ms fixed overhead per step"
        + (f", {eff['overhead_s_per_seq'] * 1e6:.3g} µs per sequence" if eff.get("overhead_s_per_seq") else "")
        + (
            f", {launches_per_layer_s(eff, data['tp']) * 1e3:.2g} ms of launches per layer (the GPU's work runs "
            "under them)"
            if eff.get("host_s_per_layer")
            else ""
        ),
        style="dim",
        highlight=False,
    )
    console.print(engine_line(data["engine"], data["interval_level"]), style="dim", highlight=False)
    if data.get("workload"):
        console.print(f"workload: {roofline_workload(data['workload'])}", style="dim", highlight=False)
    roofline_summary(console, data)
    roofline_points(console, data)
    if data.get("speculation"):
        roofline_speculation(console, data)
    if data["cost"]["price"]:  # the bill when a price is known (--gpu-cost-per-hour); watts and joules in --json
        roofline_bill(console, data)


def roofline_workload(w: dict[str, Any]) -> str:
    """`roofline --input-len --output-len`'s workload, and what its TPOT column counts."""
    lengths = (
        f"{fmt(w['input_len'])} in / {fmt(w['output_len'])} out tokens (mean context {fmt(w['mean_context_tokens'])})"
    )
    if w["batching"] == "static":
        return (
            f"{lengths}, a static batch: TPOT is the decode step (a batch past the memory cap runs in waves); "
            "e2e ms/tok adds the batch's prefill"
        )
    where = "in the decode steps (chunked prefill)" if w["prefill"] == "chunked" else "in prefill steps of their own"
    return f"{lengths}, online at each running batch: TPOT is the mean step, arriving prompts prefilled {where}"


def kv_text(precision: dict[str, Any], engine: dict[str, Any]) -> str:
    """The KV dtype, and where it was not given, whose default it is (an assumption the answer rests on)."""
    if precision.get("kv_dtype_source") != "engine":
        return str(precision["kv_dtype"])
    weights = precision["weight_dtype"]
    return f"{precision['kv_dtype']} ({engine['key']}'s cache under {weights} weights; --kv-dtype to change)"


def compute_text(precision: dict[str, Any]) -> str:
    """The GEMMs' dtype, and attention's where it differs (fp8 GEMMs beside a 16-bit cache attend in bf16)."""
    compute, attention = precision["compute_dtype"], precision.get("attention_dtype", precision["compute_dtype"])
    return compute if attention == compute else f"{compute} (attention {attention})"


def roofline_contexts(console: Console, data: dict[str, Any]) -> None:
    """One deployment at several contexts: TPOT and throughput by batch × context, the memory cap and knee each."""
    first = data["contexts"][0]
    m, hw, p = data["model"], data["hardware"], data["precision"]
    console.print(
        f"[bold]{m['name']}[/] on [bold]{hw['name']}[/] ×{data['tp']}  weights {p['weight_dtype']}, "
        f"KV {kv_text(p, data['engine'])}, compute {compute_text(p)}  at {len(data['contexts'])} contexts",
        highlight=False,
    )
    console.print(engine_line(data["engine"], first["interval_level"]), style="dim", highlight=False)
    summary = Table(title="by context", title_justify="left")
    for col in ("context", "knee batch", "fits in memory", "asymptote tok/s"):
        summary.add_column(col, justify="right")
    for c in data["contexts"]:
        summary.add_row(
            fmt(c["context_tokens"]),
            fmt(c["knee_batch"]),
            fmt(c["max_batch_by_memory"]),
            fmt(c["throughput_asymptote_tok_s"]),
        )
    console.print(summary)
    table = Table(title="TPOT ms (tok/s) by batch × context; red: does not fit in memory", title_justify="left")
    table.add_column("batch", justify="right")
    for c in data["contexts"]:
        table.add_column(f"ctx {fmt(c['context_tokens'])}", justify="right")
    for i, pt in enumerate(first["points"]):
        cells = []
        for c in data["contexts"]:
            q = c["points"][i]
            cell = f"{fmt(q['tpot_ms'])} ({fmt(q['throughput_tok_s'])})"
            cells.append(cell if q["fits_in_memory"] else f"[red]{cell}[/]")
        table.add_row(fmt(pt["batch"]), *cells)
    console.print(table)


def fits_in_memory(data: dict[str, Any]) -> str:
    """The memory cap, and where no engine's server is named, what it is once vLLM V1 reserves its share."""
    cap, vllm = data["max_batch_by_memory"], data.get("max_batch_by_memory_vllm_v1")
    if not vllm or vllm == cap:  # none, the same, or nothing fits beside it (a CPU file, a toy chip): unsaid
        return fmt(cap)
    return f"{fmt(cap)} ({fmt(vllm)} beside vLLM V1's reserve: --engine vllm-v1)"


def roofline_summary(console: Console, data: dict[str, Any]) -> None:
    """The characteristic batches and memory figures of a roofline, and why there is no critical batch if none."""
    crit = data["critical_batch"]
    lines = [
        ("knee batch (matmuls turn compute-bound)", fmt(data["knee_batch"])),
        ("critical batch (whole step compute-bound)", fmt(crit) if crit is not None else "none"),
        ("weights-only critical batch (context 0)", fmt(data["critical_batch_weights_only"])),
        ("ridge point", f"{fmt(data['ridge_flops_per_byte'])} FLOP/byte"),
        ("largest batch that fits in memory", fits_in_memory(data)),
        *(
            [
                (
                    "reserved beside weights and KV",
                    f"{data['reserved_bytes_per_gpu'] / 1e9:,.2f} GB per GPU (activations, sampler, buffers, driver)",
                )
            ]
            if data.get("reserved_bytes_per_gpu")
            else []
        ),
        ("throughput asymptote", f"{fmt(data['throughput_asymptote_tok_s'])} tok/s"),
        ("KV cache per token", f"{data['kv_bytes_per_token'] / 1024:,.0f} KiB"),
    ]
    if data.get("ttft_ms") is not None:
        ttft = f"{fmt(data['ttft_ms'])} ms"
        if data.get("prefix_cached_tokens") is not None:
            cached, without = data["prefix_cached_tokens"], fmt(data["ttft_uncached_ms"])
            ttft += f" ({cached:,} tokens from the prefix cache; {without} ms without)"
        lines.append((f"TTFT for a {fmt(data['prompt_tokens'])}-token prompt", ttft))
    summary = Table.grid(padding=(0, 2))
    for label, value in lines:
        summary.add_row(label, f"[bold]{value}[/]")
    console.print(summary)
    if crit is None and data.get("critical_batch_reason"):
        console.print(f"no critical batch: {data['critical_batch_reason']}", style="yellow", highlight=False)


def roofline_speculation(console: Console, data: dict[str, Any]) -> None:
    """Speculative decoding beside the plain decode step: TPOT, throughput and speed-up at each batch, and the batch
    past which it stops paying."""
    spec = data["speculation"]
    rates = ", ".join(f"{a:.3g}" for a in dict.fromkeys(spec["acceptance_by_position"]))
    proposer = f"proposer {spec['draft']}" if spec["draft"] else "proposer free (n-gram lookup)"
    even = spec["break_even_batch"]
    pays = (
        "it does not pay even at batch 1"
        if even == 0
        else "it pays at every batch up to 2^20"
        if even is None
        else f"it stops paying past batch {fmt(even)}"
    )
    console.print(
        f"speculative decoding: {spec['method']}, {spec['num_speculative_tokens']} drafts a step, acceptance {rates} "
        f"(given) → {spec['tokens_per_step']:.3g} tokens a step; {proposer} ({spec['draft_share_at_batch_1']:.0%} of "
        f"a step at batch 1); {pays}",
        highlight=False,
    )
    table = Table(title="speculative decoding by batch (the decode step's context)", title_justify="left")
    for col in ("batch", "decode ms", "spec TPOT ms", "spec tok/s", "speed-up"):
        table.add_column(col, justify="right")
    for pt in data["points"]:
        speedup = pt["speculative_speedup"]
        table.add_row(
            fmt(pt["batch"]),
            fmt(pt["decode_step_ms"]),
            fmt(pt["speculative_tpot_ms"]),
            fmt(pt["speculative_throughput_tok_s"]),
            f"{speedup:.2f}×" if speedup >= 1 else f"[red]{speedup:.2f}×[/]",
        )
    console.print(table)


def roofline_bill(console: Console, data: dict[str, Any]) -> None:
    """$ per million tokens at the price, and the board's power and energy per output token, at each batch."""
    price, power = data["cost"]["price"], data["cost"]["power"]
    said = []
    if price:
        said.append(f"{fmt(price['usd_per_hour'])} US$ per GPU-hour ({price['source']})")
    if power:
        said.append(f"power {power['source']}")
    console.print("the bill: " + "; ".join(said), style="dim", highlight=False)
    inputs = any(pt["usd_per_million_input_tokens"] is not None for pt in data["points"])
    table = Table(title="the bill by batch", title_justify="left")
    columns = ["batch"]
    if price:
        columns += ["$/M output", *(["$/M input"] if inputs else [])]
    if power:
        columns += ["watts", "J/output token"]
    for col in columns:
        table.add_column(col, justify="right")
    for pt in data["points"]:
        cells = [fmt(pt["batch"])]
        if price:
            cells.append(money(pt["usd_per_million_output_tokens"]))
            if inputs:
                cells.append(money(pt["usd_per_million_input_tokens"]))
        if power:
            cells += [fmt(pt["power_watts"]), fmt(pt["energy_j_per_output_token"])]
        table.add_row(*cells)
    console.print(table)


def money(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3g}"


def roofline_points(console: Console, data: dict[str, Any]) -> None:
    """The decode step at each batch: TPOT with the engine profile's interval, throughput, the binding term."""
    w = data.get("workload")
    title = "decode step by batch" if not w else f"{w['batching']} serving by batch; bound and times: the decode step"
    table = Table(title=title, title_justify="left")
    level = f"TPOT {data['interval_level']:.0%}"
    extra = [] if not w else ["decode ms"] + (["e2e ms/tok"] if w["batching"] == "static" else [])
    intensity = () if w else ("FLOP/byte",)  # a workload's extra columns take its place (--json keeps it)
    # the tensor-parallel all-reduces (their calls' latency and bytes), where there are any
    comm = ("comm ms",) if any(pt.get("time_interconnect_ms", 0.0) > 0 for pt in data["points"]) else ()
    columns = (
        "batch", "TPOT ms", level, *extra, "tok/s", "bound", "weights ms", "compute ms", "KV ms", *comm, *intensity
    )  # fmt: skip
    widest = max(len(pt["bound"]) for pt in data["points"])  # 'interconnect' kept whole in 120 columns
    for col in (*columns, "fits"):
        table.add_column(col, justify="right", min_width=widest if col == "bound" else None)
    for pt in data["points"]:
        cells = [fmt(pt["decode_step_ms"])] if w else []
        if w and w["batching"] == "static":
            cells.append(fmt(pt["e2e_ms_per_token"]))
        table.add_row(
            fmt(pt["batch"]),
            fmt(pt["tpot_ms"]),
            f"{fmt(pt['tpot_ms_low'])}–{fmt(pt['tpot_ms_high'])}",
            *cells,
            fmt(pt["throughput_tok_s"]),
            bound_cell(pt["bound"]),
            fmt(pt["time_weights_ms"]),
            fmt(pt["time_compute_ms"]),
            fmt(pt["time_kv_ms"]),
            *([fmt(pt["time_interconnect_ms"])] if comm else []),
            *([] if w else [fmt(pt["arithmetic_intensity_flops_per_byte"])]),
            "yes" if pt["fits_in_memory"] else "[red]no[/]",
        )
    console.print(table)


TERM_RESOLUTION_S = 1e-9  # a fitted term below a nanosecond is an optimiser's zero, not a cost: shown as 0


def term(seconds: float, scale: float) -> str:
    """A fitted step-model term in the unit `scale` gives (1e3: ms, 1e6: µs), 3 figures; 0 below a nanosecond (an
    optimiser's bound read 1.25e-09 ms on one machine and 1.86e-09 on another)."""
    return "0" if abs(seconds) < TERM_RESOLUTION_S else f"{seconds * scale:.3g}"


def prediction(console: Console, data: dict[str, Any]) -> None:
    m, measured = data["model"], data["measured"]
    console.print(f"fit: [bold]{m['method']}[/] on {m['points_fitted']} points — {m['why']}", highlight=False)
    console.print(
        f"terms: overhead {term(m['t_fixed_s'], 1e3)} ms, weights {term(m['t_weights_s'], 1e3)} ms, "
        f"compute {term(m['t_compute_s'], 1e6)} µs/seq, KV+other {term(m['t_seq_s'], 1e6)} µs/seq; "
        f"residual {m['residual_rms_relative']:.1%} rms over all fitted points",
        style="dim",
        highlight=False,
    )
    table_line = f"table: batch = {measured['batch_kind']} batch, TPOT = {measured['tpot_kind']}"
    if not {"batch_kind", "tpot_kind"} <= set(measured.get("stated", [])):
        table_line += " (assumed where the file does not say: '# batch_kind=… tpot_kind=…')"
    if m.get("context_tokens") is not None:
        table_line += f"; terms folded at a mean context of {fmt(m['context_tokens'])} tokens"
    law = m.get("context_law")
    if law is not None and law.get("measured_contexts"):
        shown = ", ".join(fmt(c) for c in law["measured_contexts"])
        table_line += f"; KV cost {law['kv_token_s'] * 1e9:.3g} ns per context token, fitted across contexts {shown}"
    elif law is not None:
        table_line += f"; other contexts by the physics ({law['kv_token_s'] * 1e9:.3g} ns of KV per context token)"
    console.print(table_line, style="dim", highlight=False)
    if data.get("workload"):
        console.print(f"workload: {data['workload']}", style="dim", highlight=False)
    serving = data.get("serving")
    if serving is not None:
        sm = serving["step_model"]
        ttft = f", TTFT {serving['ttft_rms']:.1%}" if serving["ttft_rms"] is not None else ""
        console.print(
            f"on the scheduler (--save-model): overhead {term(sm['t_fixed_s'], 1e3)} ms, weights "
            f"{term(sm['t_weights_s'], 1e3)} ms, {term(sm['t_compute_s'], 1e6)} µs per token's GEMMs (a prompt's "
            f"prefill: {serving['prefill_source']}), {term(sm['t_seq_s'], 1e6)} µs/seq; replays the measured TPOT "
            f"within {serving['tpot_rms']:.1%} rms{ttft}"
            + (f"; {departures_text(sm['batch_factors'])}" if sm.get("batch_factors") else ""),
            style="dim",
            highlight=False,
        )
    crit = data["critical_batch"]
    lo, hi = data["critical_batch_low"], data["critical_batch_high"]
    crit_text = "none" if crit is None else fmt(crit)
    if crit is not None and lo is not None:
        crit_text += f" (90%: {fmt(lo)}–{fmt(hi) if hi is not None else 'none'})"
    if any(p.get("ttft_ms") is not None for p in data["predictions"]):  # the predictions are the scheduler's
        console.print(
            "the decode fit's curve (an average step's prompts folded in; the predictions run the scheduler's model):",
            style="dim",
            highlight=False,
        )
    summary = Table.grid(padding=(0, 2))
    summary.add_row("critical batch", f"[bold]{crit_text}[/]")
    summary.add_row("knee batch", f"[bold]{fmt(data['knee_batch'])}[/]")
    summary.add_row("throughput asymptote", f"[bold]{fmt(data['throughput_asymptote_tok_s'])} tok/s[/]")
    if data.get("max_batch_by_memory") is not None:
        summary.add_row("largest batch that fits in memory", f"[bold]{fmt(data['max_batch_by_memory'])}[/]")
    console.print(summary)
    if data.get("by_context"):
        by_context = Table(title="by context", title_justify="left")
        for col in ("context", "critical batch", "knee batch", "asymptote tok/s", "running-batch cap"):
            by_context.add_column(col, justify="right")
        for c in data["by_context"]:
            by_context.add_row(
                fmt(c["context_tokens"]),
                fmt(c["critical_batch"]) if c["critical_batch"] is not None else "none",
                fmt(c["knee_batch"]),
                fmt(c["throughput_asymptote_tok_s"]),
                fmt(c["running_batch_cap"]),
            )
        console.print(by_context)
    if crit is None and data.get("critical_batch_reason"):
        console.print(f"no critical batch: {data['critical_batch_reason']}", style="yellow", highlight=False)
    table = Table(title="predictions (90% intervals)", title_justify="left")
    contexts = any("context_tokens" in p for p in data["predictions"])
    with_ttft = any("ttft_ms" in p for p in data["predictions"])  # the scheduler's model answers (measured prefill)
    columns = (*(("context",) if contexts else ()), "batch", "tok/s", "tok/s 90%", "TPOT ms", "TPOT 90%")
    for col in (*columns, *(("TTFT ms",) if with_ttft else ()), "bound", ""):
        table.add_column(col, justify="right")
    for p in data["predictions"]:
        table.add_row(
            *((fmt(p["context_tokens"]),) if contexts else ()),
            fmt(p["batch"]),
            fmt(p["throughput_tok_s"]),
            f"{fmt(p['throughput_tok_s_low'])}–{fmt(p['throughput_tok_s_high'])}",
            fmt(p["tpot_ms"]),
            f"{fmt(p['tpot_ms_low'])}–{fmt(p['tpot_ms_high'])}",
            *((fmt(p.get("ttft_ms")),) if with_ttft else ()),
            bound_cell(p["bound"]),
            "extrapolated" if p["extrapolated"] else "",
        )
    console.print(table)
    if with_ttft:
        console.print(
            "TPOT, TTFT and tok/s from the scheduler's model as the measured client drove the server; the 90% band is "
            "the decode fit's, widened to hold its answer",
            style="dim",
            highlight=False,
        )


def at_statistic(value: float | dict[str, float | None] | None, statistic: str) -> float | None:
    """A model value (a number) as it is, a distribution's `statistic`."""
    return value.get(statistic) if isinstance(value, dict) else value


def advice(console: Console, data: dict[str, Any], flags: bool = True) -> None:
    """advise's answer: the cap, what binds, the knee, and (with `flags`) each engine's flag for it."""
    lo, hi = data["max_num_seqs_low"], data["max_num_seqs_high"]
    interval = f" (90%: {lo}–{hi})" if lo is not None else ""
    console.print(f"[dim]{data['source']}[/]", highlight=False)
    slo, at_cap = data["slo"], data["at_cap"]
    stat = slo["statistic"]
    target = f"{stat} TPOT ≤ {fmt(slo['tpot_ms'])} ms"
    if slo.get("ttft_ms") is not None:
        target += f", {stat} TTFT ≤ {fmt(slo['ttft_ms'])} ms"
    reached = f"TPOT {fmt(at_statistic(at_cap['tpot_ms'], stat))} ms"
    if at_cap.get("ttft_ms") is not None:
        reached += f", TTFT {fmt(at_statistic(at_cap['ttft_ms'], stat))} ms"
    phases = at_cap.get("phases")
    if phases is not None:  # bench's staggered streams: the figures over their start phases
        reached += (
            f" (over {phases['runs']} start phases TPOT {fmt(phases['tpot_ms_low'])}–{fmt(phases['tpot_ms_high'])}, "
            f"TTFT {fmt(phases['ttft_ms_low'])}–{fmt(phases['ttft_ms_high'])})"
        )
    console.print(
        f"{target} → batch cap [bold]{data['max_num_seqs']}[/]{interval}, bound by {data['binding']}: "
        f"{reached}, {fmt(at_cap['throughput_tok_s'])} tok/s",
        highlight=False,
    )
    reference = data["reference"]
    console.print(
        f"throughput–latency knee at batch ≈ {fmt(data['latency_knee_batch'])}; the cap gives up "
        f"{data['throughput_given_up_fraction']:.0%} of the {fmt(reference['throughput_tok_s'])} tok/s "
        f"available at batch {fmt(reference['max_num_seqs'])}",
        highlight=False,
    )
    if not flags:
        return
    table = Table(title="set it", title_justify="left")
    table.add_column("engine")
    table.add_column("flag")
    for engine, flag in data["engine_flags"].items():
        table.add_row(engine, flag)
    console.print(table)


def advice_contexts(console: Console, data: dict[str, Any]) -> None:
    """advise at several contexts: the cap at each, then each answer in full."""
    summary = Table(title="max_num_seqs by context", title_justify="left")
    for col in ("context", "max_num_seqs", "90%", "binds", "TPOT ms at cap", "tok/s at cap"):
        summary.add_column(col, justify="right")
    for answer in data["contexts"]:
        lo, hi, at_cap = answer["max_num_seqs_low"], answer["max_num_seqs_high"], answer["at_cap"]
        summary.add_row(
            fmt(answer.get("context_tokens")),
            f"[bold]{answer['max_num_seqs']}[/]",
            f"{lo}–{hi}" if lo is not None else "",
            answer["binding"],
            fmt(at_statistic(at_cap["tpot_ms"], answer["slo"]["statistic"])),
            fmt(at_cap["throughput_tok_s"]),
        )
    console.print(summary)
    for answer in data["contexts"]:
        console.rule(f"context {fmt(answer.get('context_tokens'))}", style="dim")
        advice(console, answer, flags=False)
    first = data["contexts"][0]["engine_flags"]
    console.print(
        "set it with each engine's batch-cap flag ("
        + ", ".join(f"{engine} {flag.rsplit(' ', 1)[0]}" for engine, flag in first.items())
        + ") at the cap of the longest context the server must hold",
        highlight=False,
    )


def bench(console: Console, data: dict[str, Any]) -> None:
    table = Table(title=f"bench: steady-state windows (records in {data['out']})", title_justify="left")
    goodput = data.get("slo") is not None
    preempt = any(p.get("preemptions") is not None for p in data["points"])
    metered = any(p.get("power") for p in data["points"])
    columns = ("point", "batch", "tok/s", "TPOT ms p50/p90", "TTFT ms p50/p90", "req/s")
    extra = (
        *(("goodput",) if goodput else ()),
        *(("preempt",) if preempt else ()),
        *(("W", "J/token") if metered else ()),
    )
    for col in (*columns, *extra, "ok/failed", "status"):
        table.add_column(col, justify="right")
    for p in data["points"]:
        tpot, ttft = p["tpot_ms"], p["ttft_ms"]
        preempted = p.get("preemptions")
        status = "[green]ok[/]" if not p.get("invalid") else f"[red]{p['invalid']}[/]"
        if preempted and not p.get("invalid"):
            status = "[yellow]preempting[/]"  # measured, but past what the KV cache holds
        table.add_row(
            p["point"],
            fmt(p["batch"]),
            fmt(p["throughput_tok_s"]),
            f"{fmt(tpot['p50'])}/{fmt(tpot['p90'])}",
            f"{fmt(ttft['p50'])}/{fmt(ttft['p90'])}",
            fmt(p["request_throughput_req_s"]),
            *((fmt(p["goodput_req_s"]),) if goodput else ()),
            *(("—" if preempted is None else f"{preempted:,.0f}",) if preempt else ()),
            *(power_cells(p.get("power")) if metered else ()),
            f"{p['requests_completed']}/{p['requests_failed']}",
            status,
        )
    console.print(table)
    if preempt and any(p.get("preemptions") for p in data["points"]):
        console.print(
            "preempting: the server preempted sequences for KV-cache room in the window (its running batch is past "
            "what the cache holds: TPOT and TTFT there are the cache's, not the batch's)",
            style="yellow",
            highlight=False,
        )
    sources = list(dict.fromkeys(p["power"]["source"] for p in data["points"] if p.get("power")))
    for source in sources:  # where the watts come from, once
        console.print(f"power: {source}", style="dim", highlight=False)
    console.print(f"for predict: {data['out']}/summary.csv", style="dim", highlight=False)


def power_cells(power: dict[str, Any] | None) -> tuple[str, str]:
    """A point's mean power (all its GPUs) and energy per output token, or dashes where no meter was read."""
    if not power:
        return "—", "—"
    per_token = power.get("energy_j_per_output_token")
    return fmt(power["watts_mean"]), "—" if per_token is None else fmt(per_token)


def simulation(console: Console, data: dict[str, Any]) -> None:
    console.print(
        f"{data['requests']:,} requests over {fmt(data['simulated_s'])} s simulated ({data['steps']:,} steps): "
        f"{fmt(data['throughput_tok_s'])} tok/s, {fmt(data['request_throughput_req_s'])} req/s, goodput "
        f"{fmt(data['goodput_req_s'])} req/s, mean running batch {fmt(data['running_batch'])}",
        highlight=False,
    )
    if data.get("kv_cache_tokens"):
        console.print(
            f"KV cache {data['kv_cache_tokens']:,} tokens, {data['kv_use_mean_fraction']:.0%} used on "
            f"average, {data['preemptions']:,} preemptions",
            highlight=False,
        )
    split = data.get("disaggregation")
    if split:
        link = split["kv_transfer"]
        moved = split["kv_transfer_ms"]
        console.print(
            f"disaggregated: {split['prefill_replicas']} prefill{prefill_tp_text(split)} + {split['decode_replicas']} "
            f"decode replicas (figures per decode replica), prefill pool busy "
            f"{fmt_share(split['prefill_busy_fraction'])}; KV over "
            f"{fmt(link['bandwidth_gb_s'])} GB/s, {fmt(link['bytes_per_token'] / 1024)} KiB a token: transfers "
            f"{fmt(moved['p50'])} ms p50, {fmt(moved['p99'])} ms p99 (queue included)"
            if moved
            else "",
            highlight=False,
        )
    cached = data.get("prefix_cache")
    if cached and cached["hits_tokens"]:
        console.print(
            f"prefix cache: {cached['hit_rate']:.1%} of prompt tokens served from it ({cached['hits_tokens']:,} of "
            f"{cached['queries_tokens']:,} looked up)",
            highlight=False,
        )
    if data.get("cost"):
        console.print(f"the bill: {bill_line(data['cost'])}", highlight=False)
    table = Table(title="latency (ms)", title_justify="left")
    for col in ("metric", "mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right")
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_wait_ms"):
        row = data[key]
        table.add_row(key.removesuffix("_ms"), fmt(row["mean"]), fmt(row["p50"]), fmt(row["p90"]), fmt(row["p99"]))
    console.print(table)


def counted_as(count: int, noun: str) -> str:
    """'1 GPU', '2 GPUs': a count with its noun, singular for one."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def fmt_share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def bill_line(cost: dict[str, Any]) -> str:
    """A simulated run's cost and energy in one line, each with where its figures came from."""
    parts = []
    price, power = cost["price"], cost["power"]
    pools = cost.get("pools")
    other = pools is not None and "prefill_price" in pools  # a prefill pool on hardware of its own
    own_price = pools.get("prefill_price") if pools else None
    if pools and (price or own_price):
        if other:
            decode_at = f"{fmt(price['usd_per_hour'])} a decode GPU-hour ({price['source']})" if price else None
            prefill_at = (
                f"{fmt(own_price['usd_per_hour'])} a prefill one ({own_price['source']})"
                if own_price
                else "the prefill hardware has no price (--prefill-gpu-cost-per-hour)"
            )
            at = "at " + " and ".join(x for x in (decode_at or "no decode price (--gpu-cost-per-hour)", prefill_at))
        else:
            assert price is not None
            at = f"at {fmt(price['usd_per_hour'])} a GPU-hour, {price['source']}"
        parts.append(
            f"{money(cost['usd_per_million_output_tokens'])} US$ per million output tokens (the decode pool's "
            f"{counted_as(pools['decode_gpus'], 'GPU')}), {money(cost['usd_per_million_input_tokens'])} per million "
            "prompt tokens "
            f"(the prefill pool's {pools['prefill_gpus']}), {at}"
        )
    elif price:
        parts.append(
            f"{money(cost['usd_per_million_output_tokens'])} US$ per million output tokens, "
            f"{money(cost['usd_per_million_input_tokens'])} per million prompt tokens "
            f"({counted_as(cost['gpus'], 'GPU')} at "
            f"{fmt(price['usd_per_hour'])} an hour, {price['source']})"
        )
    if power and other and pools is not None and pools.get("prefill_power") is None:
        parts.append("energy unknown: the prefill hardware has no TDP (tdp_watts in its file)")
    elif power:
        boards = f" across {cost['gpus']} boards" if cost["gpus"] > 1 else ""
        own_power = (pools or {}).get("prefill_power")
        source = (
            power["source"]
            if not own_power
            else f"decode boards {power['source']}; prefill boards {own_power['source']}"
        )
        parts.append(
            f"{fmt(cost['energy_j_per_output_token'])} J per output token at {fmt(cost['power_watts_mean'])} W"
            f"{boards} (power {source})"
        )
    return "; ".join(parts)


def lengths_text(x: dict[str, Any]) -> str:
    kind = x["distribution"]
    how = "fixed" if kind == "fixed" else f"{kind}, {'±' if kind == 'uniform' else 'sigma '}{fmt(x['spread'])}"
    return f"{x['mean']:,} tokens ({how})"


def workload_line(w: dict[str, Any]) -> str:
    """plan's traffic in one line: what the answer assumes (--request-rate, --input-len/--output-len, --*-dist,
    --prefix-len/--num-prefixes)."""
    arrivals = "Poisson" if w["burstiness"] == 1 else f"gamma arrivals, burstiness {fmt(w['burstiness'])}"
    shared = w.get("shared_prefix")
    prefix = (
        f" whose first {shared['prefix_tokens']:,} are one of {shared['num_prefixes']} shared prefixes"
        if shared
        else ""
    )
    return (
        f"{fmt(w['request_rate_req_s'])} req/s ({arrivals}); prompts {lengths_text(w['input_len'])}{prefix}, "
        f"outputs {lengths_text(w['output_len'])}"
    )


def caching_line(choices: list[dict[str, Any]]) -> str | None:
    """Which wins, prefix caching on or off, and by how much (the fewest GPUs, or the cheapest, of each)."""
    best: dict[bool, dict[str, Any]] = {}
    for c in choices:
        if c["feasible"] and (c["prefix_caching"] not in best or c["gpus"] < best[c["prefix_caching"]]["gpus"]):
            best[c["prefix_caching"]] = c
    if {c["prefix_caching"] for c in choices} != {True, False}:
        return None
    on, off = best.get(True), best.get(False)
    if on is None and off is None:
        return "prefix caching: neither on nor off meets the targets"
    if on is None or off is None:
        return f"prefix caching: only {'on' if off is None else 'off'} meets the targets"
    if on["gpus"] == off["gpus"]:
        return f"prefix caching: on and off both need {gpus(on['gpus'])}"
    winner, loser = (on, off) if on["gpus"] < off["gpus"] else (off, on)
    return (
        f"prefix caching {'on' if winner is on else 'off'} wins: {gpus(winner['gpus'])} against {loser['gpus']} "
        f"({loser['gpus'] / winner['gpus']:.2g}× as many {'without' if winner is on else 'with'} it)"
    )


def gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def split_cell(split: dict[str, Any] | None) -> str:
    """A choice's split in the choices table: 'P (hardware) + D, N GPUs, $/hour', or why there is none."""
    if not split:
        return "—"
    if not split["feasible"] or split["gpus"] is None:
        return "none meets"
    own = f" ({split['prefill_hardware']})" if split.get("prefill_hardware") else ""
    cost = f", {fmt(split['cost_per_hour'])}/h" if split.get("cost_per_hour") is not None else ""
    return f"{split['prefill_replicas']}{own} + {split['decode_replicas']}, {split['gpus']} GPUs{cost}"


def prefill_tp_text(split: dict[str, Any]) -> str:
    """' (TP n)', ' (hardware)' or ' (hardware, TP n)' where the prefill pool has its own, else nothing."""
    own = [*([split["prefill_hardware"]] if split.get("prefill_hardware") else [])]
    own += [f"TP {split['prefill_tp']}"] if split.get("prefill_tp") else []
    return f" ({', '.join(own)})" if own else ""


def layout_line(colocated: dict[str, Any], split: dict[str, Any]) -> str:
    """Colocated or disaggregated: which needs fewer GPUs, and by how much."""
    if not split["feasible"]:
        return split["reason"]
    pools = (
        f"{split['prefill_replicas']} prefill{prefill_tp_text(split)} + {split['decode_replicas']} decode replicas, "
        f"{gpus(split['gpus'])}"
    )
    if not colocated.get("feasible") or colocated.get("gpus") is None:
        return f"{pools}: it meets the targets where colocation does not"
    ours, theirs = split["gpus"], colocated["gpus"]
    verdict = (
        "the same as colocated"
        if ours == theirs
        else f"{'fewer' if ours < theirs else 'more'} than colocated's {gpus(theirs)}: "
        f"{'disaggregated' if ours < theirs else 'colocated'} wins by {abs(theirs - ours)}"
    )
    ours_usd, theirs_usd = split.get("cost_per_hour"), colocated.get("cost_per_hour")
    if split.get("prefill_hardware"):  # GPUs of two kinds are not equals: compare by cost, or say it cannot
        if ours_usd is None or theirs_usd is None:
            verdict = f"colocated: {gpus(theirs)}; GPUs of two kinds without both prices cannot be compared"
        elif ours_usd == theirs_usd:
            verdict = f"{ours_usd:.2f} per hour, the same as colocated's ({gpus(theirs)})"
        else:
            cheaper = "disaggregated" if ours_usd < theirs_usd else "colocated"
            verdict = (
                f"{ours_usd:.2f} per hour against colocated's {theirs_usd:.2f} ({gpus(theirs)}): {cheaper} costs "
                f"{abs(theirs_usd - ours_usd) / max(ours_usd, theirs_usd):.0%} less"
            )
    stat = colocated["slo"]["statistic"]
    met = f"{stat} TTFT {fmt(split['ttft_ms'][stat])} ms, {stat} TPOT {fmt(split['tpot_ms'][stat])} ms"
    weighed = split.get("prefill_choices")  # several prefill hardware weighed: what each came to
    if weighed:
        each = [
            f"{c['prefill_hardware']} "
            + (
                "none meets"
                if not c["feasible"] or c["gpus"] is None
                else f"{c['gpus']} GPUs" + (f", {c['cost_per_hour']:.2f}/h" if c["cost_per_hour"] is not None else "")
            )
            for c in weighed
        ]
        met += f"; prefill hardware weighed: {'; '.join(each)}"
    return f"{pools} ({verdict}); {met}"


def judged(data: dict[str, Any], chosen: dict[str, Any]) -> str:
    """What plan's answer was judged on: its seeds' runs (and the fit's samples), each of so many requests (a run
    that had not settled was run again, longer)."""
    runs = "seeds and model samples" if data.get("model_samples") else "seeds"
    asked = (data.get("workload") or {}).get("num_requests")
    requests = chosen.get("requests")
    if requests is None:
        return runs
    longer = f", run longer than the {asked:,} asked to settle" if asked is not None and requests > asked else ""
    return f"{runs}, {requests:,} requests a run{longer}"


def plan_result(console: Console, data: dict[str, Any]) -> None:
    slo = data["slo"]
    if data.get("choices"):
        speculating = any(c.get("speculation") for c in data["choices"])
        caching = len({c.get("prefix_caching") for c in data["choices"]}) > 1
        weighed = ["hardware", "tensor-parallel", *(["speculation"] if speculating else [])]
        weighed += ["prefix caching"] if caching else []
        title = f"{', '.join(weighed[:-1])} and {weighed[-1]} choices"
        choices = Table(title=title, title_justify="left")
        extra = [*(["speculation"] if speculating else []), *(["prefix cache"] if caching else [])]
        splits = any(c.get("disaggregated") for c in data["choices"])
        for col in (
            "hardware",
            "tp",
            *extra,
            "meets",
            "GPUs",
            "cost/hour",
            *(["disaggregated"] if splits else []),
            "why",
        ):
            choices.add_column(col)
        for c in data["choices"]:
            cost = fmt(c["cost_per_hour"]) if c.get("cost_per_hour") is not None else "—"
            choices.add_row(
                str(c["hardware"]),
                str(c["tp"]),
                *([c.get("speculation") or "none"] if speculating else []),
                *(["on" if c["prefix_caching"] else "off"] if caching else []),
                "yes" if c["feasible"] else "no",
                str(c.get("gpus") or "—"),
                cost,
                *([split_cell(c.get("disaggregated"))] if splits else []),
                c["reason"],
            )
        console.print(choices)
        spec = data.get("speculation")
        with_spec = f", speculating ({spec['method']}, {spec['num_speculative_tokens']} drafts)" if spec else ""
        console.print(f"cheapest: [bold]{data.get('hardware')} ×tp{data.get('tp')}{with_spec}[/]", highlight=False)
        line = caching_line(data["choices"]) if caching else None
        if line:
            console.print(line, highlight=False)
    split = data.get("disaggregated")
    if split:
        console.print(f"disaggregated: {layout_line(data, split)}", highlight=False)
    stat = slo["statistic"]
    if data.get("workload"):
        console.print(f"workload: {workload_line(data['workload'])}", highlight=False)
    console.print(
        f"targets: {stat} TTFT ≤ {fmt(slo['ttft_ms'])} ms, {stat} TPOT ≤ {fmt(slo['tpot_ms'])} ms", highlight=False
    )
    chosen = data["chosen"]
    if chosen is None:
        console.print(f"[red]infeasible:[/] {data['reason']}", highlight=False)
    else:
        gpus = chosen["replicas"] * data.get("gpus_per_replica", 1)
        cost = f", {data['cost_per_hour']:.2f} per hour" if data.get("cost_per_hour") is not None else ""
        if data.get("usd_per_million_output_tokens") is not None:
            cost += f", {money(data['usd_per_million_output_tokens'])} US$ per million output tokens"
        router = data.get("router", "least-outstanding")
        if chosen["replicas"] > 1:  # named always: simulate's own default is round-robin, which needs less
            cost += f", behind a {router} router"
        console.print(
            f"[bold]{counted_as(chosen['replicas'], 'replica')} × max_num_seqs {chosen['max_num_seqs']}[/] "
            f"({counted_as(gpus, 'GPU')}{cost}): "
            f"{stat} TTFT {fmt(chosen['ttft_ms_low'][stat])}–{fmt(chosen['ttft_ms_high'][stat])} ms, {stat} TPOT "
            f"{fmt(chosen['tpot_ms_low'][stat])}–{fmt(chosen['tpot_ms_high'][stat])} ms over {judged(data, chosen)}; "
            + (chosen["binding"] if chosen["binding"].startswith("nearest:") else f"binding: {chosen['binding']}"),
            highlight=False,
        )
        energy = data.get("energy")
        if energy and energy["energy_j_per_output_token"] is not None:
            console.print(
                f"energy: {fmt(energy['energy_j_per_output_token'])} J per output token at "
                f"{fmt(energy['power_watts_mean'])} W for the answer's GPUs ({energy['power']['source']})",
                highlight=False,
            )
        console.print(data["reason"], style="dim", highlight=False)
    # each the worst of its runs (seeds × model samples), what the targets are judged on; --json has the median too
    table = Table(title="candidates tried (the worst of each one's runs, as judged)", title_justify="left")
    for col in (
        "replicas",
        "max_num_seqs",
        f"{stat} TTFT ms",
        f"{stat} TPOT ms",
        "tok/s",
        "preempt",
        "meets",
        "binding",
    ):
        table.add_column(col, justify="right")
    for t in data["points"]:
        table.add_row(
            str(t["replicas"]),
            str(t["max_num_seqs"]),
            f"{fmt(t['ttft_ms_high'][stat])}",
            f"{fmt(t['tpot_ms_high'][stat])}",
            fmt(t["throughput_tok_s_low"]),
            str(t["preemptions"]),
            "[green]yes[/]" if t["feasible"] else "no",
            t["binding"],
        )
    if data["points"]:  # none where the load needs more replicas than the search may try
        console.print(table)


def rate_sweep(console: Console, data: dict[str, Any]) -> None:
    table = Table(title="simulated load sweep (latencies in ms)", title_justify="left")
    closed = bool(data["points"]) and "concurrency" in data["points"][0]
    for col in (
        "concurrency" if closed else "req/s in",
        "req/s out",
        "goodput",
        "tok/s",
        "batch",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "preempt",
    ):
        table.add_column(col, justify="right")
    costs = [row.get("cost") or {} for row in data["points"]]
    priced = any(c.get("usd_per_million_output_tokens") is not None for c in costs)
    # the bill when a price is known (--gpu-cost-per-hour), as roofline prints it; watts and joules always in --json
    metered = priced and any(c.get("energy_j_per_output_token") is not None for c in costs)
    if priced:
        table.add_column("US$/M out", justify="right")
    if metered:
        table.add_column("J/token", justify="right")
    for row, cost in zip(data["points"], costs, strict=True):
        bill = [money(cost.get("usd_per_million_output_tokens"))] if priced else []
        bill += [fmt(cost.get("energy_j_per_output_token"))] if metered else []
        table.add_row(
            fmt(row["concurrency"] if closed else row["rate_req_s"]),
            fmt(row["request_throughput_req_s"]),
            fmt(row["goodput_req_s"]),
            fmt(row["throughput_tok_s"]),
            fmt(row["running_batch"]),
            fmt(row["ttft_ms"]["p50"]),
            fmt(row["ttft_ms"]["p99"]),
            fmt(row["tpot_ms"]["p50"]),
            fmt(row["tpot_ms"]["p99"]),
            str(row["preemptions"]),
            *bill,
        )
    console.print(table)
    sources = [c for c in costs if c.get("price")]
    if sources:
        said = []
        price, power = sources[0].get("price"), sources[0].get("power")
        if price:
            said.append(f"US$ at {fmt(price['usd_per_hour'])} a GPU-hour ({price['source']})")
        if power and metered:
            said.append(f"power {power['source']}")
        console.print("the bill: " + "; ".join(said), style="dim", highlight=False)


def model_list(console: Console, models: Sequence[ModelSpec]) -> None:
    table = Table(title="model presets (--model NAME, or a path to any config.json)", title_justify="left")
    for col in ("name", "type", "params", "layers", "hidden", "heads/kv", "experts", "max ctx"):
        table.add_column(col)
    for m in models:
        experts = f"{m.experts_per_token}/{m.num_experts}" if m.is_moe else "—"
        table.add_row(
            m.name,
            m.model_type,
            f"{m.total_params / 1e9:.2f}B",
            str(m.num_layers),
            str(m.hidden_size),
            f"{m.num_attention_heads}/{m.num_kv_heads}",
            experts,
            fmt(m.max_position_embeddings),
        )
    console.print(table)


def hardware_list(console: Console, chips: Sequence[HardwareSpec]) -> None:
    table = Table(title="hardware presets (--hardware NAME, or a path to a TOML); dense peaks", title_justify="left")
    for col in ("name", "chip", "memory GB", "bandwidth TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "link GB/s"):
        table.add_column(col)
    by_degree: list[str] = []  # where a small ring gets less of the link than the whole (the topology's)
    for hw in chips:
        peaks = hw.peak_flops_per_s
        link = hw.interconnect_bandwidth_bytes_per_s
        if hw.interconnect_bandwidth_at_tp:
            by_degree.append(
                f"{hw.key}: "
                + ", ".join(f"{fmt(v / 1e9)} at TP{k}" for k, v in sorted(hw.interconnect_bandwidth_at_tp.items()))
            )
        table.add_row(
            hw.key,
            hw.name,
            fmt(hw.memory_bytes / 1e9),
            fmt(hw.memory_bandwidth_bytes_per_s / 1e12),
            fmt(peaks.get("bf16", 0) / 1e12) if "bf16" in peaks else "—",
            fmt(peaks["fp8"] / 1e12) if "fp8" in peaks else "—",
            (fmt(link / 1e9) if link else "—") + ("*" if hw.interconnect_bandwidth_at_tp else ""),
        )
    console.print(table)
    if by_degree:
        console.print(
            f"* some rings get less of the link (GB/s each way, from that degree on): {'; '.join(by_degree)}",
            highlight=False,
            soft_wrap=True,
        )


def bench_local(console: Console, data: dict[str, Any]) -> None:
    m, p = data["model"], data["precision"]
    console.print(
        f"[bold]{m['name']}[/] ({m['total_params'] / 1e6:,.1f}M params, {m['attention']}) in {p['weight_dtype']} on "
        f"[bold]{data['device_name']}[/] ({data['device']}, {data['threads']} threads, torch {data['torch_version']})",
        highlight=False,
    )
    console.print(
        f"{data['mode']} mode; context {data['context']} tokens; TPOT = median of {data['timed_steps']} steps after "
        f"{data['warmup_steps']} warm-up; spread p10–p90; TTFT = prefill of one prompt",
        style="dim",
        highlight=False,
    )
    hw = data.get("hardware")
    table = Table()
    for col in ("batch", "TPOT ms", "p10–p90 ms", "tok/s", "TTFT ms", "GB/s", "GFLOP/s"):
        table.add_column(col, justify="right")
    if hw:
        for col in ("% of BW", "% of peak", "predicted ms", "error", "bound"):
            table.add_column(col, justify="right")
    metered = data.get("power_source") is not None
    if metered:
        for col in ("watts", "J/token"):
            table.add_column(col, justify="right")
    for pt in data["points"]:
        row = [
            fmt(pt["batch"]),
            fmt(pt["tpot_ms"]),
            f"{fmt(pt['tpot_ms_low'])}–{fmt(pt['tpot_ms_high'])}",
            fmt(pt["throughput_tok_s"]),
            fmt(pt["ttft_ms"]),
            fmt(pt["achieved_bytes_per_s"] / 1e9),
            fmt(pt["achieved_flops_per_s"] / 1e9),
        ]
        if hw:
            error = pt["predicted_tpot_ms"] / pt["tpot_ms"] - 1
            row += [
                f"{pt['bandwidth_fraction']:.0%}",
                f"{pt['flops_fraction']:.0%}",
                fmt(pt["predicted_tpot_ms"]),
                f"{error:+.0%}",
                bound_cell(pt["predicted_bound"]),
            ]
        if metered:
            row += [fmt(pt["power_watts"]), fmt(pt["energy_j_per_token"])]
        table.add_row(*row)
    console.print(table)
    if metered:
        console.print(f"power {data['power_source']}", style="dim", highlight=False)
    if hw:
        console.print(f"predicted: first principles on {hw['name']}", style="dim", highlight=False)


def calibration(console: Console, data: dict[str, Any]) -> None:
    console.print(
        f"[bold]{data['name']}[/] ({data['device']}, {data['threads']} threads, torch {data['torch_version']}); "
        f"kernel shapes: {data['shapes']}",
        highlight=False,
    )
    summary = Table.grid(padding=(0, 2))
    summary.add_row("STREAM-like copy (read + write)", f"[bold]{data['copy_bandwidth_bytes_per_s'] / 1e9:.1f}[/] GB/s")
    summary.add_row("STREAM-like read", f"[bold]{data['read_bandwidth_bytes_per_s'] / 1e9:.1f}[/] GB/s")
    summary.add_row("peak bandwidth written", f"[bold]{data['memory_bandwidth_bytes_per_s'] / 1e9:.1f}[/] GB/s")
    console.print(summary)
    table = Table()
    for col in ("dtype", "matvec GB/s", "attention GB/s", "GEMM GFLOP/s", "decode GEMM GFLOP/s", "overhead ms/layer"):
        table.add_column(col, justify="right")
    for dtype, gemv in data["gemv_bandwidth_bytes_per_s"].items():
        table.add_row(
            dtype,
            fmt(gemv / 1e9),
            fmt(data["attention_bandwidth_bytes_per_s"][dtype] / 1e9),
            fmt(data["gemm_flops_per_s"][dtype] / 1e9),
            fmt(data["decode_gemm_flops_per_s"][dtype] / 1e9),
            fmt(data["efficiencies"][dtype]["overhead_s_per_layer"] * 1e3),
        )
    console.print(table)
