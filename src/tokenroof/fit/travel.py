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
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import ConfigDict, PlainValidator, model_validator

from tokenroof.errors import TokenroofError
from tokenroof.fit.core import ContextLaw, Fit, Prior
from tokenroof.io.measurements import CLIENT_KINDS, MeasurementTable
from tokenroof.model.stepmodel import StepModel, knots_problem
from tokenroof.specs.validate import (
    Section,
    flag,
    load_json,
    non_negative,
    number,
    positive,
    table_error,
    text,
    unit_interval,
    validated,
    whole,
)

FORMAT = "tokenroof step model"
LENGTHS_MOVED = 0.1  # a run at lengths this far (relative) from those a scheduler fit replayed is said to be


@dataclass(frozen=True)
class Replayed:
    """How a step model fitted on the scheduler (serving/replay.py) was measured and how well it replays that."""

    client: str  # io.measurements.CLIENT_KINDS
    max_num_batched_tokens: int | None  # the prompt budget per step it was fitted with (None: whole prompts)
    prefill_source: str  # "ttft" (measured) or "physics"
    tpot_rms: float  # replay error over the measured points, rms of log(replayed / measured)
    ttft_rms: float | None
    semantics: str  # the workload in words, as every header states it
    kv_slots: int | None = None  # per-slot KV streams on this many slots (llama-server without --kv-unified)
    form_tpot_rms: float | None = None  # the form's own replay, where measured departures were kept in range
    separate_prefill: bool = False  # prompts prefilled in steps of their own (vLLM V0, TGI), the running waiting
    input_len: float | None = None  # the measured workload's mean lengths, which it was replayed at (None: not kept)
    output_len: float | None = None
    server_cap: int | None = None  # the running-batch cap the measured server held its client to (None: none seen)
    reserve_output: bool = False  # replayed with each whole output reserved at admission (TensorRT-LLM's default)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "client": self.client,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "kv_slots": self.kv_slots,
            "prefill_source": self.prefill_source,
            "tpot_rms": self.tpot_rms,
            "ttft_rms": self.ttft_rms,
            "semantics": self.semantics,
        }
        if self.form_tpot_rms is not None:
            data["form_tpot_rms"] = self.form_tpot_rms
        if self.separate_prefill:
            data["separate_prefill"] = True
        if self.input_len is not None and self.output_len is not None:
            data["input_len"], data["output_len"] = self.input_len, self.output_len
        if self.server_cap is not None:
            data["server_cap"] = self.server_cap
        if self.reserve_output:
            data["reserve_output"] = True
        return data


