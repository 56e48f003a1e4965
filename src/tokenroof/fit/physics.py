"""What `--model/--hardware/--dtype/--kv-dtype/--compute-dtype/--tp/--engine` name, and the one place that turns
them into a first-principles step model, a physics prior for a fit, or the KV-cache pool a server would have.
Commands take one `Physics` instead of six loose flags; without a model and hardware it is `known == False` (data
only). It lives with the fit, whose prior it makes; the serving layer builds its servers on it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.fit.prior import MeasuredWorkload, prior_from_specs
from tokenroof.specs.engines import DEFAULT_MEMORY_FRACTION  # vLLM's --gpu-memory-utilization

if TYPE_CHECKING:
    from tokenroof.fit.core import Prior
    from tokenroof.model.cost import PowerModel, Price
    from tokenroof.model.speculative import Speculation, SpeculativeConfig
    from tokenroof.model.stepmodel import StepModel
    from tokenroof.specs import ModelSpec, Precision
    from tokenroof.specs.engines import EngineProfile


@dataclass(frozen=True)
class Physics:
    """Model, hardware, precision, tensor parallelism and serving engine as given (names or file paths).

    `engine` names an engine profile (specs/data/engines/); None is the default profile (`generic`, the
    profile-free defaults). It shapes every first-principles answer: the step model, the physics prior of a fit.
    `eager` runs it without CUDA graphs (vLLM's --enforce-eager), where its profile says what that costs.
    """

    model: str | None = None
    hardware: str | None = None
    dtype: str | None = None  # None: the checkpoint's quantization_config, else bf16
    kv_dtype: str | None = None
    compute_dtype: str | None = None
    tp: int = 1
    engine: str | None = None
    eager: bool = False  # --enforce-eager: the engine without CUDA graphs (EngineProfile.enforce_eager)
    # --gpu-memory-utilization: the share of memory the server fills, read as the engine reads its own setting (of
    # the whole memory, or of what the weights leave); None: the engine's default (EngineProfile.memory_fraction)
    memory_fraction_given: float | None = None

    def __post_init__(self) -> None:
        given = self.memory_fraction_given
        if given is not None and not 0 < given <= 1:
            raise ParameterError(f"{{}} must be in (0, 1], got {given:g}", "gpu_memory_utilization")
        if given is not None and self.model is None:
            raise ParameterError(
                "{} sizes the KV cache from the model's weights and the hardware's memory: give {} and {} with it "
                "(or {}, the cache's size in tokens, where a command takes it)",
                "gpu_memory_utilization",
                "model",
                "hardware",
                "kv_cache_tokens",
            )
        if (self.model is None) != (self.hardware is None):
            raise ParameterError("give both {} and {} (or neither, for the data alone)", "model", "hardware")
        if self.engine is not None or self.eager:
            if self.model is None:
                raise ParameterError(
                    "{} shapes first principles: give {} and {} with it",
                    "engine" if self.engine is not None else "eager",
                    "model",
                    "hardware",
                )
            self.engine_profile()  # an unknown name or a bad file fails here, in one line

    @property
    def known(self) -> bool:
        return self.model is not None and self.hardware is not None

    @property
    def precision(self) -> Precision:
        """The dtypes as given; without `dtype`, the model checkpoint's quantization (else bf16); without `kv_dtype`,
        what the engine keeps under those weights (Precision.create)."""
        from tokenroof.specs import Precision, load_model

        checkpoint = load_model(self.model).quantization if self.dtype is None and self.model is not None else None
        engine_kv = self.engine_profile().kv_dtype_by_weights if self.engine is not None else None
        return Precision.create(
            self.dtype, self.kv_dtype, self.compute_dtype, checkpoint=checkpoint, engine_kv=engine_kv
        )

    def _specs(self) -> tuple:
        from tokenroof.specs import load_hardware, load_model

        if self.model is None or self.hardware is None:
            raise ParameterError("give {} and {}", "model", "hardware")
        return load_model(self.model), load_hardware(self.hardware)

    def refuse_eager_for_measurements(self) -> None:
        """--enforce-eager shapes first principles only: refuse it beside measurements, which carry the launches the
        measured server made (a flag that changed nothing would say the answer took it into account)."""
        if self.eager:
            raise ParameterError(
                "{} shapes first-principles answers: a fit follows its measurements, which carry the launches the "
                "measured server made; drop {} (or the measurements)",
                "eager",
                "eager",
            )

    def eager_notes(self) -> list[str]:
        """What an answer run without CUDA graphs rests on (none with graphs): the launches' estimate and how long
        they take a step, which a small batch's step cannot be shorter than."""
        if not self.eager or not self.known:
            return []
        host_ms = self.step_model().t_host_s * 1e3
        return [
            f"run without CUDA graphs (--enforce-eager): the host launches each layer's kernels every step, "
            f"{host_ms:.3g} ms a step, and a step takes the longer of that and the GPU's work (an estimate: "
            f"{self.engine}'s [eager] profile, not fitted)"
        ]

    def engine_profile(self) -> EngineProfile:
        """The engine profile named (the default one when none is), eager when `eager`."""
        from tokenroof.specs.engines import load_engine

        profile = load_engine(self.engine)
        return profile.enforce_eager() if self.eager else profile

    DEFAULT_MAX_NUM_SEQS = 256  # vLLM V0's max_num_seqs: the cap where no named engine says its own

    def max_num_seqs(self) -> tuple[int, str | None]:
        """The batch cap the named engine's server starts with, and whose default it is: its `[server.defaults]
        max_num_seqs`, else the one its start-up profile takes on this GPU (vLLM V1: 1,024 on GPUs of 70 GiB or more,
        A100s aside, else 256), else tokenroof's 256 (vLLM V0's), said where an engine is named (None where none is)."""
        if self.engine is None or not self.known:
            return self.DEFAULT_MAX_NUM_SEQS, None
        profile = self.engine_profile()
        server, reserve = profile.server, profile.reserve
        if server is not None and "max_num_seqs" in server.defaults:
            return int(server.defaults["max_num_seqs"]), f"{profile.key}'s default"
        if reserve is not None and reserve.large_gpu_profile_seqs is not None:
            _, hardware = self._specs()
            seqs = reserve.profile(hardware.memory_bytes, hardware.name, None)[1]
            return seqs, f"{profile.key}'s default on this GPU"
        return self.DEFAULT_MAX_NUM_SEQS, f"tokenroof's default ({profile.key}'s own is not in its profile)"

    @property
    def server_name(self) -> str | None:
        """The server the named engine runs as (its flags' owner: `vllm` for V0 and V1), None for none named or an
        engine without a server of its own (a framework, the generic profile)."""
        if self.engine is None:
            return None
        server = self.engine_profile().server
        return None if server is None else server.name

    @property
    def reserves_output(self) -> bool:
        """Whether the named engine admits a request only with its whole output's KV reserved, never preempting
        (TensorRT-LLM's GUARANTEED_NO_EVICT: its profile's `admission`); the default admits on demand, as vLLM."""
        return self.engine is not None and self.engine_profile().admission == "reserve-output"

    def admission_notes(self, kv_cache_tokens: int | None) -> list[str]:
        """What an answer assumes of the KV cache's admission where the named engine reserves each request's whole
        output (TensorRT-LLM's default) and a cache size bounds it (none otherwise: vLLM's way, admitted on demand)."""
        if not self.reserves_output or kv_cache_tokens is None:
            return []
        return [
            f"the KV cache admits as {self.engine}'s default capacity scheduler (GUARANTEED_NO_EVICT): each request "
            "reserves its prompt and its whole output at admission and is never preempted, so fewer run at once than "
            "the cache holds at their mean length (its MAX_UTILIZATION policy, which admits more and pauses, is not "
            "modelled)"
        ]

    def unservable(self) -> str | None:
        """Why the weights alone do not fit in the memory the server may use (None: they fit): its share of the whole
        memory, or 90% of it where the engine's fraction is of what the weights leave."""
        from tokenroof.model.roofline import resident_weight_bytes

        fraction, of_free = self.memory_fraction()
        memory_utilization = 1.0 if of_free else fraction  # a share of what the weights leave: they may take it all
        model, hardware = self._specs()
        precision = self.precision
        weights = resident_weight_bytes(model, precision, self.tp)
        reserved = self.reserved_bytes()
        usable = hardware.memory_bytes * memory_utilization
        if weights + reserved < usable:
            return None
        needed = math.ceil(weights * self.tp / max(usable - reserved, 1.0))
        heads = model.num_attention_heads
        tp = next((t for t in range(max(needed, self.tp + 1), heads + 1) if heads % t == 0), None)  # one that divides
        beside = f" beside the {reserved / 1e9:,.1f} GB its server reserves" if reserved else ""
        share = "" if of_free else f", {memory_utilization:.3g} of it usable"
        fixes = ([f"--tp {tp} or more"] if tp is not None and needed < 64 else []) + [
            "a smaller --dtype",
            "a larger --hardware",
        ]
        if not of_free and memory_utilization < 1:
            fixes.append("a larger --gpu-memory-utilization")
        return (
            f"{model.name} in {precision.weight_dtype} holds {weights / 1e9:,.0f} GB of weights per GPU at --tp "
            f"{self.tp}{beside}; {hardware.key or hardware.name} has {hardware.memory_bytes / 1e9:,.0f} GB{share}: "
            f"it cannot be served (give {', '.join(fixes[:-1])} or {fixes[-1]})"
        )

    def require_servable(self) -> None:
        """Refuse a deployment whose weights do not fit, whichever path asks (first principles, a prior, a pool)."""
        why = self.unservable()
        if why is not None:
            raise TokenroofError(why)

    def step_model(self) -> StepModel:
        """The first-principles step model of a server: the engine profile's efficiencies, under the hardware file's
        measured ones (roofline.default_efficiencies gives the precedence)."""
        from tokenroof.model.roofline import default_efficiencies, step_model_from_specs

        self.require_servable()
        model, hardware = self._specs()
        eff = default_efficiencies(hardware, self.precision, self.engine_profile())
        return step_model_from_specs(model, hardware, self.precision, self.tp, eff)

    def speculation(self, config: SpeculativeConfig) -> Speculation:
        """Speculative decoding on this deployment: the proposer's pass priced from its shapes (the draft model's, or
        an EAGLE/MTP head's) at this hardware, precision, TP and engine; n-gram drafting needs none of them."""
        from tokenroof.model.roofline import default_efficiencies
        from tokenroof.model.speculative import Speculation, speculation_from_specs
        from tokenroof.specs import load_model

        if config.method == "ngram":
            return Speculation(config.num_speculative_tokens, config.acceptance, "ngram")
        if not self.known:
            raise ParameterError(
                f"pricing the {config.method} proposer's passes needs {{}} and {{}} (n-gram drafting does not)",
                "model",
                "hardware",
            )
        model, hardware = self._specs()
        eff = default_efficiencies(hardware, self.precision, self.engine_profile())
        draft = load_model(config.model) if config.model is not None else None
        return speculation_from_specs(
            model,
            hardware,
            self.precision,
            self.tp,
            eff,
            config.method,
            config.num_speculative_tokens,
            config.acceptance,
            draft,
        )

    def price(self, given: float | None = None) -> Price | None:
        """What one accelerator costs an hour: as given, else the hardware file's, else None (no bill)."""
        from tokenroof.model.cost import Price, price_of

        if self.hardware is None:
            return None if given is None else Price(given, "given")
        return price_of(self._specs()[1], given)

    def power(self) -> PowerModel | None:
        """The TDP × utilization power model of the hardware (None: unknown hardware, or a file without a TDP)."""
        from tokenroof.model.cost import power_model

        return None if self.hardware is None else power_model(self._specs()[1])

    def prior(self, workload: MeasuredWorkload) -> Prior:
        """The physics prior for a fit of measurements taken under `workload` (centred on the engine profile)."""
        self.require_servable()
        model, hardware = self._specs()
        profile = self.engine_profile() if self.engine is not None else None
        fraction, of_free = self.memory_fraction()  # the memory cap as the engine sizes its pool
        prior = prior_from_specs(
            model, hardware, self.precision, workload, self.tp, None, fraction, engine=profile, of_free=of_free
        )
        if prior.max_batch is None:  # the weights fit, but not one sequence of this context beside them
            raise ParameterError(
                f"not one sequence of {workload.mean_context:,.0f} tokens fits in the KV cache {model.name} leaves on "
                f"{hardware.key or hardware.name} at this memory share ({fraction:g}"
                f"{' of what the weights leave' if of_free else ' of the whole memory'}): the measured server had "
                "more (a larger {}, or the {} it ran)",
                "gpu_memory_utilization",
                "engine",
            )
        return prior

    def max_model_len(self, given: int | None = None) -> int | None:
        """The server's max_model_len: the one given (a server started with --max-model-len), never past the model's
        positions, else the model's positions (vLLM's default); None: no model named."""
        if self.model is None:
            return given
        from tokenroof.specs import load_model

        positions = load_model(self.model).max_position_embeddings
        if given is None or not positions:
            return positions or given
        return min(given, positions)

    def chunks_long_contexts(self, max_model_len: int | None = None) -> bool:
        """Whether the named engine, which prefills in steps of its own, chunks prefill instead for this model: vLLM
        V0 turns chunked prefill on by default when max_model_len passes `whole_context_up_to` (32K; vLLM 0.5.5 on),
        as its start-up profile does (EngineReserve.profile). `max_model_len`: the server's, when given."""
        if self.engine is None or self.model is None:
            return False
        return self.engine_profile().chunks_prefill_for(self.max_model_len(max_model_len))

    def separate_prefill_budget(self, max_model_len: int | None = None) -> int | None:
        """The prompt tokens one prefill step of its own holds by default: the profile's (TGI's
        --max-batch-prefill-tokens, 4,096), else vLLM V0's max(max_model_len, 2,048) (SchedulerConfig, without chunked
        prefill: a step holds at least one whole prompt of the longest length; `max_model_len` the server's when
        given, else the model's positions); None: unknown."""
        profile = self.engine_profile()
        if profile.max_num_batched_tokens is not None:
            return profile.max_num_batched_tokens
        reserve = profile.reserve
        if reserve is None or reserve.whole_context_up_to is None or self.model is None:
            return None
        context = self.max_model_len(max_model_len)
        return max(context, reserve.profile_tokens) if context else None

    def prompt_budget(self) -> int | str | None:
        """How the named engine prefills measured prompts: its chunk budget per step, None for whole prompts (its own
        prefill steps), or "fit" when no engine is named (the replay of the measurements decides)."""
        if self.engine is None:
            return "fit"
        profile = self.engine_profile()
        if self.chunks_long_contexts():  # vLLM V0 past 32K of context: chunked at its profile step's budget
            assert profile.reserve is not None
            return profile.reserve.profile_tokens
        if profile.prefill != "chunked":
            return None
        reserve = profile.reserve
        if reserve is not None and reserve.large_gpu_bytes is not None and self.known:
            # the server's default budget follows the GPU (vLLM V1: 8,192 on GPUs of 70 GiB or more, A100s aside,
            # else 2,048): the same rule its start-up profile follows
            _, hardware = self._specs()
            return reserve.profile(hardware.memory_bytes, hardware.name, None)[0]
        return profile.max_num_batched_tokens

    def kv_pool_tokens(self, speculative: SpeculativeConfig | None = None) -> int | None:
        """The KV-cache pool a server would have: the named engine's default memory fraction as that engine reads it
        (of the whole memory, weights included: vLLM, SGLang, TGI; of the memory the weights leave: TensorRT-LLM,
        LMDeploy), else vLLM's 90% of the whole memory; None without model and hardware. emulate and simulate build
        the same server from the same flags. A speculating server's proposer takes its share: a draft model's
        weights leave the pool, and every token the pool holds keeps the proposer's KV beside the target's (an
        EAGLE/MTP head: one layer's)."""
        if not self.known:
            return None
        from tokenroof.model.prefix import VLLM_BLOCK_SIZE
        from tokenroof.model.roofline import kv_bytes_per_token, kv_cache_tokens, resident_weight_bytes

        self.require_servable()
        model, hardware = self._specs()
        fraction, of_free = self.memory_fraction()
        tokens = kv_cache_tokens(model, hardware, self.precision, self.tp, fraction, of_free, self.reserved_bytes())
        if tokens < VLLM_BLOCK_SIZE:  # the weights fit, the cache beside them not one block: one message everywhere
            share = "of what the weights leave" if of_free else "of the whole memory"
            raise ParameterError(
                f"the KV cache {model.name} leaves on {hardware.key or hardware.name} at {fraction:g} {share} holds "
                f"{tokens:,} tokens, not one block of {VLLM_BLOCK_SIZE}: give a larger {{}}",
                "gpu_memory_utilization",
            )
        shapes = self._proposer(speculative)
        if speculative is None or shapes is None:
            return tokens
        per_token = kv_bytes_per_token(model, self.precision, self.tp)
        room = tokens * per_token
        if speculative.method == "draft_model":
            room -= resident_weight_bytes(shapes, self.precision, self.tp)
        return max(int(room // (per_token + kv_bytes_per_token(shapes, self.precision, self.tp))), 0)

    def kv_bytes_per_token(self, speculative: SpeculativeConfig | None = None) -> float | None:
        """KV-cache bytes of one token across the replica's GPUs (what a disaggregated prefill sends: with a proposer
        of its own, a draft model's or an EAGLE/MTP head's KV beside the target's); None without model and
        hardware."""
        if not self.known:
            return None
        from tokenroof.model.roofline import kv_bytes_per_token

        model, _ = self._specs()
        per_token = kv_bytes_per_token(model, self.precision, self.tp)
        shapes = self._proposer(speculative)
        if shapes is not None:
            per_token += kv_bytes_per_token(shapes, self.precision, self.tp)
        return per_token * self.tp

    def _proposer(self, speculative: SpeculativeConfig | None) -> ModelSpec | None:
        """The shapes of a proposer with weights of its own (a draft model, an EAGLE/MTP head); None for n-gram or
        no speculation."""
        if speculative is None or speculative.method == "ngram":
            return None
        from tokenroof.model.speculative import proposer_spec
        from tokenroof.specs import load_model

        model, _ = self._specs()
        draft = load_model(speculative.model) if speculative.model is not None else None
        shapes = proposer_spec(model, speculative.method, draft)
        assert shapes is not None
        return shapes

    def pool_notes(self, pool_tokens: int | None) -> list[str]:
        """Where a KV pool sized from memory (`kv_pool_tokens`) rests on the named engine's default share of it, so
        (none when the share was given, or no engine is named)."""
        if pool_tokens is None or self.engine is None or self.memory_fraction_given is not None:
            return []
        fraction, of_free = self.memory_fraction()
        reserve = " and the server's reserve" if self.reserved_bytes() else ""
        share = "of what the weights leave" if of_free else f"of the whole memory, less the weights{reserve}"
        _, hardware = self._specs()
        return [
            f"a KV cache of {pool_tokens:,} tokens on {hardware.key or hardware.name}: {fraction:g} {share}, "
            f"{self.engine}'s default (--gpu-memory-utilization to change it)"
        ]

    def memory_fraction(self) -> tuple[float, bool]:
        """(fraction, whether of the memory left after the weights) of the named engine's server: the one given
        (--gpu-memory-utilization), else its default (`[server.defaults] memory_fraction`), read as the engine reads
        its own setting; 0.9 of the whole memory (vLLM's default) when it has none."""
        if self.engine is None:
            return self.memory_fraction_given or DEFAULT_MEMORY_FRACTION, False
        return self.engine_profile().memory_fraction(self.memory_fraction_given)

    def reserved_bytes(self) -> float:
        """What the named engine's server holds per GPU beside weights and KV cache (its `[server.reserve]`: the
        start-up profile's activations and sampler, buffers, the driver's share); 0 with no engine or none given."""
        if self.engine is None or not self.known:
            return 0.0
        from tokenroof.model.roofline import server_reserved_bytes

        model, hardware = self._specs()
        return server_reserved_bytes(model, hardware, self.precision, self.tp, self.engine_profile().reserve)

    def max_batch(self, context_tokens: float) -> int:
        """Sequences of `context_tokens` whose KV cache fits in the pool `kv_pool_tokens` sizes (the engine's memory
        fraction as it reads it, less its reserve), a sliding-window layer holding only its window."""
        from tokenroof.model.roofline import batch_in_pool

        model, _ = self._specs()
        return batch_in_pool(model, self.kv_pool_tokens() or 0, context_tokens)

    def label(self) -> str:
        engine = f", engine {self.engine_profile().key}" if self.engine is not None else ""
        return f"{self.model} on {self.hardware} ×{self.tp}{engine}"
