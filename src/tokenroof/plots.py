"""matplotlib figures (optional extra `tokenroof[plot]`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.render import BOUND_STYLE
from tokenroof.units import MS_PER_S

if TYPE_CHECKING:
    from tokenroof.analysis import RooflineResult
    from tokenroof.predict import PredictResult
    from tokenroof.simulate import SimResult


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TokenroofError("--plot needs matplotlib: pip install 'tokenroof[plot]'") from None
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


def save(fig: Any, path: Path) -> None:
    try:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    except OSError as exc:
        raise TokenroofError(f"cannot write plot {path}: {exc.strerror}") from None


def plot_roofline(result: RooflineResult, path: Path) -> None:
    """Throughput and TPOT against batch, the bound regions shaded, knee and memory limit marked."""
    plt = _pyplot()
    sm, ctx = result.step_model, result.context_tokens
    lo, hi = float(result.batches.min()), float(result.batches.max())
    dense = np.geomspace(lo, hi, 200)
    fig, (ax_thr, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax in (ax_thr, ax_tpot):
        shade_bounds(ax, dense, sm.bound(dense, ctx))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (sequences decoded together)")
        knee = sm.knee_batch(ctx)
        if knee and lo <= knee <= hi:
            ax.axvline(knee, color="black", ls="--", lw=1, label=f"knee {knee:.0f}")
        limit = result.max_batch_by_memory
        if lo <= limit <= hi:
            ax.axvline(limit, color="red", ls=":", lw=1.2, label=f"memory limit {limit}")
    ax_thr.plot(dense, sm.throughput_tok_s(dense, ctx), color="black")
    ax_thr.axhline(sm.throughput_asymptote_tok_s(ctx), color="grey", ls="-.", lw=1, label="asymptote")
    ax_thr.set_ylabel("throughput (output tok/s)")
    ax_tpot.plot(dense, sm.step_time_s(dense, ctx) * MS_PER_S, color="black")
    ax_tpot.set_ylabel("TPOT (ms/token)")
    ax_thr.legend(fontsize=8, loc="upper left")
    fig.suptitle(
        f"{result.model.name} on {result.hardware.name} ×{result.tp}, {result.precision.weight_dtype}, context {ctx:g}"
    )
    save(fig, path)
    plt.close(fig)


def plot_prediction(result: PredictResult, path: Path) -> None:
    """Measured points, the fitted curve with its 90% band, bound regions and the critical batch."""
    from tokenroof.predict import PredictResult

    table, fit = result.table, result.fit
    cap = fit.curve.cap
    lo = float(min(table.batch.min(), result.batches.min()))
    hi = float(max(table.batch.max(), result.batches.max()))
    dense = np.geomspace(lo, hi * 1.05, 200)
    plt = _pyplot()
    band_of = PredictResult(table, fit, dense, result.prior).predictions()
    tpot = np.array([r["tpot_ms"] for r in band_of]) / MS_PER_S
    thr = np.array([r["throughput_tok_s"] for r in band_of])
    low_high = {
        1: (
            np.array([r["throughput_tok_s_low"] for r in band_of]),
            np.array([r["throughput_tok_s_high"] for r in band_of]),
        ),
        0: (
            np.array([r["tpot_ms_low"] for r in band_of]) / MS_PER_S,
            np.array([r["tpot_ms_high"] for r in band_of]) / MS_PER_S,
        ),
    }
    fig, (ax_thr, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.5))
    bounds = fit.step_model.bound(dense if cap is None else np.minimum(dense, cap))
    for ax, curve, index, scale in ((ax_thr, thr, 1, 1.0), (ax_tpot, tpot, 0, MS_PER_S)):
        shade_bounds(ax, dense, bounds)
        ax.fill_between(
            dense,
            low_high[index][0] * scale,
            low_high[index][1] * scale,
            color="grey",
            alpha=0.3,
            label="90% interval",
        )
        ax.plot(
            dense,
            curve * scale,
            color="black",
            label="fit (" + ", ".join(f"{k} {w:.0%}" for k, w in fit.weights.items() if w >= 0.005) + ")",
        )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        crit = result.critical_batch()[0]
        if crit is not None and lo <= crit <= hi * 1.05:
            ax.axvline(crit, color="red", ls="--", lw=1, label=f"critical batch {crit:.0f}")
    ax_thr.scatter(table.batch, table.throughput_tok_s, color="tab:blue", zorder=5, label="measured")
    ax_tpot.scatter(table.batch, table.tpot_ms, color="tab:blue", zorder=5, label="measured")
    ax_thr.set_ylabel("throughput (output tok/s)")
    ax_tpot.set_ylabel("TPOT (ms/token)")
    ax_thr.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"tokenroof predict: {Path(table.source.split(',')[0]).name}")
    save(fig, path)
    plt.close(fig)


def plot_simulation(result: SimResult, path: Path) -> None:
    """Running batch and KV-cache use over time (first replica's steps interleaved with the others')."""
    plt = _pyplot()
    order = np.argsort(result.step_starts_s)
    t = result.step_starts_s[order]
    fig, (ax_batch, ax_kv) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True)
    ax_batch.plot(t, result.step_batches[order], lw=0.6, color="black")
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
        f"{result.preemptions} preemptions"
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
    ax_ttft.axhline(data["slo"]["ttft_ms"], color="red", ls="--", label="target")
    ax_tpot.axhline(data["slo"]["tpot_ms"], color="red", ls="--", label="target")
    for ax, name in ((ax_ttft, f"{stat} TTFT (ms)"), (ax_tpot, f"{stat} TPOT (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("max_num_seqs")
        ax.set_ylabel(name)
        ax.legend(fontsize=8)
    chosen = data.get("chosen")
    fig.suptitle(
        "tokenroof plan"
        + (f": {chosen['replicas']} × max_num_seqs {chosen['max_num_seqs']}" if chosen else ": infeasible")
    )
    save(fig, path)
    plt.close(fig)


def plot_rate_sweep(rows: list[dict[str, Any]], path: Path) -> None:
    """Latency percentiles and goodput against the request rate."""
    plt = _pyplot()
    rates = [r["rate_req_s"] for r in rows]
    fig, (ax_ttft, ax_tpot, ax_good) = plt.subplots(1, 3, figsize=(15, 4.2))
    for q, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
        ax_ttft.plot(rates, [r["ttft_ms"][q] for r in rows], style, marker="o", label=q)
        ax_tpot.plot(rates, [r["tpot_ms"][q] for r in rows], style, marker="o", label=q)
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel("TTFT (ms)")
    ax_tpot.set_ylabel("TPOT (ms)")
    ax_good.plot(rates, rates, color="grey", ls=":", label="offered")
    ax_good.plot(rates, [r["request_throughput_req_s"] for r in rows], marker="o", label="served")
    ax_good.plot(rates, [r["goodput_req_s"] for r in rows], marker="o", label="goodput (SLOs met)")
    ax_good.set_ylabel("requests/s")
    for ax in (ax_ttft, ax_tpot, ax_good):
        ax.set_xlabel("request rate (req/s)")
        ax.legend(fontsize=8)
    fig.suptitle("tokenroof simulate: latency and goodput against load")
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