@dataclass(frozen=True)
class Travelling:
    """A step model and the workload it holds for."""

    step_model: StepModel
    context_tokens: float | None = None  # the mean context it was fitted at (None: from specs, any context)
    prefill_ratio: float = 0.0  # prompt tokens per step per sequence folded into its compute
    split: bool = True  # KV reads and prompt share are separate terms (from specs, or split by the physics)
    source: str = "specs"
    prior: str | None = None
    replayed: Replayed | None = None  # fitted on the scheduler to the measured TPOT and TTFT (None: a decode fit)
    kv_cache_tokens: int | None = None  # the KV pool predict's answers ran with (its --model/--hardware), saved

    @property
    def prices_prefill(self) -> bool:
        """Whether a prompt's prefill costs what was measured or what the physics says (not folded, not free)."""
        sm = self.step_model
        return not sm.prompts_folded and (sm.t_compute_s > 0 or sm.t_attn_token_s > 0)

    def notes(
        self, context_tokens: float | None, lengths: tuple[float, float] | None = None, max_num_seqs: int | None = None
    ) -> list[str]:
        """What a user of the model should know when running it at `context_tokens` (None: unknown) and, for a model
        fitted on the scheduler, at mean `lengths` (prompt, output; None: not said) and `max_num_seqs`."""
        if self.source == "specs":
            return []
        if self.replayed is not None:
            return self._replay_notes(context_tokens) + self._lengths_notes(lengths) + self._cap_notes(max_num_seqs)
        departures = self.step_model.departures()
        return self._prefill_note() + self._context_notes(context_tokens) + ([departures] if departures else [])

    def _replay_notes(self, context_tokens: float | None) -> list[str]:
        r = self.replayed
        assert r is not None
        ttft = f", TTFT {r.ttft_rms:.1%}" if r.ttft_rms is not None else ""
        prefill = (
            "prefill priced by the measured TTFT"
            if r.prefill_source == "ttft"
            else f"no TTFT in the table: prefill priced by the physics of {self.prior}"
        )
        departures = self.step_model.departures()
        if departures and self.context_tokens:  # the whole step is scaled, its KV reads with it
            departures += f", measured at a mean context of {self.context_tokens:,.0f} tokens"
        form = f" (the form alone {r.form_tpot_rms:.1%})" if r.form_tpot_rms is not None else ""
        notes = [
            f"step model fitted on the scheduler to {self.source} ({r.semantics}): it replays the measured TPOT "
            f"within {r.tpot_rms:.1%} rms{form}{ttft}; {prefill}" + (f"; {departures}" if departures else "")
        ]
        if r.kv_slots is not None:
            notes.append(
                f"measured on per-slot KV streams ({r.kv_slots} slots, llama-server's default with -np N): a step runs "
                "one forward pass per run of consecutive busy slots, so under arrivals at a rate TPOT grows with how "
                "scattered the slots in use are, worse the longer the server runs; llama-server --kv-unified runs "
                "every step as one pass (simulated from a freshly started server whose slots are the batch cap)"
            )
        fitted_at = self.context_tokens
        sm = self.step_model
        moved = sm.t_kv_token_s > 0 or sm.t_attn_token_s > 0  # fitted across contexts (or split by a prior): moved
        if (
            context_tokens is not None
            and fitted_at
            and self.prior is None
            and not moved
            and abs(context_tokens / fitted_at - 1) > 0.1
        ):
            notes.append(
                f"its KV reads were measured at a mean context of {fitted_at:,.0f} tokens only: at "
                f"{context_tokens:,.0f} they are not moved (fit with --model/--hardware to move them)"
            )
        return notes

    def _lengths_notes(self, lengths: tuple[float, float] | None) -> list[str]:
        """A scheduler fit run at other lengths than it replayed (simulate's defaults, 1,000 in / 300 out, beside a
        model fitted at 1,024 / 256): its replay error was measured at those, not these."""
        r = self.replayed
        assert r is not None
        if lengths is None or r.input_len is None or r.output_len is None:
            return []
        fitted = (r.input_len, r.output_len)
        if all(abs(here / there - 1) <= LENGTHS_MOVED for here, there in zip(lengths, fitted, strict=True)):
            return []
        return [
            f"run at {lengths[0]:,.0f} prompt / {lengths[1]:,.0f} output tokens, where the files measured "
            f"{fitted[0]:,.0f} / {fitted[1]:,.0f}: its replay error holds for theirs (give their lengths to replay "
            "the files)"
        ]

    def _cap_notes(self, max_num_seqs: int | None) -> list[str]:
        """A scheduler fit whose server held its client's streams at a cap, run under another cap."""
        held = None if self.replayed is None else self.replayed.server_cap
        if held is None or max_num_seqs is None or max_num_seqs == held:
            return []
        return [
            f"the files' server held its running batch at {held} (its client ran more streams, which queued); "
            f"run here under a cap of {max_num_seqs} (--max-num-seqs {held} runs it as measured)"
        ]

    def _prefill_note(self) -> list[str]:
        """A fit without a compute term (a memory-bound line) prices a prompt's prefill at nothing."""
        sm = self.step_model
        if sm.prompts_folded or sm.t_compute_s > 0 or sm.t_attn_token_s > 0:
            return []
        return [
            f"step model from {self.source} has no compute term (its points show no knee): prefill costs nothing in "
            "it, so TTFT and the prompts' share of each step are left out (fit with --model/--hardware for the "
            "compute, or measure past the knee)"
        ]

    def _context_notes(self, context_tokens: float | None) -> list[str]:
        if self.context_tokens is None and self.split:  # terms as written (a hand-made model): nothing was folded
            if self.step_model.t_kv_token_s > 0 or self.step_model.prompts_folded:
                return []
            return [
                f"step model from {self.source} has no KV cost per context token (t_kv_token_s 0): its cost per "
                "sequence is the same at every context"
            ]
        if self.context_tokens is None:
            return [
                f"step model from {self.source}, at a workload it does not state: its KV reads and prompt share stay "
                "as measured there, whatever the context here (state the lengths in the table, '# input_len=… "
                "output_len=…', and fit with --model/--hardware to carry them)"
            ]
        if self.split and self.prior is None:
            return [
                f"step model fitted to {self.source} across its measured contexts (mean {self.context_tokens:g} "
                "tokens): its KV reads per context token were fitted there, so it runs at each sequence's own "
                "context; the prompts' GEMM share stays as measured (fit with --model/--hardware to split it)"
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
                **({"replay": self.replayed.to_dict()} if self.replayed is not None else {}),
                **({"kv_cache_tokens": self.kv_cache_tokens} if self.kv_cache_tokens is not None else {}),
            },
            "split": self.split,
        }
        return json.dumps(data, indent=2, default=float) + "\n"


