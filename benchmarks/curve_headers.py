"""Read a published curve's `#` header into the setup `predict` takes: model, hardware, TP, workload.

Used by benchmarks/accuracy.py to run "with priors where the curve's header names
them". Headers are free text; this recognises the forms in ../shared/data/curves
(model repo ids or preset names, `Nx GPU (TP=N)`, input/output lengths) and
returns None for what it cannot place, so such curves run data-only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from tokenroof.fit.predict import MeasuredWorkload
from tokenroof.io.measurements import Semantics
from tokenroof.specs import DATA, list_models

# GPU names in headers → presets. Plain "A100" is taken as the 40 GB SXM4 part (Argonne's Polaris nodes);
# "H100 64GB" (MareNostrum 5) has no preset: h100-sxm's compute is the same GH100, and its lower HBM
# bandwidth is absorbed by the fitted bandwidth efficiency (the prior only sets floors and centres).
GPUS = [
    (r"A100-80GB|A100 80GB", "a100-sxm-80gb"),
    (r"GH200", "gh200"),
    (r"H200", "h200"),
    (r"H100 PCIe", "h100-pcie"),
    (r"H100", "h100-sxm"),
    (r"A100", "a100-40gb"),
    (r"L40S", "l40s"),
    (r"A10G", "a10g"),
    (r"MI300X", "mi300x"),
]


# The header's "engine:" field → profile. Order matters: the first match wins.
ENGINES = [
    (r"TensorRT-LLM|NIM", "tensorrt-llm"),
    (r"FasterTransformer", "fastertransformer"),
    (r"llama\.cpp", "llama-cpp"),
    (r"SGLang", "sglang"),
    (r"lmdeploy|TurboMind", "lmdeploy"),
    (r"text-generation-inference|\bTGI\b", "tgi"),
    (r"vLLM.*(?<!not the )\bV1 engine|vLLM V1", "vllm-v1"),
    (r"vLLM", "vllm-v0"),
]


def engine_of(text: str) -> str | None:
    """The engine profile the header's "engine:" field names (None: none recognised)."""
    match = re.search(r"engine:\s*([^\n]*)", text)
    field = match.group(1) if match else ""
    return next((key for pattern, key in ENGINES if re.search(pattern, field)), None)


@dataclass(frozen=True)
class CurveSetup:
    model: str | None
    hardware: str | None
    tp: int
    workload: MeasuredWorkload
    dtype: str = "fp16"
    semantics: Semantics = field(default_factory=Semantics)


def find_semantics(text: str, workload: MeasuredWorkload) -> Semantics:
    """What the batch and TPOT columns count, from the header's description of how they were obtained."""
    if re.search(r"static batch|batch = B \(exact", text):
        batch_kind = "static"
    elif re.search(r"max_concurrency|concurrency", text) and "num_requests_running" not in text:
        batch_kind = "concurrency"
    else:
        batch_kind = "running"
    if re.search(r"decode_elapsed|T_TG", text):
        tpot_kind = "step"
    elif re.search(r"[Ll]atency/|end-to-end|e2e", text) and "mean_tpot_ms" not in text:
        tpot_kind = "e2e"
    else:
        tpot_kind = "tpot"
    return Semantics(batch_kind, tpot_kind, input_len=workload.input_len, output_len=workload.output_len)


def _model_by_source() -> dict[str, str]:
    table = {}
    for name in list_models():
        config = json.loads(Path(str(DATA / "models" / f"{name}.json")).read_text())
        match = re.search(r"huggingface\.co/([^/]+/[^/]+)/", config.get("_source", ""))
        if match:
            table[match.group(1).lower()] = name
    return table


def find_model(text: str) -> str | None:
    by_source = _model_by_source()
    for repo, name in by_source.items():
        if repo in text.lower():
            return name
    match = re.search(r"model:\s*([A-Za-z0-9.\-]+)", text)
    if match and match.group(1).lower() in list_models():
        return match.group(1).lower()
    if re.search(r"GPT-20B", text):
        return "gpt-20b"
    return None


def find_hardware(text: str) -> tuple[str | None, int]:
    if re.search(r"hardware NOT stated", text, re.IGNORECASE):
        return None, 1
    gpu_line = next((line for line in text.splitlines() if "GPU:" in line), "")
    tp_match = re.search(r"TP\s*=\s*(\d+)", gpu_line)
    tp = int(tp_match.group(1)) if tp_match else 1
    for pattern, preset in GPUS:
        if re.search(pattern, gpu_line):
            return preset, tp
    return None, tp


def find_workload(text: str) -> MeasuredWorkload:
    decode_only = bool(re.search(r"pure decode|decode-only|decode_elapsed|T_TG", text))
    patterns = [
        r"input_len = output_len = (\d+)()",
        r"input length (\d+), output length (\d+)",
        r"prompt_len=(\d+), output_len=(\d+)",
        r"PP=(\d+), TG=(\d+)",
    ]
    for pattern in patterns:
        match = re.search(pattern, text)
        if match:
            inp = float(match.group(1))
            out = float(match.group(2) or match.group(1))
            return MeasuredWorkload(input_len=inp, output_len=out, decode_only=decode_only)
    share = re.search(r"(\d+) prompts, (\d+) input / ~(\d+)k output tokens", text)
    if share:
        n, inp, out = float(share.group(1)), float(share.group(2)), float(share.group(3)) * 1000
        return MeasuredWorkload(input_len=inp / n, output_len=out / n, decode_only=decode_only)
    return MeasuredWorkload(decode_only=decode_only)


def read_setup(provenance: list[str] | tuple[str, ...]) -> CurveSetup:
    text = "\n".join(provenance)
    hardware, tp = find_hardware(text)
    dtype = "bf16" if re.search(r"bf16|bfloat16", text, re.IGNORECASE) else "fp16"
    field = re.search(r"model:([^;\n]*)", text)  # the model field: up to the first ';' (the GPU and engine follow)
    if field and re.search(r"\bfp8\b(?![ -]?kv)", field.group(1), re.IGNORECASE):  # FP8 weights, not an FP8 KV cache
        dtype = "fp8"
    workload = find_workload(text)
    semantics = find_semantics(text, workload)
    workload = replace(
        workload,
        static=semantics.batch_kind == "static",
        decode_only=workload.decode_only or semantics.tpot_kind == "step",
    )
    return CurveSetup(find_model(text), hardware, tp, workload, dtype, semantics)
