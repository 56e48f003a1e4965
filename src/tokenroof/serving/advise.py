"""`advise`: the batch cap (max_num_seqs) that meets a TPOT target, and what it costs in throughput."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from tokenroof.errors import ParameterError, TokenroofError, prefixed
from tokenroof.serving.advice import advice_dict, engine_flags
from tokenroof.serving.engine.core import Server
from tokenroof.style import fmt, fmt_beside
from tokenroof.units import MS_PER_S

if TYPE_CHECKING:
    from tokenroof.fit.core import Fit
    from tokenroof.fit.physics import Physics
    from tokenroof.fit.predict import MeasuredWorkload
    from tokenroof.io.measurements import MeasurementTable
    from tokenroof.model.prefix import SharedPrefix
    from tokenroof.model.speculative import SpeculativeConfig
    from tokenroof.serving.saturation import CapAdvice
    from tokenroof.serving.simulate import LengthShape

SEARCH_LIMIT = 1_000_000
__all__ = ["advice_dict", "advise", "engine_flags", "largest_batch_within"]


class StepTime(Protocol):
    """What advise needs of a model: a StepModel, or a fitted curve (fit.FittedCurve)."""

    def step_time_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> NDArray[np.float64]: ...

    def throughput_tok_s(self, batch: ArrayLike, context: ArrayLike = 0.0) -> NDArray[np.float64]: ...


def largest_batch_within(sm: StepTime, tpot_slo_s: float, context: float = 0.0, limit: int | None = None) -> int:
    """Largest integer batch whose step time is ≤ the target (0 if batch 1 already misses it)."""
    if float(sm.step_time_s(1.0, context)) > tpot_slo_s * (1 + 1e-9):
        return 0
    hi = float(limit or SEARCH_LIMIT)
    if float(sm.step_time_s(hi, context)) <= tpot_slo_s:
        return int(hi)
    lo = 1.0
    while hi - lo > 0.5:  # T is increasing in b: bisection
        mid = (lo + hi) / 2
        if float(sm.step_time_s(mid, context)) <= tpot_slo_s:
            lo = mid
        else:
            hi = mid
    cap = int(np.floor(lo))
    if float(sm.step_time_s(cap + 1.0, context)) <= tpot_slo_s * (1 + 1e-9):  # exact hits at a boundary
        cap += 1
    return cap


def throughput_latency_knee(sm: StepTime, context: float, upper: float) -> float:
    """Kneedle (Satopää et al. 2011) on throughput against TPOT over batch 1…upper: the point of the curve
    farthest above the chord, where each extra ms of TPOT starts buying little throughput."""
    b = np.geomspace(1.0, max(upper, 2.0), 400)
    tpot = sm.step_time_s(b, context)
    thr = b / tpot
    x = (tpot - tpot[0]) / max(tpot[-1] - tpot[0], 1e-12)
    y = (thr - thr[0]) / max(thr[-1] - thr[0], 1e-12)
    return float(b[int(np.argmax(y - x))])


@dataclass
class Advice:
    tpot_slo_ms: float
    cap: int
    cap_interval: list[int | None]
    binding: str
    tpot_ms_at_cap: float
    throughput_tok_s_at_cap: float
    knee_batch: float
    reference_batch: float
    reference_throughput_tok_s: float
    source: str
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The contract's advise shape; the TPOT is the step time, so every token of a full batch takes it (mean)."""
        at_cap = {
            "max_num_seqs": self.cap,
            "tpot_ms": self.tpot_ms_at_cap,
            "ttft_ms": None,
            "throughput_tok_s": self.throughput_tok_s_at_cap,
            "running_batch": float(self.cap),
            "preemptions": None,
        }
        reference = {"max_num_seqs": self.reference_batch, "throughput_tok_s": self.reference_throughput_tok_s}
        low, high = self.cap_interval
        return advice_dict(
            {"statistic": "mean", "tpot_ms": self.tpot_slo_ms, "ttft_ms": None},
            (self.cap, low, high),
            self.binding,
            at_cap,
            self.knee_batch,
            reference,
            self.source,
            self.warnings,
        )


