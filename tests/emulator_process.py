"""Start `tokenroof emulate` (or `serve`) in its own process (its own core and GIL) for timing tests and benchmarks;
or bench one point against an emulator in this process (`bench_in_process`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokenroof.serving.emulate.process import free_port, server_process

__all__ = ["bench_in_process", "emulator_health", "emulator_process", "free_port", "server_process"]


def bench_in_process(emulator: Any, **config: Any) -> dict[str, Any]:
    """Start `emulator` in this event loop, bench one point against it (BenchConfig's fields as keywords, the URL
    filled in), stop it, and return the point, checked against the JSON contract."""
    from tests.schemas import validate_bench_point  # jsonschema: a test dependency, not the benchmarks'
    from tokenroof.measure.http.run import BenchConfig, run_bench
    from tokenroof.serving.emulate.server import start

    async def main() -> list[dict[str, Any]]:
        runner, url = await start(emulator)
        try:
            return await run_bench(BenchConfig(url=url, **config))
        finally:
            await runner.cleanup()

    (point,) = asyncio.run(main())
    validate_bench_point(point)
    return point


@contextlib.contextmanager
def emulator_process(step_model: dict[str, float], tmp: Path, max_num_seqs: int = 512) -> Iterator[str]:
    """Yields the base URL of an emulator subprocess; stops it afterwards."""
    path = tmp / "step_model.json"
    path.write_text(json.dumps(step_model))
    with server_process(["emulate", "--step-model", str(path), "--max-num-seqs", str(max_num_seqs)]) as url:
        yield url


def emulator_health(url: str) -> tuple[float, int]:
    """The emulator's own self-check: mean delay of a step's end behind its plan, and schedule restarts.

    Late deliveries do not drift the schedule (steps start on absolute deadlines);
    only a restart (more than 50 ms behind) does.
    """
    values = {}
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name.split("{")[0]] = float(value)
    steps = values.get("tokenroof:steps_total", 0.0)
    mean = values.get("tokenroof:step_lateness_seconds_total", 0.0) / steps if steps else 0.0
    return mean, int(values.get("tokenroof:schedule_restarts_total", 0))
