"""Step models that travel between commands: `predict --save-model` writes one, `--step-model` and `--fit` read it.

A fit folds two things into its terms at the workload it was measured under: the KV
reads at the measured mean context into its cost per sequence, and — for online
measurements — the arriving prompts' share of each step's GEMMs into its compute per
sequence. A scheduler (simulate, emulate, plan) runs every sequence at its own context
and adds the prompts to the steps itself, so a folded model counts both wrongly anywhere
but where it was fitted. With the physics known (a prior), `portable` splits them out
again: KV reads per context token at the fitted bandwidth efficiency, compute per token at
the fitted compute efficiency. The model is then unchanged at the fitted workload and
right at others. Without a prior it stays folded, and every command that uses it says
where it holds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from tokenroof.errors import TokenroofError
from tokenroof.fit import Fit, Prior
from tokenroof.measurements import MeasurementTable
from tokenroof.stepmodel import StepModel

FORMAT = "tokenroof step model"
STEP_FIELDS = {f.name for f in fields(StepModel)}


@dataclass(frozen=True)
class Travelling:
    """A step model and the workload it holds for."""

    step_model: StepModel
    context_tokens: float | None = None  # the mean context it was fitted at (None: from specs, any context)
    prefill_ratio: float = 0.0  # prompt tokens per step per sequence folded into its compute
    split: bool = True  # KV reads and prompt share are separate terms (from specs, or split by the physics)
    source: str = "specs"
    prior: str | None = None

    def notes(self, context_tokens: float | None) -> list[str]:
        """What a user of the model should know when running it at `context_tokens` (None: unknown)."""
        if self.source == "specs":
            return []
        if self.context_tokens is None:
            return [
                f"step model from {self.source}, at a workload it does not state: its KV reads and prompt share stay "
                "as measured there, whatever the context here (state the lengths in the table, '# input_len=… "
                "output_len=…', and fit with --model/--hardware to carry them)"
            ]
        if self.split:
            return [
                f"step model fitted to {self.source} at a mean context of {self.context_tokens:g} tokens; its KV "
                f"reads and the prompts' GEMM share were split out with the physics of {self.prior}, so it runs at "
                "each sequence's own context and the scheduler's own prefill"
            ]
        folded = f"step model fitted to {self.source} at a mean context of {self.context_tokens:g} tokens"
        if self.prefill_ratio > 0:
            folded += f" and {self.prefill_ratio:.2g} prompt tokens per step per sequence"
        note = (
            f"{folded}: without a physics prior (--model/--hardware when fitting) its KV reads and prompt share stay "
            "as measured there"
        )
        if context_tokens is not None and abs(context_tokens / max(self.context_tokens, 1.0) - 1) > 0.1:
            note += f", so at a mean context of {context_tokens:g} tokens its TPOT is not adjusted"
        return [note]

    def to_json(self) -> str:
        data = {
            "format": FORMAT,
            "step_model": self.step_model.to_dict(),
            "fitted_at": {
                "context_tokens": self.context_tokens,
                "prefill_ratio": self.prefill_ratio,
                "source": self.source,
                "prior": self.prior,
            },
            "split": self.split,
        }
        return json.dumps(data, indent=2, default=float) + "\n"


def portable(fit: Fit, table: MeasurementTable) -> Travelling:
    """The fit's step model, with the KV reads and the prompts' GEMM share split out where a prior is known; without
    one, folded at the workload the table states (if it states one)."""
    sm, prior = fit.step_model, fit.prior
    if prior is not None:
        return Travelling(
            split_terms(sm, prior), prior.context_tokens, prior.prefill_ratio, True, table.source, prior.label
        )
    from tokenroof.predict import Workload

    sem = table.semantics
    context = None if table.context_tokens is None else float(table.context_tokens.mean())
    workload = Workload(context, sem.input_len, sem.output_len, static=sem.batch_kind == "static")
    stated = context is not None or sem.mean_context is not None
    folded = replace(sm, prompts_folded=online(table))
    return Travelling(folded, workload.mean_context if stated else None, workload.prefill_ratio, False, table.source)


def online(table: MeasurementTable) -> bool:
    """Whether the table's steps carried arriving prompts (continuous batching), so a fit folds their cost in."""
    return table.semantics.batch_kind != "static" and table.semantics.tpot_kind != "step"


