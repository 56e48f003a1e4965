"""`mutmut`, with each mutant's tests cut to a time budget: a full mutation run that fits in hours, not days.

    python scripts/mutmut_budget.py --budget-s 10 run --max-children 2      # as `mutmut run`, budgeted
    python scripts/mutmut_budget.py run --max-children 2 NAME...            # no budget: every covering test

mutmut runs, for each mutant, every test that reaches its function, fastest first, and stops at the first
failure. A killed mutant is cheap; a surviving one runs them all, and a function of the scheduler is reached by
~200 s of tests (plan and advise search through it), so a full run is 10-20 h on two cores. With a budget, a
mutant runs its covering tests fastest first only while their recorded durations (mutmut's own statistics) sum
to the budget (the fastest always runs). Dropping tests can only turn a kill into a survival, never the reverse,
so a budgeted score is a lower bound of the full one; re-running the survivors without a budget
(`scripts/mutation_score.py --survivors`) raises it towards the full score.

Each mutant sent to a test run is logged to mutants/budget.jsonl ({mutant, budget_s, tests, of}) so the score
table can say how many of the survivors met only part of their tests. The timeouts mutmut sets are worked out
from the tests that run (its own formula), so a hang is caught as quickly as in an unbudgeted run.
"""

from __future__ import annotations

import json
import sys
from math import ceil
from pathlib import Path

import mutmut.__main__ as mutmut_main
from mutmut.configuration import ProcessIsolation, config
from mutmut.state import state
from mutmut.workers.isolation import ForkRunner

LOG = Path("mutants") / "budget.jsonl"


def within(tests: list[str], durations: dict[str, float], budget_s: float | None) -> list[str]:
    """The tests a mutant runs: fastest first while their durations sum to budget_s (the fastest always)."""
    ordered = sorted(tests, key=lambda t: durations.get(t, 0.0))
    if budget_s is None:
        return ordered
    kept: list[str] = []
    spent = 0.0
    for test in ordered:
        if kept and spent + durations.get(test, 0.0) > budget_s:
            break
        kept.append(test)
        spent += durations.get(test, 0.0)
    return kept


def budgeted(budget_s: float | None) -> None:
    """Patch mutmut's fork runner so each mutant runs only the tests within budget_s, and log what it ran."""
    if budget_s is not None and config().process_isolation != ProcessIsolation.FORK:
        raise SystemExit("--budget-s cuts the tests mutmut's fork runner sends: leave process_isolation at 'fork'")
    submit = ForkRunner.submit

    def submit_within(self: ForkRunner, mutant_name: str, tests: list[str], cpu_limit: int, estimated: float) -> None:
        if tests:
            durations = state().duration_by_test
            kept = within(tests, durations, budget_s)
            estimated = sum(durations.get(t, 0.0) for t in kept)
            cfg = config()
            cpu_limit = ceil((estimated + cfg.timeout_constant) * cfg.timeout_multiplier * 2)
            with LOG.open("a") as log:
                entry = {"mutant": mutant_name, "budget_s": budget_s, "tests": len(kept), "of": len(tests)}
                log.write(json.dumps(entry) + "\n")
            tests = kept
        submit(self, mutant_name, tests, cpu_limit, estimated)

    ForkRunner.submit = submit_within  # type: ignore[method-assign]


def last_budgets(root: Path) -> dict[str, dict]:
    """mutant name → the last log entry for it (a later unbudgeted re-run replaces a budgeted one)."""
    path = root / LOG
    if not path.exists():
        return {}
    entries = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {entry["mutant"]: entry for entry in entries}


def main(argv: list[str]) -> None:
    budget_s = None
    if argv[:1] == ["--budget-s"]:
        budget_s = float(argv[1])
        if budget_s <= 0:
            raise SystemExit("--budget-s must be positive (leave it out to run every covering test)")
        argv = argv[2:]
    budgeted(budget_s)
    sys.argv = ["mutmut", *argv]
    mutmut_main.cli()


if __name__ == "__main__":
    main(sys.argv[1:])
