"""Devices, dtypes and memory for the PyTorch engine: what exists, what runs, what fits.

Torch is an optional extra: `require_torch()` is the only way in, and it says how to install it.
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.model import roofline as rl
from tokenroof.specs import ModelSpec, Precision
from tokenroof.specs.precision import canonical_dtype

ENGINE_DTYPES = ("fp32", "bf16", "fp16")
INSTALL_HINT = (
    "install the extra: pip install 'tokenroof[local]' (for a CPU-only PyTorch first run "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu)"
)
GIB = 2**30


def require_torch() -> Any:
    """The torch module, or a TokenroofError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise TokenroofError(f"this command needs PyTorch, which is not installed; {INSTALL_HINT}") from None
    return torch


def resolve_device(name: str) -> Any:
    """`auto` (CUDA when present, else CPU), `cpu`, `cuda` or `cuda:N`; a missing device is an error."""
    torch = require_torch()
    key = name.strip().lower()
    if key == "auto":
        key = "cuda" if torch.cuda.is_available() else "cpu"
    if key.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ParameterError(f"{{}} {name}: this PyTorch ({torch.__version__}) sees no CUDA device", "device")
        return torch.device(key)
    if key != "cpu":
        raise ParameterError(f"{{}} {name}: expected auto, cpu, cuda or cuda:N", "device")
    return torch.device("cpu")


def torch_dtype(dtype: str, device: Any) -> Any:
    """The torch dtype for a tokenroof dtype name, checked by a small matmul on the device."""
    torch = require_torch()
    from tokenroof.measure.local.torch_engine import TORCH_DTYPES

    key = canonical_dtype(dtype, "dtype")
    if key not in TORCH_DTYPES:
        raise TokenroofError(
            f"dtype {key} is not run by the local engine (it runs {', '.join(ENGINE_DTYPES)}; "
            "quantised weights need a serving engine's kernels)"
        )
    tdt = TORCH_DTYPES[key]
    if device.type == "cuda" and key == "bf16" and not torch.cuda.is_bf16_supported():
        raise ParameterError(
            f"{torch.cuda.get_device_name(device)} does not support bf16; use {{}} fp16 or fp32", "dtype"
        )
    try:
        probe = torch.ones(4, 4, dtype=tdt, device=device)
        (probe @ probe).sum().item()
    except RuntimeError as exc:
        raise TokenroofError(f"{key} matmul does not run on {device}: {str(exc).splitlines()[0]}") from None
    return tdt


# -- memory --------------------------------------------------------------------------
def memory_needed_bytes(
    spec: ModelSpec, precision: Precision, batch: int, max_len: int, chunk: int
) -> dict[str, float]:
    """Weights, KV cache and the largest transient buffers of a step (fp32 attention scores, logits, MLP)."""
    act = precision.activation_bytes_per_element
    scores = 3 * 4.0 * spec.num_attention_heads * max_len * max(batch, chunk)  # scores, probs, cast
    logits = 2 * 4.0 * batch * spec.vocab_size
    mlp = 3 * act * max(batch, chunk) * spec.intermediate_size
    return {
        "weights": rl.resident_weight_bytes(spec, precision),
        "kv_cache": rl.kv_bytes_per_token(spec, precision) * batch * max_len,
        "workspace": scores + logits + mlp,
    }


def available_memory_bytes(device: Any) -> float:
    """Free device memory (CUDA) or MemAvailable (Linux; total physical memory elsewhere)."""
    torch = require_torch()
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return physical_memory_bytes()


def physical_memory_bytes() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def total_memory_bytes(device: Any) -> float:
    """All of the device's memory (CUDA) or the machine's physical memory."""
    torch = require_torch()
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return physical_memory_bytes()


def machine_name(device: Any) -> str:
    """The GPU's name, or the CPU's model name with the thread count PyTorch uses."""
    torch = require_torch()
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu} ({torch.get_num_threads()} threads)"


def check_fits(
    spec: ModelSpec,
    precision: Precision,
    batches: Sequence[int],
    max_len: int,
    chunk: int,
    available: float,
    fraction: float,
) -> None:
    """Refuse, before allocating anything, a batch × context whose weights + KV cache + workspace do not fit."""
    budget = available * fraction
    too_big = [b for b in batches if sum(memory_needed_bytes(spec, precision, b, max_len, chunk).values()) > budget]
    if not too_big:
        return
    need = memory_needed_bytes(spec, precision, max(too_big), max_len, chunk)
    low, high = 0, max(too_big)  # bisect the largest batch that fits: need grows with batch
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (
            (mid, high)
            if sum(memory_needed_bytes(spec, precision, mid, max_len, chunk).values()) <= budget
            else (low, mid)
        )
    advice = (
        f"the largest batch that fits at this context is {low}"
        if low
        else "not even batch 1 fits: lower --context or use a smaller model or dtype"
    )
    raise TokenroofError(
        f"batch {max(too_big)} × context {max_len} tokens needs ~{sum(need.values()) / GIB:.1f} GiB "
        f"(weights {need['weights'] / GIB:.1f}, KV cache {need['kv_cache'] / GIB:.1f}, "
        f"workspace {need['workspace'] / GIB:.1f}) "
        f"but {fraction:.0%} of the {available / GIB:.1f} GiB available is {budget / GIB:.1f} GiB; "
        f"batches that do not fit: {', '.join(map(str, too_big))}; {advice}"
    )


F = TypeVar("F", bound=Callable[..., Any])


def flushing_denormals(func: F) -> F:
    """Run `func` with denormal floats flushed to zero (no slow denormal arithmetic distorting CPU timings), and
    put the process back as it was: the setting is process-wide and would change every later float operation
    (5e-324 would read as 0 in the same process)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        torch = require_torch()
        torch.set_flush_denormal(True)
        try:
            return func(*args, **kwargs)
        finally:
            torch.set_flush_denormal(False)

    return wrapper  # type: ignore[return-value]
