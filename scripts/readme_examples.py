"""Run the documented `$ tokenroof ...` examples and write their output under them, or check it has not drifted.

An example is a fenced code block whose first line is `$ tokenroof ARGS` (one command; a line ending in
`\\` continues it). The rest of the block is what the command prints as a user sees it: stdout and stderr
merged in the order written (warnings go to stderr), no colour, lines without trailing spaces, leading and
trailing blank lines dropped. A line that is exactly `...` stands for any number of lines (an excerpt).
Any other fenced block (first line `# not checked: ...`, `$ tokenroof emulate ... &` behind a comment) is
left alone: keep numbers that vary run to run (timings of this machine) out of `$ tokenroof` blocks.

Each command runs as `python -m tokenroof` with the interpreter running this script, in a fresh temporary
folder that links the repository's top-level folders (so `examples/...` resolves, and what a command
writes goes away with the folder), with stdout and stderr on one pipe. On a pipe the CLI renders its tables
120 columns wide whatever COLUMNS says (`tokenroof.cli.out`); COLUMNS=120 with LINES set gives stderr the
same width (rich ignores COLUMNS on TERM=dumb unless LINES is set too); NO_COLOR and TERM=dumb keep escape
codes out.

    python scripts/readme_examples.py --check [FILE.md ...]   exit 1 naming each example that drifted
    python scripts/readme_examples.py --write [FILE.md ...]   rewrite each example's output in place

Files default to README.md and docs/GUIDE.md (what tests/test_readme.py checks). An excerpt (`...`) that
still matches is kept; one that does not is rewritten in full, to be trimmed again by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "GUIDE.md")
PROMPT = "$ tokenroof "
ELLIPSIS = "..."
TIMEOUT_S = 120
WIDTH = 120  # the CLI's table width on a pipe (tokenroof.cli.out)
# Inherited variables that would change what rich prints: colour forced on, another width, a terminal claimed.
DROPPED_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES", "CLICOLOR_FORCE")
FIXED_ENV = {
    "COLUMNS": str(WIDTH),
    "LINES": "50",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "PYTHONUNBUFFERED": "1",  # stdout and stderr interleave as written, as on a terminal
    "PYTHONUTF8": "1",
}


@dataclass(frozen=True)
class Example:
    """One `$ tokenroof` block: where it is, the command's arguments and the output written under it."""

    path: Path
    line: int  # 1-based line of the `$ tokenroof` line
    command_lines: tuple[str, ...]  # the block's command lines as written (continuations included)
    expected: tuple[str, ...]  # the output lines written under the command
    body_start: int  # 0-based index of the block's first line (the command)
    body_end: int  # 0-based index of the closing fence

    @property
    def args(self) -> list[str]:
        text = " ".join(line.removesuffix("\\").strip() for line in self.command_lines)
        return shlex.split(text.removeprefix("$ tokenroof"))

    @property
    def name(self) -> str:
        """`README.md:57 tokenroof predict ...` (the command shortened to one readable line)."""
        command = "tokenroof " + " ".join(self.args)
        short = command if len(command) <= 80 else command[:77] + "..."
        return f"{self.path.name}:{self.line} {short}"


def find_examples(path: Path) -> list[Example]:
    """Every fenced block in `path` whose first line starts with `$ tokenroof `."""
    lines = path.read_text(encoding="utf-8").splitlines()
    examples = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(`{3,}|~{3,})", lines[i])
        if not fence:
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].startswith(fence.group(1)):
            end += 1
        if start < end and lines[start].startswith(PROMPT):
            command_end = start
            while lines[command_end].endswith("\\") and command_end + 1 < end:
                command_end += 1
            examples.append(
                Example(
                    path=path,
                    line=start + 1,
                    command_lines=tuple(lines[start : command_end + 1]),
                    expected=tuple(lines[command_end + 1 : end]),
                    body_start=start,
                    body_end=end,
                )
            )
        i = end + 1
    return examples


def clean_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in DROPPED_ENV}
    env.update(FIXED_ENV)
    return env


@contextlib.contextmanager
def scratch_folder() -> Iterator[Path]:
    """A fresh temporary folder linking the repository's top-level folders (what an example runs in)."""
    with tempfile.TemporaryDirectory(prefix="readme-example-") as folder:
        for entry in ROOT.iterdir():
            if entry.is_dir() and not entry.name.startswith("."):
                (Path(folder) / entry.name).symlink_to(entry, target_is_directory=True)
        yield Path(folder)


def run_example(example: Example) -> list[str]:
    """The command's merged output, normalised; a non-zero exit status or escape codes raise RuntimeError."""
    with scratch_folder() as folder:
        result = subprocess.run(
            [sys.executable, "-m", "tokenroof", *example.args],
            cwd=folder,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=TIMEOUT_S,
            check=False,
        )
    text = result.stdout.decode("utf-8")
    if result.returncode != 0:
        raise RuntimeError(f"{example.name}: exited {result.returncode}:\n{text}")
    if "\x1b[" in text:
        raise RuntimeError(f"{example.name}: the output carries terminal escape codes")
    return normalise(text)


def normalise(text: str) -> list[str]:
    """Lines without trailing spaces (rich pads them), leading and trailing blank lines dropped (a progress
    bar off a terminal prints one)."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(expected: list[str] | tuple[str, ...], actual: list[str]) -> bool:
    """Whether the output written under a command matches the actual output, a `...` line matching any lines."""
    pattern = "".join("(?:.*\n)*?" if line == ELLIPSIS else re.escape(line + "\n") for line in expected)
    return re.fullmatch(pattern, "".join(line + "\n" for line in actual)) is not None


def diff(example: Example, actual: list[str]) -> str:
    return "\n".join(difflib.unified_diff(list(example.expected), actual, "written", "now printed", lineterm="", n=1))


def check(paths: list[Path]) -> int:
    """Run every example; name and diff each one that drifted. Returns the exit status."""
    drifted = 0
    for path in paths:
        for example in find_examples(path):
            try:
                actual = run_example(example)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"FAILED {example.name}\n{exc}", flush=True)
                drifted += 1
                continue
            if matches(example.expected, actual):
                print(f"ok     {example.name}", flush=True)
            else:
                print(f"DRIFT  {example.name}\n{diff(example, actual)}", flush=True)
                drifted += 1
    if drifted:
        print(
            f"{drifted} example(s) no longer match: run `python scripts/readme_examples.py --write` and read the diff",
            file=sys.stderr,
        )
    return 1 if drifted else 0


def write(paths: list[Path]) -> int:
    """Rewrite each example's output under its command (keeping excerpts that still match)."""
    failed = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        # from the last block up, so earlier blocks' line numbers stay valid
        for example in reversed(find_examples(path)):
            try:
                actual = run_example(example)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"FAILED {example.name}\n{exc}", flush=True)
                failed += 1
                continue
            if matches(example.expected, actual):
                print(f"same   {example.name}", flush=True)
                continue
            note = " (its excerpt is now the full output: trim it again)" if ELLIPSIS in example.expected else ""
            print(f"wrote  {example.name}{note}", flush=True)
            lines[example.body_start : example.body_end] = [*example.command_lines, *actual]
        if "\n".join(lines) + "\n" != text:
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 naming each example that drifted")
    mode.add_argument("--write", action="store_true", help="rewrite each example's output in place")
    parser.add_argument("files", nargs="*", type=Path, default=list(DOCUMENTS))
    args = parser.parse_args(argv)
    return check(args.files) if args.check else write(args.files)


if __name__ == "__main__":
    sys.exit(main())
