"""The emulator's scheduler driving real forward passes: a PyTorch decoder behind the OpenAI endpoint (`serve`).

`emulate` sleeps each step's modelled time; `serve` runs the same `BatchScheduler`'s steps on a `DecoderLM`, so
what a load client measures is a real engine's, scheduled exactly as `simulate` schedules it. One step is one
forward pass over a flat batch of tokens, as vLLM V1 and llama.cpp run it: every decoding sequence's next token
and every prompt chunk scheduled this step go through the projections and the MLP together (the weights are read
once per step); attention reads each sequence's own KV slot: the decoders in one masked batched call, each
prompt chunk causally against its own slot.

KV cache: one preallocated slot of `max_len` tokens per sequence up to `slots` (llama.cpp's `-np` slots; no
paging, so no preemption: the scheduler runs without a KV capacity). The decoders are kept in slots 0..d-1 so
their attention reads a view of the cache, never a copy; when a sequence leaves, the highest decoder moves into
its slot (one sequence's KV copied, not the batch's).

Tokens: there is no tokenizer. A prompt of N words is N token ids (drawn from the request id, so a repeated
request is the same input), and each next token is the argmax of the real logits. Weights are random unless a
checkpoint is given: the time of a step does not depend on their values.

This module imports torch: import it only after `require_torch()`.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

import torch
from torch import Tensor, nn

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.measure.local.torch_engine import (
    DecoderLayer,
    DecoderLM,
    cached_attention,
    pack_for_serving,
    rotate_half,
)
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.engine.core import BatchScheduler, Sequence, StepPlan
from tokenroof.specs import ModelSpec


@dataclass(frozen=True)
class Chunk:
    """Prompt tokens of one sequence prefilled in a step: positions start..start+len(ids)-1 of its slot."""

    slot: int
    start: int
    ids: list[int]
    last: bool  # the prompt completes in this step: its last position's logits give the first token


@dataclass(frozen=True)
class StepWork:
    """What one forward pass computes (plain data, handed to the worker thread)."""

    decode_tokens: list[int]  # slot i's input token, for the decoders in slots 0..d-1
    decode_positions: list[int]  # slot i's position (its tokens in cache)
    chunks: list[Chunk]


def step_forward(lm: DecoderLM, work: StepWork) -> list[int]:
    """One forward pass over the decoders and the prompt chunks; the next token (greedy) of each decoder (slot
    order) and of each chunk that completes its prompt (chunk order)."""
    logits = step_logits(lm, work)
    return [int(t) for t in logits.argmax(-1).tolist()] if logits is not None else []


@torch.inference_mode()
def step_logits(lm: DecoderLM, work: StepWork) -> Tensor | None:
    """The logits behind `step_forward`'s tokens, [rows, vocab] (None when no row completes)."""
    device = lm.device
    decoders = len(work.decode_tokens)
    ids = list(work.decode_tokens)
    positions = list(work.decode_positions)
    slots = list(range(decoders))
    for chunk in work.chunks:
        ids += chunk.ids
        positions += range(chunk.start, chunk.start + len(chunk.ids))
        slots += [chunk.slot] * len(chunk.ids)
    if not ids:
        return None
    tokens = torch.tensor(ids, dtype=torch.long, device=device)
    pos = torch.tensor(positions, dtype=torch.long, device=device)
    slot_index = torch.tensor(slots, dtype=torch.long, device=device)
    freqs = torch.outer(pos.float(), lm.inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = (f(emb).to(lm.dtype)[:, None, :] for f in (torch.cos, torch.sin))  # [N, 1, head_dim]
    decode_mask = None
    span = 0
    if decoders:
        lengths = pos[:decoders]
        span = int(max(work.decode_positions)) + 1
        decode_mask = (torch.arange(span, device=device)[None, :] <= lengths[:, None])[:, None, None, :]
    x = lm.model.embed_tokens(tokens)  # [N, hidden]
    layers = cast(list[DecoderLayer], list(lm.model.layers))
    for layer, (k_cache, v_cache) in zip(layers, lm.cache, strict=True):
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        n = h.shape[0]
        q = attn.q_proj(h).view(n, attn.heads, attn.head_dim)
        k = attn.k_proj(h).view(n, attn.kv_heads, attn.head_dim)
        v = attn.v_proj(h).view(n, attn.kv_heads, attn.head_dim)
        if attn.qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k_cache[slot_index, :, pos] = k
        v_cache[slot_index, :, pos] = v
        parts = []
        if decoders:
            out = nn.functional.scaled_dot_product_attention(
                q[:decoders, :, None, :],  # [d, heads, 1, head_dim]
                k_cache[:decoders, :, :span],
                v_cache[:decoders, :, :span],
                attn_mask=decode_mask,
                enable_gqa=True,
            )
            parts.append(out.reshape(decoders, -1))
        offset = decoders
        for chunk in work.chunks:
            t = len(chunk.ids)
            rows = q[offset : offset + t][None]  # [1, t, heads, head_dim]
            end = chunk.slot + 1
            parts.append(cached_attention(rows, k_cache[chunk.slot : end], v_cache[chunk.slot : end], chunk.start)[0])
            offset += t
        x = x + attn.o_proj(torch.cat(parts) if len(parts) > 1 else parts[0])
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    last_rows = list(range(decoders))
    offset = decoders
    for chunk in work.chunks:
        offset += len(chunk.ids)
        if chunk.last:
            last_rows.append(offset - 1)
    if not last_rows:
        return None
    return lm.lm_head(lm.model.norm(x[torch.tensor(last_rows, device=device)]))


@dataclass
class SlotState:
    request_id: str
    prompt_ids: list[int]
    length: int = 0  # tokens in the slot's cache
    last_token: int = 0  # the latest token emitted (a decoder's next input)


@dataclass
class SlotEngine:
    """Turns each planned step of a `BatchScheduler` into a `StepWork` for `lm`, and keeps the slots."""

    lm: DecoderLM
    slots: int
    max_len: int
    slot_of: dict[str, int] = field(default_factory=dict)
    states: list[SlotState | None] = field(default_factory=list)
    decoders: int = 0  # slots 0..decoders-1 hold decoding sequences
    moves: int = 0  # sequences whose KV moved to another slot

    def __post_init__(self) -> None:
        if self.slots < 1 or self.max_len < 2:
            raise TokenroofError(f"serve needs at least one slot of two tokens, got {self.slots} × {self.max_len}")
        self.lm.allocate_cache(self.slots, self.max_len)
        self.states = [None] * self.slots

    def prompt_ids(self, seq: Sequence) -> list[int]:
        """N token ids for an N-token prompt (at least one), fixed by the request id (no tokenizer: see the
        module doc)."""
        gen = torch.Generator().manual_seed(zlib.crc32(seq.request_id.encode()))
        vocab = self.lm.spec.vocab_size
        return torch.randint(0, vocab, (max(seq.prompt_tokens, 1),), generator=gen).tolist()

    def _swap(self, a: int, b: int) -> None:
        """Exchange two slots' KV (either may be empty) and their bookkeeping."""
        sa, sb = self.states[a], self.states[b]
        n = max(s.length if s is not None else 0 for s in (sa, sb))
        if n:
            for k, v in self.lm.cache:
                k[[a, b], :, :n] = k[[b, a], :, :n]  # the right side is gathered first: a safe exchange
                v[[a, b], :, :n] = v[[b, a], :, :n]
        self.states[a], self.states[b] = sb, sa
        for slot, state in ((a, sb), (b, sa)):
            if state is not None:
                self.slot_of[state.request_id] = slot
                self.moves += 1

    def _release(self, request_id: str) -> None:
        slot = self.slot_of.pop(request_id)
        self.states[slot] = None
        if slot < self.decoders:  # keep the decoders contiguous: the highest one fills the hole
            self.decoders -= 1
            if slot != self.decoders:
                self._swap(self.decoders, slot)

    def _free_slot(self) -> int:
        for i in range(self.decoders, self.slots):
            if self.states[i] is None:
                return i
        raise TokenroofError(f"all {self.slots} KV slots are in use")  # the scheduler's cap prevents this

    def _promote(self, request_id: str) -> None:
        """A sequence whose prompt completed joins the decoders, in slot `decoders` (swapped there if needed)."""
        slot = self.slot_of[request_id]
        if slot != self.decoders:
            self._swap(slot, self.decoders)
        self.decoders += 1

    def release_gone(self, scheduler: BatchScheduler) -> None:
        """Free the slots of sequences the scheduler no longer holds (finished or aborted)."""
        live = set(scheduler.running) | {s.request_id for s in scheduler.prefilling}
        for request_id in [r for r in self.slot_of if r not in live]:
            self._release(request_id)

    def plan(self, scheduler: BatchScheduler, plan: StepPlan) -> tuple[StepWork, list[str]]:
        """The work of `plan` (made by `scheduler.plan_step`), and the request ids of the chunks that complete."""
        self.release_gone(scheduler)
        completing = {s.request_id for s in plan.admitted}
        partial = [s for s in scheduler.prefilling if s.prefill_left < s.context_at_admission]
        chunks, done = [], []
        for seq in [*plan.admitted, *partial]:
            if seq.request_id not in self.slot_of:
                slot = self._free_slot()
                self.slot_of[seq.request_id] = slot
                self.states[slot] = SlotState(seq.request_id, self.prompt_ids(seq))
            state = self.states[self.slot_of[seq.request_id]]
            assert state is not None
            upto = seq.context_at_admission - seq.prefill_left
            if seq.request_id in completing:
                upto = max(upto, 1)  # an empty prompt is run as one token: a first token needs logits
            if seq.context_at_admission + seq.max_tokens > self.max_len:
                raise TokenroofError(f"{seq.request_id}: needs {seq.context_at_admission + seq.max_tokens} tokens")
            if upto > state.length:
                chunks.append(
                    Chunk(self.slot_of[seq.request_id], state.length, state.prompt_ids[state.length : upto], False)
                )
                state.length = upto
            if seq.request_id in completing:
                chunks[-1] = Chunk(chunks[-1].slot, chunks[-1].start, chunks[-1].ids, True)
                done.append(seq.request_id)
        decoding = [self.states[i] for i in range(self.decoders)]
        work = StepWork(
            [s.last_token for s in decoding if s is not None], [s.length for s in decoding if s is not None], chunks
        )
        return work, done

    def finish(self, work: StepWork, done: list[str], next_tokens: list[int]) -> None:
        """Record the step's outputs: each decoder's new token and position; completed prompts join the decoders."""
        for i in range(len(work.decode_tokens)):
            state = self.states[i]
            assert state is not None
            state.last_token = next_tokens[i]
            state.length += 1
        for request_id, token in zip(done, next_tokens[len(work.decode_tokens) :], strict=True):
            state = self.states[self.slot_of[request_id]]
            assert state is not None
            state.last_token = token
            self._promote(request_id)


@dataclass
class TorchRunner:
    """The `StepRunner` of `serve`: plans on the event loop, computes on one worker thread (torch releases the GIL,
    so requests keep arriving and tokens keep streaming while a step runs)."""

    engine: SlotEngine
    threads: int | None = None  # torch's intra-op threads, set in the worker itself (they are per thread)
    step_log: TextIO | None = None  # one JSON line per step: what it ran, its compute and wall time
    pool: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="tokenroof-step", initializer=self._init_thread)

    def _init_thread(self) -> None:
        if self.threads is not None:
            torch.set_num_threads(self.threads)

    def compute(self, work: StepWork) -> tuple[list[int], float]:
        start = time.perf_counter()
        tokens = step_forward(self.engine.lm, work)
        return tokens, time.perf_counter() - start

    async def run(self, scheduler: BatchScheduler, plan: StepPlan) -> None:
        work, done = self.engine.plan(scheduler, plan)
        loop = asyncio.get_running_loop()
        start = loop.time()
        tokens, compute_s = await loop.run_in_executor(self.pool, self.compute, work)
        wall_s = loop.time() - start
        self.engine.finish(work, done, tokens)
        if self.step_log is not None:
            record = {
                "start_s": round(start, 6),
                "batch": plan.batch,
                "prefill_tokens": plan.prefill_tokens,
                "context_tokens": plan.context_tokens,
                "prefill_sq": plan.prefill_sq,
                "compute_s": round(compute_s, 6),
                "wall_s": round(wall_s, 6),
            }
            self.step_log.write(json.dumps(record) + "\n")


