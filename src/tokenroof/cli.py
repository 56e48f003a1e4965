"""The `tokenroof` command: parse, call one library function, print a table or JSON."""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from tokenroof import render
from tokenroof.errors import TokenroofError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Decode throughput and TPOT against batch size: from first principles, from your measurements.",
)
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


def parse_numbers(text: str, what: str) -> list[float]:
    """`"1,8, 32"` → [1.0, 8.0, 32.0]; a bad item names itself."""
    values = []
    for item in text.replace(" ", ",").split(","):
        if not item:
            continue
        try:
            values.append(float(item))
        except ValueError:
            raise TokenroofError(f"{what}: '{item}' is not a number") from None
    return values


def handle_errors(func: F) -> F:
    """Turn a TokenroofError into one line on stderr and exit status 2 (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TokenroofError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
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
        err.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Preset name or path to a config.json.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", "-H", help="Preset name or path to a hardware TOML.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write a PNG figure to this path.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="Weight dtype: bf16, fp16, fp8, int8, int4, fp4, fp32.")]
KvDtypeOpt = Annotated[
    str | None,
    typer.Option("--kv-dtype", help="KV-cache dtype (default: weight dtype, or bf16 for quantised weights)."),
]
ComputeOpt = Annotated[
    str | None,
    typer.Option("--compute-dtype", help="Which tensor peak applies (default: weight dtype; bf16 for int4/int8)."),
]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel degree.")]


@app.command()
@handle_errors
def roofline(
    model: ModelOpt,
    hardware: HardwareOpt,
    batch: Annotated[str, typer.Option(help="Batch sizes: '1,8,32' or '1 8 32'.")] = "1,2,4,8,16,32,64,128,256,512",
    context: Annotated[float, typer.Option(help="Tokens in each sequence's KV cache.")] = 1024,
    dtype: DtypeOpt = "bf16",
    kv_dtype: KvDtypeOpt = None,
    compute_dtype: ComputeOpt = None,
    tp: TpOpt = 1,
    bandwidth_efficiency: Annotated[float, typer.Option(help="Achieved fraction of peak memory bandwidth.")] = 0.75,
    compute_efficiency: Annotated[float, typer.Option(help="Achieved fraction of dense peak FLOP/s.")] = 0.75,
    overhead_ms: Annotated[float, typer.Option(help="Fixed per-step overhead (scheduler, launches).")] = 1.0,
    memory_utilization: Annotated[
        float, typer.Option(help="Fraction of memory for weights + KV (vLLM --gpu-memory-utilization).")
    ] = 0.9,
    prompt_tokens: Annotated[float | None, typer.Option(help="Also estimate TTFT for a prompt this long.")] = None,
    json_output: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """First-principles decode roofline: TPOT, throughput and the binding resource at each batch."""
    from tokenroof.analysis import analyze_roofline
    from tokenroof.roofline import Efficiencies
    from tokenroof.specs import Precision, load_hardware, load_model

    result = analyze_roofline(
        load_model(model),
        load_hardware(hardware),
        Precision.create(dtype, kv_dtype, compute_dtype),
        parse_numbers(batch, "--batch"),
        context,
        tp,
        Efficiencies(bandwidth_efficiency, compute_efficiency, overhead_ms / 1e3),
        memory_utilization,
        prompt_tokens,
    )
    data = result.to_dict()
    if plot is not None:
        from tokenroof.plots import plot_roofline

        plot_roofline(result, plot)
    if json_output:
        emit_json(data)
    else:
        render.roofline(out, data)
        warn_all(data["warnings"])
        if plot is not None:
            err.print(f"wrote {plot}")


@app.command("models")
def list_models_cmd() -> None:
    """List the model presets."""
    from tokenroof.specs import list_models, load_model

    render.model_list(out, [load_model(name) for name in list_models()])


@app.command("hardware")
def list_hardware_cmd() -> None:
    """List the hardware presets with their dense peaks and sources."""
    from tokenroof.specs import list_hardware, load_hardware

    render.hardware_list(out, [load_hardware(name) for name in list_hardware()])


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point."""
    args = normalize_argv(sys.argv[1:] if argv is None else argv)
    app(args=args, prog_name="tokenroof")