def from_table(path: Path, prior_of: Any = None, n_samples: int = 0) -> tuple[Travelling, list[StepModel]]:
    """Fit a measurement file (with the physics prior `prior_of(table)` gives, if any) and make it portable; the
    interval samples too, split the same way."""
    from tokenroof.fit import fit_table
    from tokenroof.measurements import read_table

    table = read_table([path])
    prior = prior_of(table) if prior_of is not None else None
    fit = fit_table(table, prior, n_samples=n_samples)
    if prior is not None:
        samples = [split_terms(m, prior) for m in fit.sample_models()]
    else:
        samples = [replace(m, prompts_folded=online(table)) for m in fit.sample_models()]
    return portable(fit, table), samples


def split_terms(sm: StepModel, prior: Prior) -> StepModel:
    """KV reads per context token at the fitted bandwidth efficiency (what the weights stream at), compute per token
    at the fitted compute efficiency; the per-sequence rest is what the data show beyond the KV reads."""
    peak = prior.weights_floor
    e_bandwidth = min(peak.t_weights_s / sm.t_weights_s, 1.0) if sm.t_weights_s > 0 else prior.bandwidth_center
    # KV reads at the fitted bandwidth efficiency, but never more than the fitted cost per sequence holds: the
    # model stays exactly what was fitted at the fitted context
    t_kv = peak.t_kv_token_s / e_bandwidth
    if prior.context_tokens > 0:
        t_kv = min(t_kv, sm.t_seq_s / prior.context_tokens)
    per_seq = max(sm.t_seq_s - prior.context_tokens * t_kv, 0.0)
    if sm.t_compute_s > 0:
        e_compute = prior.step_compute_floor_s / sm.t_compute_s
        compute, attn = peak.t_compute_s / e_compute, peak.t_attn_token_s / e_compute
    else:
        compute = attn = 0.0
    return replace(sm, t_compute_s=compute, t_attn_token_s=attn, t_kv_token_s=t_kv, t_seq_s=per_seq)


def read_step_model(path: Path) -> Travelling:
    """A saved model (`predict --save-model`), `predict --json` output, or a plain StepModel object."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise TokenroofError(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise TokenroofError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise TokenroofError(f"{path}: expected a JSON object with the StepModel fields")
    if data.get("format") == FORMAT:
        at = data.get("fitted_at")
        at = at if isinstance(at, dict) else {}
        prior = at.get("prior")
        return Travelling(
            step_model_from(data.get("step_model"), path),
            optional_number(at.get("context_tokens"), path, "fitted_at.context_tokens"),
            optional_number(at.get("prefill_ratio"), path, "fitted_at.prefill_ratio") or 0.0,
            data.get("split") is True,
            str(at.get("source") or path),
            prior if isinstance(prior, str) else None,
        )
    if isinstance(data.get("model"), dict) and "predictions" in data:  # predict --json
        model = data["model"]
        context = optional_number(model.get("context_tokens"), path, "model.context_tokens")
        return Travelling(step_model_from(model, path), context, 0.0, False, f"{path} (predict --json)")
    return Travelling(step_model_from(data, path), source=str(path))


def optional_number(value: Any, path: Path, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TokenroofError(f"{path}: {key} must be a non-negative number, got {value!r}")
    return float(value)


def step_model_from(data: Any, path: Path) -> StepModel:
    if not isinstance(data, dict):
        raise TokenroofError(f"{path}: no step model in it")
    missing = [k for k in ("t_fixed_s", "t_weights_s", "t_compute_s", "t_kv_token_s") if k not in data]
    if missing:
        raise TokenroofError(
            f"{path}: the step model lacks {', '.join(missing)}; fields: {', '.join(sorted(STEP_FIELDS))}"
        )
    values = {k: v for k, v in data.items() if k in STEP_FIELDS}
    if not isinstance(values.get("prompts_folded", False), bool):
        raise TokenroofError(f"{path}: prompts_folded must be true or false, got {values['prompts_folded']!r}")
    for key, value in values.items():
        if key != "prompts_folded":
            optional_number(value, path, key)
    if values.get("overlap", 1.0) > 1:
        raise TokenroofError(f"{path}: overlap must lie in [0, 1], got {values['overlap']!r}")
    for key in ("num_experts", "experts_per_token"):
        if key in values and values[key] != int(values[key]):
            raise TokenroofError(f"{path}: {key} must be a whole number, got {values[key]!r}")
        if key in values:
            values[key] = int(values[key])
    if values.get("experts_per_token", 0) > values.get("num_experts", 0):
        raise TokenroofError(f"{path}: experts_per_token exceeds num_experts")
    try:
        return StepModel(**values)
    except TypeError as exc:
        raise TokenroofError(f"{path}: not a StepModel ({exc})") from None
