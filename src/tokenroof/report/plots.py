"""matplotlib figures (optional extra `tokenroof[plot]`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.style import BOUND_STYLE
from tokenroof.units import MS_PER_S

if TYPE_CHECKING:
    from tokenroof.fit.predict import PredictResult
    from tokenroof.model.analysis import RooflineResult
    from tokenroof.serving.deployment import Deployment
    from tokenroof.serving.simulate import SimResult


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ParameterError("{} needs matplotlib: pip install 'tokenroof[plot]'", "plot") from None
    return plt


def shade_bounds(ax: Any, batches: np.ndarray, bounds: np.ndarray) -> None:
    """Colour the background by the binding resource between consecutive batches."""
    edges = np.sqrt(batches[1:] * batches[:-1])
    lefts = np.concatenate([[batches[0] / 1.2], edges])
    rights = np.concatenate([edges, [batches[-1] * 1.2]])
    seen = set()
    for left, right, bound in zip(lefts, rights, bounds, strict=True):
        label = None if bound in seen else f"{bound}-bound"
        seen.add(bound)
        ax.axvspan(left, right, color=BOUND_STYLE.get(str(bound), "grey"), alpha=0.12, label=label, lw=0)


def matplotlib_ticker() -> Any:
    import matplotlib.ticker

    return matplotlib.ticker


def save(fig: Any, path: Path) -> None:
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as exc:
        raise TokenroofError(f"cannot write plot {path}: {exc.strerror}") from None


def plot_roofline(results: Sequence[RooflineResult], path: Path) -> None:
    """Throughput and TPOT against batch, one curve per context; the bound regions shaded (one context), the knee
    and each context's memory limit marked."""
    plt = _pyplot()
    first = results[0]
    lo, hi = float(first.batches.min()), float(first.batches.max())
    dense = np.geomspace(lo, hi, 200)
    fig, (ax_thr, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax in (ax_thr, ax_tpot):
        if len(results) == 1:
            shade_bounds(ax, dense, first.step_model.bound(dense, first.kv_context_tokens))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (sequences decoded together)")
    for i, result in enumerate(results):
        color = "black" if len(results) == 1 else f"C{i}"
        sm, ctx = result.step_model, result.kv_context_tokens
        label = f"context {result.context_tokens:g}"
        ax_thr.plot(dense, sm.throughput_tok_s(dense, ctx), color=color, label=label)
        ax_tpot.plot(dense, sm.step_time_s(dense, ctx) * MS_PER_S, color=color, label=label)
        knee, limit = sm.knee_batch(ctx), result.max_batch_by_memory
        for ax in (ax_thr, ax_tpot):
            if knee and lo <= knee <= hi:
                ax.axvline(knee, color=color, ls="--", lw=1, label=f"knee {knee:.0f}")
            if lo <= limit <= hi:
                ax.axvline(limit, color="red" if len(results) == 1 else color, ls=":", lw=1.2,
                           label=f"memory limit {limit}")  # fmt: skip
        if len(results) == 1:
            ax_thr.axhline(sm.throughput_asymptote_tok_s(ctx), color="grey", ls="-.", lw=1, label="asymptote")
    ax_thr.set_ylabel("throughput (output tok/s)")
    ax_tpot.set_ylabel("TPOT (ms/token)")
    ax_thr.legend(fontsize=8, loc="upper left")
    contexts = ", ".join(f"{r.context_tokens:g}" for r in results)
    fig.suptitle(
        f"{first.model.name} on {first.hardware.name} ×{first.tp}, {first.precision.weight_dtype}, context {contexts}"
    )
    save(fig, path)
    plt.close(fig)


def prediction_marks(result: PredictResult) -> list[tuple[float | None, str, str, str]]:
    """(batch, label, colour, line style) for the critical batch, the knee and the memory limit of a prediction."""
    crit = result.critical_batch()[0]
    knee = result.fit.step_model.knee_batch(0.0)
    limit = result.prior.max_batch if result.prior is not None else None
    return [
        (crit, f"critical batch {crit:.0f}" if crit else "", "red", "--"),
        (knee, f"knee {knee:.0f}" if knee else "", "black", "-."),
        (limit, f"memory limit {limit}", "darkred", ":"),
    ]


def mark_batches(ax: Any, marks: list[tuple[float | None, str, str, str]], lo: float, hi: float) -> None:
    """Vertical lines at the marked batches that fall inside [lo, hi]; the same batch is drawn once."""
    drawn: list[float] = []
    for batch, label, colour, style in marks:
        if batch is None or not lo <= batch <= hi or any(abs(batch - d) < 1e-9 for d in drawn):
            continue
        drawn.append(batch)
        ax.axvline(batch, color=colour, ls=style, lw=1, label=label)


def prediction_title(result: PredictResult) -> str:
    """Every input file by name, and the model and hardware of the prior when one was given."""
    names = [Path(part.strip()).name for part in result.table.source.split(", ") if part.strip()]
    title = "tokenroof predict: " + (", ".join(names) or "measurements")
    if result.prior is not None:
        title += f" — prior: {result.prior.label}"
    return title


def prediction_band(result: PredictResult, dense: np.ndarray, context: float | None = None) -> dict[str, np.ndarray]:
    """The fit and its 90% band over `dense` (at `context`; None: as fitted), as predict's rows give them, one array
    per column."""
    from tokenroof.fit.predict import PredictResult

    asked = None if context is None else [context]
    rows = PredictResult(result.table, result.fit, dense, result.prior, contexts=asked).predictions()
    keys = ("throughput_tok_s", "throughput_tok_s_low", "throughput_tok_s_high", "tpot_ms", "tpot_ms_low")
    return {key: np.array([r[key] for r in rows]) for key in (*keys, "tpot_ms_high")}


def plot_prediction(result: PredictResult, path: Path) -> None:
    """Measured points, the fitted curve with its 90% band, bound regions, the critical batch, the knee and the
    memory limit (drawn when within twice the largest batch shown)."""
    table, fit = result.table, result.fit
    cap = fit.curve.cap
    marks = prediction_marks(result)
    lo = float(min(table.batch.min(), result.batches.min()))
    hi = float(max(table.batch.max(), result.batches.max()))
    hi = max([hi] + [b for b, *_ in marks if b is not None and b <= 2 * hi])
    dense = np.geomspace(lo, hi * 1.05, 200)
    plt = _pyplot()
    fig, (ax_thr, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.5))
    weights = ", ".join(f"{k} {w:.0%}" for k, w in fit.weights.items() if w >= 0.005)
    if result.contexts:
        plot_contexts(result, dense, (ax_thr, ax_tpot), weights)
    else:
        band = prediction_band(result, dense)
        bounds = fit.step_model.bound(dense if cap is None else np.minimum(dense, cap))
        for ax, key in ((ax_thr, "throughput_tok_s"), (ax_tpot, "tpot_ms")):
            shade_bounds(ax, dense, bounds)
            ax.fill_between(
                dense, band[f"{key}_low"], band[f"{key}_high"], color="grey", alpha=0.3, label="90% interval"
            )
            ax.plot(dense, band[key], color="black", label=f"fit ({weights})")
        ax_thr.scatter(table.batch, table.throughput_tok_s, color="tab:blue", zorder=5, label="measured")
        ax_tpot.scatter(table.batch, table.tpot_ms, color="tab:blue", zorder=5, label="measured")
    for ax in (ax_thr, ax_tpot):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        mark_batches(ax, marks, lo, hi * 1.05)
    ax_thr.set_ylabel("throughput (output tok/s)")
    ax_tpot.set_ylabel("TPOT (ms/token)")
    ax_thr.legend(fontsize=8, loc="upper left")
    if result.contexts:
        ax_tpot.legend(fontsize=8, loc="upper left")
    fig.suptitle(prediction_title(result), fontsize=11)
    save(fig, path)
    plt.close(fig)


