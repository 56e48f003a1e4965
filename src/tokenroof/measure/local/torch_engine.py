"""A batched decode engine in PyTorch for Llama-family decoders (GQA, MQA, SwiGLU, RoPE, RMSNorm).

Module and parameter names follow Hugging Face's `LlamaForCausalLM`
(`model.layers.0.self_attn.q_proj.weight`, ...), so a local safetensors
checkpoint loads with `load_state_dict` and a `transformers` model's weights copy
over as they are (the logits test does this). Weights are random unless a
checkpoint is given: decode timing does not depend on their values.

The KV cache is preallocated, `[batch, kv_heads, max_len, head_dim]` per layer;
attention groups the query heads of each KV head so the cache is read once,
never repeated per query head. This module imports torch: import it only after
`tokenroof.measure.local.local.require_torch()`.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tokenroof.errors import TokenroofError
from tokenroof.specs import ModelSpec

TORCH_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
INIT_STD = 0.02  # weight scale of random models (Llama's initializer_range)
# Fewest rows from which a prepacked weight is faster, per dtype (measured on a 2-core Xeon, torch 2.13, at
# llama-123m's shapes): MKL's packed sgemm is ~1.1-1.2x slower than the plain fp32 GEMV at 1-2 rows and
# 1.6-2x faster from 4 rows; oneDNN's packed bf16 product is 1.4-1.9x faster from 1 row up.
PREPACK_MIN_ROWS: dict[torch.dtype, int] = {torch.float32: 4, torch.bfloat16: 1}


def check_supported(spec: ModelSpec) -> None:
    """The engine runs dense Llama-like decoders: gated MLP, RMSNorm, RoPE, no output/MLP biases."""
    f = spec.family
    if spec.is_moe:
        raise TokenroofError(f"{spec.name}: mixture-of-experts models are not supported by the local decode engine")
    if not f.gated_mlp or f.layer_norm or f.learned_positions_offset is not None or f.out_bias or f.mlp_bias:
        raise TokenroofError(
            f"{spec.name}: model_type '{spec.model_type}' is not Llama-like (SwiGLU MLP, RMSNorm, RoPE); "
            "the local decode engine runs llama, mistral, qwen2 and qwen3 configs"
        )


def rope_inv_freq(spec: ModelSpec) -> Tensor:
    """RoPE inverse frequencies, with Llama-3 or linear scaling when the config asks for it."""
    dim = spec.head_dim
    inv_freq = 1.0 / (spec.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling: Mapping[str, Any] = spec.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return (inv_freq / float(scaling["factor"])).float()
    if kind == "llama3":
        factor, low, high = (float(scaling[k]) for k in ("factor", "low_freq_factor", "high_freq_factor"))
        old_len = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        return torch.where(mid, (1 - smooth) * scaled / factor + smooth * scaled, scaled).float()
    if kind != "default":
        warnings.warn(f"rope_type '{kind}' is run as plain RoPE (timing is the same; logits differ)", stacklevel=2)
    return inv_freq.float()


class Linear(nn.Linear):
    """nn.Linear that can hold its weight prepacked for one row count (CPU: MKL for fp32, oneDNN for bf16).

    On CPU, sgemm and oneDNN reorder the weight matrix on every call; with few
    rows (a decode batch of 4–64) that costs more than the product. Packing once
    per batch size is what PyTorch's inductor and IPEX do for CPU inference.
    """

    packed: Tensor | None = None
    packed_rows = 0
    any_rows = False  # serving: the packed weight serves every row count from 2 (MKL's packed sgemm takes any)

    def pack(self, rows: int) -> None:
        """Prepack for products of `rows` rows (or drop the packing when `rows` is 0)."""
        weight = self.weight.detach()
        if rows == 0:
            self.packed = None
        elif weight.dtype == torch.float32:
            self.packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
        else:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
        self.packed_rows = rows

    def forward(self, x: Tensor) -> Tensor:
        rows = x.numel() // x.shape[-1]
        if self.any_rows and self.packed is not None and rows >= 2:
            return self.serving_forward(x, rows)
        if self.packed is None or rows != self.packed_rows:
            return nn.functional.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, -1)
        if self.weight.dtype == torch.float32:
            out = torch.ops.mkl._mkl_linear(flat, self.packed, self.weight, self.bias, rows)
        else:
            out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], -1)

    def serving_forward(self, x: Tensor, rows: int) -> Tensor:
        """fp32 rows through the packed weight; 4k-1 rows (below 64) padded by one: on a 2-core EPYC (torch 2.13,
        llama-123m's shapes) MKL's small-M kernel runs 4k-1 rows slower than 4k (a decode step of 3 sequences 53 ms,
        of 4 49 ms; of 2 42 ms, so nothing else is padded), as vLLM pads a decode batch to a CUDA-graph size."""
        flat = x.reshape(rows, -1)
        padded = rows + 1 if rows < SERVE_PAD_BELOW_ROWS and rows % 4 == 3 else rows
        if padded != rows:
            flat = torch.cat((flat, flat.new_zeros(1, flat.shape[1])))
        out = torch.ops.mkl._mkl_linear(flat, self.packed, self.weight, self.bias, padded)
        return out[:rows].view(*x.shape[:-1], -1)


SERVE_PAD_BELOW_ROWS = 64


def pack_for_serving(modules: Iterable[nn.Module], rows: int = 16) -> bool:
    """`serve`: pack every fp32 `Linear` once (for `rows` rows) and use it at every row count from 2 (a single row
    keeps the plain matrix-vector product, the fastest there); False where the device or dtype cannot pack."""
    linears = [m for m in modules if isinstance(m, Linear)]
    if (
        not linears
        or linears[0].weight.dtype != torch.float32
        or not can_prepack(linears[0].weight.device, torch.float32)
    ):
        return False
    for linear in linears:
        linear.pack(rows)
        linear.any_rows = True
    return True


def can_prepack(device: torch.device, dtype: torch.dtype) -> bool:
    """Weight packing exists on CPU for fp32 (MKL builds) and bf16 (oneDNN builds on CPUs with AVX-512 or
    AVX-NE-CONVERT: elsewhere oneDNN refuses the bf16 reorder, so it is tried once)."""
    if device.type != "cpu":
        return False
    if dtype == torch.float32:
        return torch.backends.mkl.is_available()
    return dtype == torch.bfloat16 and torch.backends.mkldnn.is_available() and _bf16_reorder_works()


@functools.cache
def _bf16_reorder_works() -> bool:
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=torch.bfloat16), 1)
    except RuntimeError:
        return False
    return True


def prepack_linears(modules: Iterable[nn.Module], rows: int) -> bool:
    """Pack every `Linear` among `modules` for `rows`-row products where the device and dtype can, from
    the dtype's PREPACK_MIN_ROWS rows up (below, the plain matrix-vector path is faster: packing is dropped)."""
    linears = [m for m in modules if isinstance(m, Linear)]
    if not linears:
        return False
    weight = linears[0].weight
    packing = can_prepack(weight.device, weight.dtype) and rows >= PREPACK_MIN_ROWS[weight.dtype]
    for linear in linears:
        linear.pack(rows if packing else 0)
    return packing


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RMSNorm(nn.Module):
    """x / rms(x) · weight, computed in fp32 (as Hugging Face's LlamaRMSNorm)."""

    def __init__(self, dim: int, eps: float, **factory: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, **factory))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, **factory: Any) -> None:
        super().__init__()
        h, bias = spec.hidden_size, spec.family.qkv_bias
        self.heads, self.kv_heads, self.head_dim = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
        self.q_proj = Linear(h, spec.q_dim, bias=bias, **factory)
        self.k_proj = Linear(h, spec.kv_dim, bias=bias, **factory)
        self.v_proj = Linear(h, spec.kv_dim, bias=bias, **factory)
        self.o_proj = Linear(spec.q_dim, h, bias=False, **factory)
        if spec.family.qk_norm:
            self.q_norm = RMSNorm(spec.head_dim, spec.norm_eps, **factory)
            self.k_norm = RMSNorm(spec.head_dim, spec.norm_eps, **factory)
        self.qk_norm = spec.family.qk_norm

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: tuple[Tensor, Tensor], start: int) -> Tensor:
        """x: [batch, T, hidden] at positions start..start+T-1; writes K/V into the cache, reads 0..start+T-1."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k_cache, v_cache = cache
        end = start + t
        k_cache[:b, :, start:end] = k.transpose(1, 2)
        v_cache[:b, :, start:end] = v.transpose(1, 2)
        return self.o_proj(cached_attention(q, k_cache, v_cache, start))


def cached_attention(q: Tensor, k_cache: Tensor, v_cache: Tensor, start: int) -> Tensor:
    """q [b, T, heads, d] at positions start.. against caches [≥b, kv_heads, ≥start+T, d] → [b, T, heads·d].

    PyTorch's fused attention (flash/efficient kernels on CUDA, the flash CPU
    kernel on CPU) with grouped-query heads read in place: query head j·group+g
    reads KV head j, Hugging Face's repeat_kv order, and the cache is never
    copied or repeated per query head. Causal within the new tokens.
    """
    b, t, heads, d = q.shape
    end = start + t
    keys, values = k_cache[:b, :, :end], v_cache[:b, :, :end]
    mask = None
    if t > 1 and start > 0:
        position = start + torch.arange(t, device=q.device)
        mask = torch.arange(end, device=q.device)[None, :] <= position[:, None]
    out = nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=mask, is_causal=t > 1 and start == 0, enable_gqa=True
    )
    return out.transpose(1, 2).reshape(b, t, heads * d)


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec, **factory: Any) -> None:
        super().__init__()
        h, i = spec.hidden_size, spec.intermediate_size
        self.gate_proj = Linear(h, i, bias=False, **factory)
        self.up_proj = Linear(h, i, bias=False, **factory)
        self.down_proj = Linear(i, h, bias=False, **factory)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, **factory: Any) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.norm_eps, **factory)
        self.self_attn = Attention(spec, **factory)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.norm_eps, **factory)
        self.mlp = MLP(spec, **factory)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache: tuple[Tensor, Tensor], start: int) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, start)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, spec: ModelSpec, **factory: Any) -> None:
        super().__init__()
        # given its (empty) weight, an Embedding skips its own init: normal_ on the meta device imports
        # torch._dynamo (1.5 s per process); the weights are set later (`init_random` or a checkpoint)
        empty = torch.empty(spec.vocab_size, spec.hidden_size, **factory)
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size, _weight=empty)
        self.layers = nn.ModuleList(DecoderLayer(spec, **factory) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.norm_eps, **factory)


class DecoderLM(nn.Module):
    """Llama-family causal LM with a preallocated KV cache; `forward` runs prefill chunks and decode steps alike."""

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        super().__init__()
        check_supported(spec)
        self.spec = spec
        with torch.device("meta"):  # allocate once, on the target device, below
            self.model = Backbone(spec, dtype=dtype)
            self.lm_head = Linear(spec.hidden_size, spec.vocab_size, bias=False, dtype=dtype)
        self.to_empty(device=device)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.inv_freq = rope_inv_freq(spec).to(device)
        self.cache: list[tuple[Tensor, Tensor]] = []
        self._compiled: Callable[[Tensor, int], Tensor] | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @torch.no_grad()
    def init_random(self, seed: int = 0) -> None:
        """Normal(0, 0.02) weights and unit norms; no denormals, so CPU timing is not distorted."""
        gen = torch.Generator(device=self.device).manual_seed(seed)
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, INIT_STD, generator=gen)

    def prepack(self, rows: int) -> bool:
        """Pack every projection's weight for a decode batch of `rows` (see `prepack_linears`); False if not packed."""
        return prepack_linears(self.modules(), rows)

    def allocate_cache(self, batch: int, max_len: int) -> None:
        """KV cache for `batch` sequences of up to `max_len` tokens (replaces any previous cache)."""
        self.cache = []
        spec = self.spec
        shape = (batch, spec.num_kv_heads, max_len, spec.head_dim)
        for _ in range(spec.num_layers):
            self.cache.append(
                (
                    torch.zeros(shape, dtype=self.dtype, device=self.device),
                    torch.zeros(shape, dtype=self.dtype, device=self.device),
                )
            )

    def copy_sequence(self, source: int, targets: slice) -> None:
        """Give sequences `targets` the cached context of sequence `source` (a cheap stand-in for prefilling each)."""
        for k, v in self.cache:
            k[targets] = k[source : source + 1]
            v[targets] = v[source : source + 1]

    @torch.inference_mode()
    def forward(self, tokens: Tensor, start: int, all_logits: bool = False) -> Tensor:
        """tokens [batch, T] at positions start.. → logits [batch, vocab] (last position) or [batch, T, vocab]."""
        return self.step(tokens, start, all_logits)

    def compiled(self) -> Callable[[Tensor, int], Tensor]:
        """`forward` through `torch.compile` (inductor fuses the elementwise chains: RMSNorm, RoPE, SiLU·mul, the
        residuals), with the batch and the position dynamic, so one compilation serves every step and every batch
        from 2 (batch 1 compiles once more: PyTorch specialises sizes 0 and 1). The first call of each compiles
        (seconds to minutes): warm-up steps absorb it. Under `no_grad`, not `inference_mode`: a compiled graph
        cannot write the KV cache (a tensor made outside inference mode) from inside it."""
        if self._compiled is None:
            step = self.step

            def no_grad_step(tokens: Tensor, start: int) -> Tensor:
                with torch.no_grad():
                    return step(tokens, start)

            self._compiled = torch.compile(no_grad_step, dynamic=True)
        return self._compiled

    def step(self, tokens: Tensor, start: int, all_logits: bool = False) -> Tensor:
        """`forward` without its `inference_mode` (the caller chooses: inference mode, `no_grad` for compile)."""
        if (
            not self.cache
            or tokens.shape[0] > self.cache[0][0].shape[0]
            or start + tokens.shape[1] > self.cache[0][0].shape[2]
        ):
            raise TokenroofError("KV cache too small for this step: call allocate_cache(batch, max_len) first")
        positions = torch.arange(start, start + tokens.shape[1], device=self.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (f(emb).to(self.dtype)[None, :, None, :] for f in (torch.cos, torch.sin))
        x = self.model.embed_tokens(tokens)
        for layer, cache in zip(self.model.layers, self.cache, strict=True):
            x = layer(x, cos, sin, cache, start)
        x = self.model.norm(x if all_logits else x[:, -1:])
        logits = self.lm_head(x)
        return logits if all_logits else logits[:, -1]

    def prefill(self, tokens: Tensor, chunk: int = 512) -> Tensor:
        """Prefill prompts [batch, P] in chunks of `chunk` tokens (bounds attention memory); last-token logits."""
        logits = torch.empty(0)
        for start in range(0, tokens.shape[1], chunk):
            logits = self.forward(tokens[:, start : start + chunk], start)
        return logits


class GraphCapture:
    """What `CapturedStep` asks of CUDA: warm a step up on a side stream, capture it into a graph, replay the graph.
    A test substitutes a recorder for it on a CPU; nothing else differs."""

    def __init__(self) -> None:
        self.graph: Any = None

    def capture(self, body: Callable[[], None], warmups: int = 3) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # cuBLAS workspaces and allocator pools made before capture, as PyTorch asks
            for _ in range(warmups):
                body()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            body()

    def replay(self) -> None:
        self.graph.replay()


class CapturedStep:
    """One decode step of `batch` sequences at position `start`, captured as a CUDA graph and replayed: the
    kernels launch from the graph, not one by one from Python (what vLLM and SGLang do for every decode batch
    size they serve). The step's input is a static buffer the graph itself refills with the step's argmax, so
    each replay decodes the token the last one chose; every replay writes the KV cache at `start` and reads
    positions 0..start, a step at that one context (bench-local times it; serving needs a position that moves,
    which the graph does not have)."""

    def __init__(self, engine: DecoderLM, tokens: Tensor, start: int, capture: GraphCapture | None = None) -> None:
        self.capture = GraphCapture() if capture is None else capture
        with torch.inference_mode():
            self.tokens = tokens.clone()  # the graph's input, read and refilled in place
            self.logits = torch.empty(0)

        def body() -> None:
            with torch.inference_mode():
                self.logits = engine.step(self.tokens, start)
                self.tokens.copy_(self.logits.argmax(-1, keepdim=True))

        self.capture.capture(body)

    def replay(self) -> None:
        self.capture.replay()


def checkpoint_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder (single file or shards), or the file itself."""
    if path.is_file():
        return [path]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise TokenroofError(f"{path}: no *.safetensors files (give a folder with model.safetensors or its shards)")
    return files


def load_checkpoint(engine: DecoderLM, path: Path) -> None:
    """Load weights from local safetensors (Hugging Face names); names the keys that are missing or unexpected."""
    from safetensors.torch import load_file

    state: dict[str, Tensor] = {}
    for file in checkpoint_files(path):
        try:
            state.update(load_file(str(file), device=str(engine.device)))
        except (OSError, RuntimeError) as exc:
            raise TokenroofError(f"{file}: cannot read safetensors ({exc})") from None
    if engine.spec.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    expected = dict(engine.named_parameters())
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(k for k in set(state) - set(expected) if not k.endswith("rotary_emb.inv_freq"))
    if missing or unexpected:
        raise TokenroofError(
            f"{path}: checkpoint does not match {engine.spec.name}'s config: "
            f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    with torch.no_grad():
        for name, param in expected.items():
            tensor = state[name]
            if tensor.shape != param.shape:
                raise TokenroofError(
                    f"{path}: {name} has shape {tuple(tensor.shape)}, config says {tuple(param.shape)}"
                )
            param.copy_(tensor.to(param.dtype))
