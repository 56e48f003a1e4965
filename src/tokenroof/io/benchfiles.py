"""tokenroof bench's own files: summary.json points as table rows, and requests.jsonl line by line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tokenroof.errors import TokenroofError
from tokenroof.io.table import SERVERS, Row, _batch, _dig, _number, loads_json
from tokenroof.model.stepmodel import mean_context_tokens
from tokenroof.specs.validate import read_text


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; an unreadable file or a bad line names itself."""
    lines = read_text(path).split("\n")  # JSON Lines end on \n only: U+2028 or U+0085 inside a string is text
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        rows.append((number, loads_json(line, f"{path}:{number}")))
    return rows


def _bench_summary(data: Mapping[str, Any], where: str, warnings: list[str]) -> tuple[list[Row], dict[str, Any]]:
    """tokenroof bench's summary.json: its valid points (batch = the running batch), each closed-loop one with its
    concurrency; the lengths from the requests' token counts."""
    rows, closed, rates, lengths = [], False, False, []
    for point in data["points"]:
        label = point.get("point", "?") if isinstance(point, Mapping) else "?"
        here = f"{where} {label}"
        if not isinstance(point, Mapping):
            raise TokenroofError(f"{here}: expected an object")
        if point.get("invalid"):
            warnings.append(f"{here}: left out ({point['invalid']})")
            continue
        kind = point.get("kind")
        prompt = _number(point.get("prompt_tokens_mean"), here, "prompt_tokens_mean")
        output = _number(point.get("output_tokens_mean"), here, "output_tokens_mean")
        context = mean_context_tokens(prompt, output) if prompt and output else None
        if prompt and output:
            lengths.append((prompt, output))
        closed |= kind == "concurrency"
        rates |= kind == "rate"
        rows.append(
            Row(
                _batch(point.get("batch"), here, "batch"),
                _number(point.get("throughput_tok_s"), here, "throughput_tok_s"),
                _number(_dig(point, "tpot_ms", "mean"), here, "tpot_ms.mean"),
                context,
                _number(_dig(point, "ttft_ms", "mean"), here, "ttft_ms.mean"),
                here,
                None,
                _number(point.get("value"), here, "value") if kind == "concurrency" else None,
            )
        )
    settings: dict[str, Any] = {"batch_kind": "running", "tpot_kind": "tpot", "client": "staggered"}
    if rates and not closed:
        settings["client"] = "poisson"
    if data.get("server") in SERVERS:  # what the server said of itself (bench's probe_server)
        settings["server"] = data["server"]
    if lengths:
        settings["input_len"], settings["output_len"] = (float(np.mean(v)) for v in zip(*lengths, strict=True))
    return rows, settings


def _is_bench_summary(data: Any) -> bool:
    points = data.get("points") if isinstance(data, Mapping) else None
    return isinstance(points, list) and any(isinstance(p, Mapping) and p.get("type") == "point" for p in points)
