"""What is deployed, and the server built from it: `Deployment` is the whole of it (the step model's source, the
lengths, the KV budget, the batch cap and the token budget), over a `Physics` (fit/physics.py: model × hardware ×
precision × tensor parallelism × engine)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tokenroof.errors import ParameterError
from tokenroof.fit.physics import Physics
from tokenroof.fit.prior import MeasuredWorkload
from tokenroof.model.disagg import DEFAULT_LINK_BYTES_PER_S
from tokenroof.model.stepmodel import mean_context_tokens

if TYPE_CHECKING:
    from tokenroof.fit.core import Prior
    from tokenroof.fit.travel import Travelling
    from tokenroof.io.measurements import MeasurementTable
    from tokenroof.model.cost import Billing
    from tokenroof.model.disagg import Disaggregation
    from tokenroof.model.speculative import Speculation, SpeculativeConfig
    from tokenroof.model.stepmodel import StepModel
    from tokenroof.serving.engine.core import Server
    from tokenroof.serving.simulate import Lengths

__all__ = ["Deployment", "Physics"]


@dataclass(frozen=True)
class Deployment:
    """One deployment, resolved once from the flags: what serves and how, and the traffic's lengths.

    The step model comes from exactly one source: `physics` (first principles), a measured table to `fit` (with
    `physics` as its prior when known), or a saved `step_model_file`. `kv_cache_tokens` is the KV budget given,
    else the pool `physics` implies (`kv_budget_tokens`), else unlimited. Every command that runs the scheduler
    (advise with lengths, simulate, plan, emulate) builds its server from this object, so the same flags build the
    same server everywhere.
    """

    physics: Physics = field(default_factory=Physics)
    fit: Path | Sequence[Path] | None = None  # measurement files (or bench folders) read as one table
    step_model_file: Path | None = None
    input_len: Lengths | None = None
    output_len: Lengths | None = None
    max_num_seqs: int = 256
    kv_cache_tokens: int | None = None
    max_num_batched_tokens: int | None = None
    per_slot_kv: bool | None = None  # llama-server's per-slot KV streams; None: as the fitted model was measured
    speculative: SpeculativeConfig | None = None  # speculative decoding (vLLM's --speculative-config)
    gpu_cost_per_hour: float | None = None  # US$ per accelerator-hour (None: the hardware file's, if any)
    prefix_caching: bool = True  # the server shares computed prompt blocks (vLLM V1's and SGLang's default)
    prefill_replicas: int | None = None  # disaggregated prefill: replicas of each pool (both, or neither)
    decode_replicas: int | None = None
    kv_transfer_gb_s: float = DEFAULT_LINK_BYTES_PER_S / 1e9  # the link from prefill to decode replicas, GB/s
    prefill_tp: int | None = None  # the prefill pool's tensor parallelism (None: `physics.tp`, the decode pool's)
    prefill_hardware: str | None = None  # the prefill pool's hardware (None: `physics.hardware`, the decode pool's)
    prefill_gpu_cost_per_hour: float | None = None  # US$ per prefill-hardware GPU-hour (None: its file's, if any)
    max_model_len: int | None = None  # the server's --max-model-len (None: the model's positions, vLLM's default)
    max_num_seqs_default: str | None = None  # whose default max_num_seqs is, where not given (said in the notes)

    def __post_init__(self) -> None:
        if isinstance(self.fit, list | tuple):  # repeated --fit: one table; none given: no fit
            object.__setattr__(self, "fit", tuple(Path(f) for f in self.fit) or None)
        if self.fit is not None or self.step_model_file is not None:
            self.physics.refuse_eager_for_measurements()
        sources = (self.fit is not None) + (self.step_model_file is not None)
        if sources > 1 or (self.step_model_file is not None and self.physics.model is not None):
            raise ParameterError(
                "give one step-model source: {}/{}, {} FILE (with {}/{} as its prior), or {} JSON",
                "model",
                "hardware",
                "fit",
                "model",
                "hardware",
                "step_model",
            )
        if sources == 0 and not self.physics.known:
            raise ParameterError(
                "give one step-model source: {}/{}, {} FILE or {} JSON", "model", "hardware", "fit", "step_model"
            )
        for name, value in (
            ("prefill_tp", self.prefill_tp),
            ("max_num_seqs", self.max_num_seqs),
            ("kv_cache_tokens", self.kv_cache_tokens),
            ("max_num_batched_tokens", self.max_num_batched_tokens),
        ):
            if value is not None and value < 1:
                raise ParameterError(f"{{}} must be at least 1, got {value}", name)

    @property
    def mean_lengths(self) -> tuple[float, float] | None:
        """The traffic's mean prompt and output tokens (None without lengths)."""
        if self.input_len is None or self.output_len is None:
            return None
        return float(self.input_len.mean), float(self.output_len.mean)

    @property
    def mean_context_tokens(self) -> float | None:
        """Mean tokens in the KV cache over a request's decode (input + output/2); None without lengths."""
        lengths = self.mean_lengths
        return None if lengths is None else mean_context_tokens(*lengths)

    def kv_budget_tokens(self) -> int | None:
        """The KV-cache capacity the server has: as given, else from the memory `physics` leaves (beside a draft
        model, when one speculates), else None."""
        if self.kv_cache_tokens is not None:
            return self.kv_cache_tokens
        return self.physics.kv_pool_tokens(self.speculative)

    def kv_tokens(self, travelling: Travelling) -> int | None:
        """The KV-cache capacity a run of `travelling` has: `kv_budget_tokens`, else the pool a saved model's
        predict ran its answers with (its --model/--hardware, saved beside it), else None (unlimited)."""
        given = self.kv_budget_tokens()
        return given if given is not None else travelling.kv_cache_tokens

    def kv_notes(self, travelling: Travelling) -> list[str]:
        """Where the KV cache comes from: the named engine's default share of memory (as max_num_seqs's default is
        said), or the saved model (nothing here sized it otherwise)."""
        if self.kv_cache_tokens is None and self.physics.known:
            return self.physics.pool_notes(self.kv_budget_tokens())
        if self.kv_cache_tokens is not None and self.physics.memory_fraction_given is not None:
            return [
                f"--gpu-memory-utilization {self.physics.memory_fraction_given:g} changes nothing here: "
                f"--kv-cache-tokens {self.kv_cache_tokens:,} sizes the KV cache"
            ]
        if self.kv_budget_tokens() is not None or travelling.kv_cache_tokens is None:
            return []
        whose = f" for {travelling.prior}" if travelling.prior else ""
        return [
            f"a KV cache of {travelling.kv_cache_tokens:,} tokens, the pool predict sized{whose} and saved with the "
            "model (--kv-cache-tokens to change it)"
        ]

    def billing(self) -> Billing:
        """How this deployment's runs are billed: its TP's boards at the price (given, else the hardware file's) and
        the hardware's power model (cost.py)."""
        from tokenroof.model.cost import Billing

        prefill = self.prefill_physics() if self.prefill_hardware is not None and self.physics.known else None
        pool = None
        if prefill is not None:
            pool = Billing(prefill.tp, prefill.price(self.prefill_gpu_cost_per_hour), prefill.power())
        return Billing(self.physics.tp, self.physics.price(self.gpu_cost_per_hour), self.physics.power(), pool)

    def speculation(self) -> Speculation | None:
        """The speculative decoding the server runs, its proposer priced on `physics` (None: it does not)."""
        return None if self.speculative is None else self.physics.speculation(self.speculative)

    def step_models(self, n_samples: int = 0) -> tuple[Travelling, list[StepModel]]:
        """The step model (with what it was fitted under) and, for a fit, `n_samples` interval samples."""
        from tokenroof.fit.travel import Travelling, read_step_model
        from tokenroof.serving.replay import engine_scheduling, fitted_models

        if self.step_model_file is not None:
            return read_step_model(self.step_model_file), []
        if self.fit is not None:
            budget, separate, reserve = engine_scheduling(self.physics)  # as predict replays the same files
            return fitted_models(
                self.fit_files, self._prior_of, n_samples, self.kv_budget_tokens(), budget, reserve, separate
            )
        return Travelling(self.physics.step_model()), []

    @property
    def fit_files(self) -> tuple[Path, ...]:
        if self.fit is None:
            return ()
        return (self.fit,) if isinstance(self.fit, Path) else tuple(self.fit)

    def prompt_budget(self, travelling: Travelling) -> int | None:
        """The prompt tokens per step the server prefills: as given, else what the measured server was fitted with
        (a model fitted on the scheduler), else the named engine's default (a chunked one's budget on this GPU:
        `Physics.prompt_budget`; one that prefills in steps of their own, its prefill step's: TGI's
        --max-batch-prefill-tokens), else whole prompts (None)."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        replayed = travelling.replayed
        if replayed is not None:
            return replayed.max_num_batched_tokens
        if self.separate_prefill(travelling):
            return self.physics.separate_prefill_budget(self.max_model_len)
        budget = self.physics.prompt_budget() if self.physics.engine is not None else None
        if not isinstance(budget, int):
            return None
        from tokenroof.serving.engine.core import budget_holds

        if not budget_holds(budget, self.max_num_seqs):  # the server would refuse to start, as vLLM does
            raise ParameterError(
                f"{{}} is {budget:,} by default for {self.physics.engine} on this GPU: it must exceed {{}} "
                f"({self.max_num_seqs:,}), every running sequence taking a token of it; give a larger {{}}",
                "max_num_batched_tokens",
                "max_num_seqs",
                "max_num_batched_tokens",
            )
        return budget

    def slot_streams(self, travelling: Travelling) -> bool:
        """Whether the server gives each slot its own KV stream (a step then runs a forward pass per run of
        consecutive busy slots, serving/engine/core.py): as given, else as the measured server was (the table's
        `kv_slots`, saved with a model fitted on the scheduler), else not (one KV cache, every other server)."""
        if self.per_slot_kv is not None:
            return self.per_slot_kv
        replayed = travelling.replayed
        return replayed is not None and replayed.kv_slots is not None

    def server(self, travelling: Travelling) -> Server:
        """Each replica's scheduler settings: the KV budget, the prompt budget and the KV streams (as given, else as
        `travelling` was measured), the speculation, and how the named engine's KV cache admits."""
        from tokenroof.serving.engine.core import Server

        slots = self.slot_streams(travelling)
        return Server(
            self.kv_tokens(travelling),
            self.prompt_budget(travelling),
            slots,
            self.speculation(),
            self.prefix_caching and not slots,
            self.separate_prefill(travelling),
            self.reserves_output(travelling),
        )

    def reserves_output(self, travelling: Travelling) -> bool:
        """Whether the server admits with each whole output reserved: the engine named (TensorRT-LLM's default,
        whatever set the step times), else as a model fitted on the scheduler was replayed."""
        replayed = travelling.replayed
        return self.physics.reserves_output or (replayed is not None and replayed.reserve_output)

    def long_context_chunks(self) -> bool:
        """Whether vLLM V0 chunks prefill here by default: past 32K positions (Physics.chunks_long_contexts), and
        only without speculative decoding, as V0's EngineArgs turns it on."""
        return self.speculative is None and self.physics.chunks_long_contexts(self.max_model_len)

    def separate_prefill(self, travelling: Travelling) -> bool:
        """Whether the server prefills prompts in steps of their own, its running sequences waiting: the named
        engine's scheduling (vLLM V0 without chunked prefill, TGI: `prefill = "separate"` in its profile) on a step
        model from first principles; a model fitted on the scheduler keeps the scheduling it was fitted with."""
        if travelling.replayed is not None:  # fitted on the scheduler: as the measured server was replayed
            return travelling.replayed.separate_prefill
        if self.physics.engine is None or self.fit is not None or self.step_model_file is not None:
            return False
        if self.long_context_chunks():
            return False
        return self.physics.engine_profile().prefill == "separate"

    def disaggregation(self) -> Disaggregation | None:
        """The prefill and decode pools and the link between them (None: colocated, every replica does both)."""
        from tokenroof.model.disagg import Disaggregation, KvTransfer

        if self.prefill_replicas is None and self.decode_replicas is None:
            return None
        if self.prefill_replicas is None or self.decode_replicas is None:
            raise ParameterError(
                "give {} and {} together (disaggregated prefill)", "prefill_replicas", "decode_replicas"
            )
        per_token = self.physics.kv_bytes_per_token(self.speculative)
        if per_token is None:
            raise ParameterError(
                "a disaggregated server sends each prompt's KV cache: give {} and {} for its bytes per token",
                "model",
                "hardware",
            )
        link = KvTransfer(per_token, self.kv_transfer_gb_s * 1e9)
        budget = self.max_num_batched_tokens
        prefill = self.prefill_physics()
        prefill_model = None
        if prefill is not None:
            if self.fit is not None or self.step_model_file is not None:
                flag = "prefill_hardware" if self.prefill_hardware is not None else "prefill_tp"
                raise ParameterError(
                    "{} prices the prefill pool from first principles: give {}/{} as the step model's source, not "
                    "{} or {}",
                    flag,
                    "model",
                    "hardware",
                    "fit",
                    "step_model",
                )
            why = prefill.unservable()
            if why is not None:  # the prefill pool's own hardware or TP: say so, and name its flags
                raise ParameterError(
                    f"the prefill pool ({prefill.hardware} ×{prefill.tp}, {{}}/{{}}): {why}",
                    "prefill_hardware",
                    "prefill_tp",
                )
            proposer = self.speculative is not None and self.speculative.method != "ngram"
            if self.prefill_hardware is not None and proposer:
                raise ParameterError(
                    "a proposer with weights prefills beside the target on the prefill pool, which is not modelled on "
                    "hardware of its own: drop {} or use n-gram speculation",
                    "prefill_hardware",
                )
            try:
                prefill_model = prefill.step_model()
            except ParameterError as exc:  # the prefill pool's own TP or hardware, under its own flags
                if prefill.tp == self.physics.tp and "hardware" not in exc.parameters:
                    raise
                own = {"tp": "prefill_tp", "hardware": "prefill_hardware"}
                raise ParameterError(exc.template, *(own.get(p, p) for p in exc.parameters)) from exc
        return Disaggregation(
            self.prefill_replicas,
            self.decode_replicas,
            link,
            budget,
            prefill_model,
            self.prefill_tp,
            prefill.hardware if prefill is not None and self.prefill_hardware is not None else None,
        )

    def prefill_kv_tokens(self) -> int | None:
        """The KV tokens a prefill replica holds (its own hardware and TP, else the decode pool's): the longest prompt
        it can prefill (None: unknown)."""
        prefill = self.prefill_physics() or self.physics
        return prefill.kv_pool_tokens() if prefill.known else None

    def prefill_physics(self) -> Physics | None:
        """A disaggregated prefill pool of its own TP or hardware (None: the decode pool's physics serve both)."""
        tp = self.prefill_tp if self.prefill_tp is not None else self.physics.tp
        hardware = self.prefill_hardware if self.prefill_hardware is not None else self.physics.hardware
        if tp == self.physics.tp and hardware == self.physics.hardware:
            return None
        return replace(self.physics, tp=tp, hardware=hardware)

    def scheduling_notes(self, travelling: Travelling) -> list[str]:
        """What an answer assumes of how the named engine schedules prompts, where it is not tokenroof's default."""
        if not self.separate_prefill(travelling):
            named = self.physics.engine is not None and self.physics.engine_profile().prefill == "separate"
            measured = self.fit is not None or self.step_model_file is not None
            if named and measured and not self.long_context_chunks():
                return [
                    f"the step model keeps the scheduling it was fitted with (prompts prefilled beside the decodes), "
                    f"not {self.physics.engine}'s prefill steps of their own: --engine names the physics here, not the "
                    "scheduler"
                ]
            return []
        budget = self.prompt_budget(travelling)
        # whose scheduling: the measured server's (a model fitted so) or the named engine's
        fitted = travelling.replayed is not None and travelling.replayed.separate_prefill
        engine = self.physics.engine
        default, scheduling = (
            ("the measured server's budget, as fitted", "the measured server's scheduling, as fitted")
            if fitted
            else (f"{engine}'s default", f"{engine}'s scheduling")
        )
        most = "" if budget is None else f" (at most {budget:,} prompt tokens a step"
        if budget is not None:
            given = self.max_num_batched_tokens is not None
            most += ")" if given else f": {default}, --max-num-batched-tokens to change it)"
        return [f"prompts prefilled in steps of their own{most}, the running sequences waiting: {scheduling}"]

    def budget_notes(self, travelling: Travelling) -> list[str]:
        """The prompt budget an answer assumes when it is the named engine's default (not given, not measured), the
        engine's scheduling where it prefills in steps of their own, and how its KV cache admits where that is not
        vLLM's way (`admission_notes`)."""
        cap = (
            [f"max_num_seqs {self.max_num_seqs:,}: {self.max_num_seqs_default} (--max-num-seqs to change it)"]
            if self.max_num_seqs_default
            else []
        )
        admission = self.admission_notes() if self.physics.reserves_output else self._replayed_admission(travelling)
        return cap + self._prompt_notes(travelling) + admission + self.kv_notes(travelling)

    def _replayed_admission(self, travelling: Travelling) -> list[str]:
        """A saved model replayed with each whole output reserved runs so, and says so."""
        if not self.reserves_output(travelling) or self.kv_tokens(travelling) is None:
            return []
        return [
            "the KV cache admits as the measured server was replayed (each request's prompt and whole output reserved "
            "at admission, never preempted: TensorRT-LLM's GUARANTEED_NO_EVICT)"
        ]

    def admission_notes(self) -> list[str]:
        """What an answer assumes of the KV cache's admission (Physics.admission_notes), for this deployment's cache."""
        return self.physics.admission_notes(self.kv_budget_tokens())

    def _prompt_notes(self, travelling: Travelling) -> list[str]:
        scheduling = self.scheduling_notes(travelling)
        if scheduling:
            return scheduling
        if self.max_num_batched_tokens is not None or travelling.replayed is not None:
            return []
        budget = self.prompt_budget(travelling)
        if budget is None or self.physics.engine is None:
            return []
        why = "on this GPU"
        if self.long_context_chunks():
            why = "past 32K of context (V0 turns chunked prefill on there, vLLM 0.5.5 on; 512 tokens before 0.6.4)"
        return [
            f"prompts chunked at {budget:,} tokens a step: {self.physics.engine}'s default {why} "
            "(--max-num-batched-tokens to change it)"
        ]

    def prefix_notes(self, travelling: Travelling) -> list[str]:
        """What an answer with shared prefixes rests on (none without them): the prefixes are the workload given, and
        how the server treats them."""
        prefix = None if self.input_len is None else self.input_len.shared_prefix
        if prefix is None:
            return []
        slots = self.slot_streams(travelling)
        return [prefix.assumption(self.prefix_caching, slots, travelling.step_model.prompts_folded)]

    def scheduled_as(self, travelling: Travelling) -> Deployment:
        """This deployment with the scheduler settings `travelling` implies where none were given."""
        return replace(
            self,
            max_num_batched_tokens=self.prompt_budget(travelling),
            per_slot_kv=self.slot_streams(travelling),
            kv_cache_tokens=self.kv_tokens(travelling),
        )

    def _prior_of(self, table: MeasurementTable) -> Prior | None:

        if not self.physics.known:
            return None
        if table.context_tokens is None and table.semantics.mean_context is None:
            raise ParameterError(
                f"{table.source}: fitting with {{}}/{{}} needs the workload the table was measured at: add a "
                "'# input_len=… output_len=…' line or a context_tokens column ({}/{} here "
                "describe the workload to run, not the one measured)",
                "model",
                "hardware",
                "input_len",
                "output_len",
            )
        return self.physics.prior(MeasuredWorkload.from_table(table))

    def with_physics(self, physics: Physics) -> Deployment:
        return replace(self, physics=physics)
