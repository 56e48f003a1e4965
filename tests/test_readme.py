"""The documented examples still print what the docs say (scripts/readme_examples.py), and the checker catches drift."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.path.name}:{e.line}" for e in EXAMPLES])
def test_example_output_matches(example) -> None:
    actual = examples_script.run_example(example)
    assert examples_script.matches(example.expected, actual), (
        f"{example.name} drifted; run `python scripts/readme_examples.py --write {example.path.relative_to(ROOT)}`"
        f" and read the diff:\n{examples_script.diff(example, actual)}"
    )


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


def test_drift_is_named_then_written_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
