"""errors.py: the library names parameters, the command line and the page name flags, from one template."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import run_cli, source_tree
from tokenroof.errors import ParameterError, TokenroofError, flag_of, prefixed

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenroof"


def test_one_template_two_spellings() -> None:
    exc = ParameterError("give {} or {}, not both (a {path} kept)", "critical_batch", "context_tokens")
    assert str(exc) == "give critical_batch or context_tokens, not both (a {path} kept)"
    assert exc.as_flags() == "give --critical-batch or --context, not both (a {path} kept)"
    with pytest.raises(ValueError, match=r"has 1 '\{\}' for 2 parameters"):
        ParameterError("{} only", "a", "b")
    assert TokenroofError("a file").as_flags() == "a file"
    assert (flag_of("max_num_seqs"), flag_of("rate_req_s"), flag_of("tp")) == (
        "--max-num-seqs",
        "--request-rate",
        "--tp",
    )


def test_a_prefix_keeps_the_parameters() -> None:
    exc = prefixed(ParameterError("{} must be ≥ 1", "tp"), "at context {8192}: ")
    assert isinstance(exc, ParameterError)
    assert (str(exc), exc.as_flags()) == ("at context {8192}: tp must be ≥ 1", "at context {8192}: --tp must be ≥ 1")
    assert str(prefixed(TokenroofError("bad"), "x: ")) == "x: bad"


def test_the_command_line_says_the_flag() -> None:
    result = run_cli(["roofline", "-m", "llama-2-7b", "-H", "h100-sxm", "--tp", "3"])
    assert result.exit_code == 2 and "error: --tp 3 does not divide llama-2-7b's 32 attention heads" in result.stderr


def test_the_library_names_no_flag() -> None:
    """Outside the command line (cli/) and the page (ui/), no error message spells a flag: a ParameterError names
    the parameter and lets them spell it."""
    flagged = []
    for path in SRC.rglob("*.py"):
        if path.parts[-2] in ("cli", "ui"):
            continue
        for node in ast.walk(source_tree(path)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TokenroofError" and node.args:
                text = ast.unparse(node.args[0])
                if " --" in text or "'--" in text or '"--' in text or "(--" in text:
                    flagged.append(f"{path.relative_to(SRC)}:{node.lineno}: {text[:80]}")
    # what wrote a file ("--json writes null", "a bench or simulate --out folder", "a tokenroof bench --out folder")
    # and another tool's flag (vllm bench serve, sglang.bench_serving or aiperf --max-concurrency): not parameters
    allowed = {
        "io/contract.py",
        "report/sources.py",
        "io/measurements.py",
        "io/vllm.py",
        "io/sglang.py",
        "io/genaiperf.py",
    }
    assert [f for f in flagged if f.split(":")[0] not in allowed] == []


def template_and_parameters(node: ast.Call) -> tuple[str, int] | None:
    """The literal text of a ParameterError's template (f-string parts' constants; `{{}}` reads as `{}` there) and
    how many parameters follow it."""
    first = node.args[0]
    text = ""
    for part in ast.walk(first):
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            text += part.value
    if any(isinstance(a, ast.Starred) for a in node.args) or not text:
        return None  # a template built elsewhere (errors.prefixed): checked where it was first written
    return text, len(node.args) - 1


def test_every_parameter_error_has_one_placeholder_per_parameter() -> None:
    """A miscounted template would raise ValueError where a one-line message was due: every call site checked."""
    calls = 0
    for path in SRC.rglob("*.py"):
        for node in ast.walk(source_tree(path)):
            name = getattr(node.func, "id", None) if isinstance(node, ast.Call) else None
            if name == "require" and path.name == "config.py":  # measure/http/config.py: require(ok, template, ...)
                node = ast.Call(node.func, node.args[1:], [])
                name = "ParameterError"
            if name == "ParameterError" and node.args:
                found = template_and_parameters(node)
                if found is not None:
                    text, n = found
                    assert text.count("{}") == n, f"{path.relative_to(SRC)}:{node.lineno}: {text!r} for {n}"
                    calls += 1
    assert calls >= 70


def test_a_value_with_braces_stays_as_it_is() -> None:
    """`verbatim` keeps a value's own '{}' out of the template's parameter places, and shows it unchanged."""
    from tokenroof.errors import verbatim

    error = ParameterError(f"{verbatim('a{}b')} and {{}}", "max_num_seqs")
    assert str(error) == "a{}b and max_num_seqs" and error.as_flags() == "a{}b and --max-num-seqs"