def portable(fit: Fit, table: MeasurementTable) -> Travelling:
    """The decode fit's model made portable: the KV reads and the prompts' GEMM share split out where a prior is
    known; without one, folded at the workload the table states (if it states one). An online table whose prefill is
    priced gets the scheduler's own model instead (serving/replay.py)."""
    sm, prior, law = fit.step_model, fit.prior, fit.best.law
    if prior is not None:
        return Travelling(
            split_terms(sm, prior, law), prior.context_tokens, prior.prefill_ratio, True, table.source, prior.label
        )
    from tokenroof.fit.prior import MeasuredWorkload

    sem = table.semantics
    context = None if table.context_tokens is None else float(table.context_tokens.mean())
    workload = MeasuredWorkload(context, sem.input_len, sem.output_len, static=sem.batch_kind == "static")
    stated = context is not None or sem.mean_context is not None
    if law is not None:  # several measured contexts: the KV reads per context token were fitted
        whole = replace(law.whole(sm), prompts_folded=online(table))
        return Travelling(whole, law.reference_tokens, workload.prefill_ratio, True, table.source)
    folded = replace(sm, prompts_folded=online(table))
    return Travelling(folded, workload.mean_context if stated else None, workload.prefill_ratio, False, table.source)


def online(table: MeasurementTable) -> bool:
    """Whether the table's steps carried arriving prompts (continuous batching), so a fit folds their cost in."""
    return table.semantics.batch_kind != "static" and table.semantics.tpot_kind != "step"


def from_table(paths: Path | Sequence[Path], prior_of: Any = None, n_samples: int = 0) -> tuple[Fit, MeasurementTable]:
    """Fit measurement files (with the physics prior `prior_of(table)` gives, if any), with `n_samples` interval
    samples."""
    from tokenroof.fit.core import fit_table
    from tokenroof.io.measurements import read_table

    table = read_table([paths] if isinstance(paths, Path) else list(paths))
    prior = prior_of(table) if prior_of is not None else None
    return fit_table(table, prior, n_samples=n_samples), table


def portable_samples(fit: Fit, table: MeasurementTable) -> list[StepModel]:
    """The fit's interval samples made portable as `portable` makes its model."""
    if fit.prior is not None:
        return [split_terms(c.model, fit.prior, c.law) for c in fit.samples]
    return [
        replace(c.model if c.law is None else c.law.whole(c.model), prompts_folded=online(table)) for c in fit.samples
    ]


