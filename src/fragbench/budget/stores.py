"""Which store holds a budget's ledger: `ledger_for`, the one factory of both stores.

Apart from the stores themselves: the server store (`fragbench.budget.ledger_pg`) is built on the
file store's base class (`fragbench.budget.ledger`), so a factory beside that base class would close
an import circle. Every caller that opens a ledger for a run, a plan or a `fragbench ledger` command
comes here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fragbench.budget.ledger import Ledger, LedgerBase, ledger_path, ledger_url

if TYPE_CHECKING:
    from fragbench.budget.money import Budget


def ledger_for(budget: Budget | str) -> LedgerBase:
    """The budget's ledger in the store the environment selects (not read yet: `load` it).
    `budget` is the config's budget, or only its id to read a ledger whatever it fixes
    (`fragbench ledger show`)."""
    url = ledger_url()
    if url is not None:
        from fragbench.budget.ledger_pg import PgLedger  # psycopg only where a server is used

        return PgLedger(url, budget)
    return Ledger(ledger_path(budget if isinstance(budget, str) else budget.id), budget)