def plot_contexts(result: PredictResult, dense: np.ndarray, axes: tuple[Any, Any], weights: str) -> None:
    """One fitted curve and band per context asked, in its own colour, with the points measured at that context;
    points measured at contexts not asked in grey."""
    table = result.table
    levels = table.levels
    measured_at: list[float | None] = [*table.level_contexts()] or [None]
    asked = list(result.contexts or [])
    colours = _pyplot().get_cmap("viridis")(np.linspace(0.0, 0.85, len(asked)))
    for i, (context, colour) in enumerate(zip(asked, colours, strict=True)):
        band = prediction_band(result, dense, context)
        label = f"context {context:g}" + (f" (fit: {weights})" if i == 0 else "")
        for ax, key in zip(axes, ("throughput_tok_s", "tpot_ms"), strict=True):
            ax.fill_between(dense, band[f"{key}_low"], band[f"{key}_high"], color=colour, alpha=0.15)
            ax.plot(dense, band[key], color=colour, label=label)
    for k, at in enumerate(measured_at):
        here = levels == k
        near = [c for c in range(len(asked)) if at is not None and abs(at / asked[c] - 1) < 0.1]
        colour = colours[near[0]] if near else "lightgrey"
        label = "measured" if near else f"measured at context {at:g}" if at is not None else "measured"
        axes[0].scatter(table.batch[here], table.throughput_tok_s[here], color=colour, edgecolor="black", zorder=5)
        axes[1].scatter(table.batch[here], table.tpot_ms[here], color=colour, edgecolor="black", zorder=5, label=label)


