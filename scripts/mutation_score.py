"""Run mutmut over the modules [tool.mutmut] names (pyproject.toml) and print the score per module and overall.

    python scripts/mutation_score.py                   # the full run (what `make mutation` does)
    python scripts/mutation_score.py --sample 40       # 40 mutants drawn per module (seeded): an estimate
    python scripts/mutation_score.py --no-run          # summarise the last run's results only
    python scripts/mutation_score.py --survivors       # re-run only the mutants the last run did not kill
    python scripts/mutation_score.py --budget-s 10     # each mutant's tests cut to 10 s: a lower bound, in hours

mutmut keeps its results in mutants/ and re-runs only what it has not checked (or what changed), so a second
full run is quick. Killed counts what a test caught; a timeout (the mutant made the tests hang) counts as
killed too, and is shown apart. Survived, "no tests" (no test in the run covers the function) and suspicious
count as not killed. --sample needs the mutants a run generated (mutants/*.meta); it re-runs the drawn ones.

mutmut is run through scripts/mutmut_budget.py, which logs the tests each mutant ran; with --budget-s a mutant runs
its covering tests fastest first only within that many seconds (mutmut's recorded durations). Fewer tests can
only lose kills, so such a score is a lower bound; the table counts the survivors that met only part of their
tests ("cut"), and --survivors without a budget re-runs them against all of them.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from mutmut_budget import last_budgets

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = [str(Path(sys.executable).with_name("mutmut"))]  # the venv's; `python -m mutmut run` warns
BUDGETED = [sys.executable, str(ROOT / "scripts" / "mutmut_budget.py")]
KILLED = ("killed", "timeout")
COLUMNS = ("killed", "timeout", "survived", "no tests", "suspicious", "other")


def module_of(name: str) -> str:
    """tokenroof.fit.core.xǁFitǁevaluate__mutmut_3 → tokenroof.fit.core"""
    found = re.match(r"^(.*?)\.x[_ǁ]", name)
    return found.group(1) if found else name


def mutant_names() -> list[str]:
    """Every mutant of the last generation, from mutmut's own records (mutants/**/*.meta)."""
    names = []
    for meta in sorted((ROOT / "mutants").rglob("*.meta")):
        names += list(json.loads(meta.read_text())["exit_code_by_key"])
    return names


def sample(per_module: int, seed: int) -> list[str]:
    by_module: dict[str, list[str]] = defaultdict(list)
    for name in mutant_names():
        by_module[module_of(name)].append(name)
    if not by_module:
        raise SystemExit("no mutants yet: run the full mutation run once (make mutation) to generate them")
    rng = random.Random(seed)
    return [n for mod in sorted(by_module) for n in rng.sample(by_module[mod], min(per_module, len(by_module[mod])))]


def results() -> dict[str, str]:
    """mutant name → status, as `mutmut results --all true` prints them."""
    out = subprocess.run([*MUTMUT, "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True, check=True)
    found = (re.match(r"^\s+(\S+): (.+)$", line) for line in out.stdout.splitlines())
    return {m.group(1): m.group(2).strip() for m in found if m}


def table(statuses: dict[str, str], budgets: dict[str, dict] | None = None) -> str:
    """The score per module; `budgets` (mutmut_budget.last_budgets) adds how many survivors ran only part of
    their covering tests (column "cut": each might be killed by the tests left out)."""
    budgets = budgets or {}
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in statuses.items():
        counts[module_of(name)][status if status in COLUMNS else "other"] += 1
        entry = budgets.get(name)
        if status not in KILLED and entry and entry["tests"] < entry["of"]:
            counts[module_of(name)]["cut"] += 1
    counts["overall"] = sum(counts.values(), Counter())
    head = f"{'module':<32}" + "".join(f"{c:>11}" for c in COLUMNS) + f"{'total':>8}{'score':>8}{'cut':>6}"
    lines = [head, "-" * len(head)]
    for mod in [*sorted(m for m in counts if m != "overall"), "overall"]:
        c = counts[mod]
        total = sum(c[k] for k in COLUMNS)
        done = total - c["other"]  # "other": not checked yet, skipped, interrupted
        score = sum(c[k] for k in KILLED) / done if done else float("nan")
        cells = "".join(f"{c[k]:>11}" for k in COLUMNS)
        lines.append(f"{mod:<32}{cells}{total:>8}{score:>8.1%}{c['cut']:>6}")
    lines.append("score = (killed + timeout) / checked; timeouts count as killed; 'other' (not checked) is left out")
    if counts["overall"]["cut"]:
        lines.append(
            "cut = survivors that ran only the covering tests within a time budget (--budget-s): the score is a lower"
            " bound; --survivors re-runs them against every covering test"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--sample", type=int, default=0, help="test this many mutants per module, drawn at random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-run", action="store_true", help="only summarise the recorded results")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="run each mutant's covering tests, fastest first, only within this many seconds (a lower-bound score)",
    )
    parser.add_argument(
        "--survivors", action="store_true", help="re-run only the mutants the last run did not kill (after new tests)"
    )
    args = parser.parse_args()
    if args.budget_s is not None and args.budget_s <= 0:
        parser.error("--budget-s must be positive (leave it out to run every covering test)")
    names = sample(args.sample, args.seed) if args.sample else []
    if args.survivors:
        names = [name for name, status in results().items() if status not in KILLED]
        print(f"re-running the {len(names)} mutants the last run did not kill")
        if not names:
            print(table(results(), last_budgets(ROOT)))
            return 0
    if not args.no_run:
        start = time.perf_counter()
        budget = ["--budget-s", str(args.budget_s)] if args.budget_s is not None else []
        command = [*BUDGETED, *budget, "run", "--max-children", str(args.max_children), *names]
        run = subprocess.run(command, cwd=ROOT)
        print(f"mutmut run: exit {run.returncode}, {time.perf_counter() - start:.0f} s")
    statuses = results()
    if names and not args.survivors:
        statuses = {n: statuses.get(n, "not checked") for n in names}
        print(f"a sample of {args.sample} mutants per module (seed {args.seed})")
    print(table(statuses, last_budgets(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
