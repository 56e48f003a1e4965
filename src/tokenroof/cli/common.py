"""What every command shares: the Typer app, the consoles, the option types, error handling and output."""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from tokenroof.errors import ParameterError, TokenroofError
from tokenroof.params import FLAG_RANGES, check_flags, parse_numbers  # noqa: F401 (the commands take them from here)

if TYPE_CHECKING:
    from tokenroof.model.prefix import SharedPrefix
    from tokenroof.serving.simulate import Lengths

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Decode throughput and TPOT against batch size: from first principles, from your measurements, from a "
    "server under load; and the batch cap and replicas to run.",
)


def version_string() -> str:
    """`tokenroof X.Y.Z (Python A.B.C)`: the installed distribution's version (or the source tree's, unbuilt)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("tokenroof")
    except PackageNotFoundError:
        mine = "unknown (not installed)"
    return f"tokenroof {mine} (Python {sys.version.split()[0]})"


def show_version(value: bool) -> None:
    if value:
        typer.echo(version_string())
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=show_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="Any command's flags from a TOML file: top-level keys for every command, a table named for a command "
            "for that one (also accepted after the command); flags given here win.",
        ),
    ] = None,
) -> None:
    """Decode throughput and TPOT against batch size: from first principles, from your measurements, from a server
    under load; and the batch cap and replicas to run."""
    if config is not None:  # `tokenroof --config F cmd` reaching the app directly (main() takes it out first)
        from tokenroof.cli.config import default_map

        try:
            ctx.default_map = default_map(config, ctx.command, ctx.invoked_subcommand)
        except TokenroofError as exc:
            err.print(f"[bold red]error:[/] {escape(exc.as_flags())}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None


out = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])
NUMBER = re.compile(r"^-?[0-9][0-9.,eE+-]*$|^-?\.[0-9][0-9.,eE+-]*$|^-?(inf|nan)$", re.IGNORECASE)
LIST_OPTIONS = ("--batch",)


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Let list options take space-separated values: `--batch 256 512` → `--batch 256,512`."""
    result: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        result.append(token)
        i += 1
        if token in LIST_OPTIONS:
            values = []
            while i < len(argv) and NUMBER.match(argv[i]):
                values.append(argv[i])
                i += 1
            if values:
                result.append(",".join(values))
    return result


def handle_errors(func: F) -> F:
    """Check the numeric flags, then turn a TokenroofError into one line on stderr and exit status 2 (no
    traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            check_flags(kwargs)
            return func(*args, **kwargs)
        except TokenroofError as exc:
            err.print(f"[bold red]error:[/] {escape(exc.as_flags())}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def emit_json(data: dict[str, Any]) -> None:
    """One JSON object on stdout; infinities become null."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        return value

    sys.stdout.write(json.dumps(clean(data), indent=2) + "\n")


def warn_all(warnings: Sequence[str]) -> None:
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)