def advise(
    sm: StepTime,
    tpot_slo_ms: float,
    context: float = 0.0,
    memory_limit: int | None = None,
    samples: Sequence[StepTime] = (),
    source: str = "",
) -> Advice:
    """Largest cap meeting the TPOT target (bounded by memory), its interval over `samples`, the knee."""
    if not 0 < tpot_slo_ms < float("inf"):
        raise ParameterError(f"{{}} must be a positive finite number, got {tpot_slo_ms:g}", "tpot_slo_ms")
    slo_s = tpot_slo_ms / MS_PER_S
    by_slo = largest_batch_within(sm, slo_s, context)
    if by_slo == 0:
        raise TokenroofError(
            f"no batch cap meets TPOT ≤ {tpot_slo_ms:g} ms: batch 1 already takes "
            f"{fmt_beside(float(sm.step_time_s(1.0, context)) * MS_PER_S, tpot_slo_ms)} ms per token"
        )
    cap, binding = by_slo, "tpot"
    warnings = []
    if memory_limit is not None and memory_limit < by_slo:
        cap, binding = memory_limit, "memory"
        allows = f"allows batch {by_slo}" if by_slo < SEARCH_LIMIT else "is met at every batch tried"
        warnings.append(
            f"the TPOT target {allows}, but the running batch cannot exceed {memory_limit} (memory, "
            "or a server cap the measurements show): that binds (a larger cap only queues or preempts)"
        )
    if memory_limit == 0:
        raise TokenroofError("the weights alone do not fit in memory: no batch cap can run")
    interval: list[int | None] = [None, None]
    if samples:
        # the samples' 5–95% span, widened to hold the answer: the central fit (an Akaike mixture of the structures)
        # is not their median, and a band that leaves out the cap it brackets says nothing of it (a bench sweep's
        # 12 ms target: cap 55, its samples' span 57–62)
        caps = np.array([largest_batch_within(m, slo_s, context, memory_limit) for m in samples])
        interval = [min(int(np.percentile(caps, 5)), cap), max(int(np.percentile(caps, 95)), cap)]
    reference = float(memory_limit) if memory_limit else float(max(4 * cap, 512))
    knee = throughput_latency_knee(sm, context, reference)
    if cap >= SEARCH_LIMIT:
        warnings.append(
            "the TPOT target is met at every batch tried: the cap is set by memory or admission, not by latency"
        )
    return Advice(
        tpot_slo_ms=tpot_slo_ms,
        cap=cap,
        cap_interval=interval,
        binding=binding,
        tpot_ms_at_cap=float(sm.step_time_s(cap, context)) * MS_PER_S,
        throughput_tok_s_at_cap=float(sm.throughput_tok_s(cap, context)),
        knee_batch=knee,
        reference_batch=reference,
        reference_throughput_tok_s=float(sm.throughput_tok_s(reference, context)),
        source=source,
        warnings=warnings,
    )


# -- advise as the command asks it ---------------------------------------------------------
@dataclass(frozen=True)
class Targets:
    """The targets and the statistic they bound (the scheduler's answer; the decode-only answer is the mean)."""

    tpot_slo_ms: float
    ttft_slo_ms: float | None = None
    statistic: str | None = None  # None: p99 on the scheduler, the mean step time on the decode curve

    def __post_init__(self) -> None:
        if self.statistic not in (None, "mean", "p50", "p90", "p99"):
            raise ParameterError(f"unknown {{}} '{self.statistic}'; known: mean, p50, p90, p99", "slo_statistic")


