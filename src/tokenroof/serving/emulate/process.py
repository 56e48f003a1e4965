"""`tokenroof emulate` or `serve` in a process of its own (its own core and GIL): what timing tests, benchmarks and
the real-server protocol run a server in, so that the client measuring it never shares its event loop."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tokenroof.errors import TokenroofError


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server_process(args: list[str], log: Path | None = None, start_timeout_s: float = 60.0) -> Iterator[str]:
    """Yields the base URL of `tokenroof ARGS --port P` in a subprocess once its /health answers; stops it after.
    Its output goes to `log` (else it is kept for the error should it not start)."""
    port = free_port()
    cmd = [sys.executable, "-m", "tokenroof", *args, "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(log.open("w")) if log is not None else subprocess.PIPE
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL if log is None else out, stderr=out)
        try:
            deadline = time.monotonic() + start_timeout_s
            while True:
                try:
                    with urllib.request.urlopen(url + "/health", timeout=1):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        proc.kill()
                        proc.wait(timeout=10)
                        if log is not None:
                            detail = log.read_text()
                        else:
                            detail = proc.stderr.read().decode() if proc.stderr else ""
                        raise TokenroofError(f"tokenroof {args[0]} did not start: {detail.strip()[-2000:]}") from None
                    time.sleep(0.1)
            yield url
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
            if proc.stderr is not None:
                proc.stderr.close()