def plot_simulation(result: SimResult, path: Path, max_num_seqs: int | None = None, setting: str | None = None) -> None:
    """Running batch (against the max_num_seqs cap, when given) and KV-cache use over time (first replica's steps
    interleaved with the others'); `setting` (`deployment_label`) goes in the title."""
    plt = _pyplot()
    order = np.argsort(result.step_starts_s)
    t = result.step_starts_s[order]
    fig, (ax_batch, ax_kv) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    ax_batch.plot(t, result.step_batches[order], lw=0.6, color="black")
    if max_num_seqs is not None:
        ax_batch.axhline(max_num_seqs, color="red", ls="--", lw=1, label=f"max_num_seqs {max_num_seqs}")
        ax_batch.legend(fontsize=8, loc="lower right")
    ax_batch.set_ylabel("running batch")
    if result.kv_capacity_tokens:
        per_replica = result.kv_capacity_tokens / result.replicas
        ax_kv.plot(t, result.step_kv_tokens[order] / per_replica, lw=0.6, color="tab:orange")
        ax_kv.set_ylabel("KV cache used (fraction)")
        ax_kv.set_ylim(0, 1.05)
    else:
        ax_kv.plot(t, result.step_kv_tokens[order], lw=0.6, color="tab:orange")
        ax_kv.set_ylabel("KV cache tokens")
    ax_kv.set_xlabel("simulated time (s)")
    fig.suptitle(
        f"tokenroof simulate: {len(result.sequences):,} requests, {result.replicas} replica(s), "
        f"{result.preemptions} preemptions" + (f"\n{setting}" if setting else ""),
        fontsize=11,
    )
    save(fig, path)
    plt.close(fig)


