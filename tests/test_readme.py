"""The documented examples still print what the docs say (scripts/readme_examples.py), and the checker catches drift.

The default run gives the examples to the CLI in this process (in the script's environment and kind of folder, without
an interpreter start-up each), all but those that take seconds (plan's search, fits with the physics prior or the
scheduler), and runs the first of them as the script does, `python -m tokenroof` in its own process. The slow run
(`make test-slow`) runs every other example that way.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tokenroof.cli import app, normalize_argv

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200  # a newcomer's page: the detail lives in docs/
COMMANDS_SHOWN = {"roofline", "predict", "advise", "simulate", "plan", "report"}  # each with checked output


def load_script():
    spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


examples_script = load_script()
EXAMPLES = [example for path in examples_script.DOCUMENTS for example in examples_script.find_examples(path)]
ENV = {**examples_script.FIXED_ENV, **dict.fromkeys(examples_script.DROPPED_ENV)}  # None: unset while it runs


def check_matches(example, actual: list[str]) -> None:
    assert examples_script.matches(example.expected, actual), (
        f"{example.name} drifted; run `python scripts/readme_examples.py --write {example.path.relative_to(ROOT)}`"
        f" and read the diff:\n{examples_script.diff(example, actual)}"
    )


def run_in_process(example) -> list[str]:
    """run_example's output without its process: stdout and stderr merged in the order written, in the same kind of
    scratch folder, with the same environment."""
    with examples_script.scratch_folder() as folder, contextlib.chdir(folder):
        result = CliRunner().invoke(app, normalize_argv(example.args), env=ENV)
    assert result.exit_code == 0, f"{example.name}: exited {result.exit_code}:\n{result.output}"
    assert "\x1b[" not in result.output, f"{example.name}: the output carries terminal escape codes"
    return examples_script.normalise(result.output)


def takes_seconds(example) -> bool:
    """plan (its search), predict or advise with a model (the physics prior's fit, or the scheduler's runs), and on
    SGLang's JSON Lines (its rate runs' open-loop replays, each rate searched over four samples of arrivals)."""
    command, flags = example.args[0], set(example.args[1:])
    fits = command in ("predict", "advise")
    return command == "plan" or (fits and bool(flags & {"-m", "--model"} or any(a.endswith(".jsonl") for a in flags)))


def example_id(example) -> str:
    return f"{example.path.name}:{example.line}"


QUICK = [example for example in EXAMPLES if not takes_seconds(example)]


@pytest.mark.parametrize("example", QUICK, ids=example_id)
def test_example_output_matches(example) -> None:
    check_matches(example, run_in_process(example))


@pytest.mark.parametrize(
    "example",
    [pytest.param(e, marks=() if e is QUICK[0] else pytest.mark.slow) for e in EXAMPLES],
    ids=example_id,
)
def test_example_output_matches_in_its_own_process(example) -> None:
    check_matches(example, examples_script.run_example(example))


def test_readme_is_short_and_checks_every_answering_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES, "README.md is a newcomer's page: move detail to docs/"
    shown = {example.args[0] for example in examples_script.find_examples(ROOT / "README.md")}
    assert shown >= COMMANDS_SHOWN, f"README.md has no checked example of {sorted(COMMANDS_SHOWN - shown)}"


def test_ellipsis_matches_any_run_of_lines_and_nothing_else() -> None:
    matches = examples_script.matches
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "b"], ["a", "b"])
    assert not matches(["a", "...", "d"], ["a", "b", "c"])
    assert not matches(["a", "b"], ["a", "b", "c"])
    assert not matches(["a.c"], ["abc"])  # a line is literal text, not a pattern


def test_drift_is_named_then_written_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(examples_script, "run_example", run_in_process)  # the checker's logic, not the process
    doc = tmp_path / "doc.md"
    doc.write_text("Intro.\n\n```\n$ tokenroof hardware\nno such output\n```\n\n```\n# not checked\n$ x\n```\n")
    assert examples_script.main(["--check", str(doc)]) == 1
    out = capsys.readouterr().out
    assert "DRIFT  doc.md:4 tokenroof hardware" in out
    assert "-no such output" in out

    assert examples_script.main(["--write", str(doc)]) == 0
    written = doc.read_text()
    [example] = examples_script.find_examples(doc)
    assert "no such output" not in written
    assert any(line.startswith("│ h100-sxm      │ NVIDIA H100 SXM5 80GB ") for line in example.expected)
    assert not any(line != line.rstrip() for line in example.expected)
    assert written.startswith("Intro.\n\n```\n$ tokenroof hardware\nhardware presets")
    assert written.endswith("```\n\n```\n# not checked\n$ x\n```\n")  # the unchecked block is left alone