def advise_answer(
    files: Sequence[Path],
    physics: Physics,
    flags: MeasuredWorkload,
    targets: Targets,
    max_num_batched_tokens: int | None = None,
    samples: int | None = None,
    contexts: Sequence[float] | None = None,
    speculative: SpeculativeConfig | None = None,
    prefix: SharedPrefix | None = None,
    prefix_caching: bool = True,
    shape: LengthShape | None = None,
) -> dict[str, Any]:
    """advise's JSON: from the scheduler simulate uses when the lengths are known (prefill included), else from
    the decode step time alone — fitted to `files`, or from first principles — at `contexts` (the decode-only
    answer: one answer each, `{"contexts": [...], "warnings": [...]}` for more than one; None: the workload's).

    `samples` (None: DECODE_SAMPLES) sizes the decode-only answer's cap interval; the scheduler's answer has none,
    and a `samples` or a `max_num_batched_tokens` given to the answer that does not read it is said unread. `shape`
    (None: fixed lengths) is how the scheduler's lengths spread about their means, as simulate and plan draw them."""
    if files:
        physics.refuse_eager_for_measurements()
    if not files and not physics.known:
        raise ParameterError(
            "give a measurement file, or {} and {} for the first-principles curve", "model", "hardware"
        )
    table = None
    if files:  # read once: every answer below is on it
        from tokenroof.io.measurements import read_table

        table = read_table(list(files))
    stated = None if contexts or flags.context_tokens is not None else lengths_to_advise(table, flags)
    if stated is not None:  # the measured workload where the files state it (a length given kept), nothing else asked
        if prefix is not None and prefix.tokens >= stated[0]:
            raise ParameterError(
                f"{{}} ({prefix.tokens}) is part of the prompt: it must be shorter than the {stated[0]:g} tokens the "
                "files' prompts hold (or give {})",
                "prefix_len",
                "input_len",
            )
        given = flags.input_len is not None or flags.output_len is not None
        flags = replace(flags, input_len=stated[0], output_len=stated[1])
        answer = advise_with_prefill(
            files, physics, flags, targets, max_num_batched_tokens, speculative, prefix, prefix_caching, table, shape
        )
        whose = "the files' where not given" if given else "the lengths the files state"
        answer["warnings"].insert(
            0,
            f"advised at {stated[0]:,.4g} prompt / {stated[1]:,.4g} output tokens ({whose}), on the scheduler "
            "(--input-len/--output-len for another workload; --context for the decode step time alone)",
        )
        answer["warnings"] += unread_on_scheduler(samples)
        return answer
    lengths = flags.input_len is not None and flags.output_len is not None and not flags.decode_only
    if contexts and len(contexts) > 1 and lengths:
        raise ParameterError(
            "{} takes one value with {}/{} (the lengths set the context); list several contexts for the decode-only "
            "answer",
            "context",
            "input_len",
            "output_len",
        )
    if lengths:
        answer = advise_with_prefill(
            files, physics, flags, targets, max_num_batched_tokens, speculative, prefix, prefix_caching, table, shape
        )
        answer["warnings"] += unread_on_scheduler(samples)
        return answer
    if prefix is not None and prefix.tokens:
        raise ParameterError(
            "shared prefixes are answered on the scheduler: give {} and {} with {}",
            "input_len",
            "output_len",
            "prefix_len",
        )
    if speculative is not None:
        raise ParameterError(
            "speculative decoding is answered on the scheduler: give {} and {} with {}",
            "input_len",
            "output_len",
            "speculative_config",
        )
    if targets.ttft_slo_ms is not None:
        several = (
            ": the files hold several workloads (mean contexts "
            f"{', '.join(f'{c:,.0f}' for c in table.level_contexts())}), give the one to advise for"
            if table is not None and table.several_contexts
            else ""
        )
        raise ParameterError(
            f"{{}} needs {{}} and {{}} (the prompts decide TTFT){several}", "ttft_slo_ms", "input_len", "output_len"
        )
    asked: list[float | None] = list(contexts) if contexts else [None]
    each = advise_decode_only(
        files, physics, flags, targets.tpot_slo_ms, DECODE_SAMPLES if samples is None else samples, asked, table
    )
    for answer in each:  # the cap in the named engine's words alone
        answer["engine_flags"] = engine_flags(answer["max_num_seqs"], server=physics.server_name)
    if shape is not None and not shape.fixed:
        each[0]["warnings"].append(
            f"the length distributions ({shape.text()}) change nothing here: the decode-only answer has no lengths "
            "to draw (give --input-len and --output-len for the scheduler's answer, which draws them)"
        )
    if max_num_batched_tokens is not None:
        each[0]["warnings"].append(
            f"--max-num-batched-tokens {max_num_batched_tokens} changes nothing here: the decode-only answer has no "
            "prompts in its steps to budget (give --input-len and --output-len for the scheduler's answer, which "
            "reads it)"
        )
    if targets.statistic not in (None, "mean"):
        each[0]["warnings"].append(
            f"--slo-statistic {targets.statistic} needs the scheduler's distribution (give --input-len and "
            "--output-len); the decode-only answer bounds the mean step time, which every token of a full batch "
            "takes"
        )
    if len(each) == 1:
        return each[0]
    warnings = [w for answer in each for w in answer["warnings"]]
    return {"contexts": each, "warnings": list(dict.fromkeys(warnings))}