def split_terms(sm: StepModel, prior: Prior, law: ContextLaw | None = None) -> StepModel:
    """KV reads per context token at the fitted bandwidth efficiency (what the weights stream at) — or as fitted
    across several measured contexts (a "data" `law`) — compute per token at the fitted compute efficiency; the
    per-sequence rest is what the data show beyond the KV reads."""
    peak = prior.weights_floor
    e_bandwidth = min(peak.t_weights_s / sm.t_weights_s, 1.0) if sm.t_weights_s > 0 else prior.bandwidth_center
    # KV reads at the fitted bandwidth efficiency, but never more than the fitted cost per sequence holds: the
    # model stays exactly what was fitted at the fitted context
    kv_read = peak.t_kv_token_s / (e_bandwidth * prior.kv_bandwidth_ratio)
    t_kv = law.kv_token_s if law is not None and law.source == "data" else kv_read
    if prior.context_tokens > 0:
        t_kv = min(t_kv, sm.t_seq_s / prior.context_tokens)
    per_seq = max(sm.t_seq_s - prior.context_tokens * t_kv, 0.0)
    if sm.t_compute_s > 0:
        e_compute = prior.step_compute_floor_s / sm.t_compute_s
        compute, attn = peak.t_compute_s / e_compute, peak.t_attn_token_s / e_compute
    else:
        compute = attn = 0.0
    return replace(sm, t_compute_s=compute, t_attn_token_s=attn, t_kv_token_s=t_kv, t_seq_s=per_seq)


MAX_TERM_S = 1e3  # no term of one decode step comes near this: a larger value is a unit slip, and overflows sums


def seconds(value: Any) -> float:
    """A step-model term in seconds: non-negative and at most MAX_TERM_S."""
    result = non_negative(value)
    if result > MAX_TERM_S:
        raise ValueError(f"must be at most {MAX_TERM_S:g} s (a term of one decode step; a unit slip?)")
    return result


def knots(value: Any) -> tuple[tuple[float, float], ...]:
    """StepModel.batch_factors: [batch, factor] pairs, batches at least 1 and each once, factors positive."""
    if not isinstance(value, list | tuple) or not all(isinstance(k, list | tuple) and len(k) == 2 for k in value):
        raise ValueError("must be a list of [batch, factor] pairs")
    pairs = tuple((number(b), positive(f)) for b, f in value)
    problem = knots_problem(pairs)
    if problem:
        raise ValueError(problem)
    return pairs


Seconds = Annotated[float, PlainValidator(seconds)]
Count = Annotated[int, PlainValidator(whole(0, integral_floats=True))]
Flag = Annotated[bool, PlainValidator(flag)]
Text = Annotated[str, PlainValidator(text)]


class StepModelFields(Section):
    """A StepModel as a file holds it: the four main terms required, times in seconds ≥ 0, overlap in [0, 1].
    Only the StepModel fields: an unknown key is named (a misspelt optional term would fall back to its default)."""

    t_fixed_s: Seconds
    t_weights_s: Seconds
    t_compute_s: Seconds
    t_kv_token_s: Seconds
    t_seq_s: Seconds = 0.0
    t_attn_token_s: Seconds = 0.0
    t_expert_s: Seconds = 0.0
    num_experts: Count = 0
    experts_per_token: Count = 0
    overlap: Annotated[float, PlainValidator(unit_interval)] = 1.0
    prompts_folded: Flag = False
    t_host_s: Seconds = 0.0
    batch_factors: Annotated[tuple[tuple[float, float], ...], PlainValidator(knots)] = ()
    t_comm_fixed_s: Seconds = 0.0
    t_comm_seq_s: Seconds = 0.0

    @model_validator(mode="after")
    def _routing(self) -> Self:
        if self.experts_per_token > self.num_experts:
            raise table_error(f"experts_per_token exceeds num_experts ({self.experts_per_token} > {self.num_experts})")
        return self

    def step_model(self) -> StepModel:
        return StepModel(**{f.name: getattr(self, f.name) for f in fields(StepModel)})


