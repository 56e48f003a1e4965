"""How far `predict` can be trusted, on published curves: in-range fidelity, extrapolation, interval coverage.

For every curve in benchmarks/curves (or the folders given), data-only and with the
physics prior where the curve's header names the model and hardware:

- **in range**: fit all points, predict them; a curve passes when every point is within
  10% (or within 2× the fit's own residual where the curve's noise is larger). The
  knee-shaped table of issue 11 is checked the same way.
- **extrapolation** (DESIGN.md's protocol): fit the first max(3, n // 2) points, predict
  the rest; median and 90th percentile of |TPOT error| and |throughput error|, beside
  the linear baseline TPOT = a + c·b (weighted by 1/TPOT).
- **coverage** of the 90% intervals on those held-out points, leave-one-curve-out: the
  interval constants (intervals.py) are learned from every prefix split of the *other*
  curves, then scored on the left-out curve's protocol split.

    python benchmarks/accuracy.py [CURVE_DIR ...] [--verbose] [--write] [--external] [--engine]

`--write` stores the interval constants learned on all curves in src/tokenroof/fit/data/intervals.json.
`--external` scores curves nobody tuned to as a user meets them: with the shipped constants, nothing learned
from them (the same in-range, extrapolation and coverage figures).

The prior is built as `predict --model --hardware --dtype --tp` builds it (`--engine`: with the engine profile the
header names, as `predict --engine`): the table's lengths give the context its KV reads and memory cap need, and
a curve that states no lengths runs data only in both modes, as `predict` refuses a prior without a context.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from curve_headers import CurveSetup, engine_of, read_setup
from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.fit import intervals
from tokenroof.fit.core import Prior
from tokenroof.fit.physics import Physics
from tokenroof.fit.predict import MeasuredWorkload, predict_table, prior_for, step_interval_samples
from tokenroof.io.measurements import MeasurementTable, read_table

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "benchmarks" / "curves"  # the published curves, each with its source (a copy of ../shared)
SAMPLES = 40  # interval samples per fit
KNEE_TABLE = ROOT / "tests" / "data" / "issue11_knee.csv"
MODES = ("data", "prior")


@dataclass
class Curve:
    name: str
    table: MeasurementTable
    prior: Prior | None


@dataclass
class Held:
    """Held-out predictions of one fit: what the interval calibration learns from and is scored on."""

    curve: str
    log_error: np.ndarray  # log(measured / predicted)
    sample_sd: np.ndarray
    sigma: np.ndarray
    distance: np.ndarray
    tpot_err: np.ndarray  # |%|
    thr_err: np.ndarray


def load(dirs: list[Path], with_engine: bool = False) -> list[Curve]:
    curves = []
    for path in sorted(f for d in dirs for f in d.glob("*.csv")):
        try:
            table = read_table([path])
        except TokenroofError as exc:
            print(f"{path.name}: skipped ({exc})")
            continue
        setup = read_setup(table.provenance)
        if not table.semantics.stated:  # the shared curves describe their columns in prose
            table = replace(table, semantics=setup.semantics)
        prior = None
        if setup.model and setup.hardware:
            prior = prior_of(table, setup, engine_of("\n".join(table.provenance)) if with_engine else None)
            if prior is None:  # as `predict` refuses it
                print(f"{path.name}: data only in both modes (no lengths or context stated: the prior needs them)")
        curves.append(Curve(path.name, table, prior))
    return curves


def prior_of(table: MeasurementTable, setup: CurveSetup, engine: str | None) -> Prior | None:
    """The physics prior as `predict --model --hardware --dtype --tp [--engine]` builds it for the table: its
    stated lengths, else the header prose's (what a user passes as --input-len/--output-len). None where `predict`
    refuses it for want of the context its KV reads and memory cap need (MeasuredWorkload.from_table's refusal)."""
    physics = Physics(setup.model, setup.hardware, setup.dtype, tp=setup.tp, engine=engine)
    w, stated = setup.workload, table.semantics.input_len is not None and table.semantics.output_len is not None
    flags = MeasuredWorkload(
        w.context_tokens, None if stated else w.input_len, None if stated else w.output_len, w.decode_only
    )
    try:
        MeasuredWorkload.from_table(table, flags.context_tokens, flags.input_len, flags.output_len, flags.decode_only)
    except ParameterError:
        return None
    return prior_for(table, physics, flags)


def split(table: MeasurementTable, k: int) -> tuple[MeasurementTable, MeasurementTable]:
    rest = slice(k, None)
    test = MeasurementTable(table.batch[rest], table.tpot_ms[rest], table.throughput_tok_s[rest])
    return table.head(k), test


def held_out(curve: Curve, mode: str, k: int) -> Held:
    train, test = split(curve.table, k)
    prior = curve.prior if mode == "prior" else None
    result = predict_table(train, test.batch, prior, n_samples=SAMPLES)
    tpot_s, sd = step_interval_samples(result.fit, test.batch)
    rows = result.predictions()
    thr = np.array([r["throughput_tok_s"] for r in rows])
    low, high = result.fit.batch_range
    log_error = np.log(test.tpot_ms / (tpot_s * 1e3))
    return Held(
        curve.name,
        log_error,
        sd,
        np.full(test.batch.size, result.fit.sigma_rel),
        intervals.distance_doublings(test.batch, low, high),
        np.abs(tpot_s * 1e3 / test.tpot_ms - 1) * 100,
        np.abs(thr / test.throughput_tok_s - 1) * 100,
    )


def protocol_k(n: int) -> int:
    return max(3, n // 2)


def concat(helds: list[Held]) -> tuple[np.ndarray, ...]:
    return tuple(
        np.concatenate([getattr(h, f) for h in helds]) for f in ("log_error", "sample_sd", "sigma", "distance")
    )


def in_range(curves: list[Curve], mode: str, verbose: bool) -> tuple[int, int, list[str]]:
    passed, failures = 0, []
    tables = [(c.name, c.table, c.prior if mode == "prior" else None) for c in curves]
    tables.append(("issue-11 knee table", read_table([KNEE_TABLE]), None))
    for name, table, prior in tables:
        result = predict_table(table, table.batch, prior, n_samples=0)
        pred = np.array([r["tpot_ms"] for r in result.predictions()])
        err = np.abs(pred / table.tpot_ms - 1)
        limit = max(0.10, 2 * result.fit.sigma_rel)
        excluded = set(result.fit.excluded.batches) if result.fit.excluded else set()
        counted = np.array([b not in excluded for b in table.batch])
        worst = float(err[counted].max())
        if worst <= limit:
            passed += 1
        else:
            failures.append(f"{name}: worst {worst:.1%} > {limit:.1%}")
        if verbose:
            print(f"    in-range {mode:5s} {name[:50]:50s} worst {worst:6.1%} (limit {limit:.1%}) {result.fit.method}")
    return passed, len(tables), failures


def linear_baseline(curve: Curve) -> np.ndarray:
    train, test = split(curve.table, protocol_k(len(curve.table)))
    w = 1 / train.tpot_ms
    design = np.column_stack([np.ones_like(train.batch), train.batch]) * w[:, None]
    coef, *_ = np.linalg.lstsq(design, train.tpot_ms * w, rcond=None)
    return np.abs((coef[0] + coef[1] * test.batch) / test.tpot_ms - 1) * 100


def report(
    curves: list[Curve], mode: str, verbose: bool, how: str, tpot: np.ndarray, more: str, covered: np.ndarray
) -> None:
    """The three figures for one mode: in range, extrapolation, coverage."""
    passed, total, failures = in_range(curves, mode, verbose)
    print(f"tokenroof {'data-only' if mode == 'data' else 'with priors'} {how}:")
    print(f"  in range (fit all, predict them): {passed}/{total} curves within 10% (or 2× their residual)")
    for failure in failures:
        print(f"    {failure}")
    print(f"  extrapolation over {tpot.size} held-out points: TPOT {figures(tpot)}{more}")
    print(f"  90% intervals: {covered.mean():.1%} of held-out points inside")


def figures(errors: np.ndarray) -> str:
    return f"median {np.median(errors):5.1f}%  p90 {np.percentile(errors, 90):6.1f}%"


def external(curves: list[Curve], verbose: bool) -> None:
    """Curves nobody tuned to, scored as a user meets them: the shipped interval constants, nothing relearned."""
    for mode in MODES:
        tpot, covered = [], []
        for c in curves:
            train, test = split(c.table, protocol_k(len(c.table)))
            prior = c.prior if mode == "prior" else None
            rows = predict_table(train, test.batch, prior, n_samples=SAMPLES).predictions()
            pred = np.array([r["tpot_ms"] for r in rows])
            lo, hi = np.array([r["tpot_ms_low"] for r in rows]), np.array([r["tpot_ms_high"] for r in rows])
            tpot.append(np.abs(pred / test.tpot_ms - 1) * 100)
            covered.append((lo <= test.tpot_ms) & (test.tpot_ms <= hi))
            if verbose:
                print(
                    f"    {mode:5s} {c.name[:60]:60s} |TPOT err| {np.mean(tpot[-1]):5.1f}%  covered "
                    f"{covered[-1].sum()}/{covered[-1].size}  {'prior' if prior else ''}"
                )
        errors, inside = np.concatenate(tpot), np.concatenate(covered)
        report(curves, mode, verbose, "(shipped interval constants)", errors, "", inside)
        print()


def main(argv: list[str]) -> None:
    verbose, write = "--verbose" in argv, "--write" in argv
    dirs = [Path(a) for a in argv if not a.startswith("--")] or [DEFAULT_DIR]
    curves = [c for c in load(dirs, "--engine" in argv) if len(c.table) > 3]
    if not curves:
        raise SystemExit(f"no curves found in {', '.join(map(str, dirs))} (see benchmarks/curves)")
    if "--external" in argv:
        print(f"{len(curves)} curves from {', '.join(map(str, dirs))}\n")
        external(curves, verbose)
        return
    print(f"{len(curves)} curves; {SAMPLES} interval samples per fit\n")
    learned = {}
    for mode in MODES:
        every = {c.name: [held_out(c, mode, k) for k in range(3, len(c.table))] for c in curves}
        protocol = {c.name: held_out(c, mode, protocol_k(len(c.table))) for c in curves}
        inside = []
        for c in curves:  # leave-one-curve-out: learn on the others, score on this one
            others = [h for name, hs in every.items() if name != c.name for h in hs]
            cal = intervals.learn(*concat(others))
            h = protocol[c.name]
            lo, hi = cal.bounds(np.ones_like(h.log_error), cal.scale(h.sample_sd, float(h.sigma[0]), h.distance))
            inside.append((np.log(lo) <= h.log_error) & (h.log_error <= np.log(hi)))
            if verbose:
                print(
                    f"    {mode:5s} {c.name[:55]:55s} |TPOT err| {np.mean(h.tpot_err):5.1f}%  covered "
                    f"{inside[-1].sum()}/{inside[-1].size}"
                )
        learned[mode] = replace(intervals.learn(*concat([h for hs in every.values() for h in hs])), curves=len(curves))
        tpot = np.concatenate([h.tpot_err for h in protocol.values()])
        thr = np.concatenate([h.thr_err for h in protocol.values()])
        covered = np.concatenate(inside)
        report(curves, mode, verbose, "(intervals leave-one-curve-out)", tpot, f"   throughput {figures(thr)}", covered)
        cal = learned[mode]
        print(
            f"  constants on all curves: κ = {cal.kappa_per_doubling:.2f} per doubling past the data, "
            f"quantiles {cal.q_low:+.2f} / {cal.q_high:+.2f}\n"
        )
    base = np.concatenate([linear_baseline(c) for c in curves])
    print(f"linear baseline (a + c·b): TPOT {figures(base)}")
    if write:
        path = ROOT / "src" / "tokenroof" / "data" / "intervals.json"
        note = f"learned by benchmarks/accuracy.py --write on {len(curves)} curves in {', '.join(d.name for d in dirs)}"
        path.write_text(intervals.to_json(learned, note))
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