DECODE_SAMPLES = 200  # the decode-only answer's interval samples where none are asked for


def unread_on_scheduler(samples: int | None) -> list[str]:
    """The scheduler's answer draws no interval samples: a --samples given to it is said unread."""
    if samples is None:
        return []
    return [
        f"--samples {samples} changes nothing here: the scheduler's answer has no cap interval to sample (the "
        "decode-only answer's, with --decode-only or --context, has)"
    ]


def lengths_to_advise(table: MeasurementTable | None, flags: MeasuredWorkload) -> tuple[float, float] | None:
    """The prompt and output lengths to advise at where the flags give one or none: the files' (vLLM's, GuideLLM's,
    SGLang's, LLMPerf's results; a CSV's '# input_len=… output_len=…') for the one not given, where they state them
    and their steps held prompts; None otherwise (both given, or nothing stated)."""
    if table is None or flags.decode_only or (flags.input_len is not None and flags.output_len is not None):
        return None
    sem = table.semantics
    if sem.input_len is None or sem.output_len is None or sem.tpot_kind == "step" or sem.batch_kind == "static":
        return None
    if table.several_contexts:  # files of several lengths state their mean, no workload of them: --context says which
        return None
    return (
        flags.input_len if flags.input_len is not None else sem.input_len,
        flags.output_len if flags.output_len is not None else sem.output_len,
    )


