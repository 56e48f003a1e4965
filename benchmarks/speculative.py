"""Speculative decoding's speed-up against published vLLM measurements.

"Speculative Decoding: Performance or Illusion?" (arXiv 2601.11580, specdecode-bench.github.io): vLLM 0.10.1 on one
H100 80GB, Llama-3.1-8B with an EAGLE head drafting k = 3 tokens, temperature 0, offline throughput with speculation
over without. The speed-ups are the paper's (GSM8K 1.73× at batch 1 and 1.21× at 128 are in its text; the others
read off its Fig. 1); the mean acceptance lengths (2.39 GSM8K, 2.25 ShareGPT) are NOT published: they were
derived by replaying the authors' released acceptance traces at k = 3, so this check rests on that derivation.
Prompt and output lengths: short prompts, long outputs; a context of 400 tokens is assumed.

    python benchmarks/speculative.py
"""

from __future__ import annotations

from tokenroof.model import roofline as rl
from tokenroof.model.speculative import measured_acceptance, speculation_from_specs
from tokenroof.specs import Precision, load_engine, load_hardware, load_model

CONTEXT = 400.0
PUBLISHED = {  # dataset: (mean acceptance length (derived), {batch: measured speed-up})
    "GSM8K": (2.39, {1: 1.73, 16: 1.68, 64: 1.47, 128: 1.21}),
    "ShareGPT": (2.25, {1: 1.68, 32: 1.61}),
}


def main() -> None:
    model, hardware, precision = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Precision()
    eff = rl.default_efficiencies(hardware, precision, load_engine("vllm-v1"), serving=False)
    target = rl.step_model_from_specs(model, hardware, precision, 1, eff)
    print("Llama-3.1-8B + EAGLE (k=3) on one H100, vLLM; speed-up = throughput with / without speculation")
    print(f"{'dataset':<10}{'E':>6}{'batch':>7}{'measured':>10}{'predicted':>11}{'error':>8}")
    errors = []
    for dataset, (length, measured) in PUBLISHED.items():
        drawn = measured_acceptance(1000, 3000, round((length - 1) * 1000))
        assert drawn is not None
        spec = speculation_from_specs(model, hardware, precision, 1, eff, "eagle", 3, (drawn.iid_rate(),))
        for batch, speedup in measured.items():
            predicted = spec.speedup(target, batch, CONTEXT)
            errors.append(predicted / speedup - 1)
            print(f"{dataset:<10}{length:>6.2f}{batch:>7}{speedup:>9.2f}×{predicted:>10.2f}×{errors[-1]:>+8.1%}")
    within = sum(abs(e) <= 0.15 for e in errors)
    median = sorted(abs(e) for e in errors)[len(errors) // 2]
    print(f"{within} of {len(errors)} points within 15%; median |error| {median:.1%}")


if __name__ == "__main__":
    main()
