"""How far the scheduler's model fitted to measured files can be trusted: servers it never saw, measured as the
tools measure them, scored in range, past the data and on its intervals.

Each case is a server (a step model, a prompt budget, a KV pool) and a client: `vllm bench serve
--max-concurrency` (burst, whole-run means), `tokenroof bench --concurrency` (staggered, a steady window) or a
GuideLLM Poisson sweep. Its files are written as scripts/make_measured_examples.py writes the examples (2% noise on
every metric), at concurrencies 1 to 128 (or rates up to about half of saturation) to fit, and 256 and 384 (or the
higher rates) held out. The truths differ from every fit's structure: other engines' efficiencies, other GPUs and
models, per-sequence costs the prior does not centre on.

For each, data only and with the physics prior (model and hardware named, no engine):
- the prompt budget the replay chose against the server's;
- in range: the replay's rms error on the fitted points (TPOT, TTFT);
- past the data: `predict`'s answer at the held-out points (TPOT, TTFT error), and whether the 90% band holds TPOT.

    python benchmarks/replay.py [--verbose]
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenroof.fit.predict import MeasuredWorkload, predict_table, prior_for
from tokenroof.io.measurements import read_table
from tokenroof.model.stepmodel import StepModel
from tokenroof.serving.deployment import Physics
from tokenroof.serving.replay import with_scheduler

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = 40


def generator():  # the examples' writer: files as each tool writes them
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "scripts" / "make_measured_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Case:
    name: str
    physics: Physics  # the deployment named to the prior (no engine: the prior does not know the truth's)
    truth: StepModel
    budget: int | None
    client: str  # burst (vLLM files), staggered (bench-like CSV), poisson (GuideLLM)
    input_len: int
    output_len: int
    fit_at: tuple[float, ...]  # concurrencies, or request rates for poisson
    held_at: tuple[float, ...]
    separate: bool = False  # prompts prefilled in steps of their own (vLLM V0's scheduling), at most `budget` a step


def cases() -> list[Case]:
    def truth(model: str, hardware: str, engine: str, scale: float = 1.0) -> tuple[Physics, StepModel]:
        physics = Physics(model, hardware)
        sm = Physics(model, hardware, engine=engine).step_model()
        return physics, StepModel(**{**sm.to_dict(), "t_seq_s": sm.t_seq_s * scale})

    v1 = truth("llama-3.1-8b", "h100-sxm", "vllm-v1")
    v0 = truth("llama-2-7b", "a100-sxm-80gb", "vllm-v0", 3.0)
    sg = truth("qwen2.5-7b", "h200", "sglang")
    tr = truth("mistral-7b", "l40s", "tensorrt-llm")
    closed = (1.0, 4.0, 16.0, 32.0, 64.0, 128.0)
    return [
        Case("vLLM files, llama-3.1-8b H100, chunks of 8192", *v1, 8192, "burst", 1024, 256, closed, (256.0, 384.0)),
        Case("vLLM files, llama-2-7b A100, whole prompts", *v0, None, "burst", 512, 256, closed, (256.0, 384.0)),
        Case(
            "vLLM V0 files, llama-2-7b A100, prefill steps of their own up to 4096",
            *v0,
            4096,
            "burst",
            512,
            256,
            closed,
            (256.0, 384.0),
            separate=True,
        ),
        Case("bench CSV, qwen2.5-7b H200, chunks of 2048", *sg, 2048, "staggered", 1024, 128, closed, (256.0, 384.0)),
        Case("GuideLLM rates, mistral-7b L40S, whole", *tr, None, "poisson", 256, 128, (1, 2, 4, 8), (12.0, 16.0)),
    ]


def write_files(case: Case, at: tuple[float, ...], folder: Path, seed: int) -> list[Path]:
    gen = generator()
    rng = np.random.default_rng(seed)
    kv = case.physics.kv_pool_tokens()
    if case.client == "poisson":
        path = folder / f"guidellm-{seed}.json"
        report = gen.guidellm_report(list(at), case.input_len, case.output_len, rng, case.truth, case.budget, kv)
        path.write_text(json.dumps(report))
        return [path]
    files = []
    for c in at:
        data = gen.vllm_result(int(c), case.input_len, case.output_len, rng, case.truth, case.budget, kv, case.separate)
        if case.client == "staggered":  # a bench-like CSV: the same means, a steady window, the client stated
            data.pop("num_prompts")
        path = folder / f"{case.client}-c{int(c)}.json"
        path.write_text(json.dumps(data))
        files.append(path)
    if case.client == "staggered":
        return [bench_csv(case, at, folder, rng, kv)]
    return files


def bench_csv(case: Case, at: tuple[float, ...], folder: Path, rng: np.random.Generator, kv: int | None) -> Path:
    """A bench-like summary.csv of a staggered closed loop (its steady window), 2% noise per metric."""
    from tokenroof.serving.saturation import closed_loop
    from tokenroof.serving.simulate import Lengths, simulate

    rows = []
    for c in at:
        loop = closed_loop(int(c), Lengths(case.input_len), Lengths(case.output_len), "staggered")
        summary = simulate(case.truth, loop, int(c), 0, kv, max_num_batched_tokens=case.budget).summary()
        noise = np.exp(rng.normal(0, 0.02, 3))
        tpot, ttft = summary["tpot_ms"]["mean"] * noise[0], summary["ttft_ms"]["mean"] * noise[1]
        rows.append(
            f"{summary['running_batch']:.4g},{summary['throughput_tok_s'] * noise[2]:.6g},{tpot:.6g},"
            f"{case.input_len + case.output_len / 2:g},{ttft:.6g},{int(c)}"
        )
    path = folder / f"bench-{len(at)}.csv"
    header = (
        f"# batch_kind=running tpot_kind=tpot client=staggered input_len={case.input_len} output_len={case.output_len}"
    )
    path.write_text(
        header + "\nbatch,throughput_tok_s,tpot_ms,context_tokens,ttft_ms,concurrency\n" + "\n".join(rows) + "\n"
    )
    return path


def measured(case: Case, files: list[Path]) -> list[tuple[float, float, float]]:
    """(batch, TPOT ms, TTFT ms) as the held-out files measured them."""
    table = read_table(files)
    assert table.ttft_ms is not None
    batch = table.batch if table.concurrency is None else table.concurrency
    return list(zip(batch.tolist(), table.tpot_ms.tolist(), table.ttft_ms.tolist(), strict=True))


def score(case: Case, prior: bool, verbose: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        train = write_files(case, case.fit_at, folder, 1)
        held = measured(case, write_files(case, case.held_at, folder, 2))
        table = read_table(train)
        physics = case.physics if prior else Physics()
        fitted_prior = prior_for(table, physics, MeasuredWorkload()) if prior else None
        batches = [b for b, _, _ in held]
        result = with_scheduler(predict_table(table, batches, fitted_prior, n_samples=SAMPLES), physics)
        serving = result.serving
        rows = result.predictions()
    errors_tpot, errors_ttft, inside = [], [], []
    for (_, tpot, ttft), row in zip(held, rows, strict=True):
        errors_tpot.append(abs(row["tpot_ms"] / tpot - 1))
        if "ttft_ms" in row:
            errors_ttft.append(abs(row["ttft_ms"] / ttft - 1))
        inside.append(row["tpot_ms_low"] <= tpot <= row["tpot_ms_high"])
        if verbose:
            print(
                f"    batch {row['batch']:g}: TPOT {row['tpot_ms']:.3g} "
                f"({row['tpot_ms_low']:.3g}–{row['tpot_ms_high']:.3g}) vs {tpot:.3g}, "
                f"TTFT {row.get('ttft_ms', math.nan):.3g} vs {ttft:.3g}"
            )
    return {
        "budget": None if serving is None else serving.max_num_batched_tokens,
        "separate": serving is not None and serving.separate_prefill,
        "tpot_rms": None if serving is None else serving.tpot_rms,
        "ttft_rms": None if serving is None else serving.ttft_rms,
        "tpot_err": errors_tpot,
        "ttft_err": errors_ttft,
        "inside": inside,
    }


def main(argv: list[str]) -> None:
    verbose = "--verbose" in argv
    totals: dict[bool, dict[str, list]] = {
        p: {"tpot": [], "ttft": [], "inside": [], "budget": []} for p in (False, True)
    }
    for case in cases():
        print(case.name)
        for prior in (False, True):
            s = score(case, prior, verbose)
            right = s["budget"] == case.budget and s["separate"] == case.separate
            totals[prior]["tpot"] += s["tpot_err"]
            totals[prior]["ttft"] += s["ttft_err"]
            totals[prior]["inside"] += s["inside"]
            if case.client != "poisson":  # open loops below saturation rarely fill a budget: nothing to choose
                totals[prior]["budget"].append(right)
            mode = "with prior" if prior else "data only "
            print(
                f"  {mode}: budget {s['budget']}{' in steps of their own' if s['separate'] else ''} "
                f"({'right' if right else 'wrong'}), replay rms TPOT "
                f"{s['tpot_rms']:.1%} TTFT {s['ttft_rms']:.1%}; held out TPOT {np.mean(s['tpot_err']):.1%} "
                f"TTFT {np.mean(s['ttft_err']):.1%} mean error, {sum(s['inside'])}/{len(s['inside'])} in the band"
            )
    for prior, t in totals.items():
        mode = "with prior" if prior else "data only"
        print(
            f"{mode}: held-out TPOT median {np.median(t['tpot']):.1%} max {max(t['tpot']):.1%}, TTFT median "
            f"{np.median(t['ttft']):.1%} max {max(t['ttft']):.1%}; 90% bands hold {np.mean(t['inside']):.0%} of "
            f"{len(t['inside'])}; budget right in {sum(t['budget'])}/{len(t['budget'])} closed-loop cases"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