def plot_plan(data: dict[str, Any], path: Path) -> None:
    """The plan's frontier: TTFT and TPOT (the SLO's statistic, worst run) of every candidate against the targets."""
    plt = _pyplot()
    stat = data["slo"]["statistic"]
    fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.5))
    for replicas in sorted({t["replicas"] for t in data["points"]}):
        rows = sorted((t for t in data["points"] if t["replicas"] == replicas), key=lambda t: t["max_num_seqs"])
        caps = [t["max_num_seqs"] for t in rows]
        ax_ttft.plot(caps, [t["ttft_ms_high"][stat] for t in rows], marker="o", label=f"{replicas} replicas")
        ax_tpot.plot(caps, [t["tpot_ms_high"][stat] for t in rows], marker="o", label=f"{replicas} replicas")
    target_lines(ax_ttft, data["slo"]["ttft_ms"], "target")
    target_lines(ax_tpot, data["slo"]["tpot_ms"], "target")
    ax_ttft.set_yscale("log")  # TTFT spans orders of magnitude once requests queue
    ax_ttft.yaxis.set_major_formatter(matplotlib_ticker().FuncFormatter(lambda v, _: f"{v:g}"))
    ax_tpot.set_ylim(bottom=0)  # TPOT grows about linearly with the cap: a linear axis reads the target directly
    ax_tpot.yaxis.set_major_locator(matplotlib_ticker().MaxNLocator(nbins=10, steps=[1, 2, 2.5, 5, 10]))
    for ax, name in ((ax_ttft, f"{stat} TTFT (ms)"), (ax_tpot, f"{stat} TPOT (ms)")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib_ticker().FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("max_num_seqs")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    chosen = data.get("chosen")
    where = f" on {data['hardware']} ×{data.get('tp', 1)}" if data.get("hardware") else ""
    fig.suptitle(
        f"tokenroof plan{where}"
        + (f": {chosen['replicas']} × max_num_seqs {chosen['max_num_seqs']}" if chosen else ": infeasible")
    )
    save(fig, path)
    plt.close(fig)


def deployment_label(dep: Deployment) -> str:
    """'llama-3.1-8b on h100-sxm ×1, 1000 in / 300 out tokens (fixed)': what a simulation's plot title names."""
    physics = dep.physics
    if dep.step_model_file is not None:
        what = f"step model {Path(dep.step_model_file).name}"
    elif dep.fit is not None:
        names = [f.name for f in dep.fit_files]
        shown = names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"
        what = f"fitted to {shown}" + (f" (prior {physics.label()})" if physics.known else "")
    else:
        what = physics.label()
    if dep.input_len is not None and dep.output_len is not None:
        kinds = {dep.input_len.kind, dep.output_len.kind}
        what += f", {dep.input_len.mean} in / {dep.output_len.mean} out tokens ({'/'.join(sorted(kinds))})"
    return what


def target_lines(ax: Any, value: float | None, label: str) -> None:
    if value is not None:
        ax.axhline(value, color="red", ls="--", lw=1, label=f"{label} {value:g} ms")


def plot_rate_sweep(rows: list[dict[str, Any]], path: Path, setting: str | None = None) -> None:
    """Latency percentiles and goodput against the request rate, the targets (each row's `slo`) drawn; `setting`
    (model, hardware, workload: `deployment_label`) goes in the title."""
    plt = _pyplot()
    closed = "concurrency" in rows[0]  # a closed-loop sweep: against the concurrency, nothing "offered"
    rates = [r["concurrency"] if closed else r["rate_req_s"] for r in rows]
    slo = rows[0].get("slo") or {}
    fig, (ax_ttft, ax_tpot, ax_good) = plt.subplots(1, 3, figsize=(15, 4.2))
    for q, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
        ax_ttft.plot(rates, [r["ttft_ms"][q] for r in rows], style, marker="o", label=q)
        ax_tpot.plot(rates, [r["tpot_ms"][q] for r in rows], style, marker="o", label=q)
    target_lines(ax_ttft, slo.get("ttft_ms"), "target")
    target_lines(ax_tpot, slo.get("tpot_ms"), "target")
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel("TTFT (ms)")
    ax_tpot.set_ylabel("TPOT (ms)")
    if not closed:
        ax_good.plot(rates, rates, color="grey", ls=":", label="offered")
    ax_good.plot(rates, [r["request_throughput_req_s"] for r in rows], marker="o", label="served")
    ax_good.plot(rates, [r["goodput_req_s"] for r in rows], marker="o", label="goodput (SLOs met)")
    ax_good.set_ylabel("requests/s")
    for ax in (ax_ttft, ax_tpot, ax_good):
        ax.set_xlabel("concurrency (closed loop)" if closed else "request rate (req/s)")
        ax.legend(fontsize=8)
    fig.suptitle("tokenroof simulate: latency and goodput against load" + (f" — {setting}" if setting else ""))
    save(fig, path)
    plt.close(fig)


def plot_bench_local(data: dict[str, Any], path: Path) -> None:
    """Measured TPOT (p10–p90 bars) and throughput against batch, with the first-principles curve if given."""
    plt = _pyplot()
    points = data["points"]
    batch = np.array([p["batch"] for p in points], dtype=float)
    tpot = np.array([p["tpot_ms"] for p in points])
    low = tpot - np.array([p["tpot_ms_low"] for p in points])
    high = np.array([p["tpot_ms_high"] for p in points]) - tpot
    fig, (ax_t, ax_x) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax_t.errorbar(batch, tpot, yerr=[np.maximum(low, 0), np.maximum(high, 0)], fmt="o-", capsize=3, label="measured")
    ax_x.plot(batch, batch * 1e3 / tpot, "o-", label="measured")
    if data.get("hardware"):
        predicted = np.array([p["predicted_tpot_ms"] for p in points])
        ax_t.plot(batch, predicted, "k--", label="first principles")
        ax_x.plot(batch, batch * 1e3 / predicted, "k--", label="first principles")
        shade_bounds(ax_t, batch, np.array([p["predicted_bound"] for p in points]))
    ax_t.set(
        xscale="log",
        xlabel="batch",
        ylabel="TPOT (ms)",
        title=f"{data['model']['name']} {data['precision']['weight_dtype']}",
    )
    ax_x.set(xscale="log", xlabel="batch", ylabel="throughput (tok/s)", title=data["device_name"])
    for ax in (ax_t, ax_x):
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    save(fig, path)
    plt.close(fig)


def plot_bench(summary_points: list[dict[str, Any]], path: Path, label: str | None = None) -> None:
    """bench's levels (each point's summary, as summary.json holds them): TTFT, TPOT and ITL percentiles and the
    requests/s served and within the targets (goodput) against concurrency or rate; invalid levels crossed out.
    `label` (what was measured: the run's folder, or a redacted server URL) goes in the title."""
    plt = _pyplot()
    points = sorted(summary_points, key=lambda p: (p.get("kind", ""), p["value"]))
    kinds = sorted({p.get("kind", "concurrency") for p in points}) or ["concurrency"]
    fig, axes = plt.subplots(len(kinds), 4, figsize=(18, 4.2 * len(kinds)), squeeze=False)
    for row, kind in zip(axes, kinds, strict=True):
        level = [p for p in points if p.get("kind", "concurrency") == kind]
        bench_row(row, level, kind)
    fig.suptitle("tokenroof bench" + (f": {label}" if label else ""))
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


def bench_row(axes: Any, points: list[dict[str, Any]], kind: str) -> None:
    """One kind of level (concurrency or rate): three latency panels and the requests/s panel."""
    x = np.array([p["value"] for p in points], dtype=float)
    bad = np.array([bool(p.get("invalid")) for p in points])
    for ax, key in zip(axes[:3], ("ttft_ms", "tpot_ms", "itl_ms"), strict=True):
        for q, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
            y = np.array([(p.get(key) or {}).get(q) for p in points], dtype=float)
            ax.plot(x, y, style, marker="o", label=q)
            if q == "p50" and bad.any():
                ax.scatter(x[bad], y[bad], marker="x", s=80, color="red", zorder=6, label="invalid level")
        ax.set_ylabel(f"{key.removesuffix('_ms').upper()} (ms)")
    axes[3].plot(x, [p["request_throughput_req_s"] for p in points], marker="o", label="served")
    axes[3].plot(x, [p["goodput_req_s"] for p in points], marker="o", label="goodput (targets met)")
    axes[3].set_ylabel("requests/s")
    for ax in axes:
        if x.size and x.min() > 0 and x.max() / x.min() >= 8:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(matplotlib_ticker().FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("concurrency" if kind == "concurrency" else "request rate (req/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
