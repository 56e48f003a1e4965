"""Does a test kill one mutant? Run test files against a mutant of the last `make mutation` run, without mutmut.

    python scripts/mutant_check.py 'tokenroof.fit.core.x_fit_table__mutmut_12' tests/test_fit_core.py
    python scripts/mutant_check.py --show 'tokenroof.fit.core.x_fit_table__mutmut_12'   # the change, as a diff

The named test files are copied into mutants/tests first (mutmut made that copy at its last run, so tests
written since are not in it), then run there with MUTANT_UNDER_TEST set: mutmut's own way of switching one
mutant on. Exit 0 means the mutant was killed (the tests failed); 1 means it survived (they passed). Several
checks may run at once: nothing here writes mutmut's records, so `make mutation` still has the last word.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
# pytest as mutmut runs it: [tool.mutmut]'s arguments (the markers it selects, heavy tests included; its deselections)
MUTMUT_ARGS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["pytest_add_cli_args"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mutant", help="a name as `mutmut results` prints it")
    parser.add_argument("tests", nargs="*", help="test files, or pytest node ids (tests/...)")
    parser.add_argument("--show", action="store_true", help="print the mutant's diff and stop")
    args = parser.parse_args()
    mutmut = str(Path(sys.executable).with_name("mutmut"))
    if args.show:
        return subprocess.run([mutmut, "show", args.mutant], cwd=ROOT).returncode
    if not (MUTANTS / "src").is_dir():
        raise SystemExit("no mutants/ yet: run `make mutation` (or a sample of it) once first")
    if not args.tests:
        raise SystemExit("name the test files to run")
    for test in args.tests:
        path = test.split("::")[0]
        shutil.copy2(ROOT / path, MUTANTS / path)
    for helper in ("tests/conftest.py", "tests/schemas.py"):
        shutil.copy2(ROOT / helper, MUTANTS / helper)
    env = {**os.environ, "MUTANT_UNDER_TEST": args.mutant, "PYTHONPATH": f"{MUTANTS / 'src'}{os.pathsep}{MUTANTS}"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:xdist", *MUTMUT_ARGS, *args.tests],
        cwd=MUTANTS,
        env=env,
        capture_output=True,
        text=True,
    )
    tail = run.stdout.strip().splitlines()[-1:] if run.stdout.strip() else []
    if run.returncode == 0:
        print(f"SURVIVED: {args.mutant} ({' '.join(tail)})")
        return 1
    if run.returncode == 1:
        print(f"killed: {args.mutant} ({' '.join(tail)})")
        return 0
    print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
    print(f"error: pytest exited {run.returncode} (not a test failure: a collection or usage error)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
