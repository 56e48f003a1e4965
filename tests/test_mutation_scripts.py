"""The mutation run's own tools (scripts/mutmut_budget.py, scripts/mutation_score.py): the budget that cuts a
mutant's tests, and the score table that says how many survivors met only part of theirs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


# the scripts import mutmut (half a second): on first use, not when every test process collects this file
@pytest.fixture(scope="module")
def mutmut_budget():
    sys.path.insert(0, str(SCRIPTS))
    import mutmut_budget

    return mutmut_budget


@pytest.fixture(scope="module")
def mutation_score(mutmut_budget):
    import mutation_score

    return mutation_score


DURATIONS = {"t_fast": 1.0, "t_mid": 4.0, "t_slow": 30.0, "t_tiny": 0.5}


def test_a_budget_keeps_the_fastest_tests_while_their_durations_sum_within_it(mutmut_budget):
    tests = ["t_slow", "t_mid", "t_fast", "t_tiny"]
    assert mutmut_budget.within(tests, DURATIONS, 5.5) == ["t_tiny", "t_fast", "t_mid"]  # 0.5 + 1 + 4 = 5.5
    assert mutmut_budget.within(tests, DURATIONS, 5.4) == ["t_tiny", "t_fast"]
    assert mutmut_budget.within(tests, DURATIONS, None) == ["t_tiny", "t_fast", "t_mid", "t_slow"]


def test_the_fastest_test_runs_even_when_it_alone_is_over_the_budget(mutmut_budget):
    assert mutmut_budget.within(["t_slow", "t_mid"], DURATIONS, 0.1) == ["t_mid"]


def test_the_last_log_entry_for_a_mutant_wins(tmp_path: Path, mutmut_budget):
    log = tmp_path / mutmut_budget.LOG
    log.parent.mkdir()
    entries = [
        {"mutant": "m.x_f__mutmut_1", "budget_s": 10.0, "tests": 3, "of": 9},
        {"mutant": "m.x_f__mutmut_2", "budget_s": 10.0, "tests": 2, "of": 2},
        {"mutant": "m.x_f__mutmut_1", "budget_s": None, "tests": 9, "of": 9},  # re-run with every test
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    budgets = mutmut_budget.last_budgets(tmp_path)
    assert budgets["m.x_f__mutmut_1"]["tests"] == 9
    assert budgets["m.x_f__mutmut_2"]["of"] == 2
    assert mutmut_budget.last_budgets(tmp_path / "elsewhere") == {}


def test_the_table_counts_as_cut_only_survivors_that_met_part_of_their_tests(mutation_score):
    statuses = {
        "pkg.a.x_f__mutmut_1": "killed",  # cut but killed: not counted
        "pkg.a.x_f__mutmut_2": "survived",  # cut: counted
        "pkg.a.x_f__mutmut_3": "survived",  # every test ran: not counted
        "pkg.a.x_f__mutmut_4": "timeout",
        "pkg.b.x_g__mutmut_1": "not checked",
    }
    budgets = {
        "pkg.a.x_f__mutmut_1": {"tests": 1, "of": 4},
        "pkg.a.x_f__mutmut_2": {"tests": 1, "of": 4},
        "pkg.a.x_f__mutmut_3": {"tests": 4, "of": 4},
    }
    rows = {line.split()[0]: line.split() for line in mutation_score.table(statuses, budgets).splitlines()[2:-2]}
    # killed, timeout, survived, no tests, suspicious, other, total, score, cut
    assert rows["pkg.a"][1:] == ["1", "1", "2", "0", "0", "0", "4", "50.0%", "1"]
    assert rows["pkg.b"][1:] == ["0", "0", "0", "0", "0", "1", "1", "nan%", "0"]
    assert rows["overall"][-1] == "1"
    assert "lower bound" in mutation_score.table(statuses, budgets)
    assert "lower bound" not in mutation_score.table(statuses, {})


@pytest.mark.parametrize("argv", [["--budget-s", "0", "run"], ["--budget-s", "-3", "run"]])
def test_a_budget_that_is_not_positive_is_refused(argv, mutmut_budget):
    with pytest.raises(SystemExit, match="positive"):
        mutmut_budget.main(argv)


def test_a_budget_needs_the_fork_runner_whose_submissions_it_cuts(monkeypatch: pytest.MonkeyPatch, mutmut_budget):
    from types import SimpleNamespace

    from mutmut.configuration import ProcessIsolation

    monkeypatch.setattr(mutmut_budget.ForkRunner, "submit", mutmut_budget.ForkRunner.submit)  # put back after
    server = SimpleNamespace(process_isolation=ProcessIsolation.FORKSERVER)
    monkeypatch.setattr(mutmut_budget, "config", lambda: server)
    with pytest.raises(SystemExit, match="process_isolation"):
        mutmut_budget.budgeted(10.0)
    mutmut_budget.budgeted(None)  # nothing cut: any runner runs every covering test


def test_the_score_script_refuses_a_budget_that_is_not_positive(
    monkeypatch: pytest.MonkeyPatch, capsys, mutation_score
):
    monkeypatch.setattr(sys, "argv", ["mutation_score.py", "--budget-s", "0"])
    with pytest.raises(SystemExit):
        mutation_score.main()
    assert "--budget-s must be positive" in capsys.readouterr().err