def progress_bar(hidden: bool, transient: bool = False) -> Any:
    """A rich progress bar on stderr (description, bar, done/total, elapsed); `hidden` for --json runs."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=err, disable=hidden, transient=transient)


def finish(
    data: dict[str, Any],
    table: Callable[[Console, dict[str, Any]], None],
    json_output: bool,
    plot: Path | None = None,
    draw: Callable[[Path], None] | None = None,
) -> None:
    """Write the plot if asked, then print JSON or the table followed by the warnings."""
    if plot is not None and draw is not None:
        draw(plot)
    if json_output:
        emit_json(data)
        return
    table(out, data)
    warn_all(data.get("warnings", []))
    if plot is not None:
        err.print(f"wrote {plot}")


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Preset name or path to a config.json.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", "-H", help="Preset name or path to a hardware TOML.")]
JsonOpt = Annotated[bool, typer.Option("--json/--no-json", help="Print one JSON object instead of tables.")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write a PNG figure to this path.")]


def checkpoint_unless_given(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """`--dtype` left out is None whatever default a command declares: the checkpoint's quantization_config
    (AWQ, GPTQ, FP8, ...), else bf16 (`Precision.create`)."""
    source = ctx.get_parameter_source(param.name) if param.name else None
    return None if source is None or source.name == "DEFAULT" else value


DtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        callback=checkpoint_unless_given,
        show_default="the checkpoint's quantization_config, else bf16",
        help="Weight dtype: bf16, fp16, fp8, int8, int4, fp4, fp32.",
    ),
]
KvDtypeOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-dtype",
        "--kv-cache-dtype",
        help="KV-cache dtype (vLLM's --kv-cache-dtype; default: weight dtype, or bf16 for quantised weights, or the "
        "--engine's own: TensorRT-LLM's fp8 under fp8 weights).",
    ),
]
ComputeOpt = Annotated[
    str | None,
    typer.Option("--compute-dtype", help="Which tensor peak applies (default: weight dtype; bf16 for int4/int8)."),
]
TpOpt = Annotated[
    int, typer.Option("--tp", "--tensor-parallel-size", help="Tensor-parallel degree (vLLM's --tensor-parallel-size).")
]
EngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        show_default="generic: the profile-free defaults",
        help="Serving engine profile for first principles: vllm-v0, vllm-v1, sglang, tensorrt-llm, tgi, lmdeploy, "
        "llama-cpp, fastertransformer, pytorch-eager (or an engine .toml path). Sets the efficiencies, the "
        "per-step and per-sequence overheads, and the spread of the intervals.",
    ),
]
EagerOpt = Annotated[
    bool,
    typer.Option(
        "--enforce-eager/--no-enforce-eager",
        help="The --engine without CUDA graphs (vllm-v0, vllm-v1: vLLM's flag, and vLLM before 0.2.5; tgi: "
        "--cuda-graphs 0, and TGI before 1.3): the host launches every layer's kernels each step and binds at "
        "small batch and high --tp. An estimate: the interval widens.",
    ),
]
MemoryFractionOpt = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        "--memory-utilization",
        show_default="the --engine's own: 0.9 of the whole memory (vLLM), 0.9 of what the weights leave (TensorRT-LLM)",
        help="The share of each GPU's memory the server fills, which sizes its KV cache: vLLM's "
        "--gpu-memory-utilization (of the whole memory: weights, activations, KV cache), read as the --engine reads "
        "its own setting (TensorRT-LLM's --kv_cache_free_gpu_memory_fraction, LMDeploy's --cache-max-entry-count: of "
        "what the weights leave; SGLang's --mem-fraction-static).",
    ),
]
BudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--max-num-batched-tokens",
        help="Token budget per step, decodes and prompt chunks (vLLM's --max-num-batched-tokens; TGI's "
        "--max-batch-prefill-tokens, its prefill steps'; default: the --engine's own, else whole prompts).",
    ),
]
FitOpt = Annotated[
    list[Path] | None,
    typer.Option(
        help="Step model fitted to these measurements, as predict does: a CSV, vLLM/GuideLLM/AIPerf JSON files, SGLang "
        "bench_serving JSON Lines or bench folders (repeat --fit for several)."
    ),
]
SpeculativeOpt = Annotated[
    str | None,
    typer.Option(
        "--speculative-config",
        help='Speculative decoding, as vLLM\'s flag: \'{"method": "ngram"|"eagle"|"eagle3"|"mtp"|'
        '"draft_model", "num_speculative_tokens": 3, "model": DRAFT}\' (DRAFT: a preset or config.json).',
    ),
]
AcceptanceOpt = Annotated[
    str | None,
    typer.Option(
        "--acceptance-rate",
        help="With --speculative-config: the chance a drafted token is accepted, '0.7', or one per drafted position "
        "'0.8,0.6,0.5' (bench on a speculating vLLM measures it).",
    ),
]


PrefixLenOpt = Annotated[
    int,
    typer.Option(
        "--prefix-len",
        help="Tokens at the start of each prompt shared with other requests (a system prompt, few-shot examples): "
        "part of --input-len, as vllm bench serve's prefix_repetition dataset (default 0: none).",
    ),
]
NumPrefixesOpt = Annotated[
    int, typer.Option("--num-prefixes", help="Distinct shared prefixes, one drawn per request (with --prefix-len).")
]
PrefixCachingOpt = Annotated[
    bool | None,
    typer.Option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="Whether the server keeps computed prompt blocks and shares them (default on, as vLLM V1 and SGLang; "
        "plan with --prefix-len weighs both).",
        show_default=False,
    ),
]


def shared_prefix(prefix_len: int, num_prefixes: int, input_len: float | None) -> SharedPrefix:
    """The prompts' shared prefix from the flags (--prefix-len, --num-prefixes), checked against --input-len."""
    from tokenroof.model.prefix import SharedPrefix

    if num_prefixes != 1 and prefix_len == 0:
        raise ParameterError("{} counts shared prefixes: give their length, {}", "num_prefixes", "prefix_len")
    if prefix_len > 0 and input_len is not None and prefix_len >= input_len:
        raise ParameterError(
            f"{{}} ({prefix_len}) is part of the prompt: it must be shorter than {{}} ({input_len:g})",
            "prefix_len",
            "input_len",
        )
    return SharedPrefix(prefix_len, num_prefixes)


def prompt_lengths(input_len: int, dist: str, spread: float, prefix_len: int, num_prefixes: int) -> Lengths:
    """The prompts' lengths and shared prefix (simulate.PromptLengths) from the flags."""
    from tokenroof.serving.simulate import PromptLengths

    return PromptLengths(input_len, dist, spread, shared_prefix(prefix_len, num_prefixes, input_len))