class PredictTerms(StepModelFields):
    """`predict --json`'s "model": the StepModel fields beside derived values, which are not read."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    context_tokens: Annotated[float, PlainValidator(non_negative)] | None = None


def _client(value: Any) -> str:
    if value not in CLIENT_KINDS:
        raise ValueError(f"must be one of {', '.join(CLIENT_KINDS)}")
    return str(value)


class ReplayFields(Section):
    """How a model fitted on the scheduler was measured (`Replayed`)."""

    client: Annotated[str, PlainValidator(_client)]
    max_num_batched_tokens: Annotated[int, PlainValidator(whole(1))] | None = None
    prefill_source: Text = "ttft"
    tpot_rms: Annotated[float, PlainValidator(non_negative)] = 0.0
    ttft_rms: Annotated[float, PlainValidator(non_negative)] | None = None
    semantics: Text = ""
    kv_slots: Annotated[int, PlainValidator(whole(1))] | None = None
    form_tpot_rms: Annotated[float, PlainValidator(non_negative)] | None = None
    separate_prefill: bool = False
    input_len: Annotated[float, PlainValidator(positive)] | None = None
    output_len: Annotated[float, PlainValidator(positive)] | None = None
    server_cap: Annotated[int, PlainValidator(whole(1))] | None = None
    reserve_output: bool = False

    def replayed(self) -> Replayed:
        return Replayed(
            self.client,
            self.max_num_batched_tokens,
            self.prefill_source,
            self.tpot_rms,
            self.ttft_rms,
            self.semantics,
            self.kv_slots,
            self.form_tpot_rms,
            self.separate_prefill,
            self.input_len,
            self.output_len,
            self.server_cap,
            self.reserve_output,
        )


class FittedAt(Section):
    context_tokens: Annotated[float, PlainValidator(non_negative)] | None = None
    prefill_ratio: Annotated[float, PlainValidator(non_negative)] | None = None
    source: Text | None = None
    prior: Text | None = None
    replay: ReplayFields | None = None
    kv_cache_tokens: Annotated[int, PlainValidator(whole(1))] | None = None


def _format(value: Any) -> str:
    if value != FORMAT:
        raise ValueError(f"expected {json.dumps(FORMAT)} (a file `predict --save-model` wrote)")
    return FORMAT


class SavedModel(Section):
    """What `predict --save-model` writes (`Travelling.to_json`)."""

    format: Annotated[str, PlainValidator(_format)]
    step_model: StepModelFields
    fitted_at: FittedAt = FittedAt()
    split: Flag = False


def read_step_model(path: Path) -> Travelling:
    """A saved model (`predict --save-model`, told by its "format"), `predict --json` output (told by its
    "predictions"), or a bare StepModel object."""
    data = load_json(path)
    if not isinstance(data, dict):
        raise TokenroofError(f"{path}: expected a JSON object with the StepModel fields")
    if "format" in data:
        saved = validated(SavedModel, data, str(path), "a JSON object")
        at = saved.fitted_at
        return Travelling(
            saved.step_model.step_model(),
            at.context_tokens,
            at.prefill_ratio or 0.0,
            saved.split,
            at.source or str(path),
            at.prior,
            at.replay.replayed() if at.replay is not None else None,
            at.kv_cache_tokens,
        )
    if "predictions" in data:  # predict --json
        terms = validated(PredictTerms, data.get("model"), str(path), "a JSON object", where="model")
        serving = data.get("serving")
        if isinstance(serving, dict) and "step_model" in serving:  # the scheduler's model, as --save-model saves it
            inside = "serving.step_model"
            sm = validated(StepModelFields, serving["step_model"], str(path), "a JSON object", where=inside)
            replay = {k: serving[k] for k in ReplayFields.model_fields if k in serving}  # (lengths: as saved)
            fields = validated(ReplayFields, replay, str(path), "a JSON object", where="serving")
            source = f"{path} (predict --json)"
            kv = validated(FittedAt, {"kv_cache_tokens": serving.get("kv_cache_tokens")}, str(path), where="serving")
            replayed = fields.replayed()
            return Travelling(
                sm.step_model(), terms.context_tokens, 0.0, True, source, None, replayed, kv.kv_cache_tokens
            )
        return Travelling(terms.step_model(), terms.context_tokens, 0.0, False, f"{path} (predict --json)")
    return Travelling(validated(StepModelFields, data, str(path), "a JSON object").step_model(), source=str(path))
