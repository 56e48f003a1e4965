"""Start `tokenroof emulate` (or `serve`) in its own process (its own core and GIL) for timing tests and benchmarks."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def emulator_process(step_model: dict[str, float], tmp: Path, max_num_seqs: int = 512) -> Iterator[str]:
    """Yields the base URL of an emulator subprocess; stops it afterwards."""
    path = tmp / "step_model.json"
    path.write_text(json.dumps(step_model))
    with server_process(["emulate", "--step-model", str(path), "--max-num-seqs", str(max_num_seqs)]) as url:
        yield url


@contextlib.contextmanager
def server_process(args: list[str]) -> Iterator[str]:
    """Yields the base URL of `tokenroof ARGS --port P` (emulate or serve) in a subprocess; stops it afterwards."""
    port = free_port()
    cmd = [sys.executable, "-m", "tokenroof", *args, "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    detail = proc.stderr.read().decode() if proc.stderr else ""
                    raise RuntimeError(f"emulator did not start: {detail}") from exc
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


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