def warm_up(lm: DecoderLM) -> None:
    """A prompt chunk, then a decode step beside another chunk, so that first-call allocations are no request's
    (the caller allocates the real cache afterwards)."""
    lm.allocate_cache(2, 16)
    step_forward(lm, StepWork([], [], [Chunk(0, 0, [1, 2, 3], True)]))
    step_forward(lm, StepWork([4], [3], [Chunk(1, 0, [1, 2], True)]))
    lm.cache = []


@dataclass(frozen=True)
class ServeConfig:
    """`tokenroof serve`'s settings."""

    dtype: str = "fp32"
    device: str = "auto"
    max_num_seqs: int = 16
    max_model_len: int = 2048
    max_num_batched_tokens: int | None = None  # None: whole prompts in one step (llama.cpp's default n_batch)
    threads: int | None = None
    weights: Path | None = None
    seed: int = 0
    served_model_name: str | None = None
    read_timeout_s: float = 30.0
    memory_fraction: float = 0.9
    step_log: Path | None = None  # JSONL, one line per step (see TorchRunner)


def build_server(spec: ModelSpec, config: ServeConfig) -> tuple[Any, str]:
    """The OpenAI-compatible server running `spec` for real, and one line describing it (after checking that the
    weights and every slot's KV cache fit in `memory_fraction` of the free memory, before allocating them)."""
    from tokenroof.measure.local.device import (
        GIB,
        available_memory_bytes,
        machine_name,
        memory_needed_bytes,
        resolve_device,
        torch_dtype,
    )
    from tokenroof.measure.local.torch_engine import check_supported, load_checkpoint
    from tokenroof.serving.emulate.server import Emulator
    from tokenroof.specs import Precision

    check_supported(spec)
    if config.max_num_seqs < 1:
        raise ParameterError(f"{{}} must be at least 1, got {config.max_num_seqs}", "max_num_seqs")
    if config.max_model_len < 2:
        raise ParameterError(f"{{}} must be at least 2, got {config.max_model_len}", "max_model_len")
    limit = spec.max_position_embeddings
    if limit and config.max_model_len > limit:
        raise ParameterError(f"{{}} {config.max_model_len} exceeds {spec.name}'s {limit} positions", "max_model_len")
    device = resolve_device(config.device)
    dtype = torch_dtype(config.dtype, device)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    chunk = config.max_num_batched_tokens or config.max_model_len
    need = memory_needed_bytes(spec, Precision.create(config.dtype), config.max_num_seqs, config.max_model_len, chunk)
    budget = available_memory_bytes(device) * config.memory_fraction
    if sum(need.values()) > budget:
        raise ParameterError(
            f"{config.max_num_seqs} slots × {config.max_model_len} tokens need ~{sum(need.values()) / GIB:.1f} GiB "
            f"(weights {need['weights'] / GIB:.1f}, KV cache {need['kv_cache'] / GIB:.1f}) of the "
            f"{budget / GIB:.1f} GiB free: lower {{}} or {{}}",
            "max_num_seqs",
            "max_model_len",
        )
    lm = DecoderLM(spec, dtype, device)
    if config.weights is not None:
        load_checkpoint(lm, config.weights)
    else:
        lm.init_random(config.seed)
    packed = pack_for_serving(lm.modules())
    warm_up(lm)
    log = None
    if config.step_log is not None:
        try:
            log = config.step_log.open("w", buffering=1, encoding="utf-8")  # a line at a time: kept if killed
        except OSError as exc:
            raise ParameterError(f"{{}} {config.step_log}: cannot write ({exc.strerror})", "step_log") from None
    runner = TorchRunner(SlotEngine(lm, config.max_num_seqs, config.max_model_len), config.threads, log)
    placeholder = StepModel(1e-3, 0.0, 0.0, 0.0)  # the scheduler's plans need a duration; serve measures it
    name = config.served_model_name or spec.name
    server = Emulator(
        placeholder,
        config.max_num_seqs,
        name,
        config.max_model_len,
        None,
        config.max_num_batched_tokens,
        config.read_timeout_s,
        runner=runner,
    )
    where = machine_name(device).replace("(1 threads)", "(1 thread)")
    prefill = (
        f"prompts chunked to {config.max_num_batched_tokens} tokens per step"
        if config.max_num_batched_tokens
        else "whole prompts in one step"
    )
    line = (
        f"serving {spec.name} ({config.dtype}, {'random weights' if config.weights is None else config.weights}) "
        f"on {where}: {config.max_num_seqs} slots of {config.max_model_len} tokens "
        f"(KV {need['kv_cache'] / GIB:.2f} GiB), {prefill}{', weights prepacked' if packed else ''}"
    )
    return server, line
