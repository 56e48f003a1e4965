"""What is deployed: model × hardware × precision × tensor parallelism, resolved once from the flags.

`Physics` is what `--model/--hardware/--dtype/--kv-dtype/--compute-dtype/--tp` name,
and the one place that turns them into a first-principles step model, a physics prior
for a fit, or the KV-cache pool a server would have. Commands take one `Physics`
instead of six loose flags; without a model and hardware it is `known == False` (data
only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenroof.errors import TokenroofError

if TYPE_CHECKING:
    from tokenroof.fit import Prior
    from tokenroof.predict import Workload
    from tokenroof.specs import Precision
    from tokenroof.stepmodel import StepModel


@dataclass(frozen=True)
class Physics:
    """Model, hardware, precision and tensor parallelism as given (names or file paths)."""

    model: str | None = None
    hardware: str | None = None
    dtype: str = "bf16"
    kv_dtype: str | None = None
    compute_dtype: str | None = None
    tp: int = 1

    def __post_init__(self) -> None:
        if (self.model is None) != (self.hardware is None):
            raise TokenroofError("give both --model and --hardware (or neither, for the data alone)")

    @property
    def known(self) -> bool:
        return self.model is not None and self.hardware is not None

    @property
    def precision(self) -> Precision:
        from tokenroof.specs import Precision

        return Precision.create(self.dtype, self.kv_dtype, self.compute_dtype)

    def _specs(self) -> tuple:
        from tokenroof.specs import load_hardware, load_model

        if self.model is None or self.hardware is None:
            raise TokenroofError("give --model and --hardware")
        return load_model(self.model), load_hardware(self.hardware)

    def step_model(self) -> StepModel:
        """The first-principles step model (the hardware file's efficiencies, else the defaults)."""
        from tokenroof.roofline import step_model_from_specs

        model, hardware = self._specs()
        return step_model_from_specs(model, hardware, self.precision, self.tp)

    def prior(self, workload: Workload) -> Prior:
        """The physics prior for a fit of measurements taken under `workload`."""
        from tokenroof.predict import prior_from_specs

        model, hardware = self._specs()
        return prior_from_specs(model, hardware, self.precision, workload, self.tp)

    def kv_pool_tokens(self) -> int | None:
        """The KV-cache pool a server would have (vLLM's, roughly: 90% of memory less the weights); None without
        model and hardware. emulate and simulate build the same server from the same flags."""
        if not self.known:
            return None
        from tokenroof.roofline import kv_cache_tokens

        model, hardware = self._specs()
        return kv_cache_tokens(model, hardware, self.precision, self.tp)

    def max_batch(self, context_tokens: float) -> int:
        from tokenroof.roofline import max_batch_by_memory

        model, hardware = self._specs()
        return max_batch_by_memory(model, hardware, self.precision, context_tokens, self.tp)

    def label(self) -> str:
        return f"{self.model} on {self.hardware} ×{self.tp}"
