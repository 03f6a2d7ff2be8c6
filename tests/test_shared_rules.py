"""Rules written once and read alike by every module that applies them (issue 24, review
finding 9): a budget id (`config.file_name_problem`, also `fragbench ledger show|verify|move`'s
BUDGET), and a plain amount (`columns.PLAIN_AMOUNT`: the config's money, the journal's and the
ledger's amounts). Each test asks every reader the same question and needs the same answer,
so a copy of the rule that drifts in one place fails it.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from support.cli import error_lines, run_cli

from fragbench.budget.ledger import amount_of
from fragbench.errors import EXIT_REFUSED, EXIT_USAGE, ConfigError, SeriesError
from fragbench.experiment.config import _Reader
from fragbench.files import file_name_problem
from fragbench.series.journal import chain, read_journal

IDS = ["demo", "a" * 64, "a" * 65, "team.budget-2026_q1", "../elsewhere", "/abs", "x/y", "",
       ".hidden", "-dash", "é", "a b", "a\nb", "١٢"]
"""At and past the 64-character bound, traversals, separators, other scripts' letters and
digits, white space."""


@pytest.mark.parametrize("budget", IDS)
def test_the_ledger_commands_take_a_budget_id_as_the_config_does(budget: str) -> None:
    """`fragbench ledger show BUDGET` refuses (exit 2, the config's words) exactly the ids a
    config's [budget] id refuses; an id it takes is looked up (no such ledger: exit 4)."""
    shown = run_cli("ledger", "show", "--", budget)
    (error,) = error_lines(shown.stderr)
    problem = file_name_problem(budget)
    if problem is None:
        assert shown.returncode == EXIT_REFUSED and "holds no record of budget" in error, error
    else:
        assert shown.returncode == EXIT_USAGE, error
        assert f"BUDGET is not a budget id: it {problem}" in error, error


AMOUNTS = ["0", "12", "12.50", "0.000000000000000001", "1.", ".5", "+1", "-1", "1e2", " 12",
           "12 ", "1_2", "١٢", "１２", "12.5.1", "0x10", "NaN", "Infinity", ""]
"""What Decimal() reads (signs, exponents, white space, underscores, other scripts' digits,
NaN) beside what `budget.usd` writes."""


def config_takes(amount: str) -> bool:
    try:
        _Reader(Path("config.toml"), {"ceiling_usd": amount}).money("ceiling_usd")
    except ConfigError:
        return False
    return True


def journal_takes(amount: str, tmp_path: Path) -> bool:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(chain([{"at": "t", "type": "header", "series": "s", "calls": 1},
                            {"at": "t", "type": "reserve", "call_id": "a", "seq": 1,
                             "reserved_usd": amount}]))
    try:
        read_journal(path)
    except SeriesError as exc:
        assert "reserved_usd" in str(exc)
        return False
    return True


@pytest.mark.parametrize("amount", AMOUNTS)
def test_config_journal_and_ledger_read_an_amount_alike(amount: str, tmp_path: Path) -> None:
    """One plain form of an amount, 0-9 with maybe a point and decimals: the config, the
    journal and the ledger take or refuse each text together."""
    plain = amount not in ("1.", ".5", "+1", "-1", "1e2", " 12", "12 ", "1_2", "١٢", "１２",
                           "12.5.1", "0x10", "NaN", "Infinity", "")
    assert config_takes(amount) is plain
    assert journal_takes(amount, tmp_path) is plain
    assert (amount_of(amount) is not None) is plain
    if plain:
        assert amount_of(amount) == Decimal(amount)