def advise_with_prefill(
    files: Sequence[Path],
    physics: Physics,
    flags: MeasuredWorkload,
    targets: Targets,
    max_num_batched_tokens: int | None,
    speculative: SpeculativeConfig | None = None,
    prefix: SharedPrefix | None = None,
    prefix_caching: bool = True,
    table: MeasurementTable | None = None,
    shape: LengthShape | None = None,
) -> dict[str, Any]:
    """advise from the scheduler: the model fitted on it to the files (or first principles), a replica kept full.

    From files the replica is kept full by the client that measured them (`vllm bench serve` starts every stream at
    once; tokenroof bench staggers them) and prefills as the measured server did (the fitted prompt budget), so the
    answer at the measured workload is what the files show."""
    from tokenroof.serving.saturation import PHASES, advise_cap
    from tokenroof.serving.simulate import EVEN, WAVES, LengthShape

    assert flags.input_len is not None and flags.output_len is not None
    notes: list[str] = []
    client = EVEN  # steady traffic at each cap, unless files say how their client drove the server
    per_slot_kv = False  # one KV cache for all sequences, unless the files were measured on per-slot streams
    slots: int | None = None  # the slots (llama-server -np) the files were measured on, per-slot streams
    llama_server = False  # the files say they measured llama-server (bench asked its /props)
    separate = False  # prompts prefilled in steps of their own (a named engine's scheduling, from first principles)
    replayed = None  # the scheduler's fit to the files, where they measured the scheduler (its replay error)
    if files:
        from tokenroof.fit.core import fit_table
        from tokenroof.fit.predict import prior_for
        from tokenroof.io.measurements import read_table
        from tokenroof.serving.replay import engine_scheduling, portable_model

        table = read_table(list(files)) if table is None else table  # (advise_answer's, read once)
        prior = prior_for(table, physics, flags, flags_are_target=True)
        stated = table.context_tokens is not None or table.semantics.mean_context is not None
        if flags.context_tokens is not None and stated:
            raise ParameterError(
                f"{table.source} states the context it was measured at; with {{}}/{{}} the lengths "
                "set the context to advise at (input + output/2): drop {}",
                "input_len",
                "output_len",
                "context",
            )
        fit = fit_table(table, prior, n_samples=0)
        measured_top = float(fit.batch_range[1])  # the largest measured concurrency
        llama_server = table.semantics.server == "llama-server"
        measured = (flags.input_len, flags.output_len)
        budget, separate_fit, reserve = engine_scheduling(physics)  # as predict replays the same files
        travelling = portable_model(fit, table, physics.kv_pool_tokens(), measured, budget, reserve, separate_fit)
        if targets.ttft_slo_ms is not None and not travelling.prices_prefill:
            raise ParameterError(
                f"{table.source}: nothing prices a prompt's prefill (no ttft_ms in the measurements, and no "
                "{}/{} for the physics), so a TTFT target cannot be checked: give measurements with TTFT "
                "(vLLM, GuideLLM and tokenroof bench results carry it) or {}/{}, or drop {}",
                "model",
                "hardware",
                "model",
                "hardware",
                "ttft_slo_ms",
            )
        sm, notes = travelling.step_model, [*table.warnings, *fit.conflicts, *travelling.notes(flags.mean_context)]
        if not travelling.prices_prefill:  # the TTFT it prints is the wait for a step, no prompt's compute in it
            notes.append(
                f"{table.source}: nothing prices a prompt's prefill (no TTFT measured, no model and hardware for the "
                "physics): the TTFT here is the wait for a step, not the server's"
            )
        source = f"fitted to {table.source}, run on simulate's scheduler"
        replayed = travelling.replayed
        if replayed is not None:
            per_slot_kv, slots = replayed.kv_slots is not None, replayed.kv_slots
            separate = replayed.separate_prefill  # prefilled as the measured server was replayed (vLLM V0, TGI)
            if replayed.client in ("burst", "staggered"):
                client = replayed.client
            if max_num_batched_tokens is None:
                max_num_batched_tokens = replayed.max_num_batched_tokens
            kept = {
                "burst": "a closed loop, every stream started at once",
                "staggered": "a closed loop, streams staggered",
            }.get(client, "steady traffic, streams spread over a request's life")
            kept += f" (simulate --client {client} --concurrency N --max-num-seqs N"
            if replayed.client == WAVES:
                kept += "; not the files' waves: no production client waits for a whole wave to end"
            kept += ")"
            source = (
                f"fitted on simulate's scheduler to {table.source} ({replayed.semantics}); each cap kept full by {kept}"
            )
    else:
        sm = physics.step_model()
        source = (
            f"first principles: {physics.label()}, run on simulate's scheduler; each cap kept full by steady traffic, "
            "streams spread over a request's life (simulate --client even --concurrency N --max-num-seqs N)"
        )
        notes += physics.eager_notes()
        # the engine's prefill scheduling and its default budget as simulate and plan take them (Deployment's rules):
        # prefill steps of their own (vLLM V0, TGI), or V0's chunking past 32K of context
        from tokenroof.fit.travel import Travelling
        from tokenroof.serving.deployment import Deployment

        dep = Deployment(physics, max_num_batched_tokens=max_num_batched_tokens, speculative=speculative)
        planned = Travelling(sm)
        separate = dep.separate_prefill(planned)
        if separate or (dep.long_context_chunks() and max_num_batched_tokens is None):
            max_num_batched_tokens = dep.prompt_budget(planned)
            notes += dep.budget_notes(planned)
    speculation = None if speculative is None else physics.speculation(speculative)
    if speculation is not None:
        notes.append(speculation.assumption())
    kv = physics.kv_pool_tokens(speculative)
    notes += physics.admission_notes(kv)
    notes += [note for note in physics.pool_notes(kv) if note not in notes]  # the pool's share, as simulate says
    caching = prefix_caching and not per_slot_kv
    shape = shape or LengthShape()
    prompts, outputs = shape.lengths(round(flags.input_len), round(flags.output_len), prefix)
    if prefix is not None and prefix.tokens:
        notes.append(prefix.assumption(prefix_caching, per_slot_kv, sm.prompts_folded))
    if not shape.fixed:
        notes.append(f"lengths drawn about their means: {shape.text()}, as simulate and plan draw them")
    server = Server(
        kv,
        max_num_batched_tokens,
        per_slot_kv,
        speculation,
        caching,
        separate,
        physics.reserves_output,
    )
    # bench's staggered streams on llama-server: the cap checked over their start phases (saturation's module doc)
    phases = PHASES if llama_server and client == "staggered" else 1
    result = advise_cap(
        sm,
        prompts,
        outputs,
        targets.tpot_slo_ms,
        targets.ttft_slo_ms,
        targets.statistic or "p99",
        server,
        source=source,
        client=client,
        phases=phases,
    )
    cap = result.chosen.max_num_seqs
    if replayed is not None:
        notes += margin_notes(result, replayed.tpot_rms, replayed.ttft_rms, targets, lambda tpot, ttft: advise_cap(
            sm, prompts, outputs, tpot, ttft, result.statistic, server, client=client, phases=phases
        ))  # fmt: skip
        notes += past_the_files(cap, measured_top, replayed.server_cap)
    if (slots is not None and cap != slots) or (slots is None and llama_server):
        said = f"measured on {slots} slots (llama-server -np {slots})" if slots else "measured on llama-server"
        notes.append(
            f"{said}; the cap is a new -np {cap}, a restarted server, and llama.cpp's prompt time has been seen "
            "to change with -np alone (1.6× on one CPU between -np 16 and 14, docs/ACCURACY.md): bench the new cap "
            "before relying on it"
        )
    result.warnings = notes + result.warnings
    answer = {**result.to_dict(), "step_model": sm.to_dict()}
    answer["engine_flags"] = engine_flags(
        answer["max_num_seqs"], speculative, caching or per_slot_kv, physics.server_name
    )
    return answer


