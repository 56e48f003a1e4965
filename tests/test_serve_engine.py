"""`serve`'s real engine: the scheduler's steps as flat forward passes over per-sequence KV slots, checked
token by token against one sequence decoded alone, and behind the OpenAI endpoint."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import NEEDS_TORCH
from tests.test_torch_engine import tiny
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.engine.core import BatchScheduler, Sequence
from tokenroof.specs.model import model_from_config

if TYPE_CHECKING:
    import torch

    from tokenroof.measure.local.serve_engine import SlotEngine, TorchRunner, step_forward, step_logits, warm_up
    from tokenroof.measure.local.torch_engine import DecoderLM, can_prepack, pack_for_serving

pytestmark = NEEDS_TORCH


@pytest.fixture(autouse=True, scope="module")
def _torch() -> None:
    """torch and the engine, imported when this file's first test runs (NEEDS_TORCH)."""
    global torch, SlotEngine, TorchRunner, step_forward, step_logits, warm_up, DecoderLM, can_prepack
    global pack_for_serving
    import torch

    from tokenroof.measure.local.serve_engine import SlotEngine, TorchRunner, step_forward, step_logits, warm_up
    from tokenroof.measure.local.torch_engine import DecoderLM, can_prepack, pack_for_serving


PLACEHOLDER = StepModel(1e-3, 0.0, 0.0, 0.0)  # the scheduler needs a model; serve's steps take their real time


def tiny_lm(seed: int = 0) -> DecoderLM:
    spec = model_from_config(tiny("llama"), "tiny", "tiny")
    lm = DecoderLM(spec, torch.float32)
    lm.init_random(seed)
    return lm


def reference_logits(lm: DecoderLM, prompt: list[int], generated: list[int]) -> list[torch.Tensor]:
    """The logits one sequence gets from `DecoderLM.forward` alone: after its prompt, then after each token."""
    ref = tiny_lm()
    ref.load_state_dict(lm.state_dict())
    ref.allocate_cache(1, len(prompt) + len(generated) + 1)
    out = [ref.forward(torch.tensor([prompt]), 0)[0]]
    for i, token in enumerate(generated[:-1]):
        out.append(ref.forward(torch.tensor([[token]]), len(prompt) + i)[0])
    return out


def run_scheduled(
    requests: list[tuple[int, int]], max_num_seqs: int, budget: int | None, arrive_every: int = 1, packed: bool = False
):
    """Run `requests` (prompt tokens, max tokens) through the scheduler and the slot engine, one arriving every
    `arrive_every` steps; each request's emitted tokens and the logits behind them."""
    lm = tiny_lm()
    if packed:
        assert pack_for_serving(lm.modules()) == can_prepack(lm.device, torch.float32)
    sched = BatchScheduler(PLACEHOLDER, max_num_seqs, max_num_batched_tokens=budget)
    engine = SlotEngine(lm, max_num_seqs, 64)
    seqs = [Sequence(f"r{i}", p, m, 0.0) for i, (p, m) in enumerate(requests)]
    tokens: dict[str, list[int]] = {s.request_id: [] for s in seqs}
    logits: dict[str, list[torch.Tensor]] = {s.request_id: [] for s in seqs}
    pending = list(seqs)
    step = 0
    while pending or not sched.idle:
        if pending and step % arrive_every == 0:
            sched.submit(pending.pop(0))
        plan = sched.plan_step(float(step))
        step += 1
        if plan is None:
            continue
        work, done = engine.plan(sched, plan)
        rows = step_logits(lm, work)
        chosen = [] if rows is None else rows.argmax(-1).tolist()
        owners = [engine.states[i].request_id for i in range(len(work.decode_tokens))] + done
        assert sorted(owners) == sorted(sched.running)  # every running sequence gets a token, no other
        for owner, token, row in zip(owners, chosen, rows if rows is not None else [], strict=True):
            tokens[owner].append(token)
            logits[owner].append(row)
        engine.finish(work, done, chosen)
        sched.complete_step(plan)
    return lm, engine, seqs, tokens, logits


