"""First principles against published curves: engine profiles learned leave-one-curve-out.

For every curve in benchmarks/curves whose header states the model, hardware, TP, dtype and
lengths (curve_headers.read_setup) and the engine (curve_headers.engine_of), predict its TPOT from first
principles — the step model from specs with an engine profile's efficiencies, run the way the
curve was measured — and score |TPOT error| at every point. What the curve's TPOT counts decides
how the step model is run:

- a static batch timed end to end (Argonne, FasterTransformer): the batch's prefill plus
  output − 1 decode steps at the mean context, per output token; a batch larger than the KV
  cache holds at the mean context runs in waves (TPOT × batch / the batch that fits);
- a static batch's decode steps (mmg offline): the decode step at the mean context;
- online, at a measured running batch (mmg online): the mean step, carrying the prompts that
  arrive — batch × input/output prompt tokens per step — in the decode steps (chunked prefill,
  as the header or the profile says) or in prefill steps of their own (`separate`); the HTTP
  server's per-sequence cost (the profile's [serving]) counts here and not offline.

Points past a cap the data show (fit.past_cap: the running batch stops growing while TPOT moves,
i.e. preemption) are left out: no step model describes them.

Leave-one-curve-out: for each curve, the engine's constants are fitted on the engine's *other*
curves — log TPOT residuals, each curve weighing the same, a robust (soft-L1) loss and a weak
log-normal prior at physically motivated values (PRIOR) — then the curve is predicted and
scored. Beside it: the profile-free defaults (the `generic` profile, what tokenroof used before
engine profiles), scored the same way. An engine with no other curve is predicted from PRIOR.

    python benchmarks/first_principles.py [CURVE_DIR ...] [--verbose] [--as-labelled] [--write] [--shipped]

`--as-labelled` scores the H100 64GB curves on the h100-sxm preset, as curve_headers labels them,
instead of the hardware they ran on (HARDWARE_AS_RUN). `--write` stores, in
src/tokenroof/specs/data/engines/, the constants fitted on all curves of each fitted engine, the
leave-one-curve-out figures and the interval quantiles (log(measured / predicted) at 5% and 95%);
unfitted profiles get the spread of PRIOR's unfitted constants, the generic profile its own.
`--shipped` scores the profiles as shipped, nothing fitted: for curves nothing was learned from,
as `python benchmarks/first_principles.py benchmarks/curves_external --shipped`.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))

from curve_headers import CurveSetup, engine_of, read_setup
from tokenroof.errors import TokenroofError
from tokenroof.fit.core import past_cap
from tokenroof.io.measurements import MeasurementTable, read_table
from tokenroof.model import roofline as rl
from tokenroof.model.analysis import DecodeWorkload, served_tpot_s
from tokenroof.model.stepmodel import StepModel
from tokenroof.specs import HardwareSpec, ModelSpec, Precision, load_hardware, load_model
from tokenroof.specs.engines import engine_presets, load_engine

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "benchmarks" / "curves"  # the published curves, each with its source (a copy of ../shared)
LEVEL = 0.9
# quantile spans tried for LEVEL coverage on held-out curves: a fine grid, so one point more or less held moves the
# span one step, not to the next coarse one
SPANS = (0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0)

# The engine ran without CUDA graphs (its profile's [eager] applies: `--enforce-eager`): the flag, or a vLLM release
# from before them (0.2.5, 2023-12-17)
EAGER = r"enforce.eager(?!\s*=\s*False)|without CUDA graphs|vLLM 0\.(1\.\d+|2\.[0-4])\b"

# Hardware a header names that no preset describes: the preset it is labelled with, corrected to what ran.
HARDWARE_AS_RUN = [
    (
        r"H100 64GB",
        {"name": "NVIDIA H100 64GB (HBM2, 4 stacks)", "memory_bytes": 64e9, "memory_bandwidth_bytes_per_s": 1.6e12},
        "MareNostrum 5 ACC nodes: '4x NVIDIA Hopper H100 64GB HBM2' (BSC user guide); four HBM2e stacks at the H100 "
        "PCIe's 400 GB/s per stack (2.0 TB/s over five) ≈ 1.6 TB/s, not the 80GB SXM's 3.35 TB/s",
    ),
]

# The fitted constants: value at the prior's centre, log-sd of the prior, bounds. Centres are physical: decode
# kernels at 70-85% of bandwidth, GEMMs at 60-80% of peak, a CUDA-graph step's ~1 ms, NCCL's ~10 µs per call
# and ~2 µs per ring hop (each GPU past the first).
PRIOR = {
    "bandwidth": (0.8, 0.25, 0.3, 1.0),
    "kv_bandwidth": (0.7, 0.4, 0.1, 1.0),
    "compute": (0.7, 0.4, 0.2, 1.0),
    "overhead_s": (1e-3, 1.5, 1e-6, 0.02),
    "overhead_s_per_seq": (1e-5, 2.0, 1e-8, 5e-4),
    "allreduce_latency_s": (1e-5, 1.5, 1e-8, 2e-4),
    "allreduce_step_latency_s": (2e-6, 1.5, 1e-9, 1e-4),
    "serving_overhead_s_per_seq": (1e-5, 2.0, 1e-8, 5e-4),
}
NAMES = list(PRIOR)
PRIOR_WEIGHT = 0.1  # against a curve's mean squared log residual; weak: 0.05-0.2 give similar held-out errors


@dataclass(frozen=True)
class Curve:
    """One published curve, placed: what ran, how it was measured, and its points (left-out ones removed)."""

    name: str
    engine: str
    setup: CurveSetup
    model: ModelSpec
    hardware: HardwareSpec
    precision: Precision
    batch: np.ndarray
    tpot_s: np.ndarray
    chunked: bool  # arriving prompts share the decode steps (chunked prefill), else steps of their own
    eager: bool = False  # no CUDA graphs: the host's launches per layer (the profile's [eager]) bound small batches

    @property
    def online(self) -> bool:
        return not self.setup.workload.static and self.setup.semantics.tpot_kind != "step"


# -- reading the curves -------------------------------------------------------------------------------------
def eager_of(text: str) -> bool:
    match = re.search(r"engine:\s*([^\n]*)", text)
    return bool(match and re.search(EAGER, match.group(1)))


def hardware_of(setup: CurveSetup, text: str, as_labelled: bool) -> HardwareSpec:
    hardware = load_hardware(str(setup.hardware))
    gpu_line = next((line for line in text.splitlines() if "GPU:" in line), "")
    for pattern, fields, _ in HARDWARE_AS_RUN:
        if not as_labelled and re.search(pattern, gpu_line):
            return replace(hardware, key=f"{hardware.key} as run", **fields)  # type: ignore[arg-type]
    return hardware


def setup_of(table: MeasurementTable) -> CurveSetup:
    """The header's setup; each `key=value` setting the table states (batch_kind, tpot_kind, lengths) wins over
    what curve_headers reads from the prose, and only that one (mmg's 'output_len=338' states no batch kind)."""
    setup = read_setup(table.provenance)
    sem, stated = table.semantics, set(table.semantics.stated)
    merged = replace(
        setup.semantics,
        **{k: getattr(sem, k) for k in ("batch_kind", "tpot_kind", "input_len", "output_len") if k in stated},
    )
    w = setup.workload
    workload = replace(
        w,
        input_len=merged.input_len if merged.input_len is not None else w.input_len,
        output_len=merged.output_len if merged.output_len is not None else w.output_len,
        static=merged.batch_kind == "static",
        decode_only=w.decode_only or merged.tpot_kind == "step",
    )
    return replace(setup, workload=workload, semantics=merged)  # read_setup reads the dtype (fp8 from the model line)


def place(path: Path, as_labelled: bool) -> Curve | str:
    """The curve, or why it cannot be predicted from first principles."""
    table = read_table([path])
    text = "\n".join(table.provenance)
    setup, engine = setup_of(table), engine_of(text)
    w = setup.workload
    missing = [what for what, v in (("model", setup.model), ("hardware", setup.hardware), ("engine", engine)) if not v]
    if w.input_len is None or w.output_len is None:
        missing.append("lengths")
    if missing or not np.isfinite(table.tpot_ms).all():
        return f"{path.name}: not stated ({', '.join(missing or ['TPOT'])})"
    seen = past_cap(replace(table, semantics=setup.semantics))
    keep = len(table) - (len(seen.batches) if seen is not None and seen.left_out else 0)
    profile = load_engine(engine)
    chunked = bool(re.search(r"chunked prefill on", text)) or profile.prefill == "chunked"
    return Curve(
        path.name,
        str(engine),
        setup,
        load_model(str(setup.model)),
        hardware_of(setup, text, as_labelled),
        Precision.create(setup.dtype, engine_kv=profile.kv_dtype_by_weights),
        table.batch[:keep].astype(float),
        table.tpot_ms[:keep] / 1e3,
        chunked,
        eager_of(text) and profile.eager is not None,
    )


def load(dirs: list[Path], as_labelled: bool) -> tuple[list[Curve], list[str]]:
    curves, skipped = [], []
    for path in sorted(f for d in dirs for f in d.glob("*.csv")):
        try:
            placed = place(path, as_labelled)
        except TokenroofError as exc:
            placed = f"{path.name}: {exc}"
        (skipped if isinstance(placed, str) else curves).append(placed)  # type: ignore[arg-type]
    return curves, skipped


# -- first principles, run as the curve was measured -----------------------------------------------------------
def step_model(curve: Curve, values: dict[str, float]) -> StepModel:
    """The step model from specs with these constants (the serving cost per sequence only online)."""
    per_seq = values["overhead_s_per_seq"] + (values["serving_overhead_s_per_seq"] if curve.online else 0.0)
    eff = rl.Efficiencies(
        bandwidth=values["bandwidth"],
        compute=values["compute"],
        kv_bandwidth=values["kv_bandwidth"],
        overhead_s=values["overhead_s"],
        allreduce_latency_s=values["allreduce_latency_s"],
        allreduce_step_latency_s=values["allreduce_step_latency_s"],
        overhead_s_per_seq=per_seq,
        **{k: values[k] for k in ("overhead_s_per_layer", "interconnect", "overlap") if k in values},
        **eager_launches(curve),
    )
    return rl.step_model_from_specs(curve.model, curve.hardware, curve.precision, curve.setup.tp, eff)


def eager_launches(curve: Curve) -> dict[str, float]:
    """The engine profile's launches (its [eager]) for a curve run without CUDA graphs; none otherwise."""
    eager = load_engine(curve.engine).eager if curve.eager else None
    if eager is None:
        return {}
    return {"host_s_per_layer": eager.host_s_per_layer, "host_s_per_allreduce": eager.host_s_per_allreduce}


def curve_tpot_s(sm: StepModel, curve: Curve) -> np.ndarray:
    """TPOT (s) at the curve's batches, counted the way the curve counts it: `roofline --input-len --output-len
    --batching`'s own path (model.analysis.served_tpot_s; see the module doc)."""
    w = curve.setup.workload
    workload = DecodeWorkload(float(w.input_len or 1.0), float(w.output_len or 1.0), w.static, curve.chunked)
    ctx = workload.mean_context
    cap = rl.max_batch_by_memory(curve.model, curve.hardware, curve.precision, ctx, curve.setup.tp)
    kv_context = float(curve.model.effective_context(ctx))
    return served_tpot_s(sm, curve.batch, workload, cap, curve.setup.semantics.tpot_kind, kv_context)


def log_errors(curve: Curve, values: dict[str, float]) -> np.ndarray:
    """log(measured / predicted) TPOT at every point."""
    return np.log(curve.tpot_s / curve_tpot_s(step_model(curve, values), curve))


# -- fitting ------------------------------------------------------------------------------------------------
def centres() -> dict[str, float]:
    return {k: v[0] for k, v in PRIOR.items()}


def residuals(x: np.ndarray, curves: list[Curve]) -> np.ndarray:
    values = dict(zip(NAMES, np.exp(x), strict=True))
    parts = [log_errors(c, values) / np.sqrt(c.batch.size) for c in curves]
    centre, sd = (np.log([PRIOR[k][0] for k in NAMES]), np.array([PRIOR[k][1] for k in NAMES]))
    return np.concatenate([*parts, PRIOR_WEIGHT * (x - centre) / sd])


def fit_engine(curves: list[Curve]) -> dict[str, float]:
    """The constants of one engine fitted to `curves` (the prior's centres when there are none)."""
    if not curves:
        return centres()
    low = np.log([PRIOR[k][2] for k in NAMES])
    high = np.log([PRIOR[k][3] for k in NAMES])
    start = np.log([PRIOR[k][0] for k in NAMES])
    result = least_squares(residuals, start, bounds=(low, high), args=(curves,), loss="soft_l1", f_scale=0.1)
    return dict(zip(NAMES, (float(v) for v in np.exp(result.x)), strict=True))


def profile_values(name: str) -> dict[str, float]:
    """A shipped profile's constants in the fit's terms (the generic profile: the profile-free defaults)."""
    profile = load_engine(name)
    eff = rl.profile_efficiencies(profile, serving=False)  # an unfitted profile's bias correction applied
    keys = ("bandwidth", "compute", "overhead_s", "allreduce_latency_s", "allreduce_step_latency_s")
    values = {k: getattr(eff, k) for k in keys}
    values["kv_bandwidth"] = eff.kv_bandwidth or eff.bandwidth
    values["overhead_s_per_seq"] = eff.overhead_s_per_seq
    values["serving_overhead_s_per_seq"] = profile.serving.get("overhead_s_per_seq", 0.0) * profile.accuracy.slowdown
    values.update({k: getattr(eff, k) for k in ("overhead_s_per_layer", "interconnect", "overlap")})
    return values


@dataclass
class Scored:
    curve: Curve
    held_out: np.ndarray  # log(measured / predicted), the engine's constants fitted without this curve
    unfitted: np.ndarray  # the same with PRIOR's centres: what a physically motivated, unfitted profile gets
    profile_free: np.ndarray  # the same with the generic profile
    # PRIOR's centres slowed by the median of their log errors on the *other engines'* curves: what an engine no
    # curve measured gets from a shipped unfitted profile (its bias_correction), scored leave-one-engine-out
    corrected: np.ndarray = field(default_factory=lambda: np.zeros(0))


def leave_one_out(curves: list[Curve], shipped: bool = False) -> list[Scored]:
    """Every curve predicted by its engine's constants fitted on the engine's other curves (`shipped`: by the profile
    as shipped, nothing fitted: for curves nothing was learned from)."""
    scored = []
    unfitted = {c.name: log_errors(c, centres()) for c in curves}
    for c in curves:
        others = [o for o in curves if o.engine == c.engine and o.name != c.name]
        values = profile_values(c.engine) if shipped else fit_engine(others)
        free = log_errors(c, profile_values("generic"))
        bias = bias_of([unfitted[o.name] for o in curves if o.engine != c.engine])
        scored.append(Scored(c, log_errors(c, values), unfitted[c.name], free, unfitted[c.name] - bias))
    return scored


def bias_of(errors: list[np.ndarray]) -> float:
    """The median log(measured / predicted) of unfitted constants over these curves' points (0 with none)."""
    return float(np.median(np.concatenate(errors))) if errors else 0.0


# -- the report ---------------------------------------------------------------------------------------------
def pct(log_err: np.ndarray) -> np.ndarray:
    """|TPOT error| in percent of the measured TPOT."""
    return np.abs(np.exp(-log_err) - 1) * 100


def figures(log_err: np.ndarray) -> str:
    e = pct(log_err)
    return f"{np.median(e):6.1f}% {np.percentile(e, 90):6.1f}%"


def quantiles(log_err: np.ndarray, span: float = LEVEL) -> tuple[float, float]:
    """The (1 ∓ span)/2 quantiles of log errors."""
    low, high = np.quantile(log_err, [(1 - span) / 2, (1 + span) / 2])
    return float(low), float(high)


def coverage(scored: list[Scored], span: float) -> float:
    """Share of held-out points inside the `span` quantiles of the other curves' held-out errors (the engine's, or
    all curves' when the engine has fewer than two others): the coverage a new curve sees."""
    inside = []
    for s in scored:
        mine = [o.held_out for o in scored if o.curve.engine == s.curve.engine and o.curve.name != s.curve.name]
        others = mine if len(mine) >= 2 else [o.held_out for o in scored if o.curve.name != s.curve.name]
        low, high = quantiles(np.concatenate(others), span)
        inside.append((low <= s.held_out) & (s.held_out <= high))
    return float(np.concatenate(inside).mean()) if inside else float("nan")


def calibrated_span(scored: list[Scored]) -> float:
    """The narrowest quantile span whose intervals hold LEVEL of a held-out curve's points (errors within a curve
    move together, so the plain LEVEL quantiles of all points cover less on a new curve)."""
    return next((span for span in SPANS if coverage(scored, span) >= LEVEL), SPANS[-1])


def row(rows: list[Scored]) -> str:
    held, unfitted, corrected, free = (
        np.concatenate([getattr(s, k) for s in rows]) for k in ("held_out", "unfitted", "corrected", "profile_free")
    )
    return f"{figures(held)}     {figures(unfitted)}      {figures(corrected)}                  {figures(free)}"


def table(scored: list[Scored], label: str = "LOCO") -> None:
    header = (
        f"{'engine':18s} {'curves':>6s} {'points':>6s}   {label:>4s} median    p90   unfitted median    p90"
        "  +bias (LOEO) median    p90   profile-free (today) median    p90"
    )
    print(header)
    print("-" * len(header))
    for engine in sorted({s.curve.engine for s in scored}):
        rows = [s for s in scored if s.curve.engine == engine]
        held = np.concatenate([s.held_out for s in rows])
        print(f"{engine:18s} {len(rows):6d} {held.size:6d}   {row(rows)}")
    print(f"{'all':18s} {len(scored):6d} {sum(s.held_out.size for s in scored):6d}   {row(scored)}")
    span = calibrated_span(scored)
    print(
        f"\n{LEVEL:.0%} intervals on a held-out curve: the other curves' {LEVEL:.0%} quantile span holds "
        f"{coverage(scored, LEVEL):.0%} of its points, the {span:.0%} span (stored by --write) "
        f"{coverage(scored, span):.0%}"
    )


def verbose_rows(scored: list[Scored]) -> None:
    for s in scored:
        held = " ".join(f"{v:+4.0f}" for v in (np.exp(-s.held_out) - 1) * 100)
        print(f"  {s.curve.engine:17s} {s.curve.name[:56]:56s} profile  {held}")
        free = " ".join(f"{v:+4.0f}" for v in (np.exp(-s.profile_free) - 1) * 100)
        print(f"  {'':17s} {'':56s} generic  {free}")
    print()


# -- --write ------------------------------------------------------------------------------------------------
ENGINE_DIR = ROOT / "src" / "tokenroof" / "specs" / "data" / "engines"
MEANING = {
    "bandwidth": "weight streaming, fraction of peak memory bandwidth",
    "kv_bandwidth": "KV-cache reads, fraction of peak memory bandwidth",
    "compute": "matmuls and prefill, fraction of the dense tensor peak",
    "overhead_s": "per step",
    "overhead_s_per_seq": "per sequence per step: scheduling, sampling",
    "allreduce_latency_s": "per all-reduce call",
    "allreduce_step_latency_s": "per all-reduce call, per GPU past the first",
}


def replace_section(text: str, name: str, body: str) -> str:
    """`text` with the lines of its [name] table replaced by `body`; everything else (comments too) kept."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == f"[{name}]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    return "".join(lines[: start + 1]) + body + "\n" + "".join(lines[end:])


def number(value: float) -> str:
    return f"{value:.3g}"


def constants_body(values: dict[str, float], curves: list[Curve], hardware: str) -> tuple[str, str]:
    """[efficiencies] and [serving] of a fitted profile, each number with where it comes from."""
    tp = [c.name for c in curves if c.setup.tp > 1]
    lines = [
        f"# fitted on all {len(curves)} curves of this engine by benchmarks/first_principles.py --write "
        f"(hardware {hardware}); the prior's centre in brackets\n"
    ]
    for key, meaning in MEANING.items():
        note = f"{meaning} [{number(PRIOR[key][0])}]"
        if key.startswith("allreduce") and not tp:
            note += "; no TP > 1 curve: the prior"
        lines.append(f"{key} = {number(values[key])}  # {note}\n")
    online = [c.name for c in curves if c.online]
    serving = (
        f"overhead_s_per_seq = {number(values['serving_overhead_s_per_seq'])}  # fitted on the {len(online)} online "
        f"curves: detokenisation, output processing, streaming [{number(PRIOR['serving_overhead_s_per_seq'][0])}]\n"
    )
    return "".join(lines), serving if online else ""


def accuracy_body(held: np.ndarray, comment: str, span: float, curves: int = 0) -> str:
    """[accuracy]: held-out figures (`curves` > 0) and the interval, log errors at the `span` quantiles."""
    low, high = quantiles(held, span)
    q = f"{(1 - span) / 2:.1%} and {(1 + span) / 2:.1%}"
    body = "".join(f"# {line}\n" for line in comment.splitlines())
    body += f"# interval: log(measured / predicted) at {q}, the span that holds {LEVEL:.0%} of a held-out curve\n"
    if curves:
        e = pct(held) / 100
        body += f"curves = {curves}\npoints = {held.size}\n"
        body += f"tpot_error_median = {number(float(np.median(e)))}\n"
        body += f"tpot_error_p90 = {number(float(np.percentile(e, 90)))}\n"
    body += f"log_error = {number(float(np.median(held)))}\n"
    return body + f"log_error_low = {number(low)}\nlog_error_high = {number(high)}\ninterval_level = {LEVEL}\n"


def names(rows: list[Scored]) -> str:
    return "\n".join(f"  {s.curve.name}" for s in rows)


def fitted_text(text: str, rows: list[Scored], hardware: str, span: float) -> str:
    curves = [s.curve for s in rows]
    efficiencies, serving = constants_body(fit_engine(curves), curves, hardware)
    held = np.concatenate([s.held_out for s in rows])
    free = np.concatenate([s.profile_free for s in rows])
    (held_median, held_p90), (free_median, free_p90) = figures(held).split(), figures(free).split()
    comment = (
        f"leave-one-curve-out over these {len(rows)} curves: |TPOT error| {held_median} median, {held_p90} p90\n"
        f"(profile-free: {free_median}, {free_p90}); curves:\n{names(rows)}"
    )
    text = replace_section(text, "efficiencies", efficiencies)
    if serving:
        text = replace_section(text, "serving", serving)
    return replace_section(text, "accuracy", accuracy_body(held, comment, span, len(rows)))


def write_profiles(curves: list[Curve], scored: list[Scored], hardware: str) -> None:
    """Fitted engines: constants on all their curves, held-out figures, interval. The generic profile: its own
    errors. The rest: the spread of PRIOR's unfitted constants."""
    span = calibrated_span(scored)
    unfitted = np.concatenate([s.unfitted for s in scored])
    fitted = {s.curve.engine for s in scored if sum(o.curve.engine == s.curve.engine for o in scored) >= 2}
    for key, path in engine_presets().items():
        text = path.read_text()
        rows = [s for s in scored if s.curve.engine == key]
        if key in fitted:
            text = fitted_text(text, rows, hardware, span)
        elif key == "generic":
            free = np.concatenate([s.profile_free for s in scored])
            note = f"nothing fitted: these defaults scored on all {len(scored)} shared curves (hardware {hardware})"
            text = replace_section(text, "accuracy", accuracy_body(free, note, span, len(scored)))
        else:
            bias = bias_of([s.unfitted for s in scored])
            corrected = np.concatenate([s.corrected for s in scored])
            median, p90 = figures(corrected).split()
            note = (
                "not fitted (fewer than 2 shared curves): the fit's physically motivated starting constants\n"
                f"(first_principles.PRIOR, unfitted) run too fast on all {len(scored)} shared curves ({unfitted.size} "
                f"points, hardware {hardware})\nby a median factor e^bias_correction: this profile's constants are "
                "slowed by it, and the interval is\nthe spread of that correction learned leave-one-engine-out "
                f"(|TPOT error| {median} median, {p90} p90)"
            )
            body = accuracy_body(corrected, note, span) + f"bias_correction = {number(bias)}\n"
            text = replace_section(text, "accuracy", body)
        path.write_text(text)
        print(f"wrote {path}")


def main(argv: list[str]) -> None:
    dirs = [Path(a) for a in argv if not a.startswith("--")] or [DEFAULT_DIR]
    as_labelled = "--as-labelled" in argv
    curves, skipped = load(dirs, as_labelled)
    if not curves:
        raise SystemExit(f"no curves found in {', '.join(map(str, dirs))} (see benchmarks/curves)")
    print(f"{len(curves)} curves from {', '.join(map(str, dirs))}; TPOT error = predicted / measured − 1")
    for line in skipped:
        print(f"  skipped {line}")
    if not as_labelled:
        print(f"  hardware as run: {'; '.join(f'{p}: {note}' for p, _, note in HARDWARE_AS_RUN)}")
    print()
    shipped = "--shipped" in argv
    scored = leave_one_out(curves, shipped)
    if "--verbose" in argv:
        verbose_rows(scored)
    table(scored, "ship" if shipped else "LOCO")
    if "--write" in argv and not shipped:
        write_profiles(curves, scored, "labelled" if as_labelled else "as run")


if __name__ == "__main__":
    main(sys.argv[1:])