def past_the_files(cap: int, measured_top: float, server_cap: int | None) -> list[str]:
    """A cap past what the files measured is the scheduler's model's reach, not theirs: said, with the cap the
    measured server held its streams to where it had one (the answer is then a new setting, not one it ran)."""
    notes = []
    if cap > measured_top * (1 + 1e-9):
        notes.append(
            f"max_num_seqs {cap} lies past the largest batch the files measured ({measured_top:g}): the "
            "scheduler's model carries the answer there, and a margin said from its replay error holds in range "
            "only; bench the cap before relying on it"
        )
    if server_cap is not None and cap > server_cap:
        notes.append(
            f"the measured server held its running batch at {server_cap} (its own cap): max_num_seqs {cap} is a new "
            "setting it did not run"
        )
    return notes


MARGIN_RMS = 2.0  # a prediction within this many times the fit's replay error (rms) of a target is said to be close


def margin_notes(
    result: CapAdvice,
    tpot_rms: float,
    ttft_rms: float | None,
    targets: Targets,
    search: Callable[[float, float | None], CapAdvice],
) -> list[str]:
    """A cap whose predicted statistic sits within MARGIN_RMS × the fit's replay error of a target may miss it on
    the server (the real engine, 2026-12-06c: p99 TPOT predicted 105.2 ms, measured 110.4, target 110): say so, and
    which cap keeps that margin (`search` with the targets tightened by it; none where no cap does)."""
    stat = result.statistic
    chosen = result.chosen
    close = []
    tpot = targets.tpot_slo_ms * (1 - MARGIN_RMS * tpot_rms)
    if chosen.tpot_ms[stat] > tpot:
        close.append(f"{stat} TPOT {fmt(chosen.tpot_ms[stat])} ms (target {targets.tpot_slo_ms:g}, {tpot_rms:.1%})")
    ttft = targets.ttft_slo_ms  # kept as it is where nothing measured the TTFT's replay error
    if targets.ttft_slo_ms is not None and ttft_rms is not None:
        ttft = targets.ttft_slo_ms * (1 - MARGIN_RMS * ttft_rms)
        if chosen.ttft_ms[stat] > ttft:
            close.append(f"{stat} TTFT {chosen.ttft_ms[stat]:.0f} ms (target {targets.ttft_slo_ms:g}, {ttft_rms:.1%})")
    if not close or tpot <= 0 or (ttft is not None and ttft <= 0):
        return []
    text = (
        f"at max_num_seqs {chosen.max_num_seqs} the predicted {' and '.join(close)} "
        f"{'are' if len(close) > 1 else 'is'} within twice the fit's replay error (the rms beside each target) of its "
        "target, so the server may miss it"
    )
    try:
        safer = search(tpot, ttft).chosen
    except TokenroofError:
        return [f"{text}; no cap keeps that margin"]
    said = f"{stat} TPOT {fmt(safer.tpot_ms[stat])} ms" + (
        f", TTFT {safer.ttft_ms[stat]:.0f}" if ttft is not None else ""
    )
    return [f"{text}; max_num_seqs {safer.max_num_seqs} keeps it (predicted {said})"]


