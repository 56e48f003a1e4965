"""Start `tokenroof emulate` in its own process (its own core and GIL) for timing tests and benchmarks."""

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
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "tokenroof",
        "emulate",
        "--step-model",
        str(path),
        "--port",
        str(port),
        "--max-num-seqs",
        str(max_num_seqs),
    ]
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


def lateness_s(url: str) -> float:
    """The emulator's own worst step lateness (its self-check)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("tokenroof:step_lateness_max_seconds"):
                return float(line.split()[-1])
    return 0.0
