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
    from tokenroof.predict import evaluate

    plt = _pyplot()
    table, fit = result.table, result.fit
    cap = result.prior.max_batch if result.prior else None
    lo = float(min(table.batch.min(), result.batches.min()))
    hi = float(max(table.batch.max(), result.batches.max()))
    dense = np.geomspace(lo, hi * 1.05, 200)
    tpot, thr = evaluate(fit.step_model, dense, cap)
    draws = [evaluate(m, dense, cap) for m in fit.sample_models()]
    fig, (ax_thr, ax_tpot) = plt.subplots(1, 2, figsize=(12, 4.5))
    bounds = fit.step_model.bound(dense if cap is None else np.minimum(dense, cap))
    for ax, curve, index, scale in ((ax_thr, thr, 1, 1.0), (ax_tpot, tpot, 0, MS_PER_S)):
        shade_bounds(ax, dense, bounds)
        band = np.array([d[index] for d in draws]) * scale
        ax.fill_between(
            dense,
            np.percentile(band, 5, axis=0),
            np.percentile(band, 95, axis=0),
            color="grey",
            alpha=0.3,
            label="90% interval",
        )
        ax.plot(dense, curve * scale, color="black", label=f"fit ({fit.method})")
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