InputDistOpt = Annotated[
    str, typer.Option(help="How prompt lengths spread about --input-len: fixed, uniform or lognormal.")
]
OutputDistOpt = Annotated[
    str, typer.Option(help="How output lengths spread about --output-len: fixed, uniform or lognormal.")
]
SpreadOpt = Annotated[
    float | None,
    typer.Option(show_default="0.5", help="Uniform ± fraction (at most 1), or lognormal sigma, of the drawn lengths."),
]


def spread_of(spread: float | None, input_dist: str, output_dist: str) -> float:
    """--spread as the lengths take it: 0.5 unless given; given beside two fixed lengths it spreads nothing: said."""
    if spread is not None and input_dist == "fixed" and output_dist == "fixed":
        raise TokenroofError(
            f"--spread {spread:g} spreads nothing: both lengths are fixed (give --input-dist or --output-dist uniform "
            "or lognormal)"
        )
    return 0.5 if spread is None else spread


PrefillTpOpt = Annotated[
    int | None,
    typer.Option(
        "--prefill-tp",
        help="Disaggregated prefill: the prefill pool's tensor parallelism (default: --tp, the decode pool's); "
        "first principles only.",
    ),
]
PrefillHardwareOpt = Annotated[
    str | None,
    typer.Option(
        "--prefill-hardware",
        help="Disaggregated prefill: the prefill pool's hardware, preset or TOML (default: --hardware, the decode "
        "pool's; Splitwise's compute-rich prompt machines); first principles only, billed at its own price and power. "
        "plan weighs several, comma-separated, and keeps the cheapest split.",
    ),
]
PrefillReplicasOpt = Annotated[
    int | None,
    typer.Option(
        "--prefill-replicas",
        help="Disaggregated prefill: replicas that only prefill (with --decode-replicas; instead of --replicas).",
    ),
]
DecodeReplicasOpt = Annotated[
    int | None,
    typer.Option(
        "--decode-replicas", help="Disaggregated prefill: replicas that only decode, each prompt's KV sent to them."
    ),
]
ReplicasOpt = Annotated[int, typer.Option("--replicas", help="Replicas behind the router.")]
RouterOpt = Annotated[
    str,
    typer.Option(
        "--router",
        help="round-robin, least-outstanding, random (each request to a replica at random: Poisson arrivals stay "
        "Poisson at each replica, where round-robin smooths them), or prefix (a shared prefix to the replica that "
        "took it first, for its prefix cache; the fewest outstanding while the fleet is imbalanced: SGLang's router).",
    ),
]
KvTransferOpt = Annotated[
    float,
    typer.Option(
        "--kv-transfer-gb-s",
        help="Disaggregated prefill: the link prefill replicas send KV over, GB/s each (default: one 400 Gb/s NIC).",
    ),
]


GpuCostOpt = Annotated[
    float | None,
    typer.Option(
        "--gpu-cost-per-hour",
        help="Price of one GPU-hour (US$): $ per million output and prompt tokens (default: the hardware file's).",
    ),
]
PrefillGpuCostOpt = Annotated[
    float | None,
    typer.Option(
        "--prefill-gpu-cost-per-hour",
        help="With --prefill-hardware: the price of one of its GPU-hours (US$; default: its hardware file's).",
    ),
]


def speculative_config(text: str | None, acceptance: str | None) -> Any:
    """--speculative-config and --acceptance-rate as one `SpeculativeConfig` (None: no speculation)."""
    from tokenroof.model.speculative import parse_speculative_config

    if text is None:
        if acceptance is not None:
            raise TokenroofError("--acceptance-rate goes with --speculative-config")
        return None
    return parse_speculative_config(text, acceptance)


StepModelFileOpt = Annotated[Path | None, typer.Option(help="Step model terms from a JSON file (StepModel fields).")]
SloStatisticOpt = Annotated[
    str, typer.Option(help="Which statistic of the per-request TTFT/TPOT the targets bound: mean, p50, p90 or p99.")
]


OptModel = Annotated[
    str | None, typer.Option("--model", "-m", help="Model preset or config.json: enables the physics prior.")
]
OptHardware = Annotated[
    str | None, typer.Option("--hardware", "-H", help="Hardware preset or TOML: enables the physics prior.")
]
InputLenOpt = Annotated[float | None, typer.Option(help="Prompt tokens per request in the measured workload.")]
OutputLenOpt = Annotated[float | None, typer.Option(help="Output tokens per request in the measured workload.")]
DecodeOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--decode-only/--no-decode-only", help="TPOT was measured on pure decode steps (no prefill mixed in)."
    ),
]
ContextOpt = Annotated[
    float | None, typer.Option("--context", help="Mean tokens in each sequence's KV cache (default: input + output/2).")
]
