from __future__ import annotations

import ast
import functools
import gc
import importlib.util
import io
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer.testing
from typer.testing import CliRunner, Result

from tokenroof.cli import app, normalize_argv

# PyTorch runs the tests' tiny models on one thread (set before anything imports torch; an explicit setting wins): on a
# busy 2-core machine its OpenMP threads wait on each other and the calibrate/bench-local tests take 4x as long
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
SEED_TABLE = ROOT / "examples" / "h100_7b_seed.csv"  # the founding question's table (a copy of shared/data/seed)
# `tokenroof serve` (llama-123m on one CPU thread) swept at 1-16 streams with TTFT: a real server's online table
SERVE_SWEEP = ROOT / "examples" / "serve-llama-123m-2026-12-06c" / "sweep" / "summary.csv"
DATA = ROOT / "tests" / "data"  # a published curve copied from shared/data/curves, with its source


def pytest_unconfigure(config: pytest.Config) -> None:
    """A test process leaves its objects to the operating system: without gc.freeze() the interpreter's last
    collections walk every object the run left (the fits, the simulations' sequences), 2-3 s of the suite's wall time
    that the run waits on its last worker for."""
    gc.freeze()


@pytest.fixture(autouse=True)
def _each_test_runs_its_own_at_cap() -> None:
    """at_cap keeps its runs for the process (serving/saturation.py): a test starts without another's, so one that
    patches what at_cap runs sees its patch run."""
    from tokenroof.serving.saturation import _kept_full

    _kept_full.cache_clear()


# torch costs a process ~1.5 s to import, and each pytest-xdist worker collects every test file: the files that need
# it import it in a module fixture (the first of their tests to run, on one worker) and skip without it by this mark
NEEDS_TORCH = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="needs PyTorch: pip install 'tokenroof[local]'"
)


@functools.cache
def source_tree(path: Path) -> ast.Module:
    """A module of the package parsed once per test process (the layout and the error-message tests walk every one;
    they read the trees and never change them)."""
    return ast.parse(path.read_text(encoding="utf-8"))


# typer's CliRunner builds the click command from the app on every invoke: 50 ms of signature introspection, 12 s
# of the suite's ~250 invocations. The app does not change while the tests run, so build it once per process.
typer.testing._get_command = functools.cache(typer.testing._get_command)


def run_cli(args: Sequence[str]) -> Result:
    """Drive the CLI as a user would (space-separated --batch lists included)."""
    return CliRunner().invoke(app, normalize_argv(list(args)))


def run_json(args: Sequence[str]) -> dict:
    result = run_cli([*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rendered(table: Callable[[Any, dict[str, Any]], None], data: dict[str, Any]) -> str:
    """The text a command prints for its answer `data` (its table, as cli.common.finish prints it), words separated
    by single spaces: a command's JSON and text from one run instead of two (plan's runs take seconds)."""
    from rich.console import Console

    console = Console(file=io.StringIO(), record=True, width=100)
    table(console, data)
    return " ".join(console.export_text().split())


# 2 layers, hidden 64, 4 heads of 16, 1 KV head, gated MLP 176, tied embeddings of 100 tokens
TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "vocab_size": 100,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    """A small Llama-shaped config.json written to disk."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_CONFIG))
    return path


# θ: fixed s, per-sequence s, log bandwidth efficiency, log compute efficiency[, KV s per context token]; each
# step is small against what θ moves (a step time of ~10 ms; b·ctx ~ 10^6 tokens multiplies the last)
STEP_FLOORS = np.array([1e-9, 1e-12, 1e-7, 1e-7, 1e-15])


def central_differences(fun: Callable[[np.ndarray], np.ndarray], theta: np.ndarray) -> np.ndarray:
    """The Jacobian of `fun` at θ by central differences (the prior fit's closed form is checked against it)."""
    return one_sided_differences(fun, theta)[0]


def one_sided_differences(
    fun: Callable[[np.ndarray], np.ndarray], theta: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Central, forward and backward difference Jacobians of `fun` at θ. Where θ sits on a kink (the step's max
    switching between the weights and the compute) the central one is the mean of the two sides, and a closed form
    that takes one side's derivative is still right."""
    central, forward, backward = [], [], []
    base = fun(theta)
    for j in range(theta.size):
        h = max(1e-6 * abs(theta[j]), STEP_FLOORS[j])
        up, down = theta.copy(), theta.copy()
        up[j] += h
        down[j] -= h
        f_up, f_down = fun(up), fun(down)
        central.append((f_up - f_down) / (2 * h))
        forward.append((f_up - base) / h)
        backward.append((base - f_down) / h)
    return np.column_stack(central), np.column_stack(forward), np.column_stack(backward)


def matches_a_difference(jacobian: np.ndarray, fun: Callable[[np.ndarray], np.ndarray], theta: np.ndarray) -> bool:
    """Every element of a closed-form Jacobian is the central difference, or at a kink one side's (rel 1e-3)."""
    close = [np.isclose(jacobian, d, rtol=1e-3, atol=1e-3) for d in one_sided_differences(fun, theta)]
    return bool(np.logical_or.reduce(close).all())


@pytest.fixture
def without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """`import ray` fails, as where the optional extra is not installed."""
    import builtins

    real_import = builtins.__import__

    def no_ray(name: str, *args: object, **kwargs: object) -> object:
        if name == "ray":
            raise ImportError("no ray")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_ray)