@pytest.mark.parametrize(
    ("max_num_seqs", "budget", "arrive_every", "packed"),
    [(3, None, 1, False), (3, None, 3, False), (4, 8, 2, False), (8, None, 1, True)],
    # whole prompts; staggered arrivals; prompts chunked by an 8-token budget; weights packed for serving (3 and 7
    # decoding rows padded)
)
def test_every_token_is_what_the_sequence_decoded_alone_gets(
    max_num_seqs: int, budget: int | None, arrive_every: int, packed: bool
):
    requests = [(5, 7), (11, 3), (1, 9), (7, 5), (3, 2), (9, 6), (2, 8), (4, 4), (6, 3)]
    lm, engine, seqs, tokens, logits = run_scheduled(requests, max_num_seqs, budget, arrive_every, packed)
    for seq, (_, max_tokens) in zip(seqs, requests, strict=True):
        assert len(tokens[seq.request_id]) == max_tokens
        expected = reference_logits(lm, engine.prompt_ids(seq), tokens[seq.request_id])
        for got, want in zip(logits[seq.request_id], expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert engine.moves > 0  # sequences left from the middle of the decoders: slots were compacted
    engine.release_gone(BatchScheduler(PLACEHOLDER, 1))
    assert engine.slot_of == {} and engine.decoders == 0


def test_an_empty_prompt_runs_as_one_token_and_an_aborted_sequence_frees_its_slot():
    lm = tiny_lm()
    sched = BatchScheduler(PLACEHOLDER, 2)
    engine = SlotEngine(lm, 2, 16)
    sched.submit(Sequence("empty", 0, 3, 0.0))
    sched.submit(Sequence("gone", 4, 5, 0.0))
    plan = sched.plan_step(0.0)
    work, done = engine.plan(sched, plan)
    assert [len(c.ids) for c in work.chunks] == [1, 4] and done == ["empty", "gone"]
    engine.finish(work, done, step_forward(lm, work))
    sched.complete_step(plan)
    sched.abort("gone")
    plan = sched.plan_step(1.0)
    work, done = engine.plan(sched, plan)
    assert list(engine.slot_of) == ["empty"] and len(work.decode_tokens) == 1


def test_warm_up_leaves_no_cache_behind():
    lm = tiny_lm()
    warm_up(lm)
    assert lm.cache == []


def test_steps_compute_on_one_worker_thread_with_its_own_torch_threads():
    lm = tiny_lm()
    runner = TorchRunner(SlotEngine(lm, 2, 16), threads=1)
    assert runner.pool.submit(torch.get_num_threads).result() == 1
    runner.pool.shutdown()


async def post_stream(session: Any, url: str, prompt_words: int, max_tokens: int) -> tuple[int, dict]:
    body = {
        "prompt": " ".join(["word"] * prompt_words),
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks, usage = 0, {}
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        assert resp.status == 200
        async for line in resp.content:
            text = line.decode().strip()
            if not text.startswith("data: ") or text == "data: [DONE]":
                continue
            event = json.loads(text[6:])
            chunks += len(event["choices"])
            usage = event.get("usage") or usage
    return chunks, usage


def test_served_requests_stream_exactly_max_tokens_and_metrics_count_them():
    aiohttp = pytest.importorskip("aiohttp")
    from tokenroof.serving.emulate.server import Emulator, start

    log = io.StringIO()

    async def main() -> tuple[list[tuple[int, dict]], str]:
        lm = tiny_lm()
        warm_up(lm)
        runner = TorchRunner(SlotEngine(lm, 3, 64), step_log=log)
        emulator = Emulator(PLACEHOLDER, 3, "tiny", 64, runner=runner)
        site, url = await start(emulator)
        try:
            async with aiohttp.ClientSession() as session:
                results = await asyncio.gather(*(post_stream(session, url, 3 + i, 4 + i) for i in range(5)))
                async with session.get(f"{url}/metrics") as resp:
                    metrics = await resp.text()
        finally:
            await site.cleanup()
            runner.pool.shutdown()
        return results, metrics

    results, metrics = asyncio.run(main())
    assert [r[0] for r in results] == [4, 5, 6, 7, 8]
    assert [r[1]["prompt_tokens"] for r in results] == [3, 4, 5, 6, 7]
    assert 'vllm:generation_tokens_total{model_name="tiny"} 30' in metrics
    assert 'vllm:prompt_tokens_total{model_name="tiny"} 25' in metrics
    steps = [json.loads(line) for line in log.getvalue().splitlines()]  # serve --step-log: one line per step
    assert sum(s["prefill_tokens"] for s in steps) == 25
    assert sum(s["batch"] for s in steps) == 30  # every running sequence emits one token per step
    assert all(0 < s["compute_s"] <= s["wall_s"] for s in steps)


def test_serve_refuses_what_it_cannot_run_in_one_line(tiny_config: Path, tmp_path: Path) -> None:
    from tests.conftest import run_cli

    cases = [
        (["--model", "no-such-model"], "unknown model"),
        (["--model", str(tiny_config), "--max-model-len", "100000"], "exceeds"),
        (["--model", str(tiny_config), "--max-num-seqs", "0"], "--max-num-seqs must be at least 1"),
        (["--model", str(tiny_config), "--dtype", "int4"], "int4"),  # the default length fits the model's 256
        (["--model", str(tiny_config), "--port", "70000"], "--port must be between"),
        (["--model", "mixtral-8x7b"], "mixture-of-experts"),
        (["--model", "llama-3.1-8b", "--max-num-seqs", "512", "--max-model-len", "8192", "--device", "cpu"], "GiB"),
    ]
    for args, words in cases:
        result = run_cli(["serve", *args])
        assert result.exit_code != 0, args
        assert words in result.output and "Traceback" not in result.output, (args, result.output)


SMALL = tiny(
    "llama", hidden_size=512, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=8, head_dim=64,
    vocab_size=8000, max_position_embeddings=512,
)  # fmt: skip  # steps of a few ms: slow enough that bench's client is not the bottleneck


@pytest.mark.slow  # timed by bench on the wall clock: alone on the machine, not beside the parallel suite
def test_the_served_engine_answers_bench_as_a_server_does(tmp_path: Path) -> None:
    """`tokenroof serve` in its own process, measured by `tokenroof bench`: every request completes with its
    tokens, and the running batch is read from the vLLM gauge."""
    from tests.conftest import run_cli
    from tests.emulator_process import server_process

    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL))
    args = ["serve", "--model", str(config), "--max-num-seqs", "4", "--max-model-len", "256", "--threads", "1"]
    with server_process(args) as url:
        out = tmp_path / "bench"
        result = run_cli(
            [
                "bench", url, "--concurrency", "1,4", "--input-len", "32", "--output-len", "8",
                "--requests-per-point", "8", "--warmup", "2", "--out", str(out), "--json",
            ]
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    points = json.loads(result.stdout)["points"]
    assert [p["requests_completed"] for p in points] == [8, 8]
    assert points[1]["batch"] > 2 and not any(p["invalid"] for p in points)