def advise_decode_only(
    files: Sequence[Path],
    physics: Physics,
    flags: MeasuredWorkload,
    tpot_slo_ms: float,
    samples: int,
    contexts: Sequence[float | None] = (None,),
    table: MeasurementTable | None = None,
) -> list[dict[str, Any]]:
    """advise from the decode step time alone (no prompts in the steps): the fitted curve (fitted once) or first
    principles; one answer per context (None: the measured workload's, or the workload's --context)."""
    if not files:
        return [at_context(first_principles_advice, context, physics, flags, tpot_slo_ms) for context in contexts]
    from tokenroof.fit.core import fit_table
    from tokenroof.fit.predict import prior_for, split_contexts, unread_context
    from tokenroof.io.measurements import read_table

    table = read_table(list(files)) if table is None else table  # (advise_answer's, read once)
    if flags.decode_only:  # TPOT of pure decode steps, whatever the file's own kinds say
        from tokenroof.io.measurements import as_decode_only

        table = as_decode_only(table)
    asked = [c for c in contexts if c is not None] or ([flags.context_tokens] if flags.context_tokens else [])
    measured_at, targets = split_contexts(table, asked or None)
    prior = prior_for(table, physics, replace(flags, context_tokens=measured_at))
    fit = fit_table(table, prior, n_samples=max(samples, 10))
    if targets is None and table.several_contexts:
        held = ", ".join(f"{c:g}" for c in table.level_contexts())
        raise ParameterError(
            f"{table.source} holds curves at several contexts ({held}): give {{}}, one or several, to say "
            "where to advise",
            "context",
        )
    where: list[float | None] = list(targets) if targets else [None]
    each = [at_context(fitted_advice, context, fit, table, tpot_slo_ms) for context in where]
    each[0]["warnings"] += unread_context(measured_at, prior)
    from tokenroof.fit.travel import online
    from tokenroof.serving.replay import prompt_at_context

    if targets and online(table) and table.semantics.output_len is not None:
        out = table.semantics.output_len
        each[0]["warnings"].append(
            "at another context this answer keeps the measured prompts' share of each step; predict --context (and "
            "advise --input-len/--output-len) run the scheduler on prompts of that context instead ("
            + ", ".join(f"{prompt_at_context(c, out):,.0f} tokens at {c:,.0f}" for c in targets)
            + f", with the measured {out:,.0f}-token outputs), whose prefill each step then carries"
        )
    return each


def at_context(answer: Any, context: float | None, *args: Any) -> dict[str, Any]:
    """One context's answer; an error names the context it came from."""
    try:
        return dict(answer(context, *args))
    except TokenroofError as exc:
        raise (prefixed(exc, f"at context {context:g}: ") if context is not None else exc) from None


def fitted_advice(at: float | None, fit: Fit, table: MeasurementTable, tpot_slo_ms: float) -> dict[str, Any]:
    from tokenroof.fit.travel import online

    cap = fit.cap_at(at)
    where = f" at context {at:g}" if at is not None else ""
    steps = "the decode step time (no prompts in the steps)"
    if online(table):  # the measured steps held prompts: the fit folds their share in, and keeps it where it moves
        steps = "the measured steps' time, their prompts' share folded in as measured" + (
            " (the KV reads moved to this context, the prompts' compute not)" if at is not None else ""
        )
    result = advise(
        fit.as_step_time(at),
        tpot_slo_ms,
        0.0,
        int(cap) if cap is not None else None,
        fit.sample_models_at(at),
        f"fitted to {table.source} ({fit.method}){where}; {steps}",
    )
    result.warnings = list(table.warnings) + result.warnings
    answer = {**result.to_dict(), "step_model": fit.step_model_at(at).to_dict()}
    return answer if at is None else {**answer, "context_tokens": at}


def first_principles_advice(
    context: float | None, physics: Physics, flags: MeasuredWorkload, tpot_slo_ms: float
) -> dict[str, Any]:
    ctx = context if context is not None else (flags.mean_context or 1024.0)
    sm = physics.step_model()
    result = advise(
        sm,
        tpot_slo_ms,
        ctx,
        physics.max_batch(ctx),
        (),
        f"first principles: {physics.label()}, context {ctx:g}, the decode step time (no prompts in the steps; give "
        "--input-len and --output-len for the scheduler's answer)",
    )
    model, _ = physics._specs()
    limit = model.max_position_embeddings
    if limit and ctx > limit:
        result.warnings.append(f"context {ctx:g} exceeds {model.name}'s maximum of {limit} positions")
    return {**result.to_dict(), "step_model": sm.to_dict(), "context_tokens": ctx}
